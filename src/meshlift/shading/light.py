"""Split-sum image-based lighting: a learnable HDR environment cube map with GGX-prefiltered mips.

Model (nvdiffrec, Munkberg et al. 2022, Sec. 5 "split sum"; Karis 2013, "Real Shading in Unreal Engine 4"):

    L_out = kd (1 - m) · E_d(n) + L_s(r, reflect(wo, n)) · (F0 · A(n·v, r) + B(n·v, r)),   times (1 - occlusion)

with ``F0 = mix(0.04, kd, m)``, ``E_d`` the cosine-weighted average of the environment around n (the
"diffuse irradiance" cube, irradiance / π), ``L_s`` the environment prefiltered with the GGX lobe of
roughness r (one cube per mip level, roughness 0.08 -> 0.5 over the first levels, 1.0 on the last), and
(A, B) the DFG table of :mod:`meshlift.shading.brdf_lut`.

Prefiltering is a fixed linear map of the (learned) cube map, so it is precomputed once per
(output resolution, source resolution, roughness, cutoff) as a sparse matrix over source texels (rows
normalised, int32 CSR plus its transpose for the backward pass) and applied with a sparse matmul on
CPU or CUDA; gradients are exact. Memory is bounded by ``max_nnz_per_level``: when the full lobe at a
level would need more entries, the lobe is gathered from a coarser level of the (box-filtered) mip chain,
which for wide lobes changes the result very little. A lobe is never gathered from a level whose texels
are wider than half its cutoff angle (that would visibly blur sharp reflections); if the budget still
cannot be met, a warning names the memory it takes.

Cube-map conventions: docs/conventions.md §8 (see :mod:`meshlift.shading.cubemap`).
"""

from __future__ import annotations

import functools
import math
import warnings
from dataclasses import dataclass

import numpy as np
import torch

from meshlift.errors import RenderError
from meshlift.kernels import choose_backend
from meshlift.shading.brdf_lut import brdf_lut, lookup_brdf_lut
from meshlift.shading.bsdf import dot, reflect, safe_normalize
from meshlift.shading.cubemap import (
    avg_pool_cube,
    cube_texel_directions,
    cube_to_latlong,
    dir_to_cube,
    latlong_to_cube,
    sample_cube,
    sample_cube_mip,
    texel_solid_angles,
)

__all__ = [
    "EnvironmentLight",
    "clear_filter_cache",
    "ggx_cutoff_cos",
    "specular_prefilter",
    "specular_prefilter_reference",
    "diffuse_prefilter",
    "diffuse_prefilter_reference",
]

# Candidate (output texel, source texel) pairs evaluated at once while building a filter matrix.
_BUILD_CHUNK_PAIRS = 1 << 22


# ---------------------------------------------------------------------------------------------------
# Filter weights
# ---------------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=64)
def ggx_cutoff_cos(roughness: float, cutoff: float = 0.99) -> float:
    """Cosine of the lobe half-angle kept by the specular prefilter (nvdiffrec's ``__ndfBounds`` rule).

    The GGX density ``D(cos θ)`` (alpha = roughness^2) is accumulated over uniformly spaced θ in
    [0, π/2]; the cutoff angle is the first θ where the running sum reaches ``cutoff`` of the total.
    Source texels whose direction L has ``L·N >= cos θ_cut`` contribute (N = V = R, the output direction).

    Args:
        roughness: perceptual roughness in (0, 1].
        cutoff: kept fraction in (0, 1].

    Returns:
        ``cos θ_cut`` in [0, 1).
    """
    theta = np.linspace(0.0, np.pi / 2.0, 200001)
    c = np.cos(theta)
    a2 = float(roughness) ** 4
    d = (c * a2 - c) * c + 1.0
    acc = np.cumsum(a2 / (d * d * np.pi))
    idx = int(np.argmax(acc >= acc[-1] * cutoff))
    return float(c[idx])


def _ggx_weights(n_dot_l: torch.Tensor, area: torch.Tensor, roughness: float) -> torch.Tensor:
    """``(n·l) D(n·h) Ω / 4`` for N = V (so n·h = sqrt((1 + n·l) / 2)), nvdiffrec's specular filter weight."""
    alpha_sqr = float(roughness) ** 4
    n_dot_h = torch.sqrt(torch.clamp((1.0 + n_dot_l) * 0.5, 0.0, 1.0))
    d = (n_dot_h * alpha_sqr - n_dot_h) * n_dot_h + 1.0
    ndf = alpha_sqr / (d * d * math.pi)
    return torch.clamp(n_dot_l, min=0.0) * ndf * area * 0.25


