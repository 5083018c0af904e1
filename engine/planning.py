"""The plan of a run, before it runs: what will be read, how each column is treated,
which path the run takes, the least memory limit by phase and the passes in order.

As polars' ``LazyFrame.explain()`` shows a query before ``collect()`` runs it, a
``Plan`` shows a run before its hours are committed (``engine.plan``, ``microagg plan``).
The coordinator builds it at the run's boundary (``coordinator.plan``: the
destination checked, the input resolved once, opened, typed and counted, the method's
column checks, the memory budget), so the plan refuses the same bad input in the same
one line. A run is its plan, run: ``coordinator.run`` makes a runnable plan (holding the
resolved state, ``Plan.resolved``) and ``coordinator.run_plan`` runs it, once; the
report embeds that plan (``report["plan"]``). Making a plan reads
what that boundary reads (the footers or a CSV's lines, a CSV's first values for its
types, the categorical QIs' dictionaries and the numeric QIs' missing values, as the
run's own first steps do) and writes nothing.

The least memory limit is ``engine.budget``'s own figure, the one a refusal states:
the budget planned at the smallest limit an option takes (``MIN_LIMIT``), its refusal's
``least``, then planned again at that limit for each phase's share (``Budget.phases``).

The module is named ``planning`` (not ``plan``) so that the package's ``engine.plan``
stays the function: importing a submodule ``engine.plan`` would replace it.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

from .budget import Refusal, mib, plan_budget, stated
from .encode.kinds import range_kinds, shown_kind
from .tuning import POLISH_MAX_ROWS, seam_stage

MIN_LIMIT = 64 << 20  # the least --memory-limit an option takes (``options.RunConfig.memory_limit``)
SHOWN_FILES = 3       # the input files a plan names (then "and N more")


@dataclass(frozen=True)
class Plan:
    """A run's plan: JSON-ready dicts (``to_dict``), printed by ``render``.

    ``input``: the label, format, files, whether on object storage, rows and columns;
    ``output``: the destination and its format (None: a result in memory); ``columns``:
    each input column's name, type, role (qi, sensitive attribute, stratum, derived,
    person id, household id, weight, pass-through; the group column added) and a QI's
    kind; ``path``: in memory or streamed, blocks, polish, seam stage, row-ordered,
    Dask, persons or households; ``memory``: the limit given, the least limit and each
    phase's, the block and chunk sizes; ``passes``: the passes in order."""

    method: str
    k: int | None
    input: dict
    output: dict | None
    columns: list
    path: dict
    memory: dict
    passes: list
    notes: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def holding(self, state) -> "Plan":
        """This plan, holding the run's resolved state (``coordinator.Resolved``: the opened
        input, budget, executor and flow), so that ``coordinator.run_plan`` runs what was
        planned; not a field (not in ``to_dict``, not compared)."""
        object.__setattr__(self, "_resolved", state)
        return self

    @property
    def resolved(self):
        """The run's resolved state (``holding``), or None: a plan that only describes."""
        return getattr(self, "_resolved", None)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"

    @property
    def qi_kinds(self) -> dict:
        """``{QI: kind}`` in the order of ``--qi``."""
        return {c["name"]: c["kind"] for c in self.columns if c["role"] == "qi"}

    def render(self) -> str:
        """The plan as text, one topic a line or a block."""
        i = self.input
        files = ", ".join(i["files"][:SHOWN_FILES]) + (f" and {len(i['files']) - SHOWN_FILES} more"
                                                       if len(i["files"]) > SHOWN_FILES else "")
        out = "a table in memory" if self.output is None else f"{self.output['path']} ({self.output['format']})"
        lines = [f"plan: {i['label']} ({i['format']}{', object storage' if i['remote'] else ''}"
                 f"{': ' + files if files and files != i['label'] else ''}), {i['rows']:,} rows, "
                 f"{i['columns']} columns -> {out}",
                 f"method {self.method}, k {self.k}", "columns:"]
        width = max([len(c["name"]) for c in self.columns] + [4])
        for c in self.columns:
            role = c["role"] + (f" {c['kind']}" if c.get("kind") else "") + \
                (f" from {c['of']}" if c.get("of") else "")
            lines.append(f"  {c['name']:<{width}}  {c['type']:<14} {role}")
        lines.append("path: " + _path_text(self.path))
        m = self.memory
        phases = ", ".join(f"{p} {mib(b)}" for p, b in m["phases"].items())
        lines.append(f"memory: least limit {mib(m['least'])} ({phases}); limit "
                     f"{'none' if m['limit'] is None else mib(m['limit'])}; blocks of {m['block_size']:,} rows, "
                     f"chunks of {m['chunk_rows']:,} rows")
        lines.append("passes: " + " -> ".join(self.passes))
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


