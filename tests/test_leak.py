"""The leak guard (``engine.passes.leak``): a pass-through column that corresponds one-to-one
with a QI is refused (one line, exit 2, nothing written); ``--derived`` publishes it from
the QI's published value; ``microagg verify --original`` fails a release that leaks."""

import itertools
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import engine
from engine.audit.verify import verify_release
from engine.cli import main
from engine.errors import EngineError, VerificationError
from engine.io.source import open_source
from engine.options import RunConfig
from engine.passes import leak
from engine.passes import dependence
from engine.passes.leak import Affine, PairTest, guard, value_keys

from reference_leak import one_to_one, pair_reference

DATA = Path(__file__).parent / "data"
ADULT_QI = "age,education,sex,race,marital_status,hours_per_week"
LABELS = ["north", "south", "east", "west", "central"]


def _table(n=600, seed=0):
    """Ages, a region label and its code, birth years, hours, an id, free text."""
    rng = np.random.default_rng(seed)
    age = rng.integers(18, 80, n)
    region = rng.integers(0, len(LABELS), n)
    return pl.DataFrame({
        "id": np.arange(n),
        "age": age,
        "region": np.array(LABELS)[region],
        "region_code": (region * 10 + 3).astype(np.int64),
        "birth_year": 2024.0 - age,
        "hours": rng.integers(10, 60, n),
        "note": rng.choice(["a", "b", "c", None], n),
    })


def _one_line(err) -> str:
    text = str(err)
    assert "\n" not in text
    return text


# --- the kernel against the reference ------------------------------------------------


def _keys(values) -> np.ndarray:
    return value_keys(pl.Series(values))


