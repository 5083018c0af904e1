"""Open any supported input lazily and hand out chunks of columns as NumPy arrays.

Supported: a CSV file, a Parquet file, a directory of Parquet files, a glob of
Parquet (or CSV) files, a Polars LazyFrame or DataFrame, a pandas DataFrame, a
pyarrow Table, RecordBatch or dataset, a 2-D NumPy array.
Nothing is read until a pass asks for columns; a pass reads only its columns.

CSV (``CsvOptions``: separator, null values, encoding; ``.csv.gz``): types are never
guessed from the first rows. QIs are read as Float64 (a value that is not a number
is an error naming its column and row); the other columns as the file's text for a
CSV output (byte-faithful pass-through), or typed from the whole file. A duplicate
header name is refused (``engine.io.csvfile``).

Object storage (``s3://``, ``gs://``, ``az://``; ``engine.io.remote``): an object, a
prefix (read as a folder) or a glob of keys, read as the local files would be.

An input path is resolved once (``io.locate``: a ``Located``, its files, label and kind);
``open_source`` takes its files and kind, never expanding or kinding the path again.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Iterator, Protocol, Sequence, TypeVar

import numpy as np
import polars as pl
import pyarrow as pa

from ..errors import EngineError, first_line
from ..parallel import read_ahead
from . import remote
from .csvfile import (DATETIME, KIND_TYPES, CsvOptions, cast_text, check_header, check_structure, csv_pieces,
                      join_kinds, kind_of, not_a_value, readable_csv, reads_as, typed_from_text)
from .labelled import convert
from .locate import Located, locate
from .memory import from_memory, input_kind
from .schema import (FolderSchema, adapt, adapt_lazy, check_reconciled, reconcile_parquet, unreadable_column,
                     unsupported_field)
from .tempfiles import input_label


ProfileT = TypeVar("ProfileT")


class Source(Protocol):
    """What the passes read an input through: ``TableSource`` (what ``open_source``
    gives), ``engine.cluster.RangeSource`` (a range of a Parquet input's row groups, on
    a Dask worker), and ``engine.encode.EncodedSource`` (another source's columns
    encoded: categories as numbers).

    Chunks come in input order as ``(row offset, frame)`` or ``(row offset, array)``
    (float64, C-contiguous, nulls as NaN), at most ``chunk_rows`` rows each;
    ``columns`` None means all. ``prefetch``: a background thread reads the next chunk
    while the caller works on this one; ``native``: a Parquet input's columns through
    Polars' own reader (columns of any type)."""

    @property
    def label(self) -> str:
        """Names the input in messages."""
        ...

    @property
    def kind(self) -> str:
        """``"parquet"``, ``"csv"``, ``"frame"`` (in memory), or an encoding source's own."""
        ...

    @property
    def paths(self) -> tuple[str, ...]:
        """The files behind the input (none for an in-memory table)."""
        ...

    @property
    def base(self) -> "Source":
        """The source whose files a chunk reads: this one, or the one an encoding source
        reads (its columns and kind size the chunks: ``engine.budget``)."""
        ...

    @property
    def columns(self) -> list[str]: ...

    @property
    def schema(self) -> pl.Schema: ...

    def count_rows(self) -> int: ...

    def bounded(self, piece_bytes: int | None) -> "Source":
        """This source read at most about ``piece_bytes`` bytes at a time (a CSV's
        pieces, ``TableSource.bounded``); unchanged where that does not apply."""
        ...

    def adjust_profile(self, profile: ProfileT) -> ProfileT:
        """The profile the passes standardize with, from the one measured on the columns
        (``passes.profile.profile_columns``): the same profile, but for an encoding whose
        distance has its own scales (``engine.encode.mixed``)."""
        ...

    def iter_frames(self, columns: Sequence[str] | None, chunk_rows: int, prefetch: bool = False,
                    native: bool = False) -> Iterator[tuple[int, pl.DataFrame]]: ...

    def iter_arrays(self, columns: Sequence[str], chunk_rows: int,
                    prefetch: bool = False) -> Iterator[tuple[int, np.ndarray]]: ...


