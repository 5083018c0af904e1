"""Exact MDAV speed (issue 16): n x 10 standard normal rows, k = 5.

    python benchmarks/bench_mdav.py [--sizes 100000,1000000] [--threads 1,2] [--repeats 3]
                                    [--numpy-max 100000] [--numpy-repeats 3] [--data normal|skewed]

For each n and thread count, each run in a fresh process (so peak RSS is the
run's own): wall seconds of ``engine.microaggregate(X, k=5, method="mdav",
block_size=n, threads=t)`` (one block: the exact algorithm; median of the
repeats, every run listed; the CPU seconds of each run on stderr and in the JSON:
on a loaded machine wall time is the load's as much as the engine's), its
aggregate pass, peak RSS and IL; beside it a plain
NumPy textbook MDAV (Domingo-Ferrer & Torra's algorithm, one vectorized distance
computation over the remaining rows per query, rows deleted as they are grouped:
it stands in for sdcMicro's C++ MDAV) measured in the same run up to --numpy-max
rows, its IL, the ratio of the medians and the median of the per-round ratios
(each round runs the engine at every thread count, then NumPy).
Targets: n = 100k at most 5 s and at least 13x the NumPy MDAV; n = 1M at most 120 s.

``--data skewed``: the previous benchmark's table (correlated columns, one
skewed, one integer with ties).
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
def make(n, kind, d=10, seed=0):
    if kind == "normal":
        return np.random.default_rng(seed).normal(size=(n, d))
    rng = np.random.default_rng(seed)
    L = rng.normal(size=(d, 4))
    X = rng.normal(size=(n, 4)) @ L.T + 0.3 * rng.normal(size=(n, d))
    X[:, 0] = np.round(np.exp(X[:, 0]), 1)   # a skewed column, as incomes are
    X[:, 1] = np.round(X[:, 1])              # an integer column, with ties
    return X
"""

ENGINE = DATA + """
import json, time, engine
# compiled / loaded first: above aggregate.BRUTE_MAX_ROWS rows, so the index's kernels
engine.microaggregate(make(6000, {kind!r}, 10, 1), k=5, block_size=6000, threads={threads})
X = make({n}, {kind!r})
t, c = time.perf_counter(), time.process_time()
res = engine.microaggregate(X, k=5, method="mdav", block_size={n}, threads={threads})
wall, cpu = time.perf_counter() - t, time.process_time() - c
print(json.dumps({{"wall": wall, "cpu": cpu, "aggregate": res.report.passes.get("aggregate"),
                  "il": res.report.information_loss_percent, "groups": res.report.groups}}))
"""

