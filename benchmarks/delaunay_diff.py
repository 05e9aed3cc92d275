"""Diff two tetrahedralisations of the same cloud, and say whether the tets that differ are co-spherical ties.

Usage (from the repo root)::

    PYTHONPATH=src python benchmarks/delaunay_diff.py --size 5400000 a.npy b.npy
    PYTHONPATH=src python benchmarks/delaunay_diff.py --size 1000000 a.npy --single   # b: one scipy Qhull

``a.npy`` / ``b.npy``: ``[M, 4]`` tets of ``benchmarks/delaunay_scale.py``'s cloud (``--size``, ``--seed``,
``--cloud`` as there), e.g. from ``benchmarks/delaunay_fixup_replay.py --save``. ``--single``: compare with
one global ``scipy.spatial.Delaunay`` call instead of a second file. Prints the common tets, the tets only in
each, and how many of those are *ties*: near-flat (``|det| / L^3 <= 1e-8``) or with a 5th point on their
circumsphere within ``--tol`` (relative to ``r^2``); the rest (``not ties``) would be real differences.
Not collected by pytest.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from delaunay_scale import _tet_hash, make_cloud  # noqa: E402


def ties(pts: np.ndarray, tets: np.ndarray, tol: float) -> np.ndarray:
    """``[T]`` bool: near-flat tets or tets with a 5th point within ``tol * r^2`` of their sphere."""
    from scipy.spatial import cKDTree

    from meshlift.isosurface.delaunay_parallel import _circumspheres

    if tets.shape[0] == 0:
        return np.zeros(0, dtype=bool)
    centre, r2, rel = _circumspheres(pts, tets)
    dist, idx = cKDTree(pts).query(np.nan_to_num(centre, nan=1e30, posinf=1e30, neginf=-1e30), k=5)
    is_vertex = (idx[:, :, None] == tets[:, None, :]).any(axis=2)
    d2 = np.where(is_vertex, np.inf, dist**2).min(axis=1)
    return (np.abs(rel) <= 1e-8) | (d2 <= r2 * (1 + tol))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a")
    ap.add_argument("b", nargs="?")
    ap.add_argument("--size", type=int, required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cloud", choices=("pivots", "uniform"), default="pivots")
    ap.add_argument("--single", action="store_true", help="b = one global scipy Qhull call")
    ap.add_argument("--tol", type=float, default=1e-9)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    pts = make_cloud(args.cloud, args.size, args.seed)
    a = np.sort(np.load(args.a).astype(np.int64), axis=1)
    if args.single:
        from scipy.spatial import Delaunay

        b = np.sort(Delaunay(pts).simplices.astype(np.int64), axis=1)
    else:
        b = np.sort(np.load(args.b).astype(np.int64), axis=1)
    ha, hb = _tet_hash(a), _tet_hash(b)
    only_a, only_b = a[~np.isin(ha, hb)], b[~np.isin(hb, ha)]
    ta, tb = ties(pts, only_a, args.tol), ties(pts, only_b, args.tol)
    row = {"points": int(pts.shape[0]), "tets_a": int(a.shape[0]), "tets_b": int(b.shape[0]),
           "common": int(a.shape[0] - only_a.shape[0]), "only_a": int(only_a.shape[0]),
           "only_b": int(only_b.shape[0]), "only_a_not_ties": int((~ta).sum()),
           "only_b_not_ties": int((~tb).sum()), "b": "single scipy Qhull" if args.single else args.b}
    print(json.dumps(row, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(row, f, indent=1)


if __name__ == "__main__":
    main()
