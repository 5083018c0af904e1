"""Leaf-blocked MDAV (engine/kernels/leaf.py) against the plain references."""

import numpy as np
import pytest
from numba import njit

import reference as R
from engine.kernels import leaf, mdav

# -- the previous implementation of engine/kernels/leaf.py, frozen -------------------
# (row-major, row by row through an index array). The column-major kernels must
# give the same labels on every input: same distances to the bit, same ties.
# benchmarks/bench_leaf.py times them against these.


@njit(cache=True, nogil=True)
def _sq_old(X, i, q):
    s = 0.0
    for j in range(X.shape[1]):
        t = X[i, j] - q[j]
        s += t * t
    return s


@njit(cache=True, nogil=True)
def _farthest_old(X, rem, m, q):
    best = -1.0
    bi = -1
    for a in range(m):
        i = rem[a]
        dd = _sq_old(X, i, q)
        if dd > best or (dd == best and i < bi):
            best = dd
            bi = i
    return bi


@njit(cache=True, nogil=True)
def _take_group_old(X, rem, where, m, total, labels, group, r, k, nb, nd):
    # r and its k-1 nearest remaining rows (not r), by (distance, row index)
    q = X[r].copy()
    found = 0
    for a in range(m):
        i = rem[a]
        if i == r:
            continue
        dd = _sq_old(X, i, q)
        if found == k - 1:
            if dd > nd[found - 1] or (dd == nd[found - 1] and i > nb[found - 1]):
                continue
            p = found - 1
        else:
            p = found
            found += 1
        while p > 0 and (nd[p - 1] > dd or (nd[p - 1] == dd and nb[p - 1] > i)):
            nd[p] = nd[p - 1]
            nb[p] = nb[p - 1]
            p -= 1
        nd[p] = dd
        nb[p] = i
    m = _remove_old(X, rem, where, m, total, labels, group, r)
    for a in range(found):
        m = _remove_old(X, rem, where, m, total, labels, group, nb[a])
    return m


@njit(cache=True, nogil=True)
def _remove_old(X, rem, where, m, total, labels, group, i):
    labels[i] = group
    for j in range(X.shape[1]):
        total[j] -= X[i, j]
    a = where[i]
    last = rem[m - 1]
    rem[a] = last
    where[last] = a
    return m - 1


@njit(cache=True, nogil=True)
def _mdav_brute_old(X, method, k):
    """The previous ``leaf.mdav_brute`` (row by row through an index array)."""
    n, d = X.shape
    labels = np.full(n, -1, np.int64)
    rem = np.arange(n)
    where = np.arange(n)
    total = np.zeros(d)
    for i in range(n):
        for j in range(d):
            total[j] += X[i, j]
    nb = np.empty(max(k, 1), np.int64)
    nd = np.empty(max(k, 1))
    c = np.empty(d)
    m = n
    group = 0
    while m >= 3 * k:
        for j in range(d):
            c[j] = total[j] / m
        r = _farthest_old(X, rem, m, c)
        m = _take_group_old(X, rem, where, m, total, labels, group, r, k, nb, nd)
        group += 1
        if method == mdav.MDAV:
            s = _farthest_old(X, rem, m, X[r])
            m = _take_group_old(X, rem, where, m, total, labels, group, s, k, nb, nd)
            group += 1
    if m >= 2 * k:
        for j in range(d):
            c[j] = total[j] / m
        r = _farthest_old(X, rem, m, c)
        m = _take_group_old(X, rem, where, m, total, labels, group, r, k, nb, nd)
        group += 1
    if m > 0:
        for a in range(m):
            labels[rem[a]] = group
        group += 1
    return labels


@njit(cache=True, nogil=True)
def _less_old(X, j, a, b):
    # the order of a cut: by value in column j, then by row index (a total order)
    return X[a, j] < X[b, j] or (X[a, j] == X[b, j] and a < b)


@njit(cache=True, nogil=True)
def _select_old(X, j, order, s, e, h):
    """Rearrange ``order[s:e]`` so that ``order[s:h]`` holds the h - s smallest rows by
    (X[:, j], row index) and ``order[h:e]`` the others (quickselect, median-of-3)."""
    lo = s
    hi = e - 1
    while hi > lo:
        mid = (lo + hi) // 2
        # median of three to order[hi] as the pivot
        if _less_old(X, j, order[mid], order[lo]):
            order[mid], order[lo] = order[lo], order[mid]
        if _less_old(X, j, order[hi], order[lo]):
            order[hi], order[lo] = order[lo], order[hi]
        if _less_old(X, j, order[mid], order[hi]):
            order[mid], order[hi] = order[hi], order[mid]
        pivot = order[hi]
        store = lo
        for a in range(lo, hi):
            if _less_old(X, j, order[a], pivot):
                order[a], order[store] = order[store], order[a]
                store += 1
        order[store], order[hi] = order[hi], order[store]
        if store == h:
            return
        if store < h:
            lo = store + 1
        else:
            hi = store - 1


