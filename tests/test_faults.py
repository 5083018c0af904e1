"""Faults and guarantees, in process: self-verification, full disk, unwritable
destinations, private temporaries, stale temporaries of killed runs, the input left
untouched, byte-identical output. (Signals and SIGKILL: tests/test_signals.py.)"""

import errno
import fcntl
import hashlib
import os
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest

import engine
import engine.coordinator as coordinator
import engine.methods.centroids as centroids
import engine.passes.write as write
from engine.passes.executor import LocalExecutor
from engine.cli import main
from engine.errors import EngineError, VerificationError
from engine.io import tempfiles
from engine.io.tempfiles import HOST_TAG, SPILL_PREFIX, TMP_SUFFIX, clean_stale
from engine.synth import NUMERIC_QI, census_like

pytestmark = pytest.mark.slow  # end-to-end: run with -m slow (left out by default; CI runs it)

QI = list(NUMERIC_QI)
QI_ARG = ",".join(QI)
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    """12,000 census-like rows as Parquet (3 row groups) and CSV, in a folder of their own."""
    d = tmp_path_factory.mktemp("faults-in")
    frame = census_like(12_000, seed=11)
    frame.write_parquet(d / "in.parquet", row_group_size=4_000)
    frame.write_csv(d / "in.csv")
    return frame, d / "in.parquet", d / "in.csv"


def _fingerprint(path):
    st = os.stat(path)
    return hashlib.sha256(Path(path).read_bytes()).hexdigest(), st.st_mtime_ns, st.st_size, stat.S_IMODE(st.st_mode)


def _leftovers(*folders):
    """Any temporary of ours (file or spill folder) in these folders."""
    return [p.name for f in folders for p in Path(f).iterdir() if "microagg" in p.name]


def _run(argv, capsys):
    code = main(argv)
    err = capsys.readouterr().err.strip()
    return code, err


# --------------------------------------------------------------------- self-verification

@pytest.mark.parametrize("blocks", [False, True], ids=["one-block", "blocks"])
def test_verification_catches_a_class_below_k(table, tmp_path, monkeypatch, capsys, blocks):
    """One published row made to differ from its group: the run fails, exit 1, nothing written."""
    _, src, _ = table
    real = write.publish

    def off_by_one(labels, centroid, out):
        real(labels, centroid, out)
        if out.shape[1]:
            out[0, 0] += 1.0  # the first row of every chunk no longer matches its group

    monkeypatch.setattr(write, "publish", off_by_one)
    out = tmp_path / "out.parquet"
    before = _fingerprint(src)
    extra = ["--block-size", "3000"] if blocks else []
    code, err = _run(["anonymize", str(src), str(out), "--qi", QI_ARG, "--k", "4", "--chunk-rows", "5000",
                      "--tmp-dir", str(tmp_path), "--no-progress", *extra], capsys)
    assert code == 1, err
    assert err.startswith("microagg: error: verification failed: a published class of 1 row(s) is smaller "
                          "than k=4") and len(err.splitlines()) == 1, err
    assert not out.exists() and _leftovers(tmp_path) == []
    assert _fingerprint(src) == before
    with pytest.raises(VerificationError, match="verification failed"):  # the API too (an EngineError)
        engine.microaggregate(str(src), qi=QI, k=4)


def test_verification_checks_the_written_row_count(table, tmp_path, monkeypatch, capsys):
    _, src, _ = table
    real_add = write.Writer.add

    def drop_last_row(self, frame):
        real_add(self, frame.slice(0, frame.height - 1) if frame.height == 2_000 else frame)

    monkeypatch.setattr(write.Writer, "add", drop_last_row)
    out = tmp_path / "out.parquet"
    code, err = _run(["anonymize", str(src), str(out), "--qi", QI_ARG, "--k", "4", "--chunk-rows", "2000",
                      "--no-progress"], capsys)
    assert code == 1 and "verification failed: the file holds 11,994 rows, the input 12,000" in err, err
    assert not out.exists() and _leftovers(tmp_path) == []


