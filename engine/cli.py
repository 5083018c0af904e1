"""The ``microagg`` command: parse, validate, call the coordinator, render the report.

Exit codes: 0 success, 2 bad input or settings (one line on stderr, nothing
written), 130 interrupted (SIGINT), 143 terminated (SIGTERM; both remove the
temporary files and leave nothing at OUTPUT), 1 unexpected internal error, a run
whose output failed its own verification (nothing written), or (``verify``) a
guarantee that does not hold.

Pipelines: ``-`` as an input reads it (CSV; Parquet and gzip are recognized by their
bytes) from the standard input, which is copied to a private temporary file first and
read once (``-`` for two inputs is refused); ``-`` as OUTPUT, ``--report``, ``--json``
or ``--html`` writes to the standard output, only when everything is checked (one of
them at most); the human summary then goes to stderr. ``-v`` / ``--verbose``
(repeatable) and ``--log-level`` set the level of the ``engine`` logger, before or
after the command.

Start-up: this module imports only the option table and the error types (0.04 s);
each command imports the modules it runs when it starts (Polars and Numba: 0.7 s),
so that ``--help``, ``--version`` and a bad flag answer at once, and ``anonymize
--html`` starts the page's worker before those imports.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import functools
import gc
import importlib.util
import inspect
import json
import logging
import os
import queue
import re
import signal
import sys
import threading
import time

from .errors import EngineError, Terminated, VerificationError, check_signals, received_signals
from .registry import REGISTRY
from .options import OPTIONS, RunConfig, add_arguments, csv_given
from .progress import CompileNotice
from . import warmup
from .version import version

DEMO_EPSILON = 2.5  # demo --method maxent: bits of occupation entropy per class (the table has 3.27)
DEMO_QI = ("age", "education_years", "hours_per_week", "wage_income", "other_income",
           "property_tax", "household_size", "commute_minutes")
MEASURES = ("mi-distance", "emim", "chi2", "gaussian")
STDIO = "-"  # an input read from the standard input, an output written to the standard output
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
_IN = "CSV or Parquet file, folder of Parquet files, or glob; - reads CSV from stdin"


def _add_bin_args(p: argparse.ArgumentParser) -> None:
    """``profile``'s histogram bins (a run's are in the option table)."""
    g = p.add_mutually_exclusive_group()
    g.add_argument("--width", type=float, default=None, help="histogram bin width for numeric columns (Oommen & Fayyoumi)")
    g.add_argument("--bins", type=int, default=None, help="histogram bins per numeric column (default 10)")


class _VersionAction(argparse.Action):
    """``--version``: ``microagg <version>`` (the package metadata read only when asked)."""

    def __init__(self, option_strings, dest, **kw):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kw)

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"microagg {version()}")
        parser.exit()


def _anonymize_args(a: argparse.ArgumentParser) -> None:
    a.add_argument("input", help=_IN)
    a.add_argument("output", help="output file (.csv or .parquet); written only when complete; - writes CSV "
                                  "to stdout (after every check passed; the summary goes to stderr)")
    add_arguments(a, "anonymize")
    a.add_argument("--quiet", action="store_true", help="do not print the summary")


def _plan_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("input", help=_IN)
    p.add_argument("output", nargs="?", default=None,
                   help="the output anonymize would write (.csv, .parquet, ...): checked and planned, not written "
                        "(default: a table in memory)")
    add_arguments(p, "anonymize")
    p.add_argument("--json", metavar="FILE", help="also write the plan as JSON (-: to stdout, the text to stderr)")


def _demo_args(d: argparse.ArgumentParser) -> None:
    d.add_argument("--rows", type=int, default=200_000, help="rows to generate (default 200000)")
    d.add_argument("--output", help="also write the anonymized table here (.csv or .parquet; - writes CSV to "
                                    "stdout)")
    add_arguments(d, "demo")
    d.add_argument("--quiet", action="store_true", help="do not print the summary")


def _profile_args(pr: argparse.ArgumentParser) -> None:
    pr.add_argument("input", help=_IN)
    pr.add_argument("--columns", required=True, help="comma-separated columns (any type)")
    pr.add_argument("--measure", choices=MEASURES, default="mi-distance",
                    help="mi-distance: minimum spanning tree (Sun et al.); others: maximum (Oommen & Fayyoumi)")
    _add_bin_args(pr)
    pr.add_argument("--binning", choices=("equal", "quantile"), default="equal")
    pr.add_argument("--select-count", type=int, default=None, metavar="N",
                    help="key attributes: top N by degree (EMAD); default Definition 5 of Sun et al.")
    pr.add_argument("--json", metavar="FILE", help="also write the profile as JSON (-: to stdout, the profile "
                                                   "to stderr)")
    add_arguments(pr, "profile")


def _verify_args(v: argparse.ArgumentParser) -> None:
    v.add_argument("output", help="the release: CSV or Parquet file, folder of Parquet files, or glob; - reads "
                                  "it from stdin")
    v.add_argument("--qi", required=True, help="comma-separated quasi-identifiers (c, or c_min/c_max ranges; a backslash escapes a comma)")
    v.add_argument("--k", type=int, required=True, help="minimum class size to check")
    v.add_argument("--sa", default=None, help="sensitive attribute, with --l or --epsilon")
    vg = v.add_mutually_exclusive_group()
    vg.add_argument("--l", type=int, default=None, help="l-diversity: distinct SA values per class")
    vg.add_argument("--epsilon", type=float, default=None, help="entropy l-diversity: class SA entropy in bits")
    v.add_argument("--original", metavar="INPUT", default=None,
                   help="the table the release was made from: check rows and non-QI columns, report IL "
                        "(- reads it from stdin)")
    v.add_argument("--mixed", action="store_true",
                   help="a mixed-type MDAV release: categorical QIs hold one category each (not a set); "
                        "with --original, information loss per type (with --original it is read from the "
                        "release when not given)")
    v.add_argument("--ordinal", action="append", default=None, metavar="COL=CAT1,CAT2,...",
                   help="with --mixed: an ordinal QI's order (as for anonymize; implies --mixed)")
    v.add_argument("--nominal", action="append", default=None, metavar="COL[,COL...]",
                   help="numeric QIs published as categories (anonymize --nominal): checked as categories, "
                        "not means (implies --mixed)")
    v.add_argument("--missing", action="append", default=None, metavar="COL=CODE[,CODE...]",
                   help="with --original: declared missing codes of a QI (anonymize --missing), checked as "
                        "missing values, not means (a statistical-file original's own declarations are read)")
    v.add_argument("--json", metavar="FILE", help="also write the result as JSON (-: to stdout, the summary "
                                                  "to stderr)")
    add_arguments(v, "verify")


def _risk_args(r: argparse.ArgumentParser) -> None:
    r.add_argument("original", help="the original table (CSV/Parquet; -: from stdin)")
    r.add_argument("masked", help="the release (CSV/Parquet; -: from stdin), rows in the original's order")
    r.add_argument("--qi", required=True, help="comma-separated quasi-identifiers (a backslash escapes a comma)")
    r.add_argument("--p", type=float, default=0.05,
                   help="interval disclosure half-width in standard deviations (default 0.05)")
    r.add_argument("--ordinal", action="append", default=None, metavar="COL=CAT1,CAT2,...",
                   help="an ordinal QI of a mixed-type release and its order (as for anonymize); other "
                        "categorical QIs are compared as categories")
    r.add_argument("--nominal", action="append", default=None, metavar="COL[,COL...]",
                   help="numeric QIs that are categories (anonymize --nominal): compared as categories")
    r.add_argument("--numeric", action="append", default=None, metavar="COL[,COL...]",
                   help="labelled QIs of a statistical-file original compared as numbers (anonymize --numeric)")
    r.add_argument("--missing", action="append", default=None, metavar="COL=CODE[,CODE...]",
                   help="declared missing codes of a QI (anonymize --missing): compared as missing values (a "
                        "statistical-file original's own declarations are read)")
    r.add_argument("--json", metavar="FILE", help="also write the result as JSON (-: to stdout, the summary "
                                                  "to stderr)")
    add_arguments(r, "risk")


def _report_args(h: argparse.ArgumentParser) -> None:
    h.add_argument("json", metavar="REPORT", help="a JSON report written by microagg anonymize --report (-: "
                                                  "from stdin)")
    h.add_argument("--html", metavar="FILE", required=True,
                   help="write the page here (-: to stdout; needs pip install 'microagg-engine[html]')")


# each command: its --help line, its description, its arguments
SUBCOMMANDS = {
    "anonymize": ("anonymize a CSV/Parquet table",
                  "Replace the quasi-identifiers of each group of at least k similar rows by the group's "
                  "mean; other columns pass through unchanged.", _anonymize_args),
    "plan": ("show what anonymize would do, without running it",
             "The plan of anonymize with the same options: the input resolved (files, format, rows), each "
             "column's role and QI kind, the path (in memory, streamed, seam stage, row-ordered, Dask), the least "
             "--memory-limit by phase and the passes in order. Reads what a run's first steps read; writes "
             "nothing (but --json).", _plan_args),
    "demo": ("run the main job on a built-in synthetic census-like table",
             "Generate a seeded census-like table and microaggregate its 8 numeric quasi-identifiers.", _demo_args),
    "profile": ("dependency matrix, tree and key attributes of some columns",
                "Entropy / mutual-information profile of the columns: the dependency matrix, its spanning "
                "tree, vertex degrees, key attributes.", _profile_args),
    "verify": ("check a release's guarantees (k-anonymity, l-diversity, unchanged columns)",
               "Independently re-check a published table: class sizes, SA diversity and, with --original, row "
               "count, unchanged non-QI columns and information loss. Exit 0 when every guarantee holds, 1 when "
               "one fails, 2 on bad input.", _verify_args),
    "risk": ("disclosure risk of a release: DBRL and interval disclosure",
             "Distance-based record linkage and interval disclosure of MASKED against ORIGINAL on the "
             "quasi-identifiers (rows in the same order; categorical ones compared as categories).", _risk_args),
    "report": ("the release report of a saved JSON report as an HTML page",
               "Build the self-contained HTML release report from a JSON report written by anonymize --report "
               "(no re-run).", _report_args),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="microagg", description="k-anonymity by microaggregation (MDAV family).",
        epilog="In pipelines: - as an input reads CSV from stdin, - as OUTPUT (or --report, --json, --html) writes "
               "to stdout once every check passed, the summary then on stderr. -v and --log-level may also follow "
               "the command.")
    # the global flags (not run options: engine.options holds those)
    parser.add_argument("--version", action=_VersionAction, help="print the version and exit")
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="log more on stderr: -v INFO, -vv DEBUG (the 'engine' logger)")
    parser.add_argument("--log-level", type=str.upper, choices=LOG_LEVELS, default=None, metavar="LEVEL",
                        help=f"the 'engine' logger's level: {', '.join(LOG_LEVELS)} (default WARNING; "
                             f"overrides -v)")
    parser.set_defaults(quiet=False)  # (the commands that print a summary offer --quiet)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (help_line, description, add) in SUBCOMMANDS.items():
        add(sub.add_parser(name, help=help_line, description=description))
    return parser


def _write_json(path, text: str) -> None:
    from .io.sink import atomic_output  # start-up: every command's heavy module is imported when it runs

    with atomic_output(path) as tmp:  # (``-``: to the standard output, when complete)
        with open(tmp, "w") as fh:
            fh.write(text)


def _inputs(*data) -> tuple[str, ...]:
    """The files behind the command's inputs (paths, folders, globs)."""
    from .io.sink import input_files  # start-up: see the module's docstring

    return tuple(f for d in data if d is not None for f in input_files(d))


