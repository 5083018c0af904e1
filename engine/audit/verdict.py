"""The risk verdict: ``--max-risk prosecutor=0.05,dbrl=0.05`` held against the measured
disclosure risk (``engine.audit.risk``), for ``anonymize --risk`` and ``microagg risk``.

Each measure is one figure of the risk result, a probability in [0, 1], and fails when
it is *above* its threshold (equal passes: a threshold of 0.2 admits classes of 5).
A measure given without a value takes its default; ``default`` names every measure that
has one and that the run measures (the individual risks need ``--weight-column``, the
household ones ``--household-column``). The defaults are the line of the European
Medicines Agency for a public release, 0.09 on the probability of re-identification
(EMA/90915/2016, k = 11; docs/guide.md "Where agencies draw the line"), for every
measure that is such a probability. Interval disclosure and the share of records at
risk have no default: interval disclosure is high by nature for microaggregation (a
group's mean lies within 0.05 sd of most of its members' values on a table of many
rows: 90 % and more is common), so a default there would fail most releases; it is
held only to a threshold given.

A threshold is a number in (0, 1]; a measure that does not exist, a threshold outside
(0, 1] or a measure the run cannot measure is one line (``EngineError``, exit 2) before
any work. The result (``evaluate``) is ``{"passed": bool, "measures": [{"measure",
"what", "value", "threshold", "passed"}, ...]}`` in the order given; a failed verdict is
``RiskAboveThreshold`` (exit 1) for ``anonymize``, after the report and the page were
written and nothing at OUTPUT, and exit 1 for ``microagg risk``.

This module imports nothing heavy: the command line reads it to tell the exit code.
"""

from __future__ import annotations

import math
import numbers

from ..errors import EngineError

EMA_THRESHOLD = 0.09  # the EMA's line for a public release (k = 11)

# measure: (the path of its figure in the risk result, its default threshold, how a line names it, what it needs)
MEASURES: dict[str, tuple[tuple[str, ...], float | None, str, str | None]] = {
    "prosecutor": (("prosecutor", "highest_risk"), EMA_THRESHOLD, "prosecutor max", None),
    "journalist": (("journalist", "highest_risk"), EMA_THRESHOLD, "journalist max", None),
    "marketer": (("marketer", "success_rate"), EMA_THRESHOLD, "marketer rate", None),
    "dbrl": (("dbrl",), EMA_THRESHOLD, "dbrl", None),
    "individual": (("individual_risk", "highest_risk"), EMA_THRESHOLD, "individual max", "weights"),
    "global": (("individual_risk", "global_risk_share"), EMA_THRESHOLD, "global risk", "weights"),
    "household": (("household", "prosecutor", "highest_risk"), EMA_THRESHOLD, "household max", "households"),
    "household_dbrl": (("household", "dbrl"), EMA_THRESHOLD, "household dbrl", "households"),
    "household_individual": (("household", "individual", "highest_risk"), EMA_THRESHOLD,
                             "household individual max", "weights+households"),
    "records_at_risk": (("prosecutor", "records_at_risk"), None, "records at risk", None),
    "interval": (("interval_disclosure",), None, "interval disclosure", None),
}
NEEDS = {"weights": "sampling weights (--weight-column COL; weight_column= in the API)",
         "households": "a household column (--household-column COL; household_column= in the API)"}


class RiskAboveThreshold(EngineError):
    """A measure of the disclosure risk is above its ``max_risk`` threshold: the release
    is refused (the CLI prints the line and exits 1; ``verdict`` holds the details)."""

    def __init__(self, verdict: dict):
        self.verdict = verdict
        super().__init__(failure_line(verdict))


def _texts(value) -> list[str]:
    texts = [value] if isinstance(value, str) else value
    try:
        return list(texts)
    except TypeError:
        raise EngineError(f"max_risk (--max-risk): expected MEASURE=THRESHOLD,..., got {value!r}") from None


