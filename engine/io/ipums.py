"""IPUMS extracts: a DDI codebook (``usa_00172.xml``) and its fixed-width data file
(``usa_00172.dat`` or ``.dat.gz``) beside it, as IPUMS delivers them.

The codebook is parsed with ``xml.etree`` (``parse_ddi``; ipumspy is not needed): each
variable's name, columns (``location StartPos``/``EndPos``), implied decimals
(``dcml``: ``0012345678`` with 4 decimals is 1234.5678), type (``varFormat``: numeric
or character), variable label (``labl``), value labels (``catgry``), declared missing
codes (a ``catgry`` with ``missing="Y"``, and ``invalrng`` items and ranges: DDI's
declarations; IPUMS' own codebooks declare none, so ``--missing`` names them) and
record type (``rectype``); the file's structure (``fileStrc``: rectangular or
hierarchical) and character set.

The data file is streamed (``to_parquet``): about 200,000 lines at a time are read
(gzip decompressed on the way, decoded with the codebook's charset), cut into columns
with Polars (``str.slice``), typed (numbers: Int64, or Float64 with implied decimals;
characters: String, trailing blanks kept off; a blank field is a missing value) and
appended to a private temporary Parquet file, which the engine then reads as any
Parquet input. Memory stays at about one chunk.

Hierarchical extracts (``fileStrc type="hierarchical"``: a household record ``H``
followed by the person records ``P`` of that household, ``RECTYPE`` in the first
columns) are read as one person-level table: each person row carries its own
variables and the variables of the household record that precedes it (the last ``H``
record before it in the file, across chunk boundaries), checked by the key variable
(``recGrp keyvar``, ``SERIAL``): a person whose SERIAL differs from its household's
is refused, naming the line. The columns come in the codebook's order, ``RECTYPE``
left out (always ``P``); variables on both records (YEAR, SERIAL) are the person's.
Household records without persons (vacant units) have no row.
"""

from __future__ import annotations

import codecs
import gzip
import io
import itertools
import os
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq

from ..errors import EngineError, first_line
from .statfiles import META_KEY, ColumnMeta, FileMeta
from .tempfiles import private_file

LINES = 200_000  # data lines read at a time


@dataclass
class DdiVar:
    name: str
    start: int  # 0-based
    width: int
    decimals: int = 0
    numeric: bool = True
    rectypes: tuple = ()


@dataclass
class Ddi:
    """A parsed codebook: variables in order, the declarations (``meta``), the data
    file's name, its charset, and for a hierarchical file the record type column's
    place and the key variable."""

    variables: list
    meta: FileMeta
    data_name: str
    charset: str = "latin-1"
    hierarchical: bool = False
    rectype: DdiVar | None = None
    key: str | None = None
    extra: dict = field(default_factory=dict)


def is_ddi(path: str) -> bool:
    return Path(path).suffix.lower() == ".xml"


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _children(node, name):
    return [c for c in node if _local(c.tag) == name]


def _child(node, name):
    found = _children(node, name)
    return found[0] if found else None


def _text(node, name) -> str | None:
    c = _child(node, name) if node is not None else None
    return c.text.strip() if c is not None and c.text is not None else None


def parse_ddi(path: str) -> Ddi:
    """The codebook at ``path``; one line when it is not a DDI codebook IPUMS writes."""
    try:
        root = ET.parse(path).getroot()
    except (ET.ParseError, OSError) as exc:
        raise EngineError(f"cannot read {path}: not a DDI codebook ({first_line(exc)})") from None
    data = next((n for n in root.iter() if _local(n.tag) == "dataDscr"), None)
    txt = next((n for n in root.iter() if _local(n.tag) == "fileTxt"), None)
    if _local(root.tag) != "codeBook" or data is None or txt is None:
        raise EngineError(f"cannot read {path}: not a DDI codebook (no codeBook with fileDscr and dataDscr)")
    variables, cols = [], {}
    for v in _children(data, "var"):
        var, meta = _variable(v, path)
        variables.append(var)
        cols[var.name] = meta
    strc = _child(txt, "fileStrc")
    hierarchical = strc is not None and strc.get("type") == "hierarchical"
    charset = (_child(txt, "fileType").get("charset") if _child(txt, "fileType") is not None else None) or "latin-1"
    ddi = Ddi(variables, FileMeta("ipums", [], cols), _text(txt, "fileName") or Path(path).stem + ".dat",
              charset=charset, hierarchical=hierarchical)
    if hierarchical:
        groups = _children(strc, "recGrp")
        recid = next((g.get("recidvar") for g in groups if g.get("recidvar")), "RECTYPE")
        ddi.key = next((g.get("keyvar") for g in groups if g.get("keyvar")), None)
        ddi.rectype = next((x for x in variables if x.name == recid), None)
        if ddi.rectype is None:
            raise EngineError(f"cannot read {path}: a hierarchical codebook without its record type variable {recid!r}")
        names = [x.name for x in variables if x is not ddi.rectype]
    else:
        names = [x.name for x in variables]
    ddi.meta.columns = names
    ddi.meta.cols = {c: cols[c] for c in names}
    return ddi


