"""MNQIA: anonymizing several numerical QIs at once by ranges (Ahmed et al. (MNQIA), issue 5).

:func:`mnqia_partition` groups the rows into groups of at least k (k .. 2k-1)
and reports each group's per-column [min, max] and the seed's LM-style
information loss; :func:`range_loss` computes that loss for any labels, and
:func:`mdav_range_loss` gives the honest baseline: MDAV groups generalized to
ranges.

How the seed is read
--------------------
1. **1-D groups (steps 2-4).** Every QI is segmented on its own by optimal 1-D
   k-means (weighted distinct values, exact dynamic programming as in
   Ckmeans.1d.dp; ties to the shorter first segment). **Number of groups:** the
   smallest ``g >= k`` whose segmentation explains at least ``explained`` (0.95)
   of the column's variance (capped at the number of distinct values). ``g >= k``
   because shielding needs k different 1-D groups per dimension to build one
   group; the 95 % rule gives exactly the seed's four Age and four Zip groups
   for Table 1 ({22,22} {26,27} {30,32,34} {37,39}; {12,14} {16,17,19} {22,24}
   {26,27} thousand). ``n_segments`` overrides the count (int or one per column),
   ``segments`` gives the 1-D group labels outright (e.g. the seed's Table 3).
2. **Multidimensional bucket (steps 5-7).** A bucket per occupied combination
   of 1-D groups; the capacity of a 1-D group is its number of remaining rows.
3. **MMDCF (steps 8-24).** Priority of a bucket = sum over dimensions of the
   capacity of its 1-D groups + the bucket's size (the seed's "Selection"). The
   garbled loop ("for (j=1; j<=1; j++)") is read from the worked example, whose
   "iterations" walk the rows of Table 3, i.e. the 1-D groups of one dimension
   (Zip, the last QI) in order: a group is built by visiting the 1-D groups of
   the *scan dimension* in ascending order and, in each, taking a record from
   the highest-priority non-empty bucket that is not shielded (ties: the lowest
   bucket in lexicographic order of its 1-D groups); after each pick every
   bucket that shares a 1-D group with the chosen record (in any dimension) is
   shielded, and capacities are recomputed (step 15). This reproduces the
   example's groups {T1, T7, .}, {T2, T4, T6}; the global-maximum reading does
   not (it would start group 2 with T3 or T5).
   *Within a bucket* the record that grows the group's ranges least (ranges
   scaled by each column's range) is taken, ties to the lowest row. The
   example breaks its two ties in opposite ways (T1 over T6 = lowest, T9 over
   T8 = "highest"); our rule takes T1 and T8, so Table 1 gives {T1, T7, T8},
   {T2, T4, T6}, {T3, T5, T9} instead of the seed's {T1, T7, T9}, {T2, T4, T6},
   {T3, T5, T8} (with the seed's own Table 3 buckets; the test pins this).
   *When shielding blocks* (fewer than k records can be chosen but at least k
   remain), the group is completed from the shielded buckets: fewest shared
   1-D groups first, then highest priority. This is what the example does for
   its third group ({T3, T5, T8}: T3 and T5 share A13). ``relaxed_picks``
   counts these records.
4. **Leftovers.** When fewer than k rows remain, each joins the group whose
   ranges (scaled by column range, summed) grow least; ties: lowest group.
5. **Information loss (eqs. 1-5).** For a numeric attribute the LM loss of a
   value generalized to [min, max] is ``(max - min) / (max_A - min_A)`` (eq. 3
   with leaves = values); an event's loss is the sum over QIs (eq. 4), a
   cluster's the sum over its records (eq. 2) and the table's the sum over
   clusters divided by |D| (eq. 1). So ``il`` is the mean over rows of the sum
   over QIs, in [0, d]; ``il_percent = 100 * il / d``. A constant column adds 0.
   Ahmed et al. (MNQIA) does not state the unit of its Table 6 figures.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from ..checks import is_int
from ..errors import EngineError
from ..kernels.groups import group_minmax
from ..kernels.mdav.indexed import MDAV
from ..kernels.mdav.pick import table_labels
from ..kernels.ranges import mnqia as K


@dataclass
class MnqiaResult:
    """labels: int64 group per row; n_groups; group_sizes; group_min / group_max
    (G, d) in original units; il / il_percent (module docstring, point 5);
    n_segments per column; segments (n, d) the 1-D group of every value;
    scan_dim; relaxed_picks (records taken from shielded buckets); leftovers
    (rows that joined a group at the end)."""

    labels: np.ndarray
    n_groups: int
    group_sizes: np.ndarray
    group_min: np.ndarray
    group_max: np.ndarray
    il: float
    il_percent: float
    n_segments: list
    segments: np.ndarray
    scan_dim: int
    relaxed_picks: int
    leftovers: int
    timings: dict = field(default_factory=dict)


def _check_X(X, name="X"):
    X = np.ascontiguousarray(np.asarray(X, dtype=np.float64))
    if X.ndim != 2 or X.shape[1] == 0:
        raise EngineError(f"{name}: expected a 2-D array with at least one column, got shape {X.shape}")
    bad = ~np.isfinite(X)
    if bad.any():
        i, j = np.argwhere(bad)[0]
        raise EngineError(f"{name}: null, NaN or infinite value in column {int(j)} at row {int(i)}")
    return X


def _check_k(k, n):
    if not is_int(k) or k < 2:
        raise EngineError(f"k: must be an integer >= 2, got {k!r}")
    if n < k:
        raise EngineError(f"fewer rows ({n}) than one group of k = {int(k)} needs")
    return int(k)


# ---------------------------------------------------------------- 1-D segmentation


def segment_1d(x, n_segments=None, k=2, explained=0.95):
    """Optimal 1-D k-means of the values ``x``. Returns ``(labels, g, sse_by_g)``:
    the segment of every value (0 = lowest values), the number of segments and the
    optimal within-segment SSE for 1..g segments. Without ``n_segments`` the count
    is the smallest ``g >= k`` explaining ``explained`` of the variance (at most
    the number of distinct values)."""
    x = np.asarray(x, dtype=np.float64)
    vals, inv, wts = np.unique(x, return_inverse=True, return_counts=True)
    nv = vals.size
    c = vals - vals.mean()  # centred for numerically stable prefix sums
    wf = wts.astype(np.float64)
    P0 = np.concatenate([[0.0], np.cumsum(wf)])
    P1 = np.concatenate([[0.0], np.cumsum(wf * c)])
    P2 = np.concatenate([[0.0], np.cumsum(wf * c * c)])
    sst = max(P2[-1] - P1[-1] ** 2 / P0[-1], 0.0)
    D = [np.array([max(P2[i + 1] - P1[i + 1] ** 2 / P0[i + 1], 0.0) for i in range(nv)])]
    B = [np.zeros(nv, np.int64)]
    if n_segments is not None:
        target = int(n_segments)
        if target < 1:
            raise EngineError(f"n_segments: must be >= 1, got {n_segments!r}")
        target = min(target, nv)
    else:
        target = None
    g = 1
    while True:
        done = (g == target) if target is not None else (
            g >= min(k, nv) and (sst <= 0 or D[-1][-1] <= (1.0 - explained) * sst))
        if done or g >= nv:
            break
        g += 1
        Dc = np.empty(nv)
        Bc = np.empty(nv, np.int64)
        K.ckmeans_layer(P0, P1, P2, D[-1], g, Dc, Bc)
        D.append(Dc)
        B.append(Bc)
    # backtrack the segment starts
    seg_of_val = np.empty(nv, np.int64)
    end = nv - 1
    for gg in range(g, 0, -1):
        start = int(B[gg - 1][end]) if gg > 1 else 0
        seg_of_val[start:end + 1] = gg - 1
        end = start - 1
    return seg_of_val[inv].astype(np.int64), g, [float(d[-1]) for d in D]


# ---------------------------------------------------------------- information loss


def range_loss(X, labels):
    """Ahmed et al. (MNQIA)'s LM loss of generalizing every row of ``X`` (original units) to
    its group's per-column [min, max]: ``(il, il_percent)`` (module docstring)."""
    X = _check_X(X)
    labels = np.asarray(labels, dtype=np.int64)
    n, d = X.shape
    if labels.shape != (n,) or (labels < 0).any():
        raise EngineError(f"labels: expected {n} non-negative group ids")
    G = int(labels.max()) + 1
    mn, mx = group_minmax(X, labels, G)
    R = X.max(axis=0) - X.min(axis=0)
    share = np.where(R > 0, (mx - mn) / np.where(R > 0, R, 1.0)[None, :], 0.0)
    sizes = np.bincount(labels, minlength=G)
    il = float((sizes[:, None] * share).sum() / n)
    return il, 100.0 * il / d


