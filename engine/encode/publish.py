"""The write pass's published values of mixed-type QIs (``engine.encode.mixed``).

``Publisher`` holds one row a group, one value a QI (the number, the date's rounded
epoch value, the category code; NaN: a missing value), and replaces each chunk's QI
columns with their group's values (``passes.write.write_pass(publisher=...)``),
measuring the information loss per QI and counting the missing cells imputed or kept.

Where the table comes from:

* the blocks' workers' reduction (``Mixed.published_sums``: the fast path), as it is;
* none: the workers' published values reach the write pass in row order, on disk
  (``passes.published.RowRecords``: a chunk's values come with it, no table held);
* otherwise (stitched groups: in memory, seam polish, refinement) the encoded means
  for the complete numeric and date QIs, and one read of the QI columns for the rest
  (``from_input``): each categorical QI's codes, kept for every row (8 bytes a row:
  ``Mixed.state`` counts them), picked per group (``kernels.groups.group_picks``),
  and the sums of the values present of a numeric or date QI with missing values.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from ..frames import aligned_zeros, finish_sums, frame_to_columns
from ..io.source import numeric_values
from ..kernels.groups import column_sums, compact_group_sums, gather_columns
from .codes import code_rows, mask_codes

_CHUNK = 262_144  # rows at a time in ``from_input`` and ``exact_dates``


def from_input(mixed, groups) -> tuple[np.ndarray, np.ndarray]:
    """``(table, sums)`` of stitched groups, as the workers' ``Mixed.published_sums``
    would give them: see the module docstring."""
    qis = mixed.qis
    g = groups.sizes.shape[0]
    table = aligned_zeros(g, len(qis))
    sums = np.zeros(mixed.loss_width)
    for j, q in enumerate(qis):
        if q.kind in ("numeric", "date") and not q.nulls:
            c = groups.centroid[:, q.first]
            table[:, j] = c if q.kind == "numeric" else np.rint(c)
    sparse = np.array([j for j, q in enumerate(qis) if q.kind in ("numeric", "date") and q.nulls], np.int64)
    cats = [j for j in mixed.cats]
    if not sparse.shape[0] and not cats:
        return table, sums
    rows = groups.labels.shape[0]
    codes = {j: np.empty(rows) for j in cats}
    scale = mixed.raw.scale[[qis[j].first for j in sparse]] if sparse.shape[0] else np.ones(0)
    vs = np.zeros((g, sparse.shape[0]))
    present = np.zeros((g, sparse.shape[0]), np.int64)
    cnt = np.zeros(g, np.int64)
    names = [q.name for q in qis]
    for offset, frame in mixed.source.iter_codes(_CHUNK):
        C = frame_to_columns(frame, names)
        lab = groups.labels[offset: offset + frame.height].astype(np.int64, copy=False)
        if sparse.shape[0]:
            compact_group_sums(np.ascontiguousarray(C.T), sparse, 1.0 / scale, lab, vs, present, cnt)
        for j in cats:
            codes[j][offset: offset + frame.height] = C[j]
    with np.errstate(invalid="ignore", divide="ignore"):
        vs /= present
    vs *= scale
    for v, j in enumerate(sparse):
        table[:, j] = vs[:, v] if qis[j].kind == "numeric" else np.rint(vs[:, v])
    lab = groups.labels.astype(np.int64, copy=False)
    for j in cats:
        table[:, j], stats = mixed.picks(qis[j], codes.pop(j), lab, g)
        sums[j::len(qis)] = stats
    return table, sums


def exact_dates(mixed, groups) -> dict:
    """Each group's mean of each Datetime QI, exact: the integer mean of the epoch values
    present (in the column's unit) rounded half to even, from one read of those columns
    (int64 sums of each value's high and low 32 bits, no float); -1 where none is
    present is masked by the caller (the table's NaN). The encoded (float64) means the
    grouping uses round epoch values above 2^53 (microseconds after year 2255,
    nanoseconds after 1970-04), so three equal nanosecond values would publish a mean
    tens of nanoseconds off. Date columns (days) need none: their float means are exact."""
    qis = [q for q in mixed.qis if q.kind == "date" and isinstance(q.dtype, pl.Datetime)]
    if not qis:
        return {}
    g = groups.sizes.shape[0]
    hi = {q.name: np.zeros(g, np.int64) for q in qis}
    lo = {q.name: np.zeros(g, np.int64) for q in qis}
    n = {q.name: np.zeros(g, np.int64) for q in qis}
    names = [q.name for q in qis]
    for offset, frame in mixed.source.base.iter_frames(names, _CHUNK):
        lab = groups.labels[offset: offset + frame.height]
        for c in names:
            s = frame.get_column(c).to_physical()
            ok = s.is_not_null().to_numpy()
            x = s.fill_null(0).to_numpy().astype(np.int64, copy=False)[ok]
            np.add.at(hi[c], lab[ok], x >> 32)
            np.add.at(lo[c], lab[ok], x & 0xFFFFFFFF)
            np.add.at(n[c], lab[ok], 1)
    out = {}
    for c in names:
        m = np.maximum(n[c], 1)
        qh, rh = np.divmod(hi[c], m)  # sum = qh m 2^32 + rh 2^32 + lo, 0 <= rh < m
        qa, ra = np.divmod(rh * (1 << 32) + lo[c], m)
        mean = qh * (1 << 32) + qa  # the floor of the mean; then half to even
        mean += (2 * ra > m) | ((2 * ra == m) & (mean % 2 == 1))
        out[c] = mean
    return out


def declared_codes(mixed, groups) -> dict:
    """Each group's declared missing code of each numeric QI with ``--missing`` codes
    (``encode.codes``): the position among its codes of the code most frequent among the
    group's rows (ties: the first declared; -1: none), from one read of those columns.
    A group publishing no mean (every value missing) publishes that code."""
    qis = [q for q in mixed.qis if q.codes]
    if not qis:
        return {}
    g = groups.sizes.shape[0]
    counts = {q.name: np.zeros(g * len(q.codes), np.int64) for q in qis}
    for offset, frame in mixed.source.base.iter_frames([q.name for q in qis], _CHUNK):
        lab = groups.labels[offset: offset + frame.height].astype(np.int64, copy=False)
        for q in qis:
            rows = code_rows(frame.get_column(q.name), q.codes)
            have = rows >= 0
            counts[q.name] += np.bincount(lab[have] * len(q.codes) + rows[have], minlength=g * len(q.codes))
    out = {}
    for q in qis:
        c = counts[q.name].reshape(g, len(q.codes))
        out[q.name] = np.where(c.any(axis=1), c.argmax(axis=1), -1)
    return out


class Publisher:
    """The write pass's published QI values, information loss and missing-cell counts,
    chunk by chunk (``passes.write.write_pass(publisher=...)``)."""

    def __init__(self, mixed, groups):
        self.mixed = mixed
        qis = mixed.qis
        self.columns = [q.name for q in qis]
        # categorical QIs: published (and their losses counted) from the groups alone: the
        # write pass need not read those columns (``unread``), it only writes them
        self.unread = [q.name for q in qis if q.kind in ("ordinal", "nominal")]
        if not hasattr(groups, "centroid"):  # row-ordered (``passes.published``): each chunk's values from disk
            self.table, sums = None, np.asarray(groups.sse, np.float64)
        elif groups.sse is not None:  # the blocks' workers' reduction (``Mixed.published_sums``) as it is
            assert groups.centroid.shape[1] == len(qis)
            self.table, sums = groups.centroid, np.asarray(groups.sse, np.float64)
        else:  # stitched groups
            self.table, sums = from_input(mixed, groups)
        Q = len(qis)
        self.changed = sums[:Q].copy()  # nominal: values changed; ordinal: |rank change|
        # per QI: missing cells published with a value (imputed), kept missing; cells with a
        # value published missing (a nominal QI whose group's mode is the missing value)
        self.imputed, self.kept, self.suppressed = sums[Q:2 * Q].copy(), sums[2 * Q:3 * Q].copy(), sums[3 * Q:].copy()
        self.domains = {q.name: q.domain() for q in qis if q.categories is not None}
        self.exact = exact_dates(mixed, groups)
        self.declared = declared_codes(mixed, groups)
        e = len(mixed.names)
        # numeric and date QIs: the write pass's row-order sums (``kernels.groups.column_sums``)
        # by encoded column, over the values present. They do not depend on the chunking.
        self.sums = (np.zeros(e), np.zeros(e), np.zeros(e))
        # numeric QIs' histograms, before and after (``passes.distributions.Distributions``, and
        # each QI's column in them), of the values present: set by the flow for the report
        self.histograms = None
        # row-ordered (no table of groups): each categorical QI's published codes counted as
        # written (the report's "after" bars: ``CentroidFlow._mixed_distributions``)
        self.after = {j: np.zeros(q.m + 1, np.int64) for j, q in enumerate(qis)
                      if q.categories is not None} if self.table is None else None

    def publish(self, frame: pl.DataFrame, lab: np.ndarray, offset: int, values: np.ndarray | None = None
                ) -> pl.DataFrame:
        """``frame`` (the input's columns but ``unread``) with the QIs replaced by, or (the
        ``unread`` ones) given, their group's published values: gathered from the table,
        or ``values`` (QIs, rows) as given (row-ordered published values)."""
        out = []
        if values is None:
            values = np.empty((len(self.mixed.qis), lab.shape[0]))
            gather_columns(lab, self.table, values)  # column-major: each row a column, no copy
        raw = self.mixed.raw
        for j, q in enumerate(self.mixed.qis):
            p = values[j]
            if q.kind in ("numeric", "date"):
                s = frame.get_column(q.name)
                if q.codes:  # declared missing codes: missing values, never part of a mean
                    s = mask_codes(s, q.codes)
                x = numeric_values(s if q.kind == "numeric" else s.to_physical()).astype(np.float64, copy=False)
                if q.name in self.exact:  # (the loss of the exact means published)
                    p = np.where(np.isnan(p), np.nan, self.exact[q.name][lab].astype(np.float64))
                if self.histograms is not None and q.name in self.histograms[2]:
                    have = ~np.isnan(x) if q.nulls else slice(None)
                    before, after, at = self.histograms
                    before.add_column(at[q.name], x[have])
                    after.add_column(at[q.name], p[have])
                if q.nulls:
                    miss = np.isnan(x)
                    none = np.isnan(p)
                    self.imputed[j] += int((miss & ~none).sum())
                    self.kept[j] += int((miss & none).sum())
                    column_sums(x[~miss], p[~miss], raw.scale, raw.mean, q.first, *self.sums)
                else:
                    column_sums(x, p, raw.scale, raw.mean, q.first, *self.sums)
                if q.kind == "numeric":
                    col = pl.Series(q.name, p, dtype=pl.Float64)
                else:
                    ints = self.exact[q.name][lab] if q.name in self.exact else np.nan_to_num(p).astype(np.int64)
                    col = pl.Series(q.name, ints, dtype=pl.Int64)
                if q.nulls:
                    col = col.set(pl.Series(np.isnan(p)), None)
                if q.name in self.declared:  # a group of missing values only: its declared code
                    code = self.declared[q.name][lab]
                    lut = pl.Series(q.name, list(q.codes), dtype=pl.Float64)
                    col = pl.select(pl.when(pl.Series(np.isnan(p) & (code >= 0))).then(lut.gather(np.maximum(code, 0)))
                                    .otherwise(col)).to_series().alias(q.name)
                out.append(col if q.kind == "numeric" else col.cast(q.dtype))
            else:
                codes = np.where(np.isnan(p), len(q.categories), p).astype(np.int64)  # (ordinal: NaN -> the null)
                if self.after is not None:
                    self.after[j] += np.bincount(codes, minlength=self.after[j].shape[0])
                out.append(self.domains[q.name].gather(codes).alias(q.name))
        return frame.with_columns(out)

    def finish(self) -> tuple[np.ndarray, np.ndarray]:
        """Per QI ``(loss, total)``: 100 x loss / total is the QI's information loss
        (numeric and date: SSE and SST on z-scores over the values present; nominal:
        values changed and rows; ordinal: the sum of |rank change| / (m - 1) and the
        rows present; with missing values scaled to the rows, so that every QI's total
        is the row count; a QI of one value: 0, 0)."""
        raw = self.mixed.raw
        present = np.array([raw.rows - self.mixed.qis[self.mixed.src[c]].nulls for c in range(len(self.mixed.names))],
                           np.float64)
        sse, sst = finish_sums(*self.sums, raw.sd, np.maximum(present, 1.0))
        loss, total = np.zeros(len(self.mixed.qis)), np.zeros(len(self.mixed.qis))
        for j, q in enumerate(self.mixed.qis):
            if q.kind in ("numeric", "date"):
                loss[j], total[j] = sse[q.first], sst[q.first]
            elif len(q.categories) > 1 or q.nulls:
                ranks = len(q.categories) - 1
                if q.kind == "nominal":
                    loss[j], total[j] = self.changed[j], raw.rows
                elif ranks > 0:
                    loss[j], total[j] = self.changed[j] / ranks, raw.rows - q.nulls
            if q.nulls and total[j] > 0:  # in row units, as every other QI's (the run's IL: the mean)
                loss[j], total[j] = loss[j] * raw.rows / total[j], float(raw.rows)
        return loss, total

    def missing(self) -> dict:
        """Per QI with missing values: the cells missing in the input, those published
        with their group's value (imputed) and those published missing; and cells with a
        value published missing (a nominal group whose mode is the missing value)."""
        return {q.name: {"missing": int(q.nulls), "imputed": int(self.imputed[j]), "kept_missing": int(self.kept[j]),
                         "suppressed": int(self.suppressed[j])}
                for j, q in enumerate(self.mixed.qis) if q.nulls}
