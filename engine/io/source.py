"""Open any supported input lazily and hand out chunks of columns as NumPy arrays.

Supported: a CSV file, a Parquet file, a directory of Parquet files, a glob of
Parquet (or CSV) files, a Polars LazyFrame or DataFrame, a pandas DataFrame, a
pyarrow Table, RecordBatch or dataset, a 2-D NumPy array.
Nothing is read until a pass asks for columns; a pass reads only its columns.

CSV (``CsvOptions``: separator, null values, encoding; ``.csv.gz``): types are never
guessed from the first rows. QIs are read as Float64 (a value that is not a number
is an error naming its column and row); the other columns as the file's text for a
CSV output (byte-faithful pass-through), or typed from the whole file. A duplicate
header name is refused.
"""

from __future__ import annotations

import codecs
import csv as _csv
import json
import glob as _glob
import gzip
import os
import shutil
import sys
import tempfile
import zlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterator, Protocol, Sequence, TypeVar

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import EngineError, first_line
from ..parallel import read_ahead
from .schema import FolderSchema, adapt, adapt_lazy, check_reconciled, reconcile_parquet, unreadable_column, unsupported_field
from .tempfiles import input_label, os_reason, private_file

_PARQUET = (".parquet", ".pq", ".parq")
_CSV = (".csv", ".tsv", ".txt")
_GZIP = ".gz"
_POLARS_ENCODINGS = {"utf8": "utf8", "utf-8": "utf8", "utf_8": "utf8", "utf8-lossy": "utf8-lossy",
                     "utf-8-lossy": "utf8-lossy"}
_TRANSCODE_PIECE = 1 << 20  # characters per piece of a streamed transcode


