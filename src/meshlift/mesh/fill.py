"""Filling what a mesh lacks: holes (boundary loops) and per-vertex values no view saw.

* :func:`boundary_loops` traces the closed loops of border edges (edges used by one face), following the
  faces' winding; :func:`split_loop` cuts a loop that passes a vertex twice (two holes touching at a
  vertex) into simple loops.
* :func:`fill_holes` closes the loops of border edges (walked without regard to their direction, so holes
  whose surrounding winding disagrees after an edge collapse are closed too) of at most ``max_edges`` edges:
  a loop of 3 by one triangle, a longer one by a fan of triangles around a new vertex at the loop's centroid
  (Liepa 2003, "Filling holes in meshes", Sec. 3, starts the same way, with an initial triangulation of the
  hole, before refining and fairing it; we stop there: the holes filled here are a few voxels wide). Each
  fill face runs along its border edge opposite to the face on the other side, so it is wound like the faces
  around the hole (counter-clockwise seen from outside for an outward mesh, docs/conventions.md §3), and a
  closed mesh with a hole becomes closed again. ``method="ear"`` triangulates a longer loop without a new vertex
  instead: ear clipping that always cuts the convex ear (against the loop's Newell normal) with the shortest new
  edge that is not already a mesh edge (the diagonal between its two loop neighbours; a heap, O(n log n); the fan
  when no such ear is left), which zips a long thin crack shut across its width where a centroid fan
  would throw triangles over the surface beside a curved crack (its centroid lies outside it). The new vertex of a
  fan gets the mean colour of the loop; per-corner
  UVs and normals get the loop corners' own indices and one new entry for the centre (their mean); a face
  material is that of the face along the loop's first edge.
* :func:`fill_vertex_values` gives each vertex that has no value (``known`` False: e.g. a vertex no training
  view saw) the mean of its known neighbours along the mesh edges, ring after ring (a breadth-first
  diffusion, as hole-filling in-painting on meshes does), instead of one global fallback.

Nothing here removes faces or moves existing vertices; new vertices and faces are appended.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import math

import numpy as np
import torch

from meshlift.errors import MeshError
from meshlift.mesh.rows import unique_rows
from meshlift.structures.mesh import Mesh

__all__ = ["FILL_METHODS", "FillReport", "boundary_loops", "ear_clip", "fill_holes", "fill_vertex_values", "split_loop"]


@dataclass
class FillReport:
    """What :func:`fill_holes` did."""

    loops: int = 0
    """Closed boundary loops found (after splitting at repeated vertices)."""
    filled: int = 0
    """Loops closed."""
    skipped_large: int = 0
    """Loops left open because they have more than ``max_edges`` edges."""
    skipped_elsewhere: int = 0
    """Loops left open because they pass no vertex of ``only_near``."""
    skipped_rims: int = 0
    """Loops left open as their component's longest (``skip_rims``)."""
    ear_fallbacks: int = 0
    """``method="ear"``: loops closed by the fan instead, :func:`ear_clip` finding no ear it may cut."""
    refused: int = 0
    """Loops left open because ``accept`` refused their fill (e.g. a training view sees through it)."""
    faces_added: int = 0
    vertices_added: int = 0
    largest_filled: int = 0
    """Edges of the largest loop closed."""
    notes: list = field(default_factory=list)


