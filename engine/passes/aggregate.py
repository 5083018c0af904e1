"""Pass 3, aggregate: run one MDAV-family method on a block of standardized rows.

The method interface: a contiguous float64 block (rows, QIs) plus parameters in,
one label per row out (0..groups-1, in the order the groups were formed).
"""

from __future__ import annotations

import numpy as np

from ..kernels import mdav as _mdav
from ..progress import Progress

# Group-size bounds per method, for documentation, checks and property tests:
# (min, max) as multiples of k; V-MDAV's leftovers (< k rows) join their nearest
# group, so one group can reach 3k - 2.
SIZE_BOUNDS = {
    "mdav": lambda k: (k, 2 * k - 1),
    "mdav-single": lambda k: (k, 2 * k - 1),
    "ivmdav": lambda k: (k, 2 * k - 1),
    "vmdav": lambda k: (k, 3 * k - 2),
}


# MDAV and MDAV-single-group on a block of at most this many rows run by brute force
# (``engine.kernels.leaf.mdav_brute_slots``, the kernel of the streamed pass's leaves:
# the same labels as the kd-tree, tested in tests/test_leaf.py): as fast at this
# size, and its compiled code is mostly there after any streamed run, where the
# kd-tree's would take seconds to compile on a small table's first run.
BRUTE_MAX_ROWS = 4096


def aggregate_block(Z: np.ndarray, method_code: int, k: int, gamma: float,
                    progress: Progress | None = None, done_before: int = 0) -> np.ndarray:
    """Labels for the rows of ``Z`` (no input validation: the coordinator did it).

    When the block has fewer than 2k rows every method returns one group.
    """
    Z = _mdav.as_block(Z)  # the one array type the kernels are compiled for
    n = Z.shape[0]
    if method_code in (_mdav.MDAV, _mdav.MDAV_SINGLE) and n <= BRUTE_MAX_ROWS and k >= 1 and Z.shape[1] > 0:
        from ..kernels.leaf import _fits, mdav_brute_slots

        if _fits(Z):
            labels = mdav_brute_slots(Z, int(method_code), int(k))
            if progress is not None:
                progress.update(done_before + n)
            return labels
    T, A, total, state, labels = _mdav.start(Z, _mdav.LEAF_SIZE)
    # a few hundred groups per call: negligible overhead, frequent progress
    budget = 256
    while state[2] == 0:
        A = _mdav.run(T, A, total, state, labels, method_code, k, gamma, budget)
        if progress is not None:
            progress.update(done_before + n - int(state[0]))
    return labels


def aggregate_blocks(store, units, profile, cols: np.ndarray, method_code: int, k: int, gamma: float,
                     labels: np.ndarray, threads: int, progress: Progress | None = None, leaf: int = 0,
                     sums: tuple[np.ndarray, np.ndarray] | None = None, polish_rounds: int = 0,
                     polish_near: int = 12, polish_rotations: int = 0,
                     seams: tuple[np.ndarray, list] | None = None, backend=None) -> int:
    """Run the method on every unit of spilled blocks (``store.units``), ``threads`` at a time; write global
    group ids into ``labels`` (by row id) and return the number of groups.

    With ``leaf`` > 0 each unit is cut into leaves of at most ``leaf`` rows by
    median splits and the method runs on each leaf (``engine.kernels.leaf``).

    With ``sums = (centroid, cnt, sse)`` (arrays of at least as many rows as
    groups; ``sse`` of d values), the workers also compute each group's centroid
    and row count, as ``stitch_blocks`` would (sums of the values divided by
    ``profile.scale`` in the block's row order, then ``groups_from_sums``'
    arithmetic), without reading the blocks again, and the squared error of the
    published centroids per QI in units of the scale (``published_sse``), added to
    ``sse`` in block order: the write pass then needs no QI values.

    With ``polish_rounds`` > 0 every unit's partition is polished in the worker
    (``engine.kernels.polish``: moves and swaps among each group's ``polish_near``
    nearest groups, at most that many rounds). With ``seams = (Z, part)`` the
    workers' standardized rows are also copied into ``Z`` (by row id) and the unit
    of every group appended to the list ``part``, for the seam polish that follows.

    Blocks are stitched in block order whatever order they finish in, so group ids
    do not depend on the thread count. Workers call only serial (``nogil``) kernels.
    With ``backend`` (``engine.cluster.DaskBackend``) the units run as Dask tasks.
    """
    from ..kernels.partition import scatter_labels

    stop = np.zeros(1, np.int64)  # set on an error or a signal: running polish kernels return soon
    args = (store, profile, cols, method_code, k, gamma, leaf, sums is not None, polish_rounds, polish_near,
            polish_rotations, seams is not None)
    if backend is not None:  # Dask tasks (engine.cluster), results in unit order
        results = backend.map_ordered(aggregate_unit, units, *args)
    else:
        results = _threaded(aggregate_unit, units, threads, stop, *args)
    next_id = 0
    done = 0
    done_units = 0
    for ids, local, g, part, Zu in results:
        scatter_labels(ids, local, next_id, labels)
        if seams is not None:
            seams[0][ids] = Zu
            seams[1].extend([done_units] * g)
            del Zu
        done_units += 1
        if part is not None:
            sums[0][next_id: next_id + g] = part[0]
            sums[1][next_id: next_id + g] = part[1]
            sums[2][:] += part[2]
        next_id += g
        done += ids.shape[0]
        if progress is not None:
            progress.update(done)
    return next_id


