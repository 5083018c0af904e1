"""Shared helpers for the benchmarks: timing with medians, peak RSS, warm-up."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

import numpy as np
import psutil


def warm_up() -> None:
    """Compile (or load from cache) the kernels on tiny arrays before timing."""
    import engine

    engine.microaggregate(np.random.default_rng(0).normal(size=(40, 3)), k=3)


def median_time(fn, repeats: int):
    times, out = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), times, out


def rss_mib() -> float:
    return psutil.Process().memory_info().rss / 2**20


def run_isolated(code: str) -> dict:
    """Run ``code`` (which prints a JSON dict last) in a fresh interpreter, so its
    peak RSS is its own; adds ``peak_rss_mib`` measured from the child's rusage."""
    import json
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=os.environ.copy())
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr)
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    after = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    out.setdefault("peak_rss_mib", max(after, before) / 1024)
    return out