def test_identical_centroids_merge_into_one_class():
    """Groups that publish the same values are one class for a reader: fine, and counted so."""
    X = np.repeat(np.array([[1.0, 2.0], [5.0, 5.0]]), 9, axis=0)  # two sets of 9 duplicate rows
    res = engine.microaggregate(X, k=3)
    assert res.report.groups == 6
    assert res.report.verified == {"rows": 18, "classes": 2, "min_class_size": 9}
    assert res.table.group_by(["x0", "x1"]).len()["len"].min() == 9


def test_report_carries_the_verification(table, tmp_path):
    frame, src, _ = table
    rep = engine.anonymize(src, tmp_path / "o.parquet", qi=QI, k=5, block_size=3_000)
    independent = pl.read_parquet(tmp_path / "o.parquet").group_by(QI).len()["len"]
    assert rep.verified == {"rows": 12_000, "classes": independent.len(), "min_class_size": independent.min()}
    assert independent.min() >= 5


# --------------------------------------------------------------------- full disk, unwritable destination

def _enospc(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.parametrize("where", ["parquet-writer", "csv-writer", "spill", "rename", "report"])
def test_full_disk_is_a_one_line_error(table, tmp_path, monkeypatch, capsys, where):
    _, src, _ = table
    before = _fingerprint(src)
    fmt = "csv" if where == "csv-writer" else "parquet"
    out = tmp_path / f"out.{fmt}"
    extra = []
    if where == "parquet-writer":
        monkeypatch.setattr(pl.LazyFrame, "sink_parquet", _enospc)
    elif where == "csv-writer":
        monkeypatch.setattr(pl.DataFrame, "write_csv", _enospc)
    elif where == "spill":
        monkeypatch.setattr("engine.io.spill.private_opener", _enospc)
        extra = ["--block-size", "3000"]
    elif where == "rename":
        monkeypatch.setattr(os, "replace", _enospc)
    else:  # the output's rename succeeds, the report's fails: exit 2, the output is rolled back
        real = os.replace
        monkeypatch.setattr(os, "replace", lambda a, b: _enospc() if str(b).endswith(".json") else real(a, b))
        extra = ["--report", str(tmp_path / "report.json")]
    code, err = _run(["anonymize", str(src), str(out), "--qi", QI_ARG, "--k", "4", "--no-progress", "--quiet",
                      *extra], capsys)
    assert code == 2, err
    assert err.startswith("microagg: error: ") and len(err.splitlines()) == 1, err
    assert err.endswith("No space left on device"), err
    named = {"spill": str(tmp_path), "report": str(tmp_path / "report.json")}.get(where, str(out))
    assert named in err, err
    assert not out.exists()
    assert _leftovers(tmp_path) == []
    assert _fingerprint(src) == before


def test_full_disk_for_real(table, tmp_path, capsys):
    """A 64 KiB tmpfs (needs root and permission to mount; skipped otherwise)."""
    _, src, _ = table
    mnt = tmp_path / "small"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        before = _fingerprint(src)
        out = mnt / "out.parquet"
        code, err = _run(["anonymize", str(src), str(out), "--qi", QI_ARG, "--k", "4", "--no-progress"], capsys)
        assert code == 2 and err == f"microagg: error: cannot write {out}: No space left on device", err
        assert list(mnt.iterdir()) == []
        # spill folder on the full disk (--tmp-dir), output elsewhere
        out2 = tmp_path / "out2.parquet"
        big = tmp_path / "big.parquet"
        census_like(60_000, seed=2).write_parquet(big)
        code, err = _run(["anonymize", str(big), str(out2), "--qi", QI_ARG, "--k", "4", "--block-size", "5000",
                          "--tmp-dir", str(mnt), "--no-progress"], capsys)
        assert code == 2 and err.startswith(f"microagg: error: cannot write temporary data in {mnt}/"), err
        assert err.endswith("No space left on device") and len(err.splitlines()) == 1
        assert list(mnt.iterdir()) == [] and not out2.exists()
        assert _fingerprint(src) == before
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)


