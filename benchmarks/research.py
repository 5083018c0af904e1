"""Research helpers for tests and benchmarks: in-memory AMA (Sun, Wang, Li & Zhang,
"An Approximate Microaggregation Approach for Microdata Protection", Algorithm 2) and the
exhaustive-subset baseline of Oommen & Fayyoumi's Table 4. Not part of the package."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from engine.errors import EngineError
from engine.kernels.mdav import indexed as mdav


def standardize(X: np.ndarray) -> np.ndarray:
    """Z-scores with the population standard deviation; a constant column becomes 0."""
    X = np.asarray(X, dtype=np.float64)
    mean = X.mean(axis=0) if X.shape[0] else np.zeros(X.shape[1])
    sd = X.std(axis=0) if X.shape[0] else np.zeros(X.shape[1])
    Z = np.zeros_like(X)
    nz = sd > 0
    Z[:, nz] = (X[:, nz] - mean[nz]) / sd[nz]
    return np.ascontiguousarray(Z)


def information_loss(Z: np.ndarray, labels: np.ndarray) -> float:
    """IL = 100 * SSE / SST of the partition ``labels`` in the space of ``Z``'s columns."""
    Z = np.asarray(Z, dtype=np.float64)
    labels = np.asarray(labels, dtype=np.int64)
    if Z.shape[0] == 0:
        return 0.0
    size = np.bincount(labels).astype(np.float64)
    sse = 0.0
    sst = 0.0
    for j in range(Z.shape[1]):
        z = Z[:, j]
        cen = np.bincount(labels, weights=z, minlength=size.shape[0])
        cen = np.divide(cen, size, out=np.zeros_like(cen), where=size > 0)
        sse += float(((z - cen[labels]) ** 2).sum())
        sst += float(((z - z.mean()) ** 2).sum())
    return 100.0 * sse / sst if sst > 0 else 0.0


def ama_labels(Z: np.ndarray, key: Sequence[int], k: int, method: int = mdav.MDAV, gamma: float = 0.0) -> np.ndarray:
    """Groups of Sun et al. (AMA)'s Algorithm 2 (AMA) on standardized ``Z`` (n, m).

    Steps 1-2: project on the key attributes ``key``; steps 3-7: MDAV on the
    projection with ``engine.kernels.mdav``. The seed's ending differs slightly from
    that MDAV (Domingo-Ferrer & Torra 2005: pairs of groups while at least 3k records
    remain, one more group if 2k..3k-1 remain, the rest as the last group): its step
    5 repeats while at least 2k remain, its garbled step 6 "between k and k - 1" we
    read as "between k and 2k - 1" (they form a group), and step 7 sends fewer than
    k leftovers to the nearest group. We run the engine's MDAV, the method the seed
    compares against, so AMA and MDAV differ only in the attributes used. Step 8 (every attribute replaced by its group centroid) is the
    caller's: ``information_loss(Z, labels)`` is the IL of that release in the full
    space, ``information_loss(Z[:, key], labels)`` in the projected space.
    """
    P = np.ascontiguousarray(np.asarray(Z, dtype=np.float64)[:, list(key)])
    return mdav.microaggregate(P, method, int(k), float(gamma))


@dataclass
class SubsetScan:
    """IL (full space) of MDAV on every attribute subset of one size (Oommen & Fayyoumi (EMAD), Table 4)."""

    size: int
    il: dict[tuple[int, ...], float]

    @property
    def n_subsets(self) -> int:
        return len(self.il)

    @property
    def min(self) -> tuple[float, tuple[int, ...]]:
        s = min(self.il, key=lambda t: (self.il[t], t))
        return self.il[s], s

    @property
    def max(self) -> tuple[float, tuple[int, ...]]:
        s = max(self.il, key=lambda t: (self.il[t], tuple(-v for v in t)))
        return self.il[s], s

    @property
    def mean(self) -> float:
        return float(np.mean(list(self.il.values())))

    def rank(self, subset: Iterable[int]) -> int:
        """How many subsets have a strictly lower IL than ``subset`` (0 = the best)."""
        x = self.il[tuple(sorted(subset))]
        return sum(1 for v in self.il.values() if v < x)


def subset_scan(Z: np.ndarray, size: int, k: int, method: int = mdav.MDAV, gamma: float = 0.0) -> SubsetScan:
    """Exhaustive baseline: MDAV on the projection onto every ``size``-subset of the columns.

    Oommen & Fayyoumi (EMAD), Table 4: "the minimum, mean and maximum IL over all subsets". IL is
    measured in the full space of ``Z``, the seed's reading (its Table 4 figures are
    full-space ILs: Census {7, 8, 10} gives 15.55 here against its 15.60).
    """
    Z = np.ascontiguousarray(np.asarray(Z, dtype=np.float64))
    m = Z.shape[1]
    if not 1 <= size <= m:
        raise EngineError(f"subset size must be between 1 and {m}, got {size}")
    il = {}
    for sub in itertools.combinations(range(m), size):
        il[sub] = information_loss(Z, ama_labels(Z, sub, k, method, gamma))
    return SubsetScan(size, il)
