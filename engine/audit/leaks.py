"""Columns that publish a QI, beside the original (``verify``'s check "leaks") or in
the release (derived columns): see ``engine.audit.verify``'s docstring.

Written here again, not imported from ``engine.passes.leak``: verify shares no code with
the engine that made the release (the same rule, checked independently).
"""

from __future__ import annotations

import math

import numpy as np
import polars as pl

from .classes import aligned_frames, is_numeric

_LEAK_SEED = 0x766572696679  # Polars' hash seed here ("verify")
LEAK_KEEP = 1 << 15  # distinct (value, partner) pairs a direction keeps; above, sampled by value
AFFINE_TOLERANCE = 1e-9  # |c - (a + b q)| <= this x (|c| + |a| + |b q|): an exact affine relation
_U64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def _value_keys(s: pl.Series) -> np.ndarray:
    """A uint64 key per row of the value of ``s`` (a null: a value of its own): Polars'
    hash, mixed (splitmix64's finalizer) so that every bit is uniform."""
    if isinstance(s.dtype, (pl.Categorical, pl.Enum)):
        s = s.cast(pl.String)
    try:
        h = s.hash(seed=_LEAK_SEED).to_numpy().astype(np.uint64)
    except Exception:  # a type Polars does not hash: its text
        h = s.cast(pl.String).hash(seed=_LEAK_SEED).to_numpy().astype(np.uint64)
    with np.errstate(over="ignore"):
        z = h ^ (h >> np.uint64(30))
        z = z * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def _numbers(s: pl.Series) -> np.ndarray:
    """float64 values (dates on their epoch value; a null or a text that is not a number: NaN)."""
    if s.dtype.is_temporal():
        s = s.to_physical()
    if s.dtype == pl.Boolean or s.dtype.is_nested() or s.dtype in (pl.Binary, pl.Object):
        return np.full(s.len(), np.nan)
    return s.cast(pl.Float64, strict=False).fill_null(float("nan")).to_numpy()


class _Line:
    """Whether ``c = a + b q`` holds on every row so far (``a``, ``b`` from the first two
    rows of different q; a missing value: not affine)."""

    def __init__(self):
        self.q1 = self.c1 = self.a = self.b = None
        self.ok = True

    def add(self, q: np.ndarray, c: np.ndarray) -> None:
        if not self.ok or not q.shape[0]:
            return
        fin = np.isfinite(q) & np.isfinite(c)
        if not fin.all():
            self.ok = False
            return
        if self.q1 is None:
            self.q1, self.c1 = float(q[0]), float(c[0])
        if self.b is None:
            other = np.flatnonzero(q != self.q1)
            upto = int(other[0]) if other.size else q.shape[0]
            if (c[:upto] != self.c1).any():
                self.ok = False
                return
            if not other.size:
                return
            self.b = (float(c[upto]) - self.c1) / (float(q[upto]) - self.q1)
            self.a = self.c1 - self.b * self.q1
        with np.errstate(invalid="ignore", over="ignore"):
            pred = self.a + self.b * q
            bound = AFFINE_TOLERANCE * (np.abs(c) + abs(self.a) + np.abs(self.b * q))
            self.ok = bool((np.abs(c - pred) <= bound).all())


