"""The median split of a block into leaves (shared by the streamed pass's leaves,
``engine.kernels.mdav.leaf``, the partition plan, ``engine.kernels.index.partition``, and the
buckets of the exact path's index, ``engine.kernels.index.buckets``).

The split: while a node holds more than ``leaf`` rows, cut it at the median
(position n // 2 of a stable sort by value, ties by row position) of the column
with the largest variance (ties: the lowest column). Deterministic: depends only
on the rows of the block and their order. (The quickselect runs on a contiguous
copy of the cut column, with a branch-free partition; it makes exactly the moves
of the plain version, so the order, and the variance sums that follow it, are
unchanged.)
"""

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def quickselect(key, order, s, e, h):
    """Rearrange ``order[s:e]`` so that ``order[s:h]`` holds the h - s smallest rows by
    (cut value, row index) and ``order[h:e]`` the others (quickselect, median-of-3).
    ``key[a]`` is the cut value of row ``order[a]`` and moves with it."""
    lo = s
    hi = e - 1
    while hi > lo:
        mid = (lo + hi) // 2
        # median of three to position hi as the pivot
        if key[mid] < key[lo] or (key[mid] == key[lo] and order[mid] < order[lo]):
            key[mid], key[lo] = key[lo], key[mid]
            order[mid], order[lo] = order[lo], order[mid]
        if key[hi] < key[lo] or (key[hi] == key[lo] and order[hi] < order[lo]):
            key[hi], key[lo] = key[lo], key[hi]
            order[hi], order[lo] = order[lo], order[hi]
        if key[mid] < key[hi] or (key[mid] == key[hi] and order[mid] < order[hi]):
            key[mid], key[hi] = key[hi], key[mid]
            order[mid], order[hi] = order[hi], order[mid]
        pk = key[hi]
        pi = order[hi]
        store = lo
        # Lomuto partition without branches (half its comparisons would mispredict):
        # positions a and store swap when row a is below the pivot, else keep
        for a in range(lo, hi):
            ka = key[a]
            ia = order[a]
            below = (ka < pk) | ((ka == pk) & (ia < pi))
            ks = key[store]
            i_s = order[store]
            key[a] = ks if below else ka
            order[a] = i_s if below else ia
            key[store] = ka if below else ks
            order[store] = ia if below else i_s
            store += below
        key[store], key[hi] = key[hi], key[store]
        order[store], order[hi] = order[hi], order[store]
        if store == h:
            return
        if store < h:
            lo = store + 1
        else:
            hi = store - 1


@njit(cache=True, nogil=True)
def widest_column(X, order, s, e, mu, var):
    """The column of largest variance of the rows ``order[s:e]`` (ties: the lowest
    column): two passes, sums row by row in that order. Four to eight columns are summed in
    eight registers (the general loop keeps its sums in ``mu`` / ``var``, a store and a load
    an addition); same sums."""
    d = X.shape[1]
    size = e - s
    if 4 <= d <= 8:
        # columns 4..7 beyond the last read the last column again (registers whose sums are dropped)
        c4, c5, c6, c7 = min(4, d - 1), min(5, d - 1), min(6, d - 1), min(7, d - 1)
        m0 = m1 = m2 = m3 = m4 = m5 = m6 = m7 = 0.0
        for a in range(s, e):
            i = order[a]
            m0 += X[i, 0]
            m1 += X[i, 1]
            m2 += X[i, 2]
            m3 += X[i, 3]
            m4 += X[i, c4]
            m5 += X[i, c5]
            m6 += X[i, c6]
            m7 += X[i, c7]
        m0, m1, m2, m3 = m0 / size, m1 / size, m2 / size, m3 / size
        m4, m5, m6, m7 = m4 / size, m5 / size, m6 / size, m7 / size
        v0 = v1 = v2 = v3 = v4 = v5 = v6 = v7 = 0.0
        for a in range(s, e):
            i = order[a]
            t0 = X[i, 0] - m0
            t1 = X[i, 1] - m1
            t2 = X[i, 2] - m2
            t3 = X[i, 3] - m3
            t4 = X[i, c4] - m4
            t5 = X[i, c5] - m5
            t6 = X[i, c6] - m6
            t7 = X[i, c7] - m7
            v0 += t0 * t0
            v1 += t1 * t1
            v2 += t2 * t2
            v3 += t3 * t3
            v4 += t4 * t4
            v5 += t5 * t5
            v6 += t6 * t6
            v7 += t7 * t7
        var[0], var[1], var[2], var[3] = v0, v1, v2, v3
        if d > 4:
            var[4] = v4
        if d > 5:
            var[5] = v5
        if d > 6:
            var[6] = v6
        if d > 7:
            var[7] = v7
    else:
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
    return bj


@njit(cache=True, nogil=True)
def cut(X, order, key, s, e, mu, var):
    """Cut the rows ``order[s:e]`` at their median of the column of largest variance:
    ``order[s:h]`` the ``(e - s) // 2`` smallest by (value, row), ``key`` their values.
    Returns ``(column, h)``."""
    bj = widest_column(X, order, s, e, mu, var)
    for a in range(s, e):
        key[a] = X[order[a], bj]
    h = s + (e - s) // 2
    quickselect(key, order, s, e, h)
    return bj, h


@njit(cache=True, nogil=True)
def split_leaves(X, leaf):
    """Order the rows so that leaves are contiguous: returns ``(order, bounds)``;
    leaf ``i`` is ``order[bounds[i]:bounds[i + 1]]``."""
    n, d = X.shape
    order = np.arange(n)
    key = np.empty(n)  # key[a]: the cut column's value of row order[a]
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
        bj, h = cut(X, order, key, s, e, mu, var)
        # right half below left half on the stack, so the left is done first
        st_s[sp] = h
        st_e[sp] = e
        st_s[sp + 1] = s
        st_e[sp + 1] = h
        sp += 2
    return order, np.array(bounds, dtype=np.int64)
