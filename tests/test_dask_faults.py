"""--scheduler failures that are not the engine's (issue 28, items 9, 10, 11): an address
that is no Dask scheduler (an HTTP-ish server answering garbage, a server that accepts
and never answers, a Dask worker), a scheduler killed mid-run, a relative input path
with workers in other folders. Each is one line naming the address, exit 2, nothing
at OUTPUT. The servers are this test's own, on 127.0.0.1."""

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import polars as pl
import pytest

import engine
from engine import EngineError

distributed = pytest.importorskip("distributed")

pytestmark = pytest.mark.slow

QI = ["age", "education_years", "hours_per_week", "wage_income"]
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    from engine.synth import census_like

    path = tmp_path_factory.mktemp("dask-faults") / "in.parquet"
    census_like(40_000, seed=5).write_parquet(path, row_group_size=2_000)
    return path


@contextlib.contextmanager
def _server(answer: bytes | None):
    """A TCP server on 127.0.0.1: each connection gets ``answer`` (then closed), or, with
    None, is held open and never answered."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    held = []
    stop = threading.Event()

    def serve():
        srv.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            if answer is None:
                held.append(conn)
                continue
            with conn:
                conn.settimeout(1)
                with contextlib.suppress(OSError):
                    conn.recv(65536)
                    conn.sendall(answer)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield f"tcp://127.0.0.1:{srv.getsockname()[1]}"
    finally:
        stop.set()
        t.join()
        for c in held:
            c.close()
        srv.close()


def _cli(table, out, *extra, env=None, code=None):
    """``microagg anonymize`` in a child process (``code``: Python run first, in it)."""
    args = ["anonymize", str(table), str(out), "--qi", ",".join(QI), "--k", "5", "--quiet", *extra]
    prog = (code or "") + "\nimport sys, engine.cli\nsys.exit(engine.cli.main(sys.argv[1:]))"
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", prog, *args], capture_output=True, text=True, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=str(ROOT), **(env or {})), timeout=40)
    return proc, time.perf_counter() - t


def _one_line(proc, *words):
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-3000:]
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


def test_http_service_is_not_a_scheduler(table, tmp_path):
    """Was: internal error, MemoryError: Unable to allocate 3.07 EiB (the reply's
    "HTTP/1.1" read as a frame length)."""
    with _server(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 11\r\n\r\nBad Request") as address:
        proc, wall = _cli(table, tmp_path / "out.parquet", "--scheduler", address)
    line = _one_line(proc, address, "--scheduler", "not a Dask scheduler")
    assert "MemoryError" not in line and "EiB" not in line
    assert os.listdir(tmp_path) == [] and wall < 25


def test_silent_service_times_out(table, tmp_path):
    """Was: waited forever (the Client's handshake has no timeout). Now ANSWER_SECONDS
    (20 s by default; 1 s here)."""
    from engine.cluster import connect

    assert connect.CONNECT_SECONDS + connect.ANSWER_SECONDS <= 60
    with _server(None) as address:
        proc, wall = _cli(table, tmp_path / "out.parquet", "--scheduler", address,
                          code="import engine.cluster.connect as c; c.ANSWER_SECONDS = 1")
    _one_line(proc, address, "--scheduler", "did not answer")
    assert os.listdir(tmp_path) == [] and wall < 20


def test_probe_names_what_answers(tmp_path):
    """A Dask worker's address is not the scheduler's; a scheduler answers."""
    from engine.cluster import connect

    with distributed.LocalCluster(n_workers=1, processes=False, threads_per_worker=1, dashboard_address=":0",
                                  protocol="tcp://", host="127.0.0.1") as c:
        connect.probe(c.scheduler_address)
        worker = next(iter(c.scheduler.workers))
        with pytest.raises(EngineError, match=rf"^{worker} \(--scheduler\) is a Dask worker, not a scheduler"):
            connect.probe(worker)
    with _server(None) as address, pytest.raises(EngineError, match="did not answer"):
        t = time.perf_counter()
        connect.probe(address, answer_seconds=0.5)
    assert time.perf_counter() - t < 5


def _start_scheduler(tmp_path):
    """A Dask scheduler and one worker in child processes (killed by the caller)."""
    info = tmp_path / "scheduler.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    bin_dir = Path(sys.executable).parent
    dask = [str(bin_dir / "dask")] if (bin_dir / "dask").exists() else [sys.executable, "-m", "distributed.cli.dask_scheduler"]
    sched = subprocess.Popen(dask + ["scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                                     "--scheduler-file", str(info)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True)
    deadline = time.monotonic() + 30
    while not info.exists() or not info.read_text().strip().endswith("}"):
        assert time.monotonic() < deadline and sched.poll() is None, "the scheduler did not start"
        time.sleep(0.1)
    address = json.loads(info.read_text())["address"]
    worker = subprocess.Popen(dask + ["worker", address, "--nthreads", "1", "--no-dashboard", "--no-nanny",
                                      "--local-directory", str(tmp_path / "w")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=tmp_path / "w",
                              start_new_session=True)
    return address, sched, worker


def test_scheduler_killed_mid_run(table, tmp_path):
    """Was: internal error, FutureCancelledError, with an asyncio traceback logged. The
    scheduler is killed after the first aggregate task's result: the client gives up
    reconnecting after CONNECT_SECONDS; one line naming the address, exit 2, nothing at
    OUTPUT, the run's folder removed."""
    (tmp_path / "w").mkdir()
    (tmp_path / "t").mkdir()
    out = tmp_path / "out" / "out.parquet"
    out.parent.mkdir()
    address, sched, worker = _start_scheduler(tmp_path)
    try:
        code = (f"import functools, os, signal, engine.cluster as c\n"  # (the hook passed in: on_event)
                f"c.open_executor = functools.partial(c.open_executor, on_event=lambda e, client: "
                f"e == 'aggregate' and os.kill({sched.pid}, signal.SIGKILL))")
        proc, wall = _cli(table, out, "--scheduler", address, "--block-size", "5000", "--polish-rounds", "0",
                          "--tmp-dir", str(tmp_path / "t"), code=code)
    finally:
        for p in (sched, worker):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=30)
    _one_line(proc, f"lost the Dask scheduler at {address} (--scheduler)")
    assert "Traceback" not in proc.stderr
    assert os.listdir(out.parent) == [] and os.listdir(tmp_path / "t") == []
    assert wall < 25


def test_relative_input_path(table, tmp_path, monkeypatch):
    """Was: "Failed to open local file" (the workers run in other folders). The input,
    OUTPUT and --tmp-dir given relative to the client's folder."""
    work = tmp_path / "client"
    (work / "t").mkdir(parents=True)
    (work / "in.parquet").write_bytes(table.read_bytes())
    with distributed.LocalCluster(n_workers=1, processes=True, threads_per_worker=1, dashboard_address=":0") as c, \
            distributed.Client(c, set_as_default=False) as client:
        assert client.run(os.getcwd) != {} and all(d != str(work) for d in client.run(os.getcwd).values())
        monkeypatch.chdir(work)
        rep = engine.anonymize("in.parquet", "out.parquet", QI, k=5, block_size=5_000, polish_rounds=0,
                               tmp_dir="t", scheduler=client)
    assert rep.rows == 40_000
    local = engine.anonymize("in.parquet", "local.parquet", QI, k=5, block_size=5_000, polish_rounds=0)
    assert local.groups == rep.groups
    assert (work / "out.parquet").read_bytes() == (work / "local.parquet").read_bytes()
    assert os.listdir(work / "t") == []
    assert pl.read_parquet(work / "out.parquet").height == 40_000