def boundary_loops(faces: np.ndarray) -> tuple[list[list[int]], list[int], int]:
    """Closed boundary loops of a triangle list, following the faces' winding.

    Args:
        faces: ``[T, 3]`` int vertex indices.

    Returns:
        ``(loops, face of each loop's first edge, open chains)``; each loop is a list of vertex ids with
        edges ``loop[i] -> loop[i + 1]`` used by exactly one face (that face has the edge in this direction).
        A loop may pass a vertex twice where two holes touch (:func:`split_loop`).
    """

    F = np.asarray(faces, dtype=np.int64).reshape(-1, 3)
    if not len(F):
        return [], [], 0
    e = np.stack([F[:, [0, 1]], F[:, [1, 2]], F[:, [2, 0]]], 1).reshape(-1, 2)
    fid = np.repeat(np.arange(len(F)), 3)
    _, inv, cnt = unique_rows(np.sort(e, 1), return_inverse=True, return_counts=True)
    bnd = cnt[inv.reshape(-1)] == 1
    be, bf = e[bnd], fid[bnd]
    out: dict[int, list[int]] = {}
    for j, (a, _) in enumerate(be):
        out.setdefault(int(a), []).append(j)
    used = np.zeros(len(be), dtype=bool)
    loops, first_faces, open_chains = [], [], 0
    for j0 in range(len(be)):
        if used[j0]:
            continue
        start = int(be[j0, 0])
        loop, j = [start], j0
        closed = False
        while True:
            used[j] = True
            v = int(be[j, 1])
            if v == start:
                closed = True
                break
            loop.append(v)
            nxt = [x for x in out.get(v, []) if not used[x]]
            if not nxt:
                break
            j = nxt[0]
        if closed and len(loop) >= 3:
            loops.append(loop)
            first_faces.append(int(bf[j0]))
        else:
            open_chains += 1
    return loops, first_faces, open_chains


def _border_cycles(F: np.ndarray) -> tuple[list[list[int]], dict]:
    """Cycles of border edges walked without regard to their direction (after an edge collapse or a removed
    face the winding around a hole may disagree, which :func:`boundary_loops` cannot follow), and a map
    ``(a, b) -> (face, True when that face has the directed edge a -> b)`` for both directions of each
    border edge. In a mesh whose edges have at most two faces every vertex has an even number of border
    edges, so each walk closes."""

    if not len(F):
        return [], {}
    e = np.stack([F[:, [0, 1]], F[:, [1, 2]], F[:, [2, 0]]], 1).reshape(-1, 2)
    fid = np.repeat(np.arange(len(F)), 3)
    _, inv, cnt = unique_rows(np.sort(e, 1), return_inverse=True, return_counts=True)
    bnd = cnt[inv.reshape(-1)] == 1
    be, bf = e[bnd].tolist(), fid[bnd].tolist()
    edge_face: dict[tuple[int, int], tuple[int, bool]] = {}
    adj: dict[int, list[int]] = {}
    for j, ((a, b), t) in enumerate(zip(be, bf)):
        edge_face[(a, b)], edge_face[(b, a)] = (t, True), (t, False)
        adj.setdefault(a, []).append(j)
        adj.setdefault(b, []).append(j)
    used = [False] * len(be)
    cycles = []
    for j0 in range(len(be)):
        if used[j0]:
            continue
        start, v = be[j0]
        cyc, j = [start], j0
        while True:
            used[j] = True
            if v == start:
                break
            cyc.append(v)
            nxt = next((x for x in adj[v] if not used[x]), None)
            if nxt is None:  # only where an edge has more than two faces; left open
                cyc = []
                break
            j = nxt
            a, b = be[j]
            v = b if a == v else a
        if len(cyc) >= 3:
            cycles.append(cyc)
    return cycles, edge_face


def split_loop(loop: list[int]) -> list[list[int]]:
    """Simple loops (no repeated vertex) of a closed vertex loop that may pass a vertex more than once:
    each time the walk returns to a vertex already on the path, the cycle since then is cut off. Pieces of
    fewer than 3 vertices (a doubled edge) are dropped. The edges of the pieces are the loop's edges."""
    out, path, where = [], [], {}
    for v in loop + loop[:1]:
        if v in where:
            k = where[v]
            piece = path[k:]
            for u in piece:
                where.pop(u, None)
            path = path[:k]
            if len(piece) >= 3:
                out.append(piece)
        where[v] = len(path)
        path.append(v)
    return out


