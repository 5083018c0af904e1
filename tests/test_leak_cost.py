"""The leak guard's cost at census scale (issue 42 item 5): the dependency test's table
in a kernel (``kernels.leak.fd_rows``) against its plain reference, and the reader
narrowed to the columns the tests still pending read (a column tested on ranks alone is
neither hashed nor kept beside the wide first chunks), with the same ``leak_checks``
whatever the chunking."""

import numpy as np
import polars as pl
import pytest

from engine.io.source import open_source
from engine.errors import EngineError
from engine.kernels.leak import fd_regrow, fd_rows, novel_rows
from engine.options import RunConfig
from engine.passes import dependence
from engine.passes.leak import guard, value_keys

from reference_leak import fd_table_reference


def _table(slots: np.ndarray) -> dict:
    t = slots[slots[:, 0] != 0]
    return {(int(c), int(s), int(q)): int(n) for c, s, q, n in t}


@pytest.mark.parametrize("seed", range(6))
def test_fd_rows_matches_the_reference(seed):
    """Counts and limit as the plain reference, whatever the cut into calls and the
    table's growth (a small ``keep``: the limit halved many times)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(500, 4000))
    cells = dependence.row_keys(int(rng.integers(0, 1 << 30)), int(rng.choice([20, 300, n])))
    c = cells[rng.integers(0, cells.shape[0], n)]
    s = rng.integers(1, 4, n).astype(np.uint64)
    q = rng.integers(1, int(rng.choice([2, 5, 40])), n).astype(np.uint64)
    keep = int(rng.choice([8, 64, 1 << 16]))
    slots, state = np.zeros((4, 4), np.uint64), np.array([np.iinfo(np.uint64).max, 0], np.uint64)
    cuts = sorted({0, n, *rng.integers(0, n, 5).tolist()})
    for lo, hi in zip(cuts, cuts[1:]):
        i = 0
        while True:
            i = fd_rows(c[lo:hi], s[lo:hi], q[lo:hi], i, slots, state, keep, 2 * keep)
            if i >= hi - lo:
                break
            new = np.zeros((2 * slots.shape[0], 4), np.uint64)
            fd_regrow(slots, new, state[0])
            slots = new
    ref, limit = fd_table_reference(c, s, q, keep)
    assert _table(slots) == ref and int(state[0]) == limit and int(state[1]) == len(ref)
    assert slots.shape[0] <= max(4, 2 * keep)


@pytest.mark.parametrize("seed", range(6))
def test_fd_figures_give_fd_stats(seed):
    """The kernel's figures of a test's table are ``fd_stats``' (Polars) to the bit: the
    report's ``rate`` and ``baseline`` unchanged."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 5000))
    m = int(rng.choice([3, 40, 2 * n]))
    c = dependence.row_keys(int(rng.integers(0, 1 << 30)), m)[rng.integers(0, m, n)]
    s = rng.integers(0, int(rng.choice([1, 4])), n).astype(np.uint64)  # (0: no strata)
    q = rng.integers(1, int(rng.choice([2, 7, 500])), n).astype(np.uint64)
    t = dependence.FDTest("c", "q")
    t.add(c, s, q)
    slots = t.slots[t.slots[:, 0] != 0]
    tab = pl.DataFrame({"c": slots[:, 0], "s": slots[:, 1], "q": slots[:, 2], "n": slots[:, 3]})
    assert t.stats == dependence.fd_stats(tab)


def test_fd_figures_of_single_rows():
    """A row-unique column (a person id): no evidence, every row kept."""
    t = dependence.FDTest("id", "q")
    t.add(dependence.row_keys(0, 3000), np.zeros(3000, np.uint64), dependence.row_keys(7, 3000) % np.uint64(5) + 1)
    assert t.stats == (0, 0.0, 0.0, 3000, 0.0)


def _census(n: int, seed: int = 0) -> pl.DataFrame:
    """A census-like table: a row id, numeric QIs (one of 6 values: its rank tests stay
    pending to the end), texts and a commute passed through."""
    rng = np.random.default_rng(seed)
    return pl.DataFrame({
        "person_id": np.arange(n, dtype=np.int64),
        "age": rng.integers(0, 95, n),
        "sex": rng.choice(["female", "male"], n),
        "region": rng.choice([f"region {i}" for i in range(9)], n),
        "income": np.round(rng.lognormal(10, 1, n), 2),
        "occupation": rng.choice([f"occupation {i}" for i in range(300)], n),
        "household_size": rng.integers(1, 7, n),
        "commute": rng.integers(0, 90, n),
    })


@pytest.fixture(scope="module")
def census(tmp_path_factory):
    path = tmp_path_factory.mktemp("cost") / "census.parquet"
    _census(260_000).write_parquet(path, row_group_size=50_000)
    return path


