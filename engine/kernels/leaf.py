"""Leaf-blocked MDAV for the streaming aggregate pass.

A spilled block of the streaming engine (about ``--block-size`` rows) is split
further, in memory, by median cuts into *leaves* of at most ``leaf`` rows, and
every leaf is microaggregated on its own. Small leaves make MDAV cheap (brute
force over a leaf is O(leaf) per query, and the leaf fits in L1/L2 cache); the
price is some information loss at leaf borders, which the border refinement
(``--refine``) can take back. Measured in ``benchmarks/bench_stream.py``; the
kernels alone (old against new layout) in ``benchmarks/bench_leaf.py``.

The split (``engine.kernels.split``): median cuts of the column of largest
variance; deterministic, it depends only on the rows of the block and their order.

``mdav_brute`` runs MDAV (method 0) or MDAV-single-group (method 1) by brute
force with exactly the conventions of ``engine.kernels.mdav`` (distances summed in
column order, centroid = running total / remaining with rows subtracted in the
order they join, ties to the lowest row index, "the k-1 nearest of r" excludes r),
so on any block it returns the same labels as ``mdav.microaggregate``: tested.
V-MDAV and IV-MDAV run on each leaf by brute force too, on the same slots
(``engine.kernels.brute``: the labels of their bucket-index kernels, tested), when
leaves have at most ``brute.LEAF_BRUTE_MAX_ROWS`` rows (the default 256-row leaves,
and polished runs' 8,192 from k = 5; not their 16,384-32,768 at k <= 4, where the index is
faster); other leaves, and data brute force does not take (the limits below), run
the index kernel.

The column-major kernel (``engine.kernels.slots``) runs MDAV and MDAV-single-group
on every leaf in one scratch buffer; it needs finite distances: for data with
|x| >= ``slots.FINITE_LIMIT`` (or NaN, inf), no columns or k < 1, ``mdav_brute``
runs the plain row-by-row version (``_mdav_brute_rows``), which defines the labels.
Data are float64, as everywhere in the engine.
"""

import numpy as np
from numba import njit

from . import brute
from .kdtree import sq_dist
from .mdav import IVMDAV, MDAV, MDAV_SINGLE, VMDAV, as_block, microaggregate_ivmdav, microaggregate_vmdav
from .slots import fill_slots, fits, leaf_rows, mdav_brute_slots, mdav_slots, slot_scratch


# -- the plain row-by-row version: the definition, and the fallback ----------------


@njit(cache=True, nogil=True)
def _farthest_rows(X, rem, m, q):
    best = -1.0
    bi = -1
    for a in range(m):
        i = rem[a]
        dd = sq_dist(X, i, q)
        if dd > best or (dd == best and i < bi):
            best = dd
            bi = i
    return bi


@njit(cache=True, nogil=True)
def _take_group_rows(X, rem, where, m, total, labels, group, r, k, nb, nd):
    # r and its k-1 nearest remaining rows (not r), by (distance, row index)
    q = X[r].copy()
    found = 0
    for a in range(m):
        i = rem[a]
        if i == r:
            continue
        dd = sq_dist(X, i, q)
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
    m = _remove_row(X, rem, where, m, total, labels, group, r)
    for a in range(found):
        m = _remove_row(X, rem, where, m, total, labels, group, nb[a])
    return m


@njit(cache=True, nogil=True)
def _remove_row(X, rem, where, m, total, labels, group, i):
    labels[i] = group
    for j in range(X.shape[1]):
        total[j] -= X[i, j]
    a = where[i]
    last = rem[m - 1]
    rem[a] = last
    where[last] = a
    return m - 1


@njit(cache=True, nogil=True)
def _mdav_brute_rows(X, method, k):
    """``mdav_brute`` row by row through an index array (any input)."""
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
    group = np.int64(0)  # not a literal 0: it is passed to _take_group_rows
    while m >= 3 * k:
        for j in range(d):
            c[j] = total[j] / m
        r = _farthest_rows(X, rem, m, c)
        m = _take_group_rows(X, rem, where, m, total, labels, group, r, k, nb, nd)
        group += 1
        if method == MDAV:
            s = _farthest_rows(X, rem, m, X[r])
            m = _take_group_rows(X, rem, where, m, total, labels, group, s, k, nb, nd)
            group += 1
    if m >= 2 * k:
        for j in range(d):
            c[j] = total[j] / m
        r = _farthest_rows(X, rem, m, c)
        m = _take_group_rows(X, rem, where, m, total, labels, group, r, k, nb, nd)
        group += 1
    if m > 0:
        for a in range(m):
            labels[rem[a]] = group
        group += 1
    return labels


@njit(cache=True, nogil=True)
def mdav_brute(X, method, k):
    """MDAV (method 0) or MDAV-single-group (1) on a small block ``X`` (float64,
    n x d), by brute force: labels, groups numbered from 0 in creation order."""
    n, d = X.shape
    if k < 1 or d == 0 or not fits(X):
        return _mdav_brute_rows(X, method, k)
    return mdav_brute_slots(X, method, k)


