"""The leak guard's cost and false alarms (issue 39).

    python benchmarks/bench_leak.py [--rows 10000000] [--skip-cost] [--skip-alarms] [--fast]

**Cost.** A census-like table (``make_census.py``, under benchmarks/data/leak_N; made once)
anonymized with the census-scale QIs (7 numeric; person_id, sex, region, occupation and
commute_minutes pass through) at k = 5 under 1 GiB, in a fresh process: the guard's pass
time (the report's ``passes["leak"]``) against the run's wall time, both from the same run;
peak RSS from the child's rusage. Then the guard alone on the same table in a fresh
process (wall, peak RSS). Target: the guard at most 10 % of the default run's time.
``--fast``: the run on the fast path (``--polish-rounds 0``), where the guard weighs most.

**False alarms.** Every choice of 1 or 2 QIs of tests/data/census.csv, tarragona.csv and
adult.csv, the census-like generator's columns (100,000 rows) and the census extract
(``engine.synth.census_extract``, with ``--strata region``): the refusals, each named
with the test that refused (one-to-one, dependency, ranks, order). A refusal of a column
that is a function, transform or near-copy of the QI is a true leak; the rest are false
alarms (listed as such below the counts, by the rule written in ``KNOWN``). A refusal of
the row order is a true leak when the rows are in the QI's order (``sorted_on``).
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))
from _common import run_isolated  # noqa: E402
from make_census import make  # noqa: E402

QI7 = "age,education_years,hours_per_week,wage_income,other_income,property_tax,household_size"
TARGET = 0.10
# true leaks by construction: (column, QI) pairs that are functions, transforms or near-copies of each other
KNOWN = {
    "census": {("FEDTAX", "TAXINC"), ("TAXINC", "FEDTAX"), ("FICA", "PEARNVAL"), ("PEARNVAL", "FICA"),
               ("PEARNVAL", "WSALVAL"), ("WSALVAL", "FICA"), ("FICA", "WSALVAL"), ("WSALVAL", "PEARNVAL"),
               ("ERNVAL", "WSALVAL"), ("WSALVAL", "ERNVAL"), ("ERNVAL", "PEARNVAL"), ("PEARNVAL", "ERNVAL"),
               ("ERNVAL", "FICA"), ("FICA", "ERNVAL")},
    "adult": {("education", "education_num"), ("education_num", "education")},
    "extract": {("occupation_code", "occupation"), ("occupation", "occupation_code"),
                ("municipality", "region"), ("region", "municipality")},
}


ROW_ORDER = "(row order)"  # the column a row-order refusal names: the rows' positions


def cost(rows: int, fast: bool = False) -> dict:
    data = HERE / "data" / f"leak_{rows}"
    if not data.exists():
        (HERE / "data").mkdir(exist_ok=True)
        make(data, rows, file_rows=min(rows, 5_000_000))
    work = Path(tempfile.mkdtemp(prefix="bench_leak_", dir=HERE / "data"))
    out, rep = work / "out.parquet", work / "r.json"
    t = time.perf_counter()
    proc = subprocess.run(["/usr/bin/time", "-f", "%M", sys.executable, "-m", "engine", "anonymize", str(data),
                           str(out), "--qi", QI7, "--k", "5", "--memory-limit", "1GiB", "--quiet", "--no-progress",
                           "--report", str(rep), *(["--polish-rounds", "0"] if fast else [])],
                          capture_output=True, text=True)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr)
    peak = int(proc.stderr.strip().splitlines()[-1]) / 1024
    report = json.loads(rep.read_text())
    shutil.rmtree(work)
    code = f"""
