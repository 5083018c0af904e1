"""One release: the run, then its disclosure risk, the JSON report and the HTML page,
committed together. The API's ``anonymize`` and the CLI's ``anonymize`` and ``demo``
all finish a release here.

Everything is checked before any work: OUTPUT, ``report`` and ``html`` must not be
an input, nor each other, and their folders must be writable. The output, the report
and the page are written to temporary files and renamed together
(``io.sink.CommitGroup``): after a successful return all are in place; after an
error or an interrupt none was written (a file any of them replaced is restored).
The disclosure risk is measured on the finished output before it is renamed, so a
failing risk step leaves nothing either (its ``weight_column`` is checked up front:
given with ``risk`` only, a numeric column of the input and no QI). So does the run's leak guard
(``passes.leak``: a pass-through column that corresponds one-to-one with a QI is
refused before any heavy work), and the write pass's self-check, which counts the
classes with the ``--derived`` columns among the published ones.

The risk counts every column an intruder holds beside the QIs (``risk_key``: the strata
and the ``--derived`` columns), and with ``max_risk`` holds it to thresholds
(``audit.verdict``): a measure above its threshold leaves OUTPUT out of the commit
(``CommitGroup.withdraw``) while the report and the page, which say why, are committed;
then ``RiskAboveThreshold`` is raised (the CLI exits 1). The report's wall time includes
the risk step (``passes["risk"]``).

OUTPUT ``-`` (``io.sink.STDOUT``): the output is written as CSV to a private file
in a private folder (in ``tmp_dir``, else the system's temporary folder) and copied
to the standard output by the commit, after every check passed; ``report`` or
``html`` ``-`` write to the standard output the same way (one of them at most).
"""

from __future__ import annotations

import contextlib
import os
import time

from . import html_report
from .audit import risk, verdict
from .encode.kinds import is_number
from .coordinator import RunResult
from .entities import run  # (coordinator.run, or by person or household)
from .io.labelled import check_stat_output, stat_output, write_release
from .io.sink import (STDOUT, CommitGroup, check_destination, check_side_output, check_tmp_dir, input_files,
                      written_source)
from .io.locate import locate
from .io.source import open_source
from .io.tempfiles import input_label, private_folder
from .errors import EngineError
from .options import OPTIONS, RunConfig
from .passes.partition import strata_columns
from .report import PeakRSS


def release(data, dest, cfg: RunConfig, *, output_option: str = "OUTPUT",
            prerender: "html_report.Prerender | None" = None) -> RunResult:
    """Anonymize ``data`` into ``dest`` (None: the table is returned, not written) with
    ``cfg``, and finish the release its options ask for (``risk``, ``report``, ``html``).

    ``output_option``: how the caller names ``dest`` in an error line; ``prerender``: the page's worker, if the caller started it early (its imports then
    overlap the caller's)."""
    data = locate(data)  # the input path resolved once: the checks, the run and the risk take its files
    check_release(data, dest, cfg, output_option)
    dest = None if dest is None else os.fspath(dest)
    with CommitGroup() as group, contextlib.ExitStack() as stack:
        report_tmp = html_tmp = None
        if dest == STDOUT:  # a private file, copied to the standard output by the commit
            check_tmp_dir(cfg.tmp_dir)
            dest = os.path.join(stack.enter_context(private_folder(cfg.tmp_dir)), "stdout.csv")
            group.redirect(dest)
        if cfg.report is not None:
            report_tmp = group.add(cfg.report, side=True)
        if cfg.html is not None:
            html_tmp = group.add(cfg.html, side=True)
            if prerender is None:
                prerender = html_report.Prerender()
            stack.enter_context(contextlib.closing(prerender))
        stat = stat_output(dest)  # .sav / .dta: the run writes Parquet, converted with the input's labels
        run_dest = dest
        if stat is not None:
            meta = check_stat_output(data, dest, stat, cfg.memory_limit)
            run_dest = os.path.join(stack.enter_context(private_folder(cfg.tmp_dir)), "release.parquet")
        with PeakRSS() as peak:  # the run's and the risk's (the run measures its own)
            result = run(data, cfg, run_dest, tmp_dir=cfg.tmp_dir, group=group,
                         distributions=prerender.ahead if html_tmp is not None else cfg.report is not None)
            rep = result.report
            rep.input = input_label(data) if isinstance(data, (str, os.PathLike)) else \
                html_report.describe_input(data)
            rep.pass_through = pass_through(result, run_dest, group, cfg)
            if cfg.risk:
                t0 = time.perf_counter()
                rep.risk = _disclosure_risk(data, run_dest, cfg, group)
                rep.passes["risk"] = time.perf_counter() - t0  # (the summary's and the report's wall time)
                rep.wall_seconds += rep.passes["risk"]
            if stat is not None:
                write_release(group.temp(run_dest), group.add(dest), dest, stat, meta, cfg.memory_limit)
        rep.peak_rss_bytes = max(rep.peak_rss_bytes, int(peak.peak))
        failed = rep.risk is not None and rep.risk.get("verdict") and not rep.risk["verdict"]["passed"]
        if failed and dest is not None:  # the report and the page say why; nothing at OUTPUT
            group.withdraw(dest)
        if html_tmp is not None:
            page_report = rep.to_dict()
            prerender.request(page_report)  # drawn by the worker while the JSON report is written
        if report_tmp is not None:
            rep.write_json(report_tmp, cfg.report)
        if html_tmp is not None:
            html_report.write(page_report, html_tmp, cfg.html, prerender)
        group.commit()
    if failed:
        raise verdict.RiskAboveThreshold(rep.risk["verdict"])
    return result


