"""``microagg verify``: passes good releases, fails tampered ones (exit 1), rejects bad input (exit 2)."""

import ast
import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from engine.cli import main
from engine.errors import EngineError
from engine.audit.classes import ScaledMoments
from engine.audit.verify import verify_release
from conftest import shuffled_tarragona

DATA = Path(__file__).parent / "data"
CENSUS_QI = "AFNLWGT,AGI,EMCONTRB,FEDTAX,PTOTVAL,STATETAX,TAXINC,POTHVAL,INTVAL,PEARNVAL,FICA,WSALVAL,ERNVAL"


@pytest.fixture
def small(tmp_path):
    """12 rows: an id, a name with a null, two QIs; its anonymized release (k=3)."""
    frame = pl.DataFrame({
        "id": list(range(12)),
        "name": [f"p{i}" if i != 4 else None for i in range(12)],
        "a": [1, 2, 3, 10, 11, 12, 20, 21, 22, 30, 31, 32],
        "score": [0.5, float("nan"), 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 5.5, 6.0],
        "b": [1.0, 1.5, 1.2, 5.0, 5.5, 5.2, 9.0, 9.5, 9.2, 0.0, 0.5, 0.2],
    })
    src = tmp_path / "small.parquet"
    frame.write_parquet(src)
    out = tmp_path / "out.parquet"
    assert main(["anonymize", str(src), str(out), "--qi", "a,b", "--k", "3", "--quiet", "--no-progress"]) == 0
    return src, out


def _v(*argv):
    return main(["verify", *map(str, argv)])


def test_good_release_passes(small, tmp_path, capsys):
    src, out = small
    js = tmp_path / "v.json"
    assert _v(out, "--qi", "a,b", "--k", 3, "--original", src, "--json", js) == 0
    text = capsys.readouterr().out
    assert "PASS" in text and "k-anonymity" in text
    res = json.loads(js.read_text())
    assert res["ok"] and res["classes"] == 4 and res["min_class_size"] == 3
    assert res["columns_compared"] == ["id", "name", "score"] and res["columns_changed"] == []
    # the release is 3-anonymous but not 4-anonymous
    assert _v(out, "--qi", "a,b", "--k", 4) == 1


def test_tampered_qi_fails(small, tmp_path, capsys):
    src, out = small
    frame = pl.read_parquet(out)
    bad = tmp_path / "bad.parquet"
    frame.with_columns(pl.when(pl.int_range(pl.len()) == 5).then(99.0).otherwise(pl.col("a")).alias("a")) \
        .write_parquet(bad)
    assert _v(bad, "--qi", "a,b", "--k", 3) == 1
    captured = capsys.readouterr()
    assert "FAIL" in captured.out and "k-anonymity" in captured.err
    res = verify_release(bad, ["a", "b"], 3)
    assert not res.ok and res.min_class_size == 1 and res.classes_below_k == 2 and res.rows_below_k == 3
    assert res.smallest_class["a"] == 99.0
    assert verify_release(bad, ["a", "b"], 1).ok  # k=1 always holds


def test_changed_other_column_fails(small, tmp_path):
    src, out = small
    frame = pl.read_parquet(out)
    for change in (pl.when(pl.col("id") == 7).then(pl.lit("x")).otherwise(pl.col("name")).alias("name"),
                   pl.when(pl.col("id") == 4).then(pl.lit("p4")).otherwise(pl.col("name")).alias("name"),  # null
                   pl.when(pl.col("id") == 1).then(0.0).otherwise(pl.col("score")).alias("score")):  # NaN
        bad = tmp_path / "bad.parquet"
        frame.with_columns(change).write_parquet(bad)
        assert _v(bad, "--qi", "a,b", "--k", 3, "--original", src) == 1
        res = verify_release(bad, "a,b", 3, original=src)
        assert [c["name"] for c in res.failures] == ["other columns"]
        assert len(res.columns_changed) == 1
        assert _v(bad, "--qi", "a,b", "--k", 3) == 0  # without the original, nothing to compare


