"""Grouping centroid of heterogeneous MDAV: the encoded mean (what the engine uses)
against the paper's mode / median centroid, on samples of Adult.

    python benchmarks/mixed_centroid.py [--rows 2000] [--samples 3] [--k 5]

Both variants run the slow reference (tests/reference_mixed.py: brute-force MDAV
over the heterogeneous distance); they differ only in the centroid that MDAV's
"farthest from the centroid" steps use: the mean of the natural values (numeric
mean, mean scaled rank, category frequencies, which is the encoded mean) or
Domingo-Ferrer & Torra's centroid (numeric mean, the median category, the modal
category). Both publish the same way (mean, lower median, mode); IL per type as
in the engine. Printed: IL per kind and combined, mean over the samples.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import polars as pl

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
import reference as ref  # noqa: E402
import reference_mixed as refmix  # noqa: E402

QI = ["age", "education", "sex", "race", "marital_status", "hours_per_week"]


class ModeRun(refmix.HetRun):
    """The paper's centroid: the remaining rows' numeric mean, median rank, modal category."""

    def centroid(self):
        rem = self.X[self.remaining]
        c = rem.mean(axis=0)
        j = 0
        for kind, w, cats, cols, extra in self.meta:
            if kind == "ordinal":
                v = np.sort(rem[:, j])
                c[j] = v[(v.shape[0] - 1) // 2]  # the lower median
                j += 1
            elif kind == "nominal":
                m = len(cats)
                counts = rem[:, j: j + m].sum(axis=0)
                c[j: j + m] = 0.0
                c[j + int(np.argmax(counts))] = 1.0
                j += m
            else:
                j += 1
        return c


def run(t, k, order, mode: bool):
    meta = refmix.describe(t, QI, {"education": order})
    X = refmix.natural(meta)
    cls = ModeRun if mode else refmix.HetRun
    lab = ref.mdav(X, k, run=lambda X: cls(X, meta))
    return refmix.publish(t, QI, lab, ordinal={"education": order})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2000)
    ap.add_argument("--samples", type=int, default=3)
    ap.add_argument("--k", type=int, default=5)
    args = ap.parse_args()
    adult = pl.read_csv(HERE.parent / "tests" / "data" / "adult.csv")
    order = adult.group_by("education").agg(pl.col("education_num").min()).sort("education_num")["education"].to_list()
    kinds = {"numeric": ["age", "hours_per_week"], "ordinal": ["education"], "nominal": ["sex", "race", "marital_status"]}
    res = {False: [], True: []}
    for s in range(args.samples):
        t = adult.sample(args.rows, seed=s)
        for mode in (False, True):
            p = run(t, args.k, order, mode)
            row = {kd: float(np.mean([p["il"][c] for c in cs])) for kd, cs in kinds.items()}
            row["combined"] = p["combined"]
            res[mode].append(row)
    print(f"Adult samples of {args.rows} rows x {args.samples}, k={args.k}, QIs {','.join(QI)} (education ordinal)")
    for mode, name in ((False, "encoded mean (engine)"), (True, "mode / median (paper)")):
        m = {key: float(np.mean([r[key] for r in res[mode]])) for key in res[mode][0]}
        print(f"  {name:24s} " + "  ".join(f"{key} {v:.3f} %" for key, v in m.items()))


if __name__ == "__main__":
    main()
