"""Issue 28: ``--memory-limit`` asked vs peak RSS, at the least limit the tool states.

    python benchmarks/bench_memory_limit.py [--dir DIR] [--threads 2]

Writes (once, into DIR, default a temporary folder) a 3M-row Parquet file of 8 random
float QIs, a 1M-row one, and a 1M-row census-like CSV; then for each case runs
``microagg`` under ``/usr/bin/time -f "%M %e"`` (peak RSS of the child, wall seconds):

* the least limit, from the refusal of 64MiB (one line, exit 2);
* the run at the limit the issue used (refused up front when below the least: the
  refusing process's own peak is printed);
* the run at exactly the least limit;
* the baseline: the same run without a limit (and whether its output is byte-identical).

Each line: case, limit, exit code, wall s, peak RSS MiB, peak RSS in the report (MiB).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from engine.synth import NUMERIC_QI, census_like  # noqa: E402

LEAST = re.compile(r"at least (\d+)MiB")
FLOATS = ",".join(f"q{j}" for j in range(8))


def make(d: Path) -> None:
    rng = np.random.default_rng(28)
    if not (d / "r3m.parquet").exists():
        n = 3_000_000
        frame = pl.DataFrame({f"q{j}": rng.normal(size=n) for j in range(8)}).with_columns(
            pl.int_range(0, n).alias("id"))
        frame.write_parquet(d / "r3m.parquet", row_group_size=100_000)
        frame.head(1_000_000).write_parquet(d / "r1m.parquet", row_group_size=100_000)
    if not (d / "c1m.csv").exists():
        census_like(1_000_000, seed=0).write_csv(d / "c1m.csv")


def timed(args: list, report: Path | None = None) -> tuple[int, float, float, float | None, str]:
    """(exit code, wall s, peak RSS MiB, the report's peak MiB or None, stderr's last line)."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as fh:
        proc = subprocess.run(["/usr/bin/time", "-f", "%M %e", "-o", fh.name, sys.executable, "-m", "engine",
                               *map(str, args)], capture_output=True, text=True)
        kb, wall = fh.read().split()[-2:]
    rep = None
    if report is not None and proc.returncode == 0 and report.exists():
        rep = json.loads(report.read_text())["peak_rss_bytes"] / 2**20
    last = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ""
    return proc.returncode, float(wall), int(kb) / 1024, rep, last


def case(name: str, args: list, asked: str | None, out: Path, d: Path) -> None:
    report = d / "report.json"
    full = [*args, "--report", report, "--quiet"] if args[0] == "anonymize" else args
    code, _, _, _, line = timed([*full, "--memory-limit", "64MiB"])
    m = LEAST.search(line)
    least = f"{m.group(1)}MiB" if m else None
    print(f"{name}: least limit stated {least} ({line[:160]})", flush=True)
    limits = [x for x in (asked, least) if x is not None]
    results = {}
    for limit in [*limits, None]:
        if report.exists():
            report.unlink()
        run = full if limit is None else [*full, "--memory-limit", limit]
        code, wall, peak, rep, line = timed(run, report if args[0] == "anonymize" else None)
        same = ""
        if out.exists() and code == 0:
            results[limit] = out.read_bytes()
            if limit is None and len(results) > 1:
                same = " output " + ("identical" if all(v == results[None] for v in results.values())
                                     else "DIFFERS") + " to the limited runs"
        status = "ok" if code == 0 else f"exit {code}: {line[:120]}"
        under = "" if limit is None else (" UNDER" if peak <= int(limit[:-3]) else " ABOVE")
        print(f"  limit {limit or 'none':>8}: {status}; wall {wall:.1f} s; peak RSS {peak:.0f} MiB{under}"
              f"{'' if rep is None else f' (report {rep:.0f} MiB)'}{same}", flush=True)
        if out.exists():
            os.remove(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default=None)
    ap.add_argument("--threads", default="2")
    a = ap.parse_args()
    d = Path(a.dir or tempfile.mkdtemp(prefix="bench_memory_limit_"))
    d.mkdir(parents=True, exist_ok=True)
    make(d)
    out = d / "out.parquet"
    t = ["--threads", a.threads]
    case("3M rows x 8 float QIs (one Parquet file), mdav k=5",
         ["anonymize", d / "r3m.parquet", out, "--qi", FLOATS, "--k", "5", *t], "600MiB", out, d)
    case("1M rows x 8 float QIs, --risk (polished by default)",
         ["anonymize", d / "r1m.parquet", out, "--qi", FLOATS, "--k", "5", "--risk", *t], "600MiB", out, d)
    case("1M-row census CSV, mdav k=5 (polished by default)",
         ["anonymize", d / "c1m.csv", out, "--qi", ",".join(NUMERIC_QI), "--k", "5", *t], "250MiB", out, d)
    case("1M-row census CSV, mdav k=5, --polish-rounds 0",
         ["anonymize", d / "c1m.csv", out, "--qi", ",".join(NUMERIC_QI), "--k", "5", "--polish-rounds", "0", *t],
         "250MiB", out, d)
    # the audit commands on the 1M-row release
    subprocess.run([sys.executable, "-m", "engine", "anonymize", d / "r1m.parquet", d / "rel.parquet", "--qi",
                    FLOATS, "--k", "5", "--polish-rounds", "0", "--quiet"], check=True)
    case("microagg risk, 1M rows", ["risk", d / "r1m.parquet", d / "rel.parquet", "--qi", FLOATS], None, out, d)
    case("microagg verify --original, 1M rows", ["verify", d / "rel.parquet", "--qi", FLOATS, "--k", "5",
                                                 "--original", d / "r1m.parquet"], None, out, d)
    case("microagg profile, 1M rows", ["profile", d / "r1m.parquet", "--columns", FLOATS], None, out, d)


if __name__ == "__main__":
    main()
