"""An index of the remaining rows for the exact MDAV family: buckets scanned in
float32, answers settled in float64.

The MDAV family asks three questions of the rows not yet grouped: which one is
farthest from a point, which m are nearest to a point, and "remove these". A
kd-tree with small leaves answers them by branch and bound, but in ten spread-out
dimensions its boxes prune poorly and its traversal costs more than the rows it
skips (``engine.kernels.index.kdtree``; docs/notes/exact-mdav.md). This index is
one level deep and built for scanning:

* Buckets. The rows are cut by median splits (``engine.kernels.index.split``) into
  buckets of at most ``leaf`` (<= 64) rows. A bucket's remaining rows sit
  compacted in the first of its 64 slots, column-major float32 (``C``); removing
  a row moves the bucket's last row into its hole. Each bucket keeps the box of
  its remaining rows (raw float64 values), its centre (the mean of its rows at
  build) and the radius of its remaining rows around that centre. When half the
  rows of the last build are gone, the buckets are built again over the rest.
* A query bounds every bucket at once (loops over the buckets, vectorized: the
  box and the ball bound, the tighter of the two), scans the bucket with the best
  bound first, then every bucket whose bound can still beat the answer so far.
  Scanning a bucket computes float32 distances of all its slots in one
  vectorized loop.
* Exact answers. ``C`` holds ``(x - centre) * 2**-e`` in float32, ``2**e`` the
  bucket's power-of-two scale (a power of two: the scaling itself is exact). A
  float32 distance ``d32`` of a slot brackets the float64 distance the reference
  computes (``sq_dist``: ``sum_j (x_j - q_j)**2`` in column order on the raw
  values) within ``eps``: with ``a = (x - c) 2**-e``, ``b = (q - c) 2**-e`` and
  ``P = (|a| + |b|)**2``, rounding both to float32 moves each difference by at
  most ``2u(|a_j| + |b_j|)``, squaring and summing d terms adds ``d u`` relative
  (u = 2**-24), and the reference's own float64 rounding is below ``2**-50 P``; so
  ``|d32 - d64| <= (d + 4.01) u P`` (plus an absolute ``eta`` term for float32
  underflow), and ``eps = (d + 6) u P + ...`` (times ``2**2e``) is a strict bound.
  ``P`` uses the bucket's radius and the query's distance to the centre, both
  widened by ``_SAFE``: the bracket is relative to the distances involved (about
  1e-6 of them), whatever the data's scale or offset.
  The farthest row is among the rows whose upper bound ``d32 + eps`` reaches the
  largest lower bound ``d32 - eps``; the m nearest are among the rows whose lower
  bound is at most the m-th smallest upper bound. Those few candidates are
  measured again in float64 by ``sq_dist`` and decided by (distance, row id), so
  the answers, ties included, are the reference's. A query too far from a bucket
  for float32 (``|b| > 2**40``) measures that bucket in float64 row by row.
* Bounds are safe: box bounds are computed with the reference's rounding on the
  raw values (rounding is monotone, so they bound every computed distance in the
  box), ball bounds are widened by ``_SAFE``, and buckets are skipped only on a
  strict inequality, so rows at an equal distance are always seen.
* Threads: the farthest-point scan (most of the work: in ten dimensions its bounds
  prune a quarter to a half of the buckets at best) runs its buckets in
  ``nthreads`` interleaved chunks (``prange``), each with its own running bound,
  when at least ``par_min`` buckets are left to scan (a parallel region costs
  more than a short scan); the answer is the same for any number of chunks.
  ``nthreads`` and ``par_min`` are fixed at build (``meta[_THREADS]``, ``meta[_PAR_MIN]``).

Rows are addressed by their row index (``id``) in ``X``; ``alive[id]`` tells
whether a row is still to be grouped. Farthest from the centroid (asked once per
group, the centroid barely moving) has its own structure, ``anchor_init`` /
``farthest_from_moving`` below.

Layout, a tuple (Numba handles tuples of arrays well, and they can be cached):
``T = (X, C, slot_id, where, alive, bcnt, lo, hi, cen, esc, rad, rr, meta, bnd,
bup, scr, cand_id, cand_lo)``: ``X`` (n, d) the rows; ``C`` (B 64 d,) float32,
bucket b's column j at ``(b d + j) 64``; ``slot_id`` / ``where`` slot -> id and
id -> slot (bucket ``slot // 64``); ``bcnt`` each bucket's remaining rows;
``lo`` / ``hi`` / ``cen`` (d, B); ``esc`` (2, B) the scales ``2**-e`` and
``2**2e``; ``rad`` (B,) the radius of the remaining rows (of ``rr``, each slot's
distance to its centre); ``meta`` (7,) int64, indexed by the constants
``_REMAINING`` (rows not yet grouped), ``_THREADS``, ``_BUCKETS``, ``_PLAIN`` (1:
every query by brute force in float64), ``_BUILT`` (rows at the last build),
``_LEAF``, ``_PAR_MIN``; a field read alone is ``T[_X]``, ``T[_ALIVE]``, ``T[_META]``; ``bnd``, ``bup`` (B,), ``scr`` (nthreads, 64)
float32, ``cand_id`` / ``cand_lo`` (n,): scratch of the queries.
"""

