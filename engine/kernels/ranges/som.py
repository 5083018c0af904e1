"""A seeded batch self-organizing map (Kohonen) for mixed numeric / categorical rows.

This is the "neural-network clustering" step of Tsiafoulis et al. (maximum entropy) (Fig. 2: "Insert T to
the neural network", QIC = the clusters). The seed does not give the network's
details, so this module fixes them (and ``tests/reference_sensitive.py`` repeats
them in plain Python):

* **Input encoding.** Numeric columns arrive scaled to [0, 1] by their range
  (``Xn``, (n, dn)); categorical columns arrive as integer codes (``C``, (n, dc))
  and are treated as one-hot vectors scaled by 1/sqrt(2), so two different
  categories are exactly as far apart (squared distance 1) as the two ends of a
  numeric column's range. A unit's prototype for a categorical column is a
  probability vector ``p`` over the column's categories, and the squared
  distance of code ``c`` to it is ``0.5 * (1 - 2 p[c] + sum(p^2))``; the one-hot
  vector is never materialised. Column ``j`` is weighted by ``w[j]`` (numeric
  columns first, then categorical).
* **Grid.** ``rows x cols`` units on a rectangular grid; neighbourhood
  ``h(u, v) = exp(-|g_u - g_v|^2 / (2 sigma^2))`` with ``sigma`` decaying
  geometrically from ``sigma0`` to ``sigma1`` over the epochs.
* **Training.** Batch SOM: every epoch assigns each row to its best matching
  unit (smallest distance, ties to the lowest unit), then sets every prototype
  to the ``h``-weighted mean of the rows (units with zero weight keep their
  prototype). Sums run in row order, so the result is deterministic.
* **Seeding.** The initial prototypes are the rows ``init_rows`` (chosen by the
  driver from a seeded NumPy generator).

The clusters are the final best-matching units (empty units give no cluster).
"""

import math

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def assign_bmu(Xn, C, W, P, off, w):
    """Best matching unit of every row (ties to the lowest unit index).

    The distance to every unit is accumulated column by column into a vector over
    the units (transposed prototypes, so the inner loop runs over contiguous
    memory): numeric ``w_j (x - W[u, j])^2``, categorical the table
    ``T[q, u] = w_j * 0.5 * (1 - 2 P[u, q] + sum_q' P[u, q']^2)`` for code q."""
    n, dn = Xn.shape
    dc = C.shape[1]
    U = W.shape[0]
    Wt = np.empty((dn, U))
    for u in range(U):
        for j in range(dn):
            Wt[j, u] = W[u, j]
    T = np.empty((off[dc], U))
    for u in range(U):
        for j in range(dc):
            s = 0.0
            for q in range(off[j], off[j + 1]):
                s += P[u, q] * P[u, q]
            for q in range(off[j], off[j + 1]):
                T[q, u] = w[dn + j] * 0.5 * (1.0 - 2.0 * P[u, q] + s)
    out = np.empty(n, np.int64)
    dist = np.empty(U)
    for i in range(n):
        for u in range(U):
            dist[u] = 0.0
        for j in range(dn):
            x = Xn[i, j]
            wj = w[j]
            for u in range(U):
                t = x - Wt[j, u]
                dist[u] += wj * t * t
        for j in range(dc):
            q = off[j] + C[i, j]
            for u in range(U):
                dist[u] += T[q, u]
        best = 0
        bd = dist[0]
        for u in range(1, U):
            if dist[u] < bd:
                bd = dist[u]
                best = u
        out[i] = best
    return out


@njit(cache=True, nogil=True)
def som_fit(Xn, C, off, w, rows, cols, init_rows, epochs, sigma0, sigma1):
    """Train the map; returns ``(W, P, bmu)``: numeric and categorical prototypes
    and the final best matching unit of every row (its cluster)."""
    n, dn = Xn.shape
    dc = C.shape[1]
    U = rows * cols
    totc = off[dc]
    W = np.zeros((U, dn))
    P = np.zeros((U, totc))
    for u in range(U):
        r = init_rows[u]
        for j in range(dn):
            W[u, j] = Xn[r, j]
        for j in range(dc):
            P[u, off[j] + C[r, j]] = 1.0
    # squared grid distances between units
    G = np.empty((U, U))
    for u in range(U):
        for v in range(U):
            a = (u // cols) - (v // cols)
            b = (u % cols) - (v % cols)
            G[u, v] = a * a + b * b
    SN = np.zeros((U, dn))
    SC = np.zeros((U, totc))
    N = np.zeros(U)
    H = np.empty((U, U))
    for e in range(epochs):
        if epochs > 1:
            sigma = sigma0 * (sigma1 / sigma0) ** (e / (epochs - 1))
        else:
            sigma = sigma1
        bmu = assign_bmu(Xn, C, W, P, off, w)
        SN[:, :] = 0.0
        SC[:, :] = 0.0
        N[:] = 0.0
        for i in range(n):
            v = bmu[i]
            N[v] += 1.0
            for j in range(dn):
                SN[v, j] += Xn[i, j]
            for j in range(dc):
                SC[v, off[j] + C[i, j]] += 1.0
        for u in range(U):
            for v in range(U):
                H[u, v] = math.exp(-G[u, v] / (2.0 * sigma * sigma))
        for u in range(U):
            den = 0.0
            for v in range(U):
                den += H[u, v] * N[v]
            if den <= 0.0:
                continue
            for j in range(dn):
                s = 0.0
                for v in range(U):
                    s += H[u, v] * SN[v, j]
                W[u, j] = s / den
            for q in range(totc):
                s = 0.0
                for v in range(U):
                    s += H[u, v] * SC[v, q]
                P[u, q] = s / den
    bmu = assign_bmu(Xn, C, W, P, off, w)
    return W, P, bmu
