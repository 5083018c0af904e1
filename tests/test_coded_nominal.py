"""Nominal QIs of many categories grouped by their codes (``Mixed.coded``): the streamed
MDAV leaves (``kernels.mdav.coded``) and the seam stage's polish (``kernels.search.coded``)
use the exact one-hot distance instead of the 16-dimensional embedding.

Thresholds lowered as in tests/test_seams.py (a 12,000-row census extract, blocks of
1,000 rows, the seam stage from 5,000 rows)."""

import numpy as np
import pytest

import engine
import engine.encode.mixed as mixed_mod
from engine.passes import aggregate as aggregate_mod
from conftest import lower_seam_thresholds

K = 3
QI = ["age", "sex", "education_years", "hours_per_week", "municipality", "occupation"]


@pytest.fixture(scope="module")
def table():
    from engine.synth import census_extract
    return census_extract(12_000, seed=3, missing=True).select(QI + ["region"])


@pytest.fixture(autouse=True)
def small_thresholds(monkeypatch):
    lower_seam_thresholds(monkeypatch, 2_000)


def _run(table, **kw):
    kw.setdefault("block_size", 1_000)
    return engine.microaggregate(table, qi=QI, k=K, **kw)


def one_hot_sse(table, labels):
    """The nominal QIs' part of the exact objective: per QI, half its weight (1) times
    each group's ``g - sum c^2 / g`` (its one-hot SSE; a missing value a category)."""
    labels = np.asarray(labels)
    G = labels.max() + 1
    size = np.bincount(labels, minlength=G).astype(float)
    out = 0.0
    for c in ("municipality", "occupation", "sex"):
        codes = np.unique(table[c].fill_null("\x00").to_numpy().astype(str), return_inverse=True)[1]
        _, first, cnt = np.unique(labels * 1_000_000 + codes, return_index=True, return_counts=True)
        S = np.bincount(labels[first], cnt.astype(float) ** 2, G)
        out += 0.5 * (size - S / size).sum()
    return out


def test_fast_path_leaves_by_codes(table, monkeypatch):
    """The fast path's leaves group municipality and occupation by their codes: the same
    release for any thread count, chunk size and memory limit, every class of at least
    k rows, and a lower exact objective than the embedding's leaves."""
    calls = []
    real = aggregate_mod.aggregate_leaves_coded
    monkeypatch.setattr(aggregate_mod, "aggregate_leaves_coded", lambda *a: (calls.append(a[2].shape), real(*a))[1])
    runs = [_run(table, polish_rounds=0, threads=t, chunk_rows=c, memory_limit=m)
            for t, c, m in ((1, 100_000, None), (2, 777, None), (2, 100_000, "16GiB"))]
    assert calls and all(shape[1] == 2 for shape in calls)  # (municipality and occupation: sex is one-hot)
    for r in runs[1:]:
        assert np.array_equal(np.asarray(r.labels), np.asarray(runs[0].labels))
        assert r.table.equals(runs[0].table)
    assert runs[0].report.min_group_size >= K
    monkeypatch.setattr(mixed_mod, "CODED_NOMINAL", False)
    embedded = _run(table, polish_rounds=0)
    assert not np.array_equal(np.asarray(embedded.labels), np.asarray(runs[0].labels))
    assert one_hot_sse(table, runs[0].labels) < one_hot_sse(table, embedded.labels)


def test_seam_stage_polishes_by_codes(table, monkeypatch):
    """The default above the (lowered) seam-stage threshold: leaves and seam polish by the
    codes; the same release for any thread count, chunk size and memory limit, every
    class of k..2k-1 rows, below the fast path's loss, and a lower exact objective than
    the same stage on the embedding."""
    from engine.kernels.search import coded as coded_polish
    calls = []
    real = coded_polish.polish_coded
    monkeypatch.setattr(coded_polish, "polish_coded", lambda *a, **kw: (calls.append(a[1]), real(*a, **kw))[1])
    runs = [_run(table, threads=t, chunk_rows=c, memory_limit=m)
            for t, c, m in ((1, 100_000, None), (2, 777, None), (2, 100_000, "16GiB"))]
    assert calls and runs[0].report.polish["seam_blocks"] > 1
    for r in runs[1:]:
        assert np.array_equal(np.asarray(r.labels), np.asarray(runs[0].labels))
        assert r.table.equals(runs[0].table)
    sizes = np.bincount(np.asarray(runs[0].labels))
    assert sizes.min() >= K and sizes.max() <= 2 * K - 1
    assert runs[0].report.information_loss_percent < _run(table, polish_rounds=0).report.information_loss_percent
    monkeypatch.setattr(mixed_mod, "CODED_NOMINAL", False)
    embedded = _run(table)
    assert one_hot_sse(table, runs[0].labels) < one_hot_sse(table, embedded.labels)
