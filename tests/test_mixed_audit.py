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
    # without --mixed the categories are read as maxent's sets: the failure names the option
    v = verify_release(d / "rel.parquet", QI, 4, original=d / "orig.parquet")
    assert not v.ok and "--mixed" in v.failures[0]["detail"]


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
