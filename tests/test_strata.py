"""--strata (sdcMicro's strata_variables): every stratum anonymized on its own.

No published group spans two strata (a stratum: one combination of the strata
columns' values, a null being a value), in memory (one block a stratum) and
streamed (blocks cut by stratum first, then polish, seam polish and --refine
within a stratum); the strata columns pass through unchanged; a stratum of fewer
than k rows is refused, naming it, with nothing written; the report gives each
stratum's rows, groups and information loss.
"""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import engine
from engine.cli import main
from engine.coordinator import run
from engine.errors import EngineError
from engine.options import RunConfig
from engine.passes.partition import Strata, plan_blocks, standardized, strata_pass
from engine.passes.profile import profile_columns
from engine.io.source import open_source
from engine.synth import census_like

from conftest import DATA

QI = ["age", "education_years", "hours_per_week", "wage_income", "other_income"]


def _spans(labels, frame: pl.DataFrame, columns) -> tuple[int, int]:
    """(the most strata one group holds, the smallest group)."""
    g = pl.DataFrame({"g": np.asarray(labels)}).hstack(frame.select(columns)).group_by("g").agg(
        pl.struct(columns).n_unique().alias("strata"), pl.len().alias("rows"))
    return int(g["strata"].max()), int(g["rows"].min())


def _run(frame, strata, *, blocks=False, **kw):
    kw.setdefault("k", 3)
    cfg = RunConfig.make(qi=kw.pop("qi", QI), strata=strata, **kw)
    return run(frame, cfg, None, force_blocks=blocks)


def _table(rng, n, values, nulls=True):
    """A small table with a numeric QI pair, a text stratum column (some nulls) and an
    integer one."""
    x = rng.normal(size=(n, 3))
    x[:, 2] = np.round(x[:, 2] * 2)  # ties
    region = rng.choice(values, n)
    reg = pl.Series("region", region, dtype=pl.String)
    if nulls:
        reg = pl.Series("region", [None if v == "-" else v for v in region], dtype=pl.String)
    return pl.DataFrame({"a": x[:, 0], "b": x[:, 1], "c": x[:, 2], "region": reg,
                         "band": rng.integers(0, 2, n), "id": np.arange(n)})


# ------------------------------------------------------------------ properties

@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), n=st.integers(40, 400), k=st.integers(2, 5),
       method=st.sampled_from(["mdav", "mdav-single", "vmdav", "ivmdav"]),
       two=st.booleans(), mode=st.sampled_from(["memory", "blocks", "polish", "refine"]))
