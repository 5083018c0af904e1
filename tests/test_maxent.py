"""Maximum-entropy classes (Tsiafoulis et al. (maximum entropy)): hand-made tables, invariants, reference, bad input."""

import math

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import reference_sensitive as ref
from engine.errors import EngineError
from engine.kernels.entropy import entropy
from engine.methods.maxent import (
    _prepare,
    discernibility,
    encode_table,
    generalize,
    maxent_partition,
    som_clusters,
)
from engine.kernels.ranges.som import som_fit


def _classes(labels):
    return sorted(sorted(np.flatnonzero(labels == g).tolist()) for g in np.unique(labels))


# ---------------------------------------------------------------- hand-made tables


def test_tight_triples_mixed_qis():
    """12 rows, QIs x (numeric) and city (categorical), SA in {a, b, c}.

    Rows 0-2, 3-5, 6-8, 9-11 are four tight triples (x within 2, one city each),
    each holding a, b and c once. Round d = 3 runs on one cluster (som_units=1):
    whichever tuple of the smallest bucket is drawn, the two tuples that keep the
    class's NCP smallest are its triple-mates, so the classes are the triples:
    {0,1,2} {3,4,5} {6,7,8} {9,10,11}, each with entropy log2 3 = H(table).
    SA counts (4, 4, 4) share the divisor 4, so epsilon = H(table) is reachable.
    """
    x = [0, 1, 2, 50, 51, 52, 100, 101, 102, 150, 151, 152]
    city = ["p", "p", "p", "q", "q", "q", "r", "r", "r", "s", "s", "s"]
    sa = ["a", "b", "c", "c", "a", "b", "b", "c", "a", "a", "c", "b"]
    df = pl.DataFrame({"x": x, "city": city, "sa": sa})
    enc = encode_table(df, ["x", "city"], "sa")
    for seed in range(4):
        r = maxent_partition(enc.Q, enc.sa_codes, qi_kinds=enc.kinds, cardinalities=enc.cardinalities,
                             som_units=1, seed=seed)
        assert _classes(r.labels) == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10, 11]]
        assert r.epsilon == pytest.approx(math.log2(3))
        assert np.allclose(r.class_entropy, math.log2(3))
        assert r.merges == 0 and not r.forced_single_class
        # NCP: x spans 2/152 per class, city has one value per class
        assert r.ncp == pytest.approx(12 * 2 / 152)
        assert r.cdm == 4 * 9
    out = generalize(df, r.labels, ["x", "city"])
    assert out.columns == ["x_min", "x_max", "city", "sa"]
    assert out["x_min"].to_list() == [0, 0, 0, 50, 50, 50, 100, 100, 100, 150, 150, 150]
    assert out["city"].to_list() == city
    mean = generalize(df, r.labels, ["x", "city"], numeric_output="mean", categorical_output="general")
    assert mean["x"].to_list()[:3] == [1.0, 1.0, 1.0]


INC_X = [0, 1, 2, 10, 11, 12, 20, 21, 3, 22]
INC_SA = [0, 1, 2, 0, 1, 2, 0, 1, 0, 0]  # A B C A B C A B A A


def test_incorporation_by_hand():
    """10 rows, one numeric QI x, SA A/B/C (counts 5, 3, 2), epsilon = 1.2 bits.

    Round d=3: C is the smallest bucket; drawing row 2 or row 5 gives the same
    classes {0,1,2} and {3,4,5} (nearest B then A; the tie 1 vs 8 goes to row 1,
    0 vs 8 to row 0). Round d=2: B = {7} is the smallest bucket -> {6, 7}
    (tie 6 vs 9 -> 6). Rows 8 and 9 stay unplaced.
    Fig. 4: {6,7} has entropy 1 < 1.2 and is dissolved. In row order, every class
    already holds the value, so each row joins the class whose NCP grows least
    among those that keep entropy >= 1.2: 6 (x=20) -> {3,4,5} (cost 34 vs 74);
    7 (x=21) -> same (15 vs 78); 8 (x=3) -> {0,1,2} (6 vs 53); 9 (x=22) -> {3..7}
    (17 vs 98). Expected classes: {0, 1, 2, 8} and {3, 4, 5, 6, 7, 9}.
    With k = 5 the 4-row class is merged into the other: one class, one merge.
    """
    Q = np.array(INC_X, float)[:, None]
    sa = np.array(INC_SA)
    for seed in range(3):
        r = maxent_partition(Q, sa, epsilon=1.2, som_units=1, seed=seed)
        assert _classes(r.labels) == [[0, 1, 2, 8], [3, 4, 5, 6, 7, 9]]
        assert r.dissolved == 1 and r.incorporated == 4 and r.merges == 0
        assert r.intermediate_classes == 3 and r.unplaced_after_rounds == 2
        assert r.entropy_min >= 1.2
        assert r.cdm == 16 + 36
    r = maxent_partition(Q, sa, epsilon=1.2, k=5, som_units=1)
    assert _classes(r.labels) == [list(range(10))]
    assert r.merges == 1


