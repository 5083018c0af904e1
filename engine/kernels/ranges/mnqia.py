"""Numba kernels of MNQIA (Ahmed, Rauf & Rajesh, "MNQIA: A Method for Multiple
Numerical QI Attribute Anonymization"), driven by ``engine/methods/mnqia.py``, which
documents the algorithm and validates input: the optimal 1-D segmentation of each
QI (a Ckmeans.1d.dp layer) and the MMDCF grouping. ``tests/reference_sensitive.py``
re-implements each of them plainly, and the tests compare.
"""

import numpy as np
from numba import njit

from ..common import widen

# ---------------------------------------------------------------- MNQIA: optimal 1-D segmentation


@njit(cache=True, nogil=True)
def _seg_cost(P0, P1, P2, j, i):
    # weighted SSE of distinct values j..i (inclusive), from prefix sums
    W = P0[i + 1] - P0[j]
    S = P1[i + 1] - P1[j]
    Q = P2[i + 1] - P2[j]
    v = Q - S * S / W
    return v if v > 0.0 else 0.0


@njit(cache=True, nogil=True)
def ckmeans_layer(P0, P1, P2, Dprev, g, Dcur, Bcur):
    """Layer g (>= 2) of the optimal 1-D k-means DP over weighted distinct sorted
    values: ``Dcur[i] = min_{g-1 <= j <= i} Dprev[j-1] + cost(j, i)``, ``Bcur[i]``
    the argmin (smallest on ties). Divide and conquer on the monotone argmin
    (Wang & Song's Ckmeans.1d.dp), with an explicit stack."""
    nv = Dprev.shape[0]
    for i in range(g - 1):
        Dcur[i] = np.inf
        Bcur[i] = -1
    if g - 1 > nv - 1:
        return
    stack = np.empty((2 * nv + 8, 4), np.int64)
    sp = 0
    stack[0, 0] = g - 1
    stack[0, 1] = nv - 1
    stack[0, 2] = g - 1
    stack[0, 3] = nv - 1
    sp = 1
    while sp > 0:
        sp -= 1
        lo = stack[sp, 0]
        hi = stack[sp, 1]
        olo = stack[sp, 2]
        ohi = stack[sp, 3]
        if lo > hi:
            continue
        mid = (lo + hi) // 2
        best = -1
        bv = np.inf
        top = ohi if ohi < mid else mid
        for j in range(olo, top + 1):
            v = Dprev[j - 1] + _seg_cost(P0, P1, P2, j, mid)
            if v < bv:
                bv = v
                best = j
        Dcur[mid] = bv
        Bcur[mid] = best
        stack[sp, 0] = lo
        stack[sp, 1] = mid - 1
        stack[sp, 2] = olo
        stack[sp, 3] = best
        sp += 1
        stack[sp, 0] = mid + 1
        stack[sp, 1] = hi
        stack[sp, 2] = best
        stack[sp, 3] = ohi
        sp += 1


# ---------------------------------------------------------------- MNQIA: MMDCF grouping


@njit(cache=True, nogil=True)
def _prio(b, bseg, capoff, cap, bsize):
    p = bsize[b]
    for j in range(bseg.shape[1]):
        p += cap[capoff[j] + bseg[b, j]]
    return p


@njit(cache=True, nogil=True)
def _conflicts(b, bseg, capoff, used, stamp):
    z = 0
    for j in range(bseg.shape[1]):
        if used[capoff[j] + bseg[b, j]] == stamp:
            z += 1
    return z


