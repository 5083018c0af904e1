"""Slow, plainly written reference implementations that the fast kernels must match.

Brute force over a boolean "remaining" mask, no trees, no pruning. The conventions
(which the kernels document) are spelled out here in the most obvious way:

* squared distances are summed column by column (the order the kernels use);
* the centroid is ``total / remaining``; ``total`` starts as the row-by-row column
  sums and every grouped row is subtracted in the order it joins its group;
* ties go to the lowest row index; "the k-1 nearest of r" excludes r.
"""

import math

import numpy as np


def sq_dists(X, q):
    out = np.zeros(X.shape[0])
    for j in range(X.shape[1]):
        out += (X[:, j] - q[j]) ** 2
    return out


def column_sums(X):
    total = np.zeros(X.shape[1])
    for i in range(X.shape[0]):
        total += X[i]
    return total


class _Run:
    def __init__(self, X):
        self.X = np.asarray(X, dtype=np.float64)
        self.n = self.X.shape[0]
        self.remaining = np.ones(self.n, dtype=bool)
        self.total = column_sums(self.X)
        self.labels = np.full(self.n, -1, dtype=np.int64)
        self.group = 0

    def count(self):
        return int(self.remaining.sum())

    def dists(self, rows, q):
        return sq_dists(self.X[rows], q)

    def centroid(self):
        return self.total / self.count()

    def farthest(self, q):
        d = sq_dists(self.X, q)
        d[~self.remaining] = -1.0
        return int(np.flatnonzero(d == d.max())[0])

    def nearest(self, q, m, exclude=-1):
        """Indices of the m remaining rows nearest to q (not `exclude`), with distances."""
        d = sq_dists(self.X, q)
        cand = np.flatnonzero(self.remaining)
        cand = cand[cand != exclude]
        order = np.lexsort((cand, d[cand]))  # by distance, then row index
        chosen = cand[order[:m]]
        return chosen, d[chosen]

    def take(self, i):
        self.labels[i] = self.group
        self.total -= self.X[i]
        self.remaining[i] = False

    def close_group(self):
        self.group += 1

    def group_around(self, r, k):
        nb, _ = self.nearest(self.X[r], k - 1, exclude=r)
        self.take(r)
        for i in nb:
            self.take(i)
        self.close_group()

    def rest_as_group(self):
        if self.count() > 0:
            self.labels[self.remaining] = self.group
            self.remaining[:] = False
            self.close_group()


def mdav(X, k, run=_Run):
    """Centroid-based MDAV (Domingo-Ferrer & Torra 2005)."""
    R = run(X)
    while R.count() >= 3 * k:
        r = R.farthest(R.centroid())
        R.group_around(r, k)
        s = R.farthest(R.X[r])
        R.group_around(s, k)
    if R.count() >= 2 * k:
        R.group_around(R.farthest(R.centroid()), k)
    R.rest_as_group()
    return R.labels


def mdav_single(X, k, run=_Run):
    """MDAV-single-group: one group per iteration; Rawat & Borah (IV-MDAV) steps 3-4 at the end."""
    R = run(X)
    while R.count() >= 3 * k:
        R.group_around(R.farthest(R.centroid()), k)
    if R.count() >= 2 * k:
        R.group_around(R.farthest(R.centroid()), k)
    R.rest_as_group()
    return R.labels


def ivmdav(X, k, gamma=1.16, run=_Run):
    """IV-MDAV, Rawat & Borah (IV-MDAV) section IV."""
    R = run(X)
    while R.count() >= 3 * k:
        xr = R.farthest(R.centroid())
        ys, yd = R.nearest(R.X[xr], 2 * k - 1, exclude=xr)
        R.take(xr)
        for y in ys[: k - 1]:
            R.take(y)
        size = k
        for j in range(k - 1, len(ys)):
            if size >= 2 * k - 1:
                break
            y = ys[j]
            zs, zd = R.nearest(R.X[y], k)  # z_1 is y itself
            if len(zs) < k:
                break
            d1 = math.sqrt(yd[j])
            d2 = math.sqrt(zd[k - 1])
            if d2 > gamma * d1:
                R.take(y)
                size += 1
        R.close_group()
    if R.count() >= 2 * k:
        R.group_around(R.farthest(R.centroid()), k)
    R.rest_as_group()
    return R.labels


