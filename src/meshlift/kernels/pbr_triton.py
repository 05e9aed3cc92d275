"""The per-pixel elementwise chains of deferred PBR shading in Triton: one launch forward, one backward each.

Why: a surface-method training step is launch-bound on the GPU (issue 9; the H200 profile of
benchmarks/results/reconstruct_speed_h200_session2_run3.md: ~1,700 / 2,100 launches per pass-1 / pass-2
step, most of them short elementwise ops of ``[N, 3]`` rows and their autograd backward). Three chains of
``renderers.mesh_pbr.render_mesh`` are fused here; each kernel recomputes its forward in the backward
(nothing but the inputs is saved) and writes the gradients of all inputs in the same launch.

- :func:`shading_normal_triton`: :func:`meshlift.shading.normals.prepare_shading_normal` (normalise the
  smooth normal, tangent and view vector; tangent-space perturbation with the bitangent
  ``w · normalize(N × T)``; two-sided flip; bent-normal lerp). The torch path: ~45 ops forward, ~90 backward.
- :func:`shade_prep_triton`: the part of :meth:`meshlift.shading.light.EnvironmentLight.shade` before the
  specular cube lookup: ``wo = normalize(view − pos)``, ``refl = normalize(2 (wo·n) n − wo)``, and the mip
  level of the roughness (``EnvironmentLight.get_mip``).
- :func:`shade_combine_triton`: the part after the two cube lookups (``shading.cubemap.sample_cube`` of the
  diffuse cube at ``n`` and ``sample_cube_mip`` of the specular chain at ``refl``, which stay their own
  kernels): ``n·v`` clamped to 1e-4, the bilinear clamp-to-edge split-sum LUT lookup
  (``shading.brdf_lut.lookup_brdf_lut``), ``spec_col = 0.04 (1 − m) + kd m``, ``diff_col = kd (1 − m)`` and
  ``(diffuse · diff_col + spec · (spec_col · A + B)) · (1 − occlusion)``.

The specifications (reference twins) are those torch functions, unchanged; tests/test_kernels_pbr_triton.py
compares forward and backward (the twins themselves are float64-gradchecked there too). Backward formulas:
``safe_normalize`` ``u = x / r`` → ``dx = (g − u (g·u)) / r`` (the ``u (g·u)`` term only where
``|x|² ≥ 1e-20``, torch's clamp rule); ``a × b`` → ``da = b × g``, ``db = g × a``; every ``clamp`` passes its
gradient on the closed interval, ``where``/``floor`` selectors are piecewise constant (as autograd does).
Float32 only; the rounding differs from torch's in the last bits (fused multiply-adds, the order of the
three-term dot products). Differentiable once. ``triton`` is imported on first use, never at module import.

Source of the shading model: Munkberg et al., "Extracting Triangular 3D Models, Materials, and Lighting From
Images", CVPR 2022, Sec. 4 (split-sum, Karis 2013), and nvdiffrec's ``bsdf_prepare_shading_normal``
(semantics only).
"""

from __future__ import annotations

import functools

import torch
from torch.autograd.function import once_differentiable

from meshlift.kernels._launch import grid_1d, on_device

__all__ = ["shading_normal_triton", "shade_prep_triton", "shade_combine_triton"]

_BLOCK = 128
_grid = functools.partial(grid_1d, block=_BLOCK)  # one program per _BLOCK elements


