"""Spanning trees of a complete weighted graph given as a dense matrix.

Sun et al. (AMA), Algorithm 1 step 3 (Kruskal's minimum spanning tree on the MI distance)
and Oommen & Fayyoumi (EMAD), EMAD step 3 (Kruskal's *maximum* spanning tree on EMIM or chi-squared
weights). Both are one kernel: the candidate edges ``(i, j), i < j`` are enumerated
in lexicographic order and stably sorted by weight (ascending for the minimum tree,
descending for the maximum tree), so equal weights are taken in ``(i, j)`` order.
A NaN weight sorts after every number, in both directions.
"""

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def find_root(parent, i):
    """Union-find root of ``i`` with path halving (Kruskal here, maxent's class merges)."""
    while parent[i] != i:
        parent[i] = parent[parent[i]]
        i = parent[i]
    return i


@njit(cache=True, nogil=True)
def kruskal(W, maximum):
    """Spanning tree of the complete graph on ``W`` (m, m); only ``W[i, j], i < j`` is read.

    Parameters
    ----------
    W : (m, m) float64
        Edge weights (the upper triangle is used).
    maximum : bool
        False: minimum spanning tree (Sun et al. (AMA)); True: maximum (Oommen & Fayyoumi (EMAD)).

    Returns
    -------
    edges : (m - 1, 2) int64
        ``(i, j)`` with ``i < j``, in the order Kruskal accepted them.
    """
    m = W.shape[0]
    n_edges = m * (m - 1) // 2
    ei = np.empty(n_edges, np.int64)
    ej = np.empty(n_edges, np.int64)
    key = np.empty(n_edges)
    e = 0
    for i in range(m):
        for j in range(i + 1, m):
            ei[e] = i
            ej[e] = j
            key[e] = -W[i, j] if maximum else W[i, j]
            e += 1
    order = np.argsort(key, kind="mergesort")
    parent = np.arange(m)
    out = np.empty((max(m - 1, 0), 2), np.int64)
    taken = 0
    for q in range(n_edges):
        if taken == m - 1:
            break
        i = ei[order[q]]
        j = ej[order[q]]
        ri = find_root(parent, i)
        rj = find_root(parent, j)
        if ri != rj:
            # attach the larger root under the smaller: the forest depends only on the order
            if ri < rj:
                parent[rj] = ri
            else:
                parent[ri] = rj
            out[taken, 0] = i
            out[taken, 1] = j
            taken += 1
    return out


@njit(cache=True, nogil=True)
def degrees(edges, m):
    """Vertex degrees (Sun et al. (AMA), Definition 4) of the graph on ``m`` vertices with ``edges``."""
    deg = np.zeros(m, np.int64)
    for q in range(edges.shape[0]):
        deg[edges[q, 0]] += 1
        deg[edges[q, 1]] += 1
    return deg
