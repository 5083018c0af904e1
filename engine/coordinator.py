"""The coordinator: the one module that knows the whole flow of a run, for every method.

    open -> leak guard -> profile -> partition -> aggregate (-> polish, refine) -> stitch -> write + self-check
         -> report

The leak guard (``passes.leak.guard``) refuses a pass-through column that corresponds
one-to-one with a QI before any heavy work, and learns the ``--derived`` columns' relations
(published by the write pass from their QI's published value: ``passes.leak.attach``).

Every entry point (API, CLI) builds a RunConfig and calls ``run``. The passes are
the same for every method; what differs per method is declared in its registry
entry (``engine.registry.Method``) and done by its flow's pass-level hooks
(``FLOWS``: ``engine.methods.centroids.CentroidFlow`` for the MDAV family,
``engine.methods.ranges.RangeFlow`` for maxent and mnqia):

* ``check_input(source, fmt, passes)``: the method's column checks (types, names
  the output would hold); returns the source typed as the method reads it;
* ``check_rows(rows)``, ``budget_args(source, rows)``: the least row count; the
  per-row columns and the whole-table state of the memory budget;
* ``profile(inp, passes)`` -> ``Profiled``: pass 1 (with
  its extra passes: maxent's dictionary, key-attribute selection);
* ``new_store(n_blocks, folder, rows, budget)``, ``units(store, budget)``: the spill
  store of the partition pass, and the units of blocks aggregated together;
* ``aggregate(blocks, labels, threads, bar)`` -> group count: the method's block
  function (``Method.block``) on every unit (``passes.aggregate.aggregate_units``),
  then ``after_aggregate`` (polish, refinement);
* ``stitch(blocks, labels, groups, bar)``: what every group publishes;
* ``write(source, path, fmt, stitched)`` -> ``Written``: the write pass with its
  self-check; ``report_fields(...)``: what only this kind of method reports.

A table of at most one block is the one-block case of the same passes: its
partition pass loads the rows into memory (``passes.partition.load_block``)
instead of spilling them.

With ``--strata`` (``flow.strata``) a strata pass before pass 1
(``passes.partition.strata_pass``) gives each row its stratum and refuses a stratum
of fewer than k rows, naming it; the plan cuts by stratum first (in memory: one
block a stratum), the flows keep their units, polish and refinement within a
stratum, the recount after the stitch checks that no group spans two
(``group_strata``), and the report lists each stratum (``_strata_report``).

A run is its plan, run: ``plan`` passes the run's boundary once (``_open_input``: the
input resolved into ``Resolved``, which every pass, the budget, the leak guard and the sink
take) and describes it (``engine.planning.Plan``); ``run_plan`` runs that plan, once.

Where the passes run is one interface (``passes.executor.Executor``), chosen once
(``_open_executor``): this machine's threads, or with ``--scheduler`` Dask tasks
(``engine.cluster``); the flow's hooks and the partition pass call it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import time
from dataclasses import dataclass
from typing import Any

import numba
import numpy as np
import polars as pl

from .budget import (early_piece, note_run_end, note_run_start, parquet_buffer, plan_budget,
                     rss as current_rss, workers)
from .csvlimit import check_csv_limit
from .methods import MethodFlow
from .methods.centroids import CentroidFlow
from .methods.ranges import RangeFlow
from .options import RunConfig
from .errors import EngineError
from .io.sink import CommitGroup, atomic_output, check_destination, check_tmp_dir, output_format
from .io.remote import is_remote
from .io.labelled import file_meta, with_declarations
from .io.locate import Located, locate
from .io.source import open_source
from .kernels.groups import count_labels
from .parallel import numba_threads
from .passes.partition import (group_strata, load_block, plan_blocks, sample_profile, sample_stride,
                               standardized, strata_columns, strata_pass)
from .passes.executor import LocalExecutor
from .passes.leak import attach, guard
from .passes.published import PublishedGroups, RowRecords
from .passes.profile import profile_columns
from .passes.results import Profiled, Written, release_memory, timed
from .planning import Plan, describe
from .progress import Progress
from .report import PeakRSS, Report

log = logging.getLogger("engine")

# each method's pass-level hooks, by what it publishes (``engine.registry.Method.publishes``)
FLOWS: dict[str, type] = {"centroids": CentroidFlow, "ranges": RangeFlow}


@dataclass
class RunResult:
    report: Report
    labels: np.ndarray | None  # each row's group; None when a streamed run wrote a file (``passes.published``)
    # a Polars DataFrame; ``microaggregate`` gives a pandas DataFrame or pyarrow Table for those inputs
    table: pl.DataFrame | Any | None = None


@dataclass
class Blocks:
    """The partition pass's result: the blocks (spilled, or one in memory) and their units."""

    store: Any
    units: list
    profile: Any
    single: bool
    sample: tuple | None = None  # the plan's sample: (raw rows, row ids), for a second plan (``passes.seams``)

    @property
    def unit_rows(self) -> list[int]:
        return [int(sum(int(self.store.rows[b]) for b in u)) for u in self.units]

    @property
    def block_rows(self) -> list[int]:
        return [int(self.store.rows[b]) for u in self.units for b in u]


