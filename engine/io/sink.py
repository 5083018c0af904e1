"""Writing results: never half-written, never over the input.

Output goes to a private temporary file beside the destination (or in a given
temporary folder on the same file system) and is renamed into place only when
complete. On any error, or Ctrl-C, the temporary file is removed.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Iterator, Sequence

import polars as pl

from ..errors import EngineError

TMP_SUFFIX = ".microagg-tmp"


def output_format(dest: str | os.PathLike) -> str:
    suffix = Path(dest).suffix.lower()
    if suffix in (".parquet", ".pq", ".parq"):
        return "parquet"
    if suffix in (".csv",):
        return "csv"
    raise EngineError(f"unsupported output format {suffix or '(none)'!r}: {dest} (use .csv or .parquet)")


def check_destination(dest: str | os.PathLike, inputs: Sequence[str] = ()) -> Path:
    """Validate ``dest`` before any work: format known, folder writable, not an input."""
    path = Path(dest)
    output_format(path)
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise EngineError(f"output folder does not exist: {folder}")
    if not os.access(folder, os.W_OK):
        raise EngineError(f"output folder is not writable: {folder}")
    if path.is_dir():
        raise EngineError(f"output is a folder: {path}")
    target = path.resolve()
    for src in inputs:
        if Path(src).resolve() == target:
            raise EngineError(f"output is the input file: {dest}")
    return path


@contextlib.contextmanager
def atomic_output(dest: str | os.PathLike, tmp_dir: str | os.PathLike | None = None) -> Iterator[str]:
    """Yield a private temporary path; rename it to ``dest`` if the block succeeds."""
    path = Path(dest)
    folder = Path(tmp_dir) if tmp_dir is not None else (path.parent if str(path.parent) else Path("."))
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=TMP_SUFFIX, dir=folder)
    except OSError as exc:
        raise EngineError(f"cannot create a temporary file in {folder}: {exc.strerror}") from None
    os.close(fd)  # mkstemp created it with mode 0600
    try:
        yield tmp
        try:
            os.replace(tmp, path)
        except OSError as exc:
            raise EngineError(f"cannot move the result to {path}: {exc.strerror}") from None
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_frame(frame: pl.DataFrame, path: str, fmt: str) -> None:
    """Write a whole frame (the in-memory path); errors become one-line EngineErrors."""
    try:
        if fmt == "parquet":
            frame.write_parquet(path, statistics=False)
        else:
            frame.write_csv(path)
    except OSError as exc:
        raise EngineError(f"cannot write {path}: {exc.strerror or exc}") from None
