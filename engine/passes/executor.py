"""Where the passes run: one interface (``Executor``), two implementations.

The passes say what to map, not where it runs. A run's executor is chosen once, by the
coordinator (``coordinator.open_executor``), and handed to the method's flow:

* ``LocalExecutor`` (this module): this machine. The partition pass spills to one
  ``io.spill.RunStore``, the units run on a thread pool (``parallel.ordered_map``,
  inside ``passes.aggregate.aggregate_units``), the write pass streams in this process.
* ``engine.cluster.DaskExecutor`` (``--scheduler``): the same passes as Dask tasks
  (docs/notes/dask.md); ``engine.cluster.PlannedDask`` stands for it in a plan (the
  run's checks, no cluster connected).

What differs between them, besides where the work runs, is said by two attributes,
not by a test of which one it is:

* ``in_process``: the units share this process's memory (the budget bounds how many
  run at once: ``budget.workers``), and the write pass runs here (a mixed-type run's
  numeric histograms are counted by it);
* ``keeps_row_map``: why a run on it keeps the row -> group map (``budget``'s
  row-ordered plan needs the write pass of this machine), or None.
"""

from __future__ import annotations

from typing import Callable, Protocol

from ..io.spill import RunStore
from .partition import partition_pass
from .write import write_pass


class Executor(Protocol):
    """What the passes ask of where they run (module docstring)."""

    in_process: bool
    keeps_row_map: str | None

    def check_source(self, source) -> None:
        """Refuse an input this executor cannot read (one line)."""

    def store(self, n_blocks: int, d: int, folder=None, buffer_bytes: int = 32 << 20, *, rows=None, expand=None):
        """The partition pass's spill store (the ``SpillStore`` protocol)."""

    def partition_pass(self, source, profile, cols, plan, store, chunk_rows, progress=False, *, moments=None,
                       rows=None, dist=None) -> None:
        """``passes.partition.partition_pass``'s contract."""

    def unit_work(self, block: Callable) -> tuple[Callable | None, Callable | None]:
        """``(block function, mapper)`` for ``passes.aggregate.aggregate_blocks``: the flow's
        ``block`` on this machine's threads (no mapper), or ``(None, map_ordered)``: the
        registry's block function travels with each task."""

    def write_pass(self, source, path, fmt, profile, groups, group_column, chunk_rows, progress=False, *,
                   k=None, verified=None, publisher=None, **extra):
        """``passes.write.write_pass``'s contract."""


class LocalExecutor:
    """This machine: the spill store of one file, the thread pool, the write pass here."""

    in_process = True
    keeps_row_map = None

    def check_source(self, source) -> None:
        return None  # (every input this package opens is read here)

    def store(self, n_blocks, d, folder=None, buffer_bytes=32 << 20, *, rows=None, expand=None):
        return RunStore(n_blocks, d, folder, buffer_bytes, rows=rows, expand=expand)

    partition_pass = staticmethod(partition_pass)
    write_pass = staticmethod(write_pass)

    @staticmethod
    def unit_work(block):
        return block, None  # (aggregate_units' own ordered_map: --threads units at a time)
