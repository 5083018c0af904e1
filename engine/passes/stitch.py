"""Stitch: block-local labels -> global group ids, group sizes and centroids."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..frames import Profile, aligned_zeros
from ..io.spill import SpillStore
from ..kernels.groups import accumulate_group_sums
from ..kernels.moments import standardize_into
from ..kernels.index.partition import take_labels


@dataclass
class Groups:
    """The row -> group map and what each group publishes."""

    labels: np.ndarray  # (rows,) int32 or int64 group id per input row
    sizes: np.ndarray  # (groups,) int64
    centroid: np.ndarray  # (groups, d) mean of the original values (original units)
    # per QI, the squared error of the published centroids in units of the scale, when
    # the blocks' workers measured it (``aggregate_blocks``); else the write pass does
    sse: np.ndarray | None = None

    @property
    def count(self) -> int:
        return int(self.sizes.shape[0])


def standardize(X: np.ndarray, profile: Profile) -> np.ndarray:
    Z = np.empty_like(X, dtype=np.float64)
    standardize_into(np.ascontiguousarray(X, dtype=np.float64), profile.scale, profile.mean, profile.sd, Z)
    return Z


def stitch_blocks(store: SpillStore, units, profile: Profile, labels: np.ndarray, n_groups: int,
                  progress=None) -> Groups:
    """Sizes and centroids of the final groups, from the spilled blocks.

    ``labels`` holds global group ids (some may have emptied during refinement);
    ids are compacted in place to 0..G-1 keeping their order. Sums run block by
    block in row order, so they do not depend on chunking or threads.
    """
    d = len(profile.columns)
    sx = aligned_zeros(n_groups, d)
    cnt = np.zeros(n_groups, np.int64)
    done = 0
    for unit in units:
        ids, X = store.read_many(unit)
        lab = np.empty(ids.shape[0], labels.dtype)
        take_labels(ids, labels, lab)
        accumulate_group_sums(X / profile.scale, lab, sx, cnt)
        done += ids.shape[0]
        if progress is not None:
            progress.update(done)
    return groups_from_sums(labels, sx, cnt, profile)


def groups_from_sums(labels: np.ndarray, sx: np.ndarray, cnt: np.ndarray, profile: Profile) -> Groups:
    """Groups from per-group sums of ``X / scale`` and counts; empty ids are compacted
    away (in place in ``labels``), keeping their order. ``sx`` is consumed: the
    centroids are computed in place (fresh pages are slow to fault in)."""
    keep = cnt > 0
    if not keep.all():
        new_id = np.cumsum(keep) - 1
        labels[:] = new_id[labels].astype(labels.dtype)
        kept = aligned_zeros(int(keep.sum()), sx.shape[1])
        np.compress(keep, sx, axis=0, out=kept)
        sx, cnt = kept, cnt[keep]
    sx /= cnt[:, None]
    sx *= profile.scale
    return Groups(labels, cnt, sx)


def strata_loss(store: SpillStore, units, ustrata: np.ndarray, labels: np.ndarray, groups: Groups,
                profile: Profile, count: int, per_unit=None) -> tuple[np.ndarray, np.ndarray]:
    """``(SSE, SST)`` of each of ``count`` strata (every unit lies in one: ``ustrata``),
    summed over the QIs on the run's z-scores (a constant column counts 0 in both, as
    in the run's figure): SSE of the published centroids within the stratum, SST
    around the stratum's own mean (its SSE plus its groups' spread around that mean).

    The squared errors per unit are ``per_unit`` (``(first group, groups, errors in
    units of the scale)`` from the workers, in unit order), or measured here from the
    blocks (one more read)."""
    d = len(profile.columns)
    sd = profile.sd
    live = sd > 0.0
    var = np.where(live, sd * sd, 1.0)
    inv = 1.0 / profile.scale
    G = groups.sizes.shape[0]
    sse = np.zeros((count, d))
    gstr = np.full(G, -1, np.int64)
    if per_unit is not None:
        for (first, g, err), s in zip(per_unit, ustrata):
            sse[s] += err
            gstr[first: first + g] = s
    else:
        C = groups.centroid * inv
        for unit, s in zip(units, ustrata):
            ids, X = store.read_many(unit)
            lab = np.empty(ids.shape[0], labels.dtype)
            take_labels(ids, labels, lab)
            E = X * inv - C[lab]
            sse[s] += np.einsum("ij,ij->j", E, E)
            gstr[lab] = s
    sse = np.where(live, sse / var, 0.0)
    # between the groups: sum over groups of n (centroid - the stratum's mean)^2, z-scores
    n = groups.sizes.astype(np.float64)
    Cz = groups.centroid * inv / np.where(live, sd, 1.0)
    total = np.bincount(gstr, weights=n, minlength=count)
    ssb = np.zeros((count, d))
    for j in np.flatnonzero(live):
        mean = np.bincount(gstr, weights=n * Cz[:, j], minlength=count) / np.maximum(total, 1.0)
        ssb[:, j] = np.bincount(gstr, weights=n * (Cz[:, j] - mean[gstr]) ** 2, minlength=count)
    return sse.sum(axis=1), (sse + ssb).sum(axis=1)
