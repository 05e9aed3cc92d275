"""Where the time of a Gaussian-splatting render goes, stage by stage (CUDA events), meshlift-triton beside
gsplat's own stages, plus a sweep of the compositing kernels' variants. On the GPU machine::

    python benchmarks/splat_stages.py                       # both ANCHORS.md cases, default sweep
    python benchmarks/splat_stages.py --no-sweep            # stages only (works on older trees too)
    python benchmarks/splat_stages.py --out /tmp/stages.md  # also append every line to a file as it goes

Stages (meshlift): input checks, projection, tile binning split into its steps (tile counts, depth
argsort, count gather + cumsum + the one read-back of the number of intersections, key writer, stable
sort of the tile ids as int32 and int16, list gather, offsets), forward compositing, compositing
backward, projection backward, and the whole ``rasterize_gaussians`` forward and forward+backward.
gsplat (when importable): ``fully_fused_projection``, ``isect_tiles``, ``isect_offset_encode``,
``rasterize_to_pixels`` forward and backward. The sweep times the compositing kernels over Gaussians-per-step
B and warps, checks that every variant's image and gradients agree with the default's, then reruns the end-to-
end timing with the fastest forward and backward configuration. Scenes as benchmarks/splat.py. Not collected
by pytest.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _timing import median_ms  # noqa: E402
from splat import make_scene, parse_case  # noqa: E402

from meshlift.kernels import splat_triton as kt  # noqa: E402
from meshlift.render import splat as sp  # noqa: E402

OUT = None


def log(line: str = "") -> None:
    print(line, flush=True)
    if OUT:
        with open(OUT, "a") as f:
            f.write(line + "\n")


def tcuda(fn, warmup=3, repeats=20) -> float:
    """Median ms of ``fn`` (CUDA events); a CPU smoke run of the script (TRITON_INTERPRET=1) times one call."""
    if not torch.cuda.is_available():
        return median_ms(fn, "cpu", warmup, 1)
    return median_ms(fn, "cuda", warmup, repeats)


def stages(scene, w2c, K, W, H, reps):
    """Per-stage medians (ms) of the current meshlift triton path; returns (rows, intermediates)."""
    rows = []
    st = sp.SplatSettings(alpha_max=0.999)
    p = scene
    rows.append(("check_inputs", tcuda(lambda: sp._check_inputs(p["means"], p["quats"], p["scales"],
                                                                 p["opacities"], p["colors"], w2c, K, W, H, 0.01,
                                                                 1e10, None, "RGB", st), repeats=reps)))
    import inspect

    if "defer" in inspect.signature(sp._check_inputs).parameters:  # the Triton path's form: no read-back here
        rows.append(("check_inputs (deferred)", tcuda(lambda: sp._check_inputs(
            p["means"], p["quats"], p["scales"], p["opacities"], p["colors"], w2c, K, W, H, 0.01, 1e10, None, "RGB",
            st, defer=True), repeats=reps)))
    tw, th = sp.tile_grid(W, H, 16)
    fused = "tile_size" in inspect.signature(kt.project_gaussians).parameters
    with torch.no_grad():
        proj_fn = lambda: kt.project_gaussians(p["means"], p["quats"], p["scales"], p["opacities"], w2c, K,  # noqa: E731
                                               W, H, 0.01, 1e10, 0.3, False, 0.0)
        rows.append(("projection fwd", tcuda(proj_fn, repeats=reps)))
        if fused:
            pf = lambda: kt.project_gaussians(p["means"], p["quats"], p["scales"], p["opacities"], w2c, K,  # noqa: E731
                                              W, H, 0.01, 1e10, 0.3, False, 0.0, tile_size=16, tiles_w=tw, tiles_h=th)
            rows.append(("projection fwd + counts/records", tcuda(pf, repeats=reps)))
            counts = pf()["tile_counts"]
        proj = proj_fn()
        m2, rad, dep = proj["means2d"].contiguous(), proj["radii"].contiguous(), proj["depths"]
        C, N = dep.shape
        total = C * N
        k = kt._k()
        cnt = torch.zeros(total, device=m2.device, dtype=torch.int32)
        g = kt._grid(total, kt._BLOCK)
        rows.append(("  tile counts", tcuda(lambda: k.tile_bounds[g](m2, m2, rad, cnt, total, 16, tw, th,
                                                                     ELLIPSE=False, BLOCK=kt._BLOCK), repeats=reps)))
        d32 = dep.reshape(-1).float()
        rows.append(("  depth argsort", tcuda(lambda: torch.sort(d32, stable=True), repeats=reps)))
        order = torch.sort(d32, stable=True)[1]

        def cums():
            e = torch.cumsum(cnt[order], 0, dtype=torch.int64)
            return int(e[-1]), e
        rows.append(("  gather+cumsum+readback", tcuda(cums, repeats=reps)))
        M, ends = cums()
        tiles = torch.empty(M, device=m2.device, dtype=torch.int32)
        gids = torch.empty(M, device=m2.device, dtype=torch.int64)
        rows.append(("  key writer", tcuda(lambda: k.write_keys[g](order, ends, cnt, m2, m2, rad, tiles, gids, total,
                                                                   N, 16, tw, th, ELLIPSE=False, BLOCK=kt._BLOCK), repeats=reps)))
        rows.append(("  sort int32 tile ids", tcuda(lambda: torch.sort(tiles, stable=True), repeats=reps)))
        t16 = tiles.to(torch.int16)
        rows.append(("  sort int16 tile ids", tcuda(lambda: torch.sort(t16, stable=True), repeats=reps)))
        ts_, perm = torch.sort(tiles, stable=True)
        rows.append(("  list gather", tcuda(lambda: gids[perm], repeats=reps)))
        ar = torch.arange(C * tw * th, device=m2.device, dtype=torch.int32)
        rows.append(("  offsets (searchsorted)", tcuda(lambda: torch.searchsorted(ts_, ar), repeats=reps)))
        isect = lambda: kt.isect_tiles(m2, rad, dep, 16, tw, th, with_keys=False)  # noqa: E731
        rows.append(("isect_tiles (whole)", tcuda(isect, repeats=reps)))
        if fused:
            rows.append(("isect_tiles (given counts)", tcuda(lambda: kt.isect_tiles(
                m2, rad, dep, 16, tw, th, with_keys=False, counts=counts), repeats=reps)))
        _, fid, off = isect()
    per_tile = torch.diff(torch.cat([off.reshape(-1), off.new_tensor([fid.numel()])]))
    info = {"M": fid.numel(), "per_tile_mean": float(per_tile.float().mean()), "per_tile_max": int(per_tile.max())}
    feats = p["colors"][None].expand(C, -1, -1).contiguous()
    leaves = [t.detach().clone().requires_grad_(True) for t in (proj["means2d"], proj["conics"], proj["opacities"],
                                                                 feats)]
    return rows, dict(proj=proj, fid=fid, off=off, leaves=leaves, info=info, tw=tw, th=th)


def composite_times(mid, W, H, reps):
    m2, con, op, ft = mid["leaves"]
    with torch.no_grad():
        fwd = tcuda(lambda: kt.composite_tiles(m2, con, op, ft, None, mid["fid"], mid["off"], W, H, 16, 0.999),
                    repeats=reps)
    img, alpha, _ = kt.composite_tiles(m2, con, op, ft, None, mid["fid"], mid["off"], W, H, 16, 0.999)
    ones = torch.ones_like(img)
    bwd = tcuda(lambda: torch.autograd.grad(img, mid["leaves"], ones, retain_graph=True), repeats=reps)
    grads = torch.autograd.grad(img, mid["leaves"], ones, retain_graph=True)
    return fwd, bwd, img.detach(), grads


def proj_bwd_time(scene, w2c, K, W, H, reps):
    leaves = [scene[k].clone().requires_grad_(True) for k in ("means", "quats", "scales", "opacities")]
    pr = kt.project_gaussians(*leaves, w2c, K, W, H, 0.01, 1e10, 0.3, False, 0.0)
    outs = [pr["means2d"], pr["conics"], pr["depths"], pr["opacities"]]
    gs = [torch.randn_like(o) for o in outs]
    return tcuda(lambda: torch.autograd.grad(outs, leaves, gs, retain_graph=True), repeats=reps)


def e2e(scene, w2c, K, W, H, reps):
    st = sp.SplatSettings(alpha_max=0.999)
    leaves = {k: v.clone().requires_grad_(True) for k, v in scene.items()}

    def run():
        return sp.rasterize_gaussians(leaves["means"], leaves["quats"], leaves["scales"], leaves["opacities"],
                                      leaves["colors"], w2c, K, W, H, settings=st, backend="triton")

    def fwd():
        with torch.no_grad():
            run()

    def fb():
        for v in leaves.values():
            v.grad = None
        img, _, _ = run()
        img.sum().backward()
    return tcuda(fwd, repeats=reps), tcuda(fb, repeats=reps)


def gsplat_stages(scene, w2c, K, W, H, reps):
    try:
        from gsplat.cuda import _wrapper as gw
    except Exception as e:  # noqa: BLE001
        log(f"gsplat stages skipped: {type(e).__name__}: {e}")
        return
    p = scene
    try:
        kw = dict(eps2d=0.3, near_plane=0.01, far_plane=1e10, packed=False)
        try:
            gw.fully_fused_projection(p["means"], None, p["quats"], p["scales"], w2c, K, W, H,
                                      opacities=p["opacities"], **kw)
            kw["opacities"] = p["opacities"]
        except TypeError:
            log("  (gsplat fully_fused_projection takes no opacities: radius without the opacity term)")
        proj = lambda: gw.fully_fused_projection(p["means"], None, p["quats"], p["scales"], w2c, K, W, H, **kw)  # noqa: E731
        log(f"  gsplat projection fwd {tcuda(proj, repeats=reps):.3f} ms")
        radii, means2d, depths, conics, comp = proj()
        tw, th = (W + 15) // 16, (H + 15) // 16
        isect = lambda: gw.isect_tiles(means2d, radii, depths, 16, tw, th, packed=False)  # noqa: E731
        log(f"  gsplat isect_tiles {tcuda(isect, repeats=reps):.3f} ms")
        _, isect_ids, flatten_ids = isect()
        enc = lambda: gw.isect_offset_encode(isect_ids, 1, tw, th)  # noqa: E731
        log(f"  gsplat isect_offset_encode {tcuda(enc, repeats=reps):.3f} ms")
        offs = enc()
        log(f"  gsplat intersections M = {isect_ids.numel():,}")
        m2 = means2d.detach().clone().requires_grad_(True)
        cn = conics.detach().clone().requires_grad_(True)
        col = p["colors"][None].clone().requires_grad_(True)
        op = p["opacities"][None].clone().requires_grad_(True)
        ras = lambda: gw.rasterize_to_pixels(m2, cn, col, op, W, H, 16, offs, flatten_ids)  # noqa: E731
        with torch.no_grad():
            log(f"  gsplat rasterize_to_pixels fwd {tcuda(ras, repeats=reps):.3f} ms")
        img, alpha = ras()
        ones = torch.ones_like(img)
        t = tcuda(lambda: torch.autograd.grad(img, [m2, cn, col, op], ones, retain_graph=True), repeats=reps)
        log(f"  gsplat rasterize_to_pixels bwd {t:.3f} ms")
    except Exception as e:  # noqa: BLE001
        log(f"  gsplat stage timing failed: {type(e).__name__}: {e}")


def rel(a, b):
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


def main(argv=None) -> int:
    global OUT
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", nargs="+", default=["1M@1920x1080", "100k@800x800"])
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--no-sweep", action="store_true")
    ap.add_argument("--no-gsplat", action="store_true")
    ap.add_argument("--fwd", nargs="+", default=["32:2", "32:1", "64:2", "16:2", "8:2"],
                    help="forward variants B:warps")
    ap.add_argument("--bwd", nargs="+", default=["4:1:1", "4:1:1c", "4:1:4", "4:1:4b", "4:1:4c", "4:1:2c", "4:1:8c",
                                                 "2:1:4c", "8:1:4c", "8:2:4c", "4:2:2c", "2:1:8c", "4:1:4s",
                                                 "8:1:1", "8:2:1"],
                    help="backward variants B:warps[:split][s][b|c], split = programs per tile (bands of rows, "
                         "default 1), suffix s = skip batches that reach no pixel of the band (from the [B, P] "
                         "block), b = skip batches none of whose Gaussians can reach the band's pixel box "
                         "(_CULL_BWD 1), c = process only the Gaussians that can reach it (_CULL_BWD 2, compacted); "
                         "neither: _CULL_BWD 0")
    ap.add_argument("--split", type=int, default=None,
                    help="_SPLIT_BWD (backward programs per tile) for the 'default' rows and the end-to-end timing "
                         "(default: the module's)")
    ap.add_argument("--cull", type=int, choices=(0, 1, 2), default=None,
                    help="_CULL_BWD for the 'default' rows and the end-to-end timing: 0 off, 1 batches, 2 "
                         "compacted (default: the module's)")
    ap.add_argument("--best", default=None, help="write the fastest 'FWD BWD' configuration of the first case here")
    ap.add_argument("--out", default=None)
    ap.add_argument("--device", default="cuda", help="cpu: smoke run under TRITON_INTERPRET=1 (not a benchmark)")
    args = ap.parse_args(argv)
    OUT = args.out
    import triton

    dev = args.device
    name = torch.cuda.get_device_name() if dev == "cuda" else "cpu (smoke)"
    log(f"device {name}, torch {torch.__version__}, triton {triton.__version__}, "
        f"module {kt.__file__}")
    has_impl = hasattr(kt, "_BATCH_BWD")
    if args.split is not None:
        kt._SPLIT_BWD = args.split
    if args.cull is not None:
        if not hasattr(kt, "_CULL_BWD"):
            raise SystemExit("--cull: this tree's splat_triton has no _CULL_BWD")
        kt._CULL_BWD = args.cull
    log(f"backward defaults: B {getattr(kt, '_BATCH_BWD', '?')}, warps {getattr(kt, '_WARPS_BWD', '?')}, "
        f"split {getattr(kt, '_SPLIT_BWD', 1)}, cull {getattr(kt, '_CULL_BWD', 'n/a')}, "
        f"skip {getattr(kt, '_SKIP_EMPTY_BWD', 'n/a')}")
    for case in args.cases:
        n, W, H = parse_case(case)
        scene, w2c, K = make_scene(n, W, H, 0, device=dev)
        log(f"## {case}")
        if not args.no_gsplat:
            gsplat_stages(scene, w2c, K, W, H, args.repeats)
        rows, mid = stages(scene, w2c, K, W, H, args.repeats)
        for name, t in rows:
            log(f"  {name:<28} {t:8.3f} ms")
        log(f"  intersections M = {mid['info']['M']:,}, per tile mean {mid['info']['per_tile_mean']:.1f}, "
            f"max {mid['info']['per_tile_max']}")
        f, b, img0, g0 = composite_times(mid, W, H, args.repeats)
        log(f"  composite fwd (default)      {f:8.3f} ms")
        log(f"  composite bwd (default)      {b:8.3f} ms")
        log(f"  projection bwd               {proj_bwd_time(scene, w2c, K, W, H, args.repeats):8.3f} ms")
        tf, tfb = e2e(scene, w2c, K, W, H, args.repeats)
        log(f"  rasterize_gaussians fwd {tf:.3f} ms, fwd+bwd {tfb:.3f} ms (default config)")
        if args.no_sweep or not has_impl:
            continue
        defaults = (kt._BATCH, kt._WARPS, kt._BATCH_BWD, kt._WARPS_BWD)
        best_f, best_b = (None, 1e9), (None, 1e9)
        for spec in args.fwd:
            B, w = spec.split(":")
            kt._BATCH, kt._WARPS = int(B), int(w)
            try:
                m2, con, op, ft = mid["leaves"]
                with torch.no_grad():
                    t = tcuda(lambda: kt.composite_tiles(m2, con, op, ft, None, mid["fid"], mid["off"], W, H, 16,
                                                         0.999), repeats=args.repeats)
                    img = kt.composite_tiles(m2, con, op, ft, None, mid["fid"], mid["off"], W, H, 16, 0.999)[0]
                log(f"  fwd {spec:<12} {t:8.3f} ms  image max|d| vs default {float((img - img0).abs().max()):.1e}")
                if t < best_f[1]:
                    best_f = ((int(B), int(w)), t)
            except Exception as e:  # noqa: BLE001
                log(f"  fwd {spec}: failed {type(e).__name__}: {str(e)[:300]}")
        kt._BATCH, kt._WARPS = defaults[:2]
        skip0 = getattr(kt, "_SKIP_EMPTY_BWD", None)
        split0 = getattr(kt, "_SPLIT_BWD", None)
        cull0 = getattr(kt, "_CULL_BWD", None)
        for spec in args.bwd:
            body = spec.rstrip("sbc")
            flags = spec[len(body):]
            B, w, *sp = body.split(":")
            cull = 2 if "c" in flags else 1 if "b" in flags else 0
            if ("s" in flags and skip0 is None) or (cull and cull0 is None):
                continue
            if skip0 is not None:
                kt._SKIP_EMPTY_BWD = "s" in flags
            if cull0 is not None:
                kt._CULL_BWD = cull
            if sp and split0 is None:
                continue
            if split0 is not None:
                kt._SPLIT_BWD = int(sp[0]) if sp else 1
            kt._BATCH_BWD, kt._WARPS_BWD = int(B), int(w)
            try:
                _, t, _, gr = composite_times(mid, W, H, args.repeats)
                d = ", ".join(f"{rel(a, b):.1e}" for a, b in zip(gr, g0))
                log(f"  bwd {spec:<12} {t:8.3f} ms  grads rel max|d| vs default (m2, con, op, feat) {d}")
                if t < best_b[1] and "s" not in flags:
                    best_b = ((int(B), int(w), int(sp[0]) if sp else 1, cull), t)
            except Exception as e:  # noqa: BLE001
                log(f"  bwd {spec}: failed {type(e).__name__}: {str(e)[:300]}")
        if skip0 is not None:
            kt._SKIP_EMPTY_BWD = skip0
        if best_f[0] and best_b[0]:
            kt._BATCH, kt._WARPS = best_f[0]
            kt._BATCH_BWD, kt._WARPS_BWD = best_b[0][:2]
            if split0 is not None:
                kt._SPLIT_BWD = best_b[0][2]
            if cull0 is not None:
                kt._CULL_BWD = best_b[0][3]
            tf, tfb = e2e(scene, w2c, K, W, H, args.repeats)
            log(f"  best fwd {best_f[0]} bwd {best_b[0]}: rasterize_gaussians fwd {tf:.3f} ms, fwd+bwd {tfb:.3f} ms")
            if args.best and not os.path.exists(args.best):
                with open(args.best, "w") as f:
                    bspec = ":".join(map(str, best_b[0][:3])) + ("", "b", "c")[best_b[0][3]]
                    f.write(f"{best_f[0][0]}:{best_f[0][1]} {bspec}\n")
        kt._BATCH, kt._WARPS, kt._BATCH_BWD, kt._WARPS_BWD = defaults
        if skip0 is not None:
            kt._SKIP_EMPTY_BWD = skip0
        if split0 is not None:
            kt._SPLIT_BWD = split0
        if cull0 is not None:
            kt._CULL_BWD = cull0
        del mid
        if dev == "cuda":
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
