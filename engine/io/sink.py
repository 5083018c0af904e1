"""Writing results: never half-written, never over the input.

Output goes to a private temporary file beside the destination (or in a given
temporary folder on the same file system) and is renamed into place only when
complete. On any error, or Ctrl-C, the temporary file is removed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from pathlib import Path
from typing import Iterator, Sequence

import polars as pl

from ..errors import EngineError, check_signals
from .source import TableSource, expand_path, open_csv
from .tempfiles import TMP_SUFFIX, clean_stale, io_errno, os_reason, private_file

__all__ = ["PARQUET_OPTIONS", "TMP_SUFFIX", "CommitGroup", "atomic_output", "check_csv_columns", "check_destination", "check_side_output",
           "check_tmp_dir", "input_files", "output_format", "same_file", "write_frame",
           "written_source"]


def output_format(dest: str | os.PathLike) -> str:
    """"parquet" or "csv" by the name's suffix; "folder" for a name ending in "/" (a
    folder of Parquet part files, written by ``--scheduler`` runs: ``engine.cluster``)."""
    if is_folder_output(dest):
        return "folder"
    suffix = Path(dest).suffix.lower()
    if suffix in (".parquet", ".pq", ".parq"):
        return "parquet"
    if suffix in (".csv",):
        return "csv"
    raise EngineError(f"unsupported output format {suffix or '(none)'!r}: {dest} (use .csv or .parquet)")


def is_folder_output(dest) -> bool:
    return isinstance(dest, (str, os.PathLike)) and os.fspath(dest).endswith(("/", os.sep))


def same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """True if ``a`` and ``b`` name one file: the same resolved path, or (when both
    exist) the same inode on the same device (hard links, symlinks, bind mounts)."""
    try:
        if Path(a).resolve() == Path(b).resolve():
            return True
    except (OSError, RuntimeError):  # a symlink loop: compare the inodes
        pass
    try:
        sa, sb = os.stat(a), os.stat(b)
    except (OSError, ValueError):
        return False
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def input_files(data) -> tuple[str, ...]:
    """The files behind an input given as a path, folder or glob (none for frames and
    arrays); an input that does not exist raises the source's one-line error."""
    if isinstance(data, (str, os.PathLike)):
        return tuple(expand_path(os.fspath(data)))
    return ()


def _check_folder(path: Path, what: str, allow_dir: bool = False) -> None:
    folder = path.parent if str(path.parent) else Path(".")
    try:
        is_dir = folder.is_dir()
        exists = is_dir or folder.exists()
    except OSError as exc:
        raise EngineError(f"{what} folder cannot be used: {folder}: {os_reason(exc)}") from None
    if not is_dir:
        if exists:
            raise EngineError(f"{what} folder is not a folder: {folder}")
        raise EngineError(f"{what} folder does not exist: {folder}")
    if not os.access(folder, os.W_OK):
        raise EngineError(f"{what} folder is not writable: {folder}")
    try:
        if path.is_dir() and not allow_dir:
            raise EngineError(f"{what} is a folder: {path}")
    except OSError as exc:  # a name too long, say
        raise EngineError(f"{what} cannot be used: {path}: {os_reason(exc)}") from None
    check_name(path, what)


def check_name(path: Path, what: str = "output") -> None:
    """The file name must leave room for the temporary file's (``tempfiles.temp_prefix``
    shortens the name it embeds, so only a name the file system refuses fails)."""
    try:
        limit = os.pathconf(path.parent if str(path.parent) else ".", "PC_NAME_MAX")
    except (OSError, ValueError):
        limit = 255
    if len(os.fsencode(path.name)) > limit:
        raise EngineError(f"{what} file name is too long ({len(os.fsencode(path.name))} bytes, the file "
                          f"system allows {limit}): {path}")


def check_destination(dest: str | os.PathLike, inputs: Sequence[str] = (), folder: bool = False) -> Path:
    """Validate ``dest`` before any work: format known, folder writable, not an input
    (by path or by inode: a hard link or symlink to an input is refused too). A folder
    output (a name ending in "/") only with ``folder`` (a ``--scheduler`` run), and
    only where nothing is, or an empty folder."""
    path = Path(dest)
    if output_format(dest) == "folder":
        if not folder:
            raise EngineError(f"output {dest} is a folder: folders of part files are written by --scheduler "
                              f"runs only (name a .parquet or .csv file)")
        if path.is_dir() and any(path.iterdir()) or path.exists() and not path.is_dir():
            raise EngineError(f"output folder {dest} already exists and is not an empty folder")
    _check_folder(path, "output", allow_dir=output_format(dest) == "folder")
    for src in inputs:
        if same_file(src, path):
            raise EngineError(f"output is the input file: {dest}" +
                              ("" if Path(src).resolve() == path.resolve() else f" (same file as {src})"))
    return path


