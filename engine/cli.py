"""The ``microagg`` command: parse, validate, call the coordinator, render the report.

Exit codes: 0 success, 2 bad input or settings (one line on stderr, nothing
written), 130 interrupted (SIGINT), 143 terminated (SIGTERM; both remove the
temporary files and leave nothing at OUTPUT), 1 unexpected internal error, a run
whose output failed its own verification (nothing written), or (``verify``) a
guarantee that does not hold.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import logging
import os
import signal
import sys
import threading
import time

from .options import REFINE_MODES, RunConfig
from .methods import METHODS
from .errors import EngineError, Terminated, VerificationError, check_signals, received_signals
from .progress import CompileNotice

DEMO_EPSILON = 2.5  # demo --method maxent: bits of occupation entropy per class (the table has 3.27)
DEMO_QI = ("age", "education_years", "hours_per_week", "wage_income", "other_income",
           "property_tax", "household_size", "commute_minutes")


def _add_bin_args(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--width", type=float, default=None, help="histogram bin width for numeric columns (Oommen & Fayyoumi)")
    g.add_argument("--bins", type=int, default=None, help="histogram bins per numeric column (default 10)")


def _add_csv_args(p: argparse.ArgumentParser, what: str = "INPUT") -> None:
    g = p.add_argument_group("CSV input", f"how a CSV {what} is read (refused for other inputs); "
                                          f"a .csv.gz is decompressed to a private temporary file")
    g.add_argument("--separator", default=None, metavar="CHAR",
                   help="field separator, e.g. ';' or tab (default ',')")
    g.add_argument("--null-values", default=None, metavar="LIST",
                   help="comma-separated texts read as missing, e.g. NA,-  (an empty field always is)")
    g.add_argument("--encoding", default=None, metavar="NAME",
                   help="utf8 (default), utf8-lossy, or any Python codec such as latin-1 or cp1252 "
                        "(transcoded to a private temporary file first)")


def _csv_kw(args) -> dict:
    """The CSV options of ``args`` as keyword arguments of the API functions."""
    return {"separator": args.separator, "null_values": args.null_values, "encoding": args.encoding}


def _csv(args):
    from .io.source import CsvOptions

    return CsvOptions.make(**_csv_kw(args))


def _add_method_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--k", type=int, default=None,
                   help="minimum group size (default 3; maxent: none unless given)")
    p.add_argument("--method", choices=METHODS, default="mdav",
                   help="microaggregation method (default mdav); maxent / mnqia generalize to ranges")
    p.add_argument("--sa", default=None, help="sensitive attribute for --method maxent (demo: occupation)")
    p.add_argument("--epsilon", type=float, default=None,
                   help="maxent: minimum class entropy in bits (default: the table's SA entropy)")
    p.add_argument("--numeric-output", choices=("range", "mean"), default=None,
                   help="maxent / mnqia: numeric QIs as <col>_min/<col>_max (default) or the class mean")
    p.add_argument("--ordinal", action="append", default=None, metavar="COL=CAT1,CAT2,...",
                   help="an ordinal quasi-identifier and its categories in order (repeatable); COL alone: an "
                        "Enum column's own order; COL=@NUMCOL: ordered by a numeric column (e.g. education_num)")
    p.add_argument("--weights", default=None, metavar="COL=W,...",
                   help="weights of quasi-identifiers in the mixed distance (default 1 each)")
    p.add_argument("--gamma", type=float, default=None,
                   help="gamma of vmdav (default 0.2) or ivmdav (default 1.16)")
    p.add_argument("--threads", type=int, default=None, help="Numba threads (default: all cores)")
    p.add_argument("--memory-limit", metavar="SIZE", default=None,
                   help="limit on peak memory, e.g. 1GiB or 512MiB: sizes blocks, chunks and CSV reads; a limit "
                        "below what the run needs is refused naming the minimum (default: no limit)")
    p.add_argument("--block-size", type=int, default=None, metavar="ROWS",
                   help="rows per spatial block (default 20000; a table this small runs as one exact block)")
    p.add_argument("--leaf-size", type=int, default=None, metavar="ROWS",
                   help="with several blocks, run the method on leaves of at most ROWS rows cut from each "
                        "block by median splits (default when polished 32768 at k <= 3, 8192 from k = 5; else 256; "
                        "0: on whole blocks)")
    p.add_argument("--polish-rounds", type=int, default=None, metavar="N",
                   help="streamed runs: at most N rounds of moves/swaps among nearest groups, ending early at "
                        "a round gaining < 1%% of the SSE (default 32 up to 2M rows; 0 above, with leaves of 256; "
                        "0: off)")
    p.add_argument("--refine", choices=REFINE_MODES, default=None,
                   help="improve the partition: local moves/swaps, or the genetic hybrid (default: none)")
    p.add_argument("--refine-rounds", type=int, default=None, metavar="N", help="cap on refinement rounds")
    p.add_argument("--refine-budget", type=float, default=None, metavar="SECONDS",
                   help="cap on refinement seconds (not reproducible across machines; prefer --refine-rounds)")
    p.add_argument("--select", choices=("emad",), default=None,
                   help="group on the top --select-count attributes of the dependency tree (Oommen & Fayyoumi's EMAD)")
    p.add_argument("--select-count", type=int, default=None, metavar="N", help="key attributes for --select")
    p.add_argument("--measure", choices=("mi-distance", "emim", "chi2", "gaussian"), default=None,
                   help="dependence measure for ama / --select (default mi-distance for ama, emim for emad)")
    _add_bin_args(p)
    p.add_argument("--seed", type=int, default=None,
                   help="seed of the randomized steps (--refine ga, maxent) and of the demo's data (default 0)")
    p.add_argument("--chunk-rows", type=int, default=100_000, help="rows per streamed chunk (default 100000)")
    p.add_argument("--report", metavar="FILE", help="also write the report as JSON to FILE")
    p.add_argument("--progress", dest="progress", action="store_true", default=None,
                   help="show progress bars (default: when stderr is a terminal)")
    p.add_argument("--no-progress", dest="progress", action="store_false")
    p.add_argument("--quiet", action="store_true", help="do not print the summary")


def _version() -> str:
    from . import __version__  # the installed package's (single source: pyproject.toml)

    return __version__


class _VersionAction(argparse.Action):
    """``--version``: ``microagg <version>`` (the package metadata read only when asked)."""

    def __init__(self, option_strings, dest, **kw):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kw)

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"microagg {_version()}")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="microagg", description="k-anonymity by microaggregation (MDAV family).")
    parser.add_argument("--version", action=_VersionAction, help="print the version and exit")
    sub = parser.add_subparsers(dest="command", required=True)

    a = sub.add_parser("anonymize", help="anonymize a CSV/Parquet table",
                       description="Replace the quasi-identifiers of each group of at least k similar rows by "
                                   "the group's mean; other columns pass through unchanged.")
    a.add_argument("input", help="CSV or Parquet file, folder of Parquet files, or glob")
    a.add_argument("output", help="output file (.csv or .parquet); written only when complete")
    a.add_argument("--qi", required=True, help="comma-separated quasi-identifier columns (numeric)")
    a.add_argument("--group-column", metavar="NAME", help="add each row's group id as column NAME")
    a.add_argument("--tmp-dir", help="folder for temporary files (default: beside OUTPUT)")
    a.add_argument("--scheduler", metavar="ADDRESS", default=None,
                   help="run the passes as tasks on a Dask cluster: tcp://HOST:PORT of its scheduler, or 'local' "
                        "for a LocalCluster here (Parquet in and out; --tmp-dir shared with the workers; "
                        "needs pip install 'microagg-engine[dask]')")
    a.add_argument("--risk", action="store_true",
                   help="after writing, measure disclosure risk (DBRL, interval disclosure) into the report")
    a.add_argument("--html", metavar="FILE",
                   help="also write the release report as one self-contained HTML page with figures "
                        "(needs pip install 'microagg-engine[html]')")
    _add_method_args(a)
    _add_csv_args(a)

    d = sub.add_parser("demo", help="run the main job on a built-in synthetic census-like table",
                       description="Generate a seeded census-like table and microaggregate its 8 numeric "
                                   "quasi-identifiers.")
    d.add_argument("--rows", type=int, default=200_000, help="rows to generate (default 200000)")
    d.add_argument("--output", help="also write the anonymized table here (.csv or .parquet)")
    _add_method_args(d)
    pr = sub.add_parser("profile", help="dependency matrix, tree and key attributes of some columns",
                        description="Entropy / mutual-information profile of the columns (seeds 000 and 004): "
                                    "the dependency matrix, its spanning tree, vertex degrees, key attributes.")
    pr.add_argument("input", help="CSV or Parquet file, folder of Parquet files, or glob")
    pr.add_argument("--columns", required=True, help="comma-separated columns (any type)")
    pr.add_argument("--measure", choices=("mi-distance", "emim", "chi2", "gaussian"), default="mi-distance",
                    help="mi-distance: minimum spanning tree (Sun et al.); others: maximum (Oommen & Fayyoumi)")
    _add_bin_args(pr)
    pr.add_argument("--binning", choices=("equal", "quantile"), default="equal")
    pr.add_argument("--select-count", type=int, default=None, metavar="N",
                    help="key attributes: top N by degree (EMAD); default Definition 5 of Sun et al.")
    pr.add_argument("--threads", type=int, default=None)
    pr.add_argument("--json", metavar="FILE", help="also write the profile as JSON")
    _add_csv_args(pr)

    v = sub.add_parser("verify", help="check a release's guarantees (k-anonymity, l-diversity, unchanged columns)",
                       description="Independently re-check a published table: class sizes, SA diversity and, "
                                   "with --original, row count, unchanged non-QI columns and information loss. "
                                   "Exit 0 when every guarantee holds, 1 when one fails, 2 on bad input.")
    v.add_argument("output", help="the release: CSV or Parquet file, folder of Parquet files, or glob")
    v.add_argument("--qi", required=True, help="comma-separated quasi-identifiers (c, or c_min/c_max ranges)")
    v.add_argument("--k", type=int, required=True, help="minimum class size to check")
    v.add_argument("--sa", default=None, help="sensitive attribute, with --l or --epsilon")
    vg = v.add_mutually_exclusive_group()
    vg.add_argument("--l", type=int, default=None, help="l-diversity: distinct SA values per class")
    vg.add_argument("--epsilon", type=float, default=None, help="entropy l-diversity: class SA entropy in bits")
    v.add_argument("--original", metavar="INPUT", default=None,
                   help="the table the release was made from: check rows and non-QI columns, report IL")
    v.add_argument("--mixed", action="store_true",
                   help="a mixed-type MDAV release: categorical QIs hold one category each (not a set); "
                        "with --original, information loss per type")
    v.add_argument("--ordinal", action="append", default=None, metavar="COL=CAT1,CAT2,...",
                   help="with --mixed: an ordinal QI's order (as for anonymize; implies --mixed)")
    v.add_argument("--chunk-rows", type=int, default=100_000, help="rows per streamed chunk (default 100000)")
    v.add_argument("--json", metavar="FILE", help="also write the result as JSON")
    _add_csv_args(v, "--original")

    r = sub.add_parser("risk", help="disclosure risk of a release: DBRL and interval disclosure",
                       description="Distance-based record linkage and interval disclosure of MASKED against "
                                   "ORIGINAL on the quasi-identifiers (rows in the same order; categorical "
                                   "ones compared as categories).")
    r.add_argument("original", help="the original table (CSV/Parquet)")
    r.add_argument("masked", help="the release (CSV/Parquet), rows in the original's order")
    r.add_argument("--qi", required=True, help="comma-separated quasi-identifiers")
    r.add_argument("--p", type=float, default=0.05,
                   help="interval disclosure half-width in standard deviations (default 0.05)")
    r.add_argument("--ordinal", action="append", default=None, metavar="COL=CAT1,CAT2,...",
                   help="an ordinal QI of a mixed-type release and its order (as for anonymize); other "
                        "categorical QIs are compared as categories")
    r.add_argument("--chunk-rows", type=int, default=100_000, help="rows per streamed chunk (default 100000)")
    r.add_argument("--json", metavar="FILE", help="also write the result as JSON")
    _add_csv_args(r, "ORIGINAL")
    h = sub.add_parser("report", help="the release report of a saved JSON report as an HTML page",
                       description="Build the self-contained HTML release report from a JSON report written "
                                   "by anonymize --report (no re-run).")
    h.add_argument("json", metavar="REPORT", help="a JSON report written by microagg anonymize --report")
    h.add_argument("--html", metavar="FILE", required=True,
                   help="write the page here (needs pip install 'microagg-engine[html]')")
    return parser


def _write_json(path, text: str) -> None:
    from .io.sink import atomic_output

    with atomic_output(path) as tmp:
        with open(tmp, "w") as fh:
            fh.write(text)


def _inputs(*data) -> tuple[str, ...]:
    """The files behind the command's inputs (paths, folders, globs)."""
    from .io.sink import input_files

    return tuple(f for d in data if d is not None for f in input_files(d))


