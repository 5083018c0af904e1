"""The column-major slots of the brute-force MDAV kernels, shared by the streamed
pass's leaves (``engine.kernels.mdav.leaf``) and V-MDAV / IV-MDAV by brute force
(``engine.kernels.mdav.brute``).

Layout (``mdav_slots``): the remaining rows of a leaf sit compacted, column-major,
in a scratch buffer ``C`` (d, capacity): slot ``a`` holds the row ``orig[a]``.
Removing a row moves the last slot into its hole, so slot order means nothing and
every tie is broken on ``orig``. A scan (``dists``) computes ``dist[a]`` for all
slots at once, the columns fused in one loop over the slots:
``s = t0*t0; s += t1*t1; ...`` is the same sum, in the same order, as the
row-by-row ``common.sq_dist`` (0.0 + t0*t0 == t0*t0 exactly), so distances are bit-identical,
and the loop vectorizes across slots without reassociation (no fastmath). The
selections then read the distances as int64 bit patterns (a non-negative double
orders like its bits), which lets the max / min reductions vectorize too:

* ``farthest``: the largest distance, then the least ``(orig << sh) | slot`` among
  the slots at that distance (lowest row index wins, and the key gives its slot);
* ``nearest``, the k-1 nearest of r: r's distance set to +inf; the (k-1)-th smallest
  distance ``T`` found by passes "least distance above the previous one, and how
  many rows sit at the previous one" (at most k-1 passes, fewer with ties); then
  the rows at distance <= ``T`` (k-1 of them, more only with ties) go through a
  bounded insertion by (distance, row index).

MDAV's second seed (the farthest row from r) reuses r's distances, kept in step
with the slot moves, so an MDAV round scans three times instead of four.
``leaf.aggregate_leaves`` fills ``C`` straight from the block (``fill_slots``),
leaf after leaf (``leaf_rows``), in one scratch buffer (``slot_scratch``), and the
kernel writes the block's labels itself. These shortcuts need finite distances:
every |x| < ``FINITE_LIMIT`` (``fits``), at least one column and k >= 1; other data
run ``leaf``'s row-by-row version, which defines the labels. Data are float64, as
everywhere in the engine.
"""

import numpy as np
from numba import njit

from .indexed import MDAV
from ..common import insert_nearest
from ..index.split import split_leaves

# |x| below this everywhere: squared distances to rows and centroids stay finite
# (d * (3 n 1e100)**2 is far below the float64 range), so no NaN and no inf
FINITE_LIMIT = 1e100
INF_BITS = 0x7FF0000000000000  # the bits of +inf: above those of every finite distance
MAX_I64 = (1 << 63) - 1


# -- the column-major kernel ----------------------------------------------------------
# The small helpers are inlined into ``mdav_slots`` (inline="always"): a call of a
# compiled function increments and decrements the reference count of every array it
# is passed. Not ``dists``: ``mdav_slots`` calls it twice, and inlined it compiled
# twice (0.35 s of CPU on the first run of a fresh install), while its call costs
# nothing measurable next to the scan (200k rows x 8 in leaves of 256: 0.14 s either way).


