"""Inputs people have (issue 14): Parquet folders whose files disagree (defect 3), the
first bad value by row (9), Arrow date64 (9), NumPy float16 and Int128 (8), pandas and
pyarrow tables and datasets.

Folder cases run through the CLI (``engine.cli.main``) and the API, and a reconciled
folder's output is compared with the same data in one file."""

import datetime
import hashlib
import os
import re
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

import engine
from engine.cli import main
from engine.errors import EngineError
from runs import anonymize_sensitive

N = 24  # rows per file


def _part(i, n=N):
    rng = np.random.default_rng(i)
    return pl.DataFrame({
        "x": rng.normal(10 * i, 3, n).round(3),
        "y": rng.normal(0, 1, n),
        "name": [f"p{i}-{j}" for j in range(n)],
        "n": rng.integers(0, 1000, n),
        "s": [f"v{j % 3}" for j in range(n)],
    })


def _fingerprint(path):
    path = Path(path)
    files = sorted(path.rglob("*")) if path.is_dir() else [path]
    return [(str(f), hashlib.sha256(f.read_bytes()).hexdigest()) for f in files if f.is_file()]


def _cli(capsys, *argv):
    try:
        code = main([*map(str, argv), *(["--no-progress", "--quiet"] if argv[0] == "anonymize" else [])])
    except SystemExit as exc:
        code = exc.code
    return code, capsys.readouterr().err.strip()


def _one_line(err, pattern):
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("microagg: error: "), err
    assert re.search(pattern, lines[0]), err


def _folder(tmp_path, name, frames):
    d = tmp_path / name
    d.mkdir()
    for i, f in enumerate(frames):
        f.write_parquet(d / f"part-{i}.parquet")
    return d


def _same_as_one_file(tmp_path, capsys, folder, whole, qi, extra=(), method_args=()):
    """anonymize ``folder`` and ``whole`` (the same rows in one file) with the CLI: equal outputs."""
    one = tmp_path / f"{folder.name}-whole.parquet"
    whole.write_parquet(one)
    outs = []
    for src in (folder, one):
        out = tmp_path / f"{Path(src).stem}-out.parquet"
        before = _fingerprint(src)
        code, err = _cli(capsys, "anonymize", src, out, "--qi", ",".join(qi), "--k", 3, *method_args, *extra)
        assert code == 0, err
        assert _fingerprint(src) == before
        outs.append(out)
    a, b = pq.read_table(outs[0]), pq.read_table(outs[1])  # pyarrow reads it
    assert a.equals(b), (a.schema, b.schema)
    return pl.from_arrow(a)


# ---------------------------------------------------------------- defect 3: folders whose files disagree


@pytest.mark.parametrize("method", ["mdav", "maxent", "mnqia"])
def test_folder_with_reordered_columns(tmp_path, capsys, method):
    frames = [_part(0), _part(1).select("s", "name", "y", "n", "x"), _part(2).select("n", "x", "s", "y", "name")]
    folder = _folder(tmp_path, "reordered", frames)
    whole = pl.concat([f.select(frames[0].columns) for f in frames])
    args = {"mdav": (), "maxent": ("--method", "maxent", "--sa", "s"), "mnqia": ("--method", "mnqia")}[method]
    out = _same_as_one_file(tmp_path, capsys, folder, whole, ["x", "y"], method_args=args)
    assert out.columns[:2] == ["x", "y"] or method != "mdav"
    assert out["name"].to_list() == whole["name"].to_list()
    # the blocked path of the engine (several blocks, chunks that cross files) too
    code, err = _cli(capsys, "anonymize", folder, tmp_path / "blocks.parquet", "--qi", "x,y", "--k", 3,
                     "--block-size", 20, "--chunk-rows", 10, *args)
    assert code == 0, err
    assert pl.read_parquet(tmp_path / "blocks.parquet")["name"].to_list() == whole["name"].to_list()


