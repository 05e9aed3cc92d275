"""The render of :func:`~meshlift.renderers.mesh_pbr.render_mesh` with fixed shapes: every pixel, not the covered ones.

``render_mesh`` runs its per-pixel work (material, shading normal, shading) on the covered pixels only: it
finds them with one ``nonzero`` (a host sync) and gathers and scatters rows, so the shapes of that half change
with the mesh every step. This module splits the same render into three parts whose middle one has the
shapes of the frame only (``P = B · Hs · Ws`` rows, ``Hs = spp · H``), so it can be replayed as a CUDA graph
(``meshlift.methods.nvdiffrec.pixel_graphs``):

1. :func:`gbuffer_rows` (mesh-sized, eager): clip transform, ``rasterize``, one ``interpolate`` of world
   position and smooth normal together, the covering face's normal, and for a textured material the UVs with
   their screen derivatives and the tangent frames; uncovered pixels get finite stand-ins (position 0,
   normals +z, UV 0) so no NaN can arise there;
2. :func:`shade_field_rows` (a volumetric field, pass 1) or :func:`shade_textured_rows` (kd/ks/normal
   textures, pass 2) (frame-sized): the material at every pixel, ``prepare_shading_normal``,
   ``EnvironmentLight.shade`` and the composite over the background, ``lerp(background, shaded, coverage)``:
   an uncovered pixel's weight is exactly 0, so its values and the gradients through it are exactly those of
   the background (``lerp(a, b, 0) == a``, gradient ``0`` to ``b``);
3. :func:`resolve_dense_render` (mesh-sized, eager): ``antialias`` of the composite and the ``spp`` box filter.

:func:`render_dense` runs the three in a row and returns ``render_mesh``'s ``shaded`` and ``alpha`` (and ``kd_grad``
with jitter: for a field its noise is drawn per pixel rather than per covered pixel, so a jittered run draws a
different random stream; for textures ``render_mesh`` draws image-sized noise too) to float rounding —
``tests/test_renderers_mesh_pbr_dense.py`` holds the two to each other, forward and backward. The normals, tangent
frames, background and albedo-smoothness term are ``mesh_pbr``'s own helpers, shared. It costs work on the uncovered
pixels, so it pays where a step is bound by launches rather than by the device (small frames on a GPU); the
covered-pixel path stays the default everywhere else. Not covered here (``render_mesh`` only): cut-out alpha in kd,
vertex colours, constant or absent materials.

Source: as ``render_mesh`` (Munkberg et al., CVPR 2022, Sec. 4, deferred shading); the dense G-buffer is how
nvdiffrec's own ``render.py`` shades (every pixel, masked afterwards).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F

from meshlift.errors import RenderError
from meshlift.renderers.mesh_pbr import (MaterialFn, _background_image, _downsample, _fallback_tangent, _int32,
                                         _kd_smoothness, _mesh_normals, _tangents, _validate,
                                         transform_points_to_clip)
from meshlift.structures.mesh import DEFAULT_KS, Material, Mesh

__all__ = ["PixelRows", "RasterState", "gbuffer_rows", "render_dense", "resolve_dense_render", "shade_field_rows",
           "shade_textured_rows"]


@dataclass
class PixelRows:
    """The G-buffer of a render as rows over every pixel of the ``[B, Hs, Ws]`` frame (row-major).

    Attributes:
        pos: ``[P, 3]`` float32 world positions (0 where uncovered).
        smooth_nrm: ``[P, 3]`` interpolated vertex normals, not normalised (+z where uncovered).
        geom_nrm: ``[P, 3]`` unit face normals of the covering triangle (+z where uncovered).
        view_pos: ``[P, 3]`` the pixel's camera centre, world units.
        coverage: ``[P, 1]`` 1.0 where a triangle covers the pixel, else 0.0 (no gradient).
        background: ``[P, 3]`` linear radiance behind the object.
        uv: ``[P, 2]`` texture coordinates (textured renders; 0 where uncovered), else None.
        uv_da: ``[P, 4]`` their screen derivatives ``(du/dX, du/dY, dv/dX, dv/dY)`` (0 where uncovered), or None.
        tangent: ``[P, 4]`` interpolated tangents, xyz + handedness (with a normal map; ``(1, 0, 0, 1)`` where
            uncovered), or None.
    """

    pos: torch.Tensor
    smooth_nrm: torch.Tensor
    geom_nrm: torch.Tensor
    view_pos: torch.Tensor
    coverage: torch.Tensor
    background: torch.Tensor
    uv: Optional[torch.Tensor] = None
    uv_da: Optional[torch.Tensor] = None
    tangent: Optional[torch.Tensor] = None

    def tensors(self) -> tuple[torch.Tensor, ...]:
        """The tensors in field order, the absent ones left out (the argument order of a graphed
        :func:`shade_field_rows` / :func:`shade_textured_rows`; :meth:`from_tensors` is the inverse)."""
        return tuple(t for t in (self.pos, self.smooth_nrm, self.geom_nrm, self.view_pos, self.coverage,
                                 self.background, self.uv, self.uv_da, self.tangent) if t is not None)

    @classmethod
    def from_tensors(cls, tensors, textured: bool, tangent: bool) -> "PixelRows":
        """Rows from :meth:`tensors` of rows with (``textured``) or without UVs, with or without tangents.

        Raises:
            RenderError: the number of tensors does not fit ``textured`` / ``tangent``.
        """
        want = 6 + (2 if textured else 0) + (1 if tangent else 0)
        if len(tensors) != want:
            raise RenderError(f"PixelRows.from_tensors: expected {want} tensors (textured={textured}, "
                              f"tangent={tangent}), got {len(tensors)}")
        base = list(tensors[:6])
        extra = list(tensors[6:])
        uv = extra.pop(0) if textured else None
        uv_da = extra.pop(0) if textured else None
        tng = extra.pop(0) if tangent else None
        return cls(*base, uv=uv, uv_da=uv_da, tangent=tng)


@dataclass
class RasterState:
    """What :func:`resolve_dense_render` needs of the rasterization: ``rast [B, Hs, Ws, 4]``, ``pos_clip
    [B, V, 4]``, ``tri [T, 3]`` int32 and ``spp``."""

    rast: torch.Tensor
    pos_clip: torch.Tensor
    tri: torch.Tensor
    spp: int


#: The stand-in values of uncovered pixels, one small tensor per (values, device, dtype): made once, so a step
#: copies nothing from the host (a host-to-device copy of a fresh CPU tensor waits for the GPU to catch up).
_STAND_INS: dict = {}


def _stand_in(fill: tuple, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    key = (fill, str(device), dtype)
    t = _STAND_INS.get(key)
    if t is None:
        t = _STAND_INS[key] = torch.tensor(fill, dtype=dtype, device=device)
    return t


def gbuffer_rows(mesh: Mesh, world_to_clip: torch.Tensor, camera_pos: torch.Tensor, resolution,
                 *, background: Optional[torch.Tensor] = None, spp: int = 1, max_fragments: Optional[int] = None,
                 material: Optional[Material] = None) -> tuple[PixelRows, RasterState]:
    """Rasterize ``mesh`` and return the dense G-buffer rows of every pixel and the raster state.

    Args: as :func:`~meshlift.renderers.mesh_pbr.render_mesh` (``world_to_clip [B, 4, 4]``, ``camera_pos
    [B, 3]``, ``resolution (H, W)``, ``background [B, H, W, 3]`` linear or None for black). The mesh's own
    normals (``v_nrm`` / ``t_nrm_idx``) are used when present, else area-weighted vertex normals. With a
    textured ``material`` (a :class:`Material`) the rows also hold UVs and their screen derivatives (the
    mesh needs ``v_tex`` / ``t_tex_idx``) and, when it has a normal map, the glTF tangent frames
    (``mesh_ops.tangent_frames``, conventions §11); a field or None needs neither.

    Returns:
        ``(rows, raster)``: :class:`PixelRows` with ``P = B · spp·H · spp·W``, and :class:`RasterState`.

    Raises:
        RenderError: bad shapes, an empty mesh, vertex colours (``render_mesh`` applies them; this render does
        not), or a textured material on a mesh without UVs.
    """
    from meshlift import render as R

    _validate(mesh, world_to_clip, camera_pos, resolution, spp)
    if mesh.v_color is not None:
        raise RenderError("gbuffer_rows: the mesh has vertex colours (v_color), which the dense render does not "
                          "apply; render it with meshlift.renderers.mesh_pbr.render_mesh")
    textured = isinstance(material, Material)
    if textured and (mesh.v_tex is None or mesh.t_tex_idx is None):
        raise RenderError("gbuffer_rows: the material has textures but the mesh has no UVs (v_tex / t_tex_idx); "
                          "unwrap it first (meshlift.mesh.uv.unwrap)")
    spp = int(spp)
    H, W = int(resolution[0]), int(resolution[1])
    Hs, Ws = H * spp, W * spp
    B = world_to_clip.shape[0]
    device, dtype = mesh.v_pos.device, mesh.v_pos.dtype
    v_pos = mesh.v_pos
    tri = _int32(mesh.t_pos_idx)
    pos_clip = transform_points_to_clip(v_pos, world_to_clip.to(device)).contiguous()
    kwargs = {} if max_fragments is None else {"max_fragments": int(max_fragments)}
    rast, rast_db = R.rasterize(pos_clip, tri, (Hs, Ws), **kwargs)

    face_n, v_nrm, t_nrm_idx = _mesh_normals(mesh, tri)
    if t_nrm_idx is not mesh.t_pos_idx:  # normals indexed by their own faces: a second interpolate
        pos_img, _ = R.interpolate(v_pos, rast, tri)
        nrm_img, _ = R.interpolate(v_nrm, rast, _int32(t_nrm_idx))
    else:  # one interpolate of position and normal together
        both, _ = R.interpolate(torch.cat([v_pos, v_nrm], dim=-1).contiguous(), rast, tri)
        pos_img, nrm_img = both[..., :3], both[..., 3:]

    P = B * Hs * Ws
    covered = (rast[..., 3] > 0).reshape(P, 1)

    def rows_of(img: torch.Tensor, fill: tuple) -> torch.Tensor:  # uncovered pixels get the finite stand-in
        c = img.shape[-1]
        return torch.where(covered, img.reshape(P, c), _stand_in(fill, device, dtype).expand(P, c))

    up = (0.0, 0.0, 1.0)
    tri_id = (rast[..., 3].reshape(P).long() - 1).clamp(min=0)
    pos = rows_of(pos_img, (0.0,))
    smooth = rows_of(nrm_img, up)
    geom = rows_of(face_n.index_select(0, tri_id), up)
    view = camera_pos.to(device=device, dtype=dtype)[:, None, :].expand(B, Hs * Ws, 3).reshape(P, 3)
    bg = _background_image(background, (B, H, W), spp, device, dtype, "gbuffer_rows").reshape(P, 3)
    uv = uv_da = tangent = None
    if textured:
        uv_img, uv_da_img = R.interpolate(mesh.v_tex.to(dtype), rast, _int32(mesh.t_tex_idx), rast_db=rast_db,
                                          diff_attrs="all")
        uv, uv_da = rows_of(uv_img, (0.0,)).contiguous(), rows_of(uv_da_img, (0.0,)).contiguous()
        if material.normal is not None:
            v_tng, t_tng_idx = _tangents(mesh, v_nrm, t_nrm_idx)
            tangent = rows_of(R.interpolate(v_tng, rast, _int32(t_tng_idx))[0], (1.0, 0.0, 0.0, 1.0)).contiguous()
    rows = PixelRows(pos.contiguous(), smooth.contiguous(), geom.contiguous(), view.contiguous(),
                     covered.to(dtype), bg.contiguous(), uv, uv_da, tangent)
    return rows, RasterState(rast, pos_clip, tri, spp)


def _composite(rows: PixelRows, light, kd, ks, perturbed, tangent) -> torch.Tensor:
    """Shading normal, split-sum shading and the composite over the background: ``accum [P, 4]``."""
    from meshlift.shading.normals import prepare_shading_normal

    shading_n = prepare_shading_normal(rows.pos, rows.view_pos, perturbed, rows.smooth_nrm, tangent, rows.geom_nrm,
                                       two_sided_shading=True, opengl=True)
    shaded = light.shade(rows.pos, shading_n, kd, ks, rows.view_pos, specular=True)
    zero = torch.zeros_like(rows.coverage)
    return torch.lerp(torch.cat([rows.background, zero], dim=-1),
                      torch.cat([shaded, torch.ones_like(zero)], dim=-1), rows.coverage)


def shade_field_rows(rows: PixelRows, light, material: MaterialFn,
                     field_jitter: float = 0.0) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Material field, shading normal, split-sum shading and composite at every pixel (fixed shapes).

    Args:
        rows: the G-buffer of :func:`gbuffer_rows`.
        light: an ``EnvironmentLight`` with its mips built.
        material: the field ``fn(x [P, 3]) -> dict(kd, ks, normal optional)`` (as ``render_mesh``).
        field_jitter: > 0 also evaluates the field at positions jittered by that standard deviation and
            returns nvdiffrec's albedo-smoothness term.

    Returns:
        ``(accum [P, 4], kd_grad [P, 1] or None)``: linear radiance + coverage composited over the background
        (before antialiasing); ``kd_grad`` is 0 where uncovered.
    """
    out = material(rows.pos)
    kd = out["kd"][..., :3].to(rows.pos.dtype)
    ks = out["ks"][..., :3].to(rows.pos.dtype)
    perturbed, tangent = None, None
    if out.get("normal") is not None:
        perturbed = out["normal"].to(rows.pos.dtype)
        tangent = _fallback_tangent(F.normalize(rows.smooth_nrm, dim=-1, eps=1e-8))
    accum = _composite(rows, light, kd, ks, perturbed, tangent)
    kd_grad = None
    if field_jitter > 0:
        out_j = material(rows.pos + torch.randn_like(rows.pos) * field_jitter)
        kd_grad = _kd_smoothness(out_j["kd"], out["kd"]) * rows.coverage
    return accum, kd_grad