@dataclass
class Resolved:
    """The run's boundary, passed once (``plan``): the input resolved (``located``: its
    files, label and kind; ``source``: its format, schema and columns, typed as the method
    reads it; ``rows``), the destination's format, the memory budget, where the passes run
    (``executor``), the method's flow; every pass, the budget, the leak guard and the sink
    take them from here and never resolve the input again. Held by a runnable ``Plan``
    (``run_plan`` runs it, once)."""

    source: Any
    fmt: str | None
    rows: int
    budget: Any
    threads: int
    single: bool
    folder: str | None
    start_rss: int
    executor: Any                # passes.executor.Executor: this machine's threads, or Dask's tasks (--scheduler)
    budget_kw: dict = dataclasses.field(default_factory=dict)  # plan_budget's arguments but the rows (planning)
    located: Any = None          # io.locate.Located (an input path resolved once), or the table in memory
    cfg: Any = None              # the run's settings, a labelled file's declarations added
    flow: Any = None             # the method's hooks (FLOWS), past ``check_input``
    dest: str | None = None
    tmp_dir: Any = None
    passes: dict = dataclasses.field(default_factory=dict)  # the boundary's pass timings (a CSV's types, ...)
    cleanup: contextlib.ExitStack | None = None  # closes the source and the executor; None: not runnable
    spent: bool = False


def run(data, cfg: RunConfig, dest: str | None = None, *, names=None, tmp_dir=None,
        group: CommitGroup | None = None, distributions=False, force_blocks: bool = False,
        given: np.ndarray | None = None, classes: tuple | None = None, ordered: bool = True) -> RunResult:
    """Anonymize ``data`` with ``cfg``; write to ``dest`` (CSV/Parquet) or return the table:
    its plan (``plan(..., runnable=True)``: the input resolved once), then ``run_plan``.

    With ``group`` (``io.sink.CommitGroup``) the output is left in its temporary file
    (``group.temp(dest)``), to be renamed by the caller's ``group.commit()`` together
    with the group's other files (the report); else it is renamed when complete.
    ``distributions``: also count each QI's histogram before and after
    (``report.distributions``, for the HTML report; centroid methods); a callable is
    also called before the write pass with what the report knows by then (``k``,
    ``group_size_counts``, ``distributions``: ``html_report.Prerender`` draws their
    figures meanwhile), and for centroid methods after the partition pass with the
    "before" counts alone (``{"distributions": ...}``, no "after": their figure is
    begun during the aggregate pass). ``force_blocks`` (tests): spill even a table of one block.
    ``given`` (``engine.entities``, MDAV family): each row's group, formed on persons or
    households; the aggregate pass is skipped, the groups' values stitched from the blocks.
    ``classes``: ``(extra columns, person column or None)`` of the self-check
    (``passes.selfcheck.entity_counter``). ``ordered`` False (``engine.entities``' grouping
    of an entity table, whose row order is not published): the guard leaves the row order out."""
    t0 = time.perf_counter()
    # the heap's free pages back to the OS first: in a long-lived process (a batch job calling
    # ``anonymize`` file after file) the last run's leftovers would count against the budget
    release_memory()
    start_rss = current_rss()
    note_run_start(start_rss)
    try:
        with PeakRSS() as rss, numba_threads(cfg.threads):
            planned = plan(data, cfg, dest, names=names, tmp_dir=tmp_dir, runnable=True,
                           distributions=distributions, force_blocks=force_blocks, given=given, classes=classes,
                           start_rss=start_rss)
            return run_plan(planned, group=group, distributions=distributions, ordered=ordered, t0=t0, rss=rss)
    finally:
        release_memory()  # (and what this run leaves resident: the next run's budget knows it)
        note_run_end(current_rss())


