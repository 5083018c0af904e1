"""Disclosure risk: the tie-counting nearest-neighbour kernel against brute force, DBRL and
interval disclosure against their definitions, the ``risk`` command and ``anonymize --risk``."""

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import reference as ref
from conftest import random_table
from engine.cli import main
from engine.errors import EngineError
from engine.kernels.index.kdtree import build_kdtree
from engine.kernels.risk import find_rows, nearest_all
from engine.audit.risk import disclosure_risk

DATA = Path(__file__).parent / "data"
CENSUS_QI = "AFNLWGT,AGI,EMCONTRB,FEDTAX,PTOTVAL,STATETAX,TAXINC,POTHVAL,INTVAL,PEARNVAL,FICA,WSALVAL,ERNVAL"


@pytest.mark.parametrize("kind", ["normal", "ints", "clustered", "constant_col"])
@pytest.mark.parametrize("n,d", [(1, 2), (7, 1), (300, 3), (500, 5)])
def test_nearest_with_ties_matches_brute_force(kind, n, d):
    rng = np.random.default_rng(n * 31 + d)
    X = random_table(rng, n, d, kind)
    Q = np.concatenate([X[: min(n, 50)], random_table(rng, 60, d, kind), X[:5] + 1e-9])
    T = build_kdtree(X, 4)
    d2 = np.empty(Q.shape[0])
    ties = np.empty(Q.shape[0], np.int64)
    nearest_all(T, Q, d2, ties)
    for i in range(Q.shape[0]):
        assert (d2[i], ties[i]) == ref.nearest_with_ties(X, Q[i]), i


def test_find_rows():
    U = np.array([[0.0, 1.0], [0.0, 2.0], [1.0, -1.0], [2.0, 0.0]])
    M = np.array([[1.0, -1.0], [0.0, 2.0], [-0.0, 1.0], [2.0, 0.0], [2.0, 1.0], [-5.0, 0.0]])
    idx = np.empty(M.shape[0], np.int64)
    find_rows(U, M, idx)
    assert idx.tolist() == [2, 1, 0, 3, -1, -1]


def _files(tmp_path, X, M, names=None, fmt="parquet"):
    names = names or [f"q{j}" for j in range(X.shape[1])]
    o, m = tmp_path / f"orig.{fmt}", tmp_path / f"masked.{fmt}"
    for frame, path in ((pl.DataFrame(X, schema=names), o), (pl.DataFrame(M, schema=names), m)):
        frame.write_parquet(path) if fmt == "parquet" else frame.write_csv(path)
    return o, m, names


def test_identity_and_duplicates(tmp_path):
    X = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 0.0], [5.0, 0.0], [5.0, 0.0], [9.0, 9.0]])
    o, m, names = _files(tmp_path, X, X)
    r = disclosure_risk(o, m, names)
    # the three duplicates tie among themselves: each scores 1/3
    assert r.dbrl == pytest.approx((3 + 3 * (1 / 3)) / 6) and r.tied_points == 1 and r.masked_points == 4
    assert r.interval_disclosure == 1.0 and r.interval_disclosure_sdcmicro == 1.0


def test_group_means_give_at_most_one_per_group(tmp_path):
    X = np.array([[0.0], [1.0], [2.0], [10.0], [11.0], [15.0]])
    M = np.array([[1.0], [1.0], [1.0], [12.0], [12.0], [12.0]])
    o, m, names = _files(tmp_path, X, M)
    r = disclosure_risk(o, m, names)
    # group 1: original 1 sits on the mean; group 2: original 11 is nearest to 12
    assert r.dbrl == pytest.approx(2 / 6) and r.masked_points == 2
    sd = X[:, 0].std(ddof=1)
    inside = np.abs(X[:, 0] - M[:, 0]) <= 0.05 * sd
    assert r.interval_disclosure == pytest.approx(inside.mean()) == pytest.approx(1 / 6)
    assert disclosure_risk(o, m, names, p=1.0).interval_disclosure == pytest.approx(
        (np.abs(X[:, 0] - M[:, 0]) <= sd).mean())


