"""The risk verdict (``--max-risk``, ``engine.audit.verdict``): a measure above its
threshold fails the run with exit 1 and one line; nothing is written at OUTPUT, while
``--report`` and ``--html`` are, with the verdict and the measures; ``microagg risk``
exits 1 the same way. Bad input (an unknown measure, a threshold outside (0, 1], a
measure the run cannot measure, ``--max-risk`` without ``--risk``) is one line, exit 2,
nothing written."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest

import engine
from engine.audit.verdict import EMA_THRESHOLD, MEASURES, RiskAboveThreshold, evaluate, parse_max_risk
from engine.cli import main
from engine.errors import EngineError
from engine.synth import census_like

QI = "age,hours_per_week"


@pytest.fixture
def data(tmp_path) -> str:
    path = tmp_path / "in.parquet"
    census_like(600, seed=3).write_parquet(path)
    return str(path)


# ---------------------------------------------------------------- parsing


def test_parse_values_defaults_and_default():
    assert parse_max_risk(None) is None
    assert parse_max_risk("prosecutor=0.05,dbrl") == {"prosecutor": 0.05, "dbrl": EMA_THRESHOLD}
    assert parse_max_risk(["prosecutor=0.05", "interval=1"]) == {"prosecutor": 0.05, "interval": 1.0}
    assert parse_max_risk({"marketer": 0.2}) == {"marketer": 0.2}
    assert set(parse_max_risk("default")) == {"prosecutor", "journalist", "marketer", "dbrl"}
    assert set(parse_max_risk("default", weights=True, households=True)) == {
        m for m, spec in MEASURES.items() if spec[1] is not None}
    assert parse_max_risk("default,prosecutor=0.2")["prosecutor"] == 0.2


@pytest.mark.parametrize("value, message", [
    ("prosecuter=0.05", "unknown measure 'prosecuter' \\(choose from prosecutor, journalist"),
    ("dbrl=0", "threshold of 'dbrl' must be in \\(0, 1\\], got '0'"),
    ("dbrl=1.5", "must be in \\(0, 1\\]"),
    ("dbrl=-0.1", "must be in \\(0, 1\\]"),
    ("dbrl=nan", "must be in \\(0, 1\\]"),
    ("dbrl=high", "must be a number in \\(0, 1\\], got 'high'"),
    ({"dbrl": True}, "must be a number"),
    ("interval", "measure 'interval' has no default threshold"),
    ("individual", "measure 'individual' needs sampling weights"),
    ("household", "measure 'household' needs a household column"),
    ("", "unknown measure ''"),
])
def test_bad_values_are_one_line(value, message):
    with pytest.raises(EngineError, match=message):
        parse_max_risk(value)


def test_evaluate_is_at_most_the_threshold():
    risk = {"dbrl": 0.05, "prosecutor": {"highest_risk": 0.2}, "interval_disclosure": 0.9}
    v = evaluate({"dbrl": 0.05, "prosecutor": 0.09, "interval": 0.95}, risk)
    assert not v["passed"]
    assert [(m["measure"], m["passed"]) for m in v["measures"]] == [("dbrl", True), ("prosecutor", False),
                                                                    ("interval", True)]
    assert str(RiskAboveThreshold(v)) == "risk above its threshold: prosecutor max 0.2 > 0.09"


# ---------------------------------------------------------------- anonymize


def test_a_failed_verdict_writes_the_report_and_the_page_but_not_the_output(tmp_path, data, capsys):
    out, rep, page = tmp_path / "out.parquet", tmp_path / "rep.json", tmp_path / "rep.html"
    out.write_bytes(b"the previous release")
    code = main(["anonymize", data, str(out), "--qi", QI, "--k", "5", "--risk", "--max-risk",
                 "prosecutor,dbrl=0.5", "--report", str(rep), "--html", str(page)])
    err = capsys.readouterr().err
    assert code == 1, err
    assert err == "microagg: risk above its threshold: prosecutor max 0.2 > 0.09\n"
    assert out.read_bytes() == b"the previous release"
    v = json.loads(rep.read_text())["risk"]["verdict"]
    assert v["passed"] is False
    assert [(m["measure"], m["threshold"], m["passed"]) for m in v["measures"]] == [
        ("prosecutor", 0.09, False), ("dbrl", 0.5, True)]
    html = page.read_text()
    assert "FAIL" in html and "prosecutor max" in html
    assert not list(tmp_path.glob(".*tmp*")) and sorted(p.name for p in tmp_path.iterdir()) == [
        "in.parquet", "out.parquet", "rep.html", "rep.json"]


def test_a_passed_verdict_writes_everything(tmp_path, data, capsys):
    out, rep = tmp_path / "out.parquet", tmp_path / "rep.json"
    assert main(["anonymize", data, str(out), "--qi", QI, "--k", "5", "--risk", "--max-risk",
                 "prosecutor=0.2,marketer=0.25", "--report", str(rep)]) == 0
    assert "risk verdict: pass (prosecutor max 0.2 <= 0.2" in capsys.readouterr().err
    assert out.exists() and json.loads(rep.read_text())["risk"]["verdict"]["passed"] is True


def test_a_failed_verdict_writes_nothing_to_stdout(tmp_path, data, capfd):
    rep = tmp_path / "rep.json"
    code = main(["anonymize", data, "-", "--qi", QI, "--k", "3", "--risk", "--max-risk", "dbrl=0.01",
                 "--report", str(rep)])
    captured = capfd.readouterr()
    assert code == 1 and captured.out == "" and "dbrl" in captured.err
    assert json.loads(rep.read_text())["risk"]["verdict"]["passed"] is False


@pytest.mark.parametrize("extra, message", [
    (["--max-risk", "prosecutor"], "max_risk (--max-risk) takes effect only with risk (--risk)"),
    (["--risk", "--max-risk", "nope=0.1"], "unknown measure 'nope'"),
    (["--risk", "--max-risk", "dbrl=2"], "must be in (0, 1]"),
    (["--risk", "--max-risk", "global"], "measure 'global' needs sampling weights"),
])
def test_bad_max_risk_is_exit_2_and_nothing_written(tmp_path, data, capsys, extra, message):
    out, rep = tmp_path / "out.parquet", tmp_path / "rep.json"
    assert main(["anonymize", data, str(out), "--qi", QI, "--k", "3", "--report", str(rep), *extra]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("microagg: error: ") and message in err, err
    assert not out.exists() and not rep.exists()


def test_the_api_raises_after_writing_the_report(tmp_path, data):
    out, rep = tmp_path / "out.parquet", tmp_path / "rep.json"
    with pytest.raises(RiskAboveThreshold) as info:
        engine.anonymize(data, out, QI.split(","), 3, risk=True, max_risk={"prosecutor": 0.05}, report=rep)
    assert info.value.verdict["passed"] is False and isinstance(info.value, EngineError)
    assert not out.exists() and json.loads(rep.read_text())["risk"]["verdict"]["passed"] is False


# ---------------------------------------------------------------- microagg risk


def test_the_risk_command_exits_1_above_a_threshold(tmp_path, data, capsys):
    out, js = tmp_path / "out.parquet", tmp_path / "risk.json"
    assert main(["anonymize", data, str(out), "--qi", QI, "--k", "4", "--quiet"]) == 0
    capsys.readouterr()
    assert main(["risk", data, str(out), "--qi", QI, "--max-risk", "default", "--json", str(js)]) == 1
    captured = capsys.readouterr()
    assert "verdict: FAIL" in captured.out
    assert captured.err.startswith("microagg: risk above its threshold: prosecutor max 0.25 > 0.09")
    assert json.loads(js.read_text())["verdict"]["passed"] is False
    assert main(["risk", data, str(out), "--qi", QI, "--max-risk", "prosecutor=0.25"]) == 0
    assert main(["risk", data, str(out), "--qi", QI, "--max-risk", "interval"]) == 2
    assert "has no default threshold" in capsys.readouterr().err


def test_the_verdict_applies_to_the_household_risk(tmp_path, capsys):
    df = census_like(600, seed=3).with_columns(hh=pl.col("person_id") // 2)
    data = tmp_path / "in.parquet"
    df.write_parquet(data)
    out = tmp_path / "out.parquet"
    assert main(["anonymize", str(data), str(out), "--qi", QI, "--k", "5", "--quiet"]) == 0
    capsys.readouterr()
    # a household of 2 in classes of 5: 1 - (4/5)^2 = 0.36 > 0.3, while each member is at 0.2
    code = main(["risk", str(data), str(out), "--qi", QI, "--household-column", "hh",
                 "--max-risk", "prosecutor=0.3,household=0.3"])
    err = capsys.readouterr().err
    assert code == 1 and "household max" in err and "prosecutor max" not in err, err
    assert np.isclose(float(err.split("household max ")[1].split()[0]), 0.36, atol=0.1)
