"""Size the run to the memory limit: block size, chunk rows, spill buffers, CSV pieces,
where the label map lives; refuse a limit below what the run needs.

The estimate of peak RSS (bytes; d QIs, c columns in all, n rows), each term
measured on census-like tables (docs/benchmarks.md, "Memory limit"):

* fixed: the process as it stands when the run is planned (interpreter, Numba,
  Polars, pyarrow), measured (a CSV or Parquet file: as the run began, plus
  ``CSV_PASSES``, ``held_before``), plus ``RUNTIME`` for what comes later whatever the
  sizes (the compiled kernels loaded at first use, the thread pools, the
  allocators' arenas of Polars, pyarrow and NumPy), less what earlier runs in this
  process already made resident (``resident_runtime``: a batch job calling
  ``anonymize`` file after file holds them from its first run on);
* the row -> group map: 4 per row (int32), memory-mapped in the spill folder when above
  a quarter of the budget (counted either way: a mapped file's written pages are resident);
* the groups: about 2 * 8 * d + 8 per group for centroids in original units and
  z-scores, with at most rows / k groups, and 8 per row for the compaction;
* neither of these two in a row-ordered run (``row_ordered``: the published values go
  to the write pass in row order, on disk, ``passes.published``): instead the records'
  spill buffers, a range of published values in the write pass, the self-check's
  counter spilled, and the windows of the spill files' indexes read (``row_ordered_bytes``,
  which grow with rows / spill buffer only: 2 MiB at 100M rows). Nothing else held
  grows with the rows, so the least limit at 100M rows is within 2 % of 10M's;
* making the plan (``partition.sample_bytes``): its sample (at most ``SAMPLE_ROWS`` aimed
  at), standardized and sorted; a phase of its own;
* a chunk in flight: ``CELL`` bytes per cell of the chunk (the read frame, its float
  copy, the output frame, its Arrow form, the read-ahead and the background writer);
* a block in flight: about 8 * (5d + 6) per row (spill record, values, z-scores,
  the index and labels): two blocks at the least (one aggregated, the next read),
  one more for each further unit aggregated at once (``workers``, at most the threads);
* the spill buffers: two of ``spill_buffer`` bytes (one filled, one being written);
* a CSV input read a piece at a time (``Source.bounded``): about ``PIECE_FACTOR``
  times the piece (the bytes, Polars' parse buffers and columns);
* a Parquet input read by pyarrow (the QIs of the profile and partition passes, the
  original of ``--risk``): pyarrow pre-buffers every column chunk of a file it reads,
  which its allocator keeps: the read columns' compressed bytes of the largest file
  (``parquet_buffer``, from the footers), counted for the whole run;
* the polish (MDAV family, streamed, ``RunConfig.effective_polish_rounds`` > 0): while
  the units are aggregated, two polished units in flight (``polish_state`` a row beside
  the block's record) and, without the seam stage (``tuning.seam_stage``: up to
  ``POLISH_MAX_ROWS`` rows and as many x 16 cells), every standardized row (8 d
  a row) for the seam polish that follows (``seam_bytes``: the rows, the kernel's slot
  copy, the near lists); above, the seam stage's spill buffers (``SEAM_SPILL``), the
  first stage's units unpolished, then its blocks polished as units are (``seam_row``:
  the larger of the two stages' rows in flight).
  The polish never depends on the limit: a limit too small for it is refused (the
  refusal says ``or --polish-rounds 0``);
* ``--risk`` (after the run, in the same process; the label map is still held): the
  original's standardized QIs and their kd-tree (``n (16 d + 25)``), the release's QI
  columns as pyarrow pre-buffers them (8 a value), the distinct masked points (48 d a
  group);
* ``--strata``: a table of one block holds each row's stratum (a byte a row); a streamed
  run reads them from a row-ordered file a chunk at a time (``partition.Strata``), except
  the in-memory seam polish, which holds them with their sort order (9 bytes a row; the
  copy of a stratum's standardized rows it polishes is not counted: 2M rows x 7 QIs in
  5 strata at their least limit, 1064MiB, peaked at 873 MiB);
* a margin: ``MARGIN_SHARE`` of the limit plus ``MARGIN_FIXED``.

The phases do not overlap: the least limit is the fixed part plus the largest phase
(the plan, the passes with their floors, the polished aggregate pass, the seam polish,
the risk). A refusal names what holds the memory when it is per-row state an option
keeps (``--strata``, ``--refine``, ``--scheduler``, non-numeric QIs: the flow's
``per_row``) or ``--risk``.

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
import pyarrow.parquet as pq

from .io.spill import RunFile
from .options import OPTIONS, RunConfig
from .passes.partition import sample_bytes
from .passes.published import RANGE_ROWS, range_bytes, range_rows
from .tuning import (DEFAULT_BLOCK_SIZE, POLISH_MAX_ROWS, POLISH_UNIT_ROWS, SEAM_SPILL, polish_near, scale_unit_rows,
                     seam_stage)
from .errors import EngineError

MiB = 1 << 20
RUNTIME = 128 * MiB          # kernels, thread pools, allocator arenas (measured: 110-125 MiB)
CELL = 64                    # bytes per cell of a chunk in flight (measured: about 52)
PIECE_FACTOR = 12            # peak per byte of a CSV piece (measured: about 10, + 45 MiB of arenas)
CSV_PASSES = 32 * MiB        # a file's passes before the plan (CSV, Parquet), beyond RUNTIME's arenas
MARGIN_SHARE = 0.05
MARGIN_FIXED = 16 * MiB
MIN_CHUNK = 10_000
MIN_SPILL = 4 * MiB
MIN_PIECE = 2 * MiB
MAX_PIECE = 16 * MiB
DEFAULT_SPILL = 32 * MiB
PHASE_FACTOR = 1.15          # the seam polish and the risk: measured peak over the estimate (1M rows: 1.07, 0.97)
MIN_RANGE = 1 << 16          # rows of a range of row-ordered published values at the least limit


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
    # the published values reach the write pass in row order, on disk (``passes.published``):
    # no row -> group map, no table of groups; ``range_rows`` a range of them (about);
    # ``counter_room``: bytes the self-check may hold in memory (None: any), else it spills
    row_ordered: bool = False
    range_rows: int = RANGE_ROWS
    counter_room: int | None = None
    # each phase's least limit (bytes): the limit were that phase the largest (``engine.planning``)
    phases: tuple = ()


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


def row_ordered_bytes(rows: int, d: int, block: int, chunk: int, spill: int, target: int = MIN_RANGE) -> int:
    """What a row-ordered run (``passes.published``) holds beyond the passes' floors, with
    spill buffers of ``spill`` bytes: the windows of the partition store's index read
    (``io.spill.RunFile``: two of 4 bytes a run and bucket, ``WINDOW`` buckets), the
    published records' buffers and windows of their index, a range of
    ``range_rows(chunk, target)`` rows of published values in the write pass, the
    self-check's counter spilled (two buffers of hashes). The windows grow with the
    runs, that is with rows / spill: 2 MiB at 100M rows and 4 MiB buffers."""
    def windows(record: int, buckets: int) -> int:
        return 2 * 4 * -(-rows * record // spill) * (min(buckets, RunFile.WINDOW) + 1)

    ranged = range_rows(chunk, target)
    store = windows(4 * (1 + d), 2 * -(-rows // block))  # (the plan's leaves: at most twice rows / block)
    records = 2 * spill + windows(8 * (1 + d), -(-rows // ranged))
    return store + records + range_bytes(d, ranged) + 2 * spill


def stated(need: float) -> int:
    """The least limit as stated: ``need`` plus 4 MiB (the process's RSS when planned
    varies by a MiB or two from run to run), rounded up to 8 MiB, so that a limit set
    to the stated figure is accepted on the next run."""
    return -(-int(need + 4 * MiB) // (8 * MiB)) * 8 * MiB


ENCODED_SEP = "\x1f"  # in a mixed-type run's encoded column names (``engine.encode.mixed``): QI, then the part


def qi_count(columns) -> int:
    """The QIs the user gave, for a refusal's message: a mixed-type run is planned with its
    encoded columns (``QI<sep>category``, ``QI<sep>rank``, ...: ``engine.encode.mixed``),
    each counted once by the QI it encodes."""
    return len(dict.fromkeys(str(c).split(ENCODED_SEP, 1)[0] for c in columns))


class Refusal(EngineError):
    """A limit below what the run needs; ``least``: the figure stated (bytes)."""

    def __init__(self, message: str, least: int):
        super().__init__(message)
        self.least = least


def refuse(limit: int, need: int, rows: int, d: int, method: str, why: str = "", tail: str = "") -> Refusal:
    need = stated(need)
    return Refusal(f"--memory-limit {mib(limit)} is below what this run needs (at least {mib(need)} for "
                   f"{rows:,} rows of {d} QIs with method {method}{why}); raise it{tail}", need)


# A run that may go row-ordered (``passes.published``) keeps the row -> group map and the
# groups when they fit the limit (or without a limit): its published values then make no
# trip through the disk (64 bytes a row: at 10M rows 25 % more time). False: row-ordered
# whenever it may be (the tests, to run that path on small tables).
PREFER_MAP = True


def plan_budget(cfg: RunConfig, rows: int, d: int, columns: int, threads: int, *, row_ordered: bool = False,
                **kw) -> Budget:
    """The run's ``Budget`` (``plan``). ``row_ordered``: the run may hand its published
    values to the write pass in row order, on disk (``passes.published``: no row -> group
    map, no table of groups, so nothing held grows with the rows but the spill files'
    small index windows); it then does when the map and the groups do not fit the limit
    (``PREFER_MAP``), and a refusal states the smaller of the two least limits."""
    if not row_ordered or PREFER_MAP and cfg.memory_limit is None:
        return plan(cfg, rows, d, columns, threads, **kw)
    refusals = []
    for ordered in ((False, True) if PREFER_MAP else (True,)):
        try:
            return plan(cfg, rows, d, columns, threads, row_ordered=ordered, **kw)
        except Refusal as exc:
            refusals.append(exc)
    raise min(refusals, key=lambda r: r.least)


def seam_bytes(rows: int, d: int, k: int) -> int:
    """Memory of the seam polish: the standardized rows, the polish kernel's slot copy
    (2k-1 slots a group), near lists and their copy, sums / means / orders."""
    groups = rows // k + 1
    return 8 * (rows * d + groups * (2 * k - 1) * d + 2 * groups * polish_near(k) + 5 * groups * d + 2 * rows)


def polish_pair(rows: int, d: int, k: int, block: int) -> int:
    """Rows of the two largest units of a polished run (one aggregated, the next read:
    ``CentroidFlow.units``): at least ``least`` rows a unit (``centroids.unit_rows``: fewer
    above ``POLISH_MAX_ROWS`` rows for many grouping columns), ending at the block that
    reaches it, the last taking a shorter rest: at most 3 least + 2 blocks."""
    most = scale_unit_rows(d) if seam_stage(rows, d, POLISH_MAX_ROWS) else POLISH_UNIT_ROWS
    return min(rows, 3 * max(2 * k, min(most, rows // 2)) + 2 * block)


def seam_row(d: int, w: int, k: int, row: int) -> int:
    """Bytes a row of a unit in flight holds above ``POLISH_MAX_ROWS`` rows (``passes.seams``):
    the first stage's units are cut into groups, not polished (``row``, a block's row in
    flight), then the seam stage's blocks, of about as many rows, are polished as many at
    once: a row read back (its record of ``w`` spilled values, the row id, group and unit,
    and the values' copy: mixed-type QIs spill one value a QI, ``w``, and standardize
    them to ``d`` encoded columns) beside the polish kernel's state (``polish_state``).
    The larger of the two: the stages do not overlap."""
    return max(row, 8 * (2 * w + 8) + polish_state(d, k))


def polish_state(d: int, k: int) -> int:
    """Bytes a row of a unit polished in a worker holds beside its block record: the
    kernel's state for the unit (``seam_bytes`` a row, the rows' copy included)."""
    return -(-seam_bytes(1 << 20, d, k) // (1 << 20))


def parquet_buffer(paths, columns) -> int:
    """What pyarrow pre-buffers reading ``columns`` of the largest of the Parquet files
    ``paths``: their column chunks' compressed bytes (from the footers; 0 for files it
    cannot read, whose error comes from the passes)."""
    want, most = set(columns), 0
    for f in paths:
        try:
            meta = pq.read_metadata(f)
        except Exception:  # (not Parquet, unreadable: the passes say so)
            continue
        names = [meta.schema.column(j).path.split(".")[0] for j in range(meta.num_columns)]
        size = sum(meta.row_group(g).column(j).total_compressed_size
                   for g in range(meta.num_row_groups) for j in range(meta.num_columns) if names[j] in want)
        most = max(most, size)
    return most


def plan(cfg: RunConfig, rows: int, d: int, columns: int, threads: int, *, kind: str = "parquet",
         method: str | None = None, state: int | None = None, qis: int | None = None,
         start_rss: int | None = None, buffered: int = 0, polish: bool | None = None,
         risk: bool = False, row_ordered: bool = False, per_row: str = "", published: int | None = None) -> Budget:
    """``d``: the columns a block row holds (the QIs, or more for the sensitive
    methods); ``columns``: the input's columns; ``kind``: the input's ("csv" reads in
    pieces); ``state``: the bytes the run keeps for the whole table beside the row
    -> group map (default: the MDAV family's group table; the sensitive methods pass
    their class statistics); ``qis``, ``method``: for the message; ``start_rss``: the
    process's RSS when the run began (a CSV's or Parquet file's first passes leave the
    allocators' arenas larger, which ``RUNTIME`` already counts: ``CSV_PASSES`` more,
    always, so that the figure stated before those passes is the one after them:
    ``held_before``);
    ``buffered``: what pyarrow pre-buffers of a Parquet input (``parquet_buffer``);
    ``polish``: the run polishes (default: from ``cfg``, a streamed MDAV-family run
    with ``effective_polish_rounds`` > 0); ``risk``: ``--risk`` follows the run;
    ``row_ordered``: a streamed run hands its published values to the write pass in row
    order, on disk (``passes.published``; ``plan_budget`` decides); else ``per_row`` names
    what keeps the map (an option, for the refusal's message); ``published``: the values
    a row-ordered record and a spilled block record hold (mixed-type QIs: one a QI, where
    ``d`` counts their encoded columns; default ``d``).

    The block size, which decides the partition and so the output, never depends on
    the limit, the thread count or the process's memory: it is the one asked for, or
    ``DEFAULT_BLOCK_SIZE``. The limit decides what does not change the output: the
    chunk, the spill buffers, the CSV pieces, where the label map lives, and how many
    units are aggregated at once (``workers``); below the least limit that fits one
    block at a time (and the polish, the risk), the run is refused."""
    block = cfg.block_size or DEFAULT_BLOCK_SIZE
    chunk = cfg.chunk_rows
    row_ordered = row_ordered and rows > block
    if cfg.memory_limit is None:
        return Budget(block, chunk, False, 2 * block, DEFAULT_SPILL, row_ordered=row_ordered, range_rows=RANGE_ROWS)
    method = method or cfg.method
    qis = qi_count(cfg.qi) if qis is None else qis
    limit = cfg.memory_limit
    fixed = held = held_before(kind, start_rss)
    fixed += RUNTIME - resident_runtime() + buffered
    strata = getattr(cfg, "strata", None) is not None  # (one block: its rows' strata held; else on disk)
    fixed += rows if strata and rows <= block else 0
    margin = int(MARGIN_SHARE * limit) + MARGIN_FIXED
    groups, labels = _state(rows, cfg.k, d) if not row_ordered else (0, 0)
    groups = int(state) if state is not None else groups
    csv = kind == "csv"
    cell = CELL * max(columns, 1)
    row = 8 * (5 * d + 6)  # bytes per row of a block in flight
    if polish is None:
        polish = cfg.spec.centroids and rows > block and cfg.effective_polish_rounds(rows) > 0
    pair = polish_pair(rows, d, cfg.k, block) if polish else 0
    # one block aggregated while the next is read (a smaller table: the table)
    floor_units = 2 * min(block, max(rows, 2 * cfg.k)) * row
    floor_chunk = min(MIN_CHUNK, chunk)
    floors = floor_chunk * cell + floor_units + 2 * MIN_SPILL + (PIECE_FACTOR * MIN_PIECE if csv else 0)
    if row_ordered:
        floors += row_ordered_bytes(rows, published or d, block, floor_chunk, MIN_SPILL)
    # the phases after the passes' floors (they do not overlap): the polished aggregate
    # pass (every standardized row kept for the seams, two polished units in flight),
    # the seam polish, the disclosure risk
    unit_row = row + (polish_state(d, cfg.k) if polish else 0)
    stage = polish and seam_stage(rows, d, POLISH_MAX_ROWS)  # (by rows x encoded columns)
    if stage:  # (the seam stage: ``seam_row``)
        unit_row = seam_row(d, published or d, cfg.k, row)
    phases = {"passes": groups + floors}
    if rows > block:  # making the plan: its sample, standardized, sorted (``partition.sample_bytes``)
        phases["plan"] = sample_bytes(rows, block, len(cfg.qi))
    if polish and not stage:  # the seams polished in memory, every standardized row at once
        phases["polish"] = 8 * rows * d + pair * unit_row + floor_chunk * cell + 2 * MIN_SPILL
        phases["seams"] = int(PHASE_FACTOR * seam_bytes(rows, d, cfg.k)) + 9 * rows * strata  # (+ strata, order)
    elif polish:  # the seams as blocks of their own (``passes.seams``): its store's two buffers
        phases["polish"] = pair * unit_row + floor_chunk * cell + 2 * MIN_SPILL + 2 * SEAM_SPILL
    if risk:
        phases["risk"] = risk_state(rows, d, rows // cfg.k + 1 if cfg.k else rows) + floor_chunk * cell
    top = max(phases.values())
    # the label map: in memory, or memory-mapped in the spill folder when above a quarter
    # of what is left; counted either way (the pages of a mapped file written count in RSS)
    least = (fixed + MARGIN_FIXED + labels + top) / (1 - MARGIN_SHARE)
    if limit < least:
        raise _refusal(limit, least, rows, qis, method, held, phases, top, block,
                       floor_units > (least - fixed) / 4, labels + groups if per_row else 0, per_row)
    free = limit - fixed - margin - groups
    on_disk = labels > (free - labels - floors) / 4
    # what is left above the least: a third each to the chunk and the units in flight,
    # the rest to the spill buffers and (CSV) the pieces
    left = max(0, limit - margin - fixed - labels - top)
    chunk = max(floor_chunk, min(chunk, floor_chunk + int(left / 3 / cell)))
    rest = left / 3
    if csv:
        piece = int(min(MAX_PIECE, MIN_PIECE + rest / 2 / PIECE_FACTOR))
        rest /= 2
    else:
        piece = None
    spill = int(min(DEFAULT_SPILL, MIN_SPILL + rest / 2))
    ranged, room = _row_ordered_shares(published or d, chunk, floor_chunk, left) if row_ordered else (MIN_RANGE, None)
    # once the table is spilled no chunk, piece or spill buffer is in flight: the units
    # (blocks, or maxent's fused units) may take what the floors and the left-over hold
    # (polished: beside every standardized row, kept for the seams)
    if polish:
        unit_floor = pair * unit_row + floor_chunk * cell + 2 * MIN_SPILL
        unit_room = unit_floor + (top - phases["polish"]) + left - (2 * SEAM_SPILL if stage else 0)
    else:
        unit_floor = floor_units + floor_chunk * cell + 2 * MIN_SPILL
        unit_room = unit_floor + (top - phases["passes"]) + left
    return Budget(block, chunk, on_disk, 2 * block, spill, piece, int(least), unit_room, unit_row, unit_floor,
                  rows, qis, method, row_ordered, ranged, room, _phase_limits(fixed + labels, phases))


def held_before(kind: str, start_rss: int | None) -> int:
    """What the process holds as the run is planned, as the plan counts it. A CSV or Parquet
    input: the RSS at the run's start plus ``CSV_PASSES``, whatever its first passes (the
    type inference, the footers, the dictionaries, the row count) left in the thread pools
    and the allocators' arenas, which ``RUNTIME`` counts and the run reuses: so the figure
    does not follow what the allocators kept this time (after the dictionaries of a Parquet
    file the RSS varies by 10 MiB from run to run: a refusal stated 1,224 MiB, ``microagg
    plan`` 1,208), and a refusal, ``microagg plan`` and the run at the figure agree (issue 41
    item 2). A Parquet input's growth beyond ``RUNTIME`` and twice ``CSV_PASSES`` (a
    statistical file transcoded: 162 MiB measured after the dictionaries of a 400,000-row
    census extract) is counted as it is. Any other input (a frame in memory): the RSS now."""
    now = psutil.Process().memory_info().rss
    if start_rss is None or kind not in ("csv", "parquet"):
        return now
    base = start_rss + CSV_PASSES
    return base if kind == "csv" else base + max(0, now - base - CSV_PASSES - RUNTIME)


def _phase_limits(held: int, phases: dict) -> tuple:
    """Each phase's least limit as stated (``Budget.phases``): the limit were it the largest."""
    return tuple((p, stated((held + MARGIN_FIXED + v) / (1 - MARGIN_SHARE))) for p, v in phases.items())


