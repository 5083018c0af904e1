"""Slow, obviously correct checks of the polish kernel (tests only).

``local_optimum_gap`` recomputes the SSE from scratch with NumPy for every move and
swap between a group and each of its ``L`` nearest groups (centroid distance, ties
by group id, computed here by brute force): the most the partition could still
gain by one such step (0.0 at a local optimum).
"""

from __future__ import annotations

import numpy as np

from reference_refine import best_op, sse


def nearest_groups(Z: np.ndarray, labels: np.ndarray, L: int) -> dict[int, list[int]]:
    groups = np.unique(labels)
    C = np.array([Z[labels == g].mean(axis=0) for g in groups])
    out = {}
    for i, g in enumerate(groups):
        dist = ((C - C[i]) ** 2).sum(axis=1)
        order = sorted((float(dist[j]), int(groups[j])) for j in range(len(groups)) if j != i)
        out[int(g)] = [h for _, h in order[:L]]
    return out


def local_optimum_gap(Z, labels, k, L) -> float:
    near = nearest_groups(Z, labels, L)
    return min(best_op(Z, labels, A, near[A], k, 2 * k - 1) for A in near)


__all__ = ["local_optimum_gap", "nearest_groups", "sse"]
