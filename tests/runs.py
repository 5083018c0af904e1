"""Runs of the range methods with keyword settings, as the tests call them."""

from __future__ import annotations

from engine.coordinator import run
from engine.options import RunConfig


def anonymize_sensitive(data, dest, qi, method, *, tmp_dir=None, group=None, _force_blocks=False, **options):
    """``maxent`` or ``mnqia`` with keyword settings (the option table's, the CSV
    options among them): builds the ``RunConfig`` and calls ``coordinator.run``.
    Returns ``(table or None, labels, Report)``. ``_force_blocks`` spills even a table
    of one block."""
    cfg = RunConfig.make(qi=qi, method=method, **options)
    res = run(data, cfg, dest, tmp_dir=tmp_dir, group=group, force_blocks=_force_blocks)
    return res.table, res.labels, res.report
