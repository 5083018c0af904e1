"""Quality at census scale: the default above 2M rows (units polished, then the seams
polished as blocks of a second plan) against the fast path, under --memory-limit 1GiB.

    python benchmarks/bench_scale_quality.py [--rows 10000000] [--repeats 2] [--polished] [--in-memory]
        [--try NAME=VALUE,...] [--profile] [--block]

Data: ``make_census.py`` (census-like, seeded) under benchmarks/data/census_<rows>; 7 numeric
QIs (``QI``), k = 5. In one run, each command in a fresh process, alternating so that all see
the same load on a shared machine:

* the I/O floor: a Polars read and write of the same files (``scan_parquet(folder)
  .sink_parquet(out)``);
* the default: ``microagg anonymize DATA OUT --qi ... --k 5 --memory-limit 1GiB``;
* the baseline: the same with ``--polish-rounds 0`` (the fast path: leaves of 256 rows, no
  polish; the default above 2M rows before the seam stage);
* with ``--polished``, once: ``--polish-rounds 32`` without a limit (above 2M rows still the
  seam stage, with up to 32 rounds a block);
* with ``--in-memory``, once: the in-memory polish (``POLISH_MAX_ROWS`` raised in that process:
  units of 100,000 rows of 8,192-row leaves polished, then the seams between them on every
  standardized row at once), without a limit: the quality reference of issue 42 item 3
  (GiB and minutes at 10M rows);
* with ``--try NAME=VALUE,...`` (repeatable), in the alternation: the default with the seam
  stage's constants changed in that process (``engine.tuning``'s ``SCALE_LEAF_SIZE``,
  ``SCALE_POLISH_ROUNDS``, ``SCALE_ROTATIONS``, ``SCALE_DESCENT``, ``SCALE_WINDOW``, and
  ``SCALE_NEAR`` for ``scale_near``), to measure an idea beside the default.

``--profile`` instead runs the default and the fast path in this process and prints, per
step of the aggregate and seam stages, the CPU seconds of the threads' own clocks (issue 42
item 4), beside the report's pass times. ``--block`` runs the seam stage's two kernels
(MDAV leaves, then polish) on one block of 100,000 rows like a seam block's (a slab of the
first part file across the seam plan's first rotated axis) for a grid of settings, and
prints the CPU seconds and the SSE of each setting on the frontier (no setting both cheaper
and lower): how the ``SCALE_`` settings were chosen (issue 42 item 3).

Printed: wall (median), ratio to the floor (median of the run/floor pairs), peak RSS from
``/usr/bin/time`` and the IL, beside the targets (IL <= 1.20 %, <= 10x the floor, <= 1 GiB);
then ``microagg verify`` of the default's output against the input (k-anonymity, pass-through;
without a limit: at 10M rows it needs about 2.5 GiB).
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
from bench_stream import FLOOR, timed  # noqa: E402
from make_census import make  # noqa: E402

QI = "age,education_years,hours_per_week,wage_income,other_income,property_tax,household_size"
# ``python -c PATCHED NAME=VALUE ... -- ARGS``: the CLI with module constants changed in that process
PATCHED = """
import sys
import engine.budget, engine.methods.centroids, engine.options, engine.planning, engine.tuning
mods = (engine.tuning, engine.options, engine.budget, engine.planning, engine.methods.centroids)
end = sys.argv.index("--")
for kv in sys.argv[1:end]:
    name, value = kv.split("=", 1)
    if name == "SCALE_NEAR":  # (a function of k in tuning: a constant here)
        name, value = "scale_near", (lambda n: lambda k: n)(int(value))
    else:
        value = eval(value)
    hits = [m for m in mods if hasattr(m, name)]
    if not hits:
        raise SystemExit(f"no constant {name}")
    for m in hits:
        setattr(m, name, value)