class _OneToOne:
    """Whether a column of the original and a QI correspond one-to-one, chunk by chunk: per
    direction, the distinct (value, partner) pairs (hashed), each value with one partner;
    a value with two: not one-to-one (``dead``). Memory: at most ``LEAK_KEEP`` pairs a
    direction; above, only the values whose key is at most a limit, halved as needed
    (every row of a kept value: the dependency is tested exactly on them)."""

    def __init__(self, column: str, qi: str, numeric: bool):
        self.column, self.qi = column, qi
        self.limit = [_U64, _U64]
        self.seen = [None, None]
        self.dead = self.repeats = False
        self.line = _Line() if numeric else None

    def add(self, kc: np.ndarray, kq: np.ndarray) -> None:
        for d, (k, v) in enumerate(((kc, kq), (kq, kc))):
            keep = k <= self.limit[d]
            part = pl.DataFrame({"k": k[keep], "v": v[keep]}).group_by("k", "v").agg(pl.len().alias("n"))
            merged = part if self.seen[d] is None else \
                pl.concat([self.seen[d], part]).group_by("k", "v").agg(pl.col("n").sum())
            if merged.height != merged.get_column("k").n_unique():
                self.dead = True
                return
            self.repeats = self.repeats or bool((merged.get_column("n") > 1).any())
            while merged.height > LEAK_KEEP:
                self.limit[d] = self.limit[d] >> np.uint64(1)
                merged = merged.filter(pl.col("k") <= self.limit[d])
            self.seen[d] = merged

    def leaks(self, varied: bool) -> bool:
        """One-to-one, with a QI of several values, and not two row-unique columns (whose
        correspondence the data cannot tell from chance), unless exactly affine."""
        if self.dead or not varied:
            return False
        return self.repeats or (self.line is not None and self.line.ok and self.line.b is not None)


def leak_check(orig, qi, columns, chunk_rows) -> tuple[str, bool, str]:
    """Check "leaks": no column passed through unchanged (``columns``) corresponds one-to-one
    with a QI of the original (a null is a value): such a column publishes the QI
    unaggregated. A QI of one value is left out, and so are two row-unique columns but
    for an exact affine relation (as ``anonymize``'s guard). Reads the original's
    columns until every pair has shown a value with two partners (usually one chunk);
    the pairs still one-to-one then on their own columns."""
    schema = orig.schema
    qi = [q for q in qi if q in schema]
    pairs = [_OneToOne(c, q, is_numeric(schema[q]) or schema[q].is_temporal()) for c in columns for q in qi]
    if not pairs:
        return ("leaks", True, "no column passed through unchanged beside the quasi-identifiers")
    first: dict = {}
    varied = {q: False for q in qi}
    done = 0
    order = list(schema.names())

    def needed(ps):
        want = {c for p in ps for c in (p.column, p.qi)}
        return [c for c in order if c in want]

    alive = pairs
    reading = needed(alive)
    frames = orig.iter_frames(reading, chunk_rows)
    while alive:
        got = next(frames, None)
        if got is None:
            break
        offset, frame = got
        if offset + frame.height <= done:
            continue
        if offset < done:
            frame, offset = frame.slice(done - offset), done
        done = offset + frame.height
        keys = {c: _value_keys(frame.get_column(c)) for c in reading}
        for q in {p.qi for p in alive}:
            k = keys[q]
            if k.shape[0] and q not in first:
                first[q] = k[0]
            varied[q] = varied[q] or bool(k.shape[0] and (k != first[q]).any())
        for p in alive:
            p.add(keys[p.column], keys[p.qi])
            if not p.dead and not p.repeats and p.line is not None and p.line.ok:
                p.line.add(_numbers(frame.get_column(p.qi)), _numbers(frame.get_column(p.column)))
        alive = [p for p in alive if not p.dead]
        want = needed(alive)
        if want and len(want) <= len(reading) // 2:  # on fewer columns, from the next row
            reading = want
            frames = orig.iter_frames(reading, chunk_rows)
    found = [p for p in alive if p.leaks(varied[p.qi])]
    if found:
        p = found[0]
        more = f" ({len(found)} such pairs: {', '.join(f'{x.column}~{x.qi}' for x in found)})" if len(found) > 1 else ""
        return ("leaks", False, f"column {p.column!r} is passed through unchanged and corresponds one-to-one with "
                                f"quasi-identifier {p.qi!r}: it publishes it unaggregated{more}")
    return ("leaks", True, f"no column passed through corresponds one-to-one with a quasi-identifier "
                           f"({len(columns)} column(s) x {len(qi)} QI(s))")


