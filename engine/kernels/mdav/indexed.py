"""The MDAV family as Numba kernels (Rawat & Borah (IV-MDAV); Sun et al. (AMA), Algorithm 2 steps 3-7).

Input: a contiguous float64 array ``X`` (n, d) of standardized quasi-identifiers.
Output: one group label per row (int64, groups numbered in creation order).

All four methods share conventions that make them exactly reproducible by the
plain loops in ``tests/reference.py``:

* distances are squared Euclidean, summed in column order; gamma tests compare
  Euclidean distances (square roots);
* the centroid of the remaining records is ``total / remaining`` where ``total``
  starts as the column sums in row order and each grouped row is subtracted in
  the order it joins its group (the group's seed first, then neighbours by
  increasing distance);
* "farthest" and "k nearest" break ties by the lowest row index, and "the k-1
  nearest of r" never includes r itself.

The run is resumable: ``run`` forms at most ``budget`` iterations and returns, so
a driver can show progress; ``state[REMAINING]``, ``state[NEXT_GROUP]``, ``state[DONE]``
(module constants) hold the rows not yet grouped, the next group's label and 1 once finished.

Method codes: 0 MDAV, 1 MDAV-single-group, 2 V-MDAV, 3 IV-MDAV.

Compilation (the first run of a fresh install compiles every kernel it calls; the
results are cached): each method has its own kernel (``_run_mdav``, ``_run_vmdav``,
``_run_ivmdav``; ``run`` and ``microaggregate`` pick one in Python), since Numba
compiles every branch of a function and one kernel for all methods made the first
run of any method compile all four. Integer constants passed to another kernel are
passed as int64 values (``np.int64(1)``, not ``1``): a literal argument compiles a
specialization of the callee for that literal, next to its int64 one. Blocks of at
most ``pick.BRUTE_MAX_ROWS`` rows and the streamed pass's leaves run by brute
force instead (``engine.kernels.mdav.pick``: the same labels, tested), which
compiles none of the index.
"""

import math
import threading

import numpy as np
from numba import get_num_threads, njit

from ..index.buckets import PAR_MIN, anchor_init, build, farthest, farthest_from_moving, knn, remove
from ..common import sq_dist

MDAV = 0
MDAV_SINGLE = 1
VMDAV = 2
IVMDAV = 3

LEAF_SIZE = 64  # rows per bucket of the index (engine.kernels.index.buckets)

# the run's ``state`` array: rows not yet grouped, the next group's label, 1 once finished
REMAINING = 0
NEXT_GROUP = 1
DONE = 2


@njit(cache=True, nogil=True)
def _column_sums(X):
    n, d = X.shape
    total = np.zeros(d)
    for i in range(n):
        for j in range(d):
            total[j] += X[i, j]
    return total


@njit(cache=True, nogil=True)
def _take(T, total, state, labels, i):
    # Assign row i to the current group and forget it.
    X = T[0]
    labels[i] = state[NEXT_GROUP]
    for j in range(total.shape[0]):
        total[j] -= X[i, j]
    state[REMAINING] -= 1
    remove(T, i)


@njit(cache=True, nogil=True)
def _group_around(T, total, state, labels, r, k, nb_pos, nb_d):
    # Sun et al. (AMA), Alg. 2 step 4: r and its k-1 nearest remaining records form a group.
    X = T[0]
    found = knn(T, X[r].copy(), k - 1, r, nb_pos, nb_d)
    _take(T, total, state, labels, r)
    for i in range(found):
        _take(T, total, state, labels, nb_pos[i])
    state[NEXT_GROUP] += 1


@njit(cache=True, nogil=True)
def _centroid(total, remaining):
    c = np.empty(total.shape[0])
    for j in range(total.shape[0]):
        c[j] = total[j] / remaining
    return c


@njit(cache=True, nogil=True)
def _rest_as_group(T, state, labels):
    X, alive = T[0], T[4]
    if state[REMAINING] > 0:
        for i in range(X.shape[0]):
            if alive[i]:
                labels[i] = state[NEXT_GROUP]
        state[NEXT_GROUP] += 1
        state[REMAINING] = 0