def _check_json(args, *inputs) -> None:
    """``--json`` of verify / risk / profile: checked before any work (before the
    standard input is read: an input ``-`` is no file it could be)."""
    if args.json:
        from .io.sink import check_side_output  # start-up: see the module's docstring

        check_side_output("--json", args.json, _inputs(*(i for i in inputs if i != STDIO)))


def _summary_stream(*outputs):
    """Where a command prints its summary: stderr when one of ``outputs`` (``--json``,
    ``--report``, OUTPUT) writes to the standard output, else stdout."""
    from .io.sink import is_stdout  # start-up: see the module's docstring

    return sys.stderr if any(is_stdout(o) for o in outputs) else sys.stdout


def _one_stdout(*outputs) -> None:
    """At most one of ``outputs`` (pairs of the option and its value) writes to the
    standard output: checked before any work (``engine.release`` checks it again)."""
    from .io.sink import is_stdout  # start-up: see the module's docstring

    taken = [(option, value) for option, value in outputs if is_stdout(value)]
    if len(taken) > 1:
        raise EngineError(f"{taken[1][0]} {taken[1][1]}: the standard output is taken by {taken[0][0]} {taken[0][1]}")


@contextlib.contextmanager
def _stdin(args, *inputs, folder=None, suffix=None):
    """The input among ``inputs`` (pairs of its name in an error line and its attribute
    of ``args``) given as ``-``: the standard input, copied to a private temporary file
    in ``folder`` (None: the system's temporary folder) that replaces it in ``args``
    until the command ends. ``-`` for two inputs is refused: the standard input is
    read once."""
    given = [(name, attr) for name, attr in inputs if getattr(args, attr, None) == STDIO]
    if len(given) > 1:
        raise EngineError(f"{given[0][0]} and {given[1][0]} are both {STDIO}: the standard input can be read "
                          f"only once (give one of them as a file)")
    if not given:
        yield
        return
    # start-up: see the module's docstring
    from .io.sink import check_tmp_dir
    from .io.tempfiles import STDIN_LABEL, stdin_copy

    check_tmp_dir(folder)
    with stdin_copy(folder, suffix) as path:
        setattr(args, given[0][1], path)
        try:
            yield
        except EngineError as exc:  # a message that names the copy names the standard input
            if path not in str(exc):
                raise
            raise type(exc)(str(exc).replace(path, STDIN_LABEL)) from None
        finally:
            setattr(args, given[0][1], STDIO)


