"""maxent and mnqia block by block: census-like tables of 200k and 1M rows, --memory-limit 1GiB.

    NUMBA_CACHE_DIR=build/numba-cache python benchmarks/bench_sensitive.py \
        [--sizes 200000,1000000] [--repeats 3] [--baseline-rows 200000] [--baseline-repeats 3]

Data: ``make_census.py`` tables under benchmarks/data/census_<rows>/ (made once,
seeded; shared with bench_stream.py). Each run is ``microagg anonymize`` in a
fresh process; wall time and peak RSS come from ``/usr/bin/time -f %M`` (the
kernel's count for that process alone), the metrics from ``--report``.

* maxent: QIs age, education_years, hours_per_week, wage_income (numeric), sex,
  region (categorical); SA occupation (10 values); epsilon = 0.8 x the table's SA
  entropy (the default, the entropy itself, only admits one class).
* mnqia: k = 5 on the 8 numeric QIs, with the MDAV-range baseline of the report.

Block by block: ``--memory-limit 1GiB`` (default block size 20,000). The
baseline: the same table in memory in one block (``--block-size`` = rows), the
seed-faithful run, median of ``--baseline-repeats`` runs. The first size gets the
median of ``--repeats`` runs; larger sizes one run each (``--repeats-large``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
from pathlib import Path

import polars as pl

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_stream import timed  # noqa: E402
from make_census import make  # noqa: E402

NUM = "age,education_years,hours_per_week,wage_income,other_income,property_tax,household_size,commute_minutes"
MAXENT_QI = "age,education_years,hours_per_week,wage_income,sex,region"
SA = "occupation"


def sa_entropy(data: Path) -> float:
    counts = pl.scan_parquet(data).group_by(SA).len().collect()["len"].to_list()
    n = sum(counts)
    return -sum(c / n * math.log2(c / n) for c in counts)


def run(data: Path, work: Path, method: str, extra: list[str]) -> dict:
    out, report = work / "out.parquet", work / "report.json"
    args = ["--qi", NUM, "--k", "5"] if method == "mnqia" else ["--qi", MAXENT_QI, "--sa", SA]
    cmd = [sys.executable, "-m", "engine", "anonymize", str(data), str(out), "--method", method, *args,
           "--report", str(report), "--quiet", "--no-progress", *extra]
    wall, rss = timed(cmd)
    rep = json.loads(report.read_text())
    out.unlink()
    return {"wall": wall, "rss": rss, "report": rep}


def summary(method: str, runs: list[dict]) -> str:
    rep = runs[0]["report"]
    m = rep["metrics"]
    walls = [r["wall"] for r in runs]
    head = (f"wall {statistics.median(walls):7.1f} s (runs {', '.join(f'{w:.1f}' for w in walls)})  "
            f"peak RSS {max(r['rss'] for r in runs):5.0f} MiB  blocks {rep['blocks']}  classes {rep['groups']:,}  ")
    if method == "maxent":
        return head + (f"eps {m['epsilon']:.3f}  min H {m['entropy_min']:.3f}  mean H {m['entropy_mean']:.3f}  "
                       f"NCP/nd {m['ncp_normalized']:.4f}  C_DM {m['cdm']:,}  merges {m['merges']}  "
                       f"unit fusions {m.get('unit_fusions', '-')}")
    return head + (f"IL {m['il_percent']:.2f} %  MDAV-range IL {m['mdav_range_il_percent']:.2f} %  "
                   f"class size {rep['min_group_size']}..{rep['max_group_size']}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="200000,1000000")
    ap.add_argument("--repeats", type=int, default=3, help="runs at the first size (median)")
    ap.add_argument("--repeats-large", type=int, default=1, help="runs at the other sizes")
    ap.add_argument("--memory-limit", default="1GiB")
    ap.add_argument("--baseline-rows", type=int, default=200_000, help="in-memory baseline size (0: skip)")
    ap.add_argument("--baseline-repeats", type=int, default=3)
    ap.add_argument("--methods", default="maxent,mnqia")
    args = ap.parse_args()
    os.environ.setdefault("NUMBA_CACHE_DIR", str(HERE.parent / "build" / "numba-cache"))
    (HERE / "data").mkdir(exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="bench_sensitive_", dir=HERE / "data"))
    sizes = [int(x) for x in args.sizes.split(",") if x]  # --sizes "": the baseline only
    methods = args.methods.split(",")
    for n in sorted(set(sizes + ([args.baseline_rows] if args.baseline_rows else []))):
        data = HERE / "data" / f"census_{n}"
        if not data.exists():
            make(data, n)
    # warm the kernel cache (compilation is not measured)
    warm = HERE / "data" / f"census_{(sizes or [args.baseline_rows])[0]}"
    for method in methods:
        run(warm, work, method, ["--epsilon", "1.0", "--block-size", "5000"] if method == "maxent"
            else ["--block-size", "5000"])
    for i, n in enumerate(sizes):
        data = HERE / "data" / f"census_{n}"
        H = sa_entropy(data)
        for method in methods:
            eps = ["--epsilon", f"{0.8 * H:.6f}"] if method == "maxent" else []
            reps = args.repeats if i == 0 else args.repeats_large
            runs = [run(data, work, method, eps + ["--memory-limit", args.memory_limit]) for _ in range(reps)]
            print(f"{method:<7} n={n:>9,}  blocks, --memory-limit {args.memory_limit}: {summary(method, runs)}"
                  f"  [load {os.getloadavg()[0]:.1f}]", flush=True)
    if args.baseline_rows:
        n = args.baseline_rows
        data = HERE / "data" / f"census_{n}"
        H = sa_entropy(data)
        for method in methods:
            eps = ["--epsilon", f"{0.8 * H:.6f}"] if method == "maxent" else []
            runs = [run(data, work, method, eps + ["--block-size", str(n)]) for _ in range(args.baseline_repeats)]
            print(f"{method:<7} n={n:>9,}  in memory, one block:           {summary(method, runs)}"
                  f"  [load {os.getloadavg()[0]:.1f}]", flush=True)
    for p in work.iterdir():
        p.unlink()
    work.rmdir()


if __name__ == "__main__":
    main()
