"""The Python API: thin functions that validate settings and call the coordinator."""

from __future__ import annotations

import os
import tempfile
from typing import Any, Sequence, Union

import numpy as np
import polars as pl
import pyarrow as pa

from .coordinator import RunResult, plan as plan_run
from .entities import run  # (coordinator.run, or by person or household)
from .errors import EngineError
from .io.schema import ArrowTarget
from .io.memory import input_kind
from .io.labelled import check_stat_output, stat_output
from .io.sink import STDOUT
from .registry import REGISTRY
from .options import DEFAULT_K, OPTIONS, RunConfig
from .planning import Plan
from .release import check_release, release
from .report import Report

# what the API takes as a file name, and as a table (pandas and pyarrow tables too: see
# ``microaggregate``; they are not imported to be named here)
PathLike = Union[str, "os.PathLike[str]"]
TableLike = Union[pl.DataFrame, pl.LazyFrame, np.ndarray, PathLike, Any]


def _options(given: dict) -> dict:
    """The options among a function's arguments (its ``locals()``): ``RunConfig.make``
    checks them against the option table (``engine.options``)."""
    return {name: value for name, value in given.items() if name in OPTIONS}


def microaggregate(data: TableLike, qi: Sequence[str] | None = None, k: int = DEFAULT_K, method: str = "mdav",
                   gamma: float | None = None, *, group_column: str | None = None,
                   threads: int | None = None, chunk_rows: int = 100_000, progress: bool = False,
                   memory_limit: int | str | None = None, block_size: int | None = None,
                   leaf_size: int | None = None, refine: str | None = None,
                   refine_rounds: int | None = None, refine_seconds: float | None = None,
                   polish_rounds: int | None = None,
                   seed: int | None = None, tmp_dir: PathLike | None = None, select: str | None = None,
                   select_count: int | None = None,
                   select_measure: str | None = None, width: float | None = None,
                   bins: int | None = None, sa: str | None = None, epsilon: float | None = None,
                   numeric_output: str | None = None, ordinal=None, nominal=None, numeric=None, missing=None, weights=None,
                   derived=None, strata=None, drop=None, person_column: str | None = None,
                   household_column: str | None = None,
                   separator: str | None = None, null_values=None,
                   encoding: str | None = None) -> RunResult:
    """Microaggregate ``data`` in memory and return ``RunResult(report, labels, table)``.

    Parameters
    ----------
    data : polars.DataFrame | polars.LazyFrame | pandas.DataFrame | pyarrow.Table | pyarrow.dataset.Dataset | numpy.ndarray | str | Path
        The table; a path may name a CSV or Parquet file, a folder of Parquet
        files or a glob. pandas and pyarrow tables are read through Arrow
        (numeric columns without a copy), a pyarrow dataset lazily.
    qi : list of str
        Quasi-identifier columns: numeric, dates and datetimes (on their epoch
        value), and for the MDAV family (not ama) also nominal (String,
        Categorical, Enum, Boolean: published as the group's mode) and ordinal
        ones (published as the group's median category); see ``engine.encode.mixed``. For a NumPy array, ``qi`` names its
        columns (default ``x0, x1, ...``, all used).
    k : int
        Minimum group size (>= 2).
    method : {"mdav", "mdav-single", "vmdav", "ivmdav", "ama", "maxent", "mnqia"}
        ``engine.METHODS``; maxent and mnqia publish ranges and sets of categories
        (``sa``, ``epsilon``, ``numeric_output``); every option a method does not use
        is refused with an ``EngineError`` naming it.
    gamma : float, optional
        V-MDAV / IV-MDAV parameter (defaults 0.2 / 1.16).
    group_column : str, optional
        Add each row's group id under this name.
    memory_limit : int or str, optional
        A limit on peak RSS such as ``"1GiB"``: sizes the blocks and chunks, or is
        refused (``EngineError`` naming the least limit) when below what the run needs
        (see ``anonymize``).
    block_size : int, optional
        Rows per block (default 20,000; tables up to this size run as one exact block).
    leaf_size : int, optional
        With several blocks, each block is cut by median splits into leaves of at
        most this many rows (default when polished: 32,768 at k <= 3, 16,384 at k = 4,
        8,192 from k = 5; else 256), and the method
        runs on each leaf: much faster, a little more loss (see the README). 0: the
        method on whole blocks.
    refine : {"local", "ga"}, optional
        Improve the partition after the method (issue 7); with several blocks,
        border refinement between neighbouring blocks.
    refine_rounds, refine_seconds : optional
        Caps on refinement work (rounds are deterministic; seconds are not).
    polish_rounds : int, optional
        Streamed runs (several blocks) of at most 2M rows polish the partition by
        default (moves and swaps among nearest groups, at most 32 rounds, ending at
        the first round that gains less than 1 % of the SSE): IL at or below exact
        MDAV's. 0: no polish (leaves of 256 rows,
        the fast path used above 2M rows); N: at most N rounds at any size.
    seed : int, optional
        Seed of the randomized steps (``refine="ga"``, maxent's SOM); default 0.
    select, select_count, select_measure, width, bins : optional
        Group on key attributes only (every QI is still replaced by its group's
        mean): ``method="ama"`` takes Definition 5 of Sun et al. on the MI-distance
        tree; ``select="emad", select_count=3`` takes the top 3 by degree of the
        EMIM (or ``select_measure``) maximum spanning tree, with any method.
        ``width``/``bins``: the histogram bins of the dependency profile.
    sa, epsilon, numeric_output : optional
        maxent: the sensitive attribute and the minimum class entropy in bits
        (default: the table's SA entropy); maxent and mnqia: numeric QIs published as
        ``<col>_min``/``<col>_max`` (``"range"``, default) or the class mean (``"mean"``).
    ordinal : dict, optional
        Ordinal QIs: ``{"education": ["Preschool", "1st-4th", ...]}`` (the order),
        ``{"grade": None}`` (an Enum's own order) or ``{"education": "@education_num"}``
        (ordered by a numeric column). Other non-numeric QIs are nominal.
    nominal : list of str or str, optional
        Numeric QIs whose values are codes of categories (``["SEX", "STATEFIP"]`` or
        ``"SEX,STATEFIP"``): grouped and published as categories, each published value
        one of the input's codes (the group's most frequent), in the column's own type.
    numeric : list of str or str, optional
        QIs averaged as numbers although the value labels of their file (SPSS, Stata,
        SAS, IPUMS: docs/inputs.md) make them categories.
    missing : dict or list of str, optional
        Declared missing codes of QIs, ``{"AGE": [996, 999]}`` or ``["AGE=996,999"]``
        (numbers for a numeric column, texts for a text one): missing values for the
        grouping, never averaged, published as a missing code (docs/notes/missing-values.md).
    weights : dict or str, optional
        Weight of each QI in the mixed distance, ``{"age": 2}`` or ``"age=2,sex=1"``
        (default 1 each).
    strata : list of str or str, optional
        Strata columns (``["region"]`` or ``"region,sex"``), as sdcMicro's
        ``strata_variables``: each combination of their values (a null is a value) is
        anonymized on its own, no group spans two strata, the columns pass through
        unchanged; a stratum of fewer than k rows is refused, naming it. The report's
        ``strata`` gives each stratum's rows, groups and information loss.
    drop : list of str or str, optional
        Columns left out of the release (``["SERIAL"]`` or ``"SERIAL,CPSID"``): never read
        (not by the leak guard either), never written; the other columns unchanged, in
        their order. A column the run uses (a QI, stratum, person, household, group,
        derived column or the SA) is refused, and so is a name not in the input.
    person_column, household_column : str, optional
        The column naming each record's person (several records a person) or household
        (MDAV family): every published class holds at least k distinct persons, all records
        of a person publish the same QI values, and the QIs constant within every household
        are published identically for its members (docs/households.md).
    derived : dict or list of str, optional
        Columns that follow a QI, ``{"education_num": "education"}`` or
        ``["education_num=education"]``: published recomputed from the QI's published
        value instead of passed through (MDAV family). A pass-through column that
        corresponds one-to-one with a QI would publish it unaggregated and is refused
        (``engine.passes.leak``); declaring it derived is one way out. From a QI
        published as a category: the map category -> value the data shows (it must be a
        function of the QI); from one published as a mean: only an exact affine relation
        ``col = a + b * qi``, and the column becomes Float64.
    separator, null_values, encoding : optional
        How a CSV input is read: e.g. ``separator=";"``, ``null_values=["NA"]``,
        ``encoding="latin-1"`` (``engine.io.csvfile.CsvOptions``); refused for other inputs.

    Returns
    -------
    RunResult
        ``table``: the anonymized table, rows in input order, each QI replaced by
        its group's mean (Float64), other columns unchanged; ``labels``: group id
        per row; ``report``: sizes, SSE, SST, information loss, timings, memory.
        ``table`` is of the input's kind: a pandas DataFrame for pandas (its index
        and other columns are the input's own), a pyarrow Table for a pyarrow Table,
        RecordBatch or dataset, else a Polars DataFrame.
    """
    names = None
    if isinstance(data, np.ndarray):
        if data.ndim != 2:
            raise EngineError(f"a NumPy input must be 2-D, got {data.ndim}-D")
        if qi is None:
            qi = [f"x{j}" for j in range(data.shape[1])]
        names = list(qi)
    if qi is None:
        raise EngineError("qi is required: name the quasi-identifier columns")
    cfg = RunConfig.make(**_options(locals()))
    result = run(data, cfg, None, names=names, tmp_dir=tmp_dir)
    if not cfg.spec.centroids:
        return result  # a range release: its own columns, as a Polars DataFrame
    kind = input_kind(data)
    if kind is not None and result.table is not None:
        # (the derived columns are published, as the QIs: not the input's own)
        published = list(cfg.qi) + [c for c, _ in cfg.derived or ()]
        result.table = _as_input_kind(data, kind, result.table, published, cfg.group_column)
    return result


