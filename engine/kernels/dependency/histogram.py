"""Histogram kernels for the dependency profile (Sun et al. (AMA) section 3.1; Oommen & Fayyoumi (EMAD) section 4.2.1).

The profile needs, for d attributes, the 1-D counts of every attribute and the
joint counts of every pair, accumulated chunk by chunk over a scanned input.
Values become small integer *codes* first (one bin per code), then codes are
counted.

Binning (one column at a time, float64 or integer input, read-only is fine):

* ``bin_linear``: ``code = floor((x - lo) * mul / den)`` clipped to
  ``[0, n_bins - 1]``. Equal width ``W`` (Oommen & Fayyoumi (EMAD)) is ``mul = 1, den = W``; ``B``
  equal bins over ``[lo, hi]`` is ``mul = B, den = hi - lo`` (the maximum falls in
  the last bin, as in ``numpy.histogram``); one bin per integer is ``mul = den = 1``.
  Dividing by ``den`` instead of multiplying by ``1 / den`` keeps integer values on
  exact multiples of ``W`` in the right bin (``(301 - 1) / 100`` is exactly 3).
* ``bin_cuts``: ``code = number of cuts <= x`` (quantile bins).
* NaN (a null, as ``frame_to_array`` hands nulls over) gets ``null_code``.

Counting: codes are laid out column-major, ``codes[j, r]`` (d, n), uint8 when every
column has at most 256 bins (uint16, uint32 otherwise), and the
count arrays of all attributes and all pairs are stored back to back in one flat
int64 array (offsets given by the caller): 1-D counts of column j at
``col_off[j] + code``; joint counts of pair p = (a, b) at
``pair_off[p] + code_a * n_bins_b + code_b``. ``accumulate_counts`` splits the rows
of a chunk into one contiguous range per thread and each thread adds only into its
own private row ``priv[t]``; the caller sums ``priv`` over threads once at the end.
Counts are integers, so the result is identical for any chunking and any number
of threads.
"""

import numpy as np
from numba import njit, prange

# Rows per inner block: each thread walks its rows block by block and, within a
# block, pair by pair, so the code rows of a block stay in L2 while every pair's
# table is visited once per block.
BLOCK_ROWS = 16384


@njit(cache=True, nogil=True)
def _part(n_rows, t, n_parts):
    """``(start, stop)``: part ``t``'s contiguous range of the ``n_rows`` rows cut into
    ``n_parts``."""
    return (n_rows * t) // n_parts, (n_rows * (t + 1)) // n_parts


@njit(cache=True, nogil=True)
def bin_linear(x, lo, mul, den, n_bins, null_code, out):
    """Equal-width codes of ``x`` into ``out`` (Oommen & Fayyoumi (EMAD), section 4.2.1 "categorization").

    Parameters
    ----------
    x : (n,) float64 or integer
        Values; NaN means null.
    lo, mul, den : float
        ``code = floor((x - lo) * mul / den)``, clipped to ``[0, n_bins - 1]``.
    n_bins : int
        Number of value bins (the null bin is separate).
    null_code : int
        Code given to NaN.
    out : (n,) unsigned integer
        Output codes.
    """
    top = n_bins - 1
    for r in range(x.shape[0]):
        v = np.float64(x[r])
        if v != v:
            out[r] = null_code
            continue
        t = np.floor((v - lo) * mul / den)
        if t <= 0.0:
            out[r] = 0
        elif t >= top:
            out[r] = top
        else:
            out[r] = np.int64(t)


@njit(cache=True, nogil=True)
def bin_cuts(x, cuts, null_code, out):
    """Codes by sorted cut points: ``out[r] = #{c in cuts : c <= x[r]}`` (quantile bins).

    Parameters
    ----------
    x : (n,) float64 or integer
        Values; NaN means null.
    cuts : (m,) float64
        Increasing cut points; the codes run from 0 to m.
    null_code : int
        Code given to NaN.
    out : (n,) unsigned integer
        Output codes.
    """
    m = cuts.shape[0]
    for r in range(x.shape[0]):
        v = np.float64(x[r])
        if v != v:
            out[r] = null_code
            continue
        lo = 0
        hi = m
        while lo < hi:  # first cut > v
            mid = (lo + hi) >> 1
            if cuts[mid] <= v:
                lo = mid + 1
            else:
                hi = mid
        out[r] = lo


