"""``microagg verify --original`` runs the leak guard's tests on the release (issue 39):
a pass-through column that follows or determines a QI's original value, a column not in
the original that holds a raw QI, and a pass-through column whose type changed all fail."""

import numpy as np
import polars as pl
import pytest

import engine
from engine.audit.verify import verify_release
from engine.cli import main

N = 3000


def _original(tmp_path):
    rng = np.random.default_rng(0)
    age = rng.integers(18, 90, N)
    df = pl.DataFrame({
        "age": age,
        "income": np.round(np.exp(rng.normal(10, 0.8, N)), 2),
        "random_id": rng.permutation(N),
        "weight": pl.Series(np.round(1000 + 8 * age + rng.normal(0, 400, N), 2), dtype=pl.Float32),
        "note": rng.choice(["a", "b", "c"], N),
    })
    src = tmp_path / "in.parquet"
    df.write_parquet(src)
    out = tmp_path / "out.parquet"
    engine.anonymize(str(src), out, qi=["age", "income"], k=5)
    return df, src, out


def _checks(v):
    return {c["name"]: c for c in v.checks}


def test_a_clean_release_passes_with_an_id_and_a_weight(tmp_path):
    _, src, out = _original(tmp_path)
    v = verify_release(out, ["age", "income"], 5, original=src)
    assert v.ok, v.summary()
    assert "none one-to-one with or determining a quasi-identifier" in _checks(v)["other columns"]["detail"]


def test_a_monotone_pass_through_column_fails(tmp_path):
    """Age in months beside age: published unchanged, it gives back the original age."""
    df, _, out = _original(tmp_path)
    months = (df["age"] * 12 + pl.Series(np.arange(N) % 12)).alias("age_months")
    orig2 = tmp_path / "in2.parquet"
    df.with_columns(months).write_parquet(orig2)
    bad = tmp_path / "bad.parquet"
    pl.read_parquet(out).with_columns(months).write_parquet(bad)
    v = verify_release(bad, ["age", "income"], 5, original=orig2)
    c = _checks(v)
    assert not v.ok and not c["dependencies"]["ok"], v.summary()
    assert c["dependencies"]["detail"].startswith("column 'age_months' (passed through unchanged) gives back "
                                                  "quasi-identifier 'age'")


def test_a_column_not_in_the_original_holding_a_raw_qi_fails(tmp_path, capsys):
    df, src, out = _original(tmp_path)
    bad = tmp_path / "bad.parquet"
    pl.read_parquet(out).with_columns(df["income"].alias("income_raw")).write_parquet(bad)
    assert main(["verify", str(bad), "--qi", "age,income", "--k", "5", "--original", str(src)]) == 1
    text = capsys.readouterr().out
    assert "[FAIL] dependencies: column 'income_raw' (not in the original) gives back quasi-identifier 'income'" \
        in text
    assert "release columns not in the original (checked against the quasi-identifiers' original values): " \
           "income_raw" in text
    # control: a column not in the original that follows the published values only (a group id)
    ok = tmp_path / "ok.parquet"
    pub = pl.read_parquet(out)
    pub.with_columns(pub.select(pl.struct("age", "income").rank("dense").alias("g"))["g"]).write_parquet(ok)
    v = verify_release(ok, ["age", "income"], 5, original=src)
    assert v.ok, v.summary()


def test_a_pass_through_column_whose_type_changed_fails(tmp_path):
    _, src, out = _original(tmp_path)
    bad = tmp_path / "bad.parquet"
    pl.read_parquet(out).with_columns(pl.col("weight").cast(pl.Float64)).write_parquet(bad)
    v = verify_release(bad, ["age", "income"], 5, original=src)
    c = _checks(v)
    assert not v.ok and not c["other columns"]["ok"]
    assert "type changed: weight (Float32 -> Float64)" in c["other columns"]["detail"]


def test_a_household_id_whose_mates_publish_different_states_fails(tmp_path):
    """The issue's CPS case: a household id passed through beside a state that the release
    changed for some mates; the mates' published values give the original back."""
    rng = np.random.default_rng(2)
    size = rng.integers(2, 5, N)
    hh = np.repeat(np.arange(N), size)[:N]
    state = rng.integers(1, 40, hh.max() + 1)[hh]
    df = pl.DataFrame({"hh": hh, "state": state, "age": rng.integers(18, 90, N)})
    src = tmp_path / "in.parquet"
    df.write_parquet(src)
    out = tmp_path / "out.parquet"
    engine.anonymize(df.drop("hh"), out, qi=["state", "age"], k=5)
    bad = tmp_path / "bad.parquet"
    pl.read_parquet(out).select(df["hh"], "state", "age").write_parquet(bad)
    v = verify_release(bad, ["state", "age"], 5, original=src)
    c = _checks(v)
    assert not v.ok and c["dependencies"]["detail"].startswith(
        "column 'hh' (passed through unchanged) gives back quasi-identifier 'state': it determines its original "
        "value on 100.0 % of the "), v.summary()
    # control: the same ids beside a release whose mates publish one state each pass this check
    alike = tmp_path / "alike.parquet"
    pub = pl.read_parquet(bad)
    pub.with_columns(pl.col("state").first().over("hh")).write_parquet(alike)
    v = verify_release(alike, ["state", "age"], 1, original=src)
    assert "dependencies" not in _checks(v), v.summary()
