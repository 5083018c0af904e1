"""Missing values (nulls) in the quasi-identifiers, as the audits see them: the write
pass's class counter (``engine.passes.selfcheck``), ``microagg verify`` and ``microagg
risk``. A null is a value of its own wherever classes are counted; with the original, a
cell imputed (or kept missing) is no failure by itself, but a class's published number
is the mean of its values present (null when none is) and a nominal QI's category its
mode (null a category); risk's distances and interval disclosure follow the definitions
in ``engine/audit/risk.py`` (worked by hand below)."""

import datetime as dt
import math

import numpy as np
import polars as pl
import pytest

import reference as ref
from engine.audit.risk import disclosure_risk
from engine.audit.verify import verify_release
from engine.cli import main
from engine.errors import VerificationError
from engine.kernels.classcount import hash_column, hash_column_nulls, hash_int_column
from engine.kernels.index.kdtree import build_kdtree
from engine.kernels.risk import find_rows, nearest_all_patterns
from engine.passes.selfcheck import ClassCounter

D = dt.date
QI = ["x", "s", "b", "t"]


def _write(frame: pl.DataFrame, path) -> None:
    frame.write_parquet(path) if str(path).endswith(".parquet") else frame.write_csv(path)


def _classes(frame: pl.DataFrame, qi, chunk: int | None = None) -> list[int]:
    """The self-check's class sizes, sorted, counting ``frame`` ``chunk`` rows at a time."""
    cc = ClassCounter(qi, 2)
    step = chunk or frame.height
    for s in range(0, frame.height, step):
        cc.add(frame.slice(s, step))
    return sorted(cc.classes()[1].tolist())


# --- the self-check's hash: a plain reference ---------------------------------------------

_M = (1 << 64) - 1


def _mix(z: int) -> int:
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M
    return z ^ (z >> 31)


def _fold_ref(h: int, value) -> int:
    """One column's fold by definition: a value its float64 bits (an integer beyond 2^53
    its own bits), a null a fixed word with its own increment."""
    if value is None:
        return _mix(((h ^ 0x6E756C6C6E756C6C) + 0xD1B54A32D192ED03) & _M)
    if isinstance(value, int) and abs(value) > 1 << 53:
        return _mix(((h ^ (value & _M)) + 0xA0761D6478BD642F) & _M)
    bits = int(np.array([float(value)]).view(np.uint64)[0])
    return _mix(((h ^ bits) + 0x9E3779B97F4A7C15) & _M)


