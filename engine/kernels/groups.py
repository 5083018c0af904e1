"""Per-group statistics and the gather that writes group values back to rows.

Serial loops in row order on purpose: floating-point sums then do not depend on
the thread count or on how the rows were chunked, so output is reproducible.

The seam stage's routing (``passes.seams.Router``) runs here too: ``rotated_centroids``
gives the bits of the NumPy expressions it replaced (``np.bincount`` sums, then NumPy's
pairwise ``add.reduce`` of ``C[:, None, :] * R``, reproduced by ``pairwise_sum``), so the
groups go to the same blocks; ``float32_exact`` and ``gather_records`` build its records.
"""

import numpy as np
from numba import njit

from .common import prefetch, widen

_GATHER_AHEAD = 32  # rows between a centroid's prefetch and its use


@njit(cache=True, nogil=True)
def accumulate_group_sums(X, labels, out_sums, out_counts):
    """Add rows of ``X`` (n, d) into ``out_sums[labels[i]]``; count into ``out_counts``."""
    n, d = X.shape
    for i in range(n):
        g = labels[i]
        out_counts[g] += 1
        for j in range(d):
            out_sums[g, j] += X[i, j]


@njit(cache=True, nogil=True)
def accumulate_scaled_sums(X, inv, labels, out_sums, out_counts):
    """``accumulate_group_sums(X * inv, ...)`` without the scaled copy (``inv`` holds
    powers of two, so each product is exact and the sums are the same)."""
    n, d = X.shape
    for i in range(n):
        g = labels[i]
        out_counts[g] += 1
        for j in range(d):
            out_sums[g, j] += X[i, j] * inv[j]


@njit(cache=True, nogil=True)
def compact_group_sums(C, vals, inv, labels, out_sums, out_present, out_counts):
    """Group sums of the number columns ``vals`` of compact rows ``C`` (n, QIs;
    ``engine.encode.mixed``: numbers, NaN for a missing value): ``out_sums[g, v] +=
    C[i, vals[v]] * inv[v]`` over the rows present, in row order (what
    ``accumulate_scaled_sums`` adds to those columns of the expanded rows when no value
    is missing), ``out_present[g, v]`` the rows present, ``out_counts[g]`` the rows."""
    n = C.shape[0]
    for i in range(n):
        g = labels[i]
        out_counts[g] += 1
        for v in range(vals.shape[0]):
            x = C[i, vals[v]]
            if not np.isnan(x):
                out_sums[g, v] += x * inv[v]
                out_present[g, v] += 1


