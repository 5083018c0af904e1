"""Refinement of a microaggregation partition: lower SSE, same size bounds.

``refine_partition(Z, labels, k, mode)`` takes any partition whose groups have at
least k rows (an MDAV-family result) and lowers its SSE:

``mode="local"``
    1. exact local search: each group looks at its few nearest groups (by
       centroid) for the move of one record, or the swap of two records, that
       lowers SSE most (the change is computed exactly from group sums and
       sizes), applies it, and repeats; rounds run until no improving move or
       swap remains;
    2. window perturbation: for each group, its window (the group and its nearest
       groups) is rebuilt with one group fewer (each group in turn dissolved), one
       more (a new centre at the row farthest from its mean), or one centre
       moved there, by a size-constrained assignment to the centres and exact
       descent; the best candidate is kept if the window's SSE, recomputed from
       scratch, drops. Then local search again; this alternation stops when a
       whole window pass improves nothing. Later passes visit only windows that
       changed since the previous pass.
``mode="ga"``
    The hybrid that Rawat & Borah (IV-MDAV)'s abstract describes (Solanas et al.): the given
    fixed-size partition (MDAV) is improved window by window by a genetic
    algorithm that re-partitions each window's records into variable-sized
    groups (k..2k-1). The seed gives only the outline; our GA (steady state,
    centre-set crossover, children decoded by a size-constrained assignment and
    improved by exact descent, i.e. memetic) is in ``engine/kernels/search/recut.py``.
    Randomness is seeded from ``seed``, the pass and the window, so a seed gives
    one result. Window passes alternate with the exact local search of
    ``local`` (which polishes the seams between windows) until a whole GA pass
    improves no window.

Unbounded runs (no ``max_rounds``, no ``budget_seconds``) end with a plain local
search (``engine.kernels.search.polish``: moves and swaps among each group's 20 nearest
groups, exact SSE change, to convergence) from the result and from the input
partition, keeping the lowest SSE: so a refinement never ends above that plain
local search from the same partition (issue 16).

Sizes: no group ever becomes smaller than k or larger than 2k-1; a group that
starts larger than 2k-1 (fewer than 2k rows, V-MDAV's tail) can only shrink.

Determinism: the kernels are serial with a fixed visiting order, so the result
does not depend on the thread count. ``max_rounds`` cuts the work at a
deterministic point (a round is one local-search pass or one window pass);
``budget_seconds`` is checked between kernel calls and therefore stops at a
machine-dependent point: results under a seconds budget may differ between runs
and machines (they are never worse than the input).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ..checks import is_finite_number, is_int
from ..errors import EngineError
from ..kernels.groups import partition_sse
from ..kernels.search.near import nearest_groups, refresh_lists
from ..kernels.search.polish import polish
from ..kernels.search.refine import build_state, ls_round, recompute_sums
from ..kernels.search.windows import window_round
from ..parallel import numba_threads

MODES = ("local", "ga")

# Tunables, one setting for all data. Design changes were kept only when they also
# helped the held-out Adult set (benchmarks/quality.py), not just Census/Tarragona.
NEAR = 8               # candidate groups per group for moves and swaps
WINDOW_ROWS = 24       # a window holds about this many rows ...
WINDOW_MIN_GROUPS = 3  # ... but at least this many groups
WINDOW_MAX_GROUPS = 8
GA_POP = 12
GA_GENS = 24
WINDOW_CHUNK = 512     # slots per kernel call (time checks between calls)
POLISH_NEAR = 20       # the final plain local search: moves/swaps among the 20 nearest groups


@dataclass
class RefineResult:
    labels: np.ndarray      # int64 group ids: the input's while no group disappears or appears,
                            # else 0..G'-1 renumbered by first appearance in row order
    sse_before: float
    sse_after: float
    rounds: int
    moves: int              # records relabelled (a swap counts two)
    seconds: float


def _validate(Z, labels, k, mode, budget_seconds, max_rounds, seed, threads):
    if not isinstance(Z, np.ndarray) or Z.ndim != 2 or Z.dtype != np.float64 or not Z.flags.c_contiguous:
        raise EngineError("Z must be a C-contiguous float64 array of shape (rows, columns)")
    if Z.shape[0] == 0 or Z.shape[1] == 0:
        raise EngineError(f"Z must have at least one row and one column, got shape {Z.shape}")
    if not np.isfinite(Z).all():
        raise EngineError("Z must be finite (no NaN or infinity)")
    if not is_int(k) or k < 2:
        raise EngineError(f"k must be a whole number >= 2, got {k!r}")
    if not isinstance(labels, np.ndarray) or labels.ndim != 1 or labels.shape[0] != Z.shape[0]:
        raise EngineError(f"labels must be a 1-D array with one entry per row of Z ({Z.shape[0]})")
    if labels.dtype != np.int64:
        raise EngineError(f"labels must be int64, got {labels.dtype}")
    if labels.min() < 0:
        raise EngineError("labels must be group ids 0..G-1, found a negative id")
    sizes = np.bincount(labels)
    if (sizes == 0).any():
        raise EngineError(f"labels must be group ids 0..G-1 with every id used; id {int(np.argmin(sizes))} is empty")
    if k > Z.shape[0]:
        raise EngineError(f"k={k} is larger than the number of rows ({Z.shape[0]})")
    if sizes.min() < k:
        raise EngineError(f"labels: group {int(np.argmin(sizes))} has {int(sizes.min())} rows, fewer than k={k}")
    if mode not in MODES:
        raise EngineError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if budget_seconds is not None:
        if not is_finite_number(budget_seconds) or budget_seconds <= 0:
            raise EngineError(f"budget_seconds must be a positive number, got {budget_seconds!r}")
    if max_rounds is not None and (not is_int(max_rounds) or max_rounds < 0):
        raise EngineError(f"max_rounds must be a whole number >= 0, got {max_rounds!r}")
    if not is_int(seed) or seed < 0 or seed >= 2**63:
        raise EngineError(f"seed must be a whole number in [0, 2**63), got {seed!r}")
    if threads is not None and (not is_int(threads) or threads < 1):
        raise EngineError(f"threads must be a positive whole number, got {threads!r}")
    return sizes


def window_groups(k: int) -> int:
    return int(min(WINDOW_MAX_GROUPS, max(WINDOW_MIN_GROUPS, round(WINDOW_ROWS / k))))


def renumber(labels: np.ndarray) -> np.ndarray:
    """Group ids 0..G'-1 by first appearance in row order."""
    _, first, inv = np.unique(labels, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    return rank[inv].astype(np.int64)


def refine_partition(Z, labels, k, mode="local", budget_seconds=None, max_rounds=None, seed=0,
                     threads=None) -> RefineResult:
    """Lower the SSE of the partition ``labels`` of the rows of ``Z`` (see module doc).

    Parameters
    ----------
    Z : (n, d) float64, C-contiguous
        Standardized quasi-identifiers.
    labels : (n,) int64
        Group ids 0..G-1, every group with >= k rows.
    k : int
        Minimum group size; groups stay within [k, 2k-1] (larger ones only shrink).
    mode : {"local", "ga"}
    budget_seconds : float, optional
        Stop after about this many seconds (checked between kernel calls, so the
        stopping point is machine-dependent).
    max_rounds : int, optional
        Stop after this many rounds (deterministic).
    seed : int
        Seed of the genetic algorithm (``ga``); ``local`` does not use it.
    threads : int, optional
        Numba threads for the call (the result does not depend on it).
    """
    t0 = time.perf_counter()
    sizes = _validate(Z, labels, k, mode, budget_seconds, max_rounds, seed, threads)
    G = sizes.size
    deadline = None if budget_seconds is None else t0 + float(budget_seconds)
    with numba_threads(threads):
        search = _Search(Z, labels, k, sizes, deadline, max_rounds, mode, seed)
        search.run()
    out, sse_after, moves = search.result()
    if max_rounds is None and deadline is None and G > 1:
        out, sse_after, moves = _polish_floor(Z, labels, k, G, out, sse_after, moves)
    return RefineResult(labels=out, sse_before=float(search.sse_before), sse_after=float(sse_after),
                        rounds=search.rounds, moves=moves, seconds=time.perf_counter() - t0)


class _Search:
    """The state of one refinement: the labels, the kernels' group table (sums,
    counts, member slots), the near lists, the round count; local-search rounds and
    window passes (``ls_round``, ``window_round``) update it in place."""

    def __init__(self, Z, labels, k, sizes, deadline, max_rounds, mode, seed):
        n, d = Z.shape
        self.Z, self.k, self.hi, self.G = Z, k, 2 * k - 1, sizes.size
        self.S = S = max(self.G, n // k) + 1
        self.tol = 1e-12 * max(1.0, float(n * d))
        self.deadline = deadline
        self.rounds_cap = max_rounds if max_rounds is not None else 1 << 62
        self.mode, self.seed = mode, seed
        self.lab = labels.copy()
        self.sse_before = partition_sse(Z, self.lab, self.G)
        self.sums, self.counts, self.members, self.slot = build_state(Z, self.lab, S, max(self.hi, int(sizes.max())))
        self.near = np.full((S, NEAR), -1, np.int64)
        self.scratch = (np.empty_like(self.near), np.empty(NEAR), np.full(S, -1, np.int64))
        self.active = np.ones(S, np.int64)
        self.touched = np.zeros(S, np.int64)
        self.all_slots = np.ones(S, np.int64)
        self.stats = np.zeros(3)
        self.wstats = np.zeros(3)
        self.rounds = 0
        self.fresh = True  # near lists: kd-tree the first time, two-hop refreshes after
        self.wg = window_groups(k)

    def out_of_time(self) -> bool:
        return self.deadline is not None and time.perf_counter() >= self.deadline

    def _near_lists(self, mask) -> None:
        """Sums from scratch, then the near lists: exact the first time, a two-hop
        refresh of the groups in ``mask`` after."""
        recompute_sums(self.Z, self.sums, self.counts, self.members)
        if self.fresh:
            nearest_groups(self.sums, self.counts, self.near, mask)
            self.fresh = False
        else:
            live = self.counts > 0
            mu = np.zeros_like(self.sums)
            mu[live] = self.sums[live] * (1.0 / self.counts[live])[:, None]  # (moves.group_mean's arithmetic)
            refresh_lists(mu, self.counts, self.near, mask, *self.scratch)

    def local_search(self, start) -> None:
        """Rounds of moves and swaps until none applies; ``start``: the slots to treat
        as changed (all, or those a window pass changed)."""
        self.active[:] = start
        mask = start.copy()
        while self.rounds < self.rounds_cap and not self.out_of_time():
            self._near_lists(mask)
            applied = ls_round(self.Z, self.lab, self.sums, self.counts, self.members, self.slot, self.k, self.hi,
                               self.near, self.active, self.touched, self.tol, self.stats)
            self.rounds += 1
            if applied == 0:
                return
            mask[:] = self.active

    def window_pass(self, rnd, todo) -> int:
        """One pass of windows of nearby groups re-cut (exactly, or by the GA)."""
        self._near_lists(self.all_slots)
        self.touched[:] = 0
        improved = 0
        use_ga = 1 if self.mode == "ga" else 0
        for start in range(0, self.S, WINDOW_CHUNK):
            if self.out_of_time():
                break
            improved += window_round(self.Z, self.lab, self.sums, self.counts, self.members, self.slot, self.k,
                                     self.hi, self.near, self.wg, use_ga, GA_POP, GA_GENS, self.seed, rnd,
                                     start, min(self.S, start + WINDOW_CHUNK), todo, self.touched, self.tol,
                                     self.wstats)
        self.rounds += 1
        return improved

    def run(self) -> None:
        if self.mode == "local":
            self.local_search(self.all_slots)
        todo = self.all_slots
        rnd = 0
        while self.rounds < self.rounds_cap and not self.out_of_time() and self.G > 1:
            improved = self.window_pass(rnd, todo)
            rnd += 1
            if improved == 0:
                break
            self.local_search(self.touched.copy())
            todo = self.touched.copy()
        if self.mode == "ga":
            self.local_search(self.all_slots)

    def result(self):
        """``(labels, SSE, moves)``; the input's numbering kept when the groups are the same."""
        G, counts = self.G, self.counts
        if counts[:G].all() and not counts[G:].any():
            out = self.lab  # the same groups (ids) as the input: keep its numbering
        else:
            out = renumber(self.lab)  # groups disappeared or appeared
        sse = partition_sse(self.Z, out, int(out.max()) + 1)
        return out, sse, int(self.stats[0]) + 2 * int(self.stats[1]) + int(self.wstats[1])


def _polish_floor(Z, labels, k, G, out, sse_after, moves):
    """Never above a plain local search: polish (moves and swaps among the POLISH_NEAR
    nearest groups, exact SSE change, to convergence) of the result and of the input;
    the lowest SSE wins (ties: the refined partition)."""
    no_rot, stop = np.empty((0, 0, 0)), np.zeros(1, np.int64)
    for start in (out, labels):
        cand = start.copy()
        _, ops = polish(Z, cand, k, 1 << 30, POLISH_NEAR, no_rot, stop)
        sse = partition_sse(Z, cand, int(cand.max()) + 1)
        if sse < sse_after:
            out, sse_after, moves = cand, sse, moves + int(ops) if start is out else int(ops)
    sizes = np.bincount(out)
    if not (sizes.shape[0] == G and sizes.all()):
        out = renumber(out)  # the numbering rule above: groups disappeared or appeared
    return out, sse_after, moves
