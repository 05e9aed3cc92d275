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

import numpy as np
import torch

from meshlift.errors import MeshError
from meshlift.structures.mesh import Mesh

logger = logging.getLogger(__name__)

#: Default face budget above which :func:`unwrap` decimates before calling xatlas. xatlas costs about
#: 0.5 s per 1k faces on one core, so 100k faces is roughly a minute.
DEFAULT_MAX_FACES_FOR_XATLAS = 100_000

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
) -> Mesh:
    """Give ``mesh`` a UV atlas (``v_tex``, ``t_tex_idx``) computed by xatlas.

    Positions and faces are kept as they are (UV seams live in ``t_tex_idx``, not in ``v_pos``), unless
    the mesh has more than ``max_faces_for_xatlas`` faces: then it is first decimated to that many faces
    (:func:`meshlift.mesh.simplify.simplify_mesh`, quadric edge collapse with fast-simplification, cleaned of
    degenerate / non-manifold faces), and a :class:`DecimationWarning` is issued and logged, because xatlas
    takes about 0.5 s per 1k faces on one core.

    Charts are packed into a single atlas whose size is close to ``resolution`` texels, with ``padding``
    texels between charts (and bilinear-safe borders), so textures baked at about ``resolution`` do not
    bleed across charts. Follows nvdiffrec's pass-2 use of xatlas (Munkberg et al. 2022, Sec. 3).

    Args:
        mesh: triangle mesh, ``v_pos [V, 3]`` float, ``t_pos_idx [T, 3]`` int64. Not modified; its
            existing UVs (if any) are replaced.
        max_faces_for_xatlas: face budget; larger meshes are decimated to this many faces first.
        resolution: texture resolution (texels per side) the atlas is laid out for.
        padding: gap between charts, in texels at ``resolution``.

    Returns:
        A new :class:`Mesh` with float32 ``v_tex [Vt, 2]`` in [0, 1] (internal glTF origin,
        docs/conventions.md §7) and int64 ``t_tex_idx [T, 3]`` on the input's device. ``v_nrm`` /
        ``t_nrm_idx`` / ``v_color`` are kept when no decimation happened; after decimation normals are
        dropped and vertex colours are interpolated from the closest original face. The
        material is dropped (its textures belonged to the old UVs; bake new ones with
        :func:`meshlift.mesh.bake.bake_field_to_textures`); ``extras["uv_unwrap"]`` records the atlas size,
        chart count, utilisation and whether the mesh was decimated.

    Raises:
        MeshError: the mesh has no faces, or bad ``resolution`` / ``padding`` / ``max_faces_for_xatlas``.
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
    xatlas = _import_xatlas()

    decimated = mesh.num_faces > max_faces_for_xatlas
    if decimated:
        msg = (
            f"unwrap: mesh has {mesh.num_faces} faces > max_faces_for_xatlas={max_faces_for_xatlas}; "
            f"decimating to about {max_faces_for_xatlas} faces before xatlas (about 0.5 s per 1k faces). "
            "Raise max_faces_for_xatlas to keep every face."
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

    atlas = xatlas.Atlas()
    atlas.add_mesh(pos, tri.astype(np.uint32))
    chart_options = xatlas.ChartOptions()
    pack_options = xatlas.PackOptions()
    pack_options.resolution = 0  # one atlas page whatever its size (several pages would overlap in UV)
    pack_options.texels_per_unit = float(resolution * math.sqrt(_ASSUMED_ATLAS_UTILIZATION / area))
    pack_options.padding = int(padding)
    pack_options.bilinear = True
    atlas.generate(chart_options, pack_options)
    if atlas.atlas_count != 1:  # pragma: no cover - resolution=0 always packs one page
        raise MeshError(f"unwrap: xatlas produced {atlas.atlas_count} atlas pages, expected one")
    vmapping, indices, uvs = atlas[0]
    if indices.shape[0] != tri.shape[0] or not np.array_equal(vmapping[indices], tri):
        raise MeshError(  # pragma: no cover - xatlas keeps faces in input order
            "unwrap: xatlas changed the face list; cannot attach its UVs to the input faces"
        )

    dev = mesh.v_pos.device
    v_tex = torch.from_numpy(np.clip(uvs, 0.0, 1.0).astype(np.float32)).to(dev)
    t_tex_idx = torch.from_numpy(indices.astype(np.int64)).to(dev)
    info = {
        "atlas_width": int(atlas.width),
        "atlas_height": int(atlas.height),
        "charts": int(atlas.chart_count),
        "utilization": float(atlas.utilization),
        "decimated": bool(decimated),
        "faces_in": int(mesh.num_faces),
        "faces_out": int(base.num_faces),
    }
    logger.info("unwrap: %s", info)
    extras = dict(mesh.extras)
    extras["uv_unwrap"] = info
    if decimated:
        return replace(base, v_tex=v_tex, t_tex_idx=t_tex_idx, extras=extras)
    return replace(mesh, v_tex=v_tex, t_tex_idx=t_tex_idx, material=None, extras=extras)
