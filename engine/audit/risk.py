"""Disclosure risk of a release: ``microagg risk ORIGINAL MASKED --qi ...``.

Two measures on the numeric quasi-identifiers, record ``i`` of the release being
the masked version of record ``i`` of the original (the engine keeps row order):

**Distance-based record linkage (DBRL).** Both tables are standardized with the
*original's* column means and population standard deviations (a constant column
becomes 0). Each masked record is linked to the original record nearest to it in
Euclidean distance. Record ``i`` counts as linked correctly if original ``i`` is
its nearest; when ``t`` originals tie at exactly the least distance and original
``i`` is one of them, it counts ``1 / t`` (the chance that an intruder picking
one of the tied records at random picks the right one). The figure is the sum
over records divided by the number of records. For a centroid release the k
members of a group share one masked point, so a group adds at most 1 and DBRL is
at most (groups / rows) <= 1/k; rounding cannot change a group's total when all
tied originals are in the group.

**Interval disclosure** (after sdcMicro's ``dRisk``): the share of records whose
original values *all* lie within ``p`` standard deviations (sample sd, n - 1, of
the original column, as R's ``sd``) of their masked values, ``p = 0.05`` by
default. sdcMicro's own ``dRiskWORK`` differs in two ways: it takes the sd of the
*masked* column and counts a record when *at most one* of its values falls
outside; that figure is reported too (``interval_disclosure_sdcmicro``) for
comparison with published sdcMicro numbers.

Range releases (``--method maxent|mnqia``, ``c_min``/``c_max``): the masked value
of ``c`` is the midpoint of the published range, for both measures. (Asking
whether the original lies inside the published range is no measure: it always
does.) With the midpoint, a range no wider than ``2 p sd`` always counts as
disclosed, and a wider one counts only if the original is near its middle, which
matches what an intruder who guesses the midpoint learns. Categorical QIs are
rejected: give the numeric ones.

How it scales. The original's QIs are held in memory (about ``8 d`` bytes per row,
standardized) and indexed by the engine's kd-tree (``engine.kernels.kdtree``,
another ``8 d + 25`` bytes per row plus node boxes); peak while building is about
``n (16 d + 25)`` bytes, e.g. 2.1 GB for 10 million rows of 13 QIs. The release is
streamed twice, chunk by chunk: first to collect its distinct masked points (the
classes: one nearest-neighbour query per class, not per record, memory ``~3 d``
floats per class) and its column moments; the queries then run in parallel
(Numba); the second pass walks the original and the release side by side and
scores each record by looking its masked point up in the sorted table of points
(binary search, exact values) and comparing its own original's distance to the
least distance, computed by the same expression, so ties are exact.
"""

from __future__ import annotations

import math
import numbers
import os
import time
from dataclasses import asdict, dataclass, field
from typing import Sequence

import numpy as np
import polars as pl

from ..checks import check_whole
from ..errors import EngineError
from ..io.source import Source, open_source
from ..kernels.kdtree import build_kdtree
from ..kernels.risk import find_rows, nearest_all, score_rows
from .verify import ClassCounter, ScaledMoments, aligned_frames, is_numeric, parse_columns, \
    published_columns

LEAF_SIZE = 32


@dataclass
class RiskResult:
    original: str
    masked: str
    rows: int
    qi: list[str]
    p: float
    dbrl: float
    dbrl_linked: float
    masked_points: int
    tied_points: int
    interval_disclosure: float
    interval_disclosure_sdcmicro: float
    range_qis: list[str] = field(default_factory=list)
    wall_seconds: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)

    def to_json(self) -> str:
        from ..report import json_text

        return json_text(self.to_dict())

    def summary(self) -> str:
        lines = [
            f"disclosure risk of {self.masked} against {self.original} ({self.rows:,} rows, "
            f"QIs {', '.join(self.qi)})",
            f"  DBRL: {100 * self.dbrl:.4f} % of records linked to their own original "
            f"({self.dbrl_linked:,.2f} records; {self.masked_points:,} distinct masked points, "
            f"{self.tied_points:,} with tied nearest originals)",
            f"  interval disclosure (p={self.p:g}): {100 * self.interval_disclosure:.4f} % of records "
            f"have every original value within p sd of the masked value "
            f"(sdcMicro dRisk variant: {100 * self.interval_disclosure_sdcmicro:.4f} %)",
        ]
        if self.range_qis:
            lines.append(f"  ranges scored at their midpoints: {', '.join(self.range_qis)}")
        lines.append(f"  wall {self.wall_seconds:.2f} s")
        return "\n".join(lines)

    def brief(self) -> str:
        """One line for the anonymize report."""
        return (f"disclosure risk: DBRL {100 * self.dbrl:.4f} %, interval disclosure (p={self.p:g}) "
                f"{100 * self.interval_disclosure:.4f} %")