def test_folder_int_and_float_qi_is_not_truncated(tmp_path, capsys):
    a = _part(0).with_columns(pl.col("x").round(0).cast(pl.Int64))
    b = _part(1).with_columns(pl.col("x") + 0.25)  # fractions: Float64
    folder = _folder(tmp_path, "intfloat", [a, b])
    whole = pl.concat([a.with_columns(pl.col("x").cast(pl.Float64)), b])
    out = _same_as_one_file(tmp_path, capsys, folder, whole, ["x", "y"])
    api = engine.microaggregate(str(folder), ["x", "y"], k=3).table
    ref = engine.microaggregate(whole, ["x", "y"], k=3).table
    assert api.equals(ref) and api.equals(out)
    # the information loss agrees with the one-file run (the fractions were grouped)
    r1 = engine.anonymize(str(folder), tmp_path / "r1.parquet", ["x", "y"], k=3)
    r2 = engine.anonymize(whole, tmp_path / "r2.parquet", ["x", "y"], k=3)
    assert r1.sse == r2.sse


def test_folder_missing_pass_through_column_reads_as_nulls(tmp_path, capsys):
    a, b, c = _part(0), _part(1).drop("name"), _part(2)
    folder = _folder(tmp_path, "missing", [a, b, c])
    whole = pl.concat([a, b, c], how="diagonal")
    out = _same_as_one_file(tmp_path, capsys, folder, whole, ["x", "y"])
    assert out["name"].null_count() == N and out.columns == a.columns
    # verify the release against the folder: passes (the nulls are the folder's)
    code, err = _cli(capsys, "verify", tmp_path / "missing-out.parquet", "--qi", "x,y", "--k", 3,
                     "--original", folder)
    assert code == 0, err
    # several blocks: the write pass reads only the other columns, and one file has none of them
    frames = [a, _part(1).select("x", "y", "n"), c]
    folder = _folder(tmp_path, "qi-only", frames)
    whole = pl.concat(frames, how="diagonal")
    blocks = _same_as_one_file(tmp_path, capsys, folder, whole, ["x", "y", "n"], extra=("--block-size", 20,
                                                                                        "--chunk-rows", 10))
    assert blocks["name"].to_list() == whole["name"].to_list() and blocks["s"].null_count() == N


def test_folder_column_only_in_a_later_file(tmp_path, capsys):
    a, b = _part(0).drop("name"), _part(1)
    folder = _folder(tmp_path, "later", [a, b])
    out = _same_as_one_file(tmp_path, capsys, folder, pl.concat([a, b], how="diagonal"), ["x", "y"])
    assert out.columns == a.columns + ["name"]


def test_folder_missing_qi_is_refused(tmp_path, capsys):
    folder = _folder(tmp_path, "noqi", [_part(0), _part(1).drop("y")])
    for args in (["anonymize", folder, tmp_path / "o.parquet", "--qi", "x,y", "--k", 3],
                 ["anonymize", folder, tmp_path / "o.parquet", "--qi", "x,y", "--k", 3, "--method", "mnqia"],
                 ["anonymize", folder, tmp_path / "o.parquet", "--qi", "x,y", "--k", 3, "--method", "maxent",
                  "--sa", "s"],
                 ["risk", folder, folder, "--qi", "x,y"],
                 ["profile", folder, "--columns", "x,y"]):
        code, err = _cli(capsys, *args)
        assert code == 2, (args, err)
        _one_line(err, r"column 'y' is missing from .*part-1\.parquet")
    assert not (tmp_path / "o.parquet").exists()