class Expander(Protocol):
    def expand_columns(self, C: np.ndarray, used: np.ndarray, out: np.ndarray) -> np.ndarray:
        """The encoded columns ``used`` (indices) of the compact columns ``C`` (QIs, n),
        column-major, written into ``out`` (encoded columns, at least n); returns
        ``out[:, :n]``."""
        ...


class CodedSource(Source, Protocol):
    """A source of mixed-type QIs (``engine.encode.EncodedSource``) that also hands out
    each QI as one compact column (numbers, category codes): what a spill store with
    ``expand`` holds (``engine.io.spill``), which ``mixed`` expands to the encoded columns."""

    @property
    def mixed(self) -> Expander: ...

    def iter_codes(self, chunk_rows: int, prefetch: bool = False) -> Iterator[tuple[int, pl.DataFrame]]: ...


@dataclass
class TableSource:
    """A lazily scanned table (a ``Source``).

    ``paths`` lists the files behind it (empty for in-memory frames); ``label``
    names it in messages.

    CSV: ``columns`` come from the header; nothing is typed until asked. A caller
    that knows its QIs calls ``with_types`` (QIs Float64; the other columns as the
    file's text, or typed from the whole file); ``schema`` of an untyped CSV source
    infers every column's type from the whole file (one pass) and from then on
    ``lazy`` reads with those types (before, ``lazy`` reads text: ask ``schema``
    first). ``close`` removes a transcoded copy.
    """

    lazy: pl.LazyFrame
    label: str
    paths: tuple[str, ...] = ()
    kind: str = "frame"  # "parquet" or "csv" for files
    _schema: pl.Schema | None = None
    # CSV only (see ``open_source``): how to read, the UTF-8 files read (temporaries for a
    # .gz or another encoding, removed by ``close``), the header, the columns read as Float64
    csv: CsvOptions | None = None
    _readable: tuple[str, ...] = ()
    _names: tuple[str, ...] | None = None
    _temps: list = field(default_factory=list)
    floats: tuple[tuple[str, object], ...] = ()  # (column, type): the columns parsed as numbers, dates, Booleans
    # Parquet files: their reconciled schema (``engine.io.schema``); every frame read is cast to it
    folder: FolderSchema | None = None
    # CSV: how ``lazy`` was built from the files (``_scan``'s nulls and keywords, the casts
    # after it), to build the same reader over pieces of the files (``bounded``)
    _recipe: tuple = (True, (("infer_schema", False),), ())
    # CSV: when set, the files are read ``piece_bytes`` bytes at a time (``bounded``)
    piece_bytes: int | None = None
    # the input's Arrow schema (a Parquet file's, a pyarrow table's, a pandas frame's), with
    # its metadata: a Parquet output keeps its columns' types (``io.schema.ArrowTarget``)
    arrow: pa.Schema | None = None
    # columns left out (``without``: ``--drop``): never read, never written
    dropped: tuple[str, ...] = ()

    @property
    def schema(self) -> pl.Schema:
        if self._schema is None:
            if self.kind == "csv":  # types inferred from the whole file (nothing typed yet)
                typed = self.with_types({})
                self._schema, self.lazy = typed._schema, typed.lazy
                return self._schema
            try:
                self._schema = self.lazy.collect_schema()
            except Exception as exc:  # corrupt files surface here
                raise EngineError(f"cannot read {self.label}: {first_line(exc)}") from None
        return self._schema

    @property
    def columns(self) -> list[str]:
        if self._names is not None:
            return [c for c in self._names if c not in self.dropped]
        return list(self.schema.names())

    @property
    def _header(self) -> list[str]:
        """A CSV's columns as its files hold them (the dropped ones too: the reader's schema)."""
        return list(self._names) if self._names is not None else self.columns

    def without(self, names: Sequence[str]) -> "TableSource":
        """This source without the columns ``names`` (``--drop``: never read, never
        written; the others as they were, in their order); a name not among the
        columns is refused naming it."""
        names = tuple(dict.fromkeys(names or ()))
        if not names:
            return self
        cols = set(self.columns)
        for c in names:
            if c not in cols:
                raise EngineError(f"drop (--drop): column {c!r} not found in {self.label}")
        schema = None if self._schema is None else pl.Schema({c: t for c, t in self._schema.items() if c not in names})
        return replace(self, lazy=self.lazy.drop(list(names)), _schema=schema, dropped=self.dropped + names)

    @property
    def base(self) -> "TableSource":
        return self

    def adjust_profile(self, profile: ProfileT) -> ProfileT:
        """The profile as measured (``Source.adjust_profile``)."""
        return profile

    # --- CSV -------------------------------------------------------------------------

    def text_head(self, columns: Sequence[str], rows: int) -> pl.DataFrame:
        """A CSV input's first ``rows`` rows of ``columns``, every value as its text (the
        null values as nulls): how its QIs look before they are typed."""
        text = pl.Schema({c: pl.String for c in self._header})
        return self._scan(schema=text).select(list(columns)).head(rows).collect()

    def _scan(self, nulls: bool = True, data: bytes | None = None, **kw) -> pl.LazyFrame:
        o = self.csv or CsvOptions()
        files = list(self._readable)
        try:
            lf = pl.scan_csv(data if data is not None else files if len(files) > 1 else files[0],
                             separator=o.separator,
                             null_values=(list(o.null_values) or None) if nulls else None,
                             encoding="utf8-lossy" if o.encoding == "utf8-lossy" else "utf8", **kw)
            return lf.drop(list(self.dropped)) if self.dropped else lf
        except Exception as exc:
            raise EngineError(f"cannot read {self.label}: {first_line(exc)}") from None

    def _infer(self, columns: Sequence[str]) -> dict:
        """The types of ``columns`` from every value in the file (streamed a chunk at a
        time over the text, so memory stays at one chunk), never from the first rows.

        Rules (the missing values left out): Int64 when every value is an integer that
        fits Int64 (``-7``, ``+3``, ``007``); Float64 when every value is a number
        (``2.5``, ``1e3``, ``inf``, ``NaN``) and none an integer too wide for Int64;
        Boolean when every value is ``true`` or ``false`` in any case; otherwise, and
        for a column with no value, String (a text such as `` 7`` with a space, or
        ``18446744073709551616``, keeps every character). The same casts then read the
        column, so a column never fails to read as its inferred type."""
        state: dict = {c: None for c in columns}
        if not state:
            return {}
        text = pl.Schema({c: pl.String for c in self._header})
        lf = self._scan(schema=text).select(list(columns))
        if self.piece_bytes:
            batches = (p.select(list(columns)).collect() for p in
                       self._pieces(lambda data: self._scan(data=data, schema=text)))
        else:
            batches = lf.collect_batches(chunk_size=200_000, maintain_order=False)
        try:
            for batch in batches:
                for c in columns:
                    if state[c] == "str":
                        continue
                    v = batch.get_column(c).drop_nulls()
                    if v.len():
                        state[c] = join_kinds(state[c], kind_of(v))
                if all(k == "str" for k in state.values()):
                    break
        except Exception as exc:
            raise EngineError(f"cannot read {self.label}: {first_line(exc)}") from None
        return {c: KIND_TYPES[k] for c, k in state.items()}

    def with_types(self, types: dict | None = None, text: bool = False, parse: bool = True) -> "TableSource":
        """A CSV source read with fixed column types: the columns of ``types`` with those
        types (``pl.Float64`` for numeric QIs: a value that is not a number is then an
        error naming its column and row); every other column as text, exactly as in the
        file, when ``text`` (pass-through to a CSV output), else with its type inferred
        from the whole file (``_infer``). ``parse``: the columns of ``types`` are parsed
        by the CSV reader; else (types that came from ``_infer``) cast from the text, as
        the inference did. Other sources: unchanged."""
        if self.kind != "csv":
            return self
        types = {c: dt for c, dt in (types or {}).items() if c in set(self.columns)}
        # the columns the reader parses (a value that does not parse: ``_diagnose``)
        floats = tuple((c, dt) for c, dt in types.items()
                       if parse and dt in (pl.Float64, pl.Date, pl.Boolean, DATETIME))
        nulls = list(self.csv.null_values) if self.csv is not None else []
        if text:
            # the null values are missing in the typed columns only: the text columns keep
            # them verbatim (an "NA" passes through as "NA")
            native = {c: dt for c, dt in types.items() if parse and not nulls}
            scan = pl.Schema({c: native.get(c, pl.String) for c in self._header})
            lazy = self._scan(nulls=False, schema=scan)
            exprs = [(typed_from_text(c, dt, nulls) if parse else cast_text(c, dt, nulls))
                     for c, dt in types.items() if c not in native]
            schema = pl.Schema({c: types.get(c, pl.String) for c in self.columns})
        else:
            inferred = self._infer([c for c in self.columns if c not in types])
            native = {c: dt for c, dt in types.items() if parse}
            scan = pl.Schema({c: native.get(c, pl.String) for c in self._header})
            lazy = self._scan(schema=scan)
            cast = {**{c: dt for c, dt in types.items() if not parse}, **inferred}
            exprs = [cast_text(c, dt, []) for c, dt in cast.items() if dt != pl.String]
            schema = pl.Schema({c: types.get(c, inferred.get(c)) for c in self.columns})
        if exprs:
            lazy = lazy.with_columns(exprs)
        recipe = (not text, (("schema", scan),), tuple(exprs))
        return replace(self, lazy=lazy, _schema=schema, floats=floats, _recipe=recipe)

    def bounded(self, piece_bytes: int | None) -> "TableSource":
        """This source, its CSV files read ``piece_bytes`` bytes at a time (cut at the
        end of a record) instead of by Polars' streaming reader, whose memory grows
        with the file (about half of it: 330 MiB for a 571 MB file) and whose row count
        maps the whole file: memory then stays at about one piece, whatever the file's
        size (``--memory-limit``). The same reader, types and casts parse each piece,
        so the frames are the same. Other sources, or None: unchanged."""
        if self.kind != "csv" or not piece_bytes:
            return self
        return replace(self, piece_bytes=int(piece_bytes))

    def _pieces(self, lazy_of=None) -> Iterator[pl.LazyFrame]:
        """The files as pieces of about ``piece_bytes`` bytes, each a LazyFrame read as
        ``lazy`` reads the files (``lazy_of(piece bytes)``, default the ``_recipe``)."""
        nulls, kw, exprs = self._recipe
        if lazy_of is None:
            def lazy_of(data):
                lf = self._scan(nulls, data=data, **dict(kw))
                return lf.with_columns(list(exprs)) if exprs else lf
        for path in self._readable:
            try:
                fh = open(path, "rb")
            except OSError as exc:
                raise EngineError(f"cannot read {self.label}: {exc.strerror or exc}") from None
            with fh:
                for piece in csv_pieces(fh, self.piece_bytes):
                    yield lazy_of(piece)

    def text_view(self) -> "TableSource":
        """A CSV source with every column as text (``with_types(text=True)``)."""
        return self.with_types({}, text=True)

    def close(self) -> None:
        """Remove the temporary files behind this source (a transcoded or decompressed CSV)."""
        while self._temps:
            path = self._temps.pop()
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            except OSError:  # pragma: no cover - logged by nobody: best effort
                pass

    def __enter__(self) -> "TableSource":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _diagnose(self, columns) -> EngineError | None:
        """After a CSV parse error: the first value of a typed column (a QI read as a
        number, a date or a Boolean) that does not read as its type, as one line naming
        the column and the row (rows counted from 1)."""
        typed = dict(self.floats)
        cols = [c for c in (list(typed) if columns is None else columns) if c in typed]
        if not cols:
            return None
        nulls = list(self.csv.null_values) if self.csv is not None else []
        raw = self._scan(nulls=False, schema=pl.Schema({c: pl.String for c in self._header})).select(cols)
        offset = 0
        try:
            for batch in raw.collect_batches(chunk_size=100_000, maintain_order=True):
                for c in cols:
                    s = batch.get_column(c)
                    bad = s.is_not_null() & ~s.is_in(nulls) & ~reads_as(s, typed[c])
                    if bad.any():
                        i = int(bad.arg_max())
                        return not_a_value(c, s[i], offset + i + 1, self.label, typed[c])
                offset += batch.height
        except Exception:
            return None
        return None

    def check_reconciled(self, used: Sequence[str], passthrough: Sequence[str] = ()) -> None:
        """Parquet files that disagree: refuse when a column in ``used`` is missing
        from a file, or a column in ``passthrough`` would not convert exactly
        (``engine.io.schema.check_reconciled``). Nothing to check otherwise."""
        check_reconciled(self.folder, self.label, used, passthrough)

    def count_rows(self) -> int:
        try:
            if self.kind == "csv" and self.piece_bytes:
                return sum(int(p.select(pl.len()).collect().item()) for p in self._pieces())
            return int(self.lazy.select(pl.len()).collect().item())
        except Exception as exc:
            raise EngineError(f"cannot read {self.label}: {first_line(exc)}") from None

    def collect(self, columns: Sequence[str] | None = None) -> pl.DataFrame:
        lf = self.lazy if columns is None else self.lazy.select(list(columns))
        try:
            return lf.collect()
        except Exception as exc:
            found = self._diagnose(columns) if self.kind == "csv" else None
            if found is not None:
                raise found from None
            raise EngineError(f"cannot read {self.label}: {first_line(exc)}") from None

    def _parquet_batches(self, columns, chunk_rows, native=False):
        """Parquet files read a chunk at a time, with nothing read ahead, so memory stays
        at about one chunk (Polars' streaming batches buffer more).

        A few numeric columns (the QIs): pyarrow's batches. Every column, or
        ``native`` (the write pass): Polars' native reader on slices of whole row
        groups (a row group above ``chunk_rows`` is cut, so nothing is decoded
        twice): it decodes strings and wide tables with about half pyarrow's CPU
        time, and needs no Arrow conversion."""
        schema = self.schema
        want = pl.Schema({c: schema[c] for c in (schema.names() if columns is None else columns)})
        for f in self.paths:
            have = self.folder.file_schema(f) if self.folder is not None else schema
            # the file's columns among those asked for (a file without any of them:
            # its first column, for the row count); ``adapt`` adds the others as nulls,
            # casts, and puts them in the order asked for
            read = [c for c in want.names() if c in have] or list(have.names())[:1]
            if columns is not None and not native:
                pf = remote.parquet_file(f)
                frames = (_arrow_frame(b) for b in pf.iter_batches(batch_size=chunk_rows, columns=read,
                                                                     use_threads=True))
            else:
                frames = row_group_slices(f, chunk_rows, None if len(read) == len(have) else read)
            for frame in frames:
                yield adapt(frame, want)

    def iter_frames(self, columns: Sequence[str] | None, chunk_rows: int,
                    prefetch: bool = False, native: bool = False) -> Iterator[tuple[int, pl.DataFrame]]:
        """Yield ``(row_offset, frame)`` in input order, each at most ``chunk_rows`` rows.

        With ``prefetch``, a background thread reads the next chunk while the caller
        works on this one (one chunk more in memory). ``native``: Parquet columns
        through Polars' reader (see ``_parquet_batches``), for columns of any type."""
        if prefetch:
            return read_ahead(self.iter_frames(columns, chunk_rows, native=native))
        return self._frames(columns, chunk_rows, native)

    def _frames(self, columns, chunk_rows, native=False):
        lf = self.lazy if columns is None else self.lazy.select(list(columns))
        offset = 0
        if self.kind == "parquet":
            batches = self._parquet_batches(None if columns is None else list(columns), chunk_rows, native)
        elif self.kind == "csv" and self.piece_bytes:
            batches = (p.collect() if columns is None else p.select(list(columns)).collect()
                       for p in self._pieces())
        else:
            batches = lf.collect_batches(chunk_size=chunk_rows, maintain_order=True)
        try:
            for batch in batches:
                # the engine may hand out batches larger than asked: cut them
                for start in range(0, batch.height, chunk_rows):
                    part = batch.slice(start, chunk_rows)
                    if part.height:
                        yield offset, part
                        offset += part.height
        except EngineError:
            raise
        except Exception as exc:
            found = self._diagnose(columns) if self.kind == "csv" else None
            if found is not None:
                raise found from None
            raise EngineError(f"cannot read {self.label}: {first_line(exc)}") from None

    def dictionary_columns(self, text: Sequence[str]) -> bool:
        """Whether ``iter_dictionary`` can read the String columns ``text``: a Parquet
        input whose every file holds them as String."""
        if self.kind != "parquet" or not self.paths or not text:
            return False
        for f in self.paths:
            have = self.folder.file_schema(f) if self.folder is not None else self.schema
            if any(c not in have or have[c] != pl.String or self.schema[c] != pl.String for c in text):
                return False
        return True

    def iter_dictionary(self, columns: Sequence[str], text: Sequence[str], chunk_rows: int):
        """Yield ``(row_offset, frame, arrays)`` in input order, at most ``chunk_rows`` rows
        each: ``frame`` the ``columns`` but ``text`` (as ``iter_frames`` gives them; None
        when there are none), ``arrays`` each ``text`` column as a pyarrow DictionaryArray
        (the Parquet pages' dictionary indices, no string decoded a row: a caller that maps
        a few distinct texts to codes reads them once a chunk). Only when
        ``dictionary_columns(text)``."""
        text = list(text)
        others = [c for c in columns if c not in set(text)]
        want = pl.Schema({c: self.schema[c] for c in others})
        offset = 0
        try:
            for f in self.paths:
                have = self.folder.file_schema(f) if self.folder is not None else self.schema
                own = [c for c in others if c in have]  # (``adapt`` adds the others as nulls)
                pf = remote.parquet_file(f, read_dictionary=text)
                for b in pf.iter_batches(batch_size=chunk_rows, columns=own + text, use_threads=True):
                    frame = adapt(_arrow_frame(b.select(own)), want) if others else None
                    yield offset, frame, {c: b.column(c) for c in text}
                    offset += b.num_rows
        except EngineError:
            raise
        except Exception as exc:
            raise EngineError(f"cannot read {self.label}: {first_line(exc)}") from None

    def iter_arrays(self, columns: Sequence[str], chunk_rows: int,
                    prefetch: bool = False) -> Iterator[tuple[int, np.ndarray]]:
        """Yield ``(row_offset, array)``: contiguous float64 (rows, len(columns)); nulls as
        NaN. ``prefetch`` as in ``iter_frames`` (the conversion runs ahead too)."""
        cols = list(columns)
        arrays = ((offset, frame_to_array(frame, cols)) for offset, frame in self.iter_frames(cols, chunk_rows))
        return read_ahead(arrays) if prefetch else arrays


