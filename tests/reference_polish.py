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


def two_hop(C: np.ndarray, old: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """The two-hop refresh of the near lists ``old`` (-1: empty) of the groups with
    ``mask`` set: the ``L`` nearest means (ties by id) among ``old[A]`` and the lists of
    its members, A itself left out; other lists kept."""
    G, L = old.shape
    out = old.copy()
    for A in range(G):
        if not mask[A]:
            continue
        cand = {int(B) for B in old[A] if B >= 0}
        cand |= {int(c) for B in old[A] if B >= 0 for c in old[B] if c >= 0}
        cand.discard(A)
        ranked = sorted((float(((C[c] - C[A]) ** 2).sum()), c) for c in cand)[:L]
        out[A] = [c for _, c in ranked] + [-1] * (L - len(ranked))
    return out
