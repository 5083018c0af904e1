"""Kernels of the disclosure-risk measures (``engine.audit.risk``).

* ``nearest_all``: the smallest squared distance from each point to the rows of
  a kd-tree (``engine.kernels.index.kdtree``, built once and never modified here,
  searched by its one traversal) and how many rows attain it exactly. Distances are
  ``sq_dist`` (summed in column order) and nodes are pruned only when their box
  bound is *strictly* larger than the best distance, so every tied row is counted
  (the tree's box bounds are rounded the same way as the distances; see its
  docstring).
* ``find_rows``: the index of each query row in a lexicographically sorted,
  duplicate-free table of points (exact float comparison; NaN, a missing value,
  after every number and equal to NaN), -1 if absent.
* ``nearest_all_patterns``: the same when rows and query carry missing-value
  patterns, whose differences add a fixed amount each (``pattern_offset``).
* ``score_rows``: per record, the DBRL credit (``1 / ties`` when the record's own
  original is among the nearest, else 0) and the interval-disclosure tests.
* ``class_totals``, ``individual_risk``, ``class_summary``: the re-identification
  risks of the release's equivalence classes (ARX's prosecutor, journalist and
  marketer risks; sdcMicro's individual risk with sampling weights).
* ``household_products``: the household risks (a household is re-identified if any
  member is: ``1 - prod(1 - r_i)`` over its members, after sdcMicro's hierarchical risk).

The slow references are ``tests/reference.py`` (``nearest_with_ties``, ``dbrl``) and
``tests/reference_risk.py`` (the class-based measures, record by record).
"""

import math

import numpy as np
from numba import njit, prange

from .common import sq_dist
from .index.kdtree import next_leaf, walk


@njit(cache=True, nogil=True)
def pattern_offset(a, b, R2):
    """The distance a pattern adds: ``R2[j]`` for each column ``j`` where the patterns
    ``a`` and ``b`` differ, half of it when either is negative, summed in column order
    (the same expression wherever a distance is computed). A pattern column is a
    missing-value indicator (0/1 a QI with missing values) or a nominal QI's category
    code (``R2`` 1: two categories at squared distance 1; -1, a published category the
    original lacks, at 1/2 from every category, as a one-hot row of zeros would be)."""
    s = 0.0
    for j in range(R2.shape[0]):
        if a[j] != b[j]:
            if a[j] < 0 or b[j] < 0:
                s += 0.5 * R2[j]
            else:
                s += R2[j]
    return s


@njit(cache=True, nogil=True)
def nearest_with_patterns(T, q, qpat, P, R2):
    """``(d2, ties)``: the least distance from ``q`` to the tree's rows and how many rows
    attain it exactly. The distance of tree row ``p`` is ``sq_dist`` over the tree's
    columns (a missing value at 0) plus, when ``R2`` is not empty, ``pattern_offset(P[ids[p]],
    qpat, R2)``. The box bounds leave the offsets out (they are >= 0), so they still
    bound every distance in the box, and the traversal inspects equal bounds: every
    tie is counted."""
    Xp, ids, nstart, nend = T[0], T[1], T[4], T[5]
    best = np.inf
    ties = 0
    patterned = R2.shape[0] > 0
    near = np.int64(0)
    stack, bound, sp, qn = walk(T, q, near)
    while True:
        node, sp = next_leaf(T, q, qn, near, stack, bound, sp, best)
        if node < 0:
            return best, ties
        for p in range(nstart[node], nend[node]):
            dd = sq_dist(Xp, p, q)
            if patterned:
                dd += pattern_offset(P[ids[p]], qpat, R2)
            if dd < best:
                best = dd
                ties = 1
            elif dd == best:
                ties += 1


@njit(cache=True, nogil=True, parallel=True)
def nearest_all_patterns(T, Q, QP, P, R2, out_d2, out_ties):
    """``nearest_with_patterns`` for every row of ``Q`` (its pattern the row of ``QP``;
    a read-only tree: safe in parallel)."""
    for i in prange(Q.shape[0]):
        d2, t = nearest_with_patterns(T, Q[i], QP[i], P, R2)
        out_d2[i] = d2
        out_ties[i] = t


