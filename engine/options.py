"""Every option of a run, declared once: the fields of ``RunConfig``.

Each field carries its declaration (``Option``): its type and range, its default,
its command-line flag and help text, the commands that offer it, the methods that
accept it, and the other option it takes effect with. From these declarations come

* the ``microagg`` flags (``add_arguments``; ``cli.py`` spells no option itself),
* the API's checks (``RunConfig.make``: the same one-line errors for both faces),
* the one-line refusal of an option the method does not use ("does not apply to
  method X", or "takes effect only with ..."),
* the table of options by method in ``docs/usage.md`` (``options_table``, checked by
  ``tests/test_options.py``).

The API functions keep explicit keyword signatures (for type hints and IDEs); what
they accept is checked here. Checks that tie two options together (a column named in
two roles, ``block_size`` against ``k``) are data: each rule one entry of ``RELATIONS`` (the
options it relates, the check, the message: ``engine.relations``), checked in turn by
``RunConfig.check_relations``.
``k``'s bounds and default are declared once (``checks.K_LEAST``, ``DEFAULT_K``).
"""

from __future__ import annotations

import argparse
import math
import numbers
import re
from dataclasses import dataclass, field, fields
from typing import Any, Callable

from .checks import K_LEAST, is_int, option_texts, split_names
from .declared import parse_missing
from .errors import EngineError
from .registry import METHODS, REGISTRY
from .relations import RELATIONS
from .tuning import (DEFAULT_LEAF_SIZE, DEFAULT_POLISH_ROUNDS, POLISH_MAX_ROWS, SCALE_LEAF_SIZE, SCALE_POLISH_ROUNDS,
                     polish_leaf_size)

DEFAULT_K = 3  # k when not given, for the methods that need it (the API's and the command line's)

# the commands whose flags come from this table
RUN = frozenset({"anonymize", "demo"})
ANONYMIZE = frozenset({"anonymize"})
CSV_COMMANDS = frozenset({"anonymize", "profile", "verify", "risk"})

ALL = frozenset(METHODS)
CENTROIDS = frozenset(m for m in METHODS if REGISTRY[m].centroids)
MIXED = CENTROIDS - {"ama"}  # mixed-type QIs: the MDAV family but AMA (its dependency tree is numeric)


@dataclass(frozen=True)
class Needs:
    """An option that takes effect only together with another setting (for ``methods``)."""

    test: Callable[["RunConfig"], bool]  # True: the other setting is there
    text: str                            # "takes effect only with {text}" ({method}: the method)
    cell: str                            # the docs table's cell
    methods: frozenset = ALL


