"""The sections of the release page (``engine.html_report``) and their markup: the
risk verdict (first: pass or fail, each measure against its ``--max-risk`` threshold),
the run, the guarantee, the columns passed through (and the leak guard's checks on
them, when the report lists them), the utility, the dependency profile, the sensitive
attribute and the disclosure risk, each built from the report's dict alone. ``figures`` (from
``engine.html_report``, which renders the page) gives the figures the page's worker
may have drawn ahead: ``figures.group_sizes(counts, k)`` and
``figures.distributions(dist)``, as markup, and serializes the others:
``figures.svg(fig, caption)``.
"""

from __future__ import annotations

import hashlib
import html
import io

CSS = """
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


def escape(x) -> str:
    return html.escape(str(x))


def number(x, digits=4) -> str:
    if x is None:
        return "—"
    if isinstance(x, bool):
        return str(x)
    if isinstance(x, int):
        return f"{x:,}"
    if isinstance(x, float):
        return f"{x:,.{digits}f}" if abs(x) < 1e9 else f"{x:.4g}"
    return escape(x)


def table(rows, header=None) -> str:
    out = ["<table>"]
    if header:
        out.append("<tr>" + "".join(f"<th>{escape(h)}</th>" for h in header) + "</tr>")
    for row in rows:
        cells = []
        for i, v in enumerate(row):
            if i == 0 and header is None:
                cells.append(f"<th>{escape(v)}</th>")
            else:
                cls = ' class="num"' if isinstance(v, (int, float)) and not isinstance(v, bool) else ""
                cells.append(f"<td{cls}>{v if isinstance(v, Raw) else number(v)}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</table>")
    return "\n".join(out)


class Raw(str):
    """Markup already escaped."""


def figure(fig, caption: str) -> str:
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


def new_figure(w, h, left=1.6, bottom=0.55, top=0.35, right=0.3, **kw):
    """A figure of ``w`` x ``h`` inches with fixed margins in inches (a layout engine
    would measure every label: several times slower)."""
    from matplotlib.figure import Figure  # optional: the [html] extra

    fig = Figure(figsize=(w, h), dpi=100)
    fig.subplots_adjust(left=left / w, right=1 - right / w, bottom=bottom / h, top=1 - top / h, **kw)
    return fig


def style(ax):
    # (titles are set with y=1.0: a fixed place above the axes, which spares matplotlib
    # measuring the tick labels to lift them)
    ax.spines[["top", "right"]].set_visible(False)
    ax.grid(axis="both", color="#eee", linewidth=0.8)
    ax.set_axisbelow(True)


def section(name: str, title: str, body: list[str]) -> str:
    return f'<section id="{name}"><h2>{escape(title)}</h2>\n' + "\n".join(body) + "\n</section>"


def note(text: str) -> str:
    return f'<p class="note">{text}</p>'


def numeric_distributions(dist: dict) -> dict:
    """The histograms of ``dist`` (numeric QIs: bins with edges), not the categories' bars."""
    return {c: d for c, d in dist.items() if "edges" in d}


def head(r: dict) -> str:
    title = f"microagg release report: {r.get('input') or 'run'} ({r.get('method')}, k={r.get('k')})"
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>{escape(title)}</title>"
            f"<style>{CSS}</style></head><body>\n<h1>Release report</h1>"
            f"<p>{escape(r.get('input') or 'an in-memory table')}: {r['rows']:,} rows, "
            f"{len(r['qi'])} quasi-identifiers, method <b>{escape(r['method'])}</b>"
            f"{'' if r.get('k') is None else ', k = ' + str(r['k'])}; microagg-engine "
            f"{escape(r.get('engine_version') or '?')}.</p>")