def derived_columns(out, pub, changed, qi, chunk_rows) -> dict:
    """Of the ``changed`` columns (not the original's values), those that are a function of
    one QI's published values in the release (``{column: qi}``, the first such QI), and not
    a constant (but beside a QI of one published value): a column recomputed from the
    published QI (``anonymize --derived``) adds nothing to it. Exact: the distinct
    (published value, column value) pairs, per published value at most one (memory: about
    one row per class)."""
    cands = [(c, q) for c in changed for q in qi]
    if not cands:
        return {}
    seen: dict = {}
    cols = list(dict.fromkeys([*changed, *(p for q in qi for p in pub[q])]))
    for _, frame in out.iter_frames(cols, chunk_rows):
        for c, q in cands:
            part = frame.select(*pub[q], c).unique()
            merged = part if (c, q) not in seen else pl.concat([seen[(c, q)], part]).unique()
            if merged.height != merged.select(pub[q]).unique().height:
                merged = None
            seen[(c, q)] = merged
        cands = [x for x in cands if seen[x] is not None]
        if not cands:
            break
    out_map: dict = {}
    for c, q in cands:  # (a column made constant follows nothing: it is changed, unless its QI is one class)
        m = seen[(c, q)]
        if m.get_column(c).n_unique() > 1 or m.height == 1:
            out_map.setdefault(c, q)
    return out_map


# --- dependencies beyond one-to-one (issue 39): the same tests as anonymize's guard ----------

DEP_RATE = 0.95      # a column gives the QI's original value (its cell's most frequent) on this share of rows
DEP_GAIN = 0.5       # ... removing at least this share of what the published QI leaves undetermined
DEP_MIN_ROWS = 30    # rows in cells of 2 rows or more, at least
DEP_COVER = 0.6      # ... and this share of the kept rows
DEP_KEEP = 1 << 16   # distinct (cell, published, original) triples a pair keeps; above, sampled by cell
DEP_SAMPLE = 1 << 15  # the row sample of the rank and order tests
DEP_RHO = 0.99       # |Spearman's rho| at least this
DEP_BAND = 0.01      # ranks within this share of the sample ...
DEP_SHARE = 0.95     # ... on at least this share of its rows
DEP_VALUES = 10      # distinct original QI values in the sample, at least (rank test)
DEP_ORDER = 0.9      # neighbours in the column's order sharing the original QI value
DEP_ORDER_VALUES = 100
DEP_ORDER_Z = 4.0    # the release's row order: neighbours alike above chance by this many standard errors


class _RowBlocks:
    """The release's row order against one QI's original values: neighbouring rows that
    share it, and chance (the sum of its squared frequencies: counts per value, sampled
    by the value's key above ``DEP_KEEP`` values and scaled back)."""

    def __init__(self):
        self.prev = None
        self.pairs = self.same = 0
        self.limit = _U64
        self.counts: pl.DataFrame | None = None

    def add(self, k: np.ndarray) -> None:
        if not k.shape[0]:
            return
        both = k if self.prev is None else np.concatenate([[self.prev], k])
        self.pairs += both.shape[0] - 1
        self.same += int((both[1:] == both[:-1]).sum())
        self.prev = k[-1]
        part = pl.DataFrame({"v": k[k <= self.limit]}).group_by("v").agg(pl.len().cast(pl.Float64).alias("n"))
        tab = part if self.counts is None else pl.concat([self.counts, part]).group_by("v").agg(pl.col("n").sum())
        while tab.height > DEP_KEEP:
            self.limit = self.limit >> np.uint64(1)
            tab = tab.filter(pl.col("v") <= self.limit)
        self.counts = tab

    def leaks(self) -> tuple | None:
        rows = self.pairs + 1
        if self.pairs < DEP_ORDER_VALUES or self.counts is None:
            return None
        f = (float(self.limit) + 1.0) / 2.0 ** 64
        chance = min(float((self.counts.get_column("n") ** 2).sum()) / f / (rows * rows), 1.0)
        same = self.same / self.pairs
        margin = DEP_ORDER_Z * math.sqrt(max(chance * (1.0 - chance), 1e-12) / self.pairs)
        if same >= DEP_ORDER and chance < 1.0 and same >= chance + DEP_GAIN * (1.0 - chance) and \
                same - chance >= margin:
            return (self.pairs, same, chance)
        return None


