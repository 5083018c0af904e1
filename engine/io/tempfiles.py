"""Private temporary files and folders, named after the process that owns them.

Every temporary the engine creates carries its owner in its name::

    .{output name}.{pid}.{host}-XXXXXXXX.microagg-tmp    the output (or report) being written
    .microagg-spill-{pid}.{host}-XXXXXXXX                 a folder of spilled blocks

``host`` is 8 hex digits of a hash of the host name, so that a folder shared by
several machines (or containers with their own process ids) is never cleaned by
the wrong one. Files are created with mode 0600, folders with 0700 (also the files
inside spill folders).

Standard input given as ``-`` is read to its end into a file of its own in such a
spill folder (``stdin_copy``), then read as any input, and removed at the end.

A run killed with SIGKILL cannot clean up after itself. The next run that uses
the same folder removes the temporaries of *dead* runs: names that match the
patterns above exactly, with this host's tag, owned by this user, whose process
id is not alive. Live runs' files (of this or another process), other hosts'
files and anything else are never touched.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import shutil
import socket
import stat
import sys
import tempfile
from typing import Iterator

from ..errors import EngineError

log = logging.getLogger("engine")

TMP_SUFFIX = ".microagg-tmp"
SPILL_PREFIX = ".microagg-spill-"
HOST_TAG = hashlib.blake2s(socket.gethostname().encode(), digest_size=4).hexdigest()

_OWNER = r"(?P<pid>[0-9]+)\.(?P<host>[0-9a-f]{8})"
_RAND = r"[a-z0-9_]{8}"  # tempfile's random part
TMP_FILE_RE = re.compile(rf"^\..+\.{_OWNER}-{_RAND}{re.escape(TMP_SUFFIX)}$")
SPILL_DIR_RE = re.compile(rf"^{re.escape(SPILL_PREFIX)}{_OWNER}-{_RAND}$")


def owner_tag() -> str:
    """``{pid}.{host}`` of the calling process (read at each call: a fork changes the pid)."""
    return f"{os.getpid()}.{HOST_TAG}"


_OS_ERROR = re.compile(r"os error (\d+)|\[errno (\d+)\]", re.IGNORECASE)


def io_errno(exc: BaseException) -> int | None:
    """The errno behind ``exc``: an OSError's, or one quoted by Polars / Arrow
    (``... (os error 28)``), else None."""
    if isinstance(exc, OSError) and exc.errno:
        return exc.errno
    m = _OS_ERROR.search(str(exc))
    return int(m.group(1) or m.group(2)) if m else None


def os_reason(exc: BaseException) -> str:
    """The OS's words for ``exc``, e.g. ``No space left on device``."""
    code = io_errno(exc)
    if code:
        return os.strerror(code)
    if getattr(exc, "strerror", None):
        return exc.strerror
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


# bytes of the output's name kept in a temporary file's name: with the owner tag, the
# random part and the suffix (at most 48 bytes) it stays within the 255 bytes file
# systems allow, however long the output's name
NAME_BYTES = 200


def short_name(name: str, limit: int = NAME_BYTES) -> str:
    """``name`` cut to at most ``limit`` bytes (UTF-8, whole characters)."""
    raw = os.fsencode(name)
    if len(raw) <= limit:
        return name
    return os.fsdecode(raw[:limit].decode("utf-8", "ignore").encode()) or "out"