def _row_ordered_shares(d: int, chunk: int, floor_chunk: int, left: float) -> tuple[int, int]:
    """A row-ordered run's ``(range rows aimed at, counter_room)`` from what is left above the
    least: longer ranges when they fit; the self-check's counter in memory when it fits."""
    more = range_bytes(d, range_rows(chunk, RANGE_ROWS)) - range_bytes(d, range_rows(floor_chunk, MIN_RANGE))
    return (RANGE_ROWS if more <= left / 6 else MIN_RANGE), int(left / 3) + 2 * MIN_SPILL


def _refusal(limit, least, rows, qis, method, held, phases, top, block, blocks_large, per_row_bytes, per_row):
    """The refusal of ``plan_budget``, saying what takes the memory and how to need less."""
    tail = ""
    if phases.get("polish", 0) == top or phases.get("seams", 0) == top:
        tail = " or set --polish-rounds 0"
    elif blocks_large:
        tail = f" or lower --block-size (now {block:,} rows)"
    # (the process's own memory counts: in a long-lived process that ran other work, say so)
    why = f": {mib(held)} of it held by this process before the run"
    if phases.get("risk", 0) == top:
        why += f", {mib(top)} by --risk"
    if per_row_bytes > (least - held) / 4:  # (what grows with the rows: name what keeps it)
        why += f", {mib(per_row_bytes)} by the row -> group map and the groups that {per_row} keeps"
    return refuse(limit, least, rows, qis, method, why, tail=tail)


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