def _row_keys(offset: int, n: int) -> np.ndarray:
    """A uniform uint64 key per row number (splitmix64 of the row number)."""
    with np.errstate(over="ignore"):
        z = np.arange(offset, offset + n, dtype=np.uint64) + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def _joint_keys(frame: pl.DataFrame, cols) -> np.ndarray:
    """One key per row of the values of ``cols`` (a QI published as a range: both ends)."""
    keys = [_value_keys(frame.get_column(c)) for c in cols]
    h = keys[0]
    with np.errstate(over="ignore"):
        for k in keys[1:]:
            h = (h * np.uint64(0x100000001B3)) ^ k
    return h


class _Dependency:
    """Column ``column`` of the release against the original values of QI ``qi``: counts of
    (cell of the column's value, published QI, original QI), sampled by the cell's key."""

    def __init__(self, column: str, qi: str):
        self.column, self.qi = column, qi
        self.limit = _U64
        self.tab: pl.DataFrame | None = None

    def add(self, cell: np.ndarray, pub: np.ndarray, orig: np.ndarray) -> None:
        keep = cell <= self.limit
        part = pl.DataFrame({"c": cell[keep], "p": pub[keep], "o": orig[keep]}).group_by("c", "p", "o").agg(
            pl.len().cast(pl.UInt64).alias("n"))
        tab = part if self.tab is None else pl.concat([self.tab, part]).group_by("c", "p", "o").agg(pl.col("n").sum())
        while tab.height > DEP_KEEP:
            self.limit = self.limit >> np.uint64(1)
            tab = tab.filter(pl.col("c") <= self.limit)
        self.tab = tab

    def figures(self) -> tuple:
        """``(rows in repeated cells, rate, the published QI's rate on them, kept rows)``."""
        tab = self.tab
        if tab is None or not tab.height:
            return (0, 0.0, 0.0, 0)
        by_o = tab.group_by("c", "o").agg(pl.col("n").sum())
        cells = by_o.group_by("c").agg(pl.col("n").sum().alias("rows"), pl.col("n").max().alias("top")).join(
            tab.group_by("c").agg(pl.col("p").n_unique().alias("published")), on="c")
        kept = int(cells.get_column("rows").sum())
        # a cell whose rows all publish one value of the QI gives back nothing beyond it (household mates
        # published alike: --household-column): not evidence
        multi = cells.filter((pl.col("rows") >= 2) & (pl.col("published") >= 2))
        e = int(multi.get_column("rows").sum()) if multi.height else 0
        if not e:
            return (0, 0.0, 0.0, kept)
        base = tab.join(multi.select("c"), on="c").group_by("p", "o").agg(pl.col("n").sum()).group_by("p").agg(
            pl.col("n").max().alias("top"))
        return (e, float(multi.get_column("top").sum()) / e, float(base.get_column("top").sum()) / e, kept)

    def leaks(self) -> tuple | None:
        e, rate, base, kept = self.figures()
        if e >= DEP_MIN_ROWS and e >= DEP_COVER * kept and rate >= DEP_RATE and rate > base \
                and rate >= base + DEP_GAIN * (1.0 - base):
            return (e, rate, base)
        return None


def _ranks(x: np.ndarray) -> np.ndarray:
    return pl.Series(x).rank("average").to_numpy().astype(np.float64) / max(x.shape[0], 1)


def _rank_figures(c: np.ndarray, o: np.ndarray) -> tuple:
    """``(rows, |rho|, share of ranks within DEP_BAND, original values)`` over the rows with both."""
    ok = np.isfinite(c) & np.isfinite(o)
    c, o = c[ok], o[ok]
    n = int(c.shape[0])
    values = int(np.unique(o).shape[0]) if n else 0
    if n < 2 or values < 2 or np.all(c == c[0]):
        return (n, 0.0, 0.0, values)
    rc, ro = _ranks(c), _ranks(o)
    rho = float(np.corrcoef(rc, ro)[0, 1])
    band = max(float(np.mean(np.abs(rc - ro) <= DEP_BAND)), float(np.mean(np.abs(1.0 + 1.0 / n - rc - ro) <= DEP_BAND)))
    return (n, abs(rho) if np.isfinite(rho) else 0.0, band, values)


