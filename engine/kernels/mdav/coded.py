"""MDAV on leaves with an exact mismatch distance on the codes of nominal QIs.

A nominal QI of more than ``ONE_HOT_MAX`` categories is encoded for the grouping as
``EMBED_DIMS`` columns of a random unit vector per category (``engine.encode.mixed``):
two different categories are at the distance ``w`` only on average, and the kernels
run on 16 columns for one QI. Here such a QI is its *code*, with the distance of its
one-hot vector scaled by ``sqrt(h)``, ``h = w / 2`` (exactly what one-hot columns give
a nominal QI of few categories), computed without the vector:

* two rows: ``w`` if their codes differ, else 0;
* a row of code ``a`` to the centroid of ``g`` rows, ``c(a)`` of them of code ``a`` and
  ``S = sum_b c(b)^2``: ``h * (g*g - 2*c(a)*g + S) / (g*g)``, the numerator an exact
  integer (never negative).

The total squared distance is the Euclidean part over the *dense* columns (``Z[:, dense]``:
numbers, dates, ranks, missing-value indicators, one-hot columns), summed in column
order as ``slots.dists`` sums it, then the coded QIs' parts in their order.

``aggregate_leaves_coded(Z, dense, K, w, method, k, leaf)``: the leaves of
``leaf.aggregate_leaves``, cut by ``slots.leaf_rows`` on *all* the columns of ``Z`` (the
embedding columns after the dense ones guide the cuts only), then MDAV (method 0) or
MDAV-single-group (1) on every leaf with the distance above, by the column-major scheme
of ``slots.mdav_slots`` (the same seeds, the same "k - 1 nearest of r", ties to the
lowest row index, the centroid a running total and running code counts of the rows
left). ``K`` (n, q) holds each row's code of each coded QI (0 .. m - 1), ``w`` (q,) their
weights. With no coded column and every column dense it gives the labels of
``leaf.aggregate_leaves``. Checked against the row-by-row ``tests/reference.py``
(``mdav_coded``) and against one-hot columns.
"""

import numpy as np
from numba import njit

from .indexed import MDAV
from .slots import dists, farthest, leaf_rows, nearest, rest_as_group, slot_bits, take_group


@njit(cache=True, nogil=True)
def _coded_dists_centroid(C, Kc, m, q, cnt, S, h, dist):
    """``dist[a]`` := slot a's squared distance to the centroid of the m slots (dense
    part ``q``; the codes' counts ``cnt`` and sums of squares ``S``)."""
    if C.shape[0] > 0:
        dists(C, m, q, dist)
    else:
        for a in range(m):
            dist[a] = 0.0
    gg = m * m
    inv = 1.0 / float(gg)
    for t in range(Kc.shape[0]):
        ht = h[t]
        st = S[t]
        for a in range(m):
            num = gg - 2 * cnt[t, Kc[t, a]] * m + st
            dist[a] += ht * float(num) * inv


@njit(cache=True, nogil=True)
def _coded_dists_row(C, Kc, m, r, q, w, dist):
    """``dist[a]`` := slot a's squared distance to slot r (``q``: r's dense values)."""
    if C.shape[0] > 0:
        dists(C, m, q, dist)
    else:
        for a in range(m):
            dist[a] = 0.0
    for t in range(Kc.shape[0]):
        kr = Kc[t, r]
        wt = w[t]
        for a in range(m):
            if Kc[t, a] != kr:
                dist[a] += wt


@njit(cache=True, nogil=True)
def _free(C, Kc, orig, cnt, S, di, p, m):
    """Slot p's codes leave the counts; the last slot moves into its hole. Returns the
    new slot count."""
    for t in range(Kc.shape[0]):
        c = cnt[t, Kc[t, p]]
        S[t] -= 2 * c - 1
        cnt[t, Kc[t, p]] = c - 1
    m -= 1
    if p != m:
        for j in range(C.shape[0]):
            C[j, p] = C[j, m]
        for t in range(Kc.shape[0]):
            Kc[t, p] = Kc[t, m]
        orig[p] = orig[m]
        di[p] = di[m]
    return m


