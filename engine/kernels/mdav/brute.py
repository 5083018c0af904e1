"""V-MDAV and IV-MDAV by brute force, for small blocks and the streamed pass's leaves.

The same labels as ``mdav.microaggregate(X, VMDAV | IVMDAV, k, gamma)`` (the bucket
index of ``engine.kernels.index.buckets``), with its conventions: distances summed in
column order, centroid = running total / remaining with rows subtracted in the
order they join their group, ties to the lowest row index, "the k-1 nearest of r"
excludes r; V-MDAV's nearest-remaining answers cached per member until that record
is taken (a cached answer stays right: records are only ever removed), its
leftovers joining the group of their nearest record grouped before; IV-MDAV as read
in ``engine.kernels.mdav.indexed`` (z_1..z_k include y_j itself). Tested against the index
and ``tests/reference.py``.

No index: the remaining rows sit compacted, column-major, in the slots of the
leaves' MDAV kernel (``engine.kernels.mdav.slots``: ``C`` (d, capacity), ``orig[a]`` the row of
slot a, the last slot moved into each freed one) and every query scans them all
with its vectorized helpers (``dists``, ``farthest``, ``nearest``), plus
``where`` (row -> slot, -1 once grouped) for the rows a query names. A scan is
O(remaining), so a block costs O(n^2 / k) distance evaluations: cheaper than the
index for the small blocks and leaves that use it (``engine.kernels.mdav.pick`` has
the thresholds), and it compiles in a fraction of the index's time.

Like ``slots.mdav_brute_slots`` these need k >= 1, d >= 1 and |x| < 1e100
(``slots.fits``); ``pick.small_block_labels`` checks that and otherwise leaves the
block to the index, which handles any float64.
"""

import math

import numpy as np
from numba import njit

from ..common import sq_dist
from .slots import INF_BITS, MAX_I64, dists, farthest, fill_slots, leaf_rows, nearest, slot_bits, slot_scratch

# the slots' vectorized distance scan as a function of its own (not inlined): each
# kernel below scans from several places, and every inlined copy of the scan's
# vectorized loops costs its compilation again
_scan = njit(cache=True, nogil=True)(dists.py_func)


@njit(cache=True, nogil=True, inline="always")
def _closest(di, orig, m, sh):
    """The slot of the least distance (bits ``di``), ties to the lowest ``orig``."""
    mn = MAX_I64
    for a in range(m):
        mn = min(mn, di[a])
    key = MAX_I64
    for a in range(m):
        kq = (orig[a] << sh) | a
        if di[a] == mn:
            key = min(key, kq)
    return key & ((1 << sh) - 1)


@njit(cache=True, nogil=True, inline="always")
def _take(C, orig, where, m, total, labels, group, p):
    """The row in slot p joins ``group``: its values leave ``total``, the last slot
    moves into its hole. Returns the new count of slots."""
    d = C.shape[0]
    i = orig[p]
    labels[i] = group
    for j in range(d):
        total[j] -= C[j, p]
    where[i] = -1
    m -= 1
    if p != m:
        for j in range(d):
            C[j, p] = C[j, m]
        o = orig[m]
        orig[p] = o
        where[o] = p
    return m


@njit(cache=True, nogil=True, inline="always")
def _seed_from_centroid(C, orig, m, total, q, dist, sh):
    """The slot of the remaining row farthest from the centroid ``total / m``."""
    for j in range(C.shape[0]):
        q[j] = total[j] / m
    _scan(C, m, q, dist)
    return farthest(dist.view(np.int64), orig, m, sh)


@njit(cache=True, nogil=True, inline="always")
def _dists_from_slot(C, m, s, q, dist):
    for j in range(C.shape[0]):
        q[j] = C[j, s]
    _scan(C, m, q, dist)


