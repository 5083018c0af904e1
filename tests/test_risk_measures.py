"""Re-identification risks of a release's equivalence classes (``engine.audit.risk``):
ARX's prosecutor, journalist and marketer risks and sdcMicro's individual risk with
sampling weights (``--weight-column``). Hand-computed tables against the formulas
written out here; the kernels and the whole measure against the slow record-by-record
reference (``tests/reference_risk.py``); a missing value as a value of its own in a
class key; bad weight columns refused in one line (exit 2)."""

from __future__ import annotations

import datetime as dt
import inspect
import json
import math

import numpy as np
import polars as pl
import pytest

import reference_risk as ref
from engine import cli
from engine.audit.risk import NO_WEIGHTS, disclosure_risk
from engine.cli import main
from engine.errors import EngineError
from engine.kernels.risk import class_summary, class_totals, individual_risk
from engine.synth import census_like

# ---------------------------------------------------------------- hand-computed

# 10 rows, 3 classes of the release: A (rows 0-1, weights 10 each), B (rows 2-4, weights 4
# each), C (rows 5-9, weight 1 each: a class that is its own population, and a missing value
# of the categorical QI as its key)
ORIGINAL = pl.DataFrame({"a": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0],
                         "s": ["x", "x", "y", "y", "y", None, None, None, None, None],
                         "w": [10.0, 10.0, 4.0, 4.0, 4.0, 1.0, 1.0, 1.0, 1.0, 1.0]})
RELEASE = pl.DataFrame({"a": [1.5, 1.5, 4.0, 4.0, 4.0, 8.0, 8.0, 8.0, 8.0, 8.0], "s": ORIGINAL["s"],
                        "w": ORIGINAL["w"]})


@pytest.fixture
def hand(tmp_path):
    o, m = tmp_path / "o.parquet", tmp_path / "m.parquet"
    ORIGINAL.write_parquet(o)
    RELEASE.write_parquet(m)
    return o, m


def test_hand_computed_with_weights(hand):
    r = disclosure_risk(*hand, ["a", "s"], weight_column="w")
    n = 10
    f = {"A": 2, "B": 3, "C": 5}
    F = {"A": 20.0, "B": 12.0, "C": 5.0}
    assert r.classes == 3 and r.population == 37.0 and r.weight_column == "w"
    # prosecutor: highest 1 / min f; success rate classes / n; records at risk: 1/f > 0.2
    # (A: 1/2, B: 1/3 are; C: 1/5 = 0.2 is not)
    assert r.prosecutor == pytest.approx({"highest_risk": 1 / 2, "success_rate": 3 / n,
                                          "records_at_risk": (2 + 3) / n})
    # journalist: highest 1 / min F; 1/F > 0.2 for no class; success rate
    # max(classes / sum F, sum f/F / n)
    marketer = (f["A"] / F["A"] + f["B"] / F["B"] + f["C"] / F["C"]) / n
    assert marketer == pytest.approx(0.135)
    assert r.journalist == pytest.approx({"highest_risk": 1 / 5, "success_rate": max(3 / 37, marketer),
                                          "records_at_risk": 0.0})
    assert r.marketer == pytest.approx({"success_rate": marketer})
    # sdcMicro (indivRisk, approx): A: f = 2, p = 0.1: p/(1-p) - (p/(1-p))^2 log(1/p);
    # B: f = 3, p = 0.25: p / (f - (1 - p)); C: f = F: 1/f
    p = 0.1
    r_a = p / (1 - p) - (p / (1 - p)) ** 2 * math.log(1 / p)
    r_b = 0.25 / (3 - 0.75)
    r_c = 1 / 5
    ind = r.individual_risk
    assert ind["global_risk"] == pytest.approx(2 * r_a + 3 * r_b + 5 * r_c, rel=1e-12)
    assert ind["global_risk_share"] == pytest.approx((2 * r_a + 3 * r_b + 5 * r_c) / n, rel=1e-12)
    assert ind["highest_risk"] == pytest.approx(0.2) and ind["records_at_risk"] == 0.0
    assert r.individual_risk_note is None
    text = r.summary()
    assert "prosecutor: highest risk 50 %" in text and "expected re-identifications" in text