def _cmd_verify(args) -> int:
    from .audit.verify import verify_release  # start-up: see the module's docstring

    _check_json(args, args.output, args.original)
    with _stdin(args, ("OUTPUT", "output"), ("--original", "original")):
        res = verify_release(args.output, args.qi, args.k, sa=args.sa, l=args.l, epsilon=args.epsilon,
                             original=args.original, chunk_rows=args.chunk_rows, mixed=args.mixed,
                             ordinal=args.ordinal, memory_limit=args.memory_limit, nominal=args.nominal,
                             missing=args.missing, person_column=args.person_column, household_column=args.household_column,
                             **csv_given(args))
        if args.json:
            _write_json(args.json, res.to_json())
    print(res.summary(), file=_summary_stream(args.json))
    if not res.ok:
        print(f"microagg: verify failed: {'; '.join(c['name'] for c in res.failures)}", file=sys.stderr)
    return 0 if res.ok else 1


def _cmd_risk(args) -> int:
    from .audit.risk import disclosure_risk  # start-up: see the module's docstring

    _check_json(args, args.original, args.masked)
    with _stdin(args, ("ORIGINAL", "original"), ("MASKED", "masked")):
        res = disclosure_risk(args.original, args.masked, args.qi, p=args.p, chunk_rows=args.chunk_rows,
                              ordinal=args.ordinal, memory_limit=args.memory_limit,
                              weight_column=getattr(args, "weight_column", None),
                              household_column=getattr(args, "household_column", None),
                              max_risk=getattr(args, "max_risk", None), nominal=args.nominal, missing=args.missing,
                              numeric=args.numeric, **csv_given(args))
        if args.json:
            _write_json(args.json, res.to_json())
    print(res.summary(), file=_summary_stream(args.json))
    if res.verdict is not None and not res.verdict["passed"]:
        from .audit.verdict import failure_line  # start-up: see the module's docstring

        print(f"microagg: {failure_line(res.verdict)}", file=sys.stderr)
        return 1
    return 0


