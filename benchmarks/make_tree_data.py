"""Oommen & Fayyoumi (EMAD)-style synthetic data with a known dependence tree (Sim_1, Sim_2, Sim_3).

Oommen & Fayyoumi (EMAD), section 4.1: every variable lives in [1, 1000], cut into ten sub-intervals
of width 100 (I_1 = [1, 100], ..., I_10 = [901, 1000]); the root variable draws its
interval from ten random probabilities and every other variable draws its interval
from P(child in I_j | parent in I_l) (eq. 10), a random 10 x 10 table per tree edge.
The value is then uniform among the integers of the interval. The seed's Fig. 4
(the true trees) is not in our copy of the paper, so the trees below are our own
choice, with hubs of different degrees so that the degree ranking matters.

Rows of the conditional tables are Dirichlet(alpha) draws: alpha = 0.5 gives
clearly dependent neighbours, as the seed's recoverable trees require; larger alpha
makes the dependence weaker. Everything is drawn from ``numpy.random.default_rng(seed)``.

    python benchmarks/make_tree_data.py sim1 sim1.parquet [--seed 0] [--rows N] [--alpha 0.5]
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

N_BINS = 10
WIDTH = 100

# parent of each variable (-1: the root); parents come before their children
SIMS = {
    "sim1": ([-1, 0, 0, 0, 2, 2, 3, 6], 5000),
    "sim2": ([-1, 0, 0, 0, 1, 1, 2, 2, 3, 3, 3, 4, 6, 6, 9, 9], 10000),
    "sim3": ([-1, 0, 0, 0, 0, 1, 1, 2, 2, 2, 3, 4, 4, 5, 7, 7, 9, 9, 10, 12, 12, 16], 20000),
}


def tree_edges(parents) -> set[tuple[int, int]]:
    """The true tree as a set of ``(i, j)``, ``i < j``."""
    return {(min(p, c), max(p, c)) for c, p in enumerate(parents) if p >= 0}


def make_tree_data(parents, n_rows: int, seed: int = 0, alpha: float = 0.5) -> np.ndarray:
    """(n_rows, len(parents)) int64 values in [1, 1000] following the tree ``parents``."""
    bins = make_categorical_tree(parents, [N_BINS] * len(parents), n_rows, seed, alpha)
    rng = np.random.default_rng([seed, 1])
    return bins * WIDTH + rng.integers(1, WIDTH + 1, size=bins.shape)


def make_categorical_tree(parents, levels, n_rows: int, seed: int = 0, alpha: float = 0.5) -> np.ndarray:
    """(n_rows, d) int64 categories, column j in ``0 .. levels[j] - 1``, along the tree ``parents``.

    The root draws from Dirichlet(1) probabilities, every child from a
    ``levels[parent] x levels[child]`` table of Dirichlet(alpha) rows (Oommen & Fayyoumi (EMAD), eq. 10).
    """
    parents = list(parents)
    d = len(parents)
    if len(levels) != d:
        raise ValueError("one level count per variable")
    for c, p in enumerate(parents):
        if (c == 0) != (p < 0) or p >= c:
            raise ValueError("parents must list the root first and every parent before its child")
    rng = np.random.default_rng(seed)
    out = np.empty((n_rows, d), np.int64)
    root_p = rng.dirichlet(np.ones(levels[0]))
    out[:, 0] = _draw(rng, np.broadcast_to(np.cumsum(root_p), (n_rows, levels[0])))
    for c in range(1, d):
        table = rng.dirichlet(np.full(levels[c], alpha), size=levels[parents[c]])
        out[:, c] = _draw(rng, np.cumsum(table, axis=1)[out[:, parents[c]]])
    return out


def _draw(rng, cdf: np.ndarray) -> np.ndarray:
    u = rng.random(cdf.shape[0])
    return np.minimum((u[:, None] >= cdf).sum(axis=1), cdf.shape[1] - 1)


def sim(name: str, seed: int = 0, n_rows: int | None = None, alpha: float = 0.5):
    """``(X, parents)`` for ``sim1`` (8 variables, 5000 rows), ``sim2`` (16, 10000), ``sim3`` (22, 20000)."""
    parents, rows = SIMS[name]
    return make_tree_data(parents, rows if n_rows is None else n_rows, seed, alpha), parents


def column_names(d: int) -> list[str]:
    return [f"V{j + 1}" for j in range(d)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("name", choices=sorted(SIMS))
    ap.add_argument("output", help=".csv or .parquet")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rows", type=int, default=None)
    ap.add_argument("--alpha", type=float, default=0.5)
    a = ap.parse_args(argv)
    import polars as pl

    X, parents = sim(a.name, a.seed, a.rows, a.alpha)
    frame = pl.DataFrame({c: X[:, j] for j, c in enumerate(column_names(X.shape[1]))})
    if a.output.lower().endswith(".csv"):
        frame.write_csv(a.output)
    else:
        frame.write_parquet(a.output)
    names = column_names(X.shape[1])
    edges = ", ".join(f"{names[i]}-{names[j]}" for i, j in sorted(tree_edges(parents)))
    print(f"{a.name}: {X.shape[0]} rows x {X.shape[1]} variables -> {a.output}; true tree: {edges}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
