"""The run report, and a sampler of the process's peak memory."""

from __future__ import annotations

import json
import math
import resource
import threading
from dataclasses import asdict, dataclass, field

import psutil

from .errors import EngineError, VerificationError
from .version import version


class PeakRSS:
    """The peak resident memory of this process while the block runs: the kernel's
    high-water mark (``ru_maxrss``) when the block raised it, which is exact (a spike
    between two samples included); else (the process peaked higher before the block:
    a long-lived process) the highest of samples taken every ``interval`` seconds."""

    def __init__(self, interval: float = 0.05):
        self.interval = interval
        self.sampled = 0
        self._before = lifetime_peak_rss()
        self._proc = psutil.Process()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    @property
    def peak(self) -> int:
        now = lifetime_peak_rss()
        return now if now > self._before else self.sampled

    def sample(self) -> int:
        try:
            self.sampled = max(self.sampled, self._proc.memory_info().rss)
        except psutil.Error:
            pass
        return self.peak

    def __enter__(self):
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.sample()
        return False


def _first_non_finite(obj, where="") -> str | None:
    if isinstance(obj, float):
        return None if math.isfinite(obj) else f"{where or 'value'} = {obj!r}"
    if isinstance(obj, dict):
        items = obj.items()
    elif isinstance(obj, (list, tuple)):
        items = enumerate(obj)
    else:
        return None
    for k, v in items:
        found = _first_non_finite(v, f"{where}.{k}" if where else str(k))
        if found:
            return found
    return None


def json_text(obj, **kw) -> str:
    """The JSON of every report, profile and result the engine writes. NaN and
    Infinity are not JSON: a non-finite float is refused (a VerificationError naming
    the field: a bug to fix, not a file to write)."""
    try:
        return json.dumps(obj, indent=2, allow_nan=False, **kw)
    except ValueError as exc:
        if "JSON compliant" not in str(exc):
            raise
        plain = json.loads(json.dumps(obj, **kw))
        raise VerificationError(f"the JSON would hold a non-finite number "
                                f"({_first_non_finite(plain) or 'a value'})") from None


def lifetime_peak_rss() -> int:
    """Peak RSS of this process since it started (Linux reports KiB)."""
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


