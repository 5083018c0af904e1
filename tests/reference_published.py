"""Slow, plainly written references for ``engine.kernels.published``.

Records are rows of small arrays; sorting is Python's stable sort by key; the
published records' first slot is ``row | group << 32``.
"""

import numpy as np

ROW_BITS = 32


def scatter_by_key(src, keys, n_keys):
    """``(dst, starts)``: the rows of ``src`` sorted by key, stably."""
    order = sorted(range(len(keys)), key=lambda i: int(keys[i]))
    dst = np.array([src[i] for i in order]).reshape(src.shape)
    starts = [0]
    for b in range(n_keys):
        starts.append(starts[-1] + sum(1 for k in keys if int(k) == b))
    return dst, np.array(starts, np.int64)


def merge_segments(src, first, seg_starts):
    """``(dst, starts)``: key by key, each segment's rows of that key, segment by segment."""
    rows, starts = [], [0]
    for b in range(seg_starts.shape[1] - 1):
        for s in range(seg_starts.shape[0]):
            for i in range(first[s] + seg_starts[s, b], first[s] + seg_starts[s, b + 1]):
                rows.append(src[i].copy())
        starts.append(len(rows))
    dst = np.array(rows).reshape(-1, src.shape[1]) if rows else src[:0].copy()
    return dst, np.array(starts, np.int64)


def fill_records(ids, local, first, centroid, range_rows, nxt, rows):
    """``(records (rows, 1 + d) float64, next)``: row i's record at the next row of its range."""
    d = centroid.shape[1]
    rec = np.zeros((rows, 1 + d))
    nxt = np.array(nxt, np.int64)
    for i in range(ids.shape[0]):
        key = int(ids[i]) // range_rows
        p = nxt[key]
        nxt[key] += 1
        rec.view(np.int64)[p, 0] = int(ids[i]) | ((first + int(local[i])) << ROW_BITS)
        rec[p, 1:] = centroid[local[i]]
    return rec, nxt


def place_records(rec, first_row, n, groups):
    """``(values (d, n), labels (n,), bad)``: each record at its row; ``bad`` the first
    record out of the range, placed twice or of a group not below ``groups`` (else -1)."""
    d = rec.shape[1] - 1
    values = np.zeros((d, n))
    labels = np.full(n, -1, np.int64)
    for i in range(rec.shape[0]):
        slot = int(rec.view(np.int64)[i, 0])
        row, g = (slot & 0xFFFFFFFF) - first_row, slot >> ROW_BITS
        if not 0 <= row < n or labels[row] >= 0 or g >= groups:
            return values, labels, i
        labels[row] = g
        values[:, row] = rec[i, 1:]
    return values, labels, -1