def _cmd_profile(args) -> int:
    # start-up: see the module's docstring
    from . import select as dependency
    from .report import json_text

    _check_json(args, args.input)
    with _stdin(args, ("INPUT", "input")):
        cols = [c.strip() for c in args.columns.split(",")] if args.columns.strip() else []
        res = dependency.profile(args.input, cols, args.measure, width=args.width, bins=args.bins,
                                 binning=args.binning, count=args.select_count, threads=args.threads,
                                 memory_limit=args.memory_limit, **csv_given(args))
        if args.json:
            _write_json(args.json, json_text(res.to_dict()))
    print(res.render(), file=_summary_stream(args.json))
    return 0


def _settings(args, **override) -> RunConfig:
    """The run's settings from the command line (the option table's flags)."""
    progress = args.progress if args.progress is not None else sys.stderr.isatty()
    return RunConfig.from_args(args, progress=progress, **override)


def _prerender(args):
    """With ``--html``: the page's worker (``html_report.Prerender``), started first
    thing, so that its imports (matplotlib: a third of a CPU-second) run on the core
    this process leaves idle while it imports Polars and Numba, rather than beside the
    partition pass's threads."""
    if not args.html:
        return None
    from . import html_report  # start-up: see the docstring

    html_report.require_matplotlib()
    return html_report.Prerender()


