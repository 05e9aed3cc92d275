"""Mesh renderers: deferred PBR under an environment light (nvdiffrec's ``render.py`` pipeline) and unlit.

:func:`render_mesh` (PBR) is what both passes of the nvdiffrec method, the synthetic datasets and
``meshlift render --mode pbr`` use; :func:`render_unlit` shows albedo / vertex colours as stored (or a grey
headlight shading) for ``meshlift render --mode unlit``; :func:`render_views` renders a camera batch one
view at a time in either mode; :func:`turntable_cameras` frames a mesh for a turntable.

One :func:`render_mesh` call renders a batch of views of one mesh:

1. transform the vertices to clip space and rasterize (``meshlift.render.rasterize``, conventions §3);
2. interpolate world position, smooth normal, UV (with screen-space derivatives for mip selection) and
   tangent; take the geometric (face) normal of the covering triangle;
3. look up the material: textures of a :class:`~meshlift.structures.Material` sampled with
   ``meshlift.render.texture`` (trilinear mip-mapping, ``wrap``), or a volumetric field evaluated at the
   interpolated world positions of the covered pixels only, or a constant grey default;
4. build the shading normal (tangent-space perturbation, two-sided bending: ``prepare_shading_normal``);
5. shade with the split-sum environment light (``EnvironmentLight.shade``), linear HDR radiance;
6. composite over the background and antialias the silhouettes (``meshlift.render.antialias``) so that
   gradients reach the outline's vertices; the alpha channel is antialiased together with the colour,
   as nvdiffrec does, so a mask loss moves silhouettes too;
7. with ``spp > 1`` everything is rendered at ``spp`` times the resolution and box-filtered down.

Source: Munkberg et al., "Extracting Triangular 3D Models, Materials, and Lighting From Images",
CVPR 2022, section 4 and the reference implementation's ``render/render.py`` (semantics only).
"""

from __future__ import annotations

from typing import Callable, Optional, Union

import torch
import torch.nn.functional as F

from meshlift.errors import RenderError
from meshlift.structures.index_check import derived_cached
from meshlift.structures.mesh import DEFAULT_KD, DEFAULT_KS, Material, Mesh

#: Material given as a volumetric field: ``fn(x [N, 3]) -> dict(kd [N, 3], ks [N, 3], normal [N, 3] | None)``.
MaterialFn = Callable[[torch.Tensor], dict]


def transform_points_to_clip(v_pos: torch.Tensor, world_to_clip: torch.Tensor) -> torch.Tensor:
    """Homogeneous clip-space positions of ``v_pos [V, 3]`` for every view: ``[B, V, 4]`` (conventions §3)."""
    ones = torch.ones_like(v_pos[:, :1])
    homog = torch.cat([v_pos, ones], dim=-1)  # [V, 4]
    return torch.einsum("vj,bij->bvi", homog, world_to_clip.to(v_pos.dtype))


def _validate(mesh: Mesh, world_to_clip: torch.Tensor, camera_pos: torch.Tensor, resolution, spp: int) -> None:
    if world_to_clip.ndim != 3 or world_to_clip.shape[-2:] != (4, 4):
        raise RenderError(f"render_mesh: world_to_clip must be [B, 4, 4], got {tuple(world_to_clip.shape)}")
    if camera_pos.shape != (world_to_clip.shape[0], 3):
        raise RenderError(
            f"render_mesh: camera_pos must be [B, 3] with B = {world_to_clip.shape[0]}, got {tuple(camera_pos.shape)}"
        )
    if len(resolution) != 2 or min(int(resolution[0]), int(resolution[1])) < 1:
        raise RenderError(f"render_mesh: resolution must be (H, W) with positive sizes, got {resolution!r}")
    if int(spp) < 1:
        raise RenderError(f"render_mesh: spp must be >= 1, got {spp}")
    if mesh.num_faces == 0:
        raise RenderError("render_mesh: the mesh has no faces; nothing to render (check the isosurface / file)")


