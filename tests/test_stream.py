"""The streaming engine: blocks spilled to disk, parallel aggregation, stitching."""

import glob
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import engine
from engine.errors import EngineError
from engine.io.spill import SPILL_PREFIX
from engine.kernels.index.partition import assign_leaves, counting_order
from engine.passes.partition import plan_blocks
from engine.synth import NUMERIC_QI, census_like
from reference import tie_key

pytestmark = pytest.mark.slow  # end-to-end: run with -m slow (left out by default; CI runs it)

QI = list(NUMERIC_QI)
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def census_dir(tmp_path_factory):
    """30,000 census-like rows in three Parquet files."""
    d = tmp_path_factory.mktemp("census")
    for i in range(3):
        census_like(10_000, seed=5, offset=10_000 * i).write_parquet(d / f"part-{i}.parquet", row_group_size=3_000)
    return d


def _read(path):
    return pl.read_parquet(path)


def test_single_block_equals_in_memory(census_dir, tmp_path):
    out = tmp_path / "out.parquet"
    rep = engine.anonymize(str(census_dir), out, qi=QI, k=4, block_size=50_000)
    mem = engine.microaggregate(pl.scan_parquet(census_dir), qi=QI, k=4, block_size=50_000)
    assert rep.blocks == 1
    assert _read(out).equals(mem.table)
    assert rep.information_loss_percent == mem.report.information_loss_percent


@pytest.fixture(scope="module")
def blocked(census_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("blocked") / "out.parquet"
    rep = engine.anonymize(str(census_dir), out, qi=QI, k=4, block_size=4_000, chunk_rows=100_000,
                           group_column="g")
    return out, rep


def test_blocks_cover_rows_once_and_are_k_anonymous(census_dir, blocked):
    out, rep = blocked
    assert rep.blocks >= 8
    assert rep.block_rows_max <= 4_000
    src = pl.read_parquet(census_dir)
    res = _read(out)
    # rows in input order, other columns untouched
    assert res.height == src.height
    others = [c for c in src.columns if c not in QI]
    assert res.select(others).equals(src.select(others))
    # an independent count: every combination of published QI values occurs >= k times
    counts = res.group_by(QI).len()
    assert counts["len"].min() >= 4
    sizes = res.group_by("g").len()["len"]
    assert sizes.min() >= 4 and sizes.max() <= 7
    assert sizes.sum() == src.height
    # each published value is the mean of its group's original values
    joined = src.select(["person_id", *QI]).with_columns(g=res["g"])
    means = joined.group_by("g").agg([pl.col(c).mean() for c in QI]).sort("g")
    pub = res.group_by("g").agg([pl.col(c).first() for c in QI]).sort("g")
    for c in QI:
        assert np.allclose(means[c].to_numpy(), pub[c].to_numpy(), rtol=1e-12, atol=1e-9)


@pytest.mark.parametrize("chunk_rows", [1_000, 7_000])
def test_chunk_size_does_not_change_output(census_dir, blocked, tmp_path, chunk_rows):
    out = tmp_path / "out.parquet"
    engine.anonymize(str(census_dir), out, qi=QI, k=4, block_size=4_000, chunk_rows=chunk_rows, group_column="g")
    assert out.read_bytes() == blocked[0].read_bytes()


def test_thread_count_does_not_change_output(census_dir, tmp_path):
    outs = []
    for threads in (1, 2):
        out = tmp_path / f"out{threads}.parquet"
        engine.anonymize(str(census_dir), out, qi=QI, k=4, block_size=4_000, threads=threads, group_column="g")
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]


def test_blocked_loss_is_measured_on_the_published_values(census_dir, blocked):
    """The blocks' workers measure the squared errors (the write pass reads no QI
    values): the IL equals one computed from the input and the output alone."""
    out, rep = blocked
    src = pl.read_parquet(census_dir).select(QI).to_numpy().astype(float)
    pub = _read(out).select(QI).to_numpy()
    mean, sd = src.mean(axis=0), src.std(axis=0)
    sse = (((src - pub) / sd) ** 2).sum()
    sst = (((src - mean) / sd) ** 2).sum()
    assert rep.sse == pytest.approx(sse, rel=1e-9)
    assert rep.sst == pytest.approx(sst, rel=1e-12)
    assert rep.information_loss_percent == pytest.approx(100 * sse / sst, rel=1e-9)


