"""Fast kernels == the plain reference, partition for partition."""

import numpy as np
import pytest

import reference as ref
from conftest import random_table
from engine.kernels.index import kdtree
from engine.kernels.mdav import indexed as mdav

METHODS = [
    (mdav.MDAV, lambda Z, k: ref.mdav(Z, k), 0.0),
    (mdav.MDAV_SINGLE, lambda Z, k: ref.mdav_single(Z, k), 0.0),
    (mdav.VMDAV, lambda Z, k: ref.vmdav(Z, k, 0.2), 0.2),
    (mdav.VMDAV, lambda Z, k: ref.vmdav(Z, k, 1.1), 1.1),
    (mdav.IVMDAV, lambda Z, k: ref.ivmdav(Z, k, 1.16), 1.16),
    (mdav.IVMDAV, lambda Z, k: ref.ivmdav(Z, k, 0.9), 0.9),
]


@pytest.mark.parametrize("kind", ["normal", "ints", "clustered", "constant_col"])
@pytest.mark.parametrize("n,d,k", [(2, 2, 2), (5, 1, 2), (7, 3, 3), (40, 2, 3), (97, 4, 5), (300, 6, 4), (600, 3, 10)])
@pytest.mark.parametrize("code,reference,gamma", METHODS)
def test_kernel_matches_reference(kind, n, d, k, code, reference, gamma):
    rng = np.random.default_rng(n * 1000 + d * 10 + k)
    Z = ref.standardize(random_table(rng, n, d, kind))
    got = mdav.microaggregate(np.ascontiguousarray(Z), code, k, gamma)
    want = reference(Z, k)
    np.testing.assert_array_equal(got, want)


def test_read_only_input():
    rng = np.random.default_rng(1)
    Z = ref.standardize(rng.normal(size=(200, 3)))
    Z.setflags(write=False)
    np.testing.assert_array_equal(mdav.microaggregate(Z, mdav.MDAV, 3, 0.0), ref.mdav(Z, 3))


def test_tree_queries_match_brute_force():
    """farthest / knn of the kd-tree (refinement, risk) against brute force while rows
    are removed (the MDAV family's index: tests/test_buckets.py)."""
    rng = np.random.default_rng(7)
    X = np.round(rng.normal(size=(700, 5)), 1)  # rounding makes ties common
    T = kdtree.build_kdtree(X, 8)
    alive = np.ones(len(X), bool)
    pos_of = np.empty(len(X), np.int64)
    pos_of[T[1]] = np.arange(len(X))
    out_pos = np.empty(6, np.int64)
    out_d = np.empty(6)
    for step in range(300):
        q = X[rng.integers(len(X))] + rng.normal(0, 0.3, 5) * (step % 2)
        d = ref.sq_dists(X, q)
        dm = np.where(alive, d, -1.0)
        want_far = int(np.flatnonzero(dm == dm.max())[0])
        assert T[1][kdtree.farthest(T, q)] == want_far
        cand = np.flatnonzero(alive)
        order = cand[np.lexsort((cand, d[cand]))][:6]
        found = kdtree.knn(T, q, 6, -1, out_pos, out_d)
        np.testing.assert_array_equal(T[1][out_pos[:found]], order)
        for victim in rng.choice(np.flatnonzero(alive), size=2, replace=False):
            kdtree.remove(T, pos_of[victim])
            alive[victim] = False


@pytest.mark.parametrize("d", [1, 3, 8, 11])
@pytest.mark.parametrize("n", [0, 5, 31, 32, 33, 1000])
def test_gather_columns_matches_fancy_indexing(n, d):
    """The write pass's gather (with its prefetch ahead) against NumPy indexing, on
    aligned and unaligned centroid tables."""
    from engine.kernels.groups import gather_columns
    from engine.frames import aligned_zeros
    rng = np.random.default_rng(n * 100 + d)
    G = 50
    aligned = aligned_zeros(G, d)
    assert aligned.ctypes.data % 64 == 0 and not aligned.any()
    aligned[:] = rng.normal(size=(G, d))
    unaligned = np.empty(G * d + 1)[1:].reshape(G, d)
    unaligned[:] = aligned
    labels = rng.integers(0, G, n).astype(np.int32)
    for table in (aligned, unaligned):
        out = np.empty((d, n))
        gather_columns(labels, table, out)
        np.testing.assert_array_equal(out, table[labels].T)


def test_groups_from_sums_compacts_into_aligned_table():
    from engine.passes.stitch import groups_from_sums
    from engine.frames import Profile
    d = 3
    prof = Profile(("a", "b", "c"), 6, np.array([2.0, 1.0, 0.5]), np.zeros(d), np.ones(d), np.zeros(d), np.ones(d))
    sx = np.arange(12, dtype=float).reshape(4, d)
    cnt = np.array([2, 0, 3, 1])
    labels = np.array([0, 0, 2, 2, 2, 3], np.int32)
    g = groups_from_sums(labels, sx.copy(), cnt, prof)
    assert g.centroid.ctypes.data % 64 == 0
    np.testing.assert_array_equal(labels, [0, 0, 1, 1, 1, 2])
    np.testing.assert_array_equal(g.sizes, [2, 3, 1])
    np.testing.assert_array_equal(g.centroid, sx[[0, 2, 3]] / cnt[[0, 2, 3], None] * prof.scale)