def check_release(data, dest, cfg: RunConfig, output_option: str = "OUTPUT") -> None:
    """The release's own checks, before any work (``release``, and ``engine.plan``, which
    refuses what the release would): ``weight_column``, ``max_risk``, OUTPUT, ``report``
    and ``html`` (not an input, nor each other; folders writable)."""
    inputs = input_files(data)
    _check_weight_column(data, cfg)
    _check_max_risk(cfg)
    shown = None if dest is None else os.fspath(dest)  # OUTPUT as given (``-``), for the error lines
    if dest is not None:
        dest = os.fspath(dest)
        if dest == STDOUT and cfg.scheduler is not None:
            raise EngineError(f"{output_option} {STDOUT}: the standard output takes CSV; scheduler "
                              f"(--scheduler) writes Parquet files (name a .parquet OUTPUT)")
        check_destination(dest, inputs, folder=cfg.scheduler is not None)
    if cfg.report is not None:
        check_side_output("--report", cfg.report, inputs, [(output_option, shown)])
    if cfg.html is not None:
        html_report.require_matplotlib("--html")
        check_side_output("--html", cfg.html, inputs, [(output_option, shown), ("--report", cfg.report)])


def _disclosure_risk(data, dest, cfg: RunConfig, group: CommitGroup) -> dict | None:
    """Disclosure risk of a finished run, read from the output's temporary file (before
    the commit), on the QIs ``risk_qi`` names and the columns ``risk_key`` adds (in the
    measures and in the classes' key); None when there are none."""
    qi = risk_qi(data, cfg)
    if not qi or dest is None:
        return None
    key = [c for c in risk_key(cfg) if c not in qi]
    masked = written_source(group.temp(dest), dest)
    return risk.disclosure_risk(data, masked, qi + key, chunk_rows=cfg.chunk_rows,
                                ordinal=cfg.ordinal if cfg.spec.centroids else None, separator=cfg.separator,
                                null_values=cfg.null_values, encoding=cfg.encoding, weight_column=cfg.weight_column,
                                classes_on=list(dict.fromkeys(list(cfg.qi) + key)),
                                household_column=getattr(cfg, "household_column", None),
                                max_risk=getattr(cfg, "max_risk", None), nominal=cfg.nominal, missing=cfg.missing,
                                numeric=cfg.numeric).to_dict()  # (with a statistical file's declarations)


def pass_through(result: RunResult, dest, group: CommitGroup, cfg: RunConfig) -> list[str] | None:
    """The columns the release publishes unchanged (the report's ``pass_through``): the
    output's columns but the QIs (and their ``_min``/``_max`` ranges), the ``derived``
    columns (recomputed) and the group column; None when the output is not known."""
    if dest is not None:
        with written_source(group.temp(dest), dest) as out:
            columns = list(out.columns)
    elif getattr(result, "table", None) is not None and hasattr(result.table, "columns"):
        columns = list(result.table.columns)
    else:
        return None
    published = set(cfg.qi) | {f"{c}_{end}" for c in cfg.qi for end in ("min", "max")}
    published |= {c for c, _ in cfg.derived or ()} | {cfg.group_column}
    return [c for c in columns if c not in published]


def risk_key(cfg: RunConfig) -> list[str]:
    """The columns an intruder holds beside the QIs: those published unchanged, or
    recomputed from a QI, that are also in the original: the strata and the ``derived``
    columns (as published). Person and household ids are not: an id is a label the
    intruder does not hold, and one unique to a record would make every class a single
    record; households enter through the household risk (docs/guide.md)."""
    return list(dict.fromkeys(list(strata_columns(cfg)) + [c for c, _ in cfg.derived or ()]))


def _check_max_risk(cfg: RunConfig) -> None:
    """``max_risk``: with ``risk`` only, its measures and thresholds valid: before any work."""
    given = getattr(cfg, "max_risk", None)
    if given is None:
        return
    if not cfg.risk:
        raise EngineError(f"{OPTIONS['max_risk'].label} takes effect only with risk (--risk): the thresholds are "
                          f"held against the measured risk")
    verdict.parse_max_risk(given, weights=cfg.weight_column is not None,
                           households=getattr(cfg, "household_column", None) is not None)


def _check_weight_column(data, cfg: RunConfig) -> None:
    """``weight_column``: with ``risk`` only, and a numeric column of the input that is no
    QI (its values are checked as the risk reads them): before any work."""
    if cfg.weight_column is None:
        return
    if not cfg.risk:
        raise EngineError(f"{OPTIONS['weight_column'].label} takes effect only with risk (--risk): the sampling "
                          f"weights are read by the disclosure risk")
    if cfg.encoding not in (None, "utf8", "utf8-lossy"):  # (a transcoded CSV: checked by the risk step, at the end)
        return
    with open_source(data, csv=cfg.csv, tmp_dir=cfg.tmp_dir) as src:
        risk.check_weight_column(src, cfg.weight_column, list(cfg.qi))
        risk.check_weight_values(src, cfg.weight_column, cfg.chunk_rows)  # (before the first pass: one line)


def risk_qi(data, cfg: RunConfig) -> list[str]:
    """The QIs the disclosure risk is measured on: every QI of the MDAV family
    (categorical ones of a mixed-type release compared as categories); maxent's and
    mnqia's numeric ones (their categorical QIs are published as sets)."""
    if cfg.spec.centroids:
        return list(cfg.qi)
    with open_source(data, csv=cfg.csv, tmp_dir=cfg.tmp_dir) as src:
        schema = src.schema
    return [c for c in cfg.qi if c in schema and is_number(schema[c])]