@njit(cache=True, nogil=True)
def _leaf_block(X, idx):
    """The rows ``idx`` of ``X``, as a new block (element by element: a row
    assignment ``sub[a] = X[i]`` compiles a shape check and its error message)."""
    m = idx.shape[0]
    d = X.shape[1]
    sub = np.empty((m, d))
    for a in range(m):
        i = idx[a]
        for j in range(d):
            sub[a, j] = X[i, j]
    return sub


@njit(cache=True, nogil=True)
def _add_leaf(labels, idx, local, next_id):
    """Global labels of one leaf's rows; returns the next group id."""
    g = 0
    for a in range(idx.shape[0]):
        labels[idx[a]] = local[a] + next_id
        if local[a] + 1 > g:
            g = local[a] + 1
    return next_id + g


@njit(cache=True, nogil=True)
def _leaves_slots(X, method, k, leaf):
    # MDAV / MDAV-single-group, every |x| < slots.FINITE_LIMIT, k >= 1, d >= 1: each
    # leaf by the column-major kernel, in one scratch buffer
    n, d = X.shape
    order, bounds, cap = leaf_rows(X, k, leaf)
    labels = np.empty(n, np.int64)
    C, orig, total, dist, q, cand, nd, no, ns = slot_scratch(d, cap, k + 1)
    next_id = np.int64(0)  # not a literal 0: see ``mdav_brute``
    for b in range(bounds.shape[0] - 1):
        m = bounds[b + 1] - bounds[b]
        fill_slots(X, order[bounds[b]:], m, C, orig, total)
        next_id = mdav_slots(C, orig, m, total, method, k, labels, next_id, dist, q, cand, nd, no, ns)
    return labels


@njit(cache=True, nogil=True)
def _leaves_brute(X, method, k, leaf):
    # MDAV / MDAV-single-group otherwise (large or non-finite values somewhere, no
    # columns, k < 1): ``mdav_brute`` on each leaf
    order, bounds, _ = leaf_rows(X, k, leaf)
    labels = np.empty(X.shape[0], np.int64)
    next_id = np.int64(0)  # not a literal 0: see ``mdav_brute``
    for b in range(bounds.shape[0] - 1):
        idx = order[bounds[b]: bounds[b + 1]]
        next_id = _add_leaf(labels, idx, mdav_brute(_leaf_block(X, idx), method, k), next_id)
    return labels


@njit(cache=True, nogil=True)
def _leaves_vmdav(X, k, gamma, leaf):
    order, bounds, _ = leaf_rows(X, k, leaf)
    labels = np.empty(X.shape[0], np.int64)
    next_id = np.int64(0)  # not a literal 0: see ``mdav_brute``
    for b in range(bounds.shape[0] - 1):
        idx = order[bounds[b]: bounds[b + 1]]
        next_id = _add_leaf(labels, idx, microaggregate_vmdav(_leaf_block(X, idx), k, gamma), next_id)
    return labels


@njit(cache=True, nogil=True)
def _leaves_ivmdav(X, k, gamma, leaf):
    order, bounds, _ = leaf_rows(X, k, leaf)
    labels = np.empty(X.shape[0], np.int64)
    next_id = np.int64(0)  # not a literal 0: see ``mdav_brute``
    for b in range(bounds.shape[0] - 1):
        idx = order[bounds[b]: bounds[b + 1]]
        next_id = _add_leaf(labels, idx, microaggregate_ivmdav(_leaf_block(X, idx), k, gamma), next_id)
    return labels


def aggregate_leaves(X, method, k, gamma, leaf):
    """Labels for ``X``: split into leaves of at most ``leaf`` rows (``leaf`` is
    raised to 4k so that both halves of a cut keep at least 2k rows), then run
    ``method`` on every leaf, its rows in increasing row order. Groups are numbered
    leaf by leaf.

    Python: it picks the kernel of the method (and, for MDAV, of the data), each
    compiled only when first used, and passes it the one array and scalar types
    they are compiled for."""
    X = as_block(X)
    method, k, leaf = int(method), int(k), int(leaf)
    if method == MDAV or method == MDAV_SINGLE:
        if k >= 1 and X.shape[1] > 0 and fits(X):
            return _leaves_slots(X, method, k, leaf)
        return _leaves_brute(X, method, k, leaf)
    if method == VMDAV or method == IVMDAV:
        if min(X.shape[0], max(leaf, 4 * k)) <= brute.LEAF_BRUTE_MAX_ROWS and brute.usable(X, k):
            kernel = brute.leaves_vmdav if method == VMDAV else brute.leaves_ivmdav
        else:
            kernel = _leaves_vmdav if method == VMDAV else _leaves_ivmdav
        return kernel(X, k, float(gamma), leaf)
    raise ValueError(f"unknown method code {method}")
