"""verify and risk on mixed-type releases."""

import numpy as np
import polars as pl
import pytest

import engine
import reference_mixed as refmix
from engine.audit.risk import disclosure_risk
from engine.audit.verify import verify_release
from test_mixed import ORDER, QI, mixed_table


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    rng = np.random.default_rng(7)
    t = mixed_table(rng, 240)
    res = engine.microaggregate(t, QI, 4, ordinal={"grade": ORDER})
    d = tmp_path_factory.mktemp("rel")
    t.write_parquet(d / "orig.parquet")
    res.table.write_parquet(d / "rel.parquet")
    return t, res, d


def test_verify_mixed_release(release):
    t, res, d = release
    v = verify_release(d / "rel.parquet", QI, 4, original=d / "orig.parquet", ordinal={"grade": ORDER})
    assert v.ok, v.summary()
    names = [c["name"] for c in v.checks]
    assert "categories" in names and "generalization" not in names
    for c in QI:
        assert v.information_loss_by_column[c] == pytest.approx(res.report.information_loss_by_qi[c], rel=1e-9)
    assert v.information_loss_percent == pytest.approx(res.report.information_loss_percent, rel=1e-9)


def test_verify_mixed_csv_release(release, tmp_path):
    t, res, d = release
    res.table.write_csv(tmp_path / "rel.csv")
    t.write_csv(tmp_path / "orig.csv")
    v = verify_release(tmp_path / "rel.csv", QI, 4, original=tmp_path / "orig.csv", mixed=True,
                       ordinal={"grade": ORDER})
    assert v.ok, v.summary()
    assert v.information_loss_by_column["grade"] == pytest.approx(res.report.information_loss_by_qi["grade"])
    assert v.information_loss_by_column["day"] == pytest.approx(res.report.information_loss_by_qi["day"], rel=1e-6)


def test_verify_mixed_failures(release, tmp_path):
    t, res, d = release
    bad = res.table.with_columns(pl.when(pl.col("other") < 0).then(pl.lit("x")).otherwise(pl.col("colour"))
                                 .alias("colour"))
    bad = bad.with_columns(pl.when(pl.col("colour") == "red").then(pl.lit("crimson")).otherwise(pl.col("colour"))
                           .alias("colour"))
    bad.write_parquet(tmp_path / "bad.parquet")
    v = verify_release(tmp_path / "bad.parquet", QI, 4, original=d / "orig.parquet", mixed=True)
    assert not v.ok and [c["name"] for c in v.failures] == ["categories"]
    assert "'crimson'" in v.failures[0]["detail"]
    # without --mixed: the release is read as mixed-type from itself, and the same failure found
    v = verify_release(tmp_path / "bad.parquet", QI, 4, original=d / "orig.parquet")
    assert not v.ok and [c["name"] for c in v.failures] == ["categories"]


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_verify_reads_a_mixed_release_without_a_flag(release, tmp_path, fmt):
    """A correct mixed-type release passes ``verify --original`` with the flags of any
    other release (an ETL gate on its exit code), as Parquet and as CSV."""
    from engine.cli import main

    t, res, d = release
    rel, orig = tmp_path / f"rel.{fmt}", tmp_path / f"orig.{fmt}"
    getattr(res.table, f"write_{fmt}")(rel)
    getattr(t, f"write_{fmt}")(orig)
    v = verify_release(rel, QI, 4, original=orig)
    assert v.ok, v.summary()
    assert "categories" in [c["name"] for c in v.checks]
    assert main(["verify", str(rel), "--qi", ",".join(QI), "--k", "4", "--original", str(orig)]) == 0


def test_verify_still_reads_sets_of_a_range_release(tmp_path):
    """A maxent release with class means for its numbers and sets for its categories
    (no range columns) is still verified as sets: a class of several categories holds
    an unescaped ``|``."""
    from engine.synth import census_like

    t = census_like(3000, seed=2)
    t.write_parquet(tmp_path / "orig.parquet")
    engine.anonymize(tmp_path / "orig.parquet", tmp_path / "rel.parquet", ["age", "sex", "region"], None,
                     method="maxent", sa="occupation", epsilon=2.0, numeric_output="mean")
    rel = pl.read_parquet(tmp_path / "rel.parquet")
    assert rel["region"].str.contains("|", literal=True).any()
    v = verify_release(tmp_path / "rel.parquet", ["age", "sex", "region"], 2, original=tmp_path / "orig.parquet")
    assert v.ok, v.summary()
    assert "generalization" in [c["name"] for c in v.checks] and "categories" not in [c["name"] for c in v.checks]


def test_risk_mixed_matches_reference(release):
    t, res, d = release
    r = disclosure_risk(d / "orig.parquet", d / "rel.parquet", QI, ordinal={"grade": ORDER})
    assert r.dbrl == pytest.approx(refmix.dbrl(t, res.table, QI, {"grade": ORDER}), abs=1e-12)
    assert 0 < r.dbrl <= 1 / 4 + 1e-12
    r2 = disclosure_risk(d / "orig.parquet", d / "rel.parquet", ["x", "colour"])
    assert r2.dbrl == pytest.approx(refmix.dbrl(t, res.table, ["x", "colour"]), abs=1e-12)
    # interval disclosure: a categorical value is inside only when unchanged
    same = (t["colour"] == res.table["colour"]).to_numpy()
    sd = t["x"].std()
    near = (np.abs(t["x"].to_numpy() - res.table["x"].to_numpy()) <= 0.05 * sd)
    assert r2.interval_disclosure == pytest.approx(float((same & near).mean()))


def test_anonymize_risk_on_mixed(tmp_path):
    t = mixed_table(np.random.default_rng(3), 150)
    t.write_parquet(tmp_path / "in.parquet")
    rep = engine.anonymize(tmp_path / "in.parquet", tmp_path / "out.parquet", QI, 3, ordinal={"grade": ORDER},
                           risk=True)
    assert rep.risk is not None and 0 < rep.risk["dbrl"] <= 1 / 3 + 1e-12