NUMPY = DATA + """
import json, time

def numpy_mdav(X, k):
    # the textbook MDAV on z-scores: centroid, r farthest from it, s farthest from r,
    # a group of k around each, the rows removed; at the end one more group and the rest
    Z = (X - X.mean(0)) / X.std(0)
    idx = np.arange(len(Z))
    labels = np.empty(len(Z), np.int64)
    g = 0
    while len(Z) >= 3 * k:
        r = np.argmax(((Z - Z.mean(0)) ** 2).sum(1))
        dr = ((Z - Z[r]) ** 2).sum(1)
        s = np.argmax(dr)
        gr = np.argpartition(dr, k - 1)[:k]
        ds = ((Z - Z[s]) ** 2).sum(1)
        ds[gr] = np.inf
        gs = np.argpartition(ds, k - 1)[:k]
        labels[idx[gr]] = g
        labels[idx[gs]] = g + 1
        g += 2
        keep = np.ones(len(Z), bool)
        keep[gr] = False
        keep[gs] = False
        Z, idx = Z[keep], idx[keep]
    if len(Z) >= 2 * k:
        r = np.argmax(((Z - Z.mean(0)) ** 2).sum(1))
        gr = np.argpartition(((Z - Z[r]) ** 2).sum(1), k - 1)[:k]
        labels[idx[gr]] = g
        g += 1
        keep = np.ones(len(Z), bool)
        keep[gr] = False
        Z, idx = Z[keep], idx[keep]
    labels[idx] = g
    return labels

X = make({n}, {kind!r})
t = time.perf_counter()
labels = numpy_mdav(X, 5)
wall = time.perf_counter() - t
Z = (X - X.mean(0)) / X.std(0)
sse = 0.0
for j in range(Z.shape[1]):
    m = np.bincount(labels, Z[:, j]) / np.bincount(labels)
    sse += ((Z[:, j] - m[labels]) ** 2).sum()
print(json.dumps({{"wall": wall, "il": 100 * sse / (Z ** 2).sum(), "groups": int(labels.max()) + 1}}))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="100000,1000000")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--numpy-max", type=int, default=100_000)
    ap.add_argument("--numpy-repeats", type=int, default=3)
    ap.add_argument("--data", choices=("normal", "skewed"), default="normal")
    args = ap.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    print(f"{'n':>9} {'thr':>3} {'engine s (median)':>17} {'runs':>22} {'aggregate s':>11} {'RSS MiB':>8} "
          f"{'IL %':>8} {'numpy s (median)':>16} {'numpy runs':>24} {'numpy IL %':>10} {'ratio':>7} {'pairs':>6}  target")
    rows = []
    for n in [int(x) for x in args.sizes.split(",")]:
        with_numpy = n <= args.numpy_max
        runs = {t: [] for t in threads}
        nruns = []
        for rep in range(max(args.repeats, args.numpy_repeats if with_numpy else 0)):
            if rep < args.repeats:
                for t in threads:
                    runs[t].append(run_isolated(ENGINE.format(n=n, kind=args.data, threads=t)))
                    print(f"  (n={n} round {rep + 1}: engine, {t} thread(s): {runs[t][-1]['wall']:.2f} s, "
                          f"{runs[t][-1]['cpu']:.2f} CPU-s)",
                          file=sys.stderr, flush=True)
            if with_numpy and rep < args.numpy_repeats:
                nruns.append(run_isolated(NUMPY.format(n=n, kind=args.data)))
                print(f"  (n={n} round {rep + 1}: numpy: {nruns[-1]['wall']:.2f} s)", file=sys.stderr, flush=True)
        npy = statistics.median(r["wall"] for r in nruns) if nruns else None
        for t in threads:
            wall = statistics.median(r["wall"] for r in runs[t])
            agg = statistics.median(r["aggregate"] for r in runs[t])
            target = {100_000: "<= 5 s, >= 13x numpy", 1_000_000: "<= 120 s"}.get(n, "")
            walls = ",".join(f"{r['wall']:.2f}" for r in runs[t])
            nwalls = ",".join(f"{r['wall']:.1f}" for r in nruns)
            nil = f"{nruns[0]['il']:.4f}" if nruns else "-"
            # each engine run against the NumPy run of its round: robust to load that comes and goes
            pairs = [nr["wall"] / r["wall"] for r, nr in zip(runs[t], nruns)]
            pair = statistics.median(pairs) if pairs else None
            print(f"{n:>9} {t:>3} {wall:>17.2f} {walls:>22} {agg:>11.2f} "
                  f"{max(r['peak_rss_mib'] for r in runs[t]):>8.0f} {runs[t][0]['il']:>8.4f} "
                  f"{(f'{npy:.1f}' if npy else '-'):>16} {nwalls or '-':>24} "
                  f"{nil:>10} "
                  f"{(f'{npy / wall:.1f}x' if npy else '-'):>7} {(f'{pair:.1f}x' if pair else '-'):>6}  {target}")
            rows.append({"n": n, "threads": t, "wall": wall, "runs": [r["wall"] for r in runs[t]],
                         "cpu": [r["cpu"] for r in runs[t]],
                         "aggregate": agg, "il": runs[t][0]["il"], "numpy": npy,
                         "numpy_runs": [r["wall"] for r in nruns], "numpy_il": nruns[0]["il"] if nruns else None,
                         "pair_ratios": pairs})
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
