"""Leaks beyond one-to-one copies: a pass-through column that determines a QI's original
value (the leak guard's second half: ``engine.passes.leak``).

A column C passed through beside a QI Q is refused when it gives back Q's original value
better than what is published anyway. Three measures, each on its own bounded state:

**Functional dependency** (``FDTest``, many-to-one as well as one-to-one): the rows are
put in *cells* by (the strata columns, C) (a household id; a county code within its
state). Among the rows of cells holding at least 2 rows, the share whose Q value is the
cell's most frequent one (the *rate*) is compared with the same share for cells keyed by
the strata alone, over the same rows (the *baseline*: what is known without C). Refused
when the rate is at least ``FD_RATE`` and removes at least ``GAIN`` of what the baseline
leaves undetermined (``rate >= base + GAIN * (1 - base)``: a QI of one frequent value
needs a near-perfect dependency). A column whose rows are nearly all in cells of one row
(a random id, a continuous value) gives no evidence (``MIN_EVIDENCE_SHARE``,
``MIN_EVIDENCE_ROWS``): it is left to the order tests. Memory: the distinct (cell, Q
value) pairs and their counts, at most ``FD_KEEP`` a pair; above, only the cells whose
key is at most a limit, halved as needed (every row of a kept cell: the rate is exact on
the kept cells). They are counted in a kernel's open-addressing table
(``kernels.leak.fd_rows``: at most ``2 * FD_KEEP`` slots of 32 bytes, 4 MiB a test,
dropped when the test is decided) and the figures taken from it at a verdict only
(``kernels.leak.fd_figures``: the counts ``fd_stats`` takes with Polars). With
``--household-column`` or ``--person-column`` (``Units``), a column
constant within every entity so far (the id, a household weight, a person's repeated
weight) is judged on one row per entity instead (``EntityFD``): its values are published
alike for the entity's records, so a column unique per household gives no evidence.

**Ranks** (``rank_test``, a numeric or date C and Q): on a row sample (``RowSample``: at
most ``SAMPLE_ROWS`` rows, chosen by a hash of the row number, so the same whatever the
chunking), the ranks of C and Q (ties averaged, over the rows where both are present):
Spearman's |rho| at least ``RANK_RHO``, or the two ranks within ``RANK_BAND`` of the
sample of each other on at least ``RANK_SHARE`` of its rows (either direction). A
monotone transform (log, square root, a Float32 copy, age in months, birth year with a
few missing values), a fine band code or a near-copy (a few values edited, rounded or
missing) meets one of them; a survey weight or a loosely related column meets neither.
A Q with fewer than ``MIN_RANK_VALUES`` distinct values in the sample is left to the
dependency test (ranks of a few values say little).

**Order** (``order_test``, any C of many values): the sample's rows, one per C value,
sorted by C: the share of neighbours with the same Q value, against the share by chance
(the sum of Q's squared frequencies). Ids issued in blocks of a QI (household serials in
state blocks) have neighbours of one state; refused as the dependency (``ORDER_SHARE``,
``GAIN``).

**Row order** (``RowOrder``, every QI): the release keeps the input's row order (record
i of the release is record i of the input), so the order is a published column. Along
it, the share of neighbouring units (rows; with ``--household-column`` or
``--person-column``, one row per household or person: consecutive entities) within one
stratum that share the QI's value, against chance within strata, refused as the order
test (and ``ORDER_Z`` standard errors above chance); and for a numeric or date QI, the
row position's rank against the QI's within each stratum (``rank_verdict``: a file
sorted by age gives every age rank back). An input sorted by a stratum passes. The
ways out: shuffle the rows, or publish a block QI as a stratum. A grouping run on an
entity table (``engine.entities``) leaves it out (``row_order``): its order is not published.

**When decided.** The guard reads until each pair is decided: a pair is cleared as soon
as its evidence is enough and clearly below the thresholds (``decided``), and refused as
soon as it meets them; on the census-like tables every pair is decided within the first
chunk, but for the rank tests of a QI with fewer than ``MIN_RANK_VALUES`` values in the
sample (household size), which read on, with their own columns only (``needed``),
until the sample holds ten values or the input ends (2,097,152 rows of the 10M
census-like table). The verdicts are taken at fixed row counts of the input
(``verdict_rows``: 1,024, 2,048, ... 65,536, then each 65,536 more, ``DECIDE_ROWS``,
and at its end), not at a chunk's end, so they and the figures of the checks passed
(the report's ``leak_checks``) are the same whatever ``--chunk-rows``, the threads or
the memory limit. A table whose first rows are unrepresentative (sorted by the QI: the QI of one
value so far) reads on. What this gives up: a column that is a dependency only on rows
far from the first ones read (non-stationary data), and a household id whose members'
rows lie far apart (census files keep them together), can be cleared early.

The thresholds' rationale (docs/guarantees.md, "The leak guard"): 0.95 is the rate above
which a column gives the original value back for almost every record while a typical
k-anonymous release changes a QI's value for more than 5 % of rows; 0.99 Spearman and
95 % of ranks within 1 % are met by every monotone transform and by copies with up to a
few percent edited, and by no column of the project's tables that is not a copy or a
transform of a QI (the false-alarm counts: benchmarks/bench_leak.py).
"""

