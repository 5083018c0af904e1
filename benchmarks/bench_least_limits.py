"""Issue 41 item 2: a refusal's least limit is the least limit, for CSV inputs with nominal QIs.

    python benchmarks/bench_least_limits.py [--dir DIR] [--before TREE] [--threads 2] [--cases a,b,c,d]

Writes (once, into DIR, default a temporary folder) the issue's tables: a 400,000-row
census extract (``engine.synth.census_extract``, seed 41) as CSV and as Parquet, and a
300,000-row census-like CSV (``census_like``, seed 41). For each case, under
``/usr/bin/time -f "%M KiB %e s"`` (peak RSS of the child, wall):

* the least limit the refusal of 64MiB states (and, with ``--before TREE``, a checkout of
  the previous code, the figure that code states; its runs use TREE's ``engine``);
* the run at exactly that limit (it must succeed, under the limit), then at the limit 16 MiB
  below (it must be refused, naming the same figure);
* the run without a limit (the real need, give or take what a limit trims).

Cases: a: the 400k CSV, 8 QIs (4 nominal: sex, marital_status, municipality of 3,000,
occupation of 440; missing values), ``--drop occupation_code``; b: the same with ``--strata
region --derived occupation_code=occupation``; c: b's table as Parquet; d: the 300k CSV, QIs
age, sex, region, occupation, wage_income, hours_per_week. ``--polish-rounds 0`` variants
(a0, d0) show the figure where the polish's estimate does not decide it.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from engine.synth import census_extract, census_like  # noqa: E402

LEAST = re.compile(r"at least (\d+)MiB")
EXTRACT_QI = "age,sex,education_years,hours_per_week,wage_income,marital_status,municipality,occupation"


def make(d: Path) -> None:
    if not (d / "e400k.csv").exists():
        frame = census_extract(400_000, seed=41)
        frame.write_csv(d / "e400k.csv")
        frame.write_parquet(d / "e400k.parquet")
    if not (d / "c300k.csv").exists():
        census_like(300_000, seed=41).write_csv(d / "c300k.csv")


def timed(args: list, tree: Path) -> tuple[int, float, float, str]:
    """(exit code, peak RSS MiB, wall s, stderr's last line) of ``python -m engine ARGS``
    run in ``tree`` (its ``engine``)."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as fh:
        proc = subprocess.run(["/usr/bin/time", "-f", "%M KiB %e s", "-o", fh.name, sys.executable, "-m", "engine",
                               *map(str, args)], capture_output=True, text=True, cwd=tree)
        kb, _, wall, _ = fh.read().split()[-4:]
    last = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ""
    return proc.returncode, int(kb) / 1024, float(wall), last


def least(args: list, tree: Path) -> tuple[int | None, float, float, str]:
    code, peak, wall, line = timed([*args, "--memory-limit", "64MiB"], tree)
    m = LEAST.search(line)
    return (int(m.group(1)) if m else None), peak, wall, line


def case(name: str, args: list, out: Path, before: Path | None) -> None:
    print(f"{name}:", flush=True)
    if before is not None:
        figure, peak, wall, line = least(args, before)
        print(f"  before: refusal of 64MiB states {figure}MiB ({wall:.1f} s, peak {peak:.0f} MiB)", flush=True)
        if figure is not None:
            code, peak, wall, line = timed([*args, "--memory-limit", f"{figure}MiB"], before)
            again = LEAST.search(line)
            print(f"  before: at {figure}MiB: " + (f"refused again, at least {again.group(1)}MiB" if again else
                                                  f"exit {code}, peak {peak:.0f} MiB, wall {wall:.1f} s"), flush=True)
    figure, peak, wall, line = least(args, ROOT)
    print(f"  after: refusal of 64MiB states {figure}MiB ({wall:.1f} s, peak {peak:.0f} MiB)", flush=True)
    if figure is None:
        print(f"  {line}")
        return
    for limit in (f"{figure}MiB", f"{figure - 16}MiB", None):
        run = args if limit is None else [*args, "--memory-limit", limit]
        code, peak, wall, line = timed(run, ROOT)
        again = LEAST.search(line) if code == 2 else None
        status = "ok" if code == 0 else f"refused, at least {again.group(1)}MiB" if again else f"exit {code}: {line}"
        under = "" if limit is None or code else (" UNDER" if peak <= int(limit[:-3]) else " ABOVE")
        print(f"  limit {limit or 'none':>8}: {status}; peak {peak:.0f} MiB{under}; wall {wall:.1f} s", flush=True)
        if out.exists():
            os.remove(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default=None)
    ap.add_argument("--before", default=None, help="a checkout of the previous code (its runs: the before figure)")
    ap.add_argument("--threads", default="2")
    ap.add_argument("--cases", default="a,b,c,d,a0,d0")
    a = ap.parse_args()
    d = Path(a.dir or tempfile.mkdtemp(prefix="bench_least_limits_")).resolve()
    d.mkdir(parents=True, exist_ok=True)
    make(d)
    out = d / "out.parquet"
    common = ["--k", "5", "--threads", a.threads, "--quiet"]
    extract = ["--qi", EXTRACT_QI, *common]
    strata = ["--strata", "region", "--derived", "occupation_code=occupation"]
    census = ["--qi", "age,sex,region,occupation,wage_income,hours_per_week", *common]
    cases = {
        "a": ("400k-row CSV, nominal QIs", ["anonymize", d / "e400k.csv", out, *extract, "--drop", "occupation_code"]),
        "b": ("400k-row CSV, --strata, --derived", ["anonymize", d / "e400k.csv", out, *extract, *strata]),
        "c": ("400k rows as Parquet, --strata, --derived", ["anonymize", d / "e400k.parquet", out, *extract, *strata]),
        "d": ("300k-row CSV", ["anonymize", d / "c300k.csv", out, *census]),
        "a0": ("400k-row CSV, nominal QIs, --polish-rounds 0",
               ["anonymize", d / "e400k.csv", out, *extract, "--drop", "occupation_code", "--polish-rounds", "0"]),
        "d0": ("300k-row CSV, --polish-rounds 0", ["anonymize", d / "c300k.csv", out, *census, "--polish-rounds", "0"]),
    }
    before = Path(a.before).resolve() if a.before else None
    for key in a.cases.split(","):
        name, args = cases[key]
        case(f"{key}: {name}", args, out, before)


if __name__ == "__main__":
    main()
