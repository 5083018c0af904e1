"""Object storage: ``s3://``, ``gs://`` and ``az://`` URLs wherever a path is taken.

Inputs are streamed from the store, never copied whole to disk first, except CSV:

* Parquet: Polars reads the objects itself (``storage_options``), and pyarrow reads
  their footers and row groups through a ``pyarrow.fs`` file system
  (``parquet_file``, ``read_metadata``). Each pass reads the objects again.
* CSV: each object is streamed once into a private local file (decompressed or
  decoded on the way, as a local ``.csv.gz`` is: ``engine.io.csvfile.readable_csv``),
  which the structure check and every pass then read; it is removed when the source
  is closed.

Outputs (OUTPUT, ``--report``, ``--html``, ``--json``) are written to a private local
temporary file first; the commit uploads it to a temporary key beside the
destination (``.NAME.PID.HOST-XXXXXXXX.microagg-tmp``), copies that key onto the
destination (a server-side copy: the object appears whole or not at all) and
deletes the temporary key (``RemoteOutput``). On an error or an interrupt every
temporary key is deleted and every destination already replaced is put back, so
nothing partial is left at the destination. S3 is written with boto3 (the optional
dependency ``s3``: ``pip install 'microagg-engine[s3]'``): pyarrow's file system
cannot delete a key without leaving a folder marker behind, nor copy an object over
5 GiB. A run killed outright (SIGKILL) may leave its temporary key; a bucket
lifecycle rule on ``*.microagg-tmp`` removes such keys.

Credentials and the endpoint come from the standard environment: for S3
``AWS_ENDPOINT_URL`` (or ``AWS_ENDPOINT_URL_S3``), ``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_REGION`` (or
``AWS_DEFAULT_REGION``), the AWS config files; for Google Cloud Storage the
application default credentials; for Azure ``AZURE_STORAGE_ACCOUNT_NAME`` and
``AZURE_STORAGE_ACCOUNT_KEY``. Connections time out after ``CONNECT_TIMEOUT``
seconds and a request is tried ``ATTEMPTS`` times, so an unreachable endpoint or a
missing key is one line within seconds.

Dask workers (``engine.cluster``) read a remote Parquet input through the same
functions (``parquet_file``, ``engine.io.source.row_group_slices``), with the
environment of the worker.
"""

from __future__ import annotations

import contextlib
import logging
import os
import posixpath
import re
import secrets
import threading
from datetime import timedelta
from typing import Iterator
from urllib.parse import urlsplit

import pyarrow.fs as pafs
import pyarrow.parquet as pq

from ..errors import EngineError, first_line
from .tempfiles import TMP_SUFFIX, owner_tag, short_name

log = logging.getLogger("engine")

SCHEMES = ("s3", "gs", "gcs", "az", "abfs", "abfss")
_URL = re.compile(r"^(?P<scheme>[a-z0-9]+)://(?P<path>.*)$", re.IGNORECASE | re.DOTALL)
CONNECT_TIMEOUT = 5.0  # seconds to open a connection to the store
REQUEST_TIMEOUT = 60.0  # seconds a request may wait for its answer
ATTEMPTS = 3  # tries of one request (pyarrow's standard retry strategy backs off between them)
POLARS_OPTIONS = {"max_retries": ATTEMPTS - 1, "connect_timeout": f"{CONNECT_TIMEOUT:g}s"}
_PIECE = 8 << 20  # bytes of an upload or a download read at a time


def is_remote(path) -> bool:
    """``path`` (a text or path-like) is an object storage URL (``s3://bucket/key``, ...)."""
    if not isinstance(path, (str, os.PathLike)):
        return False
    try:
        text = os.fspath(path)
    except TypeError:
        return False
    m = _URL.match(text) if isinstance(text, str) else None
    return m is not None and m["scheme"].lower() in SCHEMES


