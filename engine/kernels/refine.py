"""Refinement of a microaggregation partition: exact local search and windowed GA.

Pure Numba kernels on NumPy arrays (driver: ``engine/passes/refine.py``).

State of a partition of the rows of ``Z`` (n, d) into group *slots*:

* ``labels`` (n,): slot of each row;
* ``counts`` (S,), ``sums`` (S, d): size and column sums of each slot (0 = unused);
* ``members`` (S, cap), ``slot`` (n,): the rows of a slot and each row's position
  there (``members[labels[i], slot[i]] == i``).

Exact SSE changes (``mu`` = group mean, ``a`` = size of A, ``b`` = size of B):

* move x from A to B: ``-a/(a-1) |x-mu_A|^2 + b/(b+1) |x-mu_B|^2``;
* swap x in A with y in B:
  ``|y-mu_A|^2 - |x-mu_A|^2 + |x-mu_B|^2 - |y-mu_B|^2 - (1/a + 1/b) |x-y|^2``.

Size rules: ``lo = k``, ``hi = 2k - 1``. A move needs the source to stay >= lo and
the target to stay <= hi; swaps keep sizes. A slot larger than ``hi`` (a table
with fewer than 2k rows, V-MDAV's tail) therefore only shrinks; windows (below)
never include such a slot.

Window operations rebuild a few neighbouring groups (one group and its nearest
groups by centroid) into *any* number of groups of size lo..hi, on a private copy
of their rows, and are kept only if the window's SSE, recomputed from scratch,
drops. Two optimizers run on a window:

* deterministic perturbation (``local``): drop one group, add one group, or move
  one centre, re-seat every record by a size-constrained greedy assignment to
  the centres, then exact descent (moves and swaps inside the window);
* a seeded genetic algorithm (``ga``, the hybrid of Solanas et al. that seed
  003's abstract describes): a population of window partitions with a variable
  number of groups, centre-set crossover, add/drop-a-centre mutation, each child
  decoded by the size-constrained assignment and improved by exact descent.
  Randomness comes from a xorshift generator seeded from (seed, round, window).

Everything here is serial and visits groups and rows in a fixed order, so the
result does not depend on the Numba thread count.

Compilation: ``window_round`` picks a kernel per optimizer in Python (Numba
compiles every branch of a kernel, so one kernel for both compiled the GA for
``local`` too), and integer constants passed to another kernel are int64 values
(``np.int64(0)``, not ``0``; also as the first value of a variable a loop updates):
a literal argument compiles a specialization of the callee for that literal.
"""

import numpy as np
from numba import njit

from .groups import accumulate_sse
from .kdtree import build_kdtree, knn

# ----------------------------------------------------------------------------- state


@njit(cache=True, nogil=True)
def build_state(Z, labels, n_slots, cap):
    """``(sums, counts, members, slot)`` for ``labels`` (slots 0..n_slots-1)."""
    n, d = Z.shape
    sums = np.zeros((n_slots, d))
    counts = np.zeros(n_slots, np.int64)
    members = np.full((n_slots, cap), -1, np.int64)
    slot = np.empty(n, np.int64)
    for i in range(n):
        g = labels[i]
        members[g, counts[g]] = i
        slot[i] = counts[g]
        counts[g] += 1
        for j in range(d):
            sums[g, j] += Z[i, j]
    return sums, counts, members, slot


@njit(cache=True, nogil=True)
def recompute_sums(Z, sums, counts, members):
    """Column sums from scratch (removes drift of incremental updates)."""
    S, d = sums.shape
    for g in range(S):
        for j in range(d):
            sums[g, j] = 0.0
        for p in range(counts[g]):
            i = members[g, p]
            for j in range(d):
                sums[g, j] += Z[i, j]


@njit(cache=True, nogil=True)
def partition_sse(Z, labels, n_slots):
    """SSE of the partition ``labels``, from scratch, sums and SSE in row order."""
    n, d = Z.shape
    sums = np.zeros((n_slots, d))
    counts = np.zeros(n_slots, np.int64)
    for i in range(n):
        g = labels[i]
        counts[g] += 1
        for j in range(d):
            sums[g, j] += Z[i, j]
    for g in range(n_slots):
        if counts[g] > 0:
            for j in range(d):
                sums[g, j] /= counts[g]
    return accumulate_sse(Z, labels, sums, 0.0)


@njit(cache=True, nogil=True)
def _sq_to_mean(Z, i, sums, g, inv):
    s = 0.0
    for j in range(Z.shape[1]):
        t = Z[i, j] - sums[g, j] * inv
        s += t * t
    return s


@njit(cache=True, nogil=True)
def _sq_rows(Z, i, r):
    s = 0.0
    for j in range(Z.shape[1]):
        t = Z[i, j] - Z[r, j]
        s += t * t
    return s


