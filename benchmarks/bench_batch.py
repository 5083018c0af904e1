"""Runs in a long-lived process: ``engine.anonymize`` called several times in one Python
process (a batch job anonymizing file after file), against the same call in fresh
processes, in one run.

    python benchmarks/bench_batch.py DATA [--runs 6] [--fresh 3] [--memory-limit 1GiB] [--k 5]

DATA: a Parquet file or folder of census-like rows (``benchmarks/make_census.py``). For
each run in the batch process it prints the wall seconds, the partition and write
passes, the run's peak RSS and the process's RSS after it (psutil); then the same call
in ``--fresh`` new processes (the baseline). Target: a later run in the batch is as fast
as a fresh process (ratio of medians about 1.0) and stays under the limit.
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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

QI = ["age", "education_years", "hours_per_week", "wage_income", "other_income", "property_tax",
      "household_size", "commute_minutes"]


def one(data: str, out: str, k: int, limit: str | None) -> dict:
    import psutil

    import engine
    import engine.coordinator  # noqa: F401  (Polars, NumPy, Numba: imported before the clock starts)

    if os.path.exists(out):
        os.remove(out)
    t = time.perf_counter()
    rep = engine.anonymize(data, out, qi=QI, k=k, memory_limit=limit)
    return {"wall": time.perf_counter() - t, "partition": rep.passes.get("partition", 0.0),
            "write": rep.passes.get("write", 0.0), "peak_mib": rep.peak_rss_bytes / 2 ** 20,
            "rss_after_mib": psutil.Process().memory_info().rss / 2 ** 20}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data")
    ap.add_argument("--runs", type=int, default=6)
    ap.add_argument("--fresh", type=int, default=3)
    ap.add_argument("--memory-limit", default="1GiB")
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # (a fresh process's single run)
    args = ap.parse_args()
    limit = args.memory_limit or None
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out.parquet")
        if args.one:
            print(json.dumps(one(args.data, out, args.k, limit)))
            return
        batch = []
        for i in range(args.runs):
            r = one(args.data, out, args.k, limit)
            batch.append(r)
            print(f"batch run {i + 1}: wall {r['wall']:.2f} s (partition {r['partition']:.2f}, write "
                  f"{r['write']:.2f}), peak RSS {r['peak_mib']:.0f} MiB, RSS after {r['rss_after_mib']:.0f} MiB",
                  flush=True)
        fresh = []
        for i in range(args.fresh):
            p = subprocess.run([sys.executable, __file__, args.data, "--one", "--k", str(args.k),
                                "--memory-limit", args.memory_limit], capture_output=True, text=True, check=True)
            r = json.loads(p.stdout.strip().splitlines()[-1])
            fresh.append(r)
            print(f"fresh process {i + 1}: wall {r['wall']:.2f} s (partition {r['partition']:.2f}, write "
                  f"{r['write']:.2f}), peak RSS {r['peak_mib']:.0f} MiB", flush=True)
    later = batch[1:] or batch
    wb = statistics.median(r["wall"] for r in later)
    wf = statistics.median(r["wall"] for r in fresh)
    print(f"batch runs 2..{len(batch)}: median wall {wb:.2f} s; fresh processes: {wf:.2f} s; ratio {wb / wf:.3f} "
          f"(target about 1.0); largest peak RSS in the batch {max(r['peak_mib'] for r in batch):.0f} MiB "
          f"(limit {args.memory_limit})")


if __name__ == "__main__":
    main()
