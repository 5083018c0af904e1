"""Stitch: block-local labels -> global group ids, group sizes and centroids."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..io.spill import SpillStore
from ..kernels.groups import accumulate_group_sums
from ..kernels.moments import standardize_into
from ..kernels.partition import take_labels
from .profile import Profile


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


class Stitcher:
    """Collects blocks; each block's local groups get the next global ids."""

    def __init__(self, rows: int, profile: Profile):
        self.profile = profile
        self.labels = np.full(rows, -1, dtype=np.int64)
        self._sums_x: list[np.ndarray] = []
        self._sizes: list[np.ndarray] = []
        self.next_id = 0

    def add_block(self, row_ids: np.ndarray | None, X: np.ndarray, Z: np.ndarray, local: np.ndarray) -> None:
        """``row_ids`` None means the block is rows 0..n-1 in order."""
        g = int(local.max()) + 1 if local.size else 0
        d = X.shape[1]
        sx = np.zeros((g, d))
        cnt = np.zeros(g, np.int64)
        Xs = X / self.profile.scale  # exact: the scale is a power of two
        accumulate_group_sums(Xs, local, sx, cnt)
        glob = local + self.next_id
        if row_ids is None:
            self.labels[: local.shape[0]] = glob
        else:
            self.labels[row_ids] = glob
        self._sums_x.append(sx)
        self._sizes.append(cnt)
        self.next_id += g

    def finish(self) -> Groups:
        sizes = np.concatenate(self._sizes) if self._sizes else np.zeros(0, np.int64)
        d = len(self.profile.columns)
        sx = aligned_zeros(sizes.shape[0], d)
        if self._sums_x:
            np.concatenate(self._sums_x, out=sx)
        centroid = sx
        centroid /= sizes[:, None]
        centroid *= self.profile.scale
        return Groups(self.labels, sizes, centroid)


def aligned_zeros(rows: int, d: int) -> np.ndarray:
    """A zeroed (rows, d) float64 array whose data starts on a 64-byte boundary, so a
    row of at most 8 values lies in one cache line (the write pass's gather
    prefetches whole centroid rows)."""
    buf = np.zeros(rows * d + 8)
    off = (-buf.ctypes.data % 64) // 8
    return buf[off: off + rows * d].reshape(rows, d)


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