@pytest.mark.parametrize("case", ["missing folder", "under a file", "proc", "output is a folder", "tmp-dir missing"])
def test_unwritable_destination(table, tmp_path, capsys, case):
    _, src, _ = table
    (tmp_path / "file.txt").write_text("x")
    (tmp_path / "adir.parquet").mkdir()
    out, extra = {
        "missing folder": (tmp_path / "nope" / "out.parquet", []),
        "under a file": (tmp_path / "file.txt" / "out.parquet", []),
        "proc": (Path("/proc/microagg-test-out.parquet"), []),
        "output is a folder": (tmp_path / "adir.parquet", []),
        "tmp-dir missing": (tmp_path / "out.parquet", ["--tmp-dir", str(tmp_path / "no-tmp")]),
    }[case]
    message = {
        "missing folder": f"output folder does not exist: {tmp_path / 'nope'}",
        "under a file": f"output folder is not a folder: {tmp_path / 'file.txt'}",
        "proc": "cannot create a temporary file in /proc: ",
        "output is a folder": f"output is a folder: {tmp_path / 'adir.parquet'}",
        "tmp-dir missing": f"temporary folder does not exist: {tmp_path / 'no-tmp'}",
    }[case]
    code, err = _run(["anonymize", str(src), str(out), "--qi", QI_ARG, "--k", "4", "--no-progress", *extra], capsys)
    assert code == 2 and err.startswith(f"microagg: error: {message}") and len(err.splitlines()) == 1, err
    assert not (out.exists() and out.is_file())
    assert _leftovers(tmp_path) == []


def test_tmp_dir_on_another_file_system(table, tmp_path, capsys):
    """A rename cannot cross file systems: the output's temporary goes beside OUTPUT,
    the spill folder still to --tmp-dir (found a real bug: the run failed at the end)."""
    _, src, _ = table
    shm = Path("/dev/shm")
    if not shm.is_dir() or os.stat(shm).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("no second file system")
    import tempfile

    with tempfile.TemporaryDirectory(dir=shm) as other:
        out = tmp_path / "out.parquet"
        code, err = _run(["anonymize", str(src), str(out), "--qi", QI_ARG, "--k", "4", "--block-size", "3000",
                          "--tmp-dir", other, "--no-progress", "--quiet"], capsys)
        assert code == 0, err
        assert pl.read_parquet(out).height == 12_000
        assert os.listdir(other) == [] and _leftovers(tmp_path) == []


# --------------------------------------------------------------------- private temporaries, input untouched

def test_temporaries_are_private_and_the_input_is_not_locked(table, tmp_path, monkeypatch):
    """Modes seen while the run is in progress: spill folder 0700, its files (blocks,
    the on-disk label map) 0600, the output's temporary 0600 in --tmp-dir; the input can
    be locked by someone else meanwhile; the finished output gets the umask's mode."""
    _, src, _ = table
    seen = {}

    def input_unlocked():
        with open(src, "rb") as fh:  # flock: would fail if the engine held a lock on the input
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
        return True

    real_plan, real_stitch, real_write = coordinator.plan_budget, centroids.stitch_blocks, LocalExecutor.write_pass

    def plan_on_disk(*a, **kw):
        import dataclasses

        return dataclasses.replace(real_plan(*a, **kw), labels_on_disk=True)

    def stitch(store, *a, **kw):
        seen["spill"] = stat.S_IMODE(os.stat(store.path).st_mode)
        seen["spill_parent"] = store.path.parent
        seen["spill_files"] = {p.name: stat.S_IMODE(p.stat().st_mode) for p in store.path.iterdir()}
        seen["unlocked"] = input_unlocked()
        return real_stitch(store, *a, **kw)

    def write_pass(source, path, *a, **kw):
        seen["tmp"] = path
        seen["tmp_mode"] = stat.S_IMODE(os.stat(path).st_mode)
        seen["leftovers_during"] = _leftovers(tmp_path / "t")
        return real_write(source, path, *a, **kw)

    monkeypatch.setattr(coordinator, "plan_budget", plan_on_disk)
    monkeypatch.setattr(centroids, "stitch_blocks", stitch)
    monkeypatch.setattr(LocalExecutor, "write_pass", staticmethod(write_pass))  # (the write pass: the run's executor's)
    (tmp_path / "t").mkdir()
    out = tmp_path / "out.parquet"
    before = _fingerprint(src)
    old_umask = os.umask(0o022)
    try:
        # refine: so that the stitch pass reads the spilled blocks (the hook looks at them there)
        engine.anonymize(src, out, qi=QI, k=4, block_size=3_000, tmp_dir=tmp_path / "t", refine="local",
                         refine_rounds=1)
    finally:
        os.umask(old_umask)
    assert seen["spill"] == 0o700 and seen["spill_parent"] == tmp_path / "t"
    assert "labels.i32" in seen["spill_files"] and "runs.bin" in seen["spill_files"]
    assert set(seen["spill_files"].values()) == {0o600}, seen["spill_files"]
    assert seen["tmp_mode"] == 0o600 and Path(seen["tmp"]).parent == tmp_path / "t"
    name = Path(seen["tmp"]).name
    assert name.startswith(f".out.parquet.{os.getpid()}.{HOST_TAG}-") and name.endswith(TMP_SUFFIX)
    assert seen["unlocked"]
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o644
    assert _fingerprint(src) == before
    assert os.listdir(tmp_path / "t") == []


