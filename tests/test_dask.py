"""The streamed passes on Dask (engine.cluster): the same output as the single-machine
run, a worker killed mid-run, an unreachable scheduler, temporary files removed."""

import functools
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import engine
from engine import EngineError

distributed = pytest.importorskip("distributed")

pytestmark = pytest.mark.slow

QI = ["age", "education_years", "hours_per_week", "wage_income", "other_income", "property_tax",
      "household_size", "commute_minutes"]
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def client():
    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=":0") as c, \
            distributed.Client(c, set_as_default=False) as cl:
        yield cl


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    """60,000 census-like rows in 60 row groups (the row-group sample plans the blocks)."""
    from engine.synth import census_like

    path = tmp_path_factory.mktemp("dask") / "in.parquet"
    census_like(60_000, seed=3).write_parquet(path, row_group_size=1_000)
    return path


def _worker_spills(dask_worker):
    """The spill folders of this worker's process in its local directory."""
    return [p for p in os.listdir(dask_worker.local_directory) if p.startswith(f".microagg-spill-{os.getpid()}.")]


def _run(src, out, tmp, **kw):
    tmp.mkdir(exist_ok=True)
    rep = engine.anonymize(src, out, QI, k=5, block_size=5_000, tmp_dir=tmp, **kw)
    assert os.listdir(tmp) == []  # the client's folder (a part on its way into OUTPUT) removed
    if "scheduler" in kw:  # and each worker's own temporary files (block stores, parts)
        assert all(v == [] for v in kw["scheduler"].run(_worker_spills).values())
    return rep


@pytest.mark.parametrize("opts", [
    {},  # polished units and seams (up to 2M rows): standardized rows travel to the client
    {"polish_rounds": 0, "group_column": "g"},  # the fast path: workers measure the squared errors
    {"polish_rounds": 0, "refine": "local", "refine_rounds": 2, "leaf_size": 0},  # refinement on the client
    {"method": "ama", "polish_rounds": 0},  # key attributes chosen on the client, grouped on the workers
])
def test_same_output_as_single_machine(client, table, tmp_path, opts):
    local = _run(table, tmp_path / "local.parquet", tmp_path / "t1", **opts)
    dask = _run(table, tmp_path / "dask.parquet", tmp_path / "t2", scheduler=client, **opts)
    a, b = pl.read_parquet(tmp_path / "local.parquet"), pl.read_parquet(tmp_path / "dask.parquet")
    assert a.equals(b)
    assert (tmp_path / "local.parquet").read_bytes() == (tmp_path / "dask.parquet").read_bytes()
    assert local.blocks == dask.blocks > 1 and local.groups == dask.groups
    assert dask.verified == local.verified
    assert dask.information_loss_percent == pytest.approx(local.information_loss_percent, rel=1e-12)


def test_folder_output(client, table, tmp_path):
    """OUTPUT ending in '/': a folder of Parquet parts, rows in input order across them,
    the values of the single-file run; committed with the report."""
    _run(table, tmp_path / "local.parquet", tmp_path / "t1", polish_rounds=0)
    out = tmp_path / "parts"
    rep = _run(table, str(out) + "/", tmp_path / "t2", polish_rounds=0, scheduler=client,
               report=tmp_path / "r.json")
    parts = sorted(out.iterdir())
    assert len(parts) >= 2 and all(p.name.startswith("part-") and p.suffix == ".parquet" for p in parts)
    assert pl.read_parquet(parts).equals(pl.read_parquet(tmp_path / "local.parquet"))
    assert rep.verified["rows"] == 60_000 and (tmp_path / "r.json").exists()
    with pytest.raises(EngineError, match="already exists and is not an empty folder"):
        engine.anonymize(table, str(out) + "/", QI, k=5, scheduler=client)
    with pytest.raises(EngineError, match="written by --scheduler runs only"):
        engine.anonymize(table, str(tmp_path / "other") + "/", QI, k=5)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["local.parquet", "parts", "r.json", "t1", "t2"]


def test_profile_pass_path(client, tmp_path):
    """Fewer than 32 row groups: pass 1 on the client, then the partition tasks."""
    from engine.synth import census_like

    src = tmp_path / "few.parquet"
    census_like(30_000, seed=4).write_parquet(src, row_group_size=3_000)
    _run(src, tmp_path / "local.parquet", tmp_path / "t1", polish_rounds=0)
    _run(src, tmp_path / "dask.parquet", tmp_path / "t2", polish_rounds=0, scheduler=client)
    assert (tmp_path / "local.parquet").read_bytes() == (tmp_path / "dask.parquet").read_bytes()


