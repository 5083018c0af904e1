"""Driver for the sensitive-attribute methods: ``maxent`` (seed 001) and ``mnqia`` (seed 002).

Both publish *generalized* quasi-identifiers (``<col>_min`` / ``<col>_max`` ranges,
or the class mean; categorical QIs as the set of their values) rather than
centroids, so they have their own driver beside the MDAV coordinator:
validate -> load the QI and SA columns -> partition (``engine.maxent`` /
``engine.mnqia``) -> generalize -> write through a temporary file -> report.

Limitation (documented in the README): these methods run on the whole table in
memory (the QI and SA columns only); they are not yet split into blocks by the
streaming coordinator.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field

import numpy as np
import polars as pl

from .errors import EngineError
from .io.sink import atomic_output, check_destination, output_format, write_frame
from .io.source import open_source
from .report import PeakRSS

SENSITIVE_METHODS = ("maxent", "mnqia")


@dataclass
class SensitiveReport:
    method: str
    rows: int
    classes: int
    min_class_size: int
    max_class_size: int
    wall_seconds: float
    peak_rss_bytes: int
    metrics: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, default=float)

    def summary(self) -> str:
        m = ", ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in self.metrics.items()
                      if not isinstance(v, (dict, list)))
        return (f"rows {self.rows:,}  classes {self.classes:,}  class size {self.min_class_size}.."
                f"{self.max_class_size}  (method {self.method})\n{m}\n"
                f"wall {self.wall_seconds:.2f} s  peak RSS {self.peak_rss_bytes / 2**20:.0f} MiB")


def anonymize_sensitive(data, dest, qi, method, *, sa=None, k=None, epsilon=None, seed=0,
                        numeric_output="range", tmp_dir=None):
    """Run ``maxent`` or ``mnqia``; write to ``dest`` (or return the table when None).

    Returns ``(table or None, labels, SensitiveReport)``.
    """
    from .maxent import encode_table, generalize, maxent_partition
    from .mnqia import mdav_range_loss, mnqia_partition

    if method not in SENSITIVE_METHODS:
        raise EngineError(f"unknown method {method!r}")
    if isinstance(qi, str):
        qi = [c.strip() for c in qi.split(",") if c.strip()]
    qi = list(qi)
    t0 = time.perf_counter()
    with PeakRSS() as rss:
        source = open_source(data)
        fmt = None
        if dest is not None:
            check_destination(dest, source.paths)
            fmt = output_format(dest)
        for c in qi + ([sa] if sa else []):
            if c not in source.columns:
                raise EngineError(f"column {c!r} not found in {source.label}")
        df = source.collect()
        if df.height == 0:
            raise EngineError(f"{source.label} has no rows")
        if method == "maxent":
            if not sa:
                raise EngineError("method maxent needs a sensitive attribute: sa (--sa COL)")
            enc = encode_table(df, qi, sa)
            res = maxent_partition(enc.Q, enc.sa_codes, epsilon=epsilon, k=k, seed=seed, qi_kinds=enc.kinds,
                                   cardinalities=enc.cardinalities, qi_names=qi, sa_name=sa)
            labels, kinds = res.labels, dict(zip(qi, enc.kinds))
            metrics = {"epsilon": res.epsilon, "table_entropy": res.table_entropy,
                       "entropy_min": res.entropy_min, "entropy_mean": res.entropy_mean, "ncp": res.ncp,
                       "ncp_normalized": res.ncp_normalized, "cdm": res.cdm, "merges": res.merges,
                       "forced_single_class": bool(res.forced_single_class),
                       "entropy_hist": _plain(res.entropy_hist)}
        else:
            if k is None:
                raise EngineError("method mnqia needs k")
            if sa:
                raise EngineError("method mnqia takes no sa")
            for c in qi:
                if not (df.schema[c].is_numeric() and df.schema[c] != pl.Boolean):
                    raise EngineError(f"column {c!r} is not numeric ({df.schema[c]}); mnqia needs numeric QIs")
                if df[c].null_count() or df[c].cast(pl.Float64).is_nan().any():
                    raise EngineError(f"column {c!r} has a missing value")
            X = np.ascontiguousarray(df.select(qi).cast(pl.Float64).to_numpy())
            res = mnqia_partition(X, k)
            labels, kinds = res.labels, None
            il_mdav = mdav_range_loss(X, k)
            metrics = {"il": res.il, "il_percent": res.il_percent, "mdav_range_il": il_mdav[0],
                       "mdav_range_il_percent": il_mdav[1]}
        table = generalize(df, labels, qi, kinds=kinds, numeric_output=numeric_output)
        sizes = np.bincount(labels)
        if sizes.min() < (k or 1):
            raise EngineError(f"internal check failed: a class has {int(sizes.min())} rows, fewer than k={k}")
        if dest is not None:
            with atomic_output(dest, tmp_dir) as tmp:
                write_frame(table, tmp, fmt)
            table = None
    rep = SensitiveReport(method, int(labels.shape[0]), int(sizes.shape[0]), int(sizes.min()), int(sizes.max()),
                          time.perf_counter() - t0, int(rss.peak), metrics)
    return table, labels, rep


def _plain(x):
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple, np.ndarray)):
        return [_plain(v) for v in x]
    if isinstance(x, np.generic):
        return x.item()
    return x
