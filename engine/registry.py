"""The method registry: one declaration per method, the lowest unit that names them.

Each method declares what it publishes, whether it needs k and a sensitive attribute,
its paper, and its block function (``Method.block``, named by a string and imported
when first called, so this module imports nothing of the package). Which options
take effect with which method is declared with the options themselves
(``engine.options``, which imports this registry); how a method runs through the
passes is its flow's hooks (``engine.methods``: ``MethodFlow``, ``CentroidFlow``,
``RangeFlow``), above the options and the memory budget.

* **centroids** (the MDAV family, AMA): groups of at least k rows; every QI is replaced
  by its group's mean. Block function ``engine.methods.centroids.block_labels``;
  kernels ``engine.kernels.mdav`` and ``engine.kernels.index.kdtree`` (a whole block),
  ``engine.kernels.mdav.leaf`` (leaves of a spilled block).
* **ranges** (maxent, mnqia): classes published as ``<col>_min`` / ``<col>_max``
  ranges (or the class mean) and sets of categories. Block functions
  ``engine.methods.maxent`` and ``engine.methods.mnqia``; kernels
  ``engine.kernels.ranges.maxent`` and ``engine.kernels.ranges.mnqia``.

``engine.METHODS`` is this module's ``METHODS``.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass


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
