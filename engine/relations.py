"""The rules between options, as data: each one entry (the options it relates, the
check, the one-line message), as scikit-learn declares ``_parameter_constraints``.

``options.RunConfig.check_relations`` checks them in turn and refuses the first broken
one with its message; an option's own type and range are its declaration's
(``options.Option``). A new rule is one more entry of ``RELATIONS``, in the place its
priority asks (the first broken rule is the one refused).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from .checks import least_class


@dataclass(frozen=True)
class Relation:
    """One rule between options, as scikit-learn declares ``_parameter_constraints``:
    the options it relates, ``find`` (None when the rule holds, else the values its
    message names) and the one-line ``message`` (``str.format`` of them and ``cfg``)."""

    options: tuple
    find: Callable[..., dict | None]  # of the settings (``options.RunConfig``)
    message: str


def _first(items, test, name: str = "c") -> dict | None:
    """``{name: the first of items that passes test}``, or None."""
    return next(({name: x} for x in items or () if test(x)), None)


def _twice(names, name: str = "dup") -> dict | None:
    """``{name: the first name listed twice}``, or None."""
    names = list(names or ())
    return next(({name: c} for c in names if names.count(c) > 1), None)


def _if(holds: bool, **values) -> dict | None:
    return values if holds else None


def _ordinal_order(cfg) -> dict | None:
    """The first ordinal QI whose order is empty or lists a category twice."""
    for c, order, _ in cfg.ordinal or ():
        if order is not None and not order:
            return {"c": c, "why": "is empty"}
        if order is not None and len(set(order)) != len(order):
            return {"c": c, "why": f"lists {next(v for v in order if order.count(v) > 1)!r} twice"}
    return None


def _dropped_role(cfg) -> dict | None:
    """A dropped column (``--drop``) that the run uses: it must be read."""
    strata = cfg.strata.split(",") if isinstance(cfg.strata, str) else \
        cfg.strata if isinstance(cfg.strata, (list, tuple)) else ()
    strata = [c.strip() if isinstance(c, str) else c for c in strata]
    for col in cfg.drop or ():
        for what, hit in (("a quasi-identifier", col in cfg.qi), ("a stratum (--strata)", col in strata),
                          ("the person column", col == cfg.person_column),
                          ("the household column", col == cfg.household_column),
                          ("the group column", col == cfg.group_column), ("the sensitive attribute", col == cfg.sa),
                          ("a derived column (--derived)", any(col == d for d, _ in cfg.derived or ()))):
            if hit:
                return {"col": col, "what": what}
    return None


def _entity_role(cfg) -> dict | None:
    """A person or household column in another role (docs/households.md)."""
    strata = cfg.strata.split(",") if isinstance(cfg.strata, str) else \
        cfg.strata if isinstance(cfg.strata, (list, tuple)) else ()
    strata = [c.strip() if isinstance(c, str) else c for c in strata]
    for name in ("person_column", "household_column"):
        col = getattr(cfg, name)
        if col is None:
            continue
        for what, hit in (("a quasi-identifier", col in cfg.qi), ("a stratum (--strata)", col in strata),
                          ("the group column", col == cfg.group_column), ("the sensitive attribute", col == cfg.sa),
                          ("a derived column (--derived)", any(col in pair for pair in cfg.derived or ()))):
            if hit:
                return {"label": f"{name} (--{name.replace('_', '-')})", "col": col, "what": what}
    return None


# Every rule between options, in the order they are checked (the first broken one is
# refused). ``k``'s own bounds are its declaration's (``RunConfig.k``: ``K_LEAST``).
RELATIONS = (
    Relation(("qi",), lambda c: _if(not c.qi), "qi is empty: name at least one quasi-identifier column"),
    Relation(("qi",), lambda c: _first(c.qi, lambda q: not isinstance(q, str) or not q),
             "qi has an invalid column name: {c!r}"),
    Relation(("qi",), lambda c: next(({"c": q} for i, q in enumerate(c.qi) if q in c.qi[:i]), None),
             "qi lists column {c!r} twice"),
    Relation(("k", "method"), lambda c: _if(c.k is None and c.spec.needs_k), "method {cfg.method} needs k"),
    Relation(("group_column", "qi"), lambda c: _if(c.group_column in c.qi),
             "group column {cfg.group_column!r} is also a qi column"),
    Relation(("person_column", "household_column", "qi", "strata", "group_column", "sa", "derived"), _entity_role,
             "{label}: column {col!r} is {what}; it identifies records and is published unchanged"),
    Relation(("drop", "qi", "strata", "person_column", "household_column", "group_column", "sa", "derived"),
             _dropped_role, "drop (--drop): column {col!r} is {what}; only a column the run does not use can be "
                            "dropped"),
    Relation(("person_column", "household_column"),
             lambda c: _if(c.person_column is not None and c.person_column == c.household_column),
             "person_column and household_column name the same column {cfg.person_column!r}"),
    Relation(("block_size", "k"),
             lambda c: _if(c.block_size is not None and c.block_size < 2 * least_class(c.k),
                           least=2 * least_class(c.k)),
             "block_size must be a whole number of at least 2k={least}, got {cfg.block_size!r}"),
    Relation(("select_count", "qi"),
             lambda c: _if(c.select_count is not None and c.select_count > len(c.qi), n=len(c.qi)),
             "select_count must be a whole number between 1 and {n} (the qi count), got {cfg.select_count!r}"),
    Relation(("select", "select_count"), lambda c: _if(c.select is not None and c.select_count is None, n=len(c.qi)),
             "select_count (--select-count) is needed with select='emad': a whole number between 1 and {n} "
             "(the qi count)"),
    Relation(("width", "bins"), lambda c: _if(c.width is not None and c.bins is not None),
             "give width or bins, not both"),
    Relation(("sa", "qi"), lambda c: _if(c.sa is not None and c.sa in c.qi),
             "column {cfg.sa!r}: the sensitive attribute is also listed as a quasi-identifier"),
    Relation(("scheduler",), lambda c: _if(isinstance(c.scheduler, str) and not c.scheduler.strip()),
             "scheduler (--scheduler) must be an address such as tcp://HOST:PORT, or 'local'"),
    Relation(("ordinal", "qi"), lambda c: _first([o for o, _, _ in c.ordinal or ()], lambda o: o not in c.qi),
             "ordinal (--ordinal): column {c!r} is not a quasi-identifier"),
    Relation(("ordinal",), _ordinal_order, "ordinal (--ordinal): the order of column {c!r} {why}"),
    Relation(("ordinal", "qi"),
             lambda c: next(({"c": o, "by": by} for o, _, by in c.ordinal or ()
                             if by is not None and (by == o or by in c.qi)), None),
             "ordinal (--ordinal): column {c!r} cannot be ordered by {by!r}, a quasi-identifier"),
    Relation(("ordinal",), lambda c: _twice([o for o, _, _ in c.ordinal or ()]),
             "ordinal (--ordinal) names a column twice"),
    Relation(("nominal", "qi"), lambda c: _first(c.nominal, lambda n: n not in c.qi),
             "nominal (--nominal): column {c!r} is not a quasi-identifier"),
    Relation(("nominal", "ordinal"), lambda c: _first(c.nominal, lambda n: any(n == o for o, _, _ in c.ordinal or ())),
             "column {c!r} is named by both nominal (--nominal) and ordinal (--ordinal)"),
    Relation(("nominal",), lambda c: _twice(c.nominal), "nominal (--nominal) names column {dup!r} twice"),
    Relation(("numeric", "qi"), lambda c: _first(c.numeric, lambda n: n not in c.qi),
             "numeric (--numeric): column {c!r} is not a quasi-identifier"),
    Relation(("numeric", "nominal"), lambda c: _first(c.numeric, lambda n: n in (c.nominal or ())),
             "column {c!r} is named by both nominal (--nominal) and numeric (--numeric)"),
    Relation(("missing", "qi"), lambda c: _first([m for m, _ in c.missing or ()], lambda m: m not in c.qi),
             "missing (--missing): column {c!r} is not a quasi-identifier (other columns pass through unchanged, "
             "their codes with them)"),
    Relation(("missing",), lambda c: _twice([m for m, _ in c.missing or ()]),
             "missing (--missing) names column {dup!r} twice"),
    Relation(("weights", "qi"), lambda c: _first([w for w, _ in c.weights or ()], lambda w: w not in c.qi),
             "weights (--weights): column {c!r} is not a quasi-identifier"),
    Relation(("weights",), lambda c: next(({"c": w, "w": x} for w, x in c.weights or ()
                                           if not math.isfinite(x) or x <= 0), None),
             "weights (--weights): the weight of column {c!r} must be a positive number, got {w!r}"),
    Relation(("weights",), lambda c: _twice([w for w, _ in c.weights or ()]),
             "weights (--weights) names a column twice"),
    Relation(("derived", "qi"), lambda c: next(({"c": d, "q": q} for d, q in c.derived or () if q not in c.qi), None),
             "derived (--derived): column {c!r} follows {q!r}, which is not a quasi-identifier (COL=QI names one "
             "of --qi after '=')"),
    Relation(("derived", "qi"), lambda c: _first([d for d, _ in c.derived or ()], lambda d: d in c.qi),
             "derived (--derived): column {c!r} is a quasi-identifier; a derived column is another column, "
             "recomputed from a quasi-identifier's published value"),
    Relation(("derived", "group_column"),
             lambda c: _first([d for d, _ in c.derived or ()], lambda d: d == c.group_column),
             "derived (--derived): column {c!r} is the group column"),
    Relation(("derived",), lambda c: _twice([d for d, _ in c.derived or ()]),
             "derived (--derived) names column {dup!r} twice"),
)
