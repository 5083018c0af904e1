"""Spilled blocks: narrow (float32) records while every value is a float32, wide after."""

import numpy as np
import polars as pl
import pytest

import engine
from engine.errors import EngineError
from engine.io import spill
from engine.io.spill import BlockStore
from engine.kernels.index.partition import gather_records, gather_records_narrow
from engine.synth import NUMERIC_QI, census_like

QI = list(NUMERIC_QI)


def _append(store, block, ids, X):
    """Append rows the way the partition pass does: a chunk buffer of the store's width."""
    rec = store.buffer(ids.shape[0])
    if rec.dtype == np.float32:
        rec.view(np.uint32)[:, 0] = ids
    else:
        rec.view(np.int64)[:, 0] = ids
    rec[:, 1:] = X
    start = np.zeros(store.n_blocks + 1, np.int64)
    start[block + 1:] = ids.shape[0]
    store.append_chunk(rec, start)


@pytest.mark.parametrize("mode", ["narrow", "wide", "mixed"])
def test_store_reads_back_exactly_what_was_appended(tmp_path, mode):
    rng = np.random.default_rng(1)
    d = 3
    rows = None if mode == "wide" else 10_000
    ids, X = {0: [], 1: []}, {0: [], 1: []}
    with BlockStore(2, d, tmp_path, buffer_bytes=1_000, rows=rows) as store:
        first = 0
        for chunk in range(6):
            if mode == "mixed" and chunk == 3:
                store.widen()
            for b in (0, 1):
                m = int(rng.integers(1, 50))
                x = rng.integers(-1000, 1000, (m, d)).astype(float)  # float32-exact
                if not store.narrow:
                    x += rng.random((m, d))  # not
                i = np.arange(first, first + m, dtype=np.int64)
                first += m
                _append(store, b, i, x)
                ids[b].append(i)
                X[b].append(x)
        store.flush()
        assert store.narrow == (mode == "narrow")
        for b in (0, 1):
            assert (store.narrow_rows[b] > 0) == (mode != "wide")
            for contiguous in (True, False):
                got_ids, got_X = store.read(b, contiguous=contiguous)
                assert got_ids.dtype == np.int64 and got_X.dtype == np.float64
                np.testing.assert_array_equal(got_ids, np.concatenate(ids[b]))
                np.testing.assert_array_equal(got_X, np.concatenate(X[b]))
            with open(store.block_path(b), "ab") as fh:  # one byte too many
                fh.write(b"\0")
            with pytest.raises(EngineError, match="damaged"):
                store.read(b)


def test_narrow_records_need_a_narrow_store(tmp_path):
    with BlockStore(1, 2, tmp_path, rows=10) as store:
        store.append_records(0, np.zeros((2, 3)))  # wide records widen the store
        assert not store.narrow
        with pytest.raises(ValueError):
            store.append_records(0, np.zeros((2, 3), np.float32))
    with BlockStore(1, 2, tmp_path) as store:  # rows unknown: wide from the start
        assert not store.narrow and store.buffer(4).dtype == np.float64
    with BlockStore(1, 2, tmp_path, rows=2 ** 32) as store:  # row ids need more than 32 bits
        assert not store.narrow


def test_gather_records_narrow_counts_inexact_values():
    rng = np.random.default_rng(2)
    d, n = 4, 500
    X = rng.integers(-2 ** 24, 2 ** 24, (d, n)).astype(float)
    inexact = [(0, 3, 0.1), (2, 7, 2.0 ** 24 + 1), (3, 9, 1e300), (1, 11, 5e-324), (1, 12, -0.0)]
    for j, i, v in inexact:
        X[j, i] = v
    order = rng.permutation(n)
    out = np.empty((n, 1 + d), np.float32)
    bad = gather_records_narrow(X, 2 ** 32 - n, order, out)
    assert bad == 4  # -0.0 is a float32
    np.testing.assert_array_equal(out.view(np.uint32)[:, 0], 2 ** 32 - n + order)
    with np.errstate(over="ignore"):  # 1e300 -> inf, as the kernel casts it
        np.testing.assert_array_equal(out[:, 1:], X[:, order].T.astype(np.float32))
    wide = np.empty((n, 1 + d))
    gather_records(X, 0, order, wide)
    np.testing.assert_array_equal(wide[:, 1:], X[:, order].T)


@pytest.fixture(scope="module")
def late_decimal(tmp_path_factory):
    """Census-like rows, all float32-exact but one late value (a decimal)."""
    d = tmp_path_factory.mktemp("late")
    t = census_like(20_000, seed=9).with_columns(pl.col(QI[1]).cast(pl.Float64))
    t = t.with_columns(pl.when(pl.int_range(pl.len()) == 17_777).then(pl.col(QI[1]) + 0.1)
                       .otherwise(pl.col(QI[1])).alias(QI[1]))
    t.write_parquet(d / "t.parquet", row_group_size=2_000)
    return d / "t.parquet"


def test_widening_mid_run_changes_no_output(late_decimal, tmp_path, monkeypatch):
    widened = []
    real_widen = BlockStore.widen
    monkeypatch.setattr(BlockStore, "widen", lambda self: (widened.append(1), real_widen(self)))
    outs = []
    for chunk in (1_000, 7_000):
        out = tmp_path / f"c{chunk}.parquet"
        engine.anonymize(str(late_decimal), out, qi=QI, k=5, block_size=3_000, chunk_rows=chunk)
        outs.append(pl.read_parquet(out))
    assert len(widened) == 2  # once per run
    monkeypatch.setattr(spill.BlockStore, "__init__", _wide_init(spill.BlockStore.__init__))
    out = tmp_path / "wide.parquet"
    engine.anonymize(str(late_decimal), out, qi=QI, k=5, block_size=3_000, chunk_rows=1_000)
    outs.append(pl.read_parquet(out))
    assert outs[0].equals(outs[1]) and outs[0].equals(outs[2])
    assert pl.read_parquet(late_decimal)[QI[1]][17_777] % 1 != 0


def _wide_init(init):
    def wide(self, *a, **kw):
        kw["rows"] = None
        init(self, *a, **kw)
    return wide


def test_discard_removes_the_folder_in_the_background(tmp_path):
    store = BlockStore(3, 2, tmp_path, rows=100)
    for b in range(3):
        _append(store, b, np.arange(b * 10, b * 10 + 10), np.ones((10, 2)))
    store.flush()
    assert len(list(store.path.iterdir())) == 3
    store.discard()
    store.discard()  # once is enough
    store.close()
    assert not store.path.exists() and list(tmp_path.iterdir()) == []