@dataclass
class Report:
    """The report of every run, whatever the method: the same core keys (rows, groups,
    group sizes, SSE, SST, information loss, the self-check, timings, memory, the
    settings, the risk), and what only one method measures under ``metrics``.

    For the range methods (maxent, mnqia) a group is a published class; SSE and SST
    are those of the numeric QIs around their class means, on z-scores (the loss
    had the classes published their means, comparable with the MDAV family), None
    when no QI is numeric; the method's own measures (NCP, LM, entropy) are in
    ``metrics``.

    With mixed-type QIs (``engine.encode.mixed``) ``information_loss_by_qi`` holds each QI's
    loss by its kind (numeric and date: 100 SSE/SST on z-scores; nominal: percent of
    values changed; ordinal: 100 x mean |rank change| / (m - 1)), ``sse`` and ``sst``
    their sums (in row units), ``information_loss_percent`` their mean, and
    ``metrics["mixed"]`` each QI's kind, weight and categories and the loss by kind."""

    rows: int
    groups: int
    min_group_size: int
    max_group_size: int
    sse: float | None
    sst: float | None
    information_loss_percent: float | None
    wall_seconds: float
    peak_rss_bytes: int
    k: int | None
    method: str
    gamma: float | None
    qi: list[str]
    # each QI's kind as the run treated it: numeric, nominal, ordinal, date, boolean (``encode.kinds.shown_kind``)
    qi_kinds: dict | None = None
    passes: dict = field(default_factory=dict)
    group_size_counts: dict = field(default_factory=dict)
    blocks: int = 1
    block_rows_min: int = 0
    block_rows_max: int = 0
    block_size: int = 0
    leaf_size: int | None = None  # None: one exact block, leaves not used
    memory_limit: int | None = None
    refine: dict | None = None
    polish: dict | None = None  # streamed runs: {"rounds", "near", and "seam_rounds", "seam_operations"}
    key_attributes: list | None = None
    projected_information_loss_percent: float | None = None
    # the write pass's self-check: rows written, published classes, smallest class
    verified: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)
    risk: dict | None = None  # engine.audit.risk.RiskResult.to_dict(), with anonymize --risk / risk=True
    settings: dict = field(default_factory=dict)  # RunConfig.settings(): the options as given
    metrics: dict = field(default_factory=dict)  # what only this method measures (maxent: entropy, NCP; ...)
    # per QI, 100 * SSE / SST of that column alone (None: the method does not measure it)
    information_loss_by_qi: dict | None = None
    # with --html / --report: per QI {"edges", "before", "after"} histograms, or (a mixed-type run's nominal and
    # ordinal QIs) {"kind", "categories", "before", "after", "other"} category counts (passes/distributions.py)
    distributions: dict | None = None
    # with --strata: per stratum {"values": {column: value}, "rows", "groups", "information_loss_percent"}
    # (100 SSE / SST of the QIs within the stratum, on the run's z-scores; None: not measured per stratum)
    strata: list | None = None
    input: str | None = None  # what was read (set by the CLI / API: a path, or the kind of frame)
    # the columns published unchanged (set by engine.release from the written output; None: not recorded)
    pass_through: list | None = None
    # the leak guard's checks on them (engine.passes.leak, when it lists them): [{"column", "check", "result", ...}]
    leak_checks: list | None = None
    # the plan the run followed (``engine.planning.Plan.to_dict``: columns' roles, path, least memory, passes)
    plan: dict | None = None
    engine_version: str = field(default_factory=version)

    def to_dict(self) -> dict:
        return asdict(self)

    def write_json(self, path, name) -> None:
        """The report's JSON into ``path`` (a commit group's temporary file); ``name``
        (what the user gave) for the one-line error."""
        text = self.to_json()
        try:
            with open(path, "w") as fh:
                fh.write(text)
        except OSError as exc:
            # start-up: engine.io loads Polars (about 0.2 s), which the report itself does not need
            from .io.tempfiles import os_reason

            raise EngineError(f"cannot write {name}: {os_reason(exc)}") from None

    def to_json(self) -> str:
        return json_text(self.to_dict())

    def _limit_note(self) -> str:
        """`` (limit 512 MiB)``, or a warning when the peak went above it."""
        if self.memory_limit is None:
            return ""
        if self.peak_rss_bytes > self.memory_limit:
            return f" ABOVE the memory limit of {self.memory_limit / 2**20:.0f} MiB"
        return f" (limit {self.memory_limit / 2**20:.0f} MiB)"

    def _strata_line(self) -> str:
        """``strata 5 (region): rows 1,912..2,107, groups 637..702, IL 4.1..5.3 %``."""
        st = self.strata or []
        rows = [s["rows"] for s in st]
        groups = [s["groups"] for s in st]
        ils = [s["information_loss_percent"] for s in st if s.get("information_loss_percent") is not None]
        names = ", ".join(st[0]["values"]) if st else ""
        il = f", IL {min(ils):.4f}..{max(ils):.4f} %" if ils else ""
        return (f"strata {len(st):,} ({names}): rows {min(rows):,}..{max(rows):,}, groups "
                f"{min(groups):,}..{max(groups):,}{il}")

    def _kinds_line(self) -> list:
        """``qi: AGE numeric, SEX nominal, STATEFIP nominal`` (none when not known)."""
        if not self.qi_kinds:
            return []
        return ["qi: " + ", ".join(f"{c} {k}" for c, k in self.qi_kinds.items())]

    def summary(self) -> str:
        by_size = [f"{s}: {c}" for s, c in sorted(self.group_size_counts.items(), key=lambda t: int(t[0]))]
        sizes = ", ".join(by_size if len(by_size) <= 12 else [*by_size[:8], "...", *by_size[-3:]])
        timing = ", ".join(f"{p} {t:.2f}s" for p, t in self.passes.items())
        il = ("information loss: no numeric QI" if self.information_loss_percent is None else
              f"information loss {self.information_loss_percent:.4f} %  (SSE {self.sse:.4f} / SST {self.sst:.4f})")
        mixed = self.metrics.get("mixed") if self.metrics else None
        if mixed is not None and self.information_loss_percent is not None:
            il = (f"information loss {self.information_loss_percent:.4f} %  (mean of the per-QI losses: " +
                  ", ".join(f"{k} {v:.2f} %" for k, v in mixed["information_loss_by_kind"].items()) + ")")
        lines = [
            f"rows {self.rows:,}  groups {self.groups:,}  group size {self.min_group_size}..{self.max_group_size}"
            f"  (k={self.k}, method {self.method}{'' if self.gamma is None else f', gamma {self.gamma}'})",
            il,
            *self._kinds_line(),
            f"wall {self.wall_seconds:.2f} s  peak RSS {self.peak_rss_bytes / 2**20:.0f} MiB{self._limit_note()}"
            f"  [{timing}]",
            f"groups by size: {sizes}",
        ]
        if any(not isinstance(v, (dict, list)) for v in self.metrics.values()):
            lines.append(f"{self.method}: " + ", ".join(
                f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in self.metrics.items()
                if not isinstance(v, (dict, list))))
        if self.verified:
            v = self.verified
            lines.append(f"verified: {v['rows']:,} rows written, {v['classes']:,} published classes, "
                         f"smallest {v['min_class_size']} (k={self.k})")
        if self.blocks > 1:
            lines.append(f"blocks {self.blocks:,} of {self.block_rows_min:,}..{self.block_rows_max:,} rows "
                         f"(block size {self.block_size:,})")
        if self.strata:
            lines.append(self._strata_line())
        if self.key_attributes is not None:
            lines.append(f"key attributes {', '.join(self.key_attributes)}: IL in their projection "
                         f"{self.projected_information_loss_percent:.4f} % (the IL above is over all QIs)")
        if self.polish:
            p = self.polish
            seam = (f"; seams {p['seam_operations']:,} operations in {p['seam_rounds']} rounds"
                    if "seam_rounds" in p else "")
            stop = f", ending at a round gaining < {100 * p['min_gain']:g} % of the SSE" if p.get("min_gain") else ""
            lines.append(f"polish: moves/swaps among {p['near']} nearest groups, at most {p['rounds']} rounds{stop}"
                         f"{seam}")
        if self.refine:
            r = self.refine
            lines.append(f"refine {r['mode']}: SSE {r['sse_before']:.4f} -> {r['sse_after']:.4f}, "
                         f"{r['moves']:,} moves in {r['rounds']} rounds")
        if self.risk:
            r = self.risk
            more = ""
            if r.get("prosecutor"):  # the release's classes (engine.audit.risk)
                ind = r.get("individual_risk")
                more = (f"; prosecutor risk highest {100 * r['prosecutor']['highest_risk']:.3g} %, success rate "
                        f"{100 * r['prosecutor']['success_rate']:.3g} %; individual risk "
                        + (f"{ind['global_risk']:,.4g} expected re-identifications" if ind else
                           "not measured (needs --weight-column)"))
            lines.append(f"disclosure risk: DBRL {100 * r['dbrl']:.4f} %, interval disclosure "
                         f"(p={r['p']:g}) {100 * r['interval_disclosure']:.4f} %{more}")
            hh = r.get("household")
            if hh:  # (engine.audit.risk: a household is re-identified if any member is)
                lines.append(f"household risk ({hh['households']:,} households of {hh['column']!r}): prosecutor "
                             f"highest {100 * hh['prosecutor']['highest_risk']:.3g} %, mean "
                             f"{100 * hh['prosecutor']['success_rate']:.3g} %; DBRL {100 * hh['dbrl']:.3g} %")
            v = r.get("verdict")
            if v:  # (engine.audit.verdict)
                lines.append(f"risk verdict: {'pass' if v['passed'] else 'FAIL'} (" + ", ".join(
                    f"{m['what']} {m['value']:.4g} {'<=' if m['passed'] else '>'} {m['threshold']:.4g}"
                    for m in v["measures"]) + ")")
        return "\n".join(lines)
