"""The range methods' pass-level hooks (``coordinator.FLOWS`` for maxent and mnqia).

maxent (Tsiafoulis, Zorkadis & Pimenidis, "Maximum Entropy Oriented Anonymization
Algorithm for Privacy Preserving Data Mining") and mnqia (Ahmed, Rauf & Rajesh,
"MNQIA: A Method for Multiple Numerical QI Attribute Anonymization") publish
*generalized* quasi-identifiers (``<col>_min`` / ``<col>_max`` ranges, or the class
mean; categorical QIs as the set of their values) rather than centroids. They run
through the coordinator's passes (``engine.coordinator``) like every method; this
module says what the passes do for them:

1. *Dictionary pass* (maxent only, before pass 1; ``engine.encode.dictionary``, in
   value order): one streaming pass over the categorical QIs and the SA: nulls are
   rejected (column and row named), every column's distinct values are collected
   and sorted (the order ``encode_table`` uses), so a value has the same integer
   code in every block; the SA's value counts give the table's SA entropy H, the
   default epsilon, and the checks "single distinct value" and "epsilon > H"
   before any heavy work.
2. *Profile pass*: ``profile_columns`` over the spilled columns (numeric QIs in
   original units, then categorical QI codes, then the SA code, all float64 --
   codes are small integers, exact in float64), read through the encoded source
   (``engine.encode.source``: ``ValueCodes``), which encodes each chunk with the
   global dictionaries.
3. *Partition pass*: a table of one block is loaded into memory; else the kd plan's
   blocks are spilled as for the MDAV family. **Partition columns:** the numeric
   QIs; when maxent has only categorical QIs, their codes (standardized like
   numbers). The spill store (``_SAStore``) also counts each block's SA values.
   ``store.units`` fuses nearly empty neighbouring blocks (at least 2k rows, and
   at least 2 for maxent without k); maxent then fuses units until each reaches
   epsilon with some slack (below).
4. *Aggregate*, per unit, in parallel (results taken in unit order): the unit's rows
   in row order go to the method's block function (``engine.methods.maxent`` /
   ``engine.methods.mnqia`` ``block_labels``); only per-class statistics are kept:
   size, per numeric QI min / max / sum, per categorical QI the set of codes (a bit
   mask), for maxent the SA counts.
5. *Write pass*: the input is streamed again in its order; each row's class gives
   ``<col>_min`` / ``<col>_max`` (the column's dtype) or the mean (Float64), and the
   categorical sets (sorted, escaped, joined by ``|``: ``maxent.join_categories``);
   other columns pass through; the self-check counts the published classes.

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
unit(s) (``maxent.fuse_units``). The whole table reaches the target (H >= epsilon
is checked), so this always ends. (No slack needs many merges and leaves very large
classes; more slack makes larger units, slower for no gain: 0.2 lies between.) ``unit_fusions`` reports
how many fusions were needed; each unit's own class merges are summed in
``merges``. Every class is then at or above epsilon, re-checked from the SA codes
before anything is written. The degenerate default epsilon = H with coprime SA
counts (only the whole table can reach it, see ``engine.methods.maxent``) is
detected from the global counts: the result is one class, published without
partitioning. With epsilon close to H, fusions can grow a unit well past the
block size (memory then follows the largest unit, reported as
``block_rows_max``); a warning is logged when a unit exceeds four blocks.

**mnqia per block.** k applies per block (every unit has at least 2k rows). The
1-D segmentation (the 95 % rule) is computed per unit. The LM-style IL uses the
*table's* attribute ranges (from the profile), computed from the per-class min /
max; the MDAV-range baseline runs exact MDAV per unit (on the unit's z-scores, as
``mdav_range_loss`` does) and generalizes its groups to ranges, with the same loss
and the same table ranges.

**Numeric ranges** are carried as float64 (as in the spill files and the MDAV
path) and cast back to the column's dtype: exact for integers up to 2**53.

**Strata** (``--strata``): units never span two strata (in memory: a stratum a
unit); maxent fuses each stratum's units on their own, towards epsilon plus a fifth
of that stratum's own slack, and refuses a stratum whose SA entropy is below
epsilon (and, with several strata, an epsilon that only the whole table reaches).

A table of one block gives exactly what the in-memory methods give on it
(``maxent_partition`` / ``mnqia_partition`` on the whole table). Identical output
for any chunk size and thread count; randomness only through ``seed``.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from ..budget import check_unit, plan_budget
from ..checks import least_class
from ..encode.dictionary import Categorical, learn
from ..encode.kinds import is_number, range_kinds
from ..encode.source import EncodedSource, ValueCodes
from ..errors import EngineError
from ..frames import Moments, bad_value_error, first_bad, first_bad_value
from ..io.schema import check_output_types
from ..io.sink import check_csv_columns
from ..io.spill import BlockStore, MemoryBlocks
from ..kernels.entropy import entropy
from ..kernels.groups import accumulate_group_sums, group_minmax
from ..passes.aggregate import aggregate_units
from ..passes.distributions import Distributions
from ..passes.partition import sample_stride, strata_units, unit_strata
from ..passes.results import Profiled, Written, release_memory, timed
from ..passes.profile import profile_columns
from ..passes.selfcheck import ClassCounter
from ..passes.write import range_write_pass
from .maxent import ENTROPY_TOL, discernibility, entropy_histogram, fuse_units, join_categories, table_epsilon
from .mnqia import mdav_range_loss

log = logging.getLogger("engine")

# maxent, block by block: a unit's SA entropy must reach eps + UNIT_SLACK * (H - eps)
# (module docstring)
UNIT_SLACK = 0.2


@dataclass
class BlockParams:
    """What a range method's block function needs beside the unit's arrays: the
    spilled columns are ``dn`` numeric QIs, ``dc`` category codes, (maxent) the SA code."""

    dn: int
    dc: int
    k: int | None
    eps: float | None = None
    seed: int = 0
    kinds: list = field(default_factory=list)
    cardinalities: list = field(default_factory=list)
    names: list = field(default_factory=list)
    sa: str | None = None
    ranges: np.ndarray | None = None


@dataclass
class RangeClasses:
    """The stitch of a range release: per class what it publishes, and the measures."""

    labels: np.ndarray
    sizes: np.ndarray
    mn: np.ndarray
    mx: np.ndarray
    sums: np.ndarray
    masks: list
    sacnt: np.ndarray | None
    col_sse: np.ndarray | None


class RangeFlow:
    """The pass-level hooks of maxent and mnqia (``engine.coordinator``)."""

    report_units = True  # the report's blocks are the units (maxent fuses blocks)

    def __init__(self, cfg, distributions: bool = False):
        self.cfg = cfg
        self.method = cfg.method
        self.aggregate_pass = cfg.method
        self.need = least_class(cfg.k)
        self.budget_cfg = dataclasses.replace(cfg, k=self.need)  # the budget plans classes of >= need rows
        self.qi = list(cfg.qi)
        self.sa = cfg.sa if cfg.method == "maxent" else None
        self.dicts: dict = {}
        self.metrics: dict = {}
        self.stats: list = []
        self.eps = self.H = None
        self.m = 0
        self.want_dist = distributions
        self.dist = None  # the numeric QIs' histograms (``profile`` starts them over the spilled columns)
        # --strata (``passes.partition.Strata``, set by the coordinator): units within a stratum (maxent:
        # fused within it); per stratum the numeric QIs' (SSE, SST) around the class means (``strata_loss``)
        self.strata = None
        self.strata_groups = None
        self.strata_loss = None

    @property
    def least_rows(self) -> int:
        """The fewest rows a stratum may have (``--strata``): one class's."""
        return self.need

    # ------------------------------------------------------------ boundary

    def check_input(self, source, fmt, dest, passes):
        """QIs and SA typed from the whole file of a CSV input; the rest as text for a
        CSV output; the names of the published columns free."""
        qi, sa, method, cfg = self.qi, self.sa, self.method, self.cfg
        for c in qi + ([sa] if sa else []):
            if c not in source.columns:
                raise EngineError(f"column {c!r} not found in {source.label}")
        if source.kind == "csv":
            schema = source.schema
            source = source.with_types({c: schema[c] for c in qi + ([sa] if sa else [])}, text=fmt == "csv",
                                       parse=False)
        seen = set(qi)
        source.check_reconciled(qi + ([sa] if sa else []), [c for c in source.columns if c not in seen])
        check_output_types(source.schema, fmt, source.columns)  # generalized QIs keep their type too
        schema = source.schema
        if method == "mnqia":
            for c in qi:
                if not is_number(schema[c]):
                    raise EngineError(f"column {c!r} is not numeric ({schema[c]}); mnqia needs numeric QIs: it clusters "
                                      f"each QI on its number line and publishes ranges (use maxent, which "
                                      f"publishes sets of categories, or an MDAV-family method)")
        if dest is not None:
            check_csv_columns(dest, schema, [c for c in source.columns if c not in seen])
        out_names = set(source.columns) - seen
        for c in qi:
            if cfg.effective_numeric_output == "range" and is_number(schema[c]):
                for name in (f"{c}_min", f"{c}_max"):
                    if name in out_names:
                        raise EngineError(f"column {name!r} already exists in {source.label}; it would hold "
                                          f"the range of {c!r}")
                out_names |= {f"{c}_min", f"{c}_max"}
        if cfg.group_column is not None and cfg.group_column in out_names | seen:
            raise EngineError(f"group column {cfg.group_column!r} already exists in {source.label}")
        self.schema = schema
        self.num = [c for c in qi if is_number(schema[c])]
        self.cat = [c for c in qi if not is_number(schema[c])]
        return source

    def check_rows(self, source, rows):
        if rows < self.need:
            if self.method == "mnqia":
                raise EngineError(f"fewer rows ({rows}) than one group of k = {int(self.cfg.k)} needs")
            raise EngineError(f"fewer rows ({rows}) than one class needs ({self.need})")
        self.rows = rows

    def budget_args(self, source, rows, m=None, words=None) -> dict:
        """A unit's working set (the method's arrays beside the spilled record) is about
        twice the centroid methods' per-row estimate: 2d + 2 columns; the whole-table
        state is the class statistics (the blocks, hence maxent's fused units, never
        change with the limit: ``engine.budget``)."""
        spilled = len(self.qi) + (1 if self.sa else 0)
        return dict(d=2 * spilled + 2, method=self.method, qis=len(self.qi),
                    state=_class_state(rows, self.qi, self.schema, self.method, self.cfg.k, m, words))

    # ------------------------------------------------------------ pass 1

    def profile(self, inp, passes):
        """maxent: the dictionary pass first (global category and SA codes, the table's
        SA entropy H, epsilon and its checks); then pass 1 over the spilled columns
        (numeric QIs in original units, category codes, the SA code)."""

        cfg, num, cat, sa = self.cfg, self.num, self.cat, self.sa
        source, rows, budget = inp.source, inp.rows, inp.budget
        self.threads = inp.threads
        dn, dc = len(num), len(cat)
        forced = False
        sa_total = None
        if sa is not None:
            with timed(passes, "dictionary"):
                self.dicts, sa_total = _dictionary_pass(source, cat, sa, budget.chunk_rows, rows,
                                                        bool(cfg.progress), num)
            forced = self._epsilon(sa_total)
        self.forced = forced
        if forced and self.strata is not None and self.strata.count > 1:
            raise EngineError(f"strata (--strata): epsilon {self.eps:.4g} bits is the whole table's entropy of "
                              f"{sa!r}, which only one class of all rows reaches, across the strata; give a "
                              f"smaller --epsilon")
        spill = num + cat + ([sa] if sa else [])
        if self.want_dist and num:  # counted by the partition pass over every spilled column; numeric kept
            self.dist = Distributions(spill)
        self.cards = [len(self.dicts[c]) for c in cat]
        self.words = [(cd + 63) // 64 for cd in self.cards]
        if cfg.memory_limit is not None and (self.m > 16 or sum(self.words) > dc):
            # the class statistics with the SA's and the categories' real counts: the same
            # plan, or the one-line refusal naming the least limit
            plan_budget(self.budget_cfg, rows, columns=len(source.columns), threads=inp.threads, kind=source.kind,
                        start_rss=inp.start_rss, **self.budget_args(source, rows, self.m, self.words))
        enc = EncodedSource(source, ValueCodes(source.schema, spill, self.dicts))
        with timed(passes, "profile"):
            profile = profile_columns(enc, spill, budget.chunk_rows, bool(cfg.progress), rows=rows,
                                      sample_stride=0 if forced or inp.single
                                      else sample_stride(rows, budget.block_size))
        release_memory()
        self.gmin, self.gmax = profile.min[:dn].copy(), profile.max[:dn].copy()
        for j, c in enumerate(num):
            _check_span(c, self.method, float(self.gmin[j]), float(self.gmax[j]))
        self.R = self.gmax - self.gmin
        # z-scores of the numeric QIs in original units, for the SSE / SST of the report
        self.zmean = profile.mean[:dn] * profile.scale[:dn]
        self.zsd = profile.sd[:dn] * profile.scale[:dn]
        self.profile_ = profile
        self.sa_total = sa_total
        ranges = np.zeros((dn + dc, 2))
        ranges[:dn, 0], ranges[:dn, 1] = self.gmin, self.gmax
        ranges[dn:, 1] = np.maximum(np.array(self.cards, float) - 1, 0) if dc else 0
        self.params = BlockParams(dn, dc, cfg.k, self.eps, cfg.effective_seed, ["numeric"] * dn + ["categorical"] * dc,
                                  [0] * dn + self.cards, num + cat, sa, ranges)
        # the plan splits on the numeric QIs; on the category codes when there are none
        cols = np.arange(dn) if dn else np.arange(dn, dn + dc)
        if forced and cfg.epsilon is None:  # (after pass 1: a bad value is named first)
            self._refuse_default_epsilon(rows)
        return Profiled(profile, enc, spill, cols, one_class=forced)

    def _epsilon(self, sa_total) -> bool:
        """epsilon (the table's SA entropy by default) and its checks; True when only
        the whole table reaches it (epsilon = H with coprime SA counts: asked for with
        ``epsilon``, else refused by ``profile``)."""
        self.m = int(sa_total.shape[0])
        self.H, self.eps = H, eps = table_epsilon(sa_total, self.cfg.epsilon, self.sa)
        return eps >= H - ENTROPY_TOL and math.gcd(*[int(c) for c in sa_total]) == 1

    def _refuse_default_epsilon(self, rows: int) -> None:
        """The default epsilon reaches only the one class of every row: a release with
        no utility, which a run does not publish unless epsilon asks for it."""
        raise EngineError(f"epsilon (--epsilon) is needed: without it each class must reach the whole table's "
                          f"entropy of {self.sa!r} ({self.H:.4g} bits), which only one class of all {rows:,} rows "
                          f"does; give fewer bits, e.g. --epsilon {0.75 * self.H:.2g}")

    # ------------------------------------------------------------ pass 2

    def new_store(self, n_blocks, folder, rows, budget):
        sa_col = len(self.num) + len(self.cat) if self.sa else None
        return _SAStore(n_blocks, len(self.num) + len(self.cat) + (1 if self.sa else 0), folder, sa_col=sa_col,
                        m=self.m, rows=rows, buffer_bytes=budget.spill_buffer)

    def new_moments(self, columns):
        """Pass 1's arithmetic for a partition pass that measures on its way (the range
        methods read every row in pass 1, so the coordinator does not ask for it)."""
        return Moments(columns, np.ones(len(columns)))

    def units(self, store, budget, profile):
        """Consecutive blocks of at least 2 x the least class size; maxent fuses them
        until each reaches epsilon with some slack (module docstring)."""
        if self.strata is not None and not isinstance(store, MemoryBlocks):  # (in memory: a stratum a unit)
            need = self.need
            units = strata_units(store.rows, self.strata.block_strata, lambda n: 2 * need)
        else:
            units = store.units(2 * self.need)
        if self.sa is None:
            return units
        if isinstance(store, MemoryBlocks):
            sa = store.X[:, self.params.dn + self.params.dc].astype(np.int64)
            counts = np.zeros((store.n_blocks, max(self.m, 1)), np.int64)
            for b in range(store.n_blocks):
                counts[b] = np.bincount(sa[store.read(b)[0]], minlength=counts.shape[1])
        else:
            counts = store.sa_counts
            if not np.array_equal(counts.sum(axis=1), store.rows):
                raise EngineError("internal check failed: the SA counts of the spilled blocks do not add up")
        eps, H = self.eps, self.H
        if self.strata is None:
            units, fusions = fuse_units(units, counts, eps + UNIT_SLACK * max(H - eps, 0.0), self.need, ENTROPY_TOL)
        else:
            units, fusions = self._fuse_strata(units, counts)
        self.metrics["unit_fusions"] = int(fusions)
        sizes = [int(store.rows[u].sum()) for u in units]
        big = max(sizes)
        check_unit(budget, self.cfg.memory_limit, sizes, self.threads, self.rows, len(self.qi), self.method,
                   f": epsilon {eps:.4g} bits needs a unit of {big:,} rows")
        if big > 4 * budget.block_size:
            log.warning("maxent: reaching epsilon = %.4g bits needed a unit of %d rows (block size %d); "
                        "memory follows the largest unit", eps, big, budget.block_size)
        return units

    def _fuse_strata(self, units, counts):
        """maxent with strata: each stratum's units fused as a table of their own (its own
        SA entropy H_s for the slack: units reach epsilon + UNIT_SLACK (H_s - epsilon)); a
        stratum whose SA entropy is below epsilon is refused, naming it."""
        eps, strata = self.eps, self.strata
        ustr = unit_strata(units, strata.block_strata)
        out, fusions = [], 0
        for s in np.unique(ustr):
            own = [u for u, t in zip(units, ustr) if t == s]
            c = counts[[b for u in own for b in u]].sum(axis=0)
            H_s = float(entropy(c)) + 0.0  # (not -0)
            if np.count_nonzero(c) < 2 or H_s < eps - ENTROPY_TOL:
                raise EngineError(f"stratum {strata.label(int(s))}: the entropy of {self.sa!r} in it is "
                                  f"{H_s:.4g} bits, below epsilon = {eps:.4g} bits; give a smaller --epsilon "
                                  f"(at most the smallest stratum's) or fewer strata")
            fused, n = fuse_units(own, counts, eps + UNIT_SLACK * max(H_s - eps, 0.0), self.need, ENTROPY_TOL)
            out += fused
            fusions += n
        return out, fusions

    # ------------------------------------------------------------ pass 3

    def aggregate(self, blocks, labels, threads, bar) -> int:
        """The method's block function on every unit (in row order), its classes' statistics."""
        store, p, method = blocks.store, self.params, self.method
        block = self.cfg.spec.block_function
        dn, dc = p.dn, p.dc

        def work(unit):
            ids, X = store.read_many(unit)
            if len(unit) > 1:
                o = np.argsort(ids, kind="stable")
                ids, X = ids[o], np.ascontiguousarray(X[o])
            Xnum = np.ascontiguousarray(X[:, :dn])
            codes = X[:, dn:dn + dc].astype(np.int64)
            res = block(X, p)
            if method == "maxent":
                sac = X[:, dn + dc].astype(np.int64)
                st = _class_stats(Xnum, codes, res.labels, res.n_classes, self.words, sac, self.m)
                st.extra = {"merges": res.merges, "forced": res.forced_single_class}
            else:
                st = _class_stats(Xnum, codes, res.labels, res.n_groups, self.words)
                base = mdav_range_loss(Xnum, p.k)[2]  # MDAV on the unit's z-scores, as in memory
                bst = _class_stats(Xnum, codes, base, int(base.max()) + 1, [])
                st.extra = {"relaxed": res.relaxed_picks, "leftovers": res.leftovers,
                            "base_il_sum": _il_sum(bst.size, bst.mn, bst.mx, self.R)}
            st.extra["sse"] = _z_sse(Xnum, res.labels, st.g, self.zmean, self.zsd)
            return ids, res.labels, st.g, st

        return aggregate_units(store, blocks.units, work, labels, threads, bar,
                               lambda first, g, st: self.stats.append(st))

    def after_aggregate(self, blocks, labels, n_groups, passes) -> int:
        if self.sa is not None:
            self.metrics["merges"] = int(sum(s.extra["merges"] for s in self.stats))
            self.metrics["units_forced_single_class"] = int(sum(bool(s.extra["forced"]) for s in self.stats))
        return n_groups

    def one_class(self) -> RangeClasses:
        """epsilon = H(table) with coprime SA counts: only the whole table qualifies."""
        prof, rows, dn = self.profile_, self.rows, len(self.num)
        st = _Stats(1, np.array([rows], np.int64), self.gmin[None, :], self.gmax[None, :],
                    (prof.mean[:dn] * prof.scale[:dn] * rows)[None, :], [_all_codes(cd) for cd in self.cards],
                    self.sa_total[None, :])
        st.extra = {"sse": np.where(self.zsd > 0, float(rows), 0.0)}  # one class: its SSE is the SST
        self.stats = [st]
        self.metrics.update(merges=0, unit_fusions=0)
        return self.stitch(None, np.zeros(rows, np.int32), 1, None)

    # ------------------------------------------------------------ stitch, write, report

    def stitch(self, blocks, labels, n_groups, bar) -> RangeClasses:
        stats, dn, dc = self.stats, len(self.num), len(self.cat)
        col_sse = sum(s.extra["sse"] for s in stats) if dn else None
        out = RangeClasses(labels, np.concatenate([s.size for s in stats]), np.concatenate([s.mn for s in stats]),
                           np.concatenate([s.mx for s in stats]), np.concatenate([s.sums for s in stats]),
                           [np.concatenate([s.masks[j] for s in stats]) for j in range(dc)],
                           np.concatenate([s.sacnt for s in stats]) if self.sa else None, col_sse)
        self.metrics = self._measures(out)
        if self.strata is not None and blocks is not None and dn:
            self.strata_loss = self._strata_loss(blocks.units, out)
        self.stats = []
        return out

    def _strata_loss(self, units, c: RangeClasses):
        """Per stratum ``(SSE, SST)`` of the numeric QIs on z-scores (as the run's): the
        units' SSE around their class means, and SST = SSE + the classes' spread around
        the stratum's mean."""
        count, dn = self.strata.count, len(self.num)
        ustr = unit_strata(units, self.strata.block_strata)
        sse = np.zeros(count)
        for st, s in zip(self.stats, ustr):
            sse[s] += float(st.extra["sse"].sum())
        cstr = np.repeat(ustr, [st.g for st in self.stats])
        n = c.sizes.astype(np.float64)
        live = self.zsd > 0
        total = np.bincount(cstr, weights=n, minlength=count)
        ssb = np.zeros(count)
        for j in np.flatnonzero(live[:dn]):
            z = (c.sums[:, j] / n - self.zmean[j]) / self.zsd[j]
            mean = np.bincount(cstr, weights=n * z, minlength=count) / np.maximum(total, 1.0)
            ssb += np.bincount(cstr, weights=n * (z - mean[cstr]) ** 2, minlength=count)
        return sse, sse + ssb

    def _measures(self, c: RangeClasses) -> dict:
        """The method's own measures (``report.metrics``), from the classes' statistics."""
        rows, size, dn = self.rows, c.sizes, len(self.num)
        if self.sa is None:
            il = _il_sum(size, c.mn, c.mx, self.R) / rows
            il_b = sum(s.extra["base_il_sum"] for s in self.stats) / rows
            return {"il": il, "il_percent": 100.0 * il / dn, "mdav_range_il": il_b,
                    "mdav_range_il_percent": 100.0 * il_b / dn,
                    "relaxed_picks": int(sum(s.extra["relaxed"] for s in self.stats)),
                    "leftovers": int(sum(s.extra["leftovers"] for s in self.stats))}
        ent = entropy(c.sacnt, axis=1)
        self.entropy = ent
        per = np.zeros(size.shape[0])
        if dn:
            R = self.R
            per += np.where(R > 0, (c.mx - c.mn) / np.where(R > 0, R, 1.0), 0.0).sum(axis=1)
        for j, card in enumerate(self.cards):
            z = _popcount(c.masks[j])
            per += np.where(z > 1, z / card, 0.0)
        ncp = float((per * size).sum())
        m = self.metrics
        return {"epsilon": self.eps, "table_entropy": self.H, "entropy_min": float(ent.min()),
                "entropy_mean": float(ent.mean()), "ncp": ncp, "ncp_normalized": ncp / (rows * len(self.qi)),
                "cdm": discernibility(size, self.cfg.k, rows), "merges": m["merges"],
                "forced_single_class": self.forced,
                "unit_fusions": m["unit_fusions"],
                **({"units_forced_single_class": m["units_forced_single_class"]}
                   if "units_forced_single_class" in m else {}),
                "entropy_hist": _plain(entropy_histogram(ent, size, 0.25, c.sacnt.shape[1]))}

    def check_stitched(self, c: RangeClasses) -> None:
        """maxent: every class at or above epsilon, re-checked from the spilled SA codes."""
        if self.sa is None:
            return
        if (np.count_nonzero(c.sacnt, axis=1) < 2).any() or self.entropy.min() < self.eps - ENTROPY_TOL:
            raise EngineError("internal check failed: a class misses the entropy target")

    def distributions_after(self, c: RangeClasses):
        """The numeric QIs before, and after as published: each class's rows spread
        evenly over its range (``--numeric-output range``) or at its mean."""
        if self.dist is None or self.dist.counts is None:  # (one class: no partition pass counted)
            return None
        keep = list(range(len(self.num)))
        if self.cfg.effective_numeric_output == "range":
            return self.dist.finish(None, c.sizes, low=c.mn, high=c.mx, keep=keep)
        return self.dist.finish(c.sums / c.sizes[:, None], c.sizes, keep=keep)

    def write(self, source, path, fmt, c: RangeClasses, chunk_rows, profile):
        """Each row's class gives ``<col>_min`` / ``<col>_max`` (the column's dtype) or
        the mean (Float64), and the categorical sets; the self-check counts the classes
        from the published values before the output is renamed into place."""
        cfg, schema, size = self.cfg, self.schema, c.sizes
        pub = {}
        for j, col in enumerate(self.num):
            dt = schema[col]
            if cfg.effective_numeric_output == "range":
                pub[col] = [pl.Series(f"{col}_min", c.mn[:, j]).cast(dt), pl.Series(f"{col}_max", c.mx[:, j]).cast(dt)]
            else:
                pub[col] = [pl.Series(col, c.sums[:, j] / size, dtype=pl.Float64)]
        sets = {}
        for j, col in enumerate(self.cat):
            uniq, inv = np.unique(c.masks[j], axis=0, return_inverse=True)
            values = self.dicts[col].cast(pl.String).to_list()
            text = [join_categories(sorted(values[i] for i in _codes_of(row))) for row in uniq]
            sets[col] = (pl.Series(col, text, dtype=pl.String), inv.reshape(-1).astype(np.int32))
        counter = ClassCounter(_published_columns(self.qi, schema, cfg.effective_numeric_output), size.shape[0])
        table = range_write_pass(source, path, fmt, c.labels, pub, sets, chunk_rows, bool(cfg.progress), self.rows,
                            counter, cfg.group_column)
        verified = counter.check(cfg.k, self.rows)
        sst = np.where(self.zsd > 0, float(self.rows), 0.0) if self.num else None
        return Written(table, verified, c.col_sse, sst, list(self.num))

    def report_fields(self, inp, blocks, classes, written) -> dict:
        return dict(gamma=None, metrics=self.metrics, qi_kinds=range_kinds(self.qi, self.schema))


def _published_columns(qi, schema, numeric_output) -> list[str]:
    """The columns a range release publishes for ``qi``."""
    out = []
    for c in qi:
        if is_number(schema[c]) and numeric_output == "range":
            out += [f"{c}_min", f"{c}_max"]
        else:
            out.append(c)
    return out



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
    dn = sum(1 for c in qi if is_number(schema[c]))
    dc = len(qi) - dn
    per_class = 8 + 24 * dn + 8 * (dc if words is None else sum(words))
    if method == "maxent":
        per_class += 8 * (16 if m is None else m)
    return 3 * per_class * (rows // least_class(k) + 1)


def _check_span(c, method, lo, hi) -> None:
    """A numeric QI whose range overflows a float (e.g. -1.5e308 .. 1.5e308) cannot be
    measured (the losses divide by the range): refused, naming the column."""
    if lo is None or hi is None or not (math.isfinite(lo) and math.isfinite(hi)):
        return  # (missing and non-finite values have their own messages)
    if not math.isfinite(hi - lo):
        raise EngineError(f"column {c!r} spans {lo:g} .. {hi:g}: too wide for method {method} (its range "
                          f"overflows a float); rescale the column")


def _first_bad(frame, qi, sa, method, offset=0, columns=None) -> None:
    """Raise for the first null, NaN or infinite value of the QIs and the SA (or of
    ``columns`` among them) by row, whatever its kind and column, in the messages of
    the method's own checks (mnqia: the profile pass's; maxent: ``encode_table``'s)."""
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
    """The dictionary pass (``encode.dictionary.learn``, in value order: the order
    ``encode_table`` codes a table in memory) of the categorical QIs and the SA:
    ``({column: its categories}, the SA's counts)``.

    Raises for the first null (categorical QIs, SA) or NaN / infinite value (SA) by
    row; when there is one, the numeric QIs ``num`` (checked by the next pass) are
    read up to its row first, so that an earlier bad numeric value is reported
    instead (the first bad value by row, whatever the column)."""
    cols = list(cat) + [sa]

    def check(frame, offset):
        hit = first_bad(frame, cols)
        if hit is not None:
            _numeric_before(source, list(num), offset + hit[1], chunk_rows)
            _first_bad(frame, list(cat), sa, "maxent", offset)

    found = learn(source, [Categorical(c) for c in cat] + [Categorical(sa, count=True)], chunk_rows,
                  order="value", check=check, native=False, progress=progress, rows=rows)
    dicts = {c: found[c].categories() for c in cols}
    return dicts, found[sa].counts()


def _numeric_before(source, num, end, chunk_rows) -> None:
    """Raise (the profile pass's message) for the first null, NaN or infinite value of
    the numeric QIs ``num`` in rows before ``end``, if there is one (an error path only)."""
    if not num:
        return
    for offset, frame in source.iter_frames(num, chunk_rows):
        if offset >= end:
            return
        frame = frame.head(end - offset)
        first_bad_value(frame, num, offset)


@dataclass
class _Stats:
    """Per-class statistics of one unit (class ids local to the unit)."""

    g: int
    size: np.ndarray
    mn: np.ndarray
    mx: np.ndarray
    sums: np.ndarray
    masks: list
    sacnt: np.ndarray | None = None
    extra: dict = field(default_factory=dict)


def _class_stats(Xnum, codes, local, g, words, sa=None, m=0) -> _Stats:
    size = np.bincount(local, minlength=g).astype(np.int64)
    if Xnum.shape[1]:
        mn, mx = group_minmax(Xnum, local, g)
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
    return _Stats(g, size, mn, mx, sums, masks, sacnt)


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


def _plain(x):
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple, np.ndarray)):
        return [_plain(v) for v in x]
    if isinstance(x, np.generic):
        return x.item()
    return x
