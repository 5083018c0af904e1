"""One schema for a folder (or glob) of Parquet files whose files disagree.

``reconcile_parquet`` reads the footer of every file (no data) and builds the
schema the engine reads them as:

* column order: the first file's; a column that first appears in a later file
  comes after, in the order the files introduce them. Files may list their
  columns in any order.
* types, when the files disagree:

  - the same type, or a column that is all null (``Null``) in some files: that type;
  - integers of different widths or signedness: the narrowest integer type that
    holds both exactly (Int32 + Int64 -> Int64, UInt32 + Int32 -> Int64); UInt64
    with a signed type has none: refused;
  - floats of different widths: Float64 (exact);
  - an integer with a float: Float64. Exact for integers of up to 32 bits; for
    Int64 / UInt64 it is exact only up to 2^53, so such a column may be used as a
    quasi-identifier (QIs are converted to Float64 anyway) but a pass-through
    column of that kind is refused (``check_reconciled``);
  - Decimals of the same scale: the larger precision (exact);
  - anything else (text with numbers, dates with datetimes, different time zones
    or units, ...): refused, one line naming the file, the column and both types.

* a column missing from some files: read as nulls there (the values do not exist
  in those files; nothing is invented for the rows that have them). A column that
  a command *uses* (a quasi-identifier, the sensitive attribute, a release's
  published columns) must be in every file: ``check_reconciled`` refuses it,
  naming the file.
* an Arrow ``date64`` column (written by pyarrow as a Parquet DATE) is read as a
  Polars ``Date`` whatever the reader (Polars' own reader gives ``Datetime[ms]``,
  pyarrow's ``Date``), so it is written back as a Parquet DATE.

``adapt`` turns one file's frame into the reconciled schema: missing columns as
nulls, casts, and the requested column order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import polars as pl
import pyarrow as pa

from ..errors import EngineError, first_line
from .remote import read_schema

WIDE_INTEGERS = (pl.Int128, pl.UInt128)
_SIGNED = {pl.Int8: 8, pl.Int16: 16, pl.Int32: 32, pl.Int64: 64}
_UNSIGNED = {pl.UInt8: 8, pl.UInt16: 16, pl.UInt32: 32, pl.UInt64: 64}
_SIGNED_BY_BITS = {8: pl.Int8, 16: pl.Int16, 32: pl.Int32, 64: pl.Int64}
_UNSIGNED_BY_BITS = {8: pl.UInt8, 16: pl.UInt16, 32: pl.UInt32, 64: pl.UInt64}


def _int_bits(dt) -> tuple[bool, int] | None:
    """(signed, bits) of a Polars integer type up to 64 bits, else None."""
    for table, signed in ((_SIGNED, True), (_UNSIGNED, False)):
        for t, bits in table.items():
            if dt == t:
                return signed, bits
    return None


def merge_types(a: pl.DataType, b: pl.DataType) -> tuple[pl.DataType, bool] | None:
    """The type that holds columns of types ``a`` and ``b``, and whether every value
    converts exactly; None when there is none (the folder is refused)."""
    if a == b:
        return a, True
    if a == pl.Null:
        return b, True
    if b == pl.Null:
        return a, True
    ia, ib = _int_bits(a), _int_bits(b)
    if ia is not None and ib is not None:
        (sa, ba), (sb, bb) = ia, ib
        if sa == sb:
            return (_SIGNED_BY_BITS if sa else _UNSIGNED_BY_BITS)[max(ba, bb)], True
        unsigned_bits, signed_bits = (ba, bb) if not sa else (bb, ba)
        need = max(signed_bits, 2 * unsigned_bits)
        if need > 64:
            return None
        return _SIGNED_BY_BITS[need], True
    fa, fb = a.is_float(), b.is_float()
    if fa and fb:
        return pl.Float64, True
    if (fa and ib is not None) or (fb and ia is not None):
        bits = (ib if fa else ia)[1]
        return pl.Float64, bits <= 32
    if isinstance(a, pl.Decimal) and isinstance(b, pl.Decimal) and a.scale == b.scale:
        return pl.Decimal(max(a.precision or 38, b.precision or 38), a.scale), True
    return None


@dataclass
class FolderSchema:
    """The reconciled schema of Parquet files (see the module docstring)."""

    schema: pl.Schema
    files: tuple[str, ...]
    file_schemas: tuple[pl.Schema, ...]  # each file's own schema (date64 already as Date)
    missing: dict[str, str] = field(default_factory=dict)   # column -> first file without it
    inexact: dict[str, str] = field(default_factory=dict)   # column -> why Float64 may change it
    uniform: bool = True  # every file has exactly ``schema``, same order, no cast needed
    by_path: dict[str, pl.Schema] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.by_path = dict(zip(self.files, self.file_schemas))

    def file_schema(self, path: str) -> pl.Schema:
        return self.by_path[path]


def _file_schema(path: str) -> tuple[pl.Schema, bool]:
    """A Parquet file's schema as Polars reads it (footer only), with Arrow date64
    columns (Polars: Datetime[ms], the Parquet column: DATE) as Date; and whether
    there was one."""
    schema = dict(pl.read_parquet_schema(path))
    date64 = False
    if any(dt == pl.Datetime("ms") for dt in schema.values()):
        arrow = read_schema(path)  # the Parquet logical types: a date64 column is a DATE
        for name, dt in list(schema.items()):
            if dt == pl.Datetime("ms") and name in arrow.names and pa.types.is_date(arrow.field(name).type):
                schema[name] = pl.Date
                date64 = True
    return pl.Schema(schema), date64


def unsupported_field(schema: pa.Schema) -> str | None:
    """What makes an Arrow schema unreadable by Polars, naming the column (a decimal
    of more than 38 digits), or None."""
    for f in schema:
        if pa.types.is_decimal(f.type) and f.type.precision > 38:
            return (f"column {f.name!r} is {f.type}: decimals of more than 38 digits are not supported "
                    f"(store it as decimal128 or as text)")
    return None


def unreadable_column(path: str) -> str | None:
    """``unsupported_field`` of a Parquet file's schema (None when even that fails)."""
    try:
        return unsupported_field(read_schema(path))
    except Exception:
        return None


