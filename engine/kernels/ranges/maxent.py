"""Numba kernels of maxent: maximum-entropy classes (Tsiafoulis, Zorkadis &
Pimenidis, "Maximum Entropy Oriented Anonymization Algorithm for Privacy Preserving
Data Mining"), driven by ``engine/methods/maxent.py``, which documents the algorithm
and validates input; these loops assume valid arrays. ``tests/reference_sensitive.py``
re-implements each of them plainly, and the tests compare.

Common representation (maxent):

* ``Xn`` (n, dn) float64: numeric QIs scaled to [0, 1] by their range (a constant
  column is all 0), so a class's numeric NCP term is just ``max - min``;
* ``C`` (n, dc) int64: categorical QI codes, column ``j`` in ``0..card[j]-1``;
  ``off`` (dc+1) are offsets of each column's codes in flattened per-class
  count tables;
* ``w`` (dn+dc): NCP weights, numeric columns first;
* ``sa`` (n) int64 codes ``0..m-1``.

NCP of a class E (per tuple, the paper's eq. 4 summed over attributes):
``sum_j w_j (max_j - min_j) + sum_j w_j ncp_cat(|S_j|)`` where ``S_j`` is the set
of the class's values of categorical column j and ``ncp_cat(z) = z / card_j`` if
``z > 1`` else 0. A class contributes ``|E| * NCP(E)`` to the table's NCP.

Entropies are in bits (``engine.kernels.entropy``).
"""
from collections import namedtuple

import numpy as np
from numba import njit

from ..common import widen
from ..dependency.graph import find_root as _find
from ..entropy import entropy_of_sums, xlog2x

# ---------------------------------------------------------------- helpers


@njit(cache=True, nogil=True)
def _cat_ncp(z, card):
    if z > 1:
        return z / card
    return 0.0


# ---------------------------------------------------------------- maxent: class creation (Figs. 1 and 3)


@njit(cache=True, nogil=True)
def _first_row(order, a, b, sa, class_of, cnt, m, u):
    """A new class's first row: from the smallest non-empty SA bucket of the cluster
    ``order[a:b]`` (ties: lowest SA code), its ``floor(u * size)``-th unassigned row in
    row order."""
    s0 = -1
    for s in range(m):
        if cnt[s] > 0 and (s0 < 0 or cnt[s] < cnt[s0]):
            s0 = s
    target = min(int(u * cnt[s0]), cnt[s0] - 1)
    seen = 0
    for t in range(a, b):
        r = order[t]
        if class_of[r] < 0 and sa[r] == s0:
            if seen == target:
                return r
            seen += 1
    return -1


@njit(cache=True, nogil=True)
def _cheapest_row(Xn, C, off, card, w, sa, order, a, b, class_of, sa_stamp, cat_stamp, setsz, mn, mx, stamp):
    """The unassigned row of the cluster ``order[a:b]`` whose SA value is not in the class
    yet (``sa_stamp``) and that gives the class the smallest NCP (ties: lowest row)."""
    dn = Xn.shape[1]
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
        for j in range(C.shape[1]):
            z = setsz[j]
            if cat_stamp[off[j] + C[r, j]] != stamp:
                z += 1
            v += w[dn + j] * _cat_ncp(z, card[j])
        if v < bestv:
            bestv = v
            best = r
    return best


@njit(cache=True, nogil=True)
def _join(Xn, C, off, sa, r, cls, first, class_of, cnt, sa_stamp, cat_stamp, setsz, mn, mx, stamp):
    """Row r joins class ``cls`` (``first``: its first row): its SA bucket loses it, the
    class's ranges and category sets grow. Returns 1 when the bucket became empty."""
    class_of[r] = cls
    s = sa[r]
    sa_stamp[s] = stamp
    cnt[s] -= 1
    for j in range(Xn.shape[1]):
        x = Xn[r, j]
        if first or x < mn[j]:
            mn[j] = x
        if first or x > mx[j]:
            mx[j] = x
    for j in range(C.shape[1]):
        q = off[j] + C[r, j]
        if first:
            setsz[j] = 0
        if cat_stamp[q] != stamp:
            cat_stamp[q] = stamp
            setsz[j] += 1
    return 1 if cnt[s] == 0 else 0


