"""``engine.plan`` and ``microagg plan``: what a run will do, before it runs (``engine.planning``).

The plan names every column's role and QI kind, the path, the least memory limit and
the passes; it writes nothing; it refuses what ``anonymize`` refuses with the same line;
and a run's report embeds the plan it followed."""

import datetime
import json
import os

import numpy as np
import polars as pl
import pytest

import engine
from engine.budget import Refusal
from engine.cli import main

N = 600


def _table() -> pl.DataFrame:
    """Every QI kind (numeric, nominal, ordinal, date, boolean), a stratum, a derived column,
    a person id and a pass-through column."""
    rng = np.random.default_rng(0)
    grade = rng.integers(0, 3, N)
    return pl.DataFrame({
        "pid": np.arange(N),
        "age": rng.integers(18, 90, N),
        "state": rng.choice(["NY", "CA", "TX"], N),
        "grade": np.array(["low", "mid", "high"])[grade],
        "grade_num": grade,
        "born": [datetime.date(1950, 1, 1) + datetime.timedelta(days=int(d)) for d in rng.integers(0, 20000, N)],
        "owner": rng.random(N) < 0.5,
        "region": rng.choice(["north", "south"], N),
        "note": [f"n{i}" for i in range(N)],
    })


OPTIONS = dict(qi=["age", "state", "grade", "born", "owner"], k=3, ordinal={"grade": ["low", "mid", "high"]},
               derived={"grade_num": "grade"}, strata="region", group_column="g")


def _files(folder) -> list:
    return sorted(os.path.relpath(os.path.join(d, f), folder) for d, _, fs in os.walk(folder) for f in fs)


def test_plan_names_every_role_kind_and_the_least_limit_and_writes_nothing(tmp_path):
    src = tmp_path / "in.parquet"
    _table().write_parquet(src)
    before = _files(tmp_path)
    plan = engine.plan(src, tmp_path / "out.csv", **OPTIONS)
    assert _files(tmp_path) == before  # nothing written, not even a temporary file
    assert plan.qi_kinds == {"age": "numeric", "state": "nominal", "grade": "ordinal", "born": "date",
                             "owner": "boolean"}
    roles = {c["name"]: c["role"] for c in plan.columns}
    assert roles["region"] == "stratum" and roles["grade_num"] == "derived" and roles["note"] == "pass-through"
    assert roles["g"] == "group column (added)"
    assert plan.input["rows"] == N and plan.input["format"] == "parquet" and plan.output["format"] == "csv"
    assert plan.path["mode"] == "in memory"
    assert plan.passes[0] == "open" and plan.passes[-1] == "write" and "strata" in plan.passes
    # the least limit is the one a refusal states (the same process: its RSS within a few MiB)
    with pytest.raises(Refusal) as refused:
        engine.anonymize(src, tmp_path / "out.csv", memory_limit="64MiB", **OPTIONS)
    assert abs(plan.memory["least"] - refused.value.least) <= 16 << 20
    assert max(plan.memory["phases"].values()) == plan.memory["least"]
    text = plan.render()
    for word in ("grade", "ordinal", "owner", "boolean", "stratum", "least limit"):
        assert word in text


def test_plan_of_a_streamed_run_names_its_blocks_and_polish(tmp_path):
    src = tmp_path / "in.parquet"
    _table().write_parquet(src)
    plan = engine.plan(src, None, qi=["age"], k=3, block_size=100)
    assert plan.path["mode"] == "streamed" and plan.path["blocks"] == 6 and plan.path["polish"]
    assert plan.path["seam_stage"] is False
    assert [p for p in plan.passes if p in ("partition", "aggregate", "polish")] == ["partition", "aggregate", "polish"]
    assert engine.plan(src, None, qi=["age"], k=3, block_size=100, polish_rounds=0).path["polish"] is False


@pytest.mark.parametrize("bad", [
    dict(qi=["age", "nope"]),                   # a column the input does not have
    dict(qi=["age"], k=N + 1),                  # k above the rows
    dict(qi=["age"], sa="state"),               # an option the method does not use
    dict(qi=["age"], memory_limit="64MiB"),     # a limit below the run's least
    dict(qi=["age"], weight_column="age", risk=True),  # weights that are a QI
])
def test_plan_refuses_what_anonymize_refuses_with_the_same_line(tmp_path, bad):
    src = tmp_path / "in.parquet"
    _table().write_parquet(src)
    with pytest.raises(engine.EngineError) as by_run:
        engine.anonymize(src, tmp_path / "out.parquet", **{"k": 3, **bad})
    with pytest.raises(engine.EngineError) as by_plan:
        engine.plan(src, tmp_path / "out.parquet", **bad)
    assert str(by_plan.value) == str(by_run.value)
    assert _files(tmp_path) == ["in.parquet"]


def test_the_command_prints_the_plan_as_text_and_json_and_writes_nothing(tmp_path, capfd):
    src = tmp_path / "in.csv"
    _table().write_csv(src)
    args = ["plan", str(src), str(tmp_path / "out.parquet"), "--qi", "age,state,grade", "--ordinal",
            "grade=low,mid,high", "--derived", "grade_num=grade", "--strata", "region"]
    assert main(args) == 0
    assert "qi ordinal" in capfd.readouterr().out
    assert main([*args, "--json", "-"]) == 0
    out = capfd.readouterr()
    plan = json.loads(out.out)
    assert {c["name"]: c["kind"] for c in plan["columns"] if c["role"] == "qi"} == {
        "age": "numeric", "state": "nominal", "grade": "ordinal"}
    assert plan["input"]["format"] == "csv" and "least limit" in out.err
    assert _files(tmp_path) == ["in.csv"]
    assert main(["plan", str(src), "--qi", "age", "--k", "1"]) == 2
    assert capfd.readouterr().err.strip().splitlines() == ["microagg: error: k must be at least 2, got 1"]


def test_a_run_report_embeds_the_plan_it_followed(tmp_path):
    src = tmp_path / "in.parquet"
    _table().write_parquet(src)
    report = engine.anonymize(src, tmp_path / "out.parquet", **OPTIONS)
    plan = engine.plan(src, tmp_path / "out2.parquet", **OPTIONS)
    assert report.plan is not None
    assert report.plan["columns"] == plan.to_dict()["columns"]
    assert report.plan["passes"] == plan.passes and report.plan["path"] == plan.path
    assert set(report.passes) <= set(plan.passes) | {"sample", "profile", "load"}


def test_every_rule_between_options_names_declared_options_and_is_refused_by_its_message():
    """``engine.relations.RELATIONS``: the options of each rule are declared ones, and a rule
    broken alone is refused with its own message (a rule of several columns broken by a config
    made for it)."""
    from engine.options import OPTIONS
    from engine.relations import RELATIONS

    for rule in RELATIONS:
        assert set(rule.options) <= set(OPTIONS), rule.options
        assert "\n" not in rule.message
    with pytest.raises(engine.EngineError, match=r"^nominal \(--nominal\) names column 'a' twice$"):
        engine.RunConfig.make(qi=["a", "b"], k=3, nominal=["a", "a"])
    with pytest.raises(engine.EngineError, match=r"^qi lists column 'b' twice$"):
        engine.RunConfig.make(qi=["a", "b", "b", "a"], k=3)
    with pytest.raises(engine.EngineError, match=r"at least 2k=10, got 6$"):
        engine.RunConfig.make(qi=["a"], k=5, block_size=6)
