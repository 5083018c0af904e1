"""Open any supported input lazily and hand out chunks of columns as NumPy arrays.

Supported: a CSV file, a Parquet file, a directory of Parquet files, a glob of
Parquet (or CSV) files, a Polars LazyFrame or DataFrame, a pandas DataFrame, a
pyarrow Table, RecordBatch or dataset, a 2-D NumPy array.
Nothing is read until a pass asks for columns; a pass reads only its columns.
"""

from __future__ import annotations

import glob as _glob
import os
import queue
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
import polars as pl

from ..errors import EngineError
from .schema import FolderSchema, adapt, adapt_lazy, check_reconciled, reconcile_parquet

_PARQUET = (".parquet", ".pq", ".parq")
_CSV = (".csv", ".tsv", ".txt")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


@dataclass
class Source:
    """A lazily scanned table.

    ``paths`` lists the files behind it (empty for in-memory frames); ``label``
    names it in messages.
    """

    lazy: pl.LazyFrame
    label: str
    paths: tuple[str, ...] = ()
    kind: str = "frame"  # "parquet" or "csv" for files
    _schema: pl.Schema | None = None
    # Parquet files: their reconciled schema (``engine.io.schema``); every frame read is cast to it
    folder: FolderSchema | None = None

    @property
    def schema(self) -> pl.Schema:
        if self._schema is None:
            try:
                self._schema = self.lazy.collect_schema()
            except Exception as exc:  # corrupt files surface here
                raise EngineError(f"cannot read {self.label}: {_first_line(exc)}") from None
        return self._schema

    @property
    def columns(self) -> list[str]:
        return list(self.schema.names())

    def check_reconciled(self, used: Sequence[str], passthrough: Sequence[str] = ()) -> None:
        """Parquet files that disagree: refuse when a column in ``used`` is missing
        from a file, or a column in ``passthrough`` would not convert exactly
        (``engine.io.schema.check_reconciled``). Nothing to check otherwise."""
        check_reconciled(self.folder, self.label, used, passthrough)

    def count_rows(self) -> int:
        try:
            return int(self.lazy.select(pl.len()).collect().item())
        except Exception as exc:
            raise EngineError(f"cannot read {self.label}: {_first_line(exc)}") from None

    def collect(self, columns: Sequence[str] | None = None) -> pl.DataFrame:
        lf = self.lazy if columns is None else self.lazy.select(list(columns))
        try:
            return lf.collect()
        except Exception as exc:
            raise EngineError(f"cannot read {self.label}: {_first_line(exc)}") from None

    def _parquet_batches(self, columns, chunk_rows, native=False):
        """Parquet files read a chunk at a time, with nothing read ahead, so memory stays
        at about one chunk (Polars' streaming batches buffer more).

        A few numeric columns (the QIs): pyarrow's batches. Every column, or
        ``native`` (the write pass): Polars' native reader on slices of whole row
        groups (a row group above ``chunk_rows`` is cut, so nothing is decoded
        twice): it decodes strings and wide tables with about half pyarrow's CPU
        time, and needs no Arrow conversion."""
        import pyarrow.parquet as pq

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
                frames = (pl.from_arrow(b) for b in pf.iter_batches(batch_size=chunk_rows, columns=read,
                                                                     use_threads=True))
            else:
                frames = _row_group_slices(f, chunk_rows, None if len(read) == len(have) else read)
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
            raise EngineError(f"cannot read {self.label}: {_first_line(exc)}") from None

    def iter_arrays(self, columns: Sequence[str], chunk_rows: int,
                    prefetch: bool = False) -> Iterator[tuple[int, np.ndarray]]:
        """Yield ``(row_offset, array)``: contiguous float64 (rows, len(columns)); nulls as
        NaN. ``prefetch`` as in ``iter_frames`` (the conversion runs ahead too)."""
        cols = list(columns)
        arrays = ((offset, frame_to_array(frame, cols)) for offset, frame in self.iter_frames(cols, chunk_rows))
        return read_ahead(arrays) if prefetch else arrays


def _row_group_slices(path: str, chunk_rows: int, columns=None) -> Iterator[pl.DataFrame]:
    import pyarrow.parquet as pq

    md = pq.read_metadata(path)
    bounds = [0]
    for g in range(md.num_row_groups):
        bounds.append(bounds[-1] + md.row_group(g).num_rows)
    lf = pl.scan_parquet(path) if columns is None else pl.scan_parquet(path).select(columns)
    start, b = 0, 0
    while start < bounds[-1]:
        while b + 1 < len(bounds) and bounds[b + 1] <= start + chunk_rows:
            b += 1
        end = bounds[b] if bounds[b] > start else min(start + chunk_rows, bounds[-1])
        yield lf.slice(start, end - start).collect()
        start = end


