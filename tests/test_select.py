"""Key-attribute selection through the engine: AMA (Sun et al. (AMA)) and EMAD (Oommen & Fayyoumi (EMAD))."""

import json
import subprocess
import sys

import numpy as np
import polars as pl
import pytest

import engine
import research as R
from engine import select as D
from engine.errors import EngineError

from conftest import DATA


def test_ama_through_the_api_matches_the_in_memory_reference(census):
    qi = census.columns
    res = engine.microaggregate(census, qi=qi, k=3, method="ama", group_column="g")
    key = D.select_key_attributes(census, qi, "mi-distance")
    assert res.report.key_attributes == key
    Z = R.standardize(census.to_numpy())
    idx = sorted(qi.index(c) for c in key)
    ref = R.ama_labels(Z, idx, 3)
    # same partition (group ids may differ in numbering only)
    got = res.table["g"].to_numpy()
    pairs = set(zip(got.tolist(), ref.tolist()))
    assert len(pairs) == len(set(got.tolist())) == len(set(ref.tolist()))
    assert res.report.information_loss_percent == pytest.approx(R.information_loss(Z, ref), abs=1e-9)
    assert res.report.projected_information_loss_percent == pytest.approx(
        R.information_loss(Z[:, idx], ref), abs=1e-9)
    # every QI, also the non-key ones, is replaced by its group's mean
    for c in qi:
        means = census.with_columns(g=res.table["g"]).group_by("g").agg(pl.col(c).mean()).sort("g")[c].to_numpy()
        pub = res.table.group_by("g").agg(pl.col(c).first()).sort("g")[c].to_numpy()
        assert np.allclose(means, pub, rtol=1e-12)


def test_emad_with_any_method_and_streaming(tarragona, tmp_path):
    qi = tarragona.columns
    rep_mem = engine.microaggregate(tarragona, qi=qi, k=3, method="ivmdav", select="emad", select_count=3).report
    assert len(rep_mem.key_attributes) == 3
    path = tmp_path / "t.parquet"
    tarragona.write_parquet(path)
    rep = engine.anonymize(str(path), tmp_path / "o.parquet", qi=qi, k=3, select="emad", select_count=3,
                           block_size=200)
    assert rep.blocks > 1 and rep.key_attributes == rep_mem.key_attributes
    assert rep.min_group_size >= 3


@pytest.mark.parametrize("kwargs, message", [
    (dict(method="ama", select="emad", select_count=2), "ama selects its own"),
    (dict(select="emad"), "select_count .*is needed with select='emad'"),
    (dict(select="emad", select_count=99), "select_count must be a whole number between 1 and"),
    (dict(select_count=2), "select_count .*takes effect only with select"),
    (dict(select="emad", select_count=2, select_measure="nope"), "unknown select_measure 'nope'"),
])
def test_bad_selection_settings(census, kwargs, message):
    with pytest.raises(EngineError, match=message):
        engine.microaggregate(census, qi=census.columns, k=3, **kwargs)


def test_profile_cli_prints_and_writes_json(tmp_path):
    out = tmp_path / "p.json"
    proc = subprocess.run([sys.executable, "-m", "engine", "profile", str(DATA / "census.csv"),
                           "--columns", "AFNLWGT,AGI,EMCONTRB,FEDTAX", "--measure", "emim", "--bins", "8",
                           "--json", str(out)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "key attributes" in proc.stdout
    got = json.loads(out.read_text())
    for key in ("columns", "matrix", "tree_edges", "degrees", "key_attributes"):
        assert key in got
    assert len(got["tree_edges"]) == 3
    bad = subprocess.run([sys.executable, "-m", "engine", "profile", str(DATA / "census.csv"),
                          "--columns", "AFNLWGT,nope"], capture_output=True, text=True)
    assert bad.returncode == 2 and "nope" in bad.stderr and bad.stderr.count("\n") == 1
