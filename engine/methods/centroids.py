"""The MDAV family's pass-level hooks (``coordinator.FLOWS`` for mdav, mdav-single, vmdav,
ivmdav, ama): groups of at least k rows, every QI published as its group's mean.

The coordinator (``engine.coordinator``) runs the passes; this module says what
they do for a centroid method: the QIs are read as numbers; pass 1 may sample
Parquet row groups instead (the partition pass then measures the columns) and may
select key attributes (AMA, ``--select``); the block function is
``passes.aggregate.aggregate_block`` (kd-tree MDAV on a whole block) or
``kernels.mdav.leaf.aggregate_leaves`` (leaves of a spilled block), then polish (streamed
runs up to 2M rows), seam polish and refinement; the stitch gives each group's
centroid; the write pass gathers the centroids into the QI columns.

With ``--strata`` (``self.strata``) each stratum's blocks are units of their own
(``passes.partition.strata_units``: as a table of that stratum's rows), the seam
polish runs stratum by stratum and ``--refine``'s windows pair units of one stratum
only; the kernels are those of a run without strata, on the table's z-scores. The
stitch also gives each stratum's SSE and SST (``passes.stitch.strata_loss``; not for
mixed-type QIs, whose loss is measured per QI kind by the write pass).
"""

from __future__ import annotations

import functools
import logging
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..encode import mixed as mixed_types
from ..encode.kinds import csv_types, shown_kind
from ..tuning import (POLISH_MAX_ROWS, POLISH_MIN_GAIN, POLISH_ROTATIONS, POLISH_UNIT_ROWS, SCALE_DESCENT,
                      SCALE_ROTATIONS, SCALE_WINDOW, polish_near, scale_near, scale_unit_rows, seam_stage)
from ..errors import EngineError
from ..frames import Moments, aligned_zeros, sample_row_groups
from ..kernels.mdav.leaf import aggregate_leaves
from ..kernels.search.polish import polish_seams, rotations
from ..io.schema import check_output_types
from ..io.sink import check_csv_columns
from ..io.spill import MemoryBlocks
from ..passes.aggregate import UnitPlan, aggregate_block, aggregate_blocks
from ..passes.distributions import Distributions, category_distribution
from ..passes.executor import LocalExecutor
from ..passes.partition import sample_stride, strata_units, unit_strata
from ..passes.published import PublishedGroups, RowRecords
from ..passes.results import Profiled, Written, release_memory, timed
from ..passes.seams import SeamStage, seam_pass, seam_plan
from ..passes.profile import check_columns, profile_columns
from ..passes.stitch import Groups, stitch_blocks, strata_loss
from ..progress import Progress

log = logging.getLogger("engine")


def block_labels(Z: np.ndarray, cfg, leaf: int = 0, progress=None) -> np.ndarray:
    """The MDAV family's block function: labels of the standardized rows ``Z``."""
    if leaf:
        return aggregate_leaves(Z, cfg.method_code, cfg.k, cfg.effective_gamma, leaf)
    return aggregate_block(Z, cfg.method_code, cfg.k, cfg.effective_gamma, progress)