@dataclass(frozen=True)
class CsvOptions:
    """How CSV inputs are read (``--separator``, ``--null-values``, ``--encoding``).

    ``separator``: one single-byte character (``\\t`` or ``tab`` for a tab).
    ``null_values``: texts read as missing (besides the empty field), e.g. ``("NA",)``.
    ``encoding``: ``utf8`` (default), ``utf8-lossy`` (invalid bytes become U+FFFD), or
    any codec Python knows (``latin-1``, ``cp1252``, ``utf-16``, ...): such a file, and
    any ``.csv.gz``, is first transcoded / decompressed, streamed, to a private UTF-8
    temporary file that is removed when the source is closed (end of run, error,
    Ctrl-C). Outputs are always UTF-8, comma-separated.
    """

    separator: str = ","
    null_values: tuple[str, ...] = ()
    encoding: str = "utf8"
    explicit: tuple[str, ...] = field(default=(), compare=False)  # the options given, as CLI flags

    @classmethod
    def make(cls, separator=None, null_values=None, encoding=None) -> "CsvOptions | None":
        """Validated options, or None when none is given (the defaults)."""
        if separator is None and null_values is None and encoding is None:
            return None
        sep = "," if separator is None else separator
        if isinstance(sep, str) and sep.lower() in ("\\t", "tab"):
            sep = "\t"
        if not isinstance(sep, str) or len(sep) != 1 or len(sep.encode()) != 1 or sep in "\"\r\n":
            raise EngineError(f"separator (--separator) must be one single-byte character other than a quote "
                              f"or a line break, got {separator!r}")
        if null_values is None:
            nulls: tuple[str, ...] = ()
        elif isinstance(null_values, str):
            nulls = tuple(v for v in null_values.split(","))
        else:
            try:
                nulls = tuple(null_values)
            except TypeError:
                raise EngineError(f"null values (--null-values) must be texts, got {null_values!r}") from None
        for v in nulls:
            if not isinstance(v, str) or not v:
                raise EngineError(f"null values (--null-values) must be non-empty texts, got {v!r} "
                                  f"(an empty field is always missing)")
        enc = "utf8" if encoding is None else encoding
        if not isinstance(enc, str):
            raise EngineError(f"encoding (--encoding) must be a name such as utf8 or latin-1, got {encoding!r}")
        if enc.lower() in _POLARS_ENCODINGS:
            enc = _POLARS_ENCODINGS[enc.lower()]
        else:
            try:
                info = codecs.lookup(enc)
            except LookupError:
                raise EngineError(f"encoding (--encoding) {encoding!r} is unknown (use utf8, utf8-lossy, "
                                  f"latin-1, cp1252, ...)") from None
            enc = "utf8" if info.name == "utf-8" else info.name
        explicit = tuple(flag for flag, v in (("--separator", separator), ("--null-values", null_values),
                                              ("--encoding", encoding)) if v is not None)
        return cls(sep, nulls, enc, explicit)

    @property
    def transcode(self) -> bool:
        return self.encoding not in ("utf8", "utf8-lossy")

    def given(self) -> list[str]:
        """The options given (even at their default values), as CLI flags (for messages)."""
        return list(self.explicit) or ["--separator", "--null-values", "--encoding"]


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
            return list(self._names)
        return list(self.schema.names())

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
        text = pl.Schema({c: pl.String for c in self.columns})
        return self._scan(schema=text).select(list(columns)).head(rows).collect()

    def _scan(self, nulls: bool = True, data: bytes | None = None, **kw) -> pl.LazyFrame:
        o = self.csv or CsvOptions()
        files = list(self._readable)
        try:
            return pl.scan_csv(data if data is not None else files if len(files) > 1 else files[0],
                               separator=o.separator,
                               null_values=(list(o.null_values) or None) if nulls else None,
                               encoding="utf8-lossy" if o.encoding == "utf8-lossy" else "utf8", **kw)
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
        text = pl.Schema({c: pl.String for c in self.columns})
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
                        state[c] = _join_kinds(state[c], _kind_of(v))
                if all(k == "str" for k in state.values()):
                    break
        except Exception as exc:
            raise EngineError(f"cannot read {self.label}: {first_line(exc)}") from None
        return {c: _KIND_TYPES[k] for c, k in state.items()}

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
        floats = tuple((c, dt) for c, dt in types.items() if parse and dt in (pl.Float64, pl.Date, pl.Boolean))
        nulls = list(self.csv.null_values) if self.csv is not None else []
        if text:
            # the null values are missing in the typed columns only: the text columns keep
            # them verbatim (an "NA" passes through as "NA")
            native = {c: dt for c, dt in types.items() if parse and not nulls}
            scan = pl.Schema({c: native.get(c, pl.String) for c in self.columns})
            lazy = self._scan(nulls=False, schema=scan)
            exprs = [(_typed_from_text(c, dt, nulls) if parse else _cast_text(c, dt, nulls))
                     for c, dt in types.items() if c not in native]
            schema = pl.Schema({c: types.get(c, pl.String) for c in self.columns})
        else:
            inferred = self._infer([c for c in self.columns if c not in types])
            native = {c: dt for c, dt in types.items() if parse}
            scan = pl.Schema({c: native.get(c, pl.String) for c in self.columns})
            lazy = self._scan(schema=scan)
            cast = {**{c: dt for c, dt in types.items() if not parse}, **inferred}
            exprs = [_cast_text(c, dt, []) for c, dt in cast.items() if dt != pl.String]
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
                for piece in _csv_pieces(fh, self.piece_bytes):
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
        raw = self._scan(nulls=False, schema=pl.Schema({c: pl.String for c in self.columns})).select(cols)
        offset = 0
        try:
            for batch in raw.collect_batches(chunk_size=100_000, maintain_order=True):
                for c in cols:
                    s = batch.get_column(c)
                    bad = s.is_not_null() & ~s.is_in(nulls) & ~_reads_as(s, typed[c])
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
                pf = pq.ParquetFile(f)
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
                pf = pq.ParquetFile(f, read_dictionary=text)
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


def _csv_pieces(fh, size: int) -> Iterator[bytes]:
    """A CSV file's records in pieces of about ``size`` bytes, each the header line and
    whole records: cut after a newline preceded by an even number of double quotes
    (not inside a quoted field; a doubled quote inside one counts twice). A record
    longer than ``size`` makes a longer piece."""
    header = b""
    carry = b""
    while True:
        buf = fh.read(size)
        data = carry + buf if carry else buf
        if not buf:
            if data.strip(b"\r\n"):
                yield header + data if header else data
            return
        a = np.frombuffer(data, np.uint8)
        nl = np.flatnonzero(a == 10)
        if nl.size:
            q = np.flatnonzero(a == 34)
            even = nl[(np.searchsorted(q, nl) & 1) == 0]
        else:
            even = nl
        if even.size == 0:
            carry = data
            continue
        if not header:  # the first record is the header
            cut = int(even[0]) + 1
            header, data = data[:cut], data[cut:]
            even = even[1:] - cut
            if even.size == 0:
                carry = data
                continue
        cut = int(even[-1]) + 1
        if cut:
            yield header + data[:cut]
        carry = data[cut:]


