"""Issue 42, items 4-5: the write pass's cost at census scale, with the same bytes.

The write pass's output bytes are checked elsewhere (``tests/test_golden.py``, the byte
identity across chunk sizes, threads and limits in ``tests/test_stream.py`` and
``tests/test_strata_streamed.py``). These tests cover what changed for speed: the strata
check of row-ordered published values looks each row's group up in a table of group
buckets (``passes.published.bucket_strata``) instead of a binary search over the units,
and must give the binary search's stratum for every group."""

from __future__ import annotations

import numpy as np
import pytest

from engine.passes.published import bucket_strata


def _units(rng, units: int, groups: int, strata: int, sorted_strata: bool):
    """Each unit's first group (ascending, the first 0) and its stratum."""
    first = np.sort(rng.choice(np.arange(1, groups), units - 1, replace=False)) if units > 1 else []
    first = np.concatenate([[0], first]).astype(np.int64)
    s = rng.integers(0, strata, units)
    return first, (np.sort(s) if sorted_strata else s).astype(np.int64)


@pytest.mark.parametrize("seed", range(6))
def test_bucket_strata_give_each_groups_unit_stratum(seed):
    """Every group's stratum from the buckets (and the search where a bucket's units
    differ) is the one a binary search over the units gives (the slow obvious reference)."""
    rng = np.random.default_rng(seed)
    for _ in range(40):
        units = int(rng.integers(1, 400))
        groups = int(rng.integers(units, 300_000))
        first, strata = _units(rng, units, groups, int(rng.integers(1, 8)), bool(rng.integers(2)))
        shift, table = bucket_strata(first, strata, groups, per_unit=int(rng.integers(1, 80)))
        assert table.shape[0] <= max(80 * units, 1024) + 1  # (grows with the units, not the groups)
        labels = np.concatenate([rng.integers(0, groups, 3000), first, np.maximum(first - 1, 0), [groups - 1]])
        got = table[labels >> shift]
        mixed = got < 0
        got[mixed] = strata[np.searchsorted(first, labels[mixed], side="right") - 1]
        expect = np.array([strata[max(u for u in range(units) if first[u] <= g)] for g in labels[:400]])
        assert np.array_equal(got[:400], expect)
        assert np.array_equal(got, strata[np.searchsorted(first, labels, side="right") - 1])


def test_bucket_strata_straddling_units_of_one_stratum_need_no_search():
    """Units of one stratum side by side: no bucket is mixed, whatever the unit sizes."""
    first = np.array([0, 3, 4, 900, 901, 5000], np.int64)
    shift, table = bucket_strata(first, np.zeros(6, np.int64), 1 << 20, per_unit=1)
    assert shift > 0 and (table == 0).all()
    shift, table = bucket_strata(first, np.array([0, 0, 1, 1, 1, 2], np.int64), 1 << 20, per_unit=1)
    assert (table < 0).sum() == 2  # (buckets 0 and 4 of 1,024 groups: strata 0 and 1, 1 and 2)