def _cmd_anonymize(args) -> int:
    prerender = _prerender(args)
    try:
        # start-up: the release loads Polars and Numba (0.7 s), after the page's worker started
        from .release import release

        cfg = _settings(args)  # every option checked against the method before any work
        _one_stdout(("OUTPUT", args.output), ("--report", args.report), ("--html", args.html))
        if args.input == STDIO:  # the destinations, before stdin is read to its end (again by the release)
            from .io.sink import check_destination, check_side_output  # start-up: (as above)

            check_destination(args.output, folder=cfg.scheduler is not None)
            for option, side in (("--report", args.report), ("--html", args.html)):
                if side is not None:
                    check_side_output(option, side, (), [("OUTPUT", args.output)])
        with _stdin(args, ("INPUT", "input"), folder=cfg.tmp_dir):
            result = release(args.input, args.output, cfg, prerender=prerender)
    finally:
        if prerender is not None:
            prerender.close()
    if not args.quiet:
        print(result.report.summary(), file=sys.stderr)
    return 0


def _cmd_plan(args) -> int:
    from .api import plan_config  # start-up: see the module's docstring

    cfg = _settings(args)  # the same checks as anonymize, before any work
    _check_json(args, args.input)
    _one_stdout(("OUTPUT", args.output), ("--json", args.json))
    with _stdin(args, ("INPUT", "input"), folder=cfg.tmp_dir):
        planned = plan_config(args.input, args.output, cfg, output_option="OUTPUT")
    if args.json:
        _write_json(args.json, planned.to_json())
    print(planned.render(), file=_summary_stream(args.json))
    return 0


def _cmd_demo(args) -> int:
    if args.rows < 1:
        raise EngineError(f"--rows must be positive, got {args.rows}")
    spec = REGISTRY[args.method or RunConfig.method]
    # --seed always seeds the demo's data; the run takes it where a step is randomized
    randomized = args.refine == "ga" if spec.centroids else spec.name in OPTIONS["seed"].methods
    override = {"qi": DEMO_QI, "seed": args.seed if randomized else None}
    if spec.needs_sa and args.sa is None:  # maxent: the demo's occupation (3.27 bits), 2.5 bits per class
        override.update(sa="occupation", epsilon=DEMO_EPSILON if args.epsilon is None else args.epsilon)
    cfg = _settings(args, **override)
    _one_stdout(("--output", args.output), ("--report", args.report))
    # an empty Numba cache: a helper process compiles the run's later kernels on another core
    with warmup.helper(warmup.wanted(cfg, args.rows)):
        return _demo_release(args, cfg)


def _demo_release(args, cfg: RunConfig) -> int:
    # start-up: the release loads Polars and Numba (0.7 s); --help and bad flags need neither
    from .release import release
    from .synth import census_like  # start-up: (as above)

    seed = 0 if args.seed is None else args.seed
    t = time.perf_counter()
    frame = census_like(args.rows, seed=seed)
    if not args.quiet:
        print(f"demo: generated {frame.height:,} census-like rows in {time.perf_counter() - t:.2f} s "
              f"(seed {seed}); quasi-identifiers: {', '.join(DEMO_QI)}", file=sys.stderr)
    result = release(frame, args.output, cfg, output_option="--output")
    if not args.quiet:
        print(result.report.summary(), file=sys.stderr)
        # the key figures as JSON on stdout, unless the table or the report went there
        print(json.dumps({k: v for k, v in result.report.to_dict().items()
                          if k in ("rows", "groups", "min_group_size", "max_group_size",
                                   "information_loss_percent", "wall_seconds", "peak_rss_bytes")}),
              file=_summary_stream(args.output, args.report))
    return 0


