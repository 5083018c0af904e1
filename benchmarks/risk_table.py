"""Disclosure risk beside information loss: MDAV on Census and Tarragona, k = 3, 5, 10.

    python benchmarks/risk_table.py

For each table and k: anonymize with MDAV through the public API (all columns are
QIs), then measure on (original, release) the distance-based record linkage
share (DBRL) and the interval disclosure share (p = 0.05 sd; also sdcMicro's
dRisk variant: masked sd, at most one value outside), and verify the release
independently (``engine.verify_release``). Wall times exclude JIT compilation
(a warm-up runs first).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import polars as pl

import engine

DATA = Path(__file__).resolve().parent.parent / "tests" / "data"
KS = [3, 5, 10]


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        warm = tmp / "warm.csv"
        pl.DataFrame({"a": [1.0, 2, 3, 4, 5, 6], "b": [1.0, 0, 1, 0, 1, 2]}).write_csv(warm)
        engine.anonymize(warm, tmp / "warm.parquet", qi=["a", "b"], k=2, risk=True)
        engine.verify_release(tmp / "warm.parquet", "a,b", 2, original=warm)

        print(f"{'data':<10} {'k':>3} {'IL %':>9} {'DBRL %':>8} {'ID %':>7} {'ID sdc %':>9} "
              f"{'verify':>7} {'anon s':>7} {'risk s':>7}")
        for name in ("census", "tarragona"):
            src = DATA / f"{name}.csv"
            qi = pl.read_csv(src, n_rows=1).columns
            for k in KS:
                out = tmp / f"{name}_{k}.parquet"
                t = time.perf_counter()
                rep = engine.anonymize(src, out, qi=qi, k=k)
                t_anon = time.perf_counter() - t
                t = time.perf_counter()
                risk = engine.disclosure_risk(src, out, qi)
                t_risk = time.perf_counter() - t
                ver = engine.verify_release(out, qi, k, original=src)
                assert abs(ver.information_loss_percent - rep.information_loss_percent) < 1e-9
                print(f"{name:<10} {k:>3} {rep.information_loss_percent:>9.4f} {100 * risk.dbrl:>8.3f} "
                      f"{100 * risk.interval_disclosure:>7.3f} {100 * risk.interval_disclosure_sdcmicro:>9.3f} "
                      f"{'ok' if ver.ok else 'FAIL':>7} {t_anon:>7.3f} {t_risk:>7.3f}")


if __name__ == "__main__":
    main()
