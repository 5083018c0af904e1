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
matches what an intruder who guesses the midpoint learns.

Mixed-type releases (``microagg anonymize`` with categorical QIs): the same
distance as the grouping, with weights 1. A date or datetime QI is a number (its
epoch value); a categorical QI (String, Categorical, Enum, Boolean) is compared as a
category: one-hot over the original's sorted categories, scaled so that two
different categories are at squared distance 1 (a published category that is not
a value of the original matches none); an ordinal QI (``ordinal``, as for
``anonymize``) is its rank, standardized as a number. For interval disclosure a
categorical value counts as inside only when it is unchanged (the sdcMicro
variant counts a changed category as two values outside).

Missing values (nulls) in the QIs, of the original or the release, are a value of
their own in both measures (a NaN or infinite value is still an error: it is no
missing value):

* **Distance.** A numeric, date or ordinal QI with a missing value gets a
  missing-value indicator beside its standardized value: a value ``v`` is the point
  ``(z(v), 0)``, a missing value ``(0, R)``, with ``z`` standardized by the mean and
  sd of the original values *present* and ``R`` the column's largest standardized
  distance, ``(max - min) / sd`` of the original values present (1 for a column of
  one value or none). So missing against missing: 0; missing against ``v``:
  ``z(v)^2 + R^2``, at least as far as any two values of the column are apart (the
  missing cell stands at the mean, as the engine groups it, one widest gap off the
  axis). A nominal QI's missing value is a category of its own (one more one-hot
  column): 1 against any category, 0 against a missing one. A range missing at both
  ends is missing; at one end only, an error naming the row. The indicators are not
  columns of the kd-tree (0/R columns would draw its variance splits and ruin its
  boxes): each original keeps its pattern of missing QIs (a byte a QI with missing
  values) and the search adds ``R^2`` per indicator that differs
  (``engine.kernels.risk.nearest_with_patterns``); the scoring adds the same terms
  in the same order, so ties stay exact.
* **Interval disclosure.** A missing original value is inside exactly when its
  masked value is missing too (an intruder learns that it is missing); a value
  against a missing one (an imputed cell, or a value published missing) is outside,
  one value outside for the sdcMicro variant (a nominal QI's change of category
  counts two, as any). The sds are those of the values present.
* **Distinct masked points** (the classes of the first pass) count a missing value
  as a value: missing equals missing, and differs from every value.

**Re-identification risk of the release's equivalence classes** (beside the two
measures above, which need the original; these read the release's classes). A class
is a set of rows with identical published values of the QIs (``classes_on``: the QIs
whose published columns key the classes, default ``qi``; ``anonymize --risk`` keys
them on every QI, a range method's sets included), a missing value counting as a
value (a float ``-0.0`` apart from ``0.0``, as ``microagg verify`` counts them). Class
``k`` has ``f_k`` rows of the release; its population size ``F_k`` is the sum of its
rows' sampling weights (``weight_column``, read from the original, each a finite
number of at least 1: a record stands for itself and possibly others), else
``F_k = f_k`` (no population known: the release is taken as the population).

* ARX's risks (Prasser et al.; ``RiskModelSampleSummary`` after El Emam, "Guide to
  the De-Identification of Personal Health Information", ch. "Measuring the
  Probability of Re-Identification"), with the record threshold ``threshold``
  (ARX's default highest acceptable risk of a record, 0.2):
  *prosecutor* (the intruder knows the person is in the release): highest risk
  ``1 / min f_k``, success rate ``classes / n`` (the mean over records of ``1 / f_k``),
  records at risk the share of records with ``1 / f_k > threshold``;
  *journalist* (the intruder knows only the population): highest risk
  ``1 / min F_k``, records at risk the share of records with ``1 / F_k > threshold``,
  success rate ``max(classes / sum F_k, sum_k (f_k / F_k) / n)``;
  *marketer* (re-identify as many as possible): success rate
  ``sum_k (f_k / F_k) / n``. Without weights the journalist's figures are the
  prosecutor's and the marketer's is ``classes / n``.
* sdcMicro's individual risk (``measure_risk``, which calls ``indivRisk`` with its
  default ``method="approx"``; Benedetti & Franconi 1998, Franconi & Polettini 2004),
  with ``p_k = f_k / F_k``: ``1 / f_k`` when ``f_k = F_k``; else for ``f_k = 1``
  ``p/(1-p) log(1/p)``, for ``f_k = 2`` ``p/(1-p) - (p/(1-p))^2 log(1/p)``, for
  ``f_k > 2`` ``p / (f_k - (1-p))`` (``engine.kernels.risk.individual_risk``). The
  global risk is their sum over records (the expected number of re-identifications,
  sdcMicro's ``global_risk_ER``) and its share of ``n`` (``global_risk``). It needs
  sampling weights: without ``weight_column`` it is reported as null with the reason.
  sdcMicro's ``freqCalc`` reads a missing key value as "any category"; here it is a
  value of its own, as everywhere in the engine.

The classes are counted in the first pass over the release (Polars' group-by on the
published columns), numbered in sorted order, and each record is looked up in that
table in the second pass (``find_rows``), its weight added to its class in row order
(``class_totals``): counts and sums do not depend on the chunk size.

Which QIs hold a missing value is read before the passes: a Parquet file's footers
(each row group's null count), else one more read of the QI columns.

How it scales. The original's QIs are held in memory (about ``8 d`` bytes per row,
standardized) and indexed by the engine's kd-tree (``engine.kernels.kdtree``,
another ``8 d + 25`` bytes per row plus node boxes); peak while building is about
``n (16 d + 25)`` bytes, e.g. 2.1 GB for 10 million rows of 13 QIs. With a memory
limit (``memory_limit``, ``--memory-limit``) the need is estimated up front
(``engine.budget.risk_state``: the tree, the release's columns as pyarrow reads them,
at most n / 2 distinct masked points) and a limit below it is refused with one line. The release is
streamed twice, chunk by chunk: first to collect its distinct masked points (the
classes: one nearest-neighbour query per class, not per record, memory ``~3 d``
floats per class) and its column moments; the queries then run in parallel
(Numba); the second pass walks the original and the release side by side and
scores each record by looking its masked point up in the sorted table of points
(binary search, exact values) and comparing its own original's distance to the
least distance, computed by the same expression, so ties are exact. The release's
classes add their counter (Polars, on the published key columns) and their key matrix
(float64, sorted), about 48 bytes a key column and class, counted in the state
``check_command`` is given (n / 2 classes at most, as the masked points).
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
import pyarrow.parquet as pq

