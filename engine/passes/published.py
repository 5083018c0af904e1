"""The published values in row order, on disk: how a streamed centroid run reaches the
write pass without a row -> group map or a table of centroids in memory.

The aggregate pass's workers already measure each unit's groups (centroid, size,
squared error: ``aggregate.unit_sums``). As ``aggregate_units`` takes the units in
unit order, ``RowRecords.add`` turns each unit's rows into records of ``8 (1 + d)``
bytes (the row id and the global group id in one 64-bit slot, then the group's
published values, the very centroid the write pass would gather) and appends them to
a spill file keyed by the range of rows they belong to (``io.spill.RunFile``:
buffered, one write a buffer). The write pass then reads one range at a time (plain
reads, so nothing of the file stays resident), places each record at its row and
checks that every row of the range comes exactly once with a group below the count
(``kernels.published.place_records``), and publishes the range's rows in order.

What the run holds is bounded whatever the rows: the buffers, one or two ranges of
values, the group sizes' histogram. The report's figures come from the units as they
pass: the groups, their least and largest size and the size histogram; the squared
errors in unit order (the same sums as the stitch); "after" distributions counted a
unit at a time. The recount is independent of the workers' counts: each unit's
labels are counted again (``np.bincount``) against the sizes its worker measured and
against k, and the write pass finds every row exactly once.
"""

from __future__ import annotations

import contextlib
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import EngineError
from ..io.spill import RunFile
from ..io.tempfiles import private_dir
from ..kernels.published import fill_records, place_records

RANGE_ROWS = 1 << 18  # rows a range holds, about: the write pass holds one or two ranges' values


def range_rows(chunk_rows: int, target: int = RANGE_ROWS) -> int:
    """Rows a range holds: a multiple of the write pass's chunk near ``target`` (a chunk
    then lies in one range), at least one chunk."""
    chunk = max(int(chunk_rows), 1)
    return chunk * max(1, round(target / chunk))


def range_bytes(d: int, rows: int) -> int:
    """What the write pass holds for a range of ``rows`` rows: its records as read,
    then its values (d a row) and groups, the previous range's values still written."""
    return rows * (8 * (1 + d) + 2 * (8 * d + 8))


def bucket_strata(unit_groups: np.ndarray, unit_strata: np.ndarray, groups: int,
                  per_unit: int = 64) -> tuple[int, np.ndarray]:
    """``(shift, table)``: the stratum of each bucket of ``2^shift`` consecutive groups
    (group ``i`` in bucket ``i >> shift``), -1 for a bucket whose groups lie in units of
    two strata; about ``per_unit`` buckets a unit (at least 1,024), so the table grows
    with the units, not the rows, and few buckets straddle a stratum's edge. The write
    pass's strata check then looks a row's group up in one gather where a binary search
    over the units took a dozen dependent reads a row (``unit_groups``: each unit's first
    group, ascending, the first 0; ``unit_strata``: its stratum)."""
    if not unit_groups.shape[0]:  # (no group: every lookup searches, and finds none)
        return 62, np.full(1, -1, np.int64)
    shift = 0
    while groups >> shift > max(per_unit * unit_groups.shape[0], 1024):
        shift += 1
    starts = np.arange(0, max(groups, 1), 1 << shift, dtype=np.int64)
    ends = np.minimum(starts + (1 << shift), max(groups, 1)) - 1
    first = np.searchsorted(unit_groups, starts, side="right") - 1
    last = np.searchsorted(unit_groups, ends, side="right") - 1
    run = np.concatenate([[0], np.cumsum(unit_strata[1:] != unit_strata[:-1])])  # runs of units of one stratum
    table = unit_strata[np.maximum(first, 0)].copy()
    table[(run[np.maximum(first, 0)] != run[np.maximum(last, 0)]) | (first < 0)] = -1
    return shift, table


