"""``microagg verify``: check a published table's guarantees, independently of how it was made.

This module reads the release (and, optionally, the table it was made from) and
re-derives everything it reports. It does not import the coordinator, the
aggregation, stitching or writing code, so a bug there cannot hide itself here.

Checks
------
* **k-anonymity.** An equivalence class is a set of rows with identical published
  QI values. For a QI named ``c`` the published value is column ``c``; if ``c`` is
  absent but ``c_min`` and ``c_max`` exist (``--method maxent|mnqia`` range
  output), the pair ``(c_min, c_max)`` is used. Any dtype works (a categorical QI
  published as a ``|``-joined set is a string). Null is a value of its own;
  ``-0.0`` and ``0.0`` are two values (a reader of the release tells them apart:
  see ``_sign_keys``); all NaNs are one value (Polars grouping; a CSV prints one
  ``NaN``). A CSV release is read as text: two rows are in one class when their
  published fields read the same.
  Fails when the smallest class has fewer than k rows.
* **l-diversity** (``sa`` with ``l``): every class holds at least ``l`` distinct
  SA values (null counts as one value). **Entropy l-diversity** (``sa`` with
  ``epsilon``): every class's SA entropy, in bits, is at least ``epsilon``
  (compared with a tolerance of 1e-9 bits, as the maxent method does).
* **With the original table:** the row count matches; every non-QI column of the
  original that is in the release (a column left out, as ``anonymize --drop`` does, is
  listed, not failed: it publishes nothing) is in the same relative order, with equal values row
  by row (nulls equal nulls, NaN equals NaN). A CSV original beside a CSV release:
  compared as text, field by field (``01000`` and ``1000`` differ; an empty field
  and ``""`` differ). Otherwise values are compared, not dtypes (a CSV original's
  types inferred from the whole file), so a Parquet round trip of a CSV column or
  a CSV round trip of a Parquet integer or date column still matches; and the
  information loss on the QIs published as one number (centroid or class mean);
  a QI published as a range (``c_min``/``c_max``) or a set of categories (maxent:
  values joined by ``|``, a ``|`` or ``\\`` in a category escaped by ``\\``) holds
  the original value, row by row (check "generalization").
  Release columns that are neither QIs nor original columns (a ``--group-column``)
  are listed, not failed. A changed column that is a function of one QI's published
  values (``anonymize --derived``: recomputed from the published QI) is listed as
  derived (``columns_derived``), not failed: it adds nothing to the QI.
* **Leaks** (with the original; check "leaks", listed when it fails; else said by
  "other columns"): no column passed through unchanged
  corresponds one-to-one with a QI of the original (each value with one QI value and
  each QI value with one of its values, over all rows; a null is a value): it would
  publish the QI unaggregated (a code beside its label, the ``@NUMCOL`` of an ordinal
  QI). A QI of one value is left out, and so are two row-unique columns (a row id
  beside a continuous QI: the data cannot tell a copy from chance) unless the column
  is an exact affine function of the QI. Bounded memory: per pair at most
  ``LEAK_KEEP`` distinct value pairs a direction, then sampled by value hash (a
  violation among dropped values can be missed: a false FAIL, never a missed leak
  but by a 64-bit hash collision); the original is read until every pair shows a
  violation, usually within one chunk.
* **Dependencies** (with the original; check "dependencies", listed when it fails):
  no release column passed through unchanged, nor one not in the original, gives a
  QI's original value back better than the published QI: anonymize's guard's tests
  beyond one-to-one (``leaks.dependency_check``: a functional dependency against the
  published QI's classes on the same rows, ranks and order on a row sample), each
  column alone. A pass-through column whose type changed fails "other columns"
  (Parquet beside Parquet: a CSV's types are inferred), but for an integer column of
  the original published as Float64 with the same values by a format that holds every
  number as a double (SPSS ``.sav``/``.zsav``/``.por``, SAS: ``statfiles.DOUBLES_ONLY``);
  a categorical QI's published numbers are compared with the original's as its type
  where they convert exactly (the .sav's 1.0 is the category 1).
* **Class means** (with the original; check "class means"): a QI published as one
  number (an MDAV-family release, or maxent's ``numeric_output="mean"``) must be the
  aggregate of the originals it replaces: in each class (the rows sharing all published
  QI values) the published value equals the mean of the class's original values, within
  ``MEAN_TOLERANCE`` times the column's largest absolute original value (a mixed
  release's dates: within half a unit more, the mean rounded to the day or the unit).
  A class of two groups whose means round to the same published values still passes
  (the mean of its rows is within the same bound). Memory: one row per class, as the
  class counts (``ClassMeans``).
* **Class modes** (a mixed release's nominal QIs, with the original; check "class
  modes"): in each class the published category is a most frequent original value of
  the class's rows (ties allowed), a missing value counted as a category
  (``ClassModes``).

Missing values (nulls). In every count of classes a null is a value of its own: two
rows null in a QI and equal elsewhere are one class, and null is apart from every
value (NaN, 0, the empty text; a CSV release's empty field against ``""``). With the
original, a cell published null where the original had a value, or with a value
where the original was null, fails nothing by itself (the engine imputes a missing
cell with its group's value, and publishes null for a group without values), but:
a QI published as one number is, per class, the mean of the original values
*present*, and null exactly when the class has none ("class means"); a nominal QI's
category is the class's mode with null a category ("class modes"); an original value
present lies in its published range or set, a missing one is not checked, a range
missing at one end holds nothing ("generalization"). The information loss leaves
missing originals out (SSE and SST over the values present, as the engine's; a
nominal QI: missing for missing is no change; an ordinal QI: over the rows present).

Declared missing codes (``anonymize --missing``, or a statistical file's declarations:
``verify --missing COL=CODES``, read from a ``.sav``/``.dta``/DDI original's own
declarations too): with the original, a numeric QI's code is a missing value on both
sides, as a null is: left out of its class's mean and of the information loss, and a
published code reads as "published missing", so a class of codes only passes when it
publishes a code (or null), and a class with values present must publish their mean.
A nominal QI's code is a category of its own (no change needed). The classes are still
counted on the published values as they are (a code is a value).

Counting scales: each chunk is reduced by ``group_by`` on the *exact* published
values (no hashing, so two classes can never be merged by a collision and hide a
small class), and the partial counts are merged whenever they outgrow the merged
table, so the work is amortized linear. Memory holds one row per distinct class
(with an SA: per distinct (class, SA value) pair): for a release that passes,
at most ``rows / k`` rows of the QI columns, plus one chunk of the release.

Information loss. ``IL = 100 * SSE / SST`` on the QIs standardized by the
original's mean and population standard deviation, the engine's definition
(``engine/passes/write.py``): SST around the original column means, SSE between original
and published values, columns with a constant original value left out of both.
Since a standardized column's SST is n, this equals the mean over the non-constant
QIs of ``100 * SSE_j / SST_j`` in raw units, which is what is accumulated here in
one streaming pass (Chan's merge of chunk moments, in units of a running power of
two so that values near 1e308 do not overflow).
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

from ..budget import check_verify, early_piece, parse_limit
from ..checks import check_whole
from ..errors import EngineError
from ..io.csvfile import csv_options
from ..declared import parse_missing
from ..encode.codes import mask_codes, resolve_missing
from ..io.labelled import declared, file_meta
from ..io.source import open_source
from ..io.statfiles import DOUBLES_ONLY, stat_format
from ..options import parse_nominal, parse_ordinal
from ..report import json_text
from .classes import (COUNT, ROWS, ClassCounter, ClassMeans, ClassModes, PresentMoments, aligned_frames, describe,
                      is_numeric, mean_name, parse_columns, published_columns)
from .entities import entity_checks
from .leaks import dependency_check, derived_columns, leak_check
from .loss import MixedKinds, as_number, information_loss, information_loss_columns, mixed_kinds

ENTROPY_TOLERANCE = 1e-9
# a published class value vs the mean of its rows' original values: at most this times
# the column's largest |original value| apart (the engine's means are computed on
# standardized values: their error is relative to the column's scale, not to the value)
MEAN_TOLERANCE = 1e-9
_SIZE = "__microagg_verify_size__"
_DISTINCT = "__microagg_verify_distinct__"
_ENTROPY = "__microagg_verify_entropy__"


# --- the result ----------------------------------------------------------------------


@dataclass
class VerifyResult:
    output: str
    ok: bool
    rows: int
    qi: list[str]
    key_columns: list[str]
    k: int
    classes: int
    min_class_size: int
    max_class_size: int
    classes_below_k: int
    rows_below_k: int
    smallest_class: dict
    sa: str | None = None
    l: int | None = None
    epsilon: float | None = None
    min_distinct_sa: int | None = None
    min_entropy_bits: float | None = None
    classes_below_l: int | None = None
    original: str | None = None
    original_rows: int | None = None
    columns_compared: list[str] = field(default_factory=list)
    columns_changed: list[str] = field(default_factory=list)
    columns_derived: dict = field(default_factory=dict)  # changed column -> the QI whose published values give it
    extra_columns: list[str] = field(default_factory=list)
    information_loss_percent: float | None = None
    information_loss_by_column: dict = field(default_factory=dict)
    information_loss_skipped: dict = field(default_factory=dict)
    classes_not_mean: int | None = None  # (with the original) classes whose published value is not their mean
    checks: list[dict] = field(default_factory=list)
    wall_seconds: float = 0.0

    @property
    def failures(self) -> list[dict]:
        return [c for c in self.checks if not c["ok"]]

    def to_dict(self) -> dict:
        return asdict(self)

    def to_json(self) -> str:
        return json_text(self.to_dict(), default=_plain)

    def summary(self) -> str:
        lines = [f"verify {self.output}: {'PASS' if self.ok else 'FAIL'}  "
                 f"({self.rows:,} rows, {self.wall_seconds:.2f} s)"]
        for c in self.checks:
            lines.append(f"  [{'ok' if c['ok'] else 'FAIL'}] {c['name']}: {c['detail']}")
        if self.information_loss_percent is not None:
            per = ", ".join(f"{c} {v:.4f}" for c, v in self.information_loss_by_column.items())
            lines.append(f"  information loss {self.information_loss_percent:.4f} %  (per QI: {per})")
        for c, why in self.information_loss_skipped.items():
            lines.append(f"  information loss leaves out {c}: {why}")
        if self.extra_columns:
            lines.append(f"  release columns not in the original (checked against the quasi-identifiers' original "
                         f"values): {', '.join(self.extra_columns)}")
        return "\n".join(lines)


def _plain(x):
    if isinstance(x, np.generic):
        return x.item()
    return str(x)


def _check(result: VerifyResult, name: str, ok: bool, detail: str) -> None:
    result.checks.append({"name": name, "ok": bool(ok), "detail": detail})


# --- comparison with the original ----------------------------------------------------


def _first_difference(a: pl.Series, b: pl.Series) -> int:
    """Index of the first row where ``a`` and ``b`` differ (null == null, NaN == NaN), or -1."""
    try:
        same = a.eq_missing(b)
    except Exception:  # incomparable dtypes (a CSV round trip of a date, say): compare as text
        try:
            same = a.cast(pl.String).eq_missing(b.cast(pl.String))
        except Exception:
            return 0
    same = same.fill_null(False)
    if same.all():
        return -1
    return int((~same).arg_max())


def _split_set(text: str) -> list[str]:
    """The categories of a published set: split at each unescaped ``|``; ``\\x`` reads
    as ``x``. (Written here again, not imported from ``engine.methods.maxent``: verify shares
    no code with the engine that made the release.)"""
    out, cur, escaped = [], [], False
    for ch in text:
        if escaped:
            cur.append(ch)
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == "|":
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if escaped:  # a trailing lone backslash: itself
        cur.append("\\")
    out.append("".join(cur))
    return out


def _first_outside(f_out: pl.DataFrame, f_orig: pl.DataFrame, c: str, published: tuple[str, ...]) -> int:
    """Index of the first row whose original value of QI ``c`` is not in what the release
    publishes for it: the range ``c_min..c_max``, or the set of categories (``c``, values
    joined by ``|`` with ``|`` and ``\\`` escaped: ``_split_set``), or -1.
    A missing original value may be published with its class's range or set (imputed)
    or missing; a value present must lie in what is published (a missing range or set
    holds none); a range missing at one end only holds nothing."""
    x = f_orig.get_column(c)
    if len(published) == 2:
        lo, hi = (f_out.get_column(p).cast(pl.Float64, strict=False) for p in published)
        whole = f_out.get_column(published[0]).is_null() == f_out.get_column(published[1]).is_null()
        xv = x.cast(pl.Float64, strict=False)
        ok = (((xv >= lo) & (xv <= hi)).fill_null(False) | x.is_null()) & whole
    else:
        pairs = pl.DataFrame({"p": f_out.get_column(c).cast(pl.String), "o": x.cast(pl.String)})
        uniq = pairs.unique(maintain_order=True)
        good = [o is None or (p is not None and o in _split_set(p)) for p, o in uniq.iter_rows()]
        ok_pairs = uniq.filter(pl.Series(good, dtype=pl.Boolean)).with_columns(pl.lit(True).alias("__ok"))
        ok = pairs.join(ok_pairs, on=["p", "o"], how="left", nulls_equal=True,
                        maintain_order="left").get_column("__ok").fill_null(False)
    if ok.all():
        return -1
    return int((~ok).arg_max())


# --- the check -----------------------------------------------------------------------


def verify_release(output: "str | os.PathLike[str] | pl.DataFrame | pl.LazyFrame", qi: "str | Sequence[str]",
                   k: int, *, sa: str | None = None, l: int | None = None, epsilon: float | None = None,
                   original: "str | os.PathLike[str] | pl.DataFrame | pl.LazyFrame | None" = None,
                   chunk_rows: int = 100_000, separator: str | None = None,
                   null_values: "str | Sequence[str] | None" = None, encoding: str | None = None,
                   mixed: bool = False, ordinal=None, memory_limit: "int | str | None" = None,
                   nominal=None, person_column: str | None = None,
                   household_column: str | None = None, missing=None) -> VerifyResult:
    """Verify the release ``output`` (CSV/Parquet file, folder or glob); see the module docstring.

    Returns a :class:`VerifyResult` whose ``ok`` says whether every guarantee holds
    (``checks`` lists each with a one-line detail). Raises ``EngineError`` on bad
    input: a missing file, an unknown column, ``k < 1``, ``sa`` without ``l`` or
    ``epsilon`` (or with both), an empty release. ``separator``, ``null_values``,
    ``encoding``: how a CSV ``original`` is read (the release is read as the engine
    writes CSV: comma-separated UTF-8).

    ``mixed`` (or ``ordinal``): a mixed-type MDAV release, whose categorical QIs
    hold one published category each, not a set (with ``original``, read from the
    release itself when not given: ``_looks_mixed``): with ``original``, every
    published category must be a value of the original column (check
    "categories"), and the information loss is measured per type (nominal: percent
    of values changed; ordinal, ``ordinal={"col": [categories in order]}``, or
    ``"@numcol"`` for the order of a numeric column of the original: 100 x mean
    |rank change| / (m - 1); dates on their epoch value as numbers); the overall
    figure is the mean over the QIs. ``nominal`` (names, or ``"a,b"``; implies
    ``mixed``): numeric QIs published as categories (``anonymize --nominal``), checked
    as categories (a value of the original, the class's mode), not as means.

    ``missing`` (``{"AGE": [996]}`` or ``["AGE=996,997"]``, as ``anonymize``'s; with
    ``original``): declared missing codes, checked as missing values (module docstring).
    A statistical-file ``original`` (``.sav``, ``.dta``, a DDI codebook) adds the
    categories and missing codes its declarations give, as ``anonymize`` reads them.

    ``person_column``, ``household_column``: a release grouped by person or household
    (``engine.audit.entities``: distinct persons per class, household mates' values).

    ``memory_limit`` (``"1GiB"``, bytes): refused up front (one line naming the least
    limit) when the checks would not fit (``engine.budget.check_verify``); CSV inputs are
    then read in pieces.
    """
    limit = parse_limit(memory_limit)
    ordinal = {c: (order, by) for c, order, by in parse_ordinal(ordinal) or ()}
    nominal, missing = declared(file_meta(original) if original is not None else None, parse_columns(qi),
                                nominal=parse_nominal(nominal), ordinal=ordinal, missing=parse_missing(missing))
    if missing and original is None:
        raise EngineError("missing (--missing): declared missing codes are checked against the original "
                          "(--original), and none is given")
    nominal = frozenset(nominal)
    mixed = mixed or bool(ordinal) or bool(nominal)

    csv = csv_options(separator, null_values, encoding)
    if csv is not None and original is None:
        raise EngineError(f"{', '.join(csv.given())}: CSV options apply to the original (--original), "
                          f"and none is given")
    orig = open_source(original, csv=csv).bounded(early_piece(limit)) if original is not None else None
    try:
        result = _verify(output, qi, k, sa, l, epsilon, orig, chunk_rows, mixed, ordinal, limit=limit,
                         nominal=nominal, missing=missing)
        entity_checks(result, output, original, result.qi, k, person_column, household_column, csv,
                      nominal=nominal, missing=missing)
        return result
    finally:
        if orig is not None:
            orig.close()


def _sign_keys(frame: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """``frame`` with one more key per float column: whether the value is -0.0.

    -0.0 and 0.0 compare equal and Polars groups them together, but a release shows
    them apart: a CSV prints ``-0.0`` and ``0.0``, a Parquet file holds two bit
    patterns. An intruder who reads the release can tell the two sets of rows apart,
    so they are two equivalence classes, and k-anonymity must hold for each (the
    finer partition is the safe one; the engine's self-check, ``engine.passes.selfcheck``,
    counts them apart too)."""
    extra = [((pl.col(c) == 0.0) & ((1.0 / pl.col(c)) < 0.0)).fill_null(False).alias(_neg_zero(c))
             for c in keys if frame.schema[c].is_float()]
    return frame.with_columns(extra) if extra else frame


def _neg_zero(c: str) -> str:
    return f"__microagg_verify_negzero__{c}"


def _verify(output, qi, k, sa, l, epsilon, orig, chunk_rows, mixed=False, ordinal=None, limit=None,
            nominal=frozenset(), missing=()) -> VerifyResult:
    t0 = time.perf_counter()
    qi, k, l, epsilon, chunk_rows = _settings(qi, k, sa, l, epsilon, chunk_rows)
    with open_source(output) as opened:  # (closed: a CSV's local copy is removed)
        out = opened.bounded(early_piece(limit))  # (a CSV in pieces under a memory limit)
        result = _verify_source(out, qi, k, sa, l, epsilon, orig, chunk_rows, mixed, ordinal, limit, nominal,
                                missing)
    result.wall_seconds = time.perf_counter() - t0
    return result


def _verify_source(out, qi, k, sa, l, epsilon, orig, chunk_rows, mixed, ordinal, limit,
                   nominal=frozenset(), missing=()) -> VerifyResult:
    pub = published_columns(out, qi)
    keys = [c for cols in pub.values() for c in cols]
    out.check_reconciled(keys + ([sa] if sa is not None and sa in out.columns else []))
    if sa is not None and sa not in out.columns:
        raise EngineError(f"sensitive attribute {sa!r} not found in {out.label}")
    # a CSV release is read as text: its classes are the texts a reader sees, and with a
    # CSV original every other column is compared as text, so a changed field (01000 ->
    # 1000, 2.50 -> 2.5) is caught; with another original, those columns are compared
    # by value (types inferred from the whole release)
    if out.kind == "csv":
        if orig is None or orig.kind == "csv":
            out = out.text_view()
        else:
            out = out.with_types({c: pl.String for c in keys + ([sa] if sa is not None else [])})
    rows = out.count_rows()
    if rows == 0:
        raise EngineError(f"{out.label} has no rows")

    orig_rows = None
    if orig is not None:
        for c in qi:
            if c not in orig.columns:
                raise EngineError(f"column {c!r} not found in {orig.label}")
        orig.check_reconciled(qi)
        if orig.kind == "csv":  # QIs typed from the whole file; the rest as text beside a CSV release
            schema = orig.schema
            orig = orig.with_types({c: schema[c] for c in qi}, text=out.kind == "csv", parse=False)
        orig_rows = orig.count_rows()
        mixed = mixed or _looks_mixed(out, orig, qi, pub, chunk_rows)
        # declared missing codes of the QIs checked as numbers (a nominal QI's code is a category)
        codes = {c: v for c, v in resolve_missing(missing, {c: ("nominal" if c in nominal or not is_numeric(
            orig.schema[c]) else "numeric", orig.schema[c]) for c, _ in missing or ()}, orig.label).items()
            if c not in nominal}
    check_verify(limit, out, orig, rows, keys, k, chunk_rows)  # (--memory-limit: before the checks' work)

    result = VerifyResult(output=out.label, ok=True, rows=rows, qi=qi, key_columns=keys, k=k, classes=0,
                          min_class_size=0, max_class_size=0, classes_below_k=0, rows_below_k=0,
                          smallest_class={}, sa=sa, l=l, epsilon=epsilon)
    group_keys = keys + [_neg_zero(c) for c in keys if out.schema[c].is_float()]  # -0.0 apart from 0.0
    counter = ClassCounter(group_keys + ([sa] if sa is not None else []), max(chunk_rows, 1 << 16))
    later: list[tuple[str, bool, str]] = []  # checks against the original, listed after the class checks

    if orig is None or orig_rows != rows:
        for _, frame in out.iter_frames(keys + ([sa] if sa is not None else []), chunk_rows):
            counter.add(_sign_keys(frame, keys))
    if orig is not None:
        later += _compare_with_original(result, out, orig, orig_rows, qi, pub, keys, sa, counter, chunk_rows,
                                        mixed, ordinal or {}, nominal, codes)

    _class_checks(result, counter, group_keys, keys, k, sa, l, epsilon)

    for name, ok, detail in later:
        _check(result, name, ok, detail)
    result.ok = all(c["ok"] for c in result.checks)
    return result


def _looks_mixed(out, orig, qi, pub, chunk_rows) -> bool:
    """Whether the release is a mixed-type MDAV release, read from the release itself
    (so that ``verify`` needs no flag for it): no QI published as a range, a QI that is
    not numeric in the original, and each such QI holding one category a row: a type
    other than text, or text in which no value holds a set's unescaped ``|`` (a range
    release publishes a categorical QI as a set of its class's values, joined by ``|``).
    A release whose categories themselves hold a ``|`` is read as sets: ``--mixed``
    says otherwise."""
    if any(len(pub[c]) == 2 for c in qi):
        return False
    cats = [c for c in qi if pub[c] == (c,) and c in orig.schema and not is_numeric(orig.schema[c])]
    if not cats:
        return False
    text = [c for c in cats if out.schema[c] == pl.String]
    if not text:
        return True
    joined = r"(^|[^\\])(\\\\)*\|"  # a | after an even number of backslashes
    for _, frame in out.iter_frames(text, chunk_rows):
        if frame.select(pl.any_horizontal(pl.col(c).str.contains(joined).fill_null(False) for c in text).any()).item():
            return False
    return True


def _settings(qi, k, sa, l, epsilon, chunk_rows):
    """The checked settings: ``(qi, k, l, epsilon, chunk_rows)``, or one line naming the bad one."""
    qi = parse_columns(qi)
    k = check_whole(k, "k", 1)
    chunk_rows = check_whole(chunk_rows, "chunk_rows", 1)
    if sa is not None:
        if not isinstance(sa, str) or not sa:
            raise EngineError(f"sa must be a column name, got {sa!r}")
        if sa in qi:
            raise EngineError(f"sensitive attribute {sa!r} is also a qi column")
        if (l is None) == (epsilon is None):
            raise EngineError("with a sensitive attribute give exactly one of l (--l) or epsilon (--epsilon)")
    elif l is not None or epsilon is not None:
        raise EngineError("l and epsilon need a sensitive attribute: sa (--sa COL)")
    if l is not None:
        l = check_whole(l, "l", 1)
    if epsilon is not None:
        if isinstance(epsilon, bool) or not isinstance(epsilon, numbers.Real) or not math.isfinite(epsilon) \
                or epsilon < 0:
            raise EngineError(f"epsilon must be a non-negative number of bits, got {epsilon!r}")
        epsilon = float(epsilon)

    return qi, k, l, epsilon, chunk_rows


@dataclass
class _Scan:
    """What one read of the release beside the original found (``_scan_aligned``)."""

    changed: dict = field(default_factory=dict)   # passed-through column -> first changed row
    outside: dict = field(default_factory=dict)   # range / set QI -> first row outside its published value
    bad_il: dict = field(default_factory=dict)    # IL column -> first missing or non-finite row
    moments: "PresentMoments | None" = None
    means: "ClassMeans | None" = None             # the original values' mean per published class
    modes: "ClassModes | None" = None             # (mixed) the nominal QIs' original categories per class


def _compare_with_original(result, out, orig, orig_rows, qi, pub, keys, sa, counter, chunk_rows, mixed=False,
                           ordinal=None, nominal=frozenset(), codes=None) -> list:
    """Read the release beside the original (counting its classes on the way): the row
    count, the columns passed through, the generalization of range and set QIs, the
    information loss. Returns the checks ``(name, ok, detail)`` to list after the class checks."""
    rows = result.rows
    result.original, result.original_rows = orig.label, orig_rows
    others = [c for c in orig.columns if c not in set(qi)]
    present = [c for c in others if c in set(out.columns)]
    missing = [c for c in others if c not in set(out.columns)]
    in_release = [c for c in out.columns if c in set(others)]
    result.extra_columns = [c for c in out.columns if c not in set(keys) and c not in set(orig.columns)]
    result.columns_compared = present
    detail = []
    # a column left out (anonymize --drop) publishes nothing: listed, not failed (a changed or added one fails)
    left_out = f"left out of the release (anonymize --drop): {', '.join(missing)}" if missing else ""
    if in_release != present:
        detail.append(f"order changed: {', '.join(in_release)} (original: {', '.join(present)})")
    later = [("row count", orig_rows == rows, f"{rows:,} rows, as the original" if orig_rows == rows
              else f"the release has {rows:,} rows, the original {orig_rows:,}")]
    if orig_rows != rows:
        detail.append("values not compared (row counts differ)")
        return later + [("other columns", False, "; ".join(detail))]
    kinds = mixed_kinds(orig, qi, pub, ordinal, chunk_rows, nominal) if mixed else MixedKinds()
    il_cols = information_loss_columns(result, out, orig, qi, pub, kinds)
    # QIs published as a range or as a set of categories: the original value must lie in it
    ranges = [c for c in qi if len(pub[c]) == 2]
    sets = [c for c in qi if pub[c] == (c,) and not is_numeric(orig.schema[c]) and out.schema[c] == pl.String
            and c not in kinds.cats and c not in kinds.dates]
    codes = {c: v for c, v in (codes or {}).items() if c in il_cols}
    scan = _scan_aligned(out, orig, counter, keys, sa, present, il_cols, ranges + sets, pub, chunk_rows, qi[0], kinds,
                         codes)
    information_loss(result, scan, il_cols)
    if il_cols:
        later.append(_class_means_check(result, scan.means, il_cols, [kinds.like(c, orig.schema[c]) for c in il_cols],
                                        kinds.dates, keys, codes))
    if kinds.loss is not None:
        later += kinds.loss.finish(result, orig_rows)
    if scan.modes is not None:
        later.append(scan.modes.check(keys, kinds.loss.orig_values))
    # a changed column that is a function of a QI's published values: derived (--derived), not a failure
    result.columns_derived = derived_columns(out, pub, [c for c in present if c in scan.changed], qi, chunk_rows)
    result.columns_changed = [c for c in present if c in scan.changed and c not in result.columns_derived]
    if result.columns_changed:
        first = min(result.columns_changed, key=lambda c: scan.changed[c])
        detail.append(f"{len(result.columns_changed)} changed ({', '.join(result.columns_changed)}); "
                      f"first: column {first!r} at row {scan.changed[first] + 1}")
    if ranges or sets:
        later.append(_generalization_check(ranges + sets, scan.outside, sets))
    derived = "; ".join(f"{c} recomputed from the published {q}" for c, q in result.columns_derived.items())
    same = len(present) - len(result.columns_derived)
    unchanged_cols = [c for c in present if c not in scan.changed]
    if out.kind != "csv" and orig.kind != "csv":  # (a CSV's types are inferred: values compared, not types)
        # an SPSS or SAS release holds every number as a double: an integer column comes back
        # Float64, its values equal (unchanged), which is no change of type
        doubles = stat_format(out.label) in DOUBLES_ONLY
        retyped = [f"{c} ({orig.schema[c]} -> {out.schema[c]})" for c in unchanged_cols
                   if out.schema[c] != orig.schema[c] and pl.Null not in (out.schema[c], orig.schema[c])
                   and not (doubles and orig.schema[c].is_integer() and out.schema[c] == pl.Float64)]
        if retyped:
            detail.append(f"type changed: {', '.join(retyped)}")
    leak = leak_check(orig, qi, unchanged_cols, chunk_rows)
    deps = dependency_check(out, orig, qi, pub, unchanged_cols, result.extra_columns, chunk_rows)
    unchanged = f"{same} unchanged, same order" + (", none one-to-one with or determining a quasi-identifier"
                                                   if same and leak[1] and deps[1]
                                                   else "")
    later.append(("other columns", not detail,
                  "; ".join(detail + ([derived] if derived else []) + ([left_out] if left_out else [])) if detail else
                  (unchanged + (f"; {derived}" if derived else "") if present else "none besides the QIs")
                  + (f"; {left_out}" if left_out else "")))
    if not leak[1]:  # a leak: a check of its own (listed only when it fails)
        later.append(leak)
    elif not deps[1]:  # (a dependency beyond one-to-one, or a column not in the original holding a QI)
        later.append(deps)
    return later


def _scan_aligned(out, orig, counter, keys, sa, present, il_cols, generalized, pub, chunk_rows, first_qi,
                  kinds: MixedKinds, codes: dict) -> _Scan:
    """One read of the release beside the original: its classes counted, the first
    changed row of every passed-through column, the first original value outside its
    published range or set, the information loss's moments (and a mixed release's
    category changes)."""
    scan = _Scan(moments=PresentMoments(len(il_cols)) if il_cols else None,
                 means=ClassMeans(counter.by[:len(counter.by) - (sa is not None)], len(il_cols), counter.merge_rows)
                 if il_cols else None)
    nominal = [c for c in kinds.cats if kinds.loss is not None and c not in kinds.loss.orders]
    if nominal:
        scan.modes = ClassModes(counter.by[:len(counter.by) - (sa is not None)], nominal, counter.merge_rows)
    out_cols = list(dict.fromkeys(keys + ([sa] if sa is not None else []) + present))
    orig_cols = list(dict.fromkeys(present + il_cols + generalized + kinds.cats)) or [first_qi]
    for offset, f_out, f_orig in aligned_frames(out, orig, out_cols, orig_cols, chunk_rows):
        keyed = _sign_keys(f_out, keys)
        counter.add(keyed)
        X = have = None
        if scan.means is not None:
            # a missing original (a declared code too): left out of its class's mean and of the information loss
            cols = [mask_codes(f_orig.get_column(c), codes[c]) if c in codes else f_orig.get_column(c)
                    for c in il_cols]
            X = np.column_stack([as_number(s, kinds.like(c, None)) for c, s in zip(il_cols, cols)])
            have = np.column_stack([s.is_not_null().to_numpy() for s in cols]) \
                if any(s.null_count() for s in cols) else None
            scan.means.add(keyed, X, have)
        for c in generalized:
            if c not in scan.outside:
                at = _first_outside(f_out, f_orig, c, pub[c])
                if at >= 0:
                    scan.outside[c] = offset + at
        for c in present:
            if c not in scan.changed:
                at = _first_difference(f_out.get_column(c), f_orig.get_column(c))
                if at >= 0:
                    scan.changed[c] = offset + at
        if kinds.loss is not None:
            kinds.loss.add(f_orig, f_out)
        if scan.modes is not None:
            scan.modes.add(keyed, f_orig)
        if scan.moments is not None and not scan.bad_il:
            Y = np.column_stack([_uncoded(as_number(f_out.get_column(c), kinds.like(c, orig.schema[c])), codes.get(c))
                                 for c in il_cols])  # a CSV release's text: not a number -> NaN
            fin = np.isfinite(X) & np.isfinite(Y)
            if have is not None:
                fin |= ~have
            if not fin.all():
                i, j = np.argwhere(~fin)[0]
                scan.bad_il[il_cols[j]] = offset + int(i)
                continue
            scan.moments.add(X, Y, have)
    return scan


def _uncoded(x: np.ndarray, codes) -> np.ndarray:
    """Published numbers ``x`` with the declared missing ``codes`` read as missing (NaN)."""
    if codes:
        x = np.where(np.isin(x, np.asarray(codes, dtype=np.float64)), np.nan, x)
    return x


def _class_means_check(result, means: ClassMeans, il_cols, likes, dates, keys, codes) -> tuple[str, bool, str]:
    """Each class's published value of every QI published as one number against the mean
    of the class's original values present (``ClassMeans``; the module docstring): null
    exactly when the class has no value present (a declared missing ``codes`` of a column
    published: missing). ``likes``: the type each release column is read as (``as_number``);
    ``dates``: QIs published as the mean rounded to the unit."""
    merged = means.finish()
    merged = merged.with_columns([pl.Series(c, _uncoded(as_number(merged.get_column(c), likes[il_cols.index(c)]),
                                                        v)).fill_nan(None) for c, v in codes.items()])
    bounds = [float(MEAN_TOLERANCE * means.amax[j]) + (0.5 if c in dates else 0.0) for j, c in enumerate(il_cols)]
    gaps = [(pl.Series(as_number(merged.get_column(c), likes[j])) - merged.get_column(mean_name(j))).abs()
            .alias(f"__gap_{j}") for j, c in enumerate(il_cols)]
    counts = [means.present(merged, j).alias(f"__present_{j}") for j in range(len(il_cols))]
    off = pl.lit(False)
    for j, c in enumerate(il_cols):  # (a NaN published value or mean: off too)
        g = pl.col(f"__gap_{j}")
        none = pl.col(mean_name(j)).is_null()  # no original value present: published null
        ok = pl.when(pl.col(c).is_null()).then(none).otherwise(~none & (g <= bounds[j]) & ~g.is_nan())
        off = off | ~ok.fill_null(False)
    bad = merged.with_columns(gaps + counts).filter(off)
    result.classes_not_mean = bad.height
    if not bad.height:
        return ("class means", True, f"every published value of {', '.join(il_cols)} is the mean of its class's "
                                     f"original values ({merged.height:,} classes)")
    first = bad.sort(keys, nulls_last=True).row(0, named=True)

    def wrong(j: int) -> bool:
        pub, mean, gap = first[il_cols[j]], first[mean_name(j)], first[f"__gap_{j}"]
        if pub is None or mean is None:
            return (pub is None) != (mean is None)
        return gap is None or not gap <= bounds[j]

    j = next(j for j in range(len(il_cols)) if wrong(j))
    c, present = il_cols[j], first[f"__present_{j}"]
    if first[mean_name(j)] is None:
        what = (f"the class's {first[ROWS]:,} original values are all missing (published: null"
                + (" or a declared missing code)" if c in codes else ")"))
    else:
        what = (f"the mean of the class's {present:,} original values"
                + (f" present (of {first[ROWS]:,})" if present != first[ROWS] else "")
                + f" is {first[mean_name(j)]:.10g}")
    return ("class means", False,
            f"{bad.height:,} of {merged.height:,} classes publish a value that is not the mean of their original "
            f"values; e.g. column {c!r}: published {first[c]!r}, {what} "
            f"(class {describe({k: first[k] for k in keys})})")


def _generalization_check(generalized, outside, sets=()) -> tuple[str, bool, str]:
    if outside:
        first = min(outside, key=lambda c: outside[c])
        hint = (" (a mixed-type MDAV release, whose categorical QIs hold one category each, "
                "is verified with --mixed)" if any(c in sets for c in outside) else "")
        return ("generalization", False,
                f"the original value is outside its published range or set in "
                f"{', '.join(c for c in generalized if c in outside)}; first: column "
                f"{first!r} at row {outside[first] + 1}{hint}")
    return ("generalization", True, f"every original value lies in its published range "
                                    f"or set ({', '.join(generalized)})")


def _class_checks(result, counter, group_keys, keys, k, sa, l, epsilon) -> None:
    """k-anonymity (and l-diversity or entropy l-diversity with ``sa``) over the counted classes."""
    merged = counter.finish()
    if sa is None:
        per_class = merged.rename({COUNT: _SIZE})
    else:
        n = pl.col(COUNT)
        p = n / n.sum()
        per_class = merged.group_by(group_keys).agg(n.sum().alias(_SIZE), pl.len().cast(pl.Int64).alias(_DISTINCT),
                                              (-(p * p.log(2)).sum()).alias(_ENTROPY))
    sizes = per_class.get_column(_SIZE)
    result.classes = per_class.height
    result.min_class_size = int(sizes.min())
    result.max_class_size = int(sizes.max())
    small = per_class.filter(pl.col(_SIZE) < k)
    result.classes_below_k = small.height
    result.rows_below_k = int(small.get_column(_SIZE).sum()) if small.height else 0
    smallest = per_class.sort([_SIZE] + keys, nulls_last=True).row(0, named=True)
    result.smallest_class = {c: smallest[c] for c in keys}
    if result.classes_below_k:
        detail = (f"{result.classes_below_k:,} of {result.classes:,} classes are smaller than k={k} "
                  f"({result.rows_below_k:,} rows); smallest has {result.min_class_size} row"
                  f"{'s' if result.min_class_size != 1 else ''}: {describe(result.smallest_class)}")
    else:
        detail = f"{result.classes:,} classes of {result.min_class_size}..{result.max_class_size} rows (k={k})"
    _check(result, "k-anonymity", result.classes_below_k == 0, detail)

    if sa is not None:
        result.min_distinct_sa = int(per_class.get_column(_DISTINCT).min())
        result.min_entropy_bits = max(0.0, float(per_class.get_column(_ENTROPY).min()))
        if l is not None:
            bad = per_class.filter(pl.col(_DISTINCT) < l)
            result.classes_below_l = bad.height
            detail = (f"smallest number of distinct {sa!r} values in a class: {result.min_distinct_sa} (l={l})")
            if bad.height:
                worst = bad.sort([_DISTINCT] + keys, nulls_last=True).row(0, named=True)
                detail += f"; {bad.height:,} classes below l, e.g. {describe({c: worst[c] for c in keys})}"
            _check(result, "l-diversity", bad.height == 0, detail)
        else:
            bad = per_class.filter(pl.col(_ENTROPY) < epsilon - ENTROPY_TOLERANCE)
            result.classes_below_l = bad.height
            detail = (f"lowest class entropy of {sa!r}: {result.min_entropy_bits:.4f} bits "
                      f"(epsilon={epsilon:g})")
            if bad.height:
                worst = bad.sort([_ENTROPY] + keys, nulls_last=True).row(0, named=True)
                detail += f"; {bad.height:,} classes below, e.g. {describe({c: worst[c] for c in keys})}"
            _check(result, "entropy l-diversity", bad.height == 0, detail)