def _as_input_kind(data, kind: str, table, qi: list, group_column: str | None):
    """The result ``table`` (Polars) as the kind of ``data``: for pandas and pyarrow
    tables, ``data`` itself with the QI columns replaced (and the group column
    added), so every other column, the index and the column types are the input's.
    A published QI keeps its input type when it is not a number (dates with their time
    zone, categories, including a Categorical of numbers, Booleans)."""
    names = list(qi) + ([group_column] if group_column is not None else [])
    if kind == "pandas":
        out = data.copy(deep=False)
        for c in names:
            out[c] = _as_pandas(table.get_column(c), data[c].dtype if c in data.columns else None)
        return out
    arrow = data.schema
    target = ArrowTarget(arrow, table.select(names).schema, qi)
    published = target.table(table.select(names))
    if kind == "dataset":
        others = table.select([c for c in table.columns if c not in set(names)])
        rest = ArrowTarget(arrow, others.schema).table(others)
        cols = {**dict(zip(rest.column_names, rest.columns)), **dict(zip(published.column_names, published.columns))}
        fields = {**{f.name: f for f in rest.schema}, **{f.name: f for f in published.schema}}
        order = [c for c in table.columns]
        return pa.Table.from_arrays([cols[c] for c in order], schema=pa.schema([fields[c] for c in order],
                                                                               metadata=arrow.metadata))
    out = data if isinstance(data, pa.Table) else pa.Table.from_batches([data])
    for f, col in zip(published.schema, published.columns):
        i = out.schema.get_field_index(f.name)
        out = out.set_column(i, f, col) if i >= 0 else out.append_column(f, col)
    return out


