"""The dependency tree and key-attribute selection: spanning tree, degrees, strength, Definition 5, EMAD (stages 4-5 of ``engine.select``)."""

from __future__ import annotations

import itertools

import numpy as np

from ..kernels.dependency import graph


def spanning_tree(matrix: np.ndarray, maximize: bool) -> np.ndarray:
    """Kruskal's spanning tree (Sun et al. (AMA) Algorithm 1 step 3; Oommen & Fayyoumi (EMAD) EMAD step 3): (d-1, 2) edges."""
    return graph.kruskal(np.ascontiguousarray(matrix, dtype=np.float64), bool(maximize))


def tree_degrees(edges: np.ndarray, d: int) -> np.ndarray:
    """Vertex degrees (Sun et al. (AMA), Definition 4)."""
    return graph.degrees(np.asarray(edges, np.int64).reshape(-1, 2), d)


def tree_strength(edges: np.ndarray, matrix: np.ndarray, maximize: bool) -> np.ndarray:
    """Dependence carried by each vertex's tree edges: sum of weights (maximum tree) or minus it."""
    d = matrix.shape[0]
    s = np.zeros(d)
    sign = 1.0 if maximize else -1.0
    for i, j in np.asarray(edges).reshape(-1, 2):
        s[i] += sign * matrix[i, j]
        s[j] += sign * matrix[i, j]
    return s


def rank_vertices(degrees: np.ndarray, strength: np.ndarray | None = None) -> list[int]:
    """Vertices by degree decreasing; ties by strength decreasing, then column position."""
    d = len(degrees)
    st = np.zeros(d) if strength is None else np.asarray(strength, dtype=np.float64)
    return sorted(range(d), key=lambda v: (-int(degrees[v]), -st[v], v))


def definition5(degrees: np.ndarray, strength: np.ndarray | None = None) -> list[int]:
    """Key attributes by Sun et al. (AMA), Definition 5: the first N vertices of the ranking with

    ``deg(v_1) + ... + deg(v_{N-1}) < m``  (11)   and   ``deg(v_1) + ... + deg(v_N) >= m``  (12),

    m the number of vertices. Read with m >= 2, where a tree's degrees add up to
    2(m - 1) >= m so N exists; for m = 1 (no edge) the single attribute is the key.
    Theorem 2 claims 2 <= N <= m/2; the upper bound fails for m = 2 (N = 2) and for
    odd paths (m = 3: degrees 2, 1, 1 give N = 2): the rule is what we implement.
    """
    order = rank_vertices(degrees, strength)
    m = len(order)
    if m <= 1:
        return order
    total = 0
    for n, v in enumerate(order, start=1):
        total += int(degrees[v])
        if total >= m:
            return order[:n]
    return order  # unreachable for a tree


def emad_top(degrees: np.ndarray, count: int, strength: np.ndarray | None = None) -> list[int]:
    """Oommen & Fayyoumi (EMAD), EMAD step 4: the first ``count`` vertices by decreasing degree (ties as ``rank_vertices``)."""
    return rank_vertices(degrees, strength)[:count]


def emad_candidates(degrees: np.ndarray, count: int) -> list[tuple[int, ...]]:
    """Every ``count``-subset that "the first d' by degree" allows when degrees tie.

    Oommen & Fayyoumi (EMAD) reports these as "No. of possibilities" (Tables 5-8). Subsets are sorted
    tuples of positions, in lexicographic order.
    """
    deg = np.asarray(degrees)
    ranked = sorted(range(len(deg)), key=lambda v: (-int(deg[v]), v))
    cut = int(deg[ranked[count - 1]])
    sure = [v for v in ranked if deg[v] > cut]
    tied = [v for v in ranked if deg[v] == cut]
    need = count - len(sure)
    return sorted(tuple(sorted(sure + list(c))) for c in itertools.combinations(tied, need))
