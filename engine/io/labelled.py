"""Labelled inputs: SPSS, Stata, SAS and IPUMS files at the input boundary, and what
their declarations mean for a run.

``stat_input`` says whether a path is such a file; ``convert`` turns it into a
private temporary Parquet file (``engine.io.statfiles``, ``engine.io.ipums``) that the
engine then reads as any Parquet input, its declarations kept in the Parquet
schema's key-value metadata (key ``microagg.labels``, JSON: so a Parquet output of
the run keeps them too). ``file_meta`` gives a file's declarations (no rows read), or
those of a pandas frame read by pyreadstat whose metadata is in ``df.attrs["meta"]``.

``with_declarations`` builds the run's effective settings from the declarations of
its QIs, merged with the user's options (the user's win):

* **Missing codes**: a QI's declared missing values (SPSS user-missing values, a
  range's integer codes, DDI missing categories) become its ``missing`` codes
  (``engine.encode.codes``): never averaged, published as a declared code.
* **Codes that are categories**: a QI with value labels is nominal (``nominal``:
  published as one of its codes, never a mean) when its declarations say it is a
  category, unless ``--numeric`` names it. The rule: an SPSS measurement level
  "nominal" or "ordinal" is a category and "scale" is a number; otherwise a column is
  a category when at most half of its labelled values (declared missing codes left
  out) are labelled with the number itself ("1" for 1, "90 (90+ in 1980)" for 90):
  STATEFIP ("Alabama"), SEX ("Male") are categories; IPUMS' AGE, whose labels are
  "Less than 1 year old", "1", "2", ..., is a number.
* A labelled category or a declared missing code on a QI of a method that averages
  every QI (ama, maxent, mnqia) is refused in one line naming the column and
  ``--numeric``.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

import polars as pl

from ..errors import EngineError
from . import ipums, statfiles
from .statfiles import ColumnMeta, FileMeta

MAX_RANGE = 10_000  # integer codes a declared missing range may expand to
_NUMBER = re.compile(r"^\s*[-+]?\d+(\.\d+)?(?!\d)")


def stat_input(path) -> bool:
    """A statistical file (by its suffix) or a DDI codebook (``.xml``)."""
    if not isinstance(path, (str, os.PathLike)):
        return False
    text = os.fspath(path)
    return statfiles.stat_format(text) is not None or ipums.is_ddi(text)


def convert(path: str, label: str, folder) -> str:
    """The file as a private temporary Parquet file (the caller removes it)."""
    return ipums.to_parquet(path, label, folder) if ipums.is_ddi(path) else statfiles.to_parquet(path, label, folder)


def file_meta(data) -> FileMeta | None:
    """The declarations of ``data``: a statistical file or codebook's, a pandas frame's
    ``attrs["meta"]`` (pyreadstat's metadata), else None."""
    if isinstance(data, (str, os.PathLike)):
        text = os.fspath(data)
        if ipums.is_ddi(text):
            return ipums.read_meta(text)
        if statfiles.stat_format(text) is not None and os.path.isfile(text):
            return statfiles.read_meta(text)
        return None
    attrs = getattr(data, "attrs", None)
    if isinstance(attrs, dict) and attrs.get("meta") is not None and hasattr(attrs["meta"], "column_names"):
        return statfiles.meta_from_pyreadstat(attrs["meta"], "sav")
    return None


def is_category(m: ColumnMeta) -> bool:
    """The rule of the module docstring."""
    if m.measure in ("nominal", "ordinal"):
        return True
    if m.measure == "scale" or not m.values:
        return False
    labelled = [(v, t) for v, t in m.values.items() if not m.is_missing_code(v)]
    if not labelled:
        return False
    numbers = 0
    for v, t in labelled:
        found = _NUMBER.match(str(t))
        try:
            numbers += bool(found) and float(found.group(0)) == float(v)
        except (TypeError, ValueError):
            pass
    return numbers * 2 <= len(labelled)


def missing_codes(column: str, m: ColumnMeta) -> tuple:
    """A column's declared missing codes, its ranges' integer codes included; one line
    when a range is too wide to list."""
    codes = list(m.missing)
    for lo, hi in m.ranges:
        if not (float(lo).is_integer() and float(hi).is_integer()) or hi - lo >= MAX_RANGE:
            raise EngineError(f"column {column!r} declares the missing range {lo}..{hi}: only ranges of at most "
                              f"{MAX_RANGE} integer codes can be read (name its codes with --missing)")
        codes.extend(range(int(lo), int(hi) + 1))
    return tuple(dict.fromkeys(_whole(c) for c in codes))


def _whole(v):
    return int(v) if isinstance(v, float) and v.is_integer() else v


_MIXED = ("mdav", "mdav-single", "vmdav", "ivmdav")


def with_declarations(cfg, meta: FileMeta | None):
    """``cfg`` with the nominal QIs and missing codes the declarations add (module
    docstring); unchanged without declarations."""
    if meta is None:
        return cfg
    given_nominal, given_missing = tuple(cfg.nominal or ()), tuple(cfg.missing or ())
    nominal, missing = declared(meta, cfg.qi, numeric=cfg.numeric, nominal=cfg.nominal,
                                ordinal=[o[0] for o in cfg.ordinal or ()], missing=cfg.missing, method=cfg.method)
    if nominal == given_nominal and missing == given_missing:
        return cfg
    return dataclasses.replace(cfg, nominal=nominal or None, missing=missing or None)


def declared(meta: FileMeta | None, qi, *, numeric=(), nominal=(), ordinal=(), missing=(),
             method: str | None = None) -> tuple:
    """``(nominal, missing)`` of the QIs ``qi``: the user's (``missing`` as
    ``((column, codes), ...)``), then the categories and missing codes that the
    declarations ``meta`` add (module docstring; the user's win). ``method`` (anonymize's):
    refused when it would average them; None (verify, risk): not checked."""
    numeric, ordinal = set(numeric or ()), set(ordinal or ())
    given_nominal = tuple(nominal or ())
    given_missing = dict(missing or ())
    nominal, missing = list(given_nominal), dict(given_missing)
    for c in qi:
        m = meta.cols.get(c) if meta is not None else None
        if m is None:
            continue
        if c not in numeric and c not in ordinal and c not in given_nominal and is_category(m):
            if method is not None and method not in _MIXED:
                raise EngineError(f"column {c!r} carries value labels of categories: method {method} would "
                                  f"average its codes; use an MDAV-family method, or --numeric {c} to average it")
            nominal.append(c)
        codes = missing_codes(c, m)
        if codes and c not in given_missing:
            if method is not None and method not in _MIXED:
                raise EngineError(f"column {c!r} declares missing codes ({', '.join(map(str, codes[:5]))}): method "
                                  f"{method} would average them; use an MDAV-family method")
            missing[c] = codes
    return tuple(nominal), tuple((c, tuple(v)) for c, v in missing.items())


def stat_output(dest) -> str | None:
    """``"sav"`` or ``"dta"`` for an OUTPUT written by pyreadstat, else None."""
    if not isinstance(dest, (str, os.PathLike)):
        return None
    return statfiles.WRITABLE.get(Path(os.fspath(dest)).suffix.lower())


def check_stat_output(data, dest, fmt: str, memory_limit: int | None) -> FileMeta | None:
    """Before any work: pyreadstat is there, the input's value label sets fit ``fmt``,
    and the release, held in memory to be written, fits ``memory_limit`` (when the
    input's row count is known up front: a statistical file's header gives it; else
    ``write_release`` checks it before writing). Returns the input's declarations."""
    statfiles.pyreadstat_module()
    meta = file_meta(data)
    if meta is not None:
        statfiles.check_labels_fit(meta, fmt, {})
        if memory_limit is not None and meta.rows is not None:
            _check_fits(meta.rows, len(meta.columns) * 8 * 2, memory_limit, dest)
    return meta


def _check_fits(rows: int, need_per_row: int, memory_limit: int, dest) -> None:
    need = rows * need_per_row
    if need > memory_limit:
        raise EngineError(f"{os.fspath(dest)}: a .sav/.dta output is written from memory, about {need >> 20} MiB "
                          f"for {rows:,} rows, above the memory limit (--memory-limit {memory_limit >> 20} MiB): "
                          f"write .parquet, or raise the limit")


def write_release(parquet_tmp: str, dest_tmp: str, dest, fmt: str, meta: FileMeta | None,
                  memory_limit: int | None) -> None:
    """The finished release (Parquet, ``parquet_tmp``) written as ``fmt`` at ``dest_tmp``
    with the input's declarations ``meta``."""
    if memory_limit is not None:
        lf = pl.scan_parquet(parquet_tmp)
        schema = lf.collect_schema()
        rows = int(lf.select(pl.len()).collect().item())
        _check_fits(rows, statfiles.release_bytes(1, schema), memory_limit, dest)
    statfiles.write_stat(parquet_tmp, dest_tmp, fmt, meta, os.fspath(dest))
