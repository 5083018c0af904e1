"""Slow, obviously correct references for the coded distance of nominal QIs (tests only).

A coded QI t of weight ``w_t`` is its one-hot vector scaled by ``sqrt(w_t / 2)``: the
codes are expanded to those columns (one per code that occurs) beside the dense columns
``Z[:, :ndense]``, and every distance and SSE is the plain Euclidean one of the expanded
rows, recomputed with NumPy (``reference_refine.sse``, ``reference_polish``).
"""

from __future__ import annotations

import numpy as np

from reference_polish import local_optimum_gap
from reference_refine import sse


def onehot(Z: np.ndarray, ndense: int, K: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The dense columns, then each coded QI as scaled one-hot columns of the codes present."""
    cols = [np.asarray(Z, dtype=np.float64)[:, :ndense]]
    for t in range(K.shape[1]):
        _, inv = np.unique(K[:, t], return_inverse=True)
        cols.append(np.sqrt(w[t] / 2.0) * np.eye(int(inv.max()) + 1)[inv])
    return np.hstack(cols)


def centroid_dist2(X: np.ndarray, rows: np.ndarray, x: np.ndarray) -> float:
    """Squared distance of the vector ``x`` to the mean of ``X[rows]``."""
    return float(((x - X[rows].mean(axis=0)) ** 2).sum())


def coded_objective(Z, ndense, K, w, labels) -> float:
    """The SSE ``polish_coded`` lowers, on the expanded rows."""
    return sse(onehot(Z, ndense, K, w), labels)


def coded_gap(Z, ndense, K, w, labels, k) -> float:
    """The most one move or swap between any two groups lowers the expanded SSE (0.0 at
    a local optimum)."""
    G = int(labels.max()) + 1
    return local_optimum_gap(onehot(Z, ndense, K, w), labels, k, max(G - 1, 1))


__all__ = ["centroid_dist2", "coded_gap", "coded_objective", "onehot", "sse"]
