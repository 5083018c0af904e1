"""Leaf-blocked MDAV for the streaming aggregate pass.

A spilled block of the streaming engine (about ``--block-size`` rows) is split
further, in memory, by median cuts into *leaves* of at most ``leaf`` rows, and
every leaf is microaggregated on its own. Small leaves make MDAV cheap (brute
force over a leaf is O(leaf) per query, and the leaf fits in L1/L2 cache); the
price is some information loss at leaf borders, which the border refinement
(``--refine``) can take back. Measured in ``benchmarks/bench_stream.py``; the
kernels alone (old against new layout) in ``benchmarks/bench_leaf.py``.

The split (``engine.kernels.split``): median cuts of the column of largest
variance; deterministic, it depends only on the rows of the block and their order.

``mdav_brute`` runs MDAV (method 0) or MDAV-single-group (method 1) by brute
force with exactly the conventions of ``engine.kernels.mdav`` (distances summed in
column order, centroid = running total / remaining with rows subtracted in the
order they join, ties to the lowest row index, "the k-1 nearest of r" excludes r),
so on any block it returns the same labels as ``mdav.microaggregate``: tested.
V-MDAV and IV-MDAV run on each leaf by brute force too, on the same slots
(``engine.kernels.brute``: the labels of their bucket-index kernels, tested), when
leaves have at most ``brute.LEAF_BRUTE_MAX_ROWS`` rows (the default 256-row leaves,
and polished runs' 8,192 from k = 5; not their 16,384-32,768 at k <= 4, where the index is
faster); other leaves, and data brute force does not take (the limits below), run
the index kernel.

Layout of the brute-force kernel (``_mdav_slots``): the remaining rows of a leaf
sit compacted, column-major, in a scratch buffer ``C`` (d, capacity): slot ``a``
holds the row ``orig[a]``. Removing a row moves the last slot into its hole, so
slot order means nothing and every tie is broken on ``orig``. A scan computes
``dist[a]`` for all slots at once, the columns fused in one loop over the slots:
``s = t0*t0; s += t1*t1; ...`` is the same sum, in the same order, as the
row-by-row ``kdtree.sq_dist`` (0.0 + t0*t0 == t0*t0 exactly), so distances are bit-identical,
and the loop vectorizes across slots without reassociation (no fastmath). The
selections then read the distances as int64 bit patterns (a non-negative double
orders like its bits), which lets the max / min reductions vectorize too:

* farthest: the largest distance, then the least ``(orig << sh) | slot`` among
  the slots at that distance (lowest row index wins, and the key gives its slot);
* the k-1 nearest of r: r's distance set to +inf; the (k-1)-th smallest
  distance ``T`` found by passes "least distance above the previous one, and how
  many rows sit at the previous one" (at most k-1 passes, fewer with ties); then
  the rows at distance <= ``T`` (k-1 of them, more only with ties) go through the
  previous bounded insertion by (distance, row index).

MDAV's second seed (the farthest row from r) reuses r's distances, kept in step
with the slot moves, so an MDAV round scans three times instead of four.
``aggregate_leaves`` fills ``C`` straight from the block, leaf after leaf, in one
scratch buffer, and the kernel writes the block's labels itself. These shortcuts
need finite distances: for data with |x| >= 1e100 (or NaN, inf), no columns or
k < 1, ``mdav_brute`` runs the plain row-by-row version (``_mdav_brute_rows``, the
previous implementation), which defines the labels. Data are float64, as
everywhere in the engine.
"""

import numpy as np
from numba import njit

from .kdtree import sq_dist
from .mdav import IVMDAV, MDAV, MDAV_SINGLE, VMDAV, as_block, microaggregate_ivmdav, microaggregate_vmdav
from .split import _select, _widest_column, split_leaves  # noqa: F401 (the split's old home: callers import it here)

# |x| below this everywhere: squared distances to rows and centroids stay finite
# (d * (3 n 1e100)**2 is far below the float64 range), so no NaN and no inf
_FINITE_LIMIT = 1e100
_INF_BITS = 0x7FF0000000000000  # the bits of +inf: above those of every finite distance
_MAX_I64 = (1 << 63) - 1


# -- the plain row-by-row version: the definition, and the fallback ----------------


@njit(cache=True, nogil=True)
def _farthest_rows(X, rem, m, q):
    best = -1.0
    bi = -1
    for a in range(m):
        i = rem[a]
        dd = sq_dist(X, i, q)
        if dd > best or (dd == best and i < bi):
            best = dd
            bi = i
    return bi


