"""Spilled blocks: each block's rows (global row id + QI values) in a private temp folder.

One binary file per block holds records of ``1 + d`` float64 slots: the row id's
int64 bits, then the QI values in original units. Rows are appended in input
order, so a block's content does not depend on the chunk size. Appends are
buffered (``buffer_bytes`` in all) so that thousands of blocks cost few writes.
The folder is created with mode 0700 and removed by ``close`` (also on errors).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

import numpy as np

from ..errors import EngineError
from .tempfiles import SPILL_PREFIX, clean_stale, os_reason, private_dir, private_opener

__all__ = ["SPILL_PREFIX", "BlockStore"]


class BlockStore:
    def __init__(self, n_blocks: int, d: int, folder: str | os.PathLike | None = None,
                 buffer_bytes: int = 32 << 20):
        clean_stale(folder)  # spill folders of killed runs
        self.path = Path(private_dir(folder))
        self.n_blocks = n_blocks
        self.d = d
        self.rows = np.zeros(n_blocks, np.int64)
        self._buf: dict[int, list[np.ndarray]] = {}
        self._buffered = 0
        self.buffer_bytes = buffer_bytes

    def _file(self, block: int) -> Path:
        return self.path / f"block-{block:06d}.bin"

    def records(self, row_ids: np.ndarray, X: np.ndarray) -> np.ndarray:
        """The spill records of some rows: (m, 1 + d) float64, the row id's int64 bits first."""
        rec = np.empty((row_ids.shape[0], 1 + self.d), np.float64)
        rec.view(np.int64)[:, 0] = row_ids
        rec[:, 1:] = X
        return rec

    def append(self, block: int, row_ids: np.ndarray, X: np.ndarray) -> None:
        self.append_records(block, self.records(row_ids, X))

    def append_records(self, block: int, rec: np.ndarray) -> None:
        """Append records (from ``records``; a view is kept until the next flush)."""
        m = rec.shape[0]
        if m == 0:
            return
        self._buf.setdefault(block, []).append(rec)
        self.rows[block] += m
        self._buffered += rec.nbytes
        if self._buffered >= self.buffer_bytes:
            self.flush()

    def flush(self) -> None:
        try:
            for block in sorted(self._buf):
                with open(self._file(block), "ab", opener=private_opener) as fh:
                    parts = self._buf[block]
                    rec = np.concatenate(parts) if len(parts) > 1 else np.ascontiguousarray(parts[0])
                    # not ndarray.tofile: on a full disk it reports a short write without errno
                    fh.write(memoryview(rec).cast("B"))
        except OSError as exc:
            raise EngineError(f"cannot write temporary data in {self.path}: {os_reason(exc)}") from None
        self._buf.clear()
        self._buffered = 0

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

    def read(self, block: int) -> tuple[np.ndarray, np.ndarray]:
        """``(row_ids int64, X float64 C-contiguous (m, d))`` of one block, in row order."""
        if self.rows[block] == 0:
            return np.zeros(0, np.int64), np.zeros((0, self.d))
        rec = np.fromfile(self._file(block), dtype=np.float64).reshape(-1, 1 + self.d)
        if rec.shape[0] != self.rows[block]:
            raise EngineError(f"temporary block file {self._file(block)} is damaged "
                              f"({rec.shape[0]} rows, expected {self.rows[block]})")
        ids = np.ascontiguousarray(rec.view(np.int64)[:, 0])
        X = np.ascontiguousarray(rec[:, 1:])
        return ids, X

    def read_many(self, blocks) -> tuple[np.ndarray, np.ndarray]:
        """Several blocks, concatenated in the order given."""
        if len(blocks) == 1:
            return self.read(blocks[0])
        parts = [self.read(b) for b in blocks]
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])

    def units(self, min_rows: int) -> list[list[int]]:
        """Consecutive blocks grouped so that each unit holds at least ``min_rows`` rows
        (a plan estimated from a sample can leave a block nearly empty); empty blocks
        are dropped. Neighbouring block numbers are neighbours in space."""
        out: list[list[int]] = []
        cur: list[int] = []
        size = 0
        for b in range(self.n_blocks):
            if self.rows[b] == 0:
                continue
            cur.append(b)
            size += int(self.rows[b])
            if size >= min_rows:
                out.append(cur)
                cur, size = [], 0
        if cur:
            if out:
                out[-1].extend(cur)
            else:
                out.append(cur)
        return out

    def close(self) -> None:
        self._buf.clear()
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(self.path)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