def _variable(v, path: str) -> tuple[DdiVar, ColumnMeta]:
    name = v.get("name") or v.get("ID")
    loc = _child(v, "location")
    if not name or loc is None or loc.get("StartPos") is None:
        raise EngineError(f"cannot read {path}: variable {name!r} has no location")
    start = int(loc.get("StartPos"))
    end = int(loc.get("EndPos") or start + int(loc.get("width")) - 1)
    fmt = _child(v, "varFormat")
    numeric = fmt is None or fmt.get("type") != "character"
    decimals = int(v.get("dcml") or 0)
    var = DdiVar(name, start - 1, end - start + 1, decimals, numeric, tuple((v.get("rectype") or "").split()))

    def code(text):
        if not numeric:
            return text
        try:
            x = int(text)
        except ValueError:
            x = float(text)
        return x / 10 ** decimals if decimals else x

    values, missing, ranges = {}, [], []
    for c in _children(v, "catgry"):
        val = _text(c, "catValu")
        if val is None:
            continue
        try:
            value = code(val)
        except ValueError:
            continue  # (a category the data cannot hold: "N/A" on a numeric field)
        values[value] = _text(c, "labl") or val
        if (c.get("missing") or "").upper() == "Y":
            missing.append(value)
    for inv in _children(v, "invalrng"):
        for it in _children(inv, "item"):
            if it.get("VALUE") is not None:
                missing.append(code(it.get("VALUE")))
        for r in _children(inv, "range"):
            lo, hi = r.get("min"), r.get("max")
            if lo is not None and hi is not None:
                ranges.append((code(lo), code(hi)))
    return var, ColumnMeta(label=_text(v, "labl"), values=values, missing=tuple(missing), ranges=tuple(ranges))


def data_file(path: str, ddi: Ddi) -> str:
    """The data file beside the codebook: its ``fileName`` (``.dat``) or that name
    gzipped, else the codebook's own name with ``.dat``/``.dat.gz``; one line when
    there is none."""
    folder = Path(path).parent
    stems = [ddi.data_name, Path(path).stem + ".dat"]
    for stem in dict.fromkeys(stems):
        for name in (stem, stem + ".gz"):
            if (folder / name).is_file():
                return str(folder / name)
    raise EngineError(f"cannot read {path}: its data file {ddi.data_name} (or {ddi.data_name}.gz) is not beside it")


def read_meta(path: str) -> FileMeta:
    return parse_ddi(path).meta


def _lines(f, n: int):
    """``n`` lines of the open text file ``f`` (fewer at its end), line ends off."""
    return [s.rstrip("\r\n") for s in itertools.islice(f, n)]


def _columns(text: pl.Series, variables, first_line_no: int, label: str) -> pl.DataFrame:
    """Lines cut into typed columns; a field that is not a number in a numeric variable
    is one line naming the variable and the line (lines counted from 1)."""
    frame = pl.DataFrame({"line": text})
    exprs = []
    for v in variables:
        field = pl.col("line").str.slice(v.start, v.width).str.strip_chars(" ")
        field = pl.when(field == "").then(None).otherwise(field)
        exprs.append(field.alias(v.name))
    raw = frame.select(exprs)
    out = []
    for v in variables:
        s = raw.get_column(v.name)
        if not v.numeric:
            out.append(s)
            continue
        typed = s.cast(pl.Int64, strict=False)
        bad = typed.is_null() & s.is_not_null()
        if bad.any():
            i = int(bad.arg_max())
            raise EngineError(f"cannot read {label}: variable {v.name!r} is not a number at line "
                              f"{first_line_no + i}: {s[i]!r}")
        out.append(typed / 10 ** v.decimals if v.decimals else typed)
    return pl.DataFrame(out)


def _open_text(path: str, charset: str):
    raw = gzip.open(path, "rb") if path.lower().endswith(".gz") else open(path, "rb")
    return io.TextIOWrapper(raw, encoding=_codec(charset), newline="")


