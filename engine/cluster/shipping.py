"""What travels between the client and the tasks, made lean: a profile without its
sample, the run's mixed-type encoding without the client's source and configs, a
unit's row ids and labels as int32 when they fit."""

from __future__ import annotations

import copy
import dataclasses
import functools

import numpy as np

from ..encode.mixed import Mixed
from ..encode.source import EncodedSource
from ..frames import Profile
from ..passes.aggregate import UnitPlan
from .ranges import RangeSource

_I32 = "i32"  # a narrowed array's marker


def narrowed(out):
    """A task's result with its int64 arrays (top level, or in a tuple) sent as int32 when
    their values fit (a unit's row ids and labels: half the bytes to the client)."""
    def narrow(a):
        if isinstance(a, np.ndarray) and a.dtype == np.int64 and (a.size == 0 or (
                int(a.min()) >= -2 ** 31 and int(a.max()) < 2 ** 31)):
            return (_I32, a.astype(np.int32))
        return a
    return tuple(narrow(a) if not isinstance(a, tuple) else tuple(narrow(b) for b in a) for a in out)


def widened(out):
    """A result of ``narrowed`` as the task's function returned it."""
    def marker(a):
        return isinstance(a, tuple) and len(a) == 2 and isinstance(a[0], str) and a[0] == _I32

    def widen(a):
        return a[1].astype(np.int64) if marker(a) else a
    return tuple(tuple(widen(b) for b in a) if isinstance(a, tuple) and not marker(a) else widen(a) for a in out)


def lean(arg):
    """A task's argument without what the task does not use: a profile's sample (the
    plan's, up to millions of rows) would be serialized into every task; a unit plan's
    mixed-type encoding (``UnitPlan.reduce``) travels as ``task_encoding``'s copy."""
    if isinstance(arg, functools.partial):  # a unit function with its arguments bound
        return functools.partial(arg.func, *map(lean, arg.args), **{k: lean(v) for k, v in arg.keywords.items()})
    if isinstance(arg, Profile) and arg.sample is not None:
        return dataclasses.replace(arg, sample=None, sample_ids=None)
    if isinstance(arg, UnitPlan) and isinstance(arg.reduce, Mixed):
        return dataclasses.replace(arg, reduce=task_encoding(arg.reduce))
    return arg


def task_encoding(mixed: Mixed) -> Mixed:
    """A copy of the run's mixed-type encoding for the tasks (``encode.mixed.Mixed``):
    what the client learnt and measured (the QIs with their dictionaries, the encoded
    columns, the measured profile) travels as it is; not the client's source (its
    encoded source reads a stand-in of the input's label and schema: a task wraps its
    own range, ``EncodedSource(range, encoding)``), nor a profile's sample, nor a
    ``distributed.Client`` in its configs (``scheduler``)."""
    copied = copy.copy(mixed)
    for name, v in list(vars(copied).items()):
        if isinstance(v, EncodedSource):  # (errors name the input: its label)
            base = v.base
            stand_in = RangeSource(base.label, base.schema, None, (), 0, 0)
            setattr(copied, name, EncodedSource(stand_in, copied))
        elif isinstance(v, Profile):
            setattr(copied, name, lean(v))
        elif dataclasses.is_dataclass(v) and not isinstance(v, type) and getattr(v, "scheduler", None) is not None:
            setattr(copied, name, dataclasses.replace(v, scheduler=None))
    return copied
