"""The leak guard beyond one-to-one copies (issue 39, ``engine.passes.dependence``): every
kind of leak refused in one line, with a control beside each that passes; ``--derived``
with missing values on the same rows (issue 41 item 3); ``--scheduler local``."""

from pathlib import Path

import numpy as np
import polars as pl
import pytest

import engine
from engine.cli import main
from engine.errors import EngineError
from engine.io.source import open_source
from engine.options import RunConfig
from engine.passes import dependence
from engine.passes.leak import guard

from reference_leak import fd_rate_reference, spearman_reference

N = 4000
STATES = [f"S{i:02d}" for i in range(20)]


def _people(n=N, seed=0) -> pl.DataFrame:
    """Persons in households of 1-5 (household mates share a state), ages, incomes, a
    random id, a survey weight loosely related to age."""
    rng = np.random.default_rng(seed)
    size = rng.integers(1, 6, n)
    hh = np.repeat(np.arange(size.shape[0]), size)[:n]
    hh_state = rng.integers(0, len(STATES), hh.max() + 1)
    age = rng.integers(18, 90, n)
    income = np.round(np.exp(rng.normal(10, 0.8, n)), 2)
    return pl.DataFrame({
        "hh": rng.permutation(hh.max() + 1)[hh] * 7 + 100_000,  # household ids in no state order
        "state": np.array(STATES)[hh_state[hh]],
        "age": age,
        "sex": rng.choice(["f", "m"], n),
        "income": income,
        "random_id": rng.permutation(n) + 555,
        "weight": np.round(1000 + 8 * age + rng.normal(0, 400, n), 3),
        "note": rng.choice(["a", "b", "c"], n),
    })


def _guard(df: pl.DataFrame, qi, **kw):
    guard(open_source(df), RunConfig.make(qi=list(qi), k=3, **kw), df.height, 100_000)


def _refused(df, qi, **kw) -> str:
    with pytest.raises(EngineError) as err:
        _guard(df, qi, **kw)
    text = str(err.value)
    assert "\n" not in text
    return text


# --- functional dependencies ----------------------------------------------------------


def test_household_id_gives_back_its_state():
    df = _people()
    msg = _refused(df.select("hh", "state", "age", "sex"), ["age", "sex", "state"])
    assert msg.startswith("column 'hh' determines quasi-identifier 'state''s original value on 100.0 % of the ")
    assert "add it to --qi or drop it (--drop hh) (an id of households, or of persons with several records: " \
           "--household-column hh or --person-column hh groups the release by it)" in msg
    # control: household ids beside person-level QIs only
    _guard(df.select("hh", "age", "sex", "income"), ["age", "sex", "income"])


def test_household_column_is_not_refused_unless_its_order_encodes_a_qi():
    df = _people().select("hh", "state", "age", "sex")
    _guard(df, ["age", "sex", "state"], household_column="hh")
    # ids issued in state blocks (serials by state): the order gives the state back
    blocks = df.sort("state", "hh").with_columns(
        (pl.col("hh") != pl.col("hh").shift()).fill_null(True).cum_sum().cast(pl.Int64).alias("hh")).sample(
        fraction=1.0, shuffle=True, seed=1)
    msg = _refused(blocks, ["age", "sex", "state"], household_column="hh")
    assert msg.startswith("column 'hh' is ordered in blocks of quasi-identifier 'state' (")


def test_county_code_within_its_state_with_the_stratum():
    """A code unique only within its state gives back the county jointly with --strata state."""
    rng = np.random.default_rng(4)
    state = rng.integers(0, 10, N)
    code = rng.integers(1, 30, N)  # county number within the state
    df = pl.DataFrame({"state": np.array(STATES)[state], "county": [f"{s}-{c}" for s, c in zip(state, code)],
                       "county_code": code, "age": rng.integers(18, 90, N)})
    msg = _refused(df, ["age", "county"], strata=["state"])
    assert msg.startswith("column 'county_code' determines quasi-identifier 'county''s original value together "
                          "with the strata (state) on 100.0 % of the ")
    # control: without the stratum published the code alone says little of the county
    _guard(df.drop("state"), ["age", "county"])