from ..budget import check_command, early_piece, parquet_buffer, parse_limit, risk_state
from ..checks import check_whole
from ..errors import EngineError
from ..io.source import TableSource, csv_options, open_source
from ..kernels.kdtree import build_kdtree
from ..kernels.risk import (class_summary, class_totals, find_rows, individual_risk, nearest_all,
                            nearest_all_patterns, score_rows)
from ..options import parse_ordinal
from ..parallel import interruptible
from ..report import json_text
from .verify import ClassCounter, PresentMoments, aligned_frames, is_numeric, iso_date_columns, \
    parse_columns, published_columns

LEAF_SIZE = 32
RISK_THRESHOLD = 0.2  # a record is at risk above this re-identification probability (ARX's default)
NO_WEIGHTS = ("needs sampling weights: give the column of the original that holds them "
              "(--weight-column COL; weight_column= in the API)")


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
    missing_qis: list[str] = field(default_factory=list)  # QIs with a missing value (original or release)
    # the release's equivalence classes (the module docstring): ARX's re-identification risks
    classes: int = 0
    class_qi: list[str] = field(default_factory=list)  # the QIs whose published values key the classes
    risk_threshold: float = RISK_THRESHOLD
    prosecutor: dict = field(default_factory=dict)  # highest_risk, success_rate, records_at_risk
    journalist: dict = field(default_factory=dict)  # the same, against the population (weights)
    marketer: dict = field(default_factory=dict)  # success_rate
    weight_column: str | None = None
    population: float | None = None  # the sum of the sampling weights (the estimated population size)
    # sdcMicro's individual risk (global_risk: expected re-identifications, global_risk_share: of n,
    # highest_risk, records_at_risk); None without weights, ``individual_risk_note`` saying why
    individual_risk: dict | None = None
    individual_risk_note: str | None = None
    wall_seconds: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)

    def to_json(self) -> str:
        return json_text(self.to_dict())

    def summary(self) -> str:
        lines = [
            f"disclosure risk of {self.masked} against {self.original} ({self.rows:,} rows, "
            f"QIs {', '.join(self.qi)})",
            f"  DBRL: {100 * self.dbrl:.4f} % of records linked to their own original "
            f"({linked_records(self.dbrl_linked)}; {self.masked_points:,} distinct masked points, "
            f"{self.tied_points:,} with tied nearest originals)",
            f"  interval disclosure (p={self.p:g}): {100 * self.interval_disclosure:.4f} % of records "
            f"have every original value within p sd of the masked value "
            f"(sdcMicro dRisk variant: {100 * self.interval_disclosure_sdcmicro:.4f} %)",
        ]
        lines += self.class_lines()
        if self.range_qis:
            lines.append(f"  ranges scored at their midpoints: {', '.join(self.range_qis)}")
        if self.missing_qis:
            lines.append(f"  missing values in {', '.join(self.missing_qis)}: a value of their own (see "
                         f"microagg risk's definitions)")
        lines.append(f"  wall {self.wall_seconds:.2f} s")
        return "\n".join(lines)

    def class_lines(self) -> list[str]:
        """The summary's lines on the release's classes (ARX, sdcMicro)."""
        return class_lines(self.to_dict())

    def brief(self) -> str:
        """One line for the anonymize report."""
        return (f"disclosure risk: DBRL {100 * self.dbrl:.4f} %, interval disclosure (p={self.p:g}) "
                f"{100 * self.interval_disclosure:.4f} %")


def linked_records(linked: float) -> str:
    """DBRL's linked records as a count: ``4,300 records``, with ``(ties shared)`` when a
    tie split a record's credit (its ``t`` tied nearest originals count ``1 / t`` each)."""
    whole = float(linked).is_integer()
    return f"{linked:,.0f} records" + ("" if whole else " (ties shared)")


