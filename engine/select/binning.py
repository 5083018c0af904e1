"""Plan the bins: every attribute of the dependency profile becomes small integer codes (stage 1 of ``engine.select``)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import polars as pl
import pyarrow.parquet as pq

from ..checks import is_finite_number, is_int
from ..errors import EngineError
from ..io import TableSource, open_source


MEASURES = ("mi-distance", "emim", "chi2", "gaussian")
MAXIMIZE = {"mi-distance": False, "emim": True, "chi2": True, "gaussian": True}
BINNINGS = ("equal", "quantile")

DEFAULT_BINS = 10
DEFAULT_LEVELS = 128
DEFAULT_CHUNK_ROWS = 1 << 18
MAX_CELLS = 1 << 24  # int64 count cells per thread copy: 128 MiB

_KINDS = ("category", "value", "width", "bins", "quantile", "constant")


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


def check_settings(columns, measure, width, bins, binning, levels, count, chunk_rows, threads):
    """Raise ``EngineError`` on a bad setting of ``plan_bins`` or ``profile`` (``columns``: the resolved names)."""
    if measure not in MEASURES:
        raise EngineError(f"unknown measure {measure!r} (choose from {', '.join(MEASURES)})")
    if binning not in BINNINGS:
        raise EngineError(f"unknown binning {binning!r} (choose from {', '.join(BINNINGS)})")
    if width is not None and bins is not None:
        raise EngineError("give either width or bins, not both")
    if width is not None:
        if not is_finite_number(width) or width <= 0:
            raise EngineError(f"width must be a positive number, got {width!r}")
        if binning == "quantile":
            raise EngineError("quantile binning takes bins, not width")
    if bins is not None and (not is_int(bins) or bins < 1):
        raise EngineError(f"bins must be an integer >= 1, got {bins!r}")
    if not is_int(levels) or levels < 1:
        raise EngineError(f"levels must be an integer >= 1, got {levels!r}")
    if not is_int(chunk_rows) or chunk_rows < 1:
        raise EngineError(f"chunk_rows must be an integer >= 1, got {chunk_rows!r}")
    if threads is not None and (not is_int(threads) or threads < 1):
        raise EngineError(f"threads must be an integer >= 1, got {threads!r}")
    if count is not None and (not is_int(count) or not 1 <= count <= len(columns)):
        raise EngineError(f"count must be an integer between 1 and {len(columns)} (the number of columns), got {count!r}")


def resolve_columns(src: TableSource, columns: Sequence[str] | None) -> list[str]:
    """The names ``columns`` of ``src`` (all its columns for None), checked: known, each once, at least one."""
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


def _parquet_min_max(src: TableSource, cols: Sequence[str]) -> dict | None:
    """Min and max of ``cols`` from Parquet row-group statistics, or None if any is missing."""
    if not cols or not src.paths or not all(p.lower().endswith((".parquet", ".pq", ".parq")) for p in src.paths):
        return None
    try:
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


def _scan(src: TableSource, cols, types, numeric, min_max: bool, n_q: int) -> dict:
    """One pass over the columns that need it: ``min:c`` / ``max:c`` of the numeric
    columns (``min_max``), ``q:c`` their ``n_q``-quantile cuts (``n_q`` > 1) and
    ``cat:c`` the sorted distinct strings of the string columns."""
    exprs = []
    if min_max:
        for c in numeric:
            exprs += [pl.col(c).cast(pl.Float64).min().alias(f"min:{c}"), pl.col(c).cast(pl.Float64).max().alias(f"max:{c}")]
    if n_q > 1:
        qs = [i / n_q for i in range(1, n_q)]
        for c in numeric:
            exprs.append(pl.col(c).cast(pl.Float64).drop_nans().quantile(qs, "linear").alias(f"q:{c}"))
    for c in cols:
        if types[c] == "string":
            exprs.append(pl.col(c).cast(pl.String).drop_nulls().unique().sort().implode().alias(f"cat:{c}"))
    row = {}
    if exprs and src.piece_bytes and not (n_q > 1 and numeric):
        # a CSV read in pieces under --memory-limit: the minima, maxima and categories of
        # each piece, combined (Polars' one-shot query would read the whole file at once)
        need = [c for c in cols if types[c] == "string" or (min_max and c in numeric)]
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
    return row


def _plan_column(c: str, t: str, stats, row: dict, width, bins, binning, levels, n_q, max_cells) -> BinPlan:
    """The plan of column ``c`` of type ``t`` (``_column_type``), its min and max
    ``stats``, what ``_scan`` found in ``row``."""
    if t == "string":
        cats = tuple(row[f"cat:{c}"] or ())
        return BinPlan(c, "category", max(len(cats), 1), categories=cats)
    if t == "bool":
        return BinPlan(c, "value", 2, lo=0.0, hi=1.0)
    lo, hi = stats
    if lo is None or (isinstance(lo, float) and math.isnan(lo)):
        return BinPlan(c, "constant", 1)
    lo, hi = float(lo), float(hi)
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise EngineError(f"column {c!r} has infinite values: cannot bin it")
    if lo == hi:
        return BinPlan(c, "constant", 1, lo=lo, hi=hi)
    if not math.isfinite((hi - lo) * max(float(n_q), 1.0)):  # e.g. -1e308 .. 1e308: codes would overflow
        raise EngineError(f"column {c!r} spans {lo:g} .. {hi:g}: too wide to bin for the dependency "
                          f"profile (its bin codes overflow a float); rescale the column")
    span = hi - lo + 1
    if t == "int" and width is None and span <= (bins if bins is not None else levels):
        return BinPlan(c, "value", int(span), lo=lo, hi=hi)
    if width is not None:
        n_w = (hi - lo) / width
        if not math.isfinite(n_w) or n_w >= max_cells:  # (the cell count, or a C long, would overflow)
            raise EngineError(f"width {width:g} is too small for column {c!r} ({lo:g} .. {hi:g}): "
                              f"{n_w:.3g} bins, the joint histograms allow {max_cells} count cells in all; "
                              f"use a larger width")
        return BinPlan(c, "width", int(math.floor((hi - lo) / width)) + 1, lo=lo, hi=hi, den=float(width))
    if binning == "quantile":
        q = np.asarray(row.get(f"q:{c}") or [], dtype=np.float64)
        cuts = tuple(float(v) for v in np.unique(q) if lo < v <= hi)
        return BinPlan(c, "quantile", len(cuts) + 1, lo=lo, hi=hi, cuts=cuts)
    return BinPlan(c, "bins", int(n_q), lo=lo, hi=hi, mul=float(n_q), den=hi - lo)


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
    cols = resolve_columns(src, columns)
    check_settings(cols, "mi-distance", width, bins, binning, levels, None, 1, None)
    schema = src.schema
    types = {c: _column_type(c, schema[c]) for c in cols}
    if width is not None:
        for c in cols:
            if types[c] == "string":
                raise EngineError(f"column {c!r} is not numeric ({schema[c]}): width applies to numeric columns only (strings are binned by category; use bins or leave width out)")
    numeric = [c for c in cols if types[c] in ("int", "float")]
    n_q = bins if bins is not None else DEFAULT_BINS
    stats = _parquet_min_max(src, numeric)
    row = _scan(src, cols, types, numeric, stats is None, n_q if binning == "quantile" else 1)
    if stats is None:
        stats = {c: (row[f"min:{c}"], row[f"max:{c}"]) for c in numeric}
    plans = [_plan_column(c, types[c], stats.get(c), row, width, bins, binning, levels, n_q, max_cells) for c in cols]
    cells = cell_layout(plans)[2]
    if cells > max_cells:
        big = max(plans, key=lambda p: p.n_bins)
        raise EngineError(
            f"the joint histograms need {cells} count cells (limit {max_cells}); column {big.column!r} alone has {big.n_bins} bins: use a larger width or fewer bins"
        )
    return plans


def cell_layout(plans: Sequence[BinPlan]):
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
