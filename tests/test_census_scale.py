"""Census scale (issue 31): the published values in row order on disk, the bucketed spill
file, the spilled self-check counter, and a memory that does not grow with the rows.

Small tables with small ranges, buffers and index windows force what 100M rows do:
many runs, ranges and buckets."""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import engine
from engine import budget
from engine.errors import EngineError, VerificationError
from engine.io.spill import BlockStore, RunFile, RunStore
from engine.kernels import published as K
from engine.methods.centroids import CentroidFlow
from engine.passes import published
from engine.passes.selfcheck import ClassCounter, SpilledClassCounter, class_counter, table_bytes

sys.path.insert(0, str(Path(__file__).parent))
import reference_published as ref  # noqa: E402

QI = ["a", "b", "c", "d"]


def _table(n: int, seed: int = 0) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    return pl.DataFrame({"id": np.arange(n), "a": rng.normal(size=n), "b": rng.integers(0, 50, n).astype(np.float64),
                         "c": np.round(rng.gamma(2.0, 3.0, n), 1), "d": rng.normal(size=n) * 1e3,
                         "tag": rng.choice(["x", "y", "z"], n)})


@pytest.fixture
def small_spill(monkeypatch):
    """Row-ordered whenever a run may be (not only when the map does not fit); ranges of a
    few chunks, 64 KiB buffers (many runs), index windows of 4 buckets."""
    monkeypatch.setattr(budget, "PREFER_MAP", False)
    monkeypatch.setattr(budget, "RANGE_ROWS", 3000)
    monkeypatch.setattr(budget, "DEFAULT_SPILL", 1 << 16)
    monkeypatch.setattr(RunFile, "WINDOW", 4)