@njit(cache=True, nogil=True)
def _remove(Z, sums, counts, members, slot, g, x):
    p = slot[x]
    last = members[g, counts[g] - 1]
    members[g, p] = last
    slot[last] = p
    members[g, counts[g] - 1] = -1
    counts[g] -= 1
    for j in range(Z.shape[1]):
        sums[g, j] -= Z[x, j]


@njit(cache=True, nogil=True)
def _add(Z, labels, sums, counts, members, slot, g, x):
    members[g, counts[g]] = x
    slot[x] = counts[g]
    counts[g] += 1
    labels[x] = g
    for j in range(Z.shape[1]):
        sums[g, j] += Z[x, j]


@njit(cache=True, nogil=True)
def _live_centroids(sums, counts, out_near, mask):
    """Clear the lists of ``nearest_groups`` to recompute; returns the live slots'
    centroids ``C`` and slot ids ``gid``."""
    S, L = out_near.shape
    d = sums.shape[1]
    for g in range(S):
        if mask[g] != 0 or counts[g] == 0:
            for t in range(L):
                out_near[g, t] = -1
    live = 0
    for g in range(S):
        if counts[g] > 0:
            live += 1
    C = np.empty((live, d))
    gid = np.empty(live, np.int64)
    i = 0
    for g in range(S):
        if counts[g] > 0:
            for j in range(d):
                C[i, j] = sums[g, j] / counts[g]
            gid[i] = g
            i += 1
    return C, gid


@njit(cache=True, nogil=True)
def _nearest_groups_kd(sums, counts, out_near, mask):
    C, gid = _live_centroids(sums, counts, out_near, mask)
    L = out_near.shape[1]
    live = C.shape[0]
    if live < 2:
        return
    T = build_kdtree(C, np.int64(16))  # int64 values, not literals (see the module docstring)
    none = np.int64(-1)
    ids = T[1]
    m = min(L + 1, live)
    pos = np.empty(m, np.int64)
    dd = np.empty(m)
    for i in range(live):
        if mask[gid[i]] == 0:
            continue
        f = knn(T, C[i].copy(), m, none, pos, dd)
        c = 0
        for t in range(f):
            h = gid[ids[pos[t]]]
            if h != gid[i] and c < L:
                out_near[gid[i], c] = h
                c += 1


@njit(cache=True, nogil=True)
def _nearest_groups_brute(sums, counts, out_near, mask):
    # the kd-tree's answer by brute force: the m nearest centroids by (distance,
    # centroid index), distances summed in column order as ``kdtree.sq_dist``
    C, gid = _live_centroids(sums, counts, out_near, mask)
    L = out_near.shape[1]
    live, d = C.shape
    if live < 2:
        return
    m = min(L + 1, live)
    pos = np.empty(m, np.int64)
    dd = np.empty(m)
    for i in range(live):
        if mask[gid[i]] == 0:
            continue
        found = 0
        for p in range(live):
            s = 0.0
            for j in range(d):
                t = C[p, j] - C[i, j]
                s += t * t
            if found == m:
                if s > dd[m - 1] or (s == dd[m - 1] and p > pos[m - 1]):
                    continue
                a = m - 1
            else:
                a = found
                found += 1
            while a > 0 and (dd[a - 1] > s or (dd[a - 1] == s and pos[a - 1] > p)):
                dd[a] = dd[a - 1]
                pos[a] = pos[a - 1]
                a -= 1
            dd[a] = s
            pos[a] = p
        c = 0
        for t in range(found):
            h = gid[pos[t]]
            if h != gid[i] and c < L:
                out_near[gid[i], c] = h
                c += 1


# up to this many live groups ``nearest_groups`` compares all pairs (a few ms), and
# the kd-tree kernels need not compile for a small table's first refinement
NEAR_BRUTE_MAX = 1024


def nearest_groups(sums, counts, out_near, mask):
    """``out_near[g]``: the L live slots with the nearest centroids to g's (-1 pads),
    recomputed for the slots with ``mask[g] != 0`` (the others keep their list).
    Ties by slot order. (Python: a kd-tree, or all pairs for few groups: the same
    lists.)"""
    if np.count_nonzero(counts > 0) <= NEAR_BRUTE_MAX:
        _nearest_groups_brute(sums, counts, out_near, mask)
    else:
        _nearest_groups_kd(sums, counts, out_near, mask)


