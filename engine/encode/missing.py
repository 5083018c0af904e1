"""Missing values of the numeric and date quasi-identifiers, before the grouping passes.

A QI with missing values (nulls) is grouped with a missing-value indicator beside its
value (``engine.encode.mixed``): a missing cell stands at the column's mean of the
values present, and the indicator keeps records with and without a value apart. Both
need to be known before the first grouping pass: which QIs have missing values (so
that the encoded columns can be laid out) and each one's mean.

``scan_missing`` gives them: a Parquet input's footers first (each row group's null
count: no pass at all when they say there are none), else one streamed pass over the
columns concerned. The mean is pass 1's arithmetic (``frames.Moments``, sums in
row order) over the values present, so it does not depend on the chunk size.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pyarrow.parquet as pq

from ..errors import EngineError
from ..frames import Moments, bad_value_error
from .codes import mask_codes


def parquet_nulls(paths: Sequence[str], columns: Sequence[str]) -> dict:
    """Per column, its null count over every row group of the Parquet files ``paths``
    from their footers' statistics, or None when a row group does not record it."""
    out: dict = {c: 0 for c in columns}
    for f in paths:
        md = pq.read_metadata(f)
        names = md.schema.to_arrow_schema().names
        for c in columns:
            if c not in names or out[c] is None:
                out[c] = None
                continue
            i = names.index(c)
            for g in range(md.num_row_groups):
                st = md.row_group(g).column(i).statistics
                if st is None or not st.has_null_count:
                    out[c] = None
                    break
                out[c] += st.null_count
    return out


def scan_missing(source, columns: Sequence[str], chunk_rows: int, codes: dict | None = None) -> dict:
    """``{column: (missing values, mean of the values present)}`` of the numeric or date
    ``columns`` (dates: their epoch values) that have missing values; a column missing
    in every row is an error naming it. A NaN or infinite value is an error naming its
    row, as pass 1's. ``codes``: a column's declared missing codes (``--missing``), read
    as missing values (``encode.codes.mask_codes``)."""
    columns = list(columns)
    codes = codes or {}
    if source.kind == "parquet" and source.paths:
        known = parquet_nulls(source.paths, columns)
        columns = [c for c in columns if known[c] != 0 or c in codes]
    if not columns:
        return {}
    moments = {c: Moments([c], np.ones(1)) for c in columns}
    nulls = dict.fromkeys(columns, 0)
    rows = 0
    for offset, frame in source.iter_frames(columns, chunk_rows):
        rows = offset + frame.height
        first = None  # the first NaN or infinite value by row (the first column at that row)
        for c in columns:
            s = frame.get_column(c)
            if s.dtype.is_float():
                bad = (~s.is_finite()).fill_null(False).arg_true()
                if bad.len() and (first is None or int(bad[0]) < first[1]):
                    first = (c, int(bad[0]))
        if first is not None:
            raise bad_value_error(first[0], frame.get_column(first[0]), first[1], offset)
        for c in columns:
            s = frame.get_column(c)
            if s.dtype.is_temporal():
                s = s.to_physical()
            if c in codes:
                s = mask_codes(s, codes[c])
            nulls[c] += s.null_count()
            present = s.drop_nulls()
            if present.len():
                moments[c].add(present.to_frame(c), offset)
    out = {}
    for c in columns:
        if not nulls[c]:
            continue
        if nulls[c] == rows:
            raise EngineError(f"column {c!r} is missing in every row: a quasi-identifier needs values "
                              f"(drop it from --qi)")
        p = moments[c].profile()
        mean = float(p.mean[0] * p.scale[0])
        if not np.isfinite(mean):  # (sums beyond float64: the middle of the range instead)
            mean = float(p.min[0] / 2 + p.max[0] / 2)
        out[c] = (nulls[c], mean)
    return out