@njit(cache=True, nogil=True)
def _vmdav_slots(X, C, orig, where, m, total, k, gamma, labels, group, dist, q, cand, nd, no, ns, members,
                 near_pos, near_d, grouped):
    """V-MDAV on the m rows in slots 0..m-1 of ``C`` (``orig[a]`` the row of slot a
    in ``X``, ``where[orig[a]] = a``, ``total`` their column sums in row order).
    Writes ``labels`` of those rows, groups numbered from ``group``; returns the next
    group number. Scratch: ``dist`` of C's capacity + 1, ``cand``, ``grouped`` of
    its capacity, ``q`` of d, ``nd``, ``no``, ``ns``, ``members``, ``near_pos``,
    ``near_d`` of 2k + 1."""
    d = C.shape[0]
    di = dist.view(np.int64)
    sh = slot_bits(C)
    ng = 0  # rows grouped so far: grouped[:ng] (the leftovers' candidates)
    while m >= k:
        r = _seed_from_centroid(C, orig, m, total, q, dist, sh)
        _dists_from_slot(C, m, r, q, dist)
        found = 0
        if k > 1:
            found = nearest(di, orig, m, r, k - 1, sh, cand, nd, no, ns)
        members[0] = orig[r]
        for b in range(found):
            members[b + 1] = orig[ns[b]]
        size = found + 1
        for b in range(size):
            i = members[b]
            m = _take(C, orig, where, m, total, labels, group, where[i])
            grouped[ng] = i
            ng += 1
            near_pos[b] = -1
        while size < 2 * k - 1 and m > 0:
            # the remaining record nearest to the group: each member's nearest, cached
            best_u = -1
            best_d = np.inf
            for b in range(size):
                u = near_pos[b]
                if u < 0 or where[u] < 0:
                    i = members[b]
                    for j in range(d):
                        q[j] = X[i, j]
                    _scan(C, m, q, dist)
                    s = _closest(di, orig, m, sh)
                    u = orig[s]
                    near_pos[b] = u
                    near_d[b] = dist[s]
                if near_d[b] < best_d or (near_d[b] == best_d and u < best_u):
                    best_d = near_d[b]
                    best_u = u
            s = where[best_u]
            d_out = np.inf  # its nearest other remaining record, if any
            if m > 1:
                _dists_from_slot(C, m, s, q, dist)
                di[s] = INF_BITS
                d_out = math.sqrt(dist[_closest(di, orig, m, sh)])
            if math.sqrt(best_d) < gamma * d_out:
                m = _take(C, orig, where, m, total, labels, group, s)
                grouped[ng] = best_u
                ng += 1
                members[size] = best_u
                near_pos[size] = -1
                size += 1
            else:
                break
        group += 1
    # fewer than k left: each joins the group of its nearest grouped record
    for a in range(m):
        p = orig[a]
        best = np.inf
        best_q = -1
        for b in range(ng):
            g = grouped[b]
            dd = sq_dist(X, g, X[p])
            if dd < best or (dd == best and g < best_q):
                best = dd
                best_q = g
        labels[p] = labels[best_q] if best_q >= 0 else -1  # (-1: no group at all, as the index)
        where[p] = -1
    return group


@njit(cache=True, nogil=True)
def _ivmdav_slots(C, orig, where, m, total, k, gamma, labels, group, dist, q, cand, nd, no, ns, nb, nbd):
    """IV-MDAV on the slots of ``C`` (arguments as ``_vmdav_slots``; ``nb``, ``nbd``
    of 2k + 1)."""
    di = dist.view(np.int64)
    sh = slot_bits(C)
    while m >= 3 * k:
        # y_1 = x_r, y_2..y_2k its 2k-1 nearest (distances from x_r kept in nbd)
        r = _seed_from_centroid(C, orig, m, total, q, dist, sh)
        _dists_from_slot(C, m, r, q, dist)
        found = nearest(di, orig, m, r, 2 * k - 1, sh, cand, nd, no, ns)
        for b in range(found):
            nb[b] = orig[ns[b]]
            nbd[b] = dist[ns[b]]
        m = _take(C, orig, where, m, total, labels, group, r)
        size = 1
        for b in range(min(k - 1, found)):
            m = _take(C, orig, where, m, total, labels, group, where[nb[b]])
            size += 1
        for b in range(k - 1, found):
            if size >= 2 * k - 1 or m < k:  # (m < k: the index's "fewer than k nearest" stop)
                break
            s = where[nb[b]]
            # z_1..z_k: the k nearest remaining records of y, y included (slot m: none excluded)
            _dists_from_slot(C, m, s, q, dist)
            nearest(di, orig, m, m, k, sh, cand, nd, no, ns)
            d1 = math.sqrt(nbd[b])
            d2 = math.sqrt(dist[ns[k - 1]])
            if d2 > gamma * d1:
                m = _take(C, orig, where, m, total, labels, group, s)
                size += 1
        group += 1
    # as MDAV: 2k..3k-1 left -> one more group of k around the farthest, the rest one group
    if m >= 2 * k:
        r = _seed_from_centroid(C, orig, m, total, q, dist, sh)
        _dists_from_slot(C, m, r, q, dist)
        found = 0
        if k > 1:
            found = nearest(di, orig, m, r, k - 1, sh, cand, nd, no, ns)
        for b in range(found):
            nb[b] = orig[ns[b]]
        m = _take(C, orig, where, m, total, labels, group, r)
        for b in range(found):
            m = _take(C, orig, where, m, total, labels, group, where[nb[b]])
        group += 1
    if m > 0:
        for a in range(m):
            labels[orig[a]] = group
            where[orig[a]] = -1
        group += 1
    return group


