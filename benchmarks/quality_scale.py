"""Quality at scale (issue 16): the default streamed run against exact MDAV, in one run.

    python benchmarks/quality_scale.py [--tables census:200000,census:1000000,normal:100000]
                                       [--ks 3,5,10] [--repeats 3] [--json FILE]

Tables: ``engine.synth.census_like(n)`` with its 8 numeric QIs, and n x 10 standard
normal rows (``numpy.random.default_rng(0)``). For each table and k, in this one
process (kernels compiled by a warm-up first), ``engine.microaggregate`` on the
in-memory table with:

* default: the default settings (blocks of 20,000 rows; up to 2M rows the polished
  streamed path: leaves of ``config.polish_leaf_size(k)`` rows (32,768 at k <= 3,
  8,192 from k = 5) in units of 100,000, polish in the workers and across unit
  seams, each stopping at its first round that gains less than 1 % of the SSE);
* no polish: ``polish_rounds=0`` (the previous default: leaves of 256 rows);
* leaf 0: ``leaf_size=0, polish_rounds=0`` (exact MDAV on each 20,000-row block);
* exact: ``block_size=n`` (one block: exact MDAV, the paper's algorithm).

Wall seconds are medians of ``--repeats`` runs (exact: one run; it takes minutes
at 1M rows). Ratios: IL(default) / IL(exact) (target <= 1.00 in every cell) and
time(default) / time(exact) (target <= 0.25), each printed with the target and
"met" or "MISSED"; also the default's process CPU seconds (all threads), the ratio
of CPU seconds default / exact (less sensitive to other jobs than the walls), the
peak RSS of the default's runs (the sampler of the run's report), and the load
average before and after (other jobs on the machine inflate the walls).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import engine  # noqa: E402
from engine.synth import NUMERIC_QI, census_like  # noqa: E402


def make(kind: str, n: int):
    if kind == "census":
        return census_like(n).select(list(NUMERIC_QI)), list(NUMERIC_QI)
    if kind == "normal":
        X = np.random.default_rng(0).normal(size=(n, 10))
        return X, None
    raise SystemExit(f"unknown table {kind!r}")


MODES = {
    "default": {},
    "no polish": {"polish_rounds": 0},
    "leaf 0": {"leaf_size": 0, "polish_rounds": 0},
}


def run(data, qi, k, repeats, **kw):
    walls, cpus, il, peak = [], [], None, 0
    for _ in range(repeats):
        c, t = time.process_time(), time.perf_counter()
        res = engine.microaggregate(data, qi=qi, k=k, **kw)
        walls.append(time.perf_counter() - t)
        cpus.append(time.process_time() - c)
        il = res.report.information_loss_percent
        rep = res.report
        peak = max(peak, rep.peak_rss_bytes)
    return {"il": il, "wall": statistics.median(walls), "walls": [round(w, 3) for w in walls],
            "cpu": statistics.median(cpus), "peak_rss_mib": peak / 2**20,
            "groups": rep.groups, "polish": rep.polish, "passes": rep.passes}


def verdict(value: float, target: float) -> str:
    return f"{value:.3f} (<= {target:.2f} {'met' if value <= target else 'MISSED'})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tables", default="census:200000,census:1000000,normal:100000")
    ap.add_argument("--ks", default="3,5,10")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", default=None, help="also write every figure to this file")
    a = ap.parse_args()
    ks = [int(x) for x in a.ks.split(",")]
    # warm-up: every kernel of every mode compiled (or loaded from the cache) before timing
    w, wq = make("census", 12_000)
    for kw in list(MODES.values()):
        engine.microaggregate(w, qi=wq, k=3, block_size=2_000, **kw)
    engine.microaggregate(w, qi=wq, k=3, block_size=12_000)
    rows = []
    print("load average before: %.2f %.2f %.2f" % os.getloadavg(), flush=True)
    print(f"{'table':<16} {'k':>3} {'exact IL':>9} {'exact s':>8} {'default IL':>10} {'default s':>9} {'cpu s':>6} "
          f"{'RSS MiB':>7} {'IL ratio (target)':>22} {'time ratio (target)':>22} {'cpu ratio':>9} {'no-polish IL':>12} {'s':>6} "
          f"{'leaf-0 IL':>9} {'s':>6}", flush=True)
    for spec in a.tables.split(","):
        kind, n = spec.split(":")
        n = int(n)
        data, qi = make(kind, n)
        for k in ks:
            cell = {"table": kind, "rows": n, "k": k}
            for name, kw in MODES.items():
                cell[name] = run(data, qi, k, a.repeats, **kw)
            cell["exact"] = run(data, qi, k, 1, block_size=n)
            cell["il_ratio"] = cell["default"]["il"] / cell["exact"]["il"]
            cell["time_ratio"] = cell["default"]["wall"] / cell["exact"]["wall"]
            cell["cpu_ratio"] = cell["default"]["cpu"] / cell["exact"]["cpu"]
            rows.append(cell)
            d = cell["default"]
            print(f"{kind + ' ' + format(n, ','):<16} {k:>3} {cell['exact']['il']:>9.4f} {cell['exact']['wall']:>8.2f} "
                  f"{d['il']:>10.4f} {d['wall']:>9.2f} {d['cpu']:>6.2f} {d['peak_rss_mib']:>7.0f} "
                  f"{verdict(cell['il_ratio'], 1.0):>22} {verdict(cell['time_ratio'], 0.25):>22} {cell['cpu_ratio']:>9.3f} "
                  f"{cell['no polish']['il']:>12.4f} {cell['no polish']['wall']:>6.2f} "
                  f"{cell['leaf 0']['il']:>9.4f} {cell['leaf 0']['wall']:>6.2f}", flush=True)
            if a.json:
                Path(a.json).write_text(json.dumps(rows, indent=1))
    print("load average after: %.2f %.2f %.2f" % os.getloadavg())
    met_il = all(c["il_ratio"] <= 1.0 for c in rows)
    met_t = all(c["time_ratio"] <= 0.25 for c in rows)
    print(f"IL ratio <= 1.00 in every cell: {'met' if met_il else 'MISSED'}; "
          f"time ratio <= 0.25 in every cell: {'met' if met_t else 'MISSED'} "
          f"(worst IL ratio {max(c['il_ratio'] for c in rows):.3f}, worst time ratio "
          f"{max(c['time_ratio'] for c in rows):.3f})")


if __name__ == "__main__":
    main()