def run_plan(planned: Plan, *, group: CommitGroup | None = None, distributions=False, ordered: bool = True,
             t0: float | None = None, rss: PeakRSS | None = None) -> RunResult:
    """Run a runnable plan (``plan(..., runnable=True)``) once: the passes from the leak
    guard to the write, on the input, budget and executor it resolved; the report embeds
    the plan (``report["plan"]``). A plan already run, one that only describes
    (``engine.plan``), or one whose input files changed since it was made is refused in
    one line."""
    t0 = time.perf_counter() if t0 is None else t0
    inp = _take(planned)
    with inp.cleanup, numba_threads(inp.cfg.threads), contextlib.ExitStack() as stack:
        rss = rss if rss is not None else stack.enter_context(PeakRSS())
        return _run(inp, planned, group, distributions, ordered, t0, rss)


def _take(planned: Plan) -> Resolved:
    """The plan's resolved state, taken to be run (once)."""
    inp = planned.resolved
    if inp is None or inp.cleanup is None:
        raise EngineError("this plan describes a run and cannot run it (engine.plan): anonymize plans and runs")
    if inp.spent:
        raise EngineError("this plan has run already: a plan runs once (plan again)")
    inp.spent = True
    changed = inp.located.changed() if isinstance(inp.located, Located) else None
    if changed is not None:
        inp.cleanup.close()
        raise EngineError(f"input {changed} changed since the run was planned: run it again")
    return inp


def _run(inp: Resolved, planned: Plan, group, distributions, ordered, t0, rss) -> RunResult:
    cfg, flow, dest, tmp_dir, passes = inp.cfg, inp.flow, inp.dest, inp.tmp_dir, inp.passes
    cleanup = inp.cleanup
    with timed(passes, "leak"):  # no pass-through column publishes a QI (passes.leak); --derived learnt
        leak_checks: list = []  # (the report's leak_checks)
        derive = guard(inp.source, cfg, inp.rows, inp.budget.chunk_rows, cfg.progress, checks=leak_checks,
                       row_order=ordered)
    if cfg.strata is not None:  # (before pass 1: a stratum too small is refused first)
        with timed(passes, "strata"):
            # (under a limit a streamed run's rows' strata go to disk, row-ordered: nothing per row held)
            flow.strata = strata_pass(inp.source, strata_columns(cfg), inp.rows, inp.budget.chunk_rows,
                                      flow.least_rows, cfg.progress, folder=inp.folder,
                                      on_disk=cfg.memory_limit is not None and not inp.single)
            cleanup.callback(flow.strata.close)
    prof = flow.profile(inp, passes)
    release_memory()
    blocks = _partition(inp, cfg, flow, prof, cleanup, passes)
    release_memory()
    if callable(distributions) and cfg.spec.centroids and flow.dist is not None and flow.dist.counts is not None:
        distributions({"distributions": flow.dist.before()})  # (its figure is begun meanwhile)
    labels, stitched = _aggregate_and_stitch(inp, cfg, flow, blocks, passes, cleanup, dest)
    release_memory()
    dist = flow.distributions_after(stitched)
    size_counts = _size_counts(stitched)
    if callable(distributions):
        distributions({"k": cfg.k, "group_size_counts": size_counts, "distributions": dist})
    with timed(passes, "write"):
        written = _write(inp, flow, _attach(stitched, derive), blocks.profile if blocks else prof.profile, dest,
                         tmp_dir, group)
    rss.sample()
    report = _report(cfg, flow, inp, blocks, stitched, written, passes, dist, size_counts,
                     wall=time.perf_counter() - t0, peak=int(rss.peak))
    report.leak_checks = leak_checks
    report.plan = planned.to_dict()
    log.info("done: %d groups, IL %s %%", report.groups, report.information_loss_percent)
    if labels is None:  # (row-ordered published values: filled by the write pass for a result in memory)
        labels = stitched.labels
    out_labels = labels.astype(np.int64) if inp.single else labels
    return RunResult(report, out_labels, written.table)


