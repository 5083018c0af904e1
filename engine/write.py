"""Pass 4, write: stream the input again in order and publish each row's group values.

QI columns are replaced by their group's centroid (Float64); every other column
passes through untouched. SSE and SST are accumulated on the way, so the
information loss is measured on exactly what is written.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pyarrow.parquet as pq

from .errors import EngineError
from .io.source import Source, frame_to_array
from .kernels.groups import accumulate_sq_diff, gather_rows
from .kernels.moments import accumulate_moments
from .progress import Progress
from .profile import Profile
from .stitch import Groups, standardize


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

    def _write_parquet(self, frame: pl.DataFrame) -> None:
        table = frame.to_arrow(compat_level=pl.CompatLevel.newest())  # no string copies
        if self._pq is None:
            self._pq = pq.ParquetWriter(self.path, table.schema, compression="zstd")
        self._pq.write_table(table, row_group_size=ROW_GROUP_ROWS)

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
        except OSError as exc:
            raise EngineError(f"cannot write the output: {exc.strerror or exc}") from None

    def close(self) -> pl.DataFrame | None:
        try:
            if self.path is not None and self.fmt == "parquet":
                self._drain(True)
            if self._pq is not None:
                self._pq.close()
            if self._fh is not None:
                self._fh.flush()
                self._fh.close()
        except OSError as exc:
            raise EngineError(f"cannot write the output: {exc.strerror or exc}") from None
        if self.path is None:
            return pl.concat(self.frames) if self.frames else None
        return None

    def abort(self) -> None:
        for h in (self._pq, self._fh):
            try:
                if h is not None:
                    h.close()
            except Exception:
                pass


def write_pass(source: Source, path: str | None, fmt: str, profile: Profile, groups: Groups,
               group_column: str | None, chunk_rows: int, progress: bool = False):
    """Returns ``(sse, sst, frame, sse per QI, sst per QI)``; ``frame`` is the whole result
    when ``path`` is None."""
    qi = list(profile.columns)
    d = len(qi)
    col_sse = np.zeros(d)
    zs = np.zeros(d)
    zq = np.zeros(d)
    mn = np.full(d, np.inf)
    mx = np.full(d, -np.inf)
    bad = np.full(d, -1, np.int64)
    ones, zeros = np.ones(d), np.zeros(d)
    writer = _Writer(path, fmt)
    try:
        with Progress("write", profile.rows, progress) as bar:
            for offset, frame in source.iter_frames(None, chunk_rows):
                h = frame.height
                lab = groups.labels[offset: offset + h]
                X = frame_to_array(frame, qi)
                Z = standardize(X, profile)
                accumulate_moments(Z, ones, zeros, zs, zq, mn, mx, bad)
                out = np.empty((h, d))
                gather_rows(groups.centroid, lab, out)
                # the published values, standardized: SSE measures exactly what is written
                accumulate_sq_diff(Z, standardize(out, profile), col_sse)
                cols = {c: pl.Series(c, out[:, j], dtype=pl.Float64) for j, c in enumerate(qi)}
                frame = frame.with_columns(**cols)
                if group_column is not None:
                    frame = frame.with_columns(pl.Series(group_column, lab, dtype=pl.Int64))
                writer.add(frame)
                bar.update(offset + h)
        result = writer.close()
    except BaseException:
        writer.abort()
        raise
    n = profile.rows
    col_sst = zq - zs * zs / n
    return float(col_sse.sum()), float(col_sst.sum()), result, col_sse, col_sst
