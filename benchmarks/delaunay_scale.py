"""Time one global Qhull call against the partitioned parallel Delaunay on MILo-like pivot clouds.

Usage (from the repo root)::

    PYTHONPATH=src python benchmarks/delaunay_scale.py --sizes 270000,1000000,5400000 --workers 16 --out d.json

Each (size, method) runs in a fresh subprocess, so its peak RSS is its own. The cloud: G = size / 9
Gaussians with centres on a noisy unit sphere shell (radius 1 +- 2%), anisotropic scales shrinking like
``G^-1/2`` (a surface's density), random rotations; each gives MILo's 9 pivots (centre + the 8 corners of
its 3-sigma box), made in float32 like the training's pivots (``--cloud uniform``: uniform in a cube).
The table gives points, tets, seconds, points per second, workers, peak RSS (of the process; for forked
workers the largest worker's peak is in the JSON) and, for the parallel path,
its halo copies, fix-up points and stage times; ``--check`` also compares the two tet sets (sizes where
both run). One global Qhull is skipped above ``--single-max`` points (5.4M takes ~10 min on one core).
Not collected by pytest.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np


def pivot_cloud(n: int, seed: int = 0) -> np.ndarray:
    """``[~n, 3]`` float64 MILo-like pivots (module docstring), rounded through float32."""
    g = max(1, n // 9)
    rng = np.random.default_rng(seed)
    d = rng.normal(size=(g, 3))
    mu = d / np.linalg.norm(d, axis=1, keepdims=True) * (1.0 + 0.02 * rng.normal(size=(g, 1)))
    sigma = 0.004 * np.exp(0.5 * rng.normal(size=(g, 3))) * (g / 30000) ** -0.5
    q = rng.normal(size=(g, 4))
    w, x, y, z = (q / np.linalg.norm(q, axis=1, keepdims=True)).T
    rot = np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y),
                    2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
                    2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], axis=1).reshape(-1, 3, 3)
    c = np.arange(8)
    signs = np.stack([2 * ((c >> i) & 1) - 1 for i in range(3)], axis=1).astype(np.float64)
    corners = mu[:, None] + np.einsum("gij,gcj->gci", rot, signs[None] * (3.0 * sigma)[:, None])
    return np.concatenate([mu[:, None], corners], axis=1).reshape(-1, 3).astype(np.float32).astype(np.float64)


def make_cloud(kind: str, n: int, seed: int) -> np.ndarray:
    if kind == "uniform":
        return np.random.default_rng(seed).random((n, 3))
    return pivot_cloud(n, seed)


def _one(args) -> dict:
    """One measurement in this process (called through the subprocess)."""
    from meshlift.isosurface import delaunay_parallel as dp
    from meshlift.isosurface.delaunay import delaunay_tets, delaunay_tets_parallel

    pts = make_cloud(args.cloud, args.size, args.seed)
    row = {"method": args.one, "cloud": args.cloud, "points": int(pts.shape[0])}
    t0 = time.perf_counter()
    if args.one == "single":
        res = delaunay_tets(pts, parallel_min_points=1 << 62)
        row["workers"] = 1
    else:
        stats = {}
        real = dp.partitioned_delaunay

        def spy(*a, **k):
            out = real(*a, **k)
            stats.update(out.stats, fallback=out.fallback)
            return out

        dp.partitioned_delaunay = spy
        res = delaunay_tets_parallel(pts, workers=args.workers, blocks=args.blocks, margin=args.margin,
                                     executor=args.executor)
        row["workers"] = stats.get("workers", args.workers)
        for k in ("blocks", "halo_points", "fix_points", "partition_s", "blocks_s", "merge_s", "fix_s",
                  "qhull_error", "executor", "fallback", "kd_queries", "kd_kept", "unused_points", "fix_groups",
                  "fix_calls", "fix_call_points", "accept_s", "memory_gb_estimate", "fix_rounds",
                  "grown_tets", "fix_round_calls", "fix_reused_groups", "promoted_tets", "demoted_slivers",
                  "fix_call_s", "sliver_passes", "fix_regrouped"):
            if k in stats:
                v = stats[k]
                row[k] = round(v, 3) if isinstance(v, float) else v
        row["seconds_engine"] = round(stats.get("seconds", 0.0), 3)
        bs = stats.get("block_seconds") or [0.0]
        row["block_s_max"], row["block_s_sum"] = max(bs), round(sum(bs), 2)
    row["seconds"] = round(time.perf_counter() - t0, 3)
    row["tets"] = int(res.tets.shape[0])
    row["points_per_s"] = round(row["points"] / row["seconds"])
    row["peak_rss_gb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)
    # forked workers: the largest one's peak (each shares the parent's pages until it writes them)
    row["worker_peak_rss_gb"] = round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20, 2)
    row["unused_points"] = res.num_unused_points
    if args.save:
        np.save(args.save, np.sort(res.tets.numpy(), axis=1))
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="100000,270000", help="comma-separated point counts")
    ap.add_argument("--workers", type=int, default=None, help="threads of the parallel path (default: all cores)")
    ap.add_argument("--blocks", type=int, default=None, help="blocks (default: 3 per worker)")
    ap.add_argument("--margin", type=float, default=None, help="halo width in point spacings (default: 1)")
    ap.add_argument("--executor", default="thread", help="thread, process, or both (comma-separated)")
    ap.add_argument("--cloud", choices=("pivots", "uniform"), default="pivots")
    ap.add_argument("--single-max", type=int, default=1_500_000, help="skip the single Qhull above this size")
    ap.add_argument("--check", action="store_true", help="compare the tet sets where both methods run")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="write the rows as JSON here")
    ap.add_argument("--one", choices=("single", "parallel"), help=argparse.SUPPRESS)
    ap.add_argument("--size", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--save", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.margin is None:
        from meshlift.isosurface.delaunay_parallel import DEFAULT_MARGIN

        args.margin = DEFAULT_MARGIN
    if args.one:
        print(json.dumps(_one(args)))
        return
    rows = []
    hdr = f"{'method':9} {'points':>10} {'tets':>11} {'seconds':>8} {'points/s':>9} {'workers':>7} {'RSS GB':>7}  notes"
    print(hdr)
    print("-" * len(hdr))
    for size in [int(s) for s in args.sizes.split(",") if s]:
        saved = {}
        runs = [("single", "thread")] + [("parallel", e) for e in args.executor.split(",")]
        for method, executor in runs:
            if method == "single" and size > args.single_max:
                continue
            cmd = [sys.executable, os.path.abspath(__file__), "--one", method, "--size", str(size),
                   "--executor", executor, "--cloud", args.cloud, "--seed", str(args.seed),
                   "--margin", str(args.margin)]
            if args.workers:
                cmd += ["--workers", str(args.workers)]
            if args.blocks:
                cmd += ["--blocks", str(args.blocks)]
            if args.check and size <= args.single_max and method not in saved:
                saved[method] = f"/tmp/delaunay_scale_{os.getpid()}_{method}_{size}.npy"
                cmd += ["--save", saved[method]]
            out = subprocess.run(cmd, capture_output=True, text=True)
            if out.returncode != 0:
                print(f"{method:9} {size:>10} failed: {out.stderr.strip().splitlines()[-1:]}")
                rows.append({"method": method, "points": size, "error": out.stderr[-2000:]})
                continue
            row = json.loads(out.stdout.strip().splitlines()[-1])
            rows.append(row)
            _write(args.out, rows)
            notes = ""
            if method == "parallel":
                halo = row.get("halo_points", 0) / row["points"]
                notes = (f"{executor}, blocks {row.get('blocks')}, halo x{halo:.2f}, "
                         f"fix-up {row.get('fix_points', 0):,} pts; partition {row.get('partition_s')} s, "
                         f"blocks {row.get('blocks_s')} s (max {row.get('block_s_max')}, "
                         f"sum {row.get('block_s_sum')}), merge {row.get('merge_s')} s, fix {row.get('fix_s')} s "
                         f"({row.get('fix_calls')} calls {row.get('fix_call_points')}, "
                         f"checks {row.get('accept_s')} s), kd {row.get('kd_kept')}/{row.get('kd_queries')}, "
                         f"est. {row.get('memory_gb_estimate', 0):.1f} GB, rounds {row.get('fix_rounds')}, "
                         f"slivers {row.get('demoted_slivers')} ({row.get('sliver_passes')} passes)"
                         + (f"; FALLBACK {row['fallback']}" if row.get("fallback") else ""))
            print(f"{method:9} {row['points']:>10,} {row['tets']:>11,} {row['seconds']:>8.2f} "
                  f"{row['points_per_s']:>9,} {row['workers']:>7} {row['peak_rss_gb']:>7.2f}  {notes}", flush=True)
        if len(saved) == 2 and all(os.path.exists(p) for p in saved.values()):
            a, b = (np.load(saved[m]) for m in ("single", "parallel"))
            same = int(np.intersect1d(_tet_hash(a), _tet_hash(b)).size)
            only_a, only_b = a.shape[0] - same, b.shape[0] - same
            print(f"check {size:,}: {same:,} common tets, {only_a:,} only single, {only_b:,} only parallel")
            rows.append({"check": size, "common": same, "only_single": only_a, "only_parallel": only_b})
            for p in saved.values():
                os.remove(p)
        _write(args.out, rows)


def _write(path, rows) -> None:
    """The rows so far as JSON (after every size, so a run cut short keeps what it measured)."""
    if path:
        with open(path, "w") as f:
            json.dump({"cpu_count": os.cpu_count(), "rows": rows}, f, indent=1)


def _tet_hash(t: np.ndarray) -> np.ndarray:
    """One uint64 per tet (rows sorted): a multiplicative hash, so the comparison is a 1-D sort (a collision
    among 7M tets has probability ~1e-6)."""
    t = t.astype(np.uint64)
    m = np.array([0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0x27D4EB2F165667C5], dtype=np.uint64)
    with np.errstate(over="ignore"):
        h = t[:, 0] * m[0] + t[:, 1] * m[1] + t[:, 2] * m[2] + t[:, 3] * m[3]
        return h ^ (h >> np.uint64(29))


if __name__ == "__main__":
    main()
