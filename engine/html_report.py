"""The release report as one self-contained HTML page (``--html``, ``microagg report``).

Built from the report's dict alone (``Report.to_dict()``, or a saved ``--report``
JSON), so a page can be made again later without a run. Figures are drawn by
matplotlib's SVG backend (the optional extra ``microagg-engine[html]``) and
inlined: the page loads nothing, runs no script, and opens offline. Each figure
comes with one sentence on how to read it.
"""

from __future__ import annotations

import hashlib
import html
import importlib.util
import io
import json
import math
import os
import signal
import subprocess
import sys

from .errors import EngineError, first_line

EXTRA = "pip install 'microagg-engine[html]'"
SECTIONS = ("run", "guarantee", "utility", "dependency", "sensitive", "risk")

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;max-width:1100px;margin:2em auto;
padding:0 1em;color:#222;line-height:1.45}
h1{font-size:1.6em;margin-bottom:.2em}h2{border-bottom:2px solid #4472c4;padding-bottom:.2em;margin-top:2em}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:.25em .6em;text-align:left;
vertical-align:top}th{background:#f0f3f8}td.num{text-align:right;font-variant-numeric:tabular-nums}
figure{margin:1em 0;padding:.5em;border:1px solid #e3e3e3;background:#fff}figure svg{max-width:100%;height:auto}
figcaption{font-size:.92em;color:#444;margin-top:.3em}.note{color:#555;font-style:italic}
.bar{display:inline-block;height:.8em;background:#4472c4}
.ok{color:#1a7f37;font-weight:bold}.bad{color:#c0392b;font-weight:bold}
"""

BEFORE, AFTER, ACCENT, KEY = "#9db4d8", "#d9534f", "#4472c4", "#f0a030"


def require_matplotlib(option: str = "--html") -> None:
    """Fail up front, in one line naming the extra, when matplotlib is missing."""
    if importlib.util.find_spec("matplotlib") is None:
        raise EngineError(f"{option} needs matplotlib: {EXTRA}")


def render(report: dict) -> str:
    """The page of ``report`` (a ``Report.to_dict()``), as text."""
    require_matplotlib()
    parts = [_head(report)]
    for name in SECTIONS:
        parts.append(globals()[f"_section_{name}"](report))
    parts.append("</body></html>\n")
    return "\n".join(parts)


def write(report: dict, tmp: str, dest, prerender: "Prerender | None" = None, saved=None) -> None:
    """Render ``report`` into the temporary file ``tmp`` (renamed to ``dest`` by the
    caller's commit); by ``prerender``'s worker when there is one. ``saved``: the path
    of a saved report (``load_report``), which a user may have edited: a value the page
    cannot draw that ``check_fields`` let through is then one line naming the report."""
    if saved is None:
        page = prerender.page(report) if prerender is not None else render(report)
    else:
        try:
            page = render(report)
        except (TypeError, ValueError, KeyError, AttributeError, IndexError, ArithmeticError) as exc:
            raise EngineError(f"REPORT {saved}: cannot draw the page from it ({type(exc).__name__}: "
                              f"{first_line(exc)}); an edited or damaged report?") from None
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(page)
    except OSError as exc:
        # start-up: engine.io loads Polars (about 0.2 s), which the page's worker never needs
        from .io.tempfiles import os_reason

        raise EngineError(f"cannot write {dest}: {os_reason(exc)}") from None


def _worker_env() -> dict:
    """The worker imports this very package: its folder first on the path, the
    current folder not (``PYTHONSAFEPATH``: a local ``engine/`` cannot shadow it)."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONSAFEPATH": "1", "PYTHONPATH": path}


WORKER_NICE = 19  # the worker's niceness (os.nice): it yields to the run's threads


class Prerender:
    """A worker process that draws the page beside the run: started with the run, it
    imports matplotlib while the passes work; it draws the figures whose data is
    known before the write pass (``ahead``, the coordinator's callback: the
    distributions and the group sizes) while that pass runs, and the rest of the
    page at the end (``page``: the times per pass (a table) and the loss per QI, known only
    then). It runs at the lowest priority (``WORKER_NICE``): while the run's threads
    want both cores it waits, and it draws when one is idle (and after the run, when
    the caller waits for it). The page is the same as ``render``'s; if the worker
    fails, ``page`` renders in this process."""

    def __init__(self):
        self._requested = None  # the report whose page was asked for (``request``)
        try:
            self.proc = subprocess.Popen([sys.executable, "-m", "engine.html_report"], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                         encoding="utf-8", env=_worker_env())
        except OSError:
            self.proc = None

    def _send(self, msg: dict) -> bool:
        if self.proc is None:
            return False
        try:
            self.proc.stdin.write(json.dumps(msg) + "\n")
            self.proc.stdin.flush()
            return True
        except (OSError, ValueError):
            self.close()
            return False

    def ahead(self, partial: dict) -> None:
        """Draw the figures of ``partial`` (part of a report: ``AHEAD``'s keys) now."""
        self._send({"ahead": partial})

    def request(self, report: dict) -> None:
        """Ask for the page of ``report`` now (the worker draws it while the caller does
        something else, such as writing the JSON report); ``page(report)`` collects it."""
        self._requested = report if self._send({"page": report}) else None

    def page(self, report: dict) -> str:
        if self._requested is report or self._send({"page": report}):
            self._requested = None
            try:
                answer = json.loads(self.proc.stdout.readline())
                if "page" in answer:
                    return answer["page"]
            except (OSError, ValueError):
                pass
            self.close()
        return render(report)

    def close(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            for f in (proc.stdin, proc.stdout):
                try:
                    f.close()
                except OSError:
                    pass
            if proc.poll() is None:
                proc.kill()
            proc.wait()


def _import_matplotlib() -> None:
    """What drawing a page needs of matplotlib (never pyplot)."""
    import matplotlib.backends.backend_svg  # optional: the [html] extra  # noqa: F401
    import matplotlib.figure  # optional: the [html] extra  # noqa: F401


def _worker() -> None:  # pragma: no cover - run as a process (tests cover it through the CLI)
    """``python -m engine.html_report``: the ``Prerender`` worker's loop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent ends it (closes its input, or kills it)
    try:  # the lowest priority: it draws on the cores the run leaves idle
        os.nice(WORKER_NICE)
    except (AttributeError, OSError):  # (no os.nice on Windows)
        pass
    _import_matplotlib()
    for line in sys.stdin:
        msg = json.loads(line)
        if "ahead" in msg:
            try:
                _ahead(msg["ahead"])
            except Exception:  # drawn again by ``page``, which reports the error
                pass
        elif "page" in msg:
            try:
                answer = {"page": render(msg["page"])}
            except Exception as exc:
                answer = {"error": f"{type(exc).__name__}: {exc}"}
            sys.stdout.write(json.dumps(answer) + "\n")
            sys.stdout.flush()


REQUIRED = ("rows", "groups", "min_group_size", "max_group_size", "qi", "method", "wall_seconds",
            "peak_rss_bytes")


def load_report(path) -> dict:
    """A saved JSON report (``--report``), checked to be one."""
    try:
        with open(path, encoding="utf-8") as fh:
            report = json.load(fh)
    except OSError as exc:
        # start-up: engine.io loads Polars (about 0.2 s), which ``microagg report`` never needs
        from .io.tempfiles import os_reason

        raise EngineError(f"REPORT {path}: cannot read it: {os_reason(exc)}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise EngineError(f"REPORT {path}: not JSON ({exc})") from None
    missing = [k for k in REQUIRED if not isinstance(report, dict) or k not in report]
    if missing:
        raise EngineError(f"REPORT {path}: not a report of microagg anonymize --report "
                          f"(missing {', '.join(missing)})")
    bad = check_fields(report)
    if bad is not None:
        field, want, got = bad
        raise EngineError(f"REPORT {path}: field {field} must be {want}, got {_shown(got)} "
                          f"(an edited or damaged report?)")
    return report


def _shown(value) -> str:
    text = json.dumps(value) if not isinstance(value, float) or math.isfinite(value) else str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


_WANT = {  # kind -> (test, what the message says)
    "count": (lambda v: _is_int(v) and v >= 0, "a whole number >= 0"),
    "num": (_is_num, "a finite number"),
    "str": (lambda v: isinstance(v, str), "a string"),
    "dict": (lambda v: isinstance(v, dict), "an object"),
    "list": (lambda v: isinstance(v, list), "a list"),
    "names": (lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v), "a list of names"),
    "nums": (lambda v: isinstance(v, list) and all(_is_num(x) for x in v), "a list of finite numbers"),
}
# the saved report's fields the page reads: field -> (kind, may it be null)
_FIELDS = {"rows": ("count", False), "groups": ("count", False), "min_group_size": ("count", False),
           "max_group_size": ("count", False), "qi": ("names", False), "method": ("str", False),
           "wall_seconds": ("num", False), "peak_rss_bytes": ("num", False), "k": ("count", True),
           "gamma": ("num", True), "blocks": ("count", True), "input": ("str", True),
           "engine_version": ("str", True), "sse": ("num", True), "sst": ("num", True),
           "information_loss_percent": ("num", True), "settings": ("dict", True), "passes": ("dict", True),
           "verified": ("dict", True), "group_size_counts": ("dict", True), "information_loss_by_qi": ("dict", True),
           "key_attributes": ("names", True), "distributions": ("dict", True), "metrics": ("dict", True),
           "risk": ("dict", True), "strata": ("list", True)}


def check_fields(r: dict):
    """The first field of a saved report the page cannot read, as ``(name, what it must
    be, its value)``, or None: the report is a JSON file a user may have edited
    ("rows": "many" would otherwise fail deep in the page with a formatting error)."""
    def bad(name, value, kind, null=False):
        if value is None and null:
            return None
        test, want = _WANT[kind]
        return None if test(value) else (name, want + (" or null" if null else ""), value)

    def first(*found):
        return next((f for f in found if f is not None), None)

    found = first(*(bad(f'"{name}"', r.get(name), kind, null) for name, (kind, null) in _FIELDS.items()))
    if found:
        return found
    for name, v in (r.get("verified") or {}).items():
        if name in ("rows", "classes", "min_class_size"):
            found = found or bad(f'"verified"."{name}"', v, "count")
    for name, v in (r.get("passes") or {}).items():
        found = found or bad(f'"passes"."{name}"', v, "num")
    for size, n in (r.get("group_size_counts") or {}).items():
        if not size.isdigit():
            found = found or (f'"group_size_counts" key {json.dumps(size)}', "a group size (a whole number)", size)
        found = found or bad(f'"group_size_counts"."{size}"', n, "count")
    for name, v in (r.get("information_loss_by_qi") or {}).items():
        found = found or bad(f'"information_loss_by_qi"."{name}"', v, "num")
    for c, d in (r.get("distributions") or {}).items():
        where = f'"distributions"."{c}"'
        found = found or bad(where, d, "dict")
        if not found and "categories" in d:  # a categorical QI's bars (mixed-type runs)
            found = first(bad(f"{where}.\"categories\"", d.get("categories"), "names"),
                          bad(f"{where}.\"before\"", d.get("before"), "nums"),
                          bad(f"{where}.\"after\"", d.get("after"), "nums"))
            if not found and not len(d["categories"]) == len(d["before"]) == len(d["after"]):
                found = (f"{where}.\"before\"", f"as many values as \"categories\" ({len(d['categories'])})",
                         d["before"])
            continue
        found = found or first(
            bad(f"{where}.\"edges\"", d.get("edges"), "nums"), bad(f"{where}.\"before\"", d.get("before"), "nums"),
            bad(f"{where}.\"after\"", d.get("after"), "nums", True))
        if not found and (len(d["edges"]) != len(d["before"]) + 1 or len(d["before"]) == 0):
            found = (f"{where}.\"edges\"", f"one more value than \"before\" ({len(d['before'])})", d["edges"])
        if not found and d.get("after") is not None and len(d["after"]) != len(d["before"]):
            found = (f"{where}.\"after\"", f"as many values as \"before\" ({len(d['before'])})", d["after"])
    for i, st in enumerate(r.get("strata") or []):
        where = f'"strata"[{i}]'
        found = found or bad(where, st, "dict") or first(
            bad(f'{where}."values"', st.get("values"), "dict"), bad(f'{where}."rows"', st.get("rows"), "count"),
            bad(f'{where}."groups"', st.get("groups"), "count"),
            bad(f'{where}."information_loss_percent"', st.get("information_loss_percent"), "num", True))
    risk = r.get("risk")
    if risk:
        found = found or first(*(bad(f'"risk"."{name}"', risk.get(name), "num") for name in
                                 ("p", "dbrl", "interval_disclosure")), bad('"risk"."qi"', risk.get("qi"), "names", True))
        for name in ("prosecutor", "journalist", "marketer", "individual_risk"):  # the classes' risks
            found = found or bad(f'"risk"."{name}"', risk.get(name), "dict", True)
            for key, v in (risk.get(name) or {}).items() if not found else ():
                found = found or bad(f'"risk"."{name}"."{key}"', v, "num")
    metrics = r.get("metrics") or {}
    dep = metrics.get("dependency")
    if dep:
        found = found or bad('"metrics"."dependency"', dep, "dict") or first(
            bad('"metrics"."dependency"."tree_edges"', dep.get("tree_edges"), "list", True),
            bad('"metrics"."dependency"."edge_weights"', dep.get("edge_weights"), "list", True),
            bad('"metrics"."dependency"."degrees"', dep.get("degrees"), "dict", True),
            bad('"metrics"."dependency"."key_attributes"', dep.get("key_attributes"), "names", True))
        if not found:
            for e in dep.get("tree_edges") or []:
                if not (isinstance(e, list) and len(e) == 2 and all(isinstance(a, str) for a in e)):
                    return ('"metrics"."dependency"."tree_edges"', "a list of pairs of names", e)
            for w in dep.get("edge_weights") or []:
                found = found or bad('"metrics"."dependency"."edge_weights"', w, "num", True)
            for name, v in (dep.get("degrees") or {}).items():
                found = found or bad(f'"metrics"."dependency"."degrees"."{name}"', v, "count")
    hist = metrics.get("entropy_hist")
    if hist:
        found = found or bad('"metrics"."entropy_hist"', hist, "dict") or first(
            bad('"metrics"."entropy_hist"."edges"', hist.get("edges"), "nums"),
            bad('"metrics"."entropy_hist"."classes"', hist.get("classes"), "nums"))
        if not found and len(hist["edges"]) != len(hist["classes"]) + 1:
            found = ('"metrics"."entropy_hist"."edges"', "one more value than \"classes\"", hist["edges"])
        found = found or first(bad('"metrics"."epsilon"', metrics.get("epsilon"), "num", True),
                               bad('"metrics"."table_entropy"', metrics.get("table_entropy"), "num", True))
    return found


def describe_input(data) -> str:
    """What the page names as the input: a path as given, else the kind of table."""
    if isinstance(data, (str, os.PathLike)):
        return os.fspath(data)
    return f"an in-memory {type(data).__module__.split('.')[0]} {type(data).__name__}"


# ------------------------------------------------------------------ helpers

def _e(x) -> str:
    return html.escape(str(x))


def _num(x, digits=4) -> str:
    if x is None:
        return "—"
    if isinstance(x, bool):
        return str(x)
    if isinstance(x, int):
        return f"{x:,}"
    if isinstance(x, float):
        return f"{x:,.{digits}f}" if abs(x) < 1e9 else f"{x:.4g}"
    return _e(x)


def _table(rows, header=None) -> str:
    out = ["<table>"]
    if header:
        out.append("<tr>" + "".join(f"<th>{_e(h)}</th>" for h in header) + "</tr>")
    for row in rows:
        cells = []
        for i, v in enumerate(row):
            if i == 0 and header is None:
                cells.append(f"<th>{_e(v)}</th>")
            else:
                cls = ' class="num"' if isinstance(v, (int, float)) and not isinstance(v, bool) else ""
                cells.append(f"<td{cls}>{v if isinstance(v, _Raw) else _num(v)}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</table>")
    return "\n".join(out)


class _Raw(str):
    """Markup already escaped."""


def _figure(fig, caption: str) -> str:
    """``fig`` (a matplotlib Figure) as inline SVG with its caption."""
    import matplotlib  # optional: the [html] extra

    buf = io.StringIO()
    # fonttype none: text stays text (small, selectable); a salt per kind of figure (its
    # caption) keeps the clip-path ids of several inline SVGs apart; no date: the same
    # report, the same page (also when a figure was drawn ahead by the worker)
    salt = hashlib.sha1(caption.encode()).hexdigest()[:12]
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": salt}):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    svg = buf.getvalue()
    svg = svg[svg.index("<svg"):]
    return f"<figure>{svg}<figcaption>{caption}</figcaption></figure>"


def _fig(w, h, left=1.6, bottom=0.55, top=0.35, right=0.3, **kw):
    """A figure of ``w`` x ``h`` inches with fixed margins in inches (a layout engine
    would measure every label: several times slower)."""
    from matplotlib.figure import Figure  # optional: the [html] extra

    fig = Figure(figsize=(w, h), dpi=100)
    fig.subplots_adjust(left=left / w, right=1 - right / w, bottom=bottom / h, top=1 - top / h, **kw)
    return fig


def _style(ax):
    # (titles are set with y=1.0: a fixed place above the axes, which spares matplotlib
    # measuring the tick labels to lift them, a quarter of a small figure's time)
    ax.spines[["top", "right"]].set_visible(False)
    ax.grid(axis="both", color="#eee", linewidth=0.8)
    ax.set_axisbelow(True)


def _section(name: str, title: str, body: list[str]) -> str:
    return f'<section id="{name}"><h2>{_e(title)}</h2>\n' + "\n".join(body) + "\n</section>"


def _note(text: str) -> str:
    return f'<p class="note">{text}</p>'


# ------------------------------------------------------------------ sections

def _head(r: dict) -> str:
    title = f"microagg release report: {r.get('input') or 'run'} ({r.get('method')}, k={r.get('k')})"
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>{_e(title)}</title>"
            f"<style>{_CSS}</style></head><body>\n<h1>Release report</h1>"
            f"<p>{_e(r.get('input') or 'an in-memory table')}: {r['rows']:,} rows, "
            f"{len(r['qi'])} quasi-identifiers, method <b>{_e(r['method'])}</b>"
            f"{'' if r.get('k') is None else ', k = ' + str(r['k'])}; microagg-engine "
            f"{_e(r.get('engine_version') or '?')}.</p>")


def _section_run(r: dict) -> str:
    settings = {k: v for k, v in (r.get("settings") or {}).items() if v is not None and k not in ("qi", "k", "method")}
    rows = [("input", r.get("input") or "an in-memory table"), ("rows", r["rows"]),
            ("quasi-identifiers", ", ".join(r["qi"])), ("method", r["method"]), ("k", r.get("k")),
            ("settings as given", ", ".join(f"{k}={v}" for k, v in settings.items()) or "defaults"),
            ("blocks", r.get("blocks", 1)),
            ("wall time (s)", r["wall_seconds"]), ("peak memory", _Raw(f"{r['peak_rss_bytes'] / 2 ** 20:,.0f} MiB")),
            ("engine version", r.get("engine_version") or "?")]
    if r.get("gamma") is not None:
        rows.insert(5, ("gamma", r["gamma"]))
    body = [_table(rows)]
    passes = r.get("passes") or {}
    if passes:  # a table, not a figure: known only after the write pass, and the run waits for the page
        wall = r["wall_seconds"] or 0.0
        top = max(passes.values()) or 1.0
        rows = [(name, _Raw(f"{seconds:.2f}"), _Raw(f"{100.0 * seconds / wall:.0f} %" if wall > 0 else "—"),
                 _Raw(f'<span class="bar" style="width:{12.0 * seconds / top:.2f}em"></span>'))
                for name, seconds in passes.items()]
        body.append(_table(rows, header=("pass", "wall time (s)", "share of the run", "")))
        body.append(_note("One row per pass over the data, in order; the bar is the pass's wall time, "
                          "the longest pass the full width."))
    return _section("run", "The run", body)


def _section_guarantee(r: dict) -> str:
    v = r.get("verified") or {}
    k = r.get("k")
    smallest = v.get("min_class_size", r["min_group_size"])
    holds = k is None or smallest >= k
    verdict = ('<span class="ok">holds</span>' if holds else '<span class="bad">does not hold</span>')
    body = [f"<p>k-anonymity as counted from what was written (the write pass's self-check): {_Raw(verdict)}"
            f"{'' if k is None else f' — the smallest published class has {smallest:,} rows, k = {k}'}.</p>",
            _table([("rows written", v.get("rows", r["rows"])), ("published classes", v.get("classes", r["groups"])),
                    ("smallest class (rows)", smallest), ("groups formed", r["groups"]),
                    ("group size range (rows)", f"{r['min_group_size']} .. {r['max_group_size']}")])]
    counts = r.get("group_size_counts") or {}
    if counts:
        body.append(_cached("group_sizes", {"counts": counts, "k": k}, _draw_group_sizes))
    return _section("guarantee", "The guarantee", body)


def _draw_group_sizes(counts: dict, k) -> str:
    sizes = sorted(counts, key=int)
    fig = _fig(7, 2.8, left=1.25)
    ax = fig.add_subplot()
    xs = [int(s) for s in sizes]
    ys = [counts[s] for s in sizes]
    ax.bar(xs, ys, width=0.8 if len(xs) < 60 else 1.0, color=ACCENT)
    if k is not None:
        ax.axvline(k - 0.5, color=AFTER, linestyle="--", linewidth=1.2, label=f"k = {k} (no group left of it)")
        ax.legend(frameon=False, fontsize=8)
    if max(ys) / max(1, min(ys)) > 100:
        from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator  # optional: the [html] extra

        ax.set_yscale("log")
        ax.yaxis.set_major_locator(LogLocator(numticks=6))
        ax.yaxis.set_minor_locator(NullLocator())  # (minor log ticks: most of the figure's time)
        # plain numbers (1,000 rather than 10³): no mathtext to parse, a tenth of the figure's time
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 1 else f"{v:g}"))
        ax.set_ylabel("groups (log scale)")
    else:
        ax.set_ylabel("groups")
    ax.set_xlabel("group size (rows)")
    ax.set_title("Group sizes", y=1.0)
    if len(xs) <= 20:
        ax.set_xticks(xs)
    ax.set_xlim(min(xs[0], k or xs[0]) - 1, xs[-1] + 1)
    _style(ax)
    return _figure(fig, "How to read: each bar counts the groups formed of one size; groups that publish the "
                        "same values are one published class, at least as large (the table above counts them); "
                        "every bar must lie right of the dashed k line.")


# how each kind of QI's loss is measured (a mixed-type run: ``metrics["mixed"]["kinds"]``), and what
# its bar in the loss figure says
KIND_LOSS = {
    "numeric": ("100 · SSE / SST on z-scores", "the share of the column's variance lost by replacing each value by "
                                               "its group's mean"),
    "date": ("100 · SSE / SST on z-scores of the epoch value", "the share of the column's variance lost by "
                                                               "replacing each date by its group's mean date"),
    "nominal": ("the share of values changed", "the share of rows whose category was replaced by its group's "
                                               "most frequent one (mode)"),
    "ordinal": ("the mean rank change, 100 · mean |rank change| / (m − 1)",
                "the mean distance, in ranks, from a row's category to its group's median category, as a share of "
                "the scale's m − 1 steps"),
}
NO_WEIGHTS = "it needs sampling weights (--weight-column COL)"  # (a saved report's risk without its note)
RANGE_METHODS = ("maxent", "mnqia")  # methods that publish ranges (and sets), not means
KIND_COLORS = {"numeric": ACCENT, "date": "#6a8fd0", "nominal": "#5cb85c", "ordinal": "#8e6cc0"}


def _section_utility(r: dict) -> str:
    il = r.get("information_loss_percent")
    mixed = (r.get("metrics") or {}).get("mixed") or {}
    kinds = mixed.get("kinds") or {}
    if kinds:  # a mixed-type run: each QI's loss by its kind
        by_kind = mixed.get("information_loss_by_kind") or {}
        parts = ", ".join(f"{_e(k)} {v:.2f} %" for k, v in by_kind.items())
        body = [f"<p>Information loss: <b>{_num(il)} %</b>, the mean of the quasi-identifiers' losses, each "
                f"measured by its kind" + (f" (mean by kind: {parts})" if parts else "") + ".</p>"]
        rows = []
        for kind, (measure, _) in KIND_LOSS.items():
            names = [c for c, k in kinds.items() if k == kind]
            if names:
                rows.append((kind, ", ".join(names), measure))
        body.append(_table(rows, header=("kind", "quasi-identifiers", "its loss")))
    else:
        body = [f"<p>Information loss IL = 100 · SSE / SST on z-scores: <b>{_num(il)} %</b>"
                + ("" if r.get("sse") is None else f" (SSE {_num(r['sse'])} / SST {_num(r['sst'])})")
                + (" of the numeric QIs around their class means, the loss had each class published its mean "
                   "(comparable with the MDAV family; the release publishes ranges)"
                   if r.get("method") in RANGE_METHODS and il is not None else "") + ".</p>"]
    if il is None:
        body.append(_note("No numeric quasi-identifier: the information loss is not defined."))
    if r.get("strata"):
        body += _strata_table(r["strata"])
    by_qi = r.get("information_loss_by_qi")
    keys = set(r.get("key_attributes") or [])
    if by_qi:
        names = list(by_qi)[::-1]
        fig = _fig(7, 0.32 * len(names) + 1.0, right=1.6)
        ax = fig.add_subplot()
        vals = [by_qi[n] for n in names]
        colors = [KEY if n in keys else KIND_COLORS.get(kinds.get(n), ACCENT) for n in names]
        ax.barh(names, vals, color=colors)
        if il is not None:
            ax.axvline(il, color=AFTER, linestyle="--", linewidth=1.2, label=f"overall {il:.2f} %")
        present = [k for k in KIND_LOSS if k in set(kinds.values())]
        if len(present) > 1:
            for k in present:
                ax.barh([names[0]], [0], color=KIND_COLORS[k], label=k)
        if il is not None or len(present) > 1:  # (beside the bars: inside, it would cover the longest)
            ax.legend(frameon=False, fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0))
        ax.set_xlabel("information loss of the column (%" + (", by its kind)" if kinds else " of its variance)"))
        ax.set_title("Information loss per quasi-identifier", y=1.0)
        _style(ax)
        extra = " Orange bars are the key attributes the groups were formed on." if keys else ""
        if kinds:
            read = "; ".join(f"{k} bars: {KIND_LOSS[k][1]}" for k in present)
            caption = (f"How to read: each bar is one quasi-identifier's loss, by its kind ({read}); 0 % = "
                       f"untouched; the dashed line is the mean over all QIs.")
        elif r.get("method") in RANGE_METHODS:
            caption = ("How to read: each bar is the share of a numeric column's variance that would be lost had "
                       "each class published its mean (this release publishes ranges; 0 % = untouched); the "
                       "dashed line is the loss over all numeric QIs.")
        else:
            caption = ("How to read: each bar is the share of a column's variance lost by replacing its values by "
                       "the group means (0 % = untouched); the dashed line is the loss over all QIs.")
        body.append(_figure(fig, caption + extra))
    else:
        body.append(_note("The loss per quasi-identifier is not measured for this method."))
    dist = r.get("distributions") or {}
    numeric, cats = _numeric(dist), {c: d for c, d in dist.items() if "categories" in d}
    if numeric:
        body.append(_cached("distributions", {"dist": numeric}, _draw_distributions))
    if cats:
        body.append(_draw_categories(cats))
    unseen = [c for c in r.get("qi") or [] if c not in dist]
    if unseen and not dist:
        body.append(_note(_no_distributions(r)))
    elif unseen:
        body.append(_note(f"No distribution of {_e(', '.join(unseen))}: " + _why_unseen(r, unseen) + "."))
    return _section("utility", "Utility", body)


def _numeric(dist: dict) -> dict:
    """The histograms of ``dist`` (numeric QIs: bins with edges), not the categories' bars."""
    return {c: d for c, d in dist.items() if "edges" in d}


def _no_distributions(r: dict) -> str:
    """Why a report holds no distribution at all."""
    if r.get("groups") == 1 or (r.get("verified") or {}).get("classes") == 1:
        return "No distributions before and after: the release is a single class."
    if r.get("method") in ("maxent", "mnqia"):
        return ("No distributions before and after: this range release has no numeric quasi-identifier with a "
                "histogram (categorical QIs are published as sets).")
    return ("No distributions before and after in this report: it was written by a run that did not count them "
            "(a run on a Dask cluster, or an engine before they were counted).")


def _why_unseen(r: dict, unseen: list) -> str:
    kinds = ((r.get("metrics") or {}).get("mixed") or {}).get("kinds") or {}
    if kinds and all(kinds.get(c) == "date" for c in unseen):
        return "a date is not drawn as a histogram"
    if r.get("method") in ("maxent", "mnqia"):
        return "a categorical QI of a range release is published as sets of categories, not drawn"
    return "not counted by this run"


def _draw_categories(cats: dict) -> str:
    """The categorical QIs' bars (a mixed-type run): each category's share of the rows
    before (filled) and after (outline), two panels a row."""
    names = list(cats)
    cols = 1 if len(names) == 1 else 2
    rows = [names[i: i + cols] for i in range(0, len(names), cols)]
    heights = [max(len(cats[c]["categories"]) for c in row) * 0.2 + 0.45 for row in rows]
    gap = 1.9  # (room for the second panel's category labels)
    w = 10.0 if cols == 2 else 7.0
    left, right = 1.75, 0.3
    aw = (w - left - right - gap * (cols - 1)) / cols
    h = sum(heights) + 0.8 * len(rows) + 0.6
    fig = _fig(w, h, left=left, right=right, bottom=0.45, top=0.6)
    grid = fig.add_gridspec(len(rows), cols, height_ratios=heights, wspace=gap / aw,
                            hspace=0.8 / (sum(heights) / len(heights)))
    for i, row in enumerate(rows):
        for j, c in enumerate(row):
            d = cats[c]
            ax = fig.add_subplot(grid[i, j])
            total = max(1, sum(d["before"]))
            ys = list(range(len(d["categories"])))
            most = max(len(cats[n]["categories"]) for n in row)  # (bars as thick in every panel of the row)
            ax.barh(ys, [100.0 * v / total for v in d["before"]], height=0.8, color=BEFORE,
                    label="before (input)")
            ax.barh(ys, [100.0 * v / total for v in d["after"]], height=0.8, fill=False, edgecolor=AFTER,
                    linewidth=1.2, label="after (published)")
            ax.set_yticks(ys)
            ax.set_yticklabels([_short(t) for t in d["categories"]], fontsize=7)
            ax.set_ylim(most - 0.5, -0.5)  # (the first category on top)
            ax.set_title(f"{c} ({d.get('kind', 'categorical')})", fontsize=9, y=1.0)
            ax.set_xlabel("rows (%)", fontsize=8)
            ax.tick_params(axis="x", labelsize=7)
            _style(ax)
            if i == 0 and j == 0:
                ax.legend(frameon=False, fontsize=7, loc="lower right")
    fig.suptitle("Categorical quasi-identifiers before (filled) and after (outline) anonymization", fontsize=10)
    return _figure(fig, "How to read: each bar is a category's share of the rows, the filled bar in the input and "
                        "the red outline in the release, where every row carries its group's most frequent "
                        "category (nominal) or median category (ordinal); equal bars mean the category kept its "
                        "share. A QI of many categories shows its 20 most frequent and one 'other' bar for the "
                        "rest.")


def _short(text: str, width: int = 24) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


STRATA_SHOWN = 40  # strata listed in the page (all of them are in the JSON report)


def _strata_table(strata: list) -> list[str]:
    """The strata (``--strata``): each one's values, rows, groups and information loss."""
    rows = []
    for s in strata[:STRATA_SHOWN]:
        name = ", ".join(f"{c}={'null' if v is None else v}" for c, v in (s.get("values") or {}).items())
        il = s.get("information_loss_percent")
        rows.append((_Raw(_e(name)), s.get("rows"), s.get("groups"), il if il is not None else _Raw("—")))
    more = len(strata) - len(rows)
    return [f"<p>Strata: {len(strata):,}, each anonymized on its own (no group spans two).</p>",
            _table(rows, header=("stratum", "rows", "groups", "information loss (%)")),
            _note("Information loss of a stratum: 100 · SSE / SST of its rows, on the run's z-scores, SST "
                  "around the stratum's own mean." +
                  (f" {more:,} more strata are in the JSON report." if more > 0 else ""))]


AHEAD = ("k", "group_size_counts", "distributions")  # what the report knows before the write pass
_drawn: dict = {}  # figures drawn ahead (``Prerender``): kind -> (its data, its markup)
_started: dict = {}  # distributions figures begun from the "before" counts alone: their key -> Figure


def _cached(kind: str, data: dict, draw) -> str:
    """``draw(**data)``, or the markup drawn ahead for the same ``data``."""
    key = json.dumps(data, sort_keys=True)
    if kind in _drawn and _drawn[kind][0] == key:
        return _drawn[kind][1]
    _drawn[kind] = (key, draw(**data))
    return _drawn[kind][1]


def _ahead(r: dict) -> None:
    """Draw the figures of the partial report ``r`` (``AHEAD``) into the cache. The
    distributions without "after" (known at the end of the partition pass) begin
    their figure: the panels and the "before" areas (``_begin_distributions``)."""
    dist = _numeric(r.get("distributions") or {})
    if dist and not any("after" in d for d in dist.values()):
        _begin_distributions(dist)
    elif dist:
        _cached("distributions", {"dist": dist}, _draw_distributions)
    if r.get("group_size_counts"):
        _cached("group_sizes", {"counts": r["group_size_counts"], "k": r.get("k")}, _draw_group_sizes)


def _draw_distributions(dist: dict) -> str:
    return _figure(*_distributions_figure(dist))


def _before_key(dist: dict) -> str:
    """What the first part of the distributions figure depends on: the QIs, their
    bins and "before" counts."""
    return json.dumps([(c, d["edges"], d["before"]) for c, d in dist.items()])


def _begin_distributions(dist: dict):
    """The distributions figure's panels with their "before" areas, labels and ticks
    (a matplotlib Figure, kept in ``_started`` for ``_distributions_figure``)."""
    from matplotlib.ticker import MaxNLocator  # optional: the [html] extra

    key = _before_key(dist)
    if key in _started:
        return _started[key]
    _started.clear()  # (one figure in progress at most)
    names = list(dist)
    cols = 3 if len(names) > 4 else max(1, len(names))
    nrows = math.ceil(len(names) / cols)
    fig = _fig(3.6 * cols, 2.4 * nrows + 0.5, left=0.55, bottom=0.45, top=0.6, right=0.2,
               wspace=0.35, hspace=0.75)
    axes = fig.subplots(nrows, cols, squeeze=False)
    for i, ax in enumerate(axes.flat):
        if i >= len(names):
            ax.set_visible(False)
            continue
        c = names[i]
        d = dist[c]
        total = max(1, sum(d["before"]))
        ax.stairs([100.0 * v / total for v in d["before"]], d["edges"], fill=True, color=BEFORE, label="before")
        ax.set_title(c, fontsize=9, y=1.0)
        ax.set_xlabel(f"{c} (input units)", fontsize=8)
        ax.set_ylabel("rows (%)", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.xaxis.set_major_locator(MaxNLocator(5))
        ax.yaxis.set_major_locator(MaxNLocator(4))
        ax.ticklabel_format(axis="x", style="sci", scilimits=(-3, 5), useOffset=False)
        _style(ax)
        for axis in (ax.xaxis, ax.yaxis):  # the tick objects (a third of the drawing), as many as the
            axis.get_major_ticks(len(axis.get_majorticklocs()) + 1)  # ticks will need (+1: "after" may add one)
    _started[key] = fig
    return fig


def _distributions_figure(dist: dict):
    """The distributions figure (a matplotlib Figure, not yet serialized) and its
    caption: the figure begun from the "before" counts (``_begin_distributions``,
    by the worker during the aggregate pass, or now), then the "after" lines."""
    fig = _begin_distributions(dist)
    _started.pop(_before_key(dist))  # (a figure is finished once)
    names = list(dist)
    has_after = False
    for i, ax in enumerate(fig.axes[:len(names)]):
        d = dist[names[i]]
        if "after" in d:
            has_after = True
            total = max(1, sum(d["before"]))
            ax.stairs([100.0 * v / total for v in d["after"]], d["edges"], color=AFTER, linewidth=1.3,
                      label="after")
        if i == 0:
            ax.legend(frameon=False, fontsize=7)
    fig.suptitle("Each quasi-identifier before (filled) and after (line) anonymization", fontsize=10)
    if any(dist[c].get("after_spread") for c in names):
        after = ("the red line the same for the published ranges, each class's rows spread evenly over its "
                 "range (a range says only that the value lies in it)")
    elif has_after:
        after = ("the red line the same for the published values (each row carries its group's mean, so the "
                 "published distribution is narrower)")
    else:
        after = "no 'after' distribution is drawn"
    bins = len(dist[names[0]]["before"])
    return fig, (f"How to read: the filled area is the share of input rows in each of {bins} equal bins "
                        f"between the column's smallest and largest value, {after}; the first and last bin "
                        f"may be wider when the bins were set from a sample.")


def _section_dependency(r: dict) -> str:
    dep = (r.get("metrics") or {}).get("dependency")
    if not dep or not (dep.get("degrees") or dep.get("tree_edges")):
        return _section("dependency", "Dependency tree", [
            _note(f"Does not apply: method {_e(r['method'])} groups on all quasi-identifiers (the tree is "
                  f"drawn for --method ama and --select emad).")])
    edges = [tuple(e) for e in dep.get("tree_edges") or []]
    weights = dep.get("edge_weights") or [None] * len(edges)
    degrees = dep.get("degrees") or {}
    key = set(dep.get("key_attributes") or [])
    nodes = list(degrees) or sorted({a for e in edges for a in e})
    pos = _tree_layout(nodes, edges, degrees)
    fig = _fig(8, 4.2, left=0.1, right=0.1, bottom=0.1)
    ax = fig.add_subplot()
    for (a, b), w in zip(edges, weights):
        (xa, ya), (xb, yb) = pos[a], pos[b]
        ax.plot([xa, xb], [ya, yb], color="#888", linewidth=1.2, zorder=1)
        if w is not None:
            ax.annotate(f"{w:.3g}", ((xa + xb) / 2, (ya + yb) / 2), fontsize=7, color="#555", ha="center",
                        va="center", bbox=dict(boxstyle="round,pad=0.15", fc="white", ec="none"))
    for n in nodes:
        x, y = pos[n]
        ax.annotate(f"{n} ({degrees.get(n, 0)})", (x, y), ha="center", va="center", fontsize=8, zorder=3,
                    bbox=dict(boxstyle="round,pad=0.3", fc=KEY if n in key else "#e8eef8",
                              ec="#333" if n in key else "#9aa"))
    ax.plot([], [], "s", color=KEY, label="key attribute (grouped on)")
    ax.plot([], [], "s", color="#e8eef8", markeredgecolor="#9aa", label="other quasi-identifier")
    ax.legend(frameon=False, fontsize=8, loc="lower right")
    xs = [p[0] for p in pos.values()]
    ys = [p[1] for p in pos.values()]
    ax.set_xlim(min(xs) - 0.8, max(xs) + 0.8)
    ax.set_ylim(min(ys) - 0.6, max(ys) + 0.6)
    ax.axis("off")
    ax.set_title(f"{dep.get('tree', '')} spanning tree of {dep.get('measure')} between the QIs".strip(), y=1.0)
    body = [_figure(fig, "How to read: each box is a quasi-identifier with its degree in the tree, each line "
                         f"an edge labelled with its {_e(dep.get('measure'))} weight; orange boxes are the key "
                         "attributes the groups were formed on, the others follow them.")]
    return _section("dependency", "Dependency tree", body)


def _tree_layout(nodes, edges, degrees) -> dict:
    """Layered positions: the root (highest degree) on top, children below, leaves spread."""
    adj = {n: [] for n in nodes}
    for a, b in edges:
        adj.setdefault(a, []).append(b)
        adj.setdefault(b, []).append(a)
    pos: dict = {}
    nxt = [0.0]
    for root in sorted(adj, key=lambda n: (-degrees.get(n, 0), nodes.index(n) if n in nodes else 0)):
        if root in pos:
            continue

        def place(n, parent, depth):
            kids = [m for m in adj[n] if m != parent and m not in pos]
            pos[n] = None
            xs = [place(m, n, depth + 1) for m in kids]
            x = sum(xs) / len(xs) if xs else nxt[0]
            if not xs:
                nxt[0] += 1.0
            pos[n] = (x, -float(depth))
            return x

        place(root, None, 0)
    return pos


def _section_sensitive(r: dict) -> str:
    m = r.get("metrics") or {}
    hist = m.get("entropy_hist")
    if not hist:
        return _section("sensitive", "Sensitive attribute", [
            _note(f"Does not apply: method {_e(r['method'])} protects no sensitive attribute "
                  f"(--method maxent with --sa does).")])
    eps = m.get("epsilon")
    edges, classes = hist["edges"], hist["classes"]
    fig = _fig(7, 2.8, left=0.9)
    ax = fig.add_subplot()
    ax.stairs(classes, edges, fill=True, color=ACCENT, label="classes")
    if eps is not None:
        ax.axvline(eps, color=AFTER, linestyle="--", linewidth=1.3, label=f"threshold ε = {eps:.3g} bits")
    if m.get("table_entropy") is not None:
        ax.axvline(m["table_entropy"], color="#555", linestyle=":", linewidth=1.2,
                   label=f"whole table {m['table_entropy']:.3g} bits")
    ax.set_xlabel(f"entropy of {r.get('settings', {}).get('sa') or 'the sensitive attribute'} "
                  f"in the class (bits)")
    ax.set_ylabel("published classes")
    ax.set_title("Sensitive-attribute entropy per class", y=1.0)
    ax.legend(frameon=False, fontsize=8)
    _style(ax)
    rows = [(k, v) for k, v in m.items() if not isinstance(v, (dict, list))]
    body = [_figure(fig, "How to read: the bars count published classes by the entropy of the sensitive "
                         "attribute inside them; no class may lie left of the dashed threshold ε."),
            _table(rows)]
    return _section("sensitive", "Sensitive attribute", body)


def _section_risk(r: dict) -> str:
    risk = r.get("risk")
    if not risk:
        return _section("risk", "Disclosure risk", [_note("Not measured: run with --risk to measure record "
                                                          "linkage, interval disclosure and the re-identification "
                                                          "risks of the release's classes.")])
    pro, jour, mark, ind = (risk.get("prosecutor"), risk.get("journalist"), risk.get("marketer"),
                            risk.get("individual_risk"))
    thr = risk.get("risk_threshold", 0.2)
    bars = [("record linkage (DBRL)", risk["dbrl"], ACCENT),
            (f"interval disclosure (p = {risk['p']:g})", risk["interval_disclosure"], AFTER)]
    if pro:
        bars += [(f"records at risk (prosecutor, > {100 * thr:g} %)", pro["records_at_risk"], KEY),
                 ("prosecutor success rate", pro["success_rate"], KIND_COLORS["ordinal"]),
                 ("marketer success rate", mark["success_rate"], KIND_COLORS["nominal"])]
    if ind:
        bars.append(("individual risk (sdcMicro global)", ind["global_risk_share"], "#555"))
    labels, vals, colors = [b[0] for b in bars], [100 * b[1] for b in bars], [b[2] for b in bars]
    fig = _fig(7, 0.3 * len(bars) + 1.3, left=2.6)
    ax = fig.add_subplot()
    ax.barh(labels[::-1], vals[::-1], color=colors[::-1])
    for y, v in enumerate(vals[::-1]):
        ax.annotate(f"{v:.2f} %" if v == 0 or v >= 0.01 else f"{v:.2g} %", (v, y), xytext=(3, 0),
                    textcoords="offset points", va="center", fontsize=8)
    ax.set_xlim(0, max(5.0, 1.2 * max(vals)))
    ax.set_xlabel("share of records (%)")
    ax.set_title("Disclosure risk", y=1.0)
    _style(ax)
    qi, class_qi = risk.get("qi") or [], risk.get("class_qi") or risk.get("qi") or []
    body = [f"<p>Record linkage and interval disclosure compare the release with the original "
            f"({_num(risk.get('rows'))} rows) on {_e(', '.join(qi))}"
            + (f"; the re-identification risks count the release's equivalence classes (rows with the same "
               f"published values, a missing value counting as a value) on {_e(', '.join(class_qi))}" if pro else "")
            + ". Lower is safer for every figure.</p>",
            _figure(fig, "How to read: each bar is a share of the records: those an intruder links to their own "
                         "original record, those whose values are all disclosed within p standard deviations"
                         + (", those whose equivalence class gives an intruder more than a "
                            f"{100 * thr:g} % chance, and the records re-identified on average"
                            if pro else "") + "; lower is safer.")]
    linked = risk.get("dbrl_linked")
    rows = [("record linkage (DBRL)",
             _Raw(f"{100 * risk['dbrl']:.3g} %" + (f" — {_e(_linked(linked))}" if linked is not None else "")),
             "The share of records an intruder holding the original QIs links to their own original record by "
             "nearest distance (at most 1/k for a centroid release)."),
            (f"interval disclosure (p = {risk['p']:g})",
             _Raw(f"{100 * risk['interval_disclosure']:.3g} % (sdcMicro's dRisk: "
                  f"{_pct(risk.get('interval_disclosure_sdcmicro'))})"),
             "The share of records whose original values all lie within p standard deviations of the published "
             "ones (sdcMicro's variant: at most one value outside).")]
    if pro:
        weights = risk.get("weight_column")
        pop = (f"the population the sampling weights {weights!r} stand for ({risk.get('population'):,.0f} people)"
               if weights else "no population (no weights): the release is taken as the population")
        rows += [
            ("prosecutor risk (ARX)", _Raw(_risk_cells(pro)),
             f"An intruder who knows the person is in the release picks one row of the matching class: the "
             f"highest risk is 1 / the smallest class, the success rate the share of records re-identified on "
             f"average (classes / rows), records at risk those in a class giving more than {100 * thr:g} %."),
            ("journalist risk (ARX)", _Raw(_risk_cells(jour)),
             f"The same for an intruder who does not know whether the person is in the release, against "
             f"{pop}."),
            ("marketer risk (ARX)", _Raw(f"success rate {_pct(mark['success_rate'])}"),
             "The share of records an intruder matching every record against the population re-identifies on "
             "average."),
            ("individual risk (sdcMicro)",
             _Raw(f"{ind['global_risk']:,.4g} expected re-identifications ({_pct(ind['global_risk_share'])} of "
                  f"records); highest {_pct(ind['highest_risk'])}" if ind else
                  f'<span class="note">not measured: {_e(risk.get("individual_risk_note") or NO_WEIGHTS)}</span>'),
             "The Benedetti-Franconi estimate (sdcMicro's measure_risk) of each record's chance of being "
             "re-identified given the sampling weights; the global risk is their sum, the expected number of "
             "re-identifications."),
        ]
    body.append(_table(rows, header=("measure", "value", "how to read it")))
    details = [("rows", risk.get("rows")), ("QIs", ", ".join(risk.get("qi") or []))]
    if pro:
        details += [("equivalence classes of the release", risk.get("classes")),
                    ("classes keyed on", ", ".join(risk.get("class_qi") or risk.get("qi") or [])),
                    ("sampling weights", risk.get("weight_column") or "none")]
    details += [("distinct masked points (DBRL)", risk.get("masked_points")),
                ("points with tied nearest originals", risk.get("tied_points")),
                ("risk wall time (s)", risk.get("wall_seconds"))]
    body.append(_table(details))
    if not pro:
        body.append(_note("This report predates the re-identification risks of the release's classes: measure "
                          "again with --risk for them."))
    return _section("risk", "Disclosure risk", body)


def _pct(x) -> str:
    return "—" if x is None else f"{100 * x:.3g} %"


def _linked(x: float) -> str:
    """DBRL's linked records as a count (ties split a record's credit: shown, not as a fraction)."""
    return f"{x:,.0f} records" + ("" if float(x).is_integer() else " (ties shared)")


def _risk_cells(m: dict) -> str:
    return (f"highest {_pct(m['highest_risk'])}, success rate {_pct(m['success_rate'])}, records at risk "
            f"{_pct(m['records_at_risk'])}")


if __name__ == "__main__":  # pragma: no cover
    _worker()
