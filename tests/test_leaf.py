"""Leaf-blocked MDAV (engine/kernels/leaf.py) against the plain references."""

import numpy as np
import pytest

import reference as R
from engine.kernels import leaf, mdav


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
        order, bounds = leaf.split_leaves(X, size)
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
    order, bounds = leaf.split_leaves(X, 64)
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