def _standardize(X: np.ndarray, scale: np.ndarray, mean: np.ndarray, sd: np.ndarray) -> np.ndarray:
    """``(X / scale - mean) / sd`` per column, 0 where sd is 0. Elementwise, so a row's
    result does not depend on which chunk it came in (the tree and the scoring pass
    see bit-identical values)."""
    safe = np.where(sd > 0, sd, 1.0)
    Z = (X / scale - mean) / safe
    Z[:, sd == 0] = 0.0
    return np.ascontiguousarray(Z)


def _masked_values(frame: pl.DataFrame, pub: dict, qi: list[str], offset: int, label: str) -> np.ndarray:
    out = np.empty((frame.height, len(qi)))
    for j, c in enumerate(qi):
        cols = pub[c]
        if len(cols) == 1:
            out[:, j] = frame.get_column(cols[0]).cast(pl.Float64).fill_null(np.nan).to_numpy()
        else:
            lo = frame.get_column(cols[0]).cast(pl.Float64).fill_null(np.nan).to_numpy()
            hi = frame.get_column(cols[1]).cast(pl.Float64).fill_null(np.nan).to_numpy()
            out[:, j] = 0.5 * lo + 0.5 * hi
    _check_finite(out, [" / ".join(pub[c]) for c in qi], offset, label)
    return out


def _check_finite(X: np.ndarray, names: list[str], offset: int, label: str) -> None:
    fin = np.isfinite(X)
    if not fin.all():
        i, j = np.argwhere(~fin)[0]
        raise EngineError(f"column {names[j]!r} of {label} has a missing or non-finite value at row "
                          f"{offset + int(i) + 1} (rows counted from 1)")


def _original_values(frame: pl.DataFrame, qi: list[str], offset: int, label: str) -> np.ndarray:
    X = np.column_stack([frame.get_column(c).cast(pl.Float64).fill_null(np.nan).to_numpy() for c in qi])
    _check_finite(X, qi, offset, label)
    return X


def disclosure_risk(original: str | os.PathLike[str] | pl.DataFrame | pl.LazyFrame | Source,
                    masked: str | os.PathLike[str] | pl.DataFrame | pl.LazyFrame | Source,
                    qi: str | Sequence[str], *, p: float = 0.05, chunk_rows: int = 100_000,
                    separator: str | None = None, null_values: str | Sequence[str] | None = None,
                    encoding: str | None = None) -> RiskResult:
    """DBRL and interval disclosure of ``masked`` against ``original`` on ``qi``.

    ``original`` and ``masked``: CSV/Parquet paths (or anything ``open_source``
    takes), with the same number of rows in the same order. ``qi``: numeric QI
    columns of the original, published in ``masked`` as ``c`` or ``c_min``/``c_max``.
    ``separator``, ``null_values``, ``encoding``: how a CSV ``original`` is read
    (``engine.io.source.CsvOptions``; ``masked`` is read as the engine writes CSV).
    See the module docstring for the definitions, ties, and memory.
    Raises ``EngineError`` on bad input.
    """
    from ..io.source import csv_options

    osrc = open_source(original, csv=csv_options(separator, null_values, encoding))
    try:
        return _disclosure_risk(osrc, masked, qi, p, chunk_rows)
    finally:
        osrc.close()


