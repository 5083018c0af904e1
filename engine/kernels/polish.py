"""Polish: a cheap, bounded local search run on the streamed path's partitions.

``polish(Z, labels, k, rounds, near_count, R)`` lowers the SSE of a partition of the
rows of ``Z`` (labels 0..G-1, every group of at least k rows) by moves of single
records and swaps of two records between each group and its ``near_count``
nearest groups (by centroid), with the exact SSE change:

* move x from A to B: ``b/(b+1) |x-mu_B|^2 - a/(a-1) |x-mu_A|^2``;
* swap x in A with y in B:
  ``|y-mu_A|^2 - |x-mu_A|^2 + |x-mu_B|^2 - |y-mu_B|^2 - (1/a + 1/b) |x-y|^2``.

A move needs the source to keep at least k rows and the target to stay at most
2k-1; swaps keep sizes; so no group disappears or appears and the labels keep
their numbering (a group above 2k-1 rows can only shrink).

A round visits the groups in id order; a group is visited when it, or one of its
near groups, changed in the previous round (all in the first); at each visit the
best improving operation with one of its near groups (ties: the first found, in
near-list then row-slot order) is applied, repeatedly, until none improves by
more than ``tol`` (swaps are screened by a bound first: see ``_best_op``). Between
rounds the group sums are recomputed from scratch and the near lists of the
changed groups refreshed (two hops: the nearest among their lists' lists). It
stops after ``rounds`` rounds, at a round without change (a local optimum for
that neighbourhood) or, with ``min_gain`` > 0, after the first round whose applied
operations lowered the SSE by less than that fraction of it (their exact changes
summed in the serial order: deterministic).

Near lists: with rotations ``R`` (shape (r, d, d), r >= 1), the candidates of a
group are the groups within ``NEAR_WINDOW`` positions of it in 1 + r kd orders of
the centroids (median splits in the original axes and in each rotation), the
nearest kept, then refined by ``NEAR_DESCENT`` two-hop passes; about 1 us a group
where an exact kd-tree query costs about 25 us on 8 spread-out dimensions, for
nearly the same polish (tested). With an empty ``R``: exact kd-tree queries
(``engine.kernels.refine.nearest_groups``).

``stop`` (int64, one element) is read between group visits: a caller that sets
it (on an error or a signal) gets the kernel back within one visit, the labels
still a valid partition (every operation keeps sizes).

``polish_seams`` polishes a partition whose parts (units of the streamed path)
were polished on their own: its first round starts from the groups with a near
group in another part, and only the lists of the groups that round visits get the
two-hop refresh before it (``SEAM_DESCENT`` of them). With ``parallel`` the near
lists (windows, refreshes before the first round) run on all Numba threads, chunked
by group, each list computed as the serial kernel would: the same lists for any
thread count. ``polish_seams_parts`` polishes parts of the groups side by side
(``seam_parts``; measured and left off by default: ``config.POLISH_SEAM_PARTS``).

Layout: the rows of each group sit in ``cap`` = max(2k-1, largest group)
consecutive slots of a private copy ``P`` (group g at ``P[g*cap: g*cap+cap]``),
so a visit reads a few contiguous runs of memory; a move copies one row, a swap
exchanges two. Serial, fixed visiting order: the result depends only on ``Z``,
``labels`` and the settings (not on threads). Checked against the slow
``tests/reference_polish.py`` (with every group near every other, the result
is a local optimum of all moves and swaps, SSE recomputed from scratch).
"""

import numpy as np
from numba import get_num_threads, njit, prange

from .refine import nearest_groups  # (Python: all pairs for few groups, else a kd-tree; the same lists)
from .split import split_leaves

NEAR_WINDOW = 24   # positions on each side in every kd order
NEAR_DESCENT = 2   # two-hop refreshes of every list before the first round
SEAM_DESCENT = 1   # the same before a seam polish's first round, of the lists it visits (one: docs/notes/quality-at-scale.md)


