"""The methods: one registry, one declaration per method.

Each method declares what it publishes, which optional settings take effect with it,
whether it needs a sensitive attribute, and its kernel. The run configuration
(``engine.options``) checks every setting against this table, so an option a method
does not use stops the run with one line naming the option and the method, in the
CLI and the API alike: nothing is silently ignored.

Every method runs through the same passes of ``engine.coordinator``; what they do
for it is its flow's pass-level hooks (``Method.flow``), and one unit of blocks is
turned into labels by its block function (``Method.block``):

* **centroids** (the MDAV family, AMA): groups of at least k rows; every QI is replaced
  by its group's mean. Hooks ``engine.methods.centroids``; kernels
  ``engine.kernels.mdav`` and ``engine.kernels.kdtree`` (a whole block),
  ``engine.kernels.leaf`` (leaves of a spilled block).
* **ranges** (maxent, mnqia): classes published as ``<col>_min`` / ``<col>_max``
  ranges (or the class mean) and sets of categories. Hooks ``engine.methods.ranges``;
  block functions ``engine.methods.maxent`` and ``engine.methods.mnqia``; kernels
  ``engine.kernels.maxent`` and ``engine.kernels.mnqia``.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

# the optional settings a method may take (API keyword names); the common ones
# (threads, chunk_rows, memory_limit, block_size, tmp_dir, progress, risk, report and
# the CSV options) apply to every method and are not listed
OPTIONS = ("gamma", "group_column", "leaf_size", "polish_rounds", "refine", "refine_rounds", "refine_seconds", "select",
           "select_count", "select_measure", "width", "bins", "seed", "sa", "epsilon", "numeric_output", "ordinal",
           "weights", "scheduler")

# how each option is spelled on the command line, for the one-line refusals
CLI_FLAG = {"refine_seconds": "--refine-budget", "select_measure": "--measure"}

_CENTROID_OPTIONS = frozenset({"group_column", "leaf_size", "polish_rounds", "refine", "refine_rounds", "refine_seconds",
                               "select", "select_count", "select_measure", "width", "bins", "seed",
                               "ordinal", "weights",  # ordinal, weights: mixed-type QIs (engine.mixed)
                               "scheduler"})  # scheduler: engine.cluster (the range methods' flow is not on Dask)


@dataclass(frozen=True)
class Method:
    name: str
    publishes: str             # "centroids" or "ranges"
    paper: str                 # title and authors
    options: frozenset         # the optional settings that take effect with this method
    code: int = -1             # the MDAV-family kernel's method code (engine.kernels.mdav)
    default_gamma: float | None = None
    needs_sa: bool = False
    needs_k: bool = True       # False: k is optional (maxent: classes of any size unless given)
    block: str = "engine.methods.centroids:block_labels"  # the block function: one unit's arrays -> labels

    @property
    def centroids(self) -> bool:
        return self.publishes == "centroids"

    @property
    def flow(self):
        """The class of the method's pass-level hooks (``engine.coordinator``)."""
        if self.centroids:
            from .centroids import CentroidFlow

            return CentroidFlow
        from .ranges import RangeFlow

        return RangeFlow

    @property
    def block_function(self):
        module, name = self.block.split(":")
        return getattr(importlib.import_module(module), name)


_DF = "Domingo-Ferrer & Torra, \"Ordinal, continuous and heterogeneous k-anonymity through microaggregation\""
_RB = "Rawat & Borah, \"An Improved Variable-Sized Microaggregation Algorithm for Privacy Preservation\""

REGISTRY: dict[str, Method] = {m.name: m for m in (
    Method("mdav", "centroids", _DF, _CENTROID_OPTIONS, code=0),
    Method("mdav-single", "centroids", _RB, _CENTROID_OPTIONS, code=1),
    # V-MDAV: 0.2 is its authors' suggestion for scattered data (Census, Tarragona)
    Method("vmdav", "centroids", "Solanas & Martinez-Balleste, \"V-MDAV: a multivariate microaggregation with "
           "variable group size\"", _CENTROID_OPTIONS | {"gamma"}, code=2, default_gamma=0.2),
    # IV-MDAV: 1.16 is the setting of its paper's experiments
    Method("ivmdav", "centroids", _RB, _CENTROID_OPTIONS | {"gamma"}, code=3, default_gamma=1.16),
    # AMA: MDAV on the key attributes of the MI-distance tree (it selects its own)
    Method("ama", "centroids", "Sun, Wang, Li & Zhang, \"An Approximate Microaggregation Approach for "
           "Microdata Protection\"", _CENTROID_OPTIONS - {"select", "select_count", "ordinal", "weights"}, code=0),
    Method("maxent", "ranges", "Tsiafoulis, Zorkadis & Pimenidis, \"Maximum Entropy Oriented Anonymization "
           "Algorithm for Privacy Preserving Data Mining\"",
           frozenset({"group_column", "seed", "sa", "epsilon", "numeric_output"}), needs_sa=True, needs_k=False,
           block="engine.methods.maxent:block_labels"),
    Method("mnqia", "ranges", "Ahmed, Rauf & Rajesh, \"MNQIA: A Method for Multiple Numerical QI Attribute "
           "Anonymization\"", frozenset({"group_column", "numeric_output"}),
           block="engine.methods.mnqia:block_labels"),
)}

METHODS = tuple(REGISTRY)


def flag(option: str) -> str:
    """The option as the command line spells it (``refine_seconds`` -> ``--refine-budget``)."""
    return CLI_FLAG.get(option, "--" + option.replace("_", "-"))


def options_table() -> str:
    """The Markdown table of which option takes effect with which method (docs/usage.md)."""
    lines = ["| option | " + " | ".join(REGISTRY) + " |", "|---|" + "---|" * len(REGISTRY)]
    for o in OPTIONS:
        cells = []
        for m in REGISTRY.values():
            if o not in m.options:
                cells.append("refused")
            elif o == "sa" and m.needs_sa:
                cells.append("required")
            elif o == "seed" and m.centroids:
                cells.append("with `ga`")
            elif o in ("refine_rounds", "refine_seconds"):
                cells.append("with `--refine`")
            elif o == "select_count" or (o in ("select_measure", "width", "bins") and m.name != "ama"):
                cells.append("with `--select`")
            else:
                cells.append("yes")
        lines.append(f"| `{flag(o)}` | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