def _order_figures(c: pl.Series, ok: np.ndarray) -> tuple:
    """``(values, neighbour share, chance)``: one row per value of ``c``, in ``c``'s order."""
    if c.dtype == pl.String:
        x = c.cast(pl.Float64, strict=False)
        c = x if x.null_count() == c.null_count() else c
    f = pl.DataFrame({"c": c, "o": ok}).drop_nulls("c")
    if f.get_column("c").dtype.is_float():
        f = f.filter(pl.col("c").is_not_nan())
    f = f.unique("c", keep="first", maintain_order=True)
    if f.height < 3:
        return (f.height, 0.0, 1.0)
    try:
        f = f.sort("c")
    except Exception:
        return (0, 0.0, 1.0)
    o = f.get_column("o").to_numpy()
    p = f.get_column("o").value_counts().get_column("count").to_numpy() / f.height
    return (f.height, float(np.mean(o[1:] == o[:-1])), float((p * p).sum()))


def dependency_check(out, orig, qi, pub, columns, extra, chunk_rows) -> tuple[str, bool, str]:
    """Check "dependencies": no release column passed through (``columns``, or not in the
    original: ``extra``) gives back a QI's original value better than the published QI:
    a functional dependency (its cells' most frequent original value on at least
    ``DEP_RATE`` of the rows in repeated cells whose rows publish several values of the
    QI, against the published QI's classes on the same rows: a cell published alike, as
    household mates under --household-column, gives back nothing beyond it), a monotone transform or near-copy (ranks on a row sample), ids in blocks
    of the QI (the order test, pass-through columns only). Each column alone: the joint
    test with the strata is anonymize's guard's. And the release's row order (it keeps
    the input's): rows in blocks of a QI's original value, or the row position following
    its order better than the published QI (``_row_order_findings``; per row, no strata)."""
    qi = [q for q in qi if q in orig.schema]
    cands = [c for c in list(columns) + list(extra)]
    if not qi:
        return ("dependencies", True, "no column beside the quasi-identifiers")
    deps = [_Dependency(c, q) for c in cands for q in qi]
    pubs = list(dict.fromkeys(p for q in qi for p in pub[q]))
    out_cols = list(dict.fromkeys(cands + pubs))
    limit, sample = _U64, None
    blocks = {q: _RowBlocks() for q in qi}
    for offset, f_out, f_orig in aligned_frames(out, orig, out_cols, qi, chunk_rows):
        cell = {c: _value_keys(f_out.get_column(c)) for c in cands}
        okeys = {q: _value_keys(f_orig.get_column(q)) for q in qi}
        for q in qi:
            blocks[q].add(okeys[q])
        pkeys = {q: _joint_keys(f_out, pub[q]) for q in qi}
        for d in deps:
            d.add(cell[d.column], pkeys[d.qi], okeys[d.qi])
        rk = _row_keys(offset, f_out.height)
        keep = pl.Series(rk <= limit)
        part = pl.concat(([f_out.select(cands).filter(keep)] if cands else []) + [
                          f_orig.select([pl.col(q).alias(f"__orig_{q}") for q in qi]).filter(keep),
                          f_out.select([pl.col(pub[q][0]).alias(f"__pub_{q}") for q in qi]).filter(keep)],
                         how="horizontal").with_columns(pl.Series("__row", rk[rk <= limit]),
                                                        pl.Series("__pos", np.flatnonzero(rk <= limit) + offset,
                                                                  dtype=pl.Float64))
        sample = part if sample is None else pl.concat([sample, part], how="vertical_relaxed")
        while sample.height > DEP_SAMPLE:
            limit = limit >> np.uint64(1)
            sample = sample.filter(pl.col("__row") <= limit)
    found = []
    for d in deps:
        got = d.leaks()
        if got is not None:
            e, rate, base = got
            found.append((d.column, d.qi, f"determines its original value on {100 * rate:.1f} % of the {e:,} rows "
                                          f"sharing a value (the published {d.qi}: {100 * base:.1f} %)"))
    if sample is not None and sample.height:
        found += _sample_findings(sample, cands, set(columns), qi)
    found += _row_order_findings(blocks, sample, qi)
    if found:
        c, q, what = found[0]
        names = sorted({(x or "(row order)") + "~" + y for x, y, _ in found})
        more = f" ({len(found)} findings: {', '.join(names)})" if len(found) > 1 else ""
        if c is None:
            return ("dependencies", False, f"the release's row order gives back quasi-identifier {q!r}: the rows "
                                           f"{what}{more}")
        where = "passed through unchanged" if c in set(columns) else "not in the original"
        return ("dependencies", False, f"column {c!r} ({where}) gives back quasi-identifier {q!r}: it {what}{more}")
    return ("dependencies", True, f"no column determines, follows or is ordered by a quasi-identifier "
                                  f"({len(cands)} column(s) x {len(qi)} QI(s))")


