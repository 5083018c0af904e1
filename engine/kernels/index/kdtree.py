"""A kd-tree with deletions: exact farthest, k-nearest and "remove" queries.

It answers by branch and bound over bounding boxes that shrink as records are
removed, in one traversal (``walk``, ``next_leaf``: the leaves that can still beat
the answer so far, the most promising first) that serves ``farthest``, ``knn`` and
the risk measures' nearest with ties (``engine.kernels.risk``); each query scans
the leaves it is given its own way. The refinement's near lists
(``engine.kernels.search.near``) use it too; the MDAV family runs on the bucketed
index of ``engine.kernels.index.buckets`` instead, which scans faster in many
spread-out dimensions (its docstring says why).

Exactness. The answers are *identical* to brute force, not approximate:

* distances are computed by the same expression, ``sum_j (x_j - q_j)**2`` summed
  in column order, as the plain reference (``tests/reference.py``);
* box bounds are computed with the same rounding, so they bound every computed
  distance in the box (rounding is monotone), and nodes are pruned only on a
  *strict* inequality, so equal distances are always inspected;
* ties are broken by the lowest original row index.

Layout. ``build_kdtree`` returns a tuple ``T`` of arrays (Numba handles tuples of
arrays well and, unlike jitclasses, they can be cached):

``T = (Xp, ids, alive, leaf_of, nstart, nend, lo, hi, cnt, first_leaf, center, rnorm, rmax)``

* ``Xp`` (n, d): rows in tree order; ``ids`` (n,): their original row index;
* ``alive`` (n,): row not yet removed; ``leaf_of`` (n,): leaf node of a position;
* nodes are stored as an implicit complete binary tree (children 2i+1, 2i+2),
  every leaf at the same depth; ``nstart/nend``: half-open position range;
* ``lo/hi`` (n_nodes, d): bounding box of the node's *alive* rows;
  ``cnt``: its number of alive rows; ``first_leaf``: index of the first leaf;
* ``center`` (d,): the column means; ``rnorm`` (n,): each position's distance to
  it; ``rmax`` (n_nodes,): the largest ``rnorm`` among a node's alive rows. The
  ball bound ``|q - center| + rmax`` caps the distance from q to a node's rows;
  it is much tighter than the box for far-away q (the farthest-from-x_r query
  from an outlier, where every box corner looks equally far).
"""

import math

import numpy as np
from numba import njit

from ..common import farther, sq_dist, widen

_INF = np.inf
_SAFE = 1.0 + 1e-9  # widens triangle-inequality bounds past any rounding of computed norms


@njit(cache=True, nogil=True)
def _box_max_dist(lo, hi, node, q):
    # Upper bound of sq_dist from q to any point in the box.
    s = 0.0
    for j in range(q.shape[0]):
        a = lo[node, j] - q[j]
        b = hi[node, j] - q[j]
        a = a * a
        b = b * b
        s += a if a > b else b
    return s


@njit(cache=True, nogil=True)
def _far_bound(lo, hi, rmax, node, q, qn):
    # min of the box bound and the ball bound (|q - center| + rmax)^2, the latter
    # widened by _SAFE to cover rounding in the computed norms
    box = _box_max_dist(lo, hi, node, q)
    t = (qn + rmax[node]) * _SAFE
    ball = t * t
    return box if box < ball else ball


@njit(cache=True, nogil=True)
def box_min_dist(lo, hi, node, q):
    # Lower bound of sq_dist from q to any point in the box.
    s = 0.0
    for j in range(q.shape[0]):
        if q[j] < lo[node, j]:
            t = lo[node, j] - q[j]
            s += t * t
        elif q[j] > hi[node, j]:
            t = q[j] - hi[node, j]
            s += t * t
    return s


@njit(cache=True, nogil=True)
def _leaf_box(Xp, alive, nstart, nend, lo, hi, cnt, node):
    d = Xp.shape[1]
    c = 0
    for j in range(d):
        lo[node, j] = _INF
        hi[node, j] = -_INF
    for p in range(nstart[node], nend[node]):
        if alive[p]:
            c += 1
            widen(lo, hi, node, Xp, p)
    cnt[node] = c


@njit(cache=True, nogil=True)
def _leaf_rmax(alive, nstart, nend, rnorm, rmax, node):
    m = 0.0
    for p in range(nstart[node], nend[node]):
        if alive[p] and rnorm[p] > m:
            m = rnorm[p]
    rmax[node] = m


