"""``microagg verify``: check a published table's guarantees, independently of how it was made.

This module reads the release (and, optionally, the table it was made from) and
re-derives everything it reports. It does not import the coordinator, the
aggregation, stitching or writing code, so a bug there cannot hide itself here.

Checks
------
* **k-anonymity.** An equivalence class is a set of rows with identical published
  QI values. For a QI named ``c`` the published value is column ``c``; if ``c`` is
  absent but ``c_min`` and ``c_max`` exist (``--method maxent|mnqia`` range
  output), the pair ``(c_min, c_max)`` is used. Any dtype works (a categorical QI
  published as a ``|``-joined set is a string). Null is a value of its own;
  ``-0.0`` and ``0.0`` are two values (a reader of the release tells them apart:
  see ``_sign_keys``); all NaNs are one value (Polars grouping; a CSV prints one
  ``NaN``). A CSV release is read as text: two rows are in one class when their
  published fields read the same.
  Fails when the smallest class has fewer than k rows.
* **l-diversity** (``sa`` with ``l``): every class holds at least ``l`` distinct
  SA values (null counts as one value). **Entropy l-diversity** (``sa`` with
  ``epsilon``): every class's SA entropy, in bits, is at least ``epsilon``
  (compared with a tolerance of 1e-9 bits, as the maxent method does).
* **With the original table:** the row count matches; every non-QI column of the
  original is in the release, in the same relative order, with equal values row
  by row (nulls equal nulls, NaN equals NaN). A CSV original beside a CSV release:
  compared as text, field by field (``01000`` and ``1000`` differ; an empty field
  and ``""`` differ). Otherwise values are compared, not dtypes (a CSV original's
  types inferred from the whole file), so a Parquet round trip of a CSV column or
  a CSV round trip of a Parquet integer or date column still matches; and the
  information loss on the QIs published as one number (centroid or class mean);
  a QI published as a range (``c_min``/``c_max``) or a set of categories (maxent:
  values joined by ``|``, a ``|`` or ``\\`` in a category escaped by ``\\``) holds
  the original value, row by row (check "generalization").
  Release columns that are neither QIs nor original columns (a ``--group-column``)
  are listed, not failed. A changed column that is a function of one QI's published
  values (``anonymize --derived``: recomputed from the published QI) is listed as
  derived (``columns_derived``), not failed: it adds nothing to the QI.
* **Leaks** (with the original; check "leaks", listed when it fails; else said by
  "other columns"): no column passed through unchanged
  corresponds one-to-one with a QI of the original (each value with one QI value and
  each QI value with one of its values, over all rows; a null is a value): it would
  publish the QI unaggregated (a code beside its label, the ``@NUMCOL`` of an ordinal
  QI). A QI of one value is left out, and so are two row-unique columns (a row id
  beside a continuous QI: the data cannot tell a copy from chance) unless the column
  is an exact affine function of the QI. Bounded memory: per pair at most
  ``LEAK_KEEP`` distinct value pairs a direction, then sampled by value hash (a
  violation among dropped values can be missed: a false FAIL, never a missed leak
  but by a 64-bit hash collision); the original is read until every pair shows a
  violation, usually within one chunk.
* **Class means** (with the original; check "class means"): a QI published as one
  number (an MDAV-family release, or maxent's ``numeric_output="mean"``) must be the
  aggregate of the originals it replaces: in each class (the rows sharing all published
  QI values) the published value equals the mean of the class's original values, within
  ``MEAN_TOLERANCE`` times the column's largest absolute original value (a mixed
  release's dates: within half a unit more, the mean rounded to the day or the unit).
  A class of two groups whose means round to the same published values still passes
  (the mean of its rows is within the same bound). Memory: one row per class, as the
  class counts (``ClassMeans``).
* **Class modes** (a mixed release's nominal QIs, with the original; check "class
  modes"): in each class the published category is a most frequent original value of
  the class's rows (ties allowed), a missing value counted as a category
  (``ClassModes``).

Missing values (nulls). In every count of classes a null is a value of its own: two
rows null in a QI and equal elsewhere are one class, and null is apart from every
value (NaN, 0, the empty text; a CSV release's empty field against ``""``). With the
original, a cell published null where the original had a value, or with a value
where the original was null, fails nothing by itself (the engine imputes a missing
cell with its group's value, and publishes null for a group without values), but:
a QI published as one number is, per class, the mean of the original values
*present*, and null exactly when the class has none ("class means"); a nominal QI's
category is the class's mode with null a category ("class modes"); an original value
present lies in its published range or set, a missing one is not checked, a range
missing at one end holds nothing ("generalization"). The information loss leaves
missing originals out (SSE and SST over the values present, as the engine's; a
nominal QI: missing for missing is no change; an ordinal QI: over the rows present).

Counting scales: each chunk is reduced by ``group_by`` on the *exact* published
values (no hashing, so two classes can never be merged by a collision and hide a
small class), and the partial counts are merged whenever they outgrow the merged
table, so the work is amortized linear. Memory holds one row per distinct class
(with an SA: per distinct (class, SA value) pair): for a release that passes,
at most ``rows / k`` rows of the QI columns, plus one chunk of the release.

Information loss. ``IL = 100 * SSE / SST`` on the QIs standardized by the
original's mean and population standard deviation, the engine's definition
(``engine/passes/write.py``): SST around the original column means, SSE between original
and published values, columns with a constant original value left out of both.
Since a standardized column's SST is n, this equals the mean over the non-constant
QIs of ``100 * SSE_j / SST_j`` in raw units, which is what is accumulated here in
one streaming pass (Chan's merge of chunk moments, in units of a running power of
two so that values near 1e308 do not overflow).
"""

from __future__ import annotations

import math
import numbers
import os
import time
from dataclasses import asdict, dataclass, field
from typing import Iterator, Sequence

import numpy as np
import polars as pl

from ..budget import check_verify, early_piece, parse_limit
from ..checks import check_whole
from ..errors import EngineError
from ..io.source import TableSource, csv_options, open_source
from ..options import parse_ordinal
from ..report import json_text

ENTROPY_TOLERANCE = 1e-9
# a published class value vs the mean of its rows' original values: at most this times
# the column's largest |original value| apart (the engine's means are computed on
# standardized values: their error is relative to the column's scale, not to the value)
MEAN_TOLERANCE = 1e-9
_ROWS = "__microagg_verify_rows__"
_COUNT = "__microagg_verify_count__"
_SIZE = "__microagg_verify_size__"
_DISTINCT = "__microagg_verify_distinct__"
_ENTROPY = "__microagg_verify_entropy__"


# --- shared helpers (also used by engine.audit.risk) --------------------------------------


def parse_columns(qi, what: str = "qi") -> list[str]:
    """``"a,b"`` or a list of names -> list; empty, blank or repeated names are errors."""
    if isinstance(qi, str):
        names = [c.strip() for c in qi.split(",")] if qi.strip() else []
    else:
        try:
            names = [c.strip() if isinstance(c, str) else c for c in qi]
        except TypeError:
            raise EngineError(f"{what} must be a list of column names") from None
    if not names:
        raise EngineError(f"{what} is empty: name at least one quasi-identifier column")
    for c in names:
        if not isinstance(c, str) or not c:
            raise EngineError(f"{what} has an invalid column name: {c!r}")
    seen = set()
    for c in names:
        if c in seen:
            raise EngineError(f"{what} lists column {c!r} twice")
        seen.add(c)
    return names


