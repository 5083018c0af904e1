"""CSV files, before Polars reads them: the reading options (``CsvOptions``), a local
UTF-8 copy where one is needed (``readable_csv``: a ``.csv.gz``, another encoding, an
object on a store), the checks made before any work (a header naming a column twice,
``check_structure``), pieces of whole records (``csv_pieces``), and the rules that type
a column from its text (``kind_of``, ``cast_text``). ``engine.io.source.TableSource``
reads CSV inputs with them.
"""

from __future__ import annotations

import codecs
import contextlib
import csv as _csv
import gzip
import os
import posixpath
import shutil
import tempfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np
import polars as pl

from ..errors import EngineError, first_line
from .remote import is_remote, open_input, reason
from .tempfiles import os_reason, private_file

GZIP = ".gz"
_POLARS_ENCODINGS = {"utf8": "utf8", "utf-8": "utf8", "utf_8": "utf8", "utf8-lossy": "utf8-lossy",
                     "utf-8-lossy": "utf8-lossy"}
_TRANSCODE_PIECE = 1 << 20  # characters per piece of a streamed transcode


@dataclass(frozen=True)
class CsvOptions:
    """How CSV inputs are read (``--separator``, ``--null-values``, ``--encoding``).

    ``separator``: one single-byte character (``\\t`` or ``tab`` for a tab).
    ``null_values``: texts read as missing (besides the empty field), e.g. ``("NA",)``.
    ``encoding``: ``utf8`` (default), ``utf8-lossy`` (invalid bytes become U+FFFD), or
    any codec Python knows (``latin-1``, ``cp1252``, ``utf-16``, ...): such a file, and
    any ``.csv.gz``, is first transcoded / decompressed, streamed, to a private UTF-8
    temporary file that is removed when the source is closed (end of run, error,
    Ctrl-C). Outputs are always UTF-8, comma-separated.
    """

    separator: str = ","
    null_values: tuple[str, ...] = ()
    encoding: str = "utf8"
    explicit: tuple[str, ...] = field(default=(), compare=False)  # the options given, as CLI flags

    @classmethod
    def make(cls, separator=None, null_values=None, encoding=None) -> "CsvOptions | None":
        """Validated options, or None when none is given (the defaults)."""
        if separator is None and null_values is None and encoding is None:
            return None
        sep = "," if separator is None else separator
        if isinstance(sep, str) and sep.lower() in ("\\t", "tab"):
            sep = "\t"
        if not isinstance(sep, str) or len(sep) != 1 or len(sep.encode()) != 1 or sep in "\"\r\n":
            raise EngineError(f"separator (--separator) must be one single-byte character other than a quote "
                              f"or a line break, got {separator!r}")
        if null_values is None:
            nulls: tuple[str, ...] = ()
        elif isinstance(null_values, str):
            nulls = tuple(v for v in null_values.split(","))
        else:
            try:
                nulls = tuple(null_values)
            except TypeError:
                raise EngineError(f"null values (--null-values) must be texts, got {null_values!r}") from None
        for v in nulls:
            if not isinstance(v, str) or not v:
                raise EngineError(f"null values (--null-values) must be non-empty texts, got {v!r} "
                                  f"(an empty field is always missing)")
        enc = "utf8" if encoding is None else encoding
        if not isinstance(enc, str):
            raise EngineError(f"encoding (--encoding) must be a name such as utf8 or latin-1, got {encoding!r}")
        if enc.lower() in _POLARS_ENCODINGS:
            enc = _POLARS_ENCODINGS[enc.lower()]
        else:
            try:
                info = codecs.lookup(enc)
            except LookupError:
                raise EngineError(f"encoding (--encoding) {encoding!r} is unknown (use utf8, utf8-lossy, "
                                  f"latin-1, cp1252, ...)") from None
            enc = "utf8" if info.name == "utf-8" else info.name
        explicit = tuple(flag for flag, v in (("--separator", separator), ("--null-values", null_values),
                                              ("--encoding", encoding)) if v is not None)
        return cls(sep, nulls, enc, explicit)

    @property
    def transcode(self) -> bool:
        return self.encoding not in ("utf8", "utf8-lossy")

    def given(self) -> list[str]:
        """The options given (even at their default values), as CLI flags (for messages)."""
        return list(self.explicit) or ["--separator", "--null-values", "--encoding"]