import math

import numpy as np
from numba import njit, prange

from ..common import farther, insert_nearest, sq_dist, widen
from .split import split_leaves

_SAFE = 1.0 + 1e-9  # widens norms and radii past any rounding of their computation
_U32 = 2.0 ** -24  # float32's unit roundoff
_ETA = 2.0 ** -125  # bounds an absolute error of float32 underflow (subnormal or flushed)
_REL = (1.0 + 2.0 ** -20) * _U32  # (constants computed once: ``**`` in a kernel is a call)
_UP32 = 1.0 + 2.0 ** -22  # rounds a threshold up past its float32 rounding
_FAR = 2.0 ** 40  # a query farther than this from a bucket (scaled units): float64 row by row
_E_LIM = 400  # scale exponents are kept within +-_E_LIM (2**(2e) stays a normal float64)
_FIT = 1e100  # data with a value beyond (or NaN, inf) are queried by brute force (``meta[_PLAIN]``)
PAR_MIN = 4096  # buckets to scan before a farthest scan takes threads (``build``)
_LP = 64  # slots per bucket (its largest size): loops of a fixed length, vectorized
# positions in ``T`` of the fields read alone, and the slots of ``meta`` (module docstring)
_X, _ALIVE, _META = 0, 4, 12
_REMAINING, _THREADS, _BUCKETS, _PLAIN, _BUILT, _LEAF, _PAR_MIN = 0, 1, 2, 3, 4, 5, 6


@njit(cache=True, nogil=True)
def _exponent(r):
    # e with r * 2**-e in [0.5, 1) (0 for r = 0), kept within +-_E_LIM
    if not r > 0.0:
        return 0
    e = 0
    m, e = math.frexp(r)
    return max(-_E_LIM, min(_E_LIM, e))


@njit(cache=True, nogil=True)
def _refresh_box(X, slot_id, bcnt, lo, hi, b):
    d = X.shape[1]
    for j in range(d):
        lo[j, b] = np.inf
        hi[j, b] = -np.inf
    for s in range(b * _LP, b * _LP + bcnt[b]):
        widen(lo.T, hi.T, b, X, slot_id[s])