def plan(data, cfg: RunConfig, dest: str | None = None, *, names=None, tmp_dir=None, runnable: bool = False,
         distributions=False, force_blocks: bool = False, given=None, classes=None, start_rss=None) -> Plan:
    """The plan of ``run(data, cfg, dest)`` (``engine.planning``): the run's boundary
    (``_open_input``: the input resolved once, the same checks, the same one-line
    refusals), described. Nothing is written.

    ``runnable`` False (``engine.plan``): no scheduler connected (``--scheduler``: its
    checks of the output's format), and what was opened is closed before it returns.
    True (``run``): the plan holds the resolved state (``Plan.resolved``, not in
    ``to_dict``), open until ``run_plan`` runs it; the other arguments are ``run``'s."""
    data = locate(data)  # (a path's files, label and kind, once for the whole run)
    cfg = with_declarations(cfg, file_meta(data))  # a labelled file's categories and missing codes
    flow: MethodFlow = FLOWS[cfg.spec.publishes](cfg, distributions=bool(distributions))
    if given is not None or classes is not None:  # (engine.entities: the MDAV family's flow)
        flow.given, flow.classes = given, classes
    cleanup = contextlib.ExitStack()
    try:
        with numba_threads(cfg.threads):
            passes: dict[str, float] = {}
            inp = _open_input(data, cfg, flow, dest, names, tmp_dir, cleanup, passes,
                              current_rss() if start_rss is None else start_rss, force_blocks, connect=runnable)
            planned = describe(cfg, flow, inp, dest, risk=bool(cfg.risk))
    except BaseException:
        cleanup.close()
        raise
    if not runnable:
        cleanup.close()
        return planned
    inp.cleanup = cleanup
    return planned.holding(inp)