@njit(cache=True, nogil=True)
def _take_group_rows(X, rem, where, m, total, labels, group, r, k, nb, nd):
    # r and its k-1 nearest remaining rows (not r), by (distance, row index)
    q = X[r].copy()
    found = 0
    for a in range(m):
        i = rem[a]
        if i == r:
            continue
        dd = sq_dist(X, i, q)
        if found == k - 1:
            if dd > nd[found - 1] or (dd == nd[found - 1] and i > nb[found - 1]):
                continue
            p = found - 1
        else:
            p = found
            found += 1
        while p > 0 and (nd[p - 1] > dd or (nd[p - 1] == dd and nb[p - 1] > i)):
            nd[p] = nd[p - 1]
            nb[p] = nb[p - 1]
            p -= 1
        nd[p] = dd
        nb[p] = i
    m = _remove_row(X, rem, where, m, total, labels, group, r)
    for a in range(found):
        m = _remove_row(X, rem, where, m, total, labels, group, nb[a])
    return m


@njit(cache=True, nogil=True)
def _remove_row(X, rem, where, m, total, labels, group, i):
    labels[i] = group
    for j in range(X.shape[1]):
        total[j] -= X[i, j]
    a = where[i]
    last = rem[m - 1]
    rem[a] = last
    where[last] = a
    return m - 1


@njit(cache=True, nogil=True)
def _mdav_brute_rows(X, method, k):
    """``mdav_brute`` row by row through an index array (any input)."""
    n, d = X.shape
    labels = np.full(n, -1, np.int64)
    rem = np.arange(n)
    where = np.arange(n)
    total = np.zeros(d)
    for i in range(n):
        for j in range(d):
            total[j] += X[i, j]
    nb = np.empty(max(k, 1), np.int64)
    nd = np.empty(max(k, 1))
    c = np.empty(d)
    m = n
    group = np.int64(0)  # not a literal 0: it is passed to _take_group_rows
    while m >= 3 * k:
        for j in range(d):
            c[j] = total[j] / m
        r = _farthest_rows(X, rem, m, c)
        m = _take_group_rows(X, rem, where, m, total, labels, group, r, k, nb, nd)
        group += 1
        if method == MDAV:
            s = _farthest_rows(X, rem, m, X[r])
            m = _take_group_rows(X, rem, where, m, total, labels, group, s, k, nb, nd)
            group += 1
    if m >= 2 * k:
        for j in range(d):
            c[j] = total[j] / m
        r = _farthest_rows(X, rem, m, c)
        m = _take_group_rows(X, rem, where, m, total, labels, group, r, k, nb, nd)
        group += 1
    if m > 0:
        for a in range(m):
            labels[rem[a]] = group
        group += 1
    return labels


# -- the column-major kernel ----------------------------------------------------------
# The helpers are inlined into ``_mdav_slots`` (inline="always"): a call of a compiled
# function increments and decrements the reference count of every array it is
# passed, which costs more than a scan of a small leaf.


@njit(cache=True, nogil=True, inline="always")
def _dists(C, m, q, dist):
    """``dist[a] = sum_j (C[j, a] - q[j])**2`` for the slots a < m, summed over j in
    column order from 0.0 (bit-identical to ``kdtree.sq_dist``). Columns go eight, four or one
    at a time, fused in one vectorizable loop over the slots."""
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
    while j + 4 <= d:
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
    while j < d:
        qj = q[j]
        for a in range(m):
            t = C[j, a] - qj
            dist[a] += t * t
        j += 1


@njit(cache=True, nogil=True, inline="always")
def _farthest(di, orig, m, sh):
    """The slot of the largest distance (bits ``di``), ties to the lowest ``orig``."""
    mx = -1
    for a in range(m):
        mx = max(mx, di[a])
    key = _MAX_I64
    for a in range(m):
        kq = (orig[a] << sh) | a  # orders by row index; the low bits give the slot
        if di[a] == mx:
            key = min(key, kq)
    return key & ((1 << sh) - 1)


@njit(cache=True, nogil=True, inline="always")
def _nearest(di, orig, m, r, kk, cand, nd, no, ns):
    """The kk >= 1 nearest slots to slot r (not r) by (distance, orig), into
    ``ns[:kk]`` in that order (``nd``, ``no``: their distance bits and rows).
    Needs m - 1 >= kk. Overwrites ``di[r]``."""
    di[r] = _INF_BITS
    # thr = the kk-th smallest distance: pass i finds the next distinct distance v
    # and counts the rows at the previous one (prev); cum counts rows <= prev
    prev = -1
    cum = 0
    while True:
        v = _MAX_I64
        c = 0
        for a in range(m):
            x = di[a]
            v = min(v, x if x > prev else _MAX_I64)
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
    # bounded insertion by (distance, row index), the rule of _take_group_rows
    found = 0
    for e in range(c):
        a = cand[e]
        dd = di[a]
        o = orig[a]
        if found == kk:
            if dd > nd[kk - 1] or (dd == nd[kk - 1] and o > no[kk - 1]):
                continue
            p = kk - 1
        else:
            p = found
            found += 1
        while p > 0 and (nd[p - 1] > dd or (nd[p - 1] == dd and no[p - 1] > o)):
            nd[p] = nd[p - 1]
            no[p] = no[p - 1]
            ns[p] = ns[p - 1]
            p -= 1
        nd[p] = dd
        no[p] = o
        ns[p] = a
    return found