def csv_pieces(fh, size: int) -> Iterator[bytes]:
    """A CSV file's records in pieces of about ``size`` bytes, each the header line and
    whole records: cut after a newline preceded by an even number of double quotes
    (not inside a quoted field; a doubled quote inside one counts twice). A record
    longer than ``size`` makes a longer piece."""
    header = b""
    carry = b""
    while True:
        buf = fh.read(size)
        data = carry + buf if carry else buf
        if not buf:
            if data.strip(b"\r\n"):
                yield header + data if header else data
            return
        a = np.frombuffer(data, np.uint8)
        nl = np.flatnonzero(a == 10)
        if nl.size:
            q = np.flatnonzero(a == 34)
            even = nl[(np.searchsorted(q, nl) & 1) == 0]
        else:
            even = nl
        if even.size == 0:
            carry = data
            continue
        if not header:  # the first record is the header
            cut = int(even[0]) + 1
            header, data = data[:cut], data[cut:]
            even = even[1:] - cut
            if even.size == 0:
                carry = data
                continue
        cut = int(even[-1]) + 1
        if cut:
            yield header + data[:cut]
        carry = data[cut:]


KIND_TYPES = {None: pl.String, "int": pl.Int64, "float": pl.Float64, "bool": pl.Boolean, "str": pl.String}
_INTEGER = r"^[+-]?[0-9]+$"
# a CSV QI of ISO datetimes without an offset (``T`` or a space, seconds and their
# fraction optional) is read as Datetime (microseconds), as a Parquet datetime is read;
# ``LOOKS_DATETIME`` (with an offset or ``Z``: no one type to read them as) is refused
DATETIME = pl.Datetime("us")
ISO_DATETIME = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]{1,9})?)?$"
LOOKS_DATETIME = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}"


def kind_of(v: pl.Series) -> str:
    """The narrowest kind of the non-missing texts ``v``: int, float, bool or str."""
    if v.cast(pl.Int64, strict=False).null_count() == 0:
        return "int"
    if v.cast(pl.Float64, strict=False).null_count() == 0:
        wide = v.str.contains(_INTEGER) & v.cast(pl.Int64, strict=False).is_null()
        return "str" if wide.any() else "float"  # an integer wider than Int64 keeps its digits
    if v.str.to_lowercase().is_in(["true", "false"]).all():
        return "bool"
    return "str"


def join_kinds(a, b) -> str:
    if a is None or a == b:
        return b
    if {a, b} == {"int", "float"}:
        return "float"
    return "str"


def cast_text(c: str, dtype, nulls: list[str]) -> pl.Expr:
    """Column ``c`` read as text, its null values as null, converted to ``dtype`` as
    ``TableSource._infer`` tested it (Boolean: ``true``/``false`` in any case)."""
    col = pl.when(pl.col(c).is_in(nulls)).then(None).otherwise(pl.col(c)) if nulls else pl.col(c)
    if dtype == pl.String:
        return col.alias(c)
    if dtype == pl.Boolean:
        return pl.when(col.is_null()).then(None).otherwise(col.str.to_lowercase() == "true").alias(c)
    return _from_text(col, dtype).alias(c)


def _from_text(col: pl.Expr, dtype) -> pl.Expr:
    """Text to ``dtype`` (Polars 2 casts no text to a date or datetime)."""
    if dtype == pl.Date:
        return col.str.to_date("%Y-%m-%d")
    if dtype == DATETIME:
        return col.str.to_datetime(time_unit="us")
    return col.cast(dtype)


