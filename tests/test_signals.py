"""SIGINT, SIGTERM and SIGKILL sent to a real ``microagg anonymize`` process.

The run is a 200,000-row Parquet table cut into blocks of 20,000 rows (so it spills;
500,000 rows for the risk step, so that it takes seconds), started with ``--progress``: the signal is sent when the progress line names the
pass, so each pass is hit deterministically (a pass shorter than the signal's
delivery may end first; the test then still checks the outcome, and the run
cannot have finished: the write pass is the last and it is long enough).
"""

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

from engine.io.tempfiles import HOST_TAG, SPILL_PREFIX, TMP_SUFFIX
from engine.synth import NUMERIC_QI, census_like

pytestmark = pytest.mark.slow  # end-to-end: run with -m slow (left out by default; CI runs it)

ROOT = Path(__file__).resolve().parents[1]
QI_ARG = ",".join(NUMERIC_QI)


def _table(tmp_path_factory, rows):
    path = tmp_path_factory.mktemp("signals-in") / "in.parquet"
    census_like(rows, seed=3).write_parquet(path, row_group_size=50_000)
    return path


@pytest.fixture(scope="module")
def mid(tmp_path_factory):
    return _table(tmp_path_factory, 200_000)


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    return _table(tmp_path_factory, 500_000)


def _start(src, out, tmp_dir, *extra):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.Popen([sys.executable, "-m", "engine", "anonymize", str(src), str(out), "--qi", QI_ARG,
                             "--k", "5", "--block-size", "20000", "--chunk-rows", "50000", "--tmp-dir",
                             str(tmp_dir), "--progress", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT, env=env)


def _wait_for_pass(proc, name, timeout=120.0):
    """Read the child's stderr until its progress line names the pass ``name``."""
    want = f"\r{name:<10} [".encode()
    buf = b""
    fd = proc.stderr.fileno()
    deadline = time.monotonic() + timeout
    while want not in buf:
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"pass {name!r} not seen in {timeout} s: {buf[-500:]!r}")
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                pytest.fail(f"the run ended before pass {name!r}: {buf[-2000:]!r}")
            buf += chunk
    return buf


def _ours(*folders):
    return sorted(p.name for f in folders for p in Path(f).iterdir() if "microagg" in p.name)


# (pass, extra options): without refinement the workers also sum the groups, so there
# is no stitch pass; a refinement capped at 50 ms reaches it quickly
REFINE = ["--refine", "local"]
PASSES = [("profile", []), ("partition", []), ("aggregate", []), ("refine", REFINE),
          ("stitch", REFINE + ["--refine-budget", "0.05"]), ("write", [])]


@pytest.mark.parametrize("sig,code,passes", [
    (signal.SIGTERM, 143, PASSES),
    (signal.SIGINT, 130, [("partition", []), ("write", [])]),
], ids=["SIGTERM", "SIGINT"])
def test_signal_at_each_pass_leaves_nothing(mid, tmp_path, sig, code, passes):
    """One run per pass, side by side; each gets the signal when its pass shows."""
    big = mid
    before = (os.stat(big).st_mtime_ns, os.stat(big).st_size)
    runs = []
    for name, extra in passes:
        out_dir, tmp_dir = tmp_path / f"out-{name}", tmp_path / f"tmp-{name}"
        out_dir.mkdir()
        tmp_dir.mkdir()
        runs.append({"name": name, "out_dir": out_dir, "tmp_dir": tmp_dir, "out": out_dir / "out.parquet",
                     "proc": _start(big, out_dir / "out.parquet", tmp_dir, *extra), "buf": b"", "sent": None,
                     "exited": None})
    deadline = time.monotonic() + 240

    def note_exits():
        for r in runs:
            if r["sent"] is not None and r["exited"] is None and r["proc"].poll() is not None:
                r["exited"] = time.monotonic()

    while any(r["sent"] is None for r in runs):
        assert time.monotonic() < deadline, [(r["name"], r["buf"][-300:]) for r in runs if r["sent"] is None]
        note_exits()
        waiting = {r["proc"].stderr.fileno(): r for r in runs if r["sent"] is None}
        ready, _, _ = select.select(list(waiting), [], [], 0.05)
        for fd in ready:
            r = waiting[fd]
            chunk = os.read(fd, 65536)
            assert chunk, f"the run ended before pass {r['name']!r}: {r['buf'][-2000:]!r}"
            r["buf"] += chunk
            if f"\r{r['name']:<10} [".encode() in r["buf"]:
                if r["name"] in ("partition", "aggregate", "refine", "stitch"):  # the spill folder exists now
                    assert [n for n in _ours(r["tmp_dir"]) if n.startswith(SPILL_PREFIX)], r["name"]
                r["proc"].send_signal(sig)
                r["sent"] = time.monotonic()
    while any(r["exited"] is None for r in runs):  # the time from the signal to the exit
        note_exits()
        time.sleep(0.02)
        assert time.monotonic() < deadline + 60
    for r in runs:
        name, proc = r["name"], r["proc"]
        _, err = proc.communicate(timeout=60)
        err = err.decode()
        assert proc.returncode == code, (name, proc.returncode, err[-1000:])
        assert "no partial output left" in err.splitlines()[-1], err[-500:]
        assert "Traceback" not in err
        latency = r["exited"] - r["sent"]
        assert latency < 15, f"{name}: {latency:.1f} s from the signal to the exit"
        assert not r["out"].exists(), name
        assert os.listdir(r["out_dir"]) == [] and os.listdir(r["tmp_dir"]) == [], \
            (name, _ours(r["out_dir"], r["tmp_dir"]))
    assert (os.stat(big).st_mtime_ns, os.stat(big).st_size) == before


