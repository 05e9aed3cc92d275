"""PLY reader and writer (binary little-endian out; ASCII and binary in).

Conventions (docs/conventions.md §9): vertex colours are ``red green blue [alpha]`` uint8, sRGB-encoded
as viewers expect (``v_color`` is linear inside); UVs use a bottom-left origin in the file
(``texture_u texture_v`` per vertex, or a per-face ``texcoord`` list of 6 floats as MeshLab writes
when UVs have seams), flipped to the internal top-left origin. PLY carries no material.
Parsing of the input header/body is delegated to trimesh's PLY parser (MIT); the element data are then
read here so no attribute is reinterpreted.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from meshlift.errors import MeshError
from meshlift.io import _textures as tex
from meshlift.structures.mesh import Mesh


def save_ply(path: str | Path, mesh: Mesh, *, write_normals: bool = True) -> Path:
    """Write ``mesh`` as binary little-endian PLY.

    Vertex properties: ``x y z`` float32; ``nx ny nz`` when normals are per vertex
    (``t_nrm_idx == t_pos_idx``) and ``write_normals``; ``red green blue [alpha]`` uint8 sRGB when
    ``v_color`` is set; ``texture_u texture_v`` when UVs are per vertex. UVs with seams are written as a
    per-face ``texcoord`` list (6 floats) instead. Faces: ``vertex_indices`` as uchar-count int32 lists.

    Args:
        path: output ``.ply`` path; its folder is created.
        mesh: the mesh (not modified).

    Returns:
        ``path``.

    Raises:
        MeshError: ``path`` does not end in ``.ply``.
    """
    path = Path(path)
    if path.suffix.lower() != ".ply":
        raise MeshError(f"save_ply: {path} must end in .ply")
    path.parent.mkdir(parents=True, exist_ok=True)
    V, T = mesh.num_vertices, mesh.num_faces
    vfields: list[tuple[str, str, np.ndarray]] = []
    vp = mesh.v_pos.detach().cpu().float().numpy()
    for i, n in enumerate("xyz"):
        vfields.append((n, "<f4", vp[:, i]))
    if write_normals and mesh.v_nrm is not None and mesh.t_nrm_idx is not None and mesh.v_nrm.shape[0] == V \
            and torch.equal(mesh.t_nrm_idx.cpu(), mesh.t_pos_idx.cpu()):
        vn = mesh.v_nrm.detach().cpu().float().numpy()
        for i, n in enumerate(("nx", "ny", "nz")):
            vfields.append((n, "<f4", vn[:, i]))
    if mesh.v_color is not None:
        c = mesh.v_color.detach().cpu().float().numpy()
        enc = c.copy()
        enc[:, :3] = tex.linear_to_srgb_np(c[:, :3])
        u8 = np.clip(np.rint(enc * 255.0), 0, 255).astype(np.uint8)
        for i, n in enumerate(("red", "green", "blue", "alpha")[: c.shape[1]]):
            vfields.append((n, "u1", u8[:, i]))
    face_uv = None
    if mesh.v_tex is not None and mesh.t_tex_idx is not None:
        uv = mesh.v_tex.detach().cpu().float().numpy().copy()
        uv[:, 1] = 1.0 - uv[:, 1]
        if uv.shape[0] == V and torch.equal(mesh.t_tex_idx.cpu(), mesh.t_pos_idx.cpu()):
            vfields.append(("texture_u", "<f4", uv[:, 0]))
            vfields.append(("texture_v", "<f4", uv[:, 1]))
        else:
            face_uv = uv[mesh.t_tex_idx.cpu().numpy()].reshape(T, 6)

    header = ["ply", "format binary_little_endian 1.0", "comment written by meshlift", f"element vertex {V}"]
    ply_types = {"<f4": "float", "u1": "uchar"}
    header += [f"property {ply_types[t]} {n}" for n, t, _ in vfields]
    header += [f"element face {T}", "property list uchar int vertex_indices"]
    if face_uv is not None:
        header.append("property list uchar float texcoord")
    header.append("end_header")
    vert = np.empty(V, dtype=[(n, t) for n, t, _ in vfields])
    for n, _, a in vfields:
        vert[n] = a
    fdt = [("n", "u1"), ("vi", "<i4", (3,))]
    if face_uv is not None:
        fdt += [("m", "u1"), ("uv", "<f4", (6,))]
    face = np.empty(T, dtype=fdt)
    face["n"] = 3
    face["vi"] = mesh.t_pos_idx.cpu().numpy().astype(np.int32)
    if face_uv is not None:
        face["m"] = 6
        face["uv"] = face_uv
    with open(path, "wb") as fh:
        fh.write(("\n".join(header) + "\n").encode("ascii"))
        fh.write(vert.tobytes())
        fh.write(face.tobytes())
    return path


def _field(data, name):
    if isinstance(data, dict):
        return data.get(name)
    if hasattr(data, "dtype") and data.dtype.names and name in data.dtype.names:
        return data[name]
    return None


def _scalar(data, name):
    """A scalar vertex property as a 1-D array (the ASCII parser gives ``[N, 1]``), or None."""
    val = _field(data, name)
    return None if val is None else np.asarray(val).reshape(-1)


def _list_field(data, name) -> list | np.ndarray | None:
    """A list property of the face element as ``[T, k]`` array or list of arrays."""
    val = _field(data, name)
    if val is None:
        return None
    if hasattr(val, "dtype") and val.dtype.names and "f1" in val.dtype.names:
        return val["f1"]
    return val


def load_ply(path: str | Path) -> Mesh:
    """Read a PLY mesh (or point cloud: zero faces) into a :class:`Mesh`.

    Returns:
        Mesh with ``v_pos [V, 3]``, ``t_pos_idx [T, 3]`` (polygons fan-triangulated), ``v_nrm`` when
        ``nx ny nz`` are present (per vertex, ``t_nrm_idx = t_pos_idx``), ``v_color`` linear
        ``[V, 3|4]`` from uint8 (/255) or float colours (sRGB-decoded), UVs from
        ``texture_u/texture_v``, ``s/t`` or ``u/v`` per vertex or a per-face ``texcoord`` list.

    Raises:
        MeshError: unreadable file, no ``vertex`` element, faces past the vertex list.
    """
    path = Path(path)
    if not path.is_file():
        raise MeshError(f"{path}: PLY file does not exist")
    try:  # trimesh's PLY body parser (module-private helpers; stable across trimesh 3.x-4.x-5.x)
        from trimesh.exchange.ply import _parse_header, _ply_ascii, _ply_binary
    except ImportError as exc:
        from meshlift.errors import DependencyError

        raise DependencyError(f"reading PLY needs trimesh's PLY parser ({exc}); pip install 'trimesh>=4'") from exc

    try:
        with open(path, "rb") as fh:
            elements, is_ascii, _ = _parse_header(fh)
            if is_ascii:
                _ply_ascii(elements, fh)
            else:
                _ply_binary(elements, fh)
    except Exception as exc:  # trimesh raises ValueError/KeyError/... on bad files
        raise MeshError(f"{path}: cannot parse PLY ({type(exc).__name__}: {exc})") from exc
    if "vertex" not in elements:
        raise MeshError(f"{path}: PLY has no 'vertex' element")
    V = int(elements["vertex"]["length"])
    if V == 0:  # an empty mesh is valid input (trimesh's ASCII parser leaves no "data" for it)
        return Mesh(v_pos=torch.zeros(0, 3), t_pos_idx=torch.zeros(0, 3, dtype=torch.int64))
    vd = elements["vertex"]["data"]
    try:
        vp = np.stack([np.asarray(_scalar(vd, k), dtype=np.float64) for k in "xyz"], axis=1)
    except (TypeError, ValueError) as exc:
        raise MeshError(f"{path}: vertex element lacks x/y/z") from exc

    faces = np.zeros((0, 3), dtype=np.int64)
    face_uv = None
    if "face" in elements and elements["face"]["length"]:
        fd = elements["face"]["data"]
        idx = None
        for name in ("vertex_indices", "vertex_index"):
            idx = _list_field(fd, name)
            if idx is not None:
                break
        if idx is None:
            raise MeshError(f"{path}: face element has no vertex_indices property")
        arr = np.asarray(idx) if not isinstance(idx, list) else None
        if arr is not None and arr.dtype != object and arr.ndim == 2:
            k = arr.shape[1]
            tri = [arr[:, [0, j, j + 1]] for j in range(1, k - 1)]
            if tri:  # fan triangles of one polygon stay consecutive
                faces = np.stack(tri, axis=1).reshape(-1, 3).astype(np.int64)
        else:
            out = []
            for poly in idx:
                poly = np.asarray(poly, dtype=np.int64)
                for j in range(1, len(poly) - 1):
                    out.append([poly[0], poly[j], poly[j + 1]])
            faces = np.asarray(out, dtype=np.int64).reshape(-1, 3)
        tc = _list_field(fd, "texcoord")
        if tc is not None:
            tca = np.asarray(tc)
            if tca.dtype != object and tca.ndim == 2 and tca.shape[1] == 6 and faces.shape[0] == tca.shape[0]:
                face_uv = tca.reshape(-1, 3, 2).astype(np.float32)
    if faces.size and (faces.min() < 0 or faces.max() >= V):
        raise MeshError(
            f"{path}: a face references vertex {int(faces.max())} but the file has {V} vertices; "
            "the file is corrupt or truncated"
        )

    v_nrm = t_nrm = None
    nrm = [_scalar(vd, k) for k in ("nx", "ny", "nz")]
    if all(n is not None for n in nrm):
        v_nrm = torch.from_numpy(np.stack(nrm, axis=1).astype(np.float32))
        t_nrm = torch.from_numpy(faces.copy())
    v_color = None
    ch = [_scalar(vd, k) for k in ("red", "green", "blue", "alpha")]
    if all(c is not None for c in ch[:3]):
        cols = [np.asarray(c) for c in ch if c is not None]
        is_int = np.issubdtype(cols[0].dtype, np.integer)
        c = np.stack([x.astype(np.float64) for x in cols], axis=1)
        if is_int:
            c = c / (65535.0 if cols[0].dtype.itemsize == 2 else 255.0)
        c = np.clip(c, 0.0, 1.0).astype(np.float32)
        c[:, :3] = tex.srgb_to_linear_np(c[:, :3])
        v_color = torch.from_numpy(c)
    v_tex = t_tex = None
    for un, vn_ in (("texture_u", "texture_v"), ("s", "t"), ("u", "v")):
        u, v = _scalar(vd, un), _scalar(vd, vn_)
        if u is not None and v is not None:
            uv = np.stack([np.asarray(u, dtype=np.float32), 1.0 - np.asarray(v, dtype=np.float32)], axis=1)
            v_tex = torch.from_numpy(uv)
            t_tex = torch.from_numpy(faces.copy())
            break
    if v_tex is None and face_uv is not None:
        face_uv[..., 1] = 1.0 - face_uv[..., 1]
        v_tex = torch.from_numpy(face_uv.reshape(-1, 2).copy())
        t_tex = torch.arange(v_tex.shape[0], dtype=torch.int64).reshape(-1, 3)
    return Mesh(
        v_pos=torch.from_numpy(vp.astype(np.float32)), t_pos_idx=torch.from_numpy(faces),
        v_tex=v_tex, t_tex_idx=t_tex, v_nrm=v_nrm, t_nrm_idx=t_nrm, v_color=v_color,
    )