def test_hand_computed_without_weights(hand):
    r = disclosure_risk(*hand, ["a", "s"])
    # no population: the journalist's figures are the prosecutor's, the marketer's classes / n
    assert r.prosecutor == r.journalist == pytest.approx({"highest_risk": 0.5, "success_rate": 0.3,
                                                          "records_at_risk": 0.5})
    assert r.marketer == pytest.approx({"success_rate": 0.3})
    assert r.individual_risk is None and r.individual_risk_note == NO_WEIGHTS and r.population is None
    assert "individual risk (sdcMicro): not measured: needs sampling weights" in r.summary()


def test_f1_formula_and_the_threshold(tmp_path):
    """A sample unique (f = 1, weight 8: p = 1/8): p/(1-p) log(1/p); a lower threshold."""
    o, m = tmp_path / "o.parquet", tmp_path / "m.parquet"
    pl.DataFrame({"a": [1.0, 2.0, 3.0], "w": [8.0, 1.0, 1.0]}).write_parquet(o)
    pl.DataFrame({"a": [1.0, 2.5, 2.5]}).write_parquet(m)
    r = disclosure_risk(o, m, ["a"], weight_column="w", threshold=0.1)
    p = 1 / 8
    r1 = p / (1 - p) * math.log(1 / p)
    r2 = 1 / 2  # the class of rows 2-3 has f = F = 2
    assert r.individual_risk["global_risk"] == pytest.approx(r1 + 2 * r2, rel=1e-12)
    assert r.prosecutor["highest_risk"] == 1.0 and r.journalist["highest_risk"] == pytest.approx(1 / 2)
    assert r.journalist["records_at_risk"] == pytest.approx(1.0)  # 1/8 > 0.1 and 1/2 > 0.1
    assert r.individual_risk["records_at_risk"] == pytest.approx(1.0)  # r1 = 0.297 > 0.1
    assert r.risk_threshold == 0.1


# ---------------------------------------------------------------- keys: a missing value is a value


def test_a_missing_value_is_a_value_of_its_own(tmp_path):
    """Rows that differ only by a missing value against a value are two classes; so are
    -0.0 and 0.0 (a release shows them apart), and two 64-bit integers a float64 would
    not tell apart; missing == missing."""
    o, m = tmp_path / "o.parquet", tmp_path / "m.parquet"
    n = 8
    pl.DataFrame({"a": np.arange(n, dtype=float)}).write_parquet(o)
    pl.DataFrame({
        "a": [0.0, 0.0, -0.0, -0.0, None, None, 1.0, 1.0],
        "s": ["u", None, "u", "u", None, None, "v", "v"],
        "big": pl.Series([2 ** 53, 2 ** 53, 2 ** 53, 2 ** 53, None, None, 2 ** 53 + 1, 2 ** 53], dtype=pl.Int64),
    }).write_parquet(m)
    r = disclosure_risk(o, m, ["a"], classes_on=["a", "s", "big"])
    # classes: (0,u,B) (0,null,B) (-0,u,B)x2 (null,null,null)x2 (1,v,B+1) (1,v,B)
    assert r.classes == 6
    keys = [(0.0, "u", 2 ** 53), (0.0, None, 2 ** 53), ("-0", "u", 2 ** 53), ("-0", "u", 2 ** 53),
            (None, None, None), (None, None, None), (1.0, "v", 2 ** 53 + 1), (1.0, "v", 2 ** 53)]
    want = ref.measures(keys)
    assert r.prosecutor == pytest.approx(want["prosecutor"]) and r.class_qi == ["a", "s", "big"]


# ---------------------------------------------------------------- kernels against the reference


def test_individual_risk_kernel_matches_sdcmicro():
    rng = np.random.default_rng(5)
    f = rng.integers(1, 8, 2000)
    F = f + np.where(rng.random(2000) < 0.2, 0.0, rng.uniform(0.0, 50.0, 2000) ** 2)  # a fifth: F = f
    out = np.empty(f.shape[0])
    individual_risk(f, F, out)
    for k in range(f.shape[0]):
        assert out[k] == pytest.approx(ref.sdcmicro_risk(int(f[k]), float(F[k])), rel=1e-10, abs=1e-15), (f[k], F[k])


@pytest.mark.parametrize("f", [1, 2, 3])
@pytest.mark.parametrize("excess", [1e-13, 1e-9, 1e-6, 1e-3, 0.5, 1e6])
def test_individual_risk_near_the_population_size(f, excess):
    """F barely above f: sdcMicro's f = 2 formula cancels two terms near 1/2; the kernel
    (a series there) agrees with 60-digit decimals."""
    out = np.empty(1)
    individual_risk(np.array([f]), np.array([f + excess]), out)
    assert out[0] == pytest.approx(ref.sdcmicro_risk_exact(f, f + excess), rel=1e-12)


