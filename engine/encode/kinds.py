"""Column kinds: which columns are numbers, dates or categories, from their Polars type.

Every method reads a QI's kind from here: the MDAV family's mixed-type QIs
(``kind_of``: numeric, date, ordinal, nominal) and the range methods (``is_number``:
numeric QIs become ranges, every other column is categorical, coded by the
dictionary pass). ``audit.verify.is_numeric`` (the verifier's own reading of a
published file) is deliberately separate.
"""

from __future__ import annotations

import polars as pl

from ..errors import EngineError

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


def kind_of(column: str, dt, ordinal: bool) -> str:
    """The QI kind of a column of type ``dt`` (``ordinal``: named by ``--ordinal``)."""
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


def csv_types(source, cfg) -> dict:
    """How a CSV input's QIs are read: Float64 (as every numeric QI always was), or for
    a QI whose first 1,000 values are not all numbers (or one named by ``--ordinal``)
    String, Boolean (every value true/false) or Date (every value an ISO date). A
    value further down that does not fit the type read is then an error naming it."""
    types = {c: pl.Float64 for c in cfg.qi}
    if source.kind != "csv" or not cfg.spec.centroids:
        return types
    ordinal = {c for c, _, _ in cfg.ordinal or ()}
    try:
        head = source.text_head([c for c in cfg.qi if c in set(source.columns)], 1000)
    except Exception:
        return types  # reading fails later with the reader's own message
    nulls = list(source.csv.null_values) if source.csv is not None else []
    for c in head.columns:
        v = head.get_column(c)
        v = v.filter(~v.is_in(nulls)) if nulls else v
        v = v.drop_nulls()
        if c in ordinal:
            types[c] = pl.String
        elif v.len() == 0 or v.str.strip_chars().cast(pl.Float64, strict=False).null_count() == 0:
            continue
        elif v.str.to_lowercase().is_in(["true", "false"]).all():
            types[c] = pl.Boolean
        elif v.str.to_date("%Y-%m-%d", strict=False).null_count() == 0:
            types[c] = pl.Date
        else:
            types[c] = pl.String
    return types