def _open_input(data, cfg, flow, dest, names, tmp_dir, cleanup, passes, start_rss, force_blocks,
                connect: bool = True) -> Resolved:
    """The run's boundary: the destination, the input opened and checked, its rows
    counted, the memory budget planned. Nothing heavy runs before these checks.
    ``connect`` False (``plan``): a ``--scheduler`` is checked, not connected to."""
    strata_columns(cfg)  # (the strata columns' names: checked before anything is opened)
    fmt = None
    folder_ok = cfg.scheduler is not None  # a folder of parts: engine.cluster
    if dest is not None:
        check_destination(dest, folder=folder_ok)
        fmt = output_format(dest)
    check_tmp_dir(tmp_dir)
    executor = _open_executor(cfg, flow, dest, tmp_dir, cleanup, connect)
    check_csv_limit(data, cfg, flow, start_rss, bool(cfg.risk) and dest is not None,  # (engine.csvlimit)
                    cfg.threads or numba.get_num_threads())
    source = open_source(data, names=names, csv=cfg.csv, tmp_dir=_tmp_folder(tmp_dir, dest))
    cleanup.callback(source.close)  # a transcoded CSV's temporary copy
    source = source.without(cfg.drop or ())  # (--drop: never read, never written)
    if dest is not None:
        check_destination(dest, source.paths, folder=folder_ok)
    executor.check_source(source)
    threads = cfg.threads or numba.get_num_threads()
    risk = bool(cfg.risk) and dest is not None  # (engine.release measures it after the run, in this process)
    source = source.bounded(early_piece(cfg.memory_limit))  # a CSV read in pieces under a limit
    source = flow.check_input(source, fmt, dest, passes)
    rows = source.count_rows()
    if rows == 0:
        raise EngineError(f"{source.label} has no rows")
    flow.check_rows(source, rows)
    # (mixed-type QIs: a chunk holds the input's columns, not the encoded ones, read as the input's kind)
    read = source.base
    buffered = 0
    if cfg.memory_limit is not None and read.kind == "parquet":  # what pyarrow pre-buffers of a file
        buffered = parquet_buffer(read.paths, [*cfg.qi, *([cfg.sa] if cfg.sa else [])])
    budget_kw = dict(columns=len(read.columns), threads=threads, kind=read.kind, start_rss=start_rss,
                     buffered=buffered, risk=risk, **flow.budget_args(source, rows))
    budget = plan_budget(flow.budget_cfg, rows, **budget_kw)
    source = source.bounded(budget.piece_bytes)
    single = rows <= budget.block_size and not force_blocks
    folder = tmp_dir if tmp_dir is not None else _tmp_folder(None, dest)  # (spill: beside a local output)
    return Resolved(source, fmt, rows, budget, threads, single, folder, start_rss, executor, budget_kw, data, cfg,
                    flow, dest, tmp_dir, passes)


def _open_executor(cfg, flow, dest, tmp_dir, cleanup, connect: bool = True):
    """The one place a run's executor (``passes.executor.Executor``) is chosen: this
    machine's (``LocalExecutor``), or with ``cfg.scheduler`` an
    ``engine.cluster.DaskExecutor``; handed to the flow, whose hooks (``new_store``,
    ``aggregate``, ``write``) and the partition pass then run on it. (Only methods that
    take ``scheduler`` get a Dask one: the registry.)"""
    if cfg.scheduler is None:
        executor = LocalExecutor()
    else:
        from . import cluster  # optional dependency: dask and distributed, with --scheduler only

        cluster.check_output(dest)
        if connect:
            executor = cluster.open_executor(cfg, _tmp_folder(tmp_dir, dest), cleanup)
        else:  # (a plan that only describes: the run's checks, no cluster; the flow plans as with one)
            executor = cluster.PlannedDask()
    flow.executor = executor
    return executor