def test_sigkill_leaves_nothing_at_output_and_the_next_run_cleans_up(mid, tmp_path):
    big = mid
    out_dir, tmp_dir = tmp_path / "out", tmp_path / "tmp"
    out_dir.mkdir()
    tmp_dir.mkdir()
    out = out_dir / "out.parquet"
    pids = []
    for name in ("aggregate", "write"):  # a spill folder, then also the output's temporary file
        proc = _start(big, out, tmp_dir)
        pids.append(proc.pid)
        _wait_for_pass(proc, name)
        proc.kill()
        proc.wait(timeout=30)
        assert proc.returncode == -signal.SIGKILL
        assert not out.exists()
        stale = _ours(out_dir, tmp_dir)
        # the killed run's spill folder stays (killed in the write pass, the run may have
        # removed it already: the blocks are discarded before that pass); the second run
        # removed the first run's
        spill = [n for n in stale if n.startswith(SPILL_PREFIX)]
        assert spill == [n for n in stale if n.startswith(f"{SPILL_PREFIX}{proc.pid}.{HOST_TAG}-")], stale
        assert spill != [] or name == "write", stale
    assert any(n.startswith(f".out.parquet.{pids[1]}.{HOST_TAG}-") and n.endswith(TMP_SUFFIX) for n in stale), stale
    # the next run (a small table, same folders) removes the dead runs' temporaries and succeeds
    small = tmp_path / "small.parquet"
    census_like(30_000, seed=4).write_parquet(small)
    proc = subprocess.run([sys.executable, "-m", "engine", "anonymize", str(small), str(out), "--qi", QI_ARG,
                           "--k", "5", "--block-size", "20000", "--tmp-dir", str(tmp_dir), "--quiet"],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert pl.read_parquet(out).height == 30_000
    assert os.listdir(out_dir) == ["out.parquet"] and os.listdir(tmp_dir) == []


@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)], ids=["SIGTERM", "SIGINT"])
def test_signal_during_risk_leaves_nothing(big, tmp_path, sig, code):
    """--risk runs after the write pass, on the temporary output, before the commit: a
    signal then (in the kd-tree kernels, say) exits 130/143 with no OUTPUT and no
    report, and no 'internal error: SystemError' (issue 14, defect 6)."""
    out_dir, tmp_dir = tmp_path / "out", tmp_path / "tmp"
    out_dir.mkdir()
    tmp_dir.mkdir()
    out, report = out_dir / "out.parquet", out_dir / "report.json"
    before = (os.stat(big).st_mtime_ns, os.stat(big).st_size)
    proc = _start(big, out, tmp_dir, "--risk", "--report", str(report))
    buf = _wait_for_pass(proc, "write")
    fd = proc.stderr.fileno()
    deadline = time.monotonic() + 120
    while not buf.rstrip(b" ").endswith(b"\n"):  # the write pass's bar ends with a new line
        assert time.monotonic() < deadline and proc.poll() is None, buf[-500:]
        ready, _, _ = select.select([fd], [], [], 0.05)
        if ready:
            buf += os.read(fd, 65536)
    time.sleep(0.3)  # into the risk step (it takes seconds on this table)
    proc.send_signal(sig)
    sent = time.monotonic()
    _, err = proc.communicate(timeout=120)
    latency = time.monotonic() - sent  # its kernels run on a thread of their own (parallel.interruptible)
    err = (buf + err).decode()
    assert proc.returncode == code, (proc.returncode, err[-1000:])
    assert "no partial output left" in err.splitlines()[-1], err[-500:]
    assert "Traceback" not in err and "internal error" not in err, err[-1000:]
    assert not out.exists() and not report.exists()
    assert os.listdir(out_dir) == [] and os.listdir(tmp_dir) == [], _ours(out_dir, tmp_dir)
    assert (os.stat(big).st_mtime_ns, os.stat(big).st_size) == before
    assert latency < 2.0, f"{latency:.1f} s from the signal to the exit"


_SPIN = r'''
import signal, sys, time
import numpy as np
from numba import njit
from engine.parallel import interruptible

@njit(nogil=True)
def spin(n):
    x = 1.0
    for i in range(n):
        x = x * 1.0000001 + 1e-9
    return x

spin(10)
t = time.perf_counter(); spin(10_000_000); per = (time.perf_counter() - t) / 10_000_000
n = int(2.5 / max(per, 1e-12))  # about 2.5 s of one kernel call
print("ready", flush=True)
try:
    interruptible(spin, n) if sys.argv[1] == "thread" else spin(n)
except KeyboardInterrupt:
    sys.exit(130)
sys.exit(0)
'''


@pytest.mark.parametrize("mode", ["direct", "thread"])
def test_a_long_kernel_on_its_own_thread_is_interrupted_at_once(mode):
    """Issue 28, item 13: a signal during a Numba kernel waits for it to return (the
    risk step's kd-tree build and queries: up to 18 s at 3M rows); run by
    ``parallel.interruptible`` (as the risk step now does) the caller gets the
    interrupt at once."""
    proc = subprocess.Popen([sys.executable, "-c", _SPIN, mode], stdout=subprocess.PIPE, cwd=ROOT)
    assert proc.stdout.readline().strip() == b"ready"
    time.sleep(0.5)
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=60)
    latency = time.monotonic() - sent
    assert proc.returncode == 130
    if mode == "thread":
        assert latency < 1.0, latency
    else:  # (what the risk step did: the kernel's remaining seconds)
        assert latency > 1.0, latency
