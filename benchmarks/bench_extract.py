"""Real census extracts: nominal QIs of many categories, missing values, strata.

    python benchmarks/bench_extract.py speed   [--rows 10000000] [--repeats 3] [--before DIR]
    python benchmarks/bench_extract.py quality [--rows 1000000] [--strata]
    python benchmarks/bench_extract.py census  [--rows 10000000] [--repeats 3] [--memory-limit 1GiB]

Data: ``engine.synth.census_extract`` (written once under benchmarks/data/, 1M-row
Parquet files, row groups of 100,000).

``speed``: the 10M-row run of 4 numeric QIs (age, education_years, hours_per_week,
wage_income) and 3 nominal ones (sex, state, industry: 2, 51 and 30 categories), no
missing values, k = 5, ``--memory-limit 1GiB``; beside it in the same run, alternating,
each in a fresh process: the I/O floor (a plain Polars read and write of the same
files) and the 4 numeric QIs alone; with ``--before DIR`` the same command run by
another checkout (``PYTHONPATH=DIR``). Median wall of the repeats, the median of the
per-pair ratios, peak RSS (/usr/bin/time). Targets: within 5x the floor, at most 1 GiB.

``quality``: the extract with missing values (hours for everyone out of work, wage
income, marital status, municipality), QIs age, sex, education_years, hours_per_week,
wage_income, marital_status, municipality (3,000) and occupation (440), k = 5
(``--strata``: with ``--strata region``). Beside it the naive release the issue names:
each stratum sorted by its QIs (in the order given, missing values last), cut into
consecutive groups of k (the last one taking the remainder), published as means and
modes the way the engine publishes. Loss per QI measured the same way for both
(numbers: 100 SSE/SST over the values present, on z-scores; categories: percent of
values changed, a missing value counted as a value). Target: the engine's mean
per-QI loss at most half the naive one's.

``census`` (issue 42): the census extract of ``quality`` (missing values in 4 QIs, 3,000
municipalities, 440 occupations, marital status as an ordinal, ``--strata region``,
``occupation_code`` derived) at 10M rows, the polished default and the fast path
(``--polish-rounds 0``) under ``--memory-limit``, alternating with the I/O floor, each in
a fresh process: the least limit each states (its refusal of 64MiB), wall, the median of
the run/floor pairs, peak RSS, the mean per-QI loss and the report's pass times.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np
import polars as pl

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
from bench_mixed_stream import cpu_timed  # noqa: E402
from bench_stream import FLOOR  # noqa: E402
from engine.synth import census_extract  # noqa: E402

SPEED_QI = "age,education_years,hours_per_week,wage_income,sex,state,industry"
SPEED_NUMERIC = "age,education_years,hours_per_week,wage_income"
QUALITY_QI = ["age", "sex", "education_years", "hours_per_week", "wage_income", "marital_status", "municipality",
              "occupation"]
CENSUS = ["--ordinal", "marital_status=single,married,divorced,widowed", "--strata", "region",
          "--derived", "occupation_code=occupation"]


def make(rows: int, missing: bool) -> Path:
    out = HERE / "data" / f"extract_{rows}{'' if missing else '_complete'}"
    if out.exists():
        return out
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for i, start in enumerate(range(0, rows, 1_000_000)):
        census_extract(min(1_000_000, rows - start), seed=0, offset=start, missing=missing).write_parquet(
            tmp / f"part-{i:05d}.parquet", row_group_size=100_000, statistics=True)
    os.replace(tmp, out)
    return out


def run(data: Path, out: Path, qi: str, extra: list[str], code: str | None = None) -> dict:
    report = out.with_suffix(".json")
    cmd = [sys.executable, *(["-P"] if code else []), "-m", "engine", "anonymize", str(data), str(out), "--qi", qi,
           "--k", "5", "--report", str(report), "--quiet", "--no-progress", *extra]
    env = None if code is None else {"PYTHONPATH": code, "NUMBA_CACHE_DIR": str(Path(code) / "build" / "numba-cache")}
    wall, rss, cpu = cpu_timed(cmd, env)
    rep = json.loads(report.read_text())
    out.unlink()
    report.unlink()
    return {"wall": wall, "rss": rss, "cpu": cpu, "il": rep["information_loss_percent"], "passes": rep["passes"],
            "by_qi": rep.get("information_loss_by_qi"), "min": rep["min_group_size"]}


def speed(args) -> None:
    data = make(args.rows, missing=False)
    work = Path(tempfile.mkdtemp(prefix="bench_extract_", dir=HERE / "data"))
    extra = ["--memory-limit", "1GiB"]
    warm = make(1_000_000, missing=False)
    run(warm, work / "warm.parquet", SPEED_QI, extra + ["--polish-rounds", "0"])
    if args.before:
        run(warm, work / "warm.parquet", SPEED_QI, extra + ["--polish-rounds", "0"], args.before)
    floors, runs, nums, befores = [], [], [], []
    for _ in range(args.repeats):
        floors.append(cpu_timed([sys.executable, "-c", FLOOR, str(data), str(work / "floor.parquet")]))
        runs.append(run(data, work / "out.parquet", SPEED_QI, extra))
        nums.append(run(data, work / "num.parquet", SPEED_NUMERIC, extra))
        if args.before:
            befores.append(run(data, work / "before.parquet", SPEED_QI, extra, args.before))
    floor = statistics.median(f[0] for f in floors)
    wall = statistics.median(r["wall"] for r in runs)
    pair = statistics.median(r["wall"] / f[0] for r, f in zip(runs, floors))
    r = runs[0]
    print(f"rows {args.rows:,}  4 numeric + 3 nominal QIs (2, 51, 30 categories), k = 5, --memory-limit 1GiB")
    walls = ", ".join(f"{x['wall']:.1f}" for x in runs)
    print(f"  engine: wall {wall:.2f} s (runs {walls})  I/O floor {floor:.2f} s"
          f"  ratio {wall / floor:.2f}x, median of pairs {pair:.2f}x (target <= 5x)  peak RSS "
          f"{max(x['rss'] for x in runs):.0f} MiB (target <= 1024)  IL {r['il']:.3f} %  smallest group {r['min']}")
    print(f"  loss per QI: {', '.join(f'{k} {v:.2f} %' for k, v in (r['by_qi'] or {}).items())}")
    print(f"  passes: {r['passes']}")
    nwall = statistics.median(x["wall"] for x in nums)
    print(f"  baseline, the 4 numeric QIs alone: wall {nwall:.2f} s ({nwall / floor:.2f}x floor)  peak RSS "
          f"{max(x['rss'] for x in nums):.0f} MiB  IL {nums[0]['il']:.3f} %")
    if befores:
        bwall = statistics.median(x["wall"] for x in befores)
        print(f"  before ({args.before}): wall {bwall:.2f} s ({bwall / floor:.2f}x floor)  peak RSS "
              f"{max(x['rss'] for x in befores):.0f} MiB  IL {befores[0]['il']:.3f} %  passes {befores[0]['passes']}")
    shutil.rmtree(work)


def naive_loss(t: pl.DataFrame, qi: list[str], k: int, strata: list[str]) -> dict:
    """Per QI, the loss of the naive release (module docstring)."""
    order = strata + qi
    s = t.select(*strata, *qi).with_row_index("_row").sort(order, nulls_last=True, maintain_order=True)
    key = pl.concat_str([pl.col(c).cast(pl.String) for c in strata], separator="\x1f") if strata else pl.lit("")
    s = s.with_columns(key.alias("_s"))
    s = s.with_columns(pl.int_range(pl.len()).over("_s").alias("_i"), pl.len().over("_s").alias("_n"))
    s = s.with_columns(pl.min_horizontal(pl.col("_i") // k, pl.col("_n") // k - 1).alias("_g"))
    s = s.with_columns(pl.concat_str([pl.col("_s"), pl.col("_g").cast(pl.String)], separator="#").alias("_g"))
    return release_loss(s, qi, "_g")


def release_loss(s: pl.DataFrame, qi: list[str], group: str) -> dict:
    """Per QI the loss of publishing each group's mean (numbers: of the values present) or
    mode (categories, a missing value a category; ties to the first in text order)."""
    out = {}
    for c in qi:
        x = s.get_column(c)
        if x.dtype.is_numeric():
            mu, sd = x.mean(), x.std(ddof=0)
            z = ((x - mu) / sd).alias("z")
            g = pl.DataFrame({"g": s[group], "z": z}).with_columns(pl.col("z").mean().over("g").alias("m"))
            sse = float(((g["z"] - g["m"]) ** 2).sum())
            sst = float(((g["z"] - g["z"].mean()) ** 2).sum())
            out[c] = 100.0 * sse / sst
        else:
            g = pl.DataFrame({"g": s[group], "v": x.cast(pl.String).fill_null("\x00missing")})
            counts = g.group_by("g", "v").len().sort(["g", "len", "v"], descending=[False, True, False])
            kept = counts.group_by("g", maintain_order=True).first()["len"].sum()
            out[c] = 100.0 * (1 - kept / s.height)
    return out


def quality(args) -> None:
    data = make(args.rows, missing=True)
    t = pl.read_parquet(data)
    strata = ["region"] if args.strata else []
    work = Path(tempfile.mkdtemp(prefix="bench_extract_", dir=HERE / "data"))
    out = work / "out.parquet"
    extra = (["--group-column", "_g", "--derived", "occupation_code=occupation"] + (["--strata", "region"] if strata else [])
             + args.extra.split())
    cmd_report = work / "out.json"
    r = None
    walls = []
    for _ in range(args.repeats):
        cmd = [sys.executable, "-m", "engine", "anonymize", str(data), str(out), "--qi", ",".join(QUALITY_QI),
               "--k", "5", "--report", str(cmd_report), "--quiet", "--no-progress", *extra]
        wall, rss, cpu = cpu_timed(cmd)
        walls.append((wall, rss))
        r = json.loads(cmd_report.read_text())
    pub = pl.read_parquet(out)
    ours = release_loss(t.with_columns(pub["_g"]), QUALITY_QI, "_g")
    naive = naive_loss(t, QUALITY_QI, 5, strata)
    rev = naive_loss(t, QUALITY_QI[::-1], 5, strata)  # (sorted by the last QI first: geography first)
    mo, mn = float(np.mean(list(ours.values()))), float(np.mean(list(naive.values())))
    mr = float(np.mean(list(rev.values())))
    print(f"rows {t.height:,}  k = 5  QIs {', '.join(QUALITY_QI)}{'  strata: region' if strata else ''}")
    print(f"  engine: wall {statistics.median(w for w, _ in walls):.1f} s  peak RSS {max(m for _, m in walls):.0f} MiB"
          f"  smallest class {pub.group_by(QUALITY_QI).len()['len'].min()}  passes {r['passes']}")
    print(f"  {'QI':16s} {'engine':>9s} {'naive':>9s} {'reversed':>9s}   (engine's own report)")
    for c in QUALITY_QI:
        print(f"  {c:16s} {ours[c]:8.2f}% {naive[c]:8.2f}% {rev[c]:8.2f}%   {r['information_loss_by_qi'][c]:.2f}%")
    print(f"  mean per-QI loss: engine {mo:.2f} %; naive, QIs sorted in the order given {mn:.2f} % (ratio "
          f"{mo / mn:.3f}), in the reverse order {mr:.2f} % (ratio {mo / mr:.3f}); target <= 0.5")
    print(f"  missing values: {json.dumps(r['metrics']['mixed'].get('missing_values'))}")
    shutil.rmtree(work)


def least_limit(data: Path, out: Path, qi: str, extra: list[str]) -> int:
    """The least limit (MiB) the engine states for this run: its refusal of 64MiB."""
    proc = subprocess.run([sys.executable, "-m", "engine", "anonymize", str(data), str(out), "--qi", qi, "--k", "5",
                           "--quiet", "--no-progress", *extra, "--memory-limit", "64MiB"], capture_output=True, text=True)
    m = re.search(r"at least (\d+)MiB", proc.stderr)
    if proc.returncode != 2 or not m:
        raise RuntimeError(f"expected a refusal of 64MiB:\n{proc.stderr}")
    return int(m.group(1))


def census(args) -> None:
    data = make(args.rows, missing=True)
    work = Path(tempfile.mkdtemp(prefix="bench_extract_", dir=HERE / "data"))
    qi = ",".join(QUALITY_QI)
    limit = ["--memory-limit", args.memory_limit]
    kinds = {"default": CENSUS, "fast path": CENSUS + ["--polish-rounds", "0"]}
    least = {name: least_limit(data, work / "o.parquet", qi, extra) for name, extra in kinds.items()}
    print(f"rows {args.rows:,}  census extract, k = 5, --memory-limit {args.memory_limit}; "
          f"{os.getloadavg()[0]:.1f} load (1 min) on {os.cpu_count()} cores", flush=True)
    floors, runs = [], {name: [] for name in kinds}
    for _ in range(args.repeats):
        floors.append(cpu_timed([sys.executable, "-c", FLOOR, str(data), str(work / "floor.parquet")])[0])
        (work / "floor.parquet").unlink()
        for name, extra in kinds.items():
            runs[name].append(run(data, work / "out.parquet", qi, extra + limit + args.extra.split()))
    floor = statistics.median(floors)
    print(f"  I/O floor {floor:.2f} s (runs {', '.join(f'{f:.1f}' for f in floors)})")
    for name, rs in runs.items():
        wall = statistics.median(r["wall"] for r in rs)
        pair = statistics.median(r["wall"] / f for r, f in zip(rs, floors))
        r = rs[0]
        walls = ", ".join(f"{x['wall']:.1f}" for x in rs)
        print(f"  {name}: least limit {least[name]} MiB  wall {wall:.1f} s (runs "
              f"{walls})  ratio {wall / floor:.2f}x, median of pairs {pair:.2f}x"
              f"  peak RSS {max(x['rss'] for x in rs):.0f} MiB  IL {r['il']:.3f} %  smallest group {r['min']}")
        print(f"    loss per QI: {', '.join(f'{k} {v:.2f} %' for k, v in (r['by_qi'] or {}).items())}")
        print(f"    passes: {r['passes']}", flush=True)
    print(f"  ({os.getloadavg()[0]:.1f} load after)")
    shutil.rmtree(work)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=("speed", "quality", "census"))
    ap.add_argument("--memory-limit", default="1GiB")
    ap.add_argument("--rows", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--before", default=None)
    ap.add_argument("--strata", action="store_true")
    ap.add_argument("--extra", default="", help="more options for the engine's run, e.g. '--weights a=2'")
    args = ap.parse_args()
    os.environ.setdefault("NUMBA_CACHE_DIR", str(HERE.parent / "build" / "numba-cache"))
    (HERE / "data").mkdir(exist_ok=True)
    if args.mode == "speed":
        args.rows = args.rows or 10_000_000
        speed(args)
    elif args.mode == "census":
        args.rows = args.rows or 10_000_000
        census(args)
    else:
        args.rows = args.rows or 1_000_000
        args.repeats = 1 if args.repeats == 3 else args.repeats
        quality(args)


if __name__ == "__main__":
    main()