def test_verify_a_folder_release_missing_a_column_does_not_pass(tmp_path, capsys):
    src = _part(0, 2 * N)
    src.write_parquet(tmp_path / "orig.parquet")
    code, err = _cli(capsys, "anonymize", tmp_path / "orig.parquet", tmp_path / "rel.parquet", "--qi", "x,y", "--k", 3)
    assert code == 0, err
    rel = pl.read_parquet(tmp_path / "rel.parquet")
    # a release split in two files, the second without a QI: refused, not PASS
    bad = _folder(tmp_path, "rel-noqi", [rel.head(N), rel.tail(N).drop("y")])
    code, err = _cli(capsys, "verify", bad, "--qi", "x,y", "--k", 3)
    assert code == 2
    _one_line(err, r"column 'y' is missing from .*part-1\.parquet")
    # the second without a pass-through column: the comparison with the original fails
    bad = _folder(tmp_path, "rel-noname", [rel.head(N), rel.tail(N).drop("name")])
    code, err = _cli(capsys, "verify", bad, "--qi", "x,y", "--k", 3, "--original", tmp_path / "orig.parquet")
    assert code == 1, err
    res = engine.verify_release(str(bad), ["x", "y"], 3, original=str(tmp_path / "orig.parquet"))
    assert not res.ok


def test_folder_pass_through_int_and_float_is_refused(tmp_path, capsys):
    a = _part(0)
    b = _part(1).with_columns(pl.col("n").cast(pl.Float64))
    folder = _folder(tmp_path, "ptmix", [a, b])
    for extra in ([], ["--method", "mnqia"], ["--method", "maxent", "--sa", "s"]):
        code, err = _cli(capsys, "anonymize", folder, tmp_path / "o.parquet", "--qi", "x,y", "--k", 3, *extra)
        assert code == 2, err
        _one_line(err, r"column 'n' is Float64 in .*part-1\.parquet but Int64 in .*part-0\.parquet")
    assert not (tmp_path / "o.parquet").exists()
    # as a QI it is fine (QIs are Float64 anyway), and equal to the one-file run
    whole = pl.concat([a.with_columns(pl.col("n").cast(pl.Float64)), b])
    _same_as_one_file(tmp_path, capsys, folder, whole, ["x", "n"])


def test_folder_exact_integer_widening(tmp_path, capsys):
    a = _part(0).with_columns(pl.col("n").cast(pl.Int32), pl.col("y").cast(pl.Float32))
    b = _part(1).with_columns(pl.col("n").cast(pl.UInt32))
    c = _part(2).with_columns(pl.lit(None).alias("name"))  # an all-null (Null) column
    folder = _folder(tmp_path, "widen", [a, b, c])
    whole = pl.concat([f.with_columns(pl.col("n").cast(pl.Int64), pl.col("y").cast(pl.Float64),
                                      pl.col("name").cast(pl.String)) for f in (a, b, c)])
    out = _same_as_one_file(tmp_path, capsys, folder, whole, ["x", "y"])
    assert out.schema["n"] == pl.Int64 and out["n"].to_list() == whole["n"].to_list()


@pytest.mark.parametrize("change, pattern", [
    (lambda f: f.with_columns(pl.col("name").cast(pl.Categorical)), r"column 'name' is Categorical in "),
    (lambda f: f.with_columns(pl.col("n").cast(pl.String)), r"column 'n' is String in "),
    (lambda f: f.with_columns(pl.col("n").cast(pl.UInt64)), r"column 'n' is UInt64 in "),
    (lambda f: f.with_columns(pl.lit(datetime.date(2020, 1, 1)).alias("d")), None),
])
def test_folder_irreconcilable_types_are_refused(tmp_path, capsys, change, pattern):
    a = _part(0).with_columns(pl.lit(datetime.datetime(2020, 1, 1, 12)).alias("d"))
    b = change(_part(1).with_columns(pl.lit(datetime.datetime(2020, 1, 1, 12)).alias("d")))
    pattern = pattern or r"column 'd' is Date in "
    folder = _folder(tmp_path, "bad", [a, b])
    for args in (["anonymize", folder, tmp_path / "o.parquet", "--qi", "x,y", "--k", 3],
                 ["verify", folder, "--qi", "x,y", "--k", 3],
                 ["risk", folder, folder, "--qi", "x,y"],
                 ["profile", folder, "--columns", "x,y"]):
        code, err = _cli(capsys, *args)
        assert code == 2, (args, err)
        _one_line(err, pattern + r".*part-1\.parquet but .* in .*part-0\.parquet")
    assert not (tmp_path / "o.parquet").exists()