def rotations(d: int, count: int = 3) -> np.ndarray:
    """``count`` fixed orthonormal (d, d) matrices, the same for every run and machine:
    normal draws of a fixed seed (PCG64), orthonormalized by Gram-Schmidt in plain
    Python floats (fixed order of operations; no LAPACK)."""
    rng = np.random.default_rng(20251124)
    out = np.empty((count, d, d))
    for r in range(count):
        raw = rng.normal(size=(d, d)).tolist()
        basis: list[list[float]] = []
        for v in raw:
            w = list(v)
            for b in basis:
                dot = 0.0
                for i in range(d):
                    dot += w[i] * b[i]
                for i in range(d):
                    w[i] -= dot * b[i]
            nrm = 0.0
            for i in range(d):
                nrm += w[i] * w[i]
            nrm = nrm ** 0.5
            basis.append([x / nrm for x in w])
        out[r] = np.array(basis).T
    return out


@njit(cache=True, nogil=True)
def _window_setup(sums, counts, near, R):
    """The centroids ``C``, the kd orders (``orders[o]``: the groups in order ``o``;
    ``pos[o, g]``: g's position) and the distances ``nd`` of the (emptied) lists."""
    G, L = near.shape
    d = sums.shape[1]
    C = np.empty((G, d))
    for g in range(G):
        inv = 1.0 / counts[g]
        for j in range(d):
            C[g, j] = sums[g, j] * inv
    nd = np.full((G, L), np.inf)
    for g in range(G):
        for t in range(L):
            near[g, t] = -1
    O = R.shape[0] + 1
    pos = np.empty((O, G), np.int64)  # position of each group in each kd order
    orders = np.empty((O, G), np.int64)
    return C, nd, pos, orders


@njit(cache=True, nogil=True)
def _kd_order(C, R, o, orders, pos):
    """kd order ``o`` of the centroids: the axes (o = 0), else rotation ``R[o - 1]``."""
    G, d = C.shape
    Y = np.empty((G, d))
    if o == 0:
        for g in range(G):  # (element by element: no shape-mismatch error path to compile)
            for j in range(d):
                Y[g, j] = C[g, j]
    else:
        for g in range(G):
            for j in range(d):
                v = 0.0
                for i in range(d):
                    v += C[g, i] * R[o - 1, i, j]
                Y[g, j] = v
    order, _ = split_leaves(Y, np.int64(4))  # int64, not a literal (one compiled version)
    for p in range(G):
        orders[o, p] = order[p]
        pos[o, order[p]] = p


@njit(cache=True, nogil=True)
def _window_one(g, C, pos, orders, W, near, nd, mark):
    """``near[g]``: the nearest among the groups within ``W`` positions of g in every
    order (``mark[h] == g``: h already a candidate of g)."""
    G, L = near.shape
    d = C.shape[1]
    mark[g] = g
    for o in range(orders.shape[0]):
        p = pos[o, g]
        for u in range(max(0, p - W), min(G, p + W + 1)):
            h = orders[o, u]
            if mark[h] == g:
                continue
            mark[h] = g
            dd = 0.0
            for j in range(d):
                tt = C[g, j] - C[h, j]
                dd += tt * tt
            if dd > nd[g, L - 1] or (dd == nd[g, L - 1] and (near[g, L - 1] >= 0 and h > near[g, L - 1])):
                continue
            i = L - 1
            while i > 0 and (nd[g, i - 1] > dd or (nd[g, i - 1] == dd and near[g, i - 1] > h)):
                nd[g, i] = nd[g, i - 1]
                near[g, i] = near[g, i - 1]
                i -= 1
            nd[g, i] = dd
            near[g, i] = h


@njit(cache=True, nogil=True)
def near_by_windows(sums, counts, near, R, W):
    """``near[g]``: the L nearest centroids to g's among the groups within ``W``
    positions of g in each kd order (axes, then each rotation in ``R``)."""
    C, nd, pos, orders = _window_setup(sums, counts, near, R)
    for o in range(orders.shape[0]):
        _kd_order(C, R, o, orders, pos)
    mark = np.full(near.shape[0], -1, np.int64)
    for g in range(near.shape[0]):
        _window_one(g, C, pos, orders, W, near, nd, mark)


