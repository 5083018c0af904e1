"""The methods: one registry, one declaration per method.

Each method declares what it publishes, whether it needs k and a sensitive attribute,
and its kernel. Which options take effect with which method is declared with the
options themselves (``engine.options``).

Every method runs through the same passes of ``engine.coordinator``; what they do
for it is its flow's pass-level hooks (``engine.coordinator.FLOWS``, by what the
method publishes), and one unit of blocks is turned into labels by its block
function (``Method.block``):

* **centroids** (the MDAV family, AMA): groups of at least k rows; every QI is replaced
  by its group's mean. Hooks ``engine.methods.centroids``; kernels
  ``engine.kernels.mdav`` and ``engine.kernels.index.kdtree`` (a whole block),
  ``engine.kernels.mdav.leaf`` (leaves of a spilled block).
* **ranges** (maxent, mnqia): classes published as ``<col>_min`` / ``<col>_max``
  ranges (or the class mean) and sets of categories. Hooks ``engine.methods.ranges``;
  block functions ``engine.methods.maxent`` and ``engine.methods.mnqia``; kernels
  ``engine.kernels.ranges.maxent`` and ``engine.kernels.ranges.mnqia``.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class Method:
    name: str
    publishes: str             # "centroids" or "ranges"
    paper: str                 # title and authors
    code: int = -1             # the MDAV-family kernel's method code (engine.kernels.mdav)
    default_gamma: float | None = None
    needs_sa: bool = False
    needs_k: bool = True       # False: k is optional (maxent: classes of any size unless given)
    block: str = "engine.methods.centroids:block_labels"  # the block function: one unit's arrays -> labels

    @property
    def centroids(self) -> bool:
        return self.publishes == "centroids"

    @property
    def block_function(self):
        module, name = self.block.split(":")
        return getattr(importlib.import_module(module), name)


_DF = "Domingo-Ferrer & Torra, \"Ordinal, continuous and heterogeneous k-anonymity through microaggregation\""
_RB = "Rawat & Borah, \"An Improved Variable-Sized Microaggregation Algorithm for Privacy Preservation\""

REGISTRY: dict[str, Method] = {m.name: m for m in (
    Method("mdav", "centroids", _DF, code=0),
    Method("mdav-single", "centroids", _RB, code=1),
    # V-MDAV: 0.2 is its authors' suggestion for scattered data (Census, Tarragona)
    Method("vmdav", "centroids", "Solanas & Martinez-Balleste, \"V-MDAV: a multivariate microaggregation with "
           "variable group size\"", code=2, default_gamma=0.2),
    # IV-MDAV: 1.16 is the setting of its paper's experiments
    Method("ivmdav", "centroids", _RB, code=3, default_gamma=1.16),
    # AMA: MDAV on the key attributes of the MI-distance tree (it selects its own)
    Method("ama", "centroids", "Sun, Wang, Li & Zhang, \"An Approximate Microaggregation Approach for "
           "Microdata Protection\"", code=0),
    Method("maxent", "ranges", "Tsiafoulis, Zorkadis & Pimenidis, \"Maximum Entropy Oriented Anonymization "
           "Algorithm for Privacy Preserving Data Mining\"", needs_sa=True, needs_k=False,
           block="engine.methods.maxent:block_labels"),
    Method("mnqia", "ranges", "Ahmed, Rauf & Rajesh, \"MNQIA: A Method for Multiple Numerical QI Attribute "
           "Anonymization\"",
           block="engine.methods.mnqia:block_labels"),
)}

METHODS = tuple(REGISTRY)


class MethodFlow(Protocol):
    """What a method does for each pass of ``engine.coordinator`` (its pass-level hooks).
    ``engine.methods.centroids.CentroidFlow`` (the MDAV family) and
    ``engine.methods.ranges.RangeFlow`` (maxent, mnqia) implement it."""

    aggregate_pass: str     # the aggregate pass's name in the report
    report_units: bool      # the report's blocks are the units (else the spilled blocks)
    backend: Any            # engine.cluster.DaskBackend (``--scheduler``) or None
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
