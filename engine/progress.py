"""A small progress line on stderr for long passes (off unless asked for)."""

from __future__ import annotations

import sys
import threading
import time


class Progress:
    """``with Progress("aggregate", total=n, enabled=True) as bar: bar.update(done)``.

    Draws at once (0 %: the pass has started, even when its first step is long), then
    at most five times a second; prints nothing when disabled.
    """

    def __init__(self, label: str, total: int, enabled: bool, stream=None):
        self.label = label
        self.total = max(int(total), 1)
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.start = time.perf_counter()
        self._last = 0.0
        self.done = 0

    def __enter__(self):
        self.update(0)
        return self

    def update(self, done: int) -> None:
        self.done = done
        if not self.enabled:
            return
        now = time.perf_counter()
        if now - self._last < 0.2 and done < self.total:
            return
        self._last = now
        frac = min(done / self.total, 1.0)
        elapsed = now - self.start
        eta = elapsed / frac - elapsed if frac > 0 else 0.0
        width = 24
        bar = "#" * int(frac * width) + "-" * (width - int(frac * width))
        self.stream.write(f"\r{self.label:<10} [{bar}] {100 * frac:5.1f}%  {elapsed:6.1f}s  eta {eta:5.1f}s ")
        self.stream.flush()

    def __exit__(self, exc_type, exc, tb):
        if self.enabled:
            if exc_type is None:
                self.update(self.total)
            self.stream.write("\n")
            self.stream.flush()
        return False


# seconds of compilation (summed over the run) before the notice shows
COMPILE_NOTICE_AFTER = 1.0
COMPILE_NOTICE = "microagg: compiling kernels on first use (cached for later runs)..."


class CompileNotice:
    """``with CompileNotice(enabled=True): ...``: prints ``COMPILE_NOTICE`` once, on
    stderr, as soon as Numba has spent ``COMPILE_NOTICE_AFTER`` seconds compiling
    kernels within the block (a first run, or a cache a new version invalidated),
    so that a long silent first run is explained. With a warm cache nothing
    compiles and nothing prints. The command line uses it (not with --quiet);
    the Python API does not print."""

    def __init__(self, enabled: bool, stream=None, after: float | None = None):
        self.enabled = enabled
        self.stream = stream
        self.after = COMPILE_NOTICE_AFTER if after is None else after
        self.shown = False
        self._spent = 0.0  # seconds of finished top-level compilations
        self._depth = 0
        self._since = 0.0
        self._timer = None
        self._listener = None
        self._event = None  # numba.core.event, once a listener is registered

    def __enter__(self):
        if not self.enabled:
            return self
        # start-up: Numba takes 0.15-0.2 s to import, and the command line imports this module first thing
        from numba.core import event

        notice = self

        class _Listener(event.Listener):  # compilations run one at a time (Numba's compiler lock)
            def on_start(self, ev):
                if notice._depth == 0 and not notice.shown:
                    notice._since = time.perf_counter()
                    notice._timer = threading.Timer(max(notice.after - notice._spent, 0.0), notice._show)
                    notice._timer.daemon = True
                    notice._timer.start()
                notice._depth += 1

            def on_end(self, ev):
                notice._depth -= 1
                if notice._depth == 0 and notice._timer is not None:
                    notice._timer.cancel()
                    notice._timer = None
                    notice._spent += time.perf_counter() - notice._since

        self._listener = _Listener()
        self._event = event
        event.register("numba:compile", self._listener)
        return self

    def _show(self) -> None:
        if not self.shown:
            self.shown = True
            stream = self.stream or sys.stderr
            stream.write(COMPILE_NOTICE + "\n")
            stream.flush()

    def __exit__(self, exc_type, exc, tb):
        if self._listener is not None:
            self._event.unregister("numba:compile", self._listener)
            self._listener = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        return False
