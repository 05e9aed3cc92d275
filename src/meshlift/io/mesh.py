"""Mesh file dispatch: :func:`load_mesh` / :func:`save_mesh` by file suffix.

Read: ``.obj`` (+MTL), ``.ply``, ``.glb`` / ``.gltf`` (meshlift's own readers), ``.off`` and ``.stl``
(through trimesh, geometry only). Write: ``.obj``, ``.ply``, ``.glb``. Conventions: docs/conventions.md §9.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np
import torch

from meshlift.errors import MeshError, shared_data_hint
from meshlift.structures.mesh import Mesh

READ_SUFFIXES = (".obj", ".ply", ".glb", ".gltf", ".off", ".stl")
WRITE_SUFFIXES = (".obj", ".ply", ".glb")


def load_mesh(path: str | Path) -> Mesh:
    """Read a mesh file; the reader is chosen by suffix (case-insensitive).

    Args:
        path: one of ``.obj .ply .glb .gltf .off .stl``.

    Returns:
        :class:`Mesh` (see each reader for what is kept). A file with no faces (a point cloud PLY)
        gives a mesh with ``t_pos_idx`` of shape ``[0, 3]``.

    Raises:
        MeshError: missing file, unknown suffix, unreadable or corrupt content.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if not path.exists():
        raise MeshError(f"{path}: file does not exist; check the path (a relative one starts from the current "
                        f"folder, {Path.cwd()}){shared_data_hint(path)}")
    if path.is_dir():
        raise MeshError(f"{path}: is a folder; give a mesh file ({', '.join(READ_SUFFIXES)})")
    if suffix == ".obj":
        from meshlift.io.obj import load_obj

        return load_obj(path)
    if suffix == ".ply":
        from meshlift.io.ply import load_ply

        return load_ply(path)
    if suffix in (".glb", ".gltf"):
        from meshlift.io.glb import load_glb

        return load_glb(path)
    if suffix in (".off", ".stl"):
        return _load_trimesh(path)
    raise MeshError(f"{path}: unknown mesh format {suffix!r}; supported: {', '.join(READ_SUFFIXES)}")


def not_a_surface_message(path: str | Path, need: str, mesh: Optional[Mesh] = None) -> Optional[str]:
    """Why the file ``path`` cannot be used where a mesh with faces is needed, or None when it can.

    A ``.ply`` is judged from its header (:func:`meshlift.io.ply_header.ply_contents`: a 3D Gaussian
    splatting point cloud, a point cloud, an empty file), other formats from ``mesh`` (already loaded) or
    by loading it. The message names the file, what it holds (with counts), ``need`` (what the caller
    needs it for, e.g. ``"convert works on triangle meshes"``) and what to do.
    """
    from meshlift.io.ply_header import counted, ply_contents

    path = Path(path)
    info = None
    if path.suffix.lower() == ".ply":
        info = ply_contents(path)
    if info is not None:
        kind, what = info.kind, info.describe()
    else:
        if mesh is None:
            mesh = load_mesh(path)
        if mesh.num_faces > 0:
            return None
        kind = "point_cloud" if mesh.num_vertices else "empty"
        what = (f"a point cloud ({counted(mesh.num_vertices, 'point')}, 0 faces)" if mesh.num_vertices
                else "no vertices and no faces (an empty file)")
    if kind == "mesh":
        return None
    fix = {
        "gaussians": f"a mesh of the scene comes from `meshlift reconstruct DATA --method milo` (Gaussians and a "
                     f"mesh); `meshlift render {path} --turntable --out DIR` shows the Gaussians themselves",
        "point_cloud": "a point cloud has no surface: reconstruct one first (e.g. screened Poisson in MeshLab or "
                       "Open3D), or give the mesh file",
        "empty": "export the file again",
    }[kind]
    if info is not None and info.missing_gaussian_properties:
        fix = (f"it carries some 3DGS properties but lacks {list(info.missing_gaussian_properties)}: if it is meant "
               "as Gaussian splats, export it in the full 3DGS layout (x y z f_dc_0-2 f_rest_* opacity scale_0-2 "
               "rot_0-3); " + fix)
    return f"{path}: holds {what}, not a mesh with faces; {need}. {fix[0].upper()}{fix[1:]}"