def _check_json(args, *inputs) -> None:
    """``--json`` of verify / risk / profile: checked before any work."""
    if args.json:
        from .io.sink import check_side_output

        check_side_output("--json", args.json, _inputs(*inputs))


def _cmd_verify(args) -> int:
    from .audit.verify import verify_release

    _check_json(args, args.output, args.original)
    res = verify_release(args.output, args.qi, args.k, sa=args.sa, l=args.l, epsilon=args.epsilon,
                         original=args.original, chunk_rows=args.chunk_rows, mixed=args.mixed,
                         ordinal=args.ordinal, **_csv_kw(args))
    if args.json:
        _write_json(args.json, res.to_json())
    print(res.summary())
    if not res.ok:
        print(f"microagg: verify failed: {'; '.join(c['name'] for c in res.failures)}", file=sys.stderr)
    return 0 if res.ok else 1


def _cmd_risk(args) -> int:
    from .audit.risk import disclosure_risk

    _check_json(args, args.original, args.masked)
    res = disclosure_risk(args.original, args.masked, args.qi, p=args.p, chunk_rows=args.chunk_rows,
                          ordinal=args.ordinal,
                          **_csv_kw(args))
    if args.json:
        _write_json(args.json, res.to_json())
    print(res.summary())
    return 0


def _anonymize_risk(args, cfg, group):
    """Disclosure risk of a finished run, on the QIs that are numeric in the input. It
    reads the output from its temporary file, before the commit: a risk step that
    fails or is interrupted leaves nothing."""
    from .api import numeric_qi
    from .audit.risk import disclosure_risk
    from .io.sink import written_source

    numeric = numeric_qi(args.input, cfg, args.tmp_dir)
    if not numeric:
        return None
    masked = written_source(group.temp(args.output), args.output)
    return disclosure_risk(args.input, masked, numeric, chunk_rows=args.chunk_rows,
                           ordinal=cfg.ordinal if cfg.spec.centroids else None, **_csv_kw(args))


