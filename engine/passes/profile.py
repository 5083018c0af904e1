"""Pass 1, profile: check the quasi-identifiers and measure them for standardization.

One streaming pass over the QI columns computes, per column, the row count, mean,
population standard deviation, minimum and maximum, and stops at the first null,
NaN or infinite value with an error naming the column and the row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import polars as pl

from ..encode.kinds import is_number
from ..errors import EngineError
from ..io.source import Source, TableSource, numeric_values
from ..kernels.moments import accumulate_moments
from ..progress import Progress


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


def check_columns(source: TableSource, qi: Sequence[str], numeric: bool = True) -> None:
    """Every QI exists and (with ``numeric``) is numeric: checked on the input's schema
    (``open_source``'s, before any encoding), before reading data."""
    schema = source.schema
    for c in qi:
        if c not in schema:
            raise EngineError(f"column {c!r} not found in {source.label} (columns: {', '.join(schema.names()[:12])}"
                              f"{', ...' if len(schema) > 12 else ''})")
    # Parquet files that disagree (engine.io.schema): the QIs in every file, the other columns exact
    source.check_reconciled(qi, [c for c in schema.names() if c not in set(qi)])
    for c in qi if numeric else ():
        dt = schema[c]
        if not is_number(dt):
            raise EngineError(f"column {c!r} is not numeric ({dt}); quasi-identifiers must be numbers")


def _power_of_two(absmax: np.ndarray) -> np.ndarray:
    out = np.ones_like(absmax)
    nz = absmax > 0
    # a normal, finite power of two: 2^1024 is inf, and a subnormal scale breaks the division
    out[nz] = np.exp2(np.clip(np.ceil(np.log2(absmax[nz])), -1022, 1023))
    return out


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


def _moment_pass(source: Source, qi, chunk_rows, scale, rows, progress, stride=0) -> tuple[Moments, tuple]:
    m = Moments(qi, scale)
    samples, sample_ids = [], []
    with Progress("profile", rows, progress) as bar:
        for offset, frame in source.iter_frames(qi, chunk_rows):
            X = m.add(frame, offset)
            if stride:
                first = (-offset) % stride
                take = np.arange(first, frame.height, stride)
                samples.append(X[:, take].T)
                sample_ids.append(take + offset)
            bar.update(m.n)
    sample = (np.concatenate(samples), np.concatenate(sample_ids)) if samples else (None, None)
    return m, sample


def profile_columns(source: Source, qi: Sequence[str], chunk_rows: int, progress: bool = False,
                    rows: int | None = None, sample_stride: int = 0) -> Profile:
    """Run pass 1 over ``qi``; raises EngineError on empty input or bad values.

    With ``sample_stride`` > 0, also keep the rows whose index is a multiple of it.
    """
    qi = tuple(qi)
    total = rows if rows is not None else source.count_rows()
    m, sample = _moment_pass(source, qi, chunk_rows, np.ones(len(qi)), total, progress, sample_stride)
    if m.n == 0:
        raise EngineError(f"{source.label} has no rows")
    scale = m.rescale()
    if scale is not None:  # measure again in units of a power of two (exact, so the
        # standardized values do not change otherwise)
        m, sample = _moment_pass(source, qi, chunk_rows, scale, total, progress, sample_stride)
    return source.adjust_profile(m.profile(sample))  # (mixed-type QIs, engine.encode.mixed: the distance's scales)
