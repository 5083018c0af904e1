"""The write pass as Dask tasks: one task per range of row groups writes a Parquet part.

The client hands each range what its rows publish and nothing else (``RangeCutter``):
the group id of each of its rows (4 bytes a row) and the published values of the
groups those rows belong to, in group id order (the centroids; for mixed-type QIs the
publisher's table, the Datetime QIs' exact means and the numeric QIs' declared missing
codes). It travels by ``client.scatter`` to one worker, where the task runs; a task
never reads a file of the client's. The task numbers its groups 0..u-1 (``np.unique``
of its labels: the same order), runs the coordinator's ``passes.write.write_pass`` into
a part on its worker's own disk, and returns the part's bytes with its class counts and
raw sums. The client places the parts in order (``Parts``): copied into one Parquet
file by the same writer as a local run's (the same bytes), or written as the files of
a folder OUTPUT.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import os
import shutil
import threading

import numpy as np
import pyarrow.parquet as pq

from ..errors import EngineError, VerificationError
from ..frames import aligned_zeros
from ..io.source import row_group_slices
from ..io.tempfiles import os_reason, private_dir, private_opener
from ..passes.leak import DerivedGroups
from ..passes.selfcheck import ClassCounter
from ..passes.write import ROW_GROUP_ROWS, Writer, write_pass
from .blocks import worker_dir
from .shipping import task_encoding

log = logging.getLogger("engine")


@dataclasses.dataclass
class RangeGroups(DerivedGroups):
    """A write task's groups: its range's groups only, numbered 0..u-1 in group id order
    (``labels``: its rows' numbers; ``centroid``: their centroids; ``sizes``: their rows
    in the range), ``ids`` each one's group id (what the group column holds)."""

    ids: np.ndarray | None = None


@dataclasses.dataclass(frozen=True)
class RangeData:
    """What the client sends one write task: each row's group id, and the published
    values of those groups only, in group id order (centroids, or a mixed run's
    publisher's table, ``exact``: its Datetime QIs' exact means, ``declared``: its numeric
    QIs' declared missing codes, ``encode.publish.declared_codes``)."""

    labels: np.ndarray
    values: np.ndarray
    exact: dict
    declared: dict = dataclasses.field(default_factory=dict)

    @property
    def value_bytes(self) -> int:
        return int(self.values.nbytes + sum(a.nbytes for d in (self.exact, self.declared) for a in d.values()))


class RangeCutter:
    """Each range's ``RangeData`` from the run's label map (in memory or a memory-mapped
    file) and the groups' values; ``sent``: the bytes handed out so far (labels, values)."""

    def __init__(self, labels, values: np.ndarray, exact: dict, groups: int, declared: dict | None = None):
        self.labels, self.values, self.exact, self.declared = labels, values, exact, declared or {}
        self._mark = np.zeros(groups, bool)  # (cleared after each range)
        self.sent = [0, 0]

    def data(self, first: int, rows: int) -> RangeData:
        lab = np.array(self.labels[first: first + rows])
        self._mark[lab] = True
        ids = np.flatnonzero(self._mark)  # the range's groups, in id order (as the task's np.unique)
        self._mark[ids] = False
        out = RangeData(lab, self.values[ids], {c: e[ids] for c, e in self.exact.items()},
                        {c: e[ids] for c, e in self.declared.items()})
        self.sent[0] += lab.nbytes
        self.sent[1] += out.value_bytes
        return out


def ship_publisher(publisher):
    """The client's ``encode.publish.Publisher`` for the write tasks: its encoding
    ``task_encoding``'s, without its arrays of a row a group (``table``, ``exact``,
    ``declared``: each task gets its own groups' rows in its ``RangeData``, indexed by the
    task's own numbering of its groups), its sums and counts copied now (the client's own
    go on adding up, ``PublisherSums``, while the copies travel)."""
    return _copied(publisher, task_encoding(publisher.mixed), None, None, None)


def _copied(publisher, mixed, table, exact, declared):
    """A copy of ``publisher`` with its own ``mixed``, ``table``, ``exact`` and ``declared``,
    and copies of its arrays (its sums and counts: a task Dask runs again starts from the
    same values)."""
    pub = copy.copy(publisher)
    for name, v in list(vars(pub).items()):
        if isinstance(v, np.ndarray):
            setattr(pub, name, v.copy())
        elif isinstance(v, tuple) and v and all(isinstance(a, np.ndarray) for a in v):
            setattr(pub, name, tuple(a.copy() for a in v))
    pub.mixed, pub.table, pub.exact, pub.declared = mixed, table, exact, declared
    return pub


