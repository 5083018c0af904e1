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
a value of the original matches none; a QI of more than ``ONE_HOT_MAX`` categories is
its category's code instead, beside the tree as the missing-value indicators below, a
different code adding 1, half for a category the original lacks: the same distance,
without ``n x categories`` columns); an ordinal QI (``ordinal``, as for
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
number of at least 0), but at least ``f_k`` (a record of weight 0 stands for no
population, yet is published: it counts as itself), else ``F_k = f_k`` (no population
known: the release is taken as the population).

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

**Households** (``household_column``, read from the original, no QI): a household is
re-identified if any member is, sdcMicro's hierarchical risk ``1 - prod(1 - r_i)`` over
its members, for the prosecutor's ``r_i = 1 / f_k``, each record's DBRL credit and (with
weights) sdcMicro's individual risk; a household is at risk when a member's risk is
above ``threshold``. Each row's class, credit and household are kept in row order
(``_Households``, about 24 bytes a row and its id) and multiplied in row order
(``household_products``): the same figures for any chunk size.

**Verdict** (``max_risk``): the measures against thresholds (``engine.audit.verdict``).

The classes are counted in the first pass over the release (Polars' group-by on the
published columns), numbered in sorted order, and each record is looked up in that
table in the second pass (``find_rows``), its weight added to its class in row order
(``class_totals``): counts and sums do not depend on the chunk size.

Which QIs hold a missing value is read before the passes: a Parquet file's footers
(each row group's null count), else one more read of the QI columns.

How it scales. The original's QIs are held in memory (about ``8 d`` bytes per row,
standardized) and indexed by the engine's kd-tree (``engine.kernels.index.kdtree``,
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

from ..budget import check_command, early_piece, parquet_buffer, parse_limit, risk_state
from ..checks import check_whole
from ..errors import EngineError
from ..io.csvfile import csv_options
from ..io.source import TableSource, open_source
from ..kernels.index.kdtree import build_kdtree
from ..kernels.risk import (class_summary, class_totals, find_rows, household_products, individual_risk,
                            nearest_all, nearest_all_patterns, score_rows)
from ..parallel import interruptible
from ..report import json_text
from .classes import ClassCounter, PresentMoments, aligned_frames, is_numeric, parse_columns, published_columns
from .points import (Layout, coded_key, declared_codes, key_columns, key_frame, key_matrix, null_columns, present,
                     published, standardize)
from .verdict import evaluate, parse_max_risk, verdict_lines

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
    population: float | None = None  # the sum of the classes' population sizes (weights, at least the rows)
    # sdcMicro's individual risk (global_risk: expected re-identifications, global_risk_share: of n,
    # highest_risk, records_at_risk); None without weights, ``individual_risk_note`` saying why
    individual_risk: dict | None = None
    individual_risk_note: str | None = None
    # with household_column: a household is re-identified if any member is (household_risks)
    household: dict | None = None
    # with max_risk: each measure against its threshold (engine.audit.verdict.evaluate)
    verdict: dict | None = None
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
        """The summary's lines on the release's classes (ARX, sdcMicro), its households
        and its verdict."""
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
    return lines + household_lines(risk.get("household")) + verdict_lines(risk.get("verdict"))


def household_lines(hh: dict | None) -> list[str]:
    """The summary's lines on the households (none without a household column)."""
    if not hh:
        return []
    pro, ind = hh["prosecutor"], hh.get("individual")
    lines = [f"  households ({hh['households']:,}, column {hh['column']!r}; re-identified if any member is): "
             f"prosecutor highest {percent(pro['highest_risk'])}, mean {percent(pro['success_rate'])}, "
             f"households at risk {percent(pro['households_at_risk'])}; DBRL {percent(hh['dbrl'])}"]
    if ind:
        lines.append(f"    individual: highest {percent(ind['highest_risk'])}, expected re-identified households "
                     f"{ind['expected']:,.4g} ({percent(ind['share'])}), households at risk "
                     f"{percent(ind['households_at_risk'])}")
    return lines


