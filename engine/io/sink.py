"""Writing results: never half-written, never over the input.

Output goes to a private temporary file beside the destination (or in a given
temporary folder on the same file system) and is renamed into place only when
complete. On any error, or Ctrl-C, the temporary file is removed.

Where the bytes go (``output_target``):

* a regular file, or a missing path: a temporary file beside it, renamed onto it;
* a symbolic link: written *through* the link, to its final target (a temporary
  file beside the target, renamed onto the target); the link itself stays;
* ``-`` (``STDOUT``), ``/dev/stdout``, ``/dev/stderr``, ``/dev/fd/N``,
  ``/proc/self/fd/N`` (or a link to one): the open descriptor itself, written only
  at the commit, after every check, from a temporary file in the temporary folder;
* another file that is not a regular file (a FIFO, ``/dev/null``, a terminal):
  opened and written in place at the commit (from a temporary file, as above),
  never replaced;
* an object storage URL (``s3://bucket/key``): a temporary file in the temporary
  folder, uploaded by the commit to a temporary key and copied onto the key
  (``engine.io.remote.RemoteOutput``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import stat
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import polars as pl

from ..errors import EngineError, check_signals
from . import remote
from .locate import Located, locate
from .source import TableSource, open_csv
from .tempfiles import TMP_SUFFIX, clean_stale, io_errno, os_reason, private_file

__all__ = ["PARQUET_OPTIONS", "STDOUT", "TMP_SUFFIX", "CommitGroup", "Target", "atomic_output", "check_csv_columns",
           "check_destination", "check_side_output", "check_tmp_dir", "input_files", "is_stdout", "output_format",
           "output_target", "same_file", "write_frame", "written_source"]

log = logging.getLogger("engine")

STDOUT = "-"  # as OUTPUT, --report, --json, --html: the standard output


@dataclass(frozen=True)
class Target:
    """Where a destination's bytes go (``output_target``). ``kind``: "file" (a
    temporary file beside ``path``, renamed onto it), "stream" (the open descriptor
    ``fd``, written at the commit), "special" (``path``, not a regular file: opened
    and written at the commit, never replaced) or "remote" (the object storage URL
    ``name``, uploaded at the commit). ``name``: how errors name it."""

    path: Path
    kind: str = "file"
    fd: int | None = None
    name: str = ""

    @property
    def direct(self) -> bool:
        """Written in place at the commit (a stream or a special file), not renamed."""
        return self.kind != "file"


_FD_PATH = re.compile(r"/dev/fd/(\d+)|/proc/(?:self|thread-self|(\d+))/fd/(\d+)")
_STD_PATHS = {"/dev/stdout": 1, "/dev/stderr": 2}


def _stream_fd(path: str) -> int | None:
    """The descriptor of this process a path names (``/dev/stdout``, ``/dev/fd/N``,
    ``/proc/self/fd/N``), else None."""
    if path in _STD_PATHS:
        return _STD_PATHS[path]
    m = _FD_PATH.fullmatch(path)
    if m is None or (m.group(2) is not None and int(m.group(2)) != os.getpid()):
        return None
    return int(m.group(1) or m.group(3))


def output_target(dest: str | os.PathLike) -> Target:
    """Where the bytes written for ``dest`` go: ``dest`` itself, the final target of a
    symbolic link (followed link by link), an open descriptor (``-``, ``/dev/stdout``:
    the links to ``/proc/self/fd/N`` are not followed further, so that a redirection
    to a file is written as the shell opened it, not replaced), or a special file."""
    text = os.fspath(dest)
    if text == STDOUT:
        return Target(Path(text), "stream", 1, "standard output")
    if remote.is_remote(text):
        return Target(Path(text), "remote", name=text)
    if is_folder_output(text):
        return Target(Path(text), name=text)
    path = Path(text)
    for _ in range(40):  # (the kernel's own limit on links in a path)
        fd = _stream_fd(os.fspath(path))
        if fd is not None:
            return Target(path, "stream", fd, text)
        try:
            st = os.lstat(path)
        except OSError:  # missing (a dangling link's target is created), or for the checks to name
            return Target(path, name=text)
        if stat.S_ISLNK(st.st_mode):
            try:
                path = path.parent / os.readlink(path)
            except OSError:
                return Target(path, name=text)
            continue
        if stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode):
            return Target(path, name=text)
        return Target(path, "special", name=text)
    raise EngineError(f"cannot use {text}: {os.strerror(40)}")  # ELOOP


def is_stdout(dest) -> bool:
    """``dest`` writes to this process's standard output (``-``, ``/dev/stdout``, ...)."""
    if dest is None:
        return False
    try:
        target = output_target(dest)
    except EngineError:
        return False
    return target.kind == "stream" and target.fd == 1