def test_blocked_table_of_qis_only_and_column_order(tmp_path):
    """The write pass reads the non-QI columns only: with none, it still counts the
    rows; QIs interleaved with other columns keep their places."""
    t = census_like(12_000, seed=8)
    order = [QI[2], "person_id", *QI[:2], "region", *QI[3:]]
    for name, table in (("qi_only", t.select(QI)), ("mixed", t.select(order))):
        src = tmp_path / f"{name}.parquet"
        table.write_parquet(src)
        out = tmp_path / f"{name}_out.parquet"
        rep = engine.anonymize(str(src), out, qi=QI, k=5, block_size=3_000)
        res = _read(out)
        assert rep.blocks > 1 and res.columns == table.columns and res.height == table.height
        assert res.group_by(QI).len()["len"].min() >= 5
        others = [c for c in table.columns if c not in QI]
        assert res.select(others).equals(table.select(others))


def test_published_sse_kernel_matches_numpy():
    from engine.kernels.groups import published_sse
    rng = np.random.default_rng(3)
    X = rng.normal(size=(200, 3)) * 100
    labels = rng.integers(0, 20, 200)
    cent = rng.normal(size=(20, 3)) * 100
    inv = np.array([1.0, 0.5, 2.0 ** -10])
    out = np.array([1.0, 2.0, 3.0])
    published_sse(X, inv, labels, cent, out)
    np.testing.assert_allclose(out, [1.0, 2.0, 3.0] + (((X - cent[labels]) * inv) ** 2).sum(axis=0), rtol=1e-12)


def test_blocked_loss_is_close_to_exact(census_dir, blocked):
    exact = engine.microaggregate(pl.scan_parquet(census_dir), qi=QI, k=4, block_size=50_000).report.information_loss_percent
    assert blocked[1].information_loss_percent < 1.5 * exact


def test_spill_folder_removed_on_success_and_error(census_dir, tmp_path, monkeypatch):
    out = tmp_path / "out.parquet"
    engine.anonymize(str(census_dir), out, qi=QI, k=4, block_size=4_000, tmp_dir=tmp_path)
    assert not glob.glob(str(tmp_path / f"{SPILL_PREFIX}*"))

    import engine.methods.centroids as co

    def boom(*a, **kw):
        raise EngineError("simulated failure in the stitch pass")

    monkeypatch.setattr(co, "Groups", boom)  # the stitch of the workers' results
    monkeypatch.setattr(co, "stitch_blocks", boom)  # (or of the blocks, after a seam polish)
    out2 = tmp_path / "out2.parquet"
    with pytest.raises(EngineError, match="simulated"):
        engine.anonymize(str(census_dir), out2, qi=QI, k=4, block_size=4_000, tmp_dir=tmp_path)
    assert not out2.exists()
    assert sorted(os.listdir(tmp_path)) == ["out.parquet"]


def test_lazyframe_source_and_memory_limit(census_dir, tmp_path):
    out = tmp_path / "out.parquet"
    rep = engine.anonymize(pl.scan_parquet(census_dir), out, qi=QI, k=3, memory_limit="2GiB", block_size=5_000)
    assert rep.memory_limit == 2 << 30 and rep.blocks > 1
    assert _read(out).height == 30_000


def test_memory_limit_too_small_is_a_clear_error(census_dir, tmp_path):
    with pytest.raises(EngineError, match=r"--memory-limit 64MiB is below what this run needs \(at least \d+MiB "
                                          r"for 30,000 rows of \d QIs with method mdav: \d+MiB of it held by this "
                                          r"process before the run\); raise it"):
        engine.anonymize(str(census_dir), tmp_path / "o.parquet", qi=QI, k=3, memory_limit="64MiB")
    with pytest.raises(EngineError, match="memory limit must be a size"):
        engine.anonymize(str(census_dir), tmp_path / "o.parquet", qi=QI, k=3, memory_limit="lots")
    assert not (tmp_path / "o.parquet").exists()


