"""The release report as one self-contained HTML page (``--html``, ``microagg report``).

Built from the report's dict alone (``Report.to_dict()``, or a saved ``--report``
JSON), so a page can be made again later without a run. Figures are drawn by
matplotlib's SVG backend (the optional extra ``microagg-engine[html]``) and
inlined: the page loads nothing, runs no script, and opens offline. Each figure
comes with one sentence on how to read it.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import signal
import subprocess
import sys

from . import html_sections
from .checks import is_finite_number, is_int
from .errors import EngineError, first_line
from .html_sections import ACCENT, AFTER, BEFORE, numeric_distributions, style
from .html_sections import figure as _figure  # (module globals: every figure of the page goes through them)
from .html_sections import new_figure as _fig

EXTRA = "pip install 'microagg-engine[html]'"
SECTIONS = ("verdict", "run", "guarantee", "passthrough", "utility", "dependency", "sensitive", "risk")


def require_matplotlib(option: str = "--html") -> None:
    """Fail up front, in one line naming the extra, when matplotlib is missing."""
    if importlib.util.find_spec("matplotlib") is None:
        raise EngineError(f"{option} needs matplotlib: {EXTRA}")


def render(report: dict) -> str:
    """The page of ``report`` (a ``Report.to_dict()``), as text."""
    require_matplotlib()
    parts = [html_sections.head(report)]
    for name in SECTIONS:
        parts.append(getattr(html_sections, f"section_{name}")(report, FIGURES))
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
        # start-up: engine.io loads Polars, which the page's worker never needs
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
        # start-up: engine.io loads Polars, which ``microagg report`` never needs
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


_WANT = {  # kind -> (test, what the message says)
    "count": (lambda v: is_int(v) and v >= 0, "a whole number >= 0"),
    "num": (is_finite_number, "a finite number"),
    "str": (lambda v: isinstance(v, str), "a string"),
    "dict": (lambda v: isinstance(v, dict), "an object"),
    "list": (lambda v: isinstance(v, list), "a list"),
    "names": (lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v), "a list of names"),
    "nums": (lambda v: isinstance(v, list) and all(is_finite_number(x) for x in v), "a list of finite numbers"),
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
           "risk": ("dict", True), "strata": ("list", True), "qi_kinds": ("dict", True),
           "pass_through": ("names", True), "leak_checks": ("list", True)}


def _bad(name, value, kind, null=False):
    """``(name, what it must be, value)`` when ``value`` is not of ``kind`` (``_WANT``;
    ``null``: None is allowed), else None."""
    if value is None and null:
        return None
    test, want = _WANT[kind]
    return None if test(value) else (name, want + (" or null" if null else ""), value)


def _first(*found):
    return next((f for f in found if f is not None), None)


def check_fields(r: dict):
    """The first field of a saved report the page cannot read, as ``(name, what it must
    be, its value)``, or None: the report is a JSON file a user may have edited
    ("rows": "many" would otherwise fail deep in the page with a formatting error)."""
    found = _first(*(_bad(f'"{name}"', r.get(name), kind, null) for name, (kind, null) in _FIELDS.items()))
    if found:
        return found
    for name, v in (r.get("verified") or {}).items():
        if name in ("rows", "classes", "min_class_size"):
            found = found or _bad(f'"verified"."{name}"', v, "count")
    for name, v in (r.get("passes") or {}).items():
        found = found or _bad(f'"passes"."{name}"', v, "num")
    for size, n in (r.get("group_size_counts") or {}).items():
        if not size.isdigit():
            found = found or (f'"group_size_counts" key {json.dumps(size)}', "a group size (a whole number)", size)
        found = found or _bad(f'"group_size_counts"."{size}"', n, "count")
    for name, v in (r.get("information_loss_by_qi") or {}).items():
        found = found or _bad(f'"information_loss_by_qi"."{name}"', v, "num")
    for name, v in (r.get("qi_kinds") or {}).items():
        found = found or _bad(f'"qi_kinds"."{name}"', v, "str")
    for c, d in (r.get("distributions") or {}).items():
        found = found or _check_distribution(f'"distributions"."{c}"', d)
    for i, st in enumerate(r.get("strata") or []):
        where = f'"strata"[{i}]'
        found = found or _bad(where, st, "dict") or _first(
            _bad(f'{where}."values"', st.get("values"), "dict"), _bad(f'{where}."rows"', st.get("rows"), "count"),
            _bad(f'{where}."groups"', st.get("groups"), "count"),
            _bad(f'{where}."information_loss_percent"', st.get("information_loss_percent"), "num", True))
    return found or _check_risk(r.get("risk")) or _check_metrics(r.get("metrics") or {})


def _check_distribution(where: str, d):
    """``check_fields`` of one QI's distribution: a numeric QI's bins, or a categorical
    QI's bars (mixed-type runs)."""
    found = _bad(where, d, "dict")
    if found:
        return found
    if "categories" in d:
        found = _first(_bad(f"{where}.\"categories\"", d.get("categories"), "names"),
                       _bad(f"{where}.\"before\"", d.get("before"), "nums"),
                       _bad(f"{where}.\"after\"", d.get("after"), "nums"))
        if not found and not len(d["categories"]) == len(d["before"]) == len(d["after"]):
            found = (f"{where}.\"before\"", f"as many values as \"categories\" ({len(d['categories'])})", d["before"])
        return found
    found = _first(_bad(f"{where}.\"edges\"", d.get("edges"), "nums"),
                   _bad(f"{where}.\"before\"", d.get("before"), "nums"),
                   _bad(f"{where}.\"after\"", d.get("after"), "nums", True))
    if not found and (len(d["edges"]) != len(d["before"]) + 1 or len(d["before"]) == 0):
        found = (f"{where}.\"edges\"", f"one more value than \"before\" ({len(d['before'])})", d["edges"])
    if not found and d.get("after") is not None and len(d["after"]) != len(d["before"]):
        found = (f"{where}.\"after\"", f"as many values as \"before\" ({len(d['before'])})", d["after"])
    return found


