"""Mixed-type QIs spilled as one column a QI (numbers, category codes) and expanded
to the encoded columns when a block is read (engine.encode.mixed ``compact`` / ``expand``,
``BlockStore(expand=...)``), pass 1 measured on the same compact columns
(``MixedMoments``), and on a Parquet input of many row groups the plan from a
row-group sample with pass 1's sums made by the partition pass."""

import numpy as np
import polars as pl
import pytest

import engine
from engine import coordinator
from engine.encode import dictionary, mixed
from engine.options import RunConfig
from engine.io.source import frame_to_array, open_source
from engine.io.spill import BlockStore
from engine.frames import frame_to_columns
from engine.passes.profile import profile_columns
from test_mixed import ORDER, mixed_table
from test_mixed_stream import check_same_release

QI = ["x", "colour", "grade", "flag", "day", "n", "cat"]


def _table(n, seed):
    rng = np.random.default_rng(seed)
    return mixed_table(rng, n).with_columns(pl.Series("n", rng.integers(0, 50, n)),
                                            pl.col("colour").cast(pl.Categorical).alias("cat"))


def _plan(t, chunk=1000):
    cfg = RunConfig.make(qi=QI, k=3, ordinal={"grade": ORDER}, weights={"colour": 3.0, "x": 0.5})
    return mixed.plan(open_source(t), cfg, chunk)


def _bits(a):
    return np.ascontiguousarray(a, np.float64).view(np.int64)


def test_codes_round_trip_to_the_encoded_columns():
    """compact -> float64 -> expand is bit for bit the encoded columns, also after a
    round trip through a store's narrow (float32) and wide records."""
    t = _table(500, 0).with_columns(pl.col("x").cast(pl.Float32).cast(pl.Float64))  # narrow records hold it
    m = _plan(t)
    names = [q.name for q in m.qis]
    want = frame_to_array(m.encode(t.select(names), 0), m.names)
    C = frame_to_columns(m.compact(t.select(names), 0), names)  # (QIs, n)
    assert C.shape == (len(QI), 500)
    np.testing.assert_array_equal(_bits(m.expand(C.T)), _bits(want))
    # only some encoded columns (the partition plan's routing)
    used = np.array([0, m.qis[1].first + 2, m.qis[2].first, m.qis[2].first + 3, m.qis[6].first])
    out = np.full((len(m.names), 600), np.nan)
    got = m.expand_columns(C, used, out)
    np.testing.assert_array_equal(_bits(got[used].T), _bits(want[:, used]))
    # through spilled records: narrow, then wide (a value that is not a float32)
    with BlockStore(2, len(QI), rows=1000, expand=m.expand) as store:
        ids = np.arange(500)
        narrow = np.empty((500, 1 + len(QI)), np.float32)  # (as the partition pass gathers them)
        narrow.view(np.uint32)[:, 0] = ids
        narrow[:, 1:] = C.T
        store.append_records(0, narrow)
        store.append(0, ids + 500, C.T)
        store.append(1, ids, C.T)
        store.flush()
        got_ids, X = store.read(0)
        np.testing.assert_array_equal(got_ids, np.arange(1000))
        np.testing.assert_array_equal(_bits(X), _bits(np.vstack([want, want])))
        got_ids, X = store.read_many([0, 1])
        assert X.shape == (1500, len(m.names)) and X.flags.c_contiguous
        np.testing.assert_array_equal(_bits(X[1000:]), _bits(want))


def test_profile_from_codes_equals_pass_1_on_the_encoded_columns():
    """The profile measured on the compact columns equals pass 1 on the encoded
    columns where it matters (scale, mean and sd after ``adjust``, the numeric,
    date and rank columns' raw moments, the sample), for any chunk size."""
    t = _table(2000, 1)
    m = _plan(t)
    want = profile_columns(m.source, m.cfg.qi, 300, sample_stride=7)
    raw = m.raw
    for chunk in (2000, 300, 257):
        got = m.profile_pass(chunk, False, 2000, 7)
        _same_standardization(got, want)
        own = [q.first for q in m.qis if q.kind != "nominal"]
        for f in ("mean", "sd", "min", "max"):
            np.testing.assert_array_equal(getattr(m.raw, f)[own], getattr(raw, f)[own])
        np.testing.assert_array_equal(_bits(got.sample), _bits(want.sample))
        np.testing.assert_array_equal(got.sample_ids, want.sample_ids)
        assert got.rows == want.rows == 2000
        # one-hot and carry columns: the category shares
        q = m.qis[1]
        share = t["colour"].value_counts().sort("colour")["count"].to_numpy() / 2000
        np.testing.assert_allclose(m.raw.mean[q.first: q.first + q.m], share, rtol=1e-15)