def test_row_count_and_column_order(small, tmp_path):
    src, out = small
    frame = pl.read_parquet(out)
    for bad_frame, failed in ((frame.head(11), {"k-anonymity", "row count", "other columns"}),
                              (pl.concat([frame, frame.tail(3)]), {"row count", "other columns"}),
                              (frame.select("name", "id", "a", "score", "b"), {"other columns"}),
                              (frame.drop("score").with_columns(pl.col("name").reverse()), {"other columns"})):
        bad = tmp_path / "bad.parquet"
        bad_frame.write_parquet(bad)
        assert _v(bad, "--qi", "a,b", "--k", 3, "--original", src) == 1
        res = verify_release(bad, "a,b", 3, original=src)
        assert {c["name"] for c in res.failures} == failed
    # a column left out (anonymize --drop) publishes nothing: listed, not failed
    frame.drop("score").write_parquet(bad)
    res = verify_release(bad, "a,b", 3, original=src)
    assert res.ok and "left out of the release (anonymize --drop): score" in {
        c["name"]: c["detail"] for c in res.checks}["other columns"]


@pytest.mark.parametrize("argv", [
    ["{missing}", "--qi", "a,b", "--k", "3"],
    ["{out}", "--qi", "a,zz", "--k", "3"],
    ["{out}", "--qi", "", "--k", "3"],
    ["{out}", "--qi", "a,a", "--k", "3"],
    ["{out}", "--qi", "a,b", "--k", "0"],
    ["{out}", "--qi", "a,b", "--k", "-2"],
    ["{out}", "--qi", "a,b", "--k", "2.5"],
    ["{out}", "--qi", "a,b", "--k", "3", "--sa", "name"],
    ["{out}", "--qi", "a,b", "--k", "3", "--l", "2"],
    ["{out}", "--qi", "a,b", "--k", "3", "--sa", "name", "--l", "0"],
    ["{out}", "--qi", "a,b", "--k", "3", "--sa", "name", "--epsilon", "-1"],
    ["{out}", "--qi", "a,b", "--k", "3", "--sa", "name", "--l", "2", "--epsilon", "1"],
    ["{out}", "--qi", "a,b", "--k", "3", "--sa", "a", "--l", "2"],
    ["{out}", "--qi", "a,b", "--k", "3", "--sa", "nope", "--l", "2"],
    ["{out}", "--qi", "a,b", "--k", "3", "--original", "{missing}"],
    ["{out}", "--qi", "a,b", "--k", "3", "--original", "{other}"],
    ["{empty}", "--qi", "a,b", "--k", "3"],
    ["{corrupt}", "--qi", "a,b", "--k", "3"],
    ["{out}", "--qi", "a,b", "--k", "3", "--chunk-rows", "0"],
])
def test_bad_input_exits_2(small, tmp_path, argv, capsys):
    src, out = small
    pl.DataFrame({"x": [1, 2]}).write_parquet(tmp_path / "other.parquet")
    pl.DataFrame({"a": [], "b": []}, schema={"a": pl.Float64, "b": pl.Float64}).write_parquet(tmp_path / "e.parquet")
    (tmp_path / "corrupt.parquet").write_bytes(out.read_bytes()[:100])
    names = {"missing": tmp_path / "nope.parquet", "out": out, "other": tmp_path / "other.parquet",
             "empty": tmp_path / "e.parquet", "corrupt": tmp_path / "corrupt.parquet"}
    js = tmp_path / "v.json"
    try:
        code = main(["verify", *[a.format(**names) for a in argv], "--json", str(js)])
    except SystemExit as exc:  # argparse: bad option values
        code = exc.code
    assert code == 2
    assert not js.exists()
    err = capsys.readouterr().err
    assert err.strip() and "Traceback" not in err


@pytest.mark.parametrize("data,k,fmt", [("census", 3, "parquet"), ("census", 7, "csv"),
                                        ("tarragona", 5, "csv"), ("tarragona", 10, "parquet")])
