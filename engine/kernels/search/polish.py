"""Polish: a cheap, bounded local search run on the streamed path's partitions.

``polish(Z, labels, k, rounds, near_count, R, stop, min_gain)`` lowers the SSE of a
partition of the rows of ``Z`` (labels 0..G-1, every group of at least k rows) by
the moves and swaps of ``engine.kernels.search.moves`` between each group and its
``near_count`` nearest groups (by centroid). Moves keep sizes within k..2k-1 and
swaps keep them, so no group disappears or appears and the labels keep their
numbering.

Rounds (``moves.visit_round``) run until ``rounds`` is reached, a round changes
nothing (a local optimum for that neighbourhood) or, with ``min_gain`` > 0, after
the first round whose operations lowered the SSE by less than that fraction of it
(their exact changes summed in the serial order: deterministic). Between rounds the
group sums are recomputed from scratch and the near lists of the changed groups
refreshed (two hops: ``near.refresh_lists``).

Near lists: with rotations ``R`` (shape (r, d, d), r >= 1), ``near.near_by_windows``
in 1 + r kd orders of the centroids, refined by ``NEAR_DESCENT`` two-hop passes;
with an empty ``R``, exact kd-tree queries (``near.nearest_groups``).

``stop`` (int64, one element) is read between group visits: a caller that sets
it (on an error or a signal) gets the kernel back within one visit, the labels
still a valid partition.

``polish_seams`` polishes a partition whose parts (units of the streamed path)
were polished on their own: its first round starts from the groups with a near
group in another part, and only the lists of the groups that round visits get the
two-hop refresh before it (``SEAM_DESCENT`` of them).

Checked against the slow ``tests/reference_polish.py`` (with every group near
every other, the result is a local optimum of all moves and swaps, SSE recomputed
from scratch).
"""

import numpy as np
from numba import njit

from ..groups import group_sums, partition_sse, slot_sums
from .moves import group_mean, visit_round
from .near import near_by_windows, nearest_groups, refresh_lists

NEAR_WINDOW = 24   # positions on each side in every kd order
NEAR_DESCENT = 2   # two-hop refreshes of every list before the first round
SEAM_DESCENT = 1   # the same before a seam polish's first round (docs/notes/quality-at-scale.md)


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


def polish(Z, labels, k, rounds, near_count, R, stop, min_gain=0.0, descent=NEAR_DESCENT, window=NEAR_WINDOW):
    """Relabel ``labels`` (int64, in place) with lower SSE; returns
    ``(rounds run, operations applied)``. ``min_gain`` > 0: stop after the first
    round that lowered the SSE by less than this fraction of it. ``descent``: the
    two-hop refreshes of every near list before the first round; ``window``: the positions
    on each side searched in every kd order."""
    return _run(Z, labels, k, rounds, near_count, np.empty(0, np.int64), R, stop, min_gain, descent, window)


def polish_seams(Z, labels, k, rounds, near_count, part, R, stop, min_gain=0.0):
    """``polish`` of a partition made of parts already polished on their own
    (``part[g]``: the part of group g): the first round visits only the groups
    with a near group in another part (and, as always, the groups near them)."""
    return _run(Z, labels, k, rounds, near_count, part, R, stop, min_gain, SEAM_DESCENT, NEAR_WINDOW)


def _run(Z, labels, k, rounds, near_count, part, R, stop, min_gain, descent, window):
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
    near, active = near_lists(sums, mu, counts, near_count, part, R, descent, window)
    sse = partition_sse(Z, labels, np.int64(G))
    return _rounds(Z, P, rid, sums, counts, mu, cap, near, active, labels, k, rounds, stop, sse, float(min_gain))


