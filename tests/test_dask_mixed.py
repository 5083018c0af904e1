"""Mixed-type QIs on Dask (engine.cluster): String nominal, Boolean, Date, Datetime and
ordinal QIs (an order given, or ``@column``), ``weights``: the same output bytes and the
same report figures as the single-machine run, through the API and the CLI."""

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import engine

distributed = pytest.importorskip("distributed")

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
ORDER = ["low", "mid", "high", "top"]  # "top" never occurs: ranks over the whole order still
QI = ["x", "y", "colour", "grade", "flag", "day"]
# what a report says of the release (not of the run: times, memory, settings)
FIGURES = ["rows", "groups", "min_group_size", "max_group_size", "sse", "sst", "information_loss_percent",
           "information_loss_by_qi", "group_size_counts", "verified", "blocks", "block_rows_min", "block_rows_max",
           "metrics", "polish", "refine"]


@pytest.fixture(scope="module")
def client():
    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=":0") as c, \
            distributed.Client(c, set_as_default=False) as cl:
        yield cl


def mixed_table(n: int, seed: int = 1) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    num = rng.integers(0, 100, n)
    return pl.DataFrame({
        "x": rng.normal(size=n),
        "y": num,
        "colour": rng.choice(["red", "green", "blue", "violet", "amber"], n),  # String: nominal
        "town": pl.Series([f"T{v:03d}" for v in rng.integers(0, 300, n)]),  # nominal, embedded (> 16 categories)
        "grade": rng.choice(ORDER[:3], n),  # ordinal by --ordinal grade=low,mid,high,top
        "edu": pl.Series([f"E{9 - v // 10}" for v in num]),  # ordinal by --ordinal edu=@edu_num
        # (ordered by its least value in each category's rows; no function of it, nor it of
        # edu: a pass-through column that gives a QI's value away is refused)
        "edu_num": num // 10 * 10 + rng.integers(0, 25, n),
        "flag": rng.random(n) < 0.3,  # Boolean: nominal
        "day": pl.Series([dt.date(2000, 1, 1) + dt.timedelta(days=int(d)) for d in rng.integers(0, 3000, n)],
                         dtype=pl.Date),
        "other": pl.Series([None if i % 7 == 0 else i for i in range(n)], dtype=pl.Int64),  # pass-through, nulls
        "note": pl.Series([None if i % 5 == 0 else f"n{i % 13}" for i in range(n)]),
    }).with_columns(
        # (a Datetime drawn apart from day: a copy of day beside it is refused as a leak)
        (pl.col("day").gather(rng.permutation(n)).cast(pl.Datetime("us"))
         + pl.duration(microseconds=pl.col("y") * 7919)).alias("when"),
        # QIs with missing values (imputed or kept: counted by the write pass), drawn apart from
        # their namesakes (a row-shuffled copy: a near-copy beside its QI is refused as a leak)
        *[pl.when(pl.Series(rng.random(n) < p)).then(None).otherwise(pl.col(c).gather(rng.permutation(n)))
          .alias(f"{c}_na") for c, p in (("x", 0.05), ("colour", 0.03), ("grade", 0.04), ("day", 0.02))])


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    """20,000 mixed rows in 40 row groups (the row-group sample plans the blocks), and
    the same rows in 4 row groups (pass 1 on the client first)."""
    folder = tmp_path_factory.mktemp("dask-mixed")
    t = mixed_table(20_000)
    t.write_parquet(folder / "in.parquet", row_group_size=500)
    t.write_parquet(folder / "few.parquet", row_group_size=5_000)
    return folder / "in.parquet", folder / "few.parquet"


def _worker_spills(dask_worker):
    return [p for p in os.listdir(dask_worker.local_directory) if p.startswith(f".microagg-spill-{os.getpid()}.")]


def _run(src, out, tmp, qi, **kw):
    tmp.mkdir(exist_ok=True)
    rep = engine.anonymize(src, out, qi, tmp_dir=tmp, **kw)
    assert os.listdir(tmp) == []  # the run's folder (part files, labels, the published table) removed
    if isinstance(kw.get("scheduler"), distributed.Client):  # and each worker's own block files
        assert all(v == [] for v in kw["scheduler"].run(_worker_spills).values())
    return rep


