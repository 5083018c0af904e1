"""Writing results: never half-written, never over the input.

Output goes to a private temporary file beside the destination (or in a given
temporary folder on the same file system) and is renamed into place only when
complete. On any error, or Ctrl-C, the temporary file is removed.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path
from typing import Iterator, Sequence

import polars as pl

from ..errors import EngineError
from .tempfiles import TMP_SUFFIX, clean_stale, io_errno, os_reason, private_file

__all__ = ["PARQUET_OPTIONS", "TMP_SUFFIX", "atomic_output", "check_destination", "check_tmp_dir", "output_format", "write_frame"]


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
        if folder.exists():
            raise EngineError(f"output folder is not a folder: {folder}")
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


def check_tmp_dir(tmp_dir) -> None:
    """``--tmp-dir`` must be an existing folder: checked before any work."""
    if tmp_dir is not None and not Path(tmp_dir).is_dir():
        what = "is not a folder" if Path(tmp_dir).exists() else "does not exist"
        raise EngineError(f"temporary folder {what}: {tmp_dir}")


def _umask() -> int:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)  # fallback (not thread-safe, hence the /proc read first)
    os.umask(mask)
    return mask


def _same_device(a: Path, b: Path) -> bool:
    try:
        return os.stat(a).st_dev == os.stat(b).st_dev
    except OSError:
        return True  # let mkstemp report the problem


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_output(dest: str | os.PathLike, tmp_dir: str | os.PathLike | None = None) -> Iterator[str]:
    """Yield a private temporary path (mode 0600); if the block succeeds, flush it to disk
    and rename it to ``dest`` (then with the mode of the file it replaces, or the
    umask's). On any error or interrupt the temporary file is removed; an OSError in
    the block (a full disk, say) becomes a one-line EngineError naming ``dest``.

    The temporary file goes to ``tmp_dir`` only if that is on the same file system
    as ``dest`` (a rename cannot cross file systems), otherwise beside ``dest``.
    Temporaries of dead runs in that folder and beside ``dest`` are removed first
    (see ``tempfiles``).
    """
    path = Path(dest)
    parent = path.parent if str(path.parent) else Path(".")
    folder = Path(tmp_dir) if tmp_dir is not None and _same_device(Path(tmp_dir), parent) else parent
    for used in {folder, parent}:  # a killed run may have used either
        clean_stale(used)
    tmp = private_file(folder, path.name)
    try:
        try:
            yield tmp
            try:
                mode = stat.S_IMODE(os.stat(path).st_mode)
            except OSError:
                mode = 0o666 & ~_umask()
            with open(tmp, "rb+") as fh:  # durable before it becomes visible
                os.fsync(fh.fileno())
            os.chmod(tmp, mode)
        except EngineError:
            raise
        except Exception as exc:
            if not (isinstance(exc, OSError) or io_errno(exc)):  # a bug, not the file system
                raise
            where = "" if folder == parent else f" (temporary file in {folder})"
            raise EngineError(f"cannot write {path}{where}: {os_reason(exc)}") from None
        try:
            os.replace(tmp, path)
        except OSError as exc:
            raise EngineError(f"cannot move the result to {path}: {os_reason(exc)}") from None
        _fsync_dir(parent)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


# The Parquet encoding of every output, streamed or whole: zstd level 1 (about 10 %
# faster to write than level 3, about 5 % larger), no column statistics, row groups
# of 65,536 rows (so the bytes do not depend on how the rows were chunked).
PARQUET_OPTIONS = {"compression": "zstd", "compression_level": 1, "statistics": False, "row_group_size": 65_536}


def write_frame(frame: pl.DataFrame, path: str, fmt: str) -> None:
    """Write a whole frame (the in-memory path); errors become one-line EngineErrors."""
    try:
        if fmt == "parquet":
            frame.write_parquet(path, **PARQUET_OPTIONS)
        else:
            frame.write_csv(path)
    except Exception as exc:  # OSError, or Polars' ComputeError quoting one
        if not (isinstance(exc, OSError) or io_errno(exc)):
            raise
        raise EngineError(f"cannot write {path}: {os_reason(exc)}") from None
