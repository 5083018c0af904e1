"""The write pass's kernels against plain references: the class counter (hash table
with prefetch and growth) and the publish gather with its SSE/SST sums."""

from collections import Counter

import numpy as np
import pytest

from engine.errors import VerificationError
from engine.kernels.groups import column_sums, gather_columns
from engine.passes.selfcheck import ClassCounter
import polars as pl

from reference import publish


@pytest.mark.parametrize("expected", [1, 50, 5000])
def test_class_counter_matches_counter(expected):
    rng = np.random.default_rng(expected)
    keys = rng.integers(0, 3000, 20_000)  # about 3000 classes: the smallest table grows
    frame = pl.DataFrame({"a": keys // 50, "b": (keys % 50).astype(np.float64)})
    cc = ClassCounter(["a", "b"], expected)
    for s in range(0, frame.height, 3_333):
        cc.add(frame.slice(s, 3_333))
    ref = Counter(zip(frame["a"].to_list(), frame["b"].to_list()))
    out = cc.check(None, frame.height)
    assert out == {"rows": frame.height, "classes": len(ref), "min_class_size": min(ref.values())}
    counts = cc.table[:, 1].astype(np.int64)
    assert sorted(counts[counts > 0].tolist()) == sorted(ref.values())
    with pytest.raises(VerificationError, match="smaller than k"):
        cc.check(min(ref.values()) + 1, frame.height)
    with pytest.raises(VerificationError, match="rows were written"):
        cc.check(None, frame.height + 1)


def test_publish_kernels_match_reference():
    rng = np.random.default_rng(3)
    n, d, g = 5_000, 4, 700
    X = rng.normal(size=(n, d)) * 10 + 3
    X[:, 2] = 7.0  # a constant column
    X[:, 0] = np.round(X[:, 0])  # integers: passed as an int64 column below
    labels = rng.integers(0, g, n).astype(np.int32)
    centroid = rng.normal(size=(g, d))
    scale = np.array([1.0, 0.5, 1.0, 4.0])
    mean = rng.normal(size=d)
    out = np.empty((n, d))
    sse, zs, zq = np.zeros(d), np.zeros(d), np.zeros(d)
    for s in range(0, n, 1_234):  # chunked like the write pass
        lab = labels[s:s + 1_234]
        part = np.empty((d, lab.shape[0]))
        gather_columns(lab, centroid, part)
        for j in range(d):
            x = X[s:s + 1_234, j]
            x = x.astype(np.int64) if j == 0 else np.ascontiguousarray(x)  # an integer column too
            column_sums(x, part[j], scale, mean, j, sse, zs, zq)
        out[s:s + 1_234] = part.T
    r_out, r_sse, r_zs, r_zq = publish(X, labels, centroid, scale, mean)
    assert np.array_equal(out, r_out)
    assert np.array_equal(sse, r_sse) and np.array_equal(zs, r_zs) and np.array_equal(zq, r_zq)


def test_class_counter_negative_zero_is_its_own_class():
    """-0.0 and 0.0 print apart (and are two bit patterns in Parquet): two classes, as
    ``microagg verify`` counts them (issue 14, defect 9)."""
    frame = pl.DataFrame({"a": [0.0, -0.0, 0.0, 1.5, 1.5, 1.5], "b": [2.0, 2.0, 2.0, -0.0, 0.0, -0.0]})
    cc = ClassCounter(["a", "b"], 2)
    cc.add(frame)
    assert cc.check(1, 6) == {"rows": 6, "classes": 4, "min_class_size": 1}
    with pytest.raises(VerificationError, match="smaller than k=2"):
        cc.check(2, 6)