@njit(cache=True, nogil=True)
def _fill(T, rows, m):
    """(Re)build the buckets, in place, over the rows ``rows[:m]`` (increasing ids):
    median splits into buckets of at most ``meta[_LEAF]`` rows."""
    X, C, slot_id, where, alive, bcnt, lo, hi, cen, esc, rad, rr, meta = T[:13]
    n, d = X.shape
    leaf = meta[_LEAF]
    if m > leaf:
        if m == n:
            order, bounds = split_leaves(X, leaf)
        else:
            Xs = np.empty((m, d))
            for a in range(m):
                for j in range(d):
                    Xs[a, j] = X[rows[a], j]
            order, bounds = split_leaves(Xs, leaf)
            for a in range(m):
                order[a] = rows[order[a]]
    else:
        order = rows[:m].copy()
        bounds = np.zeros(2, np.int64)
        bounds[1] = m
    nb = bounds.shape[0] - 1
    meta[_BUCKETS] = nb
    meta[_BUILT] = m
    for b in range(nb):
        cnt = bounds[b + 1] - bounds[b]
        bcnt[b] = cnt
        s0 = b * _LP
        for a in range(cnt):
            i = order[bounds[b] + a]
            slot_id[s0 + a] = i
            where[i] = s0 + a
        _refresh_box(X, slot_id, bcnt, lo, hi, b)
        for j in range(d):
            cen[j, b] = 0.0
        for a in range(cnt):
            for j in range(d):
                cen[j, b] += X[slot_id[s0 + a], j]
        for j in range(d):
            cen[j, b] /= max(cnt, 1)
        r = 0.0
        for a in range(cnt):
            t2 = 0.0
            for j in range(d):
                t = X[slot_id[s0 + a], j] - cen[j, b]
                t2 += t * t
            rr[s0 + a] = math.sqrt(t2)
            r = max(r, rr[s0 + a])
        rad[b] = r
        e = _exponent(r)
        sc = math.ldexp(1.0, -e)
        esc[0, b] = sc
        esc[1, b] = math.ldexp(1.0, 2 * e)
        for j in range(d):
            base = (b * d + j) * _LP
            for a in range(cnt):
                C[base + a] = np.float32((X[slot_id[s0 + a], j] - cen[j, b]) * sc)
            for a in range(cnt, _LP):  # padding (finite; masked by the count)
                C[base + a] = C[base]


@njit(cache=True, nogil=True)
def build(X, leaf, nthreads, par_min):
    """The index over the rows of ``X`` (C-contiguous float64, n x d): buckets of at
    most ``min(leaf, 64)`` rows; ``nthreads`` chunks for the farthest scans of at least
    ``par_min`` buckets (``PAR_MIN``: shorter ones run on the calling thread). Every row
    starts remaining. Data with a value beyond 1e100 (or NaN, inf) or without columns
    are queried by brute force in float64 (the plain path)."""
    n, d = X.shape
    leaf = max(2, min(leaf, _LP))
    nb = 1
    while (n + nb - 1) // nb > leaf:  # the split's leaves: halves until at most leaf
        nb *= 2
    slot_id = np.zeros(nb * _LP, np.int64)
    where = np.zeros(n, np.int64)
    alive = np.ones(n, np.bool_)
    bcnt = np.zeros(nb, np.int64)
    lo = np.empty((d, nb))
    hi = np.empty((d, nb))
    cen = np.zeros((d, nb))
    esc = np.zeros((2, nb))
    rad = np.zeros(nb)
    rr = np.zeros(nb * _LP)
    C = np.zeros(nb * d * _LP, np.float32)  # bucket b, column j, slot a at (b d + j) 64 + a
    meta = np.zeros(7, np.int64)
    meta[_REMAINING] = n
    meta[_THREADS] = max(nthreads, 1)
    meta[_LEAF] = leaf
    meta[_PAR_MIN] = par_min
    if d == 0:
        meta[_PLAIN] = 1
    for i in range(n):
        for j in range(d):
            if not abs(X[i, j]) < _FIT:
                meta[_PLAIN] = 1  # plain: every query by brute force in float64
    bnd = np.empty(nb)
    bup = np.empty(nb)
    scr = np.empty((meta[_THREADS], _LP), np.float32)
    cand_id = np.empty(n, np.int64)
    cand_lo = np.empty(n)
    T = (X, C, slot_id, where, alive, bcnt, lo, hi, cen, esc, rad, rr, meta, bnd, bup, scr, cand_id, cand_lo)
    if meta[_PLAIN] == 0:
        _fill(T, np.arange(n), n)
    return T


