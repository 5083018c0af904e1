"""Compiling ahead on a cold cache: the first ``microagg demo`` of a fresh install
spends most of its time compiling kernels, one after another, on one core. A helper
process compiles, on the other core, the kernels the run will need later, from the
far end of the run's order, while the run compiles from its start; they meet in the
middle.

How they share the work. Every kernel of the package is loaded or compiled under a
file lock beside its cache entry (``engine.kernels``): the first process to reach a
kernel compiles and saves it; the other waits for the lock, then loads what was
saved (milliseconds). The helper skips a kernel already in the cache, so once the
two meet it finds the rest done and ends. The compiled code is the same whichever
process compiled it (same sources, same signature, same flags): results do not
change.

What it compiles. ``DEMO_KERNELS``: the top-level kernel calls of the demo's run (the
default method; 25,000 to 1,000,000 rows call the same), in the order of their first call,
each as ``(module, function, signature)``; a kernel compiles the kernels it calls
with it. It is recorded by ``python benchmarks/compile_log.py --record``, and
``tests/test_first_use.py`` checks it against what the demo calls, so a kernel that
changes its signature or leaves the path is not compiled for nothing. The helper
compiles each by its signature (``Dispatcher.compile``), without running it.

When. ``helper()`` starts it only for the command line's ``demo`` with the default
method and no option that changes which kernels run (``demo_path``), on 2 or more
usable cores, and only if the cache is cold: the last kernel of the list is not in
the cache (one index file read; a warm run starts nothing), and only if the machine
has a core to spare: a load average (1 minute) under the usable cores - 0.5. On a
machine loaded by other work it only took CPU from that work and from the run
(measured at loads from 4: up to 7 s more wall, 2-3 s more CPU; with a free core the
first demo took 12.5-15 s instead of 19.5-22.5 s: docs/benchmarks.md).
``MICROAGG_WARMUP=0`` turns it off; ``MICROAGG_WARMUP=1`` starts it whatever the
load.

It never outlives the run: it is killed when the command ends (on success, error,
Ctrl-C or SIGTERM), and it also ends by itself when its standard input (a pipe from
the run) closes, which happens when the run's process dies in any way. It writes
nothing but the Numba cache, prints nothing, and dies quietly on a signal of its own
(Ctrl-C in a terminal reaches both processes).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading

_HERE = os.path.dirname(os.path.abspath(__file__))
_HELPER = "import sys; from engine import warmup; warmup.main(sys.argv[1])"
ENV = "MICROAGG_WARMUP"  # "0": no helper; "1": whatever the load
DEMO_ROWS = (25_000, 1_000_000)  # a demo of so many rows calls DEMO_KERNELS (the default: 200,000)
# settings that choose no kernel (the demo sets the QIs; the seed only seeds its data at the default method)
_NEUTRAL = frozenset({"qi", "seed", "threads", "progress", "tmp_dir", "separator", "null_values", "encoding",
                      "report", "html"})

# (module under engine., function, signature): ``python benchmarks/compile_log.py --record`` writes it
DEMO_KERNELS: tuple = (
    ('kernels.moments', 'accumulate_moments',
     '(float64[:, ::1], float64[::1], float64[::1], float64[::1], float64[::1], float64[::1], '
     'float64[::1], int64[::1])'),
    ('kernels.leak', 'mix_keys', '(uint64[::1], uint64[::1])'),
    ('kernels.leak', 'pair_rows',
     '(uint64[::1], uint64[::1], int64, uint64[:, ::1], uint64[:, ::1], uint64[::1], int64[::1], '
     'int64[::1], int64[::1])'),
    ('kernels.leak', 'fd_rows',
     '(uint64[::1], uint64[::1], uint64[::1], int64, uint64[:, ::1], uint64[::1], int64, int64)'),
    ('kernels.leak', 'fd_regrow', '(uint64[:, ::1], uint64[:, ::1], uint64)'),
    ('kernels.leak', 'fd_figures', '(uint64[:, ::1],)'),
    ('kernels.moments', 'standardize_serial',
     '(float64[:, ::1], float64[::1], float64[::1], float64[::1], int64[::1], float64[:, ::1])'),
    ('kernels.index.partition', 'tie_keys', '(int64[::1],)'),
    ('kernels.index.partition', 'plan_tree', '(float64[:, ::1], int64)'),
    ('kernels.index.partition', 'route_rows',
     '(float64[:, ::1], int64, int64[::1], float64[::1], float64[::1], uint64[::1], int64[::1], '
     'int64[::1], int64[::1], int64, int64[::1])'),
    ('kernels.index.partition', 'counting_order', '(int64[::1], int64, int64[::1], int64[::1])'),
    ('kernels.index.partition', 'gather_records_narrow', '(float64[:, ::1], int64, int64[::1], float32[:, ::1])'),
    ('kernels.published', 'merge_segments',
     '(uint32[:, ::1], int64[::1], int64[:, ::1], uint32[:, ::1], int64[::1])'),
    ('kernels.mdav.slots', 'fits', '(float64[:, ::1],)'),
    ('kernels.mdav.leaf', '_leaves_slots', '(float64[:, ::1], int64, int64, int64)'),
    ('kernels.search.polish', '_layout', '(float64[:, ::1], int64[::1], int64, int64)'),
    ('kernels.search.near', 'near_by_windows',
     '(float64[:, ::1], int64[::1], int64[:, ::1], float64[:, :, ::1], int64)'),
    ('kernels.search.near', 'refresh_lists',
     '(float64[:, ::1], int64[::1], int64[:, ::1], int64[::1], int64[:, ::1], float64[::1], '
     'int64[::1])'),
    ('kernels.groups', 'partition_sse', '(float64[:, ::1], int64[::1], int64)'),
    ('kernels.search.polish', '_rounds',
     '(float64[:, ::1], float64[:, ::1], int64[::1], float64[:, ::1], int64[::1], float64[:, ::1], '
     'int64, int64[:, ::1], int64[::1], int64[::1], int64, int64, int64[::1], float64, float64)'),
    ('kernels.index.partition', 'scatter_labels', '(int64[::1], int64[::1], int64, int32[::1])'),
    ('kernels.index.partition', 'take_labels', '(int64[::1], int32[::1], int32[::1])'),
    ('kernels.groups', 'accumulate_group_sums', '(float64[:, ::1], int32[::1], float64[:, ::1], int64[::1])'),
    ('kernels.groups', 'count_labels', '(int32[::1], int64)'),
    ('kernels.groups', 'gather_columns', '(int32[::1], float64[:, ::1], float64[:, ::1])'),
    ('kernels.groups', 'column_sums',
     "(Array(int64, 1, 'C', True, aligned=True), float64[::1], float64[::1], float64[::1], int64, "
     'float64[::1], float64[::1], float64[::1])'),
    ('kernels.groups', 'column_sums',
     "(Array(float64, 1, 'C', True, aligned=True), float64[::1], float64[::1], float64[::1], int64, "
     'float64[::1], float64[::1], float64[::1])'),
    ('kernels.classcount', 'hash_column', "(Array(float64, 1, 'C', True, aligned=True), uint64[::1])"),
    ('kernels.classcount', 'count_keys', '(uint64[::1], int64[::1], int64, uint64[:, ::1], int64, int64, int64)'),
)


def demo_path(cfg, rows: int) -> bool:
    """True when a demo of ``rows`` rows with settings ``cfg`` calls the kernels of
    ``DEMO_KERNELS``: rows within ``DEMO_ROWS`` (the same kernels from end to end, checked
    at both ends) and every setting at its default but those that choose no kernel."""
    # start-up: the option table; the command line has loaded it already
    import dataclasses

    from .options import DEFAULT_K, RunConfig

    base = RunConfig(k=DEFAULT_K)  # (the command line's k when none is given)
    return DEMO_ROWS[0] <= rows <= DEMO_ROWS[1] and all(
        getattr(cfg, f.name) == getattr(base, f.name) for f in dataclasses.fields(RunConfig) if f.name not in _NEUTRAL)


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def _dispatcher(module: str, name: str):
    """The kernel ``engine.<module>.<name>`` (imports its module)."""
    # start-up: the kernels' modules load Numba (0.2 s); the helper and a cold demo need them, nothing else
    import importlib

    return getattr(importlib.import_module("engine." + module), name)


def signature(text: str) -> tuple:
    """A recorded signature (the repr of a tuple of Numba types) as Numba types."""
    # start-up: as above
    from numba.core import types

    return tuple(eval(text, {"__builtins__": {}}, vars(types)))  # noqa: S307 (our own list, Numba's type reprs)


def cached(disp, sig: tuple) -> bool:
    """True when ``disp``'s cache holds ``sig`` for this package's sources (no load)."""
    cache = getattr(disp, "_cache", None)
    cache_file = getattr(cache, "_cache_file", None)
    if cache_file is None:  # caching off (NullCache)
        return True
    try:
        key = cache._index_key(sig, disp.targetctx.codegen())
        return key in cache_file._load_index()
    except Exception:  # an unreadable index: Numba compiles again; so may we
        return False


def cold(kernels=None) -> bool:
    """True when the last kernel of ``kernels`` (``DEMO_KERNELS``) is not in the cache."""
    kernels = DEMO_KERNELS if kernels is None else kernels
    if not kernels:
        return False
    module, name, sig = kernels[-1]
    return not cached(_dispatcher(module, name), signature(sig))


def wanted(cfg, rows: int) -> bool:
    """Whether ``helper`` should start for a demo of ``rows`` rows with ``cfg``."""
    setting = os.environ.get(ENV, "")
    if setting == "0" or cfg.threads == 1 or not demo_path(cfg, rows):
        return False
    cores = _usable_cores()
    return cores >= 2 and (setting == "1" or _load() < cores - 0.5) and cold()


def _load() -> float:
    """The 1-minute load average (infinite where the system does not say: no helper)."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):  # pragma: no cover - not Unix
        return float("inf")


