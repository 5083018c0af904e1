"""Dependency analysis and attribute selection (seed 000, sections 3.1-3.3; seed 004, EMAD).

Which quasi-identifiers should drive the grouping? Both seeds answer with a
dependency tree over the attributes: estimate how strongly every pair depends,
keep the spanning tree of strongest dependence (Chow-Liu) and pick the vertices of
highest degree as *key attributes*. Microaggregating on those only is much cheaper
and, on the seeds' data, loses little information.

The flow, one stage per section below:

1. **Plan the bins** (``plan_bins``): every attribute becomes small integer codes.

   ====================  ==================================================================
   column type           codes
   ====================  ==================================================================
   string, categorical   dictionary code: index in the sorted distinct values; ``width`` is
                         an error (it has no meaning for categories)
   boolean               by value (2 bins)
   integer               by value, one bin per integer of ``[min, max]``, when that span is
                         at most ``levels`` (no ``bins``/``width`` given) or at most ``bins``;
                         otherwise as a float column. We test the *span*, not the number of
                         distinct values, so that a Parquet input is planned from its
                         row-group statistics without reading it; an integer column with
                         few distinct values spread widely gets equal-width bins, which
                         keep them apart unless two share a bin.
   float                 equal width ``width`` from the column minimum (seed 004: "divided
                         it into a number of sub-intervals sharing the same width"), or
                         ``bins`` equal bins over ``[min, max]`` (default 10, the seed's ten
                         sub-intervals), or ``binning="quantile"``: ``bins`` bins cut at
                         the quantiles (one extra pass)
   constant / all null   one bin
   ====================  ==================================================================

   Every column also has a trailing *null bin* for nulls and NaN. Empty bins change
   no measure, so an unused null bin costs nothing.

2. **Count** (``count_pairs``): one streaming pass over an ``engine.io.Source``;
   the Numba kernels of ``engine.kernels.histogram`` accumulate the 1-D and all-pairs
   joint counts with per-thread private arrays. Chunking and threads never change
   the counts. The Gaussian measure streams pairwise moments instead.

3. **Measure** (``measure_matrix``), all in bits (log base 2, as seed 000):
   ``mi-distance`` H(A|B) + H(B|A) (seed 000, Definition 2), ``emim`` (seed 004,
   eq. 5), ``chi2`` (eq. 6) and ``gaussian`` -0.5 log2(1 - rho^2), the mutual
   information of two jointly normal variables with Pearson correlation rho (seed
   004, section 4.2.4 "assuming normality"). Seed 004 leaves the base of its log
   open; the base scales every weight alike and cannot change a tree.

4. **Tree** (``spanning_tree``): Kruskal's minimum spanning tree on the MI distance
   (seed 000, Algorithm 1), the maximum spanning tree on the other measures (seed
   004, EMAD step 3); equal weights are taken in (i, j) order.

5. **Select** (``definition5`` for seed 000, ``emad_top`` for seed 004): vertices
   ranked by degree, decreasing; ties by *strength*, the dependence carried by the
   vertex's tree edges (the sum of its edge weights for a maximum tree, minus the
   sum for the MI-distance tree), then by column position. ``emad_candidates``
   lists every subset the degree ranking alone allows, which is what seed 004's
   tables call "No. of possibilities".

``profile`` runs 1-5 and returns a ``ProfileResult``. The in-memory helpers at the
end (``standardize``, ``information_loss``, ``ama_labels``, ``subset_scan``) run AMA
(seed 000, Algorithm 2) and the exhaustive-subset baseline (seed 004, Table 4) for
tests and benchmarks.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Sequence

import numba
import numpy as np
import polars as pl

from .errors import EngineError
from .io import Source, open_source
from .kernels import graph, histogram, mdav

MEASURES = ("mi-distance", "emim", "chi2", "gaussian")
MAXIMIZE = {"mi-distance": False, "emim": True, "chi2": True, "gaussian": True}
BINNINGS = ("equal", "quantile")

DEFAULT_BINS = 10
DEFAULT_LEVELS = 128
DEFAULT_CHUNK_ROWS = 1 << 18
MAX_CELLS = 1 << 24  # int64 count cells per thread copy: 128 MiB

_KINDS = ("category", "value", "width", "bins", "quantile", "constant")


# --------------------------------------------------------------------------- plans


@dataclass(frozen=True)
class BinPlan:
    """How one column becomes codes ``0 .. n_bins - 1``; code ``n_bins`` is the null bin.

    ``kind`` is one of ``category`` (``categories`` in code order), ``value`` (one bin
    per integer from ``lo``), ``width`` (equal width ``den`` from ``lo``), ``bins``
    (``n_bins`` equal bins over ``[lo, hi]``), ``quantile`` (``cuts``) or ``constant``.
    Linear kinds use ``code = floor((x - lo) * mul / den)``.
    """

    column: str
    kind: str
    n_bins: int
    lo: float = 0.0
    hi: float = 0.0
    mul: float = 1.0
    den: float = 1.0
    cuts: tuple[float, ...] = ()
    categories: tuple[str, ...] = ()

    @property
    def null_code(self) -> int:
        return self.n_bins

    @property
    def size(self) -> int:
        """Bins including the null bin."""
        return self.n_bins + 1

    def describe(self) -> dict:
        out: dict = {"kind": self.kind, "bins": self.n_bins}
        if self.kind in ("value", "width", "bins", "constant"):
            out["min"] = self.lo
            out["max"] = self.hi
        if self.kind == "width":
            out["width"] = self.den
        if self.kind == "quantile":
            out["cuts"] = list(self.cuts)
        if self.kind == "category":
            out["categories"] = list(self.categories)
        return out


def _column_type(name: str, dtype: pl.DataType) -> str:
    if dtype == pl.Boolean:
        return "bool"
    if dtype in (pl.String, pl.Categorical) or isinstance(dtype, (pl.Categorical, pl.Enum)):
        return "string"
    if dtype.is_integer():
        return "int"
    if dtype.is_float() or dtype.is_decimal():
        return "float"
    raise EngineError(f"column {name!r} has type {dtype}, which the profile cannot bin: cast it to a number or a string")


def _check_settings(columns, measure, width, bins, binning, levels, count, chunk_rows, threads):
    if measure not in MEASURES:
        raise EngineError(f"unknown measure {measure!r} (choose from {', '.join(MEASURES)})")
    if binning not in BINNINGS:
        raise EngineError(f"unknown binning {binning!r} (choose from {', '.join(BINNINGS)})")
    if width is not None and bins is not None:
        raise EngineError("give either width or bins, not both")
    if width is not None:
        if isinstance(width, bool) or not isinstance(width, (int, float)) or not math.isfinite(width) or width <= 0:
            raise EngineError(f"width must be a positive number, got {width!r}")
        if binning == "quantile":
            raise EngineError("quantile binning takes bins, not width")
    if bins is not None and (isinstance(bins, bool) or not isinstance(bins, (int, np.integer)) or bins < 1):
        raise EngineError(f"bins must be an integer >= 1, got {bins!r}")
    if isinstance(levels, bool) or not isinstance(levels, (int, np.integer)) or levels < 1:
        raise EngineError(f"levels must be an integer >= 1, got {levels!r}")
    if isinstance(chunk_rows, bool) or not isinstance(chunk_rows, (int, np.integer)) or chunk_rows < 1:
        raise EngineError(f"chunk_rows must be an integer >= 1, got {chunk_rows!r}")
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) or threads < 1):
        raise EngineError(f"threads must be an integer >= 1, got {threads!r}")
    if count is not None and (isinstance(count, bool) or not isinstance(count, (int, np.integer)) or not 1 <= count <= len(columns)):
        raise EngineError(f"count must be an integer between 1 and {len(columns)} (the number of columns), got {count!r}")


def _resolve_columns(src: Source, columns: Sequence[str] | None) -> list[str]:
    names = src.columns
    if columns is None:
        cols = list(names)
    elif isinstance(columns, str):
        raise EngineError("columns must be a list of names, not one string")
    else:
        cols = list(columns)
    if not cols:
        raise EngineError("the profile needs at least one column")
    known = set(names)
    seen = set()
    for c in cols:
        if c not in known:
            raise EngineError(f"unknown column {c!r} in {src.label}")
        if c in seen:
            raise EngineError(f"column {c!r} is listed twice")
        seen.add(c)
    return cols


def _parquet_min_max(src: Source, cols: Sequence[str]) -> dict | None:
    """Min and max of ``cols`` from Parquet row-group statistics, or None if any is missing."""
    if not cols or not src.paths or not all(p.lower().endswith((".parquet", ".pq", ".parq")) for p in src.paths):
        return None
    try:
        import pyarrow.parquet as pq

        lo = {c: math.inf for c in cols}
        hi = {c: -math.inf for c in cols}
        for path in src.paths:
            md = pq.ParquetFile(path).metadata
            where = {md.schema.column(i).path: i for i in range(md.num_columns)}
            for g in range(md.num_row_groups):
                rg = md.row_group(g)
                if rg.num_rows == 0:
                    continue
                for c in cols:
                    if c not in where:
                        return None
                    st = rg.column(where[c]).statistics
                    if st is None:
                        return None
                    if not st.has_min_max:
                        if st.null_count == rg.num_rows:
                            continue  # all null in this group
                        return None
                    lo[c] = min(lo[c], float(st.min))
                    hi[c] = max(hi[c], float(st.max))
    except Exception:  # unreadable or unusual metadata: plan with a data pass instead
        return None
    return {c: (None, None) if lo[c] > hi[c] else (lo[c], hi[c]) for c in cols}


def plan_bins(
    source,
    columns: Sequence[str] | None = None,
    *,
    width: float | None = None,
    bins: int | None = None,
    binning: str = "equal",
    levels: int = DEFAULT_LEVELS,
    max_cells: int = MAX_CELLS,
) -> list[BinPlan]:
    """Binning plan of ``columns`` (see the table in the module docstring).

    Reads no data for a Parquet input with statistics and no string columns;
    otherwise one Polars pass over just the columns that need it (min/max, the
    distinct strings, the quantiles). Raises ``EngineError`` on bad settings.
    """
    src = open_source(source)
    cols = _resolve_columns(src, columns)
    _check_settings(cols, "mi-distance", width, bins, binning, levels, None, 1, None)
    schema = src.schema
    types = {c: _column_type(c, schema[c]) for c in cols}
    if width is not None:
        for c in cols:
            if types[c] == "string":
                raise EngineError(f"column {c!r} is not numeric ({schema[c]}): width applies to numeric columns only (strings are binned by category; use bins or leave width out)")
    numeric = [c for c in cols if types[c] in ("int", "float")]
    stats = _parquet_min_max(src, numeric)
    exprs = []
    if stats is None:
        for c in numeric:
            exprs += [pl.col(c).cast(pl.Float64).min().alias(f"min:{c}"), pl.col(c).cast(pl.Float64).max().alias(f"max:{c}")]
    n_q = bins if bins is not None else DEFAULT_BINS
    if binning == "quantile" and n_q > 1:
        qs = [i / n_q for i in range(1, n_q)]
        for c in numeric:
            exprs.append(pl.col(c).cast(pl.Float64).drop_nans().quantile(qs, "linear").alias(f"q:{c}"))
    for c in cols:
        if types[c] == "string":
            exprs.append(pl.col(c).cast(pl.String).drop_nulls().unique().sort().implode().alias(f"cat:{c}"))
    row = {}
    if exprs and getattr(src, "piece_bytes", None) and not any(e.meta.output_name().startswith("q:") for e in exprs):
        # a CSV read in pieces under --memory-limit: the minima, maxima and categories of
        # each piece, combined (Polars' one-shot query would read the whole file at once)
        need = [c for c in cols if types[c] == "string" or (stats is None and c in numeric)]
        for _, frame in src.iter_frames(need, 100_000):
            part = frame.select(exprs).row(0, named=True)
            for key, v in part.items():
                if key not in row or row[key] is None:
                    row[key] = v
                elif v is None:
                    continue
                elif key.startswith("min:"):
                    row[key] = min(row[key], v)
                elif key.startswith("max:"):
                    row[key] = max(row[key], v)
                else:  # cat: the sorted distinct strings
                    row[key] = sorted(set(row[key]) | set(v))
        for e in exprs:
            row.setdefault(e.meta.output_name(), [] if e.meta.output_name().startswith("cat:") else None)
    elif exprs:
        try:
            row = src.lazy.select(exprs).collect().row(0, named=True)
        except Exception as exc:
            raise EngineError(f"cannot read {src.label}: {str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__}") from None
    if stats is None:
        stats = {c: (row[f"min:{c}"], row[f"max:{c}"]) for c in numeric}

    plans = []
    for c in cols:
        t = types[c]
        if t == "string":
            cats = tuple(row[f"cat:{c}"] or ())
            plans.append(BinPlan(c, "category", max(len(cats), 1), categories=cats))
            continue
        if t == "bool":
            plans.append(BinPlan(c, "value", 2, lo=0.0, hi=1.0))
            continue
        lo, hi = stats[c]
        if lo is None or (isinstance(lo, float) and math.isnan(lo)):
            plans.append(BinPlan(c, "constant", 1))
            continue
        lo, hi = float(lo), float(hi)
        if not (math.isfinite(lo) and math.isfinite(hi)):
            raise EngineError(f"column {c!r} has infinite values: cannot bin it")
        if lo == hi:
            plans.append(BinPlan(c, "constant", 1, lo=lo, hi=hi))
            continue
        if not math.isfinite((hi - lo) * max(float(n_q), 1.0)):  # e.g. -1e308 .. 1e308: codes would overflow
            raise EngineError(f"column {c!r} spans {lo:g} .. {hi:g}: too wide to bin for the dependency "
                              f"profile (its bin codes overflow a float); rescale the column")
        span = hi - lo + 1
        if t == "int" and width is None and span <= (bins if bins is not None else levels):
            plans.append(BinPlan(c, "value", int(span), lo=lo, hi=hi))
        elif width is not None:
            n_w = (hi - lo) / width
            if not math.isfinite(n_w) or n_w >= max_cells:  # (the cell count, or a C long, would overflow)
                raise EngineError(f"width {width:g} is too small for column {c!r} ({lo:g} .. {hi:g}): "
                                  f"{n_w:.3g} bins, the joint histograms allow {max_cells} count cells in all; "
                                  f"use a larger width")
            plans.append(BinPlan(c, "width", int(math.floor((hi - lo) / width)) + 1, lo=lo, hi=hi, den=float(width)))
        elif binning == "quantile":
            q = np.asarray(row.get(f"q:{c}") or [], dtype=np.float64)
            cuts = tuple(float(v) for v in np.unique(q) if lo < v <= hi)
            plans.append(BinPlan(c, "quantile", len(cuts) + 1, lo=lo, hi=hi, cuts=cuts))
        else:
            plans.append(BinPlan(c, "bins", int(n_q), lo=lo, hi=hi, mul=float(n_q), den=hi - lo))

    cells = _cell_layout(plans)[2]
    if cells > max_cells:
        big = max(plans, key=lambda p: p.n_bins)
        raise EngineError(
            f"the joint histograms need {cells} count cells (limit {max_cells}); column {big.column!r} alone has {big.n_bins} bins: use a larger width or fewer bins"
        )
    return plans


def _cell_layout(plans: Sequence[BinPlan]):
    """Offsets of the 1-D and pair counts in one flat array: (col_off, pairs, total)."""
    d = len(plans)
    col_off = np.zeros(d, np.int64)
    pos = 0
    for j, p in enumerate(plans):
        col_off[j] = pos
        pos += p.size
    pairs = [(a, b) for a in range(d) for b in range(a + 1, d)]
    pair_a = np.array([a for a, _ in pairs], np.int64)
    pair_b = np.array([b for _, b in pairs], np.int64)
    pair_off = np.zeros(len(pairs), np.int64)
    pair_stride = np.zeros(len(pairs), np.int64)
    for q, (a, b) in enumerate(pairs):
        pair_off[q] = pos
        pair_stride[q] = plans[b].size
        pos += plans[a].size * plans[b].size
    return col_off, (pair_a, pair_b, pair_off, pair_stride), pos


# ------------------------------------------------------------------------ counting


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


@contextlib.contextmanager
def _numba_threads(threads: int | None) -> Iterator[int]:
    # numba's thread count is per calling thread: set it here and restore it after.
    if threads is None:
        yield numba.get_num_threads()
        return
    prev = numba.get_num_threads()
    numba.set_num_threads(min(int(threads), numba.config.NUMBA_NUM_THREADS))
    try:
        yield numba.get_num_threads()
    finally:
        numba.set_num_threads(prev)


class _Failed:
    def __init__(self, exc: BaseException):
        self.exc = exc


def _prefetch(items: Iterable, depth: int = 2) -> Iterator:
    """Produce ``items`` on a background thread, ``depth`` ahead, so reading overlaps counting.

    Polars and the binning kernels release the GIL while they work.
    """
    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()
    done = object()

    def put(x) -> bool:
        while not stop.is_set():
            try:
                q.put(x, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def run():
        try:
            for x in items:
                if not put(x):
                    return
            put(done)
        except BaseException as exc:  # handed to the consumer, raised there
            put(_Failed(exc))

    th = threading.Thread(target=run, name="profile-reader", daemon=True)
    th.start()
    try:
        while True:
            x = q.get()
            if x is done:
                return
            if isinstance(x, _Failed):
                raise x.exc
            yield x
    finally:
        stop.set()
        th.join()


def code_dtype(plans: Sequence[BinPlan]) -> type:
    """Smallest unsigned dtype that holds every code (null bin included)."""
    top = max((p.size for p in plans), default=1)
    return np.uint8 if top <= 1 << 8 else np.uint16 if top <= 1 << 16 else np.uint32


def _encoded_chunks(src: Source, plans: Sequence[BinPlan], chunk_rows: int) -> Iterator[tuple[int, np.ndarray]]:
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
    col_off, (pair_a, pair_b, pair_off, pair_stride), cells = _cell_layout(plans)
    chunks = _encoded_chunks(src, plans, chunk_rows)
    if prefetch:
        chunks = _prefetch(chunks)
    n_rows = 0
    with _numba_threads(threads) as n_threads:
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
    with _numba_threads(threads) as n_threads:
        priv = np.zeros((n_threads, 4, d, d))
        for h, X in _prefetch(chunks()):
            histogram.accumulate_moments(X, h, shift, priv)
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


# ------------------------------------------------------------------------ measures


def entropy(counts: np.ndarray) -> float:
    """H(X) = -sum p log2 p over the nonzero cells (seed 000, section 3.1; 0 log 0 = 0).

    Terms are summed in increasing order of count, so tables holding the same
    multiset of counts give bit-identical entropies (seed 000's Table 1 has such
    ties: MI(A3, A5) = MI(A3, A6), and the tree's tie-break depends on them).
    """
    c = np.sort(np.asarray(counts, dtype=np.float64).ravel())
    c = c[c > 0]
    if c.size == 0:
        return 0.0
    p = c / c.sum()
    return float(-(p * np.log2(p)).sum())


def conditional_entropy(joint: np.ndarray) -> float:
    """H(Y|X) = H(X, Y) - H(X) for ``joint`` with X on the rows (seed 000, Proposition 1)."""
    return entropy(joint) - entropy(joint.sum(axis=1))


def mi_distance(joint: np.ndarray) -> float:
    """MI(A, B) = H(A|B) + H(B|A) = 2 H(A, B) - H(A) - H(B) (seed 000, Definition 2).

    Seed 000 prints "H(A1|A2) = H(A1, A2) - H(A1) = 0.6363" and "H(A2|A1) = 0.7433":
    by Proposition 1 the first is H(A2|A1) and the second H(A1|A2); the labels are
    swapped, the sum (1.3796) is right.
    """
    hab = entropy(joint)
    return 2.0 * hab - entropy(joint.sum(axis=1)) - entropy(joint.sum(axis=0))


def emim(joint: np.ndarray) -> float:
    """I*(X, Y) = sum p(x,y) log2(p(x,y) / (p(x) p(y))) over the nonzero cells (seed 004, eq. 5)."""
    C = np.asarray(joint, dtype=np.float64)
    n = C.sum()
    if n == 0:
        return 0.0
    px = C.sum(axis=1)
    py = C.sum(axis=0)
    i, j = np.nonzero(C)
    c = C[i, j]
    return float((c / n * np.log2(c * n / (px[i] * py[j]))).sum())


def chi2(joint: np.ndarray) -> float:
    """I_chi(X, Y) = sum (p(x,y) - p(x)p(y))^2 / (p(x)p(y)) (seed 004, eq. 6).

    The sum runs over every cell whose marginals are both nonzero, including cells
    never observed together (those are where independence fails most).
    """
    C = np.asarray(joint, dtype=np.float64)
    n = C.sum()
    if n == 0:
        return 0.0
    px = C.sum(axis=1) / n
    py = C.sum(axis=0) / n
    rx = px > 0
    ry = py > 0
    P = C[np.ix_(rx, ry)] / n
    E = np.outer(px[rx], py[ry])
    return float(((P - E) ** 2 / E).sum())


def gaussian(rho: float) -> float:
    """-0.5 log2(1 - rho^2): mutual information (bits) of jointly normal variables (seed 004, 4.2.4)."""
    r2 = rho * rho
    if r2 >= 1.0:
        return math.inf
    return -0.5 * math.log2(1.0 - r2)


_PAIR_MEASURE = {"mi-distance": mi_distance, "emim": emim, "chi2": chi2}


def measure_matrix(counts: Counts, measure: str) -> np.ndarray:
    """Symmetric (d, d) matrix of ``measure`` from joint counts; the diagonal is 0."""
    f = _PAIR_MEASURE[measure]
    d = len(counts.plans)
    M = np.zeros((d, d))
    for (a, b), C in counts.joint.items():
        M[a, b] = M[b, a] = f(C)
    return M


def gaussian_matrix(rho: np.ndarray) -> np.ndarray:
    d = rho.shape[0]
    M = np.zeros((d, d))
    for a in range(d):
        for b in range(a + 1, d):
            M[a, b] = M[b, a] = gaussian(float(rho[a, b]))
    return M


# ----------------------------------------------------------------- tree, selection


def spanning_tree(matrix: np.ndarray, maximize: bool) -> np.ndarray:
    """Kruskal's spanning tree (seed 000 Algorithm 1 step 3; seed 004 EMAD step 3): (d-1, 2) edges."""
    return graph.kruskal(np.ascontiguousarray(matrix, dtype=np.float64), bool(maximize))


def tree_degrees(edges: np.ndarray, d: int) -> np.ndarray:
    """Vertex degrees (seed 000, Definition 4)."""
    return graph.degrees(np.asarray(edges, np.int64).reshape(-1, 2), d)


def tree_strength(edges: np.ndarray, matrix: np.ndarray, maximize: bool) -> np.ndarray:
    """Dependence carried by each vertex's tree edges: sum of weights (maximum tree) or minus it."""
    d = matrix.shape[0]
    s = np.zeros(d)
    sign = 1.0 if maximize else -1.0
    for i, j in np.asarray(edges).reshape(-1, 2):
        s[i] += sign * matrix[i, j]
        s[j] += sign * matrix[i, j]
    return s


def rank_vertices(degrees: np.ndarray, strength: np.ndarray | None = None) -> list[int]:
    """Vertices by degree decreasing; ties by strength decreasing, then column position."""
    d = len(degrees)
    st = np.zeros(d) if strength is None else np.asarray(strength, dtype=np.float64)
    return sorted(range(d), key=lambda v: (-int(degrees[v]), -st[v], v))


def definition5(degrees: np.ndarray, strength: np.ndarray | None = None) -> list[int]:
    """Key attributes by seed 000, Definition 5: the first N vertices of the ranking with

    ``deg(v_1) + ... + deg(v_{N-1}) < m``  (11)   and   ``deg(v_1) + ... + deg(v_N) >= m``  (12),

    m the number of vertices. Read with m >= 2, where a tree's degrees add up to
    2(m - 1) >= m so N exists; for m = 1 (no edge) the single attribute is the key.
    Theorem 2 claims 2 <= N <= m/2; the upper bound fails for m = 2 (N = 2) and for
    odd paths (m = 3: degrees 2, 1, 1 give N = 2): the rule is what we implement.
    """
    order = rank_vertices(degrees, strength)
    m = len(order)
    if m <= 1:
        return order
    total = 0
    for n, v in enumerate(order, start=1):
        total += int(degrees[v])
        if total >= m:
            return order[:n]
    return order  # unreachable for a tree


def emad_top(degrees: np.ndarray, count: int, strength: np.ndarray | None = None) -> list[int]:
    """Seed 004, EMAD step 4: the first ``count`` vertices by decreasing degree (ties as ``rank_vertices``)."""
    return rank_vertices(degrees, strength)[:count]


def emad_candidates(degrees: np.ndarray, count: int) -> list[tuple[int, ...]]:
    """Every ``count``-subset that "the first d' by degree" allows when degrees tie.

    Seed 004 reports these as "No. of possibilities" (Tables 5-8). Subsets are sorted
    tuples of positions, in lexicographic order.
    """
    deg = np.asarray(degrees)
    ranked = sorted(range(len(deg)), key=lambda v: (-int(deg[v]), v))
    cut = int(deg[ranked[count - 1]])
    sure = [v for v in ranked if deg[v] > cut]
    tied = [v for v in ranked if deg[v] == cut]
    need = count - len(sure)
    return sorted(tuple(sorted(sure + list(c))) for c in itertools.combinations(tied, need))


# ------------------------------------------------------------------------- profile


@dataclass
class ProfileResult:
    """Dependency matrix, tree and key attributes of a profile (see ``profile``)."""

    columns: list[str]
    measure: str
    matrix: np.ndarray
    tree_edges: list[tuple[str, str]]
    edge_weights: list[float]
    degrees: dict[str, int]
    key_attributes: list[str]
    selection: str
    n_rows: int
    plans: list[BinPlan] = field(default_factory=list)
    entropy: dict[str, float] | None = None
    nulls: dict[str, int] | None = None
    counts: Counts | None = None
    rho: np.ndarray | None = None
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def maximize(self) -> bool:
        return MAXIMIZE[self.measure]

    def edge_index(self) -> np.ndarray:
        pos = {c: j for j, c in enumerate(self.columns)}
        return np.array([(pos[a], pos[b]) for a, b in self.tree_edges], np.int64).reshape(-1, 2)

    def candidates(self, count: int) -> list[list[str]]:
        """All key-attribute sets of size ``count`` the degree ranking allows (``emad_candidates``)."""
        deg = np.array([self.degrees[c] for c in self.columns])
        return [[self.columns[v] for v in s] for s in emad_candidates(deg, count)]

    def to_dict(self) -> dict:
        """JSON-ready: ``columns``, ``matrix`` (non-finite values as null), ``tree_edges``, ``degrees``, ``key_attributes``, ..."""

        def num(x):
            x = float(x)
            return x if math.isfinite(x) else None

        out = {
            "columns": list(self.columns),
            "measure": self.measure,
            "tree": "maximum" if self.maximize else "minimum",
            "n_rows": int(self.n_rows),
            "matrix": [[num(v) for v in row] for row in self.matrix],
            "tree_edges": [[a, b] for a, b in self.tree_edges],
            "edge_weights": [num(w) for w in self.edge_weights],
            "degrees": {c: int(v) for c, v in self.degrees.items()},
            "key_attributes": list(self.key_attributes),
            "selection": self.selection,
        }
        if self.entropy is not None:
            out["entropy"] = {c: num(v) for c, v in self.entropy.items()}
        if self.nulls is not None:
            out["nulls"] = dict(self.nulls)
        if self.plans:
            out["bins"] = {p.column: p.describe() for p in self.plans}
        if self.seconds:
            out["seconds"] = {k: round(v, 6) for k, v in self.seconds.items()}
        return out

    def render(self, digits: int = 4) -> str:
        """Plain-text report: matrix, tree edges, degrees, key attributes."""
        w = max(8, digits + 5, *(len(c) for c in self.columns))
        lines = [
            f"measure: {self.measure} ({'maximum' if self.maximize else 'minimum'} spanning tree), {self.n_rows} rows",
            " " * w + "".join(f"{c:>{w}}" for c in self.columns),
        ]
        for c, row in zip(self.columns, self.matrix):
            lines.append(f"{c:<{w}}" + "".join(f"{v:>{w}.{digits}f}" for v in row))
        lines.append("tree edges (in the order Kruskal took them):")
        for (a, b), x in zip(self.tree_edges, self.edge_weights):
            lines.append(f"  {a} - {b}  {x:.{digits}f}")
        lines.append("degrees: " + ", ".join(f"{c} {v}" for c, v in self.degrees.items()))
        lines.append(f"key attributes ({self.selection}): " + ", ".join(self.key_attributes))
        return "\n".join(lines)


def profile(
    source,
    columns: Sequence[str] | None = None,
    measure: str = "mi-distance",
    *,
    width: float | None = None,
    bins: int | None = None,
    binning: str = "equal",
    levels: int = DEFAULT_LEVELS,
    count: int | None = None,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    threads: int | None = None,
    max_cells: int = MAX_CELLS,
    separator: str | None = None,
    null_values=None,
    encoding: str | None = None,
) -> ProfileResult:
    """All-pairs dependency profile of ``columns`` of ``source`` and its key attributes.

    ``source`` is anything ``engine.io.open_source`` opens (path, glob, folder,
    Polars frame, NumPy array). ``measure``: ``mi-distance`` (minimum spanning tree,
    seed 000), ``emim``, ``chi2`` or ``gaussian`` (maximum spanning tree, seed 004).
    Key attributes: seed 000's Definition 5 when ``count`` is None, else seed 004's
    EMAD top-``count``. ``width`` / ``bins`` / ``binning`` / ``levels``: see
    ``plan_bins`` (``gaussian`` uses none of them). ``threads``: Numba threads for
    the counting kernel (default: Numba's setting). ``separator``, ``null_values``,
    ``encoding``: how a CSV input is read (``engine.io.source.CsvOptions``).
    """
    from .io.source import csv_options

    src = open_source(source, csv=csv_options(separator, null_values, encoding))
    try:
        return _profile(src, columns, measure, width, bins, binning, levels, count, chunk_rows, threads, max_cells)
    finally:
        src.close()


def _profile(src, columns, measure, width, bins, binning, levels, count, chunk_rows, threads,
             max_cells) -> ProfileResult:
    cols = _resolve_columns(src, columns)
    src.check_reconciled(cols)
    _check_settings(cols, measure, width, bins, binning, levels, count, chunk_rows, threads)
    t0 = time.perf_counter()
    plans = plan_bins(src, cols, width=width, bins=bins, binning=binning, levels=levels, max_cells=max_cells)
    t1 = time.perf_counter()
    ent = nulls = counts = rho = None
    if measure == "gaussian":
        rho, n_rows = pearson_matrix(src, plans, chunk_rows=chunk_rows, threads=threads)
        t2 = time.perf_counter()
        M = gaussian_matrix(rho)
    else:
        counts = count_pairs(src, plans, chunk_rows=chunk_rows, threads=threads)
        t2 = time.perf_counter()
        n_rows = counts.n_rows
        M = measure_matrix(counts, measure)
        ent = {c: entropy(m) for c, m in zip(cols, counts.marginals)}
        nulls = {c: int(m[-1]) for c, m in zip(cols, counts.marginals)}
    out = _finish(cols, measure, M, count, n_rows, plans, ent, nulls, counts, rho)
    out.seconds = {"plan": t1 - t0, "count": t2 - t1, "tree": time.perf_counter() - t2}
    return out


def _finish(cols, measure, M, count, n_rows, plans=(), ent=None, nulls=None, counts=None, rho=None) -> ProfileResult:
    d = len(cols)
    maximize = MAXIMIZE[measure]
    edges = spanning_tree(M, maximize)
    deg = tree_degrees(edges, d)
    strength = tree_strength(edges, M, maximize)
    if count is None:
        keys, selection = definition5(deg, strength), "seed 000 definition 5"
    else:
        keys, selection = emad_top(deg, count, strength), f"seed 004 EMAD, top {count} by degree"
    return ProfileResult(
        columns=list(cols),
        measure=measure,
        matrix=M,
        tree_edges=[(cols[i], cols[j]) for i, j in edges],
        edge_weights=[float(M[i, j]) for i, j in edges],
        degrees={c: int(v) for c, v in zip(cols, deg)},
        key_attributes=[cols[v] for v in keys],
        selection=selection,
        n_rows=int(n_rows),
        plans=list(plans),
        entropy=ent,
        nulls=nulls,
        counts=counts,
        rho=rho,
    )


def profile_from_matrix(columns: Sequence[str], matrix, measure: str = "mi-distance", count: int | None = None) -> ProfileResult:
    """Tree and key attributes of a given dependency matrix (for printed matrices such as seed 000's)."""
    if measure not in MEASURES:
        raise EngineError(f"unknown measure {measure!r} (choose from {', '.join(MEASURES)})")
    M = np.asarray(matrix, dtype=np.float64)
    if M.ndim != 2 or M.shape != (len(columns), len(columns)):
        raise EngineError(f"matrix must be {len(columns)} x {len(columns)}, got shape {M.shape}")
    return _finish(list(columns), measure, M, count, 0)


def select_key_attributes(
    source,
    qi: Sequence[str],
    measure: str = "mi-distance",
    count: int | None = None,
    **options,
) -> list[str]:
    """Key attributes among the quasi-identifiers ``qi`` (seed 000 Definition 5, or EMAD top-``count``).

    ``options`` go to ``profile`` (``width``, ``bins``, ``binning``, ``levels``,
    ``chunk_rows``, ``threads``). The order is the ranking order (most central first).
    """
    return profile(source, qi, measure, count=count, **options).key_attributes


# ------------------------------------------------- in-memory AMA and the baseline


def standardize(X: np.ndarray) -> np.ndarray:
    """Z-scores with the population standard deviation; a constant column becomes 0."""
    X = np.asarray(X, dtype=np.float64)
    mean = X.mean(axis=0) if X.shape[0] else np.zeros(X.shape[1])
    sd = X.std(axis=0) if X.shape[0] else np.zeros(X.shape[1])
    Z = np.zeros_like(X)
    nz = sd > 0
    Z[:, nz] = (X[:, nz] - mean[nz]) / sd[nz]
    return np.ascontiguousarray(Z)


def information_loss(Z: np.ndarray, labels: np.ndarray) -> float:
    """IL = 100 * SSE / SST of the partition ``labels`` in the space of ``Z``'s columns."""
    Z = np.asarray(Z, dtype=np.float64)
    labels = np.asarray(labels, dtype=np.int64)
    if Z.shape[0] == 0:
        return 0.0
    size = np.bincount(labels).astype(np.float64)
    sse = 0.0
    sst = 0.0
    for j in range(Z.shape[1]):
        z = Z[:, j]
        cen = np.bincount(labels, weights=z, minlength=size.shape[0])
        cen = np.divide(cen, size, out=np.zeros_like(cen), where=size > 0)
        sse += float(((z - cen[labels]) ** 2).sum())
        sst += float(((z - z.mean()) ** 2).sum())
    return 100.0 * sse / sst if sst > 0 else 0.0


def ama_labels(Z: np.ndarray, key: Sequence[int], k: int, method: int = mdav.MDAV, gamma: float = 0.0) -> np.ndarray:
    """Groups of seed 000's Algorithm 2 (AMA) on standardized ``Z`` (n, m).

    Steps 1-2: project on the key attributes ``key``; steps 3-7: MDAV on the
    projection with ``engine.kernels.mdav``. The seed's ending differs slightly from
    that MDAV (Domingo-Ferrer & Torra 2005: pairs of groups while at least 3k records
    remain, one more group if 2k..3k-1 remain, the rest as the last group): its step
    5 repeats while at least 2k remain, its garbled step 6 "between k and k - 1" we
    read as "between k and 2k - 1" (they form a group), and step 7 sends fewer than
    k leftovers to the nearest group. We run the engine's MDAV, the method the seed
    compares against, so AMA and MDAV differ only in the attributes used. Step 8 (every attribute replaced by its group centroid) is the
    caller's: ``information_loss(Z, labels)`` is the IL of that release in the full
    space, ``information_loss(Z[:, key], labels)`` in the projected space.
    """
    P = np.ascontiguousarray(np.asarray(Z, dtype=np.float64)[:, list(key)])
    return mdav.microaggregate(P, method, int(k), float(gamma))


@dataclass
class SubsetScan:
    """IL (full space) of MDAV on every attribute subset of one size (seed 004, Table 4)."""

    size: int
    il: dict[tuple[int, ...], float]

    @property
    def n_subsets(self) -> int:
        return len(self.il)

    @property
    def min(self) -> tuple[float, tuple[int, ...]]:
        s = min(self.il, key=lambda t: (self.il[t], t))
        return self.il[s], s

    @property
    def max(self) -> tuple[float, tuple[int, ...]]:
        s = max(self.il, key=lambda t: (self.il[t], tuple(-v for v in t)))
        return self.il[s], s

    @property
    def mean(self) -> float:
        return float(np.mean(list(self.il.values())))

    def rank(self, subset: Iterable[int]) -> int:
        """How many subsets have a strictly lower IL than ``subset`` (0 = the best)."""
        x = self.il[tuple(sorted(subset))]
        return sum(1 for v in self.il.values() if v < x)


def subset_scan(Z: np.ndarray, size: int, k: int, method: int = mdav.MDAV, gamma: float = 0.0) -> SubsetScan:
    """Exhaustive baseline: MDAV on the projection onto every ``size``-subset of the columns.

    Seed 004, Table 4: "the minimum, mean and maximum IL over all subsets". IL is
    measured in the full space of ``Z``, the seed's reading (its Table 4 figures are
    full-space ILs: Census {7, 8, 10} gives 15.55 here against its 15.60).
    """
    Z = np.ascontiguousarray(np.asarray(Z, dtype=np.float64))
    m = Z.shape[1]
    if not 1 <= size <= m:
        raise EngineError(f"subset size must be between 1 and {m}, got {size}")
    il = {}
    for sub in itertools.combinations(range(m), size):
        il[sub] = information_loss(Z, ama_labels(Z, sub, k, method, gamma))
    return SubsetScan(size, il)
