"""Numba kernels for the sensitive-attribute methods: maximum-entropy classes
(seed 001, driven by ``engine/methods/maxent.py``) and MNQIA (seed 002, driven by
``engine/methods/mnqia.py``). The drivers document the algorithms and validate input;
these loops assume valid arrays. ``tests/reference_sensitive.py`` re-implements
each of them plainly, and the tests compare.

Common representation (maxent):

* ``Xn`` (n, dn) float64: numeric QIs scaled to [0, 1] by their range (a constant
  column is all 0), so a class's numeric NCP term is just ``max - min``;
* ``C`` (n, dc) int64: categorical QI codes, column ``j`` in ``0..card[j]-1``;
  ``off`` (dc+1) are offsets of each column's codes in flattened per-class
  count tables;
* ``w`` (dn+dc): NCP weights, numeric columns first;
* ``sa`` (n) int64 codes ``0..m-1``.

NCP of a class E (per tuple, seed 001 eq. 4 summed over attributes):
``sum_j w_j (max_j - min_j) + sum_j w_j ncp_cat(|S_j|)`` where ``S_j`` is the set
of the class's values of categorical column j and ``ncp_cat(z) = z / card_j`` if
``z > 1`` else 0. A class contributes ``|E| * NCP(E)`` to the table's NCP.

Entropies are in bits.
"""

import math

import numpy as np
from numba import njit

# ---------------------------------------------------------------- helpers


@njit(cache=True, nogil=True)
def xlog2x(c):
    if c <= 0:
        return 0.0
    return c * math.log2(c)


@njit(cache=True, nogil=True)
def entropy_counts(cnt):
    """Shannon entropy (bits) of a count vector."""
    N = 0
    for q in range(cnt.shape[0]):
        N += cnt[q]
    if N <= 0:
        return 0.0
    h = 0.0
    for q in range(cnt.shape[0]):
        if cnt[q] > 0:
            p = cnt[q] / N
            h -= p * math.log2(p)
    return h


@njit(cache=True, nogil=True)
def _cat_ncp(z, card):
    if z > 1:
        return z / card
    return 0.0


# ---------------------------------------------------------------- maxent: class creation (Figs. 1 and 3)


