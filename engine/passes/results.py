"""What the passes hand each other: pass 1's result, the write pass's result, the
timing of a pass, and the release of freed memory between passes.

The coordinator and the method flows (``engine.methods``) both use these; they
live here so that neither imports the other.
"""

from __future__ import annotations

import contextlib
import ctypes
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class Profiled:
    """Pass 1's result, as the partition pass needs it."""

    profile: Any                 # frames.Profile of the spilled columns (None: ``sampled`` stands in)
    source: Any                  # what the partition pass reads (maxent: categories as codes)
    columns: list                # the spilled columns
    cols: np.ndarray             # the columns the plan splits on (indices into ``columns``)
    sampled: tuple | None = None  # a row-group sample (X, ids): pass 1 done by the partition pass
    one_class: bool = False      # the whole table is one class: no partition (maxent at epsilon = H)


@dataclass
class Written:
    """The write pass's result: the table (no destination), the self-check's counts,
    and the squared errors (per QI; None: the method measures none)."""

    table: Any
    verified: dict
    col_sse: np.ndarray | None = None
    col_sst: np.ndarray | None = None
    names: list = field(default_factory=list)  # the QIs of col_sse / col_sst


@contextlib.contextmanager
def timed(passes: dict, name: str):
    """Time the block as pass ``name`` of the report (``passes[name]``, seconds)."""
    t = time.perf_counter()
    yield
    passes[name] = time.perf_counter() - t


def release_memory() -> None:
    """Hand freed heap pages back to the OS between passes (glibc keeps them otherwise),
    so that peak RSS is the largest pass, not the sum of the passes' leftovers."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to do
        pass