def test_profile_from_codes_rescaled():
    """Values so large that pass 1 measures them in a power-of-two scale: the same
    scale and moments from the compact columns."""
    t = _table(300, 2).with_columns(pl.col("x") * 1e200)
    m = _plan(t)
    want = profile_columns(m.source, m.cfg.qi, 100)
    got = m.profile_pass(100, False, 300)
    assert got.scale[0] > 1
    _same_standardization(got, want)


@pytest.mark.parametrize("big", [False, True])
def test_workers_on_codes_equal_the_expanded_rows(big):
    """The aggregate pass's workers on compact records (``Mixed.standardized``,
    ``Mixed.published_sums``: kernels ``standardize_codes``, ``compact_group_sums``,
    ``group_picks``) give bit for bit what the expanded rows give (``standardize_serial``
    of ``expand``, then ``unit_sums``' centroids): the standardized rows, each group's
    published numbers and size; the categories' picks and losses counted row by row."""
    from engine.passes.aggregate import unit_sums
    from engine.passes.partition import standardized

    t = _table(3000, 7)
    if big:  # measured in a power-of-two scale
        t = t.with_columns(pl.col("x") * 1e200)
    m = _plan(t)
    names = [q.name for q in m.qis]
    prof = m.profile_pass(1000, False, 3000)
    assert (prof.scale[0] > 1) == big
    C = np.ascontiguousarray(frame_to_columns(m.compact(t.select(names), 0), names).T)
    X = m.expand(C)
    for cols in (m.grouping, np.arange(len(m.names))):
        np.testing.assert_array_equal(_bits(m.standardized(C, prof, cols)), _bits(standardized(X, prof, cols)))
    rng = np.random.default_rng(8)
    g = 400
    labels = rng.permutation(np.arange(3000) % g).astype(np.int64)  # every group used, sizes 7 or 8
    table, cnt, loss = m.published_sums(C, labels, g, prof)
    want = unit_sums(X, labels, g, prof)
    for j in m.values:
        c = want[0][:, m.qis[j].first]
        np.testing.assert_array_equal(_bits(table[:, j]), _bits(c if m.qis[j].kind == "numeric" else np.rint(c)))
    np.testing.assert_array_equal(cnt, want[1])
    # the slow way: each group's mode / lower median counted row by row, and the values changed
    for j in m.cats:
        q = m.qis[j]
        for grp in range(0, g, 37):
            codes = C[labels == grp, j].astype(int)
            counts = np.bincount(codes, minlength=q.m)
            if q.kind == "nominal":
                assert table[grp, j] == np.argmax(counts)
            else:
                assert table[grp, j] == np.flatnonzero(2 * np.cumsum(counts) >= codes.size)[0]
        pub = table[labels, j].astype(int)
        own = C[:, j].astype(int)
        assert loss[j] == ((pub != own).sum() if q.kind == "nominal" else np.abs(pub - own).sum())


@pytest.mark.parametrize("change", ["unseen", "missing"])
def test_parquet_dictionary_read_errors(tmp_path, monkeypatch, change):
    """String QIs of a Parquet input are read as the pages' dictionary indices
    (``Source.iter_dictionary``): a value the dictionary pass did not see, or a missing
    one (the file changed between the passes), stops the run naming the row, as the
    text read does; nothing is written."""
    t = _table(3000, 11)
    path = tmp_path / "t.parquet"
    t.write_parquet(path, row_group_size=200)
    real = coordinator.guard  # (the run's first pass after its plan: the dictionaries are learnt)

    def then_change(*a, **kw):
        new = pl.lit("purple") if change == "unseen" else pl.lit(None, pl.String)
        t.with_columns(pl.when(pl.int_range(pl.len()) == 2500).then(new).otherwise(pl.col("colour"))
                       .alias("colour")).write_parquet(path, row_group_size=200)
        return real(*a, **kw)

    monkeypatch.setattr(coordinator, "guard", then_change)
    calls = []
    codes = mixed.Mixed.dictionary_codes
    monkeypatch.setattr(mixed.Mixed, "dictionary_codes", lambda self, *a: calls.append(1) or codes(self, *a))
    dest = tmp_path / "out.parquet"
    msg = (r"column 'colour' has the value 'purple' at row 2501, which the first pass did not see: .* changed"
           if change == "unseen" else r"column 'colour' has a missing value at row 2501 \(rows counted from 1\)")
    with pytest.raises(engine.EngineError, match=msg):
        engine.anonymize(str(path), str(dest), QI, 3, block_size=500, ordinal={"grade": ORDER})
    assert not dest.exists() and calls  # (the dictionary read ran)