@njit(cache=True, nogil=True)
def mdav_coded_slots(C, Kc, orig, m, total, cnt, S, w, method, k, labels, group, dist, q, cand, nd, no, ns):
    """``slots.mdav_slots`` with the coded distance: the m rows in slots 0..m-1 of ``C``
    (dense, column-major) and ``Kc`` (codes, column-major), ``total`` their dense column
    sums in row order, ``cnt`` / ``S`` their code counts and sums of squared counts.
    Writes ``labels[orig[a]]`` from ``group``; returns the next group number. Leaves
    ``cnt`` all zero."""
    d = C.shape[0]
    h = w * 0.5
    di = dist.view(np.int64)
    sh = slot_bits(C)
    kk = k - 1
    from_last = False
    final = False
    while True:
        if not from_last:
            if m < 2 * k:
                break
            final = m < 3 * k
            for j in range(d):
                q[j] = total[j] / m
            _coded_dists_centroid(C, Kc, m, q, cnt, S, h, dist)
        r = farthest(di, orig, m, sh)
        for j in range(d):
            q[j] = C[j, r]
        _coded_dists_row(C, Kc, m, r, q, w, dist)
        found = 0
        if kk > 0:
            found = nearest(di, orig, m, r, kk, sh, cand, nd, no, ns)
        take_group(C, orig, total, labels, group, r, ns, found)  # (then freed highest first)
        for b in range(found + 1):
            m = _free(C, Kc, orig, cnt, S, di, ns[b], m)
        group += 1
        if final:
            break
        from_last = method == MDAV and not from_last
    for a in range(m):  # the rest: one group; its counts back to zero
        for t in range(Kc.shape[0]):
            cnt[t, Kc[t, a]] = 0
    return rest_as_group(labels, orig, m, group)


@njit(cache=True, nogil=True)
def _leaves_coded(Z, dense, K, w, method, k, leaf, width):
    n = Z.shape[0]
    nd = dense.shape[0]
    q_cols = K.shape[1]
    order, bounds, cap = leaf_rows(Z, k, leaf)
    labels = np.empty(n, np.int64)
    C = np.empty((nd, cap))
    Kc = np.empty((q_cols, cap), np.int64)
    orig = np.empty(cap, np.int64)
    total = np.empty(nd)
    cnt = np.zeros((q_cols, width), np.int64)
    S = np.zeros(q_cols, np.int64)
    dist = np.empty(cap + 1)
    q = np.empty(max(nd, 1))
    cand = np.empty(cap, np.int64)
    nd_, no, ns = np.empty(k + 1, np.int64), np.empty(k + 1, np.int64), np.empty(k + 1, np.int64)
    next_id = np.int64(0)
    for b in range(bounds.shape[0] - 1):
        m = bounds[b + 1] - bounds[b]
        for j in range(nd):
            total[j] = 0.0
        for t in range(q_cols):
            S[t] = 0
        for a in range(m):
            i = order[bounds[b] + a]
            orig[a] = i
            for j in range(nd):
                v = Z[i, dense[j]]
                C[j, a] = v
                total[j] += v
            for t in range(q_cols):
                c = K[i, t]
                Kc[t, a] = c
                S[t] += 2 * cnt[t, c] + 1
                cnt[t, c] += 1
        next_id = mdav_coded_slots(C, Kc, orig, m, total, cnt, S, w, method, k, labels, next_id, dist, q, cand,
                                   nd_, no, ns)
    return labels


def aggregate_leaves_coded(Z, dense, K, w, method, k, leaf):
    """Labels for the rows of ``Z`` (float64, every |x| below ``slots.FINITE_LIMIT``;
    ``dense``: its dense columns), ``K`` (int64 codes, one column per coded QI) and ``w``
    (their weights): leaves as ``leaf.aggregate_leaves`` cuts them, each grouped by
    MDAV (``method`` 0) or MDAV-single-group (1) with the coded distance (module
    docstring). Groups numbered leaf by leaf."""
    Z = np.ascontiguousarray(Z, dtype=np.float64)
    K = np.ascontiguousarray(K, dtype=np.int64)
    w = np.ascontiguousarray(w, dtype=np.float64)
    dense = np.ascontiguousarray(dense, dtype=np.int64)
    if K.ndim != 2 or K.shape[0] != Z.shape[0] or K.shape[1] != w.shape[0] or \
            (dense.shape[0] and not 0 <= dense.min() <= dense.max() < Z.shape[1]):
        raise ValueError("aggregate_leaves_coded: Z, K and w do not match")
    if int(method) not in (0, 1) or int(k) < 1:
        raise ValueError("aggregate_leaves_coded: MDAV or MDAV-single-group, k >= 1")
    width = int(K.max()) + 1 if K.size else 1
    if K.size and int(K.min()) < 0:
        raise ValueError("aggregate_leaves_coded: negative code")
    return _leaves_coded(Z, dense, K, w, np.int64(method), np.int64(k), np.int64(leaf), np.int64(width))
