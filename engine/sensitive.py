"""Driver for the sensitive-attribute methods: ``maxent`` (seed 001) and ``mnqia`` (seed 002).

Both publish *generalized* quasi-identifiers (``<col>_min`` / ``<col>_max`` ranges,
or the class mean; categorical QIs as the set of their values) rather than
centroids, so they have their own driver beside the MDAV coordinator. It reuses
the coordinator's streaming machinery (``engine.passes.profile``, ``engine.passes.partition``,
``engine.io.spill``, ``engine.budget``, ``engine.passes.write``'s writer).

Two paths, chosen as the coordinator chooses (``block_size`` / ``memory_limit``,
same defaults, sized by :func:`engine.budget.plan_budget`):

* **One block** (rows <= block size): validate -> load the whole table ->
  partition (``engine.methods.maxent`` / ``engine.methods.mnqia``) -> generalize -> write through
  a temporary file -> report. This is the exact, seed-faithful run.
* **Block by block** (more rows), memory bounded by the block size:

  1. *Dictionary pass* (maxent only): one streaming pass over the categorical QIs
     and the SA: nulls are rejected (column and row named), every column's
     distinct values are collected and sorted (the order ``encode_table`` uses),
     so a value has the same integer code in every block; the SA's value counts
     give the table's SA entropy H, the default epsilon, and the checks "single
     distinct value" and "epsilon > H" before any heavy work.
  2. *Profile pass*: ``profile_columns`` over the spilled columns (numeric QIs in
     original units, then categorical QI codes, then the SA code, all float64 --
     codes are small integers, exact in float64), read through a thin adapter
     that encodes each chunk with the global dictionaries. It checks numeric QIs
     for nulls/NaN and keeps the sample of the partition plan.
  3. *Partition pass*: ``plan_blocks`` (kd median splits on a standardized sample)
     and ``partition_pass`` (one streaming pass spilling each row, with its global
     row id, to its block's file in a ``BlockStore``), exactly as the coordinator
     does. **Partition columns:** the numeric QIs; when maxent has only
     categorical QIs, their codes (standardized like numbers). Codes follow the
     sorted category labels, so a block holds a contiguous range of categories of
     the split column and rows sharing a value stay together except where a
     median split cuts a run of ties (ties are split by row id). The store (a
     small ``BlockStore`` subclass) also counts each block's SA values.
     ``store.units`` fuses nearly empty neighbouring blocks (at least 2k rows,
     and at least 2 for maxent without k).
  4. *Per unit*, in parallel (``threads``, results taken in unit order, so the
     output does not depend on the thread count): the unit's rows are read in row
     order and partitioned by ``maxent_partition`` / ``mnqia_partition``; class ids
     are offset to global ids and written into an int32 row -> class map
     (memory-mapped in the spill folder when the budget says so). Only per-class
     statistics are kept: size, per numeric QI min / max / sum, per categorical QI
     the set of codes (a bit mask, bounded by the cardinality), for maxent the SA
     counts.
  5. *Write pass*: the input is streamed again in its order; each row's class
     gives ``<col>_min`` / ``<col>_max`` (the column's dtype) or the mean
     (Float64), and the categorical sets (sorted, escaped, joined by ``|``:
     ``maxent.join_categories``); other columns
     pass through. Written with ``engine.passes.write``'s writer (Parquet row groups of a
     fixed size), so the file's bytes do not depend on the chunk size, through
     ``atomic_output``.

  The spill folder is a context manager: removed on success, error and Ctrl-C.

**maxent, epsilon per block.** epsilon is global: by default the SA entropy of
the whole table (from the dictionary pass), else ``epsilon``. Every unit is run
with that same epsilon, which ``maxent_partition`` can meet only if the unit's own
SA entropy H_u reaches it -- and meets *usefully* only with some slack: the
classes' size-weighted mean entropy is H_u minus the mutual information between
class and SA, so with H_u close to epsilon the classes must nearly copy the
unit's SA distribution (huge classes, many merges). So before running, units are
fused in block order (kd depth-first order: neighbours in QI space): walking
forwards, a unit whose SA entropy is below ``epsilon + UNIT_SLACK * (H -
epsilon)`` (UNIT_SLACK = 0.2: a fifth of the table's own slack), or that has a
single SA value or fewer than k rows, absorbs the next one until the union
reaches it; a failing remainder at the end is fused backwards into the previous
unit(s). The whole table reaches the target (H >= epsilon is checked), so this
always ends. (Measured on 200k census-like rows, epsilon = 0.8 H, blocks of
4,000: no slack gave NCP/nd 0.108 with 472 merges and a class of 3,125 rows;
0.2 gave 0.071 with no merge, units of at most 22k rows; 0.5 gave 0.075 with
units of 53k rows at five times the time.) ``unit_fusions`` reports how many
fusions were needed; each unit's own class merges (reaching epsilon or k inside
the unit, as in memory) are summed in ``merges``. Every class is then at
or above epsilon, re-checked from the spilled SA codes before anything is
written. The degenerate default epsilon = H with coprime SA counts (only the
whole table can reach it, see ``engine.methods.maxent``) is detected from the global
counts: the result is one class, published without partitioning. With epsilon
close to H, fusions can grow a unit well past the block size (memory then
follows the largest unit, reported as ``block_rows_max``); a warning is logged
when a unit exceeds four blocks.

**mnqia per block.** k applies per block (every unit has at least 2k rows). The
1-D segmentation (the 95 % rule) is computed per unit. The LM-style IL of eqs.
1-5 uses the *table's* attribute ranges (from the profile), computed from the
per-class min / max; the MDAV-range baseline runs exact MDAV per unit (on the
unit's z-scores, as ``mdav_range_loss`` does in memory) and generalizes its groups
to ranges, with the same loss and the same table ranges.

**Numeric ranges** are carried as float64 (as in the spill files and the MDAV
path) and cast back to the column's dtype: exact for integers up to 2**53.

Identical output for any chunk size and thread count; randomness only through
``seed`` (every unit's SOM and Fig. 3 draws use it).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import time
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from .config import DEFAULT_BLOCK_SIZE
from .errors import EngineError
from .io.sink import atomic_output, check_csv_columns, check_destination, output_format, write_frame
from .io.schema import check_output_types
from .io.source import open_source
from .io.spill import BlockStore
from .methods.maxent import entropy_of_counts, entropy_of_rows
from .report import PeakRSS

log = logging.getLogger("engine")

SENSITIVE_METHODS = ("maxent", "mnqia")
# maxent, block by block: a unit's SA entropy must reach eps + UNIT_SLACK * (H - eps)
# (module docstring, "epsilon per block")
UNIT_SLACK = 0.2


def _is_numeric(dtype) -> bool:
    return dtype.is_numeric() and dtype != pl.Boolean


def anonymize_sensitive(data, dest, qi, method, *, sa=None, k=None, epsilon=None, seed=None,
                        numeric_output=None, group_column=None, tmp_dir=None, block_size=None, memory_limit=None,
                        chunk_rows=100_000, threads=None, progress=False, group=None, _force_blocks=False,
                        separator=None, null_values=None, encoding=None):
    """``maxent`` or ``mnqia`` with keyword settings (tests and notebooks): builds the
    ``RunConfig`` and calls ``run_ranges``. Returns ``(table or None, labels, Report)``."""
    from .config import RunConfig
    from .io.source import csv_options

    cfg = RunConfig.make(qi=qi, k=k, method=method, sa=sa, epsilon=epsilon, seed=seed,
                         numeric_output=numeric_output, group_column=group_column, block_size=block_size,
                         memory_limit=memory_limit, chunk_rows=chunk_rows, threads=threads, progress=progress,
                         csv=csv_options(separator, null_values, encoding))
    res = run_ranges(data, cfg, dest, tmp_dir=tmp_dir, group=group, _force_blocks=_force_blocks)
    return res.table, res.labels, res.report


def run_ranges(data, cfg, dest, *, names=None, tmp_dir=None, group=None, _force_blocks=False):
    """Run a range method (``maxent`` or ``mnqia``, ``cfg.method``); write to ``dest``
    (or return the table when None). Called by ``coordinator.run``.

    With a CSV input, the QIs and the SA take the types inferred from the whole file;
    the other columns pass through as the file's text to a CSV output, typed from the
    whole file for a Parquet output.

    A table of more than the block size (default 20,000 rows, or what the memory
    limit allows) is processed block by block (module docstring); ``chunk_rows`` rows
    are read at a time; ``threads`` blocks run at once (default: Numba's thread
    count). ``_force_blocks`` (tests) takes the block path even for one block.

    With ``group`` (``io.sink.CommitGroup``) the output stays in its temporary file,
    renamed by the caller's ``group.commit()`` with the group's other files.

    Returns a ``coordinator.RunResult`` (table, labels, the run's ``Report``).
    """
    from .budget import plan_budget
    from .coordinator import RunResult, _tmp_folder
    from .parallel import numba_threads
    from .report import Report

    import numba

    qi, method, sa, k = list(cfg.qi), cfg.method, cfg.sa, cfg.k
    epsilon, seed, numeric_output = cfg.epsilon, cfg.effective_seed, cfg.effective_numeric_output
    from .budget import rss as current_rss

    t0 = time.perf_counter()
    start_rss = current_rss()
    passes: dict[str, float] = {}
    with PeakRSS() as rss, numba_threads(cfg.threads), contextlib.ExitStack() as cleanup:
        fmt = None
        if dest is not None:
            check_destination(dest)
            fmt = output_format(dest)
        source = open_source(data, names=names, csv=cfg.csv, tmp_dir=_tmp_folder(tmp_dir, dest))
        cleanup.callback(source.close)  # a transcoded CSV's temporary copy
        if dest is not None:
            check_destination(dest, source.paths)
        if cfg.memory_limit is not None:  # a CSV read in pieces under a limit (``Source.bounded``)
            from .budget import early_piece

            source = source.bounded(early_piece(cfg.memory_limit))
        for c in qi + ([sa] if sa else []):
            if c not in source.columns:
                raise EngineError(f"column {c!r} not found in {source.label}")
        if source.kind == "csv":  # QIs and SA typed from the whole file; the rest as text for a CSV output
            schema = source.schema
            source = source.with_types({c: schema[c] for c in qi + ([sa] if sa else [])}, text=fmt == "csv",
                                       parse=False)
        seen = set(qi)
        source.check_reconciled(qi + ([sa] if sa else []), [c for c in source.columns if c not in seen])
        check_output_types(source.schema, fmt, source.columns)  # generalized QIs keep their type too
        schema = source.schema
        if method == "mnqia":
            for c in qi:
                if not _is_numeric(schema[c]):
                    raise EngineError(f"column {c!r} is not numeric ({schema[c]}); mnqia needs numeric QIs")
        if dest is not None:
            check_csv_columns(dest, schema, [c for c in source.columns if c not in seen])
        out_names = set(source.columns) - seen
        for c in qi:
            if numeric_output == "range" and _is_numeric(schema[c]):
                for name in (f"{c}_min", f"{c}_max"):
                    if name in out_names:
                        raise EngineError(f"column {name!r} already exists in {source.label}; it would hold "
                                          f"the range of {c!r}")
                out_names |= {f"{c}_min", f"{c}_max"}
        if cfg.group_column is not None and cfg.group_column in out_names | seen:
            raise EngineError(f"group column {cfg.group_column!r} already exists in {source.label}")
        rows = source.count_rows()
        if rows == 0:
            raise EngineError(f"{source.label} has no rows")
        need = max(2, int(k or 0))
        if rows < need:
            if method == "mnqia":
                raise EngineError(f"fewer rows ({rows}) than one group of k = {int(k)} needs")
            raise EngineError(f"fewer rows ({rows}) than one class needs ({need})")
        nthreads = cfg.threads or numba.get_num_threads()
        spilled = len(qi) + (1 if method == "maxent" else 0)
        # a unit's working set (the method's arrays beside the spilled record) is about
        # twice the coordinator's per-row estimate: budget for 2d + 2 columns
        bcfg = dataclasses.replace(cfg, k=need)  # the budget plans classes of at least `need` rows
        budget = plan_budget(bcfg, rows, 2 * spilled + 2, len(source.columns), nthreads, kind=source.kind,
                             method=method, qis=len(qi), state=_class_state(rows, qi, schema, method, k),
                             start_rss=start_rss, min_block=DEFAULT_BLOCK_SIZE)
        source = source.bounded(budget.piece_bytes)
        if rows <= budget.block_size and not _force_blocks:
            t = time.perf_counter()
            table, labels, metrics, sse = _in_memory(source, qi, method, sa, k, epsilon, seed, numeric_output)
            passes["in_memory"] = time.perf_counter() - t
            sizes = np.bincount(labels)
            blocks = [rows]
            if cfg.group_column is not None:
                table = table.with_columns(pl.Series(cfg.group_column, labels, dtype=pl.Int64))
            t = time.perf_counter()
            verified = _count_published(table, qi, schema, numeric_output, sizes.shape[0], k, rows)
            passes["verify"] = time.perf_counter() - t
            if dest is not None:
                t = time.perf_counter()
                with atomic_output(dest, tmp_dir, group) as tmp:
                    write_frame(table, tmp, fmt)
                table = None
                passes["write"] = time.perf_counter() - t
        else:
            folder = tmp_dir if tmp_dir is not None else (os.path.dirname(os.path.abspath(dest)) if dest else None)
            table, labels, sizes, metrics, blocks, sse, verified = _blocked(
                source, rows, qi, method, sa, k, epsilon, seed, numeric_output, budget, nthreads, dest, fmt,
                tmp_dir, folder, cleanup, bool(cfg.progress), passes, group, cfg.group_column, cfg=bcfg,
                start_rss=start_rss)
        if sizes.min() < (k or 1):
            raise EngineError(f"internal check failed: a class has {int(sizes.min())} rows, fewer than k={k}")
        rss.sample()
    sse_total = sst_total = by_qi = None
    if sse is not None:  # (numeric QIs, SSE per QI, SST per QI) on z-scores
        names, col_sse, col_sst = sse
        sse_total, sst_total = float(col_sse.sum()), float(col_sst.sum())
        by_qi = {c: float(100.0 * e / t) if t > 0 else 0.0 for c, e, t in zip(names, col_sse, col_sst)}
    counts = np.unique(sizes, return_counts=True)
    rep = Report(rows=int(rows), groups=int(sizes.shape[0]), min_group_size=int(sizes.min()),
                 max_group_size=int(sizes.max()), sse=sse_total, sst=sst_total,
                 information_loss_percent=(None if sst_total is None else
                                           100.0 * sse_total / sst_total if sst_total > 0 else 0.0),
                 wall_seconds=time.perf_counter() - t0, peak_rss_bytes=int(rss.peak), k=k, method=method,
                 gamma=None, qi=qi, passes={p: round(s, 4) for p, s in passes.items()},
                 group_size_counts={str(int(s)): int(c) for s, c in zip(*counts)}, blocks=len(blocks),
                 block_rows_min=int(min(blocks)), block_rows_max=int(max(blocks)),
                 block_size=int(budget.block_size), memory_limit=cfg.memory_limit, verified=verified,
                 settings=cfg.settings(), metrics=metrics, information_loss_by_qi=by_qi)
    return RunResult(rep, labels, table)


def _published_columns(qi, schema, numeric_output) -> list[str]:
    """The columns a range release publishes for ``qi``."""
    out = []
    for c in qi:
        if _is_numeric(schema[c]) and numeric_output == "range":
            out += [f"{c}_min", f"{c}_max"]
        else:
            out.append(c)
    return out


def _count_published(frame, qi, schema, numeric_output, classes, k, rows) -> dict:
    """The self-check of a range release: its classes counted from the published values
    (``passes.selfcheck``), independently of the labels that produced them."""
    from .passes.selfcheck import ClassCounter

    counter = ClassCounter(_published_columns(qi, schema, numeric_output), classes)
    counter.add(frame)
    return counter.check(k, rows)


def _z_sse(X: np.ndarray, labels: np.ndarray, g: int, mean: np.ndarray, sd: np.ndarray) -> np.ndarray:
    """Per column, the squared error of the rows of ``X`` around their class means, on
    z-scores (``(x - mean) / sd``; a column with sd 0 has none)."""
    out = np.zeros(X.shape[1])
    size = np.bincount(labels, minlength=g).astype(np.float64)
    for j in range(X.shape[1]):
        if sd[j] == 0:
            continue
        z = (X[:, j] - mean[j]) / sd[j]
        cm = np.bincount(labels, weights=z, minlength=g) / np.maximum(size, 1)
        out[j] = float(((z - cm[labels]) ** 2).sum())
    return out


def _class_state(rows, qi, schema, method, k, m=None, words=None) -> int:
    """The bytes kept for the whole table (the row -> class map aside): per class its
    size, numeric min, max and sum, category masks and (maxent) SA counts, three times
    over (the units' statistics, their concatenation, the published columns), with at
    most rows / max(2, k) classes. Before the dictionary pass ``m`` and ``words``
    are guesses (16 SA values, one mask word per categorical QI)."""
    dn = sum(1 for c in qi if _is_numeric(schema[c]))
    dc = len(qi) - dn
    per_class = 8 + 24 * dn + 8 * (dc if words is None else sum(words))
    if method == "maxent":
        per_class += 8 * (16 if m is None else m)
    return 3 * per_class * (rows // max(2, int(k or 2)) + 1)


def _check_span(c, method, lo, hi) -> None:
    """A numeric QI whose range overflows a float (e.g. -1.5e308 .. 1.5e308) cannot be
    measured (the losses divide by the range): refused, naming the column."""
    if lo is None or hi is None or not (math.isfinite(lo) and math.isfinite(hi)):
        return  # (missing and non-finite values have their own messages)
    if not math.isfinite(hi - lo):
        raise EngineError(f"column {c!r} spans {lo:g} .. {hi:g}: too wide for method {method} (its range "
                          f"overflows a float); rescale the column")


# ---------------------------------------------------------------- one block, in memory


def _in_memory(source, qi, method, sa, k, epsilon, seed, numeric_output):
    from .methods.maxent import encode_table, generalize, maxent_partition
    from .methods.mnqia import mdav_range_loss, mnqia_partition

    df = source.collect()
    _first_bad(df, qi, sa, method)
    for c in qi:
        if _is_numeric(df.schema[c]) and df.height:
            x = df[c].cast(pl.Float64)
            _check_span(c, method, x.min(), x.max())
    if method == "maxent":
        enc = encode_table(df, qi, sa)
        res = maxent_partition(enc.Q, enc.sa_codes, epsilon=epsilon, k=k, seed=seed, qi_kinds=enc.kinds,
                               cardinalities=enc.cardinalities, qi_names=qi, sa_name=sa)
        labels, kinds = res.labels, dict(zip(qi, enc.kinds))
        metrics = {"epsilon": res.epsilon, "table_entropy": res.table_entropy,
                   "entropy_min": res.entropy_min, "entropy_mean": res.entropy_mean, "ncp": res.ncp,
                   "ncp_normalized": res.ncp_normalized, "cdm": res.cdm, "merges": res.merges,
                   "forced_single_class": bool(res.forced_single_class),
                   "entropy_hist": _plain(res.entropy_hist)}
    else:
        X = np.ascontiguousarray(df.select(qi).cast(pl.Float64).to_numpy())
        res = mnqia_partition(X, k)
        labels, kinds = res.labels, None
        il_mdav = mdav_range_loss(X, k)
        metrics = {"il": res.il, "il_percent": res.il_percent, "mdav_range_il": il_mdav[0],
                   "mdav_range_il_percent": il_mdav[1]}
    table = generalize(df, labels, qi, kinds=kinds, numeric_output=numeric_output)
    num = [c for c in qi if _is_numeric(df.schema[c])]
    sse = None
    if num:
        X = np.ascontiguousarray(df.select(num).cast(pl.Float64).to_numpy())
        mean, sd = X.mean(axis=0), X.std(axis=0)
        sd[X.min(axis=0) == X.max(axis=0)] = 0.0
        sse = (num, _z_sse(X, labels, int(labels.max()) + 1, mean, sd), np.where(sd > 0, float(df.height), 0.0))
    return table, labels, metrics, sse


def _first_bad(frame, qi, sa, method, offset=0, columns=None) -> None:
    """Raise for the first null, NaN or infinite value of the QIs and the SA (or of
    ``columns`` among them) by row, whatever its kind and column, in the messages of
    the method's own checks (mnqia: the profile pass's; maxent: ``encode_table``'s)."""
    from .passes.profile import bad_value_error, first_bad

    cols = [c for c in qi + ([sa] if sa else []) if columns is None or c in columns]
    hit = first_bad(frame, cols)
    if hit is None:
        return
    c, i, null = hit
    row = offset + i + 1
    if method == "mnqia":
        raise bad_value_error(c, frame.get_column(c), i, offset)
    if c == sa:
        what = "null sensitive value" if null else "NaN or infinite sensitive value"
        raise EngineError(f"column {c!r}: {what} at row {row} (rows counted from 1)")
    what = "null quasi-identifier" if null else "NaN or infinite value"
    raise EngineError(f"column {c!r}: {what} at row {row} (rows counted from 1)")


# ---------------------------------------------------------------- block by block


class _EncodedSource:
    """The source, with categorical columns handed out as their global integer codes
    (Float64), so that ``profile_columns`` and ``partition_pass`` read them like numbers."""

    def __init__(self, source, dicts: dict):
        self.source = source
        self.dicts = dicts  # column -> sorted Series of its distinct values
        self.label = source.label
        self._codes = {c: pl.Series("code", np.arange(len(v), dtype=np.float64)) for c, v in dicts.items()}

    def count_rows(self) -> int:
        return self.source.count_rows()

    def iter_frames(self, columns, chunk_rows):
        for offset, frame in self.source.iter_frames(columns, chunk_rows):
            enc = [frame.get_column(c).replace_strict(self.dicts[c], self._codes[c], return_dtype=pl.Float64)
                   for c in frame.columns if c in self.dicts]
            yield offset, frame.with_columns(enc) if enc else frame

    def iter_arrays(self, columns, chunk_rows):
        from .io.source import frame_to_array

        cols = list(columns)
        for offset, frame in self.iter_frames(cols, chunk_rows):
            yield offset, frame_to_array(frame, cols)


class _SAStore(BlockStore):
    """A BlockStore that also counts the SA codes (spilled column ``sa_col``) per block."""

    def __init__(self, n_blocks, d, folder, sa_col=None, m=0, rows=None, buffer_bytes=32 << 20):
        super().__init__(n_blocks, d, folder, buffer_bytes, rows=rows)
        self.sa_col = sa_col
        self.sa_counts = np.zeros((n_blocks, max(m, 1)), np.int64)

    def append_records(self, block, rec, **kw):
        # records: the row id's bits, then the spilled columns (``BlockStore.records``);
        # ``append`` goes through here too. The driver checks the counts add up.
        if self.sa_col is not None and rec.shape[0]:
            self.sa_counts[block] += np.bincount(rec[:, 1 + self.sa_col].astype(np.int64),
                                                 minlength=self.sa_counts.shape[1])
        super().append_records(block, rec, **kw)


def _dictionary_pass(source, cat, sa, chunk_rows, rows, progress, num=()):
    """Sorted distinct values of the categorical QIs and the SA, and the SA counts.

    Raises for the first null (categorical QIs, SA) or NaN / infinite value (SA) by
    row; when there is one, the numeric QIs ``num`` (checked by the next pass) are
    read up to its row first, so that an earlier bad numeric value is reported
    instead (the first bad value by row, whatever the column)."""
    from .passes.profile import first_bad
    from .progress import Progress

    cols = list(cat) + [sa]
    uniq: dict[str, list] = {c: [] for c in cat}
    counts: list[pl.DataFrame] = []
    with Progress("dictionary", rows, progress) as bar:
        for offset, frame in source.iter_frames(cols, chunk_rows):
            # nulls in the categorical QIs and the SA, NaN / infinite in the SA: the first by row
            hit = first_bad(frame, cols)
            if hit is not None:
                _numeric_before(source, list(num), offset + hit[1], chunk_rows)
                _first_bad(frame, list(cat), sa, "maxent", offset)
            for c in cat:
                uniq[c].append(frame.get_column(c).unique())
                if len(uniq[c]) > 32:
                    uniq[c] = [pl.concat(uniq[c]).unique()]
            counts.append(frame.get_column(sa).value_counts(name="n"))
            if len(counts) > 32:
                counts = [pl.concat(counts).group_by(sa).agg(pl.col("n").sum())]
            bar.update(offset + frame.height)
    dicts = {c: pl.concat(uniq[c]).unique().sort() for c in cat}
    vc = pl.concat(counts).group_by(sa).agg(pl.col("n").sum()).sort(sa)
    dicts[sa] = vc.get_column(sa)
    return dicts, vc.get_column("n").to_numpy().astype(np.int64)


def _numeric_before(source, num, end, chunk_rows) -> None:
    """Raise (the profile pass's message) for the first null, NaN or infinite value of
    the numeric QIs ``num`` in rows before ``end``, if there is one (an error path only)."""
    from .passes.profile import first_bad_value

    if not num:
        return
    for offset, frame in source.iter_frames(num, chunk_rows):
        if offset >= end:
            return
        frame = frame.head(end - offset)
        first_bad_value(frame, num, offset)


def fuse_units(units, block_counts, eps, min_rows, tol):
    """Fuse consecutive units until each has >= 2 distinct SA values, SA entropy >=
    eps - tol (the driver passes epsilon plus the slack) and >= min_rows rows
    (module docstring). Returns ``(units, fusions)``."""
    def ok(c):
        return np.count_nonzero(c) >= 2 and c.sum() >= min_rows and entropy_of_counts(c) >= eps - tol

    out: list[tuple[list, np.ndarray]] = []
    cur, cc = [], np.zeros(block_counts.shape[1], np.int64)
    for u in units:
        cur = cur + list(u)
        cc = cc + block_counts[u].sum(axis=0)
        if ok(cc):
            out.append((cur, cc))
            cur, cc = [], np.zeros_like(cc)
    if cur:
        out.append((cur, cc))
    while len(out) > 1 and not ok(out[-1][1]):
        last = out.pop()
        prev = out.pop()
        out.append((prev[0] + last[0], prev[1] + last[1]))
    return [u for u, _ in out], len(units) - len(out)


@dataclass
class _Stats:
    """Per-class statistics of one unit (class ids local to the unit)."""

    ids: np.ndarray
    local: np.ndarray
    g: int
    size: np.ndarray
    mn: np.ndarray
    mx: np.ndarray
    sums: np.ndarray
    masks: list
    sacnt: np.ndarray | None = None
    extra: dict = field(default_factory=dict)


def _class_stats(ids, Xnum, codes, local, g, words, sa=None, m=0) -> _Stats:
    from .kernels import sensitive as K
    from .kernels.groups import accumulate_group_sums

    size = np.bincount(local, minlength=g).astype(np.int64)
    if Xnum.shape[1]:
        mn, mx = K.group_minmax(Xnum, local, g)
        sums = np.zeros((g, Xnum.shape[1]))
        accumulate_group_sums(Xnum, local, sums, np.zeros(g, np.int64))
    else:
        mn = mx = sums = np.zeros((g, 0))
    masks = []
    for j, nw in enumerate(words):
        c = codes[:, j]
        mask = np.zeros((g, nw), np.uint64)
        np.bitwise_or.at(mask, (local, c >> 6), np.left_shift(np.uint64(1), (c & 63).astype(np.uint64)))
        masks.append(mask)
    sacnt = None
    if sa is not None:
        sacnt = np.bincount(local * m + sa, minlength=g * m).reshape(g, m)
    return _Stats(ids, local, g, size, mn, mx, sums, masks, sacnt)


def _blocked(source, rows, qi, method, sa, k, epsilon, seed, numeric_output, budget, threads, dest, fmt,
             tmp_dir, folder, cleanup, progress, passes, group=None, group_column=None, cfg=None,
             start_rss=None):
    from .budget import check_unit, plan_budget
    from .coordinator import release_memory
    from .kernels.groups import count_labels
    from .kernels.partition import scatter_labels
    from .methods.maxent import ENTROPY_TOL, discernibility, entropy_histogram, maxent_partition
    from .methods.mnqia import mdav_range_loss, mnqia_partition
    from .passes.partition import partition_pass, plan_blocks, sample_stride, standardized
    from .passes.profile import profile_columns
    from .parallel import ordered_map
    from .progress import Progress

    schema = source.schema
    num = [c for c in qi if _is_numeric(schema[c])]
    cat = [c for c in qi if not _is_numeric(schema[c])]
    dn, dc = len(num), len(cat)
    chunk_rows = budget.chunk_rows
    dicts: dict = {}
    metrics: dict = {}
    eps = H = None
    forced = False
    m = 0
    if method == "maxent":
        t = time.perf_counter()
        dicts, sa_total = _dictionary_pass(source, cat, sa, chunk_rows, rows, progress, num)
        passes["dictionary"] = time.perf_counter() - t
        m = int(sa_total.shape[0])
        if m < 2:
            raise EngineError(f"column {sa!r}: the sensitive attribute has a single distinct value "
                              f"(entropy 0 cannot be diversified)")
        H = entropy_of_counts(sa_total)
        eps = H if epsilon is None else float(epsilon)
        if not math.isfinite(eps) or eps < 0:
            raise EngineError(f"epsilon: must be a finite number >= 0, got {epsilon!r}")
        if eps > H + ENTROPY_TOL:
            raise EngineError(f"epsilon: {eps:.6g} bits exceeds the SA entropy of the whole table ({H:.6g} bits); "
                              f"no partition can reach it")
        forced = eps >= H - ENTROPY_TOL and math.gcd(*[int(c) for c in sa_total]) == 1
    spill = num + cat + ([sa] if method == "maxent" else [])
    cards = [len(dicts[c]) for c in cat]
    words = [(cd + 63) // 64 for cd in cards]
    if cfg is not None and cfg.memory_limit is not None and (m > 16 or sum(words) > dc):
        # the class statistics with the SA's and the categories' real counts: the same
        # plan, or the one-line refusal naming the least limit
        plan_budget(cfg, rows, 2 * len(spill) + 2, len(source.columns), threads, kind=source.kind, method=method,
                    qis=len(qi), state=_class_state(rows, qi, schema, method, k, m, words), start_rss=start_rss,
                    min_block=DEFAULT_BLOCK_SIZE)
    enc = _EncodedSource(source, dicts)

    t = time.perf_counter()
    profile = profile_columns(enc, spill, chunk_rows, progress, rows=rows,
                              sample_stride=0 if forced else sample_stride(rows, budget.block_size))
    passes["profile"] = time.perf_counter() - t
    release_memory()
    gmin = profile.min[:dn].copy()
    gmax = profile.max[:dn].copy()
    for j, c in enumerate(num):
        _check_span(c, method, float(gmin[j]), float(gmax[j]))
    R = gmax - gmin
    # z-scores of the numeric QIs in original units, for the SSE / SST of the report
    zmean = profile.mean[:dn] * profile.scale[:dn]
    zsd = profile.sd[:dn] * profile.scale[:dn]

    labels = None
    if forced:
        # epsilon = H(table) with coprime SA counts: only the whole table qualifies
        labels = np.zeros(rows, np.int32)
        st = _Stats(None, None, 1, np.array([rows], np.int64), gmin[None, :], gmax[None, :],
                    (profile.mean[:dn] * profile.scale[:dn] * rows)[None, :],
                    [_all_codes(cd) for cd in cards], sa_total[None, :])
        stats = [st]
        blocks = [rows]
        metrics.update(merges=0, unit_fusions=0)
        st.extra = {"sse": np.where(zsd > 0, float(rows), 0.0)}  # one class: its SSE is the SST
        G = 1
    else:
        t = time.perf_counter()
        cols = np.arange(dn) if dn else np.arange(dn, dn + dc)
        Zs = standardized(profile.sample, profile, cols)
        plan = plan_blocks(Zs, profile.sample_ids, rows, budget.block_size)
        del Zs
        store = cleanup.enter_context(_SAStore(plan.n_blocks, len(spill), folder,
                                               sa_col=len(spill) - 1 if method == "maxent" else None, m=m,
                                               rows=rows, buffer_bytes=budget.spill_buffer))
        partition_pass(enc, profile, cols, plan, store, chunk_rows, progress)
        if method == "maxent" and not np.array_equal(store.sa_counts.sum(axis=1), store.rows):
            raise EngineError("internal check failed: the SA counts of the spilled blocks do not add up")
        need = max(2, int(k or 0))
        units = store.units(2 * need)
        if method == "maxent":
            target = eps + UNIT_SLACK * max(H - eps, 0.0)
            units, fusions = fuse_units(units, store.sa_counts, target, need, ENTROPY_TOL)
            metrics["unit_fusions"] = int(fusions)
            big = max(int(store.rows[u].sum()) for u in units)
            check_unit(budget, cfg.memory_limit if cfg is not None else None,
                       [int(store.rows[u].sum()) for u in units], threads, rows, len(qi), method,
                       f": epsilon {eps:.4g} bits needs a unit of {big:,} rows")
            if big > 4 * budget.block_size:
                log.warning("maxent: reaching epsilon = %.4g bits needed a unit of %d rows (block size %d); "
                            "memory follows the largest unit", eps, big, budget.block_size)
        passes["partition"] = time.perf_counter() - t
        blocks = [int(store.rows[u].sum()) for u in units]

        labels = np.empty(rows, np.int32) if not budget.labels_on_disk else \
            np.memmap(store.private_file("labels.i32", 4 * rows), dtype=np.int32, mode="r+", shape=(rows,))
        labels[:] = -1  # a row no unit assigns stays -1 and fails the recount
        ranges = np.zeros((dn + dc, 2))
        ranges[:dn, 0], ranges[:dn, 1] = gmin, gmax
        ranges[dn:, 1] = np.maximum(np.array(cards, float) - 1, 0) if dc else 0
        kinds = ["numeric"] * dn + ["categorical"] * dc
        cardl = [0] * dn + cards

        def work(unit):
            ids, X = store.read_many(unit)
            if len(unit) > 1:
                o = np.argsort(ids, kind="stable")
                ids, X = ids[o], np.ascontiguousarray(X[o])
            Xnum = np.ascontiguousarray(X[:, :dn])
            codes = X[:, dn:dn + dc].astype(np.int64)
            if method == "maxent":
                sac = X[:, dn + dc].astype(np.int64)
                res = maxent_partition(np.ascontiguousarray(X[:, :dn + dc]), sac, epsilon=eps, k=k, seed=seed,
                                       qi_kinds=kinds, cardinalities=cardl, qi_names=num + cat, sa_name=sa,
                                       ranges=ranges)
                st = _class_stats(ids, Xnum, codes, res.labels, res.n_classes, words, sac, m)
                st.extra = {"merges": res.merges, "forced": res.forced_single_class,
                            "sse": _z_sse(Xnum, res.labels, res.n_classes, zmean, zsd)}
            else:
                res = mnqia_partition(Xnum, k)
                st = _class_stats(ids, Xnum, codes, res.labels, res.n_groups, words)
                base = mdav_range_loss(Xnum, k)[2]  # MDAV on the unit's z-scores, as in memory
                gb = int(base.max()) + 1
                bst = _class_stats(ids, Xnum, codes, base, gb, [])
                st.extra = {"relaxed": res.relaxed_picks, "leftovers": res.leftovers,
                            "base_il_sum": _il_sum(bst.size, bst.mn, bst.mx, R),
                            "sse": _z_sse(Xnum, res.labels, res.n_groups, zmean, zsd)}
            return st

        t = time.perf_counter()
        stats = []
        G = 0
        done = 0
        with Progress(method, rows, progress) as bar:
            for st in ordered_map(work, units, threads):
                scatter_labels(st.ids, st.local, G, labels)
                G += st.g
                done += st.ids.shape[0]
                st.ids = st.local = None
                stats.append(st)
                bar.update(done)
        passes[method] = time.perf_counter() - t
        release_memory()
        if method == "maxent":
            metrics["merges"] = int(sum(s.extra["merges"] for s in stats))
            metrics["units_forced_single_class"] = int(sum(bool(s.extra["forced"]) for s in stats))

    sse = (num, sum(s.extra["sse"] for s in stats), np.where(zsd > 0, float(rows), 0.0)) if dn else None
    size = np.concatenate([s.size for s in stats])
    mn = np.concatenate([s.mn for s in stats])
    mx = np.concatenate([s.mx for s in stats])
    sums = np.concatenate([s.sums for s in stats])
    masks = [np.concatenate([s.masks[j] for s in stats]) for j in range(dc)]
    # independent recount before anything is written
    if (labels < 0).any() or (labels >= G).any() or not np.array_equal(count_labels(labels, G), size) \
            or int(size.sum()) != rows:
        raise EngineError("internal check failed: a row was not assigned to exactly one class")
    if method == "maxent":
        sacnt = np.concatenate([s.sacnt for s in stats])
        ent = entropy_of_rows(sacnt)
        if (np.count_nonzero(sacnt, axis=1) < 2).any() or ent.min() < eps - ENTROPY_TOL:
            raise EngineError("internal check failed: a class misses the entropy target")
        if k is not None and size.min() < k:
            raise EngineError(f"internal check failed: a class has {int(size.min())} rows, fewer than k={k}")
        per = np.zeros(G)
        if dn:
            per += np.where(R > 0, (mx - mn) / np.where(R > 0, R, 1.0), 0.0).sum(axis=1)
        for j in range(dc):
            z = _popcount(masks[j])
            per += np.where(z > 1, z / cards[j], 0.0)
        ncp = float((per * size).sum())
        metrics = {"epsilon": eps, "table_entropy": H, "entropy_min": float(ent.min()),
                   "entropy_mean": float(ent.mean()), "ncp": ncp, "ncp_normalized": ncp / (rows * len(qi)),
                   "cdm": discernibility(size, k, rows), "merges": metrics["merges"],
                   "forced_single_class": bool(forced), "unit_fusions": metrics["unit_fusions"],
                   **({"units_forced_single_class": metrics["units_forced_single_class"]}
                      if "units_forced_single_class" in metrics else {}),
                   "entropy_hist": _plain(entropy_histogram(ent, size, 0.25))}
    else:
        il = _il_sum(size, mn, mx, R) / rows
        il_b = sum(s.extra["base_il_sum"] for s in stats) / rows
        metrics = {"il": il, "il_percent": 100.0 * il / dn, "mdav_range_il": il_b,
                   "mdav_range_il_percent": 100.0 * il_b / dn,
                   "relaxed_picks": int(sum(s.extra["relaxed"] for s in stats)),
                   "leftovers": int(sum(s.extra["leftovers"] for s in stats))}
    del stats

    # publish: per class, what each generalized column holds
    pub = {}
    for j, c in enumerate(num):
        dt = schema[c]
        if numeric_output == "range":
            pub[c] = [pl.Series(f"{c}_min", mn[:, j]).cast(dt), pl.Series(f"{c}_max", mx[:, j]).cast(dt)]
        else:
            pub[c] = [pl.Series(c, sums[:, j] / size, dtype=pl.Float64)]
    from .methods.maxent import join_categories

    sets = {}
    for j, c in enumerate(cat):
        uniq, inv = np.unique(masks[j], axis=0, return_inverse=True)
        values = dicts[c].cast(pl.String).to_list()
        text = [join_categories(sorted(values[i] for i in _codes_of(row))) for row in uniq]
        sets[c] = (pl.Series(c, text, dtype=pl.String), inv.reshape(-1).astype(np.int32))

    from .passes.selfcheck import ClassCounter

    counter = ClassCounter(_published_columns(qi, schema, numeric_output), G)
    t = time.perf_counter()
    if dest is None:
        table = _write_pass(source, None, "parquet", labels, pub, sets, chunk_rows, progress, rows, counter,
                            group_column)
    else:
        with atomic_output(dest, tmp_dir, group) as tmp:
            table = _write_pass(source, tmp, fmt, labels, pub, sets, chunk_rows, progress, rows, counter,
                                group_column)
            verified = counter.check(k, rows)  # before the output is renamed into place
    passes["write"] = time.perf_counter() - t
    if dest is None:
        verified = counter.check(k, rows)
    return table, labels, size, metrics, blocks, sse, verified


def _all_codes(card):
    mask = np.zeros((1, (card + 63) // 64), np.uint64)
    for c in range(card):
        mask[0, c >> 6] |= np.uint64(1) << np.uint64(c & 63)
    return mask


def _codes_of(row):
    return [64 * w + b for w in range(row.shape[0]) for b in range(64) if (int(row[w]) >> b) & 1]


def _popcount(mask):
    out = np.zeros(mask.shape[0], np.int64)
    for w in range(mask.shape[1]):
        v = mask[:, w].copy()
        for b in range(64):
            out += ((v >> np.uint64(b)) & np.uint64(1)).astype(np.int64)
    return out


def _il_sum(size, mn, mx, R):
    """Sum over rows of the seed-002 LM loss (sum over QIs of range / table range)."""
    share = np.where(R > 0, (mx - mn) / np.where(R > 0, R, 1.0)[None, :], 0.0)
    return float((size[:, None] * share).sum())


def _write_pass(source, path, fmt, labels, pub, sets, chunk_rows, progress, rows, counter, group_column=None):
    """Stream the input in order; each row's class gives its generalized QIs. Every
    frame handed to the writer is counted by its published values (``counter``)."""
    from .progress import Progress
    from .passes.write import _Writer

    writer = _Writer(path, fmt)
    try:
        with Progress("write", rows, progress) as bar:
            for offset, frame in source.iter_frames(None, chunk_rows):
                h = frame.height
                lab = np.asarray(labels[offset: offset + h])
                out = []
                for c in frame.columns:
                    if c in pub:
                        out += [s.gather(lab) for s in pub[c]]
                    elif c in sets:
                        text, sid = sets[c]
                        out.append(text.gather(sid[lab]))
                    else:
                        out.append(frame.get_column(c))
                if group_column is not None:
                    out.append(pl.Series(group_column, lab, dtype=pl.Int64))
                published = pl.DataFrame(out)
                counter.add(published)
                writer.add(published)
                bar.update(offset + h)
        return writer.close()
    except BaseException:
        writer.abort()
        raise


def _plain(x):
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple, np.ndarray)):
        return [_plain(v) for v in x]
    if isinstance(x, np.generic):
        return x.item()
    return x
