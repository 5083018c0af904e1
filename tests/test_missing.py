"""Missing values in quasi-identifiers of every kind, and nominal QIs of any cardinality.

A missing value never blocks a run: a nominal QI's is a category of its own; a
numeric, date or ordinal QI's cell is published as its group's mean (median) of the
values present, or missing when the group has none (engine/encode/mixed.py,
docs/notes/missing-values.md). Within a class every row shows the same value, a
missing one counted as a value, so the release is k-anonymous with nulls as values.
"""

from __future__ import annotations

import datetime as dt

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import engine
from engine.cli import main
from engine.errors import EngineError
from engine.kernels.groups import group_picks
from engine.tuning import EMBED_DIMS

import reference_mixed as refm

ORDER = ["low", "mid", "high"]


def census(n: int, seed: int = 0, munis: int = 3000) -> pl.DataFrame:
    """A census-like table with missing values in a QI of every kind."""
    rng = np.random.default_rng(seed)
    t = pl.DataFrame({
        "age": rng.integers(16, 95, n).astype(np.int64),
        "income": np.round(rng.lognormal(10, 0.6, n), 2),
        "hours": rng.integers(0, 60, n).astype(np.float64),
        "municipality": [f"M{x:05d}" for x in rng.integers(0, munis, n)],
        "sex": rng.choice(["F", "M"], n),
        "employed": rng.random(n) < 0.6,
        "education": rng.choice(ORDER, n),
        "born": pl.Series(rng.integers(-20000, 15000, n)).cast(pl.Date),
        "id": np.arange(n),
        "note": [None if i % 9 == 0 else f"n{i}" for i in range(n)],
    })
    gap = lambda c, every: pl.when(pl.col("id") % every == 0).then(None).otherwise(pl.col(c)).alias(c)
    return t.with_columns(gap("age", 17), gap("income", 5), gap("municipality", 23), gap("sex", 13),
                          gap("employed", 11), gap("education", 7), gap("born", 19),
                          pl.when(~pl.col("employed").fill_null(False)).then(None).otherwise(pl.col("hours"))
                          .alias("hours"))


QI = ["age", "income", "hours", "municipality", "sex", "employed", "education", "born"]


def check_release(out: pl.DataFrame, original: pl.DataFrame, qi, k: int, group: str | None = None):
    """k-anonymous with null as a value; pass-through columns unchanged; within a group
    each numeric QI is the mean of the group's values present (null when none)."""
    classes = out.group_by(qi).len()  # (Polars groups nulls together)
    assert classes["len"].min() >= k
    for c in original.columns:
        if c not in qi:
            assert out[c].to_list() == original[c].to_list()
    if group is None:
        return
    both = original.select(qi).with_columns(out[group].alias("_g"))
    for c in qi:
        if original[c].dtype.is_float() or original[c].dtype.is_integer():
            want = both.group_by("_g").agg(pl.col(c).mean().alias("m"))
            got = out.select(pl.col(group).alias("_g"), pl.col(c)).unique("_g").join(want, on="_g")
            diff = (got[c] - got["m"]).abs() / got["m"].abs().clip(lower_bound=1)
            assert got[c].is_null().to_list() == got["m"].is_null().to_list(), c
            assert (diff.drop_nulls() < 1e-9).all(), c


@pytest.mark.parametrize("opts", [{}, {"block_size": 700, "polish_rounds": 0}, {"block_size": 700}])
def test_missing_in_every_kind(opts):
    t = census(3000)
    res = engine.microaggregate(t, QI, 4, ordinal={"education": ORDER}, group_column="g", **opts)
    out = res.table
    check_release(out.drop("g"), t, QI, 4)
    check_release(out, t, QI, 4, group="g")
    assert out.schema["born"] == pl.Date and out.schema["employed"] == pl.Boolean
    miss = res.report.metrics["mixed"]["missing_values"]
    for c in QI:
        m = miss[c]
        assert m["missing"] == t[c].null_count(), c
        assert m["imputed"] + m["kept_missing"] == m["missing"], c
        assert m["imputed"] == (t[c].is_null() & out[c].is_not_null()).sum(), c
        assert m["suppressed"] == (t[c].is_not_null() & out[c].is_null()).sum(), c


def test_invariant_to_chunks_and_threads(tmp_path):
    t = census(4000, seed=2)
    path = tmp_path / "c.parquet"
    t.write_parquet(path, row_group_size=300)
    outs = []
    for threads, chunk in [(1, 4000), (2, 333), (2, 1000)]:
        out = tmp_path / f"o{threads}{chunk}.parquet"
        engine.anonymize(str(path), str(out), qi=QI, k=5, ordinal=[f"education={','.join(ORDER)}"],
                         block_size=900, threads=threads, chunk_rows=chunk)
        outs.append(out.read_bytes())
    assert outs[0] == outs[1] == outs[2]


def test_cli_csv_with_empty_fields(tmp_path):
    t = census(1500, seed=3).drop("born")
    src = tmp_path / "in.csv"
    t.write_csv(src)
    before = src.read_bytes()
    out = tmp_path / "out.csv"
    qi = [c for c in QI if c != "born"]
    assert main(["anonymize", str(src), str(out), "--qi", ",".join(qi), "--k", "3", "--ordinal",
                 "education=" + ",".join(ORDER), "--quiet", "--no-progress"]) == 0
    assert src.read_bytes() == before
    got = pl.read_csv(out, schema_overrides={"municipality": pl.String})
    assert got.group_by(qi).len()["len"].min() >= 3
    assert main(["verify", str(out), "--qi", ",".join(qi), "--k", "3"]) == 0


