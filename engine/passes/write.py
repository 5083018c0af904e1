"""Pass 4, write: stream the input again in order and publish each row's group values.

QI columns are replaced by their group's centroid (Float64); every other column
passes through untouched, but a derived one (``--derived``: recomputed from its QI's
published value, ``passes.leak``). SSE and SST are accumulated on the way from the input's
QI values and the published ones, so the information loss is measured on exactly
what is written; or, when the blocks' workers already measured the squared error
of the very centroids published here (``Groups.sse``), the QI columns are not read
at all (SST of a standardized column is then exactly its row count).
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
from polars.io.plugins import register_io_source

from ..errors import EngineError, VerificationError, first_line
from ..frames import Profile, finish_sums, measured_sums
from ..io.source import Source, numeric_values
from ..io.schema import ArrowTarget
from ..io.sink import PARQUET_OPTIONS
from ..io.tempfiles import io_errno
from .published import PublishedGroups
from .selfcheck import ClassCounter, class_counter, entity_counter
from ..kernels.groups import column_sums, gather_columns
from ..parallel import read_ahead
from ..progress import Progress
from .stitch import Groups


ROW_GROUP_ROWS = PARQUET_OPTIONS["row_group_size"]
_CANCEL = object()  # queued by abort(): the sink's source raises _Cancelled


class _Cancelled(Exception):
    pass


def sink_parquet(lf: pl.LazyFrame, path: str) -> None:
    """The Parquet encoding of every output (``io.sink.PARQUET_OPTIONS``, as the in-memory path)."""
    lf.sink_parquet(path, **PARQUET_OPTIONS)


class Writer:
    """Appends frames to the output.

    Parquet goes through Polars' streaming sink, which encodes and compresses
    columns on its own threads: a worker thread runs ``sink_parquet`` on a source
    that takes frames from a queue (at most one waiting), so the main thread keeps
    reading, gathering and counting chunks meanwhile, and stays responsive to
    signals. Row groups hold exactly ``ROW_GROUP_ROWS`` rows (the last fewer)
    whatever the chunking, so the file's bytes do not depend on the chunk size.
    """

    def __init__(self, path: str | None, fmt: str, arrow: pa.Schema | None = None, replaced=()):
        self.path, self.fmt = path, fmt
        # the input's Arrow schema (``TableSource.arrow``): pass-through columns keep their
        # Arrow types and the schema its metadata (``io.schema.ArrowTarget``), written by
        # pyarrow in row groups of ``ROW_GROUP_ROWS`` (the same bytes for any chunking)
        self.arrow, self.replaced = arrow, tuple(replaced)
        self._target: ArrowTarget | None = None
        self._pq = None
        self._held: list = []  # Arrow tables waiting for a full row group
        self._held_rows = 0
        self.frames: list[pl.DataFrame] = []
        self._fh = None
        self._first = True
        self._thread = None
        self._queue = None
        self._error: BaseException | None = None

    def _write_arrow(self, frame: pl.DataFrame | None) -> None:
        """Hold ``frame`` as Arrow (``None``: the end) and write every full row group."""
        if frame is not None:
            tbl = self._target.table(frame)
            self._held.append(tbl)
            self._held_rows += tbl.num_rows
        while self._held_rows >= ROW_GROUP_ROWS or frame is None and self._held_rows:
            tbl = pa.concat_tables(self._held)
            take = min(ROW_GROUP_ROWS, tbl.num_rows)
            if self._pq is None:
                self._pq = pq.ParquetWriter(self.path, self._target.schema, compression=PARQUET_OPTIONS["compression"],
                                            compression_level=PARQUET_OPTIONS["compression_level"],
                                            write_statistics=PARQUET_OPTIONS["statistics"])
            self._pq.write_table(tbl.slice(0, take).combine_chunks(), row_group_size=ROW_GROUP_ROWS)
            rest = tbl.slice(take)
            self._held, self._held_rows = ([rest] if rest.num_rows else []), rest.num_rows
        if frame is None:
            if self._pq is None:  # no row: the schema alone
                self._pq = pq.ParquetWriter(self.path, self._target.schema)
            self._pq.close()
            self._pq = None

    def _write_parquet(self, frame: pl.DataFrame) -> None:
        if self._target is None and self.arrow is not None:
            target = ArrowTarget(self.arrow, frame.schema, self.replaced)
            if target.needed:
                self._target = target
        if self._target is not None:
            self._write_arrow(frame)
            return
        self._check_thread()
        if self._thread is None:
            self._queue = queue.Queue(maxsize=1)
            schema = frame.schema
            self._thread = threading.Thread(target=self._sink, args=(schema,), name="microagg-writer", daemon=True)
            self._thread.start()
        while True:  # wait for room, but notice a failed sink
            try:
                self._queue.put(frame, timeout=0.1)
                return
            except queue.Full:
                self._check_thread()
                if not self._thread.is_alive():
                    raise EngineError("cannot write the output: the writer stopped") from None

    def _frames(self, with_columns, predicate, n_rows, batch_size):
        while True:
            frame = self._queue.get()
            if frame is None:
                return
            if frame is _CANCEL:
                raise _Cancelled()
            yield frame if with_columns is None else frame.select(with_columns)

    def _sink(self, schema) -> None:
        try:
            sink_parquet(register_io_source(self._frames, schema=schema), self.path)
        except BaseException as exc:  # reported by the main thread
            self._error = exc
            while True:  # let a producer waiting on the queue go on
                try:
                    self._queue.get_nowait()
                except queue.Empty:
                    break

    def _check_thread(self) -> None:
        if self._error is not None:
            exc, self._error = self._error, None
            if isinstance(exc, _Cancelled):
                return
            if isinstance(exc, OSError) or io_errno(exc):
                raise exc
            raise EngineError(f"cannot write the output: {first_line(exc)}") from None

    def _join(self, end) -> None:
        if self._thread is not None:
            while self._thread.is_alive():
                try:
                    self._queue.put(end, timeout=0.1)
                    break
                except queue.Full:
                    continue
            self._thread.join()
            self._thread = None

    def add(self, frame: pl.DataFrame) -> None:
        try:
            if self.path is None:
                self.frames.append(frame)
            elif self.fmt == "parquet":
                if frame.height:
                    self._write_parquet(frame)
            else:
                if self._fh is None:
                    self._fh = open(self.path, "wb")
                frame.write_csv(self._fh, include_header=self._first)
            self._first = False
        except OSError:
            raise  # atomic_output names OUTPUT and the OS's reason

    def close(self) -> pl.DataFrame | None:
        try:
            if self._target is not None:
                self._write_arrow(None)
            self._join(None)
            self._check_thread()
            if self._fh is not None:
                self._fh.flush()
                self._fh.close()
        except OSError:
            raise  # atomic_output names OUTPUT and the OS's reason
        if self.path is None:
            return pl.concat(self.frames) if self.frames else None
        return None

    def abort(self) -> None:
        try:
            if self._pq is not None:
                self._pq.close()
        except Exception:
            pass
        try:
            self._join(_CANCEL)
        except BaseException:
            pass
        try:
            if self._fh is not None:
                self._fh.close()
        except Exception:
            pass


publish = gather_columns  # the gather of the published values (a test hook)


@dataclass
class _Columns:
    """What the write pass publishes and reads: the published QIs (``qi``), the derived
    columns (``derive``), the columns read (None: all) and the input's ``order``;
    ``measured``: the squared errors come from the workers (no QI is read), else
    ``sums`` (3, d) gathers ``column_sums``' squared errors, sums and squares."""

    qi: list
    derive: object
    read: list | None
    order: list
    measured: bool
    sums: np.ndarray

    @property
    def derived(self) -> list:
        return self.derive.columns if self.derive is not None else []