def _cmd_profile(args) -> int:
    from . import select as dependency
    from .report import json_text

    _check_json(args, args.input)
    cols = [c.strip() for c in args.columns.split(",")] if args.columns.strip() else []
    res = dependency.profile(args.input, cols, args.measure, width=args.width, bins=args.bins,
                             binning=args.binning, count=args.select_count, threads=args.threads,
                             **_csv_kw(args))
    if args.json:
        _write_json(args.json, json_text(res.to_dict()))
    print(res.render())
    return 0


def _settings(args, qi, seed=None) -> RunConfig:
    """The run's settings from the command line (``seed``: the demo's)."""
    from .methods import REGISTRY

    progress = args.progress if args.progress is not None else sys.stderr.isatty()
    k = args.k if args.k is not None else (3 if REGISTRY[args.method].needs_k else None)
    return RunConfig.make(qi=qi, k=k, method=args.method, gamma=args.gamma,
                          group_column=getattr(args, "group_column", None), threads=args.threads,
                          chunk_rows=args.chunk_rows, progress=progress, memory_limit=args.memory_limit,
                          block_size=args.block_size, leaf_size=args.leaf_size, refine=args.refine,
                          refine_rounds=args.refine_rounds, refine_seconds=args.refine_budget, polish_rounds=args.polish_rounds,
                          seed=args.seed if seed is None else seed, select=args.select,
                          select_count=args.select_count, select_measure=args.measure, width=args.width,
                          bins=args.bins, sa=args.sa, epsilon=args.epsilon,
                          numeric_output=args.numeric_output, ordinal=args.ordinal, weights=args.weights,
                          csv=_csv(args) if hasattr(args, "separator") else None,
                          scheduler=getattr(args, "scheduler", None))