@njit(cache=True, nogil=True, inline="always")
def _dists_more(C, m, q, dist, j):
    """``dists``' columns from j on, added to ``dist``: eight at a time, then four, then the
    last one to three, each group fused in one loop over the slots (each slot's sum keeps the
    column order)."""
    d = C.shape[0]
    while j + 8 <= d:
        q0, q1, q2, q3, q4, q5, q6, q7 = q[j], q[j + 1], q[j + 2], q[j + 3], q[j + 4], q[j + 5], q[j + 6], q[j + 7]
        for a in range(m):
            t0 = C[j, a] - q0
            t1 = C[j + 1, a] - q1
            t2 = C[j + 2, a] - q2
            t3 = C[j + 3, a] - q3
            t4 = C[j + 4, a] - q4
            t5 = C[j + 5, a] - q5
            t6 = C[j + 6, a] - q6
            t7 = C[j + 7, a] - q7
            s = dist[a]
            s += t0 * t0
            s += t1 * t1
            s += t2 * t2
            s += t3 * t3
            s += t4 * t4
            s += t5 * t5
            s += t6 * t6
            s += t7 * t7
            dist[a] = s
        j += 8
    if j + 4 <= d:
        q0, q1, q2, q3 = q[j], q[j + 1], q[j + 2], q[j + 3]
        for a in range(m):
            t0 = C[j, a] - q0
            t1 = C[j + 1, a] - q1
            t2 = C[j + 2, a] - q2
            t3 = C[j + 3, a] - q3
            s = dist[a]
            s += t0 * t0
            s += t1 * t1
            s += t2 * t2
            s += t3 * t3
            dist[a] = s
        j += 4
    if j + 3 == d:
        q0, q1, q2 = q[j], q[j + 1], q[j + 2]
        for a in range(m):
            t0 = C[j, a] - q0
            t1 = C[j + 1, a] - q1
            t2 = C[j + 2, a] - q2
            s = dist[a]
            s += t0 * t0
            s += t1 * t1
            s += t2 * t2
            dist[a] = s
    elif j + 2 == d:
        q0, q1 = q[j], q[j + 1]
        for a in range(m):
            t0 = C[j, a] - q0
            t1 = C[j + 1, a] - q1
            s = dist[a]
            s += t0 * t0
            s += t1 * t1
            dist[a] = s
    elif j + 1 == d:
        q0 = q[j]
        for a in range(m):
            t0 = C[j, a] - q0
            dist[a] += t0 * t0


@njit(cache=True, nogil=True)
def dists(C, m, q, dist):
    """``dist[a] = sum_j (C[j, a] - q[j])**2`` for the slots a < m, summed over j in
    column order from 0.0 (bit-identical to ``common.sq_dist``). Columns go eight at a time,
    then four, then the last one to three, each group fused in one vectorizable loop over the
    slots (written out: the hot loop of the leaves; each slot's sum keeps the column order)."""
    d = C.shape[0]
    if d >= 8:
        q0, q1, q2, q3, q4, q5, q6, q7 = q[0], q[1], q[2], q[3], q[4], q[5], q[6], q[7]
        for a in range(m):
            t0 = C[0, a] - q0
            t1 = C[1, a] - q1
            t2 = C[2, a] - q2
            t3 = C[3, a] - q3
            t4 = C[4, a] - q4
            t5 = C[5, a] - q5
            t6 = C[6, a] - q6
            t7 = C[7, a] - q7
            s = t0 * t0
            s += t1 * t1
            s += t2 * t2
            s += t3 * t3
            s += t4 * t4
            s += t5 * t5
            s += t6 * t6
            s += t7 * t7
            dist[a] = s
        j = 8
    elif d >= 4:
        q0, q1, q2, q3 = q[0], q[1], q[2], q[3]
        for a in range(m):
            t0 = C[0, a] - q0
            t1 = C[1, a] - q1
            t2 = C[2, a] - q2
            t3 = C[3, a] - q3
            s = t0 * t0
            s += t1 * t1
            s += t2 * t2
            s += t3 * t3
            dist[a] = s
        j = 4
    else:
        q0 = q[0]
        for a in range(m):
            t0 = C[0, a] - q0
            dist[a] = t0 * t0
        j = 1
    _dists_more(C, m, q, dist, j)


@njit(cache=True, nogil=True, inline="always")
def slot_bits(C):
    """Slot bits of ``farthest``'s key for a buffer of C's capacity."""
    sh = 1
    while (1 << sh) <= C.shape[1]:
        sh += 1
    return sh


@njit(cache=True, nogil=True, inline="always")
def farthest(di, orig, m, sh):
    """The slot of the largest distance (bits ``di``), ties to the lowest ``orig``."""
    mx = -1
    for a in range(m):
        mx = max(mx, di[a])
    key = MAX_I64
    for a in range(m):
        kq = (orig[a] << sh) | a  # orders by row index; the low bits give the slot
        if di[a] == mx:
            key = min(key, kq)
    return key & ((1 << sh) - 1)