def test_class_totals_sum_in_row_order_whatever_the_chunks():
    rng = np.random.default_rng(2)
    idx = rng.integers(0, 50, 10_000)
    w = 1.0 + rng.random(10_000) * 1e3
    whole_f, whole_W = np.zeros(50, np.int64), np.zeros(50)
    class_totals(idx, w, whole_f, whole_W)
    for chunk in (1, 7, 333, 4096):
        f, W = np.zeros(50, np.int64), np.zeros(50)
        for a in range(0, idx.shape[0], chunk):
            class_totals(idx[a: a + chunk], w[a: a + chunk], f, W)
        assert (f == whole_f).all() and (W == whole_W).all()  # bit for bit
    ref_W = [sum(w[i] for i in range(idx.shape[0]) if idx[i] == c) for c in range(50)]
    assert whole_f.tolist() == np.bincount(idx, minlength=50).tolist() and whole_W.tolist() == ref_W


def test_class_summary_skips_empty_classes():
    f = np.array([0, 2, 3])
    F = np.array([0.0, 4.0, 3.0])
    r = np.array([0.0, 0.3, 1 / 3])
    n, k, fmin, Fmin, risky_f, risky_F, share, total_F, expected, rmax, risky_r = class_summary(f, F, r, 0.3)
    assert (n, k, fmin, Fmin, risky_f, risky_F) == (5, 2, 2.0, 3.0, 5, 3)
    assert (share, total_F, expected, rmax, risky_r) == pytest.approx((2 / 4 + 1.0, 7.0, 0.6 + 1.0, 1 / 3, 3))


def _random_release(rng, n):
    """An original of one numeric QI and fractional weights, and a release whose classes
    are keyed by a numeric, a text, a date, a Boolean and an integer column, with missing values."""
    a = rng.integers(0, 3, n).astype(float)
    s = rng.choice(["p", "q", None], n).tolist()
    d = [None if x == 3 else dt.date(2020, 1, 1) + dt.timedelta(days=int(x)) for x in rng.integers(0, 4, n)]
    b = rng.choice([True, False], n).tolist()
    i = rng.integers(0, 2, n)
    w = 1.0 + np.round(rng.random(n) * 40, 3)
    original = pl.DataFrame({"a": rng.normal(size=n), "w": w})
    release = pl.DataFrame({"a": a, "s": s, "d": d, "b": b, "i": i})
    keys = list(zip(a.tolist(), s, d, b, i.tolist()))
    return original, release, keys, w.tolist()


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_against_the_record_by_record_reference(tmp_path, fmt):
    rng = np.random.default_rng(11)
    original, release, keys, w = _random_release(rng, 700)
    o, m = tmp_path / f"o.{fmt}", tmp_path / f"m.{fmt}"
    for frame, path in ((original, o), (release, m)):
        frame.write_parquet(path) if fmt == "parquet" else frame.write_csv(path)
    on = ["a", "s", "d", "b", "i"]
    want = ref.measures(keys, w)
    got = [disclosure_risk(o, m, ["a"], classes_on=on, weight_column="w", chunk_rows=c).to_dict()
           for c in (13, 100_000)]
    for key in ("wall_seconds",):
        for g in got:
            g.pop(key)
    assert got[0] == got[1]  # chunk size: the same figures, bit for bit
    r = got[0]
    assert r["classes"] == want["classes"]
    for name in ("prosecutor", "journalist", "marketer", "individual_risk"):
        assert r[name] == pytest.approx(want[name], rel=1e-12), name
    assert r["population"] == pytest.approx(want["population"], rel=1e-12)


# ---------------------------------------------------------------- the weight column: one line, exit 2


def _table(tmp_path, w) -> str:
    df = census_like(300, seed=4).with_columns(pl.Series("w", w))
    path = tmp_path / "in.parquet"
    df.write_parquet(path)
    return str(path)


def _anonymize(tmp_path, capsys, data, *extra):
    out = tmp_path / "out.parquet"
    code = main(["anonymize", data, str(out), "--qi", "age,hours_per_week,sex", "--k", "3", "--quiet", *extra])
    return code, capsys.readouterr().err, out