@njit(cache=True, nogil=True)
def form_round(Xn, C, off, card, w, sa, m, order, cstart, d, urand, class_of, next_class):
    """One pass of seed 001 Fig. 1 for a fixed ``d`` over the QI clusters.

    ``order`` lists the still unassigned rows grouped by cluster (cluster ``q`` is
    ``order[cstart[q]:cstart[q+1]]``, rows ascending inside). In each cluster,
    while at least ``d`` SA buckets are non-empty: take a tuple from the smallest
    non-empty bucket (ties: lowest SA code; the tuple is the
    ``floor(u * size)``-th of that bucket in row order, ``u`` the next value of
    ``urand``), then ``d-1`` times add the unassigned tuple of the cluster whose
    SA value is not in the class yet and that gives the class the smallest NCP
    (ties: lowest row). Writes class ids into ``class_of``; returns the next id.
    """
    dn = Xn.shape[1]
    dc = C.shape[1]
    totc = off[dc]
    ncl = cstart.shape[0] - 1
    cnt = np.zeros(m, np.int64)
    sa_stamp = np.zeros(m, np.int64)
    cat_stamp = np.zeros(totc, np.int64)
    setsz = np.zeros(dc, np.int64)
    mn = np.empty(dn)
    mx = np.empty(dn)
    stamp = 0
    ui = 0
    for q in range(ncl):
        a = cstart[q]
        b = cstart[q + 1]
        if b - a < d:
            continue
        for s in range(m):
            cnt[s] = 0
        for t in range(a, b):
            cnt[sa[order[t]]] += 1
        nonempty = 0
        for s in range(m):
            if cnt[s] > 0:
                nonempty += 1
        while nonempty >= d:
            stamp += 1
            s0 = -1
            for s in range(m):
                if cnt[s] > 0 and (s0 < 0 or cnt[s] < cnt[s0]):
                    s0 = s
            target = int(urand[ui] * cnt[s0])
            ui += 1
            if target >= cnt[s0]:
                target = cnt[s0] - 1
            tm = -1
            seen = 0
            for t in range(a, b):
                r = order[t]
                if class_of[r] < 0 and sa[r] == s0:
                    if seen == target:
                        tm = r
                        break
                    seen += 1
            # start the class with tm
            class_of[tm] = next_class
            sa_stamp[s0] = stamp
            cnt[s0] -= 1
            if cnt[s0] == 0:
                nonempty -= 1
            for j in range(dn):
                mn[j] = Xn[tm, j]
                mx[j] = Xn[tm, j]
            for j in range(dc):
                cat_stamp[off[j] + C[tm, j]] = stamp
                setsz[j] = 1
            for p in range(1, d):
                best = -1
                bestv = np.inf
                for t in range(a, b):
                    r = order[t]
                    if class_of[r] >= 0 or sa_stamp[sa[r]] == stamp:
                        continue
                    v = 0.0
                    for j in range(dn):
                        x = Xn[r, j]
                        lo = mn[j] if mn[j] < x else x
                        hi = mx[j] if mx[j] > x else x
                        v += w[j] * (hi - lo)
                    for j in range(dc):
                        z = setsz[j]
                        if cat_stamp[off[j] + C[r, j]] != stamp:
                            z += 1
                        v += w[dn + j] * _cat_ncp(z, card[j])
                    if v < bestv:
                        bestv = v
                        best = r
                r = best
                class_of[r] = next_class
                s = sa[r]
                sa_stamp[s] = stamp
                cnt[s] -= 1
                if cnt[s] == 0:
                    nonempty -= 1
                for j in range(dn):
                    x = Xn[r, j]
                    if x < mn[j]:
                        mn[j] = x
                    if x > mx[j]:
                        mx[j] = x
                for j in range(dc):
                    qq = off[j] + C[r, j]
                    if cat_stamp[qq] != stamp:
                        cat_stamp[qq] = stamp
                        setsz[j] += 1
            next_class += 1
    return next_class


# ---------------------------------------------------------------- maxent: class state


@njit(cache=True, nogil=True)
def init_state(Xn, C, off, sa, m, class_of, nc, eps, tol):
    """Per-class statistics of classes ``0..nc-1`` (rows with ``class_of < 0`` are
    unassigned). Returns ``(size, alive, mn, mx, catcnt, setsz, sacnt, slog,
    parent, accept)``; ``accept[c, s]``: class c stays >= eps - tol when one more
    row with SA value s joins. One spare slot (index ``nc``) is left for a class
    made of leftovers."""
    n, dn = Xn.shape
    dc = C.shape[1]
    NC = nc + 1
    size = np.zeros(NC, np.int64)
    alive = np.zeros(NC, np.bool_)
    mn = np.full((NC, dn), np.inf)
    mx = np.full((NC, dn), -np.inf)
    catcnt = np.zeros((NC, off[dc]), np.int32)
    setsz = np.zeros((NC, dc), np.int64)
    sacnt = np.zeros((NC, m), np.int32)
    slog = np.zeros(NC)
    parent = np.arange(NC)
    for r in range(n):
        c = class_of[r]
        if c >= 0:
            _add_row(Xn, C, off, sa, r, c, size, mn, mx, catcnt, setsz, sacnt, slog)
    accept = np.zeros((NC, m), np.bool_)
    for c in range(nc):
        alive[c] = size[c] > 0
        refresh_accept(size, sacnt, slog, accept, c, eps, tol)
    return size, alive, mn, mx, catcnt, setsz, sacnt, slog, parent, accept


@njit(cache=True, nogil=True)
def refresh_accept(size, sacnt, slog, accept, c, eps, tol):
    N1 = size[c] + 1
    for s in range(sacnt.shape[1]):
        sl = slog[c] - xlog2x(np.int64(sacnt[c, s])) + xlog2x(sacnt[c, s] + 1)
        accept[c, s] = math.log2(N1) - sl / N1 >= eps - tol


