"""Route rows to the leaves of a partition plan (a kd-tree of median splits).

A node splits on dimension ``dim[node]`` at the key ``(thr_value, thr_key)``: a row
goes left when ``(z, tie_key(row_id)) <= (thr_value, thr_key)`` in lexicographic
order. The tie key (a fixed bijective mix of the row id, so rows in any id range
spread evenly over its range) breaks ties, so even a column full of equal values
splits where the plan says, in the proportion the sample says, whichever rows the
sample came from; every row has exactly one leaf whatever the chunking.
"""

import numpy as np
from numba import njit, prange

from ..common import mix64
from .split import cut


@njit(cache=True, nogil=True, inline="always")
def tie_key(row_id):
    """splitmix64's finalizer: a bijection of the 64-bit row id (as uint64)."""
    return mix64(np.uint64(row_id) + np.uint64(0x9E3779B97F4A7C15))


@njit(cache=True, nogil=True)
def tie_keys(row_ids):
    out = np.empty(row_ids.shape[0], np.uint64)
    for i in range(row_ids.shape[0]):
        out[i] = tie_key(row_ids[i])
    return out


@njit(cache=True, nogil=True, inline="always")
def _leaf_of_row(Z, i, row_id, dim, thr_value, thr_key, left, right, leaf_of):
    node = 0
    while leaf_of[node] < 0:
        v = Z[i, dim[node]]
        t = thr_value[node]
        if v < t or (v == t and tie_key(row_id) <= thr_key[node]):
            node = left[node]
        else:
            node = right[node]
    return leaf_of[node]


@njit(cache=True, nogil=True, parallel=True)
def assign_leaves(Z, row_ids, dim, thr_value, thr_key, left, right, leaf_of, out):
    """``out[i]`` = leaf number of row ``i`` (``leaf_of[node] >= 0`` marks a leaf)."""
    n = Z.shape[0]
    for i in prange(n):
        out[i] = _leaf_of_row(Z, i, row_ids[i], dim, thr_value, thr_key, left, right, leaf_of)


@njit(cache=True, nogil=True)
def assign_leaves_serial(Z, row_ids, dim, thr_value, thr_key, left, right, leaf_of, out):
    """``assign_leaves`` on the calling thread: for the few rows of a worker's call (the seam
    stage routes a unit's groups, about 20,000), where starting the parallel threads costs
    more than the descent."""
    for i in range(Z.shape[0]):
        out[i] = _leaf_of_row(Z, i, row_ids[i], dim, thr_value, thr_key, left, right, leaf_of)