def test_the_reader_narrows_to_the_pending_tests(census, monkeypatch):
    """Once the dependency tests are cleared (``DECIDE_ROWS``), only the columns of the
    rank tests still pending are read: not the texts, not the QIs decided."""
    src = open_source(census)
    base = src.base
    asked = []
    frames = type(base).iter_frames

    def recording(self, columns, chunk_rows, *a, **kw):
        asked.append(list(columns))
        return frames(self, columns, chunk_rows, *a, **kw)

    monkeypatch.setattr(type(base), "iter_frames", recording)
    checks = []
    guard(src, RunConfig.make(qi=["age", "income", "household_size"], k=5), 0, 20_000, checks=checks)
    assert asked[0] == list(_census(1).columns)
    assert sorted(asked[-1]) == ["commute", "household_size", "person_id"]
    ranks = {(c["column"], c["qi"]): c["sampled_rows"] for c in checks if "sampled_rows" in c}
    assert ranks[("commute", "household_size")] > 1_000  # (decided at the end: the whole table's sample)


def test_leak_checks_are_the_same_whatever_the_chunking(census):
    """The checks passed and their figures (the report's ``leak_checks``) whatever
    ``--chunk-rows``: the reader's narrowing and the kernel's table change none."""
    runs = []
    for chunk in (7_777, 50_000, 100_000):
        checks = []
        guard(open_source(census), RunConfig.make(qi=["age", "income", "household_size"], k=5), 0, chunk,
              checks=checks)
        runs.append(checks)
    assert runs[0] == runs[1] == runs[2] and len(runs[0]) > 30


def test_novel_rows_matches_the_reference():
    """A derived column's rows to look at: each QI value's first row, and every row where
    it meets another value of the column than on its first."""
    rng = np.random.default_rng(5)
    q = rng.integers(0, 50, 3000)
    c = np.where(rng.random(3000) < 0.99, q * 3, q * 3 + 1)
    kq, kc = value_keys(pl.Series(q)), value_keys(pl.Series(c))
    tab, used, got = np.zeros((1 << 13, 2), np.uint64), np.zeros(1, np.int64), []
    for lo in range(0, 3000, 700):
        out = np.empty(700, np.int64)
        got += (lo + out[:novel_rows(kq[lo:lo + 700], kc[lo:lo + 700], tab, used, out)]).tolist()
    first: dict = {}
    ref = []
    for i in range(3000):
        if q[i] not in first:
            first[q[i]] = c[i]
            ref.append(i)
        elif first[q[i]] != c[i]:
            ref.append(i)
    assert got == ref and used[0] == len(first) and len(ref) > len(first)


@pytest.mark.parametrize("chunk", [333, 4_096, 50_000])
def test_a_derived_column_learnt_the_same_whatever_the_chunking(chunk):
    """The map of ``--derived`` in the order of first rows, and the refusal naming the first
    row that breaks it and the row the map was learnt from."""
    rng = np.random.default_rng(2)
    n = 20_000
    code = rng.integers(0, 300, n)
    df = pl.DataFrame({"age": rng.integers(0, 90, n), "occupation": [f"occ {x}" for x in code],
                       "occupation_code": code})
    cfg = RunConfig.make(qi=["age", "occupation"], k=5, derived={"occupation_code": "occupation"})
    d = guard(open_source(df), cfg, 0, chunk).items[0]
    order = list(dict.fromkeys(df.get_column("occupation").to_list()))
    assert d.keys == order and d.values == [int(k.split()[1]) for k in order]
    bad = df.with_columns(pl.when(pl.int_range(pl.len()) == 12_345).then(999).otherwise(pl.col("occupation_code"))
                          .alias("occupation_code"))
    first = df.get_column("occupation").to_list().index(df["occupation"][12_345]) + 1
    with pytest.raises(EngineError, match=f"row 12346 has occupation='{df['occupation'][12_345]}', "
                                          f"occupation_code=999, row {first} occupation_code="):
        guard(open_source(bad), cfg, 0, chunk)


def test_the_order_tests_figures_do_not_depend_on_the_groups_order():
    """The order test's chance (a sum of squared shares) is summed in a fixed order: the
    same figure to the bit whatever order Polars hands the groups in (the report's
    ``by_chance`` was seen to flip in its 4th decimal between two runs of one input)."""
    rng = np.random.default_rng(0)
    n = 5_000
    c = pl.Series("c", rng.permutation(n).astype(np.float64))
    q = value_keys(pl.Series(rng.zipf(1.3, n) % 97))
    figures = set()
    for seed in range(12):
        order = np.random.default_rng(seed).permutation(n)
        figures.add(dependence.order_stats(c[order], q[order]))
    assert len(figures) == 1