def _start_group(stack, args, inputs, output, output_option="OUTPUT"):
    """Check OUTPUT, ``--report`` and ``--html`` before any work and open the commit
    group that renames them together (``io.sink.CommitGroup``); returns ``(group,
    report temp)`` (the page's temporary file is ``args.html_tmp``)."""
    from .io.sink import CommitGroup, check_destination, check_side_output

    if output is not None:
        check_destination(output, inputs, folder=getattr(args, "scheduler", None) is not None)
    group = stack.enter_context(CommitGroup())
    report_tmp = None
    if args.report:
        check_side_output("--report", args.report, inputs, [(output_option, output)])
        report_tmp = group.add(args.report, side=True)
    args.html_tmp = None
    if getattr(args, "html", None):
        _start_prerender(stack, args)
        check_side_output("--html", args.html, inputs, [(output_option, output), ("--report", args.report)])
        args.html_tmp = group.add(args.html, side=True)
    return group, report_tmp


def _start_prerender(stack, args) -> None:
    """With ``--html``: the page's worker (``html_report.Prerender``, ``args.html_prerender``),
    once. ``anonymize`` starts it first thing, so that its imports (matplotlib: a third
    of a CPU-second) run on the core this process leaves idle while it imports Polars
    and Numba, rather than beside the partition pass's threads."""
    if getattr(args, "html", None) and getattr(args, "html_prerender", None) is None:
        from . import html_report

        html_report.require_matplotlib()
        args.html_prerender = stack.enter_context(contextlib.closing(html_report.Prerender()))


