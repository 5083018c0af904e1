"""The previous implementation of ``engine/kernels/mdav/leaf.py``, frozen (row-major, row by
row through an index array). The column-major kernels must give the same labels on
every input: same distances to the bit, same ties (``tests/test_leaf.py``);
``benchmarks/bench_leaf.py`` times the current kernels against these; the tests compare them with their naive twins (``tests/reference.py``)."""

import numpy as np
from numba import njit

from engine.kernels.index.buckets import PAR_MIN, anchor_init, build
from engine.kernels.mdav import indexed as mdav


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
def _index_old(X, method, k, gamma):
    """V-MDAV or IV-MDAV on the bucket index, one thread, run to completion (the
    previous ``mdav.microaggregate_vmdav`` / ``microaggregate_ivmdav``)."""
    n = X.shape[0]
    T = build(X, np.int64(mdav.LEAF_SIZE), np.int64(1), np.int64(PAR_MIN))
    total = mdav._column_sums(X)
    state = np.zeros(3, np.int64)
    state[mdav.REMAINING] = n
    labels = np.full(n, -1, np.int64)
    A = anchor_init(T, mdav._centroid(total, max(n, 1)))
    while state[mdav.DONE] == 0:
        if method == mdav.VMDAV:
            A = mdav._run_vmdav(T, A, total, state, labels, k, gamma, np.int64(1 << 40))
        else:
            A = mdav._run_ivmdav(T, A, total, state, labels, k, gamma, np.int64(1 << 40))
    return labels


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
        else:  # (``mdav.microaggregate`` now picks these in Python)
            local = _index_old(sub, method, k, gamma)
        g = 0
        for a in range(idx.shape[0]):
            labels[idx[a]] = local[a] + next_id
            if local[a] + 1 > g:
                g = local[a] + 1
        next_id += g
    return labels
