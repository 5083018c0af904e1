"""--person-column: every published class holds at least k distinct persons, all records
of a person publish the same QI values (engine/entities.py, docs/households.md)."""

import numpy as np
import polars as pl
import pytest

import engine
from engine.cli import main
from engine.errors import EngineError, VerificationError
from engine.passes.selfcheck import ClassCounter, PersonCounter

QI = ["age", "income", "sex"]


def records(persons=300, seed=1) -> pl.DataFrame:
    """Persons with 1 to 6 records each (rounds), shuffled; age and income vary by record."""
    rng = np.random.default_rng(seed)
    pid = np.repeat(np.arange(persons) * 3 + 11, rng.integers(1, 7, persons))
    rng.shuffle(pid)
    n = pid.shape[0]
    base = rng.integers(18, 90, persons * 3 + 11)
    return pl.DataFrame({"pid": pid, "age": (base[pid] + rng.integers(0, 2, n)).astype(float),
                         "income": rng.normal(5e4, 1e4, n), "sex": rng.choice(["F", "M"], n),
                         "note": [f"r{i}" if i % 7 else None for i in range(n)]})


def persons_per_class(table: pl.DataFrame) -> pl.Series:
    return table.group_by(QI).agg(pl.col("pid").n_unique()).get_column("pid")


@pytest.mark.parametrize("k", [3, 5])
def test_every_class_holds_k_persons_and_a_person_one_class(k):
    df = records()
    res = engine.microaggregate(df, qi=QI, k=k, person_column="pid")
    t = res.table
    assert persons_per_class(t).min() >= k
    assert t.group_by("pid").agg(pl.struct(QI).n_unique().alias("u")).get_column("u").max() == 1
    assert t.select("pid", "note").equals(df.select("pid", "note"))  # pass-through, order kept
    assert res.report.verified["min_class_persons"] >= k
    assert res.report.metrics["entities"]["entities"] == df.get_column("pid").n_unique()


def test_control_without_the_option_a_class_holds_fewer_persons():
    t = engine.microaggregate(records(), qi=QI, k=5).table
    assert persons_per_class(t).min() < 5


def test_published_value_is_the_record_mean_of_the_group(tmp_path):
    df = records(120)
    df.write_parquet(tmp_path / "in.parquet")
    engine.anonymize(tmp_path / "in.parquet", tmp_path / "out.parquet", qi=QI, k=4, person_column="pid")
    res = engine.verify_release(tmp_path / "out.parquet", QI, 4, original=tmp_path / "in.parquet",
                                person_column="pid")
    assert res.ok, res.summary()
    assert any(c["name"] == "persons" and c["ok"] for c in res.checks)
    # control: a plain release fails verify's person count
    engine.anonymize(tmp_path / "in.parquet", tmp_path / "plain.parquet", qi=QI, k=4)
    res = engine.verify_release(tmp_path / "plain.parquet", QI, 4, person_column="pid")
    assert not res.ok and any(c["name"] == "persons" and not c["ok"] for c in res.checks)


def test_deterministic_across_chunk_sizes_threads_and_blocks(tmp_path):
    df = records(400, seed=4)
    df.write_parquet(tmp_path / "in.parquet")
    outs = []
    for i, kw in enumerate([{}, {"chunk_rows": 97, "threads": 1}, {"block_size": 200, "chunk_rows": 333}]):
        engine.anonymize(tmp_path / "in.parquet", tmp_path / f"o{i}.parquet", qi=QI, k=3, person_column="pid", **kw)
        outs.append(pl.read_parquet(tmp_path / f"o{i}.parquet"))
    assert outs[0].equals(outs[1])
    assert persons_per_class(outs[2]).min() >= 3  # (blocks: other groups, the same guarantee)


def test_self_check_counts_persons():
    frame = pl.DataFrame({"a": [1.0, 1.0, 1.0, 2.0, 2.0, 2.0], "p": [1, 1, 2, 3, 4, 5]})
    c = PersonCounter(ClassCounter(["a"], 4), "p")
    c.add(frame)
    with pytest.raises(VerificationError, match="2 distinct person"):
        c.check(3, 6)
    split = PersonCounter(ClassCounter(["a"], 4), "p")
    split.add(pl.DataFrame({"a": [1.0, 2.0], "p": [1, 1]}))
    with pytest.raises(VerificationError, match="more than one class"):
        split.check(1, 2)


@pytest.mark.parametrize("kw, text", [
    (dict(person_column="age"), "is a quasi-identifier"),
    (dict(person_column="note", group_column="note"), "is the group column"),
    (dict(person_column="pid", strata="pid"), "is a stratum"),
    (dict(person_column="pid", method="mnqia"), "does not apply to method mnqia"),
    (dict(person_column="nope"), "no column 'nope'"),
])
def test_bad_input_one_line(kw, text):
    with pytest.raises(EngineError, match=text) as e:
        engine.microaggregate(records(50), qi=["age", "income"] if kw.get("method") else QI,
                              **{"k": 3, **kw})
    assert "\n" not in str(e.value)


def test_null_person_refused():
    df = records(50).with_columns(pl.when(pl.int_range(pl.len()) == 4).then(None).otherwise(pl.col("pid")).alias("pid"))
    with pytest.raises(EngineError, match="row 5 has no value"):
        engine.microaggregate(df, qi=QI, k=3, person_column="pid")


def test_cli_writes_nothing_on_bad_input(tmp_path, capsys):
    records(50).write_parquet(tmp_path / "in.parquet")
    code = main(["anonymize", str(tmp_path / "in.parquet"), str(tmp_path / "out.parquet"), "--qi", "age,income",
                 "--k", "3", "--person-column", "age"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("microagg: error: ") and err.count("\n") == 1
    assert not (tmp_path / "out.parquet").exists()


def test_cli_and_verify(tmp_path, capsys):
    records(200).write_csv(tmp_path / "in.csv")
    assert main(["anonymize", str(tmp_path / "in.csv"), str(tmp_path / "out.csv"), "--qi", ",".join(QI),
                 "--k", "3", "--person-column", "pid", "--quiet"]) == 0
    assert (tmp_path / "out.csv").read_text().splitlines()[0] == "pid,age,income,sex,note"
    assert main(["verify", str(tmp_path / "out.csv"), "--qi", ",".join(QI), "--k", "3", "--person-column", "pid",
                 "--original", str(tmp_path / "in.csv")]) == 0


def test_scheduler_refused(tmp_path):
    records(50).write_parquet(tmp_path / "in.parquet")
    with pytest.raises(EngineError, match="does not run with scheduler"):
        engine.anonymize(tmp_path / "in.parquet", tmp_path / "out.parquet", qi=QI, k=3, person_column="pid",
                         scheduler="local")
    assert not (tmp_path / "out.parquet").exists()