def vmdav(X, k, gamma=0.2, run=_Run):
    """V-MDAV (Solanas & Martinez-Balleste 2006)."""
    R = run(X)
    while R.count() >= k:
        e = R.farthest(R.centroid())
        nb, _ = R.nearest(R.X[e], k - 1, exclude=e)
        members = [e] + list(nb)
        for i in members:
            R.take(i)
        while len(members) < 2 * k - 1 and R.count() > 0:
            best_u, best_d = -1, math.inf
            for m in members:
                u, du = R.nearest(R.X[m], 1)
                u, du = int(u[0]), float(du[0])
                if du < best_d or (du == best_d and u < best_u):
                    best_u, best_d = u, du
            v, dv = R.nearest(R.X[best_u], 1, exclude=best_u)
            d_out = math.sqrt(dv[0]) if len(v) else math.inf
            if math.sqrt(best_d) < gamma * d_out:
                R.take(best_u)
                members.append(best_u)
            else:
                break
        R.close_group()
    left = np.flatnonzero(R.remaining)
    grouped = np.flatnonzero(~R.remaining)
    for u in left:
        d = R.dists(grouped, R.X[u])
        best = grouped[np.lexsort((grouped, d))[0]]
        R.labels[u] = R.labels[best]
    return R.labels


def standardize(X):
    X = np.asarray(X, dtype=np.float64)
    mean = X.mean(axis=0)
    sd = X.std(axis=0)
    Z = np.zeros_like(X)
    nz = sd > 0
    Z[:, nz] = (X[:, nz] - mean[nz]) / sd[nz]
    return Z


def information_loss(Z, labels):
    """100 * SSE / SST on standardized data, by the definition."""
    sse = 0.0
    for g in np.unique(labels):
        G = Z[labels == g]
        sse += float(((G - G.mean(axis=0)) ** 2).sum())
    sst = float(((Z - Z.mean(axis=0)) ** 2).sum())
    return 100.0 * sse / sst, sse, sst


def split_leaves(X, leaf):
    """Leaves of ``engine.kernels.index.split.split_leaves`` as sorted index arrays, left to
    right: cut at position n // 2 of the rows sorted by (value, row index) in the
    column of largest variance (population variance, ties to the lowest column)."""
    X = np.asarray(X, dtype=np.float64)
    out = []

    def rec(idx):
        if idx.shape[0] <= leaf:
            out.append(np.sort(idx))
            return
        sub = X[idx]
        var = [((sub[:, j] - sub[:, j].mean()) ** 2).sum() for j in range(X.shape[1])]
        j = int(np.argmax(var))
        order = np.lexsort((idx, sub[:, j]))
        h = idx.shape[0] // 2
        rec(idx[order[:h]])
        rec(idx[order[h:]])

    rec(np.arange(X.shape[0]))
    return out


def nearest_with_ties(X, q):
    """Brute force for ``engine.kernels.risk.nearest_with_ties``: the least squared
    distance from ``q`` to a row of ``X`` and how many rows attain it exactly."""
    d = sq_dists(X, q)
    best = d.min()
    return float(best), int((d == best).sum())


def dbrl_credits(X, M) -> list[float]:
    """Each masked row's credit by definition: standardize both tables with the mean and
    population sd of the original ``X`` (constant column -> 0), link the row to its
    nearest original rows; row i scores 1/t when original i is among the t tied nearest."""
    X = np.asarray(X, dtype=np.float64)
    M = np.asarray(M, dtype=np.float64)
    mean, sd = X.mean(axis=0), X.std(axis=0)
    nz = sd > 0
    Zx, Zm = np.zeros_like(X), np.zeros_like(M)
    Zx[:, nz] = (X[:, nz] - mean[nz]) / sd[nz]
    Zm[:, nz] = (M[:, nz] - mean[nz]) / sd[nz]
    out = []
    for i in range(M.shape[0]):
        d = sq_dists(Zx, Zm[i])
        tied = np.flatnonzero(d == d.min())
        out.append(1.0 / tied.shape[0] if i in tied else 0.0)
    return out


def dbrl(X, M):
    """Distance-based record linkage by definition: the share of the rows' credits
    (``dbrl_credits``: sum of scores / rows)."""
    credits = dbrl_credits(X, M)
    return sum(credits) / len(credits)


def interval_disclosure(X, M, p=0.05):
    """Share of rows whose original values all lie within p * sd (sample sd of the
    original column) of the masked values."""
    X = np.asarray(X, dtype=np.float64)
    M = np.asarray(M, dtype=np.float64)
    sd = X.std(axis=0, ddof=1) if X.shape[0] > 1 else np.zeros(X.shape[1])
    inside = np.all(np.abs(X - M) <= p * sd, axis=1)
    return float(inside.mean())


