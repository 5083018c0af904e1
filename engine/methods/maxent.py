"""Maximum-entropy anonymization of a sensitive attribute (Tsiafoulis et al. (maximum entropy), issue 5).

Array-level core: :func:`maxent_partition` splits the rows into equivalence
classes whose sensitive-attribute (SA) entropy is at least ``epsilon`` bits
(default: the SA entropy of the whole table), keeping classes compact on the
quasi-identifiers (QIs). :func:`encode_table` turns a Polars frame into the arrays
(validating the columns), and :func:`generalize` publishes the QIs of each class.

How the seed is read (its pseudo-code, Figs. 1-4, is partly garbled)
--------------------------------------------------------------------
* **QI encoding.** Numeric QIs (any units) are scaled to [0, 1] by their range.
  Categorical QIs are integer codes ``0..card-1``. The seed maps categorical
  values to numbers through taxonomies (Iyengar) that it does not print; we use
  flat domains instead: in the SOM a categorical column is a one-hot vector
  scaled by 1/sqrt(2) (two different categories are as far apart as the ends of a
  numeric range, see ``engine/kernels/ranges/som.py``), and its NCP is that of
  set-valued generalization (below).
* **NCP (eq. 4).** Per tuple and attribute: numeric ``w (max - min) / |A|`` over
  its class; categorical ``w |S| / |A|`` where ``S`` is the set of the class's
  values and ``|A|`` the number of categories in the table, 0 when ``|S| = 1``
  (Xu et al.'s NCP with the set as the generalized node). ``ncp`` is the sum over
  tuples and attributes (the seed's "total weighted certainty penalty NCP(T)");
  ``ncp_normalized = ncp / (n * sum(w))`` lies in [0, 1]. Weights default to 1.
* **C_DM (eq. 3)** ``= sum_{|E|>=k} |E|^2 + sum_{|E|<k} |D||E|`` with ``k`` the
  optional minimum class size (1 when not given, so every class counts |E|^2).
* **Fig. 1, main loop.** For ``d`` = number of distinct SA values down to 2: run
  the SOM (Fig. 2) on the still unassigned tuples (re-clustering every round, as
  the pseudo-code calls ``Cluster(T)`` inside the loop); in every cluster,
  bucketize by SA value; the garbled "For every SAP set: while |SAP| >= d" is read
  as "while the cluster still has at least d non-empty SA buckets", create a
  class (Fig. 3). Rounds where no d distinct SA values remain are skipped.
* **Fig. 3, create a class.** A tuple ``t_m`` is drawn at random (seeded) from the
  smallest non-empty bucket; then ``d-1`` times the tuple (of the same cluster,
  with an SA value not yet in the class) that minimizes the class's NCP is
  added. The class has ``d`` tuples with ``d`` distinct SA values (entropy
  ``log2 d``). Ties: lowest row.
* **Fig. 4, incorporation.** Until no class has entropy below ``epsilon``: the
  tuples of low-entropy classes, and tuples that no round placed, are removed
  and each (in row order) joins the class "with the most similar QI set" that
  does not contain its SA value. "Most similar" is the smallest increase of the
  table's NCP. A join that adds a new SA value always raises the class's entropy
  (``(N+1) H_b(1/(N+1)) > log2 N >= H``), so the receiving classes stay above
  epsilon. If every class already contains the tuple's value, it joins the most
  similar class whose entropy stays >= epsilon after the join.
* **Never silently below epsilon.** A tuple that fits nowhere (a "leftover")
  joins its most similar class; while that class is below epsilon it is merged
  with the class that brings the union to epsilon at the least NCP increase (or
  the least NCP increase at all if none does); each such fusion counts in
  ``merges``. With ``epsilon <= H(table)`` this always ends (the whole table
  reaches it); ``epsilon > H(table)`` is impossible (entropy is concave, so some
  class is always at most H(table)) and is rejected.
* **Minimum class size k (optional).** Classes smaller than k are merged with
  their best partner (same rule), counted in ``merges``; the union of two classes
  that reach epsilon reaches it too (concavity), so this keeps the target.
* **epsilon = H(table), the default, is degenerate.** For any partition,
  ``sum_E |E|/n * H(E) = H(table) - I(E; SA)`` (mutual information >= 0), so
  if every class reaches H(table) then I = 0: every class has *exactly* the
  table's SA distribution. When the SA counts have no common divisor > 1 (as on
  Adult), only the whole table qualifies. The driver detects this case and
  returns the single class directly (``forced_single_class``; the Figs. 1-3
  rounds still run, for the intermediate statistics). This is why Tsiafoulis et al. (maximum entropy)
  needs noise for "the rest" of the classes; use a lower epsilon for a useful
  partition.
* Entropies compare with a tolerance of 1e-9 bits (``entropy >= epsilon - 1e-9``),
  so the default epsilon = H(table) is met by a class with the table's exact
  distribution despite rounding. The final labels are re-checked from scratch;
  a violation raises instead of being returned.

The seed reaches epsilon by adding noise (fake SA values) to the remaining
classes; the issue asks for merges instead, so no value is ever altered.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from ..encode.dictionary import value_codes, value_order
from ..checks import is_int, least_class
from ..errors import EngineError
from ..kernels.entropy import entropy
from ..kernels.ranges import maxent as K
from ..kernels.groups import group_distinct, group_minmax
from ..kernels.ranges.som import som_fit

ENTROPY_TOL = 1e-9


def table_epsilon(sa_counts, epsilon, sa_name: str) -> tuple[float, float]:
    """``(H, epsilon)``: the table's SA entropy (bits) from its value counts, and
    epsilon (default H), checked: at least two distinct values, a finite epsilon >= 0,
    no more than H."""
    if np.count_nonzero(sa_counts) < 2:
        raise EngineError(f"column {sa_name!r}: the sensitive attribute has a single distinct value "
                          f"(entropy 0 cannot be diversified)")
    H = entropy(sa_counts)
    eps = H if epsilon is None else float(epsilon)
    if not math.isfinite(eps) or eps < 0:
        raise EngineError(f"epsilon: must be a finite number >= 0, got {epsilon!r}")
    if eps > H + ENTROPY_TOL:
        raise EngineError(f"epsilon: {eps:.6g} bits exceeds the SA entropy of the whole table ({H:.6g} bits); "
                          f"no partition can reach it")
    return H, eps


@dataclass
class MaxEntResult:
    """Outcome of :func:`maxent_partition`.

    labels: int64 class id per row (0..n_classes-1, numbered by creation order).
    n_classes, class_sizes (per class), class_entropy (bits, per class).
    epsilon: the target used; table_entropy: H(SA) of the whole table.
    entropy_min / entropy_mean (unweighted over classes) / entropy_mean_weighted
    (by class size). entropy_hist: dict(edges, classes, tuples), bins of
    ``hist_width`` bits, the counts of classes and of tuples per bin (seed Fig. 5).
    intermediate_*: the same figures for the classes of Figs. 1-3 before
    incorporation (Tsiafoulis et al. (maximum entropy) reports 22,831 tuples at or above 3.4 bits there).
    ncp, ncp_normalized, cdm: seed eqs. 4 and 3. merges: class fusions done to
    reach epsilon or k; leftover_joins: tuples that fitted in no class without
    breaking epsilon; dissolved: low-entropy classes dissolved by Fig. 4;
    incorporated: tuples moved by Fig. 4. rounds: per d, (d, clusters, classes).
    forced_single_class: epsilon >= H(table) with coprime SA counts, where the
    only valid partition is the whole table (merges then counts the fusions of
    the intermediate classes, and of the unplaced tuples, into it).
    """

    labels: np.ndarray
    n_classes: int
    class_sizes: np.ndarray
    class_entropy: np.ndarray
    epsilon: float
    table_entropy: float
    entropy_min: float
    entropy_mean: float
    entropy_mean_weighted: float
    entropy_hist: dict
    ncp: float
    ncp_normalized: float
    cdm: int
    k: int | None
    merges: int
    leftover_joins: int
    dissolved: int
    incorporated: int
    intermediate_classes: int
    intermediate_entropy_min: float
    intermediate_entropy_mean: float
    intermediate_tuples_at_or_above_epsilon: int
    unplaced_after_rounds: int
    forced_single_class: bool = False
    rounds: list = field(default_factory=list)
    timings: dict = field(default_factory=dict)


# ---------------------------------------------------------------- encoding


@dataclass
class EncodedTable:
    """Arrays for :func:`maxent_partition` / :func:`engine.methods.mnqia.mnqia_partition`.

    Q (n, d) float64: numeric QIs in original units, categorical QIs as codes.
    kinds: "numeric" / "categorical" per QI. cardinalities: categories per QI
    (0 for numeric). categories: the sorted category labels per QI (None for
    numeric); code i means categories[j][i]. sa_codes / sa_categories likewise.
    """

    qi: list
    Q: np.ndarray
    kinds: list
    cardinalities: list
    categories: list
    sa: str | None = None
    sa_codes: np.ndarray | None = None
    sa_categories: list | None = None


def _codes(s: pl.Series) -> tuple[np.ndarray, list]:
    """Codes of ``s`` in value order, as the dictionary pass codes a streamed table
    (``engine.encode.dictionary``, ``order="value"``)."""
    cats = value_order(s)
    codes = value_codes(cats, s, dtype=pl.Int64)
    return codes.to_numpy().astype(np.int64), cats.to_list()


def encode_table(df: pl.DataFrame, qi, sa: str | None = None, kinds: dict | None = None) -> EncodedTable:
    """Validate and encode ``qi`` (and the sensitive column ``sa``) of ``df``.

    Numeric dtypes are numeric QIs unless ``kinds`` says "categorical"; other
    dtypes (strings, categoricals, booleans) are categorical, coded in sorted
    order of their values. Raises EngineError (one line, naming the column and
    row, counted from 1 as in the streaming passes) for: an unknown or repeated column, an SA also listed as a QI, nulls in
    a QI or the SA, NaN/infinite numeric QIs, an SA with a single distinct value.
    """
    if isinstance(df, pl.LazyFrame):
        df = df.collect()
    qi = list(qi)
    kinds = dict(kinds or {})
    if not qi:
        raise EngineError("--qi: at least one quasi-identifier column is needed")
    seen = set()
    for c in qi + ([sa] if sa is not None else []):
        if c not in df.columns:
            raise EngineError(f"column {c!r}: not found in the input")
    for c in qi:
        if c in seen:
            raise EngineError(f"column {c!r}: listed twice in --qi")
        seen.add(c)
    if sa is not None and sa in seen:
        raise EngineError(f"column {sa!r}: the sensitive attribute is also listed as a quasi-identifier")
    for c in kinds:
        if c not in seen:
            raise EngineError(f"column {c!r}: a kind is given but it is not a quasi-identifier")
    n = df.height
    Q = np.empty((n, len(qi)), np.float64)
    out_kinds, cards, cats = [], [], []
    for j, c in enumerate(qi):
        s = df[c]
        if s.null_count():
            row = int(np.flatnonzero(s.is_null().to_numpy())[0])
            raise EngineError(f"column {c!r}: null quasi-identifier at row {row + 1} (rows counted from 1)")
        kind = kinds.get(c, "numeric" if s.dtype.is_numeric() else "categorical")
        if kind not in ("numeric", "categorical"):
            raise EngineError(f"column {c!r}: unknown kind {kind!r} (numeric or categorical)")
        if kind == "numeric":
            if not s.dtype.is_numeric():
                raise EngineError(f"column {c!r}: non-numeric values in a numeric quasi-identifier")
            x = s.cast(pl.Float64).to_numpy()
            bad = ~np.isfinite(x)
            if bad.any():
                raise EngineError(f"column {c!r}: NaN or infinite value at row {int(np.flatnonzero(bad)[0]) + 1} "
                                  f"(rows counted from 1)")
            Q[:, j] = x
            cards.append(0)
            cats.append(None)
        else:
            codes, labels = _codes(s)
            Q[:, j] = codes
            cards.append(len(labels))
            cats.append(labels)
        out_kinds.append(kind)
    enc = EncodedTable(qi=qi, Q=Q, kinds=out_kinds, cardinalities=cards, categories=cats)
    if sa is not None:
        s = df[sa]
        if s.null_count():
            row = int(np.flatnonzero(s.is_null().to_numpy())[0])
            raise EngineError(f"column {sa!r}: null sensitive value at row {row + 1} (rows counted from 1)")
        if s.dtype.is_float():
            x = s.to_numpy()
            if not np.isfinite(x).all():
                row = int(np.flatnonzero(~np.isfinite(x))[0])
                raise EngineError(f"column {sa!r}: NaN or infinite sensitive value at row {row + 1} "
                                  f"(rows counted from 1)")
        codes, labels = _codes(s)
        if len(labels) < 2:
            raise EngineError(f"column {sa!r}: the sensitive attribute has a single distinct value "
                              f"(entropy 0 cannot be diversified)")
        enc.sa, enc.sa_codes, enc.sa_categories = sa, codes, labels
    return enc


# ---------------------------------------------------------------- validation


def _prepare(Q, sa_codes, qi_kinds, cardinalities, weights, k, qi_names, sa_name, ranges=None):
    Q = np.ascontiguousarray(np.asarray(Q, dtype=np.float64))
    if Q.ndim != 2:
        raise EngineError(f"Q: expected a 2-D array of quasi-identifiers, got shape {Q.shape}")
    n, d = Q.shape
    if d == 0:
        raise EngineError("Q: at least one quasi-identifier column is needed")
    names = list(qi_names) if qi_names is not None else [f"x{j}" for j in range(d)]
    if len(names) != d:
        raise EngineError(f"qi_names: {len(names)} names for {d} columns")
    if sa_name is not None and sa_name in names:
        raise EngineError(f"column {sa_name!r}: the sensitive attribute is also listed as a quasi-identifier")
    bad = ~np.isfinite(Q)
    if bad.any():
        i, j = np.argwhere(bad)[0]
        raise EngineError(f"column {names[j]!r}: null, NaN or infinite quasi-identifier at row {int(i)}")
    sa = np.asarray(sa_codes)
    if sa.shape != (n,):
        raise EngineError(f"sa_codes: expected {n} codes, got shape {sa.shape}")
    san = sa_name or "sa"
    if sa.dtype.kind == "f":
        if not np.isfinite(sa).all():
            raise EngineError(f"column {san!r}: null sensitive value at row {int(np.flatnonzero(~np.isfinite(sa))[0])}")
        if (sa != np.round(sa)).any():
            raise EngineError(f"column {san!r}: sensitive codes must be integers")
    elif sa.dtype.kind not in "iu":
        raise EngineError(f"column {san!r}: sensitive codes must be integers 0..m-1 (encode with encode_table)")
    sa = sa.astype(np.int64)
    if (sa < 0).any():
        raise EngineError(f"column {san!r}: null sensitive value at row {int(np.flatnonzero(sa < 0)[0])}")
    kinds = list(qi_kinds) if qi_kinds is not None else ["numeric"] * d
    if len(kinds) != d or any(x not in ("numeric", "categorical") for x in kinds):
        raise EngineError("qi_kinds: one of 'numeric' / 'categorical' per QI column")
    if k is not None and (not is_int(k) or k < 1):
        raise EngineError(f"k: must be a positive integer, got {k!r}")
    need = least_class(k)
    if n < need:
        raise EngineError(f"fewer rows ({n}) than one class needs ({need})")
    num = [j for j in range(d) if kinds[j] == "numeric"]
    cat = [j for j in range(d) if kinds[j] == "categorical"]
    if ranges is not None:
        ranges = np.asarray(ranges, dtype=np.float64)
        if ranges.shape != (d, 2):
            raise EngineError(f"ranges: expected one (min, max) pair per QI column, got shape {ranges.shape}")
    Xn = np.zeros((n, len(num)))
    for t, j in enumerate(num):
        x = Q[:, j]
        lo, hi = (x.min(), x.max()) if ranges is None else (ranges[j, 0], ranges[j, 1])
        if ranges is not None and (x.min() < lo or x.max() > hi):
            raise EngineError(f"column {names[j]!r}: values outside the given range [{lo}, {hi}]")
        if hi > lo:
            Xn[:, t] = (x - lo) / (hi - lo)
    C = np.zeros((n, len(cat)), np.int64)
    card = np.zeros(len(cat), np.int64)
    for t, j in enumerate(cat):
        x = Q[:, j]
        if (x != np.round(x)).any() or (x < 0).any():
            raise EngineError(f"column {names[j]!r}: categorical codes must be integers >= 0")
        C[:, t] = x.astype(np.int64)
        given = None if cardinalities is None else cardinalities[j]
        card[t] = int(given) if given else int(C[:, t].max()) + 1
        if C[:, t].max() >= card[t]:
            raise EngineError(f"column {names[j]!r}: code {int(C[:, t].max())} >= cardinality {card[t]}")
    off = np.zeros(len(cat) + 1, np.int64)
    off[1:] = np.cumsum(card)
    if weights is None:
        w_in = np.ones(d)
    else:
        w_in = np.asarray(weights, dtype=np.float64)
        if w_in.shape != (d,) or not np.isfinite(w_in).all() or (w_in < 0).any():
            raise EngineError("weights: one finite non-negative weight per QI column")
    w = np.concatenate([w_in[num], w_in[cat]]).astype(np.float64)
    return Q, sa, Xn, np.ascontiguousarray(C), card, off, w, names, num, cat


# ---------------------------------------------------------------- clustering


def som_clusters(Xn, C, off, w, rows, units, seed, epochs=10):
    """SOM clusters of ``rows``; returns the best matching unit of each."""
    nr = rows.size
    units = max(1, min(int(units), nr))
    if units == 1:
        return np.zeros(nr, np.int64)
    gr = int(math.isqrt(units))
    gc = -(-units // gr)
    U = gr * gc
    if U > nr:
        gc = max(1, nr // gr)
        U = gr * gc
    rng = np.random.default_rng(seed)
    init = np.sort(rng.choice(nr, size=U, replace=False)).astype(np.int64)
    Xr = np.ascontiguousarray(Xn[rows])
    Cr = np.ascontiguousarray(C[rows])
    sigma0 = max(gr, gc) / 2.0
    _, _, bmu = som_fit(Xr, Cr, off, w, gr, gc, init, epochs, max(sigma0, 0.5), 0.5)
    return bmu


def _auto_units(n_rows, m, cluster_size):
    return int(min(400, max(1, round(n_rows / cluster_size))))


# ---------------------------------------------------------------- metrics


def class_entropies(labels, sa, n_classes):
    """Per-class SA entropy (bits), computed from scratch."""
    m = int(sa.max()) + 1
    return entropy(np.bincount(labels * m + sa, minlength=n_classes * m).reshape(n_classes, m), axis=1)


def ncp_per_class(Xn, C, card, w, labels, n_classes):
    """Per-tuple NCP of every class (eq. 4 summed over weighted attributes)."""
    dn = Xn.shape[1]
    v = np.zeros(n_classes)
    if dn:
        mn, mx = group_minmax(Xn, labels, n_classes)
        v += ((mx - mn) * w[:dn]).sum(axis=1)
    if C.shape[1]:
        z = group_distinct(C, labels, n_classes, card)
        share = np.where(z > 1, z / card[None, :], 0.0)
        v += (share * w[dn:]).sum(axis=1)
    return v


def discernibility(sizes, k=None, n=None):
    """C_DM of Tsiafoulis et al. (maximum entropy) eq. 3 for the class sizes (k = 1 when not given)."""
    sizes = np.asarray(sizes, dtype=np.int64)
    n = int(sizes.sum()) if n is None else n
    kk = 1 if k is None else k
    big = sizes >= kk
    return int((sizes[big] ** 2).sum() + n * sizes[~big].sum())


def entropy_histogram(ent, sizes, width=0.25, m=None):
    """Classes and tuples per entropy bin of ``width`` bits. With ``m`` (the sensitive
    attribute's categories) the bins end at its largest entropy ``log2(m)`` (the last one
    narrower when it is no multiple of ``width``, and closed: a class at the maximum
    falls into it, no bin beyond the maximum); else at the next multiple of ``width``
    above the largest class entropy."""
    if m is not None and m > 1:
        top = math.log2(m)
        edges = np.round(np.append(np.arange(0.0, top - 1e-9, width), top), 10)
    else:
        top = max(width, math.ceil((float(ent.max()) + 1e-12) / width) * width) if ent.size else width
        edges = np.round(np.arange(0.0, top + width / 2, width), 10)
    idx = np.clip(np.floor(ent / width + 1e-9).astype(np.int64), 0, len(edges) - 2)
    classes = np.bincount(idx, minlength=len(edges) - 1)
    tuples = np.bincount(idx, weights=sizes, minlength=len(edges) - 1).astype(np.int64)
    return {"edges": edges.tolist(), "classes": classes.tolist(), "tuples": tuples.tolist()}


# ---------------------------------------------------------------- the method


def _form_classes(Xn, C, off, card, w, sa, m, distinct, csize, som_units, som_epochs, rng):
    """Figs. 1-3: for d = distinct SA values down to 2, the SOM's clusters of the rows
    not yet in a class, then classes of d rows with d SA values in each cluster.
    Returns ``(class_of, classes, rounds, SOM seconds, forming seconds)``; ``class_of``
    is -1 for the rows no round placed."""
    class_of = np.full(Xn.shape[0], -1, np.int64)
    next_class = 0
    rounds = []
    t_som = t_form = 0.0
    for d in range(distinct, 1, -1):
        rem = np.flatnonzero(class_of < 0)
        if rem.size < d or np.count_nonzero(np.bincount(sa[rem], minlength=m)) < d:
            continue
        units = som_units if som_units else _auto_units(rem.size, distinct, csize)
        t = time.perf_counter()
        bmu = som_clusters(Xn, C, off, w, rem, units, int(rng.integers(2**62)), som_epochs)
        t_som += time.perf_counter() - t
        t = time.perf_counter()
        order = rem[np.lexsort((rem, bmu))]
        counts = np.bincount(bmu)
        cstart = np.zeros(counts.size + 1, np.int64)
        cstart[1:] = np.cumsum(counts)
        urand = rng.random(rem.size)
        before = next_class
        next_class = K.form_round(Xn, C, off, card, w, sa, m, order, cstart, d, urand, class_of, next_class)
        t_form += time.perf_counter() - t
        rounds.append((d, int(np.count_nonzero(counts)), next_class - before))
    return class_of, next_class, rounds, t_som, t_form


def _incorporate(Xn, C, off, card, w, sa, m, class_of, nc, eps, k):
    """Fig. 4 and what follows: low-entropy classes dissolved and their rows (and the
    unplaced ones) incorporated, leftovers settled by merges, classes below k merged.
    Returns ``(labels, dissolved, incorporated, leftover joins, merges)``."""
    n = Xn.shape[0]
    keys = [Xn[:, j] for j in range(Xn.shape[1] - 1, -1, -1)] + [C[:, j] for j in range(C.shape[1] - 1, -1, -1)]
    srt = np.lexsort(keys).astype(np.int64)
    pos = np.empty(n, np.int64)
    pos[srt] = np.arange(n)
    state = K.init_state(Xn, C, off, sa, m, class_of, nc, eps, ENTROPY_TOL)
    _, dissolved, moved, leftover = K.incorporate(Xn, C, off, card, w, sa, class_of, state, eps, ENTROPY_TOL,
                                                  100, srt, pos)
    joins, merges = K.settle_leftovers(Xn, C, off, card, w, sa, class_of, state, leftover, eps, ENTROPY_TOL,
                                       srt, pos)
    if k is not None and k > 1:
        merges += K.enforce_min_size(Xn, C, off, card, w, state, int(k), eps, ENTROPY_TOL)
    roots = K.resolve_labels(class_of, state.parent)
    _, labels = np.unique(roots, return_inverse=True)
    return labels.astype(np.int64), dissolved, moved, joins, merges


def maxent_partition(Q, sa_codes, epsilon=None, k=None, seed=0, som_units=None, qi_kinds=None, *,
                     cardinalities=None, weights=None, som_epochs=10, cluster_size=None,
                     hist_width=0.25, qi_names=None, sa_name=None, ranges=None) -> MaxEntResult:
    """Maximum-entropy classes (Tsiafoulis et al. (maximum entropy); the reading is in the module docstring).

    Q: (n, d) QIs; numeric columns in any units, categorical columns as integer
    codes (``qi_kinds[j] == "categorical"``, cardinality from ``cardinalities[j]``
    or the largest code + 1). sa_codes: (n,) int codes 0..m-1 (negative = null).
    epsilon: target entropy in bits (default H(SA) of the table). k: optional
    minimum class size. seed: seeds the SOM initialisation and the random pick
    of Fig. 3. som_units: SOM units per round (default: remaining rows /
    cluster_size, at most 400; cluster_size defaults to 10 * m).
    weights: NCP (and SOM) weight per QI. qi_names / sa_name: for messages, and
    to reject an SA that is also a QI. ranges: (d, 2) per-QI (min, max) that
    scale the numeric QIs (the |A| of eq. 4; default: the min and max of ``Q``);
    the block-by-block driver passes the whole table's, so NCP is the table's.
    """
    t0 = time.perf_counter()
    Q, sa, Xn, C, card, off, w, names, num, cat = _prepare(Q, sa_codes, qi_kinds, cardinalities, weights, k,
                                                            qi_names, sa_name, ranges)
    n = Q.shape[0]
    san = sa_name or "sa"
    m = int(sa.max()) + 1
    distinct = int(np.count_nonzero(np.bincount(sa, minlength=m)))
    H, eps = table_epsilon(np.bincount(sa, minlength=m), epsilon, san)
    csize = float(cluster_size) if cluster_size else 10.0 * distinct
    if csize <= 0:
        raise EngineError(f"cluster_size: must be > 0, got {cluster_size!r}")
    rng = np.random.default_rng(seed)
    class_of, nc, rounds, t_som, t_form = _form_classes(Xn, C, off, card, w, sa, m, distinct, csize, som_units,
                                                        som_epochs, rng)
    # intermediate classes (before incorporation), for the Fig. 5 comparison
    placed = class_of >= 0
    if nc:
        isz = np.bincount(class_of[placed], minlength=nc)
        ient = class_entropies(class_of[placed], sa[placed], nc)
        i_min, i_mean = float(ient.min()), float(ient.mean())
        i_above = int(isz[ient >= eps - ENTROPY_TOL].sum())
    else:
        i_min = i_mean = float("nan")
        i_above = 0
    unplaced = int(n - placed.sum())
    t = time.perf_counter()
    sa_counts = np.bincount(sa, minlength=m)
    forced = eps >= H - ENTROPY_TOL and math.gcd(*[int(c) for c in sa_counts if c > 0]) == 1
    if forced:
        # Every class must have exactly the table's SA distribution (see the
        # module docstring); with coprime SA counts only the whole table does.
        labels = np.zeros(n, np.int64)
        dissolved = moved = joins = 0
        merges = nc if unplaced else max(nc - 1, 0)
    else:
        labels, dissolved, moved, joins, merges = _incorporate(Xn, C, off, card, w, sa, m, class_of, nc, eps, k)
    t_inc = time.perf_counter() - t
    G = int(labels.max()) + 1
    sizes = np.bincount(labels, minlength=G)
    ent = class_entropies(labels, sa, G)
    if ent.min() < eps - ENTROPY_TOL or (k is not None and sizes.min() < k) or (labels < 0).any():
        raise RuntimeError("maxent: internal error, a class misses the entropy or size target")
    per = ncp_per_class(Xn, C, card, w, labels, G)
    ncp = float((per * sizes).sum())
    return MaxEntResult(
        labels=labels, n_classes=G, class_sizes=sizes, class_entropy=ent, epsilon=eps, table_entropy=H,
        entropy_min=float(ent.min()), entropy_mean=float(ent.mean()),
        entropy_mean_weighted=float((ent * sizes).sum() / n),
        entropy_hist=entropy_histogram(ent, sizes, hist_width, m),
        ncp=ncp, ncp_normalized=ncp / (n * float(w.sum())) if w.sum() > 0 else 0.0,
        cdm=discernibility(sizes, k, n), k=k, merges=int(merges), forced_single_class=bool(forced), leftover_joins=int(joins),
        dissolved=int(dissolved), incorporated=int(moved), intermediate_classes=nc,
        intermediate_entropy_min=i_min, intermediate_entropy_mean=i_mean,
        intermediate_tuples_at_or_above_epsilon=i_above, unplaced_after_rounds=unplaced, rounds=rounds,
        timings={"som": t_som, "form": t_form, "incorporate": t_inc, "total": time.perf_counter() - t0},
    )


# ---------------------------------------------------------------- generalization

SET_SEPARATOR = "|"


def escape_category(value: str) -> str:
    """A category as it appears in a published set: ``\\`` -> ``\\\\`` and ``|`` -> ``\\|``,
    so that a set's ``|`` always separates values (a category may contain ``|``)."""
    return value.replace("\\", "\\\\").replace(SET_SEPARATOR, "\\" + SET_SEPARATOR)


