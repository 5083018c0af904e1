"""The streamed passes on a 2-worker Dask LocalCluster against the single-machine run.

    python benchmarks/bench_dask.py [--rows 10000000] [--repeats 3] [--memory-limit 1GiB]
    python benchmarks/bench_dask.py --rows 10000000 --moved   # only the write pass's bytes moved
    python benchmarks/bench_dask.py --transfer   # blocks: a file vs through Dask

Data: ``make_census.py`` (10 Parquet files of 1M rows, row groups of 100,000), made
once under benchmarks/data/. In one run, alternating (so both see the same load on
a shared machine), each in a fresh CLI process with the same settings (k = 5,
``--memory-limit``):

* the I/O floor: a plain Polars read and write of the same files (as bench_stream.py);
* the single-machine run: ``microagg anonymize DATA OUT ...``;
* the Dask runs: the same with ``--scheduler tcp://...`` of a ``LocalCluster(n_workers=2,
  processes=True, threads_per_worker=1, memory_limit=--memory-limit)`` started by this
  script (workers restarted before each run, their RSS sampled during it, then
  warmed by a 50,000-row run: imports and cached kernels loaded, as on a long-lived cluster),
  to one Parquet file, and to a folder of part files (OUTPUT ending in "/").

Printed: median walls, the overhead (Dask / single machine, median of the pairs),
the client's peak RSS (``/usr/bin/time``), the workers' peak RSS (sampled) against
``--memory-limit``, the tasks' compute seconds (the scheduler's task stream), the IL of both, whether the outputs are
byte-identical, each pass's seconds, and the measured per-block costs that
docs/scaling.md extrapolates from. On a 2-core machine no speed-up is expected:
the two workers share the cores the single-machine run already uses.

Then the write pass's bytes moved (``moved``): one more Dask run, with a group column
and ``-v``, gives the bytes the client sent its write tasks (the engine's log line:
each range's labels and the published values of its groups) and the row -> group map;
from that map, for the same cut into ranges and for a cut into 50 ranges
(docs/scaling.md's 50 workers), what those tasks receive (labels, 4 bytes a row, and
8d bytes a group of the range) against what they would read if they shared one
memory-mapped centroid file instead (labels, and every 4 KiB page of that ``.npy``
file that their rows' groups lie in).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import types
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
from bench_stream import FLOOR, QI, timed  # noqa: E402
from make_census import make  # noqa: E402


def digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for b in iter(lambda: fh.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def run(data: Path, out: Path, extra: list[str], single: Path | None = None, keep: bool = False) -> dict:
    report = out.with_suffix(".json")
    cmd = [sys.executable, "-m", "engine", "anonymize", str(data), str(out) + ("/" if out.suffix == "" else ""),
           "--qi", QI, "--k", "5",
           "--report", str(report), "--quiet", "--no-progress", *extra]
    wall, rss = timed(cmd)
    rep = json.loads(report.read_text())
    if out.is_dir():  # a folder OUTPUT: its parts, read back, equal the single file's values
        import polars as pl

        parts = sorted(out.iterdir())
        res = {"same_values": pl.read_parquet(parts).equals(pl.read_parquet(single)) if single else None,
               "digest": None, "bytes": sum(p.stat().st_size for p in parts), "parts": len(parts)}
        shutil.rmtree(out)
    else:
        res = {"digest": digest(out), "bytes": out.stat().st_size}
        if not keep:
            out.unlink()
    res.update(wall=wall, rss=rss, il=rep["information_loss_percent"], passes=rep["passes"], blocks=rep["blocks"],
               groups=rep["groups"])
    report.unlink()
    return res


def task_costs(stream) -> dict:
    """Per task kind (its function): count, median and total compute seconds, from the
    scheduler's task stream."""
    out: dict = {}
    for t in stream:
        name = t["key"][0] if isinstance(t["key"], tuple) else t["key"]
        name = {"_batch": "aggregate units"}.get(name.split("-")[0], name.split("-")[0])
        secs = sum(s["stop"] - s["start"] for s in t["startstops"] if s["action"] == "compute")
        out.setdefault(name, []).append(secs)
    return {k: (len(v), statistics.median(v), sum(v)) for k, v in out.items()}