def parse_max_risk(value, *, weights: bool = False, households: bool = False) -> dict[str, float] | None:
    """``max_risk`` as ``{measure: threshold}`` (None: not given), from a dict, or texts
    ``"prosecutor=0.05,dbrl"`` (one per ``--max-risk``, a list of them); ``default``:
    every measure with a default that the run measures (``weights``: sampling weights
    given; ``households``: a household column given). One line on a bad value."""
    if value is None:
        return None
    pairs: list[tuple[str, object]] = []
    if isinstance(value, dict):
        pairs = list(value.items())
    else:
        for t in _texts(value):
            if not isinstance(t, str):
                raise EngineError(f"max_risk (--max-risk): expected MEASURE=THRESHOLD, got {t!r}")
            for part in t.split(","):
                name, eq, given = part.partition("=")
                pairs.append((name.strip(), given.strip() if eq else None))
    have = {"weights": weights, "households": households}
    out: dict[str, float] = {}
    for name, given in pairs:
        if name == "default" and given is None:
            for m, (_, default, _, need) in MEASURES.items():
                if default is not None and all(have[n] for n in (need or "").split("+") if n):
                    out.setdefault(m, default)
            continue
        if name not in MEASURES:
            raise EngineError(f"max_risk (--max-risk): unknown measure {name!r} (choose from "
                              f"{', '.join(MEASURES)}, or default)")
        out[name] = _threshold(name, given)
        for n in (MEASURES[name][3] or "").split("+"):
            if n and not have[n]:
                raise EngineError(f"max_risk (--max-risk): measure {name!r} needs {NEEDS[n]}")
    if not out:
        raise EngineError("max_risk (--max-risk) names no measure")
    return out


def _threshold(name: str, given) -> float:
    """A measure's threshold: ``given`` (a text or a number) or its default."""
    if given is None:
        default = MEASURES[name][1]
        if default is None:
            raise EngineError(f"max_risk (--max-risk): measure {name!r} has no default threshold; give one "
                              f"({name}=0.5, say)")
        return default
    if isinstance(given, str):
        try:
            number = float(given)
        except ValueError:
            raise EngineError(f"max_risk (--max-risk): the threshold of {name!r} must be a number in (0, 1], "
                              f"got {given!r}") from None
    elif isinstance(given, numbers.Real) and not isinstance(given, bool):
        number = float(given)
    else:
        raise EngineError(f"max_risk (--max-risk): the threshold of {name!r} must be a number in (0, 1], "
                          f"got {given!r}")
    if not (math.isfinite(number) and 0 < number <= 1):
        raise EngineError(f"max_risk (--max-risk): the threshold of {name!r} must be in (0, 1], got {given!r}")
    return number


def _figure(risk: dict, path: tuple[str, ...]) -> float | None:
    value = risk
    for key in path:
        if not isinstance(value, dict) or value.get(key) is None:
            return None
        value = value[key]
    return float(value)


def evaluate(thresholds: dict[str, float], risk: dict) -> dict:
    """The verdict of ``risk`` (a ``RiskResult.to_dict()``) against ``thresholds``
    (``parse_max_risk``): each measure passes when its figure is at most its threshold."""
    rows = []
    for name, threshold in thresholds.items():
        path, _, what, _ = MEASURES[name]
        value = _figure(risk, path)
        if value is None:  # pragma: no cover - parse_max_risk refused what the run cannot measure
            raise EngineError(f"max_risk (--max-risk): measure {name!r} was not measured")
        rows.append({"measure": name, "what": what, "value": value, "threshold": threshold,
                     "passed": bool(value <= threshold)})
    return {"passed": all(r["passed"] for r in rows), "measures": rows}


def failure_line(verdict: dict) -> str:
    """``risk above its threshold: prosecutor max 0.2 > 0.09; dbrl 0.11 > 0.09``."""
    failed = [m for m in verdict["measures"] if not m["passed"]]
    return "risk above its threshold: " + "; ".join(
        f"{m['what']} {m['value']:.4g} > {m['threshold']:.4g}" for m in failed)


def verdict_lines(verdict: dict | None) -> list[str]:
    """The summary's lines of a verdict (none without one)."""
    if not verdict:
        return []
    lines = [f"  verdict: {'PASS' if verdict['passed'] else 'FAIL'} (--max-risk)"]
    for m in verdict["measures"]:
        sign = "<=" if m["passed"] else ">"
        lines.append(f"    {'ok  ' if m['passed'] else 'FAIL'} {m['what']} {m['value']:.4g} {sign} "
                     f"{m['threshold']:.4g}")
    return lines
