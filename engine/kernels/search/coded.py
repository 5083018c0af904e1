"""Polish with an exact mismatch distance on the codes of nominal QIs.

A nominal QI of more than ``ONE_HOT_MAX`` categories is encoded for the grouping as
``EMBED_DIMS`` columns of a random unit vector per category (``engine.encode.mixed``):
two different categories are at the distance ``w`` only on average, and every kernel
runs on 16 columns for one QI. Here such a QI t is its *code*, with the distance of its
one-hot vector scaled by ``sqrt(h_t)``, ``h_t = w_t / 2`` (what one-hot columns give a
nominal QI of few categories), computed without the vector. For a group G of g rows,
``c_G(a)`` of them of code a and ``S_G = sum_a c_G(a)^2``:

* two rows: ``w_t`` if their codes differ, else 0;
* a row of code a to G's centroid: ``h_t * (g*g - 2*c_G(a)*g + S_G) / (g*g)``, the
  numerator an exact integer (never negative);
* ``x . (mu_B - mu_A)`` (a swap's ``s_x``): ``h_t * (c_B(a)/b - c_A(a)/a)``;
* G's SSE: ``h_t * (g - S_G / g)``.

The total is the Euclidean part over the *dense* columns ``Z[:, :ndense]`` (numbers,
dates, ranks, missing-value indicators, one-hot columns) plus the coded parts. It is
Euclidean in the one-hot space, so the triangle inequality (``moves.best_op``'s swap
bound) holds.

``polish_coded(Z, ndense, K, w, labels, k, rounds, near_count, R, stop, min_gain,
descent, window)`` is ``polish.polish`` with that objective: the same moves and
swaps, sizes k..2k-1, visiting order, ``active`` logic, tolerance, rounds,
``min_gain`` and ``stop`` (``moves.visit_round``, adapted here). ``K`` (n, q) holds each
row's code of each coded QI (any int64 values: only equality counts), ``w`` (q,) their
weights; the columns of ``Z`` after ``ndense`` (the coded QIs' embedding columns) only
choose the candidates: the near lists come from the group means of *all* d columns,
built and refreshed exactly as ``polish`` does (``near.near_by_windows`` /
``near.nearest_groups``, ``near.refresh_lists``). Every move/swap's change, the SSE and
the gains of the stopping rule use only the dense columns and the codes.
``polish_coded_seams(..., part, R, stop, min_gain)`` is ``polish.polish_seams`` likewise
(the first round from the groups with a near group in another part).

Layout: ``P`` holds the dense values of each group's rows in ``cap`` slots (as in
``polish``), ``PK`` their codes beside them, moved and swapped with the rows, and ``SC``
each slot's count of its code in its own group (``SS``: each group's sums of squared
counts), recounted for the two groups an operation changes. Counts are found by scanning
a group's slots (at most 2k-1 rows: O(g^2 q) for a group's own, O(a b q) for a pair's
cross counts), so the cost does not depend on the number of categories (a QI of 100,000
codes costs what one of 2 costs) and no per-category table is kept. With no coded column
and ``ndense`` = d the arithmetic is ``polish``'s, operation for operation: the same
labels (tested). Memory: ``P`` has ndense columns instead of d; ``PK`` and ``SC`` add 2 q
int64 per slot; the near lists keep the (G, d) sums of all the columns.

Serial, fixed order: deterministic whatever the threads. Checked against one-hot
columns ``sqrt(w_t / 2) * onehot`` beside the dense ones (``tests/reference_coded.py``).
"""

import numpy as np
from numba import njit

from ..groups import group_sums, slot_sums
from .moves import group_mean, move, swap, visited
from .near import refresh_lists
from .polish import NEAR_DESCENT, NEAR_WINDOW, SEAM_DESCENT, near_lists


# -- the coded distance ---------------------------------------------------------------