@njit(cache=True, nogil=True)
def remove(T, i):
    """Row ``i`` is grouped: free its slot, shrink its bucket's box and radius; when
    half the rows of the last build are gone, build the buckets again over the rest
    (tighter buckets, none empty)."""
    X, C, slot_id, where, alive, bcnt, lo, hi, cen, esc, rad, rr, meta = T[:13]
    n, d = X.shape
    if not alive[i]:
        return
    alive[i] = False
    meta[_REMAINING] -= 1
    if meta[_PLAIN]:
        return
    s = where[i]
    b = s // _LP
    last = b * _LP + bcnt[b] - 1
    r_i = rr[s]
    a = s - b * _LP
    for j in range(d):  # the last slot into the hole
        base = (b * d + j) * _LP
        C[base + a] = C[base + bcnt[b] - 1]
    if s != last:
        moved = slot_id[last]
        slot_id[s] = moved
        where[moved] = s
        rr[s] = rr[last]
    bcnt[b] -= 1
    if 2 * meta[_REMAINING] < meta[_BUILT] and meta[_REMAINING] > 4 * _LP:
        rows = np.empty(meta[_REMAINING], np.int64)
        m = np.int64(0)  # (not a literal: one compiled _fill)
        for t in range(n):
            if alive[t]:
                rows[m] = t
                m += 1
        _fill(T, rows, m)
        return
    on_box = False
    for j in range(d):
        v = X[i, j]
        if v == lo[j, b] or v == hi[j, b]:
            on_box = True
    if on_box:
        _refresh_box(X, slot_id, bcnt, lo, hi, b)
    if r_i == rad[b]:
        r = 0.0
        for t in range(b * _LP, b * _LP + bcnt[b]):
            r = max(r, rr[t])
        rad[b] = r


# -- scanning one bucket -------------------------------------------------------------


@njit(cache=True, nogil=True, inline="always")
def _eps(d, ra, rb, f2):
    # the bracket of a bucket's float32 distances, in unscaled units (f2 = 2**2e;
    # module docstring)
    sp = ra + rb
    p = sp * sp
    es = (d + 6.0) * _REL * p + (8.0 * d * sp + d + 2.0) * _ETA  # (d >= sqrt(d))
    return es * f2


@njit(cache=True, nogil=True, inline="always")
def _dists32(C, base, d, bq, out):
    """out[a] = sum_j (C[base + j 64 + a] - bq_j)**2 in float32 for the 64 slots of
    a bucket (padding included): columns four (or one) at a time, fused in one loop
    of a fixed length (vectorized without remainder; any summation order is within
    the bracket ``_eps``). Unsigned offsets: no negative-index wraparound."""
    for a in range(_LP):
        out[a] = np.float32(0.0)
    j = 0
    lp = np.uint64(_LP)
    while j + 4 <= d:
        b0 = np.uint64(base + j * _LP)
        b1 = b0 + lp
        b2 = b1 + lp
        b3 = b2 + lp
        q0 = np.float32(bq[j])
        q1 = np.float32(bq[j + 1])
        q2 = np.float32(bq[j + 2])
        q3 = np.float32(bq[j + 3])
        for a in range(_LP):
            ua = np.uint64(a)
            t0 = C[b0 + ua] - q0
            t1 = C[b1 + ua] - q1
            t2 = C[b2 + ua] - q2
            t3 = C[b3 + ua] - q3
            out[a] += (t0 * t0 + t1 * t1) + (t2 * t2 + t3 * t3)
        j += 4
    while j < d:
        b0 = np.uint64(base + j * _LP)
        q0 = np.float32(bq[j])
        for a in range(_LP):
            t0 = C[b0 + np.uint64(a)] - q0
            out[a] += t0 * t0
        j += 1


# -- plain queries: every remaining row in float64 (data beyond _FIT, NaN, inf; d = 0)


@njit(cache=True, nogil=True)
def _far_plain(T, q):
    X, alive = T[_X], T[_ALIVE]
    best_d = -1.0
    best_id = np.int64(-1)
    first = np.int64(-1)
    for i in range(X.shape[0]):
        if alive[i]:
            if first < 0:
                first = i
            dd = sq_dist(X, i, q)
            if dd > best_d:
                best_d = dd
                best_id = i
    return best_id if best_id >= 0 else first  # (NaN distances: some remaining row)


@njit(cache=True, nogil=True)
def _near_plain(T, q, m, exclude, out_id, out_d):
    X, alive = T[_X], T[_ALIVE]
    found = np.int64(0)  # (int64, not a literal: one compiled _insert)
    for i in range(X.shape[0]):
        if alive[i] and i != exclude:
            found = insert_nearest(out_id, out_d, m, found, i, sq_dist(X, i, q))
    return found


# -- farthest ----------------------------------------------------------------------