def _corner_index(F: np.ndarray, idx: np.ndarray, face: int, vertex: int) -> int:
    """The per-corner index (``idx`` = ``t_tex_idx`` or ``t_nrm_idx``) of ``vertex`` in ``face``."""
    return int(idx[face, int(np.flatnonzero(F[face] == vertex)[0])])


def _rim_loops(F: np.ndarray, pieces: list, num_vertices: int, edge_face: dict) -> set:
    """Indices into ``pieces`` of each connected component's longest loop (its outer rim, when it is open); a
    loop's component is that of the face along its first edge (``edge_face`` of :func:`_border_cycles`)."""
    import scipy.sparse as sp
    from scipy.sparse.csgraph import connected_components

    # vertex components along the edges: not clean.face_components, since clean imports this module
    e = np.concatenate([F[:, [0, 1]], F[:, [1, 2]]])
    _, vlabel = connected_components(sp.coo_matrix((np.ones(len(e)), (e[:, 0], e[:, 1])),
                                                   shape=(num_vertices, num_vertices)), directed=False)
    label = vlabel[F[:, 0]]  # each face's component
    best: dict = {}
    for i, lp in enumerate(pieces):
        c = int(label[edge_face[(lp[0], lp[1])][0]])
        if c not in best or len(lp) > len(pieces[best[c]]):
            best[c] = i
    return set(best.values())


#: The triangulations of :func:`fill_holes` for loops of more than 3 edges.
FILL_METHODS = ("fan", "ear")


def ear_clip(points: np.ndarray, is_edge=None) -> list[tuple[int, int, int]] | None:
    """Triangulate a closed polygon (3D) by clipping, each time, the convex ear whose new edge is shortest.

    Args:
        points: ``[n, 3]`` float positions of the loop's vertices in loop order, ``n >= 3``.
        is_edge: optional ``(i, j) -> bool`` on loop indices: True when the new edge ``i–j`` already exists (in
            the mesh around the hole): such an ear would give that edge a third face, and is not cut.

    Returns:
        ``n - 2`` triangles as index triples into ``points``, each ``(prev, ear, next)`` in loop order (the caller
        reverses them to wind against the faces beside the hole), or None when at some point no ear may be cut
        (every remaining corner reflex against the loop's Newell normal or closing an existing edge: the caller
        falls back to the fan). No new vertex; a thin crack is zipped across its width. Not tested against the
        polygon's other edges, so a strongly self-overlapping loop may still get overlapping triangles.
    """
    import heapq

    n = len(points)
    if n < 3:
        return []
    P = np.asarray(points, dtype=np.float64)
    normal = np.cross(P, np.roll(P, -1, axis=0)).sum(0)  # Newell: the loop's area vector
    scale = float(np.linalg.norm(normal))
    prev = np.roll(np.arange(n), 1).tolist()
    nxt = np.roll(np.arange(n), -1).tolist()
    version = [0] * n
    alive = [True] * n

    def cost(i: int) -> float:
        a, b = prev[i], nxt[i]
        if scale > 0 and float(np.dot(np.cross(P[i] - P[a], P[b] - P[i]), normal)) < -1e-12 * scale:
            return math.inf  # reflex: the ear's triangle would lie outside the hole
        if is_edge is not None and is_edge(a, b):
            return math.inf
        return float(np.linalg.norm(P[a] - P[b]))

    heap = [(cost(i), i, 0) for i in range(n)]
    heapq.heapify(heap)
    tris: list[tuple[int, int, int]] = []
    left = n
    while left > 3:
        if not heap:
            return None
        c, i, ver = heapq.heappop(heap)
        if not alive[i] or ver != version[i]:
            continue
        if c == math.inf:
            return None
        a, b = prev[i], nxt[i]
        tris.append((a, i, b))
        alive[i] = False
        nxt[a], prev[b] = b, a
        left -= 1
        for j in (a, b):
            version[j] += 1
            heapq.heappush(heap, (cost(j), j, version[j]))
    i = next(k for k in range(n) if alive[k])
    tris.append((prev[i], i, nxt[i]))
    return tris


