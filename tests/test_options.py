"""No option is silently ignored: every method with every option either changes the
output or the report, or stops with exit 2 and one line naming the option."""

import argparse
import json

import polars as pl
import pytest

import engine
from engine.cli import main
from engine.errors import EngineError
from engine.registry import METHODS, REGISTRY
from engine.options import OPTIONS


def flag(option: str) -> str:
    return OPTIONS[option].cli
from engine.synth import census_like

pytestmark = pytest.mark.slow

CENTROID_QI = "age,education_years,hours_per_week,wage_income"
BASE = {
    **{m: ["--qi", CENTROID_QI, "--k", "3"] for m in METHODS if REGISTRY[m].centroids},
    "maxent": ["--qi", "age,hours_per_week,sex", "--sa", "occupation", "--epsilon", "2.0"],
    "mnqia": ["--qi", "age,education_years,hours_per_week", "--k", "3"],
}
# (name, extra arguments of the baseline run, arguments of the run with the option)
VARIANTS = [
    ("k", [], ["--k", "5"]),
    ("gamma", [], ["--gamma", "0.5"]),
    ("group_column", [], ["--group-column", "gid"]),
    ("leaf_size", [], ["--leaf-size", "0"]),
    ("polish_rounds", ["--polish-rounds", "0"], ["--polish-rounds", "8"]),
    ("refine", [], ["--refine", "local"]),
    ("refine_rounds", [], ["--refine-rounds", "1"]),
    ("refine_rounds with refine", ["--refine", "local"], ["--refine", "local", "--refine-rounds", "1"]),
    ("refine_seconds", [], ["--refine-budget", "30"]),
    ("select", [], ["--select", "emad", "--select-count", "2"]),
    ("select_count", [], ["--select-count", "2"]),
    ("select_measure", [], ["--measure", "chi2"]),
    ("bins", [], ["--bins", "4"]),
    ("width", [], ["--width", "1000"]),
    ("seed", [], ["--seed", "7"]),
    ("seed with ga", ["--refine", "ga", "--refine-rounds", "2"], ["--refine", "ga", "--refine-rounds", "2",
                                                                 "--seed", "7"]),
    ("sa", [], ["--sa", "region"]),
    ("epsilon", [], ["--epsilon", "1.5"]),
    ("numeric_output", [], ["--numeric-output", "mean"]),
    ("block_size", [], ["--block-size", "700"]),
    ("risk", [], ["--risk"]),
]
# settings that size the work, not the result: accepted by every method, output identical
INVARIANT = [["--threads", "1"], ["--chunk-rows", "333"]]
TIMING = {"wall_seconds", "peak_rss_bytes", "passes", "settings", "plan"}  # (the plan names the output, threads, chunks)


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    d = tmp_path_factory.mktemp("options")
    path = d / "in.parquet"
    census_like(2_400, seed=3).write_parquet(path)
    return path


def _run(table, tmp_path, capsys, method, args, name):
    out, rep = tmp_path / f"{name}.parquet", tmp_path / f"{name}.json"
    code = main(["anonymize", str(table), str(out), "--method", method, "--block-size", "1000", *BASE[method],
                 *args, "--report", str(rep), "--quiet"])
    err = capsys.readouterr().err
    if code != 0:
        return code, err, None, None
    report = {k: v for k, v in json.loads(rep.read_text()).items() if k not in TIMING}
    return code, err, out.read_bytes(), report


@pytest.mark.parametrize("method", METHODS)
def test_every_option_changes_the_result_or_is_refused(method, table, tmp_path, capsys):
    outcomes, baselines = {}, {}
    for name, base_args, args in VARIANTS:
        if tuple(base_args) not in baselines:  # most options share the baseline: run it once
            baselines[tuple(base_args)] = _run(table, tmp_path, capsys, method, base_args, "base")
        code0, err, out0, rep0 = baselines[tuple(base_args)]
        assert code0 in (0, 2), (name, err)
        code, err, out1, rep1 = _run(table, tmp_path, capsys, method, args, "opt")
        if code0 == 2:  # the baseline's own option (--refine with maxent) is refused: so is the variant
            assert code == 2, (name, err)
        if code == 2:
            assert err.startswith("microagg: error: ") and err.count("\n") == 1, (name, err)
            outcomes[name] = "refused"
            continue
        assert code == 0, (name, err)
        assert out1 != out0 or rep1 != rep0, f"{name} was accepted by {method} and changed nothing"
        outcomes[name] = "applied"
    spec = REGISTRY[method]
    # what the option table promises
    assert outcomes["gamma"] == ("applied" if method in OPTIONS["gamma"].methods else "refused")
    for o in ("refine", "leaf_size", "polish_rounds", "select_measure"):
        assert outcomes[o] == "refused" or method in OPTIONS[o].methods, o
    assert outcomes["refine_rounds"] == "refused"  # without --refine
    assert outcomes["sa"] == ("applied" if spec.needs_sa else "refused")
    assert outcomes["seed"] == ("applied" if not spec.centroids and method in OPTIONS["seed"].methods else "refused")
    if spec.centroids:
        assert outcomes["seed with ga"] == "applied" and outcomes["refine"] == "applied"
    assert outcomes["group_column"] == outcomes["k"] == outcomes["block_size"] == outcomes["risk"] == "applied"