def section_run(r: dict, figures) -> str:
    settings = {k: v for k, v in (r.get("settings") or {}).items() if v is not None and k not in ("qi", "k", "method")}
    kinds = r.get("qi_kinds") or {}  # each QI's kind: numeric, nominal, ordinal, date, boolean
    rows = [("input", r.get("input") or "an in-memory table"), ("rows", r["rows"]),
            ("quasi-identifiers", ", ".join(f"{c} ({kinds[c]})" if c in kinds else c for c in r["qi"])),
            ("method", r["method"]), ("k", r.get("k")),
            ("settings as given", ", ".join(f"{k}={v}" for k, v in settings.items()) or "defaults"),
            ("blocks", r.get("blocks", 1)),
            ("wall time (s)", r["wall_seconds"]), ("peak memory", Raw(f"{r['peak_rss_bytes'] / 2 ** 20:,.0f} MiB")),
            ("engine version", r.get("engine_version") or "?")]
    if r.get("gamma") is not None:
        rows.insert(5, ("gamma", r["gamma"]))
    body = [table(rows)]
    passes = r.get("passes") or {}
    if passes:  # a table, not a figure: known only after the write pass, and the run waits for the page
        wall = r["wall_seconds"] or 0.0
        top = max(passes.values()) or 1.0
        rows = [(name, Raw(f"{seconds:.2f}"), Raw(f"{100.0 * seconds / wall:.0f} %" if wall > 0 else "—"),
                 Raw(f'<span class="bar" style="width:{12.0 * seconds / top:.2f}em"></span>'))
                for name, seconds in passes.items()]
        body.append(table(rows, header=("pass", "wall time (s)", "share of the run", "")))
        body.append(note("One row per pass over the data, in order; the bar is the pass's wall time, "
                          "the longest pass the full width."))
    return section("run", "The run", body)


def section_guarantee(r: dict, figures) -> str:
    v = r.get("verified") or {}
    k = r.get("k")
    smallest = v.get("min_class_size", r["min_group_size"])
    holds = k is None or smallest >= k
    verdict = ('<span class="ok">holds</span>' if holds else '<span class="bad">does not hold</span>')
    body = [f"<p>k-anonymity as counted from what was written (the write pass's self-check): {Raw(verdict)}"
            f"{'' if k is None else f' — the smallest published class has {smallest:,} rows, k = {k}'}.</p>",
            table([("rows written", v.get("rows", r["rows"])), ("published classes", v.get("classes", r["groups"])),
                    ("smallest class (rows)", smallest), ("groups formed", r["groups"]),
                    ("group size range (rows)", f"{r['min_group_size']} .. {r['max_group_size']}")])]
    counts = r.get("group_size_counts") or {}
    if counts:
        body.append(figures.group_sizes(counts, k))
    return section("guarantee", "The guarantee", body)


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


def section_utility(r: dict, figures) -> str:
    il = r.get("information_loss_percent")
    mixed = (r.get("metrics") or {}).get("mixed") or {}
    kinds = mixed.get("kinds") or {}
    if kinds:  # a mixed-type run: each QI's loss by its kind
        by_kind = mixed.get("information_loss_by_kind") or {}
        parts = ", ".join(f"{escape(k)} {v:.2f} %" for k, v in by_kind.items())
        body = [f"<p>Information loss: <b>{number(il)} %</b>, the mean of the quasi-identifiers' losses, each "
                f"measured by its kind" + (f" (mean by kind: {parts})" if parts else "") + ".</p>"]
        rows = []
        for kind, (measure, _) in KIND_LOSS.items():
            names = [c for c, k in kinds.items() if k == kind]
            if names:
                rows.append((kind, ", ".join(names), measure))
        body.append(table(rows, header=("kind", "quasi-identifiers", "its loss")))
    else:
        body = [f"<p>Information loss IL = 100 · SSE / SST on z-scores: <b>{number(il)} %</b>"
                + ("" if r.get("sse") is None else f" (SSE {number(r['sse'])} / SST {number(r['sst'])})")
                + (" of the numeric QIs around their class means, the loss had each class published its mean "
                   "(comparable with the MDAV family; the release publishes ranges)"
                   if r.get("method") in RANGE_METHODS and il is not None else "") + ".</p>"]
    if il is None:
        body.append(note("No numeric quasi-identifier: the information loss is not defined."))
    if r.get("strata"):
        body += _strata_table(r["strata"])
    by_qi = r.get("information_loss_by_qi")
    keys = set(r.get("key_attributes") or [])
    if by_qi:
        names = list(by_qi)[::-1]
        fig = new_figure(7, 0.32 * len(names) + 1.0, right=1.6)
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
        style(ax)
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
        body.append(figures.svg(fig, caption + extra))
    else:
        body.append(note("The loss per quasi-identifier is not measured for this method."))
    dist = r.get("distributions") or {}
    numeric, cats = numeric_distributions(dist), {c: d for c, d in dist.items() if "categories" in d}
    if numeric:
        body.append(figures.distributions(numeric))
    if cats:
        body.append(_draw_categories(cats, figures))
    unseen = [c for c in r.get("qi") or [] if c not in dist]
    if unseen and not dist:
        body.append(note(_no_distributions(r)))
    elif unseen:
        body.append(note(f"No distribution of {escape(', '.join(unseen))}: " + _why_unseen(r, unseen) + "."))
    return section("utility", "Utility", body)


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


