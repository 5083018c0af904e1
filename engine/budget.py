"""Size the run to the memory limit: block size, chunk rows, spill buffers, CSV pieces,
where the label map lives; refuse a limit below what the run needs.

The estimate of peak RSS (bytes; d QIs, c columns in all, n rows), each term
measured on census-like tables (docs/benchmarks.md, "Memory limit"):

* fixed: the process as it stands when the run is planned (interpreter, Numba,
  Polars, pyarrow), measured, plus ``RUNTIME`` for what comes later whatever the
  sizes (the compiled kernels loaded at first use, the thread pools, the
  allocators' arenas of Polars, pyarrow and NumPy), less what earlier runs in this
  process already made resident (``resident_runtime``: a batch job calling
  ``anonymize`` file after file holds them from its first run on);
* the row -> group map: 4 per row (int32), memory-mapped in the spill folder when above
  a quarter of the budget (counted either way: a mapped file's written pages are resident);
* the groups: about 2 * 8 * d + 8 per group for centroids in original units and
  z-scores, with at most rows / k groups, and 8 per row for the compaction;
* a chunk in flight: ``CELL`` bytes per cell of the chunk (the read frame, its float
  copy, the output frame, its Arrow form, the read-ahead and the background writer);
* a block in flight: about 8 * (5d + 6) per row (spill record, values, z-scores,
  the index and labels): two blocks at the least (one aggregated, the next read),
  one more for each further unit aggregated at once (``workers``, at most the threads);
* the spill buffers: two of ``spill_buffer`` bytes (one filled, one being written);
* a CSV input read a piece at a time (``Source.bounded``): about ``PIECE_FACTOR``
  times the piece (the bytes, Polars' parse buffers and columns);
* a margin: ``MARGIN_SHARE`` of the limit plus ``MARGIN_FIXED``.

Below the minimum (every size at its floor: ``MIN_CHUNK`` rows, two blocks of the
block size, ``MIN_SPILL`` buffers, ``MIN_PIECE`` pieces) the run is refused up front
with one line naming the minimum. Above it, what is left is shared among the chunk,
the units in flight, the spill buffers and the pieces, each capped at its default.
The block size is never chosen by the limit (it decides the partition, so the output
would then depend on the memory and the thread count).

Without a limit: blocks of ``DEFAULT_BLOCK_SIZE`` rows, the chunk size asked for,
32 MiB spill buffers and Polars' own CSV reader.
"""

from __future__ import annotations

from dataclasses import dataclass

import psutil

from .options import RunConfig
from .tuning import DEFAULT_BLOCK_SIZE
from .errors import EngineError

MiB = 1 << 20
RUNTIME = 128 * MiB          # kernels, thread pools, allocator arenas (measured: 110-125 MiB)
CELL = 64                    # bytes per cell of a chunk in flight (measured: about 52)
PIECE_FACTOR = 12            # peak per byte of a CSV piece (measured: about 10, + 45 MiB of arenas)
CSV_PASSES = 32 * MiB        # a CSV's passes before the plan, beyond RUNTIME's arenas
MARGIN_SHARE = 0.05
MARGIN_FIXED = 16 * MiB
MIN_CHUNK = 10_000
MIN_SPILL = 4 * MiB
MIN_PIECE = 2 * MiB
MAX_PIECE = 16 * MiB
DEFAULT_SPILL = 32 * MiB


@dataclass(frozen=True)
class Budget:
    block_size: int
    chunk_rows: int
    labels_on_disk: bool
    block_limit: int | None = None  # the most rows a spilled block may hold (None: no limit)
    spill_buffer: int = DEFAULT_SPILL  # bytes buffered by the block store before a write
    piece_bytes: int | None = None  # a CSV input read this many bytes at a time (None: Polars' reader)
    least: int | None = None  # the least limit this run accepts (bytes)
    unit_room: int | None = None  # bytes for the units in flight once the table is spilled (no chunk, no piece)
    unit_row: int = 0  # bytes per row of a block in flight
    unit_floor: int = 0  # the room for units at the least limit
    rows: int = 0  # for the refusal's message: the table's rows, QIs and method
    qis: int = 0
    method: str = ""


