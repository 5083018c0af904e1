"""Leaf-blocked MDAV for the streaming aggregate pass.

A spilled block of the streaming engine (about ``--block-size`` rows) is split
further, in memory, by median cuts into *leaves* of at most ``leaf`` rows, and
every leaf is microaggregated on its own. Small leaves make MDAV cheap (brute
force over a leaf is O(leaf) per query, and the leaf fits in L1/L2 cache); the
price is some information loss at leaf borders, which polish and the border
refinement (``--refine``) take back (``benchmarks/bench_stream.py``,
``benchmarks/bench_leaf.py``).

The split (``engine.kernels.index.split``): median cuts of the column of largest
variance; deterministic, it depends only on the rows of the block and their order.

``mdav_brute`` runs MDAV (method 0) or MDAV-single-group (method 1) by brute
force with exactly the conventions of ``engine.kernels.mdav.indexed`` (distances
summed in column order, centroid = running total / remaining with rows subtracted
in the order they join, ties to the lowest row index, "the k-1 nearest of r"
excludes r), so on any block it returns the same labels as
``indexed.microaggregate``: tested. V-MDAV and IV-MDAV run on each leaf by brute
force too, on the same slots (``engine.kernels.mdav.brute``: the labels of their
bucket-index kernels, tested), when ``pick.leaves_by_brute`` says so; other
leaves, and data brute force does not take, run the index kernel
(``leaves_by_index``).

The column-major kernel (``engine.kernels.mdav.slots``) runs MDAV and
MDAV-single-group on every leaf in one scratch buffer; it needs finite distances:
for data with |x| >= ``slots.FINITE_LIMIT`` (or NaN, inf), no columns or k < 1,
``mdav_brute`` runs the plain row-by-row version (``_mdav_brute_rows``), which
defines the labels. Data are float64, as everywhere in the engine.
"""

import numpy as np
from numba import njit

from . import brute
from ..common import farther, insert_nearest, sq_dist
from .indexed import IVMDAV, MDAV, MDAV_SINGLE, VMDAV, as_block, microaggregate
from .pick import leaves_by_brute
from .slots import fill_slots, fits, leaf_rows, mdav_brute_slots, mdav_slots, rest_as_group, slot_scratch


# -- the plain row-by-row version: the definition, and the fallback ----------------


@njit(cache=True, nogil=True)
def _farthest_rows(X, rem, m, q):
    best = -1.0
    bi = np.int64(-1)
    for a in range(m):
        best, bi = farther(sq_dist(X, rem[a], q), rem[a], best, bi)
    return bi


@njit(cache=True, nogil=True)
def _take_group_rows(X, rem, where, m, total, labels, group, r, k, nb, nd):
    # r and its k-1 nearest remaining rows (not r), by (distance, row index)
    q = X[r].copy()
    found = np.int64(0)  # (int64, not a literal: one compiled insert_nearest)
    for a in range(m):
        i = rem[a]
        if i != r:
            found = insert_nearest(nb, nd, k - 1, found, i, sq_dist(X, i, q))
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
    while m >= 2 * k:
        final = m < 3 * k  # the last group before the rest: 2k <= m < 3k
        for j in range(d):
            c[j] = total[j] / m
        r = _farthest_rows(X, rem, m, c)
        m = _take_group_rows(X, rem, where, m, total, labels, group, r, k, nb, nd)
        group += 1
        if final:
            break
        if method == MDAV:
            s = _farthest_rows(X, rem, m, X[r])
            m = _take_group_rows(X, rem, where, m, total, labels, group, s, k, nb, nd)
            group += 1
    rest_as_group(labels, rem, m, group)
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


def _each_leaf(X, k, leaf, labels_of):
    """The driver of the leaves not run in one kernel: ``labels_of(block)`` labels each
    leaf's rows (a new C-contiguous block, rows in increasing order), its groups
    numbered after the previous leaves'. (Python: a call per leaf costs microseconds,
    against the leaf's own milliseconds.)"""
    order, bounds, _ = leaf_rows(X, np.int64(k), np.int64(leaf))
    labels = np.empty(X.shape[0], np.int64)
    next_id = 0
    for b in range(bounds.shape[0] - 1):
        idx = order[bounds[b]: bounds[b + 1]]
        local = labels_of(X[idx])
        labels[idx] = local + next_id
        if local.shape[0]:
            next_id += max(int(local.max()) + 1, 0)
    return labels


def leaves_by_index(X, method, k, gamma, leaf):
    """V-MDAV or IV-MDAV on every leaf by the bucket index (``indexed``, on the calling
    thread): the path of the leaves and data brute force does not take."""
    return _each_leaf(X, k, leaf, lambda B: microaggregate(B, method, k, gamma, threads=1))


def aggregate_leaves(X, method, k, gamma, leaf):
    """Labels for ``X``: split into leaves of at most ``leaf`` rows (``leaf`` is
    raised to 4k so that both halves of a cut keep at least 2k rows), then run
    ``method`` on every leaf, its rows in increasing row order. Groups are numbered
    leaf by leaf.

    Python: it picks the kernel of the method (and, for MDAV, of the data;
    ``pick.leaves_by_brute`` for the others), each compiled only when first used,
    and passes it the one array and scalar types they are compiled for."""
    X = as_block(X)
    method, k, leaf = int(method), int(k), int(leaf)
    if method == MDAV or method == MDAV_SINGLE:
        if k >= 1 and X.shape[1] > 0 and fits(X):
            return _leaves_slots(X, method, k, leaf)
        return _each_leaf(X, k, leaf, lambda B: mdav_brute(B, method, k))
    if method == VMDAV or method == IVMDAV:
        if leaves_by_brute(X, k, leaf):
            kernel = brute.leaves_vmdav if method == VMDAV else brute.leaves_ivmdav
            return kernel(X, k, float(gamma), leaf)
        return leaves_by_index(X, method, k, gamma, leaf)
    raise ValueError(f"unknown method code {method}")