@contextlib.contextmanager
def helper(enabled: bool):
    """``with helper(wanted(cfg, rows)): run``: the compiling helper runs beside the
    block, and is killed when the block ends, however it ends."""
    if not enabled:
        yield None
        return
    # (found the way this process found the package; ``main`` checks it is this one)
    try:
        proc = subprocess.Popen([sys.executable, "-c", _HELPER, _HERE], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                stderr=None if os.environ.get("MICROAGG_DEBUG") else subprocess.DEVNULL)
    except OSError:  # (no process to spare: the run compiles everything, as without the helper)
        yield None
        return
    try:
        yield proc
    finally:
        stop(proc)


def stop(proc) -> None:
    """Kill the helper and reap it (its locks are released by the system)."""
    with contextlib.suppress(OSError):
        proc.kill()
    with contextlib.suppress(OSError):
        proc.stdin.close()
    proc.wait()


def compile_ahead(kernels=None) -> int:
    """The helper's work: compile ``kernels`` (``DEMO_KERNELS``) from the last to the
    first, skipping those in the cache. Returns how many it compiled."""
    done = 0
    for module, name, text in reversed(DEMO_KERNELS if kernels is None else kernels):
        disp, sig = _dispatcher(module, name), signature(text)
        if not cached(disp, sig):
            disp.compile(sig)
            done += 1
    return done


def _end_with_parent() -> None:
    """End this process when its standard input (the run's pipe) closes."""
    def watch():
        sys.stdin.buffer.read()
        os._exit(0)

    threading.Thread(target=watch, daemon=True).start()


def main(package: str) -> None:
    """The helper process: compile ahead (``compile_ahead``), then exit. ``package``: the
    folder of the run's ``engine``; another one's kernels (another version) would be
    compiled for nothing, so then it exits at once."""
    # Ctrl-C in a terminal reaches this process too: die at once, quietly (the run reports it)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)
    _end_with_parent()
    if package == _HERE:
        compile_ahead()
    os._exit(0)  # (not the interpreter's teardown: the watching thread holds stdin's lock)