def _columns(source: Source, profile: Profile, groups, publisher) -> _Columns:
    qi = list(profile.columns) if publisher is None else publisher.columns
    derive = getattr(groups, "derive", None)
    derived = derive.columns if derive is not None else []
    # the squared errors measured by the blocks' workers (``Groups.sse``): the QI values
    # are not needed here, so only the other columns are read (the first QI stands in
    # for a table of QIs only, for the row count)
    measured = groups.sse is not None and publisher is None
    order = list(source.columns)
    read = None
    if measured:
        read = [c for c in order if c not in set(qi) | set(derived)] or qi[:1]
    elif publisher is not None and publisher.unread:  # (mixed-type QIs: published from the groups alone)
        read = [c for c in order if c not in set(publisher.unread) | set(derived)] or order[:1]
    return _Columns(qi, derive, read, order, measured, np.zeros((3, len(qi))))


def write_pass(source: Source, path: str | None, fmt: str, profile: Profile, groups: Groups | PublishedGroups,
               group_column: str | None, chunk_rows: int, progress: bool = False, *,
               k: int | None = None, verified: dict | None = None, publisher=None,
               counter: ClassCounter | None = None, raw: dict | None = None, classes: tuple | None = None):
    """Returns ``(sse, sst, frame, sse per QI, sst per QI)``; ``frame`` is the whole result
    when ``path`` is None.

    Self-check (``selfcheck.ClassCounter``): every frame handed to the writer is
    counted by its published QI values; after the last chunk, before the file is
    closed (and so before ``atomic_output`` renames it), a VerificationError is
    raised if a class has fewer than ``k`` rows or the row count differs from the
    input's; a Parquet file's footer row count is checked after closing. The
    counts go to ``verified`` (a dict) when given.

    ``groups``: ``stitch.Groups`` (each row's group gathers its centroid), or
    ``published.PublishedGroups``: each range of rows' published values read in row
    order from disk (every row checked to come once), the self-check's counter spilled
    beside them when its table would not fit (``counter_room``).

    ``publisher`` (``engine.encode.mixed.Publisher``, mixed-type QIs): it publishes each
    chunk's QI values and measures their loss per QI (then returned as SSE and SST).
    A part of the output (``engine.cluster``, the write pass of a range of rows) gives
    its own ``counter`` (merged with the other parts' before the check for ``k``) and
    ``raw``, a dict that receives the unscaled sums per QI (``sse``, ``s``, ``q``).

    Derived columns (``--derived``: ``groups`` is a ``passes.leak.DerivedGroups``): each
    is published recomputed from its QI's published value (``Derive.apply``), in its
    place, and counted by the self-check among the published columns (a value that
    did not follow its QI would split a class).

    ``classes`` (``engine.entities``: ``(extra columns, person column or None)``): the
    self-check's classes also over the extra columns, with their distinct persons
    (``selfcheck.entity_counter``)."""
    cols = _columns(source, profile, groups, publisher)
    writer = Writer(path, fmt, getattr(source.base, "arrow", None), [*cols.qi, *cols.derived])
    own = counter is None
    if own:
        counter = _counter(groups, [*cols.qi, *cols.derived], profile.rows) if classes is None else \
            entity_counter(classes, [*cols.qi, *cols.derived], groups.count)
    try:
        frames = _published(source, cols, groups, profile, publisher, group_column, chunk_rows)
        result, checked = _write_checked(frames, writer, counter, source.label, profile.rows, path, fmt, k, progress)
    finally:
        if own:
            counter.close()
    if verified is not None:
        verified.update(checked)
    col_sse, zs, zq = cols.sums
    if raw is not None:
        raw.update(sse=col_sse, s=zs, q=zq)
    if publisher is not None:
        col_sse, col_sst = publisher.finish()
    elif cols.measured:
        col_sse, col_sst = measured_sums(groups.sse, profile.sd, profile.rows)
    else:
        col_sse, col_sst = finish_sums(col_sse, zs, zq, profile.sd, profile.rows)
    return float(col_sse.sum()), float(col_sst.sum()), result, col_sse, col_sst