def disclosure_risk(original: str | os.PathLike[str] | pl.DataFrame | pl.LazyFrame | TableSource,
                    masked: str | os.PathLike[str] | pl.DataFrame | pl.LazyFrame | TableSource,
                    qi: str | Sequence[str], *, p: float = 0.05, chunk_rows: int = 100_000,
                    separator: str | None = None, null_values: str | Sequence[str] | None = None,
                    encoding: str | None = None, ordinal=None, memory_limit: int | str | None = None,
                    weight_column: str | None = None, classes_on: str | Sequence[str] | None = None,
                    threshold: float = RISK_THRESHOLD, household_column: str | None = None,
                    max_risk=None, nominal=None, missing=None, numeric=None) -> RiskResult:
    """DBRL and interval disclosure of ``masked`` against ``original`` on ``qi``, and
    the re-identification risks of the release's equivalence classes (ARX's prosecutor,
    journalist and marketer risks; sdcMicro's individual risk with sampling weights).

    ``original`` and ``masked``: CSV/Parquet paths (or anything ``open_source``
    takes), with the same number of rows in the same order. ``qi``: numeric QI
    columns of the original, published in ``masked`` as ``c`` or ``c_min``/``c_max``.
    ``separator``, ``null_values``, ``encoding``: how a CSV ``original`` is read
    (``engine.io.csvfile.CsvOptions``; ``masked`` is read as the engine writes CSV).
    ``ordinal``: the ordinal QIs of a mixed-type release (``{"col": [order]}``,
    ``"@numcol"``, or None for an Enum), as for ``anonymize``; other categorical
    QIs are nominal. ``memory_limit`` (``"1GiB"``, bytes): refused up front (one line
    naming the least limit) when the measure would not fit (``engine.budget.check_command``);
    CSV inputs are then read in pieces. ``weight_column``: the original's column of
    sampling weights (numbers of at least 0, none missing): the population sizes of the
    classes; without it the individual risk is null (it needs weights). ``classes_on``:
    the QIs whose published columns key the classes (default ``qi``). ``threshold``:
    a record's risk above it counts the record as at risk (default 0.2, ARX's).
    ``household_column``: the original's column of household ids: the household risks
    (``RiskResult.household``). ``max_risk``: thresholds (``{"prosecutor": 0.05}``, or
    ``"prosecutor=0.05,dbrl"``; ``engine.audit.verdict``) held against the measures:
    ``RiskResult.verdict`` (nothing is raised for a failed verdict here).
    ``nominal``, ``missing``, ``numeric`` (as ``anonymize``'s; a statistical file's
    declarations add theirs, ``engine.audit.points.declared_codes``): numeric QIs compared
    as categories, declared missing codes compared as missing values.
    See the module docstring for the definitions, ties, and memory.
    Raises ``EngineError`` on bad input.
    """
    limit = parse_limit(memory_limit)
    osrc = open_source(original, csv=csv_options(separator, null_values, encoding))
    try:
        given = declared_codes(osrc, original, qi, nominal=nominal, missing=missing, numeric=numeric, ordinal=ordinal)
        return _disclosure_risk(osrc, masked, qi, p, chunk_rows, ordinal, limit, weight_column, classes_on,
                                threshold, household_column, max_risk, given)
    finally:
        osrc.close()


