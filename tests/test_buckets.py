"""The MDAV family's index (engine.kernels.index.buckets) against brute force, at 1 and 2
threads: float32 scans must never change an answer, ties included."""

import numpy as np
import pytest

import reference as ref
from conftest import random_table
from engine.kernels.index import buckets
from engine.kernels.mdav import indexed as mdav
from engine.kernels.mdav import leaf

KINDS = ["normal", "ties", "ints", "offset", "tiny", "mixed", "huge"]


def _data(rng, n, d, kind):
    if kind == "normal":
        return rng.normal(size=(n, d))
    if kind == "ties":  # rounding makes equal distances common
        return np.round(rng.normal(size=(n, d)), 1)
    if kind == "ints":  # duplicate rows
        return rng.integers(0, 3, size=(n, d)).astype(np.float64)
    if kind == "offset":  # far from the origin, small spread: float32 of raw values would tie
        return 1e7 + rng.normal(size=(n, d)) * 1e-3
    if kind == "tiny":  # float32 underflow territory
        return rng.normal(size=(n, d)) * 1e-30
    if kind == "mixed":  # columns of very different scales, and outliers
        X = rng.normal(size=(n, d)) * np.logspace(-6, 6, d)
        X[rng.integers(n, size=3)] *= 1e8
        return X
    X = rng.normal(size=(n, d))  # beyond 1e100: the plain float64 path
    X[0, 0] = 1e150
    return X


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n,d", [(40, 2), (700, 5), (2500, 10)])
def test_queries_match_brute_force(n, d, kind, threads):
    """farthest / knn (with and without an excluded row) / farthest_from_moving
    against brute force while rows are removed (the buckets are rebuilt on the way
    once half of them are gone); par_min 1: every farthest scan uses the threads."""
    rng = np.random.default_rng(n + d + KINDS.index(kind))
    X = np.ascontiguousarray(_data(rng, n, d, kind))
    T = buckets.build(X, np.int64(32), np.int64(threads), np.int64(1))
    A = buckets.anchor_init(T, X.mean(axis=0))
    alive = np.ones(n, bool)
    out_id = np.empty(7, np.int64)
    out_d = np.empty(7)
    steps = 0
    while alive.sum() > 0:
        live = np.flatnonzero(alive)
        q = X[rng.choice(live)] + (rng.normal(size=d) * X.std(axis=0) * 0.3 if steps % 2 else 0.0)
        dist = ref.sq_dists(X, q)
        dm = np.where(alive, dist, -1.0)
        want_far = int(np.flatnonzero(dm == dm.max())[0])
        assert buckets.farthest(T, q) == want_far, (steps, kind)
        p, A = buckets.farthest_from_moving(T, A, q)
        assert p == want_far, (steps, kind)
        for exclude in (-1, int(live[0])):
            cand = live[live != exclude]
            want = cand[np.lexsort((cand, dist[cand]))][:7]
            found = buckets.knn(T, q, np.int64(7), np.int64(exclude), out_id, out_d)
            np.testing.assert_array_equal(out_id[:found], want)
            np.testing.assert_array_equal(out_d[:found], dist[want])
        for victim in rng.choice(live, size=min(len(live), 1 + n // 60), replace=False):
            buckets.remove(T, victim)
            alive[victim] = False
        steps += 1
    assert buckets.farthest(T, X[0]) == -1


METHODS = [
    (mdav.MDAV, lambda Z, k: ref.mdav(Z, k), 0.0),
    (mdav.MDAV_SINGLE, lambda Z, k: ref.mdav_single(Z, k), 0.0),
    (mdav.VMDAV, lambda Z, k: ref.vmdav(Z, k, 0.2), 0.2),
    (mdav.IVMDAV, lambda Z, k: ref.ivmdav(Z, k, 1.16), 1.16),
]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("code,reference,gamma", METHODS)
@pytest.mark.parametrize("kind", ["normal", "ints", "clustered"])
def test_methods_match_reference_at_each_thread_count(kind, code, reference, gamma, threads):
    rng = np.random.default_rng(11)
    Z = ref.standardize(random_table(rng, 900, 6, kind))
    got = mdav.microaggregate(np.ascontiguousarray(Z), code, 4, gamma, threads=threads, par_min=1)
    np.testing.assert_array_equal(got, reference(Z, 4))


@pytest.mark.parametrize("threads", [1, 2])
def test_mdav_on_ten_normal_columns_matches_brute_force(threads):
    """The benchmark's shape (10 standard normal columns), large enough for several
    rebuilds of the buckets: the same labels as the brute-force kernel of the
    leaves (itself equal to the reference, tests/test_leaf.py), MDAV and
    MDAV-single-group."""
    X = np.random.default_rng(3).normal(size=(12_000, 10))
    for code in (mdav.MDAV, mdav.MDAV_SINGLE):
        got = mdav.microaggregate(X, code, 5, 0.0, threads=threads, par_min=1)
        np.testing.assert_array_equal(got, leaf.mdav_brute_slots(X, code, 5))


def test_plain_path_for_values_beyond_float32_reach():
    """Values beyond 1e100, NaN or no columns: every query by brute force in float64;
    finite data give the reference's labels."""
    rng = np.random.default_rng(2)
    X = rng.normal(size=(300, 3))
    X[5] = [1e150, -1e120, 3.0]
    np.testing.assert_array_equal(mdav.microaggregate(X, mdav.MDAV, 3, 0.0), ref.mdav(X, 3))
    X[7, 1] = np.nan  # not defined by the reference: it runs, every row in a group
    labels = mdav.microaggregate(X, mdav.MDAV, 3, 0.0)
    assert labels.min() == 0 and (np.bincount(labels) >= 3).all()
    np.testing.assert_array_equal(mdav.microaggregate(np.empty((9, 0)), mdav.MDAV, 2, 0.0),
                                  ref.mdav(np.empty((9, 0)), 2))
