"""Counting 64-bit keys in an open-addressing hash table (the write pass's self-check).

The table is one (size, 2) uint64 array of a power-of-two size: column 0 the key,
column 1 its count (0 = empty slot), so a probe touches one cache line. Slots are
probed linearly from the top ``bits`` bits of ``key * 0x9E3779B97F4A7C15``
(Fibonacci hashing, so any key bits spread).

The keys are row hashes folded column by column (``hash_column``: a float's bits;
``hash_int_column``: an integer's exact value; ``hash_column_nulls``: a column with
missing values), each fold one splitmix64 step. A missing value folds a fixed word
with an increment of its own (``_fold``), so it is a value of its own: equal to
every missing value and apart from every value, NaN and 0.0 included, but by a
64-bit collision. The reference is ``tests/test_nulls_audit.py`` (``_fold_ref``).
"""

import numpy as np
from numba import njit

from .common import mix64, prefetch

_AHEAD = 32  # keys prefetched ahead of the insert


@njit(cache=True, nogil=True)
def count_keys(new_keys, new_counts, start, table, used, max_used, bits):
    """Add ``new_counts[i]`` to the slot of ``new_keys[i]`` for i = start, start + 1, ...

    Stops early when ``used`` (occupied slots) reaches ``max_used``, so the caller can
    grow the table. Returns ``(next i, used)``.
    """
    mask = np.uint64(table.shape[0] - 1)
    shift = np.uint64(64 - bits)
    golden = np.uint64(0x9E3779B97F4A7C15)
    n = new_keys.shape[0]
    for i in range(start, n):
        if used >= max_used:
            return i, used
        if i + _AHEAD < n:
            prefetch(table, np.int64((new_keys[i + _AHEAD] * golden) >> shift))
        h = new_keys[i]
        j = np.int64((h * golden) >> shift)
        while True:
            if table[j, 1] == 0:
                table[j, 0] = h
                table[j, 1] = np.uint64(new_counts[i])
                used += 1
                break
            if table[j, 0] == h:
                table[j, 1] += np.uint64(new_counts[i])
                break
            j = np.int64((np.uint64(j) + np.uint64(1)) & mask)
    return n, used


_VALUE_STEP = 0x9E3779B97F4A7C15  # splitmix64's increment: a value's fold
_NULL_WORD = 0x6E756C6C6E756C6C  # a null's fold ("nullnull"), with its own increment:
_NULL_STEP = 0xD1B54A32D192ED03  # no value's bits fold to a null's hash but by a 64-bit collision
_EXACT = 1 << 53  # integers up to this magnitude are exact as float64
_WIDE_STEP = 0xA0761D6478BD642F  # a larger integer's fold: its own bits, a third increment


@njit(cache=True, nogil=True)
def hash_column(values, h):
    """Fold a float64 column into the row hashes ``h`` (uint64, updated in place):
    ``h = splitmix64(h ^ bits(v))``: -0.0 and 0.0 hash apart (a reader of the output
    tells them apart, so they are two classes: ``engine.passes.selfcheck``)."""
    for i in range(h.shape[0]):
        h[i] = mix64((h[i] ^ np.float64(values[i]).view(np.uint64)) + np.uint64(_VALUE_STEP))


@njit(cache=True, nogil=True, inline="always")
def _fold(h, word, valid):
    """One column's fold of a row: its value's 64 bits, or (``valid`` 0) a null's: the
    word ``_NULL_WORD`` with its own increment, so a null is apart from every value
    (NaN, 0.0, any bit pattern) but by a 64-bit collision, and equal to every other
    null. No branch: a column with scattered nulls costs about what one without does."""
    word = np.uint64(_NULL_WORD) if valid == 0 else word
    step = np.uint64(_NULL_STEP) if valid == 0 else np.uint64(_VALUE_STEP)
    return mix64((h ^ word) + step)


@njit(cache=True, nogil=True)
def hash_column_nulls(values, valid, h):
    """``hash_column`` for a float column with nulls (any float type, widened exactly):
    ``valid[i]`` 1 for a value, 0 for a null. A value folds as in ``hash_column`` (the
    same hash whether or not its chunk holds a null); a null as ``_fold`` says."""
    for i in range(h.shape[0]):
        h[i] = _fold(h[i], np.float64(values[i]).view(np.uint64), valid[i])


@njit(cache=True, nogil=True)
def hash_int_column(values, valid, h):
    """Fold an integer column (any width: a number, a Boolean as 0/1, a date's or
    date-time's physical value) into ``h``: a value of magnitude up to 2^53 folds its
    float64's bits, as the column cast to Float64 would (``hash_column``); a larger
    one its own bits with a third increment (a cast would round it onto its
    neighbours and merge classes). ``valid``: empty when the column has no nulls,
    else one 0/1 flag a row (nulls as ``hash_column_nulls``)."""
    masked = valid.shape[0] > 0
    for i in range(h.shape[0]):
        v = np.int64(values[i])
        ok = valid[i] if masked else np.uint8(1)
        if -_EXACT <= v <= _EXACT:
            h[i] = _fold(h[i], np.float64(v).view(np.uint64), ok)
        elif ok:
            h[i] = mix64((h[i] ^ np.uint64(v)) + np.uint64(_WIDE_STEP))
        else:
            h[i] = _fold(h[i], np.uint64(0), ok)