from __future__ import annotations

import math

import numpy as np
import polars as pl

from ..kernels.leak import fd_figures, fd_regrow, fd_rows, mix_keys

FD_RATE = 0.95            # a column gives the QI's most frequent value of its cell on at least this share of rows
GAIN = 0.5                # ... removing at least this share of what the baseline leaves undetermined
MIN_EVIDENCE_ROWS = 30    # rows in cells of 2 rows or more, at least (fewer: no evidence)
MIN_EVIDENCE_SHARE = 0.6  # ... and this share of the kept rows (fewer: a weight's or a continuous value's ties)
NO_EVIDENCE_SHARE = 0.02  # repeated rows below this share after DECIDE_ROWS rows: a row-unique column, cleared
DECIDE_EVIDENCE = 1_000   # evidence rows from which a rate clearly below FD_RATE clears the pair
CLEAR_RATE = 0.9          # ... "clearly below"
DECIDE_ROWS = 200_000     # rows read from which a column still without evidence is cleared
FD_KEEP = 1 << 16         # distinct (cell, QI value) pairs a pair keeps; above, sampled by the cell's key
FD_FIRST = 1 << 8         # a dependency table's first slots (doubled as it fills, up to 2 * FD_KEEP)
SAMPLE_ROWS = 1 << 15     # the row sample of the rank and order tests
RANK_RHO = 0.99           # |Spearman's rho| at least this: a monotone transform
RANK_BAND = 0.01          # two ranks within this share of the sample ...
RANK_SHARE = 0.95         # ... on at least this share of its rows: a near-copy
MIN_RANK_ROWS = 200       # rows with both values present, at least
DECIDE_RANK_ROWS = 1_000  # rows from which a pair below the thresholds is cleared
MIN_RANK_VALUES = 10      # distinct QI values in the sample, at least (fewer: left to the dependency test)
ORDER_SHARE = 0.9         # neighbours in the column's order sharing the QI value, at least
MIN_ORDER_VALUES = 100    # distinct column values in the sample, at least
DECIDE_ORDER_PAIRS = 500  # the row order: neighbour pairs from which a QI clearly not in blocks is cleared
ORDER_Z = 4.0             # the row order: neighbours alike above chance by at least this many standard errors
_U64MAX = np.iinfo(np.uint64).max


def row_keys(offset: int, n: int) -> np.ndarray:
    """A uint64 key of each row number ``offset .. offset + n - 1`` (uniform bits)."""
    out = np.empty(n, np.uint64)
    mix_keys(np.arange(offset, offset + n, dtype=np.uint64), out)
    return out


def cell_keys(*keys: np.ndarray) -> np.ndarray:
    """One key per row of the tuple of value keys ``keys`` (order matters)."""
    h = keys[0]
    for k in keys[1:]:
        with np.errstate(over="ignore"):
            h = h * np.uint64(0x9E3779B97F4A7C15) + k
    out = np.empty(h.shape[0], np.uint64)
    mix_keys(np.ascontiguousarray(h, dtype=np.uint64), out)
    return out


class FDTest:
    """Whether column ``column`` (with the strata) determines QI ``qi``, fed each chunk's
    cell keys (strata + column), strata keys and QI keys."""

    def __init__(self, column: str, qi: str):
        self.column, self.qi = column, qi
        self.slots = np.zeros((FD_FIRST, 4), np.uint64)  # (cell, stratum, QI key, rows): kernels.leak.fd_rows
        self.state = np.array([_U64MAX, 0], np.uint64)  # (the limit, the triples held)
        self._stats = (0, 0.0, 0.0, 0, 0.0)  # (evidence rows, rate, baseline, kept rows, mean cell rows)
        self._stale = False

    @property
    def stats(self) -> tuple:
        """``fd_stats`` of the rows so far (``kernels.leak.fd_figures``: the same counts,
        so the same figures), computed when asked (at a verdict, not each slice)."""
        if self._stale:
            e, top, base, kept, cells = fd_figures(self.slots)
            self._stats = (e, top / e, base / e, kept, e / cells) if e else (0, 0.0, 0.0, kept, 0.0)
            self._stale = False
        return self._stats

    @stats.setter
    def stats(self, value: tuple) -> None:
        self._stats, self._stale = value, False

    def add(self, cell: np.ndarray, stratum: np.ndarray, q: np.ndarray) -> None:
        """The rows' triples counted (``kernels.leak.fd_rows``: the rows of the cells at most
        the limit, halved while more than ``FD_KEEP`` triples are held: the same table
        whatever the rows' cut into slices)."""
        i = 0
        while True:
            i = fd_rows(cell, stratum, q, i, self.slots, self.state, FD_KEEP, 2 * FD_KEEP)
            if i >= cell.shape[0]:
                break
            new = np.zeros((2 * self.slots.shape[0], 4), np.uint64)
            fd_regrow(self.slots, new, self.state[0])
            self.slots = new
        self._stale = True

    def verdict(self) -> str | None:
        """"leak" (the thresholds met), "clear" (enough evidence, clearly not), or None (read on)."""
        e, rate, base, kept, _ = self.stats
        if fd_leaks(e, rate, base, kept):
            return "leak"
        if e >= DECIDE_EVIDENCE and (rate < CLEAR_RATE or (base < 0.99 and 1.0 - rate > 0.75 * (1.0 - base))):
            return "clear"  # (clearly below, or a QI of a frequent value the column hardly improves on)
        return None