def _as_pandas(s: pl.Series, dtype):
    """A published column for a pandas result: of the input's ``dtype`` when it is not a
    number (a datetime with its zone converted from UTC, never relabelled; a Categorical
    from its categories' texts), else NumPy values."""
    import pandas as pd  # optional dependency: a pandas input means it is installed

    values = s.to_numpy()
    if dtype is None or values.dtype.kind not in "OUbMm":
        return values
    if isinstance(dtype, pd.CategoricalDtype):
        texts = pd.Index([str(v) for v in dtype.categories])
        codes = texts.get_indexer(s.cast(pl.String).to_list())
        return pd.Categorical.from_codes(codes, dtype=dtype)
    if isinstance(dtype, pd.DatetimeTZDtype) and isinstance(s.dtype, pl.Datetime):
        utc = s.dt.convert_time_zone("UTC").dt.replace_time_zone(None) if s.dtype.time_zone else s
        return pd.DatetimeIndex(utc.to_numpy()).tz_localize("UTC").tz_convert(dtype.tz).astype(dtype)
    return pd.array(values, dtype=dtype)


def anonymize(source: TableLike, sink: PathLike, qi: Sequence[str] | str, k: int | None,
              method: str = "mdav", gamma: float | None = None, *,
              group_column: str | None = None, threads: int | None = None, chunk_rows: int = 100_000,
              progress: bool = False, tmp_dir: PathLike | None = None, memory_limit: int | str | None = None,
              block_size: int | None = None,
              leaf_size: int | None = None, refine: str | None = None, refine_rounds: int | None = None,
              refine_seconds: float | None = None, polish_rounds: int | None = None, seed: int | None = None,
              select: str | None = None,
              select_count: int | None = None, select_measure: str | None = None, width: float | None = None,
              bins: int | None = None, risk: bool = False, sa: str | None = None, epsilon: float | None = None,
              numeric_output: str | None = None, ordinal=None, nominal=None, numeric=None, missing=None, weights=None,
              derived=None, strata=None, drop=None, person_column: str | None = None,
              household_column: str | None = None,
              report: PathLike | None = None, html: PathLike | None = None, weight_column: str | None = None,
              max_risk=None,
              separator: str | None = None,
              null_values: str | Sequence[str] | None = None,
              encoding: str | None = None, scheduler=None) -> Report:
    """Anonymize ``source`` into the file ``sink`` (.csv or .parquet) and return the report.

    Streams: ``source`` (a path, glob, folder of Parquet files, or a Polars
    LazyFrame) is scanned chunk by chunk, rows are cut into spatial blocks of at
    most ``block_size`` rows that are spilled to a private temporary folder and
    aggregated in parallel, and the output is written chunk by chunk. With
    ``memory_limit`` (e.g. ``"1GiB"``) the blocks, chunks, spill buffers and CSV
    pieces are sized to keep the process's peak RSS under it; a limit below what
    the run needs is refused up front with the least limit named (docs/usage.md).
    The output appears at ``sink`` only when complete (temporary file, then
    rename; a symbolic link is written through, onto its target; ``sink="-"``: CSV
    to the standard output, copied there when complete, ``report="-"`` likewise). Prints nothing unless ``progress``; logs through ``logging``
    (logger ``"engine"``); Numba's thread count is restored afterwards.
    With ``risk``, the finished output is compared with ``source`` and the
    disclosure risk (``engine.audit.risk``: DBRL, interval disclosure, the
    re-identification risks of the release's classes) goes into ``report.risk``;
    ``weight_column``: the input's sampling weights for those risks (with ``risk``).
    ``max_risk`` (with ``risk``): thresholds such as ``{"prosecutor": 0.05, "dbrl": 0.05}``
    (``engine.audit.verdict``); a measure above its threshold raises
    ``engine.audit.verdict.RiskAboveThreshold`` (an ``EngineError``) after ``report`` and
    ``html`` were written, with nothing at ``sink``.

    The disclosure risk is measured on the finished output before it is renamed into
    place, so a failing risk step leaves nothing at ``sink``.

    ``method="maxent"`` (with ``sa``, optional ``epsilon``; ``k`` may be None) and
    ``method="mnqia"`` publish generalized ranges instead (``numeric_output``
    "range" or "mean"); they run block by block above ``block_size`` rows. Every
    method returns the same ``Report``; what only one method measures is in
    ``report.metrics``. An option the method does not use is refused (``EngineError``).

    ``separator``, ``null_values``, ``encoding``: how a CSV ``source`` is read (see
    ``microaggregate``). A CSV output of a CSV input keeps every non-QI field's text
    exactly; a Parquet output types those columns from the whole file.

    A column passed through that corresponds one-to-one with a QI (a code beside its
    label) would publish the QI unaggregated: it is refused (``EngineError`` naming both),
    unless declared ``derived`` (see ``microaggregate``), dropped, or made a QI.

    ``report`` (a path): also write the report as JSON there, committed together
    with ``sink`` (``io.sink.CommitGroup``): after a successful return both files
    are in place; after an error neither was written (a file either replaced is
    restored). Like ``--report``, it may not be an input file or ``sink`` (by path or
    inode), and its folder must exist and be writable (checked before any work).

    ``html`` (a path): also write the release report as one self-contained HTML page
    (``engine.html_report``; needs matplotlib: ``pip install 'microagg-engine[html]'``),
    committed with ``sink`` and ``report`` in the same way.

    ``scheduler``: run the streamed passes as Dask tasks (``engine.cluster``): a
    scheduler's address (``"tcp://HOST:PORT"``), ``"local"`` (a ``LocalCluster`` on this
    machine) or a ``distributed.Client``. Parquet in and out; ``tmp_dir`` must be a
    folder every worker sees at the same path; the output has the values of the
    single-machine run (docs/notes/dask.md).
    """
    cfg = RunConfig.make(**_options(locals()))
    return release(source, sink, cfg, output_option="sink").report


