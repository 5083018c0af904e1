"""Pass 2, partition: cut the rows into spatially coherent blocks and spill them.

The plan is a kd-tree of median splits, built from a sample kept by the profile
pass (every s-th row, so the sample does not depend on chunking). A node is cut
in two at the sample median of its standardized dimension of largest variance, until the
estimated rows of each leaf are at most ``block_size``; leaves, numbered in
depth-first order (neighbours in space get neighbouring numbers), are the
blocks. The split key is (value, row id), so ties split exactly where the plan
says. One streaming pass then routes every row to its leaf with a Numba kernel
and appends its QI values, with its global row id, to that block's spill file.

Strata (``--strata``, sdcMicro's ``strata_variables``): a stratum is one
combination of the strata columns' values (a null is a value). ``strata_pass``
reads those columns once, numbers the strata in the order of their values and
keeps each row's stratum (``Strata``: in memory, or under a memory limit in a
row-ordered file read a chunk at a time, so that nothing held grows with the rows);
a stratum of fewer than k rows is refused there, naming it. The plan then cuts by
stratum first: its top nodes compare the stratum id (a routing column after the QIs),
below them each stratum has its own kd plan (``plan_blocks`` on its sample rows and
its exact row count; a stratum of at most ``block_size`` rows is one block), so every
block lies in one stratum and blocks are numbered stratum by stratum. A table of one
block in memory is held as one block per stratum (``MemoryStrata``). Units of blocks
(``strata_units``), the seam polish and the border refinement then stay within a
stratum: no group spans two strata (checked after the stitch: ``group_strata`` on a
label map; row-ordered published values: by the write pass, range by range,
``published.RowRecords.check_strata``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
from dataclasses import dataclass
from typing import Any, Callable, cast

import numpy as np
import polars as pl

from ..errors import EngineError
from ..frames import SAMPLE_GROUP_STRIDE, Moments, Profile, frame_to_columns
from ..io.source import CodedSource, Source
from ..io.spill import BlockStore, MemoryBlocks, units_of
from ..io.tempfiles import private_dir, private_opener
from ..kernels.moments import standardize_serial
from ..kernels.index.partition import (assign_leaves, assign_leaves_serial, counting_order, gather_records,
                                       gather_records_narrow, plan_tree, route_rows, tie_keys)
from ..progress import Progress


@dataclass
class Plan:
    dim: np.ndarray        # (nodes,) int64 split dimension (index into the grouping columns)
    thr_value: np.ndarray  # (nodes,) float64
    thr_row: np.ndarray    # (nodes,) uint64: the tie key (``kernels.index.partition.tie_key``) of the threshold row
    left: np.ndarray       # (nodes,) int64 child node ids
    right: np.ndarray
    leaf_of: np.ndarray    # (nodes,) int64 block number, -1 for inner nodes
    n_blocks: int
    # with strata: the ``Strata``, and each block's stratum; a node whose ``dim`` is -1
    # compares the stratum id (threshold ``s - 0.5``: strata below s go left)
    strata: Any = None
    block_strata: np.ndarray | None = None

    def assign(self, Z: np.ndarray, row_ids: np.ndarray, serial: bool = False) -> np.ndarray:
        """Leaves of standardized rows ``Z`` (with strata: the stratum id as its last column).
        ``serial``: on the calling thread (a worker's few rows: the parallel kernel's start
        costs more than their descent); the same leaves."""
        out = np.empty(Z.shape[0], np.int64)
        (assign_leaves_serial if serial else assign_leaves)(Z, row_ids, self.dim, self.thr_value, self.thr_row,
                                                             self.left, self.right, self.leaf_of, out)
        return out

    def raw_bounds(self, profile: Profile, cols: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per node: the raw column it compares, and the raw values ``lo``, ``hi`` such
        that for every value ``x`` of that column, with ``z(x)`` its standardized value
        (``(x * (1 / scale) - mean) / sd``, 0 when sd = 0) and ``t`` the threshold:
        ``z(x) < t`` iff ``x < lo``, and ``z(x) > t`` iff ``x > hi``.

        ``z`` is non-decreasing in ``x`` (each rounded step is), so both sets are
        intervals; ``lo`` (the least x with z(x) >= t) and ``hi`` (the greatest x
        with z(x) <= t) are found by bisection over the doubles in order, for all
        nodes at once, with the same arithmetic as the standardizing kernels.

        With strata, a node that compares the stratum id compares the routing column
        after the QIs (``len(profile.columns)``) with ``lo = hi`` = its threshold."""
        if self.strata is not None:
            by_stratum = self.dim < 0
            col, lo, hi = dataclasses.replace(self, dim=np.where(by_stratum, 0, self.dim), strata=None) \
                .raw_bounds(profile, cols)
            col = np.where(by_stratum, len(profile.columns), col)
            lo = np.where(by_stratum, self.thr_value, lo)
            hi = np.where(by_stratum, self.thr_value, hi)
            return col, lo, hi
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


