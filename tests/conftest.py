import os
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

DATA = Path(__file__).parent / "data"
# benchmarks/research.py: research helpers (in-memory AMA, subset scan) that tests check too
sys.path.insert(0, str(Path(__file__).parent.parent / "benchmarks"))


@pytest.fixture(scope="session")
def census():
    return pl.read_csv(DATA / "census.csv")


@pytest.fixture(scope="session")
def tarragona():
    # the file is sorted by FIXED.ASSETS, which a release's row order publishes (the leak
    # guard refuses it): shuffled, seeded (the published MDAV figures are the same)
    return shuffled_tarragona()


def shuffled_tarragona() -> pl.DataFrame:
    """tests/data/tarragona.csv in a seeded random row order."""
    frame = pl.read_csv(DATA / "tarragona.csv")
    return frame[np.random.default_rng(0).permutation(frame.height)]


def pytest_configure(config):
    os.environ.setdefault("NUMBA_NUM_THREADS", "2")
    _bytecode_of_the_package()
    # (both workers share one Numba cache: a kernel is compiled once, by the first that
    # needs it, under its entry's lock; engine/kernels/__init__.py)


def _bytecode_of_the_package():
    """Compile the package's modules to bytecode (``__pycache__``) once, before the
    workers start: the hundreds of ``microagg`` processes the tests start then read it
    instead of compiling every module again, a sixth of their start-up (0.87 s to
    0.70 s each), also where ``PYTHONDONTWRITEBYTECODE`` is set, as on CI. An edited
    module's bytecode is out of date by its timestamp and compiled again here."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    import compileall

    compileall.compile_dir(Path(__file__).resolve().parents[1] / "engine", quiet=1)


# The order in which test files are handed to the workers (pytest-xdist, ``--dist loadfile``
# in pyproject.toml: a file runs whole on one worker, in collection order). Long files first,
# so that none starts late and keeps one core busy while the other idles; the two longest
# last, one for each worker, once the kernels they start processes on are compiled (their
# processes time out on a machine busy compiling). The others in name order.
FIRST = ("test_dask_mixed.py", "test_options.py", "test_html_report.py", "test_fuzz.py", "test_polish.py",
         "test_dask.py", "test_budget.py", "test_dask_faults.py", "test_sensitive_stream.py", "test_faithful.py",
         "test_faults.py")
LAST = ("test_readme.py", "test_signals.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: i - len(FIRST) for i, name in enumerate(FIRST)} | {name: 1 + i for i, name in enumerate(LAST)}
    items.sort(key=lambda item: rank.get(item.path.name, 0))  # stable: file order kept within a rank


def random_table(rng, n, d, kind):
    """Random test data of several shapes, including ties and constant columns."""
    if kind == "normal":
        return rng.normal(size=(n, d))
    if kind == "ints":  # many exact ties and duplicate rows
        return rng.integers(0, 4, size=(n, d)).astype(np.float64)
    if kind == "clustered":
        centers = rng.normal(0, 5, size=(max(2, n // 10), d))
        return centers[rng.integers(0, centers.shape[0], n)] + rng.normal(0, 0.1, size=(n, d))
    if kind == "constant_col":
        X = rng.normal(size=(n, d))
        X[:, 0] = 3.0
        return X
    raise ValueError(kind)


def lower_seam_thresholds(monkeypatch, unit_rows: int) -> None:
    """The seam stage on a small table (its tests): from 5,000 rows, units of ``unit_rows``."""
    import engine.methods.centroids as co
    import engine.options as options
    monkeypatch.setattr(options, "POLISH_MAX_ROWS", 5_000)
    monkeypatch.setattr(co, "POLISH_MAX_ROWS", 5_000)
    monkeypatch.setattr(co, "POLISH_UNIT_ROWS", unit_rows)