def _check_risk(risk):
    """``check_fields`` of the disclosure risk."""
    if not risk:
        return None
    found = _first(*(_bad(f'"risk"."{name}"', risk.get(name), "num") for name in ("p", "dbrl", "interval_disclosure")),
                   _bad('"risk"."qi"', risk.get("qi"), "names", True))
    for name in ("prosecutor", "journalist", "marketer", "individual_risk"):  # the classes' risks
        found = found or _bad(f'"risk"."{name}"', risk.get(name), "dict", True)
        for key, v in (risk.get(name) or {}).items() if not found else ():
            found = found or _bad(f'"risk"."{name}"."{key}"', v, "num")
    hh = risk.get("household")  # (engine.audit.risk: the household risks)
    found = found or _bad('"risk"."household"', hh, "dict", True)
    if hh and not found:
        found = _first(_bad('"risk"."household"."households"', hh.get("households"), "count"),
                       _bad('"risk"."household"."dbrl"', hh.get("dbrl"), "num"),
                       _bad('"risk"."household"."prosecutor"', hh.get("prosecutor"), "dict"))
        for key, v in (hh.get("prosecutor") or {}).items() if not found else ():
            found = found or _bad(f'"risk"."household"."prosecutor"."{key}"', v, "num")
    v = risk.get("verdict")  # (engine.audit.verdict)
    found = found or _bad('"risk"."verdict"', v, "dict", True)
    if v and not found:
        found = _bad('"risk"."verdict"."measures"', v.get("measures"), "list")
        for i, m in enumerate(v.get("measures") or []) if not found else ():
            where = f'"risk"."verdict"."measures"[{i}]'
            found = found or _bad(where, m, "dict") or _first(
                _bad(f'{where}."what"', m.get("what"), "str"), _bad(f'{where}."value"', m.get("value"), "num"),
                _bad(f'{where}."threshold"', m.get("threshold"), "num"))
    return found