@njit(cache=True, nogil=True)
def code_counts(PK, base, g, out, S):
    """``out[s, t]`` := the rows among slots ``base .. base+g-1`` whose code in column t
    equals slot s's (itself included), for those slots s; ``S[t]`` := ``sum_a c(a)^2``
    (the sum of those counts)."""
    for t in range(PK.shape[1]):
        s = 0
        for p in range(g):
            v = PK[base + p, t]
            c = 0
            for u in range(g):
                c += PK[base + u, t] == v
            out[base + p, t] = c
            s += c
        S[t] = s


@njit(cache=True, nogil=True)
def cross_counts(PK, baseA, a, baseB, b, w, cAB, cBA, mm):
    """For slots p of A and u of B: ``cAB[p, t]`` := c_B(code of p), ``cBA[u, t]`` :=
    c_A(code of u), ``mm[p, u]`` := the coded part of ``|x - y|^2`` (the sum of ``w_t``
    over the columns whose codes differ)."""
    q = PK.shape[1]
    for p in range(a):
        for t in range(q):
            cAB[p, t] = 0
    for u in range(b):
        for t in range(q):
            cBA[u, t] = 0
    for p in range(a):
        for u in range(b):
            m = 0.0
            for t in range(q):  # (no branch: equal codes are as likely as not)
                e = np.int64(PK[baseA + p, t] == PK[baseB + u, t])
                cAB[p, t] += e
                cBA[u, t] += e
                m += w[t] * (1 - e)
            mm[p, u] = m


@njit(cache=True, nogil=True)
def centroid_d2(cnt, p, S, gi, g, hs, r):
    """The coded part of a row's squared distance to the centroid of g rows: ``cnt[p,
    t]`` of them share its code in column t, ``S[gi, t]`` is their sum of squared counts,
    ``hs[r, t]`` = ``h_t / (g*g)`` (``scaled_weights``). 2-d arguments, not rows of them:
    no array views in the hot loops."""
    v = 0.0
    gg = g * g
    for t in range(cnt.shape[1]):
        num = gg - 2 * cnt[p, t] * g + S[gi, t]
        v += hs[r, t] * float(num)
    return v


@njit(cache=True, nogil=True)
def coded_proj(cB, iB, cA, iA, hs):
    """The coded part of ``x . (mu_B - mu_A)``: ``sum_t h_t (cB[iB, t] / b - cA[iA, t] / a)``
    (``cB``, ``cA``: x's code counts in B and in A; ``hs[3, t]`` = ``h_t / b``, ``hs[2, t]``
    = ``h_t / a``)."""
    v = 0.0
    for t in range(cB.shape[1]):
        v += hs[3, t] * cB[iB, t] - hs[2, t] * cA[iA, t]
    return v


@njit(cache=True, nogil=True)
def scaled_weights(h, g, hs, r2, r1):
    """``hs[r2, t]`` := ``h_t / (g*g)``, ``hs[r1, t]`` := ``h_t / g``: the divisions of the
    coded distances, once per group instead of once per row (A's in rows 0 and 2, B's in
    rows 1 and 3)."""
    for t in range(h.shape[0]):
        hs[r2, t] = h[t] / float(g * g)
        hs[r1, t] = h[t] / float(g)


@njit(cache=True, nogil=True)
def coded_sse(Z, ndense, K, w, labels, G):
    """The objective of ``polish_coded`` from scratch: the SSE of the dense columns
    (``groups.partition_sse``'s arithmetic on ``Z[:, :ndense]``) plus each group's coded
    SSE ``sum_t h_t (g - S_t / g)`` (counted as a visit counts: O(g^2) per group, for
    partitions of small groups)."""
    n = Z.shape[0]
    q = K.shape[1]
    sums, counts = group_sums(Z, labels, G)
    s = 0.0
    for i in range(n):
        g = labels[i]
        inv = 1.0 / counts[g]
        for j in range(ndense):
            t = Z[i, j] - sums[g, j] * inv
            s += t * t
    if q == 0:
        return s
    # each group's rows' codes side by side, to count them as a visit does
    start = np.zeros(G + 1, np.int64)
    for i in range(n):
        start[labels[i] + 1] += 1
    for g in range(G):
        start[g + 1] += start[g]
    KK = np.empty((n, q), np.int64)
    fill = start[:G].copy()
    for i in range(n):
        g = labels[i]
        for t in range(q):
            KK[fill[g], t] = K[i, t]
        fill[g] += 1
    cnt = np.empty((n, q), np.int64)
    S = np.empty(q, np.int64)
    for g in range(G):
        m = start[g + 1] - start[g]
        if m == 0:
            continue
        code_counts(KK, start[g], m, cnt, S)
        for t in range(q):
            s += 0.5 * w[t] * (m - S[t] / m)
    return s