@dataclass(frozen=True)
class Option:
    """One option's declaration. ``kind`` says how a value is checked (``check``):
    whole, number, choice, name, size, flag, path, or given (checked by the code that
    reads it: ``ordinal``, ``weights``, ``scheduler``, the CSV options)."""

    help: str
    kind: str = "given"
    low: float | None = None           # whole / number: the least value
    open_low: bool = False              # number: strictly above ``low``
    must: str = ""                      # what a valid value is, for the error line
    choices: tuple | None = None
    methods: frozenset = ALL            # the methods it takes effect with
    needs: Needs | None = None
    hint: str = ""                      # added to its "does not apply" line
    commands: frozenset = RUN           # the commands that offer the flag
    flag: str | None = None             # default: --name-with-dashes
    metavar: str | None = None
    repeat: bool = False                # the flag may be given several times (a list)
    exclusive: str | None = None        # a group of flags of which one may be given
    in_report: bool = True              # listed in the report's settings
    required: bool = False              # the command line's flag must be given
    name: str = ""                      # set from the field's name

    @property
    def default_value(self):
        """The value when not given (the field's default)."""
        return RUN_DEFAULTS[self.name]

    @property
    def cli(self) -> str:
        return self.flag or "--" + self.name.replace("_", "-")

    @property
    def label(self) -> str:
        """The option as both faces name it: ``refine_seconds (--refine-budget)``."""
        return f"{self.name} ({self.cli})"

    def check(self, value) -> Any:
        """``value`` as the run uses it, or one line naming the option."""
        if value is None or self.kind == "given":
            return value
        if self.kind == "whole":
            if not is_int(value) or value < self.low:
                must = self.must if is_int(value) or "whole" in self.must else f"a whole number {self.must}"
                raise EngineError(f"{self.name} must be {must}, got {value!r}")
        elif self.kind == "number":
            bad = isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value)
            if bad or value < self.low or (self.open_low and value == self.low):
                raise EngineError(f"{self.name} must be {self.must}, got {value!r}")
        elif self.kind == "choice":
            if value not in self.choices:
                raise EngineError(f"unknown {self.name} {value!r} (choose from {', '.join(self.choices)})")
        elif self.kind == "name":
            if not isinstance(value, str) or not value:
                raise EngineError(f"{self.label} must be a column name, got {value!r}")
        elif self.kind == "size":
            value = parse_bytes(value)
            if value < self.low:
                raise EngineError(f"memory limit must be at least 64MiB, got {value} bytes")
        elif self.kind == "flag":
            if not isinstance(value, bool):
                raise EngineError(f"{self.name} must be True or False, got {value!r}")
        return value

    def add_to(self, parser: argparse.ArgumentParser, groups: dict) -> None:
        """This option's flag on ``parser`` (``groups``: the parser's exclusive groups)."""
        target = parser
        if self.exclusive is not None:
            if self.exclusive not in groups:
                groups[self.exclusive] = parser.add_mutually_exclusive_group()
            target = groups[self.exclusive]
        help_text = self.help.replace("%", "%%")
        if self.kind == "flag" and self.name == "progress":  # --progress / --no-progress; default: a terminal
            target.add_argument("--progress", dest="progress", action="store_true", default=None, help=help_text)
            target.add_argument("--no-progress", dest="progress", action="store_false", default=None)
            return
        kw: dict = {"dest": self.name, "default": self.default_value, "help": help_text}
        if self.kind == "flag":
            kw.update(action="store_true")
        else:
            if self.kind == "whole":
                kw["type"] = int
            elif self.kind == "number":
                kw["type"] = float
            if self.choices is not None:
                kw["choices"] = self.choices
            if self.metavar is not None:
                kw["metavar"] = self.metavar
            if self.repeat:
                kw["action"] = "append"
            if self.required:
                kw["required"] = True
        target.add_argument(self.cli, **kw)


def option(default=None, **declaration) -> Any:
    """A field of ``RunConfig`` with its declaration."""
    return field(default=default, metadata={"option": Option(**declaration)})


def _selects(cfg: "RunConfig") -> bool:
    return cfg.selects


def _sa_hint() -> str:
    return ": a sensitive attribute is protected by method maxent (microagg verify --sa measures a release's diversity)"


_ENTITY_HINT = (": persons and households are grouped by the MDAV family (one point per person or household); "
                "use method mdav")
ENTITY_COMMANDS = frozenset({"anonymize", "verify", "risk"})
_DEPENDENCY = "Oommen & Fayyoumi"
_WITH_SELECT = Needs(_selects, "method ama or select='emad'", "with `--select`", CENTROIDS - {"ama"})


