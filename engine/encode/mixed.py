"""Mixed-type quasi-identifiers for the MDAV family (heterogeneous microaggregation).

After Domingo-Ferrer & Torra, "Ordinal, continuous and heterogeneous k-anonymity
through microaggregation" (Data Mining and Knowledge Discovery 11, 2005). Each QI
has a kind:

* **numeric** (integers, floats): z-score, published as the group's mean (Float64);
* **date** (Date, Datetime): numeric on the epoch value (days, or the Datetime's
  unit), published as the group's mean rounded to the nearest unit (half to even),
  in the column's own type;
* **ordinal** (``--ordinal``): distance by rank difference, published as the
  group's (lower) median category;
* **nominal** (String, Categorical, Enum, Boolean): distance 0 (equal) or 1
  (different), published as the group's mode, ties to the first category of the
  sorted dictionary.

Every record is *encoded* into a numeric vector whose squared Euclidean distances
are the heterogeneous distance, so that every grouping kernel (exact MDAV, leaves,
polish, refinement, stitching) runs unchanged on the encoded columns:

* numeric / date: ``z * sqrt(w)``;
* ordinal: the rank z-scored, ``* sqrt(w)``;
* nominal: with at most ``ONE_HOT_MAX`` categories one-hot ``* sqrt(w / 2)`` (two
  different categories: squared distance ``w``; equal: 0); with more, ``EMBED_DIMS``
  columns holding a fixed random unit vector per category ``* sqrt(w / 2)`` (equal:
  0; different: ``w`` on average), so that the per-row cost does not grow with the
  number of categories (3,000 municipalities, 100,000 codes).

**Grouped by the codes** (``Mixed.coded``, ``tuning.CODED_NOMINAL``). The embedding makes
two different categories differ by ``w`` only on average. The fast path's streamed MDAV
leaves (``kernels.mdav.coded``) and the seam stage's polish (``kernels.search.coded``)
take an embedded QI by its *code* instead, with the exact distance of its one-hot vector
(``w`` between different categories, and to a group's centroid from the group's code
counts), and its embedding columns only guide their kd cuts and near lists. The other
kernels (exact MDAV, V-MDAV / IV-MDAV, the leaves that start a polish, the in-memory
polish up to 2M rows, refinement) still group on the embedding
(docs/notes/mixed-types.md).

**Missing values** (docs/notes/missing-values.md). A nominal QI's missing value is a
category of its own. A numeric, date or ordinal QI with missing values gets a
missing-value indicator column (``* sqrt(w)``: a record with a value and one without
differ by ``w``, as two categories do), and a missing cell stands at the mean of the
values present (``encode.missing``). Published: the group's mean (median) of the
values present, so a missing cell in a group with values is *imputed*; a group with
none publishes a missing value. Within a class every row shows the same value, a
missing one counted as a value.

The weights ``w`` default to 1. The grouping centroid is the encoded mean; what is
published is the mode / median, computed from each group's codes
(``kernels.groups.group_picks``; see docs/notes/mixed-types.md).

What the MDAV family's flow (``engine.methods.centroids.CentroidFlow``) calls:
``plan`` (after the schema checks: the dictionary pass and the encoded source, or
None when every QI is numeric and complete and no option asks for the mixed path),
``Mixed.publisher`` (the write pass's published values and information loss:
``encode.publish``) and ``Mixed.summary`` (the report's ``metrics["mixed"]``).
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import polars as pl

from ..errors import EngineError
from ..frames import Moments, Profile, bad_value_error, frame_to_columns, sample_row_groups
from ..io.source import numeric_values
from ..kernels.groups import compact_group_sums, group_picks, standardize_codes
from ..progress import Progress
from ..tuning import CODED_NOMINAL, EMBED_DIMS, ONE_HOT_MAX
from .dictionary import Categorical, dictionary_indices, indices_codes, learn, text_codes, unseen
from .codes import mask_codes, resolve_missing
from .kinds import KINDS, is_number, kind_of
from .missing import scan_missing
from .source import EncodedSource

_SEP = "\x1f"  # in the encoded columns' names (never shown: the errors name the QI)
_EMBED_SEED = 20050101  # the embedding's unit vectors: a fixed function of the category count
# an encoded column's source: 0 the value (a missing one: the QI's fill), 1 the missing-value
# indicator, 2 a category's coordinate (``QI.table``)
VALUE, MISSING, TABLE = 0, 1, 2
_CODED_NOTE = "; its codes in the fast path's leaves and the seam polish"  # (``Mixed.coded``)


@dataclass
class QI:
    """One quasi-identifier: its kind, input type, weight, dictionary, missing values and encoded columns."""

    name: str
    kind: str
    dtype: object
    weight: float = 1.0
    categories: list | None = None  # texts: nominal sorted, ordinal in order (Boolean: "false"/"true")
    nulls: int = 0  # missing values in the input
    fill: float = 0.0  # numeric, date, ordinal with missing values: where a missing cell stands (mean present)
    first: int = 0  # its first encoded column
    width: int = 1  # its encoded columns
    table: np.ndarray | None = None  # nominal: (codes, width) each code's coordinates
    counts: np.ndarray | None = None  # each category's rows, as the dictionary pass counted them (``plan(counts=)``)
    codes: tuple = ()  # a numeric QI's declared missing codes (``--missing``: read as missing, published as a code)

    _enum: object = field(default=None, init=False, repr=False, compare=False)
    _index: tuple | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def enum(self):
        """The dictionary as an Enum type: a cast to it gives each value's code."""
        if self._enum is None:
            self._enum = pl.Enum(self.categories)
        return self._enum

    @property
    def index(self) -> tuple:
        """Each category's code (text -> int), and the NumPy type of the Enum's codes."""
        if self._index is None:
            self._index = ({c: i for i, c in enumerate(self.categories)},
                           pl.Series([], dtype=self.enum).to_physical().to_numpy().dtype)
        return self._index

    @property
    def null_code(self) -> int:
        """A nominal QI's code of a missing value (after its categories), else -1."""
        return len(self.categories) if self.kind == "nominal" and self.nulls else -1

    @property
    def m(self) -> int:
        """Codes: the categories (and a nominal QI's missing value); 0 for numbers and dates."""
        if self.categories is None:
            return 0
        return len(self.categories) + (1 if self.null_code >= 0 else 0)

    @property
    def embedded(self) -> bool:
        return self.kind == "nominal" and self.m > ONE_HOT_MAX

    def domain(self) -> pl.Series:
        """The codes' values as a Series of the column's own type (published values are
        gathered from it); with missing values a null after the categories."""
        cats = list(self.categories) + ([None] if self.nulls else [])
        if self.dtype == pl.Boolean:
            return pl.Series(self.name, [None if c is None else c == "true" for c in cats], dtype=pl.Boolean)
        return pl.Series(self.name, cats, dtype=pl.String).cast(self.dtype)