def plan(source: TableLike, sink: PathLike | None = None, qi: Sequence[str] | str | None = None,
         k: int | None = None, method: str = "mdav", **options) -> Plan:
    """The plan of ``anonymize(source, sink, qi, k, method, **options)`` (``sink`` None: of
    ``microaggregate(source, qi, k, method, **options)``), without running it
    (``engine.planning.Plan``: ``print(plan.render())``, ``plan.to_dict()``).

    It takes ``anonymize``'s options and refuses what ``anonymize`` would, with the same
    one line (``EngineError``), before any work. It resolves the input (files, object
    storage, format, schema, rows), each column's role and QI kind, the run's path (in
    memory, streamed, polished with a seam stage, row-ordered, Dask, persons or
    households), the least ``memory_limit`` and each phase's, and the passes in order.
    It reads what the run's first steps read (the footers or a CSV's lines, a CSV's
    first values, the categorical QIs' dictionaries and the numeric QIs' missing values)
    and writes nothing. ``k`` not given: 3 for the methods that need it.

    ``anonymize`` is this plan, run: its run makes the same plan (``coordinator.plan``,
    holding what it resolved) and runs it once (``coordinator.run_plan``); its report
    embeds it (``report.plan``)."""
    names = None
    if isinstance(source, np.ndarray):
        if source.ndim != 2:
            raise EngineError(f"a NumPy input must be 2-D, got {source.ndim}-D")
        qi = [f"x{j}" for j in range(source.shape[1])] if qi is None else qi
        names = list(qi)
    if qi is None:
        raise EngineError("qi is required: name the quasi-identifier columns")
    if k is None and method in REGISTRY and REGISTRY[method].needs_k:
        k = DEFAULT_K
    return plan_config(source, sink, RunConfig.make(qi=qi, k=k, method=method, **options), names=names)


def plan_config(source: TableLike, sink: PathLike | None, cfg: RunConfig, *, names=None,
                output_option: str = "sink") -> Plan:
    """``plan`` with the settings made (``microagg plan``'s)."""
    dest = None if sink is None else os.fspath(sink)
    if dest is not None:
        check_release(source, dest, cfg, output_option)
        if dest == STDOUT:  # (CSV to the standard output: written beside the system's temporary files)
            dest = os.path.join(tempfile.gettempdir(), "stdout.csv")
        stat = stat_output(dest)
        if stat is not None:  # (the run writes Parquet beside it, converted with the input's labels)
            check_stat_output(source, dest, stat, cfg.memory_limit)
            dest = os.path.splitext(dest)[0] + ".parquet"
    return plan_run(source, cfg, dest, names=names, tmp_dir=cfg.tmp_dir)