@njit(cache=True, nogil=True)
def _add_row(Xn, C, off, sa, r, c, size, mn, mx, catcnt, setsz, sacnt, slog):
    dn = Xn.shape[1]
    dc = C.shape[1]
    size[c] += 1
    for j in range(dn):
        x = Xn[r, j]
        if x < mn[c, j]:
            mn[c, j] = x
        if x > mx[c, j]:
            mx[c, j] = x
    for j in range(dc):
        q = off[j] + C[r, j]
        if catcnt[c, q] == 0:
            setsz[c, j] += 1
        catcnt[c, q] += 1
    s = sa[r]
    sacnt[c, s] += 1
    acc = 0.0
    for q in range(sacnt.shape[1]):
        acc += xlog2x(np.int64(sacnt[c, q]))  # one specialization: int64
    slog[c] = acc


@njit(cache=True, nogil=True)
def class_entropy(size, slog, c):
    N = size[c]
    if N <= 0:
        return 0.0
    return math.log2(N) - slog[c] / N


@njit(cache=True, nogil=True)
def _class_ncp(mn, mx, setsz, card, w, c, dn, dc):
    v = 0.0
    for j in range(dn):
        v += w[j] * (mx[c, j] - mn[c, j])
    for j in range(dc):
        v += w[dn + j] * _cat_ncp(setsz[c, j], card[j])
    return v


@njit(cache=True, nogil=True)
def _add_cost(Xn, C, off, card, w, r, c, size, mn, mx, catcnt, setsz, bound):
    """Increase of the table's NCP (``sum |E| NCP(E)``) if row r joins class c.
    Every column's share is >= 0, so the sum stops early once above ``bound``."""
    dn = Xn.shape[1]
    dc = C.shape[1]
    N = size[c]
    v = 0.0
    for j in range(dn):
        x = Xn[r, j]
        old = mx[c, j] - mn[c, j]
        lo = mn[c, j] if mn[c, j] < x else x
        hi = mx[c, j] if mx[c, j] > x else x
        v += w[j] * ((N + 1) * (hi - lo) - N * old)
        if v > bound:
            return v
    for j in range(dc):
        z = setsz[c, j]
        z1 = z
        if catcnt[c, off[j] + C[r, j]] == 0:
            z1 += 1
        v += w[dn + j] * ((N + 1) * _cat_ncp(z1, card[j]) - N * _cat_ncp(z, card[j]))
        if v > bound:
            return v
    return v


# ---------------------------------------------------------------- maxent: incorporation (Fig. 4)


@njit(cache=True, nogil=True)
def _eligible(sa, r, c, tier, state, eps, tol):
    # tier 1: class lacks r's SA value; tier 2: entropy stays >= eps - tol with r
    size, alive, mn, mx, catcnt, setsz, sacnt, slog, parent, accept = state
    if not alive[c]:
        return False
    s = sa[r]
    if tier == 1:
        return sacnt[c, s] == 0
    if tier == 2:
        return accept[c, s]
    return True


@njit(cache=True, nogil=True)
def _nearest_class(Xn, C, off, card, w, sa, r, tier, state, eps, tol, srt, pos, class_of, reach):
    """Live class of the given tier (0: any) whose NCP grows least when row r
    joins; ties to the lowest class id; -1 if none. Exact: the rows next to r in
    the lexicographic order ``srt`` (``pos`` = rank of each row) only supply a
    first bound for the early exit, so they change the speed, not the answer.
    (Callers pass ``tier`` and ``reach`` as int64 values: a literal argument
    would compile a specialization of this kernel per literal.)"""
    size, alive, mn, mx, catcnt, setsz, sacnt, slog, parent, accept = state
    n = srt.shape[0]
    best = -1
    bestv = np.inf
    p = pos[r]
    for delta in range(1, reach + 1):
        for side in range(2):
            q = p - delta if side == 0 else p + delta
            if q < 0 or q >= n:
                continue
            c = class_of[srt[q]]
            if c < 0:
                continue
            c = _find(parent, c)
            if not _eligible(sa, r, c, tier, state, eps, tol):
                continue
            v = _add_cost(Xn, C, off, card, w, r, c, size, mn, mx, catcnt, setsz, bestv)
            if v < bestv or (v == bestv and c < best):
                bestv = v
                best = c
    for c in range(size.shape[0]):
        if not alive[c]:
            continue
        if tier == 1 and sacnt[c, sa[r]] != 0:
            continue
        if tier == 2 and not accept[c, sa[r]]:
            continue
        v = _add_cost(Xn, C, off, card, w, r, c, size, mn, mx, catcnt, setsz, bestv)
        if v < bestv or (v == bestv and c < best):
            bestv = v
            best = c
    return best