def test_information_loss_equals_the_report(data, k, fmt, tmp_path):
    src = DATA / f"{data}.csv"
    if data == "tarragona":  # (sorted by FIXED.ASSETS: its row order would publish it)
        src = tmp_path / "tarragona.csv"
        shuffled_tarragona().write_csv(src)
    qi = CENSUS_QI if data == "census" else ",".join(pl.read_csv(src, n_rows=1).columns)
    out, rep = tmp_path / f"out.{fmt}", tmp_path / "rep.json"
    assert main(["anonymize", str(src), str(out), "--qi", qi, "--k", str(k), "--report", str(rep),
                 "--quiet", "--no-progress"]) == 0
    report = json.loads(rep.read_text())
    res = verify_release(out, qi, k, original=src, chunk_rows=300)
    assert res.ok, res.summary()
    assert res.information_loss_percent == pytest.approx(report["information_loss_percent"], rel=1e-9)
    assert res.classes == report["groups"] and res.min_class_size == report["min_group_size"]


def test_information_loss_by_definition(tmp_path):
    """Hand-made: IL = 100 * SSE / SST per standardized column, averaged; constant columns left out."""
    orig = pl.DataFrame({"x": [1.0, 2.0, 3.0, 4.0], "y": [5.0, 5.0, 5.0, 5.0], "z": [1e300, -1e300, 1e300, -1e300]})
    rel = pl.DataFrame({"x": [1.5, 1.5, 3.5, 3.5], "y": [5.0, 5.0, 5.0, 5.0], "z": [0.0, 0.0, 0.0, 0.0]})
    orig.write_csv(tmp_path / "o.csv")
    rel.write_csv(tmp_path / "r.csv")
    res = verify_release(tmp_path / "r.csv", "x,y,z", 2, original=tmp_path / "o.csv", chunk_rows=3)
    assert res.information_loss_by_column["x"] == pytest.approx(100 * 1.0 / 5.0)
    assert res.information_loss_by_column["z"] == pytest.approx(100.0)
    assert "y" in res.information_loss_skipped
    assert res.information_loss_percent == pytest.approx(60.0)


def test_scaled_moments_match_numpy():
    rng = np.random.default_rng(1)
    X = rng.normal(3, 2, size=(1000, 3)) * np.array([1.0, 1e-200, 1e300])
    Y = X + rng.normal(size=X.shape) * np.array([0.1, 1e-201, 1e299])
    m = ScaledMoments(3)
    for a in range(0, 1000, 77):
        m.add(X[a: a + 77], Y[a: a + 77])
    unit = np.array([1.0, 2.0 ** -660, 2.0 ** 1000])  # numpy overflows / underflows without it
    Xu, Yu = X / unit, Y / unit
    np.testing.assert_allclose(m.sd() / unit, Xu.std(axis=0), rtol=1e-12)
    np.testing.assert_allclose(m.sd(1) / unit, Xu.std(axis=0, ddof=1), rtol=1e-12)
    np.testing.assert_allclose(m.mean * (m.scale / unit), Xu.mean(axis=0), rtol=1e-12)
    ratio = m.sse / m.m2
    np.testing.assert_allclose(ratio, ((Xu - Yu) ** 2).sum(0) / ((Xu - Xu.mean(0)) ** 2).sum(0), rtol=1e-10)
    z = ScaledMoments(1)
    z.add(np.zeros((3, 1)))
    z.add(np.full((3, 1), 1e-300))
    assert z.sd()[0] == pytest.approx(0.5e-300) and z.scale[0] > 0