def reconcile_parquet(files: Sequence[str], label: str) -> FolderSchema:
    """Read every file's footer and reconcile (module docstring); EngineError on a
    file that cannot be read or a column whose types cannot be reconciled."""
    schemas = []
    date64 = False
    for f in files:
        try:
            sch, d64 = _file_schema(f)
        except Exception as exc:
            raise EngineError(f"cannot read {label}: {f}: {unreadable_column(f) or first_line(exc)}") from None
        for name, dt in sch.items():
            if dt in WIDE_INTEGERS:
                raise EngineError(f"cannot read {label}: column {name!r} in {f} is {dt}: Parquet files with "
                                  f"128-bit integers are read in chunks by pyarrow, which cannot read them; store "
                                  f"the column as Int64, Decimal or text")
        schemas.append(sch)
        date64 |= d64
    target: dict[str, pl.DataType] = {}
    first: dict[str, tuple[pl.DataType, str]] = {}  # column -> its type in the first file that has it
    inexact: dict[str, str] = {}
    for f, sch in zip(files, schemas):
        for name, dt in sch.items():
            if name not in target:
                target[name] = dt
                first[name] = (dt, f)
                continue
            merged = merge_types(target[name], dt)
            if merged is None:
                raise EngineError(f"cannot read {label}: column {name!r} is {dt} in {f} but {first[name][0]} in "
                                  f"{first[name][1]}; convert one of them")
            target[name], exact = merged
            if not exact and name not in inexact:
                inexact[name] = f"column {name!r} is {dt} in {f} but {first[name][0]} in {first[name][1]}"
    missing = {}
    for name in target:
        for f, sch in zip(files, schemas):
            if name not in sch:
                missing[name] = f
                break
    full = pl.Schema(target)
    # what Polars' reader gives is this already (a date64 column is not)
    uniform = not date64 and all(list(sch.items()) == list(full.items()) for sch in schemas)
    return FolderSchema(full, tuple(files), tuple(schemas), missing, inexact, uniform)


def _casts(have: pl.Schema, schema: pl.Schema) -> list:
    return [pl.col(c) if have.get(c) == dt else pl.col(c).cast(dt) for c, dt in schema.items()]


def _nulls(have: pl.Schema, schema: pl.Schema) -> list:
    return [pl.lit(None, dtype=dt).alias(c) for c, dt in schema.items() if c not in have]


def adapt(frame: pl.DataFrame, schema: pl.Schema) -> pl.DataFrame:
    """``frame`` (one file's columns, any order, maybe fewer) as ``schema``: its columns
    in that order, cast to those types, a column the file lacks as nulls (added with
    ``with_columns``, so they have the frame's height even when no column of the file
    is asked for)."""
    if list(frame.schema.items()) == list(schema.items()):
        return frame
    if nulls := _nulls(frame.schema, schema):
        frame = frame.with_columns(nulls)
    return frame.select(_casts(frame.schema, schema))


def adapt_lazy(lf: pl.LazyFrame, schema: pl.Schema, have: pl.Schema | None = None) -> pl.LazyFrame:
    """``adapt`` on a LazyFrame (one file's scan, whose columns are those of ``have``)."""
    have = lf.collect_schema() if have is None else have
    if nulls := _nulls(have, schema):
        lf = lf.with_columns(nulls)
    # a date64 column: Polars reads Datetime[ms], the schema says Date: always cast
    return lf.select([pl.col(c).cast(dt) for c, dt in schema.items()])