def output_format(dest: str | os.PathLike) -> str:
    """"parquet" or "csv" by the name's suffix; "folder" for a name ending in "/" (a
    folder of Parquet part files, written by ``--scheduler`` runs: ``engine.cluster``);
    "csv" for a stream or special file without a suffix (``/dev/stdout``, a FIFO), as
    for ``-``."""
    if is_folder_output(dest):
        return "folder"
    if os.fspath(dest) == STDOUT:
        return "csv"
    suffix = Path(dest).suffix.lower()
    if suffix in (".parquet", ".pq", ".parq"):
        return "parquet"
    if suffix in (".csv",):
        return "csv"
    if suffix in (".sav", ".zsav", ".dta"):  # written from a Parquet release (engine.io.labelled)
        return "sav" if suffix != ".dta" else "dta"
    if not remote.is_remote(dest):
        target = output_target(dest)
        if target.direct:  # /dev/stdout, /dev/fd/N, a FIFO, /dev/null: CSV, as for "-"
            return "csv"
        if target.path.is_dir():
            raise EngineError(f"output {dest} is a folder: name a file (.csv or .parquet) in it")
    raise EngineError(f"unsupported output format {suffix or '(none)'!r}: {dest} (use .csv, .parquet, .sav, .zsav "
                      f"or .dta)")


def is_folder_output(dest) -> bool:
    return isinstance(dest, (str, os.PathLike)) and os.fspath(dest).endswith(("/", os.sep))


def same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """True if ``a`` and ``b`` name one file: the same resolved path, or (when both
    exist) the same inode on the same device (hard links, symlinks, bind mounts); two
    object storage URLs: the same object."""
    if remote.is_remote(a) or remote.is_remote(b):
        return remote.same_object(a, b)
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
    arrays): a ``locate.Located``'s, resolved once (a path given as text is resolved
    here); an input that does not exist raises the source's one-line error."""
    data = locate(data)
    return data.files if isinstance(data, Located) else ()


def _check_folder(path: Path, what: str, allow_dir: bool = False) -> Target:
    """``path`` can be written: its target's folder exists and is writable, it is not a
    folder, its name fits (a stream or special file: it is open, or writable). Returns
    the target (``output_target``)."""
    target = output_target(path)
    if target.kind == "stream":
        try:
            os.fstat(target.fd)
        except OSError as exc:
            raise EngineError(f"{what} cannot be used: {path}: {os_reason(exc)}") from None
        return target
    if target.kind == "special":
        if not os.access(target.path, os.W_OK):
            raise EngineError(f"{what} is not writable: {path}")
        return target
    if target.path != path:
        log.debug("%s %s: a symbolic link, written through to %s", what, path, target.path)
    path = target.path
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
    return target