# -- the search -----------------------------------------------------------------------


@njit(cache=True, nogil=True)
def _d2(P, s, mu, g):
    v = 0.0
    for j in range(P.shape[1]):
        t = P[s, j] - mu[g, j]
        v += t * t
    return v


@njit(cache=True, nogil=True, inline="always")
def _proj_d2(P, s, mu, B, df, with_d2):
    """The dense ``x . (mu_B - mu_A)`` (``df`` = ``mu_B - mu_A``) of slot s and, with
    ``with_d2``, its ``|x - mu_B|^2``: one pass over the columns, each sum in column
    order (``polish``'s values)."""
    v = 0.0
    xb = 0.0
    if with_d2:
        for j in range(P.shape[1]):
            x = P[s, j]
            v += x * df[j]
            tb = x - mu[B, j]
            xb += tb * tb
    else:
        for j in range(P.shape[1]):
            v += P[s, j] * df[j]
    return v, xb


@njit(cache=True, nogil=True, inline="always")
def _rows_of_b(P, SC, SS, A, B, a, b, cap, mu, hs, cBA, df, dB, yA, mB, can_ba):
    """Per slot u of B: ``yA[u]`` = s_y, ``dB[u]`` = ``|y - mu_A|`` and, with
    ``can_ba``, ``mB[u]`` = the change of moving y to A."""
    baseB = B * cap
    cb = b / (b - 1.0) if b > 1 else 0.0
    ma = a / (a + 1.0)
    for u in range(b):
        sy = baseB + u
        v = 0.0
        ya = 0.0
        yb = 0.0
        if can_ba:
            for j in range(P.shape[1]):
                x = P[sy, j]
                v += x * df[j]
                ta = x - mu[A, j]
                ya += ta * ta
                tb = x - mu[B, j]
                yb += tb * tb
        else:
            for j in range(P.shape[1]):
                x = P[sy, j]
                v += x * df[j]
                ta = x - mu[A, j]
                ya += ta * ta
        yA[u] = v + coded_proj(SC, sy, cBA, u, hs)
        ya += centroid_d2(cBA, u, SS, A, a, hs, 0)
        dB[u] = np.sqrt(ya)
        if can_ba:
            mB[u] = ma * ya - cb * (yb + centroid_d2(SC, sy, SS, B, b, hs, 1))