def test_plan_and_routing_match_a_plain_reference():
    rng = np.random.default_rng(3)
    Z = np.round(rng.normal(size=(5_000, 3)), 1)  # many ties
    ids = np.arange(5_000, dtype=np.int64)
    plan = plan_blocks(Z[::5], ids[::5], 5_000, 700)
    got = plan.assign(Z, ids)

    def route(z, r):  # the split rule, written out
        node = 0
        while plan.leaf_of[node] < 0:
            key = (z[plan.dim[node]], tie_key(int(r)))
            node = plan.left[node] if key <= (plan.thr_value[node], int(plan.thr_row[node])) else plan.right[node]
        return plan.leaf_of[node]

    assert all(got[i] == route(Z[i], ids[i]) for i in range(0, 5_000, 7))
    counts = np.bincount(got, minlength=plan.n_blocks)
    assert counts.sum() == 5_000 and counts.max() <= 900  # estimated from a 1-in-5 sample
    order = np.empty(5_000, np.int64)
    start = np.empty(plan.n_blocks + 1, np.int64)
    counting_order(got, plan.n_blocks, order, start)
    assert np.array_equal(order, np.argsort(got, kind="stable"))


def _peak_rss_of(cmd, **kw):
    """Run ``cmd``; return (process, peak RSS bytes of that command alone).

    The kernel's count comes from ``/usr/bin/time`` (a small parent: a child forked
    from this big test process would inherit its high-water mark); without it,
    psutil samples the child every 10 ms."""
    import shutil
    import tempfile

    if shutil.which("time") and os.path.exists("/usr/bin/time"):
        with tempfile.NamedTemporaryFile("r", suffix=".rss") as fh:
            proc = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", fh.name, *cmd], **kw)
            return proc, int(fh.read().split()[-1]) * 1024
    import time

    import psutil

    child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=kw.get("cwd"))
    peak, ps = 0, psutil.Process(child.pid)
    while child.poll() is None:
        try:
            peak = max(peak, ps.memory_info().rss)
        except psutil.Error:
            break
        time.sleep(0.01)
    out, err = child.communicate()
    return subprocess.CompletedProcess(cmd, child.returncode, out, err), peak


@pytest.mark.parametrize("row_group", [100_000, 50_000], ids=["profile-pass", "row-group-sample"])
def test_cli_streaming_with_peak_rss_under_limit(tmp_path, row_group):
    """2M rows with --memory-limit 512MiB: the process's peak RSS stays below (20 row
    groups: pass 1 runs; 40: the plan's sample comes from every 8th row group). Without
    the polish: with it the least limit is 1.1 GiB (issue 28: a limit no longer turns it
    off; tests/test_memory_limit.py runs it at its least limit)."""
    data = tmp_path / "big"
    data.mkdir()
    for i in range(2):
        census_like(1_000_000, seed=1, offset=1_000_000 * i).write_parquet(data / f"p{i}.parquet",
                                                                            row_group_size=row_group)
    out = tmp_path / "out.parquet"
    rep = tmp_path / "rep.json"
    proc, peak = _peak_rss_of([sys.executable, "-m", "engine", "anonymize", str(data), str(out), "--qi", ",".join(QI),
                               "--k", "5", "--memory-limit", "512MiB", "--polish-rounds", "0", "--report", str(rep),
                               "--quiet"],
                              capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert peak < 512 * 2**20, f"peak RSS {peak / 2**20:.0f} MiB"
    report = json.loads(rep.read_text())
    assert report["rows"] == 2_000_000 and report["min_group_size"] >= 5
    assert ("sample" in report["passes"]) == (row_group == 50_000)
    assert pl.scan_parquet(out).select(pl.len()).collect().item() == 2_000_000


def test_border_refinement_lowers_loss_and_keeps_guarantees(census_dir, blocked, tmp_path):
    """Refinement within and across blocks: IL never above the blocked run, groups k..2k-1,
    same output for 1 and 2 threads."""
    outs = []
    for threads in (1, 2):
        out = tmp_path / f"r{threads}.parquet"
        # (polish off: each block its own unit, so the windows are pairs of blocks)
        rep = engine.anonymize(str(census_dir), out, qi=QI, k=4, block_size=4_000, refine="local",
                               refine_rounds=3, threads=threads, group_column="g", polish_rounds=0)
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]
    assert rep.refine["windows"] >= 7 and rep.refine["sse_after"] <= rep.refine["sse_before"]
    plain = engine.microaggregate(pl.scan_parquet(census_dir), qi=QI, k=4, block_size=4_000, polish_rounds=0)
    assert rep.information_loss_percent < plain.report.information_loss_percent
    res = _read(tmp_path / "r2.parquet")
    sizes = res.group_by("g").len()["len"]
    assert sizes.min() >= 4 and sizes.max() <= 7 and sizes.sum() == 30_000
    assert res.group_by(QI).len()["len"].min() >= 4