class CentroidFlow:
    """The pass-level hooks of the MDAV family (``engine.coordinator``)."""

    aggregate_pass = "aggregate"
    report_units = False  # the report's blocks are the spilled blocks (a polish unit holds several)
    # where the passes run (``passes.executor``; set by the coordinator: ``--scheduler``'s Dask tasks)
    executor = LocalExecutor()

    def __init__(self, cfg, distributions: bool = False):
        self.cfg = cfg
        self.budget_cfg = cfg
        self.dist = Distributions(cfg.qi) if distributions else None
        self.cols = np.arange(len(cfg.qi))  # the grouping columns (the key attributes, with a selection)
        self.key = None
        self.metrics: dict = {}
        self.refined: dict = {}
        self.polished: dict = {}
        self.rows = 0
        self.sums = None
        self.seams = None
        self.stage = None  # the seam stage of a polished run (``_scale``: ``passes.seams``)
        self.polish_rounds = 0
        self.threads = 1
        self.mixed = None  # mixed-type QIs (``engine.encode.mixed.Mixed``): self.cfg is then its encoded config
        self.missing = None  # mixed-type QIs: the missing cells imputed or kept (``Publisher.missing``)
        self.mixed_dist = None  # mixed-type QIs with distributions asked for: filled by the write pass
        # --strata (``passes.partition.Strata``, set by the coordinator): units, seam polish and
        # refinement within a stratum; per stratum 100 SSE / SST (``strata_loss``: (sse, sst) per stratum)
        self.strata = None
        self.strata_groups = None
        self.strata_loss = None
        self._seam_strata = None  # each unit's stratum, for the seam polish
        # engine.entities (set by the coordinator): each row's group, given (no aggregate pass), and the
        # self-check's extra class columns and person column (``passes.selfcheck.entity_counter``)
        self.given = None
        self.classes = None

    # ------------------------------------------------------------ boundary

    def check_input(self, source, fmt, dest, passes):
        """CSV: QIs read as numbers (or as text, Boolean or dates: ``mixed.csv_types``);
        other columns as the file's text for a CSV output, else with types inferred from
        the whole file. Mixed-type QIs: returns the encoded source (``_plan_mixed``)."""
        cfg = self.cfg
        t = time.perf_counter()
        typed = source.with_types(csv_types(source, cfg), text=fmt == "csv")
        if typed is not source and fmt != "csv":
            passes["infer"] = time.perf_counter() - t  # the whole-file type inference of a CSV input
        source = typed
        check_columns(source, cfg.qi, numeric=False)
        if cfg.group_column is not None and cfg.group_column in source.columns:
            raise EngineError(f"group column {cfg.group_column!r} already exists in {source.label}")
        if dest is not None:
            others = [c for c in source.columns if c not in set(cfg.qi)]
            check_output_types(source.schema, fmt, others)
            check_csv_columns(dest, source.schema, others)
        return self._plan_mixed(source, passes)

    def _plan_mixed(self, source, passes):
        """Mixed-type QIs (``engine.encode.mixed``): their dictionaries learnt; the passes up to
        the stitch then group the encoded columns (``self.cfg``: the encoded config) of
        the encoded source, on the grouping columns; the write pass publishes from the
        input's own QI columns. None of it when every QI is numeric (and no ``ordinal``
        or ``weights``)."""
        self.mixed = mixed_types.plan(source, self.cfg, self.cfg.chunk_rows, passes, counts=self.dist is not None)
        if self.mixed is None:
            return source
        self.cfg = self.budget_cfg = self.mixed.cfg
        self.cols = self.mixed.grouping
        # (the numeric path's histograms are not counted: the write pass fills ``mixed_dist``)
        self.mixed_dist = {} if self.dist is not None else None
        self.dist = None
        return self.mixed.source

    @property
    def least_rows(self) -> int:
        """The fewest rows a stratum may have (``--strata``): k."""
        return self.cfg.k

    def check_rows(self, source, rows):
        if self.mixed is None:  # dtypes: after the row count, as a header-only CSV has no types
            check_columns(source, self.cfg.qi)
        if self.cfg.k > rows:
            raise EngineError(f"k={self.cfg.k} is larger than the number of rows ({rows})")
        self.rows = rows

    def budget_args(self, source, rows) -> dict:
        per_row = self.per_row(rows)
        kept = self.mixed is not None and per_row is not None  # (row-ordered: no table of groups)
        return {"d": len(self.cfg.qi), "state": self.mixed.state(rows) if kept else None,
                "row_ordered": per_row is None, "per_row": per_row or "", "published": self.published_width()[0]}

    def published_width(self) -> tuple[int, int | None]:
        """A row-ordered run's records (``passes.published.RowRecords``): the published
        values a row and the width of the workers' per-unit sums (None: as many); a mixed
        run publishes one value a QI (``Mixed.published_sums``), not its encoded columns."""
        if self.mixed is None:
            return len(self.cfg.qi), None
        return len(self.mixed.qis), self.mixed.loss_width

    def per_row(self, rows: int) -> str | None:
        """None when a streamed run of ``rows`` rows hands its published values to the
        write pass in row order, on disk (``passes.published.RowRecords`` in place of the
        row -> group map and the table of groups): on this machine, when the workers
        measure the final groups (no refinement, no seam polish in memory), numeric QIs or
        mixed ones the workers publish (``Mixed.row_ordered``), no strata (numeric QIs: each
        stratum's loss is measured from the map; mixed ones are not measured by stratum),
        fewer than 2^32 rows. Else what keeps the map (for the budget's refusal). Decided before the
        passes; the output is the same either way."""
        cfg = self.cfg
        mixed = self.mixed is not None and not self.mixed.row_ordered()
        for why, keeps in ((self.executor.keeps_row_map, self.executor.keeps_row_map is not None),
                           ("non-numeric QIs", mixed),
                           ("--strata", cfg.strata is not None and self.mixed is None),  # (its loss per stratum)
                           ("--refine", cfg.refine is not None),
                           ("the in-memory seam polish", cfg.effective_polish_rounds(rows) > 0
                            and not self._scale(rows)),
                           ("a table of 2^32 rows or more", rows >= 1 << 32)):
            if keeps:
                return why
        return None

    # ------------------------------------------------------------ pass 1

    def profile(self, inp, passes):

        cfg, source, rows, budget, single = self.cfg, inp.source, inp.rows, inp.budget, inp.single
        stride = sample_stride(rows, budget.block_size)
        # blocks from Parquet: the plan's sample from a few row groups, and pass 1's
        # checks and sums done by the partition pass (one pass over the QIs fewer)
        with timed(passes, "sample"):
            if single or self.strata is not None:  # (strata: each one's plan from pass 1's sample of every row)
                sampled = None
            elif self.mixed is not None:  # the compact columns of the sampled rows (or None)
                sampled = self.mixed.sample_row_groups(rows, stride)
            else:
                sampled = sample_row_groups(source, cfg.qi, rows, stride)
        profile = None
        if sampled is None:
            del passes["sample"]
            with timed(passes, "profile"):
                if self.mixed is not None:  # from one column a QI
                    profile = self.mixed.profile_pass(budget.chunk_rows, cfg.progress, rows, 0 if single else stride)
                else:
                    profile = profile_columns(source, cfg.qi, budget.chunk_rows, cfg.progress, rows=rows,
                                              sample_stride=0 if single else stride)
            if self.mixed is not None:  # (``cfg.qi``: the encoded columns, a category's own among them)
                log.info("profiled %d rows x %d quasi-identifiers (%d encoded columns)", rows,
                         len(self.mixed.original.qi), len(cfg.qi))
            else:
                log.info("profiled %d rows x %d quasi-identifiers", rows, len(cfg.qi))
        else:
            log.info("sampled %d rows from the row groups", sampled[0].shape[0])
        if cfg.selects:
            with timed(passes, "select"):
                self._select(source, budget)
        return Profiled(profile, source, list(cfg.qi), self.cols, sampled)

    def _select(self, source, budget):
        """Key attributes (AMA, ``--select``): the grouping columns."""
        from ..select import profile as dependency_profile  # imported when used: start-up time

        cfg = self.cfg
        dep = dependency_profile(source, cfg.qi, cfg.measure, count=cfg.select_count if cfg.select else None,
                                 width=cfg.width, bins=cfg.bins, chunk_rows=budget.chunk_rows)
        self.key = dep.key_attributes
        self.metrics["dependency"] = {k: v for k, v in dep.to_dict().items()
                                      if k in ("measure", "tree", "tree_edges", "edge_weights", "degrees",
                                               "key_attributes", "selection")}
        self.cols = np.array(sorted(cfg.qi.index(c) for c in self.key), np.int64)
        log.info("key attributes: %s", ", ".join(self.key))

    # ------------------------------------------------------------ pass 2

    def new_store(self, n_blocks, folder, rows, budget):
        new = self.executor.store  # (this machine's run file, or Dask's part files)
        if self.mixed is not None:  # one value a QI spilled, expanded when read
            return new(n_blocks, len(self.mixed.qis), folder, budget.spill_buffer, rows=rows,
                       expand=self.mixed.expand)
        return new(n_blocks, len(self.cfg.qi), folder, budget.spill_buffer, rows=rows)

    def new_moments(self, columns):
        """Pass 1's arithmetic for a partition pass that measures on its way
        (``frames.Moments``; mixed-type QIs: ``mixed.MixedMoments``, on the
        compact columns the store spills)."""
        if self.mixed is not None:
            return mixed_types.MixedMoments(self.mixed)
        return Moments(columns, np.ones(len(columns)))

    def units(self, store, budget, profile):
        """Polished runs aggregate units of several blocks (fewer seams), at least two units
        (a table of fewer than 2 x ``POLISH_UNIT_ROWS`` rows: units of half of it, so that
        two workers share it; the seams cost less than the second core gains, and the
        output depends on the rows only); else one block a unit."""
        if isinstance(store, MemoryBlocks):  # one block in memory (a stratum a block): no polish
            return store.units(0)
        self.polish_rounds = self.cfg.effective_polish_rounds(profile.rows)
        most = unit_rows(profile.rows, self.cols.shape[0], self._scale(profile.rows))  # (seam stage: by the columns)
        unit = min(most, profile.rows // 2) if self.polish_rounds > 0 else 0
        if self.strata is not None:  # each stratum's blocks as a table of its own
            polished, k = self.polish_rounds > 0, self.cfg.k
            return strata_units(store.rows, self.strata.block_strata,
                                lambda n: max(2 * k, min(most, n // 2) if polished else 0))
        return store.units(max(2 * self.cfg.k, unit))

    def _scale(self, rows: int) -> bool:
        """Whether a polished run of ``rows`` rows takes the seam stage (``tuning.seam_stage``:
        by rows x encoded QIs, as ``RunConfig.effective_polish_rounds`` and the budget)."""
        return seam_stage(rows, len(self.cfg.qi), POLISH_MAX_ROWS)

    def _unit_strata(self, units) -> np.ndarray | None:
        return None if self.strata is None else unit_strata(units, self.strata.block_strata)

    # ------------------------------------------------------------ pass 3

    def _block(self, Z, leaf, progress):
        """The method's registered block function (``Method.block``) on one unit."""
        return self.cfg.spec.block_function(Z, self.cfg, leaf, progress)

    def _method(self) -> tuple[int, int, float]:
        return self.cfg.method_code, self.cfg.k, self.cfg.effective_gamma

    def aggregate(self, blocks, labels, threads, bar) -> int:
        cfg, rows, cols = self.cfg, blocks.profile.rows, self.cols
        self.threads = threads
        if blocks.single:  # one exact block, no leaves; the write pass measures the errors
            return aggregate_blocks(blocks.store, blocks.units, blocks.profile, cols,
                                    UnitPlan(self._method(), block=self._block), labels, threads, bar)
        scale = self._scale(rows)  # (the seams as blocks of their own: passes.seams)
        cheap = rows > POLISH_MAX_ROWS  # (the cheaper settings)
        near, n_rot = (scale_near(cfg.k), SCALE_ROTATIONS) if cheap else (polish_near(cfg.k), POLISH_ROTATIONS)
        # the seams between units: up to POLISH_MAX_ROWS rows and as many x 16 cells polished in
        # memory (all standardized rows at once; under a memory limit the budget counts them:
        # engine.budget, whatever the limit), above as the blocks of a second plan (``_scale``)
        ustrata = self._unit_strata(blocks.units)
        seams = len(blocks.units) > 1 if ustrata is None else np.unique(ustrata).shape[0] < len(blocks.units)
        if self.polish_rounds > 0 and seams and scale:
            self.stage = self._seam_stage(blocks)
        elif self.polish_rounds > 0 and seams:
            self.seams = (np.empty((rows, cols.shape[0])), [])
            self._seam_strata = ustrata
        # without refinement or seam polish the workers also sum each group's values: no stitch pass
        # (mixed-type QIs: their published values, one a QI: ``mixed.Mixed.published``)
        reduce = self.mixed
        sink = labels if isinstance(labels, RowRecords) else None  # (``row_ordered``: the coordinator's)
        if sink is not None:  # the workers measure, the sink keeps the published values in row order
            self.sums = sink
        elif cfg.refine is None and self.seams is None:
            width = len(cfg.qi) if reduce is None else len(self.mixed.qis)
            self.sums = (aligned_zeros(rows // cfg.k, width), np.zeros(rows // cfg.k, np.int64),
                         np.zeros(width if reduce is None else self.mixed.loss_width))
            if self.strata is not None and self.stage is None:  # (each unit's squared errors: the strata's losses)
                self.sums += ([],)
        # on Dask the units are tasks: the default block function (this family's kernels,
        # as ``block_labels``) travels, not this flow
        block, mapper = self.executor.unit_work(self._block)
        # (with the seam stage the units are not polished: the stage polishes every group)
        polish = (self.polish_rounds, near, n_rot, *((SCALE_DESCENT, SCALE_WINDOW) if cheap else ())) \
            if self.polish_rounds > 0 and self.stage is None else None
        plan = UnitPlan(self._method(), cfg.effective_leaf_size(rows), polish, block,
                        reduce if self.sums is not None else None,
                        self.stage.router if self.stage is not None else None)
        try:  # (with the seam stage, the workers' sums come from its blocks)
            first = None if sink is not None and self.stage is not None else labels  # (the seam stage's are final)
            n_groups = aggregate_blocks(blocks.store, blocks.units, blocks.profile, cols, plan, first, threads, bar,
                                        sums=self.sums if self.stage is None else None, seams=self.seams,
                                        stage=self.stage, mapper=mapper)
        except BaseException:
            if self.stage is not None:
                self.stage.close()
            raise
        if self.polish_rounds > 0:
            self.polished.update(rounds=self.polish_rounds, near=near, min_gain=POLISH_MIN_GAIN)
        return n_groups

    def _seam_stage(self, blocks) -> SeamStage:
        """The seam stage's plan (from the partition's sample) and its spill store,
        beside the first one's."""
        X, ids = blocks.sample  # (mixed-type QIs: their encoded columns, as the first plan's)
        router = seam_plan(X, ids, blocks.profile, self.cols, blocks.profile.rows,
                           unit_rows(blocks.profile.rows, self.cols.shape[0], True), self.strata)
        store = blocks.store
        return SeamStage(router, store.d, store.path.parent, store.buffer_bytes, blocks.profile.rows, store.expand)

    def after_aggregate(self, blocks, labels, n_groups, passes) -> int:
        """The seam polish (several polished units), then refinement (``--refine``)."""
        cfg = self.cfg
        if self.seams is not None:
            with timed(passes, "polish"):
                self._polish_seams(labels)
            release_memory()
        if self.stage is not None:
            stage, self.stage = self.stage, None
            # (the cheaper settings above POLISH_MAX_ROWS rows; below, a stage taken for its columns
            # polishes with the in-memory polish's: ``tuning.seam_stage``)
            polish = (self.polish_rounds, scale_near(cfg.k), rotations(self.cols.shape[0], SCALE_ROTATIONS),
                      SCALE_DESCENT, SCALE_WINDOW) if blocks.profile.rows > POLISH_MAX_ROWS else \
                (self.polish_rounds, polish_near(cfg.k), rotations(self.cols.shape[0], POLISH_ROTATIONS))
            try:
                with timed(passes, "seams"), Progress("seams", blocks.profile.rows, cfg.progress) as bar:
                    n_groups = seam_pass(stage, blocks.profile, self.cols, self._method(), polish, labels,
                                         self.threads, bar, self.sums, self.mixed if self.sums is not None else None,
                                         POLISH_MIN_GAIN)
            finally:
                stage.close()
            self.polished.update(seam_blocks=len([b for b in stage.store.rows if b > 0]))
            release_memory()
        if cfg.refine is not None:
            with timed(passes, "refine"), Progress("refine", blocks.profile.rows, cfg.progress) as bar:
                from ..passes.border import refine_borders  # imported when used: start-up time

                stats, n_groups = refine_borders(blocks.store, blocks.units, blocks.profile, self.cols, labels,
                                                 n_groups, cfg, bar, self._unit_strata(blocks.units))
                self.refined.update(stats)
        return n_groups

    def _polish_seams(self, labels):
        """The seams between the units: one ``polish_seams`` over the whole table. With
        strata: each stratum of several units on its own (its rows, its groups, its seams)."""
        Z, unit = self.seams[0], np.asarray(self.seams[1], np.int64)
        lab = np.asarray(labels).astype(np.int64)
        if self.strata is None:
            r, ops = self._seam_polish(Z, lab, unit)
        else:
            r = ops = 0
            gstr = self._seam_strata[unit]  # each group's stratum (groups in unit order)
            order = np.argsort(self.strata.whole(), kind="stable")  # (every row is held here anyway)
            start = np.concatenate([[0], np.cumsum(self.strata.rows)])
            for s in range(self.strata.count):
                g0, g1 = np.searchsorted(gstr, [s, s + 1])
                if g1 == g0 or unit[g0] == unit[g1 - 1]:  # one unit: polished in its worker
                    continue
                rows_s = order[start[s]: start[s + 1]]
                whole = rows_s.shape[0] == Z.shape[0]  # (one stratum: the table, no copy)
                lab_s = lab - g0 if whole else lab[rows_s] - g0
                r_s, ops_s = self._seam_polish(Z if whole else Z[rows_s], lab_s, unit[g0:g1] - unit[g0])
                lab[rows_s if not whole else slice(None)] = lab_s + g0
                r, ops = max(r, r_s), ops + ops_s
        labels[:] = lab
        self.seams = None
        self.polished.update(seam_rounds=int(r), seam_operations=int(ops))

    def _seam_polish(self, Z, lab, unit):
        """One seam polish of the rows ``Z``, their groups ``lab`` (0..G-1, changed in
        place) and each group's unit; returns ``(rounds, operations)``."""
        cfg = self.cfg
        args = (Z, lab, cfg.k, self.polish_rounds, polish_near(cfg.k), unit)
        R = rotations(self.cols.shape[0], POLISH_ROTATIONS)
        return _interruptible(functools.partial(polish_seams, min_gain=POLISH_MIN_GAIN), *args, R)

    # ------------------------------------------------------------ stitch, write, report

    def stitch(self, blocks, labels, n_groups, bar) -> Groups | PublishedGroups:
        per_unit = None
        if isinstance(self.sums, RowRecords):  # (no strata: ``row_ordered``)
            sink, self.sums = self.sums, None
            return sink.finish(n_groups)
        if self.sums is None:
            groups = stitch_blocks(blocks.store, blocks.units, blocks.profile, labels, n_groups, bar)
        else:
            # the workers' centroids and squared errors: no group is empty without refinement
            sums, self.sums = self.sums, None
            groups = Groups(labels, sums[1][:n_groups], sums[0][:n_groups], sse=sums[2])
            per_unit = sums[3] if len(sums) > 3 else None
        if self.strata is not None and self.mixed is None:  # (mixed-type QIs: not measured per stratum)
            self.strata_loss = strata_loss(blocks.store, blocks.units, self._unit_strata(blocks.units), labels,
                                           groups, blocks.profile, self.strata.count, per_unit)
        return groups

    def check_stitched(self, groups) -> None:
        pass

    def one_class(self):  # (maxent only)
        raise AssertionError("a centroid method always partitions")

    def distributions_after(self, groups):
        if self.mixed is not None:  # (filled by the write pass: ``_mixed_distributions``)
            return self.mixed_dist
        if self.dist is None:
            return None
        if isinstance(groups, PublishedGroups):  # ("after" counted a unit at a time: ``RowRecords.add``)
            return self.dist.finish(None, None)
        return self.dist.finish(groups.centroid, groups.sizes)

    def write(self, source, path, fmt, groups, chunk_rows, profile):

        cfg, publisher = self.cfg, None
        if self.mixed is not None:  # published per QI kind, from the input's own QI columns
            sizes = getattr(groups, "sizes", None)  # (row-ordered: no table of groups, no distributions)
            source, cfg, publisher = source.base, self.mixed.original, self.mixed.publisher(groups)
            self.missing = publisher.missing  # (counted by the write pass: read at the report)
            if self.mixed_dist is not None and self.executor.in_process:  # numeric QIs: counted by the write pass
                publisher.histograms = self._numeric_histograms()
        verified: dict = {}  # the write pass's own count of the published classes
        write = self.executor.write_pass
        extra = {} if publisher is None else {"publisher": publisher}
        if self.classes is not None:
            extra["classes"] = self.classes
        sse, sst, table, col_sse, col_sst = write(source, path, fmt, profile, groups,
                                                  cfg.group_column, chunk_rows, cfg.progress,
                                                  k=cfg.k, verified=verified, **extra)
        if publisher is not None and self.mixed_dist is not None:
            self.mixed_dist.update(self._mixed_distributions(publisher, sizes))
        return Written(table, verified, col_sse, col_sst, list(cfg.qi))

    def _numeric_histograms(self):
        """``Publisher.histograms`` of a mixed-type run's numeric QIs: bins over their
        measured ranges (``Mixed.raw``), "before" and "after" counted by the write pass."""
        mixed = self.mixed
        names = [q.name for q in mixed.qis if q.kind == "numeric"]
        if not names:
            return None
        first = [q.first for q in mixed.qis if q.kind == "numeric"]
        before, after = Distributions(names), Distributions(names)
        for d in (before, after):
            d.start(mixed.raw.min[first], mixed.raw.max[first])
        return before, after, {c: j for j, c in enumerate(names)}

    def _mixed_distributions(self, publisher, sizes) -> dict:
        """A mixed-type run's distributions, in QI order: a categorical QI's category counts
        before (the dictionary's) and after (the published categories by group size:
        ``passes.distributions.category_distribution``); a numeric QI's histograms as
        the write pass counted them (``Publisher.histograms``)."""
        out = {}
        hist = publisher.histograms
        for j, q in enumerate(self.mixed.qis):
            if q.kind in ("nominal", "ordinal") and q.counts is not None:
                if publisher.table is None:  # (row-ordered: each code's rows, counted as written)
                    published, counts = np.arange(publisher.after[j].shape[0], dtype=np.float64), publisher.after[j]
                else:
                    published, counts = publisher.table[:, j], sizes
                out[q.name] = category_distribution(q.kind, q.categories, q.counts, q.nulls, published, counts)
            elif hist is not None and q.name in hist[2]:
                before, after, at = hist
                i = at[q.name]
                out[q.name] = {"edges": [float(v) for v in before.edges(i)],
                               "before": [int(v) for v in before.counts[i]],
                               "after": [int(v) for v in after.counts[i]]}
        return out

    def report_fields(self, inp, blocks, groups, written) -> dict:
        cfg, cols = self.cfg, self.cols
        projected = None
        if self.key is not None and written.col_sst[cols].sum() > 0:
            projected = float(100.0 * written.col_sse[cols].sum() / written.col_sst[cols].sum())
        if self.mixed is not None:
            self.metrics["mixed"] = self.mixed.summary(written.col_sse, written.col_sst,
                                                       self.missing() if self.missing else None)
        kinds = ({q.name: shown_kind(q.kind, q.dtype) for q in self.mixed.qis} if self.mixed is not None
                 else dict.fromkeys(cfg.qi, "numeric"))
        return dict(
            qi_kinds=kinds,
            gamma=cfg.effective_gamma if cfg.method in ("vmdav", "ivmdav") else None,
            leaf_size=None if inp.single else cfg.effective_leaf_size(inp.rows),
            polish=self.polished or None,
            refine=self.refined or None,
            key_attributes=list(self.key) if self.key is not None else None,
            projected_information_loss_percent=projected,
            metrics=self.metrics,
        )


def unit_rows(rows: int, d: int, stage: bool) -> int:
    """The most rows of a polished unit: ``POLISH_UNIT_ROWS``, with the seam stage (``stage``:
    ``tuning.seam_stage``, and its blocks) fewer for more than ``SCALE_UNIT_WIDTH`` grouping
    columns (``tuning.scale_unit_rows``: the memory of a unit in flight)."""
    return scale_unit_rows(d, POLISH_UNIT_ROWS) if stage else POLISH_UNIT_ROWS


def _interruptible(kernel, *args):
    """``kernel(*args, stop)`` on a helper thread, waited for from this one, so that a
    signal is handled while it runs: the handler's exception sets ``stop`` (the
    kernel returns within one group visit) and is raised again."""
    stop = np.zeros(1, np.int64)
    with ThreadPoolExecutor(max_workers=1) as pool:
        fut = pool.submit(kernel, *args, stop)
        try:
            return fut.result()
        except BaseException:
            stop[0] = 1
            raise

