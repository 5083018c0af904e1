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


# ---------------------------------------------------------------- item 4: datetimes in CSV


def _times(n, seed=0):
    import datetime as dt

    rng = np.random.default_rng(seed)
    when = [dt.datetime(2020, 1, 1) + dt.timedelta(seconds=int(x)) for x in rng.integers(0, 30_000_000, n)]
    return pl.DataFrame({"id": range(n), "when": when, "pay": rng.normal(size=n),
                         "stamp": [w.strftime("%Y-%m-%d %H:%M") for w in when]})  # a pass-through that looks like one


def test_a_csv_datetime_qi_is_read_as_a_datetime_like_parquets(tmp_path, capsys):
    frame = _times(600)
    pq, csv = tmp_path / "in.parquet", tmp_path / "in.csv"
    frame.write_parquet(pq)
    frame.with_columns(pl.col("when").dt.to_string("%Y-%m-%d %H:%M:%S")).write_csv(csv)
    args = ["--qi", "when,pay", "--k", "5", "--no-progress", "--quiet"]
    outs = {}
    for name, src in (("csv", csv), ("parquet", pq)):
        outs[name] = tmp_path / f"from-{name}.parquet"
        code, _, err = _run(["anonymize", src, outs[name], *args, "--report", tmp_path / f"{name}.json"], capsys)
        assert code == 0, err
    a, b = pl.read_parquet(outs["csv"]), pl.read_parquet(outs["parquet"])
    assert a["when"].dtype == pl.Datetime("us") and a["when"].equals(b["when"]) and a["pay"].equals(b["pay"])
    assert int((a["when"] == frame["when"]).sum()) < 10  # not each group's one member's own timestamp
    import json

    loss = [json.loads((tmp_path / f"{n}.json").read_text())["information_loss_percent"] for n in ("csv", "parquet")]
    assert loss[0] == loss[1] < 2
    # a CSV output: the pass-through column that looks like a datetime keeps its text
    out = tmp_path / "out.csv"
    code, _, err = _run(["anonymize", csv, out, *args], capsys)
    assert code == 0, err
    text = pl.read_csv(out, infer_schema=False)
    assert text["stamp"].equals(frame["stamp"]) and text["id"].to_list() == [str(i) for i in range(600)]


def test_a_csv_datetime_with_a_time_zone_or_a_bad_value_is_refused(tmp_path, capsys):
    frame = _times(1500).with_columns(pl.col("when").dt.to_string("%Y-%m-%dT%H:%M:%S"))
    zoned, bad = tmp_path / "zoned.csv", tmp_path / "bad.csv"
    frame.with_columns(pl.col("when") + "+02:00").write_csv(zoned)
    frame.with_columns(pl.when(pl.col("id") == 1234).then(pl.lit("2021-13-45T99:00:00"))
                       .otherwise(pl.col("when")).alias("when")).write_csv(bad)
    out = tmp_path / "out.parquet"
    code, _, err = _run(["anonymize", zoned, out, "--qi", "when,pay", "--k", "5", "--no-progress"], capsys)
    assert code == 2 and len(err.splitlines()) == 1 and "column 'when'" in err and "+02:00" in err, err
    assert "YYYY-MM-DD HH:MM:SS" in err and "--nominal" in err, err
    code, _, err = _run(["anonymize", bad, out, "--qi", "when,pay", "--k", "5", "--no-progress"], capsys)
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "'2021-13-45T99:00:00' at row 1235" in err and "an ISO datetime" in err, err
    assert not out.exists()


# ---------------------------------------------------------------- item 2: a least limit that holds


def _stated(src, qi, limit, **kw):
    """None when a run at ``limit`` is accepted, else the least limit its refusal states (MiB)."""
    import re

    try:
        engine.anonymize(str(src), str(src.with_name("out.parquet")), qi=qi, k=5, memory_limit=limit, **kw)
    except EngineError as exc:
        m = re.search(r"at least (\d+)MiB", str(exc))
        assert m, str(exc)
        return int(m.group(1))
    return None


@pytest.mark.parametrize("seed, towns, missing", [(0, 60, False), (1, 5, True), (2, 0, True), (3, 0, False)])
def test_a_csv_refusals_least_limit_is_accepted(tmp_path, seed, towns, missing):
    """The first refusal of a CSV run is planned before its categories are known: the
    figure it states must be one the run then accepts (nominal QIs, missing values,
    numbers only), and running at it succeeds."""
    rng = np.random.default_rng(seed)
    n = 30_000
    cols = {"age": rng.integers(18, 90, n).astype(float), "pay": rng.normal(size=n), "id": np.arange(n)}
    if towns:
        cols["town"] = [f"t{i}" for i in rng.integers(0, towns, n)]
    frame = pl.DataFrame(cols)
    if missing:
        frame = frame.with_columns(pl.when(pl.col("id") % 97 == 3).then(None).otherwise(pl.col("age")).alias("age"))
    src = tmp_path / "in.csv"
    frame.write_csv(src)
    qi = ["age", "pay"] + (["town"] if towns else [])
    least = _stated(src, qi, "64MiB", block_size=5000)
    assert least is not None
    assert _stated(src, qi, f"{least}MiB", block_size=5000) is None
