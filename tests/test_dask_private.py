"""Dask workers that share no folder with the client (issue 31, part 4): the outputs are
the single-machine run's, byte for byte.

How a worker is kept out of the client's temporary folder (``--tmp-dir``): each worker
(its nanny and the process the nanny starts, also after a restart) runs in a user and
mount namespace of its own (``unshare -Urm``) in which the client's folder is covered
by an empty, read-only tmpfs. A worker that looked for a file the client wrote there
finds nothing, and one that wrote there gets EROFS, whatever library does it (Python,
pyarrow, Polars); so a run that moved any data through that folder fails. Each worker's
own ``--local-directory`` and ``TMPDIR`` are a folder of its own. Beside this, a
``sitecustomize`` on the workers' path installs an audit hook (``sys.addaudithook``)
that records every Python-level open, listing, creation, rename or removal of a path
under the client's folder; the tests assert it recorded none (and, first, that it
records a worker's attempt). Skipped where ``unshare`` cannot make those namespaces."""

import contextlib
import functools
import logging
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import engine

distributed = pytest.importorskip("distributed")

pytestmark = pytest.mark.slow

QI = ["age", "education_years", "hours_per_week", "wage_income", "other_income", "property_tax",
      "household_size", "commute_minutes"]
ROOT = Path(__file__).resolve().parents[1]
COVER = 'mount -t tmpfs -o ro,size=64k none "$0" && exec "$@"'  # (sh -c: $0 the client's folder)

AUDIT = '''"""tests/test_dask_private.py: records this process's Python-level access to paths
under MICROAGG_TEST_HIDDEN, one line each, in the file MICROAGG_TEST_AUDIT."""
import os
import sys

_HIDDEN = os.environ.get("MICROAGG_TEST_HIDDEN")
_LOG = os.environ.get("MICROAGG_TEST_AUDIT")
_EVENTS = {"open", "os.listdir", "os.scandir", "os.mkdir", "os.rename", "os.remove", "os.rmdir", "os.truncate",
           "os.chmod", "os.utime", "os.link", "os.symlink", "shutil.rmtree", "shutil.copyfile", "shutil.move"}
_busy = []


def _audit(event, args):
    if event not in _EVENTS or _busy:
        return
    for a in args[:2]:
        if isinstance(a, (str, bytes, os.PathLike)):
            path = os.path.abspath(os.fsdecode(a))
            if path == _HIDDEN or path.startswith(_HIDDEN + os.sep):
                _busy.append(1)
                try:
                    with open(_LOG, "a") as fh:
                        fh.write(f"{event} {path}\\n")
                finally:
                    _busy.pop()


if _HIDDEN and _LOG:
    sys.addaudithook(_audit)
'''


def _can_cover(folder: Path) -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-Urm", "sh", "-c", COVER, str(folder), "true"], capture_output=True)
    return probe.returncode == 0


@pytest.fixture(scope="module")
def private(tmp_path_factory):
    """``(client, the client's folder, the workers' own folders)``: a scheduler in this
    process, two workers (1 thread each) in namespaces of their own (module docstring)."""
    base = tmp_path_factory.mktemp("private")
    hidden = base / "client-tmp"
    hidden.mkdir()
    if not _can_cover(hidden):
        pytest.skip("unshare cannot make a user and mount namespace here")
    site = base / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(AUDIT)
    bin_dir = Path(sys.executable).parent
    dask = [str(bin_dir / "dask")] if (bin_dir / "dask").exists() else [sys.executable, "-m", "distributed.cli.dask"]
    procs, own = [], []
    with distributed.LocalCluster(n_workers=0, processes=False, host="127.0.0.1", protocol="tcp://",
                                  dashboard_address=":0") as cluster:
        try:
            for i in range(2):
                own.append(base / f"worker-{i}")
                own[-1].mkdir()
                env = dict(os.environ, TMPDIR=str(own[-1]), PYTHONPATH=os.pathsep.join([str(site), str(ROOT)]),
                           MICROAGG_TEST_HIDDEN=str(hidden), MICROAGG_TEST_AUDIT=str(own[-1] / "audit.log"))
                procs.append(subprocess.Popen(
                    ["unshare", "-Urm", "sh", "-c", COVER, str(hidden), *dask, "worker", cluster.scheduler_address,
                     "--nthreads", "1", "--memory-limit", "2GiB", "--local-directory", str(own[-1]),
                     "--no-dashboard", "--host", "127.0.0.1", "--name", f"private-{i}"],
                    env=env, cwd=own[-1], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                    start_new_session=True))
            with distributed.Client(cluster.scheduler_address, set_as_default=False) as client:
                client.wait_for_workers(2, timeout=120)
                yield client, hidden, own
        finally:
            for p in procs:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=30)


def _audited(own) -> list[str]:
    return [line for w in own if (w / "audit.log").exists() for line in (w / "audit.log").read_text().splitlines()]


