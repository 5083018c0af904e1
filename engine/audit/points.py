"""The quasi-identifiers as numbers for ``engine.audit.risk``: the layout of numeric,
date, ordinal and nominal QIs (with their missing-value indicators), the
standardization, the release's masked values (a range's midpoint) and the keys of
its equivalence classes as a float matrix. ``engine.audit.risk``'s docstring gives
the definitions.

Codes (``anonymize --nominal``/``--missing``, or a statistical file's declarations): a
numeric QI named nominal is laid out as a category (one-hot over the original's
codes, a code compared as the text of its number read as a float, so ``1`` and ``1.0``
are one category: an Int64 original beside a Float64 ``.sav`` release); a numeric QI's
declared missing codes are missing values, on both sides, as nulls are (a nominal
QI's code stays a category of its own).
"""

from __future__ import annotations

import os

import numpy as np
import polars as pl
import pyarrow.parquet as pq

from ..declared import parse_missing
from ..encode.codes import mask_codes, resolve_missing
from ..errors import EngineError
from ..io.labelled import declared, file_meta
from ..io.source import TableSource
from ..options import parse_nominal, parse_ordinal
from ..tuning import ONE_HOT_MAX
from .classes import is_numeric, parse_columns
from .loss import iso_date_columns


def standardize(X: np.ndarray, scale: np.ndarray, mean: np.ndarray, sd: np.ndarray) -> np.ndarray:
    """``(X / scale - mean) / sd`` per column, 0 where sd is 0, and 0 (the mean of the
    values present) for a missing value (NaN). Elementwise, so a row's result does not
    depend on which chunk it came in (the tree and the scoring pass see bit-identical
    values)."""
    safe = np.where(sd > 0, sd, 1.0)
    Z = (X / scale - mean) / safe
    Z[:, sd == 0] = 0.0
    missing = np.isnan(Z)
    if missing.any():
        Z[missing] = 0.0
    return np.ascontiguousarray(Z)


def published(frame: pl.DataFrame, pub: dict, qi: list[str], offset: int, label: str) -> list[pl.Series]:
    """Each QI's masked value as one column: the release's own, or a range's midpoint
    (missing when both ends are; one end missing is an error naming the row)."""
    out = []
    for c in qi:
        cols = pub[c]
        if len(cols) == 1:
            out.append(frame.get_column(cols[0]))
            continue
        lo_s, hi_s = frame.get_column(cols[0]), frame.get_column(cols[1])
        half = lo_s.is_null() != hi_s.is_null()
        if half.any():
            i = int(half.arg_true()[0])
            raise EngineError(f"columns {cols[0]!r} / {cols[1]!r} of {label} hold a range missing at one end at row "
                              f"{offset + i + 1} (rows counted from 1)")
        lo = lo_s.cast(pl.Float64).fill_null(np.nan).to_numpy()
        hi = hi_s.cast(pl.Float64).fill_null(np.nan).to_numpy()
        mid = pl.Series(c, 0.5 * lo + 0.5 * hi)
        out.append(mid.scatter(lo_s.is_null().arg_true(), None) if lo_s.null_count() else mid)
    return out


def declared_codes(osrc: TableSource, original, qi, *, nominal=None, missing=None, numeric=None,
                   ordinal=None) -> tuple:
    """``(nominal QIs, {QI: declared missing codes})`` for the risk: the options as
    ``anonymize`` takes them, with the categories and codes a statistical file's
    declarations add (``engine.io.labelled.declared``; ``numeric`` overrides), each code
    read as its column's type in ``osrc``; one line naming a bad one."""
    qi = parse_columns(qi)
    meta = file_meta(original) if isinstance(original, (str, os.PathLike)) else None
    orders = [c for c, _, _ in parse_ordinal(ordinal) or ()]
    nominal, missing = declared(meta, qi, numeric=parse_nominal(numeric, "numeric (--numeric)"),
                                nominal=parse_nominal(nominal), ordinal=orders, missing=parse_missing(missing))
    for label, cols in (("nominal (--nominal)", nominal), ("missing (--missing)", [c for c, _ in missing])):
        for c in cols:
            if c not in qi:
                raise EngineError(f"{label}: column {c!r} is not a quasi-identifier")
            if c not in osrc.columns:
                raise EngineError(f"column {c!r} not found in {osrc.label}")
    kinds = {c: ("nominal" if c in nominal or not is_numeric(osrc.schema[c]) else "numeric", osrc.schema[c])
             for c, _ in missing}
    return frozenset(nominal), resolve_missing(missing, kinds, osrc.label)


