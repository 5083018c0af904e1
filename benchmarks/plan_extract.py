"""The planned least limits of the census extract at sizes not on disk (issue 42).

    python benchmarks/plan_extract.py [--sizes 1000000,10000000,100000000,1000000000]

The run's boundary is passed once on the 1M-row extract of ``bench_extract.py census``
(its dictionaries: the encoded columns, the state of the non-numeric QIs), then
``budget.plan_budget`` is asked, at each size, with the flow's own ``budget_args`` for
that size and a limit of 64MiB: the least limit its refusal states, in this process
(so with this machine's start-up RSS), with and without ``--strata region``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
from bench_extract import QUALITY_QI, make  # noqa: E402
from engine import coordinator  # noqa: E402
from engine.budget import MiB, Refusal, plan_budget, rss  # noqa: E402
from engine.options import RunConfig  # noqa: E402


def least_limits(data: Path, sizes: list[int], strata: bool) -> list[int]:
    cfg = RunConfig.make(qi=QUALITY_QI, k=5, ordinal={"marital_status": ["single", "married", "divorced", "widowed"]},
                         derived={"occupation_code": "occupation"}, strata=["region"] if strata else None)
    flow = coordinator.FLOWS[cfg.spec.publishes](cfg)
    out = []
    with contextlib.ExitStack() as stack:
        inp = coordinator._open_input(str(data), cfg, flow, None, None, None, stack, {}, rss(), False, connect=False)
        for n in sizes:
            kw = {**inp.budget_kw, **flow.budget_args(inp.source, n)}
            try:
                plan_budget(dataclasses.replace(flow.budget_cfg, memory_limit=64 * MiB), n, **kw)
            except Refusal as exc:
                out.append(int(exc.least))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000000,3000000,10000000,100000000,1000000000")
    args = ap.parse_args()
    os.environ.setdefault("NUMBA_CACHE_DIR", str(HERE.parent / "build" / "numba-cache"))
    (HERE / "data").mkdir(exist_ok=True)
    sizes = [int(s) for s in args.sizes.split(",")]
    data = make(1_000_000, missing=True)
    for strata in (True, False):
        figures = least_limits(data, sizes, strata)
        print(f"{'--strata region' if strata else 'no strata':16s}",
              "; ".join(f"{n:,}: {b / MiB:,.0f} MiB" for n, b in zip(sizes, figures)))


if __name__ == "__main__":
    main()
