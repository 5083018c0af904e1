"""Run settings: one frozen dataclass, validated once at the boundary.

Every parameter's constraint lives in ``_check`` below, so the CLI and the API
reject the same bad values with the same one-line message.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field

from .checks import is_int
from .errors import EngineError
from .methods import METHODS, OPTIONS, REGISTRY, flag
from .tuning import DEFAULT_LEAF_SIZE, DEFAULT_POLISH_ROUNDS, POLISH_MAX_ROWS, polish_leaf_size

SELECT = ("emad",)
SELECT_MEASURES = ("mi-distance", "emim", "chi2", "gaussian")
REFINE_MODES = ("local", "ga")
NUMERIC_OUTPUTS = ("range", "mean")
_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "kib": 1 << 10, "m": 1000**2, "mb": 1000**2, "mib": 1 << 20,
          "g": 1000**3, "gb": 1000**3, "gib": 1 << 30, "t": 1000**4, "tb": 1000**4, "tib": 1 << 40}


def parse_bytes(value) -> int:
    """``"1GiB"``, ``"512MiB"``, ``"2GB"``, ``"1.5G"`` or a whole number of bytes -> bytes."""
    if is_int(value):
        return int(value)
    if isinstance(value, str):
        import re

        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", value)
        if m and m.group(2).lower() in _UNITS:
            return int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    raise EngineError(f"memory limit must be a size such as 512MiB or 2GiB, got {value!r}")
METHOD_CODES = {m.name: m.code for m in REGISTRY.values() if m.centroids}
DEFAULT_GAMMA = {m.name: m.default_gamma for m in REGISTRY.values() if m.default_gamma is not None}


@dataclass(frozen=True)
class RunConfig:
    """Validated settings of one anonymization run."""

    qi: tuple[str, ...]
    k: int | None
    method: str = "mdav"
    gamma: float | None = None
    group_column: str | None = None
    chunk_rows: int = 100_000
    threads: int | None = None
    progress: bool = False
    memory_limit: int | None = None
    block_size: int | None = None
    leaf_size: int | None = None
    refine: str | None = None
    refine_rounds: int | None = None
    refine_seconds: float | None = None
    polish_rounds: int | None = None
    seed: int | None = None  # None: not given (randomized steps then use 0)
    select: str | None = None
    select_count: int | None = None
    select_measure: str | None = None
    width: float | None = None
    bins: int | None = None
    csv: object = None  # engine.io.source.CsvOptions: how a CSV input is read (None: defaults)
    sa: str | None = None
    epsilon: float | None = None
    numeric_output: str | None = None  # ranges: "range" (default) or "mean"
    # mixed-type QIs (engine.mixed): ((column, order or None, by-column or None), ...) and
    # ((column, weight), ...), normalized by ``make`` (``parse_ordinal``, ``parse_weights``)
    ordinal: tuple | None = None
    weights: tuple | None = None
    scheduler: object = None  # a Dask scheduler's address, "local", or a distributed.Client (engine.cluster)
    extra: dict = field(default_factory=dict, compare=False)

    @property
    def spec(self):
        """The method's declaration (``engine.methods.Method``)."""
        return REGISTRY[self.method]

    @property
    def effective_seed(self) -> int:
        return 0 if self.seed is None else self.seed

    @property
    def effective_numeric_output(self) -> str:
        return self.numeric_output or "range"

    def settings(self) -> dict:
        """The settings as given (None: not given, its default applies), for the report."""
        out = {}
        for name in ("method", "k", "qi", *OPTIONS, "chunk_rows", "threads", "memory_limit", "block_size"):
            v = getattr(self, name)
            if name == "scheduler" and v is not None and not isinstance(v, str):
                v = f"client of {getattr(v, 'scheduler', None) and v.scheduler.address}"
            out[name] = list(v) if isinstance(v, tuple) else v
        return out

    @property
    def method_code(self) -> int:
        return METHOD_CODES[self.method]

    @property
    def selects(self) -> bool:
        return self.method == "ama" or self.select is not None

    @property
    def measure(self) -> str:
        if self.select_measure is not None:
            return self.select_measure
        return "mi-distance" if self.method == "ama" else "emim"

    @property
    def effective_gamma(self) -> float:
        if self.gamma is not None:
            return float(self.gamma)
        return DEFAULT_GAMMA.get(self.method, 0.0)

    def effective_polish_rounds(self, rows: int) -> int:
        """Polish rounds of a streamed run of ``rows`` rows (0: none). V-MDAV (whose
        tail groups may exceed 2k-1 rows) is not polished by default, nor a run under
        a memory limit: the budget (``engine.budget``) does not plan the polish's
        units yet, so the limit keeps the fast path unless ``polish_rounds`` asks."""
        if self.polish_rounds is not None:
            return self.polish_rounds
        if self.method == "vmdav" or rows > POLISH_MAX_ROWS or self.memory_limit is not None:
            return 0
        return DEFAULT_POLISH_ROUNDS

    def effective_leaf_size(self, rows: int = 0) -> int:
        if self.leaf_size is not None:
            return self.leaf_size
        return polish_leaf_size(self.k) if self.effective_polish_rounds(rows) > 0 else DEFAULT_LEAF_SIZE

    @classmethod
    def make(cls, *, qi, k, method="mdav", gamma=None, group_column=None, chunk_rows=100_000,
             threads=None, progress=False, memory_limit=None, block_size=None, leaf_size=None, refine=None,
             refine_rounds=None, refine_seconds=None, polish_rounds=None, seed=None,
             select=None, select_count=None,
             select_measure=None, width=None, bins=None, csv=None, sa=None, epsilon=None,
             numeric_output=None, ordinal=None, weights=None, scheduler=None) -> "RunConfig":
        if isinstance(qi, str):
            qi = [c.strip() for c in qi.split(",")] if qi.strip() else []
        try:
            qi = tuple(qi)
        except TypeError:
            raise EngineError("qi must be a list of column names") from None
        if memory_limit is not None:
            memory_limit = parse_bytes(memory_limit)
        ordinal = parse_ordinal(ordinal)
        weights = parse_weights(weights)
        cfg = cls(qi=qi, k=k, method=method, gamma=gamma, group_column=group_column,
                  chunk_rows=chunk_rows, threads=threads, progress=progress, memory_limit=memory_limit,
                  block_size=block_size, leaf_size=leaf_size, refine=refine, refine_rounds=refine_rounds,
                  refine_seconds=refine_seconds, polish_rounds=polish_rounds, seed=seed,
                  select=select, select_count=select_count,
                  select_measure=select_measure, width=width, bins=bins, csv=csv, sa=sa, epsilon=epsilon,
                  numeric_output=numeric_output, ordinal=ordinal, weights=weights, scheduler=scheduler)
        cfg._check()
        return cfg

    def _check(self) -> None:
        if not self.qi:
            raise EngineError("qi is empty: name at least one quasi-identifier column")
        for c in self.qi:
            if not isinstance(c, str) or not c:
                raise EngineError(f"qi has an invalid column name: {c!r}")
        seen = set()
        for c in self.qi:
            if c in seen:
                raise EngineError(f"qi lists column {c!r} twice")
            seen.add(c)
        if self.method not in METHODS:
            raise EngineError(f"unknown method {self.method!r} (choose from {', '.join(METHODS)})")
        spec = self.spec
        if self.k is None and spec.needs_k:
            raise EngineError(f"method {self.method} needs k")
        if self.k is not None and not is_int(self.k):
            raise EngineError(f"k must be a whole number, got {self.k!r}")
        if self.k is not None and self.k < 2:
            raise EngineError(f"k must be at least 2, got {self.k}")
        self._check_applies(spec)
        if self.gamma is not None:
            if isinstance(self.gamma, bool) or not isinstance(self.gamma, numbers.Real) \
                    or not math.isfinite(self.gamma) or self.gamma <= 0:
                raise EngineError(f"gamma must be a positive number, got {self.gamma!r}")
        if self.group_column is not None and (not isinstance(self.group_column, str) or not self.group_column):
            raise EngineError(f"group column name must be a non-empty string, got {self.group_column!r}")
        if self.group_column in self.qi:
            raise EngineError(f"group column {self.group_column!r} is also a qi column")
        if not is_int(self.chunk_rows) or self.chunk_rows < 1:
            raise EngineError(f"chunk_rows must be a positive whole number, got {self.chunk_rows!r}")
        if self.threads is not None and (not is_int(self.threads) or self.threads < 1):
            raise EngineError(f"threads must be a positive whole number, got {self.threads!r}")
        if self.memory_limit is not None and self.memory_limit < (64 << 20):
            raise EngineError(f"memory limit must be at least 64MiB, got {self.memory_limit} bytes")
        least = 2 * max(2, self.k or 0)  # maxent without k: classes of at least 2 rows
        if self.block_size is not None and (not is_int(self.block_size) or self.block_size < least):
            raise EngineError(f"block size must be a whole number of at least 2k={least}, "
                              f"got {self.block_size!r}")
        if self.leaf_size is not None and (not is_int(self.leaf_size) or self.leaf_size < 0):
            raise EngineError(f"leaf size must be a whole number >= 0 (0: exact MDAV on each block), "
                              f"got {self.leaf_size!r}")
        if self.refine is not None and self.refine not in REFINE_MODES:
            raise EngineError(f"unknown refine mode {self.refine!r} (choose from {', '.join(REFINE_MODES)})")
        if self.refine_rounds is not None and (not is_int(self.refine_rounds) or self.refine_rounds < 1):
            raise EngineError(f"refine rounds must be a positive whole number, got {self.refine_rounds!r}")
        if self.refine_seconds is not None and (isinstance(self.refine_seconds, bool)
                                                or not isinstance(self.refine_seconds, numbers.Real)
                                                or not self.refine_seconds > 0):
            raise EngineError(f"refine budget must be a positive number of seconds, got {self.refine_seconds!r}")
        if self.polish_rounds is not None and (not is_int(self.polish_rounds) or self.polish_rounds < 0):
            raise EngineError(f"polish rounds must be a whole number >= 0 (0: no polish), got {self.polish_rounds!r}")
        if self.select is not None and self.select not in SELECT:
            raise EngineError(f"unknown attribute selection {self.select!r} (choose from {', '.join(SELECT)})")
        if self.select is not None and (not is_int(self.select_count) or not 1 <= self.select_count <= len(self.qi)):
            raise EngineError(f"select count must be a whole number between 1 and {len(self.qi)} (the qi count), "
                              f"got {self.select_count!r}")
        if self.select_measure is not None and self.select_measure not in SELECT_MEASURES:
            raise EngineError(f"unknown dependence measure {self.select_measure!r} "
                              f"(choose from {', '.join(SELECT_MEASURES)})")
        if self.width is not None and self.bins is not None:
            raise EngineError("give width or bins, not both")
        if self.seed is not None and (not is_int(self.seed) or self.seed < 0):
            raise EngineError(f"seed must be a non-negative whole number, got {self.seed!r}")
        if self.sa is not None:
            if not isinstance(self.sa, str) or not self.sa:
                raise EngineError(f"sa must be a column name, got {self.sa!r}")
            if self.sa in self.qi:
                raise EngineError(f"column {self.sa!r}: the sensitive attribute is also listed as a quasi-identifier")
        if self.epsilon is not None and (isinstance(self.epsilon, bool) or not isinstance(self.epsilon, numbers.Real)
                                         or not math.isfinite(self.epsilon) or self.epsilon < 0):
            raise EngineError(f"epsilon must be a non-negative number of bits, got {self.epsilon!r}")
        if self.scheduler is not None and isinstance(self.scheduler, str) and not self.scheduler.strip():
            raise EngineError("scheduler (--scheduler) must be an address such as tcp://HOST:PORT, or 'local'")
        if self.scheduler is not None and (self.ordinal or self.weights):
            raise EngineError(f"{'ordinal (--ordinal)' if self.ordinal else 'weights (--weights)'}: mixed-type "
                              "quasi-identifiers run on one machine only; omit --scheduler")
        if self.numeric_output is not None and self.numeric_output not in NUMERIC_OUTPUTS:
            raise EngineError(f"numeric_output: 'range' or 'mean', got {self.numeric_output!r}")
        for c, order, by in self.ordinal or ():
            if c not in self.qi:
                raise EngineError(f"ordinal (--ordinal): column {c!r} is not a quasi-identifier")
            if order is not None and not order:
                raise EngineError(f"ordinal (--ordinal): the order of column {c!r} is empty")
            if order is not None and len(set(order)) != len(order):
                dup = next(v for v in order if order.count(v) > 1)
                raise EngineError(f"ordinal (--ordinal): the order of column {c!r} lists {dup!r} twice")
            if by is not None and (by == c or by in self.qi):
                raise EngineError(f"ordinal (--ordinal): column {c!r} cannot be ordered by {by!r}, a quasi-identifier")
        if self.ordinal and len({c for c, _, _ in self.ordinal}) != len(self.ordinal):
            raise EngineError("ordinal (--ordinal) names a column twice")
        for c, w in self.weights or ():
            if c not in self.qi:
                raise EngineError(f"weights (--weights): column {c!r} is not a quasi-identifier")
            if not math.isfinite(w) or w <= 0:
                raise EngineError(f"weights (--weights): the weight of column {c!r} must be a positive number, got {w!r}")
        if self.weights and len({c for c, _ in self.weights}) != len(self.weights):
            raise EngineError("weights (--weights) names a column twice")

    def _check_applies(self, spec) -> None:
        """Every option given takes effect with this method, or the run stops here,
        naming the option and the method (``engine.methods.REGISTRY``)."""
        given = [o for o in OPTIONS if getattr(self, o) is not None]
        for o in given:
            if o not in spec.options:
                raise EngineError(f"{_name(o)} does not apply to method {self.method}{_hint(o, self.method)}")
        if spec.needs_sa and self.sa is None:
            raise EngineError(f"method {self.method} needs a sensitive attribute: sa (--sa COLUMN)")
        # options that take effect only with another one
        needs = {"refine_rounds": ("refine", self.refine is not None, "refine (--refine local|ga)"),
                 "refine_seconds": ("refine", self.refine is not None, "refine (--refine local|ga)"),
                 "select_count": ("select", self.select is not None, "select='emad' (--select emad)"),
                 "select_measure": ("select", self.selects, "method ama or select='emad'"),
                 "width": ("select", self.selects, "method ama or select='emad'"),
                 "bins": ("select", self.selects, "method ama or select='emad'")}
        for o in given:
            if o in needs and not needs[o][1]:
                raise EngineError(f"{_name(o)} takes effect only with {needs[o][2]}")
        if self.seed is not None and spec.centroids and self.refine != "ga":
            raise EngineError(f"{_name('seed')} takes effect only with refine='ga' (--refine ga) for method "
                              f"{self.method}: its other steps are deterministic")


