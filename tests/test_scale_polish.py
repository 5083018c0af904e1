"""The seam stage's settings above POLISH_MAX_ROWS (engine/tuning.py, issue 42 item 3):
leaves of SCALE_LEAF_SIZE rows, near lists from windows of SCALE_WINDOW positions in
1 + SCALE_ROTATIONS kd orders. Chosen on one seam block's quality-for-CPU frontier
(docs/benchmarks.md, "issue 42 item 3"); here, on a table small enough to be fast (the
thresholds lowered as in test_seams.py), that the stage polishes with them, that they lose
less than the settings they replaced (the release's invariance across thread counts, chunk
sizes and limits: test_seams.py, which runs with them)."""

import numpy as np
import pytest

import engine
import engine.methods.centroids as co
import engine.options as options
from engine import tuning
from engine.kernels.mdav.leaf import aggregate_leaves
from engine.kernels.search.polish import polish, rotations
from reference_polish import sse
from conftest import lower_seam_thresholds

K = 5
PREVIOUS = dict(SCALE_LEAF_SIZE=1024, SCALE_ROTATIONS=1, SCALE_WINDOW=12)  # (before issue 42 item 3)


@pytest.fixture(scope="module")
def table():
    from engine.synth import NUMERIC_QI, census_like
    return census_like(24_000, seed=11).select(list(NUMERIC_QI[:7]))


@pytest.fixture(autouse=True)
def small_thresholds(monkeypatch):
    lower_seam_thresholds(monkeypatch, 6_000)


def _run(table, **kw):
    return engine.microaggregate(table, qi=table.columns, k=K, block_size=1_500, **kw)


def _settings(monkeypatch, **values):
    for name, value in values.items():
        for mod in (options, co):
            if hasattr(mod, name):
                monkeypatch.setattr(mod, name, value)


def test_the_stage_polishes_with_the_scale_settings(table, monkeypatch):
    """The seam blocks' polish gets SCALE_ROTATIONS rotations and windows of SCALE_WINDOW
    positions; the leaves are SCALE_LEAF_SIZE rows."""
    seen = []
    real = co.seam_pass

    def spy(stage, profile, cols, method, polish_args, *a, **kw):
        seen.append(polish_args)
        return real(stage, profile, cols, method, polish_args, *a, **kw)

    monkeypatch.setattr(co, "seam_pass", spy)
    rep = _run(table).report
    rounds, near, R, descent, window = seen[0]
    assert rep.leaf_size == tuning.SCALE_LEAF_SIZE == 2048
    assert R.shape[0] == tuning.SCALE_ROTATIONS == 3 and window == tuning.SCALE_WINDOW == 4
    assert rounds == tuning.SCALE_POLISH_ROUNDS and near == tuning.scale_near(K)


def test_the_settings_lose_less_than_the_previous_ones(table, monkeypatch):
    """The release loses less than with the previous settings (leaves of 1,024 rows, one
    rotation, windows of 12), on the same table through the same stage."""
    now = _run(table).report
    _settings(monkeypatch, **PREVIOUS)
    before = _run(table).report
    assert before.leaf_size == 1024 and now.polish["seam_blocks"] > 1
    assert now.information_loss_percent < before.information_loss_percent * 0.99


def test_narrow_windows_in_more_orders_on_one_block():
    """On one block of MDAV leaves the kernel with the scale settings (windows of
    SCALE_WINDOW in 1 + SCALE_ROTATIONS orders) ends at a lower SSE (from scratch) than
    with the previous near lists (windows of 12 in 1 + 1 orders), never above the start."""
    from engine.synth import NUMERIC_QI, census_like

    X = census_like(20_000, seed=5).select(list(NUMERIC_QI[:7])).to_numpy().astype(np.float64)
    Z = np.ascontiguousarray((X - X.mean(0)) / X.std(0))
    start = aggregate_leaves(Z, 0, K, 0.0, 2048).astype(np.int64)
    out = {}
    for name, (n_rot, window) in {"now": (tuning.SCALE_ROTATIONS, tuning.SCALE_WINDOW), "before": (1, 12)}.items():
        lab = start.copy()
        polish(Z, lab, K, 1, tuning.scale_near(K), rotations(7, n_rot), np.zeros(1, np.int64), 0.0, 1, window)
        out[name] = sse(Z, lab)
    assert out["now"] < out["before"] <= sse(Z, start)
