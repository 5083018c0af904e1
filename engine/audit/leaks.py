"""Columns that publish a QI, beside the original (``verify``'s check "leaks") or in
the release (derived columns): see ``engine.audit.verify``'s docstring.

Written here again, not imported from ``engine.passes.leak``: verify shares no code with
the engine that made the release (the same rule, checked independently).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from .classes import is_numeric

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
