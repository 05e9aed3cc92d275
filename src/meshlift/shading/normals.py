"""Shading-normal preparation: tangent-space normal perturbation, two-sided flipping, bent normals.

Semantics of nvdiffrec's ``bsdf_prepare_shading_normal`` (render/renderutils/bsdf.py):

1. ``B = w · normalize(N × T)`` (N smooth normal, T smooth tangent, both normalised first; ``w = ±1`` the
   tangent's handedness, glTF's ``TANGENT.w``, +1 when the tangent is given without it);
   shading normal ``n = normalize(p.x T + p.y B + max(p.z, 0) N)`` for a tangent-space perturbation p.
   With ``opengl=True`` (docs/conventions.md §7, §13: OpenGL/glTF normal maps, +Y along the bitangent)
   and ``w = +1`` this is nvdiffrec's ``T p.x - (T × N) p.y + N p.z``. The frame is glTF's / MikkTSpace's
   when T and w come from :func:`meshlift.geometry.mesh_ops.tangent_frames`: +Y points towards increasing
   file-space (bottom-left origin) v on every chart, mirrored ones included (there ``w = −1``), which is
   what three.js, Blender, Unity and Unreal show. ``opengl=False`` flips the Y axis (DirectX maps).
2. Two-sided shading: where the view vector is behind the geometric (face) normal, both the geometric
   and the shading normals are negated, so back faces shade like front faces.
3. Bent normals: ``lerp(geom, n, clamp((v·n) / 0.1, 0, 1))`` — a shading normal facing away from the
   viewer (possible after interpolation or perturbation) is blended towards the geometric normal to avoid
   black silhouettes.
"""

from __future__ import annotations

import torch

from meshlift.errors import RenderError
from meshlift.shading.bsdf import dot, safe_normalize

__all__ = ["NORMAL_THRESHOLD", "perturb_normal", "bend_normal", "prepare_shading_normal"]

#: v·n below which the shading normal is bent towards the geometric normal (nvdiffrec's 0.1).
NORMAL_THRESHOLD = 0.1


def perturb_normal(
    perturbed_nrm: torch.Tensor, smooth_nrm: torch.Tensor, smooth_tng: torch.Tensor, opengl: bool = True
) -> torch.Tensor:
    """Apply a tangent-space normal ``[..., 3]`` to the frame (T, B = w · normalize(N × T), N); unit ``[..., 3]``.

    ``smooth_tng`` is ``[..., 3]`` (handedness +1) or ``[..., 4]`` with the handedness ``w`` (±1, glTF's
    ``TANGENT.w``; only its sign is used) in the last component.
    """
    w = None
    if smooth_tng.shape[-1] == 4:
        w = torch.where(smooth_tng[..., 3:4] < 0, -1.0, 1.0).to(smooth_tng.dtype)
        smooth_tng = smooth_tng[..., :3]
    bitang = safe_normalize(torch.cross(smooth_nrm, smooth_tng, dim=-1))
    if w is not None:
        bitang = bitang * w
    y = perturbed_nrm[..., 1:2] if opengl else -perturbed_nrm[..., 1:2]
    n = smooth_tng * perturbed_nrm[..., 0:1] + bitang * y + smooth_nrm * torch.clamp(perturbed_nrm[..., 2:3], min=0.0)
    return safe_normalize(n)


def bend_normal(
    view_vec: torch.Tensor, shading_nrm: torch.Tensor, geom_nrm: torch.Tensor, two_sided_shading: bool = True
) -> torch.Tensor:
    """Two-sided flip and bent-normal blend (see module docstring, steps 2-3); ``[..., 3]``."""
    if two_sided_shading:
        front = dot(geom_nrm, view_vec) > 0
        shading_nrm = torch.where(front, shading_nrm, -shading_nrm)
        geom_nrm = torch.where(front, geom_nrm, -geom_nrm)
    t = torch.clamp(dot(view_vec, shading_nrm) / NORMAL_THRESHOLD, min=0.0, max=1.0)
    return torch.lerp(geom_nrm, shading_nrm, t)


