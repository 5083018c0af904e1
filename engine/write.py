"""Pass 4, write: stream the input again in order and publish each row's group values.

QI columns are replaced by their group's centroid (Float64); every other column
passes through untouched. SSE and SST are accumulated on the way, so the
information loss is measured on exactly what is written.
"""

from __future__ import annotations

import queue
import threading

import numpy as np
import polars as pl
import pyarrow.parquet as pq

from .errors import EngineError, VerificationError
from .io.source import Source, frame_to_array
from .selfcheck import ClassCounter
from .kernels.groups import publish_rows
from .progress import Progress
from .profile import Profile
from .stitch import Groups


ROW_GROUP_ROWS = 65_536


class _Writer:
    """Appends frames to the output. Parquet row groups hold exactly ``ROW_GROUP_ROWS``
    rows (the last fewer), whatever the chunking, so the file's bytes do not depend
    on the chunk size."""

    def __init__(self, path: str | None, fmt: str):
        self.path, self.fmt = path, fmt
        self.frames: list[pl.DataFrame] = []
        self._pending: list[pl.DataFrame] = []
        self._pending_rows = 0
        self._pq = None
        self._fh = None
        self._first = True
        self._thread = None
        self._queue = None
        self._error: BaseException | None = None

    def _write_parquet(self, frame: pl.DataFrame) -> None:
        # compression and writing run on a background thread (pyarrow releases the
        # GIL), overlapping the next chunk's read and gather; order is kept
        self._check_thread()
        table = frame.to_arrow(compat_level=pl.CompatLevel.newest())  # no string copies
        if self._pq is None:
            self._pq = pq.ParquetWriter(self.path, table.schema, compression="zstd")
            self._queue = queue.Queue(maxsize=1)
            self._thread = threading.Thread(target=self._write_loop, name="microagg-writer", daemon=True)
            self._thread.start()
        self._queue.put(table)

    def _write_loop(self) -> None:
        while True:
            table = self._queue.get()
            if table is None:
                return
            if self._error is None:
                try:
                    self._pq.write_table(table, row_group_size=ROW_GROUP_ROWS)
                except BaseException as exc:  # reported by the main thread
                    self._error = exc

    def _check_thread(self) -> None:
        if self._error is not None:
            exc, self._error = self._error, None
            if isinstance(exc, OSError):
                raise exc
            raise EngineError(f"cannot write the output: {exc}") from None

    def _join(self) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None

    def _drain(self, final: bool) -> None:
        if self._pending_rows < ROW_GROUP_ROWS and not (final and self._pending_rows):
            return
        whole = pl.concat(self._pending, rechunk=False) if len(self._pending) > 1 else self._pending[0]
        cut = whole.height if final else whole.height - whole.height % ROW_GROUP_ROWS
        self._write_parquet(whole.slice(0, cut))
        rest = whole.slice(cut)
        self._pending = [rest] if rest.height else []
        self._pending_rows = rest.height

    def add(self, frame: pl.DataFrame) -> None:
        try:
            if self.path is None:
                self.frames.append(frame)
            elif self.fmt == "parquet":
                self._pending.append(frame)
                self._pending_rows += frame.height
                self._drain(False)
            else:
                if self._fh is None:
                    self._fh = open(self.path, "wb")
                frame.write_csv(self._fh, include_header=self._first)
            self._first = False
        except OSError:
            raise  # atomic_output names OUTPUT and the OS's reason

    def close(self) -> pl.DataFrame | None:
        try:
            if self.path is not None and self.fmt == "parquet":
                self._drain(True)
            self._join()
            self._check_thread()
            if self._pq is not None:
                self._pq.close()
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
            self._join()
        except BaseException:
            pass
        for h in (self._pq, self._fh):
            try:
                if h is not None:
                    h.close()
            except Exception:
                pass


def write_pass(source: Source, path: str | None, fmt: str, profile: Profile, groups: Groups,
               group_column: str | None, chunk_rows: int, progress: bool = False, *,
               k: int | None = None, verified: dict | None = None):
    """Returns ``(sse, sst, frame, sse per QI, sst per QI)``; ``frame`` is the whole result
    when ``path`` is None.

    Self-check (``selfcheck.ClassCounter``): every frame handed to the writer is
    counted by its published QI values; after the last chunk, before the file is
    closed (and so before ``atomic_output`` renames it), a VerificationError is
    raised if a class has fewer than ``k`` rows or the row count differs from the
    input's; a Parquet file's footer row count is checked after closing. The
    counts go to ``verified`` (a dict) when given."""
    qi = list(profile.columns)
    d = len(qi)
    col_sse = np.zeros(d)
    zs = np.zeros(d)
    zq = np.zeros(d)
    writer = _Writer(path, fmt)
    counter = ClassCounter(qi, groups.count)
    try:
        with Progress("write", profile.rows, progress) as bar:
            for offset, frame in source.iter_frames(None, chunk_rows):
                h = frame.height
                lab = groups.labels[offset: offset + h]
                if lab.shape[0] != h:
                    raise EngineError(f"{source.label} changed during the run: it now has more than the "
                                      f"{profile.rows:,} rows counted by the first pass")
                X = frame_to_array(frame, qi)
                out = np.empty((h, d))
                # centroids gathered; SSE of the published values against the input, both
                # standardized (exactly what is written), and the sums for SST
                publish_rows(X, lab, groups.centroid, profile.scale, profile.mean, profile.sd, out, col_sse, zs, zq)
                cols = {c: pl.Series(c, out[:, j], dtype=pl.Float64) for j, c in enumerate(qi)}
                frame = frame.with_columns(**cols)
                if group_column is not None:
                    frame = frame.with_columns(pl.Series(group_column, lab, dtype=pl.Int64))
                counter.add(frame)
                writer.add(frame)
                bar.update(offset + h)
        if counter.rows < profile.rows:
            raise EngineError(f"{source.label} changed during the run: it now has {counter.rows:,} rows, "
                              f"the first pass counted {profile.rows:,}")
        checked = counter.check(k, profile.rows)
        result = writer.close()
        if path is not None and fmt == "parquet":
            written = pq.read_metadata(path).num_rows
            if written != profile.rows:
                raise VerificationError(f"verification failed: the file holds {written:,} rows, "
                                        f"the input {profile.rows:,}")
        if verified is not None:
            verified.update(checked)
    except BaseException:
        writer.abort()
        raise
    n = profile.rows
    col_sst = zq - zs * zs / n
    return float(col_sse.sum()), float(col_sst.sum()), result, col_sse, col_sst
