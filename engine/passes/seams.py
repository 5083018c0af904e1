"""The seam stage of a polished run above ``POLISH_MAX_ROWS`` rows: the seams between
units polished block by block, with bounded memory.

A polished streamed run cuts its units (consecutive blocks of the kd plan, about
``POLISH_UNIT_ROWS`` rows) into groups and polishes each unit in a worker. The
groups along a unit's faces cannot trade rows with the next unit's. Up to
``POLISH_MAX_ROWS`` rows the seam polish runs on every standardized row at once
(``CentroidFlow._polish_seams``). Above, that would hold the whole table, so the
seams are polished as blocks of their own:

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
        cnt = np.bincount(local, minlength=g).astype(np.float64)
        C = np.empty((g, Z.shape[1]))
        for j in range(Z.shape[1]):
            C[:, j] = np.bincount(local, weights=Z[:, j], minlength=g) / cnt
        Cr = C @ self.rotation.T
        order = np.argsort(local, kind="stable")
        first = ids[order[np.searchsorted(local[order], np.arange(g))]].astype(np.int64)
        if self.block_strata is not None:
            Cr = np.column_stack([Cr, np.full(g, float(self.block_strata[block]))])
        return self.plan.assign(np.ascontiguousarray(Cr), first)


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
    them: the row id, the spilled values, then the group's id), in the block its
    ``Router`` chose."""

    def __init__(self, router: Router, width: int, folder, spill_buffer: int, rows: int, expand=None):
        self.router = router
        self.width = width  # values a spilled record holds (the first store's, before expansion)
        self.expand = expand
        self.store = BlockStore(router.plan.n_blocks, width + 1, folder, min(spill_buffer, SEAM_SPILL), rows=rows)
        self.store.widen()  # (group ids above 2^24 are not float32)

    def add(self, first: int, ids: np.ndarray, X: np.ndarray, local: np.ndarray, gblock: np.ndarray) -> None:
        """A unit's rows (called in unit order): ``first`` is its first group's id."""
        block = gblock[local]
        order = np.argsort(block, kind="stable")
        sb = block[order]
        cuts = np.flatnonzero(np.diff(sb)) + 1
        rec = np.concatenate([np.asarray(X, np.float64), (first + local)[:, None].astype(np.float64)], axis=1)[order]
        for lo, hi in zip(np.concatenate([[0], cuts]), np.concatenate([cuts, [order.shape[0]]])):
            self.store.append(int(sb[lo]), ids[order[lo:hi]], rec[lo:hi])

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
    gl, loc = np.unique(Y[:, w].astype(np.int64), return_inverse=True)
    loc = loc.astype(np.int64).reshape(-1)
    compact = reduce is not None and stage.expand is not None
    Z = reduce.standardized(X, profile, cols) if compact else standardized(X, profile, cols)
    k = method[1]
    polish_kernel(Z, loc, k, *polish[:3], np.zeros(1, np.int64) if stop is None else stop, min_gain, *polish[3:])
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
