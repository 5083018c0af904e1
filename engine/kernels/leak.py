"""Whether two columns correspond one-to-one, on 64-bit hashes of their values (the
leak guard: ``engine.passes.leak``).

A pair of columns (C, Q) gives each row the keys ``(c, q)`` of its two values
(``mix_keys``: the values' hashes, mixed so that every bit is uniform; 0 is kept
for an empty slot). The pair is one-to-one when each c goes with one q and each q
with one c. ``pair_rows`` keeps two open-addressing tables (``(slots, 2)`` uint64:
the key, then its partner), one keyed by c (direction 0), one keyed by q
(direction 1). A key met again with another partner ends the test: the pair is
not one-to-one (``flags[0]``, the pair is "dead"). A key met again with the same
partner: that value repeats (``flags[1 + direction]``).

Bounded memory by sampling values, not rows: a table keeps only the keys at or
below its ``limit`` (at first every key), with all the rows of a kept key. Before
each row, a table holding ``max_used`` keys (half its slots) either grows (the
caller doubles it: ``pair_rows`` returns the row it stopped at) or, at its largest
size (``at_max``), halves its limit and drops the keys above it (``_halve``). As the
keys' high bits are uniform, a table then holds a fraction 2^-j of the distinct
values, whichever they are; slots are probed linearly from the key's low bits
(independent of the high bits that decide the sample). The decisions depend on the
rows in their order only, not on how they are cut into calls.

What sampling gives up: a violation (a value going with two partners) is seen only
when its value is kept, so a pair whose every violating value was dropped looks
one-to-one; one that is one-to-one always does (no violation is ever invented, but
by a 64-bit collision merging two values). See ``engine.passes.leak``.

Beside it, the counts of the tests beyond one-to-one and of ``--derived``
(``engine.passes.dependence``, ``passes.leak._Learner``): ``fd_rows`` counts a
dependency test's rows by (cell, stratum, QI key) in an open-addressing table
(``(slots, 4)``: cell, stratum, QI key, rows), sampled by the cell's key as the pair
tables by their keys, so that after each row the table is the same whatever the
rows' cut into calls; ``fd_figures`` takes the test's figures from it (the integer
counts ``passes.dependence.fd_stats`` takes with Polars: the same rates to the bit);
``novel_rows`` flags the rows that can add to a derived column's map or break it.
"""

import numpy as np
from numba import njit

from .common import mix64, prefetch

_AHEAD = 16  # rows prefetched ahead


@njit(cache=True, nogil=True)
def mix_keys(h, out):
    """``out[i]``: the key of the value hash ``h[i]`` (mixed; never 0, an empty slot)."""
    for i in range(h.shape[0]):
        k = mix64(h[i] + np.uint64(0x9E3779B97F4A7C15))
        out[i] = k if k != np.uint64(0) else np.uint64(1)


@njit(cache=True, nogil=True, inline="always")
def _put(tab, key, val):
    """Insert ``key`` (absent) with its partner ``val``."""
    mask = np.uint64(tab.shape[0] - 1)
    j = np.int64(key & mask)
    while tab[j, 0] != np.uint64(0):
        j = np.int64((np.uint64(j) + np.uint64(1)) & mask)
    tab[j, 0] = key
    tab[j, 1] = val


@njit(cache=True, nogil=True)
def regrow(old, new):
    """Every key of the table ``old`` into the (larger, empty) table ``new``; returns
    the keys moved."""
    n = 0
    for j in range(old.shape[0]):
        if old[j, 0] != np.uint64(0):
            _put(new, old[j, 0], old[j, 1])
            n += 1
    return n


@njit(cache=True, nogil=True)
def _halve(tab, limit):
    """Halve ``limit`` and keep the keys at or below it; returns ``(limit, keys kept)``."""
    limit = limit >> np.uint64(1)
    keys = np.empty(tab.shape[0], np.uint64)
    vals = np.empty(tab.shape[0], np.uint64)
    n = 0
    for j in range(tab.shape[0]):
        k = tab[j, 0]
        if k != np.uint64(0) and k <= limit:
            keys[n] = k
            vals[n] = tab[j, 1]
            n += 1
    tab[:, :] = 0
    for i in range(n):
        _put(tab, keys[i], vals[i])
    return limit, n


@njit(cache=True, nogil=True, inline="always")
def _visit(tab, key, val):
    """Look ``key`` up with partner ``val``: 0 when it was absent (now inserted), 1 when
    present with ``val`` (a repeat), 2 when present with another partner."""
    mask = np.uint64(tab.shape[0] - 1)
    j = np.int64(key & mask)
    while True:
        k = tab[j, 0]
        if k == np.uint64(0):
            tab[j, 0] = key
            tab[j, 1] = val
            return 0
        if k == key:
            return 1 if tab[j, 1] == val else 2
        j = np.int64((np.uint64(j) + np.uint64(1)) & mask)