def nearest_all(T, Q, out_d2, out_ties):
    """``nearest_all_patterns`` without missing values: the least ``sq_dist`` from each
    row of ``Q`` to the tree's rows and its multiplicity."""
    none = np.empty((Q.shape[0], 0), np.int32)
    nearest_all_patterns(T, Q, none, np.empty((0, 0), np.int32), np.empty(0), out_d2, out_ties)


@njit(cache=True, nogil=True)
def _cmp(A, i, B, j):
    """Row ``A[i]`` against ``B[j]``, column by column: NaN (a missing value) after
    every number and equal to NaN, as ``np.lexsort`` orders it."""
    for c in range(A.shape[1]):
        a = A[i, c]
        b = B[j, c]
        if a != a or b != b:
            if a != a and b != b:
                continue
            return 1 if a != a else -1
        if a < b:
            return -1
        if a > b:
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
def score_rows(Zo, Uz, idx, d2, ties, Xs, Ms, half_width, half_width_m, counted, Po, Up, R2, out_credit):
    """Sums over the rows of one chunk (``out_credit``, when not empty: each row's DBRL
    credit too, for the household risk).

    ``Zo`` (h, d): the originals, standardized exactly as the tree's rows; ``idx``:
    each row's masked point in ``Uz`` (standardized) with its nearest distance ``d2``
    and ``ties``; ``Po``, ``Up``: their missing-value patterns, ``R2`` what a
    difference adds (``pattern_offset``; no column: no QI with missing values).
    ``Xs``/``Ms`` (h, e): original and masked values in the same units (NaN: a
    missing value), and ``half_width`` (e,): p times the original's sd in those
    units; ``half_width_m``: p times the masked sd (sdcMicro's variant). ``counted``
    (e,): 0 for the columns left out of interval disclosure (missing-value
    indicators: a missing value is scored on its own column), 2 for a nominal QI's
    category code (a change of category is outside: two values outside for sdcMicro's
    variant, as its two one-hot columns, one when either code is -1), else 1.

    Returns ``(dbrl_credit, inside_all, inside_sdcmicro)``: the summed credit; the
    rows whose every original value lies within ``half_width`` of the masked value;
    the rows with at most one value outside ``half_width_m`` (sdcMicro's dRisk). A
    missing original is inside exactly when its masked value is missing too; a value
    against a missing one is outside.
    """
    h = Zo.shape[0]
    e = Xs.shape[1]
    credit = 0.0
    inside = 0
    inside_sdc = 0
    for i in range(h):
        u = idx[i]
        dd = sq_dist(Zo, i, Uz[u])
        if R2.shape[0] > 0:
            dd += pattern_offset(Po[i], Up[u], R2)
        c = 0.0
        if dd <= d2[u]:  # the same expression as in the tree: equal when tied
            c = 1.0 / ties[u]
            credit += c
        if out_credit.shape[0] > 0:
            out_credit[i] = c
        out = 0
        out_m = 0
        for j in range(e):
            if not counted[j]:
                continue
            x = Xs[i, j]
            m = Ms[i, j]
            if counted[j] == 2:
                if x != m:
                    out += 1
                    out_m += 2 if x >= 0 and m >= 0 else 1
                continue
            if x != x or m != m:  # a missing value: inside only against a missing one
                if not (x != x and m != m):
                    out += 1
                    out_m += 1
                continue
            t = abs(x - m)
            if not t <= half_width[j]:
                out += 1
            if not t <= half_width_m[j]:
                out_m += 1
        if out == 0:
            inside += 1
        if out_m <= 1:
            inside_sdc += 1
    return credit, inside, inside_sdc


# ---------------------------------------------------------------- class-based risks


@njit(cache=True, nogil=True)
def household_products(codes, kidx, r_class, r_row, q, q_row, risky, threshold):
    """Households re-identified if any member is (sdcMicro's hierarchical risk): for
    row ``i`` of household ``h = codes[i]`` in class ``kidx[i]``, ``q[h] *= 1 -
    r_class[kidx[i]]`` and ``q_row[h] *= 1 - r_row[i]`` (``r_row`` empty: skipped), and
    ``risky[h] = 1`` when ``r_class[kidx[i]] > threshold``. ``q`` and ``q_row`` start at
    1: ``1 - q[h]`` is the household's risk. The rows are taken in row order, so every
    product is the same whatever the chunks were."""
    per_row = r_row.shape[0] > 0
    for i in range(codes.shape[0]):
        h = codes[i]
        r = r_class[kidx[i]]
        q[h] *= 1.0 - r
        if r > threshold:
            risky[h] = 1
        if per_row:
            q_row[h] *= 1.0 - r_row[i]