def percent(share: float) -> str:
    """A share as a percentage of 3 significant digits: ``33.3 %``, ``0.00104 %``, ``100 %``."""
    return f"{100.0 * share:.3g} %"


def class_lines(risk: dict) -> list[str]:
    """Lines on the classes' risks of a ``RiskResult.to_dict()`` (also a saved
    report's ``risk``); none for a result without them."""
    pro, jour, mark = risk.get("prosecutor"), risk.get("journalist"), risk.get("marketer")
    if not pro:
        return []
    thr = risk.get("risk_threshold", RISK_THRESHOLD)
    pop = (f"population {risk['population']:,.0f}, the sum of the weights {risk['weight_column']!r}"
           if risk.get("weight_column") else "no weights: the release is the population, the prosecutor's figures")
    lines = [f"  re-identification (ARX) over {risk.get('classes', 0):,} equivalence classes of the release; "
             f"a record is at risk above {percent(thr)}:",
             f"    prosecutor: highest risk {percent(pro['highest_risk'])}, success rate "
             f"{percent(pro['success_rate'])}, records at risk {percent(pro['records_at_risk'])}",
             f"    journalist ({pop}): highest risk {percent(jour['highest_risk'])}, success rate "
             f"{percent(jour['success_rate'])}, records at risk {percent(jour['records_at_risk'])}",
             f"    marketer: success rate {percent(mark['success_rate'])}"]
    ind = risk.get("individual_risk")
    if ind:
        lines.append(f"  individual risk (sdcMicro measure_risk, weights {risk['weight_column']!r}): global risk "
                     f"{ind['global_risk']:,.4g} expected re-identifications ({percent(ind['global_risk_share'])} "
                     f"of records), highest {percent(ind['highest_risk'])}, records at risk "
                     f"{percent(ind['records_at_risk'])}")
    else:
        lines.append(f"  individual risk (sdcMicro): not measured: {risk.get('individual_risk_note') or NO_WEIGHTS}")
    return lines


def _standardize(X: np.ndarray, scale: np.ndarray, mean: np.ndarray, sd: np.ndarray) -> np.ndarray:
    """``(X / scale - mean) / sd`` per column, 0 where sd is 0, and 0 (the mean of the
    values present) for a missing value (NaN). Elementwise, so a row's result does not
    depend on which chunk it came in (the tree and the scoring pass see bit-identical
    values)."""
    safe = np.where(sd > 0, sd, 1.0)
    Z = (X / scale - mean) / safe
    Z[:, sd == 0] = 0.0
    missing = np.isnan(Z)
    if missing.any():
        Z[missing] = 0.0
    return np.ascontiguousarray(Z)


def _published(frame: pl.DataFrame, pub: dict, qi: list[str], offset: int, label: str) -> list[pl.Series]:
    """Each QI's masked value as one column: the release's own, or a range's midpoint
    (missing when both ends are; one end missing is an error naming the row)."""
    out = []
    for c in qi:
        cols = pub[c]
        if len(cols) == 1:
            out.append(frame.get_column(cols[0]))
            continue
        lo_s, hi_s = frame.get_column(cols[0]), frame.get_column(cols[1])
        half = lo_s.is_null() != hi_s.is_null()
        if half.any():
            i = int(half.arg_true()[0])
            raise EngineError(f"columns {cols[0]!r} / {cols[1]!r} of {label} hold a range missing at one end at row "
                              f"{offset + i + 1} (rows counted from 1)")
        lo = lo_s.cast(pl.Float64).fill_null(np.nan).to_numpy()
        hi = hi_s.cast(pl.Float64).fill_null(np.nan).to_numpy()
        mid = pl.Series(c, 0.5 * lo + 0.5 * hi)
        out.append(mid.scatter(lo_s.is_null().arg_true(), None) if lo_s.null_count() else mid)
    return out


def _null_columns(src: TableSource, columns: list[str], chunk_rows: int) -> set:
    """The ``columns`` of ``src`` that hold a missing value: a Parquet file's footers
    when every row group records its null count, else one read of those columns."""
    known = _parquet_nulls(src.paths, columns) if src.kind == "parquet" and src.paths else {}
    found = {c for c, v in known.items() if v}
    rest = [c for c in columns if known.get(c) is None]
    if rest:
        for _, frame in src.iter_frames(rest, chunk_rows):
            found.update(c for c in rest if frame.get_column(c).null_count())
    return found


def _parquet_nulls(paths, columns: list[str]) -> dict:
    """Per column, its null count over the row groups of ``paths`` from the footers'
    statistics, or None when a row group does not record it."""
    out: dict = dict.fromkeys(columns, 0)
    for f in paths:
        md = pq.read_metadata(f)
        names = md.schema.to_arrow_schema().names
        for c in columns:
            if out[c] is None or c not in names:
                out[c] = None
                continue
            i = names.index(c)
            for g in range(md.num_row_groups):
                st = md.row_group(g).column(i).statistics
                if st is None or not st.has_null_count:
                    out[c] = None
                    break
                out[c] += st.null_count
    return out