def _arrow_frame(batch) -> pl.DataFrame:
    """``pl.from_arrow``, keeping the batch's column names (it renames "" to column_0)."""
    frame = pl.from_arrow(batch)
    names = list(batch.schema.names)
    if frame.columns != names:
        frame.columns = names
    return frame


_KIND_TYPES = {None: pl.String, "int": pl.Int64, "float": pl.Float64, "bool": pl.Boolean, "str": pl.String}
_INTEGER = r"^[+-]?[0-9]+$"


def _kind_of(v: pl.Series) -> str:
    """The narrowest kind of the non-missing texts ``v``: int, float, bool or str."""
    if v.cast(pl.Int64, strict=False).null_count() == 0:
        return "int"
    if v.cast(pl.Float64, strict=False).null_count() == 0:
        wide = v.str.contains(_INTEGER) & v.cast(pl.Int64, strict=False).is_null()
        return "str" if wide.any() else "float"  # an integer wider than Int64 keeps its digits
    if v.str.to_lowercase().is_in(["true", "false"]).all():
        return "bool"
    return "str"


def _join_kinds(a, b) -> str:
    if a is None or a == b:
        return b
    if {a, b} == {"int", "float"}:
        return "float"
    return "str"


def _cast_text(c: str, dtype, nulls: list[str]) -> pl.Expr:
    """Column ``c`` read as text, its null values as null, converted to ``dtype`` as
    ``TableSource._infer`` tested it (Boolean: ``true``/``false`` in any case)."""
    col = pl.when(pl.col(c).is_in(nulls)).then(None).otherwise(pl.col(c)) if nulls else pl.col(c)
    if dtype == pl.String:
        return col.alias(c)
    if dtype == pl.Boolean:
        return pl.when(col.is_null()).then(None).otherwise(col.str.to_lowercase() == "true").alias(c)
    return col.cast(dtype).alias(c)


def _typed_from_text(c: str, dtype, nulls: list[str]) -> pl.Expr:
    """Column ``c`` read as text, its null values as null, cast to ``dtype`` (strictly:
    a text that is not a ``dtype`` is an error, which ``TableSource._diagnose`` locates)."""
    col = pl.when(pl.col(c).is_in(nulls)).then(None).otherwise(pl.col(c))
    if dtype == pl.String:
        return col.alias(c)
    if dtype == pl.Boolean:
        low = col.str.to_lowercase()
        return (pl.when(low == "true").then(True).when(low == "false").then(False)
                .otherwise(col.cast(pl.Boolean))).alias(c)
    return col.cast(dtype).alias(c)  # (no space stripped: as the reader without null values)


def _reads_as(s: pl.Series, dtype) -> pl.Series:
    """Whether each text of ``s`` reads as ``dtype`` (Float64, Date, Boolean) as the CSV
    reader reads it (a number with a space around it does not)."""
    if dtype == pl.Date:
        return s.str.to_date("%Y-%m-%d", strict=False).is_not_null()
    if dtype == pl.Boolean:
        return s.str.to_lowercase().is_in(["true", "false"])
    return s.cast(pl.Float64, strict=False).is_not_null()


def not_a_value(column: str, value, row: int, label: str, dtype=pl.Float64, hint: str = "") -> EngineError:
    """The one-line error for a QI value of a CSV input that is not of its column's type."""
    what = {pl.Date: ("a date", "a date (YYYY-MM-DD)"), pl.Boolean: ("Boolean", "true or false")}.get(
        dtype, ("numeric", "a number"))
    return EngineError(f"column {column!r} is not {what[0]}: {value!r} at row {row} (rows counted from 1) "
                       f"of {label} is not {what[1]}{hint}")


def row_group_slices(path: str, chunk_rows: int, columns=None, groups=None) -> Iterator[pl.DataFrame]:
    """The file's rows (``groups``: only row groups ``g0 <= g < g1``) in slices of whole row
    groups of at most ``chunk_rows`` rows (a larger row group is cut)."""
    md = pq.read_metadata(path)
    bounds = [0]
    for g in range(md.num_row_groups):
        bounds.append(bounds[-1] + md.row_group(g).num_rows)
    g0, g1 = (0, md.num_row_groups) if groups is None else groups
    lf = pl.scan_parquet(path) if columns is None else pl.scan_parquet(path).select(columns)
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