def join_categories(values) -> str:
    """A published set: the values (sorted by the caller), escaped, joined by ``|``."""
    return SET_SEPARATOR.join(escape_category(v) for v in values)


def split_categories(text: str) -> list[str]:
    """The values of a published set (inverse of ``join_categories``)."""
    out, cur, i = [], [], 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            cur.append(text[i + 1])
            i += 2
            continue
        if ch == SET_SEPARATOR:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
        i += 1
    out.append("".join(cur))
    return out


def _escaped(expr: pl.Expr) -> pl.Expr:
    return (expr.str.replace_all("\\", "\\\\", literal=True)
            .str.replace_all(SET_SEPARATOR, "\\" + SET_SEPARATOR, literal=True))


def generalize(df: pl.DataFrame, labels, qi, kinds=None, numeric_output: str = "range",
               categorical_output: str = "set", separator: str = SET_SEPARATOR) -> pl.DataFrame:
    """Publish ``df`` with every QI generalized over its class (rows in input order).

    Numeric QI ``c``: ``numeric_output="range"`` replaces it by ``c_min`` and
    ``c_max`` (the column's dtype, at the column's position); ``"mean"`` by the
    class mean (Float64, same name). Categorical QI: ``categorical_output="set"``
    gives the class's distinct values sorted, escaped (``\\`` -> ``\\\\``, ``|`` ->
    ``\\|``: ``escape_category``, also when the class has a single value) and joined
    by ``separator``; ``split_categories`` reads a set back; ``"general"`` gives the value when the class has one, else
    ``"*"`` (the most general value of a flat hierarchy). Other columns pass
    through. ``kinds`` maps column -> "numeric"/"categorical" (default: by dtype).
    """
    if numeric_output not in ("range", "mean"):
        raise EngineError(f"numeric_output: 'range' or 'mean', got {numeric_output!r}")
    if categorical_output not in ("set", "general"):
        raise EngineError(f"categorical_output: 'set' or 'general', got {categorical_output!r}")
    labels = np.asarray(labels, dtype=np.int64)
    if labels.shape != (df.height,):
        raise EngineError(f"labels: expected {df.height} labels, got shape {labels.shape}")
    kinds = dict(kinds or {})
    G = int(labels.max()) + 1 if labels.size else 0
    lab = pl.Series("__class", labels)
    work = df.select(list(qi)).with_columns(lab)
    aggs = []
    for c in qi:
        kind = kinds.get(c, "numeric" if df[c].dtype.is_numeric() else "categorical")
        if kind == "numeric":
            if numeric_output == "range":
                aggs += [pl.col(c).min().alias(f"{c}_min"), pl.col(c).max().alias(f"{c}_max")]
            else:
                aggs.append(pl.col(c).cast(pl.Float64).mean().alias(c))
        else:
            u = pl.col(c).cast(pl.String).unique().sort()
            if categorical_output == "set":
                aggs.append(_escaped(u).str.join(separator).alias(c))
            else:
                aggs.append(pl.when(u.len() == 1).then(u.first()).otherwise(pl.lit("*")).alias(c))
    agg = work.group_by("__class").agg(aggs).sort("__class")
    if agg.height != G or (agg["__class"].to_numpy() != np.arange(G)).any():
        raise EngineError("labels: class ids must be 0..G-1 with no gaps")
    rows = agg.drop("__class")[labels]
    out = []
    for c in df.columns:
        if c in qi:
            out += [rows[name] for name in rows.columns if name in (c, f"{c}_min", f"{c}_max")]
        else:
            out.append(df[c])
    return pl.DataFrame(out)


