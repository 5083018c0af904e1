"""The kernels' Numba cache is stamped with all of engine/kernels/ (engine/kernels/__init__.py):
a change to any kernel file recompiles every kernel, since a kernel holds the machine code of
the kernels it calls from other files."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# a kernel of one file (``split``) called by a kernel of another (``slots``)
PROBE = """
import numpy as np
from engine.kernels.mdav import slots
X = np.arange(40.0).reshape(20, 2)
slots.leaf_rows(X, np.int64(2), np.int64(8))
print(sum(slots.leaf_rows.stats.cache_hits.values()), sum(slots.leaf_rows.stats.cache_misses.values()))
"""


def _probe(pkg: Path, cache: Path) -> tuple[int, int]:
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache), PYTHONPATH=str(pkg))
    out = subprocess.run([sys.executable, "-P", "-c", PROBE], env=env, capture_output=True, text=True, cwd=pkg)
    assert out.returncode == 0, out.stderr
    hits, misses = out.stdout.split()
    return int(hits), int(misses)


@pytest.mark.slow
def test_a_change_in_a_called_kernel_file_recompiles_the_caller(tmp_path):
    pkg = tmp_path / "pkg"
    shutil.copytree(ROOT / "engine", pkg / "engine", ignore=shutil.ignore_patterns("__pycache__"))
    cache = tmp_path / "cache"
    assert _probe(pkg, cache) == (0, 1)  # compiled
    assert _probe(pkg, cache) == (1, 0)  # from the cache
    with open(pkg / "engine" / "kernels" / "index" / "split.py", "a") as fh:  # the callee's file only
        fh.write("\n# changed\n")
    assert _probe(pkg, cache) == (0, 1)  # stale: compiled again
    assert _probe(pkg, cache) == (1, 0)


def test_only_this_package_uses_the_package_stamp():
    from numba.core import caching

    import engine.kernels as kernels
    from engine.kernels.mdav import slots

    locator = slots.leaf_rows._cache._impl.locator
    assert type(locator).__name__.startswith("Kernels") and locator.get_source_stamp() == kernels.fingerprint()
    assert caching.CacheImpl._locator_classes[0].from_function(test_only_this_package_uses_the_package_stamp,
                                                               __file__) is None


def _probe_proc(cache: Path) -> subprocess.Popen:
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache))
    return subprocess.Popen([sys.executable, "-c", PROBE], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=ROOT)


def test_a_kernel_is_loaded_or_compiled_under_its_entry_lock(tmp_path):
    """While another process holds a kernel's lock (it compiles or saves that kernel), a
    run that needs the kernel waits, then loads it; runs that start together on an empty
    cache all succeed, and what they saved loads (numba/numba#10128)."""
    fcntl = pytest.importorskip("fcntl")
    cache = tmp_path / "cache"
    procs = [_probe_proc(cache) for _ in range(3)]  # together, on an empty cache
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    locks = sorted(cache.rglob("*.lock"))
    assert any("leaf_rows" in p.name for p in locks), locks
    held = [open(p, "a+b") for p in locks]
    try:
        for fh in held:
            fcntl.flock(fh, fcntl.LOCK_EX)
        waiting = _probe_proc(cache)
        time.sleep(3.0)
        assert waiting.poll() is None, "the run loaded a kernel whose entry another process held"
    finally:
        for fh in held:
            fh.close()
    out, err = waiting.communicate(timeout=120)
    assert waiting.returncode == 0, err
    assert out.split() == ["1", "0"]  # loaded what the first runs saved, compiled nothing