@pytest.mark.parametrize("seed", range(4))
def test_fd_rate_matches_the_reference(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(50, 3000))
    c = rng.integers(0, int(rng.choice([5, 50, 500])), n)
    s = rng.integers(0, 3, n)
    q = np.where(rng.random(n) < 0.9, (c * 7 + s) % 11, rng.integers(0, 11, n))
    keys = {x: engine.passes.leak.value_keys(pl.Series(v)) for x, v in (("c", c), ("s", s), ("q", q))}
    t = dependence.FDTest("c", "q")
    for lo in range(0, n, 97):
        sl = slice(lo, lo + 97)
        t.add(dependence.cell_keys(keys["s"][sl], keys["c"][sl]), dependence.cell_keys(keys["s"][sl]), keys["q"][sl])
    e, rate, base, kept, _ = t.stats
    ref = fd_rate_reference(list(zip(s, c)), list(s), list(q))
    assert (e, kept) == (ref[0], n) and rate == pytest.approx(ref[1]) and base == pytest.approx(ref[2])


# --- monotone transforms and near-copies ------------------------------------------------


def _with(df, **cols):
    return df.select("age", "sex", "income").with_columns(**cols)


@pytest.mark.parametrize("name, expr, qi", [
    ("log_income", pl.col("income").log(), "income"),
    ("sqrt_income", pl.col("income").sqrt(), "income"),
    ("income32", pl.col("income").cast(pl.Float32), "income"),
    ("age_months", pl.col("age") * 12 + pl.int_range(pl.len()) % 12, "age"),
    ("birth_year", pl.when(pl.int_range(pl.len()) % 50 == 0).then(None).otherwise(2024 - pl.col("age")), "age"),
    ("band", (pl.col("income").rank("ordinal") * 200 // pl.len()).cast(pl.Int64), "income"),
    ("edited", pl.when(pl.int_range(pl.len()) % 100 == 7).then(pl.col("income").shuffle(seed=3))
     .otherwise(pl.col("income")), "income"),
    ("rounded", (pl.col("income") / 100).round(0) * 100, "income"),
    ("with_nulls", pl.when(pl.int_range(pl.len()) % 20 == 0).then(None).otherwise(pl.col("income")), "income"),
])
def test_transforms_and_near_copies_are_refused(name, expr, qi):
    df = _with(_people(), **{name: expr})
    msg = _refused(df, ["age", "sex", "income"])
    assert msg.startswith(f"column {name!r} ") and f"quasi-identifier {qi!r}" in msg, msg


@pytest.mark.parametrize("name, expr", [
    ("random_id", pl.Series(np.random.default_rng(5).permutation(N))),
    ("weight", pl.lit(1000.0) + 8 * pl.col("age") + pl.Series(np.random.default_rng(6).normal(0, 400, N))),
    ("noise", pl.Series(np.random.default_rng(7).normal(size=N))),
    ("coarse", (pl.col("income") > pl.col("income").median()).cast(pl.Int64)),  # two bands: published anyway
    ("loose", pl.col("income") * pl.Series(np.exp(np.random.default_rng(8).normal(0, 0.5, N)))),
])
def test_controls_pass(name, expr):
    _guard(_with(_people(), **{name: expr}), ["age", "sex", "income"])


def test_spearman_matches_the_reference():
    rng = np.random.default_rng(9)
    c = rng.normal(size=500)
    q = np.round(c + rng.normal(0, 0.3, 500), 1)
    q[::17] = np.nan
    n, rho, _, _ = dependence.rank_stats(c, q)
    ok = ~np.isnan(q)
    assert n == ok.sum() and rho == pytest.approx(abs(spearman_reference(c[ok], q[ok])), abs=1e-12)


def test_verdicts_do_not_depend_on_the_chunking():
    df = _with(_people(), age_months=pl.col("age") * 12 + pl.int_range(pl.len()) % 12)
    for chunk in (333, 4000):
        with pytest.raises(EngineError, match="column 'age_months' "):
            guard(open_source(df), RunConfig.make(qi=["age", "sex", "income"], k=3), df.height, chunk)


def test_the_checks_passed_do_not_depend_on_the_chunking(monkeypatch):
    """The verdicts are taken at the input's multiples of ``SLICE_ROWS`` rows (made small
    here), not at a chunk's end: the report's ``leak_checks``, figures included, are the
    same whatever the chunk size (a chunk-end verdict decided pairs on other rows)."""
    monkeypatch.setattr(dependence, "SLICE_ROWS", 1_000)
    df = _people(8_000, seed=3).drop("hh")
    got = []
    for chunk in (333, 1_500, 8_000):
        checks: list = []
        guard(open_source(df), RunConfig.make(qi=["age", "sex", "income"], k=3), df.height, chunk, checks=checks)
        got.append(checks)
    assert any(c["check"] in ("ranks", "order", "dependency") for c in got[0])
    assert got[0] == got[1] == got[2]


def test_derived_columns_are_not_refused():
    df = _with(_people(), age_months=pl.col("age") * 12)
    engine.microaggregate(df, qi=["age", "sex", "income"], k=3, derived={"age_months": "age"})


# --- issue 41 item 3: missing values on the same rows -----------------------------------


def test_derived_with_missing_values_on_the_same_rows(tmp_path):
    df = _people().select("age", "income").with_columns(
        pl.when(pl.int_range(pl.len()) % 9 == 0).then(None).otherwise(pl.col("age")).alias("age"))
    df = df.with_columns((2024 - pl.col("age")).alias("birth_year"))
    msg = _refused(df, ["age", "income"])
    assert msg.endswith("declare it derived (--derived birth_year=age)"), msg
    src, out = tmp_path / "in.parquet", tmp_path / "out.parquet"
    df.write_parquet(src)
    assert main(["anonymize", str(src), str(out), "--qi", "age,income", "--k", "3", "--derived", "birth_year=age",
                 "--quiet"]) == 0
    got = pl.read_parquet(out)
    want = (2024.0 - got["age"]).to_list()
    assert got["birth_year"].to_list() == want
    # one side missing only: not a function, refused naming the row
    bad = df.with_columns(pl.when(pl.int_range(pl.len()) == 4).then(None).otherwise(pl.col("birth_year"))
                          .alias("birth_year"))
    with pytest.raises(EngineError, match=r"not an exact affine function .* row 5 has"):
        engine.microaggregate(bad, qi=["age", "income"], k=3, derived={"birth_year": "age"})


# --- end to end ---------------------------------------------------------------------


def test_refused_on_the_command_line_nothing_written(tmp_path, capsys):
    src, out = tmp_path / "in.csv", tmp_path / "out.csv"
    _with(_people(), sqrt_income=(pl.col("income") + pl.int_range(pl.len()) * 1e-6).sqrt()).write_csv(src)
    assert main(["anonymize", str(src), str(out), "--qi", "age,sex,income", "--k", "3", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("microagg: error: column 'sqrt_income' follows the order of "
                                               "quasi-identifier 'income'"), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv"]


@pytest.mark.slow
def test_refused_with_a_local_dask_scheduler(tmp_path):
    src = tmp_path / "in.parquet"
    _people().select("hh", "state", "age", "sex").write_parquet(src)
    with pytest.raises(EngineError, match="column 'hh' determines quasi-identifier 'state'"):
        engine.anonymize(str(src), str(tmp_path / "out.parquet"), qi=["age", "sex", "state"], k=3,
                         scheduler="local", tmp_dir=str(tmp_path))
    assert not (tmp_path / "out.parquet").exists()


def test_the_report_lists_the_checks_passed():
    df = _with(_people(), random_id=pl.Series(np.random.default_rng(5).permutation(N)))
    rep = engine.microaggregate(df, qi=["age", "sex", "income"], k=3).report
    got = {(c["column"], c["qi"], c["check"]) for c in rep.leak_checks}
    assert {("random_id", "age", "one-to-one"), ("random_id", "income", "ranks"), ("random_id", "sex", "order")} <= got
    assert all(c["result"] == "passed" for c in rep.leak_checks)


def test_the_reader_narrowed_to_the_pairs_still_tested():
    """Small chunks: the columns whose pairs are decided are no longer read (the reader
    restarted on fewer columns), while a row-unique id is read on; no column goes missing."""
    rng = np.random.default_rng(11)
    n = 30_000
    df = pl.DataFrame({f"c{i}": rng.integers(0, 5, n) for i in range(6)}).with_columns(
        pl.Series("id", rng.permutation(n)), pl.Series("x", rng.integers(0, 80, n)),
        pl.Series("y", np.where(rng.random(n) < 0.97, 0, rng.integers(1, 50, n))))  # (its order test reads on)
    guard(open_source(df), RunConfig.make(qi=["x", "y"], k=3), n, 2_000)
    with pytest.raises(EngineError, match="column 'x_months'"):
        guard(open_source(df.with_columns((pl.col("x") * 12 + pl.col("c0")).alias("x_months"))),
              RunConfig.make(qi=["x", "y"], k=3), n, 2_000)