@njit(cache=True, nogil=True)
def form_round(Xn, C, off, card, w, sa, m, order, cstart, d, urand, class_of, next_class):
    """One pass of Tsiafoulis et al. (maximum entropy) Fig. 1 for a fixed ``d`` over the QI clusters.

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
    cnt = np.zeros(m, np.int64)
    sa_stamp = np.zeros(m, np.int64)
    cat_stamp = np.zeros(off[dc], np.int64)
    setsz = np.zeros(dc, np.int64)
    mn = np.empty(dn)
    mx = np.empty(dn)
    stamp = 0
    ui = 0
    for q in range(cstart.shape[0] - 1):
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
            nonempty += cnt[s] > 0
        while nonempty >= d:
            stamp += 1
            r = _first_row(order, a, b, sa, class_of, cnt, m, urand[ui])
            ui += 1
            for p in range(d):
                if p > 0:
                    r = _cheapest_row(Xn, C, off, card, w, sa, order, a, b, class_of, sa_stamp, cat_stamp, setsz,
                                      mn, mx, stamp)
                nonempty -= _join(Xn, C, off, sa, r, next_class, p == 0, class_of, cnt, sa_stamp, cat_stamp, setsz,
                                  mn, mx, stamp)
            next_class += 1
    return next_class


# ---------------------------------------------------------------- maxent: class state

# The classes' statistics, one array each, indexed by class id: rows, still a class
# (not merged away), numeric min / max, per categorical column the count of every
# code (``catcnt``, columns at ``off``) and the number of distinct codes (``setsz``),
# SA counts and sum of c log2 c (``slog``, for the entropy), the union-find parent,
# and ``accept[c, s]``: class c stays >= eps - tol when one more row with SA value s
# joins. The kernels unpack it by name.
ClassState = namedtuple("ClassState", "size alive mn mx catcnt setsz sacnt slog parent accept")


@njit(cache=True, nogil=True)
def init_state(Xn, C, off, sa, m, class_of, nc, eps, tol):
    """Per-class statistics of classes ``0..nc-1`` (rows with ``class_of < 0`` are
    unassigned): a ``ClassState``. One spare slot (index ``nc``) is left for a class
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
    return ClassState(size, alive, mn, mx, catcnt, setsz, sacnt, slog, parent, accept)


@njit(cache=True, nogil=True)
def refresh_accept(size, sacnt, slog, accept, c, eps, tol):
    N1 = size[c] + 1
    for s in range(sacnt.shape[1]):
        sl = slog[c] - xlog2x(np.int64(sacnt[c, s])) + xlog2x(sacnt[c, s] + 1)
        accept[c, s] = entropy_of_sums(N1, sl) >= eps - tol


@njit(cache=True, nogil=True)
def _add_row(Xn, C, off, sa, r, c, size, mn, mx, catcnt, setsz, sacnt, slog):
    dc = C.shape[1]
    size[c] += 1
    widen(mn, mx, c, Xn, r)
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
    """Tsiafoulis et al. (maximum entropy) Fig. 4. Repeat: dissolve every live class whose SA entropy is
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
            if alive[c] and entropy_of_sums(size[c], slog[c]) < eps - tol:
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
    """The SA entropy of classes a and b as one."""
    acc = 0.0
    for q in range(sacnt.shape[1]):
        acc += xlog2x(np.int64(sacnt[a, q] + sacnt[b, q]))
    return entropy_of_sums(size[a] + size[b], acc)


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
        while entropy_of_sums(size[a], slog[a]) < eps - tol:
            a = _merge_with_partner(card, w, a, state, off, dn, dc, eps, tol)
            if a < 0:
                break
            merges += 1
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
            a = _merge_with_partner(card, w, a, state, off, dn, dc, eps, tol)
            if a < 0:
                break
            merges += 1
    return merges


@njit(cache=True, nogil=True)
def _merge_with_partner(card, w, a, state, off, dn, dc, eps, tol):
    """Merge class ``a`` with its best partner (``_best_partner``) into the lower id,
    which is returned; -1 when it has none."""
    b = _best_partner(card, w, a, state, off, dn, dc, eps, tol)
    if b < 0:
        return b
    lo = a if a < b else b
    hi = b if a < b else a
    _merge_into(lo, hi, state, off, dn, dc, eps, tol)
    return lo


@njit(cache=True, nogil=True)
def resolve_labels(class_of, parent):
    """Final class of every row after merges (union-find roots)."""
    n = class_of.shape[0]
    out = np.empty(n, np.int64)
    for r in range(n):
        out[r] = _find(parent, class_of[r])
    return out
