"""Conforming subdivision of a triangle mesh's long edges: more vertices where a vertex-coloured surface is coarser
than the photographs that colour it.

Why (measured, issue 33; benchmarks/results/2026-12-07_session31.md): the fox's whole-scene mesh (a 256³ fusion
grid) fitted to its 43 training photos renders them at 27.8 dB where the Gaussians render 34.8. One colour per
vertex holds no detail finer than the edges: in the closest training view the fox mesh's edges measure 1.6 px at
the median, 36 % of them over 2 px and 15 % over 3 px (``benchmarks/edge_pixels.py``). Splitting the edges that
are longer than a pixel or two in the closest view gives the colour fit (:mod:`meshlift.methods.milo.photo_refine`)
the samples the photos have (whether that is what the fox lacks is measured, not assumed: docs/usage/milo.md).

What. :func:`split_edges` splits a chosen set of edges at their midpoints and re-triangulates every face by how many
of its edges were split (1 → 2 faces, 2 → 3, 3 → 4: the "red-green" patterns of adaptive refinement, Bank et al.
1983, "Some Refinement Algorithms and Data Structures for Regular Local Mesh Refinement"), so a face beside a split
edge is split too and the mesh stays conforming (no T-junctions: no cracks). Every per-vertex attribute (positions,
vertex colours, per-vertex normals, per-vertex tensors in ``extras``) is interpolated at the midpoint; faces keep
their orientation. :func:`subdivide_long_edges` repeats it, each pass splitting the edges whose length over a
per-vertex scale exceeds ``max_length``, until none is or a face budget is met (then the longest go first).

Memory: one pass holds ``O(T)`` index tensors (the unique edges of the faces, their split flags, the new faces);
the face budget ``max_faces`` bounds the result. Faces with UVs or separately indexed normals are refused
(:class:`~meshlift.errors.MeshError`): the whole-scene meshes this serves have neither.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import torch

from meshlift.errors import MeshError
from meshlift.geometry.mesh_ops import face_edges
from meshlift.structures.mesh import Mesh

__all__ = ["split_edges", "subdivide_long_edges"]


def _midpoints(x: torch.Tensor, edges: torch.Tensor) -> torch.Tensor:
    return 0.5 * (x[edges[:, 0]] + x[edges[:, 1]])


def split_edges(mesh: Mesh, split: torch.Tensor, *, edges: Optional[torch.Tensor] = None,
                face_edge: Optional[torch.Tensor] = None) -> Mesh:
    """The mesh with the edges flagged by ``split`` cut at their midpoints, every face re-triangulated conformingly.

    Args:
        mesh: a triangle mesh without UVs and without separately indexed normals.
        split: ``[E]`` bool, one flag per edge of :func:`meshlift.geometry.mesh_ops.face_edges` (pass its ``edges`` /
            ``face_edge`` if computed).

    Returns:
        A new :class:`Mesh` (the input is not modified): the old vertices first, then one per split edge (in edge
        order); per-vertex attributes interpolated (normals renormalised); ``extras`` tensors whose first dimension
        is the vertex count interpolated, the rest copied.

    Raises:
        MeshError: the mesh has UVs or separately indexed normals, or ``split`` has the wrong length.
    """
    if mesh.v_tex is not None or mesh.t_tex_idx is not None or mesh.t_nrm_idx is not None:
        raise MeshError("split_edges: the mesh has UVs or separately indexed normals; subdivide before unwrapping "
                        "(or drop them)")
    V = mesh.num_vertices
    if edges is None or face_edge is None:
        edges, face_edge = face_edges(mesh.t_pos_idx, V)
    split = split.to(device=edges.device, dtype=torch.bool)
    if split.shape != (edges.shape[0],):
        raise MeshError(f"split_edges: split must be [{edges.shape[0]}] (one flag per edge), got {tuple(split.shape)}")
    dev = mesh.v_pos.device
    mid = torch.full((edges.shape[0],), -1, dtype=torch.int64, device=dev)
    n_new = int(split.sum())
    mid[split] = V + torch.arange(n_new, device=dev)
    t = mesh.t_pos_idx.to(torch.int64)
    pat = split[face_edge]  # [T, 3]
    count = pat.sum(1)
    r = torch.zeros_like(count)
    r = torch.where(count == 1, pat.to(torch.int8).argmax(1), r)  # the split edge becomes edge 0
    r = torch.where(count == 2, (pat.to(torch.int8).argmin(1) + 1) % 3, r)  # the kept edge becomes edge 2
    idx = (torch.arange(3, device=dev)[None] + r[:, None]) % 3
    v = t.gather(1, idx)
    m = mid[face_edge].gather(1, idx)
    v0, v1, v2, m0, m1, m2 = v[:, 0], v[:, 1], v[:, 2], m[:, 0], m[:, 1], m[:, 2]
    parts = []
    for k, faces in ((0, [(v0, v1, v2)]),
                     (1, [(v0, m0, v2), (m0, v1, v2)]),
                     (2, [(m0, v1, m1), (v0, m0, m1), (v0, m1, v2)]),
                     (3, [(v0, m0, m2), (m0, v1, m1), (m2, m1, v2), (m0, m1, m2)])):
        sel = count == k
        parts += [torch.stack([a[sel], b[sel], c[sel]], 1) for a, b, c in faces]
    t_new = torch.cat(parts).to(mesh.t_pos_idx.dtype)
    e = edges[split]

    def grow(x: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
        if x is None:
            return None
        return torch.cat([x, _midpoints(x, e.to(x.device)).to(x.dtype)])  # extras may live elsewhere (Mesh.to)

    v_nrm = grow(mesh.v_nrm) if mesh.v_nrm is not None and mesh.v_nrm.shape[0] == V else None
    if v_nrm is not None:
        v_nrm = torch.nn.functional.normalize(v_nrm, dim=-1)
    extras = {k: (grow(x) if isinstance(x, torch.Tensor) and x.ndim >= 1 and x.shape[0] == V else x)
              for k, x in mesh.extras.items()}
    return dataclasses.replace(mesh, v_pos=grow(mesh.v_pos), t_pos_idx=t_new, v_nrm=v_nrm,
                               v_color=grow(mesh.v_color), extras=extras)


def subdivide_long_edges(mesh: Mesh, scale: torch.Tensor, max_length: float, *, max_faces: int,
                         max_passes: int = 4) -> tuple[Mesh, dict]:
    """Split edges until none is longer than ``max_length`` × the mean ``scale`` of its two vertices.

    Args:
        mesh: a triangle mesh (see :func:`split_edges`).
        scale: ``[V]`` float, a length per vertex in world units (e.g. the world size of one pixel at the vertex in
            the closest training view; ``inf`` where an edge should never be split, e.g. unseen vertices);
            midpoints take the mean of their edge's.
        max_length: largest edge length in units of ``scale`` (> 0).
        max_faces: face budget of the result: a pass that would exceed it splits only its longest edges (each split
            edge adds two faces, one on a boundary), and the passes stop.
        max_passes: at most this many passes (each halves the split edges).

    Returns:
        ``(mesh, report)``: report ``{"passes", "faces_before", "faces_after", "split_edges", "capped"}``.

    Raises:
        MeshError: ``scale`` has the wrong shape, ``max_length`` is not positive (or as :func:`split_edges`).
    """
    if scale.shape != (mesh.num_vertices,):
        raise MeshError(f"subdivide_long_edges: scale must be [{mesh.num_vertices}] (one per vertex), got "
                        f"{tuple(scale.shape)}")
    if not max_length > 0:
        raise MeshError(f"subdivide_long_edges: max_length must be > 0, got {max_length!r}")
    rep = {"passes": 0, "faces_before": mesh.num_faces, "split_edges": 0, "capped": False}
    s = scale.to(mesh.v_pos)
    for _ in range(int(max_passes)):
        edges, face_edge = face_edges(mesh.t_pos_idx, mesh.num_vertices)
        length = (mesh.v_pos[edges[:, 0]] - mesh.v_pos[edges[:, 1]]).norm(dim=-1)
        ratio = length / (0.5 * (s[edges[:, 0]] + s[edges[:, 1]]))
        ratio = torch.nan_to_num(ratio, nan=0.0, posinf=0.0)
        split = ratio > max_length
        allowed = (int(max_faces) - mesh.num_faces) // 2
        n = int(split.sum())
        if n == 0 or allowed <= 0:
            rep["capped"] = rep["capped"] or (n > 0)
            break
        if n > allowed:
            keep = torch.topk(ratio, allowed).indices
            split = torch.zeros_like(split)
            split[keep] = True
            rep["capped"] = True
        mesh = split_edges(mesh, split, edges=edges, face_edge=face_edge)
        s = torch.cat([s, _midpoints(s, edges[split])])  # the new vertices, in split_edges' order
        rep["passes"] += 1
        rep["split_edges"] += int(split.sum())
        if rep["capped"]:
            break
    rep["faces_after"] = mesh.num_faces
    return mesh, rep
