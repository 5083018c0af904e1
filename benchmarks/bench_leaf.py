"""Leaf kernels of the streaming aggregate pass: previous against current implementation.

    python benchmarks/bench_leaf.py [--blocks 20] [--rows 20000] [--k 5] [--leaf 256]
                                    [--method 0] [--repeats 5] [--threads 1]

Data: ``engine.synth.census_like`` (seeded), its 8 numeric quasi-identifiers
standardized (mean 0, sd 1; integer-valued columns keep their ties), cut into
``--blocks`` blocks of ``--rows`` rows, as the streaming engine hands them to
``aggregate_leaves``. Times, median of ``--repeats`` runs after a warm-up (compile or
cache load), wall and CPU seconds over all blocks:

* ``aggregate_leaves(Z, method, k, 0.0, leaf)`` on every block (``--threads`` workers
  share the blocks, as the engine's workers do; the kernels release the GIL);
* its parts, one thread: ``split_leaves`` and ``mdav_brute`` on every leaf.

"old" is the previous implementation, kept frozen in ``benchmarks/leaf_previous.py`` (the tests compare the kernels with their naive twins in ``tests/reference.py``); the
labels are checked equal before timing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "tests"))

from engine.kernels.index import split  # noqa: E402
from engine.kernels.mdav import leaf  # noqa: E402
from engine.synth import census_like  # noqa: E402
from leaf_previous import _aggregate_leaves_old, _mdav_brute_old, _split_leaves_old  # noqa: E402

QI = ["age", "education_years", "hours_per_week", "wage_income", "other_income", "property_tax",
      "household_size", "commute_minutes"]


def blocks(n_blocks: int, rows: int, seed: int = 0) -> list[np.ndarray]:
    X = census_like(n_blocks * rows, seed=seed).select(QI).to_numpy().astype(np.float64)
    Z = (X - X.mean(axis=0)) / X.std(axis=0)
    return [np.ascontiguousarray(Z[b * rows:(b + 1) * rows]) for b in range(n_blocks)]


def timed(fn, repeats: int) -> tuple[float, float]:
    """(median wall, median CPU) seconds of ``fn()``."""
    walls, cpus = [], []
    for _ in range(repeats):
        w, c = time.perf_counter(), time.process_time()
        fn()
        cpus.append(time.process_time() - c)
        walls.append(time.perf_counter() - w)
    return statistics.median(walls), statistics.median(cpus)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", type=int, default=20)
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--leaf", type=int, default=256)
    ap.add_argument("--method", type=int, default=0, help="0 MDAV, 1 MDAV-single-group")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()

    Zs = blocks(a.blocks, a.rows)
    leaf_size = max(a.leaf, 4 * a.k)
    leaves = []
    for Z in Zs:
        order, bounds = split.split_leaves(Z, leaf_size)
        leaves += [np.ascontiguousarray(Z[np.sort(order[bounds[i]:bounds[i + 1]])]) for i in range(len(bounds) - 1)]
    print(f"{a.blocks} blocks x {a.rows:,} rows x {Zs[0].shape[1]} columns, k={a.k}, leaf={a.leaf}, "
          f"method={a.method}: {len(leaves)} leaves of {np.mean([L.shape[0] for L in leaves]):.1f} rows on average")

    # warm-up and the check: identical labels
    for Z in Zs:
        new = leaf.aggregate_leaves(Z, a.method, a.k, 0.0, a.leaf)
        assert np.array_equal(new, _aggregate_leaves_old(Z, a.method, a.k, 0.0, a.leaf)), "labels differ"
    for L in leaves[:50]:
        assert np.array_equal(leaf.mdav_brute(L, a.method, a.k), _mdav_brute_old(L, a.method, a.k))

    def over_blocks(agg):
        if a.threads == 1:
            return lambda: [agg(Z, a.method, a.k, 0.0, a.leaf) for Z in Zs]
        pool = ThreadPoolExecutor(a.threads)
        return lambda: list(pool.map(lambda Z: agg(Z, a.method, a.k, 0.0, a.leaf), Zs))

    rows = [
        ("aggregate_leaves", over_blocks(_aggregate_leaves_old), over_blocks(leaf.aggregate_leaves)),
        ("  split_leaves", lambda: [_split_leaves_old(Z, leaf_size) for Z in Zs],
         lambda: [split.split_leaves(Z, leaf_size) for Z in Zs]),
        ("  mdav_brute", lambda: [_mdav_brute_old(L, a.method, a.k) for L in leaves],
         lambda: [leaf.mdav_brute(L, a.method, a.k) for L in leaves]),
    ]
    print(f"median of {a.repeats}, seconds over all blocks ({a.threads} thread(s) for aggregate_leaves)")
    print(f"{'':18s} {'old wall':>9s} {'new wall':>9s} {'speedup':>8s} {'old cpu':>9s} {'new cpu':>9s}")
    for name, old, new in rows:
        ow, oc = timed(old, a.repeats)
        nw, nc = timed(new, a.repeats)
        print(f"{name:18s} {ow:9.4f} {nw:9.4f} {ow / nw:7.2f}x {oc:9.4f} {nc:9.4f}")


if __name__ == "__main__":
    main()