def typed_from_text(c: str, dtype, nulls: list[str]) -> pl.Expr:
    """Column ``c`` read as text, its null values as null, cast to ``dtype`` (strictly:
    a text that is not a ``dtype`` is an error, which ``TableSource._diagnose`` locates)."""
    col = pl.when(pl.col(c).is_in(nulls)).then(None).otherwise(pl.col(c))
    if dtype == pl.String:
        return col.alias(c)
    if dtype == pl.Boolean:
        low = col.str.to_lowercase()
        return (pl.when(low == "true").then(True).when(low == "false").then(False)
                .otherwise(col.cast(pl.Boolean))).alias(c)
    return _from_text(col, dtype).alias(c)  # (no space stripped: as the reader without null values)


def reads_as(s: pl.Series, dtype) -> pl.Series:
    """Whether each text of ``s`` reads as ``dtype`` (Float64, Date, Boolean) as the CSV
    reader reads it (a number with a space around it does not)."""
    if dtype == pl.Date:
        return s.str.to_date("%Y-%m-%d", strict=False).is_not_null()
    if dtype == DATETIME:  # (the format is inferred from the texts given: only the ISO ones)
        iso = s.str.contains(ISO_DATETIME).fill_null(False)
        if iso.any():
            iso = iso.scatter(iso.arg_true(), s.filter(iso).str.to_datetime(time_unit="us", strict=False)
                              .is_not_null())
        return iso
    if dtype == pl.Boolean:
        return s.str.to_lowercase().is_in(["true", "false"])
    return s.cast(pl.Float64, strict=False).is_not_null()


def not_a_value(column: str, value, row: int, label: str, dtype=pl.Float64, hint: str = "") -> EngineError:
    """The one-line error for a QI value of a CSV input that is not of its column's type."""
    what = {pl.Date: ("a date", "a date (YYYY-MM-DD)"), pl.Boolean: ("Boolean", "true or false"),
            DATETIME: ("a datetime", "an ISO datetime (YYYY-MM-DD HH:MM:SS)")}.get(dtype, ("numeric", "a number"))
    return EngineError(f"column {column!r} is not {what[0]}: {value!r} at row {row} (rows counted from 1) "
                       f"of {label} is not {what[1]}{hint}")


def csv_options(separator=None, null_values=None, encoding=None) -> CsvOptions | None:
    """The API's ``separator``, ``null_values``, ``encoding`` keywords, validated."""
    return CsvOptions.make(separator=separator, null_values=null_values, encoding=encoding)


def readable_csv(path: str, opts: CsvOptions, tmp_dir, temps: list) -> str:
    """``path`` itself, or a private UTF-8 temporary copy (streamed a piece at a time:
    memory stays bounded) for a ``.gz`` file, an encoding other than UTF-8, or an object
    on a store (``engine.io.remote``: read once, then by every pass from the copy),
    created in ``tmp_dir`` (default: the system's temporary folder) and listed in
    ``temps``."""
    gz = path.lower().endswith(GZIP)
    far = is_remote(path)
    if not gz and not opts.transcode and not far:
        return path
    folder = os.fspath(tmp_dir) if tmp_dir is not None else tempfile.gettempdir()
    tmp = private_file(folder, posixpath.basename(path.rstrip("/")) if far else Path(path).name)
    temps.append(tmp)
    what = "decompress" if gz and not opts.transcode else f"decode ({opts.encoding})" if opts.transcode else "read"
    try:
        with contextlib.ExitStack() as stack:
            raw = stack.enter_context(open_input(path) if far else open(path, "rb"))
            if gz:
                raw = stack.enter_context(gzip.GzipFile(fileobj=raw, mode="rb"))
            out = stack.enter_context(open(tmp, "wb"))
            if not opts.transcode:
                shutil.copyfileobj(raw, out, _TRANSCODE_PIECE)
            else:
                _transcode(raw, out, opts.encoding, what, path)
    except EngineError:
        raise
    except (OSError, EOFError, zlib.error) as exc:
        if isinstance(exc, OSError) and exc.filename == tmp:
            raise EngineError(f"cannot write a temporary copy of {path} in {folder}: {os_reason(exc)}") from None
        raise EngineError(f"cannot {what} {path}: {reason(exc) if far else first_line(exc)}") from None
    return tmp