def shade_textured_rows(rows: PixelRows, light, material: Material,
                        uv_jitter: float = 0.0) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Texture lookups (trilinear mips, wrap), normal map, split-sum shading and composite at every pixel.

    Args:
        rows: the G-buffer of :func:`gbuffer_rows` with this ``material`` (UVs; tangents with a normal map).
        light: an ``EnvironmentLight`` with its mips built.
        material: a :class:`Material` with ``kd`` (3 channels), optional ``ks`` (default roughness 0.5,
            metallic 0) and ``normal`` textures.
        uv_jitter: > 0 also samples ``kd`` at UVs jittered by that standard deviation and returns the
            albedo-smoothness term (as ``render_mesh``).

    Returns:
        ``(accum [P, 4], kd_grad [P, 1] or None)`` as :func:`shade_field_rows`.

    Raises:
        RenderError: rows without UVs, a normal map without tangents, or a kd texture with alpha (the
        covered-pixel ``render_mesh`` handles cut-outs).
    """
    from meshlift.renderers.mesh_pbr import _sample_material

    if rows.uv is None or rows.uv_da is None:
        raise RenderError("shade_textured_rows: the rows have no UVs; build them with gbuffer_rows(..., material=)")
    if material.normal is not None and rows.tangent is None:
        raise RenderError("shade_textured_rows: the material has a normal map but the rows have no tangents")
    if material.kd is None or material.kd.shape[-1] != 3:
        raise RenderError("shade_textured_rows: needs a 3-channel kd texture (cut-outs take render_mesh)")
    dtype = rows.pos.dtype
    uv_j = rows.uv + torch.randn_like(rows.uv) * uv_jitter if uv_jitter > 0 else None
    looked = _sample_material(material, rows.uv, rows.uv_da, uv_j)
    kd = looked["kd"][..., :3]
    P = rows.pos.shape[0]
    ks = looked["ks"][..., :3] if material.ks is not None else \
        _stand_in(tuple(DEFAULT_KS), rows.pos.device, dtype).expand(P, 3)  # no host copy (CUDA-graph safe)
    perturbed = looked["normal"][..., :3] if material.normal is not None else None
    accum = _composite(rows, light, kd, ks, perturbed, rows.tangent)
    kd_grad = None
    if uv_jitter > 0:
        kd_grad = _kd_smoothness(looked["kd_j"], kd) * rows.coverage
    return accum, kd_grad


def resolve_dense_render(accum: torch.Tensor, raster: RasterState,
                         kd_grad: Optional[torch.Tensor] = None) -> dict:
    """Antialias the composite ``accum [P, 4]`` and box-filter it to the output resolution.

    Returns:
        dict with ``shaded [B, H, W, 3]`` and ``alpha [B, H, W, 1]`` (as ``render_mesh``), and ``kd_grad
        [B, H, W, 1]`` when given.
    """
    from meshlift import render as R

    B, Hs, Ws = raster.rast.shape[:3]
    img = R.antialias(accum.reshape(B, Hs, Ws, 4).contiguous(), raster.rast, raster.pos_clip, raster.tri)
    out = {"shaded": _downsample(img[..., :3], raster.spp), "alpha": _downsample(img[..., 3:4], raster.spp)}
    if kd_grad is not None:
        out["kd_grad"] = _downsample(kd_grad.reshape(B, Hs, Ws, 1), raster.spp)
    return out


def render_dense(mesh: Mesh, world_to_clip: torch.Tensor, camera_pos: torch.Tensor, resolution, *,
                 light, material, background: Optional[torch.Tensor] = None, spp: int = 1,
                 max_fragments: Optional[int] = None, field_jitter: float = 0.0) -> dict:
    """:func:`gbuffer_rows` → :func:`shade_field_rows` or :func:`shade_textured_rows` →
    :func:`resolve_dense_render` (eager).

    Args as :func:`~meshlift.renderers.mesh_pbr.render_mesh` with a callable field or a textured
    :class:`Material` (``field_jitter``: the jitter of positions for a field, of UVs for textures).

    Raises:
        RenderError: as :func:`gbuffer_rows` and :func:`shade_textured_rows`, or a material that is neither
        a callable field nor a :class:`Material` (``render_mesh`` renders those: None, constants, cut-outs).

    Returns:
        dict with ``shaded [B, H, W, 3]``, ``alpha [B, H, W, 1]`` and, with ``field_jitter > 0``, ``kd_grad``.
    """
    if not (callable(material) or isinstance(material, Material)):
        raise RenderError("render_dense: material must be a callable field or a textured Material, "
                          f"got {type(material).__name__}")
    rows, raster = gbuffer_rows(mesh, world_to_clip, camera_pos, resolution, background=background, spp=spp,
                                max_fragments=max_fragments, material=material)
    if isinstance(material, Material):
        accum, kd_grad = shade_textured_rows(rows, light, material, field_jitter)
    else:
        accum, kd_grad = shade_field_rows(rows, light, material, field_jitter)
    return resolve_dense_render(accum, raster, kd_grad)