@njit(cache=True, nogil=True, inline="always")
def nearest(di, orig, m, r, kk, sh, cand, nd, no, ns):
    """The kk >= 1 nearest slots to slot r (not r) by (distance, orig), into
    ``ns[:kk]`` in that order (``nd``: their distance bits; ``no``: scratch; ``sh``:
    ``slot_bits``). Needs m - 1 >= kk. Overwrites ``di[r]``."""
    di[r] = INF_BITS
    # thr = the kk-th smallest distance: pass i finds the next distinct distance v
    # and counts the rows at the previous one (prev); cum counts rows <= prev
    prev = -1
    cum = 0
    while True:
        v = MAX_I64
        c = 0
        for a in range(m):
            x = di[a]
            v = min(v, x if x > prev else MAX_I64)
            if x == prev:
                c += 1
        cum += c
        if cum >= kk:
            thr = prev
            break
        if cum == kk - 1:  # v holds at least one more row: the kk-th
            thr = v
            break
        prev = v
    # the candidates: rows at most thr (kk of them, more with ties at thr)
    c = 0
    for a in range(m):
        cand[c] = a
        c += di[a] <= thr
    # bounded insertion by (distance, row index), the rule of the MDAV family: the
    # keys (orig << sh) | slot order as the rows and give back the slots
    found = 0
    for e in range(c):
        a = cand[e]
        found = insert_nearest(no, nd, kk, found, (orig[a] << sh) | a, di[a])
    for b in range(found):
        ns[b] = no[b] & ((1 << sh) - 1)
    return found


@njit(cache=True, nogil=True)
def mdav_slots(C, orig, m, total, method, k, labels, group, dist, q, cand, nd, no, ns):
    """MDAV (0) or MDAV-single-group (1) on the m rows in slots 0..m-1 of ``C``
    (column-major, ``orig[a]`` = row of slot a, ``total`` = their column sums in row
    order). Writes ``labels[orig[a]]``, groups numbered from ``group``; returns the
    next group number. Needs k >= 1, d >= 1 and finite distances (see the module
    docstring); ``C``, ``orig``, ``total`` and the scratch arrays are overwritten.
    Scratch: ``dist`` and ``cand`` of C's capacity, ``q`` of d, ``nd``, ``no``, ``ns``
    of k + 1."""
    d = C.shape[0]
    di = dist.view(np.int64)
    sh = slot_bits(C)
    kk = k - 1
    # one pass of this loop forms one group around a seed r: from the centroid
    # (MDAV's r) or, for MDAV's second group, the farthest row from the last seed,
    # whose distances are still in dist
    from_last = False
    final = False
    while True:
        if not from_last:
            if m < 2 * k:
                break
            final = m < 3 * k  # the last group before the rest: 2k <= m < 3k
            for j in range(d):
                q[j] = total[j] / m
            dists(C, m, q, dist)
        r = farthest(di, orig, m, sh)
        for j in range(d):
            q[j] = C[j, r]
        dists(C, m, q, dist)
        found = 0
        if kk > 0:
            found = nearest(di, orig, m, r, kk, sh, cand, nd, no, ns)
        take_group(C, orig, total, labels, group, r, ns, found)
        # free their slots, highest first; distances move along
        for b in range(found + 1):
            p = ns[b]
            m -= 1
            if p != m:
                for j in range(d):
                    C[j, p] = C[j, m]
                orig[p] = orig[m]
                di[p] = di[m]
        group += 1
        if final:
            break
        from_last = method == MDAV and not from_last
    return rest_as_group(labels, orig, m, group)


@njit(cache=True, nogil=True, inline="always")
def take_group(C, orig, total, labels, group, r, ns, found):
    """Slot r and its neighbours ``ns[:found]`` join ``group``: r first, then the
    neighbours by (distance, row index), which is the order their values leave the
    running ``total``. Then ``ns[:found + 1]`` := their slots, highest first: the order
    to free them in, so that the slot moved into each hole (the last one) is never one
    still to be freed."""
    labels[orig[r]] = group
    for j in range(C.shape[0]):
        total[j] -= C[j, r]
    for b in range(found):
        p = ns[b]
        labels[orig[p]] = group
        for j in range(C.shape[0]):
            total[j] -= C[j, p]
    ns[found] = r
    for b in range(1, found + 1):
        v = ns[b]
        p = b
        while p > 0 and ns[p - 1] < v:
            ns[p] = ns[p - 1]
            p -= 1
        ns[p] = v


