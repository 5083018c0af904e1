"""Households and persons on the files statistical offices hold (engine.passes.dependence's
per-entity dependency test, engine.entities with nominal QIs and declared missing codes):
a household weight or a person's repeated weight is judged per household or person, the
entity flow takes IPUMS/SPSS inputs' nominal QIs and missing codes (docs/households.md)."""

from pathlib import Path

import numpy as np
import polars as pl
import pytest

import engine
from engine.cli import main
from engine.errors import EngineError
from engine.io.source import open_source
from engine.options import RunConfig
from engine.passes.leak import guard

DATA = Path(__file__).parent / "data" / "ipums"


def homes(n=1500, seed=3) -> pl.DataFrame:
    """Households of 1-5 persons in row order, a household weight (nearly unique per
    household), a state code, ages with a declared missing code 999, a region code
    constant within households and a function of the state."""
    rng = np.random.default_rng(seed)
    size = rng.integers(1, 6, n)
    state = rng.integers(1, 40, n)
    rows = int(size.sum())
    age = rng.integers(0, 90, rows)
    age[rng.random(rows) < 0.03] = 999
    return pl.DataFrame({"serial": np.repeat(rng.permutation(n) + 1, size),
                         "hwt": np.repeat(np.round(rng.gamma(4, 500, n), 4), size),
                         "region": np.repeat(state // 4, size), "state": np.repeat(state, size),
                         "age": age, "sex": rng.integers(1, 3, rows)})


def _guard(df, qi, **kw):
    guard(open_source(df), RunConfig.make(qi=list(qi), k=5, **kw), df.height, 100_000)


def test_household_weight_judged_per_household():
    df = homes().drop("region")
    _guard(df, ["age", "sex", "state"], household_column="serial")
    # control: without the option the weight's household cells give the state back
    with pytest.raises(EngineError, match=r"column '(serial|hwt)' determines quasi-identifier 'state'"):
        _guard(df, ["age", "sex", "state"])


def test_household_level_column_that_determines_a_qi_still_refused():
    """A column constant within households is judged per household, not exempted: a
    state's region code beside its county-like QI gives it back over many households."""
    df = homes().with_columns((pl.col("state") * 100 + pl.col("region")).alias("code"))
    with pytest.raises(EngineError) as err:
        _guard(df.drop("region"), ["age", "sex", "state"], household_column="serial")
    assert "'code'" in str(err.value) and "'state'" in str(err.value)
    assert "values of 'serial' (one row each)" in str(err.value) or "one-to-one" in str(err.value)


def test_person_weight_repeated_over_rounds_judged_per_person():
    rng = np.random.default_rng(1)
    n = 900
    one = pl.DataFrame({"pid": rng.permutation(n) + 10, "age": rng.integers(18, 90, n),
                        "sex": rng.integers(1, 3, n), "wt": np.round(rng.gamma(3, 900, n), 3)})
    rounds = pl.concat([one.with_columns(pl.lit(r).alias("round")) for r in (1, 2, 3)]).sort("pid")
    _guard(rounds, ["age", "sex"], person_column="pid")
    with pytest.raises(EngineError, match=r"--person-column (pid|wt)"):
        _guard(rounds, ["age", "sex"])


def test_entity_run_with_nominal_and_missing_codes(tmp_path):
    df = homes().drop("region")  # (state // 4: a monotone transform of the state, refused)
    df.write_parquet(tmp_path / "in.parquet")
    out = tmp_path / "out.parquet"
    qi = ["state", "age", "sex"]
    rep = engine.anonymize(tmp_path / "in.parquet", out, qi=qi, k=5, household_column="serial",
                           nominal=["state", "sex"], missing={"age": [999]}, person_column=None)
    t = pl.read_parquet(out)
    assert set(t.get_column("state").unique()) <= set(df.get_column("state").unique())  # input codes only
    assert set(t.get_column("sex").unique()) <= {1, 2}
    ages = t.get_column("age")
    assert ((ages <= 90) | (ages == 999)).all()  # the code never averaged in
    assert t.group_by("serial").agg(pl.col("state").n_unique()).get_column("state").max() == 1
    assert t.group_by(qi).len().get_column("len").min() >= 5
    assert rep.qi_kinds == {"state": "nominal", "age": "numeric", "sex": "nominal"}
    res = engine.verify_release(out, qi, 5, original=tmp_path / "in.parquet", household_column="serial",
                                nominal=["state", "sex"], missing={"age": [999]})
    assert res.ok, res.summary()


def test_meps_persons_from_the_ddi(tmp_path, capsys):
    """The MEPS fixture (6,000 persons of 3 rounds): IPUMS makes SEX nominal; every class
    holds at least 5 distinct persons, the weights pass through."""
    ddi, out = DATA / "meps_00019.xml", tmp_path / "m.parquet"
    assert main(["anonymize", str(ddi), str(out), "--qi", "AGE,SEX", "--k", "5"]) == 2
    assert "--person-column MEPSID" in capsys.readouterr().err
    assert main(["anonymize", str(ddi), str(out), "--qi", "AGE,SEX", "--k", "5", "--person-column", "MEPSID"]) == 0
    t = pl.read_parquet(out)
    per = t.group_by("AGE", "SEX").agg(pl.col("MEPSID").n_unique()).get_column("MEPSID")
    assert per.min() >= 5
    with open_source(str(ddi), tmp_dir=str(tmp_path)) as src:
        orig = src.collect()
    assert t.drop("AGE", "SEX").equals(orig.drop("AGE", "SEX"))  # PERWEIGHT and the rest byte for byte
    assert main(["verify", str(out), "--qi", "AGE,SEX", "--k", "5", "--original", str(ddi),
                 "--person-column", "MEPSID"]) == 0


def test_cps_household_serials_in_state_blocks_refused_with_the_way_out(tmp_path, capsys):
    """cps_00421: serials (and CPSID, CPSIDP) are numbered in state blocks (99.9 % of
    neighbours share the state): with --household-column the order test refuses the
    serial, naming the way out; the household weight is no longer refused."""
    ddi, out = DATA / "cps_00421.xml", tmp_path / "c.parquet"
    args = ["anonymize", str(ddi), str(out), "--qi", "AGE,SEX,RACE,STATEFIP", "--k", "5"]
    assert main(args) == 2
    assert "--household-column SERIAL or --person-column SERIAL" in capsys.readouterr().err
    assert main([*args, "--household-column", "SERIAL"]) == 2
    err = capsys.readouterr().err
    assert "'SERIAL' is ordered in blocks of quasi-identifier 'STATEFIP'" in err and "renumber them" in err
    assert "HWTFINL" not in err and not out.exists()
