"""The one move/swap local search, shared by polish (``engine.kernels.search.polish``)
and the refinement (``engine.kernels.search.refine``).

A group A trades records with each group B of its near list, with the exact SSE
change (``mu`` = group mean, ``a`` = size of A, ``b`` = size of B):

* move x from A to B: ``b/(b+1) |x-mu_B|^2 - a/(a-1) |x-mu_A|^2``;
* swap x in A with y in B:
  ``|y-mu_A|^2 - |x-mu_A|^2 + |x-mu_B|^2 - |y-mu_B|^2 - (1/a + 1/b) |x-y|^2``, which
  simplifies to ``2 (s_y - s_x) - (1/a + 1/b) |x - y|^2`` with ``s_v = v . (mu_B - mu_A)``.

Sizes: ``lo = k``, ``hi = 2k - 1``. A move needs the source to keep at least k rows
and the target to stay at most 2k-1; swaps keep sizes; so a group above 2k-1 rows
(a table of fewer than 2k rows, V-MDAV's tail) can only shrink.

A round (``visit_round``) visits the groups in id order; a group is visited when
it, or one of its near groups, changed in the previous round (``active``); at each
visit the best improving operation with one of its near groups (ties: the first
found, in near-list then slot order) is applied, repeatedly, until none improves by
more than ``tol``.

Layout: the rows of each group sit in ``cap`` = max(2k-1, largest group)
consecutive slots (group g at slots ``g*cap .. g*cap+cap-1``) of a copy ``P`` of
their values, ``rid`` the row of each slot, so a visit reads a few contiguous runs
of memory; a move copies one row to the end of its new group (the source's last
slot fills the hole), a swap exchanges two slots. Serial, fixed visiting order: the
result depends only on the input and the settings (not on threads).
"""

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def group_mean(sums, counts, mu, g):
    """``mu[g] = sums[g] * (1 / counts[g])``: the mean every SSE change is computed from."""
    inv = 1.0 / counts[g]
    for j in range(sums.shape[1]):
        mu[g, j] = sums[g, j] * inv


@njit(cache=True, nogil=True)
def _d2(P, s, mu, g):
    v = 0.0
    for j in range(P.shape[1]):
        t = P[s, j] - mu[g, j]
        v += t * t
    return v


@njit(cache=True, nogil=True)
def best_op(P, A, near, counts, mu, cap, k, hi, dA, dB, yA, rA, tol):
    """The best operation between group A and its near groups:
    ``(delta, kind, p, q, B)``, kind 0 none, 1 move slot p of A to B, 2 move slot q
    of B to A, 3 swap them. ``dA``, ``dB``, ``yA``, ``rA``: scratch of ``cap``.

    As ``|x - y| <= |x - mu_A| + |y - mu_A|``, a swap whose
    ``2 (s_y - s_x) - (1/a + 1/b) (|x - mu_A| + |y - mu_A|)^2`` cannot beat the best
    found is skipped without computing ``|x - y|^2``. (The visits call ``scan_ops``
    with their own scratch; this allocates the rest.)"""
    return scan_ops(P, A, near, counts, mu, cap, k, hi, dA, dB, yA, rA, np.empty(cap), np.empty(P.shape[1]), tol)


@njit(cache=True, nogil=True, inline="always")
def _b_terms(P, baseB, b, df, mu, A, B, can_ba, ma, cb, yA, dB, mB):
    """For each row y of B: ``yA`` := s_y, ``dB`` := |y - mu_A| and (``can_ba``) ``mB`` := the
    change of its move to A, ``ma |y - mu_A|^2 - cb |y - mu_B|^2``, in one pass over y's
    columns (``scan_ops``)."""
    d = P.shape[1]
    for q in range(b):
        sy = baseB + q
        v = 0.0
        ya = 0.0
        if can_ba:
            yb = 0.0
            for j in range(d):
                x = P[sy, j]
                v += x * df[j]
                ta = x - mu[A, j]
                ya += ta * ta
                tb = x - mu[B, j]
                yb += tb * tb
            mB[q] = ma * ya - cb * yb
        else:
            for j in range(d):
                x = P[sy, j]
                v += x * df[j]
                ta = x - mu[A, j]
                ya += ta * ta
        yA[q] = v
        dB[q] = np.sqrt(ya)


