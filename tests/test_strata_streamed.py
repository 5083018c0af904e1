"""Issue 42, item 1: a stratified run under a memory limit holds no stratum a row.

Under ``--memory-limit`` a streamed run's ``strata_pass`` writes each row's stratum to a
row-ordered file (``partition.Strata``); the partition pass reads it a chunk at a time,
the plan's sample rows in one read, the write pass a range at a time (the check that no
group holds rows of two strata, for row-ordered published values), and the budget no
longer counts a byte a row. These tests show the file reads as the array did, that a
run through it gives the bytes of the same run with the strata in memory (numeric QIs
with the label map; mixed-type QIs row-ordered, on the fast path and through the seam
stage), that the write pass's check still catches a group across two strata, and that
the planned least limit no longer grows with the rows. Item 2: the seam stage is taken
by rows x encoded columns (``tuning.seam_stage``)."""

from __future__ import annotations

import hashlib
import os
import pickle
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import engine
import engine.coordinator as coordinator
import engine.methods.centroids as co
import engine.options as options
from engine import budget, tuning
from engine.errors import EngineError
from engine.io.source import open_source
from engine.options import RunConfig
from engine.passes import partition, published

QI = ["age", "sex", "hours", "wage", "municipality", "occupation"]


def _table(n: int, seed: int = 0) -> pl.DataFrame:
    """Missing hours, 200 municipalities, 30 occupations; strata: region (3) and area
    (a null among 5 values), and ``cell`` (300 values: the ids need 2 bytes)."""
    rng = np.random.default_rng(seed)
    age = rng.integers(16, 90, n)
    muni = np.minimum(rng.zipf(1.4, n) - 1, 199)
    return pl.DataFrame({
        "age": age, "sex": rng.choice(["f", "m"], n),
        "hours": np.where(rng.random(n) < 0.3, np.nan, np.round(rng.normal(38, 8, n))),
        "wage": np.round(rng.lognormal(10, 0.6, n)),
        "municipality": np.array([f"M{m:03d}" for m in range(200)])[muni],
        "occupation": np.array([f"occ {o:02d}" for o in range(30)])[(age * 7 + rng.integers(0, 9, n)) % 30],
        "region": np.array(["north", "south", "east"])[muni % 3],
        "area": rng.choice(["a", "b", "c", "d", None], n).tolist(),
        "cell": rng.integers(0, 300, n),
        "note": rng.choice(["x", "y", None], n).tolist(),
    }).with_columns(pl.col("hours").fill_nan(None))


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    path = tmp_path_factory.mktemp("strata_streamed") / "in.parquet"
    _table(24_000, seed=5).write_parquet(path, row_group_size=2000)
    return path


