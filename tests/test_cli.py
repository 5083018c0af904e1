"""The CLI and API front doors: formats, options, and bad input (exit 2, nothing written)."""

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import engine
from engine.cli import main

pytestmark = pytest.mark.slow  # end-to-end: run with -m slow (left out by default; CI runs it)

DATA = Path(__file__).parent / "data"
CENSUS_QI = "AFNLWGT,AGI,EMCONTRB,FEDTAX,PTOTVAL,STATETAX,TAXINC,POTHVAL,INTVAL,PEARNVAL,FICA,WSALVAL,ERNVAL"


def _sha(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@pytest.fixture
def small(tmp_path):
    frame = pl.DataFrame({
        "id": list(range(12)),
        "name": [f"p{i}" for i in range(12)],
        "a": [1, 2, 3, 10, 11, 12, 20, 21, 22, 30, 31, 32],
        "b": [1.0, 1.5, 1.2, 5.0, 5.5, 5.2, 9.0, 9.5, 9.2, 0.0, 0.5, 0.2],
    })
    csv = tmp_path / "small.csv"
    frame.write_csv(csv)
    pq = tmp_path / "small.parquet"
    frame.write_parquet(pq)
    return frame, csv, pq


@pytest.mark.parametrize("fmt_in", ["csv", "parquet"])
@pytest.mark.parametrize("fmt_out", ["csv", "parquet"])
def test_anonymize_roundtrip(small, tmp_path, fmt_in, fmt_out, capsys):
    frame, csv, pq = small
    src = csv if fmt_in == "csv" else pq
    before = _sha(src)
    out = tmp_path / f"out.{fmt_out}"
    rep = tmp_path / "report.json"
    code = main(["anonymize", str(src), str(out), "--qi", "a,b", "--k", "3", "--group-column", "grp",
                 "--report", str(rep), "--no-progress"])
    assert code == 0
    res = pl.read_csv(out) if fmt_out == "csv" else pl.read_parquet(out)
    assert res["id"].to_list() == frame["id"].to_list()  # order kept
    assert res["name"].to_list() == frame["name"].to_list()  # untouched
    assert res.group_by(["a", "b"]).len()["len"].min() >= 3
    assert res.group_by("grp").len()["len"].min() >= 3
    report = json.loads(rep.read_text())
    for key in ("rows", "groups", "min_group_size", "max_group_size", "sse", "sst",
                "information_loss_percent", "wall_seconds", "peak_rss_bytes"):
        assert key in report
    assert report["rows"] == 12 and report["groups"] == 4
    assert _sha(src) == before
    assert [p.name for p in tmp_path.iterdir() if "tmp" in p.name] == []


def test_api_inputs_agree(census, tmp_path):
    qi = census.columns
    path = tmp_path / "c.parquet"
    census.write_parquet(path)
    a = engine.microaggregate(census, qi=qi, k=4)
    b = engine.microaggregate(census.lazy(), qi=qi, k=4)
    c = engine.microaggregate(str(path), qi=qi, k=4)
    d = engine.microaggregate(census.to_numpy().astype(float), qi=qi, k=4)
    for other in (b, c, d):
        np.testing.assert_array_equal(a.labels, other.labels)
        assert a.table.equals(other.table)
    rep = engine.anonymize(path, tmp_path / "out.parquet", qi=qi, k=4)
    assert rep.information_loss_percent == a.report.information_loss_percent
    assert pl.read_parquet(tmp_path / "out.parquet").equals(a.table)


def test_output_replaces_qi_by_group_mean(small):
    frame, _, _ = small
    res = engine.microaggregate(frame, qi=["a", "b"], k=3)
    for g in np.unique(res.labels):
        rows = res.labels == g
        assert np.allclose(res.table["a"].to_numpy()[rows], frame["a"].to_numpy()[rows].mean())
        assert np.allclose(res.table["b"].to_numpy()[rows], frame["b"].to_numpy()[rows].mean())


def test_threads_do_not_change_output(census):
    a = engine.microaggregate(census, qi=census.columns, k=3, threads=1)
    b = engine.microaggregate(census, qi=census.columns, k=3, threads=2)
    assert a.table.equals(b.table) and a.report.sse == b.report.sse


def _bad_cases(tmp_path, csv):
    nulls = tmp_path / "nulls.csv"  # a QI missing in every row (a missing value alone is a value)
    nulls.write_text("a,b\n1,\n3,\n5,\n7,\n")
    nan = tmp_path / "nan.parquet"
    pl.DataFrame({"a": [1.0, 2.0, float("nan"), 4.0], "b": [1.0, 2, 3, 4]}).write_parquet(nan)
    inf = tmp_path / "inf.parquet"
    pl.DataFrame({"a": [1.0, 2.0, float("inf"), 4.0], "b": [1.0, 2, 3, 4]}).write_parquet(inf)
    empty = tmp_path / "empty.csv"
    empty.write_text("a,b\n")
    corrupt = tmp_path / "corrupt.parquet"
    corrupt.write_bytes(b"PAR1" + b"\x00garbage" * 50)
    return {
        "null": (nulls, "a,b", "3", "column 'b' is missing in every row"),
        "nan": (nan, "a,b", "3", "non-finite value"),
        "inf": (inf, "a,b", "3", "non-finite value"),
        "k<2": (csv, "a,b", "1", "k must be at least 2"),
        "k>rows": (csv, "a,b", "13", "larger than the number of rows"),
        "unknown column": (csv, "a,zzz", "3", "'zzz' not found"),
        "duplicate column": (csv, "a,a", "3", "twice"),
        "empty qi": (csv, "", "3", "qi is empty"),
        "empty input": (empty, "a,b", "3", "has no rows"),
        "corrupt file": (corrupt, "a,b", "3", "cannot read"),
        "missing file": (tmp_path / "nope.csv", "a,b", "3", "input not found"),
    }


@pytest.mark.parametrize("case", ["null", "nan", "inf", "k<2", "k>rows", "unknown column",
                                  "duplicate column", "empty qi", "empty input", "corrupt file", "missing file"])
def test_bad_input_exit_2_nothing_written(small, tmp_path, case, capsys):
    _, csv, _ = small
    src, qi, k, message = _bad_cases(tmp_path, csv)[case]
    before = _sha(src) if Path(src).exists() else None
    out = tmp_path / "out" / "result.parquet"
    out.parent.mkdir()
    code = main(["anonymize", str(src), str(out), "--qi", qi, "--k", k, "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert message in err, err
    assert err.startswith("microagg: error:") and len(err.splitlines()) == 1
    assert list(out.parent.iterdir()) == []
    if before is not None:
        assert _sha(src) == before


def test_output_equal_to_input_refused(small, capsys):
    _, csv, _ = small
    before = _sha(csv)
    code = main(["anonymize", str(csv), str(csv), "--qi", "a,b", "--k", "3", "--no-progress"])
    assert code == 2 and "output is the input" in capsys.readouterr().err
    assert _sha(csv) == before


def test_gamma_only_for_variable_methods(small, tmp_path, capsys):
    _, csv, _ = small
    code = main(["anonymize", str(csv), str(tmp_path / "o.csv"), "--qi", "a,b", "--gamma", "0.5"])
    assert code == 2 and "gamma applies only" in capsys.readouterr().err


def test_large_values_and_constant_column():
    X = np.array([[1e300, 1.0], [2e300, 1.0], [-1e300, 1.0], [5e299, 1.0], [0.0, 1.0], [3e300, 1.0]])
    res = engine.microaggregate(X, k=2)
    assert np.isfinite(res.table.to_numpy()).all()
    assert res.table.group_by(["x0", "x1"]).len()["len"].min() >= 2
    assert 0 <= res.report.information_loss_percent <= 100


def test_cli_subprocess_no_traceback(tmp_path):
    """The installed command: bad input gives one line and exit 2."""
    proc = subprocess.run([sys.executable, "-m", "engine", "anonymize", str(tmp_path / "missing.csv"),
                           str(tmp_path / "o.csv"), "--qi", "a"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [f"microagg: error: input not found: {tmp_path / 'missing.csv'}"]
