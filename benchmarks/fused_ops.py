"""Kernel ops (a proxy for CUDA launches) of each fused shading chain: torch twin against the Triton path.

Usage (from the repository root; CPU under the Triton interpreter, or CUDA)::

    python benchmarks/fused_ops.py                 # CPU: TRITON_INTERPRET=1 is set before triton is imported
    python benchmarks/fused_ops.py --device cuda   # GPU: also counts cudaLaunchKernel calls

For every chain fused by issue 9's launch work — ``prepare_shading_normal`` (without and with a normal
perturbation), ``EnvironmentLight.shade`` (split-sum, incl. its two cube lookups), the tone-mapped log-L1
image loss and ``render.antialias`` — one forward + backward call is profiled per path (after one warm-up
call) and the table gives the leaf aten ops that launch kernels (``reconstruct_speed.NO_KERNEL_OPS`` rule),
the Triton kernel launches and their sum, forward and backward separately. Op counts do not depend on the
sizes (none of these ops is chunked), so small inputs suffice; timing is not measured here.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
if not os.environ.get("PYTHONPATH"):
    sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests"))


class LaunchCounter:
    """Counts Triton kernel launches (``JITFunction.run`` / the interpreter's ``InterpretedFunction.run``)."""

    def __init__(self):
        self.n = 0
        self._undo = []

    def __enter__(self):
        import triton.runtime.jit as jit

        targets = [jit.JITFunction]
        try:
            from triton.runtime.interpreter import InterpretedFunction

            targets.append(InterpretedFunction)
        except ImportError:
            pass
        for cls in targets:
            orig = cls.run

            def run(this, *a, _orig=orig, **k):
                self.n += 1
                return _orig(this, *a, **k)

            cls.run = run
            self._undo.append((cls, orig))
        return self

    def __exit__(self, *exc):
        for cls, orig in self._undo:
            cls.run = orig


def count(fn, device):
    """(kernel ops, triton launches, cuda launches) of ``fn()`` (a closure doing forward or backward)."""
    from torch.profiler import ProfilerActivity, profile

    from reconstruct_speed import NO_KERNEL_OPS

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with LaunchCounter() as lc, profile(activities=acts) as prof:
        out = fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
    events = prof.events()
    aten = [e for e in events if e.name.startswith("aten::")]
    leaf = [e for e in aten if not any(c.name.startswith("aten::") for c in e.cpu_children)]
    # under the interpreter (CPU) each interpreted launch copies its tensor arguments back (aten::copy_ directly
    # under the custom autograd Function): not a launch on CUDA, left out
    interp = [e for e in leaf if device.type != "cuda" and e.name == "aten::copy_" and e.cpu_parent is not None
              and e.cpu_parent.name.split("::")[-1].lstrip("_").split(" ")[0].endswith(("Fn", "FnBackward"))]
    kops = sum(1 for e in leaf if e.name not in NO_KERNEL_OPS) - len(interp)
    cuda = sum(1 for e in events if e.name in ("cudaLaunchKernel", "cuLaunchKernel", "cuLaunchKernelEx",
                                                "cudaLaunchKernelExC"))
    return kops, lc.n, cuda, out


def cases(device):
    import test_kernels_pbr_triton as P
    from meshlift.render import antialias, rasterize
    from meshlift.shading.color import tonemapped_l1
    from meshlift.shading.normals import prepare_shading_normal

    P.DEV = str(device)
    n = 4096

    def normal(pert):
        ins = P._normal_inputs(n, 1, True, pert)
        leaves = [None if t is None else t.clone().requires_grad_() for t in ins]
        if not pert:
            leaves[4] = None  # render_mesh passes no tangent without a perturbation
        return leaves, lambda b: prepare_shading_normal(*leaves, backend=b)

    def shade(before=False):
        light = P._make_light(16, 4)
        if before:  # the code before the fusion: torch elementwise ops around the Triton cube lookups
            light._fused = lambda *a: False
        light.diffuse.requires_grad_()
        for x in light.specular:
            x.requires_grad_()
        leaves = [t.clone().requires_grad_() for t in P._shade_inputs(n, 1)]
        return leaves, lambda b: light.shade(*leaves, backend=b)

    def loss():
        g = torch.Generator().manual_seed(0)
        pred = (torch.rand(2, 64, 64, 3, generator=g) * 2).to(device).requires_grad_()
        target = torch.rand(2, 64, 64, 3, generator=g).to(device)
        mask = torch.rand(2, 64, 64, 1, generator=g).to(device)
        return [pred], lambda b: tonemapped_l1(pred, target, mask, backend=b)

    def aa():
        import test_kernels_antialias_triton as A

        A.DEV = str(device)
        pos, tri = A._closed_mesh(2)
        pos, tri = pos.to(device), tri.to(device)
        rast, _ = rasterize(pos, tri, (64, 64), backend="torch")
        color = torch.rand(2, 64, 64, 4, device=device).requires_grad_()
        p = pos.clone().requires_grad_()
        return [color, p], lambda b: antialias(color, rast, p, tri, backend=b)

    def normals():
        from meshlift.geometry import mesh_ops
        from meshlift.kernels.normals_triton import mesh_normals_triton

        import test_kernels_normals_triton as N

        N.DEV = str(device)
        v, f = N._mesh(300, 500, 1)
        p = v.clone().requires_grad_()

        def fn(b):
            fn_, vn = (mesh_normals_triton(p, f) if b == "triton"
                       else (mesh_ops.face_normals(p, f), mesh_ops.vertex_normals(p, f)))
            return fn_.sum() + vn.sum()  # one output for the counting harness (sums: 2 ops on both paths)

        return [p], fn

    return {"face + vertex normals (render_mesh, both passes)": normals,
            "prepare_shading_normal (no perturbation)": lambda: normal(False),
            "prepare_shading_normal (perturbed, tangent w)": lambda: normal(True),
            "EnvironmentLight.shade (split-sum)": shade,
            "EnvironmentLight.shade, elementwise torch + Triton cube lookups (before)": lambda: shade(True),
            "tonemapped log-L1 loss": loss, "render.antialias": aa}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    if device.type != "cuda":
        os.environ["TRITON_INTERPRET"] = "1"
    print("| chain | path | fwd kernel ops | fwd Triton | bwd kernel ops | bwd Triton | fwd+bwd launches |"
          + (" CUDA launches |" if device.type == "cuda" else ""))
    print("|---|---|---:|---:|---:|---:|---:|" + ("---:|" if device.type == "cuda" else ""))
    for name, make in cases(device).items():
        for backend in (("triton",) if "(before)" in name else ("torch", "triton")):
            leaves, fn = make()
            for _ in range(2):  # warm-up (compiles, caches), then the counted call
                for t in leaves:
                    if t is not None:
                        t.grad = None
                fk, ft, fc, out = count(lambda: fn(backend), device)
                g = torch.ones_like(out)
                bk, bt, bc, _ = count(lambda: out.backward(g), device)
            row = f"| {name} | {backend} | {fk} | {ft} | {bk} | {bt} | {fk + ft + bk + bt} |"
            print(row + (f" {fc + bc} |" if device.type == "cuda" else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