@pytest.mark.parametrize("method", ["mdav", "maxent", "mnqia"])
def test_resource_settings_are_taken_and_change_no_value(method, table, tmp_path, capsys):
    code, err, out0, rep0 = _run(table, tmp_path, capsys, method, [], "base")
    assert code == 0, err
    for args in INVARIANT:
        code, err, out1, rep1 = _run(table, tmp_path, capsys, method, args, "opt")
        assert code == 0, (args, err)
        assert out1 == out0, args
        assert rep1 == rep0, args
    # a memory limit sizes chunks and blocks, not the result: any two limits agree (with
    # no limit the streamed MDAV family also polishes by default, which a limit does not)
    # (limits above this process's own RSS, which grows over a whole test session)
    import psutil

    rss = psutil.Process().memory_info().rss
    code, err, out0, rep0 = _run(table, tmp_path, capsys, method, ["--memory-limit", str(rss + (1 << 30))], "base")
    assert code == 0, err
    code, err, out1, rep1 = _run(table, tmp_path, capsys, method, ["--memory-limit", str(rss + (4 << 30))], "opt")
    assert code == 0, err
    assert out1 == out0 and {k: v for k, v in rep1.items() if k != "memory_limit"} == \
        {k: v for k, v in rep0.items() if k != "memory_limit"}


@pytest.mark.parametrize("method, kwargs, option", [
    ("maxent", dict(k=None, sa="occupation", refine="local"), "refine"),
    ("mnqia", dict(k=3, gamma=0.5), "gamma"),
    ("mdav", dict(k=3, sa="occupation"), "sa"),
    ("mdav", dict(k=3, epsilon=1.0), "epsilon"),
    ("mnqia", dict(k=3, leaf_size=0), "leaf_size"),
    ("mdav", dict(k=3, refine_rounds=2), "refine_rounds"),
    ("mdav", dict(k=3, seed=4), "seed"),
    ("mdav", dict(k=3, numeric_output="mean"), "numeric_output"),
])
def test_the_api_refuses_as_the_cli(method, kwargs, option, table, tmp_path):
    qi = BASE[method][BASE[method].index("--qi") + 1].split(",")
    with pytest.raises(EngineError, match=rf"^{option} \({flag(option)}\) .*(method {method}|only with)"):
        engine.anonymize(str(table), tmp_path / "o.parquet", qi=qi, method=method, **kwargs)
    assert not (tmp_path / "o.parquet").exists()


def test_every_option_is_declared_and_reaches_both_faces():
    """Each option of the table names known methods and has help, is a flag of every command
    that offers it (parsed into its own name), and, offered by anonymize, is a parameter of
    the API's ``anonymize``: the faces and the table agree."""
    import inspect

    from engine.cli import build_parser

    subcommands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    api = inspect.signature(engine.anonymize).parameters
    for o in OPTIONS.values():
        assert o.methods <= set(METHODS) and o.help, o.name
        for command in o.commands:
            dests = {a.dest for a in subcommands[command]._actions}
            assert o.name in dests, (o.name, command)
        if "anonymize" in o.commands:
            assert o.name in api, o.name


def test_one_report_for_every_method(table, tmp_path, capsys):
    core = {"rows", "groups", "min_group_size", "max_group_size", "information_loss_percent", "sse", "sst",
            "verified", "wall_seconds", "peak_rss_bytes", "passes", "settings", "risk", "metrics"}
    for method in ("mdav", "maxent", "mnqia"):
        out, rep = tmp_path / f"{method}.parquet", tmp_path / f"{method}.json"
        assert main(["anonymize", str(table), str(out), "--method", method, *BASE[method], "--risk",
                     "--report", str(rep), "--quiet"]) == 0, capsys.readouterr().err
        r = json.loads(rep.read_text())
        assert core <= set(r), (method, core - set(r))
        assert r["verified"]["rows"] == 2_400 and r["verified"]["min_class_size"] >= (r["k"] or 2)
        assert r["risk"] is not None and 0 <= r["information_loss_percent"] <= 100
        assert r["settings"]["method"] == method


