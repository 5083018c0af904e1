"""Mixed-type quasi-identifiers (engine/encode/mixed.py) against the slow reference
(tests/reference_mixed.py), their invariants, and bad input."""

import datetime as dt

import numpy as np
import polars as pl
import pytest

import engine
import reference_mixed as refmix
from engine.errors import EngineError
from engine.tuning import EMBED_DIMS

ORDER = ["low", "mid", "high", "top"]


def mixed_table(rng, n, dates=True):
    t = pl.DataFrame({
        "x": rng.normal(size=n),
        "colour": rng.choice(["red", "green", "blue"], n),
        "grade": rng.choice(ORDER[:3], n),  # "top" never occurs: ranks still over the whole order
        "flag": rng.random(n) < 0.3,
        "other": np.arange(n),
    })
    if dates:
        t = t.with_columns(pl.Series("day", (dt.date(2000, 1, 1) + dt.timedelta(days=int(d))
                                             for d in rng.integers(0, 3000, n)), dtype=pl.Date))
    return t


QI = ["x", "colour", "grade", "flag", "day"]


@pytest.mark.parametrize("method", ["mdav", "mdav-single", "vmdav", "ivmdav"])
@pytest.mark.parametrize("n,k,seed", [(23, 2, 0), (60, 3, 1), (157, 5, 2), (200, 4, 3)])
def test_exact_matches_reference(method, n, k, seed):
    rng = np.random.default_rng(seed)
    t = mixed_table(rng, n)
    weights = {"x": 2.0, "colour": 1.5} if seed % 2 else None
    res = engine.microaggregate(t, QI, k, method=method, ordinal={"grade": ORDER}, weights=weights)
    want = refmix.labels(t, QI, k, method, ordinal={"grade": ORDER}, weights=weights)
    np.testing.assert_array_equal(res.labels, want)
    pub = refmix.publish(t, QI, want, ordinal={"grade": ORDER})
    out = res.table
    np.testing.assert_allclose(out["x"].to_numpy(), pub["values"]["x"], rtol=1e-12, atol=1e-12)
    assert out["colour"].to_list() == pub["values"]["colour"]
    assert out["grade"].to_list() == pub["values"]["grade"]
    assert out["flag"].cast(pl.String).to_list() == pub["values"]["flag"]
    days = out["day"].to_physical().cast(pl.Float64).to_numpy()
    np.testing.assert_array_equal(days, pub["values"]["day"])
    for c in QI:
        assert res.report.information_loss_by_qi[c] == pytest.approx(pub["il"][c], rel=1e-9, abs=1e-9)
    assert res.report.information_loss_percent == pytest.approx(pub["combined"], rel=1e-9)
    assert out["other"].to_list() == t["other"].to_list()


def test_distance_of_the_encoding_is_the_heterogeneous_distance():
    """Two records: nominal categories differ -> w, ordinal by scaled rank, numeric z."""
    rng = np.random.default_rng(5)
    t = mixed_table(rng, 40, dates=False)
    src = engine.io.source.open_source(t)
    from engine.encode import mixed
    from engine.options import RunConfig
    cfg = RunConfig.make(qi=QI[:4], k=3, ordinal={"grade": ORDER}, weights={"colour": 3.0})
    m = mixed.plan(src, cfg, 1000)
    from engine.passes.profile import profile_columns
    from engine.passes.stitch import standardize
    prof = profile_columns(m.source, m.cfg.qi, 1000)
    X = np.vstack([a for _, a in m.source.iter_arrays(m.cfg.qi, 1000)])
    Z = standardize(X, prof)[:, m.grouping]
    meta = refmix.describe(t, QI[:4], {"grade": ORDER}, {"colour": 3.0})
    N = refmix.natural(meta)
    run = refmix.HetRun(N, meta)
    for i, j in [(0, 1), (2, 7), (5, 30), (11, 12)]:
        assert float(((Z[i] - Z[j]) ** 2).sum()) == pytest.approx(float(run.dists(np.array([i]), N[j])[0]), rel=1e-12)
    # the nominal part alone: 0 for equal categories, the weight for different ones
    a, b = m.qis[1].first, m.qis[1].first + m.qis[1].width
    Zc = standardize(X, prof)[:, a:b]
    for i, j in [(0, 1), (2, 7), (5, 30), (11, 12)]:
        want = 3.0 if t["colour"][i] != t["colour"][j] else 0.0
        assert float(((Zc[i] - Zc[j]) ** 2).sum()) == pytest.approx(want, rel=1e-12)


def _classes_ok(out, qi, k):
    counts = out.group_by(qi).len()
    return int(counts["len"].min()) >= k


@pytest.mark.parametrize("seed", range(6))
def test_invariants_and_dtypes(seed):
    rng = np.random.default_rng(100 + seed)
    n = int(rng.integers(12, 400))
    k = int(rng.integers(2, 6))
    t = mixed_table(rng, n).with_columns(
        pl.col("colour").cast(pl.Categorical).alias("cat"),
        pl.col("grade").cast(pl.Enum(ORDER)).alias("enum"),
        pl.col("day").cast(pl.Datetime("ms")).alias("stamp"),
    )
    qi = ["x", "colour", "grade", "flag", "day", "cat", "enum", "stamp"]
    res = engine.microaggregate(t, qi, k, ordinal={"grade": ORDER, "enum": None})
    out = res.table
    sizes = np.bincount(res.labels)
    assert sizes.min() >= k and sizes.sum() == n and res.labels.shape == (n,)
    assert _classes_ok(out, qi, k)
    for c in qi:
        assert out.schema[c] == t.schema[c] or (c == "x" and out.schema[c] == pl.Float64), c
    for c in ["colour", "grade", "cat", "enum", "flag"]:
        assert set(out[c].cast(pl.String).to_list()) <= set(t[c].cast(pl.String).to_list())
    assert out["other"].to_list() == t["other"].to_list()