from engine.cli import entry
sys.argv = ["microagg", *sys.argv[end + 1:]]
entry()
"""


def timed_cpu(cmd: list[str]) -> tuple[float, float, float]:
    """(wall seconds, peak RSS MiB, CPU seconds: user + system) of one command, via
    /usr/bin/time: on a shared machine the CPU seconds compare settings where the wall
    follows the neighbours' load."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as tf:
        t = time.perf_counter()
        proc = subprocess.run(["/usr/bin/time", "-f", "%M %U %S", "-o", tf.name, *cmd], capture_output=True, text=True)
        wall = time.perf_counter() - t
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr}")
        rss, user, system = tf.read().strip().splitlines()[-1].split()
        return wall, int(rss) / 1024, float(user) + float(system)


def anonymize(data: Path, out: Path, extra: list[str], patch: list[str] | None = None) -> dict:
    report = out.with_suffix(".json")
    head = [sys.executable, "-m", "engine"] if patch is None else [sys.executable, "-c", PATCHED, *patch, "--"]
    cmd = [*head, "anonymize", str(data), str(out), "--qi", QI, "--k", "5",
           "--report", str(report), "--quiet", "--no-progress", *extra]
    wall, rss, cpu = timed_cpu(cmd)
    rep = json.loads(report.read_text())
    return {"wall": wall, "rss": rss, "cpu": cpu, "il": rep["information_loss_percent"], "passes": rep["passes"],
            "verified": rep["verified"], "polish": rep.get("polish")}


def summary(name: str, runs: list[dict], floors: list[float], target: str) -> str:
    wall = statistics.median(r["wall"] for r in runs)
    pair = statistics.median(r["wall"] / f for r, f in zip(runs, floors))
    walls = ", ".join(f"{r['wall']:.1f}" for r in runs)
    return (f"{name:<10} wall {wall:7.1f} s (runs {walls})  "
            f"ratio to floor {wall / statistics.median(floors):5.2f}x, median of pairs {pair:5.2f}x  "
            f"CPU {statistics.median(r['cpu'] for r in runs):6.1f} s  "
            f"peak RSS {max(r['rss'] for r in runs):6.0f} MiB  IL {runs[0]['il']:.4f} %  {target}\n"
            f"{'':<10} passes {runs[0]['passes']}")


def profile(data: Path, out: Path, memory_limit: str, threads: int = 2) -> None:
    """CPU seconds per step of the default's aggregate and seam stages and of the fast path's
    aggregate pass (the threads' own clocks, summed over the workers), in this process."""
    # (the engine imported into this process only for --profile and --block: the runs are subprocesses)
    import collections
    import functools
    import threading

    import engine
    from engine.io import spill
    from engine.kernels.search import polish as polish_mod
    from engine.methods import centroids
    from engine.passes import aggregate, published, seams

    spent, lock = collections.defaultdict(float), threading.Lock()

    def wrap(owner, name: str, label: str) -> None:
        fn = getattr(owner, name)

        @functools.wraps(fn)
        def timed_step(*a, **kw):
            t = time.thread_time()
            try:
                return fn(*a, **kw)
            finally:
                with lock:
                    spent[label] += time.thread_time() - t

        setattr(owner, name, timed_step)

    wrap(spill.RunStore, "read_many", "read a unit's blocks (partition store)")
    wrap(aggregate, "standardized", "standardize a unit")
    wrap(aggregate, "aggregate_leaves", "MDAV leaves")
    wrap(centroids, "aggregate_leaves", "MDAV leaves")
    wrap(seams.Router, "records", "route groups to the seam blocks")
    wrap(seams.SeamStage, "add", "append to the seam store (main thread)")
    wrap(spill.BlockStore, "read_many", "read a seam block (seam store)")
    wrap(seams, "standardized", "standardize a seam block")
    wrap(polish_mod, "polish", "polish kernel (seam blocks)")
    wrap(aggregate, "unit_sums", "groups' sums and losses")
    wrap(seams, "unit_sums", "groups' sums and losses")
    wrap(published.RowRecords, "add", "row-ordered records (main thread)")
    cols = QI.split(",")
    for name, extra in (("default", {}), ("fast path", {"polish_rounds": 0})):
        spent.clear()
        t = time.perf_counter()
        rep = engine.anonymize(data, out, cols, 5, threads=threads, memory_limit=memory_limit, **extra)
        wall = time.perf_counter() - t
        out.unlink()
        print(f"{name}: wall {wall:.1f} s, load {os.getloadavg()[0]:.1f}, IL {rep.information_loss_percent:.4f} %")
        print(f"  passes (wall s): {', '.join(f'{k} {v:.2f}' for k, v in rep.passes.items())}")
        for label, cpu in sorted(spent.items(), key=lambda kv: -kv[1]):
            print(f"  {label:42s} {cpu:7.2f} CPU-s")