def _arrow_frame(batch) -> pl.DataFrame:
    """``pl.from_arrow``, keeping the batch's column names (it renames "" to column_0)."""
    frame = pl.from_arrow(batch)
    names = list(batch.schema.names)
    if frame.columns != names:
        frame.columns = names
    return frame


def row_group_slices(path: str, chunk_rows: int, columns=None, groups=None) -> Iterator[pl.DataFrame]:
    """The file's rows (``groups``: only row groups ``g0 <= g < g1``) in slices of whole row
    groups of at most ``chunk_rows`` rows (a larger row group is cut)."""
    md = remote.read_metadata(path)
    bounds = [0]
    for g in range(md.num_row_groups):
        bounds.append(bounds[-1] + md.row_group(g).num_rows)
    g0, g1 = (0, md.num_row_groups) if groups is None else groups
    lf = pl.scan_parquet(path, storage_options=remote.polars_options(path))
    lf = lf if columns is None else lf.select(columns)
    start, b, stop = bounds[g0], g0, bounds[g1]
    while start < stop:
        while b < g1 and bounds[b + 1] <= start + chunk_rows:
            b += 1
        end = bounds[b] if bounds[b] > start else min(start + chunk_rows, stop)
        yield lf.slice(start, end - start).collect()
        start = end


