"""A CSV input's memory limit, checked before the file is opened, when that check states
the run's own least limit; else left to the plan after the dictionaries.

The plan (``budget.plan_budget``) depends on what the first passes learn: the rows, the
QIs' types, their missing values and, for text QIs, how many categories each has (a
nominal QI of at most ``ONE_HOT_MAX`` categories takes a column a category, more take
``EMBED_DIMS``; a QI with missing values one more). A refusal must state the least
limit, the one at which the run then succeeds (issue 41 item 2), so a figure planned
before those passes is stated only when it is the figure after them:

* **numeric QIs, none missing** (the centroid methods; no ``--ordinal``, ``--weights``
  or ``--nominal``): every QI value read from the file's first 1,000 records and from
  ``WINDOWS`` windows of ``WINDOW_ROWS`` records spread over the file is a number. The
  plan is then the numeric one, known before the passes but for the rows (from the line
  breaks, ``csv_rows``: the same unless quoted fields hold line breaks, then a little
  more), and a limit below it is refused at once, in under a second at the bare
  interpreter's RSS (about 170 MiB), before the type inference and the row count
  (``tests/test_memory_limit.py``);
* **anything else** (a text QI, a missing value seen, an option that makes the QIs
  mixed, maxent and mnqia whose plan holds their class statistics): nothing is refused
  here. The coordinator's plan after the type inference and the dictionary pass refuses,
  before the partition pass and before anything is written, with the figure a run at it
  accepts; ``microagg plan`` states the same figure, as both plan after the same passes.

Measured (docs/benchmarks.md, "Memory limit asked vs peak RSS"): the refusal of a 400,000-row
census extract CSV with 4 nominal QIs comes after 1.0 s at 308 MiB (before: 0.4 s at 168
MiB) and states 1,640 MiB where the figure planned before the categories were known (each
text QI at its widest) was 2,488 MiB; 3M rows: 4.4 s at 357 MiB, 784 MiB against 1,048
MiB. A refused run's own peak is below the figure it states (a CSV run's least limit counts
the process, ``RUNTIME`` and ``CSV_PASSES``: 380 MiB and more), not always below a limit
under that.

What stays partial: a file whose sampled QI values are complete numbers but which holds a
missing value or a text elsewhere is planned numeric here; its run at the figure stated is
then refused by the plan after the dictionaries, which states the mixed-type figure.
"""

from __future__ import annotations

import csv
import os

from .budget import MiB, plan_budget
from .io.sink import input_files

HEAD_ROWS = 1000    # records read from the start of the file
WINDOWS = 16        # windows read from spread offsets of the file
WINDOW_ROWS = 64    # records a window reads (after the partial record at its offset)


def check_csv_limit(data, cfg, flow, start_rss: int, risk: bool, threads: int) -> None:
    """Refuse (``budget.Refusal``) a limit below a plain UTF-8 ``.csv`` run's least limit
    before the file is opened, when its QIs sample as complete numbers (the module's
    docstring); else return, the plan after the dictionaries deciding."""
    if cfg.memory_limit is None or not cfg.spec.centroids or not hasattr(flow, "per_row") or \
            cfg.ordinal or cfg.weights or getattr(cfg, "nominal", None):
        return
    files = input_files(data)
    if not files or not all(f.lower().endswith(".csv") for f in files) or \
            (cfg.csv is not None and cfg.csv.encoding not in ("utf8", "utf-8", "utf8-lossy")):
        return
    sep = cfg.csv.separator if cfg.csv is not None else ","
    missing = {"", *(cfg.csv.null_values if cfg.csv is not None else ())}
    header = None
    for f in files:  # (every file: another's header or values may differ)
        names = numeric_sample(f, sep, list(cfg.qi), missing)
        if names is None:
            return
        header = header or names
    rows = max(csv_rows(files), 1)
    drop = set(cfg.drop or ())
    # the flow's own budget terms (numeric QIs: no mixed-type state yet), as the run's plan takes them
    plan_budget(flow.budget_cfg, rows, columns=sum(c not in drop for c in header), threads=threads, kind="csv",
                start_rss=start_rss, risk=risk, **flow.budget_args(None, rows))


def numeric_sample(path: str, sep: str, qi: list, missing: set) -> list | None:
    """The header of the CSV file ``path`` when every QI is in it and each QI value of its
    first ``HEAD_ROWS`` records and of ``WINDOWS`` windows spread over it is a number
    (``missing`` texts count as not); else None. The csv module, not Polars: a Polars read
    here would start its thread pool (about 26 MiB) before the limit is looked at. A
    window starts after the first line break at its offset (inside a quoted field it may
    read a record's tail: a text, hence None, the exact plan's way, never a wrong one)."""
    try:
        size = os.path.getsize(path)
        with open(path, newline="", encoding="utf-8-sig", errors="replace") as fh:
            reader = csv.reader(fh, delimiter=sep)
            header = next(reader, [])
            where = [header.index(c) for c in qi]
            records = [row for row, _ in zip(reader, range(HEAD_ROWS))]
        with open(path, "rb") as raw:
            for w in range(1, WINDOWS + 1):
                raw.seek(size * w // (WINDOWS + 1))
                raw.readline()
                lines = [raw.readline().decode("utf-8", "replace") for _ in range(WINDOW_ROWS)]
                records += list(csv.reader([line for line in lines if line], delimiter=sep))
    except (OSError, csv.Error, ValueError):  # (open_source names the problem)
        return None
    for row in records:
        if not row:  # (a blank line)
            continue
        if len(row) != len(header):  # (a record cut by a window's offset, or a bad one: the passes decide)
            return None
        if any(not is_number(row[j]) or row[j] in missing for j in where):
            return None
    return header


def is_number(text: str) -> bool:
    """Whether a CSV field reads as a number (as Polars' cast to Float64 would take it:
    not Python's ``1_000``, nor ``nan`` or ``inf``, which the passes refuse in a QI)."""
    if "_" in text or text != text.strip():
        return False
    try:
        value = float(text)
    except ValueError:
        return False
    return value - value == 0.0


def csv_rows(paths) -> int:
    """The rows of CSV files with a header, at most: their line breaks (a quoted line
    break counts too), read 4 MiB at a time (no parsing, no Polars)."""
    rows = 0
    for f in paths:
        lines, last = 0, b"\n"
        try:
            with open(f, "rb") as fh:
                while True:
                    buf = fh.read(4 * MiB)
                    if not buf:
                        break
                    lines += buf.count(b"\n")
                    last = buf[-1:]
        except OSError:  # (the passes name the file)
            continue
        rows += max(0, lines + (last != b"\n") - 1)
    return rows
