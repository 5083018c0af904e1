"""Runs of the range methods with keyword settings, as the tests call them."""

from __future__ import annotations

from engine.coordinator import run
from engine.io.source import csv_options
from engine.options import RunConfig


def anonymize_sensitive(data, dest, qi, method, *, tmp_dir=None, group=None, _force_blocks=False, **options):
    """``maxent`` or ``mnqia`` with keyword settings: builds the ``RunConfig`` (the CSV
    options ``separator``, ``null_values``, ``encoding`` among them) and calls
    ``coordinator.run``. Returns ``(table or None, labels, Report)``. ``_force_blocks``
    spills even a table of one block."""
    csv = {o: options.pop(o, None) for o in ("separator", "null_values", "encoding")}
    options.setdefault("k", None)
    cfg = RunConfig.make(qi=qi, method=method, csv=csv_options(**csv), **options)
    res = run(data, cfg, dest, tmp_dir=tmp_dir, group=group, force_blocks=_force_blocks)
    return res.table, res.labels, res.report