def _digest(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@pytest.mark.parametrize("columns", [["region", "area"], ["cell"]])
def test_the_file_reads_as_the_array(data, tmp_path, columns):
    source = open_source(str(data))
    kept = partition.strata_pass(source, columns, 24_000, 777, least=3)
    disk = partition.strata_pass(source, columns, 24_000, 777, least=3, folder=str(tmp_path), on_disk=True)
    assert kept.of_row is not None and disk.of_row is None and disk.on_disk
    assert os.path.getsize(disk.path) == 24_000 * kept.of_row.dtype.itemsize  # (cell: widened to uint16)
    assert disk.dtype == kept.of_row.dtype.name and disk.values.equals(kept.values)
    assert np.array_equal(disk.rows, kept.rows)
    assert np.array_equal(disk.whole(), kept.of_row)
    assert np.array_equal(disk.slice(1000, 3777), kept.of_row[1000:3777])
    ids = np.random.default_rng(1).integers(0, 24_000, 5000)
    assert np.array_equal(disk.at(ids), kept.of_row[ids])
    read = disk.reader(source, 777)
    assert np.array_equal(read(23_000, 24_000), kept.of_row[23_000:])
    copy = pickle.loads(pickle.dumps(disk))  # (a Dask task's: neither the array nor the file)
    assert copy.of_row is None and copy.path is None
    assert np.array_equal(copy.ids_for(source, 1000)[1], kept.of_row)
    folder = os.path.dirname(disk.path)
    disk.close()
    assert not os.path.exists(folder) and os.listdir(tmp_path) == []


def test_a_small_stratum_refused_leaves_no_file(data, tmp_path):
    source = open_source(str(data))
    with pytest.raises(EngineError, match="fewer than k = 200"):
        partition.strata_pass(source, ["cell"], 24_000, 1000, least=200, folder=str(tmp_path), on_disk=True)
    assert os.listdir(tmp_path) == []


def _spy(monkeypatch) -> list:
    """Each run's ``Strata``: whether it went to disk."""
    made: list = []
    real = partition.strata_pass

    def spy(*a, **kw):
        s = real(*a, **kw)
        made.append(s.on_disk)
        return s

    monkeypatch.setattr(coordinator, "strata_pass", spy)
    return made


@pytest.fixture
def small(monkeypatch):
    """The seam stage from 5,000 rows (units and seam blocks of 2,000 rows); row-ordered
    whenever a run may be; small ranges (many write-pass checks)."""
    monkeypatch.setattr(options, "POLISH_MAX_ROWS", 5_000)
    monkeypatch.setattr(co, "POLISH_MAX_ROWS", 5_000)
    monkeypatch.setattr(co, "POLISH_UNIT_ROWS", 2_000)
    monkeypatch.setattr(budget, "PREFER_MAP", False)
    monkeypatch.setattr(budget, "RANGE_ROWS", 3000)


@pytest.mark.parametrize("kind, extra", [
    ("numeric, the label map", {"qi": ["age", "wage"], "polish_rounds": 0}),
    ("numeric, polished in memory", {"qi": ["age", "wage"]}),
    ("mixed, fast path, row-ordered", {"polish_rounds": 0}),
    ("mixed, the seam stage, row-ordered", {}),
])
def test_strata_on_disk_give_the_release_in_memory(data, tmp_path, monkeypatch, small, kind, extra):
    """The same run with the rows' strata in memory (no limit) and on disk (a limit, a
    chunk size of its own): the same bytes, the same report of the strata."""
    made = _spy(monkeypatch)
    records: list = []
    monkeypatch.setattr(published.RowRecords, "check_strata", lambda self, s, _c=published.RowRecords.check_strata:
                        (records.append(1), _c(self, s))[1])
    kw = {"qi": QI, "block_size": 1000, "strata": ["region", "area"], **extra}
    qi = kw.pop("qi")
    reps = {}
    for name, more in (("memory", {"chunk_rows": 1000}), ("disk", {"chunk_rows": 777, "memory_limit": "16GiB"})):
        reps[name] = engine.anonymize(data, tmp_path / f"{name}.parquet", qi, 4, **kw, **more)
    assert made == [False, True]
    assert _digest(tmp_path / "memory.parquet") == _digest(tmp_path / "disk.parquet")
    assert reps["memory"].strata == reps["disk"].strata and len(reps["disk"].strata) == 15
    assert bool(records) == kind.startswith("mixed")  # (row-ordered: the write pass checks the strata)
    if "seam stage" in kind:
        assert reps["disk"].polish["seam_blocks"] > 1
    assert not [f for f in os.listdir(tmp_path) if not f.endswith(".parquet")]  # (the strata file removed)


def test_the_write_pass_catches_a_group_across_two_strata(data, tmp_path, monkeypatch, small):
    """Row-ordered published values: a unit counted in the wrong stratum (as a group
    holding rows of two strata would be) fails the write pass's check; nothing written."""
    real = partition.Strata.at
    monkeypatch.setattr(partition.Strata, "at", lambda self, ids: (real(self, ids) + 1) % self.count)
    out = tmp_path / "o.parquet"
    with pytest.raises(EngineError, match="a group holds rows of two strata"):
        engine.anonymize(data, out, QI, 4, block_size=1000, chunk_rows=1000, strata=["region"], polish_rounds=0,
                         memory_limit="16GiB")
    assert not out.exists()


def _least(rows: int, strata: bool, d: int = 42) -> int:
    """The planned least limit of a census-extract-like row-ordered run (``published``: 8
    values a row, 42 encoded columns) at ``rows`` rows."""
    cfg = RunConfig.make(qi=[f"q{i}" for i in range(d)], k=5, memory_limit="64MiB",
                         strata=["region"] if strata else None)
    with pytest.raises(budget.Refusal) as exc:
        budget.plan_budget(cfg, rows, d=d, columns=12, threads=2, row_ordered=True, published=8)
    return exc.value.least


def test_the_planned_least_limit_does_not_grow_with_strata():
    for rows in (10_000_000, 100_000_000, 1_000_000_000):
        assert _least(rows, True) == _least(rows, False)  # (a byte a row before: +86 MiB at 100M)


def test_the_seam_stage_by_rows_times_columns(monkeypatch):
    """Up to 2M rows of 16 columns the seams are polished in memory; a census extract's
    42 encoded columns take the seam stage from 761,905 rows, and so its 1M-row default
    plans in well under the in-memory polish's least limit."""
    assert not tuning.seam_stage(2_000_000, 16) and tuning.seam_stage(2_000_001, 1)
    assert not tuning.seam_stage(761_904, 42) and tuning.seam_stage(761_905, 42)
    now = _least(1_000_000, True)
    monkeypatch.setattr(budget, "seam_stage", lambda rows, d, most: rows > most)  # (by rows alone, as before)
    assert now < 0.6 * _least(1_000_000, True)


def test_a_wide_table_takes_the_seam_stage_below_the_rows(data, tmp_path, monkeypatch):
    """Below POLISH_MAX_ROWS rows (here 30,000): the mixed QIs' encoded columns (24,000 x
    about 40 cells, above 30,000 x 16) take the seam stage, polished with the in-memory
    polish's settings; two numeric QIs keep the in-memory seam polish."""
    monkeypatch.setattr(options, "POLISH_MAX_ROWS", 30_000)
    monkeypatch.setattr(co, "POLISH_MAX_ROWS", 30_000)
    monkeypatch.setattr(co, "POLISH_UNIT_ROWS", 4_000)
    settings = []
    monkeypatch.setattr(co, "seam_pass", lambda stage, profile, cols, method, polish, *a, _s=co.seam_pass:
                        (settings.append(polish), _s(stage, profile, cols, method, polish, *a))[1])
    wide = engine.anonymize(data, tmp_path / "wide.parquet", QI, 4, block_size=1000, chunk_rows=1000)
    assert "seams" in wide.passes and "polish" not in wide.passes and wide.polish["seam_blocks"] > 1
    assert wide.polish["near"] == tuning.polish_near(4)  # (not the cheaper settings of the rows above)
    (rounds, near, rotations), = settings  # (no SCALE_DESCENT, SCALE_WINDOW: the kernel's defaults)
    assert rounds == tuning.DEFAULT_POLISH_ROUNDS and near == tuning.polish_near(4)
    assert rotations.shape[0] == tuning.POLISH_ROTATIONS
    narrow = engine.anonymize(data, tmp_path / "narrow.parquet", ["age", "wage"], 4, block_size=1000,
                              chunk_rows=1000)
    assert "polish" in narrow.passes and "seams" not in narrow.passes


@pytest.mark.parametrize("method, kw", [("mnqia", {}), ("maxent", {"sa": "occupation", "epsilon": 2.0})])
def test_range_methods_read_the_strata_from_disk(data, tmp_path, monkeypatch, method, kw):
    """The range methods (maxent, mnqia): the partition pass's strata from the file."""
    made = _spy(monkeypatch)
    qi = ["age", "wage"]
    for name, more in (("memory", {}), ("disk", {"memory_limit": "16GiB", "chunk_rows": 777})):
        engine.anonymize(data, tmp_path / f"{name}.parquet", qi, 5, method=method, block_size=3000,
                         strata=["region"], **kw, **more)
    assert made == [False, True]
    assert _digest(tmp_path / "memory.parquet") == _digest(tmp_path / "disk.parquet")
