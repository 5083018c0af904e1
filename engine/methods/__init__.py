"""The methods' flows: what each method does for every pass of ``engine.coordinator``.

The registry of methods (``Method``, ``REGISTRY``, ``METHODS``: what each publishes,
whether it needs k or a sensitive attribute, its block function) is
``engine.registry``, below ``engine.options``; the flows are here, above the options,
the memory budget and the passes (``docs/architecture.md``, the layer order).

Every method runs through the same passes of ``engine.coordinator``; what they do
for it is its flow's pass-level hooks (``engine.coordinator.FLOWS``, by what the
method publishes, the ``MethodFlow`` protocol below), and one unit of blocks is
turned into labels by its block function (``Method.block``):

* **centroids** (the MDAV family, AMA): hooks ``engine.methods.centroids``
  (``CentroidFlow``), block function ``centroids.block_labels``.
* **ranges** (maxent, mnqia): hooks ``engine.methods.ranges`` (``RangeFlow``), block
  functions ``engine.methods.maxent`` and ``engine.methods.mnqia``.
"""

from __future__ import annotations

from typing import Any, Protocol


class MethodFlow(Protocol):
    """What a method does for each pass of ``engine.coordinator`` (its pass-level hooks).
    ``engine.methods.centroids.CentroidFlow`` (the MDAV family) and
    ``engine.methods.ranges.RangeFlow`` (maxent, mnqia) implement it."""

    aggregate_pass: str     # the aggregate pass's name in the report
    report_units: bool      # the report's blocks are the units (else the spilled blocks)
    executor: Any           # passes.executor.Executor: this machine's, or engine.cluster.DaskExecutor
    budget_cfg: Any         # the settings the memory budget is planned with
    dist: Any               # passes.distributions.Distributions, or None (no histograms counted)
    metrics: dict           # what only this method reports

    def check_input(self, source, fmt, dest, passes): ...
    def check_rows(self, source, rows) -> None: ...
    def budget_args(self, source, rows) -> dict: ...
    def profile(self, inp, passes): ...
    def new_store(self, n_blocks, folder, rows, budget): ...
    def new_moments(self, columns): ...
    def units(self, store, budget, profile) -> list: ...
    def aggregate(self, blocks, labels, threads, bar) -> int: ...
    def after_aggregate(self, blocks, labels, n_groups, passes) -> int: ...
    def one_class(self): ...
    def stitch(self, blocks, labels, n_groups, bar): ...
    def check_stitched(self, stitched) -> None: ...
    def distributions_after(self, stitched): ...
    def write(self, source, path, fmt, stitched, chunk_rows, profile): ...
    def report_fields(self, inp, blocks, stitched, written) -> dict: ...