class _Shifted:
    """A write task's publisher: its chunks' offsets (counted from its range's first
    row) given as the input's row numbers; ``values`` as the write pass gives them
    (``Publisher.publish``: None here, as a write task gathers from its range's table)."""

    def __init__(self, publisher, first: int):
        self._publisher, self._first = publisher, first

    def publish(self, frame, lab, offset, values=None):
        return self._publisher.publish(frame, lab, offset + self._first, values)

    def __getattr__(self, name):
        return getattr(self._publisher, name)


def write_task(src, data: RangeData, profile, sse, group_column, chunk_rows: int, k: int, publisher=None,
               derive=None):
    """The write pass over one range of rows (a ``ranges.RangeSource``) into a part on the
    worker's disk, read back and removed. ``publisher``: mixed-type QIs, the client's
    (``ship_publisher``). Returns ``(the part's bytes, rows, class keys, class counts,
    raw sums)``."""
    ids, local = np.unique(data.labels, return_inverse=True)
    if ids.shape[0] != data.values.shape[0]:
        raise EngineError("internal check failed: a write range's values do not match its labels")
    local = local.astype(data.labels.dtype, copy=False)
    extra, centroid = {}, None
    if publisher is None:
        centroid = aligned_zeros(*data.values.shape)  # (as the client's: rows on cache lines)
        centroid[:] = data.values
    else:  # (its chunks' offsets: the input's row numbers, as locally)
        extra["publisher"] = _Shifted(_copied(publisher, publisher.mixed, data.values, dict(data.exact),
                                              dict(data.declared)), src.first)
    groups = RangeGroups(local, np.bincount(local, minlength=ids.shape[0]), centroid, sse=sse, derive=derive, ids=ids)
    columns = list(profile.columns if publisher is None else publisher.columns)
    columns += list(derive.columns) if derive is not None else []
    src = dataclasses.replace(src, first=0)  # offsets into this range's labels
    part = dataclasses.replace(profile, rows=src.rows)
    counter = ClassCounter(columns, min(ids.shape[0], src.rows // max(k, 1) + 1))
    raw: dict = {}
    folder = private_dir(worker_dir())
    try:
        path = os.path.join(folder, "part.parquet")
        write_pass(src, path, "parquet", part, groups, group_column, chunk_rows, counter=counter, raw=raw, **extra)
        out = np.fromfile(path, np.uint8)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    keys, counts = counter.classes()
    return out, src.rows, keys, counts, raw


class Parts:
    """The write tasks' parts placed into OUTPUT in order: copied into the one Parquet
    file ``path`` by the writer of a local run (``passes.write.Writer``, the input's Arrow
    schema kept: ``io.schema.ArrowTarget``; so the same bytes), through a file in the
    client's own ``folder``; or, for a folder OUTPUT (``fmt`` "folder"), written as its
    files ``part-NNNNN.parquet``."""

    def __init__(self, path: str, fmt: str, source, columns, chunk_rows: int, folder: str):
        self.path, self.chunk_rows, self.folder = path, chunk_rows, folder
        self.writer = Writer(path, "parquet", getattr(source.base, "arrow", None), columns) \
            if fmt == "parquet" else None

    def add(self, i: int, data: np.ndarray, rows: int) -> None:
        if self.writer is None:  # (renamed with the folder at the commit)
            name = os.path.join(self.path, f"part-{i:05d}.parquet")
            with open(name, "wb") as fh:
                fh.write(memoryview(data))
            if pq.read_metadata(name).num_rows != rows:
                raise VerificationError(f"verification failed: {name} does not hold {rows:,} rows")
            return
        name = os.path.join(self.folder, f"out-{i:05d}.parquet")
        try:
            with open(name, "wb", opener=private_opener) as fh:
                fh.write(memoryview(data))
        except OSError as exc:
            raise EngineError(f"cannot write temporary data in {self.folder}: {os_reason(exc)}") from None
        try:
            for frame in row_group_slices(name, max(self.chunk_rows, ROW_GROUP_ROWS)):
                self.writer.add(frame)
        finally:
            os.unlink(name)

    def close(self, rows: int) -> None:
        if self.writer is None:
            return
        self.writer.close()
        written = pq.read_metadata(self.path).num_rows
        if written != rows:
            raise VerificationError(f"verification failed: the file holds {written:,} rows, the input {rows:,}")

    def abort(self) -> None:
        if self.writer is not None:
            self.writer.abort()


class PublisherSums:
    """The client's share of a mixed write pass, on a thread of its own while the tasks
    run: ``publisher.publish`` on the input's QI columns that the write pass reads (all
    but ``publisher.unread``), chunk by chunk in row order, so that its loss sums
    (``publisher.finish``) are the single-machine run's to the bit (the parts' sums,
    added, would round differently); the published frames are dropped (the tasks write
    theirs). None to read: nothing to sum."""

    def __init__(self, publisher, source, labels, rows: int, chunk_rows: int):
        self.args = (publisher, source, labels, rows, chunk_rows)
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="microagg-loss", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        publisher, source, labels, rows, chunk_rows = self.args
        read = [c for c in publisher.columns if c not in set(publisher.unread)]
        try:
            for offset, frame in (source.iter_frames(read, chunk_rows, prefetch=True, native=True) if read else ()):
                if self.stop.is_set():
                    return
                lab = labels[offset: offset + frame.height]
                if lab.shape[0] != frame.height:
                    raise EngineError(f"{source.label} changed during the run: it now has more than the "
                                      f"{rows:,} rows counted by the first pass")
                publisher.publish(frame, lab, offset)
        except BaseException as exc:  # (raised by ``join``, on the caller's thread)
            self.error = exc

    def join(self) -> None:
        while self.thread.is_alive():  # (short waits: a signal is handled at once)
            self.thread.join(0.05)
        if self.error is not None:
            raise self.error

    def cancel(self) -> None:
        self.stop.set()
        self.thread.join()


def write_parts(backend, source, path, fmt, profile, groups, group_column, chunk_rows: int, k, publisher,
                started=None):
    """The write tasks of one run, the parts placed into ``path`` as they come, in order,
    with the class counts merged (``counter.check``: before the file is complete, as
    ``write_pass``) and, for mixed-type QIs, the client's loss sums meanwhile
    (``PublisherSums``). ``started(client)``: called once the first tasks are submitted
    (tests). Returns ``(the checked counts, the parts' raw sums (sse, s, q) added in
    part order)``."""
    derive = getattr(groups, "derive", None)  # (--derived: recomputed in each task, counted with the QIs)
    columns = list(profile.columns) if publisher is None else list(publisher.columns)
    d = len(columns)  # (the QIs' sums)
    columns += list(derive.columns) if derive is not None else []
    values, exact = (groups.centroid, {}) if publisher is None else (publisher.table, publisher.exact)
    cutter = RangeCutter(groups.labels, values, exact, groups.count,
                         None if publisher is None else publisher.declared)
    ranges = backend.write_ranges(source, groups.count, values.shape[1])
    args = (backend.lean(profile), groups.sse, group_column, chunk_rows, k or 2,
            None if publisher is None else ship_publisher(publisher), derive)

    def submit(r):
        data = cutter.data(r.first, r.rows)
        with backend.talking():
            [sent] = backend.client.scatter([data], hash=False)  # (straight to a worker, where the task runs)
            return backend.client.submit(write_task, r, sent, *args, pure=False)

    counter = ClassCounter(columns, groups.count)
    sums = np.zeros((3, d))
    parts = Parts(path, fmt, source, columns, chunk_rows, backend.run_dir)
    loss = PublisherSums(publisher, source, groups.labels, profile.rows, chunk_rows) if publisher is not None else None
    try:
        for i, (part, rows, keys, counts, raw) in backend.ordered(ranges, submit, started=started, retry=True):
            counter.merge(keys, counts, rows)
            sums += (raw["sse"], raw["s"], raw["q"])
            parts.add(i, part, rows)
        if loss is not None:
            loss.join()
        checked = counter.check(k, profile.rows)  # before the file is complete, as write_pass
        parts.close(profile.rows)
    except BaseException:
        if loss is not None:
            loss.cancel()
        parts.abort()
        raise
    log.info("Dask write pass: %d tasks, sent %s bytes (labels %s, their groups' values %s)", len(ranges),
             f"{sum(cutter.sent):,}", f"{cutter.sent[0]:,}", f"{cutter.sent[1]:,}",
             extra={"sent": {"tasks": len(ranges), "labels": cutter.sent[0], "values": cutter.sent[1]}})
    return checked, sums