def test_l_diversity_hand_made(tmp_path, capsys):
    # classes: (1, 1) x4 with SA a,a,b,b ; (2, 2) x3 with SA a,b,c ; (3, 3) x3 with SA a,a,a
    frame = pl.DataFrame({
        "q1": [1, 1, 1, 1, 2, 2, 2, 3, 3, 3], "q2": [1, 1, 1, 1, 2, 2, 2, 3, 3, 3],
        "sa": ["a", "a", "b", "b", "a", "b", "c", "a", "a", "a"],
    })
    path = tmp_path / "t.csv"
    frame.write_csv(path)
    res = verify_release(path, "q1,q2", 3, sa="sa", l=1)
    assert res.ok and res.min_distinct_sa == 1 and res.classes == 3
    assert _v(path, "--qi", "q1,q2", "--k", 3, "--sa", "sa", "--l", 2) == 1
    res = verify_release(path, "q1,q2", 3, sa="sa", l=2)
    assert not res.ok and res.classes_below_l == 1
    # drop the constant class: now distinct >= 2 everywhere, entropy min = 1 bit
    frame.head(7).write_csv(path)
    assert _v(path, "--qi", "q1,q2", "--k", 3, "--sa", "sa", "--l", 2) == 0
    assert _v(path, "--qi", "q1,q2", "--k", 3, "--sa", "sa", "--l", 3) == 1
    assert _v(path, "--qi", "q1,q2", "--k", 3, "--sa", "sa", "--epsilon", 1.0) == 0
    res = verify_release(path, "q1,q2", 3, sa="sa", epsilon=1.2)
    assert not res.ok and res.min_entropy_bits == pytest.approx(1.0) and res.classes_below_l == 1
    assert verify_release(path, "q1,q2", 3, sa="sa", epsilon=np.log2(3) - 1e-12).classes_below_l == 1


def test_range_and_categorical_release(tmp_path):
    """maxent-style output: c_min/c_max pairs and a categorical QI as a |-joined set."""
    frame = pl.DataFrame({
        "age_min": [20, 20, 20, 30, 30, 30], "age_max": [25, 25, 25, 39, 39, 39],
        "job": ["a|b", "a|b", "a|b", "c", "c", "c"], "sa": ["x", "y", "z", "x", "y", "y"],
    })
    path = tmp_path / "r.parquet"
    frame.write_parquet(path)
    res = verify_release(path, "age,job", 3, sa="sa", l=2)
    assert res.ok and res.key_columns == ["age_min", "age_max", "job"] and res.classes == 2
    frame.with_columns(age_max=pl.Series([25, 25, 26, 39, 39, 39])).write_parquet(path)
    assert not verify_release(path, "age,job", 3).ok


def test_sensitive_method_release_verifies(tmp_path):
    rng = np.random.default_rng(0)
    n = 60
    frame = pl.DataFrame({"x": rng.normal(size=n), "y": rng.integers(0, 50, n), "sa": rng.integers(0, 3, n)})
    src, out = tmp_path / "in.parquet", tmp_path / "out.parquet"
    frame.write_parquet(src)
    assert main(["anonymize", str(src), str(out), "--qi", "x,y", "--method", "mnqia", "--k", "4", "--quiet"]) == 0
    res = verify_release(out, "x,y", 4, original=src)
    assert res.ok, res.summary()
    assert set(res.information_loss_skipped) == {"x", "y"}  # ranges: no IL


def test_streaming_and_chunking_agree(tmp_path):
    src = tmp_path / "tarragona.csv"  # (shuffled: the file is sorted by FIXED.ASSETS)
    shuffled_tarragona().write_csv(src)
    qi = ",".join(pl.read_csv(src, n_rows=1).columns[:6])
    out = tmp_path / "out.parquet"
    assert main(["anonymize", str(src), str(out), "--qi", qi, "--k", "4", "--quiet", "--group-column", "g"]) == 0
    folder = tmp_path / "parts"
    folder.mkdir()
    t = pl.read_parquet(out)
    for i, a in enumerate(range(0, t.height, 250)):
        t.slice(a, 250).write_parquet(folder / f"part{i:02d}.parquet")
    results = [verify_release(p, qi, 4, original=src, chunk_rows=c)
               for p, c in ((out, 100_000), (out, 13), (folder, 37))]
    for r in results:
        assert r.ok and r.extra_columns == ["g"]
        assert (r.classes, r.min_class_size, r.max_class_size) == \
            (results[0].classes, results[0].min_class_size, results[0].max_class_size)
        assert r.information_loss_percent == pytest.approx(results[0].information_loss_percent, rel=1e-12)


def test_csv_round_trip_of_other_columns(tmp_path):
    """Integer, string and date columns survive a Parquet -> CSV release; values compared, not dtypes."""
    import datetime

    frame = pl.DataFrame({"q": [1.0, 1.0, 2.0, 2.0], "i": pl.Series([1, 2, 3, None], dtype=pl.Int32),
                          "d": [datetime.date(2020, 1, i) for i in range(1, 5)], "s": ["a", "b", "", None]})
    src = tmp_path / "in.parquet"
    frame.write_parquet(src)
    frame.write_csv(tmp_path / "out.csv")
    res = verify_release(tmp_path / "out.csv", "q", 2, original=src)
    assert res.ok, res.summary()


