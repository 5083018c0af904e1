"""The passes' Dask side for one run (``DaskExecutor``, made by ``engine.cluster.open_executor``):
the Dask implementation of ``passes.executor.Executor``.

Data moves only through Dask: the partition tasks' blocks as slabs held by Dask
(``blocks``), the aggregate tasks' results and the write tasks' inputs and parts
between the client and the workers (``write``). Each task's data is bounded by
``task_bytes`` (a share of the workers' memory limit), not by the table: the input is
cut into more ranges, and the blocks into more slabs, when the table is larger.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import functools
import itertools
import logging
import shutil

from ..encode.mixed import Mixed
from ..encode.source import EncodedSource
from ..errors import EngineError, first_line
from ..frames import finish_sums, frame_to_columns, measured_sums
from .blocks import PartStore, submit_partition, unit_batch
from .connect import WORKER_WAIT_SECONDS
from .ranges import cut_ranges, row_groups
from .shipping import lean, task_encoding, widened
from .write import write_parts

log = logging.getLogger("engine")

PART_ROWS = 25_000_000  # a partition or write task's rows at most
TASKS_PER_WORKER = 8    # the aggregate pass's units in about this many tasks (slabs) per worker
TASK_SHARE = 4          # a task's data (its part, a batch's slabs, a write range's data and part) at most 1/4 ...
MAX_TASK_BYTES = 1 << 30  # ... of the least memory limit of the workers, and at most this
DEFAULT_WORKER_MEMORY = 4 << 30  # a worker's memory limit when none is known
WRITE_RETRIES = 3       # a write task whose data was lost with its worker is sent again at most so often


class _Resend(Exception):
    """A task's future was cancelled with its client still connected: data it needed
    (``client.scatter``'s, which Dask cannot compute again) was lost with a worker."""


class DaskExecutor:
    """The passes' Dask side for one run (module docstring).

    ``on_event(event, client)``, if given, is called at two points of the run (tests use
    it to kill a worker or the scheduler there): ``"aggregate"`` after the first aggregate
    task's results, ``"write"`` once the first write tasks are submitted."""

    lean = staticmethod(lean)
    in_process = False  # (passes.executor: the units run on the workers, the write pass too)
    keeps_row_map = "--scheduler"  # (the row-ordered plan needs this machine's write pass)

    def __init__(self, client, run_dir: str, memory_limit: int | None, on_event=None):
        self.client = client
        self.run_dir = run_dir  # the client's own folder: the label map, a part on its way into OUTPUT
        self.memory_limit = memory_limit
        self.parts: PartStore | None = None
        self.on_event = on_event

    def _event(self, name: str):
        """``on_event`` bound to ``name``, as ``ordered``'s ``started``/``first`` take it (or None)."""
        return None if self.on_event is None else functools.partial(self.on_event, name)

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

    def result(self, fut, resend: bool = False):
        """``fut.result()``, released after; a lost scheduler in one line (``talking``).
        ``resend``: a future cancelled while the client is connected raises ``_Resend``."""
        try:
            out = fut.result()
        except concurrent.futures.CancelledError as exc:
            if resend and getattr(exc, "reason", "") != "scheduler-connection-lost" and \
                    getattr(self.client, "status", None) == "running":
                raise _Resend() from None
            with self.talking():
                raise
        except Exception:
            with self.talking():
                raise
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

    def wait_for_workers(self) -> None:
        try:
            with self.talking():
                self.client.wait_for_workers(1, timeout=WORKER_WAIT_SECONDS)
        except (TimeoutError, OSError) as exc:
            raise EngineError(f"the Dask scheduler has no workers (--scheduler): {first_line(exc)}") from None

    @functools.cached_property
    def task_bytes(self) -> int:
        """A task's data at most: ``1 / TASK_SHARE`` of the least memory limit of the
        workers (or ``--memory-limit``, or ``DEFAULT_WORKER_MEMORY``), at most ``MAX_TASK_BYTES``."""
        with self.talking():
            limits = [w.get("memory_limit") or 0 for w in self.client.scheduler_info().get("workers", {}).values()]
        limit = min(limits) if limits and all(limits) else self.memory_limit or DEFAULT_WORKER_MEMORY
        return max(1, min(int(limit) // TASK_SHARE, MAX_TASK_BYTES))

    @staticmethod
    def check_source(source) -> None:
        """A source the workers can read: Parquet files."""
        if source.kind != "parquet" or not source.paths:
            raise EngineError(f"scheduler (--scheduler) reads Parquet files on the workers; {source.label} is "
                              f"{'a CSV file' if source.kind == 'csv' else 'an in-memory table'} "
                              f"(convert it to Parquet first)")

    def tasks(self, rows: int, row_bytes: float, fixed=lambda n: 0) -> int:
        """How many tasks for ``rows`` rows: one per worker, or more, in a multiple of the
        workers, so that each task gets at most ``PART_ROWS`` rows and ``task_bytes`` of
        data (``row_bytes`` a row, plus ``fixed(rows of the task)``)."""
        w = self.workers()
        count = max(w, -(-rows // PART_ROWS), -(-int(rows * row_bytes) // self.task_bytes))
        count = -(-count // w) * w
        while count < rows:
            n = -(-rows // count)
            if n * row_bytes + fixed(n) <= self.task_bytes:
                break
            count += w
        return count

    def write_ranges(self, source, groups: int, width: int) -> list:
        """The write tasks' ranges: a task receives 4 bytes a row and ``8 width`` bytes a
        group of its rows (at most ``min(rows, groups)``), and sends back its part (about
        the input's own compressed bytes a row)."""
        found = row_groups(source)
        rows = sum(g[2] for g in found)
        out_row = sum(g[3] for g in found) / max(rows, 1)
        count = self.tasks(rows, 4 + out_row, lambda n: 8 * width * min(n, groups))
        return cut_ranges(source, found, count)

    # --- partition ----------------------------------------------------------------

    def store(self, n_blocks: int, d: int, folder=None, buffer_bytes: int = 32 << 20, *, rows=None, expand=None):
        """The blocks' store (``blocks.PartStore``): slabs enough that an aggregate task's
        blocks (a slab of every part) stay within half of ``task_bytes``. ``expand``
        (mixed-type QIs: ``encode.mixed.Mixed.expand``): the parts hold compact records
        (one value a QI), expanded when read, by the encoding's copy that travels to the
        tasks (``task_encoding``)."""
        owner = getattr(expand, "__self__", None)
        if isinstance(owner, Mixed):
            expand = task_encoding(owner).expand
        table = (rows or 0) * 4 * (1 + d)  # (narrow records)
        slabs = max(TASKS_PER_WORKER * self.workers(), -(-table // max(self.task_bytes // 2, 1)))
        self.parts = PartStore(self, n_blocks, d, self.run_dir, buffer_bytes, rows, expand, slabs)
        return self.parts

    def partition_pass(self, source, profile, cols, plan, store, chunk_rows, progress=False, *, moments=None,
                       rows=None, dist=None) -> None:
        """``passes.partition.partition_pass`` as tasks (one per range of row groups,
        ``blocks.partition_task``); the client does ``moments`` (pass 1's checks and sums,
        in row order) and ``dist`` on its way meanwhile. Mixed-type QIs (a store that
        expands its records, the source an ``encode.source.EncodedSource``): each task
        reads its range through the encoding (its compact columns, ``iter_codes``), as
        the client's moments do."""
        compact = store.expand is not None
        base = source.base
        found = row_groups(base)
        ranges = cut_ranges(base, found, self.tasks(sum(g[2] for g in found), 4 * (1 + store.d)))
        if compact:
            encoding = task_encoding(source.mixed)
            ranges = [EncodedSource(r, encoding) for r in ranges]
        with self.talking():
            metas, slabs = submit_partition(self.client, ranges, lean(profile), cols, plan, store.spec, chunk_rows)
        try:
            if moments is not None or dist is not None:
                self._client_moments(source, profile, chunk_rows, compact, moments, dist)
            store.set_parts([self.result(m) for m in metas], slabs)
        except BaseException:
            self.cancel(metas + [f for part in slabs for f in part])
            raise

    @staticmethod
    def _client_moments(source, profile, chunk_rows, compact, moments, dist) -> None:
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

    # --- tasks in order -------------------------------------------------------------

    def ordered(self, items, submit, *, started=None, first=None, retry: bool = False):
        """``(i, result)`` of ``submit(items[i])`` (a future) for every item, in order: at
        most two tasks per worker waiting, so finished results do not pile up on the
        workers. ``retry``: a task whose data was lost with its worker is submitted again
        (``WRITE_RETRIES`` times at most). ``started(client)`` once the first tasks are
        submitted, ``first(client)`` after the first result (tests)."""
        window = 2 * self.workers() + 1
        pending: collections.deque = collections.deque()
        i = 0
        try:
            while i < len(items) or pending:
                while i < len(items) and len(pending) < window:
                    pending.append([i, submit(items[i]), 0])
                    i += 1
                if started is not None:
                    started, call = None, started
                    call(self.client)
                j, fut, tries = pending[0]
                try:
                    out = self.result(fut, resend=retry and tries < WRITE_RETRIES)
                except _Resend:
                    log.info("a task's data was lost with its worker: task %d sent again", j)
                    pending[0] = [j, submit(items[j]), tries + 1]
                    continue
                pending.popleft()
                if first is not None:
                    first, call = None, first
                    call(self.client)
                yield j, out
        except BaseException:
            self.cancel([p[1] for p in pending])
            raise

    def unit_work(self, block):
        """No block function of the flow's (the registry's travels with each task), and
        ``map_ordered`` as the units' mapper (``passes.executor.Executor``)."""
        return None, self.map_ordered

    def map_ordered(self, fn, units):
        """``fn(unit)`` for every unit, results in unit order (``passes.aggregate.aggregate_units``'
        mapper): ``fn`` is ``aggregate_unit`` with its store bound, a ``PartStore``. One task
        a slab (``blocks.unit_batch``): the units that begin in it, their blocks read from
        the slabs they lie in, which Dask gives the task. With ``aggregate_blocks``' sums
        (``want_sums``) no pass reads a block after this one (the stitch and a stratum's
        loss take the tasks' sums), so each slab is released once its last task is done."""
        store = fn.keywords["store"]
        bare = lean(functools.partial(fn.func, *fn.args, **{k: v for k, v in fn.keywords.items() if k != "store"}))
        batches = []
        for _, idx in itertools.groupby(range(len(units)), key=lambda u: store.slab_of(units[u][0])):
            us = [units[u] for u in idx]
            batches.append((us, *store.span([b for u in us for b in u])))
        last = {s: n for n, (_, s0, s1) in enumerate(batches) for s in range(s0, s1 + 1)}
        once = bool(fn.keywords.get("want_sums"))

        def submit(batch):
            us, s0, s1 = batch
            with self.talking():
                return self.client.submit(unit_batch, bare, us, store.reader(s0, s1), store.futures(s0, s1),
                                          pure=False)

        for n, results in self.ordered(batches, submit, first=self._event("aggregate")):
            if once:
                store.release([s for s in range(batches[n][1], batches[n][2] + 1) if last[s] == n])
            for r in results:
                yield widened(r)

    # --- write --------------------------------------------------------------------

    def write_pass(self, source, path, fmt, profile, groups, group_column, chunk_rows, progress=False, *,
                   k=None, verified=None, publisher=None):
        """``passes.write.write_pass`` as tasks (``write.write_parts``), each writing a
        Parquet part of a range of rows; the parts are copied in order into ``path`` (or
        written into the folder ``path``, fmt "folder"). Same return value.

        ``publisher`` (mixed-type QIs: ``encode.publish.Publisher``, made on the client from
        the groups): a copy travels to every task with the range's groups' rows of its
        table, and publishes the range's rows; the information loss is the client's, its
        publisher fed the input's read columns in row order while the tasks run: the
        local run's figures."""
        if path is None or fmt not in ("parquet", "folder"):  # checked up front (check_output): a bug if reached
            raise EngineError("scheduler (--scheduler) writes a Parquet OUTPUT")
        if self.parts is not None:  # the write pass reads the input, not the blocks
            self.parts.discard()
        checked, (sse, s, q) = write_parts(self, source, path, fmt, profile, groups, group_column, chunk_rows, k,
                                           publisher, started=self._event("write"))
        if verified is not None:
            verified.update(checked)
        if publisher is not None:
            col_sse, col_sst = publisher.finish()
        elif groups.sse is not None:
            col_sse, col_sst = measured_sums(groups.sse, profile.sd, profile.rows)
        else:  # each part's sums, added in part order (the report's IL may differ in the last digits)
            col_sse, col_sst = finish_sums(sse, s, q, profile.sd, profile.rows)
        return float(col_sse.sum()), float(col_sst.sum()), None, col_sse, col_sst

    def close(self) -> None:
        if self.parts is not None:
            self.parts.close()
        shutil.rmtree(self.run_dir, ignore_errors=True)

