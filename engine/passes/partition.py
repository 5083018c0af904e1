"""Pass 2, partition: cut the rows into spatially coherent blocks and spill them.

The plan is a kd-tree of median splits, built from a sample kept by the profile
pass (every s-th row, so the sample does not depend on chunking). A node is cut
in two at the sample median of its standardized dimension of largest variance, until the
estimated rows of each leaf are at most ``block_size``; leaves, numbered in
depth-first order (neighbours in space get neighbouring numbers), are the
blocks. The split key is (value, row id), so ties split exactly where the plan
says. One streaming pass then routes every row to its leaf with a Numba kernel
and appends its QI values, with its global row id, to that block's spill file.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import numpy as np
import polars as pl
import pyarrow.parquet as pq

from ..io.source import CodedSource, Source, TableSource, numeric_values
from ..io.spill import BlockStore, MemoryBlocks
from ..kernels.moments import standardize_serial
from ..kernels.partition import (assign_leaves, counting_order, gather_records, gather_records_narrow, plan_tree,
                                route_rows, tie_keys)
from .profile import Moments, Profile
from ..progress import Progress


@dataclass
class Plan:
    dim: np.ndarray        # (nodes,) int64 split dimension (index into the grouping columns)
    thr_value: np.ndarray  # (nodes,) float64
    thr_row: np.ndarray    # (nodes,) uint64: the tie key (``kernels.partition.tie_key``) of the threshold row
    left: np.ndarray       # (nodes,) int64 child node ids
    right: np.ndarray
    leaf_of: np.ndarray    # (nodes,) int64 block number, -1 for inner nodes
    n_blocks: int

    def assign(self, Z: np.ndarray, row_ids: np.ndarray) -> np.ndarray:
        out = np.empty(Z.shape[0], np.int64)
        assign_leaves(Z, row_ids, self.dim, self.thr_value, self.thr_row, self.left, self.right,
                      self.leaf_of, out)
        return out

    def raw_bounds(self, profile: Profile, cols: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per node: the raw column it compares, and the raw values ``lo``, ``hi`` such
        that for every value ``x`` of that column, with ``z(x)`` its standardized value
        (``(x * (1 / scale) - mean) / sd``, 0 when sd = 0) and ``t`` the threshold:
        ``z(x) < t`` iff ``x < lo``, and ``z(x) > t`` iff ``x > hi``.

        ``z`` is non-decreasing in ``x`` (each rounded step is), so both sets are
        intervals; ``lo`` (the least x with z(x) >= t) and ``hi`` (the greatest x
        with z(x) <= t) are found by bisection over the doubles in order, for all
        nodes at once, with the same arithmetic as the standardizing kernels."""
        col = cols[self.dim]
        inv = 1.0 / profile.scale[col]
        mean, sd, t = profile.mean[col], profile.sd[col], self.thr_value
        flat = sd == 0.0
        sd1 = np.where(flat, 1.0, sd)

        def z(x):
            with np.errstate(over="ignore", invalid="ignore"):
                return np.where(flat, 0.0, (x * inv - mean) / sd1)

        def least(pred):  # least finite double x with pred(x) (pred monotone: False... True), else +inf
            lo_k = np.full(t.shape, _key(-np.finfo(np.float64).max))
            hi_k = np.full(t.shape, _key(np.finfo(np.float64).max))
            ok = pred(_double(hi_k))
            for _ in range(66):
                mid = (lo_k >> 1) + (hi_k >> 1) + (lo_k & hi_k & 1)  # no overflow
                up = pred(_double(mid))
                hi_k = np.where(up, mid, hi_k)
                lo_k = np.where(up, lo_k, mid)
            first = np.where(pred(_double(lo_k)), lo_k, hi_k)
            return np.where(ok, _double(first), np.inf)

        lo = least(lambda x: z(x) >= t)
        above = least(lambda x: z(x) > t)  # hi is the double just below it
        hi = np.where(np.isinf(above), np.inf, np.nextafter(above, -np.inf))
        return col.astype(np.int64), lo, hi

    def _routing(self, bounds):
        """The arrays of ``route_rows``: leaves become their own children; the depth."""
        col, lo, hi = bounds
        me = np.arange(self.dim.shape[0])
        leaf = self.leaf_of >= 0
        left = np.where(leaf, me, self.left)
        right = np.where(leaf, me, self.right)
        depth = np.zeros(me.shape[0], np.int64)
        for node in range(me.shape[0]):  # children are numbered after their parent
            if not leaf[node]:
                depth[left[node]] = depth[right[node]] = depth[node] + 1
        col = np.where(leaf, 0, col)
        return col, lo, hi, left, right, int(depth.max())

    def route(self, X: np.ndarray, first_id: int, bounds, out: np.ndarray) -> np.ndarray:
        """Leaves of raw rows ``X`` (all QIs, original units), column-major (d, n), with ids
        ``first_id, first_id + 1, ...`` (``bounds`` from ``raw_bounds``): the same as
        ``assign(standardized(X.T, profile, cols), ids)``."""
        out = out[:X.shape[1]]
        col, lo, hi, left, right, depth = self._routing(bounds) if len(bounds) == 3 else bounds
        route_rows(X, first_id, col, lo, hi, self.thr_row, left, right, self.leaf_of, depth, out)
        return out


