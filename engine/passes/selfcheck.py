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

When the table of classes would not fit the memory budget (a run of tens of millions
of classes: 16 bytes a slot, at most half full), ``SpilledClassCounter`` appends each
row's hash to one of 2^bits buckets on disk by its top bits, and counts a bucket at a
time (in a hash table of that bucket's classes alone, which the cache holds), with the
same verdicts and messages.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

from ..errors import VerificationError
from ..io.spill import RunFile
from ..kernels.published import scatter_by_key
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


def row_hashes(frame: pl.DataFrame, qi) -> np.ndarray:
    """Each row's class hash (uint64): its published columns ``qi`` folded in order."""
    h = np.full(frame.height, _SEED, np.uint64)
    for c in qi:
        fold_column(frame.get_column(c), h)
    return h


def table_bits(expected_classes: int) -> int:
    """The in-memory counter's table: 2^bits slots, at most half full as expected."""
    bits = 10
    while (1 << bits) < 2 * max(int(expected_classes), 1):
        bits += 1
    return bits


def table_bytes(expected_classes: int) -> int:
    """Bytes of the in-memory counter's table for ``expected_classes`` classes."""
    return 16 << table_bits(expected_classes)


def class_counter(qi, expected_classes: int, *, room: int | None = None, folder=None, rows: int = 0,
                  buffer_bytes: int = 32 << 20):
    """A ``ClassCounter``, or a ``SpilledClassCounter`` in ``folder`` when its table would
    take more than ``room`` bytes (None: any)."""
    if room is None or folder is None or table_bytes(expected_classes) <= room:
        return ClassCounter(qi, expected_classes)
    return SpilledClassCounter(qi, folder, rows, buffer_bytes)


def _verdict(counted: int, rows: int, k: int | None, classes: int, smallest: int, small: int) -> dict:
    """Raise VerificationError unless ``rows`` rows were counted and no class (of
    ``classes``, the least of ``smallest`` rows, ``small`` of them below k) is below k."""
    if counted != rows:
        raise VerificationError(f"verification failed: {counted:,} rows were written, but the input has {rows:,}")
    if k is not None and classes and smallest < k:
        raise VerificationError(f"verification failed: a published class of {smallest} row(s) is smaller "
                                f"than k={k} ({small:,} of {classes:,} classes below k)")
    return {"rows": int(counted), "classes": int(classes), "min_class_size": int(smallest)}


class ClassCounter:
    """Counts rows by their published values: ``qi`` names the published columns (a
    centroid release's QIs; a range release's ``<col>_min``, ``<col>_max``, means and
    sets of categories, which are String)."""

    def __init__(self, qi, expected_classes: int):
        self.qi = list(qi)
        self._alloc(table_bits(expected_classes))
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
        h = row_hashes(frame, self.qi)
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
            return _verdict(self.rows, rows, k, 0, 0, 0)
        counts = self.table[:, 1].astype(np.int64)
        c = counts[counts > 0]
        smallest = int(c.min()) if c.size else 0
        return _verdict(self.rows, rows, k, c.size, smallest, int((c < k).sum()) if k is not None else 0)

    def close(self) -> None:
        pass


class SpilledClassCounter:
    """``ClassCounter`` for more classes than the memory holds: each row's hash goes to
    one of 2^bits buckets of a spill file in ``folder`` by its top bits (``bits`` so that
    a bucket holds about 2^14 of the table's ``rows``), and ``check`` counts a bucket at a
    time (in a hash table of that bucket's classes alone), with ``ClassCounter``'s verdicts."""

    def __init__(self, qi, folder, rows: int, buffer_bytes: int = 32 << 20):
        self.qi = list(qi)
        self.bits = int(min(16, max(4, np.ceil(np.log2(max(rows, 1) / (1 << 14))))))
        self.file = RunFile(Path(folder) / "classes.bin", 1 << self.bits, buffer_bytes)
        self._starts = np.empty((1 << self.bits) + 1, np.int64)
        self.rows = 0

    def add(self, frame: pl.DataFrame) -> None:
        """Count the rows of ``frame`` (the frame as it is handed to the writer)."""
        if frame.height == 0:
            return
        h = row_hashes(frame, self.qi)
        m = h.shape[0]
        keys = (h >> np.uint64(64 - self.bits)).astype(np.int64)
        scatter_by_key(h.view(np.uint32).reshape(m, 2), keys, 1 << self.bits, self.file.reserve(m, 8).view(np.uint32),
                       self._starts)
        self.file.commit(self._starts)
        self.rows += frame.height

    def check(self, k: int | None, rows: int) -> dict:
        """As ``ClassCounter.check``: a bucket at a time."""
        if self.rows != rows:
            return _verdict(self.rows, rows, k, 0, 0, 0)
        self.file.flush(release=True)
        classes = small = 0
        smallest = None
        table = np.zeros((0, 2), np.uint64)
        for b in range(1 << self.bits):
            h = self.file.read(b).view(np.uint64)
            if not h.shape[0]:
                continue
            bits = table_bits(h.shape[0])  # (a table of the bucket's hashes alone, at most half full: cache-sized)
            if table.shape[0] < 1 << bits:
                table = np.zeros((1 << bits, 2), np.uint64)
            t = table[: 1 << bits]
            t[:] = 0
            count_keys(h, np.ones(h.shape[0], np.int64), 0, t, 0, 1 << bits, bits)
            c = t[:, 1][t[:, 1] > 0].astype(np.int64)
            classes += c.shape[0]
            smallest = int(c.min()) if smallest is None else min(smallest, int(c.min()))
            small += int((c < k).sum()) if k is not None else 0
        return _verdict(self.rows, rows, k, classes, smallest or 0, small)

    def close(self) -> None:
        self.file.close()


class PersonCounter:
    """The self-check of a run with ``--person-column`` (``engine.entities``): besides the
    rows of each class (``counter``, a ``ClassCounter`` on the class's columns: the
    published QIs and the columns published unchanged that an intruder holds as well,
    the strata and a second stage's household-level QIs), each class's *distinct
    persons* (the values of column ``person``). Each person must publish one class (all
    its records the same values) and each class hold at least k persons.

    It keeps the distinct (class hash, person hash) pairs, deduplicated a chunk at a time
    and merged as they grow: 16 bytes a distinct person (a person, not a row, in memory).
    A collision of two persons' hashes could only merge them (a class looks smaller: a
    false failure); of two classes', hide a small class, with probability about
    classes / 2^64, as the class counter's."""

    def __init__(self, counter: ClassCounter, person: str):
        self.counter = counter
        self.person = person
        self.parts: list[np.ndarray] = []
        self.held = 0
        self.merged = 0

    @property
    def rows(self) -> int:
        return self.counter.rows

    def add(self, frame: pl.DataFrame) -> None:
        self.counter.add(frame)
        if frame.height == 0:
            return
        pairs = np.empty((frame.height, 2), np.uint64)
        pairs[:, 0] = row_hashes(frame, self.counter.qi)
        pairs[:, 1] = row_hashes(frame, [self.person])
        self.parts.append(np.unique(pairs, axis=0))
        self.held += self.parts[-1].shape[0]
        if self.held > 2 * max(self.merged, 1 << 16):
            self._merge()

    def _merge(self) -> np.ndarray:
        pairs = np.unique(np.concatenate(self.parts), axis=0) if self.parts else np.zeros((0, 2), np.uint64)
        self.parts, self.held, self.merged = [pairs], pairs.shape[0], pairs.shape[0]
        return pairs

    def check(self, k: int | None, rows: int) -> dict:
        """The class counter's verdict (rows, classes of at least k rows), then every
        person in one class and every class of at least k persons (VerificationError)."""
        out = self.counter.check(k, rows)
        pairs = self._merge()
        persons, per_person = np.unique(pairs[:, 1], return_counts=True)
        if (per_person > 1).any():
            raise VerificationError(f"verification failed: {int((per_person > 1).sum()):,} person(s) of column "
                                    f"{self.person!r} publish their records in more than one class")
        _, per_class = np.unique(pairs[:, 0], return_counts=True)
        smallest = int(per_class.min()) if per_class.size else 0
        if k is not None and per_class.size and smallest < k:
            raise VerificationError(f"verification failed: a published class holds {smallest} distinct person(s) "
                                    f"of column {self.person!r}, fewer than k={k} "
                                    f"({int((per_class < k).sum()):,} of {per_class.size:,} classes below k)")
        out.update(persons=int(persons.size), min_class_persons=smallest)
        return out

    def close(self) -> None:
        self.counter.close()


def entity_counter(classes, columns, expected_classes: int):
    """The self-check's counter for ``classes`` = ``(extra columns, person column or None)``
    (``engine.entities``): the classes over ``columns`` and the extra columns, with a
    person column their distinct persons counted too (``PersonCounter``)."""
    extra, person = classes
    counter = ClassCounter([*columns, *[c for c in extra if c not in columns]], expected_classes)
    return counter if person is None else PersonCounter(counter, person)