class RowRecords:
    """The row sink of ``passes.aggregate.aggregate_units``: each unit's rows with their
    group's published values, into a spill file keyed by range of rows (see the module's
    docstring). ``dist`` (``distributions.Distributions``, started): the "after"
    histograms counted a unit at a time. ``sums``: the width of each unit's third part (the
    squared errors per QI; mixed-type QIs: ``Mixed.published_sums``' per-QI losses and
    counts, ``loss_width``), default ``d``: the records then hold a mixed run's published
    values, one a QI (a category's code), which its publisher turns into the column."""

    def __init__(self, folder, rows: int, d: int, k: int, chunk_rows: int, buffer_bytes: int, dist=None,
                 target: int = RANGE_ROWS, sums: int | None = None):
        if rows >= 1 << 32:
            raise EngineError("internal check failed: row-ordered records hold row ids below 2^32")
        self.path = Path(private_dir(folder))
        self.rows, self.d, self.k = int(rows), int(d), int(k)
        self.range_rows = range_rows(chunk_rows, target)
        self.ranges = -(-self.rows // self.range_rows)
        try:
            self.file = RunFile(self.path / "published.bin", self.ranges, buffer_bytes)
        except BaseException:
            shutil.rmtree(self.path, ignore_errors=True)
            raise
        self.sse = np.zeros(d if sums is None else sums)
        self.groups = 0
        self.appended = 0
        self.hist = np.zeros(1, np.int64)  # groups of each size
        self.dist = dist
        self._range = -1  # the range the write pass holds
        self._values = self._labels = None
        self.strata = None  # ``partition.Strata`` (--strata): each unit's groups checked to lie in one stratum
        self.strata_groups = None  # ... and counted by stratum (the report's groups per stratum)

    def check_strata(self, strata) -> None:
        """With --strata: each unit's groups are counted by stratum as they pass
        (``strata_groups``: the stratum of the unit's first row, one read), and the write
        pass checks every row, range by range, against the stratum of its group's unit
        (``strata.slice``: the rows' strata read in row order, none held for the run;
        each row's group's stratum from a table of group buckets, ``bucket_strata``):
        the independent check ``partition.group_strata`` makes of a label map."""
        self.strata = strata
        self.strata_groups = np.zeros(strata.count, np.int64)
        self._unit_groups: list = []  # each unit's first group
        self._unit_strata: list = []  # ... and its stratum

    # ------------------------------------------------------------ the aggregate pass

    def add(self, ids: np.ndarray, local: np.ndarray, first: int, part) -> None:
        """One unit, in unit order: its rows' ids, their groups (``first + local``) and
        ``part`` = ``(centroid (g, d), size (g,), squared error per QI)``."""
        if part is None or first != self.groups:
            raise EngineError("internal check failed: a unit's groups were not measured in order")
        centroid, size, err = part[0], np.asarray(part[1], np.int64), part[2]
        g = size.shape[0]
        local = np.asarray(local, np.int64)
        recount = np.bincount(local, minlength=g)
        if ids.shape[0] != local.shape[0] or recount.shape[0] != g or not np.array_equal(recount, size):
            raise EngineError("internal check failed: group sizes do not add up to the row count")
        if g and int(size.min()) < self.k:
            raise EngineError(f"internal check failed: a group has {int(size.min())} rows, fewer than k={self.k}")
        counts = np.bincount(size)
        if counts.shape[0] > self.hist.shape[0]:
            counts[: self.hist.shape[0]] += self.hist
            self.hist = counts
        else:
            self.hist[: counts.shape[0]] += counts
        self.sse += err  # (in unit order: the sums ``aggregate_blocks`` adds)
        centroid = np.ascontiguousarray(centroid, np.float64)
        if self.dist is not None:
            self.dist.add_groups(centroid, size)
        ids = np.asarray(ids, np.int64)
        if ids.shape[0] and (int(ids.min()) < 0 or int(ids.max()) >= self.rows):
            raise EngineError("internal check failed: a row id is outside the table")
        if self.strata is not None and g:
            self._unit_groups.append(first)
            self._unit_strata.append(int(self.strata.at(ids[:1])[0]))
            self.strata_groups[self._unit_strata[-1]] += g
        by_range = np.bincount(ids // self.range_rows, minlength=self.ranges)
        rec, nxt = self.file.reserve_buckets(by_range, 8 * (1 + self.d))
        fill_records(ids, local, first, centroid, self.range_rows, rec.view(np.int64), rec.view(np.float64), nxt)
        self.appended += ids.shape[0]
        self.groups += g

    def finish(self, groups: int) -> "PublishedGroups":
        """After the last unit: everything on file; the groups as the report needs them."""
        self.file.flush(release=True)
        if self.appended != self.rows or groups != self.groups:
            raise EngineError("internal check failed: a row was not assigned to a group")
        if self.strata is not None:  # (the write pass's check: each unit's first group and stratum)
            self._unit_groups = np.asarray(self._unit_groups, np.int64)
            self._unit_strata = np.asarray(self._unit_strata, np.int64)
            self._shift, self._bucket_strata = bucket_strata(self._unit_groups, self._unit_strata, self.groups)
        sizes = np.flatnonzero(self.hist)
        if not sizes.shape[0]:
            raise EngineError("internal check failed: no group was formed")
        return PublishedGroups(self, self.groups, int(sizes[0]), int(sizes[-1]),
                               {str(int(s)): int(self.hist[s]) for s in sizes}, self.sse)

    # ------------------------------------------------------------ the write pass

    def take(self, offset: int, h: int) -> tuple[np.ndarray, np.ndarray]:
        """The published values (d, h) (each row of it contiguous: an output column) and
        the groups (h,) of rows ``offset .. offset + h - 1``, in row order."""
        if offset < 0 or offset + h > self.rows:
            raise EngineError(f"internal check failed: rows {offset:,} to {offset + h:,} are not in the table")
        parts = []
        while h > 0:
            r = offset // self.range_rows
            if r != self._range:
                self._load(r)
            a = offset - r * self.range_rows
            b = min(a + h, self._labels.shape[0])
            parts.append((self._values[:, a:b], self._labels[a:b]))
            offset, h = offset + b - a, h - (b - a)
        if len(parts) == 1:
            return parts[0]
        return np.concatenate([p[0] for p in parts], axis=1), np.concatenate([p[1] for p in parts])

    def _load(self, r: int) -> None:
        """Range ``r`` read, placed at its rows, checked: new arrays (the frames published
        from the last range may still be in the writer's queue)."""
        first = r * self.range_rows
        n = min(self.range_rows, self.rows - first)
        raw = self.file.read(r)
        rec = raw.view(np.float64).reshape(-1, 1 + self.d)
        values = np.empty((self.d, n))
        labels = np.full(n, -1, np.int64)
        bad = place_records(rec.view(np.int64), rec, first, self.groups, values, labels)
        if bad >= 0:
            row = int(rec.view(np.int64)[bad, 0]) & 0xFFFFFFFF
            raise EngineError(f"internal check failed: row {row + 1:,} was published twice or out of place")
        if rec.shape[0] != n or (labels < 0).any():
            missing = int(np.flatnonzero(labels < 0)[0]) if (labels < 0).any() else 0
            raise EngineError(f"internal check failed: row {first + missing + 1:,} was not assigned to a group")
        if self.strata is not None:
            if (self._group_strata(labels) != self.strata.slice(first, first + n)).any():
                raise EngineError("internal check failed: a group holds rows of two strata")
        self._range, self._values, self._labels = r, values, labels
        if r == self.ranges - 1:  # (the last range read: the file goes meanwhile)
            self.file.discard()

    def _group_strata(self, labels: np.ndarray) -> np.ndarray:
        """The stratum of each group of ``labels`` (its unit's): from the groups' buckets
        (``bucket_strata``), a unit's binary search only for a bucket whose units differ."""
        s = self._bucket_strata[labels >> self._shift]
        mixed = np.flatnonzero(s < 0)
        if mixed.shape[0]:
            unit = np.searchsorted(self._unit_groups, labels[mixed], side="right") - 1
            s[mixed] = self._unit_strata[unit]
        return s

    def close(self) -> None:
        self.file.close()
        self._values = self._labels = None
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(self.path)


@dataclass
class PublishedGroups:
    """A run's groups as the write pass publishes them from ``RowRecords`` (in place of
    ``stitch.Groups``): no row -> group map, no table of centroids; the report's figures."""

    records: RowRecords
    count: int
    min_size: int
    max_size: int
    size_counts: dict  # {"size": groups}
    sse: np.ndarray  # per QI, in units of the scale (as ``Groups.sse``)
    labels: np.ndarray | None = None  # each row's group, filled by the write pass when asked (a result in memory)
    derive: object | None = None  # ``passes.leak.Derive``: the derived columns published
    counter_room: int | None = None  # bytes the self-check's counter may hold (``engine.budget``; None: any)
