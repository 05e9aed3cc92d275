"""Bake a volumetric field (neural material, analytic colour) or world-space normals into 2D textures over a
mesh's UV atlas.

nvdiffrec's pass 2 (Munkberg et al., "Extracting Triangular 3D Models, Materials, and Lighting From
Images", CVPR 2022, Sec. 3 and its ``render/mlptexture.py`` / ``xatlas`` step) initialises the 2D
textures by rasterising the mesh in UV space, interpolating world positions per texel and evaluating the
pass-1 neural field there. Empty texels are then filled so that bilinear / mip-mapped lookups near chart
borders do not pull in background: a few rings of neighbour-average dilation, then push-pull
(Gortler et al., "The Lumigraph", SIGGRAPH 1996, Sec. 3.4 "pull-push") for everything else.

Texel convention (docs/conventions.md §3 and §7): the UV triangle is drawn with clip position
``(2u − 1, 2v − 1, 0, 1)``, so texel (row r, column c) is the pixel whose centre is at NDC
``(2(c + 0.5)/R − 1, 2(r + 0.5)/R − 1)``, i.e. it samples ``uv = ((c + 0.5)/R, (r + 0.5)/R)`` — the
same centre ``meshlift.render.texture`` uses to look it up again.
"""

from __future__ import annotations

from typing import Callable, Dict, Literal, Tuple

import torch
import torch.nn.functional as F

from meshlift.errors import MeshError, RenderError
from meshlift.structures.mesh import Mesh

#: A field maps world positions ``x [N, 3]`` to named per-point values ``{name: [N, C]}``.
Field = Callable[[torch.Tensor], Dict[str, torch.Tensor]]

#: Largest number of (triangle, texel) candidate pairs the reference UV rasteriser holds at once.
_REFERENCE_FRAGMENT_BUDGET = 1 << 22

#: UV triangles with |signed area| below this (in texel² units) cover no texel centre reliably; skipped.
_DEGENERATE_TEXEL_AREA = 1e-12


def _check_uv_mesh(mesh: Mesh, fn: str) -> None:
    if mesh.v_tex is None or mesh.t_tex_idx is None:
        raise MeshError(f"{fn}: the mesh has no UVs (v_tex / t_tex_idx); unwrap it first with meshlift.mesh.uv.unwrap")
    if mesh.t_tex_idx.shape != mesh.t_pos_idx.shape:
        raise MeshError(
            f"{fn}: t_tex_idx {tuple(mesh.t_tex_idx.shape)} must have the shape of t_pos_idx "
            f"{tuple(mesh.t_pos_idx.shape)} (one UV triangle per face)"
        )
    if mesh.num_faces == 0:
        raise MeshError(f"{fn}: the mesh has no faces; nothing to bake")


