"""Information loss after refinement (issue 7): Census, Tarragona, a held-out set, and cost.

    python benchmarks/quality.py                           # everything (the 1M-row timing takes minutes)
    python benchmarks/quality.py --timing 100000:3         # timing on 100k rows only, 3 repeats
    python benchmarks/quality.py --timing '' --adult-rows 5000   # quick: tables and a held-out sample

For each data set and k: MDAV; the best of the MDAV family (mdav, mdav-single,
vmdav gamma 0.2, ivmdav gamma 1.16, the lowest IL per cell); that best refined by
``local`` and by ``ga`` (seed 0); the target (the best published IL known to us,
to be beaten strictly); and the seconds of each run. All 13 columns as
quasi-identifiers, z-scores with the population sd, IL = 100 * SSE / SST.
Refinement runs without a budget (to convergence); ``ga`` is deterministic for its seed.

Held-out: the six numeric columns of UCI Adult (tests/data/adult.csv), which
played no part in choosing the refinement's settings (engine/passes/refine.py).

Timing: ``local`` on a census-like table (engine.synth.census_like, its 8 numeric
QIs, k = 5) against MDAV on the same table; the issue asks for at most 2x on 1M
rows. Medians of the repeats (one run of each at 1M rows: MDAV alone takes minutes).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.kernels.mdav import indexed as _mdav  # noqa: E402
from engine.passes.refine import refine_partition  # noqa: E402
from engine.synth import NUMERIC_QI, census_like  # noqa: E402

DATA = Path(__file__).resolve().parent.parent / "tests" / "data"
KS = [3, 4, 5, 10]
FAMILY = [("mdav", 0, 0.0), ("mdav-single", 1, 0.0), ("vmdav", 2, 0.2), ("ivmdav", 3, 1.16)]
TARGETS = {
    "census": {3: 5.327, 4: 6.910, 5: 8.270, 10: 12.725},
    "tarragona": {3: 14.967, 4: 17.825, 5: 20.951, 10: 31.113},
}
ADULT_QI = ["age", "fnlwgt", "education_num", "capital_gain", "capital_loss", "hours_per_week"]


def standardize(X: np.ndarray) -> np.ndarray:
    X = np.asarray(X, dtype=np.float64)
    sd = X.std(axis=0)
    Z = (X - X.mean(axis=0)) / np.where(sd > 0, sd, 1.0)
    Z[:, sd == 0] = 0.0
    return np.ascontiguousarray(Z)


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def family_best(Z, k):
    """MDAV's labels and IL, and the best family member's (name, labels, IL, seconds)."""
    sst = float((Z ** 2).sum())
    runs = []
    for name, code, gamma in FAMILY:
        labels, sec = timed(lambda: _mdav.microaggregate(Z, code, k, gamma))
        sse = refine_partition(Z, labels, k, max_rounds=0).sse_before
        runs.append((name, labels, 100 * sse / sst, sec))
    mdav = runs[0]
    best = min(runs, key=lambda r: r[2])
    return mdav, best


def quality_rows(name, Z, ks, targets=None):
    sst = float((Z ** 2).sum())
    head = (f"{'data':<10} {'k':>3} {'MDAV':>16} {'best of family':>26} {'best+local':>16} "
            f"{'best+ga':>16} {'target':>8}  met")
    print(head)
    out = []
    for k in ks:
        mdav, best = family_best(Z, k)
        loc = refine_partition(Z, best[1], k, mode="local")
        ga = refine_partition(Z, best[1], k, mode="ga", seed=0)
        il_loc = 100 * loc.sse_after / sst
        il_ga = 100 * ga.sse_after / sst
        tgt = targets[k] if targets else None
        if tgt is None:
            met, tcol = "", "-"
        else:
            met = f"local {'yes' if il_loc < tgt else 'NO'}, ga {'yes' if il_ga < tgt else 'NO'}"
            tcol = f"{tgt:.3f}"
        print(f"{name:<10} {k:>3} {mdav[2]:8.4f} ({mdav[3]:4.2f}s) "
              f"{best[0]:>11} {best[2]:7.4f} ({best[3]:4.2f}s) "
              f"{il_loc:7.4f} ({loc.seconds:4.2f}s) {il_ga:7.4f} ({ga.seconds:4.2f}s) {tcol:>8}  {met}",
              flush=True)
        out.append((k, mdav[2], best[2], il_loc, il_ga, loc.seconds, ga.seconds))
    return out


def timing(rows: int, repeats: int) -> None:
    X = census_like(rows, 0).select(list(NUMERIC_QI)).to_numpy()
    Z = standardize(X)
    k = 5
    sst = float((Z ** 2).sum())
    print(f"\ncensus_like({rows:,}, seed 0), {len(NUMERIC_QI)} numeric QIs, k={k}; "
          f"MDAV then refine local on its partition, {repeats} repeat(s), medians:")
    mdav_t, loc_t = [], []
    labels = res = None
    for _ in range(repeats):
        labels, sec = timed(lambda: _mdav.microaggregate(Z, 0, k, 0.0))
        mdav_t.append(sec)
        res = refine_partition(Z, labels, k, mode="local")
        loc_t.append(res.seconds)
    m, r = statistics.median(mdav_t), statistics.median(loc_t)
    print(f"  MDAV          {m:8.2f} s  runs {', '.join(f'{t:.2f}' for t in mdav_t)}  IL {100 * res.sse_before / sst:.4f}")
    print(f"  refine local  {r:8.2f} s  runs {', '.join(f'{t:.2f}' for t in loc_t)}  IL {100 * res.sse_after / sst:.4f}"
          f"  ({res.rounds} rounds to convergence, {res.moves:,} rows relabelled)")
    if rows >= 1_000_000:
        verdict = f"target <= 2 at 1M rows: {'met' if r <= 2 * m else 'NOT met'}"
    else:
        verdict = "informative: the 2x target is for 1M rows, where MDAV's cost grows faster than n"
    print(f"  ratio refine/MDAV = {r / m:.2f}  ({verdict})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--timing", default="100000:3,1000000:1",
                    help="timing tables as rows:repeats, comma-separated ('' skips the section)")
    ap.add_argument("--adult-rows", type=int, default=0,
                    help="held-out: use a seeded sample of this many Adult rows (0 = all 30,162)")
    args = ap.parse_args()

    # compile / load the kernels before timing anything
    Zw = standardize(np.random.default_rng(0).normal(size=(60, 3)))
    for mode in ("local", "ga"):
        refine_partition(Zw, _mdav.microaggregate(Zw, 0, 3, 0.0), 3, mode=mode)
    for name in ("census", "tarragona"):
        Z = standardize(pl.read_csv(DATA / f"{name}.csv").to_numpy())
        quality_rows(name, Z, KS, TARGETS[name])
        print()
    print("IL %, (seconds of that run); 'met' means strictly below the target.\n")

    adult = pl.read_csv(DATA / "adult.csv").select(ADULT_QI).to_numpy()
    if args.adult_rows:
        adult = adult[np.sort(np.random.default_rng(0).choice(adult.shape[0], args.adult_rows, replace=False))]
    print(f"held-out: Adult, {adult.shape[0]:,} rows x {len(ADULT_QI)} numeric columns "
          f"({', '.join(ADULT_QI)}); no published target used")
    quality_rows("adult", standardize(adult), KS)

    for spec in filter(None, args.timing.split(",")):
        rows, _, repeats = spec.partition(":")
        timing(int(rows), int(repeats or 1))


if __name__ == "__main__":
    main()