def category_text(s: pl.Series, kind: str) -> pl.Series:
    """A categorical QI's values as texts: a nominal number's as a float's (``1`` and
    ``1.0``: one category; an ordinal's order lists its texts), others as they are."""
    if kind == "nominal" and s.dtype.is_numeric():
        s = s.cast(pl.Float64)
    return s.cast(pl.String)


def null_columns(src: TableSource, columns: list[str], chunk_rows: int) -> set:
    """The ``columns`` of ``src`` that hold a missing value: a Parquet file's footers
    when every row group records its null count, else one read of those columns."""
    known = parquet_nulls(src.paths, columns) if src.kind == "parquet" and src.paths else {}
    found = {c for c, v in known.items() if v}
    rest = [c for c in columns if known.get(c) is None]
    if rest:
        for _, frame in src.iter_frames(rest, chunk_rows):
            found.update(c for c in rest if frame.get_column(c).null_count())
    return found


def parquet_nulls(paths, columns: list[str]) -> dict:
    """Per column, its null count over the row groups of ``paths`` from the footers'
    statistics, or None when a row group does not record it."""
    out: dict = dict.fromkeys(columns, 0)
    for f in paths:
        md = pq.read_metadata(f)
        names = md.schema.to_arrow_schema().names
        for c in columns:
            if out[c] is None or c not in names:
                out[c] = None
                continue
            i = names.index(c)
            for g in range(md.num_row_groups):
                st = md.row_group(g).column(i).statistics
                if st is None or not st.has_null_count:
                    out[c] = None
                    break
                out[c] += st.null_count
    return out


def _sign_name(c: str) -> str:
    return f"__microagg_risk_sign__{c}"


def coded_key(dtype) -> bool:
    """A class key column compared as text (coded by the sorted texts of the classes)."""
    return not (dtype.is_float() or dtype.is_integer() or dtype.is_temporal() or dtype == pl.Boolean)


def key_columns(schema, kcols: list[str]) -> list[str]:
    """The columns of ``key_frame``: the release's, then a sign column per float one."""
    return kcols + [_sign_name(c) for c in kcols if schema[c].is_float()]


def key_frame(frame: pl.DataFrame, kcols: list[str]) -> pl.DataFrame:
    """The columns that key the classes, and per float column one more: 1 for
    ``-0.0``, 2 for NaN, else 0 (``-0.0 == 0.0`` and a NaN would match a missing value in
    the key matrix; a release shows them apart)."""
    extra = [pl.when(pl.col(c).is_nan()).then(2).when((pl.col(c) == 0.0) & ((1.0 / pl.col(c)) < 0.0)).then(1)
             .otherwise(0).fill_null(0).cast(pl.Int8).alias(_sign_name(c))
             for c in kcols if frame.schema[c].is_float()]
    return frame.select(kcols).with_columns(extra)


_NARROW = (pl.Boolean, pl.Int8, pl.Int16, pl.Int32, pl.UInt8, pl.UInt16, pl.UInt32)


def key_matrix(frame: pl.DataFrame, coded: dict) -> np.ndarray:
    """A key frame (``key_frame``) as float64 columns that are equal exactly when the
    values are, a missing value NaN: a float as it is; an integer of up to 32 bits, a
    Boolean, as it is; a wider one (64-bit integers, dates, datetimes: their physical
    value) as its high and low 32 bits; a text (``coded``: the column's sorted texts as
    an Enum) as its code."""
    parts = []
    for c in frame.columns:
        s = frame.get_column(c)
        if c in coded:
            parts.append(s.cast(pl.String).cast(coded[c]).to_physical().cast(pl.Float64).to_numpy())
            continue
        if s.dtype.is_float():
            parts.append(s.cast(pl.Float64).to_numpy())
            continue
        if s.dtype in _NARROW:
            parts.append(s.cast(pl.Float64).to_numpy())
            continue
        v = s.to_physical() if s.dtype.is_temporal() else s
        x = v.fill_null(0).to_numpy()
        x = x.view(np.int64) if x.dtype == np.uint64 else x.astype(np.int64, copy=False)
        hi, lo = (x >> 32).astype(np.float64), (x & 0xFFFFFFFF).astype(np.float64)
        if s.null_count():
            missing = s.is_null().to_numpy()
            hi[missing] = lo[missing] = np.nan
        parts += [hi, lo]
    return np.ascontiguousarray(np.column_stack(parts)) if parts else np.zeros((frame.height, 0))


