"""Triangle mesh and PBR material containers (nvdiffrec layout).

Conventions (docs/conventions.md): positions in world units; ``v_tex`` UVs use the *internal* origin,
which is glTF's (u right, v down, (0, 0) = top-left texel corner, so row 0 of a texture image is v = 0);
OBJ readers/writers flip v at the boundary. ``kd`` is linear RGB (sRGB decoded on load, encoded on save);
``ks`` packs (occlusion, roughness, metallic) in (R, G, B) as glTF's metallicRoughness texture reads it;
``normal`` is a tangent-space normal map in [-1, 1] (OpenGL / glTF convention: +Y = +bitangent).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Optional

import torch

from meshlift.errors import MeshError
from meshlift.structures.index_check import index_range_ok

#: The material meshlift assumes for a mesh without one (renderer, writers): mid-grey linear albedo ...
DEFAULT_KD = (0.5, 0.5, 0.5)
#: ... and ``ks`` = (occlusion 0, roughness 0.5, metallic 0) in the internal ORM layout (docs/conventions.md
#: §7). A mesh with vertex colours and no material uses the colours as albedo instead of DEFAULT_KD.
DEFAULT_KS = (0.0, 0.5, 0.0)


@dataclass
class Material:
    """PBR metallic-roughness material; every texture is ``[H, W, C]`` float32.

    Attributes:
        kd: albedo, ``[H, W, 3]`` (or ``[H, W, 4]`` with alpha), linear RGB in [0, 1].
        ks: ``[H, W, 3]`` = (occlusion, roughness, metallic) in [0, 1], or None (``DEFAULT_KS``:
            unoccluded, roughness 0.5, metal 0). Occlusion here is nvdiffrec's "amount occluded" (0 = open,
            shading is multiplied by ``1 − occlusion``); glTF files store ``1 − occlusion`` (conventions §7).
        normal: tangent-space normal map ``[H, W, 3]`` in [-1, 1], or None (flat).
        name: material name written to MTL / glTF.
    """

    kd: torch.Tensor
    ks: Optional[torch.Tensor] = None
    normal: Optional[torch.Tensor] = None
    name: str = "material"

    def to(self, device: torch.device | str) -> "Material":
        """Return a copy with every texture on ``device``."""
        move = lambda t: None if t is None else t.to(device)  # noqa: E731
        return replace(self, kd=self.kd.to(device), ks=move(self.ks), normal=move(self.normal))


@dataclass
class Mesh:
    """Triangle mesh with optional per-corner UVs/normals and per-vertex colours.

    Attributes:
        v_pos: ``[V, 3]`` float32 vertex positions (world units).
        t_pos_idx: ``[T, 3]`` int64 triangle vertex indices into ``v_pos``.
        v_tex: ``[Vt, 2]`` float32 UVs (internal glTF origin, see module docstring), or None.
        t_tex_idx: ``[T, 3]`` int64 indices into ``v_tex`` (UV seams), or None.
        v_nrm: ``[Vn, 3]`` float32 unit normals, or None.
        t_nrm_idx: ``[T, 3]`` int64 indices into ``v_nrm``, or None.
        v_color: ``[V, 3|4]`` float32 linear vertex colours in [0, 1], or None.
        material: the mesh's single material, or None.
    """

    v_pos: torch.Tensor
    t_pos_idx: torch.Tensor
    v_tex: Optional[torch.Tensor] = None
    t_tex_idx: Optional[torch.Tensor] = None
    v_nrm: Optional[torch.Tensor] = None
    t_nrm_idx: Optional[torch.Tensor] = None
    v_color: Optional[torch.Tensor] = None
    material: Optional[Material] = None
    extras: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.v_pos.ndim != 2 or self.v_pos.shape[-1] != 3:
            raise MeshError(f"Mesh.v_pos must be [V, 3], got {tuple(self.v_pos.shape)}")
        if self.t_pos_idx.ndim != 2 or self.t_pos_idx.shape[-1] != 3:
            raise MeshError(f"Mesh.t_pos_idx must be [T, 3], got {tuple(self.t_pos_idx.shape)}")
        if not index_range_ok(self.t_pos_idx, self.v_pos.shape[0])[0]:  # one read-back per face list
            raise MeshError(
                f"Mesh.t_pos_idx indexes vertex {int(self.t_pos_idx.max())} but there are only "
                f"{self.v_pos.shape[0]} vertices; fix the face list or drop the bad faces"
            )

    @property
    def num_vertices(self) -> int:
        return int(self.v_pos.shape[0])

    @property
    def num_faces(self) -> int:
        return int(self.t_pos_idx.shape[0])

    @property
    def device(self) -> torch.device:
        return self.v_pos.device

    def to(self, device: torch.device | str) -> "Mesh":
        """Return a copy with every tensor (and the material) on ``device``."""
        move = lambda t: None if t is None else t.to(device)  # noqa: E731
        return replace(
            self,
            v_pos=self.v_pos.to(device),
            t_pos_idx=self.t_pos_idx.to(device),
            v_tex=move(self.v_tex),
            t_tex_idx=move(self.t_tex_idx),
            v_nrm=move(self.v_nrm),
            t_nrm_idx=move(self.t_nrm_idx),
            v_color=move(self.v_color),
            material=None if self.material is None else self.material.to(device),
        )

    def bbox(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Axis-aligned bounds ``([3], [3])``; raises MeshError on an empty mesh."""
        if self.num_vertices == 0:
            raise MeshError("Mesh has no vertices: nothing to bound")
        return self.v_pos.min(0).values, self.v_pos.max(0).values
