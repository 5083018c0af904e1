"""Re-cutting one window of the refinement: a few neighbouring groups' rows (a private
copy ``Zw``, ``P`` their pairwise squared distances) cut again into any number of
groups of size k..hi (``engine.kernels.search.windows`` picks the windows and writes
the improved ones back).

* ``assign_constrained``: the rows to given centres, every size within [k, hi];
* ``win_descent``: best-improvement moves and swaps among the window's groups, the
  exact SSE changes of ``engine.kernels.search.moves`` (here on the whole window,
  every pair of rows, from the distance matrix);
* ``win_perturb`` (``local``): drop one group, add one, or move one centre, re-seat
  every row by the constrained assignment, then descent;
* ``win_ga`` (``ga``): a seeded genetic algorithm (the hybrid of Solanas et al. that
  seed 003's abstract describes): a population of window partitions with a variable
  number of groups, centre-set crossover, add/drop-a-centre mutation, each child
  decoded by the constrained assignment and improved by descent. Randomness comes
  from a xorshift generator seeded from (seed, round, window) (``seed_state``).

Each candidate's SSE is recomputed from scratch (``groups.partition_sse``); a window
is kept only when it drops. Integer constants passed to another kernel are int64
values (``np.int64(0)``, not ``0``): a literal argument compiles a specialization of
the callee for that literal.
"""

import numpy as np
from numba import njit

from ..common import mix64, sq_dist
from ..groups import group_means, group_sums, partition_sse


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
    sums, cnt = group_sums(Zw, lab, g)
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


@njit(cache=True, nogil=True, inline="always")
def _copy_row(A, i, B, r):
    """``B[r] = A[i]``, element by element (a row assignment compiles a shape check and
    its error message)."""
    for j in range(A.shape[1]):
        B[r, j] = A[i, j]


@njit(cache=True, nogil=True)
def _decode(Zw, P, Cw, nc, k, hi, tol, tl):
    """A window partition from the centres ``Cw[:nc]``: the size-constrained assignment,
    then exact descent, into ``tl``; returns its SSE."""
    assign_constrained(Zw, Cw, nc, k, hi, tl)
    win_descent(Zw, P, tl, nc, k, hi, tol)
    return partition_sse(Zw, tl, nc)


@njit(cache=True, nogil=True)
def _keep_better(s, nc, tl, best, bg, tol, out_lab):
    """``(best, groups)`` after the candidate ``tl`` (SSE ``s``, ``nc`` groups): taken
    into ``out_lab`` when it beats the best by more than ``tol``."""
    if s < best - tol:
        for i in range(tl.shape[0]):
            out_lab[i] = tl[i]
        return s, nc
    return best, bg


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
    best = partition_sse(Zw, lab, g)
    bg = g
    for i in range(m):
        out_lab[i] = lab[i]
    C = np.empty((g + 1, d))
    group_means(Zw, lab, g, C)
    Cw = np.empty((g + 1, d))
    tl = np.empty(m, np.int64)
    # drop one centre
    if g - 1 >= gmin and g - 1 >= 1:
        for drop in range(g):
            nc = np.int64(0)  # not a literal 0 (see the module docstring)
            for c in range(g):
                if c != drop:
                    _copy_row(C, c, Cw, nc)
                    nc += 1
            best, bg = _keep_better(_decode(Zw, P, Cw, nc, k, hi, tol, tl), nc, tl, best, bg, tol, out_lab)
    # the row farthest from its own mean
    far = -1
    fd = -1.0
    for i in range(m):
        s = sq_dist(Zw, i, C[lab[i]])
        if s > fd:
            fd = s
            far = i
    # add a centre there (t = -1), or move one centre there (each in turn, not the row's own group's)
    for t in range(-1, g):
        mv = g if t < 0 else t
        if (t < 0 and g + 1 > gmax) or lab[far] == mv:
            continue
        nc = g + 1 if t < 0 else g
        for c in range(g):
            _copy_row(C, c, Cw, c)
        _copy_row(Zw, far, Cw, mv)
        best, bg = _keep_better(_decode(Zw, P, Cw, nc, k, hi, tol, tl), nc, tl, best, bg, tol, out_lab)
    return best, bg


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
def seed_state(seed, a, b):
    """The generator's state for (seed, a, b): splitmix64 of their mix, so every round
    and window draws from its own stream."""
    st = np.empty(1, np.uint64)
    z = mix64(np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(a) * np.uint64(0xBF58476D1CE4E5B9)
              + np.uint64(b) * np.uint64(0x94D049BB133111EB) + np.uint64(0x2545F4914F6CDD1D))
    if z == np.uint64(0):
        z = np.uint64(0x2545F4914F6CDD1D)
    st[0] = z
    return st


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
    fit[0] = partition_sse(Zw, labs[0], g)
    # others: random centre sets of a random feasible size near g
    for p in range(1, pop):
        nc = g + _rand_int(st, np.int64(3)) - 1
        nc = min(max(nc, gmin), gmax)
        _random_centres(Zw, Cw, nc, st)
        fit[p] = _decode(Zw, P, Cw, nc, k, hi, tol, tl)
        for i in range(m):
            labs[p, i] = tl[i]
        ng[p] = nc
    for gen in range(gens):
        p1 = _tournament(fit, pop, st)
        p2 = _tournament(fit, pop, st)
        group_means(Zw, labs[p1], ng[p1], C)
        group_means(Zw, labs[p2], ng[p2], C2)
        nsel = _crossover(Zw, C, ng[p1], C2, ng[p2], Cw, gmin, gmax, st)
        assign_constrained(Zw, Cw, nsel, k, hi, tl)
        _mutate(tl, m, st)
        win_descent(Zw, P, tl, nsel, k, hi, tol)
        _replace_worst(labs, ng, fit, tl, nsel, partition_sse(Zw, tl, nsel), tol)
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