def mdav_range_loss(X, k):
    """The honest baseline: MDAV (on z-scores, population sd) groups generalized to
    ranges; returns ``(il, il_percent, labels)``."""
    X = _check_X(X)
    k = _check_k(k, X.shape[0])
    sd = X.std(axis=0)
    Z = np.ascontiguousarray((X - X.mean(axis=0)) / np.where(sd > 0, sd, 1.0))
    Z[:, sd == 0] = 0.0
    labels = table_labels(Z, MDAV, k, 0.0)  # brute force or the index: the same labels (tested)
    il, pct = range_loss(X, labels)
    return il, pct, labels


# ---------------------------------------------------------------- MNQIA


def mnqia_partition(X, k, *, n_segments=None, explained=0.95, segments=None, scan_dim=None) -> MnqiaResult:
    """MNQIA (Ahmed et al. (MNQIA)) on numeric QIs ``X`` (n, d) in original units, groups of
    at least ``k``. See the module docstring for the reading of the seed.

    n_segments: 1-D groups per column (int or list; default: the 95 % rule).
    explained: variance share for that rule. segments: (n, d) int 1-D group
    labels to use instead (ordered as the caller wishes). scan_dim: the
    dimension whose 1-D groups are walked in order (default: the last QI).
    """
    t0 = time.perf_counter()
    X = _check_X(X)
    n, d = X.shape
    k = _check_k(k, n)
    if not (0.0 < float(explained) <= 1.0):
        raise EngineError(f"explained: must be in (0, 1], got {explained!r}")
    sd = d - 1 if scan_dim is None else int(scan_dim)
    if not 0 <= sd < d:
        raise EngineError(f"scan_dim: must be in 0..{d - 1}, got {scan_dim!r}")
    if segments is not None:
        seg = np.asarray(segments)
        if seg.shape != (n, d) or seg.dtype.kind not in "iu" or (seg < 0).any():
            raise EngineError(f"segments: expected ({n}, {d}) non-negative integer labels")
        seg = seg.astype(np.int64)
        counts = []
        for j in range(d):
            _, seg[:, j] = np.unique(seg[:, j], return_inverse=True)
            counts.append(int(seg[:, j].max()) + 1)
    else:
        if n_segments is None or np.isscalar(n_segments):
            per = [n_segments] * d
        else:
            per = list(n_segments)
            if len(per) != d:
                raise EngineError(f"n_segments: {len(per)} values for {d} columns")
        seg = np.empty((n, d), np.int64)
        counts = []
        for j in range(d):
            seg[:, j], g, _ = segment_1d(X[:, j], per[j], k, float(explained))
            counts.append(int(g))
    t_seg = time.perf_counter() - t0
    # buckets in lexicographic order of their 1-D groups (dimension 0 first)
    bseg, bucket_of = np.unique(seg, axis=0, return_inverse=True)
    bucket_of = bucket_of.reshape(-1).astype(np.int64)
    bseg = np.ascontiguousarray(bseg.astype(np.int64))
    B = bseg.shape[0]
    bmem = np.argsort(bucket_of, kind="stable").astype(np.int64)
    bstart = np.zeros(B + 1, np.int64)
    bstart[1:] = np.cumsum(np.bincount(bucket_of, minlength=B))
    slice_b = np.argsort(bseg[:, sd], kind="stable").astype(np.int64)
    slice_start = np.zeros(counts[sd] + 1, np.int64)
    slice_start[1:] = np.cumsum(np.bincount(bseg[:, sd], minlength=counts[sd]))
    capoff = np.zeros(d + 1, np.int64)
    capoff[1:] = np.cumsum(counts)
    cap = np.concatenate([np.bincount(seg[:, j], minlength=counts[j]) for j in range(d)]).astype(np.int64)
    R = X.max(axis=0) - X.min(axis=0)
    Xn = np.ascontiguousarray(np.where(R > 0, (X - X.min(axis=0)) / np.where(R > 0, R, 1.0), 0.0))
    t = time.perf_counter()
    labels, G, relaxed, nleft = K.mmdcf(Xn, bseg, bstart, bmem, slice_start, slice_b, capoff, cap, k, sd)
    t_group = time.perf_counter() - t
    mn, mx = group_minmax(X, labels, G)
    sizes = np.bincount(labels, minlength=G)
    il, pct = range_loss(X, labels)
    return MnqiaResult(labels=labels, n_groups=int(G), group_sizes=sizes, group_min=mn, group_max=mx, il=il,
                       il_percent=pct, n_segments=counts, segments=seg, scan_dim=sd, relaxed_picks=int(relaxed),
                       leftovers=int(nleft),
                       timings={"segment": t_seg, "group": t_group, "total": time.perf_counter() - t0})


def block_labels(X: np.ndarray, p) -> MnqiaResult:
    """mnqia's block function (``Method.block``): one unit's numeric QIs -> groups of
    at least ``p.k`` rows."""
    return mnqia_partition(np.ascontiguousarray(X[:, :p.dn]), p.k)
