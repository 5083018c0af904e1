"""Spilled blocks: each block's rows (global row id + QI values) in a private temp folder.

One binary file per block holds records of ``1 + d`` slots: the row id, then the
QI values in original units. Records are narrow (float32 slots, the row id's
uint32 bits first) while every value spilled so far is exactly a float32 and the
table has fewer than 2^32 rows, which halves the bytes written and read back;
the first chunk holding a value that is not (``widen``) switches the store to
wide records (float64 slots, the row id's int64 bits first) for the rest of the
run, so a block's file is its narrow records, then its wide ones. Either way
``read`` returns the values exactly as they were appended. Rows are appended in
input order, so a block's content does not depend on the chunk size. Appends are
buffered (``buffer_bytes`` in all) so that thousands of blocks cost few writes;
a full buffer is written by a background thread (file writes release the GIL)
while the caller goes on, one buffer at a time; ``flush`` waits for everything.
The folder is created with mode 0700 and removed by ``close`` (also on errors).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
from pathlib import Path
from typing import Callable, Protocol, Sequence

import numpy as np

from ..errors import EngineError
from ..kernels.published import merge_segments
from .tempfiles import SPILL_PREFIX, clean_stale, os_reason, private_dir, private_opener

__all__ = ["SPILL_PREFIX", "BlockStore", "MemoryBlocks", "RunFile", "RunStore", "SpillStore"]


class SpillStore(Protocol):
    """The blocks as the passes after the partition read them: ``BlockStore`` (spilled
    to files), ``MemoryBlocks`` (one block in memory), ``engine.cluster.PartStore``
    (the part files of Dask tasks). A block's rows come in row order."""

    n_blocks: int
    d: int  # values a record holds (before ``expand``)
    rows: np.ndarray  # (n_blocks,) int64: rows per block
    # None, or what turns the records' compact values (m, d) into the values ``read``
    # returns (``engine.encode.mixed``: category codes -> the encoded columns)
    expand: Callable[[np.ndarray], np.ndarray] | None

    def read(self, block: int, contiguous: bool = True, expand: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """``(row ids int64, X float64 (m, d))`` of one block (``expand`` False: the values
        as spilled)."""
        ...

    def read_many(self, blocks: Sequence[int], contiguous: bool = True,
                  expand: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """Several blocks, concatenated in the order given (see ``read``)."""
        ...

    def units(self, min_rows: int) -> list[list[int]]:
        """Consecutive blocks grouped into units of at least ``min_rows`` rows."""
        ...

    def discard(self) -> None:
        """The blocks are no longer needed (``close`` still follows)."""
        ...

    def close(self) -> None: ...


def _write_all(fd: int, views: list) -> None:
    """Write the buffers in order with as few system calls as possible (no concatenated
    copy); a short write goes on where it stopped, a full disk raises ENOSPC (not
    ndarray.tofile, which reports a short write without errno)."""
    while views:
        n = os.writev(fd, views[:512])
        while views and n >= len(views[0]):
            n -= len(views[0])
            views.pop(0)
        if n:
            views[0] = views[0][n:]


class BlockStore:
    def __init__(self, n_blocks: int, d: int, folder: str | os.PathLike | None = None,
                 buffer_bytes: int = 32 << 20, *, rows: int | None = None, expand=None):
        """``rows``: the table's row count, when known; narrow records need it below 2^32.
        ``expand``: the records hold ``d`` compact values a row, which ``expand`` (an
        (m, d) float64 array -> (m, d') float64 C-contiguous, row by row) turns into
        the values ``read`` returns (``engine.encode.mixed``: category codes -> the encoded
        columns); None: ``read`` returns the values spilled."""
        clean_stale(folder)  # spill folders of killed runs
        self.path = Path(private_dir(folder))
        self.n_blocks = n_blocks
        self.d = d
        self.expand = expand
        self.rows = np.zeros(n_blocks, np.int64)
        self.narrow = rows is not None and rows < 2 ** 32
        self.narrow_rows = np.zeros(n_blocks, np.int64)  # the first narrow_rows[b] records of b are narrow
        self._buf: dict[int, list[np.ndarray]] = {}
        self._buffered = 0
        self.buffer_bytes = buffer_bytes
        self._writer: threading.Thread | None = None
        self._error: BaseException | None = None
        self._owned: list[np.ndarray] = []  # whole-chunk buffers (``append_chunk``) in ``_buf``
        self._free: list[np.ndarray] = []   # ... written out: reused by ``buffer``
        self._remover: threading.Thread | None = None  # ``discard``

    def block_path(self, block: int) -> Path:
        """The file of block ``block``'s records."""
        return self.path / f"block-{block:06d}.bin"

    def records(self, row_ids: np.ndarray, X: np.ndarray) -> np.ndarray:
        """The spill records of some rows: (m, 1 + d) float64, the row id's int64 bits first."""
        rec = np.empty((row_ids.shape[0], 1 + self.d), np.float64)
        rec.view(np.int64)[:, 0] = row_ids
        rec[:, 1:] = X
        return rec

    def append(self, block: int, row_ids: np.ndarray, X: np.ndarray) -> None:
        self.append_records(block, self.records(row_ids, X))

    def widen(self) -> None:
        """From now on records are wide (float64): a value that is not a float32 is coming."""
        self.narrow = False
        self._free = [b for b in self._free if b.dtype == np.float64]

    def append_records(self, block: int, rec: np.ndarray, *, flush: bool = True) -> None:
        """Append records (from ``records`` or ``buffer``; a view is kept until the next
        flush). Wide records widen the store; narrow ones need a narrow store."""
        m = rec.shape[0]
        if m == 0:
            return
        if rec.dtype == np.float32:
            if not self.narrow:
                raise ValueError("narrow records appended to a widened store")
            self.narrow_rows[block] += m
        elif self.narrow:
            self.widen()
        self._buf.setdefault(block, []).append(rec)
        self.rows[block] += m
        self._buffered += rec.nbytes
        if flush and self._buffered >= self.buffer_bytes:
            self._flush_async()

    def buffer(self, rows: int) -> np.ndarray:
        """A (rows, 1 + d) array for ``append_chunk``, float32 while the store is narrow,
        else float64: a buffer of an earlier chunk once it is written (no fresh pages
        per chunk), else a new one."""
        dtype = np.float32 if self.narrow else np.float64
        for i, b in enumerate(self._free):
            if b.dtype == dtype and b.shape[0] >= rows:
                return self._free.pop(i)[:rows]
        return np.empty((rows, 1 + self.d), dtype)

    def append_chunk(self, rec: np.ndarray, start: np.ndarray) -> None:
        """Append a chunk's records sorted by block (``rec`` from ``buffer``; block b's rows
        are ``rec[start[b]:start[b + 1]]``). The store owns ``rec`` from now on."""
        for b in np.flatnonzero(np.diff(start)):
            self.append_records(int(b), rec[start[b]: start[b + 1]], flush=False)
        self._owned.append(rec.base if rec.base is not None else rec)
        if self._buffered >= self.buffer_bytes:
            self._flush_async()

    def _write(self, buf: dict[int, list[np.ndarray]], owned: list[np.ndarray]) -> None:
        try:
            for block in sorted(buf):
                fd = private_opener(str(self.block_path(block)), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
                try:
                    _write_all(fd, [memoryview(np.ascontiguousarray(rec)).cast("B") for rec in buf[block]])
                finally:
                    os.close(fd)
            buf.clear()
            self._free.extend(owned)  # written: the chunk buffers can be filled again
        except BaseException as exc:  # reported by the caller's thread
            self._error = exc

    def _wait(self) -> None:
        if self._writer is not None:
            self._writer.join()
            self._writer = None
        if self._error is not None:
            exc, self._error = self._error, None
            if isinstance(exc, OSError):
                raise EngineError(f"cannot write temporary data in {self.path}: {os_reason(exc)}") from None
            raise exc

    def _flush_async(self) -> None:
        self._wait()  # one buffer in flight at a time
        buf, self._buf, self._buffered = self._buf, {}, 0
        owned, self._owned = self._owned, []
        self._writer = threading.Thread(target=self._write, args=(buf, owned), name="microagg-spill", daemon=True)
        self._writer.start()

    def flush(self) -> None:
        """Write everything appended so far; return when it is on file."""
        self._wait()
        buf, self._buf, self._buffered = self._buf, {}, 0
        self._write(buf, [])
        self._owned, self._free = [], []  # the pass is over: let the buffers go
        self._wait()

    def private_file(self, name: str, size: int) -> Path:
        """A new file of ``size`` bytes (mode 0600) in the folder, its space reserved now so
        that a full disk is an error here rather than a crash when it is mapped."""
        path = self.path / name
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                if size > 0:
                    os.posix_fallocate(fd, 0, size) if hasattr(os, "posix_fallocate") else os.ftruncate(fd, size)
            finally:
                os.close(fd)
        except OSError as exc:
            raise EngineError(f"cannot write temporary data in {self.path}: {os_reason(exc)}") from None
        return path

    def read(self, block: int, contiguous: bool = True, expand: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """``(row_ids int64, X float64 (m, d))`` of one block, in row order: C-contiguous
        arrays, or (``contiguous=False``, wide records only) strided views into the
        records read; with the store's ``expand`` (unless ``expand`` is False: the values
        as spilled), X is the expanded values (C-contiguous)."""
        ids, X = self._read(block, contiguous)
        return (ids, X) if self.expand is None or not expand else (ids, self.expand(X))

    def _read(self, block: int, contiguous: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """The records of one block as spilled (before ``expand``)."""
        n = int(self.rows[block])
        if n == 0:
            return np.zeros(0, np.int64), np.zeros((0, self.d))
        raw = np.fromfile(self.block_path(block), dtype=np.uint8)
        return decode_records(raw, n, int(self.narrow_rows[block]), self.d, self.block_path(block), contiguous)

    def read_many(self, blocks, contiguous: bool = True, expand: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """Several blocks, concatenated in the order given (see ``read``)."""
        if len(blocks) == 1:
            return self.read(blocks[0], contiguous, expand)
        parts = [self._read(b) for b in blocks]
        ids, X = np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
        return (ids, X) if self.expand is None or not expand else (ids, self.expand(X))

    def units(self, min_rows: int) -> list[list[int]]:
        """Consecutive blocks grouped so that each unit holds at least ``min_rows`` rows
        (a plan estimated from a sample can leave a block nearly empty); empty blocks
        are dropped. Neighbouring block numbers are neighbours in space."""
        return units_of(self.rows, min_rows)

    def discard(self) -> None:
        """The blocks are no longer needed: remove the folder on a background thread
        (hundreds of files; the next pass goes on meanwhile). ``close`` waits for it."""
        if self._writer is not None:
            self._writer.join()
            self._writer = None
        if self._remover is None:
            self._remover = threading.Thread(target=self._remove, args=(OSError,), name="microagg-spill-rm",
                                             daemon=True)
            self._remover.start()

    def _remove(self, ignore=FileNotFoundError) -> None:
        with contextlib.suppress(ignore):  # the thread ignores any OSError: close tries again, and reports
            shutil.rmtree(self.path)

    def close(self) -> None:
        if self._writer is not None:  # an error or Ctrl-C mid-pass: let the write finish first
            self._writer.join()
            self._writer = None
        self._buf.clear()
        self._owned, self._free = [], []
        if self._remover is not None:
            self._remover.join()
        self._remove()  # also what a discard's thread could not remove (a file being written)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


class RunFile:
    """Fixed-size records appended to ``buckets`` buckets, all kept in one temporary file.

    An append takes room in a buffer (``reserve``), which the caller fills with records
    sorted by bucket, then ``commit``s with where each bucket's records begin. A full
    buffer's segments are merged bucket by bucket into a second buffer
    (``kernels.published.merge_segments``: a bucket keeps the order of its appends),
    which a background thread writes at the end of the file as one run while the caller
    fills the first again (one run in flight). ``read(b)`` gathers bucket ``b``'s slice
    of every run, one read each, in run order. A run holds records of one size (a
    multiple of 4 bytes), which may change from one run to the next (``RunStore``:
    narrow records, then wide ones).

    Against a file a bucket: one write a buffer instead of one a bucket and buffer, which
    grew with the square of the rows (100M rows: 8,192 blocks x 100 buffers of the
    partition pass). The price: a read a run and bucket. The runs' index (where each
    run's buckets begin, 4 bytes a run and bucket, which grows with the square of the
    rows) is written beside the runs (``.idx``); reads load it ``WINDOW`` buckets at a
    time (readers go through the buckets in order), so memory holds ``4 x runs x
    WINDOW`` bytes of it."""

    WINDOW = 128  # buckets of the index loaded at a time

    def __init__(self, path, buckets: int, buffer_bytes: int):
        self.path = Path(path)
        self.buckets = int(buckets)
        self.buffer_bytes = max(int(buffer_bytes), 1 << 16)
        self.counts = np.zeros(self.buckets, np.int64)  # records a bucket, every run
        self._buf: list | None = None  # (filled, written) uint8 buffers, made at the first append
        self._segments: list[tuple[int, np.ndarray]] = []  # the filled buffer's: (first record, bucket starts)
        self._next: np.ndarray | None = None  # ``reserve_buckets``: each bucket's next row in the buffer
        self._part = 0  # ``reserve_buckets``: rows of the buffer a bucket's part holds
        self.itemsize = 0
        self.at = 0  # records in the filled buffer
        self._offsets: list[int] = []  # each run's place in the file and record size
        self._sizes: list[int] = []
        self._window: dict[int, np.ndarray] = {}  # the index's windows loaded (at most two)
        self._lock = threading.Lock()
        self._end = 0
        self._writer: threading.Thread | None = None
        self._error: BaseException | None = None
        self._fd = self._idx = None
        self._remover: threading.Thread | None = None  # ``discard``
        try:
            self._fd = private_opener(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL)
            self._idx = private_opener(self.path.with_suffix(".idx"), os.O_RDWR | os.O_CREAT | os.O_EXCL)
        except OSError as exc:
            self.close()
            raise EngineError(f"cannot write temporary data in {self.path.parent}: {os_reason(exc)}") from None

    def reserve(self, m: int, itemsize: int) -> np.ndarray:
        """Room for ``m`` records of ``itemsize`` bytes, (m, itemsize) uint8, to fill sorted
        by bucket and ``commit``. The buffer is written out first when it has no room left
        or holds records of another size."""
        if itemsize != self.itemsize:
            if self.at:
                self._flush_async()
            self.itemsize = itemsize
        if self._buf is None:
            self._buf = [np.empty(self.buffer_bytes, np.uint8), np.empty(self.buffer_bytes, np.uint8)]
        cap = self._buf[0].shape[0] // itemsize
        if self.at and self.at + m > cap:
            self._flush_async()
        if m > cap:  # one append larger than the buffer: both grow to hold it
            self._wait()
            self._buf = [np.empty(m * itemsize, np.uint8), np.empty(m * itemsize, np.uint8)]
        a = self.at
        return self._buf[0][a * itemsize: (a + m) * itemsize].reshape(m, itemsize)

    def commit(self, starts: np.ndarray) -> None:
        """The records reserved last are filled, bucket b's at ``starts[b]:starts[b + 1]``
        (``buckets + 1`` values, from 0 to the records appended)."""
        m = int(starts[-1])
        if m:
            self._segments.append((self.at, np.array(starts, np.int64)))
            self.at += m

    def reserve_buckets(self, counts: np.ndarray, itemsize: int) -> tuple[np.ndarray, np.ndarray]:
        """The other way to append (a file takes one or the other): records counted by
        bucket beforehand (``counts``), written by the caller straight into their bucket's
        part of the buffer (``buckets`` equal parts), so that no merge copies them again:
        ``(buffer (rows, itemsize) uint8, next (buckets,) int64)``, bucket b's next record at
        row ``next[b]``, which the caller advances as it writes
        (``kernels.published.fill_records``). The buffer is written out first when a part
        has no room left."""
        if self._buf is None:
            self._buf = [np.empty(self.buffer_bytes, np.uint8), np.empty(self.buffer_bytes, np.uint8)]
        if self._next is None:
            self.itemsize, self._part = itemsize, self._buf[0].shape[0] // itemsize // self.buckets
            self._next = np.arange(self.buckets, dtype=np.int64) * self._part
        base = np.arange(self.buckets, dtype=np.int64) * self._part
        if (self._next + counts > base + self._part).any():
            if (self._next > base).any():
                self._flush_parts()
            if int(counts.max()) > self._part:  # one append larger than a part: the buffers grow to hold it
                self._wait()
                self._buf = [np.empty(int(counts.max()) * self.buckets * itemsize, np.uint8) for _ in range(2)]
                self._part = int(counts.max())
                self._next = np.arange(self.buckets, dtype=np.int64) * self._part
        return self._buf[0][: self._part * self.buckets * itemsize].reshape(-1, itemsize), self._next

    def _flush_parts(self) -> None:
        """``reserve_buckets``' buffer as the next run: its parts' filled rows, in bucket
        order, written by a background thread while the other buffer is filled."""
        self._wait()
        size, base = self.itemsize, np.arange(self.buckets, dtype=np.int64) * self._part
        filled = self._next - base
        starts = np.concatenate([[0], np.cumsum(filled)])
        views = [self._buf[0][int(base[b]) * size: int(self._next[b]) * size] for b in np.flatnonzero(filled)]
        self._buf.reverse()  # (the filled one is written, the other filled meanwhile)
        self._next = base.copy()
        self._run(starts, size, views)

    def _flush_async(self) -> None:
        """Merge the filled buffer's segments by bucket into the other buffer and write
        that as the next run, with its line of the index, on a background thread; the
        filled one is free at once."""
        self._wait()  # (one run in flight: the other buffer is free)
        m, size = self.at, self.itemsize
        src = self._buf[0][: m * size].view(np.uint32).reshape(m, size // 4)
        dst = self._buf[1][: m * size].view(np.uint32).reshape(m, size // 4)
        starts = np.empty(self.buckets + 1, np.int64)
        merge_segments(src, np.array([s[0] for s in self._segments], np.int64),
                       np.stack([s[1] for s in self._segments]), dst, starts)
        self._segments = []
        self.at = 0
        self._run(starts, size, [self._buf[1][: m * size]])

    def _run(self, starts: np.ndarray, size: int, views: list) -> None:
        """Write ``views`` (a run of records of ``size`` bytes, each bucket's from
        ``starts``) at the end of the file, and its line of the index, on a thread."""
        self.counts += np.diff(starts)
        line = (len(self._offsets), starts.astype(np.int32))
        self._offsets.append(self._end)
        self._sizes.append(size)
        at, self._end = self._end, self._end + int(starts[-1]) * size
        self._window.clear()
        self._writer = threading.Thread(target=self._write, args=(views, at, line), name="microagg-spill",
                                        daemon=True)
        self._writer.start()

    def _write(self, views: list, at: int, line: tuple[int, np.ndarray]) -> None:
        try:
            for fd, bufs, pos in ((self._fd, views, at), (self._idx, [line[1]], line[0] * 4 * (self.buckets + 1))):
                bufs = [memoryview(b).cast("B") for b in bufs]
                while bufs:
                    n = os.pwritev(fd, bufs[:512], pos)
                    pos += n
                    while bufs and n >= bufs[0].nbytes:
                        n -= bufs[0].nbytes
                        bufs.pop(0)
                    if n:
                        bufs[0] = bufs[0][n:]
        except BaseException as exc:  # reported by the caller's thread
            self._error = exc

    def _wait(self) -> None:
        if self._writer is not None:
            self._writer.join()
            self._writer = None
        if self._error is not None:
            exc, self._error = self._error, None
            if isinstance(exc, OSError):
                raise EngineError(f"cannot write temporary data in {self.path.parent}: {os_reason(exc)}") from None
            raise exc

    def flush(self, release: bool = False) -> None:
        """Write everything appended so far; return when it is on file. ``release``: let
        the buffers go (a later append makes new ones)."""
        if self.at:
            self._flush_async()
        if self._next is not None and (self._next > np.arange(self.buckets) * self._part).any():
            self._flush_parts()
        self._wait()
        if release:
            self._buf = self._next = None

    def _pread(self, fd: int, out: np.ndarray, at: int) -> None:
        want = out.nbytes
        try:
            got = os.preadv(fd, [memoryview(out).cast("B")], at)
        except OSError as exc:
            raise EngineError(f"cannot read temporary data in {self.path.parent}: {os_reason(exc)}") from None
        if got != want:
            raise EngineError(f"temporary file {self.path} is damaged ({got} bytes read, expected {want})")

    def _starts(self, b: int) -> np.ndarray:
        """Each run's first records of buckets ``b`` and ``b + 1`` (runs, 2), int64, from the
        index's window that holds them (loaded here: a read of each run's line)."""
        w = b // self.WINDOW
        with self._lock:
            window = self._window.get(w)
            if window is None:
                first, width = w * self.WINDOW, min(self.WINDOW + 1, self.buckets + 1 - w * self.WINDOW)
                window = np.empty((len(self._offsets), width), np.int32)
                for r in range(len(self._offsets)):
                    self._pread(self._idx, window[r], 4 * (r * (self.buckets + 1) + first))
                if len(self._window) > 1:  # (two kept: readers in flight straddle a window's end)
                    self._window.pop(max(self._window, key=lambda k: abs(k - w)))
                self._window[w] = window
        at = b - w * self.WINDOW
        return window[:, at: at + 2].astype(np.int64)

    def read(self, b: int) -> np.ndarray:
        """Bucket ``b``'s records (after ``flush``) as bytes, in the order appended."""
        out = np.empty(int(self.counts[b]) * max(self._sizes, default=0), np.uint8)
        if not self.counts[b]:
            return out[:0]
        starts = self._starts(b)
        sizes = np.array(self._sizes, np.int64)
        n = (starts[:, 1] - starts[:, 0]) * sizes
        pos = 0
        for r in np.flatnonzero(n):
            want = int(n[r])
            self._pread(self._fd, out[pos: pos + want], self._offsets[r] + int(starts[r, 0] * sizes[r]))
            pos += want
        return out[:pos]

    def discard(self) -> None:
        """No more reads: close, and remove the files on a background thread (freeing a
        large file's pages takes a while); ``close`` waits for it."""
        self._close_fds()
        if self._remover is None:
            self._remover = threading.Thread(target=self._unlink, name="microagg-spill-rm", daemon=True)
            self._remover.start()

    def _close_fds(self) -> None:
        if self._writer is not None:
            self._writer.join()
            self._writer = None
        self._buf = None
        for name in ("_fd", "_idx"):
            fd = getattr(self, name)
            if fd is not None:
                os.close(fd)
                setattr(self, name, None)

    def _unlink(self) -> None:
        for path in (self.path, self.path.with_suffix(".idx")):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)

    def close(self) -> None:
        """Stop (a write in flight ends first), close and remove the files."""
        self._close_fds()
        if self._remover is not None:
            self._remover.join()
        self._unlink()


class RunStore(BlockStore):
    """A ``BlockStore`` whose blocks share one file (``RunFile``), for the partition pass
    of this machine: a chunk's records, sorted by block, go to the file's buffer (the
    room ``buffer`` gives, handed back to ``append_chunk``) and are merged block by block
    as the buffer is written. With a file a block, the chunk's per-block appends (a
    Python call each) and the buffer's per-block writes grew with rows x blocks
    (``RunFile``). Reads as a ``BlockStore``: a block's rows in row order, narrow records
    first."""

    def __init__(self, n_blocks: int, d: int, folder: str | os.PathLike | None = None,
                 buffer_bytes: int = 32 << 20, *, rows: int | None = None, expand=None):
        super().__init__(n_blocks, d, folder, buffer_bytes, rows=rows, expand=expand)
        try:
            self.runs = RunFile(self.path / "runs.bin", n_blocks, buffer_bytes)
        except BaseException:
            self._remove()
            raise
        self._room = None  # the room ``buffer`` gave last

    def buffer(self, rows: int) -> np.ndarray:
        """Room for ``rows`` records in the file's buffer, (rows, 1 + d), float32 while the
        store is narrow, else float64: to fill in block order, then ``append_chunk``."""
        dtype = np.dtype(np.float32 if self.narrow else np.float64)
        self._room = self.runs.reserve(rows, dtype.itemsize * (1 + self.d)).view(dtype)
        return self._room

    def append_chunk(self, rec: np.ndarray, start: np.ndarray) -> None:
        if rec.dtype == np.float32 and not self.narrow:
            raise ValueError("narrow records appended to a widened store")
        if rec.dtype != np.float32 and self.narrow:
            self.widen()
        if rec is not self._room:  # (records of the caller's own: copied in)
            room = self.buffer(rec.shape[0])
            room[:] = rec
        self._room = None
        n = np.diff(start)
        self.rows += n
        if rec.dtype == np.float32:
            self.narrow_rows += n
        self.runs.commit(start)

    def append_records(self, block: int, rec: np.ndarray, *, flush: bool = True) -> None:
        start = np.zeros(self.n_blocks + 1, np.int64)
        start[block + 1:] = rec.shape[0]
        self.append_chunk(rec, start)

    def flush(self) -> None:
        self.runs.flush(release=True)

    def _read(self, block: int, contiguous: bool = True) -> tuple[np.ndarray, np.ndarray]:
        n = int(self.rows[block])
        if n == 0:
            return np.zeros(0, np.int64), np.zeros((0, self.d))
        return decode_records(self.runs.read(block), n, int(self.narrow_rows[block]), self.d,
                              f"{self.runs.path} (block {block})", contiguous)

    def discard(self) -> None:
        self.runs._close_fds()  # (the file goes with the folder, on the background thread)
        super().discard()

    def close(self) -> None:
        self.runs.close()
        super().close()


class MemoryBlocks:
    """One block held in memory: the store of a run whose rows fit in one block (the
    in-memory run is the one-block case of the blocked passes). Reads as a
    ``BlockStore`` of one block whose rows are 0..n-1 in order."""

    n_blocks = 1
    path = None
    expand = None  # the values themselves are held

    def __init__(self, X: np.ndarray):
        self.X = X
        self.d = X.shape[1]
        self.rows = np.array([X.shape[0]], np.int64)

    def read(self, block: int = 0, contiguous: bool = True, expand: bool = True) -> tuple[np.ndarray, np.ndarray]:
        return np.arange(self.X.shape[0], dtype=np.int64), self.X

    def read_many(self, blocks, contiguous: bool = True, expand: bool = True) -> tuple[np.ndarray, np.ndarray]:
        return self.read(0, contiguous)

    def units(self, min_rows: int) -> list[list[int]]:
        return [[0]]

    def discard(self) -> None:
        self.X = None

    def close(self) -> None:
        self.X = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def record_bytes(n: int, n32: int, d: int) -> int:
    """Bytes of ``n`` spilled records of ``d`` values, the first ``n32`` narrow."""
    return (1 + d) * (4 * n32 + 8 * (n - n32))


def decode_records(raw: np.ndarray, n: int, n32: int, d: int, where, contiguous: bool = True):
    """``(row_ids int64, X float64 (n, d))`` from a block's bytes ``raw`` (uint8): ``n``
    records, the first ``n32`` narrow (see the module's docstring); ``where`` names the
    file in the error for a damaged one."""
    slots = 1 + d
    if raw.shape[0] != record_bytes(n, n32, d):
        raise EngineError(f"temporary block file {where} is damaged "
                          f"({raw.shape[0]} bytes, expected {record_bytes(n, n32, d)})")
    if n32 == 0:
        rec = raw.view(np.float64).reshape(n, slots)
        ids, X = rec.view(np.int64)[:, 0], rec[:, 1:]
        if contiguous:
            ids, X = np.ascontiguousarray(ids), np.ascontiguousarray(X)
        return ids, X
    ids = np.empty(n, np.int64)
    X = np.empty((n, d))
    narrow = raw[: 4 * slots * n32].view(np.float32).reshape(n32, slots)
    ids[:n32] = narrow.view(np.uint32)[:, 0]
    X[:n32] = narrow[:, 1:]
    if n32 < n:  # copied to 8-byte alignment before the float64 view
        wide = raw[4 * slots * n32:].copy().view(np.float64).reshape(n - n32, slots)
        ids[n32:] = wide.view(np.int64)[:, 0]
        X[n32:] = wide[:, 1:]
    return ids, X


def units_of(rows: np.ndarray, min_rows: int) -> list[list[int]]:
    """Consecutive blocks (``rows``: rows per block) grouped so that each unit holds at
    least ``min_rows`` rows; empty blocks are dropped (see ``BlockStore.units``)."""
    out: list[list[int]] = []
    cur: list[int] = []
    size = 0
    for b in range(rows.shape[0]):
        if rows[b] == 0:
            continue
        cur.append(b)
        size += int(rows[b])
        if size >= min_rows:
            out.append(cur)
            cur, size = [], 0
    if cur:
        if out:
            out[-1].extend(cur)
        else:
            out.append(cur)
    return out
