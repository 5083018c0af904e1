"""Census scale (issue 31): 10M and 100M census-like rows x 7 numeric QIs, k = 5, --memory-limit 1GiB.

    python benchmarks/bench_census_scale.py [--sizes 10000000,100000000] [--repeats 1] [--extra "--polish-rounds 0"]

For each size (data made once by make_census.py under benchmarks/data/scale_N, files of
5M rows), in the same run and each in a fresh process:

* the least limit the engine states (its refusal of 64MiB);
* the I/O floor: a plain Polars read-and-write of the same files
  (``scan_parquet(folder).sink_parquet(out)``); floor and engine runs alternate, and
  the median of the run/floor ratios of the pairs is printed beside the ratio of the
  medians;
* ``microagg anonymize`` on the folder under the limit: wall time, peak RSS from
  ``/usr/bin/time`` (the kernel's count for that process), IL, and the report's pass
  times.

The load average is printed before each size: the machine may be shared.

Targets (issue 31): peak RSS at most 1 GiB at 100M rows; the least limit at 100M within
10 % of 10M's; time(100M) / time(10M) at most 11; the 100M run within 5x the floor,
10M within 4x.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_stream import FLOOR, timed  # noqa: E402
from make_census import make  # noqa: E402

QI7 = "age,education_years,hours_per_week,wage_income,other_income,property_tax,household_size"
FILE_ROWS = 5_000_000


def anonymize(data: Path, out: Path, limit: str, extra: list[str]) -> list[str]:
    return [sys.executable, "-m", "engine", "anonymize", str(data), str(out), "--qi", QI7, "--k", "5",
            "--memory-limit", limit, "--quiet", "--no-progress", *extra]


def least_limit(data: Path, out: Path, extra: list[str]) -> int:
    """The least limit (MiB) the engine states for this run: its refusal of 64MiB."""
    proc = subprocess.run(anonymize(data, out, "64MiB", extra), capture_output=True, text=True)
    m = re.search(r"at least (\d+)MiB", proc.stderr)
    if proc.returncode != 2 or not m:
        raise RuntimeError(f"expected a refusal of 64MiB:\n{proc.stderr}")
    return int(m.group(1))


def engine_run(data: Path, out: Path, limit: str, extra: list[str]) -> dict:
    report = out.with_suffix(".json")
    wall, rss = timed(anonymize(data, out, limit, [*extra, "--report", str(report)]))
    rep = json.loads(report.read_text())
    out.unlink()
    return {"wall": wall, "rss": rss, "il": rep["information_loss_percent"], "passes": rep["passes"],
            "blocks": rep["blocks"], "verified": rep["verified"]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="10000000,100000000")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--memory-limit", default="1GiB")
    ap.add_argument("--extra", default="", help="more anonymize options, e.g. \"--polish-rounds 0\"")
    args = ap.parse_args()
    extra = shlex.split(args.extra)
    os.environ.setdefault("NUMBA_CACHE_DIR", str(HERE.parent / "build" / "numba-cache"))
    (HERE / "data").mkdir(exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="bench_scale_", dir=HERE / "data"))
    warm = HERE / "data" / "census_warm"  # the kernels compiled (or loaded) before anything is timed
    if not warm.exists():
        make(warm, 50_000, 50_000)
    subprocess.run(anonymize(warm, work / "warm.parquet", "1GiB", [*extra, "--block-size", "10000"]), check=True)
    (work / "warm.parquet").unlink()
    results = {}
    for n in [int(x) for x in args.sizes.split(",")]:
        data = HERE / "data" / f"scale_{n}"
        if not data.exists():
            make(data, n, FILE_ROWS)
        print(f"n={n:,}: {os.getloadavg()[0]:.1f} load (1 min) on {os.cpu_count()} cores", flush=True)
        least = least_limit(data, work / "out.parquet", extra)
        floors, runs = [], []
        for _ in range(args.repeats):
            floors.append(timed([sys.executable, "-c", FLOOR, str(data), str(work / "floor.parquet")])[0])
            (work / "floor.parquet").unlink()
            runs.append(engine_run(data, work / "out.parquet", args.memory_limit, extra))
        r = results[n] = {"least": least, "floor": statistics.median(floors), "floors": floors,
                          "wall": statistics.median(x["wall"] for x in runs), "walls": [x["wall"] for x in runs],
                          "pair": statistics.median(x["wall"] / f for x, f in zip(runs, floors)),
                          "rss": max(x["rss"] for x in runs), "il": runs[0]["il"], "passes": runs[0]["passes"],
                          "blocks": runs[0]["blocks"], "verified": runs[0]["verified"]}
        print(f"n={n:>11,}  least limit {least} MiB  wall {r['wall']:7.1f} s (runs "
              f"{', '.join(f'{w:.1f}' for w in r['walls'])})  I/O floor {r['floor']:6.1f} s (runs "
              f"{', '.join(f'{w:.1f}' for w in r['floors'])})  ratio {r['wall'] / r['floor']:5.2f}x, median of "
              f"pairs {r['pair']:5.2f}x  peak RSS {r['rss']:6.0f} MiB (limit {args.memory_limit})  "
              f"IL {r['il']:.4f} %  blocks {r['blocks']}  verified {r['verified']}", flush=True)
        print(f"  passes: {r['passes']}  ({os.getloadavg()[0]:.1f} load after)", flush=True)
    sizes = sorted(results)
    if len(sizes) >= 2:
        a, b = sizes[0], sizes[-1]
        print(f"time({b:,}) / time({a:,}) = {results[b]['wall'] / results[a]['wall']:.2f} (rows x{b / a:.0f}; "
              f"target <= 11); least limit {results[a]['least']} -> {results[b]['least']} MiB "
              f"({100 * (results[b]['least'] / results[a]['least'] - 1):+.1f} %; target within 10 %)")
    os.rmdir(work) if not any(work.iterdir()) else None


if __name__ == "__main__":
    main()
