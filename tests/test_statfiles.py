"""SPSS, Stata and SAS files in and out (engine.io.statfiles, engine.io.labelled): the
inputs written by pyreadstat in the tests; labels, declared missing values and
measurement levels survive a run, labelled categories publish input codes only,
declared missing codes are never averaged, and the release is k-anonymous."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import polars as pl
import pytest

import engine
from engine.cli import main
from engine.errors import EngineError

pyreadstat = pytest.importorskip("pyreadstat")

N = 400
SEX = {1: "Male", 2: "Female"}
REGION = {1: "North", 2: "South", 3: "East", 4: "West", 9: "Unknown"}


def _frame(seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    age = rng.integers(16, 90, N).astype(float)
    age[rng.random(N) < 0.08] = 996.0  # declared missing: "Missing"
    age[rng.random(N) < 0.04] = 997.0  # declared missing: "Refused"
    return pd.DataFrame({
        "ID": np.arange(N, dtype=float),
        "AGE": age,
        "SEX": rng.integers(1, 3, N).astype(float),
        "REGION": rng.choice([1, 2, 3, 4, 9], N).astype(float),
        "INCOME": np.round(rng.lognormal(10, 1, N), 2),
        "NOTE": [f"n{i % 7}" for i in range(N)],
    })


def _write_sav(path, df=None):
    df = _frame() if df is None else df
    pyreadstat.write_sav(df, str(path), file_label="test survey",
                         column_labels={"ID": "Person id", "AGE": "Age in years", "SEX": "Sex", "REGION": "Region",
                                        "INCOME": "Yearly income", "NOTE": "A note"},
                         variable_value_labels={"SEX": SEX, "REGION": REGION, "AGE": {996: "Missing", 997: "Refused"}},
                         missing_ranges={"AGE": [996, 997], "REGION": [9]},
                         variable_measure={"SEX": "nominal", "REGION": "nominal", "AGE": "scale", "INCOME": "scale"})
    return df


def _qi_codes_ok(out: pd.DataFrame, src: pd.DataFrame, col: str) -> None:
    assert set(out[col].dropna().unique()) <= set(src[col].dropna().unique())


def test_sav_to_sav_keeps_the_declarations(tmp_path):
    src = tmp_path / "in.sav"
    df = _write_sav(src)
    out = tmp_path / "out.sav"
    engine.anonymize(str(src), str(out), qi=["AGE", "SEX", "REGION"], k=5, progress=False)
    got, meta = pyreadstat.read_sav(str(out), user_missing=True)
    _, before = pyreadstat.read_sav(str(src), user_missing=True, metadataonly=True)
    assert meta.column_names == before.column_names
    assert meta.column_labels == before.column_labels
    assert meta.variable_value_labels == before.variable_value_labels
    assert sorted(map(str, meta.missing_ranges["AGE"])) == sorted(map(str, before.missing_ranges["AGE"]))
    assert meta.missing_ranges["REGION"] == before.missing_ranges["REGION"]
    assert meta.variable_measure["SEX"] == "nominal" and meta.variable_measure["AGE"] == "scale"
    assert meta.file_label == "test survey"
    # labelled categories publish the input's codes, never a mean
    _qi_codes_ok(got, df, "SEX")
    _qi_codes_ok(got, df, "REGION")
    # declared missing codes never averaged: a published AGE is a mean of real ages or a code
    ages = got["AGE"].to_numpy()
    assert np.all((ages <= 89) | np.isin(ages, [996, 997]))
    assert np.isin(ages, [996, 997]).any()
    # pass-through columns identical
    for c in ("ID", "INCOME", "NOTE"):
        assert got[c].tolist() == df[c].tolist()
    assert engine.verify_release(str(out), qi=["AGE", "SEX", "REGION"], k=5).ok


def test_dta_to_dta(tmp_path):
    df = _frame(1)
    df["AGE"] = df["AGE"].where(df["AGE"] < 900, np.nan)
    src, out = tmp_path / "in.dta", tmp_path / "out.dta"
    pyreadstat.write_dta(df, str(src), column_labels={"AGE": "Age", "SEX": "Sex", "REGION": "Region"},
                         variable_value_labels={"SEX": SEX, "REGION": REGION})
    engine.anonymize(str(src), str(out), qi=["AGE", "SEX", "REGION"], k=4, progress=False)
    got, meta = pyreadstat.read_dta(str(out))
    _, before = pyreadstat.read_dta(str(src), metadataonly=True)
    assert meta.column_names == before.column_names
    assert meta.column_labels == before.column_labels
    assert meta.variable_value_labels == before.variable_value_labels
    _qi_codes_ok(got, df, "SEX")
    _qi_codes_ok(got, df, "REGION")
    for c in ("ID", "INCOME", "NOTE"):
        assert got[c].tolist() == df[c].tolist()
    assert engine.verify_release(str(out), qi=["AGE", "SEX", "REGION"], k=4).ok


def test_xpt_to_parquet(tmp_path):
    df = _frame(2)
    src, out = tmp_path / "in.xpt", tmp_path / "out.parquet"
    pyreadstat.write_xport(df, str(src), column_labels={"AGE": "Age"})
    engine.anonymize(str(src), str(out), qi=["AGE", "INCOME"], k=5, progress=False)
    got = pl.read_parquet(out)
    assert got.columns == list(df.columns)
    assert got["NOTE"].to_list() == df["NOTE"].tolist() and got["ID"].to_list() == df["ID"].tolist()
    assert engine.verify_release(str(out), qi=["AGE", "INCOME"], k=5).ok


def test_parquet_output_keeps_the_labels_in_its_metadata(tmp_path):
    import json

    import pyarrow.parquet as pq
    src, out = tmp_path / "in.sav", tmp_path / "out.parquet"
    _write_sav(src)
    engine.anonymize(str(src), str(out), qi=["AGE", "SEX"], k=5, progress=False)
    labels = json.loads(pq.read_schema(out).metadata[b"microagg.labels"])
    assert labels["columns"]["SEX"]["value_labels"] == [[1, "Male"], [2, "Female"]]
    assert labels["columns"]["AGE"]["missing"] == [996, 997]


def test_pandas_frame_with_its_metadata_gives_the_same_release(tmp_path):
    src = tmp_path / "in.sav"
    _write_sav(src)
    df, meta = pyreadstat.read_sav(str(src), user_missing=True)
    df.attrs["meta"] = meta
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    engine.anonymize(str(src), str(a), qi=["AGE", "SEX", "REGION"], k=5, progress=False)
    engine.anonymize(df, str(b), qi=["AGE", "SEX", "REGION"], k=5, progress=False)
    x, y = pl.read_parquet(a), pl.read_parquet(b)
    for c in ("AGE", "SEX", "REGION"):
        assert x[c].to_list() == y[c].to_list()


def test_numeric_averages_a_labelled_column(tmp_path):
    src = tmp_path / "in.sav"
    df = _write_sav(src)
    out = tmp_path / "out.parquet"
    engine.anonymize(str(src), str(out), qi=["SEX", "REGION"], k=7, numeric=["REGION"], missing={"REGION": [99]},
                     progress=False)
    got = pl.read_parquet(out)
    assert not set(got["REGION"].unique().to_list()) <= set(df["REGION"].unique())  # means, not codes
    assert set(got["SEX"].unique().to_list()) <= {1.0, 2.0}


def test_labelled_category_refused_for_a_method_that_averages(tmp_path):
    src = tmp_path / "in.sav"
    _write_sav(src)
    with pytest.raises(EngineError, match="'SEX' carries value labels.*--numeric SEX"):
        engine.anonymize(str(src), str(tmp_path / "o.parquet"), qi=["SEX", "INCOME"], k=5, method="ama",
                         progress=False)


def test_bad_inputs_one_line_nothing_written(tmp_path, capsys):
    bad = tmp_path / "bad.sav"
    bad.write_bytes(b"this is not an SPSS file\n" * 10)
    out = tmp_path / "out.parquet"
    assert main(["anonymize", str(bad), str(out), "--qi", "a", "--k", "3", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bad.sav" in err[0] and not out.exists()
    # string value labels do not fit a .dta output
    src = tmp_path / "s.sav"
    df = _frame()
    pyreadstat.write_sav(df, str(src), variable_value_labels={"NOTE": {"n1": "first"}})
    dta = tmp_path / "o.dta"
    assert main(["anonymize", str(src), str(dta), "--qi", "AGE,INCOME", "--k", "3", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'NOTE'" in err[0] and ".dta" in err[0] and not dta.exists()
    assert not list(tmp_path.glob(".*microagg*"))


def test_memory_limit_refuses_a_release_held_in_memory(tmp_path, capsys):
    src = tmp_path / "in.sav"
    big = pd.DataFrame({f"c{j}": np.arange(600_000, dtype=float) for j in range(10)})
    pyreadstat.write_sav(big, str(src))
    out = tmp_path / "out.sav"
    assert main(["anonymize", str(src), str(out), "--qi", "c0,c1", "--k", "3", "--memory-limit", "64MiB",
                 "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "written from memory" in err[0] and not out.exists()


def test_a_large_file_is_converted_in_a_child_process(tmp_path, monkeypatch):
    """Above ``CHILD_BYTES`` of values the conversion runs in a fresh interpreter (what it
    leaves allocated is not held by the run): the same Parquet file, and a bad file is
    still one line."""
    from engine.io import statfiles

    src = tmp_path / "in.sav"
    _write_sav(src)
    here = pl.read_parquet(statfiles.to_parquet(str(src), "in.sav", tmp_path))
    monkeypatch.setattr(statfiles, "CHILD_BYTES", 0)
    calls = []
    monkeypatch.setattr(statfiles, "convert_in_child",
                        lambda *a, f=statfiles.convert_in_child: calls.append(a) or f(*a))
    there = statfiles.to_parquet(str(src), "in.sav", tmp_path)
    assert calls and pl.read_parquet(there).equals(here)
    assert pl.read_parquet_schema(there) == here.schema
    bad = tmp_path / "bad.sav"
    bad.write_bytes(b"$FL2" + b"\0" * 400)
    with pytest.raises(EngineError, match="bad.sav"):
        statfiles.convert_in_child(str(bad), "bad.sav", str(tmp_path / "x.parquet"))
    assert not (tmp_path / "x.parquet").exists()


@pytest.mark.parametrize("suffix", ["zsav", "por"])
def test_zsav_and_por_inputs(tmp_path, suffix):
    """A compressed .sav (pyreadstat's compress=True) and an SPSS portable file (write_por):
    read (a .por written by pyreadstat carries no value labels: its categories named by
    --nominal), their categories published as input codes, the declared missing codes
    of the .zsav never averaged, a .zsav output compressed with the declarations kept."""
    df = _frame(3)
    src, out = tmp_path / f"in.{suffix}", tmp_path / f"out.{suffix if suffix == 'zsav' else 'parquet'}"
    if suffix == "zsav":
        _write_sav(tmp_path / "plain.sav", df)
        pyreadstat.write_sav(df, str(src), compress=True, variable_value_labels={"SEX": SEX, "REGION": REGION},
                             missing_ranges={"AGE": [996, 997]}, variable_measure={"SEX": "nominal",
                                                                                   "REGION": "nominal"})
    else:
        pyreadstat.write_por(df.drop(columns=["NOTE"]), str(src), column_labels={"AGE": "Age"})
    engine.anonymize(str(src), str(out), qi=["AGE", "SEX", "REGION"], k=5, progress=False,
                     nominal=None if suffix == "zsav" else ["SEX", "REGION"])
    got = pyreadstat.read_sav(str(out), user_missing=True)[0] if suffix == "zsav" else pd.read_parquet(out)
    _qi_codes_ok(got, df, "SEX")
    _qi_codes_ok(got, df, "REGION")
    assert got["ID"].tolist() == df["ID"].tolist() and got["INCOME"].tolist() == df["INCOME"].tolist()
    ages = got["AGE"].to_numpy()
    if suffix == "zsav":
        assert np.all((ages <= 89) | np.isin(ages, [996, 997])) and np.isin(ages, [996, 997]).any()
        assert out.read_bytes()[:4] == b"$FL3"  # (zlib-compressed)
        meta = pyreadstat.read_sav(str(out), metadataonly=True, user_missing=True)[1]
        assert meta.variable_value_labels["SEX"] == SEX and meta.missing_ranges["AGE"]
    else:  # (a portable file declares no missing codes here: the codes are ages)
        assert not np.isin(ages, [996, 997]).all()
    assert engine.verify_release(str(out), qi=["AGE", "SEX", "REGION"], k=5).ok


@pytest.mark.parametrize("given, message", [
    (["--missing", "AGE=unknown"], "code 'unknown' of column 'AGE' is not a number, and the column is Float64"),
    (["--missing", "SEX=9.5,x"], "code 'x' of column 'SEX' is not a number"),
    (["--nominal", "INCOME"], "nominal (--nominal): column 'INCOME' is not a quasi-identifier"),
])
def test_bad_codes_or_kinds_on_a_sav_are_one_line(tmp_path, capsys, given, message):
    src, out = tmp_path / "in.sav", tmp_path / "out.sav"
    _write_sav(src)
    before = src.read_bytes()
    assert main(["anonymize", str(src), str(out), "--qi", "AGE,SEX", "--k", "5", *given]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("microagg: error: ") and message in err, err
    assert not out.exists() and src.read_bytes() == before


def test_verify_reads_the_declarations_of_a_sav_original(tmp_path, capsys):
    """verify --original in.sav: the file's declared missing codes are checked as missing
    values and its labelled categories as categories, with no flag (issue 40)."""
    src, out = tmp_path / "in.sav", tmp_path / "out.parquet"
    _write_sav(src)
    engine.anonymize(str(src), str(out), qi=["AGE", "SEX", "REGION"], k=5, progress=False)
    res = engine.verify_release(str(out), ["AGE", "SEX", "REGION"], 5, original=str(src))
    assert res.ok, res.summary()
    assert {c["name"] for c in res.checks} >= {"class means", "class modes"}
    assert main(["verify", str(out), "--qi", "AGE,SEX,REGION", "--k", "5", "--original", str(src)]) == 0
    o = pl.read_parquet(out)
    o.with_columns(AGE=pl.when(pl.col("AGE") == 996).then(41.37).otherwise(pl.col("AGE"))).write_parquet(out)
    assert not engine.verify_release(str(out), ["AGE", "SEX", "REGION"], 5, original=str(src)).ok


IPUMS_USA = Path(__file__).parent / "data" / "ipums" / "usa_00172.xml"


def test_verify_a_sav_release_of_an_integer_original(tmp_path, capsys):
    """SPSS holds every number as a double: a .sav release of an original with Int64
    columns (an IPUMS extract) reads them back as Float64, the same values. verify
    --original passes it (no "type changed", the labelled SEX's 1.0 the category 1),
    while a Parquet release, whose format has integers, still fails a retyped column."""
    sav, pq = tmp_path / "usa_k5.sav", tmp_path / "usa_k5.parquet"
    for out in (sav, pq):
        assert main(["anonymize", str(IPUMS_USA), str(out), "--qi", "SEX,AGE", "--k", "5", "--quiet"]) == 0
    res = engine.verify_release(str(sav), ["SEX", "AGE"], 5, original=str(IPUMS_USA))
    assert res.ok, res.summary()
    assert {"categories", "other columns"} <= {c["name"] for c in res.checks}
    assert res.information_loss_by_column["SEX"] < 50.0  # (1.0 against 1: no change)
    capsys.readouterr()
    assert main(["verify", str(sav), "--qi", "SEX,AGE", "--k", "5", "--original", str(IPUMS_USA)]) == 0
    pl.read_parquet(pq).with_columns(pl.col("YEAR").cast(pl.Float64)).write_parquet(pq)
    res = engine.verify_release(str(pq), ["SEX", "AGE"], 5, original=str(IPUMS_USA))
    assert not res.ok and "type changed: YEAR (Int64 -> Float64)" in res.summary()


def _dta_with_letters(path) -> pd.DataFrame:
    """A .dta whose QI AGE and pass-through INCOME hold Stata extended missing values."""
    rng = np.random.default_rng(3)
    age = rng.integers(16, 90, N).astype(object)
    age[rng.random(N) < 0.08] = "a"
    age[rng.random(N) < 0.05] = "b"
    income = np.round(rng.lognormal(10, 1, N), 2).astype(object)
    income[rng.random(N) < 0.1] = "b"
    income[rng.random(N) < 0.05] = "z"
    income[:3] = np.nan
    df = pd.DataFrame({"ID": np.arange(N, dtype=float), "AGE": age, "SEX": rng.integers(1, 3, N).astype(float),
                       "INCOME": income})
    pyreadstat.write_dta(df, str(path), missing_user_values={"AGE": ["a", "b"], "INCOME": ["b", "z"]})
    return pyreadstat.read_dta(str(path), user_missing=True)[0]


def _same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(x == y or (x != x and y != y) for x, y in zip(a, b))


def test_dta_extended_missing_values_come_back_as_their_letters(tmp_path):
    src, out = tmp_path / "in.dta", tmp_path / "out.dta"
    df = _dta_with_letters(src)
    engine.anonymize(str(src), str(out), qi=["AGE", "SEX"], k=5, progress=False)
    got, meta = pyreadstat.read_dta(str(out), user_missing=True)
    assert meta.missing_user_values == {"AGE": ["a", "b"], "INCOME": ["b", "z"]}
    # the pass-through column: the same letters on the same rows, the same numbers
    assert _same(got["INCOME"].tolist(), df["INCOME"].tolist())
    # the QI: letters published as letters (declared missing), never averaged into a number
    ages = got["AGE"].tolist()
    assert {v for v in ages if isinstance(v, str)} == {"a", "b"}
    assert all(16 <= v <= 89 for v in ages if not isinstance(v, str))
    assert engine.verify_release(str(out), qi=["AGE", "SEX"], k=5).ok
    # a Parquet output publishes the codes, declared missing, the letters named in its metadata
    import json

    import pyarrow.parquet as pq
    engine.anonymize(str(src), str(tmp_path / "out.parquet"), qi=["AGE", "SEX"], k=5, progress=False)
    published = pl.read_parquet(tmp_path / "out.parquet")["AGE"]
    assert set(published.filter(published < 0).unique().to_list()) == {-1_000_000_001.0, -1_000_000_002.0}
    labels = json.loads(pq.read_schema(tmp_path / "out.parquet").metadata[b"microagg.labels"])
    assert labels["columns"]["AGE"]["stata_missing"] == {".a": -1_000_000_001, ".b": -1_000_000_002}
    assert labels["columns"]["AGE"]["missing"] == [-1_000_000_001, -1_000_000_002]


def test_dta_real_value_on_a_letter_code_is_one_line(tmp_path, capsys):
    src, out = tmp_path / "in.dta", tmp_path / "out.parquet"
    df = pd.DataFrame({"AGE": pd.Series([30.0, "a", -1_000_000_003.0] + [40.0] * 7, dtype=object),
                       "SEX": [1.0, 2.0] * 5})
    pyreadstat.write_dta(df, str(src), missing_user_values={"AGE": ["a"]})
    assert main(["anonymize", str(src), str(out), "--qi", "AGE,SEX", "--k", "2", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "column 'AGE', row 3" in err and "Stata extended missing value" in err
    assert not out.exists()