def test_other_commands_read_a_reconciled_folder(tmp_path, capsys):
    frames = [_part(0), _part(1).select("s", "name", "y", "n", "x").with_columns(pl.col("x") + 0.5)]
    frames[0] = frames[0].with_columns(pl.col("x").round(0).cast(pl.Int32))
    folder = _folder(tmp_path, "cmds", frames)
    whole = tmp_path / "whole.parquet"
    pl.concat([frames[0].with_columns(pl.col("x").cast(pl.Float64)), frames[1].select(frames[0].columns)]) \
        .write_parquet(whole)
    out = tmp_path / "o.parquet"
    assert _cli(capsys, "anonymize", folder, out, "--qi", "x,y", "--k", 3)[0] == 0
    assert _cli(capsys, "verify", out, "--qi", "x,y", "--k", 3, "--original", folder)[0] == 0
    r1 = engine.disclosure_risk(str(folder), str(out), ["x", "y"])
    r2 = engine.disclosure_risk(str(whole), str(out), ["x", "y"])
    d1, d2 = r1.to_dict(), r2.to_dict()
    for d in (d1, d2):
        d.pop("wall_seconds"), d.pop("original")
    assert d1 == d2
    from engine.select import profile as profile_dependencies

    p1 = profile_dependencies(str(folder), ["x", "y", "s"])
    p2 = profile_dependencies(str(whole), ["x", "y", "s"])
    assert np.array_equal(p1.matrix, p2.matrix)
    code, err = _cli(capsys, "profile", folder, "--columns", "x,y,s")
    assert code == 0, err


# ---------------------------------------------------------------- defect 9: the first bad value by row


def _bad_rows(frame, null_at, nan_at, null_col="x", nan_col="y"):
    idx = pl.int_range(pl.len())
    return frame.with_columns(
        pl.when(idx == null_at).then(None).otherwise(pl.col(null_col)).alias(null_col)).with_columns(
        pl.when(idx == nan_at).then(float("nan")).otherwise(pl.col(nan_col)).alias(nan_col))


@pytest.mark.parametrize("cols", [("x", "y"), ("y", "y"), ("y", "x")])
@pytest.mark.parametrize("method", ["mdav", "mnqia", "maxent"])
@pytest.mark.parametrize("blocks", [False, True])
def test_first_bad_value_by_row(tmp_path, capsys, cols, method, blocks):
    """A NaN at row 5 and a null at row 7 (same or other column, same chunk): row 5 is reported."""
    frame = _bad_rows(_part(0, 40).with_columns(pl.col("x").cast(pl.Float64)), 6, 4, *cols)
    src = tmp_path / "bad.parquet"
    frame.write_parquet(src, row_group_size=10)
    args = {"mdav": (), "maxent": ("--method", "maxent", "--sa", "s"), "mnqia": ("--method", "mnqia")}[method]
    extra = ("--block-size", 20, "--chunk-rows", 7) if blocks else ()
    code, err = _cli(capsys, "anonymize", src, tmp_path / "o.parquet", "--qi", "x,y", "--k", 3, *args, *extra)
    assert code == 2
    _one_line(err, rf"column '{cols[1]}'.*(non-finite value \(nan\)|NaN or infinite value) at row 5 ")
    # and the other way round: the null first
    frame = _bad_rows(_part(0, 40).with_columns(pl.col("x").cast(pl.Float64)), 2, 6, *cols)
    frame.write_parquet(src, row_group_size=10)
    code, err = _cli(capsys, "anonymize", src, tmp_path / "o.parquet", "--qi", "x,y", "--k", 3, *args, *extra)
    assert code == 2
    if method == "mdav":  # (a missing value is a value of the MDAV family's QIs: the NaN is the error)
        _one_line(err, rf"column '{cols[1]}'.*non-finite value \(nan\) at row 7 ")
    else:
        _one_line(err, rf"column '{cols[0]}'.*(missing value|null quasi-identifier) at row 3 ")


