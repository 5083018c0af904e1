"""First use on an empty Numba cache: the helper process of ``engine.warmup`` that
compiles the demo's later kernels beside the run. Its list is the demo's own calls; it
starts only for the demo's path on a cold cache; it never outlives the run (block end,
error, the run's death, Ctrl-C); it changes no result."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import polars as pl
import pytest

from engine import cli, warmup

ROOT = Path(__file__).resolve().parent.parent


def _env(**extra) -> dict:
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "benchmarks")]), **extra)


def _recorded(rows: int) -> set:
    code = f"import compile_log; print(repr(compile_log.record(['demo', '--quiet', '--rows', '{rows}'])))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=_env(),
                         check=True, timeout=300)
    return {(m, f, warmup.signature(s)) for m, f, s in eval(out.stdout)}


def _listed() -> set:
    return {(m, f, warmup.signature(s)) for m, f, s in warmup.DEMO_KERNELS}


@pytest.mark.parametrize("rows", [warmup.DEMO_ROWS[0], pytest.param(200_000, marks=pytest.mark.slow),
                                  pytest.param(warmup.DEMO_ROWS[1], marks=pytest.mark.slow)])
def test_the_list_is_what_the_demo_calls(rows):
    """Every kernel the helper compiles is one the demo calls, with that signature, and
    none is missing (``python benchmarks/compile_log.py --record`` writes the list again)."""
    assert _recorded(rows) == _listed()


def test_cold_on_an_empty_cache_warm_after_a_run(tmp_path):
    code = "from engine import warmup; print(warmup.cold())"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         env=_env(NUMBA_CACHE_DIR=str(tmp_path)), check=True)
    assert run.stdout.strip() == "True"
    assert cli.main(["demo", "--quiet", "--rows", str(warmup.DEMO_ROWS[0])]) == 0  # (this cache: warm now)
    assert warmup.cold() is False


def _demo_settings(*argv):
    """The settings ``microagg demo ARGV`` runs with (as ``cli._cmd_demo`` makes them)."""
    args = cli._parser().parse_args(["demo", *argv])
    return cli._settings(args, qi=cli.DEMO_QI, seed=None), args.rows


def test_wanted_only_on_the_demo_path_of_a_cold_cache(monkeypatch):
    monkeypatch.setattr(warmup, "cold", lambda kernels=None: True)
    monkeypatch.setattr(warmup, "_usable_cores", lambda: 2)
    monkeypatch.setattr(warmup, "_load", lambda: 0.4)
    monkeypatch.delenv(warmup.ENV, raising=False)
    assert warmup.wanted(*_demo_settings())
    assert warmup.wanted(*_demo_settings("--seed", "7", "--threads", "2", "--rows", "300000"))
    for argv in (["--rows", "600"], ["--rows", "5000000"], ["--method", "vmdav"], ["--refine", "local"],
                 ["--polish-rounds", "0"], ["--k", "5"], ["--threads", "1"], ["--block-size", "5000"]):
        assert not warmup.wanted(*_demo_settings(*argv)), argv
    monkeypatch.setattr(warmup, "_load", lambda: 1.6)  # no core to spare
    assert not warmup.wanted(*_demo_settings())
    monkeypatch.setenv(warmup.ENV, "1")  # whatever the load
    assert warmup.wanted(*_demo_settings())
    monkeypatch.delenv(warmup.ENV)
    monkeypatch.setattr(warmup, "_load", lambda: 0.4)
    monkeypatch.setattr(warmup, "_usable_cores", lambda: 1)
    assert not warmup.wanted(*_demo_settings())
    monkeypatch.setattr(warmup, "_usable_cores", lambda: 2)
    monkeypatch.setenv(warmup.ENV, "0")
    assert not warmup.wanted(*_demo_settings())
    monkeypatch.setattr(warmup, "cold", lambda kernels=None: False)
    monkeypatch.delenv(warmup.ENV)
    assert not warmup.wanted(*_demo_settings())


def test_a_warm_demo_starts_no_helper(monkeypatch):
    monkeypatch.setenv(warmup.ENV, "1")  # (whatever the load: only the cache decides)
    assert cli.main(["demo", "--quiet", "--rows", str(warmup.DEMO_ROWS[0])]) == 0  # (warm from here on)

    def no_process(*a, **kw):
        raise AssertionError("a helper process started on a warm cache")

    monkeypatch.setattr(warmup.subprocess, "Popen", no_process)
    assert cli.main(["demo", "--quiet", "--rows", str(warmup.DEMO_ROWS[0])]) == 0


def _gone(pid: int, within: float = 10.0) -> bool:
    """The process ``pid`` has ended (gone, or a zombie no one has reaped yet)."""
    end = time.monotonic() + within
    while True:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return True
        if state in ("Z", "X"):
            return True
        if time.monotonic() > end:
            return False
        time.sleep(0.02)


@pytest.mark.parametrize("ending", ["normal", "error"])
def test_the_helper_ends_with_its_block(tmp_path, monkeypatch, ending):
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))  # (the helper's: empty, so it compiles)
    with pytest.raises(RuntimeError) if ending == "error" else contextlib.nullcontext():
        with warmup.helper(True) as proc:
            time.sleep(0.5)
            assert proc.poll() is None  # at work
            if ending == "error":
                raise RuntimeError("the run failed")
    assert proc.returncode is not None and _gone(proc.pid, within=0)


def test_the_helper_ends_when_the_run_dies(tmp_path):
    """SIGKILL leaves no cleanup to run: the helper sees its standard input close."""
    code = textwrap.dedent("""
        import os, signal, time
        from engine import warmup
        proc = warmup.helper(True).__enter__()
        print(proc.pid, flush=True)
        time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         env=_env(NUMBA_CACHE_DIR=str(tmp_path)), timeout=60)
    assert run.returncode == -signal.SIGKILL
    assert _gone(int(run.stdout.split()[0]))


