"""The dictionary pass: the categories of every categorical column, and their codes.

Before any other pass reads a categorical QI or the sensitive attribute, one
streaming pass (``learn``) collects each such column's distinct values, so that a
value has the same integer code (its position among the column's categories) in
every chunk, block and worker. Everything downstream reads codes: the MDAV family's
one-hot and rank columns (``encode.mixed``), the range methods' category masks and
SA counts (``methods.ranges``).

**Orders.** Each method keeps the codes it always had; the order is a parameter:

* ``order="text"`` (the MDAV family): each value as its text (``cast(pl.String)``;
  a Boolean's "false" / "true"), sorted by code point; an ordinal column
  (``Categorical.ordinal``) in its listed order, by the least value of its order
  column, or in its Enum's own order. A Parquet input's String columns are learnt
  from the pages' dictionaries (``Source.iter_dictionary``), no text decoded a row.
* ``order="value"`` (the range methods): the values in the column's own type, sorted
  as Polars sorts them (numbers numerically, dates by date), as
  ``methods.maxent.encode_table`` codes a table in memory (``value_order``).

**Checks**, chunk by chunk in row order: the caller's own ``check(frame, offset)``
first (a method whose messages name the first bad value by row, whatever the
column); then column by column a missing value, an ordinal's order column's missing
or non-numeric value, a value an ordinal's listed order does not hold, more than
``limit`` categories. Each error is one line naming the column and the row (counted
from 1).

**Codes** of a chunk, once the categories are known: ``text_codes`` (a text
dictionary: a cast to its Enum), ``indices_codes`` (a Parquet column's dictionary
indices), ``value_codes`` (a value dictionary). A value the pass did not see (the
input changed between passes) is an error naming the row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import polars as pl

from ..errors import EngineError
from ..progress import Progress

ORDERS = ("text", "value")
_COMPACT_EVERY = 32  # value order: chunks' distinct values merged every so many chunks (bounded lists)


@dataclass(frozen=True)
class Categorical:
    """What the dictionary pass learns of one column.

    ``ordinal``: its categories in an order of their own (text order only): ``order``
    (the categories as listed; any other value is an error), else ``by`` (a numeric
    column: by the least of its values among each category's rows, ties by text),
    else the column's Enum order. ``count``: each category's rows are counted too
    (the sensitive attribute's distribution)."""

    name: str
    dtype: object = None
    ordinal: bool = False
    order: tuple | None = None
    by: str | None = None
    count: bool = False
    missing: bool = False  # a missing value is no error: counted (``Dictionary.nulls``), not a category


class Dictionary:
    """One column's categories as the pass learns them, chunk by chunk; then
    ``categories`` (in order: a category's code is its position) and ``counts``."""

    def __init__(self, spec: Categorical, order: str):
        self.spec = spec
        self.texts = order == "text"
        self.allowed = set(spec.order) if spec.order is not None else None
        self.seen: set = set()  # text order: the texts seen
        self.mins: dict = {}  # text order with ``by``: text -> the least order value
        self.tally: dict = {}  # text order with ``count``: text -> rows
        self.parts: list = []  # value order: the chunks' distinct values
        self.count_parts: list = []  # value order with ``count``: the chunks' value counts
        self._total: pl.DataFrame | None = None  # value order with ``count``: the counts, merged and sorted
        self.nulls = 0  # missing values seen (``Categorical.missing``)

    @property
    def name(self) -> str:
        return self.spec.name

    def size(self) -> int:
        """Categories seen so far."""
        if self.texts:
            return len(self.seen)
        self._merge()
        return len(self.count_parts[0] if self.spec.count else self.parts[0])

    # --- adding chunks --------------------------------------------------------------

    def add(self, frame: pl.DataFrame, offset: int) -> None:
        """The column's values in ``frame`` (rows ``offset`` on), and its order column's."""
        s = frame.get_column(self.name)
        if s.null_count():
            if not self.spec.missing:
                raise first_missing(self.name, s, offset)
            self.nulls += s.null_count()
        if not self.texts:  # (a missing value is not a category)
            if self.spec.count:
                self.count_parts.append(s.drop_nulls().value_counts(name="n"))
            else:
                self.parts.append(s.drop_nulls().unique())
            if len(self.parts) + len(self.count_parts) > _COMPACT_EVERY:
                self._merge()
            return
        t = s.cast(pl.String)
        by = self.spec.by
        if by is not None:
            b = frame.get_column(by)
            if b.null_count():
                raise first_missing(by, b, offset)
            if b.dtype == pl.String:  # a CSV's pass-through column, kept as text
                b = b.str.strip_chars().cast(pl.Float64, strict=False)
                if b.null_count():
                    i = int(b.is_null().arg_true()[0])
                    raise EngineError(f"column {by!r} (the order of {self.name!r}) has a value that is not a "
                                      f"number at row {offset + i + 1}")
            pairs = (pl.DataFrame({"c": t, "b": b.cast(pl.Float64)}).drop_nulls("c")
                     .group_by("c").agg(pl.col("b").min()))
            for c, v in pairs.iter_rows():
                self.mins[c] = min(v, self.mins.get(c, v))
                self.seen.add(c)
        else:
            self.seen.update(t.drop_nulls().unique().to_list())
        if self.spec.count:
            for c, n in t.drop_nulls().value_counts(name="n").iter_rows():
                self.tally[c] = self.tally.get(c, 0) + n
        if self.allowed is not None and not self.seen <= self.allowed:
            bad = t.is_in(list(self.allowed)).not_()
            i = int(bad.arg_true()[0])
            raise unlisted(self.name, t[i], offset + i)

    def add_indices(self, arr, offset: int) -> None:
        """``add`` of a String column read as a pyarrow DictionaryArray (a Parquet
        column's dictionary indices): its distinct texts are the dictionary's entries
        that some row uses; the same checks, in the same order."""
        if arr.null_count:
            if not self.spec.missing:
                raise missing_value(self.name,
                                    offset + int(np.flatnonzero(arr.is_null().to_numpy(zero_copy_only=False))[0]))
            self.nulls += arr.null_count
        texts = arr.dictionary.to_pylist()
        idx = dictionary_indices(arr)
        if arr.null_count:  # (a missing value's slot holds an arbitrary index)
            idx = np.where(arr.is_valid().to_numpy(zero_copy_only=False), idx, len(texts))
        rows = np.bincount(idx, minlength=len(texts))[:len(texts)]
        self.seen.update(t for t, u in zip(texts, rows > 0) if u)
        if self.spec.count:
            for t, n in zip(texts, rows.tolist()):
                if n:
                    self.tally[t] = self.tally.get(t, 0) + n
        if self.allowed is not None and not self.seen <= self.allowed:
            bad = np.array([t not in self.allowed for t in texts] + [False])
            i = int(np.flatnonzero(bad[idx])[0])
            raise unlisted(self.name, texts[idx[i]], offset + i)

    def _merge(self) -> None:
        """Value order: the chunks' distinct values (or counts) merged into one."""
        if self.parts:
            self.parts = [pl.concat(self.parts).unique()]
        if self.count_parts:
            self.count_parts = [pl.concat(self.count_parts).group_by(self.name).agg(pl.col("n").sum())]

    # --- the result -------------------------------------------------------------------

    def categories(self, label: str = "the input") -> pl.Series:
        """The categories in order (a String Series in text order, the column's own type
        in value order); an ordinal column without an order is an error."""
        if not self.texts:
            if self.spec.count:
                return self._counted().get_column(self.name)
            return value_order(pl.concat(self.parts))
        return pl.Series(self.name, self._ordered_texts(), dtype=pl.String)

    def counts(self) -> np.ndarray:
        """Each category's rows (``Categorical.count``), in the order of ``categories``."""
        if not self.texts:
            return self._counted().get_column("n").to_numpy().astype(np.int64)
        return np.array([self.tally.get(c, 0) for c in self._ordered_texts()], np.int64)

    def _counted(self) -> pl.DataFrame:
        if self._total is None:
            self._total = pl.concat(self.count_parts).group_by(self.name).agg(pl.col("n").sum()).sort(self.name)
        return self._total

    def _ordered_texts(self) -> list:
        spec = self.spec
        if not spec.ordinal:
            return sorted(self.seen)
        if spec.order is not None:
            return list(spec.order)
        if self.mins:  # ordered by the least value of the ``@column`` among each category's rows, ties by name
            return sorted(self.seen, key=lambda c: (self.mins[c], c))
        if isinstance(spec.dtype, pl.Enum):
            return [c for c in spec.dtype.categories.to_list()]
        raise EngineError(f"column {spec.name!r} is ordinal but has no order: give it as --ordinal "
                          f"{spec.name}=CAT1,CAT2,... (only an Enum column has its own)")


def learn(source, columns: Sequence[Categorical], chunk_rows: int, *, order: str = "text",
          limit: int | None = None, check: Callable | None = None, native: bool = True,
          progress: bool = False, rows: int | None = None) -> dict[str, Dictionary]:
    """The dictionary pass: ``{column: Dictionary}`` of ``columns`` over the whole of
    ``source`` (module docstring: ``order``, the checks). ``limit``: more categories
    in a column is an error. ``check(frame, offset)``: the caller's checks of each
    chunk (of the columns and their order columns) before the pass's own. ``native``:
    chunks through Polars' own Parquet reader (``Source.iter_frames``)."""
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, not {order!r}")
    out = {c.name: Dictionary(c, order) for c in columns}
    if not columns:
        return out
    if order != "text" and any(c.ordinal or c.by is not None for c in columns):
        raise ValueError("an ordinal column's order is a text order")
    read = list(dict.fromkeys([c.name for c in columns] + [c.by for c in columns if c.by is not None]))
    with Progress("dictionary", rows if rows is not None else 1, progress) as bar:
        if (order == "text" and check is None and all(c.by is None and c.dtype == pl.String for c in columns)
                and source.dictionary_columns(read)):
            return parquet_pass(source, out, chunk_rows, limit, bar)
        for offset, frame in source.iter_frames(read, chunk_rows, native=native):
            if check is not None:
                check(frame, offset)
            for d in out.values():
                d.add(frame, offset)
                if limit is not None and d.size() > limit:
                    raise too_many(d.name, limit)
            bar.update(offset + frame.height)
    return out


def parquet_pass(source, out: dict, chunk_rows: int, limit: int | None, bar) -> dict:
    """``learn`` of String columns of a Parquet input, from the pages' dictionaries
    (``Source.iter_dictionary``): the same dictionaries, checks and messages."""
    names = list(out)
    for offset, _, arrays in source.iter_dictionary(names, names, chunk_rows):
        for d in out.values():
            d.add_indices(arrays[d.name], offset)
            if limit is not None and d.size() > limit:
                raise too_many(d.name, limit)
        bar.update(offset + len(arrays[names[0]]))
    return out


def value_order(values: pl.Series) -> pl.Series:
    """The distinct values of ``values`` in value order (the column's own type, sorted
    as Polars sorts it)."""
    return values.unique().sort()


# --- codes -----------------------------------------------------------------------------


def text_codes(name: str, enum, s: pl.Series, offset: int, label: str, physical: bool = False) -> np.ndarray:
    """The codes (int64; ``physical``: the Enum's own unsigned integers) of ``s`` in a
    text dictionary given as its Enum type (``pl.Enum(categories)``); a missing value
    or one the dictionary pass did not see (``label`` changed during the run) is an
    error naming the row."""
    if s.null_count():
        raise first_missing(name, s, offset)
    t = s.cast(pl.String)
    codes = t.cast(enum, strict=False)  # an unseen value becomes null
    if codes.null_count():
        i = int(codes.is_null().arg_true()[0])
        raise unseen(name, t[i], offset + i, label)
    codes = codes.to_physical().to_numpy()
    return codes if physical else codes.astype(np.int64)


def indices_codes(name: str, index: dict, dtype, arr, offset: int, label: str) -> np.ndarray:
    """``text_codes(..., physical=True)`` (of NumPy type ``dtype``) of a pyarrow
    DictionaryArray (a Parquet column's dictionary indices, ``Source.iter_dictionary``):
    its few texts mapped to codes (``index``: text -> code) once, then each row's
    index; the same errors."""
    if arr.null_count:
        raise missing_value(name, offset + int(np.flatnonzero(arr.is_null().to_numpy(zero_copy_only=False))[0]))
    texts = arr.dictionary.to_pylist()
    lut = np.array([index.get(t, -1) for t in texts], np.int64)
    codes = lut[dictionary_indices(arr)]
    if (lut < 0).any() and (codes < 0).any():
        i = int(np.flatnonzero(codes < 0)[0])
        raise unseen(name, texts[int(arr.indices[i].as_py())], offset + i, label)
    return codes.astype(dtype)


def value_codes(categories: pl.Series, s: pl.Series, codes: pl.Series | None = None,
                dtype=pl.Float64) -> pl.Series:
    """The codes (of Polars type ``dtype``) of ``s`` in a value dictionary
    (``categories``); ``codes``: ``0 .. len(categories) - 1`` as a Series, when the
    caller keeps one."""
    if codes is None:
        codes = pl.int_range(0, len(categories), eager=True)
    return s.replace_strict(categories, codes, return_dtype=dtype)


def dictionary_indices(arr) -> np.ndarray:
    """The indices of a pyarrow DictionaryArray without nulls, a view of its buffer
    (pyarrow's ``to_numpy`` imports pandas, a fifth of a second)."""
    ind = arr.indices
    dtype = np.dtype(str(ind.type))
    if len(ind) == 0:
        return np.zeros(0, dtype)
    return np.frombuffer(ind.buffers()[1], dtype=dtype, count=len(ind), offset=ind.offset * dtype.itemsize)


# --- errors ----------------------------------------------------------------------------


def missing_value(c: str, i: int) -> EngineError:
    return EngineError(f"column {c!r} has a missing value at row {i + 1} (rows counted from 1)")


def first_missing(c: str, s: pl.Series, offset: int) -> EngineError:
    """``missing_value`` of the first null of ``s`` (rows ``offset`` on)."""
    return missing_value(c, offset + int(s.is_null().arg_true()[0]))


def unlisted(c: str, value, i: int) -> EngineError:
    return EngineError(f"column {c!r} has the value {value!r} at row {i + 1}, which its --ordinal order does not list")


def too_many(c: str, limit: int) -> EngineError:
    return EngineError(f"column {c!r} has more than {limit} categories: a categorical quasi-identifier is "
                       f"one-hot encoded; group its values first, or use a numeric code")


def unseen(c: str, value, i: int, label: str) -> EngineError:
    return EngineError(f"column {c!r} has the value {value!r} at row {i + 1}, which the first pass did not see: "
                       f"{label} changed during the run")