@njit(cache=True, nogil=True)
def best_op_coded(P, PK, SC, SS, A, near, counts, mu, cap, k, hi, h, w, hs, dA, dB, yA, rA, mB, cAB, cBA, mm,
                  df, tol):
    """``moves.best_op`` with the coded distance: ``(delta, kind, p, q, B)``. ``SC``,
    ``SS``: each slot's own-group code counts and each group's sums of their squares
    (``code_counts``). Scratch: ``hs`` (4, q) (``scaled_weights``); of ``cap``: ``dA``
    (|x-mu_A|^2), ``dB`` (|y-mu_A|), ``yA`` (s_y), ``rA`` (|x-mu_A|), ``mB`` (the move of
    y to A); ``cAB``, ``cBA`` (cap, q) int64, ``mm`` (cap, cap), ``df`` (ndense)."""
    a = counts[A]
    baseA = A * cap
    d = P.shape[1]
    scaled_weights(h, a, hs, 0, 2)
    for p in range(a):
        v = _d2(P, baseA + p, mu, A) + centroid_d2(SC, baseA + p, SS, A, a, hs, 0)
        dA[p] = v
        rA[p] = np.sqrt(v)
    best_d, best_k, bp, bq, bB = -tol, 0, -1, -1, -1
    invA = 1.0 / a
    ca = a / (a - 1.0) if a > 1 else 0.0
    for t in range(near.shape[1]):
        B = near[A, t]
        if B < 0 or B == A or counts[B] == 0:
            continue
        b = counts[B]
        baseB = B * cap
        wt = invA + 1.0 / b
        scaled_weights(h, b, hs, 1, 3)
        for j in range(d):
            df[j] = mu[B, j] - mu[A, j]
        if PK.shape[1] > 0:  # (else mm stays 0.0)
            cross_counts(PK, baseA, a, baseB, b, w, cAB, cBA, mm)
        can_ba = b > k and a < hi
        _rows_of_b(P, SC, SS, A, B, a, b, cap, mu, hs, cBA, df, dB, yA, mB, can_ba)
        can_ab = a > k and b < hi
        mb = b / (b + 1.0)
        for p in range(a):
            sx = baseA + p
            v, xb = _proj_d2(P, sx, mu, B, df, can_ab)
            v += coded_proj(cAB, p, SC, sx, hs)
            if can_ab:
                dl = mb * (xb + centroid_d2(cAB, p, SS, B, b, hs, 1)) - ca * dA[p]
                if dl < best_d:
                    best_d, best_k, bp, bq, bB = dl, 1, p, -1, B
            rp = rA[p]
            for u in range(b):
                g2 = 2.0 * (yA[u] - v)
                rr = rp + dB[u]
                if g2 - wt * (rr * rr) * (1.0 + 1e-12) >= best_d:
                    continue  # even the largest possible |x - y| cannot beat the best
                sy = baseB + u
                s2 = 0.0
                for j in range(d):
                    tt = P[sx, j] - P[sy, j]
                    s2 += tt * tt
                dl = g2 - wt * (s2 + mm[p, u])
                if dl < best_d:
                    best_d, best_k, bp, bq, bB = dl, 3, p, u, B
        if can_ba:
            for u in range(b):
                dl = mB[u]
                if dl < best_d:
                    best_d, best_k, bp, bq, bB = dl, 2, -1, u, B
    return best_d, best_k, bp, bq, bB


@njit(cache=True, nogil=True)
def _move_codes(PK, counts, cap, src, p, dst):
    """The codes' half of ``moves.move`` (called before it, with the sizes before it)."""
    s = src * cap + p
    e = dst * cap + counts[dst]
    last = src * cap + counts[src] - 1
    for t in range(PK.shape[1]):
        PK[e, t] = PK[s, t]
        PK[s, t] = PK[last, t]


@njit(cache=True, nogil=True)
def _swap_codes(PK, cap, A, p, B, q):
    s = A * cap + p
    e = B * cap + q
    for t in range(PK.shape[1]):
        x = PK[s, t]
        PK[s, t] = PK[e, t]
        PK[e, t] = x


@njit(cache=True, nogil=True)
def _apply(P, PK, SC, SS, rid, sums, counts, mu, cap, kind, A, p, B, u):
    """Operation ``kind`` (``best_op_coded``) on the rows, their codes and the two
    groups' code counts."""
    if kind == 1:
        _move_codes(PK, counts, cap, A, p, B)
        move(P, rid, sums, counts, mu, cap, A, p, B)
    elif kind == 2:
        _move_codes(PK, counts, cap, B, u, A)
        move(P, rid, sums, counts, mu, cap, B, u, A)
    else:
        _swap_codes(PK, cap, A, p, B, u)
        swap(P, rid, sums, counts, mu, cap, A, p, B, u)
    if PK.shape[1] > 0:
        code_counts(PK, A * cap, counts[A], SC, SS[A])
        code_counts(PK, B * cap, counts[B], SC, SS[B])