def rss() -> int:
    """This process's resident memory now (bytes)."""
    return psutil.Process().memory_info().rss


# RSS at the start of this process's first run, and after its last run (heap trimmed):
# their difference is the part of ``RUNTIME`` (thread pools, kernels, arenas) already
# resident, which a later run's RSS includes and must not count twice
_process_rss = {"first": None, "settled": None}


def note_run_start(start_rss: int) -> None:
    """The coordinator, as a run begins (after trimming the heap)."""
    if _process_rss["first"] is None:
        _process_rss["first"] = start_rss


def note_run_end(settled_rss: int) -> None:
    """The coordinator, as a run ends (after trimming the heap), successful or not."""
    _process_rss["settled"] = settled_rss


def resident_runtime() -> int:
    """How much of ``RUNTIME`` earlier runs of this process left resident (bytes, 0 to
    ``RUNTIME``): the growth from the first run's start to the last run's end."""
    first, settled = _process_rss["first"], _process_rss["settled"]
    if first is None or settled is None:
        return 0
    return min(RUNTIME, max(0, settled - first))


def early_piece(limit: int | None) -> int | None:
    """The CSV piece for the passes before the plan (type inference, the row count):
    ``MIN_PIECE``-sized reads whenever a limit is set."""
    return None if limit is None else 2 * MIN_PIECE


def mib(x: float) -> str:
    return f"{-(-int(x) // MiB)}MiB"


