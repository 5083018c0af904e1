"""The coordinator: the one module that knows the whole flow of a run.

    profile -> (partition) -> aggregate -> stitch -> write -> verify -> report

Every entry point (API, CLI) builds a RunConfig and calls ``run``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from dataclasses import dataclass
from typing import Any

import numba
import numpy as np
import polars as pl

from .passes.aggregate import aggregate_block, aggregate_blocks
from .passes.distributions import Distributions
from .budget import early_piece, plan_budget, rss as current_rss
from .config import POLISH_ROTATIONS, POLISH_UNIT_ROWS, RunConfig, polish_near
from .errors import EngineError
from .io.sink import CommitGroup, atomic_output, check_csv_columns, check_destination, check_tmp_dir, output_format
from .io.schema import check_output_types
from .io.source import open_source
from .io.spill import BlockStore
from .kernels.groups import count_labels
from .parallel import numba_threads
from .passes.profile import Moments, check_columns, profile_columns
from .progress import Progress
from .report import PeakRSS, Report
from .passes.partition import partition_pass, plan_blocks, sample_profile, sample_row_groups, sample_stride, standardized
from .passes.stitch import Groups, Stitcher, aligned_zeros, standardize, stitch_blocks
from .passes.write import write_pass

log = logging.getLogger("engine")


@dataclass
class RunResult:
    report: Report
    labels: np.ndarray
    # a Polars DataFrame; ``microaggregate`` gives a pandas DataFrame or pyarrow Table for those inputs
    table: pl.DataFrame | Any | None = None


def run(data, cfg: RunConfig, dest: str | None = None, *, names=None, tmp_dir=None,
        group: CommitGroup | None = None, distributions=False) -> RunResult:
    """Anonymize ``data`` with ``cfg``; write to ``dest`` (CSV/Parquet) or return the table.

    With ``group`` (``io.sink.CommitGroup``) the output is left in its temporary file
    (``group.temp(dest)``), to be renamed by the caller's ``group.commit()`` together
    with the group's other files (the report); else it is renamed when complete.
    ``distributions``: also count each QI's histogram before and after
    (``report.distributions``, for the HTML report); a callable is also called with
    them before the write pass (``html_report.Prerender`` draws them meanwhile)."""
    if not cfg.spec.centroids:  # maxent, mnqia: classes published as ranges and sets
        from .sensitive import run_ranges

        return run_ranges(data, cfg, dest, names=names, tmp_dir=tmp_dir, group=group)
    t0 = time.perf_counter()
    start_rss = current_rss()
    passes: dict[str, float] = {}
    with PeakRSS() as rss, numba_threads(cfg.threads), contextlib.ExitStack() as cleanup:
        fmt = None
        if dest is not None:
            check_destination(dest, folder=cfg.scheduler is not None)  # a folder of parts: engine.cluster
            fmt = output_format(dest)
        check_tmp_dir(tmp_dir)
        backend = None
        if cfg.scheduler is not None:  # the passes as Dask tasks (engine.cluster)
            from . import cluster

            cluster.check_output(dest)
            backend = cluster.open_backend(cfg, _tmp_folder(tmp_dir, dest), cleanup)
        source = open_source(data, names=names, csv=cfg.csv, tmp_dir=_tmp_folder(tmp_dir, dest))
        cleanup.callback(source.close)  # a transcoded CSV's temporary copy
        if dest is not None:
            check_destination(dest, source.paths, folder=cfg.scheduler is not None)
        source = source.bounded(early_piece(cfg.memory_limit))  # a CSV read in pieces under a limit
        # CSV: QIs read as numbers; other columns as the file's text for a CSV output, else
        # with types inferred from the whole file
        t = time.perf_counter()
        typed = source.with_types({c: pl.Float64 for c in cfg.qi}, text=fmt == "csv")
        if typed is not source and fmt != "csv":
            passes["infer"] = time.perf_counter() - t  # the whole-file type inference of a CSV input
        source = typed
        if backend is not None:
            backend.check_source(source)
        check_columns(source, cfg.qi, numeric=False)
        if cfg.group_column is not None and cfg.group_column in source.columns:
            raise EngineError(f"group column {cfg.group_column!r} already exists in {source.label}")
        if dest is not None:
            check_output_types(source.schema, fmt, [c for c in source.columns if c not in set(cfg.qi)])
            check_csv_columns(dest, source.schema, [c for c in source.columns if c not in set(cfg.qi)])
        rows = source.count_rows()
        if rows == 0:
            raise EngineError(f"{source.label} has no rows")
        check_columns(source, cfg.qi)  # dtypes: after the row count, as a header-only CSV has no types
        if cfg.k > rows:
            raise EngineError(f"k={cfg.k} is larger than the number of rows ({rows})")
        threads = cfg.threads or numba.get_num_threads()
        budget = plan_budget(cfg, rows, len(cfg.qi), len(source.columns), threads, kind=source.kind,
                             start_rss=start_rss)
        source = source.bounded(budget.piece_bytes)
        single = rows <= budget.block_size

        t = time.perf_counter()
        stride = sample_stride(rows, budget.block_size)
        # blocks from Parquet: the plan's sample from a few row groups, and pass 1's
        # checks and sums done by the partition pass (one pass over the QIs fewer)
        sampled = None if single else sample_row_groups(source, cfg.qi, rows, stride)
        if sampled is None:
            profile = profile_columns(source, cfg.qi, budget.chunk_rows, cfg.progress, rows=rows,
                                      sample_stride=0 if single else stride)
            passes["profile"] = time.perf_counter() - t
            log.info("profiled %d rows x %d quasi-identifiers", rows, len(cfg.qi))
        else:
            profile = None
            passes["sample"] = time.perf_counter() - t
            log.info("sampled %d rows from the row groups", sampled[0].shape[0])
        release_memory()
        cols = np.arange(len(cfg.qi))  # the grouping columns
        key = None
        metrics: dict = {}
        if cfg.selects:
            t = time.perf_counter()
            from .select import profile as dependency_profile  # imported when used: start-up time

            dep = dependency_profile(source, cfg.qi, cfg.measure, count=cfg.select_count if cfg.select else None,
                                     width=cfg.width, bins=cfg.bins, chunk_rows=budget.chunk_rows)
            key = dep.key_attributes
            metrics["dependency"] = {k: v for k, v in dep.to_dict().items()
                                     if k in ("measure", "tree", "tree_edges", "edge_weights", "degrees",
                                              "key_attributes", "selection")}
            cols = np.array(sorted(cfg.qi.index(c) for c in key), np.int64)
            passes["select"] = time.perf_counter() - t
            log.info("key attributes: %s", ", ".join(key))
        refined: dict = {}
        dist = Distributions(cfg.qi) if distributions else None
        polished: dict = {}

        if single:
            groups = _one_block(source, cfg, profile, budget, passes, refined, cols, dist)
            blocks = [rows]
        else:
            groups, blocks, profile = _blocks(source, cfg, profile, cols, budget, passes, dest, tmp_dir, threads,
                                              cleanup, refined, sampled, rows, polished, dist, backend)
        _verify_groups(groups.labels, groups.sizes, cfg.k, rows)
        release_memory()
        dist = dist.finish(groups.centroid, groups.sizes) if dist is not None else None
        if callable(distributions):
            distributions(dist)

        t = time.perf_counter()
        table = None
        verified: dict = {}  # the write pass's own count of the published classes
        if dest is None:
            sse, sst, table, col_sse, col_sst = write_pass(source, None, "parquet", profile, groups, cfg.group_column,
                                         budget.chunk_rows, cfg.progress, k=cfg.k, verified=verified)
        else:
            with atomic_output(dest, tmp_dir, group) as tmp:
                sse, sst, _, col_sse, col_sst = (write_pass if backend is None else backend.write_pass)(source, tmp, fmt, profile, groups, cfg.group_column,
                                         budget.chunk_rows, cfg.progress, k=cfg.k, verified=verified)
        passes["write"] = time.perf_counter() - t
        rss.sample()

    sizes, counts = np.unique(groups.sizes, return_counts=True)
    report = Report(
        rows=rows,
        groups=groups.count,
        min_group_size=int(groups.sizes.min()),
        max_group_size=int(groups.sizes.max()),
        sse=float(sse),
        sst=float(sst),
        information_loss_percent=float(100.0 * sse / sst) if sst > 0 else 0.0,
        wall_seconds=time.perf_counter() - t0,
        peak_rss_bytes=int(rss.peak),
        k=cfg.k,
        method=cfg.method,
        gamma=cfg.effective_gamma if cfg.method in ("vmdav", "ivmdav") else None,
        qi=list(cfg.qi),
        passes={p: round(s, 4) for p, s in passes.items()},
        blocks=len(blocks),
        block_rows_min=int(min(blocks)),
        block_rows_max=int(max(blocks)),
        block_size=budget.block_size,
        leaf_size=None if single else cfg.effective_leaf_size(rows),
        polish=polished or None,
        memory_limit=cfg.memory_limit,
        refine=refined or None,
        key_attributes=list(key) if key is not None else None,
        projected_information_loss_percent=(
            float(100.0 * col_sse[cols].sum() / col_sst[cols].sum()) if key is not None and col_sst[cols].sum() > 0
            else None),
        group_size_counts={str(int(s)): int(c) for s, c in zip(sizes, counts)},
        verified=verified,
        settings=cfg.settings(),
        metrics=metrics,
        information_loss_by_qi={c: float(100.0 * col_sse[j] / col_sst[j]) if col_sst[j] > 0 else 0.0
                                for j, c in enumerate(cfg.qi)},
        distributions=dist,
    )
    log.info("done: %d groups, IL %.4f %%", report.groups, report.information_loss_percent)
    return RunResult(report, groups.labels, table)


def _tmp_folder(tmp_dir, dest) -> str | None:
    """Where a transcoded CSV input goes: ``tmp_dir``, else beside the output, else the
    system's temporary folder."""
    if tmp_dir is not None:
        return os.fspath(tmp_dir)
    if dest is not None:
        return os.path.dirname(os.path.abspath(os.fspath(dest)))
    return None