def expand_path(text: str) -> list[str]:
    p = Path(text)
    if p.is_dir():
        files = sorted(str(f) for f in p.rglob("*") if f.is_file() and f.suffix.lower() in _PARQUET)
        if not files:
            raise EngineError(f"input folder has no Parquet files: {text}")
        return files
    if p.exists():
        return [str(p)]
    if any(ch in text for ch in "*?["):
        files = sorted(f for f in _glob.glob(text, recursive=True) if os.path.isfile(f))
        if not files:
            raise EngineError(f"input glob matches no files: {text}")
        return files
    raise EngineError(f"input not found: {text}")


def _kind(path: str) -> str:
    suffix = Path(path).suffix.lower()
    if suffix == _GZIP and Path(path[:-len(_GZIP)]).suffix.lower() in _CSV:
        return "csv"
    if suffix in _PARQUET:
        return "parquet"
    if suffix in _CSV:
        return "csv"
    raise EngineError(f"unsupported input format {suffix or '(none)'!r}: {path} (use .csv or .parquet)")


def csv_options(separator=None, null_values=None, encoding=None) -> CsvOptions | None:
    """The API's ``separator``, ``null_values``, ``encoding`` keywords, validated."""
    return CsvOptions.make(separator=separator, null_values=null_values, encoding=encoding)


def _readable_csv(path: str, opts: CsvOptions, tmp_dir, temps: list) -> str:
    """``path`` itself, or for a ``.gz`` file or an encoding other than UTF-8 a private
    UTF-8 temporary copy (streamed a piece at a time: memory stays bounded), created in
    ``tmp_dir`` (default: the system's temporary folder) and listed in ``temps``."""
    gz = path.lower().endswith(_GZIP)
    if not gz and not opts.transcode:
        return path
    folder = os.fspath(tmp_dir) if tmp_dir is not None else tempfile.gettempdir()
    tmp = private_file(folder, Path(path).name)
    temps.append(tmp)
    what = "decompress" if not opts.transcode else f"decode ({opts.encoding})"
    try:
        raw = gzip.open(path, "rb") if gz else open(path, "rb")
        with raw, open(tmp, "wb") as out:
            if not opts.transcode:
                shutil.copyfileobj(raw, out, _TRANSCODE_PIECE)
            else:
                decoder = codecs.getincrementaldecoder(opts.encoding)("strict")
                done = 0
                while True:
                    piece = raw.read(_TRANSCODE_PIECE)
                    try:
                        text = decoder.decode(piece, final=not piece)
                    except UnicodeError as exc:  # the offset of the bad bytes, when the codec says
                        at = f" at byte {done + exc.start:,}" if isinstance(getattr(exc, "start", None), int) else ""
                        raise EngineError(f"cannot {what} {path}: {getattr(exc, 'reason', None) or exc}{at}") from None
                    out.write(text.encode("utf-8"))
                    done += len(piece)
                    if not piece:
                        break
    except EngineError:
        raise
    except (OSError, EOFError, zlib.error) as exc:
        if isinstance(exc, OSError) and exc.filename == tmp:
            raise EngineError(f"cannot write a temporary copy of {path} in {folder}: {os_reason(exc)}") from None
        raise EngineError(f"cannot {what} {path}: {first_line(exc)}") from None
    return tmp


def _check_header(path: str, label: str, opts: CsvOptions) -> None:
    """Refuse a header that names a column twice (Polars would rename it x_duplicated_0)."""
    try:
        with open(path, newline="", encoding="utf-8", errors="replace") as fh:
            header = next(_csv.reader(fh, delimiter=opts.separator, quotechar='"'), [])
    except (OSError, _csv.Error) as exc:
        raise EngineError(f"cannot read {label}: {first_line(exc)}") from None
    if header and header[0].startswith("\ufeff"):
        header[0] = header[0][1:]
    seen = set()
    for c in header:
        if c in seen:
            raise EngineError(f"column {c!r} appears twice in the header of {label}")
        seen.add(c)


_SCAN_PIECE = 16 << 20  # bytes of a CSV read at a time by ``check_structure``


