"""Slow reference of heterogeneous MDAV (Domingo-Ferrer & Torra, "Ordinal, continuous
and heterogeneous k-anonymity through microaggregation", 2005), written from the
definitions in engine/encode/mixed.py's docstring, row by row, without its encoding:

* a record is natural values: numeric and date columns as z-scores (population sd),
  ordinal columns as the scaled rank r = rank / (m - 1), nominal columns as the
  indicator vector of their category (a centroid: the category frequencies);
* distance^2 = sum_numeric w (dz)^2 + sum_ordinal w c^2 (dr)^2 + sum_nominal w/2
  sum_j (dp_j)^2, with c = 1 / sd(r) (so for two records the nominal term is w when
  the categories differ, 0 when equal);
* the MDAV loops are ``reference.py``'s, over this distance;
* published: numeric mean; date mean rounded half to even; ordinal the lower median
  category; nominal the mode, ties to the first of the sorted dictionary;
* information loss per QI: numeric / date 100 SSE / SST on z-scores, nominal percent
  changed, ordinal 100 mean |rank change| / (m - 1); combined: their mean.
"""

import numpy as np
import polars as pl

import reference as ref


def _is_cat(dt):
    return dt == pl.String or dt == pl.Boolean or isinstance(dt, (pl.Categorical, pl.Enum))


def describe(df: pl.DataFrame, qi, ordinal=None, weights=None):
    """Per QI: (kind, weight, categories or None, natural columns as a list of arrays)."""
    ordinal = ordinal or {}
    weights = weights or {}
    meta = []
    for c in qi:
        s = df.get_column(c)
        w = float(weights.get(c, 1.0))
        if c in ordinal:
            order = list(ordinal[c])
            texts = s.cast(pl.String).to_list()
            rank = np.array([order.index(t) for t in texts], dtype=np.float64)
            r = rank / (len(order) - 1) if len(order) > 1 else rank * 0.0
            sd = r.std()
            meta.append(("ordinal", w, order, [r], (1.0 / sd) if sd > 0 else 0.0))
        elif _is_cat(s.dtype):
            texts = s.cast(pl.String).to_list()
            cats = sorted(set(texts))
            ind = [np.array([1.0 if t == cat else 0.0 for t in texts]) for cat in cats]
            meta.append(("nominal", w, cats, ind, None))
        else:
            kind = "date" if s.dtype.is_temporal() else "numeric"
            x = s.to_physical().cast(pl.Float64).to_numpy()
            mean, sd = x.mean(), x.std()
            z = (x - mean) / sd if sd > 0 else x * 0.0
            meta.append((kind, w, None, [z], (mean, sd)))
    return meta


class HetRun(ref._Run):
    """reference._Run over natural values with the heterogeneous distance."""

    def __init__(self, X, meta):
        self.meta = meta
        super().__init__(X)

    def dists(self, rows, q):
        return self._d(self.X[rows], q)

    def _d(self, X, q):
        out = np.zeros(X.shape[0])
        j = 0
        for kind, w, cats, cols, extra in self.meta:
            if kind in ("numeric", "date"):
                out += w * (X[:, j] - q[j]) ** 2
                j += 1
            elif kind == "ordinal":
                out += w * extra * extra * (X[:, j] - q[j]) ** 2
                j += 1
            else:
                part = np.zeros(X.shape[0])
                for t in range(len(cats)):
                    part += (X[:, j + t] - q[j + t]) ** 2
                out += w / 2.0 * part
                j += len(cats)
        return out

    def farthest(self, q):
        d = self._d(self.X, q)
        d[~self.remaining] = -1.0
        return int(np.flatnonzero(d == d.max())[0])

    def nearest(self, q, m, exclude=-1):
        d = self._d(self.X, q)
        cand = np.flatnonzero(self.remaining)
        cand = cand[cand != exclude]
        order = np.lexsort((cand, d[cand]))
        chosen = cand[order[:m]]
        return chosen, d[chosen]


def natural(meta) -> np.ndarray:
    return np.column_stack([col for m in meta for col in m[3]])


def labels(df, qi, k, method="mdav", ordinal=None, weights=None, gamma=None):
    meta = describe(df, qi, ordinal, weights)
    X = natural(meta)
    run = lambda X: HetRun(X, meta)  # noqa: E731
    if method == "mdav":
        return ref.mdav(X, k, run=run)
    if method == "mdav-single":
        return ref.mdav_single(X, k, run=run)
    if method == "vmdav":
        return ref.vmdav(X, k, 0.2 if gamma is None else gamma, run=run)
    if method == "ivmdav":
        return ref.ivmdav(X, k, 1.16 if gamma is None else gamma, run=run)
    raise ValueError(method)


