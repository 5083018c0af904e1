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
"""

from __future__ import annotations

import numba
import numpy as np

BINS = 40


@numba.njit(cache=True, nogil=True)
def _count(X, lo, width, bins, counts, vmin, vmax):  # pragma: no cover - compiled
    """Add the column-major values ``X`` (d, rows) into ``counts`` (d, bins)."""
    d, n = X.shape
    for j in range(d):
        w = width[j]
        inv = 1.0 / w if w > 0.0 else 0.0
        off = lo[j] * inv
        # x * inv - off: a multiplication (division is several times slower); when
        # 1 / w or lo / w overflows, (x - lo) / w as x / w - lo / w
        fast = w > 0.0 and np.isfinite(inv) and np.isfinite(off)
        lo_w = lo[j] / w if w > 0.0 else 0.0
        mn, mx = vmin[j], vmax[j]
        for i in range(n):
            x = X[j, i]
            mn = min(mn, x)
            mx = max(mx, x)
            b = 0
            if w > 0.0:
                t = x * inv - off if fast else x / w - lo_w
                if t >= bins:
                    b = bins - 1
                elif t > 0.0:
                    b = int(t)
            counts[j, b] += 1
        vmin[j], vmax[j] = mn, mx


class Distributions:
    """Accumulates the "before" histograms; ``finish`` adds the "after" ones."""

    def __init__(self, qi, bins: int = BINS):
        self.qi = list(qi)
        self.bins = bins
        self.counts = None

    def start(self, lo, hi) -> None:
        """(Re)start counting with bins over ``[lo, hi]`` per QI."""
        d = len(self.qi)
        self.lo = np.asarray(lo, np.float64).copy()
        self.hi = np.asarray(hi, np.float64).copy()
        # hi / bins - lo / bins: no overflow for values near the float64 limit
        self.width = np.where(self.hi > self.lo, self.hi / self.bins - self.lo / self.bins, 0.0)
        self.counts = np.zeros((d, self.bins), np.int64)
        self.vmin = np.full(d, np.inf)
        self.vmax = np.full(d, -np.inf)

    def add(self, X: np.ndarray) -> None:
        """Count the values ``X``, column-major (d, rows)."""
        if X.shape[1]:
            _count(X, self.lo, self.width, self.bins, self.counts, self.vmin, self.vmax)

    def edges(self, j: int) -> np.ndarray:
        f = np.arange(self.bins + 1) / self.bins
        e = self.lo[j] * (1.0 - f) + self.hi[j] * f
        e[0] = min(e[0], self.vmin[j])
        e[-1] = max(e[-1], self.vmax[j])
        return e

    def finish(self, centroid: np.ndarray | None, sizes: np.ndarray | None, *, low: np.ndarray | None = None,
               high: np.ndarray | None = None, keep: list | None = None) -> dict:
        """``{qi: {"edges", "before", "after"}}``: JSON-ready lists. ``centroid``
        (groups, d) and ``sizes`` (groups,): the published values and how many rows
        publish each. A release of ranges gives ``low`` and ``high`` (groups, d)
        instead: each group's rows spread evenly over its range (``spread``; "after"
        counts are then fractional). Neither: "after" is omitted. ``keep``: the
        columns to report (indices; default all)."""
        out = {}
        for j in range(len(self.qi)) if keep is None else keep:
            c = self.qi[j]
            e = self.edges(j)
            entry = {"edges": [float(v) for v in e], "before": [int(v) for v in self.counts[j]]}
            if low is not None:
                entry["after"] = [round(float(v), 3) for v in self.spread(j, low[:, j], high[:, j], sizes)]
                entry["after_spread"] = True  # (for the reader: ranges, not points)
            elif centroid is not None:
                if self.width[j] > 0:
                    w = self.width[j]
                    inv = 1.0 / w
                    off = self.lo[j] * inv
                    fast = np.isfinite(inv) and np.isfinite(off)  # as ``_count``: the same bin for the same value
                    t = centroid[:, j] * inv - off if fast else centroid[:, j] / w - self.lo[j] / w
                    b = np.clip(np.floor(np.nan_to_num(t, nan=0.0)), 0, self.bins - 1).astype(np.int64)
                else:
                    b = np.zeros(centroid.shape[0], np.int64)
                after = np.bincount(b, weights=sizes, minlength=self.bins)  # exact: integers below 2^53
                entry["after"] = [int(v) for v in after]
            out[c] = entry
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
