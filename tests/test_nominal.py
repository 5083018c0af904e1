"""``--nominal``: numeric QIs that code categories (a state, a race, a sex) are grouped
and published as categories: one of the input's codes (the class's most frequent),
never a mean, in the column's own type (engine/encode/kinds.py, engine/encode/mixed.py).
``verify --nominal`` checks them as categories; the summary and the report name each
QI's kind."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest

import engine
from engine.cli import main
from engine.errors import EngineError

STATES = [1, 2, 4, 5, 6, 8, 9, 10, 11, 12, 13, 15, 16, 17, 18]


def coded(n: int = 1500, seed: int = 0) -> pl.DataFrame:
    """An IPUMS-like table: integer codes (SEX 1/2, RACE 100..830, STATEFIP), a real age,
    and pass-through columns of every kind."""
    rng = np.random.default_rng(seed)
    return pl.DataFrame({
        "id": np.arange(n, dtype=np.int64),
        "AGE": rng.integers(0, 86, n).astype(np.int64),
        "SEX": rng.integers(1, 3, n).astype(np.int64),
        "RACE": rng.choice([100, 200, 300, 651, 801, 830], n).astype(np.int32),
        "STATEFIP": rng.choice(STATES, n).astype(np.int64),
        "note": [None if i % 7 == 0 else f"r{i}" for i in range(n)],
        "wt": np.round(rng.uniform(100, 3000, n), 3),
    })


def test_nominal_codes_are_input_codes_of_their_type(tmp_path):
    t = coded()
    src, out = tmp_path / "in.parquet", tmp_path / "out.parquet"
    t.write_parquet(src)
    engine.anonymize(src, out, qi=["AGE", "SEX", "RACE", "STATEFIP"], k=5, nominal=["SEX", "RACE,STATEFIP"])
    o = pl.read_parquet(out)
    for c in ("SEX", "RACE", "STATEFIP"):
        assert o.schema[c] == t.schema[c]  # Int64 stays Int64, Int32 stays Int32
        assert set(o[c].unique().to_list()) <= set(t[c].unique().to_list())
    assert o.schema["AGE"] == pl.Float64  # a numeric QI: its group's mean
    assert o.select(["id", "note", "wt"]).equals(t.select(["id", "note", "wt"]))  # pass-through, identical
    res = engine.verify_release(out, ["AGE", "SEX", "RACE", "STATEFIP"], 5, original=src, nominal="SEX,RACE,STATEFIP")
    assert res.ok, res.summary()
    # without --nominal the codes are averaged: not the input's codes, and verify says so
    engine.anonymize(src, out, qi=["AGE", "SEX", "RACE", "STATEFIP"], k=5)
    o = pl.read_parquet(out)
    assert not set(o["STATEFIP"].unique().to_list()) <= set(STATES)


def test_nominal_from_csv_publishes_the_texts(tmp_path):
    t = coded(900, seed=1)
    src, out = tmp_path / "in.csv", tmp_path / "out.csv"
    t.write_csv(src)
    assert main(["anonymize", str(src), str(out), "--qi", "AGE,SEX,STATEFIP", "--k", "4", "--nominal", "SEX",
                 "--nominal", "STATEFIP", "--quiet"]) == 0
    o = pl.read_csv(out, infer_schema=False)
    i = pl.read_csv(src, infer_schema=False)
    assert set(o["STATEFIP"].to_list()) <= set(i["STATEFIP"].to_list())
    assert set(o["SEX"].to_list()) <= {"1", "2"}
    assert o.select(["id", "RACE", "note", "wt"]).equals(i.select(["id", "RACE", "note", "wt"]))
    assert engine.verify_release(out, "AGE,SEX,STATEFIP", 4, original=src, nominal=["SEX", "STATEFIP"]).ok


def test_summary_and_report_name_each_kind(tmp_path, capsys):
    t = coded(600).with_columns(flag=pl.col("id") % 3 == 0, day=pl.date(2020, 1, 1) + pl.duration(days=(pl.col("id") * 7919) % 365))
    src, out, rep = tmp_path / "in.parquet", tmp_path / "out.parquet", tmp_path / "r.json"
    t.write_parquet(src)
    assert main(["anonymize", str(src), str(out), "--qi", "AGE,SEX,flag,day", "--k", "3", "--nominal", "SEX",
                 "--report", str(rep)]) == 0
    cap = capsys.readouterr()
    lines = (cap.out + cap.err).splitlines()
    assert lines[0].startswith("rows 600  groups")  # the first line as before (README)
    assert "qi: AGE numeric, SEX nominal, flag boolean, day date" in lines
    assert json.loads(rep.read_text())["qi_kinds"] == {"AGE": "numeric", "SEX": "nominal", "flag": "boolean",
                                                        "day": "date"}
    r = engine.anonymize(src, out, qi=["AGE", "SEX"], k=3)
    assert r.qi_kinds == {"AGE": "numeric", "SEX": "numeric"}
    assert "qi: AGE numeric, SEX numeric" in r.summary()


@pytest.mark.parametrize("given, message", [
    (dict(nominal="wt"), "nominal (--nominal): column 'wt' is not a quasi-identifier"),
    (dict(nominal="SEX", ordinal=["SEX=1,2"]), "column 'SEX' is named by both nominal (--nominal) and ordinal"),
    (dict(nominal="SEX,SEX"), "nominal (--nominal) names column 'SEX' twice"),
    (dict(nominal="SEX", method="mnqia"), "nominal (--nominal) does not apply to method mnqia"),
])
def test_bad_nominal_is_one_line(tmp_path, given, message):
    src, out = tmp_path / "in.parquet", tmp_path / "out.parquet"
    coded(100).write_parquet(src)
    with pytest.raises(EngineError, match=message.replace("(", r"\(").replace(")", r"\)")):
        engine.anonymize(src, out, qi=["AGE", "SEX"], k=3, **given)
    assert not out.exists()


def test_bad_nominal_on_the_command_line(tmp_path, capsys):
    src, out = tmp_path / "in.parquet", tmp_path / "out.parquet"
    coded(100).write_parquet(src)
    assert main(["anonymize", str(src), str(out), "--qi", "AGE,SEX", "--nominal", "RACE"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "column 'RACE' is not a quasi-identifier" in err
    assert not out.exists()


MEASURES = ("dbrl", "interval_disclosure", "interval_disclosure_sdcmicro", "masked_points")


def _measures(res) -> dict:
    res = res if isinstance(res, dict) else res.to_dict()
    return {m: res[m] for m in MEASURES}


def test_risk_compares_nominal_codes_as_categories(tmp_path, capsys):
    """On an IPUMS release the risk reads STATEFIP (a labelled category in the codebook)
    as categories, whether named by --nominal or by the codebook: the same measures as
    with the codes as texts (a published code equal to the original matches; no
    standardized distance between codes), not those of the codes as numbers."""
    from engine.io import ipums  # (the IPUMS reader: this test only)

    xml = "tests/data/ipums/cps_00006.xml"
    t = pl.read_parquet(ipums.to_parquet(xml, "cps", tmp_path)).select(["STATEFIP", "MONTH", "INCTOT"])
    # (the file runs in state blocks, which the release's row order would publish: shuffled,
    # and the release put back in the codebook's order for the risk against the DDI file)
    perm = np.random.default_rng(0).permutation(t.height)
    src, out, back = tmp_path / "cps.parquet", tmp_path / "out.parquet", tmp_path / "back.parquet"
    t[perm].write_parquet(src)
    qi = ["STATEFIP", "INCTOT"]
    r = engine.anonymize(src, out, qi=qi, k=5, nominal=["STATEFIP"], risk=True)
    o = pl.read_parquet(out)
    o[np.argsort(perm)].write_parquet(back)
    assert set(o["STATEFIP"].unique()) <= set(t["STATEFIP"].unique())
    text = pl.col("STATEFIP").cast(pl.String)
    ref = engine.disclosure_risk(t[perm].with_columns(text), o.with_columns(text), qi)
    assert _measures(r.risk) == _measures(ref)
    assert _measures(engine.disclosure_risk(src, out, qi, nominal="STATEFIP")) == _measures(ref)
    # the codebook says STATEFIP is a category: the risk reads it from the original
    ref = engine.disclosure_risk(t.with_columns(text), pl.read_parquet(back).with_columns(text), qi)
    assert _measures(engine.disclosure_risk(xml, back, qi)) == _measures(ref)
    assert main(["risk", xml, str(back), "--qi", "STATEFIP,INCTOT", "--json", str(tmp_path / "r.json")]) == 0
    assert _measures(json.loads((tmp_path / "r.json").read_text())) == _measures(ref)
    # as numbers (what the risk read before): other measures
    assert _measures(engine.disclosure_risk(src, out, qi)) != _measures(r.risk)
    assert _measures(engine.disclosure_risk(xml, back, qi, numeric="STATEFIP")) != _measures(ref)
    with pytest.raises(EngineError, match=r"nominal \(--nominal\): column 'MONTH' is not a quasi-identifier"):
        engine.disclosure_risk(src, out, qi, nominal="MONTH")


def test_risk_reads_declared_codes_as_missing_values(tmp_path):
    """risk --missing: a declared code is a missing value on both sides (the same
    measures as with the codes replaced by nulls), in microagg risk and anonymize --risk."""
    from test_missing_codes import CODES, ages  # (the table of ages with codes)

    t = ages(1500, seed=5)
    src, out = tmp_path / "in.parquet", tmp_path / "out.parquet"
    t.write_parquet(src)
    r = engine.anonymize(src, out, qi=["AGE", "SEX"], k=5, nominal="SEX", missing={"AGE": list(CODES)}, risk=True)
    o = pl.read_parquet(out)
    null = pl.when(~pl.col("AGE").cast(pl.Float64).is_in([float(c) for c in CODES])).then(pl.col("AGE"))
    ref = engine.disclosure_risk(t.with_columns(null, pl.col("SEX").cast(pl.String)),
                                 o.with_columns(null, pl.col("SEX").cast(pl.String)), ["AGE", "SEX"])
    assert ref.missing_qis == ["AGE"]
    assert _measures(r.risk) == _measures(ref) and r.risk["missing_qis"] == ["AGE"]
    got = engine.disclosure_risk(src, out, ["AGE", "SEX"], nominal="SEX", missing=["AGE=996,997,999"])
    assert _measures(got) == _measures(ref)
    assert _measures(engine.disclosure_risk(src, out, ["AGE", "SEX"], nominal="SEX")) != _measures(ref)
    with pytest.raises(EngineError, match="code 'x' of column 'AGE' is not a number"):
        engine.disclosure_risk(src, out, ["AGE", "SEX"], missing=["AGE=x"])