def aggregate_unit(unit, store, profile, cols, method_code, k, gamma, leaf, want_sums, polish_rounds, polish_near,
                   polish_rotations, want_z, stop=None):
    """One unit of ``aggregate_blocks``: read its blocks, run the method (and the
    polish), and with ``want_sums`` each group's centroid, size and the squared error
    of the published centroids. Returns ``(row ids, local labels, groups, sums or
    None, standardized rows when want_z)``. A pure function of its arguments and the
    spilled blocks, so a Dask task that is run again gives the same result."""
    from ..kernels.groups import accumulate_scaled_sums, published_sse
    from ..kernels.leaf import aggregate_leaves
    from .partition import standardized

    if stop is None:
        stop = np.zeros(1, np.int64)
    ids, X = store.read_many(unit, contiguous=False)  # views into the records read
    Z = standardized(X, profile, cols)
    local = aggregate_leaves(Z, method_code, k, gamma, leaf) if leaf else aggregate_block(Z, method_code, k, gamma)
    if polish_rounds > 0:
        from ..kernels.polish import polish, rotations  # imported when used: start-up time

        polish(Z, local, k, polish_rounds, polish_near, rotations(cols.shape[0], polish_rotations), stop)
    if not want_z:
        del Z
        Z = None
    g = int(local.max()) + 1
    part = None
    if want_sums:
        c, cnt = np.zeros((g, X.shape[1])), np.zeros(g, np.int64)
        inv = 1.0 / profile.scale
        accumulate_scaled_sums(X, inv, local, c, cnt)  # exact: powers of two
        c /= cnt[:, None]  # as groups_from_sums
        c *= profile.scale
        err = np.zeros(X.shape[1])
        if (profile.scale == 1.0).all():
            published_sse(X, inv, local, c, err)
        else:  # huge values: differences in units of the scale (X - c itself may overflow)
            published_sse(X * inv, np.ones_like(inv), local, c * inv, err)
        part = (c, cnt, err)
    return ids, local, g, part, Z


def _threaded(fn, units, threads, stop, *args):
    """``fn(unit, *args, stop)`` for every unit, ``threads`` at a time, results in unit
    order (at most ``threads + 1`` pending)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=threads) as pool:
        pending = []
        b = 0
        try:
            while b < len(units) or pending:
                while b < len(units) and len(pending) < threads + 1:
                    pending.append(pool.submit(fn, units[b], *args, stop))
                    b += 1
                yield pending.pop(0).result()
        except BaseException:  # an error or Ctrl-C / SIGTERM: queued blocks never start, so the
            stop[0] = 1  # pool's shutdown waits only for the blocks already running (polish stops early)
            for f in pending:
                f.cancel()
            raise