@njit(cache=True, nogil=True)
def incorporate(Xn, C, off, card, w, sa, class_of, state, eps, tol, max_iter, srt, pos):
    """Seed 001 Fig. 4. Repeat: dissolve every live class whose SA entropy is
    below ``eps - tol``; every dissolved or never-assigned row (in row order) joins
    the live class that lacks its SA value and whose NCP grows least (the
    "class with the most similar QIs"; ties: lowest class id). If every live
    class already holds its SA value, it joins the class whose NCP grows least
    among those whose entropy stays >= ``eps - tol`` after the join. Rows that
    fit nowhere are returned as leftovers (``class_of = -1``).
    Returns ``(iterations, dissolved_classes, incorporated_rows, leftover_rows)``.
    """
    size, alive, mn, mx, catcnt, setsz, sacnt, slog, parent, accept = state
    n = Xn.shape[0]
    NC = size.shape[0]
    dissolved = 0
    moved = 0
    it = 0
    leftover = np.empty(0, np.int64)
    while it < max_iter:
        # classes to dissolve
        low = np.zeros(NC, np.bool_)
        nlow = 0
        for c in range(NC):
            if alive[c] and class_entropy(size, slog, c) < eps - tol:
                low[c] = True
                nlow += 1
        nun = 0
        for r in range(n):
            if class_of[r] < 0:
                nun += 1
        if nlow == 0 and (nun == 0 or it > 0):
            break
        it += 1
        dissolved += nlow
        for c in range(NC):
            if low[c]:
                alive[c] = False
        le = np.empty(n, np.int64)
        nle = 0
        for r in range(n):
            c = class_of[r]
            if c < 0 or low[c]:
                le[nle] = r
                nle += 1
                class_of[r] = -1
        for c in range(NC):
            if low[c]:
                size[c] = 0
        nleft = 0
        left = np.empty(nle, np.int64)
        reach = np.int64(8)  # int64 values, not literals: see _nearest_class
        for t in range(nle):
            r = le[t]
            best = _nearest_class(Xn, C, off, card, w, sa, r, np.int64(1), state, eps, tol, srt, pos, class_of, reach)
            if best < 0:
                best = _nearest_class(Xn, C, off, card, w, sa, r, np.int64(2), state, eps, tol, srt, pos, class_of, reach)
            if best < 0:
                left[nleft] = r
                nleft += 1
                continue
            class_of[r] = best
            _add_row(Xn, C, off, sa, r, best, size, mn, mx, catcnt, setsz, sacnt, slog)
            refresh_accept(size, sacnt, slog, accept, best, eps, tol)
            moved += 1
        leftover = left[:nleft].copy()
    return it, dissolved, moved, leftover


@njit(cache=True, nogil=True)
def _find(parent, c):
    while parent[c] != c:
        parent[c] = parent[parent[c]]
        c = parent[c]
    return c


@njit(cache=True, nogil=True)
def _merge_cost(card, w, a, b, size, mn, mx, catcnt, setsz, off, dn, dc, bound):
    """Increase of the table's NCP if classes a and b become one (every column's
    share is >= 0, so the sum stops early once above ``bound``)."""
    Na = size[a]
    Nb = size[b]
    v = 0.0
    for j in range(dn):
        lo = mn[a, j] if mn[a, j] < mn[b, j] else mn[b, j]
        hi = mx[a, j] if mx[a, j] > mx[b, j] else mx[b, j]
        v += w[j] * ((Na + Nb) * (hi - lo) - Na * (mx[a, j] - mn[a, j]) - Nb * (mx[b, j] - mn[b, j]))
        if v > bound:
            return v
    for j in range(dc):
        z = np.int64(0)  # not a literal 0: it is passed to _cat_ncp
        for q in range(off[j], off[j + 1]):
            if catcnt[a, q] > 0 or catcnt[b, q] > 0:
                z += 1
        v += w[dn + j] * ((Na + Nb) * _cat_ncp(z, card[j]) - Na * _cat_ncp(setsz[a, j], card[j])
                          - Nb * _cat_ncp(setsz[b, j], card[j]))
        if v > bound:
            return v
    return v


