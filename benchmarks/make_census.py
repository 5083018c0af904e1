"""Generate a census-like extract of any size as chunked Parquet (seeded).

    python benchmarks/make_census.py OUT_DIR --rows 10000000 [--file-rows 1000000] [--seed 0]

Writes OUT_DIR/part-00000.parquet, ... (``--file-rows`` rows each, row groups of
100,000 rows): a ``person_id`` column, 8 correlated numeric quasi-identifiers
(age, education_years, hours_per_week, wage_income, other_income, property_tax,
household_size, commute_minutes) and categorical columns (sex, region,
occupation); see ``engine.synth.census_like``. Part i depends only on (seed, i),
so any size is reproducible. The folder is written under a temporary name and
renamed when complete.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from engine.synth import census_like  # noqa: E402


def make(out: str | Path, rows: int, file_rows: int = 1_000_000, seed: int = 0) -> Path:
    out = Path(out)
    if out.exists():
        raise SystemExit(f"make_census: {out} exists; remove it first")
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for i, start in enumerate(range(0, rows, file_rows)):
        n = min(file_rows, rows - start)
        census_like(n, seed=seed, offset=start).write_parquet(tmp / f"part-{i:05d}.parquet",
                                                              row_group_size=100_000, statistics=True)
    os.replace(tmp, out)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--rows", type=int, required=True)
    ap.add_argument("--file-rows", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    t = time.perf_counter()
    make(a.out, a.rows, a.file_rows, a.seed)
    print(f"wrote {a.rows:,} rows to {a.out} in {time.perf_counter() - t:.1f} s")


if __name__ == "__main__":
    main()
