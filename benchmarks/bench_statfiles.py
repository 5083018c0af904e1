"""A census-like SPSS file streamed within 1 GiB (issue 40), beside the same table as Parquet.

    python benchmarks/bench_statfiles.py [--rows 10000000] [--keep]

The table (built in memory in this process with pandas, seeded): ID, AGE (0..95, about 2 %
the declared missing code 999 "Unknown"), SEX (1/2) and REGION (1..9) and EDUC (1..16)
integer codes with value labels, measured nominal; INCOME and HOURS numbers. Written once
as ``big.sav`` by pyreadstat (variable labels, value labels, the missing declaration,
measurement levels) and as ``big.parquet`` (the same values, no declarations). Then, each
in a fresh process measured from outside with ``/usr/bin/time -v`` (wall clock and
maximum resident set size):

    microagg anonymize big.sav out.parquet --qi AGE,INCOME,HOURS --k 5 --memory-limit 1GiB
    microagg anonymize big.parquet out.parquet --qi AGE,INCOME,HOURS --missing AGE=999 --k 5 --memory-limit 1GiB

(the .sav run reads the same kinds from the file's declarations: AGE's code 999 a missing
value; SEX, REGION and EDUC pass through with their labels). ``--qi`` takes other QIs
(labelled ones are given to the Parquet run as ``--nominal``): a run with nominal QIs
goes through the mixed-type encoding, whose least limit grows with the rows (2M rows of
AGE,SEX,INCOME,HOURS: 1,112 MiB planned), so it is refused under 1 GiB at 10M rows
(docs/benchmarks.md). Printed: wall, peak
RSS, IL, the target (peak <= 1 GiB) and the ratio of the .sav run's wall to the Parquet
run's. Files under benchmarks/data/statfiles_N (removed unless --keep).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
QI = "AGE,INCOME,HOURS"
LABELLED = ("SEX", "REGION", "EDUC")
TARGET_MIB = 1024


def make(folder: Path, rows: int) -> dict:
    """Write big.sav and big.parquet; return the seconds each took."""
    import pandas as pd
    import pyreadstat

    rng = np.random.default_rng(40)
    age = rng.integers(0, 96, rows).astype(np.float64)
    age[rng.random(rows) < 0.02] = 999.0
    df = pd.DataFrame({
        "ID": np.arange(rows, dtype=np.float64),
        "AGE": age,
        "SEX": rng.integers(1, 3, rows).astype(np.float64),
        "REGION": rng.integers(1, 10, rows).astype(np.float64),
        "EDUC": np.minimum(rng.poisson(9, rows) + 1, 16).astype(np.float64),
        "INCOME": np.round(rng.lognormal(10, 1, rows), 2),
        "HOURS": np.round(rng.normal(38, 9, rows).clip(0, 99)),
    })
    t0 = time.perf_counter()
    pyreadstat.write_sav(
        df, str(folder / "big.sav"), file_label="census-like benchmark",
        column_labels={"ID": "Person id", "AGE": "Age", "SEX": "Sex", "REGION": "Region", "EDUC": "Education",
                       "INCOME": "Yearly income", "HOURS": "Hours a week"},
        variable_value_labels={"SEX": {1: "Male", 2: "Female"},
                               "REGION": {i: f"Region {chr(64 + i)}" for i in range(1, 10)},
                               "EDUC": {i: f"Level {chr(64 + i)}" for i in range(1, 17)},
                               "AGE": {999: "Unknown"}},
        missing_ranges={"AGE": [999]},
        variable_measure={"SEX": "nominal", "REGION": "nominal", "EDUC": "nominal", "AGE": "scale",
                          "INCOME": "scale", "HOURS": "scale", "ID": "scale"})
    t1 = time.perf_counter()
    df.to_parquet(folder / "big.parquet", index=False)
    return {"write_sav_s": round(t1 - t0, 1), "write_parquet_s": round(time.perf_counter() - t1, 1),
            "sav_mib": round((folder / "big.sav").stat().st_size / 2**20),
            "parquet_mib": round((folder / "big.parquet").stat().st_size / 2**20)}


def run(folder: Path, name: str, qi: str, extra: list[str]) -> dict:
    """``microagg anonymize`` of ``name`` in a fresh process under ``/usr/bin/time -v``."""
    out, rep = folder / f"out_{name}.parquet", folder / f"r_{name}.json"
    cmd = ["/usr/bin/time", "-v", sys.executable, "-m", "engine", "anonymize", str(folder / name), str(out),
           "--qi", qi, "--k", "5", "--memory-limit", "1GiB", "--report", str(rep), *extra]
    load = os.getloadavg()[0]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=os.environ.copy())
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-3000:])
    peak_kib = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr).group(1))
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)", proc.stderr).group(1)
    secs = sum(float(x) * 60 ** i for i, x in enumerate(reversed(wall.split(":"))))
    report = json.loads(rep.read_text())
    out.unlink()
    return {"input": name, "wall_s": round(secs, 1), "peak_rss_mib": round(peak_kib / 1024),
            "information_loss_percent": report.get("information_loss_percent"),
            "passes": {k: round(v, 1) for k, v in (report.get("passes") or {}).items()},
            "load_before": round(load, 2), "command": " ".join(["microagg", *cmd[5:]])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--keep", action="store_true", help="keep the files under benchmarks/data")
    ap.add_argument("--qi", default=QI, help=f"the quasi-identifiers (default {QI})")
    args = ap.parse_args()
    folder = HERE / "data" / f"statfiles_{args.rows}"
    folder.mkdir(parents=True, exist_ok=True)
    try:
        if not (folder / "big.sav").exists() or not (folder / "big.parquet").exists():
            print(json.dumps({"rows": args.rows, **make(folder, args.rows)}), flush=True)
        sav = run(folder, "big.sav", args.qi, [])
        print(json.dumps(sav), flush=True)
        nominal = [c for c in args.qi.split(",") if c in LABELLED]
        extra = (["--nominal", ",".join(nominal)] if nominal else []) + (
            ["--missing", "AGE=999"] if "AGE" in args.qi.split(",") else [])
        parquet = run(folder, "big.parquet", args.qi, extra)
        print(json.dumps(parquet), flush=True)
        ok = sav["peak_rss_mib"] <= TARGET_MIB
        print(f"{args.rows:,} rows: .sav {sav['wall_s']} s, peak {sav['peak_rss_mib']} MiB "
              f"(target <= {TARGET_MIB} MiB: {'met' if ok else 'NOT met'}), IL {sav['information_loss_percent']:.4f} %; "
              f"Parquet {parquet['wall_s']} s, peak {parquet['peak_rss_mib']} MiB, "
              f"IL {parquet['information_loss_percent']:.4f} %; ratio .sav/Parquet "
              f"{sav['wall_s'] / parquet['wall_s']:.2f}x; load {os.getloadavg()[0]:.2f}")
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