def _cmd_report(args) -> int:
    # start-up: see the module's docstring
    from . import html_report
    from .io.sink import atomic_output, check_side_output

    html_report.require_matplotlib()
    with _stdin(args, ("REPORT", "json"), suffix=".json"):
        check_side_output("--html", args.html, (args.json,))
        report = html_report.load_report(args.json)
        with atomic_output(args.html) as tmp:
            html_report.write(report, tmp, args.html, saved=args.json)
    print(f"microagg: wrote {'the page to stdout' if args.html == STDIO else args.html}", file=sys.stderr)
    return 0


COMMANDS = {"anonymize": _cmd_anonymize, "plan": _cmd_plan, "demo": _cmd_demo, "profile": _cmd_profile, "verify": _cmd_verify,
            "risk": _cmd_risk, "report": _cmd_report}


@contextlib.contextmanager
def _signals_as_interrupts():
    """While a command runs, SIGINT raises KeyboardInterrupt and SIGTERM raises
    Terminated in the main thread. Only the first signal raises: a repeated one while
    the run unwinds is ignored, so that the cleanup is not cut short. Every signal is
    noted (``errors.received_signals``), so that one whose exception was swallowed
    still stops the run before it commits its output (``errors.check_signals``). A
    signal the parent set to be ignored (``nohup``, background jobs) stays ignored."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(sig) is not signal.SIG_IGN:
            previous[sig] = signal.signal(sig, _on_signal)
    previous[signal.SIGALRM] = signal.signal(signal.SIGALRM, _on_alarm)
    _delivery.clear()
    _delivery["unsafe"] = _unsafe_code()
    hook = sys.unraisablehook

    def quiet_interrupts(unraisable):  # a swallowed interrupt: noted, raised at the next checkpoint
        if not (unraisable.exc_type is not None and issubclass(unraisable.exc_type, KeyboardInterrupt)):
            hook(unraisable)

    sys.unraisablehook = quiet_interrupts
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        sys.unraisablehook = hook
        for sig, old in previous.items():
            signal.signal(sig, old if old is not None else signal.SIG_DFL)
        _delivery.clear()  # (``received_signals`` stays: ``main`` reads it)


def _unsafe_code() -> tuple:
    """Where the main thread must not get an exception from a signal handler:

    - ``threading``, ``queue``, ``concurrent.futures`` (queue, condition and future
      waits): an exception raised there between bytecodes can leave a lock held, and a
      thread that then waits for it (a reader thread putting its next chunk) hangs the
      cleanup;
    - Numba and llvmlite: while a kernel is compiled or loaded from the cache, LLVM
      calls back into Python through ctypes; an exception there is lost and the
      callback returns nothing, and LLVM crashes (a segmentation fault was seen with a
      SIGTERM during the first call of a kernel);
    - the import machinery: an extension module whose import is interrupted may print
      the interrupt's traceback and raise an ImportError instead (Numba's
      ``_devicearray`` does);
    - NumPy's and Polars' Python code: Polars' Rust code (and the ``numpy`` crate it
      uses) calls back into it, and an exception there can make the Rust side panic
      (a ``PanicException`` and exit 1 instead of a clean stop). Called from our code
      it is safe, but the frame does not say who called it: the interrupt then waits
      for our own code.

    Returns ``(files, folders)``; the folders are found without importing the packages."""
    files = frozenset([threading.__file__, queue.__file__, inspect.getfile(concurrent.futures.Future),
                       "<frozen importlib._bootstrap>", "<frozen importlib._bootstrap_external>"])
    folders = []
    for name in ("numba", "llvmlite", "numpy", "polars"):
        spec = importlib.util.find_spec(name)
        for loc in (spec.submodule_search_locations or []) if spec is not None else []:
            folders.append(os.path.join(loc, ""))
    return files, tuple(folders)


_delivery: dict = {}  # "done": the interrupt was raised; "unsafe": ``_unsafe_code()``
_RETRY_SECONDS = 0.02
_MAX_TRIES = 500  # then raise anyway (10 s: a wait that long is not a lock's)


def _on_signal(signum, frame):
    first = not received_signals
    received_signals.append(signum)
    if first:
        _deliver(frame)


def _deliver(frame):
    """Raise the interrupt of the first signal received, unless the main thread is in
    code where an exception is unsafe (``_unsafe_code``): then try again 20 ms later
    (SIGALRM), until it is out of it."""
    if _delivery.get("done") or not received_signals:
        return
    unsafe = _delivery.get("unsafe")
    if unsafe and frame is not None and _delivery.get("tries", 0) < _MAX_TRIES:
        name = frame.f_code.co_filename
        if name in unsafe[0] or name.startswith(unsafe[1]):
            _delivery["tries"] = _delivery.get("tries", 0) + 1
            signal.setitimer(signal.ITIMER_REAL, _RETRY_SECONDS)
            return
    _delivery["done"] = True
    raise Terminated() if received_signals[0] == signal.SIGTERM else KeyboardInterrupt()


def _on_alarm(signum, frame):
    _deliver(frame)


def _interrupt_in(exc: BaseException) -> KeyboardInterrupt | None:
    """The interrupt behind ``exc``, if any. A signal handler that raises while a
    Numba-compiled function is running (the kd-tree of ``--risk``, say) surfaces as
    ``SystemError: CPUDispatcher(...) returned a result with an exception set``, caused
    by the KeyboardInterrupt / Terminated; another wrapper may chain it as context."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KeyboardInterrupt):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def _interrupted(exc: KeyboardInterrupt) -> int:
    if isinstance(exc, Terminated):
        print("\nmicroagg: terminated (SIGTERM); temporary files removed, no partial output left",
              file=sys.stderr)
        return 143
    print("\nmicroagg: interrupted; temporary files removed, no partial output left", file=sys.stderr)
    return 130