def _partition(inp: Resolved, cfg, flow, prof: Profiled, cleanup, passes) -> Blocks | None:
    """Pass 2: one block loaded into memory, or the kd plan's blocks spilled; their units."""
    if prof.one_class:
        return None
    budget = inp.budget
    if inp.single:
        with timed(passes, "load"):
            if flow.dist is not None:
                flow.dist.start(prof.profile.min, prof.profile.max)
            store = load_block(prof.source, prof.columns, inp.rows, budget.chunk_rows, flow.dist, flow.strata)
            if flow.strata is not None:  # one block a stratum
                flow.strata.block_strata = np.arange(flow.strata.count)
            units = flow.units(store, budget, prof.profile)
        return Blocks(store, units, prof.profile, True)
    t = time.perf_counter()
    store, profile, sample = None, prof.profile, prof.sampled
    if prof.sampled is not None:
        store, profile = _partition_sampled(inp, cfg, flow, prof, cleanup, passes)
    if store is None:
        if profile is None or profile.sample is None:  # pass 1 after all (the sample was not enough)
            with timed(passes, "profile"):
                profile = profile_columns(prof.source, prof.columns, budget.chunk_rows, cfg.progress, rows=inp.rows,
                                          sample_stride=sample_stride(inp.rows, budget.block_size))
        sample = (profile.sample, profile.sample_ids)
        plan = plan_blocks(standardized(profile.sample, profile, prof.cols), profile.sample_ids, profile.rows,
                           budget.block_size, flow.strata)
        _planned_strata(flow, plan)
        store = cleanup.enter_context(flow.new_store(plan.n_blocks, inp.folder, profile.rows, budget))
        if flow.dist is not None:
            flow.dist.start(profile.min, profile.max)
        inp.executor.partition_pass(prof.source, profile, prof.cols, plan, store, budget.chunk_rows, cfg.progress,
                           dist=flow.dist)
    blocks = Blocks(store, None, profile, False, sample)
    blocks.units = flow.units(store, budget, profile)
    # (a pass 1 run meanwhile, after a row-group sample, has its own time)
    passes["partition"] = time.perf_counter() - t - (passes.get("profile", 0.0) if prof.profile is None else 0.0)
    log.info("partitioned %d rows into %d units", profile.rows, len(blocks.units))
    return blocks


def _partition_sampled(inp, cfg, flow, prof, cleanup, passes):
    """The partition pass planned on a row-group sample (``sample_row_groups``), pass 1's
    checks and sums done on the way. If that leaves a block above the budget's limit
    (a sample that missed how the rows are spread: a file sorted on a QI, say), or the
    columns must be measured again in a power-of-two scale, the pass 1 that was
    skipped runs after all. Returns ``(store or None, profile)``."""
    budget, total = inp.budget, inp.rows
    X, ids = prof.sampled
    sprof = sample_profile(prof.columns, X)
    sprof = prof.source.adjust_profile(sprof)  # (mixed-type QIs: the distance's scales, engine.encode)
    plan = plan_blocks(standardized(X, sprof, prof.cols), ids, total, budget.block_size, flow.strata)
    _planned_strata(flow, plan)
    store = cleanup.enter_context(flow.new_store(plan.n_blocks, inp.folder, total, budget))
    moments = flow.new_moments(prof.columns)  # (mixed-type QIs: their own, engine.encode)
    if flow.dist is not None:  # bins over the sample's range (the columns' own is not known yet)
        flow.dist.start(sprof.min, sprof.max)
    inp.executor.partition_pass(prof.source, sprof, prof.cols, plan, store, budget.chunk_rows, cfg.progress,
                       moments=moments, rows=total, dist=flow.dist)
    if moments.n == 0:
        raise EngineError(f"{prof.source.label} has no rows")
    if budget.block_limit is not None and int(store.rows.max()) > budget.block_limit:
        log.warning("the row-group sample left a block of %d rows (limit %d): sampling every row group",
                    int(store.rows.max()), budget.block_limit)
        store.close()
        return None, None
    if moments.rescale() is not None:
        with timed(passes, "profile"):
            profile = profile_columns(prof.source, prof.columns, budget.chunk_rows, cfg.progress, rows=total)
        return store, profile
    return store, moments.profile()


def _planned_strata(flow, plan) -> None:
    """Each block's stratum, as the plan cut them (the units, polish and refinement stay
    within a stratum)."""
    if flow.strata is not None:
        flow.strata.block_strata = plan.block_strata


