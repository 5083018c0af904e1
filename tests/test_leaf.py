"""Leaf-blocked MDAV (engine/kernels/mdav/leaf.py) against the plain references."""

import numpy as np
import pytest
import reference as R
from engine.kernels.index import split
from engine.kernels.mdav import indexed as mdav
from engine.kernels.mdav import leaf


def _data(rng, n, d, ties):
    if ties:
        return rng.integers(0, 3, size=(n, d)).astype(np.float64)
    return rng.standard_normal((n, d))


@pytest.mark.parametrize("method", [mdav.MDAV, mdav.MDAV_SINGLE])
def test_brute_equals_kdtree_and_reference(method):
    rng = np.random.default_rng(7)
    for t in range(120):
        n, d, k = int(rng.integers(1, 200)), int(rng.integers(1, 5)), int(rng.integers(1, 7))
        X = _data(rng, n, d, t % 2 == 1)
        got = leaf.mdav_brute(X, method, k)
        assert np.array_equal(got, mdav.microaggregate(X, method, k, 0.0)), (t, n, d, k)
        if t < 20:
            ref = R.mdav(X, k) if method == mdav.MDAV else R.mdav_single(X, k)
            assert np.array_equal(got, ref), (t, n, d, k)


def test_split_leaves_equals_reference():
    rng = np.random.default_rng(3)
    for t in range(80):
        n, d, size = int(rng.integers(1, 1500)), int(rng.integers(1, 5)), int(rng.integers(4, 200))
        # distinct column scales: no exact variance ties, whose rounding would depend on summation order
        X = _data(rng, n, d, t % 2 == 1) * (1.0 + 0.37 * np.arange(d))
        order, bounds = split.split_leaves(X, size)
        got = [np.sort(order[bounds[i]: bounds[i + 1]]) for i in range(bounds.shape[0] - 1)]
        ref = R.split_leaves(X, size)
        assert len(got) == len(ref)
        for a, b in zip(got, ref):
            assert np.array_equal(a, b)
        assert all(g.shape[0] <= size for g in got)
        assert np.array_equal(np.sort(order), np.arange(n))


@pytest.mark.parametrize("method", [mdav.MDAV, mdav.MDAV_SINGLE, mdav.VMDAV, mdav.IVMDAV])
def test_aggregate_leaves_groups(method):
    rng = np.random.default_rng(11)
    X = _data(rng, 3000, 4, False)
    k = 4
    gamma = {mdav.VMDAV: 0.2, mdav.IVMDAV: 1.16}.get(method, 0.0)
    labels = leaf.aggregate_leaves(X, method, k, gamma, 64)
    sizes = np.bincount(labels)
    assert labels.shape == (3000,) and sizes.sum() == 3000
    assert sizes.min() >= k
    assert sizes.max() <= (3 * k - 2 if method == mdav.VMDAV else 2 * k - 1)
    # every leaf runs the plain method: the same labels, leaf by leaf
    order, bounds = split.split_leaves(X, 64)
    next_id = 0
    for i in range(bounds.shape[0] - 1):
        idx = np.sort(order[bounds[i]: bounds[i + 1]])
        local = mdav.microaggregate(np.ascontiguousarray(X[idx]), method, k, gamma)
        assert np.array_equal(labels[idx], local + next_id)
        next_id += local.max() + 1


def test_leaf_smaller_than_4k_is_raised():
    X = np.random.default_rng(0).standard_normal((500, 3))
    labels = leaf.aggregate_leaves(X, mdav.MDAV, 10, 0.0, 8)  # leaves of 40 rows, not 8
    assert np.bincount(labels).min() >= 10