@dataclass(frozen=True)
class RunConfig:
    """Validated settings of one anonymization run: one field per option, each with its
    declaration. Build it with ``RunConfig.make``; ``None`` means not given."""

    qi: tuple = option((), help="comma-separated quasi-identifier columns: numbers, dates, and for the MDAV "
                                "family also categories (nominal, ordinal); a backslash escapes a comma or a space",
                       commands=ANONYMIZE, in_report=False, required=True)
    k: int | None = option(kind="whole", low=K_LEAST, must=f"at least {K_LEAST}",
                           help=f"minimum group size (default {DEFAULT_K}; maxent: none unless given)", in_report=False)
    method: str = option("mdav", kind="choice", choices=METHODS, in_report=False,
                         help="microaggregation method (default mdav); maxent / mnqia generalize to ranges "
                              "(maxent: categories to sets; mnqia: numeric QIs only, clustered on their number "
                              "lines)")
    sa: str | None = option(kind="name", methods=frozenset({"maxent"}), hint=_sa_hint(), metavar="COLUMN",
                            help="sensitive attribute protected by --method maxent")
    epsilon: float | None = option(kind="number", low=0.0, must="a non-negative number of bits",
                                   methods=frozenset({"maxent"}), hint=_sa_hint(),
                                   help="maxent: minimum class entropy in bits (default: the table's SA entropy, refused "
                                        "where only one class of every row reaches it)")
    numeric_output: str | None = option(kind="choice", choices=("range", "mean"),
                                        methods=frozenset({"maxent", "mnqia"}),
                                        help="maxent / mnqia: numeric QIs as <col>_min/<col>_max (default) or "
                                             "the class mean")
    ordinal: tuple | None = option(methods=MIXED, repeat=True, metavar="COL=CAT1,CAT2,...",
                                   help="an ordinal quasi-identifier and its categories in order (repeatable); "
                                        "COL alone: an Enum column's own order; COL=@NUMCOL: ordered by a numeric "
                                        "column (e.g. education_num)")
    nominal: tuple | None = option(methods=MIXED, repeat=True, metavar="COL[,COL...]",
                                   help="quasi-identifiers whose numbers are codes of categories (a state, a "
                                        "race code): grouped as categories and published as one of the input's "
                                        "codes (the group's most frequent), never a mean (repeatable)")
    numeric: tuple | None = option(repeat=True, metavar="COL[,COL...]",
                                   help="quasi-identifiers averaged as numbers although their file's value labels "
                                        "make them categories (SPSS, Stata, SAS, IPUMS inputs: docs/inputs.md)")
    drop: tuple | None = option(commands=ANONYMIZE, repeat=True, metavar="COL[,COL...]",
                                help="columns left out of the release: never read, never written (the others "
                                     "unchanged, in their order); the leak guard's way out of a column that "
                                     "gives a QI back (repeatable)")
    missing: tuple | None = option(methods=MIXED, repeat=True, metavar="COL=CODE[,CODE...]",
                                   help="codes of a quasi-identifier that are declared missing values (996, 999: "
                                        "'Unknown'), for any input: never averaged with real values, published "
                                        "as a missing code (repeatable; numbers for a numeric column, texts for "
                                        "a text one)")
    weights: tuple | None = option(methods=MIXED, metavar="COL=W,...",
                                   help="weights of quasi-identifiers in the mixed distance (default 1 each)")
    derived: tuple | None = option(methods=CENTROIDS, commands=ANONYMIZE, repeat=True, metavar="COL=QI",
                                   hint=": a range release cannot recompute a column from a range; add the "
                                        "column to --qi or drop it",
                                   help="a column that follows a quasi-identifier (a code beside its label, a birth "
                                        "year beside an age), published recomputed from the QI's published value "
                                        "instead of passed through (repeatable): from a category by the map the "
                                        "data shows (it must be a function of the QI), from a mean only by an exact "
                                        "COL = a + b * QI (the column then becomes Float64); else refused")
    gamma: float | None = option(kind="number", low=0.0, open_low=True, must="a positive number",
                                 methods=frozenset({"vmdav", "ivmdav"}), hint=": gamma applies only to vmdav and ivmdav",
                                 help="gamma of vmdav (default 0.2) or ivmdav (default 1.16)")
    group_column: str | None = option(kind="name", commands=ANONYMIZE, metavar="NAME",
                                      help="add each row's group id as column NAME")
    person_column: str | None = option(kind="name", methods=CENTROIDS, commands=ENTITY_COMMANDS, metavar="COL",
                                       hint=_ENTITY_HINT,
                                       help="the column identifying a person with several records (visits, survey "
                                            "rounds): every published class holds at least k distinct persons and "
                                            "all records of a person publish the same QI values (docs/households.md)")
    household_column: str | None = option(kind="name", methods=CENTROIDS, commands=ENTITY_COMMANDS, metavar="COL",
                                          hint=_ENTITY_HINT,
                                          help="the column identifying a household: the QIs constant within every "
                                               "household (state, household size) are published identically for "
                                               "all its members, grouped by household, the others per person "
                                               "(docs/households.md)")
    strata: Any = option(metavar="COL[,COL...]",
                         help="anonymize each stratum (a combination of these columns' values, a null being a "
                              "value) on its own, as sdcMicro's strata_variables: no group spans two strata; the "
                              "columns pass through unchanged, and a stratum of fewer than k rows is refused")
    leaf_size: int | None = option(kind="whole", low=0, must="a whole number >= 0 (0: exact MDAV on each block)",
                                   methods=CENTROIDS, metavar="ROWS",
                                   help="with several blocks, run the method on leaves of at most ROWS rows cut "
                                        "from each block by median splits (default when polished: up to 2M rows 32768 at "
                                        "k <= 3, 8192 from k = 5, above 2048; else 256; 0: on whole blocks)")
    polish_rounds: int | None = option(kind="whole", low=0, must="a whole number >= 0 (0: no polish)",
                                       methods=CENTROIDS, metavar="N",
                                       help="streamed runs: at most N rounds of moves/swaps among nearest groups, "
                                            "ending early at a round gaining < 1% of the SSE (default 32 up to 2M "
                                            "rows; above, 1 in each block of a second plan crossing the units' faces; "
                                            "0: off, leaves of 256)")
    refine: str | None = option(kind="choice", choices=("local", "ga"), methods=CENTROIDS,
                                help="improve the partition: local moves/swaps, or the genetic hybrid "
                                     "(default: none)")
    refine_rounds: int | None = option(kind="whole", low=1, must="a positive whole number", methods=CENTROIDS,
                                       needs=Needs(lambda c: c.refine is not None, "refine (--refine local|ga)",
                                                   "with `--refine`"),
                                       metavar="N", help="cap on refinement rounds")
    refine_seconds: float | None = option(kind="number", low=0.0, open_low=True,
                                          must="a positive number of seconds", methods=CENTROIDS,
                                          needs=Needs(lambda c: c.refine is not None, "refine (--refine local|ga)",
                                                      "with `--refine`"),
                                          flag="--refine-budget", metavar="SECONDS",
                                          help="cap on refinement seconds (not reproducible across machines; "
                                               "prefer --refine-rounds)")
    select: str | None = option(kind="choice", choices=("emad",), methods=CENTROIDS - {"ama"},
                                hint=": method ama selects its own key attributes",
                                help=f"group on the top --select-count attributes of the dependency tree "
                                     f"({_DEPENDENCY}'s EMAD)")
    select_count: int | None = option(kind="whole", low=1, must="a positive whole number",
                                      methods=CENTROIDS - {"ama"},
                                      needs=Needs(lambda c: c.select is not None, "select='emad' (--select emad)",
                                                  "with `--select`"),
                                      metavar="N", help="key attributes for --select")
    select_measure: str | None = option(kind="choice", choices=("mi-distance", "emim", "chi2", "gaussian"),
                                        methods=CENTROIDS, needs=_WITH_SELECT, flag="--measure",
                                        help="dependence measure for ama / --select (default mi-distance for ama, "
                                             "emim for emad)")
    width: float | None = option(kind="number", low=0.0, open_low=True, must="a positive number",
                                 methods=CENTROIDS, needs=_WITH_SELECT, exclusive="bins",
                                 help=f"histogram bin width for numeric columns ({_DEPENDENCY})")
    bins: int | None = option(kind="whole", low=1, must="a whole number >= 1", methods=CENTROIDS,
                              needs=_WITH_SELECT, exclusive="bins",
                              help="histogram bins per numeric column (default 10)")
    seed: int | None = option(kind="whole", low=0, must="a non-negative whole number",
                              methods=CENTROIDS | {"maxent"},
                              needs=Needs(lambda c: c.refine == "ga",
                                          "refine='ga' (--refine ga) for method {method}: its other steps are "
                                          "deterministic", "with `ga`", CENTROIDS),
                              help="seed of the randomized steps (--refine ga, maxent) and of the demo's data "
                                   "(default 0)")
    scheduler: Any = option(methods=CENTROIDS, commands=ANONYMIZE, metavar="ADDRESS",
                            help="run the passes as tasks on a Dask cluster: tcp://HOST:PORT of its scheduler, or "
                                 "'local' for a LocalCluster here (Parquet in and out; QIs of any type, --ordinal "
                                 "and --weights as without it, the same output; no folder shared with the "
                                 "workers; needs pip install 'microagg-engine[dask]')")
    # the settings that size the work: every method, the same output
    chunk_rows: int = option(100_000, kind="whole", low=1, must="a positive whole number",
                             commands=RUN | {"verify", "risk"}, help="rows per streamed chunk (default 100000)")
    threads: int | None = option(kind="whole", low=1, must="a positive whole number", commands=RUN | {"profile"},
                                 help="Numba threads (default: all cores)")
    memory_limit: int | None = option(kind="size", low=64 << 20, metavar="SIZE",
                                      commands=RUN | {"verify", "risk", "profile"},
                                      help="limit on peak memory, e.g. 1GiB or 512MiB: sizes blocks, chunks and "
                                           "CSV reads; a limit below what the run needs is refused naming the "
                                           "minimum (default: no limit)")
    block_size: int | None = option(kind="whole", low=1, must="a positive whole number", metavar="ROWS",
                                    help="rows per spatial block (default 20000; a table this small runs as one "
                                         "exact block)")
    progress: bool = option(False, kind="flag", in_report=False,
                            help="show progress bars (default: when stderr is a terminal)")
    # how a CSV input is read (engine.io.csvfile.CsvOptions checks them)
    separator: str | None = option(commands=CSV_COMMANDS, metavar="CHAR", in_report=False,
                                   help="field separator, e.g. ';' or tab (default ',')")
    null_values: Any = option(commands=CSV_COMMANDS, metavar="LIST", in_report=False,
                              help="comma-separated texts read as missing, e.g. NA,-  (an empty field always is)")
    encoding: str | None = option(commands=CSV_COMMANDS, metavar="NAME", in_report=False,
                                  help="utf8 (default), utf8-lossy, or any Python codec such as latin-1 or cp1252 "
                                       "(transcoded to a private temporary file first)")
    # what the release writes beside OUTPUT (engine.release)
    tmp_dir: Any = option(kind="given", commands=ANONYMIZE, in_report=False,
                          help="folder for temporary files (default: beside OUTPUT; the system's for - as INPUT "
                               "or OUTPUT)")
    risk: bool = option(False, kind="flag", commands=ANONYMIZE, in_report=False,
                        help="after writing, measure disclosure risk into the report (record linkage, interval "
                             "disclosure, re-identification risk from class sizes; --weight-column for "
                             "sdcMicro's individual risk)")
    weight_column: str | None = option(kind="name", commands=frozenset({"anonymize", "risk"}), metavar="COL",
                                       in_report=False,
                                       help="the input's column of sampling weights (numbers of at least 0; a "
                                            "class's population is at least its records): the journalist and "
                                            "marketer risks against the population they stand for, and "
                                            "sdcMicro's individual risk, which needs them (anonymize: with --risk)")
    max_risk: Any = option(commands=frozenset({"anonymize", "risk"}), repeat=True, metavar="MEASURE=T,...",
                           help="fail (exit 1) when a disclosure risk measure is above its threshold in (0, 1], "
                                "e.g. prosecutor=0.05,dbrl=0.05; a measure alone takes its default (0.09, the "
                                "EMA's line), 'default' every measured one that has one: prosecutor, journalist, "
                                "marketer, dbrl, individual, global, household, household_dbrl, "
                                "household_individual; records_at_risk and interval need a value. anonymize: "
                                "with --risk; nothing is written at OUTPUT, the --report and --html are")
    report: Any = option(commands=RUN, metavar="FILE", in_report=False,
                         help="also write the report as JSON to FILE (-: to stdout)")
    html: Any = option(commands=ANONYMIZE, metavar="FILE", in_report=False,
                       help="also write the release report as one self-contained HTML page with figures "
                            "(-: to stdout; needs pip install 'microagg-engine[html]')")

    @property
    def spec(self):
        """The method's declaration (``engine.registry.Method``)."""
        return REGISTRY[self.method]

    @property
    def csv(self):
        """How a CSV input is read (``engine.io.csvfile.CsvOptions``; None: the defaults)."""
        # start-up: engine.io.csvfile loads Polars (0.3 s); the command line builds its
        # parser from this module before any command needs it
        from .io.csvfile import CsvOptions

        return CsvOptions.make(separator=self.separator, null_values=self.null_values, encoding=self.encoding)

    @property
    def effective_seed(self) -> int:
        return 0 if self.seed is None else self.seed

    @property
    def effective_numeric_output(self) -> str:
        return self.numeric_output or "range"

    def settings(self) -> dict:
        """The settings as given (None: not given, its default applies), for the report."""
        out = {"method": self.method, "k": self.k, "qi": list(self.qi)}
        for o in OPTIONS.values():
            if not o.in_report:
                continue
            v = getattr(self, o.name)
            if o.name == "scheduler" and v is not None and not isinstance(v, str):
                v = f"client of {getattr(v, 'scheduler', None) and v.scheduler.address}"
            out[o.name] = list(v) if isinstance(v, tuple) else v
        return out

    @property
    def method_code(self) -> int:
        return self.spec.code

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
        return self.spec.default_gamma if self.spec.default_gamma is not None else 0.0

    def effective_polish_rounds(self, rows: int) -> int:
        """Polish rounds of a streamed run of ``rows`` rows (0: none). V-MDAV (whose
        tail groups may exceed 2k-1 rows) is not polished by default. The memory limit
        does not change it (the output would change): the budget (``engine.budget``)
        counts the polish, and refuses a limit too small for it."""
        if self.polish_rounds is not None:
            return self.polish_rounds
        if self.method == "vmdav":
            return 0
        return SCALE_POLISH_ROUNDS if rows > POLISH_MAX_ROWS else DEFAULT_POLISH_ROUNDS

    def effective_leaf_size(self, rows: int = 0) -> int:
        if self.leaf_size is not None:
            return self.leaf_size
        if self.effective_polish_rounds(rows) <= 0:
            return DEFAULT_LEAF_SIZE
        return SCALE_LEAF_SIZE if rows > POLISH_MAX_ROWS else polish_leaf_size(self.k)

    @classmethod
    def make(cls, **given) -> "RunConfig":
        """The settings of a run from keyword options (the API's, or the command line's
        through ``from_args``): each checked against its declaration and the method."""
        unknown = sorted(set(given) - set(OPTIONS))
        if unknown:
            raise EngineError(f"unknown option {unknown[0]!r}")
        values = {}
        qi = given.get("qi", ())
        if isinstance(qi, str):
            qi = split_names(qi)  # (a backslash escapes a comma or a space: ``engine.checks``)
        try:
            values["qi"] = tuple(qi)
        except TypeError:
            raise EngineError("qi must be a list of column names") from None
        values["ordinal"] = parse_ordinal(given.get("ordinal"))
        values["nominal"] = parse_nominal(given.get("nominal"))
        values["numeric"] = parse_nominal(given.get("numeric"), "numeric (--numeric)")
        values["drop"] = parse_nominal(given.get("drop"), "drop (--drop)")
        values["missing"] = parse_missing(given.get("missing"))
        values["weights"] = parse_weights(given.get("weights"))
        values["derived"] = parse_derived(given.get("derived"))
        for name, o in OPTIONS.items():
            if name not in values and given.get(name) is not None:  # None: not given, the default applies
                values[name] = o.check(given[name])
        cfg = cls(**values)
        cfg.csv  # noqa: B018 - the CSV options, checked now (CsvOptions.make), not when the input is read
        cfg.check_relations()
        cfg.check_applies()
        return cfg

    @classmethod
    def from_args(cls, args: argparse.Namespace, **override) -> "RunConfig":
        """The settings of a run from the command line (``override``: the command's own)."""
        given = {name: getattr(args, name) for name in OPTIONS if hasattr(args, name)}
        given.update(override)
        method = given.get("method") or cls.method
        if given.get("k") is None and method in REGISTRY and REGISTRY[method].needs_k:
            given["k"] = DEFAULT_K
        return cls.make(**given)

    def check_relations(self) -> None:
        """The checks that tie an option to another, or to the QIs: each rule of
        ``RELATIONS`` in turn, the first broken one refused with its message."""
        for rule in RELATIONS:
            found = rule.find(self)
            if found is not None:
                raise EngineError(rule.message.format(cfg=self, **found))

    def check_applies(self) -> None:
        """Every option given takes effect with this method, or the run stops here with
        one line naming the option and the method."""
        given = [o for o in OPTIONS.values() if o.methods != ALL and getattr(self, o.name) is not None]
        for o in given:
            if self.method not in o.methods:
                raise EngineError(f"{o.label} does not apply to method {self.method}{o.hint}")
        if self.spec.needs_sa and self.sa is None:
            raise EngineError(f"method {self.method} needs a sensitive attribute: sa (--sa COLUMN)")
        for o in given:
            if o.needs is not None and self.method in o.needs.methods and not o.needs.test(self):
                raise EngineError(f"{o.label} takes effect only with {o.needs.text.format(method=self.method)}")