class _ShadingNormalFn(torch.autograd.Function):
    """``(pos, view, pert | None, nrm, tng [N, 3|4], geom) -> [N, 3]`` (flags non-differentiable)."""

    @staticmethod
    def forward(ctx, pos, view, pert, nrm, tng, geom, two_sided, opengl):  # type: ignore[override]
        from meshlift.kernels import _pbr_triton_kernels as k

        n = pos.shape[0]
        has_pert = pert is not None
        flags = dict(TNG4=tng.shape[1] == 4, TS=int(tng.shape[1]), PERT=has_pert, TWO_SIDED=bool(two_sided),
                     OPENGL=bool(opengl), BLOCK=_BLOCK)
        out = torch.empty_like(pos)
        if n:
            with on_device(pos.device):
                k.shading_normal_fwd[_grid(n)](pos, view, pert if has_pert else pos, nrm, tng, geom, out, n, **flags)
        ctx.save_for_backward(pos, view, pert, nrm, tng, geom)
        ctx.flags = flags
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):  # type: ignore[override]
        from meshlift.kernels import _pbr_triton_kernels as k

        pos, view, pert, nrm, tng, geom = ctx.saved_tensors
        n = pos.shape[0]
        grad = grad.contiguous()
        g_pos, g_view, g_nrm, g_geom = (torch.empty_like(t) for t in (pos, view, nrm, geom))
        g_pert = torch.empty_like(pert) if pert is not None else pos.new_empty(1)
        g_tng = torch.empty_like(tng) if pert is not None else pos.new_empty(1)
        if n:
            with on_device(pos.device):
                k.shading_normal_bwd[_grid(n)](pos, view, pert if pert is not None else pos, nrm, tng, geom, grad,
                                               g_pos, g_view, g_pert, g_nrm, g_tng, g_geom, n, **ctx.flags)
        need = ctx.needs_input_grad
        return (g_pos if need[0] else None, g_view if need[1] else None,
                g_pert if (pert is not None and need[2]) else None, g_nrm if need[3] else None,
                g_tng if (pert is not None and need[4]) else None, g_geom if need[5] else None, None, None)


class _ShadePrepFn(torch.autograd.Function):
    """``(pos, nrm, view, ks) -> (refl [N, 3], level [N])``; the mip mapping's constants non-differentiable."""

    @staticmethod
    def forward(ctx, pos, nrm, view, ks, lo, hi, n_levels):  # type: ignore[override]
        from meshlift.kernels import _pbr_triton_kernels as k

        n = pos.shape[0]
        refl = torch.empty_like(pos)
        level = torch.empty(n, dtype=pos.dtype, device=pos.device)
        consts = (float(lo), float(hi), float(n_levels - 2))
        single = int(n_levels) == 1
        if n:
            with on_device(pos.device):
                k.shade_prep_fwd[_grid(n)](pos, nrm, view, ks, refl, level, n, *consts, SINGLE=single, BLOCK=_BLOCK)
        ctx.save_for_backward(pos, nrm, view, ks)
        ctx.consts, ctx.single = consts, single
        return refl, level

    @staticmethod
    @once_differentiable
    def backward(ctx, g_refl, g_level):  # type: ignore[override]
        from meshlift.kernels import _pbr_triton_kernels as k

        pos, nrm, view, ks = ctx.saved_tensors
        n = pos.shape[0]
        g_refl = torch.zeros_like(pos) if g_refl is None else g_refl.contiguous()
        g_level = pos.new_zeros(n) if g_level is None else g_level.contiguous()
        g_pos, g_nrm, g_view, g_ks = (torch.empty_like(t) for t in (pos, nrm, view, ks))
        if n:
            with on_device(pos.device):
                k.shade_prep_bwd[_grid(n)](pos, nrm, view, ks, g_refl, g_level, g_pos, g_nrm, g_view, g_ks, n,
                                           *ctx.consts, SINGLE=ctx.single, BLOCK=_BLOCK)
        need = ctx.needs_input_grad
        return (g_pos if need[0] else None, g_nrm if need[1] else None, g_view if need[2] else None,
                g_ks if need[3] else None, None, None, None)