def numeric_values(s: pl.Series) -> np.ndarray:
    """A numeric column as NumPy values to copy into float64: the column's own buffer
    (no Polars cast, so one pass less) when it is an integer or float column without
    nulls, else cast to Float64 with nulls as NaN. NumPy's conversion to float64
    rounds as Polars' cast does."""
    if s.null_count() or not (s.dtype.is_integer() or s.dtype.is_float()) or s.dtype in _NO_NUMPY:
        s = s.cast(pl.Float64)
    return s.to_numpy()


# no NumPy buffer (128-bit integers), or one NumPy converts slowly: Polars' cast to
# Float64 instead (correctly rounded, as for Int64 values above 2^53)
_NO_NUMPY = (pl.Int128, pl.UInt128, pl.Float16)


def frame_to_array(frame: pl.DataFrame, columns: Sequence[str]) -> np.ndarray:
    """Columns of ``frame`` as a C-contiguous float64 array, nulls as NaN."""
    out = np.empty((frame.height, len(columns)), dtype=np.float64)
    for j, c in enumerate(columns):
        out[:, j] = numeric_values(frame.get_column(c))
    return out


def open_csv(files: list[str], text: str, opts: CsvOptions | None, tmp_dir) -> TableSource:
    """A CSV source: columns named from the header, nothing typed or inferred yet (see
    ``TableSource.with_types`` and ``TableSource.schema``)."""
    o = opts or CsvOptions()
    temps: list = []
    try:
        readable = []
        for f in files:
            r = readable_csv(f, o, tmp_dir, temps)
            check_header(r, f if len(files) > 1 else text, o)
            check_structure(r, f if len(files) > 1 else text, o)
            readable.append(r)
        src = TableSource(pl.LazyFrame(), text, tuple(files), "csv", csv=opts, _readable=tuple(readable), _temps=temps)
        src.lazy = src._scan(infer_schema=False)
        try:
            names = src.lazy.collect_schema().names()
        except Exception as exc:
            raise EngineError(f"cannot read {text}: {first_line(exc)}") from None
        src._names = tuple(names)
        return src
    except BaseException:
        for t in temps:
            try:
                os.unlink(t)
            except OSError:
                pass
        raise