def check_side_output(option: str, dest: str | os.PathLike, inputs: Sequence[str] = (),
                      outputs: Sequence[tuple[str, str | os.PathLike]] = ()) -> Path:
    """Validate a side output (``--report``, ``--json``) before any work: its folder
    exists and is writable, it is not a folder, and it is not the same file (path or
    inode) as an input or as another output (``outputs``: pairs of option and path)."""
    path = Path(dest)
    _check_folder(path, option)
    for src in inputs:
        if same_file(src, path):
            raise EngineError(f"{option} {dest}: is an input file ({src}); refusing to overwrite it")
    for other, where in outputs:
        if where is not None and same_file(where, path):
            raise EngineError(f"{option} {dest}: is the same file as {other} {where}")
    return path


# dtypes Polars cannot write to CSV (nested, binary, durations, Python objects; maps)
_NOT_CSV = (pl.Duration, pl.List, pl.Array, pl.Struct, pl.Binary, pl.Object) + \
    ((pl.Map,) if hasattr(pl, "Map") else ())


def check_csv_columns(dest: str | os.PathLike, schema, columns: Sequence[str]) -> None:
    """Before any work: every column in ``columns`` (those written as they are) must be
    writable to the CSV file ``dest``."""
    if output_format(dest) != "csv":
        return
    for c in columns:
        dt = schema[c]
        if dt.base_type() in _NOT_CSV:
            raise EngineError(f"column {c!r} ({dt}) cannot be written to CSV: {dest} (write .parquet instead, "
                              f"or leave the column out)")


def written_source(tmp: str, dest: str | os.PathLike) -> TableSource:
    """The output being written to ``tmp`` (its format from ``dest``'s name), as a
    source labelled ``dest``: read before the commit (``--risk``)."""
    fmt = output_format(dest)
    if fmt == "folder":  # the part files, in order
        files = tuple(sorted(str(p) for p in Path(tmp).glob("*.parquet")))
        return TableSource(pl.scan_parquet(list(files)), str(dest), files, "parquet")
    if fmt == "csv":  # read as any CSV input (header names, types from the whole file)
        return open_csv([tmp], str(dest), None, None)
    return TableSource(pl.scan_parquet(tmp), str(dest), (tmp,), fmt)


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


class CommitGroup:
    """Several outputs (OUTPUT and its report, say) written to private temporary files
    and made visible together: after ``commit`` either every destination holds its new
    file, or (an error, an interrupt) every destination is as it was before.

    ``add(dest)`` creates the temporary file for ``dest`` (so a folder that cannot be
    written fails before any work) and returns its path; ``temp(dest)`` finds it
    again (``--risk`` reads the output before it is committed). ``commit`` flushes
    every file to disk, then renames them (main outputs first, then side outputs,
    each in the order added); a file a
    rename replaces is kept as a hard link (a rename where links are not supported)
    until every rename has succeeded, so that a failed rename puts back what each
    earlier one replaced. Leaving the ``with`` block without ``commit`` (an error,
    Ctrl-C) removes the temporary files.
    """

    def __init__(self) -> None:
        self._items: list[tuple[Path, str, Path, Path]] = []  # (dest, tmp, parent, temporary folder)
        self._main = 0  # the main outputs come first in ``_items``, the side outputs after
        self.committed = False

    def __enter__(self) -> "CommitGroup":
        return self

    def __exit__(self, *exc) -> bool:
        if not self.committed:
            self.discard()
        return False

    def __contains__(self, dest) -> bool:
        return any(same_file(d, dest) for d, *_ in self._items)

    def add(self, dest: str | os.PathLike, tmp_dir: str | os.PathLike | None = None, *, side: bool = False) -> str:
        """Create and return a private temporary path (mode 0600) for ``dest``. It goes
        to ``tmp_dir`` only if that is on the same file system as ``dest`` (a rename
        cannot cross file systems), otherwise beside ``dest``. Temporaries of dead runs
        in that folder and beside ``dest`` are removed first (``tempfiles``). A ``side``
        output (a report) is renamed after the others."""
        if self.committed:
            raise RuntimeError("this commit group is already committed")
        path = Path(dest)
        parent = path.parent if str(path.parent) else Path(".")
        folder = Path(tmp_dir) if tmp_dir is not None and _same_device(Path(tmp_dir), parent) else parent
        for used in {folder, parent}:  # a killed run may have used either
            clean_stale(used)
        tmp = private_file(folder, path.name)
        item = (path, tmp, parent, folder)
        if side:
            self._items.append(item)
        else:
            self._items.insert(self._main, item)
            self._main += 1
        return tmp

    def temp(self, dest: str | os.PathLike) -> str:
        for d, tmp, *_ in self._items:
            if d == Path(dest) or same_file(d, dest):
                return tmp
        raise KeyError(str(dest))

    def discard(self) -> None:
        """Remove every temporary file (the destinations are not touched)."""
        for _, tmp, *_ in self._items:
            _remove_temp(tmp)

    def commit(self) -> None:
        """Flush every temporary file to disk and rename them all into place; on any
        failure (or an interrupt) restore every destination already replaced and
        remove the temporary files; errors become one-line EngineErrors."""
        try:
            check_signals()  # a signal whose exception was swallowed: commit nothing
            for path, tmp, parent, folder in self._items:  # durable before any becomes visible
                try:
                    if os.path.isdir(tmp):  # a folder output (engine.cluster): its files, then itself
                        for name in sorted(os.listdir(tmp)):
                            with open(os.path.join(tmp, name), "rb+") as fh:
                                os.fsync(fh.fileno())
                            os.chmod(os.path.join(tmp, name), 0o666 & ~_umask())
                        os.chmod(tmp, 0o777 & ~_umask())
                        _fsync_dir(Path(tmp))
                        continue
                    try:
                        mode = stat.S_IMODE(os.stat(path).st_mode)
                    except OSError:
                        mode = 0o666 & ~_umask()
                    with open(tmp, "rb+") as fh:
                        os.fsync(fh.fileno())
                    os.chmod(tmp, mode)
                except OSError as exc:
                    where = "" if folder == parent else f" (temporary file in {folder})"
                    raise EngineError(f"cannot write {path}{where}: {os_reason(exc)}") from None
            done: list[tuple[Path, str | None]] = []  # (dest, backup of the file it replaced)
            try:
                for path, tmp, parent, _ in self._items:
                    backup, moved = _keep_previous(path) if len(self._items) > 1 else (None, False)
                    try:
                        os.replace(tmp, path)
                    except BaseException as exc:
                        if backup is not None:  # ``path`` was not replaced: its link goes, or it comes back
                            _restore(path, backup) if moved else _unlink(backup)
                        if isinstance(exc, OSError):
                            raise EngineError(f"cannot move the result to {path}: {os_reason(exc)}") from None
                        raise
                    done.append((path, backup))
            except BaseException:
                for path, backup in reversed(done):
                    _restore(path, backup)
                raise
            for _, backup in done:
                if backup is not None:
                    with contextlib.suppress(OSError):
                        os.unlink(backup)
            self.committed = True
            for parent in {p for _, _, p, _ in self._items}:
                _fsync_dir(parent)
        finally:
            if not self.committed:
                self.discard()


