"""Declared missing codes of quasi-identifiers (``--missing COL=CODE,...``).

Survey and census files code their missing values as values: an age of 996
("Missing"), 997 ("Refused"), an income of 9999999 ("N.I.U."). Averaged with the
real values they publish ages of 260 to 996. ``--missing`` declares them, for any
input (CSV, Parquet, and the statistical formats' readers, which pass on the codes
their files declare); what the engine then does depends on the QI's kind:

* **numeric**: a declared code is a missing value, as a null is
  (docs/notes/missing-values.md): read as missing for the grouping (a missing-value
  indicator, the cell at the mean of the values present: ``encode.missing``,
  ``Mixed.compact``), never part of a mean. A class with values publishes the mean
  of its values present (its missing cells are *imputed*, as nulls are); a class
  whose rows are all missing publishes a declared code, never a null: the code most
  frequent among its rows, ties to the code declared first (``class_codes``). So a
  class keeps one published value per QI (k-anonymity holds, codes counted as
  values), and each published number is either a mean of real values or a declared
  code.
* **nominal** (texts, and numbers named by ``--nominal``): a declared code is
  already a category of its own (as a null is), published as the class's most
  frequent category, so it is never averaged and comes out as the input's code;
  the declaration is checked against the column and counted in the report.
* **ordinal** and **date** QIs are refused (an ordinal's order lists its codes; a
  date has no code).

``resolve_missing`` reads the codes as the column's type once the input's schema
is known: numbers for a numeric column (a text that is not one is an error line),
texts for a text column.
"""

from __future__ import annotations

import math
import numbers

import numpy as np
import polars as pl

from ..errors import EngineError


def _number(c: str, v, dt, label: str):
    """Code ``v`` of numeric column ``c`` (of type ``dt``) as a number of its type."""
    x = v
    if isinstance(v, str):
        try:
            x = float(v.strip())
        except ValueError:
            raise EngineError(f"missing (--missing): code {v!r} of column {c!r} is not a number, and the column "
                              f"is {dt} in {label}") from None
    if isinstance(x, bool) or not isinstance(x, numbers.Real) or not math.isfinite(x):
        raise EngineError(f"missing (--missing): code {v!r} of column {c!r} is not a finite number, and the column "
                          f"is {dt} in {label}")
    if dt.is_integer():
        if float(x) != int(x):
            raise EngineError(f"missing (--missing): code {v!r} of column {c!r} is not a whole number, and the "
                              f"column is {dt} in {label}")
        x = int(x)
        back = pl.Series([x]).cast(dt, strict=False)
        if back.null_count():
            raise EngineError(f"missing (--missing): code {v!r} of column {c!r} does not fit its type {dt} "
                              f"in {label}")
        return x
    return float(x)


def resolve_missing(missing, qis: dict, label: str = "the input") -> dict:
    """``{column: (code, ...)}`` of ``missing`` (``RunConfig.missing``) with each code
    read as its column's type (``qis``: ``{column: (kind, dtype)}``); a code of the
    wrong type, or a QI kind that takes none, is one line naming the column."""
    out = {}
    for c, codes in missing or ():
        kind, dt = qis[c]
        if kind not in ("numeric", "nominal") or dt == pl.Boolean:
            raise EngineError(f"missing (--missing): column {c!r} is {kind} ({dt}); declared missing codes apply to "
                              f"numeric and nominal quasi-identifiers (an ordinal's order lists its codes; a "
                              f"missing date is a null)")
        if dt.is_numeric():
            typed = [_number(c, v, dt, label) for v in codes]
        else:
            typed = []
            for v in codes:
                if isinstance(v, numbers.Integral) and not isinstance(v, bool):
                    v = str(v)
                if not isinstance(v, str):
                    raise EngineError(f"missing (--missing): code {v!r} of column {c!r} is not a text, and the "
                                      f"column is {dt} in {label}")
                typed.append(v)
        out[c] = tuple(dict.fromkeys(typed))
    return out


def mask_codes(s: pl.Series, codes: tuple) -> pl.Series:
    """``s`` with its declared missing ``codes`` read as missing values (nulls); a
    number compared as a float (a release's Float64 mean column beside Int64 codes)."""
    if s.dtype.is_numeric():
        hit = s.cast(pl.Float64).is_in([float(v) for v in codes]).fill_null(False)
    else:
        hit = s.is_in(list(codes)).fill_null(False)
    return s.set(hit, None) if hit.any() else s


def code_rows(s: pl.Series, codes: tuple) -> np.ndarray:
    """Each row's declared code of ``s`` as its position in ``codes`` (-1: no code)."""
    out = np.full(s.len(), -1, np.int64)
    for i, v in enumerate(codes):
        out[(s == v).fill_null(False).to_numpy()] = i
    return out


def class_codes(rows: np.ndarray, labels: np.ndarray, groups: int, m: int) -> np.ndarray:
    """Each group's most frequent code (position in ``codes``, ties to the first; -1:
    none) from each row's code (``code_rows``) and group."""
    have = rows >= 0
    counts = np.bincount(labels[have] * m + rows[have], minlength=groups * m).reshape(groups, m)
    return np.where(counts.any(axis=1), counts.argmax(axis=1), -1)
