"""Near lists of the local searches: for each group, the groups whose centroids are
nearest to its own (the only groups it trades records with).

* ``nearest_groups``: the exact lists, by all pairs for few groups, else by the
  kd-tree (``engine.kernels.index.kdtree``): the same lists either way;
* ``near_by_windows``: cheaper lists for polish, the nearest among the groups
  within ``W`` positions of a group in 1 + r kd orders of the centroids (median
  splits in the original axes and in each of r fixed rotations, ``polish.rotations``):
  far cheaper than exact kd-tree queries in spread-out dimensions, for nearly the
  same polish (tested; docs/notes/quality-at-scale.md);
* ``refresh_lists``: the two-hop refresh of the lists of changed groups, the
  nearest among a group's list and the lists of its members.

Every list is sorted by (squared distance, group id), distances summed in column
order; a list holds -1 where a table has fewer groups. Groups with no rows (the
refinement's free slots) are in no list and have an empty one.
"""

import numpy as np
from numba import njit

from ..common import insert_nearest, sq_dist
from ..index.kdtree import build_kdtree, knn
from ..index.split import split_leaves

# up to this many live groups ``nearest_groups`` compares all pairs (cheap at this
# size), and the kd-tree kernels need not compile for a small table's first refinement
NEAR_BRUTE_MAX = 1024


# -- exact lists ----------------------------------------------------------------------


@njit(cache=True, nogil=True)
def _live_centroids(sums, counts, out_near, mask):
    """Clear the lists to recompute (``mask``) and those of empty groups; returns the
    live groups' centroids ``C`` (sums divided by the size), their ids ``gid`` and the
    scratch of their queries: ``pos``, ``dd`` of min(L + 1, live groups)."""
    S, L = out_near.shape
    d = sums.shape[1]
    live = 0
    for g in range(S):
        if mask[g] != 0 or counts[g] == 0:
            for t in range(L):
                out_near[g, t] = -1
        live += counts[g] > 0
    C = np.empty((live, d))
    gid = np.empty(live, np.int64)
    i = 0
    for g in range(S):
        if counts[g] > 0:
            for j in range(d):
                C[i, j] = sums[g, j] / counts[g]
            gid[i] = g
            i += 1
    m = min(L + 1, live)
    return C, gid, np.empty(m, np.int64), np.empty(m)


@njit(cache=True, nogil=True)
def _keep(out_near, gid, i, pos, found):
    """The ``found`` nearest (``pos``, live positions, group i itself among them) into
    group ``gid[i]``'s list."""
    c = 0
    for t in range(found):
        h = gid[pos[t]]
        if h != gid[i] and c < out_near.shape[1]:
            out_near[gid[i], c] = h
            c += 1


@njit(cache=True, nogil=True)
def _nearest_groups_kd(sums, counts, out_near, mask):
    C, gid, pos, dd = _live_centroids(sums, counts, out_near, mask)
    T = build_kdtree(C, np.int64(16))  # (int64 values, not literals: one compiled version)
    ids = T[1]
    m = pos.shape[0]
    for i in range(C.shape[0] if m > 1 else 0):
        if mask[gid[i]] != 0:
            found = knn(T, C[i].copy(), m, np.int64(-1), pos, dd)
            for t in range(found):
                pos[t] = ids[pos[t]]
            _keep(out_near, gid, i, pos, found)


@njit(cache=True, nogil=True)
def _nearest_groups_brute(sums, counts, out_near, mask):
    # the kd-tree's answer by brute force: the m nearest centroids by (distance,
    # centroid index)
    C, gid, pos, dd = _live_centroids(sums, counts, out_near, mask)
    m = pos.shape[0]
    for i in range(C.shape[0] if m > 1 else 0):
        if mask[gid[i]] != 0:
            found = np.int64(0)
            q = C[i].copy()
            for p in range(C.shape[0]):
                found = insert_nearest(pos, dd, m, found, p, sq_dist(C, p, q))
            _keep(out_near, gid, i, pos, found)


def nearest_groups(sums, counts, out_near, mask):
    """``out_near[g]``: the L live groups with the nearest centroids to g's (-1 pads),
    recomputed for the groups with ``mask[g] != 0`` (the others keep their list).
    Ties by group id. (Python: a kd-tree, or all pairs for few groups: the same
    lists.)"""
    if np.count_nonzero(counts > 0) <= NEAR_BRUTE_MAX:
        _nearest_groups_brute(sums, counts, out_near, mask)
    else:
        _nearest_groups_kd(sums, counts, out_near, mask)


# -- windows in kd orders -------------------------------------------------------------


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
    return C, nd, np.empty((O, G), np.int64), np.empty((O, G), np.int64)


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
        # Y[g, j] = sum over i of C[g, i] R[i, j], from 0.0 in the order of i; i outer, so
        # that the loop over j runs along a row of R (vectorized across j: the same sums)
        Ro = R[o - 1]
        for g in range(G):
            for j in range(d):
                Y[g, j] = 0.0
            for i in range(d):
                c = C[g, i]
                for j in range(d):
                    Y[g, j] += c * Ro[i, j]
    order, _ = split_leaves(Y, np.int64(4))  # int64, not a literal (one compiled version)
    for p in range(G):
        orders[o, p] = order[p]
        pos[o, order[p]] = p


@njit(cache=True, nogil=True)
def near_by_windows(sums, counts, near, R, W):
    """``near[g]``: the L nearest centroids to g's among the groups within ``W``
    positions of g in each kd order (axes, then each rotation in ``R``)."""
    G, L = near.shape
    C, nd, pos, orders = _window_setup(sums, counts, near, R)
    for o in range(orders.shape[0]):
        _kd_order(C, R, o, orders, pos)
    mark = np.full(G, -1, np.int64)  # mark[h] == g: h already a candidate of g
    for g in range(G):
        mark[g] = g
        q = C[g].copy()
        for o in range(orders.shape[0]):
            p = pos[o, g]
            for u in range(max(0, p - W), min(G, p + W + 1)):
                h = orders[o, u]
                if mark[h] != g:
                    mark[h] = g
                    insert_nearest(near[g], nd[g], L, L, h, sq_dist(C, h, q))


# -- two-hop refresh ------------------------------------------------------------------


@njit(cache=True, nogil=True)
def refresh_lists(mu, counts, near, mask, old, nd, mark):
    """For the groups with ``mask`` set: the L nearest means (``mu``) among the current
    list and the lists of its members (two hops), ties by group id; empty groups get
    an empty list. Reads ``old`` (a copy of ``near``), so the order of updates does
    not matter. Scratch: ``nd`` (L,), ``mark`` (G,)."""
    G, L = near.shape
    for A in range(G):
        mark[A] = -1
        for t in range(L):
            old[A, t] = near[A, t]
    for A in range(G):
        if mask[A] == 0 and counts[A] > 0:
            continue
        for t in range(L):
            near[A, t] = -1
            nd[t] = np.inf
        if counts[A] == 0:
            continue
        mark[A] = A
        q = mu[A].copy()
        for t in range(L):
            B = old[A, t]
            if B < 0:
                continue
            for u in range(-1, L):
                C = B if u < 0 else old[B, u]
                if C >= 0 and counts[C] > 0 and mark[C] != A:
                    mark[C] = A
                    insert_nearest(near[A], nd, L, L, C, sq_dist(mu, C, q))
