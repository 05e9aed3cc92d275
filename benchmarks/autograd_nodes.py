"""Autograd nodes of one nvdiffrec training step, by node type and by the forward source line that made them.

Usage (from the repository root; CPU)::

    python benchmarks/autograd_nodes.py                      # spot --quick, the CUDA code paths
    python benchmarks/autograd_nodes.py --torch-paths         # the CPU (torch) paths instead

On a GPU the training step is bound by host work, and every autograd node is one or more kernel launches
forward and backward plus the autograd engine's own cost, so the node count of a step and where the nodes
come from say where host time goes before a GPU run does. ``--cuda-paths`` (the default) runs the shading
fast paths (fused Triton kernels) under the Triton interpreter (``use_kernels(shading="triton")``,
``TRITON_INTERPRET=1``) inside the passes, as on CUDA; the rasterizer, ``interpolate`` and ``antialias`` stay
on their torch paths (on CUDA each is one Triton node), so their lines (``render/rasterize.py``,
``render/interpolate.py``, ``render/antialias.py``) are over-counted here. Nodes are attributed with
``torch.autograd.set_detect_anomaly`` (each node keeps the traceback of the forward op that made it).
Reads the shared ``spot`` mesh (``MESHLIFT_SHARED_DATA`` or ../shared/data). Counts only, never times.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _walk(t):
    seen, stack = set(), [t.grad_fn]
    types, srcs = collections.Counter(), collections.Counter()
    while stack:
        n = stack.pop()
        if n is None or n in seen:
            continue
        seen.add(n)
        types[type(n).__name__] += 1
        tb = n.metadata.get("traceback_") if hasattr(n, "metadata") else None
        if tb:
            lines = [ln for ln in "".join(tb).splitlines() if "File " in ln and "/meshlift/" in ln]
            key = lines[-1].strip().split("/meshlift/", 1)[-1] if lines else "?"
            srcs[key] += 1
        stack.extend(nf for nf, _ in n.next_functions)
    return len(seen), types, srcs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="spot")
    ap.add_argument("--torch-paths", action="store_true", help="count the CPU (torch) paths, not the CUDA ones")
    ap.add_argument("--rows", type=int, default=40, help="source lines to list per pass")
    args = ap.parse_args(argv)
    if not args.torch_paths:
        os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported
    sys.path.insert(0, str(HERE))
    if not os.environ.get("PYTHONPATH"):
        sys.path.insert(0, str(HERE.parent / "src"))
    import torch

    import reconstruct_speed as rs

    rs.CUDA_PATHS = not args.torch_paths
    calls = collections.Counter()
    original = torch.Tensor.backward

    def backward(self, *a, **k):
        calls["n"] += 1
        if calls["n"] in (2, 5):  # the second step of each pass (3 steps per pass, below)
            n, types, srcs = _walk(self)
            print(f"=== pass {1 if calls['n'] == 2 else 2}: {n} autograd nodes in one step", flush=True)
            print("  by type: " + ", ".join(f"{k_} {v}" for k_, v in types.most_common(15)))
            print("  by forward source line:")
            for k_, v in srcs.most_common(args.rows):
                print(f"  {v:5d}  {k_}")
        return original(self, *a, **k)

    torch.Tensor.backward = backward
    torch.autograd.set_detect_anomaly(True, check_nan=False)
    cfg = rs.make_config(args.preset, True, "cpu", ["ref_views=8", "ref_test_views=1", "max_test_views=1"])
    rs.run_config(f"{args.preset} --quick", cfg, 0, 2, 0, lambda m: print(m, flush=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
