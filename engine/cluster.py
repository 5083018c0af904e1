"""The streamed passes as Dask tasks: ``--scheduler tcp://HOST:PORT`` or ``local``.

The coordinator chooses the backend (``coordinator._open_backend``) and hands it to
the method's flow (``methods.centroids.CentroidFlow``): the same passes run with a
``DaskBackend`` in place of the thread pool and the spill store (docs/notes/dask.md):

* partition: one task per range of whole row groups (one per worker, at most
  ``PART_ROWS`` rows) routes its rows with the client's plan and spills them into a
  private ``BlockStore`` on the worker's local disk, then packs that store into one file
  of the run's folder (``part-NNNNN.blocks``: block after block, the byte offsets
  returned), written under a task-unique name and renamed;
  meanwhile the client measures the columns (pass 1's sums run in row order, so the
  profile is the single-machine run's to the bit);
* aggregate: one task per unit of blocks (``passes.aggregate.aggregate_unit``) reads its
  blocks from every part file (a block's rows in input order, as a local run reads
  them), results gathered in unit order;
* stitch, seam polish, refinement: on the client (``PartStore`` reads the same files);
* write: one task per range of row groups writes a Parquet part with the write
  pass (``passes.write.write_pass``; the labels and centroids from ``.npy`` files in the
  run's folder, memory-mapped), its own class counts merged by the client; the client
  then copies the parts, in order, into OUTPUT (``atomic_output``, as a local run).

Mixed-type QIs (``engine.encode.mixed``): the client's encoding travels to the tasks
(``_task_encoding``); a partition task reads its range through it
(``EncodedSource(range, encoding)``: compact records spilled, ``PartStore`` expands
them when read); the aggregate tasks reduce with it (``UnitPlan.reduce``); each write
task publishes with a copy of the client's ``Publisher`` (``_task_publisher``: its
published table memory-mapped), while the client feeds its own publisher the
numeric and date QI columns in row order for the losses (``_publisher_sums``): the
output and the report are the local run's.

Workers and the client share the run's folder (``--tmp-dir``, or beside OUTPUT), at
the same path; the client checks that every worker sees it. A task writes to a
task-unique temporary name and renames, so a task that Dask runs again (its worker
died) gives the same file. The folder is removed at the end of the run, also on
errors.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import copy
import dataclasses
import functools
import logging
import os
import shutil
import threading
import time
import uuid

from typing import Iterator, Sequence

import numpy as np
import polars as pl
import pyarrow.parquet as pq

from .encode.mixed import Mixed
from .encode.source import EncodedSource
from .errors import EngineError, VerificationError, first_line
from .io.schema import adapt
from .io.sink import output_format
from .io.source import ProfileT, frame_to_array, row_group_slices
from .io.spill import BlockStore, decode_records, units_of
from .io.tempfiles import os_reason, private_dir, private_opener
from .parallel import read_ahead
from .passes.aggregate import UnitPlan
from .passes.partition import frame_to_columns, partition_pass
from .passes.leak import attach
from .passes.profile import Profile
from .passes.selfcheck import ClassCounter
from .passes.stitch import Groups
from .passes.write import ROW_GROUP_ROWS, Writer, finish_sums, measured_sums, write_pass

log = logging.getLogger("engine")

CONNECT_SECONDS = 3     # an unreachable scheduler: the run stops after this long
ANSWER_SECONDS = 20     # a service at the address that accepts connections but does not answer as a scheduler
WORKER_WAIT_SECONDS = 30  # a scheduler without workers
# rows of a partition / write task: one task per worker, or more of at most PART_ROWS rows
# (fewer, larger parts: fewer reads per unit, which reads each part file once)
PART_ROWS = 25_000_000
TASKS_PER_WORKER = 8    # the aggregate pass's units in about this many tasks per worker
HOOKS: dict = {}        # tests: HOOKS["aggregate"](client) after the first task's results


def connect(scheduler, memory_limit: int | None = None):
    """``(client, closer)``: a ``distributed.Client`` for ``scheduler`` (an address, "local"
    for a ``LocalCluster`` of this machine, or a Client), and what to close at the end."""
    try:
        import distributed  # optional: the [dask] extra
    except ImportError:
        raise EngineError("scheduler (--scheduler) needs Dask: pip install 'microagg-engine[dask]'") from None
    if isinstance(scheduler, distributed.Client):
        return scheduler, contextlib.nullcontext()
    stack = contextlib.ExitStack()
    if scheduler == "local":
        quiet = logging.getLogger("distributed")  # its scheduler's INFO lines (as it starts and stops)
        stack.callback(quiet.setLevel, quiet.level)  # restored after the cluster is closed
        quiet.setLevel(logging.ERROR)
        cluster = stack.enter_context(distributed.LocalCluster(
            threads_per_worker=1, processes=True, memory_limit=memory_limit or "auto", dashboard_address=":0",
            silence_logs=logging.ERROR))
        client = stack.enter_context(distributed.Client(cluster, set_as_default=False))
        return client, stack
    if not isinstance(scheduler, str) or "://" not in scheduler and ":" not in scheduler:
        raise EngineError(f"scheduler (--scheduler) must be an address such as tcp://HOST:PORT, 'local' or a "
                          f"distributed.Client, got {scheduler!r}")
    if not scheduler.startswith("inproc://"):  # (an in-process address answers only in its own process)
        probe(scheduler)
    stack.enter_context(_quiet_distributed())  # its own log lines (a lost connection's traceback): one line is ours
    try:
        client = distributed.Client(scheduler, timeout=CONNECT_SECONDS, set_as_default=False)
    except (OSError, TimeoutError, ValueError) as exc:
        stack.close()
        raise EngineError(f"cannot reach the Dask scheduler at {scheduler} (--scheduler): {first_line(exc)}") from None
    stack.enter_context(client)
    return client, stack


@contextlib.contextmanager
def _quiet_distributed():
    """Dask's client logs a lost connection (its reconnection attempts, with an asyncio
    traceback) at ERROR: silenced while the run uses it (a failure reaches the run as an
    exception, reported in one line); its level restored after."""
    names = ["distributed"] + [n for n in logging.root.manager.loggerDict if n.startswith("distributed.")]
    quiet = [logging.getLogger(n) for n in names]  # (Dask's config gives some their own level)
    levels = [q.level for q in quiet]
    for q in quiet:
        q.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for q, level in zip(quiet, levels):
            q.setLevel(level)


def probe(address: str, connect_seconds: float | None = None, answer_seconds: float | None = None) -> None:
    """Check that a Dask scheduler answers at ``address``, in bounded time, before a
    ``distributed.Client`` is made: the Client waits without end for a service that
    accepts the connection and never answers (its handshake has no timeout), and reads
    another service's answer as a Dask message (an HTTP server's "HTTP/1.1" read as a
    frame length: a 3 EiB allocation). One line naming the address otherwise:
    unreachable (``CONNECT_SECONDS``), no answer (``ANSWER_SECONDS``), or not a Dask
    scheduler. Runs on a thread of its own (its own event loop: the caller may run one)."""
    from distributed.comm import connect as dask_connect  # optional: the [dask] extra

    connect_seconds = CONNECT_SECONDS if connect_seconds is None else connect_seconds
    answer_seconds = ANSWER_SECONDS if answer_seconds is None else answer_seconds
    where = f"the Dask scheduler at {address} (--scheduler)"
    out: dict = {}

    async def ask():
        comm = await dask_connect(address, timeout=connect_seconds)  # (its handshake: no timeout of its own)
        out["connected"] = True
        try:
            await comm.write({"op": "identity", "reply": True})
            return await comm.read()
        finally:
            comm.abort()

    async def bounded():
        return await asyncio.wait_for(ask(), connect_seconds + answer_seconds)

    def run():
        try:
            out["answer"] = asyncio.run(bounded())
        except BaseException as exc:  # (reported by the caller's thread)
            out["error"] = exc

    t = threading.Thread(target=run, name="microagg-probe", daemon=True)
    t.start()
    while t.is_alive():  # (a sleep in this frame: a signal interrupts the wait at once)
        time.sleep(0.02)
    exc = out.get("error")
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        raise EngineError(f"{where} did not answer: the address accepts connections but sent nothing in "
                          f"{connect_seconds + answer_seconds:g} s (is it a Dask scheduler's?)") from None
    if isinstance(exc, OSError) and "connected" not in out:
        raise EngineError(f"cannot reach {where}: {first_line(exc)}") from None
    if exc is not None:  # a reply that is no Dask message (another service), or the connection dropped
        why = "" if isinstance(exc, MemoryError) else f" ({type(exc).__name__}: {first_line(exc)[:200]})"
        raise EngineError(f"{address} (--scheduler) is not a Dask scheduler: the service there does not "
                          f"answer in Dask's protocol{why}") from None
    answer = out.get("answer")
    kind = answer.get("type") if isinstance(answer, dict) else None
    if kind != "Scheduler":
        what = f"a Dask {kind.lower()}" if isinstance(kind, str) else "not a Dask scheduler"
        raise EngineError(f"{address} (--scheduler) is {what}, not a scheduler: give the scheduler's "
                          f"address") from None


class DaskBackend:
    """The passes' Dask side for one run (``open_backend``)."""

    def __init__(self, client, run_dir: str, memory_limit: int | None):
        self.client = client
        self.run_dir = run_dir
        self.memory_limit = memory_limit

    # --- the scheduler lost ---------------------------------------------------------

    @contextlib.contextmanager
    def talking(self):
        """Calls to the scheduler: a lost scheduler (killed, its machine gone: the client
        gives up reconnecting after ``CONNECT_SECONDS`` and cancels every future) is one
        line naming its address; a task's own ``EngineError`` and other errors pass."""
        try:
            yield
        except EngineError:
            raise
        except Exception as exc:
            if not self.lost(exc):
                raise
            address = getattr(getattr(self.client, "scheduler", None), "address", None) or "?"
            why = ("the connection dropped and the client gave up reconnecting (the scheduler stopped, or "
                   "its machine or network failed)"
                   if isinstance(exc, concurrent.futures.CancelledError) else first_line(exc))
            raise EngineError(f"lost the Dask scheduler at {address} (--scheduler) during the run: {why}") from None

    def lost(self, exc: BaseException) -> bool:
        """Whether ``exc`` is the client's, having lost its scheduler or a task's worker
        for good (Dask's ``KilledWorker``), rather than a task's error."""
        if isinstance(exc, concurrent.futures.CancelledError) or type(exc).__name__ == "KilledWorker":
            return True  # (Dask's FutureCancelledError: "scheduler-connection-lost")
        if type(exc).__module__.startswith("distributed.") and isinstance(exc, (OSError, TimeoutError)):
            return True  # (CommClosedError)
        return type(exc).__name__ == "ClosedClientError" or getattr(self.client, "status", "running") in (
            "closing", "closed", "connecting")

    def result(self, fut):
        """``fut.result()``, released after; a lost scheduler in one line (``talking``)."""
        with self.talking():
            out = fut.result()
        fut.release()
        return out

    @staticmethod
    def cancel(futures) -> None:
        """Cancel ``futures`` (while an error unwinds: a client that lost its scheduler
        may refuse, which must not hide that error)."""
        for f in futures:
            with contextlib.suppress(Exception):
                f.cancel()

    # --- set up -------------------------------------------------------------------

    def workers(self) -> int:
        with self.talking():
            return max(1, len(self.client.scheduler_info().get("workers", {})))

    def check_shared(self) -> None:
        """Every worker sees the run's folder at the same path (the "shared" in --tmp-dir)."""
        try:
            with self.talking():
                self.client.wait_for_workers(1, timeout=WORKER_WAIT_SECONDS)
        except (TimeoutError, OSError) as exc:
            raise EngineError(f"the Dask scheduler has no workers (--scheduler): {first_line(exc)}") from None
        with self.talking():
            seen = self.client.run(os.path.isdir, self.run_dir)
        blind = [w for w, ok in seen.items() if not ok]
        if blind:
            raise EngineError(f"temporary folder {os.path.dirname(self.run_dir)} is not shared with Dask worker "
                              f"{blind[0]}: give --tmp-dir a folder every worker sees at the same path")

    def check_source(self, source) -> None:
        if source.kind != "parquet" or not source.paths:
            raise EngineError(f"scheduler (--scheduler) reads Parquet files on the workers; {source.label} is "
                              f"{'a CSV file' if source.kind == 'csv' else 'an in-memory table'} "
                              f"(convert it to Parquet first)")

    def ranges(self, source) -> list["RangeSource"]:
        """The input cut into ranges of whole row groups, about ``PART_ROWS`` rows each,
        at least one per worker (fewer when there are fewer row groups). Paths are
        made absolute here, on the client: a worker runs in a folder of its own."""
        groups = []
        for f in source.paths:
            md = pq.read_metadata(f)
            groups += [(os.path.abspath(f), g, md.row_group(g).num_rows) for g in range(md.num_row_groups)]
        folder = source.folder
        if folder is not None:  # (its files' schemas looked up by the absolute paths)
            folder = dataclasses.replace(folder, files=tuple(os.path.abspath(f) for f in folder.files))
        total = sum(n for *_, n in groups)
        tasks = max(self.workers(), -(-total // PART_ROWS))
        target = -(-total // tasks)
        out, cur, first, rows = [], [], 0, 0
        for f, g, n in groups:
            if cur and cur[-1][0] == f and cur[-1][2] == g:
                cur[-1] = (f, cur[-1][1], g + 1)
            else:
                cur.append((f, g, g + 1))
            rows += n
            if rows >= target:
                out.append(RangeSource(source.label, source.schema, folder, tuple(cur), first, rows))
                first, cur, rows = first + rows, [], 0
        if cur or not out:
            out.append(RangeSource(source.label, source.schema, folder, tuple(cur), first, rows))
        return out

    def map_ordered(self, fn, items, *args):
        """``fn(item, *args)`` for every item, results in the order of ``items``: tasks of
        ``TASKS_PER_WORKER`` batches of consecutive items per worker or so (one round trip
        a batch, not an item), at most two per worker waiting, so finished results do not
        pile up on the workers."""
        workers = self.workers()
        size = max(1, len(items) // (TASKS_PER_WORKER * workers))
        batches = [items[i: i + size] for i in range(0, len(items), size)]
        window = 2 * workers + 1
        fn, args = _lean(fn), [_lean(a) for a in args]
        pending, i, first = [], 0, True
        try:
            while i < len(batches) or pending:
                while i < len(batches) and len(pending) < window:
                    with self.talking():
                        pending.append(self.client.submit(_batch, fn, batches[i], *args, pure=False))
                    i += 1
                results = self.result(pending.pop(0))
                if first and "aggregate" in HOOKS:
                    HOOKS["aggregate"](self.client)
                first = False
                for r in results:
                    yield _widened(r)
        except BaseException:
            self.cancel(pending)
            raise

    # --- partition ----------------------------------------------------------------

    def store(self, n_blocks: int, d: int, folder=None, buffer_bytes: int = 32 << 20, *, rows=None, expand=None):
        """The part files' store. ``expand`` (mixed-type QIs: ``encode.mixed.Mixed.expand``):
        the parts hold compact records (one value a QI), expanded when read, by the
        encoding's copy that travels to the tasks (``_task_encoding``)."""
        owner = getattr(expand, "__self__", None)
        if isinstance(owner, Mixed):
            expand = _task_encoding(owner).expand
        return PartStore(n_blocks, d, self.run_dir, buffer_bytes, rows, expand)

    def partition_pass(self, source, profile, cols, plan, store, chunk_rows, progress=False, *, moments=None,
                       rows=None, dist=None) -> None:
        """``passes.partition.partition_pass`` as tasks (one per range of row groups); the
        client does ``moments`` (pass 1's checks and sums, in row order) and ``dist``
        on its way meanwhile. Mixed-type QIs (a store that expands its records, the
        source an ``encode.source.EncodedSource``): each task reads its range through
        the encoding (its compact columns, ``iter_codes``), as the client's moments do."""
        compact = store.expand is not None
        ranges = self.ranges(source.base)
        if compact:
            encoding = _task_encoding(source.mixed)
            ranges = [EncodedSource(r, encoding) for r in ranges]
        with self.talking():
            futures = [self.client.submit(_partition_task, r, _lean(profile), cols, plan, store, i, chunk_rows,
                                          pure=False) for i, r in enumerate(ranges)]
        try:
            if moments is not None or dist is not None:
                qi = list(profile.columns)
                frames = source.iter_codes(chunk_rows, prefetch=True) if compact else \
                    source.iter_frames(qi, chunk_rows, prefetch=True)
                for offset, frame in frames:
                    if moments is not None:
                        X = moments.add(frame, offset)
                    else:
                        X = frame_to_columns(frame, frame.columns if compact else qi)
                    if dist is not None:
                        dist.add(X)
            store.set_parts([self.result(f) for f in futures])
        except BaseException:
            self.cancel(futures)
            raise
        finally:
            for f in futures:
                with contextlib.suppress(Exception):
                    f.release()

    # --- write --------------------------------------------------------------------

    def write_pass(self, source, path, fmt, profile, groups, group_column, chunk_rows, progress=False, *,
                   k=None, verified=None, publisher=None):
        """``passes.write.write_pass`` as tasks, each writing a Parquet part of a range of
        rows; the parts are copied in order into ``path`` (or moved into the folder
        ``path``, fmt "folder"). Same return value.

        ``publisher`` (mixed-type QIs: ``encode.publish.Publisher``, made on the client from
        the groups): a copy travels to every task (``_task_publisher``: its published
        table memory-mapped from the run's folder), which publishes its rows with it; the
        information loss is the client's, its publisher fed the input's read columns in
        row order while the tasks run (``_publisher_sums``): the local run's figures."""
        if path is None or fmt not in ("parquet", "folder"):  # checked up front (check_output): a bug if reached
            raise EngineError("scheduler (--scheduler) writes a Parquet OUTPUT")
        arrays, shipped = {}, None
        named = [("labels", groups.labels), ("sizes", groups.sizes)]
        if publisher is None:
            named.append(("centroid", groups.centroid))
        else:  # (the publisher holds the published values: ``groups.centroid`` is dropped)
            shipped = _task_publisher(publisher, self.run_dir, groups.count)
        for name, a in named:
            arrays[name] = _save(self.run_dir, name, a)
        derive = getattr(groups, "derive", None)  # (--derived: recomputed in each task, counted with the QIs)
        columns = list(profile.columns) if publisher is None else list(publisher.columns)
        columns += list(derive.columns) if derive is not None else []
        with self.talking():
            futures = [self.client.submit(_write_task, r, self.run_dir, i, _lean(profile), arrays, groups.sse,
                                          group_column, chunk_rows, k or 2, shipped, derive, pure=False)
                       for i, r in enumerate(self.ranges(source))]
        d = len(columns) - (len(derive.columns) if derive is not None else 0)  # (the QIs' sums)
        counter = ClassCounter(columns, groups.count)
        sse, s, q = np.zeros(d), np.zeros(d), np.zeros(d)
        # (the input's Arrow schema, as the local write pass's writer: pass-through columns keep
        # their Arrow types and the schema its metadata, io.schema.ArrowTarget; a folder's parts: Polars')
        writer = Writer(path, "parquet", getattr(source.base, "arrow", None), columns) if fmt == "parquet" else None
        try:
            if publisher is not None:  # the loss sums in row order, meanwhile
                _publisher_sums(publisher, source, groups.labels, profile.rows, chunk_rows)
            # parts in order as they finish: copied into OUTPUT while the later ones are written
            for i, f in enumerate(futures):
                part, rows, keys, counts, raw = self.result(f)
                counter.merge(keys, counts, rows)
                sse += raw["sse"]
                s += raw["s"]
                q += raw["q"]
                if writer is None:  # a folder OUTPUT: the parts themselves (renamed with it at the commit)
                    name = os.path.join(path, f"part-{i:05d}.parquet")
                    shutil.move(part, name)
                    if pq.read_metadata(name).num_rows != rows:
                        raise VerificationError(f"verification failed: {name} does not hold {rows:,} rows")
                    continue
                for frame in row_group_slices(part, max(chunk_rows, ROW_GROUP_ROWS)):
                    writer.add(frame)
                os.unlink(part)
            checked = counter.check(k, profile.rows)  # before the file is complete, as write_pass
            if writer is not None:
                writer.close()
        except BaseException:
            self.cancel(futures)
            if writer is not None:
                writer.abort()
            raise
        if writer is not None:
            written = pq.read_metadata(path).num_rows
            if written != profile.rows:
                raise VerificationError(f"verification failed: the file holds {written:,} rows, "
                                        f"the input {profile.rows:,}")
        if publisher is not None:
            if verified is not None:
                verified.update(checked)
            col_sse, col_sst = publisher.finish()
            return float(col_sse.sum()), float(col_sst.sum()), None, col_sse, col_sst
        return self._sums(groups, profile, sse, s, q, checked, verified)

    @staticmethod
    def _sums(groups, profile, sse, s, q, checked, verified):
        if verified is not None:
            verified.update(checked)
        if groups.sse is not None:
            col_sse, col_sst = measured_sums(groups.sse, profile.sd, profile.rows)
        else:  # each part's sums, added in part order (the report's IL may differ in the last digits)
            col_sse, col_sst = finish_sums(sse, s, q, profile.sd, profile.rows)
        return float(col_sse.sum()), float(col_sst.sum()), None, col_sse, col_sst

    def close(self) -> None:
        shutil.rmtree(self.run_dir, ignore_errors=True)


def open_backend(cfg, folder, cleanup: contextlib.ExitStack) -> DaskBackend:
    """Connect to ``cfg.scheduler`` and make the run's folder in ``folder`` (removed, and
    the client closed, when ``cleanup`` closes)."""
    client, closer = connect(cfg.scheduler, cfg.memory_limit)
    cleanup.enter_context(closer)
    run_dir = os.path.abspath(private_dir(folder))  # (the workers run in folders of their own)
    backend = DaskBackend(client, run_dir, cfg.memory_limit)
    cleanup.callback(backend.close)
    backend.check_shared()
    log.info("Dask: %d workers, run folder %s", backend.workers(), run_dir)
    return backend


def check_output(dest) -> None:
    if dest is None or output_format(dest) not in ("parquet", "folder"):
        raise EngineError(f"scheduler (--scheduler) writes a Parquet OUTPUT (.parquet, or a folder of part files: "
                          f"a name ending in '/'), not {dest}")


def _batch(fn, items, *args):
    """``fn(item, *args)`` for each item, each result's int64 arrays sent as int32 when
    their values fit (a unit's row ids and labels: half the bytes to the client)."""
    def narrow(a):
        if isinstance(a, np.ndarray) and a.dtype == np.int64 and (a.size == 0 or (
                int(a.min()) >= -2 ** 31 and int(a.max()) < 2 ** 31)):
            return ("i32", a.astype(np.int32))
        return a
    return [tuple(narrow(a) if not isinstance(a, tuple) else tuple(narrow(b) for b in a) for a in fn(item, *args))
            for item in items]


def _widened(out):
    """A result of ``_batch`` as ``fn`` returned it."""
    def marker(a):
        return isinstance(a, tuple) and len(a) == 2 and isinstance(a[0], str) and a[0] == "i32"

    def widen(a):
        return a[1].astype(np.int64) if marker(a) else a
    return tuple(tuple(widen(b) for b in a) if isinstance(a, tuple) and not marker(a) else widen(a) for a in out)


def _lean(arg):
    """A task's argument without what the task does not use: a profile's sample (the
    plan's, up to millions of rows) would be serialized into every task; a unit plan's
    mixed-type encoding (``UnitPlan.reduce``) travels as ``_task_encoding``'s copy."""
    if isinstance(arg, functools.partial):  # a unit function with its arguments bound
        return functools.partial(arg.func, *map(_lean, arg.args), **{k: _lean(v) for k, v in arg.keywords.items()})
    if isinstance(arg, Profile) and arg.sample is not None:
        return dataclasses.replace(arg, sample=None, sample_ids=None)
    if isinstance(arg, UnitPlan) and isinstance(arg.reduce, Mixed):
        return dataclasses.replace(arg, reduce=_task_encoding(arg.reduce))
    return arg


# --- mixed-type QIs (engine.encode.mixed) in the tasks ----------------------------------

def _task_encoding(mixed: Mixed) -> Mixed:
    """A copy of the run's mixed-type encoding for the tasks (``encode.mixed.Mixed``):
    what the client learnt and measured (the QIs with their dictionaries, the encoded
    columns, the measured profile) travels as it is; not the client's source (its
    encoded source reads a stand-in of the input's label and schema: a task wraps its
    own range, ``EncodedSource(range, encoding)``), nor a profile's sample, nor a
    ``distributed.Client`` in its configs (``scheduler``)."""
    lean = copy.copy(mixed)
    for name, v in list(vars(lean).items()):
        if isinstance(v, EncodedSource):  # (errors name the input: its label)
            base = v.base
            stand_in = RangeSource(base.label, base.schema, None, (), 0, 0)
            setattr(lean, name, EncodedSource(stand_in, lean))
        elif isinstance(v, Profile):
            setattr(lean, name, _lean(v))
        elif dataclasses.is_dataclass(v) and not isinstance(v, type) and getattr(v, "scheduler", None) is not None:
            setattr(lean, name, dataclasses.replace(v, scheduler=None))
    return lean


MAPPED_BYTES = 1 << 20  # a write task memory-maps a publisher's arrays of a row a group of this size or more


@dataclasses.dataclass(frozen=True)
class _Mapped:
    """An array that a task memory-maps from the run's folder (``_save``)."""

    path: str

    def load(self) -> np.ndarray:
        return np.asarray(np.load(self.path, mmap_mode="c"))  # (copy on write: the file stays as saved)


def _task_publisher(publisher, folder: str, groups: int):
    """A copy of the client's ``encode.publish.Publisher`` for the write tasks: its
    arrays of a row a group (``groups`` rows: the published table, the Datetime QIs'
    exact means) of ``MAPPED_BYTES`` or more saved once in the run's folder and
    memory-mapped by each task (``_unshipped``), its encoding ``_task_encoding``'s, its
    other arrays copied (the sums a task adds to are its own, never the client's)."""
    count = [0]

    def ship(v):
        if isinstance(v, np.ndarray):
            if v.ndim == 0 or v.shape[0] != groups or v.nbytes < MAPPED_BYTES:
                return v.copy()
            count[0] += 1
            return _Mapped(_save(folder, f"published-{count[0]}", v))
        if isinstance(v, Mixed):
            return _task_encoding(v)
        if isinstance(v, dict):
            return {key: ship(a) for key, a in v.items()}
        if isinstance(v, (list, tuple)) and not isinstance(v, str):
            return type(v)(ship(a) for a in v) if not hasattr(v, "_fields") else v
        return v

    pub = copy.copy(publisher)
    for name, v in list(vars(pub).items()):
        setattr(pub, name, ship(v))
    return pub


def _unshipped(publisher):
    """The publisher a write task uses: ``_task_publisher``'s with its arrays mapped,
    the small ones copied (a task Dask runs again starts from the same values)."""
    def load(v):
        if isinstance(v, _Mapped):
            return v.load()
        if isinstance(v, np.ndarray):
            return v.copy()
        if isinstance(v, dict):
            return {key: load(a) for key, a in v.items()}
        if isinstance(v, (list, tuple)) and not isinstance(v, str) and not hasattr(v, "_fields"):
            return type(v)(load(a) for a in v)
        return v

    pub = copy.copy(publisher)
    for name, v in list(vars(pub).items()):
        setattr(pub, name, load(v))
    return pub


class _Shifted:
    """A write task's publisher: its chunks' offsets (counted from its range's first
    row) given as the input's row numbers."""

    def __init__(self, publisher, first: int):
        self._publisher, self._first = publisher, first

    def publish(self, frame, lab, offset):
        return self._publisher.publish(frame, lab, offset + self._first)

    def __getattr__(self, name):
        return getattr(self._publisher, name)


def _publisher_sums(publisher, source, labels, rows: int, chunk_rows: int) -> None:
    """The client's share of a mixed write pass: ``publisher.publish`` on the input's
    QI columns that the write pass reads (all but ``publisher.unread``), chunk by chunk
    in row order, so that its loss sums (``publisher.finish``) are the single-machine
    run's to the bit (the parts' sums, added, would round differently); the published
    frames are dropped (the tasks write theirs). None to read: nothing to sum."""
    read = [c for c in publisher.columns if c not in set(publisher.unread)]
    if not read:
        return
    for offset, frame in source.iter_frames(read, chunk_rows, prefetch=True, native=True):
        lab = labels[offset: offset + frame.height]
        if lab.shape[0] != frame.height:
            raise EngineError(f"{source.label} changed during the run: it now has more than the "
                              f"{rows:,} rows counted by the first pass")
        publisher.publish(frame, lab, offset)


def _save(folder: str, name: str, a: np.ndarray) -> str:
    path = os.path.join(folder, f"{name}.npy")
    tmp = f"{path}.{uuid.uuid4().hex}.tmp"
    with open(tmp, "wb", opener=private_opener) as fh:
        np.save(fh, np.asarray(a))
    os.replace(tmp, path)
    return path


@dataclasses.dataclass(frozen=True)
class RangeSource:
    """A range of whole row groups of a Parquet input, read on a worker by the
    partition and write passes (an ``io.source.Source``; offsets are the input's row
    numbers)."""

    label: str
    schema: pl.Schema
    folder: object                # io.schema.FolderSchema or None
    pieces: tuple                 # (path, first row group, end row group)
    first: int                    # the input's row number of the range's first row
    rows: int
    kind = "parquet"

    @property
    def paths(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(path for path, _, _ in self.pieces))

    @property
    def base(self) -> "RangeSource":
        return self

    @property
    def columns(self) -> list[str]:
        return list(self.schema.names())

    def count_rows(self) -> int:
        return self.rows

    def bounded(self, piece_bytes: int | None) -> "RangeSource":
        return self  # (whole row groups: the pieces are bounded already)

    def adjust_profile(self, profile: ProfileT) -> ProfileT:
        return profile

    def iter_frames(self, columns, chunk_rows: int, prefetch: bool = False,
                    native: bool = False) -> Iterator[tuple[int, pl.DataFrame]]:
        frames = self._frames(columns, chunk_rows)
        return read_ahead(frames) if prefetch else frames

    def iter_arrays(self, columns: Sequence[str], chunk_rows: int,
                    prefetch: bool = False) -> Iterator[tuple[int, np.ndarray]]:
        cols = list(columns)
        arrays = ((offset, frame_to_array(frame, cols)) for offset, frame in self.iter_frames(cols, chunk_rows))
        return read_ahead(arrays) if prefetch else arrays

    def _have(self, path: str) -> pl.Schema:
        return self.folder.file_schema(path) if self.folder is not None else self.schema

    def dictionary_columns(self, text: Sequence[str]) -> bool:
        """``io.source.TableSource.dictionary_columns``: every file of the range holds the
        String columns ``text`` as String (an ``encode.source.EncodedSource`` over the
        range then reads them as the pages' dictionary indices)."""
        if not self.pieces or not text:
            return False
        return all(c in self._have(p) and self._have(p)[c] == pl.String and self.schema[c] == pl.String
                   for p in self.paths for c in text)

    def iter_dictionary(self, columns: Sequence[str], text: Sequence[str], chunk_rows: int):
        """``io.source.TableSource.iter_dictionary`` over the range's row groups:
        ``(offset, frame of the other columns or None, {text column: DictionaryArray})``."""
        text = list(text)
        others = [c for c in columns if c not in set(text)]
        want = pl.Schema({c: self.schema[c] for c in others})
        offset = self.first
        try:
            for path, g0, g1 in self.pieces:
                own = [c for c in others if c in self._have(path)]  # (``adapt`` adds the others as nulls)
                pf = pq.ParquetFile(path, read_dictionary=text)
                for b in pf.iter_batches(batch_size=chunk_rows, row_groups=range(g0, g1), columns=own + text,
                                         use_threads=True):
                    frame = None
                    if others:
                        frame = pl.DataFrame([pl.Series(c, b.column(c)) for c in own])  # (names kept as read)
                        frame = adapt(frame, want)
                    yield offset, frame, {c: b.column(c) for c in text}
                    offset += b.num_rows
        except EngineError:
            raise
        except Exception as exc:
            raise EngineError(f"cannot read {self.label}: {first_line(exc)}") from None

    def _frames(self, columns, chunk_rows):
        want = pl.Schema({c: self.schema[c] for c in (self.schema.names() if columns is None else columns)})
        offset = self.first
        try:
            for path, g0, g1 in self.pieces:
                have = self.folder.file_schema(path) if self.folder is not None else self.schema
                read = [c for c in want.names() if c in have] or list(have.names())[:1]
                for frame in row_group_slices(path, chunk_rows, None if len(read) == len(have) else read, (g0, g1)):
                    frame = adapt(frame, want)
                    yield offset, frame
                    offset += frame.height
        except EngineError:
            raise
        except Exception as exc:
            raise EngineError(f"cannot read {self.label}: {first_line(exc)}") from None


class PartStore:
    """The blocks of a run whose partition pass ran as tasks: block ``b``'s rows are its
    rows in every part file, in part order (the input's order). An ``io.spill.SpillStore``;
    picklable, so the aggregate tasks read their blocks themselves. ``expand`` as
    ``BlockStore``'s (mixed-type QIs: compact records, expanded when read; None: the
    values themselves are spilled)."""

    def __init__(self, n_blocks: int, d: int, folder: str, buffer_bytes: int, rows, expand=None):
        self.n_blocks, self.d, self.path = n_blocks, d, folder
        self.buffer_bytes, self.total = buffer_bytes, rows
        self.expand = expand
        self.rows = np.zeros(n_blocks, np.int64)
        self.parts: list[str] = []
        self.part_rows = self.part_narrow = self.offsets = None

    def set_parts(self, results) -> None:
        self.parts = [r[0] for r in results]
        self.part_rows = np.stack([r[1] for r in results])
        self.part_narrow = np.stack([r[2] for r in results])
        self.offsets = np.stack([r[3] for r in results])
        self.rows = self.part_rows.sum(axis=0)

    def units(self, min_rows: int) -> list[list[int]]:
        return units_of(self.rows, min_rows)

    def read(self, block: int, contiguous: bool = True, expand: bool = True):
        return self.read_many([block], contiguous, expand)

    def read_many(self, blocks, contiguous: bool = True, expand: bool = True):
        """Blocks concatenated in the order given, each in row order (C-contiguous);
        expanded by ``self.expand`` unless ``expand`` is False (as spilled)."""
        ids, X = self._read_many(blocks)
        return (ids, X) if self.expand is None or not expand else (ids, self.expand(X))

    def _read_many(self, blocks):
        b0, b1 = min(blocks), max(blocks) + 1
        bufs = []
        for p, path in enumerate(self.parts):  # one read per part file: a unit's blocks are consecutive
            lo, hi = int(self.offsets[p, b0]), int(self.offsets[p, b1])
            buf = np.empty(hi - lo, np.uint8)
            if hi > lo:
                try:
                    with open(path, "rb") as fh:
                        fh.seek(lo)
                        if fh.readinto(memoryview(buf)) != hi - lo:
                            raise EngineError(f"temporary block file {path} is damaged (short)")
                except OSError as exc:
                    raise EngineError(f"cannot read temporary data {path}: {os_reason(exc)}") from None
            bufs.append((lo, buf))
        ids, X = [], []
        for b in blocks:
            for p, (lo, buf) in enumerate(bufs):
                n = int(self.part_rows[p, b])
                if n:
                    raw = buf[int(self.offsets[p, b]) - lo: int(self.offsets[p, b + 1]) - lo]
                    i, x = decode_records(raw, n, int(self.part_narrow[p, b]), self.d, self.parts[p])
                    ids.append(i)
                    X.append(x)
        if not ids:
            return np.zeros(0, np.int64), np.zeros((0, self.d))
        if len(ids) == 1:
            return ids[0], X[0]
        return np.concatenate(ids), np.concatenate(X)

    def private_file(self, name: str, size: int):
        path = os.path.join(self.path, name)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                os.ftruncate(fd, size)
            finally:
                os.close(fd)
        except OSError as exc:
            raise EngineError(f"cannot write temporary data in {self.path}: {os_reason(exc)}") from None
        return path

    def discard(self) -> None:
        for p in self.parts:
            with contextlib.suppress(OSError):
                os.unlink(p)

    def close(self) -> None:
        self.discard()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def _local_dir(shared: str) -> str:
    """The worker's own disk for a partition task's block files (Dask's
    ``--local-directory``), packed from there into the shared folder; the shared
    folder when not in a worker."""
    try:
        from distributed import get_worker  # optional: the [dask] extra (a task runs on a worker)

        return get_worker().local_directory
    except (ImportError, ValueError):
        return shared


def _partition_task(src, profile, cols, plan, store: PartStore, index: int, chunk_rows: int):
    """Route and spill one range of rows (a ``RangeSource``, or for mixed-type QIs an
    ``encode.source.EncodedSource`` over one) into a private store (compact records
    when ``store.expand``), then pack it into one file (blocks in order) under a
    task-unique name, renamed to ``part-NNNNN.blocks``.
    Returns ``(path, rows per block, narrow rows per block, byte offsets)``."""
    final = os.path.join(store.path, f"part-{index:05d}.blocks")
    local = BlockStore(store.n_blocks, store.d, _local_dir(store.path), store.buffer_bytes, rows=store.total,
                       expand=store.expand)
    tmp = f"{final}.{uuid.uuid4().hex}.tmp"
    try:
        partition_pass(src, profile, cols, plan, local, chunk_rows, rows=src.base.rows)
        offsets = np.zeros(store.n_blocks + 1, np.int64)
        with open(tmp, "wb", opener=private_opener) as out:
            for b in range(store.n_blocks):
                if local.rows[b]:
                    with open(local.block_path(b), "rb") as fh:
                        shutil.copyfileobj(fh, out, 1 << 20)
                offsets[b + 1] = out.tell()
        os.replace(tmp, final)
        return final, local.rows.copy(), local.narrow_rows.copy(), offsets
    finally:
        local.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def _write_task(src: RangeSource, folder: str, index: int, profile, arrays: dict, sse, group_column,
                chunk_rows: int, k: int, publisher=None, derive=None):
    """The write pass over one range of rows into ``out-NNNNN.parquet`` (task-unique
    temporary name, renamed). ``publisher``: mixed-type QIs, the client's publisher
    (``_task_publisher``). Returns ``(path, rows, class keys, class counts, raw sums)``."""
    final = os.path.join(folder, f"out-{index:05d}.parquet")
    tmp = f"{final}.{uuid.uuid4().hex}.tmp"
    labels = np.asarray(np.load(arrays["labels"], mmap_mode="r")[src.first: src.first + src.rows])
    centroid = np.asarray(np.load(arrays["centroid"], mmap_mode="r")) if "centroid" in arrays else None
    groups = attach(Groups(labels, np.asarray(np.load(arrays["sizes"], mmap_mode="r")), centroid, sse=sse), derive)
    extra = {}
    if publisher is not None:  # (its chunks' offsets: the input's row numbers, as locally)
        extra["publisher"] = _Shifted(_unshipped(publisher), src.first)
    columns = list(profile.columns if publisher is None else publisher.columns)
    columns += list(derive.columns) if derive is not None else []
    src = dataclasses.replace(src, first=0)  # offsets into this range's labels
    part = dataclasses.replace(profile, rows=src.rows)
    counter = ClassCounter(columns, min(groups.count, src.rows // max(k, 1) + 1))
    raw: dict = {}
    try:
        write_pass(src, tmp, "parquet", part, groups, group_column, chunk_rows, counter=counter, raw=raw, **extra)
        os.replace(tmp, final)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    keys, counts = counter.classes()
    return final, src.rows, keys, counts, raw
