"""The Triton variants of a 3DGS training step do not depend on the Gaussian count (issue 29: mid-run
recompiles), and the variant keys of a traced launch are the ones Triton's JIT computes
(meshlift.kernels.variant_trace; interpreter, CPU)."""

from __future__ import annotations

import os

import pytest
import torch

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET", "0") in ("", "0"),
                                reason="needs TRITON_INTERPRET=1 (the Triton interpreter on the CPU)")


def _render_step(n: int, sh_degree: int = 1, seed: int = 0):
    """Forward + backward of the splat render, the fused SSIM loss, at ``n`` Gaussians (24² image)."""
    from meshlift.methods.gaussians.losses import photometric_loss
    from meshlift.render.splat import rasterize_gaussians

    g = torch.Generator().manual_seed(seed)
    means = torch.randn(n, 3, generator=g) * 0.4
    means[:, 2] += 3.0
    quats = torch.randn(n, 4, generator=g)
    scales = torch.rand(n, 3, generator=g) * 0.08 + 0.01
    opac = torch.rand(n, generator=g) * 0.9
    sh = torch.randn(n, 16, 3, generator=g) * 0.2
    for t in (means, quats, scales, opac, sh):
        t.requires_grad_(True)
    w2c = torch.eye(4)[None]
    K = torch.tensor([[[30.0, 0, 16], [0, 30.0, 16], [0, 0, 1]]])
    img, _, _ = rasterize_gaussians(means, quats, scales, opac, sh, w2c, K, 32, 32, sh_degree=sh_degree,
                                    backend="triton")
    target = torch.rand(1, 32, 32, 3, generator=g)
    photometric_loss(img, target, 0.2, fused=True)["loss"].backward()


def _variants(n: int) -> set:
    from meshlift.kernels import variant_trace

    with variant_trace.trace() as launches:
        _render_step(n)
    return {(r["kernel"], r["signature"], r["constexprs"], r["attrs"], str(r["options"]))
            for r in variant_trace.variant_rows(launches)}


@pytest.mark.slow
def test_the_variant_set_of_a_step_does_not_change_with_the_gaussian_count():
    base = _variants(64)
    names = {k[0].rsplit(":", 1)[1] for k in base}
    assert {"project_fwd", "sh_fwd", "write_keys", "composite_fwd", "composite_bwd", "sh_bwd", "project_bwd",
            "ssim_hstats", "ssim_vgrad"} <= names
    for n in (61, 97, 130, 257):  # counts of every residue class that matters: odd, ≡ 1 mod 16, even, ...
        assert _variants(n) == base, n


def test_traced_rows_are_the_keys_of_tritons_own_binder():
    from triton.runtime.jit import create_function_from_signature  # noqa: F401  (the binder variant_rows uses)

    from meshlift.kernels import variant_trace

    with variant_trace.trace() as launches:
        _render_step(40)
    rows = variant_trace.variant_rows(launches)
    sh = [r for r in rows if r["kernel"].endswith(":sh_fwd")]
    assert len(sh) == 1 and "(7,): 1" in sh[0]["constexprs"]  # DEG = 1, the one constexpr that varies
    bwd = [r for r in rows if r["kernel"].endswith(":composite_bwd")][0]
    from meshlift.kernels import splat_triton as kt

    assert kt._WARPS_BWD != 4  # a launch option that differs from the backend's default (4 warps) is recorded
    assert bwd["options"] == {"num_warps": kt._WARPS_BWD}
    # a round trip through the JSON lines gives the same rows
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"vt_{os.getpid()}.jsonl")
    variant_trace.save(launches, path)
    assert variant_trace.variant_rows(variant_trace.load(path)) == rows
    os.unlink(path)
