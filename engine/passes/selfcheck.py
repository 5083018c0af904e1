"""The write pass's self-check: count the published classes from what is written.

Every row handed to the writer is hashed on its published QI values (a 64-bit
hash of the values' bits, column by column: ``kernels.classcount.hash_column``, on
the frame's own column buffers) and counted in a hash table; this
uses the written values only, not the group labels that produced them, so a bug
anywhere upstream (labels, centroids, the gather, the frame assembly) that
leaves a combination of QI values on fewer than k rows is caught before the
output is renamed into place. Two groups that publish identical values are one
class, as a reader of the output sees them; "identical" is bit for bit, so -0.0
and 0.0 are two classes: a CSV output prints ``-0.0`` and ``0.0``, a Parquet
output stores two bit patterns, and an intruder reading either tells the rows
apart. Counting them apart is also the safe side (a finer partition can only
have smaller classes), and it is what ``microagg verify`` does (``_sign_keys``). A hash collision could only merge two
classes (hiding a small one) with probability about classes / 2^64 per class.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from ..errors import VerificationError
from ..kernels.classcount import count_keys, hash_column

_SEED = 0x6D6963726F616767  # any fixed seed
_STR_SEED = 7  # Polars' string hash, a fixed seed: the same text, the same hash, within a run


class ClassCounter:
    """Counts rows by their published values: ``qi`` names the published columns (a
    centroid release's QIs; a range release's ``<col>_min``, ``<col>_max``, means and
    sets of categories, which are String)."""

    def __init__(self, qi, expected_classes: int):
        self.qi = list(qi)
        bits = 10
        while (1 << bits) < 2 * max(int(expected_classes), 1):  # load <= 1/2 as expected
            bits += 1
        self._alloc(bits)
        self.rows = 0

    def _alloc(self, bits: int) -> None:
        self.bits = bits
        self.table = np.zeros((1 << bits, 2), np.uint64)  # (key, count) per slot
        self.used = 0

    def _insert(self, keys: np.ndarray, counts: np.ndarray) -> None:
        i = 0
        while True:
            i, self.used = count_keys(keys, counts, i, self.table, self.used,
                                      int(0.7 * self.table.shape[0]), self.bits)
            if i >= keys.shape[0]:
                return
            full = self.table[:, 1] > 0  # more classes than expected: grow, re-insert
            old_keys, old_counts = self.table[full, 0], self.table[full, 1].astype(np.int64)
            self._alloc(self.bits + 1)
            self._insert(old_keys, old_counts)

    def add(self, frame: pl.DataFrame) -> None:
        """Count the rows of ``frame`` (the frame as it is handed to the writer)."""
        if frame.height == 0:
            return
        h = np.full(frame.height, _SEED, np.uint64)
        for c in self.qi:
            s = frame.get_column(c)
            if s.dtype == pl.String or isinstance(s.dtype, (pl.Categorical, pl.Enum)):
                # a range release's set of categories, a mixed release's category: its text's hash
                v = s.cast(pl.String).hash(seed=_STR_SEED).to_numpy().view(np.float64)
            else:
                if s.dtype != pl.Float64 or s.null_count():
                    s = (s.to_physical() if s.dtype.is_temporal() else s).cast(pl.Float64).fill_null(float("nan"))
                v = s.to_numpy()
            hash_column(np.ascontiguousarray(v, dtype=np.float64), h)
        self._insert(h, np.ones(h.shape[0], np.int64))
        self.rows += frame.height

    def classes(self) -> tuple[np.ndarray, np.ndarray]:
        """``(keys, counts)`` of the classes counted so far (for ``merge``)."""
        used = self.table[:, 1] > 0
        return self.table[used, 0].copy(), self.table[used, 1].astype(np.int64)

    def merge(self, keys: np.ndarray, counts: np.ndarray, rows: int) -> None:
        """Add another counter's ``classes()`` and row count (a part of the output counted
        elsewhere: ``engine.cluster``)."""
        self._insert(np.ascontiguousarray(keys, np.uint64), np.ascontiguousarray(counts, np.int64))
        self.rows += int(rows)

    def check(self, k: int | None, rows: int) -> dict:
        """Raise VerificationError unless ``rows`` rows were counted and every class has
        at least ``k`` of them; return ``{"rows", "classes", "min_class_size"}``."""
        if self.rows != rows:
            raise VerificationError(f"verification failed: {self.rows:,} rows were written, "
                                    f"but the input has {rows:,}")
        counts = self.table[:, 1].astype(np.int64)
        c = counts[counts > 0]
        smallest = int(c.min()) if c.size else 0
        if k is not None and c.size and smallest < k:
            small = int((c < k).sum())
            raise VerificationError(f"verification failed: a published class of {smallest} row(s) is smaller "
                                    f"than k={k} ({small:,} of {c.size:,} classes below k)")
        return {"rows": int(self.rows), "classes": int(c.size), "min_class_size": smallest}
