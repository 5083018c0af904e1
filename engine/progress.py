"""A small progress line on stderr for long passes (off unless asked for)."""

from __future__ import annotations

import sys
import time


class Progress:
    """``with Progress("aggregate", total=n, enabled=True) as bar: bar.update(done)``.

    Redraws at most five times a second; prints nothing when disabled.
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
