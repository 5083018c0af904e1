"""Invariants, for every method: one group per row, size bounds, k-anonymous output."""

import numpy as np
import polars as pl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import engine
from engine.passes.aggregate import SIZE_BOUNDS

methods = st.sampled_from(["mdav", "mdav-single", "vmdav", "ivmdav"])


@st.composite
def tables(draw):
    n = draw(st.integers(2, 60))
    d = draw(st.integers(1, 4))
    k = draw(st.integers(2, max(2, min(n, 8))))
    vals = draw(st.lists(st.lists(st.integers(-5, 5) | st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False),
                                  min_size=d, max_size=d), min_size=n, max_size=n))
    return np.array(vals, dtype=np.float64), k


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables(), methods)
def test_partition_invariants(table, method):
    X, k = table
    n = X.shape[0]
    res = engine.microaggregate(X, k=k, method=method, group_column="g")
    labels = res.labels
    # every row in exactly one group, ids 0..groups-1
    assert labels.shape == (n,)
    assert set(np.unique(labels)) == set(range(res.report.groups))
    sizes = np.bincount(labels)
    lo, hi = SIZE_BOUNDS[method](k)
    if n < 2 * k:
        assert sizes.tolist() == [n]
    else:
        assert sizes.min() >= lo and sizes.max() <= hi
    # k-anonymity of what was published, counted independently of the engine
    qi = [c for c in res.table.columns if c != "g"]
    counts = res.table.group_by(qi).len()
    assert counts["len"].min() >= k
    # row order kept: the group column equals the labels
    assert res.table["g"].to_numpy().tolist() == labels.tolist()


@settings(max_examples=40, deadline=None)
@given(tables(), st.integers(1, 9))
def test_chunk_size_does_not_change_output(table, chunk):
    X, k = table
    frame = pl.DataFrame({f"c{j}": X[:, j] for j in range(X.shape[1])})
    a = engine.microaggregate(frame, qi=frame.columns, k=k, chunk_rows=chunk)
    b = engine.microaggregate(frame, qi=frame.columns, k=k, chunk_rows=10_000)
    assert a.table.equals(b.table)
    assert a.report.sse == b.report.sse
