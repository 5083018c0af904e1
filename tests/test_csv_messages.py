"""Issue 28, items 7, 9 (Map) and 11: CSV QIs typed by a clear rule, malformed CSV named by
its line, bad values after the first 1,000 rows named by their row, refusals that name the
column (each one line, exit 2, nothing written)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import engine
from engine.errors import EngineError


def _run(tmp_path, name, text, qi, out="o.csv"):
    path = tmp_path / name
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    dest = tmp_path / out
    p = subprocess.run([sys.executable, "-m", "engine", "anonymize", str(path), str(dest), "--qi", qi, "--k", "3",
                        "--quiet"], capture_output=True, text=True)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1 and lines[0].startswith("microagg: error: "), p.stderr
    assert not dest.exists()
    return lines[0]


def _rows(n=3000):
    return [f"{20 + i % 50},{i % 3}" for i in range(n)]


@pytest.mark.parametrize("at", [5, 2000])
def test_typo_in_a_numeric_qi_is_refused_with_its_row(tmp_path, at):
    rows = _rows()
    rows[at] = "4O," + rows[at].split(",")[1]
    err = _run(tmp_path, "t.csv", "age,g\n" + "\n".join(rows) + "\n", "age,g")
    assert f"column 'age' is not numeric: '4O' at row {at + 1} (rows counted from 1)" in err


def test_text_column_is_still_nominal(tmp_path):
    rows = [f"{20 + i % 50},{'abc'[i % 3]}" for i in range(300)]
    rows[7] = "21,5"  # a number among texts: a category
    (tmp_path / "t.csv").write_text("age,g\n" + "\n".join(rows) + "\n")
    r = engine.microaggregate(str(tmp_path / "t.csv"), ["age", "g"], k=3)
    assert r.report.metrics["mixed"]["kinds"]["g"] == "nominal"


@pytest.mark.parametrize("bad", ["3 ", "1\xa0", "x"])
@pytest.mark.parametrize("qi", ["age", "age,g"])
def test_bad_value_after_the_head_names_its_row(tmp_path, bad, qi):
    rows = _rows()
    rows[2000] = bad + ",1"
    err = _run(tmp_path, "b.csv", "age,g\n" + "\n".join(rows) + "\n", qi)
    assert f"column 'age' is not numeric: {bad!r} at row 2001" in err


def test_bad_date_after_the_head_names_its_row(tmp_path):
    rows = [f"2021-01-{1 + i % 28:02d},{i % 3}" for i in range(3000)]
    rows[2000] = "2021-02-30,1"
    err = _run(tmp_path, "d.csv", "d,g\n" + "\n".join(rows) + "\n", "d,g")
    assert "column 'd' is not a date: '2021-02-30' at row 2001" in err


_GOOD = "".join(f"{i},{i % 4}\n" for i in range(12))


@pytest.mark.parametrize("name,text,qi,want", [
    ("open quote", 'a,"b\n' + _GOOD, "a", "line 1: a quoted field opened here is never closed"),
    ("quote in a field", 'a,b\n1,x"y\n' + _GOOD, "a", "line 2: a quote inside an unquoted field"),
    ("CR only", "a,b\r1,2\r3,4\r5,6\r", "a", "line 1: its line ends are carriage returns alone"),
    ("stray quote", "a,b\n" + _GOOD + '7,"8\n' + _GOOD, "a", "line 14: a quoted field opened here is never closed"),
    ("short row", "a,b\n" + _GOOD + "7\n" + _GOOD, "a", "line 14: 1 field, the header has 2 (fewer fields"),
    ("long row", "a,b\n" + _GOOD + "7,1,2\n" + _GOOD, "b", "line 14: 3 fields, the header has 2 (more fields"),
    ("last row short, no newline", "a,b\n" + _GOOD + "7", "a", "line 14: 1 field, the header has 2"),
])
def test_malformed_csv_names_the_line(tmp_path, name, text, qi, want):
    err = _run(tmp_path, "m.csv", text, qi)
    assert want in err and "has no rows" not in err and "expected 0 rows" not in err, err


def test_wellformed_quoting_is_accepted(tmp_path):
    text = 'a,b,c\n' + "".join(f'{i},"x ""q"", {i}",""\n' for i in range(12)) + '5,"multi\nline",z\r\n6,7,\n'
    (tmp_path / "ok.csv").write_text(text)
    r = engine.microaggregate(str(tmp_path / "ok.csv"), ["a"], k=3)
    assert r.table.height == 14


def test_map_column_to_csv_is_refused_naming_it(tmp_path):
    t = pa.table({"x": pa.array(np.arange(30.0)),
                  "m": pa.array([[("a", i)] for i in range(30)], pa.map_(pa.string(), pa.int64()))})
    pq.write_table(t, tmp_path / "m.parquet")
    p = subprocess.run([sys.executable, "-m", "engine", "anonymize", str(tmp_path / "m.parquet"),
                        str(tmp_path / "o.csv"), "--qi", "x", "--k", "3", "--quiet"], capture_output=True, text=True)
    assert p.returncode == 2 and "column 'm' (Map(String, Int64)) cannot be written to CSV" in p.stderr, p.stderr
    assert not (tmp_path / "o.csv").exists()


def test_decimal256_is_refused_naming_the_column(tmp_path):
    t = pa.table({"x": pa.array(np.arange(30.0)), "dd": pa.array(list(range(30)), pa.decimal256(50, 2))})
    pq.write_table(t, tmp_path / "d.parquet")
    with pytest.raises(EngineError, match=r"column 'dd' is decimal256\(50, 2\)"):
        engine.anonymize(str(tmp_path / "d.parquet"), tmp_path / "o.parquet", ["x"], k=3)
    with pytest.raises(EngineError, match=r"column 'dd' is decimal256\(50, 2\)"):
        engine.microaggregate(t, ["x"], k=3)
