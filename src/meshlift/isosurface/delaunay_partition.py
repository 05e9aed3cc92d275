"""The blocks of :mod:`meshlift.isosurface.delaunay_parallel` (step 1 of its docstring): a kd-split of the
points at point-count quantiles into half-open cells that tile R^3, and each cell's halo set (the points in
the cell grown by its margin). Re-exported by :mod:`delaunay_parallel`. numpy only.

With a thread pool both passes run *level by level* (:func:`_kd_split_levels`, :func:`_gather_levels`):
every node of a tree level is split (or its candidate points divided) side by side in the pool, so only the
root's pass over all points is serial (5.4M points, 48 blocks, 16 workers: the recursive split was ~2.9 s
of one thread). The recursive :func:`_kd_split` and :func:`_gather` (``pool=None``) are the reference twins:
the same tree, the same halo sets in the same order.
"""

from __future__ import annotations

import numpy as np


def _split_step(pts: np.ndarray, ids: np.ndarray, lo, hi, k: int):
    """One step of :func:`_kd_split`: None for a leaf, else ``(axis, s, left, right)`` with ``left`` and
    ``right`` the children's ``(ids, lo, hi, k)`` (left: ``x[axis] < s``)."""
    if k <= 1 or ids.size < 64:
        return None
    x = pts[ids]
    axis = int(np.argmax(x.max(axis=0) - x.min(axis=0)))
    kl = k // 2
    q = min(int(round(ids.size * kl / k)), ids.size - 1)
    s = float(np.partition(x[:, axis], q)[q])
    left = x[:, axis] < s
    if left.all() or not left.any():
        return None
    lhi, rlo = hi.copy(), lo.copy()
    lhi[axis] = s
    rlo[axis] = s
    return axis, s, (ids[left], lo, lhi, kl), (ids[~left], rlo, hi, k - kl)


def _kd_split(pts: np.ndarray, ids: np.ndarray, lo, hi, k: int):
    """Split ``ids`` into ``k`` cells at point-count quantiles (recursive, one thread: the reference). Returns
    a tree: a leaf ``[lo, hi, core_ids]`` or ``(axis, s, left, right)`` (left: ``x[axis] < s``)."""
    st = _split_step(pts, ids, lo, hi, k)
    if st is None:
        return [lo, hi, ids]
    return (st[0], st[1], _kd_split(pts, *st[2]), _kd_split(pts, *st[3]))


def _kd_split_levels(pts: np.ndarray, ids: np.ndarray, lo, hi, k: int, pool):
    """:func:`_kd_split` level by level, each level's nodes split side by side in ``pool`` (the same tree)."""
    root = [(ids, lo, hi, k), None, None]  # [args, step, children]
    level = [root]
    while level:
        steps = list(pool.map(lambda nd: _split_step(pts, *nd[0]), level))
        nxt = []
        for nd, st in zip(level, steps):
            nd[1] = st
            if st is not None:
                nd[2] = ([st[2], None, None], [st[3], None, None])
                nxt.extend(nd[2])
                nd[0] = None  # (the children hold the ids now)
        level = nxt

    def build(nd):
        if nd[1] is None:
            ids_, lo_, hi_, _ = nd[0]
            return [lo_, hi_, ids_]
        return (nd[1][0], nd[1][1], build(nd[2][0]), build(nd[2][1]))

    return build(root)


def _leaves(tree) -> list:
    return [tree] if isinstance(tree, list) else _leaves(tree[2]) + _leaves(tree[3])


def _gather_step(pts, ids, tree) -> list:
    """One step of :func:`_gather`: at a leaf, append its halo set (the points of ``ids`` in its cell grown by
    its margin ``leaf[3]``, closed box) and return ``[]``; else the two children's ``(candidate ids, subtree)``."""
    if isinstance(tree, list):
        lo, hi, _, m = tree[:4]
        inside = np.all((pts[ids] >= lo - m) & (pts[ids] <= hi + m), axis=1)
        tree.append(ids[inside])
        return []
    axis, s, left, right = tree
    x = pts[ids, axis]
    ml = max(leaf[3] for leaf in _leaves(left))
    mr = max(leaf[3] for leaf in _leaves(right))
    return [(ids[x <= s + ml], left), (ids[x >= s - mr], right)]


def _gather(pts, ids, tree) -> None:
    """Append to every leaf its halo set (recursive, one thread: the reference)."""
    for sub_ids, sub in _gather_step(pts, ids, tree):
        _gather(pts, sub_ids, sub)


def _gather_levels(pts, ids, tree, pool) -> None:
    """:func:`_gather` level by level, each level's subtrees divided side by side in ``pool``."""
    level = [(ids, tree)]
    while level:
        level = [c for out in pool.map(lambda it: _gather_step(pts, *it), level) for c in out]


def partition(pts: np.ndarray, blocks: int, margin: float, pool=None, workers: int = 1):
    """``(lo, hi, halo_ids, m)`` per block: the cell (±inf outside), its halo set and margin (absolute).
    With a ``pool`` (a thread pool), the split and the gather run level by level in its threads (the same
    result as without; ``workers`` is kept for the callers)."""
    n = pts.shape[0]
    lo0, hi0 = np.full(3, -np.inf), np.full(3, np.inf)
    if pool is not None:
        tree = _kd_split_levels(pts, np.arange(n), lo0, hi0, blocks, pool)
    else:
        tree = _kd_split(pts, np.arange(n), lo0, hi0, blocks)
    leaves = _leaves(tree)
    pmin, pmax = pts.min(axis=0), pts.max(axis=0)
    tiny = 1e-9 * max(float((pmax - pmin).max()), 1e-300)
    for leaf in leaves:
        lo, hi, core = leaf
        side = np.maximum(np.minimum(hi, pmax) - np.maximum(lo, pmin), tiny)
        leaf.append(margin * (float(np.prod(side)) / max(core.size, 1)) ** (1.0 / 3.0))
    if pool is not None:
        _gather_levels(pts, np.arange(n), tree, pool)
    else:
        _gather(pts, np.arange(n), tree)
    return [(leaf[0], leaf[1], leaf[4], float(leaf[3])) for leaf in leaves]