def release_memory() -> None:
    """Hand freed heap pages back to the OS between passes (glibc keeps them otherwise),
    so that peak RSS is the largest pass, not the sum of the passes' leftovers."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to do
        pass


def _one_block(source, cfg, profile, budget, passes, refined, cols, dist=None) -> Groups:
    """Every row in one in-memory block: load, aggregate, stitch."""
    rows = profile.rows
    t = time.perf_counter()
    X = np.empty((rows, len(cfg.qi)))
    for offset, chunk in source.iter_arrays(cfg.qi, budget.chunk_rows):
        X[offset: offset + chunk.shape[0]] = chunk
    if dist is not None:  # the "before" histograms (report.distributions)
        dist.start(profile.min, profile.max)
        dist.add(X.T)
    Z = standardize(X, profile)
    Zg = Z if cols.shape[0] == Z.shape[1] else np.ascontiguousarray(Z[:, cols])  # the grouping columns
    passes["load"] = time.perf_counter() - t

    t = time.perf_counter()
    with Progress("aggregate", rows, cfg.progress) as bar:
        local = aggregate_block(Zg, cfg.method_code, cfg.k, cfg.effective_gamma, bar)
    passes["aggregate"] = time.perf_counter() - t
    if cfg.refine is not None:
        t = time.perf_counter()
        from .passes.refine import refine_partition  # imported when used: start-up time

        res = refine_partition(Zg, local, cfg.k, mode=cfg.refine, budget_seconds=cfg.refine_seconds,
                               max_rounds=cfg.refine_rounds, seed=cfg.effective_seed)
        local = res.labels
        refined.update(mode=cfg.refine, sse_before=res.sse_before, sse_after=res.sse_after,
                       rounds=res.rounds, moves=res.moves, windows=1)
        passes["refine"] = time.perf_counter() - t

    t = time.perf_counter()
    stitcher = Stitcher(rows, profile)
    stitcher.add_block(None, X, Z, local)
    del X, Z
    groups = stitcher.finish()
    passes["stitch"] = time.perf_counter() - t
    return groups


def _blocks(source, cfg, profile, cols, budget, passes, dest, tmp_dir, threads, cleanup, refined, sampled, total,
            polished, dist=None, backend=None):
    """Partition into spilled blocks, aggregate them in parallel, stitch; returns
    ``(groups, block sizes, profile)``.

    With ``sampled`` (``partition.sample_row_groups``; ``profile`` is then None) the
    plan comes from that sample and the partition pass measures the columns too. If
    that leaves a block above the budget's limit (a sample that missed how the rows
    are spread: a file sorted on a QI, say), or the columns must be measured again
    in a power-of-two scale, the pass 1 that was skipped runs after all.

    The spill folder is removed when ``cleanup`` closes (after the write pass, which
    may read the label map from it), also on errors and Ctrl-C. With ``backend``
    (``engine.cluster``) the partition and aggregate passes run as its tasks.
    """
    new_store, partition = (BlockStore, partition_pass) if backend is None else (backend.store,
                                                                                  backend.partition_pass)
    folder = tmp_dir if tmp_dir is not None else (os.path.dirname(os.path.abspath(dest)) if dest else None)
    t = time.perf_counter()
    store = None
    if sampled is not None:
        X, ids = sampled
        sprof = sample_profile(cfg.qi, X)
        plan = plan_blocks(standardized(X, sprof, cols), ids, total, budget.block_size)
        store = cleanup.enter_context(new_store(plan.n_blocks, len(cfg.qi), folder, budget.spill_buffer,
                                                rows=total))
        moments = Moments(cfg.qi, np.ones(len(cfg.qi)))
        if dist is not None:  # bins over the sample's range (the columns' own is not known yet)
            dist.start(sprof.min, sprof.max)
        partition(source, sprof, cols, plan, store, budget.chunk_rows, cfg.progress, moments=moments,
                  rows=total, dist=dist)
        if moments.n == 0:
            raise EngineError(f"{source.label} has no rows")
        too_big = budget.block_limit is not None and int(store.rows.max()) > budget.block_limit
        scale = moments.rescale()
        if too_big:
            log.warning("the row-group sample left a block of %d rows (limit %d): sampling every row group",
                        int(store.rows.max()), budget.block_limit)
            store.close()
            store = None
        elif scale is not None:
            tp = time.perf_counter()
            profile = profile_columns(source, cfg.qi, budget.chunk_rows, cfg.progress, rows=total)
            passes["profile"] = time.perf_counter() - tp
        else:
            profile = moments.profile()
    if store is None:
        if profile is None or profile.sample is None:
            tp = time.perf_counter()
            profile = profile_columns(source, cfg.qi, budget.chunk_rows, cfg.progress, rows=total,
                                      sample_stride=sample_stride(total, budget.block_size))
            passes["profile"] = time.perf_counter() - tp
            t = time.perf_counter()
        Zs = standardized(profile.sample, profile, cols)
        plan = plan_blocks(Zs, profile.sample_ids, profile.rows, budget.block_size)
        del Zs
        store = cleanup.enter_context(new_store(plan.n_blocks, len(cfg.qi), folder, budget.spill_buffer,
                                                rows=profile.rows))
        if dist is not None:
            dist.start(profile.min, profile.max)
        partition(source, profile, cols, plan, store, budget.chunk_rows, cfg.progress, dist=dist)
    rows = profile.rows
    polish_rounds = cfg.effective_polish_rounds(rows)
    # polished runs aggregate units of several blocks (fewer seams); else one block a unit
    units = store.units(max(2 * cfg.k, POLISH_UNIT_ROWS if polish_rounds > 0 else 0))
    passes["partition"] = time.perf_counter() - t
    release_memory()
    log.info("partitioned %d rows into %d blocks", rows, len(units))

    t = time.perf_counter()
    labels = np.empty(rows, np.int32) if not budget.labels_on_disk else \
        np.memmap(store.private_file("labels.i32", 4 * rows), dtype=np.int32, mode="r+", shape=(rows,))
    # the seams between units are polished in memory (all standardized rows at once)
    seams = None
    if polish_rounds > 0 and len(units) > 1:
        need = seam_bytes(rows, cols.shape[0], cfg.k)
        if cfg.memory_limit is not None and need > cfg.memory_limit // 2:
            log.warning("seam polish skipped: it needs about %d MiB, more than half the memory limit", need >> 20)
            polished.update(seams_skipped=True)
        else:
            seams = (np.empty((rows, cols.shape[0])), [])
    # without refinement or seam polish the workers also sum each group's values: no stitch pass
    sums = None if cfg.refine is not None or seams is not None else (
        aligned_zeros(rows // cfg.k, len(cfg.qi)), np.zeros(rows // cfg.k, np.int64), np.zeros(len(cfg.qi)))
    with Progress("aggregate", rows, cfg.progress) as bar:
        n_groups = aggregate_blocks(store, units, profile, cols, cfg.method_code, cfg.k,
                                    cfg.effective_gamma, labels, threads, bar, leaf=cfg.effective_leaf_size(rows),
                                    sums=sums, polish_rounds=polish_rounds, polish_near=polish_near(cfg.k),
                                    polish_rotations=POLISH_ROTATIONS, seams=seams, backend=backend)
    passes["aggregate"] = time.perf_counter() - t
    if polish_rounds > 0:
        polished.update(rounds=polish_rounds, near=polish_near(cfg.k))
    if seams is not None:
        t = time.perf_counter()
        from .kernels.polish import polish_seams, rotations

        lab = np.asarray(labels).astype(np.int64)
        r, ops = _interruptible(polish_seams, seams[0], lab, cfg.k, polish_rounds, polish_near(cfg.k),
                                np.asarray(seams[1], np.int64), rotations(cols.shape[0], POLISH_ROTATIONS))
        labels[:] = lab
        del lab, seams
        polished.update(seam_rounds=int(r), seam_operations=int(ops))
        passes["polish"] = time.perf_counter() - t
    release_memory()
    if cfg.refine is not None:
        t = time.perf_counter()
        with Progress("refine", rows, cfg.progress) as bar:
            from .passes.border import refine_borders  # imported when used: start-up time

            stats, n_groups = refine_borders(store, units, profile, cols, labels, n_groups, cfg, bar)
            refined.update(stats)
        passes["refine"] = time.perf_counter() - t

    t = time.perf_counter()
    if sums is None:
        with Progress("stitch", rows, cfg.progress) as bar:
            groups = stitch_blocks(store, units, profile, labels, n_groups, bar)
    else:
        # the workers' centroids and squared errors: no group is empty without refinement
        groups = Groups(labels, sums[1][:n_groups], sums[0][:n_groups], sse=sums[2])
        del sums
    passes["stitch"] = time.perf_counter() - t
    sizes = [int(store.rows[b]) for u in units for b in u]  # spilled blocks (a unit may hold several)
    if not budget.labels_on_disk:  # (else the label map is a file in the store's folder)
        store.discard()  # the write pass reads the input, not the blocks
    return groups, sizes, profile


def _interruptible(kernel, *args):
    """``kernel(*args, stop)`` on a helper thread, waited for from this one, so that a
    signal is handled while it runs: the handler's exception sets ``stop`` (the
    kernel returns within one group visit) and is raised again."""
    from concurrent.futures import ThreadPoolExecutor

    stop = np.zeros(1, np.int64)
    with ThreadPoolExecutor(max_workers=1) as pool:
        fut = pool.submit(kernel, *args, stop)
        try:
            return fut.result()
        except BaseException:
            stop[0] = 1
            raise


def seam_bytes(rows: int, d: int, k: int) -> int:
    """Memory of the seam polish: the standardized rows, the polish kernel's slot copy
    (2k-1 slots a group), near lists and their copy, sums / means / orders."""
    from .config import polish_near

    groups = rows // k + 1
    return 8 * (rows * d + groups * (2 * k - 1) * d + 2 * groups * polish_near(k) + 5 * groups * d + 2 * rows)


def _verify_groups(labels: np.ndarray, sizes: np.ndarray, k: int, rows: int) -> None:
    """Independent recount of the row -> group map before anything is written."""
    if labels.shape[0] != rows or (labels < 0).any():
        raise EngineError("internal check failed: a row was not assigned to a group")
    recount = count_labels(labels, sizes.shape[0])
    if not np.array_equal(recount, sizes) or int(recount.sum()) != rows:
        raise EngineError("internal check failed: group sizes do not add up to the row count")
    if recount.min() < k:
        raise EngineError(f"internal check failed: a group has {int(recount.min())} rows, fewer than k={k}")