def fd_stats(tab: pl.DataFrame) -> tuple:
    """``(evidence rows, rate, baseline rate, kept rows, mean rows of a repeated cell)`` of a
    table of (cell ``c``, stratum ``s``, QI value ``q``, rows ``n``)."""
    if tab.height == 0:
        return (0, 0.0, 0.0, 0, 0.0)
    cells = tab.group_by("c").agg(pl.col("n").sum().alias("rows"), pl.col("n").max().alias("top"))
    kept = int(cells.get_column("rows").sum())
    multi = cells.filter(pl.col("rows") >= 2)
    e = int(multi.get_column("rows").sum()) if multi.height else 0
    if not e:
        return (0, 0.0, 0.0, kept, 0.0)
    rate = float(multi.get_column("top").sum()) / e
    base = tab.join(multi.select("c"), on="c").group_by("s", "q").agg(pl.col("n").sum()).group_by("s").agg(
        pl.col("n").max().alias("top"))
    return (e, rate, float(base.get_column("top").sum()) / e, kept, e / multi.height)


def fd_leaks(e: int, rate: float, base: float, kept: int) -> bool:
    """The dependency test's thresholds (the module docstring)."""
    return (e >= MIN_EVIDENCE_ROWS and e >= MIN_EVIDENCE_SHARE * kept and rate >= FD_RATE
            and rate > base and rate >= base + GAIN * (1.0 - base))


class RowSample:
    """At most ``SAMPLE_ROWS`` rows of some columns, those whose row key (``row_keys``) is at
    most a limit, halved as needed: the same rows whatever the chunking."""

    def __init__(self, columns):
        self.columns = list(columns)
        self.limit = _U64MAX
        self.frame: pl.DataFrame | None = None

    def kept(self, offset: int, n: int) -> tuple:
        """The rows (0-based) of the input's rows ``offset .. offset + n - 1`` whose key is at
        most the limit, and their keys: the only ones ``take`` may keep."""
        rk = row_keys(offset, n)
        at = np.flatnonzero(rk <= self.limit)
        return at, rk[at]

    def add(self, frame: pl.DataFrame, offset: int) -> None:
        if not self.columns:
            return
        at, keys = self.kept(offset, frame.height)
        self.take(frame.select([c for c in self.columns if c in frame.columns])[at], keys)

    def take(self, part: pl.DataFrame, keys: np.ndarray) -> None:
        """The rows ``part`` of a slice (those ``kept``, their keys ``keys``) into the sample."""
        if any(c not in part.columns for c in self.columns):  # (the reader narrowed to the pairs still tested)
            self.columns = [c for c in self.columns if c in part.columns]
            if self.frame is not None:
                self.frame = self.frame.select(*self.columns, "__row")
        part = part.select(self.columns).with_columns(pl.Series("__row", keys))
        got = part if self.frame is None else pl.concat([self.frame, part], how="vertical_relaxed")
        while got.height > SAMPLE_ROWS:
            self.limit >>= np.uint64(1)
            got = got.filter(pl.col("__row") <= self.limit)
        self.frame = got


def _ranks(x: np.ndarray) -> np.ndarray:
    """Average ranks of ``x`` (ties share their mean rank), over ``len(x)``, in (0, 1]."""
    return pl.Series(x).rank("average").to_numpy().astype(np.float64) / max(x.shape[0], 1)


def rank_stats(c: np.ndarray, q: np.ndarray) -> tuple:
    """``(rows, |rho|, share of rows with ranks within RANK_BAND, QI values)`` of two float
    columns (NaN: missing, left out)."""
    ok = np.isfinite(c) & np.isfinite(q)
    c, q = c[ok], q[ok]
    n = int(c.shape[0])
    values = int(np.unique(q).shape[0]) if n else 0
    if n < 2 or values < 2 or np.all(c == c[0]):
        return (n, 0.0, 0.0, values)
    rc, rq = _ranks(c), _ranks(q)
    rho = float(np.corrcoef(rc, rq)[0, 1])
    up = float(np.mean(np.abs(rc - rq) <= RANK_BAND))
    down = float(np.mean(np.abs((1.0 + 1.0 / n - rc) - rq) <= RANK_BAND))
    return (n, abs(rho) if np.isfinite(rho) else 0.0, max(up, down), values)