def _counter(groups, columns: list, rows: int):
    """The write pass's own self-check counter: in memory, or (row-ordered published
    values whose classes would not fit the budget) spilled beside them."""
    if isinstance(groups, PublishedGroups):
        records = groups.records
        return class_counter(columns, groups.count, room=groups.counter_room, folder=records.path, rows=rows,
                             buffer_bytes=records.file.buffer_bytes)
    return ClassCounter(columns, groups.count)


def _published(source: Source, cols: _Columns, groups, profile: Profile, publisher, group_column, chunk_rows):
    """The frames to write, in order: read and published one chunk ahead of the
    counting and the writer (``read_ahead``: on its own thread, in row order, so the
    sums do not depend on it)."""
    ids = getattr(groups, "ids", None)  # a write task's own numbering of its groups (engine.cluster.write): their ids
    records = groups.records if isinstance(groups, PublishedGroups) else None
    for offset, frame in source.iter_frames(cols.read, chunk_rows, native=True):
        h = frame.height
        out = None
        if records is not None:  # the range's published values, in row order
            if offset + h > profile.rows:
                raise _changed(source.label, profile.rows)
            out, lab = records.take(offset, h)
            if groups.labels is not None:  # (a result in memory: each row's group too)
                groups.labels[offset: offset + h] = lab
        else:
            lab = groups.labels[offset: offset + h]
            if lab.shape[0] != h:
                raise _changed(source.label, profile.rows)
        if publisher is not None:  # mixed-type QIs (engine.encode.mixed; row-ordered: their values as read)
            frame = publisher.publish(frame, lab, offset, out)
        else:
            if out is None:  # centroids gathered (column-major: each row of ``out`` becomes a column without a copy)
                out = np.empty((len(cols.qi), h))
                publish(lab, groups.centroid, out)
            if not cols.measured:
                _measure(frame, out, profile, cols)
            frame = frame.with_columns(pl.Series(c, out[j], dtype=pl.Float64) for j, c in enumerate(cols.qi))
        if cols.derive is not None:  # from the published QI values
            frame = cols.derive.apply(frame)
        if cols.read is not None:
            frame = frame.select(cols.order)  # the input's column order (no copy)
        if group_column is not None:
            frame = frame.with_columns(pl.Series(group_column, lab if ids is None else ids[lab], dtype=pl.Int64))
        yield offset, frame