@njit(cache=True, nogil=True)
def pair_rows(kc, kq, start, tab0, tab1, limits, used, flags, at_max):
    """Run the rows ``start, start + 1, ...`` of the keys ``kc``, ``kq`` (one chunk)
    through the pair's tables (``tab0`` keyed by c, ``tab1`` by q).

    State, updated in place: ``limits`` (uint64, 2) the largest key each table keeps;
    ``used`` (int64, 2) the keys each holds; ``flags`` (int64, 3): [0] 1 once a key met
    another partner (not one-to-one: the rest is skipped), [1] / [2] 1 once a kept c /
    q value repeated. ``at_max`` (int64, 2): 1 when the table may not grow.

    Returns the row to resume at: ``kc.shape[0]`` when done, else the row before which
    a table is full and may grow (the caller doubles it with ``regrow``, then calls again)."""
    n = kc.shape[0]
    for i in range(start, n):
        if flags[0]:
            return n
        for d in range(2):
            tab = tab0 if d == 0 else tab1
            while used[d] >= tab.shape[0] // 2:  # full: grow, else sample (halve the limit)
                if at_max[d] == 0:
                    return i
                limits[d], used[d] = _halve(tab, limits[d])
        if i + _AHEAD < n:
            prefetch(tab0, np.int64(kc[i + _AHEAD] & np.uint64(tab0.shape[0] - 1)))
            prefetch(tab1, np.int64(kq[i + _AHEAD] & np.uint64(tab1.shape[0] - 1)))
        for d in range(2):
            key, val = (kc[i], kq[i]) if d == 0 else (kq[i], kc[i])
            if key <= limits[d]:
                r = _visit(tab0 if d == 0 else tab1, key, val)
                if r == 0:
                    used[d] += 1
                elif r == 1:
                    flags[1 + d] = 1
                else:
                    flags[0] = 1
                    return n
    return n


# --- the dependency test's table (``engine.passes.dependence.FDTest``) -----------------


@njit(cache=True, nogil=True, inline="always")
def _fd_slot(tab, c, s, q):
    """The slot of the triple ``(c, s, q)`` in ``tab`` (``(slots, 4)``: cell, stratum, QI
    key, rows; cell 0: empty): where it is, or the empty slot where it goes."""
    mask = np.uint64(tab.shape[0] - 1)
    j = np.int64(mix64(c ^ (q * np.uint64(0x9E3779B97F4A7C15)) ^ (s * np.uint64(0xC2B2AE3D27D4EB4F))) & mask)
    while True:
        k = tab[j, 0]
        if k == np.uint64(0) or (k == c and tab[j, 1] == s and tab[j, 2] == q):
            return j
        j = np.int64((np.uint64(j) + np.uint64(1)) & mask)


@njit(cache=True, nogil=True)
def fd_regrow(old, new, limit):
    """Every entry of ``old`` whose cell is at most ``limit`` into the (empty) table
    ``new``; returns the entries moved."""
    n = 0
    for j in range(old.shape[0]):
        c = old[j, 0]
        if c != np.uint64(0) and c <= limit:
            t = _fd_slot(new, c, old[j, 1], old[j, 2])
            new[t, 0], new[t, 1], new[t, 2], new[t, 3] = c, old[j, 1], old[j, 2], old[j, 3]
            n += 1
    return n


@njit(cache=True, nogil=True)
def fd_rows(cell, stratum, q, start, tab, state, keep, max_slots):
    """Count the rows ``start, start + 1, ...`` of one chunk by (cell, stratum, QI key)
    into ``tab`` (``(slots, 4)`` uint64, open addressing; a cell key is never 0), the rows
    of the cells at most ``state[0]`` (the limit) only. ``state``: [limit, entries].
    When the entries pass ``keep``, the limit is halved (the entries above it dropped)
    until they do not: after each row the limit is the largest ``2^64 >> j`` under which
    the rows so far hold at most ``keep`` triples, whatever the rows' cut into calls.

    Returns the row to resume at: ``cell.shape[0]`` when done, else the row before which
    the table holds half its slots and may grow (below ``max_slots``, at least ``2 *
    keep``: the caller doubles it with ``fd_regrow``, then calls again)."""
    n = cell.shape[0]
    for i in range(start, n):
        c = cell[i]
        if c > state[0]:
            continue
        if np.int64(state[1]) >= tab.shape[0] // 2 and tab.shape[0] < max_slots:
            return i
        j = _fd_slot(tab, c, stratum[i], q[i])
        if tab[j, 0] != np.uint64(0):
            tab[j, 3] += np.uint64(1)
            continue
        tab[j, 0], tab[j, 1], tab[j, 2], tab[j, 3] = c, stratum[i], q[i], np.uint64(1)
        state[1] += np.uint64(1)
        while state[1] > np.uint64(keep):
            state[0] = state[0] >> np.uint64(1)
            held = tab.copy()
            tab[:, :] = 0
            state[1] = np.uint64(fd_regrow(held, tab, state[0]))
    return n


