"""Slow, obviously correct references of the class-based disclosure risks
(``engine.audit.risk``, ``engine.kernels.risk``): record by record, in plain Python.

A record's class is the tuple of its published key values (``None`` for a missing
value, which is a value of its own); the formulas are written as their sources give
them: ARX's ``RiskModelSampleSummary`` (prosecutor, journalist, marketer) and
sdcMicro's ``indivRisk(method="approx")`` as ``measure_risk`` calls it."""

from __future__ import annotations

import math
from decimal import Decimal, getcontext


def classes(keys: list[tuple]) -> dict:
    """Key tuple -> the row indices of its records."""
    out: dict = {}
    for i, key in enumerate(keys):
        out.setdefault(key, []).append(i)
    return out


def sdcmicro_risk(f: int, F: float) -> float:
    """sdcMicro's indivRisk, method "approx" (R/indivRisk.R), with pk = fk / Fk."""
    if f == F:
        return 1.0 / f
    p = f / F
    if f == 1:
        return (p / (1 - p)) * math.log(1 / p)
    if f == 2:
        return (p / (1 - p)) - ((p / (1 - p)) ** 2) * math.log(1 / p)
    return p / (f - (1 - p))


def sdcmicro_risk_exact(f: int, F: float, digits: int = 60) -> float:
    """The same with 60-digit decimals (no cancellation), for a class near ``F = f``."""
    getcontext().prec = digits
    f_, F_ = Decimal(f), Decimal(F)
    if f_ == F_:
        return float(1 / f_)
    p = f_ / F_
    a = p / (1 - p)
    if f == 1:
        return float(a * (1 / p).ln())
    if f == 2:
        return float(a - a * a * (1 / p).ln())
    return float(p / (f_ - (1 - p)))


def measures(keys: list[tuple], weights: list[float] | None = None, threshold: float = 0.2) -> dict:
    """The class-based fields of ``RiskResult``, record by record."""
    n = len(keys)
    cls = classes(keys)
    f = {k: len(rows) for k, rows in cls.items()}
    # a class's population is at least its records (a record of weight 0 still stands for itself)
    F = {k: (max(sum(weights[i] for i in rows), len(rows)) if weights is not None else float(len(rows)))
         for k, rows in cls.items()}
    # per record: its class's sizes
    rec_f = [f[k] for k in keys]
    rec_F = [F[k] for k in keys]
    prosecutor = {"highest_risk": max(1 / x for x in rec_f),
                  "success_rate": sum(1 / x for x in rec_f) / n,
                  "records_at_risk": sum(1 for x in rec_f if 1 / x > threshold) / n}
    marketer = sum(f[k] / F[k] for k in cls) / n
    journalist = {"highest_risk": max(1 / x for x in rec_F),
                  "success_rate": max(len(cls) / sum(F.values()), marketer),
                  "records_at_risk": sum(1 for x in rec_F if 1 / x > threshold) / n}
    out = {"classes": len(cls), "prosecutor": prosecutor, "journalist": journalist,
           "marketer": {"success_rate": marketer}, "individual_risk": None}
    if weights is not None:
        r = [sdcmicro_risk(f[k], F[k]) for k in keys]
        out["individual_risk"] = {"global_risk": sum(r), "global_risk_share": sum(r) / n, "highest_risk": max(r),
                                  "records_at_risk": sum(1 for x in r if x > threshold) / n}
        out["population"] = sum(F.values())
    return out


def households(keys: list[tuple], homes: list, credit: list[float], weights: list[float] | None = None,
               threshold: float = 0.2) -> dict:
    """The household risks, household by household: a household is re-identified if any
    member is, ``1 - prod(1 - r_i)`` over its members (sdcMicro's hierarchical risk), for
    the prosecutor's ``r = 1 / f``, the DBRL credit of each record and (with weights)
    sdcMicro's individual risk; at risk: a member's risk above ``threshold``."""
    cls = classes(keys)
    f = {k: len(rows) for k, rows in cls.items()}
    F = {k: max(sum(weights[i] for i in rows), len(rows)) for k, rows in cls.items()} if weights else None
    members: dict = {}
    for i, h in enumerate(homes):
        members.setdefault(h, []).append(i)

    def hier(risks):
        q = 1.0
        for r in risks:
            q *= 1.0 - r
        return 1.0 - q

    pro = [hier(1 / f[keys[i]] for i in rows) for rows in members.values()]
    out = {"households": len(members),
           "prosecutor": {"highest_risk": max(pro), "success_rate": sum(pro) / len(pro),
                          "households_at_risk": sum(any(1 / f[keys[i]] > threshold for i in rows)
                                                    for rows in members.values()) / len(members)},
           "dbrl": sum(hier(credit[i] for i in rows) for rows in members.values()) / len(members),
           "individual": None}
    if F is not None:
        ind = [hier(sdcmicro_risk(f[keys[i]], F[keys[i]]) for i in rows) for rows in members.values()]
        out["individual"] = {"highest_risk": max(ind), "expected": sum(ind), "share": sum(ind) / len(ind),
                             "households_at_risk": sum(any(sdcmicro_risk(f[keys[i]], F[keys[i]]) > threshold
                                                           for i in rows) for rows in members.values())
                             / len(members)}
    return out