def _disclosure_risk(original, masked, qi, p, chunk_rows) -> RiskResult:
    t0 = time.perf_counter()
    qi = parse_columns(qi)
    chunk_rows = check_whole(chunk_rows, "chunk_rows", 1)
    if isinstance(p, bool) or not isinstance(p, numbers.Real) or not math.isfinite(p) or p <= 0:
        raise EngineError(f"p must be a positive number of standard deviations, got {p!r}")
    p = float(p)
    osrc: Source = open_source(original)
    msrc: Source = open_source(masked)
    for c in qi:
        if c not in osrc.columns:
            raise EngineError(f"column {c!r} not found in {osrc.label}")
    pub = published_columns(msrc, qi)
    osrc.check_reconciled(qi)
    msrc.check_reconciled([m for c in qi for m in pub[c]])
    n = osrc.count_rows()
    if n == 0:
        raise EngineError(f"{osrc.label} has no rows")
    for c in qi:
        if not is_numeric(osrc.schema[c]):
            raise EngineError(f"column {c!r} is not numeric in {osrc.label} ({osrc.schema[c]}); "
                              f"disclosure risk needs numeric quasi-identifiers")
        for m in pub[c]:
            if not is_numeric(msrc.schema[m]):
                raise EngineError(f"column {m!r} is not numeric in {msrc.label} ({msrc.schema[m]}); "
                                  f"disclosure risk needs numeric quasi-identifiers")
    nm = msrc.count_rows()
    if nm != n:
        raise EngineError(f"{msrc.label} has {nm:,} rows but {osrc.label} has {n:,}; "
                          f"the release must keep the original's rows in order")
    d = len(qi)
    mcols = list(dict.fromkeys(c for c in qi for c in pub[c]))

    # the original's QIs, in memory, then standardized in place
    X = np.empty((n, d))
    mom = ScaledMoments(d)
    for offset, frame in osrc.iter_frames(qi, chunk_rows):
        x = _original_values(frame, qi, offset, osrc.label)
        X[offset: offset + x.shape[0]] = x
        mom.add(x)
    scale, mean = mom.scale, mom.mean
    constant = mom.min == mom.max
    sd0 = np.where(constant, 0.0, np.sqrt(np.maximum(mom.m2, 0.0) / n))
    sd1 = np.where(constant, 0.0, np.sqrt(np.maximum(mom.m2, 0.0) / (n - 1))) if n > 1 else np.zeros(d)
    for a in range(0, n, chunk_rows):
        X[a: a + chunk_rows] = _standardize(X[a: a + chunk_rows], scale, mean, sd0)
    tree = build_kdtree(X, LEAF_SIZE)
    del X

    # pass 1 over the release: its distinct masked points and its column moments
    counter = ClassCounter([str(j) for j in range(d)], max(chunk_rows, 1 << 16))
    mmom = ScaledMoments(d)
    for offset, frame in msrc.iter_frames(mcols, chunk_rows):
        M = _masked_values(frame, pub, qi, offset, msrc.label)
        mmom.add(M)
        counter.add(pl.DataFrame({str(j): M[:, j] for j in range(d)}))
    points = counter.finish()
    U = points.select([str(j) for j in range(d)]).to_numpy().astype(np.float64)
    U = np.ascontiguousarray(U[np.lexsort(U.T[::-1])])
    Uz = _standardize(U, scale, mean, sd0)
    d2 = np.empty(U.shape[0])
    ties = np.empty(U.shape[0], np.int64)
    nearest_all(tree, Uz, d2, ties)

    # pass 2: original and release side by side
    half = p * sd1
    msd1 = np.sqrt(np.maximum(mmom.m2, 0.0) / (n - 1)) * (mmom.scale / scale) if n > 1 else np.zeros(d)
    msd1[mmom.min == mmom.max] = 0.0
    half_m = p * msd1
    credit, inside, inside_sdc = 0.0, 0, 0
    for offset, fo, fm in aligned_frames(osrc, msrc, qi, mcols, chunk_rows):
        x = _original_values(fo, qi, offset, osrc.label)
        M = _masked_values(fm, pub, qi, offset, msrc.label)
        idx = np.empty(M.shape[0], np.int64)
        find_rows(U, M, idx)
        if (idx < 0).any():  # pragma: no cover - the first pass saw every point
            raise EngineError(f"{msrc.label} changed while it was read")
        c, a, b = score_rows(_standardize(x, scale, mean, sd0), Uz, idx, d2, ties,
                             np.ascontiguousarray(x / scale), np.ascontiguousarray(M / scale), half, half_m)
        credit += c
        inside += a
        inside_sdc += b
    return RiskResult(original=osrc.label, masked=msrc.label, rows=n, qi=qi, p=p, dbrl=credit / n,
                      dbrl_linked=float(credit), masked_points=int(U.shape[0]), tied_points=int((ties > 1).sum()),
                      interval_disclosure=inside / n, interval_disclosure_sdcmicro=inside_sdc / n,
                      range_qis=[c for c in qi if len(pub[c]) == 2], wall_seconds=time.perf_counter() - t0)
