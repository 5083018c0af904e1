"""The seam stage of a polished run above ``POLISH_MAX_ROWS`` rows or as many x 16 cells
(``tuning.seam_stage``): the seams between units polished block by block, with bounded memory.

A polished streamed run cuts its units (consecutive blocks of the kd plan, about
``POLISH_UNIT_ROWS`` rows) into groups. Up to ``POLISH_MAX_ROWS`` rows (and cells) it
polishes each unit in a worker, then the seams between units (the groups along a unit's
faces, which could not trade rows with the next unit's) on every standardized row at once
(``CentroidFlow._polish_seams``). Above, that would hold the whole table, so:

1. a second kd plan (``seam_plan``) is made from the first plan's sample in a rotated
   frame (``kernels.search.polish.rotations``), with blocks of ``POLISH_UNIT_ROWS``
   rows: its cuts cross the first plan's faces, so most groups that touch a face of
   their unit lie inside a block of the second plan;
2. as each unit is cut into groups (MDAV leaves, not polished: the second stage
   polishes every group), its groups are routed whole, by their rotated centroid, to
   the second plan's blocks (``Router``, in the worker), and the aggregate pass
   appends their rows, with their group, to a second spill store (``SeamStage.add``,
   in unit order);
3. ``seam_pass`` polishes each block of the second store on its own (``polish``, all
   its groups), then measures its groups as the fast path does (``unit_sums``), so
   the stitch reads nothing again.

Polishing once, in the second stage, costs half of polishing the units and then
their seams, for about the same loss (docs/benchmarks.md, "Quality at census scale").

Groups move whole and polish keeps sizes and the group count: the second stage is a
relabelling of the first's groups, ids given in the second plan's block order. Every
step is in a fixed order, so the result depends on neither the thread count nor the
chunk size nor the memory limit.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from ..io.spill import BlockStore
from ..kernels.groups import float32_exact, gather_records, rotated_centroids
from ..tuning import SEAM_SPILL
from .aggregate import aggregate_units, store_sums, unit_sums
from .partition import Plan, plan_blocks, standardized


@dataclass(frozen=True)
class Router:
    """Routes a unit's groups to the seam stage's blocks (picklable: it runs in the
    workers, Dask's included). ``rotation`` (d, d) turns the grouping columns' z-scores
    into the frame of ``plan``; with strata the plan cuts by stratum first, and
    ``block_strata`` gives each first-plan block's stratum."""

    plan: Plan
    rotation: np.ndarray
    block_strata: np.ndarray | None = None

    def blocks(self, Z: np.ndarray, local: np.ndarray, g: int, ids: np.ndarray, block: int) -> np.ndarray:
        """The block of each of a unit's ``g`` groups (``local``: the rows' groups, ``Z``
        their standardized grouping columns, ``ids`` their row ids, ``block`` one of the
        unit's first-plan blocks): the block of the group's rotated centroid, ties broken
        by the group's first row id."""
        # the centroids, rotated (C R^T), and each group's first row, in one pass of a kernel:
        # the bits of ``np.bincount`` sums and of NumPy's pairwise ``(C[:, None, :] * R).sum(axis=2)``
        # (tests/test_seams.py), without its g x d x d temporary (42 encoded columns, 20,000
        # groups: 282 MB at once)
        Cr, pos = rotated_centroids(np.ascontiguousarray(Z, dtype=np.float64), local.astype(np.int64, copy=False),
                                    np.int64(g), np.ascontiguousarray(self.rotation, dtype=np.float64))
        first = ids[pos].astype(np.int64)
        if self.block_strata is not None:
            Cr = np.column_stack([Cr, np.full(g, float(self.block_strata[block]))])
        # (on this thread: the parallel kernel's start costs more than a unit's 20,000 groups)
        return self.plan.assign(np.ascontiguousarray(Cr), first, serial=True)

    def records(self, Z: np.ndarray, X: np.ndarray, local: np.ndarray, g: int, ids: np.ndarray,
                block: int) -> tuple:
        """A unit's rows as the seam stage stores them (in the worker): ``(block, blocks,
        cuts, records)``, rows sorted by their group's block (stable); ``blocks[i]`` is
        the block of the rows ``cuts[i]:cuts[i + 1]``. A record is the spill store's (the
        row id's bits, the values: ``io.spill``), then the row's local group id and the
        unit's first block ``block``; float32 when every value is a float32 and the row
        ids fit 32 bits (as the partition's records), else float64."""
        gblock = self.blocks(Z, local, g, ids, block)
        block_of = gblock[local]
        # (a stable sort of 16-bit keys is a radix sort)
        order = np.argsort(block_of.astype(np.int16) if self.plan.n_blocks < 1 << 15 else block_of, kind="stable")
        sb = block_of[order]
        cuts = np.concatenate([[0], np.flatnonzero(np.diff(sb)) + 1, [order.shape[0]]])
        # (every value a float32: the same test on the rows in any order)
        narrow = (float32_exact(X) and block < 1 << 24 and g <= 1 << 24
                  and (ids.shape[0] == 0 or int(ids.max()) < 1 << 32))
        w = X.shape[1]
        rec = np.empty((order.shape[0], w + 3), np.float32 if narrow else np.float64)
        rec.view(np.uint32 if narrow else np.int64)[:, 0] = ids[order]
        gather_records(X, order, local.astype(np.int64, copy=False), np.float64(block), rec)
        return block, sb[cuts[:-1]], cuts, rec


def seam_plan(sample: np.ndarray, sample_ids: np.ndarray, profile, cols: np.ndarray, rows: int,
              unit_rows: int, strata=None) -> Router:
    """The seam stage's plan: median splits of the first plan's sample rows (``sample``,
    raw values of the grouping columns, standardized with the run's ``profile``) rotated
    (the first of ``rotations``' fixed rotations), blocks of at most ``unit_rows`` rows."""
    # start-up: the polish kernels are imported when a polished run needs them
    from ..kernels.search.polish import rotations

    R = rotations(cols.shape[0], 1)[-1]
    Zs = standardized(sample, profile, cols) @ R.T
    plan = plan_blocks(np.ascontiguousarray(Zs), sample_ids, rows, unit_rows, strata)
    return Router(plan, R, None if strata is None else strata.block_strata)


class SeamStage:
    """The seam stage's spill store: each first-stage group's rows (as the workers read
    them: the row id, the spilled values, then the group), in the block its
    ``Router`` chose."""

    def __init__(self, router: Router, width: int, folder, spill_buffer: int, rows: int, expand=None):
        self.router = router
        self.width = width  # values a spilled record holds (the first store's, before expansion)
        self.expand = expand
        # (records: the values, the local group id, the unit's first block; narrow below 2^32 rows)
        self.store = BlockStore(router.plan.n_blocks, width + 2, folder, min(spill_buffer, SEAM_SPILL), rows=rows)
        self.unit_block: list[int] = []  # each unit's first block (increasing) ...
        self.unit_first: list[int] = []  # ... and first group id

    def add(self, first: int, block: int, blocks: np.ndarray, cuts: np.ndarray, rec: np.ndarray) -> None:
        """A unit's rows (called in unit order), as ``Router.records`` gives them:
        ``first`` is the unit's first group id."""
        self.unit_block.append(block)
        self.unit_first.append(first)
        if rec.dtype == np.float32 and not self.store.narrow:  # (an earlier unit's values were not float32)
            wide = np.empty(rec.shape)
            wide.view(np.int64)[:, 0] = rec.view(np.uint32)[:, 0]
            wide[:, 1:] = rec[:, 1:]
            rec = wide
        for b, lo, hi in zip(blocks.tolist(), cuts[:-1].tolist(), cuts[1:].tolist()):
            self.store.append_records(b, rec[lo:hi])

    def group_ids(self, Y: np.ndarray) -> np.ndarray:
        """The group ids of records read back (``Y``: their values, local group id, unit)."""
        unit = np.searchsorted(np.asarray(self.unit_block), Y[:, self.width + 1].astype(np.int64))
        return np.asarray(self.unit_first, np.int64)[unit] + Y[:, self.width].astype(np.int64)

    def close(self) -> None:
        self.store.close()


def seam_unit(unit, *, stage: SeamStage, profile, cols, method: tuple, polish: tuple, want_sums: bool,
              reduce=None, min_gain: float = 0.0, stop=None):
    """One block of the seam stage: its groups polished together (``polish``:
    ``(rounds, near, rotations[, descent])``), then measured as ``aggregate_unit``
    measures a unit. Returns ``(row ids, local labels, groups, (sums
    or None, None, None))``, as ``aggregate_unit``."""
    # start-up: the polish kernels are imported when a polished run needs them
    from ..kernels.search.polish import polish as polish_kernel

    ids, Y = stage.store.read_many(unit)
    w = stage.width
    X = np.ascontiguousarray(Y[:, :w])
    gl, loc = np.unique(stage.group_ids(Y), return_inverse=True)
    loc = loc.astype(np.int64).reshape(-1)
    compact = reduce is not None and stage.expand is not None
    coded = reduce.coded(cols) if compact else None  # (embedded nominal QIs by their codes: ``Mixed.coded``)
    k = method[1]
    stop = np.zeros(1, np.int64) if stop is None else stop
    if coded is not None:
        # start-up: imported when a run has an embedded nominal QI
        from ..kernels.search.coded import polish_coded

        Z = reduce.standardized(X, profile, coded.order(cols))  # (the dense columns first)
        polish_coded(Z, coded.dense.shape[0], coded.codes(X), coded.w, loc, k, *polish[:3], stop, min_gain,
                     *polish[3:])
    else:
        Z = reduce.standardized(X, profile, cols) if compact else standardized(X, profile, cols)
        polish_kernel(Z, loc, k, *polish[:3], stop, min_gain, *polish[3:])
    g = int(gl.shape[0])
    if not want_sums:
        sums = None
    elif compact:
        sums = reduce.published_sums(X, loc, g, profile)
    else:
        sums = unit_sums(X, loc, g, profile, reduce)
    return ids, loc, g, (sums, None, None)


def seam_units(stage: SeamStage) -> list[list[int]]:
    """The seam stage's units: one block each (the plan's blocks hold about a unit's rows)."""
    return [[b] for b in range(stage.store.n_blocks) if int(stage.store.rows[b]) > 0]


def seam_pass(stage: SeamStage, profile, cols, method: tuple, polish: tuple, labels, threads: int, progress=None,
              sums: tuple | None = None, reduce=None, min_gain: float = 0.0) -> int:
    """Polish every block of the seam stage (``threads`` at a time, results in block
    order); the groups' new ids into ``labels``, their centroids, sizes and squared
    errors into ``sums`` (``aggregate_blocks``' ``sums``) when given. Returns the
    number of groups (the first stage's)."""
    stage.store.flush()
    stop = np.zeros(1, np.int64)
    work = functools.partial(seam_unit, stage=stage, profile=profile, cols=cols, method=method, polish=polish,
                             want_sums=sums is not None, reduce=reduce, min_gain=min_gain, stop=stop)

    def collect(first, g, out):
        if out[0] is not None:
            store_sums(sums, first, g, out[0])

    return aggregate_units(stage.store, seam_units(stage), work, labels, threads, progress, collect, stop=stop,
                           pool=True)