def test_worker_killed_mid_run(client, table, tmp_path, monkeypatch):
    """A worker's process dies after the first unit's result (tasks still running and
    queued, slabs and results held on it): Dask computes its slabs again (their
    partition tasks) and runs its tasks again; the output is complete and identical."""
    from engine import cluster

    _run(table, tmp_path / "local.parquet", tmp_path / "t1", polish_rounds=0)
    killed = []

    def kill(cl):
        victim = sorted(cl.scheduler_info()["workers"])[0]
        pid = cl.run(os.getpid, workers=[victim])[victim]
        held = cl.has_what(workers=[victim])[victim]  # results on it (lost with it)
        busy = cl.processing(workers=[victim])[victim]  # tasks it runs or will run
        assert held or busy
        os.kill(pid, signal.SIGKILL)  # the worker's process, as an OOM killer or a lost machine would
        killed.append((victim, pid))

    monkeypatch.setattr(cluster, "open_executor",  # (the hook passed in: engine.cluster.DaskExecutor's on_event)
                        functools.partial(cluster.open_executor, on_event=lambda e, cl: e == "aggregate" and kill(cl)))
    _run(table, tmp_path / "dask.parquet", tmp_path / "t2", polish_rounds=0, scheduler=client)
    assert killed
    victim, pid = killed[0]
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert (tmp_path / "local.parquet").read_bytes() == (tmp_path / "dask.parquet").read_bytes()
    client.wait_for_workers(2, timeout=60)  # the nanny started a new one
    assert victim not in client.scheduler_info()["workers"]


def test_cli_scheduler_address(client, table, tmp_path):
    out = tmp_path / "cli.parquet"
    (tmp_path / "t").mkdir()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    base = [sys.executable, "-m", "engine.cli", "anonymize", str(table)]
    opts = ["--qi", ",".join(QI), "--k", "5", "--block-size", "5000", "--polish-rounds", "0", "--quiet",
            "--tmp-dir", str(tmp_path / "t")]
    subprocess.run(base + [str(tmp_path / "local.parquet")] + opts, check=True, env=env, cwd=ROOT)
    proc = subprocess.run(base + [str(out)] + opts + ["--scheduler", client.scheduler.address], env=env, cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert out.read_bytes() == (tmp_path / "local.parquet").read_bytes()
    assert os.listdir(tmp_path / "t") == []


def test_cli_scheduler_local_to_a_folder(table, tmp_path):
    """--scheduler local: a LocalCluster of this machine (workers with --memory-limit),
    started and closed by the run; a folder OUTPUT with the single-machine run's values."""
    (tmp_path / "t").mkdir()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    base = [sys.executable, "-m", "engine.cli", "anonymize", str(table)]
    opts = ["--qi", ",".join(QI), "--k", "5", "--block-size", "5000", "--quiet", "--tmp-dir", str(tmp_path / "t"),
            "--memory-limit", "1GiB"]
    subprocess.run(base + [str(tmp_path / "local.parquet")] + opts, check=True, env=env, cwd=ROOT)
    proc = subprocess.run(base + [str(tmp_path / "out") + "/"] + opts + ["--scheduler", "local"],
                          env=env, cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    parts = sorted((tmp_path / "out").iterdir())
    assert parts and pl.read_parquet(parts).equals(pl.read_parquet(tmp_path / "local.parquet"))
    assert os.listdir(tmp_path / "t") == []


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_scheduler(table, tmp_path):
    out = tmp_path / "out.parquet"
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "engine.cli", "anonymize", str(table), str(out), "--qi", ",".join(QI),
                           "--scheduler", f"tcp://127.0.0.1:{_free_port()}"], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd=ROOT)
    wall = time.perf_counter() - t
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot reach the Dask scheduler" in lines[0] and "--scheduler" in lines[0], proc.stderr
    assert os.listdir(tmp_path) == []  # nothing at OUTPUT, no temporary file
    assert wall < 20


def test_refused(client, table, tmp_path):
    with pytest.raises(EngineError, match=r"scheduler \(--scheduler\) does not apply to method maxent"):
        engine.anonymize(table, tmp_path / "o.parquet", ["age"], k=5, method="maxent", sa="occupation",
                         scheduler=client)
    csv = tmp_path / "in.csv"
    pl.read_parquet(table).head(100).write_csv(csv)
    with pytest.raises(EngineError, match="reads Parquet files on the workers"):
        engine.anonymize(csv, tmp_path / "o.parquet", QI, k=5, scheduler=client)
    with pytest.raises(EngineError, match="writes a Parquet OUTPUT"):
        engine.anonymize(table, tmp_path / "o.csv", QI, k=5, scheduler=client)
    # (mixed-type QIs, --ordinal and --weights run on Dask: tests/test_dask_mixed.py)
    assert sorted(os.listdir(tmp_path)) == ["in.csv"]