def _downsample(x: torch.Tensor, spp: int) -> torch.Tensor:
    """Box-filter ``[B, H*spp, W*spp, C]`` down to ``[B, H, W, C]``."""
    if spp == 1:
        return x
    y = F.avg_pool2d(x.permute(0, 3, 1, 2), kernel_size=spp, stride=spp)
    return y.permute(0, 2, 3, 1).contiguous()


def _upsample_nearest(x: torch.Tensor, spp: int) -> torch.Tensor:
    if spp == 1:
        return x
    return x.repeat_interleave(spp, dim=1).repeat_interleave(spp, dim=2)


def _sample_material(material: Material, uv: torch.Tensor, uv_da: Optional[torch.Tensor],
                     uv_j: Optional[torch.Tensor]) -> dict:
    """Sample the textures of ``material`` at the covered pixels' ``uv [N, 2]`` (trilinear mips, wrap mode).

    Textures of one size are concatenated along channels and sampled by one lookup
    (``render.texture_mip_stack`` of the list of maps: the concatenation and the mip chain are one autograd
    node; + ``render.texture_rows``: one kernel on the Triton path; the values are those of separate
    lookups); ``uv_j [N, 2]`` (jittered UVs, or None) samples the kd columns
    of kd's stack again. ``uv_da [N, 4]`` or None (bilinear, no mips). Returns ``{"kd", "ks", "normal",
    "kd_j"}`` ``[N, C]`` tensors (absent maps are missing).
    """
    from meshlift import render as R

    dtype = uv.dtype
    maps = [(k, getattr(material, k)) for k in ("kd", "ks", "normal")]
    out = {}
    if uv_da is None:  # no screen derivatives: bilinear lookups of level 0
        maps = [(k, (t if t.ndim == 4 else t[None]).to(dtype)) for k, t in maps if t is not None]
        for k, t in maps + ([("kd_j", maps[0][1])] if uv_j is not None else []):
            rows = uv_j if k == "kd_j" else uv
            out[k] = R.texture(t.contiguous(), rows[None, None], filter_mode="linear", boundary_mode="wrap")[0, 0]
        return out
    groups: dict = {}
    for k, t in maps:
        if t is not None:  # [H, W, C] or [1, H, W, C]: texture_mip_stack takes both (no view node here)
            groups.setdefault(tuple(t.shape[-3:-1]), []).append((k, t))
    for members in groups.values():
        ts = [t.to(dtype) for _, t in members]  # a no-op (no node) in the usual float32 case
        stack = R.texture_mip_stack(ts)
        vals = R.texture_rows(stack, uv, uv_da, boundary_mode="wrap")
        start = 0
        for k, t in members:
            out[k] = vals[:, start: start + t.shape[-1]]
            start += t.shape[-1]
        if members[0][0] == "kd" and uv_j is not None:
            out["kd_j"] = R.texture_rows(stack, uv_j, uv_da, boundary_mode="wrap", channels=3)
    return out


def _int32(idx: torch.Tensor) -> torch.Tensor:
    """``idx`` as a contiguous int32 tensor, the same object for the same (unmodified) ``idx``.

    The render ops check a face list's index range once per tensor object (``render._checks.check_tri``):
    a fresh int32 copy per call would cost a host sync per call; a fixed mesh's copy is made once.
    """
    if idx.dtype == torch.int32 and idx.is_contiguous():
        return idx
    return derived_cached(idx, "int32", lambda t: t.to(torch.int32).contiguous())


def _fused_normals(v_pos: torch.Tensor) -> bool:
    """Whether face and vertex normals take the Triton kernels: ``[V, 3]`` float32 and the shading backend
    (:func:`meshlift.kernels.choose_backend`, auto = Triton on CUDA) says so; their twins are
    ``geometry.mesh_ops.face_normals`` / ``vertex_normals``."""
    if v_pos.ndim != 2 or v_pos.dtype != torch.float32:
        return False
    from meshlift.kernels import choose_backend

    return choose_backend("shading", None, v_pos.device, v_pos.dtype) == "triton"