@njit(cache=True, nogil=True)
def class_totals(idx, w, f, W):
    """Add one chunk's rows to their classes: ``f[c] += 1`` and (``w`` not empty)
    ``W[c] += w[i]`` for row ``i`` of class ``c = idx[i]``. The rows are added in row
    order, one after the other, so each class's sum of weights is the same whatever
    the chunks are (no partial sums to round differently)."""
    weighted = w.shape[0] > 0
    for i in range(idx.shape[0]):
        c = idx[i]
        f[c] += 1
        if weighted:
            W[c] += w[i]


@njit(cache=True, nogil=True)
def _risk_of_pair(a, x):
    """sdcMicro's risk of a class of two rows, ``p/(1-p) - (p/(1-p))^2 log(1/p)``, with
    ``a = p/(1-p)`` and ``x = 1/p - 1`` (``log(1/p) = log1p(x)``). For a large ``a`` (a
    population class barely larger than 2) the two terms nearly cancel: the series
    ``sum_{m>=2} (-1)^m a^(2-m) / m`` (the same value, -> 1/2 as a grows) instead."""
    if a > 1e3:
        r = 0.0
        t = 1.0
        for m in range(2, 11):
            r += t / m if m % 2 == 0 else -t / m
            t /= a
        return r
    return a - a * a * math.log1p(x)


@njit(cache=True, nogil=True)
def individual_risk(f, F, out):
    """sdcMicro's individual (re-identification) risk of each class, the approximation
    ``indivRisk(method="approx")`` that ``measure_risk`` uses (Benedetti & Franconi
    1998; Franconi & Polettini 2004), from the sample frequency ``f`` and the estimated
    population frequency ``F`` (the class's sum of sampling weights), ``p = f / F``:

    * ``f == F``: ``1 / f`` (the class is the whole population);
    * ``f = 1``: ``p / (1 - p) * log(1 / p)``;
    * ``f = 2``: ``p / (1 - p) - (p / (1 - p))^2 * log(1 / p)``;
    * ``f > 2``: ``p / (f - (1 - p))``.

    Computed as ``a = p / (1 - p) = f / (F - f)`` and ``log(1 / p) = log1p((F - f) / f)``
    (no cancellation as ``p`` nears 1). ``F >= f`` (every weight is at least 1)."""
    for k in range(f.shape[0]):
        fk = float(f[k])
        Fk = F[k]
        if Fk == fk:
            out[k] = 1.0 / fk
            continue
        a = fk / (Fk - fk)
        x = (Fk - fk) / fk
        if f[k] == 1:
            out[k] = a * math.log1p(x)
        elif f[k] == 2:
            out[k] = _risk_of_pair(a, x)
        else:
            p = fk / Fk
            out[k] = p / (fk - (1.0 - p))


@njit(cache=True, nogil=True)
def class_summary(f, F, r, threshold):
    """The sums over the classes (``f`` rows each, population ``F``, individual risk
    ``r``; a class of no row is skipped) behind ARX's and sdcMicro's figures:

    ``(rows, classes, least f, least F, rows with 1/f > threshold, rows with 1/F >
    threshold, sum of f/F, sum of F, sum of f r, largest r, rows with r > threshold)``.
    The classes are summed in their order (the sorted table's): the same for any
    chunking."""
    n = 0
    classes = 0
    fmin = np.inf
    Fmin = np.inf
    risky_f = 0
    risky_F = 0
    share = 0.0
    total_F = 0.0
    expected = 0.0
    rmax = 0.0
    risky_r = 0
    for k in range(f.shape[0]):
        fk = f[k]
        if fk == 0:
            continue
        n += fk
        classes += 1
        fmin = min(fmin, float(fk))
        Fmin = min(Fmin, F[k])
        if 1.0 / fk > threshold:
            risky_f += fk
        if 1.0 / F[k] > threshold:
            risky_F += fk
        share += fk / F[k]
        total_F += F[k]
        expected += fk * r[k]
        rmax = max(rmax, r[k])
        if r[k] > threshold:
            risky_r += fk
    return n, classes, fmin, Fmin, risky_f, risky_F, share, total_F, expected, rmax, risky_r
