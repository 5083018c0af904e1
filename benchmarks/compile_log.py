"""What Numba compiles during one ``microagg`` command, and for how long.

    NUMBA_CACHE_DIR=$(mktemp -d) python benchmarks/compile_log.py demo --output /tmp/a.parquet

runs the command in this process with a listener on Numba's compile events and
prints, to stderr, every compilation (seconds including nested ones, nesting depth,
function, argument types), then the kernels of ``engine.kernels`` that hold more
than one specialization or a literal-typed one (each costs a compilation of its
own). With a warm cache nothing compiles; with an empty one this is the first
run of a fresh install. ``--top N`` limits the list (default 40).

    python benchmarks/compile_log.py --record [demo --quiet]

prints, instead, the kernels the command calls from Python (not their callees), in
the order of their first call, as ``engine.warmup.DEMO_KERNELS`` lists them (cached
or not: the same list on a warm cache); ``tests/test_first_use.py`` checks that list
with ``record``.
"""

from __future__ import annotations

import sys
import threading
import time

from numba.core import event

records = []  # (seconds, depth, function, argument types)


class _Listener(event.Listener):
    def __init__(self):
        self.stack = []

    def on_start(self, ev):
        self.stack.append(time.perf_counter())

    def on_end(self, ev):
        t0 = self.stack.pop()
        disp = ev.data.get("dispatcher")
        fn = getattr(disp, "py_func", None)
        name = f"{getattr(fn, '__module__', '')}.{getattr(fn, '__qualname__', disp)}"
        records.append((time.perf_counter() - t0, len(self.stack), name, str(ev.data.get("args"))))


def specializations():
    """``{kernel: [signatures]}`` of the engine's kernels with more than one
    specialization, or a literal-typed argument."""
    import importlib
    import pkgutil

    import engine.kernels
    from numba.core.dispatcher import Dispatcher

    out = {}
    for info in pkgutil.walk_packages(engine.kernels.__path__, "engine.kernels."):
        mod = importlib.import_module(info.name)
        for name, obj in vars(mod).items():
            if isinstance(obj, Dispatcher) and obj.__module__ == mod.__name__:
                sigs = obj.signatures
                if len(sigs) > 1 or any("Literal" in str(s) for s in sigs):
                    out[f"{mod.__name__}.{name}"] = [str(s) for s in sigs]
    return out


def record(argv):
    """The kernels of the package that ``microagg ARGV``, run in this process, calls
    from Python, in the order of their first call: ``[(module under engine., function,
    signature text)]`` (``engine.warmup.signature`` reads the text)."""
    from numba.core.dispatcher import Dispatcher

    from engine import cli, kernels  # noqa: F401  (kernels: its compile wrapper in place first)

    calls, depth = [], threading.local()
    inner = Dispatcher.compile

    def compile_(self, sig):
        level = getattr(depth, "n", 0)
        fn = self.py_func
        if level == 0 and fn.__module__.startswith("engine.") and "<locals>" not in fn.__qualname__:
            key = (fn.__module__[len("engine."):], fn.__qualname__, _text(sig))
            if key not in calls:
                calls.append(key)
        depth.n = level + 1
        try:
            return inner(self, sig)
        finally:
            depth.n = level

    Dispatcher.compile = compile_  # (the command's calls of uncompiled kernels come here, cached or not)
    try:
        code = cli.main(argv)
    finally:
        Dispatcher.compile = inner
    if code != 0:
        raise RuntimeError(f"microagg {' '.join(argv)} exited {code}")
    return calls


def _text(sig):
    """A signature as ``engine.warmup.signature`` reads it: C-contiguous arrays as ``float64[:, ::1]``."""
    from numba.core import sigutils, types

    from engine.warmup import signature

    sig = tuple(sigutils.normalize_signature(sig)[0])

    def one(t):
        if isinstance(t, types.Array) and t.layout == "C" and t.mutable and t.aligned:
            return f"{t.dtype}[{', '.join([':'] * (t.ndim - 1) + ['::1'])}]"
        return repr(t)

    text = "(" + ", ".join(one(t) for t in sig) + ("," if len(sig) == 1 else "") + ")"
    assert signature(text) == sig, text
    return text


def main(argv):
    if argv[:1] == ["--record"]:
        for entry in record(argv[1:] or ["demo", "--quiet"]):
            print(f"    {entry!r},")
        return 0
    top = 40
    if argv[:1] == ["--top"]:
        top, argv = int(argv[1]), argv[2:]
    event.register("numba:compile", _Listener())
    from engine import cli

    t = time.perf_counter()
    code = cli.main(argv)
    wall = time.perf_counter() - t
    err = sys.stderr
    total = sum(r[0] for r in records if r[1] == 0)
    print(f"\ncompile_log: wall {wall:.1f} s, {len(records)} compilations, {total:.1f} s at top level", file=err)
    for sec, depth, name, args in sorted(records, key=lambda r: -r[0])[:top]:
        print(f"{sec:7.2f} s  d{depth}  {name} {args[:160]}", file=err)
    for name, sigs in specializations().items():
        print(f"specializations: {name}: {len(sigs)}: {'; '.join(s[:120] for s in sigs)}", file=err)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
