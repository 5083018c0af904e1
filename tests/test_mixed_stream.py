"""Mixed-type QIs on the streamed path (blocks, leaves, polish, refinement):
k-anonymous, categories from their domains, and identical output for any thread
count and chunk size."""

import numpy as np
import polars as pl
import pytest

import engine
from test_mixed import ORDER, mixed_table

pytestmark = pytest.mark.slow

QI = ["x", "colour", "grade", "flag", "day"]


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    rng = np.random.default_rng(42)
    t = mixed_table(rng, 3000).with_columns(pl.Series("y", rng.normal(size=3000)),
                                            pl.col("colour").cast(pl.Categorical).alias("cat"))
    path = tmp_path_factory.mktemp("mixed") / "t.parquet"
    t.write_parquet(path)
    return t, path


def check_same_release(outs, t, qi, k):
    """The runs ``outs`` gave the same release (labels, table, per-QI losses), k-anonymous,
    its categorical QIs' values from the input's."""
    for r in outs[1:]:
        np.testing.assert_array_equal(r.labels, outs[0].labels)
        assert r.table.equals(outs[0].table)
        assert r.report.information_loss_by_qi == outs[0].report.information_loss_by_qi
    out = outs[0].table
    assert out.group_by(qi).len()["len"].min() >= k
    assert np.bincount(outs[0].labels).min() >= k
    for c in ["colour", "grade", "cat"]:
        assert set(out[c].cast(pl.String).to_list()) <= set(t[c].cast(pl.String).to_list())


@pytest.mark.parametrize("opts", [
    dict(polish_rounds=0),  # leaves of 256
    dict(polish_rounds=4, leaf_size=512),
    dict(leaf_size=0, polish_rounds=0),  # whole blocks
    dict(refine="local", refine_rounds=2, polish_rounds=0),
])
def test_streamed_invariant_to_threads_and_chunks(table, opts):
    t, path = table
    qi = QI + ["y", "cat"]
    outs = []
    for threads, chunk in [(1, 3000), (2, 257), (2, 1000)]:
        res = engine.microaggregate(str(path), qi, 4, block_size=700, threads=threads, chunk_rows=chunk,
                                    ordinal={"grade": ORDER}, **opts)
        assert res.report.blocks > 1
        outs.append(res)
    check_same_release(outs, t, qi, 4)
    out = outs[0].table
    assert out.schema["cat"] == pl.Categorical and out.schema["day"] == pl.Date and out.schema["flag"] == pl.Boolean
    assert out["other"].to_list() == t["other"].to_list()


def test_streamed_one_block_equals_in_memory(table):
    """A block size above the row count: the exact in-memory path; the streamed
    path's IL is measured the same way on the same categories."""
    t, path = table
    # (cat is colour as a Categorical: passed through it would publish colour unaggregated)
    kw = dict(ordinal={"grade": ORDER}, derived={"cat": "colour"})
    exact = engine.microaggregate(t, QI, 5, **kw)
    again = engine.microaggregate(str(path), QI, 5, block_size=5000, **kw)
    np.testing.assert_array_equal(exact.labels, again.labels)
    streamed = engine.microaggregate(str(path), QI, 5, block_size=700, **kw)
    assert streamed.report.blocks > 1
    # blocks lose a little at their borders; polish wins it back (as for numeric QIs)
    assert streamed.report.information_loss_percent < 1.5 * exact.report.information_loss_percent


def test_memory_limit_csv_pieces(table, tmp_path, monkeypatch):
    """A CSV read in pieces under --memory-limit gives the same release; the budget
    plans the pieces as for any CSV input (the encoded source reads a CSV file)."""
    from engine import coordinator

    t, _ = table
    csv = tmp_path / "t.csv"
    t.select(["x", "colour", "grade", "flag", "day", "other"]).write_csv(csv)
    a = engine.microaggregate(str(csv), QI, 3, ordinal={"grade": ORDER}, block_size=800, polish_rounds=0)
    planned = []
    plan = coordinator.plan_budget
    monkeypatch.setattr(coordinator, "plan_budget", lambda *a, **kw: planned.append(kw["kind"]) or plan(*a, **kw))
    b = engine.microaggregate(str(csv), QI, 3, ordinal={"grade": ORDER}, block_size=800, polish_rounds=0,
                              memory_limit="2GiB")  # pieces of 2-16 MiB whatever the limit
    assert planned == ["csv"]
    np.testing.assert_array_equal(a.labels, b.labels)
    assert a.table.schema["day"] == pl.Date and a.table.schema["colour"] == pl.String
