"""The encoded source: the input as the grouping passes see it, categories as numbers.

``EncodedSource(base, encoding)`` reads ``base`` (an ``io.source.Source``) and hands
out, chunk by chunk, the columns of an *encoding*:

* ``ValueCodes`` (the range methods): the columns as read, each categorical one (a
  value dictionary of the dictionary pass) as its codes (Float64);
* ``encode.mixed.Mixed`` (the MDAV family's mixed-type QIs): the encoded columns of
  the mixed distance (numbers, dates' epoch values, ranks, one-hot columns), and
  its compact columns (one a QI, categories as codes: ``iter_codes``).

An encoding has: ``schema`` (the columns it hands out, Float64 or the type read),
``reads(names)`` (``(base columns, native)``: what to read for ``names``, and whether
through Polars' own Parquet reader), ``encoded(frame, offset, names)`` (the frame of
``names``),
``compact_reads()`` (``(base columns, String columns that may be read as Parquet
dictionary indices, native)``), ``compact(frame, offset, arrays=None)`` and
``adjust(profile)`` (the measured profile -> the one the passes standardize with).

The source has every method the passes call on a source (``iter_frames``,
``iter_arrays``, ``count_rows``, ``bounded``, ``adjust_profile``, ``base``, ...), so
the coordinator and the passes read it as any other.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from ..io.source import frame_to_array
from ..parallel import read_ahead
from .dictionary import value_codes


class EncodedSource:
    """``base`` read through ``encoding`` (module docstring). Other columns, and the
    write pass, use ``base``."""

    kind = "encoded"

    def __init__(self, base, encoding):
        self.base = base
        self.encoding = encoding

    @property
    def mixed(self):
        """The encoding (``passes.partition`` expands the compact columns with it)."""
        return self.encoding

    @property
    def label(self) -> str:
        return self.base.label

    @property
    def paths(self):
        return self.base.paths

    @property
    def columns(self) -> list[str]:
        return list(self.encoding.schema.names())

    @property
    def schema(self) -> pl.Schema:
        return self.encoding.schema

    def count_rows(self) -> int:
        return self.base.count_rows()

    def bounded(self, piece_bytes) -> "EncodedSource":
        return EncodedSource(self.base.bounded(piece_bytes), self.encoding)

    def adjust_profile(self, profile):
        """The measured profile of the columns -> the one the passes standardize with
        (``passes.profile.profile_columns`` and the coordinator call it)."""
        return self.encoding.adjust(profile)

    def iter_frames(self, columns, chunk_rows: int, prefetch: bool = False, native: bool = False):
        """``(offset, frame)`` of the encoded ``columns`` (None: all), in input order.
        ``native`` is the encoding's to decide (``reads``)."""
        names = self.columns if columns is None else list(columns)
        read, native = self.encoding.reads(names)
        frames = ((offset, self.encoding.encoded(frame, offset, names))
                  for offset, frame in self.base.iter_frames(read, chunk_rows, native=native))
        return read_ahead(frames) if prefetch else frames

    def iter_codes(self, chunk_rows: int, prefetch: bool = False):
        """``(offset, frame)`` of the compact columns (``encoding.compact``). String
        columns of a Parquet input: their codes from the pages' dictionary indices
        (``Source.iter_dictionary``), no text decoded a row."""
        read, text, native = self.encoding.compact_reads()
        if self.base.dictionary_columns(text):
            frames = ((offset, self.encoding.compact(frame, offset, arrays))
                      for offset, frame, arrays in self.base.iter_dictionary(read, text, chunk_rows))
        else:
            frames = ((offset, self.encoding.compact(frame, offset))
                      for offset, frame in self.base.iter_frames(read, chunk_rows, native=native))
        return read_ahead(frames) if prefetch else frames

    def iter_arrays(self, columns, chunk_rows: int, prefetch: bool = False):
        """``(offset, array)``: the encoded ``columns`` as contiguous float64 (rows, columns)."""
        cols = list(columns)
        arrays = ((offset, frame_to_array(frame, cols)) for offset, frame in self.iter_frames(cols, chunk_rows))
        return read_ahead(arrays) if prefetch else arrays


class ValueCodes:
    """The encoding of the range methods: ``columns`` as read, those with a value
    dictionary (``dicts``: column -> its categories, ``dictionary.learn(order="value")``)
    as their codes (Float64: small integers, exact), so that ``profile_columns`` and
    the partition pass read them as numbers."""

    def __init__(self, base_schema, columns, dicts: dict):
        self.dicts = dicts
        self.schema = pl.Schema({c: pl.Float64 if c in dicts else base_schema[c] for c in columns})
        self._codes = {c: pl.Series("code", np.arange(len(v), dtype=np.float64)) for c, v in dicts.items()}

    def reads(self, names) -> tuple[list, bool]:
        return list(names), False

    def encoded(self, frame: pl.DataFrame, offset: int, names=None) -> pl.DataFrame:
        enc = [value_codes(self.dicts[c], frame.get_column(c), self._codes[c])
               for c in frame.columns if c in self.dicts]
        return frame.with_columns(enc) if enc else frame

    def compact_reads(self) -> tuple[list, list, bool]:
        return list(self.schema.names()), [], False

    def compact(self, frame: pl.DataFrame, offset: int, arrays: dict | None = None) -> pl.DataFrame:
        return self.encoded(frame, offset)

    def adjust(self, profile):
        return profile