@njit(cache=True, nogil=True)
def _extend_ivmdav(T, total, state, labels, xr, k, gamma, nb_pos, nb_d, z_pos, z_d):
    # Rawat & Borah (IV-MDAV), IV-MDAV steps 2.3-2.8: y_1 = x_r, y_2..y_2k its 2k-1 nearest; the
    # first k form the group, y_{k+1}..y_{2k} join while d2 > gamma * d1 (cap 2k-1).
    # z_1..z_k are the k nearest remaining records of y_j, y_j itself included (so
    # z_1 = y_j): this reading reproduces Table 1 of Rawat & Borah (IV-MDAV) (tests/test_paper.py).
    X = T[0]
    none = np.int64(-1)  # no row to exclude (not a literal: see the module docstring)
    found = knn(T, X[xr].copy(), 2 * k - 1, xr, nb_pos, nb_d)
    _take(T, total, state, labels, xr)
    size = 1
    for i in range(min(k - 1, found)):
        _take(T, total, state, labels, nb_pos[i])
        size += 1
    for j in range(k - 1, found):
        if size >= 2 * k - 1:
            break
        y = nb_pos[j]
        nz = knn(T, X[y].copy(), k, none, z_pos, z_d)
        if nz < k:
            break
        d1 = math.sqrt(nb_d[j])
        d2 = math.sqrt(z_d[k - 1])
        if d2 > gamma * d1:
            _take(T, total, state, labels, y)
            size += 1
    state[NEXT_GROUP] += 1


@njit(cache=True, nogil=True)
def _extend_vmdav(T, total, state, labels, e, k, gamma, members, near_pos, near_d, tmp_pos, tmp_d):
    # V-MDAV (Solanas & Martinez-Balleste 2006): e and its k-1 nearest form a group,
    # then the remaining record u nearest to the group joins while
    # d_in(u) < gamma * d_out(u), up to 2k-1 records.
    X, alive = T[0], T[4]
    one = np.int64(1)  # (not literals: see the module docstring)
    none = np.int64(-1)
    found = knn(T, X[e].copy(), k - 1, e, tmp_pos, tmp_d)
    members[0] = e
    size = 1
    for i in range(found):
        members[size] = tmp_pos[i]
        size += 1
    for i in range(size):
        _take(T, total, state, labels, members[i])
    for i in range(size):
        near_pos[i] = -1
    while size < 2 * k - 1 and state[REMAINING] > 0:
        # nearest remaining record to each member; a cached answer stays right
        # until that record is taken, because records are only ever removed
        best_u = np.int64(-1)  # (not a literal: see the module docstring)
        best_d = np.inf
        for i in range(size):
            if near_pos[i] < 0 or not alive[near_pos[i]]:
                knn(T, X[members[i]].copy(), one, none, tmp_pos, tmp_d)
                near_pos[i] = tmp_pos[0]
                near_d[i] = tmp_d[0]
            u = near_pos[i]
            if near_d[i] < best_d or (near_d[i] == best_d and u < best_u):
                best_d = near_d[i]
                best_u = u
        nf = knn(T, X[best_u].copy(), one, best_u, tmp_pos, tmp_d)
        d_out = math.sqrt(tmp_d[0]) if nf > 0 else np.inf
        if math.sqrt(best_d) < gamma * d_out:
            _take(T, total, state, labels, best_u)
            members[size] = best_u
            near_pos[size] = -1
            size += 1
        else:
            break
    state[NEXT_GROUP] += 1


@njit(cache=True, nogil=True)
def _vmdav_leftovers(T, state, labels):
    # Fewer than k records left: each joins the group of its nearest grouped record
    # (nearest among those grouped before this step, ties by lowest row index).
    X, alive = T[0], T[4]
    n = X.shape[0]
    for p in range(n):
        if not alive[p]:
            continue
        best = np.inf
        best_q = np.int64(-1)
        for q in range(n):
            if alive[q]:
                continue
            dd = sq_dist(X, q, X[p])
            if dd < best or (dd == best and q < best_q):
                best = dd
                best_q = q
        labels[p] = labels[best_q]
    state[REMAINING] = 0


# one kernel per method, ``run`` picks it (see the module docstring)


@njit(cache=True, nogil=True)
def _last_groups(T, total, state, labels, k, nb_pos, nb_d):
    # MDAV and IV-MDAV, fewer than 3k left: 2k..3k-1 left -> one more group of k,
    # the rest is the last group. Rawat & Borah (IV-MDAV)'s step 3 prints "n > 2k"; "n >= 2k"
    # reproduces its Table 1 exactly (all 8 MDAV-single-group figures), so that is
    # how we read it.
    if state[REMAINING] >= 2 * k:
        r = farthest(T, _centroid(total, state[REMAINING]))
        _group_around(T, total, state, labels, r, k, nb_pos, nb_d)
    _rest_as_group(T, state, labels)
    state[DONE] = 1


@njit(cache=True, nogil=True)
def _seed(T, A, total, state):
    """``(r, A)``: the remaining row farthest from the centroid of the remaining rows."""
    return farthest_from_moving(T, A, _centroid(total, state[REMAINING]))