class _ShadeCombineFn(torch.autograd.Function):
    """``(pos, nrm, view, kd, ks, diffuse, spec, lut) -> [N, 3]``; the LUT is a constant table."""

    @staticmethod
    def forward(ctx, pos, nrm, view, kd, ks, diffuse, spec, lut):  # type: ignore[override]
        from meshlift.kernels import _pbr_triton_kernels as k

        n = pos.shape[0]
        out = torch.empty_like(pos)
        lh, lw = int(lut.shape[0]), int(lut.shape[1])
        if n:
            with on_device(pos.device):
                k.shade_combine_fwd[_grid(n)](pos, nrm, view, kd, ks, diffuse, spec, lut, out, n, lh, lw,
                                              BLOCK=_BLOCK)
        ctx.save_for_backward(pos, nrm, view, kd, ks, diffuse, spec, lut)
        ctx.lut_size = (lh, lw)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):  # type: ignore[override]
        from meshlift.kernels import _pbr_triton_kernels as k

        pos, nrm, view, kd, ks, diffuse, spec, lut = ctx.saved_tensors
        n = pos.shape[0]
        grad = grad.contiguous()
        gs = [torch.empty_like(t) for t in (pos, nrm, view, kd, ks, diffuse, spec)]
        if n:
            with on_device(pos.device):
                k.shade_combine_bwd[_grid(n)](pos, nrm, view, kd, ks, diffuse, spec, lut, grad, *gs, n,
                                              *ctx.lut_size, BLOCK=_BLOCK)
        need = ctx.needs_input_grad
        return tuple(g if need[i] else None for i, g in enumerate(gs)) + (None,)


def _rows(*ts):
    return tuple(None if t is None else t.contiguous() for t in ts)


def shading_normal_triton(pos, view_pos, perturbed_nrm, smooth_nrm, smooth_tng, geom_nrm, two_sided_shading=True,
                          opengl=True) -> torch.Tensor:
    """Fused :func:`meshlift.shading.normals.prepare_shading_normal` of ``N`` rows (the caller validates).

    Args:
        pos, view_pos, smooth_nrm, geom_nrm: ``[N, 3]`` float32 (one device).
        perturbed_nrm: ``[N, 3]`` tangent-space perturbation, or None (then ``smooth_tng`` is not read).
        smooth_tng: ``[N, 3]`` or ``[N, 4]`` (xyz + handedness sign), or None without a perturbation.
        two_sided_shading, opengl: as in ``prepare_shading_normal``.

    Returns:
        ``[N, 3]`` float32 shading normals, differentiable with respect to every tensor input (zero for the
        handedness component).
    """
    if perturbed_nrm is None or smooth_tng is None:  # the tangent is not read: a placeholder without gradient
        smooth_tng = smooth_nrm.detach()
    args = _rows(pos, view_pos, perturbed_nrm, smooth_nrm, smooth_tng, geom_nrm)
    return _ShadingNormalFn.apply(*args, two_sided_shading, opengl)


def shade_prep_triton(pos, nrm, view_pos, ks, min_roughness: float, max_roughness: float, n_levels: int):
    """Reflection vector and specular mip level of ``EnvironmentLight.shade`` (the caller validates).

    Args:
        pos, nrm, view_pos: ``[N, 3]`` float32 world positions, unit shading normals, camera positions.
        ks: ``[N, 3]`` float32 (occlusion, roughness, metallic); only the roughness is read.
        min_roughness, max_roughness, n_levels: the light's mip mapping (``EnvironmentLight.get_mip``).

    Returns:
        ``(refl [N, 3], level [N])`` float32, differentiable with respect to ``pos``, ``nrm``, ``view_pos``
        and ``ks``.
    """
    return _ShadePrepFn.apply(*_rows(pos, nrm, view_pos, ks), min_roughness, max_roughness, int(n_levels))


def shade_combine_triton(pos, nrm, view_pos, kd, ks, diffuse, spec, lut) -> torch.Tensor:
    """Split-sum combination of ``EnvironmentLight.shade`` after its two cube lookups (the caller validates).

    Args:
        pos, nrm, view_pos, kd, ks: ``[N, 3]`` float32, as in ``EnvironmentLight.shade``.
        diffuse: ``[N, 3]`` the diffuse cube at ``nrm``; spec: ``[N, 3]`` the specular chain at the
            reflection vector and the roughness's level.
        lut: ``[R, R, 2]`` float32 split-sum table (``shading.brdf_lut.brdf_lut``; no gradient).

    Returns:
        ``[N, 3]`` float32 outgoing radiance, differentiable with respect to every input but ``lut``.
    """
    return _ShadeCombineFn.apply(*_rows(pos, nrm, view_pos, kd, ks, diffuse, spec, lut))