def _old_new_cases(seed, count):
    """(X, k) pairs: continuous data, integer data with many exact ties, duplicated
    rows, a constant block; n from 1 to 300, d in {1, 2, 8} and a few others."""
    rng = np.random.default_rng(seed)
    ks = [2, 3, 5, 10, 1]
    ds = [1, 2, 8, 8, 3, 4, 5, 9, 12]
    for t in range(count):
        n = int(rng.integers(1, 301))
        d = ds[t % len(ds)]
        k = ks[t % len(ks)]
        kind = t % 5
        if kind == 0:
            X = rng.standard_normal((n, d))
        elif kind == 1:
            X = rng.integers(0, 3, size=(n, d)).astype(np.float64)
        elif kind == 2:  # few distinct rows, each repeated
            X = rng.integers(-2, 3, size=(max(1, n // 7), d)).astype(np.float64)[rng.integers(0, max(1, n // 7), n)]
        elif kind == 3:  # standardized integer-like columns (census-like ties)
            X = np.round(rng.gamma(2.0, 3.0, size=(n, d)))
            X = (X - X.mean(axis=0)) / (X.std(axis=0) + 1.0)
        else:
            X = np.full((n, d), 0.5) if t % 10 == 4 else rng.standard_normal((n, d)) * 1e-3
        yield t, np.ascontiguousarray(X), k


def naive_leaves(X, method, k, gamma, size):
    """The naive twin of ``leaf.aggregate_leaves``: the plain median split
    (``reference.split_leaves``, leaves of at least 4k rows) and the plain method on each
    leaf, left to right, its groups numbered after the previous leaf's."""
    plain = {mdav.MDAV: lambda Y: R.mdav(Y, k), mdav.MDAV_SINGLE: lambda Y: R.mdav_single(Y, k),
             mdav.VMDAV: lambda Y: R.vmdav(Y, k, gamma), mdav.IVMDAV: lambda Y: R.ivmdav(Y, k, gamma)}[method]
    labels, first = np.empty(X.shape[0], np.int64), 0
    for idx in R.split_leaves(X, max(size, 4 * k)):
        if idx.shape[0]:
            local = plain(np.ascontiguousarray(X[idx]))
            labels[idx] = local + first
            first += int(local.max()) + 1
    return labels


@pytest.mark.parametrize("method", [mdav.MDAV, mdav.MDAV_SINGLE])
def test_brute_equals_naive_twin(method):
    for t, X, k in _old_new_cases(101 + method, 600):
        naive = R.mdav(X, k) if method == mdav.MDAV else R.mdav_single(X, k)
        assert np.array_equal(leaf.mdav_brute(X, method, k), naive), (t, X.shape, k)


def test_brute_fallback_equals_naive_twin():
    """Huge values (squares overflow: the plain row-by-row path) and no columns: the naive
    twin's labels. (Infinite and NaN values define no distance; the engine's standardized
    blocks never hold them: ``passes.profile`` refuses them first.)"""
    rng = np.random.default_rng(5)
    for method in (mdav.MDAV, mdav.MDAV_SINGLE):
        naive = R.mdav if method == mdav.MDAV else R.mdav_single
        for t in range(15):
            X = rng.standard_normal((int(rng.integers(1, 60)), 3))
            X[int(rng.integers(X.shape[0])), int(rng.integers(3))] = [1e200, -1e150, 1e100, -1e300, 1e160][t % 5]
            with np.errstate(over="ignore", invalid="ignore"):
                assert np.array_equal(leaf.mdav_brute(X, method, 3), naive(X, 3)), t
        assert np.array_equal(leaf.mdav_brute(np.empty((9, 0)), method, 2), naive(np.empty((9, 0)), 2))
        assert leaf.mdav_brute(np.empty((0, 4)), method, 2).shape == (0,)


def test_split_and_aggregate_equal_naive_twin():
    """Column scales distinct (no exact variance ties, whose rounding depends on the
    summation order): the leaves and the labels of the naive twin."""
    rng = np.random.default_rng(17)
    for t in range(120):
        n = int(rng.integers(1, 2500))
        d = [1, 2, 3, 8, 8, 9][t % 6]
        kind = t % 3
        if kind == 0:
            X = rng.standard_normal((n, d))
        elif kind == 1:
            X = rng.integers(0, 3, size=(n, d)).astype(np.float64)
        else:
            X = np.round(rng.standard_normal((n, d)) * 3) / 4
        X = np.ascontiguousarray(X * (1.0 + 0.37 * np.arange(d)))
        size, k = int(rng.integers(4, 300)), [2, 3, 5, 10][t % 4]
        for method in (mdav.MDAV, mdav.MDAV_SINGLE):
            assert np.array_equal(leaf.aggregate_leaves(X, method, k, 0.0, size),
                                  naive_leaves(X, method, k, 0.0, size)), (t, method)
    X = rng.standard_normal((700, 3))
    for method, gamma in ((mdav.VMDAV, 0.2), (mdav.IVMDAV, 1.16)):
        assert np.array_equal(leaf.aggregate_leaves(X, method, 3, gamma, 50), naive_leaves(X, method, 3, gamma, 50))


def test_aggregate_block_small_blocks_by_brute_force_as_by_kdtree():
    """``aggregate_block`` runs MDAV / MDAV-single-group on blocks of at most
    ``BRUTE_MAX_ROWS`` rows by ``leaf.mdav_brute_slots`` (compiled already by a
    streamed run): the same labels as the kd-tree kernels, which it skips."""
    from engine.passes.aggregate import BRUTE_MAX_ROWS, aggregate_block

    rng = np.random.default_rng(5)
    sizes = [0, 1, 2, 5, 9, 40, 333, BRUTE_MAX_ROWS]
    for t, n in enumerate(sizes):
        d = [1, 3, 8, 13][t % 4]
        X = _data(rng, n, d, ties=t % 2 == 1)
        for method in (mdav.MDAV, mdav.MDAV_SINGLE):
            for k in (1, 2, 3, 7):
                assert np.array_equal(aggregate_block(X, method, k, 0.0), mdav.microaggregate(X, method, k, 0.0)), \
                    (n, d, method, k)
    X = rng.standard_normal((50, 3))
    X[7, 1] = np.nan  # not finite: the index's plain float64 path (engine.kernels.index.buckets)
    assert np.array_equal(aggregate_block(X, mdav.MDAV, 3, 0.0), mdav.microaggregate(X, mdav.MDAV, 3, 0.0))