def _check_stream(what: str, dest, fd: int, inputs: Sequence[str]) -> None:
    """A destination written to the open descriptor ``fd`` (``-``, ``/dev/stdout``) that
    is an input file (``>> INPUT``) is refused: the input is never modified."""
    try:
        st = os.fstat(fd)
    except OSError:
        return  # (``_check_folder`` names it)
    if not stat.S_ISREG(st.st_mode):
        return
    for src in inputs:
        try:
            other = os.stat(src)
        except (OSError, ValueError):
            continue
        if (st.st_dev, st.st_ino) == (other.st_dev, other.st_ino):
            raise EngineError(f"{what} {dest}: the file it writes to is an input file ({src}); refusing to "
                              f"write into it")


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
    if os.fspath(dest) == STDOUT:
        _check_stream("output", dest, 1, inputs)
        return path
    if remote.is_remote(dest):
        fmt = output_format(dest)
        if fmt == "folder" and not folder:
            raise EngineError(f"output {dest} is a folder: folders of part files are written by --scheduler "
                              f"runs only (name a .parquet or .csv file)")
        remote.check_output(os.fspath(dest), "output", folder=fmt == "folder")
        for src in inputs:
            if same_file(src, dest):
                raise EngineError(f"output is the input file: {dest}")
        return path
    if output_format(dest) == "folder":
        if not folder:
            raise EngineError(f"output {dest} is a folder: folders of part files are written by --scheduler "
                              f"runs only (name a .parquet or .csv file)")
        if path.is_dir() and any(path.iterdir()) or path.exists() and not path.is_dir():
            raise EngineError(f"output folder {dest} already exists and is not an empty folder")
    target = _check_folder(path, "output", allow_dir=output_format(dest) == "folder")
    if target.kind == "stream":
        _check_stream("output", dest, target.fd, inputs)
        return path
    for src in inputs:
        if same_file(src, path):
            raise EngineError(f"output is the input file: {dest}" +
                              ("" if Path(src).resolve() == path.resolve() else f" (same file as {src})"))
    return path


def check_side_output(option: str, dest: str | os.PathLike, inputs: Sequence[str] = (),
                      outputs: Sequence[tuple[str, str | os.PathLike]] = ()) -> Path:
    """Validate a side output (``--report``, ``--json``) before any work: its folder
    exists and is writable, it is not a folder, and it is not the same file (path or
    inode) as an input or as another output (``outputs``: pairs of option and path).
    ``-`` (the standard output) may not be another output's too."""
    path = Path(dest)
    if is_stdout(dest):
        for other, where in outputs:
            if where is not None and is_stdout(where):
                raise EngineError(f"{option} {dest}: the standard output is taken by {other} {where}")
    if remote.is_remote(dest):
        remote.check_output(os.fspath(dest), option)
        same = os.fspath(dest)  # (an object: compared as its URL)
    else:
        target = _check_folder(path, option)
        if target.kind == "stream":
            _check_stream(option, dest, target.fd, inputs)
            return path
        same = path
    for src in inputs:
        if same_file(src, same):
            raise EngineError(f"{option} {dest}: is an input file ({src}); refusing to overwrite it")
    for other, where in outputs:
        if where is not None and same_file(where, same):
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