def _disclosure_risk(original, masked, qi, p, chunk_rows, ordinal=None, limit=None, weight_column=None,
                     classes_on=None, threshold=RISK_THRESHOLD, household_column=None, max_risk=None,
                     given=(frozenset(), {})) -> RiskResult:
    t0 = time.perf_counter()
    qi, kqi, chunk_rows, p = _settings(qi, classes_on, chunk_rows, p, threshold)
    limits = parse_max_risk(max_risk, weights=weight_column is not None, households=household_column is not None)
    # (under a limit a CSV is read in pieces: Polars' streaming reader grows with the file)
    osrc: TableSource = open_source(original).bounded(early_piece(limit))
    with open_source(masked) as opened:
        msrc: TableSource = opened.bounded(early_piece(limit))
        for c in qi:
            if c not in osrc.columns:
                raise EngineError(f"column {c!r} not found in {osrc.label}")
        pub = published_columns(msrc, qi)
        kpub = published_columns(msrc, kqi)
        kcols = list(dict.fromkeys(m for c in kqi for m in kpub[c]))  # the columns that key the classes
        wcol = check_weight_column(osrc, weight_column, list(dict.fromkeys(qi + kqi)))
        hcol = check_household_column(osrc, household_column, list(dict.fromkeys(qi + kqi)), wcol)
        osrc.check_reconciled(qi + [c for c in (wcol, hcol) if c])
        msrc.check_reconciled(list(dict.fromkeys([m for c in qi for m in pub[c]] + kcols)))
        n = osrc.count_rows()
        if n == 0:
            raise EngineError(f"{osrc.label} has no rows")
        layout = Layout(osrc, qi, ordinal, chunk_rows, *given)  # (given: nominal QIs, declared missing codes)
        _check_kinds(layout, osrc, msrc, qi, pub, mixed=bool(ordinal) or bool(given[0]) or any(
            not is_numeric(osrc.schema[c]) for c in qi))
        nm = msrc.count_rows()
        if nm != n:
            raise EngineError(f"{msrc.label} has {nm:,} rows but {osrc.label} has {n:,}; "
                              f"the release must keep the original's rows in order")
        mcols = list(dict.fromkeys(c for c in qi for c in pub[c]))
        rcols = list(dict.fromkeys(mcols + kcols))  # what the passes read of the release
        released = null_columns(msrc, mcols, chunk_rows)
        layout.lay_out({c for c in qi if any(m in released for m in pub[c])})
        if limit is not None:
            _check_limit(limit, osrc, msrc, n, qi, mcols, kcols, layout.width, chunk_rows, hcol is not None)
        orig = _original_points(osrc, layout, qi, n, chunk_rows)
        rel = _release_points(msrc, layout, pub, qi, rcols, kcols, chunk_rows, orig)
        members = _Households(hcol, osrc.label) if hcol else None
        credit, inside, inside_sdc, f, W = _score(osrc, msrc, layout, pub, qi, wcol, rcols, kcols, chunk_rows,
                                                  orig, rel, p, members)
    res = RiskResult(original=osrc.label, masked=msrc.label, rows=n, qi=qi, p=p, dbrl=credit / n,
                     dbrl_linked=float(credit), masked_points=int(rel.U.shape[0]),
                     tied_points=int((rel.ties > 1).sum()), interval_disclosure=inside / n,
                     interval_disclosure_sdcmicro=inside_sdc / n, range_qis=[c for c in qi if len(pub[c]) == 2],
                     missing_qis=sorted(layout.nulls, key=qi.index),
                     **class_risks(f, W if wcol else None, float(threshold), wcol), class_qi=kqi)
    if members is not None:
        res.household = members.risks(f, W if wcol else None, float(threshold))
    if limits is not None:
        res.verdict = evaluate(limits, res.to_dict())
    res.wall_seconds = time.perf_counter() - t0
    return res


def _settings(qi, classes_on, chunk_rows, p, threshold):
    """The checked settings: ``(qi, classes_on, chunk_rows, p)``, or one line naming the bad one."""
    qi = parse_columns(qi)
    kqi = qi if classes_on is None else parse_columns(classes_on, "classes_on")
    chunk_rows = check_whole(chunk_rows, "chunk_rows", 1)
    if isinstance(p, bool) or not isinstance(p, numbers.Real) or not math.isfinite(p) or p <= 0:
        raise EngineError(f"p must be a positive number of standard deviations, got {p!r}")
    bad = isinstance(threshold, bool) or not isinstance(threshold, numbers.Real)
    if bad or not 0 < threshold < 1:
        raise EngineError(f"threshold must be a probability between 0 and 1 (exclusive), got {threshold!r}")
    return qi, kqi, chunk_rows, float(p)


def _check_kinds(layout: Layout, osrc: TableSource, msrc: TableSource, qi, pub, mixed: bool) -> None:
    """Every QI measurable: numeric in both tables, or (a mixed-type release) a date or
    a category published as one value."""
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