@njit(cache=True, nogil=True)
def _split_leaves_old(X, leaf):
    """The previous ``leaf.split_leaves``."""
    n, d = X.shape
    order = np.arange(n)
    bounds = [0]
    # explicit stack of (start, end) ranges of ``order``, processed left to right
    st_s = np.empty(128, np.int64)
    st_e = np.empty(128, np.int64)
    st_s[0] = 0
    st_e[0] = n
    sp = 1
    mu = np.empty(d)
    var = np.empty(d)
    while sp > 0:
        sp -= 1
        s = st_s[sp]
        e = st_e[sp]
        size = e - s
        if size <= leaf:
            bounds.append(e)
            continue
        # the column of largest variance (two passes, row by row)
        for j in range(d):
            mu[j] = 0.0
            var[j] = 0.0
        for a in range(s, e):
            i = order[a]
            for j in range(d):
                mu[j] += X[i, j]
        for j in range(d):
            mu[j] /= size
        for a in range(s, e):
            i = order[a]
            for j in range(d):
                t = X[i, j] - mu[j]
                var[j] += t * t
        bj = 0
        for j in range(1, d):
            if var[j] > var[bj]:
                bj = j
        h = s + size // 2
        _select_old(X, bj, order, s, e, h)
        # right half below left half on the stack, so the left is done first
        st_s[sp] = h
        st_e[sp] = e
        st_s[sp + 1] = s
        st_e[sp + 1] = h
        sp += 2
    return order, np.array(bounds, dtype=np.int64)


@njit(cache=True, nogil=True)
def _aggregate_leaves_old(X, method, k, gamma, leaf):
    """The previous ``leaf.aggregate_leaves``."""
    n = X.shape[0]
    leaf = max(leaf, 4 * k)
    order, bounds = _split_leaves_old(X, leaf)
    labels = np.empty(n, np.int64)
    next_id = 0
    for b in range(bounds.shape[0] - 1):
        idx = order[bounds[b]: bounds[b + 1]]
        idx = np.sort(idx)  # row order inside a leaf: ties break as in the whole block
        sub = np.empty((idx.shape[0], X.shape[1]))
        for a in range(idx.shape[0]):
            sub[a] = X[idx[a]]
        if method == mdav.MDAV or method == mdav.MDAV_SINGLE:
            local = _mdav_brute_old(sub, method, k)
        elif method == mdav.VMDAV:  # (``mdav.microaggregate`` now picks these in Python)
            local = mdav.microaggregate_vmdav(sub, k, gamma)
        else:
            local = mdav.microaggregate_ivmdav(sub, k, gamma)
        g = 0
        for a in range(idx.shape[0]):
            labels[idx[a]] = local[a] + next_id
            if local[a] + 1 > g:
                g = local[a] + 1
        next_id += g
    return labels


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


@pytest.mark.parametrize("method", [mdav.MDAV, mdav.MDAV_SINGLE])
def test_brute_equals_old_implementation(method):
    for t, X, k in _old_new_cases(101 + method, 600):
        got = leaf.mdav_brute(X, method, k)
        assert np.array_equal(got, _mdav_brute_old(X, method, k)), (t, X.shape, k)


def test_brute_fallback_equals_old_implementation():
    # huge, infinite or NaN values and no columns take the row-by-row path
    rng = np.random.default_rng(5)
    for method in (mdav.MDAV, mdav.MDAV_SINGLE):
        for t in range(15):
            X = rng.standard_normal((int(rng.integers(1, 60)), 3))
            X[int(rng.integers(X.shape[0])), int(rng.integers(3))] = [1e200, -1e150, np.inf, 1e100, np.nan][t % 5]
            assert np.array_equal(leaf.mdav_brute(X, method, 3), _mdav_brute_old(X, method, 3))
        assert np.array_equal(leaf.mdav_brute(np.empty((9, 0)), method, 2),
                              _mdav_brute_old(np.empty((9, 0)), method, 2))
        assert np.array_equal(leaf.mdav_brute(np.empty((0, 4)), method, 2),
                              _mdav_brute_old(np.empty((0, 4)), method, 2))


def test_split_and_aggregate_equal_old_implementation():
    rng = np.random.default_rng(17)
    for t in range(160):
        n = int(rng.integers(0, 2500))
        d = [1, 2, 3, 8, 8, 9][t % 6]
        kind = t % 4
        if kind == 0:
            X = rng.standard_normal((n, d))
        elif kind == 1:
            X = rng.integers(0, 3, size=(n, d)).astype(np.float64)
        elif kind == 2:
            X = np.round(rng.standard_normal((n, d)) * 3) / 4
        else:  # equal columns: exact variance ties, decided by the summation order
            X = np.repeat(rng.integers(0, 4, size=(n, 1)).astype(np.float64), d, axis=1)
        size = int(rng.integers(4, 300))
        order, bounds = leaf.split_leaves(X, size)
        order_old, bounds_old = _split_leaves_old(X, size)
        assert np.array_equal(order, order_old) and np.array_equal(bounds, bounds_old), t
        k = [2, 3, 5, 10][t % 4]
        for method in (mdav.MDAV, mdav.MDAV_SINGLE):
            got = leaf.aggregate_leaves(X, method, k, 0.0, size)
            assert np.array_equal(got, _aggregate_leaves_old(X, method, k, 0.0, size)), (t, method)
    X = rng.standard_normal((700, 3))
    for method, gamma in ((mdav.VMDAV, 0.2), (mdav.IVMDAV, 1.16)):
        assert np.array_equal(leaf.aggregate_leaves(X, method, 3, gamma, 50),
                              _aggregate_leaves_old(X, method, 3, gamma, 50))


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
    X[7, 1] = np.nan  # not finite: the index's plain float64 path (engine.kernels.buckets)
    assert np.array_equal(aggregate_block(X, mdav.MDAV, 3, 0.0), mdav.microaggregate(X, mdav.MDAV, 3, 0.0))