def test_first_bad_value_by_row_maxent_categorical_and_sa(tmp_path, capsys):
    frame = _part(0, 40).with_columns(pl.col("y").cast(pl.Float64))
    idx = pl.int_range(pl.len())
    frame = frame.with_columns(pl.when(idx == 9).then(None).otherwise(pl.col("name")).alias("name"),
                               pl.when(idx == 3).then(None).otherwise(pl.col("s")).alias("s"))
    for blocks in (False, True):
        with pytest.raises(EngineError, match=r"column 's': null sensitive value at row 4 "):
            anonymize_sensitive(frame, None, ["name", "x"], "maxent", sa="s", k=3, _force_blocks=blocks,
                                block_size=20 if blocks else None)


def test_first_bad_value_by_row_in_the_sampled_plan_flow(tmp_path):
    from engine.synth import NUMERIC_QI, census_like

    qi = list(NUMERIC_QI)
    frame = census_like(20_000, seed=4)
    idx = pl.int_range(pl.len())
    # row group 1 (rows 500..999) is not in the sample: the partition pass checks it
    frame = frame.with_columns(pl.col(qi[0]).cast(pl.Float64), pl.col(qi[1]).cast(pl.Float64)).with_columns(
        pl.when(idx == 720).then(None).otherwise(pl.col(qi[0])).alias(qi[0]),
        pl.when(idx == 710).then(float("inf")).otherwise(pl.col(qi[1])).alias(qi[1]))
    d = tmp_path / "bad"
    d.mkdir()
    frame.write_parquet(d / "p.parquet", row_group_size=500)
    out = tmp_path / "o.parquet"
    with pytest.raises(EngineError, match=rf"column '{qi[1]}' has a non-finite value \(inf\) at row 711 "):
        engine.anonymize(str(d), out, qi=qi, k=3, block_size=2_000)
    assert not out.exists()


# ---------------------------------------------------------------- defect 9: Arrow date64


def test_date64_pass_through_comes_out_as_a_date(tmp_path, capsys):
    days = [datetime.date(2020, 1, 1) + datetime.timedelta(days=i) for i in range(N)]
    t = pa.table({"x": np.arange(N, dtype=np.float64) % 11,  # (d is no twin of x)
                  "y": np.arange(N, dtype=np.float64) % 5,
                  "d": pa.array(days, pa.date64())})
    src = tmp_path / "d64.parquet"
    pq.write_table(t, src)
    for out, args in ((tmp_path / "o.parquet", ()), (tmp_path / "o2.parquet", ("--block-size", 8))):
        code, err = _cli(capsys, "anonymize", src, out, "--qi", "x,y", "--k", 3, *args)
        assert code == 0, err
        res = pl.read_parquet(out)
        assert res.schema["d"] == pl.Date and res["d"].to_list() == days
        assert pq.read_schema(out).field("d").type == pa.date32()
    # an in-memory Arrow table and a dataset: the same
    for data in (t, ds.dataset(str(src))):
        engine.anonymize(data, tmp_path / "o3.parquet", ["x", "y"], k=3)
        assert pl.read_parquet(tmp_path / "o3.parquet")["d"].to_list() == days
    code, err = _cli(capsys, "verify", tmp_path / "o.parquet", "--qi", "x,y", "--k", 3, "--original", src)
    assert code == 0, err


# ---------------------------------------------------------------- defect 8: float16, Int128


def test_float16_array():
    a = np.random.default_rng(3).normal(size=(40, 3)).astype(np.float16)
    r16 = engine.microaggregate(a, k=3)
    r64 = engine.microaggregate(a.astype(np.float64), k=3)
    assert r16.table.equals(r64.table) and np.array_equal(r16.labels, r64.labels)
    with pytest.raises(EngineError, match=r"a NumPy input must hold integers or floats of up to 64 bits, "
                                          r"got dtype complex128"):
        engine.microaggregate(a.astype(np.complex128), k=3)


