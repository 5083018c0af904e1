"""The bad-input suite: every case drives the command in process (``engine.cli.main``).

A bad input exits with 2 and one line on stderr naming the column, row, parameter or
path at fault; a valid odd input (constant column, duplicate rows, exactly k rows,
values near the float limits) exits with 0 and a k-anonymous output, checked by an
independent Polars count. Either way: no temporary leftovers, the input unchanged.
"""

import datetime
import decimal
import hashlib
import os
import re
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import engine
from engine.cli import main

BASE = pl.DataFrame({
    "id": list(range(12)),
    "name": [f"p{i}" for i in range(12)],
    "a": [1, 2, 3, 10, 11, 12, 20, 21, 22, 30, 31, 32],
    "b": [1.0, 1.5, 1.2, 5.0, 5.5, 5.2, 9.0, 9.5, 9.2, 0.0, 0.5, 0.2],
    "flag": [True, False] * 6,
    "day": [datetime.date(2020, 1, i + 1) for i in range(12)],
})


def _with(col, values, frame=BASE):
    return frame.with_columns(pl.Series(col, values, dtype=pl.Float64 if col in ("a", "b") else None))


def _pq(d, name, frame, **kw):
    frame.write_parquet(d / name, **kw)
    return d / name


def _csv(d, name, text):
    (d / name).write_text(text)
    return d / name


def _late(d, kind):
    """50,000 rows in a folder of 5 Parquet files; the bad value in the last file's last chunk."""
    folder = d / f"late-{kind}"
    folder.mkdir()
    rng = np.random.default_rng(7)
    for i in range(5):
        a = rng.normal(size=10_000)
        if i == 4:
            a[9_990] = np.nan
        frame = pl.DataFrame({"a": a, "b": rng.normal(size=10_000)})
        if kind == "null":
            frame = frame.with_columns(pl.col("a").fill_nan(None))
        frame.write_parquet(folder / f"part-{i}.parquet", row_group_size=2_000)
    return folder


