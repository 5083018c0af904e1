"""V-MDAV and IV-MDAV by brute force (engine/kernels/mdav/brute.py) against the bucket
index and the plain references, and the paths that use them."""

import numpy as np
import pytest

import reference as R
from conftest import random_table
from engine.kernels.mdav import brute, leaf, pick
from engine.kernels.mdav import indexed as mdav

VARIANTS = [(mdav.VMDAV, 0.2), (mdav.VMDAV, 1.1), (mdav.VMDAV, 3.0), (mdav.VMDAV, 0.05),
            (mdav.IVMDAV, 1.16), (mdav.IVMDAV, 0.9), (mdav.IVMDAV, 2.0), (mdav.IVMDAV, 0.5)]


def _table(rng, t, n, d):
    kind = t % 4
    if kind == 0:
        return rng.standard_normal((n, d))
    if kind == 1:  # integer values: many exact ties, duplicate rows
        return rng.integers(0, 3, size=(n, d)).astype(np.float64)
    if kind == 2:  # few distinct rows, each repeated
        m = max(1, n // 6)
        return rng.integers(-2, 3, size=(m, d)).astype(np.float64)[rng.integers(0, m, n)]
    return R.standardize(np.round(rng.gamma(2.0, 3.0, size=(n, d))))  # census-like z-scores


@pytest.mark.parametrize("code,gamma", VARIANTS)
def test_same_labels_as_the_index(code, gamma):
    rng = np.random.default_rng(100 + code * 10 + int(gamma * 10))
    for t in range(90):
        n = int(rng.integers(1, 601)) if t % 3 else int(rng.integers(1, 40))
        d = [1, 2, 3, 5, 8, 13][t % 6]
        k = 1 + t % 6
        X = mdav.as_block(_table(rng, t, n, d))
        got = pick.small_block_labels(X, code, k, gamma)
        assert np.array_equal(got, mdav.microaggregate(X, code, k, gamma)), (t, n, d, k)


@pytest.mark.parametrize("kind", ["normal", "ints", "clustered", "constant_col"])
@pytest.mark.parametrize("code,gamma", VARIANTS[:2] + VARIANTS[4:6])
def test_same_labels_as_the_reference(kind, code, gamma):
    rng = np.random.default_rng(7)
    for n, d, k in [(2, 2, 2), (5, 1, 2), (7, 3, 3), (40, 2, 3), (97, 4, 5), (300, 6, 4), (250, 3, 1), (160, 2, 6)]:
        Z = R.standardize(random_table(rng, n, d, kind))
        want = R.vmdav(Z, k, gamma) if code == mdav.VMDAV else R.ivmdav(Z, k, gamma)
        assert np.array_equal(pick.small_block_labels(Z, code, k, gamma), want), (n, d, k)


def test_fewer_rows_than_k_and_empty():
    # as the index: V-MDAV leaves every row ungrouped (-1), IV-MDAV makes one group
    X = np.random.default_rng(0).standard_normal((2, 3))
    for code, gamma in ((mdav.VMDAV, 0.2), (mdav.IVMDAV, 1.16)):
        for Y, k in ((X, 3), (np.empty((0, 3)), 2)):
            assert np.array_equal(pick.small_block_labels(Y, code, k, gamma), mdav.microaggregate(Y, code, k, gamma))


def test_data_it_does_not_take():
    X = np.random.default_rng(1).standard_normal((30, 3))
    assert pick.small_block_labels(np.empty((9, 0)), mdav.VMDAV, 2, 0.2) is None
    assert pick.small_block_labels(X, mdav.IVMDAV, 0, 1.16) is None
    for bad in (1e100, -1e200, np.inf, np.nan):
        Y = X.copy()
        Y[4, 2] = bad
        assert pick.small_block_labels(Y, mdav.VMDAV, 3, 0.2) is None


@pytest.mark.parametrize("code,gamma", [(mdav.VMDAV, 0.2), (mdav.IVMDAV, 1.16), (mdav.VMDAV, 1.1)])
def test_leaves_equal_the_index_on_each_leaf(code, gamma):
    """``aggregate_leaves`` by brute force == the index kernel on every leaf (the previous
    ``leaf.leaves_by_index``, still the path for data brute force does not take)."""
    rng = np.random.default_rng(23 + code)
    for t in range(24):
        n = int(rng.integers(0, 3000))
        d = [1, 2, 3, 8, 9][t % 5]
        k = [1, 2, 3, 4, 5, 6][t % 6]
        X = mdav.as_block(_table(rng, t, n, d))
        size = int(rng.integers(4, 300))
        got = leaf.aggregate_leaves(X, code, k, gamma, size)
        old = leaf.leaves_by_index(X, code, k, gamma, size)
        assert np.array_equal(got, old), (t, n, d, k, size)


def test_leaves_fall_back_to_the_index():
    X = np.random.default_rng(4).standard_normal((500, 3))
    X[10, 0] = 1e120
    for code, gamma in ((mdav.VMDAV, 0.2), (mdav.IVMDAV, 1.16)):
        got = leaf.aggregate_leaves(X, code, 3, gamma, 64)
        old = leaf.leaves_by_index(mdav.as_block(X), code, 3, gamma, 64)
        assert np.array_equal(got, old)


def test_large_leaves_run_the_index(monkeypatch):
    """Leaves above LEAF_BRUTE_MAX_ROWS rows (polished runs' 32,768) run the index kernel."""
    X = np.random.default_rng(6).standard_normal((900, 3))
    want = [leaf.leaves_by_index(mdav.as_block(X), mdav.VMDAV, 3, 0.2, 300),
            leaf.leaves_by_index(mdav.as_block(X), mdav.IVMDAV, 3, 1.16, 300)]
    assert np.array_equal(leaf.aggregate_leaves(X, mdav.VMDAV, 3, 0.2, 300), want[0])  # brute force
    monkeypatch.setattr(pick, "LEAF_BRUTE_MAX_ROWS", 299)
    monkeypatch.setattr(brute, "leaves_vmdav", None)
    monkeypatch.setattr(brute, "leaves_ivmdav", None)
    assert np.array_equal(leaf.aggregate_leaves(X, mdav.VMDAV, 3, 0.2, 300), want[0])
    assert np.array_equal(leaf.aggregate_leaves(X, mdav.IVMDAV, 3, 1.16, 300), want[1])
    with pytest.raises(TypeError):  # 299 rows: one leaf of 299 rows, by brute force (None here)
        leaf.aggregate_leaves(X[:299], mdav.IVMDAV, 3, 1.16, 300)


def test_aggregate_block_runs_small_blocks_without_the_index(monkeypatch):
    """Blocks of at most BRUTE_MAX_ROWS rows never start the index (every method); the
    labels are the index's; larger blocks and data brute force does not take use it."""
    from engine.passes import aggregate

    rng = np.random.default_rng(9)
    sizes = [1, 7, 60, 777, aggregate.BRUTE_MAX_ROWS]
    blocks = [(n, _table(rng, t, n, [2, 5, 13][t % 3])) for t, n in enumerate(sizes)]
    want = {(n, code): mdav.microaggregate(X, code, 3, g) for n, X in blocks
            for code, g in ((0, 0.0), (1, 0.0), (2, 0.2), (3, 1.16))}

    def no_index(*a, **kw):
        raise AssertionError("the index was started")

    monkeypatch.setattr(aggregate._mdav, "start", no_index)
    for n, X in blocks:
        for code, g in ((0, 0.0), (1, 0.0), (2, 0.2), (3, 1.16)):
            assert np.array_equal(aggregate.aggregate_block(X, code, 3, g), want[(n, code)]), (n, code)
    monkeypatch.undo()
    X = rng.standard_normal((aggregate.BRUTE_MAX_ROWS + 1, 2))
    Y = X[:50].copy()
    Y[3, 1] = np.nan
    want = [mdav.microaggregate(X, 2, 3, 0.2), mdav.microaggregate(Y, 3, 3, 1.16)]
    started = []
    real = aggregate._mdav.start
    monkeypatch.setattr(aggregate._mdav, "start", lambda *a, **kw: started.append(1) or real(*a, **kw))
    assert np.array_equal(aggregate.aggregate_block(X, 2, 3, 0.2), want[0])
    assert np.array_equal(aggregate.aggregate_block(Y, 3, 3, 1.16), want[1])
    assert started == [1, 1]


def test_mnqia_baseline_is_exact_mdav(monkeypatch):
    """mnqia's MDAV baseline: brute force up to TABLE_BRUTE_MAX_ROWS rows, the index
    above; exact MDAV either way."""
    from engine.methods import mnqia

    rng = np.random.default_rng(12)
    X = np.round(rng.gamma(2.0, 8.0, size=(3000, 3)))
    sd = X.std(axis=0)
    Z = np.ascontiguousarray((X - X.mean(axis=0)) / sd)
    want = mdav.microaggregate(Z, mdav.MDAV, 5, 0.0)
    monkeypatch.setattr(pick, "microaggregate", None)  # not the index
    assert np.array_equal(mnqia.mdav_range_loss(X, 5)[2], want)
    monkeypatch.undo()
    monkeypatch.setattr(pick, "TABLE_BRUTE_MAX_ROWS", 100)  # the index's path
    assert np.array_equal(mnqia.mdav_range_loss(X, 5)[2], want)
    assert np.array_equal(want, R.mdav(Z, 5))
