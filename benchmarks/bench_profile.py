"""All-pairs dependency profile against the time to just read the same columns.

The issue's target: profiling N rows x 20 attributes with 64 bins should cost at
most the time of reading those columns (ratio <= 1), the counting hidden under I/O.
The data (20 float64 columns, dependent along a random tree, a few nulls) are
written as Parquet first, then each measurement runs in a fresh process, several
times, alternating "read" and "profile"; we print the medians of wall time and
peak RSS and the ratio profile / read.

* read: ``Source.iter_frames`` over the 20 columns in chunks, every column turned
  into a NumPy array (what the profile has to do anyway);
* profile: ``engine.select.profile(path, columns, bins=64)`` (planning from
  the Parquet statistics, one counting pass, measures, tree).

    python benchmarks/bench_profile.py --rows 2000000          # a few seconds
    python benchmarks/bench_profile.py --rows 10000000 --runs 5  # the issue's size

Peak RSS is sampled with psutil every 5 ms in the measured process (ru_maxrss,
exact, is printed beside it). Benchmarks print figures; they never gate anything.
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
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def write_data(path: str, rows: int, cols: int, seed: int = 0, group_rows: int = 1 << 20) -> None:
    """``cols`` float64 columns, each a noisy copy of a random earlier one; ~0.1% nulls."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    parent = [-1] + [int(rng.integers(0, j)) for j in range(1, cols)]
    coef = rng.uniform(0.3, 0.9, size=cols)
    names = [f"x{j:02d}" for j in range(cols)]
    writer = None
    try:
        for start in range(0, rows, group_rows):
            n = min(group_rows, rows - start)
            X = np.empty((n, cols))
            for j in range(cols):
                noise = rng.standard_normal(n)
                X[:, j] = noise if parent[j] < 0 else coef[j] * X[:, parent[j]] + np.sqrt(1 - coef[j] ** 2) * noise
            arrays = []
            for j in range(cols):
                mask = rng.random(n) < 0.001
                arrays.append(pa.array(X[:, j], mask=mask))
            table = pa.table(arrays, names=names)
            if writer is None:
                writer = pq.ParquetWriter(path, table.schema)
            writer.write_table(table, row_group_size=group_rows)
    finally:
        if writer is not None:
            writer.close()


class _PeakRSS:
    def __init__(self, every: float = 0.005):
        import psutil

        self.proc = psutil.Process()
        self.peak = self.proc.memory_info().rss
        self.every = every
        self.stop = threading.Event()
        self.th = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self.stop.is_set():
            self.peak = max(self.peak, self.proc.memory_info().rss)
            time.sleep(self.every)

    def __enter__(self):
        self.th.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.th.join()
        self.peak = max(self.peak, self.proc.memory_info().rss)


def worker(task: str, path: str, bins: int, chunk_rows: int, threads: int | None) -> dict:
    from engine import select as dependency
    from engine.io import open_source

    src = open_source(path)
    cols = src.columns
    if task == "profile":  # compile outside the timing (the cache makes this cheap)
        dependency.profile(np.zeros((4, 2)), bins=bins)
    base = _PeakRSS().proc.memory_info().rss
    with _PeakRSS() as rss:
        t0 = time.perf_counter()
        extra = {}
        if task == "read":
            n = 0
            for _, frame in src.iter_frames(cols, chunk_rows):
                for c in cols:
                    frame.get_column(c).to_numpy()
                n += frame.height
            extra["rows"] = n
        else:
            r = dependency.profile(src, cols, "mi-distance", bins=bins, chunk_rows=chunk_rows, threads=threads)
            extra["rows"] = r.n_rows
            extra["key_attributes"] = r.key_attributes
            extra["seconds"] = r.seconds
        wall = time.perf_counter() - t0
    return {
        "task": task,
        "wall": wall,
        "peak_rss_mb": rss.peak / 2**20,
        "base_rss_mb": base / 2**20,
        "ru_maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        **extra,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--cols", type=int, default=20)
    ap.add_argument("--bins", type=int, default=64)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--chunk-rows", type=int, default=1 << 18)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--dir", default=None, help="folder for the Parquet file (default: a temporary one)")
    ap.add_argument("--worker", choices=["read", "profile"], help=argparse.SUPPRESS)
    ap.add_argument("--path", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)

    if a.worker:
        print(json.dumps(worker(a.worker, a.path, a.bins, a.chunk_rows, a.threads)))
        return 0

    with tempfile.TemporaryDirectory(dir=a.dir) as tmp:
        path = os.path.join(tmp, f"profile_{a.rows}x{a.cols}.parquet")
        t0 = time.perf_counter()
        write_data(path, a.rows, a.cols)
        size = os.path.getsize(path) / 2**20
        print(f"data: {a.rows} rows x {a.cols} float64 columns, {size:.0f} MiB Parquet, written in {time.perf_counter() - t0:.1f} s")
        print(f"profile: mi-distance, {a.bins} equal bins, chunk_rows={a.chunk_rows}, threads={a.threads or 'numba default'}; {a.runs} runs each")
        res = {"read": [], "profile": []}
        for run in range(a.runs):
            for task in ("read", "profile"):
                cmd = [sys.executable, os.path.abspath(__file__), "--worker", task, "--path", path, "--bins", str(a.bins), "--chunk-rows", str(a.chunk_rows)]
                if a.threads:
                    cmd += ["--threads", str(a.threads)]
                out = subprocess.run(cmd, capture_output=True, text=True, check=True)
                r = json.loads(out.stdout.strip().splitlines()[-1])
                res[task].append(r)
                print(f"  run {run + 1} {task:<8} {r['wall']:7.2f} s  peak RSS {r['peak_rss_mb']:7.0f} MiB (ru_maxrss {r['ru_maxrss_mb']:.0f}, at start {r['base_rss_mb']:.0f})" + (f"  stages {r['seconds']}" if task == "profile" else ""))
        med = {t: statistics.median(x["wall"] for x in v) for t, v in res.items()}
        rss = {t: statistics.median(x["peak_rss_mb"] for x in v) for t, v in res.items()}
        print(f"median read    {med['read']:.2f} s   peak RSS {rss['read']:.0f} MiB")
        print(f"median profile {med['profile']:.2f} s   peak RSS {rss['profile']:.0f} MiB   key attributes {res['profile'][0]['key_attributes']}")
        print(f"ratio profile / read = {med['profile'] / med['read']:.2f}  (target <= 1)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
