"""Slow, obviously correct references for the refinement kernels (tests only).

Every SSE here is recomputed from scratch with NumPy; deltas are differences of
two such recomputations, never the closed-form expressions the kernels use.
"""

from __future__ import annotations

import numpy as np


def sse(Z: np.ndarray, labels: np.ndarray) -> float:
    """Sum over groups of squared distances to the group mean."""
    total = 0.0
    for g in np.unique(labels):
        rows = Z[labels == g]
        total += float(((rows - rows.mean(axis=0)) ** 2).sum())
    return total


def moved(labels: np.ndarray, x: int, group: int) -> np.ndarray:
    out = labels.copy()
    out[x] = group
    return out


def swapped(labels: np.ndarray, x: int, y: int) -> np.ndarray:
    out = labels.copy()
    out[x], out[y] = labels[y], labels[x]
    return out


def best_op(Z, labels, A, candidates, k, hi):
    """Lowest SSE change over every move/swap between group A and a candidate
    group (sizes kept in [k, hi]); returns the delta (0.0 when none improves)."""
    base = sse(Z, labels)
    sizes = np.bincount(labels)
    best = 0.0
    inA = np.flatnonzero(labels == A)
    for B in candidates:
        if B < 0 or B == A or B >= sizes.size or sizes[B] == 0:
            continue
        inB = np.flatnonzero(labels == B)
        if sizes[A] > k and sizes[B] < hi:
            for x in inA:
                best = min(best, sse(Z, moved(labels, x, B)) - base)
        if sizes[B] > k and sizes[A] < hi:
            for y in inB:
                best = min(best, sse(Z, moved(labels, y, A)) - base)
        for x in inA:
            for y in inB:
                best = min(best, sse(Z, swapped(labels, x, y)) - base)
    return best


def best_any_op(Z, labels, k, hi):
    """Lowest SSE change over every move and swap between any two groups."""
    groups = np.unique(labels)
    best = 0.0
    for A in groups:
        best = min(best, best_op(Z, labels, A, [B for B in groups if B > A], k, hi))
    return best


def feasible_sizes(sizes, k, hi) -> bool:
    return bool((np.asarray(sizes) >= k).all() and (np.asarray(sizes) <= hi).all())
