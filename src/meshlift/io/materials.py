"""Material conventions at the file boundary: occlusion, the ORM texture, the assumed default material.

docs/conventions.md §7 and §13. Inside meshlift, ``Material.ks`` is nvdiffrec's layout
``(occlusion, roughness, metallic)`` where *occlusion is the amount occluded* (0 = open; the shader
multiplies by ``1 − occlusion``, Munkberg et al. 2022, ``render/renderutils/bsdf.py``). Files differ:

* **glTF 2.0** (§3.9.3 ``occlusionTexture``): the R channel is *visibility*, 1 = unoccluded, applied as
  ``1 + strength · (R − 1)``; ``metallicRoughnessTexture`` has G = roughness, B = metallic and R unused.
  meshlift writes one ORM image (R = glTF occlusion, G, B) and references it as ``occlusionTexture`` only
  when some texel is occluded. :func:`ks_to_gltf_orm` / :func:`ks_from_gltf` convert.
* **OBJ/MTL** (nvdiffrec's ``bsdf pbr`` extension): ``Ks`` / ``map_Ks`` store ``ks`` exactly as inside
  (nvdiffrec's documented layout, occlusion = amount occluded), so the MTL reader and writer copy it.

A mesh without a material is rendered by meshlift with ``DEFAULT_KD`` / ``DEFAULT_KS``
(:mod:`meshlift.structures.mesh`); :func:`assumed_material` is that material, which the writers put in
every file, because glTF's own default (white, metallic 1, roughness 1) and MTL-less OBJ viewers' defaults
look different.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from meshlift.structures.mesh import DEFAULT_KD, DEFAULT_KS, Material, Mesh

__all__ = ["assumed_material", "has_occlusion", "ks_from_gltf", "ks_to_gltf_orm", "with_normals", "OCCLUSION_EPS"]

#: Internal occlusion at or below this (half an 8-bit step) counts as "unoccluded" when deciding whether
#: a file needs an occlusion texture.
OCCLUSION_EPS = 0.5 / 255.0


def assumed_material(mesh: Mesh) -> Material:
    """The material meshlift renders ``mesh`` with when ``mesh.material`` is None.

    ``kd`` = ``DEFAULT_KD`` (0.5 grey, linear), or white when the mesh has vertex colours (they are the
    albedo then, and glTF multiplies ``COLOR_0`` by the base colour); ``ks`` = ``DEFAULT_KS``
    (unoccluded, roughness 0.5, metallic 0). ``1 × 1`` constants, name ``"meshlift_default"``.
    """
    kd = (1.0, 1.0, 1.0) if mesh.v_color is not None else DEFAULT_KD
    return Material(
        kd=torch.tensor(kd, dtype=torch.float32).reshape(1, 1, 3),
        ks=torch.tensor(DEFAULT_KS, dtype=torch.float32).reshape(1, 1, 3),
        name="meshlift_default",
    )


def with_normals(mesh: Mesh) -> Mesh:
    """``mesh`` itself when it has normals, else a shallow copy with
    :func:`meshlift.geometry.mesh_ops.smooth_vertex_normals` (default crease angle and weighting; no
    gradient). Writers call this so every file carries the normals clients should shade with.
    """
    if mesh.v_nrm is not None and mesh.t_nrm_idx is not None:
        return mesh
    from dataclasses import replace

    from meshlift.geometry.mesh_ops import smooth_vertex_normals

    with torch.no_grad():
        v_nrm, t_nrm = smooth_vertex_normals(mesh.v_pos.detach().double(), mesh.t_pos_idx)
    return replace(mesh, v_nrm=v_nrm.float(), t_nrm_idx=t_nrm)


def has_occlusion(ks: Optional[torch.Tensor]) -> bool:
    """True when some texel of ``ks [H, W, 3]`` (internal layout) is occluded by more than ``OCCLUSION_EPS``."""
    return ks is not None and bool((ks[..., 0] > OCCLUSION_EPS).any())


def ks_to_gltf_orm(ks: torch.Tensor) -> np.ndarray:
    """Internal ``ks [H, W, 3]`` (occlusion amount, roughness, metallic) → glTF ORM image ``[H, W, 3]``.

    R = ``1 − occlusion`` (glTF visibility), G = roughness, B = metallic; float32 in [0, 1] (data, no
    transfer curve). The inverse is :func:`ks_from_gltf`.
    """
    a = np.clip(ks.detach().cpu().float().numpy()[..., :3], 0.0, 1.0).copy()
    a[..., 0] = 1.0 - a[..., 0]
    return a


def _resize(img: torch.Tensor, hw: tuple[int, int]) -> torch.Tensor:
    if tuple(img.shape[:2]) == tuple(hw):
        return img
    x = img.permute(2, 0, 1)[None]
    return torch.nn.functional.interpolate(x, size=hw, mode="bilinear", align_corners=False)[0].permute(1, 2, 0)


def ks_from_gltf(
    metallic_roughness: Optional[torch.Tensor],
    occlusion: Optional[torch.Tensor],
    roughness_factor: float = 1.0,
    metallic_factor: float = 1.0,
    occlusion_strength: float = 1.0,
) -> torch.Tensor:
    """glTF material → internal ``ks [H, W, 3]`` (occlusion amount, roughness, metallic).

    Args:
        metallic_roughness: the ``metallicRoughnessTexture`` image ``[H, W, 3]`` in [0, 1] (G roughness,
            B metallic; R ignored, as glTF says), or None (factors only).
        occlusion: the ``occlusionTexture`` image ``[H', W', ≥1]`` (R = visibility, 1 = unoccluded), or None
            (unoccluded). Resized bilinearly to the metallic-roughness size when both exist and differ.
        roughness_factor, metallic_factor: glTF factors (multiply the texture, or stand alone).
        occlusion_strength: glTF ``occlusionTexture.strength``: visibility = ``1 + s (R − 1)``.

    Returns:
        float32 ``ks``; ``[1, 1, 3]`` when neither texture is given. Occlusion = ``1 − visibility``, so a
        file with only factors gives 0 (open) — not 1, which would render black.
    """
    if metallic_roughness is not None:
        base = metallic_roughness[..., :3].float()
        rough = base[..., 1:2] * float(roughness_factor)
        metal = base[..., 2:3] * float(metallic_factor)
        hw = tuple(base.shape[:2])
    else:
        hw = (1, 1) if occlusion is None else tuple(occlusion.shape[:2])
        rough = torch.full((*hw, 1), float(roughness_factor))
        metal = torch.full((*hw, 1), float(metallic_factor))
    if occlusion is None:
        occ = torch.zeros(*hw, 1)
    else:
        vis = 1.0 + float(occlusion_strength) * (_resize(occlusion[..., :1].float(), hw) - 1.0)
        occ = 1.0 - vis.clamp(0.0, 1.0)
    return torch.cat([occ, rough, metal], -1).clamp(0.0, 1.0).contiguous()
