"""The MDAV leaves with the exact mismatch distance on codes (``engine.kernels.mdav.coded``)
against the row-by-row reference (``reference.mdav_coded``) and one-hot columns."""

import numpy as np
import pytest

from engine.kernels.mdav.coded import _coded_dists_centroid, aggregate_leaves_coded
from engine.kernels.mdav.leaf import aggregate_leaves
from reference import mdav_coded, split_leaves


def _table(seed, n, nd, cats, extra=0):
    rng = np.random.default_rng(seed)
    dense = np.round(rng.normal(size=(n, nd)), 1)  # (rounded: ties in the dense part too)
    K = np.stack([rng.integers(0, m, n) for m in cats], axis=1) if cats else np.zeros((n, 0), np.int64)
    emb = rng.normal(size=(n, extra))
    return np.hstack([dense, emb]), K.astype(np.int64)


def _reference(Z, dense, K, w, k, leaf, single):
    out = np.full(Z.shape[0], -1, np.int64)
    nxt = 0
    for idx in split_leaves(Z, max(leaf, 4 * k)):
        lab = mdav_coded(Z[idx][:, dense], K[idx], w, k, single=single)
        out[idx] = lab + nxt
        nxt += int(lab.max()) + 1
    return out


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("method", [0, 1])
def test_leaves_match_the_reference(seed, method):
    k = 2 + seed % 4
    cats = [(3, 50), (7,), (2, 5, 100_000), ()][seed % 4]
    Z, K = _table(seed, 150 + 37 * seed, nd=seed % 3, cats=list(cats), extra=1 + seed % 2 * 3)
    w = np.linspace(0.5, 2.0, K.shape[1]) if K.shape[1] else np.zeros(0)
    nd = seed % 3
    if nd == 0 and K.shape[1] == 0:
        nd = Z.shape[1]
    dense = np.arange(nd)
    if seed % 2:  # the dense columns after the others
        Z = np.ascontiguousarray(np.hstack([Z[:, nd:], Z[:, :nd]]))
        dense = np.arange(Z.shape[1] - nd, Z.shape[1])
    got = aggregate_leaves_coded(Z, dense, K, w, method, k, 64)
    assert np.array_equal(got, _reference(Z, dense, K, w, k, 64, method == 1))
    sizes = np.bincount(got)
    assert sizes.min() >= k and (got >= 0).all()


@pytest.mark.parametrize("method", [0, 1])
def test_no_codes_gives_the_leaves_kernel(method):
    rng = np.random.default_rng(5)
    Z = rng.normal(size=(3_000, 4))
    got = aggregate_leaves_coded(Z, np.arange(4), np.zeros((3_000, 0), np.int64), np.zeros(0), method, 5, 256)
    assert np.array_equal(got, aggregate_leaves(Z, method, 5, 0.0, 256))


def test_centroid_distance_is_the_one_hot_distance():
    m, cats, w = 40, [4, 100_000], np.array([1.0, 3.0])
    Z, K = _table(9, m, 2, [4, 30])
    K[:, 1] += 99_950  # codes near the top of a 100,000-category QI
    # one-hot over the codes present (the absent ones add a zero column each)
    onehot = [Z[:, :2]] + [np.sqrt(w[t] / 2) * np.eye(cats[t] if t == 0 else 30)[np.unique(K[:, t], return_inverse=True)[1]]
                           for t in range(2)]
    D = np.hstack(onehot)
    want = ((D - D.mean(axis=0)) ** 2).sum(axis=1)
    cnt = np.zeros((2, 100_000), np.int64)
    S = np.zeros(2, np.int64)
    for t in range(2):
        for c in K[:, t]:
            S[t] += 2 * cnt[t, c] + 1
            cnt[t, c] += 1
    dist = np.empty(m + 1)
    _coded_dists_centroid(np.ascontiguousarray(Z[:, :2].T), np.ascontiguousarray(K.T), m, Z[:, :2].mean(axis=0),
                          cnt, S, w * 0.5, dist)
    assert np.allclose(dist[:m], want, rtol=1e-9, atol=1e-12)


def test_exact_where_the_embedding_is_not():
    """Rows that differ only in a category of many: the coded distance separates every
    pair by w, where 16 random directions put some pairs much closer."""
    from engine.encode.mixed import embedding
    E = embedding(3_000, 16)
    d2 = ((E[:200, None, :] - E[None, :200, :]) ** 2).sum(axis=2)[np.triu_indices(200, 1)]
    assert d2.min() < 1.0  # (the embedding's pairs: 2 on average, some below half that)
    K = np.repeat(np.arange(200), 5)[:, None].astype(np.int64)
    Z = np.zeros((1_000, 0))
    lab = aggregate_leaves_coded(Z, np.arange(0), K, np.ones(1), 0, 5, 2_048)
    # every group is one category: 200 categories of 5 rows, no mismatch at all
    assert all(len(set(K[lab == g, 0])) == 1 for g in range(lab.max() + 1))
