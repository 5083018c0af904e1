"""The merged flow for Parquet inputs in blocks: the plan's sample read from every
8th row group (``frames.sample_row_groups``) and pass 1's checks and sums done by
the partition pass. Its guarantees are those of the profile-then-partition flow;
the fallbacks (a block above the budget's limit, a power-of-two rescale, a bad value
in the sample) run the skipped pass 1."""

import logging

import numpy as np
import polars as pl
import pytest

import engine
import engine.coordinator as coordinator
from engine.budget import Budget
from engine.errors import EngineError
from engine.options import RunConfig
from engine.io.source import open_source
from engine.io.spill import BlockStore
from engine.frames import Moments, sample_row_groups
from engine.passes.partition import plan_blocks, partition_pass, sample_profile, standardized
from engine.passes.profile import profile_columns
from engine.synth import NUMERIC_QI, census_like

pytestmark = pytest.mark.slow  # end-to-end: run with -m slow (left out by default; CI runs it)

QI = list(NUMERIC_QI)


@pytest.fixture(scope="module")
def many_groups(tmp_path_factory):
    """40,000 rows in 2 files of 40 row groups each."""
    d = tmp_path_factory.mktemp("groups")
    frame = census_like(40_000, seed=11)
    for i in range(2):
        frame.slice(20_000 * i, 20_000).write_parquet(d / f"part-{i}.parquet", row_group_size=500)
    return d, frame


def _anonymize(src, out, **kw):
    return engine.anonymize(str(src), out, qi=QI, k=4, block_size=3_000, **kw)


def test_sampled_flow_is_used_and_k_anonymous(many_groups, tmp_path):
    src, frame = many_groups
    out = tmp_path / "o.parquet"
    rep = _anonymize(src, out)
    assert "sample" in rep.passes and "profile" not in rep.passes and rep.blocks > 5
    res = pl.read_parquet(out)
    assert res.height == frame.height
    assert res.drop(QI).equals(frame.drop(QI))  # row order and the other columns unchanged
    assert res.group_by(QI).len()["len"].min() >= 4  # an independent count
    assert max(rep.block_rows_max, 0) <= 2 * 3_000


def test_sampled_flow_measures_exactly_as_pass_one(many_groups, tmp_path):
    src, _ = many_groups
    source = open_source(str(src))
    X, ids = sample_row_groups(source, QI, 40_000, 20)
    assert X.shape[0] == ids.shape[0] > 1_000 and np.all(np.diff(ids) > 0)
    sprof = sample_profile(QI, X)
    cols = np.arange(len(QI))
    plan = plan_blocks(standardized(X, sprof, cols), ids, 40_000, 3_000)
    moments = Moments(QI, np.ones(len(QI)))
    with BlockStore(plan.n_blocks, len(QI), tmp_path) as store:
        partition_pass(source, sprof, cols, plan, store, 7_000, moments=moments, rows=40_000)
        assert int(store.rows.sum()) == 40_000
    got = moments.profile()
    want = profile_columns(source, QI, 3_000)
    for a in ("mean", "sd", "min", "max", "scale"):
        assert np.array_equal(getattr(got, a), getattr(want, a)), a
    assert got.rows == want.rows == 40_000


def test_sampled_flow_invariant_to_chunks_and_threads(many_groups, tmp_path):
    src, _ = many_groups
    outs = []
    for i, kw in enumerate([dict(chunk_rows=1_000, threads=1), dict(chunk_rows=7_000, threads=2),
                            dict(chunk_rows=100_000, threads=2)]):
        out = tmp_path / f"o{i}.parquet"
        _anonymize(src, out, **kw)
        outs.append(out.read_bytes())
    assert outs[0] == outs[1] == outs[2]


