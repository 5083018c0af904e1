"""Pass 1, profile: check the quasi-identifiers and measure them for standardization.

One streaming pass over the QI columns computes, per column, the row count, mean,
population standard deviation, minimum and maximum, and stops at the first null,
NaN or infinite value with an error naming the column and the row. Its arithmetic
(``Moments``) and its result (``Profile``) live in ``engine.frames``, below the
encode layer, which measures its compact columns with them too.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..encode.kinds import is_number
from ..errors import EngineError
from ..frames import Moments, Profile
from ..io.source import Source, TableSource
from ..progress import Progress


def check_columns(source: TableSource, qi: Sequence[str], numeric: bool = True) -> None:
    """Every QI exists and (with ``numeric``) is numeric: checked on the input's schema
    (``open_source``'s, before any encoding), before reading data."""
    schema = source.schema
    for c in qi:
        if c not in schema:
            raise EngineError(f"column {c!r} not found in {source.label} (columns: {', '.join(schema.names()[:12])}"
                              f"{', ...' if len(schema) > 12 else ''})")
    # Parquet files that disagree (engine.io.schema): the QIs in every file, the other columns exact
    source.check_reconciled(qi, [c for c in schema.names() if c not in set(qi)])
    for c in qi if numeric else ():
        dt = schema[c]
        if not is_number(dt):
            raise EngineError(f"column {c!r} is not numeric ({dt}); quasi-identifiers must be numbers")


def _moment_pass(source: Source, qi, chunk_rows, scale, rows, progress, stride=0) -> tuple[Moments, tuple]:
    m = Moments(qi, scale)
    samples, sample_ids = [], []
    with Progress("profile", rows, progress) as bar:
        for offset, frame in source.iter_frames(qi, chunk_rows):
            X = m.add(frame, offset)
            if stride:
                first = (-offset) % stride
                take = np.arange(first, frame.height, stride)
                samples.append(X[:, take].T)
                sample_ids.append(take + offset)
            bar.update(m.n)
    sample = (np.concatenate(samples), np.concatenate(sample_ids)) if samples else (None, None)
    return m, sample


def profile_columns(source: Source, qi: Sequence[str], chunk_rows: int, progress: bool = False,
                    rows: int | None = None, sample_stride: int = 0) -> Profile:
    """Run pass 1 over ``qi``; raises EngineError on empty input or bad values.

    With ``sample_stride`` > 0, also keep the rows whose index is a multiple of it.
    """
    qi = tuple(qi)
    total = rows if rows is not None else source.count_rows()
    m, sample = _moment_pass(source, qi, chunk_rows, np.ones(len(qi)), total, progress, sample_stride)
    if m.n == 0:
        raise EngineError(f"{source.label} has no rows")
    scale = m.rescale()
    if scale is not None:  # measure again in units of a power of two (exact, so the
        # standardized values do not change otherwise)
        m, sample = _moment_pass(source, qi, chunk_rows, scale, total, progress, sample_stride)
    return source.adjust_profile(m.profile(sample))  # (mixed-type QIs, engine.encode.mixed: the distance's scales)