def _feed(kc, kq, max_slots, chunk):
    p = PairTest("c", "q", max_slots)
    for s in range(0, kc.shape[0], chunk):
        p.add(kc[s: s + chunk], kq[s: s + chunk])
    return p


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("max_slots", [16, 64, 1 << 12])
def test_kernel_matches_the_reference(seed, max_slots):
    """Dead, repeats and the sampling limits exactly as the plain reference, whatever the
    chunking; one-to-one pairs, near ones (a few violations), unrelated ones."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(50, 3000))
    card = int(rng.choice([3, 40, 500, 5000]))
    c = rng.integers(0, card, n)
    perm = rng.permutation(card)
    shapes = {"one-to-one": perm[c], "function": perm[c] // 2, "unrelated": rng.integers(0, card, n)}
    near = perm[c].copy()
    near[rng.integers(0, n, 2)] = card + 7  # two violations
    shapes["near"] = near
    for name, q in shapes.items():
        kc, kq = _keys(c), _keys(q)
        ref = pair_reference(kc, kq, max_slots)
        for chunk in (n, 97, 1):
            p = _feed(kc, kq, max_slots, chunk)
            got = (p.dead, bool(p.flags[1]), bool(p.flags[2]), [int(x) for x in p.limits])
            assert got == ref, (name, chunk)
        if ref[3] == [(1 << 64) - 1] * 2:
            assert (not ref[0]) == one_to_one(c.tolist(), q.tolist()), name  # unsampled: exact


def test_sampling_keeps_a_leak_and_finds_violations():
    """A one-to-one pair of many values through small tables: still one-to-one (sampling
    cannot invent a violation); a pair with many violations: dead."""
    rng = np.random.default_rng(1)
    n = 200_000
    c = rng.integers(0, 100_000, n)
    q = c * 3 + 1
    p = _feed(_keys(c), _keys(q.astype(np.float64)), 1 << 10, 50_000)
    assert not p.dead and p.repeats and p.limits[0] < np.iinfo(np.uint64).max  # sampled
    q2 = q.copy()
    q2[rng.integers(0, n, 2000)] += 1
    assert _feed(_keys(c), _keys(q2), 1 << 10, 50_000).dead


def test_value_keys_nulls_and_types():
    """Equal values, equal keys; a null is a value of its own; an Int and a Float column of
    the same partition correspond one-to-one."""
    k = _keys([1, None, 2, None, 1])
    assert k[0] == k[4] and k[1] == k[3] and len({int(x) for x in k}) == 3 and (k != 0).all()
    age = np.array([30, 40, 30, 50])
    p = _feed(_keys(age), _keys(2024.0 - age), 64, 4)
    assert not p.dead and p.repeats


def test_affine_tracker():
    a = Affine()
    q = np.array([3.0, 3.0, 5.0, 7.0, 1.0])
    a.add(q, 2024.0 - q, 0)
    assert a.ok and (a.a, a.b) == (2024.0, -1.0)
    a.add(np.array([4.0]), np.array([2019.0]), 5)
    assert not a.ok and a.bad == 5


# --- refusals ------------------------------------------------------------------------


def test_code_beside_label_is_refused():
    df = _table()
    with pytest.raises(EngineError) as err:
        engine.microaggregate(df.drop("birth_year"), qi=["age", "region"], k=3)
    assert _one_line(err.value) == (
        "column 'region_code' corresponds one-to-one with quasi-identifier 'region' and would publish it "
        "unaggregated: add it to --qi, drop it (--drop region_code), or declare it derived "
        "(--derived region_code=region)")


def test_birth_year_beside_age_is_refused(tmp_path):
    """A Float column equal to an Int QI shifted (birth_year = 2024 - age)."""
    src = tmp_path / "in.parquet"
    _table().drop("region_code").write_parquet(src)
    out, rep = tmp_path / "out.parquet", tmp_path / "r.json"
    with pytest.raises(EngineError, match=r"^column 'birth_year' corresponds one-to-one with quasi-identifier "
                                          r"'age' .*--derived birth_year=age\)$"):
        engine.anonymize(str(src), out, qi=["age", "hours"], k=3, report=rep)
    assert not out.exists() and not rep.exists()
    assert not list(tmp_path.glob(".*"))  # no temporary left either


def test_null_counts_as_a_value():
    df = pl.DataFrame({"x": np.arange(40.0), "g": ["a", None, "b", "c"] * 10, "code": [1, None, 2, 3] * 10})
    with pytest.raises(EngineError, match="column 'code' corresponds one-to-one with quasi-identifier 'g'"):
        engine.microaggregate(df, qi=["x", "g"], k=3)
    # null -> 9 and 8: not one-to-one, but the code still gives g back (many-to-one: refused too)
    many = df.with_columns(pl.Series("code", [1, 9, 2, 3] * 9 + [1, 8, 2, 3]))
    with pytest.raises(EngineError, match="column 'code' determines quasi-identifier 'g''s original value on 100.0 %"):
        engine.microaggregate(many, qi=["x", "g"], k=3)
    ok = df.with_columns(pl.Series("code", [1, 1, 2, 2] * 10))  # null shares its codes with a and b
    engine.microaggregate(ok, qi=["x", "g"], k=3)


def test_ordinal_numcol_of_adult_is_refused_on_the_command_line(tmp_path):
    """The README's example without --derived: exit 2, one line, nothing written."""
    out = tmp_path / "a.parquet"
    proc = subprocess.run([sys.executable, "-m", "engine", "anonymize", str(DATA / "adult.csv"), str(out),
                           "--qi", ADULT_QI, "--k", "5", "--ordinal", "education=@education_num"],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "microagg: error: column 'education_num' corresponds one-to-one with quasi-identifier 'education' and "
        "would publish it unaggregated: add it to --qi, drop it (--drop education_num), or declare it derived "
        "(--derived education_num=education)"]
    assert not out.exists() and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("qi, column", [("age,region", "region_code"), ("age,hours", "birth_year")])