def check_output_types(schema: pl.Schema, fmt: str | None, columns) -> None:
    """Refuse, before any work, a Parquet output that would hold a 128-bit integer column
    (of ``columns``, the ones written as they are): Polars writes it, but pyarrow
    and most tools cannot read the file (nor can the run's own check). CSV holds them
    exactly (as text)."""
    if fmt not in ("parquet", "folder"):  # folder: of Parquet parts (engine.cluster)
        return
    for c in columns:
        if c in schema and schema[c] in WIDE_INTEGERS:
            raise EngineError(f"column {c!r} is {schema[c]}: a Parquet file with 128-bit integers cannot be read "
                              f"by pyarrow and most tools; write CSV, or cast it (e.g. to Decimal or String)")


def check_reconciled(folder: FolderSchema | None, label: str, used: Sequence[str],
                     passthrough: Sequence[str] = ()) -> None:
    """Refuse a folder where a column in ``used`` (quasi-identifiers, the sensitive
    attribute, a release's published columns) is missing from a file, or where a
    column in ``passthrough`` (copied to the output) would not convert exactly."""
    if folder is None:
        return
    for c in used:
        if c in folder.missing:
            raise EngineError(f"cannot read {label}: column {c!r} is missing from {folder.missing[c]} "
                              f"(a column the run uses must be in every file)")
    for c in passthrough:
        if c in folder.inexact:
            raise EngineError(f"cannot read {label}: {folder.inexact[c]}; as Float64 its values could change, "
                              f"and a column passed through must keep them (convert the files, or use it as a "
                              f"quasi-identifier)")


# --- Arrow types kept on output (byte-faithful pass-through) -------------------------

_POLARS_OF: dict = {}


def polars_type(t: pa.DataType):
    """The Polars type a column of Arrow type ``t`` is read as (None: not readable)."""
    if t not in _POLARS_OF:
        try:
            _POLARS_OF[t] = pl.Series("c", pa.nulls(0, t)).dtype  # (pa.array([]) would import pandas)
        except Exception:
            _POLARS_OF[t] = None
    return _POLARS_OF[t]


def _keeps(field: pa.Field, dt, replaced: bool) -> bool:
    """Whether a Polars column of type ``dt`` is written back as ``field``'s Arrow type:
    when Polars reads that type as ``dt`` (every value then converts back exactly), or a
    Categorical read from a dictionary of numbers (``source``: categories, not numbers).
    A replaced column (a QI's published values) not when its type has a unit Polars
    lacks (seconds: the mean is rounded to milliseconds)."""
    t = field.type
    if replaced and (pa.types.is_timestamp(t) and t.unit == "s" or pa.types.is_date64(t)):
        return False
    if pa.types.is_date64(t):  # written as a Parquet DATE, read back as date32 (docs/inputs.md)
        return False
    if isinstance(dt, pl.Categorical) and pa.types.is_dictionary(t):
        return True
    got = polars_type(t)
    return got is not None and got == dt


class ArrowTarget:
    """The Arrow schema the engine's frames are written as when the input had one
    (``TableSource.arrow``: a Parquet file's, a pyarrow table's, a pandas frame's): each
    column that ``_keeps`` its input type gets it back (``list`` not ``large_list``,
    ``binary``, ``dictionary``, ``time64[us]``, ``string``, ... and the field's metadata),
    and the schema's key/value metadata (pandas' index, say) is kept; other columns (the
    published QIs, the group column) as Polars gives them. ``needed``: False when this is
    what Polars writes anyway."""

    def __init__(self, source: pa.Schema, frame_schema: pl.Schema, replaced=()):
        replaced = set(replaced)
        default = pl.DataFrame(schema=frame_schema).to_arrow().schema
        fields = []
        for f in default:
            i = source.get_field_index(f.name)
            src = source.field(i) if i >= 0 else None
            fields.append(src if src is not None and _keeps(src, frame_schema[f.name], f.name in replaced) else f)
        meta = {k: v for k, v in (source.metadata or {}).items() if k != b"ARROW:schema"}
        self.schema = pa.schema(fields, metadata=meta or None)
        self.needed = bool(meta) or any(a.type != b.type or a.metadata for a, b in zip(fields, default))

    def table(self, frame: pl.DataFrame) -> pa.Table:
        """``frame`` as an Arrow table of ``schema`` (every cast is safe: a value that would
        change is an error)."""
        tbl = frame.to_arrow()
        cols = []
        for i, f in enumerate(self.schema):
            col = tbl.column(i)
            cols.append(col if col.type == f.type else _cast(col, f.type))
        return pa.Table.from_arrays(cols, schema=self.schema)


def _cast(col, t: pa.DataType):
    if pa.types.is_dictionary(t) and pa.types.is_dictionary(col.type) and not (
            pa.types.is_string(t.value_type) or pa.types.is_large_string(t.value_type)):
        # categories of numbers (read as texts): back to numbers, then to the dictionary
        col = col.cast(pa.string()).cast(t.value_type).dictionary_encode()
    return col.cast(t)

