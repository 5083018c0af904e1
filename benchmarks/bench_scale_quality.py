"""Quality at census scale: the default above 2M rows (units polished, then the seams
polished as blocks of a second plan) against the fast path, under --memory-limit 1GiB.

    python benchmarks/bench_scale_quality.py [--rows 10000000] [--repeats 2] [--polished]

Data: ``make_census.py`` (census-like, seeded) under benchmarks/data/census_<rows>; 7 numeric
QIs (``QI``), k = 5. In one run, each command in a fresh process, alternating so that all see
the same load on a shared machine:

* the I/O floor: a Polars read and write of the same files (``scan_parquet(folder)
  .sink_parquet(out)``);
* the default: ``microagg anonymize DATA OUT --qi ... --k 5 --memory-limit 1GiB``;
* the baseline: the same with ``--polish-rounds 0`` (the fast path: leaves of 256 rows, no
  polish; the default above 2M rows before the seam stage);
* with ``--polished``, once: ``--polish-rounds 32`` without a limit (the seam polish of
  every row in memory: the quality reference, minutes and GiB at 10M rows).

Printed: wall (median), ratio to the floor (median of the run/floor pairs), peak RSS from
``/usr/bin/time`` and the IL, beside the targets (IL <= 1.20 %, <= 10x the floor, <= 1 GiB);
then ``microagg verify`` of the default's output against the input (k-anonymity, pass-through).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_stream import FLOOR, timed  # noqa: E402
from make_census import make  # noqa: E402

QI = "age,education_years,hours_per_week,wage_income,other_income,property_tax,household_size"


def anonymize(data: Path, out: Path, extra: list[str]) -> dict:
    report = out.with_suffix(".json")
    cmd = [sys.executable, "-m", "engine", "anonymize", str(data), str(out), "--qi", QI, "--k", "5",
           "--report", str(report), "--quiet", "--no-progress", *extra]
    wall, rss = timed(cmd)
    rep = json.loads(report.read_text())
    return {"wall": wall, "rss": rss, "il": rep["information_loss_percent"], "passes": rep["passes"],
            "verified": rep["verified"], "polish": rep.get("polish")}


def summary(name: str, runs: list[dict], floors: list[float], target: str) -> str:
    wall = statistics.median(r["wall"] for r in runs)
    pair = statistics.median(r["wall"] / f for r, f in zip(runs, floors))
    walls = ", ".join(f"{r['wall']:.1f}" for r in runs)
    return (f"{name:<10} wall {wall:7.1f} s (runs {walls})  "
            f"ratio to floor {wall / statistics.median(floors):5.2f}x, median of pairs {pair:5.2f}x  "
            f"peak RSS {max(r['rss'] for r in runs):6.0f} MiB  IL {runs[0]['il']:.4f} %  {target}\n"
            f"{'':<10} passes {runs[0]['passes']}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--memory-limit", default="1GiB")
    ap.add_argument("--polished", action="store_true", help="also the in-memory seam polish (--polish-rounds 32)")
    args = ap.parse_args()
    os.environ.setdefault("NUMBA_CACHE_DIR", str(HERE.parent / "build" / "numba-cache"))
    (HERE / "data").mkdir(exist_ok=True)
    data = HERE / "data" / f"census_{args.rows}"
    if not data.exists():
        make(data, args.rows)
    work = Path(tempfile.mkdtemp(prefix="bench_scale_", dir=HERE / "data"))
    limit = ["--memory-limit", args.memory_limit]
    print(f"load average before: {os.getloadavg()}", flush=True)
    floors, default, fast = [], [], []
    for _ in range(args.repeats):
        floors.append(timed([sys.executable, "-c", FLOOR, str(data), str(work / "floor.parquet")])[0])
        default.append(anonymize(data, work / "default.parquet", limit))
        fast.append(anonymize(data, work / "fast.parquet", limit + ["--polish-rounds", "0"]))
    print(f"rows {args.rows:,}, 7 QIs, k = 5; I/O floor {statistics.median(floors):.2f} s "
          f"(runs {', '.join(f'{f:.2f}' for f in floors)})")
    print(summary("default", default, floors, f"(targets: IL <= 1.20 %, <= 10x floor, <= {args.memory_limit})"))
    print(summary("fast path", fast, floors, "(baseline: --polish-rounds 0)"))
    print(f"IL default / fast path: {default[0]['il'] / fast[0]['il']:.3f}; self-check: {default[0]['verified']}; "
          f"polish: {default[0]['polish']}")
    if args.polished:
        ref = anonymize(data, work / "polished.parquet", ["--polish-rounds", "32"])
        print(f"polished in memory (--polish-rounds 32, no limit): wall {ref['wall']:.1f} s, peak RSS "
              f"{ref['rss']:.0f} MiB, IL {ref['il']:.4f} %")
    check = subprocess.run([sys.executable, "-m", "engine", "verify", str(work / "default.parquet"), "--original",
                            str(data), "--qi", QI, "--k", "5", *limit], capture_output=True, text=True)
    print(f"microagg verify of the default's output: exit {check.returncode}: "
          f"{(check.stdout or check.stderr).strip().splitlines()[-1] if (check.stdout or check.stderr) else ''}")
    print(f"load average after: {os.getloadavg()}", flush=True)
    for f in work.iterdir():
        f.unlink()
    work.rmdir()


if __name__ == "__main__":
    main()