def test_no_group_spans_two_strata(seed, n, k, method, two, mode):
    rng = np.random.default_rng(seed)
    frame = _table(rng, n, ["N", "S", "-"])
    strata = ["region", "band"] if two else ["region"]
    sizes = frame.group_by(strata).len()["len"]
    kw = dict(qi=["a", "b", "c"], k=k, method=method)
    if sizes.min() < k:
        with pytest.raises(EngineError, match=r"^stratum .* rows, fewer than k = "):
            _run(frame, strata, blocks=mode != "memory", **kw)
        return
    if mode != "memory":
        kw["block_size"] = max(2 * k, n // 5)
    if mode == "blocks":
        kw["polish_rounds"] = 0
    if mode == "refine":
        kw["refine"] = "local"
    res = _run(frame, strata, blocks=mode != "memory", **kw)
    most, least = _spans(res.labels, frame, strata)
    assert most == 1 and least >= k
    assert res.table.select(strata + ["id"]).equals(frame.select(strata + ["id"]))
    rep = res.report
    assert sum(s["rows"] for s in rep.strata) == n and sum(s["groups"] for s in rep.strata) == rep.groups
    assert sum(s["sse"] for s in rep.strata) == pytest.approx(rep.sse, rel=1e-9, abs=1e-9)


@pytest.mark.parametrize("blocks,extra", [(False, {}), (True, dict(block_size=300)),
                                          (True, dict(block_size=300, polish_rounds=0)),
                                          (True, dict(block_size=300, refine="local"))])
def test_census_like_by_region_and_sex(blocks, extra):
    frame = census_like(3000, seed=5)
    res = _run(frame, "region,sex", blocks=blocks, **extra)
    most, least = _spans(res.labels, frame, ["region", "sex"])
    assert most == 1 and least >= 3
    assert len(res.report.strata) == 10
    if blocks:  # every block lies in one stratum: more blocks than strata
        assert res.report.blocks >= 10
        if "refine" in extra:
            assert res.report.refine["windows"] > 0
        elif extra.get("polish_rounds") != 0:
            assert res.report.polish["seam_operations"] > 0  # strata of several units: seams polished


@pytest.mark.parametrize("blocks,extra", [(False, {}), (True, dict(block_size=300)),
                                          (True, dict(block_size=300, refine="local")),
                                          (True, dict(block_size=300, polish_rounds=0))])
def test_one_stratum_is_the_run_without_strata(blocks, extra):
    """A strata column with one value: the same kernels on the same rows, the same release."""
    frame = census_like(2000, seed=6).with_columns(pl.lit("all").alias("one"))
    plain = _run(frame, None, blocks=blocks, **extra)
    one = _run(frame, "one", blocks=blocks, **extra)
    assert np.array_equal(plain.labels, one.labels) and plain.table.equals(one.table)
    assert one.report.strata[0]["sse"] == pytest.approx(plain.report.sse, rel=1e-9)
    assert one.report.strata[0]["information_loss_percent"] == pytest.approx(
        plain.report.information_loss_percent, rel=1e-9)


def test_each_stratum_grouped_as_well_as_alone():
    """In memory each stratum is one exact block: its groups are those of the same
    kernel on its rows alone (on the table's z-scores, the distance the run's loss
    measures)."""
    from engine.passes.aggregate import aggregate_block

    frame = census_like(2000, seed=7)
    res = _run(frame, "region", method="mdav")
    prof = profile_columns(open_source(frame), QI, 100_000)
    X = frame.select(QI).to_numpy().astype(np.float64)
    cols = np.arange(len(QI))
    for s in res.report.strata:
        rows = np.flatnonzero((frame["region"] == s["values"]["region"]).to_numpy())
        alone = aggregate_block(standardized(X[rows], prof, cols), 0, 3, 0.0)
        got = res.labels[rows]
        assert np.unique(got).shape[0] == s["groups"] == int(alone.max()) + 1
        # the same partition of the stratum's rows (group ids aside)
        pairs = np.unique(np.column_stack([got, alone]), axis=0)
        assert pairs.shape[0] == s["groups"]


# ------------------------------------------------------------------ mixed types, range methods

@pytest.mark.parametrize("blocks,extra", [(False, {}), (True, dict(block_size=400)),
                                          (True, dict(block_size=400, refine="local"))])
def test_mixed_type_qis(blocks, extra):
    """A string QI and a numeric one (engine.encode.mixed: the encoded source goes through
    the same partition pass)."""
    frame = census_like(3000, seed=8)
    res = _run(frame, ["region"], blocks=blocks, qi=["occupation", "wage_income"], **extra)
    most, least = _spans(res.labels, frame, ["region"])
    assert most == 1 and least >= 3
    assert res.table["region"].equals(frame["region"])
    assert all(s["information_loss_percent"] is None for s in res.report.strata)  # (not measured per stratum)


def test_adult_mixed_by_sex_and_race():
    frame = pl.read_csv(DATA / "adult.csv").drop("education")
    res = _run(frame, "sex,race", qi=["age", "workclass", "hours_per_week"], k=5)
    most, least = _spans(res.labels, frame, ["sex", "race"])
    assert most == 1 and least >= 5
    assert res.table.select("sex", "race").equals(frame.select("sex", "race"))


@pytest.mark.parametrize("method,kw", [("mnqia", dict(k=5)), ("maxent", dict(sa="occupation", epsilon=2.0, k=5))])
@pytest.mark.parametrize("blocks", [False, True])
def test_range_methods(method, kw, blocks):
    frame = pl.read_csv(DATA / "adult.csv").drop("education")
    res = _run(frame, "sex", blocks=blocks, qi=["age", "education_num", "hours_per_week"], method=method,
               **({"block_size": 3000} if blocks else {}), **kw)
    most, least = _spans(res.labels, frame, ["sex"])
    assert most == 1 and least >= 5
    rep = res.report
    assert [s["values"]["sex"] for s in rep.strata] == ["Female", "Male"]
    assert sum(s["sse"] for s in rep.strata) == pytest.approx(rep.sse, rel=1e-9)
    assert all(0 < s["information_loss_percent"] < 100 for s in rep.strata)


def test_maxent_stratum_below_epsilon_is_refused():
    frame = pl.DataFrame({"x": np.arange(60.0), "sa": ["a", "b"] * 20 + ["a"] * 20,
                          "s": ["mixed"] * 40 + ["pure"] * 20})
    with pytest.raises(EngineError, match=r"^stratum s='pure': the entropy of 'sa' in it is 0 bits, below "):
        _run(frame, "s", qi=["x"], method="maxent", sa="sa", epsilon=0.5, k=None)


# ------------------------------------------------------------------ refusals

def test_small_stratum_is_refused_through_the_api(tmp_path):
    frame = census_like(400, seed=1).with_columns(
        pl.when(pl.col("person_id") < 3).then(pl.lit("North")).otherwise(pl.lit("South")).alias("zone"))
    with pytest.raises(EngineError) as err:
        engine.microaggregate(frame, QI, k=5, strata=["zone"])
    assert str(err.value).startswith("stratum zone='North' has 3 rows, fewer than k = 5")
    out = tmp_path / "out.parquet"
    with pytest.raises(EngineError, match="^stratum zone='North' has 3 rows, fewer than k = 5"):
        engine.anonymize(frame, out, QI, 5, strata="zone", report=tmp_path / "r.json")
    assert not list(tmp_path.iterdir())


def test_small_stratum_is_refused_through_the_cli(tmp_path, capsys):
    frame = census_like(400, seed=1).with_columns(
        pl.when(pl.col("person_id") % 100 == 0).then(None).otherwise(pl.col("region")).alias("zone"))
    src = tmp_path / "in.csv"
    frame.write_csv(src)
    out = tmp_path / "out.csv"
    code = main(["anonymize", str(src), str(out), "--qi", ",".join(QI), "--k", "5", "--strata", "zone,sex",
                 "--report", str(tmp_path / "r.json"), "--no-progress"])
    assert code == 2
    first = frame.filter(pl.col("zone").is_null()).group_by("sex").len().sort("sex").row(0)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"stratum zone=null, sex='{first[0]}' has {first[1]} rows, fewer than k = 5" in err[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv"]


@pytest.mark.parametrize("strata,message", [
    ("age", r"^strata \(--strata\): column 'age' is also a quasi-identifier"),
    ("regio", r"^strata \(--strata\): column 'regio' not found in "),
    ("region,region", r"^strata \(--strata\) names column 'region' twice"),
    ([], r"^strata \(--strata\) is empty"),
    ([3], r"^strata \(--strata\) has an invalid column name: 3"),
])
def test_bad_strata_columns_are_refused(strata, message, tmp_path):
    frame = census_like(200, seed=1)
    with pytest.raises(EngineError, match=message):
        engine.anonymize(frame, tmp_path / "o.parquet", QI, 3, strata=strata)
    assert not list(tmp_path.iterdir())


def test_cli_refuses_a_strata_column_that_is_a_qi(tmp_path, capsys):
    src = tmp_path / "in.csv"
    census_like(100, seed=1).write_csv(src)
    assert main(["anonymize", str(src), str(tmp_path / "o.csv"), "--qi", "age,wage_income", "--strata", "age",
                 "--no-progress"]) == 2
    assert capsys.readouterr().err.count("\n") == 1


# ------------------------------------------------------------------ pass-through, determinism

def test_strata_columns_pass_through_byte_identical(tmp_path):
    """A CSV's strata columns as written: leading zeros, spaces, empty fields."""
    rng = np.random.default_rng(3)
    n = 600
    zones = np.array(["007", " 7", "7.0", ""])[rng.integers(0, 4, n)]
    lines = ["x,y,zone,note"] + [f"{rng.normal():.6f},{rng.integers(0, 50)},{z},n{i}" for i, z in enumerate(zones)]
    src = tmp_path / "in.csv"
    src.write_text("\n".join(lines) + "\n")
    for blocks in (None, 150):
        out = tmp_path / f"out{blocks}.csv"
        assert main(["anonymize", str(src), str(out), "--qi", "x,y", "--k", "4", "--strata", "zone", "--no-progress",
                     *(["--block-size", str(blocks)] if blocks else []), "--report", str(tmp_path / f"r{blocks}.json")]) == 0
        got = [line.split(",")[2] for line in out.read_text().splitlines()]
        assert got == [line.split(",")[2] for line in lines]
        rep = json.loads((tmp_path / f"r{blocks}.json").read_text())
        assert len(rep["strata"]) == 4 and rep["min_group_size"] >= 4
        groups = pl.read_csv(out, infer_schema=False).with_columns(pl.col("zone").fill_null(""))
        assert groups.group_by("x", "y").agg(pl.col("zone").n_unique())["zone"].max() == 1


@pytest.mark.parametrize("extra", [dict(), dict(refine="local")])
def test_output_does_not_depend_on_chunks_or_threads(extra, tmp_path):
    frame = census_like(4000, seed=9)
    src = tmp_path / "in.parquet"
    frame.write_parquet(src)
    digests = set()
    for chunk, threads in ((100_000, 2), (333, 1), (1024, 2)):
        out = tmp_path / f"o{chunk}.parquet"
        engine.anonymize(str(src), out, QI, 3, strata="region,sex", block_size=150, chunk_rows=chunk,
                         threads=threads, group_column="g", **extra)
        digests.add(out.read_bytes())
    assert len(digests) == 1
    out = pl.read_parquet(out)
    assert out.group_by("g").agg(pl.struct("region", "sex").n_unique())["region"].max() == 1


# ------------------------------------------------------------------ report

def test_report_gives_each_stratum(tmp_path):
    frame = census_like(2500, seed=10)
    rep = engine.anonymize(frame, tmp_path / "o.parquet", QI, 4, strata=["sex"], block_size=600,
                           report=tmp_path / "r.json")
    saved = json.loads((tmp_path / "r.json").read_text())
    assert saved["strata"] == rep.strata
    sizes = frame["sex"].value_counts().sort("sex")
    assert [s["values"] for s in rep.strata] == [{"sex": "female"}, {"sex": "male"}]
    assert [s["rows"] for s in rep.strata] == sizes["count"].to_list()
    assert sum(s["groups"] for s in rep.strata) == rep.groups
    for s in rep.strata:
        assert s["information_loss_percent"] == pytest.approx(100 * s["sse"] / s["sst"])
    assert sum(s["sse"] for s in rep.strata) == pytest.approx(rep.sse, rel=1e-9)
    # SST within a stratum, around its own mean, on the table's z-scores
    z = frame.select(QI).to_numpy().astype(np.float64)
    z = (z - z.mean(axis=0)) / z.std(axis=0)
    for s in rep.strata:
        part = z[(frame["sex"] == s["values"]["sex"]).to_numpy()]
        assert s["sst"] == pytest.approx(((part - part.mean(axis=0)) ** 2).sum(), rel=1e-6)
    assert "strata 2 (sex)" in rep.summary()
    assert rep.settings["strata"] == ["sex"]


def test_html_report_lists_the_strata(tmp_path):
    pytest.importorskip("matplotlib")
    from engine import html_report

    frame = census_like(1200, seed=11)
    rep = engine.anonymize(frame, tmp_path / "o.parquet", QI, 3, strata="region")
    page = html_report.render(json.loads(rep.to_json()))
    assert "Strata: 5" in page and "region=north" in page
    bad = json.loads(rep.to_json())
    bad["strata"][0]["rows"] = "many"
    assert html_report.check_fields(bad)[0] == '"strata"[0]."rows"'


# ------------------------------------------------------------------ the plan

def test_the_plan_cuts_by_stratum_first(tmp_path):
    frame = census_like(5000, seed=12)
    src = tmp_path / "in.parquet"
    frame.write_parquet(src)
    source = open_source(str(src))
    strata = strata_pass(source, ["region"], 5000, 777, least=3)
    assert strata.count == 5 and strata.values["region"].to_list() == sorted(set(frame["region"]))
    assert np.array_equal(strata.rows, frame["region"].value_counts().sort("region")["count"].to_numpy())
    prof = profile_columns(source, QI, 1000, sample_stride=3)
    cols = np.arange(len(QI))
    plan = plan_blocks(standardized(prof.sample, prof, cols), prof.sample_ids, 5000, 300, strata)
    assert np.all(np.diff(plan.block_strata) >= 0) and plan.n_blocks == plan.block_strata.shape[0]
    Z = standardized(frame.select(QI).to_numpy().astype(np.float64), prof, cols)
    ids = np.arange(5000)
    leaf = plan.assign(np.column_stack([Z, strata.of_row.astype(np.float64)]), ids)
    assert np.array_equal(plan.block_strata[leaf], strata.of_row)  # every block inside one stratum
    X = np.ascontiguousarray(np.vstack([frame.select(QI).to_numpy().astype(np.float64).T,
                                        strata.of_row.astype(np.float64)]))
    routed = plan.route(X, 0, plan.raw_bounds(prof, cols), np.empty(5000, np.int64))
    assert np.array_equal(routed, leaf)
    assert np.bincount(leaf, minlength=plan.n_blocks).max() <= 2 * 300
    # a worker's copy of the plan (pickled) maps its own rows' values
    import pickle

    copy = pickle.loads(pickle.dumps(strata))
    assert copy.of_row is None
    first, ids_w = copy.ids_for(source, 1000)
    assert first == 0 and np.array_equal(ids_w, strata.of_row)
    assert isinstance(copy, Strata) and copy.label(0) == "region='central'"


@pytest.mark.parametrize("method", ["ama", "mdav-single"])
def test_other_centroid_methods(method):
    frame = census_like(2500, seed=13)
    for blocks in (False, True):
        res = _run(frame, "region", blocks=blocks, method=method, **({"block_size": 400} if blocks else {}))
        most, least = _spans(res.labels, frame, ["region"])
        assert most == 1 and least >= 3


@pytest.mark.slow
def test_dask_same_output_as_one_machine(tmp_path):
    """The plan the client hands out carries the strata (without each row's: a task maps
    its own rows' values), so ``--scheduler`` needs nothing more."""
    distributed = pytest.importorskip("distributed")
    src = tmp_path / "in.parquet"
    census_like(20_000, seed=3).write_parquet(src, row_group_size=1_000)
    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=":0") as c, \
            distributed.Client(c, set_as_default=False) as client:
        for opts in ({}, {"polish_rounds": 0, "group_column": "g"}):
            outs = []
            for i, scheduler in enumerate((None, client)):
                (tmp_path / f"t{i}").mkdir(exist_ok=True)
                out = tmp_path / f"o{i}.parquet"
                engine.anonymize(str(src), out, QI, 5, block_size=2_000, tmp_dir=tmp_path / f"t{i}",
                                 strata="region,sex", scheduler=scheduler, **opts)
                outs.append(out.read_bytes())
                out.unlink()
            assert outs[0] == outs[1]