def disclosure_risk(original: str | os.PathLike[str] | pl.DataFrame | pl.LazyFrame | TableSource,
                    masked: str | os.PathLike[str] | pl.DataFrame | pl.LazyFrame | TableSource,
                    qi: str | Sequence[str], *, p: float = 0.05, chunk_rows: int = 100_000,
                    separator: str | None = None, null_values: str | Sequence[str] | None = None,
                    encoding: str | None = None, ordinal=None, memory_limit: int | str | None = None,
                    weight_column: str | None = None, classes_on: str | Sequence[str] | None = None,
                    threshold: float = RISK_THRESHOLD) -> RiskResult:
    """DBRL and interval disclosure of ``masked`` against ``original`` on ``qi``, and
    the re-identification risks of the release's equivalence classes (ARX's prosecutor,
    journalist and marketer risks; sdcMicro's individual risk with sampling weights).

    ``original`` and ``masked``: CSV/Parquet paths (or anything ``open_source``
    takes), with the same number of rows in the same order. ``qi``: numeric QI
    columns of the original, published in ``masked`` as ``c`` or ``c_min``/``c_max``.
    ``separator``, ``null_values``, ``encoding``: how a CSV ``original`` is read
    (``engine.io.source.CsvOptions``; ``masked`` is read as the engine writes CSV).
    ``ordinal``: the ordinal QIs of a mixed-type release (``{"col": [order]}``,
    ``"@numcol"``, or None for an Enum), as for ``anonymize``; other categorical
    QIs are nominal. ``memory_limit`` (``"1GiB"``, bytes): refused up front (one line
    naming the least limit) when the measure would not fit (``engine.budget.check_command``);
    CSV inputs are then read in pieces. ``weight_column``: the original's column of
    sampling weights (numbers of at least 1, none missing): the population sizes of the
    classes; without it the individual risk is null (it needs weights). ``classes_on``:
    the QIs whose published columns key the classes (default ``qi``). ``threshold``:
    a record's risk above it counts the record as at risk (default 0.2, ARX's).
    See the module docstring for the definitions, ties, and memory.
    Raises ``EngineError`` on bad input.
    """
    limit = parse_limit(memory_limit)
    osrc = open_source(original, csv=csv_options(separator, null_values, encoding))
    try:
        return _disclosure_risk(osrc, masked, qi, p, chunk_rows, ordinal, limit, weight_column, classes_on,
                                threshold)
    finally:
        osrc.close()


