"""Polish with the exact mismatch distance on the codes of nominal QIs
(engine/kernels/search/coded.py), against one-hot columns (tests/reference_coded.py)."""

import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.kernels.mdav.leaf import aggregate_leaves
from engine.kernels.search.coded import (best_op_coded, centroid_d2, code_counts, coded_proj, coded_sse,
                                         cross_counts, polish_coded, polish_coded_seams, scaled_weights)
from engine.kernels.search.polish import polish, polish_seams, rotations
from reference_coded import centroid_dist2, coded_gap, coded_objective, onehot
from reference_refine import best_op, sse

KINDS = ("one", "few", "wide", "many")  # 1 category; 4; a few of 100,000 possible codes; about n/3


def _codes(rng, kind, n):
    if kind == "one":
        return np.zeros(n, np.int64)
    if kind == "few":
        return rng.integers(0, 4, n)
    if kind == "wide":
        return rng.choice(rng.integers(0, 100_000, 6), n)
    return rng.integers(0, max(2, n // 3), n)


def _inputs(seed, n, ndense, kinds):
    """Dense columns (with ties), the codes ``K``, their weights and ``Z``: the dense
    columns then 3 random embedding columns per coded QI (they only pick candidates)."""
    rng = np.random.default_rng(seed)
    dense = np.where(rng.random((n, ndense)) < 0.3, rng.integers(-2, 3, (n, ndense)), rng.normal(size=(n, ndense)))
    K = np.zeros((n, len(kinds)), np.int64)
    for t, kind in enumerate(kinds):
        K[:, t] = _codes(rng, kind, n)
    w = rng.uniform(0.5, 2.0, len(kinds))
    emb = [np.sqrt(w[t] / 2) * rng.normal(size=(int(K[:, t].max()) + 1, 3))[K[:, t]] for t in range(len(kinds))]
    Z = np.ascontiguousarray(np.hstack([dense] + emb))
    return Z, K, w


def _start(Z, k):
    return aggregate_leaves(Z, 0, k, 0.0, 4 * k)


def _layout(Z, ndense, K, labels, k):
    """The slot layout ``polish_coded`` searches (built here in plain NumPy)."""
    G = int(labels.max()) + 1
    counts = np.bincount(labels, minlength=G).astype(np.int64)
    cap = max(2 * k - 1, int(counts.max()))
    P = np.zeros((G * cap, ndense))
    PK = np.zeros((G * cap, K.shape[1]), np.int64)
    mu = np.zeros((G, ndense))
    for g in range(G):
        rows = np.flatnonzero(labels == g)
        P[g * cap: g * cap + rows.size] = Z[rows, :ndense]
        PK[g * cap: g * cap + rows.size] = K[rows]
        mu[g] = Z[rows, :ndense].sum(axis=0) * (1.0 / rows.size)
    return P, PK, counts, mu, cap, [np.flatnonzero(labels == g) for g in range(G)]


@pytest.mark.parametrize("seed", range(6))
def test_coded_distances_are_the_one_hot_distances(seed):
    """Row to centroid, the swap projection, row to row and the SSE equal the Euclidean
    values of the scaled one-hot columns (relative 1e-9)."""
    rng = np.random.default_rng(100 + seed)
    a, b = int(rng.integers(1, 10)), int(rng.integers(1, 10))
    n = a + b
    Z, K, w = _inputs(seed, n, 2, KINDS)
    h = 0.5 * w
    X = onehot(Z, 0, K, w)
    cap = max(a, b)
    PK = np.zeros((2 * cap, K.shape[1]), np.int64)
    PK[:a], PK[cap: cap + b] = K[:a], K[a:]
    rA, rB = np.arange(a), np.arange(a, n)
    SC = np.zeros((2 * cap, K.shape[1]), np.int64)
    S = np.zeros((2, K.shape[1]), np.int64)
    cAB, cBA = np.zeros((2, cap, K.shape[1]), np.int64)
    mm = np.zeros((cap, cap))
    code_counts(PK, 0, a, SC, S[0])
    code_counts(PK, cap, b, SC, S[1])
    cross_counts(PK, 0, a, cap, b, w, cAB, cBA, mm)
    hs = np.zeros((4, K.shape[1]))
    scaled_weights(h, a, hs, 0, 2)
    scaled_weights(h, b, hs, 1, 3)
    muA, muB = X[rA].mean(axis=0), X[rB].mean(axis=0)
    close = dict(rtol=1e-9, atol=1e-12)
    for p in range(a):
        assert np.isclose(centroid_d2(SC, p, S, 0, a, hs, 0), centroid_dist2(X, rA, X[p]), **close)
        assert np.isclose(centroid_d2(cAB, p, S, 1, b, hs, 1), centroid_dist2(X, rB, X[p]), **close)
        assert np.isclose(coded_proj(cAB, p, SC, p, hs), X[p] @ (muB - muA), **close)
        for u in range(b):
            assert np.isclose(mm[p, u], ((X[p] - X[a + u]) ** 2).sum(), **close)
    for u in range(b):
        assert np.isclose(centroid_d2(SC, cap + u, S, 1, b, hs, 1), centroid_dist2(X, rB, X[a + u]), **close)
        assert np.isclose(centroid_d2(cBA, u, S, 0, a, hs, 0), centroid_dist2(X, rA, X[a + u]), **close)
        assert np.isclose(coded_proj(SC, cap + u, cBA, u, hs), X[a + u] @ (muB - muA), **close)
    labels = rng.integers(0, 3, n)
    labels[:3] = [0, 1, 2]
    for ndense in (0, 2):
        assert np.isclose(coded_sse(Z, ndense, K, w, labels, 3), coded_objective(Z, ndense, K, w, labels), **close)


@pytest.mark.parametrize("seed,k,kinds", [(0, 2, KINDS), (1, 3, ("wide", "few")), (2, 4, ("many",)),
                                          (3, 5, ("one", "many")), (4, 2, ())])
def test_best_operation_is_the_reference_best(seed, k, kinds):
    """The best move/swap of each group (every group near) lowers the one-hot SSE by what
    the reference finds recomputing it from scratch for every move and swap."""
    Z, K, w = _inputs(seed, 8 * k, 2, kinds)
    labels = _start(Z, k)
    G = int(labels.max()) + 1
    P, PK, counts, mu, cap, _ = _layout(Z, 2, K, labels, k)
    X = onehot(Z, 2, K, w)
    q = K.shape[1]
    SC, SS = np.zeros((PK.shape[0], q), np.int64), np.zeros((G, q), np.int64)
    for g in range(G):
        code_counts(PK, g * cap, counts[g], SC, SS[g])
    near = np.array([[h for h in range(G) if h != g] for g in range(G)], np.int64)
    f, cx, mm, df = np.zeros((5, cap)), np.zeros((2, cap, q), np.int64), np.zeros((cap, cap)), np.zeros(2)
    scale = max(1.0, sse(X, labels))
    for A in range(G):
        dl, kind, p, u, B = best_op_coded(P, PK, SC, SS, A, near, counts, mu, cap, k, 2 * k - 1, 0.5 * w, w, np.zeros((4, q)), *f, cx[0],
                                          cx[1], mm, df, 1e-12)
        ref = best_op(X, labels, A, near[A], k, 2 * k - 1)
        assert (kind == 0) == (ref > -1e-9 * scale)
        if kind:
            assert abs(dl - ref) <= 1e-9 * scale


def _check_polished(Z, ndense, K, w, k, R):
    lab = _start(Z, k)
    G = int(lab.max()) + 1
    before = coded_objective(Z, ndense, K, w, lab)
    out = lab.copy()
    rounds, _ = polish_coded(Z, ndense, K, w, out, k, 1000, max(G - 1, 1), R, np.zeros(1, np.int64))
    assert rounds < 1000
    sizes = np.bincount(out, minlength=G)
    assert sizes.shape[0] == G and sizes.min() >= k and sizes.max() <= 2 * k - 1 and sizes.sum() == Z.shape[0]
    after = coded_objective(Z, ndense, K, w, out)
    assert after <= before + 1e-9 * max(1.0, before)
    tol = 1e-9 * max(1.0, before) + 1e-12 * Z.size
    assert coded_gap(Z, ndense, K, w, out, k) >= -tol
    return before, after


@pytest.mark.parametrize("seed,k,ndense,kinds,windows", [
    (0, 2, 2, KINDS, True), (1, 3, 1, ("wide", "one"), False), (2, 4, 0, ("many", "few"), True),
    (3, 5, 2, ("few",), False), (4, 2, 3, (), True), (5, 3, 0, ("wide",), False)])
def test_polish_coded_is_a_local_optimum_of_the_one_hot_objective(seed, k, ndense, kinds, windows):
    """With every group near every other and rounds left over: no move or swap lowers the
    one-hot SSE (reference, from scratch), sizes within k..2k-1, no group lost or added."""
    Z, K, w = _inputs(seed, 7 * k + seed, ndense, kinds)
    R = rotations(Z.shape[1], 2) if windows else np.empty((0, 0, 0))
    _check_polished(Z, ndense, K, w, k, R)


def test_polish_coded_lowers_the_one_hot_sse_more_than_polish_on_the_embedding():
    """On a QI of many categories the exact distance finds groups of matching codes that the
    embedding's distance (polish on all columns) misses."""
    Z, K, w = _inputs(7, 36, 1, ("many", "wide"))
    lab = _start(Z, 3)
    G = int(lab.max()) + 1
    R = np.empty((0, 0, 0))
    a, b = lab.copy(), lab.copy()
    polish_coded(Z, 1, K, w, a, 3, 1000, G - 1, R, np.zeros(1, np.int64))
    polish(Z, b, 3, 1000, G - 1, R, np.zeros(1, np.int64))
    assert coded_objective(Z, 1, K, w, a) < coded_objective(Z, 1, K, w, b)


def test_polish_coded_never_rises_and_is_deterministic_across_threads():
    Z, K, w = _inputs(11, 3000, 3, ("many", "wide", "few"))
    lab = _start(Z, 4)
    R = rotations(Z.shape[1], 3)
    prev = coded_objective(Z, 3, K, w, lab)
    for rounds in (1, 2, 4):
        out = lab.copy()
        polish_coded(Z, 3, K, w, out, 4, rounds, 8, R, np.zeros(1, np.int64))
        now = coded_objective(Z, 3, K, w, out)
        assert now <= prev + 1e-9 * prev
        prev = now
    assert prev < 0.9 * coded_objective(Z, 3, K, w, lab)
    outs, res = [lab.copy() for _ in range(3)], [None] * 3

    def run(i):
        res[i] = polish_coded(Z, 3, K, w, outs[i], 4, 6, 8, R, np.zeros(1, np.int64), 0.001, 1, 4)

    run(0)
    threads = [threading.Thread(target=run, args=(i,)) for i in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert res[0] == res[1] == res[2]
    assert np.array_equal(outs[0], outs[1]) and np.array_equal(outs[0], outs[2])


@pytest.mark.parametrize("seed,k,windows,min_gain", [(0, 3, True, 0.0), (1, 5, True, 0.01), (2, 2, False, 0.0),
                                                       (3, 4, True, 0.002)])
def test_without_coded_columns_it_is_polish(seed, k, windows, min_gain):
    """q = 0 and ndense = d: the labels, rounds and operations of ``polish.polish``."""
    rng = np.random.default_rng(seed)
    Z = rng.normal(size=(2500, 5))
    Z[:, 0] = np.round(Z[:, 0])
    lab = _start(Z, k)
    R = rotations(5, 3) if windows else np.empty((0, 0, 0))
    a, b = lab.copy(), lab.copy()
    ra = polish(Z, a, k, 20, 8, R, np.zeros(1, np.int64), min_gain, 2, 6)
    rb = polish_coded(Z, 5, np.zeros((2500, 0), np.int64), np.zeros(0), b, k, 20, 8, R, np.zeros(1, np.int64),
                      min_gain, 2, 6)
    assert ra == rb and ra[0] > 1
    assert np.array_equal(a, b)


def test_stop_returns_a_valid_partition():
    Z, K, w = _inputs(5, 400, 2, ("many",))
    lab = _start(Z, 3)
    out = lab.copy()
    assert polish_coded(Z, 2, K, w, out, 3, 10, 6, rotations(Z.shape[1], 3), np.ones(1, np.int64)) == (1, 0)
    assert np.array_equal(out, lab)


def test_mismatched_codes_are_refused():
    Z, K, w = _inputs(5, 40, 2, ("many",))
    with pytest.raises(ValueError, match="codes"):
        polish_coded(Z, 2, K[:-1], w, _start(Z, 3), 3, 1, 6, np.empty((0, 0, 0)), np.zeros(1, np.int64))


def test_only_the_equality_of_codes_counts():
    """Codes renamed one to one (here spread over 0..10^9) give the same labels: no table
    by category, so a QI of 100,000 categories costs what one of a few does."""
    Z, K, w = _inputs(9, 2000, 2, ("many", "wide"))
    lab = _start(Z, 3)
    R = rotations(Z.shape[1], 3)
    a, b = lab.copy(), lab.copy()
    ra = polish_coded(Z, 2, K, w, a, 3, 4, 6, R, np.zeros(1, np.int64))
    rb = polish_coded(Z, 2, K * 9973 + 123_456_789, w, b, 3, 4, 6, R, np.zeros(1, np.int64))
    assert ra == rb and ra[1] > 0 and np.array_equal(a, b)


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10**6), st.integers(2, 4), st.integers(0, 3),
       st.lists(st.sampled_from(KINDS), max_size=3), st.booleans())
def test_polish_coded_local_optimum_on_random_inputs(seed, k, ndense, kinds, windows):
    """The local-optimum check above on many random shapes (sizes, dense columns, coded QIs)."""
    n = 2 * k + seed % (6 * k)
    if ndense + len(kinds) == 0:
        return
    Z, K, w = _inputs(seed, n, ndense, tuple(kinds))
    R = rotations(Z.shape[1], 2) if windows else np.empty((0, 0, 0))
    _check_polished(Z, ndense, K, w, k, R)


def test_seams_without_coded_columns_is_polish_seams():
    """q = 0 and ndense = d: ``polish_coded_seams`` gives ``polish.polish_seams``'s labels
    (parts: the groups of two halves of the table, each polished on its own first)."""
    rng = np.random.default_rng(4)
    Z = rng.normal(size=(3000, 4))
    half = Z[:, 0] > 0
    lab = np.empty(3000, np.int64)
    lo = _start(np.ascontiguousarray(Z[~half]), 3)
    lab[~half], lab[half] = lo, _start(np.ascontiguousarray(Z[half]), 3) + lo.max() + 1
    G = int(lab.max()) + 1
    part = (np.arange(G) > lo.max()).astype(np.int64)
    R = rotations(4, 3)
    a, b = lab.copy(), lab.copy()
    ra = polish_seams(Z, a, 3, 8, 8, part, R, np.zeros(1, np.int64), 0.001)
    rb = polish_coded_seams(Z, 4, np.zeros((3000, 0), np.int64), np.zeros(0), b, 3, 8, 8, part, R,
                            np.zeros(1, np.int64), 0.001)
    assert ra == rb and ra[1] > 0 and np.array_equal(a, b)


def test_seams_with_codes_visit_only_groups_across_parts():
    """One part: no seam, nothing moves; two parts: the one-hot SSE does not rise."""
    Z, K, w = _inputs(12, 2000, 2, ("many", "few"))
    lab = _start(Z, 3)
    G = int(lab.max()) + 1
    R = rotations(Z.shape[1], 3)
    one = lab.copy()
    polish_coded(Z, 2, K, w, one, 3, 64, 8, R, np.zeros(1, np.int64))
    same = one.copy()
    assert polish_coded_seams(Z, 2, K, w, same, 3, 64, 8, np.zeros(G, np.int64), R, np.zeros(1, np.int64))[1] == 0
    assert np.array_equal(same, one)
    halves = one.copy()
    polish_coded_seams(Z, 2, K, w, halves, 3, 64, 8, (np.arange(G) >= G // 2).astype(np.int64), R,
                       np.zeros(1, np.int64))
    assert coded_objective(Z, 2, K, w, halves) <= coded_objective(Z, 2, K, w, one) * (1 + 1e-12)
