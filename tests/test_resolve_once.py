"""A run is its plan, run; the input is resolved once; the passes call one executor (issue 43).

* Following ``source`` from ``engine.anonymize`` (with the options that used to resolve
  it again: a memory limit's CSV check, the risk step, a report), the functions that
  resolve an input path (``io.locate.expand_path``, ``io.remote.expand``, the kind of
  each file) are entered once: every other step takes the ``io.locate.Located``.
* ``coordinator.run`` is ``coordinator.plan(..., runnable=True)`` then ``run_plan``; a plan
  runs once, a describing plan (``engine.plan``) does not run, and a plan whose input
  changed since it was made is refused.
* The passes call the run's ``passes.executor.Executor`` (this machine's here).

``python tests/test_resolve_once.py`` prints the calls it counts, with their callers.
"""

import collections
import os
import sys
import threading
from pathlib import Path

import polars as pl
import pytest

import engine
from engine import EngineError, coordinator
from engine.io import locate, remote, sink, source
from engine.options import RunConfig
from engine.passes.executor import LocalExecutor

CENSUS = Path(__file__).resolve().parent / "data" / "census.csv"
QI = ["AFNLWGT", "AGI", "EMCONTRB"]
RESOLVERS = {locate.expand_path: "io.locate.expand_path", remote.expand: "io.remote.expand",
             locate._kind: "io.locate._kind (a file's kind)", sink.input_files: "io.sink.input_files",
             source.open_source: "io.source.open_source"}


def _counted(fn):
    """``fn()``'s calls of the resolving functions: ``{name: Counter(caller)}``."""
    codes = {f.__code__: name for f, name in RESOLVERS.items()}
    calls: dict = collections.defaultdict(collections.Counter)

    def profile(frame, event, arg):
        if event == "call" and frame.f_code in codes:
            back = frame.f_back
            calls[codes[frame.f_code]][f"{back.f_code.co_filename.split('engine/')[-1]}:{back.f_code.co_name}"] += 1

    threading.setprofile(profile)
    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    return calls


def _release(tmp_path):
    engine.anonymize(str(CENSUS), tmp_path / "out.csv", QI, 3, memory_limit="16GiB", risk=True,
                     report=tmp_path / "report.json")


def test_a_release_resolves_its_input_once(tmp_path):
    """Was: ``expand_path`` 4 times (the release's checks, the CSV limit check, the run's
    open, the risk step's open), each file kinded twice."""
    calls = _counted(lambda: _release(tmp_path))
    assert sum(calls["io.locate.expand_path"].values()) == 1, dict(calls["io.locate.expand_path"])
    assert sum(calls["io.locate._kind (a file's kind)"].values()) == 1  # (one file)
    assert not calls["io.remote.expand"]
    assert (tmp_path / "out.csv").exists()


def _runnable(tmp_path, data):
    cfg = RunConfig.make(qi=QI, k=3)
    return coordinator.plan(data, cfg, str(tmp_path / "out.parquet"), runnable=True)


def test_a_plan_runs_once(tmp_path):
    planned = _runnable(tmp_path, str(CENSUS))
    assert planned.resolved is not None and "resolved" not in planned.to_dict()
    result = coordinator.run_plan(planned)
    assert result.report.plan == planned.to_dict() and result.report.rows == planned.input["rows"]
    with pytest.raises(EngineError, match="a plan runs once"):
        coordinator.run_plan(planned)


def test_a_describing_plan_does_not_run(tmp_path):
    planned = engine.plan(str(CENSUS), tmp_path / "out.parquet", QI, 3)
    assert planned.resolved is None
    with pytest.raises(EngineError, match="cannot run it"):
        coordinator.run_plan(planned)
    assert os.listdir(tmp_path) == []


def test_an_input_changed_since_planning_is_refused(tmp_path):
    data = tmp_path / "in.csv"
    data.write_bytes(CENSUS.read_bytes())
    planned = _runnable(tmp_path, str(data))
    with open(data, "a") as fh:
        fh.write("1,2,3,4,5,6,7,8,9,10,11,12,13\n")
    with pytest.raises(EngineError, match="changed since the run was planned"):
        coordinator.run_plan(planned)
    assert not (tmp_path / "out.parquet").exists()


class _Recording(LocalExecutor):
    calls: list = []

    def store(self, *a, **kw):
        self.calls.append("store")
        return super().store(*a, **kw)

    def partition_pass(self, *a, **kw):
        self.calls.append("partition_pass")
        return LocalExecutor.partition_pass(*a, **kw)

    def unit_work(self, block):
        self.calls.append("unit_work")
        return super().unit_work(block)

    def write_pass(self, *a, **kw):
        self.calls.append("write_pass")
        return LocalExecutor.write_pass(*a, **kw)


def test_the_passes_call_the_executor(tmp_path, monkeypatch):
    """A streamed run's partition, aggregate and write passes go through the executor the
    coordinator chose (no branch on which one it is); the output is the same."""
    frame = pl.read_csv(CENSUS)
    engine.anonymize(frame, tmp_path / "a.parquet", QI, 3, block_size=400, polish_rounds=0)
    monkeypatch.setattr(coordinator, "LocalExecutor", _Recording)
    _Recording.calls = []
    engine.anonymize(frame, tmp_path / "b.parquet", QI, 3, block_size=400, polish_rounds=0)
    assert _Recording.calls == ["store", "partition_pass", "unit_work", "write_pass"], _Recording.calls
    assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "b.parquet").read_bytes()


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        for name, where in _counted(lambda: _release(Path(d))).items():
            print(f"{name}: {sum(where.values())}  ({', '.join(f'{w} x{n}' for w, n in where.items())})")