@dataclass(frozen=True)
class _Item:
    """One output of a commit group: ``dest`` as given, where its bytes go
    (``target``), its temporary file, the folder it is renamed in (``parent``) and the
    folder of the temporary file."""

    dest: Path
    target: Target
    tmp: str
    parent: Path
    folder: Path
    upload: "remote.RemoteOutput | None" = None  # an object storage destination's upload

    @property
    def name(self) -> str:
        """The destination in an error line (and the link's target, for a link)."""
        if self.target.kind in ("stream", "remote"):  # ("standard output" for ``-``; an object's URL)
            return self.target.name
        if self.target.path != self.dest:
            return f"{self.dest} (the link's target {self.target.path})"
        return str(self.dest)


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

    A destination that is a symbolic link is written through it: the temporary file
    goes beside the link's final target and is renamed onto the target. One that is
    written in place (``Target.direct``: the standard output, ``/dev/stdout``, a FIFO)
    is copied from its temporary file after every rename succeeded (a failed copy puts
    back what the renames replaced); ``redirect(dest)`` sends ``dest``'s bytes to the
    standard output instead (``engine.release``: OUTPUT ``-``).
    """

    def __init__(self) -> None:
        self._items: list[_Item] = []
        self._main = 0  # the main outputs come first in ``_items``, the side outputs after
        self._redirects: dict[str, Target] = {}
        self.committed = False

    def __enter__(self) -> "CommitGroup":
        return self

    def __exit__(self, *exc) -> bool:
        if not self.committed:
            self.discard()
        return False

    def __contains__(self, dest) -> bool:
        return any(_is_dest(i, dest) for i in self._items)

    def redirect(self, dest: str | os.PathLike) -> None:
        """Write ``dest``'s file to the standard output at the commit, in place of a
        rename (the temporary file stays in ``dest``'s folder, a private one)."""
        self._redirects[os.fspath(dest)] = output_target(STDOUT)

    def add(self, dest: str | os.PathLike, tmp_dir: str | os.PathLike | None = None, *, side: bool = False) -> str:
        """Create and return a private temporary path (mode 0600) for ``dest``. It goes
        to ``tmp_dir`` only if that is on the same file system as ``dest`` (a rename
        cannot cross file systems), otherwise beside ``dest`` (beside a link's target);
        for a destination written in place, to ``tmp_dir`` or the system's temporary
        folder. Temporaries of dead runs in that folder and beside ``dest`` are removed
        first (``tempfiles``). A ``side`` output (a report) is renamed after the others."""
        if self.committed:
            raise RuntimeError("this commit group is already committed")
        path = Path(dest)
        target = self._redirects.get(os.fspath(dest)) or output_target(dest)
        if target.kind == "stream":
            for other in self._items:
                if other.target.kind == "stream" and other.target.fd == target.fd:
                    raise EngineError(f"{dest}: {target.name} is taken by {other.dest} (write one of them there)")
        if target.kind == "remote":  # a local temporary file, uploaded by the commit
            parent = folder = Path(tmp_dir) if tmp_dir is not None else Path(tempfile.gettempdir())
            name = target.name.rstrip("/").rsplit("/", 1)[-1]
        elif target.direct:
            parent = Path(tmp_dir) if tmp_dir is not None else \
                path.parent if os.fspath(dest) in self._redirects else Path(tempfile.gettempdir())
            folder = parent
            name = "stdout" if target.kind == "stream" else target.path.name
        else:
            parent = target.path.parent if str(target.path.parent) else Path(".")
            folder = Path(tmp_dir) if tmp_dir is not None and _same_device(Path(tmp_dir), parent) else parent
            name = target.path.name
        for used in {folder, parent}:  # a killed run may have used either
            clean_stale(used)
        tmp = private_file(folder, name)
        item = _Item(path, target, tmp, parent, folder,
                     remote.RemoteOutput(target.name, tmp) if target.kind == "remote" else None)
        if side:
            self._items.append(item)
        else:
            self._items.insert(self._main, item)
            self._main += 1
        return tmp

    def temp(self, dest: str | os.PathLike) -> str:
        for i in self._items:
            if _is_dest(i, dest):
                return i.tmp
        raise KeyError(str(dest))

    def where(self, tmp: str) -> str:
        """How an error line names the destination of the temporary file ``tmp``, and
        where that file is when not beside it."""
        for i in self._items:
            if i.tmp == tmp:
                return i.name + ("" if i.folder == i.parent or i.target.direct else
                                 f" (temporary file in {i.folder})")
        return tmp

    def withdraw(self, dest: str | os.PathLike) -> None:
        """Leave ``dest`` out of the commit: its temporary file is removed and its
        destination not touched (``engine.release``: a release whose risk is above its
        ``--max-risk`` commits its report and page only)."""
        for n, i in enumerate(self._items):
            if _is_dest(i, dest):
                _remove_temp(i.tmp)
                if i.upload is not None:
                    i.upload.discard()
                del self._items[n]
                self._main -= n < self._main
                self._redirects.pop(os.fspath(dest), None)
                return
        raise KeyError(str(dest))

    def discard(self) -> None:
        """Remove every temporary file and key (the destinations are not touched)."""
        for i in self._items:
            _remove_temp(i.tmp)
            if i.upload is not None:
                i.upload.discard()

    def commit(self) -> None:
        """Flush every temporary file to disk and rename them all into place, then write
        the destinations written in place; on any failure (or an interrupt) restore
        every destination already replaced and remove the temporary files; errors
        become one-line EngineErrors."""
        try:
            check_signals()  # a signal whose exception was swallowed: commit nothing
            for i in self._items:  # durable before any becomes visible
                path, tmp = i.target.path, i.tmp
                try:
                    if os.path.isdir(tmp):  # a folder output (engine.cluster): its files, then itself
                        for name in sorted(os.listdir(tmp)):
                            with open(os.path.join(tmp, name), "rb+") as fh:
                                os.fsync(fh.fileno())
                            os.chmod(os.path.join(tmp, name), 0o666 & ~_umask())
                        os.chmod(tmp, 0o777 & ~_umask())
                        _fsync_dir(Path(tmp))
                        continue
                    if i.target.direct:  # read back at once: no need to be durable
                        continue
                    try:
                        mode = stat.S_IMODE(os.stat(path).st_mode)
                    except OSError:
                        mode = 0o666 & ~_umask()
                    with open(tmp, "rb+") as fh:
                        os.fsync(fh.fileno())
                    os.chmod(tmp, mode)
                except OSError as exc:
                    where = "" if i.folder == i.parent else f" (temporary file in {i.folder})"
                    raise EngineError(f"cannot write {i.name}{where}: {os_reason(exc)}") from None
            renamed = [i for i in self._items if not i.target.direct]
            uploads = [i.upload for i in self._items if i.upload is not None]
            done: list[tuple[Path, str | None]] = []  # (target, backup of the file it replaced)
            try:
                for up in uploads:  # (the slow part, before any destination changes)
                    up.stage()
                for i in renamed:
                    path = i.target.path
                    backup, moved = _keep_previous(path) if len(self._items) > 1 else (None, False)
                    try:
                        os.replace(i.tmp, path)
                    except BaseException as exc:
                        if backup is not None:  # ``path`` was not replaced: its link goes, or it comes back
                            _restore(path, backup) if moved else _unlink(backup)
                        if isinstance(exc, OSError):
                            raise EngineError(f"cannot move the result to {i.name}: {os_reason(exc)}") from None
                        raise
                    done.append((path, backup))
                for up in uploads:
                    up.publish(keep_previous=len(self._items) > 1)
                for i in self._items:
                    if i.target.kind in ("stream", "special"):
                        _write_in_place(i)
            except BaseException:
                for path, backup in reversed(done):
                    _restore(path, backup)
                for up in reversed(uploads):
                    up.undo()
                    up.discard()
                raise
            for _, backup in done:
                if backup is not None:
                    with contextlib.suppress(OSError):
                        os.unlink(backup)
            for up in uploads:
                up.finish()
            self.committed = True
            for parent in {i.parent for i in renamed}:
                _fsync_dir(parent)
        finally:
            if self.committed:
                for i in self._items:
                    if i.target.direct:
                        _remove_temp(i.tmp)
            else:
                self.discard()


_COPY_PIECE = 1 << 20


def _is_dest(item: _Item, dest) -> bool:
    """``dest`` names ``item``'s destination (an object storage URL: the same object)."""
    if item.upload is not None:
        return remote.same_object(item.target.name, dest)
    return item.dest == Path(dest) or same_file(item.dest, dest)


def _write_in_place(item: _Item) -> None:
    """Copy ``item``'s temporary file to its stream or special file (never replaced)."""
    target = item.target
    if target.kind == "stream":
        for stream in (sys.stdout, sys.stderr):  # what was printed before comes first
            with contextlib.suppress(Exception):
                stream.flush()
    try:
        fd = target.fd if target.kind == "stream" else \
            os.open(target.path, os.O_WRONLY | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
        try:
            with open(item.tmp, "rb") as fh:
                while piece := fh.read(_COPY_PIECE):
                    view = memoryview(piece)
                    while view:
                        view = view[os.write(fd, view):]
        finally:
            if target.kind != "stream":
                os.close(fd)
    except OSError as exc:
        raise EngineError(f"cannot write {item.name}: {os_reason(exc)}") from None
    log.debug("wrote %s in place", item.name)


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
    as ``dest``, otherwise beside ``dest`` (see ``CommitGroup.add``). A symbolic link
    is written through, to its target; the standard output (``-``) and other files
    that are not regular files are written in place when committed (``output_target``).
    """
    own = group is None
    if own:
        group = CommitGroup()
    with contextlib.ExitStack() as stack:
        if own:
            stack.enter_context(group)
        tmp = group.add(dest, tmp_dir)
        if is_folder_output(dest):  # a folder of part files (engine.cluster) in place of the file
            os.unlink(tmp)
            os.mkdir(tmp, 0o700)
        try:
            try:
                yield tmp
            except EngineError:
                raise
            except Exception as exc:
                if not (isinstance(exc, OSError) or io_errno(exc)):  # a bug, not the file system
                    raise
                raise EngineError(f"cannot write {group.where(tmp)}: {os_reason(exc)}") from None
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
