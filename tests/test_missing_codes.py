"""``--missing COL=CODE,...``: declared missing codes (996 "Missing", 997 "Refused",
999 "Unknown") are missing values for the grouping, never averaged with real values; a
class of missing values only publishes a declared code, not a null
(engine/encode/codes.py). The release stays k-anonymous, and every published value of
the QI is a mean of real values or a declared code."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

import engine
from engine.cli import main
from engine.errors import EngineError

CODES = (996, 997, 999)


def ages(n: int = 2000, seed: int = 0) -> pl.DataFrame:
    """Real ages 0..89 with about 9 % declared missing codes mixed in."""
    rng = np.random.default_rng(seed)
    age = rng.integers(0, 90, n)
    u = rng.random(n)
    age = np.where(u < 0.05, 996, np.where(u < 0.08, 997, np.where(u < 0.09, 999, age)))
    return pl.DataFrame({"id": np.arange(n, dtype=np.int64), "AGE": age.astype(np.int64),
                         "SEX": rng.integers(1, 3, n).astype(np.int64),
                         "note": [None if i % 5 == 0 else f"n{i}" for i in range(n)]})


def check_release(t: pl.DataFrame, o: pl.DataFrame) -> None:
    code = t["AGE"].is_in(list(CODES))
    age = o["AGE"].cast(pl.Float64)
    real = age.filter(~age.is_in([float(c) for c in CODES]))
    assert real.null_count() == 0 and real.min() >= 0 and real.max() <= 89  # never averaged with a code
    assert set(age.filter(age > 89).to_list()) <= {float(c) for c in CODES}
    assert (age.filter(~code) <= 89).all()  # a real value is never published as a code (the mode rule)
    assert (age.filter(code) > 89).mean() > 0.9  # codes kept, only a few imputed
    assert o.select(["id", "note"]).equals(t.select(["id", "note"]).cast(o.select(["id", "note"]).schema))


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_codes_are_never_averaged(tmp_path, fmt):
    t = ages()
    src, out = tmp_path / f"in.{fmt}", tmp_path / f"out.{fmt}"
    getattr(t, f"write_{fmt}")(src)
    r = engine.anonymize(src, out, qi=["AGE", "SEX"], k=5, nominal="SEX", missing=["AGE=996,997,999"])
    o = pl.read_parquet(out) if fmt == "parquet" else pl.read_csv(out)
    check_release(t, o)
    assert r.verified["min_class_size"] >= 5
    res = engine.verify_release(out, ["AGE", "SEX"], 5)
    assert res.ok and res.min_class_size >= 5
    m = r.metrics["mixed"]["missing_values"]["AGE"]
    assert m["missing"] == int(t["AGE"].is_in(list(CODES)).sum()) and m["kept_missing"] + m["imputed"] == m["missing"]
    # without the declaration the codes are averaged in: ages above 89 that are no code
    engine.anonymize(src, out, qi=["AGE", "SEX"], k=5, nominal="SEX")
    o = pl.read_parquet(out) if fmt == "parquet" else pl.read_csv(out)
    assert not set(o["AGE"].filter(o["AGE"] > 89).to_list()) <= {float(c) for c in CODES}


def test_a_class_of_several_codes_publishes_its_most_frequent():
    def published(codes):
        t = pl.DataFrame({"AGE": codes + [30] * 6, "SEX": [1] * 6 + [2] * 6})
        r = engine.microaggregate(t, qi=["AGE", "SEX"], k=6, nominal=["SEX"], missing={"AGE": [996, 997, 999]})
        assert r.table["AGE"].to_list()[6:] == [30.0] * 6
        return r.table["AGE"].to_list()[:6]

    assert published([996, 996, 997, 997, 997, 999]) == [997.0] * 6  # the most frequent code
    assert published([999, 996, 999, 996, 997, 997]) == [996.0] * 6  # a tie: the code declared first
    assert published([999, 996, 999, 996, 20, 22]) == [21.0] * 6  # values present: their mean (as for nulls)


def test_missing_on_the_command_line(tmp_path, capsys):
    t = ages(600, seed=3)
    src, out = tmp_path / "in.parquet", tmp_path / "out.parquet"
    t.write_parquet(src)
    assert main(["anonymize", str(src), str(out), "--qi", "AGE,SEX", "--k", "3", "--missing", "AGE=996,997",
                 "--missing", "SEX=9", "--nominal", "SEX", "--quiet"]) == 0
    o = pl.read_parquet(out)
    assert not o["AGE"].filter((o["AGE"] > 89) & ~o["AGE"].is_in([996.0, 997.0, 999.0])).len()


@pytest.mark.parametrize("given, message", [
    (dict(missing=["AGE=abc"]), "missing (--missing): code 'abc' of column 'AGE' is not a number, and the column is Int64"),
    (dict(missing=["AGE=996.5"]), "code '996.5' of column 'AGE' is not a whole number"),
    (dict(missing={"name": [9]}), "code 9.5 of column 'name'"),
    (dict(missing=["note=x"]), "missing (--missing): column 'note' is not a quasi-identifier"),
    (dict(missing=["AGE"]), "missing (--missing): expected COLUMN=CODE"),
    (dict(missing=["AGE=996", "AGE=997"]), "missing (--missing) names column 'AGE' twice"),
    (dict(missing=["AGE=996"], method="mnqia"), "missing (--missing) does not apply to method mnqia"),
])
def test_bad_missing_is_one_line(tmp_path, given, message):
    t = ages(200).with_columns(name=pl.lit("x"))
    src, out = tmp_path / "in.parquet", tmp_path / "out.parquet"
    t.write_parquet(src)
    qi = ["AGE", "SEX"] + (["name"] if "name" in str(given) else [])
    if "name" in str(given):
        given = dict(missing={"name": [9.5]})
    with pytest.raises(EngineError, match=message.replace("(", r"\(").replace(")", r"\)")):
        engine.anonymize(src, out, qi=qi, k=3, **given)
    assert not out.exists()


def test_wrong_code_type_on_the_command_line(tmp_path, capsys):
    src, out = tmp_path / "in.parquet", tmp_path / "out.parquet"
    ages(100).write_parquet(src)
    assert main(["anonymize", str(src), str(out), "--qi", "AGE,SEX", "--missing", "AGE=unknown"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "code 'unknown' of column 'AGE' is not a number" in err
    assert not out.exists()


def test_verify_checks_codes_as_missing_values(tmp_path, capsys):
    """verify --original on a --missing release: a class of codes publishes a code, a class
    with values their mean; without the declaration the codes read as values and "class
    means" fails; a code replaced by a number fails."""
    t = ages()
    src, out, bad = tmp_path / "in.parquet", tmp_path / "out.parquet", tmp_path / "bad.parquet"
    t.write_parquet(src)
    engine.anonymize(src, out, qi=["AGE", "SEX"], k=5, nominal="SEX", missing=["AGE=996,997,999"])
    res = engine.verify_release(out, ["AGE", "SEX"], 5, original=src, nominal="SEX", missing={"AGE": list(CODES)})
    assert res.ok, res.summary()
    assert res.information_loss_by_column["AGE"] < 1  # codes left out of the loss too
    assert not engine.verify_release(out, ["AGE", "SEX"], 5, original=src, nominal="SEX").ok  # codes as values
    o = pl.read_parquet(out)
    assert (o["AGE"] == 996).any()
    o.with_columns(AGE=pl.when(pl.col("AGE") == 996).then(41.37).otherwise(pl.col("AGE"))).write_parquet(bad)
    res = engine.verify_release(bad, ["AGE", "SEX"], 5, original=src, nominal="SEX", missing={"AGE": list(CODES)})
    fail = [c for c in res.failures if c["name"] == "class means"]
    assert fail and "published 41.37" in fail[0]["detail"] and "declared missing code" in fail[0]["detail"]
    args = ["verify", str(out), "--qi", "AGE,SEX", "--k", "5", "--original", str(src), "--nominal", "SEX"]
    assert main(args + ["--missing", "AGE=996,997,999"]) == 0
    assert main([args[0], str(bad), *args[2:], "--missing", "AGE=996,997,999"]) == 1
    capsys.readouterr()
    assert main(args + ["--missing", "AGE=old"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "code 'old' of column 'AGE' is not a number" in err
    assert main(["verify", str(out), "--qi", "AGE,SEX", "--k", "5", "--missing", "AGE=996"]) == 2
    assert "--original" in capsys.readouterr().err