def _effective_cos(roughness: float, cutoff: float, out_res: int, src_res: int) -> float:
    cos_cut = ggx_cutoff_cos(float(roughness), float(cutoff))
    if src_res < out_res:
        # A coarser source must still cover the nearest source texel of every output direction.
        cos_cut = min(cos_cut, math.cos(1.5 / src_res))
    return cos_cut


def _estimate_nnz(out_res: int, src_res: int, roughness: float, cutoff: float) -> float:
    cos_cut = _effective_cos(roughness, cutoff, out_res, src_res)
    frac = (1.0 - cos_cut) * 0.5
    return 6.0 * out_res * out_res * max(1.0, frac * 6.0 * src_res * src_res)


@dataclass(frozen=True)
class _SparseOperator:
    """A fixed sparse linear map ``y = W x`` with ``W`` [N_out, N_src] (CSR) and ``W^T`` for backward."""

    fwd: torch.Tensor
    bwd: torch.Tensor

    @property
    def nnz(self) -> int:
        return int(self.fwd.values().numel())


def _csr(crow: torch.Tensor, col: torch.Tensor, val: torch.Tensor, shape: tuple[int, int]) -> torch.Tensor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "sparse CSR support is in beta"
        return torch.sparse_csr_tensor(crow.to(torch.int32), col.to(torch.int32), val, shape, check_invariants=False)