def plan(source, cfg, chunk_rows: int, passes: dict | None = None, counts: bool = False):
    """The mixed path of a run, or None when every QI is numeric and complete and
    neither ``ordinal`` nor ``weights`` is given (the numeric path, unchanged).
    ``counts``: the dictionary pass also counts a nominal QI's categories (an ordinal
    QI's always are), kept as ``QI.counts`` (the report's distributions).

    Finds the numeric and date QIs' missing values (``encode.missing``), learns each
    categorical QI's dictionary in one pass over those columns (and an ``@column``
    order's column), checks it (values outside an ordinal order, a QI missing in every
    row), and returns ``Mixed``."""
    schema = source.schema
    ordinal = {c: (order, by) for c, order, by in cfg.ordinal or ()}
    weights = dict(cfg.weights or ())
    nominal = set(cfg.nominal or ())
    qis = [QI(c, kind_of(c, schema[c], c in ordinal, c in nominal), schema[c], weights.get(c, 1.0)) for c in cfg.qi]
    declared = resolve_missing(cfg.missing, {q.name: (q.kind, q.dtype) for q in qis}, source.label)
    for q in qis:
        q.codes = declared.get(q.name, ()) if q.kind == "numeric" else ()
    t = time.perf_counter()
    numbers = [q.name for q in qis if q.kind in ("numeric", "date")]
    missing = scan_missing(source, numbers, chunk_rows, {q.name: q.codes for q in qis if q.codes}) if numbers else {}
    if all(q.kind == "numeric" for q in qis) and not ordinal and not weights and not missing:
        return None
    mixed = [q.name for q in qis if q.kind != "numeric"] or list(missing)
    if cfg.method == "ama":
        if mixed[0] in missing:
            raise EngineError(f"column {mixed[0]!r} has missing values; method ama groups complete numeric "
                              f"quasi-identifiers only (missing values: mdav, mdav-single, vmdav, ivmdav)")
        raise EngineError(f"column {mixed[0]!r} is not numeric ({schema[mixed[0]]}); method ama groups numeric "
                          f"quasi-identifiers only (mixed types: mdav, mdav-single, vmdav, ivmdav)")
    if cfg.select is not None:
        raise EngineError(f"select (--select) does not apply to mixed-type quasi-identifiers or missing values "
                          f"(column {mixed[0]!r}): the dependency tree is measured on complete numbers")
    by_cols = {c: by for c, (order, by) in ordinal.items() if by is not None}
    for c, by in by_cols.items():
        if by not in schema:
            raise EngineError(f"ordinal (--ordinal): column {by!r} (the order of {c!r}) not found in {source.label}")
        if not is_number(schema[by]) and not (source.kind == "csv" and schema[by] == pl.String):
            raise EngineError(f"ordinal (--ordinal): column {by!r} (the order of {c!r}) is not numeric ({schema[by]})")
    cats = []
    for q in qis:
        if q.kind == "nominal":
            cats.append(Categorical(q.name, q.dtype, missing=True, count=counts))
        elif q.kind == "ordinal":
            order, by = ordinal[q.name]
            cats.append(Categorical(q.name, q.dtype, ordinal=True, order=None if order is None else tuple(order),
                                    by=by, count=True, missing=True))
    # texts in code-point order (ordinal QIs in their own), String columns of a Parquet
    # input from the pages' dictionaries: each QI's codes (``dictionary``)
    found = learn(source, cats, chunk_rows, order="text")
    if passes is not None and (cats or missing):
        passes["dictionary"] = time.perf_counter() - t
    for q in qis:
        if q.name in missing:
            q.nulls, q.fill = missing[q.name]
        if q.kind in ("ordinal", "nominal"):
            d = found[q.name]
            q.categories = d.categories(source.label).to_list()
            q.nulls = d.nulls
            if d.spec.count:
                q.counts = d.counts()
            if not q.categories or (q.kind == "ordinal" and not d.counts().sum()):
                raise EngineError(f"column {q.name!r} is missing in every row: a quasi-identifier needs values "
                                  f"(drop it from --qi)")
            if q.kind == "ordinal" and q.nulls:  # a missing rank stands at the mean rank present
                present = d.counts()
                q.fill = float(np.dot(present, np.arange(len(present))) / present.sum())
    return Mixed(source, cfg, qis)


