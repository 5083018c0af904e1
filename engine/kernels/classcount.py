"""Counting 64-bit keys in an open-addressing hash table (the write pass's self-check).

The table is one (size, 2) uint64 array of a power-of-two size: column 0 the key,
column 1 its count (0 = empty slot), so a probe touches one cache line. Slots are
probed linearly from the top ``bits`` bits of ``key * 0x9E3779B97F4A7C15``
(Fibonacci hashing, so any key bits spread).
"""

import numpy as np
from numba import njit

from .prefetch import prefetch

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


@njit(cache=True, nogil=True)
def hash_column(values, h):
    """Fold a float64 column into the row hashes ``h`` (uint64, updated in place):
    ``h = splitmix64(h ^ bits(v))``: -0.0 and 0.0 hash apart (a reader of the output
    tells them apart, so they are two classes: ``engine.passes.selfcheck``)."""
    for i in range(h.shape[0]):
        z = h[i] ^ np.float64(values[i]).view(np.uint64)
        z = z + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        h[i] = z ^ (z >> np.uint64(31))