def test_hash_kernels_match_the_reference():
    rng = np.random.default_rng(1)
    n = 300
    h0 = rng.integers(0, 1 << 63, n, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    x = rng.normal(size=n)
    x[:5] = [0.0, -0.0, np.nan, np.inf, 1e308]
    valid = (rng.random(n) < 0.8).astype(np.uint8)
    ints = rng.integers(-(1 << 62), 1 << 62, n)
    ints[:4] = [0, (1 << 53), (1 << 53) + 1, -(1 << 53) - 1]
    h = h0.copy()
    hash_column(x, h)
    assert [int(v) for v in h] == [_fold_ref(int(a), float(b)) for a, b in zip(h0, x)]
    h = h0.copy()
    hash_column_nulls(x, valid, h)
    assert [int(v) for v in h] == [_fold_ref(int(a), float(b) if ok else None) for a, b, ok in zip(h0, x, valid)]
    h = h0.copy()
    hash_int_column(ints, valid, h)
    assert [int(v) for v in h] == [_fold_ref(int(a), int(b) if ok else None) for a, b, ok in zip(h0, ints, valid)]
    h = h0.copy()
    hash_int_column(ints, np.zeros(0, np.uint8), h)  # (no flags: no nulls)
    assert [int(v) for v in h] == [_fold_ref(int(a), int(b)) for a, b in zip(h0, ints)]


# --- counting classes: the self-check and verify ------------------------------------------

def _release_with_a_small_null_class() -> pl.DataFrame:
    """Nine classes: one of every QI null (3 rows), one of 2 rows null in x (the small
    one), and classes that differ from their neighbours only by a null against 0.0, NaN,
    the empty text, false, a date."""
    d1 = D(2020, 1, 1)
    classes = [((None, None, None, None), 3),  # all null: a class of its own, and large enough
               ((None, "x", True, d1), 2),  # null in x only: 2 rows
               ((0.0, "x", True, d1), 3),
               ((float("nan"), "x", True, d1), 3),
               ((1.0, "", False, d1), 3),
               ((1.0, None, False, d1), 3),
               ((1.0, "x", None, d1), 3),
               ((1.0, "x", False, d1), 3),
               ((1.0, "x", False, None), 3)]
    rows = [r for r, m in classes for _ in range(m)]
    order = np.random.default_rng(0).permutation(len(rows))  # classes spread over the chunks
    rows = [rows[i] for i in order]
    return pl.DataFrame({"x": [r[0] for r in rows], "s": [r[1] for r in rows], "b": [r[2] for r in rows],
                         "t": [r[3] for r in rows]}, schema={"x": pl.Float64, "s": pl.String, "b": pl.Boolean,
                                                             "t": pl.Date})


def test_self_check_counts_null_as_a_value():
    rel = _release_with_a_small_null_class()
    assert _classes(rel, QI) == [2, 3, 3, 3, 3, 3, 3, 3, 3]
    cc = ClassCounter(QI, 4)
    cc.add(rel)
    assert cc.check(2, rel.height) == {"rows": 26, "classes": 9, "min_class_size": 2}
    with pytest.raises(VerificationError, match=r"a published class of 2 row\(s\) is smaller than k=3 \(1 of 9"):
        cc.check(3, rel.height)
    # the all-null class alone, and nulls of every published type
    assert _classes(rel.filter(pl.col("x").is_null() & pl.col("s").is_null()), QI) == [3]
    odd = pl.DataFrame({"c": pl.Series(["a", None, None, "a"], dtype=pl.Categorical),
                        "e": pl.Series([None, None, None, None], dtype=pl.Int64),
                        "n": pl.Series([None] * 4, dtype=pl.Null),
                        "u": pl.Series([1, None, None, 1], dtype=pl.UInt32),
                        "f": pl.Series([0.0, None, None, 0.0], dtype=pl.Float32),
                        "w": pl.Series([dt.datetime(2020, 1, 1), None, None, dt.datetime(2020, 1, 1)])})
    assert _classes(odd, odd.columns) == [2, 2]


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_verify_counts_null_as_a_value(tmp_path, fmt):
    rel = _release_with_a_small_null_class()
    path = tmp_path / f"rel.{fmt}"
    _write(rel, path)
    res = verify_release(path, QI, 3)
    assert not res.ok and res.classes == 9 and res.min_class_size == 2
    assert res.classes_below_k == 1 and res.rows_below_k == 2
    assert res.smallest_class["x"] is None and res.smallest_class["s"] == "x"
    assert verify_release(path, QI, 2).ok
    assert res.classes == len(_classes(rel, QI))  # the self-check agrees
    assert main(["verify", str(path), "--qi", ",".join(QI), "--k", "3"]) == 1
    assert main(["verify", str(path), "--qi", ",".join(QI), "--k", "2"]) == 0


@pytest.mark.parametrize("chunk", [1, 2, 5, 64, 1000])
def test_self_check_is_chunk_size_invariant(chunk):
    rng = np.random.default_rng(chunk)
    n = 2_000

    def holes(s: pl.Series, share: float) -> pl.Series:
        return s.scatter(np.flatnonzero(rng.random(n) < share), None)

    frame = pl.DataFrame({
        "x": holes(pl.Series(rng.integers(0, 4, n).astype(float)), 0.2).fill_nan(None),
        "s": holes(pl.Series(rng.choice(["", "a", "b"], n)), 0.2),
        "b": holes(pl.Series(rng.random(n) < 0.5), 0.3),
        "t": holes(pl.Series(rng.integers(0, 3, n), dtype=pl.Int32).cast(pl.Date), 0.1),
        "i": holes(pl.Series(rng.integers(0, 2, n) + (1 << 60)), 0.1),  # beyond 2^53: exact
    })
    frame = frame.with_columns(pl.when(pl.Series(rng.random(n) < 0.05)).then(float("nan"))
                               .otherwise(pl.col("x")).alias("x"))  # NaN beside null
    whole = _classes(frame, frame.columns)
    assert _classes(frame, frame.columns, chunk) == whole
    ref = frame.group_by(frame.columns).len().get_column("len").sort().to_list()  # (Polars: null a value)
    assert whole == ref
    cut = ClassCounter(frame.columns, 2)  # two counters merged, as the cluster's parts
    other = ClassCounter(frame.columns, 2)
    cut.add(frame.slice(0, 777))
    other.add(frame.slice(777))
    cut.merge(*other.classes(), other.rows)
    assert sorted(cut.classes()[1].tolist()) == whole


# --- verify with the original -------------------------------------------------------------

def _original() -> pl.DataFrame:
    return pl.DataFrame({
        "id": list(range(9)),
        "x": [1.0, 3.0, None, None, None, None, 10.0, 20.0, 30.0],
        "s": ["a", "a", None, None, None, "b", "c", "d", "d"],
        "b": [True, None, True, False, False, None, None, None, False],
        "t": [D(2020, 1, 1), D(2020, 1, 3), None, None, None, None, D(2021, 5, 5), D(2021, 5, 5), D(2021, 5, 5)],
    })


def _release() -> pl.DataFrame:
    """The original's release in groups of rows 0-2, 3-5, 6-8: x and t the mean of the
    values present (row 2's imputed; the middle group has none: null); s and b the mode,
    null a category (row 2's s and row 1's b imputed; row 5's s "b" and row 8's b false
    published null, the mode of their groups)."""
    return pl.DataFrame({
        "id": list(range(9)),
        "x": [2.0] * 3 + [None] * 3 + [20.0] * 3,
        "s": ["a"] * 3 + [None] * 3 + ["d"] * 3,
        "b": [True] * 3 + [False] * 3 + [None] * 3,
        "t": [D(2020, 1, 2)] * 3 + [None] * 3 + [D(2021, 5, 5)] * 3,
    })


def _set(frame: pl.DataFrame, col: str, rows, value) -> pl.DataFrame:
    s = frame.get_column(col).to_list()
    for i in rows:
        s[i] = value
    return frame.with_columns(pl.Series(col, s, dtype=frame.schema[col]))


@pytest.mark.parametrize("fmt,ofmt", [("parquet", "parquet"), ("csv", "parquet"), ("parquet", "csv"), ("csv", "csv")])
def test_verify_passes_a_release_with_imputed_cells(tmp_path, fmt, ofmt):
    orig, rel = tmp_path / f"o.{ofmt}", tmp_path / f"r.{fmt}"
    _write(_original(), orig)
    _write(_release(), rel)
    res = verify_release(rel, QI, 3, original=orig)
    assert res.ok, res.summary()
    names = [c["name"] for c in res.checks]
    assert "class means" in names and "class modes" in names and res.classes == 3
    # the information loss over the values present (x: SSE 202, SST 590.8), nominal
    # QIs: a cell changed (missing to a value, a value to missing) of 9
    assert res.information_loss_by_column["x"] == pytest.approx(100 * 202 / 590.8, rel=1e-12)
    assert res.information_loss_by_column["s"] == pytest.approx(100 / 3, rel=1e-12)
    assert res.information_loss_by_column["b"] == pytest.approx(100 / 3, rel=1e-12)
    assert main(["verify", str(rel), "--qi", ",".join(QI), "--k", "3", "--original", str(orig)]) == 0


WRONG = {  # name: (release, the check that fails)
    "a class without values publishes a number": (lambda r: _set(r, "x", [3, 4, 5], 0.0), "class means"),
    "a class with values publishes null": (lambda r: _set(r, "x", [0, 1, 2], None), "class means"),
    "a missing value counted as 0": (lambda r: _set(r, "x", [0, 1, 2], 4.0 / 3), "class means"),
    "a date for a class without dates": (lambda r: _set(r, "t", [3, 4, 5], D(2020, 1, 1)), "class means"),
    # (a category some of the class's rows have but not the most is an ordinal QI's possible
    # median, which verify cannot tell from a mode without --ordinal: noted, not failed)
    "a category none of the class has": (lambda r: _set(r, "s", [6, 7, 8], "a"), "class modes"),
    "true for a class of false and null": (lambda r: _set(r, "b", [3, 4, 5], True), "class modes"),
    "null where true is the mode": (lambda r: _set(r, "b", [0, 1, 2], None), "class modes"),
}


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
@pytest.mark.parametrize("case", list(WRONG))
def test_verify_fails_a_wrong_release(tmp_path, fmt, case):
    make, check = WRONG[case]
    orig, rel = tmp_path / "o.parquet", tmp_path / f"r.{fmt}"
    _write(_original(), orig)
    _write(make(_release()), rel)
    res = verify_release(rel, QI, 3, original=orig)
    assert not res.ok
    assert [c["name"] for c in res.failures] == [check], res.summary()
    assert main(["verify", str(rel), "--qi", ",".join(QI), "--k", "3", "--original", str(orig)]) == 1


def test_verify_ranges_and_sets_with_missing_values(tmp_path):
    """A missing original may be published with its class's range or set, or missing; a
    value present must lie in what is published (a missing range holds none)."""
    orig = pl.DataFrame({"x": [1.0, 3.0, None, None, None, None, 10.0, 20.0, 30.0],
                         "s": ["a", "b", None, None, None, "c", "c", None, "d"]})
    rel = pl.DataFrame({"x_min": [1.0] * 3 + [None] * 3 + [10.0] * 3, "x_max": [3.0] * 3 + [None] * 3 + [30.0] * 3,
                        "s": ["a|b"] * 3 + ["c"] * 3 + ["c|d"] * 3})
    _write(orig, tmp_path / "o.parquet")

    def check(frame):
        _write(frame, tmp_path / "r.parquet")
        res = verify_release(tmp_path / "r.parquet", ["x", "s"], 3, original=tmp_path / "o.parquet")
        return [c["detail"] for c in res.checks if c["name"] == "generalization"][0] if not res.ok else None

    assert check(rel) is None
    assert "column 'x' at row 1" in check(rel.with_columns(pl.Series("x_min", [None] * 6 + [10.0] * 3),
                                                            pl.Series("x_max", [None] * 6 + [30.0] * 3)))
    assert "column 'x' at row 4" in check(rel.with_columns(pl.Series("x_max", [3.0] * 3 + [5.0] * 3 + [30.0] * 3)))
    assert "column 's' at row 6" in check(rel.with_columns(pl.Series("s", ["a|b"] * 3 + [None] * 3 + ["c|d"] * 3)))


# --- risk ----------------------------------------------------------------------------------

@pytest.mark.parametrize("n,d,m", [(1, 1, 1), (40, 2, 1), (400, 3, 2), (600, 2, 3)])
def test_nearest_with_patterns_matches_brute_force(n, d, m):
    """The kd-tree search with missing-value patterns against the distance by definition:
    squared distance over the values (summed in column order), plus R2[j] for each
    pattern bit that differs (in column order); ties exact."""
    rng = np.random.default_rng(n + d + m)
    X = rng.integers(0, 3, size=(n, d)).astype(np.float64)  # many exact ties
    P = (rng.random((n, m)) < 0.3).astype(np.uint8)
    R2 = rng.integers(1, 4, m).astype(np.float64) * 0.5
    Q = np.concatenate([X[: min(n, 30)], rng.integers(0, 3, size=(30, d)).astype(np.float64)])
    QP = np.concatenate([P[: min(n, 30)], (rng.random((30, m)) < 0.3).astype(np.uint8)])
    T = build_kdtree(X, 4)
    d2 = np.empty(Q.shape[0])
    ties = np.empty(Q.shape[0], np.int64)
    nearest_all_patterns(T, Q, QP, P, R2, d2, ties)
    for i in range(Q.shape[0]):
        want = ref.sq_dists(X, Q[i])
        for j in range(m):
            want = want + np.where(P[:, j] != QP[i, j], R2[j], 0.0)
        assert (d2[i], ties[i]) == (want.min(), int((want == want.min()).sum())), i


def test_find_rows_with_missing_values():
    """NaN (a missing value) sorts after every number, as ``np.lexsort`` puts it, and
    equals NaN."""
    U = np.array([[0.0, 1.0], [0.0, np.nan], [1.0, -1.0], [np.nan, 0.0], [np.nan, np.nan]])
    assert np.lexsort(U.T[::-1]).tolist() == list(range(5))
    M = np.array([[np.nan, np.nan], [0.0, np.nan], [np.nan, 0.0], [1.0, -1.0], [np.nan, 1.0], [0.0, 2.0]])
    idx = np.empty(M.shape[0], np.int64)
    find_rows(U, M, idx)
    assert idx.tolist() == [4, 1, 3, 2, -1, -1]


# By hand. x's values present 0, 1, 10: mean 11/3, sd sqrt(182/9) (population), sample
# sd sqrt(91/3) = 5.5076; R = 10 / sd. Masked points: 0.5 (rows 0, 1; equidistant from
# both: 1/2 each, or 1 and 0: a group's total 1), 10 (rows 2, 3: row 3 at distance 0;
# row 2, missing, at (0, R): z(10)^2 + R^2 away), missing (rows 4, 5: at distance 0 from
# the three missing originals 2, 4, 5: 1/3 each). DBRL = (1 + 1 + 2/3) / 6.
# Interval disclosure: rows 3, 4, 5 (missing for missing) inside, row 2 (missing
# against 10) outside, rows 0, 1 inside when p sd >= 0.5: p = 0.1 (0.551), not 0.05.
ORIG = pl.DataFrame({"x": [0.0, 1.0, None, 10.0, None, None], "s": ["a", "a", None, "b", None, None]})
MASK = pl.DataFrame({"x": [0.5, 0.5, 10.0, 10.0, None, None], "s": ["a", "a", "b", "b", None, None]})


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_risk_by_hand(tmp_path, fmt):
    o, m = tmp_path / f"o.{fmt}", tmp_path / f"m.{fmt}"
    _write(ORIG, o)
    _write(MASK, m)
    for qi in (["x"], ["x", "s"]):
        # s: the same groups; its missing category adds 0 between missing values, 1 against
        # a category, so the nearest stay the same
        r = disclosure_risk(o, m, qi, p=0.05)
        assert r.dbrl == pytest.approx((2 + 2 / 3) / 6, rel=1e-12)
        assert r.masked_points == 3 and r.tied_points == 2 and r.missing_qis == qi
        assert r.interval_disclosure == pytest.approx(3 / 6)
        assert r.interval_disclosure_sdcmicro == pytest.approx(1.0 if qi == ["x"] else 5 / 6)
        # (sdcMicro: one value outside is allowed; row 2 has x outside and s changed: 3)
        r = disclosure_risk(o, m, qi, p=0.1)
        assert r.interval_disclosure == pytest.approx(5 / 6)
    assert "missing values in x" in r.summary()


def test_risk_null_against_values(tmp_path):
    """A missing masked value against originals without one: the nearest is the original
    nearest the mean (z(v)^2 + R^2 is least there); it is no link of its own row."""
    o, m = tmp_path / "o.parquet", tmp_path / "m.parquet"
    pl.DataFrame({"x": [0.0, 1.0, 2.0, 10.0]}).write_parquet(o)
    pl.DataFrame({"x": [None, 1.0, 2.0, 10.0]}).write_parquet(m)
    r = disclosure_risk(o, m, ["x"])
    assert r.dbrl == 0.75 and r.masked_points == 4 and r.missing_qis == ["x"]
    assert r.interval_disclosure == 0.75  # row 0: a value against a missing one
    # the same with the null in the original and the value published (an imputed cell)
    r = disclosure_risk(m, o, ["x"])
    assert r.dbrl == 0.75 and r.interval_disclosure == 0.75


def _embedded(orig: pl.DataFrame, rel: pl.DataFrame, numeric, nominal):
    """Both tables as the documented points: per numeric QI (z, missing * R), per nominal
    QI one-hot over the original's sorted categories and missing, / sqrt(2)."""
    zo, zm = [], []
    for c in numeric:
        x = orig.get_column(c).cast(pl.Float64).fill_null(np.nan).to_numpy()
        m = rel.get_column(c).cast(pl.Float64).fill_null(np.nan).to_numpy()
        have = x[~np.isnan(x)]
        mu, sd = have.mean(), have.std()
        R = (have.max() - have.min()) / sd if sd > 0 else 1.0
        for v, out in ((x, zo), (m, zm)):
            out.append(np.where(np.isnan(v), 0.0, (v - mu) / sd if sd > 0 else 0.0))
            out.append(np.isnan(v) * R)
    for c in nominal:
        cats = sorted(orig.get_column(c).drop_nulls().unique().to_list()) + [None]
        for s, out in ((orig.get_column(c), zo), (rel.get_column(c), zm)):
            vals = s.to_list()
            for k in cats:
                out.append(np.array([v == k for v in vals], float) / math.sqrt(2))
    return np.column_stack(zo), np.column_stack(zm)


def _risk_by_definition(orig, rel, numeric, nominal, p):
    Zo, Zm = _embedded(orig, rel, numeric, nominal)
    n = Zo.shape[0]
    credit = 0.0
    for i in range(n):
        d = ((Zo - Zm[i]) ** 2).sum(axis=1)
        tied = np.flatnonzero(d <= d.min() * (1 + 1e-12) + 1e-300)
        credit += 1.0 / tied.shape[0] if i in tied else 0.0
    outside, outside_m = np.zeros(n, int), np.zeros(n, int)
    for c in numeric:
        x = orig.get_column(c).cast(pl.Float64).fill_null(np.nan).to_numpy()
        m = rel.get_column(c).cast(pl.Float64).fill_null(np.nan).to_numpy()
        sd, msd = np.std(x[~np.isnan(x)], ddof=1), np.std(m[~np.isnan(m)], ddof=1)
        both, one = np.isnan(x) & np.isnan(m), np.isnan(x) ^ np.isnan(m)
        t = np.abs(x - m)
        outside += one | (~both & ~one & (t > p * sd))
        outside_m += one | (~both & ~one & (t > p * msd))
    for c in nominal:
        changed = 2 * (~orig.get_column(c).eq_missing(rel.get_column(c))).to_numpy()
        outside += changed
        outside_m += changed
    return credit / n, (outside == 0).mean(), (outside_m <= 1).mean()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_risk_against_the_definition(tmp_path, seed):
    """Random tables with missing values in a numeric and a nominal QI, a release of
    groups of 3 (means of the values present, modes with null a category)."""
    rng = np.random.default_rng(seed)
    n = 150
    x = rng.normal(size=n)
    y = rng.normal(size=n) * 10
    s = rng.choice(["p", "q", "r"], n).astype(object)
    x[rng.random(n) < 0.2] = np.nan
    s[rng.random(n) < 0.2] = None
    orig = pl.DataFrame({"x": x, "y": y, "s": list(s)}).with_columns(pl.col("x").fill_nan(None))
    order = np.argsort(np.nan_to_num(x, nan=9.0) + 0.01 * y)
    labels = np.empty(n, np.int64)
    labels[order] = np.arange(n) // 3
    g = orig.with_columns(pl.Series("g", labels))
    pub = g.group_by("g").agg(pl.col("x").mean(), pl.col("y").mean(),
                              pl.col("s").fill_null("~").mode().sort().first().replace("~", None))
    rel = g.select("g").join(pub, on="g", how="left", maintain_order="left").drop("g")
    o, m = tmp_path / "o.parquet", tmp_path / "m.parquet"
    orig.write_parquet(o)
    rel.write_parquet(m)
    want = _risk_by_definition(orig, rel, ["x", "y"], ["s"], 0.5)
    r = disclosure_risk(o, m, ["x", "y", "s"], p=0.5)
    assert r.dbrl == pytest.approx(want[0], rel=1e-9)
    assert (r.interval_disclosure, r.interval_disclosure_sdcmicro) == pytest.approx(want[1:], rel=1e-12)
    assert r.missing_qis == ["x", "s"]


def test_risk_dates_ordinal_and_ranges_with_missing_values(tmp_path, capsys):
    o = pl.DataFrame({"t": [D(2020, 1, 1), D(2020, 1, 3), None, None],
                      "g": ["lo", "hi", None, "mid"], "x": [1.0, 2.0, None, None]})
    m = pl.DataFrame({"t": [D(2020, 1, 2), D(2020, 1, 2), None, None],
                      "g": ["lo", "lo", "mid", "mid"], "x_min": [1.0, 1.0, None, None], "x_max": [2.0, 2.0, None, None]})
    _write(o, tmp_path / "o.csv")
    _write(m, tmp_path / "m.csv")
    r = disclosure_risk(tmp_path / "o.csv", tmp_path / "m.csv", ["t", "g", "x"], ordinal={"g": ["lo", "mid", "hi"]})
    # rows 0, 1 share a point (a group's total 1); row 3 is (null, mid, null): its own
    # original exactly (row 2 differs in g by a missing rank); row 2 is no link
    assert r.dbrl == pytest.approx(2 / 4) and r.masked_points == 2 and r.range_qis == ["x"]
    assert r.missing_qis == ["t", "g", "x"]
    # a range missing at one end: one line naming it, exit 2
    _write(m.with_columns(pl.Series("x_max", [2.0, 2.0, 5.0, None])), tmp_path / "m.csv")
    assert main(["risk", str(tmp_path / "o.csv"), str(tmp_path / "m.csv"), "--qi", "t,g,x",
                 "--ordinal", "g=lo,mid,hi"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("microagg: error: ") and "'x_min' / 'x_max'" in err and "row 3" in err
    assert len(err.strip().splitlines()) == 1