def publish(X, labels, centroid, scale, mean):
    """The write pass's gather and raw sums, row by row: (out, sum ((x - v) / scale)^2,
    sum u, sum u^2) per column, with u = x / scale - mean."""
    n, d = X.shape
    out = np.empty((n, d))
    sse, zs, zq = np.zeros(d), np.zeros(d), np.zeros(d)
    for i in range(n):
        for j in range(d):
            v = centroid[labels[i], j]
            out[i, j] = v
            inv = 1.0 / scale[j]
            t = (X[i, j] - v) * inv
            u = X[i, j] * inv - mean[j]
            sse[j] += t * t
            zs[j] += u
            zq[j] += u * u
    return out, sse, zs, zq


def tie_key(row_id: int) -> int:
    """splitmix64's finalizer on a row id, in plain integers (the partition's tie key)."""
    m = (1 << 64) - 1
    z = (row_id + 0x9E3779B97F4A7C15) & m
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & m
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m
    return z ^ (z >> 31)


def histogram(values, lo, hi, bins, weights=None):
    """Each value's bin, one by one: ``floor((x - lo) / w)`` with ``w = hi / bins - lo /
    bins``, below 0 (and NaN) in bin 0, from ``bins`` on in the last; every value in
    bin 0 when ``hi <= lo``. Python floats (exact division); ``weights``: how many
    times each value counts."""
    counts = [0] * bins
    w = hi / bins - lo / bins if hi > lo else 0.0
    for i, x in enumerate(values):
        b = 0
        if w > 0:
            t = (x - lo) / w if math.isfinite(x - lo) else x / w - lo / w
            if t >= bins:
                b = bins - 1
            elif t > 0:
                b = int(math.floor(t))
        counts[b] += 1 if weights is None else int(weights[i])
    return counts


def mdav_coded(X, K, w, k, single=False):
    """MDAV (or MDAV-single-group) with the exact mismatch distance of
    ``engine.kernels.mdav.coded`` on one leaf: the dense columns ``X`` as above, then each
    coded QI t (codes ``K[:, t]``, weight ``w[t]``) as its one-hot vector scaled by
    sqrt(w[t] / 2): w[t] between different codes; to the centroid of g rows, c of them
    of the row's code, S the sum of squared code counts: w[t] / 2 * (g*g - 2*c*g + S) / (g*g)."""
    X = np.asarray(X, dtype=np.float64)
    n = X.shape[0]
    remaining = np.ones(n, dtype=bool)
    total = column_sums(X) if X.shape[1] else np.zeros(0)
    labels = np.full(n, -1, dtype=np.int64)
    group = 0

    def to_centroid():
        g = int(remaining.sum())
        d = sq_dists(X, total / g) if X.shape[1] else np.zeros(n)
        for t in range(K.shape[1]):
            codes = K[:, t]
            counts = {}
            for i in np.flatnonzero(remaining):
                counts[int(codes[i])] = counts.get(int(codes[i]), 0) + 1
            S = sum(c * c for c in counts.values())
            for i in range(n):
                num = g * g - 2 * counts.get(int(codes[i]), 0) * g + S
                d[i] += (w[t] * 0.5) * float(num) * (1.0 / float(g * g))
        return d

    def to_row(r):
        d = sq_dists(X, X[r]) if X.shape[1] else np.zeros(n)
        for t in range(K.shape[1]):
            d += np.where(K[:, t] != K[r, t], w[t], 0.0)
        return d

    def farthest(d):
        d = np.where(remaining, d, -1.0)
        return int(np.flatnonzero(d == d.max())[0])

    def group_around(r):
        nonlocal total, group
        d = to_row(r)
        cand = np.flatnonzero(remaining)
        cand = cand[cand != r]
        chosen = cand[np.lexsort((cand, d[cand]))[:k - 1]]
        for i in [r, *chosen]:
            labels[i] = group
            total = total - X[i]
            remaining[i] = False
        group += 1

    while remaining.sum() >= 3 * k:
        r = farthest(to_centroid())
        group_around(r)
        if not single:
            group_around(farthest(to_row(r)))
    if remaining.sum() >= 2 * k:
        group_around(farthest(to_centroid()))
    if remaining.any():
        labels[remaining] = group
    return labels