def check_structure(path: str, label: str, opts: CsvOptions) -> None:
    """Refuse, before any work, a CSV file the reader would misread, in one line naming
    the line (physical lines counted from 1, the header is line 1):

    * a quoted field that is never closed (an open quote on line 1 swallows the file);
    * a quote inside an unquoted field (``a"b``: quote such a field and double the quote);
    * line ends that are a carriage return alone (old Mac files: the file is one line);
    * a record with fewer fields than the header (a missing field would be read as a
      missing value, silently) or more (the reader's own message names no line).

    Streamed a piece at a time (numpy over the bytes: memory stays at one piece)."""
    sep = ord(opts.separator)
    parity = 0        # quotes seen so far, mod 2 (1: inside a quoted field)
    lines = 0         # newlines before this piece
    fields = 0        # separators outside quotes in the record being read
    header = None     # the header's fields
    start_line = 1    # the line the record being read starts on
    blank = True      # the record being read has no byte yet (but a CR)
    prev = 10         # the byte before this piece (a newline: the start of the file)
    pending = None    # a closing quote at the end of the previous piece (its line)
    open_line = 0     # the line of the last opening quote
    seen_nl = seen_cr = False
    try:
        fh = open(path, "rb")
    except OSError as exc:
        raise EngineError(f"cannot read {label}: {exc.strerror or exc}") from None

    def bad(line, what):
        return EngineError(f"cannot read {label}: line {line:,}: {what}")

    with fh:
        while True:
            piece = fh.read(_SCAN_PIECE)
            if lines == 0 and piece.startswith(b"\xef\xbb\xbf") and prev == 10 and header is None:
                piece = piece[3:]
            if not piece:
                break
            a = np.frombuffer(piece, np.uint8)
            nl = np.flatnonzero(a == 10)
            seen_nl |= nl.size > 0
            seen_cr |= bool((a == 13).any())
            if not seen_nl and seen_cr and lines == 0:
                raise bad(1, "its line ends are carriage returns alone (\\r): convert them to \\n or \\r\\n")
            q = np.flatnonzero(a == 34)
            if pending is not None:
                if a[0] not in (sep, 10, 13, 34):
                    raise bad(pending, 'a quote inside a quoted field must be doubled ("")')
                pending = None
            if q.size:
                idx = (parity + np.arange(q.size)) & 1  # 0: opens a quoted field, 1: closes it
                before = np.where(q > 0, a[np.maximum(q - 1, 0)], prev)
                opening = q[idx == 0]
                ob = before[idx == 0]
                wrong = (ob != sep) & (ob != 10) & (ob != 13) & (ob != 34)
                if wrong.any():
                    at = int(opening[np.argmax(wrong)])
                    raise bad(lines + 1 + int(np.searchsorted(nl, at)),
                              'a quote inside an unquoted field (quote the field and double the quote: "a""b")')
                closing = q[idx == 1]
                inner = closing[closing < a.size - 1]
                after = a[inner + 1]
                wrong = (after != sep) & (after != 10) & (after != 13) & (after != 34)
                if wrong.any():
                    at = int(inner[np.argmax(wrong)])
                    raise bad(lines + 1 + int(np.searchsorted(nl, at)),
                              'a quote inside a quoted field must be doubled ("")')
                if closing.size and closing[-1] == a.size - 1:
                    pending = lines + 1 + int(np.searchsorted(nl, a.size - 1))
                if opening.size:
                    open_line = lines + 1 + int(np.searchsorted(nl, int(opening[-1])))
            # records end at newlines outside quotes; fields are separators outside quotes
            s = np.flatnonzero(a == sep)
            if q.size or parity:
                ends = nl[((parity + np.searchsorted(q, nl)) & 1) == 0]
                s = s[((parity + np.searchsorted(q, s)) & 1) == 0]
            else:  # (no quote: every newline ends a record, every separator is one)
                ends = nl
            counts = np.diff(np.searchsorted(s, ends), prepend=0)
            if ends.size:
                counts[0] += fields
                starts = np.concatenate(([-1], ends[:-1])) + 1
                width = ends - starts  # bytes before the newline
                empty = (width == 0) | ((width == 1) & (a[np.maximum(ends - 1, 0)] == 13))
                empty[0] = empty[0] and blank
                start_lines = lines + 1 + np.searchsorted(nl, starts)
                start_lines[0] = start_line
                n_fields = counts + 1
                if header is None:
                    header = int(n_fields[0])
                    n_fields[0] = header
                off = (n_fields != header) & ~empty
                if off.any():
                    i = int(np.argmax(off))
                    raise bad(int(start_lines[i]), _field_count(int(n_fields[i]), header))
                last = int(ends[-1])
                fields = int(s.size - np.searchsorted(s, last))
                blank = last + 1 == a.size
                start_line = lines + 1 + int(np.searchsorted(nl, last + 1))
            else:
                fields += int(s.size)
                blank = blank and a.size == int((a == 13).sum())
            parity = (parity + q.size) & 1
            lines += int(nl.size)
            prev = int(a[-1])
    if parity:
        raise bad(open_line, "a quoted field opened here is never closed")
    if not blank and header is not None and fields + 1 != header:
        raise bad(start_line, _field_count(fields + 1, header))