def _draw_categories(cats: dict, figures) -> str:
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
    fig = new_figure(w, h, left=left, right=right, bottom=0.45, top=0.6)
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
            style(ax)
            if i == 0 and j == 0:
                ax.legend(frameon=False, fontsize=7, loc="lower right")
    fig.suptitle("Categorical quasi-identifiers before (filled) and after (outline) anonymization", fontsize=10)
    return figures.svg(fig, "How to read: each bar is a category's share of the rows, the filled bar in the input and "
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
        rows.append((Raw(escape(name)), s.get("rows"), s.get("groups"), il if il is not None else Raw("—")))
    more = len(strata) - len(rows)
    return [f"<p>Strata: {len(strata):,}, each anonymized on its own (no group spans two).</p>",
            table(rows, header=("stratum", "rows", "groups", "information loss (%)")),
            note("Information loss of a stratum: 100 · SSE / SST of its rows, on the run's z-scores, SST "
                  "around the stratum's own mean." +
                  (f" {more:,} more strata are in the JSON report." if more > 0 else ""))]


def section_dependency(r: dict, figures) -> str:
    dep = (r.get("metrics") or {}).get("dependency")
    if not dep or not (dep.get("degrees") or dep.get("tree_edges")):
        return section("dependency", "Dependency tree", [
            note(f"Does not apply: method {escape(r['method'])} groups on all quasi-identifiers (the tree is "
                  f"drawn for --method ama and --select emad).")])
    edges = [tuple(e) for e in dep.get("tree_edges") or []]
    weights = dep.get("edge_weights") or [None] * len(edges)
    degrees = dep.get("degrees") or {}
    key = set(dep.get("key_attributes") or [])
    nodes = list(degrees) or sorted({a for e in edges for a in e})
    pos = _tree_layout(nodes, edges, degrees)
    fig = new_figure(8, 4.2, left=0.1, right=0.1, bottom=0.1)
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
    body = [figures.svg(fig, "How to read: each box is a quasi-identifier with its degree in the tree, each line "
                         f"an edge labelled with its {escape(dep.get('measure'))} weight; orange boxes are the key "
                         "attributes the groups were formed on, the others follow them.")]
    return section("dependency", "Dependency tree", body)


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


def section_sensitive(r: dict, figures) -> str:
    m = r.get("metrics") or {}
    hist = m.get("entropy_hist")
    if not hist:
        return section("sensitive", "Sensitive attribute", [
            note(f"Does not apply: method {escape(r['method'])} protects no sensitive attribute "
                  f"(--method maxent with --sa does).")])
    eps = m.get("epsilon")
    edges, classes = hist["edges"], hist["classes"]
    fig = new_figure(7, 2.8, left=0.9)
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
    style(ax)
    rows = [(k, v) for k, v in m.items() if not isinstance(v, (dict, list))]
    body = [figures.svg(fig, "How to read: the bars count published classes by the entropy of the sensitive "
                         "attribute inside them; no class may lie left of the dashed threshold ε."),
            table(rows)]
    return section("sensitive", "Sensitive attribute", body)


def section_risk(r: dict, figures) -> str:
    risk = r.get("risk")
    if not risk:
        return section("risk", "Disclosure risk", [note("Not measured: run with --risk to measure record "
                                                          "linkage, interval disclosure and the re-identification "
                                                          "risks of the release's classes.")])
    pro, jour, mark, ind = (risk.get("prosecutor"), risk.get("journalist"), risk.get("marketer"),
                            risk.get("individual_risk"))
    thr = risk.get("risk_threshold", 0.2)
    fig = _risk_figure(risk, pro, mark, ind, thr)
    qi, class_qi = risk.get("qi") or [], risk.get("class_qi") or risk.get("qi") or []
    body = [f"<p>Record linkage and interval disclosure compare the release with the original "
            f"({number(risk.get('rows'))} rows) on {escape(', '.join(qi))}"
            + (f"; the re-identification risks count the release's equivalence classes (rows with the same "
               f"published values, a missing value counting as a value) on {escape(', '.join(class_qi))}" if pro else "")
            + ". Lower is safer for every figure.</p>",
            figures.svg(fig, "How to read: each bar is a share of the records: those an intruder links to their own "
                         "original record, those whose values are all disclosed within p standard deviations"
                         + (", those whose equivalence class gives an intruder more than a "
                            f"{100 * thr:g} % chance, and the records re-identified on average"
                            if pro else "") + "; lower is safer.")]
    rows = _risk_rows(risk, pro, jour, mark, ind, thr)
    body.append(table(rows, header=("measure", "value", "how to read it")))
    details = [("rows", risk.get("rows")), ("QIs", ", ".join(risk.get("qi") or []))]
    if pro:
        details += [("equivalence classes of the release", risk.get("classes")),
                    ("classes keyed on", ", ".join(risk.get("class_qi") or risk.get("qi") or [])),
                    ("sampling weights", risk.get("weight_column") or "none")]
    hh = risk.get("household")
    if hh:
        details += [("households", f"{hh['households']:,} ({hh['column']}; re-identified if any member is)"),
                    ("household risk, prosecutor", Raw(f"highest {_pct(hh['prosecutor']['highest_risk'])}, mean "
                                                       f"{_pct(hh['prosecutor']['success_rate'])}, at risk "
                                                       f"{_pct(hh['prosecutor']['households_at_risk'])}")),
                    ("household DBRL", Raw(_pct(hh["dbrl"])))]
    details += [("distinct masked points (DBRL)", risk.get("masked_points")),
                ("points with tied nearest originals", risk.get("tied_points")),
                ("risk wall time (s)", risk.get("wall_seconds"))]
    body.append(table(details))
    if not pro:
        body.append(note("This report predates the re-identification risks of the release's classes: measure "
                          "again with --risk for them."))
    return section("risk", "Disclosure risk", body)


def section_verdict(r: dict, figures) -> str:
    """The risk verdict (``engine.audit.verdict``), first on the page."""
    v = (r.get("risk") or {}).get("verdict")
    if not v:
        return section("verdict", "Risk verdict", [note(
            "No verdict: give thresholds with --risk --max-risk (prosecutor=0.09,dbrl=0.09, say; docs/guide.md) to "
            "have the run pass or fail on the measured risk.")])
    head = ('<p><span class="ok">PASS</span>: every measure is at most its threshold.</p>' if v["passed"] else
            '<p><span class="bad">FAIL</span>: a measure is above its threshold; the release was not written '
            '(this report and page were).</p>')
    rows = [(m["what"], Raw(f"{m['value']:.4g}"), Raw(f"{m['threshold']:.4g}"),
             Raw('<span class="ok">pass</span>' if m["passed"] else '<span class="bad">FAIL</span>'))
            for m in v["measures"]]
    return section("verdict", "Risk verdict", [head, table(rows, header=("measure", "value", "threshold",
                                                                         "verdict")),
                                               note("A measure passes when its value is at most its threshold "
                                                    "(--max-risk); the measures are in the risk section below.")])


def section_passthrough(r: dict, figures) -> str:
    """The columns published unchanged, and the leak guard's checks on them (``leak_checks``
    of the report, when the guard lists them)."""
    cols = r.get("pass_through")
    if cols is None:
        return section("passthrough", "Columns passed through", [note("Not recorded in this report.")])
    body = [f"<p>{len(cols)} column{'s' if len(cols) != 1 else ''} published unchanged (text, type, nulls and "
            f"order): {escape(', '.join(cols)) or 'none'}.</p>"]
    checks = r.get("leak_checks")
    if checks:
        rows = []
        for c in checks:
            c = c if isinstance(c, dict) else {"check": c}
            rest = {k: v for k, v in c.items() if k not in ("column", "check", "result")}
            rows.append((c.get("column", ""), c.get("check", ""), c.get("result", ""),
                         ", ".join(f"{k}={v}" for k, v in rest.items())))
        body.append(table(rows, header=("column", "check", "result", "details")))
        body.append(note("The leak guard's checks: whether a column passed through gives a QI's original value "
                         "back (engine.passes.leak)."))
    else:
        body.append(note("The leak guard refused every column that corresponds one-to-one with a QI before the "
                         "run (engine.passes.leak); this report lists no further checks."))
    return section("passthrough", "Columns passed through", body)


def _risk_figure(risk: dict, pro, mark, ind, thr):
    """The bars of the risk section: one share of records each."""
    bars = [("record linkage (DBRL)", risk["dbrl"], ACCENT),
            (f"interval disclosure (p = {risk['p']:g})", risk["interval_disclosure"], AFTER)]
    if pro:
        bars += [(f"records at risk (prosecutor, > {100 * thr:g} %)", pro["records_at_risk"], KEY),
                 ("prosecutor success rate", pro["success_rate"], KIND_COLORS["ordinal"]),
                 ("marketer success rate", mark["success_rate"], KIND_COLORS["nominal"])]
    if ind:
        bars.append(("individual risk (sdcMicro global)", ind["global_risk_share"], "#555"))
    labels, vals, colors = [b[0] for b in bars], [100 * b[1] for b in bars], [b[2] for b in bars]
    fig = new_figure(7, 0.3 * len(bars) + 1.3, left=2.6)
    ax = fig.add_subplot()
    ax.barh(labels[::-1], vals[::-1], color=colors[::-1])
    for y, v in enumerate(vals[::-1]):
        ax.annotate(f"{v:.2f} %" if v == 0 or v >= 0.01 else f"{v:.2g} %", (v, y), xytext=(3, 0),
                    textcoords="offset points", va="center", fontsize=8)
    ax.set_xlim(0, max(5.0, 1.2 * max(vals)))
    ax.set_xlabel("share of records (%)")
    ax.set_title("Disclosure risk", y=1.0)
    style(ax)
    return fig


def _risk_rows(risk: dict, pro, jour, mark, ind, thr) -> list:
    """The table of the risk section: (measure, value, how to read it)."""
    linked = risk.get("dbrl_linked")
    rows = [("record linkage (DBRL)",
             Raw(f"{100 * risk['dbrl']:.3g} %" + (f" — {escape(_linked(linked))}" if linked is not None else "")),
             "The share of records an intruder holding the original QIs links to their own original record by "
             "nearest distance (at most 1/k for a centroid release)."),
            (f"interval disclosure (p = {risk['p']:g})",
             Raw(f"{100 * risk['interval_disclosure']:.3g} % (sdcMicro's dRisk: "
                  f"{_pct(risk.get('interval_disclosure_sdcmicro'))})"),
             "The share of records whose original values all lie within p standard deviations of the published "
             "ones (sdcMicro's variant: at most one value outside).")]
    if pro:
        weights = risk.get("weight_column")
        pop = (f"the population the sampling weights {weights!r} stand for ({risk.get('population'):,.0f} people)"
               if weights else "no population (no weights): the release is taken as the population")
        rows += [
            ("prosecutor risk (ARX)", Raw(_risk_cells(pro)),
             f"An intruder who knows the person is in the release picks one row of the matching class: the "
             f"highest risk is 1 / the smallest class, the success rate the share of records re-identified on "
             f"average (classes / rows), records at risk those in a class giving more than {100 * thr:g} %."),
            ("journalist risk (ARX)", Raw(_risk_cells(jour)),
             f"The same for an intruder who does not know whether the person is in the release, against "
             f"{pop}."),
            ("marketer risk (ARX)", Raw(f"success rate {_pct(mark['success_rate'])}"),
             "The share of records an intruder matching every record against the population re-identifies on "
             "average."),
            ("individual risk (sdcMicro)",
             Raw(f"{ind['global_risk']:,.4g} expected re-identifications ({_pct(ind['global_risk_share'])} of "
                  f"records); highest {_pct(ind['highest_risk'])}" if ind else
                  f'<span class="note">not measured: {escape(risk.get("individual_risk_note") or NO_WEIGHTS)}</span>'),
             "The Benedetti-Franconi estimate (sdcMicro's measure_risk) of each record's chance of being "
             "re-identified given the sampling weights; the global risk is their sum, the expected number of "
             "re-identifications."),
        ]
    return rows


def _pct(x) -> str:
    return "—" if x is None else f"{100 * x:.3g} %"


def _linked(x: float) -> str:
    """DBRL's linked records as a count (ties split a record's credit: shown, not as a fraction)."""
    return f"{x:,.0f} records" + ("" if float(x).is_integer() else " (ties shared)")


def _risk_cells(m: dict) -> str:
    return (f"highest {_pct(m['highest_risk'])}, success rate {_pct(m['success_rate'])}, records at risk "
            f"{_pct(m['records_at_risk'])}")
