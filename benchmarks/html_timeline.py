"""Issue 18: where the HTML report's wall time goes, as timestamps along a 10M-row run.

    python benchmarks/html_timeline.py DATA OUTDIR [--runs 3]

Runs the same command as ``bench_html.sh`` (``microagg anonymize DATA OUT --qi ... --k 5
--memory-limit 1GiB``), without then with ``--html report.html --report run.json``,
alternating, each a fresh process. Every run's main process and the page's worker
process log timestamps (seconds since the parent started the run) with their CPU seconds
at that moment: the end of each pass (open, profile, partition, aggregate + stitch,
write), the figures sent ahead, the page requested, the JSON report written, the page
returned, the commit; in the worker its start, the end of its imports, the figures
drawn ahead and the page drawn. Prints each run's timeline, then the medians per mode
and the differences (with - without). The engine is not changed: the hooks are
wrappers installed by the runner (``RUNNER``) around the coordinator's and the
worker's functions.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

QI = "age,education_years,hours_per_week,wage_income,other_income,property_tax,household_size,commute_minutes"

RUNNER = r"""
import json, sys, time
T0, LOG = float(sys.argv[1]), sys.argv[2]
argv = sys.argv[3:]
_log = open(LOG, "a")
def ev(name):
    _log.write(json.dumps(["main", name, time.time() - T0, time.process_time()]) + "\n"); _log.flush()
ev("python started")
import functools, subprocess as _sp, types
from engine import cli, html_report, report  # (light: Polars, Numba come with the coordinator)
ev("imports done")
def wrap(owner, name, label=None, start=False):
    f = getattr(owner, name)
    @functools.wraps(f)
    def g(*a, **k):
        if start:
            ev((label or name) + " start")
        try:
            return f(*a, **k)
        finally:
            ev((label or name) + " end")
    setattr(owner, name, g)
_settings = cli._settings
def settings(*a, **k):  # the anonymize command has imported the coordinator by now
    from engine import coordinator
    from engine.io import sink
    ev("coordinator imported")
    wrap(coordinator, "_open_input", "open")
    wrap(coordinator, "_partition", "profile + partition", start=True)  # (its start: the profile's end)
    wrap(coordinator, "_aggregate_and_stitch", "aggregate + stitch")
    wrap(coordinator, "_write", "write", start=True)
    wrap(sink.CommitGroup, "commit", "commit")
    return _settings(*a, **k)
cli._settings = settings
wrap(html_report.Prerender, "__init__", "worker spawn")
wrap(html_report.Prerender, "ahead", "ahead sent")
wrap(html_report.Prerender, "request", "page requested")
wrap(html_report.Prerender, "page", "page returned", start=True)
wrap(report.Report, "write_json", "JSON report written")
WORKER = r'''
import json, sys, time
import os
T0, LOG = float(sys.argv[1]), sys.argv[2]
_log = open(LOG, "a")
def ev(name):
    _log.write(json.dumps(["worker", name, time.time() - T0, time.process_time()]) + "\n"); _log.flush()
ev("python started")
import functools
from engine import html_report as h
def wrap(name, label):
    f = getattr(h, name)
    @functools.wraps(f)
    def g(*a, **k):
        ev(label + " start")
        try:
            return f(*a, **k)
        finally:
            ev(label + " end")
    setattr(h, name, g)
wrap("_import_matplotlib", "import matplotlib")
wrap("_ahead", "figures ahead")
wrap("render", "page")
if os.environ.get("TIMELINE_WORKER_NICE"):  # (--worker-nice: the worker at another niceness)
    h.WORKER_NICE = int(os.environ["TIMELINE_WORKER_NICE"])
h._worker()
'''
class _Popen(_sp.Popen):  # the worker, with the same hooks
    def __init__(self, args, *a, **k):
        if list(args[1:]) == ["-m", "engine.html_report"]:
            args = [args[0], "-c", WORKER, str(T0), LOG]
        super().__init__(args, *a, **k)
html_report.subprocess = types.SimpleNamespace(Popen=_Popen, PIPE=_sp.PIPE, DEVNULL=_sp.DEVNULL)
import os
_exit = os._exit
def exit_(code):  # the command's end (``entry`` leaves without the interpreter's teardown)
    ev("exit")
    _exit(code)
