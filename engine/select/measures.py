"""Dependence measures on joint counts, in bits: MI distance, EMIM, chi-squared, Gaussian (stage 3 of ``engine.select``)."""

from __future__ import annotations

import math

import numpy as np

from ..kernels.entropy import entropy
from .counting import Counts


def conditional_entropy(joint: np.ndarray) -> float:
    """H(Y|X) = H(X, Y) - H(X) for ``joint`` with X on the rows (Sun et al. (AMA), Proposition 1)."""
    return entropy(joint) - entropy(joint.sum(axis=1))


def mi_distance(joint: np.ndarray) -> float:
    """MI(A, B) = H(A|B) + H(B|A) = 2 H(A, B) - H(A) - H(B) (Sun et al. (AMA), Definition 2).

    Sun et al. (AMA) prints "H(A1|A2) = H(A1, A2) - H(A1) = 0.6363" and "H(A2|A1) = 0.7433":
    by Proposition 1 the first is H(A2|A1) and the second H(A1|A2); the labels are
    swapped, the sum (1.3796) is right.
    """
    hab = entropy(joint)
    return 2.0 * hab - entropy(joint.sum(axis=1)) - entropy(joint.sum(axis=0))


def emim(joint: np.ndarray) -> float:
    """I*(X, Y) = sum p(x,y) log2(p(x,y) / (p(x) p(y))) over the nonzero cells (Oommen & Fayyoumi (EMAD), eq. 5)."""
    C = np.asarray(joint, dtype=np.float64)
    n = C.sum()
    if n == 0:
        return 0.0
    px = C.sum(axis=1)
    py = C.sum(axis=0)
    i, j = np.nonzero(C)
    c = C[i, j]
    return float((c / n * np.log2(c * n / (px[i] * py[j]))).sum())


def chi2(joint: np.ndarray) -> float:
    """I_chi(X, Y) = sum (p(x,y) - p(x)p(y))^2 / (p(x)p(y)) (Oommen & Fayyoumi (EMAD), eq. 6).

    The sum runs over every cell whose marginals are both nonzero, including cells
    never observed together (those are where independence fails most).
    """
    C = np.asarray(joint, dtype=np.float64)
    n = C.sum()
    if n == 0:
        return 0.0
    px = C.sum(axis=1) / n
    py = C.sum(axis=0) / n
    rx = px > 0
    ry = py > 0
    P = C[np.ix_(rx, ry)] / n
    E = np.outer(px[rx], py[ry])
    return float(((P - E) ** 2 / E).sum())


def gaussian(rho: float) -> float:
    """-0.5 log2(1 - rho^2): mutual information (bits) of jointly normal variables (Oommen & Fayyoumi (EMAD), 4.2.4)."""
    r2 = rho * rho
    if r2 >= 1.0:
        return math.inf
    return -0.5 * math.log2(1.0 - r2)


_PAIR_MEASURE = {"mi-distance": mi_distance, "emim": emim, "chi2": chi2}


def measure_matrix(counts: Counts, measure: str) -> np.ndarray:
    """Symmetric (d, d) matrix of ``measure`` from joint counts; the diagonal is 0."""
    f = _PAIR_MEASURE[measure]
    d = len(counts.plans)
    M = np.zeros((d, d))
    for (a, b), C in counts.joint.items():
        M[a, b] = M[b, a] = f(C)
    return M


def gaussian_matrix(rho: np.ndarray) -> np.ndarray:
    d = rho.shape[0]
    M = np.zeros((d, d))
    for a in range(d):
        for b in range(a + 1, d):
            M[a, b] = M[b, a] = gaussian(float(rho[a, b]))
    return M