def fuse_units(units, block_counts, eps, min_rows, tol):
    """Fuse consecutive units until each has >= 2 distinct SA values, SA entropy >=
    eps - tol (``methods.ranges`` passes epsilon plus the slack) and >= min_rows rows
    (``engine.methods.ranges``). Returns ``(units, fusions)``."""
    def ok(c):
        return np.count_nonzero(c) >= 2 and c.sum() >= min_rows and entropy(c) >= eps - tol

    out: list[tuple[list, np.ndarray]] = []
    cur, cc = [], np.zeros(block_counts.shape[1], np.int64)
    for u in units:
        cur = cur + list(u)
        cc = cc + block_counts[u].sum(axis=0)
        if ok(cc):
            out.append((cur, cc))
            cur, cc = [], np.zeros_like(cc)
    if cur:
        out.append((cur, cc))
    while len(out) > 1 and not ok(out[-1][1]):
        last = out.pop()
        prev = out.pop()
        out.append((prev[0] + last[0], prev[1] + last[1]))
    return [u for u, _ in out], len(units) - len(out)


def block_labels(X: np.ndarray, p) -> MaxEntResult:
    """maxent's block function (``Method.block``): one unit's spilled columns (numeric
    QIs, category codes, SA code; ``p`` a ``methods.ranges.BlockParams``) -> classes."""
    return maxent_partition(np.ascontiguousarray(X[:, :p.dn + p.dc]), X[:, p.dn + p.dc].astype(np.int64),
                            epsilon=p.eps, k=p.k, seed=p.seed, qi_kinds=p.kinds, cardinalities=p.cardinalities,
                            qi_names=p.names, sa_name=p.sa, ranges=p.ranges)