def test_a_helper_of_another_package_compiles_nothing(tmp_path):
    """The helper found another ``engine`` than the run's (another version): it exits
    at once instead of compiling kernels the run will not load."""
    code = "from engine import warmup; warmup.main('/elsewhere/engine')"
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, cwd=ROOT,
                            env=_env(NUMBA_CACHE_DIR=str(tmp_path)))
    assert proc.wait(timeout=30) == 0  # (its standard input still open)
    proc.stdin.close()
    assert list(tmp_path.iterdir()) == []


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except FileNotFoundError:
        return []


@pytest.mark.parametrize("to", ["run", "group"])
def test_ctrl_c_during_a_cold_demo_is_quiet_and_ends_the_helper(tmp_path, to):
    """SIGINT to the run, or to its process group (a terminal's Ctrl-C): 130, the one
    line, no traceback, nothing written, and the helper gone."""
    out = tmp_path / "out" / "demo.parquet"
    out.parent.mkdir()
    cache = tmp_path / "cache"
    proc = subprocess.Popen([sys.executable, "-m", "engine", "demo", "--quiet", "--output", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT, start_new_session=True,
                            env=_env(NUMBA_CACHE_DIR=str(cache), **{warmup.ENV: "1"}))
    end = time.monotonic() + 60
    while not _children(proc.pid) and proc.poll() is None and time.monotonic() < end:
        time.sleep(0.01)
    helpers = _children(proc.pid)
    assert helpers, "no helper started on an empty cache"
    time.sleep(1.0)  # both at work: the run compiling, the helper too
    if to == "run":
        proc.send_signal(signal.SIGINT)
    else:
        os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    err = err.decode()
    assert proc.returncode == 130, (proc.returncode, err)
    assert "Traceback" not in err and "interrupted" in err.strip().splitlines()[-1], err
    assert list(out.parent.iterdir()) == []
    assert all(_gone(pid) for pid in helpers)


@pytest.mark.slow
def test_a_cold_demo_with_the_helper_writes_what_one_without_writes(tmp_path):
    """Who compiled a kernel changes nothing: the cold demo with the helper and a warm
    one without it write the same table."""
    outs = []
    for name, extra in (("cold", {warmup.ENV: "1"}), ("warm", {warmup.ENV: "0"})):
        outs.append(tmp_path / f"{name}.parquet")
        subprocess.run([sys.executable, "-m", "engine", "demo", "--quiet", "--output", str(outs[-1])], cwd=ROOT,
                       env=_env(NUMBA_CACHE_DIR=str(tmp_path / "cache"), **extra), check=True, timeout=600)
    assert pl.read_parquet(outs[0]).equals(pl.read_parquet(outs[1]))