def _check_limit(limit, osrc, msrc, n, qi, mcols, kcols, d, chunk_rows, households=False) -> None:
    """``memory_limit``: refused up front when the measure would not fit. The masked points
    of a release of classes of 2 rows or more: n / 2 at most; the classes' table: their
    keys as Polars and as floats, sorted, and their sums; with households, each row's
    class, credit and household code and id (``_Households``: about 64 bytes a row)."""
    masked_buffer = parquet_buffer(msrc.paths, mcols) if msrc.kind == "parquet" else None
    keys = 2 * len(kcols) + 2
    state = risk_state(n, d, n // 2 + 1, masked_buffer) + 48 * keys * (n // 2 + 1) + (64 * n if households else 0)
    check_command(limit, "risk", n, len(qi), state, chunk_cells=3 * min(chunk_rows, n) * (d + keys),  # (QIs as given)
                  buffered=parquet_buffer(osrc.paths, qi) if osrc.kind == "parquet" else 0,
                  csv=(osrc.kind == "csv") + (msrc.kind == "csv"))


@dataclass
class _Original:
    """The original's QIs indexed (``_original_points``): the kd-tree of the standardized
    values, each row's pattern ``P`` (its missing-value indicators and coded nominal QIs'
    categories: ``Layout.coded``), and how a row is standardized."""

    tree: object
    P: np.ndarray
    vals: np.ndarray  # the laid-out columns in the tree
    inds: np.ndarray  # the pattern columns: missing-value indicators, coded nominal QIs
    zs: np.ndarray
    zm: np.ndarray
    zd: np.ndarray
    R2: np.ndarray
    scale: np.ndarray
    sd1: np.ndarray  # the sample sd per laid-out column (interval disclosure)


def _original_points(osrc: TableSource, layout: Layout, qi, n: int, chunk_rows) -> _Original:
    """The original's ``n`` rows of QIs, in memory, then standardized in place: the values
    (a missing one at its column's mean) in the tree, the missing-value patterns beside them."""
    hot, flag, d = layout.one_hot, layout.indicator, layout.width
    vals, inds = np.flatnonzero(~flag & ~layout.coded), np.flatnonzero(flag | layout.coded)
    X = np.empty((n, vals.shape[0]))
    P = np.zeros((n, inds.shape[0]), np.int32)
    mom = PresentMoments(d)  # (over the values present: a missing value is NaN here)
    for offset, frame in osrc.iter_frames(qi, chunk_rows):
        x = layout.expand([frame.get_column(c) for c in qi], qi, offset, osrc.label)
        X[offset: offset + x.shape[0]] = x[:, vals]
        P[offset: offset + x.shape[0]] = patterns(x, inds, layout)
        mom.add(x, None, present(x))
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
    R2 = np.ascontiguousarray(np.where(layout.coded[inds], 1.0, widest * widest))  # (a category: 1)
    zs, zm, zd = scale[vals], mean[vals], sd0[vals]
    for a in range(0, n, chunk_rows):
        X[a: a + chunk_rows] = standardize(X[a: a + chunk_rows], zs, zm, zd)
    tree = interruptible(build_kdtree, X, LEAF_SIZE)  # (seconds: on a thread, so a signal stops it at once)
    return _Original(tree, P, vals, inds, zs, zm, zd, R2, scale, sd1)


def patterns(x: np.ndarray, inds: np.ndarray, layout: Layout) -> np.ndarray:
    """The pattern columns ``inds`` of laid-out rows ``x`` as int32: a missing-value
    indicator 0/1, a coded nominal QI its category's code."""
    cols = x[:, inds]
    return np.ascontiguousarray(np.where(layout.coded[inds], cols, cols != 0), dtype=np.int32)


@dataclass
class _Release:
    """The release's distinct masked points ``U`` (sorted; standardized ``Uz``, missing-value
    patterns ``Up``) with their least distance to an original and its ties, its classes'
    key matrix ``K`` (sorted), and its column moments."""

    U: np.ndarray
    Uz: np.ndarray
    Up: np.ndarray
    d2: np.ndarray
    ties: np.ndarray
    K: np.ndarray
    keyed: list
    coded: dict
    moments: PresentMoments


def _release_points(msrc: TableSource, layout: Layout, pub, qi, rcols, kcols, chunk_rows,
                    orig: _Original) -> _Release:
    """Pass 1 over the release: its distinct masked points, its column moments, its
    classes; then each point's nearest originals (in parallel)."""
    d = layout.width
    counter = ClassCounter([str(j) for j in range(d)], max(chunk_rows, 1 << 16))
    keyed = key_columns(msrc.schema, kcols)
    classes = ClassCounter(keyed, max(chunk_rows, 1 << 16))
    mmom = PresentMoments(d)
    for offset, frame in msrc.iter_frames(rcols, chunk_rows):
        M = layout.expand(published(frame, pub, qi, offset, msrc.label), layout.names(pub), offset, msrc.label)
        mmom.add(M, None, present(M))
        counter.add(pl.DataFrame({str(j): M[:, j] for j in range(d)}))
        classes.add(key_frame(frame, kcols))
    points = counter.finish()
    table = classes.finish()
    del classes
    # (a sign column that is 0 in every class tells nothing apart: left out of the key matrix)
    keyed = [c for c in keyed if c in kcols or table.get_column(c).max()]
    table = table.select(keyed)
    coded = {c: pl.Enum(sorted(table.get_column(c).drop_nulls().cast(pl.String).unique().to_list()))
             for c in kcols if coded_key(msrc.schema[c])}
    K = key_matrix(table, coded)
    del table
    K = np.ascontiguousarray(K[np.lexsort(K.T[::-1])])  # (NaN, a missing value, last: as find_rows)
    U = points.select([str(j) for j in range(d)]).to_numpy().astype(np.float64)
    U = np.ascontiguousarray(U[np.lexsort(U.T[::-1])])  # (NaN, a missing value, last: as find_rows)
    Uz = standardize(U[:, orig.vals], orig.zs, orig.zm, orig.zd)
    Up = patterns(U, orig.inds, layout)
    d2 = np.empty(U.shape[0])
    ties = np.empty(U.shape[0], np.int64)
    if orig.inds.shape[0]:
        interruptible(nearest_all_patterns, orig.tree, Uz, Up, orig.P, orig.R2, d2, ties)
    else:
        interruptible(nearest_all, orig.tree, Uz, d2, ties)
    return _Release(U, Uz, Up, d2, ties, K, keyed, coded, mmom)


def _score(osrc, msrc, layout: Layout, pub, qi, wcol, rcols, kcols, chunk_rows, orig: _Original, rel: _Release,
           p: float, members: "_Households | None" = None):
    """Pass 2, the original and the release side by side: ``(DBRL credit, records inside,
    records inside by sdcMicro's variant, class rows f, class weights W)``; each row's
    household, class and credit go to ``members``."""
    hot, flag = layout.one_hot, layout.indicator
    scale, mmom = orig.scale, rel.moments
    half = p * orig.sd1
    mcount = mmom.n
    msd1 = np.sqrt(np.maximum(mmom.m2, 0.0) / np.maximum(mcount - 1, 1)) * (mmom.scale / scale)
    msd1[(mmom.min == mmom.max) | (mcount < 2)] = 0.0
    half_m = p * msd1
    half = np.where(hot | layout.coded, 0.0, half)  # a category is inside only when unchanged
    half_m = np.where(hot | layout.coded, 0.0, half_m)
    counted = (~flag).astype(np.uint8) + layout.coded  # (a missing value is scored on its value's column)
    f = np.zeros(rel.K.shape[0], np.int64)
    W = np.zeros(rel.K.shape[0]) if wcol else np.zeros(0)
    no_weights = np.zeros(0)
    vals, inds = orig.vals, orig.inds
    credit, inside, inside_sdc = 0.0, 0, 0
    ocols = qi + [c for c in (wcol, members and members.column) if c]
    for offset, fo, fm in aligned_frames(osrc, msrc, ocols, rcols, chunk_rows):
        x = layout.expand([fo.get_column(c) for c in qi], qi, offset, osrc.label)
        M = layout.expand(published(fm, pub, qi, offset, msrc.label), layout.names(pub), offset, msrc.label)
        idx = np.empty(M.shape[0], np.int64)
        find_rows(rel.U, M, idx)
        kidx = np.empty(M.shape[0], np.int64)
        find_rows(rel.K, key_matrix(key_frame(fm, kcols).select(rel.keyed), rel.coded), kidx)
        if (idx < 0).any() or (kidx < 0).any():  # pragma: no cover - the first pass saw every point
            raise EngineError(f"{msrc.label} changed while it was read")
        class_totals(kidx, _weights(fo.get_column(wcol), offset, osrc.label) if wcol else no_weights, f, W)
        rows_credit = np.empty(M.shape[0]) if members is not None else no_weights
        c, a, b = score_rows(standardize(x[:, vals], orig.zs, orig.zm, orig.zd), rel.Uz, idx, rel.d2, rel.ties,
                             np.ascontiguousarray(x / scale), np.ascontiguousarray(M / scale), half, half_m, counted,
                             patterns(x, inds, layout), rel.Up, orig.R2, rows_credit)
        if members is not None:
            members.add(fo.get_column(members.column), kidx, rows_credit, offset)
        credit += c
        inside += a
        inside_sdc += b
    return credit, inside, inside_sdc, f, W


def class_risks(f: np.ndarray, W: np.ndarray | None, threshold: float, weight_column: str | None = None) -> dict:
    """The class-based fields of ``RiskResult`` from each class's rows ``f`` and sum of
    sampling weights ``W`` (None: no weights, ``F = f``); see the module docstring."""
    F = f.astype(np.float64) if W is None else np.maximum(W, f)  # (a record of weight 0 still stands for itself)
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


def check_weight_values(src: TableSource, name: str, chunk_rows: int) -> None:
    """Every value of the weight column ``name`` of ``src`` (``_weights``), read alone:
    ``anonymize`` checks them before its first pass (one line naming the row)."""
    for offset, frame in src.iter_frames([name], chunk_rows):
        _weights(frame.get_column(name), offset, src.label)


def _weights(s: pl.Series, offset: int, label: str) -> np.ndarray:
    """A chunk's sampling weights as float64: one line naming the first row whose
    weight is missing, not finite or negative. A weight of 0 (a record that stands for
    no population) is taken: its class's population size is at least its rows
    (``class_risks``)."""
    if s.null_count():
        i = int(s.is_null().arg_true()[0])
        raise EngineError(f"weight column {s.name!r} of {label} has a missing value at row {offset + i + 1} "
                          f"(rows counted from 1); every record needs its sampling weight")
    w = s.cast(pl.Float64).to_numpy()
    bad = ~(np.isfinite(w) & (w >= 0.0))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise EngineError(f"weight column {s.name!r} of {label} has the value {s[i]!r} at row {offset + i + 1} "
                          f"(rows counted from 1); a sampling weight is a finite number of at least 0 (the "
                          f"number of people the record stands for)")
    return np.ascontiguousarray(w)


def check_household_column(src: TableSource, name: str | None, qi: Sequence[str], wcol: str | None) -> str | None:
    """``name`` when it is a column of ``src`` and no QI, key column or weight column."""
    if name is None:
        return None
    if not isinstance(name, str) or not name:
        raise EngineError(f"household_column (--household-column) must be a column name, got {name!r}")
    if name in qi or name == wcol:
        role = "quasi-identifier" if name in qi else "weight column"
        raise EngineError(f"household column {name!r} is also a {role}; household ids are a column of their own")
    if name not in src.columns:
        raise EngineError(f"household column {name!r} not found in {src.label}")
    return name


class _Households:
    """Pass 2's rows by household (``household_column``): each row's household id, class
    and DBRL credit, kept in row order (about 24 bytes a row and its id), then the
    household risks (``risks``)."""

    def __init__(self, column: str, label: str):
        self.column, self.label = column, label
        self.ids: list[pl.Series] = []
        self.kidx: list[np.ndarray] = []
        self.credit: list[np.ndarray] = []

    def add(self, ids: pl.Series, kidx: np.ndarray, credit: np.ndarray, offset: int) -> None:
        if ids.null_count():
            i = int(ids.is_null().arg_true()[0])
            raise EngineError(f"household column {self.column!r} of {self.label} has a missing value at row "
                              f"{offset + i + 1} (rows counted from 1); every record needs its household")
        self.ids.append(ids)
        self.kidx.append(kidx)
        self.credit.append(credit.copy())

    def risks(self, f: np.ndarray, W: np.ndarray | None, threshold: float) -> dict:
        """A household is re-identified if any member is (sdcMicro's hierarchical risk):
        ``1 - prod(1 - r_i)`` over its members, for the prosecutor's ``r = 1 / f``, the
        DBRL credit and (with weights) sdcMicro's individual risk; a household is at risk
        when a member's risk is above ``threshold``."""
        codes = pl.concat(self.ids).rank("dense").cast(pl.Int64).to_numpy() - 1
        kidx, credit = np.concatenate(self.kidx), np.concatenate(self.credit)
        self.ids, self.kidx, self.credit = [], [], []
        H = int(codes.max()) + 1
        q, qd, risky = np.ones(H), np.ones(H), np.zeros(H, np.uint8)
        household_products(codes, kidx, 1.0 / np.maximum(f, 1), credit, q, qd, risky, threshold)
        out = {"column": self.column, "households": H,
               "prosecutor": {"highest_risk": float(1.0 - q.min()), "success_rate": float((1.0 - q).mean()),
                              "households_at_risk": float(risky.mean())},
               "dbrl": float((1.0 - qd).mean()), "individual": None}
        if W is not None:
            r = np.empty(f.shape[0])
            individual_risk(f, np.maximum(W, f), r)
            qi, risky_i = np.ones(H), np.zeros(H, np.uint8)
            household_products(codes, kidx, r, np.zeros(0), qi, np.ones(0), risky_i, threshold)
            out["individual"] = {"highest_risk": float(1.0 - qi.min()), "expected": float((1.0 - qi).sum()),
                                 "share": float((1.0 - qi).mean()), "households_at_risk": float(risky_i.mean())}
        return out