def _remove_temp(tmp: str) -> None:
    """A temporary output: a file, or a folder output's folder."""
    if os.path.isdir(tmp) and not os.path.islink(tmp):
        shutil.rmtree(tmp, ignore_errors=True)
        return
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)


def _keep_previous(path: Path) -> tuple[str | None, bool]:
    """Before a rename replaces ``path``: ``(backup, moved)``, a hard link to the file
    there (None if there is none), named like a temporary file (a killed run's is
    cleaned as one); ``moved`` when links are not supported and the file was moved."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode) and not path.is_symlink():
            return None, False
    except OSError:
        return None, False
    parent = path.parent if str(path.parent) else Path(".")
    for _ in range(5):
        backup = private_file(parent, path.name)
        os.unlink(backup)
        try:
            os.link(path, backup, follow_symlinks=False)
            return backup, False
        except FileExistsError:
            continue
        except OSError:  # no hard links here: move it aside (restored on failure)
            try:
                os.rename(path, backup)
            except OSError as exc:
                raise EngineError(f"cannot replace {path}: {os_reason(exc)}") from None
            return backup, True
    raise EngineError(f"cannot replace {path}: no free temporary name")


def _restore(path: Path, backup: str | None) -> None:
    """Undo one destination: put its previous file back, or remove the new one."""
    with contextlib.suppress(OSError):
        if backup is not None:
            os.replace(backup, path)
        else:
            os.unlink(path)


def _unlink(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


@contextlib.contextmanager
def atomic_output(dest: str | os.PathLike, tmp_dir: str | os.PathLike | None = None,
                  group: CommitGroup | None = None) -> Iterator[str]:
    """Yield a private temporary path (mode 0600) for ``dest``; if the block succeeds,
    flush it to disk and rename it to ``dest`` (then with the mode of the file it
    replaces, or the umask's). On any error or interrupt the temporary file is
    removed; an OSError in the block (a full disk, say) becomes a one-line EngineError
    naming ``dest``. With ``group`` (a ``CommitGroup``) the file joins the group and is
    renamed by the group's ``commit``, with the group's other files.

    The temporary file goes to ``tmp_dir`` only if that is on the same file system
    as ``dest``, otherwise beside ``dest`` (see ``CommitGroup.add``).
    """
    own = group is None
    if own:
        group = CommitGroup()
    path = Path(dest)
    parent = path.parent if str(path.parent) else Path(".")
    with contextlib.ExitStack() as stack:
        if own:
            stack.enter_context(group)
        tmp = group.add(dest, tmp_dir)
        if is_folder_output(dest):  # a folder of part files (engine.cluster) in place of the file
            os.unlink(tmp)
            os.mkdir(tmp, 0o700)
        folder = Path(tmp).parent
        try:
            try:
                yield tmp
            except EngineError:
                raise
            except Exception as exc:
                if not (isinstance(exc, OSError) or io_errno(exc)):  # a bug, not the file system
                    raise
                where = "" if folder == parent else f" (temporary file in {folder})"
                raise EngineError(f"cannot write {path}{where}: {os_reason(exc)}") from None
        except BaseException:
            _remove_temp(tmp)
            raise
        if own:
            group.commit()


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
