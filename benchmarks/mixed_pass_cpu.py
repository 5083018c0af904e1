"""CPU and wall seconds per pass of one mixed-type run (issue 17), in this process.

    python benchmarks/mixed_pass_cpu.py DATA [--qi ...] [--memory-limit 1GiB] [--block-size N]

Runs as the ``microagg`` command does (``OMP_WAIT_POLICY=PASSIVE``). Wraps the
passes' entry points (the dictionary pass, pass 1, the partition pass, the
aggregate pass, the stitch, the write pass) with ``time.process_time`` (CPU of
every thread of the process) and ``time.perf_counter``: on a shared machine the CPU
seconds move much less with the other jobs than the wall time.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

QI = "age,education_years,hours_per_week,wage_income,sex,region,occupation"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("data")
    ap.add_argument("--qi", default=QI)
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--memory-limit", default="1GiB")
    ap.add_argument("--block-size", type=int, default=None)
    args = ap.parse_args()
    os.environ.setdefault("NUMBA_CACHE_DIR", str(HERE.parent / "build" / "numba-cache"))
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as the microagg command (engine.cli.entry)
    import engine
    from engine import coordinator
    from engine.encode import mixed
    from engine.methods import centroids

    spent: dict = {}

    def wrap(owner, name, label):
        fn = getattr(owner, name)

        @functools.wraps(fn)
        def run(*a, **kw):
            c, w = time.process_time(), time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                cpu, wall = spent.get(label, (0.0, 0.0))
                spent[label] = (cpu + time.process_time() - c, wall + time.perf_counter() - w)
        setattr(owner, name, run)

    wrap(mixed, "learn", "dictionary")
    wrap(centroids.CentroidFlow, "profile", "profile")
    wrap(coordinator, "_partition", "partition")
    wrap(centroids.CentroidFlow, "aggregate", "aggregate")
    wrap(centroids.CentroidFlow, "stitch", "stitch")
    wrap(centroids.CentroidFlow, "write", "write")
    with tempfile.TemporaryDirectory(dir=HERE / "data" if (HERE / "data").exists() else None) as tmp:
        c, w = time.process_time(), time.perf_counter()
        res = engine.anonymize(args.data, os.path.join(tmp, "out.parquet"), args.qi.split(","), args.k,
                               memory_limit=args.memory_limit, block_size=args.block_size)
        total = (time.process_time() - c, time.perf_counter() - w)
    print(f"total CPU {total[0]:.2f} s, wall {total[1]:.2f} s; "
          f"IL {res.information_loss_percent:.4f} %; block size {res.block_size}")
    for label, (cpu, wall) in spent.items():
        print(f"  {label:11s} CPU {cpu:6.2f} s  wall {wall:6.2f} s")


if __name__ == "__main__":
    main()