@pytest.mark.parametrize("seed", range(4))
def test_routing_raw_rows_equals_routing_standardized_rows(seed):
    """``Plan.route`` compares raw values with bounds derived from the standardized
    thresholds: the leaves must be exactly those of standardizing, then ``assign``."""
    from engine.passes.partition import standardized
    from engine.frames import Profile

    rng = np.random.default_rng(seed)
    n = 20_000
    X = np.column_stack([np.round(rng.normal(40, 12, n)),            # integers: many ties
                         rng.lognormal(10, 1, n),                     # skewed
                         np.full(n, 7.5),                             # constant: sd 0
                         rng.normal(0, 1e-3, n) * 3.0 ** seed,        # tiny values
                         np.round(rng.normal(0, 1, n), 2) * 1e6])     # large, negative too
    mean_raw, sd_raw = X.mean(0), X.std(0)
    scale = np.array([1.0, 1.0, 1.0, 2.0 ** -8, 2.0 ** 20])          # powers of two as the profile picks
    prof = Profile(tuple("abcde"), n, scale, mean_raw / scale, sd_raw / scale, X.min(0), X.max(0))
    cols = np.array([0, 1, 2, 3, 4]) if seed % 2 == 0 else np.array([1, 3, 4])
    ids = np.arange(n, dtype=np.int64) + 1_000
    Z = standardized(X, prof, cols)
    plan = plan_blocks(Z[::7], ids[::7], n, 600)
    want = plan.assign(Z, ids)
    got = plan.route(np.ascontiguousarray(X.T), 1_000, plan.raw_bounds(prof, cols), np.empty(n, np.int64))
    assert np.array_equal(got, want)
    # rows right at the bounds: each inner node's lo, hi and the doubles just outside them
    col, lo, hi = plan.raw_bounds(prof, cols)
    rows = []
    for node in np.flatnonzero(plan.leaf_of < 0):
        for v in (lo[node], hi[node], np.nextafter(lo[node], -np.inf), np.nextafter(hi[node], np.inf)):
            if np.isfinite(v):
                r = X[node % n].copy()
                r[col[node]] = v
                rows.append(r)
    Xe = np.array(rows)
    ide = (np.arange(Xe.shape[0], dtype=np.int64) * 7919) % n + 1_000  # ids on both sides of thr_row
    assert np.array_equal(_route_ids(plan, Xe, ide, prof, cols), plan.assign(standardized(Xe, prof, cols), ide))


def _route_ids(plan, X, ids, prof, cols):
    """``Plan.route`` for arbitrary row ids: row by row, each as its own chunk."""
    b = plan.raw_bounds(prof, cols)
    return np.array([plan.route(np.ascontiguousarray(X[i:i + 1].T), int(ids[i]), b, np.empty(1, np.int64))[0]
                     for i in range(X.shape[0])])