@njit(cache=True, nogil=True)
def _bounds(T, q, far):
    """For every bucket b: ``bnd[b]`` = an upper bound (``far`` = 1) or a lower bound of
    the float64 distances from q to its rows (-1 / inf when empty), and ``bup[b]`` =
    q's distance to its centre (widened up); returns the bucket of the best bound."""
    X, C, slot_id, where, alive, bcnt, lo, hi, cen, esc, rad, rr, meta, bnd, bup = T[:15]
    d = X.shape[1]
    nb = meta[_BUCKETS]
    box = np.zeros(nb)
    for b in range(nb):
        bup[b] = 0.0
    for j in range(d):
        qj = q[j]
        for b in range(nb):
            t = qj - cen[j, b]
            bup[b] += t * t
            if far:
                a = lo[j, b] - qj
                c = hi[j, b] - qj
                a = a * a
                c = c * c
                box[b] += a if a > c else c
            else:
                a = lo[j, b] - qj
                c = qj - hi[j, b]
                t = a if a > c else c
                t = t if t > 0.0 else 0.0
                box[b] += t * t
    best = np.int64(-1)
    bv = -2.0 if far else np.inf
    for b in range(nb):
        qn = math.sqrt(bup[b])
        bup[b] = qn * _SAFE
        if far:
            t = (qn + rad[b]) * _SAFE
            ball = t * t
            v = box[b] if box[b] < ball else ball
            v = v if bcnt[b] > 0 else -1.0
            if v > bv:
                bv = v
                best = b
        else:
            t = qn / _SAFE - rad[b] * _SAFE
            t = t if t > 0.0 else 0.0
            ball = t * t
            v = box[b] if box[b] > ball else ball
            v = v if bcnt[b] > 0 else np.inf
            if v < bv:
                bv = v
                best = b
        bnd[b] = v
    return best


@njit(cache=True, nogil=True, inline="always")
def _scan(X, C, bcnt, cen, esc, rad, bup, q, b, bq, dist):
    # float32 distances from q to bucket b's slots into dist (scaled by 2**-2e);
    # returns (eps, f2): the bracket and 2**2e; eps < 0: q too far, not scanned.
    # (One exit: an inlined early return costs more than the scan.)
    d = X.shape[1]
    sc = esc[0, b]
    f2 = esc[1, b]
    rb = bup[b] * sc
    eps = -1.0
    if rb <= _FAR:
        for j in range(d):
            bq[j] = (q[j] - cen[j, b]) * sc
        _dists32(C, b * d * _LP, d, bq, dist)
        eps = _eps(d, rad[b] * sc * _SAFE, rb, f2)
    return eps, f2


@njit(cache=True, nogil=True)
def _far_chunk(T, q, c, nth, best_lo):
    # buckets c, c + nth, ...: scan those whose bound reaches the best lower bound so
    # far; bnd[b] becomes the bucket's best upper bound (-1 if not scanned)
    X, C, slot_id, where, alive, bcnt, lo, hi, cen, esc, rad, rr, meta, bnd, bup, scr = T[:16]
    bq = np.empty(X.shape[1])
    dist = scr[c % scr.shape[0]]
    for b in range(c, meta[_BUCKETS], nth):
        if bnd[b] < best_lo or bnd[b] < 0.0:
            bnd[b] = -1.0
            continue
        # (written out, not an inlined helper: the hot loop of the scan)
        eps, f2 = _scan(X, C, bcnt, cen, esc, rad, bup, q, b, bq, dist)
        cnt = bcnt[b]
        if eps < 0.0:
            m = -1.0
            for s in range(b * _LP, b * _LP + cnt):
                m = max(m, sq_dist(X, slot_id[s], q))
            eps = 0.0
        else:
            mx = np.float32(0.0)
            for a in range(_LP):
                v = dist[a] if a < cnt else np.float32(0.0)
                mx = v if v > mx else mx
            m = np.float64(mx) * f2
        bnd[b] = m + eps
        if m - eps > best_lo:
            best_lo = m - eps
    return best_lo


@njit(cache=True, nogil=True, parallel=True)
def _far_chunks(T, q, nth, best_lo):
    res = np.empty(nth)
    for c in prange(nth):
        res[c] = _far_chunk(T, q, c, nth, best_lo)
    return res.max()


