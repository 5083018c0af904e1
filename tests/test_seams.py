"""The seam stage of polished runs above POLISH_MAX_ROWS rows (engine/passes/seams.py): the
seams between units polished as the blocks of a second, rotated plan.

The thresholds are lowered for these tests (a 12,000-row table, blocks of 1,000 rows,
units and seam blocks of 2,000, the seam stage from 5,000 rows), so that the stage runs on
many small blocks in a few seconds."""

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import engine
import engine.methods.centroids as co
from engine.passes import seams as seams_mod
from engine.passes.seams import SeamStage, Router
from engine.tuning import SCALE_LEAF_SIZE
from reference_polish import sse
from conftest import lower_seam_thresholds

K = 3


@pytest.fixture(scope="module")
def table():
    from engine.synth import NUMERIC_QI, census_like
    return census_like(12_000, seed=4).select(list(NUMERIC_QI[:7]))


@pytest.fixture(autouse=True)
def small_thresholds(monkeypatch):
    lower_seam_thresholds(monkeypatch, 2_000)


def _run(table, **kw):
    kw.setdefault("block_size", 1_000)
    return engine.microaggregate(table, qi=table.columns, k=K, **kw)


def _z(table):
    X = table.to_numpy().astype(np.float64)
    sd = X.std(axis=0)
    return (X - X.mean(axis=0)) / np.where(sd > 0, sd, 1.0)


def test_seam_stage_guarantees_and_invariance(table):
    """Every row in one group of k..2k-1 rows; the same labels and table for any thread
    count, chunk size and memory limit; the stage ran on several blocks; loss below the
    unpolished run's."""
    runs = [_run(table, threads=t, chunk_rows=c, memory_limit=m)
            for t, c, m in ((1, 100_000, None), (2, 777, None), (2, 100_000, "16GiB"))]
    for r in runs[1:]:
        assert np.array_equal(np.asarray(r.labels), np.asarray(runs[0].labels))
        assert r.table.equals(runs[0].table)
    rep = runs[0].report
    assert rep.polish["seam_blocks"] > 1 and "seams" in rep.passes
    assert rep.polish["rounds"] == 1 and rep.leaf_size == SCALE_LEAF_SIZE
    sizes = np.bincount(np.asarray(runs[0].labels))
    assert sizes.min() >= K and sizes.max() <= 2 * K - 1 and sizes.sum() == table.height
    plain = _run(table, polish_rounds=0)
    assert rep.information_loss_percent < plain.report.information_loss_percent


def test_seam_stage_never_raises_the_sse_and_publishes_exact_means(table, monkeypatch):
    """The SSE (from scratch) after the seam stage is at most the first stage's; each
    published value is its group's mean; the reported loss is the loss of the output."""
    first = {}
    real = co.seam_pass

    def spy(stage, profile, cols, method, polish, labels, *a, **kw):
        first["labels"] = np.asarray(labels).astype(np.int64).copy()
        return real(stage, profile, cols, method, polish, labels, *a, **kw)

    monkeypatch.setattr(co, "seam_pass", spy)
    monkeypatch.setattr(co.CentroidFlow, "per_row", lambda self, rows: "a test")  # (the first stage's label map)
    r = _run(table)
    lab = np.asarray(r.labels).astype(np.int64)
    Z = _z(table)
    assert sse(Z, lab) <= sse(Z, first["labels"]) * (1 + 1e-9)
    assert not np.array_equal(lab, first["labels"])  # (the stage moved rows)
    X = table.to_numpy().astype(np.float64)
    out = r.table.select(table.columns).to_numpy()
    G = int(lab.max()) + 1
    cnt = np.bincount(lab, minlength=G)
    for j in range(X.shape[1]):
        mean = np.bincount(lab, weights=X[:, j], minlength=G) / cnt
        assert np.allclose(out[:, j], mean[lab], rtol=1e-12, atol=1e-9)
    sst = ((X - X.mean(0)) ** 2).sum(0)
    il = 100 * (((X - out) ** 2).sum(0) / sst).sum() / (sst > 0).sum()
    assert abs(il - r.report.information_loss_percent) < 1e-6 * il