@njit(cache=True, nogil=True, parallel=True)
def accumulate_counts(codes, n_rows, col_off, pair_a, pair_b, pair_off, pair_stride, priv):
    """Add the 1-D and all-pairs joint counts of one chunk into per-thread arrays.

    Sun et al. (AMA), Algorithm 1 step 1 and Oommen & Fayyoumi (EMAD), EMAD step 1 ("estimate the first and
    second order marginals"): the counts are those marginals before division by n.

    Each thread walks its rows in blocks of ``BLOCK_ROWS``; per block and pair it
    first forms the cell indices ``code_a * n_bins_b + code_b`` (a loop the compiler
    vectorizes) and then increments. Unsigned 32-bit indices spare the increment
    loop Numba's negative-index wraparound test, which tripled its cost.

    Parameters
    ----------
    codes : (d, m) uint8, uint16 or uint32, m >= n_rows
        Bin codes, column-major; only the first ``n_rows`` are counted.
    n_rows : int
        Rows of this chunk.
    col_off : (d,) int64
        Offset of each column's 1-D counts in a ``priv`` row.
    pair_a, pair_b : (P,) int64
        Columns of each pair.
    pair_off : (P,) int64
        Offset of each pair's joint counts (row-major ``n_bins_a x n_bins_b``).
    pair_stride : (P,) int64
        ``n_bins_b`` (including its null bin) of each pair; every pair table has
        fewer than 2**32 cells.
    priv : (T, cells) int64
        One private count row per thread, added into (not cleared); T row ranges.
    """
    n_parts = priv.shape[0]
    d = codes.shape[0]
    n_pairs = pair_a.shape[0]
    for t in prange(n_parts):
        start, stop = _part(n_rows, np.int64(t), n_parts)  # (a prange index may be unsigned)
        acc = priv[t]
        idx = np.empty(BLOCK_ROWS, np.uint32)
        for b0 in range(start, stop, BLOCK_ROWS):
            m = min(b0 + BLOCK_ROWS, stop) - b0
            b1 = b0 + m
            for j in range(d):
                cj = codes[j, b0:b1]
                tab = acc[col_off[j] :]
                for r in range(m):
                    tab[np.uint32(cj[r])] += 1
            for p in range(n_pairs):
                ca = codes[pair_a[p], b0:b1]
                cb = codes[pair_b[p], b0:b1]
                nb = np.uint32(pair_stride[p])
                tab = acc[pair_off[p] :]
                for r in range(m):
                    idx[r] = np.uint32(ca[r]) * nb + np.uint32(cb[r])
                for r in range(m):
                    tab[idx[r]] += 1


@njit(cache=True, nogil=True, parallel=True)
def accumulate_pair_moments(X, n_rows, shift, priv):
    """Add pairwise-complete shifted moments of one chunk into per-thread arrays.

    For the Gaussian measure (Oommen & Fayyoumi (EMAD), section 4.2.4 "assuming normality") we need
    Pearson's correlation of every pair; nulls (NaN) drop a row from the pairs it
    touches only. With ``u = x_a - shift[a]`` and ``w = x_b - shift[b]`` over the rows
    where both are present, ``priv[t, 0, a, b]`` counts them and ``priv[t, 1, a, b]``,
    ``priv[t, 2, a, b]``, ``priv[t, 3, a, b]`` add ``u``, ``u*u`` and ``u*w``; the
    ``[b, a]`` entries hold the same sums with the roles swapped. Shifting by a value inside the column's range keeps the sums of squares from
    cancelling catastrophically.

    Parameters
    ----------
    X : (d, m) float64, m >= n_rows
        Values, column-major.
    n_rows : int
        Rows of this chunk.
    shift : (d,) float64
        Per-column shift.
    priv : (T, 4, d, d) float64
        One private block per thread, added into; T row ranges.
    """
    n_parts = priv.shape[0]
    d = X.shape[0]
    for t in prange(n_parts):
        start, stop = _part(n_rows, np.int64(t), n_parts)  # (a prange index may be unsigned)
        acc = priv[t]
        for b0 in range(start, stop, BLOCK_ROWS):
            b1 = min(b0 + BLOCK_ROWS, stop)
            for a in range(d):
                xa = X[a]
                sa = shift[a]
                for b in range(a, d):
                    xb = X[b]
                    sb = shift[b]
                    c = 0.0
                    su = 0.0
                    suu = 0.0
                    suw = 0.0
                    sw = 0.0
                    sww = 0.0
                    for r in range(b0, b1):
                        u = xa[r]
                        w = xb[r]
                        if u != u or w != w:
                            continue
                        u -= sa
                        w -= sb
                        c += 1.0
                        su += u
                        suu += u * u
                        suw += u * w
                        sw += w
                        sww += w * w
                    acc[0, a, b] += c
                    acc[1, a, b] += su
                    acc[2, a, b] += suu
                    acc[3, a, b] += suw
                    if b != a:
                        acc[0, b, a] += c
                        acc[1, b, a] += sw
                        acc[2, b, a] += sww
                        acc[3, b, a] += suw