def test_entropy_beats_proximity():
    """6 rows, x = 0, 1, 10, 11, 20, 21 with SA A B A B A A; epsilon = 0.9 bits.

    Round d=2 gives {0,1} and {2,3} (either B drawn first). Row 4 (x=20) joins
    {2,3} (cost 28 vs 58; entropy of A,A,B = 0.918). Row 5 (x=21) would drop {2,3,4}
    to 0.811 bits, so it must join the farther {0,1}: {0,1,5} and {2,3,4}.
    """
    Q = np.array([0, 1, 10, 11, 20, 21], float)[:, None]
    sa = np.array([0, 1, 0, 1, 0, 0])
    r = maxent_partition(Q, sa, epsilon=0.9, som_units=1)
    assert _classes(r.labels) == [[0, 1, 5], [2, 3, 4]]


def test_default_epsilon_forces_one_class():
    """SA counts 5, 3, 2 (no common divisor): with epsilon = H(table) every class
    would need exactly the table's distribution, which only the whole table has."""
    Q = np.array(INC_X, float)[:, None]
    r = maxent_partition(Q, np.array(INC_SA), som_units=1)
    assert r.forced_single_class and r.n_classes == 1
    assert r.entropy_min == pytest.approx(entropy(np.bincount(np.array(INC_SA))))
    assert r.merges == r.intermediate_classes  # 3 classes + the unplaced rows fused
    assert r.cdm == 100 and r.ncp_normalized == pytest.approx(1.0)


# ---------------------------------------------------------------- invariants


@st.composite
def sa_tables(draw):
    n = draw(st.integers(4, 40))
    dn = draw(st.integers(0, 2))
    dc = draw(st.integers(0 if dn else 1, 2))
    m = draw(st.integers(2, 4))
    cols = [np.array(draw(st.lists(st.integers(-3, 3) | st.floats(-50, 50, allow_nan=False),
                                   min_size=n, max_size=n)), float) for _ in range(dn)]
    cards = [draw(st.integers(1, 4)) for _ in range(dc)]
    cols += [np.array(draw(st.lists(st.integers(0, c - 1), min_size=n, max_size=n)), float) for c in cards]
    sa = draw(st.lists(st.integers(0, m - 1), min_size=n, max_size=n))
    sa[0], sa[1] = 0, 1  # at least two distinct values
    frac = draw(st.sampled_from([0.0, 0.5, 0.8, 0.95, 0.99, 1.0]))
    k = draw(st.sampled_from([None, 2, 3, 5]))
    units = draw(st.sampled_from([None, 1, 2, 4]))
    kinds = ["numeric"] * dn + ["categorical"] * dc
    return np.stack(cols, axis=1), np.array(sa), kinds, frac, k, units


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sa_tables(), st.integers(0, 3))
def test_invariants(table, seed):
    Q, sa, kinds, frac, k, units = table
    n = len(sa)
    if k is not None and k > n:
        return
    eps = frac * entropy(np.bincount(sa))
    r = maxent_partition(Q, sa, epsilon=eps, k=k, som_units=units, qi_kinds=kinds, seed=seed)
    lab = r.labels
    assert lab.shape == (n,) and set(np.unique(lab)) == set(range(r.n_classes))  # every row exactly once
    for g in range(r.n_classes):
        vals = sa[lab == g]
        assert len(set(vals.tolist())) >= 2
        assert ref.entropy(vals.tolist()) >= eps - 1e-9
        if k is not None:
            assert vals.size >= k
    assert r.entropy_min >= eps - 1e-9
    assert r.cdm == ref.cdm(lab, k)
    _, sa_, Xn, C, card, off, w, *_ = _prepare(Q, sa, kinds, None, None, k, None, None)
    assert r.ncp == pytest.approx(ref.ncp_table(Xn, C, card, w, lab), rel=1e-9, abs=1e-12)