OPTIONS: dict[str, Option] = {}
RUN_DEFAULTS: dict[str, Any] = {}
for _f in fields(RunConfig):
    object.__setattr__(_f.metadata["option"], "name", _f.name)
    OPTIONS[_f.name] = _f.metadata["option"]
    RUN_DEFAULTS[_f.name] = _f.default


def add_arguments(parser: argparse.ArgumentParser, command: str, skip=()) -> None:
    """The flags of ``command`` from the table, in its order (``skip``: the command's
    own spelling of an option, e.g. the positional INPUT)."""
    groups: dict = {}
    csv = None
    for o in OPTIONS.values():
        if command not in o.commands or o.name in skip:
            continue
        if o.commands is CSV_COMMANDS:  # the CSV options: a group of their own in --help
            if csv is None:
                csv = parser.add_argument_group("CSV input", "how a CSV input is read (refused for other "
                                                             "inputs); a .csv.gz is decompressed to a private "
                                                             "temporary file")
            o.add_to(csv, groups)
        else:
            o.add_to(parser, groups)


def csv_given(args: argparse.Namespace) -> dict:
    """The CSV options of a parsed command line, as keyword arguments."""
    return {o.name: getattr(args, o.name) for o in OPTIONS.values() if o.commands is CSV_COMMANDS}


