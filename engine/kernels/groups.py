"""Per-group statistics and the gather that writes group values back to rows.

Serial loops in row order on purpose: floating-point sums then do not depend on
the thread count or on how the rows were chunked, so output is reproducible.
"""

import numpy as np
from numba import njit, prange


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
def accumulate_sse(Z, labels, means, start):
    """``start`` plus the sum over rows of ``||Z[i] - means[labels[i]]||^2``, in row order.

    Carrying the running sum across chunks (rather than adding per-chunk totals)
    keeps the result independent of the chunk size.
    """
    n, d = Z.shape
    s = start
    for i in range(n):
        g = labels[i]
        for j in range(d):
            t = Z[i, j] - means[g, j]
            s += t * t
    return s


@njit(cache=True, nogil=True)
def accumulate_sq_diff(A, B, out):
    """``out[j] += sum_i (A[i, j] - B[i, j])^2``, in row order (chunk-size independent)."""
    n, d = A.shape
    for j in range(d):
        s = out[j]
        for i in range(n):
            t = A[i, j] - B[i, j]
            s += t * t
        out[j] = s


@njit(cache=True, nogil=True, parallel=True)
def gather_rows(values, labels, out):
    """``out[i, :] = values[labels[i], :]`` (no reduction, so parallel is safe)."""
    n = labels.shape[0]
    d = values.shape[1]
    for i in prange(n):
        g = labels[i]
        for j in range(d):
            out[i, j] = values[g, j]


@njit(cache=True, nogil=True)
def count_labels(labels, n_groups):
    out = np.zeros(n_groups, np.int64)
    for i in range(labels.shape[0]):
        out[labels[i]] += 1
    return out


@njit(cache=True, nogil=True)
def publish_rows(X, labels, centroid, scale, mean, sd, out, col_sse, col_sum, col_sq):
    """The write pass's kernel, serial (it shares the CPU with the background writer):

    ``out[i] = centroid[labels[i]]``; with ``z`` the standardized input and ``c``
    the standardized published value (``(v / scale - mean) / sd``, 0 when sd = 0),
    ``col_sse[j] += (z - c)^2``, ``col_sum[j] += z``, ``col_sq[j] += z^2``, in row
    order, so the sums do not depend on the chunking.

    Two loops: the gather alone (a small body, so the CPU overlaps many of its
    cache misses into the centroid table), then the sums over contiguous rows.
    """
    n, d = X.shape
    for i in range(n):
        g = labels[i]
        for j in range(d):
            out[i, j] = centroid[g, j]
    inv = 1.0 / scale
    for i in range(n):
        for j in range(d):
            if sd[j] > 0.0:  # else z = c = 0: nothing to add
                z = (X[i, j] * inv[j] - mean[j]) / sd[j]
                c = (out[i, j] * inv[j] - mean[j]) / sd[j]
                t = z - c
                col_sse[j] += t * t
                col_sum[j] += z
                col_sq[j] += z * z
