"""``anonymize --risk`` and ``microagg risk`` at their least memory limits, measured
from outside (``/usr/bin/time -v``), on tables with nominal QIs of many categories
(issue 41 item 1): the limit the refusal states, then the run at it (peak RSS, wall).

    python benchmarks/bench_risk_memory.py [case ...]     # cases: a b c (default: all)

a: 20,000 rows, QIs age, income and a nominal QI of 1,000 categories;
b: 30,000 rows, the same with 2,000 categories;
c: 50,000 rows, 8 mixed QIs (3 numeric, a date, nominal QIs of 12, 100, 500 and 2,000
categories). Tables are random (seeded) Parquet files in a temporary folder.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import polars as pl

CASES = {"a": (20_000, [1_000]), "b": (30_000, [2_000]), "c": (50_000, [12, 100, 500, 2_000])}


def table(rows: int, cats: list[int], seed: int = 41) -> tuple[pl.DataFrame, list[str]]:
    rng = np.random.default_rng(seed)
    cols = {"age": rng.integers(16, 90, rows), "income": rng.lognormal(10, 1, rows).round(2)}
    if len(cats) > 1:
        cols["hours"] = rng.integers(0, 80, rows)
        start = dt.date(1930, 1, 1)
        cols["born"] = [start + dt.timedelta(days=int(x)) for x in rng.integers(0, 30_000, rows)]
    for j, k in enumerate(cats):
        cols[f"cat{j}"] = [f"c{x:05d}" for x in rng.zipf(1.3, rows) % k]
    cols["id"] = np.arange(rows)
    df = pl.DataFrame(cols)
    return df, [c for c in df.columns if c != "id"]


def timed(cmd: list[str]) -> tuple[int, str, float, float]:
    """(exit code, stderr, peak RSS MiB, wall s) of ``cmd`` under ``/usr/bin/time -v``."""
    p = subprocess.run(["/usr/bin/time", "-v", *cmd], capture_output=True, text=True)
    peak = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr).group(1)) / 1024
    w = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (?:(\d+):)?(\d+):([\d.]+)", p.stderr)
    wall = int(w.group(1) or 0) * 3600 + int(w.group(2)) * 60 + float(w.group(3))
    return p.returncode, p.stderr, peak, wall


def least(cmd: list[str]) -> str | None:
    """The least limit a refusal at 64 MiB states (``608MiB``), None if accepted."""
    code, err, _, _ = timed(cmd + ["--memory-limit", "64MiB"])
    m = re.search(r"at least (\d+MiB)", err)
    return m.group(1) if m else None


def main(names: list[str]) -> None:
    exe = os.path.join(os.path.dirname(sys.executable), "microagg")
    print("| case | command | least limit | exit | peak RSS MiB | wall s |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            rows, cats = CASES[name]
            df, qi = table(rows, cats)
            src, out = os.path.join(tmp, f"{name}.parquet"), os.path.join(tmp, f"{name}_out.parquet")
            df.write_parquet(src)
            run = [exe, "anonymize", src, out, "--qi", ",".join(qi), "--k", "3", "--risk", "--quiet"]
            lim = least(run)
            code, err, peak, wall = timed(run + (["--memory-limit", lim] if lim else []))
            print(f"| {name} | anonymize --risk | {lim} | {code} | {peak:,.0f} | {wall:.1f} |", flush=True)
            if code:
                print(err.splitlines()[0], file=sys.stderr)
                continue
            risk = [exe, "risk", src, out, "--qi", ",".join(qi)]
            lim = least(risk)
            code, err, peak, wall = timed(risk + (["--memory-limit", lim] if lim else []))
            print(f"| {name} | risk | {lim} | {code} | {peak:,.0f} | {wall:.1f} |", flush=True)
            if code:
                print(err.splitlines()[0], file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:] or list(CASES))
