"""The input cut into ranges of whole Parquet row groups: what one partition or write
task reads (``RangeSource``), on a worker, at the paths the client made absolute."""

from __future__ import annotations

import dataclasses
import os
from typing import Iterator, Sequence

import numpy as np
import polars as pl

from ..errors import EngineError, first_line
from ..io.schema import adapt
from ..io import remote
from ..io.source import ProfileT, frame_to_array, row_group_slices
from ..parallel import read_ahead


def row_groups(source) -> list[tuple[str, int, int, int]]:
    """Each row group of a Parquet input: ``(path, index, rows, compressed bytes)``, the
    path made absolute here, on the client (a worker runs in a folder of its own; an
    object storage URL as it is)."""
    out = []
    for f in source.paths:
        md = remote.read_metadata(f)
        path = f if remote.is_remote(f) else os.path.abspath(f)
        for g in range(md.num_row_groups):
            rg = md.row_group(g)
            out.append((path, g, rg.num_rows, sum(rg.column(c).total_compressed_size for c in range(rg.num_columns))))
    return out


def cut_ranges(source, groups, count: int) -> list["RangeSource"]:
    """``source`` (a Parquet input, its ``row_groups``) cut into ``count`` ranges of whole
    row groups, of about as many rows each (fewer when there are fewer row groups)."""
    folder = source.folder
    if folder is not None:  # (its files' schemas looked up by the paths of ``row_groups``)
        folder = dataclasses.replace(folder, files=tuple(
            f if remote.is_remote(f) else os.path.abspath(f) for f in folder.files))
    target = -(-sum(g[2] for g in groups) // max(count, 1))
    out, cur, first, rows = [], [], 0, 0
    for f, g, n, _ in groups:
        if cur and cur[-1][0] == f and cur[-1][2] == g:
            cur[-1] = (f, cur[-1][1], g + 1)
        else:
            cur.append((f, g, g + 1))
        rows += n
        if rows >= target:
            out.append(RangeSource(source.label, source.schema, folder, tuple(cur), first, rows))
            first, cur, rows = first + rows, [], 0
    if cur or not out:
        out.append(RangeSource(source.label, source.schema, folder, tuple(cur), first, rows))
    return out


@dataclasses.dataclass(frozen=True)
class RangeSource:
    """A range of whole row groups of a Parquet input, read on a worker by the
    partition and write passes (an ``io.source.Source``; offsets are the input's row
    numbers)."""

    label: str
    schema: pl.Schema
    folder: object                # io.schema.FolderSchema or None
    pieces: tuple                 # (path, first row group, end row group)
    first: int                    # the input's row number of the range's first row
    rows: int
    kind = "parquet"

    @property
    def paths(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(path for path, _, _ in self.pieces))

    @property
    def base(self) -> "RangeSource":
        return self

    @property
    def columns(self) -> list[str]:
        return list(self.schema.names())

    def count_rows(self) -> int:
        return self.rows

    def bounded(self, piece_bytes: int | None) -> "RangeSource":
        return self  # (whole row groups: the pieces are bounded already)

    def adjust_profile(self, profile: ProfileT) -> ProfileT:
        return profile

    def iter_frames(self, columns, chunk_rows: int, prefetch: bool = False,
                    native: bool = False) -> Iterator[tuple[int, pl.DataFrame]]:
        frames = self._frames(columns, chunk_rows)
        return read_ahead(frames) if prefetch else frames

    def iter_arrays(self, columns: Sequence[str], chunk_rows: int,
                    prefetch: bool = False) -> Iterator[tuple[int, np.ndarray]]:
        cols = list(columns)
        arrays = ((offset, frame_to_array(frame, cols)) for offset, frame in self.iter_frames(cols, chunk_rows))
        return read_ahead(arrays) if prefetch else arrays

    def _have(self, path: str) -> pl.Schema:
        return self.folder.file_schema(path) if self.folder is not None else self.schema

    def dictionary_columns(self, text: Sequence[str]) -> bool:
        """``io.source.TableSource.dictionary_columns``: every file of the range holds the
        String columns ``text`` as String (an ``encode.source.EncodedSource`` over the
        range then reads them as the pages' dictionary indices)."""
        if not self.pieces or not text:
            return False
        return all(c in self._have(p) and self._have(p)[c] == pl.String and self.schema[c] == pl.String
                   for p in self.paths for c in text)

    def iter_dictionary(self, columns: Sequence[str], text: Sequence[str], chunk_rows: int):
        """``io.source.TableSource.iter_dictionary`` over the range's row groups:
        ``(offset, frame of the other columns or None, {text column: DictionaryArray})``."""
        text = list(text)
        others = [c for c in columns if c not in set(text)]
        want = pl.Schema({c: self.schema[c] for c in others})
        offset = self.first
        try:
            for path, g0, g1 in self.pieces:
                own = [c for c in others if c in self._have(path)]  # (``adapt`` adds the others as nulls)
                pf = remote.parquet_file(path, read_dictionary=text)
                for b in pf.iter_batches(batch_size=chunk_rows, row_groups=range(g0, g1), columns=own + text,
                                         use_threads=True):
                    frame = None
                    if others:
                        frame = pl.DataFrame([pl.Series(c, b.column(c)) for c in own])  # (names kept as read)
                        frame = adapt(frame, want)
                    yield offset, frame, {c: b.column(c) for c in text}
                    offset += b.num_rows
        except EngineError:
            raise
        except Exception as exc:
            raise EngineError(f"cannot read {self.label}: {first_line(exc)}") from None

    def _frames(self, columns, chunk_rows):
        want = pl.Schema({c: self.schema[c] for c in (self.schema.names() if columns is None else columns)})
        offset = self.first
        try:
            for path, g0, g1 in self.pieces:
                have = self.folder.file_schema(path) if self.folder is not None else self.schema
                read = [c for c in want.names() if c in have] or list(have.names())[:1]
                for frame in row_group_slices(path, chunk_rows, None if len(read) == len(have) else read, (g0, g1)):
                    frame = adapt(frame, want)
                    yield offset, frame
                    offset += frame.height
        except EngineError:
            raise
        except Exception as exc:
            raise EngineError(f"cannot read {self.label}: {first_line(exc)}") from None