def _aggregate_and_stitch(inp: Resolved, cfg, flow, blocks: Blocks | None, passes, cleanup, dest):
    """Pass 3 (the method's block function on every unit, then its polish or
    refinement) and the stitch; the independent recount of the row -> group map.

    A run planned ``row_ordered`` (``engine.budget``) keeps no row -> group map: its
    units' published values go to ``passes.published.RowRecords`` (on disk, in row
    order), which recounts each unit as it comes; the write pass checks that every row
    comes exactly once, before the output is renamed. Returns ``(labels or None,
    groups)``."""
    rows = inp.rows
    records = None
    if blocks is None:  # the whole table is one class
        labels = np.zeros(rows, np.int32)
        stitched = flow.one_class()
    else:
        given = getattr(flow, "given", None)
        if inp.budget.row_ordered and not inp.single and given is None:
            width, sums = flow.published_width()  # (mixed-type QIs: one published value a QI)
            labels = records = RowRecords(inp.folder, rows, width, cfg.k, inp.budget.chunk_rows,
                                          inp.budget.spill_buffer, flow.dist, inp.budget.range_rows, sums)
            cleanup.callback(records.close)
            if flow.strata is not None:  # (each unit's groups checked and counted by stratum as they pass)
                records.check_strata(flow.strata)
        else:
            labels = np.empty(rows, np.int32) if inp.single or not inp.budget.labels_on_disk else \
                np.memmap(blocks.store.private_file("labels.i32", 4 * rows), dtype=np.int32, mode="r+",
                          shape=(rows,))
            labels[:] = -1  # a row no unit assigns stays -1 and fails the recount
        if given is not None:  # the groups formed on persons or households (engine.entities)
            labels[:] = given
            n_groups = int(given.max()) + 1
        else:
            with timed(passes, flow.aggregate_pass), Progress(flow.aggregate_pass, rows, cfg.progress) as bar:
                threads = workers(inp.budget, cfg.memory_limit, blocks.unit_rows, inp.threads) \
                    if inp.executor.in_process and not blocks.single else inp.threads  # units at once
                n_groups = flow.aggregate(blocks, labels, threads, bar)
            release_memory()
            n_groups = flow.after_aggregate(blocks, labels, n_groups, passes)
        with timed(passes, "stitch"), Progress("stitch", rows, cfg.progress) as bar:
            stitched = flow.stitch(blocks, labels, n_groups, bar)
        # (a label map on disk is a file in the store's folder: kept to the end)
        if records is not None or inp.single or not inp.budget.labels_on_disk:
            blocks.store.discard()  # the write pass reads the input, not the blocks
    if records is not None:
        stitched.counter_room = inp.budget.counter_room
        flow.strata_counts = records.strata_groups  # (--strata: the groups of each stratum, counted)
        if dest is None:  # (a result in memory: each row's group too, filled by the write pass)
            stitched.labels = np.empty(rows, np.int32)
        return None, stitched
    check_groups(labels, stitched.sizes, cfg.k, rows)
    if flow.strata is not None:  # no group spans two strata (independently of the passes)
        flow.strata_groups = group_strata(labels, stitched.sizes.shape[0], flow.strata)
    flow.check_stitched(stitched)
    return labels, stitched


def _write(inp: Resolved, flow, stitched, profile, dest, tmp_dir, group) -> Written:
    """Pass 4: the input streamed again in order, the published columns written
    through a temporary file, the self-check before it is renamed."""
    if dest is None:
        return flow.write(inp.source, None, "parquet", stitched, inp.budget.chunk_rows, profile)
    with atomic_output(dest, tmp_dir, group) as tmp:
        return flow.write(inp.source, tmp, inp.fmt, stitched, inp.budget.chunk_rows, profile)


def _size_counts(groups) -> dict:
    """How many groups have each size: ``{"size": groups}`` (the report's ``group_size_counts``)."""
    if isinstance(groups, PublishedGroups):
        return groups.size_counts
    values, counts = np.unique(groups.sizes, return_counts=True)
    return {str(int(s)): int(c) for s, c in zip(values, counts)}


def _group_sizes(groups) -> tuple[int, int, int]:
    """``(groups, least size, largest size)``."""
    if isinstance(groups, PublishedGroups):
        return groups.count, groups.min_size, groups.max_size
    return int(groups.sizes.shape[0]), int(groups.sizes.min()), int(groups.sizes.max())