def _transcode(raw, out, encoding: str, what: str, path: str) -> None:
    """``raw``'s bytes in ``encoding`` written to ``out`` as UTF-8, a piece at a time; one
    line naming the offset of bytes the codec refuses."""
    decoder = codecs.getincrementaldecoder(encoding)("strict")
    done = 0
    while True:
        piece = raw.read(_TRANSCODE_PIECE)
        try:
            text = decoder.decode(piece, final=not piece)
        except UnicodeError as exc:  # the offset of the bad bytes, when the codec says
            at = f" at byte {done + exc.start:,}" if isinstance(getattr(exc, "start", None), int) else ""
            raise EngineError(f"cannot {what} {path}: {getattr(exc, 'reason', None) or exc}{at}") from None
        out.write(text.encode("utf-8"))
        done += len(piece)
        if not piece:
            break


def check_header(path: str, label: str, opts: CsvOptions) -> None:
    """Refuse a header that names a column twice (Polars would rename it x_duplicated_0)."""
    try:
        with open(path, newline="", encoding="utf-8", errors="replace") as fh:
            header = next(_csv.reader(fh, delimiter=opts.separator, quotechar='"'), [])
    except (OSError, _csv.Error) as exc:
        raise EngineError(f"cannot read {label}: {first_line(exc)}") from None
    if header and header[0].startswith("\ufeff"):
        header[0] = header[0][1:]
    seen = set()
    for c in header:
        if c in seen:
            raise EngineError(f"column {c!r} appears twice in the header of {label}")
        seen.add(c)


_SCAN_PIECE = 16 << 20  # bytes of a CSV read at a time by ``check_structure``


def check_structure(path: str, label: str, opts: CsvOptions) -> None:
    """Refuse, before any work, a CSV file the reader would misread, in one line naming
    the line (physical lines counted from 1, the header is line 1):

    * a quoted field that is never closed (an open quote on line 1 swallows the file);
    * a quote inside an unquoted field (``a"b``: quote such a field and double the quote);
    * line ends that are a carriage return alone (old Mac files: the file is one line);
    * a record with fewer fields than the header (a missing field would be read as a
      missing value, silently) or more (the reader's own message names no line).

    Streamed a piece at a time (numpy over the bytes: memory stays at one piece)."""
    try:
        fh = open(path, "rb")
    except OSError as exc:
        raise EngineError(f"cannot read {label}: {exc.strerror or exc}") from None
    scan = _Structure(ord(opts.separator), label)
    with fh:
        while True:
            piece = fh.read(_SCAN_PIECE)
            if scan.lines == 0 and piece.startswith(b"\xef\xbb\xbf") and scan.prev == 10 and scan.header is None:
                piece = piece[3:]
            if not piece:
                break
            scan.feed(np.frombuffer(piece, np.uint8))
    scan.finish()