@pytest.mark.parametrize("column", ["income", "sex", "education", "born"])
def test_qi_missing_everywhere_is_refused(tmp_path, column, capsys):
    t = census(200).with_columns(pl.lit(None, dtype=census(1)[column].dtype).alias(column))
    src = tmp_path / "in.parquet"
    t.write_parquet(src)
    with pytest.raises(EngineError, match=f"column '{column}' is missing in every row"):
        engine.microaggregate(t, QI, 3, ordinal={"education": ORDER})
    out = tmp_path / "out.parquet"
    assert main(["anonymize", str(src), str(out), "--qi", ",".join(QI), "--ordinal",
                 "education=" + ",".join(ORDER), "--quiet", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"'{column}' is missing in every row" in err[0]
    assert not out.exists()


def test_numeric_only_with_missing_values_runs():
    """Every QI numeric, some missing: the mixed path (an indicator a QI), not a refusal."""
    t = census(2000).select("age", "income", "hours", "id")
    out = engine.microaggregate(t, ["age", "income", "hours"], 5, group_column="g").table
    check_release(out, t, ["age", "income", "hours"], 5, group="g")


def test_ama_and_select_refuse_missing_values_in_one_line():
    t = census(300).select("age", "income", "hours")
    with pytest.raises(EngineError, match="method ama groups complete numeric"):
        engine.microaggregate(t, ["age", "income", "hours"], 3, method="ama")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(6, 120), k=st.integers(2, 5), seed=st.integers(0, 10_000),
       p=st.floats(0.0, 0.9), blocks=st.booleans())
def test_property_k_anonymous_with_nulls(n, k, seed, p, blocks):
    rng = np.random.default_rng(seed)
    gap = rng.random((4, n)) < p
    t = pl.DataFrame({
        "x": [None if g else float(v) for g, v in zip(gap[0], rng.integers(0, 5, n))],
        "c": [None if g else str(v) for g, v in zip(gap[1], rng.integers(0, 3, n))],
        "o": [None if g else ORDER[v] for g, v in zip(gap[2], rng.integers(0, 3, n))],
        "d": pl.Series([None if g else int(v) for g, v in zip(gap[3], rng.integers(0, 300, n))],
                       dtype=pl.Int32).cast(pl.Date),
        "keep": np.arange(n),
    }, schema_overrides={"x": pl.Float64, "c": pl.String, "o": pl.String})
    qi = ["x", "c", "o", "d"]
    if k > n:
        return
    try:
        out = engine.microaggregate(t, qi, k, ordinal={"o": ORDER}, block_size=max(2 * k, n // 3) if blocks else None,
                                    group_column="g").table
    except EngineError as e:
        assert "missing in every row" in str(e)
        return
    sizes = out.group_by("g").len()["len"]
    assert sizes.min() >= k and sizes.sum() == n  # each row in exactly one group
    assert out.group_by(qi).len()["len"].min() >= k
    assert out.group_by("g").agg([pl.col(c).n_unique() for c in qi]).select(qi).max().row(0) == (1, 1, 1, 1)
    assert out["keep"].to_list() == list(range(n))


@given(seed=st.integers(0, 10_000), g=st.integers(1, 6), ordinal=st.booleans(), null=st.booleans())
@settings(max_examples=80, deadline=None)
def test_group_picks_against_reference(seed, g, ordinal, null):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(g, 40))
    labels = np.concatenate([np.arange(g), rng.integers(0, g, n - g)]).astype(np.int64)
    codes = rng.integers(0, 4, n).astype(np.float64)
    nul = -1
    if ordinal and null:
        codes[rng.random(n) < 0.3] = np.nan
    elif null:
        nul = 3
    out, stats = np.empty(g), np.zeros(4, np.int64)
    group_picks(labels, codes, g, ordinal, nul, out, stats)
    want, wstats = refm.group_picks(labels, codes, g, ordinal, nul)
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(stats, wstats)


@pytest.mark.slow
def test_hundred_thousand_categories():
    """A nominal QI of 100,000 categories: no one-hot columns (a fixed-width embedding);
    k-anonymous; the mode published."""
    n = 150_000
    rng = np.random.default_rng(5)
    code = np.concatenate([np.arange(100_000), rng.integers(0, 100_000, n - 100_000)])
    t = pl.DataFrame({"code": [f"C{c:06d}" for c in code], "age": rng.integers(0, 90, n).astype(np.float64),
                      "row": np.arange(n)})
    res = engine.microaggregate(t, ["code", "age"], 5)
    mixed = res.report.metrics["mixed"]
    assert mixed["categories"]["code"] == 100_000 and mixed["encoded_columns"] == 1 + EMBED_DIMS
    assert mixed["encoding"]["code"].startswith("embedded")
    assert res.table.group_by(["code", "age"]).len()["len"].min() >= 5
    assert res.table["row"].to_list() == list(range(n))