@njit(cache=True, nogil=True)
def _merge_box(lo, hi, cnt, node):
    a = 2 * node + 1
    b = a + 1
    d = lo.shape[1]
    cnt[node] = cnt[a] + cnt[b]
    for j in range(d):
        la = lo[a, j] if cnt[a] > 0 else _INF
        lb = lo[b, j] if cnt[b] > 0 else _INF
        ha = hi[a, j] if cnt[a] > 0 else -_INF
        hb = hi[b, j] if cnt[b] > 0 else -_INF
        lo[node, j] = la if la < lb else lb
        hi[node, j] = ha if ha > hb else hb


@njit(cache=True, nogil=True)
def build_kdtree(X, leaf_size):
    """Build the tree over the rows of ``X`` (n, d), float64, any memory layout.

    Median splits on the dimension of largest variance (lowest dimension on ties),
    stable sorts, so the tree depends only on the data.
    """
    n, d = X.shape
    depth = 0
    while (n + (1 << depth) - 1) >> depth > leaf_size:
        depth += 1
    n_nodes = (1 << (depth + 1)) - 1
    first_leaf = (1 << depth) - 1
    perm = np.arange(n)
    nstart = np.zeros(n_nodes, np.int64)
    nend = np.zeros(n_nodes, np.int64)
    nend[0] = n
    for node in range(first_leaf):
        s = nstart[node]
        e = nend[node]
        m = (s + e) // 2
        if e - s >= 2:
            # split the dimension of largest variance: the largest range would
            # follow the outliers of heavy-tailed columns and leave loose boxes
            best_dim = 0
            best_spread = -1.0
            for j in range(d):
                mu = 0.0
                for p in range(s, e):
                    mu += X[perm[p], j]
                mu /= e - s
                var = 0.0
                for p in range(s, e):
                    t = X[perm[p], j] - mu
                    var += t * t
                if var > best_spread:
                    best_spread = var
                    best_dim = j
            vals = np.empty(e - s)
            for p in range(s, e):
                vals[p - s] = X[perm[p], best_dim]
            order = np.argsort(vals, kind="mergesort")
            seg = perm[s:e].copy()
            for p in range(e - s):
                perm[s + p] = seg[order[p]]
        a = 2 * node + 1
        nstart[a] = s
        nend[a] = m
        nstart[a + 1] = m
        nend[a + 1] = e
    Xp = np.empty((n, d))
    for p in range(n):
        for j in range(d):
            Xp[p, j] = X[perm[p], j]
    alive = np.ones(n, np.bool_)
    leaf_of = np.empty(n, np.int64)
    lo = np.empty((n_nodes, d))
    hi = np.empty((n_nodes, d))
    cnt = np.zeros(n_nodes, np.int64)
    center = np.zeros(d)
    for p in range(n):
        for j in range(d):
            center[j] += Xp[p, j]
    if n > 0:
        center /= n
    rnorm = np.empty(n)
    for p in range(n):
        rnorm[p] = math.sqrt(sq_dist(Xp, p, center))
    rmax = np.zeros(n_nodes)
    for node in range(first_leaf, n_nodes):
        for p in range(nstart[node], nend[node]):
            leaf_of[p] = node
        _leaf_box(Xp, alive, nstart, nend, lo, hi, cnt, node)
        _leaf_rmax(alive, nstart, nend, rnorm, rmax, node)
    for node in range(first_leaf - 1, -1, -1):
        _merge_box(lo, hi, cnt, node)
        rmax[node] = max(rmax[2 * node + 1], rmax[2 * node + 2])
    return (Xp, perm, alive, leaf_of, nstart, nend, lo, hi, cnt, first_leaf, center, rnorm, rmax)


@njit(cache=True, nogil=True)
def remove(T, pos):
    """Mark position ``pos`` as grouped and shrink the boxes on its path to the root."""
    Xp, ids, alive, leaf_of, nstart, nend, lo, hi, cnt, first_leaf, center, rnorm, rmax = T
    alive[pos] = False
    node = leaf_of[pos]
    _leaf_box(Xp, alive, nstart, nend, lo, hi, cnt, node)
    _leaf_rmax(alive, nstart, nend, rnorm, rmax, node)
    while node > 0:
        node = (node - 1) // 2
        _merge_box(lo, hi, cnt, node)
        rmax[node] = max(rmax[2 * node + 1], rmax[2 * node + 2])


# -- the traversal: one branch and bound for every query ---------------------------


@njit(cache=True, nogil=True)
def _bound(T, node, q, qn, far):
    """The bound of a node: of the largest distance from q to its rows (``far``: the
    tighter of the box and the ball bound), else of the least (the box)."""
    lo, hi, rmax = T[6], T[7], T[12]
    if far:
        return _far_bound(lo, hi, rmax, node, q, qn)
    return box_min_dist(lo, hi, node, q)