@njit(cache=True, nogil=True)
def _merge_entropy(size, sacnt, a, b):
    N = size[a] + size[b]
    h = 0.0
    for q in range(sacnt.shape[1]):
        c = sacnt[a, q] + sacnt[b, q]
        if c > 0:
            p = c / N
            h -= p * math.log2(p)
    return h


@njit(cache=True, nogil=True)
def _merge_into(a, b, state, off, dn, dc, eps, tol):
    size, alive, mn, mx, catcnt, setsz, sacnt, slog, parent, accept = state
    size[a] += size[b]
    size[b] = 0
    for j in range(dn):
        if mn[b, j] < mn[a, j]:
            mn[a, j] = mn[b, j]
        if mx[b, j] > mx[a, j]:
            mx[a, j] = mx[b, j]
    for j in range(dc):
        z = 0
        for q in range(off[j], off[j + 1]):
            catcnt[a, q] += catcnt[b, q]
            if catcnt[a, q] > 0:
                z += 1
        setsz[a, j] = z
    acc = 0.0
    for q in range(sacnt.shape[1]):
        sacnt[a, q] += sacnt[b, q]
        acc += xlog2x(np.int64(sacnt[a, q]))
    slog[a] = acc
    alive[b] = False
    parent[b] = a
    refresh_accept(size, sacnt, slog, accept, a, eps, tol)


@njit(cache=True, nogil=True)
def _best_partner(card, w, a, state, off, dn, dc, eps, tol):
    # Partner for class a: smallest NCP increase among live classes whose union
    # with a reaches eps; if there is none, smallest NCP increase overall.
    size, alive, mn, mx, catcnt, setsz, sacnt, slog, parent, accept = state
    best_ok = -1
    bv_ok = np.inf
    best_any = -1
    bv_any = np.inf
    for b in range(size.shape[0]):
        if b == a or not alive[b]:
            continue
        # bv_ok >= bv_any, so a cost above bv_ok can win neither comparison
        v = _merge_cost(card, w, a, b, size, mn, mx, catcnt, setsz, off, dn, dc, bv_ok)
        if v < bv_any:
            bv_any = v
            best_any = b
        if v < bv_ok and _merge_entropy(size, sacnt, a, b) >= eps - tol:
            bv_ok = v
            best_ok = b
    if best_ok >= 0:
        return best_ok
    return best_any


@njit(cache=True, nogil=True)
def settle_leftovers(Xn, C, off, card, w, sa, class_of, state, leftover, eps, tol, srt, pos):
    """Rows that fit in no class without pushing its entropy below eps: each (in
    row order) joins the live class whose NCP grows least; while that class's
    entropy is below ``eps - tol`` it is merged with its best partner (see
    ``_best_partner``). If no class is alive, all leftovers form one new class
    (slot ``NC-1``). Returns ``(joins, merges)``."""
    size, alive, mn, mx, catcnt, setsz, sacnt, slog, parent, accept = state
    dn = Xn.shape[1]
    dc = C.shape[1]
    NC = size.shape[0]
    nalive = 0
    for c in range(NC):
        if alive[c]:
            nalive += 1
    joins = 0
    merges = 0
    if leftover.shape[0] == 0:
        return joins, merges
    if nalive == 0:
        c = NC - 1
        alive[c] = True
        for t in range(leftover.shape[0]):
            r = leftover[t]
            class_of[r] = c
            _add_row(Xn, C, off, sa, r, c, size, mn, mx, catcnt, setsz, sacnt, slog)
        return leftover.shape[0], 1
    reach = np.int64(8)  # int64 values, not literals: see _nearest_class
    for t in range(leftover.shape[0]):
        r = leftover[t]
        best = _nearest_class(Xn, C, off, card, w, sa, r, np.int64(0), state, eps, tol, srt, pos, class_of, reach)
        class_of[r] = best
        _add_row(Xn, C, off, sa, r, best, size, mn, mx, catcnt, setsz, sacnt, slog)
        refresh_accept(size, sacnt, slog, accept, best, eps, tol)
        joins += 1
        a = best
        while class_entropy(size, slog, a) < eps - tol:
            b = _best_partner(card, w, a, state, off, dn, dc, eps, tol)
            if b < 0:
                break
            lo = a if a < b else b
            hi = b if a < b else a
            _merge_into(lo, hi, state, off, dn, dc, eps, tol)
            merges += 1
            a = lo
    return joins, merges


