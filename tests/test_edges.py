"""The edges of the docs' promises (issue 41): a non-whole k, column names with commas
or spaces in ``--qi``, NaN as pandas' and NumPy's missing value, the log's QI count,
datetimes in CSV, OUTPUT as a device or a folder, least limits that hold."""

import logging

import numpy as np
import polars as pl
import pytest

import engine
from engine.checks import split_names
from engine.cli import main
from engine.errors import EngineError


def _run(argv, capsys):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err.strip()


# ---------------------------------------------------------------- item 8: small ones


@pytest.mark.parametrize("k", [2.5, 3.0, "3"])
def test_a_k_that_is_not_whole_is_named_so(k):
    with pytest.raises(EngineError, match=r"^k must be a whole number at least 2, got "):
        engine.microaggregate(np.arange(20.0).reshape(10, 2), k=k)
    with pytest.raises(EngineError, match=r"^k must be at least 2, got 1$"):  # (a whole one below: as before)
        engine.microaggregate(np.arange(20.0).reshape(10, 2), k=1)


@pytest.mark.parametrize("text, names", [
    ("a,b", ["a", "b"]), (" a , b ", ["a", "b"]), ("", []), ("  ", []),
    (r"a\,b,\ c", ["a,b", " c"]), (r"x\\y", ["x\\y"]), (r"tail\ ", ["tail "]), ("a,,b", ["a", "", "b"]),
])
def test_split_names(text, names):
    assert split_names(text) == names


def test_qi_names_a_column_with_a_comma_or_spaces(tmp_path, capsys):
    rng = np.random.default_rng(5)
    frame = pl.DataFrame({"id": range(60), "a,b": rng.normal(size=60), " c": rng.integers(0, 50, 60)})
    src, out = tmp_path / "in.parquet", tmp_path / "out.parquet"
    frame.write_parquet(src)
    code, _, err = _run(["anonymize", src, out, "--qi", r"a\,b,\ c", "--k", "4", "--no-progress", "--quiet"], capsys)
    assert code == 0, err
    res = pl.read_parquet(out)
    assert res.columns == frame.columns and res["id"].to_list() == list(range(60))
    assert res.group_by(["a,b", " c"]).len()["len"].min() >= 4
    code, _, err = _run(["verify", out, "--qi", r"a\,b , \ c", "--k", "4"], capsys)
    assert code == 0, err
    # the API takes the same names as a list, and the same text
    api = engine.microaggregate(frame, qi=["a,b", " c"], k=4)
    assert api.table.equals(engine.microaggregate(frame, qi=r"a\,b,\ c", k=4).table)


def test_nan_is_numpy_and_pandas_missing_value_and_an_error_elsewhere():
    pd = pytest.importorskip("pandas")
    rng = np.random.default_rng(2)
    X = rng.normal(size=(90, 3))
    X[[4, 40], 1] = np.nan
    X[17, 0] = np.nan
    names = ["x0", "x1", "x2"]
    from_numpy = engine.microaggregate(X, k=3)
    from_pandas = engine.microaggregate(pd.DataFrame(X, columns=names), qi=names, k=3)
    nulls = pl.DataFrame({c: X[:, j] for j, c in enumerate(names)}).fill_nan(None)
    from_polars = engine.microaggregate(nulls, qi=names, k=3)
    assert np.array_equal(from_numpy.labels, from_polars.labels)
    assert np.array_equal(from_pandas.labels, from_polars.labels)
    assert from_numpy.table.equals(from_polars.table)
    # a Polars NaN (it has nulls of its own) stays an error naming its row
    with pytest.raises(EngineError, match=r"column .x1. has a non-finite value \(nan\) at row 5 "):
        engine.microaggregate(pl.DataFrame({c: X[:, j] for j, c in enumerate(names)}), qi=names, k=3)


def test_the_log_counts_the_quasi_identifiers_not_the_encoded_columns(caplog):
    rng = np.random.default_rng(3)
    n = 400
    frame = pl.DataFrame({"age": rng.integers(18, 90, n), "town": [f"t{i}" for i in rng.integers(0, 40, n)],
                          "job": [f"j{i}" for i in rng.integers(0, 9, n)], "pay": rng.normal(size=n)})
    with caplog.at_level(logging.INFO, logger="engine"):
        engine.microaggregate(frame, qi=["age", "town", "job", "pay"], k=3)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("profiled ")]
    assert lines and all(" x 4 quasi-identifiers" in line for line in lines), lines


# ---------------------------------------------------------------- item 5: OUTPUT as a device or a folder


def _small_csv(tmp_path):
    rng = np.random.default_rng(0)
    src = tmp_path / "in.csv"
    pl.DataFrame({"a": rng.normal(size=50), "b": rng.normal(size=50),
                  "day": [f"2020-01-0{i % 9 + 1}" for i in range(50)]}).write_csv(src)
    return src


def test_dev_stdout_as_output_writes_csv_as_dash_does(tmp_path):
    import subprocess
    import sys

    src = _small_csv(tmp_path)
    runs = {}
    for dest in ("-", "/dev/stdout"):
        proc = subprocess.run([sys.executable, "-m", "engine", "anonymize", str(src), dest, "--qi", "a,b", "--k", "5",
                               "--no-progress"], capture_output=True, cwd=tmp_path, timeout=120)
        assert proc.returncode == 0, proc.stderr.decode()
        assert b"rows 50" in proc.stderr  # the summary on stderr, the CSV alone on stdout
        runs[dest] = proc.stdout
    assert runs["/dev/stdout"] == runs["-"] and runs["-"].startswith(b"a,b,day\n")


def test_a_folder_as_output_is_named_a_folder(tmp_path, capsys):
    src = _small_csv(tmp_path)
    (tmp_path / "out").mkdir()
    code, out, err = _run(["anonymize", src, tmp_path / "out", "--qi", "a,b", "--k", "5"], capsys)
    assert code == 2 and err.startswith("microagg: error: output ") and err.endswith(
        "out is a folder: name a file (.csv or .parquet) in it"), err
    assert not any((tmp_path / "out").iterdir())