@njit(cache=True, nogil=True)
def scan_ops(P, A, near, counts, mu, cap, k, hi, dA, dB, yA, rA, mB, df, tol):
    """``best_op`` with two more scratch arrays: ``mB`` (``cap``), ``df`` (d).

    The same values as the plain loops (each sum over the columns in column order,
    ``mu_B - mu_A`` column by column), computed together: a row's projection and its
    distances to both means in one pass over its columns (independent chains of adds,
    which the processor overlaps), each B row's move to A computed with its swap
    terms and compared after A's rows (the order of discovery, hence the ties, is the
    plain loops')."""
    a = counts[A]
    baseA = A * cap
    d = P.shape[1]
    for p in range(a):
        v = _d2(P, baseA + p, mu, A)
        dA[p] = v
        rA[p] = np.sqrt(v)
    best_d = -tol
    best_k = 0
    bp = -1
    bq = -1
    bB = -1
    invA = 1.0 / a
    ca = a / (a - 1.0) if a > 1 else 0.0
    for t in range(near.shape[1]):
        B = near[A, t]
        if B < 0 or B == A or counts[B] == 0:
            continue
        b = counts[B]
        baseB = B * cap
        w = invA + 1.0 / b
        for j in range(d):
            df[j] = mu[B, j] - mu[A, j]
        can_ba = b > k and a < hi
        _b_terms(P, baseB, b, df, mu, A, B, can_ba, a / (a + 1.0), b / (b - 1.0) if b > 1 else 0.0, yA, dB, mB)
        can_ab = a > k and b < hi
        mb = b / (b + 1.0)
        for p in range(a):
            sx = baseA + p
            v = 0.0
            if can_ab:
                xb = 0.0
                for j in range(d):
                    x = P[sx, j]
                    v += x * df[j]
                    tb = x - mu[B, j]
                    xb += tb * tb
                dl = mb * xb - ca * dA[p]
                if dl < best_d:
                    best_d, best_k, bp, bq, bB = dl, 1, p, -1, B
            else:
                for j in range(d):
                    v += P[sx, j] * df[j]
            rp = rA[p]
            for q in range(b):
                g2 = 2.0 * (yA[q] - v)
                rr = rp + dB[q]
                if g2 - w * (rr * rr) * (1.0 + 1e-12) >= best_d:
                    continue  # even the largest possible |x - y| cannot beat the best
                sy = baseB + q
                s2 = 0.0
                for j in range(d):
                    tt = P[sx, j] - P[sy, j]
                    s2 += tt * tt
                dl = g2 - w * s2
                if dl < best_d:
                    best_d, best_k, bp, bq, bB = dl, 3, p, q, B
        if can_ba:
            for q in range(b):
                dl = mB[q]
                if dl < best_d:
                    best_d, best_k, bp, bq, bB = dl, 2, -1, q, B
    return best_d, best_k, bp, bq, bB


@njit(cache=True, nogil=True)
def move(P, rid, sums, counts, mu, cap, src, p, dst):
    """Slot p of group src to the end of group dst; src's last slot fills the hole."""
    d = P.shape[1]
    s = src * cap + p
    e = dst * cap + counts[dst]
    for j in range(d):
        v = P[s, j]
        P[e, j] = v
        sums[src, j] -= v
        sums[dst, j] += v
    rid[e] = rid[s]
    last = src * cap + counts[src] - 1
    if last != s:
        for j in range(d):
            P[s, j] = P[last, j]
        rid[s] = rid[last]
    counts[src] -= 1
    counts[dst] += 1
    group_mean(sums, counts, mu, src)
    group_mean(sums, counts, mu, dst)


@njit(cache=True, nogil=True)
def swap(P, rid, sums, counts, mu, cap, A, p, B, q):
    """Slot p of group A and slot q of group B exchange their rows."""
    d = P.shape[1]
    s = A * cap + p
    e = B * cap + q
    for j in range(d):
        x = P[s, j]
        y = P[e, j]
        P[s, j] = y
        P[e, j] = x
        sums[A, j] += y - x
        sums[B, j] += x - y
    r = rid[s]
    rid[s] = rid[e]
    rid[e] = r
    group_mean(sums, counts, mu, A)
    group_mean(sums, counts, mu, B)


@njit(cache=True, nogil=True, inline="always")
def visited(A, counts, near, active):
    """A round visits group A when it has rows and it, or one of its near groups, changed
    in the previous round (``active``)."""
    if counts[A] == 0:
        return False
    if active[A] != 0:
        return True
    for t in range(near.shape[1]):
        B = near[A, t]
        if B >= 0 and active[B] != 0:
            return True
    return False


@njit(cache=True, nogil=True)
def visit_round(P, rid, sums, counts, mu, cap, near, active, nxt, k, hi, tol, stop, stats):
    """One round of visits (module docstring). ``nxt[g]`` := 1 for the groups it
    changed, else 0; ``stats`` accumulates [moves, swaps, sum of applied changes].
    Returns ``(operations applied, SSE lowered)``. ``stop`` (int64, one element) is
    read between visits: set by the caller (an error, a signal), the round returns
    within one visit, the partition still valid (every operation keeps sizes)."""
    G = near.shape[0]
    dA = np.empty(cap)
    dB = np.empty(cap)
    yA = np.empty(cap)
    rA = np.empty(cap)
    mB = np.empty(cap)
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
            dl, kind, p, q, B = scan_ops(P, A, near, counts, mu, cap, k, hi, dA, dB, yA, rA, mB, df, tol)
            if kind == 0:
                break
            if kind == 1:
                move(P, rid, sums, counts, mu, cap, A, p, B)
            elif kind == 2:
                move(P, rid, sums, counts, mu, cap, B, q, A)
            else:
                swap(P, rid, sums, counts, mu, cap, A, p, B, q)
            stats[0 if kind < 3 else 1] += 1
            stats[2] += dl
            gain -= dl
            nxt[A] = 1
            nxt[B] = 1
            applied += 1
    return applied, gain