def private_file(folder, name: str) -> str:
    """Create an empty file (mode 0600) for the output ``name`` in ``folder``; return its
    path. A long ``name`` is shortened in the temporary file's name (``NAME_BYTES``)."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{short_name(name)}.{owner_tag()}-", suffix=TMP_SUFFIX, dir=folder)
    except OSError as exc:
        raise EngineError(f"cannot create a temporary file in {folder}: {os_reason(exc)}") from None
    os.close(fd)
    return tmp


def private_dir(folder) -> str:
    """Create a spill folder (mode 0700) in ``folder`` (None: the system's temp folder)."""
    try:
        return tempfile.mkdtemp(prefix=f"{SPILL_PREFIX}{owner_tag()}-", dir=folder)
    except OSError as exc:
        raise EngineError(f"cannot create a temporary folder in {folder or tempfile.gettempdir()}: "
                          f"{os_reason(exc)}") from None


def private_opener(path, flags):
    """``open(..., opener=private_opener)``: a new file gets mode 0600 whatever the umask."""
    return os.open(path, flags, 0o600)


def pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: alive, another user's
        return True
    return True


def clean_stale(folder) -> list[str]:
    """Remove the temporaries of dead runs from ``folder``; return their paths."""
    folder = folder if folder is not None else tempfile.gettempdir()
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return []
    uid = os.getuid() if hasattr(os, "getuid") else None
    removed = []
    for e in entries:
        m = TMP_FILE_RE.match(e.name)
        is_dir = m is None
        if m is None and (m := SPILL_DIR_RE.match(e.name)) is None:
            continue
        if m["host"] != HOST_TAG or pid_alive(int(m["pid"])):
            continue
        try:
            st = e.stat(follow_symlinks=False)
            if uid is not None and st.st_uid != uid:
                continue
            if is_dir and stat.S_ISDIR(st.st_mode):
                shutil.rmtree(e.path, ignore_errors=True)
            elif not is_dir and stat.S_ISREG(st.st_mode):
                os.unlink(e.path)
            else:
                continue
        except OSError:  # another run cleaned it first
            continue
        removed.append(e.path)
    if removed:
        log.info("removed %d temporary file(s) of dead runs in %s", len(removed), folder)
    return removed


@contextlib.contextmanager
def private_folder(folder=None) -> Iterator[str]:
    """A private folder (``private_dir``: mode 0700, cleaned as a dead run's spill
    folder if this process is killed) in ``folder``, removed with its files at the end."""
    path = private_dir(folder)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


STDIN = "-"  # as an input: the standard input
STDIN_LABEL = "stdin"  # how messages and reports name it
_labels: dict[str, str] = {}  # a copy of the standard input -> STDIN_LABEL
_PIECE = 1 << 20


def input_label(path) -> str:
    """How messages name the input ``path``: ``stdin`` for a copy of the standard input
    (``stdin_copy``), else the path as given."""
    text = os.fspath(path)
    return _labels.get(text, text)


def _sniffed_suffix(head: bytes, tail: bytes) -> str:
    """A table's file name suffix from its first and last bytes: gzip, Parquet, else CSV."""
    if head[:2] == b"\x1f\x8b":
        return ".csv.gz"
    if head[:4] == b"PAR1" and tail[-4:] == b"PAR1":
        return ".parquet"
    return ".csv"


@contextlib.contextmanager
def stdin_copy(folder=None, suffix: str | None = None, stream=None) -> Iterator[str]:
    """The standard input (``stream``: its binary buffer by default), read to its end into
    a private file in a private folder in ``folder`` (None: the system's temporary
    folder); yields the file's path and removes it at the end. ``suffix``: the file's
    (``.json``); None: a table's, from its bytes (``.csv.gz`` for gzip, ``.parquet`` for
    Parquet, else ``.csv``), so that it is read as that file would be. Messages name it
    ``stdin`` (``input_label``)."""
    if stream is None:
        stream = getattr(sys.stdin, "buffer", sys.stdin)
    if stream is None:
        raise EngineError("cannot read stdin: it is closed")
    with private_folder(folder) as where:
        path = os.path.join(where, "stdin")
        head = tail = b""
        try:
            with open(path, "wb", opener=private_opener) as out:
                while True:
                    try:
                        piece = stream.read(_PIECE)
                    except (OSError, ValueError) as exc:
                        raise EngineError(f"cannot read stdin: {os_reason(exc)}") from None
                    if not piece:
                        break
                    if isinstance(piece, str):  # (a text stream without a buffer)
                        piece = piece.encode()
                    if len(head) < 4:
                        head += piece[:4 - len(head)]
                    tail = (tail + piece[-4:])[-4:]
                    out.write(piece)
        except OSError as exc:
            raise EngineError(f"cannot copy stdin to a temporary file in {where}: {os_reason(exc)}") from None
        named = path + (suffix if suffix is not None else _sniffed_suffix(head, tail))
        os.rename(path, named)
        log.debug("read %d bytes of stdin into %s", os.path.getsize(named), named)
        _labels[named] = STDIN_LABEL
        try:
            yield named
        finally:
            _labels.pop(named, None)
