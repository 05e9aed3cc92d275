"""How coarse a finished capture run's whole-scene mesh is against its photos (issue 33): the length of its edges in
pixels of the closest training view, and the faces ``photo_refine_subdivide_px`` would make of it.

    PYTHONPATH=src python benchmarks/edge_pixels.py /tmp/foxdev/fox --device cpu --px 1.5 2 3

Re-extracts (or reads the cache of) the unrefined whole-scene mesh as :mod:`milo_fox_gap` does, computes each
vertex's pixel footprint (:func:`meshlift.methods.milo.photo_refine.pixel_footprint`; unseen vertices apart) and
prints the quantiles of edge length / footprint over the seen edges, then for each ``--px`` the subdivision's
passes and faces (:func:`meshlift.mesh.subdivide.subdivide_long_edges` with no face budget unless ``--max-faces``).
Not collected by pytest.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("run", type=Path)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--px", type=float, nargs="*", default=[2.0, 3.0])
    ap.add_argument("--max-faces", type=int, default=10**9)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    from meshlift.geometry.mesh_ops import face_edges
    from meshlift.mesh.subdivide import subdivide_long_edges
    from meshlift.methods.milo.photo_refine import pixel_footprint
    from milo_diagnose import load_run
    from milo_fox_gap import scene_mesh

    dev = torch.device(args.device)
    cfg, problem, _, _, params, settings = load_run(args.run, dev)
    mesh, _ = scene_mesh(args.run, cfg, problem, params, settings, dev, {})
    v = mesh.v_pos.to(dev).float()
    h = pixel_footprint(v, problem.train, fallback=torch.full((v.shape[0],), float("inf"), device=dev))
    edges, _ = face_edges(mesh.t_pos_idx.to(dev), v.shape[0])
    ratio = (v[edges[:, 0]] - v[edges[:, 1]]).norm(dim=-1) / (0.5 * (h[edges[:, 0]] + h[edges[:, 1]]))
    seen = torch.isfinite(ratio)
    q = torch.tensor([0.1, 0.25, 0.5, 0.75, 0.9, 0.99])
    r = ratio[seen]
    qs = torch.quantile(r[torch.randperm(r.numel(), device=r.device)[:10**6]].cpu(), q).tolist()
    out = {"faces": int(mesh.num_faces), "vertices": int(v.shape[0]), "edges": int(edges.shape[0]),
           "seen_edges": float(seen.float().mean()), "edge_px_quantiles": dict(zip([f"{x:g}" for x in q.tolist()], qs)),
           "over": {f"{p:g}": float((r > p).float().mean()) for p in (1, 1.5, 2, 3, 5)}, "subdivide": {}}
    print(f"{out['faces']:,} faces, {out['edges']:,} edges ({100 * out['seen_edges']:.1f} % seen); edge length in "
          f"pixels of the closest view, quantiles {', '.join(f'{k}: {x:.2f}' for k, x in out['edge_px_quantiles'].items())}; "
          f"share over 1/1.5/2/3/5 px: {', '.join(f'{x:.3f}' for x in out['over'].values())}", flush=True)
    for p in args.px:
        m, rep = subdivide_long_edges(mesh.to(dev), h, p, max_faces=args.max_faces)
        out["subdivide"][f"{p:g}"] = rep
        print(f"subdivide_px={p:g}: {rep['passes']} passes, {rep['faces_before']:,} -> {rep['faces_after']:,} faces"
              + (" (capped)" if rep["capped"] else ""), flush=True)
        del m
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
