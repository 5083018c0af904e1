"""Issue 42: the census-scale default on mixed-type QIs within a memory limit.

A mixed run (numeric QIs with missing values, an ordinal, nominal QIs of a few and of
many categories: the embedded ones) hands its workers' published values, one a QI, to
the write pass in row order, on disk (``passes.published.RowRecords``), as a numeric run
does: no row -> group map, no table of groups, nothing held that grows with the rows.
These tests show that this spilled state gives the bytes of the in-memory state (the
label map and the workers' table of published values), on the fast path and through
the seam stage (thresholds lowered so that a 24,000-row table takes it), whatever the
thread count, chunk size and limit, with strata too (each unit's groups checked to lie
in one stratum as they pass); and that the plan counts it."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import engine
import engine.methods.centroids as co
import engine.options as options
from engine import budget
from engine.io.spill import RunFile
from engine.methods.centroids import CentroidFlow
from engine.passes import published

QI = ["age", "sex", "hours", "wage", "marital", "municipality", "occupation"]
ORDINAL = {"marital": ["single", "married", "divorced", "widowed"]}


def _table(n: int, seed: int = 0) -> pl.DataFrame:
    """A small census extract: missing hours and wages, 300 municipalities, 40 occupations."""
    rng = np.random.default_rng(seed)
    age = rng.integers(16, 90, n)
    hours = np.where(rng.random(n) < 0.3, np.nan, np.round(rng.normal(38, 8, n)))
    wage = np.where(rng.random(n) < 0.05, np.nan, np.round(rng.lognormal(10, 0.6, n)))
    muni = np.minimum(rng.zipf(1.4, n) - 1, 299)
    return pl.DataFrame({
        "id": np.arange(n), "age": age, "sex": rng.choice(["f", "m"], n),
        "hours": hours, "wage": wage,
        "marital": rng.choice(["single", "married", "divorced", "widowed"], n, p=[0.4, 0.45, 0.1, 0.05]),
        "municipality": np.array([f"M{m:03d}" for m in range(300)])[muni],
        "occupation": np.array([f"occ {o:02d}" for o in range(40)])[(age * 7 + rng.integers(0, 9, n)) % 40],
        "region": np.array(["north", "south", "east"])[muni % 3],
        "note": rng.choice(["x", "y", None], n),
    }).with_columns(pl.col("hours").fill_nan(None), pl.col("wage").fill_nan(None))


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    path = tmp_path_factory.mktemp("census_default") / "in.parquet"
    _table(24_000, seed=3).write_parquet(path, row_group_size=2000)
    return path


@pytest.fixture
def small(monkeypatch):
    """The seam stage from 5,000 rows (units and seam blocks of 2,000 rows); row-ordered
    whenever a run may be; small ranges, buffers and index windows (many of each)."""
    monkeypatch.setattr(options, "POLISH_MAX_ROWS", 5_000)
    monkeypatch.setattr(co, "POLISH_MAX_ROWS", 5_000)
    monkeypatch.setattr(co, "POLISH_UNIT_ROWS", 2_000)
    monkeypatch.setattr(budget, "PREFER_MAP", False)
    monkeypatch.setattr(budget, "RANGE_ROWS", 3000)
    monkeypatch.setattr(budget, "DEFAULT_SPILL", 1 << 16)
    monkeypatch.setattr(RunFile, "WINDOW", 4)


def _digest(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _anonymize(data, out, **kw):
    kw.setdefault("block_size", 1000)
    kw.setdefault("chunk_rows", 1000)
    return engine.anonymize(data, out, QI, 4, ordinal=ORDINAL, **kw)


@pytest.mark.parametrize("extra", [{}, {"polish_rounds": 0}, {"group_column": "g"}, {"strata": ["region"]}])
def test_spilled_state_gives_the_in_memory_release(data, tmp_path, monkeypatch, small, extra):
    """Row-ordered (the records counted as they pass) against the label map and the
    workers' table: the same bytes, the same report."""
    calls = []
    monkeypatch.setattr(published.RowRecords, "add", lambda self, *a, _add=published.RowRecords.add:
                        (calls.append(1), _add(self, *a))[1])
    new = _anonymize(data, tmp_path / "new.parquet", **extra)
    assert len(calls) > 5
    if "polish_rounds" not in extra:
        assert new.polish["seam_blocks"] > 1 and "seams" in new.passes
    monkeypatch.setattr(CentroidFlow, "per_row", lambda self, rows: "a test")  # (the map and the table)
    calls.clear()
    old = _anonymize(data, tmp_path / "old.parquet", **extra)
    assert not calls
    assert _digest(tmp_path / "new.parquet") == _digest(tmp_path / "old.parquet")
    for key in ("groups", "min_group_size", "max_group_size", "group_size_counts", "sse", "sst", "verified",
                "information_loss_by_qi", "strata"):
        assert getattr(new, key) == getattr(old, key), key
    assert new.metrics["mixed"] == old.metrics["mixed"]


def test_spilled_state_does_not_depend_on_threads_chunks_or_limit(data, tmp_path, small):
    digests = set()
    for threads, chunk, limit in ((1, 1000, None), (2, 7777, None), (2, 2500, "16GiB")):
        _anonymize(data, tmp_path / "o.parquet", threads=threads, chunk_rows=chunk, memory_limit=limit)
        digests.add(_digest(tmp_path / "o.parquet"))
    assert len(digests) == 1


def test_distributions_of_a_row_ordered_mixed_run(data, tmp_path, monkeypatch, small):
    """The report's bars (``--report``, the HTML page): a categorical QI's "after" counted
    as its codes are written, a numeric QI's histograms; as with the map."""
    t = pl.read_parquet(data)
    cfg = engine.options.RunConfig.make(qi=QI, k=4, ordinal=ORDINAL, block_size=1000, chunk_rows=1000)
    calls = []
    monkeypatch.setattr(published.RowRecords, "add", lambda self, *a, _add=published.RowRecords.add:
                        (calls.append(1), _add(self, *a))[1])
    new = engine.coordinator.run(t, cfg, distributions=True).report
    assert calls
    monkeypatch.setattr(CentroidFlow, "per_row", lambda self, rows: "a test")
    old = engine.coordinator.run(t, cfg, distributions=True).report
    assert new.distributions == old.distributions
    assert set(new.distributions) == set(QI) and all("after" in v for v in new.distributions.values())