@njit(cache=True, nogil=True)
def group_picks(labels, codes, g, ordinal, null, out, stats):
    """Each of ``g`` groups' published category from its rows' codes (``codes``,
    float64, by row; ``labels`` the rows' groups), written to ``out[group]``:

    * nominal (``ordinal`` False): the mode, ties to the lowest code; ``null``: the
      code that stands for a missing value (-1: none);
    * ordinal: the lower median of the codes present (NaN: missing), NaN when the
      group has none.

    ``stats`` (int64, 4) accumulates: [0] the loss (nominal: rows whose code is not
    their group's pick; ordinal: the sum of |code - pick| over the rows present),
    [1] missing cells published with a value (imputed), [2] missing cells published
    missing, [3] cells with a value published missing (nominal: a group whose mode is
    the missing code). Per-row cost does not depend on the number of categories."""
    n = labels.shape[0]
    cnt = np.zeros(g + 1, np.int64)
    for i in range(n):
        cnt[labels[i] + 1] += 1
    big = 0
    for j in range(g):
        if cnt[j + 1] > big:
            big = cnt[j + 1]
        cnt[j + 1] += cnt[j]
    pos = cnt[:g].copy()
    order = np.empty(n, np.int64)
    for i in range(n):
        order[pos[labels[i]]] = i
        pos[labels[i]] += 1
    buf = np.empty(max(big, 1))
    for j in range(g):
        a, b = cnt[j], cnt[j + 1]
        m = 0
        miss = 0
        for t in range(a, b):  # the group's codes present, insertion-sorted
            x = codes[order[t]]
            if np.isnan(x):
                miss += 1
                continue
            u = m
            while u > 0 and buf[u - 1] > x:
                buf[u] = buf[u - 1]
                u -= 1
            buf[u] = x
            m += 1
        if ordinal:
            if m == 0:
                out[j] = np.nan
                stats[2] += miss
                continue
            pick = buf[(m - 1) // 2]
            out[j] = pick
            loss = 0.0
            for u in range(m):
                loss += abs(buf[u] - pick)
            stats[0] += np.int64(loss)
            stats[1] += miss
            continue
        best, run, pick = 0, 0, 0.0
        for u in range(m):
            run = run + 1 if u > 0 and buf[u] == buf[u - 1] else 1
            if run > best:
                best, pick = run, buf[u]
        out[j] = pick
        stats[0] += m - best
        if null >= 0:
            nulls = 0
            for u in range(m):
                if buf[u] == null:
                    nulls += 1
            if pick == null:
                stats[2] += nulls
                stats[3] += m - nulls
            else:
                stats[1] += nulls


@njit(cache=True, nogil=True)
def standardize_codes(C, src, mode, fill, off, table, scale, mean, sd, cols, out):
    """``moments.standardize_serial`` of the expanded columns ``cols`` of compact rows
    ``C`` (n, QIs) without expanding them (``engine.encode.mixed.Mixed.expand``):
    expanded column j of ``x = C[i, src[j]]`` is, by ``mode[j]``, 0: ``x`` (``fill[j]``
    when x is NaN, a missing value), 1: 1.0 when x is NaN else 0.0 (the missing-value
    indicator), 2: ``table[off[j] + x]`` (a category's coordinate: one-hot or
    embedded); then the same arithmetic on the same values, so the same bits."""
    n = C.shape[0]
    m = cols.shape[0]
    for i in range(n):
        for jj in range(m):
            j = cols[jj]
            x = C[i, src[j]]
            if mode[j] == 0:
                v = fill[j] if np.isnan(x) else x
            elif mode[j] == 1:
                v = 1.0 if np.isnan(x) else 0.0
            else:
                v = table[off[j] + np.int64(x)]
            if sd[j] > 0.0:
                out[i, jj] = (v * (1.0 / scale[j]) - mean[j]) / sd[j]
            else:
                out[i, jj] = 0.0


@njit(cache=True, nogil=True)
def published_sse(X, inv, labels, centroid, out):
    """``out[j] += ((X[i, j] - centroid[labels[i], j]) * inv[j])^2`` over the rows in
    order: the squared error of the published values in units of the scale, as
    ``column_sums`` adds it in the write pass (before the division by sd^2)."""
    n, d = X.shape
    for j in range(d):
        a = out[j]
        for i in range(n):
            t = (X[i, j] - centroid[labels[i], j]) * inv[j]
            a += t * t
        out[j] = a


@njit(cache=True, nogil=True)
def group_sums(X, labels, G):
    """``(sums, counts)`` of the groups 0..G-1 of ``labels``, from scratch, in row order."""
    sums = np.zeros((G, X.shape[1]))
    counts = np.zeros(G, np.int64)
    accumulate_group_sums(X, labels, sums, counts)
    return sums, counts


@njit(cache=True, nogil=True)
def group_means(X, labels, G, out):
    """``out[g]``: the mean of group g's rows (``group_sums`` divided by the count; a
    group without rows is left as it is)."""
    sums, counts = group_sums(X, labels, G)
    for g in range(G):
        if counts[g] > 0:
            for j in range(X.shape[1]):
                out[g, j] = sums[g, j] / counts[g]


@njit(cache=True, nogil=True)
def slot_sums(X, rid, counts, cap, sums):
    """``sums[g]`` from scratch for a slot layout: group g's rows are ``rid[g*cap:
    g*cap + counts[g]]`` (rows of ``X``), summed in slot order."""
    G, d = sums.shape
    for g in range(G):
        for j in range(d):
            sums[g, j] = 0.0
        for t in range(counts[g]):
            i = rid[g * cap + t]
            for j in range(d):
                sums[g, j] += X[i, j]


@njit(cache=True, nogil=True)
def partition_sse(X, labels, G):
    """The SSE of the partition ``labels`` (groups 0..G-1) of the rows of ``X``, from
    scratch: ``sum_i ||X[i] - mean of its group||^2`` in row order, each mean the
    group's sums (``group_sums``) times the inverse of its count."""
    n, d = X.shape
    sums, counts = group_sums(X, labels, G)
    s = 0.0
    for i in range(n):
        g = labels[i]
        inv = 1.0 / counts[g]
        for j in range(d):
            t = X[i, j] - sums[g, j] * inv
            s += t * t
    return s


@njit(cache=True, nogil=True)
def count_labels(labels, n_groups):
    out = np.zeros(n_groups, np.int64)
    for i in range(labels.shape[0]):
        out[labels[i]] += 1
    return out


@njit(cache=True, nogil=True)
def gather_columns(labels, centroid, out):
    """The write pass's gather, column-major: ``out[j, i] = centroid[labels[i], j]``.
    One pass over the rows; the centroid row of the label ``_GATHER_AHEAD`` rows
    ahead is prefetched (its first and last value: one cache line when the table
    is 64-byte aligned and d <= 8, see ``frames.aligned_zeros``), so the cache misses
    into the table overlap. Each ``out[j]`` then becomes an output column without a
    copy."""
    n = labels.shape[0]
    d = centroid.shape[1]
    for i in range(n):
        if i + _GATHER_AHEAD < n and d > 0:
            row = centroid[labels[i + _GATHER_AHEAD]]
            prefetch(row, 0)
            prefetch(row, d - 1)
        g = labels[i]
        for j in range(d):
            out[j, i] = centroid[g, j]


@njit(cache=True, nogil=True)
def column_sums(x, published, scale, mean, j, col_sse, col_sum, col_sq):
    """The write pass's sums for QI column ``j``, in units of ``scale`` (a power of
    two), before the division by the column's sd (``frames.finish_sums``):
    ``col_sse[j] += ((x - v) / scale)^2`` for the input ``x`` and the published value
    ``v``; ``col_sum[j] += u`` and ``col_sq[j] += u^2`` with ``u = x / scale - mean``.
    No division per row. In row order, so the sums do not depend on the chunking.
    ``x`` may be any numeric dtype; it is converted to float64 as a cast would."""
    inv = 1.0 / scale[j]
    m = mean[j]
    a = col_sse[j]
    b = col_sum[j]
    q = col_sq[j]
    for i in range(x.shape[0]):
        xi = np.float64(x[i])
        t = (xi - published[i]) * inv
        u = xi * inv - m
        a += t * t
        b += u
        q += u * u
    col_sse[j] = a
    col_sum[j] = b
    col_sq[j] = q


# -- per-group min / max and distinct counts (the range methods' classes)


@njit(cache=True, nogil=True)
def group_minmax(X, labels, G):
    """Per-group min and max of every column of X (rows with label in 0..G-1)."""
    n, d = X.shape
    mn = np.full((G, d), np.inf)
    mx = np.full((G, d), -np.inf)
    for i in range(n):
        widen(mn, mx, labels[i], X, i)
    return mn, mx


@njit(cache=True, nogil=True)
def group_distinct(codes, labels, G, card):
    """Number of distinct codes per group, for each column of ``codes`` (n, dc)."""
    n, dc = codes.shape
    out = np.zeros((G, dc), np.int64)
    # rows grouped by label: walk groups through a counting sort
    cnt = np.zeros(G + 1, np.int64)
    for i in range(n):
        cnt[labels[i] + 1] += 1
    for g in range(G):
        cnt[g + 1] += cnt[g]
    order = np.empty(n, np.int64)
    pos = cnt[:G].copy()
    for i in range(n):
        g = labels[i]
        order[pos[g]] = i
        pos[g] += 1
    for j in range(dc):
        seen = np.full(card[j], -1, np.int64)
        for g in range(G):
            z = 0
            for t in range(cnt[g], cnt[g + 1]):
                c = codes[order[t], j]
                if seen[c] != g:
                    seen[c] = g
                    z += 1
            out[g, j] = z
    return out


@njit(cache=True, nogil=True)
def _pairwise_block(a, lo, n):
    """``pairwise_sum`` of at most 128 values."""
    if n < 8:
        r = 0.0
        for i in range(n):
            r += a[lo + i]
        return r
    r0, r1, r2, r3 = a[lo], a[lo + 1], a[lo + 2], a[lo + 3]
    r4, r5, r6, r7 = a[lo + 4], a[lo + 5], a[lo + 6], a[lo + 7]
    i = 8
    while i < n - n % 8:
        r0 += a[lo + i]
        r1 += a[lo + i + 1]
        r2 += a[lo + i + 2]
        r3 += a[lo + i + 3]
        r4 += a[lo + i + 4]
        r5 += a[lo + i + 5]
        r6 += a[lo + i + 6]
        r7 += a[lo + i + 7]
        i += 8
    r = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        r += a[lo + i]
        i += 1
    return r


@njit(cache=True, nogil=True)
def pairwise_sum(a, lo, n):
    """The sum of ``a[lo:lo + n]`` in the order of NumPy's ``add.reduce`` over a contiguous
    axis (its pairwise summation: fewer than 8 values one by one from 0.0; up to 128 in
    eight running sums combined as ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7)), then
    the rest one by one; above, the sum of the two halves' sums, the first half a multiple
    of 8). The halves' tree runs on a stack, not by recursion (a recursive kernel loaded
    from Numba's cache can crash)."""
    if n <= 128:
        return _pairwise_block(a, lo, n)
    los = np.empty(64, np.int64)  # (the tree's depth is below log2(n) < 64)
    ns = np.empty(64, np.int64)
    left = np.empty(64)
    state = np.empty(64, np.int64)  # 1: the left half is being summed, 2: the right half
    sp = 0
    los[0] = lo
    ns[0] = n
    while True:
        m = ns[sp]
        if m > 128:
            h = m // 2
            h -= h % 8
            state[sp] = 1
            los[sp + 1] = los[sp]
            ns[sp + 1] = h
            sp += 1
            continue
        v = _pairwise_block(a, los[sp], m)
        while True:  # hand v up: a left half starts its right half, a right half completes its node
            sp -= 1
            if sp < 0:
                return v
            if state[sp] == 1:
                h = ns[sp] // 2
                h -= h % 8
                left[sp] = v
                state[sp] = 2
                los[sp + 1] = los[sp] + h
                ns[sp + 1] = ns[sp] - h
                sp += 1
                break
            v = left[sp] + v


@njit(cache=True, nogil=True)
def rotated_centroids(Z, labels, G, R):
    """``(Cr, first)``: each group's centroid ``C`` (its rows' sums in row order divided by
    its size, as ``np.bincount(labels, weights=Z[:, j]) / counts``) turned by ``R`` (d, d),
    ``Cr = C R^T`` with each product summed as ``(C[:, None, :] * R[None]).sum(axis=2)``
    sums it (``pairwise_sum``): the same bits, without NumPy's G x d x d temporary; and
    ``first[g]``, the position of g's first row (``n`` for a group without rows)."""
    n, d = Z.shape
    sums = np.zeros((G, d))
    cnt = np.zeros(G, np.int64)
    first = np.full(G, n, np.int64)
    for i in range(n):
        g = labels[i]
        if cnt[g] == 0:
            first[g] = i
        cnt[g] += 1
        for j in range(d):
            sums[g, j] += Z[i, j]
    Cr = np.empty((G, d))
    c = np.empty(d)
    t = np.empty(d)
    for g in range(G):
        f = float(cnt[g])
        for j in range(d):
            c[j] = sums[g, j] / f if f > 0.0 else np.nan  # (0 / 0, as NumPy's division)
        for i in range(d):
            for j in range(d):
                t[j] = c[j] * R[i, j]
            Cr[g, i] = 0.0 + pairwise_sum(t, 0, d)  # (0.0 +: the reduction's start, -0.0 -> 0.0)
    return Cr, first


@njit(cache=True, nogil=True)
def float32_exact(X):
    """True when every value of ``X`` is a float32 (or NaN): ``np.array_equal(X.astype(np.float32),
    X, equal_nan=True)`` without the copy."""
    n, d = X.shape
    for i in range(n):
        for j in range(d):
            x = X[i, j]
            if not (np.float64(np.float32(x)) == x or x != x):
                return False
    return True


@njit(cache=True, nogil=True)
def gather_records(X, order, labels, tag, rec):
    """Row t of ``rec`` (float32 or float64; its first column left to the caller) :=
    ``X[order[t]]``, then ``labels[order[t]]`` and ``tag``: numbers converted as NumPy's
    assignment converts them, in one pass instead of a strided copy a column."""
    w = X.shape[1]
    for t in range(order.shape[0]):
        i = order[t]
        for j in range(w):
            rec[t, 1 + j] = X[i, j]
        rec[t, w + 1] = labels[i]
        rec[t, w + 2] = tag
