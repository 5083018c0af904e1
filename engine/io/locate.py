"""An input path resolved once: its files, label and kind (``locate`` -> ``Located``).

A path may name a file, a folder (its Parquet files at any depth, else its CSV files),
a glob, or an object storage object, prefix or glob (``engine.io.remote``). ``locate``
expands it once; the ``Located`` carries the files, how messages name the input, its
kind and whether it is on object storage, and is still the path for whatever names it
(``os.fspath``, ``str``: messages, a labelled file's declarations). ``io.source.open_source``
and ``io.sink.input_files`` take its files, so a release (its checks, the budget's CSV
check, the run's open, the sink's checks, the risk step) never expands or kinds the path
again (``tests/test_resolve_once.py`` counts it). Each local file's size and modification
time are stamped, so that a plan whose input changed since it was made is refused
(``coordinator.run_plan``).
"""

from __future__ import annotations

import functools
import glob as _glob
import os
from pathlib import Path

from ..errors import EngineError
from . import remote
from .csvfile import GZIP
from .labelled import stat_input
from .tempfiles import input_label

_PARQUET = (".parquet", ".pq", ".parq")
_CSV = (".csv", ".tsv", ".txt")


class Located(os.PathLike):
    """An input path resolved once (``locate``; the module docstring): ``files`` (expanded
    from a folder, a glob or an object storage prefix), ``label`` (how messages name it),
    ``kind`` ("csv", "parquet" or "stat": taken when first asked, so that a refusal of the
    destination still comes before one of the format), ``remote``; ``stamp``: each local
    file's size and modification time when it was resolved (``changed``)."""

    def __init__(self, text: str):
        self.text = text
        self.files = tuple(expand_path(text))
        self.label = input_label(text)
        self.remote = remote.is_remote(text)
        self.stamp = self._stamp()

    def __fspath__(self) -> str:
        return self.text

    def __str__(self) -> str:  # (the path as given, wherever a message or a report shows it)
        return self.text

    def __repr__(self) -> str:
        return f"Located({self.text!r}, {len(self.files)} files)"

    @functools.cached_property
    def kind(self) -> str:
        kinds = {_kind(f) for f in self.files}
        if len(kinds) > 1:
            raise EngineError(f"input mixes CSV and Parquet files: {self.label}")
        return kinds.pop()

    def _stamp(self) -> tuple:
        if self.remote:  # (object storage: not stamped; an object changed meanwhile is read as it is then)
            return ()
        try:
            return tuple((f, st.st_size, st.st_mtime_ns) for f, st in ((f, os.stat(f)) for f in self.files))
        except OSError:
            return ()

    def changed(self) -> str | None:
        """The first file changed (or gone) since it was resolved, or None."""
        for f, size, mtime in self.stamp:
            try:
                st = os.stat(f)
            except OSError:
                return f
            if (st.st_size, st.st_mtime_ns) != (size, mtime):
                return f
        return None


def locate(data):
    """``data`` resolved once: a path (or URL, folder, glob) as a ``Located``; a
    ``Located`` or an in-memory table as it is."""
    if isinstance(data, (str, os.PathLike)) and not isinstance(data, Located):
        return Located(os.fspath(data))
    return data


def expand_path(text: str) -> list[str]:
    """The files behind an input path (or object storage URL: ``engine.io.remote``): the
    file itself; a folder's Parquet files (any depth, sorted), or if it has none its CSV
    files; the files a glob matches (sorted). One line when there are none."""
    if remote.is_remote(text):
        return remote.expand(text, folder_files)
    p = Path(text)
    if p.is_dir():
        files = folder_files(sorted(str(f) for f in p.rglob("*") if f.is_file()))
        if not files:
            raise EngineError(f"input folder has no Parquet files: {text} (nor CSV files)")
        return files
    if p.exists():
        return [str(p)]
    if any(ch in text for ch in "*?["):
        files = sorted(f for f in _glob.glob(text, recursive=True) if os.path.isfile(f))
        if not files:
            raise EngineError(f"input glob matches no files: {text}")
        return files
    raise EngineError(f"input not found: {text}")


_FOLDER_CSV = (".csv", ".tsv", ".csv.gz", ".tsv.gz")


def folder_files(names: list[str]) -> list[str]:
    """Of a folder's files (sorted), those read as its table: the Parquet files, else
    the CSV files (``.csv``, ``.tsv``, gzipped or not: parts written by a Spark job, say)."""
    parquet = [f for f in names if f.lower().endswith(_PARQUET)]
    return parquet or [f for f in names if f.lower().endswith(_FOLDER_CSV)]


def _kind(path: str) -> str:
    suffix = Path(path).suffix.lower()
    if suffix == GZIP and Path(path[:-len(GZIP)]).suffix.lower() in _CSV:
        return "csv"
    if suffix in _PARQUET:
        return "parquet"
    if suffix in _CSV:
        return "csv"
    if stat_input(path):
        return "stat"
    raise EngineError(f"unsupported input format {suffix or '(none)'!r}: {path} (use .csv, .parquet, .sav, .zsav, "
                      f".por, .dta, .sas7bdat, .xpt or an IPUMS codebook .xml)")