@njit(cache=True, nogil=True)
def visit_round_coded(P, PK, SC, SS, rid, sums, counts, mu, cap, near, active, nxt, k, hi, tol, stop, stats, w):
    """``moves.visit_round`` with ``best_op_coded``: one round of visits, the codes
    moved and swapped with their rows. Returns ``(operations applied, SSE lowered)``."""
    G = near.shape[0]
    h = 0.5 * w
    hs = np.empty((4, w.shape[0]))
    dA, dB, yA, rA, mB = np.empty(cap), np.empty(cap), np.empty(cap), np.empty(cap), np.empty(cap)
    cAB = np.empty((cap, PK.shape[1]), np.int64)
    cBA = np.empty((cap, PK.shape[1]), np.int64)
    mm = np.zeros((cap, cap))
    df = np.empty(P.shape[1])
    applied = 0
    gain = 0.0
    for g in range(G):
        nxt[g] = 0
    for A in range(G):
        if stop[0] != 0:
            break
        if not visited(A, counts, near, active):
            continue
        for _ in range(8 * cap):  # (a bound on operations per visit: termination whatever the rounding)
            dl, kind, p, u, B = best_op_coded(P, PK, SC, SS, A, near, counts, mu, cap, k, hi, h, w, hs, dA, dB, yA,
                                              rA, mB, cAB, cBA, mm, df, tol)
            if kind == 0:
                break
            _apply(P, PK, SC, SS, rid, sums, counts, mu, cap, kind, A, p, B, u)
            stats[0 if kind < 3 else 1] += 1
            stats[2] += dl
            gain -= dl
            nxt[A] = 1
            nxt[B] = 1
            applied += 1
    return applied, gain


# -- the driver -----------------------------------------------------------------------


def polish_coded(Z, ndense, K, w, labels, k, rounds, near_count, R, stop, min_gain=0.0, descent=NEAR_DESCENT,
                 window=NEAR_WINDOW):
    """Relabel ``labels`` (int64, in place) with a lower SSE of the dense columns and the
    codes (module docstring); returns ``(rounds run, operations applied)``. The other
    arguments are ``polish.polish``'s."""
    return _run(Z, ndense, K, w, labels, k, rounds, near_count, np.empty(0, np.int64), R, stop, min_gain, descent,
                window)


def polish_coded_seams(Z, ndense, K, w, labels, k, rounds, near_count, part, R, stop, min_gain=0.0):
    """``polish.polish_seams`` with the coded distance: the first round visits only the
    groups with a near group in another part (``part[g]``: group g's part), and only their
    lists (and their near groups') get the ``SEAM_DESCENT`` two-hop refreshes before it."""
    return _run(Z, ndense, K, w, labels, k, rounds, near_count, part, R, stop, min_gain, SEAM_DESCENT, NEAR_WINDOW)


def _run(Z, ndense, K, w, labels, k, rounds, near_count, part, R, stop, min_gain, descent, window):
    """``polish._run`` with the coded layout: the near lists from all the columns, then
    the rounds on the dense columns and the codes."""
    n, d = Z.shape
    ndense = int(ndense)
    if K.ndim != 2 or K.shape[0] != n or w.shape != (K.shape[1],) or not 0 <= ndense <= d:
        raise ValueError(f"polish_coded: codes {K.shape}, weights {w.shape}, ndense {ndense} do not fit {Z.shape}")
    k, rounds, near_count = np.int64(k), np.int64(rounds), np.int64(near_count)
    if n == 0 or d == 0 or rounds <= 0 or near_count <= 0:
        return 0, 0
    G = int(labels.max()) + 1
    if G < 2:
        return 0, 0
    K = np.ascontiguousarray(K, dtype=np.int64)
    w = np.ascontiguousarray(w, dtype=np.float64)
    P, PK, SC, SS, rid, fsums, fmu, sums, counts, mu, cap = _layout(Z, np.int64(ndense), K, labels, np.int64(G), k)
    near, active = near_lists(fsums, fmu, counts, near_count, part, R, descent, window)  # (all d columns)
    sse = coded_sse(Z, np.int64(ndense), K, w, labels, np.int64(G))
    return _rounds(Z, P, PK, SC, SS, rid, fsums, fmu, sums, counts, mu, cap, near, active, labels, k, rounds, stop,
                   sse, float(min_gain), w)