@pytest.mark.parametrize("bad", ["unlisted"])
def test_parquet_dictionary_pass_errors(tmp_path, monkeypatch, bad):
    """The dictionary pass on String QIs of a Parquet input (``dictionary.parquet_pass``,
    from the pages' dictionaries) stops with the message the text read gives (the
    same input as a DataFrame), naming the same row; its dictionaries are the same."""
    t = _table(3000, 12)
    if bad == "missing":
        t = t.with_columns(pl.when(pl.int_range(pl.len()) == 2100).then(None).otherwise(pl.col("colour"))
                           .alias("colour"))
    elif bad == "unlisted":
        t = t.with_columns(pl.when(pl.int_range(pl.len()) == 1717).then(pl.lit("none")).otherwise(pl.col("grade"))
                           .alias("grade"))
    elif bad == "many":
        t = t.with_columns(pl.format("c{}", pl.int_range(pl.len()) % 150).alias("colour"))
    path = tmp_path / "t.parquet"
    t.write_parquet(path, row_group_size=256)
    cfg = RunConfig.make(qi=TEXT_QI, k=3, ordinal={"grade": ORDER})
    calls = _count(monkeypatch)
    msgs = []
    for data in (t, str(path)):
        with pytest.raises(engine.EngineError) as err:
            mixed.plan(open_source(data), cfg, 1000)
        msgs.append(str(err.value).replace(str(path), "INPUT"))
    assert msgs[0] == msgs[1] and ("row" in msgs[0] or bad == "many") and calls == [1], msgs


TEXT_QI = ["x", "colour", "grade", "day", "n"]  # the categorical ones String


def _count(monkeypatch):
    calls = []
    real = dictionary.parquet_pass
    monkeypatch.setattr(dictionary, "parquet_pass", lambda *a: calls.append(1) or real(*a))
    return calls


@pytest.mark.parametrize("change", [None, "missing", "many"])
def test_parquet_dictionary_pass_dictionaries(tmp_path, monkeypatch, change):
    """The same dictionaries (and missing-value counts) from the pages' dictionaries as
    from the text read; a missing value, and 150 categories, are no errors."""
    t = _table(3000, 13)
    if change == "missing":
        t = t.with_columns(pl.when(pl.int_range(pl.len()) % 97 == 5).then(None).otherwise(pl.col("colour"))
                           .alias("colour"))
    elif change == "many":
        t = t.with_columns(pl.format("c{}", pl.int_range(pl.len()) % 150).alias("colour"))
    path = tmp_path / "t.parquet"
    t.write_parquet(path, row_group_size=256)
    cfg = RunConfig.make(qi=TEXT_QI, k=3, ordinal={"grade": ORDER})
    calls = _count(monkeypatch)
    a, b = mixed.plan(open_source(t), cfg, 1000), mixed.plan(open_source(str(path)), cfg, 700)
    assert [q.categories for q in a.qis] == [q.categories for q in b.qis] and calls == [1]
    assert [q.nulls for q in a.qis] == [q.nulls for q in b.qis] == [0, t["colour"].null_count(), 0, 0, 0]
    assert open_source(str(path)).dictionary_columns(["colour", "grade"])


def test_dictionary_indices_without_pandas():
    """``dictionary.dictionary_indices``: a DictionaryArray's indices as a view of its buffer, also of
    a slice (an offset) and of an empty array, equal to pyarrow's own conversion."""
    pa = pytest.importorskip("pyarrow")
    arr = pa.array(["b", "a", "c", "a", "b", "b", "c"]).dictionary_encode()
    for a in (arr, arr.slice(2, 4), arr.slice(3, 0)):
        got = dictionary.dictionary_indices(a)
        np.testing.assert_array_equal(got, np.asarray(a.indices.to_pylist(), np.int64))
        assert got.shape == (len(a),)