@njit(cache=True, nogil=True)
def _mdav_slots(C, orig, m, total, method, k, labels, group, dist, q, cand, nd, no, ns):
    """MDAV (0) or MDAV-single-group (1) on the m rows in slots 0..m-1 of ``C``
    (column-major, ``orig[a]`` = row of slot a, ``total`` = their column sums in row
    order). Writes ``labels[orig[a]]``, groups numbered from ``group``; returns the
    next group number. Needs k >= 1, d >= 1 and finite distances (see the module
    docstring); ``C``, ``orig``, ``total`` and the scratch arrays are overwritten.
    Scratch: ``dist`` and ``cand`` of C's capacity, ``q`` of d, ``nd``, ``no``, ``ns``
    of k + 1."""
    d = C.shape[0]
    di = dist.view(np.int64)
    sh = 1  # slot bits of the farthest-row key
    while (1 << sh) <= C.shape[1]:
        sh += 1
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
            _dists(C, m, q, dist)
        r = _farthest(di, orig, m, sh)
        for j in range(d):
            q[j] = C[j, r]
        _dists(C, m, q, dist)
        found = 0
        if kk > 0:
            found = _nearest(di, orig, m, r, kk, cand, nd, no, ns)
        # the group: r first, then its neighbours by (distance, row index), which is
        # the order their values leave the running total
        labels[orig[r]] = group
        for j in range(d):
            total[j] -= C[j, r]
        for b in range(found):
            p = ns[b]
            labels[orig[p]] = group
            for j in range(d):
                total[j] -= C[j, p]
        # free their slots, highest first, so that the slot moved into each hole
        # (the last one) is never one still to be freed; distances move along
        ns[found] = r
        for b in range(1, found + 1):
            v = ns[b]
            p = b
            while p > 0 and ns[p - 1] < v:
                ns[p] = ns[p - 1]
                p -= 1
            ns[p] = v
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
    if m > 0:
        for a in range(m):
            labels[orig[a]] = group
        group += 1
    return group


@njit(cache=True, nogil=True)
def _fits(X):
    """True if every |x| < _FINITE_LIMIT (False for NaN and inf)."""
    n, d = X.shape
    for i in range(n):
        for j in range(d):
            if not abs(X[i, j]) < _FINITE_LIMIT:
                return False
    return True


@njit(cache=True, nogil=True)
def mdav_brute(X, method, k):
    """MDAV (method 0) or MDAV-single-group (1) on a small block ``X`` (float64,
    n x d), by brute force: labels, groups numbered from 0 in creation order."""
    n, d = X.shape
    if k < 1 or d == 0 or not _fits(X):
        return _mdav_brute_rows(X, method, k)
    return mdav_brute_slots(X, method, k)


@njit(cache=True, nogil=True)
def mdav_brute_slots(X, method, k):
    """``mdav_brute`` when k >= 1, d >= 1 and ``_fits(X)``: the column-major kernel."""
    n, d = X.shape
    C = np.empty((d, n))
    total = np.zeros(d)
    for i in range(n):
        for j in range(d):
            v = X[i, j]
            C[j, i] = v
            total[j] += v
    labels = np.full(n, -1, np.int64)
    group = np.int64(0)  # not a literal 0: that would compile _mdav_slots once more
    _mdav_slots(C, np.arange(n), n, total, method, k, labels, group, np.empty(n), np.empty(d),
                np.empty(n, np.int64), np.empty(k + 1, np.int64), np.empty(k + 1, np.int64),
                np.empty(k + 1, np.int64))
    return labels


@njit(cache=True, nogil=True)
def _leaf_rows(X, k, leaf):
    """The split of ``aggregate_leaves``: returns ``(order, bounds, cap)``, leaf ``b``
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


@njit(cache=True, nogil=True)
def _leaf_block(X, idx):
    """The rows ``idx`` of ``X``, as a new block (element by element: a row
    assignment ``sub[a] = X[i]`` compiles a shape check and its error message)."""
    m = idx.shape[0]
    d = X.shape[1]
    sub = np.empty((m, d))
    for a in range(m):
        i = idx[a]
        for j in range(d):
            sub[a, j] = X[i, j]
    return sub


@njit(cache=True, nogil=True)
def _add_leaf(labels, idx, local, next_id):
    """Global labels of one leaf's rows; returns the next group id."""
    g = 0
    for a in range(idx.shape[0]):
        labels[idx[a]] = local[a] + next_id
        if local[a] + 1 > g:
            g = local[a] + 1
    return next_id + g


