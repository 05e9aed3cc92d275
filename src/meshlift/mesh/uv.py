"""UV unwrapping with xatlas, decimating first when the mesh is large.

Pass 2 of nvdiffrec (Munkberg et al., "Extracting Triangular 3D Models, Materials, and Lighting From
Images", CVPR 2022, Sec. 3 "Pass 2") unwraps the pass-1 mesh with xatlas (Young, 2018; a C++ port of
Castaño's thekla_atlas: chart segmentation by region growing + LSCM parameterisation + packing) and
then bakes the neural material field into 2D textures (:mod:`meshlift.mesh.bake`).

UVs follow docs/conventions.md §7: internal glTF origin, (0, 0) = top-left corner of the texture image,
v pointing down. xatlas writes texel coordinates normalised by the atlas size; we store them as they come
(an atlas is a bijection of charts onto the unit square, so any fixed orientation is a valid internal
layout, and baking and sampling use the same convention).
"""

from __future__ import annotations

import logging
import math
import warnings
from dataclasses import replace
from typing import Optional

import numpy as np
import torch

from meshlift.errors import MeshError
from meshlift.structures.mesh import Mesh

logger = logging.getLogger(__name__)

#: Default face budget above which :func:`unwrap` decimates before calling xatlas. xatlas costs about
#: 0.5 s per 1k faces on one core for a smooth surface, and far more for a mesh of many parts (see
#: ``mesh/_xatlas_job.py``; the slabs of ``pieces`` bring both down).
DEFAULT_MAX_FACES_FOR_XATLAS = 100_000

#: ``unwrap(pieces=None)``: one xatlas piece per this many faces (``mesh/_xatlas_job.py``: each piece's charts
#: are segmented on their own task), at most :data:`MAX_XATLAS_PIECES`; by the face count alone, so the same
#: mesh gets the same atlas on every machine.
FACES_PER_XATLAS_PIECE = 5_000
MAX_XATLAS_PIECES = 16

#: Guess of the fraction of the atlas xatlas fills (its utilisation is typically 0.55-0.75); used to pick
#: ``texels_per_unit`` so the packed atlas comes out close to the requested resolution.
_ASSUMED_ATLAS_UTILIZATION = 0.6


class DecimationWarning(UserWarning):
    """:func:`unwrap` decimated the mesh before unwrapping (the returned mesh has fewer faces)."""


def _import_xatlas():
    from meshlift._deps import require

    return require("xatlas", "meshlift.mesh.uv.unwrap")