def fill_holes(mesh: Mesh, *, max_edges: int = 0, only_near: np.ndarray | None = None,
               skip_rims: bool = False, method: str = "fan", accept=None) -> tuple[Mesh, FillReport]:
    """Close the boundary loops of ``mesh`` (module docstring): one triangle for 3 edges, a centroid fan beyond.

    Args:
        mesh: triangle mesh (not modified); welded (shared vertices along its edges), consistently wound.
        max_edges: close only loops of at most this many edges (0 = every loop). An open surface's outer
            rim is a loop too: bound it for meshes that are open on purpose.
        only_near: optional ``[V]`` bool: close only loops through at least one such vertex (e.g. the
            vertices of faces just removed, so only the holes that removal opened are closed).
        method: how a loop of more than 3 edges is closed (:data:`FILL_METHODS`): ``"fan"``, triangles around a
            new vertex at its centroid; ``"ear"``, :func:`ear_clip` (no new vertex; the shortest new edge first).
        skip_rims: leave each connected component's longest loop open whatever its length: the outer rim of
            an open surface (a whole-scene mesh's edge of view), which a fan would close with a membrane across
            the view (the CPU fox at 128³ cells a side: 11.3 dB with every loop up to 4096 edges closed, 19.9 dB
            with the rims left open).

    Returns:
        ``(mesh, FillReport)``; the faces and vertices of the fills are appended after the input's.

    Raises:
        MeshError: ``max_edges`` negative, ``only_near`` not a ``[V]`` bool mask, or an unknown ``method``.
    """
    if method not in FILL_METHODS:
        raise MeshError(f"fill_holes: method must be one of {FILL_METHODS}, got {method!r}")
    if isinstance(max_edges, bool) or not isinstance(max_edges, (int, np.integer)) or max_edges < 0:
        raise MeshError(f"fill_holes: max_edges must be an int >= 0 (0 = every loop), got {max_edges!r}")
    V = mesh.num_vertices
    if only_near is not None:
        only_near = np.asarray(only_near)
        if only_near.dtype != bool or only_near.shape != (V,):
            raise MeshError(f"fill_holes: only_near must be a [V] = [{V}] bool mask of vertices, got "
                            f"{only_near.dtype} {only_near.shape}")
    rep = FillReport()
    F = mesh.t_pos_idx.detach().cpu().numpy().astype(np.int64)
    raw, edge_face = _border_cycles(F)
    pieces = [p for lp in raw for p in split_loop(lp)]
    rep.loops = len(pieces)
    rims = _rim_loops(F, pieces, V, edge_face) if skip_rims and pieces else set()
    has_edge = None
    if method == "ear" and pieces:  # the mesh's edges as sorted keys (an ear must not close an existing edge)
        e = np.sort(np.concatenate([F[:, [0, 1]], F[:, [1, 2]], F[:, [2, 0]]]), axis=1)
        keys = np.unique(e[:, 0] * np.int64(V) + e[:, 1])

        def has_edge(u: int, w: int) -> bool:
            k = min(u, w) * V + max(u, w)
            at = int(np.searchsorted(keys, k))
            return at < len(keys) and int(keys[at]) == k
    P = mesh.v_pos.detach().cpu().double().numpy()
    col = None if mesh.v_color is None else mesh.v_color.detach().cpu().double().numpy()
    FT = None if mesh.t_tex_idx is None else mesh.t_tex_idx.cpu().numpy()
    FN = None if mesh.t_nrm_idx is None else mesh.t_nrm_idx.cpu().numpy()
    UV = None if FT is None else mesh.v_tex.detach().cpu().double().numpy()
    NR = None if FN is None else mesh.v_nrm.detach().cpu().double().numpy()
    FM = mesh.extras.get("face_material")
    fm = FM.cpu().numpy() if isinstance(FM, torch.Tensor) and len(FM) == len(F) else None
    new_p, new_c, new_uv, new_n = [], [], [], []
    add_f, add_ft, add_fn, add_fm = [], [], [], []
    n_uv = 0 if UV is None else len(UV)
    n_nr = 0 if NR is None else len(NR)
    plans = []
    for i_lp, lp in enumerate(pieces):
        if i_lp in rims:
            rep.skipped_rims += 1
            continue
        if max_edges and len(lp) > max_edges:
            rep.skipped_large += 1
            continue
        if only_near is not None and not only_near[lp].any():
            rep.skipped_elsewhere += 1
            continue
        n = len(lp)
        if n == 3 and len({edge_face[(lp[i], lp[(i + 1) % 3])][0] for i in range(3)}) == 1:
            continue  # the rim of a lone triangle: its fill would be the triangle's back
        # each border edge's face and whether that face runs along it as the loop does (then the fill runs back)
        along = [edge_face[(lp[i], lp[(i + 1) % n])] for i in range(n)]
        ears = None
        if n > 3 and method == "ear":
            ears = ear_clip(P[lp], is_edge=lambda a, c, lp=lp: has_edge(lp[a], lp[c]))
            rep.ear_fallbacks += ears is None
        CENTRE = -1  # the fan's new vertex, numbered when the loop is closed
        if n == 3:
            tris = [lp[::-1] if sum(fwd for _, fwd in along) >= 2 else list(lp)]
        elif ears is not None:  # the faces run along the loop (most edges): the fill runs against it
            back = 2 * sum(fwd for _, fwd in along) >= n
            tris = [[lp[c], lp[b], lp[a]] if back else [lp[a], lp[b], lp[c]] for a, b, c in ears]
        else:
            tris = [[lp[(i + 1) % n], lp[i], CENTRE] if along[i][1] else [lp[i], lp[(i + 1) % n], CENTRE]
                    for i in range(n)]
        plans.append((lp, along, tris, any(CENTRE in t for t in tris)))
    if accept is not None and plans:
        corners, owner = [], []
        for k, (lp, _, tris, fan) in enumerate(plans):
            pts = np.concatenate([P, P[lp].mean(0)[None]]) if fan else P
            corners.append(pts[np.asarray(tris)])  # -1 (the centre) reads the appended row
            owner.append(np.full(len(tris), k, dtype=np.int64))
        keep = np.asarray(accept(np.concatenate(corners), np.concatenate(owner), len(plans)), dtype=bool)
        if keep.shape != (len(plans),):
            raise MeshError(f"fill_holes: accept must return a [{len(plans)}] bool mask, got {keep.shape}")
        rep.refused = int((~keep).sum())
        plans = [pl for pl, k in zip(plans, keep) if k]
    for lp, along, tris, fan in plans:
        n = len(lp)
        faces_of = [t for t, _ in along]
        centre = None
        if fan:
            centre = V + len(new_p)
            new_p.append(P[lp].mean(0))
            if col is not None:
                new_c.append(col[lp].mean(0))
            tris = [[centre if x == -1 else x for x in t] for t in tris]
        add_f.extend(tris)
        rep.filled += 1
        rep.largest_filled = max(rep.largest_filled, n)
        for idx, store, values, base, added, unit in ((FT, add_ft, UV, n_uv, new_uv, False),
                                                      (FN, add_fn, NR, n_nr, new_n, True)):
            if idx is None:
                continue
            corner = {lp[i]: _corner_index(F, idx, faces_of[i], lp[i]) for i in range(n)}
            if centre is None:
                store.extend([[corner[v] for v in t] for t in tris])
                continue
            mean = values[list(corner.values())].mean(0)
            if unit:
                mean = mean / max(float(np.linalg.norm(mean)), 1e-12)
            mid = base + len(added)
            added.append(mean)
            store.extend([[corner[a], corner[b], mid] for a, b, _ in tris])
        if fm is not None:
            add_fm.extend([fm[faces_of[0]]] * len(tris))
    if not add_f:
        return mesh, rep
    rep.faces_added, rep.vertices_added = len(add_f), len(new_p)
    dt = mesh.v_pos.dtype
    def cat(old: torch.Tensor, new, dtype) -> torch.Tensor:
        return torch.cat([old.detach().cpu(), torch.as_tensor(np.asarray(new), dtype=dtype)])

    out = replace(
        mesh,
        v_pos=cat(mesh.v_pos, np.asarray(new_p).reshape(-1, 3), dt),
        t_pos_idx=cat(mesh.t_pos_idx, add_f, torch.int64),
        v_color=None if col is None else cat(mesh.v_color, np.asarray(new_c).reshape(-1, col.shape[1]),
                                              mesh.v_color.dtype),
        v_tex=mesh.v_tex if FT is None else cat(mesh.v_tex, np.asarray(new_uv).reshape(-1, 2), mesh.v_tex.dtype),
        t_tex_idx=mesh.t_tex_idx if FT is None else cat(mesh.t_tex_idx, add_ft, torch.int64),
        v_nrm=mesh.v_nrm if FN is None else cat(mesh.v_nrm, np.asarray(new_n).reshape(-1, 3), mesh.v_nrm.dtype),
        t_nrm_idx=mesh.t_nrm_idx if FN is None else cat(mesh.t_nrm_idx, add_fn, torch.int64),
        extras=dict(mesh.extras),
    )
    if fm is not None:
        out.extras["face_material"] = torch.cat([FM.cpu(), torch.as_tensor(np.asarray(add_fm), dtype=FM.dtype)])
    return out, rep


