"""Polish (engine/kernels/search/polish.py) and the streamed path that uses it by default."""

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import engine
from engine.kernels.mdav.leaf import aggregate_leaves
from engine.kernels.search.polish import polish, polish_seams, rotations
from reference_polish import local_optimum_gap, sse


def _start(Z, k, leaf):
    return aggregate_leaves(np.ascontiguousarray(Z), 0, k, 0.0, leaf)


@st.composite
def partitions(draw):
    n = draw(st.integers(8, 70))
    d = draw(st.integers(1, 4))
    k = draw(st.integers(2, 4))
    vals = draw(st.lists(st.lists(st.integers(-4, 4) | st.floats(-50, 50, allow_nan=False, allow_infinity=False),
                                  min_size=d, max_size=d), min_size=n, max_size=n))
    return np.array(vals, dtype=np.float64), k


@pytest.mark.slow
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(partitions(), st.booleans())
def test_polish_is_a_local_optimum_with_sizes_kept(part, windows):
    """With every group near every other (L >= G - 1) and rounds left over, polish ends at a
    local optimum of all moves and swaps (SSE recomputed from scratch by the reference),
    never above the start, groups within k..2k-1, none lost or added."""
    Z, k = part
    if Z.shape[0] < 2 * k:
        return
    lab = _start(Z, k, 4 * k)
    G = int(lab.max()) + 1
    before = sse(Z, lab)
    R = rotations(Z.shape[1], 2) if windows else np.empty((0, 0, 0))
    out = lab.copy()
    rounds, _ = polish(Z, out, k, 1000, max(G - 1, 1), R, np.zeros(1, np.int64))
    assert rounds < 1000
    sizes = np.bincount(out, minlength=G)
    assert sizes.shape[0] == G and sizes.min() >= k and sizes.max() <= 2 * k - 1
    assert sse(Z, out) <= before + 1e-9 * max(1.0, before)
    tol = 1e-9 * max(1.0, before) + 1e-12 * Z.size
    assert local_optimum_gap(Z, out, k, max(G - 1, 1)) >= -tol


def test_polish_lowers_loss_and_is_deterministic():
    rng = np.random.default_rng(3)
    Z = rng.normal(size=(3000, 5))
    lab = _start(Z, 4, 256)
    a, b = lab.copy(), lab.copy()
    R = rotations(5, 3)
    ra = polish(Z, a, 4, 32, 16, R, np.zeros(1, np.int64))
    rb = polish(Z, b, 4, 32, 16, R, np.zeros(1, np.int64))
    assert ra == rb and np.array_equal(a, b)
    assert sse(Z, a) < 0.9 * sse(Z, lab)


def test_polish_stops_at_a_small_gain():
    """``min_gain``: the rounds stop at the first whose SSE gain is below that fraction of
    the SSE before it, along the same path as a run capped at that many rounds."""
    rng = np.random.default_rng(6)
    Z = rng.normal(size=(4000, 4))
    lab = _start(Z, 3, 256)
    R = rotations(4, 3)
    full = lab.copy()
    r_full, _ = polish(Z, full, 3, 64, 12, R, np.zeros(1, np.int64))
    g = 0.01
    out = lab.copy()
    r, _ = polish(Z, out, 3, 64, 12, R, np.zeros(1, np.int64), min_gain=g)
    assert 2 <= r < r_full
    capped = lab.copy()
    polish(Z, capped, 3, r, 12, R, np.zeros(1, np.int64))
    assert np.array_equal(out, capped)
    path = [sse(Z, lab)]
    for rounds in (r - 1, r):
        x = lab.copy()
        polish(Z, x, 3, rounds, 12, R, np.zeros(1, np.int64))
        path.append(sse(Z, x))
    if r == 2:
        path.insert(1, path[0])
    before, prev, last = path[-3], path[-2], path[-1]
    assert prev - last < g * prev * (1 + 1e-9)
    if r > 2:
        assert before - prev >= g * before * (1 - 1e-9)
    one = lab.copy()
    assert polish(Z, one, 3, 64, 12, R, np.zeros(1, np.int64), min_gain=1.0)[0] == 1