def read_ahead(items: Iterator, name: str = "microagg-reader") -> Iterator:
    """The items of ``items``, produced by a background thread one item ahead of the
    consumer (reading and decoding release the GIL, so they overlap the caller's
    work). Its errors are raised in the consumer; when the consumer stops early (an
    error, Ctrl-C), the thread stops at its next item."""
    box: queue.Queue = queue.Queue(maxsize=1)
    stop = threading.Event()

    def put(msg) -> bool:
        while not stop.is_set():
            try:
                box.put(msg, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def run() -> None:
        try:
            for item in items:
                if not put(("item", item)):
                    return
            put(("done", None))
        except BaseException as exc:  # raised in the consumer
            put(("error", exc))

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()

    def consume():
        try:
            while True:
                try:
                    kind, value = box.get(timeout=0.1)  # a timeout keeps Ctrl-C prompt
                except queue.Empty:
                    continue
                if kind == "item":
                    yield value
                elif kind == "error":
                    raise value
                else:
                    return
        finally:
            stop.set()
            thread.join()

    return consume()


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


def _expand_path(text: str) -> list[str]:
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
    if suffix in _PARQUET:
        return "parquet"
    if suffix in _CSV:
        return "csv"
    raise EngineError(f"unsupported input format {suffix or '(none)'!r}: {path} (use .csv or .parquet)")


def input_kind(data) -> str | None:
    """"pandas", "arrow" (a pyarrow Table or RecordBatch), "dataset" (a pyarrow
    dataset) or None (anything else). pandas and pyarrow are not imported: an object
    of theirs exists only if its module was imported already."""
    pd = sys.modules.get("pandas")
    if pd is not None and isinstance(data, pd.DataFrame):
        return "pandas"
    pa = sys.modules.get("pyarrow")
    if pa is not None and isinstance(data, (pa.Table, pa.RecordBatch)):
        return "arrow"
    ds = sys.modules.get("pyarrow.dataset")
    if ds is not None and isinstance(data, ds.Dataset):
        return "dataset"
    return None


def _dates(lf_or_frame, arrow_schema):
    """Arrow ``date64`` columns (Polars: Datetime[ms]) back to dates (Polars Date)."""
    import pyarrow as pa

    d64 = [f.name for f in arrow_schema if pa.types.is_date64(f.type)]
    return lf_or_frame.with_columns(pl.col(d64).cast(pl.Date)) if d64 else lf_or_frame


def _from_pandas(df) -> pl.DataFrame:
    """A pandas DataFrame as Polars (through Arrow: numeric columns without a copy). An
    index other than the default 0, 1, ... becomes columns first (as pandas' own
    ``to_parquet`` keeps it): by its names, or ``index`` (pandas' ``reset_index``)."""
    import pandas as pd

    for c in df.columns:
        if not isinstance(c, str):
            raise EngineError(f"pandas column names must be strings, got {c!r} ({type(c).__name__}); "
                              f"rename them (df.columns = df.columns.astype(str))")
    if df.columns.has_duplicates:
        dup = df.columns[df.columns.duplicated()][0]
        raise EngineError(f"pandas column {dup!r} appears twice; rename one of them")
    idx = df.index
    try:
        if not (isinstance(idx, pd.RangeIndex) and idx.start == 0 and idx.step == 1 and idx.name is None):
            df = df.reset_index()  # refuses an index named as a column
        return pl.from_pandas(df)
    except Exception as exc:
        raise EngineError(f"cannot convert the pandas DataFrame: {_first_line(exc)}") from None


def _from_memory(data, kind: str) -> Source:
    if kind == "pandas":
        return Source(_from_pandas(data).lazy(), "input DataFrame (pandas)")
    try:
        if kind == "arrow":
            frame = _dates(pl.from_arrow(data, rechunk=False), data.schema)
            return Source(frame.lazy(), "input table (pyarrow)")
        lf = _dates(pl.scan_pyarrow_dataset(data), data.schema)
        return Source(lf, "input dataset (pyarrow)")
    except Exception as exc:
        raise EngineError(f"cannot convert the pyarrow {kind}: {_first_line(exc)}") from None


def open_source(data, *, names: Sequence[str] | None = None) -> Source:
    """Open ``data`` lazily. ``names`` labels the columns of a NumPy array."""
    if isinstance(data, Source):
        return data
    if isinstance(data, pl.LazyFrame):
        return Source(data, "input frame")
    if isinstance(data, pl.DataFrame):
        return Source(data.lazy(), "input frame")
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
            raise EngineError(f"cannot convert the NumPy array ({data.dtype}): {_first_line(exc)}") from None
        return Source(frame.lazy(), "input array")
    if isinstance(data, (str, os.PathLike)):
        text = os.fspath(data)
        files = _expand_path(text)
        kinds = {_kind(f) for f in files}
        if len(kinds) > 1:
            raise EngineError(f"input mixes CSV and Parquet files: {text}")
        kind = kinds.pop()
        folder = None
        try:
            if kind == "parquet":
                folder = reconcile_parquet(files, text)
                if folder.uniform:
                    lf = pl.scan_parquet(files if len(files) > 1 else files[0])
                else:  # each file cast to the reconciled schema, in its column order
                    lf = pl.concat([adapt_lazy(pl.scan_parquet(f), folder.schema, folder.file_schema(f))
                                    for f in files], how="vertical")
            else:
                lf = pl.scan_csv(files if len(files) > 1 else files[0], infer_schema_length=10000)
        except EngineError:
            raise
        except Exception as exc:
            raise EngineError(f"cannot read {text}: {_first_line(exc)}") from None
        return Source(lf, text, tuple(files), kind, folder.schema if folder else None, folder)
    raise EngineError(f"unsupported input type {type(data).__name__}")