def _finish(group, report_tmp, report, args) -> None:
    """Write the report to its temporary file, then commit it with OUTPUT: both in
    place, or (an error, an interrupt) neither."""
    html = getattr(args, "html_tmp", None) is not None
    if html:
        page_report = report.to_dict()
        args.html_prerender.request(page_report)  # drawn by the worker while the JSON report is written
    if report_tmp is not None:
        report.write_json(report_tmp, args.report)
    if html:
        from . import html_report

        html_report.write(page_report, args.html_tmp, args.html, args.html_prerender)
    group.commit()


def _cmd_anonymize(args) -> int:
    with contextlib.ExitStack() as stack:
        _start_prerender(stack, args)  # (before the imports below: they overlap the worker's)
        from .coordinator import run

        cfg = _settings(args, args.qi)  # every option checked against the method before any work
        inputs = _inputs(args.input)
        group, report_tmp = _start_group(stack, args, inputs, args.output)
        result = run(args.input, cfg, args.output, tmp_dir=args.tmp_dir, group=group,
                     distributions=args.html_prerender.ahead if args.html else bool(args.report))
        result.report.input = args.input
        risk = None
        if args.risk:  # the output is complete, not yet in place: it reads the input and the output
            risk = _anonymize_risk(args, cfg, group)
            result.report.risk = risk.to_dict() if risk is not None else None
        _finish(group, report_tmp, result.report, args)
    if not args.quiet:
        print(result.report.summary(), file=sys.stderr)
    return 0