def prepare_shading_normal(
    pos: torch.Tensor,
    view_pos: torch.Tensor,
    perturbed_nrm: torch.Tensor | None,
    smooth_nrm: torch.Tensor,
    smooth_tng: torch.Tensor | None,
    geom_nrm: torch.Tensor,
    two_sided_shading: bool = True,
    opengl: bool = True,
    *,
    two_sided: bool | None = None,
    backend: str | None = None,
) -> torch.Tensor:
    """The final world-space shading normal (nvdiffrec ``prepare_shading_normal`` semantics).

    All tensors are ``[..., 3]`` and broadcast together (e.g. G-buffers ``[B, H, W, 3]`` or gathered
    pixels ``[N, 3]``, with ``view_pos`` ``[B, 1, 1, 3]``).

    Args:
        pos: world-space positions.
        view_pos: camera positions.
        perturbed_nrm: tangent-space normal perturbation (a normal-map sample in [-1, 1], or a material
            field's output), or None for the unperturbed normal (0, 0, 1).
        smooth_nrm: interpolated vertex normals (normalised here).
        smooth_tng: interpolated vertex tangents ``[..., 3]``, or ``[..., 4]`` with the handedness ``w = ±1``
            in the last component (:func:`meshlift.geometry.mesh_ops.tangent_frames`); xyz normalised here.
            May be None when ``perturbed_nrm`` is None (the tangent is only used by the perturbation).
        geom_nrm: geometric (face) normals, unit.
        two_sided_shading: flip normals of faces seen from behind.
        opengl: OpenGL/glTF normal-map orientation (+Y along the bitangent); False for DirectX (-Y).
        two_sided: alias of ``two_sided_shading`` (keyword only).
        backend: ``'auto'`` / ``'torch'`` / ``'triton'`` / None (the current choice, else auto:
            Triton for float32 CUDA tensors; :func:`meshlift.kernels.choose_backend`). With
            ``'triton'`` and all inputs ``[N, C]`` rows of one device, the whole chain is one fused kernel
            forward and one backward (:func:`meshlift.kernels.pbr_triton.shading_normal_triton`); this torch
            code is its reference twin. Otherwise the torch path runs.

    Returns:
        ``[..., 3]`` shading normals (unit length except where the bent-normal blend mixes two unit
        vectors, exactly as nvdiffrec).

    Raises:
        RenderError: an input does not end in 3, or ``smooth_tng`` is None with a perturbation.
    """
    if two_sided is not None:
        two_sided_shading = bool(two_sided)
    for name, t in (("pos", pos), ("view_pos", view_pos), ("smooth_nrm", smooth_nrm), ("geom_nrm", geom_nrm)):
        if t.shape[-1] != 3:
            raise RenderError(f"prepare_shading_normal({name}): expected [..., 3], got {tuple(t.shape)}")
    if smooth_tng is None and perturbed_nrm is not None:
        raise RenderError("prepare_shading_normal(smooth_tng): None, but a perturbed_nrm needs the tangent frame; "
                          "pass the interpolated tangents")
    if smooth_tng is not None and smooth_tng.shape[-1] not in (3, 4):
        raise RenderError(
            f"prepare_shading_normal(smooth_tng): expected [..., 3] or [..., 4] (xyz + handedness), "
            f"got {tuple(smooth_tng.shape)}"
        )
    if perturbed_nrm is not None and perturbed_nrm.shape[-1] != 3:
        raise RenderError(
            f"prepare_shading_normal(perturbed_nrm): expected [..., 3], got {tuple(perturbed_nrm.shape)}"
        )
    if _fused(backend, pos, view_pos, perturbed_nrm, smooth_nrm, smooth_tng, geom_nrm):
        from meshlift.kernels.pbr_triton import shading_normal_triton

        return shading_normal_triton(pos, view_pos, perturbed_nrm, smooth_nrm, smooth_tng, geom_nrm,
                                     two_sided_shading, opengl)
    smooth_nrm = safe_normalize(smooth_nrm)
    view_vec = safe_normalize(view_pos - pos)
    if perturbed_nrm is None:
        shading = smooth_nrm
    else:
        if smooth_tng.shape[-1] == 4:
            smooth_tng = torch.cat([safe_normalize(smooth_tng[..., :3]), smooth_tng[..., 3:4]], -1)
        else:
            smooth_tng = safe_normalize(smooth_tng)
        shading = perturb_normal(perturbed_nrm, smooth_nrm, smooth_tng, opengl)
    return bend_normal(view_vec, shading, geom_nrm, two_sided_shading)


def _fused(backend, *rows) -> bool:
    """Whether the fused Triton kernel runs: float32 ``[N, C]`` rows of one device, the backend says so."""
    ts = [t for t in rows if t is not None]
    first = ts[0]
    if any(t.ndim != 2 or t.shape[0] != first.shape[0] or t.device != first.device or t.dtype != torch.float32
           for t in ts):
        return False
    from meshlift.kernels import choose_backend

    return choose_backend("shading", backend, first.device, first.dtype) == "triton"
