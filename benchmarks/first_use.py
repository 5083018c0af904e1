"""Seconds of first use: the first ``microagg demo`` of a fresh install, then each
method's first use after it.

    python benchmarks/first_use.py [--only NAME,...] [--out DIR]
    python benchmarks/first_use.py --demo-repeats 3

``--demo-repeats N``: only the first demo, N times, each on a new empty cache: wall,
CPU (user + system: the run's own, and the helper process's of ``engine.warmup``) and
the load average before each, then the medians. ``MICROAGG_WARMUP=0`` in the
environment measures it without the helper, ``MICROAGG_WARMUP=1`` with it whatever
the load; ``PYTHONPATH=TREE`` another tree (run from outside this checkout).

Each command runs in a new process. The demo runs with an empty Numba cache (a
fresh install), then again (warm). Every other case starts from a copy of the
cache the demo left, runs once (what it adds: its first use) and once more
(warm). ``added`` = first - warm: the seconds its compilations cost, in wall
time and in user CPU time (steadier on a loaded machine). Sequential,
one process at a time; takes a few minutes with an empty cache.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "tests", "data")
CENSUS = os.path.join(DATA, "census.csv")
ADULT = os.path.join(DATA, "adult.csv")
QI = "AFNLWGT,AGI,EMCONTRB,FEDTAX,PTOTVAL,STATETAX,TAXINC,POTHVAL,INTVAL,PEARNVAL,FICA,WSALVAL,ERNVAL"


def cases(out):
    census = ["anonymize", CENSUS, os.path.join(out, "c.parquet"), "--qi", QI, "--k", "3"]
    adult = ["anonymize", ADULT, os.path.join(out, "a.parquet"), "--qi", "age,education,education_num,sex", "--sa", "income",
             "--epsilon", "0.5", "--k", "5"]
    return [
        ("mdav (census)", census),
        ("mdav-single", census + ["--method", "mdav-single"]),
        ("vmdav", census + ["--method", "vmdav"]),
        ("ivmdav", census + ["--method", "ivmdav"]),
        ("ama", census + ["--method", "ama"]),
        ("maxent", adult + ["--method", "maxent"]),
        ("mnqia", ["anonymize", ADULT, os.path.join(out, "m.parquet"), "--qi", "age,fnlwgt,hours_per_week",
                   "--k", "5", "--method", "mnqia"]),
        ("--refine local", census + ["--refine", "local"]),
        ("--refine ga", census + ["--refine", "ga"]),
        ("--select emad", census + ["--select", "emad", "--select-count", "3"]),
        ("--risk", census + ["--risk"]),
        ("verify", ["verify", os.path.join(out, "c.parquet"), "--qi", QI, "--k", "3", "--original", CENSUS]),
        ("demo --method vmdav", ["demo", "--method", "vmdav"]),
    ]


def timed(argv, cache, system=False):
    """(wall seconds, user CPU seconds) of ``microagg ARGV`` with that Numba cache
    (``system``: user + system CPU seconds)."""
    env = dict(os.environ, NUMBA_CACHE_DIR=cache)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    # (cwd: not this checkout, whose engine/ would shadow the one installed or on PYTHONPATH)
    p = subprocess.run([sys.executable, "-m", "engine", *argv, "--quiet"] if argv[0] != "verify"
                       else [sys.executable, "-m", "engine", *argv], env=env, capture_output=True, text=True,
                       cwd=os.path.dirname(cache))
    wall = time.perf_counter() - t
    if p.returncode != 0:
        print(f"  failed ({p.returncode}): {' '.join(argv)}\n{p.stderr}", file=sys.stderr)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + (after.ru_stime - before.ru_stime if system else 0.0)
    return wall, cpu


# the demo in a process that says its own CPU seconds and its children's (the helper's)
_SPLIT = ("import resource, sys\n"
          "from engine import cli\n"
          "code = cli.main(['demo', '--quiet'])\n"
          "own, kids = (resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))\n"
          "print(own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime)\n"
          "sys.exit(code)\n")


def cold_demos(repeats, out):
    """The first demo ``repeats`` times, each on a new empty cache; the medians. CPU:
    the run's own (its threads') and the helper's (``engine.warmup``, if it started)."""
    walls, cpus, owns = [], [], []
    for i in range(repeats):
        root = tempfile.mkdtemp(prefix="first-demo-", dir=out)
        cache = os.path.join(root, "cache")
        os.makedirs(cache)
        load = os.getloadavg()[0]
        t = time.perf_counter()
        p = subprocess.run([sys.executable, "-c", _SPLIT], env=dict(os.environ, NUMBA_CACHE_DIR=cache),
                           capture_output=True, text=True, cwd=root, check=True)
        wall = time.perf_counter() - t
        own, helper = map(float, p.stdout.split()[-2:])
        shutil.rmtree(root)
        walls.append(wall)
        cpus.append(own + helper)
        owns.append(own)
        print(f"run {i + 1}: {wall:5.1f} s wall, {own + helper:5.1f} s CPU (user + sys; the run {own:.1f}, "
              f"the helper {helper:.1f}), load {load:.1f} before", flush=True)
    print(f"median: {statistics.median(walls):.1f} s wall, {statistics.median(cpus):.1f} s CPU "
          f"(the run's own {statistics.median(owns):.1f})")


def row(name, first, warm):
    print(f"{name:<22} {first[0]:7.1f} {warm[0]:7.1f} {first[0] - warm[0]:7.1f}   "
          f"{first[1]:12.1f} {warm[1]:6.1f} {first[1] - warm[1]:6.1f}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default=None)
    ap.add_argument("--out", default=None)
    ap.add_argument("--demo-repeats", type=int, default=0)
    a = ap.parse_args()
    if a.demo_repeats:
        return cold_demos(a.demo_repeats, a.out)
    root = tempfile.mkdtemp(prefix="first-use-", dir=a.out)
    base = os.path.join(root, "cache-demo")
    os.makedirs(base)
    first = timed(["demo"], base)
    warm = timed(["demo"], base)
    print(f"{'case':<22} {'first':>7} {'warm':>7} {'added':>7}   {'(user CPU s:':>12} first, warm, added)")
    row("demo (empty cache)", first, warm)
    only = set(a.only.split(",")) if a.only else None
    for i, (name, argv) in enumerate(cases(root)):
        if only and name not in only:
            continue
        cache = os.path.join(root, f"cache-{i}")
        shutil.copytree(base, cache)
        if argv[0] == "verify":  # its input: a release made with the demo's kernels
            timed(cases(root)[0][1], cache)
            shutil.rmtree(cache)
            shutil.copytree(base, cache)
        first = timed(argv, cache)
        warm = timed(argv, cache)
        row(name, first, warm)
        shutil.rmtree(cache)
    shutil.rmtree(root)


if __name__ == "__main__":
    main()