_VERBOSE = re.compile(r"-v+")


def _global_flags_first(argv: list[str]) -> list[str]:
    """``argv`` with the global logging flags given after the command (``-v``, ``-vv``,
    ``--verbose``, ``--log-level LEVEL``) moved before it, where the parser takes them
    (up to a ``--``)."""
    i = 0
    while i < len(argv) and argv[i] not in SUBCOMMANDS:  # (the command: the first of its names)
        i += 2 if argv[i] == "--log-level" else 1
    if i >= len(argv):
        return argv
    moved, rest, j = [], argv[:i + 1], i + 1
    while j < len(argv):
        a = argv[j]
        if a == "--":
            rest += argv[j:]
            break
        if a == "--verbose" or a.startswith("--log-level=") or _VERBOSE.fullmatch(a):
            moved.append(a)
        elif a == "--log-level" and j + 1 < len(argv):
            moved += argv[j:j + 2]
            j += 1
        else:
            rest.append(a)
        j += 1
    return moved + rest


@contextlib.contextmanager
def _logging(args):
    """The ``engine`` logger's level from ``-v`` / ``--log-level`` (INFO, then DEBUG; a
    level above WARNING quiets the other libraries too); without them, WARNING and
    above, as ``microagg: <message>`` on stderr. Restored when the command ends."""
    logging.basicConfig(level=logging.WARNING, format="microagg: %(message)s")
    level = None
    if args.log_level is not None:
        level = getattr(logging, args.log_level)
    elif args.verbose:
        level = logging.INFO if args.verbose == 1 else logging.DEBUG
    engine_log, root = logging.getLogger("engine"), logging.getLogger()
    before = engine_log.level, root.level
    if level is not None:
        engine_log.setLevel(level)
        if level > root.level:
            root.setLevel(level)
    try:
        yield
    finally:
        engine_log.setLevel(before[0])
        root.setLevel(before[1])


@functools.lru_cache(maxsize=1)
def _parser() -> argparse.ArgumentParser:
    """The parser ``main`` uses, built once a process (about 20 ms: a process that
    calls ``main`` many times, a test or a script, builds it once)."""
    return build_parser()