@njit(cache=True, nogil=True)
def mmdcf(Xn, bseg, bstart, bmem, slice_start, slice_b, capoff, cap, k, scan_dim):
    """MMDCF grouping (Ahmed et al. (MNQIA) steps 8-24 as read in ``engine/methods/mnqia.py``).

    ``bseg`` (B, d): the 1-D group of every non-empty bucket in each dimension,
    buckets in lexicographic order; bucket b's rows are ``bmem[bstart[b]:...]``
    (ascending; this array is permuted in place as rows leave). ``slice_b``
    lists the buckets of each 1-D group of ``scan_dim`` (``slice_start``).
    ``cap`` holds the capacity (remaining rows) of every 1-D group
    (``capoff[j] + g``) and is updated in place. ``Xn`` (n, d) are the values
    scaled by each column's range, used for "least range growth".

    Returns ``(labels, groups, relaxed_picks, leftovers)``.
    """
    n, d = Xn.shape
    B = bseg.shape[0]
    bsize = np.empty(B, np.int64)
    for b in range(B):
        bsize[b] = bstart[b + 1] - bstart[b]
    used = np.zeros(capoff[d], np.int64)
    labels = np.full(n, -1, np.int64)
    Gmax = n // k + 1
    gmn = np.full((Gmax, d), np.inf)
    gmx = np.full((Gmax, d), -np.inf)
    remaining = n
    G = np.int64(0)  # int64 values, not literals: they are passed to _pick
    relaxed = 0
    nscan = slice_start.shape[0] - 1
    while remaining >= k:
        stamp = G + 1
        gsize = 0
        for s in range(nscan):
            if gsize == k:
                break
            best = np.int64(-1)
            bp = -1
            for t in range(slice_start[s], slice_start[s + 1]):
                b = slice_b[t]
                if bsize[b] == 0 or _conflicts(b, bseg, capoff, used, stamp) > 0:
                    continue
                p = _prio(b, bseg, capoff, cap, bsize)
                if p > bp:
                    bp = p
                    best = b
            if best >= 0:
                _pick(Xn, best, bseg, bstart, bmem, bsize, capoff, cap, used, stamp, labels, G, gmn, gmx)
                gsize += 1
                remaining -= 1
        while gsize < k:
            best = np.int64(-1)
            bc = d + 1
            bp = -1
            for b in range(B):
                if bsize[b] == 0:
                    continue
                c = _conflicts(b, bseg, capoff, used, stamp)
                p = _prio(b, bseg, capoff, cap, bsize)
                if c < bc or (c == bc and p > bp):
                    bc = c
                    bp = p
                    best = b
            _pick(Xn, best, bseg, bstart, bmem, bsize, capoff, cap, used, stamp, labels, G, gmn, gmx)
            gsize += 1
            remaining -= 1
            relaxed += 1
        G += 1
    # leftovers (< k rows) join the group whose ranges grow least
    nleft = 0
    for r in range(n):
        if labels[r] >= 0:
            continue
        nleft += 1
        best = -1
        bv = np.inf
        for g in range(G):
            v = 0.0
            for j in range(d):
                x = Xn[r, j]
                if x < gmn[g, j]:
                    v += gmn[g, j] - x
                elif x > gmx[g, j]:
                    v += x - gmx[g, j]
            if v < bv:
                bv = v
                best = g
        labels[r] = best
        widen(gmn, gmx, best, Xn, r)
    return labels, G, relaxed, nleft


@njit(cache=True, nogil=True)
def _pick(Xn, b, bseg, bstart, bmem, bsize, capoff, cap, used, stamp, labels, G, gmn, gmx):
    # the row of bucket b that grows the group's (range-scaled) ranges least;
    # ties: lowest row index
    d = Xn.shape[1]
    a = bstart[b]
    best_t = -1
    bv = np.inf
    for t in range(a, a + bsize[b]):
        r = bmem[t]
        v = 0.0
        for j in range(d):
            x = Xn[r, j]
            if x < gmn[G, j]:
                v += gmn[G, j] - x if gmn[G, j] != np.inf else 0.0
            elif x > gmx[G, j]:
                v += x - gmx[G, j] if gmx[G, j] != -np.inf else 0.0
        if v < bv or (v == bv and r < bmem[best_t]):
            bv = v
            best_t = t
    r = bmem[best_t]
    last = a + bsize[b] - 1
    bmem[best_t] = bmem[last]
    bmem[last] = r
    bsize[b] -= 1
    labels[r] = G
    for j in range(d):
        q = capoff[j] + bseg[b, j]
        cap[q] -= 1
        used[q] = stamp
    widen(gmn, gmx, G, Xn, r)