@pytest.mark.parametrize("seed", range(3))
def test_plan_tree_cuts_at_medians_of_the_widest_column(seed):
    """The Numba planner against the rule written out: every inner node cuts its
    sample rows into the size // 2 smallest by (value, row) on a column of largest
    variance (up to rounding) and the rest; leaves hold at most ``leaf`` rows and are
    numbered left to right."""
    from engine.kernels.index.partition import plan_tree

    rng = np.random.default_rng(seed)
    m = 3_000
    Z = np.column_stack([rng.normal(size=m), np.round(rng.normal(size=m) * 2), rng.normal(size=m) * 0.5,
                         np.repeat(rng.normal(size=m // 10), 10)])
    leaf = [1, 37, 500][seed]
    dim, pivot, left, right, leaf_of, n_leaves = plan_tree(Z, leaf)
    seen_leaves = []

    def walk(node, rows):
        if leaf_of[node] >= 0:
            assert rows.shape[0] <= leaf or rows.shape[0] < 2
            seen_leaves.append(leaf_of[node])
            return
        assert rows.shape[0] > leaf and right[node] == left[node] + 1
        var = Z[rows].var(axis=0)
        assert var[dim[node]] >= var.max() * (1 - 1e-9)
        keys = sorted((Z[r, dim[node]], r) for r in rows)
        h = rows.shape[0] // 2
        assert keys[h - 1] == (Z[pivot[node], dim[node]], pivot[node])
        lo = np.array(sorted(r for _, r in keys[:h]))
        hi = np.array(sorted(r for _, r in keys[h:]))
        walk(left[node], lo)
        walk(right[node], hi)

    walk(0, np.arange(m))
    assert seen_leaves == list(range(n_leaves))


def test_tie_key_kernel_matches_reference():
    from engine.kernels.index.partition import tie_keys

    ids = np.array([0, 1, 2, 12345, 2**31, 2**40 + 7, 2**62], np.int64)
    assert [int(v) for v in tie_keys(ids)] == [tie_key(int(i)) for i in ids]


def test_numeric_values_convert_as_polars_cast():
    """Without a Polars cast, NumPy's conversion to float64 gives the same values."""
    from decimal import Decimal

    from engine.io.source import numeric_values
    big = 2 ** 63 + 2 ** 11 + 1  # not a double: rounds
    cases = [
        pl.Series([1, -2, 3], dtype=pl.Int8),
        pl.Series([big, 5, 2 ** 53 + 1], dtype=pl.UInt64),
        pl.Series([2 ** 62 + 1, -(2 ** 60) - 3], dtype=pl.Int64),
        pl.Series([0.1, -1.5, float("inf")], dtype=pl.Float32),
        pl.Series([1, None, 3], dtype=pl.Int32),
        pl.Series([True, False], dtype=pl.Boolean),
        pl.Series([Decimal("1.25"), Decimal("-3.50")], dtype=pl.Decimal(10, 2)),
    ]
    for s in cases:
        x = np.empty(s.len())
        x[:] = numeric_values(s)
        np.testing.assert_array_equal(x, s.cast(pl.Float64).fill_null(float("nan")).to_numpy(), err_msg=str(s.dtype))


def test_blocked_csv_input_equals_parquet_input(census_dir, blocked, tmp_path):
    """The write pass's narrower read (the non-QI columns) through the CSV reader too."""
    src = pl.read_parquet(census_dir)
    csv = tmp_path / "in.csv"
    src.write_csv(csv)
    out = tmp_path / "out.parquet"
    rep = engine.anonymize(str(csv), out, qi=QI, k=4, block_size=4_000, chunk_rows=7_000, group_column="g")
    assert rep.blocks == blocked[1].blocks
    assert _read(out).equals(_read(blocked[0]))
    assert rep.information_loss_percent == blocked[1].information_loss_percent
