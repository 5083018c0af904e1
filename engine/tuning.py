"""Tuning constants of the passes: block, leaf and polish sizes.

A leaf module (it imports nothing of the package): the option table
(``engine.options``), the method flows and the passes read these.
"""

from __future__ import annotations

DEFAULT_BLOCK_SIZE = 20_000
DEFAULT_LEAF_SIZE = 256  # rows per leaf of the streamed aggregate pass (engine/kernels/mdav/leaf.py)
# Polish (engine/kernels/search/polish.py): moves and swaps among each group's nearest groups, by
# default on streamed runs of at most POLISH_MAX_ROWS rows (above, the fast path of 256-row
# leaves alone keeps 10M rows near the I/O floor). Polished runs cut leaves of
# ``polish_leaf_size(k)`` rows (a better start) in units of POLISH_UNIT_ROWS rows, polish each
# unit in the workers, then the seams between units in memory (engine/methods/centroids.py).
# Each polish stops at its first round that lowers the SSE by less than POLISH_MIN_GAIN of it
# (at most DEFAULT_POLISH_ROUNDS rounds): later rounds cost about as much as they gain
# (docs/notes/quality-at-scale.md).
DEFAULT_POLISH_ROUNDS = 32
POLISH_MAX_ROWS = 2_000_000
POLISH_UNIT_ROWS = 100_000  # rows aggregated and polished together in a worker (consecutive blocks)
POLISH_MIN_GAIN = 0.01
# Above POLISH_MAX_ROWS the units are not polished; the blocks of a second plan, which cross the
# units' faces, are (engine/passes/seams.py), with bounded memory and cheaper settings: smaller
# leaves, shorter near lists and narrow windows, one round (docs/notes/quality-at-scale.md).
# Chosen on the quality-for-CPU frontier of one seam block (issue 42 item 3, docs/benchmarks.md):
# windows of 4 positions in 1 + 3 kd orders find near lists as good as 12 positions in 1 + 1, for
# less, and leaves of 2,048 rows start the polish lower at about the CPU the narrower windows save.
SCALE_LEAF_SIZE = 2048
SCALE_POLISH_ROUNDS = 1
SCALE_ROTATIONS = 3
SCALE_DESCENT = 1  # two-hop refreshes of the near lists (up to 2M rows: 2)
SCALE_WINDOW = 4  # positions searched on each side in the kd orders (up to 2M rows: 24)
SEAM_SPILL = 8 << 20  # bytes the seam stage's spill store buffers before a write
# Above POLISH_MAX_ROWS the units of both stages hold at most POLISH_UNIT_ROWS x SCALE_UNIT_WIDTH
# cells of the grouping columns (``scale_unit_rows``): a mixed-type table's nominal QIs are 16
# encoded columns each (45 in all for a census extract), which made a unit in flight 2-3 KB a
# row and the polished default refused under 1 GiB (issue 42). Numeric tables of up to 16
# QIs keep units of POLISH_UNIT_ROWS rows.
SCALE_UNIT_WIDTH = 16
# The in-memory seam polish holds every standardized row (8 d bytes a row, and the polish
# kernel's state on top): its size is rows x encoded columns, not rows. So a run takes the seam
# stage above POLISH_MAX_ROWS rows or above POLISH_MAX_ROWS x SCALE_UNIT_WIDTH cells of grouping
# columns (``seam_stage``): a numeric table of up to 16 QIs keeps the in-memory polish up to 2M
# rows, a census extract of 42 encoded columns takes the seam stage from 761,905 rows (its
# in-memory polish planned 2,064 MiB at 1M rows; the seam stage 664-800 MiB). A threshold on
# the table's shape, not on the memory limit: the release never depends on the limit. The
# cheaper SCALE_ settings (leaves, rounds, near lists, windows) still go by rows alone: a
# seam stage taken for its columns at up to POLISH_MAX_ROWS rows polishes as the in-memory
# polish does (1M-row census extract: mean per-QI loss 15.11 % against 14.87 % in memory, in
# 28.5 s against 50.9 s; with the SCALE_ settings of then, 1,024-row leaves, 16.52 %).
POLISH_ROTATIONS = 3  # near lists from windows of 1 + 3 kd orders (0: exact kd-tree queries, slower)


def scale_unit_rows(d: int, unit_rows: int = POLISH_UNIT_ROWS) -> int:
    """Rows of a unit of either stage of a run that takes the seam stage (``seam_stage``)
    for ``d`` grouping columns (the encoded ones): ``unit_rows`` up to SCALE_UNIT_WIDTH
    columns, then fewer, as many cells (a function of the columns only: the output never
    depends on the limit)."""
    return unit_rows if d <= SCALE_UNIT_WIDTH else unit_rows * SCALE_UNIT_WIDTH // d


def seam_stage(rows: int, d: int, max_rows: int = POLISH_MAX_ROWS) -> bool:
    """Whether a polished streamed run of ``rows`` rows and ``d`` grouping columns (the
    encoded ones) polishes its seams as the blocks of a second plan (``passes.seams``)
    rather than every row in memory: above ``max_rows`` rows or ``max_rows`` x
    SCALE_UNIT_WIDTH cells (``max_rows``: the caller's POLISH_MAX_ROWS, which tests lower)."""
    return rows > max_rows or rows * max(d, 1) > max_rows * SCALE_UNIT_WIDTH


def polish_near(k: int) -> int:
    """Near groups searched per group: about 96 rows' worth, 12..24 groups."""
    return int(min(24, max(12, 96 // k)))


def scale_near(k: int) -> int:
    """Near groups searched per group above POLISH_MAX_ROWS: about 25 rows' worth, 5..12 groups."""
    return int(min(12, max(5, 25 // k)))


def polish_leaf_size(k: int) -> int:
    """Leaf rows of a polished run: at k <= 3 the polish ends near its start, which needs
    large leaves to beat exact MDAV; from k = 5 smaller leaves (cheaper brute-force MDAV)
    polish to the same margin."""
    return 32_768 if k <= 3 else 16_384 if k == 4 else 8_192

# Nominal quasi-identifiers (engine/encode/mixed.py): one-hot columns (exact mismatch
# distance) up to ONE_HOT_MAX categories; above, EMBED_DIMS columns holding a fixed
# random unit vector per category (equal categories at distance 0, different ones at
# the one-hot distance on average): the per-row cost no longer grows with the categories
ONE_HOT_MAX = 16
EMBED_DIMS = 16
# The fast path's streamed MDAV leaves and the seam stage's polish group an embedded nominal QI by its
# codes instead, with the exact one-hot distance (``kernels.mdav.coded``,
# ``kernels.search.coded``); its embedding columns then only guide the kd cuts and near lists
CODED_NOMINAL = True