os._exit = exit_
sys.argv = ["microagg", *argv]
cli.entry()  # as the ``microagg`` command: its environment (OMP_WAIT_POLICY), gc.freeze, ...
"""


def run_once(data, out, mode, i, env):
    log = tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False).name
    dest = os.path.join(out, "out.parquet")
    for f in (dest, os.path.join(out, "report.html")):
        if os.path.exists(f):
            os.remove(f)
    argv = ["anonymize", data, dest, "--qi", QI, "--k", "5", "--memory-limit", "1GiB", "--quiet"]
    if mode.startswith("html"):
        argv += ["--html", os.path.join(out, "report.html"), "--report", os.path.join(out, f"run-html-{i}.json")]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.time()
    subprocess.run([sys.executable, "-P", "-c", RUNNER, str(t0), log, *argv], env=env, check=True)
    wall = time.time() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    events = {}
    with open(log) as fh:
        for line in fh:
            who, name, t, c = json.loads(line)
            key = f"{who}: {name}"
            n = 2
            while key in events:  # (an event seen again: numbered)
                key = f"{who}: {name} ({n})"
                n += 1
            events[key] = (t, c)
    os.remove(log)
    events["process: end (wall)"] = (wall, cpu)
    return events


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("data")
    ap.add_argument("out")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--before", metavar="TREE", help="also run --html with the engine of this source tree "
                    "(another checkout: mode html-before; its own Numba cache in OUTDIR)")
    ap.add_argument("--worker-nice", type=int, action="append", default=[], metavar="N",
                    help="also run --html with the page's worker at niceness N (mode html-niceN)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": here}
    envs = {"plain": env, "html": env}
    if args.before:
        envs["html-before"] = {**os.environ, "PYTHONPATH": os.path.abspath(args.before),
                               "NUMBA_CACHE_DIR": os.path.abspath(os.path.join(args.out, "numba-before"))}
    for n in args.worker_nice:
        envs[f"html-nice{n}"] = {**env, "TIMELINE_WORKER_NICE": str(n)}
    runs: dict = {m: [] for m in envs}
    for i in range(1, args.runs + 1):
        for mode in envs:
            ev = run_once(args.data, args.out, mode, i, envs[mode])
            runs[mode].append(ev)
            print(f"{mode} {i} (load {open('/proc/loadavg').read().split()[0]}): " + ", ".join(
                f"{k.split(': ', 1)[1] if k.startswith('main') else k} {t:.2f}" for k, (t, _) in
                sorted(ev.items(), key=lambda kv: kv[1][0])), flush=True)
    print(f"\nmedian over {args.runs} runs: seconds since the run started (CPU seconds of that process then; "
          f"'process: end' CPU = the run's user + sys, the worker included)")
    med = {m: {k: (statistics.median(r[k][0] for r in rs if k in r), statistics.median(r[k][1] for r in rs if k in r))
               for k in {k for r in rs for k in r}} for m, rs in runs.items()}
    modes = list(runs)
    keys = sorted({k for m in modes for k in med[m]}, key=lambda k: max(med[m][k][0] for m in modes if k in med[m]))
    print(f"  {'event':<40}" + "".join(f"{m:>16}" for m in modes) + "".join(f"{m + ' - plain':>20}" for m in modes[1:]))
    for k in keys:
        row = f"  {k:<40}"
        for m in modes:
            row += f"{med[m][k][0]:7.2f} ({med[m][k][1]:5.2f})" if k in med[m] else " " * 16
        for m in modes[1:]:
            if k in med[m] and k in med["plain"]:
                row += f"    {med[m][k][0] - med['plain'][k][0]:+6.2f} ({med[m][k][1] - med['plain'][k][1]:+5.2f})"
            else:
                row += " " * 20
        print(row)
    walls = {m: [r["process: end (wall)"][0] for r in rs] for m, rs in runs.items()}

    def cpu(m):
        return statistics.median(r["process: end (wall)"][1] for r in runs[m])

    for m in modes[1:]:
        ratios = [h / p for p, h in zip(walls["plain"], walls[m])]
        print(f"{m}: wall ratio of medians {statistics.median(walls[m]) / statistics.median(walls['plain']):.3f}, "
              f"median of pair ratios {statistics.median(ratios):.3f} ({', '.join(f'{r:.3f}' for r in ratios)}); "
              f"CPU +{cpu(m) - cpu('plain'):.2f} s")


if __name__ == "__main__":
    main()