def test_range_self_check_counts_the_published_values(table, tmp_path, monkeypatch):
    """A range release whose written values leave a class below k is caught before
    anything appears: here one row of a class of exactly k rows is written with
    another class's published values (its label changed after the upstream recount)."""
    import numpy as np

    from engine.methods import ranges
    from engine.errors import VerificationError

    real = ranges.range_write_pass

    def corrupt(source, path, fmt, labels, *a, **kw):
        sizes = np.bincount(labels)
        i = int(np.flatnonzero(sizes[labels] == 3)[0])
        labels[i] = labels[i] + 1 if labels[i] + 1 < sizes.shape[0] else labels[i] - 1
        return real(source, path, fmt, labels, *a, **kw)

    monkeypatch.setattr(ranges, "range_write_pass", corrupt)
    with pytest.raises(VerificationError, match="smaller than k=3"):
        engine.anonymize(str(table), tmp_path / "o.parquet", qi=["age", "wage_income", "property_tax"], k=3, method="mnqia",
                         block_size=1000)
    assert not (tmp_path / "o.parquet").exists()


def test_the_documented_table_is_the_registry():
    from pathlib import Path

    from engine.options import options_table

    text = (Path(__file__).parent.parent / "docs" / "usage.md").read_text()
    assert options_table() in text


@pytest.mark.parametrize("method, kw", [("maxent", dict(k=None, sa="occupation", epsilon=2.0)),
                                        ("mnqia", dict(k=3))])
@pytest.mark.parametrize("block_size", [None, 1_000])
def test_range_release_information_loss_is_the_classes_spread(method, kw, block_size):
    """A range release's SSE / SST: the numeric QIs around their class means on
    z-scores (population sd), as the MDAV family's, recomputed here from the labels."""
    import numpy as np

    df = census_like(3_000, seed=1)
    qi = ["age", "wage_income"] + (["sex"] if method == "maxent" else [])
    res = engine.microaggregate(df, qi=qi, method=method, block_size=block_size, **kw)
    rep, lab = res.report, res.labels
    by_qi = {}
    for c in ("age", "wage_income"):
        x = df[c].cast(pl.Float64).to_numpy()
        z = (x - x.mean()) / x.std()
        means = np.bincount(lab, weights=z) / np.bincount(lab)
        by_qi[c] = 100.0 * ((z - means[lab]) ** 2).sum() / len(z)
    assert rep.information_loss_by_qi == pytest.approx(by_qi, rel=1e-9)
    assert rep.information_loss_percent == pytest.approx(np.mean(list(by_qi.values())), rel=1e-9)
    assert rep.sst == 2 * 3_000


def _subparser(name):
    import argparse

    from engine.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


@pytest.mark.parametrize("command", ["anonymize", "demo"])
def test_the_command_line_flags_are_the_table(command):
    """Every option the table offers ``command`` is a flag with the table's spelling and
    help, and the command has no other option but its own (INPUT, OUTPUT, --quiet, ...)."""
    own = {"help", "input", "output", "quiet", "rows"}
    actions = {}
    for a in _subparser(command)._actions:
        if a.dest not in own:
            actions.setdefault(a.dest, []).append(a)
    offered = {name for name, o in OPTIONS.items() if command in o.commands}
    assert set(actions) == offered
    for name in offered:
        o = OPTIONS[name]
        assert o.cli == actions[name][0].option_strings[0], name
        assert actions[name][0].help == o.help.replace("%", "%%"), name


@pytest.mark.parametrize("function", ["microaggregate", "anonymize"])
def test_the_api_keywords_are_the_table(function):
    """The API's keyword signatures (kept for type hints and IDEs) hold the table's
    options with the table's defaults; what they accept is checked by the table."""
    import inspect

    from engine import api

    params = inspect.signature(getattr(api, function)).parameters
    options = {n for n in params if n in OPTIONS}
    offered = {n for n, o in OPTIONS.items() if "anonymize" in o.commands or o.commands >= {"demo"}}
    if function == "anonymize":
        assert offered <= options
    else:  # an in-memory run: nothing written, so no report, page, risk (nor its weights and thresholds) or cluster
        assert offered - options == {"report", "html", "risk", "weight_column", "max_risk", "scheduler"}
    for n in options - {"k", "qi"}:  # k: 3 for microaggregate, required by anonymize; qi: required
        assert params[n].default == OPTIONS[n].default_value, (function, n)
    assert set(params) - options <= {"data", "source", "sink"}


def test_the_api_and_the_command_line_refuse_alike():
    from engine.options import RunConfig

    for kw in (dict(gamma=0.0), dict(threads=0), dict(leaf_size=-1), dict(refine="x"), dict(bins=0)):
        with pytest.raises(EngineError) as err:
            RunConfig.make(qi=["a"], k=3, method="vmdav", **kw)
        assert str(err.value).count("\n") == 0 and next(iter(kw)) in str(err.value)
