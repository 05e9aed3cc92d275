"""Gaussian splatting speed: meshlift (torch reference, Triton) beside gsplat on identical inputs.

Usage (on the GPU machine)::

    python benchmarks/splat.py                          # both ANCHORS.md cases, all implementations
    python benchmarks/splat.py --cases 100k@800x800 --impl triton gsplat --repeats 50
    python benchmarks/splat.py --out /tmp/splat.md      # also write the markdown table
    python benchmarks/splat.py --impl triton --triton-batch 8 16 32 --triton-warps 4 8   # tuning sweep

Cases (ANCHORS.md): ``1M@1920x1080`` and ``100k@800x800``: random Gaussians inside the frustum of one
pinhole camera (depths U(2, 10), focal 0.8·W, log-uniform scales in ``--scale-range``, random rotations,
opacities U(0.05, 1), RGB colours), RGB mode, 16-px tiles. Forward = one ``rasterize_gaussians`` call
(gsplat: ``rasterization(packed=False, tile_size=16)``); forward+backward adds ``image.sum().backward()``
with gradients to means, quats, scales, opacities and colours. CUDA-event medians after warm-up (the
first calls also compile the Triton kernels), peak memory = ``torch.cuda.max_memory_allocated`` over one
forward+backward. meshlift runs with ``alpha_max=0.999`` here so that its images match gsplat's clamp
(meshlift's default is 3DGS's 0.99); everything else is the default (input checks on).

Agreement: max |Δ| of image and alpha and of every gradient (absolute, and relative to the largest
|gradient| of that parameter) between meshlift-triton and gsplat, and between triton and the torch
reference. gsplat is optional: it is used when ``import gsplat`` works (never a meshlift dependency).
Not collected by pytest.
"""

from __future__ import annotations

import argparse
import math
import sys

import torch

from _timing import median_ms  # noqa: E402  (benchmarks/, this script's folder)
from meshlift.kernels import splat_triton as kt
from meshlift.render.splat import SplatSettings, rasterize_gaussians

PARAMS = ("means", "quats", "scales", "opacities", "colors")


def make_scene(n: int, W: int, H: int, seed: int, scale_range=(0.003, 0.03), device="cuda"):
    g = torch.Generator(device=device).manual_seed(seed)
    f = 0.8 * W
    z = 2 + 8 * torch.rand(n, generator=g, device=device)
    x = (torch.rand(n, generator=g, device=device) - 0.5) * (W / f) * z
    y = (torch.rand(n, generator=g, device=device) - 0.5) * (H / f) * z
    lo, hi = math.log(scale_range[0]), math.log(scale_range[1])
    scene = {
        "means": torch.stack([x, y, z], -1),
        "quats": torch.randn(n, 4, generator=g, device=device),
        "scales": torch.exp(lo + (hi - lo) * torch.rand(n, 3, generator=g, device=device)),
        "opacities": 0.05 + 0.95 * torch.rand(n, generator=g, device=device),
        "colors": torch.rand(n, 3, generator=g, device=device),
    }
    K = torch.tensor([[[f, 0, W / 2], [0, f, H / 2], [0, 0, 1]]], device=device)
    w2c = torch.eye(4, device=device)[None]
    return scene, w2c, K


def render_fn(impl: str, w2c, K, W, H, chunk_elements: int):
    if impl == "gsplat":
        import gsplat

        def run(p):
            img, alpha, _ = gsplat.rasterization(p["means"], p["quats"], p["scales"], p["opacities"], p["colors"],
                                                 w2c, K, W, H, near_plane=0.01, far_plane=1e10, eps2d=0.3,
                                                 packed=False, tile_size=16, render_mode="RGB",
                                                 rasterize_mode="classic")
            return img, alpha
        return run
    st = SplatSettings(alpha_max=0.999, chunk_elements=chunk_elements)

    def run(p):
        img, alpha, _ = rasterize_gaussians(p["means"], p["quats"], p["scales"], p["opacities"], p["colors"], w2c, K,
                                            W, H, settings=st, backend=impl)
        return img, alpha
    return run


