"""Shannon entropy in bits: the one definition of the engine (the audit keeps its own,
``engine.audit.verify``, since it must not reuse what made the release).

* ``entropy(counts, axis=None)`` (NumPy): ``-sum p log2 p`` over the nonzero cells
  (0 log 0 = 0) of a count table, or of each row of one (``axis=1``). A whole
  table's terms are summed in increasing order of count, so tables holding the same
  multiset of counts give bit-identical entropies (Sun et al. (AMA)'s Table 1 has
  such ties: MI(A3, A5) = MI(A3, A6), and the spanning tree's tie-break depends on
  them).
* ``xlog2x``, ``entropy_of_sums`` (Numba): the same entropy as
  ``log2 N - (sum_c c log2 c) / N``, the form a kernel keeps up to date as rows join
  a class (maxent, ``engine.kernels.ranges.maxent``).
"""

import math

import numpy as np
from numba import njit


def entropy(counts, axis=None):
    """The entropy (bits) of the count table ``counts`` (``axis`` None), else of each of
    its rows (``axis=1``; an empty row: 0)."""
    if axis is not None:
        cnt = np.asarray(counts, dtype=np.float64)
        N = cnt.sum(axis=axis, keepdims=True)
        with np.errstate(divide="ignore", invalid="ignore"):
            p = np.where(cnt > 0, cnt / N, 1.0)
            return -(np.where(cnt > 0, p * np.log2(p), 0.0)).sum(axis=axis)
    c = np.sort(np.asarray(counts, dtype=np.float64).ravel())
    c = c[c > 0]
    if c.size == 0:
        return 0.0
    p = c / c.sum()
    return float(-(p * np.log2(p)).sum())


@njit(cache=True, nogil=True)
def xlog2x(c):
    """``c log2 c`` of a count (0 for c <= 0)."""
    if c <= 0:
        return 0.0
    return c * math.log2(c)


@njit(cache=True, nogil=True)
def entropy_of_sums(N, slog):
    """The entropy of N rows whose counts ``c`` give ``slog = sum_c c log2 c``: ``log2 N -
    slog / N`` (0 for no row)."""
    if N <= 0:
        return 0.0
    return math.log2(N) - slog / N
