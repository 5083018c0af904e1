"""Kernels of the disclosure-risk measures (``engine.audit.risk``).

* ``nearest_with_ties``: the smallest squared distance from a point to the rows of
  a kd-tree (``engine.kernels.kdtree``, built once and never modified here) and
  how many rows attain it exactly. Distances use the tree's ``sq_dist`` (summed
  in column order) and nodes are pruned only when their box bound is *strictly*
  larger than the best distance, so every tied row is counted (the tree's box
  bounds are rounded the same way as the distances; see its docstring).
* ``find_rows``: the index of each query row in a lexicographically sorted,
  duplicate-free table of points (exact float comparison), -1 if absent.
* ``score_rows``: per record, the DBRL credit (``1 / ties`` when the record's own
  original is among the nearest, else 0) and the interval-disclosure tests.

The slow references are ``tests/reference.py``: ``nearest_with_ties`` and ``dbrl``.
"""

import numpy as np
from numba import njit, prange

from .kdtree import box_min_dist, sq_dist


@njit(cache=True, nogil=True)
def nearest_with_ties(T, q):
    """``(d2, ties)``: the least ``sq_dist`` from ``q`` to the tree's rows and its multiplicity."""
    Xp, ids, alive, leaf_of, nstart, nend, lo, hi, cnt, first_leaf, center, rnorm, rmax = T
    best = np.inf
    ties = 0
    if cnt[0] == 0:
        return best, ties
    stack = np.empty(128, np.int64)
    bound = np.empty(128)
    stack[0] = 0
    bound[0] = box_min_dist(lo, hi, stack[0], q)  # the root (an int64, not a literal 0)
    sp = 1
    while sp > 0:
        sp -= 1
        node = stack[sp]
        if bound[sp] > best:
            continue
        if node >= first_leaf:
            for p in range(nstart[node], nend[node]):
                dd = sq_dist(Xp, p, q)
                if dd < best:
                    best = dd
                    ties = 1
                elif dd == best:
                    ties += 1
        else:
            a = 2 * node + 1
            b = a + 1
            ba = box_min_dist(lo, hi, a, q) if cnt[a] > 0 else np.inf
            bb = box_min_dist(lo, hi, b, q) if cnt[b] > 0 else np.inf
            # push the nearer child last so it is searched first
            first, fb, second, sb = (a, ba, b, bb) if ba > bb else (b, bb, a, ba)
            if cnt[first] > 0 and fb <= best:
                stack[sp] = first
                bound[sp] = fb
                sp += 1
            if cnt[second] > 0 and sb <= best:
                stack[sp] = second
                bound[sp] = sb
                sp += 1
    return best, ties


@njit(cache=True, nogil=True, parallel=True)
def nearest_all(T, Q, out_d2, out_ties):
    """``nearest_with_ties`` for every row of ``Q`` (read-only tree: safe in parallel)."""
    for i in prange(Q.shape[0]):
        d2, t = nearest_with_ties(T, Q[i])
        out_d2[i] = d2
        out_ties[i] = t


@njit(cache=True, nogil=True)
def _cmp(A, i, B, j):
    for c in range(A.shape[1]):
        if A[i, c] < B[j, c]:
            return -1
        if A[i, c] > B[j, c]:
            return 1
    return 0


@njit(cache=True, nogil=True, parallel=True)
def find_rows(U, M, out_idx):
    """``out_idx[i]``: the row of the sorted, distinct table ``U`` equal to ``M[i]``, or -1."""
    for i in prange(M.shape[0]):
        lo = 0
        hi = U.shape[0]
        found = -1
        while lo < hi:
            mid = (lo + hi) // 2
            c = _cmp(U, mid, M, i)
            if c < 0:
                lo = mid + 1
            elif c > 0:
                hi = mid
            else:
                found = mid
                break
        out_idx[i] = found


@njit(cache=True, nogil=True)
def score_rows(Zo, Uz, idx, d2, ties, Xs, Ms, half_width, half_width_m):
    """Sums over the rows of one chunk.

    ``Zo`` (h, d): the originals, standardized exactly as the tree's rows; ``idx``:
    each row's masked point in ``Uz`` (standardized) with its nearest distance ``d2``
    and ``ties``. ``Xs``/``Ms``: original and masked values in the same units, and
    ``half_width`` (d,): p times the original's sd in those units; ``half_width_m``:
    p times the masked sd (sdcMicro's variant).

    Returns ``(dbrl_credit, inside_all, inside_sdcmicro)``: the summed credit; the
    rows whose every original value lies within ``half_width`` of the masked value;
    the rows with at most one value outside ``half_width_m`` (sdcMicro's dRisk).
    """
    h, d = Zo.shape
    credit = 0.0
    inside = 0
    inside_sdc = 0
    for i in range(h):
        u = idx[i]
        dd = sq_dist(Zo, i, Uz[u])
        if dd <= d2[u]:  # the same expression as in the tree: equal when tied
            credit += 1.0 / ties[u]
        out = 0
        out_m = 0
        for j in range(d):
            t = abs(Xs[i, j] - Ms[i, j])
            if not t <= half_width[j]:
                out += 1
            if not t <= half_width_m[j]:
                out_m += 1
        if out == 0:
            inside += 1
        if out_m <= 1:
            inside_sdc += 1
    return credit, inside, inside_sdc