def _key(x) -> np.ndarray:
    """Doubles to int64 keys in the same order (-0.0 and 0.0 both 0)."""
    b = np.asarray(x, np.float64).view(np.int64)
    return np.where(b < 0, -(b & np.int64(0x7FFFFFFFFFFFFFFF)), b)


def _double(k: np.ndarray) -> np.ndarray:
    k = np.asarray(k, np.int64)
    b = np.where(k < 0, (-k) | np.int64(-0x8000000000000000), k)
    return b.view(np.float64)


def sample_stride(rows: int, block_size: int) -> int:
    """Stride of the plan's sample: about 256 sample rows per block, at least 200,000 rows."""
    blocks = -(-rows // block_size)
    target = max(200_000, 256 * blocks)
    return max(1, rows // target)


def standardized(X: np.ndarray, profile: Profile, cols: np.ndarray) -> np.ndarray:
    out = np.empty((X.shape[0], cols.shape[0]))
    standardize_serial(X, profile.scale, profile.mean, profile.sd, cols, out)  # any layout
    return out


def plan_blocks(Zs: np.ndarray, ids: np.ndarray, rows: int, block_size: int) -> Plan:
    """Median-split plan from the standardized sample ``Zs`` (m, d) and its row ids:
    ``kernels.partition.plan_tree`` on the sample in tie-key order, with leaves of
    the sample rows that stand for at most ``block_size`` rows."""
    m = Zs.shape[0]
    per_sample_row = rows / max(m, 1)
    leaf = max(1, int(block_size / per_sample_row))  # size * per_sample_row <= block_size
    while (leaf + 1) * per_sample_row <= block_size:  # guard the rounding of the division
        leaf += 1
    while leaf > 1 and leaf * per_sample_row > block_size:
        leaf -= 1
    keys = tie_keys(np.asarray(ids, np.int64))
    by_key = np.argsort(keys, kind="stable")
    Zs = np.ascontiguousarray(np.asarray(Zs, dtype=np.float64)[by_key])
    keys = keys[by_key]
    dim, pivot, left, right, leaf_of, n_blocks = plan_tree(Zs, leaf)
    inner = pivot >= 0
    tv = np.where(inner, Zs[np.maximum(pivot, 0), dim], 0.0)
    tr = np.where(inner, keys[np.maximum(pivot, 0)], np.uint64(0))
    return Plan(dim, tv, tr.astype(np.uint64), left, right, leaf_of, int(n_blocks))


def partition_pass(source: Source, profile: Profile, cols: np.ndarray, plan: Plan, store: BlockStore,
                   chunk_rows: int, progress: bool = False, *, moments: Moments | None = None,
                   rows: int | None = None, dist=None) -> None:
    """Route every row to its block and spill it (QI values in original units + row id).

    ``profile`` standardizes the plan's thresholds (``Plan.raw_bounds``). With
    ``moments``, the pass also does pass 1's checks and sums on the way (the profile
    then comes from ``moments``; ``profile`` may be the sample's). With ``dist``
    (``distributions.Distributions``, started), each QI's histogram is counted too.
    A store that expands its records (``store.expand``) is fed compact records: the
    source is then a ``CodedSource``."""
    qi = list(profile.columns)
    order = np.empty(chunk_rows, np.int64)
    leaf = np.empty(chunk_rows, np.int64)
    start = np.empty(plan.n_blocks + 1, np.int64)
    bounds = plan._routing(plan.raw_bounds(profile, cols))
    # mixed-type QIs (``engine.encode.mixed``) into a store of compact records (``BlockStore.expand``):
    # one column a QI (numbers, category codes) is read and spilled; the encoded columns the
    # plan compares are expanded from it for the routing only
    compact = store.expand is not None
    if compact:  # (``moments``: ``engine.encode.mixed.MixedMoments``, on the compact columns)
        coded = cast(CodedSource, source)
        mixed = coded.mixed
        used = np.unique(np.append(bounds[0], 0))  # (leaves read column 0: ``route_rows``)
        routed = np.empty((len(qi), chunk_rows))
        chunks = ((o, moments.add(f, o) if moments is not None else frame_to_columns(f, f.columns))
                  for o, f in coded.iter_codes(chunk_rows))
    else:
        chunks = ((o, moments.add(f, o) if moments is not None else frame_to_columns(f, qi))
                  for o, f in source.iter_frames(qi, chunk_rows))
    with Progress("partition", rows if rows is not None else profile.rows, progress) as bar:
        for offset, X in chunks:  # X: the values spilled, column-major (d, h)
            h = X.shape[1]
            if dist is not None:
                dist.add(X, background=True)  # (X is not changed below)
            if order.shape[0] < h:
                order = np.empty(h, np.int64)
                leaf = np.empty(h, np.int64)
            if compact:
                if routed.shape[1] < h:
                    routed = np.empty((len(qi), h))
                leaf_h = plan.route(mixed.expand_columns(X, used, routed), offset, bounds, leaf)
            else:
                leaf_h = plan.route(X, offset, bounds, leaf)
            counting_order(leaf_h, plan.n_blocks, order[:h], start)
            # the chunk's records sorted by block once; each block gets a view
            rec = store.buffer(h)
            if rec.dtype == np.float32 and (offset + h > 2 ** 32 or gather_records_narrow(X, offset, order[:h], rec)):
                store.widen()  # a value that is not a float32 (or a row id of 2^32): wide from here on
                rec = store.buffer(h)
            if rec.dtype == np.float64:
                gather_records(X, offset, order[:h], rec)
            store.append_chunk(rec, start)
            bar.update(offset + h)
    store.flush()


def load_block(source: Source, columns, rows: int, chunk_rows: int, dist=None) -> MemoryBlocks:
    """The partition pass of a table that fits in one block: its ``columns`` read into
    memory, in row order (with ``dist``, each one's histogram is counted too)."""
    X = np.empty((rows, len(columns)))
    for offset, chunk in source.iter_arrays(list(columns), chunk_rows):
        X[offset: offset + chunk.shape[0]] = chunk
    if dist is not None:
        dist.add(X.T)
    return MemoryBlocks(X)


def frame_to_columns(frame, columns) -> np.ndarray:
    """Columns of ``frame`` as a column-major (d, rows) float64 array, nulls as NaN."""
    X = np.empty((len(columns), frame.height))
    for j, c in enumerate(columns):
        X[j] = numeric_values(frame.get_column(c))
    return X


SAMPLE_GROUP_STRIDE = 8  # the merged plan's sample reads every 8th row group


def sample_row_groups(source: TableSource, qi, rows: int, stride: int, to_columns=None):
    """The plan's sample without a pass over the data: rows of every
    ``SAMPLE_GROUP_STRIDE``-th row group of a Parquet input (about an eighth of
    it), every (stride / 8)-th row of those (row id a multiple of it), so about
    ``rows / stride`` rows, as the profile pass's every ``stride``-th row.

    Returns ``(X (m, d), row ids)``, or None when this does not pay or cannot be
    trusted: not Parquet, fewer than 4 x 8 row groups, or a missing or non-finite
    value in the sample (pass 1 then runs, and reports it). Depends on the file's
    row-group layout only, not on the chunk size or threads. ``to_columns(frame,
    first row id)``: a row group's columns ``qi`` as a (d, rows) float64 array
    (default ``frame_to_columns``; ``engine.encode.mixed``: its compact columns)."""
    if source.kind != "parquet":
        return None
    groups = []
    first = 0
    for f in source.paths:
        md = pq.read_metadata(f)
        for g in range(md.num_row_groups):
            n = md.row_group(g).num_rows
            groups.append((f, g, first, n))
            first += n
    if first != rows or len(groups) < 4 * SAMPLE_GROUP_STRIDE:
        return None
    step = max(1, stride // SAMPLE_GROUP_STRIDE)
    parts, ids = [], []
    files: dict = {}
    for f, g, first, n in groups[::SAMPLE_GROUP_STRIDE]:
        pf = files.setdefault(f, pq.ParquetFile(f))
        frame = pl.from_arrow(pf.read_row_group(g, columns=list(qi)))
        take = np.arange((-first) % step, n, step)
        cols = frame_to_columns(frame, qi) if to_columns is None else to_columns(frame, first)
        parts.append(cols[:, take].T)
        ids.append(take + first)
    X = np.ascontiguousarray(np.concatenate(parts))
    if X.shape[0] < 2 or not np.isfinite(X).all() or np.abs(X).max() > 2.0 ** 400:
        return None
    return X, np.concatenate(ids).astype(np.int64)


def sample_profile(qi, X: np.ndarray) -> Profile:
    """Moments of the sample alone: they only standardize the plan (which column a
    node cuts); the routing compares raw values, the blocks get the exact profile."""
    mean = X.mean(axis=0)
    sd = X.std(axis=0)
    sd[X.min(axis=0) == X.max(axis=0)] = 0.0
    return Profile(tuple(qi), X.shape[0], np.ones(X.shape[1]), mean, sd, X.min(axis=0), X.max(axis=0))