def test_null_is_a_class_value(tmp_path):
    path = tmp_path / "n.parquet"
    pl.DataFrame({"a": [None, None, 1.0, 1.0, float("nan"), float("nan")]}).write_parquet(path)
    res = verify_release(path, "a", 2)
    assert res.ok and res.classes == 3
    with pytest.raises(EngineError):
        verify_release(path, "a", True)


def test_verify_is_independent_of_the_engine_path():
    """verify must not reuse the code that made the release."""
    tree = ast.parse((Path(__file__).parent.parent / "engine" / "audit" / "verify.py").read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            imported.add(node.module or "")
        elif isinstance(node, ast.Import):
            imported.update(a.name for a in node.names)
    for banned in ("coordinator", "passes", "methods", "stitch", "aggregate", "write", "kernels", "sensitive",
                   "maxent", "mnqia", "profile", "partition"):
        assert not any(banned in m for m in imported), (banned, imported)


def test_published_value_not_the_class_mean_fails(small, tmp_path, capsys):
    """Issue 28, item 12: one class's published b replaced by 1e12 (still a class of 3
    rows) passed with an IL of 8.9e13 %. Published numbers must be the mean of the
    originals they replace, class by class: exit 1, naming the column and the class."""
    src, out = small
    frame = pl.read_parquet(out)
    first_b = frame.get_column("b")[0]
    bad = tmp_path / "bad.parquet"
    frame.with_columns(pl.when(pl.col("b") == first_b).then(1e12).otherwise(pl.col("b")).alias("b")) \
        .write_parquet(bad)
    assert _v(bad, "--qi", "a,b", "--k", 3) == 0  # k-anonymity alone holds
    capsys.readouterr()
    js = tmp_path / "v.json"
    assert _v(bad, "--qi", "a,b", "--k", 3, "--original", src, "--json", js) == 1
    text = capsys.readouterr().out
    assert "[FAIL] class means: 1 of 4 classes publish a value that is not the mean" in text
    assert "column 'b': published 1000000000000.0" in text
    res = json.loads(js.read_text())
    assert res["classes_not_mean"] == 1 and not res["ok"]
    # the same shift split over chunks of one row: the partial means merge
    res = verify_release(bad, "a,b", 3, original=src, chunk_rows=1)
    assert res.classes_not_mean == 1
    good = verify_release(out, "a,b", 3, original=src, chunk_rows=1)
    assert good.ok and good.classes_not_mean == 0
    assert [c["name"] for c in good.checks] == ["k-anonymity", "row count", "class means", "other columns"]


def test_class_means_of_huge_values_and_small_shifts(tmp_path):
    """Means taken in units of a power of two: values near 1.8e308 (whose sums overflow)
    check; a shift of a class's value by 1e-6 of the column's scale fails, rounding
    error (1e-13) passes."""
    big = [1.5e308, 1.7e308, 1.6e308, -1.7e308, -1.5e308, -1.6e308]
    small_vals = [1.0, 2.0, 3.0, 10.0, 11.0, 12.0]
    orig = pl.DataFrame({"x": big, "y": small_vals})
    means_x = [1.6e308] * 3 + [-1.6e308] * 3
    means_y = [2.0] * 3 + [11.0] * 3
    src = tmp_path / "o.parquet"
    orig.write_parquet(src)
    for shift, ok in ((0.0, True), (1e-13, True), (1e-6, False)):
        rel = tmp_path / f"r{shift}.parquet"
        pl.DataFrame({"x": means_x, "y": [v + shift * 12 if i < 3 else v for i, v in enumerate(means_y)]}) \
            .write_parquet(rel)
        res = verify_release(rel, "x,y", 3, original=src, chunk_rows=2)
        assert res.ok is ok and res.classes_not_mean == (0 if ok else 1), (shift, res.checks)