def _parts(url: str) -> tuple[str, str]:
    """``(scheme, bucket/key)`` of a URL (no leading or trailing ``/`` on the key part)."""
    m = _URL.match(url)
    if m is None or m["scheme"].lower() not in SCHEMES:
        raise EngineError(f"not an object storage URL: {url}")
    path = m["path"].strip("/")
    if not path:
        raise EngineError(f"{url}: name a bucket and a key (s3://BUCKET/KEY)")
    return m["scheme"].lower(), path


def url_of(scheme: str, path: str) -> str:
    return f"{scheme}://{path}"


def same_object(a, b) -> bool:
    """``a`` and ``b`` name the same object (scheme aliases and slashes aside)."""
    if not (is_remote(a) and is_remote(b)):
        return False
    (sa, pa_), (sb, pb) = _parts(os.fspath(a)), _parts(os.fspath(b))
    alias = {"gcs": "gs", "abfs": "az", "abfss": "az"}
    return alias.get(sa, sa) == alias.get(sb, sb) and pa_ == pb


# --- the file systems --------------------------------------------------------------------

_cache: dict = {}
_cache_lock = threading.Lock()


def _env(*names: str) -> str | None:
    for n in names:
        v = os.environ.get(n)
        if v:
            return v
    return None


def _s3_options() -> dict:
    kw: dict = {"connect_timeout": CONNECT_TIMEOUT, "request_timeout": REQUEST_TIMEOUT,
                "retry_strategy": pafs.AwsStandardS3RetryStrategy(max_attempts=ATTEMPTS)}
    endpoint = _env("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
    if endpoint:
        u = urlsplit(endpoint if "://" in endpoint else f"https://{endpoint}")
        kw.update(endpoint_override=u.netloc + u.path.rstrip("/"), scheme=u.scheme or "https")
    region = _env("AWS_REGION", "AWS_DEFAULT_REGION")
    if region:
        kw["region"] = region
    return kw


def _make(scheme: str):
    if scheme == "s3":
        return pafs.S3FileSystem(**_s3_options())
    if scheme in ("gs", "gcs"):
        return pafs.GcsFileSystem(retry_time_limit=timedelta(seconds=REQUEST_TIMEOUT))
    azure = getattr(pafs, "AzureFileSystem", None)
    if azure is None:
        raise EngineError(f"{scheme}:// needs pyarrow built with Azure support")
    account = _env("AZURE_STORAGE_ACCOUNT_NAME")
    if not account:
        raise EngineError(f"{scheme}:// needs the storage account: set AZURE_STORAGE_ACCOUNT_NAME")
    key = _env("AZURE_STORAGE_ACCOUNT_KEY")
    return azure(account_name=account, account_key=key) if key else azure(account_name=account)


def _config(scheme: str) -> tuple:
    """What a cached file system depends on: the process (a forked one makes its own),
    and the environment variables it was made from."""
    names = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ACCESS_KEY_ID",
             "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AZURE_STORAGE_ACCOUNT_NAME",
             "AZURE_STORAGE_ACCOUNT_KEY", "GOOGLE_APPLICATION_CREDENTIALS")
    return (scheme, os.getpid(), tuple(os.environ.get(n) for n in names))


def filesystem(url: str) -> tuple[pafs.FileSystem, str]:
    """``(file system, bucket/key)`` for ``url`` (the file system cached per process and
    environment)."""
    scheme, path = _parts(url)
    key = _config(scheme)
    with _cache_lock:
        fs = _cache.get(key)
        if fs is None:
            try:
                fs = _make(scheme)
            except EngineError:
                raise
            except Exception as exc:
                raise EngineError(f"cannot use {url}: {first_line(exc)}") from None
            _cache[key] = fs
    return fs, path


def reason(exc: BaseException) -> str:
    """One line for a store's error: a connection that failed names the endpoint."""
    text = first_line(exc)
    if "NETWORK_CONNECTION" in text or "Could not connect" in text or "Couldn't connect" in text:
        where = _env("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL") or "the object store"
        return f"cannot connect to {where}"
    if "ACCESS_DENIED" in text or "AccessDenied" in text or "HTTP status 403" in text:
        return "access denied (check the credentials: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)"
    if "NO_SUCH_BUCKET" in text or "NoSuchBucket" in text:
        return "the bucket does not exist"
    m = re.search(r"AWS Error (\w+) during (\w+) operation: (.*?)(?:$|;)", text)
    if m:
        return f"{m.group(3).strip() or m.group(1)} ({m.group(2)})"
    return text