import json, time, resource
from engine.io.source import open_source
from engine.options import RunConfig
from engine.passes.leak import guard
src = open_source({str(data)!r})
t = time.perf_counter()
checks = []
guard(src, RunConfig.make(qi={QI7.split(',')!r}, k=5), 0, 1_000_000, checks=checks)
print(json.dumps({{"guard_alone": time.perf_counter() - t, "checks": len(checks),
                  "peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}}))
"""
    alone = run_isolated(code)
    return {"rows": rows, "run_wall": wall, "run_report_wall": report["wall_seconds"], "run_peak_mib": peak,
            "leak_pass": report["passes"]["leak"], "share": report["passes"]["leak"] / report["wall_seconds"],
            "guard_alone": alone["guard_alone"], "guard_alone_peak_mib": alone["peak"], "checks": alone["checks"]}


def refusals(name: str, src, columns, k=3, **kw) -> list:
    """Every 1- and 2-QI choice of ``columns``: the refusals as (QI choice, column, QI, test)."""
    from engine.errors import EngineError
    from engine.options import RunConfig
    from engine.passes.leak import guard

    out = []
    for r in (1, 2):
        for qi in itertools.combinations(columns, r):
            try:
                guard(src, RunConfig.make(qi=list(qi), k=k, **kw), 0, 100_000)
            except EngineError as e:
                t = str(e)
                if t.startswith("the input's rows"):  # the row order refused: (row order, QI)
                    out.append((qi, ROW_ORDER, t.split("'")[2], "row order"))
                    continue
                kind = ("one-to-one" if "one-to-one" in t else "dependency" if " determines " in t
                        else "ranks" if " follows the order " in t else "order")
                out.append((qi, t.split("'")[1], t.split("'")[3], kind))
    return out


def sorted_on(frame, column: str, strata=()) -> bool:
    """Whether the rows are in the order of ``column`` (rising or falling, within each
    stratum): then the row position gives the column back, a true leak."""
    import polars as pl

    keys = list(strata) or [pl.lit(0)]
    s = frame.group_by(keys, maintain_order=True).agg(
        (pl.col(column).diff().drop_nulls() >= 0).all().alias("up"),
        (pl.col(column).diff().drop_nulls() <= 0).all().alias("down"))
    return bool((s["up"] | s["down"]).all())


def alarms() -> dict:
    from engine.io.source import open_source
    from engine.synth import census_extract, census_like

    import polars as pl

    tables, frames, strata = {}, {}, {"extract": ["region"]}
    for name in ("census", "tarragona", "adult"):
        src = open_source(ROOT / "tests" / "data" / f"{name}.csv")
        frames[name] = pl.read_csv(ROOT / "tests" / "data" / f"{name}.csv")
        tables[name] = refusals(name, src, src.columns)
    like = frames["census_like"] = census_like(100_000, seed=0)
    tables["census_like"] = refusals("census_like", open_source(like), like.columns)
    ext = frames["extract"] = census_extract(100_000, seed=0)
    cols = [c for c in ext.columns if c != "region"]
    tables["extract"] = refusals("extract", open_source(ext), cols, strata=["region"])
    summary = {}
    for name, found in tables.items():
        pairs = collections.Counter((c, q, kind) for _, c, q, kind in found)
        false = {k: v for k, v in pairs.items() if (k[0], k[1]) not in KNOWN.get(name, set())
                 and not (k[0] == ROW_ORDER and sorted_on(frames[name], k[1], strata.get(name, ())))}
        summary[name] = {"choices_refused": len(found), "pairs": {f"{c}~{q} ({kd})": v for (c, q, kd), v in
                                                                   sorted(pairs.items())},
                         "false_alarm_choices": sum(false.values()),
                         "false_alarm_pairs": sorted(f"{c}~{q} ({kd})" for c, q, kd in false)}
    return summary


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--skip-cost", action="store_true")
    ap.add_argument("--skip-alarms", action="store_true")
    ap.add_argument("--fast", action="store_true", help="the run on the fast path (--polish-rounds 0, issue 42 item 5)")
    a = ap.parse_args()
    os.environ.setdefault("NUMBA_CACHE_DIR", str(ROOT / "build" / "numba-cache"))
    print(f"load average {os.getloadavg()[0]:.2f}")
    if not a.skip_cost:
        c = cost(a.rows, a.fast)
        print(f"{c['rows']:,} rows: run {c['run_report_wall']:.2f} s (wall {c['run_wall']:.2f} s, peak "
              f"{c['run_peak_mib']:.0f} MiB); leak pass {c['leak_pass']:.3f} s = {100 * c['share']:.1f} % of the run "
              f"(target <= {100 * TARGET:.0f} %: {'met' if c['share'] <= TARGET else 'NOT met'}); the guard alone "
              f"{c['guard_alone']:.3f} s, peak {c['guard_alone_peak_mib']:.0f} MiB, {c['checks']} checks passed")
    if not a.skip_alarms:
        for name, s in alarms().items():
            print(f"{name}: {s['choices_refused']} QI choices refused, {s['false_alarm_choices']} false alarms "
                  f"{s['false_alarm_pairs'] or ''}")
            for p, v in s["pairs"].items():
                print(f"    {p}: {v}")


if __name__ == "__main__":
    main()