@njit(cache=True, nogil=True)
def enforce_min_size(Xn, C, off, card, w, state, k, eps, tol):
    """Merge every live class smaller than k (lowest id first) with its best
    partner until it has k rows. Two classes that both reach eps give a union
    that reaches eps (entropy is concave), so this never breaks the target.
    Returns the number of merges."""
    size, alive, mn, mx, catcnt, setsz, sacnt, slog, parent, accept = state
    dn = Xn.shape[1]
    dc = C.shape[1]
    merges = 0
    for a0 in range(size.shape[0]):
        a = a0
        while alive[a] and size[a] < k:
            b = _best_partner(card, w, a, state, off, dn, dc, eps, tol)
            if b < 0:
                break
            lo = a if a < b else b
            hi = b if a < b else a
            _merge_into(lo, hi, state, off, dn, dc, eps, tol)
            merges += 1
            a = lo
    return merges


@njit(cache=True, nogil=True)
def resolve_labels(class_of, parent):
    """Final class of every row after merges (union-find roots)."""
    n = class_of.shape[0]
    out = np.empty(n, np.int64)
    for r in range(n):
        out[r] = _find(parent, class_of[r])
    return out


# ---------------------------------------------------------------- per-class metrics


@njit(cache=True, nogil=True)
def group_minmax(X, labels, G):
    """Per-group min and max of every column of X (rows with label in 0..G-1)."""
    n, d = X.shape
    mn = np.full((G, d), np.inf)
    mx = np.full((G, d), -np.inf)
    for i in range(n):
        g = labels[i]
        for j in range(d):
            x = X[i, j]
            if x < mn[g, j]:
                mn[g, j] = x
            if x > mx[g, j]:
                mx[g, j] = x
    return mn, mx


@njit(cache=True, nogil=True)
def group_distinct(codes, labels, G, card):
    """Number of distinct codes per group, for each column of ``codes`` (n, dc)."""
    n, dc = codes.shape
    out = np.zeros((G, dc), np.int64)
    # rows grouped by label: walk groups through a counting sort
    cnt = np.zeros(G + 1, np.int64)
    for i in range(n):
        cnt[labels[i] + 1] += 1
    for g in range(G):
        cnt[g + 1] += cnt[g]
    order = np.empty(n, np.int64)
    pos = cnt[:G].copy()
    for i in range(n):
        g = labels[i]
        order[pos[g]] = i
        pos[g] += 1
    for j in range(dc):
        seen = np.full(card[j], -1, np.int64)
        for g in range(G):
            z = 0
            for t in range(cnt[g], cnt[g + 1]):
                c = codes[order[t], j]
                if seen[c] != g:
                    seen[c] = g
                    z += 1
            out[g, j] = z
    return out


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
    """MMDCF grouping (seed 002 steps 8-24 as read in ``engine/methods/mnqia.py``).

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
        for j in range(d):
            x = Xn[r, j]
            if x < gmn[best, j]:
                gmn[best, j] = x
            if x > gmx[best, j]:
                gmx[best, j] = x
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
        x = Xn[r, j]
        if x < gmn[G, j]:
            gmn[G, j] = x
        if x > gmx[G, j]:
            gmx[G, j] = x