# ---------------------------------------------------------------- kernels vs reference


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sa_tables(), st.integers(0, 3))
def test_core_matches_reference(table, seed):
    """With one SOM unit per round the whole pipeline (Figs. 1, 3, 4, leftovers,
    k) has a plain reference."""
    Q, sa, kinds, frac, k, _ = table
    if k is not None and k > len(sa):
        return
    eps = (frac if frac < 1 else 0.99) * entropy(np.bincount(sa))  # off the exact H(table) knife edge
    r = maxent_partition(Q, sa, epsilon=eps, k=k, som_units=1, qi_kinds=kinds, seed=seed)
    _, sa_, Xn, C, card, off, w, *_ = _prepare(Q, sa, kinds, None, None, k, None, None)
    labels, merges = ref.maxent_single_cluster(Xn, C, card, w, sa_, eps, k, seed)
    assert r.labels.tolist() == labels.tolist()
    assert r.merges == merges


def test_som_matches_reference():
    rng = np.random.default_rng(1)
    n = 40
    Xn = rng.random((n, 2))
    C = np.stack([rng.integers(0, 3, n), rng.integers(0, 2, n)], axis=1).astype(np.int64)
    off = np.array([0, 3, 5], np.int64)
    w = np.array([1.0, 0.5, 1.0, 2.0])
    init = np.sort(rng.choice(n, 6, replace=False)).astype(np.int64)
    _, _, bmu = som_fit(Xn, C, off, w, 2, 3, init, 5, 1.5, 0.5)
    assert bmu.tolist() == ref.som(Xn, C, off, w, 2, 3, init, 5, 1.5, 0.5).tolist()
    # the driver's clustering is seeded: same seed, same clusters
    rows = np.arange(n)
    a = som_clusters(Xn, C, off, w, rows, 6, 7)
    assert a.tolist() == som_clusters(Xn, C, off, w, rows, 6, 7).tolist()


def test_discernibility_small_classes():
    assert discernibility([2, 3, 5], k=3) == 10 * 2 + 9 + 25


# ---------------------------------------------------------------- bad input


def test_bad_input():
    df = pl.DataFrame({"x": [1.0, 2.0, 3.0, 4.0], "y": ["a", "b", "a", "b"],
                       "s1": ["u", "u", "u", "u"], "sn": ["u", None, "v", "u"], "s": ["u", "v", "u", "v"]})
    cases = [
        (lambda: encode_table(df, ["x"], "s1"), "single distinct value"),
        (lambda: encode_table(df, ["x"], "sn"), "null sensitive value at row 2 (rows counted from 1)"),
        (lambda: encode_table(df, ["x", "s"], "s"), "also listed as a quasi-identifier"),
        (lambda: encode_table(df, ["x", "x"], "s"), "listed twice"),
        (lambda: encode_table(df, ["nope"], "s"), "'nope'"),
        (lambda: maxent_partition(np.ones((4, 1)), np.zeros(4, int)), "single distinct value"),
        (lambda: maxent_partition(np.ones((4, 1)), np.array([0, -1, 1, 0])), "null sensitive value at row 1"),
        (lambda: maxent_partition(np.ones((4, 1)), np.array([0, 1, 0, 1]), qi_names=["s"], sa_name="s"),
         "also listed"),
        (lambda: maxent_partition(np.ones((4, 1)), np.array([0, 1, 0, 1]), k=5), "fewer rows (4) than one class"),
        (lambda: maxent_partition(np.ones((1, 1)), np.array([0])), "fewer rows (1)"),
        (lambda: maxent_partition(np.ones((4, 1)), np.array([0, 1, 0, 1]), epsilon=1.5), "exceeds the SA entropy"),
        (lambda: maxent_partition(np.array([[1.0], [np.nan], [2.0], [3.0]]), np.array([0, 1, 0, 1])), "row 1"),
    ]
    for fn, msg in cases:
        with pytest.raises(EngineError) as e:
            fn()
        text = str(e.value)
        assert msg in text and "\n" not in text
