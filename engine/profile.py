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

from .errors import EngineError
from .io.source import Source
from .kernels.moments import accumulate_moments
from .progress import Progress


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


def check_columns(source: Source, qi: Sequence[str], numeric: bool = True) -> None:
    """Every QI exists and (with ``numeric``) is numeric: checked on the schema, before reading data."""
    schema = source.schema
    for c in qi:
        if c not in schema:
            raise EngineError(f"column {c!r} not found in {source.label} (columns: {', '.join(schema.names()[:12])}"
                              f"{', ...' if len(schema) > 12 else ''})")
    for c in qi if numeric else ():
        dt = schema[c]
        if not (dt.is_numeric() and dt != pl.Boolean):
            raise EngineError(f"column {c!r} is not numeric ({dt}); quasi-identifiers must be numbers")


def _power_of_two(absmax: np.ndarray) -> np.ndarray:
    out = np.ones_like(absmax)
    nz = absmax > 0
    # a normal, finite power of two: 2^1024 is inf, and a subnormal scale breaks the division
    out[nz] = np.exp2(np.clip(np.ceil(np.log2(absmax[nz])), -1022, 1023))
    return out


def _first_null(frame: pl.DataFrame, qi: Sequence[str], offset: int) -> None:
    for c in qi:
        s = frame.get_column(c)
        if s.null_count():
            row = offset + int(s.is_null().arg_max())
            raise EngineError(f"column {c!r} has a missing value at row {row + 1} (rows counted from 1)")


def _moment_pass(source, qi, chunk_rows, scale, rows, progress, stride=0):
    d = len(qi)
    s = np.zeros(d)
    q = np.zeros(d)
    mn = np.full(d, np.inf)
    mx = np.full(d, -np.inf)
    shift = None
    n = 0
    samples, sample_ids = [], []
    with Progress("profile", rows, progress) as bar:
        for offset, frame in source.iter_frames(qi, chunk_rows):
            _first_null(frame, qi, offset)
            X = np.empty((d, frame.height))  # column-major: contiguous copies and scans
            for j, c in enumerate(qi):
                X[j] = frame.get_column(c).cast(pl.Float64).to_numpy()
            if shift is None:
                shift = np.where(np.isfinite(X[:, 0]), X[:, 0], 0.0) / scale
            bad = np.full(d, -1, np.int64)
            accumulate_moments(X, scale, shift, s, q, mn, mx, bad)
            for j in range(d):
                if bad[j] >= 0:
                    v = X[j, bad[j]]
                    raise EngineError(f"column {qi[j]!r} has a non-finite value ({v}) at row "
                                      f"{offset + bad[j] + 1} (rows counted from 1)")
            if stride:
                first = (-offset) % stride
                take = np.arange(first, frame.height, stride)
                samples.append(X[:, take].T)
                sample_ids.append(take + offset)
            n += frame.height
            bar.update(n)
    sample = (np.concatenate(samples), np.concatenate(sample_ids)) if samples else (None, None)
    return n, s, q, mn, mx, shift, sample


def profile_columns(source: Source, qi: Sequence[str], chunk_rows: int, progress: bool = False,
                    rows: int | None = None, sample_stride: int = 0) -> Profile:
    """Run pass 1 over ``qi``; raises EngineError on empty input or bad values.

    With ``sample_stride`` > 0, also keep the rows whose index is a multiple of it.
    """
    qi = tuple(qi)
    d = len(qi)
    total = rows if rows is not None else source.count_rows()
    scale = np.ones(d)
    n, s, q, mn, mx, shift, sample = _moment_pass(source, qi, chunk_rows, scale, total, progress, sample_stride)
    if n == 0:
        raise EngineError(f"{source.label} has no rows")
    absmax = np.maximum(np.abs(mn), np.abs(mx))
    if not (np.all(np.isfinite(q)) and np.all(np.isfinite(s))) or np.any(absmax > 2.0 ** 400) \
            or np.any((absmax > 0) & (absmax < 2.0 ** -400)):
        # values so large that their squares overflow, or so small that they underflow
        # (1e-300: the column would look constant): measure again in units of a power
        # of two (exact, so the standardized values do not change otherwise)
        scale = _power_of_two(absmax)
        n, s, q, mn, mx, shift, sample = _moment_pass(source, qi, chunk_rows, scale, total, progress,
                                                      sample_stride)
    mean = shift + s / n
    var = np.maximum((q - s * s / n) / n, 0.0)
    sd = np.sqrt(var)
    # a column whose values are all equal has sd 0 exactly only if the shifted sums
    # vanish; guard the rounding case too
    sd[mn == mx] = 0.0
    return Profile(qi, n, scale, mean, sd, mn, mx, sample[0], sample[1])