def test_polish_leaf_size_by_k():
    """Polished leaves shrink as k grows (powers of two, never below the unpolished leaf),
    and a streamed run uses the leaf its settings name: polished, ``polish_leaf_size(k)``;
    unpolished (``polish_rounds=0``), the fast path's ``DEFAULT_LEAF_SIZE``."""
    from engine.tuning import DEFAULT_LEAF_SIZE, polish_leaf_size

    sizes = [polish_leaf_size(k) for k in range(2, 40)]
    assert all(a >= b for a, b in zip(sizes, sizes[1:])) and sizes[0] > sizes[-1]
    assert all(s & (s - 1) == 0 and s > DEFAULT_LEAF_SIZE for s in sizes)
    df = pl.DataFrame({"a": np.random.default_rng(0).normal(size=3000)})
    for k in (3, 5):
        polished = engine.microaggregate(df, qi=["a"], k=k, block_size=1000).report
        assert polished.leaf_size == polish_leaf_size(k) and polished.polish
    plain = engine.microaggregate(df, qi=["a"], k=5, block_size=1000, polish_rounds=0).report
    assert plain.leaf_size == DEFAULT_LEAF_SIZE and not plain.polish


def test_polish_stops_when_asked():
    rng = np.random.default_rng(5)
    Z = rng.normal(size=(3000, 4))
    lab = _start(Z, 3, 256)
    out = lab.copy()
    rounds, ops = polish(Z, out, 3, 32, 12, rotations(4, 3), np.ones(1, np.int64))
    assert rounds == 1 and ops == 0 and np.array_equal(out, lab)


def test_polish_seams_visits_only_groups_across_parts():
    rng = np.random.default_rng(4)
    Z = rng.normal(size=(2000, 3))
    lab = _start(Z, 3, 256)
    G = int(lab.max()) + 1
    R = rotations(3, 3)
    one = lab.copy()
    polish(Z, one, 3, 64, 12, R, np.zeros(1, np.int64))  # a local optimum for its lists
    same = one.copy()
    polish_seams(Z, same, 3, 64, 12, np.zeros(G, np.int64), R, np.zeros(1, np.int64))  # one part: no seam, nothing to do
    assert np.array_equal(same, one)
    halves = one.copy()
    part = (np.arange(G) >= G // 2).astype(np.int64)
    polish_seams(Z, halves, 3, 64, 12, part, R, np.zeros(1, np.int64))
    assert sse(Z, halves) <= sse(Z, one) + 1e-9


@pytest.fixture(scope="module")
def table():
    from engine.synth import NUMERIC_QI, census_like
    return census_like(6_000, seed=9).select(list(NUMERIC_QI))


@pytest.mark.slow
@pytest.mark.parametrize("method", ["mdav", "mdav-single", "ivmdav"])
def test_streamed_polish_guarantees_and_gain(table, method, monkeypatch):
    """Blocks of 1,000 rows, units of 2,000 (so seams exist): every row in one group,
    groups k..2k-1, loss below the unpolished run's and exact MDAV's; identical for any
    thread count and chunk size."""
    import engine.methods.centroids as co
    monkeypatch.setattr(co, "POLISH_UNIT_ROWS", 2_000)
    qi = table.columns
    k = 3
    runs = [engine.microaggregate(table, qi=qi, k=k, method=method, block_size=1_000, threads=t, chunk_rows=c)
            for t, c in ((1, 100_000), (2, 777), (2, 100_000))]
    for r in runs[1:]:
        assert np.array_equal(r.labels, runs[0].labels)
        assert r.table.equals(runs[0].table)
    rep = runs[0].report
    assert rep.polish is not None and rep.polish["seam_rounds"] >= 1
    sizes = np.bincount(runs[0].labels)
    assert sizes.min() >= k and sizes.max() <= 2 * k - 1 and sizes.sum() == table.height
    plain = engine.microaggregate(table, qi=qi, k=k, method=method, block_size=1_000, polish_rounds=0)
    assert plain.report.polish is None and plain.report.leaf_size == 256
    assert rep.information_loss_percent < plain.report.information_loss_percent
    if method == "mdav":
        exact = engine.microaggregate(table, qi=qi, k=k, method=method, block_size=10_000)
        assert exact.report.polish is None and exact.report.leaf_size is None
        assert rep.information_loss_percent <= exact.report.information_loss_percent


def test_polish_rounds_setting(table):
    with pytest.raises(engine.EngineError, match="polish_rounds must be"):
        engine.microaggregate(table, qi=table.columns, k=3, polish_rounds=-1)
    r = engine.microaggregate(table, qi=table.columns, k=3, block_size=1_000, polish_rounds=2)
    assert r.report.polish["rounds"] == 2


def test_single_block_is_exact_mdav_without_polish(table):
    r = engine.microaggregate(table, qi=table.columns, k=3)
    assert r.report.polish is None and r.report.blocks == 1
