"""Pass 3, aggregate: run one MDAV-family method on a block of standardized rows.

The method interface: a contiguous float64 block (rows, QIs) plus parameters in,
one label per row out (0..groups-1, in the order the groups were formed).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..io.spill import SpillStore
from ..kernels.mdav import indexed as _mdav
from ..kernels.mdav.pick import BRUTE_MAX_ROWS, small_block_labels
from ..kernels.groups import accumulate_scaled_sums, published_sse
from ..kernels.mdav.coded import aggregate_leaves_coded
from ..kernels.mdav.leaf import aggregate_leaves
from ..kernels.index.partition import scatter_labels
from ..parallel import ordered_map
from ..progress import Progress
from ..tuning import POLISH_MIN_GAIN
from .partition import standardized

# Group-size bounds per method, for documentation, checks and property tests:
# (min, max) as multiples of k; V-MDAV's leftovers (< k rows) join their nearest
# group, so one group can reach 3k - 2.
SIZE_BOUNDS = {
    "mdav": lambda k: (k, 2 * k - 1),
    "mdav-single": lambda k: (k, 2 * k - 1),
    "ivmdav": lambda k: (k, 2 * k - 1),
    "vmdav": lambda k: (k, 3 * k - 2),
}


def aggregate_block(Z: np.ndarray, method_code: int, k: int, gamma: float,
                    progress: Progress | None = None, done_before: int = 0) -> np.ndarray:
    """Labels for the rows of ``Z`` (no input validation: the coordinator did it).

    When the block has fewer than 2k rows every method returns one group.
    """
    Z = _mdav.as_block(Z)  # the one array type the kernels are compiled for
    n = Z.shape[0]
    if n <= BRUTE_MAX_ROWS:
        labels = small_block_labels(Z, method_code, k, gamma)  # None: data the index must take
        if labels is not None:
            if progress is not None:
                progress.update(done_before + n)
            return labels
    T, A, total, state, labels = _mdav.start(Z, _mdav.LEAF_SIZE)
    # a few hundred groups per call: negligible overhead, frequent progress
    budget = 256
    while state[_mdav.DONE] == 0:
        A = _mdav.run(T, A, total, state, labels, method_code, k, gamma, budget)
        if progress is not None:
            progress.update(done_before + n - int(state[_mdav.REMAINING]))
    return labels


def aggregate_units(store: SpillStore, units, work, labels: np.ndarray, threads: int,
                    progress: Progress | None = None, collect=None, *, stop: np.ndarray | None = None,
                    pool: bool = False, mapper=None) -> int:
    """The aggregate pass of every method: ``work(unit)`` (the method's block function
    on one unit of blocks, ``threads`` units at a time) returns ``(row ids, local
    labels, groups, part)``; the local labels become global group ids in ``labels``
    (by row id) in unit order, whatever order the units finish in, so ids do not
    depend on the thread count; ``collect(first_id, groups, part)`` receives what else the
    unit computed, in unit order. Returns the number of groups.

    ``labels`` may also be None (no map kept), or a row sink
    (``passes.published.RowRecords``: a streamed run's published values in row order, on
    disk) whose ``add(row ids, local labels, first_id, part[0])`` receives each unit after
    ``collect``, ``part[0]`` being the unit's measured groups (``aggregate_unit``'s sums).

    ``pool``: run even a single unit on a worker thread (a long kernel that reads
    ``stop``, set on an error or a signal, then returns soon). ``mapper(work, units)``
    (``engine.cluster.DaskExecutor.map_ordered``): runs the units elsewhere (``work``
    then a picklable function), results in unit order."""
    next_id = 0
    done = 0
    results = mapper(work, units) if mapper is not None else \
        ordered_map(work, units, threads, stop=stop, inline=False if pool else None)
    sink = None if labels is None or isinstance(labels, np.ndarray) else labels
    for ids, local, g, part in results:
        if sink is None and labels is not None:
            scatter_labels(ids, local, next_id, labels)
        if collect is not None:
            collect(next_id, g, part)
        if sink is not None:
            sink.add(ids, local, next_id, part[0])
        next_id += g
        done += ids.shape[0]
        if progress is not None:
            progress.update(done)
    return next_id


@dataclass(frozen=True)
class UnitPlan:
    """What the aggregate pass does to every unit of blocks.

    ``method``: ``(code, k, gamma)``; ``leaf``: leaves of at most that many rows
    (median splits; the method runs on each leaf: ``engine.kernels.mdav.leaf``), 0 for the
    whole unit as one block (``aggregate_block``; the in-memory run is one unit);
    ``polish``: ``(rounds, near, rotations[, descent, window])`` or None: the unit's partition polished in
    the worker (``engine.kernels.search.polish``: moves and swaps among each group's ``near``
    nearest groups, at most ``rounds`` rounds, ending at a round gaining less than
    ``POLISH_MIN_GAIN``; ``rotations``: a count, or the matrices once ``aggregate_blocks``
    made them); ``block(Z, leaf, progress)``: the method's block function (None: the
    kernels named by the code, as on Dask, where the plan travels to the workers);
    ``reduce``: what the workers keep of a unit's groups instead of their centroids
    and squared errors (``aggregate_blocks``' ``sums``), or None: an object
    (``engine.encode.mixed.Mixed``: one published value a group and QI, not the encoded
    columns' means) whose ``published(centroid, count)`` gives ``(table, count,
    per-column sums)``; when the store expands its records when read
    (``BlockStore.expand``), the workers read them as spilled instead, and its
    ``standardized(C, profile, cols)`` and ``published_sums(C, labels, groups,
    profile)`` give the same standardized rows and the same ``(table, count, sums)``
    from the spilled values."""

    method: tuple[int, int, float]
    leaf: int = 0
    polish: tuple | None = None
    block: Callable | None = None
    reduce: object | None = None
    regroup: object | None = None  # ``passes.seams.Router``: each group's block of the seam stage


def aggregate_blocks(store: SpillStore, units, profile, cols: np.ndarray, plan: UnitPlan, labels: np.ndarray,
                     threads: int, progress: Progress | None = None, *, sums: tuple | None = None,
                     seams: tuple[np.ndarray, list] | None = None, stage=None, mapper=None) -> int:
    """Run ``plan`` (an MDAV-family method) on every unit of blocks (``store.units``)
    through ``aggregate_units``; write global group ids into ``labels`` (by row id) and
    return the number of groups.

    With ``sums = (centroid, cnt, sse)`` (arrays of at least as many rows as
    groups; ``sse`` of d values), the workers also compute each group's centroid
    and row count, as ``stitch_blocks`` would (sums of the values divided by
    ``profile.scale`` in the block's row order, then ``groups_from_sums``'
    arithmetic), without reading the blocks again, and the squared error of the
    published centroids per QI in units of the scale (``published_sse``), added to
    ``sse`` in block order: the write pass then needs no QI values. A fourth element,
    a list, receives each unit's ``(first group, groups, squared errors)`` (strata). With
    ``plan.reduce`` the workers reduce the centroids and counts first; ``centroid``
    and ``sse`` then hold its table and its sums (their widths). ``sums`` may be the
    row sink given as ``labels`` instead (``passes.published.RowRecords``): the workers
    measure, ``aggregate_units`` hands it each unit.

    With ``seams = (Z, part)`` the workers' standardized rows are also copied into
    ``Z`` (by row id) and the unit of every group appended to the list ``part``, for
    the seam polish that follows. With ``stage`` (``passes.seams.SeamStage``; the plan's
    ``regroup`` its router) each unit's rows go to the seam stage's store, by group, in
    unit order. Workers call only serial (``nogil``) kernels.
    ``mapper``: see ``aggregate_units`` (the units as Dask tasks: ``plan.block`` None).
    """
    if plan.polish is not None:
        # start-up: kernels.search.polish (with kernels.search.refine) takes 25-60 ms to import; only polished runs need it
        from ..kernels.search.polish import rotations

        rounds, near, n_rot, *descent = plan.polish
        plan = dataclasses.replace(plan, polish=(rounds, near, rotations(cols.shape[0], n_rot), *descent))
    stop = np.zeros(1, np.int64)  # set on an error or a signal: running polish kernels return soon
    one = len(units) == 1 and not plan.leaf  # one exact block: progress from inside the kernel
    work = functools.partial(aggregate_unit, store=store, profile=profile, cols=cols, plan=plan,
                             want_sums=sums is not None, want_z=seams is not None,
                             stop=None if mapper is not None else stop,
                             progress=progress if one and mapper is None else None)
    done_units = [0]

    def collect(first, g, out):
        part, ids, Zu = out[:3]
        if stage is not None:
            stage.add(first, *out[3])
        if seams is not None:
            seams[0][ids] = Zu
            seams[1].extend([done_units[0]] * g)
        done_units[0] += 1
        if part is not None:
            store_sums(sums, first, g, part)

    return aggregate_units(store, units, work, labels, threads, progress, collect, stop=stop,
                           pool=plan.polish is not None or not one, mapper=mapper)


def store_sums(sums: tuple, first: int, g: int, part: tuple) -> None:
    """A unit's ``(centroid, count, squared errors)`` into ``aggregate_blocks``' ``sums``
    (its groups ``first .. first + g - 1``). A row sink in place of ``sums``
    (``passes.published.RowRecords``) takes them from ``aggregate_units`` instead."""
    if not isinstance(sums, tuple):
        return
    sums[0][first: first + g] = part[0]
    sums[1][first: first + g] = part[1]
    sums[2][:] += part[2]
    if len(sums) > 3:  # (a list: each unit's first group, groups and squared errors)
        sums[3].append((first, g, part[2]))


def aggregate_unit(unit, *, store: SpillStore, profile, cols, plan: UnitPlan, want_sums, want_z, stop=None,
                   progress=None):
    """One unit of ``aggregate_blocks``: read its blocks, run the plan's method (and
    its polish), and with ``want_sums`` each group's centroid, size and the squared
    error of the published centroids. Returns ``(row ids, local labels, groups, (sums
    or None, row ids and standardized rows when want_z))``. Module-level and a pure
    function of its arguments and the blocks, so a Dask task (``engine.cluster``) run
    again gives the same result."""
    method_code, k, gamma = plan.method
    # (``plan.reduce`` on a store of compact records: read as spilled, never expanded)
    compact = plan.reduce is not None and store.expand is not None
    if compact:
        ids, X = store.read_many(unit, expand=False)
        Z = plan.reduce.standardized(X, profile, cols)
    else:
        ids, X = store.read_many(unit, contiguous=False)  # views into the records read
        Z = standardized(X, profile, cols)
    # an embedded nominal QI grouped by its codes (``Mixed.coded``): the streamed MDAV leaves
    # of the fast path only. A polished unit, and the seam stage's first stage (the start
    # of its coded polish), keep the embedding: as a start for the polish it measured better
    # on a table of independent categories (docs/notes/mixed-types.md)
    coded = plan.reduce.coded(cols) if compact and plan.leaf and plan.polish is None and plan.regroup is None \
        and method_code in (_mdav.MDAV, _mdav.MDAV_SINGLE) else None
    if coded is not None:
        local = aggregate_leaves_coded(Z, coded.dense, coded.codes(X), coded.w, method_code, k, plan.leaf)
    elif plan.block is not None:
        local = plan.block(Z, plan.leaf, progress)
    elif plan.leaf:
        local = aggregate_leaves(Z, method_code, k, gamma, plan.leaf)
    else:
        local = aggregate_block(Z, method_code, k, gamma, progress)
    if plan.polish is not None:
        # start-up: kernels.search.polish (with kernels.search.refine) takes 25-60 ms to import; only polished runs need it
        from ..kernels.search.polish import polish as polish_kernel

        rounds, near, rot, *descent = plan.polish
        polish_kernel(Z, local, k, rounds, near, rot, np.zeros(1, np.int64) if stop is None else stop,
                      POLISH_MIN_GAIN, *descent)
    g = int(local.max()) + 1
    regrouped = None
    if plan.regroup is not None:  # (the seam stage: the unit's rows as read, with their groups' blocks)
        regrouped = plan.regroup.records(Z, X, local, g, ids, unit[0])
    if not want_sums:
        part = None
    elif compact:
        part = plan.reduce.published_sums(X, local, g, profile)
    else:
        part = unit_sums(X, local, g, profile, plan.reduce)
    if regrouped is not None:
        return ids, local, g, (part, ids if want_z else None, Z if want_z else None, regrouped)
    return ids, local, g, (part, ids if want_z else None, Z if want_z else None)


def unit_sums(X: np.ndarray, local: np.ndarray, g: int, profile, reduce=None):
    """``(centroid, count, squared error per QI)`` of a unit's ``g`` groups, as
    ``stitch_blocks`` would compute them (see ``aggregate_blocks``' ``sums``);
    with ``reduce`` (``UnitPlan.reduce``), ``reduce.published(centroid, count)`` instead."""
    c, cnt = np.zeros((g, X.shape[1])), np.zeros(g, np.int64)
    inv = 1.0 / profile.scale
    accumulate_scaled_sums(X, inv, local, c, cnt)  # exact: powers of two
    c /= cnt[:, None]  # as groups_from_sums
    c *= profile.scale
    if reduce is not None:
        return reduce.published(c, cnt)
    err = np.zeros(X.shape[1])
    if (profile.scale == 1.0).all():
        published_sse(X, inv, local, c, err)
    else:  # huge values: differences in units of the scale (X - c itself may overflow)
        published_sse(X * inv, np.ones_like(inv), local, c * inv, err)
    return c, cnt, err