@pytest.mark.parametrize("kind", ["normal", "ints", "constant_col"])
def test_against_the_definition(tmp_path, kind):
    rng = np.random.default_rng(7)
    X = random_table(rng, 240, 3, kind)
    src = tmp_path / "in.parquet"
    pl.DataFrame(X, schema=["a", "b", "c"]).write_parquet(src)
    out = tmp_path / "out.csv"
    assert main(["anonymize", str(src), str(out), "--qi", "a,b,c", "--k", "3", "--quiet"]) == 0
    M = pl.read_csv(out).select("a", "b", "c").to_numpy()
    for chunk in (100_000, 17):
        r = disclosure_risk(src, out, ["a", "b", "c"], p=0.3, chunk_rows=chunk)
        assert r.dbrl == pytest.approx(ref.dbrl(X, M), abs=1e-12)
        assert r.interval_disclosure == pytest.approx(ref.interval_disclosure(X, M, 0.3), abs=1e-12)
        assert r.dbrl <= r.masked_points / r.rows + 1e-12


def test_perturbed_release_against_the_definition(tmp_path):
    """Every record its own masked point (noise): one query per record, ties from duplicates."""
    rng = np.random.default_rng(3)
    X = rng.integers(0, 5, size=(400, 2)).astype(float)
    M = X + rng.normal(0, 0.4, size=X.shape)
    M[::7] = X[::7]  # some exact copies, which tie with the original's duplicates
    o, m, names = _files(tmp_path, X, M, fmt="csv")
    r = disclosure_risk(o, m, names, chunk_rows=33)
    assert r.dbrl == pytest.approx(ref.dbrl(X, M), abs=1e-12)
    assert r.interval_disclosure == pytest.approx(ref.interval_disclosure(X, M), abs=1e-12)


def test_extreme_values(tmp_path):
    X = np.array([[1e300, 1.0], [-1e300, 2.0], [1e300, 3.0], [-1e300, 4.0]])
    M = np.array([[1e300, 1.5], [-1e300, 1.5], [1e300, 3.5], [-1e300, 3.5]])
    o, m, names = _files(tmp_path, X, M)
    r = disclosure_risk(o, m, names)
    assert r.dbrl == 1.0 and r.interval_disclosure == 0.0  # each masked row is nearest its own original
    unit = np.array([2.0 ** 996, 1.0])  # the reference would overflow without it
    assert r.dbrl == ref.dbrl(X / unit, M / unit)


def test_range_release_uses_midpoints(tmp_path):
    X = np.array([[1.0], [2.0], [3.0], [7.0], [8.0], [9.0]])
    o = tmp_path / "o.parquet"
    pl.DataFrame(X, schema=["x"]).write_parquet(o)
    m = tmp_path / "m.parquet"
    pl.DataFrame({"x_min": [1.0] * 3 + [7.0] * 3, "x_max": [3.0] * 3 + [9.0] * 3}).write_parquet(m)
    r = disclosure_risk(o, m, ["x"])
    assert r.range_qis == ["x"] and r.masked_points == 2
    assert r.dbrl == pytest.approx(ref.dbrl(X, np.array([[2.0]] * 3 + [[8.0]] * 3)))


def test_census_chunking_agrees(tmp_path):
    src = DATA / "census.csv"
    out = tmp_path / "out.parquet"
    assert main(["anonymize", str(src), str(out), "--qi", CENSUS_QI, "--k", "5", "--quiet"]) == 0
    a = disclosure_risk(src, out, CENSUS_QI)
    b = disclosure_risk(src, out, CENSUS_QI, chunk_rows=101)
    assert (a.dbrl, a.interval_disclosure, a.masked_points) == (b.dbrl, b.interval_disclosure, b.masked_points)
    assert a.masked_points == 1080 // 5 and 0 < a.dbrl <= 0.2
    M = pl.read_parquet(out).select(CENSUS_QI.split(",")).to_numpy()
    X = pl.read_csv(src).select(CENSUS_QI.split(",")).to_numpy().astype(float)
    assert a.dbrl == pytest.approx(ref.dbrl(X, M), abs=1e-12)


def test_risk_cli(tmp_path, capsys):
    X = np.arange(12, dtype=float).reshape(6, 2)
    o, m, names = _files(tmp_path, X, X[::-1].copy())
    js = tmp_path / "r.json"
    assert main(["risk", str(o), str(m), "--qi", "q0,q1", "--p", "0.1", "--json", str(js)]) == 0
    assert "DBRL" in capsys.readouterr().out
    res = json.loads(js.read_text())
    assert res["dbrl"] == 0.0 and res["p"] == 0.1 and res["rows"] == 6