class WorkerPeaks:
    """Peak RSS (MiB) of the workers' processes, sampled every 50 ms while the block runs
    (psutil; the kernel's ``ru_maxrss`` of a worker forked by its nanny starts at the
    nanny's)."""

    def __init__(self, client):
        import psutil

        self.procs = [psutil.Process(pid) for pid in client.run(os.getpid).values()]
        self.peak = 0.0

    def __enter__(self):
        import threading

        self._stop = threading.Event()

        def sample():
            while not self._stop.wait(0.05):
                for p in self.procs:
                    try:
                        self.peak = max(self.peak, p.memory_info().rss / 2 ** 20)
                    except Exception:  # a worker restarted
                        pass
        self._thread = threading.Thread(target=sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        return False


def _read_block(path: str, lo: int, hi: int) -> float:
    buf = np.empty(hi - lo, np.uint8)
    with open(path, "rb") as fh:
        fh.seek(lo)
        fh.readinto(memoryview(buf))
    return float(buf[::4096].sum())


def _make_block(rows: int, d: int, seed: int):
    return np.random.default_rng(seed).random((rows, 1 + d), dtype=np.float32)


def _touch(rec) -> float:
    return float(rec[::64].sum())


def transfer(blocks: int, rows: int, d: int) -> None:
    """Blocks through a shared folder or through Dask, on a 2-worker LocalCluster: each
    block's records (row id + d values, float32) made on worker A; worker B gets them
    (a) by reading them from a file A wrote (one pread a block), or (b) as Dask data
    moved from A to B by the task that needs them. Median of 3 rounds."""
    import distributed

    work = Path(tempfile.mkdtemp(prefix="bench_dask_transfer_", dir=HERE / "data"))
    path = str(work / "part.blocks")
    size = rows * (1 + d) * 4
    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=":0") as c, \
            distributed.Client(c) as client:
        a, b = sorted(client.scheduler_info()["workers"])

        def write_part(path, blocks, rows, d):
            with open(path, "wb") as fh:
                for i in range(blocks):
                    fh.write(_make_block(rows, d, i).tobytes())
        client.submit(write_part, path, blocks, rows, d, workers=[a]).result()
        files, dasks = [], []
        for _ in range(3):
            t = time.perf_counter()
            client.gather([client.submit(_read_block, path, i * size, (i + 1) * size, workers=[b], pure=False)
                           for i in range(blocks)])
            files.append(time.perf_counter() - t)
            held = [client.submit(_make_block, rows, d, i, workers=[a], pure=False) for i in range(blocks)]
            distributed.wait(held)
            t = time.perf_counter()
            client.gather([client.submit(_touch, h, workers=[b], pure=False) for h in held])
            dasks.append(time.perf_counter() - t)
            del held
    shutil.rmtree(work)
    med = statistics.median
    print(f"{blocks} blocks of {rows:,} rows x {1 + d} float32 ({size / 2 ** 20:.2f} MiB each), worker A -> worker B:")
    print(f"  shared file (pread, page cache): {med(files):.2f} s, {1000 * med(files) / blocks:.2f} ms a block "
          f"(runs {', '.join(f'{x:.2f}' for x in files)})")
    print(f"  through Dask (A's memory -> B):  {med(dasks):.2f} s, {1000 * med(dasks) / blocks:.2f} ms a block "
          f"(runs {', '.join(f'{x:.2f}' for x in dasks)})")