# ---------------------------------------------------------------- the audit commands

def risk_state(rows: int, d: int, points: int, masked: int | None = None) -> int:
    """Bytes of the disclosure risk (``engine.audit.risk``) beyond the process: the
    original's standardized QIs and their kd-tree while it is built (``n (16 d + 25)``),
    the release's QI columns as pyarrow pre-buffers them (``masked`` bytes; None: not
    written yet, 8 a value and two columns a QI at most, a range), the distinct masked
    points (their counter, sorted copy and z-scores: 48 d a point)."""
    masked = 2 * 8 * rows * d if masked is None else masked
    return int(PHASE_FACTOR * (rows * (16 * d + 25) + masked + 48 * d * points))


def check_command(limit: int | None, command: str, rows: int, d: int, state: int, *, buffered: int = 0,
                  chunk_cells: int = 0, csv: int = 0) -> None:
    """``microagg risk`` / ``verify`` / ``profile`` under ``--memory-limit``: refuse (one
    line naming the least limit) when the process as it is now, ``RUNTIME``, what pyarrow
    pre-buffers (``buffered``), ``chunk_cells`` cells of chunks in flight, ``csv`` CSV
    inputs read in pieces (``early_piece``) and the command's own ``state`` (bytes) do
    not fit. Called once the inputs are opened and counted, before the work."""
    if limit is None:
        return
    held = rss()
    fixed = held + RUNTIME - resident_runtime() + buffered
    need = state + CELL * chunk_cells + csv * PIECE_FACTOR * early_piece(limit)
    least = (fixed + MARGIN_FIXED + need) / (1 - MARGIN_SHARE)
    if limit < least:  # (stated 8 MiB above: the process's RSS when checked varies by 8 MiB from run to run)
        raise EngineError(f"--memory-limit {mib(limit)} is below what microagg {command} needs (at least "
                          f"{mib(stated(least + 8 * MiB))} for {rows:,} rows of {d} QIs: {mib(held)} of it held by this "
                          f"process before it); raise it")


