"""MNQIA (Ahmed et al. (MNQIA)): the seed's Table 1 example, invariants, reference, bad input."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import reference_sensitive as ref
from engine.errors import EngineError
from engine.methods.mnqia import mdav_range_loss, mnqia_partition, range_loss, segment_1d

# Ahmed et al. (MNQIA) Table 1: T1..T9 (Age, Zip)
AGE = [27, 22, 34, 26, 30, 32, 22, 37, 39]
ZIP = [12000, 22000, 24000, 17000, 16000, 14000, 19000, 26000, 27000]
X1 = np.array([AGE, ZIP], float).T


def _groups(labels):
    return sorted(sorted((np.flatnonzero(labels == g) + 1).tolist()) for g in np.unique(labels))


def test_table1_segments():
    """The 95 % rule (g >= k = 3) picks four 1-D groups per QI, the seed's prose groups:
    Age {22,22} {26,27} {30,32,34} {37,39}; Zip {12,14} {16,17,19} {22,24} {26,27} thousand."""
    a, g, _ = segment_1d(X1[:, 0], None, 3)
    assert g == 4 and a.tolist() == [1, 0, 2, 1, 2, 2, 0, 3, 3]
    z, g, _ = segment_1d(X1[:, 1], None, 3)
    assert g == 4 and z.tolist() == [0, 2, 2, 1, 1, 0, 1, 3, 3]


def test_table1_automatic():
    """Automatic segmentation, scan over Zip groups (the last QI), k = 3.

    Group 1: Zip 12-14: T1 is in <Age 26-27, Zip 12-14> (priority 2+2+1 = 5),
    T6 in <Age 30-34, Zip 12-14> (3+2+1 = 6) -> T6; Zip 16-19 (T5 shielded by Age
    30-34): T7 <22, 16-19> (2+3+1 = 6) ties T4 <26-27, 16-19> (6) -> lower bucket
    (Age 22) -> T7;
    A23 all shielded (T2 Age 22, T3 Age 30-34); A24 -> T8 (T8/T9 tie, T8 grows the
    ranges less). Group 1 = {T6, T7, T8}. The same walk gives {T1, T2, T5} and
    then {T3, T4, T9}. Every group has three different Age groups and three
    different Zip groups, so no shielding had to be relaxed.
    """
    r = mnqia_partition(X1, 3)
    assert _groups(r.labels) == [[1, 2, 5], [3, 4, 9], [6, 7, 8]]
    assert r.n_segments == [4, 4] and r.relaxed_picks == 0 and r.leftovers == 0
    _check_groups(r, X1, 3)
    for g in range(r.n_groups):
        m = r.labels == g
        for j in range(2):
            assert len(set(r.segments[m, j].tolist())) == 3  # shielding held
    assert r.il == pytest.approx(ref.range_loss(X1, r.labels))


def test_table1_seed_buckets():
    """The seed's own Table 3 buckets (Age A11={T2,T7} A12={T4} A13={T1,T3,T5,T6}
    A14={T8,T9}; Zip A21={T1,T6} A22={T4,T5,T7} A23={T2,T3} A24={T8,T9}).

    Group 1 walks A21..A24: T1 (<A21,A13>, priority 8, T1/T6 tie -> lowest row),
    T7 (<A22,A11> 6 beats <A22,A12> 5), A23 shielded, A24 -> T8 (the seed takes
    T9; both tie in priority and T8 grows the ranges less). Group 2: T6, T4, T2
    (as in the seed). Group 3: T5, then A23's T3 is shielded (A13), A24 -> T9;
    that is 2 < 3, so one record is taken from a shielded bucket: T3
    (the seed's third group {T3, T5, T8} also shares A13).
    """
    A = {0: [2, 7], 1: [4], 2: [1, 3, 5, 6], 3: [8, 9]}
    Z = {0: [1, 6], 1: [4, 5, 7], 2: [2, 3], 3: [8, 9]}
    seg = np.zeros((9, 2), np.int64)
    for j, groups in enumerate((A, Z)):
        for g, ts in groups.items():
            seg[np.array(ts) - 1, j] = g
    r = mnqia_partition(X1, 3, segments=seg)
    assert _groups(r.labels) == [[1, 7, 8], [2, 4, 6], [3, 5, 9]]
    assert r.relaxed_picks == 1
    _check_groups(r, X1, 3)


def test_baseline_and_loss():
    # MDAV groups on Table 1, generalized to ranges, lose less than MNQIA's diverse groups
    il, pct, lab = mdav_range_loss(X1, 3)
    assert il == pytest.approx(ref.range_loss(X1, lab)) and pct == pytest.approx(100 * il / 2)
    assert il < mnqia_partition(X1, 3).il
    # one group = whole table: every row loses 1 per QI
    assert range_loss(X1, np.zeros(9, np.int64)) == (pytest.approx(2.0), pytest.approx(100.0))
    # a constant column adds nothing
    Xc = np.c_[X1, np.ones(9)]
    assert range_loss(Xc, np.zeros(9, np.int64))[0] == pytest.approx(2.0)


def _check_groups(r, X, k):
    n = X.shape[0]
    assert r.labels.shape == (n,) and set(np.unique(r.labels)) == set(range(r.n_groups))
    sizes = np.bincount(r.labels)
    assert (sizes >= k).all() and (sizes <= 2 * k - 1).all()
    for g in range(r.n_groups):
        m = r.labels == g
        assert np.allclose(r.group_min[g], X[m].min(axis=0)) and np.allclose(r.group_max[g], X[m].max(axis=0))
        assert (X[m] >= r.group_min[g]).all() and (X[m] <= r.group_max[g]).all()


@st.composite
def num_tables(draw):
    n = draw(st.integers(2, 50))
    d = draw(st.integers(1, 3))
    k = draw(st.integers(2, max(2, min(n, 6))))
    vals = draw(st.lists(st.lists(st.integers(-4, 4) | st.floats(-100, 100, allow_nan=False),
                                  min_size=d, max_size=d), min_size=n, max_size=n))
    nseg = draw(st.sampled_from([None, 1, 2, 5]))
    return np.array(vals, float), k, nseg


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(num_tables())
def test_invariants_and_reference(table):
    X, k, nseg = table
    if X.shape[0] < k:
        return
    r = mnqia_partition(X, k, n_segments=nseg)
    _check_groups(r, X, k)
    labels, relaxed = ref.mmdcf(X, r.segments, k, r.scan_dim)
    assert r.labels.tolist() == labels.tolist() and r.relaxed_picks == relaxed
    assert r.il == pytest.approx(ref.range_loss(X, r.labels), rel=1e-9, abs=1e-12)
    assert 0.0 <= r.il <= X.shape[1] + 1e-9


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 30) | st.floats(0, 10, allow_nan=False), min_size=1, max_size=9),
       st.integers(1, 4))
def test_segmentation_is_optimal(xs, g):
    x = np.array(xs, float)
    g = min(g, len(set(xs)))
    lab, gg, sse = segment_1d(x, g)
    assert gg == g
    assert sse[-1] == pytest.approx(ref.best_sse_1d(x, g), rel=1e-9, abs=1e-9)
    # segments are contiguous in value and numbered by value
    order = np.argsort(x, kind="stable")
    assert (np.diff(lab[order]) >= 0).all() and set(lab.tolist()) == set(range(g))


def test_bad_input():
    cases = [
        (lambda: mnqia_partition(X1, 10), "fewer rows (9) than one group of k = 10"),
        (lambda: mnqia_partition(X1, 1), "k: must be an integer >= 2"),
        (lambda: mnqia_partition(np.array([[1.0], [np.nan], [2.0]]), 2), "row 1"),
        (lambda: mnqia_partition(X1, 3, scan_dim=5), "scan_dim"),
        (lambda: mnqia_partition(X1, 3, segments=np.zeros((9, 1), int)), "segments"),
        (lambda: mdav_range_loss(X1, 12), "fewer rows"),
    ]
    for fn, msg in cases:
        with pytest.raises(EngineError) as e:
            fn()
        assert msg in str(e.value) and "\n" not in str(e.value)