def time_cuda(fn, warmup: int, repeats: int) -> float:
    """Median ms of ``fn`` (CUDA events; wall clock in a CPU smoke run of this script, not a benchmark)."""
    return median_ms(fn, "cuda" if torch.cuda.is_available() else "cpu", warmup, repeats)


def run_impl(impl, scene, w2c, K, W, H, args):
    run = render_fn(impl, w2c, K, W, H, args.chunk_elements)
    leaves = {k: v.clone().requires_grad_(True) for k, v in scene.items()}

    def fwd():
        with torch.no_grad():
            run(leaves)

    def fwd_bwd():
        for v in leaves.values():
            v.grad = None
        img, alpha = run(leaves)
        img.sum().backward()

    reps = max(3, args.repeats // 5) if impl == "torch" else args.repeats
    t_f = time_cuda(fwd, args.warmup, reps)
    t_fb = time_cuda(fwd_bwd, args.warmup, reps)
    cuda = scene["means"].is_cuda
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    for v in leaves.values():
        v.grad = None
    img, alpha = run(leaves)
    (img.sum()).backward()
    if cuda:
        torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() / 2**20 if cuda else float("nan")
    grads = {k: v.grad.detach().clone() for k, v in leaves.items()}
    return {"fwd": t_f, "fwd_bwd": t_fb, "peak_mb": peak, "image": img.detach(), "alpha": alpha.detach(),
            "grads": grads}


def diff(a, b) -> str:
    out = [f"image {float((a['image'] - b['image']).abs().max()):.2e}",
           f"alpha {float((a['alpha'] - b['alpha']).abs().max()):.2e}"]
    for k in PARAMS:
        d = float((a["grads"][k] - b["grads"][k]).abs().max())
        s = float(a["grads"][k].abs().max().clamp_min(1e-30))
        out.append(f"d{k} {d:.2e} (rel {d / s:.1e})")
    return ", ".join(out)


def parse_case(c: str):
    n, res = c.split("@")
    w, h = res.split("x")
    mult = {"k": 1_000, "M": 1_000_000}
    n = int(float(n[:-1]) * mult[n[-1]]) if n[-1] in mult else int(n)
    return n, int(w), int(h)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", nargs="+", default=["1M@1920x1080", "100k@800x800"])
    ap.add_argument("--impl", nargs="+", default=["torch", "triton", "gsplat"])
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--scale-range", nargs=2, type=float, default=[0.003, 0.03])
    ap.add_argument("--chunk-elements", type=int, default=1 << 24, help="torch reference memory budget")
    ap.add_argument("--out", default=None, help="also write a markdown table here")
    ap.add_argument("--device", default="cuda", help="cuda (the benchmark) or cpu (a smoke run of the script, "
                    "with TRITON_INTERPRET=1 for the triton rows)")
    ap.add_argument("--triton-batch", nargs="+", type=int, default=None,
                    help="sweep the Gaussians-per-step of the Triton tile programs (powers of two; default 16)")
    ap.add_argument("--triton-warps", nargs="+", type=int, default=None,
                    help="sweep the warps per Triton tile program (default 8)")
    ap.add_argument("--triton-config", nargs=2, default=None, metavar=("FWD", "BWD"),
                    help="compositing tile programs as B:warps for the forward and B:warps[:split][b|c] for the "
                         "backward (split: programs per tile; b / c: band culling by batches / compacted, "
                         "_CULL_BWD 1 / 2), e.g. 8:2 4:1:4c "
                         "(benchmarks/splat_stages.py prints the fastest)")
    args = ap.parse_args(argv)
    if args.triton_config:
        fb, fw = args.triton_config[0].split(":")
        bspec = args.triton_config[1]
        bb, bw, *bsplit = bspec.rstrip("bc").split(":")
        kt._BATCH, kt._WARPS = int(fb), int(fw)
        kt._BATCH_BWD, kt._WARPS_BWD = int(bb), int(bw)
        kt._SPLIT_BWD = int(bsplit[0]) if bsplit else 1
        if hasattr(kt, "_CULL_BWD"):
            kt._CULL_BWD = 2 if bspec.endswith("c") else 1 if bspec.endswith("b") else 0
    if args.device == "cuda" and not torch.cuda.is_available():
        print("benchmarks/splat.py needs a CUDA device (or --device cpu for a smoke run)", file=sys.stderr)
        return 2
    impls = list(args.impl)
    if "gsplat" in impls:
        try:
            import gsplat

            print(f"gsplat {getattr(gsplat, '__version__', '?')}")
        except Exception as e:  # noqa: BLE001 - any import failure means: skip it
            print(f"gsplat not importable ({type(e).__name__}: {e}); skipping it")
            impls.remove("gsplat")
    import triton

    dev_name = torch.cuda.get_device_name() if args.device == "cuda" else "cpu (smoke run, not a benchmark)"
    print(f"device {dev_name}, torch {torch.__version__}, triton {triton.__version__}")
    default_cfg = (kt._BATCH, kt._WARPS)
    rows = ["| Gaussians | resolution | impl | forward ms | fwd+bwd ms | peak MiB | fwd+bwd / gsplat |",
            "|---:|---|---|---:|---:|---:|---:|"]
    notes = []
    for case in args.cases:
        n, W, H = parse_case(case)
        scene, w2c, K = make_scene(n, W, H, args.seed, tuple(args.scale_range), device=args.device)
        res = {}
        runs = []
        for impl in impls:
            if impl == "triton" and (args.triton_batch or args.triton_warps):
                for b in args.triton_batch or [default_cfg[0]]:
                    for w in args.triton_warps or [default_cfg[1]]:
                        runs.append((f"triton[b{b},w{w}]", impl, b, w))
            else:
                runs.append((impl, impl) + default_cfg)
        for label, impl, batch, warps in runs:
            kt._BATCH, kt._WARPS = batch, warps
            try:
                res[label] = run_impl(impl, scene, w2c, K, W, H, args)
            except torch.cuda.OutOfMemoryError as e:
                print(f"{case} {label}: out of memory ({e}); lower --chunk-elements for the torch reference")
                torch.cuda.empty_cache()
                continue
            finally:
                kt._BATCH, kt._WARPS = default_cfg
            r = res[label]
            print(f"{case:>14} {label:>7}: forward {r['fwd']:8.3f} ms, forward+backward {r['fwd_bwd']:8.3f} ms, "
                  f"peak {r['peak_mb']:8.1f} MiB", flush=True)
        gs = res.get("gsplat")
        for impl, r in res.items():
            ratio = f"{r['fwd_bwd'] / gs['fwd_bwd']:.2f}×" if gs else "–"
            rows.append(f"| {n:,} | {W}×{H} | {impl} | {r['fwd']:.3f} | {r['fwd_bwd']:.3f} | {r['peak_mb']:.0f} | "
                        f"{ratio} |")
        kt._BATCH, kt._WARPS = default_cfg
        tri = [k for k in res if k.startswith("triton")]
        pairs = [(t, "gsplat") for t in tri] + [(t, "torch") for t in tri] + [("torch", "gsplat")]
        for a, b in pairs:
            if a in res and b in res:
                line = f"{case} {a} vs {b}: {diff(res[b], res[a])}"
                print(line)
                notes.append(line)
        del res
        if args.device == "cuda":
            torch.cuda.empty_cache()
    table = "\n".join(rows)
    print()
    print(table)
    if args.out:
        with open(args.out, "w") as f:
            f.write(table + "\n\n" + "\n".join(f"- {x}" for x in notes) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