def _truncated(d):
    full = _pq(d, "full.parquet", BASE)
    raw = full.read_bytes()
    (d / "trunc.parquet").write_bytes(raw[: len(raw) // 2])
    return d / "trunc.parquet"


def _mixed_folder(d):
    f = d / "mixed"
    f.mkdir()
    pl.DataFrame({"a": [1.0, 2.0, 3.0], "b": [1.0, 2.0, 3.0]}).write_parquet(f / "p1.parquet")
    pl.DataFrame({"a": ["x", "y", "z"], "b": [1.0, 2.0, 3.0]}).write_parquet(f / "p2.parquet")
    return f


def _late_text_csv(d):
    """A numeric column whose row 12,001 is text: past the CSV type inference window."""
    lines = ["a,b"] + [f"{i},{i % 7}" for i in range(12_000)] + ["abc,1"]
    return _csv(d, "late-text.csv", "\n".join(lines) + "\n")


def _scaled(factor, alternate=False):
    def make(d):
        vals = [v * factor * (-1 if alternate and i % 2 else 1) for i, v in enumerate(BASE["b"].to_list())]
        return _pq(d, "scaled.parquet", _with("b", vals))
    return make


def _empty_folder(d):
    (d / "nothing").mkdir()
    return d / "nothing"


def _csv_copy(d):
    BASE.drop("day").write_csv(d / "in.csv")
    return d / "in.csv"


def _parquet_copy(d):
    return _pq(d, "in.parquet", BASE)


# name: (input builder, --qi, --k, extra args, expected exit code, expected message (regex; None: valid))
CASES = {
    # values in a quasi-identifier
    # (a missing value is a value: tests/test_missing.py; a QI missing in every row is refused)
    "null in a QI": (lambda d: _pq(d, "null.parquet", _with("a", [1, 2, None, 10, 11, 12, 20, 21, 22, 30, 31, 32])),
                     "a,b", "3", [], 0, None),
    "null in a QI (CSV)": (lambda d: _csv(d, "null.csv", "a,b\n1,2\n3,\n5,6\n7,8\n"), "a,b", "2", [], 0, None),
    "QI missing in every row": (lambda d: _pq(d, "nulls.parquet", _with("a", [None] * 12)), "a,b", "3", [], 2,
                                r"column 'a' is missing in every row"),
    "NaN in a QI": (lambda d: _pq(d, "nan.parquet", _with("b", [1.0] * 11 + [float("nan")])),
                    "a,b", "3", [], 2, r"column 'b' has a non-finite value \(nan\) at row 12"),
    "inf in a QI": (lambda d: _pq(d, "inf.parquet", _with("a", [1.0] * 5 + [float("inf")] + [2.0] * 6)),
                    "a,b", "3", [], 2, r"column 'a' has a non-finite value \(inf\) at row 6"),
    "-inf in a QI": (lambda d: _pq(d, "ninf.parquet", _with("a", [float("-inf")] + [2.0] * 11)),
                     "a,b", "3", [], 2, r"column 'a' has a non-finite value \(-inf\) at row 1"),
    "null late in a large input": (lambda d: _late(d, "null"), "a,b", "3", ["--chunk-rows", "1000", "--block-size",
                                   "5000"], 0, None),
    "NaN late in a large input": (lambda d: _late(d, "nan"), "a,b", "3", ["--chunk-rows", "1000", "--block-size",
                                  "5000"], 2, r"column 'a' has a non-finite value \(nan\) at row 49,?991"),
    "text late in a CSV column": (_late_text_csv, "a,b", "3", ["--chunk-rows", "1000"], 2,
                                  r"column 'a' is not numeric: 'abc' at row 12001 \(rows counted from 1\) "
                                  r"of .*late-text\.csv is not a number"),
    # column types
    # (the MDAV family takes String, Boolean and Date QIs: tests/test_mixed.py; ama does not)
    "non-numeric QI": (_parquet_copy, "a,name", "3", ["--method", "ama"], 2,
                       r"column 'name' is not numeric \(String\); method ama groups numeric"),
    "boolean QI": (_parquet_copy, "a,flag", "3", ["--method", "ama"], 2, r"column 'flag' is not numeric \(Boolean\)"),
    "date QI": (_parquet_copy, "a,day", "3", ["--method", "ama"], 2, r"column 'day' is not numeric \(Date\)"),
    "list QI": (lambda d: _pq(d, "list.parquet", BASE.with_columns(pl.Series("tags", [[1, 2]] * 12))), "a,tags",
                "3", [], 2, r"column 'tags' has type List\(Int64\): quasi-identifiers must be numbers, dates"),
    "too many categories": (lambda d: _pq(d, "wide.parquet", pl.DataFrame({"a": list(range(150)),
                                                                           "n": [f"n{i}" for i in range(150)]})),
                            "a,n", "3", [], 0, None),
    # empty tables
    "empty Parquet table": (lambda d: _pq(d, "empty.parquet", BASE.head(0)), "a,b", "3", [], 2,
                            r"empty\.parquet has no rows"),
    "header-only CSV": (lambda d: _csv(d, "header.csv", "a,b\n"), "a,b", "3", [], 2, r"header\.csv has no rows"),
    "zero-byte CSV": (lambda d: _csv(d, "zero.csv", ""), "a,b", "3", [], 2, r"cannot read .*zero\.csv: empty CSV"),
    # the QI list
    "unknown QI": (_csv_copy, "a,zzz", "3", [], 2, r"column 'zzz' not found in .*in\.csv \(columns: id, name, a, b"),
    "duplicated QI": (_csv_copy, "a,b,a", "3", [], 2, r"qi lists column 'a' twice"),
    "empty QI list": (_csv_copy, "", "3", [], 2, r"qi is empty"),
    "blank QI names": (_csv_copy, " , ", "3", [], 2, r"qi has an invalid column name: ''"),
    "group column exists": (_csv_copy, "a,b", "3", ["--group-column", "name"], 2,
                            r"group column 'name' already exists"),
    "group column is a QI": (_csv_copy, "a,b", "3", ["--group-column", "a"], 2, r"group column 'a' is also a qi"),
    # k and other parameters
    "k=0": (_csv_copy, "a,b", "0", [], 2, r"k must be at least 2, got 0"),
    "k=-1": (_csv_copy, "a,b", "-1", [], 2, r"k must be at least 2, got -1"),
    "k=2.5": (_csv_copy, "a,b", "2.5", [], 2, r"argument --k: invalid int value: '2\.5'"),
    "k > rows": (_csv_copy, "a,b", "13", [], 2, r"k=13 is larger than the number of rows \(12\)"),
    "chunk rows 0": (_csv_copy, "a,b", "3", ["--chunk-rows", "0"], 2, r"chunk_rows must be a positive whole number"),
    "threads 0": (_csv_copy, "a,b", "3", ["--threads", "0"], 2, r"threads must be a positive whole number"),
    "block size < 2k": (_csv_copy, "a,b", "3", ["--block-size", "5"], 2, r"block_size must be a whole number of at "
                        r"least 2k=6, got 5"),
    "memory limit not a size": (_csv_copy, "a,b", "3", ["--memory-limit", "lots"], 2,
                                r"memory limit must be a size such as 512MiB"),
    "gamma 0": (_csv_copy, "a,b", "3", ["--method", "vmdav", "--gamma", "0"], 2, r"gamma must be a positive number"),
    "unknown method": (_csv_copy, "a,b", "3", ["--method", "kmeans"], 2, r"argument --method: invalid choice: 'kmeans'"),
    # files
    "corrupt Parquet (random bytes)": (lambda d: (d / "corrupt.parquet").write_bytes(
        np.random.default_rng(0).bytes(4000)) and d / "corrupt.parquet", "a,b", "3", [], 2,
        r"cannot read .*corrupt\.parquet: "),
    "corrupt Parquet (PAR1 magic, garbage)": (lambda d: (d / "magic.parquet").write_bytes(
        b"PAR1" + np.random.default_rng(1).bytes(4000) + b"PAR1") and d / "magic.parquet", "a,b", "3", [], 2,
        r"cannot read .*magic\.parquet: "),
    "truncated Parquet": (_truncated, "a,b", "3", [], 2, r"cannot read .*trunc\.parquet: "),
    "missing input": (lambda d: d / "nope.parquet", "a,b", "3", [], 2, r"input not found: .*nope\.parquet"),
    "glob matching nothing": (lambda d: d / "nope-*.parquet", "a,b", "3", [], 2,
                              r"input glob matches no files: .*nope-\*\.parquet"),
    "folder without Parquet files": (_empty_folder, "a,b", "3", [], 2, r"input folder has no Parquet files: .*nothing"),
    "folder with mixed schemas": (_mixed_folder, "a,b", "2", [], 2, r"cannot read .*mixed: .*'a'"),
    "ragged CSV": (lambda d: _csv(d, "ragged.csv", "a,b\n1,2\n3,4,5\n5,6\n7,8\n"), "a,b", "2", [], 2,
                   r"cannot read .*ragged\.csv: "),
    "unsupported input format": (lambda d: _csv(d, "in.json", "{}"), "a,b", "2", [], 2,
                                 r"unsupported input format '\.json'"),
    "unsupported output format": (_csv_copy, "a,b", "3", ["@out=result.xlsx"], 2,
                                  r"unsupported output format '\.xlsx'"),
    "OUTPUT equal to INPUT (CSV)": (_csv_copy, "a,b", "3", ["@out=input"], 2, r"output is the input file: .*in\.csv"),
    "OUTPUT equal to INPUT (Parquet, other spelling)": (_parquet_copy, "a,b", "3", ["@out=input-dotted"], 2,
                                                        r"output is the input file: .*in\.parquet"),
    "OUTPUT equal to INPUT (symlink)": (_parquet_copy, "a,b", "3", ["@out=input-symlink"], 2,
                                        r"output is the input file: "),
    # valid odd inputs: must work, k-anonymous
    "values 1e300 (squares overflow)": (_scaled(1e300), "a,b", "3", [], 0, None),
    "values +-1e307 (sums overflow)": (_scaled(1e307, alternate=True), "a,b", "3", [], 0, None),
    "values 1e-310 (squares underflow)": (_scaled(1e-310), "a,b", "3", [], 0, None),
    "constant column": (lambda d: _pq(d, "const.parquet", _with("b", [4.5] * 12)), "a,b", "3", [], 0, None),
    "all QIs constant": (lambda d: _pq(d, "allconst.parquet", _with("a", [7.0] * 12, _with("b", [4.5] * 12))),
                         "a,b", "3", [], 0, None),
    # (the QIs alone: every other column of 4 distinct rows would be one-to-one with a QI)
    "duplicate rows": (lambda d: _pq(d, "dups.parquet", pl.concat([BASE.head(4).select("a", "b")] * 3)), "a,b", "3",
                       [], 0, None),
    "exactly k rows": (lambda d: _pq(d, "k.parquet", BASE.head(5)), "a,b", "5", [], 0, None),
    "decimal QI": (lambda d: _pq(d, "dec.parquet", BASE.with_columns(
        pl.Series("b", [decimal.Decimal(f"{v:.2f}") for v in BASE["b"]]))), "a,b", "3", [], 0, None),
    "NaN outside the QIs": (lambda d: _pq(d, "nanother.parquet", BASE.with_columns(
        pl.Series("x", [float("nan"), None] * 6))), "a,b", "3", [], 0, None),
}


def _fingerprint(path):
    path = Path(path)
    files = sorted(path.rglob("*")) if path.is_dir() else [path]
    return [(str(f), hashlib.sha256(f.read_bytes()).hexdigest(), os.stat(f).st_mtime_ns) for f in files if f.is_file()]


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input(case, tmp_path, capsys):
    build, qi, k, extra, code, message = CASES[case]
    ind, outd = tmp_path / "in", tmp_path / "out"
    ind.mkdir()
    outd.mkdir()
    src = build(ind)
    extra = list(extra)
    out = outd / "result.parquet"
    for e in [e for e in extra if e.startswith("@out=")]:
        extra.remove(e)
        target = e[len("@out="):]
        if target == "input":
            out = src
        elif target == "input-dotted":
            out = Path(src).parent / "." / ".." / "in" / Path(src).name
        elif target == "input-symlink":
            out = outd / "link.parquet"
            out.symlink_to(src)
        else:
            out = outd / target
    before = _fingerprint(src) if Path(src).exists() else None
    try:
        got = main(["anonymize", str(src), str(out), "--qi", qi, "--k", k, "--no-progress", "--quiet", *extra])
    except SystemExit as exc:  # argparse: usage and one error line
        got = exc.code
    err = capsys.readouterr().err.strip()
    assert got == code, err
    if message is not None:
        lines = err.splitlines()
        if case in ("k=2.5", "unknown method"):  # argparse's usage text, then the error
            assert lines[-1].startswith("microagg anonymize: error: "), err
        else:
            assert len(lines) == 1 and lines[0].startswith("microagg: error: "), err
        assert re.search(message, lines[-1]), err
        assert [p.name for p in outd.iterdir()] == (["link.parquet"] if case.endswith("(symlink)") else [])
    else:
        _check_valid(Path(src), out, qi.split(","), int(k), err)
    # never a temporary left behind, never the input touched
    assert [p.name for p in tmp_path.rglob("*") if "microagg" in p.name] == []
    if before is not None:
        assert _fingerprint(src) == before


def _check_valid(src, out, qi, k, err):
    assert err == "", err
    res = pl.read_parquet(out)
    orig = pl.read_csv(src) if src.suffix == ".csv" else pl.read_parquet(src)
    assert res.height == orig.height
    counts = res.group_by(qi).len()["len"]  # an independent count of the published classes (null: a value)
    assert counts.min() >= k
    others = [c for c in orig.columns if c not in qi]
    assert res.select(others).equals(orig.select(others))
    for c in qi:
        if not orig[c].dtype.is_numeric():  # a category: one of the column's own
            assert set(res[c].drop_nulls().to_list()) <= set(orig[c].to_list())
            continue
        # each published value lies within its column's range; without missing values the
        # overall mean is kept (with them: tests/test_missing.py)
        x = orig[c].cast(pl.Float64).drop_nulls().to_numpy()
        y = res[c].drop_nulls().to_numpy()
        assert np.isfinite(y).all()
        assert (y >= x.min()).all() and (y <= x.max()).all()
        if not orig[c].null_count():
            scale = np.abs(x).max() or 1.0
            assert np.isclose((y / scale).mean(), (x / scale).mean(), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("factor", [1e300, 1e-310, 1e307])
def test_extreme_magnitudes_give_the_same_partition_as_unit_values(factor):
    """Scaling a column by a power of ten near the float limits changes nothing but the units:
    the same groups and the same information loss as on the unscaled column."""
    rng = np.random.default_rng(5)
    X = rng.normal(size=(400, 3))
    base = engine.microaggregate(X, k=3)
    Y = X.copy()
    Y[:, 1] *= factor
    res = engine.microaggregate(Y, k=3)
    np.testing.assert_array_equal(res.labels, base.labels)
    assert res.report.information_loss_percent == pytest.approx(base.report.information_loss_percent, rel=1e-12)
    assert np.isfinite(res.table.to_numpy()).all()
    assert np.allclose(res.table["x1"].to_numpy() / factor, base.table["x1"].to_numpy(), rtol=1e-9)


def test_dependency_profile_refuses_a_column_too_wide_to_bin():
    X = np.random.default_rng(2).normal(size=(300, 3)).clip(-1.7, 1.7)
    X[:, 0] *= 1e308
    with pytest.raises(engine.EngineError, match="column 'x0' spans .* too wide to bin"):
        engine.microaggregate(X, k=3, method="ama")