def publish(df, qi, lab, ordinal=None) -> dict:
    """Published values per QI (Python lists) and the information loss per QI (percent)."""
    ordinal = ordinal or {}
    out, il = {}, {}
    groups = {}
    for i, g in enumerate(lab):
        groups.setdefault(int(g), []).append(i)
    n = df.height
    for c in qi:
        s = df.get_column(c)
        if c in ordinal or _is_cat(s.dtype):
            texts = s.cast(pl.String).to_list()
            cats = list(ordinal[c]) if c in ordinal else sorted(set(texts))
            code = [cats.index(t) for t in texts]
            pub = [None] * n
            for rows in groups.values():
                counts = [0] * len(cats)
                for i in rows:
                    counts[code[i]] += 1
                if c in ordinal:
                    cum, p = 0, 0
                    for j, cnt in enumerate(counts):
                        cum += cnt
                        if 2 * cum >= len(rows):
                            p = j
                            break
                else:
                    p = max(range(len(cats)), key=lambda j: (counts[j], -j))
                for i in rows:
                    pub[i] = p
            if len(cats) > 1:
                if c in ordinal:
                    il[c] = 100.0 * sum(abs(code[i] - pub[i]) for i in range(n)) / (len(cats) - 1) / n
                else:
                    il[c] = 100.0 * sum(code[i] != pub[i] for i in range(n)) / n
            else:
                il[c] = 0.0
            out[c] = [cats[p] for p in pub]
        else:
            x = s.to_physical().cast(pl.Float64).to_numpy()
            pub = np.empty(n)
            for rows in groups.values():
                v = sum(x[i] for i in rows) / len(rows)
                pub[rows] = v
            if s.dtype.is_temporal():
                pub = np.array([float(round(v)) for v in pub])  # Python's round: half to even
            sd = x.std()
            il[c] = 100.0 * float(((x - pub) ** 2).sum()) / float(((x - x.mean()) ** 2).sum()) if sd > 0 else 0.0
            out[c] = pub
    il_all = float(np.mean([il[c] for c in qi]))
    return {"values": out, "il": il, "combined": il_all}


def dbrl(orig: pl.DataFrame, masked: pl.DataFrame, qi, ordinal=None) -> float:
    """Distance-based record linkage by definition with the heterogeneous distance
    (weights 1): numeric and date QIs z-scored by the original's mean and population
    sd, ordinal ranks z-scored likewise, nominal 0/1; masked row i scores 1/t when
    original i is among the t originals tied at the least distance."""
    ordinal = ordinal or {}
    n = orig.height
    D = np.zeros((n, n))  # D[i, j]: masked i to original j
    for c in qi:
        a, b = orig.get_column(c), masked.get_column(c)
        if c in ordinal or _is_cat(a.dtype):
            if c in ordinal:
                order = list(ordinal[c])
                x = np.array([order.index(v) for v in a.cast(pl.String).to_list()], dtype=np.float64)
                y = np.array([order.index(v) for v in b.cast(pl.String).to_list()], dtype=np.float64)
            else:
                ta, tb = a.cast(pl.String).to_list(), b.cast(pl.String).to_list()
                for i in range(n):
                    for j in range(n):
                        D[i, j] += 1.0 if tb[i] != ta[j] else 0.0
                continue
        else:
            x = a.to_physical().cast(pl.Float64).to_numpy()
            y = b.to_physical().cast(pl.Float64).to_numpy()
        mean, sd = x.mean(), x.std()
        if sd > 0:
            zx, zy = (x - mean) / sd, (y - mean) / sd
            D += (zy[:, None] - zx[None, :]) ** 2
    score = 0.0
    for i in range(n):
        tied = np.flatnonzero(np.isclose(D[i], D[i].min(), rtol=1e-12, atol=1e-12))
        if i in tied:
            score += 1.0 / tied.shape[0]
    return score / n


def group_picks(labels, codes, g, ordinal, null):
    """Slow twin of ``kernels.groups.group_picks``: per group, the mode (ties to the
    lowest code) or the lower median of the codes present (NaN: missing; none present:
    NaN), and [loss, imputed, kept missing, suppressed] summed over the groups."""
    out = np.empty(g)
    stats = np.zeros(4, np.int64)
    for j in range(g):
        rows = [c for lab, c in zip(labels, codes) if lab == j]
        present = sorted(c for c in rows if not np.isnan(c))
        miss = len(rows) - len(present)
        if ordinal:
            if not present:
                out[j] = np.nan
                stats[2] += miss
                continue
            pick = present[(len(present) - 1) // 2]
            out[j] = pick
            stats[0] += int(sum(abs(c - pick) for c in present))
            stats[1] += miss
            continue
        counts = {c: present.count(c) for c in present}
        pick = min(counts, key=lambda c: (-counts[c], c))
        out[j] = pick
        stats[0] += len(present) - counts[pick]
        if null >= 0:
            nulls = counts.get(float(null), 0)
            if pick == null:
                stats[2] += nulls
                stats[3] += len(present) - nulls
            else:
                stats[1] += nulls
    return out, stats