def parse_ordinal(value) -> tuple | None:
    """``ordinal`` as ``((column, order or None, by-column or None), ...)``.

    Accepted: a dict ``{column: [categories in order]}`` (None: an Enum column's own
    order; ``"@other"``: categories ordered by the numeric column ``other``), or the
    command line's texts ``"column=cat1,cat2,..."``, ``"column"``, ``"column=@other"``
    (one per ``--ordinal``; a list of them, or one string)."""
    if value is None:
        return None
    if isinstance(value, tuple) and all(isinstance(v, tuple) and len(v) == 3 for v in value):
        return value  # already normalized (RunConfig.ordinal)
    items = []
    if isinstance(value, dict):
        pairs = list(value.items())
    else:
        texts = [value] if isinstance(value, str) else list(value)
        pairs = []
        for t in texts:
            if not isinstance(t, str):
                raise EngineError(f"ordinal (--ordinal): expected COLUMN=CAT1,CAT2,... got {t!r}")
            name, eq, rest = t.partition("=")
            pairs.append((name.strip(), (rest if rest.startswith("@") else
                                         [v for v in rest.split(",")] if rest.strip() else []) if eq else None))
    for c, order in pairs:
        if not isinstance(c, str) or not c:
            raise EngineError(f"ordinal (--ordinal): invalid column name {c!r}")
        if order is None:
            items.append((c, None, None))
        elif isinstance(order, str) and order.startswith("@"):
            items.append((c, None, order[1:].strip()))
        elif isinstance(order, str):
            raise EngineError(f"ordinal (--ordinal): the order of column {c!r} must be a list of categories")
        else:
            items.append((c, tuple(str(v) if not isinstance(v, (str, bool)) else v for v in order), None))
    return tuple(items)


