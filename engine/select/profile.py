"""``profile``: stages 1-5 over a source, and the key attributes the coordinator groups on (``select_key_attributes``)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Sequence

import numba
import numpy as np

from ..budget import check_command, early_piece, parquet_buffer, parse_limit
from ..errors import EngineError
from ..io import open_source
from ..io.csvfile import csv_options
from .binning import (BinPlan, DEFAULT_CHUNK_ROWS, DEFAULT_LEVELS, MAXIMIZE, MAX_CELLS, MEASURES, cell_layout,
                      check_settings, plan_bins, resolve_columns)
from .counting import Counts, count_pairs, pearson_matrix
from .measures import entropy, gaussian_matrix, measure_matrix
from .tree import definition5, emad_candidates, emad_top, spanning_tree, tree_degrees, tree_strength


@dataclass
class ProfileResult:
    """Dependency matrix, tree and key attributes of a profile (see ``profile``)."""

    columns: list[str]
    measure: str
    matrix: np.ndarray
    tree_edges: list[tuple[str, str]]
    edge_weights: list[float]
    degrees: dict[str, int]
    key_attributes: list[str]
    selection: str
    n_rows: int
    plans: list[BinPlan] = field(default_factory=list)
    entropy: dict[str, float] | None = None
    nulls: dict[str, int] | None = None
    counts: Counts | None = None
    rho: np.ndarray | None = None
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def maximize(self) -> bool:
        return MAXIMIZE[self.measure]

    def edge_index(self) -> np.ndarray:
        pos = {c: j for j, c in enumerate(self.columns)}
        return np.array([(pos[a], pos[b]) for a, b in self.tree_edges], np.int64).reshape(-1, 2)

    def candidates(self, count: int) -> list[list[str]]:
        """All key-attribute sets of size ``count`` the degree ranking allows (``emad_candidates``)."""
        deg = np.array([self.degrees[c] for c in self.columns])
        return [[self.columns[v] for v in s] for s in emad_candidates(deg, count)]

    def to_dict(self) -> dict:
        """JSON-ready: ``columns``, ``matrix`` (non-finite values as null), ``tree_edges``, ``degrees``, ``key_attributes``, ..."""

        def num(x):
            x = float(x)
            return x if math.isfinite(x) else None

        out = {
            "columns": list(self.columns),
            "measure": self.measure,
            "tree": "maximum" if self.maximize else "minimum",
            "n_rows": int(self.n_rows),
            "matrix": [[num(v) for v in row] for row in self.matrix],
            "tree_edges": [[a, b] for a, b in self.tree_edges],
            "edge_weights": [num(w) for w in self.edge_weights],
            "degrees": {c: int(v) for c, v in self.degrees.items()},
            "key_attributes": list(self.key_attributes),
            "selection": self.selection,
        }
        if self.entropy is not None:
            out["entropy"] = {c: num(v) for c, v in self.entropy.items()}
        if self.nulls is not None:
            out["nulls"] = dict(self.nulls)
        if self.plans:
            out["bins"] = {p.column: p.describe() for p in self.plans}
        if self.seconds:
            out["seconds"] = {k: round(v, 6) for k, v in self.seconds.items()}
        return out

    def render(self, digits: int = 4) -> str:
        """Plain-text report: matrix, tree edges, degrees, key attributes."""
        w = max(8, digits + 5, *(len(c) for c in self.columns))
        lines = [
            f"measure: {self.measure} ({'maximum' if self.maximize else 'minimum'} spanning tree), {self.n_rows} rows",
            " " * w + "".join(f"{c:>{w}}" for c in self.columns),
        ]
        for c, row in zip(self.columns, self.matrix):
            lines.append(f"{c:<{w}}" + "".join(f"{v:>{w}.{digits}f}" for v in row))
        lines.append("tree edges (in the order Kruskal took them):")
        for (a, b), x in zip(self.tree_edges, self.edge_weights):
            lines.append(f"  {a} - {b}  {x:.{digits}f}")
        lines.append("degrees: " + ", ".join(f"{c} {v}" for c, v in self.degrees.items()))
        lines.append(f"key attributes ({self.selection}): " + ", ".join(self.key_attributes))
        return "\n".join(lines)


def profile(
    source,
    columns: Sequence[str] | None = None,
    measure: str = "mi-distance",
    *,
    width: float | None = None,
    bins: int | None = None,
    binning: str = "equal",
    levels: int = DEFAULT_LEVELS,
    count: int | None = None,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    threads: int | None = None,
    max_cells: int = MAX_CELLS,
    separator: str | None = None,
    null_values=None,
    encoding: str | None = None,
    memory_limit: int | str | None = None,
) -> ProfileResult:
    """All-pairs dependency profile of ``columns`` of ``source`` and its key attributes.

    ``source`` is anything ``engine.io.open_source`` opens (path, glob, folder,
    Polars frame, NumPy array). ``measure``: ``mi-distance`` (minimum spanning tree,
    Sun et al. (AMA)), ``emim``, ``chi2`` or ``gaussian`` (maximum spanning tree, Oommen & Fayyoumi (EMAD)).
    Key attributes: Sun et al. (AMA)'s Definition 5 when ``count`` is None, else Oommen & Fayyoumi (EMAD)'s
    EMAD top-``count``. ``width`` / ``bins`` / ``binning`` / ``levels``: see
    ``plan_bins`` (``gaussian`` uses none of them). ``threads``: Numba threads for
    the counting kernel (default: Numba's setting). ``separator``, ``null_values``,
    ``encoding``: how a CSV input is read (``engine.io.csvfile.CsvOptions``).
    ``memory_limit`` (``"1GiB"``, bytes): refused (one line naming the least limit) when
    the counts would not fit (``_check_limit``); a CSV is then read in pieces.
    """
    limit = parse_limit(memory_limit)
    src = open_source(source, csv=csv_options(separator, null_values, encoding)).bounded(early_piece(limit))
    try:
        return _profile(src, columns, measure, width, bins, binning, levels, count, chunk_rows, threads, max_cells,
                        limit)
    finally:
        src.close()


def _check_limit(limit, src, cols, chunk_rows, threads, plans=()) -> None:
    """``--memory-limit``: the count cells (one private copy a thread, their sum and the
    tables cut from it), three chunks of codes and values in flight (the reader's two
    ahead), what pyarrow pre-buffers. Checked before the binning pass (no cells yet: they
    are a few thousand for the usual bins) and again after it, before the counts."""
    if limit is None:
        return
    cells = cell_layout(plans)[2] if plans else 0
    n_threads = threads or numba.get_num_threads()
    state = 8 * cells * (n_threads + 2) + 3 * 24 * chunk_rows * len(cols)
    buffered = parquet_buffer(src.paths, cols) if src.kind == "parquet" else 0
    check_command(limit, "profile", src.count_rows(), len(cols), state, buffered=buffered, csv=src.kind == "csv")


def _profile(src, columns, measure, width, bins, binning, levels, count, chunk_rows, threads,
             max_cells, limit=None) -> ProfileResult:
    cols = resolve_columns(src, columns)
    src.check_reconciled(cols)
    check_settings(cols, measure, width, bins, binning, levels, count, chunk_rows, threads)
    _check_limit(limit, src, cols, chunk_rows, threads)
    t0 = time.perf_counter()
    plans = plan_bins(src, cols, width=width, bins=bins, binning=binning, levels=levels, max_cells=max_cells)
    _check_limit(limit, src, cols, chunk_rows, threads, plans)
    t1 = time.perf_counter()
    ent = nulls = counts = rho = None
    if measure == "gaussian":
        rho, n_rows = pearson_matrix(src, plans, chunk_rows=chunk_rows, threads=threads)
        t2 = time.perf_counter()
        M = gaussian_matrix(rho)
    else:
        counts = count_pairs(src, plans, chunk_rows=chunk_rows, threads=threads)
        t2 = time.perf_counter()
        n_rows = counts.n_rows
        M = measure_matrix(counts, measure)
        ent = {c: entropy(m) for c, m in zip(cols, counts.marginals)}
        nulls = {c: int(m[-1]) for c, m in zip(cols, counts.marginals)}
    out = _finish(cols, measure, M, count, n_rows, plans, ent, nulls, counts, rho)
    out.seconds = {"plan": t1 - t0, "count": t2 - t1, "tree": time.perf_counter() - t2}
    return out


def _finish(cols, measure, M, count, n_rows, plans=(), ent=None, nulls=None, counts=None, rho=None) -> ProfileResult:
    d = len(cols)
    maximize = MAXIMIZE[measure]
    edges = spanning_tree(M, maximize)
    deg = tree_degrees(edges, d)
    strength = tree_strength(edges, M, maximize)
    if count is None:
        keys, selection = definition5(deg, strength), "Sun et al. (AMA) definition 5"
    else:
        keys, selection = emad_top(deg, count, strength), f"Oommen & Fayyoumi (EMAD) EMAD, top {count} by degree"
    return ProfileResult(
        columns=list(cols),
        measure=measure,
        matrix=M,
        tree_edges=[(cols[i], cols[j]) for i, j in edges],
        edge_weights=[float(M[i, j]) for i, j in edges],
        degrees={c: int(v) for c, v in zip(cols, deg)},
        key_attributes=[cols[v] for v in keys],
        selection=selection,
        n_rows=int(n_rows),
        plans=list(plans),
        entropy=ent,
        nulls=nulls,
        counts=counts,
        rho=rho,
    )


def profile_from_matrix(columns: Sequence[str], matrix, measure: str = "mi-distance", count: int | None = None) -> ProfileResult:
    """Tree and key attributes of a given dependency matrix (for printed matrices such as Sun et al. (AMA)'s)."""
    if measure not in MEASURES:
        raise EngineError(f"unknown measure {measure!r} (choose from {', '.join(MEASURES)})")
    M = np.asarray(matrix, dtype=np.float64)
    if M.ndim != 2 or M.shape != (len(columns), len(columns)):
        raise EngineError(f"matrix must be {len(columns)} x {len(columns)}, got shape {M.shape}")
    return _finish(list(columns), measure, M, count, 0)


def select_key_attributes(
    source,
    qi: Sequence[str],
    measure: str = "mi-distance",
    count: int | None = None,
    **options,
) -> list[str]:
    """Key attributes among the quasi-identifiers ``qi`` (Sun et al. (AMA) Definition 5, or EMAD top-``count``).

    ``options`` go to ``profile`` (``width``, ``bins``, ``binning``, ``levels``,
    ``chunk_rows``, ``threads``). The order is the ranking order (most central first).
    """
    return profile(source, qi, measure, count=count, **options).key_attributes
