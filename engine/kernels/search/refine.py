"""The refinement's state and its local-search round (driver: ``engine/passes/refine.py``).

State of a partition of the rows of ``Z`` (n, d) into group *slots*:

* ``labels`` (n,): slot of each row;
* ``counts`` (S,), ``sums`` (S, d): size and column sums of each slot (0 = unused);
* ``members`` (S, cap), ``slot`` (n,): the rows of a slot and each row's position
  there (``members[labels[i], slot[i]] == i``).

``members`` is the slot layout of ``engine.kernels.search.moves`` (group g's rows
at ``members[g, :counts[g]]``, ``cap`` = max(2k-1, largest group)), so a round of
moves and swaps (``ls_round``) is that module's ``visit_round`` on a copy of the
rows' values; window passes (``engine.kernels.search.windows``) re-cut a few
neighbouring groups at a time. A slot larger than ``hi`` (a table with fewer than
2k rows, V-MDAV's tail) only shrinks; windows never include such a slot.

Everything here is serial and visits groups and rows in a fixed order, so the
result does not depend on the Numba thread count.
"""

import numpy as np
from numba import njit

from ..groups import accumulate_group_sums, slot_sums
from .moves import group_mean, visit_round


@njit(cache=True, nogil=True)
def build_state(Z, labels, n_slots, cap):
    """``(sums, counts, members, slot)`` for ``labels`` (slots 0..n_slots-1)."""
    n, d = Z.shape
    sums = np.zeros((n_slots, d))
    counts = np.zeros(n_slots, np.int64)
    members = np.full((n_slots, cap), -1, np.int64)
    slot = np.empty(n, np.int64)
    accumulate_group_sums(Z, labels, sums, counts)
    fill = np.zeros(n_slots, np.int64)
    for i in range(n):
        g = labels[i]
        members[g, fill[g]] = i
        slot[i] = fill[g]
        fill[g] += 1
    return sums, counts, members, slot


@njit(cache=True, nogil=True)
def recompute_sums(Z, sums, counts, members):
    """Column sums from scratch (removes drift of incremental updates)."""
    slot_sums(Z, members.reshape(-1), counts, members.shape[1], sums)


@njit(cache=True, nogil=True)
def add_row(Z, labels, sums, counts, members, slot, g, x):
    """Row x joins slot g, at its end."""
    members[g, counts[g]] = x
    slot[x] = counts[g]
    counts[g] += 1
    labels[x] = g
    for j in range(Z.shape[1]):
        sums[g, j] += Z[x, j]


@njit(cache=True, nogil=True)
def ls_round(Z, labels, sums, counts, members, slot, k, hi, near, active, touched, tol, stats):
    """One round of moves and swaps (``moves.visit_round``) over the active groups.

    A group is visited when it or one of its near groups changed in the previous
    round (``active``); ``active`` is overwritten with this round's changes, which
    are also flagged in ``touched``. ``stats``: [moves, swaps, sum of applied
    deltas]. Returns the operations applied.
    """
    S, cap = members.shape
    d = Z.shape[1]
    rid = members.reshape(-1)
    P = np.zeros((S * cap, d))
    mu = np.empty((S, d))
    for g in range(S):
        for t in range(counts[g]):
            i = rid[g * cap + t]
            for j in range(d):
                P[g * cap + t, j] = Z[i, j]
        if counts[g] > 0:
            group_mean(sums, counts, mu, g)
    nxt = np.zeros(S, np.int64)
    applied, _ = visit_round(P, rid, sums, counts, mu, cap, near, active, nxt, k, hi, tol, np.zeros(1, np.int64),
                             stats)
    for g in range(S):
        active[g] = nxt[g]
        if nxt[g] != 0:
            touched[g] = 1
            for t in range(cap):
                if t < counts[g]:
                    i = members[g, t]
                    labels[i] = g
                    slot[i] = t
                else:
                    members[g, t] = -1
    return applied