def parse_weights(value) -> tuple | None:
    """``weights`` as ``((column, weight), ...)`` from a dict or the text ``"age=2,sex=1"``."""
    if value is None:
        return None
    if isinstance(value, str):
        pairs = []
        for part in value.split(","):
            name, eq, w = part.partition("=")
            try:
                pairs.append((name.strip(), float(w)))
            except ValueError:
                raise EngineError(f"weights (--weights): expected COLUMN=NUMBER,..., got {part!r}") from None
            if not eq:
                raise EngineError(f"weights (--weights): expected COLUMN=NUMBER,..., got {part!r}")
    elif isinstance(value, dict):
        pairs = list(value.items())
    else:
        raise EngineError(f"weights must be a dict of column: weight or a text 'age=2,sex=1', got {value!r}")
    out = []
    for c, w in pairs:
        if isinstance(w, bool) or not isinstance(w, numbers.Real):
            raise EngineError(f"weights (--weights): the weight of column {c!r} must be a positive number, got {w!r}")
        out.append((c, float(w)))
    return tuple(out)


def _name(option: str) -> str:
    """An option as both faces name it: ``refine_seconds (--refine-budget)``."""
    return f"{option} ({flag(option)})"


def _hint(option: str, method: str) -> str:
    if option in ("sa", "epsilon"):
        return ": a sensitive attribute is protected by method maxent (microagg verify --sa measures a release's diversity)"
    if option == "gamma":
        return ": gamma applies only to vmdav and ivmdav"
    if option == "select" and method == "ama":
        return ": method ama selects its own key attributes"
    return ""
