"""Records spilled to keyed buckets, and the published values in row order.

``scatter_by_key`` (a stable counting sort of records by key) and ``merge_segments``
(segments of records sorted by key merged into one run, key by key): a bucketed spill
file's (``io.spill.RunFile``). ``fill_records`` (into each range's part of such a file's
buffer: ``RunFile.reserve_buckets``) and
``place_records``: the row-ordered published values (``passes.published``): the
aggregate pass turns each unit's rows into records (row id and group id in one 64-bit
slot, then the group's published values), keyed by the range of rows the write pass
reads them for; the write pass places a range's records at their rows and checks that
every row of the range comes exactly once. The slow references are in
``tests/reference_published.py``.
"""

import numpy as np
from numba import njit

ROW_BITS = 32  # a record's first slot: the row id in the low 32 bits, the group id above
ROW_MASK = (1 << ROW_BITS) - 1


@njit(cache=True, nogil=True)
def scatter_by_key(src, keys, n_keys, dst, starts):
    """Copy the rows of ``src`` (m, w) into ``dst`` (at least m rows) sorted by ``keys``
    (in [0, n_keys)), stably: the rows of key b keep their order, at
    ``dst[starts[b]:starts[b + 1]]`` (``starts``: n_keys + 1 values, filled here)."""
    m = keys.shape[0]
    w = src.shape[1]
    starts[:] = 0
    for i in range(m):
        starts[keys[i] + 1] += 1
    for b in range(n_keys):
        starts[b + 1] += starts[b]
    fill = starts[:n_keys].copy()
    for i in range(m):
        p = fill[keys[i]]
        fill[keys[i]] = p + 1
        for j in range(w):
            dst[p, j] = src[i, j]


@njit(cache=True, nogil=True)
def merge_segments(src, first, seg_starts, dst, starts):
    """Merge sorted segments: segment s of ``src`` (m, w) starts at row ``first[s]`` and
    holds its key b's rows at ``seg_starts[s, b]:seg_starts[s, b + 1]`` (from its start).
    ``dst`` receives every key's rows, key by key, segment by segment (so a key's rows
    keep their order of appends); ``starts`` (n_keys + 1) where each key's rows begin."""
    K = seg_starts.shape[0]
    n_keys = seg_starts.shape[1] - 1
    w = src.shape[1]
    p = 0
    for b in range(n_keys):
        starts[b] = p
        for s in range(K):
            for i in range(first[s] + seg_starts[s, b], first[s] + seg_starts[s, b + 1]):
                for j in range(w):
                    dst[p, j] = src[i, j]
                p += 1
    starts[n_keys] = p


@njit(cache=True, nogil=True)
def fill_records(ids, local, first, centroid, range_rows, slots, values, nxt):
    """A unit's published records, each at the next row of its range's part of the buffer:
    row ``i`` (row id ``ids[i]``, group ``first + local[i]``, range ``ids[i] //
    range_rows``) goes to row ``p = nxt[range]`` (then advanced), with the slot ``ids[i] |
    (first + local[i]) << ROW_BITS`` and the values ``centroid[local[i]]`` (``slots`` and
    ``values``: int64 and float64 views of the same (rows, 1 + d) records)."""
    m = ids.shape[0]
    d = centroid.shape[1]
    for i in range(m):
        key = ids[i] // range_rows
        p = nxt[key]
        nxt[key] = p + 1
        g = local[i]
        slots[p, 0] = ids[i] | ((first + g) << ROW_BITS)
        for j in range(d):
            values[p, 1 + j] = centroid[g, j]


@njit(cache=True, nogil=True)
def place_records(slots, values, first_row, groups, out, labels):
    """Place one range's records (``slots``, ``values``: int64 and float64 views of the
    same (m, 1 + d) records) at their rows: ``out[j, r - first_row] = values[i, 1 + j]``
    and ``labels[r - first_row]`` = the record's group, for the row ``r`` of record
    ``i``. ``labels`` must hold -1 on entry. Returns -1, or the index of the first
    record whose row is outside the range or already placed, or whose group is not
    below ``groups``."""
    m = slots.shape[0]
    d = out.shape[0]
    n = labels.shape[0]
    for i in range(m):
        s = slots[i, 0]
        r = (s & ROW_MASK) - first_row
        g = s >> ROW_BITS
        if r < 0 or r >= n or labels[r] >= 0 or g >= groups:
            return i
        labels[r] = g
        for j in range(d):
            out[j, r] = values[i, 1 + j]
    return -1
