"""Issue 18: where the HTML report's cost goes, stage by stage, in CPU seconds.

    python benchmarks/html_stages.py RUN.json [--rows 10000000] [--repeats 3]

RUN.json: a saved ``--report`` of a run with ``--html`` (it holds the distributions).
Each stage is timed in a fresh process (``time.process_time``: this process's CPU, so
the other jobs on the machine do not count) and the median of ``--repeats`` is printed:
matplotlib's import, each section of the page (figure drawn + SVG written), the
distributions figure split into drawing and SVG serialization, and counting the
"before" histograms of ``--rows`` x (number of QIs) values.
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
t0 = time.process_time()
stage, path, rows = sys.argv[1], sys.argv[2], int(sys.argv[3])
out = {}
if stage == "import":
    import numpy
    t = time.process_time()
    from engine import html_report
    html_report._import_matplotlib()
    out["import matplotlib (Figure, backend_svg)"] = time.process_time() - t
elif stage == "sections":
    from engine import html_report
    html_report._import_matplotlib()
    report = json.load(open(path))
    for name in html_report.SECTIONS:
        t = time.process_time()
        getattr(html_report, f"_section_{name}")(report)
        out[f"section {name}"] = time.process_time() - t
    t = time.process_time()
    html_report._head(report)
    out["head"] = time.process_time() - t
elif stage == "distributions":
    from engine import html_report
    html_report._import_matplotlib()
    report = json.load(open(path))
    t = time.process_time()
    fig, caption = html_report._distributions_figure(report["distributions"])
    out["distributions: draw (artists)"] = time.process_time() - t
    t = time.process_time()
    html_report._figure(fig, caption)
    out["distributions: SVG (layout + serialization)"] = time.process_time() - t
elif stage == "count":
    import numpy as np
    from engine.passes.distributions import Distributions
    report = json.load(open(path))
    qi = report["qi"]
    rng = np.random.default_rng(0)
    X = rng.normal(size=(len(qi), 1_000_000)) * 100
    d = Distributions(qi)
    d.start(X.min(axis=1), X.max(axis=1))
    d.add(X[:, :1000])  # compiled / loaded from the cache outside the timing
    d.start(X.min(axis=1), X.max(axis=1))
    t = time.process_time()
    for _ in range(rows // X.shape[1]):
        d.add(X)
    out[f"count histograms ({rows:,} rows x {len(qi)} QIs)"] = time.process_time() - t
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
        for stage in ("import", "sections", "distributions", "count"):
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