def _call(what: str, fn, *args):
    """``fn(*args)``, a store's error as one line: ``cannot {what}: {reason}``."""
    try:
        return fn(*args)
    except EngineError:
        raise
    except Exception as exc:
        raise EngineError(f"cannot {what}: {reason(exc)}") from None


def polars_options(path: str) -> dict | None:
    """``storage_options`` for Polars' readers of ``path``: the retries and the connect
    timeout above (Polars takes the credentials and the endpoint from the environment);
    None for a local path."""
    return dict(POLARS_OPTIONS) if is_remote(path) else None


def arrow_path(path: str) -> tuple[str, pafs.FileSystem | None]:
    """``(path, filesystem)`` for pyarrow's readers: a local path as it is, a URL as its
    ``bucket/key`` on the store's file system."""
    if not is_remote(path):
        return path, None
    fs, inner = filesystem(path)
    return inner, fs


def parquet_file(path: str, **kw) -> pq.ParquetFile:
    """``pyarrow.parquet.ParquetFile`` of a local or remote file."""
    where, fs = arrow_path(path)
    return pq.ParquetFile(where, filesystem=fs, **kw)


def read_metadata(path: str):
    where, fs = arrow_path(path)
    return pq.read_metadata(where, filesystem=fs)


def read_schema(path: str):
    where, fs = arrow_path(path)
    return pq.read_schema(where, filesystem=fs)


@contextlib.contextmanager
def open_input(url: str) -> Iterator:
    """A binary stream of the object ``url`` (read in order)."""
    fs, path = filesystem(url)
    stream = _call(f"read {url}", fs.open_input_stream, path, None)  # (no compression: the bytes as stored)
    try:
        yield stream
    finally:
        stream.close()


# --- inputs: an object, a prefix, a glob ---------------------------------------------------


def _glob_regex(pattern: str) -> re.Pattern:
    """A glob over keys as ``glob.glob(recursive=True)`` reads one over paths: ``*`` and
    ``?`` within one segment, ``**`` as a whole segment any number of segments, ``[...]``
    a class."""
    out = []
    parts = pattern.split("/")
    for n, seg in enumerate(parts):
        last = n == len(parts) - 1
        if seg == "**":
            out.append(".*" if last else "(?:[^/]*/)*")
            continue
        out.append(_segment(seg) + ("" if last else "/"))
    return re.compile("".join(out) + r"\Z", re.DOTALL)


def _segment(seg: str) -> str:
    """One path segment of a glob as a regular expression (no ``/`` matched)."""
    out, i = [], 0
    while i < len(seg):
        ch = seg[i]
        if ch == "*":
            out.append("[^/]*")
        elif ch == "?":
            out.append("[^/]")
        elif ch == "[":
            j = seg.find("]", i + 2 if seg[i + 1: i + 2] in ("!", "]") else i + 1)
            if j < 0:
                out.append(re.escape(ch))
            else:
                inner = seg[i + 1: j]
                inner = "^" + inner[1:] if inner.startswith("!") else inner
                out.append(f"[{inner.replace(chr(92), chr(92) * 2)}]")
                i = j
        else:
            out.append(re.escape(ch))
        i += 1
    return "".join(out)


def _listing(url: str, fs, base: str) -> list:
    selector = pafs.FileSelector(base, recursive=True, allow_not_found=True)
    return [i for i in _call(f"list {url}", fs.get_file_info, selector) if i.type == pafs.FileType.File]