def _int128_frame():
    return pl.DataFrame({"a": pl.Series([2 ** 70 + i * 2 ** 60 for i in range(N)], dtype=pl.Int128),
                         "b": [float(i % 4) for i in range(N)],
                         "big": pl.Series([2 ** 100 + i % 7 for i in range(N)], dtype=pl.Int128),  # (no QI's twin)
                         "s": [i % 3 for i in range(N)]})


def test_int128_qi_is_converted_to_float64():
    df = _int128_frame()
    r = engine.microaggregate(df, ["a", "b"], k=3)
    ref = engine.microaggregate(df.with_columns(pl.col("a").cast(pl.Float64)), ["a", "b"], k=3)
    assert r.table.equals(ref.table)
    assert r.table["big"].to_list() == df["big"].to_list()


def test_int128_pass_through(tmp_path, capsys):
    df = _int128_frame()
    out = tmp_path / "o.csv"
    engine.anonymize(df, out, ["a", "b"], k=3)
    assert [line.split(",")[2] for line in out.read_text().splitlines()[1:]] == [str(v) for v in df["big"]]
    for method, kw in (("mdav", {}), ("mnqia", {}), ("maxent", {"sa": "s"})):
        with pytest.raises(EngineError, match=r"column '(big|a)' is Int128: a Parquet file with 128-bit integers"):
            engine.anonymize(df, tmp_path / "o.parquet", ["a", "b"], k=3, method=method, **kw)
    assert not (tmp_path / "o.parquet").exists()
    df.write_parquet(tmp_path / "i128.parquet")  # Polars writes it; pyarrow cannot read it
    code, err = _cli(capsys, "anonymize", tmp_path / "i128.parquet", tmp_path / "o2.csv", "--qi", "b", "--k", 3)
    assert code == 2
    _one_line(err, r"column 'a' in .*i128\.parquet is Int128")


# ---------------------------------------------------------------- pandas and pyarrow


pd = pytest.importorskip("pandas")


def _pandas():
    f = _part(0, 40)
    df = f.to_pandas()
    df["opt"] = pd.array([1, None] * 20, dtype="Int64")
    df.index = pd.Index(range(100, 140), name="rid")
    return f, df


def test_microaggregate_pandas_returns_pandas():
    f, df = _pandas()
    before = df.copy()
    r = engine.microaggregate(df, ["x", "y"], k=3, group_column="g")
    assert isinstance(r.table, pd.DataFrame)
    assert r.table.index.equals(df.index) and list(r.table.columns) == list(df.columns) + ["g"]
    ref = engine.microaggregate(f, ["x", "y"], k=3, group_column="g").table
    assert np.array_equal(r.table["x"].to_numpy(), ref["x"].to_numpy())
    assert np.array_equal(r.table["g"].to_numpy(), ref["g"].to_numpy())
    assert r.table["opt"].dtype == df["opt"].dtype and r.table["name"].equals(df["name"])
    pd.testing.assert_frame_equal(df, before)  # the input is not changed


def test_anonymize_pandas_keeps_its_index(tmp_path):
    f, df = _pandas()
    engine.anonymize(df, tmp_path / "o.parquet", ["x", "y"], k=3)
    res = pl.read_parquet(tmp_path / "o.parquet")
    assert res.columns == list(df.columns)  # a RangeIndex is pandas metadata, as to_parquet keeps it
    assert res["opt"].to_list() == [1, None] * 20
    back = pd.read_parquet(tmp_path / "o.parquet")
    assert back.index.equals(df.index) and back.index.name == "rid" and list(back.columns) == list(df.columns)
    other = df.set_index(pd.Index(np.random.default_rng(0).permutation(40), name="rid"))  # a column first
    engine.anonymize(other, tmp_path / "o2.parquet", ["x", "y"], k=3)
    assert pl.read_parquet(tmp_path / "o2.parquet").columns == ["rid"] + list(df.columns)
    assert pd.read_parquet(tmp_path / "o2.parquet").index.equals(other.index)
    res2 = engine.verify_release(str(tmp_path / "o.parquet"), ["x", "y"], 3, original=df)
    assert res2.ok
    assert engine.disclosure_risk(df, str(tmp_path / "o.parquet"), ["x", "y"]).to_dict()