def _digest(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


# ------------------------------------------------------------------ kernels against the references

def test_kernels_match_the_references():
    rng = np.random.default_rng(1)
    for m, n_keys, w in ((0, 3, 2), (1, 1, 1), (57, 5, 3), (300, 17, 8)):
        src = rng.integers(0, 2**31, (m, w)).astype(np.uint32)
        keys = rng.integers(0, n_keys, m)
        dst, starts = np.empty_like(src), np.empty(n_keys + 1, np.int64)
        K.scatter_by_key(src, keys, n_keys, dst, starts)
        want, want_starts = ref.scatter_by_key(src, keys, n_keys)
        assert np.array_equal(dst, want) and np.array_equal(starts, want_starts)
    # segments sorted by key, merged key by key
    segs, firsts, starts_all, at = [], [], [], 0
    for _ in range(4):
        m = int(rng.integers(0, 40))
        src = rng.integers(0, 2**31, (m, 3)).astype(np.uint32)
        s, st = ref.scatter_by_key(src, rng.integers(0, 6, m), 6)
        segs.append(s), firsts.append(at), starts_all.append(st)
        at += m
    src = np.concatenate(segs)
    dst, starts = np.empty_like(src), np.empty(7, np.int64)
    K.merge_segments(src, np.array(firsts, np.int64), np.stack(starts_all), dst, starts)
    want, want_starts = ref.merge_segments(src, np.array(firsts), np.stack(starts_all))
    assert np.array_equal(dst, want) and np.array_equal(starts, want_starts)
    # a unit's records into each range's part of a buffer, then placed back at their rows
    ids = rng.permutation(1000)[:300].astype(np.int64)
    local = rng.integers(0, 40, 300).astype(np.int64)
    C = rng.normal(size=(40, 3))
    rec, nxt = np.zeros((4 * 120, 4)), np.arange(4, dtype=np.int64) * 120
    counts = np.bincount(ids // 250, minlength=4)
    want, want_next = ref.fill_records(ids, local, 7, C, 250, nxt, 4 * 120)
    K.fill_records(ids, local, 7, C, 250, rec.view(np.int64), rec, nxt)
    assert np.array_equal(rec.view(np.int64), want.view(np.int64)) and np.array_equal(nxt, want_next)
    assert np.array_equal(nxt - np.arange(4) * 120, counts)
    part = rec[120: 120 + counts[1]]
    values, labels = np.empty((3, 250)), np.full(250, -1, np.int64)
    bad = K.place_records(part.view(np.int64), part, 250, 100, values, labels)
    wv, wl, wbad = ref.place_records(part, 250, 250, 100)
    assert bad == wbad == -1 and np.array_equal(labels, wl) and np.array_equal(values[:, wl >= 0], wv[:, wl >= 0])
    twice = np.concatenate([part, part[:1]])  # a row placed twice; a group id too large
    labels[:] = -1
    assert K.place_records(twice.view(np.int64), twice, 250, 100, values, labels) == part.shape[0] \
        == ref.place_records(twice, 250, 250, 100)[2]
    labels[:] = -1
    assert K.place_records(part.view(np.int64), part, 250, 8, values, labels) == ref.place_records(part, 250, 250, 8)[2]


# ------------------------------------------------------------------ the bucketed spill file

def test_run_file_reads_each_bucket_in_the_order_appended(tmp_path, monkeypatch):
    monkeypatch.setattr(RunFile, "WINDOW", 3)
    rng = np.random.default_rng(2)
    f = RunFile(tmp_path / "r.bin", 11, 1 << 16)
    want: dict[int, list] = {b: [] for b in range(11)}
    for i in range(2000):  # ~40,000 records of 8 bytes, then of 12: runs of both sizes
        m = int(rng.integers(0, 40))
        size = 8 if i < 1000 else 12
        rec = rng.integers(0, 256, (m, size)).astype(np.uint8)
        keys = rng.integers(0, 11, m)
        room = f.reserve(m, size)
        starts = np.empty(12, np.int64)
        K.scatter_by_key(rec.view(np.uint32), keys, 11, room.view(np.uint32), starts)
        f.commit(starts)
        for b, r in zip(keys[np.argsort(keys, kind="stable")], room.copy()):
            want[int(b)].append(r.tobytes())
    f.flush(release=True)
    assert len(f._offsets) > 4  # several runs
    for b in [0, 5, 10, 3, 4, 9, 1]:  # out of order: windows reloaded
        assert f.read(b).tobytes() == b"".join(want[b])
    assert f.counts.sum() == sum(len(v) for v in want.values())
    f.close()
    assert not list(tmp_path.iterdir())


def test_run_file_written_by_bucket_parts(tmp_path, monkeypatch):
    """``reserve_buckets``: records straight into their bucket's part of the buffer; a part
    full writes the run, an append larger than a part grows the buffers."""
    monkeypatch.setattr(RunFile, "WINDOW", 2)
    rng = np.random.default_rng(8)
    f = RunFile(tmp_path / "p.bin", 5, 1 << 16)  # 5 parts of 1,638 records of 8 bytes
    want: dict[int, list] = {b: [] for b in range(5)}
    for m in [*rng.integers(0, 300, 200), 4000, 10]:
        keys = rng.integers(0, 5, int(m))
        values = rng.integers(0, 2**62, int(m))
        buf, nxt = f.reserve_buckets(np.bincount(keys, minlength=5), 8)
        for key, v in zip(keys, values):
            buf.view(np.int64)[nxt[key], 0] = v
            nxt[key] += 1
            want[int(key)].append(int(v))
    f.flush(release=True)
    assert len(f._offsets) >= 5
    for b in [4, 0, 3, 1, 2]:
        assert f.read(b).view(np.int64).tolist() == want[b]
    f.close()


def test_run_store_reads_as_a_block_store(tmp_path):
    rng = np.random.default_rng(3)
    stores = [BlockStore(9, 2, tmp_path, 1 << 16, rows=5000), RunStore(9, 2, tmp_path, 1 << 16, rows=5000)]
    for i in range(40):
        m = 120
        keys = rng.integers(0, 9, m)
        order = np.argsort(keys, kind="stable")
        start = np.searchsorted(keys[order], np.arange(10)).astype(np.int64)
        X = rng.integers(0, 100, (m, 2)).astype(np.float64) if i < 30 else rng.normal(size=(m, 2))
        for s in stores:
            if i >= 30 and s.narrow:
                s.widen()
            rec = s.buffer(m)
            rec[:] = s.records(np.arange(i * m, (i + 1) * m)[order], X[order]).astype(rec.dtype)
            s.append_chunk(rec, start)
        stores[1].append_records(4, stores[1].records(np.array([10**6]), np.ones((1, 2))))
        stores[0].append_records(4, stores[0].records(np.array([10**6]), np.ones((1, 2))))
    for s in stores:
        s.flush()
    for b in range(9):
        a, r = stores[0].read(b), stores[1].read(b)
        assert np.array_equal(a[0], r[0]) and np.array_equal(a[1], r[1])
    assert np.array_equal(stores[0].rows, stores[1].rows)
    for s in stores:
        s.close()


# ------------------------------------------------------------------ the row-ordered published values

def _old_path(monkeypatch):
    """Every run keeps the row -> group map and the table of centroids."""
    monkeypatch.setattr(CentroidFlow, "per_row", lambda self, rows: "a test")


@pytest.mark.parametrize("extra", [{}, {"group_column": "g"}, {"derived": {"e": "d"}}])
def test_row_ordered_output_is_the_bytes_of_the_label_map(tmp_path, monkeypatch, small_spill, extra):
    t = _table(40_000)
    if "derived" in extra:
        t = t.with_columns((pl.col("d") * 2 + 1).alias("e"))
    t.write_parquet(tmp_path / "in.parquet", row_group_size=5000)
    calls = []
    monkeypatch.setattr(published.RowRecords, "add", lambda self, *a, _add=published.RowRecords.add:
                        (calls.append(1), _add(self, *a))[1])
    opts = dict(block_size=2000, polish_rounds=0, chunk_rows=1000, **extra)
    new = engine.anonymize(tmp_path / "in.parquet", tmp_path / "new.parquet", QI, 5, **opts)
    assert len(calls) > 10
    mem = engine.microaggregate(t, QI, 5, **opts)  # (in memory: each row's group from the records)
    _old_path(monkeypatch)
    old = engine.anonymize(tmp_path / "in.parquet", tmp_path / "old.parquet", QI, 5, **opts)
    old_mem = engine.microaggregate(t, QI, 5, **opts)
    assert _digest(tmp_path / "new.parquet") == _digest(tmp_path / "old.parquet")
    assert mem.table.equals(old_mem.table) and np.array_equal(mem.labels, old_mem.labels)
    for key in ("groups", "min_group_size", "max_group_size", "group_size_counts", "sse", "sst", "verified"):
        assert getattr(new, key) == getattr(old, key), key


def test_row_ordered_output_does_not_depend_on_threads_chunks_or_limit(tmp_path, small_spill):
    _table(30_000, seed=4).write_parquet(tmp_path / "in.parquet", row_group_size=3000)
    digests = set()
    for threads, chunk, limit in ((1, 1000, None), (2, 7777, None), (2, 2500, "16GiB")):
        engine.anonymize(tmp_path / "in.parquet", tmp_path / "o.parquet", QI, 4, block_size=1500, polish_rounds=0,
                         threads=threads, chunk_rows=chunk, memory_limit=limit)
        digests.add(_digest(tmp_path / "o.parquet"))
    assert len(digests) == 1


def test_distributions_after_are_counted_a_unit_at_a_time(tmp_path, monkeypatch, small_spill):
    t = _table(20_000, seed=5)
    opts = dict(block_size=2000, polish_rounds=0, chunk_rows=2000)
    new = engine.coordinator.run(t, engine.options.RunConfig.make(qi=QI, k=5, **opts), distributions=True).report
    _old_path(monkeypatch)
    old = engine.coordinator.run(t, engine.options.RunConfig.make(qi=QI, k=5, **opts), distributions=True).report
    assert new.distributions == old.distributions and all("after" in v for v in new.distributions.values())


def _records(tmp_path, rows=100, d=2, k=2) -> published.RowRecords:
    return published.RowRecords(tmp_path, rows, d, k, chunk_rows=10, buffer_bytes=1 << 16, target=30)


def _unit(ids, groups):
    local = np.repeat(np.arange(groups), len(ids) // groups)
    C = np.arange(groups * 2, dtype=np.float64).reshape(groups, 2)
    return np.asarray(ids, np.int64), local, (C, np.bincount(local), np.zeros(2))


def test_row_records_check_every_row_once(tmp_path):
    ok = _records(tmp_path)
    ids, local, part = _unit(np.arange(100)[::-1], 10)
    ok.add(ids, local, 0, part)
    g = ok.finish(10)
    assert (g.count, g.min_size, g.max_size, g.size_counts) == (10, 10, 10, {"10": 10})
    vals, lab = ok.take(25, 20)  # across two ranges of 30 rows
    assert np.array_equal(lab, 9 - np.arange(25, 45) // 10) and np.array_equal(vals[0], 2.0 * lab)
    ok.close()
    missing = _records(tmp_path)
    missing.add(*_unit(np.arange(98), 2)[:2], 0, _unit(np.arange(98), 2)[2])
    with pytest.raises(EngineError, match="a row was not assigned"):
        missing.finish(2)
    missing.close()
    twice = _records(tmp_path)
    ids, local, part = _unit(np.r_[np.arange(99), 5], 2)
    twice.add(ids, local, 0, part)
    twice.finish(2)
    with pytest.raises(EngineError, match="row 6 was published twice"):
        twice.take(0, 30)
    twice.close()
    small = _records(tmp_path, k=60)
    with pytest.raises(EngineError, match="a group has 50 rows, fewer than k=60"):
        small.add(*_unit(np.arange(100), 2)[:2], 0, _unit(np.arange(100), 2)[2])
    wrong = _records(tmp_path)
    ids, local, (C, cnt, err) = _unit(np.arange(100), 2)
    with pytest.raises(EngineError, match="group sizes do not add up"):
        wrong.add(ids, local, 0, (C, cnt + np.array([1, -1]), err))
    for r in (small, wrong):
        r.close()
    assert not list(tmp_path.iterdir())


# ------------------------------------------------------------------ the spilled self-check counter

def _frames(seed: int, small_class: bool):
    rng = np.random.default_rng(seed)
    classes = rng.normal(size=(700, 2))
    sizes = rng.integers(3, 9, 700)
    if small_class:
        sizes[123] = 2
    rows = np.repeat(np.arange(700), sizes)
    rng.shuffle(rows)
    t = pl.DataFrame({"x": classes[rows, 0], "y": classes[rows, 1]})
    t = t.with_columns(pl.when(pl.col("x") > 1.5).then(None).otherwise(pl.col("y")).alias("y"))
    return [t[i: i + 333] for i in range(0, t.height, 333)], t.height


@pytest.mark.parametrize("small_class", [False, True])
def test_the_spilled_counter_gives_the_in_memory_verdicts(tmp_path, small_class):
    frames, n = _frames(6, small_class)
    verdicts = []
    for counter in (ClassCounter(["x", "y"], 10), SpilledClassCounter(["x", "y"], tmp_path, n, 1 << 16)):
        for f in frames:
            counter.add(f)
        try:
            verdicts.append(counter.check(3, n))
        except VerificationError as exc:
            verdicts.append(str(exc))
        with pytest.raises(VerificationError, match="rows were written, but the input has"):
            counter.check(3, n + 1)
        counter.close()
    assert verdicts[0] == verdicts[1]
    assert ("smaller than k=3" in str(verdicts[0])) == small_class
    assert isinstance(class_counter(["x"], 10**6, room=table_bytes(10**6) - 1, folder=tmp_path, rows=n),
                      SpilledClassCounter)
    assert isinstance(class_counter(["x"], 10**6, room=table_bytes(10**6), folder=tmp_path, rows=n), ClassCounter)


def test_a_run_whose_classes_do_not_fit_spills_its_counter(tmp_path, monkeypatch, small_spill):
    _table(20_000, seed=7).write_parquet(tmp_path / "in.parquet")
    opts = dict(block_size=2000, polish_rounds=0)
    kept = engine.anonymize(tmp_path / "in.parquet", tmp_path / "m.parquet", QI, 5, **opts)
    made = []
    monkeypatch.setattr(SpilledClassCounter, "check", lambda self, *a, _c=SpilledClassCounter.check:
                        (made.append(1), _c(self, *a))[1])
    from engine.passes import selfcheck
    monkeypatch.setattr(selfcheck, "table_bytes", lambda classes: 1 << 40)  # (no limit holds the table)
    spilled = engine.anonymize(tmp_path / "in.parquet", tmp_path / "s.parquet", QI, 5, memory_limit="2GiB", **opts)
    assert made and spilled.verified == kept.verified and spilled.verified["classes"] == kept.groups
    assert _digest(tmp_path / "m.parquet") == _digest(tmp_path / "s.parquet")


# ------------------------------------------------------------------ memory that does not grow with the rows

def _run(args) -> tuple[subprocess.CompletedProcess, float]:
    """(process, peak RSS in MiB by ``/usr/bin/time``) of ``microagg ARGS``."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as tf:
        proc = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", tf.name, sys.executable, "-m", "engine", *args],
                              capture_output=True, text=True)
        return proc, int(tf.read().strip().splitlines()[-1]) / 1024


def test_peak_rss_does_not_grow_with_the_rows(tmp_path):
    """300,000 and 3,000,000 rows (folders of 150,000-row files: what pyarrow pre-buffers
    is a file's, the same) at the least limit of the larger: the label map and the groups
    (about 32 bytes a row at k = 5, d = 4) would add 82 MiB."""
    if not Path("/usr/bin/time").exists():
        pytest.skip("/usr/bin/time is needed to measure a child's peak RSS")
    runs = []
    for files in (2, 20):
        folder = tmp_path / f"in{files}"
        folder.mkdir()
        for i in range(files):
            rng = np.random.default_rng(i)
            pl.DataFrame({f"x{j}": rng.normal(size=150_000) for j in range(4)}).write_parquet(
                folder / f"part-{i:02d}.parquet", row_group_size=50_000)
        runs.append(["anonymize", str(folder), str(tmp_path / "o.parquet"), "--qi", "x0,x1,x2,x3", "--k", "5",
                     "--polish-rounds", "0", "--block-size", "5000", "--quiet", "--memory-limit"])
    proc, _ = _run([*runs[1], "64MiB"])
    least = re.search(r"at least (\d+)MiB", proc.stderr).group(1)
    peaks = []
    for args in runs:
        proc, peak = _run([*args, f"{least}MiB"])
        assert proc.returncode == 0, proc.stderr
        peaks.append(peak)
    # measured growth 31-37 MiB on the code before the leak guard's new tests as after them (the
    # larger run takes the sampled plan over 20 files): a bound of 32 failed about one run in two;
    # 48 still fails the 82 MiB a per-row map would add
    assert peaks[1] - peaks[0] < 48 and max(peaks) <= int(least), (peaks, least)