def options_table() -> str:
    """The Markdown table of which option takes effect with which method (docs/usage.md)."""
    lines = ["| option | " + " | ".join(REGISTRY) + " |", "|---|" + "---|" * len(REGISTRY)]
    for o in OPTIONS.values():
        if o.methods == ALL:
            continue
        cells = []
        for m in REGISTRY.values():
            if m.name not in o.methods:
                cells.append("refused")
            elif o.name == "sa" and m.needs_sa:
                cells.append("required")
            elif o.needs is not None and m.name in o.needs.methods:
                cells.append(o.needs.cell)
            else:
                cells.append("yes")
        lines.append(f"| `{o.cli}` | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "kib": 1 << 10, "m": 1000**2, "mb": 1000**2, "mib": 1 << 20,
          "g": 1000**3, "gb": 1000**3, "gib": 1 << 30, "t": 1000**4, "tb": 1000**4, "tib": 1 << 40}


def parse_bytes(value) -> int:
    """``"1GiB"``, ``"512MiB"``, ``"2GB"``, ``"1.5G"`` or a whole number of bytes -> bytes."""
    if is_int(value):
        return int(value)
    if isinstance(value, str):
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", value)
        if m and m.group(2).lower() in _UNITS:
            return int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    raise EngineError(f"memory limit must be a size such as 512MiB or 2GiB, got {value!r}")


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