def _attach(groups, derive):
    """``groups`` carrying the derived columns (``passes.leak``) to the write pass."""
    if isinstance(groups, PublishedGroups):
        return groups if derive is None else dataclasses.replace(groups, derive=derive)
    return attach(groups, derive)


def _report(cfg, flow, inp, blocks, stitched, written, passes, dist, size_counts, *, wall, peak) -> Report:
    n_groups, least, largest = _group_sizes(stitched)
    sse = sst = by_qi = None
    if written.col_sse is not None:
        sse, sst = float(written.col_sse.sum()), float(written.col_sst.sum())
        by_qi = {c: float(100.0 * e / t) if t > 0 else 0.0
                 for c, e, t in zip(written.names, written.col_sse, written.col_sst)}
    units = [inp.rows] if blocks is None else blocks.unit_rows if flow.report_units else blocks.block_rows
    return Report(
        rows=inp.rows,
        groups=n_groups,
        min_group_size=least,
        max_group_size=largest,
        sse=sse,
        sst=sst,
        information_loss_percent=None if sse is None else float(100.0 * sse / sst) if sst > 0 else 0.0,
        wall_seconds=wall,
        peak_rss_bytes=peak,
        k=cfg.k,
        method=cfg.method,
        qi=list(cfg.qi),
        passes={p: round(s, 4) for p, s in passes.items()},
        blocks=len(units),
        block_rows_min=int(min(units)),
        block_rows_max=int(max(units)),
        block_size=int(inp.budget.block_size),
        memory_limit=cfg.memory_limit,
        group_size_counts=size_counts,
        verified=written.verified,
        settings=cfg.settings(),
        information_loss_by_qi=by_qi,
        distributions=dist,
        strata=_strata_report(flow) if flow.strata is not None else None,
        **flow.report_fields(inp, blocks, stitched, written),
    )


def _strata_report(flow) -> list | None:
    """Per stratum: its values, rows, groups, SSE, SST and information loss (100 SSE /
    SST of the QIs within the stratum, on the run's z-scores, SST around the stratum's
    own mean: ``flow.strata_loss``; the SSEs add up to the run's; None where the
    method's loss is not measured per stratum)."""
    strata = flow.strata
    if strata is None:
        return None
    groups = getattr(flow, "strata_counts", None)  # (row-ordered: counted as the units passed)
    if groups is None:
        groups = np.bincount(flow.strata_groups, minlength=strata.count)
    loss = getattr(flow, "strata_loss", None)
    out = []
    for s, values in enumerate(strata.value_dicts()):
        sse = sst = il = None
        if loss is not None:
            sse, sst = float(loss[0][s]), float(loss[1][s])
            il = 100.0 * sse / sst if sst > 0 else 0.0
        out.append({"values": values, "rows": int(strata.rows[s]), "groups": int(groups[s]), "sse": sse,
                    "sst": sst, "information_loss_percent": il})
    return out


def _tmp_folder(tmp_dir, dest) -> str | None:
    """Where a transcoded CSV input goes: ``tmp_dir``, else beside a local output, else
    the system's temporary folder (an output on object storage)."""
    if tmp_dir is not None:
        return os.fspath(tmp_dir)
    if dest is not None and not is_remote(dest):
        return os.path.dirname(os.path.abspath(os.fspath(dest)))
    return None


def check_groups(labels: np.ndarray, sizes: np.ndarray, k: int | None, rows: int) -> None:
    """Independent recount of the row -> group map before anything is written."""
    if labels.shape[0] != rows or (labels < 0).any() or (labels >= sizes.shape[0]).any():
        raise EngineError("internal check failed: a row was not assigned to a group")
    recount = count_labels(labels, sizes.shape[0])
    if not np.array_equal(recount, sizes) or int(recount.sum()) != rows:
        raise EngineError("internal check failed: group sizes do not add up to the row count")
    if recount.min() < (k or 1):
        raise EngineError(f"internal check failed: a group has {int(recount.min())} rows, fewer than k={k}")