def _fused_tangents(v_pos: torch.Tensor, v_tex: torch.Tensor, v_nrm: torch.Tensor) -> bool:
    """Whether the tangent frames take the Triton kernels: as :func:`_fused_normals`, with float32 ``[Vn, 3]``
    normals and UVs that need no gradient (the kernels give none); the twin is ``mesh_ops.tangent_frames``."""
    return (v_nrm.ndim == 2 and v_nrm.dtype == torch.float32 and v_tex.dtype == torch.float32
            and not v_tex.requires_grad and _fused_normals(v_pos))


def _fallback_tangent(normal: torch.Tensor) -> torch.Tensor:
    """A tangent orthogonal to ``normal [..., 3]`` built from a fixed world axis (used without UVs)."""
    axis = torch.zeros_like(normal)
    axis[..., 0] = 1.0
    alt = torch.zeros_like(normal)
    alt[..., 1] = 1.0
    use_alt = normal[..., 0:1].abs() > 0.9
    a = torch.where(use_alt, alt, axis)
    t = a - (a * normal).sum(-1, keepdim=True) * normal
    return F.normalize(t, dim=-1, eps=1e-8)


def _mesh_normals(mesh: Mesh, tri: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(face_n [T, 3] unit, v_nrm [Vn, 3], t_nrm_idx [T, 3])`` of ``mesh``: its own smooth normals when it has
    them, else area-weighted vertex normals (face + vertex normals in two Triton kernels where
    :func:`_fused_normals` says so; ``tri`` is ``t_pos_idx`` as int32, its range checked by ``rasterize``)."""
    from meshlift.geometry import mesh_ops

    v_pos = mesh.v_pos
    own = mesh.v_nrm is not None and mesh.t_nrm_idx is not None
    if not own and _fused_normals(v_pos):
        from meshlift.kernels.normals_triton import mesh_normals_triton

        face_n, v_nrm = mesh_normals_triton(v_pos, tri)
    else:
        face_n = mesh_ops.face_normals(v_pos, mesh.t_pos_idx)
        v_nrm = None if own else mesh_ops.vertex_normals(v_pos, mesh.t_pos_idx)
    if own:
        return face_n, mesh.v_nrm.to(v_pos.dtype), mesh.t_nrm_idx
    return face_n, v_nrm, mesh.t_pos_idx


def _tangents(mesh: Mesh, v_nrm: torch.Tensor, t_nrm_idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(v_tng [Vt, 4], t_tng_idx [T, 3])``: glTF tangent frames with handedness of a mesh with UVs
    (``mesh_ops.tangent_frames``, or its Triton kernels where :func:`_fused_tangents` says so)."""
    from meshlift.geometry import mesh_ops

    v_tex = mesh.v_tex.to(mesh.v_pos.dtype)
    if _fused_tangents(mesh.v_pos, v_tex, v_nrm):  # kernels/tangents_triton (pass 2: vertices move, UVs fixed)
        from meshlift.kernels.tangents_triton import tangent_frames_triton as tangent_frames
    else:
        tangent_frames = mesh_ops.tangent_frames
    return tangent_frames(mesh.v_pos, mesh.t_pos_idx, v_tex, mesh.t_tex_idx, v_nrm, t_nrm_idx)


def _kd_smoothness(kd_jittered: torch.Tensor, kd: torch.Tensor) -> torch.Tensor:
    """nvdiffrec's albedo-smoothness term per pixel: mean absolute kd change under the jitter, ``[..., 1]``."""
    return (kd_jittered[..., :3] - kd[..., :3]).abs().sum(-1, keepdim=True) / 3.0


def _background_image(background: Optional[torch.Tensor], shape: tuple, spp: int, device, dtype,
                      who: str) -> torch.Tensor:
    """``background [B, H, W, 3]`` (or None: black) at ``spp`` samples per axis; raises RenderError naming
    ``who`` for another shape (``shape`` = ``(B, H, W)``)."""
    B, H, W = shape
    if background is None:
        return torch.zeros(B, H * spp, W * spp, 3, device=device, dtype=dtype)
    if background.shape != (B, H, W, 3):
        raise RenderError(f"{who}: background must be [B, H, W, 3] = {(B, H, W, 3)}, got {tuple(background.shape)}")
    return _upsample_nearest(background.to(device=device, dtype=dtype), spp)


def render_mesh(
    mesh: Mesh,
    world_to_clip: torch.Tensor,
    camera_pos: torch.Tensor,
    resolution: tuple[int, int],
    *,
    light,
    material: Union[Material, MaterialFn, None] = None,
    background: Optional[torch.Tensor] = None,
    spp: int = 1,
    max_fragments: Optional[int] = None,
    field_jitter: float = 0.0,
) -> dict:
    """Render ``B`` views of ``mesh`` with PBR materials under an environment light (deferred, split-sum).

    Args:
        mesh: triangle mesh in world units (``v_pos [V, 3]``, ``t_pos_idx [T, 3]``); its ``v_nrm`` /
            ``t_nrm_idx`` are used as smooth normals when present, otherwise area-weighted vertex normals are
            computed; ``v_tex`` / ``t_tex_idx`` are needed when ``material`` is a textured Material.
        world_to_clip: ``[B, 4, 4]`` float32, world → clip (``Cameras.world_to_clip``), conventions §3.
        camera_pos: ``[B, 3]`` camera centres in world units (view vectors for specular shading).
        resolution: ``(H, W)`` of the output images in pixels.
        light: an :class:`meshlift.shading.light.EnvironmentLight` (its ``build_mips()`` must have been called
            after the last change of its parameters).
        material: a :class:`Material` (textures ``kd``/``ks``/``normal`` sampled at the UVs), a callable
            ``fn(x [N, 3]) -> dict(kd [N, 3], ks [N, 3], normal [N, 3] optional)`` evaluated at the world
            positions of the covered pixels (a volumetric material field; its normal, when given, is a
            tangent-space perturbation in a frame built from the smooth normal and a fixed world axis), or None
            (when the mesh carries a Material it is used, else ``structures.mesh.DEFAULT_KD`` / ``DEFAULT_KS``:
            grey albedo, roughness 0.5, metallic 0). Vertex colours (``v_color``, linear) multiply the albedo
            of a Material or replace the default grey, as glTF's ``COLOR_0`` does. Normal maps use the
            glTF/MikkTSpace tangent frame with handedness (``mesh_ops.tangent_frames``, conventions §11).
        background: ``[B, H, W, 3]`` linear radiance behind the object, or None (black).
        spp: supersampling factor per axis: renders at ``(spp·H, spp·W)`` and box-filters down.
        max_fragments: fragment budget passed to the rasterizer (bounds its memory), None = its default.
        field_jitter: when > 0 and ``material`` is a field, the field is also evaluated at positions jittered by
            a Gaussian of this standard deviation (world units) and ``kd_grad`` is returned (nvdiffrec's albedo
            smoothness regulariser); with a textured Material the UVs are jittered by the same amount instead.

    Returns:
        dict with ``shaded [B, H, W, 3]`` linear HDR radiance composited over the background and antialiased,
        ``alpha [B, H, W, 1]`` coverage in [0, 1] (antialiased), ``kd``, ``ks``, ``normal`` (shading normal,
        world space) ``[B, H, W, 3]`` (0 where empty), ``depth [B, H, W, 1]`` camera-space z (0 where empty,
        conventions §4), and ``kd_grad [B, H, W, 1]`` when ``field_jitter > 0`` (0 elsewhere).

    Raises:
        RenderError: bad shapes, empty mesh, or a textured material on a mesh without UVs.
    """
    from meshlift import render as R
    from meshlift.shading.normals import prepare_shading_normal

    _validate(mesh, world_to_clip, camera_pos, resolution, spp)
    if material is None:
        material = mesh.material
    spp = int(spp)
    H, W = int(resolution[0]), int(resolution[1])
    Hs, Ws = H * spp, W * spp
    B = world_to_clip.shape[0]
    device = mesh.v_pos.device
    dtype = mesh.v_pos.dtype

    v_pos = mesh.v_pos
    tri = _int32(mesh.t_pos_idx)
    pos_clip = transform_points_to_clip(v_pos, world_to_clip.to(device)).contiguous()

    raster_kwargs = {}
    if max_fragments is not None:
        raster_kwargs["max_fragments"] = int(max_fragments)
    rast, rast_db = R.rasterize(pos_clip, tri, (Hs, Ws), **raster_kwargs)
    mask = rast[..., 3] > 0  # [B, Hs, Ws]
    maskf = mask[..., None].to(dtype)

    # Per-pixel work (material, normals, shading) runs on the covered pixels only, gathered into [N, C]
    # rows (mask order), and is scattered back into [B, Hs, Ws, C] images afterwards. The flat indices of the
    # covered pixels are found once: the one host sync of this function (N is data-dependent); every gather
    # and scatter below reuses them (boolean-mask indexing would sync once per use). Same values, same order.
    pix = torch.nonzero(mask.reshape(-1)).squeeze(1)  # [N] int64, row-major = boolean-mask order

    def gather(img: torch.Tensor) -> torch.Tensor:
        return img.reshape(-1, img.shape[-1]).index_select(0, pix)

    def full(x: torch.Tensor, fill: float = 0.0) -> torch.Tensor:
        img = torch.full((B * Hs * Ws, x.shape[-1]), fill, device=device, dtype=x.dtype)
        return img.index_put((pix,), x).view(B, Hs, Ws, x.shape[-1])

    # ---- G-buffer: position, smooth / geometric normal, depth ---------------------------------------------
    gb_pos_img, _ = R.interpolate(v_pos, rast, tri)  # [B, Hs, Ws, 3]
    gb_pos = gather(gb_pos_img)  # [N, 3]
    depth, _ = R.interpolate(pos_clip[..., 3:4].contiguous(), rast, tri)
    depth = depth * maskf

    face_n, v_nrm, t_nrm_idx = _mesh_normals(mesh, tri)
    tri_id = gather(rast)[:, 3].long() - 1  # [N]
    gb_geom_n = face_n[tri_id]  # [N, 3]
    nrm_idx = _int32(t_nrm_idx)
    gb_n = gather(R.interpolate(v_nrm, rast, nrm_idx)[0])  # [N, 3]
    view_pos = camera_pos.to(device=device, dtype=dtype).index_select(0, pix // (Hs * Ws))  # [N, 3]
    N = gb_pos.shape[0]

    # ---- material ----------------------------------------------------------------------------------------
    kd_grad = None
    perturbed = None
    gb_tng = None
    alpha_tex = None
    const = isinstance(material, Material) and material.normal is None and all(
        t is None or tuple(t.shape[:2]) == (1, 1) for t in (material.kd, material.ks))
    if const and (mesh.v_tex is None or mesh.t_tex_idx is None):  # a constant material needs no UVs
        kd_c = material.kd.reshape(-1)[: material.kd.shape[-1]].to(device=device, dtype=dtype)
        if kd_c.shape[0] == 4:
            alpha_tex = kd_c[3:4].expand(N, 1)
        kd = kd_c[:3].expand(N, 3)
        ks_c = DEFAULT_KS if material.ks is None else material.ks.reshape(-1)[:3]
        ks = torch.as_tensor(ks_c, device=device, dtype=dtype).expand(N, 3)
    elif isinstance(material, Material):
        if mesh.v_tex is None or mesh.t_tex_idx is None:
            raise RenderError(
                "render_mesh: the material has textures but the mesh has no UVs (v_tex / t_tex_idx); "
                "unwrap it first (meshlift.mesh.uv.unwrap) or pass a material field"
            )
        tex_idx = _int32(mesh.t_tex_idx)
        uv_img, uv_da_img = R.interpolate(mesh.v_tex.to(dtype), rast, tex_idx, rast_db=rast_db, diff_attrs="all")
        # lookups at the covered pixels only (per-pixel ops: the same values as sampling the image and
        # gathering); the jitter noise is drawn image-sized, as before, so the random stream is unchanged
        uv = gather(uv_img)
        uv_da = None if uv_da_img is None else gather(uv_da_img)
        uv_j = uv + gather(torch.randn_like(uv_img)) * field_jitter if field_jitter > 0 else None
        looked = _sample_material(material, uv, uv_da, uv_j)
        kd_full = looked["kd"]
        if kd_full.shape[-1] == 4:
            alpha_tex = kd_full[..., 3:4]
        kd = kd_full[..., :3]
        if material.ks is not None:
            ks = looked["ks"][..., :3]
        else:
            ks = torch.tensor(DEFAULT_KS, device=device, dtype=dtype).expand(N, 3)
        if material.normal is not None:
            perturbed = looked["normal"][..., :3]
            v_tng, t_tng_idx = _tangents(mesh, v_nrm, t_nrm_idx)
            gb_tng = gather(R.interpolate(v_tng, rast, _int32(t_tng_idx))[0])  # xyz + w
        if field_jitter > 0:
            kd_grad = _kd_smoothness(looked["kd_j"], kd)
    elif callable(material):
        out = material(gb_pos)
        kd = out["kd"][..., :3].to(dtype)
        ks = out["ks"][..., :3].to(dtype)
        if out.get("normal") is not None:
            perturbed = out["normal"].to(dtype)
            gb_tng = _fallback_tangent(F.normalize(gb_n, dim=-1, eps=1e-8))
        if field_jitter > 0:
            out_j = material(gb_pos + torch.randn_like(gb_pos) * field_jitter)
            kd_grad = _kd_smoothness(out_j["kd"], out["kd"])
    elif material is None:
        kd = torch.tensor(DEFAULT_KD, device=device, dtype=dtype).expand(N, 3)
        ks = torch.tensor(DEFAULT_KS, device=device, dtype=dtype).expand(N, 3)
    else:
        raise RenderError(
            f"render_mesh: material must be a Material, a callable field or None, got {type(material).__name__}"
        )
    if mesh.v_color is not None and not callable(material):
        col = gather(R.interpolate(mesh.v_color[:, :3].to(dtype).contiguous(), rast, tri)[0])
        kd = col if material is None else kd * col

    # ---- shading -----------------------------------------------------------------------------------------
    # gb_tng is None only without a perturbation, where the tangent frame is not used
    shading_n = prepare_shading_normal(
        gb_pos, view_pos, perturbed, gb_n, gb_tng, gb_geom_n, two_sided_shading=True, opengl=True
    )
    shaded = light.shade(gb_pos, shading_n, kd, ks, view_pos, specular=True)  # [N, 3]

    # ---- composite and antialias --------------------------------------------------------------------------
    bg = _background_image(background, (B, H, W), spp, device, dtype, "render_mesh")
    if alpha_tex is not None:
        maskf = full(alpha_tex)
    accum = torch.cat([bg, torch.zeros_like(bg[..., :1])], dim=-1)
    layer = full(torch.cat([shaded, torch.ones_like(shaded[..., :1])], dim=-1))
    accum = torch.lerp(accum, layer, maskf)
    accum = R.antialias(accum.contiguous(), rast, pos_clip, tri)

    out = {
        "shaded": _downsample(accum[..., :3], spp),
        "alpha": _downsample(accum[..., 3:4], spp),
        "kd": _downsample(full(kd) * maskf, spp),
        "ks": _downsample(full(ks) * maskf, spp),
        "normal": _downsample(full(shading_n) * maskf, spp),
        "depth": _downsample(depth, spp),
    }
    if kd_grad is not None:
        out["kd_grad"] = _downsample(full(kd_grad) * maskf, spp)
    return out


def render_unlit(mesh: Mesh, world_to_clip: torch.Tensor, forward: torch.Tensor, resolution: tuple[int, int],
                 background: torch.Tensor, kd_mip=None, *, precise: bool = False) -> torch.Tensor:
    """Unlit render of one batch: ``[B, H, W, 3]`` sRGB-encoded in [0, 1], antialiased silhouettes.

    Colour: the albedo texture ``mesh.material.kd`` (trilinear mips; ``kd_mip`` from
    ``texture_construct_mip`` may be passed to reuse it) when the mesh has UVs, else vertex colours, else a
    grey headlight shading ``0.15 + 0.7 |n · forward|`` so the geometry reads. ``world_to_clip [B, 4, 4]``
    (conventions §3), ``forward [B, 3]`` viewing directions, ``background [3]`` sRGB colour. ``precise``: the
    raster in float64 (:func:`meshlift.render.rasterize`'s ``precise``: no pinholes between sub-pixel triangles).
    """
    from meshlift import render as R
    from meshlift.shading.color import linear_to_srgb

    H, W = resolution
    tri = mesh.t_pos_idx.to(torch.int32)
    pos = R.transform_pos(world_to_clip.float(), mesh.v_pos.float())
    rast, rast_db = R.rasterize(pos, tri, (H, W), precise=precise)
    cov = (rast[..., 3:4] > 0).float()
    mat = mesh.material
    if mat is not None and mesh.v_tex is not None:
        uv, uv_da = R.interpolate(mesh.v_tex.float(), rast, mesh.t_tex_idx.to(torch.int32), rast_db=rast_db,
                                  diff_attrs="all")
        if kd_mip is None:
            kd_mip = R.texture_construct_mip(mat.kd[None, ..., :3].float().contiguous())
        kd = R.texture(kd_mip[0], uv, uv_da, mip=kd_mip, filter_mode="linear-mipmap-linear")
        col = linear_to_srgb(kd.clamp(0, 1))
    elif mesh.v_color is not None:
        c, _ = R.interpolate(mesh.v_color[:, :3].float(), rast, tri)
        col = linear_to_srgb(c.clamp(0, 1))
    else:
        v = mesh.v_pos.float()
        fn = F.normalize(torch.cross(v[tri[:, 1].long()] - v[tri[:, 0].long()],
                                     v[tri[:, 2].long()] - v[tri[:, 0].long()], dim=-1), dim=-1)
        n = R.render_face_normals(fn, rast)
        facing = (n * forward[:, None, None, :]).sum(-1, keepdim=True).abs()
        col = (0.15 + 0.7 * facing).expand(*facing.shape[:3], 3)
    img = col * cov + background * (1.0 - cov)
    return R.antialias(img.contiguous(), rast, pos, tri).clamp(0, 1)


def render_views(mesh: Mesh, cams, light, background: float, mode: str, spp: int):
    """Render every camera of ``cams`` (a :class:`meshlift.cameras.Cameras`) one view at a time.

    ``mode`` is ``"pbr"`` (:func:`render_mesh` under ``light``, linear radiance encoded to sRGB) or
    ``"unlit"`` (:func:`render_unlit`); ``background`` is a grey level (1 white, 0 black). Yields
    ``[H, W, 3]`` sRGB images in [0, 1].
    """
    from meshlift.shading.color import linear_to_srgb

    H, W = cams.height, cams.width
    w2c_all = cams.world_to_clip()
    centers = cams.camera_centers()
    fwd = cams.forward_directions()
    bg_t = torch.tensor([background] * 3, dtype=torch.float32)
    kd_mip = None
    if mode != "pbr" and mesh.material is not None and mesh.v_tex is not None:
        from meshlift import render as R

        kd_mip = R.texture_construct_mip(mesh.material.kd[None, ..., :3].float().contiguous())
    for i in range(len(cams)):
        if mode == "pbr":
            out = render_mesh(mesh, w2c_all[i: i + 1].float(), centers[i: i + 1].float(), (H, W), light=light,
                              background=torch.full((1, H, W, 3), float(background)), spp=spp)
            yield linear_to_srgb(out["shaded"][0].clamp(0, 1))
        else:
            yield render_unlit(mesh, w2c_all[i: i + 1], fwd[i: i + 1].float(), (H, W), bg_t, kd_mip)[0]


def turntable_cameras(mesh: Mesh, n: int, size: int, up: str, elevation_deg: float):
    """``n`` square cameras (``size`` px, 40° field of view) orbiting ``mesh`` around the ``up`` axis
    (``"y"`` or ``"z"``) at ``elevation_deg``, framing its bounding sphere (the rig of
    :func:`meshlift.cameras.orbit_directions` + :func:`meshlift.cameras.look_at_cameras`)."""
    import math

    from meshlift.cameras import look_at_cameras, orbit_directions

    lo, hi = mesh.bbox()
    center = (lo + hi).double() / 2
    radius = float((hi - lo).double().norm()) / 2
    fov = math.radians(40.0)
    dist = radius / math.sin(fov / 2) * 1.05
    up_v = (0.0, 1.0, 0.0) if up == "y" else (0.0, 0.0, 1.0)
    eyes = center + dist * orbit_directions(n, math.radians(elevation_deg), up_v)
    return look_at_cameras(eyes, center, up_v, fov, size, near=max(dist - radius * 1.5, dist * 0.01),
                           far=dist + radius * 1.5)


#: Largest far/near ratio :func:`depth_range_around_mesh` gives (a camera inside the mesh's bounding sphere).
MAX_DEPTH_RATIO = 1e4


def depth_range_around_mesh(mesh: Mesh, cams):
    """``cams`` with per-camera ``near``/``far`` ``[N]`` enclosing ``mesh``'s bounding sphere (centre and
    radius of its bounding box, 5% margin): ``far = d + 1.05·R``, ``near = max(d − 1.05·R, far / 1e4)`` with
    ``d`` each camera's distance to the centre (world units).

    For renders from a dataset that gives no depth range: readers then estimate one from the camera layout,
    which must not clip the asset. Raises MeshError: the mesh has no vertex or a non-finite bounding box.
    """
    import dataclasses

    from meshlift.errors import MeshError

    if mesh.num_vertices == 0:
        raise MeshError("depth_range_around_mesh: the mesh has no vertices")
    lo, hi = mesh.bbox()
    lo, hi = lo.double().cpu(), hi.double().cpu()
    if not bool(torch.isfinite(lo).all() and torch.isfinite(hi).all()):
        raise MeshError("depth_range_around_mesh: the mesh's bounding box is not finite (NaN/Inf vertices)")
    center, radius = (lo + hi) / 2, max(float((hi - lo).norm()) / 2, 1e-9)
    d = (cams.camera_centers().double().cpu() - center).norm(dim=-1)
    far = d + 1.05 * radius
    near = torch.maximum(d - 1.05 * radius, far / MAX_DEPTH_RATIO)
    return dataclasses.replace(cams, near=near.float(), far=far.float())


__all__ = ["MAX_DEPTH_RATIO", "depth_range_around_mesh", "render_mesh", "render_unlit", "render_views",
           "transform_points_to_clip", "turntable_cameras"]
