"""Count: one streaming pass accumulating 1-D and all-pairs joint histograms, or pairwise moments (stage 2 of ``engine.select``)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np
import polars as pl

from ..errors import EngineError
from ..io import TableSource, open_source
from ..kernels.dependency import histogram
from ..parallel import numba_threads, read_ahead
from .binning import BinPlan, DEFAULT_CHUNK_ROWS, cell_layout


def encode_column(series: pl.Series, plan: BinPlan, out: np.ndarray) -> None:
    """Codes of one chunk of one column into ``out`` (unsigned, see ``code_dtype``) by ``plan``."""
    if plan.kind == "category":
        try:
            phys = series.cast(pl.String).cast(pl.Enum(list(plan.categories))).to_physical()
        except Exception:
            raise EngineError(f"column {plan.column!r} has a value the planning pass did not see (did the input change?)") from None
        out[:] = phys.fill_null(plan.null_code).to_numpy()
        return
    x = _numeric_values(series)
    if plan.kind == "quantile":
        histogram.bin_cuts(x, np.asarray(plan.cuts, np.float64), plan.null_code, out)
    elif plan.kind == "constant":
        histogram.bin_linear(x, 0.0, 0.0, 1.0, 1, plan.null_code, out)
    else:
        histogram.bin_linear(x, plan.lo, plan.mul, plan.den, plan.n_bins, plan.null_code, out)


def _numeric_values(s: pl.Series) -> np.ndarray:
    # Two dtypes reach the kernels (int64, float64): one compiled specialization each.
    if s.dtype == pl.Boolean:
        s = s.cast(pl.Int64)
    if s.null_count() > 0 or not s.dtype.is_integer() or s.dtype == pl.UInt64:
        s = s.cast(pl.Float64)  # nulls become NaN
    elif s.dtype != pl.Int64:
        s = s.cast(pl.Int64)
    return s.to_numpy()


@dataclass
class Counts:
    """Result of the counting pass: 1-D counts and joint counts, null bin last."""

    plans: list[BinPlan]
    n_rows: int
    marginals: list[np.ndarray]
    joint: dict[tuple[int, int], np.ndarray]

    def pair(self, a: int, b: int) -> np.ndarray:
        """Joint counts of columns ``a`` and ``b`` (rows: a's bins)."""
        if a < b:
            return self.joint[(a, b)]
        if a > b:
            return self.joint[(b, a)].T
        return np.diag(self.marginals[a])


def code_dtype(plans: Sequence[BinPlan]) -> type:
    """Smallest unsigned dtype that holds every code (null bin included)."""
    top = max((p.size for p in plans), default=1)
    return np.uint8 if top <= 1 << 8 else np.uint16 if top <= 1 << 16 else np.uint32


def _encoded_chunks(src: TableSource, plans: Sequence[BinPlan], chunk_rows: int) -> Iterator[tuple[int, np.ndarray]]:
    cols = [p.column for p in plans]
    dtype = code_dtype(plans)
    for _, frame in src.iter_frames(cols, chunk_rows):
        codes = np.empty((len(plans), frame.height), dtype)
        for j, p in enumerate(plans):
            encode_column(frame.get_column(p.column), p, codes[j])
        yield frame.height, codes


def count_pairs(
    source,
    plans: Sequence[BinPlan],
    *,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    threads: int | None = None,
    prefetch: bool = True,
) -> Counts:
    """One streaming pass: the 1-D and all-pairs joint counts of the planned columns.

    datashader's create / append / combine / finalize: per-thread private count rows
    are created once, every chunk appends into them (``histogram.accumulate_counts``),
    the rows are summed once at the end and cut into per-column and per-pair tables.
    """
    src = open_source(source)
    plans = list(plans)
    col_off, (pair_a, pair_b, pair_off, pair_stride), cells = cell_layout(plans)
    chunks = _encoded_chunks(src, plans, chunk_rows)
    if prefetch:
        chunks = read_ahead(chunks, "profile-reader", depth=2)
    n_rows = 0
    with numba_threads(threads) as n_threads:
        priv = np.zeros((n_threads, cells), np.int64)
        for h, codes in chunks:
            histogram.accumulate_counts(codes, h, col_off, pair_a, pair_b, pair_off, pair_stride, priv)
            n_rows += h
    total = priv.sum(axis=0)
    marginals = [total[col_off[j] : col_off[j] + p.size].copy() for j, p in enumerate(plans)]
    joint = {}
    for q in range(pair_a.shape[0]):
        a, b = int(pair_a[q]), int(pair_b[q])
        sa, sb = plans[a].size, plans[b].size
        joint[(a, b)] = total[pair_off[q] : pair_off[q] + sa * sb].reshape(sa, sb).copy()
    return Counts(plans, n_rows, marginals, joint)


def pearson_matrix(
    source,
    plans: Sequence[BinPlan],
    *,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    threads: int | None = None,
) -> tuple[np.ndarray, int]:
    """Pairwise-complete Pearson correlations of the planned numeric columns, streamed.

    Returns ``(rho, n_rows)``. A pair with a constant column (or fewer than two
    complete rows) gets rho = 0: nothing is known of its dependence. The sums are
    floating point, so rho may differ in the last bits between thread counts.
    """
    src = open_source(source)
    plans = list(plans)
    for p in plans:
        if p.kind == "category":
            raise EngineError(f"column {p.column!r} is not numeric: the gaussian measure needs numeric columns")
    d = len(plans)
    shift = np.array([(p.lo + p.hi) / 2.0 for p in plans])
    cols = [p.column for p in plans]

    def chunks():
        for _, frame in src.iter_frames(cols, chunk_rows):
            X = np.empty((d, frame.height))
            for j, c in enumerate(cols):
                X[j] = _numeric_values(frame.get_column(c))
            yield frame.height, X

    n_rows = 0
    with numba_threads(threads) as n_threads:
        priv = np.zeros((n_threads, 4, d, d))
        for h, X in read_ahead(chunks(), "profile-reader", depth=2):
            histogram.accumulate_pair_moments(X, h, shift, priv)
            n_rows += h
    S = priv.sum(axis=0)
    rho = np.zeros((d, d))
    for a in range(d):
        rho[a, a] = 1.0
        for b in range(a + 1, d):
            n = S[0, a, b]
            if n < 2:
                continue
            ma, mb = S[1, a, b] / n, S[1, b, a] / n
            va = S[2, a, b] / n - ma * ma
            vb = S[2, b, a] / n - mb * mb
            if va <= 0.0 or vb <= 0.0:
                continue
            r = (S[3, a, b] / n - ma * mb) / math.sqrt(va * vb)
            r = min(1.0, max(-1.0, r))
            rho[a, b] = rho[b, a] = r
    return rho, n_rows
