"""Slow, plainly written references for the maxent / MNQIA kernels
(``engine/kernels/ranges/som.py``, ``engine/kernels/ranges/maxent.py``, ``engine/kernels/ranges/mnqia.py``).

Everything is recomputed from scratch on Python lists/sets (no incremental
state). Conventions follow the kernels' docstrings: ties to the lowest row /
class / bucket; NCP increases are ``(N+1) * NCP(E + t) - N * NCP(E)`` summed
column by column, numeric columns first.
"""

import math

import numpy as np

TOL = 1e-9


# ---------------------------------------------------------------- SOM


def som(Xn, C, off, w, rows, cols, init_rows, epochs, sigma0, sigma1):
    n, dn = Xn.shape
    dc = C.shape[1]
    U = rows * cols
    totc = int(off[dc])
    W = [[float(Xn[init_rows[u], j]) for j in range(dn)] for u in range(U)]
    P = [[0.0] * totc for _ in range(U)]
    for u in range(U):
        for j in range(dc):
            P[u][off[j] + C[init_rows[u], j]] = 1.0

    def bmu_all():
        T = [[0.0] * totc for _ in range(U)]
        for u in range(U):
            for j in range(dc):
                s = 0.0
                for q in range(off[j], off[j + 1]):
                    s += P[u][q] * P[u][q]
                for q in range(off[j], off[j + 1]):
                    T[u][q] = w[dn + j] * 0.5 * (1.0 - 2.0 * P[u][q] + s)
        out = []
        for i in range(n):
            dist = [0.0] * U
            for j in range(dn):
                for u in range(U):
                    t = Xn[i, j] - W[u][j]
                    dist[u] += w[j] * t * t
            for j in range(dc):
                for u in range(U):
                    dist[u] += T[u][off[j] + C[i, j]]
            out.append(min(range(U), key=lambda u: (dist[u], u)))
        return out

    for e in range(epochs):
        sigma = sigma0 * (sigma1 / sigma0) ** (e / (epochs - 1)) if epochs > 1 else sigma1
        b = bmu_all()
        for u in range(U):
            num = [0.0] * dn
            cat = [0.0] * totc
            den = 0.0
            for v in range(U):
                g2 = (u // cols - v // cols) ** 2 + (u % cols - v % cols) ** 2
                h = math.exp(-g2 / (2.0 * sigma * sigma))
                members = [i for i in range(n) if b[i] == v]
                den += h * len(members)
                for j in range(dn):
                    num[j] += h * sum(Xn[i, j] for i in members)
                counts = [0.0] * totc
                for i in members:
                    for j in range(dc):
                        counts[off[j] + C[i, j]] += 1.0
                for q in range(totc):
                    cat[q] += h * counts[q]
            if den > 0:
                W[u] = [x / den for x in num]
                P[u] = [x / den for x in cat]
    return np.array(bmu_all())


# ---------------------------------------------------------------- maxent metrics


def entropy(values):
    vals = list(values)
    N = len(vals)
    h = 0.0
    for v in sorted(set(vals)):
        p = vals.count(v) / N
        h -= p * math.log2(p)
    return h


def ncp_class(Xn, C, card, w, members):
    """Per-tuple NCP of a class (numeric columns scaled to [0, 1])."""
    dn = Xn.shape[1]
    v = 0.0
    for j in range(dn):
        xs = [Xn[r, j] for r in members]
        v += w[j] * (max(xs) - min(xs))
    for j in range(C.shape[1]):
        z = len({C[r, j] for r in members})
        v += w[dn + j] * (z / card[j] if z > 1 else 0.0)
    return v


def ncp_table(Xn, C, card, w, labels):
    return sum(len(m) * ncp_class(Xn, C, card, w, m) for m in _classes(labels).values())


def cdm(labels, k=None):
    n = len(labels)
    kk = 1 if k is None else k
    return sum(len(m) ** 2 if len(m) >= kk else n * len(m) for m in _classes(labels).values())


def _classes(labels):
    out = {}
    for r, g in enumerate(labels):
        out.setdefault(int(g), []).append(r)
    return out


# ---------------------------------------------------------------- maxent core (single SOM unit per round)


def _slog_entropy(counts):
    N = sum(counts.values())
    sl = sum(c * math.log2(c) for c in counts.values() if c > 0)
    return math.log2(N) - sl / N


def _add_cost(Xn, C, card, w, r, members):
    dn = Xn.shape[1]
    N = len(members)
    v = 0.0
    for j in range(dn):
        xs = [Xn[q, j] for q in members]
        old = max(xs) - min(xs)
        new = max(xs + [Xn[r, j]]) - min(xs + [Xn[r, j]])
        v += w[j] * ((N + 1) * new - N * old)
    for j in range(C.shape[1]):
        s = {C[q, j] for q in members}
        z, z1 = len(s), len(s | {C[r, j]})
        f = lambda t: t / card[j] if t > 1 else 0.0  # noqa: E731
        v += w[dn + j] * ((N + 1) * f(z1) - N * f(z))
    return v


def maxent_single_cluster(Xn, C, card, w, sa, eps, k, seed):
    """maxent_partition with som_units=1 (one cluster per round), plainly.
    Replays the driver's random stream: per round one ``integers(2**62)`` (the
    SOM seed) then ``random(#remaining)``."""
    n = len(sa)
    m = int(max(sa)) + 1
    distinct = len(set(sa.tolist()))
    rng = np.random.default_rng(seed)
    cls = [-1] * n
    classes = []  # list of member lists
    for d in range(distinct, 1, -1):
        rem = [r for r in range(n) if cls[r] < 0]
        if len(rem) < d or len({sa[r] for r in rem}) < d:
            continue
        rng.integers(2**62)
        urand = rng.random(len(rem))
        ui = 0
        while len({sa[r] for r in rem if cls[r] < 0}) >= d:
            cnt = {}
            for r in rem:
                if cls[r] < 0:
                    cnt[sa[r]] = cnt.get(sa[r], 0) + 1
            s0 = min(cnt, key=lambda s: (cnt[s], s))
            bucket = [r for r in rem if cls[r] < 0 and sa[r] == s0]
            t = min(int(urand[ui] * len(bucket)), len(bucket) - 1)
            ui += 1
            members = [bucket[t]]
            cid = len(classes)
            cls[bucket[t]] = cid
            for _ in range(d - 1):
                used = {sa[q] for q in members}
                cand = [r for r in rem if cls[r] < 0 and sa[r] not in used]
                best = min(cand, key=lambda r: (ncp_class(Xn, C, card, w, members + [r]), r))
                members.append(best)
                cls[best] = cid
            classes.append(members)
    # Fig. 4
    H = entropy(sa.tolist())
    alive = [True] * len(classes)
    if eps >= H - TOL and math.gcd(*[sa.tolist().count(s) for s in set(sa.tolist())]) == 1:
        return np.zeros(n, np.int64), 0

    def ent_of(c):
        cnt = {}
        for r in classes[c]:
            cnt[sa[r]] = cnt.get(sa[r], 0) + 1
        return _slog_entropy(cnt)

    def ent_with(c, r):
        cnt = {}
        for q in classes[c] + [r]:
            cnt[sa[q]] = cnt.get(sa[q], 0) + 1
        return _slog_entropy(cnt)

    def nearest(r, pred):
        cands = [c for c in range(len(classes)) if alive[c] and pred(c)]
        if not cands:
            return -1
        return min(cands, key=lambda c: (_add_cost(Xn, C, card, w, r, classes[c]), c))

    first = True
    leftover = []
    while True:
        low = [c for c in range(len(classes)) if alive[c] and ent_of(c) < eps - TOL]
        unassigned = [r for r in range(n) if cls[r] < 0]
        if not low and (not unassigned or not first):
            break
        first = False
        for c in low:
            alive[c] = False
            for r in classes[c]:
                cls[r] = -1
        le = [r for r in range(n) if cls[r] < 0]
        leftover = []
        for r in le:
            c = nearest(r, lambda c: sa[r] not in {sa[q] for q in classes[c]})
            if c < 0:
                c = nearest(r, lambda c: ent_with(c, r) >= eps - TOL)
            if c < 0:
                leftover.append(r)
                continue
            classes[c].append(r)
            cls[r] = c
    merges = 0

    def merge_cost(a, b):
        # column by column, like the kernel: w_j ((Na+Nb) ncp_j(a+b) - Na ncp_j(a) - Nb ncp_j(b))
        A, B = classes[a], classes[b]
        U = A + B
        dn = Xn.shape[1]
        v = 0.0
        for j in range(dn):
            span = lambda ms: max(Xn[q, j] for q in ms) - min(Xn[q, j] for q in ms)  # noqa: E731
            v += w[j] * (len(U) * span(U) - len(A) * span(A) - len(B) * span(B))
        for j in range(C.shape[1]):
            f = lambda ms: (len({C[q, j] for q in ms}) / card[j]) if len({C[q, j] for q in ms}) > 1 else 0.0  # noqa
            v += w[dn + j] * (len(U) * f(U) - len(A) * f(A) - len(B) * f(B))
        return v

    def partner(a):
        cands = [b for b in range(len(classes)) if b != a and alive[b]]
        if not cands:
            return -1
        ok = [b for b in cands if entropy([sa[q] for q in classes[a] + classes[b]]) >= eps - TOL]
        pool = ok if ok else cands
        return min(pool, key=lambda b: (merge_cost(a, b), b))

    def merge(a, b):
        lo, hi = min(a, b), max(a, b)
        classes[lo] = classes[lo] + classes[hi]
        classes[hi] = []
        alive[hi] = False
        for q in classes[lo]:
            cls[q] = lo
        return lo

    if leftover and not any(alive):
        classes.append(list(leftover))
        alive.append(True)
        for r in leftover:
            cls[r] = len(classes) - 1
        merges = 1
        leftover = []
    for r in leftover:
        c = nearest(r, lambda c: True)
        classes[c].append(r)
        cls[r] = c
        while ent_of(c) < eps - TOL:
            b = partner(c)
            if b < 0:
                break
            c = merge(c, b)
            merges += 1
    if k is not None and k > 1:
        for a in range(len(classes)):
            while alive[a] and len(classes[a]) < k:
                b = partner(a)
                if b < 0:
                    break
                a = merge(a, b)
                merges += 1
    _, labels = np.unique(np.array(cls), return_inverse=True)
    return labels.astype(np.int64), merges


# ---------------------------------------------------------------- MNQIA


def best_sse_1d(x, g):
    """Minimum within-segment SSE of x into g contiguous segments of its sorted
    distinct values (brute force over all cut sets)."""
    from itertools import combinations

    vals = sorted(set(x.tolist()))
    xs = list(x)
    best = math.inf
    for cuts in combinations(range(1, len(vals)), g - 1):
        bounds = [0, *cuts, len(vals)]
        sse = 0.0
        for a, b in zip(bounds[:-1], bounds[1:]):
            seg = [v for v in xs if vals[a] <= v <= vals[b - 1]]
            mu = sum(seg) / len(seg)
            sse += sum((v - mu) ** 2 for v in seg)
        best = min(best, sse)
    return best


def mmdcf(X, seg, k, scan_dim):
    """MMDCF grouping exactly as ``engine/methods/mnqia.py`` reads Ahmed et al. (MNQIA) (plain loops)."""
    n, d = X.shape
    R = X.max(axis=0) - X.min(axis=0)
    Xn = np.where(R > 0, (X - X.min(axis=0)) / np.where(R > 0, R, 1.0), 0.0)
    keys = sorted({tuple(int(v) for v in seg[r]) for r in range(n)})
    rem = set(range(n))
    labels = [-1] * n
    groups = []

    def bucket(key):
        return [r for r in sorted(rem) if tuple(int(v) for v in seg[r]) == key]

    def prio(key):
        cap = sum(sum(1 for r in rem if seg[r, j] == key[j]) for j in range(d))
        return cap + len(bucket(key))

    def growth(members, r):
        if not members:
            return 0.0
        v = 0.0
        for j in range(d):
            lo = min(Xn[q, j] for q in members)
            hi = max(Xn[q, j] for q in members)
            v += max(lo - Xn[r, j], 0.0) + max(Xn[r, j] - hi, 0.0)
        return v

    def pick(key, members):
        r = min(bucket(key), key=lambda r: (growth(members, r), r))
        members.append(r)
        rem.discard(r)

    relaxed = 0
    while len(rem) >= k:
        members = []
        used = [set() for _ in range(d)]
        for s in sorted({key[scan_dim] for key in keys}):
            if len(members) == k:
                break
            cands = [key for key in keys if key[scan_dim] == s and bucket(key)
                     and not any(key[j] in used[j] for j in range(d))]
            if cands:
                key = max(cands, key=lambda kk: (prio(kk), [-x for x in kk]))
                pick(key, members)
                for j in range(d):
                    used[j].add(key[j])
        while len(members) < k:
            cands = [key for key in keys if bucket(key)]
            key = min(cands, key=lambda kk: (sum(kk[j] in used[j] for j in range(d)), -prio(kk), kk))
            pick(key, members)
            for j in range(d):
                used[j].add(key[j])
            relaxed += 1
        for r in members:
            labels[r] = len(groups)
        groups.append(members)
    for r in sorted(rem):
        g = min(range(len(groups)), key=lambda g: (growth(groups[g], r), g))
        groups[g].append(r)
        labels[r] = g
    return np.array(labels, np.int64), relaxed


def range_loss(X, labels):
    n, d = X.shape
    total = 0.0
    for members in _classes(labels).values():
        for j in range(d):
            R = X[:, j].max() - X[:, j].min()
            if R > 0:
                total += len(members) * (max(X[r, j] for r in members) - min(X[r, j] for r in members)) / R
    return total / n