@njit(cache=True, nogil=True)
def refresh_near(sums, counts, near, mask):
    """Cheap update of ``near`` for the slots with ``mask`` set: the L nearest
    live centroids among the current list and the lists of its members (two
    hops), ties by slot id. Reads a copy, so the order of updates does not matter."""
    S, L = near.shape
    d = sums.shape[1]
    old = near.copy()
    mark = np.full(S, -1, np.int64)
    cand = np.empty(L + L * L, np.int64)
    cd = np.empty(L + L * L)
    for A in range(S):
        if mask[A] == 0 and counts[A] > 0:
            continue
        for t in range(L):
            near[A, t] = -1
        if counts[A] == 0:
            continue
        mark[A] = A
        nc = 0
        ia = 1.0 / counts[A]
        for t in range(L):
            B = old[A, t]
            if B < 0:
                continue
            for u in range(-1, L):
                C = B if u < 0 else old[B, u]
                if C < 0 or counts[C] == 0 or mark[C] == A:
                    continue
                mark[C] = A
                ic = 1.0 / counts[C]
                sdist = 0.0
                for j in range(d):
                    tt = sums[A, j] * ia - sums[C, j] * ic
                    sdist += tt * tt
                cand[nc] = C
                cd[nc] = sdist
                nc += 1
        m = min(L, nc)
        for t in range(m):
            b = t
            for u in range(t + 1, nc):
                if cd[u] < cd[b] or (cd[u] == cd[b] and cand[u] < cand[b]):
                    b = u
            tc = cand[t]
            cand[t] = cand[b]
            cand[b] = tc
            tdist = cd[t]
            cd[t] = cd[b]
            cd[b] = tdist
            near[A, t] = cand[t]


# ------------------------------------------------------------------ local search


@njit(cache=True, nogil=True)
def _best_op_for(Z, A, near, sums, counts, members, k, hi, dA, dB, yA, tol):
    """Best improving move/swap between A and one of its near groups.

    Returns (delta, kind, x, y, B); kind 0 none, 1 move x A->B, 2 move y B->A,
    3 swap x<->y. Ties keep the first found (fixed visiting order).
    """
    a = counts[A]
    invA = 1.0 / a
    for p in range(a):
        dA[p] = _sq_to_mean(Z, members[A, p], sums, A, invA)
    best_d = -tol
    best_k = 0
    bx = -1
    by = -1
    bB = -1
    for t in range(near.shape[1]):
        B = near[A, t]
        if B < 0 or counts[B] == 0 or B == A:
            continue
        b = counts[B]
        invB = 1.0 / b
        for q in range(b):
            y = members[B, q]
            dB[q] = _sq_to_mean(Z, y, sums, B, invB)
            yA[q] = _sq_to_mean(Z, y, sums, A, invA)
        can_ab = a > k and b < hi
        can_ba = b > k and a < hi
        w = invA + invB
        ca = a / (a - 1.0) if a > 1 else 0.0
        cb = b / (b - 1.0) if b > 1 else 0.0
        for p in range(a):
            x = members[A, p]
            xB = _sq_to_mean(Z, x, sums, B, invB)
            if can_ab:
                dl = b / (b + 1.0) * xB - ca * dA[p]
                if dl < best_d:
                    best_d = dl
                    best_k = 1
                    bx = x
                    by = -1
                    bB = B
            for q in range(b):
                y = members[B, q]
                dl = (yA[q] - dA[p]) + (xB - dB[q]) - _sq_rows(Z, x, y) * w
                if dl < best_d:
                    best_d = dl
                    best_k = 3
                    bx = x
                    by = y
                    bB = B
        if can_ba:
            for q in range(b):
                dl = a / (a + 1.0) * yA[q] - cb * dB[q]
                if dl < best_d:
                    best_d = dl
                    best_k = 2
                    bx = -1
                    by = members[B, q]
                    bB = B
    return best_d, best_k, bx, by, bB


@njit(cache=True, nogil=True)
def ls_round(Z, labels, sums, counts, members, slot, k, hi, near, active, touched, tol, stats):
    """One pass of best-improvement local search over the active groups.

    A group is visited when it or one of its near groups changed in the previous
    round (``active``); ``active`` is overwritten with this round's changes, which
    are also flagged in ``touched``.
    ``stats``: [moves, swaps, sum of applied deltas]. Returns applied operations.
    """
    S, L = near.shape
    cap = members.shape[1]
    dA = np.empty(cap)
    dB = np.empty(cap)
    yA = np.empty(cap)
    nxt = np.zeros(S, np.int64)
    applied = 0
    for A in range(S):
        if counts[A] == 0:
            continue
        act = active[A] != 0
        for t in range(L):
            B = near[A, t]
            if B >= 0 and active[B] != 0:
                act = True
        if not act:
            continue
        while True:
            dl, kind, x, y, B = _best_op_for(Z, A, near, sums, counts, members, k, hi, dA, dB, yA, tol)
            if kind == 0:
                break
            if kind == 1:
                _remove(Z, sums, counts, members, slot, A, x)
                _add(Z, labels, sums, counts, members, slot, B, x)
                stats[0] += 1
            elif kind == 2:
                _remove(Z, sums, counts, members, slot, B, y)
                _add(Z, labels, sums, counts, members, slot, A, y)
                stats[0] += 1
            else:
                _remove(Z, sums, counts, members, slot, A, x)
                _remove(Z, sums, counts, members, slot, B, y)
                _add(Z, labels, sums, counts, members, slot, B, x)
                _add(Z, labels, sums, counts, members, slot, A, y)
                stats[1] += 1
            stats[2] += dl
            nxt[A] = 1
            nxt[B] = 1
            touched[A] = 1
            touched[B] = 1
            applied += 1
    for g in range(S):
        active[g] = nxt[g]
    return applied


