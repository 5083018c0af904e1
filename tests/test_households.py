"""--household-column: household-level QIs (constant within every household) published
identically for all members, classes of at least k persons (engine/entities.py)."""

import numpy as np
import polars as pl
import pytest

import engine
from engine.cli import main
from engine.errors import EngineError

QI = ["state", "hhsize", "age", "sex"]
HH = ["state", "hhsize"]


def households(n=400, seed=2) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    size = rng.integers(1, 6, n)
    return pl.DataFrame({"serial": np.repeat(np.arange(n) * 7 + 100, size),
                         "state": np.repeat(rng.integers(1, 50, n), size).astype(float),
                         "hhsize": np.repeat(size, size), "age": rng.integers(0, 90, size.sum()).astype(float),
                         "sex": rng.choice(["F", "M"], size.sum()), "weight": rng.random(size.sum())})


def mates_differ(t: pl.DataFrame) -> int:
    return int(t.group_by("serial").agg(pl.struct(HH).n_unique().alias("u")).filter(pl.col("u") > 1).height)


def test_mates_publish_the_same_household_values(tmp_path):
    df = households()
    df.write_parquet(tmp_path / "in.parquet")
    rep = engine.anonymize(tmp_path / "in.parquet", tmp_path / "out.parquet", qi=QI, k=3, household_column="serial")
    t = pl.read_parquet(tmp_path / "out.parquet")
    assert mates_differ(t) == 0
    assert t.group_by(QI).len().get_column("len").min() >= 3
    assert t.select("serial", "weight").equals(df.select("serial", "weight")) and t.columns == df.columns
    assert rep.metrics["entities"]["household_level_qi"] == HH
    assert rep.qi == QI and set(rep.information_loss_by_qi) == set(QI)
    res = engine.verify_release(tmp_path / "out.parquet", QI, 3, original=tmp_path / "in.parquet",
                                household_column="serial")
    assert res.ok, res.summary()


def test_control_without_the_option_mates_differ():
    """Without the option mates publish different states (or the leak guard refuses the
    household id, which gives the original state back)."""
    try:
        t = engine.microaggregate(households(), qi=QI, k=3).table
    except EngineError as e:
        assert "'serial'" in str(e) and "'state'" in str(e)
    else:
        assert mates_differ(t) > 0


def test_household_and_person_columns_together():
    df = households(300, seed=5).drop("weight")
    rounds = pl.concat([df.with_columns(pl.int_range(pl.len()).alias("pid")),
                        df.with_columns(pl.int_range(pl.len()).alias("pid"), pl.col("age") + 1)])
    # (the person id is constant within persons: the leak guard judges it per person, no evidence)
    t = engine.microaggregate(rounds, qi=QI, k=3, household_column="serial", person_column="pid").table
    assert mates_differ(t) == 0
    assert t.group_by(QI).agg(pl.col("pid").n_unique()).get_column("pid").min() >= 3
    assert t.group_by("pid").agg(pl.struct(QI).n_unique().alias("u")).get_column("u").max() == 1


def test_only_household_level_qis():
    t = engine.microaggregate(households(), qi=HH, k=4, household_column="serial").table
    assert mates_differ(t) == 0
    assert t.group_by("serial").n_unique().height == households().get_column("serial").n_unique()


def test_deterministic_across_chunks_and_threads(tmp_path):
    households(500, seed=9).write_parquet(tmp_path / "in.parquet")
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    engine.anonymize(tmp_path / "in.parquet", a, qi=QI, k=3, household_column="serial")
    engine.anonymize(tmp_path / "in.parquet", b, qi=QI, k=3, household_column="serial", chunk_rows=101, threads=1)
    assert a.read_bytes() == b.read_bytes()


def test_cli_csv(tmp_path, capsys):
    households(200).write_csv(tmp_path / "in.csv")
    args = ["--qi", ",".join(QI), "--k", "3", "--household-column", "serial"]
    assert main(["anonymize", str(tmp_path / "in.csv"), str(tmp_path / "out.csv"), *args, "--quiet"]) == 0
    t = pl.read_csv(tmp_path / "out.csv")
    assert mates_differ(t) == 0
    assert main(["verify", str(tmp_path / "out.csv"), *args, "--original", str(tmp_path / "in.csv")]) == 0
    assert not [p for p in tmp_path.iterdir() if p.name not in ("in.csv", "out.csv")]  # no stage file left


@pytest.mark.parametrize("kw, text", [
    (dict(household_column="state"), "is a quasi-identifier"),
    (dict(household_column="serial", person_column="serial"), "name the same column"),
    (dict(household_column="serial", method="maxent", sa="sex", k=None), "does not apply to method maxent"),
])
def test_bad_input_one_line(kw, text):
    qi = ["state", "age"] if kw.get("method") else QI
    with pytest.raises(EngineError, match=text) as e:
        engine.microaggregate(households(50), qi=qi, **{"k": 3, **kw})
    assert "\n" not in str(e.value)


def test_stratum_must_be_constant_in_a_household():
    df = households(60).with_columns((pl.int_range(pl.len()) % 2).alias("half"))
    with pytest.raises(EngineError, match="stratum column 'half' varies within serial"):
        engine.microaggregate(df, qi=QI, k=3, household_column="serial", strata="half")
