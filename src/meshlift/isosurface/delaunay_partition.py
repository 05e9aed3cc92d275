"""The blocks of :mod:`meshlift.isosurface.delaunay_parallel` (step 1 of its docstring): a kd-split of the
points at point-count quantiles into half-open cells that tile R^3, and each cell's halo set (the points in
the cell grown by its margin). Re-exported by :mod:`delaunay_parallel`. numpy only.
"""

from __future__ import annotations

import concurrent.futures as cf

import numpy as np

def _kd_split(pts: np.ndarray, ids: np.ndarray, lo, hi, k: int, pool=None, serial_k: int = 0):
    """Split ``ids`` into ``k`` cells at point-count quantiles. Returns a tree: a leaf ``[lo, hi, core_ids]``
    or ``(axis, s, left, right)`` (left: ``x[axis] < s``); subtrees of at most ``serial_k`` cells are split
    in ``pool`` (their place holds a future until :func:`_resolve`)."""
    if pool is not None and k <= serial_k:
        return pool.submit(_kd_split, pts, ids, lo, hi, k)
    if k <= 1 or ids.size < 64:
        return [lo, hi, ids]
    x = pts[ids]
    axis = int(np.argmax(x.max(axis=0) - x.min(axis=0)))
    kl = k // 2
    q = min(int(round(ids.size * kl / k)), ids.size - 1)
    s = float(np.partition(x[:, axis], q)[q])
    left = x[:, axis] < s
    if left.all() or not left.any():
        return [lo, hi, ids]
    lhi, rlo = hi.copy(), lo.copy()
    lhi[axis] = s
    rlo[axis] = s
    left_tree = _kd_split(pts, ids[left], lo, lhi, kl, pool, serial_k)
    return (axis, s, left_tree, _kd_split(pts, ids[~left], rlo, hi, k - kl, pool, serial_k))


def _resolve(tree):
    if isinstance(tree, cf.Future):
        return tree.result()
    if isinstance(tree, tuple):
        return (tree[0], tree[1], _resolve(tree[2]), _resolve(tree[3]))
    return tree


def _leaves(tree) -> list:
    return [tree] if isinstance(tree, list) else _leaves(tree[2]) + _leaves(tree[3])


def _gather(pts, ids, tree, pool=None, serial_n: int = 0) -> list:
    """Append to every leaf the points of ``ids`` in its cell grown by its margin ``leaf[3]`` (closed box);
    returns futures of the subtrees of at most ``serial_n`` candidate points sent to ``pool``."""
    if pool is not None and ids.size <= serial_n:
        return [pool.submit(_gather, pts, ids, tree)]
    if isinstance(tree, list):
        lo, hi, _, m = tree[:4]
        inside = np.all((pts[ids] >= lo - m) & (pts[ids] <= hi + m), axis=1)
        tree.append(ids[inside])
        return []
    axis, s, left, right = tree
    x = pts[ids, axis]
    ml = max(leaf[3] for leaf in _leaves(left))
    mr = max(leaf[3] for leaf in _leaves(right))
    return (_gather(pts, ids[x <= s + ml], left, pool, serial_n)
            + _gather(pts, ids[x >= s - mr], right, pool, serial_n))


def partition(pts: np.ndarray, blocks: int, margin: float, pool=None, workers: int = 1):
    """``(lo, hi, halo_ids, m)`` per block: the cell (±inf outside), its halo set and margin (absolute).
    With a ``pool``, subtrees are split and gathered in its threads."""
    n = pts.shape[0]
    serial_k = max(1, blocks // max(2 * workers, 1)) if pool is not None else 0
    tree = _resolve(_kd_split(pts, np.arange(n), np.full(3, -np.inf), np.full(3, np.inf), blocks, pool, serial_k))
    leaves = _leaves(tree)
    pmin, pmax = pts.min(axis=0), pts.max(axis=0)
    tiny = 1e-9 * max(float((pmax - pmin).max()), 1e-300)
    for leaf in leaves:
        lo, hi, core = leaf
        side = np.maximum(np.minimum(hi, pmax) - np.maximum(lo, pmin), tiny)
        leaf.append(margin * (float(np.prod(side)) / max(core.size, 1)) ** (1.0 / 3.0))
    for f in _gather(pts, np.arange(n), tree, pool, max(1, n // max(2 * workers, 1)) if pool is not None else 0):
        f.result()
    return [(leaf[0], leaf[1], leaf[4], float(leaf[3])) for leaf in leaves]