def load_surface_mesh(path: str | Path, need: str) -> Mesh:
    """:func:`load_mesh`, refusing a file that holds no surface (a 3DGS point cloud, a point cloud, an empty
    file) with one :class:`MeshError` naming the file, what it holds, ``need`` and what to do
    (:func:`not_a_surface_message`). A 3DGS PLY is refused from its header, before its body is read.

    Returns:
        :class:`Mesh` with at least one face.

    Raises:
        MeshError: as :func:`load_mesh`, or the file holds no faces.
    """
    path = Path(path)
    if path.suffix.lower() == ".ply" and path.is_file():
        msg = not_a_surface_message(path, need)
        if msg is not None:
            raise MeshError(msg)
    mesh = load_mesh(path)
    msg = None if mesh.num_faces > 0 else not_a_surface_message(path, need, mesh)
    if msg is not None:
        raise MeshError(msg)
    if mesh.num_faces == 0:  # a PLY whose header announced faces that did not load
        raise MeshError(f"{path}: no faces could be read; {need}. Export the file again")
    return mesh


def _load_trimesh(path: Path) -> Mesh:
    import trimesh

    try:
        tm = trimesh.load(str(path), force="mesh", process=False)
    except Exception as exc:  # trimesh raises many exception types
        raise MeshError(f"{path}: cannot read ({type(exc).__name__}: {exc})") from exc
    v = np.asarray(tm.vertices, dtype=np.float32).reshape(-1, 3)
    f = np.asarray(tm.faces, dtype=np.int64).reshape(-1, 3)
    if path.suffix.lower() == ".stl" and len(f):  # STL stores a triangle soup: weld exact duplicates
        uniq, inv = np.unique(v, axis=0, return_inverse=True)
        v, f = uniq, inv.reshape(-1)[f]
    color = None
    vc = getattr(getattr(tm, "visual", None), "vertex_colors", None)
    if getattr(tm.visual, "kind", None) == "vertex" and vc is not None and len(vc) == len(v):
        from meshlift.io._textures import srgb_to_linear_np

        color = torch.from_numpy(srgb_to_linear_np(np.asarray(vc)[:, :3] / 255.0))
    return Mesh(v_pos=torch.from_numpy(v), t_pos_idx=torch.from_numpy(f), v_color=color)


def save_mesh(path: str | Path, mesh: Mesh, **kwargs) -> list[Path]:
    """Write ``mesh``; the writer is chosen by suffix (``.obj``, ``.ply``, ``.glb``).

    Args:
        path: output file; its folder is created.
        mesh: the mesh (not modified).
        **kwargs: passed to the writer (``save_obj(write_colors=)``, ``save_glb(occlusion=)``,
            ``save_ply(write_normals=)``).

    Returns:
        Every path written (OBJ also writes MTL and textures).

    Raises:
        MeshError: unknown suffix.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".obj":
        from meshlift.io.obj import save_obj

        return save_obj(path, mesh, **kwargs)
    if suffix == ".ply":
        from meshlift.io.ply import save_ply

        return [save_ply(path, mesh, **kwargs)]
    if suffix == ".glb":
        from meshlift.io.glb import save_glb

        return [save_glb(path, mesh, **kwargs)]
    raise MeshError(f"{path}: cannot write {suffix!r}; supported: {', '.join(WRITE_SUFFIXES)}")


def find_asset(asset: str | Path) -> tuple[Path, Optional[Path]]:
    """``(mesh file, light probe or None)`` of a mesh file or an asset folder as reconstructions write it
    (``mesh/mesh.obj`` or ``mesh.glb``, with ``probe.hdr``; else the first mesh file in the folder). A mesh
    file inside such a folder (``RUN/mesh.glb``, ``RUN/mesh/mesh.obj``) gets ``RUN/probe.hdr`` too.

    Raises:
        MeshError: not a file or folder, or a folder without a mesh.
    """
    asset = Path(asset)
    if asset.is_file():
        run = asset.parent.parent if asset.parent.name == "mesh" else asset.parent
        probe = run / "probe.hdr"
        return asset, (probe if probe.is_file() else None)
    if not asset.exists():
        raise MeshError(f"{asset} does not exist; give a mesh file (.obj, .glb, .ply, ...) or a run's output folder")
    if not asset.is_dir():
        raise MeshError(f"{asset}: not a mesh file or a folder")
    for cand in (asset / "mesh" / "mesh.obj", asset / "mesh.glb", asset / "mesh.obj"):
        if cand.is_file():
            break
    else:
        found = sorted(p for p in asset.iterdir() if p.suffix.lower() in READ_SUFFIXES)
        if not found:
            raise MeshError(f"{asset}: no mesh found (expected mesh/mesh.obj or mesh.glb, as reconstructions write)")
        cand = found[0]
    probe = asset / "probe.hdr"
    return cand, (probe if probe.is_file() else None)