def embedding(m: int, dims: int) -> np.ndarray:
    """``m`` unit vectors in ``dims`` dimensions, a fixed function of ``m``: random
    directions (two differ by a squared distance of 2 on average, as two one-hot
    vectors do, and by 0 only if equal)."""
    E = np.random.default_rng([_EMBED_SEED, m, dims]).standard_normal((m, dims))
    return E / np.linalg.norm(E, axis=1, keepdims=True)


@dataclass(frozen=True)
class Coded:
    """``Mixed.coded``: the positions of the dense grouping columns, the compact columns
    (QIs) of the coded ones and their weights."""

    dense: np.ndarray
    qis: np.ndarray
    w: np.ndarray

    def codes(self, C: np.ndarray) -> np.ndarray:
        """Each compact row's code of each coded QI (int64)."""
        return np.ascontiguousarray(C[:, self.qis]).astype(np.int64)

    def order(self, cols: np.ndarray) -> np.ndarray:
        """``cols`` with the dense columns first (``kernels.search.coded``'s layout)."""
        rest = np.setdiff1d(np.arange(cols.shape[0]), self.dense)
        return cols[np.concatenate([self.dense, rest])]


class Mixed:
    """A run's mixed QIs: the encoded source and config the grouping runs on, the
    grouping columns, and the publisher of the write pass."""

    def __init__(self, base, cfg, qis: list[QI]):
        self.qis = qis
        self.original = cfg
        self.names: list[str] = []
        src, mode, fill, off, tables = [], [], [], [], []
        width = 0
        for j, q in enumerate(qis):
            q.first = len(self.names)
            if q.kind == "nominal":
                if q.embedded:
                    q.table = embedding(q.m, EMBED_DIMS)
                    self.names += [f"{q.name}{_SEP}e{t}" for t in range(EMBED_DIMS)]
                else:
                    q.table = np.eye(q.m)
                    self.names += [q.name + _SEP + ("(missing)" if c is None else c)
                                   for c in q.categories + ([None] if q.nulls else [])]
                for t in range(q.table.shape[1]):
                    src.append(j), mode.append(TABLE), fill.append(0.0), off.append(width)
                    tables.append(q.table[:, t])
                    width += q.m
            else:
                self.names.append(q.name + (_SEP + "rank" if q.kind == "ordinal" else ""))
                src.append(j), mode.append(VALUE), fill.append(q.fill), off.append(-1)
                if q.nulls:
                    self.names.append(q.name + _SEP + "missing")
                    src.append(j), mode.append(MISSING), fill.append(0.0), off.append(-1)
            q.width = len(self.names) - q.first
        self.src = np.array(src, np.int64)  # encoded column -> its QI (``owner``)
        self.owner = self.src
        self.mode = np.array(mode, np.int64)
        self.fill = np.array(fill, np.float64)
        self.off = np.array(off, np.int64)
        self.table = np.concatenate(tables) if tables else np.zeros(0)
        self.grouping = np.arange(len(self.names), dtype=np.int64)
        # the numeric and date QIs, and the categorical ones: ``published_sums``
        self.values = np.array([j for j, q in enumerate(qis) if q.kind in ("numeric", "date")], np.int64)
        self.cats = np.array([j for j, q in enumerate(qis) if q.categories is not None], np.int64)
        self.cfg = dataclasses.replace(cfg, qi=tuple(self.names))
        self.source = EncodedSource(base, self)
        self.raw: Profile | None = None  # the encoded columns' measured profile (before the weights)

    @property
    def loss_width(self) -> int:
        """The workers' per-QI sums (``published_sums``' third): the loss, then the
        imputed, kept-missing and suppressed cells of each categorical QI."""
        return 4 * len(self.qis)

    # --- encoding ----------------------------------------------------------------------

    def codes(self, q: QI, s: pl.Series, offset: int) -> pl.Series:
        """The compact column of categorical QI ``q`` from its values ``s``: each value's
        code (the Enum's unsigned integers); a missing value: a nominal QI's null code,
        an ordinal QI's null. A value the dictionary pass did not see (the input changed
        during the run) is an error naming the row (``dictionary.text_codes``)."""
        if not (q.nulls and s.null_count()):
            return pl.Series(q.name, text_codes(q.name, q.enum, s, offset, self.source.label, True))
        miss = s.is_null()
        codes = text_codes(q.name, q.enum, s.cast(pl.String).fill_null(q.categories[0]), offset, self.source.label,
                           True)
        out = pl.Series(q.name, codes, dtype=pl.Int64)
        if q.kind == "nominal":
            return out.set(miss, q.null_code)
        return out.set(miss, None)

    def dictionary_codes(self, q: QI, arr, offset: int) -> pl.Series:
        """``codes`` of a pyarrow DictionaryArray (a Parquet column's dictionary indices,
        ``Source.iter_dictionary``): its few texts mapped to codes once, then each
        row's index; the same errors (``dictionary.indices_codes``)."""
        index, dtype = q.index
        if not (q.nulls and arr.null_count):
            return pl.Series(q.name, indices_codes(q.name, index, dtype, arr, offset, self.source.label))
        texts = arr.dictionary.to_pylist()
        lut = np.array([index.get(t, -1) for t in texts] + [max(q.null_code, 0)], np.int64)  # (ordinal: set null below)
        valid = arr.is_valid().to_numpy(zero_copy_only=False)
        codes = lut[np.where(valid, dictionary_indices(arr), len(texts))]
        bad = np.flatnonzero(codes == -1)
        if bad.shape[0]:
            i = int(bad[0])
            raise unseen(q.name, texts[int(arr.indices[i].as_py())], offset + i, self.source.label)
        out = pl.Series(q.name, codes, dtype=pl.Int64)
        return out if q.kind == "nominal" else out.set(pl.Series(~valid), None)

    # --- the encoding of ``EncodedSource`` ----------------------------------------------

    @property
    def schema(self) -> pl.Schema:
        """The encoded columns, all Float64."""
        return pl.Schema({n: pl.Float64 for n in self.names})

    def reads(self, names) -> tuple[list, bool]:
        """The QI columns that give the encoded columns ``names``; text columns through
        Polars' own Parquet reader (``Source.iter_frames(native=True)``): it decodes
        strings with about half pyarrow's CPU time."""
        want = set(names)
        read = [q.name for q in self.qis if want.intersection(self.names[q.first: q.first + q.width])]
        return read, any(q.kind in ("ordinal", "nominal") for q in self.qis if q.name in read)

    def encoded(self, frame: pl.DataFrame, offset: int, names) -> pl.DataFrame:
        """The encoded columns ``names`` (Float64) of a chunk of the QI columns."""
        return self.encode(frame, offset, names).select(names)

    def compact_reads(self) -> tuple[list, list, bool]:
        """What ``compact`` reads: every QI; the String categorical ones as dictionary
        indices where the input allows (``Source.iter_dictionary``)."""
        return ([q.name for q in self.qis], [q.name for q in self.qis if q.m and q.dtype == pl.String],
                any(q.kind in ("ordinal", "nominal") for q in self.qis))

    def encode(self, frame: pl.DataFrame, offset: int, want: Sequence[str] | None = None) -> pl.DataFrame:
        """The encoded columns (Float64) of a chunk of the QI columns; ``want``: only those."""
        want = self.names if want is None else list(want)
        read = [q.name for q in self.qis if set(want).intersection(self.names[q.first: q.first + q.width])]
        C = frame_to_columns(self.compact(frame.select(read), offset, only=read), read)
        cols = np.array([self.names.index(n) for n in want], np.int64)
        where = {q.name: j for j, q in enumerate(self.qis)}
        full = np.full((len(self.qis), frame.height), np.nan)
        for i, c in enumerate(read):
            full[where[c]] = C[i]
        out = np.empty((len(cols), frame.height))
        self.expand_columns(full, cols, out)
        return pl.DataFrame({n: out[i] for i, n in enumerate(want)})

    def compact(self, frame: pl.DataFrame | None, offset: int, arrays: dict | None = None,
                only: Sequence[str] | None = None) -> pl.DataFrame:
        """One column a QI (named as the QI): numeric ones as read, dates as their
        epoch values, categorical ones as their category codes (``codes``); a missing
        value null (a nominal QI's: its code). ``expand`` turns them into the encoded
        columns. ``arrays``: the String QIs as dictionary arrays
        (``Source.iter_dictionary``), not in ``frame``. ``only``: those QIs."""
        cols = []
        for q in self.qis:
            if only is not None and q.name not in only:
                continue
            if arrays is not None and q.name in arrays:
                cols.append(self.dictionary_codes(q, arrays[q.name], offset))
                continue
            s = frame.get_column(q.name)
            if q.kind in ("numeric", "date"):
                if q.kind == "date":
                    s = s.to_physical()
                if q.codes:  # declared missing codes: missing values (``encode.codes``)
                    s = mask_codes(s, q.codes)
                if q.nulls and s.dtype.is_float():  # (NaN is no missing value: pass 1's error)
                    bad = (~s.is_finite()).fill_null(False).arg_true()
                    if bad.len():
                        raise bad_value_error(q.name, s, int(bad[0]), offset)
                cols.append(s)
            else:
                cols.append(self.codes(q, s, offset))
        return pl.DataFrame(cols)

    def expand(self, C: np.ndarray) -> np.ndarray:
        """The encoded rows (n, encoded columns) float64, C-contiguous, of compact rows
        ``C`` (n, QIs) (``compact``'s columns as float64, missing values NaN)."""
        X = np.empty((C.shape[0], len(self.names)))
        self.expand_columns(np.ascontiguousarray(C.T), self.grouping, X.T)
        return X

    def expand_columns(self, C: np.ndarray, used: np.ndarray, out: np.ndarray) -> np.ndarray:
        """The encoded columns ``used`` of compact columns ``C`` (QIs, n), column-major,
        into ``out`` (encoded columns, >= n); the other columns of ``out`` are left as
        they are (the partition plan's routing reads only the columns it compares)."""
        n = C.shape[1]
        out = out[:, :n]
        for c in used:
            x = C[self.src[c]]
            if self.mode[c] == VALUE:
                out[c] = x
                if self.qis[self.src[c]].nulls:
                    out[c][np.isnan(x)] = self.fill[c]
            elif self.mode[c] == MISSING:
                np.isnan(x, out=out[c], casting="unsafe")
            else:
                q = self.qis[self.src[c]]
                np.take(self.table[self.off[c]: self.off[c] + q.m], x.astype(np.intp), out=out[c])
        return out

    def profile_pass(self, chunk_rows: int, progress: bool, rows: int, stride: int = 0) -> Profile:
        """``passes.profile.profile_columns`` on the encoded columns, from one read of the
        compact columns (``compact``, ``MixedMoments``), with every ``stride``-th row
        (expanded) as the plan's sample."""
        def measure(scale):
            m = MixedMoments(self, scale)
            samples, ids = [], []
            with Progress("profile", rows, progress) as bar:
                for offset, frame in self.source.iter_codes(chunk_rows):
                    X = m.add(frame, offset)
                    if stride:
                        take = np.arange((-offset) % stride, frame.height, stride)
                        samples.append(X[:, take].T)
                        ids.append(take + offset)
                    bar.update(m.n)
            return m, samples, ids

        m, samples, ids = measure(None)
        if m.n == 0:
            raise EngineError(f"{self.source.label} has no rows")
        scale = m.rescale()
        if scale is not None:  # as profile_columns: measured again in units of a power of two
            m, samples, ids = measure(scale)
        if not samples:
            return m.profile()
        return m.profile((self.expand(np.concatenate(samples)), np.concatenate(ids)))

    def sample_row_groups(self, rows: int, stride: int):
        """``frames.sample_row_groups`` for the encoded columns: the compact
        columns of the sampled rows, expanded; None as there (not Parquet, a missing
        value in the sample, ...)."""
        names = [q.name for q in self.qis]
        got = sample_row_groups(self.source.base, names, rows, stride,
                                lambda frame, first: frame_to_columns(self.compact(frame, first), names))
        return None if got is None else (self.expand(got[0]), got[1])

    def adjust(self, profile: Profile) -> Profile:
        """The measured profile of the encoded columns -> the one that standardizes
        them into the mixed distance's coordinates (``z = (x / scale - mean) / sd``):
        numeric, date, ordinal rank: sd / sqrt(w); missing-value indicator: mean 0,
        sd sqrt(1 / w); a nominal QI's columns: mean 0, sd sqrt(2 / w)."""
        self.raw = profile
        mean, sd, scale = profile.mean.copy(), profile.sd.copy(), profile.scale.copy()
        for c in range(len(self.names)):
            w = self.qis[self.src[c]].weight
            if self.mode[c] == VALUE:
                sd[c] = sd[c] / math.sqrt(w)
            else:
                mean[c], scale[c] = 0.0, 1.0
                sd[c] = math.sqrt((1.0 if self.mode[c] == MISSING else 2.0) / w)
        return dataclasses.replace(profile, mean=mean, sd=sd, scale=scale)

    def state(self, rows: int) -> int | None:
        """Bytes of the whole-table state beside the row -> group map, for the memory
        budget (``budget.plan_budget(state=...)``): the group table, and the 8-byte-a-row
        temporary the numeric plan counts too. The blocks' workers reduce each group to
        its published values (``published_sums``: one a QI, and its size), which the
        publisher then uses as they are; a run that stitches the groups instead (the seam
        polish) keeps the encoded columns' means, and its publisher reads each
        categorical QI's codes (8 bytes a row each: ``encode.publish``). With ``refine``
        (which compacts the table: twice its size) None: the numeric plan's own figure."""
        cfg = self.original
        if cfg.refine is not None:
            return None
        stitched = cfg.effective_polish_rounds(rows) > 0
        width = len(self.names) if stitched else len(self.qis)
        extra = 8 * rows * (len(self.cats) + 1) if stitched else 0
        return (rows // cfg.k + 1) * (8 * width + 8) + 8 * rows + extra

    def standardized(self, C: np.ndarray, profile: Profile, cols: np.ndarray) -> np.ndarray:
        """``passes.partition.standardized(self.expand(C), profile, cols)`` (the workers'
        standardized rows) from compact rows ``C`` (n, QIs), without the expanded ones:
        the same values (``kernels.groups.standardize_codes``)."""
        out = np.empty((C.shape[0], cols.shape[0]))
        standardize_codes(np.ascontiguousarray(C), self.src, self.mode, self.fill, self.off, self.table,
                          profile.scale, profile.mean, profile.sd, cols, out)
        return out

    def coded(self, cols: np.ndarray) -> Coded | None:
        """The grouping columns ``cols`` as the coded kernels take them
        (``kernels.mdav.coded``, ``kernels.search.coded``): the embedded nominal QIs by
        their codes (exact one-hot distance, weight ``w``), the other columns dense; None
        without an embedded nominal QI among them (or ``tuning.CODED_NOMINAL`` off)."""
        if not CODED_NOMINAL:
            return None
        owner = self.src[cols]
        qis = [j for j in dict.fromkeys(owner.tolist()) if self.qis[j].embedded]
        if not qis:
            return None
        dense = np.flatnonzero(~np.isin(owner, qis)).astype(np.int64)
        return Coded(dense, np.array(qis, np.int64), np.array([self.qis[j].weight for j in qis], np.float64))

    def published_sums(self, C: np.ndarray, labels: np.ndarray, g: int, profile: Profile):
        """``(table, sizes, sums)`` of a unit's ``g`` groups (``labels``: each compact
        row's group) from compact rows ``C``: the published value of each group and QI
        (the mean of the numbers present, the date's rounded epoch value, the category
        code; NaN: missing), and per QI (``loss_width``) the categorical losses and
        missing-value counts (``group_picks``). Summed over the units, in any order,
        they are exact."""
        table = np.empty((g, len(self.qis)))
        sums = np.zeros(self.loss_width)
        C = np.ascontiguousarray(C)
        cnt = np.zeros(g, np.int64)
        if self.values.shape[0]:
            first = np.array([self.qis[j].first for j in self.values], np.int64)
            vs = np.zeros((g, self.values.shape[0]))
            present = np.zeros((g, self.values.shape[0]), np.int64)
            compact_group_sums(C, self.values, 1.0 / profile.scale[first], labels.astype(np.int64, copy=False),
                               vs, present, cnt)
            with np.errstate(invalid="ignore", divide="ignore"):
                vs /= present  # as groups_from_sums: then times the scale (0 / 0: NaN, none present)
            vs *= profile.scale[first]
            for v, j in enumerate(self.values):
                table[:, j] = vs[:, v] if self.qis[j].kind == "numeric" else np.rint(vs[:, v])
        else:
            cnt = np.bincount(labels, minlength=g).astype(np.int64)
        for j in self.cats:
            table[:, j], stats = self.picks(self.qis[j], C[:, j], labels, g)
            sums[j::len(self.qis)] = stats
        return table, cnt, sums

    def picks(self, q: QI, codes: np.ndarray, labels: np.ndarray, g: int) -> tuple[np.ndarray, np.ndarray]:
        """Each group's published code of categorical QI ``q`` (``group_picks``) and the
        QI's ``[loss, imputed, kept missing, suppressed]``."""
        out = np.empty(g)
        stats = np.zeros(4, np.int64)
        group_picks(labels.astype(np.int64, copy=False), np.ascontiguousarray(codes, np.float64), g,
                    q.kind == "ordinal", q.null_code, out, stats)
        return out, stats.astype(np.float64)

    # --- publishing ----------------------------------------------------------------------

    def publisher(self, groups):
        """The write pass's publisher (``encode.publish.Publisher``); it takes over
        ``groups.centroid`` (a table of groups x encoded columns, or of the workers'
        published values), keeps only the published values, and drops it."""
        # start-up: the publisher is only needed by the write pass (a module of its own)
        from .publish import Publisher

        pub = Publisher(self, groups)
        if hasattr(groups, "centroid"):  # (row-ordered published values hold no table: ``passes.published``)
            groups.centroid = None
        return pub

    def row_ordered(self) -> bool:
        """Whether a streamed run's published values may reach the write pass in row order,
        on disk (``passes.published.RowRecords``: one value a QI and row, as the workers'
        ``published_sums`` give them), with no row -> group map: not when the publisher
        needs each row's group for more (a Datetime QI's exact mean, ``exact_dates``; a
        numeric QI's declared missing codes, ``declared_codes``)."""
        return not any(q.codes or (q.kind == "date" and isinstance(q.dtype, pl.Datetime)) for q in self.qis)

    def summary(self, col_sse: np.ndarray, col_sst: np.ndarray, missing: dict | None = None) -> dict:
        """``metrics["mixed"]``: each QI's kind, weight, categories, encoding and missing
        values; information loss by kind."""
        il = {q.name: float(100.0 * col_sse[j] / col_sst[j]) if col_sst[j] > 0 else 0.0
              for j, q in enumerate(self.qis)}
        by_kind = {}
        for kind in KINDS:
            v = [il[q.name] for q in self.qis if q.kind == kind]
            if v:
                by_kind[kind] = float(np.mean(v))
        out = {
            "kinds": {q.name: q.kind for q in self.qis},
            "weights": {q.name: q.weight for q in self.qis},
            "categories": {q.name: len(q.categories) for q in self.qis if q.categories is not None},
            "encoding": {q.name: (f"embedded ({EMBED_DIMS} columns{_CODED_NOTE if CODED_NOMINAL else ''})"
                                  if q.embedded else "one-hot")
                         for q in self.qis if q.kind == "nominal"},
            "encoded_columns": len(self.names),
            "information_loss_by_kind": by_kind,
            "information_loss_measure": {"numeric": "100 SSE/SST on z-scores", "date": "100 SSE/SST on z-scores",
                                         "nominal": "percent of values changed",
                                         "ordinal": "100 x mean |rank change| / (m - 1)",
                                         "combined": "mean of the per-QI figures (QIs of one value count 0)",
                                         "missing": "numbers, dates and ranks: over the values present"},
        }
        if missing:
            out["missing_values"] = missing
        return out


class MixedMoments:
    """Pass 1's arithmetic (``frames.Moments``) on compact frames (``Mixed.compact``),
    fed chunk by chunk in row order: the moments of the numeric, date and ordinal QIs'
    values present (those without missing values bit for bit those of their encoded
    columns), the category counts of the categorical ones; ``profile`` gives the encoded
    columns' adjusted profile. Used by the profile pass and by the partition pass when it
    measures on its way."""

    def __init__(self, mixed: Mixed, scale: np.ndarray | None = None):
        self.mixed = mixed
        qis = mixed.qis
        self.names = [q.name for q in qis]
        self.scale = np.ones(len(qis)) if scale is None else scale
        self.measured = [j for j, q in enumerate(qis) if q.kind != "nominal" and not q.nulls]
        self.sparse = [j for j, q in enumerate(qis) if q.kind != "nominal" and q.nulls]
        cols = [self.names[j] for j in self.measured]
        self.moments = Moments(cols, self.scale[self.measured])
        self.each = {j: Moments([self.names[j]], self.scale[[j]]) for j in self.sparse}
        self.counts = [np.zeros(q.m, np.int64) for q in qis]
        self.missing = np.zeros(len(qis), np.int64)
        self.n = 0

    def add(self, frame: pl.DataFrame, offset: int) -> np.ndarray:
        """Check and add a compact chunk; return its columns (QIs, rows) float64, missing values NaN."""
        X = np.empty((len(self.names), frame.height))
        if self.measured:
            X[self.measured] = self.moments.add(frame, offset)
        for j in self.sparse:
            s = frame.get_column(self.names[j])
            X[j] = numeric_values(s)
            self.missing[j] += s.null_count()
            present = s.drop_nulls()
            if present.len():
                self.each[j].add(present.to_frame(), offset)
        for j, q in enumerate(self.mixed.qis):
            if q.m:
                codes = X[j] if q.kind == "ordinal" else frame.get_column(q.name).to_numpy()
                if q.kind == "ordinal" and q.nulls:
                    codes = codes[~np.isnan(codes)]
                self.counts[j] += np.bincount(codes.astype(np.intp), minlength=q.m)
                if q.kind == "nominal":
                    X[j] = codes
        self.n += frame.height
        return X

    def rescale(self) -> np.ndarray | None:
        """None when the sums are sound, else the scale of every QI to measure again in."""
        parts = [(self.measured, self.moments.rescale())] + [([j], self.each[j].rescale()) for j in self.sparse]
        if all(r is None for _, r in parts):
            return None
        scale = self.scale.copy()
        for js, r in parts:
            if r is not None:
                scale[js] = r
        return scale

    def profile(self, sample=(None, None)) -> Profile:
        """The encoded columns' profile, adjusted (``Mixed.adjust``). Values: their
        moments over the values present; the missing-value indicators and a nominal
        QI's columns: from the counts (``adjust`` sets their scales)."""
        mixed, n = self.mixed, self.n
        e = len(mixed.names)
        out = {k: np.zeros(e) for k in ("scale", "mean", "sd", "min", "max")}
        out["scale"][:] = 1.0
        profiles = []
        if self.measured:
            profiles.append((self.measured, self.moments.profile()))
        profiles += [([j], self.each[j].profile()) for j in self.sparse]
        for js, p in profiles:
            for i, j in enumerate(js):
                for k in out:
                    out[k][mixed.qis[j].first] = getattr(p, k)[i]
        for j, q in enumerate(mixed.qis):
            if q.nulls and q.kind != "nominal":
                share = self.missing[j] / n
                out["mean"][q.first + 1] = share
                out["sd"][q.first + 1] = math.sqrt(share * (1.0 - share))
                out["min"][q.first + 1], out["max"][q.first + 1] = float(share == 1.0), float(share > 0.0)
            if q.kind == "nominal":
                share = self.counts[j] / n
                used = self.counts[j] > 0
                for t in range(q.width):
                    v = q.table[:, t]
                    mu = float(share @ v)
                    out["mean"][q.first + t] = mu
                    out["sd"][q.first + t] = math.sqrt(max(float(share @ (v * v)) - mu * mu, 0.0))
                    out["min"][q.first + t], out["max"][q.first + t] = v[used].min(), v[used].max()
        full = Profile(tuple(mixed.names), n, out["scale"], out["mean"], out["sd"], out["min"], out["max"],
                       sample[0], sample[1])
        return mixed.adjust(full)