def rank_verdict(stats: tuple, final: bool) -> str | None:
    n, rho, band, values = stats
    if n >= MIN_RANK_ROWS and values >= MIN_RANK_VALUES and (rho >= RANK_RHO or band >= RANK_SHARE):
        return "leak"
    if final or (n >= DECIDE_RANK_ROWS and values >= MIN_RANK_VALUES):
        return "clear"
    return None


def order_stats(c: pl.Series, qk: np.ndarray) -> tuple:
    """``(column values, neighbour share, chance share)``: one row per value of ``c`` (its
    first), sorted by ``c`` (nulls left out); the share of neighbours whose QI keys ``qk``
    are equal, and the sum of the QI values' squared frequencies over those rows."""
    if c.dtype == pl.String:  # (a CSV's pass-through text: in numeric order when it holds numbers)
        x = c.cast(pl.Float64, strict=False)
        if x.null_count() == c.null_count():
            c = x
    f = pl.DataFrame({"c": c, "q": qk}).drop_nulls("c")
    if f.get_column("c").dtype.is_float():
        f = f.filter(pl.col("c").is_not_nan())
    f = f.unique("c", keep="first", maintain_order=True)
    m = f.height
    if m < 3:
        return (m, 0.0, 1.0)
    try:
        f = f.sort("c")
    except Exception:  # (a type without an order: none tested)
        return (0, 0.0, 1.0)
    q = f.get_column("q").to_numpy()
    same = float(np.mean(q[1:] == q[:-1]))
    # (the counts sorted: Polars' groups come in any order, and the sum's last bit with them)
    p = np.sort(f.get_column("q").value_counts().get_column("count").to_numpy()) / m
    return (m, same, float((p * p).sum()))


def order_verdict(stats: tuple, final: bool) -> str | None:
    m, same, chance = stats
    if m >= MIN_ORDER_VALUES and same >= ORDER_SHARE and same >= chance + GAIN * (1.0 - chance) and chance < 1.0:
        return "leak"
    if final or (m >= MIN_ORDER_VALUES and chance < 0.9):  # (0.9 and above: a QI of one value so far, read on)
        return "clear"
    return None


class EntityFD(FDTest):
    """``FDTest`` with one row per entity (``--household-column``, ``--person-column``): the
    distinct (cell, stratum, entity) triples, each with the QI value of its first row;
    ``varies``: an entity seen with two values of the column (then judged on rows)."""

    varies = False

    def __init__(self, column: str, qi: str):
        super().__init__(column, qi)
        self.slots = None  # (a table of its own: one row per entity)
        self.limit = _U64MAX
        self.tab: pl.DataFrame | None = None

    def add(self, cell: np.ndarray, stratum: np.ndarray, q: np.ndarray, entity: np.ndarray = None) -> None:
        keep = cell <= self.limit
        part = pl.DataFrame({"c": cell[keep], "s": stratum[keep], "e": entity[keep], "q": q[keep]})
        tab = part if self.tab is None else pl.concat([self.tab, part])
        tab = tab.unique(["c", "s", "e"], keep="first", maintain_order=True)
        while tab.height > FD_KEEP:
            self.limit >>= np.uint64(1)
            tab = tab.filter(pl.col("c") <= self.limit)
        self.tab = tab
        self.varies = self.varies or bool(tab.height and tab.get_column("e").n_unique() < tab.height)
        self.stats = fd_stats(tab.group_by("c", "s", "q").agg(pl.len().cast(pl.UInt64).alias("n")))


class Units:
    """The dependency tests per entity of one entity column: a column constant within
    every entity (a household weight, another household id, the entity column itself)
    is judged on one row per entity (``EntityFD``), as its values are published alike for
    the entity's records: a column unique per household gives no evidence, as a random
    id at person level."""

    def __init__(self, column: str, columns, qi):
        self.column = column
        self.tests = {(c, q): EntityFD(c, q) for c in columns for q in qi}

    def add(self, sl: dict, cells: dict, stratum: np.ndarray, pending: set) -> None:
        e = sl[self.column]
        for (c, q), t in self.tests.items():
            if (c, q) in pending and c in cells and not t.varies:
                t.add(cells[c], stratum, sl[q], e)


