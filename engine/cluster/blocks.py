"""The spilled blocks of a run whose partition pass runs as Dask tasks, held by Dask.

A partition task routes its range of rows into a private ``io.spill.BlockStore`` on
its worker's own disk (Dask's ``local_directory``), then returns them packed in
*slabs*: the blocks cut into consecutive spans the same for every task (``edges``),
slab ``s`` of a task holding blocks ``edges[s]..edges[s + 1] - 1``, block after
block, each block's rows in input order. Each slab is a Dask result of its own
(a ``getitem`` of the task's result), so Dask moves it to the task that needs it,
spills it to its worker's disk under memory pressure, and computes it again (the
partition task again) if its worker dies. No folder is shared.

* ``PartStore`` (the client's): the blocks as an ``io.spill.SpillStore`` (rows per
  block, units, ``read_many``: the slabs a read needs gathered to the client and
  kept while the next reads use them), the slabs' futures, and for every span of
  slabs a ``SlabReader``;
* ``SlabReader`` (a task's): the blocks of a span of slabs from every part, read
  from the slabs given to the task (``unit_batch``: the aggregate pass's units).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import operator
import os
import tempfile
from pathlib import Path
from typing import Callable

import numpy as np

from ..errors import EngineError
from ..io.spill import BlockStore, decode_records, units_of
from ..io.tempfiles import os_reason
from ..passes.partition import partition_pass
from .shipping import narrowed


def slab_edges(n_blocks: int, slabs: int) -> np.ndarray:
    """The first block of each of ``slabs`` spans of consecutive blocks (as equal as
    counts allow), then ``n_blocks``."""
    slabs = max(1, min(slabs, n_blocks))
    return (np.arange(slabs + 1, dtype=np.int64) * n_blocks) // slabs


def worker_dir() -> str:
    """A task's own disk: its worker's ``local_directory`` (never a folder of the client)."""
    try:
        from distributed import get_worker  # optional: the [dask] extra (a task runs on a worker)

        return get_worker().local_directory
    except (ImportError, ValueError):
        return tempfile.gettempdir()


@dataclasses.dataclass(frozen=True)
class PartSpec:
    """What a partition task needs to know of the store: the plan's blocks, the record
    width, the spill buffers, the table's rows (narrow records below 2^32), the
    encoding's ``expand`` (compact records) and the slabs' block edges."""

    n_blocks: int
    d: int
    buffer_bytes: int
    rows: int | None
    expand: Callable | None
    edges: np.ndarray


def partition_task(src, profile, cols, plan, spec: PartSpec, chunk_rows: int) -> tuple:
    """Route and spill one range of rows (a ``RangeSource``, or for mixed-type QIs an
    ``encode.source.EncodedSource`` over one) into a private store on the worker's disk,
    then pack it into slabs. Returns ``((rows per block, narrow rows per block, byte
    offsets of each block in the packed part), slab 0, slab 1, ...)``, each slab a
    uint8 array; the store is removed before it returns."""
    local = BlockStore(spec.n_blocks, spec.d, worker_dir(), spec.buffer_bytes, rows=spec.rows, expand=spec.expand)
    try:
        partition_pass(src, profile, cols, plan, local, chunk_rows, rows=src.base.rows)
        offsets = np.zeros(spec.n_blocks + 1, np.int64)
        slabs = [_slab(local, int(spec.edges[s]), int(spec.edges[s + 1]), offsets)
                 for s in range(spec.edges.shape[0] - 1)]
        return ((local.rows.copy(), local.narrow_rows.copy(), offsets), *slabs)
    finally:
        local.close()


def _slab(local: BlockStore, b0: int, b1: int, offsets: np.ndarray) -> np.ndarray:
    """Blocks ``b0..b1 - 1`` of ``local`` packed in one array, their byte offsets (from the
    part's first block) set in ``offsets``."""
    try:
        sizes = [os.path.getsize(local.block_path(b)) if local.rows[b] else 0 for b in range(b0, b1)]
        offsets[b0 + 1: b1 + 1] = offsets[b0] + np.cumsum(sizes)
        slab = np.empty(int(offsets[b1] - offsets[b0]), np.uint8)
        for b, n in zip(range(b0, b1), sizes):
            if n:
                lo = int(offsets[b] - offsets[b0])
                with open(local.block_path(b), "rb") as fh:
                    if fh.readinto(memoryview(slab[lo: lo + n])) != n:
                        raise EngineError(f"temporary block file {local.block_path(b)} is damaged (short)")
    except OSError as exc:
        raise EngineError(f"cannot read temporary data in {local.path}: {os_reason(exc)}") from None
    return slab


@dataclasses.dataclass(frozen=True)
class SlabReader:
    """The blocks ``first..first + rows.shape[1] - 1`` (a span of whole slabs) of every
    part, read from ``buffers`` (one uint8 array a part: its slabs of the span, in
    order). An ``io.spill.SpillStore`` for ``passes.aggregate.aggregate_unit``; the
    client's ``PartStore`` makes one per span, without buffers (they travel as Dask
    data: ``unit_batch``)."""

    d: int
    expand: Callable | None
    first: int
    rows: np.ndarray      # (parts, blocks of the span): rows of each block in each part
    narrow: np.ndarray    # (parts, blocks): of which the first so many records are narrow
    offsets: np.ndarray   # (parts, blocks + 1): byte offsets in the part's buffer
    buffers: tuple = ()

    def read(self, block: int, contiguous: bool = True, expand: bool = True):
        return self.read_many([block], contiguous, expand)

    def read_many(self, blocks, contiguous: bool = True, expand: bool = True):
        """Blocks concatenated in the order given, each its rows in every part, parts in
        input order (C-contiguous); expanded by ``self.expand`` unless ``expand`` is
        False (as spilled)."""
        ids, X = [], []
        for b in blocks:
            j = b - self.first
            for p, buf in enumerate(self.buffers):
                n = int(self.rows[p, j])
                if n:
                    raw = buf[int(self.offsets[p, j]): int(self.offsets[p, j + 1])]
                    i, x = decode_records(raw, n, int(self.narrow[p, j]), self.d, f"(block {b} of part {p})")
                    ids.append(i)
                    X.append(x)
        if not ids:
            ids, X = np.zeros(0, np.int64), np.zeros((0, self.d))
        elif len(ids) == 1:
            ids, X = ids[0], X[0]
        else:
            ids, X = np.concatenate(ids), np.concatenate(X)
        return (ids, X) if self.expand is None or not expand else (ids, self.expand(X))


def unit_batch(fn: functools.partial, units, reader: SlabReader, slabs: list):
    """A task of the aggregate pass: ``fn`` (``aggregate_unit`` with its arguments bound)
    on each unit, its blocks read by ``reader`` from ``slabs`` (per part, the span's
    slabs, as Dask gave them to the task); results ``narrowed``."""
    buffers = tuple(s[0] if len(s) == 1 else np.concatenate(s) for s in slabs)
    fn = functools.partial(fn.func, *fn.args, **{**fn.keywords, "store": dataclasses.replace(reader, buffers=buffers)})
    return [narrowed(fn(u)) for u in units]


class PartStore:
    """The client's view of the blocks of a run whose partition pass ran as tasks (module
    docstring): an ``io.spill.SpillStore``. ``expand`` as ``BlockStore``'s (mixed-type
    QIs: compact records, expanded when read; None: the values themselves are
    spilled). ``path`` is the client's own folder (the label map's file, ``private_file``)."""

    def __init__(self, backend, n_blocks: int, d: int, folder: str, buffer_bytes: int, rows, expand, slabs: int):
        self.backend = backend
        self.n_blocks, self.d, self.path = n_blocks, d, Path(folder)
        self.buffer_bytes, self.total = buffer_bytes, rows
        self.expand = expand
        self.edges = slab_edges(n_blocks, slabs)
        self.rows = np.zeros(n_blocks, np.int64)
        self.slabs: list[list] = []  # [part][slab]: Dask futures
        self.part_rows = self.part_narrow = self.offsets = None
        self._held: dict[int, list[np.ndarray]] = {}  # slabs gathered to the client (``read_many``)

    @property
    def spec(self) -> PartSpec:
        return PartSpec(self.n_blocks, self.d, self.buffer_bytes, self.total, self.expand, self.edges)

    def set_parts(self, metas, slabs) -> None:
        self.slabs = slabs
        self.part_rows = np.stack([m[0] for m in metas])
        self.part_narrow = np.stack([m[1] for m in metas])
        self.offsets = np.stack([m[2] for m in metas])
        self.rows = self.part_rows.sum(axis=0)

    def slab_of(self, block: int) -> int:
        return int(np.searchsorted(self.edges, block, side="right")) - 1

    def span(self, blocks) -> tuple[int, int]:
        """The slabs ``s0..s1`` holding ``blocks``."""
        return self.slab_of(min(blocks)), self.slab_of(max(blocks))

    def reader(self, s0: int, s1: int) -> SlabReader:
        """A reader of slabs ``s0..s1`` of every part, without buffers."""
        b0, b1 = int(self.edges[s0]), int(self.edges[s1 + 1])
        off = self.offsets[:, b0: b1 + 1]
        return SlabReader(self.d, self.expand, b0, self.part_rows[:, b0:b1], self.part_narrow[:, b0:b1],
                          off - off[:, :1])

    def futures(self, s0: int, s1: int) -> list[list]:
        """Per part, the futures of slabs ``s0..s1`` (a task's argument: Dask gives it the data)."""
        return [part[s0: s1 + 1] for part in self.slabs]

    def release(self, slabs) -> None:
        """Slabs no pass reads again: their memory freed on the workers."""
        for part in self.slabs:
            for s in slabs:
                if part[s] is not None:
                    with contextlib.suppress(Exception):
                        part[s].release()
                    part[s] = None

    def units(self, min_rows: int) -> list[list[int]]:
        return units_of(self.rows, min_rows)

    def read(self, block: int, contiguous: bool = True, expand: bool = True):
        return self.read_many([block], contiguous, expand)

    def read_many(self, blocks, contiguous: bool = True, expand: bool = True):
        """The blocks on the client (the stitch, refinement, a stratum's loss): the slabs
        they lie in gathered from the workers and held until a read needs others (the
        passes read in block order, so each slab comes about once a pass)."""
        s0, s1 = self.span(blocks)
        for s in [s for s in self._held if not s0 <= s <= s1]:
            del self._held[s]
        want = [s for s in range(s0, s1 + 1) if s not in self._held]
        if want:
            futures = [self.slabs[p][s] for s in want for p in range(len(self.slabs))]
            if any(f is None for f in futures):
                raise EngineError("internal check failed: a released slab was read")  # (none is read again)
            with self.backend.talking():
                data = self.backend.client.gather(futures)
            P = len(self.slabs)
            for i, s in enumerate(want):
                self._held[s] = data[i * P: (i + 1) * P]
        buffers = tuple(
            self._held[s0][p] if s1 == s0 else np.concatenate([self._held[s][p] for s in range(s0, s1 + 1)])
            for p in range(len(self.slabs)))
        return dataclasses.replace(self.reader(s0, s1), buffers=buffers).read_many(blocks, contiguous, expand)

    def private_file(self, name: str, size: int) -> Path:
        """A new file of ``size`` bytes (mode 0600) in the client's folder (the label map)."""
        path = self.path / name
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
        """The blocks are no longer needed: every slab released, none held here."""
        self._held.clear()
        self.release(range(self.edges.shape[0] - 1))

    def close(self) -> None:
        self.discard()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def submit_partition(client, ranges, profile, cols, plan, spec: PartSpec, chunk_rows: int):
    """One ``partition_task`` a range; returns ``(futures of each part's block counts and
    offsets, [part][slab] futures)``. The tasks' own futures are released at once: Dask
    keeps a task's result until its slabs are taken out of it, and computes the task
    again for a slab lost with its worker."""
    metas, slabs = [], []
    for r in ranges:
        task = client.submit(partition_task, r, profile, cols, plan, spec, chunk_rows, pure=False)
        metas.append(client.submit(operator.getitem, task, 0))
        slabs.append([client.submit(operator.getitem, task, 1 + s) for s in range(spec.edges.shape[0] - 1)])
        task.release()
    return metas, slabs