SAMPLE_ROWS = 1 << 18  # the most rows the plan's sample aims at (its memory: ``sample_bytes``)


def sample_target(rows: int, block_size: int) -> int:
    """Rows the plan's sample aims at: about 256 a block, at least 200,000, at most
    ``SAMPLE_ROWS`` (above 1,024 blocks fewer a block: the plan's memory stays bounded,
    with 32 a block at 100M rows of 20,000-row blocks)."""
    blocks = -(-rows // block_size)
    return min(SAMPLE_ROWS, max(200_000, 256 * blocks))


def sample_stride(rows: int, block_size: int) -> int:
    """Stride of the plan's sample (``sample_target``)."""
    return max(1, rows // sample_target(rows, block_size))


def sample_bytes(rows: int, block_size: int, d: int) -> int:
    """What making the plan holds at most: the sample, its standardized copy and that
    copy sorted, the tie keys and their order. A row-group sample
    (``sample_row_groups``) takes 1 row in ``8 * (stride // 8)``, up to twice the target
    for a stride below 16, and a row more a row group."""
    stride = sample_stride(rows, block_size)
    most = -(-rows // min(stride, SAMPLE_GROUP_STRIDE * max(1, stride // SAMPLE_GROUP_STRIDE))) + (1 << 13)
    return min(rows, most) * (24 * d + 40)


def standardized(X: np.ndarray, profile: Profile, cols: np.ndarray) -> np.ndarray:
    out = np.empty((X.shape[0], cols.shape[0]))
    standardize_serial(X, profile.scale, profile.mean, profile.sd, cols, out)  # any layout
    return out


def plan_blocks(Zs: np.ndarray, ids: np.ndarray, rows: int, block_size: int, strata: "Strata | None" = None) -> Plan:
    """Median-split plan from the standardized sample ``Zs`` (m, d) and its row ids:
    ``kernels.index.partition.plan_tree`` on the sample in tie-key order, with leaves of
    the sample rows that stand for at most ``block_size`` rows. With ``strata``: cut
    by stratum first, then each stratum by its own plan (``stratified_plan``)."""
    if strata is not None:
        return stratified_plan(Zs, ids, strata, block_size)
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


def stratified_plan(Zs: np.ndarray, ids: np.ndarray, strata: "Strata", block_size: int) -> Plan:
    """The plan of a stratified run: a balanced tree of cuts on the stratum id (strata
    ``[lo, mid)`` left, ``[mid, hi)`` right), whose leaf for stratum s is the root of
    s's own plan (``plan_blocks`` on its sample rows and its row count), or one block
    when s has at most ``block_size`` rows (or too few sample rows to cut). Nodes are
    numbered before their children, blocks stratum by stratum (``block_strata``)."""
    ids = np.asarray(ids, np.int64)
    of_sample = strata.at(ids).astype(np.int64) if ids.shape[0] else np.zeros(0, np.int64)
    by = np.argsort(of_sample, kind="stable")
    start = np.searchsorted(of_sample[by], np.arange(strata.count + 1))
    dim: list = []
    tv: list = []
    tr: list = []
    left: list = []
    right: list = []
    leaf_of: list = []
    block_strata: list = []

    def new_node() -> int:
        for a, v in ((dim, 0), (tv, 0.0), (tr, 0), (left, -1), (right, -1), (leaf_of, -1)):
            a.append(v)
        return len(dim) - 1

    def graft(node: int, s: int) -> None:
        """Stratum s's own plan, its root at ``node``."""
        sel = by[start[s]: start[s + 1]]
        n_s = int(strata.rows[s])
        sub = plan_blocks(Zs[sel], ids[sel], n_s, block_size) if n_s > block_size and sel.shape[0] >= 2 else None
        first = len(block_strata)
        if sub is None or sub.n_blocks == 1:
            leaf_of[node] = first
            block_strata.append(s)
            return
        # sub's node 0 is ``node`` (the last one made), its node j > 0 the j-th made after it
        where = node + np.arange(sub.dim.shape[0])
        for j in range(sub.dim.shape[0]):
            target = node if j == 0 else new_node()
            dim[target] = int(sub.dim[j])
            tv[target] = float(sub.thr_value[j])
            tr[target] = int(sub.thr_row[j])
            if sub.leaf_of[j] >= 0:
                leaf_of[target] = first + int(sub.leaf_of[j])
            else:
                left[target] = int(where[sub.left[j]])
                right[target] = int(where[sub.right[j]])
        block_strata.extend([s] * sub.n_blocks)

    def build(lo: int, hi: int) -> int:
        node = new_node()
        if hi - lo == 1:
            graft(node, lo)
            return node
        mid = (lo + hi) // 2
        dim[node] = -1
        tv[node] = mid - 0.5
        left[node] = build(lo, mid)
        right[node] = build(mid, hi)
        return node

    build(0, strata.count)
    return Plan(np.array(dim, np.int64), np.array(tv, np.float64), np.array(tr, np.uint64),
                np.array(left, np.int64), np.array(right, np.int64), np.array(leaf_of, np.int64),
                len(block_strata), strata, np.array(block_strata, np.int64))


def partition_pass(source: Source, profile: Profile, cols: np.ndarray, plan: Plan, store: BlockStore,
                   chunk_rows: int, progress: bool = False, *, moments: Moments | None = None,
                   rows: int | None = None, dist=None) -> None:
    """Route every row to its block and spill it (QI values in original units + row id).

    ``profile`` standardizes the plan's thresholds (``Plan.raw_bounds``). With
    ``moments``, the pass also does pass 1's checks and sums on the way (the profile
    then comes from ``moments``; ``profile`` may be the sample's). With ``dist``
    (``distributions.Distributions``, started), each QI's histogram is counted too.
    A store that expands its records (``store.expand``) is fed compact records: the
    source is then a ``CodedSource``. A plan with strata routes each chunk with its
    rows' stratum ids as one more column (``Strata.reader``: read a chunk at a time)."""
    qi = list(profile.columns)
    order = np.empty(chunk_rows, np.int64)
    leaf = np.empty(chunk_rows, np.int64)
    start = np.empty(plan.n_blocks + 1, np.int64)
    bounds = plan._routing(plan.raw_bounds(profile, cols))
    strata = plan.strata
    strata_of = strata.reader(source, chunk_rows) if strata is not None else None
    # mixed-type QIs (``engine.encode.mixed``) into a store of compact records (``BlockStore.expand``):
    # one column a QI (numbers, category codes) is read and spilled; the encoded columns the
    # plan compares are expanded from it for the routing only
    compact = store.expand is not None
    if compact:  # (``moments``: ``engine.encode.mixed.MixedMoments``, on the compact columns)
        coded = cast(CodedSource, source)
        mixed = coded.mixed
        used = np.unique(np.append(bounds[0], 0))  # (leaves read column 0: ``route_rows``)
        used = used[used < len(qi)]  # (not the strata's routing column)
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
                R = mixed.expand_columns(X, used, routed)
            else:
                R = X
            if strata_of is not None:
                R = _with_strata(R, strata_of(offset, offset + h), len(qi))
            leaf_h = plan.route(R, offset, bounds, leaf)
            counting_order(leaf_h, plan.n_blocks, order[:h], start)
            # the chunk's records sorted by block once (a ``RunStore``: in its buffer's room);
            # each block gets a view
            rec = store.buffer(h)
            if rec.dtype == np.float32 and (offset + h > 2 ** 32 or gather_records_narrow(X, offset, order[:h], rec)):
                store.widen()  # a value that is not a float32 (or a row id of 2^32): wide from here on
                rec = store.buffer(h)
            if rec.dtype == np.float64:
                gather_records(X, offset, order[:h], rec)
            store.append_chunk(rec, start)
            bar.update(offset + h)
    store.flush()


def _with_strata(R: np.ndarray, ids: np.ndarray, d: int) -> np.ndarray:
    """The routing columns of a chunk (``R``: at least ``d`` rows, column-major) and its
    rows' stratum ids as column ``d``: (d + 1, h) float64, C-contiguous."""
    h = R.shape[1]
    out = np.empty((d + 1, h))
    out[:d] = R[:d]
    if ids.shape[0] != h:
        raise EngineError("internal check failed: the strata of a chunk's rows are missing")
    out[d] = ids
    return out


def load_block(source: Source, columns, rows: int, chunk_rows: int, dist=None,
               strata: "Strata | None" = None) -> MemoryBlocks:
    """The partition pass of a table that fits in one block: its ``columns`` read into
    memory, in row order (with ``dist``, each one's histogram is counted too). With
    ``strata``: one block per stratum (``MemoryStrata``)."""
    X = np.empty((rows, len(columns)))
    for offset, chunk in source.iter_arrays(list(columns), chunk_rows):
        X[offset: offset + chunk.shape[0]] = chunk
    if dist is not None:
        dist.add(X.T)
    return MemoryBlocks(X) if strata is None else MemoryStrata(X, strata)


class MemoryStrata(MemoryBlocks):
    """The one block of a small table held in memory, read as one block per stratum
    (block s: stratum s's rows in row order): the in-memory run of a stratified table
    runs the method on each stratum whole, as it runs on the whole table without."""

    def __init__(self, X: np.ndarray, strata: "Strata"):
        super().__init__(X)
        of_row = strata.whole()
        self.order = np.argsort(of_row, kind="stable")
        self.rows = np.bincount(of_row, minlength=strata.count).astype(np.int64)
        self.start = np.concatenate([[0], np.cumsum(self.rows)])
        self.n_blocks = strata.count

    def read(self, block: int = 0, contiguous: bool = True, expand: bool = True) -> tuple[np.ndarray, np.ndarray]:
        ids = self.order[self.start[block]: self.start[block + 1]]
        return ids, self.X[ids]

    def read_many(self, blocks, contiguous: bool = True, expand: bool = True) -> tuple[np.ndarray, np.ndarray]:
        if len(blocks) == 1:
            return self.read(blocks[0])
        ids = np.concatenate([self.order[self.start[b]: self.start[b + 1]] for b in blocks])
        return ids, self.X[ids]

    def units(self, min_rows: int) -> list[list[int]]:
        return [[b] for b in range(self.n_blocks) if self.rows[b]]


def sample_profile(qi, X: np.ndarray) -> Profile:
    """Moments of the sample alone: they only standardize the plan (which column a
    node cuts); the routing compares raw values, the blocks get the exact profile."""
    mean = X.mean(axis=0)
    sd = X.std(axis=0)
    sd[X.min(axis=0) == X.max(axis=0)] = 0.0
    return Profile(tuple(qi), X.shape[0], np.ones(X.shape[1]), mean, sd, X.min(axis=0), X.max(axis=0))


# ------------------------------------------------------------------ strata

_ID = "\x00stratum"  # the strata table's id column (no input column is named so: a NUL)


@dataclass
class Strata:
    """The strata of a run (``--strata``): ``values`` one row per stratum, sorted by the
    strata columns' values (nulls first), its row number the stratum id; ``rows`` each
    stratum's row count; each input row's stratum (uint8, uint16 or uint32) in memory
    (``of_row``) or, under a memory limit, row-ordered on disk (``path``: ``strata_pass``
    writes it; nothing of it held between reads, so the run's memory does not grow with
    the rows); ``block_strata`` each block's stratum, once planned.

    Read through ``slice`` (consecutive rows: a chunk of the partition pass, a range of
    the write pass), ``at`` (the plan's sample rows, in one read of the file) and
    ``whole`` (a table polished in memory, which holds every row anyway); both
    forms give the same ids, so the release is the same.

    Pickled (the plan a Dask task receives) without ``of_row`` or the file: a worker
    maps its own rows' values (``ids_for``)."""

    columns: tuple
    values: pl.DataFrame
    rows: np.ndarray
    of_row: np.ndarray | None
    block_strata: np.ndarray | None = None
    path: str | None = None  # the row-ordered file of the rows' strata (``of_row`` None)
    dtype: str = "uint8"     # its ids' type

    @property
    def count(self) -> int:
        return int(self.rows.shape[0])

    @property
    def on_disk(self) -> bool:
        return self.of_row is None and self.path is not None

    def label(self, s: int) -> str:
        """``region='North', sex=null``: stratum ``s`` as messages name it."""
        row = self.values.row(int(s))
        return ", ".join(f"{c}={_shown(v)}" for c, v in zip(self.columns, row))

    def value_dicts(self) -> list[dict]:
        """Each stratum's values as ``{column: value}`` (JSON-safe: dates etc. as text)."""
        return [{c: _plain_value(v) for c, v in zip(self.columns, row)} for row in self.values.iter_rows()]

    def ids(self, frame: pl.DataFrame) -> np.ndarray:
        """The stratum id of each row of ``frame`` (which holds the strata columns)."""
        table = self.values.with_columns(pl.Series(_ID, np.arange(self.count, dtype=np.int64)))
        got = frame.select(list(self.columns)).join(table, on=list(self.columns), how="left", nulls_equal=True,
                                                    maintain_order="left").get_column(_ID)
        if got.null_count():
            raise EngineError("internal check failed: a row's strata values are not among the strata")
        return got.to_numpy()

    def slice(self, a: int, b: int) -> np.ndarray:
        """The strata of rows ``a .. b - 1`` (one read of the file when on disk)."""
        if self.of_row is not None:
            return self.of_row[a:b]
        if self.path is None:
            raise EngineError("internal check failed: the rows' strata are not held here")
        dt = np.dtype(self.dtype)
        b = max(a, min(b, int(self.rows.sum())))
        return np.frombuffer(_pread_all(self._fd(), (b - a) * dt.itemsize, a * dt.itemsize), dt)

    def at(self, ids) -> np.ndarray:
        """The strata of the rows ``ids`` (any order); on disk, the file read once in
        pieces of ``STRATA_PIECE`` rows, each only over the span its ids cover."""
        ids = np.asarray(ids, np.int64)
        if self.of_row is not None:
            return self.of_row[ids]
        order = np.argsort(ids, kind="stable")
        ranked = ids[order]
        out = np.empty(ids.shape[0], np.dtype(self.dtype))
        i = 0
        while i < ranked.shape[0]:
            first = int(ranked[i])
            j = int(np.searchsorted(ranked, first + STRATA_PIECE))
            last = int(ranked[j - 1])
            out[order[i:j]] = self.slice(first, last + 1)[ranked[i:j] - first]
            i = j
        return out

    def whole(self) -> np.ndarray:
        """Every row's stratum, in memory (a table polished in memory: 1 byte a row beside
        its 8 d of standardized values)."""
        return self.of_row if self.of_row is not None else self.slice(0, int(self.rows.sum())).copy()

    def ids_for(self, source: Source, chunk_rows: int) -> tuple[int, np.ndarray]:
        """``(first row, ids)``: the stratum of every row ``source`` reads (its row
        numbers from the first): ``whole()``, or (a Dask task's copy of the plan)
        the source's own rows' strata columns mapped by ``ids``."""
        if self.of_row is not None or self.path is not None:
            return 0, self.whole()
        first, parts = None, []
        for offset, frame in source.base.iter_frames(list(self.columns), chunk_rows):
            first = offset if first is None else first
            parts.append(self.ids(frame))
        return (first or 0), (np.concatenate(parts) if parts else np.zeros(0, np.int64))

    def reader(self, source: Source, chunk_rows: int) -> Callable[[int, int], np.ndarray]:
        """``strata_of(a, b)``: the strata of rows ``a .. b - 1`` of those ``source``
        reads, for the partition pass chunk by chunk: ``slice`` (a file on disk read a
        chunk at a time), or a Dask task's own rows (``ids_for``)."""
        if self.of_row is not None or self.path is not None:
            return self.slice
        first, mine = self.ids_for(source, chunk_rows)
        return lambda a, b: mine[a - first: b - first]

    def _fd(self) -> int:
        fd = self.__dict__.get("_handle")
        if fd is None:
            fd = self.__dict__["_handle"] = os.open(cast(str, self.path), os.O_RDONLY)
        return fd

    def close(self) -> None:
        """The file of the rows' strata removed (on disk; safe to call twice)."""
        fd = self.__dict__.pop("_handle", None)
        if fd is not None:
            os.close(fd)
        if self.path is not None:
            shutil.rmtree(os.path.dirname(self.path), ignore_errors=True)
            self.path = None

    def __getstate__(self):
        state = dict(self.__dict__)
        state["of_row"] = None
        state["path"] = None
        state.pop("_handle", None)
        return state


STRATA_PIECE = 1 << 22  # rows of the strata file read or renumbered at a time


def _pread_all(fd: int, n: int, offset: int) -> bytes:
    parts = []
    while n > 0:
        got = os.pread(fd, min(n, 1 << 30), offset)
        if not got:
            raise EngineError("internal check failed: the file of the rows' strata is shorter than the table")
        parts.append(got)
        n -= len(got)
        offset += len(got)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _shown(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, str):
        return repr(v)
    if isinstance(v, (bool, int, float)):
        return repr(v)
    return repr(str(v))


def _plain_value(v):
    return v if v is None or isinstance(v, (str, bool, int)) or (isinstance(v, float) and np.isfinite(v)) else str(v)


def strata_columns(cfg) -> tuple:
    """The strata columns of ``cfg.strata`` (a list of names, or one text ``"a,b"``),
    checked: names, each once, none a quasi-identifier or the sensitive attribute.
    ``()`` without strata."""
    value = cfg.strata
    if value is None:
        return ()
    names = [c.strip() for c in value.split(",")] if isinstance(value, str) else value
    try:
        names = list(names)
    except TypeError:
        raise EngineError(f"strata (--strata) must be column names, got {value!r}") from None
    if not names:
        raise EngineError("strata (--strata) is empty: name at least one column")
    for c in names:
        if not isinstance(c, str) or not c:
            raise EngineError(f"strata (--strata) has an invalid column name: {c!r}")
    for c in names:
        if names.count(c) > 1:
            raise EngineError(f"strata (--strata) names column {c!r} twice")
        if c in cfg.qi:
            raise EngineError(f"strata (--strata): column {c!r} is also a quasi-identifier; a strata column "
                              f"passes through unchanged")
        if c == cfg.sa:
            raise EngineError(f"strata (--strata): column {c!r} is also the sensitive attribute")
        if c == cfg.group_column:
            raise EngineError(f"strata (--strata): column {c!r} is also the group column")
    return tuple(names)


def strata_pass(source: Source, columns, rows: int, chunk_rows: int, least: int, progress: bool = False,
                need: str = "k", folder=None, on_disk: bool = False) -> Strata:
    """The strata of every row: one read of the strata ``columns`` (of ``source.base``,
    the input's own columns as the write pass passes them through). Each chunk's
    combinations of values are numbered as they first appear, then the strata are
    sorted by their values and renumbered (so the ids do not depend on the chunking).
    A stratum of fewer than ``least`` rows is refused, naming it (``need``: what
    ``least`` is, for the message). ``on_disk``: each row's stratum written row-ordered
    to a file in a private folder of ``folder`` (``Strata.path``; the caller ``close``s
    it), else kept in memory (``Strata.of_row``)."""
    cols = list(columns)
    base = source.base
    for c in cols:
        if c not in base.columns:
            raise EngineError(f"strata (--strata): column {c!r} not found in {source.label}")
    known = None
    n = 0
    of_row = _RowStrata(rows, folder if on_disk else False)
    done = 0
    with contextlib.ExitStack() as failed, Progress("strata", rows, progress) as bar:
        failed.callback(of_row.close)
        for offset, frame in base.iter_frames(cols, chunk_rows):
            f = frame.select(cols)
            try:
                u = f.unique(maintain_order=True)
                if known is not None:
                    u = u.join(known, on=cols, how="anti", nulls_equal=True, maintain_order="left")
                if u.height:
                    u = u.with_columns(pl.Series(_ID, np.arange(n, n + u.height, dtype=np.int64)))
                    known = u if known is None else pl.concat([known, u])
                    n += u.height
                    if n > np.iinfo(of_row.dtype).max + 1:
                        of_row.widen(np.dtype(np.uint16 if n <= 1 << 16 else np.uint32))
                ids = f.join(known, on=cols, how="left", nulls_equal=True,
                             maintain_order="left").get_column(_ID).to_numpy()
            except EngineError:
                raise
            except Exception as exc:  # a column polars cannot compare (a list, a struct)
                kinds = ", ".join(f"{c} ({f.schema[c]})" for c in cols)
                raise EngineError(f"strata (--strata): cannot group rows by {kinds}: "
                                  f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
            if offset + f.height > rows:
                raise EngineError(f"internal check failed: {source.label} has more rows than counted")
            of_row.put(offset, ids)
            done += f.height
            bar.update(done)
        if done != rows or known is None:
            raise EngineError(f"internal check failed: the strata pass read {done} of {rows} rows")
        ordered = known.sort(cols, nulls_last=False, maintain_order=True)
        perm = np.empty(n, of_row.dtype)
        perm[ordered.get_column(_ID).to_numpy()] = np.arange(n, dtype=of_row.dtype)
        counts = of_row.renumber(perm)
        strata = Strata(tuple(cols), ordered.drop(_ID), counts, of_row.array, path=of_row.path,
                        dtype=of_row.dtype.name)
        failed.pop_all()
    small = np.flatnonzero(strata.rows < least)
    if small.shape[0]:
        s = int(small[0])
        more = f" (and {small.shape[0] - 1} more strata below it)" if small.shape[0] > 1 else ""
        strata.close()
        raise EngineError(f"stratum {strata.label(s)} has {int(strata.rows[s])} rows, fewer than {need} = {least}"
                          f"{more}; merge or drop small strata, or use fewer strata columns")
    return strata


class _RowStrata:
    """Each row's stratum as ``strata_pass`` numbers them: an array, or (``folder`` not
    False) a row-ordered file in a private folder of ``folder`` written a chunk at a time
    (a wider type: the file so far rewritten, a piece at a time)."""

    def __init__(self, rows: int, folder):
        self.rows = rows
        self.dtype = np.dtype(np.uint8)
        self.array = np.zeros(rows, self.dtype) if folder is False else None
        self.path = None if folder is False else os.path.join(private_dir(folder), "strata.bin")
        self.fh = None if self.path is None else open(self.path, "w+b", opener=private_opener)
        self.end = 0  # rows written (the chunks come in row order)

    def put(self, offset: int, ids: np.ndarray) -> None:
        self.end = max(self.end, offset + ids.shape[0])
        if self.array is not None:
            self.array[offset: offset + ids.shape[0]] = ids
        else:
            os.pwrite(self.fh.fileno(), np.ascontiguousarray(ids, self.dtype).tobytes(), offset * self.dtype.itemsize)

    def _read(self, a: int, b: int) -> np.ndarray:
        size = self.dtype.itemsize
        return np.frombuffer(_pread_all(self.fh.fileno(), (b - a) * size, a * size), self.dtype)

    def widen(self, dtype: np.dtype) -> None:
        if self.array is not None:
            self.array = self.array.astype(dtype)
        else:
            wide = open(self.path + ".wide", "w+b", opener=private_opener)
            for a in range(0, self.end, STRATA_PIECE):  # (the rows written so far)
                b = min(self.end, a + STRATA_PIECE)
                os.pwrite(wide.fileno(), self._read(a, b).astype(dtype).tobytes(), a * dtype.itemsize)
            self.fh.close()
            os.replace(self.path + ".wide", self.path)
            self.fh = wide
        self.dtype = dtype

    def renumber(self, perm: np.ndarray) -> np.ndarray:
        """Each row's id ``i`` replaced by ``perm[i]``, in place, a piece at a time; the
        rows of each new id."""
        counts = np.zeros(perm.shape[0], np.int64)
        for a in range(0, self.rows, STRATA_PIECE):
            b = min(self.rows, a + STRATA_PIECE)
            piece = perm[self.array[a:b] if self.array is not None else self._read(a, b)]
            if self.array is not None:
                self.array[a:b] = piece
            else:
                os.pwrite(self.fh.fileno(), piece.tobytes(), a * self.dtype.itemsize)
            counts += np.bincount(piece, minlength=perm.shape[0])
        if self.fh is not None:
            self.fh.close()
        return counts

    def close(self) -> None:  # (a refusal or a failure: the file removed)
        if self.fh is not None:
            self.fh.close()
        if self.path is not None:
            shutil.rmtree(os.path.dirname(self.path), ignore_errors=True)


def strata_units(rows: np.ndarray, block_strata: np.ndarray, least: Callable[[int], int]) -> list[list[int]]:
    """Units of consecutive blocks within each stratum (``io.spill.units_of`` on each
    stratum's blocks, at least ``least(stratum rows)`` rows a unit, a stratum of fewer
    one unit of its own); empty blocks are dropped."""
    out: list[list[int]] = []
    edges = np.flatnonzero(np.diff(block_strata)) + 1
    for a, b in zip(np.concatenate([[0], edges]), np.concatenate([edges, [block_strata.shape[0]]])):
        part = rows[a:b]
        if part.sum() == 0:
            continue
        out += [[int(a) + x for x in u] for u in units_of(part, least(int(part.sum())))]
    return out


def unit_strata(units, block_strata: np.ndarray) -> np.ndarray:
    """The stratum of each unit (of blocks of one stratum)."""
    return np.array([int(block_strata[u[0]]) for u in units], np.int64)


def group_strata(labels: np.ndarray, n_groups: int, strata: Strata) -> np.ndarray:
    """Each group's stratum; raises when a group holds rows of two strata (the
    independent check of a stratified run, before anything is written)."""
    gs = np.full(n_groups, -1, np.int64)
    step = STRATA_PIECE
    rows = labels.shape[0]
    for a in range(0, rows, step):
        lab = np.asarray(labels[a: a + step]).astype(np.int64)
        gs[lab] = strata.slice(a, a + step)
    for a in range(0, rows, step):
        lab = np.asarray(labels[a: a + step]).astype(np.int64)
        if (gs[lab] != strata.slice(a, a + step)).any():
            raise EngineError("internal check failed: a group holds rows of two strata")
    return gs