def _changed(label: str, rows: int) -> EngineError:
    return EngineError(f"{label} changed during the run: it now has more than the {rows:,} rows counted by the "
                       f"first pass")


def _measure(frame: pl.DataFrame, out: np.ndarray, profile: Profile, cols: _Columns) -> None:
    """SSE of the published values ``out`` against the input's QI values of ``frame``,
    both standardized (exactly what is written), and the sums for SST."""
    col_sse, zs, zq = cols.sums
    for j, c in enumerate(cols.qi):
        if profile.scale[j] == 1.0:
            column_sums(numeric_values(frame.get_column(c)), out[j], profile.scale, profile.mean, j, col_sse, zs, zq)
        else:  # huge values: differences in units of the scale (x - v itself may overflow)
            inv = 1.0 / profile.scale[j]
            column_sums(numeric_values(frame.get_column(c)).astype(np.float64) * inv, out[j] * inv,
                        np.ones(len(cols.qi)), profile.mean, j, col_sse, zs, zq)


def _write_checked(frames, writer: Writer, counter, label: str, rows: int, path, fmt: str, k, progress):
    """Count and write every frame; the self-check before the file is closed, the
    footer's row count after. Returns ``(the result in memory or None, the counts)``."""
    try:
        with Progress("write", rows, progress) as bar:
            for offset, frame in read_ahead(frames, "microagg-publisher"):
                counter.add(frame)
                writer.add(frame)
                bar.update(offset + frame.height)
        if counter.rows < rows:
            raise EngineError(f"{label} changed during the run: it now has {counter.rows:,} rows, "
                              f"the first pass counted {rows:,}")
        checked = counter.check(k, rows)
        result = writer.close()
        if path is not None and fmt == "parquet":
            written = pq.read_metadata(path).num_rows
            if written != rows:
                raise VerificationError(f"verification failed: the file holds {written:,} rows, the input {rows:,}")
    except BaseException:
        writer.abort()
        raise
    return result, checked


def range_write_pass(source: Source, path, fmt, labels, pub, sets, chunk_rows, progress, rows, counter,
                     group_column=None):
    """The write pass of a range release (maxent, mnqia): stream the input in order;
    each row's class gives its generalized QIs (``pub``: column -> its published
    Series per class; ``sets``: column -> (the distinct sets' text, the set of each
    class)); other columns pass through. Every frame handed to the writer is counted
    by its published values (``counter``, the self-check)."""
    writer = Writer(path, fmt, getattr(source.base, "arrow", None), [*pub, *sets])
    try:
        with Progress("write", rows, progress) as bar:
            for offset, frame in source.iter_frames(None, chunk_rows):
                h = frame.height
                lab = np.asarray(labels[offset: offset + h])
                out = []
                for c in frame.columns:
                    if c in pub:
                        out += [s.gather(lab) for s in pub[c]]
                    elif c in sets:
                        text, sid = sets[c]
                        out.append(text.gather(sid[lab]))
                    else:
                        out.append(frame.get_column(c))
                if group_column is not None:
                    out.append(pl.Series(group_column, lab, dtype=pl.Int64))
                published = pl.DataFrame(out)
                counter.add(published)
                writer.add(published)
                bar.update(offset + h)
        return writer.close()
    except BaseException:
        writer.abort()
        raise