def _path_text(p: dict) -> str:
    """``streamed: 50 blocks, polished, seam polish in memory, row -> group map in memory``."""
    parts = [p["mode"] + (f": {p['blocks']:,} blocks" if p["mode"] == "streamed" else "")]
    if p["polish"]:
        parts.append("polished, " + ("seam stage (a second plan crossing the units' faces)" if p["seam_stage"]
                                     else "seam polish in memory"))
    if p["mode"] == "streamed":
        parts.append("published values in row order on disk" if p["row_ordered"] else
                     f"row -> group map {'on disk' if p['labels_on_disk'] else 'in memory'}")
    if p["dask"]:
        parts.append("Dask tasks (--scheduler)")
    if p["entities"]:
        parts.append(f"grouped by {p['entities']} in memory (engine.entities)")
    return ", ".join(parts)


def describe(cfg, flow, inp, dest, risk: bool) -> Plan:
    """The plan of a run whose boundary is passed: ``cfg`` (the run's settings, a labelled
    file's declarations added), ``flow`` (the method's hooks, after ``check_input``), ``inp``
    (``coordinator.open_input``'s result), ``dest`` (None: in memory), ``risk``: ``--risk``
    follows the run."""
    base = inp.source.base
    schema = base.schema
    polish = cfg.spec.centroids and not inp.single and cfg.effective_polish_rounds(inp.rows) > 0
    entities = " and ".join(w for w, c in (("person", cfg.person_column), ("household", cfg.household_column)) if c)
    path = {"mode": "in memory" if inp.single else "streamed",
            "blocks": 1 if inp.single else -(-inp.rows // inp.budget.block_size),
            "polish": bool(polish),  # (the seam stage: by rows x encoded QIs, ``tuning.seam_stage``)
            "seam_stage": bool(polish) and seam_stage(inp.rows, len(getattr(flow, "budget_cfg", cfg).qi),
                                                      POLISH_MAX_ROWS),
            "row_ordered": bool(inp.budget.row_ordered and not inp.single and not entities),
            "labels_on_disk": bool(inp.budget.labels_on_disk), "dask": cfg.scheduler is not None,
            "entities": entities or None}
    notes = []
    if cfg.scheduler is not None:
        notes.append("planned without connecting to the scheduler: the workers' memory is not planned")
    if entities:
        notes.append(f"the {entities} grouping holds its key, QI and strata columns in memory: not in the least limit")
    return Plan(
        method=cfg.method, k=cfg.k,
        input={"label": base.label, "format": base.kind, "files": list(base.paths),
               "remote": bool(getattr(inp.located, "remote", False)), "rows": int(inp.rows),
               "columns": len(schema)},
        output=None if dest is None else {"path": str(dest), "format": inp.fmt},
        columns=_columns(cfg, flow, schema),
        path=path, memory=_memory(cfg, flow, inp),
        passes=_passes(cfg, flow, inp, path, risk, dest), notes=notes)


def _columns(cfg, flow, schema) -> list:
    """Each input column's role (and a QI's kind), in the input's order; the group column added."""
    mixed = getattr(flow, "mixed", None)
    if not cfg.spec.centroids:
        kinds = range_kinds(cfg.qi, schema)
    elif mixed is not None:
        kinds = {q.name: shown_kind(q.kind, q.dtype) for q in mixed.qis}
    else:
        kinds = dict.fromkeys(cfg.qi, "numeric")
    derived = dict(cfg.derived or ())
    strata = set(_strata(cfg))
    roles = {cfg.sa: "sensitive attribute", cfg.person_column: "person id", cfg.household_column: "household id",
             cfg.weight_column: "weight"}
    out = []
    for name, dtype in schema.items():
        row = {"name": name, "type": str(dtype), "role": "pass-through", "kind": None, "of": None}
        if name in kinds:
            row.update(role="qi", kind=kinds[name])
        elif name in derived:
            row.update(role="derived", of=derived[name])
        elif name in strata:
            row["role"] = "stratum"
        elif name in roles and name is not None:
            row["role"] = roles[name]
        out.append(row)
    if cfg.group_column is not None:
        out.append({"name": cfg.group_column, "type": "Int64", "role": "group column (added)", "kind": None,
                    "of": None})
    return out


def _strata(cfg) -> list:
    """The strata columns' names (``passes.partition.strata_columns``, already checked)."""
    s = cfg.strata
    names = s.split(",") if isinstance(s, str) else list(s) if s is not None else []
    return [c.strip() for c in names]


def _memory(cfg, flow, inp) -> dict:
    """The least memory limit, each phase's (``budget.plan``'s phases at that limit), and
    the sizes the run will use."""
    planned = dataclasses.replace(flow.budget_cfg, memory_limit=MIN_LIMIT)
    try:  # (accepted at the least limit an option takes)
        budget = plan_budget(planned, inp.rows, **inp.budget_kw)
        least = stated(budget.least)
    except Refusal as exc:  # the refusal's figure, the one a limit set to it is accepted at
        least, budget = exc.least, None
        for step in (0, 1 << 20, 16 << 20):  # (the process's RSS may have grown a little meanwhile)
            try:
                budget = plan_budget(dataclasses.replace(planned, memory_limit=least + step), inp.rows,
                                     **inp.budget_kw)
                break
            except Refusal:
                continue
    phases = dict(budget.phases) if budget is not None else {}
    return {"limit": cfg.memory_limit, "least": least,
            "phases": phases, "block_size": int(inp.budget.block_size), "chunk_rows": int(inp.budget.chunk_rows),
            "threads": int(inp.threads)}


def _passes(cfg, flow, inp, path: dict, risk: bool, dest) -> list:
    """The passes in order, as the coordinator runs them (its ``passes`` timings' names)."""
    out = ["open"]
    if inp.source.base.kind == "csv" and inp.fmt != "csv":  # (a CSV's types from the whole file)
        out.append("infer")
    if getattr(flow, "mixed", None) is not None or (not cfg.spec.centroids and (cfg.sa is not None or any(
            c["role"] == "qi" and c["kind"] != "numeric" for c in _columns(cfg, flow, inp.source.base.schema)))):
        out.append("dictionary")
    out.append("leak")
    if cfg.strata is not None:
        out.append("strata")
    if path["entities"]:
        out.append(f"{path['entities']} groups")
    sampled = (not inp.single and cfg.strata is None and inp.source.base.kind == "parquet"
               and cfg.spec.centroids)
    out.append("sample" if sampled else "profile")
    if cfg.selects:
        out.append("select")
    out.append("load" if inp.single else "partition")
    if not path["entities"]:
        out.append(flow.aggregate_pass)
        if path["polish"]:
            out.append("polish")
            if path["seam_stage"]:
                out.append("seam stage")
        if cfg.refine is not None:
            out.append("refine")
    out += ["stitch", "write"]
    if risk and dest is not None:
        out.append("risk")
    return out