def open_parquet(files: list[str], text: str) -> TableSource:
    """Parquet files, their schemas reconciled (``engine.io.schema``)."""
    try:
        folder = reconcile_parquet(files, text)
        if folder.uniform:
            lf = pl.scan_parquet(files if len(files) > 1 else files[0],
                                 storage_options=remote.polars_options(files[0]))
        else:  # each file cast to the reconciled schema, in its column order
            lf = pl.concat([adapt_lazy(pl.scan_parquet(f, storage_options=remote.polars_options(f)),
                                       folder.schema, folder.file_schema(f))
                            for f in files], how="vertical")
    except EngineError:
        raise
    except Exception as exc:
        why = next((w for w in map(unreadable_column, files) if w), None) or first_line(exc)
        raise EngineError(f"cannot read {text}: {why}") from None
    arrow = _parquet_arrow(files[0])
    bad = unsupported_field(arrow) if arrow is not None else None
    if bad is not None:
        raise EngineError(f"cannot read {text}: {bad}")
    return TableSource(lf, text, tuple(files), "parquet", folder.schema, folder=folder, arrow=arrow)


def open_stat(files: list[str], text: str, tmp_dir) -> TableSource:
    """An SPSS, Stata or SAS file or an IPUMS codebook: read from a private Parquet copy
    (``engine.io.labelled.convert``, in ``tmp_dir``), which ``close`` removes."""
    if len(files) > 1:
        raise EngineError(f"input {text}: one SPSS, Stata or SAS file or IPUMS codebook at a time")
    tmp = convert(files[0], text, tmp_dir)
    try:
        src = open_parquet([tmp], text)
    except BaseException:
        os.unlink(tmp)
        raise
    return replace(src, label=text, _temps=[tmp])