class RowOrder:
    """The input's row order against each QI (the release keeps it: record i of the release
    is record i of the input, so the order is a published column). Fed each chunk's
    stratum keys, entity keys (the unit the release publishes: consecutive households or
    persons with ``--household-column`` / ``--person-column``, else rows) and QI keys.

    **Blocks**: along the input's order, the share of neighbouring units in one stratum
    (strata are published) that share the QI's value, against chance within strata (per
    neighbour pair, the sum of the QI's squared frequencies in the pair's stratum: counts
    of (stratum, value) per unit, sampled by the value's key above ``FD_KEEP`` pairs and
    scaled back; at most ``FD_KEEP`` strata, else the test is left out). Refused as the
    order test (``ORDER_SHARE``, ``GAIN``), and only when the excess over chance is at
    least ``ORDER_Z`` standard errors (a QI of one frequent value on a small table).
    **Ranks** (a numeric or date QI): on a row sample, the rank of the row's position
    against the QI's within each stratum (``rank_verdict``): a file sorted by age gives
    every record's age rank back."""

    def __init__(self, qi, numeric_qi, unit: str | None):
        self.qi, self.unit = list(qi), unit
        self.blocks = set(self.qi)
        self.ranks = [q for q in self.qi if q in set(numeric_qi)]
        self.prev: tuple | None = None  # (stratum, entity, {QI: key}) of the last unit read
        self.pairs, self.units = 0, 0
        self.same = {q: 0 for q in self.qi}
        self.cells: dict = {q: None for q in self.qi}  # (s, q) -> units, q key <= limit[q]
        self.limit = {q: _U64MAX for q in self.qi}
        self.strata: pl.DataFrame | None = None  # s -> units, pairs
        self.sample = RowSample(["__s", "__pos", *self.ranks])

    @property
    def done(self) -> bool:
        return not (self.blocks or self.ranks)

    def add(self, stratum: np.ndarray, entity: np.ndarray | None, qk: dict, frame: pl.DataFrame, offset: int,
            numbers) -> None:
        """One slice (``frame``: its columns; ``numbers``: a Series as float64, of the rows
        the sample keeps only)."""
        n = stratum.shape[0]
        if self.ranks:
            at, keys = self.sample.kept(offset, n)
            self.sample.take(pl.DataFrame({"__s": stratum[at], "__pos": (offset + at).astype(np.float64),
                                           **{q: numbers(frame.get_column(q)[at]) for q in self.ranks}}), keys)
        if not self.blocks or not n:
            return
        first = np.ones(n, bool)
        if entity is not None:
            first[1:] = entity[1:] != entity[:-1]
            first[0] = self.prev is None or entity[0] != self.prev[1]
        s = stratum[first]
        keys = {q: qk[q][first] for q in self.blocks}
        last = int(np.flatnonzero(first)[-1]) if first.any() else None
        if self.prev is not None and s.shape[0]:
            s_all = np.concatenate([[self.prev[0]], s])
            k_all = {q: np.concatenate([[self.prev[2].get(q, 0)], k]) for q, k in keys.items()}
        else:
            s_all, k_all = s, keys
        alike = s_all[1:] == s_all[:-1]
        self.pairs += int(alike.sum())
        self.units += int(s.shape[0])
        for q, k in k_all.items():
            self.same[q] += int((alike & (k[1:] == k[:-1])).sum())
        part = pl.DataFrame({"s": s_all[1:][alike]}).group_by("s").agg(pl.len().cast(pl.UInt64).alias("pairs"))
        units = pl.DataFrame({"s": s}).group_by("s").agg(pl.len().cast(pl.UInt64).alias("units"))
        part = units.join(part, on="s", how="full", coalesce=True).fill_null(0)
        tab = part if self.strata is None else pl.concat([self.strata, part]).group_by("s").agg(
            pl.col("units").sum(), pl.col("pairs").sum())
        self.strata = tab
        if tab.height > FD_KEEP:  # (strata of a few units each: no chance to compare with)
            self.blocks = set()
            return
        for q, k in keys.items():
            keep = k <= self.limit[q]
            cells = pl.DataFrame({"s": s[keep], "q": k[keep]}).group_by("s", "q").agg(pl.len().cast(pl.UInt64).alias("n"))
            if self.cells[q] is not None:
                cells = pl.concat([self.cells[q], cells]).group_by("s", "q").agg(pl.col("n").sum())
            while cells.height > FD_KEEP:
                self.limit[q] >>= np.uint64(1)
                cells = cells.filter(pl.col("q") <= self.limit[q])
            self.cells[q] = cells
        if last is not None:
            self.prev = (stratum[last], None if entity is None else entity[last], {q: qk[q][last] for q in self.blocks})

    def block_stats(self, q: str) -> tuple:
        """``(neighbour pairs within a stratum, share alike, share by chance)``."""
        if not self.pairs or self.cells[q] is None or self.strata is None:
            return (self.pairs, 0.0, 1.0)
        f = (float(self.limit[q]) + 1.0) / 2.0 ** 64
        sq = self.cells[q].group_by("s").agg((pl.col("n").cast(pl.Float64) ** 2).sum().alias("sq"))
        # (by stratum: the groups come in any order, and the weighted sum's last bit with them)
        t = self.strata.join(sq, on="s", how="left").fill_null(0.0).filter(pl.col("pairs") > 0).sort("s")
        u = t.get_column("units").cast(pl.Float64).to_numpy()
        chance = np.minimum(t.get_column("sq").to_numpy() / f / (u * u), 1.0)
        w = t.get_column("pairs").cast(pl.Float64).to_numpy()
        return (self.pairs, self.same[q] / self.pairs, float((w * chance).sum() / w.sum()))

    def rank_stats(self, q: str) -> tuple:
        """``rank_stats`` of the row position against ``q``, both ranked within each stratum."""
        f = self.sample.frame
        if f is None:
            return (0, 0.0, 0.0, 0)
        f = f.select("__s", "__pos", q).filter(pl.col(q).is_not_nan())
        n = f.height
        values = f.get_column(q).n_unique() if n else 0
        if n < 2 or values < 2:
            return (n, 0.0, 0.0, values)
        by = pl.len().over("__s")
        r = f.select((pl.col("__pos").rank("average").over("__s") / by).alias("p"),
                     (pl.col(q).rank("average").over("__s") / by).alias("q"),
                     (1.0 / by).alias("w"))
        rp, rq, w = (r.get_column(c).to_numpy() for c in ("p", "q", "w"))
        rho = float(np.corrcoef(rp, rq)[0, 1]) if rp.std() > 0 and rq.std() > 0 else 0.0
        up = float(np.mean(np.abs(rp - rq) <= RANK_BAND))
        down = float(np.mean(np.abs((1.0 + w - rp) - rq) <= RANK_BAND))
        return (n, abs(rho) if np.isfinite(rho) else 0.0, max(up, down), values)

    def judge(self, final: bool) -> tuple | None:
        """The first leak ``(kind, QI, stats)``; the QIs decided dropped, their checks logged
        (``log``: the report's)."""
        self.log: list = []
        for q in [x for x in self.qi if x in self.blocks]:
            st = self.block_stats(q)
            v = row_block_verdict(st, final)
            if v == "leak":
                return ("row order", q, st)
            if v is not None:
                self.blocks.discard(q)
                self.log.append({"column": "(row order)", "qi": q, "check": "row order", "result": "passed",
                                 "neighbours": st[0], "neighbours_alike": round(st[1], 4),
                                 "by_chance": round(st[2], 4), **({"per": self.unit} if self.unit else {})})
        ranks = []
        for q in self.ranks:
            st = self.rank_stats(q)
            v = rank_verdict(st, final)
            if v == "leak":
                return ("row ranks", q, st)
            if v is None:
                ranks.append(q)
            else:
                self.log.append({"column": "(row order)", "qi": q, "check": "row ranks", "result": "passed",
                                 "sampled_rows": st[0], "spearman": round(st[1], 4),
                                 "ranks_within_1pc": round(st[2], 4)})
        self.ranks = ranks
        return None