def present(X: np.ndarray) -> np.ndarray | None:
    """False where ``X`` holds a missing value (NaN: a non-finite value present is an
    error before), or None when none is missing."""
    missing = np.isnan(X)
    return ~missing if missing.any() else None


class Layout:
    """The QIs as numbers (see the module docstring): numeric and date QIs one column
    each, ordinal QIs their rank, nominal QIs one-hot over the original's sorted
    categories (``one_hot`` marks those columns); a QI with a missing value (in the
    original or the release: ``lay_out``) gets a missing-value indicator column beside
    its value (numeric, date, ordinal: ``indicator``, ``value_of`` its value's column)
    or a category of its own, the last (nominal). A nominal QI of more than
    ``ONE_HOT_MAX`` categories (its missing value counted) is one column instead, its
    category's code (``coded``; -1 a category the original lacks): ``n x categories``
    one-hot columns would not fit, and the distance is the same (``engine.kernels.risk.
    pattern_offset``: 1 between two categories).

    ``__init__`` reads the original once for its categories and, unless its Parquet
    footers tell, which QIs hold a missing value; ``lay_out`` fixes the columns."""

    def __init__(self, osrc: TableSource, qi: list[str], ordinal, chunk_rows: int, nominal=(), codes=None):
        orders = {c: (order, by) for c, order, by in parse_ordinal(ordinal) or ()}
        self.missing_codes = {c: v for c, v in (codes or {}).items() if c not in nominal}  # numeric QIs' missing codes
        for c in orders:
            if c not in qi:
                raise EngineError(f"ordinal (--ordinal): column {c!r} is not a quasi-identifier")
        schema = osrc.schema
        self.qi = qi
        self.dates = {c for c in qi if schema[c].is_temporal() and c not in orders}
        if osrc.kind == "csv":  # a CSV's ISO dates, as anonymize reads them
            self.dates |= iso_date_columns(osrc, [c for c in qi if c not in orders])
        self.kinds = {c: ("ordinal" if c in orders else "nominal") for c in qi
                      if c in orders or c in nominal or not (is_numeric(schema[c]) or c in self.dates)}
        values: dict = {c: set() for c in self.kinds}
        mins: dict = {c: {} for c in self.kinds}
        by_cols = {c: orders[c][1] for c in self.kinds if c in orders and orders[c][1] is not None}
        for by in by_cols.values():
            if by not in osrc.columns:
                raise EngineError(f"ordinal (--ordinal): column {by!r} not found in {osrc.label}")
        known = parquet_nulls(osrc.paths, qi) if osrc.kind == "parquet" and osrc.paths else {}
        self.nulls = {c for c, v in known.items() if v}  # the QIs with a missing value
        unknown = [c for c in qi if known.get(c) is None or c in self.missing_codes]
        read = list(dict.fromkeys(list(self.kinds) + list(by_cols.values()) + unknown))
        if read:
            for _, f in osrc.iter_frames(read, chunk_rows):
                self.nulls.update(c for c in unknown if self.masked(c, f.get_column(c)).null_count())
                for c in self.kinds:
                    t = category_text(f.get_column(c), self.kinds[c])
                    if c in by_cols:
                        g = pl.DataFrame({"c": t, "b": f.get_column(by_cols[c]).cast(pl.Float64, strict=False)}) \
                            .group_by("c").agg(pl.col("b").min())
                        for v, m in g.iter_rows():
                            old = mins[c].get(v)
                            mins[c][v] = m if old is None or (m is not None and m < old) else old
                    values[c].update(t.drop_nulls().unique().to_list())
        self.categories = {}
        for c, kind in self.kinds.items():
            if kind == "nominal":
                self.categories[c] = sorted(values[c])
            elif orders[c][0] is not None:
                self.categories[c] = list(orders[c][0])
            elif c in by_cols:
                self.categories[c] = sorted(values[c], key=lambda v: (mins[c].get(v) is None, mins[c].get(v) or 0, v))
            elif isinstance(schema[c], pl.Enum):
                self.categories[c] = schema[c].categories.to_list()
            else:
                raise EngineError(f"ordinal (--ordinal): give the order of column {c!r} (COL=CAT1,CAT2,...)")

    def masked(self, c: str, s: pl.Series) -> pl.Series:
        """QI ``c``'s column with its declared missing codes read as missing values."""
        return mask_codes(s, self.missing_codes[c]) if c in self.missing_codes else s

    def lay_out(self, released: set) -> None:
        """Fix the columns, given the QIs with a missing value in the release."""
        self.nulls |= released
        hot, flag, value_of, coded = [], [], [], []
        for c in self.qi:
            k = len(self.categories[c]) + (c in self.nulls) if self.kinds.get(c) == "nominal" else 0
            if k > ONE_HOT_MAX:
                hot.append(False)
                flag.append(False)
                coded.append(len(value_of))
                value_of.append(len(value_of))
            elif self.kinds.get(c) == "nominal":
                hot += [True] * k
                flag += [False] * k
                value_of += range(len(value_of), len(value_of) + k)
            else:
                hot.append(False)
                flag.append(False)
                value_of.append(len(value_of))
                if c in self.nulls:
                    hot.append(False)
                    flag.append(True)
                    value_of.append(len(value_of) - 1)
        self.one_hot = np.array(hot, dtype=bool)
        self.indicator = np.array(flag, dtype=bool)
        self.value_of = np.array(value_of, dtype=np.int64)
        self.coded = np.zeros(len(hot), dtype=bool)
        self.coded[coded] = True
        self.width = len(hot)

    def names(self, pub: dict) -> list[str]:
        """The release's column(s) of each QI, for messages."""
        return [" / ".join(pub[c]) for c in self.qi]

    def expand(self, columns: list[pl.Series], names: list[str], offset: int, label: str) -> np.ndarray:
        """The QIs' columns (one Series a QI, in ``qi`` order; ``names`` for messages) as
        the laid-out numbers: a missing number NaN beside an indicator 1."""
        parts = []
        for c, name, s in zip(self.qi, names, columns):
            kind = self.kinds.get(c)
            s = self.masked(c, s)
            missing = s.is_null().to_numpy() if s.null_count() else None
            if missing is not None and c not in self.nulls:
                if c in self.missing_codes:  # (the original holds none of them: not laid out with a missing value)
                    i = int(s.is_null().arg_true()[0])
                    raise EngineError(f"column {name!r} of {label} holds a declared missing code of {c!r} at row "
                                      f"{offset + i + 1}, and the original holds no missing value in {c!r}")
                raise EngineError(f"{label} changed while it was read")  # pragma: no cover - seen before the passes
            if kind is None:
                v = s
                if v.dtype == pl.String and c in self.dates:  # a CSV's date text
                    v = v.str.to_date(strict=False)
                if v.dtype.is_temporal():
                    v = v.to_physical()
                v = v.cast(pl.Float64, strict=False)
                bad = (~v.is_finite()).fill_null(False) | (v.is_null() & s.is_not_null())
                if bad.any():
                    i = int(bad.arg_true()[0])
                    raise EngineError(f"column {name!r} of {label} has the value {s[i]!r} at row {offset + i + 1} "
                                      f"(rows counted from 1), which is no finite number")
                parts.append(v.fill_null(np.nan).to_numpy()[:, None])
                if c in self.nulls:
                    parts.append(np.zeros((s.len(), 1)) if missing is None else missing.astype(np.float64)[:, None])
                continue
            cats = self.categories[c]
            code = category_text(s, kind).replace_strict(cats, list(range(len(cats))), default=-1,
                                                    return_dtype=pl.Int64).to_numpy().copy()
            if missing is not None:  # a missing value: the code after the categories
                code[missing] = len(cats)
            if kind == "ordinal":
                if (code < 0).any():
                    i = int(np.flatnonzero(code < 0)[0])
                    raise EngineError(f"column {name!r} of {label} has the value {category_text(s, kind)[i]!r} at row "
                                      f"{offset + i + 1}, which its ordinal order does not list")
                rank = code.astype(np.float64)
                if missing is not None:
                    rank[missing] = np.nan
                parts.append(rank[:, None])
                if c in self.nulls:
                    parts.append(np.zeros((s.len(), 1)) if missing is None else missing.astype(np.float64)[:, None])
            elif len(cats) + (c in self.nulls) > ONE_HOT_MAX:  # (``coded``: the code itself)
                parts.append(code.astype(np.float64)[:, None])
            else:
                k = len(cats) + (c in self.nulls)
                parts.append((code[:, None] == np.arange(k)[None, :]).astype(np.float64))
        return np.ascontiguousarray(np.hstack(parts))
