"""Window passes of the refinement: each live group's window (the group and its
nearest groups by centroid, ``wgroups`` at most, none above ``hi`` rows) is cut
again by ``engine.kernels.search.recut`` on a private copy of its rows, and written
back when the window's SSE, recomputed from scratch, drops (new groups take free
slots, emptied slots are freed).

One kernel runs both optimizers, so the loop over the windows is written once:
``ga`` is None for the deterministic perturbation, else the GA's settings; Numba
prunes the branch a None argument cannot take, so each mode compiles only its own
optimizer (one specialization per mode).
"""

import numpy as np
from numba import njit

from ..groups import partition_sse
from .recut import seed_state, win_ga, win_perturb
from .refine import add_row


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
    # row ids are distinct: any sort gives this order; sorted as float64 (exact below 2^53) so
    # that the one mergesort compiled for distances (assign_constrained) serves here too
    o = np.argsort(idx[:m].astype(np.float64), kind="mergesort")
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
    for c in range(max(nw, g2)):  # the window's slots emptied, and the new ones (near h's groups)
        g = W[c] if c < nw else slots[c]
        counts[g] = 0
        for j in range(d):
            sums[g, j] = 0.0
        touched[g] = 1
        for t in range(near.shape[1] if c >= nw and g != h else 0):
            near[g, t] = near[h, t]
    changed = 0
    for t in range(m):
        i = rows[t]
        g = slots[out[t]]
        if labels[i] != g:
            changed += 1
        add_row(Z, labels, sums, counts, members, slot, g, i)
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
def _window_round(Z, labels, sums, counts, members, slot, k, hi, near, wgroups, ga, start, stop, todo, touched,
                  tol, stats):
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
        before = partition_sse(Zw, lab, nw)
        out = np.empty(rows.shape[0], np.int64)
        if ga is None:
            after, g2 = win_perturb(Zw, Pm, lab, nw, k, hi, tol, out)
        else:  # (pop, gens, seed, round)
            after, g2 = win_ga(Zw, Pm, lab, nw, k, hi, tol, ga[0], ga[1], seed_state(ga[2], ga[3], h), out)
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
    ``use_ga``: 0 deterministic perturbation, 1 genetic algorithm (``pop``
    individuals, ``gens`` generations, seeded from ``seed``, the round ``rnd`` and
    the window). Improved windows are written back (new groups take free slots,
    emptied slots are freed) and their slots flagged in ``touched``. ``stats``:
    [windows improved, rows relabelled, sum of SSE deltas]. Returns the number of
    improved windows. (Python: the one kernel, with Python scalars.)
    """
    ga = (int(pop), int(gens), int(seed), int(rnd)) if use_ga else None
    return _window_round(Z, labels, sums, counts, members, slot, int(k), int(hi), near, int(wgroups), ga,
                         int(start), int(stop), todo, touched, float(tol), stats)
