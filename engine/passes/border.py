"""Refine pass (streaming): refinement inside blocks and across their borders.

Blocked MDAV loses quality where a block's border cuts through a natural group.
After every block is aggregated, this pass runs ``engine.passes.refine.refine_partition``
on windows of two neighbouring units (units are numbered in the partition's
depth-first order, so consecutive ones touch in space): first the pairs (0,1),
(2,3), ..., then (1,2), (3,4), .... Each window loads both units' rows from the
spill files, takes the groups whose rows all lie inside the window (a group
that already spans a third unit is left as it is, so its size is never seen
partially), refines them with exact SSE changes and size bounds k..2k-1, and
writes the new global ids back. Groups may move rows across the border.
Deterministic: windows run in a fixed order, one at a time.
"""

from __future__ import annotations

import numpy as np

from ..io.spill import SpillStore
from ..kernels.index.partition import take_labels
from .partition import standardized
from .refine import refine_partition


def refine_borders(store: SpillStore, units, profile, cols, labels, n_groups: int, cfg,
                   progress=None, ustrata: np.ndarray | None = None) -> tuple[dict, int]:
    """Refine in place; returns ``(stats, number of group ids now in use)``. With
    ``ustrata`` (each unit's stratum, units of a stratum consecutive) the windows are
    those of each stratum's units alone: no window, so no group, spans two strata."""
    sizes = np.bincount(np.asarray(labels), minlength=n_groups).astype(np.int64)
    stats = {"mode": cfg.refine, "sse_before": 0.0, "sse_after": 0.0, "rounds": 0, "moves": 0, "windows": 0}
    if ustrata is None:
        windows = _windows(0, len(units))
    else:
        edges = np.flatnonzero(np.diff(ustrata)) + 1
        windows = [w for a, b in zip([0, *edges], [*edges, len(units)]) for w in _windows(int(a), int(b))]
    done = 0
    for w in windows:
        blocks = [b for u in w for b in units[u]]
        ids, X = store.read_many(blocks)
        lab = np.empty(ids.shape[0], labels.dtype)  # as the stitch's: one take_labels to compile
        take_labels(ids, labels, lab)
        lab = lab.astype(np.int64)
        uniq, local, inside = np.unique(lab, return_inverse=True, return_counts=True)
        whole = inside == sizes[uniq]  # groups entirely inside this window
        keep = whole[local]
        if keep.sum() >= 2 * cfg.k:
            sel = np.flatnonzero(keep)
            gid = uniq[whole]
            remap = np.cumsum(whole) - 1
            sub = remap[local[sel]].astype(np.int64)
            Z = standardized(X[sel], profile, cols)
            res = refine_partition(Z, sub, cfg.k, mode=cfg.refine, max_rounds=cfg.refine_rounds,
                                   budget_seconds=None if cfg.refine_seconds is None
                                   else cfg.refine_seconds / len(windows), seed=cfg.effective_seed)
            new = res.labels
            # the refined window may use fewer groups (ids renumbered by first appearance), or
            # more (a window of groups re-cut into more groups of k..2k-1): new ids at the end
            extra = int(new.max()) + 1 - gid.shape[0]
            if extra > 0:
                gid = np.concatenate([gid, np.arange(n_groups, n_groups + extra, dtype=gid.dtype)])
                sizes = np.concatenate([sizes, np.zeros(extra, sizes.dtype)])
                n_groups += extra
            glob = gid[new]
            labels[ids[sel]] = glob.astype(labels.dtype)
            sizes[gid] = 0
            np.add.at(sizes, glob, 1)
            for key in ("sse_before", "sse_after"):
                stats[key] += getattr(res, key)
            stats["rounds"] = max(stats["rounds"], res.rounds)
            stats["moves"] += res.moves
            stats["windows"] += 1
        done += ids.shape[0]
        if progress is not None:
            progress.update(min(done, profile.rows))
    return stats, n_groups


def _windows(a: int, b: int) -> list[tuple]:
    """The windows of units ``a..b-1``: the pairs (a, a+1), (a+2, a+3), ..., then
    (a+1, a+2), ...; a lone last unit of the first sweep on its own."""
    n = b - a
    if n == 1:
        return [(a,)]
    windows = [(a + i, a + i + 1) for i in range(0, n - 1, 2)]
    windows += [(a + i, a + i + 1) for i in range(1, n - 1, 2)]
    if n % 2 == 1:  # the last unit has no partner in the first sweep
        windows.insert(n // 2, (b - 1,))
    return windows