def block_frontier(data: Path) -> None:
    """CPU seconds (best of 2) and SSE of the MDAV leaves then one polish on one 100,000-row
    block, for leaf sizes x near groups x rotations x descent x rounds x windows."""
    # (the engine imported into this process only for --profile and --block)
    import itertools

    import numpy as np
    import polars as pl

    from engine.kernels.groups import partition_sse
    from engine.kernels.mdav.leaf import aggregate_leaves
    from engine.kernels.search.polish import polish, rotations

    X = pl.read_parquet(sorted(data.glob("*.parquet"))[0], columns=QI.split(",")).to_numpy().astype(np.float64)
    X = (X - X.mean(0)) / X.std(0)
    order = np.argsort((X @ rotations(X.shape[1], 1)[-1].T)[:, 0], kind="stable")
    Z = np.ascontiguousarray(X[order[X.shape[0] // 2 - 50_000: X.shape[0] // 2 + 50_000]])
    polish(Z[:3000].copy(), np.arange(3000) // 5, 5, 2, 5, rotations(7, 3), np.zeros(1, np.int64), 0.01, 1, 4)
    results = []
    for leaf in (1024, 2048, 4096, 8192, 16384, 32768):
        cpu = []
        for _ in range(2):
            t = time.thread_time()
            start = aggregate_leaves(Z, 0, 5, 0.0, leaf).astype(np.int64)
            cpu.append(time.thread_time() - t)
        for near, rot, descent, rounds, window in itertools.product((5, 8), (1, 3), (0, 1), (1, 2), (4, 12)):
            spent = []
            for _ in range(2):
                lab = start.copy()
                t = time.thread_time()
                polish(Z, lab, 5, rounds, near, rotations(7, rot), np.zeros(1, np.int64), 0.01, descent, window)
                spent.append(time.thread_time() - t)
            results.append((min(cpu) + min(spent), partition_sse(Z, lab, np.int64(lab.max() + 1)),
                            f"leaves {leaf}, near {near}, rotations {rot}, descent {descent}, rounds {rounds}, "
                            f"window {window}"))
    print("one block of 100,000 rows, k = 5; the frontier (CPU s: leaves + polish):")
    best = float("inf")
    for cpu, sse, name in sorted(results):
        if sse < best:
            print(f"  CPU {cpu:6.3f} s  SSE {sse:9.1f}  {name}")
            best = sse
    from engine import tuning  # (as above)

    for label, name in (("before issue 42 item 3", "leaves 1024, near 5, rotations 1, descent 1, rounds 1, window 12"),
                        ("the SCALE_ settings", f"leaves {tuning.SCALE_LEAF_SIZE}, near {tuning.scale_near(5)}, "
                         f"rotations {tuning.SCALE_ROTATIONS}, descent {tuning.SCALE_DESCENT}, "
                         f"rounds {tuning.SCALE_POLISH_ROUNDS}, window {tuning.SCALE_WINDOW}")):
        for cpu, sse, got in results:
            if got == name:
                print(f"{label}: CPU {cpu:6.3f} s  SSE {sse:9.1f}  {name}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--memory-limit", default="1GiB")
    ap.add_argument("--polished", action="store_true", help="also --polish-rounds 32 (the seam stage above 2M rows)")
    ap.add_argument("--in-memory", action="store_true", help="also the in-memory polish (the quality reference)")
    ap.add_argument("--try", dest="tries", action="append", default=[], metavar="NAME=VALUE,...",
                    help="also the default with these seam-stage constants (repeatable)")
    ap.add_argument("--no-fast", action="store_true", help="leave out the fast path")
    ap.add_argument("--profile", action="store_true", help="CPU per step of the stages, in this process")
    ap.add_argument("--block", action="store_true", help="the settings' frontier on one seam-like block")
    args = ap.parse_args()
    os.environ.setdefault("NUMBA_CACHE_DIR", str(HERE.parent / "build" / "numba-cache"))
    (HERE / "data").mkdir(exist_ok=True)
    data = HERE / "data" / f"census_{args.rows}"
    if not data.exists():
        make(data, args.rows)
    work = Path(tempfile.mkdtemp(prefix="bench_scale_", dir=HERE / "data"))
    limit = ["--memory-limit", args.memory_limit]
    print(f"load average before: {os.getloadavg()}", flush=True)
    if args.profile or args.block:
        if args.block:
            block_frontier(data)
        else:
            profile(data, work / "profile.parquet", args.memory_limit)
        work.rmdir()
        return
    tries = {t: t.split(",") for t in args.tries}
    floors, default, fast, tried = [], [], [], {t: [] for t in tries}
    for _ in range(args.repeats):
        floors.append(timed([sys.executable, "-c", FLOOR, str(data), str(work / "floor.parquet")])[0])
        default.append(anonymize(data, work / "default.parquet", limit))
        if not args.no_fast:
            fast.append(anonymize(data, work / "fast.parquet", limit + ["--polish-rounds", "0"]))
        for t, patch in tries.items():
            tried[t].append(anonymize(data, work / "tried.parquet", limit, patch))
    print(f"rows {args.rows:,}, 7 QIs, k = 5; I/O floor {statistics.median(floors):.2f} s "
          f"(runs {', '.join(f'{f:.2f}' for f in floors)})")
    print(summary("default", default, floors, f"(targets: IL <= 1.20 %, <= 10x floor, <= {args.memory_limit})"))
    if fast:
        print(summary("fast path", fast, floors, "(baseline: --polish-rounds 0)"))
        print(f"IL default / fast path: {default[0]['il'] / fast[0]['il']:.3f}")
    print(f"self-check: {default[0]['verified']}; polish: {default[0]['polish']}")
    for t, runs in tried.items():
        print(summary("tried", runs, floors, t))
    if args.polished:
        ref = anonymize(data, work / "polished.parquet", ["--polish-rounds", "32"])
        print(f"--polish-rounds 32, no limit: wall {ref['wall']:.1f} s, peak RSS {ref['rss']:.0f} MiB, "
              f"IL {ref['il']:.4f} %")
    if args.in_memory:
        ref = anonymize(data, work / "memory.parquet", [], [f"POLISH_MAX_ROWS={1 << 62}"])
        print(f"in-memory polish (no limit): wall {ref['wall']:.1f} s, CPU {ref['cpu']:.1f} s, peak RSS {ref['rss']:.0f} MiB, "
              f"IL {ref['il']:.4f} %; default / in-memory: {default[0]['il'] / ref['il']:.3f} (issue 42: <= 1.087)"
              + "".join(f"; {t} / in-memory: {runs[0]['il'] / ref['il']:.3f}" for t, runs in tried.items()))
    check = subprocess.run([sys.executable, "-m", "engine", "verify", str(work / "default.parquet"), "--original",
                            str(data), "--qi", QI, "--k", "5"], capture_output=True, text=True)  # (no limit: a check)
    print(f"microagg verify of the default's output: exit {check.returncode}: "
          f"{(check.stdout or check.stderr).strip().splitlines()[-1] if (check.stdout or check.stderr) else ''}")
    print(f"load average after: {os.getloadavg()}", flush=True)
    for f in work.iterdir():
        f.unlink()
    work.rmdir()


if __name__ == "__main__":
    main()