def fill_vertex_values(faces: torch.Tensor, values: torch.Tensor, known: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Give every vertex without a value the mean of its known neighbours, ring after ring (module docstring).

    Args:
        faces: ``[T, 3]`` int64 vertex indices.
        values: ``[V, C]`` float per-vertex values (only the ``known`` rows are read).
        known: ``[V]`` bool, True where ``values`` holds a value.

    Returns:
        ``(values [V, C], unreached)``: a copy where each unknown vertex connected to a known one by mesh
        edges got the mean over its edges to neighbours that were known (or filled) in the ring before; ``unreached``
        vertices (in components with no known vertex) keep their input values.

    Raises:
        MeshError: shapes that do not match.
    """
    if values.ndim != 2 or known.shape != (values.shape[0],) or known.dtype != torch.bool:
        raise MeshError(f"fill_vertex_values: values must be [V, C] and known a [V] bool mask, got "
                        f"{tuple(values.shape)} and {tuple(known.shape)} {known.dtype}")
    if faces.numel() and (int(faces.min()) < 0 or int(faces.max()) >= values.shape[0]):
        raise MeshError(f"fill_vertex_values: faces index vertices outside 0..{values.shape[0] - 1}")
    out = values.clone()
    have = known.clone()
    f = faces.to(values.device).long()
    e = torch.unique(torch.cat([f[:, [0, 1]], f[:, [1, 2]], f[:, [2, 0]]]).sort(dim=1).values, dim=0)
    src, dst = torch.cat([e[:, 0], e[:, 1]]), torch.cat([e[:, 1], e[:, 0]])  # each edge once, both directions
    while True:
        w = have[src].to(values.dtype)
        cnt = torch.zeros_like(have, dtype=values.dtype).index_add_(0, dst, w)
        new = ~have & (cnt > 0)
        if not bool(new.any()):
            break
        acc = torch.zeros_like(out).index_add_(0, dst, out[src] * w[:, None])
        out[new] = acc[new] / cnt[new, None]
        have |= new
    return out, int((~have).sum())
