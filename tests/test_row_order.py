"""The leak guard's row-order test (``passes.dependence.RowOrder``): the release keeps the
input's row order, so an input in blocks of a QI, or sorted by one, publishes it; and
``verify --original``'s own test (``audit.leaks``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

import engine
from conftest import shuffled_tarragona
from engine.audit.verify import verify_release
from engine.cli import main
from engine.errors import EngineError
from engine.io.source import open_source
from engine.options import RunConfig
from engine.passes.leak import guard

DATA = Path(__file__).parent / "data"


def _states(n=6000, seed=0) -> pl.DataFrame:
    """Persons in households numbered in state blocks (a CPS person file's order)."""
    rng = np.random.default_rng(seed)
    size = rng.integers(1, 5, n)
    hh = np.repeat(np.arange(n), size)[:n]
    state = np.sort(rng.integers(1, 40, n // 1 + 1))[hh]  # (a household's state; serials in state blocks)
    return pl.DataFrame({"state": state, "hh": hh, "age": rng.integers(0, 90, n),
                         "sex": rng.integers(1, 3, n), "income": rng.lognormal(10, 1, n).round(2)})


def _guard(df: pl.DataFrame, qi, **kw) -> list:
    checks: list = []
    guard(open_source(df), RunConfig.make(qi=qi, k=3, **kw), df.height, 100_000, checks=checks)
    return checks


def _refused(df: pl.DataFrame, qi, **kw) -> str:
    with pytest.raises(EngineError) as err:
        _guard(df, qi, **kw)
    return str(err.value)


def test_rows_in_blocks_of_a_qi_are_refused():
    df = _states().drop("hh")
    msg = _refused(df, ["age", "sex", "state"])
    assert msg.startswith("the input's rows run in blocks of quasi-identifier 'state' (")
    assert "neighbouring rows share its value" in msg and "shuffle the rows before the run" in msg
    assert "--strata state" in msg and "\n" not in msg
    # controls: shuffled; sorted by a stratum with --strata on it
    _guard(df.sample(fraction=1.0, shuffle=True, seed=1), ["age", "sex", "state"])
    checks = _guard(df, ["age", "sex"], strata="state")
    order = [c for c in checks if c["check"] == "row order"]
    assert {c["qi"] for c in order} == {"age", "sex"} and all(c["result"] == "passed" for c in order)


def test_households_judged_one_row_each():
    """With --household-column, neighbouring households are compared (one row each)."""
    df = _states()
    msg = _refused(df.with_columns(pl.col("hh").shuffle(seed=3).alias("hh")), ["age", "sex", "state"],
                   household_column="hh")
    assert "neighbouring entities (one row per value of 'hh')" in msg and "'state'" in msg
    # households shuffled whole (ids renumbered at random): passes
    perm = np.random.default_rng(2).permutation(df.get_column("hh").max() + 1)
    shuffled = df.with_columns(pl.Series("k", perm[df.get_column("hh").to_numpy()])).sort("k", maintain_order=True)
    _guard(shuffled.drop("hh").rename({"k": "hh"}), ["age", "sex", "state"], household_column="hh")


def test_sorted_by_a_numeric_qi_is_refused_on_ranks():
    df = _states().drop("hh")
    msg = _refused(df.sort("income"), ["age", "income"])
    assert msg.startswith("the input's rows are sorted by quasi-identifier 'income' (row position against income: "
                          "rank correlation 1.0000")
    msg = _refused(df.sort("state", "income"), ["age", "income"], strata="state")  # (within strata)
    assert "sorted by quasi-identifier 'income'" in msg and "within strata" in msg
    _guard(df.sort("state"), ["age", "income"], strata="state")


@pytest.mark.parametrize("name", ["census", "adult", "tarragona"])
def test_false_alarms_on_the_test_tables(name):
    """Every column of the project's tables as a QI: no refusal of the row order on census.csv
    or adult.csv (not sorted); tarragona.csv is sorted by FIXED.ASSETS (refused for it
    only), and passes shuffled."""
    src = open_source(DATA / f"{name}.csv")
    refused = []
    for q in src.columns:
        try:
            guard(src, RunConfig.make(qi=[q], k=3), 0, 100_000)
        except EngineError as e:
            if str(e).startswith("the input's rows"):
                refused.append(q)
    assert refused == (["FIXED.ASSETS"] if name == "tarragona" else [])
    if name == "tarragona":
        t = shuffled_tarragona()
        guard(open_source(t), RunConfig.make(qi=t.columns, k=3), t.height, 100_000)


def test_the_cli_refuses_a_sorted_input_and_writes_nothing(tmp_path, capsys):
    src, out = tmp_path / "in.csv", tmp_path / "out.csv"
    _states().drop("hh").sort("age").write_csv(src)
    assert main(["anonymize", str(src), str(out), "--qi", "age,sex", "--k", "3", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("microagg: error: the input's rows run in blocks of quasi-identifier 'age'") \
        and err.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv"]


def test_verify_fails_a_release_in_blocks_of_a_qi(tmp_path, monkeypatch):
    """verify's own test: a release made with the row-order test off fails "dependencies";
    the same rows shuffled pass."""
    import engine.coordinator as coordinator  # (the guard without its row-order test: this test only)

    df = _states().drop("hh")
    src, out = tmp_path / "in.parquet", tmp_path / "out.parquet"
    df.write_parquet(src)
    real = coordinator.guard
    monkeypatch.setattr(coordinator, "guard", lambda *a, **k: real(*a, **{**k, "row_order": False}))
    engine.anonymize(src, out, qi=["age", "sex", "state"], k=5)
    res = verify_release(out, ["age", "sex", "state"], 5, original=src)
    failed = {c["name"]: c["detail"] for c in res.failures}
    assert "the release's row order gives back quasi-identifier 'state'" in failed["dependencies"]
    df.sort("income").write_parquet(src)
    engine.anonymize(src, out, qi=["age", "income"], k=5)
    res = verify_release(out, ["age", "income"], 5, original=src)
    assert "are sorted by it" in {c["name"]: c["detail"] for c in res.failures}["dependencies"]
    monkeypatch.undo()
    df.sample(fraction=1.0, shuffle=True, seed=4).write_parquet(src)
    engine.anonymize(src, out, qi=["age", "sex", "state"], k=5)
    assert verify_release(out, ["age", "sex", "state"], 5, original=src).ok