def test_a_block_above_the_limit_falls_back_to_pass_one(many_groups, tmp_path, monkeypatch, caplog):
    src, frame = many_groups
    real = coordinator.plan_budget

    def tight(*a, **kw):
        b = real(*a, **kw)
        return Budget(b.block_size, b.chunk_rows, b.labels_on_disk, block_limit=100)  # every block is above

    monkeypatch.setattr(coordinator, "plan_budget", tight)
    out = tmp_path / "o.parquet"
    with caplog.at_level(logging.WARNING, logger="engine"):
        rep = _anonymize(src, out)
    assert "sampling every row group" in caplog.text
    assert "profile" in rep.passes
    res = pl.read_parquet(out)
    assert res.height == frame.height and res.group_by(QI).len()["len"].min() >= 4
    assert not list(tmp_path.glob("microagg-*"))  # the first spill is gone


@pytest.mark.parametrize("factor", [1e-300, 1e300])
def test_extreme_values_are_measured_in_a_power_of_two(tmp_path, factor):
    """Tiny values: the sampled flow runs, then pass 1 measures again in a power-of-two
    scale. Huge values: the sample is refused (squares would overflow), pass 1 runs."""
    frame = census_like(20_000, seed=3).with_columns(pl.col("wage_income") * factor)
    d = tmp_path / "huge"
    d.mkdir()
    frame.write_parquet(d / "p.parquet", row_group_size=400)
    out = tmp_path / "o.parquet"
    rep = engine.anonymize(str(d), out, qi=QI, k=3, block_size=2_000)
    assert "profile" in rep.passes and ("sample" in rep.passes) == (factor < 1)
    res = pl.read_parquet(out)
    assert np.isfinite(res["wage_income"].to_numpy()).all()
    assert res.group_by(QI).len()["len"].min() >= 3
    assert 0 < rep.information_loss_percent < 100


@pytest.mark.parametrize("where", ["sampled", "not sampled"])
def test_a_bad_value_is_reported_with_its_row(tmp_path, where):
    frame = census_like(20_000, seed=4)
    row = 0 if where == "sampled" else 700  # row group 0 is sampled, row group 1 (rows 500..999) is not
    vals = frame["age"].to_numpy().astype(np.float64)
    vals[row] = np.nan
    frame = frame.with_columns(pl.Series("age", vals))
    d = tmp_path / "bad"
    d.mkdir()
    frame.write_parquet(d / "p.parquet", row_group_size=500)
    out = tmp_path / "o.parquet"
    with pytest.raises(EngineError, match=rf"column 'age' has a non-finite value \(nan\) at row {row + 1} "):
        engine.anonymize(str(d), out, qi=QI, k=3, block_size=2_000)
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name != "bad"]


def test_a_file_sorted_on_a_qi_keeps_blocks_near_the_block_size(tmp_path):
    """A file sorted on its QI: the row-group sample sees an eighth of the value range,
    and its plan put 36,000 rows in one block of a 10,000-row block size. Without a
    memory limit a block above twice the block size now falls back to pass 1's sample
    of every row group, whose plan keeps every block at most the block size here.

    The public API refuses such a file (the release keeps the input's row order, so a
    record's position gives its x back: ``passes.leak``); the plan is tested through
    ``coordinator.run`` with ``ordered=False``, which leaves the row order out of the guard
    (as for an entity table, whose order is not published)."""
    n = 80_000
    x = np.sort(np.random.default_rng(0).normal(size=n))
    src = tmp_path / "sorted.parquet"
    pl.DataFrame({"x": x}).write_parquet(src, row_group_size=1_000)
    with pytest.raises(EngineError, match="sorted by quasi-identifier 'x'"):
        engine.anonymize(str(src), tmp_path / "refused.parquet", qi=["x"], k=3, block_size=2_000)
    assert not (tmp_path / "refused.parquet").exists()
    cfg = RunConfig.make(qi=["x"], k=3, block_size=2_000)
    rep = coordinator.run(str(src), cfg, str(tmp_path / "o.parquet"), ordered=False).report
    assert rep.blocks > 1
    assert rep.block_rows_max <= 2_000, rep.block_rows_max