def _figures(rep) -> dict:
    d = rep.to_dict()
    return {k: d.get(k) for k in FIGURES}


def _same(tmp_path, local, dask):
    a, b = tmp_path / "local.parquet", tmp_path / "dask.parquet"
    assert pl.read_parquet(a).equals(pl.read_parquet(b))
    assert a.read_bytes() == b.read_bytes()
    assert _figures(dask) == _figures(local)  # exactly: the loss sums in row order, on the client
    assert dask.information_loss_percent == local.information_loss_percent


CASES = {
    # polished units and seams: the groups stitched on the client from the part files (expanded)
    "polish": (QI, dict(ordinal={"grade": ORDER})),
    # the fast path: the workers reduce each group to its published values (``published_sums``)
    "fast": (QI, dict(ordinal={"grade": ORDER}, polish_rounds=0, group_column="g")),
    # refinement on the client
    "refine": (QI, dict(ordinal={"grade": ORDER}, polish_rounds=0, refine="local", refine_rounds=2, leaf_size=0)),
    # weights, a Datetime QI (its exact means travel to the write tasks)
    "weights": (["x", "y", "when", "colour"], dict(weights={"x": 2.0, "colour": 0.5}, polish_rounds=0)),
    # an ordinal QI ordered by a numeric column
    "by-column": (["x", "y", "edu", "colour"], dict(ordinal={"edu": "@edu_num"}, polish_rounds=0)),  # (y: edu follows it)
    # a nominal QI of 300 categories: a fixed embedding, not one-hot
    "embedded": (["x", "town", "colour", "grade"], dict(ordinal={"grade": ORDER})),
    # categorical QIs only: the write tasks read no QI column
    "categorical": (["colour", "flag", "grade"], dict(ordinal={"grade": ORDER}, polish_rounds=0)),
    # missing values in numeric, nominal, ordinal and date QIs: reduced by the workers, or
    # (polished) published from the stitched groups and the input's codes on the client
    "missing": (["x_na", "y", "colour_na", "grade_na", "day_na"], dict(ordinal={"grade_na": ORDER},
                                                                       polish_rounds=0)),
    "missing-polish": (["x_na", "y", "colour_na", "grade_na", "day_na"], dict(ordinal={"grade_na": ORDER})),
    # declared missing codes of a numeric QI (a quarter of y's values): a group of codes only
    # publishes its most frequent code (each write task gets its own groups' codes)
    "codes": (["x", "y", "colour"], dict(missing={"y": list(range(0, 100, 4))}, polish_rounds=0)),
    # one block: grouped on the client, written by the tasks
    "one-block": (QI, dict(ordinal={"grade": ORDER}, block_size=50_000)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_same_output_as_single_machine(client, tables, tmp_path, case):
    qi, opts = CASES[case]
    opts = {"k": 4, "block_size": 3_000, **opts}
    local = _run(tables[0], tmp_path / "local.parquet", tmp_path / "t1", qi, **opts)
    dask = _run(tables[0], tmp_path / "dask.parquet", tmp_path / "t2", qi, scheduler=client, **opts)
    _same(tmp_path, local, dask)
    assert local.metrics["mixed"]["kinds"]  # (the mixed path ran)
    if case == "embedded":
        assert "embedded" in local.metrics["mixed"]["encoding"]["town"]
    if case != "one-block":
        assert local.blocks > 1


def test_scheduler_local(tables, tmp_path):
    """``scheduler="local"``: a LocalCluster of this machine started and closed by the run."""
    qi, opts = CASES["weights"]
    opts = {"k": 4, "block_size": 3_000, **opts}
    local = _run(tables[0], tmp_path / "local.parquet", tmp_path / "t1", qi, **opts)
    dask = _run(tables[0], tmp_path / "dask.parquet", tmp_path / "t2", qi, scheduler="local", **opts)
    _same(tmp_path, local, dask)


def test_profile_pass_path(client, tables, tmp_path):
    """Fewer than 32 row groups: pass 1 (the compact columns) on the client, then the
    partition tasks."""
    opts = dict(k=4, block_size=3_000, ordinal={"grade": ORDER}, polish_rounds=0)
    local = _run(tables[1], tmp_path / "local.parquet", tmp_path / "t1", QI, **opts)
    dask = _run(tables[1], tmp_path / "dask.parquet", tmp_path / "t2", QI, scheduler=client, **opts)
    _same(tmp_path, local, dask)


def test_arrow_schema_kept(client, tmp_path):
    """An input written by pyarrow from pandas (the schema's pandas metadata, dates as
    timestamp[ms]): OUTPUT keeps the input's Arrow schema as the local run's does (the
    client's copy of the parts writes through ``io.schema.ArrowTarget``), byte for byte."""
    pa = pytest.importorskip("pyarrow")
    pytest.importorskip("pandas")
    import pyarrow.parquet as pq

    src = tmp_path / "pandas.parquet"
    pq.write_table(pa.Table.from_pandas(mixed_table(12_000).to_pandas()), src, row_group_size=300)
    assert b"pandas" in pq.read_schema(src).metadata
    opts = dict(k=4, block_size=3_000, ordinal={"grade": ORDER}, polish_rounds=0)
    local = _run(src, tmp_path / "local.parquet", tmp_path / "t1", QI, **opts)
    dask = _run(src, tmp_path / "dask.parquet", tmp_path / "t2", QI, scheduler=client, **opts)
    _same(tmp_path, local, dask)
    assert pq.read_schema(tmp_path / "dask.parquet").metadata == pq.read_schema(src).metadata


def test_folder_output(client, tables, tmp_path):
    """A folder OUTPUT: the parts hold the single-file run's rows, in order."""
    opts = dict(k=4, block_size=3_000, ordinal={"grade": ORDER}, polish_rounds=0)
    _run(tables[0], tmp_path / "local.parquet", tmp_path / "t1", QI, **opts)
    out = tmp_path / "parts"
    _run(tables[0], str(out) + "/", tmp_path / "t2", QI, scheduler=client, **opts)
    parts = sorted(out.iterdir())
    assert len(parts) >= 2
    assert pl.read_parquet(parts).equals(pl.read_parquet(tmp_path / "local.parquet"))


def test_bad_value(client, tmp_path):
    """A value outside an ordinal order: one line naming the column, nothing written
    (the client's dictionary pass finds it before any task runs)."""
    src = tmp_path / "bad.parquet"
    mixed_table(4_000).write_parquet(src, row_group_size=100)
    with pytest.raises(engine.EngineError, match="column 'grade'"):
        engine.anonymize(src, tmp_path / "o.parquet", QI, k=4, block_size=1_000, ordinal={"grade": ["low", "mid"]},
                         scheduler=client)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.parquet"]


def test_cli(client, tables, tmp_path):
    """``--scheduler ADDRESS`` with --ordinal (an order and @column) and --weights: the
    same OUTPUT bytes and report figures as the command without it."""
    (tmp_path / "t").mkdir()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    opts = ["--qi", "x,y,colour,grade,flag,day,edu", "--k", "4", "--block-size", "3000", "--polish-rounds", "0",
            "--ordinal", "grade=low,mid,high,top", "--ordinal", "edu=@edu_num", "--weights", "x=2,colour=0.5",
            "--quiet", "--tmp-dir", str(tmp_path / "t")]
    runs = {}
    for name, extra in (("local", []), ("dask", ["--scheduler", client.scheduler.address])):
        out, rep = tmp_path / f"{name}.parquet", tmp_path / f"{name}.json"
        proc = subprocess.run([sys.executable, "-m", "engine.cli", "anonymize", str(tables[0]), str(out), *opts,
                               "--report", str(rep), *extra], env=env, cwd=ROOT, capture_output=True, text=True)
        assert proc.returncode == 0 and proc.stderr == "", proc.stderr
        runs[name] = json.loads(rep.read_text())
    assert (tmp_path / "local.parquet").read_bytes() == (tmp_path / "dask.parquet").read_bytes()
    assert {k: runs["dask"].get(k) for k in FIGURES} == {k: runs["local"].get(k) for k in FIGURES}
    assert runs["local"]["metrics"]["mixed"]["kinds"]["edu"] == "ordinal"
    assert os.listdir(tmp_path / "t") == []