def test_numeric_only_with_weights_changes_grouping():
    rng = np.random.default_rng(9)
    t = pl.DataFrame({"a": rng.normal(size=300), "b": rng.normal(size=300)})
    plain = engine.microaggregate(t, ["a", "b"], 3)
    heavy = engine.microaggregate(t, ["a", "b"], 3, weights={"a": 25.0})
    assert heavy.report.information_loss_by_qi["a"] < plain.report.information_loss_by_qi["a"]
    one = engine.microaggregate(t, ["a", "b"], 3, weights={"a": 1.0})
    np.testing.assert_array_equal(one.labels, plain.labels)


def test_ordinal_by_numeric_column(tmp_path):
    t = pl.DataFrame({"edu": ["b", "a", "c", "a", "b", "c"] * 5, "num": [2, 1, 3, 1, 2, 3] * 5,
                      "x": np.arange(30.0)})
    res = engine.microaggregate(t, ["edu", "x"], 3, ordinal={"edu": "@num"}, derived={"num": "edu"})  # (leak guard)
    assert res.report.metrics["mixed"]["kinds"]["edu"] == "ordinal"
    assert set(res.table["edu"].to_list()) <= {"a", "b", "c"}


@pytest.mark.parametrize("kw,msg", [
    ({"ordinal": {"grade": []}}, "order of column 'grade' is empty"),
    ({"ordinal": {"grade": ["low", "mid"]}}, "which its --ordinal order does not list"),
    ({"ordinal": {"colour": None}}, "no order"),
    ({"ordinal": {"flag": ["a"]}}, "must be a String, Categorical or Enum"),
    ({"ordinal": {"nope": ["a"]}}, "not a quasi-identifier"),
    ({"weights": {"x": -1}}, "positive number"),
    ({"weights": "x=two"}, "expected COLUMN=NUMBER"),
    ({"weights": {"nope": 1}}, "not a quasi-identifier"),
    ({"method": "ama"}, "method ama groups numeric"),
    ({"method": "ama", "weights": {"x": 2}}, "weights (--weights) does not apply to method ama"),
    ({"method": "maxent", "sa": "other", "ordinal": {"grade": ORDER}}, "does not apply to method maxent"),
    ({"method": "mnqia", "weights": {"x": 2}}, "does not apply to method mnqia"),
])
def test_bad_input(kw, msg):
    t = mixed_table(np.random.default_rng(0), 50)
    with pytest.raises(EngineError, match=msg.replace("(", r"\(").replace(")", r"\)")) as e:
        engine.microaggregate(t, QI, 3, **kw)
    assert "\n" not in str(e.value)


def test_missing_category_and_many_categories():
    """A missing nominal value is a category of its own; 300 categories (above the
    one-hot limit) are embedded in a fixed number of columns."""
    t = mixed_table(np.random.default_rng(0), 50).with_columns(
        pl.when(pl.col("other") == 7).then(None).otherwise(pl.col("colour")).alias("colour"))
    res = engine.microaggregate(t, QI, 3, ordinal={"grade": ORDER})
    assert res.report.metrics["mixed"]["missing_values"]["colour"]["missing"] == 1
    assert res.table.group_by(QI).len()["len"].min() >= 3
    order = np.random.default_rng(1).permutation(300)  # (shuffled: rows in x's order give x back, refused)
    wide = pl.DataFrame({"id": [f"v{i}" for i in order], "x": order.astype(float)})
    res = engine.microaggregate(wide, ["id", "x"], 3)
    assert res.report.metrics["mixed"]["encoded_columns"] == 1 + EMBED_DIMS  # (engine.tuning)
    assert res.table.group_by(["id", "x"]).len()["len"].min() >= 3


def test_file_changed_between_passes(tmp_path, monkeypatch):
    """A category the dictionary pass did not see (the file changed): one line."""
    from engine import coordinator

    path = tmp_path / "t.csv"
    t = mixed_table(np.random.default_rng(0), 60, dates=False)
    t.write_csv(path)
    real = coordinator.guard  # (the run's first pass after its plan: the dictionaries are learnt)

    def then_change(*a, **kw):
        t.with_columns(pl.when(pl.col("other") == 40).then(pl.lit("purple")).otherwise(pl.col("colour"))
                       .alias("colour")).write_csv(path)
        return real(*a, **kw)

    monkeypatch.setattr(coordinator, "guard", then_change)
    dest = tmp_path / "out.parquet"
    with pytest.raises(EngineError, match=r"column 'colour' has the value 'purple' at row 41, which the first "
                                          r"pass did not see: .* changed during the run"):
        engine.anonymize(str(path), str(dest), QI[:4], 3, ordinal={"grade": ORDER})
    assert not dest.exists()


def test_pandas_and_arrow_inputs_keep_types():
    pd = pytest.importorskip("pandas")
    rng = np.random.default_rng(4)
    df = pd.DataFrame({"x": rng.normal(size=60), "c": rng.choice(["a", "b", "c"], 60),
                       "d": pd.Categorical(rng.choice(["u", "v"], 60)), "b": rng.random(60) < 0.5,
                       "t": pd.to_datetime("2020-01-01") + pd.to_timedelta(rng.integers(0, 300, 60), unit="D"),
                       "keep": range(60)})
    res = engine.microaggregate(df, ["x", "c", "d", "b", "t"], 5)
    assert res.table.dtypes.to_dict() == df.dtypes.to_dict()
    assert set(res.table["c"]) <= set(df["c"]) and set(res.table["d"]) <= set(df["d"])
    assert res.table.groupby(["x", "c", "d", "b", "t"], observed=True).size().min() >= 5