def _check_metrics(metrics: dict):
    """``check_fields`` of the dependency profile and the entropy histogram."""
    found = None
    dep = metrics.get("dependency")
    if dep:
        found = _bad('"metrics"."dependency"', dep, "dict") or _first(
            _bad('"metrics"."dependency"."tree_edges"', dep.get("tree_edges"), "list", True),
            _bad('"metrics"."dependency"."edge_weights"', dep.get("edge_weights"), "list", True),
            _bad('"metrics"."dependency"."degrees"', dep.get("degrees"), "dict", True),
            _bad('"metrics"."dependency"."key_attributes"', dep.get("key_attributes"), "names", True))
        if not found:
            for e in dep.get("tree_edges") or []:
                if not (isinstance(e, list) and len(e) == 2 and all(isinstance(a, str) for a in e)):
                    return ('"metrics"."dependency"."tree_edges"', "a list of pairs of names", e)
            for w in dep.get("edge_weights") or []:
                found = found or _bad('"metrics"."dependency"."edge_weights"', w, "num", True)
            for name, v in (dep.get("degrees") or {}).items():
                found = found or _bad(f'"metrics"."dependency"."degrees"."{name}"', v, "count")
    hist = metrics.get("entropy_hist")
    if hist:
        found = found or _bad('"metrics"."entropy_hist"', hist, "dict") or _first(
            _bad('"metrics"."entropy_hist"."edges"', hist.get("edges"), "nums"),
            _bad('"metrics"."entropy_hist"."classes"', hist.get("classes"), "nums"))
        if not found and len(hist["edges"]) != len(hist["classes"]) + 1:
            found = ('"metrics"."entropy_hist"."edges"', "one more value than \"classes\"", hist["edges"])
        found = found or _first(_bad('"metrics"."epsilon"', metrics.get("epsilon"), "num", True),
                                _bad('"metrics"."table_entropy"', metrics.get("table_entropy"), "num", True))
    return found


def describe_input(data) -> str:
    """What the page names as the input: a path as given, else the kind of table."""
    if isinstance(data, (str, os.PathLike)):
        return os.fspath(data)
    return f"an in-memory {type(data).__module__.split('.')[0]} {type(data).__name__}"


# ------------------------------------------------------------------ helpers


# ------------------------------------------------------------------ figures drawn ahead


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
        ax.yaxis.set_minor_locator(NullLocator())  # (minor log ticks: slow to draw, little to read)
        # plain numbers (1,000 rather than 10³): no mathtext to parse
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 1 else f"{v:g}"))
        ax.set_ylabel("groups (log scale)")
    else:
        ax.set_ylabel("groups")
    ax.set_xlabel("group size (rows)")
    ax.set_title("Group sizes", y=1.0)
    if len(xs) <= 20:
        ax.set_xticks(xs)
    ax.set_xlim(min(xs[0], k or xs[0]) - 1, xs[-1] + 1)
    style(ax)
    return _figure(fig, "How to read: each bar counts the groups formed of one size; groups that publish the "
                        "same values are one published class, at least as large (the table above counts them); "
                        "every bar must lie right of the dashed k line.")


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
    dist = numeric_distributions(r.get("distributions") or {})
    if dist and not any("after" in d for d in dist.values()):
        _begin_distributions(dist)
    elif dist:
        _cached("distributions", {"dist": dist}, _draw_distributions)
    if r.get("group_size_counts"):
        _cached("group_sizes", {"counts": r["group_size_counts"], "k": r.get("k")}, _draw_group_sizes)


class _Figures:
    """The figures of the sections (``html_sections``), as markup: those drawn ahead
    from the cache when drawn for the same data, else drawn now; the others serialized."""

    @staticmethod
    def svg(fig, caption: str) -> str:
        return _figure(fig, caption)

    @staticmethod
    def group_sizes(counts: dict, k) -> str:
        return _cached("group_sizes", {"counts": counts, "k": k}, _draw_group_sizes)

    @staticmethod
    def distributions(dist: dict) -> str:
        return _cached("distributions", {"dist": dist}, _draw_distributions)


FIGURES = _Figures()


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
        style(ax)
        for axis in (ax.xaxis, ax.yaxis):  # the tick objects, made ahead, as many as the ticks
            axis.get_major_ticks(len(axis.get_majorticklocs()) + 1)  # will need (+1: "after" may add one)
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


if __name__ == "__main__":  # pragma: no cover
    _worker()
