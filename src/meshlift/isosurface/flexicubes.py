"""FlexiCubes: differentiable Dual Marching Cubes with learnable weights.

Source: Shen et al. 2023, "Flexible Isosurface Extraction for Gradient-Based Mesh Optimization"
(SIGGRAPH 2023), Sec. 4 (Sec. 4.1 the DMC extraction, 4.2 dual vertices with weights alpha and beta,
4.3 quad splitting with gamma, Eq. 8 the developability regulariser L_dev) and supplement Sec. 1.3
(ambiguous cases). Written from the paper; the Dual Marching Cubes tables are derived in code
(:mod:`meshlift.isosurface.tables`).

**Sign convention: ``sdf < 0`` inside**; faces are counter-clockwise seen from outside (normals point
towards positive sdf), as in :mod:`meshlift.isosurface.dmtet`.

Algorithm, per cube of a regular grid (layout in :mod:`meshlift.isosurface.tables`):

1. Cubes whose corners have both signs are surface cubes; their case id picks, from the DMC table, how
   the crossing edges group into patches, one **dual vertex** per patch. Two neighbouring cubes whose
   shared ambiguous face would make them share two dual edges flip that face's resolution (both).
2. On each crossing edge (corners i, j) of a cube, the crossing point uses the cube's corner weights
   ``alpha``: ``u_e = (x_i a_j s_j - x_j a_i s_i) / (a_j s_j - a_i s_i)`` (Sec. 4.2), and the dual
   vertex is the ``beta``-weighted mean of its edges' crossing points, ``v_d = sum b_e u_e / sum b_e``.
3. Every crossing grid edge inside the grid is surrounded by four surface cubes; their dual vertices of
   that edge form a quad. At inference (``training=False``) the quad is split into two triangles along
   the diagonal with the larger product of ``gamma`` (one gamma per cube); in training it is split
   into four triangles around a centre vertex, the gamma-weighted mean of the two diagonal midpoints,
   so the split is differentiable (Sec. 4.3).
4. ``L_dev`` (Eq. 8): for each dual vertex, the mean absolute deviation of the distances from it to its
   crossing points ``u_e``. Its mean is the regulariser (FlexiCubes / nvdiffrec weight it by 0.5).

Weights are given raw (any real numbers, e.g. ``nn.Parameter(torch.zeros(...))``) and mapped as in the
reference implementation: ``beta = 1 + s tanh(beta_raw)``, ``alpha = 1 + s tanh(alpha_raw)``,
``gamma = s sigmoid(gamma_raw) + (1 - s) / 2`` with ``s = weight_scale`` (0.99), so all stay positive.
Raw zeros (or None) give plain Dual Marching Cubes with mean-of-crossings dual vertices.

Not implemented: the optional QEF dual vertices from an SDF gradient function and the
tetrahedral-mesh output of the reference implementation.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from meshlift.errors import MeshError
from meshlift.isosurface import tables as _t

#: Cubes examined per chunk when finding the surface cubes (bounds peak memory at high resolution).
DEFAULT_CHUNK_CUBES = 1 << 22

_SLOT = torch.tensor(_t.EDGE_SLOT, dtype=torch.int64)
_EDGES = torch.tensor(_t.EDGES, dtype=torch.int64)  # [12, 2] (start corner, end corner)
_CORNERS = torch.tensor(_t.CORNERS, dtype=torch.int64)  # [8, 3]


def cube_grid(
    resolution: int,
    *,
    bounds: tuple[float, float] = (-1.0, 1.0),
    device: torch.device | str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Regular cube grid of ``[lo, hi]^3`` for FlexiCubes.

    Args:
        resolution: cubes per axis R (1..512).
        bounds: ``(lo, hi)`` extent on every axis.
        device: where to create the tensors.

    Returns:
        verts: ``[(R+1)^3, 3]`` float32; vertex (i, j, k) has index ``(i (R+1) + j) (R+1) + k`` (the same
            layout as :func:`meshlift.isosurface.tetgrid.regular_tet_grid`).
        cubes: ``[R^3, 8]`` int64 corner vertex indices; cube (i, j, k) has index ``(i R + j) R + k`` and
            its corner ``c = x + 2y + 4z`` is vertex ``(i + x, j + y, k + z)``.

    Raises:
        MeshError: resolution out of range or bounds not increasing.
    """
    _check_resolution(resolution, "cube_grid")
    lo, hi = float(bounds[0]), float(bounds[1])
    if not hi > lo:
        raise MeshError(f"cube_grid: bounds must be (lo, hi) with hi > lo, got {bounds!r}")
    r, n1 = resolution, resolution + 1
    ar = torch.arange(n1, device=device)
    ijk = torch.stack(torch.meshgrid(ar, ar, ar, indexing="ij"), dim=-1).reshape(-1, 3)
    verts = (lo + (hi - lo) * ijk.to(torch.float64) / r).to(torch.float32)
    cr = torch.arange(r, device=device)
    cijk = torch.stack(torch.meshgrid(cr, cr, cr, indexing="ij"), dim=-1).reshape(-1, 3)
    corners = cijk[:, None, :] + _CORNERS.to(verts.device)[None]  # [C, 8, 3]
    cubes = (corners[..., 0] * n1 + corners[..., 1]) * n1 + corners[..., 2]
    return verts, cubes


