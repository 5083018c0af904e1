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
    return pl.read_csv(DATA / "tarragona.csv")


def pytest_configure(config):
    os.environ.setdefault("NUMBA_NUM_THREADS", "2")


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