def _tiles(res: int, device) -> tuple[torch.Tensor, int]:
    """Source texel indices grouped in T x T tiles per face: ``[n_tiles, T*T]``."""
    t = max(d for d in range(1, min(res, 8) + 1) if res % d == 0)
    idx = torch.arange(6 * res * res, device=device).reshape(6, res // t, t, res // t, t)
    return idx.permute(0, 1, 3, 2, 4).reshape(-1, t * t), t


def _lobe_pairs(
    out_dirs: torch.Tensor, src_dirs: torch.Tensor, src_res: int, cos_cut: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """All (output, source) texel pairs with ``L·N >= cos_cut``, sorted by output: ``(row, col, n_dot_l)``.

    Wide lobes (or small maps) use chunked dense dot products; narrow lobes first cull T x T source tiles
    by their bounding cones, then test the texels of the surviving tiles.
    """
    n_out, n_src = out_dirs.shape[0], src_dirs.shape[0]
    theta_cut = math.acos(min(1.0, max(-1.0, cos_cut)))
    rows, cols, dots = [], [], []
    if (1.0 - cos_cut) * 0.5 > 1.0 / 32.0 or n_src <= 6 * 32 * 32:
        chunk = max(1, _BUILD_CHUNK_PAIRS // n_src)
        for s in range(0, n_out, chunk):
            d = out_dirs[s : s + chunk] @ src_dirs.T
            r, c = torch.nonzero(d >= cos_cut, as_tuple=True)  # row-major: sorted by output
            rows.append(r + s)
            cols.append(c)
            dots.append(d[r, c])
    else:
        tiles, t = _tiles(src_res, src_dirs.device)
        tile_dirs = src_dirs[tiles]  # [nT, T*T, 3]
        centre = tile_dirs.mean(dim=1)
        centre = centre / centre.norm(dim=-1, keepdim=True)
        radius = torch.acos(torch.clamp((tile_dirs * centre[:, None]).sum(-1), -1.0, 1.0)).amax(dim=1)
        tile_cos = torch.cos(torch.clamp(radius + theta_cut, max=math.pi))  # [nT]
        frac = (1.0 - math.cos(min(math.pi, theta_cut + 2.0 * float(radius.max())))) * 0.5
        per_out = max(1.0, frac * tiles.shape[0]) * t * t + tiles.shape[0]
        chunk = max(1, int(_BUILD_CHUNK_PAIRS // per_out))
        for s in range(0, n_out, chunk):
            o = out_dirs[s : s + chunk]
            b, ti = torch.nonzero(o @ centre.T >= tile_cos[None, :], as_tuple=True)  # sorted by b
            cand = tiles[ti]  # [P, T*T]
            d = torch.bmm(src_dirs[cand], o[b][:, :, None])[..., 0]  # [P, T*T]
            keep = d >= cos_cut
            rows.append((b[:, None] + s).expand_as(cand)[keep])
            cols.append(cand[keep])
            dots.append(d[keep])
    return torch.cat(rows), torch.cat(cols), torch.cat(dots)


# Rotation taking face 0's texel directions to face f's (same (row, column)): d_f(i, j) = Q_f d_0(i, j).
# Each is a symmetry of the cube, so it permutes the texels of any cube map and preserves solid angles.
_FACE_ROTATIONS = (
    ((1, 0, 0), (0, 1, 0), (0, 0, 1)),
    ((-1, 0, 0), (0, 1, 0), (0, 0, -1)),
    ((0, 0, -1), (1, 0, 0), (0, -1, 0)),
    ((0, 0, -1), (-1, 0, 0), (0, 1, 0)),
    ((0, 0, -1), (0, 1, 0), (1, 0, 0)),
    ((0, 0, 1), (0, 1, 0), (-1, 0, 0)),
)


@functools.lru_cache(maxsize=16)
def _face_permutations(res: int, device_str: str) -> torch.Tensor:
    """``perm[f, s]`` = texel index of ``Q_f`` applied to texel s, ``[6, 6 R^2]`` int64."""
    device = torch.device(device_str)
    d = cube_texel_directions(res, torch.float64, device).reshape(-1, 3)
    perms = []
    for q in _FACE_ROTATIONS:
        face, x, y = dir_to_cube(d @ torch.tensor(q, dtype=torch.float64, device=device).T)
        j = torch.clamp(torch.round((x + 1.0) * (0.5 * res) - 0.5).long(), 0, res - 1)
        i = torch.clamp(torch.round((y + 1.0) * (0.5 * res) - 0.5).long(), 0, res - 1)
        perms.append(face * res * res + i * res + j)
    return torch.stack(perms)


@functools.lru_cache(maxsize=64)
def _specular_operator(
    out_res: int, src_res: int, roughness: float, cutoff: float, dtype: torch.dtype, device_str: str
) -> _SparseOperator:
    device = torch.device(device_str)
    work = torch.float64
    cos_cut = _effective_cos(roughness, cutoff, out_res, src_res)
    src_dirs = cube_texel_directions(src_res, work, device).reshape(-1, 3)
    src_area = texel_solid_angles(src_res, work, device).reshape(-1)
    n_face = out_res * out_res
    n_out, n_src = 6 * n_face, src_dirs.shape[0]
    # Rows of face 0 only; the other faces are the same rows with source texels permuted by the
    # cube rotation that maps face 0 onto them (weights depend only on L·N and solid angle).
    out_dirs = cube_texel_directions(out_res, work, device)[0].reshape(-1, 3)
    row0, col0, n_dot_l = _lobe_pairs(out_dirs, src_dirs, src_res, cos_cut)
    lobe0 = _ggx_weights(n_dot_l, torch.ones_like(n_dot_l), roughness)
    w0 = lobe0 * src_area[col0]
    row_sum0 = torch.zeros(n_face, dtype=work, device=device).index_add_(0, row0, w0)
    if bool((row_sum0 <= 0).any()):
        raise RenderError(
            f"specular prefilter: an output texel got no source texel (out_res={out_res}, src_res={src_res}, "
            f"roughness={roughness}); this is a bug, please report it"
        )
    perm = _face_permutations(src_res, device_str)
    row = torch.cat([row0 + f * n_face for f in range(6)])
    col = torch.cat([perm[f][col0] for f in range(6)])
    val = (w0 / row_sum0[row0]).to(dtype).repeat(6)
    crow = torch.zeros(n_out + 1, dtype=torch.int64, device=device)
    crow[1:] = torch.cumsum(torch.bincount(row, minlength=n_out), 0)
    fwd = _csr(crow, col, val, (n_out, n_src))
    if out_res == src_res:
        # Same grid: the pair set is symmetric, so W^T has W's sparsity pattern; the entry stored at
        # (row=o, col=s) of W^T is W[s, o] = lobe * area[o] / row_sum[s] (row sums equal on all faces).
        row_sum = row_sum0.repeat(6)
        area_o = src_area[row0].repeat(6)
        bwd = _csr(crow, col, (lobe0.repeat(6) * area_o / row_sum[col]).to(dtype), (n_src, n_out))
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            csc = fwd.to_sparse_csc()
        bwd = _csr(csc.ccol_indices(), csc.row_indices(), csc.values(), (n_src, n_out))
    return _SparseOperator(fwd, bwd)


def clear_filter_cache() -> None:
    """Free the cached prefilter matrices (they are kept per process, per resolution/roughness/device)."""
    _specular_operator.cache_clear()
    _diffuse_matrix.cache_clear()
    _face_permutations.cache_clear()


class _ApplySparse(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, op: _SparseOperator) -> torch.Tensor:  # type: ignore[override]
        ctx.op = op
        return op.fwd @ x

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        return ctx.op.bwd @ grad.contiguous(), None


def specular_prefilter(
    cube: torch.Tensor,
    roughness: float,
    cutoff: float = 0.99,
    out_res: int | None = None,
    backend: str | None = None,
) -> torch.Tensor:
    """GGX-prefiltered environment (split-sum "LD" term), differentiable, via a cached sparse matrix.

    ``out(N) = Σ_L w(N, L) cube(L) / Σ_L w(N, L)`` over source texels L with ``L·N >= cos θ_cut``
    (:func:`ggx_cutoff_cos`), ``w = (N·L) D(N·H) Ω(L) / 4`` with ``H = normalize(N + L)``, ``D`` the GGX NDF
    with alpha = roughness^2 and ``Ω`` the texel's exact solid angle: nvdiffrec's ``specular_cubemap``
    (Karis 2013's N = V = R approximation).

    Args:
        cube: ``[6, R_src, R_src, C]`` source cube map (float32/float64, any device).
        roughness: perceptual roughness in (0, 1].
        cutoff: fraction of the GGX lobe kept, in (0, 1].
        out_res: output face size (default ``R_src``); may exceed ``R_src`` (a fine output gathered
            from a coarse source, as the bounded-memory mip chain does).
        backend: how the cached matrix is applied: ``"torch"`` (sparse matmul), ``"triton"`` (the CSR kernel
            of :mod:`meshlift.kernels.prefilter_triton`), ``"auto"`` (Triton for float32 CUDA maps when
            ``import triton`` works); None: the current choice (:func:`meshlift.kernels.choose_backend`).

    Returns:
        ``[6, out_res, out_res, C]``.

    Raises:
        RenderError: bad shapes or parameters.
    """
    if cube.ndim != 4 or cube.shape[0] != 6 or cube.shape[1] != cube.shape[2]:
        raise RenderError(f"specular_prefilter(cube): expected [6, R, R, C], got {tuple(cube.shape)}")
    if not (0.0 < float(roughness) <= 1.0):
        raise RenderError(f"specular_prefilter(roughness): must be in (0, 1], got {roughness}")
    if not (0.0 < float(cutoff) <= 1.0):
        raise RenderError(f"specular_prefilter(cutoff): must be in (0, 1], got {cutoff}")
    src_res, ch = cube.shape[1], cube.shape[-1]
    out_res = src_res if out_res is None else int(out_res)
    op = _specular_operator(out_res, src_res, float(roughness), float(cutoff), cube.dtype, str(cube.device))
    if choose_backend("shading", backend, cube.device, cube.dtype) == "triton":
        from meshlift.kernels.prefilter_triton import csr_apply_triton

        y = csr_apply_triton(cube.reshape(-1, ch), op.fwd, op.bwd)
    else:
        y = _ApplySparse.apply(cube.reshape(-1, ch).contiguous(), op)
    return y.reshape(6, out_res, out_res, ch)


def specular_prefilter_reference(
    cube: torch.Tensor, roughness: float, cutoff: float = 0.99, out_res: int | None = None
) -> torch.Tensor:
    """Naive twin of :func:`specular_prefilter`: one dense weighted sum per output texel (tests only)."""
    src_res, ch = cube.shape[1], cube.shape[-1]
    out_res = src_res if out_res is None else int(out_res)
    cos_cut = _effective_cos(float(roughness), float(cutoff), out_res, src_res)
    src_dirs = cube_texel_directions(src_res, cube.dtype, cube.device).reshape(-1, 3)
    area = texel_solid_angles(src_res, cube.dtype, cube.device).reshape(-1)
    flat = cube.reshape(-1, ch)
    out = []
    for n in cube_texel_directions(out_res, cube.dtype, cube.device).reshape(-1, 3):
        n_dot_l = src_dirs @ n
        w = torch.where(n_dot_l >= cos_cut, _ggx_weights(n_dot_l, area, roughness), torch.zeros_like(n_dot_l))
        out.append((w[:, None] * flat).sum(0) / w.sum())
    return torch.stack(out).reshape(6, out_res, out_res, ch)


@functools.lru_cache(maxsize=16)
def _diffuse_matrix(res: int, dtype: torch.dtype, device_str: str) -> torch.Tensor:
    device = torch.device(device_str)
    d = cube_texel_directions(res, torch.float64, device).reshape(-1, 3)
    area = texel_solid_angles(res, torch.float64, device).reshape(-1)
    return (torch.clamp(d @ d.T, min=0.0) * area[None, :] / math.pi).to(dtype)


def diffuse_prefilter(cube: torch.Tensor) -> torch.Tensor:
    """Cosine-weighted average of the environment around each texel direction (irradiance / π).

    ``out(N) = (1/π) Σ_L max(N·L, 0) Ω(L) cube(L)`` over all texels (exact solid angles), nvdiffrec's
    ``diffuse_cubemap``; a dense ``[6R², 6R²]`` matrix, meant for the coarsest mip (R ~ 16).

    Args:
        cube: ``[6, R, R, C]``.

    Returns:
        ``[6, R, R, C]``; a constant environment c maps to c (up to the discretisation, ~1e-3).

    Raises:
        RenderError: bad shape, or R > 64 (the dense matrix would exceed ~2 GB; pass a coarser mip).
    """
    if cube.ndim != 4 or cube.shape[0] != 6 or cube.shape[1] != cube.shape[2]:
        raise RenderError(f"diffuse_prefilter(cube): expected [6, R, R, C], got {tuple(cube.shape)}")
    res, ch = cube.shape[1], cube.shape[-1]
    if res > 64:
        raise RenderError(f"diffuse_prefilter(cube): face size {res} > 64; filter a coarser mip level instead")
    m = _diffuse_matrix(res, cube.dtype, str(cube.device))
    return (m @ cube.reshape(-1, ch)).reshape(6, res, res, ch)


def diffuse_prefilter_reference(cube: torch.Tensor) -> torch.Tensor:
    """Naive twin of :func:`diffuse_prefilter` (per-output-texel loop; tests only)."""
    res, ch = cube.shape[1], cube.shape[-1]
    d = cube_texel_directions(res, cube.dtype, cube.device).reshape(-1, 3)
    area = texel_solid_angles(res, cube.dtype, cube.device).reshape(-1)
    flat = cube.reshape(-1, ch)
    out = [((torch.clamp(d @ n, min=0.0) * area)[:, None] * flat).sum(0) / math.pi for n in d]
    return torch.stack(out).reshape(6, res, res, ch)


# ---------------------------------------------------------------------------------------------------
# The light
# ---------------------------------------------------------------------------------------------------


class EnvironmentLight(torch.nn.Module):
    """Learnable HDR environment cube map with split-sum shading (nvdiffrec's ``EnvironmentLight``).

    Call :meth:`build_mips` after every change of :attr:`base` (each optimizer step) and before
    :meth:`shade`; it rebuilds the mip chain, the per-level GGX-prefiltered cubes and the diffuse cube
    differentiably (the filter matrices themselves are cached per process).

    Args:
        base: ``[6, R, R, 3]`` linear HDR radiance (OpenGL face order, docs/conventions.md §8). Copied.
        trainable: whether :attr:`base` is a trainable parameter.
        min_res: the mip chain halves R until it is <= ``min_res`` (nvdiffrec: 16).
        min_roughness, max_roughness: roughness of the finest and the second-coarsest level
            (nvdiffrec: 0.08, 0.5); levels in between are spaced linearly; the coarsest level is 1.0.
        max_nnz_per_level: bound on the non-zeros of each level's filter matrix (memory ~16 bytes each,
            forward + transpose); None = 2^24 (~270 MB) on the CPU, 2^26 (~1 GB) on CUDA. A level whose
            lobe needs more gathers it from a coarser mip (see the module docstring). Face size 128 stays
            exact at 2^24; 256 at 2^26.
        lut_resolution: size of the DFG table (:func:`meshlift.shading.brdf_lut.brdf_lut`).

    Raises:
        RenderError: bad ``base`` shape, or a face size that cannot be halved down to ``min_res``.
    """

    def __init__(
        self,
        base: torch.Tensor,
        trainable: bool = True,
        min_res: int = 16,
        min_roughness: float = 0.08,
        max_roughness: float = 0.5,
        max_nnz_per_level: int | None = None,
        lut_resolution: int = 256,
    ) -> None:
        super().__init__()
        if not isinstance(base, torch.Tensor) or base.ndim != 4 or base.shape[0] != 6 or base.shape[1] != base.shape[2]:
            shape = tuple(base.shape) if isinstance(base, torch.Tensor) else type(base).__name__
            raise RenderError(f"EnvironmentLight(base): expected a cube map [6, R, R, 3], got {shape}")
        if base.shape[-1] != 3:
            raise RenderError(f"EnvironmentLight(base): expected 3 channels (RGB), got {base.shape[-1]}")
        if not base.is_floating_point():
            raise RenderError(f"EnvironmentLight(base): expected a float tensor, got {base.dtype}")
        res = base.shape[1]
        r = res
        while r > min_res:
            if r % 2:
                raise RenderError(
                    f"EnvironmentLight(base): face size {res} cannot be halved down to min_res={min_res} "
                    f"(reaches odd size {r}); use a power of two such as 64, 128 or 256"
                )
            r //= 2
        if not (0.0 < min_roughness < max_roughness < 1.0):
            raise RenderError(
                f"EnvironmentLight: need 0 < min_roughness < max_roughness < 1, got {min_roughness}, {max_roughness}"
            )
        self.base = torch.nn.Parameter(base.detach().clone(), requires_grad=trainable)
        self.min_res = int(min_res)
        self.min_roughness = float(min_roughness)
        self.max_roughness = float(max_roughness)
        self.max_nnz_per_level = None if max_nnz_per_level is None else int(max_nnz_per_level)
        self.lut_resolution = int(lut_resolution)
        self.specular: list[torch.Tensor] | None = None
        self.diffuse: torch.Tensor | None = None
        self._lut: torch.Tensor | None = None

    # -- construction -------------------------------------------------------------------------------

    @classmethod
    def constant(cls, res: int, value: float | tuple[float, float, float] = 0.5, **kwargs) -> "EnvironmentLight":
        """A uniform light of ``value`` (per RGB channel) at face size ``res``."""
        v = torch.as_tensor(value, dtype=torch.float32).reshape(-1).expand(3)
        return cls(v.reshape(1, 1, 1, 3).expand(6, res, res, 3).contiguous(), **kwargs)

    @classmethod
    def random(cls, res: int, scale: float = 0.5, bias: float = 0.25, seed: int = 0, **kwargs) -> "EnvironmentLight":
        """nvdiffrec's trainable initialisation: uniform noise ``U[0, 1) * scale + bias`` per texel."""
        g = torch.Generator().manual_seed(seed)
        return cls(torch.rand(6, res, res, 3, generator=g) * scale + bias, **kwargs)

    @classmethod
    def from_latlong(cls, img: torch.Tensor | np.ndarray, res: int, **kwargs) -> "EnvironmentLight":
        """Build a light from a lat-long map ``[H, 2H, 3]`` (linear HDR, docs/conventions.md §8).

        Args:
            img: ``[H, W, 3]`` lat-long radiance (numpy or torch; not modified).
            res: cube face size.
            **kwargs: forwarded to the constructor.
        """
        t = torch.as_tensor(np.asarray(img) if not isinstance(img, torch.Tensor) else img).to(torch.float32)
        if t.ndim != 3 or t.shape[-1] < 3:
            raise RenderError(f"EnvironmentLight.from_latlong(img): expected [H, W, 3], got {tuple(t.shape)}")
        return cls(latlong_to_cube(t[..., :3], int(res)), **kwargs)

    def clone(self) -> "EnvironmentLight":
        """A detached copy with the same settings (mips not built)."""
        return EnvironmentLight(
            self.base.detach(),
            trainable=self.base.requires_grad,
            min_res=self.min_res,
            min_roughness=self.min_roughness,
            max_roughness=self.max_roughness,
            max_nnz_per_level=self.max_nnz_per_level,
            lut_resolution=self.lut_resolution,
        )

    # -- export -------------------------------------------------------------------------------------

    def to_latlong(self, height: int = 256) -> torch.Tensor:
        """The base cube map as a lat-long map ``[height, 2 height, 3]`` (detached)."""
        with torch.no_grad():
            return cube_to_latlong(self.base.detach(), int(height))

    # -- training helpers ---------------------------------------------------------------------------

    @torch.no_grad()
    def clamp_(self, min: float | None = None, max: float | None = None) -> None:  # noqa: A002
        """Clamp :attr:`base` in place (no gradient), e.g. ``clamp_(min=0.0)`` after each step."""
        self.base.clamp_(min=min, max=max)

    def regularizer(self) -> torch.Tensor:
        """nvdiffrec's light regulariser: mean |base - gray(base)| (pushes the light towards white)."""
        white = self.base.mean(dim=-1, keepdim=True)
        return torch.mean(torch.abs(self.base - white))

    # -- split sum ----------------------------------------------------------------------------------

    def level_roughness(self, n_levels: int) -> list[float]:
        """Roughness of each prefiltered level: linear min->max over all but the last, 1.0 on the last."""
        if n_levels == 1:
            return [1.0]
        inner = n_levels - 1
        if inner == 1:
            return [self.min_roughness, 1.0]
        step = (self.max_roughness - self.min_roughness) / (inner - 1)
        return [self.min_roughness + step * i for i in range(inner)] + [1.0]

    def get_mip(self, roughness: torch.Tensor) -> torch.Tensor:
        """Fractional mip level for a roughness (nvdiffrec's mapping; inverse of :meth:`level_roughness`).

        Args:
            roughness: ``[...]`` perceptual roughness.

        Returns:
            ``[...]`` level in [0, n_levels - 1].
        """
        if self.specular is None:
            raise RenderError("EnvironmentLight.get_mip: call build_mips() first")
        n = len(self.specular)
        if n == 1:
            return torch.zeros_like(roughness)
        lo, hi = self.min_roughness, self.max_roughness
        low = (torch.clamp(roughness, lo, hi) - lo) / (hi - lo) * (n - 2)
        high = (torch.clamp(roughness, hi, 1.0) - hi) / (1.0 - hi) + (n - 2)
        return torch.where(roughness < hi, low, high)

    def build_mips(self, cutoff: float = 0.99) -> None:
        """Rebuild the prefiltered specular levels and the diffuse cube from :attr:`base` (differentiable).

        Levels: ``base`` box-filtered by 2 until the face size is <= ``min_res``; level i (of n) is
        GGX-prefiltered with :meth:`level_roughness` ``[i]``; the diffuse cube is the cosine filter of the
        coarsest (unfiltered) level.

        Args:
            cutoff: fraction of each GGX lobe kept (nvdiffrec's 0.99).
        """
        levels = [self.base]
        while levels[-1].shape[1] > self.min_res:
            levels.append(avg_pool_cube(levels[-1]))
        self.diffuse = diffuse_prefilter(levels[-1])
        rough = self.level_roughness(len(levels))
        budget = self.max_nnz_per_level
        if budget is None:
            budget = 1 << 26 if self.base.device.type == "cuda" else 1 << 24
        spec = []
        for i, r in enumerate(rough):
            out_res = levels[i].shape[1]
            src = i
            theta_cut = math.acos(ggx_cutoff_cos(float(r), float(cutoff)))
            # Bounded memory: gather wide lobes from a coarser level when the full one is too big, but
            # keep >= 2 source texels (angular size ~2/R at a face centre) across the cutoff radius.
            while (
                src + 1 < len(levels)
                and _estimate_nnz(out_res, levels[src].shape[1], r, cutoff) > budget
                and 2.0 / levels[src + 1].shape[1] <= 0.5 * theta_cut
            ):
                src += 1
            nnz = _estimate_nnz(out_res, levels[src].shape[1], r, cutoff)
            if nnz > budget:
                warnings.warn(
                    f"EnvironmentLight: the roughness-{r:.3g} level ({out_res}^2 per face) needs ~{nnz / 1e6:.0f}M "
                    f"filter entries (~{nnz * 16 / 2**30:.1f} GB), over max_nnz_per_level={budget}; lower the light "
                    "resolution (env_res) or raise max_nnz_per_level",
                    stacklevel=2,
                )
            spec.append(specular_prefilter(levels[src], r, cutoff, out_res=out_res))
        self.specular = spec

    def _get_lut(self, device: torch.device) -> torch.Tensor:
        if self._lut is None or self._lut.device != device:
            self._lut = brdf_lut(self.lut_resolution, device=device)
        return self._lut

    def shade(
        self,
        gb_pos: torch.Tensor,
        gb_normal: torch.Tensor,
        kd: torch.Tensor,
        ks: torch.Tensor,
        view_pos: torch.Tensor,
        specular: bool = True,
        backend: str | None = None,
    ) -> torch.Tensor:
        """Split-sum shading (nvdiffrec ``EnvironmentLight.shade`` semantics).

        Args:
            gb_pos: ``[..., 3]`` world-space positions (e.g. a G-buffer ``[B, H, W, 3]``).
            gb_normal: ``[..., 3]`` unit shading normals (from
                :func:`meshlift.shading.normals.prepare_shading_normal`).
            kd: ``[..., 3]`` linear albedo.
            ks: ``[..., 3]`` (occlusion, roughness, metallic).
            view_pos: ``[..., 3]`` camera positions, broadcastable (e.g. ``[B, 1, 1, 3]``).
            specular: False gives the diffuse-only model (``kd · E_d``, ``ks`` only for occlusion).
            backend: ``'auto'`` / ``'torch'`` / ``'triton'`` / None (the current
                choice, else auto: Triton for float32 CUDA tensors; :func:`meshlift.kernels.choose_backend`).
                With ``'triton'``, ``specular=True`` and all inputs ``[N, 3]`` rows, the elementwise work
                before and after the two cube lookups runs as two fused kernels
                (:mod:`meshlift.kernels.pbr_triton`) and the lookups as the cube kernels; this torch code is
                their reference twin. Otherwise the torch path runs.

        Returns:
            ``[..., 3]`` outgoing linear radiance.

        Raises:
            RenderError: :meth:`build_mips` was not called, or shapes do not end in 3.
        """
        if self.specular is None or self.diffuse is None:
            raise RenderError("EnvironmentLight.shade: call build_mips() after each update of the light")
        for name, t in (("gb_pos", gb_pos), ("gb_normal", gb_normal), ("kd", kd), ("ks", ks), ("view_pos", view_pos)):
            if t.shape[-1] != 3:
                raise RenderError(f"EnvironmentLight.shade({name}): expected [..., 3], got {tuple(t.shape)}")
        if specular and self._fused(backend, gb_pos, gb_normal, kd, ks, view_pos):
            return self._shade_fused(gb_pos, gb_normal, kd, ks, view_pos, backend)
        wo = safe_normalize(view_pos - gb_pos)
        if specular:
            roughness = ks[..., 1:2]
            metallic = ks[..., 2:3]
            spec_col = (1.0 - metallic) * 0.04 + kd * metallic
            diff_col = kd * (1.0 - metallic)
        else:
            diff_col = kd
        lead = torch.broadcast_shapes(wo.shape, gb_normal.shape, kd.shape, ks.shape)
        nrm = gb_normal.expand(lead)
        shaded = sample_cube(self.diffuse, nrm, backend=backend) * diff_col
        if specular:
            wo = wo.expand(lead)
            reflvec = safe_normalize(reflect(wo, nrm))
            n_dot_v = torch.clamp(dot(wo, nrm), min=1e-4)
            fg = lookup_brdf_lut(self._get_lut(nrm.device).to(nrm.dtype), n_dot_v, roughness.expand(*lead[:-1], 1))
            level = self.get_mip(roughness.expand(*lead[:-1], 1))[..., 0]
            spec = sample_cube_mip(self.specular, reflvec, level, backend=backend)
            shaded = shaded + spec * (spec_col * fg[..., 0:1] + fg[..., 1:2])
        return shaded * (1.0 - ks[..., 0:1])

    @staticmethod
    def _fused(backend, *rows: torch.Tensor) -> bool:
        """Whether :meth:`shade` takes the fused Triton path: ``[N, 3]`` float32 rows on one device."""
        first = rows[0]
        if first.ndim != 2 or any(t.shape != first.shape or t.device != first.device or t.dtype != torch.float32
                                  for t in rows):
            return False
        return choose_backend("shading", backend, first.device, first.dtype) == "triton"

    def _shade_fused(self, gb_pos, gb_normal, kd, ks, view_pos, backend) -> torch.Tensor:
        """:meth:`shade` (specular) as prep kernel → two cube lookups → combination kernel."""
        from meshlift.kernels.pbr_triton import shade_combine_triton, shade_prep_triton

        reflvec, level = shade_prep_triton(gb_pos, gb_normal, view_pos, ks, self.min_roughness,
                                           self.max_roughness, len(self.specular))
        diffuse = sample_cube(self.diffuse, gb_normal, backend=backend)
        spec = sample_cube_mip(self.specular, reflvec, level, backend=backend)
        lut = self._get_lut(gb_pos.device).to(torch.float32)
        return shade_combine_triton(gb_pos, gb_normal, view_pos, kd, ks, diffuse, spec, lut)
