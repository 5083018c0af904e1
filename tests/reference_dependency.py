"""Slow, plainly written references for the dependency profile (engine/select/).

Nothing here is clever: Python loops, ``collections.Counter``, ``bisect``,
``numpy.histogram2d`` and brute-force enumeration of spanning trees. The fast code
must agree with these.
"""

import bisect
import itertools
import math
from collections import Counter

import numpy as np


# ----------------------------------------------------------------------- binning


def bin_linear(x, lo, mul, den, n_bins, null_code):
    """floor((x - lo) * mul / den) clipped to [0, n_bins - 1]; NaN -> null_code."""
    out = []
    for v in x:
        v = float(v)
        if math.isnan(v):
            out.append(null_code)
            continue
        c = math.floor((v - lo) * mul / den)
        out.append(min(max(c, 0), n_bins - 1))
    return np.array(out, dtype=np.int64)


def bin_cuts(x, cuts, null_code):
    """Number of cuts <= x; NaN -> null_code."""
    cuts = [float(c) for c in cuts]
    out = []
    for v in x:
        v = float(v)
        out.append(null_code if math.isnan(v) else bisect.bisect_right(cuts, v))
    return np.array(out, dtype=np.int64)


# ------------------------------------------------------------------------ counts


def counts_1d(codes, size):
    out = np.zeros(size, dtype=np.int64)
    for c in codes:
        out[int(c)] += 1
    return out


def joint_counts(codes_a, codes_b, size_a, size_b):
    """Joint counts by numpy.histogram2d on the integer codes (bins centred on integers)."""
    h, _, _ = np.histogram2d(
        np.asarray(codes_a, dtype=np.float64),
        np.asarray(codes_b, dtype=np.float64),
        bins=[np.arange(size_a + 1) - 0.5, np.arange(size_b + 1) - 0.5],
    )
    return h.astype(np.int64)


# ---------------------------------------------------------------------- measures
#
# From raw value sequences: every distinct value (or pair of values) is one event.


def entropy_values(xs):
    n = len(xs)
    if n == 0:
        return 0.0
    h = 0.0
    for c in Counter(xs).values():
        p = c / n
        h -= p * math.log2(p)
    return h


def joint_entropy_values(xs, ys):
    return entropy_values(list(zip(xs, ys)))


def mi_distance_values(xs, ys):
    """H(X|Y) + H(Y|X), each conditional entropy summed by its definition -sum p(x,y) log2 p(x|y)."""
    n = len(xs)
    pxy = Counter(zip(xs, ys))
    px = Counter(xs)
    py = Counter(ys)
    h_x_given_y = 0.0
    h_y_given_x = 0.0
    for (x, y), c in pxy.items():
        h_x_given_y -= c / n * math.log2(c / py[y])
        h_y_given_x -= c / n * math.log2(c / px[x])
    return h_x_given_y + h_y_given_x


def emim_values(xs, ys):
    n = len(xs)
    pxy = Counter(zip(xs, ys))
    px = Counter(xs)
    py = Counter(ys)
    s = 0.0
    for (x, y), c in pxy.items():
        p = c / n
        s += p * math.log2(p / ((px[x] / n) * (py[y] / n)))
    return s


def chi2_values(xs, ys):
    n = len(xs)
    pxy = Counter(zip(xs, ys))
    px = Counter(xs)
    py = Counter(ys)
    s = 0.0
    for x in px:
        for y in py:
            e = (px[x] / n) * (py[y] / n)
            s += (pxy.get((x, y), 0) / n - e) ** 2 / e
    return s


def pearson_complete(x, y):
    """Pearson correlation over the rows where both are present (two passes)."""
    pairs = [(float(a), float(b)) for a, b in zip(x, y) if not (math.isnan(a) or math.isnan(b))]
    n = len(pairs)
    if n < 2:
        return 0.0
    ma = sum(a for a, _ in pairs) / n
    mb = sum(b for _, b in pairs) / n
    sab = sum((a - ma) * (b - mb) for a, b in pairs)
    saa = sum((a - ma) ** 2 for a, _ in pairs)
    sbb = sum((b - mb) ** 2 for _, b in pairs)
    if saa == 0 or sbb == 0:
        return 0.0
    return sab / math.sqrt(saa * sbb)


# ------------------------------------------------------------------------- trees


def kruskal(W, maximum):
    """Sort (key, i, j), join components kept as Python sets."""
    m = len(W)
    cand = sorted(((-W[i][j] if maximum else W[i][j], i, j) for i in range(m) for j in range(i + 1, m)))
    comp = [{v} for v in range(m)]
    edges = []
    for _, i, j in cand:
        ci = next(c for c in comp if i in c)
        cj = next(c for c in comp if j in c)
        if ci is not cj:
            comp.remove(cj)
            ci |= cj
            edges.append((i, j))
    return edges


def all_spanning_trees(m):
    """Every labelled tree on m >= 2 vertices, decoded from its Pruefer sequence."""
    if m == 2:
        yield [(0, 1)]
        return
    for seq in itertools.product(range(m), repeat=m - 2):
        degree = [1] * m
        for v in seq:
            degree[v] += 1
        edges = []
        for v in seq:
            leaf = min(u for u in range(m) if degree[u] == 1)
            edges.append((min(leaf, v), max(leaf, v)))
            degree[leaf] -= 1
            degree[v] -= 1
        u, w = [x for x in range(m) if degree[x] == 1]
        edges.append((u, w))
        yield edges


def tree_weight(W, edges):
    return sum(W[i][j] for i, j in edges)


def degrees(edges, m):
    deg = [0] * m
    for i, j in edges:
        deg[i] += 1
        deg[j] += 1
    return deg


def definition5(deg):
    """Sun et al. (AMA), Definition 5 with ties by position: smallest N with sum of the top N >= m."""
    m = len(deg)
    order = sorted(range(m), key=lambda v: (-deg[v], v))
    if m == 1:
        return order
    for n in range(1, m + 1):
        if sum(deg[v] for v in order[: n - 1]) < m <= sum(deg[v] for v in order[:n]):
            return order[:n]
    raise AssertionError("no N satisfies conditions (11)-(12)")