def _row_order_findings(blocks: dict, sample, qi) -> list:
    """The release's row order (record i of the release is record i of the input): rows
    in blocks of a QI's original value (``_RowBlocks``), or the row position following
    its order better than the published QI does (ranks on the row sample)."""
    found = []
    for q in qi:
        got = blocks[q].leaks()
        if got is not None:
            m, same, chance = got
            found.append((None, q, f"run in its blocks ({100 * same:.1f} % of {m:,} neighbouring rows share its "
                                   f"original value, {100 * chance:.1f} % by chance)"))
            continue
        if sample is None or not sample.height:
            continue
        o = _numbers(sample.get_column(f"__orig_{q}"))
        n, rho, band, values = _rank_figures(sample.get_column("__pos").to_numpy(), o)
        p_fig = _rank_figures(_numbers(sample.get_column(f"__pub_{q}")), o)
        if n >= 200 and values >= DEP_VALUES and (
                (rho >= DEP_RHO and 1.0 - rho <= DEP_GAIN * (1.0 - p_fig[1]))
                or (band >= DEP_SHARE and band >= p_fig[2] + DEP_GAIN * (1.0 - p_fig[2]))):
            found.append((None, q, f"are sorted by it (row position: rank correlation {rho:.4f}, ranks within 1 % "
                                   f"on {100 * band:.1f} % of {n:,} sampled rows; the published {q}: "
                                   f"{p_fig[1]:.4f}, {100 * p_fig[2]:.1f} %)"))
    return found


def _sample_findings(sample: pl.DataFrame, cands, passed, qi) -> list:
    """The rank and order tests on the row sample: the column against the original QI,
    the published QI's own figures as the baseline (ranks)."""
    found = []
    for q in qi:
        o = _numbers(sample.get_column(f"__orig_{q}"))
        p_fig = _rank_figures(_numbers(sample.get_column(f"__pub_{q}")), o)
        okeys = _value_keys(sample.get_column(f"__orig_{q}"))
        for c in cands:
            n, rho, band, values = _rank_figures(_numbers(sample.get_column(c)), o)
            if n >= 200 and values >= DEP_VALUES and (
                    (rho >= DEP_RHO and 1.0 - rho <= DEP_GAIN * (1.0 - p_fig[1]))
                    or (band >= DEP_SHARE and band >= p_fig[2] + DEP_GAIN * (1.0 - p_fig[2]))):
                found.append((c, q, f"follows its order (rank correlation {rho:.4f}, ranks within 1 % on "
                                    f"{100 * band:.1f} % of {n:,} sampled rows; the published {q}: {p_fig[1]:.4f}, "
                                    f"{100 * p_fig[2]:.1f} %)"))
            elif c in passed:
                m, same, chance = _order_figures(sample.get_column(c), okeys)
                if m >= DEP_ORDER_VALUES and same >= DEP_ORDER and chance < 1.0 and \
                        same >= chance + DEP_GAIN * (1.0 - chance):
                    found.append((c, q, f"is ordered in its blocks ({100 * same:.1f} % of {m:,} sampled values' "
                                        f"neighbours share its original value, {100 * chance:.1f} % by chance)"))
    return found