@njit(cache=True, nogil=True)
def walk(T, q, far):
    """Start a search from ``q``: ``(stack, bound, sp, qn)`` for ``next_leaf``. ``far``
    (int64 1): a farthest search, else a nearest one; ``qn``: |q - center|."""
    center = T[10]
    qn = 0.0
    for j in range(q.shape[0]):
        t = q[j] - center[j]
        qn += t * t
    qn = math.sqrt(qn)
    stack = np.empty(128, np.int64)
    bound = np.empty(128)
    stack[0] = 0
    bound[0] = _bound(T, stack[0], q, qn, far)  # the root (an int64, not a literal 0)
    sp = 1 if T[8][0] > 0 else 0
    return stack, bound, sp, qn


@njit(cache=True, nogil=True)
def next_leaf(T, q, qn, far, stack, bound, sp, limit):
    """The next leaf whose bound can still beat ``limit`` (the answer so far: a
    farthest search skips nodes whose bound is below it, a nearest one nodes whose
    bound is above it; equal bounds are always inspected, so every tie is seen), the
    more promising child first. Returns ``(leaf, sp)``, leaf -1 when none is left."""
    cnt, first_leaf = T[8], T[9]
    while sp > 0:
        sp -= 1
        node = stack[sp]
        b = bound[sp]
        if (b < limit) if far else (b > limit):
            continue
        if node >= first_leaf:
            return node, sp
        a = 2 * node + 1
        c = a + 1
        ba = _bound(T, a, q, qn, far) if cnt[a] > 0 else 0.0
        bc = _bound(T, c, q, qn, far) if cnt[c] > 0 else 0.0
        a_first = ba >= bc if far else ba <= bc
        # push the more promising child last, so it is explored first
        first, fb, second, sb = (c, bc, a, ba) if a_first else (a, ba, c, bc)
        if cnt[first] > 0:
            stack[sp] = first
            bound[sp] = fb
            sp += 1
        if cnt[second] > 0:
            stack[sp] = second
            bound[sp] = sb
            sp += 1
    return np.int64(-1), sp


@njit(cache=True, nogil=True)
def farthest(T, q):
    """Alive position farthest from ``q`` (ties: lowest row id); -1 when none is alive."""
    Xp, ids, alive, nstart, nend = T[0], T[1], T[2], T[4], T[5]
    best_d = -1.0
    best_pos = np.int64(-1)  # (not a literal: callers pass it on)
    best_id = np.iinfo(np.int64).max
    far = np.int64(1)
    stack, bound, sp, qn = walk(T, q, far)
    while True:
        node, sp = next_leaf(T, q, qn, far, stack, bound, sp, best_d)
        if node < 0:
            return best_pos
        for p in range(nstart[node], nend[node]):
            if alive[p]:
                best_d, best_id = farther(sq_dist(Xp, p, q), ids[p], best_d, best_id)
                if best_id == ids[p]:
                    best_pos = p


@njit(cache=True, nogil=True)
def knn(T, q, m, exclude, out_pos, out_d):
    """The ``m`` alive positions nearest to ``q``, other than position ``exclude``.

    Fills ``out_pos[:found]`` / ``out_d[:found]`` in increasing (distance, row id)
    order and returns ``found`` (< m only when fewer rows are alive).
    """
    Xp, ids, alive, nstart, nend = T[0], T[1], T[2], T[4], T[5]
    found = 0
    if m <= 0:
        return 0
    near = np.int64(0)
    stack, bound, sp, qn = walk(T, q, near)
    while True:
        node, sp = next_leaf(T, q, qn, near, stack, bound, sp, out_d[m - 1] if found == m else _INF)
        if node < 0:
            return found
        for p in range(nstart[node], nend[node]):
            if not alive[p] or p == exclude:
                continue
            dd = sq_dist(Xp, p, q)
            pid = ids[p]
            if found == m:
                wd = out_d[m - 1]
                if dd > wd or (dd == wd and pid > ids[out_pos[m - 1]]):
                    continue
                i = m - 1
            else:
                i = found
                found += 1
            # insertion into the sorted list
            while i > 0 and (out_d[i - 1] > dd or (out_d[i - 1] == dd and ids[out_pos[i - 1]] > pid)):
                out_d[i] = out_d[i - 1]
                out_pos[i] = out_pos[i - 1]
                i -= 1
            out_d[i] = dd
            out_pos[i] = p
