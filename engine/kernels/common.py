"""Helpers every family of kernels shares: the distance, the bounded "m nearest"
insertion, the 64-bit mixer and the prefetch hint.

* ``sq_dist``: the squared Euclidean distance summed in column order, the one
  expression every exact kernel and every slow reference (``tests/reference.py``)
  computes, so that distances agree to the bit;
* ``insert_nearest``: a row into the m nearest found so far, sorted by (distance,
  row id): the tie rule of the MDAV family and of the kd-tree;
* ``farther``: the "farthest so far" rule, ties to the lowest row id;
* ``widen``: a box (per-column least and largest values) grown by one row;
* ``mix64``: splitmix64's finalizer (every output bit depends on every input bit);
* ``prefetch(array, i)``: a hint to load the cache line of ``array[i]`` (the first
  element of row ``i`` of a 2-D array) before it is used, via LLVM's prefetch
  intrinsic. It changes no value, only when memory is fetched: a loop over keys in
  random order can ask for the slot of a key a few iterations ahead, so the misses
  overlap instead of stalling one after another.
"""

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic


@njit(cache=True, nogil=True)
def sq_dist(X, i, q):
    """Squared Euclidean distance of row ``X[i]`` to point ``q``, summed in column order."""
    s = 0.0
    for j in range(q.shape[0]):
        t = X[i, j] - q[j]
        s += t * t
    return s


@njit(cache=True, nogil=True, inline="always")
def insert_nearest(out_id, out_d, m, found, i, dd):
    """Row ``i`` at distance ``dd`` into the ``m`` nearest so far (``out_id[:found]``,
    ``out_d[:found]``, sorted by (distance, row id)); returns the new ``found``."""
    if found == m:
        if dd > out_d[m - 1] or (dd == out_d[m - 1] and i > out_id[m - 1]):
            return found
        p = m - 1
    else:
        p = found
        found += 1
    while p > 0 and (out_d[p - 1] > dd or (out_d[p - 1] == dd and out_id[p - 1] > i)):
        out_d[p] = out_d[p - 1]
        out_id[p] = out_id[p - 1]
        p -= 1
    out_d[p] = dd
    out_id[p] = i
    return found


@njit(cache=True, nogil=True, inline="always")
def farther(dd, i, best_d, best_id):
    """``(best_d, best_id)`` after row i at distance dd: the farther, ties to the lower row."""
    if dd > best_d or (dd == best_d and i < best_id):
        return dd, i
    return best_d, best_id


@njit(cache=True, nogil=True, inline="always")
def widen(lo, hi, g, X, i):
    """Box ``g`` (``lo[g]``, ``hi[g]``: the least and largest value of each column) grown
    by row ``X[i]``."""
    for j in range(X.shape[1]):
        x = X[i, j]
        if x < lo[g, j]:
            lo[g, j] = x
        if x > hi[g, j]:
            hi[g, j] = x


@njit(cache=True, nogil=True, inline="always")
def mix64(z):
    """splitmix64's finalizer of the uint64 ``z``."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@intrinsic
def prefetch(typingctx, arr, idx):
    if not isinstance(arr, types.Array) or not isinstance(idx, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        aryty, idxty = signature.args
        ary = context.make_array(aryty)(context, builder, args[0])
        i = context.cast(builder, args[1], idxty, types.intp)
        zero = context.get_constant(types.intp, 0)
        ptr = cgutils.get_item_pointer2(context, builder, data=ary.data,
                                        shape=cgutils.unpack_tuple(builder, ary.shape),
                                        strides=cgutils.unpack_tuple(builder, ary.strides),
                                        layout=aryty.layout, inds=[i] + [zero] * (aryty.ndim - 1),
                                        wraparound=False, boundscheck=False)
        i8p = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]),
                                            "llvm.prefetch.p0")
        # read (0), high temporal locality (3), data cache (1)
        builder.call(fn, [builder.bitcast(ptr, i8p), ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return types.void(arr, idx), codegen