def rasterize_uv_reference(
    v_tex: torch.Tensor, t_tex_idx: torch.Tensor, resolution: int
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Brute-force UV-space rasteriser (the simple twin of the ``meshlift.render.rasterize`` path).

    For every triangle, every texel centre inside its texel bounding box is tested with edge functions
    (inside = all three barycentric weights >= 0, either winding); a texel covered by several triangles
    takes the lowest triangle index, as ``meshlift.render.rasterize`` breaks depth ties (conventions §3).
    Candidates are processed in chunks of at most ``2**22`` (triangle, texel) pairs.

    Args:
        v_tex: ``[Vt, 2]`` float UVs (internal glTF origin, conventions §7).
        t_tex_idx: ``[T, 3]`` int indices into ``v_tex``.
        resolution: texture size ``R`` (square ``R × R``).

    Returns:
        ``tri_id [R, R]`` int64 (−1 = empty), ``bary [R, R, 3]`` float32 weights of the triangle's three
        corners (0 where empty), ``count [R, R]`` int64 number of triangles covering each texel centre
        (> 1 means overlapping charts; shared edges through a texel centre also count twice).
    """
    R = int(resolution)
    dev = v_tex.device
    uv = v_tex.detach().double() * R - 0.5  # continuous texel coordinates: centre of texel c is at c
    tri = t_tex_idx.long()
    a, b, c = uv[tri[:, 0]], uv[tri[:, 1]], uv[tri[:, 2]]
    area2 = (b[:, 0] - a[:, 0]) * (c[:, 1] - a[:, 1]) - (b[:, 1] - a[:, 1]) * (c[:, 0] - a[:, 0])
    lo = torch.minimum(torch.minimum(a, b), c).ceil().clamp(0, R - 1).long()
    hi = torch.maximum(torch.maximum(a, b), c).floor().clamp(-1, R - 1).long()
    w = (hi[:, 0] - lo[:, 0] + 1).clamp(min=0)
    h = (hi[:, 1] - lo[:, 1] + 1).clamp(min=0)
    n_cand = torch.where(area2.abs() > _DEGENERATE_TEXEL_AREA, w * h, torch.zeros_like(w))

    best = torch.full((R * R,), tri.shape[0], dtype=torch.long, device=dev)
    count = torch.zeros(R * R, dtype=torch.long, device=dev)
    bary_all: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
    csum = torch.cumsum(n_cand, 0)
    start = 0
    T = tri.shape[0]
    while start < T:
        base = int(csum[start - 1]) if start > 0 else 0
        stop = int(torch.searchsorted(csum, torch.tensor(base + _REFERENCE_FRAGMENT_BUDGET, device=dev), right=True))
        stop = max(stop, start + 1)
        stop = min(stop, T)
        ids = torch.arange(start, stop, device=dev)
        k = n_cand[ids]
        t_of = torch.repeat_interleave(ids, k)
        if t_of.numel():
            first = torch.cumsum(k, 0) - k
            local = torch.arange(t_of.numel(), device=dev) - torch.repeat_interleave(first, k)
            ww = w[t_of]
            col = lo[t_of, 0] + local % ww
            row = lo[t_of, 1] + local // ww
            p = torch.stack([col, row], -1).double()
            pa, pb, pc = a[t_of], b[t_of], c[t_of]
            ar = area2[t_of]
            # barycentric weights = signed sub-areas / signed area (winding-independent)
            wa = ((pb[:, 0] - p[:, 0]) * (pc[:, 1] - p[:, 1]) - (pb[:, 1] - p[:, 1]) * (pc[:, 0] - p[:, 0])) / ar
            wb = ((pc[:, 0] - p[:, 0]) * (pa[:, 1] - p[:, 1]) - (pc[:, 1] - p[:, 1]) * (pa[:, 0] - p[:, 0])) / ar
            wc = 1.0 - wa - wb
            inside = (wa >= 0) & (wb >= 0) & (wc >= 0)
            pix = (row * R + col)[inside]
            t_in = t_of[inside]
            count.index_add_(0, pix, torch.ones_like(pix))
            best.scatter_reduce_(0, pix, t_in, reduce="amin")
            bary_all.append((pix, t_in, torch.stack([wa, wb, wc], -1)[inside]))
        start = stop

    covered = best < T
    tri_id = torch.where(covered, best, torch.full_like(best, -1))
    bary = torch.zeros(R * R, 3, dtype=torch.float64, device=dev)
    for pix, t_in, bw in bary_all:
        keep = best[pix] == t_in
        bary[pix[keep]] = bw[keep]
    return tri_id.view(R, R), bary.float().view(R, R, 3), count.view(R, R)


def rasterize_uv(
    mesh: Mesh, resolution: int, *, rasterizer: Literal["render", "reference"] = "render"
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Which triangle covers each texel centre of an ``R × R`` texture, and with which weights.

    Args:
        mesh: mesh with ``v_tex [Vt, 2]`` / ``t_tex_idx [T, 3]`` (conventions §7).
        resolution: texture size ``R``.
        rasterizer: ``"render"`` uses :func:`meshlift.render.rasterize` with clip positions
            ``(2u − 1, 2v − 1, 0, 1)`` (all at depth 0, so overlaps go to the lowest triangle index);
            ``"reference"`` uses :func:`rasterize_uv_reference`.

    Returns:
        ``tri_id [R, R]`` int64 face index (−1 where no triangle covers the texel centre) and
        ``bary [R, R, 3]`` float32 weights of the face's three corners (sum 1 where covered).

    Raises:
        MeshError: the mesh has no UVs or no faces; RenderError: unknown ``rasterizer`` or ``resolution`` < 1.
    """
    _check_uv_mesh(mesh, "rasterize_uv")
    R = int(resolution)
    if R < 1:
        raise RenderError(f"rasterize_uv: resolution must be >= 1, got {resolution}")
    if rasterizer == "reference":
        tri_id, bary, _ = rasterize_uv_reference(mesh.v_tex, mesh.t_tex_idx, R)
        return tri_id, bary
    if rasterizer != "render":
        raise RenderError(f"rasterize_uv: rasterizer must be 'render' or 'reference', got {rasterizer!r}")
    from meshlift.render import rasterize

    uv = mesh.v_tex.detach().float()
    pos = torch.cat([uv * 2.0 - 1.0, torch.zeros_like(uv[:, :1]), torch.ones_like(uv[:, :1])], -1)[None]
    out = rasterize(pos.contiguous(), mesh.t_tex_idx.to(torch.int32).contiguous(), (R, R))
    rast = out[0] if isinstance(out, (tuple, list)) else out
    rast = rast[0]  # [R, R, 4]
    tri_id = rast[..., 3].round().long() - 1
    u, v = rast[..., 0], rast[..., 1]
    bary = torch.stack([u, v, 1.0 - u - v], -1)
    bary = torch.where((tri_id >= 0)[..., None], bary, torch.zeros_like(bary))
    return tri_id, bary.float()


def _box3_sum(x: torch.Tensor) -> torch.Tensor:
    """3×3 neighbourhood sums of ``x [B, C, H, W]`` with zero padding (separable: two 3-tap passes)."""
    p = F.pad(x, (1, 1, 1, 1))
    rows = p[..., :, :-2] + p[..., :, 1:-1] + p[..., :, 2:]
    return rows[..., :-2, :] + rows[..., 1:-1, :] + rows[..., 2:, :]


def dilate_texture(tex: torch.Tensor, mask: torch.Tensor, iterations: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """Grow ``tex`` into empty texels by ``iterations`` rings of 3×3 neighbour averaging.

    Each ring gives every empty texel that touches a filled one (8-neighbourhood) the mean of its filled
    neighbours, then marks it filled. This is the usual seam-hiding "edge padding" of texture bakers.

    Args:
        tex: ``[R, R', C]`` float texture. Not modified.
        mask: ``[R, R']`` bool, True where ``tex`` holds data.
        iterations: number of rings (texels) to grow, >= 0.

    Returns:
        ``(tex [R, R', C], mask [R, R'])``: the dilated texture and its new coverage.
    """
    if iterations < 0:
        raise RenderError(f"dilate_texture: iterations must be >= 0, got {iterations}")
    C = tex.shape[-1]
    m = mask[..., None].to(tex.dtype)
    # colour and mask pooled together: channel C holds the mask, so one pooling per ring
    xm = torch.cat([tex * m, m], -1).permute(2, 0, 1)[None].contiguous()  # [1, C + 1, R, R']
    for _ in range(int(iterations)):
        s = _box3_sum(xm)
        n = s[:, C:]
        grow = (n > 0) & (xm[:, C:] == 0)
        if not bool(grow.any()):
            break
        grown = torch.cat([s[:, :C] / n.clamp(min=1e-12), torch.ones_like(n)], 1)
        xm = torch.where(grow, grown, xm)
    return xm[0, :C].permute(1, 2, 0).contiguous(), xm[0, C] > 0


def push_pull_fill(tex: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Fill every empty texel from coarser averages of the filled ones (pull-push, Gortler et al. 1996).

    Pull: build a pyramid of mask-weighted 2×2 averages until one texel remains; push: from coarse to fine,
    each empty texel takes the (nearest-upsampled) value of the next coarser level. Filled texels never
    change.

    Args:
        tex: ``[R, R', C]`` float texture. Not modified.
        mask: ``[R, R']`` bool, True where ``tex`` holds data (at least one texel).

    Returns:
        ``[R, R', C]`` texture with no empty texel.

    Raises:
        RenderError: ``mask`` is all False (nothing to spread).
    """
    if not bool(mask.any()):
        raise RenderError("push_pull_fill: the mask is empty; there is no data to spread into the texture")
    x = (tex * mask[..., None]).permute(2, 0, 1)[None]
    m = mask[None, None].to(tex.dtype)
    levels = [(x, m)]
    while max(x.shape[-2:]) > 1:
        xs = F.avg_pool2d(x * m, 2, stride=2, ceil_mode=True)
        ms = F.avg_pool2d(m, 2, stride=2, ceil_mode=True)
        x = xs / ms.clamp(min=1e-12)
        m = (ms > 0).to(tex.dtype)
        levels.append((x, m))
    filled = levels[-1][0]
    for x, m in reversed(levels[:-1]):
        up = F.interpolate(filled, scale_factor=2, mode="nearest")[..., : x.shape[-2], : x.shape[-1]]
        filled = torch.where(m > 0, x, up)
    return filled[0].permute(1, 2, 0).contiguous()


@torch.no_grad()
def bake_field_to_textures(
    mesh_with_uv: Mesh,
    field: Field,
    resolution: int,
    *,
    dilate: int = 8,
    fill: Literal["push_pull", "none"] = "push_pull",
    chunk: int = 1 << 16,
    rasterizer: Literal["render", "reference"] = "render",
) -> Dict[str, torch.Tensor]:
    """Evaluate ``field`` at the surface point under every texel and store the results as textures.

    Steps (nvdiffrec pass-2 initialisation, Munkberg et al. 2022 Sec. 3): rasterise the UV layout
    (:func:`rasterize_uv`: texel (r, c) samples uv ``((c + 0.5)/R, (r + 0.5)/R)``), interpolate the face's
    world positions with the texel's barycentric weights, evaluate ``field`` in chunks of ``chunk`` points,
    scatter into ``R × R`` textures, then hide seams: ``dilate`` rings of neighbour averaging
    (:func:`dilate_texture`) and, with ``fill="push_pull"``, push-pull (:func:`push_pull_fill`) for every
    remaining empty texel. Runs under ``torch.no_grad()``; results are detached.

    Args:
        mesh_with_uv: mesh with ``v_pos [V, 3]``, ``t_pos_idx [T, 3]``, ``v_tex [Vt, 2]``,
            ``t_tex_idx [T, 3]`` (e.g. from :func:`meshlift.mesh.uv.unwrap`). Not modified.
        field: ``fn(x [N, 3] float32 world positions) -> {name: [N, C] tensor}``; every call must return the
            same names and channel counts (e.g. ``{"kd": [N, 3], "ks": [N, 3], "normal": [N, 3]}``).
        resolution: texture size ``R`` (textures are ``R × R``).
        dilate: rings of texels grown around each chart (``>= 0``); 4-8 covers bilinear and a few mip levels.
        fill: ``"push_pull"`` fills all remaining empty texels, ``"none"`` leaves them at 0.
        chunk: points per ``field`` call (bounds the field's memory).
        rasterizer: ``"render"`` (meshlift.render.rasterize) or ``"reference"`` (brute-force twin).

    Returns:
        ``{name: [R, R, C]}`` float32 textures on the mesh's device, in the field's units (e.g. linear kd).

    Raises:
        MeshError: the mesh has no UVs / no faces, or no texel centre is covered (resolution too small).
        RenderError: bad ``resolution`` / ``dilate`` / ``chunk`` / ``fill``, or the field returns something
            other than a dict of ``[n, C]`` tensors with consistent names.
    """
    mesh = mesh_with_uv
    _check_uv_mesh(mesh, "bake_field_to_textures")
    R = int(resolution)
    if R < 1:
        raise RenderError(f"bake_field_to_textures: resolution must be >= 1, got {resolution}")
    if dilate < 0:
        raise RenderError(f"bake_field_to_textures: dilate must be >= 0 texels, got {dilate}")
    if chunk < 1:
        raise RenderError(f"bake_field_to_textures: chunk must be >= 1 point, got {chunk}")
    if fill not in ("push_pull", "none"):
        raise RenderError(f"bake_field_to_textures: fill must be 'push_pull' or 'none', got {fill!r}")

    tri_id, bary = rasterize_uv(mesh, R, rasterizer=rasterizer)
    covered = tri_id >= 0
    if not bool(covered.any()):
        raise MeshError(
            f"bake_field_to_textures: no texel centre of the {R}x{R} texture is covered by the UV layout; "
            "raise the resolution or re-unwrap the mesh"
        )
    flat = covered.view(-1).nonzero().squeeze(1)
    tid = tri_id.view(-1)[flat]
    w = bary.view(-1, 3)[flat].to(mesh.v_pos.dtype)
    corners = mesh.v_pos.detach()[mesh.t_pos_idx[tid]]  # [N, 3, 3]
    points = (w[..., None] * corners).sum(1).float()  # [N, 3]

    outs: Dict[str, list] = {}
    for i in range(0, points.shape[0], int(chunk)):
        res = field(points[i : i + int(chunk)])
        if not isinstance(res, dict) or not res:
            raise RenderError("bake_field_to_textures: field must return a non-empty dict {name: [N, C] tensor}")
        if outs and set(res) != set(outs):
            raise RenderError(
                f"bake_field_to_textures: field returned names {sorted(res)} after {sorted(outs)}; "
                "it must return the same names for every chunk"
            )
        n = min(int(chunk), points.shape[0] - i)
        for name, val in res.items():
            if not torch.is_tensor(val) or val.ndim != 2 or val.shape[0] != n:
                shape = tuple(val.shape) if torch.is_tensor(val) else type(val).__name__
                raise RenderError(f"bake_field_to_textures: field output {name!r} must be [{n}, C], got {shape}")
            outs.setdefault(name, []).append(val.detach().float())

    # all outputs in one [R, R, sum C] image so dilation and push-pull run once
    names = list(outs)
    vals = torch.cat([torch.cat(outs[k], 0) for k in names], 1)
    widths = [outs[k][0].shape[1] for k in names]
    tex = torch.zeros(R * R, vals.shape[1], dtype=torch.float32, device=mesh.v_pos.device)
    tex[flat] = vals.to(tex.device)
    tex, m = dilate_texture(tex.view(R, R, -1), covered, dilate)
    if fill == "push_pull":
        tex = push_pull_fill(tex, m)
    return {k: t.contiguous() for k, t in zip(names, torch.split(tex, widths, dim=-1))}


@torch.no_grad()
def bake_normal_map(
    mesh_with_uv: Mesh,
    world_normal_fn: Callable[[torch.Tensor], torch.Tensor],
    resolution: int,
    *,
    dilate: int = 8,
    fill: Literal["push_pull", "none"] = "push_pull",
    chunk: int = 1 << 16,
    rasterizer: Literal["render", "reference"] = "render",
) -> torch.Tensor:
    """Bake world-space normals into a tangent-space normal map in the frame meshlift and glTF clients use.

    For every texel centre covered by the UV layout (:func:`rasterize_uv`), the surface point, the smooth
    normal ``N`` and the tangent ``(T, w)`` are interpolated from the mesh's per-corner frames — its own
    normals, else :func:`meshlift.geometry.mesh_ops.smooth_vertex_normals` (what the writers store), and
    :func:`meshlift.geometry.mesh_ops.tangent_frames` (glTF ``TANGENT``) — and the target normal
    ``n = world_normal_fn(point)`` is expressed in the orthonormalised frame ``T' = normalize(T − (T·N) N)``,
    ``B = w · normalize(N × T')``: ``(n·T', n·B, n·N)``, z clamped to ≥ 0.05 and normalised. This is the
    inverse of :func:`meshlift.shading.normals.perturb_normal` (docs/conventions.md §7, §13), so rendering
    the low-poly mesh with the map reproduces ``n`` (up to interpolation), mirrored charts included. Empty
    texels are filled like :func:`bake_field_to_textures` (dilation, push-pull), then renormalised.

    Args:
        mesh_with_uv: mesh with ``v_tex`` / ``t_tex_idx`` (e.g. from :func:`meshlift.mesh.uv.unwrap`); its
            ``v_nrm`` / ``t_nrm_idx`` when present. Not modified.
        world_normal_fn: ``fn(x [N, 3] world positions) -> [N, 3]`` target normals (normalised here).
        resolution: texture size ``R``.
        dilate, fill, chunk, rasterizer: as in :func:`bake_field_to_textures`.

    Returns:
        ``[R, R, 3]`` float32 tangent-space normals in [-1, 1] (``Material.normal``).

    Raises:
        MeshError: no UVs / faces, or no texel covered. RenderError: bad arguments, or ``world_normal_fn``
            does not return ``[n, 3]``.
    """
    from meshlift.geometry import mesh_ops

    mesh = mesh_with_uv
    _check_uv_mesh(mesh, "bake_normal_map")
    R = int(resolution)
    if R < 1 or dilate < 0 or chunk < 1 or fill not in ("push_pull", "none"):
        raise RenderError(
            f"bake_normal_map: need resolution >= 1, dilate >= 0, chunk >= 1 and fill in (push_pull, none); got "
            f"{resolution}, {dilate}, {chunk}, {fill!r}"
        )
    v_pos = mesh.v_pos.detach().double()
    if mesh.v_nrm is not None and mesh.t_nrm_idx is not None:
        v_nrm, t_nrm = mesh.v_nrm.detach().double(), mesh.t_nrm_idx.long()
    else:
        v_nrm, t_nrm = mesh_ops.smooth_vertex_normals(v_pos, mesh.t_pos_idx)
    v_tng, t_tng = mesh_ops.tangent_frames(v_pos, mesh.t_pos_idx, mesh.v_tex.detach().double(), mesh.t_tex_idx,
                                           v_nrm, t_nrm)
    tri_id, bary = rasterize_uv(mesh, R, rasterizer=rasterizer)
    covered = tri_id >= 0
    if not bool(covered.any()):
        raise MeshError(f"bake_normal_map: no texel centre of the {R}x{R} texture is covered; raise the resolution")
    flat = covered.view(-1).nonzero().squeeze(1)
    tid = tri_id.view(-1)[flat]
    w = bary.view(-1, 3)[flat].double()[..., None]

    def interp(values: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        return (w * values[idx[tid]]).sum(1)

    points = interp(v_pos, mesh.t_pos_idx.long())
    n = mesh_ops.safe_normalize(interp(v_nrm, t_nrm))
    tg = interp(v_tng, t_tng)
    t = mesh_ops.safe_normalize(tg[:, :3] - (tg[:, :3] * n).sum(-1, keepdim=True) * n)
    b = torch.where(tg[:, 3:] < 0, -1.0, 1.0).double() * mesh_ops.safe_normalize(torch.linalg.cross(n, t, dim=-1))
    out = []
    for i in range(0, points.shape[0], int(chunk)):
        target = world_normal_fn(points[i: i + int(chunk)].float())
        k = min(int(chunk), points.shape[0] - i)
        if not torch.is_tensor(target) or tuple(target.shape) != (k, 3):
            shape = tuple(target.shape) if torch.is_tensor(target) else type(target).__name__
            raise RenderError(f"bake_normal_map: world_normal_fn must return [{k}, 3], got {shape}")
        nt = mesh_ops.safe_normalize(target.detach().double().to(points.device))
        sl = slice(i, i + k)
        local = torch.stack([(nt * t[sl]).sum(-1), (nt * b[sl]).sum(-1), (nt * n[sl]).sum(-1).clamp(min=0.05)], -1)
        out.append(mesh_ops.safe_normalize(local).float())
    tex = torch.zeros(R * R, 3, dtype=torch.float32, device=mesh.v_pos.device)
    tex[flat] = torch.cat(out).to(tex.device)
    tex, m = dilate_texture(tex.view(R, R, 3), covered, dilate)
    if fill == "push_pull":
        tex = push_pull_fill(tex, m)
    else:  # empty texels: the unperturbed normal (0, 0, 1)
        flat_z = torch.zeros_like(tex)
        flat_z[..., 2] = 1.0
        tex = torch.where(m[..., None], tex, flat_z)
    return torch.nn.functional.normalize(tex, dim=-1).contiguous()
