"""The QI columns as numbers: the helpers every layer that reads them shares.

``engine.encode`` (mixed-type distances, missing values, published values),
``engine.passes`` (profile, partition, stitch, write) and ``engine.cluster`` (the Dask
tasks) all turn frames into column-major float64 arrays, stop at the first bad value
with the same one-line error, keep pass 1's streaming moments and standardize with
the ``Profile`` they give. Those helpers live here, below all three (they import only
``engine.io``, ``engine.kernels`` and ``engine.errors``), so that no package imports
one above it (``docs/architecture.md``, the layer order; ``tests/test_layout.py``):

* ``frame_to_columns``: a frame's columns as a (d, rows) float64 array, nulls as NaN;
* ``bad_value_error``, ``first_bad``, ``first_bad_value``: the first null, NaN or
  infinite value by row, and its error naming the column and the row;
* ``Profile`` and ``Moments``: pass 1's arithmetic, fed chunk by chunk, and its result;
* ``sample_row_groups``: the partition plan's sample from every 8th Parquet row group;
* ``aligned_zeros``, ``finish_sums``, ``measured_sums``: the centroid table the write
  pass gathers from, and its information-loss sums in standardized units.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import polars as pl
import pyarrow.parquet as pq

from .errors import EngineError
from .io.source import TableSource, numeric_values
from .kernels.moments import accumulate_moments


def frame_to_columns(frame, columns) -> np.ndarray:
    """Columns of ``frame`` as a column-major (d, rows) float64 array, nulls as NaN."""
    X = np.empty((len(columns), frame.height))
    for j, c in enumerate(columns):
        X[j] = numeric_values(frame.get_column(c))
    return X


def bad_value_error(column: str, s: pl.Series, i: int, offset: int) -> EngineError:
    """The error for the bad value at index ``i`` of ``s`` (a null, NaN or infinite)."""
    if s[i] is None:
        return EngineError(f"column {column!r} has a missing value at row {offset + i + 1} (rows counted from 1)")
    return EngineError(f"column {column!r} has a non-finite value ({s.cast(pl.Float64)[i]}) at row {offset + i + 1} "
                       f"(rows counted from 1)")


def first_bad(frame: pl.DataFrame, columns: Sequence[str]) -> tuple[str, int, bool] | None:
    """``(column, index, is_null)`` of the first null (any column) or NaN / infinite
    value (float columns) of ``columns`` in ``frame`` by row, the first column at that
    row; None when there is none. For columns of any type (the sensitive methods')."""
    best = None
    for c in columns:
        s = frame.get_column(c)
        bad = s.is_null()
        if s.dtype.is_float():
            bad = bad | ~s.is_finite().fill_null(True)
        if best is not None:
            bad = bad.head(best[1])
        at = bad.arg_true()
        if at.len():
            i = int(at[0])
            best = (c, i, s[i] is None)
    return best


def first_bad_value(frame: pl.DataFrame, columns: Sequence[str], offset: int = 0, X: np.ndarray | None = None,
                    bad: np.ndarray | None = None) -> None:
    """Raise for the first null, NaN or infinite value of ``columns`` by row (the first
    column at that row), whichever kind it is. ``X`` (d, rows): the columns as float64,
    nulls as NaN, with ``bad[j]`` the index of column j's first non-finite value (-1:
    none), when the caller has them already."""
    if X is None:
        X = np.empty((len(columns), frame.height))
        for j, c in enumerate(columns):
            X[j] = numeric_values(frame.get_column(c))
    if bad is None:
        ok = np.isfinite(X)
        bad = np.where(ok.all(axis=1), -1, np.argmin(ok, axis=1))
    rows = np.where(bad >= 0, bad, np.iinfo(np.int64).max)
    j = int(np.argmin(rows))
    if bad[j] >= 0:
        raise bad_value_error(columns[j], frame.get_column(columns[j]), int(bad[j]), offset)


@dataclass(frozen=True)
class Profile:
    """Per-QI statistics. Standardized value: ``z = (x / scale - mean) / sd`` (0 if sd = 0)."""

    columns: tuple[str, ...]
    rows: int
    scale: np.ndarray
    mean: np.ndarray
    sd: np.ndarray
    min: np.ndarray
    max: np.ndarray
    # every ``sample_stride``-th row (raw values, and row ids), for the partition plan
    sample: np.ndarray | None = None
    sample_ids: np.ndarray | None = None

    def to_dict(self) -> dict:
        return {
            c: {"mean": float(self.mean[j] * self.scale[j]), "sd": float(self.sd[j] * self.scale[j]),
                "min": float(self.min[j]), "max": float(self.max[j])}
            for j, c in enumerate(self.columns)
        }


def _power_of_two(absmax: np.ndarray) -> np.ndarray:
    out = np.ones_like(absmax)
    nz = absmax > 0
    # a normal, finite power of two: 2^1024 is inf, and a subnormal scale breaks the division
    out[nz] = np.exp2(np.clip(np.ceil(np.log2(absmax[nz])), -1022, 1023))
    return out


class Moments:
    """Pass 1's arithmetic, fed chunk by chunk in row order: the null / non-finite
    checks and the shifted column sums, in units of ``scale``. Used by the profile
    pass, and by the partition pass when it measures the columns on its way."""

    def __init__(self, qi: Sequence[str], scale: np.ndarray):
        self.qi = tuple(qi)
        d = len(self.qi)
        self.scale = scale
        self.s = np.zeros(d)
        self.q = np.zeros(d)
        self.mn = np.full(d, np.inf)
        self.mx = np.full(d, -np.inf)
        self.shift = None
        self.n = 0

    def add(self, frame: pl.DataFrame, offset: int) -> np.ndarray:
        """Check and add the chunk ``frame`` (rows ``offset``...); return its QI values
        column-major (d, rows), float64."""
        qi = self.qi
        X = np.empty((len(qi), frame.height))  # column-major: contiguous copies and scans; nulls as NaN
        for j, c in enumerate(qi):
            X[j] = numeric_values(frame.get_column(c))
        if self.shift is None:
            self.shift = np.where(np.isfinite(X[:, 0]), X[:, 0], 0.0) / self.scale
        bad = np.full(len(qi), -1, np.int64)
        accumulate_moments(X, self.scale, self.shift, self.s, self.q, self.mn, self.mx, bad)
        # a null is a NaN in X: the first bad value by row, null, NaN or infinite
        first_bad_value(frame, qi, offset, X, bad)
        self.n += frame.height
        return X

    def rescale(self) -> np.ndarray | None:
        """None when the sums are sound; else the power-of-two scale to measure again
        in: values so large that their squares overflow, or so small that they
        underflow (1e-300: the column would look constant)."""
        absmax = np.maximum(np.abs(self.mn), np.abs(self.mx))
        if not (np.all(np.isfinite(self.q)) and np.all(np.isfinite(self.s))) or np.any(absmax > 2.0 ** 400) \
                or np.any((absmax > 0) & (absmax < 2.0 ** -400)):
            return _power_of_two(absmax)
        return None

    def profile(self, sample=(None, None)) -> Profile:
        n, s, q = self.n, self.s, self.q
        mean = self.shift + s / n
        var = np.maximum((q - s * s / n) / n, 0.0)
        sd = np.sqrt(var)
        # a column whose values are all equal has sd 0 exactly only if the shifted sums
        # vanish; guard the rounding case too
        sd[self.mn == self.mx] = 0.0
        return Profile(self.qi, n, self.scale, mean, sd, self.mn, self.mx, sample[0], sample[1])


SAMPLE_GROUP_STRIDE = 8  # the merged plan's sample reads every 8th row group

def sample_row_groups(source: TableSource, qi, rows: int, stride: int, to_columns=None):
    """The plan's sample without a pass over the data: rows of every
    ``SAMPLE_GROUP_STRIDE``-th row group of a Parquet input (about an eighth of
    it), every (stride / 8)-th row of those (row id a multiple of it), so about
    ``rows / stride`` rows, as the profile pass's every ``stride``-th row.

    Returns ``(X (m, d), row ids)``, or None when this does not pay or cannot be
    trusted: not Parquet, fewer than 4 x 8 row groups, or a missing or non-finite
    value in the sample (pass 1 then runs, and reports it). Depends on the file's
    row-group layout only, not on the chunk size or threads. ``to_columns(frame,
    first row id)``: a row group's columns ``qi`` as a (d, rows) float64 array
    (default ``frame_to_columns``; ``engine.encode.mixed``: its compact columns)."""
    if source.kind != "parquet":
        return None
    groups = []
    first = 0
    for f in source.paths:
        md = pq.read_metadata(f)
        for g in range(md.num_row_groups):
            n = md.row_group(g).num_rows
            groups.append((f, g, first, n))
            first += n
    if first != rows or len(groups) < 4 * SAMPLE_GROUP_STRIDE:
        return None
    step = max(1, stride // SAMPLE_GROUP_STRIDE)
    parts, ids = [], []
    files: dict = {}
    for f, g, first, n in groups[::SAMPLE_GROUP_STRIDE]:
        pf = files.setdefault(f, pq.ParquetFile(f))
        frame = pl.from_arrow(pf.read_row_group(g, columns=list(qi)))
        take = np.arange((-first) % step, n, step)
        cols = frame_to_columns(frame, qi) if to_columns is None else to_columns(frame, first)
        parts.append(cols[:, take].T)
        ids.append(take + first)
    X = np.ascontiguousarray(np.concatenate(parts))
    if X.shape[0] < 2 or not np.isfinite(X).all() or np.abs(X).max() > 2.0 ** 400:
        return None
    return X, np.concatenate(ids).astype(np.int64)


def aligned_zeros(rows: int, d: int) -> np.ndarray:
    """A zeroed (rows, d) float64 array whose data starts on a 64-byte boundary, so a
    row of at most 8 values lies in one cache line (the write pass's gather
    prefetches whole centroid rows)."""
    buf = np.zeros(rows * d + 8)
    off = (-buf.ctypes.data % 64) // 8
    return buf[off: off + rows * d].reshape(rows, d)


def finish_sums(sse: np.ndarray, s: np.ndarray, q: np.ndarray, sd: np.ndarray, n: int):
    """SSE and SST per QI in standardized units from ``column_sums``' raw sums (in
    units of the scale): divided by sd^2; a constant column (sd 0) counts 0 in both."""
    var = np.where(sd > 0.0, sd * sd, 1.0)
    live = sd > 0.0
    return np.where(live, sse / var, 0.0), np.where(live, (q - s * s / n) / var, 0.0)


def measured_sums(sse: np.ndarray, sd: np.ndarray, n: int):
    """SSE and SST per QI in standardized units from the blocks' squared errors (in
    units of the scale, as ``column_sums``): SSE divided by sd^2; SST of a standardized
    column is n exactly (0 for a constant column, which counts 0 in both)."""
    live = sd > 0.0
    var = np.where(live, sd * sd, 1.0)
    return np.where(live, sse / var, 0.0), np.where(live, float(n), 0.0)