def expand(url: str, folder_files) -> list[str]:
    """The objects behind an input URL: the object itself; under a prefix (a "folder"),
    ``folder_files`` of its keys (``engine.io.source``: the Parquet files, else the
    CSV files); the keys a glob matches (sorted). One line when there are none."""
    scheme, path = _parts(url)
    fs, _ = filesystem(url)
    if not any(ch in path for ch in "*?["):
        info = _call(f"read {url}", fs.get_file_info, path)
        if info.type == pafs.FileType.File:
            return [url]
        if info.type == pafs.FileType.Directory:
            keys = sorted(url_of(scheme, i.path) for i in _listing(url, fs, path))
            files = folder_files(keys)
            if not files:
                raise EngineError(f"input folder has no Parquet files: {url} (nor CSV files)")
            return files
        raise EngineError(f"input not found: {url}")
    segments = path.split("/")
    fixed = []
    for seg in segments[:-1]:
        if any(ch in seg for ch in "*?["):
            break
        fixed.append(seg)
    base = "/".join(fixed)
    if not base:
        raise EngineError(f"{url}: a glob must name its bucket (s3://BUCKET/*.parquet)")
    rx = _glob_regex(path)
    files = sorted(url_of(scheme, i.path) for i in _listing(url, fs, base) if rx.match(i.path))
    if not files:
        raise EngineError(f"input glob matches no files: {url}")
    return files


# --- outputs ---------------------------------------------------------------------------------


def check_output(url: str, what: str, folder: bool = False) -> None:
    """Before any work: the store answers, the bucket exists, and ``url`` is not a
    "folder" (keys under ``url/``) unless ``folder`` (then it must hold no key)."""
    fs, path = filesystem(url)
    writer(url)  # (what will write it: one line now if it is missing)
    bucket = path.split("/", 1)[0]
    if "/" not in path and not folder:
        raise EngineError(f"{what} {url}: name a key in the bucket (s3://BUCKET/KEY)")
    info = _call(f"use {what} {url}", fs.get_file_info, bucket)
    if info.type == pafs.FileType.NotFound:
        raise EngineError(f"{what} bucket does not exist: {url_of(_parts(url)[0], bucket)}")
    here = _call(f"use {what} {url}", fs.get_file_info, path)
    if folder:
        if here.type == pafs.FileType.File or (here.type == pafs.FileType.Directory and _listing(url, fs, path)):
            raise EngineError(f"output folder {url} already exists and is not an empty folder")
    elif here.type == pafs.FileType.Directory:
        raise EngineError(f"{what} is a folder: {url}")


def _temp_key(path: str) -> str:
    """A temporary key beside ``path`` (``bucket/key``), named as a local temporary file
    (``engine.io.tempfiles``: the owner's process and host, a random part)."""
    parent, name = posixpath.split(path)
    return posixpath.join(parent, f".{short_name(name)}.{owner_tag()}-{secrets.token_hex(4)}{TMP_SUFFIX}")


def writer(url: str):
    """What writes objects for ``url`` (``upload``, ``copy``, ``delete``, ``exists`` on
    ``bucket/key`` paths): for S3, boto3 (the optional dependency ``s3``: a multipart
    upload that fails is aborted, a copy of any size, a delete that leaves no folder
    marker behind, which pyarrow's does); for the other stores, pyarrow's file system.
    One line when boto3 is missing, before any work (``check_output``)."""
    scheme, _ = _parts(url)
    fs, _ = filesystem(url)
    if scheme != "s3":
        return _ArrowWriter(fs)
    key = ("boto3",) + _config(scheme)
    with _cache_lock:
        w = _cache.get(key)
        if w is None:
            w = _cache[key] = _S3Writer()
    return w


class _ArrowWriter:
    def __init__(self, fs):
        self.fs = fs

    def upload(self, local: str, path: str) -> None:
        with open(local, "rb") as src, self.fs.open_output_stream(path) as out:
            while piece := src.read(_PIECE):
                out.write(piece)

    def copy(self, src: str, dest: str) -> None:
        self.fs.copy_file(src, dest)

    def delete(self, path: str) -> None:
        self.fs.delete_file(path)

    def exists(self, path: str) -> bool:
        return self.fs.get_file_info(path).type == pafs.FileType.File