def published_columns(source: TableSource, qi: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """Per QI, the release columns that publish it: ``(c,)`` or ``(c_min, c_max)``."""
    cols = set(source.columns)
    out = {}
    for c in qi:
        if c in cols:
            out[c] = (c,)
        elif f"{c}_min" in cols and f"{c}_max" in cols:
            out[c] = (f"{c}_min", f"{c}_max")
        else:
            raise EngineError(f"column {c!r} not found in {source.label} (nor {c}_min/{c}_max)")
    return out


def is_numeric(dtype) -> bool:
    return dtype.is_numeric() and dtype != pl.Boolean


def aligned_frames(a: TableSource, b: TableSource, columns_a, columns_b, chunk_rows: int
                   ) -> Iterator[tuple[int, pl.DataFrame, pl.DataFrame]]:
    """Walk two tables of equal length side by side: ``(offset, frame_a, frame_b)``
    with equal heights, whatever each reader's own batch boundaries are."""
    it_a = (f for _, f in a.iter_frames(columns_a, chunk_rows))
    it_b = (f for _, f in b.iter_frames(columns_b, chunk_rows))
    fa = fb = None
    offset = 0
    while True:
        if fa is None or fa.height == 0:
            fa = next(it_a, None)
        if fb is None or fb.height == 0:
            fb = next(it_b, None)
        if fa is None or fb is None:
            return
        h = min(fa.height, fb.height)
        yield offset, fa.slice(0, h), fb.slice(0, h)
        fa, fb = fa.slice(h), fb.slice(h)
        offset += h


class ScaledMoments:
    """Streaming per-column count, mean, M2 (sum of squared deviations), min, max and,
    optionally, the sum of squared differences to a second array of the same shape.

    Values are held in units of ``scale``, a power of two per column at least half
    the largest absolute value seen, raised as larger values arrive (rescaling by a
    power of two is exact), so squares never overflow. Chunks merge by Chan's rule.
    """

    def __init__(self, d: int):
        self.n = 0
        self._scale = np.zeros(d)  # 0 until a non-zero value arrives
        self.mean = np.zeros(d)
        self.m2 = np.zeros(d)
        self.sse = np.zeros(d)
        self.min = np.full(d, np.inf)
        self.max = np.full(d, -np.inf)

    def add(self, X: np.ndarray, Y: np.ndarray | None = None) -> None:
        h = X.shape[0]
        if h == 0:
            return
        amax = np.abs(X).max(axis=0)
        if Y is not None:
            amax = np.maximum(amax, np.abs(Y).max(axis=0))
        _, e = np.frexp(amax)  # amax < 2**e
        need = np.where(amax > 0, np.ldexp(1.0, e.astype(np.int64) - 1), 0.0)  # values / need in (-2, 2)
        new = np.maximum(self._scale, need)
        r = np.where(new > 0, self._scale / np.where(new > 0, new, 1.0), 0.0)
        self.mean *= r
        self.m2 *= r * r
        self.sse *= r * r
        self._scale = new
        Xs = X / self.scale
        cm = Xs.mean(axis=0)
        cm2 = ((Xs - cm) ** 2).sum(axis=0)
        n = self.n + h
        delta = cm - self.mean
        self.mean += delta * (h / n)
        self.m2 += cm2 + delta * delta * (self.n * h / n)
        if Y is not None:
            self.sse += ((Xs - Y / self.scale) ** 2).sum(axis=0)
        self.n = n
        self.min = np.minimum(self.min, X.min(axis=0))
        self.max = np.maximum(self.max, X.max(axis=0))

    @property
    def scale(self) -> np.ndarray:
        """The unit of ``mean``, ``m2`` and ``sse``: a power of two per column (1 while all zero)."""
        return np.where(self._scale > 0, self._scale, 1.0)

    def sd(self, ddof: int = 0) -> np.ndarray:
        """Standard deviation in raw units (0 for a constant column)."""
        if self.n - ddof <= 0:
            return np.zeros_like(self.m2)
        out = np.sqrt(np.maximum(self.m2, 0.0) / (self.n - ddof)) * self.scale
        out[self.min == self.max] = 0.0
        return out


class PresentMoments:
    """``ScaledMoments`` per column over the values present: ``add(X, Y, present)`` leaves
    out of column ``j`` the rows where ``present[:, j]`` is False (a missing value; its
    ``X`` and ``Y`` are not read). Until the first chunk with a missing value the columns
    are accumulated together (one ``ScaledMoments``, as for a table without nulls), then
    split into one ``ScaledMoments`` a column, exactly (each column's state is its own).
    ``n`` is then per column: the values present."""

    def __init__(self, d: int):
        self.d = d
        self.whole: ScaledMoments | None = ScaledMoments(d)
        self.cols: list[ScaledMoments] = []

    def add(self, X: np.ndarray, Y: np.ndarray | None = None, present: np.ndarray | None = None) -> None:
        if self.whole is not None and (present is None or present.all()):
            self.whole.add(X, Y)
            return
        if self.whole is not None:
            self.cols = [_column_of(self.whole, j) for j in range(self.d)]
            self.whole = None
        for j, m in enumerate(self.cols):
            rows = slice(None) if present is None else present[:, j]
            m.add(X[rows, j: j + 1], None if Y is None else Y[rows, j: j + 1])

    def _get(self, name: str) -> np.ndarray:
        if self.whole is not None:
            value = getattr(self.whole, name)
            return np.full(self.d, value, np.int64) if name == "n" else value
        return np.array([getattr(m, name)[0] if name != "n" else m.n for m in self.cols])

    n = property(lambda self: self._get("n"))
    mean = property(lambda self: self._get("mean"))
    m2 = property(lambda self: self._get("m2"))
    sse = property(lambda self: self._get("sse"))
    min = property(lambda self: self._get("min"))
    max = property(lambda self: self._get("max"))
    scale = property(lambda self: self._get("scale"))


def _column_of(m: ScaledMoments, j: int) -> ScaledMoments:
    """Column ``j`` of ``m`` as a ``ScaledMoments`` of its own (the same state)."""
    out = ScaledMoments(1)
    out.n = m.n
    for name in ("_scale", "mean", "m2", "sse", "min", "max"):
        setattr(out, name, getattr(m, name)[j: j + 1].copy())
    return out


# --- class counting ------------------------------------------------------------------


class ClassCounter:
    """Counts rows per distinct key (exact values), chunk by chunk."""

    def __init__(self, by: list[str], merge_rows: int):
        self.by = by
        self.merge_rows = merge_rows
        self.merged: pl.DataFrame | None = None
        self.parts: list[pl.DataFrame] = []
        self.part_rows = 0

    def add(self, frame: pl.DataFrame) -> None:
        part = frame.select(self.by).group_by(self.by).agg(pl.len().cast(pl.Int64).alias(_COUNT))
        self.parts.append(part)
        self.part_rows += part.height
        if self.part_rows > max(self.merge_rows, self.merged.height if self.merged is not None else 0):
            self._merge()

    def _merge(self) -> None:
        frames = ([self.merged] if self.merged is not None else []) + self.parts
        if frames:
            self.merged = pl.concat(frames).group_by(self.by).agg(pl.col(_COUNT).sum())
        self.parts, self.part_rows = [], 0

    def finish(self) -> pl.DataFrame:
        self._merge()
        return self.merged


def _mean_name(j: int) -> str:
    return f"__microagg_verify_mean_{j}__"


def _present_name(j: int) -> str:
    return f"__microagg_verify_present_{j}__"


class ClassMeans:
    """Per published class (exact key values, as ``ClassCounter``): its rows and the mean
    of each measured QI's original values, chunk by chunk. A chunk's means are taken in
    units of a power of two per column (values near 1e308 do not overflow a sum);
    partial means merge weighted by their shares of the class's rows (no sum of raw
    values either). Memory: one row per class, merged as the counts are.

    Missing originals (nulls) are left out of a mean: it is the mean of the class's
    values present, null when none is. A column gets a count of its values present per
    class (``_present_name``) from the first chunk in which it has a null on (a part
    without the count: every row present), so a table without nulls costs what it did."""

    def __init__(self, by: list[str], d: int, merge_rows: int):
        self.by, self.d, self.merge_rows = by, d, merge_rows
        self.merged: pl.DataFrame | None = None
        self.parts: list[pl.DataFrame] = []
        self.part_rows = 0
        self.amax = np.zeros(d)  # the largest finite |original value| per column

    def add(self, keyed: pl.DataFrame, X: np.ndarray, present: np.ndarray | None = None) -> None:
        """``keyed``: the chunk's class keys (``by``); ``X``: its original values (rows x d);
        ``present`` (rows x d, optional): False where the original value is missing (its
        ``X`` is then not read)."""
        if X.shape[0] == 0:
            return
        amax = np.where(np.isfinite(X), np.abs(X), 0.0).max(axis=0)
        self.amax = np.maximum(self.amax, amax)
        _, e = np.frexp(amax)
        scale = np.where(amax > 0, np.ldexp(1.0, e.astype(np.int64) - 1), 1.0)  # values / scale in (-2, 2)
        holes = [] if present is None else [j for j in range(self.d) if not present[:, j].all()]
        cols = [pl.Series(_mean_name(j), X[:, j] / scale[j]) for j in range(self.d)]
        for j in holes:  # a missing original: null (a mean leaves it out)
            cols[j] = pl.select(pl.when(pl.Series(present[:, j])).then(cols[j])).to_series().alias(_mean_name(j))
        frame = keyed.select(self.by).with_columns(cols)
        part = frame.group_by(self.by).agg(pl.len().cast(pl.Int64).alias(_ROWS),
                                           *((pl.col(_mean_name(j)).mean() * float(scale[j])).alias(_mean_name(j))
                                             for j in range(self.d)),
                                           *(pl.col(_mean_name(j)).count().cast(pl.Int64).alias(_present_name(j))
                                             for j in holes))
        self.parts.append(part)
        self.part_rows += part.height
        if self.part_rows > max(self.merge_rows, self.merged.height if self.merged is not None else 0):
            self._merge()

    def _merge(self) -> None:
        frames = ([self.merged] if self.merged is not None else []) + self.parts
        if frames:
            n = pl.col(_ROWS)
            names = {c for f in frames for c in f.columns}
            counted = [j for j in range(self.d) if _present_name(j) in names]
            cat = pl.concat(frames, how="diagonal") if counted else pl.concat(frames)
            if counted:  # a part without a column's count: all its rows present
                cat = cat.with_columns(pl.col(_present_name(j)).fill_null(n) for j in counted)
            aggs = []
            for j in range(self.d):
                m = pl.col(_mean_name(j))
                if j in counted:
                    c = pl.col(_present_name(j))
                    aggs += [pl.when(c.sum() > 0).then((m * (c / c.sum())).sum()).alias(_mean_name(j)), c.sum()]
                else:
                    aggs.append((m * (n / n.sum())).sum().alias(_mean_name(j)))
            self.merged = cat.group_by(self.by).agg(n.sum(), *aggs)
        self.parts, self.part_rows = [], 0

    def finish(self) -> pl.DataFrame:
        self._merge()
        return self.merged

    def present(self, merged: pl.DataFrame, j: int) -> pl.Expr:
        """The number of values present of column ``j`` per class of ``merged``."""
        return pl.col(_present_name(j)) if _present_name(j) in merged.columns else pl.col(_ROWS)


def _category_name(c: str) -> str:
    return f"__microagg_verify_category_{c}__"


def _shown(v) -> str:
    """A category in a message: its text, or ``missing``."""
    return "missing" if v is None else repr(v)


class ClassModes:
    """Per published class and nominal QI of a mixed release: how many rows hold each
    original category (a missing value is a category of its own), chunk by chunk
    (``ClassCounter`` on the class keys and the category). ``check``: the class's
    published category is a mode of those, ties allowed (a class of groups that all
    publish their mode publishes a mode of its rows: any category's count in the union
    is at most the sum of the groups' greatest). Memory: one row per class and category
    met in it (at most the rows, at most 100 categories a class for the engine's
    nominal QIs)."""

    def __init__(self, by: list[str], cats: list[str], merge_rows: int):
        self.by, self.cats = by, cats
        self.counters = {c: ClassCounter(by + [_category_name(c)], merge_rows) for c in cats}

    def add(self, keyed: pl.DataFrame, f_orig: pl.DataFrame) -> None:
        """``keyed``: the chunk's class keys (``by``, the published categories among them);
        ``f_orig``: its original rows."""
        for c, counter in self.counters.items():
            counter.add(keyed.select(self.by).with_columns(
                f_orig.get_column(c).cast(pl.String).alias(_category_name(c))))

    def check(self, keys: list[str], domains: dict) -> tuple[str, bool, str]:
        """("class modes", ok, detail): the first class (in key order) whose published
        category of a nominal QI is not a mode of its original rows. A class publishing a
        category that is no value of the original column (``domains``: per QI, the
        original's values as text) is left to the check "categories"."""
        classes, first, others = 0, None, []
        for c, counter in self.counters.items():
            n = pl.col(_COUNT)
            counts = counter.finish().with_columns(  # the rows whose original is the published category
                pl.col(_category_name(c)).eq_missing(pl.col(c).cast(pl.String)).alias("__is_published"))
            per = counts.group_by(self.by).agg(n.max().alias("__top"),
                                               n.filter(pl.col("__is_published")).sum().alias("__hit"),
                                               pl.col(_category_name(c)).sort_by(n, descending=True).first()
                                               .alias("__mode"), n.sum().alias(_ROWS))
            classes = per.height
            known = [v for v in domains[c] if v is not None]
            foreign = pl.col(c).cast(pl.String).is_in(known).not_() & pl.col(c).is_not_null() \
                if known else pl.col(c).is_not_null()
            if None not in domains[c]:
                foreign = foreign | pl.col(c).is_null()
            # a category none of the class's rows had fails, and so does a missing value that is
            # not the most frequent; a category some rows had but not the most (an ordinal QI's
            # median of the values present, which verify cannot tell from a mode without --ordinal)
            # is noted
            short = pl.col("__hit") < pl.col("__top")
            bad = per.filter(((pl.col("__hit") == 0) | (pl.col(c).is_null() & short)) & ~foreign)
            off = per.filter((pl.col("__hit") > 0) & pl.col(c).is_not_null() & short & ~foreign).height
            if off:
                others.append(f"{off:,} classes publish a category of {c!r} that is not their most frequent "
                              f"(an ordinal QI's median: give --ordinal to check it)")
            if bad.height and first is None:
                first = (c, bad.height, bad.sort(keys, nulls_last=True).row(0, named=True))
        if first is None:
            return ("class modes", True, f"every published category of {', '.join(self.cats)} is an original "
                                         f"value of its class" + (f", the most frequent one ({'; '.join(others)})"
                                                                  if others else ", the most frequent one") +
                    f" (missing counted as a value; {classes:,} classes)")
        c, count, row = first
        return ("class modes", False,
                f"{count:,} of {classes:,} classes publish a category of {c!r} that none of their original rows "
                f"has (missing counted as a value); e.g. published {_shown(row[c])} on "
                f"{row['__hit']:,} of the class's {row[_ROWS]:,} rows, {_shown(row['__mode'])} on {row['__top']:,} "
                f"(class {_describe({k: row[k] for k in keys})})")


# --- the result ----------------------------------------------------------------------


@dataclass
class VerifyResult:
    output: str
    ok: bool
    rows: int
    qi: list[str]
    key_columns: list[str]
    k: int
    classes: int
    min_class_size: int
    max_class_size: int
    classes_below_k: int
    rows_below_k: int
    smallest_class: dict
    sa: str | None = None
    l: int | None = None
    epsilon: float | None = None
    min_distinct_sa: int | None = None
    min_entropy_bits: float | None = None
    classes_below_l: int | None = None
    original: str | None = None
    original_rows: int | None = None
    columns_compared: list[str] = field(default_factory=list)
    columns_changed: list[str] = field(default_factory=list)
    columns_derived: dict = field(default_factory=dict)  # changed column -> the QI whose published values give it
    extra_columns: list[str] = field(default_factory=list)
    information_loss_percent: float | None = None
    information_loss_by_column: dict = field(default_factory=dict)
    information_loss_skipped: dict = field(default_factory=dict)
    classes_not_mean: int | None = None  # (with the original) classes whose published value is not their mean
    checks: list[dict] = field(default_factory=list)
    wall_seconds: float = 0.0

    @property
    def failures(self) -> list[dict]:
        return [c for c in self.checks if not c["ok"]]

    def to_dict(self) -> dict:
        return asdict(self)

    def to_json(self) -> str:
        return json_text(self.to_dict(), default=_plain)

    def summary(self) -> str:
        lines = [f"verify {self.output}: {'PASS' if self.ok else 'FAIL'}  "
                 f"({self.rows:,} rows, {self.wall_seconds:.2f} s)"]
        for c in self.checks:
            lines.append(f"  [{'ok' if c['ok'] else 'FAIL'}] {c['name']}: {c['detail']}")
        if self.information_loss_percent is not None:
            per = ", ".join(f"{c} {v:.4f}" for c, v in self.information_loss_by_column.items())
            lines.append(f"  information loss {self.information_loss_percent:.4f} %  (per QI: {per})")
        for c, why in self.information_loss_skipped.items():
            lines.append(f"  information loss leaves out {c}: {why}")
        if self.extra_columns:
            lines.append(f"  release columns not in the original (not checked): {', '.join(self.extra_columns)}")
        return "\n".join(lines)


def _plain(x):
    if isinstance(x, np.generic):
        return x.item()
    return str(x)


def _check(result: VerifyResult, name: str, ok: bool, detail: str) -> None:
    result.checks.append({"name": name, "ok": bool(ok), "detail": detail})


def _describe(row: dict) -> str:
    return ", ".join(f"{c}={v!r}" for c, v in row.items())


# --- comparison with the original ----------------------------------------------------


def _first_difference(a: pl.Series, b: pl.Series) -> int:
    """Index of the first row where ``a`` and ``b`` differ (null == null, NaN == NaN), or -1."""
    try:
        same = a.eq_missing(b)
    except Exception:  # incomparable dtypes (a CSV round trip of a date, say): compare as text
        try:
            same = a.cast(pl.String).eq_missing(b.cast(pl.String))
        except Exception:
            return 0
    same = same.fill_null(False)
    if same.all():
        return -1
    return int((~same).arg_max())


def _split_set(text: str) -> list[str]:
    """The categories of a published set: split at each unescaped ``|``; ``\\x`` reads
    as ``x``. (Written here again, not imported from ``engine.methods.maxent``: verify shares
    no code with the engine that made the release.)"""
    out, cur, escaped = [], [], False
    for ch in text:
        if escaped:
            cur.append(ch)
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == "|":
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if escaped:  # a trailing lone backslash: itself
        cur.append("\\")
    out.append("".join(cur))
    return out


def _first_outside(f_out: pl.DataFrame, f_orig: pl.DataFrame, c: str, published: tuple[str, ...]) -> int:
    """Index of the first row whose original value of QI ``c`` is not in what the release
    publishes for it: the range ``c_min..c_max``, or the set of categories (``c``, values
    joined by ``|`` with ``|`` and ``\\`` escaped: ``_split_set``), or -1.
    A missing original value may be published with its class's range or set (imputed)
    or missing; a value present must lie in what is published (a missing range or set
    holds none); a range missing at one end only holds nothing."""
    x = f_orig.get_column(c)
    if len(published) == 2:
        lo, hi = (f_out.get_column(p).cast(pl.Float64, strict=False) for p in published)
        whole = f_out.get_column(published[0]).is_null() == f_out.get_column(published[1]).is_null()
        xv = x.cast(pl.Float64, strict=False)
        ok = (((xv >= lo) & (xv <= hi)).fill_null(False) | x.is_null()) & whole
    else:
        pairs = pl.DataFrame({"p": f_out.get_column(c).cast(pl.String), "o": x.cast(pl.String)})
        uniq = pairs.unique(maintain_order=True)
        good = [o is None or (p is not None and o in _split_set(p)) for p, o in uniq.iter_rows()]
        ok_pairs = uniq.filter(pl.Series(good, dtype=pl.Boolean)).with_columns(pl.lit(True).alias("__ok"))
        ok = pairs.join(ok_pairs, on=["p", "o"], how="left", nulls_equal=True,
                        maintain_order="left").get_column("__ok").fill_null(False)
    if ok.all():
        return -1
    return int((~ok).arg_max())


# --- the check -----------------------------------------------------------------------


def verify_release(output: "str | os.PathLike[str] | pl.DataFrame | pl.LazyFrame", qi: "str | Sequence[str]",
                   k: int, *, sa: str | None = None, l: int | None = None, epsilon: float | None = None,
                   original: "str | os.PathLike[str] | pl.DataFrame | pl.LazyFrame | None" = None,
                   chunk_rows: int = 100_000, separator: str | None = None,
                   null_values: "str | Sequence[str] | None" = None, encoding: str | None = None,
                   mixed: bool = False, ordinal=None, memory_limit: "int | str | None" = None) -> VerifyResult:
    """Verify the release ``output`` (CSV/Parquet file, folder or glob); see the module docstring.

    Returns a :class:`VerifyResult` whose ``ok`` says whether every guarantee holds
    (``checks`` lists each with a one-line detail). Raises ``EngineError`` on bad
    input: a missing file, an unknown column, ``k < 1``, ``sa`` without ``l`` or
    ``epsilon`` (or with both), an empty release. ``separator``, ``null_values``,
    ``encoding``: how a CSV ``original`` is read (the release is read as the engine
    writes CSV: comma-separated UTF-8).

    ``mixed`` (or ``ordinal``): a mixed-type MDAV release, whose categorical QIs
    hold one published category each, not a set (with ``original``, read from the
    release itself when not given: ``_looks_mixed``): with ``original``, every
    published category must be a value of the original column (check
    "categories"), and the information loss is measured per type (nominal: percent
    of values changed; ordinal, ``ordinal={"col": [categories in order]}``, or
    ``"@numcol"`` for the order of a numeric column of the original: 100 x mean
    |rank change| / (m - 1); dates on their epoch value as numbers); the overall
    figure is the mean over the QIs.

    ``memory_limit`` (``"1GiB"``, bytes): refused up front (one line naming the least
    limit) when the checks would not fit (``engine.budget.check_verify``); CSV inputs are
    then read in pieces.
    """
    limit = parse_limit(memory_limit)
    ordinal = {c: (order, by) for c, order, by in parse_ordinal(ordinal) or ()}
    mixed = mixed or bool(ordinal)

    csv = csv_options(separator, null_values, encoding)
    if csv is not None and original is None:
        raise EngineError(f"{', '.join(csv.given())}: CSV options apply to the original (--original), "
                          f"and none is given")
    orig = open_source(original, csv=csv).bounded(early_piece(limit)) if original is not None else None
    try:
        return _verify(output, qi, k, sa, l, epsilon, orig, chunk_rows, mixed, ordinal, limit=limit)
    finally:
        if orig is not None:
            orig.close()


def _sign_keys(frame: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """``frame`` with one more key per float column: whether the value is -0.0.

    -0.0 and 0.0 compare equal and Polars groups them together, but a release shows
    them apart: a CSV prints ``-0.0`` and ``0.0``, a Parquet file holds two bit
    patterns. An intruder who reads the release can tell the two sets of rows apart,
    so they are two equivalence classes, and k-anonymity must hold for each (the
    finer partition is the safe one; the engine's self-check, ``engine.passes.selfcheck``,
    counts them apart too)."""
    extra = [((pl.col(c) == 0.0) & ((1.0 / pl.col(c)) < 0.0)).fill_null(False).alias(_neg_zero(c))
             for c in keys if frame.schema[c].is_float()]
    return frame.with_columns(extra) if extra else frame


def _neg_zero(c: str) -> str:
    return f"__microagg_verify_negzero__{c}"


def _verify(output, qi, k, sa, l, epsilon, orig, chunk_rows, mixed=False, ordinal=None, limit=None) -> VerifyResult:
    t0 = time.perf_counter()
    qi, k, l, epsilon, chunk_rows = _settings(qi, k, sa, l, epsilon, chunk_rows)

    out = open_source(output).bounded(early_piece(limit))  # (a CSV in pieces under a memory limit)
    pub = published_columns(out, qi)
    keys = [c for cols in pub.values() for c in cols]
    out.check_reconciled(keys + ([sa] if sa is not None and sa in out.columns else []))
    if sa is not None and sa not in out.columns:
        raise EngineError(f"sensitive attribute {sa!r} not found in {out.label}")
    # a CSV release is read as text: its classes are the texts a reader sees, and with a
    # CSV original every other column is compared as text, so a changed field (01000 ->
    # 1000, 2.50 -> 2.5) is caught; with another original, those columns are compared
    # by value (types inferred from the whole release)
    if out.kind == "csv":
        if orig is None or orig.kind == "csv":
            out = out.text_view()
        else:
            out = out.with_types({c: pl.String for c in keys + ([sa] if sa is not None else [])})
    rows = out.count_rows()
    if rows == 0:
        raise EngineError(f"{out.label} has no rows")

    orig_rows = None
    if orig is not None:
        for c in qi:
            if c not in orig.columns:
                raise EngineError(f"column {c!r} not found in {orig.label}")
        orig.check_reconciled(qi)
        if orig.kind == "csv":  # QIs typed from the whole file; the rest as text beside a CSV release
            schema = orig.schema
            orig = orig.with_types({c: schema[c] for c in qi}, text=out.kind == "csv", parse=False)
        orig_rows = orig.count_rows()
        mixed = mixed or _looks_mixed(out, orig, qi, pub, chunk_rows)
    check_verify(limit, out, orig, rows, keys, k, chunk_rows)  # (--memory-limit: before the checks' work)

    result = VerifyResult(output=out.label, ok=True, rows=rows, qi=qi, key_columns=keys, k=k, classes=0,
                          min_class_size=0, max_class_size=0, classes_below_k=0, rows_below_k=0,
                          smallest_class={}, sa=sa, l=l, epsilon=epsilon)
    group_keys = keys + [_neg_zero(c) for c in keys if out.schema[c].is_float()]  # -0.0 apart from 0.0
    counter = ClassCounter(group_keys + ([sa] if sa is not None else []), max(chunk_rows, 1 << 16))
    later: list[tuple[str, bool, str]] = []  # checks against the original, listed after the class checks

    if orig is None or orig_rows != rows:
        for _, frame in out.iter_frames(keys + ([sa] if sa is not None else []), chunk_rows):
            counter.add(_sign_keys(frame, keys))
    if orig is not None:
        later += _compare_with_original(result, out, orig, orig_rows, qi, pub, keys, sa, counter, chunk_rows,
                                        mixed, ordinal or {})

    _class_checks(result, counter, group_keys, keys, k, sa, l, epsilon)

    for name, ok, detail in later:
        _check(result, name, ok, detail)
    result.ok = all(c["ok"] for c in result.checks)
    result.wall_seconds = time.perf_counter() - t0
    return result


def _looks_mixed(out, orig, qi, pub, chunk_rows) -> bool:
    """Whether the release is a mixed-type MDAV release, read from the release itself
    (so that ``verify`` needs no flag for it): no QI published as a range, a QI that is
    not numeric in the original, and each such QI holding one category a row: a type
    other than text, or text in which no value holds a set's unescaped ``|`` (a range
    release publishes a categorical QI as a set of its class's values, joined by ``|``).
    A release whose categories themselves hold a ``|`` is read as sets: ``--mixed``
    says otherwise."""
    if any(len(pub[c]) == 2 for c in qi):
        return False
    cats = [c for c in qi if pub[c] == (c,) and c in orig.schema and not is_numeric(orig.schema[c])]
    if not cats:
        return False
    text = [c for c in cats if out.schema[c] == pl.String]
    if not text:
        return True
    joined = r"(^|[^\\])(\\\\)*\|"  # a | after an even number of backslashes
    for _, frame in out.iter_frames(text, chunk_rows):
        if frame.select(pl.any_horizontal(pl.col(c).str.contains(joined).fill_null(False) for c in text).any()).item():
            return False
    return True


def _settings(qi, k, sa, l, epsilon, chunk_rows):
    """The checked settings: ``(qi, k, l, epsilon, chunk_rows)``, or one line naming the bad one."""
    qi = parse_columns(qi)
    k = check_whole(k, "k", 1)
    chunk_rows = check_whole(chunk_rows, "chunk_rows", 1)
    if sa is not None:
        if not isinstance(sa, str) or not sa:
            raise EngineError(f"sa must be a column name, got {sa!r}")
        if sa in qi:
            raise EngineError(f"sensitive attribute {sa!r} is also a qi column")
        if (l is None) == (epsilon is None):
            raise EngineError("with a sensitive attribute give exactly one of l (--l) or epsilon (--epsilon)")
    elif l is not None or epsilon is not None:
        raise EngineError("l and epsilon need a sensitive attribute: sa (--sa COL)")
    if l is not None:
        l = check_whole(l, "l", 1)
    if epsilon is not None:
        if isinstance(epsilon, bool) or not isinstance(epsilon, numbers.Real) or not math.isfinite(epsilon) \
                or epsilon < 0:
            raise EngineError(f"epsilon must be a non-negative number of bits, got {epsilon!r}")
        epsilon = float(epsilon)

    return qi, k, l, epsilon, chunk_rows


@dataclass
class _Scan:
    """What one read of the release beside the original found (``_scan_aligned``)."""

    changed: dict = field(default_factory=dict)   # passed-through column -> first changed row
    outside: dict = field(default_factory=dict)   # range / set QI -> first row outside its published value
    bad_il: dict = field(default_factory=dict)    # IL column -> first missing or non-finite row
    moments: "PresentMoments | None" = None
    means: "ClassMeans | None" = None             # the original values' mean per published class
    modes: "ClassModes | None" = None             # (mixed) the nominal QIs' original categories per class


def _compare_with_original(result, out, orig, orig_rows, qi, pub, keys, sa, counter, chunk_rows, mixed=False,
                           ordinal=None) -> list:
    """Read the release beside the original (counting its classes on the way): the row
    count, the columns passed through, the generalization of range and set QIs, the
    information loss. Returns the checks ``(name, ok, detail)`` to list after the class checks."""
    rows = result.rows
    result.original, result.original_rows = orig.label, orig_rows
    others = [c for c in orig.columns if c not in set(qi)]
    present = [c for c in others if c in set(out.columns)]
    missing = [c for c in others if c not in set(out.columns)]
    in_release = [c for c in out.columns if c in set(others)]
    result.extra_columns = [c for c in out.columns if c not in set(keys) and c not in set(orig.columns)]
    result.columns_compared = present
    detail = []
    if missing:
        detail.append(f"missing from the release: {', '.join(missing)}")
    if in_release != present:
        detail.append(f"order changed: {', '.join(in_release)} (original: {', '.join(present)})")
    later = [("row count", orig_rows == rows, f"{rows:,} rows, as the original" if orig_rows == rows
              else f"the release has {rows:,} rows, the original {orig_rows:,}")]
    if orig_rows != rows:
        detail.append("values not compared (row counts differ)")
        return later + [("other columns", False, "; ".join(detail))]
    kinds = _mixed_kinds(orig, qi, pub, ordinal, chunk_rows) if mixed else _MixedKinds()
    il_cols = _information_loss_columns(result, out, orig, qi, pub, kinds)
    # QIs published as a range or as a set of categories: the original value must lie in it
    ranges = [c for c in qi if len(pub[c]) == 2]
    sets = [c for c in qi if pub[c] == (c,) and not is_numeric(orig.schema[c]) and out.schema[c] == pl.String
            and c not in kinds.cats and c not in kinds.dates]
    scan = _scan_aligned(out, orig, counter, keys, sa, present, il_cols, ranges + sets, pub, chunk_rows, qi[0], kinds)
    _information_loss(result, scan, il_cols)
    if il_cols:
        later.append(_class_means_check(result, scan.means, il_cols, [kinds.like(c, orig.schema[c]) for c in il_cols],
                                        kinds.dates, keys))
    if kinds.loss is not None:
        later += kinds.loss.finish(result, orig_rows)
    if scan.modes is not None:
        later.append(scan.modes.check(keys, kinds.loss.orig_values))
    # a changed column that is a function of a QI's published values: derived (--derived), not a failure
    result.columns_derived = _derived_columns(out, pub, [c for c in present if c in scan.changed], qi, chunk_rows)
    result.columns_changed = [c for c in present if c in scan.changed and c not in result.columns_derived]
    if result.columns_changed:
        first = min(result.columns_changed, key=lambda c: scan.changed[c])
        detail.append(f"{len(result.columns_changed)} changed ({', '.join(result.columns_changed)}); "
                      f"first: column {first!r} at row {scan.changed[first] + 1}")
    if ranges or sets:
        later.append(_generalization_check(ranges + sets, scan.outside, sets))
    derived = "; ".join(f"{c} recomputed from the published {q}" for c, q in result.columns_derived.items())
    same = len(present) - len(result.columns_derived)
    leak = _leak_check(orig, qi, [c for c in present if c not in scan.changed], chunk_rows)
    unchanged = f"{same} unchanged, same order" + (", none one-to-one with a quasi-identifier" if same and leak[1]
                                                   else "")
    later.append(("other columns", not detail,
                  "; ".join(detail + ([derived] if derived else [])) if detail else
                  (unchanged + (f"; {derived}" if derived else "") if present else "none besides the QIs")))
    if not leak[1]:  # a leak: a check of its own (listed only when it fails)
        later.append(leak)
    return later


@dataclass
class _MixedKinds:
    """A mixed-type release's QIs (``verify --mixed``): dates compared as numbers
    (``text_dates``: a CSV original's ISO-date text), categorical ones holding a
    category (their loss measured by ``loss``)."""

    dates: list = field(default_factory=list)
    cats: list = field(default_factory=list)
    text_dates: set = field(default_factory=set)
    loss: "_CategoryLoss | None" = None

    def like(self, c, orig_type):
        """The original's type a release column is read as (``_as_number``)."""
        return pl.Date if c in self.text_dates else orig_type


def _mixed_kinds(orig, qi, pub, ordinal, chunk_rows) -> _MixedKinds:
    single = [c for c in qi if pub[c] == (c,)]
    text_dates = iso_date_columns(orig, single) if orig.kind == "csv" else set()
    dates = [c for c in single if orig.schema[c].is_temporal() or c in text_dates]
    cats = [c for c in single if not is_numeric(orig.schema[c]) and c not in dates]
    loss = _CategoryLoss(cats, _orders(orig, cats, ordinal or {}, chunk_rows)) if cats else None
    return _MixedKinds(dates, cats, text_dates, loss)


def _information_loss_columns(result, out, orig, qi, pub, kinds: _MixedKinds) -> list[str]:
    """The QIs whose information loss is measured as numbers (numeric, or a mixed
    release's dates, published as one value); the others are listed in
    ``result.information_loss_skipped`` with why (a mixed release's categorical QIs
    are measured by ``_CategoryLoss``)."""
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


def _scan_aligned(out, orig, counter, keys, sa, present, il_cols, generalized, pub, chunk_rows, first_qi,
                  kinds: _MixedKinds) -> _Scan:
    """One read of the release beside the original: its classes counted, the first
    changed row of every passed-through column, the first original value outside its
    published range or set, the information loss's moments (and a mixed release's
    category changes)."""
    scan = _Scan(moments=PresentMoments(len(il_cols)) if il_cols else None,
                 means=ClassMeans(counter.by[:len(counter.by) - (sa is not None)], len(il_cols), counter.merge_rows)
                 if il_cols else None)
    nominal = [c for c in kinds.cats if kinds.loss is not None and c not in kinds.loss.orders]
    if nominal:
        scan.modes = ClassModes(counter.by[:len(counter.by) - (sa is not None)], nominal, counter.merge_rows)
    out_cols = list(dict.fromkeys(keys + ([sa] if sa is not None else []) + present))
    orig_cols = list(dict.fromkeys(present + il_cols + generalized + kinds.cats)) or [first_qi]
    for offset, f_out, f_orig in aligned_frames(out, orig, out_cols, orig_cols, chunk_rows):
        keyed = _sign_keys(f_out, keys)
        counter.add(keyed)
        X = have = None
        if scan.means is not None:
            X = np.column_stack([_as_number(f_orig.get_column(c), kinds.like(c, None)) for c in il_cols])
            # a missing original: left out of its class's mean and of the information loss
            have = np.column_stack([f_orig.get_column(c).is_not_null().to_numpy() for c in il_cols]) \
                if any(f_orig.get_column(c).null_count() for c in il_cols) else None
            scan.means.add(keyed, X, have)
        for c in generalized:
            if c not in scan.outside:
                at = _first_outside(f_out, f_orig, c, pub[c])
                if at >= 0:
                    scan.outside[c] = offset + at
        for c in present:
            if c not in scan.changed:
                at = _first_difference(f_out.get_column(c), f_orig.get_column(c))
                if at >= 0:
                    scan.changed[c] = offset + at
        if kinds.loss is not None:
            kinds.loss.add(f_orig, f_out)
        if scan.modes is not None:
            scan.modes.add(keyed, f_orig)
        if scan.moments is not None and not scan.bad_il:
            Y = np.column_stack([_as_number(f_out.get_column(c), kinds.like(c, orig.schema[c]))
                                 for c in il_cols])  # a CSV release's text: not a number -> NaN
            fin = np.isfinite(X) & np.isfinite(Y)
            if have is not None:
                fin |= ~have
            if not fin.all():
                i, j = np.argwhere(~fin)[0]
                scan.bad_il[il_cols[j]] = offset + int(i)
                continue
            scan.moments.add(X, Y, have)
    return scan


def _information_loss(result, scan: _Scan, il_cols) -> None:
    """100 x SSE / SST per measured QI, and their mean, into ``result``."""
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


def _class_means_check(result, means: ClassMeans, il_cols, likes, dates, keys) -> tuple[str, bool, str]:
    """Each class's published value of every QI published as one number against the mean
    of the class's original values present (``ClassMeans``; the module docstring): null
    exactly when the class has no value present. ``likes``: the type each release column
    is read as (``_as_number``); ``dates``: QIs published as the mean rounded to the unit."""
    merged = means.finish()
    bounds = [float(MEAN_TOLERANCE * means.amax[j]) + (0.5 if c in dates else 0.0) for j, c in enumerate(il_cols)]
    gaps = [(pl.Series(_as_number(merged.get_column(c), likes[j])) - merged.get_column(_mean_name(j))).abs()
            .alias(f"__gap_{j}") for j, c in enumerate(il_cols)]
    counts = [means.present(merged, j).alias(f"__present_{j}") for j in range(len(il_cols))]
    off = pl.lit(False)
    for j, c in enumerate(il_cols):  # (a NaN published value or mean: off too)
        g = pl.col(f"__gap_{j}")
        none = pl.col(_mean_name(j)).is_null()  # no original value present: published null
        ok = pl.when(pl.col(c).is_null()).then(none).otherwise(~none & (g <= bounds[j]) & ~g.is_nan())
        off = off | ~ok.fill_null(False)
    bad = merged.with_columns(gaps + counts).filter(off)
    result.classes_not_mean = bad.height
    if not bad.height:
        return ("class means", True, f"every published value of {', '.join(il_cols)} is the mean of its class's "
                                     f"original values ({merged.height:,} classes)")
    first = bad.sort(keys, nulls_last=True).row(0, named=True)

    def wrong(j: int) -> bool:
        pub, mean, gap = first[il_cols[j]], first[_mean_name(j)], first[f"__gap_{j}"]
        if pub is None or mean is None:
            return (pub is None) != (mean is None)
        return gap is None or not gap <= bounds[j]

    j = next(j for j in range(len(il_cols)) if wrong(j))
    c, present = il_cols[j], first[f"__present_{j}"]
    if first[_mean_name(j)] is None:
        what = f"the class's {first[_ROWS]:,} original values are all missing (published: null)"
    else:
        what = (f"the mean of the class's {present:,} original values"
                + (f" present (of {first[_ROWS]:,})" if present != first[_ROWS] else "")
                + f" is {first[_mean_name(j)]:.10g}")
    return ("class means", False,
            f"{bad.height:,} of {merged.height:,} classes publish a value that is not the mean of their original "
            f"values; e.g. column {c!r}: published {first[c]!r}, {what} "
            f"(class {_describe({k: first[k] for k in keys})})")


def _generalization_check(generalized, outside, sets=()) -> tuple[str, bool, str]:
    if outside:
        first = min(outside, key=lambda c: outside[c])
        hint = (" (a mixed-type MDAV release, whose categorical QIs hold one category each, "
                "is verified with --mixed)" if any(c in sets for c in outside) else "")
        return ("generalization", False,
                f"the original value is outside its published range or set in "
                f"{', '.join(c for c in generalized if c in outside)}; first: column "
                f"{first!r} at row {outside[first] + 1}{hint}")
    return ("generalization", True, f"every original value lies in its published range "
                                    f"or set ({', '.join(generalized)})")


def _class_checks(result, counter, group_keys, keys, k, sa, l, epsilon) -> None:
    """k-anonymity (and l-diversity or entropy l-diversity with ``sa``) over the counted classes."""
    merged = counter.finish()
    if sa is None:
        per_class = merged.rename({_COUNT: _SIZE})
    else:
        n = pl.col(_COUNT)
        p = n / n.sum()
        per_class = merged.group_by(group_keys).agg(n.sum().alias(_SIZE), pl.len().cast(pl.Int64).alias(_DISTINCT),
                                              (-(p * p.log(2)).sum()).alias(_ENTROPY))
    sizes = per_class.get_column(_SIZE)
    result.classes = per_class.height
    result.min_class_size = int(sizes.min())
    result.max_class_size = int(sizes.max())
    small = per_class.filter(pl.col(_SIZE) < k)
    result.classes_below_k = small.height
    result.rows_below_k = int(small.get_column(_SIZE).sum()) if small.height else 0
    smallest = per_class.sort([_SIZE] + keys, nulls_last=True).row(0, named=True)
    result.smallest_class = {c: smallest[c] for c in keys}
    if result.classes_below_k:
        detail = (f"{result.classes_below_k:,} of {result.classes:,} classes are smaller than k={k} "
                  f"({result.rows_below_k:,} rows); smallest has {result.min_class_size} row"
                  f"{'s' if result.min_class_size != 1 else ''}: {_describe(result.smallest_class)}")
    else:
        detail = f"{result.classes:,} classes of {result.min_class_size}..{result.max_class_size} rows (k={k})"
    _check(result, "k-anonymity", result.classes_below_k == 0, detail)

    if sa is not None:
        result.min_distinct_sa = int(per_class.get_column(_DISTINCT).min())
        result.min_entropy_bits = max(0.0, float(per_class.get_column(_ENTROPY).min()))
        if l is not None:
            bad = per_class.filter(pl.col(_DISTINCT) < l)
            result.classes_below_l = bad.height
            detail = (f"smallest number of distinct {sa!r} values in a class: {result.min_distinct_sa} (l={l})")
            if bad.height:
                worst = bad.sort([_DISTINCT] + keys, nulls_last=True).row(0, named=True)
                detail += f"; {bad.height:,} classes below l, e.g. {_describe({c: worst[c] for c in keys})}"
            _check(result, "l-diversity", bad.height == 0, detail)
        else:
            bad = per_class.filter(pl.col(_ENTROPY) < epsilon - ENTROPY_TOLERANCE)
            result.classes_below_l = bad.height
            detail = (f"lowest class entropy of {sa!r}: {result.min_entropy_bits:.4f} bits "
                      f"(epsilon={epsilon:g})")
            if bad.height:
                worst = bad.sort([_ENTROPY] + keys, nulls_last=True).row(0, named=True)
                detail += f"; {bad.height:,} classes below, e.g. {_describe({c: worst[c] for c in keys})}"
            _check(result, "entropy l-diversity", bad.height == 0, detail)




def _as_number(s: pl.Series, like=None) -> np.ndarray:
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


class _CategoryLoss:
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
            a = f_orig.get_column(c).cast(pl.String)
            b = f_out.get_column(c).cast(pl.String)
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


# --- columns that publish a QI (with the original) ------------------------------------
#
# Written here again, not imported from ``engine.passes.leak``: verify shares no code with
# the engine that made the release (the same rule, checked independently).

_LEAK_SEED = 0x766572696679  # Polars' hash seed here ("verify")
LEAK_KEEP = 1 << 15  # distinct (value, partner) pairs a direction keeps; above, sampled by value
AFFINE_TOLERANCE = 1e-9  # |c - (a + b q)| <= this x (|c| + |a| + |b q|): an exact affine relation
_U64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def _value_keys(s: pl.Series) -> np.ndarray:
    """A uint64 key per row of the value of ``s`` (a null: a value of its own): Polars'
    hash, mixed (splitmix64's finalizer) so that every bit is uniform."""
    if isinstance(s.dtype, (pl.Categorical, pl.Enum)):
        s = s.cast(pl.String)
    try:
        h = s.hash(seed=_LEAK_SEED).to_numpy().astype(np.uint64)
    except Exception:  # a type Polars does not hash: its text
        h = s.cast(pl.String).hash(seed=_LEAK_SEED).to_numpy().astype(np.uint64)
    with np.errstate(over="ignore"):
        z = h ^ (h >> np.uint64(30))
        z = z * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def _numbers(s: pl.Series) -> np.ndarray:
    """float64 values (dates on their epoch value; a null or a text that is not a number: NaN)."""
    if s.dtype.is_temporal():
        s = s.to_physical()
    if s.dtype == pl.Boolean or s.dtype.is_nested() or s.dtype in (pl.Binary, pl.Object):
        return np.full(s.len(), np.nan)
    return s.cast(pl.Float64, strict=False).fill_null(float("nan")).to_numpy()


class _Line:
    """Whether ``c = a + b q`` holds on every row so far (``a``, ``b`` from the first two
    rows of different q; a missing value: not affine)."""

    def __init__(self):
        self.q1 = self.c1 = self.a = self.b = None
        self.ok = True

    def add(self, q: np.ndarray, c: np.ndarray) -> None:
        if not self.ok or not q.shape[0]:
            return
        fin = np.isfinite(q) & np.isfinite(c)
        if not fin.all():
            self.ok = False
            return
        if self.q1 is None:
            self.q1, self.c1 = float(q[0]), float(c[0])
        if self.b is None:
            other = np.flatnonzero(q != self.q1)
            upto = int(other[0]) if other.size else q.shape[0]
            if (c[:upto] != self.c1).any():
                self.ok = False
                return
            if not other.size:
                return
            self.b = (float(c[upto]) - self.c1) / (float(q[upto]) - self.q1)
            self.a = self.c1 - self.b * self.q1
        with np.errstate(invalid="ignore", over="ignore"):
            pred = self.a + self.b * q
            bound = AFFINE_TOLERANCE * (np.abs(c) + abs(self.a) + np.abs(self.b * q))
            self.ok = bool((np.abs(c - pred) <= bound).all())


class _OneToOne:
    """Whether a column of the original and a QI correspond one-to-one, chunk by chunk: per
    direction, the distinct (value, partner) pairs (hashed), each value with one partner;
    a value with two: not one-to-one (``dead``). Memory: at most ``LEAK_KEEP`` pairs a
    direction; above, only the values whose key is at most a limit, halved as needed
    (every row of a kept value: the dependency is tested exactly on them)."""

    def __init__(self, column: str, qi: str, numeric: bool):
        self.column, self.qi = column, qi
        self.limit = [_U64, _U64]
        self.seen = [None, None]
        self.dead = self.repeats = False
        self.line = _Line() if numeric else None

    def add(self, kc: np.ndarray, kq: np.ndarray) -> None:
        for d, (k, v) in enumerate(((kc, kq), (kq, kc))):
            keep = k <= self.limit[d]
            part = pl.DataFrame({"k": k[keep], "v": v[keep]}).group_by("k", "v").agg(pl.len().alias("n"))
            merged = part if self.seen[d] is None else \
                pl.concat([self.seen[d], part]).group_by("k", "v").agg(pl.col("n").sum())
            if merged.height != merged.get_column("k").n_unique():
                self.dead = True
                return
            self.repeats = self.repeats or bool((merged.get_column("n") > 1).any())
            while merged.height > LEAK_KEEP:
                self.limit[d] = self.limit[d] >> np.uint64(1)
                merged = merged.filter(pl.col("k") <= self.limit[d])
            self.seen[d] = merged

    def leaks(self, varied: bool) -> bool:
        """One-to-one, with a QI of several values, and not two row-unique columns (whose
        correspondence the data cannot tell from chance), unless exactly affine."""
        if self.dead or not varied:
            return False
        return self.repeats or (self.line is not None and self.line.ok and self.line.b is not None)


def _leak_check(orig, qi, columns, chunk_rows) -> tuple[str, bool, str]:
    """Check "leaks": no column passed through unchanged (``columns``) corresponds one-to-one
    with a QI of the original (a null is a value): such a column publishes the QI
    unaggregated. A QI of one value is left out, and so are two row-unique columns but
    for an exact affine relation (as ``anonymize``'s guard). Reads the original's
    columns until every pair has shown a value with two partners (usually one chunk);
    the pairs still one-to-one then on their own columns."""
    schema = orig.schema
    qi = [q for q in qi if q in schema]
    pairs = [_OneToOne(c, q, is_numeric(schema[q]) or schema[q].is_temporal()) for c in columns for q in qi]
    if not pairs:
        return ("leaks", True, "no column passed through unchanged beside the quasi-identifiers")
    first: dict = {}
    varied = {q: False for q in qi}
    done = 0
    order = list(schema.names())

    def needed(ps):
        want = {c for p in ps for c in (p.column, p.qi)}
        return [c for c in order if c in want]

    alive = pairs
    reading = needed(alive)
    frames = orig.iter_frames(reading, chunk_rows)
    while alive:
        got = next(frames, None)
        if got is None:
            break
        offset, frame = got
        if offset + frame.height <= done:
            continue
        if offset < done:
            frame, offset = frame.slice(done - offset), done
        done = offset + frame.height
        keys = {c: _value_keys(frame.get_column(c)) for c in reading}
        for q in {p.qi for p in alive}:
            k = keys[q]
            if k.shape[0] and q not in first:
                first[q] = k[0]
            varied[q] = varied[q] or bool(k.shape[0] and (k != first[q]).any())
        for p in alive:
            p.add(keys[p.column], keys[p.qi])
            if not p.dead and not p.repeats and p.line is not None and p.line.ok:
                p.line.add(_numbers(frame.get_column(p.qi)), _numbers(frame.get_column(p.column)))
        alive = [p for p in alive if not p.dead]
        want = needed(alive)
        if want and len(want) <= len(reading) // 2:  # on fewer columns, from the next row
            reading = want
            frames = orig.iter_frames(reading, chunk_rows)
    found = [p for p in alive if p.leaks(varied[p.qi])]
    if found:
        p = found[0]
        more = f" ({len(found)} such pairs: {', '.join(f'{x.column}~{x.qi}' for x in found)})" if len(found) > 1 else ""
        return ("leaks", False, f"column {p.column!r} is passed through unchanged and corresponds one-to-one with "
                                f"quasi-identifier {p.qi!r}: it publishes it unaggregated{more}")
    return ("leaks", True, f"no column passed through corresponds one-to-one with a quasi-identifier "
                           f"({len(columns)} column(s) x {len(qi)} QI(s))")


def _derived_columns(out, pub, changed, qi, chunk_rows) -> dict:
    """Of the ``changed`` columns (not the original's values), those that are a function of
    one QI's published values in the release (``{column: qi}``, the first such QI), and not
    a constant (but beside a QI of one published value): a column recomputed from the
    published QI (``anonymize --derived``) adds nothing to it. Exact: the distinct
    (published value, column value) pairs, per published value at most one (memory: about
    one row per class)."""
    cands = [(c, q) for c in changed for q in qi]
    if not cands:
        return {}
    seen: dict = {}
    cols = list(dict.fromkeys([*changed, *(p for q in qi for p in pub[q])]))
    for _, frame in out.iter_frames(cols, chunk_rows):
        for c, q in cands:
            part = frame.select(*pub[q], c).unique()
            merged = part if (c, q) not in seen else pl.concat([seen[(c, q)], part]).unique()
            if merged.height != merged.select(pub[q]).unique().height:
                merged = None
            seen[(c, q)] = merged
        cands = [x for x in cands if seen[x] is not None]
        if not cands:
            break
    out_map: dict = {}
    for c, q in cands:  # (a column made constant follows nothing: it is changed, unless its QI is one class)
        m = seen[(c, q)]
        if m.get_column(c).n_unique() > 1 or m.height == 1:
            out_map.setdefault(c, q)
    return out_map
