"""Pass 2, partition: cut the rows into spatially coherent blocks and spill them.

The plan is a kd-tree of median splits, built from a sample kept by the profile
pass (every s-th row, so the sample does not depend on chunking). A node is cut
in two at the sample median of its standardized dimension of largest variance, until the
estimated rows of each leaf are at most ``block_size``; leaves, numbered in
depth-first order (neighbours in space get neighbouring numbers), are the
blocks. The split key is (value, row id), so ties split exactly where the plan
says. One streaming pass then routes every row to its leaf with a Numba kernel
and appends its QI values, with its global row id, to that block's spill file.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .io.source import Source
from .io.spill import BlockStore
from .kernels.moments import standardize_serial
from .kernels.partition import assign_leaves, counting_order, gather_records
from .profile import Profile
from .progress import Progress


@dataclass
class Plan:
    dim: np.ndarray        # (nodes,) int64 split dimension (index into the grouping columns)
    thr_value: np.ndarray  # (nodes,) float64
    thr_row: np.ndarray    # (nodes,) int64
    left: np.ndarray       # (nodes,) int64 child node ids
    right: np.ndarray
    leaf_of: np.ndarray    # (nodes,) int64 block number, -1 for inner nodes
    n_blocks: int

    def assign(self, Z: np.ndarray, row_ids: np.ndarray) -> np.ndarray:
        out = np.empty(Z.shape[0], np.int64)
        assign_leaves(Z, row_ids, self.dim, self.thr_value, self.thr_row, self.left, self.right,
                      self.leaf_of, out)
        return out


def sample_stride(rows: int, block_size: int) -> int:
    """Stride of the plan's sample: about 256 sample rows per block, at least 200,000 rows."""
    blocks = -(-rows // block_size)
    target = max(200_000, 256 * blocks)
    return max(1, rows // target)


def standardized(X: np.ndarray, profile: Profile, cols: np.ndarray) -> np.ndarray:
    out = np.empty((X.shape[0], cols.shape[0]))
    standardize_serial(np.ascontiguousarray(X), profile.scale, profile.mean, profile.sd, cols, out)
    return out


def plan_blocks(Zs: np.ndarray, ids: np.ndarray, rows: int, block_size: int) -> Plan:
    """Median-split plan from the standardized sample ``Zs`` (m, d) and its row ids."""
    m = Zs.shape[0]
    per_sample_row = rows / max(m, 1)
    dim, tv, tr, left, right, leaf = [], [], [], [], [], []

    def new_node():
        for lst, v in ((dim, 0), (tv, 0.0), (tr, 0), (left, -1), (right, -1), (leaf, -1)):
            lst.append(v)
        return len(dim) - 1

    n_blocks = 0
    root = new_node()
    stack = [(root, np.arange(m))]
    while stack:
        node, idx = stack.pop()
        if idx.shape[0] * per_sample_row <= block_size or idx.shape[0] < 2:
            leaf[node] = n_blocks
            n_blocks += 1
            continue
        sub = Zs[idx]
        j = int(np.argmax(sub.var(axis=0)))
        order = np.lexsort((ids[idx], sub[:, j]))
        h = idx.shape[0] // 2
        pivot = idx[order[h - 1]]
        dim[node], tv[node], tr[node] = j, float(Zs[pivot, j]), int(ids[pivot])
        lo, hi = new_node(), new_node()
        left[node], right[node] = lo, hi
        # depth first, left before right: push right first
        stack.append((hi, idx[order[h:]]))
        stack.append((lo, idx[order[:h]]))
    return Plan(np.array(dim, np.int64), np.array(tv, np.float64), np.array(tr, np.int64),
                np.array(left, np.int64), np.array(right, np.int64), np.array(leaf, np.int64), n_blocks)


def partition_pass(source: Source, profile: Profile, cols: np.ndarray, plan: Plan, store: BlockStore,
                   chunk_rows: int, progress: bool = False) -> None:
    """Route every row to its block and spill it (QI values in original units + row id)."""
    qi = list(profile.columns)
    order = np.empty(chunk_rows, np.int64)
    start = np.empty(plan.n_blocks + 1, np.int64)
    with Progress("partition", profile.rows, progress) as bar:
        for offset, X in source.iter_arrays(qi, chunk_rows):
            h = X.shape[0]
            ids = np.arange(offset, offset + h, dtype=np.int64)
            leaf = plan.assign(standardized(X, profile, cols), ids)
            if order.shape[0] < h:
                order = np.empty(h, np.int64)
            counting_order(leaf, plan.n_blocks, order[:h], start)
            # the chunk's records sorted by block once; each block gets a view
            rec = np.empty((h, 1 + X.shape[1]))
            gather_records(X, offset, order[:h], rec)
            for b in np.flatnonzero(np.diff(start)):
                store.append_records(int(b), rec[start[b]: start[b + 1]])
            bar.update(offset + h)
    store.flush()
