"""The write pass's self-check: count the published classes from what is written.

Every row handed to the writer is hashed on its published QI values (a 64-bit
hash of the values' bits, column by column: ``fold_column`` and
``kernels.classcount``, on the frame's own column buffers) and counted in a hash table; this
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

A null (a published QI that is missing: a group whose values are all missing, a
nominal QI whose mode is the missing category) is a value of its own, as for
``microagg verify``: two rows null in a QI and equal elsewhere are one class, and
a null is apart from every value, NaN, 0, false and the empty text included. It
is folded as a fixed word with its own increment (``kernels.classcount._fold``),
read from the column's validity (its Arrow bitmap), not from a placeholder value,
so no value can stand for it; the value under a null is never read. Integers
(and dates, date-times) are folded by their exact value: a cast to Float64 would
round 64-bit values above 2^53 onto their neighbours and merge classes.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from ..errors import VerificationError
from ..kernels.classcount import count_keys, hash_column, hash_column_nulls, hash_int_column

_SEED = 0x6D6963726F616767  # any fixed seed
_STR_SEED = 7  # Polars' string hash, a fixed seed: the same text, the same hash, within a run
_NO_NULLS = np.zeros(0, np.uint8)  # no validity flags: no nulls
_NO_NULLS.flags.writeable = False
_FLOATS = (pl.Float64, pl.Float32)
_INTS = (pl.Int8, pl.Int16, pl.Int32, pl.Int64, pl.Date, pl.Datetime, pl.Duration, pl.Time, pl.Boolean)


def _fixed(a: np.ndarray, dtype) -> np.ndarray:
    """``a`` as a read-only C-contiguous array of ``dtype`` (copied only to convert): the
    kernels see one array type each, so each compiles once (``tests/test_compile.py``)."""
    a = np.ascontiguousarray(a, dtype)
    if a.flags.writeable:
        a = a.view()
        a.flags.writeable = False
    return a


def _bits(buf, offset: int, n: int) -> np.ndarray:
    """Bits ``offset .. offset + n`` of an Arrow bitmap as 0/1 bytes."""
    return _fixed(np.unpackbits(np.frombuffer(buf, np.uint8), count=offset + n, bitorder="little")[offset:],
                  np.uint8)


def _buffers(s: pl.Series) -> tuple[np.ndarray, np.ndarray]:
    """``(values, valid)`` of a fixed-width column, from its Arrow buffers (no copy of a
    one-chunk column's values; a Boolean's unpacked to 0/1 bytes): ``valid`` one 0/1
    flag a row, or empty when no value is null."""
    arr = s.to_physical().to_arrow()
    bufs, n, off = arr.buffers(), len(arr), arr.offset
    valid = _bits(bufs[0], off, n) if arr.null_count and bufs[0] is not None else _NO_NULLS
    if s.dtype == pl.Boolean:
        return _bits(bufs[1], off, n), valid
    return np.frombuffer(bufs[1], np.dtype(arr.type.to_pandas_dtype()), count=off + n)[off:], valid


def fold_column(s: pl.Series, h: np.ndarray) -> None:
    """Fold one published column into the row hashes ``h`` (see the module docstring):
    text (String, Categorical, Enum) by its text's hash, floats by their float64 bits,
    integers, Booleans, dates and date-times by their exact physical value (as float64
    bits up to 2^53: ``kernels.classcount.hash_int_column``). A null is a value of its
    own: apart from every value (NaN, 0, false, the empty text) and equal to every
    other null; a row's hash does not depend on the other rows of its chunk (the
    count is the same whatever the chunks)."""
    dtype = s.dtype
    if dtype == pl.Float64 and not s.null_count():
        hash_column(_fixed(s.to_numpy(), np.float64), h)  # (no copy: the common case)
    elif dtype == pl.String or isinstance(dtype, (pl.Categorical, pl.Enum)):
        # a range release's set of categories, a mixed release's category: its text's hash
        v = _fixed(s.cast(pl.String).hash(seed=_STR_SEED).to_numpy().view(np.float64), np.float64)
        if s.null_count():
            valid = s.is_not_null().to_arrow()  # (a Boolean whose values are the validity)
            hash_column_nulls(v, _bits(valid.buffers()[1], valid.offset, len(valid)), h)
        else:
            hash_column(v, h)
    elif isinstance(dtype, _INTS):
        values, valid = _buffers(s)
        hash_int_column(_fixed(values, np.int64), valid, h)
    else:  # floats; unsigned integers, decimals, a column of nulls only: as Float64
        values, valid = _buffers(s if isinstance(dtype, _FLOATS) else s.cast(pl.Float64))
        values = _fixed(values, np.float64)
        if valid.shape[0]:
            hash_column_nulls(values, valid, h)
        else:
            hash_column(values, h)


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
            fold_column(frame.get_column(c), h)
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
