"""Clean mesh crops: cut a mesh by the planes of an (oriented) box, and close the cut.

(Removing the plane an object stands on: :mod:`meshlift.mesh.support_plane`.)

A triangle inside every plane is kept, one outside a plane dropped, one crossing a plane split exactly
at it (Sutherland–Hodgman polygon clipping, one plane at a time: Sutherland & Hodgman 1974, "Reentrant
polygon clipping"). Every new vertex is interpolated along its edge with every per-vertex attribute:
position, vertex colour, and the per-corner UVs and normals (a UV seam stays a seam; normals are
re-normalised). Vertices within ``SNAP_REL`` × the mesh diagonal of a plane are moved onto it first, so
no sliver triangles are left. The new vertices are created by one interpolation step
(:func:`_split_edges`), and unreferenced vertices dropped by the one remap primitive
(:func:`meshlift.mesh.clean.compact`), so attributes always follow.

With ``cap=True`` the cut is closed: each boundary loop whose vertices all lie on one plane is
triangulated in that plane (ear clipping, Meisters 1975, "Polygons have ears"; holes — a loop inside
another on the same plane, e.g. a torus cut through its ring — are bridged to their outer loop first,
as in Eberly 2002, "Triangulation by ear clipping"). Cap faces are wound as the reversed boundary
loop, so they are consistent with the mesh and point out of the box for an outward mesh: a closed mesh
cut by a box stays closed.

Limitations: a boundary loop that runs over two or more box faces (the mesh crosses a box *edge* or
corner) is left open and counted in ``CropReport.open_loops``; the mesh should be welded (coincident
vertices merged, :func:`meshlift.mesh.clean.clean_mesh`) for the cut edges to be shared. Cap faces get
one UV per cap (the UV of a corner on the loop, so the cap shows one texel colour), the plane's outward
normal, the vertex colours of the loop, and the material of an adjacent face.

Conventions (docs/conventions.md §3): faces counter-clockwise seen from outside. World units.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

import numpy as np
import torch

from meshlift.errors import MeshError
from meshlift.mesh.clean import compact
from meshlift.mesh.rows import unique_rows
from meshlift.mesh.fill import boundary_loops
from meshlift.structures.mesh import Mesh

__all__ = ["crop_mesh", "clip_mesh", "CropReport", "ear_clip", "is_watertight", "SNAP_REL"]

#: Vertices closer to a cutting plane than this fraction of the mesh's bbox diagonal are moved onto it.
SNAP_REL = 1e-7
#: Relative (to the loop's squared size) area below which a 2D corner counts as collinear in ear clipping.
COLLINEAR_REL = 1e-12


@dataclass
class CropReport:
    """What :func:`crop_mesh` / :func:`clip_mesh` did (counts of faces of the input mesh unless noted)."""

    faces_in: int = 0
    """Input faces kept whole."""
    faces_out: int = 0
    """Input faces dropped entirely."""
    faces_split: int = 0
    """Input faces cut by a plane (a part kept)."""
    vertices_snapped: int = 0
    """Input or new vertices moved onto a plane (within ``SNAP_REL``)."""
    loops_capped: int = 0
    """Boundary loops closed (outer loops and their holes)."""
    holes_bridged: int = 0
    """Loops inside another loop on the same plane, triangulated with it."""
    cap_faces: int = 0
    """Faces added by the caps."""
    open_loops: int = 0
    """Boundary loops left open: on several planes (the mesh crosses a box edge), or not on any plane."""
    cap_fallbacks: int = 0
    """Ear-clipping steps that had to clip a non-ear (self-touching or degenerate loops)."""
    watertight_before: bool = False
    watertight_after: bool = False
    faces_before: int = 0
    faces_after: int = 0
    notes: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


# -- small geometry helpers -----------------------------------------------------------------------------------
def is_watertight(faces: np.ndarray) -> bool:
    """True when every undirected edge of ``faces [T, 3]`` is used by exactly two faces, in opposite
    directions (closed and consistently wound); False for an empty mesh.

    Edges are packed into int64 keys and sorted (no ``np.unique(axis=0)``: ~30x faster on millions of edges,
    the same answer as :func:`_is_watertight_reference`)."""
    f = np.asarray(faces, dtype=np.int64).reshape(-1, 3)
    if not len(f):
        return False
    e = np.stack([f[:, [0, 1]], f[:, [1, 2]], f[:, [2, 0]]], 1).reshape(-1, 2)
    if e.min() < 0:
        return _is_watertight_reference(f)
    base = int(e.max()) + 1
    ks = np.sort(np.minimum(e[:, 0], e[:, 1]) * base + np.maximum(e[:, 0], e[:, 1]))
    # every key exactly twice: pairs (0, 1), (2, 3), ... equal, and each pair above the one before
    if len(ks) % 2 or not (ks[0::2] == ks[1::2]).all() or not (ks[2::2] > ks[1:-1:2]).all():
        return False
    kd = np.sort(e[:, 0] * base + e[:, 1])
    return bool((kd[1:] != kd[:-1]).all())


def _is_watertight_reference(faces: np.ndarray) -> bool:
    """:func:`is_watertight` by ``np.unique(axis=0)`` (the simple twin, for tests)."""
    f = np.asarray(faces, dtype=np.int64).reshape(-1, 3)
    if not len(f):
        return False
    e = np.stack([f[:, [0, 1]], f[:, [1, 2]], f[:, [2, 0]]], 1).reshape(-1, 2)
    und = np.sort(e, 1)
    _, cnt = np.unique(und, axis=0, return_counts=True)
    _, dcnt = np.unique(e, axis=0, return_counts=True)
    return bool((cnt == 2).all() and (dcnt == 1).all())


def _cross2(o, a, b):
    return (a[..., 0] - o[..., 0]) * (b[..., 1] - o[..., 1]) - (a[..., 1] - o[..., 1]) * (b[..., 0] - o[..., 0])


def _signed_area(xy: np.ndarray) -> float:
    x, y = xy[:, 0], xy[:, 1]
    return 0.5 * float(np.sum(x * np.roll(y, -1) - np.roll(x, -1) * y))


def _point_in_polygon(p: np.ndarray, poly: np.ndarray) -> bool:
    """Even-odd rule (crossing number) for one point ``[2]`` and a polygon ``[n, 2]``."""
    a, b = poly, np.roll(poly, -1, axis=0)
    cond = (a[:, 1] > p[1]) != (b[:, 1] > p[1])
    with np.errstate(divide="ignore", invalid="ignore"):
        xint = a[:, 0] + (p[1] - a[:, 1]) * (b[:, 0] - a[:, 0]) / (b[:, 1] - a[:, 1])
    return bool(np.count_nonzero(cond & (p[0] < xint)) % 2)


def ear_clip(xy: np.ndarray) -> tuple[np.ndarray, int]:
    """Triangulate a simple (or weakly simple: bridged holes, touching vertices) counter-clockwise polygon.

    Ear clipping (Meisters 1975): repeatedly cut off a strictly convex corner ``(prev, i, next)`` whose
    triangle holds no other polygon vertex (vertices at the same position as a corner, as bridges make,
    are ignored). Collinear corners are never cut as ears, so collinear boundary vertices stay in the
    triangulation (no T-junctions). When no ear exists (degenerate input) the most convex corner is cut
    and counted as a fallback.

    Args:
        xy: ``[n, 2]`` float64 polygon vertices, counter-clockwise (positive signed area), n ≥ 3.

    Returns:
        ``(triangles [n - 2, 3] int64 indices into xy, in the polygon's winding; fallbacks)``.
    """
    n = len(xy)
    if n < 3:
        return np.zeros((0, 3), dtype=np.int64), 0
    scale2 = float(np.sum((xy.max(0) - xy.min(0)) ** 2)) or 1.0
    tol = COLLINEAR_REL * scale2
    nxt = np.r_[np.arange(1, n), 0]
    prv = np.r_[n - 1, np.arange(n - 1)]
    active = np.ones(n, dtype=bool)
    tris = []
    fallbacks = 0
    remaining = n
    i = 0
    fails = 0
    while remaining > 3:
        a, c = prv[i], nxt[i]
        ok = _cross2(xy[a], xy[i], xy[c]) > tol
        if ok:
            idx = np.flatnonzero(active)
            q = xy[idx]
            same = (np.all(q == xy[a], 1) | np.all(q == xy[i], 1) | np.all(q == xy[c], 1))
            inside = (_cross2(xy[a], xy[i], q) >= -tol) & (_cross2(xy[i], xy[c], q) >= -tol) \
                & (_cross2(xy[c], xy[a], q) >= -tol) & ~same
            ok = not inside.any()
        if not ok:
            fails += 1
            i = c
            if fails <= remaining:
                continue
            # no ear in a whole pass: cut the most convex corner (degenerate or self-touching loop)
            idx = np.flatnonzero(active)
            cr = _cross2(xy[prv[idx]], xy[idx], xy[nxt[idx]])
            i = int(idx[np.argmax(cr)])
            a, c = prv[i], nxt[i]
            fallbacks += 1
        tris.append((a, i, c))
        active[i] = False
        nxt[a], prv[c] = c, a
        remaining -= 1
        fails = 0
        i = c
    idx = np.flatnonzero(active)
    a = int(idx[0])
    tris.append((prv[a], a, nxt[a]))
    return np.asarray(tris, dtype=np.int64).reshape(-1, 3), fallbacks


def _segments_cross(p, q, a, b) -> np.ndarray:
    """``[E]`` bool: the segment p–q properly crosses segments a[e]–b[e] (touching does not count)."""
    d1 = _cross2(a, b, p[None])
    d2 = _cross2(a, b, q[None])
    d3 = _cross2(p[None], q[None], a)
    d4 = _cross2(p[None], q[None], b)
    return (d1 * d2 < 0) & (d3 * d4 < 0)


def _bridge_holes(outer: np.ndarray, holes: list[np.ndarray], xy: dict) -> np.ndarray:
    """Merge clockwise ``holes`` (lists of vertex ids) into the counter-clockwise ``outer`` loop by
    bridges (Eberly 2002): for each hole (rightmost first), connect its rightmost vertex M to the nearest
    outer vertex P whose segment M–P crosses no loop edge and enters the polygon at P."""
    merged = list(outer)
    holes = sorted(holes, key=lambda h: -max(xy[v][0] for v in h))
    for hi, hole in enumerate(holes):
        hp = np.array([xy[v] for v in hole])
        m = int(np.argmax(hp[:, 0]))
        M = hp[m]
        loops = [merged] + holes[hi:]
        ea = np.concatenate([np.array([xy[v] for v in lp]) for lp in loops])
        eb = np.concatenate([np.roll(np.array([xy[v] for v in lp]), -1, axis=0) for lp in loops])
        mp = np.array([xy[v] for v in merged])
        order = np.argsort(np.sum((mp - M) ** 2, axis=1), kind="stable")
        choice = None
        for j in order:
            P = mp[j]
            A, B = mp[j - 1], mp[(j + 1) % len(mp)]
            if _cross2(A, P, B) > 0:  # convex corner: M must be inside the wedge B-P-A
                inside = _cross2(P, B, M) >= 0 and _cross2(P, M, A) >= 0
            else:
                inside = not (_cross2(P, A, M) > 0 and _cross2(P, M, B) > 0)
            if not inside:
                continue
            touch = (np.all(ea == P, 1) | np.all(eb == P, 1) | np.all(ea == M, 1) | np.all(eb == M, 1))
            if (_segments_cross(P, M, ea, eb) & ~touch).any():
                continue
            choice = int(j)
            break
        if choice is None:
            choice = int(order[0])
        ring = hole[m:] + hole[:m]
        merged = merged[:choice + 1] + ring + [ring[0], merged[choice]] + merged[choice + 1:]
    return np.asarray(merged, dtype=np.int64)


# -- clipping ---------------------------------------------------------------------------------------------------
class _State:
    """The mesh being clipped, as float64 numpy arrays (positions, colours, UVs, normals, faces)."""

    def __init__(self, mesh: Mesh):
        self.P = mesh.v_pos.detach().cpu().double().numpy().copy()
        self.F = mesh.t_pos_idx.detach().cpu().numpy().astype(np.int64).copy()
        self.C = None if mesh.v_color is None else mesh.v_color.detach().cpu().double().numpy()
        self.UV = self.FT = self.N = self.FN = self.FM = None
        if mesh.v_tex is not None and mesh.t_tex_idx is not None:
            self.UV = mesh.v_tex.detach().cpu().double().numpy()
            self.FT = mesh.t_tex_idx.detach().cpu().numpy().astype(np.int64)
        if mesh.v_nrm is not None and mesh.t_nrm_idx is not None:
            self.N = mesh.v_nrm.detach().cpu().double().numpy()
            self.FN = mesh.t_nrm_idx.detach().cpu().numpy().astype(np.int64)
        fm = mesh.extras.get("face_material")
        if isinstance(fm, torch.Tensor) and len(fm) == len(self.F):
            self.FM = fm.detach().cpu().numpy()
        self.orig = np.arange(len(self.F))  # input face of each face
        self.split = np.zeros(len(self.F), dtype=bool)  # produced by a cut

    def take(self, sel):
        self.F = self.F[sel]
        self.orig, self.split = self.orig[sel], self.split[sel]
        for name in ("FT", "FN", "FM"):
            if getattr(self, name) is not None:
                setattr(self, name, getattr(self, name)[sel])


def _split_edges(st: _State, lo: np.ndarray, hi: np.ndarray, t: np.ndarray) -> None:
    """Append the vertices ``P[lo] + t (P[hi] − P[lo])`` with their colours (the one place new position
    vertices are made; the per-corner UVs and normals are interpolated with the same ``t`` in
    :func:`_clip_plane`, keyed by the edge and the two corner entries so seams stay seams)."""
    st.P = np.concatenate([st.P, st.P[lo] + t[:, None] * (st.P[hi] - st.P[lo])])
    if st.C is not None:
        st.C = np.concatenate([st.C, st.C[lo] + t[:, None] * (st.C[hi] - st.C[lo])])


def _clip_plane(st: _State, n: np.ndarray, d: float, eps: float, rep: CropReport) -> None:
    """Keep the part of the mesh with ``n · p <= d`` (Sutherland–Hodgman on every triangle)."""
    axis = int(np.flatnonzero(np.abs(n) == 1)[0]) if np.count_nonzero(n) == 1 else -1

    def onto(idx):
        if axis >= 0:
            st.P[idx, axis] = d * n[axis]
        else:
            st.P[idx] -= (st.P[idx] @ n - d)[:, None] * n

    s = st.P @ n - d
    snap = np.flatnonzero((np.abs(s) <= eps) & (s != 0))
    if len(snap):
        onto(snap)
        s[snap] = 0.0
        rep.vertices_snapped += len(snap)
    sf = s[st.F] if len(st.F) else np.zeros((0, 3))
    pos, neg = sf > 0, sf < 0
    whole = ~pos.any(1)
    cross = pos.any(1) & neg.any(1)
    ci = np.flatnonzero(cross)
    if not len(ci):
        st.take(whole)
        return
    Fc, sc = st.F[ci], sf[ci]
    V0 = len(st.P)
    # crossing edges: corner k -> k+1 with opposite signs
    ks = np.arange(3)
    a, b = Fc, Fc[:, (ks + 1) % 3]
    sa, sb = sc, sc[:, (ks + 1) % 3]
    xing = sa * sb < 0
    fi, k = np.nonzero(xing)
    ea, eb = a[fi, k], b[fi, k]
    elo, ehi = np.minimum(ea, eb), np.maximum(ea, eb)
    uedge, einv = unique_rows(np.stack([elo, ehi], 1), return_inverse=True)
    einv = einv.reshape(-1)
    t_edge = s[uedge[:, 0]] / (s[uedge[:, 0]] - s[uedge[:, 1]])
    _split_edges(st, uedge[:, 0], uedge[:, 1], t_edge)
    onto(np.arange(V0, len(st.P)))
    # slots: corner k (if inside or on), then the crossing point on edge k
    slot_v = np.full((len(ci), 6), -1, dtype=np.int64)
    valid = np.zeros((len(ci), 6), dtype=bool)
    slot_v[:, 0::2] = Fc
    valid[:, 0::2] = sc <= 0
    slot_v[fi, 2 * k + 1] = V0 + einv
    valid[fi, 2 * k + 1] = True
    extra = {}
    for name, vname, norm in (("FT", "UV", False), ("FN", "N", True)):
        fidx = getattr(st, name)
        if fidx is None:
            continue
        fc = fidx[ci]
        slot = np.full((len(ci), 6), -1, dtype=np.int64)
        slot[:, 0::2] = fc
        ta, tb = fc[fi, k], fc[fi, (k + 1) % 3]
        a_lo = ea == elo
        tlo, thi = np.where(a_lo, ta, tb), np.where(a_lo, tb, ta)
        uk, inv = unique_rows(np.stack([einv, tlo, thi], 1), return_inverse=True)
        vals = getattr(st, vname)
        tt = t_edge[uk[:, 0]][:, None]
        new = vals[uk[:, 1]] + tt * (vals[uk[:, 2]] - vals[uk[:, 1]])
        if norm:
            new = new / np.maximum(np.linalg.norm(new, axis=1, keepdims=True), 1e-20)
        slot[fi, 2 * k + 1] = len(vals) + inv.reshape(-1)
        setattr(st, vname, np.concatenate([vals, new]))
        extra[name] = slot
    order = np.argsort(~valid, axis=1, kind="stable")
    cnt = valid.sum(1)
    rows = np.arange(len(ci))[:, None]
    pv = slot_v[rows, order]
    tri_src, tri_corners = [], []
    for tri, need in (((0, 1, 2), 3), ((0, 2, 3), 4)):
        sel = np.flatnonzero(cnt >= need)
        tri_src.append(sel)
        tri_corners.append(np.asarray(tri))
    src = np.concatenate(tri_src)
    cols = np.concatenate([np.broadcast_to(c, (len(s_), 3)) for c, s_ in zip(tri_corners, tri_src)])
    newF = pv[src[:, None], cols]
    keep_idx = np.flatnonzero(whole)
    st.F = np.concatenate([st.F[keep_idx], newF])
    for name in ("FT", "FN"):
        if getattr(st, name) is not None:
            sl = extra[name][rows, order]
            setattr(st, name, np.concatenate([getattr(st, name)[keep_idx], sl[src[:, None], cols]]))
    if st.FM is not None:
        st.FM = np.concatenate([st.FM[keep_idx], st.FM[ci][src]])
    st.orig = np.concatenate([st.orig[keep_idx], st.orig[ci][src]])
    st.split = np.concatenate([st.split[keep_idx], np.ones(len(src), dtype=bool)])


def _cap(st: _State, planes: list[tuple[np.ndarray, float]], eps: float, rep: CropReport) -> None:
    """Close the boundary loops that lie on one cutting plane (see the module docstring)."""
    loops, lfaces, open_chains = boundary_loops(st.F)
    rep.open_loops += open_chains
    by_plane: dict[int, list[int]] = {}
    for li, lp in enumerate(loops):
        on = [j for j, (n, d) in enumerate(planes) if np.all(np.abs(st.P[lp] @ n - d) <= eps)]
        if on:
            by_plane.setdefault(on[0], []).append(li)
        else:
            rep.open_loops += 1
    new_F, new_FT, new_FN, new_FM = [], [], [], []
    for j, lis in by_plane.items():
        n, d = planes[j]
        u = np.eye(3)[int(np.argmin(np.abs(n)))]
        u = u - (u @ n) * n
        u /= np.linalg.norm(u)
        v = np.cross(n, u)  # (u, v, n) right-handed: counter-clockwise in (u, v) = facing +n
        caps = [loops[i][::-1] for i in lis]  # caps traverse the boundary edges backwards
        xy = {}
        for c in caps:
            for vid in c:
                xy[vid] = np.array([st.P[vid] @ u, st.P[vid] @ v])
        areas = [_signed_area(np.array([xy[x] for x in c])) for c in caps]
        outers = [i for i, a in enumerate(areas) if a > 0]
        assign: dict[int, list[int]] = {i: [] for i in outers}
        lone = []
        for i, a in enumerate(areas):
            if a > 0:
                continue
            p = xy[caps[i][0]]
            cont = [o for o in outers if _point_in_polygon(p, np.array([xy[x] for x in caps[o]]))]
            if cont:
                assign[min(cont, key=lambda o: areas[o])].append(i)
            else:
                lone.append(i)
        if lone:
            rep.notes.append(f"{len(lone)} cap loop(s) on plane {j} wind the other way (the mesh is open or "
                             "inside out there); capped following the mesh's winding")
        polys = [(_bridge_holes(caps[o], [caps[h] for h in assign[o]], xy) if assign[o] else np.asarray(caps[o]),
                  1.0, [o] + assign[o]) for o in outers] + [(np.asarray(caps[i]), -1.0, [i]) for i in lone]
        rep.holes_bridged += sum(len(h) for h in assign.values())
        if st.N is not None:
            st.N = np.concatenate([st.N, n[None]])
            nid = len(st.N) - 1
        for poly, sign, members in polys:
            p2 = np.array([xy[x] for x in poly]) * np.array([sign, 1.0])
            tri, fb = ear_clip(p2)
            rep.cap_fallbacks += fb
            rep.loops_capped += len(members)
            f = poly[tri]
            new_F.append(f)
            src_face = lfaces[lis[members[0]]]
            if st.FT is not None:
                k = int(np.flatnonzero(st.F[src_face] == loops[lis[members[0]]][0])[0])
                new_FT.append(np.full_like(f, st.FT[src_face, k]))
            if st.N is not None:
                new_FN.append(np.full_like(f, nid))
            if st.FM is not None:
                new_FM.append(np.full(len(f), st.FM[src_face]))
    if new_F:
        add = np.concatenate(new_F)
        rep.cap_faces += len(add)
        st.F = np.concatenate([st.F, add])
        st.orig = np.concatenate([st.orig, np.full(len(add), -1)])
        st.split = np.concatenate([st.split, np.zeros(len(add), dtype=bool)])
        for name, lst in (("FT", new_FT), ("FN", new_FN), ("FM", new_FM)):
            if getattr(st, name) is not None:
                setattr(st, name, np.concatenate([getattr(st, name)] + lst))


def _to_mesh(st: _State, mesh: Mesh) -> Mesh:
    dt = mesh.v_pos.dtype
    extras = dict(mesh.extras)
    if st.FM is not None:
        extras["face_material"] = torch.from_numpy(np.asarray(st.FM)).to(mesh.extras["face_material"].dtype)
    t = lambda a, dtype: None if a is None else torch.from_numpy(np.ascontiguousarray(a)).to(dtype)  # noqa: E731
    out = replace(
        mesh,
        v_pos=t(st.P, dt), t_pos_idx=torch.from_numpy(st.F.reshape(-1, 3).astype(np.int64)),
        v_tex=t(st.UV, mesh.v_tex.dtype if mesh.v_tex is not None else dt) if st.FT is not None else mesh.v_tex,
        t_tex_idx=t(st.FT, torch.int64) if st.FT is not None else mesh.t_tex_idx,
        v_nrm=t(st.N, mesh.v_nrm.dtype if mesh.v_nrm is not None else dt) if st.FN is not None else mesh.v_nrm,
        t_nrm_idx=t(st.FN, torch.int64) if st.FN is not None else mesh.t_nrm_idx,
        v_color=t(st.C, mesh.v_color.dtype) if st.C is not None else None,
        extras=extras,
    )
    return compact(out)


def clip_mesh(mesh: Mesh, normals, offsets, *, cap: bool = True) -> tuple[Mesh, CropReport]:
    """Keep the part of ``mesh`` inside the convex region ``normals[k] · p <= offsets[k]`` for all k.

    Args:
        mesh: triangle mesh (not modified; computed on the CPU in float64, returned on the CPU).
        normals: ``[K, 3]`` unit outward plane normals (world).
        offsets: ``[K]`` plane offsets (world units).
        cap: close boundary loops lying on one plane (see the module docstring).

    Returns:
        ``(clipped mesh, CropReport)``; an empty mesh (0 vertices, 0 faces) when nothing is inside, the
        input mesh itself when every vertex is inside.

    Raises:
        MeshError: ``normals`` not ``[K, 3]`` of unit length, or ``offsets`` not ``[K]``, or non-finite.
    """
    nrm = np.asarray(torch.as_tensor(normals, dtype=torch.float64).cpu().numpy(), dtype=np.float64).reshape(-1, 3)
    off = np.asarray(torch.as_tensor(offsets, dtype=torch.float64).cpu().numpy(), dtype=np.float64).reshape(-1)
    if len(nrm) != len(off) or not np.isfinite(nrm).all() or not np.isfinite(off).all():
        raise MeshError(f"clip_mesh: normals must be finite [K, 3] and offsets [K]; got {nrm.shape}, {off.shape}")
    if len(nrm) and np.abs(np.linalg.norm(nrm, axis=1) - 1).max() > 1e-6:
        raise MeshError("clip_mesh: the plane normals must have unit length; normalise them first")
    rep = CropReport(faces_before=mesh.num_faces)
    F0 = mesh.t_pos_idx.detach().cpu().numpy()
    rep.watertight_before = is_watertight(F0)
    P0 = mesh.v_pos.detach().cpu().double().numpy()
    if mesh.num_vertices == 0 or mesh.num_faces == 0:
        rep.watertight_after = rep.watertight_before
        return mesh, rep
    eps = SNAP_REL * max(float(np.linalg.norm(P0.max(0) - P0.min(0))), 1e-30)
    s = P0 @ nrm.T - off[None]
    if (s <= eps).all():
        rep.faces_in = rep.faces_after = mesh.num_faces
        rep.watertight_after = rep.watertight_before
        rep.notes.append("the mesh lies inside every plane: returned unchanged")
        return mesh, rep
    if (s > eps).all(0).any():
        rep.faces_out = mesh.num_faces
        rep.notes.append("the mesh lies outside a plane: the result is empty")
        return _empty_like(mesh), rep
    st = _State(mesh)
    for n, d in zip(nrm, off):
        _clip_plane(st, n, float(d), eps, rep)
    rep.faces_in = int((~st.split).sum())
    kept_orig = np.unique(st.orig[st.split])
    rep.faces_split = int(len(kept_orig))
    rep.faces_out = mesh.num_faces - rep.faces_in - rep.faces_split
    if cap and len(st.F):
        _cap(st, [(n, float(d)) for n, d in zip(nrm, off)], eps * 10, rep)
    if not len(st.F):
        rep.notes.append("nothing of the mesh is inside the planes: the result is empty")
        return _empty_like(mesh), rep
    out = _to_mesh(st, mesh)
    rep.faces_after = out.num_faces
    rep.watertight_after = is_watertight(out.t_pos_idx.numpy())
    return out, rep


def _empty_like(mesh: Mesh) -> Mesh:
    extras = dict(mesh.extras)
    if isinstance(extras.get("face_material"), torch.Tensor):
        extras["face_material"] = extras["face_material"][:0]
    z = lambda t, c: None if t is None else t.new_zeros(0, c)  # noqa: E731
    return replace(mesh, v_pos=mesh.v_pos.new_zeros(0, 3), t_pos_idx=torch.zeros(0, 3, dtype=torch.int64),
                   v_tex=z(mesh.v_tex, 2), t_tex_idx=None if mesh.t_tex_idx is None else torch.zeros(0, 3, dtype=torch.int64),
                   v_nrm=z(mesh.v_nrm, 3), t_nrm_idx=None if mesh.t_nrm_idx is None else torch.zeros(0, 3, dtype=torch.int64),
                   v_color=None if mesh.v_color is None else mesh.v_color.new_zeros(0, mesh.v_color.shape[1]),
                   extras=extras)


def crop_mesh(mesh: Mesh, box_min, box_max, *, cap: bool = True,
              rotation=None) -> tuple[Mesh, CropReport]:
    """Cut ``mesh`` to a box: the six planes of ``box_min <= rotation @ p <= box_max``.

    Triangles inside are kept, outside dropped, crossing ones split exactly at the planes with every
    per-vertex attribute interpolated (see the module docstring); with ``cap`` the cut is closed where a
    boundary loop lies on one box face, so a closed mesh cut through box faces stays watertight.

    Args:
        mesh: triangle mesh (not modified); positions in world units.
        box_min, box_max: ``[3]`` box corners in the box frame (world units), ``box_min < box_max``.
        cap: close the cut (ear-clipped caps, holes bridged).
        rotation: ``[3, 3]`` world-to-box rotation (rows = box axes in world; e.g.
            :attr:`meshlift.data.roi.RegionOfInterest.rotation`); None = world axes.

    Returns:
        ``(mesh, CropReport)`` — faces in/out/split, loops capped, watertight before/after. A box that
        misses the mesh gives an empty mesh; a box holding the whole mesh returns it unchanged.

    Raises:
        MeshError: bad box (shape, non-finite, min not below max) or a rotation that is not orthonormal.
    """
    lo = torch.as_tensor(box_min, dtype=torch.float64).cpu().reshape(-1).numpy()
    hi = torch.as_tensor(box_max, dtype=torch.float64).cpu().reshape(-1).numpy()
    if lo.shape != (3,) or hi.shape != (3,) or not (np.isfinite(lo).all() and np.isfinite(hi).all()):
        raise MeshError(f"crop_mesh: box_min and box_max must be 3 finite numbers, got {lo}, {hi}")
    if not (lo < hi).all():
        raise MeshError(f"crop_mesh: box_min {lo.tolist()} must be below box_max {hi.tolist()} on every axis")
    R = np.eye(3) if rotation is None else torch.as_tensor(rotation, dtype=torch.float64).cpu().numpy()
    if R.shape != (3, 3) or not np.allclose(R @ R.T, np.eye(3), atol=1e-6):
        raise MeshError("crop_mesh: rotation must be a [3, 3] orthonormal matrix (rows = box axes in world)")
    normals = np.concatenate([R, -R])  # +axis faces: R[a]·p <= hi[a]; -axis: -R[a]·p <= -lo[a]
    offsets = np.concatenate([hi, -lo])
    return clip_mesh(mesh, normals, offsets, cap=cap)