def test_pandas_bad_column_names():
    df = pd.DataFrame({0: [1.0, 2.0, 3.0], 1: [1.0, 2.0, 3.0]})
    with pytest.raises(EngineError, match=r"pandas column names must be strings, got 0 \(int\)"):
        engine.microaggregate(df, ["0", "1"], k=2)
    df = pd.DataFrame({"x": [1.0, 2.0, 3.0], "y": [1.0, 2.0, 3.0]}, index=pd.Index([5, 6, 7], name="x"))
    with pytest.raises(EngineError, match=r"cannot convert the pandas DataFrame: .*x"):
        engine.microaggregate(df, ["x", "y"], k=2)


def test_pyarrow_table_and_dataset(tmp_path):
    f = _part(0, 40)
    t = f.to_arrow()
    ref = engine.microaggregate(f, ["x", "y"], k=3).table
    r = engine.microaggregate(t, ["x", "y"], k=3)
    assert isinstance(r.table, pa.Table) and r.table.schema.names == t.schema.names
    assert pl.from_arrow(r.table).equals(ref)
    assert r.table.column("name").equals(t.column("name"))  # the input's own column
    rb = engine.microaggregate(t.to_batches()[0], ["x", "y"], k=3).table
    assert isinstance(rb, pa.Table) and pl.from_arrow(rb).equals(ref)
    f.write_parquet(tmp_path / "a.parquet")
    dset = ds.dataset(str(tmp_path / "a.parquet"))
    rd = engine.microaggregate(dset, ["x", "y"], k=3).table
    assert isinstance(rd, pa.Table) and pl.from_arrow(rd).equals(ref)
    for data in (t, dset):
        engine.anonymize(data, tmp_path / "o.parquet", ["x", "y"], k=3, block_size=12, chunk_rows=7)
        out = pl.read_parquet(tmp_path / "o.parquet")
        assert out.drop("x", "y").equals(f.drop("x", "y"))
        assert out.group_by("x", "y").len()["len"].min() >= 3


def test_pandas_is_not_imported_unless_given(tmp_path):
    import subprocess
    import sys

    pl.DataFrame({"x": np.arange(20.0), "y": np.arange(20.0) % 3}).write_parquet(tmp_path / "a.parquet")
    code = ("import sys, numpy as np, engine\n"
            "engine.microaggregate(np.arange(40.0).reshape(20, 2), k=3)\n"
            f"engine.anonymize({str(tmp_path / 'a.parquet')!r}, {str(tmp_path / 'o.parquet')!r}, ['x', 'y'], k=3)\n"
            "assert 'pandas' not in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_first_bad_value_by_row_maxent_blocks_numeric_before_categorical():
    frame = _part(0, 40).with_columns(pl.col("x").cast(pl.Float64))
    idx = pl.int_range(pl.len())
    for nan_at, null_at, message in ((5, 9, r"column 'x' has a non-finite value \(nan\) at row 6 "),
                                     (12, 9, r"column 'name': null quasi-identifier at row 10 "),
                                     (30, 9, r"column 'name': null quasi-identifier at row 10 ")):
        bad = frame.with_columns(pl.when(idx == null_at).then(None).otherwise(pl.col("name")).alias("name"),
                                 pl.when(idx == nan_at).then(float("nan")).otherwise(pl.col("x")).alias("x"))
        for blocks in (False, True):  # one message whether the table is one block or several
            with pytest.raises(EngineError, match=message):
                anonymize_sensitive(bad, None, ["name", "x"], "maxent", sa="s", k=3, _force_blocks=blocks,
                                    block_size=20 if blocks else None, chunk_rows=7)
