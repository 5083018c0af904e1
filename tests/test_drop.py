"""``--drop``: columns left out of the release (never read, never written), the leak
guard's way out; ``verify --original`` accepts a release without them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

import engine
from engine.audit.verify import verify_release
from engine.cli import main
from engine.errors import EngineError

DATA = Path(__file__).parent / "data"


def _table(n=600, seed=0) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    age = rng.integers(18, 90, n)
    return pl.DataFrame({"id": [f"p{i:05d}" for i in rng.permutation(n)], "age": age, "birth_year": 2024 - age,
                         "hours": rng.integers(1, 60, n), "note": [f" x{i % 7}," if i % 5 else None for i in range(n)],
                         "region": rng.integers(1, 5, n)})


def test_a_dropped_column_is_not_read_nor_written_and_the_rest_is_byte_faithful(tmp_path, capsys):
    src, out = tmp_path / "in.csv", tmp_path / "out.csv"
    _table().write_csv(src)
    argv = ["anonymize", str(src), str(out), "--qi", "age,hours", "--k", "3", "--quiet"]
    assert main(argv) == 2  # birth_year gives age back
    assert "drop it (--drop birth_year)" in capsys.readouterr().err
    assert main([*argv, "--drop", "birth_year"]) == 0
    got, orig = pl.read_csv(out, infer_schema=False), pl.read_csv(src, infer_schema=False)
    assert got.columns == ["id", "age", "hours", "note", "region"]
    assert got.select("id", "note", "region").equals(orig.select("id", "note", "region"))
    # the original's text, field by field (the note's leading space and quoted comma kept)
    lines = out.read_text().splitlines()
    assert lines[0] == "id,age,hours,note,region"
    res = verify_release(out, "age,hours", 3, original=src)
    assert res.ok, res.summary()
    detail = {c["name"]: c["detail"] for c in res.checks}["other columns"]
    assert "left out of the release (anonymize --drop): birth_year" in detail


def test_the_api_and_parquet(tmp_path):
    df = _table()
    res = engine.microaggregate(df, qi=["age", "hours"], k=3, drop=["birth_year", "note"])
    assert res.table.columns == ["id", "age", "hours", "region"]
    src, out = tmp_path / "in.parquet", tmp_path / "out.parquet"
    df.write_parquet(src)
    engine.anonymize(src, out, qi=["age", "hours"], k=3, drop="birth_year")
    got = pl.read_parquet(out)
    assert got.columns == ["id", "age", "hours", "note", "region"]
    assert got.select("id", "note", "region").equals(df.select("id", "note", "region"))
    assert verify_release(out, ["age", "hours"], 3, original=src).ok
    # a changed column still fails verify (left out: listed, not failed; changed: failed)
    got.with_columns(pl.col("region") + 1).write_parquet(out)
    assert not verify_release(out, ["age", "hours"], 3, original=src).ok


@pytest.mark.parametrize("kw, msg", [
    (dict(drop="nope"), "drop (--drop): column 'nope' not found in "),
    (dict(drop="age"), "drop (--drop): column 'age' is a quasi-identifier; "),
    (dict(drop="region", strata="region"), "drop (--drop): column 'region' is a stratum (--strata); "),
    (dict(drop="id", person_column="id"), "drop (--drop): column 'id' is the person column; "),
    (dict(drop="birth_year", derived=["birth_year=age"]), "drop (--drop): column 'birth_year' is a derived column"),
    (dict(drop="g", group_column="g"), "drop (--drop): column 'g' is the group column; "),
])
def test_a_dropped_column_the_run_uses_is_refused(kw, msg, tmp_path):
    src, out = tmp_path / "in.parquet", tmp_path / "out.parquet"
    _table().drop("birth_year" if "derived" not in kw else "note").write_parquet(src)
    with pytest.raises(EngineError) as err:
        engine.anonymize(src, out, qi=["age", "hours"], k=3, **kw)
    assert str(err.value).startswith(msg) and "\n" not in str(err.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.parquet"]


def test_drop_lifts_the_adult_refusal_with_every_method(tmp_path):
    for method, kw in (("mdav", dict(k=3)), ("mnqia", dict(k=3)),
                       ("maxent", dict(k=None, sa="occupation", epsilon=2.0))):
        out = tmp_path / f"{method}.parquet"
        engine.anonymize(DATA / "adult.csv", out, qi=["age", "education_num", "hours_per_week"], method=method,
                         drop="education", **kw)
        assert "education" not in pl.read_parquet(out).columns
