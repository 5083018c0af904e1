"""Column kinds: which columns are numbers, dates or categories, from their Polars type.

Every method reads a QI's kind from here: the MDAV family's mixed-type QIs
(``kind_of``: numeric, date, ordinal, nominal) and the range methods (``is_number``:
numeric QIs become ranges, every other column is categorical, coded by the
dictionary pass). ``audit.classes.is_numeric`` (the verifier's own reading of a
published file) is deliberately separate.
"""

from __future__ import annotations

import polars as pl

from ..errors import EngineError
from ..io.csvfile import DATETIME, LOOKS_DATETIME, not_a_value, reads_as

KINDS = ("numeric", "date", "ordinal", "nominal")


def is_categorical(dt) -> bool:
    """Strings, Categorical, Enum and Boolean columns: values compared as categories."""
    return dt == pl.String or dt == pl.Boolean or isinstance(dt, (pl.Categorical, pl.Enum))


def is_temporal(dt) -> bool:
    """Date and Datetime columns: numbers on their epoch value."""
    return dt == pl.Date or isinstance(dt, pl.Datetime)


def is_number(dt) -> bool:
    """Numeric but not Boolean (Polars counts Boolean as numeric; a QI of two values is a category)."""
    return dt.is_numeric() and dt != pl.Boolean


def kind_of(column: str, dt, ordinal: bool, nominal: bool = False) -> str:
    """The QI kind of a column of type ``dt`` (``ordinal``: named by ``--ordinal``;
    ``nominal``: by ``--nominal``, a number that codes a category)."""
    if nominal:
        if not (is_number(dt) or is_categorical(dt)):
            raise EngineError(f"column {column!r} is nominal (--nominal) but of type {dt}: a nominal "
                              f"quasi-identifier holds numbers or texts that code categories")
        return "nominal"
    if ordinal:
        if not is_categorical(dt) or dt == pl.Boolean:
            raise EngineError(f"column {column!r} is ordinal (--ordinal) but of type {dt}: an ordinal "
                              f"quasi-identifier must be a String, Categorical or Enum column")
        return "ordinal"
    if is_number(dt):
        return "numeric"
    if is_temporal(dt):
        return "date"
    if is_categorical(dt):
        return "nominal"
    raise EngineError(f"column {column!r} has type {dt}: quasi-identifiers must be numbers, dates, "
                      f"strings, categories or booleans")


def shown_kind(kind: str, dt) -> str:
    """A QI's kind as the summary and the report name it: ``kind`` (``KINDS``), a
    Boolean column's nominal kind named "boolean"."""
    return "boolean" if kind == "nominal" and dt == pl.Boolean else kind


def range_kinds(qi, schema) -> dict:
    """The range methods' QI kinds (``shown_kind``): numbers become ranges, every other
    column a set of categories (dates too: their values compared as categories)."""
    return {c: "numeric" if is_number(schema[c]) else shown_kind("nominal", schema[c]) for c in qi}


def csv_types(source, cfg) -> dict:
    """How a CSV input's QIs are read, from their first 1,000 values (missing values left
    out): Float64 when every one is a number (as every numeric QI always was); refused,
    naming the first value that is not, when more than half are numbers (a typo in a
    numeric column, ``4O`` for ``40``, is not a category); otherwise (or when named by
    ``--ordinal``) text: Boolean when every value is true/false, Date when every value
    is an ISO date, Datetime (microseconds) when every one is an ISO datetime without a
    time zone (one with a time zone is refused), else String. A value further down that does not fit the type read
    is then an error naming its row (``TableSource._diagnose``). A column named by
    ``--nominal`` is read as text: its codes published as the input wrote them."""
    types = {c: pl.Float64 for c in cfg.qi}
    if source.kind != "csv" or not cfg.spec.centroids:
        return types
    ordinal = {c for c, _, _ in cfg.ordinal or ()} | set(cfg.nominal or ())
    try:
        head = source.text_head([c for c in cfg.qi if c in set(source.columns)], 1000)
    except Exception:
        return types  # reading fails later with the reader's own message
    nulls = list(source.csv.null_values) if source.csv is not None else []
    for c in head.columns:
        v = head.get_column(c)
        present = v.is_not_null() & ~v.is_in(nulls) if nulls else v.is_not_null()
        number = v.cast(pl.Float64, strict=False).is_not_null()
        n, numbers = int(present.sum()), int((present & number).sum())
        if c in ordinal:
            types[c] = pl.String
        elif numbers == n:
            continue
        elif 2 * numbers > n:
            row = int((present & ~number).arg_max())
            raise not_a_value(c, v[row], row + 1, source.label,
                              hint=" (the column's other values are numbers: correct it, or list it in "
                                   "--null-values)")
        else:
            v = v.filter(present)
            if v.str.to_lowercase().is_in(["true", "false"]).all():
                types[c] = pl.Boolean
            elif v.str.to_date("%Y-%m-%d", strict=False).null_count() == 0:
                types[c] = pl.Date
            elif reads_as(v, DATETIME).all():
                types[c] = DATETIME
            elif v.str.contains(LOOKS_DATETIME).all():  # (with an offset or a Z: no one type reads them all)
                first = v.filter(~reads_as(v, DATETIME))[0]
                raise EngineError(f"column {c!r} of {source.label} holds a datetime that is not read as one: "
                                  f"{first!r}; a CSV datetime quasi-identifier is read as YYYY-MM-DD HH:MM:SS "
                                  f"(no time zone): write it so, or as Parquet, or list it in --nominal")
            else:
                types[c] = pl.String
    return types