def _same_standardization(got, want):
    """The same ``z = (x / scale - mean) / sd`` (a column of sd 0 standardizes to 0:
    the carry columns, whose mean is a share measured either way)."""
    np.testing.assert_array_equal(got.scale, want.scale)
    np.testing.assert_array_equal(got.sd, want.sd)
    live = want.sd > 0
    np.testing.assert_array_equal(got.mean[live], want.mean[live])
    np.testing.assert_allclose(got.mean, want.mean, rtol=1e-15, atol=0)


@pytest.mark.slow
@pytest.mark.parametrize("opts", [
    dict(polish_rounds=0),
    dict(polish_rounds=3, leaf_size=512),
    dict(leaf_size=0, polish_rounds=0),
    dict(refine="local", refine_rounds=2, polish_rounds=0),
])
def test_codes_spill_invariant(tmp_path, opts):
    """The output with codes spilled (expanded per block) is the same for any chunk
    size and thread count (one row group: pass 1 runs)."""
    t = _table(2500, 3)
    path = tmp_path / "t.parquet"
    t.write_parquet(path)
    outs = []
    for threads, chunk in [(1, 2500), (2, 257), (2, 1000)]:
        res = engine.microaggregate(str(path), QI, 4, block_size=600, threads=threads, chunk_rows=chunk,
                                    ordinal={"grade": ORDER}, weights={"x": 2.0}, **opts)
        assert res.report.blocks > 1 and "profile" in res.report.passes
        outs.append(res)
    check_same_release(outs, t, QI, 4)
    for r in outs[1:]:
        assert r.report.metrics["mixed"] == outs[0].report.metrics["mixed"]


@pytest.mark.slow
def test_row_group_sample_plan(tmp_path):
    """A Parquet input of many row groups: no pass 1 (the partition pass measures the
    columns); the release is k-anonymous with categories from their domains, the
    same for any chunk size and thread count, and its information loss is that of
    the run with pass 1 (whose plan differs) within a few percent."""
    t = _table(8000, 4)
    path = tmp_path / "t.parquet"
    t.write_parquet(path, row_group_size=100)
    outs = []
    for threads, chunk in [(1, 8000), (2, 333), (2, 1000)]:
        res = engine.microaggregate(str(path), QI, 4, block_size=900, threads=threads, chunk_rows=chunk,
                                    ordinal={"grade": ORDER}, polish_rounds=0)
        assert "sample" in res.report.passes and "profile" not in res.report.passes
        outs.append(res)
    check_same_release(outs, t, QI, 4)
    out = outs[0].table
    assert out["other"].to_list() == t["other"].to_list()
    # the same rows in one row group: pass 1 and its every-s-th-row plan
    one = tmp_path / "one.parquet"
    t.write_parquet(one)
    full = engine.microaggregate(str(one), QI, 4, block_size=900, ordinal={"grade": ORDER}, polish_rounds=0)
    assert "profile" in full.report.passes
    # (on so small a table the plan's first cuts, among columns of equal variance, move
    # the loss by 5-20 % either way; at 10M census-like rows the sampled plan's is 0.3 % lower)
    assert outs[0].report.information_loss_percent < 1.3 * full.report.information_loss_percent
    # the published values' losses are measured the same way (verify recomputes them)
    dest = tmp_path / "out.parquet"
    rep = engine.anonymize(str(path), str(dest), QI, 4, block_size=900, ordinal={"grade": ORDER},
                           polish_rounds=0)
    assert rep.information_loss_by_qi == outs[0].report.information_loss_by_qi
    assert pl.read_parquet(dest).equals(out)


def test_every_qi_nominal(tmp_path):
    """No numeric, date or ordinal QI: only category counts in pass 1 (and in the
    partition pass that measures on its way)."""
    rng = np.random.default_rng(6)
    n = 4000
    t = pl.DataFrame({"a": rng.choice(list("pqrst"), n), "b": rng.choice(["u", "v"], n), "other": np.arange(n)})
    path = tmp_path / "t.parquet"
    t.write_parquet(path, row_group_size=100)
    for p in (path, t):
        res = engine.microaggregate(p if isinstance(p, pl.DataFrame) else str(p), ["a", "b"], 5, block_size=500,
                                    polish_rounds=0)
        assert res.table.group_by(["a", "b"]).len()["len"].min() >= 5
