"""Mixed-type QIs streamed: census-like rows, 4 numeric + 3 categorical QIs, k = 5, --memory-limit 1GiB.

    python benchmarks/bench_mixed_stream.py [--sizes 1000000,10000000] [--repeats 3] [--before DIR]

QIs: age, education_years, hours_per_week, wage_income (numeric) and sex, region,
occupation (nominal; 2 + 5 + 10 categories, so 21 encoded columns). For each size
(data made once by make_census.py under benchmarks/data/), in the same run and each
in a fresh process, alternating: the I/O floor (a plain Polars read and write of
the same files, as bench_stream.py) and ``microagg anonymize`` on the folder; the
median wall time of the repeats, peak RSS from /usr/bin/time, the combined and
per-kind information loss from the report. Baseline in the same run: the same
command on the 4 numeric QIs alone; with ``--before DIR`` also the mixed command run
by another checkout of the engine (``PYTHONPATH=DIR``, its own Numba cache), for a
same-run comparison with earlier code.

Targets (issue 17): 10M rows in at most 5x the I/O floor; peak RSS at most 1 GiB.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_stream import FLOOR, timed  # noqa: E402
from make_census import make  # noqa: E402

NUMERIC = "age,education_years,hours_per_week,wage_income"
QI = NUMERIC + ",sex,region,occupation"


def cpu_timed(cmd: list[str], env: dict | None = None) -> tuple[float, float, float]:
    """(wall s, peak RSS MiB, CPU s user + system) of one command: the CPU seconds
    depend much less on the other jobs of a shared machine than the wall time."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    saved = dict(os.environ)
    os.environ.update(env or {})
    try:
        wall, rss = timed(cmd)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, rss, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def engine_run(data: Path, out: Path, qi: str, extra: list[str], code: str | None = None) -> dict:
    """``code``: the engine's checkout to run (default: this one)."""
    report = out.with_suffix(".json")
    # (-P: not the current folder's engine first on the path, but PYTHONPATH's)
    cmd = [sys.executable, *(["-P"] if code else []), "-m", "engine", "anonymize", str(data), str(out), "--qi", qi,
           "--k", "5", "--report", str(report), "--quiet", "--no-progress", *extra]
    env = None if code is None else {"PYTHONPATH": code, "NUMBA_CACHE_DIR": str(Path(code) / "build" / "numba-cache")}
    wall, rss, cpu = cpu_timed(cmd, env)
    rep = json.loads(report.read_text())
    out.unlink()
    mixed = rep["metrics"].get("mixed", {})
    return {"wall": wall, "rss": rss, "cpu": cpu, "il": rep["information_loss_percent"], "passes": rep["passes"],
            "by_kind": mixed.get("information_loss_by_kind"), "min": rep["min_group_size"]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000000,10000000")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--memory-limit", default="1GiB")
    ap.add_argument("--before", default=None, help="another checkout of the engine, run on the mixed command too")
    args = ap.parse_args()
    extra = ["--memory-limit", args.memory_limit]
    os.environ.setdefault("NUMBA_CACHE_DIR", str(HERE.parent / "build" / "numba-cache"))
    (HERE / "data").mkdir(exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="bench_mixed_", dir=HERE / "data"))
    warm = HERE / "data" / "census_warm"
    if not warm.exists():
        make(warm, 50_000, 50_000)
    engine_run(warm, work / "warm.parquet", QI, extra + ["--block-size", "10000"])
    if args.before:
        engine_run(warm, work / "warm.parquet", QI, extra + ["--block-size", "10000"], args.before)
    for n in [int(x) for x in args.sizes.split(",")]:
        data = HERE / "data" / f"census_{n}"
        if not data.exists():
            make(data, n)
        floors, runs, nums, befores = [], [], [], []
        for _ in range(args.repeats):
            floors.append(cpu_timed([sys.executable, "-c", FLOOR, str(data), str(work / "floor.parquet")]))
            runs.append(engine_run(data, work / "out.parquet", QI, extra))
            nums.append(engine_run(data, work / "num.parquet", NUMERIC, extra))
            if args.before:
                befores.append(engine_run(data, work / "before.parquet", QI, extra, args.before))
        floor = statistics.median(f[0] for f in floors)
        floor_cpu = statistics.median(f[2] for f in floors)
        wall = statistics.median(r["wall"] for r in runs)
        cpu = statistics.median(r["cpu"] for r in runs)
        pair = statistics.median(r["wall"] / f[0] for r, f in zip(runs, floors))
        rss = max(r["rss"] for r in runs)
        nwall = statistics.median(r["wall"] for r in nums)
        r = runs[0]
        walls = ", ".join(f"{x['wall']:.1f}" for x in runs)
        kinds = ", ".join(f"{k} {v:.3f} %" for k, v in (r["by_kind"] or {}).items())
        print(f"n={n:>11,}  mixed (4 numeric + 3 nominal QIs): wall {wall:7.2f} s (runs "
              f"{walls})  I/O floor {floor:6.2f} s  ratio {wall / floor:5.2f}x, "
              f"median of pairs {pair:5.2f}x (target <= 5x)  peak RSS {rss:6.0f} MiB (target <= "
              f"{args.memory_limit})  IL {r['il']:.4f} % ({kinds})  smallest group {r['min']}", flush=True)
        print(f"{'':13s}  CPU seconds (user + system): mixed {cpu:.1f}, floor {floor_cpu:.1f}: "
              f"{cpu / floor_cpu:.2f}x; numeric QIs alone {statistics.median(x['cpu'] for x in nums):.1f}", flush=True)
        print(f"{'':13s}  baseline, the 4 numeric QIs alone: wall {nwall:7.2f} s ({nwall / floor:5.2f}x floor)  "
              f"peak RSS {max(x['rss'] for x in nums):6.0f} MiB  IL {nums[0]['il']:.4f} %", flush=True)
        print(f"{'':13s}  passes (mixed): {r['passes']}", flush=True)
        if befores:
            b = befores[0]
            print(f"{'':13s}  before ({args.before}): wall {statistics.median(x['wall'] for x in befores):7.2f} s  "
                  f"CPU {statistics.median(x['cpu'] for x in befores):.1f} s "
                  f"({statistics.median(x['cpu'] for x in befores) / floor_cpu:.2f}x floor)  peak RSS "
                  f"{max(x['rss'] for x in befores):6.0f} MiB  IL {b['il']:.4f} %  passes {b['passes']}", flush=True)
    for f in work.iterdir():
        f.unlink()
    os.rmdir(work)


if __name__ == "__main__":
    main()