@njit(cache=True, nogil=True)
def _run_mdav(T, A, total, state, labels, method, k, budget):
    # MDAV (method 0) or MDAV-single-group (1)
    X = T[0]
    nb_pos, nb_d = np.empty(2 * k, np.int64), np.empty(2 * k)
    for _ in range(budget):
        if state[REMAINING] < 3 * k:
            break
        r, A = _seed(T, A, total, state)
        _group_around(T, total, state, labels, r, k, nb_pos, nb_d)
        if method == MDAV:  # x_s: farthest from x_r among the records still remaining
            _group_around(T, total, state, labels, farthest(T, X[r].copy()), k, nb_pos, nb_d)
    if state[REMAINING] < 3 * k:
        _last_groups(T, total, state, labels, k, nb_pos, nb_d)
    return A


@njit(cache=True, nogil=True)
def _run_ivmdav(T, A, total, state, labels, k, gamma, budget):
    nb_pos, nb_d = np.empty(2 * k, np.int64), np.empty(2 * k)
    z_pos, z_d = np.empty(2 * k, np.int64), np.empty(2 * k)
    for _ in range(budget):
        if state[REMAINING] < 3 * k:
            break
        r, A = _seed(T, A, total, state)
        _extend_ivmdav(T, total, state, labels, r, k, gamma, nb_pos, nb_d, z_pos, z_d)
    if state[REMAINING] < 3 * k:
        _last_groups(T, total, state, labels, k, nb_pos, nb_d)
    return A


@njit(cache=True, nogil=True)
def _run_vmdav(T, A, total, state, labels, k, gamma, budget):
    members, near_pos, near_d = np.empty(2 * k, np.int64), np.empty(2 * k, np.int64), np.empty(2 * k)
    z_pos, z_d = np.empty(2 * k, np.int64), np.empty(2 * k)
    for _ in range(budget):
        if state[REMAINING] < k:
            break
        e, A = _seed(T, A, total, state)
        _extend_vmdav(T, total, state, labels, e, k, gamma, members, near_pos, near_d, z_pos, z_d)
    if state[REMAINING] < k:
        _vmdav_leftovers(T, state, labels)
        state[DONE] = 1
    return A


def run(T, A, total, state, labels, method, k, gamma, budget):
    """Form up to ``budget`` iterations of ``method``; set ``state[DONE] = 1`` when done.

    Returns the anchor structure ``A`` to pass to the next call. (Python: it calls
    the kernel of ``method``, with Python scalars, so each compiles once.)

    Parameters
    ----------
    T : tuple
        the bucket index from ``buckets.build`` (consumed: rows are removed as grouped).
    A : tuple
        anchor structure for the farthest-from-centroid queries.
    total : (d,) float64
        running column sums of the remaining rows.
    state : (3,) int64
        ``state[REMAINING]``, ``state[NEXT_GROUP]``, ``state[DONE]``.
    labels : (n,) int64
        output, by original row index.
    """
    method, k, budget = int(method), int(k), int(budget)
    if method == VMDAV:
        return _run_vmdav(T, A, total, state, labels, k, float(gamma), budget)
    if method == IVMDAV:
        return _run_ivmdav(T, A, total, state, labels, k, float(gamma), budget)
    return _run_mdav(T, A, total, state, labels, method, k, budget)


def start(X, leaf_size, threads=None, par_min=PAR_MIN):
    """Prepare a run over ``X`` (C-contiguous, writable float64: ``as_block``):
    returns ``(T, A, total, state, labels)``. (Python: its steps one by one, so no
    kernel compiles them all once more.)

    ``threads``: the farthest-point scans' threads; by default Numba's thread count
    on the main thread (the in-memory exact path: ``--threads``) and 1 on any other
    (the streamed pass aggregates blocks on worker threads, in parallel already);
    ``par_min``: the fewest buckets a farthest scan needs to use them (tests lower it)."""
    n = X.shape[0]
    if threads is None:
        threads = get_num_threads() if threading.current_thread() is threading.main_thread() else 1
    T = build(X, int(leaf_size), int(threads), int(par_min))
    total = _column_sums(X)
    state = np.zeros(3, np.int64)
    state[REMAINING] = n
    labels = np.full(n, -1, np.int64)
    A = anchor_init(T, _centroid(total, max(n, 1)))
    return T, A, total, state, labels


def as_block(X):
    """``X`` as the one array type the kernels are compiled for: C-contiguous,
    writable float64 (a copy only when it is not one already)."""
    X = np.ascontiguousarray(X, dtype=np.float64)
    return X if X.flags.writeable else X.copy()


def microaggregate(X, method, k, gamma, threads=None, par_min=PAR_MIN):
    """Run ``method`` to completion on ``X`` and return the labels (no progress;
    ``threads``, ``par_min``: as ``start``)."""
    T, A, total, state, labels = start(as_block(X), LEAF_SIZE, threads, par_min)
    while state[DONE] == 0:
        A = run(T, A, total, state, labels, method, k, gamma, 1 << 40)
    return labels