def near_lists(sums, mu, counts, near_count, part, R, descent, window):
    """``(near, active)``: each group's near list (from its sums and means ``mu``: with
    rotations ``R``, windows in the kd orders and ``descent`` two-hop refreshes; with an
    empty ``R``, exact kd-tree queries) and the groups the first round visits (every
    group, or with ``part`` of one entry a group those with a near group in another part).
    Shared by ``polish`` and the coded polish (``kernels.search.coded``), whose lists come
    from the same columns."""
    G = counts.shape[0]
    L = min(int(near_count), G - 1)
    near = np.full((G, L), -1, np.int64)
    active = np.ones(G, np.int64)
    if R.shape[0] == 0 or R.shape[1] != sums.shape[1]:
        nearest_groups(sums, counts, near, active)
    else:
        near_by_windows(sums, counts, near, R, np.int64(window))
        old_near, ndist, mark = np.empty_like(near), np.empty(L), np.full(G, -1, np.int64)
        # neighbours of neighbours, toward the exact lists: of every group, or for seams of the
        # groups the first round visits (those with a near group in another part, and their near groups)
        refresh = active if part.shape[0] != G else seam_groups(near, part)
        for _ in range(descent):
            refresh_lists(mu, counts, near, refresh, old_near, ndist, mark)
    if part.shape[0] == G:
        active = seam_groups(near, part, two_hops=False)
    return near, active


def seam_groups(near, part, two_hops=True):
    """1 for the groups with a near group in another part, and (``two_hops``) for their
    near groups."""
    ok = near >= 0
    seam = (ok & (part[np.maximum(near, 0)] != part[:, None])).any(axis=1)
    if two_hops:
        seam |= (ok & seam[np.maximum(near, 0)]).any(axis=1)
    return seam.astype(np.int64)


@njit(cache=True, nogil=True)
def _layout(Z, labels, G, k):
    """Each group's rows in ``cap`` consecutive slots of a copy ``P`` (``rid``: the
    row of each slot, -1 free), with the groups' sums, sizes and means."""
    n, d = Z.shape
    sums, counts = group_sums(Z, labels, G)
    cap = 2 * k - 1
    for g in range(G):
        if counts[g] > cap:
            cap = counts[g]
    P = np.empty((G * cap, d))
    rid = np.full(G * cap, -1, np.int64)
    fill = np.zeros(G, np.int64)
    for i in range(n):
        g = labels[i]
        s = g * cap + fill[g]
        fill[g] += 1
        rid[s] = i
        for j in range(d):
            P[s, j] = Z[i, j]
    mu = np.empty((G, d))
    for g in range(G):
        group_mean(sums, counts, mu, g)
    return P, rid, sums, counts, mu, cap


@njit(cache=True, nogil=True)
def _rounds(Z, P, rid, sums, counts, mu, cap, near, active, labels, k, rounds, stop, sse, min_gain):
    """The rounds of visits (see the module docstring); writes the labels back."""
    G, L = near.shape
    n, d = Z.shape
    nxt = np.zeros(G, np.int64)
    old_near = np.empty_like(near)
    ndist = np.empty(L)
    mark = np.full(G, -1, np.int64)
    stats = np.zeros(3)
    tol = 1e-12 * max(1.0, float(n * d))
    r = 0
    ops = 0
    while r < rounds:
        applied, gain = visit_round(P, rid, sums, counts, mu, cap, near, active, nxt, k, 2 * k - 1, tol, stop,
                                    stats)
        r += 1
        ops += applied
        if stop[0] != 0:
            break
        for g in range(G):
            active[g] = nxt[g]
        if applied == 0 or gain < min_gain * sse or r == rounds:  # (no refresh after the last round)
            break
        sse -= gain
        # sums from scratch (no drift), then the near lists of the changed groups
        slot_sums(Z, rid, counts, cap, sums)
        for g in range(G):
            group_mean(sums, counts, mu, g)
        refresh_lists(mu, counts, near, active, old_near, ndist, mark)
    for g in range(G):
        for t in range(counts[g]):
            labels[rid[g * cap + t]] = g
    return r, ops