@njit(cache=True, nogil=True, parallel=True)
def near_by_windows_parallel(sums, counts, near, R, W, nth):
    """``near_by_windows`` on ``nth`` threads: the orders side by side, then the groups
    in ``nth`` chunks, each with its own marks. Every list depends only on the
    centroids: the same lists for any thread count."""
    C, nd, pos, orders = _window_setup(sums, counts, near, R)
    for o in prange(orders.shape[0]):
        _kd_order(C, R, np.int64(o), orders, pos)  # (a prange index is unsigned: one specialization)
    G = near.shape[0]
    for c in prange(nth):
        mark = np.full(G, -1, np.int64)
        for g in range(c * G // nth, (c + 1) * G // nth):
            _window_one(g, C, pos, orders, W, near, nd, mark)


@njit(cache=True, nogil=True)
def _refresh_one(A, mu, near, old, nd, mark):
    """``near[A]``: the L nearest means among ``old[A]`` and the lists ``old[B]`` of
    its members (``mark[C] == A``: C seen; ``nd``: L distances, scratch)."""
    L = near.shape[1]
    d = mu.shape[1]
    for t in range(L):
        near[A, t] = -1
        nd[t] = np.inf
    mark[A] = A
    for t in range(L):
        B = old[A, t]
        if B < 0:
            continue
        for u in range(-1, L):
            C = B if u < 0 else old[B, u]
            if C < 0 or mark[C] == A:
                continue
            mark[C] = A
            dd = 0.0
            for j in range(d):
                tt = mu[A, j] - mu[C, j]
                dd += tt * tt
            if dd > nd[L - 1] or (dd == nd[L - 1] and near[A, L - 1] >= 0 and C > near[A, L - 1]):
                continue
            i = L - 1
            while i > 0 and (nd[i - 1] > dd or (nd[i - 1] == dd and near[A, i - 1] > C)):
                nd[i] = nd[i - 1]
                near[A, i] = near[A, i - 1]
                i -= 1
            nd[i] = dd
            near[A, i] = C


@njit(cache=True, nogil=True)
def refresh_lists(mu, near, mask, old, nd, mark):
    """For the groups with ``mask`` set: the L nearest means among the current list
    and the lists of its members (two hops), ties by group id (bounded insertion).
    Reads ``old`` (a copy of ``near``), so the order of updates does not matter."""
    G, L = near.shape
    for A in range(G):
        mark[A] = -1
        for t in range(L):
            old[A, t] = near[A, t]
    for A in range(G):
        if mask[A] != 0:
            _refresh_one(A, mu, near, old, nd, mark)


@njit(cache=True, nogil=True, parallel=True)
def refresh_lists_parallel(mu, near, mask, old, nth):
    """``refresh_lists`` on ``nth`` threads (``nth`` chunks of groups, each with its
    own scratch): every list depends only on ``old``, so the same for any thread count."""
    G, L = near.shape
    for A in prange(G):
        for t in range(L):
            old[A, t] = near[A, t]
    for c in prange(nth):
        mark = np.full(G, -1, np.int64)
        nd = np.empty(L)
        for A in range(c * G // nth, (c + 1) * G // nth):
            if mask[A] != 0:
                _refresh_one(A, mu, near, old, nd, mark)


@njit(cache=True, nogil=True)
def _group_mean(sums, counts, mu, g):
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
def _best_op(P, A, near, counts, mu, cap, k, hi, dA, dB, yA, rA, tol):
    """(delta, kind, p, q, B): kind 0 none, 1 move slot p of A to B, 2 move slot q of
    B to A, 3 swap them.

    A swap's change simplifies to ``2 (s_y - s_x) - (1/a + 1/b) |x - y|^2`` with
    ``s_v = v . (mu_B - mu_A)``; as ``|x - y| <= |x - mu_A| + |y - mu_A|``, a pair whose
    ``2 (s_y - s_x) - (1/a + 1/b) (|x - mu_A| + |y - mu_A|)^2`` cannot beat the best
    found is skipped without computing ``|x - y|^2``."""
    a = counts[A]
    baseA = A * cap
    d = P.shape[1]
    for p in range(a):
        dA[p] = _d2(P, baseA + p, mu, A)
        rA[p] = np.sqrt(dA[p])
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
        invB = 1.0 / b
        w = invA + invB
        # projections on delta = mu_B - mu_A (yA: s_y, dB: |y - mu_B|^2 when needed)
        for q in range(b):
            sy = baseB + q
            v = 0.0
            for j in range(d):
                v += P[sy, j] * (mu[B, j] - mu[A, j])
            yA[q] = v
            dB[q] = np.sqrt(_d2(P, sy, mu, A))  # |y - mu_A|
        can_ab = a > k and b < hi
        can_ba = b > k and a < hi
        for p in range(a):
            sx = baseA + p
            v = 0.0
            for j in range(d):
                v += P[sx, j] * (mu[B, j] - mu[A, j])
            if can_ab:
                dl = b / (b + 1.0) * _d2(P, sx, mu, B) - ca * dA[p]
                if dl < best_d:
                    best_d = dl
                    best_k = 1
                    bp = p
                    bq = -1
                    bB = B
            for q in range(b):
                g2 = 2.0 * (yA[q] - v)
                rr = rA[p] + dB[q]
                if g2 - w * (rr * rr) * (1.0 + 1e-12) >= best_d:
                    continue  # even the largest possible |x - y| cannot beat the best
                sy = baseB + q
                s2 = 0.0
                for j in range(d):
                    tt = P[sx, j] - P[sy, j]
                    s2 += tt * tt
                dl = g2 - w * s2
                if dl < best_d:
                    best_d = dl
                    best_k = 3
                    bp = p
                    bq = q
                    bB = B
        if can_ba:
            cb = b / (b - 1.0)
            ma = a / (a + 1.0)
            for q in range(b):
                sy = baseB + q
                dl = ma * _d2(P, sy, mu, A) - cb * _d2(P, sy, mu, B)
                if dl < best_d:
                    best_d = dl
                    best_k = 2
                    bp = -1
                    bq = q
                    bB = B
    return best_d, best_k, bp, bq, bB


@njit(cache=True, nogil=True)
def _move(P, rid, sums, counts, mu, cap, src, p, dst):
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
    _group_mean(sums, counts, mu, src)
    _group_mean(sums, counts, mu, dst)


@njit(cache=True, nogil=True)
def _swap(P, rid, sums, counts, mu, cap, A, p, B, q):
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
    _group_mean(sums, counts, mu, A)
    _group_mean(sums, counts, mu, B)


def polish(Z, labels, k, rounds, near_count, R, stop, min_gain=0.0, parallel=False):
    """Relabel ``labels`` (int64, in place) with lower SSE; returns
    ``(rounds run, operations applied)``. ``min_gain`` > 0: stop after the first
    round that lowered the SSE by less than this fraction of it. ``parallel``: the
    near lists (windows and two-hop refreshes) on all Numba threads, the same lists."""
    return _run(Z, labels, k, rounds, near_count, np.empty(0, np.int64), R, stop, min_gain, parallel)


def polish_seams(Z, labels, k, rounds, near_count, part, R, stop, min_gain=0.0, parallel=False):
    """``polish`` of a partition made of parts already polished on their own
    (``part[g]``: the part of group g): the first round visits only the groups
    with a near group in another part (and, as always, the groups near them)."""
    return _run(Z, labels, k, rounds, near_count, part, R, stop, min_gain, parallel)


def _run(Z, labels, k, rounds, near_count, part, R, stop, min_gain, parallel=False):
    """Python driver of three kernels (the layout, the near lists, the rounds), so
    that each compiles on its own and a run compiles only the near-list kernel it
    uses (kd-tree queries with an empty ``R``, else the kd orders)."""
    n, d = Z.shape
    k, rounds, near_count = np.int64(k), np.int64(rounds), np.int64(near_count)
    if n == 0 or d == 0 or rounds <= 0 or near_count <= 0:
        return 0, 0
    G = int(labels.max()) + 1
    if G < 2:
        return 0, 0
    P, rid, sums, counts, mu, cap = _layout(Z, labels, np.int64(G), k)
    L = min(int(near_count), G - 1)
    near = np.full((G, L), -1, np.int64)
    active = np.ones(G, np.int64)
    if R.shape[0] == 0 or R.shape[1] != d:
        nearest_groups(sums, counts, near, active)
    else:
        W = np.int64(NEAR_WINDOW)
        if parallel:
            near_by_windows_parallel(sums, counts, near, R, W, np.int64(get_num_threads()))
        else:
            near_by_windows(sums, counts, near, R, W)
        old_near, ndist, mark = np.empty_like(near), np.empty(L), np.full(G, -1, np.int64)
        # neighbours of neighbours, toward the exact lists: of every group, or for seams of the
        # groups the first round visits (those with a near group in another part, and their near groups)
        refresh = active if part.shape[0] != G else _seam_groups(near, part)
        for _ in range(NEAR_DESCENT if part.shape[0] != G else SEAM_DESCENT):
            if parallel:
                refresh_lists_parallel(mu, near, refresh, old_near, np.int64(get_num_threads()))
            else:
                refresh_lists(mu, near, refresh, old_near, ndist, mark)
    return _rounds(P, rid, sums, counts, mu, cap, near, active, part, labels, k, rounds, stop, float(min_gain))


def _seam_groups(near, part):
    """1 for the groups with a near group in another part, and for their near groups."""
    ok = near >= 0
    seam = (ok & (part[np.maximum(near, 0)] != part[:, None])).any(axis=1)
    return (seam | (ok & seam[np.maximum(near, 0)]).any(axis=1)).astype(np.int64)


@njit(cache=True, nogil=True)
def _layout(Z, labels, G, k):
    """Each group's rows in ``cap`` consecutive slots of a copy ``P`` (``rid``: the
    row of each slot, -1 free), with the groups' sums, sizes and means."""
    n, d = Z.shape
    counts = np.zeros(G, np.int64)
    for i in range(n):
        counts[labels[i]] += 1
    cap = 2 * k - 1
    for g in range(G):
        if counts[g] > cap:
            cap = counts[g]
    P = np.empty((G * cap, d))
    rid = np.full(G * cap, -1, np.int64)
    sums = np.zeros((G, d))
    fill = np.zeros(G, np.int64)
    for i in range(n):
        g = labels[i]
        s = g * cap + fill[g]
        fill[g] += 1
        rid[s] = i
        for j in range(d):
            v = Z[i, j]
            P[s, j] = v
            sums[g, j] += v
    mu = np.empty((G, d))
    for g in range(G):
        _group_mean(sums, counts, mu, g)
    return P, rid, sums, counts, mu, cap


@njit(cache=True, nogil=True)
def _rounds(P, rid, sums, counts, mu, cap, near, active, part, labels, k, rounds, stop, min_gain):
    """The rounds of visits (see the module docstring); writes the labels back."""
    G, L = near.shape
    d = P.shape[1]
    n = labels.shape[0]
    hi = 2 * k - 1
    nxt = np.zeros(G, np.int64)
    old_near = np.empty_like(near)
    ndist = np.empty(L)
    mark = np.full(G, -1, np.int64)
    if part.shape[0] == G:
        for A in range(G):
            active[A] = 0
            for t in range(L):
                B = near[A, t]
                if B >= 0 and part[B] != part[A]:
                    active[A] = 1
                    break
    dA = np.empty(cap)
    dB = np.empty(cap)
    yA = np.empty(cap)
    rA = np.empty(cap)
    tol = 1e-12 * max(1.0, float(n * d))
    # the SSE, for the gain test: sum |x|^2 - sum of a |mu|^2 over the groups
    sse = 0.0
    for g in range(G):
        for t in range(counts[g]):
            for j in range(d):
                sse += P[g * cap + t, j] ** 2
        for j in range(d):
            sse -= counts[g] * mu[g, j] ** 2
    r = 0
    ops = 0
    while r < rounds:
        applied = 0
        gain = 0.0
        for g in range(G):
            nxt[g] = 0
        for A in range(G):
            if stop[0] != 0:  # the caller gave up (an error, a signal): return soon
                break
            act = active[A] != 0
            if not act:
                for t in range(L):
                    B = near[A, t]
                    if B >= 0 and active[B] != 0:
                        act = True
                        break
            if not act:
                continue
            for _ in range(8 * cap):  # (a bound on operations per visit: termination whatever the rounding)
                dl, kind, p, q, B = _best_op(P, A, near, counts, mu, cap, k, hi, dA, dB, yA, rA, tol)
                if kind == 0:
                    break
                if kind == 1:
                    _move(P, rid, sums, counts, mu, cap, A, p, B)
                elif kind == 2:
                    _move(P, rid, sums, counts, mu, cap, B, q, A)
                else:
                    _swap(P, rid, sums, counts, mu, cap, A, p, B, q)
                gain -= dl
                nxt[A] = 1
                nxt[B] = 1
                applied += 1
        r += 1
        ops += applied
        if stop[0] != 0:
            break
        for g in range(G):
            active[g] = nxt[g]
        if applied == 0 or gain < min_gain * sse:
            break
        sse -= gain
        # sums from scratch (no drift), then the near lists of the changed groups
        for g in range(G):
            for j in range(d):
                sums[g, j] = 0.0
            for t in range(counts[g]):
                s = g * cap + t
                for j in range(d):
                    sums[g, j] += P[s, j]
            _group_mean(sums, counts, mu, g)
        refresh_lists(mu, near, active, old_near, ndist, mark)
    for g in range(G):
        for t in range(counts[g]):
            labels[rid[g * cap + t]] = g
    return r, ops


def seam_parts(C, unit, parts):
    """Part (0..``parts``-1) of each group for a parallel seam polish: recursive median
    splits (by rank, ties by group id) of the group means ``C``, each along the axis
    that divides the groups of every unit most evenly (the largest sum over units of
    the smaller side's count; ties: the lowest axis). The units were cut from one
    another, so such an axis crosses their seams: the seams lie inside the parts.
    ``parts``: a power of two, fixed (not the thread count): the result depends only on
    ``C``, ``unit`` and ``parts``."""
    G, d = C.shape
    out = np.zeros(G, np.int64)
    segments = [np.arange(G)]
    while len(segments) < parts:
        nxt = []
        for seg in segments:
            m = seg.shape[0] // 2
            best, best_order = -1, None
            for j in range(d):
                order = np.argsort(C[seg, j], kind="stable")
                u = unit[seg]
                low = np.bincount(u[order[:m]], minlength=int(u.max()) + 1)
                score = int(np.minimum(low, np.bincount(u) - low).sum())
                if score > best:
                    best, best_order = score, order
            nxt += [seg[best_order[:m]], seg[best_order[m:]]]
        segments = nxt
    for p, seg in enumerate(segments):
        out[seg] = p
    return out


def polish_seams_parts(Z, labels, k, rounds, near_count, unit, gpart, R, stop, min_gain=0.0, threads=1,
                       ordered_map=None):
    """``polish_seams`` run on each part of the groups (``gpart[g]``) on its own: the
    rows of a part's groups copied out, its groups numbered in id order, their near
    groups searched among the part's groups only. Parts run ``threads`` at a time by
    ``ordered_map`` (the caller passes ``engine.parallel.ordered_map``: the kernels
    import nothing from the rest of the package); without it, one after another in
    the calling thread. Each part is serial and touches only its own groups, so the
    labels depend only on the arguments, not on ``threads``. Returns ``(largest
    rounds run, operations)``."""
    P = int(gpart.max()) + 1 if gpart.shape[0] else 0
    rpart = gpart[labels]
    local = np.empty(gpart.shape[0], np.int64)

    def one(p):
        gids = np.flatnonzero(gpart == p)
        rows = np.flatnonzero(rpart == p)
        if gids.shape[0] < 2:
            return rows, None, (0, 0)
        lab = local[labels[rows]]
        res = polish_seams(Z[rows], lab, k, rounds, near_count, unit[gids], R, stop, min_gain)
        return rows, gids[lab], res

    for p in range(P):
        gids = np.flatnonzero(gpart == p)
        local[gids] = np.arange(gids.shape[0])
    if ordered_map is None:
        results = (one(p) for p in range(P))
    else:
        results = ordered_map(one, list(range(P)), threads, stop=stop, inline=threads <= 1 or P <= 1)
    r_max, ops = 0, 0
    for rows, new, (r, o) in results:
        if new is not None:
            labels[rows] = new
        r_max, ops = max(r_max, int(r)), ops + int(o)
    return r_max, ops
