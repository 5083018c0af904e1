"""The information loss ``verify`` measures beside the original, and a mixed-type
release's kinds of QIs (dates compared as numbers; categories, nominal or ordinal),
written for the audit alone (``engine.audit.verify``'s docstring gives the definitions).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import polars as pl

from ..errors import EngineError
from ..io.source import TableSource
from .classes import is_numeric


@dataclass
class MixedKinds:
    """A mixed-type release's QIs (``verify --mixed``): dates compared as numbers
    (``text_dates``: a CSV original's ISO-date text), categorical ones holding a
    category (their loss measured by ``loss``)."""

    dates: list = field(default_factory=list)
    cats: list = field(default_factory=list)
    text_dates: set = field(default_factory=set)
    loss: "CategoryLoss | None" = None

    def like(self, c, orig_type):
        """The original's type a release column is read as (``as_number``)."""
        return pl.Date if c in self.text_dates else orig_type


def mixed_kinds(orig, qi, pub, ordinal, chunk_rows, nominal=frozenset()) -> MixedKinds:
    """The kinds of a mixed release's QIs; ``nominal``: numeric ones published as
    categories (``anonymize --nominal``)."""
    single = [c for c in qi if pub[c] == (c,)]
    text_dates = iso_date_columns(orig, single) if orig.kind == "csv" else set()
    dates = [c for c in single if c not in nominal and (orig.schema[c].is_temporal() or c in text_dates)]
    cats = [c for c in single if (not is_numeric(orig.schema[c]) or c in nominal) and c not in dates]
    loss = CategoryLoss(cats, _orders(orig, cats, ordinal or {}, chunk_rows)) if cats else None
    return MixedKinds(dates, cats, text_dates, loss)


def information_loss_columns(result, out, orig, qi, pub, kinds: MixedKinds) -> list[str]:
    """The QIs whose information loss is measured as numbers (numeric, or a mixed
    release's dates, published as one value); the others are listed in
    ``result.information_loss_skipped`` with why (a mixed release's categorical QIs
    are measured by ``CategoryLoss``)."""
    for c in qi:
        if pub[c] != (c,):
            result.information_loss_skipped[c] = "published as a range"
        elif c in kinds.cats or c in kinds.dates:
            continue
        elif not is_numeric(out.schema[c]) and not (out.kind == "csv" and out.schema[c] == pl.String):
            result.information_loss_skipped[c] = f"not numeric in the release ({out.schema[c]})"
        elif not is_numeric(orig.schema[c]):
            result.information_loss_skipped[c] = f"not numeric in the original ({orig.schema[c]})"
    return [c for c in qi if c not in result.information_loss_skipped and c not in kinds.cats]


def information_loss(result, scan, il_cols) -> None:
    """100 x SSE / SST per measured QI, and their mean, into ``result`` (``scan``: what
    ``verify._scan_aligned`` found)."""
    for c, at in scan.bad_il.items():
        result.information_loss_skipped[c] = f"missing or non-finite value at row {at + 1}"
    moments = scan.moments
    if moments is None or scan.bad_il:
        return
    keep = moments.min < moments.max
    per = np.where(keep, 100.0 * moments.sse / np.where(moments.m2 > 0, moments.m2, 1.0), 0.0)
    counted = moments.n
    for j, c in enumerate(il_cols):
        if keep[j]:
            result.information_loss_by_column[c] = float(per[j])
        else:
            result.information_loss_skipped[c] = ("constant in the original" if counted[j]
                                                  else "missing in every row of the original")
    result.information_loss_percent = float(per[keep].mean()) if keep.any() else 0.0


def as_number(s: pl.Series, like=None) -> np.ndarray:
    """A QI column as float64 for the information loss: dates on their epoch value; a
    CSV release's text of a date column (``like``: the original's type) parsed."""
    if s.dtype == pl.String and like is not None and like.is_temporal():
        s = s.str.to_date(strict=False) if like == pl.Date else s.str.to_datetime(strict=False).cast(like)
    if s.dtype.is_temporal():
        s = s.to_physical()
    return s.cast(pl.Float64, strict=False).to_numpy()


def iso_date_columns(orig: TableSource, columns: list) -> set:
    """The String columns of a CSV original whose first 1,000 values are all ISO dates
    (as ``anonymize`` reads a CSV's QIs): dates, compared as numbers."""
    text = [c for c in columns if orig.schema[c] == pl.String]
    if not text:
        return set()
    head = next(iter(orig.iter_frames(text, 1000)), (0, None))[1]
    if head is None:
        return set()
    return {c for c in text if head.get_column(c).drop_nulls().len()
            and head.get_column(c).drop_nulls().str.to_date("%Y-%m-%d", strict=False).null_count() == 0}


def _orders(orig: TableSource, cats: list, ordinal: dict, chunk_rows: int) -> dict:
    """``{column: [categories in order]}`` for the ordinal QIs among ``cats``: as given,
    an Enum's own order, or (``@numcol``) by the least value of a numeric column of
    the original among each category's rows (ties by name)."""
    out = {}
    for c in cats:
        if c not in ordinal:
            continue
        order, by = ordinal[c]
        if order is not None:
            out[c] = list(order)
        elif by is not None:
            if by not in orig.columns:
                raise EngineError(f"ordinal (--ordinal): column {by!r} (the order of {c!r}) not found in {orig.label}")
            mins: dict = {}
            for _, f in orig.iter_frames([c, by], chunk_rows):
                g = f.select(pl.col(c).cast(pl.String), pl.col(by).cast(pl.Float64, strict=False)) \
                    .group_by(c).agg(pl.col(by).min())
                for v, m in g.iter_rows():
                    mins[v] = m if v not in mins or mins[v] is None or (m is not None and m < mins[v]) else mins[v]
            out[c] = sorted(mins, key=lambda v: (mins[v] is None, mins[v] if mins[v] is not None else 0.0, v))
        elif isinstance(orig.schema[c], pl.Enum):
            out[c] = orig.schema[c].categories.to_list()
        else:
            raise EngineError(f"ordinal (--ordinal): give the order of column {c!r} (COL=CAT1,CAT2,...)")
    return out


def as_original_type(b: pl.Series, like) -> pl.Series:
    """A release's numeric column as the original's numeric type ``like`` where every value
    converts exactly (a .sav release holds an integer column as doubles: its 1.0 is the
    category 1), else as it is (1.5 stays 1.5: not a value of the original)."""
    if b.dtype == like or not (is_numeric(b.dtype) and is_numeric(like)):
        return b
    c = b.cast(like, strict=False)
    exact = c.null_count() == b.null_count() and c.cast(pl.Float64).eq_missing(b.cast(pl.Float64)).all()
    return c if exact else b


class CategoryLoss:
    """Per categorical QI of a mixed release: values changed (nominal), the sum of
    |rank change| (ordinal), and the domains of the original and published values."""

    def __init__(self, cats: list, orders: dict):
        self.cats, self.orders = cats, orders
        self.changed = {c: 0 for c in cats}
        self.orig_values = {c: set() for c in cats}
        self.pub_values = {c: set() for c in cats}
        self.bad_rank: dict = {}
        self.present = {c: 0 for c in cats}  # (ordinal) rows with an original value
        self.offset = 0

    def add(self, f_orig: pl.DataFrame, f_out: pl.DataFrame) -> None:
        for c in self.cats:
            a = f_orig.get_column(c)
            b = as_original_type(f_out.get_column(c), a.dtype).cast(pl.String)
            a = a.cast(pl.String)
            self.orig_values[c].update(a.unique().to_list())
            self.pub_values[c].update(b.unique().to_list())
            if c in self.orders:  # (a missing original: not measured, as the engine's loss)
                order = self.orders[c]
                ra = a.replace_strict(order, list(range(len(order))), default=None, return_dtype=pl.Int64)
                rb = b.replace_strict(order, list(range(len(order))), default=None, return_dtype=pl.Int64)
                bad = a.is_not_null() & (ra.is_null() | rb.is_null())
                if bad.any() and c not in self.bad_rank:
                    self.bad_rank[c] = self.offset + int(bad.arg_true()[0])
                self.changed[c] += int((ra - rb).abs().sum() or 0)
                self.present[c] += a.len() - a.null_count()
            else:  # a missing value is a category: missing for missing is no change
                self.changed[c] += int(a.ne_missing(b).sum())
        self.offset += f_orig.height

    def finish(self, result, rows: int) -> list:
        per = {}
        for c in self.cats:
            if c in self.bad_rank:
                result.information_loss_skipped[c] = (f"a value outside the ordinal order (or missing) at row "
                                                      f"{self.bad_rank[c] + 1}")
            elif len(self.orig_values[c] - ({None} if c in self.orders else set())) < 2:
                result.information_loss_skipped[c] = "constant in the original"
            else:
                m = len(self.orders[c]) if c in self.orders else 2
                per[c] = 100.0 * self.changed[c] / (m - 1) / (self.present[c] if c in self.orders else rows)
                result.information_loss_by_column[c] = per[c]
        numeric = [v for c, v in result.information_loss_by_column.items() if c not in self.cats]
        allv = numeric + list(per.values())
        if allv:
            result.information_loss_percent = float(np.mean(allv))
        outside = {c: sorted(self.pub_values[c] - self.orig_values[c], key=str) for c in self.cats}
        outside = {c: v for c, v in outside.items() if v}
        if outside:
            c = next(iter(outside))
            return [("categories", False, f"published categories that are not values of the original: column "
                                          f"{c!r}: {', '.join(map(repr, outside[c][:5]))}")]
        return [("categories", True, f"every published category is a value of the original column "
                                     f"({', '.join(self.cats)})")]