def _parquet_arrow(path: str) -> pa.Schema | None:
    """The Arrow schema of a Parquet input (its first file's; metadata included)."""
    try:
        return remote.read_schema(path)
    except Exception:
        return None


def open_source(data, *, names: Sequence[str] | None = None, csv: CsvOptions | None = None,
                tmp_dir=None) -> TableSource:
    """Open ``data`` lazily. ``names`` labels the columns of a NumPy array. ``csv``: how
    to read a CSV input (refused for any other input); ``tmp_dir``: where a .csv.gz or a
    non-UTF-8 CSV is transcoded (the caller closes the source to remove it)."""
    if isinstance(data, TableSource):
        return data
    data = locate(data)
    if csv is not None:
        is_csv = isinstance(data, Located) and data.kind == "csv"
        if not is_csv:
            what = input_label(data) if isinstance(data, (str, os.PathLike)) else f"a {type(data).__name__}"
            raise EngineError(f"{', '.join(csv.given())}: CSV options apply to CSV input only, not {what}")
    if isinstance(data, pl.LazyFrame):
        return TableSource(data, "input frame")
    if isinstance(data, pl.DataFrame):
        return TableSource(data.lazy(), "input frame")
    kind = input_kind(data)
    if kind is not None:
        lazy, label, arrow = from_memory(data, kind)
        return TableSource(lazy, label, arrow=arrow)
    if isinstance(data, np.ndarray):
        if data.ndim != 2:
            raise EngineError(f"a NumPy input must be 2-D, got {data.ndim}-D")
        if not ((np.issubdtype(data.dtype, np.integer) or np.issubdtype(data.dtype, np.floating))
                and data.dtype.itemsize <= 8 or data.dtype == np.bool_):
            raise EngineError(f"a NumPy input must hold integers or floats of up to 64 bits, got dtype {data.dtype}")
        cols = list(names) if names is not None else [f"x{j}" for j in range(data.shape[1])]
        if len(cols) != data.shape[1]:
            raise EngineError(f"qi names {len(cols)} columns but the array has {data.shape[1]}")
        try:
            # NaN is NumPy's missing value (it has no other): missing, as a pandas NaN is
            # (a null); in the inputs that have nulls (Polars, Arrow, Parquet, CSV) NaN is an error
            frame = pl.DataFrame([pl.Series(c, np.asarray(data[:, j]), nan_to_null=True) for j, c in enumerate(cols)])
        except Exception as exc:
            raise EngineError(f"cannot convert the NumPy array ({data.dtype}): {first_line(exc)}") from None
        return TableSource(frame.lazy(), "input array")
    if isinstance(data, Located):
        files, text, kind = list(data.files), data.label, data.kind  # (label: a copy of the standard input, "stdin")
        if kind == "csv":
            return open_csv(files, text, csv, tmp_dir)
        if kind == "stat":
            return open_stat(files, text, tmp_dir)
        return open_parquet(files, text)
    raise EngineError(f"unsupported input type {type(data).__name__}")
