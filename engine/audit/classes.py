"""Streamed statistics over a release's equivalence classes, shared by ``verify`` and
``risk`` (``engine.audit``): column lists, two tables walked side by side, moments that
cannot overflow, and per-class counts, means and modes (exact keys, merged as they grow).

Written for the audit alone: nothing here is imported from the engine that made the
release (``engine.audit.verify``'s docstring says why).
"""

from __future__ import annotations

from typing import Iterator, Sequence

import numpy as np
import polars as pl

from ..checks import split_names
from ..errors import EngineError
from ..io.source import TableSource

ROWS = "__microagg_verify_rows__"
COUNT = "__microagg_verify_count__"


def parse_columns(qi, what: str = "qi") -> list[str]:
    """``"a,b"`` or a list of names -> list; empty, blank or repeated names are errors."""
    if isinstance(qi, str):
        names = split_names(qi)  # (a backslash escapes a comma or a space)
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
        part = frame.select(self.by).group_by(self.by).agg(pl.len().cast(pl.Int64).alias(COUNT))
        self.parts.append(part)
        self.part_rows += part.height
        if self.part_rows > max(self.merge_rows, self.merged.height if self.merged is not None else 0):
            self._merge()

    def _merge(self) -> None:
        frames = ([self.merged] if self.merged is not None else []) + self.parts
        if frames:
            self.merged = pl.concat(frames).group_by(self.by).agg(pl.col(COUNT).sum())
        self.parts, self.part_rows = [], 0

    def finish(self) -> pl.DataFrame:
        self._merge()
        return self.merged


def mean_name(j: int) -> str:
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
        cols = [pl.Series(mean_name(j), X[:, j] / scale[j]) for j in range(self.d)]
        for j in holes:  # a missing original: null (a mean leaves it out)
            cols[j] = pl.select(pl.when(pl.Series(present[:, j])).then(cols[j])).to_series().alias(mean_name(j))
        frame = keyed.select(self.by).with_columns(cols)
        part = frame.group_by(self.by).agg(pl.len().cast(pl.Int64).alias(ROWS),
                                           *((pl.col(mean_name(j)).mean() * float(scale[j])).alias(mean_name(j))
                                             for j in range(self.d)),
                                           *(pl.col(mean_name(j)).count().cast(pl.Int64).alias(_present_name(j))
                                             for j in holes))
        self.parts.append(part)
        self.part_rows += part.height
        if self.part_rows > max(self.merge_rows, self.merged.height if self.merged is not None else 0):
            self._merge()

    def _merge(self) -> None:
        frames = ([self.merged] if self.merged is not None else []) + self.parts
        if frames:
            n = pl.col(ROWS)
            names = {c for f in frames for c in f.columns}
            counted = [j for j in range(self.d) if _present_name(j) in names]
            cat = pl.concat(frames, how="diagonal") if counted else pl.concat(frames)
            if counted:  # a part without a column's count: all its rows present
                cat = cat.with_columns(pl.col(_present_name(j)).fill_null(n) for j in counted)
            aggs = []
            for j in range(self.d):
                m = pl.col(mean_name(j))
                if j in counted:
                    c = pl.col(_present_name(j))
                    aggs += [pl.when(c.sum() > 0).then((m * (c / c.sum())).sum()).alias(mean_name(j)), c.sum()]
                else:
                    aggs.append((m * (n / n.sum())).sum().alias(mean_name(j)))
            self.merged = cat.group_by(self.by).agg(n.sum(), *aggs)
        self.parts, self.part_rows = [], 0

    def finish(self) -> pl.DataFrame:
        self._merge()
        return self.merged

    def present(self, merged: pl.DataFrame, j: int) -> pl.Expr:
        """The number of values present of column ``j`` per class of ``merged``."""
        return pl.col(_present_name(j)) if _present_name(j) in merged.columns else pl.col(ROWS)


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
            n = pl.col(COUNT)
            counts = counter.finish().with_columns(  # the rows whose original is the published category
                pl.col(_category_name(c)).eq_missing(pl.col(c).cast(pl.String)).alias("__is_published"))
            per = counts.group_by(self.by).agg(n.max().alias("__top"),
                                               n.filter(pl.col("__is_published")).sum().alias("__hit"),
                                               pl.col(_category_name(c)).sort_by(n, descending=True).first()
                                               .alias("__mode"), n.sum().alias(ROWS))
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
                f"{row['__hit']:,} of the class's {row[ROWS]:,} rows, {_shown(row['__mode'])} on {row['__top']:,} "
                f"(class {describe({k: row[k] for k in keys})})")


def describe(row: dict) -> str:
    return ", ".join(f"{c}={v!r}" for c, v in row.items())
