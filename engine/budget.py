"""Size the run to the memory limit: block size, chunk rows, where the label map lives.

The estimate, per the passes' working sets (bytes; d QIs, c columns in all):

* fixed: the process as it stands (interpreter, Numba, Polars, pyarrow), measured;
* the row -> group map: 4 per row (int32), on disk when above a quarter of the budget;
* the groups: about 2 * 8 * d + 8 per group for centroids in original units and
  z-scores, with at most rows / k groups;
* a chunk in flight: about 48 per cell of the chunk (Polars' batch, the NumPy copy,
  the output frame and its Arrow copy);
* a block in flight: about 8 * (5d + 6) per row (spill record, values, z-scores,
  the kd-tree and labels), for ``threads + 1`` blocks.

Without a limit: blocks of ``DEFAULT_BLOCK_SIZE`` rows and the chunk size asked for.
"""

from __future__ import annotations

from dataclasses import dataclass

import psutil

from .config import DEFAULT_BLOCK_SIZE, RunConfig
from .errors import EngineError

MIN_BLOCK = 1_000


@dataclass(frozen=True)
class Budget:
    block_size: int
    chunk_rows: int
    labels_on_disk: bool
    block_limit: int | None = None  # the most rows a spilled block may hold (None: no limit)


def _mib(x: float) -> str:
    return f"{x / 2**20:.0f}MiB"


def plan_budget(cfg: RunConfig, rows: int, d: int, columns: int, threads: int) -> Budget:
    block = cfg.block_size or DEFAULT_BLOCK_SIZE
    chunk = cfg.chunk_rows
    if cfg.memory_limit is None:
        return Budget(block, chunk, False, 2 * block)
    limit = cfg.memory_limit
    fixed = psutil.Process().memory_info().rss
    free = limit - fixed
    groups = (rows // cfg.k + 1) * (16 * d + 8) + 8 * rows  # + the compaction's temporary
    labels = 4 * rows
    on_disk = labels > free / 4
    need = groups + (0 if on_disk else labels)
    left = free - need
    if left < 32 << 20:
        raise EngineError(f"memory limit {_mib(limit)} is too small for {rows:,} rows: the process already "
                          f"uses {_mib(fixed)} and the group table needs {_mib(need)}; raise --memory-limit")
    # half of what is left for chunks, half for blocks
    # per chunk cell: the write pass holds the read frame, its float copy, the published
    # frame, its Arrow form and up to two more in the background writer (about 24 x 8 bytes)
    chunk = max(1_000, min(chunk, int(left / 2 / (192 * max(columns, 1)))))
    per_row = 8 * (5 * d + 6)
    fit = int(left / 2 / (per_row * (threads + 1)))
    if cfg.block_size is None:
        block = max(min(block, fit), min(MIN_BLOCK, fit), 2 * cfg.k)
    elif cfg.block_size > fit:
        raise EngineError(f"block size {cfg.block_size:,} does not fit the memory limit {_mib(limit)} "
                          f"with {threads} threads (at most {fit:,} rows)")
    return Budget(block, chunk, on_disk, max(fit, block))