def test_seam_stage_keeps_strata(table):
    """With --strata each group lies in one stratum (the coordinator's recount) and the
    output does not depend on the thread count."""
    t = table.with_columns(region=(pl.col(table.columns[0]) > pl.col(table.columns[0]).median()).cast(pl.Int8))
    runs = [engine.microaggregate(t, qi=table.columns, k=K, block_size=1_000, strata=["region"], threads=n)
            for n in (1, 2)]
    assert runs[0].table.equals(runs[1].table)
    assert runs[0].report.polish["seam_blocks"] > 1
    lab = np.asarray(runs[0].labels)
    region = t["region"].to_numpy()
    for g in np.unique(lab)[:500]:
        assert np.unique(region[lab == g]).shape[0] == 1


def test_groups_move_whole(tmp_path):
    """SeamStage.add: every row of a group lands in its group's block, with its group id;
    blocks read back in the order appended."""
    from engine.passes.partition import plan_blocks

    rng = np.random.default_rng(0)
    Zs = rng.normal(size=(400, 3))
    plan = plan_blocks(Zs, np.arange(400), 4_000, 500)
    router = Router(plan, np.eye(3))
    stage = SeamStage(router, 3, tmp_path, 1 << 16, 4_000)
    try:
        for u in range(4):
            ids = np.arange(u * 1000, (u + 1) * 1000)
            X = rng.normal(size=(1000, 3))
            local = rng.permutation(np.arange(1000) % 200)
            g = int(local.max()) + 1
            stage.add(u * 200, *router.records(X, X, local, g, ids, u))
        stage.store.flush()
        seen = {}
        for b in range(stage.store.n_blocks):
            ids, Y = stage.store.read(b)
            gids = stage.group_ids(Y)
            assert np.all(ids // 1000 == gids // 200)  # (each row with its unit's group ids)
            for gid in gids:
                assert seen.setdefault(gid, b) == b
        assert sum(int(r) for r in stage.store.rows) == 4_000
    finally:
        stage.close()


@st.composite
def two_units(draw):
    n = draw(st.integers(24, 160))
    d = draw(st.integers(1, 4))
    k = draw(st.integers(2, 4))
    vals = draw(st.lists(st.lists(st.integers(-5, 5) | st.floats(-30, 30, allow_nan=False, allow_infinity=False),
                                  min_size=d, max_size=d), min_size=n, max_size=n))
    return np.array(vals, dtype=np.float64), k


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(two_units(), st.integers(8, 80))
def test_seam_pass_property(tmp_path, unit_rows_part, block_rows):
    """On any table cut into two units of MDAV groups: the seam stage keeps the group count
    and sizes within k..2k-1, never raises the SSE (from scratch), and its sums are each
    group's exact mean and size."""
    from engine.kernels.mdav.leaf import aggregate_leaves
    from engine.kernels.search.polish import rotations
    from engine.passes.partition import plan_blocks
    from engine.frames import Profile
    from engine.passes.seams import seam_pass

    X, k = unit_rows_part
    n, d = X.shape
    half = n // 2
    if half < 2 * k:
        return
    ones, zeros = np.ones(d), np.zeros(d)
    prof = Profile(tuple(f"c{j}" for j in range(d)), n, ones, zeros, ones, X.min(0), X.max(0))
    rot = rotations(d, 1)[-1]
    router = Router(plan_blocks(X @ rot.T, np.arange(n), n, block_rows), rot)
    stage = SeamStage(router, d, tmp_path, 1 << 12, n)
    labels = np.empty(n, np.int64)
    first = 0
    try:
        for u, rows in enumerate((np.arange(half), np.arange(half, n))):
            local = aggregate_leaves(np.ascontiguousarray(X[rows]), 0, k, 0.0, 4 * k).astype(np.int64)
            g = int(local.max()) + 1
            labels[rows] = first + local
            stage.add(first, *router.records(X[rows], X[rows], local, g, rows, u))
            first += g
        before = sse(X, labels)
        out = np.full(n, -1, np.int32)
        G = first
        sums = (np.zeros((G, d)), np.zeros(G, np.int64), np.zeros(d))
        got = seam_pass(stage, prof, np.arange(d), (0, k, 0.0), (4, 8, rotations(d, 1)), out, 1, None, sums)
    finally:
        stage.close()
    assert got == G and out.min() >= 0
    sizes = np.bincount(out, minlength=G)
    assert sizes.min() >= k and sizes.max() <= 2 * k - 1
    assert sse(X, out.astype(np.int64)) <= before * (1 + 1e-9) + 1e-9
    assert np.array_equal(sums[1], sizes)
    for j in range(d):
        assert np.allclose(sums[0][:, j], np.bincount(out, weights=X[:, j], minlength=G) / sizes, atol=1e-9)


def test_seam_stage_on_dask_equals_local(table, tmp_path):
    """A run on Dask (the first stage's units as tasks, the seam stage on the client)
    writes the bytes of the local run."""
    distributed = pytest.importorskip("distributed")
    src = tmp_path / "in.parquet"
    table.write_parquet(src)
    local, dask = tmp_path / "local.parquet", tmp_path / "dask.parquet"
    opts = dict(qi=table.columns, k=K, block_size=1_000)
    (tmp_path / "t1").mkdir(); (tmp_path / "t2").mkdir()
    engine.anonymize(src, local, tmp_dir=tmp_path / "t1", **opts)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        rep = engine.anonymize(src, dask, tmp_dir=tmp_path / "t2", scheduler=client, **opts)
    assert rep.polish["seam_blocks"] > 1
    assert dask.read_bytes() == local.read_bytes()


def test_seam_stage_row_ordered_writes_the_bytes_of_the_map_path(table, tmp_path, monkeypatch):
    """A polished run above the threshold keeps no per-row state either: the seam stage's
    blocks hand their published values to the write pass in row order
    (``passes.published``), and the output is the bytes of the run that keeps the
    row -> group map."""
    from engine import budget
    from engine.passes import published

    src = tmp_path / "in.parquet"
    table.write_parquet(src, row_group_size=2_000)
    opts = dict(qi=table.columns, k=K, block_size=1_000)
    engine.anonymize(src, tmp_path / "map.parquet", **opts)  # (no limit: the map is kept)
    calls, add = [], published.RowRecords.add
    monkeypatch.setattr(published.RowRecords, "add", lambda self, *a: (calls.append(1), add(self, *a))[1])
    monkeypatch.setattr(budget, "PREFER_MAP", False)  # (row-ordered whenever a run may be)
    monkeypatch.setattr(budget, "RANGE_ROWS", 3_000)
    rep = engine.anonymize(src, tmp_path / "rows.parquet", memory_limit="16GiB", **opts)
    assert len(calls) > 1 and rep.polish["seam_blocks"] > 1
    assert (tmp_path / "rows.parquet").read_bytes() == (tmp_path / "map.parquet").read_bytes()


def test_narrow_and_wide_records_read_back_exactly(tmp_path):
    """Units whose values are float32 spill narrow records, others wide ones; a store
    widened by one unit takes the next narrow unit's records widened: every row reads
    back with its exact values and its group id."""
    from engine.passes.partition import plan_blocks

    rng = np.random.default_rng(1)
    router = Router(plan_blocks(rng.normal(size=(300, 2)), np.arange(300), 3_000, 400), np.eye(2))
    stage = SeamStage(router, 2, tmp_path, 1 << 14, 3_000)
    units = [rng.integers(-50, 50, size=(1000, 2)).astype(np.float64),  # float32 values: narrow
             rng.normal(size=(1000, 2)),                                 # not: widens the store
             rng.integers(0, 9, size=(1000, 2)).astype(np.float64)]      # narrow again, widened
    try:
        for u, X in enumerate(units):
            ids = np.arange(u * 1000, (u + 1) * 1000)
            local = np.arange(1000) // 5
            block, blocks, cuts, rec = router.records(X, X, local, 200, ids, u)
            assert rec.dtype == (np.float64 if u == 1 else np.float32)
            stage.add(u * 200, block, blocks, cuts, rec)
        stage.store.flush()
        got_ids, got_X, got_g = [], [], []
        for b in range(stage.store.n_blocks):
            ids, Y = stage.store.read(b)
            got_ids.append(ids), got_X.append(Y[:, :2]), got_g.append(stage.group_ids(Y))
        ids, X, gid = np.concatenate(got_ids), np.concatenate(got_X), np.concatenate(got_g)
        order = np.argsort(ids)
        assert np.array_equal(ids[order], np.arange(3000))
        assert np.array_equal(X[order], np.concatenate(units))
        assert np.array_equal(gid[order], np.arange(3000) // 5)
    finally:
        stage.close()


def _records_numpy(router, Z, X, local, g, ids, block):
    """``Router.records`` as NumPy expressions (the code before its kernels): the reference."""
    cnt = np.bincount(local, minlength=g).astype(np.float64)
    C = np.empty((g, Z.shape[1]))
    for j in range(Z.shape[1]):
        C[:, j] = np.bincount(local, weights=Z[:, j], minlength=g) / cnt
    Cr = np.empty((g, Z.shape[1]))
    for a in range(0, g, 1024):
        Cr[a: a + 1024] = (C[a: a + 1024, None, :] * router.rotation[None, :, :]).sum(axis=2)
    pos = np.full(g, local.shape[0], np.int64)
    np.minimum.at(pos, local, np.arange(local.shape[0]))
    gblock = router.plan.assign(np.ascontiguousarray(Cr), ids[pos].astype(np.int64))
    block_of = gblock[local]
    order = np.argsort(block_of, kind="stable")
    sb = block_of[order]
    cuts = np.concatenate([[0], np.flatnonzero(np.diff(sb)) + 1, [order.shape[0]]])
    Xo = X[order]
    narrow = np.array_equal(Xo.astype(np.float32), Xo, equal_nan=True)
    w = X.shape[1]
    rec = np.empty((order.shape[0], w + 3), np.float32 if narrow else np.float64)
    rec.view(np.uint32 if narrow else np.int64)[:, 0] = ids[order]
    rec[:, 1: w + 1] = Xo
    rec[:, w + 1] = local[order]
    rec[:, w + 2] = block
    return block, sb[cuts[:-1]], cuts, rec, Cr


@pytest.mark.parametrize("d", [1, 2, 7, 8, 9, 42, 129, 300])
@pytest.mark.parametrize("values", ["wide", "narrow", "strided"])
def test_router_kernels_give_the_bits_of_numpy(d, values):
    """The routing kernels (``kernels.groups.rotated_centroids``: the bincount sums and NumPy's
    pairwise sums of ``C R^T``, bit for bit, at every width, the halves' tree above 128 columns
    included; ``float32_exact``, ``gather_records``) give the records of the NumPy expressions."""
    from engine.kernels.groups import rotated_centroids
    from engine.kernels.search.polish import rotations
    from engine.passes.partition import plan_blocks

    rng = np.random.default_rng(d)
    n, g = 3_000, 600
    local = np.concatenate([np.arange(g), rng.integers(0, g, n - g)])
    rng.shuffle(local)
    Z = rng.normal(size=(n, d)) * rng.uniform(0.01, 100.0, d)
    R = rotations(d, 1)[-1]
    router = Router(plan_blocks(np.ascontiguousarray(Z[::3] @ R.T), np.arange(0, n, 3), n, 500), R)
    ids = rng.permutation(10 * n)[:n].astype(np.int64)
    if values == "wide":
        X = Z.copy()
        X[5, 0] = np.nan
    else:
        X = np.round(Z * 8) / 8
        X[7, 0] = np.nan
        if values == "strided":  # (a view into wider records, as a unit is read)
            X = np.hstack([X, X[:, :1]])[:, :d]
    got = router.records(Z, X, local, g, ids, 3)
    want = _records_numpy(router, Z, X, local, g, ids, 3)
    assert got[0] == want[0] and np.array_equal(got[1], want[1]) and np.array_equal(got[2], want[2])
    assert got[3].dtype == want[3].dtype == (np.float64 if values == "wide" else np.float32)
    assert np.array_equal(got[3].view(np.uint8), want[3].view(np.uint8))
    Cr, first = rotated_centroids(Z, local, np.int64(g), R)
    assert np.array_equal(Cr.view(np.int64), want[4].view(np.int64))
    assert np.array_equal(first, [np.flatnonzero(local == a)[0] for a in range(g)])
