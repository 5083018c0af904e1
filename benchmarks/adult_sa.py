"""Tsiafoulis et al. (maximum entropy)'s two Adult experiments (maximum-entropy classes) and Ahmed et al. (MNQIA)'s
MNQIA information loss for k = 3..9, beside the MDAV-range baseline.

    NUMBA_CACHE_DIR=build/numba-cache python benchmarks/adult_sa.py [--data tests/data/adult.csv]

QIs: age is numeric; every other QI (education, marital_status, occupation,
workclass, race, sex, native_country) is categorical with a flat domain (set
generalization; the seed's taxonomies are not printed in it). Each experiment
runs with the default epsilon = H(SA) (which forces a single class, see
engine/methods/maxent.py) and with epsilon = 0.95 and 0.9 * H(SA).
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.kernels.entropy import entropy  # noqa: E402
from engine.methods.maxent import encode_table, maxent_partition  # noqa: E402
from engine.methods.mnqia import mdav_range_loss, mnqia_partition  # noqa: E402

EXPERIMENTS = [
    ("workclass", ["age", "education", "marital_status", "occupation", "race", "sex", "native_country"]),
    ("occupation", ["age", "workclass", "education", "marital_status", "race", "sex", "native_country"]),
]
# Ahmed et al. (MNQIA), Table 6, "MNQIA Technique" column (as printed; unit not stated)
SEED_TABLE6 = {3: 0.68, 4: 0.80, 5: 1.2, 6: 1.35, 7: 1.5, 8: 1.7, 9: 2.2}


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def distinct_class_bound(counts: np.ndarray, dmin: int) -> int:
    """Most tuples that classes of >= dmin distinct SA values (one tuple per value)
    can hold: max over the class count t of sum_s min(count_s, t), when that is
    >= dmin * t."""
    best = 0
    for t in range(1, int(counts.max()) + 1):
        cap = int(np.minimum(counts, t).sum())
        if cap >= dmin * t:
            best = max(best, cap)
    return best


def run_maxent(df: pl.DataFrame) -> None:
    print("== Maximum-entropy classes (Tsiafoulis et al. (maximum entropy)), Adult, %d rows" % df.height)
    hdr = (f"{'SA':<11}{'eps':>7}{'H(SA)':>7}{'classes':>9}{'min H':>8}{'mean H':>8}{'NCP':>11}{'NCP/nd':>8}"
           f"{'C_DM':>12}{'merges':>8}{'wall s':>8}{'RSS MiB':>9}")
    for sa, qi in EXPERIMENTS:
        enc = encode_table(df, qi, sa)
        H = entropy(np.bincount(enc.sa_codes))
        print(f"\nSA {sa}: {len(enc.sa_categories)} values, initial entropy {H:.4f} bits"
              + ("  (Tsiafoulis et al. (maximum entropy): 3.4)" if sa == "occupation" else "") + f"; QIs {', '.join(qi)}")
        print(hdr)
        for frac in (1.0, 0.95, 0.9):
            t = time.perf_counter()
            r = maxent_partition(enc.Q, enc.sa_codes, epsilon=None if frac == 1.0 else frac * H,
                                 qi_kinds=enc.kinds, cardinalities=enc.cardinalities, seed=0,
                                 qi_names=qi, sa_name=sa)
            wall = time.perf_counter() - t
            if frac == 1.0:
                fig5 = r.intermediate_tuples_at_or_above_epsilon
            print(f"{sa:<11}{r.epsilon:>7.3f}{H:>7.3f}{r.n_classes:>9}{r.entropy_min:>8.3f}{r.entropy_mean:>8.3f}"
                  f"{r.ncp:>11.1f}{r.ncp_normalized:>8.4f}{r.cdm:>12}{r.merges:>8}{wall:>8.2f}{peak_rss_mib():>9.0f}"
                  + ("  forced single class" if r.forced_single_class else ""))
            if frac == 0.9:
                sizes = r.class_sizes
                print(f"    eps={r.epsilon:.3f}: class sizes {sizes.min()}..{sizes.max()} (median "
                      f"{int(np.median(sizes))}), leftover joins {r.leftover_joins}, dissolved {r.dissolved}, "
                      f"incorporated {r.incorporated}; timings "
                      + ", ".join(f"{k} {v:.2f}s" for k, v in r.timings.items()))
                h = r.entropy_hist
                print("    entropy histogram (bits: classes/tuples): " + "  ".join(
                    f"[{a:.2f},{b:.2f}) {c}/{u}" for a, b, c, u in zip(h["edges"][:-1], h["edges"][1:], h["classes"],
                                                                     h["tuples"]) if c))
        # Fig. 5: the intermediate classes of Figs. 1-3 (same for every epsilon)
        counts = np.bincount(enc.sa_codes)
        dmin = int(np.ceil(2 ** H - 1e-9))
        while np.log2(dmin) < H - 1e-9:
            dmin += 1
        print(f"    Figs. 1-3 intermediate classes: {r.intermediate_classes}, entropy min "
              f"{r.intermediate_entropy_min:.3f} mean {r.intermediate_entropy_mean:.3f}; tuples in classes with "
              f"entropy >= H(SA) = {fig5}"
              f"; unplaced after the rounds {r.unplaced_after_rounds}")
        print(f"    upper bound for tuples in classes of >= {dmin} distinct values (entropy >= {H:.2f}): "
              f"{distinct_class_bound(counts, dmin)}" + ("  (Tsiafoulis et al. (maximum entropy) reports 22,831)" if sa == "occupation" else ""))




def run_mnqia(df: pl.DataFrame) -> None:
    cols = ["age", "education_num", "hours_per_week"]
    X = df.select(cols).to_numpy().astype(np.float64)
    print(f"\n== MNQIA (Ahmed et al. (MNQIA)) on Adult numeric QIs {', '.join(cols)}, {X.shape[0]} rows")
    print("IL = mean over rows of sum over QIs of (group range / attribute range), in [0, 3]; % = IL / 3")
    print(f"{'k':>3}{'segments':>14}{'MNQIA IL':>10}{'IL %':>8}{'relaxed':>9}{'seed T6':>9}"
          f"{'MDAV IL':>9}{'IL %':>7}{'MNQIA s':>9}{'MDAV s':>8}")
    for k in range(3, 10):
        t = time.perf_counter()
        r = mnqia_partition(X, k)
        tm = time.perf_counter() - t
        t = time.perf_counter()
        il, pct, _ = mdav_range_loss(X, k)
        tb = time.perf_counter() - t
        print(f"{k:>3}{str(r.n_segments):>14}{r.il:>10.4f}{r.il_percent:>8.2f}{r.relaxed_picks:>9}"
              f"{SEED_TABLE6[k]:>9.2f}{il:>9.4f}{pct:>7.2f}{tm:>9.2f}{tb:>8.2f}")
    print(f"peak RSS {peak_rss_mib():.0f} MiB (psutil RSS now {psutil.Process().memory_info().rss / 2**20:.0f} MiB)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(Path(__file__).resolve().parents[1] / "tests" / "data" / "adult.csv"))
    args = ap.parse_args()
    # compile / load the kernels on a toy table first, so wall times are run times
    toy = np.array([[0.0], [1.0], [2.0], [3.0]])
    maxent_partition(toy, np.array([0, 1, 0, 1]), epsilon=0.5)
    mnqia_partition(np.c_[toy, toy], 2)
    mdav_range_loss(np.c_[toy, toy], 2)
    df = pl.read_csv(args.data)
    t = time.perf_counter()
    run_maxent(df)
    run_mnqia(df)
    print(f"total wall {time.perf_counter() - t:.1f} s")


if __name__ == "__main__":
    main()