@pytest.mark.parametrize("w, column, message", [
    (np.full(300, 5.0), "nope", "weight column 'nope' not found in"),
    (["5"] * 300, "w", "weight column 'w' of .* is not numeric \\(String\\)"),
    (np.r_[np.full(10, 5.0), -3.0, np.full(289, 5.0)], "w", "has the value -3.0 at row 11 .*at least 0"),
    (np.r_[np.full(299, 5.0), -0.5], "w", "has the value -0.5 at row 300"),
    (np.r_[np.full(4, 5.0), np.nan, np.full(295, 5.0)], "w", "has the value nan at row 5"),
    ([5.0] * 20 + [None] + [5.0] * 279, "w", "has a missing value at row 21 .*needs its sampling weight"),
    (np.full(300, 5.0), "age", "weight column 'age' is also a quasi-identifier"),
])
def test_a_bad_weight_column_is_one_line_exit_2(tmp_path, capsys, w, column, message):
    import re

    data = _table(tmp_path, w)
    code, err, out = _anonymize(tmp_path, capsys, data, "--risk", "--weight-column", column)
    assert code == 2 and err.count("\n") == 1 and err.startswith("microagg: error: "), err
    assert re.search(message, err), err
    assert not out.exists()
    with pytest.raises(EngineError, match=message):
        disclosure_risk(data, data, ["age", "hours_per_week"], weight_column=column)


def test_the_weight_column_takes_effect_only_with_risk(tmp_path, capsys):
    code, err, out = _anonymize(tmp_path, capsys, _table(tmp_path, np.full(300, 5.0)), "--weight-column", "w")
    assert code == 2 and err.count("\n") == 1 and "takes effect only with risk (--risk)" in err
    assert not out.exists()


def test_anonymize_risk_with_weights_matches_the_reference(tmp_path, capsys):
    """--risk --weight-column: the report's figures are those of the written release's
    classes (every QI's published values) and the input's weights."""
    rng = np.random.default_rng(3)
    w = 1.0 + np.round(rng.random(300) * 99, 2)
    data = _table(tmp_path, w)
    rep = tmp_path / "r.json"
    code, err, out = _anonymize(tmp_path, capsys, data, "--risk", "--weight-column", "w", "--report", str(rep))
    assert code == 0, err
    risk = json.loads(rep.read_text())["risk"]
    released = pl.read_parquet(out).select("age", "hours_per_week", "sex")
    want = ref.measures(list(released.iter_rows()), w.tolist())
    assert risk["classes"] == want["classes"] and risk["weight_column"] == "w"
    for name in ("prosecutor", "journalist", "marketer", "individual_risk"):
        assert risk[name] == pytest.approx(want[name], rel=1e-12), name


def test_range_release_classes_are_keyed_on_every_qi(tmp_path, capsys):
    """maxent: DBRL reads the numeric QIs only, the classes every QI's published values
    (its categorical QIs' sets too): as many classes as the self-check's published ones."""
    data = _table(tmp_path, np.full(300, 5.0))
    rep = tmp_path / "r.json"
    out = tmp_path / "out.parquet"
    assert main(["anonymize", data, str(out), "--method", "maxent", "--qi", "age,hours_per_week,region",
                 "--sa", "sex", "--k", "5", "--risk", "--report", str(rep), "--quiet"]) == 0, capsys.readouterr().err
    r = json.loads(rep.read_text())
    assert r["risk"]["qi"] == ["age", "hours_per_week"]
    assert r["risk"]["class_qi"] == ["age", "hours_per_week", "region"]
    assert r["risk"]["classes"] == r["verified"]["classes"]


_FORWARDED = "weight_column" in inspect.getsource(cli._cmd_risk)


@pytest.mark.skipif(not _FORWARDED, reason="engine/cli.py's _cmd_risk does not pass --weight-column on yet "
                                           "(weight_column=args.weight_column)")
def test_risk_command_takes_the_weight_column(hand, capsys):
    o, m = hand
    assert main(["risk", str(o), str(m), "--qi", "a,s", "--weight-column", "w"]) == 0
    assert "expected re-identifications" in capsys.readouterr().out
    assert main(["risk", str(o), str(m), "--qi", "a,s", "--weight-column", "s"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "weight column 's' is also a quasi-identifier" in err


def test_risk_command_offers_the_flag():
    import argparse

    sub = next(a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    flags = {s for a in sub.choices["risk"]._actions for s in a.option_strings}
    assert "--weight-column" in flags