def parse_limit(value) -> int | None:
    """A ``memory_limit`` as given (``"512MiB"``, bytes, None), checked as the option's."""
    return None if value is None else OPTIONS["memory_limit"].check(value)


def check_verify(limit: int | None, out, orig, rows: int, keys: list, k: int, chunk_rows: int) -> None:
    """``microagg verify`` under ``--memory-limit`` (``check_command``): the class
    counter and (with the original) the class means (a release of ``rows`` rows and
    classes of k rows or more: rows / k classes, 48 bytes a value and class, their merges
    included), the chunks of the release and the
    original side by side, what pyarrow pre-buffers of both."""
    if limit is None:
        return
    classes = rows // max(k, 1) + 1
    # the counts (the keys and a count a class); with the original also each class's
    # original means (``ClassMeans``: the keys, a mean a QI and the rows)
    width = (len(keys) + 2) + (len(keys) + 1 if orig is not None else 0)
    state = int(PHASE_FACTOR * 48 * width * classes)
    sources = [s for s in (out, orig) if s is not None]
    buffered = sum(parquet_buffer(s.paths, s.columns) for s in sources if s.kind == "parquet")
    cells = chunk_rows * sum(len(s.columns) for s in sources)
    shown = set(keys)  # (the QIs given: a range QI c is published as c_min and c_max)
    qis = len(dict.fromkeys(c[:-4] if c.endswith(("_min", "_max")) and {c[:-4] + "_min", c[:-4] + "_max"} <= shown
                            else c for c in keys))
    check_command(limit, "verify", rows, qis, state, buffered=buffered, chunk_cells=cells,
                  csv=sum(s.kind == "csv" for s in sources))