def _pages_read(g: np.ndarray, d: int) -> int:
    """4 KiB pages of a (groups, d) float64 ``.npy`` file (128-byte header) that the rows
    of groups ``g`` lie in: what a task gathering their centroids from it reads."""
    return 4096 * np.unique((128 + 8 * d * g.astype(np.int64)) // 4096).shape[0]


def _cut(data: Path, count: int) -> list[tuple[int, int]]:
    """``(first row, rows)`` of the input cut into ``count`` ranges of whole row groups,
    as the write pass cuts it (``engine.cluster.ranges``)."""
    from engine.cluster.ranges import cut_ranges, row_groups

    source = types.SimpleNamespace(paths=[str(p) for p in sorted(data.glob("*.parquet"))], folder=None, label="",
                                   schema=None)
    return [(r.first, r.rows) for r in cut_ranges(source, row_groups(source), count)]


def moved(data: Path, work: Path, dask: list[str], workers: int) -> None:
    """The write pass's bytes moved (module docstring): this design, measured (the log),
    and both designs computed from the run's row -> group map, for its cut and for 50 ranges."""
    import polars as pl

    out = work / "moved.parquet"
    cmd = [sys.executable, "-m", "engine", "anonymize", str(data), str(out), "--qi", QI, "--k", "5",
           "--group-column", "g", "--quiet", "--no-progress", "-v", *dask]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr)
    line = next(x for x in proc.stderr.splitlines() if "Dask write pass" in x)
    g = pl.read_parquet(out, columns=["g"]).get_column("g").to_numpy()
    out.unlink()
    d = len(QI.split(","))
    groups = int(g.max()) + 1

    def both(count):
        cut = _cut(data, count)
        labels = sum(4 * n for _, n in cut)
        shared = labels + sum(_pages_read(g[a: a + n], d) for a, n in cut)
        by_range = labels + sum(8 * d * np.unique(g[a: a + n]).shape[0] for a, n in cut)
        return len(cut), shared, by_range

    mb = 1e6
    print(f"write pass, bytes the tasks receive ({g.shape[0]:,} rows, {groups:,} groups, {d} QIs):")
    print(f"  measured, this run: {line.split('microagg: ')[-1]}")
    for count in sorted({workers, 50}):
        n, shared, by_range = both(count)
        print(f"  {n} ranges: one shared centroid file {shared / mb:,.1f} MB (labels and the file's pages each "
              f"task's rows hit), by range {by_range / mb:,.1f} MB (labels and the range's groups' centroids): "
              f"{shared / by_range:.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--memory-limit", default="1GiB")
    ap.add_argument("--transfer", action="store_true",
                    help="only measure moving blocks between workers: a file vs through Dask")
    ap.add_argument("--moved", action="store_true", help="only measure the write pass's bytes moved")
    args = ap.parse_args()
    import distributed

    if args.transfer:
        return transfer(512, 19_531, 8)

    from engine.options import parse_bytes

    os.environ.setdefault("NUMBA_CACHE_DIR", str(HERE.parent / "build" / "numba-cache"))
    os.environ["PYTHONPATH"] = str(HERE.parent) + os.pathsep + os.environ.get("PYTHONPATH", "")
    (HERE / "data").mkdir(exist_ok=True)
    data = HERE / "data" / f"census_{args.rows}"
    if not data.exists():
        make(data, args.rows)
    work = Path(tempfile.mkdtemp(prefix="bench_dask_", dir=HERE / "data"))
    extra = ["--memory-limit", args.memory_limit, "--tmp-dir", str(work)]
    limit = parse_bytes(args.memory_limit)
    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1, memory_limit=limit,
                                  dashboard_address=":0") as cluster, distributed.Client(cluster) as client:
        dask = extra + ["--scheduler", cluster.scheduler_address]
        if args.moved:
            moved(data, work, dask, 2)
            os.rmdir(work)
            return
        warm = HERE / "data" / "census_warm"
        if not warm.exists():
            make(warm, 50_000, 50_000)
        run(warm, work / "warm.parquet", dask + ["--block-size", "10000"])  # kernels compiled and cached
        floors, local, remote, peaks, folders, tasks = [], [], [], [], [], []
        for _ in range(args.repeats):
            floors.append(timed([sys.executable, "-c", FLOOR, str(data), str(work / "floor.parquet")])[0])
            # the first single-machine output is kept for the folder runs' comparison
            local.append(run(data, work / ("single.parquet" if not local else "local.parquet"), extra,
                             keep=not local))
            client.restart()  # fresh workers, as a new cluster
            run(warm, work / "warm.parquet", dask + ["--block-size", "10000"])  # imports, kernels loaded
            with distributed.get_task_stream(client) as ts, WorkerPeaks(client) as wp:
                remote.append(run(data, work / "dask.parquet", dask))
            tasks.append(task_costs(ts.data))
            peaks.append(wp.peak)
            folders.append(run(data, work / "parts", dask, work / "single.parquet"))
            print(f"  round: single {local[-1]['wall']:.2f} s, dask {remote[-1]['wall']:.2f} s, dask to a folder "
                  f"{folders[-1]['wall']:.2f} s, floor {floors[-1]:.2f} s", flush=True)
        moved(data, work, dask, 2)
    (work / "floor.parquet").unlink(missing_ok=True)
    med = statistics.median
    lw, dw, fl = med(r["wall"] for r in local), med(r["wall"] for r in remote), med(floors)
    over = med(d["wall"] / s["wall"] for d, s in zip(remote, local))
    same = all(d["digest"] == local[0]["digest"] for d in local + remote)
    s, d = local[0], remote[0]
    print(f"rows {args.rows:,}, k=5, --memory-limit {args.memory_limit}, 2 workers x 1 thread, {os.cpu_count()} cores")
    print(f"I/O floor      {fl:7.2f} s  (runs {', '.join(f'{w:.2f}' for w in floors)})")
    lwalls = ", ".join(f"{r['wall']:.1f}" for r in local)
    dwalls = ", ".join(f"{r['wall']:.1f}" for r in remote)
    print(f"single machine {lw:7.2f} s  (runs {lwalls})  "
          f"peak RSS {max(r['rss'] for r in local):.0f} MiB  IL {s['il']:.4f} %  blocks {s['blocks']}")
    print(f"dask, 2 workers{dw:7.2f} s  (runs {dwalls})  "
          f"client peak RSS {max(r['rss'] for r in remote):.0f} MiB  worker peak RSS "
          f"{max(peaks):.0f} MiB (limit {args.memory_limit})  IL {d['il']:.4f} %")
    fw = med(r["wall"] for r in folders)
    print(f"dask, to a folder of {folders[0]['parts']} parts {fw:7.2f} s  (runs "
          f"{', '.join(str(round(r['wall'], 1)) for r in folders)})  same values as the single file: "
          f"{all(r['same_values'] for r in folders)}; passes {folders[0]['passes']}")
    print(f"overhead: dask / single = {dw / lw:.2f}x (median of pairs {over:.2f}x); "
          f"outputs byte-identical: {same}")
    print(f"passes, single: {s['passes']}")
    print(f"passes, dask:   {d['passes']}")
    for name, (n, m, tot) in sorted(tasks[len(tasks) // 2].items()):
        print(f"tasks {name}: {n} tasks, median {1000 * m:.1f} ms, total {tot:.2f} s compute "
              f"({1e9 * tot / args.rows:.0f} ns a row, {1000 * tot / s['blocks']:.2f} ms a block)")
    rows, blocks = args.rows, s["blocks"]
    agg = med(r["passes"]["aggregate"] for r in local)
    print(f"per block (single machine, {blocks} blocks of {rows / blocks:,.0f} rows): aggregate "
          f"{1000 * agg / blocks:.2f} ms wall ({os.cpu_count()} threads), partition "
          f"{1000 * med(r['passes']['partition'] for r in local) / blocks:.2f} ms, write "
          f"{1000 * med(r['passes']['write'] for r in local) / blocks:.2f} ms; output {s['bytes'] / rows:.1f} bytes/row")
    (work / "single.parquet").unlink(missing_ok=True)
    os.rmdir(work) if not any(work.iterdir()) else None


if __name__ == "__main__":
    main()