def cube_edges(cubes: torch.Tensor) -> torch.Tensor:
    """Unique grid edges ``[E, 2]`` int64 (``e[:, 0] < e[:, 1]``) of a cube grid, e.g. for
    :func:`meshlift.isosurface.dmtet.sdf_reg_loss` in FlexiCubes mode (as nvdiffrec does).

    Args:
        cubes: ``[C, 8]`` integer corner indices (:func:`cube_grid` layout).

    Raises:
        MeshError: ``cubes`` is not ``[C, 8]`` integer.
    """
    if cubes.ndim != 2 or cubes.shape[1] != 8 or cubes.dtype.is_floating_point:
        raise MeshError(f"cube_edges: cubes must be an integer [C, 8] tensor, got {tuple(cubes.shape)} {cubes.dtype}")
    if cubes.shape[0] == 0:
        return torch.zeros((0, 2), dtype=torch.int64, device=cubes.device)
    e = cubes.to(torch.int64)[:, _EDGES.to(cubes.device)].reshape(-1, 2)
    a, b = torch.minimum(e[:, 0], e[:, 1]), torch.maximum(e[:, 0], e[:, 1])
    n = int(cubes.max()) + 1
    keys = torch.unique(a * n + b)
    return torch.stack([keys // n, keys % n], dim=1)


def _check_resolution(resolution: int, fn: str) -> None:
    if isinstance(resolution, bool) or not isinstance(resolution, int) or not 1 <= resolution <= 512:
        raise MeshError(f"{fn}: resolution must be an int in [1, 512] (cubes per axis), got {resolution!r}")


@dataclass
class _Topology:
    """Discrete part of an extraction (no gradients): which cube edges feed which dual vertex."""

    surf: torch.Tensor  # [S] surface cube indices
    n_vd: int  # number of dual vertices
    vd_cube: torch.Tensor  # [n_vd] surface-cube slot (index into surf) of each dual vertex
    ent_cube: torch.Tensor  # [K] surface-cube slot of each (cube, crossing edge) entry
    ent_edge: torch.Tensor  # [K] local edge 0..11
    ent_vd: torch.Tensor  # [K] dual vertex of the entry
    quads: torch.Tensor  # [Q, 4] dual vertex ids, counter-clockwise seen from outside


def _topology(sdf: torch.Tensor, cubes: torch.Tensor, resolution: int, chunk: int) -> _Topology:
    dev = sdf.device
    patch_table, num_patches, problem_face = (x.to(dev) for x in _t.build_tables())
    n = sdf.shape[0]
    r = resolution
    inside = sdf < 0
    weights = 1 << torch.arange(8, device=dev)
    surf_parts, case_parts = [], []
    for s0 in range(0, cubes.shape[0], chunk):
        occ = inside[cubes[s0 : s0 + chunk]]  # [chunk, 8]
        n_in = occ.sum(1)
        idx = torch.nonzero((n_in > 0) & (n_in < 8)).flatten()
        surf_parts.append(idx + s0)
        case_parts.append((occ[idx].to(torch.int64) * weights).sum(1))
    surf = torch.cat(surf_parts)  # [S] surface cubes, ascending
    case = torch.cat(case_parts)  # [S]

    # ambiguity: flip a problem face when the neighbour across it has the same problem on that face
    pf = problem_face[case]
    flipped = torch.zeros_like(case)
    has = torch.nonzero(pf >= 0).flatten()
    if has.numel():
        c = surf[has]
        f = pf[has]
        axis, side = f // 2, f % 2
        ijk = torch.stack([c // (r * r), (c // r) % r, c % r], dim=1)
        nb_ijk = ijk.clone()
        nb_ijk[torch.arange(has.numel(), device=dev), axis] += 2 * side - 1
        in_range = ((nb_ijk >= 0) & (nb_ijk < r)).all(1)
        nb_ijk = nb_ijk.clamp(0, r - 1)
        nb = (nb_ijk[:, 0] * r + nb_ijk[:, 1]) * r + nb_ijk[:, 2]
        nb_case = (inside[cubes[nb]].to(torch.int64) * weights).sum(1)
        ok = in_range & (problem_face[nb_case] == 2 * axis + (1 - side))
        flipped[has] = ok.to(torch.int64)

    patch = patch_table[case, flipped]  # [S, 12]
    npatch = num_patches[case, flipped]  # [S]
    vd_base = torch.cumsum(npatch, 0) - npatch
    n_vd = int(npatch.sum())
    vd_cube = torch.repeat_interleave(torch.arange(surf.numel(), device=dev), npatch)
    ent_cube, ent_edge = torch.nonzero(patch >= 0, as_tuple=True)
    ent_vd = vd_base[ent_cube] + patch[ent_cube, ent_edge]

    # quads: one per crossing grid edge shared by four cubes
    edges = _EDGES.to(dev)
    va = cubes[surf[ent_cube], edges[ent_edge, 0]]
    vb = cubes[surf[ent_cube], edges[ent_edge, 1]]  # end corner: start + e_axis
    key = torch.minimum(va, vb) * n + torch.maximum(va, vb)
    ukey, inv, counts = torch.unique(key, return_inverse=True, return_counts=True)
    quads = torch.full((ukey.numel(), 4), -1, dtype=torch.int64, device=dev)
    quads[inv, _SLOT.to(dev)[ent_edge]] = ent_vd
    end_outside = torch.zeros(ukey.numel(), dtype=torch.bool, device=dev)
    end_outside[inv] = ~inside[vb]
    full = counts == 4
    quads, end_outside = quads[full], end_outside[full]
    # slot order turns counter-clockwise about +axis: keep it when the outside lies towards +axis
    quads = torch.where(end_outside[:, None], quads, quads.flip(1))
    return _Topology(surf, n_vd, vd_cube, ent_cube, ent_edge, ent_vd, quads)


def _split_quads(
    vd: torch.Tensor, vd_gamma: torch.Tensor, quads: torch.Tensor, training: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    g = vd_gamma[quads]  # [Q, 4]
    g02 = g[:, 0] * g[:, 2]
    g13 = g[:, 1] * g[:, 3]
    if not training:
        split02 = (g02 > g13)[:, None]
        t02 = torch.stack([quads[:, [0, 1, 2]], quads[:, [0, 2, 3]]], dim=1)
        t13 = torch.stack([quads[:, [0, 1, 3]], quads[:, [1, 2, 3]]], dim=1)
        faces = torch.where(split02[:, :, None], t02, t13).reshape(-1, 3)
        return vd, faces
    p = vd[quads]  # [Q, 4, 3]
    gq = g.unsqueeze(-1)
    m02 = (p[:, 0] * gq[:, 0] + p[:, 2] * gq[:, 2]) / (gq[:, 0] + gq[:, 2])
    m13 = (p[:, 1] * gq[:, 1] + p[:, 3] * gq[:, 3]) / (gq[:, 1] + gq[:, 3])
    centre = (m02 * g02[:, None] + m13 * g13[:, None]) / (g02 + g13)[:, None]
    cid = vd.shape[0] + torch.arange(quads.shape[0], device=quads.device)
    faces = torch.stack(
        [torch.stack([quads[:, i], quads[:, (i + 1) % 4], cid], dim=1) for i in range(4)], dim=1
    ).reshape(-1, 3)
    return torch.cat([vd, centre]), faces


def flexicubes(
    verts: torch.Tensor,
    sdf: torch.Tensor,
    cubes: torch.Tensor,
    resolution: int,
    beta: torch.Tensor | None = None,
    alpha: torch.Tensor | None = None,
    gamma: torch.Tensor | None = None,
    *,
    training: bool = False,
    weight_scale: float = 0.99,
    chunk_cubes: int = DEFAULT_CHUNK_CUBES,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Extract a mesh with FlexiCubes (see the module docstring; Shen et al. 2023, Sec. 4).

    Args:
        verts: ``[(R+1)^3, 3]`` float grid vertex positions from :func:`cube_grid`, possibly deformed;
            gradients flow to them.
        sdf: ``[(R+1)^3]`` float signed distance per vertex, negative inside; gradients flow to it.
        cubes: ``[R^3, 8]`` int64 corner indices from :func:`cube_grid` (that layout is required: the
            ambiguity check finds neighbours by index arithmetic).
        resolution: R, cubes per axis.
        beta: ``[R^3, 12]`` raw edge weights or None (all 1).
        alpha: ``[R^3, 8]`` raw corner weights or None (all 1).
        gamma: ``[R^3]`` raw quad-split weights or None (all equal).
        training: split quads into 4 triangles around a differentiable centre vertex (True) or into 2
            (False, the output mesh).
        weight_scale: ``s`` of the weight mapping, in (0, 1).
        chunk_cubes: cubes examined per chunk when finding the surface cubes (memory knob).

    Returns:
        v_pos: ``[V, 3]`` vertices: the dual vertices (ordered by surface cube index, then patch), then
            in training mode one centre per quad. Dual vertices whose quads would leave the grid are
            kept but unreferenced (only when the surface touches the grid boundary).
        faces: ``[F, 3]`` int64, counter-clockwise seen from outside.
        L_dev: ``[V_d]`` developability term per dual vertex (Eq. 8); the regulariser is its mean.
        All three are empty when the grid holds no surface (all inside or all outside).

    Raises:
        MeshError: bad shapes, dtypes, devices or weight_scale.
    """
    _check_resolution(resolution, "flexicubes")
    r = resolution
    n_expected, c_expected = (r + 1) ** 3, r**3
    if verts.ndim != 2 or verts.shape != (n_expected, 3) or not verts.dtype.is_floating_point:
        raise MeshError(
            f"flexicubes: verts must be a float [(R+1)^3, 3] = [{n_expected}, 3] tensor for resolution {r} "
            f"(from cube_grid), got {tuple(verts.shape)} {verts.dtype}"
        )
    if sdf.shape != (n_expected,) or not sdf.dtype.is_floating_point:
        raise MeshError(f"flexicubes: sdf must be a float [{n_expected}] tensor, got {tuple(sdf.shape)} {sdf.dtype}")
    if cubes.shape != (c_expected, 8) or cubes.dtype.is_floating_point:
        raise MeshError(
            f"flexicubes: cubes must be an integer [R^3, 8] = [{c_expected}, 8] tensor from cube_grid, "
            f"got {tuple(cubes.shape)} {cubes.dtype}"
        )
    weights = (("beta", beta, (c_expected, 12)), ("alpha", alpha, (c_expected, 8)), ("gamma", gamma, (c_expected,)))
    for name, w, shape in weights:
        if w is not None and (w.shape != shape or not w.dtype.is_floating_point):
            raise MeshError(f"flexicubes: {name} must be a float {list(shape)} tensor or None, got {tuple(w.shape)}")
        if w is not None and w.device != verts.device:
            raise MeshError(f"flexicubes: {name} is on {w.device} but verts on {verts.device}")
    if sdf.device != verts.device or cubes.device != verts.device:
        raise MeshError(
            f"flexicubes: verts, sdf and cubes must share one device ({verts.device}, {sdf.device}, {cubes.device})"
        )
    if not 0.0 < weight_scale < 1.0:
        raise MeshError(f"flexicubes: weight_scale must be in (0, 1), got {weight_scale}")
    if chunk_cubes < 1:
        raise MeshError(f"flexicubes: chunk_cubes must be >= 1, got {chunk_cubes}")

    cubes = cubes.to(torch.int64)
    with torch.no_grad():
        topo = _topology(sdf, cubes, r, chunk_cubes)
    dev, dt = verts.device, verts.dtype
    if topo.n_vd == 0:
        return verts.new_zeros((0, 3)), torch.zeros((0, 3), dtype=torch.int64, device=dev), verts.new_zeros((0,))

    surf = topo.surf
    cube_k = surf[topo.ent_cube]  # [K] global cube of each entry
    edges = _EDGES.to(dev)
    ca, cb = edges[topo.ent_edge, 0], edges[topo.ent_edge, 1]
    va, vb = cubes[cube_k, ca], cubes[cube_k, cb]
    wa, wb = sdf[va], sdf[vb]
    if alpha is not None:
        a = 1.0 + weight_scale * torch.tanh(alpha[cube_k])  # [K, 8]
        wa = wa * a.gather(1, ca[:, None]).squeeze(1)
        wb = wb * a.gather(1, cb[:, None]).squeeze(1)
    u = (verts[va] * wb[:, None] - verts[vb] * wa[:, None]) / (wb - wa)[:, None]  # [K, 3]
    if beta is not None:
        b = 1.0 + weight_scale * torch.tanh(beta[cube_k, topo.ent_edge])  # [K]
    else:
        b = torch.ones(u.shape[0], dtype=dt, device=dev)
    num = torch.zeros((topo.n_vd, 3), dtype=u.dtype, device=dev).index_add(0, topo.ent_vd, u * b[:, None])
    den = torch.zeros(topo.n_vd, dtype=b.dtype, device=dev).index_add(0, topo.ent_vd, b)
    vd = num / den[:, None]

    # L_dev (Eq. 8): mean absolute deviation of |u_e - v_d| over the edges of each dual vertex
    dist = (u - vd[topo.ent_vd]).norm(dim=1)
    cnt = torch.bincount(topo.ent_vd, minlength=topo.n_vd).to(dist.dtype)
    mean = torch.zeros_like(cnt).index_add(0, topo.ent_vd, dist) / cnt
    l_dev = torch.zeros_like(cnt).index_add(0, topo.ent_vd, (dist - mean[topo.ent_vd]).abs()) / cnt

    if gamma is not None:
        g_cube = weight_scale * torch.sigmoid(gamma[surf]) + (1.0 - weight_scale) / 2
    else:
        g_cube = torch.ones(surf.numel(), dtype=dt, device=dev)
    vd_gamma = g_cube[topo.vd_cube]
    v_pos, faces = _split_quads(vd, vd_gamma, topo.quads, training)
    return v_pos, faces, l_dev


class FlexiCubes:
    """FlexiCubes isosurface extractor (Shen et al. 2023); a thin holder of options over :func:`flexicubes`.

    Args:
        weight_scale: ``s`` in the weight mapping of the module docstring, in (0, 1).
        chunk_cubes: cubes examined per chunk when finding the surface cubes (memory knob).

    Example::

        fc = FlexiCubes()
        verts, cubes = fc.cube_grid(64)
        beta = torch.zeros(cubes.shape[0], 12, requires_grad=True)
        v_pos, faces, l_dev = fc(verts + deform, sdf, cubes, 64, beta=beta, training=True)
        loss = image_loss + 0.5 * l_dev.mean()
    """

    def __init__(self, weight_scale: float = 0.99, chunk_cubes: int = DEFAULT_CHUNK_CUBES) -> None:
        if not 0.0 < weight_scale < 1.0:
            raise MeshError(f"FlexiCubes: weight_scale must be in (0, 1), got {weight_scale}")
        self.weight_scale = weight_scale
        self.chunk_cubes = chunk_cubes
        _t.build_tables()  # derive (and cache) the tables once, up front

    def cube_grid(
        self,
        resolution: int,
        *,
        bounds: tuple[float, float] = (-1.0, 1.0),
        device: torch.device | str | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(verts [(R+1)^3, 3], cubes [R^3, 8])``; see :func:`cube_grid`."""
        return cube_grid(resolution, bounds=bounds, device=device)

    def __call__(
        self,
        verts: torch.Tensor,
        sdf: torch.Tensor,
        cubes: torch.Tensor,
        resolution: int,
        beta: torch.Tensor | None = None,
        alpha: torch.Tensor | None = None,
        gamma: torch.Tensor | None = None,
        training: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(v_pos, faces, L_dev)``; see :func:`flexicubes`."""
        return flexicubes(
            verts,
            sdf,
            cubes,
            resolution,
            beta,
            alpha,
            gamma,
            training=training,
            weight_scale=self.weight_scale,
            chunk_cubes=self.chunk_cubes,
        )

    def cube_edges(self, cubes: torch.Tensor) -> torch.Tensor:
        """Unique grid edges ``[E, 2]``; see :func:`cube_edges`."""
        return cube_edges(cubes)


def flexicubes_reference(
    verts: torch.Tensor,
    sdf: torch.Tensor,
    cubes: torch.Tensor,
    resolution: int,
    beta: torch.Tensor | None = None,
    alpha: torch.Tensor | None = None,
    gamma: torch.Tensor | None = None,
    *,
    training: bool = False,
    weight_scale: float = 0.99,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Slow loop-per-cube reference twin of :func:`flexicubes` (tests only; tiny grids).

    Walks the cubes and grid edges with explicit (i, j, k) loops, using the per-case functions of
    :mod:`meshlift.isosurface.tables` instead of the packed tensors and gathers. Outputs are in the same
    order as :func:`flexicubes` (dual vertices by cube then patch, quads by grid edge), so they compare
    directly, forward and backward.
    """
    r, n1 = resolution, resolution + 1
    n = n1**3
    s_val = sdf.detach().tolist()
    inside = [x < 0 for x in s_val]
    cub = cubes.tolist()

    def cidx(i: int, j: int, k: int) -> int:
        return (i * r + j) * r + k

    def case_of(c: int) -> int:
        return sum(int(inside[v]) << k for k, v in enumerate(cub[c]))

    ws = weight_scale
    vd_list, ldev_list, gam_list = [], [], []
    vd_of: dict[tuple[int, int], int] = {}
    for i in range(r):
        for j in range(r):
            for k in range(r):
                c = cidx(i, j, k)
                case = case_of(c)
                if case in (0, 255):
                    continue
                pm = _t.problem_faces(case)
                flip = 0
                if pm:
                    f = pm.bit_length() - 1
                    axis, side = f // 2, f % 2
                    nb = [i, j, k]
                    nb[axis] += 2 * side - 1
                    if all(0 <= x < r for x in nb):
                        if _t.problem_faces(case_of(cidx(*nb))) == 1 << (2 * axis + 1 - side):
                            flip = pm
                patches = _t.dmc_patches(case, flip)
                for p in range(max(patches) + 1):
                    us, bs = [], []
                    for e in range(12):
                        if patches[e] != p:
                            continue
                        ca, cb = _t.EDGES[e]
                        va, vb = cub[c][ca], cub[c][cb]
                        wa, wb = sdf[va], sdf[vb]
                        if alpha is not None:
                            wa = wa * (1 + ws * torch.tanh(alpha[c, ca]))
                            wb = wb * (1 + ws * torch.tanh(alpha[c, cb]))
                        us.append((verts[va] * wb - verts[vb] * wa) / (wb - wa))
                        one = torch.ones((), dtype=verts.dtype)
                        bs.append(1 + ws * torch.tanh(beta[c, e]) if beta is not None else one)
                        vd_of[(c, e)] = len(vd_list)
                    vd = sum(b * u for b, u in zip(bs, us)) / sum(bs)
                    d = [torch.linalg.norm(u - vd) for u in us]
                    mean = sum(d) / len(d)
                    ldev_list.append(sum((x - mean).abs() for x in d) / len(d))
                    vd_list.append(vd)
                    one = torch.ones((), dtype=verts.dtype)
                    gam_list.append(ws * torch.sigmoid(gamma[c]) + (1 - ws) / 2 if gamma is not None else one)
    if not vd_list:
        return verts.new_zeros((0, 3)), torch.zeros((0, 3), dtype=torch.int64), verts.new_zeros((0,))
    quads = []
    for a in range(3):
        b_ax, c_ax = (a + 1) % 3, (a + 2) % 3
        for i in range(n1):
            for j in range(n1):
                for k in range(n1):
                    p = [i, j, k]
                    q = list(p)
                    q[a] += 1
                    if q[a] > r:
                        continue
                    v0 = (p[0] * n1 + p[1]) * n1 + p[2]
                    v1 = (q[0] * n1 + q[1]) * n1 + q[2]
                    if inside[v0] == inside[v1]:
                        continue
                    ring = []
                    for ob, oc in ((0, 0), (1, 0), (1, 1), (0, 1)):  # counter-clockwise about +a
                        lo = list(p)
                        lo[b_ax] -= ob
                        lo[c_ax] -= oc
                        if not all(0 <= x < r for x in lo):
                            break
                        ring.append(vd_of[(cidx(*lo), 4 * a + ob + 2 * oc)])
                    if len(ring) < 4:
                        continue
                    if inside[v1]:  # outside lies towards -a: reverse
                        ring = ring[::-1]
                    quads.append((min(v0, v1) * n + max(v0, v1), ring))
    quads.sort()
    vd_t = torch.stack(vd_list)
    gam = torch.stack(gam_list)
    faces, centres = [], []
    for _, qd in quads:
        g = [gam[x] for x in qd]
        g02, g13 = g[0] * g[2], g[1] * g[3]
        if not training:
            if g02 > g13:
                faces += [[qd[0], qd[1], qd[2]], [qd[0], qd[2], qd[3]]]
            else:
                faces += [[qd[0], qd[1], qd[3]], [qd[1], qd[2], qd[3]]]
        else:
            p = [vd_t[x] for x in qd]
            m02 = (p[0] * g[0] + p[2] * g[2]) / (g[0] + g[2])
            m13 = (p[1] * g[1] + p[3] * g[3]) / (g[1] + g[3])
            cid = vd_t.shape[0] + len(centres)
            centres.append((m02 * g02 + m13 * g13) / (g02 + g13))
            faces += [[qd[t], qd[(t + 1) % 4], cid] for t in range(4)]
    v_pos = torch.cat([vd_t, torch.stack(centres)]) if centres else vd_t
    return v_pos, torch.tensor(faces, dtype=torch.int64).reshape(-1, 3), torch.stack(ldev_list)
