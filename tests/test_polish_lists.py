"""Near lists of the polish (engine/kernels/search/near.py): the kd-order windows and
the two-hop refresh match brute-force references."""

import numpy as np
import pytest

from engine.kernels.mdav.leaf import aggregate_leaves
from engine.kernels.search.near import near_by_windows, refresh_lists
from engine.kernels.search.polish import rotations
from reference_polish import nearest_groups, two_hop


def _groups(n, d, k, seed):
    Z = np.random.default_rng(seed).normal(size=(n, d))
    Z[: n // 4, 0] = np.round(Z[: n // 4, 0])  # ties among the centroids
    lab = aggregate_leaves(Z, 0, k, 0.0, 64)
    G = int(lab.max()) + 1
    counts = np.bincount(lab, minlength=G)
    sums = np.stack([np.bincount(lab, weights=Z[:, j], minlength=G) for j in range(d)], axis=1)
    return Z, lab, sums, counts


@pytest.mark.parametrize("n,d,L", [(600, 3, 8), (2000, 6, 12), (90, 2, 5)])
def test_window_lists_match_brute_force(n, d, L):
    Z, lab, sums, counts = _groups(n, d, 3, n)
    G = counts.shape[0]
    R = rotations(d, 3)
    lists = np.full((G, L), 7, np.int64)
    near_by_windows(sums, counts, lists, R, np.int64(24))
    assert (lists >= 0).all() and (lists != np.arange(G)[:, None]).all()
    # windows wider than the table: every group a candidate, so the exact L nearest
    full = np.full((G, L), -1, np.int64)
    near_by_windows(sums, counts, full, R, np.int64(G))
    ref = nearest_groups(Z, lab, L)
    assert all(list(full[g]) == ref[g] for g in range(G))


@pytest.mark.parametrize("seed", [1, 2])
def test_two_hop_refresh_matches_the_reference(seed):
    Z, lab, sums, counts = _groups(1500, 4, 3, seed)
    G, L = counts.shape[0], 10
    C = sums / counts[:, None]
    near = np.full((G, L), -1, np.int64)
    near_by_windows(sums, counts, near, rotations(4, 1), np.int64(3))  # narrow windows: lists far from exact
    mask = (np.arange(G) % 3 != 0).astype(np.int64)
    expect = two_hop(C, near, mask)
    refresh_lists(C, counts, near, mask, np.empty_like(near), np.empty(L), np.full(G, -1, np.int64))
    assert np.array_equal(near, expect)