class _S3Writer:
    def __init__(self):
        try:  # optional: boto3 (the s3 extra), only to write to s3://
            import boto3
            from botocore.config import Config
        except ImportError:
            raise EngineError("writing to s3:// needs boto3: pip install 'microagg-engine[s3]'") from None
        config = Config(connect_timeout=CONNECT_TIMEOUT, read_timeout=REQUEST_TIMEOUT,
                        retries={"max_attempts": ATTEMPTS, "mode": "standard"})
        self.client = boto3.session.Session().client(
            "s3", endpoint_url=_env("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"),
            region_name=_env("AWS_REGION", "AWS_DEFAULT_REGION"), config=config)

    @staticmethod
    def _split(path: str) -> tuple[str, str]:
        bucket, key = path.split("/", 1)
        return bucket, key

    def upload(self, local: str, path: str) -> None:
        self.client.upload_file(local, *self._split(path))

    def copy(self, src: str, dest: str) -> None:
        sb, sk = self._split(src)
        self.client.copy({"Bucket": sb, "Key": sk}, *self._split(dest))

    def delete(self, path: str) -> None:
        bucket, key = self._split(path)
        self.client.delete_object(Bucket=bucket, Key=key)

    def exists(self, path: str) -> bool:
        bucket, key = self._split(path)
        try:
            self.client.head_object(Bucket=bucket, Key=key)
        except Exception as exc:
            if getattr(exc, "response", {}).get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return False
            raise
        return True


class RemoteOutput:
    """One destination on the store and its local temporary file (or folder of part
    files, for a folder output): ``stage`` uploads it to temporary keys, ``publish``
    copies them onto the destination (keeping what it replaces when asked), ``undo``
    puts the destination back, ``discard`` deletes the temporary keys, ``finish`` the
    kept copies. ``engine.io.sink.CommitGroup`` calls them in that order."""

    def __init__(self, url: str, local: str):
        self.url, self.local = url, local
        self.store = writer(url)
        _, self.path = _parts(url)
        self.staged: list[tuple[str, str]] = []  # (temporary key, destination key)
        self.published: list[str] = []
        self.backup: str | None = None

    def _files(self) -> list[tuple[str, str]]:
        """(local file, destination key) pairs: the file, or a folder output's parts."""
        if os.path.isdir(self.local):
            return [(os.path.join(self.local, n), posixpath.join(self.path, n)) for n in sorted(os.listdir(self.local))]
        return [(self.local, self.path)]

    def stage(self) -> None:
        for local, dest in self._files():
            tmp = _temp_key(dest)
            self.staged.append((tmp, dest))
            _call(f"write {self.url}", self.store.upload, local, tmp)
        log.debug("uploaded %s to %d temporary key(s)", self.url, len(self.staged))

    def publish(self, keep_previous: bool) -> None:
        if keep_previous and not os.path.isdir(self.local) and _call(f"use {self.url}", self.store.exists, self.path):
            self.backup = _temp_key(self.path)
            _call(f"replace {self.url}", self.store.copy, self.path, self.backup)
        for tmp, dest in self.staged:
            _call(f"move the result to {self.url}", self.store.copy, tmp, dest)
            self.published.append(dest)
            self._delete(tmp)
        self.staged = []

    def _delete(self, path: str) -> None:
        """Delete a key, quietly (best effort: cleaning up after another error)."""
        with contextlib.suppress(Exception):
            self.store.delete(path)

    def undo(self) -> None:
        """The destination as it was: the kept copy back, or the new objects deleted."""
        if self.backup is not None:
            with contextlib.suppress(Exception):
                self.store.copy(self.backup, self.path)
            self._delete(self.backup)
            self.backup = None
        else:
            for dest in self.published:
                self._delete(dest)
        self.published = []

    def discard(self) -> None:
        for tmp, _ in self.staged:
            self._delete(tmp)
        self.staged = []

    def finish(self) -> None:
        if self.backup is not None:
            self._delete(self.backup)
            self.backup = None