def main(argv=None) -> int:
    args = _parser().parse_args(_global_flags_first(list(sys.argv[1:] if argv is None else argv)))
    try:
        # a signal that came before the command (``entry``'s handler, while NumPy was
        # imported: an extension module can turn the interrupt into a swallowed ImportError)
        check_signals()
        # a first run compiles the kernels (seconds, then cached): say so, once
        with _logging(args), _signals_as_interrupts(), CompileNotice(enabled=not args.quiet):
            code = COMMANDS[args.command](args)
            check_signals()  # a signal whose exception was swallowed: not a success
            return code
    except KeyboardInterrupt as exc:  # and Terminated
        return _interrupted(exc)
    except Exception as exc:
        interrupt = _interrupt_in(exc)
        if interrupt is None and received_signals:
            # an error after a signal is the signal's doing (its interrupt was swallowed
            # and turned into another error, e.g. an ImportError by an extension module)
            interrupt = Terminated() if received_signals[0] == signal.SIGTERM else KeyboardInterrupt()
        if interrupt is not None:  # (or raised in a compiled kernel: a SystemError it caused)
            return _interrupted(interrupt)
        return _failed(exc)
    except BaseException:  # (a Rust panic is a BaseException: pyo3's PanicException)
        if received_signals:  # the signal's doing: the interrupt hit Rust code's callback
            return _interrupted(Terminated() if received_signals[0] == signal.SIGTERM else KeyboardInterrupt())
        raise
    finally:
        received_signals.clear()


def _failed(exc: Exception) -> int:
    """The exit code and the one line of an error that is not an interrupt."""
    if isinstance(exc, VerificationError):  # the engine broke its own guarantee: a bug, not bad input
        print(f"microagg: error: {exc}; nothing was written", file=sys.stderr)
        return 1
    if getattr(exc, "verdict", None) is not None:  # audit.verdict.RiskAboveThreshold: a refused release
        print(f"microagg: {exc}", file=sys.stderr)
        return 1
    if isinstance(exc, EngineError):
        print(f"microagg: error: {exc}", file=sys.stderr)
        return 2
    if os.environ.get("MICROAGG_DEBUG"):  # pragma: no cover - a bug, not bad input
        raise exc
    print(f"microagg: internal error: {type(exc).__name__}: {exc} (set MICROAGG_DEBUG=1 for a traceback)",
          file=sys.stderr)
    return 1


def entry() -> None:
    """The ``microagg`` command: ``main``, then exit without the interpreter's teardown
    (a third of a second with Polars' and Numba's thread pools and large arrays to
    release). Everything is complete by then: outputs are flushed, synced and renamed
    by the passes, and the standard streams and log handlers are flushed here."""
    # Numba's OpenMP workers would otherwise spin after every parallel loop, taking the
    # CPU from the threads that read, spill and encode meanwhile (the pool starts at the
    # first parallel loop, after this). The user's own setting wins.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    # from here on Ctrl-C and SIGTERM end the process quietly (130 / 143), also while
    # the libraries are imported (the first second); ``main`` handles them in commands
    try:
        for sig in (signal.SIGINT, signal.SIGTERM):
            if signal.getsignal(sig) is not signal.SIG_IGN:  # nohup, background jobs: stays ignored
                signal.signal(sig, _on_signal)
        code = _entry_main()
    except KeyboardInterrupt as exc:  # and Terminated
        code = _interrupted(exc)
    except BaseException:  # a Rust panic while the libraries were imported (see ``main``)
        if not received_signals:
            raise
        code = _interrupted(Terminated() if received_signals[0] == signal.SIGTERM else KeyboardInterrupt())
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        logging.shutdown()
        os._exit(code)


def _entry_main() -> int:
    # NumPy asks for transparent huge pages for every array of 4 MiB or more; the kernel
    # then zeroes 2 MiB at each first touch, also of pages the run reads before it
    # writes or never fills, which costs system time on large runs.
    # (NumPy reads the variable when it is imported, which is after this: ``main``'s commands
    # import it; a value the user set wins)
    os.environ.setdefault("NUMPY_MADVISE_HUGEPAGE", "0")
    # the objects of the imports (Numba's, Polars') live as long as the process: out of
    # the collector's way, so its full collections no longer walk them (0.06 s a run)
    gc.freeze()
    return main()


if __name__ == "__main__":  # pragma: no cover
    entry()