@pytest.fixture(scope="module")
def table(private):
    """60,000 census-like rows in 60 row groups, with a Date and a Datetime column."""
    path = private[1].parent / "data" / "in.parquet"
    path.parent.mkdir()
    from engine.synth import census_like

    df = census_like(60_000, seed=3)
    rng = np.random.default_rng(3)
    days = rng.integers(10_000, 13_000, df.height)
    seconds = days * 86_400 + rng.integers(0, 86_400, df.height)
    df.with_columns(pl.Series("day", days, dtype=pl.Int32).cast(pl.Date),
                    pl.Series("when", seconds * 1_000_000).cast(pl.Datetime("us"))
                    ).write_parquet(path, row_group_size=1_000)
    return path


def test_workers_cannot_see_the_clients_folder(private):
    """The harness itself: a file the client writes in its folder is not there for a
    worker, a worker cannot write there, and the audit hook records the attempt."""
    client, hidden, own = private
    (hidden / "probe").write_text("the client's")
    try:
        assert list(client.run(os.path.exists, str(hidden / "probe")).values()) == [False, False]
        with pytest.raises(OSError):
            client.run(os.mkdir, str(hidden / "from-a-worker"))
        assert any("os.mkdir" in line and "from-a-worker" in line for line in _audited(own))
        assert not (hidden / "from-a-worker").exists()
    finally:
        (hidden / "probe").unlink()
        for w in own:
            (w / "audit.log").unlink(missing_ok=True)


def _run(src, out, tmp, qi=QI, **kw):
    return engine.anonymize(src, out, qi, k=5, block_size=5_000, tmp_dir=tmp, **kw)


def _same(private, table, tmp_path, qi=QI, folder=False, **opts):
    """The Dask run (the client's folder: the hidden one) against the local run."""
    client, hidden, own = private
    local = _run(table, tmp_path / "local.parquet", tmp_path, qi, **opts)
    out = str(tmp_path / "parts") + "/" if folder else tmp_path / "dask.parquet"
    dask = _run(table, out, hidden, qi, scheduler=client, **opts)
    if folder:
        parts = sorted((tmp_path / "parts").iterdir())
        assert pl.read_parquet(parts).equals(pl.read_parquet(tmp_path / "local.parquet"))
    else:
        assert (tmp_path / "local.parquet").read_bytes() == (tmp_path / "dask.parquet").read_bytes()
    assert local.groups == dask.groups and dask.verified == local.verified
    assert os.listdir(hidden) == []  # the client's own folder, cleaned
    assert _audited(own) == []  # no worker touched it
    return local, dask


@pytest.mark.parametrize("opts", [
    {},  # polished units and seams: the stitch gathers the slabs to the client
    {"polish_rounds": 0, "group_column": "g"},  # the fast path: slabs released as the tasks end
    {"polish_rounds": 0, "refine": "local", "refine_rounds": 1, "leaf_size": 0},  # refinement reads on the client
])
@pytest.mark.parametrize("small", [False, True])
def test_same_output(private, table, tmp_path, monkeypatch, opts, small):
    """``small``: tasks of at most 200 kB of data (``backend.MAX_TASK_BYTES``): more
    partition and write tasks than workers, aggregate tasks over several slabs."""
    from engine.cluster import backend

    if small:
        monkeypatch.setattr(backend, "MAX_TASK_BYTES", 200_000)
    _same(private, table, tmp_path, **opts)


def test_mixed_types_and_a_folder_output(private, table, tmp_path, monkeypatch):
    """Mixed-type QIs (a String, a Date and a Datetime QI: the publisher's table and the
    exact means sent by range) into a folder OUTPUT, with a group column."""
    from engine.cluster import backend

    monkeypatch.setattr(backend, "MAX_TASK_BYTES", 200_000)
    qi = ["age", "wage_income", "occupation", "day", "when"]
    local, dask = _same(private, table, tmp_path, qi, folder=True, polish_rounds=0, group_column="g")
    assert dask.information_loss_by_qi == local.information_loss_by_qi


@pytest.mark.parametrize("when", ["aggregate", "write"])
def test_worker_killed(private, table, tmp_path, monkeypatch, caplog, when):
    """A worker's process dies (SIGKILL) after the first aggregate task's results, or
    once the first write tasks are submitted (their data scattered to it): Dask
    computes its slabs again (the partition task, from its input range); a write task
    whose data was lost is sent again by the client. The output is the local run's."""
    from engine import cluster
    from engine.cluster import backend

    client, hidden, own = private
    monkeypatch.setattr(backend, "MAX_TASK_BYTES", 200_000)
    killed = []

    def kill(cl):
        held = cl.has_what()
        victim = max(held, key=lambda w: (len(held[w]), w))  # (the one holding the most: slabs or write data)
        pid = cl.run(os.getpid, workers=[victim])[victim]
        os.kill(pid, signal.SIGKILL)
        killed.append(victim)

    monkeypatch.setattr(cluster, "open_executor",  # (the hook passed in: engine.cluster.DaskExecutor's on_event)
                        functools.partial(cluster.open_executor, on_event=lambda e, cl: e == when and kill(cl)))
    with caplog.at_level(logging.INFO, logger="engine"):
        _same(private, table, tmp_path, polish_rounds=0)
    assert killed
    if when == "write":
        assert "sent again" in caplog.text
    client.wait_for_workers(2, timeout=120)  # the nanny started a new one, in the same namespace
    assert killed[0] not in client.scheduler_info()["workers"]