def test_replacing_an_output_keeps_its_mode(table, tmp_path):
    _, src, _ = table
    out = tmp_path / "out.csv"
    out.write_text("old")
    os.chmod(out, 0o640)
    engine.anonymize(src, out, qi=QI, k=4)
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o640 and pl.read_csv(out).height == 12_000


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_input_bytes_and_mtime_unchanged_after_success_and_failure(table, tmp_path, monkeypatch, fmt):
    _, pq_src, csv_src = table
    src = pq_src if fmt == "parquet" else csv_src
    before = _fingerprint(src)
    engine.anonymize(src, tmp_path / "ok.parquet", qi=QI, k=4, block_size=3_000)
    assert _fingerprint(src) == before
    monkeypatch.setattr(pl.LazyFrame, "sink_parquet", _enospc)
    with pytest.raises(EngineError, match="No space left on device"):
        engine.anonymize(src, tmp_path / "fail.parquet", qi=QI, k=4, block_size=3_000)
    assert _fingerprint(src) == before
    assert sorted(os.listdir(tmp_path)) == ["ok.parquet"]


# --------------------------------------------------------------------- stale temporaries of dead runs

def _dead_pid():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid  # reaped: no such process (unless the pid is reused at once, very unlikely)


def test_stale_cleanup_removes_only_dead_runs_files(tmp_path):
    dead, alive = _dead_pid(), os.getppid()
    names = {
        f".out.parquet.{dead}.{HOST_TAG}-abcd_123{TMP_SUFFIX}": False,       # dead run: removed
        f"{SPILL_PREFIX}{dead}.{HOST_TAG}-x1y2z3w4": False,                  # dead run's spill folder: removed
        f".out.parquet.{alive}.{HOST_TAG}-abcd_123{TMP_SUFFIX}": True,       # live process
        f".out.parquet.{os.getpid()}.{HOST_TAG}-abcd_123{TMP_SUFFIX}": True, # this process
        f".out.parquet.{dead}.0badc0de-abcd_123{TMP_SUFFIX}": True,          # another host's
        f".out.parquet.abcd_123{TMP_SUFFIX}": True,                          # old-style name, no owner
        f"{SPILL_PREFIX}abcd_123": True,
        f"out.parquet.{dead}.{HOST_TAG}-abcd_123{TMP_SUFFIX}.bak": True,     # not our pattern
        "data.parquet": True,
    }
    for name in names:
        p = tmp_path / name
        if SPILL_PREFIX in name:
            p.mkdir()
            (p / "block-000000.bin").write_bytes(b"x")
        else:
            p.write_bytes(b"x")
    # a symlink named like a dead run's spill folder, pointing elsewhere: not followed, kept
    target = tmp_path / "precious"
    target.mkdir()
    (target / "keep").write_text("x")
    link = tmp_path / f"{SPILL_PREFIX}{dead}.{HOST_TAG}-linklink"
    link.symlink_to(target)
    removed = clean_stale(tmp_path)
    assert sorted(Path(p).name for p in removed) == sorted(n for n, keep in names.items() if not keep)
    left = set(os.listdir(tmp_path))
    assert left == {n for n, keep in names.items() if keep} | {"precious", link.name}
    assert (target / "keep").exists()


