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
* ordinal: the rank z-scored, ``* sqrt(w)``; i.e. ``rank / (m-1) * c * sqrt(w)``
  with ``c = 1 / sd(rank / (m-1))``, so an ordinal QI has unit variance as a
  numeric one does; plus m "carry" columns (one-hot, weight 0, not in the
  distance) whose group means are the per-(group, category) frequencies, from
  which the median is read;
* nominal: one-hot ``* sqrt(w / 2)`` (two different categories: squared distance
  ``w``; equal: 0).

The weights ``w`` default to 1. The grouping centroid is the encoded mean: for a
nominal QI the vector of category frequencies, for an ordinal QI the mean rank;
it approximates the paper's mode / median centroid during grouping only (see
docs/notes/mixed-types.md); what is published is the mode / median.

What the MDAV family's flow (``engine.methods.centroids.CentroidFlow``) calls:
``csv_types`` (how a CSV input's QIs are read: ``encode.kinds``),
``plan`` (after the schema checks: the dictionary pass and the encoded source, or
None when every QI is numeric and no option asks for the mixed path),
``Mixed.publisher`` (the write pass's published values and information loss) and
``Mixed.summary`` (the report's ``metrics["mixed"]``).
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
from ..io.source import numeric_values
from ..kernels.groups import column_sums, compact_group_sums, gather_columns, standardize_codes
from ..passes.partition import frame_to_columns, sample_row_groups
from ..passes.profile import Moments, Profile
from ..passes.stitch import aligned_zeros
from ..passes.write import finish_sums
from ..progress import Progress
from .dictionary import Categorical, indices_codes, learn, text_codes
from .kinds import KINDS, is_number, kind_of
from .source import EncodedSource

# A nominal or ordinal QI is one-hot encoded: its categories widen every block, the
# spill and the kernels' distance scans. Above these the run is refused (one line).
MAX_CATEGORIES = 100  # per QI
MAX_ENCODED = 256  # encoded columns in all
# Streamed runs spill one column a QI (numbers, category codes), not the encoded
# columns, and expand them to the encoded columns per block when it is read
# (``Mixed.expand``); the profile pass reads the same compact columns. False: the
# encoded columns all the way (the same output, more bytes; a test hook).
SPILL_CODES = True
_SEP = "\x1f"  # in the encoded columns' names (never shown: the errors name the QI)


@dataclass
class QI:
    """One quasi-identifier: its kind, input type, weight, dictionary and encoded columns."""

    name: str
    kind: str
    dtype: object
    weight: float = 1.0
    categories: list | None = None  # texts: nominal sorted, ordinal in order (Boolean: "false"/"true")
    first: int = 0  # its first encoded column
    width: int = 1  # its encoded columns

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
    def m(self) -> int:
        return len(self.categories) if self.categories is not None else 0

    def domain(self) -> pl.Series:
        """The categories as a Series of the column's own type (published values are gathered from it)."""
        if self.dtype == pl.Boolean:
            return pl.Series(self.name, [c == "true" for c in self.categories], dtype=pl.Boolean)
        return pl.Series(self.name, self.categories, dtype=pl.String).cast(self.dtype)


def plan(source, cfg, chunk_rows: int, passes: dict | None = None):
    """The mixed path of a run, or None when every QI is numeric and neither
    ``ordinal`` nor ``weights`` is given (the numeric path, unchanged).

    Learns each categorical QI's dictionary in one pass over those columns (and an
    ``@column`` order's column), checks it (missing values, values outside an
    ordinal order, too many categories), and returns ``Mixed``."""
    schema = source.schema
    ordinal = {c: (order, by) for c, order, by in cfg.ordinal or ()}
    weights = dict(cfg.weights or ())
    qis = [QI(c, kind_of(c, schema[c], c in ordinal), schema[c], weights.get(c, 1.0)) for c in cfg.qi]
    if all(q.kind == "numeric" for q in qis) and not ordinal and not weights:
        return None
    mixed = [q.name for q in qis if q.kind != "numeric"]
    if mixed and cfg.method == "ama":
        raise EngineError(f"column {mixed[0]!r} is not numeric ({schema[mixed[0]]}); method ama groups numeric "
                          f"quasi-identifiers only (mixed types: mdav, mdav-single, vmdav, ivmdav)")
    if mixed and cfg.select is not None:
        raise EngineError(f"select (--select) does not apply to mixed-type quasi-identifiers (column "
                          f"{mixed[0]!r} is {schema[mixed[0]]}): the dependency tree is measured on numbers")
    by_cols = {c: by for c, (order, by) in ordinal.items() if by is not None}
    for c, by in by_cols.items():
        if by not in schema:
            raise EngineError(f"ordinal (--ordinal): column {by!r} (the order of {c!r}) not found in {source.label}")
        if not is_number(schema[by]) and not (source.kind == "csv" and schema[by] == pl.String):
            raise EngineError(f"ordinal (--ordinal): column {by!r} (the order of {c!r}) is not numeric ({schema[by]})")
    cats = []
    for q in qis:
        if q.kind == "nominal":
            cats.append(Categorical(q.name, q.dtype))
        elif q.kind == "ordinal":
            order, by = ordinal[q.name]
            cats.append(Categorical(q.name, q.dtype, ordinal=True, order=None if order is None else tuple(order), by=by))
    t = time.perf_counter()
    # texts in code-point order (ordinal QIs in their own), String columns of a Parquet
    # input from the pages' dictionaries: each QI's codes (``dictionary``)
    found = learn(source, cats, chunk_rows, order="text", limit=MAX_CATEGORIES)
    if passes is not None and cats:
        passes["dictionary"] = time.perf_counter() - t
    first = 0
    for q in qis:
        q.first = first
        if q.kind in ("ordinal", "nominal"):
            q.categories = found[q.name].categories(source.label).to_list()
            q.width = q.m if q.kind == "nominal" else 1 + q.m  # (ordinal: the rank, then the carry columns)
        first += q.width
    if first > MAX_ENCODED:
        raise EngineError(f"the quasi-identifiers encode to {first} columns (categories one-hot), more than "
                          f"{MAX_ENCODED}: use fewer or coarser categorical quasi-identifiers")
    return Mixed(source, cfg, qis)


class Mixed:
    """A run's mixed QIs: the encoded source and config the grouping runs on, the
    grouping columns, and the publisher of the write pass."""

    def __init__(self, base, cfg, qis: list[QI]):
        self.qis = qis
        self.original = cfg
        self.names = []
        grouping = []
        for q in qis:
            if q.kind in ("numeric", "date"):
                self.names.append(q.name)
                grouping.append(q.first)
            elif q.kind == "ordinal":
                self.names.append(q.name + _SEP + "rank")
                self.names += [q.name + _SEP + "carry" + _SEP + c for c in q.categories]
                grouping.append(q.first)
            else:
                self.names += [q.name + _SEP + c for c in q.categories]
                grouping += range(q.first, q.first + q.width)
        self.grouping = np.array(grouping, np.int64)
        self.owner = np.array([j for j, q in enumerate(qis) for _ in range(q.width)], np.int64)  # encoded -> QI
        # each encoded column's code (one-hot and carry columns), else -1: ``standardize_codes``
        self.hot = np.full(len(self.names), -1.0)
        for q in qis:
            if q.kind in ("ordinal", "nominal"):
                a = q.first + (1 if q.kind == "ordinal" else 0)
                self.hot[a: a + q.m] = np.arange(q.m)
        # the numeric and date QIs, and the categorical ones (their codes' first slot): ``published_sums``
        self.values = np.array([j for j, q in enumerate(qis) if q.kind in ("numeric", "date")], np.int64)
        self.cats = np.array([j for j, q in enumerate(qis) if q.m], np.int64)
        self.cat_first = np.cumsum([0] + [qis[j].m for j in self.cats]).astype(np.int64)
        self.cfg = dataclasses.replace(cfg, qi=tuple(self.names))
        self.source = EncodedSource(base, self)
        self.raw: Profile | None = None  # the encoded columns' measured profile (before the weights)

    # --- encoding ----------------------------------------------------------------------

    def codes(self, q: QI, s: pl.Series, offset: int, physical: bool = False) -> np.ndarray:
        """Category codes (int64; ``physical``: the Enum's own unsigned integers) of ``s``;
        a missing value or one the dictionary pass did not see (the input changed during
        the run) is an error naming the row (``dictionary.text_codes``)."""
        return text_codes(q.name, q.enum, s, offset, self.source.label, physical)

    def dictionary_codes(self, q: QI, arr, offset: int) -> np.ndarray:
        """``codes(q, ..., physical=True)`` of a pyarrow DictionaryArray (a Parquet
        column's dictionary indices, ``Source.iter_dictionary``): its few texts mapped
        to codes once, then each row's index; the same errors (``dictionary.indices_codes``)."""
        index, dtype = q.index
        return indices_codes(q.name, index, dtype, arr, offset, self.source.label)

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
        """``encode``, the columns in the order of ``names``."""
        return self.encode(frame, offset, names).select(names)

    def compact_reads(self) -> tuple[list, list, bool]:
        """What ``compact`` reads: every QI; the String categorical ones as dictionary
        indices where the input allows (``Source.iter_dictionary``)."""
        return ([q.name for q in self.qis], [q.name for q in self.qis if q.m and q.dtype == pl.String],
                any(q.kind in ("ordinal", "nominal") for q in self.qis))

    def encode(self, frame: pl.DataFrame, offset: int, want: Sequence[str] | None = None) -> pl.DataFrame:
        """The encoded columns (Float64) of a chunk of the QI columns; ``want``: only those."""
        cols: dict = {}
        want = set(self.names if want is None else want)
        for q in self.qis:
            names = self.names[q.first: q.first + q.width]
            if not want.intersection(names):
                continue
            s = frame.get_column(q.name)
            if q.kind == "numeric":
                cols[names[0]] = numeric_values(s)
            elif q.kind == "date":
                cols[names[0]] = numeric_values(s.to_physical())
            else:
                code = self.codes(q, s, offset)
                hot = names if q.kind == "nominal" else names[1:]
                if q.kind == "ordinal":
                    cols[names[0]] = code.astype(np.float64)
                onehot = (code[None, :] == np.arange(len(hot))[:, None]).astype(np.float64)  # one row a category
                for j, n in enumerate(hot):
                    cols[n] = onehot[j]
        return pl.DataFrame({n: cols[n] for n in self.names if n in want and n in cols})

    def compact(self, frame: pl.DataFrame | None, offset: int, arrays: dict | None = None) -> pl.DataFrame:
        """One column a QI (named as the QI): numeric ones as read, dates as their
        epoch values, categorical ones as their category codes (unsigned integers).
        ``expand`` turns them into the encoded columns. ``arrays``: the String QIs as
        dictionary arrays (``Source.iter_dictionary``), not in ``frame``."""
        cols = []
        for q in self.qis:
            if arrays is not None and q.name in arrays:
                cols.append(pl.Series(q.name, self.dictionary_codes(q, arrays[q.name], offset)))
                continue
            s = frame.get_column(q.name)
            if q.kind == "numeric":
                cols.append(s)
            elif q.kind == "date":
                cols.append(s.to_physical())
            else:
                cols.append(pl.Series(q.name, self.codes(q, s, offset, physical=True)))
        return pl.DataFrame(cols)

    def expand(self, C: np.ndarray) -> np.ndarray:
        """The encoded rows (n, encoded columns) float64, C-contiguous, of compact rows
        ``C`` (n, QIs) (``compact``'s columns as float64): bit for bit what ``encode``
        gives (one-hot and carry columns 1.0 / 0.0, the ordinal rank its code)."""
        n = C.shape[0]
        X = np.zeros((n, len(self.names)))
        rows = np.arange(n)
        for j, q in enumerate(self.qis):
            if q.kind != "nominal":
                X[:, q.first] = C[:, j]
            if q.kind in ("ordinal", "nominal"):
                hot = q.first + (1 if q.kind == "ordinal" else 0)
                X[rows, hot + C[:, j].astype(np.intp)] = 1.0
        return X

    def expand_columns(self, C: np.ndarray, used: np.ndarray, out: np.ndarray) -> np.ndarray:
        """The encoded columns ``used`` of compact columns ``C`` (QIs, n), column-major,
        into ``out`` (encoded columns, >= n); the other columns of ``out`` are left as
        they are (the partition plan's routing reads only the columns it compares)."""
        n = C.shape[1]
        out = out[:, :n]
        owner = self.owner
        for c in used:
            j = owner[c]
            q = self.qis[j]
            if q.kind in ("numeric", "date") or c == q.first and q.kind == "ordinal":
                out[c] = C[j]
            else:
                np.equal(C[j], float(c - q.first - (1 if q.kind == "ordinal" else 0)), out=out[c], casting="unsafe")
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
        """``passes.partition.sample_row_groups`` for the encoded columns: the compact
        columns of the sampled rows, expanded; None as there (not Parquet, ...)."""
        names = [q.name for q in self.qis]
        got = sample_row_groups(self.source.base, names, rows, stride,
                                lambda frame, first: frame_to_columns(self.compact(frame, first), names))
        return None if got is None else (self.expand(got[0]), got[1])

    def adjust(self, profile: Profile) -> Profile:
        """The measured profile of the encoded columns -> the one that standardizes
        them into the mixed distance's coordinates (``z = (x / scale - mean) / sd``):
        numeric, date, ordinal rank: sd / sqrt(w); one-hot: mean 0, sd sqrt(2 / w);
        carry columns: sd 0 (standardized to 0; not grouping columns either)."""
        self.raw = profile
        mean, sd = profile.mean.copy(), profile.sd.copy()
        for q in self.qis:
            a, b = q.first, q.first + q.width
            if q.kind == "nominal":
                mean[a:b] = 0.0
                sd[a:b] = math.sqrt(2.0 / q.weight)
            else:
                sd[a] = sd[a] / math.sqrt(q.weight)
                sd[a + 1: b] = 0.0
        return dataclasses.replace(profile, mean=mean, sd=sd)

    def state(self, rows: int) -> int | None:
        """Bytes of the whole-table state beside the row -> group map, for the memory
        budget (``budget.plan_budget(state=...)``): the group table, and the 8-byte-a-row
        temporary the numeric plan counts too. The blocks' workers reduce each group to
        its published values (``published``: one a QI, and its size), which the
        publisher then uses as they are; a run that stitches the groups instead (the seam
        polish) keeps the encoded columns' means (the publisher's temporaries are bounded
        by ``_SLICE`` groups). With ``refine`` (which compacts the table: twice its size)
        None: the numeric plan's own figure."""
        cfg = self.original
        if cfg.refine is not None:
            return None
        width = len(self.names) if cfg.effective_polish_rounds(rows) > 0 else len(self.qis)
        return (rows // cfg.k + 1) * (8 * width + 8) + 8 * rows

    def standardized(self, C: np.ndarray, profile: Profile, cols: np.ndarray) -> np.ndarray:
        """``passes.partition.standardized(self.expand(C), profile, cols)`` (the workers'
        standardized rows) from compact rows ``C`` (n, QIs), without the expanded ones:
        the same values (``kernels.groups.standardize_codes``)."""
        out = np.empty((C.shape[0], cols.shape[0]))
        standardize_codes(np.ascontiguousarray(C), self.owner, self.hot, profile.scale, profile.mean, profile.sd,
                          cols, out)
        return out

    def published_sums(self, C: np.ndarray, labels: np.ndarray, g: int, profile: Profile):
        """``published`` of a unit's ``g`` groups (``labels``: each compact row's group)
        from compact rows ``C``, without the expanded ones: the numeric and date QIs'
        centroids with ``aggregate.unit_sums``' arithmetic on the same values (so the
        same bits), the categorical QIs' counts of each category counted directly (the
        whole numbers ``group_categories`` reads from the means)."""
        first = np.array([self.qis[j].first for j in self.values], np.int64)
        sums = np.zeros((g, self.values.shape[0]))
        cnt = np.zeros(g, np.int64)
        counts = np.zeros((g, int(self.cat_first[-1])), np.int64)
        compact_group_sums(np.ascontiguousarray(C), self.values, 1.0 / profile.scale[first], self.cats,
                           self.cat_first, labels.astype(np.int64, copy=False), sums, cnt, counts)
        sums /= cnt[:, None]  # as unit_sums: then times the scale
        sums *= profile.scale[first]
        table = np.empty((g, len(self.qis)))
        loss = np.zeros(len(self.qis))
        for v, j in enumerate(self.values):
            table[:, j] = sums[:, v] if self.qis[j].kind == "numeric" else np.rint(sums[:, v])
        for c, j in enumerate(self.cats):
            q = self.qis[j]
            table[:, j], loss[j] = _pick(q, counts[:, self.cat_first[c]: self.cat_first[c + 1]], cnt[:, None])
        return table, cnt, loss

    def published(self, centroid: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``aggregate_blocks``' reduction of a unit's groups (``UnitPlan.reduce``, in the
        blocks' workers): from the encoded means ``centroid`` (groups x encoded columns)
        and the sizes, ``(table, sizes, loss)``: the published values a group and QI
        (the number, the date's rounded epoch value, the category code: what
        ``Publisher`` would compute from the whole table, group by group) and per QI
        the categorical losses of ``group_categories`` (whole numbers; 0 for numbers and
        dates). Summed over the units, in any order, the losses are exact."""
        table = np.empty((sizes.shape[0], len(self.qis)))
        loss = np.zeros(len(self.qis))
        for j, q in enumerate(self.qis):
            c = centroid[:, q.first]
            if q.kind == "numeric":
                table[:, j] = c
            elif q.kind == "date":
                table[:, j] = np.rint(c)
            else:
                table[:, j], loss[j] = group_categories(q, centroid, sizes)
        return table, sizes, loss

    # --- publishing ----------------------------------------------------------------------

    def publisher(self, groups) -> "Publisher":
        """The write pass's publisher; it takes over ``groups.centroid`` (the encoded
        means, a table of groups x encoded columns), keeps only the published values
        (a number or a category code a group and QI), and drops it."""
        pub = Publisher(self, groups)
        groups.centroid = None
        return pub

    def summary(self, col_sse: np.ndarray, col_sst: np.ndarray) -> dict:
        """``metrics["mixed"]``: each QI's kind, weight and categories; information loss by kind."""
        il = {q.name: float(100.0 * col_sse[j] / col_sst[j]) if col_sst[j] > 0 else 0.0
              for j, q in enumerate(self.qis)}
        by_kind = {}
        for kind in KINDS:
            v = [il[q.name] for q in self.qis if q.kind == kind]
            if v:
                by_kind[kind] = float(np.mean(v))
        return {
            "kinds": {q.name: q.kind for q in self.qis},
            "weights": {q.name: q.weight for q in self.qis},
            "categories": {q.name: q.m for q in self.qis if q.categories is not None},
            "encoded_columns": len(self.names),
            "information_loss_by_kind": by_kind,
            "information_loss_measure": {"numeric": "100 SSE/SST on z-scores", "date": "100 SSE/SST on z-scores",
                                         "nominal": "percent of values changed",
                                         "ordinal": "100 x mean |rank change| / (m - 1)",
                                         "combined": "mean of the per-QI figures (QIs of one value count 0)"},
        }


class MixedMoments:
    """Pass 1's arithmetic (``passes.profile.Moments``) on compact frames (``Mixed.compact``),
    fed chunk by chunk in row order: the moments of the numeric, date and ordinal QIs'
    columns (bit for bit those of their encoded columns), the category counts of the
    categorical ones; ``profile`` gives the encoded columns' adjusted profile. Used by
    the profile pass and by the partition pass when it measures on its way."""

    def __init__(self, mixed: Mixed, scale: np.ndarray | None = None):
        self.mixed = mixed
        self.names = [q.name for q in mixed.qis]
        self.measured = [j for j, q in enumerate(mixed.qis) if q.kind != "nominal"]
        cols = [self.names[j] for j in self.measured]
        self.moments = Moments(cols, np.ones(len(cols)) if scale is None else scale)
        self.counts = [np.zeros(q.m, np.int64) for q in mixed.qis]

    @property
    def n(self) -> int:
        return self.moments.n

    def add(self, frame: pl.DataFrame, offset: int) -> np.ndarray:
        """Check and add a compact chunk; return its columns (QIs, rows) float64."""
        X = np.empty((len(self.names), frame.height))
        if self.measured:
            X[self.measured] = self.moments.add(frame, offset)
        else:  # (every QI nominal: only counts)
            self.moments.n += frame.height
        for j, q in enumerate(self.mixed.qis):
            if q.m:
                codes = frame.get_column(q.name).to_numpy()
                self.counts[j] += np.bincount(codes, minlength=q.m)
                if q.kind == "nominal":
                    X[j] = codes
        return X

    def rescale(self) -> np.ndarray | None:
        return self.moments.rescale()

    def profile(self, sample=(None, None)) -> Profile:
        """The encoded columns' profile, adjusted (``Mixed.adjust``). One-hot and carry
        columns (which ``adjust`` standardizes to fixed scales) get mean p, sd
        sqrt(p (1 - p)) from the counts; their scale is 1, as pass 1's power of two
        of a 0/1 column."""
        n = self.moments.n
        p = self.moments.profile() if self.measured else None
        e = len(self.mixed.names)
        out = {k: np.zeros(e) for k in ("scale", "mean", "sd", "min", "max")}
        out["scale"][:] = 1.0
        for i, j in enumerate(self.measured):
            for k in out:
                out[k][self.mixed.qis[j].first] = getattr(p, k)[i]
        for j, q in enumerate(self.mixed.qis):
            if q.m:
                a = q.first + (1 if q.kind == "ordinal" else 0)
                share = self.counts[j] / n
                out["mean"][a: a + q.m] = share
                out["sd"][a: a + q.m] = np.where((share > 0) & (share < 1), np.sqrt(share * (1.0 - share)), 0.0)
                out["min"][a: a + q.m] = (share == 1.0).astype(np.float64)
                out["max"][a: a + q.m] = (share > 0.0).astype(np.float64)
        full = Profile(tuple(self.mixed.names), n, out["scale"], out["mean"], out["sd"], out["min"], out["max"],
                       sample[0], sample[1])
        return self.mixed.adjust(full)


def group_categories(q: QI, centroid: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, int]:
    """Each group's published category code from its encoded mean: the per-category
    counts are ``mean x size`` of the one-hot (nominal) or carry (ordinal) columns
    (exact: sums of 0/1 values). Nominal: the mode, ties to the lowest code (the first
    in the sorted dictionary); ordinal: the lower median (the first category whose
    cumulative count reaches half the group). Also the QI's loss from the same
    counts: nominal, the rows whose value is not their group's mode; ordinal, the sum
    of |rank - published rank| over the rows."""
    a = q.first if q.kind == "nominal" else q.first + 1
    out = np.empty(sizes.shape[0], np.int64)
    changed = 0
    for g in range(0, sizes.shape[0], _SLICE):  # in slices: bounded temporaries
        size = sizes[g: g + _SLICE, None]
        out[g: g + _SLICE], part = _pick(q, np.rint(centroid[g: g + _SLICE, a: a + q.m] * size), size)
        changed += part
    return out, changed


def _pick(q: QI, counts: np.ndarray, size: np.ndarray) -> tuple[np.ndarray, int]:
    """``group_categories`` from the counts (groups, categories) of whole numbers and
    the sizes (groups, 1)."""
    if q.kind == "nominal":
        pick = np.argmax(counts, axis=1)
        return pick, int(size.sum()) - int(counts[np.arange(counts.shape[0]), pick].sum())
    pick = np.argmax(2 * np.cumsum(counts, axis=1) >= size, axis=1)
    return pick, int((counts * np.abs(np.arange(q.m)[None, :] - pick[:, None])).sum())


_SLICE = 65_536  # groups at a time in ``group_categories``
_DATE_CHUNK = 262_144  # rows at a time in ``exact_dates``


def exact_dates(mixed: Mixed, groups) -> dict:
    """Each group's mean of each Datetime QI, exact: the integer mean of the epoch values
    (in the column's unit) rounded half to even, from one read of those columns (int64
    sums of each value's high and low 32 bits, no float). The encoded (float64) means
    the grouping uses round epoch values above 2^53 (microseconds after year 2255,
    nanoseconds after 1970-04), so three equal nanosecond values would publish a mean
    tens of nanoseconds off. Date columns (days) need none: their float means are exact."""
    qis = [q for q in mixed.qis if q.kind == "date" and isinstance(q.dtype, pl.Datetime)]
    if not qis:
        return {}
    g = groups.sizes.shape[0]
    hi = {q.name: np.zeros(g, np.int64) for q in qis}
    lo = {q.name: np.zeros(g, np.int64) for q in qis}
    names = [q.name for q in qis]
    for offset, frame in mixed.source.base.iter_frames(names, _DATE_CHUNK):
        lab = groups.labels[offset: offset + frame.height]
        for c in names:
            x = frame.get_column(c).to_physical().to_numpy().astype(np.int64, copy=False)
            np.add.at(hi[c], lab, x >> 32)
            np.add.at(lo[c], lab, x & 0xFFFFFFFF)
    n = np.maximum(groups.sizes.astype(np.int64), 1)
    out = {}
    for c in names:
        qh, rh = np.divmod(hi[c], n)  # sum = qh n 2^32 + rh 2^32 + lo, 0 <= rh < n
        qa, ra = np.divmod(rh * (1 << 32) + lo[c], n)
        mean = qh * (1 << 32) + qa  # the floor of the mean; then half to even
        mean += (2 * ra > n) | ((2 * ra == n) & (mean % 2 == 1))
        out[c] = mean
    return out


class Publisher:
    """The write pass's published QI values and information loss, chunk by chunk
    (``passes.write.write_pass(publisher=...)``)."""

    def __init__(self, mixed: Mixed, groups):
        self.mixed = mixed
        self.columns = [q.name for q in mixed.qis]
        # categorical QIs' losses from the groups' category counts (``group_categories``):
        # the write pass need not read those columns (``unread``), it only writes them
        self.changed = np.zeros(len(mixed.qis), np.int64)  # nominal: values changed; ordinal: |rank change|
        self.unread = [q.name for q in mixed.qis if q.kind in ("ordinal", "nominal")]
        # one row a group, one value a QI (the number, the date's rounded epoch value, the
        # category code), 64-byte aligned: the write pass gathers a row's values at once
        if groups.sse is not None:  # the blocks' workers' reduction (``Mixed.published``) as it is
            assert groups.centroid.shape[1] == len(mixed.qis)
            self.table = groups.centroid
            self.changed[:] = groups.sse
        else:  # the encoded columns' means (stitched groups)
            self.table = aligned_zeros(groups.sizes.shape[0], len(mixed.qis))
            for g in range(0, groups.sizes.shape[0], _SLICE):  # (bounded temporaries)
                part = mixed.published(groups.centroid[g: g + _SLICE], groups.sizes[g: g + _SLICE])
                self.table[g: g + _SLICE] = part[0]
                self.changed += part[2].astype(np.int64)
        self.domains = {q.name: q.domain() for q in mixed.qis if q.categories is not None}
        self.exact = exact_dates(mixed, groups)
        e = len(mixed.names)
        # numeric and date QIs: the write pass's row-order sums (``kernels.groups.column_sums``)
        # by encoded column; categorical QIs: whole counts. Neither depends on the chunking.
        self.sums = (np.zeros(e), np.zeros(e), np.zeros(e))

    def publish(self, frame: pl.DataFrame, lab: np.ndarray, offset: int) -> pl.DataFrame:
        """``frame`` (the input's columns but ``unread``) with the QIs replaced by, or (the
        ``unread`` ones) given, their group's published values."""
        out = []
        values = np.empty((len(self.mixed.qis), lab.shape[0]))
        gather_columns(lab, self.table, values)  # column-major: each row a column, no copy
        for j, q in enumerate(self.mixed.qis):
            p = values[j]
            if q.kind in ("numeric", "date"):
                s = frame.get_column(q.name)
                x = numeric_values(s if q.kind == "numeric" else s.to_physical()).astype(np.float64, copy=False)
                if q.name in self.exact:  # (the loss of the exact means published)
                    p = self.exact[q.name][lab].astype(np.float64)
                raw = self.mixed.raw
                column_sums(x, p, raw.scale, raw.mean, q.first, *self.sums)
                if q.kind == "numeric":
                    out.append(pl.Series(q.name, p, dtype=pl.Float64))
                else:
                    ints = self.exact[q.name][lab] if q.name in self.exact else p.astype(np.int64)
                    out.append(pl.Series(q.name, ints, dtype=pl.Int64).cast(q.dtype))
            else:
                out.append(self.domains[q.name].gather(p.astype(np.int64)).alias(q.name))
        return frame.with_columns(out)

    def finish(self) -> tuple[np.ndarray, np.ndarray]:
        """Per QI ``(loss, total)``: 100 x loss / total is the QI's information loss
        (numeric and date: SSE and SST on z-scores; nominal: values changed and rows;
        ordinal: the sum of |rank change| / (m - 1) and rows; a QI of one value: 0, 0)."""
        raw = self.mixed.raw
        sse, sst = finish_sums(*self.sums, raw.sd, raw.rows)
        loss, total = np.zeros(len(self.mixed.qis)), np.zeros(len(self.mixed.qis))
        for j, q in enumerate(self.mixed.qis):
            if q.kind in ("numeric", "date"):
                loss[j], total[j] = sse[q.first], sst[q.first]
            elif q.m > 1:
                loss[j] = self.changed[j] / (1 if q.kind == "nominal" else q.m - 1)
                total[j] = raw.rows
        return loss, total
