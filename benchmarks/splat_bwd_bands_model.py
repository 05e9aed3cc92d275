"""Work model of the Triton compositing backward split into row bands (``_SPLIT_BWD``) with band culling
(``_CULL_BWD``), on the CPU in plain torch (no Triton, no GPU): how many ``[B, P]`` batches each backward
program walks, how many of them culling skips, and the longest program (the slowest tiles bound the kernel).

    python benchmarks/splat_bwd_bands_model.py                          # random 150k@400² and a surface scene
    python benchmarks/splat_bwd_bands_model.py --scenes surface --n 200000 --res 400

Scenes: ``random`` is benchmarks/splat.py's ``make_scene`` (what ``splat_stages.py`` times: Gaussians spread
evenly over the view, balanced tiles); ``surface`` puts the Gaussians on the surface of ``spot.obj`` filling
about half of the view (small, mostly opaque, as a trained object scene: a few hundred tiles with long lists
and empty ones around them: the imbalance the lego profile shows). For every tile the per-pixel last
contributor comes from a torch forward (the T < 1e-4 stop included); each band then walks its list back to
front from its own last contributor in batches of ``B`` (as the kernel), and a batch is culled when no
Gaussian of it passes :func:`reaches_box` (the kernel's ``_reaches_box`` in float64); compacted (``_CULL_BWD``
2), each chunk of 32 entries costs ``ceil(reaching / B)`` batches. Printed per split: the batches in all (work)
with culling off, by batches and compacted (+ the chunks), and the longest program's batches (the critical
path). Not collected by pytest.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
if not os.environ.get("PYTHONPATH"):
    sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from meshlift.render import splat_reference as ref  # noqa: E402


def reaches_box(rec: torch.Tensor, x0, x1, y0, y1) -> torch.Tensor:
    """``_reaches_box`` of ``kernels/_splat_raster_jit.py`` on ``rec [..., 6]`` (u, v, a, b, c, opacity)."""
    gx, gy, ca, cb, cc, go = rec.unbind(-1)
    pd = (ca > 0) & (cc > 0) & (ca * cc - cb * cb > 0)
    sa, sc = torch.where(pd, ca, 1.0), torch.where(pd, cc, 1.0)
    lox, hix, loy, hiy = gx - x1, gx - x0, gy - y1, gy - y0

    def q(dx, dy):
        return 0.5 * (ca * dx * dx + cc * dy * dy) + cb * dx * dy
    m = q(lox, torch.minimum(torch.maximum(-cb * lox / sc, loy), hiy))
    m = torch.minimum(m, q(hix, torch.minimum(torch.maximum(-cb * hix / sc, loy), hiy)))
    m = torch.minimum(m, q(torch.minimum(torch.maximum(-cb * loy / sa, lox), hix), loy))
    m = torch.minimum(m, q(torch.minimum(torch.maximum(-cb * hiy / sa, lox), hix), hiy))
    inside = (lox <= 0) & (hix >= 0) & (loy <= 0) & (hiy >= 0)
    m = torch.where(inside, torch.zeros_like(m), m)
    lim = torch.log(go.clamp_min(1e-30) * 255.0)
    return (go * 255.0 >= 0.9999) & ((m * 0.99 - 0.02 <= lim) | ~pd)


def surface_scene(n: int, W: int, H: int, seed: int):
    from meshlift.io.mesh import load_mesh

    mesh = load_mesh(ROOT.parent / "shared" / "data" / "spot" / "spot.obj")
    v, f = mesh.v_pos.double(), mesh.t_pos_idx.long()
    v = v - (v.max(0).values + v.min(0).values) / 2
    v = v / (v.max(0).values - v.min(0).values).max()
    g = torch.Generator().manual_seed(seed)
    tri = v[f]
    area = torch.linalg.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0]).norm(dim=-1)
    face = torch.multinomial(area, n, replacement=True, generator=g)
    r1, r2 = torch.rand(n, generator=g, dtype=torch.float64), torch.rand(n, generator=g, dtype=torch.float64)
    s = r1.sqrt()
    pts = (1 - s)[:, None] * tri[face, 0] + (s * (1 - r2))[:, None] * tri[face, 1] + (s * r2)[:, None] * tri[face, 2]
    pts[:, 2] += 2.0  # the camera at the origin looking down +z, the unit-size object 2 units away
    f_px = 0.5 * W * 2.0  # the object spans about half of the view
    lo, hi = math.log(0.002), math.log(0.012)
    scene = {"means": pts.float(), "quats": torch.randn(n, 4, generator=g),
             "scales": torch.exp(lo + (hi - lo) * torch.rand(n, 3, generator=g)),
             "opacities": torch.where(torch.rand(n, generator=g) < 0.6, 0.9 + 0.1 * torch.rand(n, generator=g),
                                      0.02 + 0.5 * torch.rand(n, generator=g))}
    K = torch.tensor([[[f_px, 0, W / 2], [0, f_px, H / 2], [0, 0, 1]]])
    return scene, torch.eye(4)[None], K


def random_scene(n: int, W: int, H: int, seed: int):
    from splat import make_scene

    scene, w2c, K = make_scene(n, W, H, seed, device="cpu")
    return scene, w2c, K


CH = 32  # _CULL_CHUNK
CHUNK_COST = 0.25  # a chunk's reach test and select against one [B, P] batch, for the longest-program column


def model(scene, w2c, K, W, H, splits=(1, 2, 4, 8), B=4, ts=16, alpha_max=0.999):
    pr = ref.project_gaussians(scene["means"], scene["quats"], scene["scales"], scene["opacities"], w2c, K, W, H,
                               0.01, 1e10)
    tw, th = ref.tile_grid(W, H, ts)
    _, fid, off = ref.isect_tiles(pr["means2d"], pr["radii"], pr["depths"], ts, tw, th)
    off = torch.cat([off.reshape(-1), off.new_tensor([fid.numel()])])
    rec = torch.cat([pr["means2d"][0], pr["conics"][0], pr["opacities"][0][:, None]], -1).double()
    p = torch.arange(ts * ts)
    stats = {s: dict(work=0, kept=0, comp=0, chunks=0, crit_walk=0, crit_kept=0, crit_comp=0) for s in splits}
    lens = []
    for t in range(tw * th):
        a0, a1 = int(off[t]), int(off[t + 1])
        L = a1 - a0
        lens.append(L)
        if L == 0:
            continue
        tx, ty = t % tw, t // tw
        px = (tx * ts + p % ts).double() + 0.5
        py = (ty * ts + p // ts).double() + 0.5
        inimg = (px < W) & (py < H)
        r = rec[fid[a0:a1]]
        dx, dy = r[:, 0:1] - px, r[:, 1:2] - py
        sig = 0.5 * (r[:, 2:3] * dx * dx + r[:, 4:5] * dy * dy) + r[:, 3:4] * dx * dy
        raw = r[:, 5:6] * torch.exp(-sig)
        keep = (sig >= 0) & (raw >= 1.0 / 255.0) & inimg
        a = torch.where(keep, raw.clamp_max(alpha_max), torch.zeros_like(raw))
        T = torch.cumprod(1 - a, 0)
        inc = keep & (T >= 1e-4)  # a Gaussian that would cross 1e-4 ends the pixel: not included
        inc = inc & (torch.cumsum((keep & (T < 1e-4)).int(), 0) == 0)
        idx = torch.arange(L)[:, None].expand(L, ts * ts)
        last = torch.where(inc, idx, torch.full_like(idx, -1)).max(0).values
        for s in splits:
            rows = ts // s
            for band in range(s):
                sel = slice(band * rows * ts, (band + 1) * rows * ts)
                lmax = int(last[sel].max())
                if lmax < 0:
                    continue
                nb = (lmax + B) // B
                bpx, bpy, bin_ = px[sel], py[sel], inimg[sel]
                rch = reaches_box(r[:lmax + 1], float(bpx.min()), float(bpx[bin_].max()), float(bpy.min()),
                                  float(bpy[bin_].max()))
                pad = torch.zeros(nb * B, dtype=torch.bool)
                pad[:lmax + 1] = rch
                kept = int(pad.reshape(nb, B).any(1).sum())
                nch = (lmax + CH) // CH
                padc = torch.zeros(nch * CH, dtype=torch.int64)
                padc[:lmax + 1] = rch.long()
                comp = int(((padc.reshape(nch, CH).sum(1) + B - 1) // B).sum())
                st = stats[s]
                st["work"] += nb
                st["kept"] += kept
                st["comp"] += comp
                st["chunks"] += nch
                st["crit_walk"] = max(st["crit_walk"], nb)
                st["crit_kept"] = max(st["crit_kept"], kept)
                st["crit_comp"] = max(st["crit_comp"], comp + nch * CHUNK_COST)
    lens = torch.tensor(lens)
    return stats, dict(M=int(fid.numel()), mean=float(lens.float().mean()), max=int(lens.max()),
                       p99=float(lens.float().quantile(0.99)))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenes", nargs="+", default=["random", "surface"], choices=("random", "surface"))
    ap.add_argument("--n", type=int, default=150_000)
    ap.add_argument("--res", type=int, default=400)
    ap.add_argument("--B", type=int, default=4)
    a = ap.parse_args(argv)
    torch.set_grad_enabled(False)
    for name in a.scenes:
        scene, w2c, K = (random_scene if name == "random" else surface_scene)(a.n, a.res, a.res, 0)
        stats, info = model(scene, w2c, K, a.res, a.res, B=a.B)
        print(f"## {name} {a.n}@{a.res}²: intersections {info['M']:,}, per tile mean {info['mean']:.0f}, "
              f"p99 {info['p99']:.0f}, max {info['max']}")
        print("| split | pixels per program | batches walked (cull 0) | not culled (cull 1) | compacted batches "
              "(cull 2) + chunks | longest program: cull 0 | 1 | 2 (batches + chunks/4) |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|")
        for s, st in stats.items():
            print(f"| {s} | {256 // s} | {st['work']:,} | {st['kept']:,} ({st['kept'] / max(st['work'], 1):.0%}) | "
                  f"{st['comp']:,} ({st['comp'] / max(st['work'], 1):.0%}) + {st['chunks']:,} | {st['crit_walk']} | "
                  f"{st['crit_kept']} | {st['crit_comp']:.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