def _cmd_demo(args) -> int:
    from .coordinator import run
    from .synth import census_like

    from .methods import REGISTRY

    if args.rows < 1:
        raise EngineError(f"--rows must be positive, got {args.rows}")
    spec = REGISTRY[args.method]
    # --seed always seeds the demo's data; the run takes it where a step is randomized
    randomized = args.refine == "ga" if spec.centroids else "seed" in spec.options
    seed = args.seed if randomized else None
    if spec.needs_sa and args.sa is None:  # maxent: the demo's occupation (3.27 bits), 2.5 bits per class
        args.sa = "occupation"
        args.epsilon = DEMO_EPSILON if args.epsilon is None else args.epsilon
    cfg = _settings(args, ",".join(DEMO_QI), seed=seed)
    args.seed = 0 if args.seed is None else args.seed
    with contextlib.ExitStack() as stack:
        group, report_tmp = _start_group(stack, args, (), args.output, "--output")
        t = time.perf_counter()
        frame = census_like(args.rows, seed=args.seed)
        if not args.quiet:
            print(f"demo: generated {frame.height:,} census-like rows in {time.perf_counter() - t:.2f} s "
                  f"(seed {args.seed}); quasi-identifiers: {', '.join(DEMO_QI)}", file=sys.stderr)
        result = run(frame, cfg, args.output, tmp_dir=None, group=group)
        _finish(group, report_tmp, result.report, args)
    if not args.quiet:
        print(result.report.summary(), file=sys.stderr)
        print(json.dumps({k: v for k, v in result.report.to_dict().items()
                          if k in ("rows", "groups", "min_group_size", "max_group_size",
                                   "information_loss_percent", "wall_seconds", "peak_rss_bytes")}))
    return 0


def _cmd_report(args) -> int:
    from . import html_report
    from .io.sink import atomic_output, check_side_output

    html_report.require_matplotlib()
    check_side_output("--html", args.html, (args.json,))
    report = html_report.load_report(args.json)
    with atomic_output(args.html) as tmp:
        html_report.write(report, tmp, args.html)
    print(f"microagg: wrote {args.html}", file=sys.stderr)
    return 0


COMMANDS = {"anonymize": _cmd_anonymize, "demo": _cmd_demo, "profile": _cmd_profile, "verify": _cmd_verify,
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
      (seen once: a Ctrl-C half a second into ``demo`` on a loaded machine ended in a
      ``PanicException`` and exit 1). Called from our code it is safe, but the frame
      does not say who called it: the interrupt then waits for our own code.

    Returns ``(files, folders)``; the folders are found without importing the packages."""
    import concurrent.futures._base
    import importlib.util
    import queue

    files = frozenset([*(m.__file__ for m in (threading, queue, concurrent.futures._base)),
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


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="microagg: %(message)s")
    try:
        # a signal that came before the command (``entry``'s handler, while NumPy was
        # imported: an extension module can turn the interrupt into a swallowed ImportError)
        check_signals()
        # a first run compiles the kernels (seconds, then cached): say so, once
        with _signals_as_interrupts(), CompileNotice(enabled=not getattr(args, "quiet", False)):
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
    if isinstance(exc, EngineError):
        print(f"microagg: error: {exc}", file=sys.stderr)
        return 2
    if os.environ.get("MICROAGG_DEBUG"):  # pragma: no cover - a bug, not bad input
        raise exc
    print(f"microagg: internal error: {type(exc).__name__}: {exc} (set MICROAGG_DEBUG=1 for a traceback)",
          file=sys.stderr)
    return 1


def _no_huge_pages() -> None:
    try:
        from numpy._core.multiarray import _set_madvise_hugepage
    except ImportError:  # pragma: no cover - another NumPy layout: keep its default
        return
    _set_madvise_hugepage(False)


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
    # writes or never fills. Without: 0.4-0.5 CPU-s less system time per 10M-row
    # run. NUMPY_MADVISE_HUGEPAGE, if the user set it, wins.
    if "NUMPY_MADVISE_HUGEPAGE" not in os.environ:
        _no_huge_pages()
    # the objects of the imports (Numba's, Polars') live as long as the process: out of
    # the collector's way, so its full collections no longer walk them (0.06 s a run)
    gc.freeze()
    return main()


if __name__ == "__main__":  # pragma: no cover
    entry()