def row_block_verdict(stats: tuple, final: bool) -> str | None:
    """The blocks test of the row order: the order test's thresholds, an excess over chance
    of at least ``ORDER_Z`` standard errors, on at least ``MIN_ORDER_VALUES`` pairs;
    cleared from ``DECIDE_ORDER_PAIRS`` pairs where chance is below 0.9 (else read on: a QI
    of one value so far)."""
    m, same, chance = stats
    margin = ORDER_Z * math.sqrt(max(chance * (1.0 - chance), 1e-12) / max(m, 1))
    if m >= MIN_ORDER_VALUES and same >= ORDER_SHARE and same >= chance + GAIN * (1.0 - chance) \
            and same - chance >= margin and chance < 1.0:
        return "leak"
    if final or (m >= DECIDE_ORDER_PAIRS and chance < 0.9):
        return "clear"
    return None


SLICE_ROWS = 1 << 16  # the dependency tables are fed at most this many rows at a time
FIRST_VERDICT_ROWS = 1 << 10  # the verdicts: at this many rows of the input, each doubling, then each SLICE_ROWS


def verdict_rows(done: int) -> int:
    """The next row count of the input after ``done`` at which the verdicts are taken:
    ``FIRST_VERDICT_ROWS``, doubled up to ``SLICE_ROWS``, then each ``SLICE_ROWS`` more
    (fixed row counts, not where a chunk ends: the same verdicts whatever the chunking);
    ``DECIDE_ROWS`` too (a column without evidence cleared there, the reading stopped)."""
    if done < SLICE_ROWS:
        at = FIRST_VERDICT_ROWS
        while at <= done:
            at <<= 1
        at = min(at, SLICE_ROWS)
    else:
        at = (done // SLICE_ROWS + 1) * SLICE_ROWS
    return DECIDE_ROWS if done < DECIDE_ROWS < at else at


class Dependence:
    """The three tests of every (pass-through column, QI) pair (``guard``'s second half),
    fed chunk by chunk; ``found``: the first leak, ``(kind, column, qi, stats)``.

    ``keys_of``: a Series' value keys (``passes.leak.value_keys``); ``numbers``: a Series
    as float64 (NaN: missing); ``numeric``: whether a column is tested on ranks;
    ``units``: the entity columns (``--household-column``, ``--person-column``) by which
    the columns constant within each entity are judged, one row per entity (``Units``);
    ``row_order``: the input's row order tested against the QIs (``RowOrder``), per unit of
    ``row_unit`` (an entity column) or per row."""

    def __init__(self, columns, qi, strata, keys_of, numbers, numeric, units=(), row_order: bool = False,
                 row_unit: str | None = None):
        self.strata = list(strata)
        self.keys_of, self.numbers = keys_of, numbers
        self.fd = [FDTest(c, q) for c in columns for q in qi]
        self.units = [Units(u, [c for c in dict.fromkeys(columns)], qi) for u in dict.fromkeys(units)]
        self.found_unit: str | None = None  # the entity column of a dependency found per entity
        self.rank = [(c, q) for c in columns for q in qi if numeric(c) and numeric(q)]
        self.order = [(c, q) for c in columns for q in qi]
        self.sample = RowSample([x for x in dict.fromkeys([c for p in self.rank + self.order for c in p])])
        self.rows = self._sampled = 0
        self.row = RowOrder(qi, [q for q in qi if numeric(q)], row_unit) if row_order and qi else None
        self.found: tuple | None = None
        self.log: list = []  # the checks passed: {"column", "qi", "check", "result", figures} (the report's)

    @property
    def done(self) -> bool:
        return self.found is not None or not (self.fd or self.rank or self.order or self.row_pending)

    @property
    def row_pending(self) -> bool:
        return self.row is not None and not self.row.done

    def needed(self) -> set:
        """The columns the tests still pending read: ``keyed`` and the sample's."""
        if self.done:
            return set()
        need = self.keyed() | {c for p in self.rank + self.order for c in p}
        return need | (set(self.row.ranks) | set(self.strata) if self.row_pending else set())

    def keyed(self) -> set:
        """The columns whose value keys ``add`` takes: the dependency tests' (with the strata
        and the entity columns) and the row order's blocks' (a rank test reads numbers from
        the sample: a column tested on ranks alone is read, not hashed)."""
        if self.done:
            return set()
        need = {c for t in self.fd for c in (t.column, t.qi)}
        if self.fd:
            need |= set(self.strata) | {u.column for u in self.units}
        if self.row_pending:
            need |= set(self.strata)
            if self.row.blocks:
                need |= set(self.row.blocks) | ({self.row.unit} if self.row.unit else set())
        return need

    def add(self, frame: pl.DataFrame, offset: int, keys: dict) -> None:
        """One chunk (``keys``: the value keys of its columns), in slices cut at the row
        counts of the input where the verdicts are taken (``verdict_rows``; not at a chunk's
        end: the same rows read at each verdict whatever the chunking, so the same verdicts
        and the same figures in the report's ``leak_checks``; the last taken by ``guard``)."""
        s = 0
        while s < frame.height:
            if self.done:
                return
            at = verdict_rows(offset + s)
            end = min(frame.height, at - offset)
            part = frame.slice(s, end - s)
            sl = {c: k[s:end] for c, k in keys.items()}
            stratum = cell_keys(*[sl[c] for c in self.strata]) if self.strata and (self.fd or self.row_pending) \
                else np.zeros(part.height, np.uint64)
            if self.row_pending:
                self.row.add(stratum, sl[self.row.unit] if self.row.unit and self.row.blocks else None, sl, part,
                             offset + s, self.numbers)
            if self.fd:
                cells: dict = {}
                for t in self.fd:
                    if t.column not in cells:
                        cells[t.column] = cell_keys(*[sl[c] for c in self.strata], sl[t.column])
                    t.add(cells[t.column], stratum, sl[t.qi])
                pending = {(t.column, t.qi) for t in self.fd}
                for u in self.units:
                    u.add(sl, cells, stratum, pending)
            if self.rank or self.order:
                self.sample.add(part, offset + s)
            self.rows += part.height
            if offset + end == at:
                self.judge(final=False)
            s = end

    def judge(self, final: bool) -> None:
        """Take the verdicts: the first leak found; the pairs cleared dropped."""
        fd = []
        varying = {u.column: {c for (c, _), x in u.tests.items() if x.varies} for u in self.units}
        for t in self.fd:
            unit = next((u for u in self.units if t.column not in varying[u.column]), None)  # (judged per entity)
            test = unit.tests[(t.column, t.qi)] if unit is not None else t
            v = test.verdict()
            if v == "leak":
                self.found = ("dependency", t.column, t.qi, test.stats)
                self.found_unit = unit.column if unit is not None else None
                return
            e, rate, base, kept, _ = test.stats
            if v is None and not final and not (self.rows >= DECIDE_ROWS and e < NO_EVIDENCE_SHARE * kept):
                fd.append(t)
            else:
                self.log.append({"column": t.column, "qi": t.qi, "check": "dependency", "result": "passed",
                                 "rows_sharing_a_value": e, "rate": round(rate, 4), "baseline": round(base, 4),
                                 **({"per": unit.column} if unit is not None else {})})
        self.fd = fd
        if not final and self.rows < 2 * self._sampled:  # (the sample's tests again once the rows read double)
            return
        self._sampled = self.rows
        frame = self.sample.frame
        nums: dict = {}
        rank = []
        for c, q in self.rank:
            for x in (c, q):
                if x not in nums and frame is not None:
                    nums[x] = self.numbers(frame.get_column(x))
            st = rank_stats(nums[c], nums[q]) if frame is not None else (0, 0.0, 0.0, 0)
            v = rank_verdict(st, final or (frame is not None and frame.height >= DECIDE_RANK_ROWS
                                           and 2 * st[0] < frame.height))  # (mostly not numbers: cleared)
            if v == "leak":
                self.found = ("ranks", c, q, st)
                return
            if v is None:
                rank.append((c, q))
            else:
                self.log.append({"column": c, "qi": q, "check": "ranks", "result": "passed", "sampled_rows": st[0],
                                 "spearman": round(st[1], 4), "ranks_within_1pc": round(st[2], 4)})
        self.rank = rank
        order = []
        for c, q in self.order:
            st = order_stats(frame.get_column(c), self.keys_of(frame.get_column(q))) if frame is not None \
                else (0, 0.0, 1.0)
            v = order_verdict(st, final or (st[0] < MIN_ORDER_VALUES and self.rows >= DECIDE_RANK_ROWS))
            if v == "leak":
                self.found = ("order", c, q, st)
                return
            if v is None:
                order.append((c, q))
            else:
                self.log.append({"column": c, "qi": q, "check": "order", "result": "passed", "values": st[0],
                                 "neighbours_alike": round(st[1], 4), "by_chance": round(st[2], 4)})
        self.order = order
        if self.row_pending:  # (after the columns' tests: a column's leak is named first)
            found = self.row.judge(final)
            self.log += self.row.log
            if found is not None:
                self.found = (found[0], None, found[1], found[2])


def describe(kind: str, stats: tuple, strata, qi: str, unit: str | None = None) -> str:
    """What a test found of ``qi``, for the refusal ("determines quasi-identifier 'age''s
    original value on 99.8 % of ..."; ``unit``: the entity column a dependency was
    judged by, one row per entity)."""
    if kind == "dependency":
        e, rate, base, _, _ = stats
        within = f" together with the strata ({', '.join(strata)})" if strata else ""
        rows = f"values of {unit!r} (one row each)" if unit else "rows"
        return (f"determines quasi-identifier {qi!r}'s original value{within} on {100 * rate:.1f} % of the {e:,} "
                f"{rows} sharing a value with another (without it: {100 * base:.1f} %)")
    if kind == "ranks":
        n, rho, band, _ = stats
        return (f"follows the order of quasi-identifier {qi!r} (a monotone transform or a near-copy: rank "
                f"correlation {rho:.4f}, ranks within {100 * RANK_BAND:g} % on {100 * band:.1f} % of {n:,} "
                f"sampled rows)")
    m, same, chance = stats
    return (f"is ordered in blocks of quasi-identifier {qi!r} ({100 * same:.1f} % of {m:,} sampled values' "
            f"neighbours in the column's order share its value, {100 * chance:.1f} % by chance)")


def row_order_message(kind: str, stats: tuple, qi: str, strata, unit: str | None = None) -> str:
    """The one-line refusal of an input whose row order gives ``qi`` back (``RowOrder``;
    ``unit``: the entity column whose consecutive values were compared)."""
    within = " within strata" if strata else ""
    if kind == "row ranks":
        n, rho, band, _ = stats
        return (f"the input's rows are sorted by quasi-identifier {qi!r} (row position against {qi}{within}: rank "
                f"correlation {rho:.4f}, ranks within {100 * RANK_BAND:g} % on {100 * band:.1f} % of {n:,} sampled "
                f"rows) and the release keeps the input's row order, so a record's position gives its {qi} back: "
                f"shuffle the rows before the run (docs/usage.md, \"Row order\")")
    m, same, chance = stats
    what = f"neighbouring entities (one row per value of {unit!r})" if unit else "neighbouring rows"
    return (f"the input's rows run in blocks of quasi-identifier {qi!r} ({100 * same:.1f} % of {m:,} {what}"
            f"{within} share its value, {100 * chance:.1f} % by chance) and the release keeps the input's row "
            f"order, so a record's position gives its {qi} back: shuffle the rows before the run (docs/usage.md, "
            f"\"Row order\"), or publish {qi!r} as a stratum (--strata {qi}) if it is not sensitive")