def _field_count(n: int, header: int) -> str:
    what = "fewer" if n < header else "more"
    return (f"{n} field{'s' if n != 1 else ''}, the header has {header} ({what} fields than the header: "
            f"a field or a separator is missing or extra)")


def open_csv(files: list[str], text: str, opts: CsvOptions | None, tmp_dir) -> TableSource:
    """A CSV source: columns named from the header, nothing typed or inferred yet (see
    ``TableSource.with_types`` and ``TableSource.schema``)."""
    o = opts or CsvOptions()
    temps: list = []
    try:
        readable = []
        for f in files:
            r = _readable_csv(f, o, tmp_dir, temps)
            _check_header(r, f if len(files) > 1 else text, o)
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


def _from_memory(data, kind: str) -> TableSource:
    if kind == "pandas":
        frame, arrow = _from_pandas(data)
        return TableSource(frame.lazy(), "input DataFrame (pandas)", arrow=arrow)
    bad = unsupported_field(data.schema)
    if bad is not None:
        raise EngineError(f"cannot convert the pyarrow {kind}: {bad}")
    try:
        if kind == "arrow":
            frame = _dates(pl.from_arrow(_categories_of_numbers(data), rechunk=False), data.schema)
            return TableSource(frame.lazy(), "input table (pyarrow)", arrow=data.schema)
        lf = _dates(pl.scan_pyarrow_dataset(data), data.schema)
        return TableSource(lf, "input dataset (pyarrow)", arrow=data.schema)
    except Exception as exc:
        raise EngineError(f"cannot convert the pyarrow {kind}: {first_line(exc)}") from None


def _parquet_arrow(path: str) -> pa.Schema | None:
    """The Arrow schema of a Parquet input (its first file's; metadata included)."""
    try:
        return pq.read_schema(path)
    except Exception:
        return None


def open_source(data, *, names: Sequence[str] | None = None, csv: CsvOptions | None = None,
                tmp_dir=None) -> TableSource:
    """Open ``data`` lazily. ``names`` labels the columns of a NumPy array. ``csv``: how
    to read a CSV input (refused for any other input); ``tmp_dir``: where a .csv.gz or a
    non-UTF-8 CSV is transcoded (the caller closes the source to remove it)."""
    if isinstance(data, TableSource):
        return data
    if csv is not None:
        is_csv = isinstance(data, (str, os.PathLike)) and all(_kind(f) == "csv" for f in expand_path(os.fspath(data)))
        if not is_csv:
            what = input_label(data) if isinstance(data, (str, os.PathLike)) else f"a {type(data).__name__}"
            raise EngineError(f"{', '.join(csv.given())}: CSV options apply to CSV input only, not {what}")
    if isinstance(data, pl.LazyFrame):
        return TableSource(data, "input frame")
    if isinstance(data, pl.DataFrame):
        return TableSource(data.lazy(), "input frame")
    kind = input_kind(data)
    if kind is not None:
        return _from_memory(data, kind)
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
            frame = pl.DataFrame({c: np.asarray(data[:, j]) for j, c in enumerate(cols)})
        except Exception as exc:
            raise EngineError(f"cannot convert the NumPy array ({data.dtype}): {first_line(exc)}") from None
        return TableSource(frame.lazy(), "input array")
    if isinstance(data, (str, os.PathLike)):
        files = expand_path(os.fspath(data))
        text = input_label(data)  # (a copy of the standard input: "stdin")
        kinds = {_kind(f) for f in files}
        if len(kinds) > 1:
            raise EngineError(f"input mixes CSV and Parquet files: {text}")
        kind = kinds.pop()
        if kind == "csv":
            return open_csv(files, text, csv, tmp_dir)
        try:
            folder = reconcile_parquet(files, text)
            if folder.uniform:
                lf = pl.scan_parquet(files if len(files) > 1 else files[0])
            else:  # each file cast to the reconciled schema, in its column order
                lf = pl.concat([adapt_lazy(pl.scan_parquet(f), folder.schema, folder.file_schema(f))
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
        return TableSource(lf, text, tuple(files), kind, folder.schema, folder=folder, arrow=arrow)
    raise EngineError(f"unsupported input type {type(data).__name__}")