def _codec(charset: str) -> str:
    try:
        return codecs.lookup(charset).name
    except LookupError:
        return "latin-1"


def to_parquet(path: str, label: str, folder) -> str:
    """Convert the extract whose codebook is ``path`` into a private temporary Parquet
    file in ``folder`` (None: the system's temporary folder), streamed; return its path."""
    ddi = parse_ddi(path)
    data = data_file(path, ddi)
    tmp = private_file(folder if folder is not None else _system_tmp(), Path(path).stem + ".parquet")
    writer = None
    try:
        with _open_text(data, ddi.charset) as f:
            for frame in (_hierarchical(f, ddi, label) if ddi.hierarchical else _rectangular(f, ddi, label)):
                table = frame.to_arrow()
                if writer is None:
                    schema = table.schema.with_metadata({META_KEY: ddi.meta.json_bytes()})
                    writer = pq.ParquetWriter(tmp, schema, compression="zstd", compression_level=1)
                writer.write_table(table.cast(schema), row_group_size=65_536)
        if writer is None:
            raise EngineError(f"cannot read {label}: its data file {data} has no records")
    except EngineError:
        _discard(tmp, writer)
        raise
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        _discard(tmp, writer)
        raise EngineError(f"cannot read {data}: {first_line(exc)}") from None
    writer.close()
    return tmp


def _discard(tmp, writer) -> None:
    if writer is not None:
        try:
            writer.close()
        except Exception:  # (the file is removed anyway)
            pass
    try:
        os.unlink(tmp)
    except OSError:
        pass


def _system_tmp() -> str:
    return tempfile.gettempdir()


def _rectangular(f, ddi: Ddi, label: str):
    done = 0
    while True:
        lines = _lines(f, LINES)
        if not lines:
            return
        yield _columns(pl.Series("line", lines, dtype=pl.String), ddi.variables, done + 1, label)
        done += len(lines)


def _hierarchical(f, ddi: Ddi, label: str):
    """Person rows with their household's variables (see the module docstring)."""
    rt = ddi.rectype
    h_vars = [v for v in ddi.variables if v is not rt and "H" in v.rectypes and "P" not in v.rectypes]
    p_vars = [v for v in ddi.variables if v is not rt and v not in h_vars]
    key = next((v for v in ddi.variables if v.name == ddi.key), None) if ddi.key else None
    order = ddi.meta.columns
    carry = None  # the last household line of the previous chunk, and its line number
    done = 0
    while True:
        lines = _lines(f, LINES)
        if not lines:
            return
        frame = pl.DataFrame({"line": pl.Series(lines, dtype=pl.String)}).with_row_index("no", offset=done + 1)
        if carry is not None:
            frame = pl.concat([carry, frame])
        kind = pl.col("line").str.slice(rt.start, rt.width).str.strip_chars(" ")
        frame = frame.with_columns(kind.alias("rt"))
        other = frame.filter(~pl.col("rt").is_in(["H", "P"]))
        if other.height:
            raise EngineError(f"cannot read {label}: line {other['no'][0]} has record type {other['rt'][0]!r} "
                              f"(this reader takes household H and person P records)")
        frame = frame.with_columns(pl.when(pl.col("rt") == "H").then(pl.col("no")).forward_fill().alias("hh"))
        persons = frame.filter(pl.col("rt") == "P")
        orphan = persons.filter(pl.col("hh").is_null())
        if orphan.height:
            raise EngineError(f"cannot read {label}: person record at line {orphan['no'][0]} has no household record "
                              f"before it")
        homes = frame.filter(pl.col("rt") == "H")
        carry = homes.tail(1).select("no", "line")
        if persons.height:
            p = _columns(persons["line"], p_vars, int(persons["no"][0]), label).with_columns(persons["hh"])
            h = _columns(homes["line"], h_vars + ([key] if key is not None and key in p_vars else []),
                         int(homes["no"][0]), label)
            h = h.with_columns(homes["no"].alias("hh"))
            if key is not None and key in p_vars:
                h = h.rename({key.name: "__key"})
            joined = p.join(h, on="hh", how="left", maintain_order="left")
            if key is not None and key in p_vars:
                wrong = joined.filter(pl.col(key.name) != pl.col("__key"))
                if wrong.height:
                    at = persons.filter(pl.col("hh") == wrong["hh"][0])["no"][0]
                    raise EngineError(f"cannot read {label}: person record at line {at} has {key.name} "
                                      f"{wrong[key.name][0]} but its household record {wrong['__key'][0]}")
            yield joined.select(order)
        done += len(lines)