@njit(cache=True, nogil=True)
def _layout(Z, ndense, K, labels, G, k):
    """``polish``'s layout of the dense columns (``P``, ``rid``, ``sums``, ``mu``) with the
    codes beside it (``PK``; ``SC``, ``SS``: ``code_counts`` of every group), and the sums
    and means of all the columns (``fsums``, ``fmu``: the near lists')."""
    n, d = Z.shape
    q = K.shape[1]
    fsums, counts = group_sums(Z, labels, G)
    cap = 2 * k - 1
    for g in range(G):
        if counts[g] > cap:
            cap = counts[g]
    P = np.empty((G * cap, ndense))
    PK = np.zeros((G * cap, q), np.int64)
    rid = np.full(G * cap, -1, np.int64)
    fill = np.zeros(G, np.int64)
    for i in range(n):
        g = labels[i]
        s = g * cap + fill[g]
        fill[g] += 1
        rid[s] = i
        for j in range(ndense):
            P[s, j] = Z[i, j]
        for t in range(q):
            PK[s, t] = K[i, t]
    sums = np.ascontiguousarray(fsums[:, :ndense])
    fmu = np.empty((G, d))
    mu = np.empty((G, ndense))
    SC = np.zeros((G * cap, q), np.int64)
    SS = np.zeros((G, q), np.int64)
    for g in range(G):
        group_mean(fsums, counts, fmu, g)
        group_mean(sums, counts, mu, g)
        code_counts(PK, g * cap, counts[g], SC, SS[g])
    return P, PK, SC, SS, rid, fsums, fmu, sums, counts, mu, cap


@njit(cache=True, nogil=True)
def _rounds(Z, P, PK, SC, SS, rid, fsums, fmu, sums, counts, mu, cap, near, active, labels, k, rounds, stop, sse,
            min_gain, w):
    """``polish``'s rounds (see its module docstring) with ``visit_round_coded``; writes
    the labels back."""
    G, L = near.shape
    n, d = Z.shape
    ndense = P.shape[1]
    nxt = np.zeros(G, np.int64)
    old_near = np.empty_like(near)
    ndist = np.empty(L)
    mark = np.full(G, -1, np.int64)
    stats = np.zeros(3)
    tol = 1e-12 * max(1.0, float(n * d))
    r = 0
    ops = 0
    while r < rounds:
        applied, gain = visit_round_coded(P, PK, SC, SS, rid, sums, counts, mu, cap, near, active, nxt, k, 2 * k - 1,
                                          tol, stop, stats, w)
        r += 1
        ops += applied
        if stop[0] != 0:
            break
        for g in range(G):
            active[g] = nxt[g]
        if applied == 0 or gain < min_gain * sse or r == rounds:  # (no refresh after the last round)
            break
        sse -= gain
        # sums from scratch (no drift): all columns for the near lists, the dense ones for the moves
        slot_sums(Z, rid, counts, cap, fsums)
        for g in range(G):
            for j in range(ndense):
                sums[g, j] = fsums[g, j]
            group_mean(fsums, counts, fmu, g)
            group_mean(sums, counts, mu, g)
        refresh_lists(fmu, counts, near, active, old_near, ndist, mark)
    for g in range(G):
        for t in range(counts[g]):
            labels[rid[g * cap + t]] = g
    return r, ops
