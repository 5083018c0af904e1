"""IPUMS extracts (engine.io.ipums): DDI codebooks and their fixed-width data, from
the fixtures ipumspy ships (tests/data/PROVENANCE.md): rectangular (usa_00172,
cps_00006) and hierarchical (cps_00421, its first 40,000 lines) extracts to Parquet
and .sav."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import engine
from engine.cli import main
from engine.io import ipums
from engine.io.labelled import is_category

DATA = Path(__file__).parent / "data" / "ipums"


def _fixed(path: Path, ddi) -> pl.DataFrame:
    """The data file read the obvious way, line by line (the reference)."""
    rows = []
    with gzip.open(path, "rt", encoding="latin-1") as f:
        for line in f:
            rows.append({v.name: line[v.start:v.start + v.width] for v in ddi.variables})
    return pl.DataFrame(rows)


def test_rectangular_extract_reads_as_the_fixed_width_file_says(tmp_path):
    ddi = ipums.parse_ddi(str(DATA / "usa_00172.xml"))
    assert not ddi.hierarchical
    tmp = ipums.to_parquet(str(DATA / "usa_00172.xml"), "usa", tmp_path)
    got = pl.read_parquet(tmp)
    ref = _fixed(DATA / "usa_00172.dat.gz", ddi)
    assert got.columns == [v.name for v in ddi.variables] and got.height == ref.height
    assert got["AGE"].to_list() == [int(x) for x in ref["AGE"].to_list()]
    hhwt = next(v for v in ddi.variables if v.name == "HHWT")
    assert hhwt.decimals == 2 and got["HHWT"][0] == int(ref["HHWT"][0]) / 100
    assert is_category(ddi.meta.cols["SEX"]) and is_category(ddi.meta.cols["GQ"])
    assert not is_category(ddi.meta.cols["AGE"]) and not is_category(ddi.meta.cols["YEAR"])


def test_hierarchical_extract_is_one_row_per_person_with_its_household(tmp_path):
    ddi = ipums.parse_ddi(str(DATA / "cps_00421.xml"))
    assert ddi.hierarchical and ddi.key == "SERIAL"
    tmp = ipums.to_parquet(str(DATA / "cps_00421.xml"), "cps", tmp_path)
    got = pl.read_parquet(tmp)
    assert "RECTYPE" not in got.columns and got.columns[:3] == ["YEAR", "SERIAL", "MONTH"]
    # the reference: each P line takes the columns of the last H line before it
    lines = gzip.open(DATA / "cps_00421.dat.gz", "rt", encoding="latin-1").read().splitlines()
    state = next(v for v in ddi.variables if v.name == "STATEFIP")
    serial = next(v for v in ddi.variables if v.name == "SERIAL")
    want, home = [], None
    for line in lines:
        if line[0] == "H":
            home = line
        else:
            assert line[serial.start:serial.start + serial.width] == home[serial.start:serial.start + serial.width]
            want.append(int(home[state.start:state.start + state.width]))
    assert got.height == len(want) == 24_391
    assert got["STATEFIP"].to_list() == want


def test_hierarchical_link_is_the_same_whatever_the_chunk(tmp_path, monkeypatch):
    a = pl.read_parquet(ipums.to_parquet(str(DATA / "cps_00421.xml"), "cps", tmp_path))
    monkeypatch.setattr(ipums, "LINES", 997)  # households cut across chunks
    b = pl.read_parquet(ipums.to_parquet(str(DATA / "cps_00421.xml"), "cps", tmp_path))
    assert a.equals(b)


def test_ddi_to_parquet_and_sav_k_anonymous_codes_published(tmp_path):
    pyreadstat = pytest.importorskip("pyreadstat")
    src = str(DATA / "usa_00172.xml")
    out, sav = tmp_path / "out.parquet", tmp_path / "out.sav"
    engine.anonymize(src, str(out), qi=["SEX", "AGE"], k=5, progress=False)
    engine.anonymize(src, str(sav), qi=["SEX", "AGE"], k=5, progress=False)
    got = pl.read_parquet(out)
    assert set(got["SEX"].unique().to_list()) <= {1, 2}
    assert engine.verify_release(str(out), qi=["SEX", "AGE"], k=5).ok
    orig = pl.read_parquet(ipums.to_parquet(src, "usa", tmp_path))
    for c in ("SERIAL", "PERWT", "HHWT", "GQ"):
        assert got[c].to_list() == orig[c].to_list()
    df, meta = pyreadstat.read_sav(str(sav))
    assert meta.column_labels[meta.column_names.index("SEX")] == "Sex"
    assert meta.variable_value_labels["SEX"] == {1: "Male", 2: "Female"}
    assert df["SEX"].tolist() == got["SEX"].cast(pl.Float64).to_list()


def test_missing_codes_of_an_extract_never_averaged(tmp_path):
    src = str(DATA / "cps_00006.xml")
    out = tmp_path / "out.parquet"
    code = main(["anonymize", src, str(out), "--qi", "MONTH,INCTOT", "--k", "5",
                 "--missing", "INCTOT=99999998,99999999", "--no-progress"])
    assert code == 0
    inc = pl.read_parquet(out)["INCTOT"].to_numpy()
    real = inc[~np.isin(inc, [99999998, 99999999])]
    assert real.max() < 2_000_000  # no mean pulled up by a code
    assert np.isin(inc, [99999998, 99999999]).any()


def test_codebook_without_its_data_file(tmp_path, capsys):
    shutil.copy(DATA / "cps_00006.xml", tmp_path / "cps_00006.xml")
    out = tmp_path / "out.parquet"
    assert main(["anonymize", str(tmp_path / "cps_00006.xml"), str(out), "--qi", "INCTOT", "--k", "3",
                 "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cps_00006.dat" in err[0] and "not beside it" in err[0] and not out.exists()