@njit(cache=True, nogil=True, inline="always")
def rest_as_group(labels, rows, m, group):
    """The rows ``rows[:m]`` (if any) as one last group; returns the next group number."""
    if m == 0:
        return group
    for a in range(m):
        labels[rows[a]] = group
    return group + 1


@njit(cache=True, nogil=True)
def fits(X):
    """True if every |x| < ``FINITE_LIMIT`` (False for NaN and inf)."""
    n, d = X.shape
    for i in range(n):
        for j in range(d):
            if not abs(X[i, j]) < FINITE_LIMIT:
                return False
    return True


@njit(cache=True, nogil=True)
def mdav_brute_slots(X, method, k):
    """``leaf.mdav_brute`` when k >= 1, d >= 1 and ``fits(X)``: the column-major kernel."""
    n, d = X.shape
    C = np.empty((d, n))
    total = np.zeros(d)
    for i in range(n):
        for j in range(d):
            v = X[i, j]
            C[j, i] = v
            total[j] += v
    labels = np.full(n, -1, np.int64)
    group = np.int64(0)  # not a literal 0: that would compile mdav_slots once more
    mdav_slots(C, np.arange(n), n, total, method, k, labels, group, np.empty(n), np.empty(d),
               np.empty(n, np.int64), np.empty(k + 1, np.int64), np.empty(k + 1, np.int64),
               np.empty(k + 1, np.int64))
    return labels


@njit(cache=True, nogil=True)
def leaf_rows(X, k, leaf):
    """The split of ``leaf.aggregate_leaves``: returns ``(order, bounds, cap)``, leaf ``b``
    being the rows ``order[bounds[b]:bounds[b + 1]]`` in increasing row order, ``cap``
    the largest leaf."""
    n = X.shape[0]
    leaf = max(leaf, 4 * k)
    order, bounds = split_leaves(X, leaf)
    n_leaves = bounds.shape[0] - 1
    # the rows of every leaf in increasing row order (ties break as in the whole
    # block): a counting sort of the rows by leaf, instead of a sort per leaf
    leaf_of = np.empty(n, np.int64)
    cap = 0
    for b in range(n_leaves):
        cap = max(cap, bounds[b + 1] - bounds[b])
        for a in range(bounds[b], bounds[b + 1]):
            leaf_of[order[a]] = b
    pos = bounds[:-1].copy()
    for i in range(n):
        b = leaf_of[i]
        order[pos[b]] = i
        pos[b] += 1
    return order, bounds, cap


@njit(cache=True, nogil=True, inline="always")
def slot_scratch(d, cap, w):
    """The buffers of the column-major kernels for up to ``cap`` rows of d columns:
    ``C``, ``orig``, ``total``, ``dist`` (cap + 1), ``q``, ``cand`` and ``nd``, ``no``,
    ``ns`` of ``w`` (also used by ``engine.kernels.mdav.brute``)."""
    return (np.empty((d, cap)), np.empty(cap, np.int64), np.empty(d), np.empty(cap + 1), np.empty(d),
            np.empty(cap, np.int64), np.empty(w, np.int64), np.empty(w, np.int64), np.empty(w, np.int64))


@njit(cache=True, nogil=True, inline="always")
def fill_slots(X, idx, m, C, orig, total):
    """Slots 0..m-1 of ``C`` := the rows ``idx[:m]`` of ``X`` (``orig``: their row
    ids); their column sums in row order into ``total``."""
    d = X.shape[1]
    for j in range(d):
        total[j] = 0.0
    for a in range(m):
        i = idx[a]
        orig[a] = i
        for j in range(d):
            v = X[i, j]
            C[j, a] = v
            total[j] += v
