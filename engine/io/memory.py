"""Inputs held in memory: a pandas DataFrame, a pyarrow Table, RecordBatch or dataset,
as a Polars frame (``from_memory``), with the Arrow schema a Parquet output keeps
(``engine.io.schema.ArrowTarget``).
"""

from __future__ import annotations

import json
import sys

import polars as pl
import pyarrow as pa

from ..errors import EngineError, first_line
from .schema import unsupported_field


def input_kind(data) -> str | None:
    """"pandas", "arrow" (a pyarrow Table or RecordBatch), "dataset" (a pyarrow
    dataset) or None (anything else). pandas (optional) and ``pyarrow.dataset`` are not
    imported: an object of theirs exists only if its module was imported already."""
    pd = sys.modules.get("pandas")
    if pd is not None and isinstance(data, pd.DataFrame):
        return "pandas"
    if isinstance(data, (pa.Table, pa.RecordBatch)):
        return "arrow"
    ds = sys.modules.get("pyarrow.dataset")
    if ds is not None and isinstance(data, ds.Dataset):
        return "dataset"
    return None


def _dates(lf_or_frame, arrow_schema):
    """Arrow ``date64`` columns (Polars: Datetime[ms]) back to dates (Polars Date)."""
    d64 = [f.name for f in arrow_schema if pa.types.is_date64(f.type)]
    return lf_or_frame.with_columns(pl.col(d64).cast(pl.Date)) if d64 else lf_or_frame


def _from_pandas(df) -> tuple[pl.DataFrame, pa.Schema | None]:
    """A pandas DataFrame as Polars (through Arrow: numeric columns without a copy), and
    its Arrow schema as pandas' own ``to_parquet`` writes it (its metadata records the
    index). A RangeIndex (any start and step) stays in that metadata only; another index
    becomes columns first (as ``to_parquet`` stores it): by its names, or ``index``
    (pandas' ``reset_index``). A Categorical whose categories are not texts (numbers,
    say) is read as categories of their texts: its values are categories, not numbers."""
    import pandas as pd  # optional: only a pandas DataFrame given as input gets here

    for c in df.columns:
        if not isinstance(c, str):
            raise EngineError(f"pandas column names must be strings, got {c!r} ({type(c).__name__}); "
                              f"rename them (df.columns = df.columns.astype(str))")
    if df.columns.has_duplicates:
        dup = df.columns[df.columns.duplicated()][0]
        raise EngineError(f"pandas column {dup!r} appears twice; rename one of them")
    idx = df.index
    try:
        try:
            arrow = pa.Schema.from_pandas(df, preserve_index=None)
        except Exception:  # (types pyarrow cannot hold: pl.from_pandas says why below)
            arrow = None
        if not isinstance(idx, pd.RangeIndex):
            before = [n if n is not None else f"__index_level_{i}__" for i, n in enumerate(idx.names)]
            df = df.reset_index()  # refuses an index named as a column
            if arrow is not None:
                arrow = _renamed_index(arrow, dict(zip(before, df.columns[:len(before)])))
        cats = [c for c in df.columns if isinstance(df[c].dtype, pd.CategoricalDtype)
                and not pd.api.types.is_string_dtype(df[c].cat.categories.dtype)
                and not df[c].cat.categories.inferred_type == "string"]
        if cats:
            df = df.copy(deep=False)
            for c in cats:
                df[c] = df[c].cat.rename_categories([str(v) for v in df[c].cat.categories])
        return pl.from_pandas(df), arrow
    except EngineError:
        raise
    except Exception as exc:
        raise EngineError(f"cannot convert the pandas DataFrame: {first_line(exc)}") from None


def _renamed_index(arrow: pa.Schema, names: dict) -> pa.Schema:
    """pyarrow's index fields (``__index_level_0__``, or the index's names) renamed as
    ``reset_index`` names the columns, in fields and in pandas' metadata."""
    fields = [f.with_name(names.get(f.name, f.name)) for f in arrow]
    meta = dict(arrow.metadata or {})
    if b"pandas" in meta:
        info = json.loads(meta[b"pandas"])
        info["index_columns"] = [names.get(c, c) if isinstance(c, str) else c for c in info.get("index_columns", [])]
        for col in info.get("columns", []):
            if col.get("field_name") in names:
                col["field_name"] = names[col["field_name"]]
        meta[b"pandas"] = json.dumps(info).encode()
    return pa.schema(fields, metadata=meta)


def _categories_of_numbers(data):
    """A pyarrow table whose dictionary columns of numbers (categories) are dictionaries
    of their texts: Polars would read them as numbers (see ``_from_pandas``)."""
    schema = data.schema
    for i, f in enumerate(schema):
        t = f.type
        if pa.types.is_dictionary(t) and not (pa.types.is_string(t.value_type) or pa.types.is_large_string(t.value_type)):
            col = data.column(i)
            if isinstance(data, pa.RecordBatch):
                data = pa.Table.from_batches([data])
            col = col.cast(t.value_type).cast(pa.string()).dictionary_encode()
            data = data.set_column(i, f.name, col)
    return data


def from_memory(data, kind: str) -> tuple[pl.LazyFrame, str, pa.Schema | None]:
    """``data`` (of ``input_kind`` ``kind``) as ``(frame, label, Arrow schema)``, what
    ``engine.io.source.open_source`` makes its source of."""

    if kind == "pandas":
        frame, arrow = _from_pandas(data)
        return frame.lazy(), "input DataFrame (pandas)", arrow
    bad = unsupported_field(data.schema)
    if bad is not None:
        raise EngineError(f"cannot convert the pyarrow {kind}: {bad}")
    try:
        if kind == "arrow":
            frame = _dates(pl.from_arrow(_categories_of_numbers(data), rechunk=False), data.schema)
            return frame.lazy(), "input table (pyarrow)", data.schema
        lf = _dates(pl.scan_pyarrow_dataset(data), data.schema)
        return lf, "input dataset (pyarrow)", data.schema
    except Exception as exc:
        raise EngineError(f"cannot convert the pyarrow {kind}: {first_line(exc)}") from None
