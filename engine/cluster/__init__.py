"""The streamed passes as Dask tasks: ``--scheduler tcp://HOST:PORT`` or ``local``.

The coordinator chooses the executor (``coordinator.open_executor``: ``open_executor``)
and hands it to the method's flow (``methods.centroids.CentroidFlow``): the same passes
run with a ``backend.DaskExecutor`` in place of ``passes.executor.LocalExecutor`` (the
thread pool and the spill store; both implement ``passes.executor.Executor``)
(docs/notes/dask.md). No folder is shared by the client and the workers: data moves
through Dask, each task's bounded by a share of a worker's memory.

* partition (``blocks``): one task per range of whole row groups routes its rows with
  the client's plan into a private ``BlockStore`` on its worker's own disk, then
  returns its blocks packed in slabs (consecutive blocks), each slab a Dask result of
  its own; meanwhile the client measures the columns (pass 1's sums run in row order,
  so the profile is the single-machine run's to the bit);
* aggregate: one task per slab runs ``passes.aggregate.aggregate_unit`` on the units
  that begin in it, Dask giving it the slabs its units lie in, from every part (a
  block's rows in input order, as a local run reads them); results in unit order;
* stitch, seam polish, refinement: on the client (``blocks.PartStore`` gathers the
  slabs it reads);
* write (``write``): one task per range of row groups receives its rows' group ids
  and the published values of those groups only, writes a Parquet part with the
  write pass on its worker's disk and returns its bytes; the client places the parts,
  in order, into OUTPUT (``atomic_output``, as a local run).

Modules: ``connect`` (the scheduler's address checked, the Client), ``backend`` (the
run's tasks), ``ranges`` (the input's ranges of row groups), ``blocks`` (the slabs),
``write`` (the write tasks and the parts), ``shipping`` (what travels, made lean).
"""

from __future__ import annotations

import contextlib
import logging
import os

from ..errors import EngineError
from ..io.sink import output_format
from ..io.tempfiles import private_dir
from . import connect
from .backend import DaskExecutor

log = logging.getLogger("engine")


def open_executor(cfg, folder, cleanup: contextlib.ExitStack, on_event=None) -> DaskExecutor:
    """Connect to ``cfg.scheduler`` and make the run's folder in ``folder``, the client's
    own (removed, and the client closed, when ``cleanup`` closes). ``on_event``: see
    ``DaskExecutor`` (tests pass it in, through ``coordinator.run``'s ``on_event``)."""
    client, closer = connect.connect(cfg.scheduler, cfg.memory_limit)
    cleanup.enter_context(closer)
    run_dir = os.path.abspath(private_dir(folder))
    backend = DaskExecutor(client, run_dir, cfg.memory_limit, on_event)
    cleanup.callback(backend.close)
    backend.wait_for_workers()
    log.info("Dask: %d workers, the client's folder %s", backend.workers(), run_dir)
    return backend


class PlannedDask:
    """The executor of a plan (``coordinator.plan``): a ``--scheduler`` run's checks and
    what the flow plans by (``keeps_row_map``), no cluster connected; it runs nothing
    (a plan that is run connects: ``coordinator.run``)."""

    in_process = DaskExecutor.in_process
    keeps_row_map = DaskExecutor.keeps_row_map
    check_source = staticmethod(DaskExecutor.check_source)


def check_output(dest) -> None:
    if dest is None or output_format(dest) not in ("parquet", "folder"):
        raise EngineError(f"scheduler (--scheduler) writes a Parquet OUTPUT (.parquet, or a folder of part files: "
                          f"a name ending in '/'), not {dest}")