@njit(cache=True, nogil=True, inline="always")
def _find(keys, a, b, full):
    """The slot of the pair ``(a, b)`` in the open-addressing arrays ``keys`` (``(size,
    2)``) / ``full`` (occupied): where it is, or the free slot where it goes."""
    mask = np.uint64(keys.shape[0] - 1)
    j = np.int64(mix64(a ^ (b * np.uint64(0x9E3779B97F4A7C15))) & mask)
    while full[j] and not (keys[j, 0] == a and keys[j, 1] == b):
        j = np.int64((np.uint64(j) + np.uint64(1)) & mask)
    return j


@njit(cache=True, nogil=True)
def fd_figures(tab):
    """The dependency test's figures of a table of ``fd_rows`` (the counts of
    ``passes.dependence.fd_stats``, which computes them with Polars): ``(evidence rows,
    rows of a cell's most frequent QI value summed over the repeated cells, the same by
    stratum alone over those cells' rows, kept rows, repeated cells)``; a cell is
    repeated when it holds 2 rows or more, and its rows are the evidence."""
    m = 0
    for j in range(tab.shape[0]):
        if tab[j, 0] != np.uint64(0):
            m += 1
    size = 2
    while size < 2 * m:
        size <<= 1
    ck = np.zeros((size, 2), np.uint64)
    cfull = np.zeros(size, np.bool_)
    crows = np.zeros(size, np.int64)
    ctop = np.zeros(size, np.int64)
    cell = np.full(tab.shape[0], -1, np.int64)
    kept = 0
    for j in range(tab.shape[0]):
        if tab[j, 0] != np.uint64(0):
            k = _find(ck, tab[j, 0], np.uint64(0), cfull)
            if not cfull[k]:
                cfull[k], ck[k, 0] = True, tab[j, 0]
            n = np.int64(tab[j, 3])
            crows[k] += n
            ctop[k] = max(ctop[k], n)
            cell[j] = k
            kept += n
    e = top = cells = 0
    for k in range(size):
        if cfull[k] and crows[k] >= 2:
            e += crows[k]
            top += ctop[k]
            cells += 1
    if e == 0:
        return 0, 0, 0, kept, 0
    sk = np.zeros((size, 2), np.uint64)  # (stratum, QI value) -> rows of the repeated cells
    sfull = np.zeros(size, np.bool_)
    sn = np.zeros(size, np.int64)
    for j in range(tab.shape[0]):
        if cell[j] >= 0 and crows[cell[j]] >= 2:
            k = _find(sk, tab[j, 1], tab[j, 2], sfull)
            if not sfull[k]:
                sfull[k], sk[k, 0], sk[k, 1] = True, tab[j, 1], tab[j, 2]
            sn[k] += np.int64(tab[j, 3])
    tk = np.zeros((size, 2), np.uint64)  # stratum -> its most frequent value's rows
    tfull = np.zeros(size, np.bool_)
    tmax = np.zeros(size, np.int64)
    for k in range(size):
        if sfull[k]:
            t = _find(tk, sk[k, 0], np.uint64(0), tfull)
            if not tfull[t]:
                tfull[t], tk[t, 0] = True, sk[k, 0]
            tmax[t] = max(tmax[t], sn[k])
    base = 0
    for t in range(size):
        if tfull[t]:
            base += tmax[t]
    return e, top, base, kept, cells


@njit(cache=True, nogil=True)
def novel_rows(kq, kc, tab, used, out):
    """The rows of one chunk whose key ``kq`` is new to ``tab`` (then inserted with its
    partner ``kc``) or met with another partner than its first: written to ``out``, their
    count returned (a derived column's relation, ``passes.leak._Learner``: only these rows
    can add to the map or break it). ``used`` (int64, 1): the keys held; ``tab`` must have
    room for every row's key (at least twice ``used[0]`` plus the rows)."""
    m = 0
    for i in range(kq.shape[0]):
        r = _visit(tab, kq[i], kc[i])
        if r == 0:
            used[0] += 1
        if r != 1:
            out[m] = i
            m += 1
    return m