def _disclosure_risk(original, masked, qi, p, chunk_rows, ordinal=None, limit=None, weight_column=None,
                     classes_on=None, threshold=RISK_THRESHOLD) -> RiskResult:
    t0 = time.perf_counter()
    qi = parse_columns(qi)
    kqi = qi if classes_on is None else parse_columns(classes_on, "classes_on")
    chunk_rows = check_whole(chunk_rows, "chunk_rows", 1)
    if isinstance(p, bool) or not isinstance(p, numbers.Real) or not math.isfinite(p) or p <= 0:
        raise EngineError(f"p must be a positive number of standard deviations, got {p!r}")
    p = float(p)
    bad = isinstance(threshold, bool) or not isinstance(threshold, numbers.Real)
    if bad or not 0 < threshold < 1:
        raise EngineError(f"threshold must be a probability between 0 and 1 (exclusive), got {threshold!r}")
    # (under a limit a CSV is read in pieces: Polars' streaming reader grows with the file)
    osrc: TableSource = open_source(original).bounded(early_piece(limit))
    msrc: TableSource = open_source(masked).bounded(early_piece(limit))
    for c in qi:
        if c not in osrc.columns:
            raise EngineError(f"column {c!r} not found in {osrc.label}")
    pub = published_columns(msrc, qi)
    kpub = published_columns(msrc, kqi)
    kcols = list(dict.fromkeys(m for c in kqi for m in kpub[c]))  # the columns that key the classes
    wcol = check_weight_column(osrc, weight_column, list(dict.fromkeys(qi + kqi)))
    osrc.check_reconciled(qi + ([wcol] if wcol else []))
    msrc.check_reconciled(list(dict.fromkeys([m for c in qi for m in pub[c]] + kcols)))
    n = osrc.count_rows()
    if n == 0:
        raise EngineError(f"{osrc.label} has no rows")
    layout = _Layout(osrc, qi, ordinal, chunk_rows)
    mixed = bool(ordinal) or any(not is_numeric(osrc.schema[c]) for c in qi)  # a mixed-type release
    for c in qi:
        if mixed and c in layout.kinds:
            if len(pub[c]) != 1:
                raise EngineError(f"column {c!r} is not numeric in {osrc.label} ({osrc.schema[c]}) but published "
                                  f"as a range in {msrc.label}")
            continue
        if mixed and c in layout.dates:
            continue
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
    mcols = list(dict.fromkeys(c for c in qi for c in pub[c]))
    rcols = list(dict.fromkeys(mcols + kcols))  # what the passes read of the release
    released = _null_columns(msrc, mcols, chunk_rows)
    layout.lay_out({c for c in qi if any(m in released for m in pub[c])})
    d = layout.width
    if limit is not None:  # the masked points of a release of classes of 2 rows or more: n / 2 at most
        masked_buffer = parquet_buffer(msrc.paths, mcols) if msrc.kind == "parquet" else None
        # (+ the classes' table: their keys as Polars and as floats, sorted, and their sums)
        keys = 2 * len(kcols) + 2
        state = risk_state(n, d, n // 2 + 1, masked_buffer) + 48 * keys * (n // 2 + 1)
        check_command(limit, "risk", n, len(qi), state, chunk_cells=3 * chunk_rows * (d + keys),  # (QIs as given)
                      buffered=parquet_buffer(osrc.paths, qi) if osrc.kind == "parquet" else 0,
                      csv=(osrc.kind == "csv") + (msrc.kind == "csv"))

    # the original's QIs, in memory, then standardized in place: the values (a missing one
    # at its column's mean) in the tree, the missing-value patterns beside them
    hot, flag = layout.one_hot, layout.indicator
    vals, inds = np.flatnonzero(~flag), np.flatnonzero(flag)
    X = np.empty((n, vals.shape[0]))
    P = np.zeros((n, inds.shape[0]), np.uint8)
    mom = PresentMoments(d)  # (over the values present: a missing value is NaN here)
    for offset, frame in osrc.iter_frames(qi, chunk_rows):
        x = layout.expand([frame.get_column(c) for c in qi], qi, offset, osrc.label)
        X[offset: offset + x.shape[0]] = x[:, vals]
        P[offset: offset + x.shape[0]] = x[:, inds] != 0
        mom.add(x, None, _present(x))
    scale, mean, count = mom.scale, mom.mean, mom.n
    constant = (mom.min == mom.max) | (count == 0)
    sd0 = np.where(constant, 0.0, np.sqrt(np.maximum(mom.m2, 0.0) / np.maximum(count, 1)))
    sd1 = np.where(constant | (count < 2), 0.0, np.sqrt(np.maximum(mom.m2, 0.0) / np.maximum(count - 1, 1)))
    # one-hot columns: x / sqrt(2) (different categories: squared distance 1)
    mean = np.where(hot, 0.0, mean)
    sd0 = np.where(hot, np.sqrt(2.0) / scale, sd0)
    # a missing value against a value: R^2 more, R the largest standardized distance of
    # the column's values present (1 if they are one value or none)
    v = layout.value_of[inds]
    spread = (mom.max[v] - mom.min[v]) / scale[v] / np.where(sd0[v] > 0, sd0[v], 1.0)
    widest = np.where((sd0[v] > 0) & np.isfinite(spread), spread, 1.0)
    R2 = np.ascontiguousarray(widest * widest)
    zs, zm, zd = scale[vals], mean[vals], sd0[vals]
    for a in range(0, n, chunk_rows):
        X[a: a + chunk_rows] = _standardize(X[a: a + chunk_rows], zs, zm, zd)
    tree = interruptible(build_kdtree, X, LEAF_SIZE)  # (seconds: on a thread, so a signal stops it at once)
    del X

    # pass 1 over the release: its distinct masked points, its column moments, its classes
    counter = ClassCounter([str(j) for j in range(d)], max(chunk_rows, 1 << 16))
    keyed = _key_columns(msrc.schema, kcols)
    classes = ClassCounter(keyed, max(chunk_rows, 1 << 16))
    mmom = PresentMoments(d)
    for offset, frame in msrc.iter_frames(rcols, chunk_rows):
        M = layout.expand(_published(frame, pub, qi, offset, msrc.label), layout.names(pub), offset, msrc.label)
        mmom.add(M, None, _present(M))
        counter.add(pl.DataFrame({str(j): M[:, j] for j in range(d)}))
        classes.add(_key_frame(frame, kcols))
    points = counter.finish()
    table = classes.finish()
    del classes
    # (a sign column that is 0 in every class tells nothing apart: left out of the key matrix)
    keyed = [c for c in keyed if c in kcols or table.get_column(c).max()]
    table = table.select(keyed)
    coded = {c: pl.Enum(sorted(table.get_column(c).drop_nulls().cast(pl.String).unique().to_list()))
             for c in kcols if _coded(msrc.schema[c])}
    K = _key_matrix(table, coded)
    del table
    K = np.ascontiguousarray(K[np.lexsort(K.T[::-1])])  # (NaN, a missing value, last: as find_rows)
    f = np.zeros(K.shape[0], np.int64)
    W = np.zeros(K.shape[0]) if wcol else np.zeros(0)
    no_weights = np.zeros(0)
    U = points.select([str(j) for j in range(d)]).to_numpy().astype(np.float64)
    U = np.ascontiguousarray(U[np.lexsort(U.T[::-1])])  # (NaN, a missing value, last: as find_rows)
    Uz = _standardize(U[:, vals], zs, zm, zd)
    Up = np.ascontiguousarray(U[:, inds] != 0, dtype=np.uint8)
    d2 = np.empty(U.shape[0])
    ties = np.empty(U.shape[0], np.int64)
    if inds.shape[0]:
        interruptible(nearest_all_patterns, tree, Uz, Up, P, R2, d2, ties)
    else:
        interruptible(nearest_all, tree, Uz, d2, ties)

    # pass 2: original and release side by side
    half = p * sd1
    mcount = mmom.n
    msd1 = np.sqrt(np.maximum(mmom.m2, 0.0) / np.maximum(mcount - 1, 1)) * (mmom.scale / scale)
    msd1[(mmom.min == mmom.max) | (mcount < 2)] = 0.0
    half_m = p * msd1
    half = np.where(hot, 0.0, half)  # a category is inside only when unchanged
    half_m = np.where(hot, 0.0, half_m)
    counted = (~flag).astype(np.uint8)  # (a missing value is scored on its value's column)
    credit, inside, inside_sdc = 0.0, 0, 0
    for offset, fo, fm in aligned_frames(osrc, msrc, qi + ([wcol] if wcol else []), rcols, chunk_rows):
        x = layout.expand([fo.get_column(c) for c in qi], qi, offset, osrc.label)
        M = layout.expand(_published(fm, pub, qi, offset, msrc.label), layout.names(pub), offset, msrc.label)
        idx = np.empty(M.shape[0], np.int64)
        find_rows(U, M, idx)
        kidx = np.empty(M.shape[0], np.int64)
        find_rows(K, _key_matrix(_key_frame(fm, kcols).select(keyed), coded), kidx)
        if (idx < 0).any() or (kidx < 0).any():  # pragma: no cover - the first pass saw every point
            raise EngineError(f"{msrc.label} changed while it was read")
        class_totals(kidx, _weights(fo.get_column(wcol), offset, osrc.label) if wcol else no_weights, f, W)
        c, a, b = score_rows(_standardize(x[:, vals], zs, zm, zd), Uz, idx, d2, ties,
                             np.ascontiguousarray(x / scale), np.ascontiguousarray(M / scale), half, half_m, counted,
                             np.ascontiguousarray(x[:, inds] != 0, dtype=np.uint8), Up, R2)
        credit += c
        inside += a
        inside_sdc += b
    return RiskResult(original=osrc.label, masked=msrc.label, rows=n, qi=qi, p=p, dbrl=credit / n,
                      dbrl_linked=float(credit), masked_points=int(U.shape[0]), tied_points=int((ties > 1).sum()),
                      interval_disclosure=inside / n, interval_disclosure_sdcmicro=inside_sdc / n,
                      range_qis=[c for c in qi if len(pub[c]) == 2], missing_qis=sorted(layout.nulls, key=qi.index),
                      **class_risks(f, W if wcol else None, float(threshold), wcol), class_qi=kqi,
                      wall_seconds=time.perf_counter() - t0)


def class_risks(f: np.ndarray, W: np.ndarray | None, threshold: float, weight_column: str | None = None) -> dict:
    """The class-based fields of ``RiskResult`` from each class's rows ``f`` and sum of
    sampling weights ``W`` (None: no weights, ``F = f``); see the module docstring."""
    F = f.astype(np.float64) if W is None else W
    r = np.empty(f.shape[0])
    if W is None:
        r[:] = 1.0 / np.maximum(f, 1)
    else:
        individual_risk(f, F, r)
    n, k, fmin, Fmin, risky_f, risky_F, share, total_F, expected, rmax, risky_r = class_summary(f, F, r, threshold)
    out = dict(classes=int(k), risk_threshold=threshold,
               prosecutor={"highest_risk": 1.0 / fmin, "success_rate": k / n, "records_at_risk": risky_f / n},
               journalist={"highest_risk": 1.0 / Fmin, "success_rate": max(k / total_F, share / n),
                           "records_at_risk": risky_F / n},
               marketer={"success_rate": share / n},
               weight_column=weight_column, population=None if W is None else float(total_F),
               individual_risk=None, individual_risk_note=NO_WEIGHTS)
    if W is not None:
        out.update(individual_risk={"global_risk": float(expected), "global_risk_share": expected / n,
                                    "highest_risk": float(rmax), "records_at_risk": risky_r / n},
                   individual_risk_note=None)
    return out


def check_weight_column(src: TableSource, name: str | None, qi: Sequence[str]) -> str | None:
    """``name`` when it is a numeric column of ``src`` and no QI (one line otherwise);
    its values are checked as they are read (``_weights``)."""
    if name is None:
        return None
    if not isinstance(name, str) or not name:
        raise EngineError(f"weight_column (--weight-column) must be a column name, got {name!r}")
    if name in qi:
        raise EngineError(f"weight column {name!r} is also a quasi-identifier; sampling weights are a column "
                          f"of their own")
    if name not in src.columns:
        raise EngineError(f"weight column {name!r} not found in {src.label}")
    if not is_numeric(src.schema[name]):
        raise EngineError(f"weight column {name!r} of {src.label} is not numeric ({src.schema[name]}); "
                          f"sampling weights are numbers of at least 1")
    return name


def _weights(s: pl.Series, offset: int, label: str) -> np.ndarray:
    """A chunk's sampling weights as float64: one line naming the first row whose
    weight is missing, not finite or below 1 (a record stands for itself at least)."""
    if s.null_count():
        i = int(s.is_null().arg_true()[0])
        raise EngineError(f"weight column {s.name!r} of {label} has a missing value at row {offset + i + 1} "
                          f"(rows counted from 1); every record needs its sampling weight")
    w = s.cast(pl.Float64).to_numpy()
    bad = ~(np.isfinite(w) & (w >= 1.0))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise EngineError(f"weight column {s.name!r} of {label} has the value {s[i]!r} at row {offset + i + 1} "
                          f"(rows counted from 1); a sampling weight is a finite number of at least 1 (the "
                          f"record stands for itself and possibly others)")
    return np.ascontiguousarray(w)


def _sign_name(c: str) -> str:
    return f"__microagg_risk_sign__{c}"


def _coded(dtype) -> bool:
    """A class key column compared as text (coded by the sorted texts of the classes)."""
    return not (dtype.is_float() or dtype.is_integer() or dtype.is_temporal() or dtype == pl.Boolean)


def _key_columns(schema, kcols: list[str]) -> list[str]:
    """The columns of ``_key_frame``: the release's, then a sign column per float one."""
    return kcols + [_sign_name(c) for c in kcols if schema[c].is_float()]


def _key_frame(frame: pl.DataFrame, kcols: list[str]) -> pl.DataFrame:
    """The columns that key the classes, and per float column one more: 1 for
    ``-0.0``, 2 for NaN, else 0 (``-0.0 == 0.0`` and a NaN would match a missing value in
    the key matrix; a release shows them apart)."""
    extra = [pl.when(pl.col(c).is_nan()).then(2).when((pl.col(c) == 0.0) & ((1.0 / pl.col(c)) < 0.0)).then(1)
             .otherwise(0).fill_null(0).cast(pl.Int8).alias(_sign_name(c))
             for c in kcols if frame.schema[c].is_float()]
    return frame.select(kcols).with_columns(extra)


_NARROW = (pl.Boolean, pl.Int8, pl.Int16, pl.Int32, pl.UInt8, pl.UInt16, pl.UInt32)


def _key_matrix(frame: pl.DataFrame, coded: dict) -> np.ndarray:
    """A key frame (``_key_frame``) as float64 columns that are equal exactly when the
    values are, a missing value NaN: a float as it is; an integer of up to 32 bits, a
    Boolean, as it is; a wider one (64-bit integers, dates, datetimes: their physical
    value) as its high and low 32 bits; a text (``coded``: the column's sorted texts as
    an Enum) as its code."""
    parts = []
    for c in frame.columns:
        s = frame.get_column(c)
        if c in coded:
            parts.append(s.cast(pl.String).cast(coded[c]).to_physical().cast(pl.Float64).to_numpy())
            continue
        if s.dtype.is_float():
            parts.append(s.cast(pl.Float64).to_numpy())
            continue
        if s.dtype in _NARROW:
            parts.append(s.cast(pl.Float64).to_numpy())
            continue
        v = s.to_physical() if s.dtype.is_temporal() else s
        x = v.fill_null(0).to_numpy()
        x = x.view(np.int64) if x.dtype == np.uint64 else x.astype(np.int64, copy=False)
        hi, lo = (x >> 32).astype(np.float64), (x & 0xFFFFFFFF).astype(np.float64)
        if s.null_count():
            missing = s.is_null().to_numpy()
            hi[missing] = lo[missing] = np.nan
        parts += [hi, lo]
    return np.ascontiguousarray(np.column_stack(parts)) if parts else np.zeros((frame.height, 0))


def _present(X: np.ndarray) -> np.ndarray | None:
    """False where ``X`` holds a missing value (NaN: a non-finite value present is an
    error before), or None when none is missing."""
    missing = np.isnan(X)
    return ~missing if missing.any() else None


class _Layout:
    """The QIs as numbers (see the module docstring): numeric and date QIs one column
    each, ordinal QIs their rank, nominal QIs one-hot over the original's sorted
    categories (``one_hot`` marks those columns); a QI with a missing value (in the
    original or the release: ``lay_out``) gets a missing-value indicator column beside
    its value (numeric, date, ordinal: ``indicator``, ``value_of`` its value's column)
    or a category of its own, the last (nominal).

    ``__init__`` reads the original once for its categories and, unless its Parquet
    footers tell, which QIs hold a missing value; ``lay_out`` fixes the columns."""

    def __init__(self, osrc: TableSource, qi: list[str], ordinal, chunk_rows: int):
        orders = {c: (order, by) for c, order, by in parse_ordinal(ordinal) or ()}
        for c in orders:
            if c not in qi:
                raise EngineError(f"ordinal (--ordinal): column {c!r} is not a quasi-identifier")
        schema = osrc.schema
        self.qi = qi
        self.dates = {c for c in qi if schema[c].is_temporal() and c not in orders}
        if osrc.kind == "csv":  # a CSV's ISO dates, as anonymize reads them
            self.dates |= iso_date_columns(osrc, [c for c in qi if c not in orders])
        self.kinds = {c: ("ordinal" if c in orders else "nominal") for c in qi
                      if c in orders or not (is_numeric(schema[c]) or c in self.dates)}
        values: dict = {c: set() for c in self.kinds}
        mins: dict = {c: {} for c in self.kinds}
        by_cols = {c: orders[c][1] for c in self.kinds if c in orders and orders[c][1] is not None}
        for by in by_cols.values():
            if by not in osrc.columns:
                raise EngineError(f"ordinal (--ordinal): column {by!r} not found in {osrc.label}")
        known = _parquet_nulls(osrc.paths, qi) if osrc.kind == "parquet" and osrc.paths else {}
        self.nulls = {c for c, v in known.items() if v}  # the QIs with a missing value
        unknown = [c for c in qi if known.get(c) is None]
        read = list(dict.fromkeys(list(self.kinds) + list(by_cols.values()) + unknown))
        if read:
            for _, f in osrc.iter_frames(read, chunk_rows):
                self.nulls.update(c for c in unknown if f.get_column(c).null_count())
                for c in self.kinds:
                    t = f.get_column(c).cast(pl.String)
                    if c in by_cols:
                        g = pl.DataFrame({"c": t, "b": f.get_column(by_cols[c]).cast(pl.Float64, strict=False)}) \
                            .group_by("c").agg(pl.col("b").min())
                        for v, m in g.iter_rows():
                            old = mins[c].get(v)
                            mins[c][v] = m if old is None or (m is not None and m < old) else old
                    values[c].update(t.drop_nulls().unique().to_list())
        self.categories = {}
        for c, kind in self.kinds.items():
            if kind == "nominal":
                self.categories[c] = sorted(values[c])
            elif orders[c][0] is not None:
                self.categories[c] = list(orders[c][0])
            elif c in by_cols:
                self.categories[c] = sorted(values[c], key=lambda v: (mins[c].get(v) is None, mins[c].get(v) or 0, v))
            elif isinstance(schema[c], pl.Enum):
                self.categories[c] = schema[c].categories.to_list()
            else:
                raise EngineError(f"ordinal (--ordinal): give the order of column {c!r} (COL=CAT1,CAT2,...)")

    def lay_out(self, released: set) -> None:
        """Fix the columns, given the QIs with a missing value in the release."""
        self.nulls |= released
        hot, flag, value_of = [], [], []
        for c in self.qi:
            if self.kinds.get(c) == "nominal":
                k = len(self.categories[c]) + (c in self.nulls)
                hot += [True] * k
                flag += [False] * k
                value_of += range(len(value_of), len(value_of) + k)
            else:
                hot.append(False)
                flag.append(False)
                value_of.append(len(value_of))
                if c in self.nulls:
                    hot.append(False)
                    flag.append(True)
                    value_of.append(len(value_of) - 1)
        self.one_hot = np.array(hot, dtype=bool)
        self.indicator = np.array(flag, dtype=bool)
        self.value_of = np.array(value_of, dtype=np.int64)
        self.width = len(hot)

    def names(self, pub: dict) -> list[str]:
        """The release's column(s) of each QI, for messages."""
        return [" / ".join(pub[c]) for c in self.qi]

    def expand(self, columns: list[pl.Series], names: list[str], offset: int, label: str) -> np.ndarray:
        """The QIs' columns (one Series a QI, in ``qi`` order; ``names`` for messages) as
        the laid-out numbers: a missing number NaN beside an indicator 1."""
        parts = []
        for c, name, s in zip(self.qi, names, columns):
            kind = self.kinds.get(c)
            missing = s.is_null().to_numpy() if s.null_count() else None
            if missing is not None and c not in self.nulls:  # pragma: no cover - seen before the passes
                raise EngineError(f"{label} changed while it was read")
            if kind is None:
                v = s
                if v.dtype == pl.String and c in self.dates:  # a CSV's date text
                    v = v.str.to_date(strict=False)
                if v.dtype.is_temporal():
                    v = v.to_physical()
                v = v.cast(pl.Float64, strict=False)
                bad = (~v.is_finite()).fill_null(False) | (v.is_null() & s.is_not_null())
                if bad.any():
                    i = int(bad.arg_true()[0])
                    raise EngineError(f"column {name!r} of {label} has the value {s[i]!r} at row {offset + i + 1} "
                                      f"(rows counted from 1), which is no finite number")
                parts.append(v.fill_null(np.nan).to_numpy()[:, None])
                if c in self.nulls:
                    parts.append(np.zeros((s.len(), 1)) if missing is None else missing.astype(np.float64)[:, None])
                continue
            cats = self.categories[c]
            code = s.cast(pl.String).replace_strict(cats, list(range(len(cats))), default=-1,
                                                    return_dtype=pl.Int64).to_numpy().copy()
            if missing is not None:  # a missing value: the code after the categories
                code[missing] = len(cats)
            if kind == "ordinal":
                if (code < 0).any():
                    i = int(np.flatnonzero(code < 0)[0])
                    raise EngineError(f"column {name!r} of {label} has the value {s.cast(pl.String)[i]!r} at row "
                                      f"{offset + i + 1}, which its ordinal order does not list")
                rank = code.astype(np.float64)
                if missing is not None:
                    rank[missing] = np.nan
                parts.append(rank[:, None])
                if c in self.nulls:
                    parts.append(np.zeros((s.len(), 1)) if missing is None else missing.astype(np.float64)[:, None])
            else:
                k = len(cats) + (c in self.nulls)
                parts.append((code[:, None] == np.arange(k)[None, :]).astype(np.float64))
        return np.ascontiguousarray(np.hstack(parts))