@njit(cache=True, nogil=True, parallel=True)
def route_rows(X, first_id, col, lo, hi, thr_key, left, right, leaf_of, depth, out):
    """``assign_leaves`` on raw rows: ``X`` (all QIs, n), column-major, in original units, row ids
    ``first_id + i`` (tie keys ``tie_key(row id)``). Node ``node`` compares raw column ``col[node]`` with the raw
    bounds of its standardized threshold (``Plan.raw_bounds``): ``x < lo`` is
    ``z < t``, ``x > hi`` is ``z > t``, and in between ``z == t``, where the row
    id decides. No standardized copy of the chunk, no division per row.

    Leaves are their own children here, so every row takes exactly ``depth``
    steps; rows go down in batches, level by level, without branches, so the CPU
    works on many rows' steps at once instead of waiting on one row's path.
    """
    n = X.shape[1]
    B = 64
    for b in prange((n + B - 1) // B):
        s = b * B
        e = min(s + B, n)
        node = np.zeros(B, np.int64)
        key = np.empty(B, np.uint64)
        for r in range(e - s):
            key[r] = tie_key(first_id + s + r)
        for _ in range(depth):
            for r in range(e - s):
                nd = node[r]
                x = X[col[nd], s + r]
                # right = not (x < lo or (x <= hi and key <= thr))
                go = (x >= lo[nd]) & ((x > hi[nd]) | (key[r] > thr_key[nd]))
                node[r] = left[nd] + np.int64(go) * (right[nd] - left[nd])
        for r in range(e - s):
            out[s + r] = leaf_of[node[r]]


@njit(cache=True, nogil=True)
def counting_order(keys, n_keys, out_order, out_start):
    """Stable counting sort of ``keys`` in [0, n_keys): ``out_order`` lists row positions
    grouped by key, in row order within a key; key b's rows are
    ``out_order[out_start[b]:out_start[b + 1]]``."""
    n = keys.shape[0]
    out_start[:] = 0
    for i in range(n):
        out_start[keys[i] + 1] += 1
    for b in range(n_keys):
        out_start[b + 1] += out_start[b]
    fill = out_start[:n_keys].copy()
    for i in range(n):
        b = keys[i]
        out_order[fill[b]] = i
        fill[b] += 1


@njit(cache=True, nogil=True)
def scatter_labels(row_ids, local, offset, out):
    """``out[row_ids[i]] = local[i] + offset`` (the stitch of one block)."""
    for i in range(row_ids.shape[0]):
        out[row_ids[i]] = local[i] + offset


@njit(cache=True, nogil=True)
def take_labels(row_ids, labels, out):
    for i in range(row_ids.shape[0]):
        out[i] = labels[row_ids[i]]


@njit(cache=True, nogil=True, parallel=True)
def gather_records(X, first_id, order, out):
    """Spill records in block order from column-major ``X`` (d, n): ``out[p] = [bits of
    row id, X[:, order[p]]]``, the row id ``first_id + order[p]`` stored as int64 bits
    in a float64 slot."""
    d = X.shape[0]
    ids = out.view(np.int64)
    for p in prange(order.shape[0]):  # each record written once: parallel is exact
        i = order[p]
        ids[p, 0] = first_id + i
        for j in range(d):
            out[p, 1 + j] = X[j, i]


@njit(cache=True, nogil=True, parallel=True)
def gather_records_narrow(X, first_id, order, out):
    """``gather_records`` into narrow records: ``out`` (n, 1 + d) float32, the row id
    ``first_id + order[p]`` (below 2^32) stored as uint32 bits. Returns how many values
    are not exactly a float32 (0: the records hold every value exactly)."""
    d = X.shape[0]
    ids = out.view(np.uint32)
    bad = 0
    for p in prange(order.shape[0]):
        i = order[p]
        ids[p, 0] = np.uint32(first_id + i)
        for j in range(d):
            x = X[j, i]
            v = np.float32(x)
            out[p, 1 + j] = v
            if np.float64(v) != x:
                bad += 1
    return bad


@njit(cache=True, nogil=True)
def plan_tree(Z, leaf):
    """The partition plan's kd-tree of median cuts over the sample ``Z`` (m, d), rows
    in increasing tie-key order (ties between rows then break by position). A node of
    more than ``leaf`` rows is cut on its column of largest variance into its
    ``size // 2`` smallest rows by (value, row) and the rest (``split.cut``); its
    threshold is the largest of the left half. Nodes are numbered as they are created
    (a cut node's children get the next two numbers, left first) and processed depth
    first, left first, so leaves are numbered left to right.

    Returns ``(dim, pivot, left, right, leaf_of, n_leaves)``; ``pivot[node]`` is the
    sample row of the threshold (-1 for leaves)."""
    m, d = Z.shape
    # a cut node's halves hold at least (leaf + 1) // 2 rows: at most m / that leaves, twice as many nodes
    cap = 2 * (m // max(1, (leaf + 1) // 2)) + 3
    dim = np.zeros(cap, np.int64)
    pivot = np.full(cap, -1, np.int64)
    left = np.full(cap, -1, np.int64)
    right = np.full(cap, -1, np.int64)
    leaf_of = np.full(cap, -1, np.int64)
    order = np.arange(m)
    key = np.empty(m)
    mu = np.empty(d)
    var = np.empty(d)
    st_node = np.empty(130, np.int64)
    st_s = np.empty(130, np.int64)
    st_e = np.empty(130, np.int64)
    st_node[0] = 0
    st_s[0] = 0
    st_e[0] = m
    sp = 1
    nodes = 1
    n_leaves = 0
    while sp > 0:
        sp -= 1
        node = st_node[sp]
        s = st_s[sp]
        e = st_e[sp]
        size = e - s
        if size <= leaf or size < 2:
            leaf_of[node] = n_leaves
            n_leaves += 1
            continue
        bj, h = cut(Z, order, key, s, e, mu, var)
        best = s  # the largest of the left half by (value, row)
        for a in range(s + 1, h):
            if key[a] > key[best] or (key[a] == key[best] and order[a] > order[best]):
                best = a
        dim[node] = bj
        pivot[node] = order[best]
        left[node] = nodes
        right[node] = nodes + 1
        # right below left on the stack, so the left is done first
        st_node[sp] = nodes + 1
        st_s[sp] = h
        st_e[sp] = e
        st_node[sp + 1] = nodes
        st_s[sp + 1] = s
        st_e[sp + 1] = h
        sp += 2
        nodes += 2
    return dim[:nodes], pivot[:nodes], left[:nodes], right[:nodes], leaf_of[:nodes], n_leaves