def test_a_run_cleans_stale_temporaries_where_it_works(table, tmp_path):
    _, src, _ = table
    dead = _dead_pid()
    stale_tmp = tmp_path / f".out.parquet.{dead}.{HOST_TAG}-abcd_123{TMP_SUFFIX}"
    stale_tmp.write_bytes(b"half a file")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    stale_spill = scratch / f"{SPILL_PREFIX}{dead}.{HOST_TAG}-abcd_123"
    stale_spill.mkdir(mode=0o700)
    (stale_spill / "block-000000.bin").write_bytes(b"\0" * 1000)
    engine.anonymize(src, tmp_path / "out.parquet", qi=QI, k=4, block_size=3_000, tmp_dir=scratch)
    assert not stale_tmp.exists() and not stale_spill.exists()
    assert sorted(os.listdir(tmp_path)) == ["out.parquet", "scratch"] and os.listdir(scratch) == []


def test_owner_tag_names():
    assert tempfiles.TMP_FILE_RE.match(f".a.b.c.csv.123.{HOST_TAG}-zz_0a9b1{TMP_SUFFIX}")["pid"] == "123"
    assert tempfiles.SPILL_DIR_RE.match(f"{SPILL_PREFIX}77.{HOST_TAG}-abcdefgh")["pid"] == "77"


# --------------------------------------------------------------------- determinism

def test_byte_identical_across_processes_threads_chunks_and_tmp_dirs(table, tmp_path):
    """Fresh processes (different hash seeds and pids, so different temporary names),
    1 or 2 threads, different chunk sizes and temporary folders: the same bytes, for
    one exact block and for spilled blocks, Parquet and CSV."""
    _, src, csv_src = table
    runs = [("1", "1", "5000", "a"), ("2", "2", "1777", "b"), ("3", "2", "100000", "a")]
    for fmt, blocks in (("parquet", []), ("parquet", ["--block-size", "3000"]), ("csv", ["--block-size", "3000"])):
        outs = []
        for seed, threads, chunk, tmp in runs:
            (tmp_path / tmp).mkdir(exist_ok=True)
            out = tmp_path / f"out-{seed}.{fmt}"
            env = dict(os.environ, PYTHONHASHSEED=seed)
            proc = subprocess.run([sys.executable, "-m", "engine", "anonymize", str(src if seed != "3" else csv_src),
                                   str(out), "--qi", QI_ARG, "--k", "4", "--threads", threads, "--chunk-rows", chunk,
                                   "--tmp-dir", str(tmp_path / tmp), "--group-column", "g", "--quiet", *blocks],
                                  capture_output=True, text=True, env=env, cwd=ROOT)
            assert proc.returncode == 0, proc.stderr
            outs.append(out.read_bytes())
        assert outs[0] == outs[1] == outs[2], (fmt, blocks)


def test_parquet_footer_has_nothing_time_dependent(table, tmp_path):
    _, src, _ = table
    out = tmp_path / "out.parquet"
    engine.anonymize(src, out, qi=QI, k=4, group_column="g")
    md = pq.read_metadata(out)
    assert md.created_by.startswith("Polars (python) version ")  # the writer's version, no time
    assert set(md.metadata) == {b"ARROW:schema"}  # the Arrow schema only: no timestamps, paths, hosts
    schema = pq.read_schema(out)
    assert all(f.metadata is None for f in schema)
    blob = md.metadata[b"ARROW:schema"]
    import base64

    raw = base64.b64decode(blob)
    for needle in (str(tmp_path).encode(), os.uname().nodename.encode(), b"202", b"microagg-tmp"):
        assert needle not in raw
