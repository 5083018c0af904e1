"""The disclosure risk counts everything published (issue 39): the strata and the
``--derived`` columns are part of the intruder's key, in DBRL, interval disclosure and
the classes (``anonymize --risk`` with ``--strata`` equals ``microagg risk`` with the
stratum among the QIs); person and household ids are not, households enter through
the household risk (a household is re-identified if any member is), checked against a
household-by-household reference. Sampling weights of 0 are taken (a class's population
is at least its records); a negative, NaN or infinite weight is refused before the
first pass. The wall time of a run includes its ``--risk`` step."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest

import reference_risk as ref
from reference import dbrl_credits
from engine.audit.risk import disclosure_risk
from engine.cli import main
from engine.errors import EngineError
from engine.synth import census_like


def _census(tmp_path, rows=1200, **extra) -> str:
    df = census_like(rows, seed=7)
    if extra:
        df = df.with_columns(**extra)
    path = tmp_path / "in.parquet"
    df.write_parquet(path)
    return str(path)


def _risk_block(path) -> dict:
    d = json.loads(open(path).read())
    d = d.get("risk", d)
    d.pop("wall_seconds")
    return d


def test_strata_are_part_of_the_key(tmp_path, capsys):
    """--qi age,hours_per_week --strata region --risk == microagg risk --qi age,hours_per_week,region."""
    data = _census(tmp_path)
    out, rep, js = tmp_path / "out.parquet", tmp_path / "rep.json", tmp_path / "risk.json"
    assert main(["anonymize", data, str(out), "--qi", "age,hours_per_week", "--strata", "region", "--k", "5",
                 "--risk", "--report", str(rep), "--quiet"]) == 0, capsys.readouterr().err
    assert main(["risk", data, str(out), "--qi", "age,hours_per_week,region", "--json", str(js)]) == 0
    got, want = _risk_block(rep), _risk_block(js)
    assert got == want
    assert got["qi"] == got["class_qi"] == ["age", "hours_per_week", "region"]
    # an id is no key: person_id passed through, and is not counted
    assert "person_id" not in got["class_qi"]
    alone = disclosure_risk(data, out, ["age", "hours_per_week"])
    assert got["classes"] > alone.classes and got["dbrl"] > alone.dbrl


def test_derived_columns_are_part_of_the_key(tmp_path, capsys):
    data = _census(tmp_path, birth_year=2024 - pl.col("age"))
    out, rep = tmp_path / "out.parquet", tmp_path / "rep.json"
    assert main(["anonymize", data, str(out), "--qi", "age,hours_per_week", "--derived", "birth_year=age",
                 "--k", "4", "--risk", "--report", str(rep), "--quiet"]) == 0, capsys.readouterr().err
    got = _risk_block(rep)
    assert got["qi"] == got["class_qi"] == ["age", "hours_per_week", "birth_year"]
    direct = disclosure_risk(data, out, ["age", "hours_per_week", "birth_year"]).to_dict()
    direct.pop("wall_seconds")
    assert got == direct


# ---------------------------------------------------------------- households


def _household_table(rng, n=240):
    x = rng.normal(size=n).round(3)
    y = rng.normal(size=n).round(3)
    homes = rng.integers(0, n // 3, n)
    order = np.argsort(x, kind="stable")
    gx, gy = np.empty(n), np.empty(n)
    for g in range(0, n, 4):  # groups of 4 (the last may be larger) by x: their means published
        rows = order[g: g + 4] if g + 8 <= n else order[g:]
        gx[rows], gy[rows] = x[rows].mean(), y[rows].mean()
        if g + 8 > n:
            break
    w = rng.choice([0.0, 1.0, 2.5, 40.0], n)
    original = pl.DataFrame({"x": x, "y": y, "hh": [f"h{h}" for h in homes], "w": w})
    release = pl.DataFrame({"x": gx, "y": gy, "hh": original["hh"], "w": w})
    return original, release, homes, w


@pytest.mark.parametrize("weights", [False, True])
def test_household_risk_against_the_reference(tmp_path, weights):
    original, release, homes, w = _household_table(np.random.default_rng(2))
    o, m = tmp_path / "o.parquet", tmp_path / "m.parquet"
    original.write_parquet(o)
    release.write_parquet(m)
    wcol = "w" if weights else None
    got = [disclosure_risk(o, m, ["x", "y"], household_column="hh", weight_column=wcol, chunk_rows=c).to_dict()
           for c in (7, 100_000)]
    assert got[0]["household"] == got[1]["household"]  # chunks: bit for bit
    hh = got[0]["household"]
    keys = list(release.select("x", "y").iter_rows())
    credit = dbrl_credits(original.select("x", "y").to_numpy(), release.select("x", "y").to_numpy())
    want = ref.households(keys, homes.tolist(), credit, w.tolist() if weights else None)
    assert hh["column"] == "hh" and hh["households"] == want["households"]
    assert hh["prosecutor"] == pytest.approx(want["prosecutor"], rel=1e-12)
    assert hh["dbrl"] == pytest.approx(want["dbrl"], rel=1e-9)
    if weights:
        for name in ("highest_risk", "share", "households_at_risk"):
            assert hh["individual"][name] == pytest.approx(want["individual"][name], rel=1e-12)
        assert hh["individual"]["expected"] == pytest.approx(want["individual"]["expected"], rel=1e-12)
    else:
        assert hh["individual"] is None
    # a household is at least as exposed as its most exposed member
    assert hh["prosecutor"]["highest_risk"] >= got[0]["prosecutor"]["highest_risk"]


def test_household_risk_through_the_command_line(tmp_path, capsys):
    data = _census(tmp_path, hh=(pl.col("person_id") // 3).cast(pl.String))
    out, rep, js = tmp_path / "out.parquet", tmp_path / "rep.json", tmp_path / "risk.json"
    assert main(["anonymize", data, str(out), "--qi", "age,hours_per_week", "--k", "3", "--risk",
                 "--household-column", "hh", "--report", str(rep), "--quiet"]) == 0, capsys.readouterr().err
    assert main(["risk", data, str(out), "--qi", "age,hours_per_week", "--household-column", "hh",
                 "--json", str(js)]) == 0
    assert "households (400, column 'hh'" in capsys.readouterr().out
    got, want = _risk_block(rep), _risk_block(js)
    assert got["household"] == want["household"] and got["household"]["households"] == 400
    assert "hh" not in got["class_qi"]


@pytest.mark.parametrize("case, message", [
    ("qi", "household column 'age' is also a quasi-identifier"),
    ("missing", "household column 'hh' of .* has a missing value at row 5 "),
    ("unknown", "household column 'nope' not found"),
])
def test_a_bad_household_column_is_one_line_exit_2(tmp_path, capsys, case, message):
    import re

    hh = pl.when(pl.col("person_id") == pl.col("person_id").first().add(4)).then(None).otherwise(pl.col("person_id"))
    data = _census(tmp_path, 300, hh=hh)
    column = {"qi": "age", "missing": "hh", "unknown": "nope"}[case]
    js = tmp_path / "r.json"
    assert main(["risk", data, data, "--qi", "age,hours_per_week", "--household-column", column,
                 "--json", str(js)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and re.search(message, err), err
    assert not js.exists()


# ---------------------------------------------------------------- sampling weights


def test_a_weight_of_zero_counts_as_the_record_itself(tmp_path, capsys):
    rng = np.random.default_rng(4)
    w = rng.choice([0.0, 0.0, 3.0, 12.5], 600)
    data = _census(tmp_path, 600, w=pl.Series(w))
    out, rep = tmp_path / "out.parquet", tmp_path / "rep.json"
    assert main(["anonymize", data, str(out), "--qi", "age,hours_per_week,sex", "--k", "3", "--risk",
                 "--weight-column", "w", "--report", str(rep), "--quiet"]) == 0, capsys.readouterr().err
    risk = json.loads(rep.read_text())["risk"]
    want = ref.measures(list(pl.read_parquet(out).select("age", "hours_per_week", "sex").iter_rows()), w.tolist())
    for name in ("prosecutor", "journalist", "marketer", "individual_risk"):
        assert risk[name] == pytest.approx(want[name], rel=1e-12), name
    assert risk["journalist"]["highest_risk"] <= risk["prosecutor"]["highest_risk"]
    assert risk["population"] == pytest.approx(want["population"], rel=1e-12)


@pytest.mark.parametrize("bad, row", [(-3.0, 11), (float("nan"), 5), (float("inf"), 300)])
def test_a_bad_weight_is_refused_before_the_first_pass(tmp_path, capsys, monkeypatch, bad, row):
    import engine.release

    def no_run(*a, **k):
        raise AssertionError("the run started before the weights were checked")

    monkeypatch.setattr(engine.release, "run", no_run)
    w = np.full(300, 5.0)
    w[row - 1] = bad
    data = _census(tmp_path, 300, w=pl.Series(w))
    out = tmp_path / "out.parquet"
    code = main(["anonymize", data, str(out), "--qi", "age,hours_per_week", "--k", "3", "--risk",
                 "--weight-column", "w", "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and f"at row {row} " in err, err
    assert not out.exists()
    with pytest.raises(EngineError, match=f"at row {row} "):
        disclosure_risk(data, data, ["age"], weight_column="w")


# ---------------------------------------------------------------- wall time


def test_the_wall_time_includes_the_risk_step(tmp_path, capsys):
    data = _census(tmp_path, 600)
    out, rep = tmp_path / "out.parquet", tmp_path / "rep.json"
    assert main(["anonymize", data, str(out), "--qi", "age,hours_per_week", "--k", "3", "--risk",
                 "--report", str(rep), "--quiet"]) == 0, capsys.readouterr().err
    r = json.loads(rep.read_text())
    assert r["passes"]["risk"] > 0
    assert r["wall_seconds"] >= r["risk"]["wall_seconds"]