@njit(cache=True, nogil=True)
def farthest(T, q):
    """The remaining row farthest from ``q`` (ties: the lowest row id); -1 if none."""
    X, C, slot_id, where, alive, bcnt, lo, hi, cen, esc, rad, rr, meta, bnd, bup, scr = T[:16]
    if meta[_REMAINING] == 0:
        return np.int64(-1)
    if meta[_PLAIN]:
        return _far_plain(T, q)
    n, d = X.shape
    seed = _bounds(T, q, np.int64(1))
    bq = np.empty(d)
    dist = scr[0]
    # the seed first (its bound the largest: a chunk of one bucket), then every
    # bucket that may beat it
    best_lo = _far_chunk(T, q, seed, max(meta[_BUCKETS], np.int64(1)), -1.0)
    up0 = bnd[seed]
    bnd[seed] = -2.0  # done: not again
    nth = meta[_THREADS]
    if nth > 1:
        # threads only for a long scan: a parallel region costs more than a short one
        work = 0
        for b in range(meta[_BUCKETS]):
            work += bnd[b] >= best_lo
        if work < meta[_PAR_MIN]:
            nth = 1
    if nth > 1:
        best_lo = max(best_lo, _far_chunks(T, q, nth, best_lo))
    else:
        best_lo = _far_chunk(T, q, np.int64(0), np.int64(1), best_lo)
    bnd[seed] = up0
    # the candidates: rows whose upper bound reaches best_lo, measured in float64
    best_d = -1.0
    best_id = np.int64(-1)
    for b in range(meta[_BUCKETS]):
        if bnd[b] < best_lo:
            continue
        eps, f2 = _scan(X, C, bcnt, cen, esc, rad, bup, q, b, bq, dist)
        for a in range(bcnt[b]):
            i = slot_id[b * _LP + a]
            if eps < 0.0 or np.float64(dist[a]) * f2 + eps >= best_lo:
                best_d, best_id = farther(sq_dist(X, i, q), i, best_d, best_id)
    return best_id


# -- nearest -----------------------------------------------------------------------


@njit(cache=True, nogil=True)
def _near_collect(X, slot_id, bcnt, cand_id, cand_lo, q, b, m, exclude, dist, eps, f2, top, nc, tau):
    # bucket b's rows into the candidates (lower bound <= tau) and their upper bounds
    # into top (the m smallest, sorted); eps < 0: measure in float64. Returns (nc, tau)
    exact = eps < 0.0
    if exact:
        eps = 0.0
    for a in range(bcnt[b]):
        i = slot_id[b * _LP + a]
        if exact:
            dd = sq_dist(X, i, q)
        else:
            dd = np.float64(dist[a]) * f2
        lo_d = dd - eps
        if lo_d > tau or i == exclude:
            continue
        cand_id[nc] = i
        cand_lo[nc] = lo_d
        nc += 1
        up = dd + eps
        if up < tau:
            p = m - 1
            while p > 0 and top[p - 1] > up:
                top[p] = top[p - 1]
                p -= 1
            top[p] = up
            tau = top[m - 1]
    return nc, tau


@njit(cache=True, nogil=True)
def knn(T, q, m, exclude, out_id, out_d):
    """The ``m`` remaining rows nearest to ``q``, other than row ``exclude``.

    Fills ``out_id[:found]`` / ``out_d[:found]`` (row ids, float64 distances) in
    increasing (distance, row id) order and returns ``found`` (< m only when fewer
    rows remain)."""
    X, C, slot_id, where, alive, bcnt, lo, hi, cen, esc, rad, rr, meta, bnd, bup, scr, cand_id, cand_lo = T
    if m <= 0 or meta[_REMAINING] == 0:
        return 0
    if meta[_PLAIN]:
        return _near_plain(T, q, m, exclude, out_id, out_d)
    d = X.shape[1]
    seed = _bounds(T, q, np.int64(0))
    top = np.full(m, np.inf)
    bq = np.empty(d)
    dist = scr[0]
    tau = np.inf
    nc = np.int64(0)  # (int64, not a literal: one compiled _near_collect)
    eps, f2 = _scan(X, C, bcnt, cen, esc, rad, bup, q, seed, bq, dist)
    nc, tau = _near_collect(X, slot_id, bcnt, cand_id, cand_lo, q, seed, m, exclude, dist, eps, f2, top, nc, tau)
    for b in range(meta[_BUCKETS]):
        if b == seed or bnd[b] > tau:
            continue
        eps, f2 = _scan(X, C, bcnt, cen, esc, rad, bup, q, b, bq, dist)
        hits = 1
        if eps >= 0.0:
            # a vectorized count first: slots whose lower bound can reach tau have
            # d32 <= (tau + eps) / f2, which rounded up to float32 is thr
            thr = np.float32((tau + eps) / f2 * _UP32)
            cnt = bcnt[b]
            hits = 0
            for a in range(_LP):
                hits += (dist[a] <= thr) & (a < cnt)
        if hits > 0:
            nc, tau = _near_collect(X, slot_id, bcnt, cand_id, cand_lo, q, b, m, exclude, dist, eps, f2, top, nc,
                                    tau)
    # the candidates still below tau, measured in float64: the m smallest by
    # (distance, row id)
    found = np.int64(0)
    for e in range(nc):
        if cand_lo[e] <= tau:
            found = insert_nearest(out_id, out_d, m, found, cand_id[e], sq_dist(X, cand_id[e], q))
    return found