# ------------------------------------------------------------ window machinery


@njit(cache=True, nogil=True)
def _xorshift(st):
    x = st[0]
    x ^= (x << np.uint64(13))
    x ^= (x >> np.uint64(7))
    x ^= (x << np.uint64(17))
    st[0] = x
    return x


@njit(cache=True, nogil=True)
def _rand_int(st, n):
    return np.int64(_xorshift(st) % np.uint64(n))


@njit(cache=True, nogil=True)
def _rand_unit(st):
    return (_xorshift(st) >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@njit(cache=True, nogil=True)
def _seed_state(seed, a, b):
    # splitmix64 of (seed, a, b): independent streams per round and window
    st = np.empty(1, np.uint64)
    z = np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(a) * np.uint64(0xBF58476D1CE4E5B9) \
        + np.uint64(b) * np.uint64(0x94D049BB133111EB) + np.uint64(0x2545F4914F6CDD1D)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    if z == np.uint64(0):
        z = np.uint64(0x2545F4914F6CDD1D)
    st[0] = z
    return st


@njit(cache=True, nogil=True)
def win_stats(Zw, lab, g, sums, cnt):
    m, d = Zw.shape
    for c in range(g):
        cnt[c] = 0
        for j in range(d):
            sums[c, j] = 0.0
    for i in range(m):
        c = lab[i]
        cnt[c] += 1
        for j in range(d):
            sums[c, j] += Zw[i, j]


@njit(cache=True, nogil=True)
def win_sse(Zw, lab, g):
    """SSE of a window partition, from scratch (sums in row order)."""
    m, d = Zw.shape
    sums = np.zeros((g, d))
    cnt = np.zeros(g, np.int64)
    win_stats(Zw, lab, g, sums, cnt)
    s = 0.0
    for i in range(m):
        c = lab[i]
        inv = 1.0 / cnt[c]
        for j in range(d):
            t = Zw[i, j] - sums[c, j] * inv
            s += t * t
    return s


@njit(cache=True, nogil=True)
def _dist_column(Zw, sums, cnt, c, D):
    m, d = Zw.shape
    inv = 1.0 / cnt[c]
    for i in range(m):
        s = 0.0
        for j in range(d):
            t = Zw[i, j] - sums[c, j] * inv
            s += t * t
        D[i, c] = s


@njit(cache=True, nogil=True)
def win_descent(Zw, P, lab, g, k, hi, tol):
    """Best-improvement descent with moves and swaps among the window's g groups.

    ``P``: pairwise squared distances of the window rows. Sizes stay in [k, hi]
    (a move needs source > k and target < hi). Returns the sum of applied deltas.
    """
    m, d = Zw.shape
    sums = np.zeros((g, d))
    cnt = np.zeros(g, np.int64)
    win_stats(Zw, lab, g, sums, cnt)
    D = np.empty((m, g))
    for c in range(g):
        _dist_column(Zw, sums, cnt, c, D)
    total = 0.0
    while True:
        best = -tol
        kind = 0
        bi = -1
        bj = -1
        bc = -1
        for i in range(m):
            A = lab[i]
            a = cnt[A]
            if a > k:
                ca = a / (a - 1.0) * D[i, A]
                for c in range(g):
                    b = cnt[c]
                    if c != A and b < hi:
                        dl = b / (b + 1.0) * D[i, c] - ca
                        if dl < best:
                            best = dl
                            kind = 1
                            bi = i
                            bc = c
            ia = 1.0 / a
            for j in range(i + 1, m):
                B = lab[j]
                if B == A:
                    continue
                dl = D[j, A] - D[i, A] + D[i, B] - D[j, B] - P[i, j] * (ia + 1.0 / cnt[B])
                if dl < best:
                    best = dl
                    kind = 2
                    bi = i
                    bj = j
        if kind == 0:
            break
        total += best
        if kind == 1:
            A = lab[bi]
            B = bc
            cnt[A] -= 1
            cnt[B] += 1
            for j in range(d):
                sums[A, j] -= Zw[bi, j]
                sums[B, j] += Zw[bi, j]
            lab[bi] = B
        else:
            A = lab[bi]
            B = lab[bj]
            for j in range(d):
                t = Zw[bj, j] - Zw[bi, j]
                sums[A, j] += t
                sums[B, j] -= t
            lab[bi] = B
            lab[bj] = A
        # only the two changed groups' distances move
        _dist_column(Zw, sums, cnt, A, D)
        _dist_column(Zw, sums, cnt, B, D)
    return total


@njit(cache=True, nogil=True)
def assign_constrained(Zw, C, nc, k, hi, lab):
    """Assign the window rows to centres ``C[:nc]`` so every size is in [k, hi].

    Pairs (row, centre) are taken in increasing distance; a row goes to a centre
    that still lacks records (< k) or, while spare rows remain, to one below hi.
    Always completes when nc*k <= m <= nc*hi. Returns the number of non-empty
    groups (always nc) after relabelling to 0..nc-1.
    """
    m, d = Zw.shape
    npairs = m * nc
    dist = np.empty(npairs)
    for i in range(m):
        for c in range(nc):
            s = 0.0
            for j in range(d):
                t = Zw[i, j] - C[c, j]
                s += t * t
            dist[i * nc + c] = s
    order = np.argsort(dist, kind="mergesort")
    cnt = np.zeros(nc, np.int64)
    for i in range(m):
        lab[i] = -1
    free = m - nc * k
    left = m
    for t in range(npairs):
        if left == 0:
            break
        e = order[t]
        i = e // nc
        c = e - i * nc
        if lab[i] >= 0:
            continue
        if cnt[c] < k:
            lab[i] = c
            cnt[c] += 1
            left -= 1
        elif cnt[c] < hi and free > 0:
            lab[i] = c
            cnt[c] += 1
            free -= 1
            left -= 1
    return nc


@njit(cache=True, nogil=True)
def _centres_of(Zw, lab, g, C):
    m, d = Zw.shape
    cnt = np.zeros(g, np.int64)
    for c in range(g):
        for j in range(d):
            C[c, j] = 0.0
    for i in range(m):
        c = lab[i]
        cnt[c] += 1
        for j in range(d):
            C[c, j] += Zw[i, j]
    for c in range(g):
        for j in range(d):
            C[c, j] /= cnt[c]


@njit(cache=True, nogil=True)
def win_perturb(Zw, P, lab, g, k, hi, tol, out_lab):
    """Deterministic window search (``local``): for each group, drop it and
    re-seat all rows around the other centres; add a centre at the row
    farthest from its mean; move each centre in turn to that row. Each
    candidate gets exact descent. Writes the best
    partition into ``out_lab`` and returns (sse, groups)."""
    m, d = Zw.shape
    gmin = (m + hi - 1) // hi
    gmax = m // k
    best = win_sse(Zw, lab, g)
    bg = g
    for i in range(m):
        out_lab[i] = lab[i]
    C = np.empty((g + 1, d))
    _centres_of(Zw, lab, g, C)
    Cw = np.empty((g + 1, d))
    tl = np.empty(m, np.int64)
    # drop one centre
    if g - 1 >= gmin and g - 1 >= 1:
        for drop in range(g):
            nc = np.int64(0)  # not a literal 0 (see the module docstring)
            for c in range(g):
                if c != drop:
                    for j in range(d):
                        Cw[nc, j] = C[c, j]
                    nc += 1
            assign_constrained(Zw, Cw, nc, k, hi, tl)
            win_descent(Zw, P, tl, nc, k, hi, tol)
            s = win_sse(Zw, tl, nc)
            if s < best - tol:
                best = s
                bg = nc
                for i in range(m):
                    out_lab[i] = tl[i]
    # the row farthest from its own mean
    far = -1
    fd = -1.0
    for i in range(m):
        c = lab[i]
        s = 0.0
        for j in range(d):
            t = Zw[i, j] - C[c, j]
            s += t * t
        if s > fd:
            fd = s
            far = i
    # add a centre there
    if g + 1 <= gmax:
        for c in range(g):
            for j in range(d):
                Cw[c, j] = C[c, j]
        for j in range(d):
            Cw[g, j] = Zw[far, j]
        assign_constrained(Zw, Cw, g + 1, k, hi, tl)
        win_descent(Zw, P, tl, g + 1, k, hi, tol)
        s = win_sse(Zw, tl, g + 1)
        if s < best - tol:
            best = s
            bg = g + 1
            for i in range(m):
                out_lab[i] = tl[i]
    # or move one centre there (each in turn, not the row's own group's)
    for mv in range(g):
        if lab[far] == mv:
            continue
        for c in range(g):
            for j in range(d):
                Cw[c, j] = C[c, j]
        for j in range(d):
            Cw[mv, j] = Zw[far, j]
        assign_constrained(Zw, Cw, g, k, hi, tl)
        win_descent(Zw, P, tl, g, k, hi, tol)
        s = win_sse(Zw, tl, g)
        if s < best - tol:
            best = s
            bg = g
            for i in range(m):
                out_lab[i] = tl[i]
    return best, bg


@njit(cache=True, nogil=True)
def win_ga(Zw, P, lab, g, k, hi, tol, pop, gens, st, out_lab):
    """Seeded genetic algorithm on one window (see module docstring).

    Individual = a partition of the window rows into groups of size [k, hi];
    the current partition is in the initial population, so the result is never
    worse. Returns (best sse, groups) and writes the best into ``out_lab``.
    """
    m, d = Zw.shape
    gmin = max(1, (m + hi - 1) // hi)
    gmax = m // k
    G = gmax + 1
    labs = np.empty((pop, m), np.int64)
    ng = np.empty(pop, np.int64)
    fit = np.empty(pop)
    C = np.empty((G + 1, d))
    C2 = np.empty((G + 1, d))
    Cw = np.empty((2 * G + 2, d))
    tl = np.empty(m, np.int64)
    # individual 0: the current partition, descended
    for i in range(m):
        labs[0, i] = lab[i]
    ng[0] = g
    win_descent(Zw, P, labs[0], g, k, hi, tol)
    fit[0] = win_sse(Zw, labs[0], g)
    # others: random centre sets of a random feasible size near g
    for p in range(1, pop):
        nc = g + _rand_int(st, np.int64(3)) - 1
        nc = min(max(nc, gmin), gmax)
        _random_centres(Zw, Cw, nc, st)
        assign_constrained(Zw, Cw, nc, k, hi, tl)
        win_descent(Zw, P, tl, nc, k, hi, tol)
        for i in range(m):
            labs[p, i] = tl[i]
        ng[p] = nc
        fit[p] = win_sse(Zw, tl, nc)
    for gen in range(gens):
        p1 = _tournament(fit, pop, st)
        p2 = _tournament(fit, pop, st)
        _centres_of(Zw, labs[p1], ng[p1], C)
        _centres_of(Zw, labs[p2], ng[p2], C2)
        nsel = _crossover(Zw, C, ng[p1], C2, ng[p2], Cw, gmin, gmax, st)
        assign_constrained(Zw, Cw, nsel, k, hi, tl)
        _mutate(tl, m, st)
        win_descent(Zw, P, tl, nsel, k, hi, tol)
        _replace_worst(labs, ng, fit, tl, nsel, win_sse(Zw, tl, nsel), tol)
    bestp = 0
    for p in range(1, pop):
        if fit[p] < fit[bestp]:
            bestp = p
    for i in range(m):
        out_lab[i] = labs[bestp, i]
    return fit[bestp], ng[bestp]


@njit(cache=True, nogil=True)
def _random_centres(Zw, Cw, nc, st):
    """``nc`` random rows of ``Zw`` as centres, into the first rows of ``Cw`` (a row equal
    to a centre already taken is drawn again, nine times out of ten)."""
    m, d = Zw.shape
    for c in range(nc):
        while True:
            r = _rand_int(st, m)
            dup = False
            for c2 in range(c):
                same = True
                for j in range(d):
                    if Cw[c2, j] != Zw[r, j]:
                        same = False
                        break
                if same:
                    dup = True
                    break
            if not dup or _rand_unit(st) < 0.1:
                break
        for j in range(d):
            Cw[c, j] = Zw[r, j]


@njit(cache=True, nogil=True)
def _tournament(fit, pop, st):
    """A binary tournament: the fitter of two random individuals."""
    a = _rand_int(st, pop)
    b = _rand_int(st, pop)
    return a if fit[a] <= fit[b] else b


@njit(cache=True, nogil=True)
def _crossover(Zw, C, n1, C2, n2, Cw, gmin, gmax, st):
    """Centre-set crossover: each centre of both parents (``C[:n1]``, ``C2[:n2]``) kept
    with probability 1/2, then trimmed or padded (from the unused ones, then random
    rows) to a feasible count near the parents'. The child's centres are the first
    rows of ``Cw``; returns their count."""
    m, d = Zw.shape
    target = (n1 + n2 + _rand_int(st, np.int64(2))) // 2
    u = _rand_unit(st)
    if u < 0.15:
        target -= 1
    elif u < 0.30:
        target += 1
    target = min(max(target, gmin), gmax)
    nsel = np.int64(0)
    nun = np.int64(0)
    # selected centres go to the front of Cw, the others to the back
    tot = n1 + n2
    back = tot
    for c in range(tot):
        src = C[c] if c < n1 else C2[c - n1]
        if _rand_unit(st) < 0.5:
            for j in range(d):
                Cw[nsel, j] = src[j]
            nsel += 1
        else:
            back -= 1
            for j in range(d):
                Cw[back, j] = src[j]
            nun += 1
    # pad from the unused centres, then random rows
    while nsel < target and nun > 0:
        r = back + _rand_int(st, nun)
        for j in range(d):
            t = Cw[r, j]
            Cw[r, j] = Cw[back, j]
            Cw[nsel, j] = t
        back += 1
        nun -= 1
        nsel += 1
    while nsel < target:
        r = _rand_int(st, m)
        for j in range(d):
            Cw[nsel, j] = Zw[r, j]
        nsel += 1
    # trim: drop random selected centres
    while nsel > target:
        r = _rand_int(st, nsel)
        nsel -= 1
        for j in range(d):
            Cw[r, j] = Cw[nsel, j]
    return nsel


@njit(cache=True, nogil=True)
def _mutate(tl, m, st):
    """Mutation: with probability 0.3, two random swaps between different groups."""
    if _rand_unit(st) < 0.3:
        for t in range(2):
            i1 = _rand_int(st, m)
            i2 = _rand_int(st, m)
            if tl[i1] != tl[i2]:
                c1 = tl[i1]
                tl[i1] = tl[i2]
                tl[i2] = c1


@njit(cache=True, nogil=True)
def _replace_worst(labs, ng, fit, tl, nsel, f, tol):
    """Steady state: the child (``tl``, ``nsel`` groups, SSE ``f``) replaces the worst
    individual when better and not a duplicate fitness."""
    worst = 0
    dup = False
    for p in range(fit.shape[0]):
        if fit[p] > fit[worst]:
            worst = p
        if abs(fit[p] - f) <= tol:
            dup = True
    if not dup and f < fit[worst]:
        for i in range(tl.shape[0]):
            labs[worst, i] = tl[i]
        ng[worst] = nsel
        fit[worst] = f


@njit(cache=True, nogil=True)
def _window_of(h, near, counts, hi, wgroups, W):
    nw = 0
    W[nw] = h
    nw += 1
    for t in range(near.shape[1]):
        if nw >= wgroups:
            break
        B = near[h, t]
        if B < 0 or counts[B] == 0 or counts[B] > hi:
            continue
        dup = False
        for s in range(nw):
            if W[s] == B:
                dup = True
        if not dup:
            W[nw] = B
            nw += 1
    return nw


@njit(cache=True, nogil=True)
def _window_rows(Z, counts, members, idx, W, nw):
    """The rows of the window's groups ``W[:nw]``: ``(rows, lab, Zw, Pm)``, rows in row
    order (makes the window independent of member order), ``lab`` the position in
    ``W`` of each row's group, ``Pm`` their pairwise squared distances."""
    d = Z.shape[1]
    m = 0
    for s in range(nw):
        m += counts[W[s]]
    Zw = np.empty((m, d))
    lab = np.empty(m, np.int64)
    m = 0
    for s in range(nw):
        g = W[s]
        for p in range(counts[g]):
            i = members[g, p]
            idx[m] = i
            lab[m] = s
            m += 1
    o = np.argsort(idx[:m], kind="mergesort")
    rows = idx[:m][o].copy()
    lab = lab[o].copy()
    for t in range(m):
        for j in range(d):
            Zw[t, j] = Z[rows[t], j]
    Pm = np.empty((m, m))
    for a in range(m):
        Pm[a, a] = 0.0
        for b in range(a + 1, m):
            s = 0.0
            for j in range(d):
                t = Zw[a, j] - Zw[b, j]
                s += t * t
            Pm[a, b] = s
            Pm[b, a] = s
    return rows, lab, Zw, Pm


@njit(cache=True, nogil=True)
def _window_todo(h, counts, hi, near, todo):
    """Visit slot h's window: h is live, not oversized, and h or a near group is to do."""
    if counts[h] == 0 or counts[h] > hi:
        return False
    go = todo[h] != 0
    for t in range(near.shape[1]):
        B = near[h, t]
        if B >= 0 and todo[B] != 0:
            go = True
    return go


@njit(cache=True, nogil=True)
def _window_write(Z, labels, sums, counts, members, slot, near, touched, stats, h, W, nw, rows, out, g2, fp,
                  delta):
    """Write an improved window back: its ``g2`` new groups (``out``: each row's)
    take the window's slots, then free slots; emptied slots are freed. Returns the
    next free-slot search start."""
    S = counts.shape[0]
    d = Z.shape[1]
    cap = members.shape[1]
    m = rows.shape[0]
    slots = np.empty(g2, np.int64)
    for c in range(g2):
        if c < nw:
            slots[c] = W[c]
        else:
            # a free slot (the window's own slots are all non-empty here)
            for t in range(S):
                s2 = (fp + t) % S
                if counts[s2] == 0:
                    taken = False
                    for c2 in range(nw, c):
                        if slots[c2] == s2:
                            taken = True
                    if not taken:
                        break
            slots[c] = s2
            fp = (s2 + 1) % S
    for s in range(nw):
        g = W[s]
        counts[g] = 0
        for j in range(d):
            sums[g, j] = 0.0
        touched[g] = 1
    for c in range(g2):
        g = slots[c]
        counts[g] = 0
        for j in range(d):
            sums[g, j] = 0.0
        touched[g] = 1
        for t in range(near.shape[1]):
            if g != h and c >= nw:
                near[g, t] = near[h, t]
    changed = 0
    for t in range(m):
        i = rows[t]
        g = slots[out[t]]
        if labels[i] != g:
            changed += 1
        _add(Z, labels, sums, counts, members, slot, g, i)
    # clear stale member entries of emptied slots
    for s in range(nw):
        g = W[s]
        for p in range(counts[g], cap):
            members[g, p] = -1
    stats[0] += 1
    stats[1] += changed
    stats[2] += delta
    return fp


@njit(cache=True, nogil=True)
def _window_round_local(Z, labels, sums, counts, members, slot, k, hi, near, wgroups, start, stop, todo,
                        touched, tol, stats):
    W = np.empty(wgroups, np.int64)
    idx = np.empty(wgroups * hi, np.int64)
    improved = 0
    fp = np.int64(0)
    for h in range(start, stop):
        if not _window_todo(h, counts, hi, near, todo):
            continue
        nw = _window_of(h, near, counts, hi, wgroups, W)
        if nw < 2:
            continue
        rows, lab, Zw, Pm = _window_rows(Z, counts, members, idx, W, nw)
        before = win_sse(Zw, lab, nw)
        out = np.empty(rows.shape[0], np.int64)
        after, g2 = win_perturb(Zw, Pm, lab, nw, k, hi, tol, out)
        if not (after < before - tol):
            continue
        fp = _window_write(Z, labels, sums, counts, members, slot, near, touched, stats, h, W, nw, rows, out,
                           g2, fp, after - before)
        improved += 1
    return improved


@njit(cache=True, nogil=True)
def _window_round_ga(Z, labels, sums, counts, members, slot, k, hi, near, wgroups, pop, gens, seed, rnd,
                     start, stop, todo, touched, tol, stats):
    W = np.empty(wgroups, np.int64)
    idx = np.empty(wgroups * hi, np.int64)
    improved = 0
    fp = np.int64(0)
    for h in range(start, stop):
        if not _window_todo(h, counts, hi, near, todo):
            continue
        nw = _window_of(h, near, counts, hi, wgroups, W)
        if nw < 2:
            continue
        rows, lab, Zw, Pm = _window_rows(Z, counts, members, idx, W, nw)
        before = win_sse(Zw, lab, nw)
        out = np.empty(rows.shape[0], np.int64)
        st = _seed_state(seed, rnd, h)
        after, g2 = win_ga(Zw, Pm, lab, nw, k, hi, tol, pop, gens, st, out)
        if not (after < before - tol):
            continue
        fp = _window_write(Z, labels, sums, counts, members, slot, near, touched, stats, h, W, nw, rows, out,
                           g2, fp, after - before)
        improved += 1
    return improved


def window_round(Z, labels, sums, counts, members, slot, k, hi, near, wgroups, use_ga, pop, gens,
                 seed, rnd, start, stop, todo, touched, tol, stats):
    """Re-optimize the window of each live slot h in [start, stop).

    Only windows with ``todo`` set on h or one of its near groups are visited.
    ``use_ga``: 0 deterministic perturbation, 1 genetic algorithm (each its own
    kernel). Improved windows are written back (new groups take free slots,
    emptied slots are freed) and their slots flagged in ``touched``. ``stats``:
    [windows improved, rows relabelled, sum of SSE deltas]. Returns the number of
    improved windows.
    """
    k, hi, wgroups, start, stop, tol = int(k), int(hi), int(wgroups), int(start), int(stop), float(tol)
    if use_ga:
        return _window_round_ga(Z, labels, sums, counts, members, slot, k, hi, near, wgroups, int(pop),
                                int(gens), int(seed), int(rnd), start, stop, todo, touched, tol, stats)
    return _window_round_local(Z, labels, sums, counts, members, slot, k, hi, near, wgroups, start, stop,
                               todo, touched, tol, stats)
