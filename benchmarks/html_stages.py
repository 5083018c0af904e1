"""Issue 18: where the HTML report's cost goes, stage by stage, in CPU seconds.

    python benchmarks/html_stages.py RUN.json [--rows 10000000] [--repeats 3]

RUN.json: a saved ``--report`` of a run with ``--html`` (it holds the distributions).
Each stage is timed in a fresh process (``time.process_time``: this process's CPU, so
the other jobs on the machine do not count) and the median of ``--repeats`` is printed:
the worker's stages in its order (start and imports, the distributions figure begun
from the "before" counts, the figures drawn ahead, the page after the run), each figure
alone (warm), and the run's own additions: counting the "before" histograms of
``--rows`` x (number of QIs) values (the input's first million rows, repeated) and the
"after" ones of the report's number of groups.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

STAGE = r"""
import json, sys, time
stage, path, rows = sys.argv[1], sys.argv[2], int(sys.argv[3])
out = {}
if stage == "worker":  # what the worker process does, in its order
    t = time.process_time()
    import numpy
    from engine import html_report
    html_report._import_matplotlib()
    out["worker: start, import numpy + matplotlib (Figure, backend_svg)"] = time.process_time()
    report = json.load(open(path))
    t = time.process_time()
    html_report._ahead({"distributions": {c: {"edges": d["edges"], "before": d["before"]}
                                          for c, d in report["distributions"].items()}})
    out["worker: distributions figure begun (aggregate pass)"] = time.process_time() - t
    t = time.process_time()
    html_report._ahead({k: report[k] for k in html_report.AHEAD})
    out["worker: figures drawn ahead (write pass; first SVGs)"] = time.process_time() - t
    t = time.process_time()
    html_report.render(report)
    out["worker: the page after the run (times per pass, loss per QI)"] = time.process_time() - t
elif stage == "figures":  # each figure alone, drawn again (warm), split into artists and SVG
    from engine import html_report, html_sections
    html_report._import_matplotlib()
    report = json.load(open(path))
    html_report.render(report)
    t = time.process_time()
    fig, caption = html_report._distributions_figure(report["distributions"])
    out["distributions figure: artists"] = time.process_time() - t
    t = time.process_time()
    html_sections.figure(fig, caption)
    out["distributions figure: layout + SVG"] = time.process_time() - t
    t = time.process_time()
    html_report._draw_group_sizes(report["group_size_counts"], report["k"])
    out["group-size figure"] = time.process_time() - t
    for name in ("run", "utility"):
        html_report._drawn.clear()
        html_report._ahead({k: report[k] for k in html_report.AHEAD})
        t = time.process_time()
        getattr(html_sections, f"section_{name}")(report, html_report.FIGURES)
        out[f"section {name} (figures drawn ahead excluded)"] = time.process_time() - t
elif stage == "count":  # the run's own additions (main thread)
    import numpy as np
    import polars as pl
    from engine.passes.distributions import Distributions
    report = json.load(open(path))
    qi = report["qi"]
    n = 1_000_000
    frame = pl.read_parquet(report["input"], columns=qi, n_rows=n) if report["input"].endswith(".parquet") else None
    X = np.stack([frame[c].cast(pl.Float64).to_numpy() for c in qi]) if frame is not None else \
        np.random.default_rng(0).normal(size=(len(qi), n))
    d = Distributions(qi)
    d.start(X.min(axis=1), X.max(axis=1))
    d.add(X[:, :1000])  # compiled / loaded from the cache outside the timing
    d.start(X.min(axis=1), X.max(axis=1))
    t = time.process_time()
    for _ in range(rows // X.shape[1]):
        d.add(X)
    out[f"count 'before' ({rows:,} rows x {len(qi)} QIs)"] = time.process_time() - t
    groups = report["groups"]
    C = X[:, :min(groups, X.shape[1])].T.copy()
    C = np.tile(C, (-(-groups // C.shape[0]), 1))[:groups]
    sizes = np.full(groups, 5)
    d.finish(C[:10], sizes[:10])
    t = time.process_time()
    d.finish(C, sizes)
    out[f"count 'after' ({groups:,} groups)"] = time.process_time() - t
print(json.dumps(out))
"""

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("report")
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p)}
    times: dict = {}
    for _ in range(args.repeats):
        for stage in ("worker", "figures", "count"):
            res = subprocess.run([sys.executable, "-c", STAGE, stage, args.report, str(args.rows)],
                                 env=env, capture_output=True, text=True, check=True)
            for k, v in json.loads(res.stdout.splitlines()[-1]).items():
                times.setdefault(k, []).append(v)
    print(f"CPU seconds per stage, median of {args.repeats} fresh processes "
          f"(load {open('/proc/loadavg').read().split()[0]}):")
    for k, v in times.items():
        print(f"  {k:<50} {statistics.median(v):7.3f}  ({', '.join(f'{x:.3f}' for x in v)})")


if __name__ == "__main__":
    main()