@njit(cache=True, nogil=True, inline="always")
def _fill(X, order, bounds, b, C, orig, where, total):
    """Slots of the rows ``order[bounds[b]:bounds[b+1]]``; returns their count."""
    m = bounds[b + 1] - bounds[b]
    fill_slots(X, order[bounds[b]:], m, C, orig, total)
    for a in range(m):
        where[orig[a]] = a
    return m


@njit(cache=True, nogil=True)
def vmdav_rows(X, order, bounds, cap, k, gamma):
    """V-MDAV on every range ``order[bounds[b]:bounds[b+1]]`` of rows (leaves, or the
    whole block), groups numbered range after range."""
    n, d = X.shape
    labels, where = np.full(n, -1, np.int64), np.full(n, -1, np.int64)
    C, orig, total, dist, q, cand, nd, no, ns = slot_scratch(d, cap, 2 * k + 1)
    members, near_pos, near_d = np.empty_like(nd), np.empty_like(nd), np.empty(nd.shape[0])
    grouped = np.empty_like(cand)
    next_id = np.int64(0)  # not a literal 0: that would compile _vmdav_slots once more
    for b in range(bounds.shape[0] - 1):
        m = _fill(X, order, bounds, b, C, orig, where, total)
        next_id = _vmdav_slots(X, C, orig, where, m, total, k, gamma, labels, next_id, dist, q, cand, nd, no, ns,
                               members, near_pos, near_d, grouped)
    return labels


@njit(cache=True, nogil=True)
def ivmdav_rows(X, order, bounds, cap, k, gamma):
    """IV-MDAV on every range of rows, as ``vmdav_rows``."""
    n, d = X.shape
    labels, where = np.full(n, -1, np.int64), np.full(n, -1, np.int64)
    C, orig, total, dist, q, cand, nd, no, ns = slot_scratch(d, cap, 2 * k + 1)
    nb, nbd = np.empty_like(nd), np.empty(nd.shape[0])
    next_id = np.int64(0)  # not a literal 0: see vmdav_rows
    for b in range(bounds.shape[0] - 1):
        m = _fill(X, order, bounds, b, C, orig, where, total)
        next_id = _ivmdav_slots(C, orig, where, m, total, k, gamma, labels, next_id, dist, q, cand, nd, no, ns,
                                nb, nbd)
    return labels


@njit(cache=True, nogil=True)
def leaves_vmdav(X, k, gamma, leaf):
    """``leaf.aggregate_leaves`` for V-MDAV (k >= 1, d >= 1, ``fits(X)``)."""
    order, bounds, cap = leaf_rows(X, k, leaf)
    return vmdav_rows(X, order, bounds, cap, k, gamma)


@njit(cache=True, nogil=True)
def leaves_ivmdav(X, k, gamma, leaf):
    """``leaf.aggregate_leaves`` for IV-MDAV (k >= 1, d >= 1, ``fits(X)``)."""
    order, bounds, cap = leaf_rows(X, k, leaf)
    return ivmdav_rows(X, order, bounds, cap, k, gamma)
