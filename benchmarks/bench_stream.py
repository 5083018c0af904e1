"""Streaming engine: 1M and 10M census-like rows x 8 numeric QIs, k = 5, --memory-limit 1GiB.

    python benchmarks/bench_stream.py [--sizes 1000000,10000000] [--repeats 3] [--refine local]

For each size (data made once by make_census.py under benchmarks/data/), in the
same run and each in a fresh process:

* the I/O floor: a plain Polars read-and-write of the same files
  (``scan_parquet(folder).sink_parquet(out)``), median of the repeats; floor
  and engine runs alternate, and the median of the run/floor ratios of the
  pairs is printed beside the ratio of the medians;
* ``microagg anonymize`` on the folder, median wall time of the repeats; peak RSS
  from ``/usr/bin/time`` (the kernel's count for that process) and the IL;
* the baseline for quality: exact MDAV (one block) on the 1M-row table.

Targets (issue 3): 10M rows in at most 4x the I/O floor; peak RSS at most 1 GiB;
time(10M) / time(1M) at most 11; IL of the streamed run at most that of exact
MDAV on 1M rows.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from make_census import make  # noqa: E402

QI = "age,education_years,hours_per_week,wage_income,other_income,property_tax,household_size,commute_minutes"
FLOOR = """
import polars as pl, sys, time
t = time.perf_counter()
pl.scan_parquet(sys.argv[1]).sink_parquet(sys.argv[2])
print(time.perf_counter() - t)
"""


def timed(cmd: list[str]) -> tuple[float, float]:
    """(wall seconds, peak RSS MiB) of one command, via /usr/bin/time."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as tf:
        t = time.perf_counter()
        proc = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", tf.name, *cmd], capture_output=True, text=True)
        wall = time.perf_counter() - t
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr}")
        return wall, int(tf.read().strip().splitlines()[-1]) / 1024


def engine_run(data: Path, out: Path, extra: list[str]) -> dict:
    report = out.with_suffix(".json")
    cmd = [sys.executable, "-m", "engine", "anonymize", str(data), str(out), "--qi", QI, "--k", "5",
           "--report", str(report), "--quiet", "--no-progress", *extra]
    wall, rss = timed(cmd)
    rep = json.loads(report.read_text())
    out.unlink()
    return {"wall": wall, "rss": rss, "il": rep["information_loss_percent"], "passes": rep["passes"],
            "blocks": rep["blocks"]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000000,10000000")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--memory-limit", default="1GiB")
    ap.add_argument("--refine", default=None)
    ap.add_argument("--exact-rows", type=int, default=1_000_000, help="rows of the exact-MDAV baseline (0: skip)")
    args = ap.parse_args()
    extra = ["--memory-limit", args.memory_limit] + (["--refine", args.refine] if args.refine else [])
    os.environ.setdefault("NUMBA_CACHE_DIR", str(HERE.parent / "build" / "numba-cache"))
    (HERE / "data").mkdir(exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="bench_stream_", dir=HERE / "data"))
    # warm the kernel cache so compile time is not measured
    warm = HERE / "data" / "census_warm"
    if not warm.exists():
        make(warm, 50_000, 50_000)
    engine_run(warm, work / "warm.parquet", extra + ["--block-size", "10000"])

    results = {}
    for n in [int(x) for x in args.sizes.split(",")]:
        data = HERE / "data" / f"census_{n}"
        if not data.exists():
            make(data, n)
        # floor and run alternate, so that both see the same load on a shared machine
        floors, runs = [], []
        for _ in range(args.repeats):
            floors.append(timed([sys.executable, "-c", FLOOR, str(data), str(work / "floor.parquet")])[0])
            runs.append(engine_run(data, work / "out.parquet", extra))
        results[n] = {"floor": statistics.median(floors), "floors": floors,
                      "wall": statistics.median(r["wall"] for r in runs), "walls": [r["wall"] for r in runs],
                      "pair": statistics.median(r["wall"] / f for r, f in zip(runs, floors)),
                      "rss": max(r["rss"] for r in runs), "il": runs[0]["il"], "passes": runs[0]["passes"],
                      "blocks": runs[0]["blocks"]}
        r = results[n]
        print(f"n={n:>11,}  wall {r['wall']:7.2f} s (runs {', '.join(f'{w:.1f}' for w in r['walls'])})  "
              f"I/O floor {r['floor']:6.2f} s (runs {', '.join(f'{w:.2f}' for w in r['floors'])})  "
              f"ratio {r['wall'] / r['floor']:5.2f}x, median of pairs {r['pair']:5.2f}x (target <= 4x)  "
              f"peak RSS {r['rss']:6.0f} MiB (target <= {args.memory_limit})  IL {r['il']:.4f} %  "
              f"blocks {r['blocks']}  passes {r['passes']}", flush=True)
    sizes = sorted(results)
    if len(sizes) >= 2:
        a, b = sizes[0], sizes[-1]
        print(f"time({b:,}) / time({a:,}) = {results[b]['wall'] / results[a]['wall']:.2f} "
              f"(rows x{b / a:.0f}; target <= 11)")
    if args.exact_rows:
        data = HERE / "data" / f"census_{args.exact_rows}"
        if not data.exists():
            make(data, args.exact_rows)
        ex = engine_run(data, work / "exact.parquet", ["--block-size", str(args.exact_rows)])
        print(f"exact MDAV (one block) on {args.exact_rows:,} rows: IL {ex['il']:.4f} %  wall {ex['wall']:.1f} s  "
              f"peak RSS {ex['rss']:.0f} MiB")
        for n in sizes:
            ok = "met" if results[n]["il"] <= ex["il"] else "NOT met"
            print(f"  streamed IL at {n:,} rows {results[n]['il']:.4f} % vs exact {ex['il']:.4f} %: {ok}")
    os.rmdir(work) if not any(work.iterdir()) else None


if __name__ == "__main__":
    main()