def parse_nominal(value, label: str = "nominal (--nominal)") -> tuple | None:
    """``nominal`` as ``(column, ...)``: from a list of names, or texts ``"a,b"`` (one
    per ``--nominal``, a list of them); ``label`` names the option (``numeric`` too)."""
    if value is None:
        return None
    texts = option_texts(value, f"{label}: expected column names, got {{value}}",
                         f"{label}: expected a column name, got {{value}}")
    names = []
    for t in texts:
        for part in t.split(","):
            if not part.strip():
                raise EngineError(f"{label}: empty column name in {t!r}")
            names.append(part.strip())
    return tuple(names) or None


def parse_derived(value) -> tuple | None:
    """``derived`` as ``((column, qi), ...)``: from a dict ``{column: qi}``, or texts
    ``"column=qi"`` (several joined by commas; one per ``--derived``, a list of them)."""
    if value is None:
        return None
    if isinstance(value, tuple) and all(isinstance(v, tuple) and len(v) == 2 for v in value):
        return value or None  # already normalized (RunConfig.derived)
    if isinstance(value, dict):
        pairs = list(value.items())
    else:
        expected = "derived (--derived): expected COLUMN=QI, got {value}"
        pairs = []
        for t in option_texts(value, expected, expected):
            for part in t.split(","):
                name, eq, qi = part.partition("=")
                if not eq:
                    raise EngineError(f"derived (--derived): expected COLUMN=QI, got {part!r}")
                pairs.append((name.strip(), qi.strip()))
    for c, q in pairs:
        if not isinstance(c, str) or not c or not isinstance(q, str) or not q:
            raise EngineError(f"derived (--derived): expected COLUMN=QI with two column names, got {c!r}={q!r}")
    return tuple(pairs) or None


def parse_weights(value) -> tuple | None:
    """``weights`` as ``((column, weight), ...)`` from a dict or the text ``"age=2,sex=1"``."""
    if value is None:
        return None
    if isinstance(value, tuple) and all(isinstance(v, tuple) and len(v) == 2 for v in value):
        return value  # already normalized (RunConfig.weights)
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