@pytest.mark.parametrize("case", ["unknown", "rows", "nonnumeric", "p0", "pneg", "nan", "missing", "empty",
                                  "masked_unknown"])
def test_risk_bad_input(tmp_path, case, capsys):
    X = np.arange(12, dtype=float).reshape(6, 2)
    o, m, names = _files(tmp_path, X, X)
    qi, p = "q0,q1", "0.05"
    if case == "unknown":
        qi = "q0,zz"
    elif case == "rows":
        pl.DataFrame(X[:5], schema=names).write_parquet(m)
    elif case == "nonnumeric":
        pl.DataFrame({"q0": X[:, 0], "q1": [str(v) for v in X[:, 1]]}).write_parquet(m)
    elif case == "p0":
        p = "0"
    elif case == "pneg":
        p = "-0.1"
    elif case == "nan":  # (a missing value is a value of its own: tests/test_nulls_audit.py; NaN is no value)
        pl.DataFrame({"q0": X[:, 0], "q1": [float("nan")] + list(X[1:, 1])}).write_parquet(o)
    elif case == "missing":
        o = tmp_path / "nope.parquet"
    elif case == "empty":
        pl.DataFrame(X[:0], schema=names).write_parquet(o)
        pl.DataFrame(X[:0], schema=names).write_parquet(m)
    elif case == "masked_unknown":
        pl.DataFrame(X, schema=["q0", "other"]).write_parquet(m)
    js = tmp_path / "r.json"
    assert main(["risk", str(o), str(m), "--qi", qi, "--p", p, "--json", str(js)]) == 2
    assert not js.exists()
    assert capsys.readouterr().err.startswith("microagg: error: ")


def _shuffled_tarragona(tmp_path):
    """tarragona.csv with its rows shuffled (seeded): the file is sorted by FIXED.ASSETS, a
    QI here, and the guard refuses an input whose row order gives a QI back (``passes.leak``)."""
    src = tmp_path / "tarragona.csv"
    pl.read_csv(DATA / "tarragona.csv").sample(fraction=1.0, shuffle=True, seed=0).write_csv(src)
    return src


def test_anonymize_with_risk(tmp_path, capsys):
    src = _shuffled_tarragona(tmp_path)
    qi = ",".join(pl.read_csv(src, n_rows=1).columns[:5])
    out, rep = tmp_path / "out.parquet", tmp_path / "rep.json"
    assert main(["anonymize", str(src), str(out), "--qi", qi, "--k", "3", "--risk", "--report", str(rep)]) == 0
    assert "disclosure risk: DBRL" in capsys.readouterr().err
    report = json.loads(rep.read_text())
    direct = disclosure_risk(src, out, qi)
    assert report["risk"]["dbrl"] == direct.dbrl
    assert report["risk"]["interval_disclosure"] == direct.interval_disclosure
    assert main(["anonymize", str(src), str(out), "--qi", qi, "--k", "3", "--report", str(rep), "--quiet"]) == 0
    assert json.loads(rep.read_text())["risk"] is None


def test_api_risk(tmp_path):
    import engine

    src = _shuffled_tarragona(tmp_path)
    qi = pl.read_csv(src, n_rows=1).columns[:4]
    rep = engine.anonymize(src, tmp_path / "o.parquet", qi=qi, k=4, risk=True)
    assert rep.risk["dbrl"] == engine.disclosure_risk(src, tmp_path / "o.parquet", qi).dbrl
    assert "disclosure risk" in rep.summary()
    assert engine.anonymize(src, tmp_path / "o.parquet", qi=qi, k=4).risk is None
    with pytest.raises(EngineError):
        engine.disclosure_risk(src, tmp_path / "o.parquet", qi, p=float("nan"))


def test_anonymize_range_method_with_risk(tmp_path):
    rng = np.random.default_rng(5)
    frame = pl.DataFrame({"x": rng.normal(size=40), "y": rng.integers(0, 9, 40), "t": ["a"] * 40})
    src, out, rep = tmp_path / "in.csv", tmp_path / "out.parquet", tmp_path / "rep.json"
    frame.write_csv(src)
    assert main(["anonymize", str(src), str(out), "--qi", "x,y", "--method", "mnqia", "--k", "4", "--risk",
                 "--report", str(rep), "--quiet"]) == 0
    risk = json.loads(rep.read_text())["risk"]
    assert risk["range_qis"] == ["x", "y"] and 0 <= risk["dbrl"] <= 0.25 + 1e-12
