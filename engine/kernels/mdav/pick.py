"""Which MDAV kernel labels a block: the one place the size thresholds live.

Two ways to run the MDAV family, with the same labels (tested):

* brute force over the remaining rows (``engine.kernels.mdav.slots`` for MDAV and
  MDAV-single-group, ``engine.kernels.mdav.brute`` for V-MDAV and IV-MDAV): O(n^2 / k)
  distance evaluations, vectorized scans of a compacted buffer, and it compiles in
  a fraction of the index's time (a method's first use compiles only what it runs:
  docs/notes/first-run-compile.md);
* the bucket index (``engine.kernels.mdav.indexed``): O(n log n)-ish queries, faster
  on large blocks.

Brute force needs k >= 1, a column and every |x| < 1e100 (``usable``); other data
always run the index, which takes any float64. The thresholds below are where brute
force stops being at least as fast (docs/benchmarks.md, ``benchmarks/bench_brute.py``).
"""

import numpy as np

from .brute import ivmdav_rows, vmdav_rows
from .indexed import IVMDAV, MDAV, MDAV_SINGLE, VMDAV, as_block, microaggregate
from .slots import fits, mdav_brute_slots

# a block of the aggregate pass (the index runs in steps, with progress between them)
BRUTE_MAX_ROWS = 4096
# a whole table labelled in one call (mnqia's MDAV baseline, ``table_labels``)
TABLE_BRUTE_MAX_ROWS = 32768
# V-MDAV / IV-MDAV leaves of the streamed pass (``leaf.aggregate_leaves``)
LEAF_BRUTE_MAX_ROWS = 8192


def usable(X, k):
    """True when the brute-force kernels take ``X`` (float64, C-contiguous): k >= 1,
    at least one column, every |x| < 1e100."""
    return k >= 1 and X.shape[1] > 0 and bool(fits(X))


def leaves_by_brute(X, k, leaf):
    """True when ``leaf.aggregate_leaves`` runs V-MDAV / IV-MDAV leaves of at most
    ``leaf`` rows (raised to 4k) by brute force."""
    return min(X.shape[0], max(leaf, 4 * k)) <= LEAF_BRUTE_MAX_ROWS and usable(X, k)


def small_block_labels(X, method, k, gamma, max_rows=BRUTE_MAX_ROWS):
    """``method`` on the whole block ``X`` by brute force: the labels of
    ``indexed.microaggregate``, or None when ``X`` has more than ``max_rows`` rows or
    ``usable`` is False (the caller runs the index). Python: each method's kernel
    compiles only when first used."""
    X = as_block(X)
    method, k = int(method), int(k)
    if X.shape[0] > max_rows or not usable(X, k):
        return None
    if method == MDAV or method == MDAV_SINGLE:
        return mdav_brute_slots(X, method, k)
    n = X.shape[0]
    order = np.arange(n, dtype=np.int64)
    bounds = np.array([0, n], dtype=np.int64)
    if method == VMDAV:
        return vmdav_rows(X, order, bounds, n, k, float(gamma))
    if method == IVMDAV:
        return ivmdav_rows(X, order, bounds, n, k, float(gamma))
    raise ValueError(f"unknown method code {method}")


def table_labels(X, method, k, gamma):
    """``method`` on a whole table in one call: brute force up to
    ``TABLE_BRUTE_MAX_ROWS`` rows, else the index (the same labels)."""
    labels = small_block_labels(X, method, k, gamma, TABLE_BRUTE_MAX_ROWS)
    return labels if labels is not None else microaggregate(X, method, k, gamma)
