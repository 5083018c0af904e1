"""SPSS, Stata and SAS files in and out (pyreadstat, the optional extra ``stats``).

Reading. A statistical file is converted at the input boundary, a chunk of rows at a
time (``pyreadstat.read_file_in_chunks``, about 16 MiB of values a chunk), into a
private temporary Parquet file (``tempfiles.private_file``, in the run's temporary
folder), which the source then reads as any Parquet input and removes at the end
(``TableSource.close``), as a ``.csv.gz`` is decompressed (``engine.io.csvfile``).
Memory stays at about one chunk whatever the file's size; a file of more than
``CHILD_BYTES`` of values is converted in a child process, so that what the conversion
leaves allocated (pyreadstat's and Polars' allocators keep about 100 MiB of freed
pages) is not held through the run (a 10M-row ``.sav`` run: 714 MiB peak under
``--memory-limit 1GiB``, docs/benchmarks.md). The file's declarations
are kept on the side as a ``FileMeta`` (``read_meta``: pyreadstat's metadata only, no
rows): each column's variable label, value labels, declared missing values (SPSS
user-missing values and ranges), measurement level and display format.

* SPSS (``.sav``, ``.zsav``): read with ``user_missing=True``, so a user-missing code
  (996) stays the value 996 in the table, declared missing in the metadata
  (``engine.io.labelled`` makes it missing for the engine). A portable file (``.por``):
  ``read_por`` takes no ``user_missing``; its missing values are read as nulls.
* Stata (``.dta``): ``.`` is a null. An extended missing value ``.a``-``.z`` is read
  as the code ``STATA_CODES`` gives its letter (``.a`` = -1000000001, ``.b`` =
  -1000000002, ..., ``.z`` = -1000000026), declared missing in the metadata like an SPSS
  user-missing code, so a QI never averages it and publishes it as the letter it was
  (a ``.dta`` output maps the codes back to their letters; a ``.sav`` output declares
  them missing; Parquet and CSV outputs publish the codes, a Parquet output naming the
  letters in its metadata). The letters of a column are known only from its rows
  (pyreadstat's metadata does not list them), so ``read_meta`` reads a ``.dta``'s
  numeric columns once to find them (``dta_letters``, kept for the process by path,
  size and time): a ``.dta`` input is read twice. The codes are whole numbers that fit
  an Int64 and a Float64 exactly, far from the sums' limits; a real value of a column
  with letters in the codes' range is refused in one line (it would read as a letter).
* SAS (``.sas7bdat``, ``.xpt``): read only (pyreadstat cannot write ``.sas7bdat``);
  special missing values ``.A``-``.Z`` are read as nulls. Value labels of a SAS file
  live in a separate format catalog, which is not read.

Writing (``write_stat``): ``.sav`` and ``.dta`` OUTPUTs are written by pyreadstat from a
pandas frame, so the whole release is held in memory once (about 8 bytes a numeric
cell, a little more for texts): the run checks this size against ``--memory-limit``
before any work and refuses a release that cannot fit (``check_stat_output``). The
release keeps the input's column order, variable labels, value label sets, declared
missing values and measurement levels. A value label set that a format cannot hold
(``.dta``: labels on non-integer values or on a text column) is refused in one line
naming the column.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import EngineError, first_line
from .tempfiles import private_file

# suffix -> (format, pyreadstat reader name)
STAT_SUFFIXES = {".sav": ("sav", "read_sav"), ".zsav": ("sav", "read_sav"), ".por": ("por", "read_por"),
                 ".dta": ("dta", "read_dta"), ".sas7bdat": ("sas7bdat", "read_sas7bdat"),
                 ".xpt": ("xpt", "read_xport")}
WRITABLE = {".sav": "sav", ".zsav": "sav", ".dta": "dta"}  # output suffixes -> format
DOUBLES_ONLY = {"sav", "por", "sas7bdat", "xpt"}  # formats that hold every number as a double (no integer type)
CHUNK_BYTES = 16 << 20  # values read from a statistical file at a time (before conversion)
PARQUET_ROWS = 65_536  # row groups of the temporary Parquet file
CHILD_BYTES = 256 << 20  # a file of more values than this is converted in a child process
META_KEY = b"microagg.labels"  # the declarations in a Parquet schema's key-value metadata (JSON)
STATA_CODES = {chr(ord("a") + i): -1_000_000_001 - i for i in range(26)}  # .a-.z -> its code (module docstring)
STATA_LETTERS = {v: k for k, v in STATA_CODES.items()}
_CODES_LO, _CODES_HI = min(STATA_CODES.values()), max(STATA_CODES.values())
_dta_seen: dict = {}  # (path, size, mtime) -> dta_letters(path)


@dataclass
class ColumnMeta:
    """One column's declarations: ``label`` (variable label), ``values`` (value ->
    label), ``missing`` (declared missing codes), ``ranges`` (declared missing ranges,
    ``(lo, hi)`` inclusive), ``measure`` ("nominal", "ordinal", "scale" or None),
    ``format`` (the file's display format: SPSS ``F8.2``, Stata ``%10.0g``) and
    ``width`` (SPSS display width)."""

    label: str | None = None
    values: dict = field(default_factory=dict)
    missing: tuple = ()
    ranges: tuple = ()
    measure: str | None = None
    format: str | None = None
    width: int | None = None
    letters: tuple = ()  # Stata extended missing values found (``"a"``, ...): their codes are in ``missing``

    def is_missing_code(self, v) -> bool:
        if v is None:
            return False
        if v in self.missing:
            return True
        return any(lo <= v <= hi for lo, hi in self.ranges) if isinstance(v, (int, float)) else False


@dataclass
class FileMeta:
    """A statistical file's declarations: its format, file label, columns in order
    and each column's ``ColumnMeta``."""

    fmt: str
    columns: list
    cols: dict
    file_label: str | None = None
    rows: int | None = None

    def to_json(self) -> dict:
        """The declarations as JSON-able data (a Parquet output's key-value metadata)."""
        def one(m: ColumnMeta) -> dict:
            out = {}
            if m.label:
                out["label"] = m.label
            if m.values:
                out["value_labels"] = [[_plain(v), t] for v, t in m.values.items()]
            if m.missing:
                out["missing"] = [_plain(v) for v in m.missing]
            if m.ranges:
                out["missing_ranges"] = [[_plain(lo), _plain(hi)] for lo, hi in m.ranges]
            for key in ("measure", "format"):
                if getattr(m, key):
                    out[key] = getattr(m, key)
            if m.letters:
                out["stata_missing"] = {"." + x: STATA_CODES[x] for x in m.letters}
            return out
        return {"format": self.fmt, "file_label": self.file_label,
                "columns": {c: one(self.cols[c]) for c in self.columns if one(self.cols[c])}}

    def json_bytes(self) -> bytes:
        """``to_json`` as the value of a Parquet schema's ``META_KEY``."""
        return json.dumps(self.to_json(), ensure_ascii=False, sort_keys=True).encode()


def _plain(v):
    """A code as JSON keeps it: an integral float as an int."""
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v


def stat_format(path: str) -> str | None:
    """The statistical format of a file name (``"sav"``, ``"dta"``, ...), else None."""
    found = STAT_SUFFIXES.get(Path(path).suffix.lower())
    return found[0] if found else None


def pyreadstat_module():
    """pyreadstat, or one line naming the extra that installs it."""
    try:
        import pyreadstat  # (imported on first use: an optional extra)
    except ImportError:
        raise EngineError("SPSS, Stata and SAS files need pyreadstat: pip install 'microagg-engine[stats]'") from None
    return pyreadstat


def _reader(path: str):
    return getattr(pyreadstat_module(), STAT_SUFFIXES[Path(path).suffix.lower()][1])


def _read_args(path: str) -> dict:
    """SPSS user-missing values and Stata extended missing values are read as their
    codes and letters; SAS special missing values as nulls (see the module docstring;
    ``read_xport`` and ``read_por`` have no such argument: a portable file's missing
    values are read as nulls)."""
    fmt = stat_format(path)
    return {"user_missing": True} if fmt in ("sav", "dta") else {} if fmt in ("xpt", "por") else {"user_missing": False}


def meta_from_pyreadstat(m, fmt: str) -> FileMeta:
    """A ``FileMeta`` from pyreadstat's metadata container ``m``."""
    cols = {}
    labels = dict(zip(m.column_names, m.column_labels or [None] * len(m.column_names)))
    for c in m.column_names:
        ranges, missing = [], []
        for r in (getattr(m, "missing_ranges", None) or {}).get(c, []):
            lo, hi = r["lo"], r["hi"]
            (missing.append(lo) if lo == hi else ranges.append((lo, hi)))
        measure = (getattr(m, "variable_measure", None) or {}).get(c)
        cols[c] = ColumnMeta(label=labels.get(c) or None,
                             values=dict((getattr(m, "variable_value_labels", None) or {}).get(c, {})),
                             missing=tuple(sorted(missing, key=str)), ranges=tuple(ranges),
                             measure=None if measure in (None, "unknown") else measure,
                             format=(getattr(m, "original_variable_types", None) or {}).get(c),
                             width=(getattr(m, "variable_display_width", None) or {}).get(c))
    rows = getattr(m, "number_rows", None)
    return FileMeta(fmt, list(m.column_names), cols, getattr(m, "file_label", None) or None,
                    rows if isinstance(rows, int) and rows >= 0 else None)


def read_meta(path: str) -> FileMeta:
    """The declarations of a statistical file (no rows read); one line when it is not one."""
    reader = _reader(path)
    try:
        _, m = reader(path, metadataonly=True, **_read_args(path))
    except Exception as exc:
        raise EngineError(f"cannot read {path}: not a readable {stat_format(path)} file ({first_line(exc)})") from None
    meta = meta_from_pyreadstat(m, stat_format(path))
    if meta.fmt == "dta":
        for c, letters in dta_letters(path, meta).items():
            cm = meta.cols[c]
            cm.letters = letters
            cm.missing = tuple(dict.fromkeys([*cm.missing, *(STATA_CODES[x] for x in letters)]))
    return meta


def numeric_columns(path: str) -> dict:
    """``{column: Int64 or Float64}``: the columns of a ``.dta`` that hold numbers (which
    may hold extended missing values) and the type pyreadstat reads them as."""
    kinds = getattr(pyreadstat_module().read_dta(path, metadataonly=True)[1], "readstat_variable_types", None) or {}
    return {c: pl.Float64 if k in ("float", "double") else pl.Int64 for c, k in kinds.items() if k != "string"}


def dta_letters(path: str, meta: FileMeta) -> dict:
    """``{column: letters}``: the extended missing values ``.a``-``.z`` each numeric
    column of the ``.dta`` at ``path`` holds (its rows read once, a chunk at a time;
    kept for the process by path, size and time)."""
    st = os.stat(path)
    key = (os.path.realpath(path), st.st_size, st.st_mtime_ns)
    if key not in _dta_seen:
        found: dict = {}
        numeric = list(numeric_columns(path))
        if numeric:
            for frame, _ in pyreadstat_module().read_file_in_chunks(
                    _reader(path), path, chunksize=chunk_rows_for(meta), output_format="polars", usecols=numeric,
                    user_missing=True):
                for c, dt in frame.schema.items():
                    if dt in (pl.Object, pl.String):
                        found.setdefault(c, set()).update(v for v in frame[c].to_list() if isinstance(v, str))
        _dta_seen[key] = {c: tuple(sorted(v)) for c, v in found.items() if v}
    return _dta_seen[key]


def chunk_rows_for(meta: FileMeta) -> int:
    """Rows read from the file at a time: about ``CHUNK_BYTES`` of values."""
    return max(10_000, CHUNK_BYTES // (8 * max(1, len(meta.columns))))


def to_parquet(path: str, label: str, folder) -> str:
    """Convert the statistical file ``path`` into a private temporary Parquet file in
    ``folder`` (None: the system's temporary folder), a chunk of rows at a time; return
    its path (the caller removes it). ``label`` names the input in errors. A file of more
    than ``CHILD_BYTES`` of values is converted in a child process (``convert_in_child``)."""
    meta = read_meta(path)
    tmp = private_file(folder if folder is not None else _system_tmp(), Path(path).name + ".parquet")
    if (meta.rows or 0) * 8 * len(meta.columns) > CHILD_BYTES:
        convert_in_child(path, label, tmp)
    else:
        _convert(path, label, meta, tmp)
    return tmp


def convert_in_child(path: str, label: str, tmp: str) -> None:
    """``_convert`` in a fresh interpreter: what the conversion leaves allocated (about
    100 MiB after 2M rows: pyreadstat's and Polars' allocators keep the chunks' pages, which
    ``malloc_trim`` does not return) is not held by the run, whose own peak then counts from
    the imports only (docs/benchmarks.md, issue 40). One line when it fails."""
    code = ("import sys\nfrom engine.errors import EngineError\nfrom engine.io import statfiles\n"
            "try:\n    statfiles._convert(sys.argv[1], sys.argv[2], statfiles.read_meta(sys.argv[1]), sys.argv[3])\n"
            "except EngineError as exc:\n    print(exc, file=sys.stderr)\n    sys.exit(2)\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[2]),
                                                                      os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, "-c", code, path, label, tmp], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        _discard(tmp)
        lines = proc.stderr.strip().splitlines()
        raise EngineError(lines[-1] if proc.returncode == 2 and lines else
                          f"cannot read {label}: the conversion stopped ({lines[-1] if lines else proc.returncode})")


def _convert(path: str, label: str, meta: FileMeta, tmp: str) -> None:
    """Write the statistical file ``path`` into ``tmp`` (Parquet), a chunk at a time."""
    reader = _reader(path)
    writer = None
    schema = None
    try:
        chunks = pyreadstat_module().read_file_in_chunks(
            reader, path, chunksize=chunk_rows_for(meta), output_format="polars", **_read_args(path))
        lettered = {c: t for c, t in numeric_columns(path).items() if meta.cols[c].letters} if meta.fmt == "dta" else {}
        done = 0
        for frame, _ in chunks:
            if lettered:
                frame = letters_to_codes(frame, lettered, label, done)
            done += frame.height
            table = _arrow(frame, schema)
            if writer is None:
                schema = table.schema
                writer = pq.ParquetWriter(tmp, schema.with_metadata({META_KEY: meta.json_bytes()}), compression="zstd", compression_level=1)
            writer.write_table(table, row_group_size=PARQUET_ROWS)
        if writer is None:  # no rows: an empty file with the columns
            writer = pq.ParquetWriter(tmp, pa.schema([(c, pa.float64()) for c in meta.columns]))
    except EngineError:
        _discard(tmp)
        raise
    except Exception as exc:
        _discard(tmp)
        raise EngineError(f"cannot read {label}: {first_line(exc)}") from None
    finally:
        if writer is not None:
            writer.close()


def letters_to_codes(frame: pl.DataFrame, lettered: dict, label: str, offset: int) -> pl.DataFrame:
    """A chunk of a ``.dta`` (its first row the file's row ``offset``) with the extended
    missing values of the columns ``lettered`` (``{column: type}``) as their codes; a real
    value in the codes' range is one line naming the column and row."""
    out = []
    for c, dt in lettered.items():
        s = frame[c]
        if s.dtype in (pl.Object, pl.String):
            values = s.to_list()
            real = pl.Series([not isinstance(v, str) for v in values], dtype=pl.Boolean)
            s = pl.Series(c, [STATA_CODES[v] if isinstance(v, str) else v for v in values], dtype=pl.Float64,
                          strict=False).cast(dt)
        else:
            s, real = s.cast(dt), pl.Series([True] * s.len(), dtype=pl.Boolean)
        clash = (s.is_between(_CODES_LO, _CODES_HI) & real).fill_null(False)
        if clash.any():
            row = offset + int(clash.arg_true()[0]) + 1
            raise EngineError(f"cannot read {label}: column {c!r}, row {row}: the value {s[row - offset - 1]} is the "
                              f"code of a Stata extended missing value (-1000000001 to -1000000026 stand for .a-.z)")
        out.append(s)
    return frame.with_columns(out)


def _system_tmp() -> str:
    return tempfile.gettempdir()


def _discard(tmp: str) -> None:
    try:
        os.unlink(tmp)
    except OSError:
        pass


def _arrow(frame: pl.DataFrame, schema: pa.Schema | None) -> pa.Table:
    """A chunk as an Arrow table with the first chunk's schema (a column all null in the
    first chunk takes a later chunk's type: the first chunk decides, so such a column is
    cast; a text column stays text)."""
    frame = frame.with_columns([pl.col(c).cast(pl.String) for c, dt in frame.schema.items() if dt == pl.Object])
    table = frame.to_arrow()
    if schema is not None and table.schema != schema:
        table = table.cast(schema)
    return table


# --- writing -------------------------------------------------------------------------

def release_bytes(rows: int, schema: pl.Schema) -> int:
    """About what a release of ``rows`` rows held as a pandas frame for pyreadstat costs:
    8 bytes a numeric cell, about 64 a text cell (a Python string), twice over for the
    conversion."""
    per_row = sum(64 if dt == pl.String else 8 for dt in schema.values())
    return 2 * rows * per_row


def check_labels_fit(meta: FileMeta, fmt: str, schema: pl.Schema) -> None:
    """Refuse, in one line naming the column, a value label set the output format cannot
    hold (``.dta``: labels on a text column or on values that are not integers)."""
    if fmt != "dta":
        return
    for c in meta.columns:
        values = meta.cols[c].values if c in meta.cols else {}
        if not values or c not in schema:
            continue
        if schema[c] == pl.String or any(isinstance(v, str) for v in values):
            raise EngineError(f"column {c!r}: a value label set on a text column does not fit a .dta output "
                              f"(Stata labels integers only): write .sav or .parquet")
        bad = next((v for v in values if not (isinstance(v, (int, float)) and float(v).is_integer())), None)
        if bad is not None:
            raise EngineError(f"column {c!r}: the value label of {bad!r} does not fit a .dta output (Stata labels "
                              f"integers only): write .sav or .parquet")


def write_stat(parquet_path: str, dest_tmp: str, fmt: str, meta: FileMeta | None, dest_label: str) -> None:
    """Write the release in ``parquet_path`` as a ``.sav`` or ``.dta`` file at ``dest_tmp``
    with the declarations of ``meta`` (the input's; None: none), for the columns the
    release has (a column the release adds, the group id, gets none)."""
    prs = pyreadstat_module()
    frame = pl.read_parquet(parquet_path)
    meta = meta or FileMeta(fmt, [], {})
    check_labels_fit(meta, fmt, frame.schema)
    cols = {c: meta.cols[c] for c in frame.columns if c in meta.cols}
    df = frame.to_pandas()
    labels = {c: m.label for c, m in cols.items() if m.label}
    values = {c: {_plain(v): t for v, t in m.values.items()} for c, m in cols.items() if m.values}
    same = {"sav": ("sav", "por"), "dta": ("dta",)}[fmt]  # display formats of the same program only
    formats = {c: m.format for c, m in cols.items() if m.format and meta.fmt in same}
    try:
        if fmt == "sav":
            ranges = {}
            for c, m in cols.items():
                items = [*m.missing, *({"lo": lo, "hi": hi} for lo, hi in m.ranges)]
                if items:
                    ranges[c] = items
            measure = {c: m.measure for c, m in cols.items() if m.measure}
            widths = {c: int(m.width) for c, m in cols.items() if m.width}
            prs.write_sav(df, dest_tmp, file_label=meta.file_label or "", column_labels=labels or None,
                          variable_value_labels=values or None, missing_ranges=ranges or None,
                          variable_measure=measure or None, variable_display_width=widths or None,
                          variable_format=formats or None, compress=Path(dest_label).suffix.lower() == ".zsav")
        else:
            letters = _codes_to_letters(df, cols)
            prs.write_dta(df, dest_tmp, file_label=meta.file_label or "", column_labels=labels or None,
                          variable_value_labels=values or None, variable_format=formats or None,
                          missing_user_values=letters or None)
    except EngineError:
        raise
    except Exception as exc:
        raise EngineError(f"cannot write {dest_label}: {first_line(exc)}") from None



def _codes_to_letters(df, cols: dict) -> dict:
    """The codes of the Stata extended missing values in ``df`` (in place) as their
    letters, in the columns whose declarations ``cols`` carry letters; ``{column:
    letters}`` for pyreadstat's ``missing_user_values``."""
    out = {}
    for c, m in cols.items():
        if m.letters and c in df.columns:
            hit = df[c].isin(list(STATA_LETTERS))
            if hit.any():
                col = df[c].astype(object)
                col[hit] = df[c][hit].map(lambda v: STATA_LETTERS[int(v)])
                df[c] = col
            out[c] = list(m.letters)
    return out