@njit(cache=True, nogil=True, inline="always")
def _slot_scratch(d, cap, w):
    """The buffers of the column-major kernels for up to ``cap`` rows of d columns:
    ``C``, ``orig``, ``total``, ``dist`` (cap + 1), ``q``, ``cand`` and ``nd``, ``no``,
    ``ns`` of ``w`` (also used by ``engine.kernels.brute``)."""
    return (np.empty((d, cap)), np.empty(cap, np.int64), np.empty(d), np.empty(cap + 1), np.empty(d),
            np.empty(cap, np.int64), np.empty(w, np.int64), np.empty(w, np.int64), np.empty(w, np.int64))


@njit(cache=True, nogil=True, inline="always")
def _fill_slots(X, idx, m, C, orig, total):
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


@njit(cache=True, nogil=True)
def _leaves_slots(X, method, k, leaf):
    # MDAV / MDAV-single-group, every |x| < _FINITE_LIMIT, k >= 1, d >= 1: each
    # leaf by the column-major kernel, in one scratch buffer
    n, d = X.shape
    order, bounds, cap = _leaf_rows(X, k, leaf)
    labels = np.empty(n, np.int64)
    C, orig, total, dist, q, cand, nd, no, ns = _slot_scratch(d, cap, k + 1)
    next_id = np.int64(0)  # not a literal 0: see ``mdav_brute``
    for b in range(bounds.shape[0] - 1):
        m = bounds[b + 1] - bounds[b]
        _fill_slots(X, order[bounds[b]:], m, C, orig, total)
        next_id = _mdav_slots(C, orig, m, total, method, k, labels, next_id, dist, q, cand, nd, no, ns)
    return labels


@njit(cache=True, nogil=True)
def _leaves_brute(X, method, k, leaf):
    # MDAV / MDAV-single-group otherwise (large or non-finite values somewhere, no
    # columns, k < 1): ``mdav_brute`` on each leaf
    order, bounds, _ = _leaf_rows(X, k, leaf)
    labels = np.empty(X.shape[0], np.int64)
    next_id = np.int64(0)  # not a literal 0: see ``mdav_brute``
    for b in range(bounds.shape[0] - 1):
        idx = order[bounds[b]: bounds[b + 1]]
        next_id = _add_leaf(labels, idx, mdav_brute(_leaf_block(X, idx), method, k), next_id)
    return labels


@njit(cache=True, nogil=True)
def _leaves_vmdav(X, k, gamma, leaf):
    order, bounds, _ = _leaf_rows(X, k, leaf)
    labels = np.empty(X.shape[0], np.int64)
    next_id = np.int64(0)  # not a literal 0: see ``mdav_brute``
    for b in range(bounds.shape[0] - 1):
        idx = order[bounds[b]: bounds[b + 1]]
        next_id = _add_leaf(labels, idx, microaggregate_vmdav(_leaf_block(X, idx), k, gamma), next_id)
    return labels


@njit(cache=True, nogil=True)
def _leaves_ivmdav(X, k, gamma, leaf):
    order, bounds, _ = _leaf_rows(X, k, leaf)
    labels = np.empty(X.shape[0], np.int64)
    next_id = np.int64(0)  # not a literal 0: see ``mdav_brute``
    for b in range(bounds.shape[0] - 1):
        idx = order[bounds[b]: bounds[b + 1]]
        next_id = _add_leaf(labels, idx, microaggregate_ivmdav(_leaf_block(X, idx), k, gamma), next_id)
    return labels


def aggregate_leaves(X, method, k, gamma, leaf):
    """Labels for ``X``: split into leaves of at most ``leaf`` rows (``leaf`` is
    raised to 4k so that both halves of a cut keep at least 2k rows), then run
    ``method`` on every leaf, its rows in increasing row order. Groups are numbered
    leaf by leaf.

    Python: it picks the kernel of the method (and, for MDAV, of the data), each
    compiled only when first used, and passes it the one array and scalar types
    they are compiled for."""
    X = as_block(X)
    method, k, leaf = int(method), int(k), int(leaf)
    if method == MDAV or method == MDAV_SINGLE:
        if k >= 1 and X.shape[1] > 0 and _fits(X):
            return _leaves_slots(X, method, k, leaf)
        return _leaves_brute(X, method, k, leaf)
    if method == VMDAV or method == IVMDAV:
        from . import brute  # (it imports this module)

        if min(X.shape[0], max(leaf, 4 * k)) <= brute.LEAF_BRUTE_MAX_ROWS and brute.usable(X, k):
            kernel = brute.leaves_vmdav if method == VMDAV else brute.leaves_ivmdav
        else:
            kernel = _leaves_vmdav if method == VMDAV else _leaves_ivmdav
        return kernel(X, k, float(gamma), leaf)
    raise ValueError(f"unknown method code {method}")
