"""Brute force (engine/kernels/mdav/brute.py) against the bucket index, where the engine picks one.

    python benchmarks/bench_brute.py [--rows 100000] [--leaves 256,1024,4096,8192,32768]
                                     [--tables 4096,16384,30162,60000] [--repeats 3]

1. Leaves (``leaf.aggregate_leaves``' V-MDAV / IV-MDAV): one unit of ``--rows``
   census-like rows (``engine.synth.census_like``, 8 QIs, z-scores) cut into leaves of
   each size, the index's leaf kernel (``leaf.leaves_by_index``,
   the baseline) against ``brute.leaves_vmdav`` / ``leaves_ivmdav``. The engine uses
   brute force up to ``pick.LEAF_BRUTE_MAX_ROWS`` rows.
2. Whole tables (mnqia's MDAV baseline, ``mnqia.mdav_range_loss``): the first n rows
   of Adult's age, education_num, hours_per_week (tests/data/adult.csv; z-scores),
   MDAV k = 5, ``mdav.microaggregate`` (the index, the baseline) against
   ``pick.small_block_labels``. The engine uses brute force up to
   ``pick.TABLE_BRUTE_MAX_ROWS`` rows.

Medians of ``--repeats`` runs after a warm-up call (compilation or cache load), labels
checked equal first; information loss (100 SSE / SST on the z-scores) of the labels and
the process's peak RSS at the end.
"""

from __future__ import annotations

import argparse
import functools
import os
import resource
import statistics
import sys
import time

import numpy as np
import polars as pl
import psutil

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

from engine.kernels.mdav import brute, leaf, pick  # noqa: E402
from engine.kernels.mdav import indexed as mdav  # noqa: E402
from engine.synth import census_like  # noqa: E402

QI = ["age", "education_years", "hours_per_week", "wage_income", "other_income", "property_tax",
      "household_size", "commute_minutes"]


def zscores(X):
    sd = X.std(axis=0)
    return mdav.as_block((X - X.mean(axis=0)) / np.where(sd > 0, sd, 1.0))


def il(Z, labels):
    g = labels.max() + 1
    cnt = np.bincount(labels, minlength=g)
    sse = 0.0
    for j in range(Z.shape[1]):
        m = np.bincount(labels, Z[:, j], minlength=g) / cnt
        sse += float(((Z[:, j] - m[labels]) ** 2).sum())
    return 100.0 * sse / float(((Z - Z.mean(axis=0)) ** 2).sum())


def compare(base, new, repeats):
    """(baseline median s, brute-force median s, labels)."""
    a, b = base(), new()
    assert np.array_equal(a, b), "brute force and the index disagree"
    tb, tn = [], []
    for _ in range(repeats):
        t = time.perf_counter()
        base()
        tb.append(time.perf_counter() - t)
        t = time.perf_counter()
        new()
        tn.append(time.perf_counter() - t)
    return statistics.median(tb), statistics.median(tn), a


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--leaves", default="256,1024,4096,8192,32768")
    ap.add_argument("--tables", default="4096,16384,30162")
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    Z = zscores(census_like(a.rows, seed=0).select(QI).to_numpy().astype(np.float64))
    print(f"leaves of one unit of {a.rows:,} census-like rows (brute force up to {pick.LEAF_BRUTE_MAX_ROWS:,})")
    print(f"{'leaf rows':>9} {'method':>10} {'k':>2} {'index s':>8} {'brute s':>8} {'ratio':>6} {'IL %':>8}")
    for lf in (int(x) for x in a.leaves.split(",")):
        for name, code, gamma, k in (("vmdav", mdav.VMDAV, 0.2, 3), ("ivmdav", mdav.IVMDAV, 1.16, 3),
                                     ("ivmdav", mdav.IVMDAV, 1.16, 5)):
            old = functools.partial(lambda c, *args: leaf.leaves_by_index(args[0], c, *args[1:]), code)
            new = brute.leaves_vmdav if code == mdav.VMDAV else brute.leaves_ivmdav
            tb, tn, lab = compare(lambda: old(Z, k, gamma, lf), lambda: new(Z, k, gamma, lf), a.repeats)
            print(f"{lf:>9} {name:>10} {k:>2} {tb:8.3f} {tn:8.3f} {tn / tb:6.2f} {il(Z, lab):8.4f}", flush=True)
    X = pl.read_csv(os.path.join(HERE, "..", "tests", "data", "adult.csv"))
    X = X.select(["age", "education_num", "hours_per_week"]).to_numpy().astype(np.float64)
    print(f"MDAV k=5 on the first n rows of Adult (3 QIs; brute force up to {pick.TABLE_BRUTE_MAX_ROWS:,})")
    print(f"{'rows':>9} {'index s':>8} {'brute s':>8} {'ratio':>6} {'IL %':>8}")
    for n in (int(x) for x in a.tables.split(",")):
        Zn = zscores(X[:n])
        tb, tn, lab = compare(lambda: mdav.microaggregate(Zn, mdav.MDAV, 5, 0.0),
                              lambda: pick.small_block_labels(Zn, mdav.MDAV, 5, 0.0, Zn.shape[0]), a.repeats)
        print(f"{Zn.shape[0]:>9} {tb:8.3f} {tn:8.3f} {tn / tb:6.2f} {il(Zn, lab):8.4f}", flush=True)
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB, now "
          f"{psutil.Process().memory_info().rss / 2**20:.0f} MiB")


if __name__ == "__main__":
    main()