# -- farthest from a slowly moving point (the centroid) -----------------------------
#
# MDAV asks "farthest from the centroid of the remaining rows" once per group, and
# that centroid barely moves between groups. We keep the remaining rows sorted by
# their distance D0 to an anchor point a. By the triangle inequality
# |p - c| <= D0(p) + |a - c|, so a scan in decreasing D0 can stop as soon as
# D0(p) + |a - c| falls below the best distance found: usually after a handful of
# rows. When scans grow long (the centroid has drifted), we re-anchor at c.
# A = (order, D0, head, anchor, work): row ids by decreasing D0; head[0] is the
# first possibly remaining entry, work[0] the rows scanned since the last re-anchor.


@njit(cache=True, nogil=True)
def _anchor_at(T, c):
    X, alive = T[_X], T[_ALIVE]
    n = X.shape[0]
    m = 0
    for i in range(n):
        m += alive[i]
    ids = np.empty(m, np.int64)
    key = np.empty(m)
    D0 = np.zeros(n)
    a = 0
    for i in range(n):
        if alive[i]:
            D0[i] = math.sqrt(sq_dist(X, i, c))
            ids[a] = i
            key[a] = -D0[i]
            a += 1
    order = ids[np.argsort(key, kind="mergesort")]
    head = np.zeros(1, np.int64)
    work = np.zeros(1, np.int64)
    return (order, D0, head, c.copy(), work)


@njit(cache=True, nogil=True)
def anchor_init(T, c):
    """Anchor structure for ``farthest_from_moving`` (see above)."""
    return _anchor_at(T, c)


@njit(cache=True, nogil=True)
def farthest_from_moving(T, A, c):
    """Same answer as ``farthest(T, c)``, fast when ``c`` moves little between calls.

    Returns ``(id, A)``; ``A`` is replaced when the scan decides to re-anchor.
    """
    X, alive, meta = T[_X], T[_ALIVE], T[_META]
    order, D0, head, a, work = A
    delta = 0.0
    for j in range(c.shape[0]):
        t = c[j] - a[j]
        delta += t * t
    delta = math.sqrt(delta)
    best_d = -1.0
    best_r = -1.0
    best_id = np.int64(-1)
    m = order.shape[0]
    while head[0] < m and not alive[order[head[0]]]:
        head[0] += 1
    scanned = 0
    for e in range(head[0], m):
        i = order[e]
        if not alive[i]:
            continue
        if (D0[i] + delta) * _SAFE < best_r:
            break
        scanned += 1
        dd = sq_dist(X, i, c)
        if dd > best_d or (dd == best_d and i < best_id):
            best_d = dd
            best_r = math.sqrt(dd)
            best_id = i
    work[0] += scanned
    if best_id < 0 and head[0] < m:  # (NaN distances, plain path: some remaining row)
        best_id = order[head[0]]
    # re-anchor when the work spent scanning since the last anchor exceeds what a
    # rebuild costs (amortized O(1) rebuilds per "remaining rows" scanned)
    if scanned > 32 and work[0] > meta[_REMAINING]:
        A = _anchor_at(T, c)
    return best_id, A
