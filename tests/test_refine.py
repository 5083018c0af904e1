"""Refinement (engine/passes/refine.py, engine/kernels/search/): invariants and exactness.

Properties: SSE never increases, sizes stay in [k, 2k-1] (oversized groups only
shrink), every row stays in exactly one group, reported SSEs match from-scratch
recomputation, deterministic across thread counts and for a GA seed; kernels
agree with the slow references in reference_refine.py.
"""

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import reference_refine as ref
from engine.errors import EngineError
from engine.kernels.groups import partition_sse
from engine.kernels.mdav import indexed as _mdav
from engine.kernels.search import moves, recut
from engine.kernels.search import near as N
from engine.kernels.search import refine as K
from engine.kernels.search.windows import window_round
from engine.passes.refine import refine_partition, renumber

from conftest import DATA

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@st.composite
def partitions(draw, max_n=24, max_d=3):
    """A random table and a random partition with sizes in [k, 2k-1]."""
    k = draw(st.integers(2, 4))
    hi = 2 * k - 1
    sizes = draw(st.lists(st.integers(k, hi), min_size=2, max_size=max(2, max_n // k)))
    n = sum(sizes)
    d = draw(st.integers(1, max_d))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    if draw(st.booleans()):
        Z = rng.integers(0, 3, size=(n, d)).astype(np.float64)  # ties, duplicate rows
    else:
        Z = rng.normal(size=(n, d))
    labels = np.repeat(np.arange(len(sizes)), sizes)
    labels = labels[rng.permutation(n)].astype(np.int64)
    return np.ascontiguousarray(Z), labels, k


def _state(Z, labels, k):
    G = int(labels.max()) + 1
    S = max(G, Z.shape[0] // k) + 1
    sums, counts, members, slot = K.build_state(Z, labels, S, 2 * k - 1)
    return S, sums, counts, members, slot


# ---------------------------------------------------------------- kernels vs reference


@settings(max_examples=60, **SETTINGS)
@given(partitions(max_n=18))
def test_best_op_matches_brute_force(case):
    Z, labels, k = case
    hi = 2 * k - 1
    S, sums, counts, members, slot = _state(Z, labels, k)
    G = int(labels.max()) + 1
    near = np.full((S, max(1, G - 1)), -1, np.int64)
    for A in range(G):
        near[A, : G - 1] = [B for B in range(G) if B != A]
    cap = members.shape[1]
    rid = members.reshape(-1)
    P = np.where(rid[:, None] >= 0, Z[np.maximum(rid, 0)], 0.0)
    mu = sums / np.maximum(counts, 1)[:, None]
    for A in range(G):
        dl, kind, p, q, B = moves.best_op(P, A, near, counts, mu, cap, k, hi, np.empty(cap), np.empty(cap),
                                          np.empty(cap), np.empty(cap), 1e-12)
        want = ref.best_op(Z, labels, A, near[A], k, hi)
        if kind == 0:
            assert want > -1e-9
            continue
        assert dl == pytest.approx(want, abs=1e-9)
        x, y = members[A, p], members[B, q]
        after = ref.moved(labels, x, B) if kind == 1 else ref.moved(labels, y, A) if kind == 2 \
            else ref.swapped(labels, x, y)
        assert ref.sse(Z, after) - ref.sse(Z, labels) == pytest.approx(dl, abs=1e-9)


@settings(max_examples=40, **SETTINGS)
@given(partitions(max_n=20))
def test_ls_round_deltas_match_recomputation(case):
    Z, labels, k = case
    hi = 2 * k - 1
    lab = labels.copy()
    S, sums, counts, members, slot = _state(Z, lab, k)
    near = np.full((S, 8), -1, np.int64)
    active = np.ones(S, np.int64)
    touched = np.zeros(S, np.int64)
    stats = np.zeros(3)
    N.nearest_groups(sums, counts, near, np.ones(S, np.int64))
    for _ in range(50):
        if K.ls_round(Z, lab, sums, counts, members, slot, k, hi, near, active, touched, 1e-12, stats) == 0:
            break
    assert ref.sse(Z, lab) - ref.sse(Z, labels) == pytest.approx(stats[2], abs=1e-9)
    assert stats[2] <= 0
    assert ref.feasible_sizes(np.bincount(lab)[np.bincount(lab) > 0], k, hi)
    # members/slot/labels stay consistent
    for g in range(S):
        assert sorted(members[g, : counts[g]]) == sorted(np.flatnonzero(lab == g))
    assert (members[lab, slot] == np.arange(len(lab))).all()


@settings(max_examples=40, **SETTINGS)
@given(partitions(max_n=20))
def test_window_descent_is_a_local_optimum(case):
    Z, labels, k = case
    hi = 2 * k - 1
    g = int(labels.max()) + 1
    P = ((Z[:, None, :] - Z[None, :, :]) ** 2).sum(-1)
    lab = labels.copy()
    total = recut.win_descent(Z, P, lab, g, k, hi, 1e-12)
    assert ref.feasible_sizes(np.bincount(lab, minlength=g), k, hi)
    assert ref.sse(Z, lab) - ref.sse(Z, labels) == pytest.approx(total, abs=1e-9)
    assert partition_sse(Z, lab, g) == pytest.approx(ref.sse(Z, lab), abs=1e-9)
    # no move or swap between any two groups improves any more
    assert ref.best_any_op(Z, lab, k, hi) > -1e-9


@settings(max_examples=80, **SETTINGS)
@given(st.integers(2, 6), st.integers(1, 60), st.integers(1, 4), st.integers(0, 2**32 - 1))
def test_assign_constrained_sizes(k, m, d, seed):
    hi = 2 * k - 1
    assume(m >= k)
    rng = np.random.default_rng(seed)
    gmin, gmax = -(-m // hi), m // k
    assert gmin <= gmax
    nc = int(rng.integers(gmin, gmax + 1))
    Z = rng.integers(0, 3, size=(m, d)).astype(np.float64)
    C = rng.normal(size=(nc, d))
    lab = np.empty(m, np.int64)
    recut.assign_constrained(Z, C, nc, k, hi, lab)
    assert lab.min() >= 0
    assert ref.feasible_sizes(np.bincount(lab, minlength=nc), k, hi)


@settings(max_examples=40, **SETTINGS)
@given(partitions(max_n=24), st.integers(0, 1000))
def test_window_optimizers_never_worse_and_exact(case, seed):
    Z, labels, k = case
    hi = 2 * k - 1
    g = int(labels.max()) + 1
    P = ((Z[:, None, :] - Z[None, :, :]) ** 2).sum(-1)
    before = ref.sse(Z, labels)
    for use_ga in (0, 1):
        out = np.empty_like(labels)
        if use_ga:
            s, g2 = recut.win_ga(Z, P, labels.copy(), g, k, hi, 1e-12, 6, 8, recut.seed_state(seed, 0, 0), out)
        else:
            s, g2 = recut.win_perturb(Z, P, labels.copy(), g, k, hi, 1e-12, out)
        sizes = np.bincount(out, minlength=g2)
        assert sizes.size == g2 and ref.feasible_sizes(sizes, k, hi)
        assert s == pytest.approx(ref.sse(Z, out), abs=1e-9)
        assert s <= before + 1e-9


def _brute_near(sums, counts, L):
    live = np.flatnonzero(counts > 0)
    C = sums[live] / counts[live, None]
    out = np.full((counts.size, L), -1, np.int64)
    for a, g in enumerate(live):
        dist = ((C - C[a]) ** 2).sum(1)
        order = sorted((dist[b], live[b]) for b in range(live.size) if b != a)
        out[g, : min(L, len(order))] = [h for _, h in order[:L]]
    return out


@settings(max_examples=40, **SETTINGS)
@given(st.integers(2, 9), st.integers(1, 4), st.integers(0, 2**32 - 1))
def test_near_lists_match_brute_force(G, d, seed):
    # with at most L+1 groups both the kd-tree lists and the two-hop refresh see
    # every group, so they must equal the brute-force ordering (ties by slot id)
    rng = np.random.default_rng(seed)
    L = 8
    S = G + 2  # two empty slots
    counts = np.zeros(S, np.int64)
    counts[:G] = rng.integers(2, 5, G)
    sums = rng.integers(-2, 3, size=(S, d)).astype(np.float64) * counts[:, None]
    sums[G:] = 0.0
    near = np.full((S, L), -1, np.int64)
    N.nearest_groups(sums, counts, near, np.ones(S, np.int64))
    assert (near == _brute_near(sums, counts, L)).all()
    sums[:G] += rng.normal(size=(G, d)) * counts[:G, None]
    mu = sums / np.maximum(counts, 1)[:, None]
    N.refresh_lists(mu, counts, near, np.ones(S, np.int64), np.empty_like(near), np.empty(L),
                    np.full(S, -1, np.int64))
    assert (near == _brute_near(sums, counts, L)).all()


@settings(max_examples=40, **SETTINGS)
@given(partitions(max_n=40, max_d=3), st.integers(0, 1), st.integers(0, 100))
def test_window_round_keeps_state_consistent(case, use_ga, seed):
    Z, labels, k = case
    hi = 2 * k - 1
    lab = labels.copy()
    S, sums, counts, members, slot = _state(Z, lab, k)
    near = np.full((S, 8), -1, np.int64)
    N.nearest_groups(sums, counts, near, np.ones(S, np.int64))
    touched = np.zeros(S, np.int64)
    stats = np.zeros(3)
    before = ref.sse(Z, lab)
    window_round(Z, lab, sums, counts, members, slot, k, hi, near, 4, use_ga, 6, 6, seed, 0, 0, S,
                 np.ones(S, np.int64), touched, 1e-12, stats)
    assert ref.sse(Z, lab) - before == pytest.approx(stats[2], abs=1e-9)
    assert ref.feasible_sizes(counts[counts > 0], k, hi)
    assert (np.bincount(lab, minlength=S) == counts).all()
    for g in range(S):
        assert sorted(members[g, : counts[g]]) == sorted(np.flatnonzero(lab == g))
        assert np.allclose(sums[g], Z[lab == g].sum(0))
        assert (members[g, counts[g]:] == -1).all()
    assert (members[lab, slot] == np.arange(len(lab))).all()
    changed = np.unique(np.concatenate([lab[lab != labels], labels[lab != labels]]))
    assert touched[changed].all()


# ---------------------------------------------------------------- the driver


def _table(draw_vals, n, d):
    return np.ascontiguousarray(np.array(draw_vals, dtype=np.float64).reshape(n, d))


@st.composite
def tables(draw):
    n = draw(st.integers(2, 70))
    d = draw(st.integers(1, 4))
    k = draw(st.integers(2, max(2, min(n, 7))))
    vals = draw(st.lists(st.integers(-3, 3) | st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False),
                         min_size=n * d, max_size=n * d))
    X = _table(vals, n, d)
    sd = X.std(axis=0)
    sd[sd == 0] = 1.0
    return np.ascontiguousarray((X - X.mean(axis=0)) / sd), k


def _check_result(Z, labels, k, res):
    n = Z.shape[0]
    hi = 2 * k - 1
    out = res.labels
    # every row in exactly one group, ids 0..G'-1 (the input's ids while the
    # number of groups is unchanged, else by first appearance in row order)
    assert out.dtype == np.int64 and out.shape == (n,)
    sizes = np.bincount(out)
    assert (sizes > 0).all()
    if sizes.size != labels.max() + 1:
        assert (renumber(out) == out).all()
    assert sizes.min() >= k
    # groups above 2k-1 only shrink: sorted by size, the output's oversized groups
    # are no more numerous and no larger than the input's
    big_in = np.sort(np.bincount(labels))[::-1]
    big_out = np.sort(sizes[sizes > hi])[::-1]
    assert big_out.size <= (big_in > hi).sum()
    assert (big_out <= big_in[: big_out.size]).all()
    if not (big_in > hi).any():
        assert sizes.max() <= hi
    # reported SSEs are the from-scratch ones; never worse
    assert res.sse_before == pytest.approx(ref.sse(Z, labels), rel=1e-9, abs=1e-9)
    assert res.sse_after == pytest.approx(ref.sse(Z, out), rel=1e-9, abs=1e-9)
    assert res.sse_after <= res.sse_before + 1e-9 * max(1.0, res.sse_before)


@settings(max_examples=120, **SETTINGS)
@given(tables(), st.sampled_from([0, 1, 2, 3]), st.sampled_from(["local", "ga"]),
       st.none() | st.integers(0, 4), st.integers(0, 3))
def test_refine_invariants(table, method, mode, max_rounds, seed):
    Z, k = table
    labels = _mdav.microaggregate(Z, method, k, 0.2 if method == 2 else 1.16)
    res = refine_partition(Z, labels, k, mode=mode, max_rounds=max_rounds, seed=seed)
    _check_result(Z, labels, k, res)
    if max_rounds is not None:
        assert res.rounds <= max_rounds
    if max_rounds == 0:
        assert (res.labels == labels).all()


@settings(max_examples=30, **SETTINGS)
@given(partitions(max_n=40, max_d=3), st.sampled_from(["local", "ga"]))
def test_refine_random_partitions(case, mode):
    # arbitrary (not MDAV) starting partitions, with ties and duplicate rows
    Z, labels, k = case
    res = refine_partition(Z, labels, k, mode=mode)
    _check_result(Z, labels, k, res)
    assert res.sse_after <= res.sse_before


def _clustered(n, d, seed):
    rng = np.random.default_rng(seed)
    centers = rng.normal(0, 3, size=(max(2, n // 8), d))
    X = centers[rng.integers(0, centers.shape[0], n)] + rng.normal(0, 0.5, size=(n, d))
    X[: n // 10] = np.round(X[: n // 10])  # some ties
    return np.ascontiguousarray((X - X.mean(0)) / X.std(0))


@pytest.mark.parametrize("mode", ["local", "ga"])
def test_deterministic_across_threads_and_calls(mode):
    Z = _clustered(600, 4, 1)
    k = 3
    labels = _mdav.microaggregate(Z, 0, k, 0.0)
    a = refine_partition(Z, labels, k, mode=mode, threads=1, seed=7)
    b = refine_partition(Z, labels, k, mode=mode, threads=2, seed=7)
    c = refine_partition(Z, labels, k, mode=mode, seed=7)
    assert (a.labels == b.labels).all() and (a.labels == c.labels).all()
    assert a.sse_after == b.sse_after == c.sse_after
    assert a.rounds == b.rounds and a.moves == b.moves
    assert a.sse_after < a.sse_before  # there is something to improve here
    _check_result(Z, labels, k, a)


def test_max_rounds_is_a_deterministic_cut():
    Z = _clustered(400, 3, 2)
    labels = _mdav.microaggregate(Z, 0, 4, 0.0)
    full = refine_partition(Z, labels, 4, mode="local")
    one = refine_partition(Z, labels, 4, mode="local", max_rounds=1)
    again = refine_partition(Z, labels, 4, mode="local", max_rounds=1)
    assert one.rounds == 1 and (one.labels == again.labels).all()
    assert full.sse_after <= one.sse_after < one.sse_before
    tiny = refine_partition(Z, labels, 4, mode="ga", budget_seconds=1e-9)
    _check_result(Z, labels, 4, tiny)


def test_census_below_published_heuristics():
    # regression guard for quality (benchmarks/quality.py has the full table)
    X = pl.read_csv(DATA / "census.csv").to_numpy().astype(np.float64)
    Z = np.ascontiguousarray((X - X.mean(0)) / X.std(0))
    sst = float((Z ** 2).sum())
    labels = _mdav.microaggregate(Z, 3, 5, 1.16)  # IV-MDAV, IL 8.8757
    for mode in ("local", "ga"):
        res = refine_partition(Z, labels, 5, mode=mode)
        assert 100 * res.sse_after / sst < 8.270, mode


@pytest.mark.parametrize("kwargs,word", [
    (dict(Z=np.zeros((4, 2), np.float32)), "Z"),
    (dict(Z=np.asfortranarray(np.arange(8.0).reshape(4, 2))), "Z"),
    (dict(Z=np.array([[0.0, np.nan]] * 4)), "Z"),
    (dict(labels=np.zeros(3, np.int64)), "labels"),
    (dict(labels=np.zeros(4, np.int32)), "labels"),
    (dict(labels=np.array([0, 0, 2, 2])), "labels"),
    (dict(labels=np.array([0, 0, 0, 1])), "labels"),
    (dict(k=1), "^k"),
    (dict(k=2.0), "^k"),
    (dict(k=5), "^k=5"),
    (dict(mode="tabu"), "mode"),
    (dict(budget_seconds=0), "budget_seconds"),
    (dict(budget_seconds=float("nan")), "budget_seconds"),
    (dict(max_rounds=-1), "max_rounds"),
    (dict(seed=-1), "seed"),
    (dict(threads=0), "threads"),
])
def test_bad_arguments(kwargs, word):
    args = dict(Z=np.arange(8.0).reshape(4, 2), labels=np.array([0, 0, 1, 1]), k=2)
    args.update(kwargs)
    with pytest.raises(EngineError, match=word):
        refine_partition(**args)


def test_border_refinement_may_create_groups(monkeypatch):
    """A window's refinement can re-cut its groups into more groups: they get new global
    ids (this once raised "refinement created more groups than it was given")."""
    import engine
    import engine.passes.border as border
    from engine.cli import DEMO_QI
    from engine.synth import census_like

    real = border.refine_partition
    grew = []

    def spy(Z, labels, *a, **kw):
        res = real(Z, labels, *a, **kw)
        grew.append(int(res.labels.max()) > int(labels.max()))
        return res

    monkeypatch.setattr(border, "refine_partition", spy)
    df = census_like(12_000, seed=1)
    # (polish off: the unpolished blocks are where a window re-cuts into more groups)
    res = engine.microaggregate(df, qi=list(DEMO_QI), k=5, block_size=3_000, refine="local", polish_rounds=0)
    assert any(grew)  # the case this test is about happened
    sizes = np.bincount(res.labels)
    assert sizes.min() >= 5 and sizes.max() <= 9 and sizes.sum() == 12_000
    counts = res.table.group_by(list(DEMO_QI)).len()["len"]
    assert counts.min() >= 5


def test_nearest_groups_brute_force_as_kdtree():
    """Few groups: ``nearest_groups`` compares all pairs; the same lists as the kd-tree."""
    rng = np.random.default_rng(3)
    for t in range(40):
        S = int(rng.integers(1, 300))
        d = int(rng.integers(1, 6))
        counts = rng.integers(0, 4, S).astype(np.int64)
        sums = (rng.integers(0, 3, (S, d)) if t % 2 else rng.standard_normal((S, d))) * np.maximum(counts, 1)[:, None]
        sums = np.ascontiguousarray(sums, dtype=np.float64)
        mask = (rng.random(S) < 0.7).astype(np.int64)
        L = int(rng.integers(1, 9))
        start = rng.integers(-1, S, (S, L)).astype(np.int64)
        a, b = start.copy(), start.copy()
        N._nearest_groups_brute(sums, counts, a, mask)
        N._nearest_groups_kd(sums, counts, b, mask)
        assert np.array_equal(a, b), t
