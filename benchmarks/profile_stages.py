"""Where the aggregate and seam stages of the polished default spend their time (issue 42).

    python benchmarks/profile_stages.py [--rows 3000000] [--threads 2] [--fast] [--memory-limit 1GiB]

Runs the census extract of ``bench_extract.py census`` (``--rows`` rows, above
``POLISH_MAX_ROWS`` so that the seam stage runs; ``--fast``: the fast path) in this
process with the steps of the two stages wrapped, and prints each step's CPU seconds (the
threads' own clocks, summed over the workers) beside the report's pass times:

* aggregate pass: reading a unit's blocks, standardizing (the compact codes to the
  encoded columns), the MDAV leaves, routing the groups to the seam stage's blocks
  (``Router.records``) and appending them (``SeamStage.add``, in the main thread);
* seam pass: reading a seam block back, standardizing, the polish kernel, the groups'
  published values (``Mixed.published_sums``) and appending them to the row-ordered
  records (``RowRecords.add``, in the main thread).
"""

from __future__ import annotations

import argparse
import collections
import functools
import os
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
os.environ.setdefault("NUMBA_CACHE_DIR", str(HERE.parent / "build" / "numba-cache"))

import engine  # noqa: E402
from bench_extract import CENSUS, QUALITY_QI, make  # noqa: E402
from engine.encode import mixed as mixed_mod  # noqa: E402
from engine.io import spill  # noqa: E402
from engine.kernels.search import polish as polish_mod  # noqa: E402
from engine.methods import centroids  # noqa: E402
from engine.passes import published, seams  # noqa: E402

SPENT: dict = collections.defaultdict(float)
CALLS: dict = collections.Counter()
LOCK = threading.Lock()


def wrap(owner, name: str, label: str) -> None:
    fn = getattr(owner, name)

    @functools.wraps(fn)
    def timed(*a, **kw):
        t = time.thread_time()
        try:
            return fn(*a, **kw)
        finally:
            with LOCK:
                SPENT[label] += time.thread_time() - t
                CALLS[label] += 1

    setattr(owner, name, timed)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=3_000_000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--fast", action="store_true")
    ap.add_argument("--memory-limit", default="1GiB")
    args = ap.parse_args()
    data = make(args.rows, missing=True)
    wrap(spill.RunStore, "read_many", "read a unit's blocks (partition store)")
    wrap(spill.BlockStore, "read_many", "read a seam block (seam store)")
    wrap(mixed_mod.Mixed, "standardized", "standardize codes -> encoded columns")
    wrap(centroids, "aggregate_leaves", "MDAV leaves")
    wrap(seams.Router, "records", "route groups to seam blocks")
    wrap(seams.SeamStage, "add", "append to the seam store (main thread)")
    wrap(polish_mod, "polish", "polish kernel (seam blocks)")
    wrap(mixed_mod.Mixed, "published_sums", "published values and losses")
    wrap(published.RowRecords, "add", "row-ordered records (main thread)")
    opts = {c: v for c, v in zip(CENSUS[::2], CENSUS[1::2])}
    out = HERE / "data" / "profile_stages.parquet"
    t = time.perf_counter()
    rep = engine.anonymize(data, out, QUALITY_QI, 5, threads=args.threads, memory_limit=args.memory_limit,
                           ordinal={"marital_status": opts["--ordinal"].split("=")[1].split(",")},
                           strata=["region"], derived={"occupation_code": "occupation"},
                           **({"polish_rounds": 0} if args.fast else {}))
    wall = time.perf_counter() - t
    out.unlink()
    print(f"rows {args.rows:,}  threads {args.threads}  wall {wall:.1f} s  load {os.getloadavg()[0]:.1f}  "
          f"IL {rep.information_loss_percent:.3f} %  encoded columns {rep.metrics['mixed']['encoded_columns']}")
    print(f"  passes: {rep.passes}")
    for label, s in sorted(SPENT.items(), key=lambda kv: -kv[1]):
        print(f"  {label:42s} {s:7.2f} CPU-s  ({CALLS[label]} calls)")


if __name__ == "__main__":
    main()