@dataclass
class _Structure:
    """``check_structure``'s state between pieces of the file."""

    sep: int
    label: str
    parity: int = 0         # quotes seen so far, mod 2 (1: inside a quoted field)
    lines: int = 0          # newlines before this piece
    fields: int = 0         # separators outside quotes in the record being read
    header: int | None = None  # the header's fields
    start_line: int = 1     # the line the record being read starts on
    blank: bool = True      # the record being read has no byte yet (but a CR)
    prev: int = 10          # the byte before this piece (a newline: the start of the file)
    pending: int | None = None  # a closing quote at the end of the previous piece (its line)
    open_line: int = 0      # the line of the last opening quote
    seen_nl: bool = False
    seen_cr: bool = False

    def bad(self, line: int, what: str) -> EngineError:
        return EngineError(f"cannot read {self.label}: line {line:,}: {what}")

    def feed(self, a: np.ndarray) -> None:
        """One piece of the file's bytes."""
        nl = np.flatnonzero(a == 10)
        self.seen_nl |= nl.size > 0
        self.seen_cr |= bool((a == 13).any())
        if not self.seen_nl and self.seen_cr and self.lines == 0:
            raise self.bad(1, "its line ends are carriage returns alone (\\r): convert them to \\n or \\r\\n")
        q = np.flatnonzero(a == 34)
        if self.pending is not None:
            if a[0] not in (self.sep, 10, 13, 34):
                raise self.bad(self.pending, 'a quote inside a quoted field must be doubled ("")')
            self.pending = None
        if q.size:
            self._quotes(a, q, nl)
        self._records(a, q, nl)
        self.parity = (self.parity + q.size) & 1
        self.lines += int(nl.size)
        self.prev = int(a[-1])

    def _quotes(self, a: np.ndarray, q: np.ndarray, nl: np.ndarray) -> None:
        """Every quote opens a field after a separator or a line end, and closes it before one."""
        sep, lines = self.sep, self.lines
        idx = (self.parity + np.arange(q.size)) & 1  # 0: opens a quoted field, 1: closes it
        before = np.where(q > 0, a[np.maximum(q - 1, 0)], self.prev)
        opening = q[idx == 0]
        ob = before[idx == 0]
        wrong = (ob != sep) & (ob != 10) & (ob != 13) & (ob != 34)
        if wrong.any():
            at = int(opening[np.argmax(wrong)])
            raise self.bad(lines + 1 + int(np.searchsorted(nl, at)),
                           'a quote inside an unquoted field (quote the field and double the quote: "a""b")')
        closing = q[idx == 1]
        inner = closing[closing < a.size - 1]
        after = a[inner + 1]
        wrong = (after != sep) & (after != 10) & (after != 13) & (after != 34)
        if wrong.any():
            at = int(inner[np.argmax(wrong)])
            raise self.bad(lines + 1 + int(np.searchsorted(nl, at)),
                           'a quote inside a quoted field must be doubled ("")')
        if closing.size and closing[-1] == a.size - 1:
            self.pending = lines + 1 + int(np.searchsorted(nl, a.size - 1))
        if opening.size:
            self.open_line = lines + 1 + int(np.searchsorted(nl, int(opening[-1])))

    def _records(self, a: np.ndarray, q: np.ndarray, nl: np.ndarray) -> None:
        """Records end at newlines outside quotes; fields are separators outside quotes:
        every record ending in this piece has the header's fields."""
        lines = self.lines
        s = np.flatnonzero(a == self.sep)
        if q.size or self.parity:
            ends = nl[((self.parity + np.searchsorted(q, nl)) & 1) == 0]
            s = s[((self.parity + np.searchsorted(q, s)) & 1) == 0]
        else:  # (no quote: every newline ends a record, every separator is one)
            ends = nl
        if not ends.size:
            self.fields += int(s.size)
            self.blank = self.blank and a.size == int((a == 13).sum())
            return
        counts = np.diff(np.searchsorted(s, ends), prepend=0)
        counts[0] += self.fields
        starts = np.concatenate(([-1], ends[:-1])) + 1
        width = ends - starts  # bytes before the newline
        empty = (width == 0) | ((width == 1) & (a[np.maximum(ends - 1, 0)] == 13))
        empty[0] = empty[0] and self.blank
        start_lines = lines + 1 + np.searchsorted(nl, starts)
        start_lines[0] = self.start_line
        n_fields = counts + 1
        if self.header is None:
            self.header = int(n_fields[0])
            n_fields[0] = self.header
        off = (n_fields != self.header) & ~empty
        if off.any():
            i = int(np.argmax(off))
            raise self.bad(int(start_lines[i]), _field_count(int(n_fields[i]), self.header))
        last = int(ends[-1])
        self.fields = int(s.size - np.searchsorted(s, last))
        self.blank = last + 1 == a.size
        self.start_line = lines + 1 + int(np.searchsorted(nl, last + 1))

    def finish(self) -> None:
        """At the end of the file: no quoted field left open, the last record whole."""
        if self.parity:
            raise self.bad(self.open_line, "a quoted field opened here is never closed")
        if not self.blank and self.header is not None and self.fields + 1 != self.header:
            raise self.bad(self.start_line, _field_count(self.fields + 1, self.header))


def _field_count(n: int, header: int) -> str:
    what = "fewer" if n < header else "more"
    return (f"{n} field{'s' if n != 1 else ''}, the header has {header} ({what} fields than the header: "
            f"a field or a separator is missing or extra)")
