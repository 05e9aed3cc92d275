"""Replay the fix-up of the parallel Delaunay from saved block state, to profile it on a CPU.

Usage (from the repo root)::

    PYTHONPATH=src python benchmarks/delaunay_fixup_replay.py --size 300000 --workers 2 --state /tmp/d300k.npz
    PYTHONPATH=src python benchmarks/delaunay_fixup_replay.py --size 300000 --workers 2 --state /tmp/d300k.npz \
        --replay-workers 16 --profile 25

The first run triangulates the blocks of ``benchmarks/delaunay_scale.py``'s MILo-like pivot cloud
(``partition`` + ``_run_blocks`` + ``open_faces`` of ``isosurface/delaunay_parallel.py``, ``--workers``
threads, 3 blocks per worker unless ``--blocks``) and saves the merged state (kept tets, duplicates, open
faces, kept volume) to ``--state``; later runs load it. Then the fix-up (``fix_loop``) and the caller's
orientation and concatenation (``delaunay._finish``) run with ``--replay-workers`` threads (default:
``--workers``; the fix-up's bins and thread pools are sized by it), timed as wall, process CPU and the main
thread's own CPU (``time.thread_time``: the serial part). ``--profile N`` prints the main thread's top N
functions by cumulative time (cProfile sees only the main thread). The line ``result`` gives the tet count
and an order-free hash of the tets, to check that a change keeps the output identical (``--save``: the tets
themselves, for ``benchmarks/delaunay_diff.py``). Not collected by pytest.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from delaunay_scale import _tet_hash, make_cloud  # noqa: E402


def _blocks_state(pts, workers, blocks):
    import concurrent.futures as cf

    from meshlift.isosurface import delaunay_certify as cert
    from meshlift.isosurface import delaunay_fixup as fix
    from meshlift.isosurface import delaunay_parallel as dp

    blocks = blocks or max(2, dp.BLOCKS_PER_WORKER * workers)
    with cf.ThreadPoolExecutor(max_workers=1) as tp:
        tree = tp.submit(cert.build_tree, pts)
        with cf.ThreadPoolExecutor(max_workers=workers) as pool:
            parts = dp.partition(pts, blocks, dp.DEFAULT_MARGIN, pool if workers > 1 else None, workers)
        results = dp._run_blocks(pts, parts, workers, dp.FAST_OPTIONS, dp.CERT_MIN_REL, None, "thread", tree,
                                 dp.DEFAULT_MARGIN, float("inf"))
    kept = np.concatenate([r[0] for r in results])
    dups = np.unique(np.concatenate([r[3] for r in results]))
    walls, wall_far = fix.open_faces(np.concatenate([r[1] for r in results]),
                                     np.concatenate([r[2] for r in results]), pts.shape[0])
    return dict(kept=kept, dups=dups, walls=walls, wall_far=wall_far,
                kept_volume=np.float64(sum(r[4]["kept_volume"] for r in results)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=300000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cloud", choices=("pivots", "uniform"), default="pivots")
    ap.add_argument("--workers", type=int, default=2, help="threads of the blocks (when --state is made)")
    ap.add_argument("--blocks", type=int, default=None)
    ap.add_argument("--replay-workers", type=int, default=None, help="fix-up workers (default: --workers)")
    ap.add_argument("--state", required=True, help="npz of the merged block state (made when missing)")
    ap.add_argument("--profile", type=int, default=0, help="print the main thread's top N functions")
    ap.add_argument("--out", default=None, help="write the timings as JSON here")
    ap.add_argument("--save", default=None, help="save the tets (rows sorted, [M, 4] .npy) here, to diff two runs")
    args = ap.parse_args()

    from meshlift.isosurface import delaunay as dl
    from meshlift.isosurface import delaunay_parallel as dp

    pts = make_cloud(args.cloud, args.size, args.seed)
    if not os.path.exists(args.state):
        t0 = time.perf_counter()
        st = _blocks_state(pts, args.workers, args.blocks)
        np.savez(args.state, **st)
        print(f"blocks: {time.perf_counter() - t0:.1f} s wall, {st['kept'].shape[0]:,} kept tets, "
              f"{st['walls'].shape[0]:,} open faces -> {args.state}", flush=True)
    st = dict(np.load(args.state))
    workers = args.replay_workers or args.workers
    stats: dict = {}
    prof = cProfile.Profile() if args.profile else None
    # the engine computes the hull of all points in a thread while the blocks run: here before the clock
    h0 = time.perf_counter()
    hull = dp.start_hull(pts, None) if hasattr(dp, "start_hull") else None
    hull_s = time.perf_counter() - h0
    kw = {"hull": hull} if hull is not None else {}
    w0, c0, m0 = time.perf_counter(), time.process_time(), time.thread_time()
    if prof:
        prof.enable()
    kept, fixed, fallback = dp.fix_loop(pts, st["kept"], st["dups"], st["walls"], st["wall_far"],
                                        float(st["kept_volume"]), workers, dp.FAST_OPTIONS, None, True, stats, **kw)
    w1, c1, m1 = time.perf_counter(), time.process_time(), time.thread_time()
    eng = dp.Partitioned(kept=kept, fix_tets=fixed[0], fix_neighbors=fixed[1], fix_keep=fixed[2],
                         duplicates=st["dups"], stats=stats, fallback=fallback)
    if hasattr(dl, "_finish"):
        res = dl._finish(pts, eng, dl.DEFAULT_DEGENERATE_TOL, False, time.perf_counter(), workers)
        tets = res.tets.numpy()
    else:  # the code before _finish existed: the same steps inline
        ft = eng.fix_tets
        orient, deg = dl._orient(ft, eng.fix_neighbors, dl._relative_volumes(pts, ft), 0.0)
        ft = ft[eng.fix_keep]
        tets = np.concatenate([kept, ft])
    if prof:
        prof.disable()
    w2, m2 = time.perf_counter(), time.thread_time()
    row = {"points": int(pts.shape[0]), "replay_workers": workers, "kept_in": int(st["kept"].shape[0]),
           "open_faces": int(st["walls"].shape[0]), "hull_s": round(hull_s, 3), "fix_wall_s": round(w1 - w0, 3),
           "fix_cpu_s": round(c1 - c0, 3), "fix_main_cpu_s": round(m1 - m0, 3), "finish_wall_s": round(w2 - w1, 3),
           "finish_main_cpu_s": round(m2 - m1, 3), "fix_rounds": stats.get("fix_rounds"),
           "fix_round_calls": stats.get("fix_round_calls"), "promoted_tets": stats.get("promoted_tets"),
           "grown_tets": stats.get("grown_tets"), "demoted_slivers": stats.get("demoted_slivers"),
           "sliver_passes": stats.get("sliver_passes"), "fix_points": stats.get("fix_points"),
           "fix_call_points": stats.get("fix_call_points"), "fix_call_s": stats.get("fix_call_s"),
           "fix_groups": stats.get("fix_groups"), "fix_regrouped": stats.get("fix_regrouped"),
           "fallback": fallback[:200]}
    srt = np.sort(tets, axis=1)
    if args.save:
        np.save(args.save, srt)
    h = _tet_hash(srt.astype(np.int64))
    row["tets"] = int(tets.shape[0])
    row["tets_hash"] = hex(int(h.sum(dtype=np.uint64)) if h.size else 0)
    print(json.dumps(row, indent=1))
    print(f"result {row['tets']} {row['tets_hash']}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(row, f, indent=1)
    if prof:
        pstats.Stats(prof).sort_stats("cumulative").print_stats(args.profile)


if __name__ == "__main__":
    main()