def unwrap(
    mesh: Mesh,
    *,
    max_faces_for_xatlas: int = DEFAULT_MAX_FACES_FOR_XATLAS,
    resolution: int = 1024,
    padding: int = 4,
    time_limit_s: Optional[float] = None,
    pieces: Optional[int] = None,
) -> Mesh:
    """Give ``mesh`` a UV atlas (``v_tex``, ``t_tex_idx``) computed by xatlas.

    Positions and faces are kept as they are (UV seams live in ``t_tex_idx``, not in ``v_pos``), unless
    the mesh has more than ``max_faces_for_xatlas`` faces: then it is first decimated to that many faces
    (:func:`meshlift.mesh.simplify.simplify_mesh`, quadric edge collapse with fast-simplification, cleaned of
    degenerate / non-manifold faces), and a :class:`DecimationWarning` is issued and logged, because xatlas
    takes about 0.5 s per 1k faces on one core for a smooth surface as one piece (far more for many parts;
    ``pieces`` below).

    Charts are packed into a single atlas whose size is close to ``resolution`` texels, with ``padding``
    texels between charts (and bilinear-safe borders), so textures baked at about ``resolution`` do not
    bleed across charts. Follows nvdiffrec's pass-2 use of xatlas (Munkberg et al. 2022, Sec. 3).

    Args:
        mesh: triangle mesh, ``v_pos [V, 3]`` float, ``t_pos_idx [T, 3]`` int64. Not modified; its
            existing UVs (if any) are replaced.
        max_faces_for_xatlas: face budget; larger meshes are decimated to this many faces first.
        resolution: texture resolution (texels per side) the atlas is laid out for.
        padding: gap between charts, in texels at ``resolution``.
        time_limit_s: seconds xatlas may take (it then runs in a spawned worker process that is stopped
            at the limit; ``<= 0``: do not run it). Over the limit the mesh gets :func:`face_atlas` UVs
            instead and ``extras["uv_unwrap"]["method"]`` says ``face_atlas``. None (default): no limit,
            in this process.
        pieces: xatlas gets the mesh as this many slabs of about equal face count, segmented into charts in
            parallel (``mesh/_xatlas_job.py``; a slab boundary is also a chart boundary). None (default): one
            per :data:`FACES_PER_XATLAS_PIECE` faces, at most :data:`MAX_XATLAS_PIECES`; 1 = the whole mesh.

    Returns:
        A new :class:`Mesh` with float32 ``v_tex [Vt, 2]`` in [0, 1] (internal glTF origin,
        docs/conventions.md §7) and int64 ``t_tex_idx [T, 3]`` on the input's device. ``v_nrm`` /
        ``t_nrm_idx`` / ``v_color`` are kept when no decimation happened; after decimation normals are
        dropped and vertex colours are interpolated from the closest original face. The
        material is dropped (its textures belonged to the old UVs; bake new ones with
        :func:`meshlift.mesh.bake.bake_field_to_textures`); ``extras["uv_unwrap"]`` records the atlas size,
        chart count, utilisation and whether the mesh was decimated.

    Raises:
        MeshError: the mesh has no faces, or bad ``resolution`` / ``padding`` / ``max_faces_for_xatlas`` /
            ``pieces``.
        DependencyError: xatlas is not installed.
    """
    if mesh.num_faces == 0:
        raise MeshError("unwrap: the mesh has no faces; there is nothing to parameterise")
    if resolution < 8:
        raise MeshError(f"unwrap: resolution must be >= 8 texels, got {resolution}")
    if padding < 0:
        raise MeshError(f"unwrap: padding must be >= 0 texels, got {padding}")
    if max_faces_for_xatlas < 4:
        raise MeshError(f"unwrap: max_faces_for_xatlas must be >= 4, got {max_faces_for_xatlas}")
    _import_xatlas()  # a clear DependencyError before any work

    decimated = mesh.num_faces > max_faces_for_xatlas
    if decimated:
        msg = (
            f"unwrap: mesh has {mesh.num_faces} faces > max_faces_for_xatlas={max_faces_for_xatlas}; "
            f"decimating to about {max_faces_for_xatlas} faces before xatlas (its cost grows with the faces). "
            "Raise max_faces_for_xatlas (reconstruct: --set unwrap_max_faces=N) to keep every face."
        )
        warnings.warn(msg, DecimationWarning, stacklevel=2)
        logger.warning(msg)
        from meshlift.mesh.simplify import simplify_mesh

        src = Mesh(
            v_pos=mesh.v_pos.detach().cpu(),
            t_pos_idx=mesh.t_pos_idx.cpu(),
            v_color=None if mesh.v_color is None else mesh.v_color.detach().cpu(),
        )
        base, _ = simplify_mesh(src, max_faces_for_xatlas, keep_uv=False)
        base = base.to(mesh.v_pos.device)
    else:
        base = mesh

    pos = base.v_pos.detach().cpu().numpy().astype(np.float32)
    tri = base.t_pos_idx.detach().cpu().numpy()
    if not np.all(np.isfinite(pos)):
        raise MeshError("unwrap: v_pos holds NaN or infinite values; clean the mesh first")

    # Surface area sets the texel density so the packed atlas is about `resolution` wide.
    p = pos.astype(np.float64)
    e1 = p[tri[:, 1]] - p[tri[:, 0]]
    e2 = p[tri[:, 2]] - p[tri[:, 0]]
    area = 0.5 * float(np.linalg.norm(np.cross(e1, e2), axis=1).sum())
    if area <= 0.0:
        raise MeshError("unwrap: every face is degenerate (zero total area); nothing to unwrap")

    texels_per_unit = float(resolution * math.sqrt(_ASSUMED_ATLAS_UTILIZATION / area))
    if pieces is None:
        pieces = min(MAX_XATLAS_PIECES, max(1, tri.shape[0] // FACES_PER_XATLAS_PIECE))
    if int(pieces) < 1:
        raise MeshError(f"unwrap: pieces must be >= 1, got {pieces}")
    res = _run_xatlas(pos, tri, texels_per_unit, int(padding), time_limit_s, int(pieces))
    if res is None:  # over the time limit: one square cell per two faces instead of xatlas charts
        v_tex, t_tex_idx = face_atlas(tri.shape[0], resolution=resolution, padding=padding)
        info = {"method": "face_atlas", "reason": f"xatlas took longer than its {time_limit_s:.0f} s limit",
                "decimated": bool(decimated), "faces_in": int(mesh.num_faces), "faces_out": int(base.num_faces)}
        logger.warning("unwrap: xatlas did not finish within %.0f s; using a per-face atlas (%d faces)",
                       time_limit_s, tri.shape[0])
        return _with_uvs(mesh, base, decimated, v_tex.to(mesh.v_pos.device), t_tex_idx.to(mesh.v_pos.device), info)
    if res["atlas_count"] != 1:  # pragma: no cover - resolution=0 always packs one page
        raise MeshError(f"unwrap: xatlas produced {res['atlas_count']} atlas pages, expected one")
    vmapping, indices, uvs = res["vmapping"], res["indices"], res["uvs"]
    if indices.shape[0] != tri.shape[0] or not np.array_equal(vmapping[indices], tri):
        raise MeshError(  # pragma: no cover - xatlas keeps faces in input order
            "unwrap: xatlas changed the face list; cannot attach its UVs to the input faces"
        )

    dev = mesh.v_pos.device
    v_tex = torch.from_numpy(np.clip(uvs, 0.0, 1.0).astype(np.float32)).to(dev)
    t_tex_idx = torch.from_numpy(indices.astype(np.int64)).to(dev)
    info = {
        "method": "xatlas",
        "atlas_width": res["width"],
        "atlas_height": res["height"],
        "charts": res["charts"],
        "pieces": res["pieces"],
        "utilization": res["utilization"],
        "decimated": bool(decimated),
        "faces_in": int(mesh.num_faces),
        "faces_out": int(base.num_faces),
    }
    logger.info("unwrap: %s", info)
    return _with_uvs(mesh, base, decimated, v_tex, t_tex_idx, info)


def _with_uvs(mesh: Mesh, base: Mesh, decimated: bool, v_tex: torch.Tensor, t_tex_idx: torch.Tensor,
              info: dict) -> Mesh:
    extras = dict(mesh.extras)
    extras["uv_unwrap"] = info
    if decimated:
        return replace(base, v_tex=v_tex, t_tex_idx=t_tex_idx, extras=extras)
    return replace(mesh, v_tex=v_tex, t_tex_idx=t_tex_idx, material=None, extras=extras)


def _run_xatlas(pos: np.ndarray, tri: np.ndarray, texels_per_unit: float, padding: int,
                time_limit_s: Optional[float], pieces: int = 1) -> Optional[dict]:
    """xatlas in this process (no limit), or in a spawned worker stopped after ``time_limit_s`` (→ None)."""
    from meshlift.mesh import _xatlas_job

    if time_limit_s is None:
        return _xatlas_job.generate(pos, tri, texels_per_unit, padding, pieces)
    if time_limit_s <= 0:
        return None
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures import TimeoutError as FutureTimeout

    pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
    try:
        fut = pool.submit(_xatlas_job.generate, pos, tri, texels_per_unit, padding, pieces)
        try:
            return fut.result(timeout=time_limit_s)
        except FutureTimeout:
            for p in list(getattr(pool, "_processes", {}).values()):  # xatlas cannot be interrupted: stop it
                p.terminate()
            return None
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def face_atlas(num_faces: int, *, resolution: int = 1024, padding: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
    """A per-face UV atlas: faces in pairs, each pair one square cell of an ``n × n`` grid (``n =
    ceil(sqrt(ceil(F / 2)))``), face ``2k`` the cell's lower-left half, ``2k + 1`` its upper-right half, each
    inset by ``padding`` texels at ``resolution`` (at most a sixth of the cell) so bilinear lookups stay
    inside a face. No seams are shared and texels are spent evenly per face whatever its area: the fallback
    of :func:`unwrap` when xatlas runs out of time (noisy meshes of real captures make its chart growing
    slow), and usable on its own for any triangle soup.

    Returns:
        ``(v_tex [3F, 2] float32 in [0, 1], t_tex_idx [F, 3] int64)``, corner ``j`` of face ``i`` at row
        ``3 i + j``; UV origin as :func:`unwrap` (docs/conventions.md §7).

    Raises:
        MeshError: ``num_faces < 1``, ``resolution < 8`` or ``padding < 0``.
    """
    if num_faces < 1:
        raise MeshError(f"face_atlas: num_faces must be >= 1, got {num_faces}")
    if resolution < 8 or padding < 0:
        raise MeshError(f"face_atlas: need resolution >= 8 and padding >= 0, got {resolution}, {padding}")
    cells = (num_faces + 1) // 2
    n = int(math.ceil(math.sqrt(cells)))
    size = 1.0 / n
    inset = min(padding / resolution, size / 6.0)
    k = torch.arange(num_faces, dtype=torch.int64)
    cell = k // 2
    x0 = (cell % n).to(torch.float64) * size
    y0 = (cell // n).to(torch.float64) * size
    x1, y1 = x0 + size, y0 + size
    d = inset * (1.0 + math.sqrt(2.0))  # keeps the hypotenuse `inset` away from the cell's diagonal
    lower = torch.stack([torch.stack([x0 + inset, y0 + inset], -1), torch.stack([x1 - d, y0 + inset], -1),
                         torch.stack([x0 + inset, y1 - d], -1)], 1)
    upper = torch.stack([torch.stack([x1 - inset, y1 - inset], -1), torch.stack([x0 + d, y1 - inset], -1),
                         torch.stack([x1 - inset, y0 + d], -1)], 1)
    uv = torch.where((k % 2 == 0)[:, None, None], lower, upper)
    v_tex = uv.reshape(-1, 2).clamp(0.0, 1.0).float()
    t_tex_idx = torch.arange(3 * num_faces, dtype=torch.int64).reshape(num_faces, 3)
    return v_tex, t_tex_idx
