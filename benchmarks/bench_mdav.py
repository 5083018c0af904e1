"""Exact MDAV speed: n = 10k, 100k, 1M rows, d = 10, k = 5 (synthetic, seeded).

    python benchmarks/bench_mdav.py [--sizes 10000,100000,1000000] [--repeats 3]

For each n, in a fresh process (so peak RSS is the run's own): wall seconds
(median of the repeats), peak RSS and IL of ``engine.microaggregate``; beside it a
brute-force Numba MDAV (the same algorithm without the kd-tree: O(n^2 d / k)),
measured in the same run up to --brute-max rows, with the ratio. Targets: n=100k
in at most 5 s; goal for 1M: 2 minutes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import run_isolated  # noqa: E402

DATA = """
import numpy as np
def make(n, d=10, seed=0):
    rng = np.random.default_rng(seed)
    L = rng.normal(size=(d, 4))
    X = rng.normal(size=(n, 4)) @ L.T + 0.3 * rng.normal(size=(n, d))
    X[:, 0] = np.round(np.exp(X[:, 0]), 1)   # a skewed column, as incomes are
    X[:, 1] = np.round(X[:, 1])              # an integer column, with ties
    return X
"""

ENGINE = DATA + """
import json, time, engine
engine.microaggregate(make(50, 10, 1), k=5)
X = make({n})
t = time.perf_counter()
res = engine.microaggregate(X, k=5, method="mdav")
wall = time.perf_counter() - t
print(json.dumps({{"wall": wall, "il": res.report.information_loss_percent, "groups": res.report.groups}}))
"""

BRUTE = DATA + """
import json, time, numpy as np
from numba import njit

@njit
def brute_mdav(Z, k):
    n, d = Z.shape
    alive = np.ones(n, np.bool_)
    labels = np.full(n, -1, np.int64)
    rem = n
    g = 0
    dist = np.empty(n)
    def far(q):
        best, bi = -1.0, -1
        for i in range(n):
            if alive[i]:
                s = 0.0
                for j in range(d):
                    t = Z[i, j] - q[j]
                    s += t * t
                if s > best:
                    best, bi = s, i
        return bi
    def group(r):
        for i in range(n):
            s = 0.0
            for j in range(d):
                t = Z[i, j] - Z[r, j]
                s += t * t
            dist[i] = s if alive[i] else np.inf
        order = np.argsort(dist)[:k]
        for i in order:
            alive[i] = False
            labels[i] = g
    while rem >= 3 * k:
        c = np.zeros(d)
        for i in range(n):
            if alive[i]:
                c += Z[i]
        c /= rem
        r = far(c)
        group(r); g += 1
        s = far(Z[r].copy())
        group(s); g += 1
        rem -= 2 * k
    for i in range(n):
        if alive[i]:
            labels[i] = g
    return labels

X = make({n})
Z = (X - X.mean(0)) / X.std(0)
brute_mdav(Z[:60].copy(), 5)
t = time.perf_counter()
brute_mdav(Z, 5)
print(json.dumps({{"wall": time.perf_counter() - t}}))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--brute-max", type=int, default=10000)
    args = ap.parse_args()
    print(f"{'n':>9} {'engine s (median)':>18} {'runs':>24} {'peak RSS MiB':>13} {'IL %':>8} "
          f"{'brute s':>9} {'brute/engine':>13}  target")
    rows = []
    for n in [int(x) for x in args.sizes.split(",")]:
        reps = args.repeats if n <= 100_000 else 1
        runs = [run_isolated(ENGINE.format(n=n)) for _ in range(reps)]
        wall = statistics.median(r["wall"] for r in runs)
        brute = run_isolated(BRUTE.format(n=n))["wall"] if n <= args.brute_max else None
        target = {100_000: "<= 5 s", 1_000_000: "goal <= 120 s"}.get(n, "")
        walls = ",".join(f"{r['wall']:.2f}" for r in runs)
        print(f"{n:>9} {wall:>18.2f} {walls:>24} "
              f"{max(r['peak_rss_mib'] for r in runs):>13.0f} {runs[0]['il']:>8.4f} "
              f"{(f'{brute:.2f}' if brute else '-'):>9} {(f'{brute / wall:.1f}x' if brute else '-'):>13}  {target}")
        rows.append({"n": n, "wall": wall, "runs": [r["wall"] for r in runs], "il": runs[0]["il"],
                     "brute": brute})
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
