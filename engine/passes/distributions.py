"""Each QI's distribution before and after anonymization, for the HTML report.

"Before" is counted in a pass that already reads every value (the partition pass,
or the in-memory load of one block): ``BINS`` equal bins over ``[lo, hi]`` per QI,
the profile's min and max when they are known before that pass, else the plan's
sample's (a Parquet input's row-group sample), a value outside falling into the
first or last bin, whose outer edge becomes the column's true min or max (so those
two bins can be wider than the others: the edges say so). "After" needs no pass:
the published value of a row is its group's centroid, so the group centroids
weighted by group sizes fall into the same bins. Counts are integers: they do not
depend on the chunk size or the threads.

Mixed-type runs (``engine.encode.mixed``): a nominal or ordinal QI's distribution is
its categories' counts (``categories``): "before" the dictionary pass's count of each
category, "after" each group's published category counted by the group's size
(``category_distribution``); a QI of many categories shows the ``TOP`` most frequent
and one "other" bar for the rest. A numeric QI's histogram is counted by the write
pass, which reads its values and publishes them (``encode.publish.Publisher``): the
values present, before and as published (``Distributions.add_column``).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np

BINS = 40
TOP = 20  # a categorical QI's bars: its TOP most frequent categories, the rest as one "other" bar
MISSING = "(missing)"  # the bar of a categorical QI's missing values


@numba.njit(cache=True, nogil=True, inline="always")
def _scale(lo, w):  # pragma: no cover - compiled
    """How ``_bin`` maps a value of a column with bins from ``lo``, ``w`` wide: as
    ``x * inv - off`` (a multiplication: a division is several times slower), or when
    ``1 / w`` or ``lo / w`` overflows, ``fast`` false, as ``x / w - lo_w``. A constant
    column (``w`` = 0): ``inv`` = ``off`` = 0, every value in bin 0."""
    if not w > 0.0:
        return 0.0, 0.0, True, 0.0
    inv = 1.0 / w
    off = lo * inv
    return inv, off, bool(np.isfinite(inv) and np.isfinite(off)), lo / w


@numba.njit(cache=True, nogil=True, inline="always")
def _bin(x, w, inv, off, fast, lo_w, top):  # pragma: no cover - compiled
    """The bin of ``x``: ``floor((x - lo) / w)`` clipped to ``[0, top]``, NaN in bin 0
    (no early return: branch-free, the loops stay fast)."""
    t = x * inv - off if fast else x / w - lo_w
    t = t if t > 0.0 else 0.0
    return int(min(t, top))


LANES = 4  # interleaved partial histograms of ``_count`` (a power of 2)


@numba.njit(cache=True, nogil=True)
def _count(X, lo, width, bins, counts, vmin, vmax):  # pragma: no cover - compiled
    """Add the column-major values ``X`` (d, rows) into ``counts`` (d, bins), and their
    extremes into ``vmin``, ``vmax``. Consecutive values go to ``LANES`` separate
    partial histograms, summed at the end: a run of equal bins (a column of few
    distinct values) then does not wait on one counter (4x faster on such columns)."""
    d, n = X.shape
    lanes = np.zeros((LANES, bins), np.int64)
    top = np.float64(bins - 1)
    for j in range(d):
        w = width[j]
        inv, off, fast, lo_w = _scale(lo[j], w)
        lanes[:] = 0
        mn, mx = vmin[j], vmax[j]
        for i in range(n):
            x = X[j, i]
            mn = min(mn, x)
            mx = max(mx, x)
            lanes[i & (LANES - 1), _bin(x, w, inv, off, fast, lo_w, top)] += 1
        for q in range(LANES):
            for b in range(bins):
                counts[j, b] += lanes[q, b]
        vmin[j], vmax[j] = mn, mx


@numba.njit(cache=True, nogil=True)
def _count_weighted(V, lo, width, bins, weights, counts):  # pragma: no cover - compiled
    """Add the row-major values ``V`` (rows, d), row i counted ``weights[i]`` times,
    into ``counts`` (d, bins): the same bin as ``_count`` for the same value. One
    pass over the rows (in memory order), every column of a row at once."""
    n, d = V.shape
    top = np.float64(bins - 1)
    inv = np.empty(d)
    off = np.empty(d)
    fast = np.empty(d, np.bool_)
    lo_w = np.empty(d)
    for j in range(d):
        inv[j], off[j], fast[j], lo_w[j] = _scale(lo[j], width[j])
    for i in range(n):
        for j in range(d):
            counts[j, _bin(V[i, j], width[j], inv[j], off[j], fast[j], lo_w[j], top)] += weights[i]


class Distributions:
    """Accumulates the "before" histograms; ``finish`` adds the "after" ones."""

    def __init__(self, qi, bins: int = BINS):
        self.qi = list(qi)
        self.bins = bins
        self.counts = None
        self.after = None  # "after" counted a part of the groups at a time (``add_groups``)
        self._pool = None  # the helper thread of ``add(..., background=True)``
        self._pending = None

    def start(self, lo, hi) -> None:
        """(Re)start counting with bins over ``[lo, hi]`` per QI."""
        self.wait()
        d = len(self.qi)
        self.lo = np.asarray(lo, np.float64).copy()
        self.hi = np.asarray(hi, np.float64).copy()
        # hi / bins - lo / bins: no overflow for values near the float64 limit
        self.width = np.where(self.hi > self.lo, self.hi / self.bins - self.lo / self.bins, 0.0)
        self.counts = np.zeros((d, self.bins), np.int64)
        self.after = None
        self.vmin = np.full(d, np.inf)
        self.vmax = np.full(d, -np.inf)

    def add(self, X: np.ndarray, background: bool = False) -> None:
        """Count the values ``X``, column-major (d, rows). ``background``: on a helper
        thread (the kernel releases the GIL), while the caller goes on with the chunk;
        ``X`` must then stay unchanged until the next ``add``, ``wait`` or ``finish``.
        One chunk at a time, in order: the same counts either way."""
        self.wait()
        if not X.shape[1]:
            return
        args = (X, self.lo, self.width, self.bins, self.counts, self.vmin, self.vmax)
        if background:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(1, thread_name_prefix="distributions")
            self._pending = self._pool.submit(_count, *args)
        else:
            _count(*args)

    def add_column(self, j: int, x: np.ndarray) -> None:
        """Count the values ``x`` (1-d, no missing value) of column ``j`` alone, in this thread."""
        self.wait()
        if x.shape[0]:
            _count(np.ascontiguousarray(x, np.float64)[None, :], self.lo[j: j + 1], self.width[j: j + 1], self.bins,
                   self.counts[j: j + 1], self.vmin[j: j + 1], self.vmax[j: j + 1])

    def add_groups(self, centroid: np.ndarray, sizes: np.ndarray) -> None:
        """Count some groups' published values ``centroid`` (g, d), each ``sizes`` times, into
        the "after" histograms (``passes.published``: a unit's groups at a time); ``finish``
        without groups reports them."""
        if self.after is None:
            self.after = np.zeros((len(self.qi), self.bins), np.int64)
        _count_weighted(np.ascontiguousarray(centroid, np.float64), self.lo, self.width, self.bins,
                        np.ascontiguousarray(sizes, np.int64), self.after)

    def wait(self) -> None:
        """Until the chunk counted in the background is done."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def edges(self, j: int) -> np.ndarray:
        self.wait()
        f = np.arange(self.bins + 1) / self.bins
        e = self.lo[j] * (1.0 - f) + self.hi[j] * f
        e[0] = min(e[0], self.vmin[j])
        e[-1] = max(e[-1], self.vmax[j])
        return e

    def before(self, keep: list | None = None) -> dict:
        """``{qi: {"edges", "before"}}`` (JSON-ready lists), once the partition pass has
        counted every row: the part of ``finish``'s answer known before the groups."""
        self.wait()
        out = {}
        for j in range(len(self.qi)) if keep is None else keep:
            out[self.qi[j]] = {"edges": [float(v) for v in self.edges(j)],
                               "before": [int(v) for v in self.counts[j]]}
        return out

    def finish(self, centroid: np.ndarray | None, sizes: np.ndarray | None, *, low: np.ndarray | None = None,
               high: np.ndarray | None = None, keep: list | None = None) -> dict:
        """``{qi: {"edges", "before", "after"}}``: JSON-ready lists. ``centroid``
        (groups, d) and ``sizes`` (groups,): the published values and how many rows
        publish each. A release of ranges gives ``low`` and ``high`` (groups, d)
        instead: each group's rows spread evenly over its range (``spread``; "after"
        counts are then fractional). Neither: "after" is omitted. ``keep``: the
        columns to report (indices; default all)."""
        self.wait()
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
        after = self.after  # (counted a part at a time: ``add_groups``)
        if low is None and centroid is not None:
            after = np.zeros((len(self.qi), self.bins), np.int64)
            _count_weighted(np.ascontiguousarray(centroid, np.float64), self.lo, self.width, self.bins,
                            np.ascontiguousarray(sizes, np.int64), after)
        out = self.before(keep)
        for j in range(len(self.qi)) if keep is None else keep:
            c = self.qi[j]
            entry = out[c]
            if low is not None:
                entry["after"] = [round(float(v), 3) for v in self.spread(j, low[:, j], high[:, j], sizes)]
                entry["after_spread"] = True  # (for the reader: ranges, not points)
            elif after is not None:
                entry["after"] = [int(v) for v in after[j]]
        return out

    def spread(self, j: int, low: np.ndarray, high: np.ndarray, sizes: np.ndarray, chunk: int = 65536) -> np.ndarray:
        """Rows per bin of column ``j`` when each group's ``sizes`` rows are spread evenly
        over its published range ``[low, high]`` (a point range: all in its bin)."""
        e = self.edges(j)
        out = np.zeros(self.bins)
        for s in range(0, low.shape[0], chunk):
            a, b, n = low[s: s + chunk], high[s: s + chunk], sizes[s: s + chunk].astype(np.float64)
            w = b - a
            point = ~(w > 0)  # (NaN-safe)
            if point.any():
                pos = np.clip(np.searchsorted(e, a[point], side="right") - 1, 0, self.bins - 1)
                out += np.bincount(pos, weights=n[point], minlength=self.bins)
            wide = ~point
            if wide.any():
                F = np.clip((e[None, :] - a[wide, None]) / w[wide, None], 0.0, 1.0)
                out += (n[wide, None] * np.diff(F, axis=1)).sum(axis=0)
        return out


def category_distribution(kind: str, categories: list, before: np.ndarray, missing: int, published: np.ndarray,
                          sizes: np.ndarray, top: int = TOP) -> dict:
    """A categorical QI's bars, JSON-ready: ``{"kind", "categories", "before", "after",
    "other"}``. ``before``: each category's rows in the input (the dictionary's counts,
    in code order), ``missing`` the rows without a value; ``published``: each group's
    published code (NaN or ``len(categories)``: missing), counted ``sizes`` times. With
    more than ``top + 1`` bars, the ``top`` largest before (ties: the first code) are
    kept and the rest summed into one bar "other (N categories)" (``other`` = N). A
    nominal QI's bars run from the most frequent down, an ordinal QI's in its order;
    the missing value's bar comes last."""
    m = len(categories)
    code = np.where(np.isnan(published), m, published).astype(np.int64)
    after = np.bincount(code, weights=sizes.astype(np.float64), minlength=m + 1)[: m + 1]
    counts = np.append(np.asarray(before, np.int64), np.int64(missing))
    after = np.rint(after).astype(np.int64)  # (sums of whole numbers below 2^53: exact)
    labels = [str(c) for c in categories] + [MISSING]
    shown = [i for i in range(m + 1) if counts[i] or after[i]]
    rest = []
    if len(shown) > top + 1:
        by_count = sorted(shown, key=lambda i: (-counts[i], i))
        shown, rest = by_count[:top], by_count[top:]
    if kind == "nominal":
        shown.sort(key=lambda i: (i == m, -counts[i], i))
    else:
        shown.sort()
    out = {"kind": kind, "categories": [labels[i] for i in shown], "before": [int(counts[i]) for i in shown],
           "after": [int(after[i]) for i in shown], "other": len(rest)}
    if rest:
        out["categories"].append(f"other ({len(rest):,} categories)")
        out["before"].append(int(counts[rest].sum()))
        out["after"].append(int(after[rest].sum()))
    return out