@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_refused_on_the_command_line(qi, column, fmt, tmp_path, capsys):
    """A code beside its label, a birth year beside an age: exit 2, one line, nothing written."""
    src = tmp_path / f"in.{fmt}"
    df = _table()
    df.write_csv(src) if fmt == "csv" else df.write_parquet(src)
    out, rep = tmp_path / f"out.{fmt}", tmp_path / "r.json"
    assert main(["anonymize", str(src), str(out), "--qi", qi, "--k", "3", "--report", str(rep), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    q = "region" if column == "region_code" else "age"
    assert err == [f"microagg: error: column {column!r} corresponds one-to-one with quasi-identifier {q!r} and would "
                   f"publish it unaggregated: add it to --qi, drop it (--drop {column}), or declare it derived "
                   f"(--derived {column}={q})"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [src.name]


@pytest.mark.parametrize("method, kw, msg", [
    ("maxent", dict(k=None, sa="occupation", epsilon=2.0, qi=["age", "education_num", "hours_per_week"]),
     "column 'education' corresponds one-to-one with quasi-identifier 'education_num' and would publish it "
     "unaggregated: add it to --qi or drop it (--drop education)"),
    ("mnqia", dict(k=3, qi=["age", "education_num", "hours_per_week"]),
     "column 'education' corresponds one-to-one with quasi-identifier 'education_num' and would publish it "
     "unaggregated: add it to --qi or drop it (--drop education)"),
    ("mdav", dict(k=3, qi=["age", "education_num"]),  # a text cannot follow a mean: no --derived offered
     "column 'education' corresponds one-to-one with quasi-identifier 'education_num' and would publish it "
     "unaggregated: add it to --qi or drop it (--drop education)"),
])
def test_every_method_is_guarded(method, kw, msg, tmp_path):
    out = tmp_path / "o.parquet"
    with pytest.raises(EngineError) as err:
        engine.anonymize(str(DATA / "adult.csv"), out, method=method, **kw)
    assert _one_line(err.value) == msg
    assert not out.exists()


def test_sensitive_attribute_is_checked_too():
    df = _table().select("age", "hours", "region", "region_code")
    with pytest.raises(EngineError, match="^sensitive attribute 'region_code' corresponds one-to-one with "
                                          "quasi-identifier 'region'"):
        engine.microaggregate(df, qi=["age", "region"], method="maxent", sa="region_code", epsilon=0.5, k=None)


# --- no false alarm ------------------------------------------------------------------


@pytest.mark.parametrize("name", ["census", "tarragona", "adult"])
def test_no_false_alarm_on_real_data(name):
    """Every choice of one or two QIs of the benchmark tables: refused only for Adult's
    education / education_num (the one pair that is one-to-one) and for the census' columns
    that are functions of each other (FICA: 7.65 % of earnings; FEDTAX: the tax schedule
    of TAXINC; PEARNVAL: a near-copy of WSALVAL). Census' other income columns are each
    row-unique: any two correspond one-to-one by chance, and are not refused."""
    src = open_source(DATA / f"{name}.csv")
    refused = []
    for r in (1, 2):
        for qi in itertools.combinations(src.columns, r):
            try:
                # (the columns' tests; the row order's: tests/test_row_order.py, tarragona.csv is sorted)
                guard(src, RunConfig.make(qi=list(qi), k=3), 0, 100_000, row_order=False)
            except EngineError as e:
                refused.append((qi, str(e).split("'")[1], str(e).split("'")[3]))
    if name == "census":
        pairs = {frozenset((c, q)) for _, c, q in refused}
        assert pairs <= {frozenset(p) for p in [("FEDTAX", "TAXINC"), ("FICA", "PEARNVAL"), ("PEARNVAL", "WSALVAL"),
                                                ("FICA", "WSALVAL")]}, pairs
    elif name != "adult":
        assert refused == []
    else:
        assert refused and all(("education" in qi) != ("education_num" in qi) for qi, _, _ in refused)
        assert {c for _, c, _ in refused} == {"education", "education_num"}
        assert len(refused) == 2 * (len(src.columns) - 2) + 2


def test_row_unique_columns_unless_affine():
    """An id beside a continuous QI (both row-unique) is not a leak; a unit change of it is."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=300)
    df = pl.DataFrame({"x": x, "y": rng.normal(size=300), "id": rng.permutation(300)})
    engine.microaggregate(df, qi=["x", "y"], k=3)
    with pytest.raises(EngineError, match="column 'x_cm' corresponds one-to-one with quasi-identifier 'x'"):
        engine.microaggregate(df.with_columns(x_cm=pl.col("x") * 100.0 + 2.0), qi=["x", "y"], k=3)


def test_a_qi_of_one_value_is_ignored():
    """A column of one value beside a QI of one value corresponds one-to-one with it, yet
    publishes nothing: the guard lets it pass (and says so), and it passes through unchanged.
    Control: the same column beside a QI that varies, copied, is refused."""
    df = pl.DataFrame({"x": np.arange(30.0), "c": [1.0] * 30, "flag": ["y"] * 30})
    res = engine.microaggregate(df, qi=["x", "c"], k=3)
    checks = {(c["column"], c["qi"], c["check"]): c["result"] for c in res.report.leak_checks}
    assert checks[("flag", "c", "one-to-one")] == "passed" and checks[("flag", "x", "one-to-one")] == "passed"
    assert res.table["flag"].to_list() == df["flag"].to_list() and res.table["c"].to_list() == [1.0] * 30
    assert res.report.min_group_size >= 3
    with pytest.raises(EngineError, match="one-to-one"):
        engine.microaggregate(df.with_columns(flag=pl.col("x").cast(pl.String)), qi=["x", "c"], k=3)


def test_chunking_does_not_change_the_verdict():
    df = _table(3000).drop("region_code")
    for chunk in (7, 1000, 100_000):
        with pytest.raises(EngineError, match="column 'birth_year'"):
            engine.microaggregate(df, qi=["age", "hours"], k=3, chunk_rows=chunk)


def test_the_pass_stops_reading_when_every_pair_fails(monkeypatch):
    """Nothing one-to-one or dependent: the pairs decided on the first rows (at the first
    verdict, ``dependence.FIRST_VERDICT_ROWS``; a row-unique id after ``DECIDE_ROWS``),
    not the whole table read."""
    seen = []
    real = leak._Reader.next

    def counting(self):
        got = real(self)
        if got is not None:
            seen.append(got[1].height)
        return got

    monkeypatch.setattr(leak._Reader, "next", counting)
    df = _table(5000).drop("region_code", "birth_year", "id")
    engine.microaggregate(df, qi=["age", "hours"], k=3, chunk_rows=dependence.FIRST_VERDICT_ROWS)
    assert seen == [dependence.FIRST_VERDICT_ROWS]
    seen.clear()
    big = pl.DataFrame({"id": np.arange(400_000), "x": np.random.default_rng(1).integers(0, 90, 400_000),
                        "y": np.random.default_rng(2).integers(0, 60, 400_000)})
    guard(open_source(big), RunConfig.make(qi=["x", "y"], k=3), big.height, 50_000)
    assert sum(seen) <= dependence.DECIDE_ROWS + 50_000


# --- derived columns -----------------------------------------------------------------


def test_derived_from_a_mean_is_affine(tmp_path):
    src = tmp_path / "in.parquet"
    df = _table().drop("region_code")
    df.write_parquet(src)
    out = tmp_path / "out.parquet"
    rep = engine.anonymize(str(src), out, qi=["age", "hours"], k=3, derived={"birth_year": "age"})
    got = pl.read_parquet(out)
    assert got.columns == df.columns and got.schema["birth_year"] == pl.Float64
    assert got["birth_year"].to_list() == (2024.0 - got["age"]).to_list()
    assert got.drop("age", "hours", "birth_year").equals(df.drop("age", "hours", "birth_year"))
    assert rep.settings["derived"] == [["birth_year", "age"]] or rep.settings["derived"] == [("birth_year", "age")]
    v = verify_release(out, ["age", "hours"], 3, original=src)
    assert v.ok, v.summary()
    assert v.columns_derived == {"birth_year": "age"} and v.columns_changed == []


def test_derived_from_a_category_keeps_its_type():
    df = _table().drop("birth_year")
    res = engine.microaggregate(df, qi=["age", "region"], k=3, derived=["region_code=region"])
    t = res.table
    codes = dict(df.select("region", "region_code").unique().iter_rows())
    assert t.columns == df.columns and t.schema["region_code"] == pl.Int64
    assert t["region_code"].to_list() == [codes[r] for r in t["region"].to_list()]


def test_derived_streamed_and_csv(tmp_path):
    """Several blocks (the write pass reads no QI) and a CSV output (the column's text)."""
    src = tmp_path / "in.csv"
    df = _table(5000).drop("region_code")
    df.write_csv(src)
    for name in ("o.csv", "o.parquet"):
        out = tmp_path / name
        engine.anonymize(str(src), out, qi=["age", "hours"], k=3, block_size=1000, derived="birth_year=age")
        got = pl.read_csv(out) if name.endswith("csv") else pl.read_parquet(out)
        assert got["birth_year"].to_list() == (2024.0 - got["age"]).to_list()
        assert got.group_by("age", "hours", "birth_year").len()["len"].min() >= 3
        v = verify_release(out, ["age", "hours"], 3, original=src)
        assert v.ok and v.columns_derived == {"birth_year": "age"}, v.summary()


def test_derived_adult_on_the_command_line(tmp_path, capsys):
    """The README's example as pasted; verify --original sees education_num recomputed."""
    out = tmp_path / "adult_k5.parquet"
    assert main(["anonymize", str(DATA / "adult.csv"), str(out), "--k", "5", "--qi", ADULT_QI, "--ordinal",
                 "education=@education_num", "--derived", "education_num=education", "--quiet"]) == 0
    got, src = pl.read_parquet(out), pl.read_csv(DATA / "adult.csv")
    codes = dict(src.select("education", "education_num").unique().iter_rows())
    assert got["education_num"].to_list() == [codes[e] for e in got["education"].to_list()]
    v = verify_release(out, ADULT_QI, 5, original=DATA / "adult.csv", ordinal={"education": "@education_num"})
    checks = {c["name"]: c for c in v.checks}
    assert checks["k-anonymity"]["ok"] and checks["other columns"]["ok"] and "leaks" not in checks
    assert v.columns_derived == {"education_num": "education"}
    assert "education_num recomputed from the published education" in checks["other columns"]["detail"]


def test_self_check_counts_derived_columns(monkeypatch):
    """A derived column that did not follow its QI (here: left as read, passed through)
    splits the published classes; the self-check refuses the release."""
    monkeypatch.setattr(leak.Derive, "apply", lambda self, frame: frame)
    df = _table().drop("region_code")
    with pytest.raises(VerificationError, match="smaller than k=3"):
        engine.microaggregate(df, qi=["age", "hours"], k=3, derived={"birth_year": "age"})


@pytest.mark.parametrize("derived, msg", [
    ({"birth_year": "nope"}, "derived (--derived): column 'birth_year' follows 'nope', which is not a "
                             "quasi-identifier"),
    ({"age": "hours"}, "derived (--derived): column 'age' is a quasi-identifier"),
    ({"missing": "age"}, "derived (--derived): column 'missing' not found in "),
    ("birth_year", "derived (--derived): expected COLUMN=QI, got 'birth_year'"),
    ({"note": "age"}, "derived (--derived): column 'note' is not an exact affine function a + b * age of "
                      "quasi-identifier 'age', which is published as its group's mean: row 1 has"),
    ({"region": "age"}, "derived (--derived): column 'region' is not an exact affine function"),
])
def test_derived_refusals(derived, msg, tmp_path):
    src = tmp_path / "in.parquet"
    _table().drop("birth_year", "region_code").write_parquet(src)
    out = tmp_path / "o.parquet"
    with pytest.raises(EngineError) as err:
        engine.anonymize(str(src), out, qi=["age", "hours"], k=3, derived=derived)
    assert _one_line(err.value).startswith(msg), str(err.value)
    assert not out.exists()


def test_derived_not_a_function_names_the_row():
    df = _table(50).drop("birth_year")
    bad = df.with_columns(pl.when(pl.int_range(50) == 20).then(999).otherwise(pl.col("region_code"))
                          .alias("region_code"))
    label = bad["region"][20]
    first = int(df.with_row_index().filter(pl.col("region") == label)["index"][0]) + 1
    with pytest.raises(EngineError) as err:
        engine.microaggregate(bad, qi=["age", "region"], k=3, derived={"region_code": "region"})
    code = df["region_code"][20]
    assert _one_line(err.value) == (
        f"derived (--derived): column 'region_code' is not a function of quasi-identifier 'region': row 21 has "
        f"region={label!r}, region_code=999, row {first} region_code={code}; drop 'region_code' or add it to --qi")


@pytest.mark.parametrize("extra, msg", [
    (["--derived", "birth_year=nope"], "microagg: error: derived (--derived): column 'birth_year' follows 'nope'"),
    (["--derived", "x=age"], "microagg: error: derived (--derived): column 'x' not found in "),
    (["--method", "mnqia", "--derived", "birth_year=age"],
     "microagg: error: derived (--derived) does not apply to method mnqia"),
])
def test_derived_refusals_on_the_command_line(extra, msg, tmp_path):
    src = tmp_path / "in.csv"
    _table().drop("region_code").write_csv(src)
    out = tmp_path / "o.parquet"
    proc = subprocess.run([sys.executable, "-m", "engine", "anonymize", str(src), str(out), "--qi", "age,hours",
                           "--k", "3", *extra], capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(msg), lines
    assert not out.exists()


# --- verify ----------------------------------------------------------------------------


def test_verify_flags_a_leaked_column(tmp_path, capsys):
    """A release that passes a one-to-one column through: [FAIL] leaks (exit 1); the same
    release with the column derived passes."""
    src = tmp_path / "in.parquet"
    df = _table().drop("region_code")
    df.write_parquet(src)
    good = tmp_path / "good.parquet"
    engine.anonymize(str(src), good, qi=["age", "hours"], k=3, derived={"birth_year": "age"})
    bad = tmp_path / "bad.parquet"
    pl.read_parquet(good).with_columns(df["birth_year"]).write_parquet(bad)
    assert main(["verify", str(good), "--qi", "age,hours", "--k", "3", "--original", str(src)]) == 0
    capsys.readouterr()
    assert main(["verify", str(bad), "--qi", "age,hours", "--k", "3", "--original", str(src)]) == 1
    text = capsys.readouterr().out
    assert "  [FAIL] leaks: column 'birth_year' is passed through unchanged and corresponds one-to-one with " \
           "quasi-identifier 'age': it publishes it unaggregated" in text
    assert "[ok] other columns" in text


def test_verify_a_column_made_constant_is_not_derived(tmp_path):
    """A constant follows every QI, but a pass-through column replaced by one is changed."""
    src = tmp_path / "in.parquet"
    df = _table().drop("region_code", "birth_year")
    df.write_parquet(src)
    out = tmp_path / "out.parquet"
    engine.anonymize(str(src), out, qi=["age", "hours"], k=3)
    bad = tmp_path / "bad.parquet"
    pl.read_parquet(out).with_columns(pl.lit("z").alias("region")).write_parquet(bad)
    v = verify_release(bad, ["age", "hours"], 3, original=src)
    assert not v.ok and v.columns_changed == ["region"] and v.columns_derived == {}


def test_a_date_beside_its_day_count_is_a_leak():
    """A Date column that is a start date plus a numeric QI's days (on its epoch value: an
    exact affine relation) publishes the QI: refused, as verify reads it."""
    import datetime as _dt

    n = 40
    t = pl.DataFrame({"x": np.arange(n, dtype=np.float64), "y": np.arange(n, dtype=np.float64) % 5,
                      "d": [_dt.date(2020, 1, 1) + _dt.timedelta(days=i) for i in range(n)]})
    with pytest.raises(engine.EngineError, match="column 'd' corresponds one-to-one with quasi-identifier 'x'"):
        engine.microaggregate(t, ["x", "y"], 3)