def _state(rows: int, k: int, d: int) -> tuple[int, int]:
    """(the groups' table and the compaction's temporary, the row -> group map) in bytes."""
    return (rows // k + 1) * (16 * d + 8) + 8 * rows, 4 * rows


def stated(need: float) -> int:
    """The least limit as stated: ``need`` plus 4 MiB (the process's RSS when planned
    varies by a MiB or two from run to run), rounded up to 8 MiB, so that a limit set
    to the stated figure is accepted on the next run."""
    return -(-int(need + 4 * MiB) // (8 * MiB)) * 8 * MiB


def refuse(limit: int, need: int, rows: int, d: int, method: str, why: str = "", tail: str = "") -> EngineError:
    need = stated(need)
    return EngineError(f"--memory-limit {mib(limit)} is below what this run needs (at least {mib(need)} for "
                       f"{rows:,} rows of {d} QIs with method {method}{why}); raise it{tail}")


def plan_budget(cfg: RunConfig, rows: int, d: int, columns: int, threads: int, *, kind: str = "parquet",
                method: str | None = None, state: int | None = None, qis: int | None = None,
                start_rss: int | None = None) -> Budget:
    """``d``: the columns a block row holds (the QIs, or more for the sensitive
    methods); ``columns``: the input's columns; ``kind``: the input's ("csv" reads in
    pieces); ``state``: the bytes the run keeps for the whole table beside the row
    -> group map (default: the MDAV family's group table; the sensitive methods pass
    their class statistics); ``qis``, ``method``: for the message; ``start_rss``: the
    process's RSS when the run began (a CSV's type inference and row count leave the
    allocators' arenas larger, which ``RUNTIME`` already counts: ``CSV_PASSES`` at most).

    The block size, which decides the partition and so the output, never depends on
    the limit, the thread count or the process's memory: it is the one asked for, or
    ``DEFAULT_BLOCK_SIZE``. The limit decides what does not change the output: the
    chunk, the spill buffers, the CSV pieces, where the label map lives, and how many
    units are aggregated at once (``workers``); below the least limit that fits one
    block at a time, the run is refused."""
    block = cfg.block_size or DEFAULT_BLOCK_SIZE
    chunk = cfg.chunk_rows
    if cfg.memory_limit is None:
        return Budget(block, chunk, False, 2 * block)
    method = method or cfg.method
    qis = len(cfg.qi) if qis is None else qis
    limit = cfg.memory_limit
    fixed = psutil.Process().memory_info().rss
    if kind == "csv" and start_rss is not None:
        fixed = min(fixed, start_rss + CSV_PASSES)
    held = fixed
    fixed += RUNTIME - resident_runtime()
    margin = int(MARGIN_SHARE * limit) + MARGIN_FIXED
    groups, labels = _state(rows, cfg.k, d)
    if state is not None:
        groups = int(state)
    csv = kind == "csv"
    cell = CELL * max(columns, 1)
    row = 8 * (5 * d + 6)  # bytes per row of a block in flight
    # one block aggregated while the next is read (a smaller table: the table)
    floor_units = 2 * min(block, max(rows, 2 * cfg.k)) * row
    floor_chunk = min(MIN_CHUNK, chunk)
    floors = floor_chunk * cell + floor_units + 2 * MIN_SPILL + (PIECE_FACTOR * MIN_PIECE if csv else 0)
    # the label map: in memory, or memory-mapped in the spill folder when above a quarter
    # of what is left; counted either way (the pages of a mapped file written count in RSS)
    least = (fixed + MARGIN_FIXED + groups + labels + floors) / (1 - MARGIN_SHARE)
    if limit < least:
        # the blocks a large share of it: say how to need less
        tail = f" or lower --block-size (now {block:,} rows)" if floor_units > (least - fixed) / 4 else ""
        # (the process's own memory counts: in a long-lived process that ran other work, say so)
        raise refuse(limit, least, rows, qis, method, f": {mib(held)} of it held by this "
                     "process before the run", tail=tail)
    free = limit - fixed - margin - groups
    on_disk = labels > (free - labels - floors) / 4
    left = max(0, free - labels - floors)
    # what is left above the floors: a third each to the chunk and the units in flight,
    # the rest to the spill buffers and (CSV) the pieces
    chunk = max(floor_chunk, min(chunk, floor_chunk + int(left / 3 / cell)))
    rest = left / 3
    if csv:
        piece = int(min(MAX_PIECE, MIN_PIECE + rest / 2 / PIECE_FACTOR))
        rest /= 2
    else:
        piece = None
    spill = int(min(DEFAULT_SPILL, MIN_SPILL + rest / 2))
    # once the table is spilled no chunk, piece or spill buffer is in flight: the units
    # (blocks, or maxent's fused units) may take what the floors and the left-over hold
    unit_floor = floor_units + floor_chunk * cell + 2 * MIN_SPILL
    return Budget(block, chunk, on_disk, 2 * block, spill, piece, int(least), unit_floor + left, row, unit_floor,
                  rows, qis, method)


def workers(budget: Budget, limit: int | None, units: list[int], threads: int) -> int:
    """How many units to aggregate at once: ``threads``, fewer when the largest units
    (with the next one read meanwhile) would not fit the room the plan leaves them
    (the output does not depend on it). Refused (one line naming the least limit) when
    not even one fits: a unit grown past the plan (a skewed sample) cannot be cut."""
    if limit is None or budget.unit_room is None or not units:
        return threads
    top = sorted(units, reverse=True)[:max(threads, 1) + 1]
    for w in range(min(max(threads, 1), len(units)), 0, -1):
        if sum(top[:w + 1]) * budget.unit_row <= budget.unit_room:
            return w
    need = sum(top[:2]) * budget.unit_row
    least = budget.least + (need - budget.unit_floor) / (1 - MARGIN_SHARE)
    raise refuse(limit, max(least, limit + MiB), budget.rows, budget.qis, budget.method,
                 f": units of up to {top[0]:,} rows")


def check_unit(budget: Budget, limit: int | None, units: list[int], threads: int, rows: int, d: int,
               method: str, why: str) -> None:
    """Refuse (one line naming the least limit) when the largest units that run at once
    (``threads`` of them) need more than the room the plan leaves them once the table is
    spilled: a unit grown past the block size (maxent's fusions) cannot be cut."""
    if limit is None or budget.unit_room is None or not units:
        return
    top = sorted(units, reverse=True)[:max(threads, 1)]
    need = sum(top) * budget.unit_row
    if need > budget.unit_room:
        least = budget.least + (need - budget.unit_floor) / (1 - MARGIN_SHARE)
        raise refuse(limit, max(least, limit + MiB), rows, d, method, why)
