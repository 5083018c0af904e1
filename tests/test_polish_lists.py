"""Near lists of the polish (engine/kernels/polish.py): the threaded kernels give the
serial kernels' lists for any thread count, and both match brute-force references;
the seam parts and the seam polish by parts do not depend on the thread count."""

import numpy as np
import pytest

from engine.kernels.leaf import aggregate_leaves
from engine.parallel import ordered_map
from engine.kernels.polish import (near_by_windows, near_by_windows_parallel, polish_seams_parts, refresh_lists,
                                   refresh_lists_parallel, rotations, seam_parts)
from reference_polish import nearest_groups, sse, two_hop


def _groups(n, d, k, seed):
    Z = np.random.default_rng(seed).normal(size=(n, d))
    Z[: n // 4, 0] = np.round(Z[: n // 4, 0])  # ties among the centroids
    lab = aggregate_leaves(Z, 0, k, 0.0, 64)
    G = int(lab.max()) + 1
    counts = np.bincount(lab, minlength=G)
    sums = np.stack([np.bincount(lab, weights=Z[:, j], minlength=G) for j in range(d)], axis=1)
    return Z, lab, sums, counts


@pytest.mark.parametrize("n,d,L", [(600, 3, 8), (2000, 6, 12), (90, 2, 5)])
def test_window_lists_threaded_equal_serial_and_brute_force(n, d, L):
    Z, lab, sums, counts = _groups(n, d, 3, n)
    G = counts.shape[0]
    R = rotations(d, 3)
    serial = np.full((G, L), -1, np.int64)
    near_by_windows(sums, counts, serial, R, np.int64(24))
    for nth in (1, 2, 3, 7):
        par = np.full((G, L), 7, np.int64)
        near_by_windows_parallel(sums, counts, par, R, np.int64(24), np.int64(nth))
        assert np.array_equal(par, serial)
    # windows wider than the table: every group a candidate, so the exact L nearest
    full = np.full((G, L), -1, np.int64)
    near_by_windows_parallel(sums, counts, full, R, np.int64(G), np.int64(2))
    ref = nearest_groups(Z, lab, L)
    assert all(list(full[g]) == ref[g] for g in range(G))


@pytest.mark.parametrize("seed", [1, 2])
def test_two_hop_refresh_threaded_equal_serial_and_reference(seed):
    Z, lab, sums, counts = _groups(1500, 4, 3, seed)
    G, L = counts.shape[0], 10
    C = sums / counts[:, None]
    near = np.full((G, L), -1, np.int64)
    near_by_windows(sums, counts, near, rotations(4, 1), np.int64(3))  # narrow windows: lists far from exact
    mask = (np.arange(G) % 3 != 0).astype(np.int64)
    expect = two_hop(C, near, mask)
    serial = near.copy()
    refresh_lists(C, serial, mask, np.empty_like(near), np.empty(L), np.full(G, -1, np.int64))
    assert np.array_equal(serial, expect)
    for nth in (1, 2, 5):
        par = near.copy()
        refresh_lists_parallel(C, par, mask, np.empty_like(near), np.int64(nth))
        assert np.array_equal(par, expect)


def test_seam_polish_by_parts_is_the_same_for_any_thread_count():
    Z, lab, sums, counts = _groups(4000, 4, 3, 11)
    G = counts.shape[0]
    C = sums / counts[:, None]
    unit = (C[:, 0] > np.median(C[:, 0])).astype(np.int64)  # two units cut along axis 0
    gpart = seam_parts(C, unit, 2)
    assert np.array_equal(gpart, seam_parts(C.copy(), unit.copy(), 2))
    assert np.bincount(gpart).tolist() == [G // 2, G - G // 2]
    # the parts cut across the units' seam: each unit split about evenly between them
    for u in (0, 1):
        share = np.bincount(gpart[unit == u], minlength=2) / (unit == u).sum()
        assert share.min() > 0.3
    four = np.bincount(seam_parts(C, unit, 4))
    assert four.shape[0] == 4 and four.max() - four.min() <= 1
    R = rotations(4, 3)
    outs = []
    for threads in (1, 2, 3):
        out = lab.copy()
        polish_seams_parts(Z, out, 3, 32, 12, unit, gpart, R, np.zeros(1, np.int64), 0.0, threads,
                       ordered_map=ordered_map)
        outs.append(out)
    assert all(np.array_equal(o, outs[0]) for o in outs)
    sizes = np.bincount(outs[0], minlength=G)
    assert sizes.min() >= 3 and sizes.max() <= 5
    assert sse(Z, outs[0]) < sse(Z, lab)
    assert np.array_equal(gpart[outs[0]], gpart[lab])  # every row stays in its part's groups


@pytest.mark.slow
def test_streamed_seam_polish_by_parts(monkeypatch):
    """The streamed path with the seam polish by parts (off by default): groups k..2k-1,
    every row in one group, the same output for any thread count and chunk size."""
    import engine
    import engine.methods.centroids as co
    from engine.synth import NUMERIC_QI, census_like

    monkeypatch.setattr(co, "POLISH_UNIT_ROWS", 2_000)
    monkeypatch.setattr(co, "POLISH_SEAM_PARTS", 2)
    table = census_like(6_000, seed=9).select(list(NUMERIC_QI))
    runs = [engine.microaggregate(table, qi=table.columns, k=3, block_size=1_000, threads=t, chunk_rows=c)
            for t, c in ((1, 100_000), (2, 777))]
    assert np.array_equal(runs[0].labels, runs[1].labels) and runs[0].table.equals(runs[1].table)
    sizes = np.bincount(runs[0].labels)
    assert sizes.min() >= 3 and sizes.max() <= 5 and sizes.sum() == table.height
    assert runs[0].report.polish["seam_rounds"] >= 1
