"""The HTML release report (issue 18): the distributions counted in the passes, the
page's sections and figures, its offline-ness, the CLI and API options, and the page
rendered in a real browser (headless Chromium)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from engine.cli import main
from engine.options import RunConfig
from engine.coordinator import run

ROOT = Path(__file__).resolve().parent.parent
CENSUS = ROOT / "tests" / "data" / "census.csv"
ADULT = ROOT / "tests" / "data" / "adult.csv"
QI = "AFNLWGT,AGI,EMCONTRB,FEDTAX,PTOTVAL,STATETAX,TAXINC,POTHVAL,INTVAL,PEARNVAL,FICA,WSALVAL,ERNVAL"
SECTIONS = ("verdict", "run", "guarantee", "passthrough", "utility", "dependency", "sensitive", "risk")

matplotlib = pytest.importorskip("matplotlib", reason="the HTML report needs matplotlib (pip install -e '.[test]')")


def _report(data=CENSUS, **kw) -> dict:
    cfg = RunConfig.make(**{"qi": QI, "k": 3, "seed": None, **kw})
    rep = run(str(data), cfg, None, distributions=True).report
    rep.input = str(data)
    return rep.to_dict()


# ---------------------------------------------------------------- distributions

def test_distributions_count_every_row_before_and_after():
    r = _report()
    X = pl.read_csv(CENSUS).select(QI.split(",")).to_numpy().astype(float)
    assert set(r["distributions"]) == set(QI.split(","))
    for j, c in enumerate(QI.split(",")):
        d = r["distributions"][c]
        assert len(d["edges"]) == 41 and len(d["before"]) == len(d["after"]) == 40
        assert sum(d["before"]) == sum(d["after"]) == r["rows"]
        assert d["edges"][0] == X[:, j].min() and d["edges"][-1] == X[:, j].max()
        # "before" is NumPy's histogram of the column over the same 40 bins
        ref, _ = np.histogram(X[:, j], bins=40, range=(X[:, j].min(), X[:, j].max()))
        assert d["before"] == ref.tolist()
    assert set(r["information_loss_by_qi"]) == set(QI.split(","))
    assert all(0 <= v <= 100 for v in r["information_loss_by_qi"].values())


@pytest.mark.parametrize("lo,hi", [(0.0, 40.0), (-3.5, 1e6), (-1e308, 1e308), (0.0, 1e-308), (5.0, 5.0)])
def test_histogram_kernels_match_the_reference(lo, hi):
    """``_count`` (4 interleaved partial histograms) and ``_count_weighted`` (the "after"
    counts) against a value-by-value reference: values inside bins (away from the
    edges, where the kernel's x * (1 / w) may round differently), the extremes, values
    outside [lo, hi], infinities; a column of few distinct values; row-major and
    column-major inputs, in chunks, one counted on the helper thread."""
    from engine.passes.distributions import Distributions
    from tests.reference import histogram

    rng = np.random.default_rng(7)
    f = (rng.integers(0, 40, 3000) + rng.uniform(0.05, 0.95, 3000)) / 40
    inside = lo * (1 - f) + hi * f  # (no overflow near the float64 limit)
    few = np.repeat(inside[:3], 500)  # long runs of one bin (the interleaving's case)
    special = np.array([lo, hi, -np.inf, np.inf, np.finfo(float).max, -np.finfo(float).max])
    col = np.concatenate([inside, few, special])
    X = np.stack([col, col[::-1]])  # (2, n): two columns of the same values
    d = Distributions(["a", "b"])
    d.start([lo, lo], [hi, hi])
    d.add(X[:, :1001], background=True)  # column-major chunk, on the helper thread
    d.add(np.ascontiguousarray(X[:, 1001:].T).T)  # a transposed (row-major) chunk
    ref = histogram(col.tolist(), lo, hi, 40)
    assert d.counts[0].tolist() == ref and d.counts[1].tolist() == ref
    assert d.vmin.tolist() == [-np.inf] * 2 and d.vmax.tolist() == [np.inf] * 2
    sizes = rng.integers(1, 9, col.shape[0])
    out = d.finish(np.stack([col, col], axis=1), sizes)
    assert out["a"]["after"] == out["b"]["after"] == histogram(col.tolist(), lo, hi, 40, sizes)


def _adult(qi) -> pl.DataFrame:
    """Adult without the twin of a QI among education / education_num (passed through, it
    would publish that QI unaggregated: the leak guard refuses the run)."""
    qi = qi.split(",") if isinstance(qi, str) else list(qi)
    twin = {"education": "education_num", "education_num": "education"}
    return pl.read_csv(ADULT).drop([twin[c] for c in qi if c in twin and twin[c] not in qi])


@pytest.mark.parametrize("method,kw", [
    ("mnqia", {"qi": "age,education_num,hours_per_week"}),
    ("maxent", {"qi": "age,education,hours_per_week", "sa": "income", "epsilon": 0.5, "block_size": 8000}),
    ("mnqia", {"qi": "age,education_num,hours_per_week", "numeric_output": "mean"}),
])
def test_range_release_distributions_spread_each_class_over_its_range(method, kw):
    """Range releases: the numeric QIs' "before" is NumPy's histogram; "after" spreads
    each class's rows evenly over its published range (a slow per-class overlap here),
    or puts them at the class mean with numeric_output="mean"."""
    cfg = RunConfig.make(method=method, k=5, seed=None, **kw)
    res = run(_adult(kw["qi"]), cfg, None, distributions=True)
    dist, table = res.report.to_dict()["distributions"], res.table
    src = pl.read_csv(ADULT)
    numeric = [c for c in kw["qi"].split(",") if src[c].dtype.is_numeric()]
    assert list(dist) == numeric
    for c in numeric:
        d, x = dist[c], src[c].to_numpy().astype(float)
        e = np.array(d["edges"])
        inv = 1.0 / (x.max() / 40 - x.min() / 40)  # the engine's bin of a value (its documented rule)

        def bins(v):
            return np.clip(np.floor(v * inv - x.min() * inv), 0, 39).astype(int)

        assert d["before"] == np.bincount(bins(x), minlength=40).tolist()
        ref = np.zeros(40)
        if kw.get("numeric_output") == "mean":
            ref = np.bincount(bins(table[c].to_numpy()), minlength=40).astype(float)
        else:
            for (lo, hi), n in zip(*np.unique(table.select(f"{c}_min", f"{c}_max").to_numpy().astype(float),
                                              axis=0, return_counts=True)):
                if hi == lo:
                    ref[min(max(np.searchsorted(e, lo, side="right") - 1, 0), 39)] += n
                else:
                    for b in range(40):
                        ref[b] += n * max(0.0, min(hi, e[b + 1]) - max(lo, e[b])) / (hi - lo)
        assert np.allclose(d["after"], ref, atol=0.01 * len(ref))
        assert abs(sum(d["after"]) - len(x)) < 0.5


def test_distributions_do_not_depend_on_chunks_threads_or_blocks():
    base = _report()
    for kw in ({"chunk_rows": 97, "threads": 1}, {"block_size": 200, "chunk_rows": 333}):
        other = _report(**kw)
        for c, d in base["distributions"].items():
            assert other["distributions"][c]["before"] == d["before"]
            assert other["distributions"][c]["edges"] == d["edges"]
    assert _report(chunk_rows=97, threads=1)["distributions"] == base["distributions"]


def test_distributions_from_a_row_group_sample_count_every_row(tmp_path):
    # a Parquet input of >= 32 row groups: bins from the plan's sample; values outside
    # its range fall into the first or last bin, whose outer edge is the true extreme
    rng = np.random.default_rng(3)
    n = 40_000
    frame = pl.DataFrame({"a": rng.lognormal(3, 1, n), "b": rng.normal(0, 1, n)})
    path = tmp_path / "t.parquet"
    frame.write_parquet(path, row_group_size=1000)
    cfg = RunConfig.make(qi="a,b", k=4, seed=None, block_size=2000)
    rep = run(str(path), cfg, None, distributions=True).report
    assert "sample" in rep.passes
    for c in ("a", "b"):
        d = rep.distributions[c]
        assert sum(d["before"]) == sum(d["after"]) == n
        assert d["edges"][0] == frame[c].min() and d["edges"][-1] == frame[c].max()
        edges = np.array(d["edges"])
        ref, _ = np.histogram(frame[c].to_numpy(), bins=edges)
        assert abs(ref - np.array(d["before"])).sum() <= 2  # (floating-point ties at inner edges)


def test_report_json_without_distributions_unless_asked(tmp_path):
    cfg = RunConfig.make(qi=QI, k=3, seed=None)
    rep = run(str(CENSUS), cfg, None).report
    assert rep.distributions is None and rep.information_loss_by_qi is not None


# ---------------------------------------------------------------- the page

class _Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.sections, self.figures, self.svgs, self.refs, self.tags = [], 0, 0, [], set()

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        a = dict(attrs)
        if tag == "section":
            self.sections.append(a.get("id"))
        self.figures += tag == "figure"
        self.svgs += tag == "svg"
        for k in ("src", "href", "xlink:href", "data", "action", "poster"):
            if a.get(k) is not None:
                self.refs.append(a[k])


def _parse(text: str) -> _Page:
    p = _Page()
    p.feed(text)
    return p


def _offline(text: str) -> None:
    p = _parse(text)
    assert not p.tags & {"script", "link", "iframe", "object", "embed", "img", "audio", "video"}
    assert all(ref.startswith(("#", "data:")) for ref in p.refs), p.refs
    assert not re.search(r"url\(\s*['\"]?(?!#|data:)", text), "a CSS url() that is not local"
    assert "@import" not in text


def test_page_has_every_section_and_figure_offline():
    from engine import html_report

    r = _report()
    text = html_report.render(r)
    p = _parse(text)
    assert p.sections == list(SECTIONS)
    assert p.svgs == p.figures == 3  # group sizes, IL per QI, distributions (the timings: a table)
    _offline(text)
    assert text.count("How to read:") == p.figures
    run_section = text[text.index('<section id="run">'):text.index('<section id="guarantee">')]
    assert r["passes"]
    for name, seconds in r["passes"].items():  # the time per pass: a row each, with its share of the run
        assert f"<td>{name}</td><td>{seconds:.2f}</td><td>{100 * seconds / r['wall_seconds']:.0f} %</td>" in run_section
    for c in QI.split(","):
        assert f"{c} (input units)" in text
    assert "does not apply" in text.lower() and "Not measured: run with --risk" in text
    assert html_report.render(r) == text  # the same report, the same page


def test_page_can_fail_the_offline_check():
    with pytest.raises(AssertionError):
        _offline('<html><body><img src="https://example.org/x.png"></body></html>')
    with pytest.raises(AssertionError):
        _offline('<html><head><style>body{background:url(http://x/y.png)}</style></head></html>')


def test_page_of_ama_draws_the_tree_and_of_maxent_the_entropy():
    from engine import html_report

    ama = _report(method="ama")
    text = html_report.render(ama)
    dep = ama["metrics"]["dependency"]
    assert "key attribute (grouped on)" in text and p_figures(text) == 4
    for a in dep["key_attributes"]:
        assert f"{a} ({dep['degrees'][a]})" in text
    cfg = RunConfig.make(qi="age,education,sex", method="maxent", sa="income", epsilon=0.5, k=5, seed=None)
    me = run(_adult(cfg.qi), cfg, None, distributions=True).report.to_dict()
    text = html_report.render(me)
    assert "threshold ε = 0.5 bits" in text and "Sensitive-attribute entropy per class" in text
    assert "each class's rows spread evenly over its range" in text  # age: its range, drawn
    _offline(text)


def p_figures(text: str) -> int:
    return _parse(text).figures


def test_page_with_risk():
    from engine import html_report

    r = _report()
    r["risk"] = {"p": 0.05, "dbrl": 0.25, "interval_disclosure": 0.01, "rows": 1080, "qi": ["a"],
                 "dbrl_linked": 0.3, "interval_disclosure_sdcmicro": 0.02, "wall_seconds": 0.1}
    text = html_report.render(r)
    assert "record linkage (DBRL)" in text and "25.00 %" in text and p_figures(text) == 4


# ---------------------------------------------------------------- CLI and API

def _anon(tmp_path, *extra) -> int:
    return main(["anonymize", str(CENSUS), str(tmp_path / "out.parquet"), "--qi", QI, "--k", "3",
                 "--quiet", *extra])


def test_cli_html_with_report_and_rebuilt_from_json(tmp_path, capsys):
    assert _anon(tmp_path, "--report", str(tmp_path / "run.json"), "--html", str(tmp_path / "page.html")) == 0
    page = (tmp_path / "page.html").read_text()
    saved = json.loads((tmp_path / "run.json").read_text())
    assert saved["distributions"] and saved["input"] == str(CENSUS)
    assert main(["report", str(tmp_path / "run.json"), "--html", str(tmp_path / "again.html")]) == 0
    assert (tmp_path / "again.html").read_text() == page  # from the JSON alone, no re-run


@pytest.mark.parametrize("html, msg", [
    ("out.parquet", "--html {d}/out.parquet: is the same file as OUTPUT"),
    ("run.json", "--html {d}/run.json: is the same file as --report"),
    ("missing/page.html", "--html folder does not exist"),
])
def test_cli_refuses_a_bad_html_path_before_any_work(tmp_path, capsys, html, msg):
    assert _anon(tmp_path, "--report", str(tmp_path / "run.json"), "--html", str(tmp_path / html)) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("microagg: error: ") and msg.format(d=tmp_path) in err and "\n" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_cli_html_refuses_the_input(tmp_path, capsys):
    src = tmp_path / "in.csv"
    shutil.copy(CENSUS, src)
    assert main(["anonymize", str(src), str(tmp_path / "o.parquet"), "--qi", QI, "--html", str(src)]) == 2
    assert "is an input file" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv"]


def test_cli_without_matplotlib_fails_up_front(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # find_spec then answers None
    assert _anon(tmp_path, "--html", str(tmp_path / "page.html")) == 2
    err = capsys.readouterr().err.strip()
    assert err == "microagg: error: --html needs matplotlib: pip install 'microagg-engine[html]'"
    assert list(tmp_path.iterdir()) == []


def test_a_failed_page_leaves_neither_output_nor_report(tmp_path, capsys, monkeypatch):
    from engine import html_report
    from engine.errors import EngineError

    def broken(*args):
        raise EngineError("the page failed")

    monkeypatch.setattr(html_report, "write", broken)
    assert _anon(tmp_path, "--report", str(tmp_path / "run.json"), "--html", str(tmp_path / "p.html")) == 2
    assert "the page failed" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_report_command_refuses_what_is_not_a_report(tmp_path, capsys):
    (tmp_path / "x.json").write_text('{"rows": 3}')
    assert main(["report", str(tmp_path / "x.json"), "--html", str(tmp_path / "p.html")]) == 2
    err = capsys.readouterr().err
    assert "microagg: error: REPORT" in err and "missing" in err
    assert main(["report", str(tmp_path / "x.json"), "--html", str(tmp_path / "x.json")]) == 2
    assert "is an input file" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.json"]


def test_api_html(tmp_path):
    from engine import anonymize

    rep = anonymize(str(CENSUS), tmp_path / "o.parquet", QI, 3, html=tmp_path / "p.html")
    assert rep.distributions is not None
    assert _parse((tmp_path / "p.html").read_text()).sections == list(SECTIONS)
    from engine.errors import EngineError

    with pytest.raises(EngineError, match="html .*is the same file as sink"):
        anonymize(str(CENSUS), tmp_path / "o2.parquet", QI, 3, html=tmp_path / "o2.parquet")


def test_the_worker_draws_the_same_page():
    from engine import html_report

    r = _report()
    pre = html_report.Prerender()
    try:
        pre.ahead({key: r[key] for key in html_report.AHEAD})
        page = pre.page(r)
        assert pre.proc is not None and pre.proc.poll() is None  # drawn by the worker, not the fallback
        if hasattr(os, "getpriority"):  # it yields to the run: the lowest priority
            assert os.getpriority(os.PRIO_PROCESS, pre.proc.pid) == min(19, os.nice(0) + html_report.WORKER_NICE)
        pre.request(r)  # asked for early, collected later: the same page
        assert pre.page(r) == page and pre.proc.poll() is None
    finally:
        pre.close()
    assert page == html_report.render(r)
    dead = html_report.Prerender()
    dead.proc.kill()
    dead.proc.wait()
    assert dead.page(r) == page and dead.proc is None  # a dead worker: drawn here instead


def test_figures_drawn_ahead_are_reused_and_redrawn_when_the_data_differs(monkeypatch):
    from engine import html_report

    r = _report()
    page = html_report.render(r)
    html_report._drawn.clear()
    html_report._ahead({key: r[key] for key in html_report.AHEAD})  # what the worker does during the write pass

    def boom(**kw):
        raise AssertionError("drawn again")

    monkeypatch.setattr(html_report, "_draw_distributions", boom)
    monkeypatch.setattr(html_report, "_draw_group_sizes", boom)
    assert html_report.render(r) == page
    other = {**r, "k": r["k"] + 1}
    with pytest.raises(AssertionError, match="drawn again"):
        html_report.render(other)


def test_the_run_hands_the_before_counts_after_the_partition_pass_then_the_rest():
    from engine.html_report import AHEAD

    calls = []
    cfg = RunConfig.make(qi=QI, k=3, seed=None)
    rep = run(str(CENSUS), cfg, None, distributions=calls.append, force_blocks=True).report
    assert [sorted(c) for c in calls] == [["distributions"], sorted(AHEAD)]
    assert calls[0]["distributions"] == {c: {"edges": d["edges"], "before": d["before"]}
                                         for c, d in rep.distributions.items()}
    assert calls[1]["distributions"] == rep.distributions


def test_the_distributions_figure_begun_from_the_before_counts_gives_the_same_page(monkeypatch):
    from engine import html_report

    r = _report()
    page = html_report.render(r)
    before = {c: {"edges": d["edges"], "before": d["before"]} for c, d in r["distributions"].items()}
    first = next(iter(before))
    other = {**before, first: {**before[first], "before": [0] * len(before[first]["before"])}}
    made = []
    fig = html_report._fig
    monkeypatch.setattr(html_report, "_fig", lambda *a, **kw: made.append(a) or fig(*a, **kw))
    for partial, figures in ((before, 1), (other, 2)):  # begun from the same counts: reused; else drawn anew
        html_report._drawn.clear()
        html_report._started.clear()
        html_report._ahead({"distributions": partial})  # what the worker does during the aggregate pass
        assert len(html_report._started) == 1
        made.clear()
        html_report._ahead({key: r[key] for key in html_report.AHEAD})  # during the write pass
        assert len(made) == figures and not html_report._started  # (+ the group sizes)
        assert html_report.render(r) == page


def test_the_cli_starts_the_worker_before_it_imports_the_run(tmp_path):
    # its imports (matplotlib) then overlap the command's own (Polars, Numba) on an idle core
    code = ("import sys; from engine import cli, html_report; seen = []; init = html_report.Prerender.__init__\n"
            "def spy(self):\n    seen.append(sorted(m for m in ('numba', 'polars') if m in sys.modules)); init(self)\n"
            "html_report.Prerender.__init__ = spy\n"
            f"code = cli.main(['anonymize', {str(CENSUS)!r}, {str(tmp_path / 'o.parquet')!r}, '--qi', {QI!r}, "
            f"'--k', '3', '--quiet', '--html', {str(tmp_path / 'p.html')!r}])\n"
            "print(code, seen)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "0 [[]]"
    assert (tmp_path / "p.html").exists()


def test_import_engine_does_not_load_matplotlib():
    code = ("import sys, engine; from engine.cli import entry; import engine.html_report; "
            "print('matplotlib' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "False"


# ---------------------------------------------------------------- in a real browser

BROWSER_HOSTS = ("google.com", "gvt1.com", "googleapis.com", "gstatic.com")  # Chromium's own services


def _chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.skip("headless Chromium is not installed (apt-get install -y chromium; .ci/run installs it): "
                    "the page was not rendered in a browser")
    return exe


def _browse(exe: str, page: Path, shot: Path, netlog: Path) -> list[str]:
    """Screenshot ``page``; return the URLs the page (not the browser's services) requested."""
    subprocess.run([exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    "--disable-background-networking", "--disable-component-update", "--no-first-run",
                    "--disable-sync", "--disable-extensions", "--window-size=1200,2600",
                    f"--log-net-log={netlog}", f"--screenshot={shot}", page.as_uri()],
                   capture_output=True, timeout=120, check=True)
    urls = set(re.findall(r'"url":"([^"]+)"', netlog.read_text()))
    return sorted(u for u in urls if u.startswith(("http:", "https:", "ws:", "wss:", "ftp:"))
                  and not any(re.match(rf"^\w+://([^/]+\.)?{re.escape(h)}(/|:|$)", u) for h in BROWSER_HOSTS))


@pytest.mark.slow
def test_page_renders_in_headless_chromium(tmp_path):
    exe = _chromium()
    assert _anon(tmp_path, "--risk", "--html", str(tmp_path / "page.html")) == 0
    page = tmp_path / "page.html"
    urls = _browse(exe, page, tmp_path / "shot.png", tmp_path / "net.json")
    assert urls == [], f"the page requested {urls}"
    import matplotlib.image  # (not loaded by the page's own drawing in this process: a worker drew it)

    img = matplotlib.image.imread(tmp_path / "shot.png")[..., :3]
    assert img.shape[0] >= 2000 and img.shape[1] >= 1000
    ink = (img < 0.9).any(axis=2).mean()  # share of pixels that are not (nearly) white
    assert 0.02 < ink < 0.9, ink
    assert len(np.unique((img * 255).astype(np.uint8).reshape(-1, 3), axis=0)) > 50  # figures, not a blank
    dom = subprocess.run([exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                          "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120).stdout
    assert _parse(dom).sections == list(SECTIONS)
    assert _parse(dom).svgs == 4  # the browser parsed every figure
    # the check can fail: the same page with one remote image is caught
    bad = tmp_path / "bad.html"
    bad.write_text(page.read_text().replace("<h1>", '<h1><img src="http://example.invalid/x.png">', 1))
    assert _browse(exe, bad, tmp_path / "bad.png", tmp_path / "bad.json") == ["http://example.invalid/x.png"]


def _paths(r: dict, depth: int = 2, prefix=()):
    """Every field of a report, to ``depth`` levels (nested objects' keys)."""
    for key, v in r.items():
        yield prefix + (key,)
        if isinstance(v, dict) and depth > 1:
            yield from _paths(v, depth - 1, prefix + (key,))


def test_report_command_names_an_edited_field(tmp_path, capsys):
    """Issue 28, item 9: a saved report with "rows": "many" was an internal error
    (ValueError: Cannot specify ',' with 's'). Now one line naming the field, exit 2,
    no page."""
    r = _report()
    r["risk"] = {"p": 0.05, "dbrl": 0.25, "interval_disclosure": 0.01, "rows": 1080, "qi": ["a"]}
    edited = dict(r, rows="many")
    (tmp_path / "r.json").write_text(json.dumps(edited))
    assert main(["report", str(tmp_path / "r.json"), "--html", str(tmp_path / "p.html")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("microagg: error: REPORT ")
    assert 'field "rows" must be a whole number >= 0, got "many"' in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


def test_every_edited_field_is_drawn_or_named(monkeypatch):
    """Each field of a report (two levels deep) set to text, a negative number, a list or
    an object: the page is drawn, or ``check_fields`` names that field; never another
    error (what ``microagg report`` would print as an internal error). (The figures are
    built, not serialized: the SVG output would take most of the time.)"""
    from engine import html_report

    monkeypatch.setattr(html_report, "_figure", lambda fig, caption: caption)
    monkeypatch.setattr(html_report, "_drawn", {})  # (figures drawn ahead: not these)
    monkeypatch.setattr(html_report, "_started", {})
    r = _report(method="ama")
    r["risk"] = {"p": 0.05, "dbrl": 0.25, "interval_disclosure": 0.01, "rows": 1080, "qi": ["a"]}
    r["distributions"] = dict(list(r["distributions"].items())[:1])  # (a smaller figure: faster)
    drawn = named = 0
    for path in _paths(r):
        for value in ("many", -1, [1], {"a": 1}):
            e = json.loads(json.dumps(r))
            d = e
            for key in path[:-1]:
                d = d[key]
            d[path[-1]] = value
            bad = html_report.check_fields(e)
            if bad is not None:
                assert path[-1] in bad[0] or (len(path) > 1 and path[-2] in bad[0]), (path, value, bad)
                named += 1
                continue
            try:
                html_report.render(e)
            except Exception as exc:
                pytest.fail(f"{path} = {value!r}: passed the check, then {type(exc).__name__}: {exc}")
            drawn += 1
    assert named > 50 and drawn > 20


# ---------------------------------------------------------------- mixed-type runs, wording (issue: risk measures)

def _mixed(**kw):
    """A mixed-type run of Adult (ordinal education in its education_num order; nominal
    sex and native_country, 41 countries: more than 21 bars) and its published table."""
    src = pl.read_csv(ADULT)
    order = src.group_by("education").agg(pl.col("education_num").min()).sort("education_num")["education"]
    cfg = RunConfig.make(qi="age,education,sex,native_country,hours_per_week", k=3,
                         ordinal={"education": order.to_list()}, **kw)
    res = run(src.drop("education_num"), cfg, None, distributions=True)
    return res.report.to_dict(), res.table, src


def test_mixed_run_counts_its_categories_before_and_after():
    """A categorical QI's bars: "before" the input's category counts, "after" the
    release's (each group's category by its size); a QI of more than 21 categories shows
    its 20 most frequent and one "other" bar; the numeric QIs' histograms too; the
    same counts whatever the chunk size and the threads."""
    r, table, src = _mixed()
    dist = r["distributions"]
    assert list(dist) == ["age", "education", "sex", "native_country", "hours_per_week"]
    for c in ("education", "sex", "native_country"):
        d = dist[c]
        before = dict(src[c].value_counts().iter_rows())
        after = dict(table[c].value_counts().iter_rows())
        shown = d["categories"][:-1] if d["other"] else d["categories"]
        assert [before[k] for k in shown] == d["before"][:len(shown)]
        assert [after.get(k, 0) for k in shown] == d["after"][:len(shown)]
        assert sum(d["before"]) == sum(d["after"]) == r["rows"]
    assert dist["education"]["kind"] == "ordinal" and dist["education"]["categories"][:3] == \
        ["Preschool", "1st-4th", "5th-6th"]  # (in its order)
    nc = dist["native_country"]
    assert nc["kind"] == "nominal" and nc["other"] == 21 and len(nc["categories"]) == 21
    assert nc["categories"][-1] == "other (21 categories)" and nc["before"][0] == max(nc["before"][:-1])
    for c in ("age", "hours_per_week"):  # counted by the write pass: the values and the published ones
        d, x = dist[c], src[c].to_numpy().astype(float)
        inv = 1.0 / (x.max() / 40 - x.min() / 40)  # the engine's bin of a value (its documented rule)
        ref = np.bincount(np.clip(np.floor(x * inv - x.min() * inv), 0, 39).astype(int), minlength=40)
        assert d["before"] == ref.tolist() and sum(d["after"]) == r["rows"]
    for kw in (dict(chunk_rows=777, threads=1), dict(chunk_rows=50_000, threads=2)):
        assert _mixed(**kw)[0]["distributions"] == dist


def test_mixed_page_words_the_loss_by_kind_and_draws_the_categories():
    from engine import html_report

    r, _, _ = _mixed()
    text = html_report.render(r)
    assert "the share of values changed" in text and "the mean rank change" in text
    assert "nominal bars: the share of rows whose category was replaced" in text
    assert "Categorical quasi-identifiers before (filled) and after (outline)" in text
    assert "they are counted by runs with --html or --report" not in text
    assert re.search(r"<th>peak memory</th><td>[\d,]+ MiB</td>", text)
    assert "z-scores" not in text.split('id="utility"')[1].split("nominal")[1].split("</tr>")[0]


def test_a_report_without_distributions_says_why():
    from engine import html_report

    r = _report()
    r["distributions"] = None
    text = html_report.render(r)
    assert "counted by runs with --html or --report" not in text
    assert "did not count them" in text


def test_risk_page_shows_linked_records_as_a_count_and_the_class_risks():
    from engine import html_report

    r = _report()
    r["risk"] = {"p": 0.05, "dbrl": 0.1426, "interval_disclosure": 0.01, "rows": 30162, "qi": ["a"],
                 "dbrl_linked": 4300.1395, "interval_disclosure_sdcmicro": 0.02, "wall_seconds": 0.1,
                 "classes": 10054, "class_qi": ["a"], "risk_threshold": 0.2,
                 "prosecutor": {"highest_risk": 1 / 3, "success_rate": 0.3333, "records_at_risk": 1.0},
                 "journalist": {"highest_risk": 1 / 3, "success_rate": 0.3333, "records_at_risk": 1.0},
                 "marketer": {"success_rate": 0.3333}, "weight_column": None, "population": None,
                 "individual_risk": None, "individual_risk_note": "needs sampling weights"}
    text = html_report.render(r)
    assert "4,300 records (ties shared)" in text and "4,300.1395" not in text
    for name in ("prosecutor risk (ARX)", "journalist risk (ARX)", "marketer risk (ARX)", "individual risk (sdcMicro)",
                 "not measured: needs sampling weights", "how to read it"):
        assert name in text, name
    assert html_report.check_fields(r) is None
    r["risk"]["prosecutor"]["highest_risk"] = "high"
    assert html_report.check_fields(r)[0] == '"risk"."prosecutor"."highest_risk"'


def test_entropy_bins_end_at_the_sensitive_attributes_maximum():
    """A binary SA's entropy is at most 1 bit: the last bin is [0.75, 1.0] (a class at
    the maximum falls into it), no 1.0-1.25 bin."""
    cfg = RunConfig.make(method="maxent", qi="age,education_num", sa="income", epsilon=0.5, k=5, seed=None)
    m = run(_adult("age,education_num"), cfg, None).report.to_dict()["metrics"]
    hist = m["entropy_hist"]
    assert hist["edges"] == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert sum(hist["classes"]) > 0 and sum(hist["tuples"]) == 30162


# ---------------------------------------------------------------- the verdict first, the columns passed through


def test_the_verdict_comes_first_and_the_pass_through_columns_are_listed(tmp_path, capsys):
    from engine import html_report

    data, out, rep, page = tmp_path / "in.csv", tmp_path / "out.parquet", tmp_path / "r.json", tmp_path / "p.html"
    pl.read_csv(CENSUS).with_columns(note=pl.lit("x"), serial=pl.int_range(pl.len()).shuffle(seed=1)).write_csv(data)
    assert main(["anonymize", str(data), str(out), "--qi", QI, "--k", "5", "--risk", "--max-risk",
                 "prosecutor=0.2,dbrl=0.3", "--report", str(rep), "--html", str(page), "--quiet"]) == 0, \
        capsys.readouterr().err
    text = page.read_text()
    sections = _parse(text).sections
    assert sections[0] == "verdict"
    verdict = text[text.index('<section id="verdict">'):text.index('<section id="run">')]
    assert "PASS" in verdict and "prosecutor max" in verdict and "dbrl" in verdict and "0.3" in verdict
    report = json.loads(rep.read_text())
    assert report["pass_through"] == ["note", "serial"]
    listed = text[text.index('<section id="passthrough">'):text.index('<section id="utility">')]
    assert "2 columns published unchanged" in listed and "note, serial" in listed
    # the leak guard's checks, when the report lists them
    report["leak_checks"] = [{"column": "serial", "check": "determines a QI", "result": "passed", "share": 0.01}]
    listed = html_report.render(report)
    assert "determines a QI" in listed and "share=0.01" in listed
    # without --max-risk: the section says how to get a verdict
    report["risk"]["verdict"] = None
    assert "No verdict: give thresholds with --risk --max-risk" in html_report.render(report)
