"""The leak guard: a pass-through column must not publish a quasi-identifier unaggregated.

Two halves: the exact one-to-one test below, and the tests beyond it (a column that
determines a QI, alone or with the strata; one that follows its order on ranks; one
whose order runs in blocks of it; the input's row order, which the release keeps, in
blocks of a QI or sorted by it) in ``passes.dependence``, fed from the same read
(``guard``). The checks passed go to the report (``leak_checks``).

A column that is not a QI passes through unchanged. If its values correspond one-to-one
with a QI's (a code beside its label, a birth year beside an age, the ``@NUMCOL`` of
``--ordinal education=@education_num``), it publishes that QI as it was, and a linker
reads the original classes from it (the README's Adult example without ``--derived``:
with the published QIs and ``education_num``, 3,639 of 7,126 classes are below k = 5).
``guard`` checks every pass-through column against every QI before any heavy work, and
refuses with one line naming both and the ways out: add the column to ``--qi``, drop
it, or declare it derived (``--derived COL=QI``, the MDAV family). Every method's
release is guarded; a range method's sensitive attribute (``--sa``) is a pass-through
column like any other (checked against the QIs, never taken as one).

**One-to-one**, over all rows: each value of the column goes with one value of the QI
and each value of the QI with one value of the column; a null is a value (equal to
every other null). Not counted as a leak:

* a QI with a single value (it publishes nothing);
* a pair of *row-unique* columns (every value on one row: a row id beside a continuous
  QI, the census' income columns beside each other): any two such columns correspond
  one-to-one, the data cannot tell a copy from an identifier, unless the column is
  numeric and an exact affine function of the QI (``c = a + b * q``, within 1e-9 of the
  terms' magnitude: a unit change, a shift), which is a leak again.

**When.** A pass of its own, right after the input checks (the coordinator: after the
row count and the memory budget, before pass 1), so that a refusal comes before any
heavy work and nothing is written. It reads the pass-through columns and the QIs a
chunk at a time (``source.base``: a CSV's columns as the output will hold them) and
stops as soon as every pair has shown a violation (a value with two partners), which
on real data is within the first chunk; while some pairs still hold (a leak, two
row-unique columns, a derived column's relation being learnt), it reads on with only
their columns (``_Reader``: the iteration is restarted on fewer columns, the rows
read so far skipped), so on real data the pass costs a fraction of a second.

**Cost at census scale** (issue 42 item 5; docs/benchmarks.md). The reader asks for
what the tests still pending read (``Dependence.needed``), and hashes only what they
key on (``Dependence.keyed``): a rank test reads numbers from the row sample, so a QI of
fewer than ``MIN_RANK_VALUES`` sampled values, whose rank tests read on (household
size: to 2,097,152 rows of the 10M census-like table), reads on with the QI and the
columns tested against it alone, not every QI and text. It reads through Polars'
native Parquet reader (the first chunks hold every column, texts among them: a tenth
of pyarrow's decoding time there). The dependency tables and their figures are kernels
(``kernels.leak.fd_rows``, ``fd_figures``: the same counts as ``fd_stats``). None of
this changes what is read at each verdict, so the verdicts and the report's
``leak_checks`` are those of the plain version, whatever the chunking
(``tests/test_leak_cost.py``). A few tenths of a second of the pass in a fresh process
are Numba's first use (its runtime set up), which the next pass would pay otherwise.
Inside the write pass it would cost no read, but a refusal would come after the
whole run, the write pass reads no QI when the blocks measured the loss, and a
derived column's relation must be known before its first row is written.

**Bounded memory.** Values are hashed (Polars' hash, then mixed: ``kernels.leak``);
each pair keeps two hash tables (column -> QI, QI -> column) of at most
``max_slots`` slots of 16 bytes (``table_slots``: 64 MiB, or an eighth of
``--memory-limit`` if less, shared by the pairs, but at least 4,096 and at most 65,536
slots a table: 2 MiB a pair at most). A table that fills up keeps
only the values whose hash falls below a threshold, halved each time (every row of a
kept value, so the dependency is tested exactly on the kept values, both ways). A
pair dies at its first violation: only the pairs still one-to-one hold memory.

**Errors.** Sampling never hides a leak: a one-to-one pair shows no violation on any
subset of its values. A leak is missed (false negative) only when a 64-bit hash
collision merges two values of one column that go with different values of the other
(a violation appears; about d^2 / 2^65 for d distinct values: 3e-6 at 10^7), or, for
the row-unique exception, when every repeated value of the pair fell outside the
sample (probability (1 - p)^r for r repeated values, each kept with probability p;
p = 1 while the distinct values fit the tables). A false alarm needs the reverse: every
violating value dropped from the sample (at most (1 - p)^m for m of them), or a
collision hiding the only violation.

**Derived columns** (``--derived COL=QI``): the column is published recomputed from its
QI's *published* value, so it says nothing the QI does not. Its relation is learnt in
the same pass: for a QI published as a category (a mixed-type run's nominal or ordinal
QI: its group's mode or median category) the map category -> value, which must be a
function (refused naming the row otherwise); for a QI published as its group's mean
(numbers, dates on their epoch value) only an exact affine relation ``c = a + b * q``
can be recomputed (the published column is then Float64), else refused naming the
row. The map is learnt from the rows a kernel flags on the values' keys
(``kernels.leak.novel_rows``: a QI value's first row, or one with another value of the
column than on its first), compared by their values; a pair of values whose 64-bit keys
collide with an earlier pair's (about d^2 / 2^65) would go unseen, as in the one-to-one
test. ``Derive.apply`` is the write pass's step (``passes.write.write_pass``); the
self-check counts the classes with the derived columns among the published ones.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from ..encode.kinds import is_number, is_temporal, kind_of
from ..errors import EngineError
from ..kernels.leak import mix_keys, novel_rows, pair_rows, regrow
from ..progress import Progress
from .dependence import Dependence, describe, row_order_message
from .partition import strata_columns
from .stitch import Groups

_SEED = 0x6C65616B  # Polars' hash seed ("leak")
TABLE_BYTES = 64 << 20  # the pairs' tables together, at most (less under a memory limit)
MIN_SLOTS, MAX_SLOTS = 1 << 12, 1 << 16  # a table's slots (16 bytes each): at most MAX_SLOTS
FIRST_SLOTS = 1 << 8  # a table's first size (doubled as it fills)
AFFINE_TOLERANCE = 1e-9  # |c - (a + b q)| <= this x (|c| + |a| + |b q|): an exact affine relation
HOUSEHOLD_ROWS = 8  # a dependency of repeated cells of at most this many rows on average: --household-column offered


def value_keys(s: pl.Series) -> np.ndarray:
    """Each row's key (uint64, never 0) of the value of ``s``: equal values, equal keys;
    a null is a value of its own. Categories by their text."""
    if isinstance(s.dtype, (pl.Categorical, pl.Enum)):
        s = s.cast(pl.String)
    try:
        h = s.hash(seed=_SEED)
    except Exception:  # a type Polars does not hash: its text
        h = s.cast(pl.String).hash(seed=_SEED)
    out = np.empty(s.len(), np.uint64)
    mix_keys(np.array(h.to_numpy(), dtype=np.uint64), out)  # (a writable copy: Polars' array is read-only, a
    # second specialization of the kernel beside the other callers')
    return out


def table_slots(pairs: int, memory_limit: int | None = None) -> int:
    """The largest size of a pair's table: ``TABLE_BYTES`` (an eighth of a memory limit, if
    less) over the pairs' two tables, a power of two in [MIN_SLOTS, MAX_SLOTS]."""
    total = TABLE_BYTES if memory_limit is None else min(TABLE_BYTES, int(memory_limit) // 8)
    per = total // (32 * max(int(pairs), 1))
    slots = 1 << max(int(per).bit_length() - 1, 0)
    return int(min(MAX_SLOTS, max(MIN_SLOTS, slots)))


class PairTest:
    """Whether two columns correspond one-to-one, fed their keys chunk by chunk
    (``kernels.leak.pair_rows``: two tables, sampled when full)."""

    def __init__(self, column: str = "", qi: str = "", max_slots: int = MAX_SLOTS):
        self.column, self.qi = column, qi
        self.max_slots = int(max_slots)
        first = min(FIRST_SLOTS, self.max_slots)
        self.tabs = [np.zeros((first, 2), np.uint64), np.zeros((first, 2), np.uint64)]
        self.limits = np.full(2, np.iinfo(np.uint64).max, np.uint64)
        self.used = np.zeros(2, np.int64)
        self.flags = np.zeros(3, np.int64)
        self.at_max = np.array([int(first >= self.max_slots)] * 2, np.int64)
        self.affine: Affine | None = None  # (numeric pairs) whether c = a + b q holds so far

    @property
    def dead(self) -> bool:
        """A value was seen with two partners: not one-to-one."""
        return bool(self.flags[0])

    @property
    def repeats(self) -> bool:
        """A (kept) value was seen on two rows."""
        return bool(self.flags[1] or self.flags[2])

    def add(self, kc: np.ndarray, kq: np.ndarray) -> None:
        i = 0
        while True:
            i = pair_rows(kc, kq, i, self.tabs[0], self.tabs[1], self.limits, self.used, self.flags, self.at_max)
            if i >= kc.shape[0]:
                return
            for d in range(2):  # a full table that may grow: doubled
                tab = self.tabs[d]
                if self.used[d] >= tab.shape[0] // 2 and not self.at_max[d]:
                    new = np.zeros((2 * tab.shape[0], 2), np.uint64)
                    self.used[d] = regrow(tab, new)
                    self.tabs[d] = new
                    self.at_max[d] = int(new.shape[0] >= self.max_slots)

    def leaks(self, varied: bool) -> bool:
        """One-to-one, of a QI of several values, and not two row-unique columns (but
        for an exact affine relation)."""
        if self.dead or not varied:
            return False
        return self.repeats or (self.affine is not None and self.affine.ok and self.affine.b is not None)


class Affine:
    """Whether ``c = a + b * q`` holds on every row so far (``a``, ``b`` from the first
    two rows of different q), fed float64 chunks (a null or NaN on one side only: not
    affine; on both sides: consistent, left out). ``bad``: the first row (0-based) where it fails."""

    def __init__(self):
        self.q1 = self.c1 = None
        self.a = self.b = None
        self.ok = True
        self.bad: int | None = None

    def _fail(self, row: int) -> None:
        self.ok, self.bad = False, int(row)

    def add(self, q: np.ndarray, c: np.ndarray, offset: int) -> None:
        if not self.ok or q.shape[0] == 0:
            return
        both = ~np.isfinite(q) & ~np.isfinite(c)  # missing in both: consistent (left out)
        if both.any():
            at = np.flatnonzero(~both)
            q, c = q[at], c[at]
            if not q.shape[0]:
                return
            self._add(q, c, offset, at)
        else:
            self._add(q, c, offset, None)

    def _fail_at(self, j: int, offset: int, at) -> None:
        self._fail(offset + (int(at[j]) if at is not None else j))

    def _add(self, q: np.ndarray, c: np.ndarray, offset: int, at) -> None:
        """``q``, ``c`` without the rows missing in both (``at``: the rows kept, or None)."""
        bad = ~(np.isfinite(q) & np.isfinite(c))
        start = 0
        if self.q1 is None:
            if bad[0]:
                return self._fail_at(0, offset, at)
            self.q1, self.c1 = float(q[0]), float(c[0])
        if self.b is None:
            other = np.flatnonzero(q != self.q1)
            upto = int(other[0]) if other.size else q.shape[0]
            off = bad[:upto] | (c[:upto] != self.c1)
            if off.any():
                return self._fail_at(int(np.argmax(off)), offset, at)
            if not other.size:
                return
            if bad[upto]:
                return self._fail_at(upto, offset, at)
            self.b = (float(c[upto]) - self.c1) / (float(q[upto]) - self.q1)
            self.a = self.c1 - self.b * self.q1
            start = upto
        qs, cs = q[start:], c[start:]
        with np.errstate(invalid="ignore", over="ignore"):
            pred = self.a + self.b * qs
            bound = AFFINE_TOLERANCE * (np.abs(cs) + abs(self.a) + np.abs(self.b * qs))
            off = bad[start:] | ~(np.abs(cs - pred) <= bound)
        if off.any():
            self._fail_at(start + int(np.argmax(off)), offset, at)


def as_numbers(s: pl.Series) -> np.ndarray:
    """A column as float64 (dates on their epoch value; a text that is not a number, and a
    null: NaN)."""
    if s.dtype.is_temporal():
        s = s.to_physical()
    if s.dtype == pl.Boolean or s.dtype.is_nested() or s.dtype in (pl.Binary, pl.Object):
        return np.full(s.len(), np.nan)
    return s.cast(pl.Float64, strict=False).fill_null(float("nan")).to_numpy()


# --- derived columns ------------------------------------------------------------------


@dataclass
class Derived:
    """One derived column: its published value from its QI's published value: ``a + b *
    q`` (Float64), or the map ``keys`` -> ``values`` (the column's type) of the QI's text."""

    column: str
    qi: str
    affine: bool
    a: float = 0.0
    b: float = 0.0
    keys: list = field(default_factory=list)
    values: list = field(default_factory=list)
    dtype: object = None
    null: tuple | None = None  # (the value of a null QI,) when the QI has nulls

    def published(self, q: pl.Series) -> pl.Series:
        if self.affine:
            x = as_numbers(q)
            y = self.a + self.b * x if self.b != 0.0 else np.where(np.isnan(x), np.nan, self.a)
            return pl.Series(self.column, y, dtype=pl.Float64).fill_nan(None)  # (a missing QI: missing)
        text = q.cast(pl.String)
        out = text.replace_strict(self.keys, self.values, return_dtype=self.dtype)  # (a missing key: an error)
        if self.null is not None and text.null_count():
            out = pl.select(pl.when(text.is_null()).then(pl.lit(self.null[0], dtype=self.dtype))
                            .otherwise(out)).to_series()
        return out.alias(self.column)


@dataclass
class Derive:
    """The derived columns of a run (``--derived``): the write pass's last step on each
    frame (``apply``, on the frame's published QI values)."""

    items: list

    @property
    def columns(self) -> list[str]:
        return [d.column for d in self.items]

    def apply(self, frame: pl.DataFrame) -> pl.DataFrame:
        return frame.with_columns(d.published(frame.get_column(d.qi)) for d in self.items)


@dataclass
class DerivedGroups(Groups):
    """A centroid run's groups with its derived columns (``attach``): what the write pass
    publishes, handed on through the flow's write hook unchanged."""

    derive: Derive | None = None


def attach(groups, derive: Derive | None):
    """``groups`` (``passes.stitch.Groups``) carrying ``derive`` to the write pass."""
    if derive is None:
        return groups
    return DerivedGroups(**{f.name: getattr(groups, f.name) for f in dataclasses.fields(Groups)}, derive=derive)


class _Learner:
    """A derived column's relation to its QI, learnt over every row: the map QI text ->
    value (a QI published as a category), or the affine relation (one published as a mean)."""

    def __init__(self, column: str, qi: str, affine: bool, dtype):
        self.column, self.qi, self.affine, self.dtype = column, qi, affine, dtype
        self.line = Affine() if affine else None
        self.map: dict = {}
        self.first_row: dict = {}
        self.tab = np.zeros((FIRST_SLOTS, 2), np.uint64)  # (QI key, column key) of the first row of each QI value
        self.used = np.zeros(1, np.int64)

    def add(self, frame: pl.DataFrame, offset: int) -> None:
        c, q = self.column, self.qi
        if self.affine:
            self.line.add(as_numbers(frame.get_column(q)), as_numbers(frame.get_column(c)), offset)
            if not self.line.ok:
                j = self.line.bad - offset
                raise EngineError(
                    f"derived (--derived): column {c!r} is not an exact affine function a + b * {q} of "
                    f"quasi-identifier {q!r}, which is published as its group's mean: row {self.line.bad + 1} has "
                    f"{q}={frame.get_column(q)[j]!r}, {c}={frame.get_column(c)[j]!r}; drop {c!r} or add it to --qi")
            return
        rows = self._novel(frame.get_column(q), frame.get_column(c))
        text = frame.get_column(q).gather(rows).cast(pl.String)
        for i, qv, cv in zip(rows.tolist(), text, frame.get_column(c).gather(rows)):
            if qv not in self.map:
                self.map[qv], self.first_row[qv] = cv, offset + i
            elif not _same(self.map[qv], cv):
                raise EngineError(
                    f"derived (--derived): column {c!r} is not a function of quasi-identifier {q!r}: row "
                    f"{offset + i + 1} has {q}={qv!r}, {c}={cv!r}, row {self.first_row[qv] + 1} {c}="
                    f"{self.map[qv]!r}; drop {c!r} or add it to --qi")

    def _novel(self, q: pl.Series, c: pl.Series) -> np.ndarray:
        """The rows (in order) of a QI value not seen before, or seen with another value of
        the column (``kernels.leak.novel_rows`` on the values' keys): the only rows that can
        add to the map or break it; the others repeat a pair already learnt (but for a
        64-bit collision of keys, ``value_keys``)."""
        n = q.len()
        if 2 * (int(self.used[0]) + n) > self.tab.shape[0]:
            slots = 1 << (2 * (int(self.used[0]) + n)).bit_length()
            new = np.zeros((slots, 2), np.uint64)
            regrow(self.tab, new)
            self.tab = new
        out = np.empty(n, np.int64)
        return out[:novel_rows(value_keys(q), value_keys(c), self.tab, self.used, out)]

    def derived(self) -> Derived:
        if self.affine:
            line = self.line
            return Derived(self.column, self.qi, True, line.c1 if line.b is None else line.a,
                           0.0 if line.b is None else line.b)
        keys = [k for k in self.map if k is not None]
        return Derived(self.column, self.qi, False, keys=keys, values=[self.map[k] for k in keys], dtype=self.dtype,
                       null=(self.map[None],) if None in self.map else None)


def _same(a, b) -> bool:
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


# --- the pass -------------------------------------------------------------------------


class _Reader:
    """The columns still needed, chunk by chunk from the row after the last one read: the
    iteration is restarted on fewer columns when they fall to half those read (the rows
    already read are skipped)."""

    def __init__(self, source, columns, chunk_rows):
        self.source, self.chunk_rows = source, chunk_rows
        self.done = 0
        self._open(columns)

    def _open(self, columns):
        self.columns = list(columns)
        # (Polars' own Parquet reader: the first chunks are every column, texts among them,
        # which it decodes at a fraction of pyarrow's cost)
        self._it = self.source.iter_frames(self.columns, self.chunk_rows, native=True)

    def narrow(self, columns) -> None:
        if columns and len(columns) <= len(self.columns) // 2:
            close = getattr(self._it, "close", None)
            if close is not None:
                close()
            self._open(columns)

    def next(self):
        for offset, frame in self._it:
            end = offset + frame.height
            if end <= self.done:
                continue
            if offset < self.done:
                frame, offset = frame.slice(self.done - offset), self.done
            self.done = end
            return offset, frame
        return None


def _learners(schema, label, cfg, ordinal) -> list:
    """The derived columns' learners (``--derived``), their types checked."""
    learners = []
    for c, q in dict(cfg.derived or ()).items():
        if c not in schema:
            raise EngineError(f"derived (--derived): column {c!r} not found in {label}")
        dt = schema[c]
        if dt.is_nested() or dt in (pl.Binary, pl.Object):
            raise EngineError(f"derived (--derived): column {c!r} is {dt}: a derived column holds numbers, "
                              f"dates, texts, categories or Booleans")
    for c, q in dict(cfg.derived or ()).items():
        mean = kind_of(q, schema[q], q in ordinal) in ("numeric", "date")
        if mean and not (is_number(schema[c]) or schema[c] == pl.String):
            raise EngineError(f"derived (--derived): column {c!r} is {schema[c]}, not numbers: quasi-identifier "
                              f"{q!r} is published as its group's mean, and {c!r} can follow it only as a + b * {q}; "
                              f"drop {c!r} or add it to --qi")
        learners.append(_Learner(c, q, mean, schema[c]))
    return learners


def _dependence(schema, cfg, qi, others, row_order: bool = True) -> Dependence:
    """The tests beyond one-to-one (``passes.dependence``) of the columns ``others``: not
    the strata (published by design: the baseline); the columns constant within each
    household or person (``--household-column``, ``--person-column``) judged per entity in
    the dependency test (its household-level QIs are published identically for its members)."""
    strata = [c for c in strata_columns(cfg) if c in schema]
    household = getattr(cfg, "household_column", None)

    def numeric(c):  # (a text: a CSV's pass-through column as read, tested where it holds numbers)
        return is_number(schema[c]) or is_temporal(schema[c]) or schema[c] == pl.String

    units = [c for c in (household, getattr(cfg, "person_column", None)) if c and c in schema]
    return Dependence([c for c in others if c not in set(strata)], qi, strata, value_keys, as_numbers,
                      lambda c: numeric(c) and (c not in qi or schema[c] != pl.String), units=units,
                      row_order=row_order, row_unit=units[0] if units else None)


def guard(source, cfg, rows: int, chunk_rows: int, progress: bool = False, checks: list | None = None,
          row_order: bool = True) -> Derive | None:
    """Refuse a pass-through column that publishes a QI: one-to-one with it, or
    determining it, following its order or ordered in its blocks (``passes.dependence``);
    one line: both columns, what was found and the ways out. Learn the derived columns'
    relations (``--derived``). Returns the derived columns' ``Derive`` for the write
    pass, or None. ``checks`` (a list): the checks run and passed appended, one dict a
    (column, QI, check) (the report's ``leak_checks``)."""
    base = source.base
    schema, label = base.schema, base.label
    cols = base.columns
    qi = [c for c in cfg.qi if c in schema]
    derived = dict(cfg.derived or ())
    ordinal = {c for c, _, _ in cfg.ordinal or ()}
    learners = _learners(schema, label, cfg, ordinal)
    others = [c for c in cols if c not in set(qi) and c not in derived]
    slots = table_slots(len(others) * len(qi), cfg.memory_limit)
    pairs = []
    for c in others:
        for q in qi:
            p = PairTest(c, q, slots)
            if ((is_number(schema[c]) or is_temporal(schema[c]) or schema[c] == pl.String)
                    and (is_number(schema[q]) or is_temporal(schema[q]))):  # (dates: on their epoch value)
                p.affine = Affine()
            pairs.append(p)
    deps = _dependence(schema, cfg, qi, others, row_order)
    first: dict = {}
    varied = {q: False for q in qi}

    def needed():
        need = {c for p in pairs for c in (p.column, p.qi)} | deps.needed()
        need |= {c for d in learners for c in (d.column, d.qi)}
        return [c for c in cols if c in need]

    if not pairs and not learners and deps.done:
        return None
    reader = _Reader(base, needed(), chunk_rows)
    alive = {(p.column, p.qi): p for p in pairs}  # (every pair: --derived offered while one-to-one)
    with Progress("leak", rows, progress) as bar:
        while True:
            got = reader.next()
            if got is None:
                break
            offset, frame = got
            for d in learners:
                d.add(frame, offset)
            keys = {c: value_keys(frame.get_column(c)) for c in
                    {x for p in pairs for x in (p.column, p.qi)} | deps.keyed()}
            for q in {p.qi for p in pairs}:
                k = keys[q]
                if k.shape[0] and q not in first:
                    first[q] = k[0]
                varied[q] = varied[q] or bool(k.shape[0] and (k != first[q]).any())
            for p in pairs:
                p.add(keys[p.column], keys[p.qi])
                if not p.dead and p.affine is not None and p.affine.ok:  # (the exception, and the message)
                    p.affine.add(as_numbers(frame.get_column(p.qi)), as_numbers(frame.get_column(p.column)), offset)
            pairs = [p for p in pairs if not p.dead]  # not one-to-one: done
            deps.add(frame, offset, keys)
            bar.update(reader.done)
            if not pairs and (not learners or deps.found is not None) and deps.done:
                break  # (a pair still one-to-one reads on: its message is the more exact one)
            reader.narrow(needed())
    for p in pairs:
        if p.leaks(varied[p.qi]):
            raise EngineError(leak_message(p.column, p.qi, cfg, _derivable(p, schema, cfg, ordinal)))
    if deps.found is None:
        deps.judge(final=True)
    if checks is not None:
        checks += [{"column": c, "qi": q, "check": "one-to-one", "result": "passed"} for c, q in alive]
        checks += deps.log
    if deps.found is not None and deps.found[1] is None:  # (the row order)
        kind, _, q, stats = deps.found
        raise EngineError(row_order_message(kind, stats, q, deps.strata, deps.row.unit))
    if deps.found is not None:
        kind, c, q, stats = deps.found
        p = alive[(c, q)]
        raise EngineError(leak_message(c, q, cfg, not p.dead and _derivable(p, schema, cfg, ordinal),
                                       found=describe(kind, stats, deps.strata, q, deps.found_unit),
                                       household=kind == "dependency" and stats[4] <= HOUSEHOLD_ROWS))
    return Derive([d.derived() for d in learners]) if learners else None


def _derivable(p: PairTest, schema, cfg, ordinal) -> bool:
    """Whether ``--derived`` is a way out for the pair: the column can follow the QI's
    published value, a category's (any column), or a mean's by an exact affine relation."""
    mean = cfg.spec.centroids and kind_of(p.qi, schema[p.qi], p.qi in ordinal) in ("numeric", "date")
    return bool(cfg.spec.centroids and (not mean or (p.affine is not None and p.affine.ok)))


def leak_message(column: str, qi: str, cfg, derivable: bool = True, found: str | None = None,
                 household: bool = False) -> str:
    """The one-line refusal of a pass-through ``column`` that publishes ``qi`` (``derivable``:
    ``--derived`` is offered as a way out; ``found``: what a test beyond one-to-one found;
    ``household``: a column of small repeated cells without ``--household-column``, which
    is offered)."""
    what = found if found else f"corresponds one-to-one with quasi-identifier {qi!r}"
    if column == getattr(cfg, "sa", None):
        return (f"sensitive attribute {column!r} {what} and would publish it unaggregated: drop {qi!r} from --qi "
                f"or choose another sensitive attribute")
    ways = f"add it to --qi, drop it (--drop {column}), or declare it derived (--derived {column}={qi})" \
        if derivable else f"add it to --qi or drop it (--drop {column})"
    roles = {getattr(cfg, "household_column", None), getattr(cfg, "person_column", None)} - {None}
    if household and not roles and cfg.spec.centroids:
        ways += f" (an id of households, or of persons with several records: --household-column {column} or " \
                f"--person-column {column} groups the release by it)"
    elif column in roles and found and "ordered in blocks" in found:
        ways += f" (ids numbered in blocks of {qi!r}, as serials by state: renumber them at random before the run)"
    return f"column {column!r} {what} and would publish it unaggregated: {ways}"
