"""meshlift.mesh.fill: border loops, hole filling, filling unknown per-vertex values; and the holes that
removing non-manifold faces opens (mesh.clean / mesh.simplify), closed again."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from meshlift.errors import MeshError
from meshlift.mesh.clean import clean_mesh, edge_face_counts
from meshlift.mesh.crop import is_watertight
from meshlift.mesh.fill import boundary_loops, fill_holes, fill_vertex_values, split_loop
from meshlift.structures.mesh import Mesh


def box(lo=(0.0, 0.0, 0.0), size=1.0) -> Mesh:
    """A closed, outward unit-cube mesh (trimesh's box: 8 vertices, 12 faces, every cube edge a mesh edge)."""
    import trimesh

    b = trimesh.creation.box(extents=[size] * 3)
    v = np.asarray(b.vertices) + np.asarray(lo) + size / 2
    return Mesh(torch.tensor(v, dtype=torch.float32), torch.tensor(np.asarray(b.faces), dtype=torch.int64))


def signed_volume(m: Mesh) -> float:
    v, f = m.v_pos.double(), m.t_pos_idx
    return float((v[f[:, 0]] * torch.linalg.cross(v[f[:, 1]], v[f[:, 2]])).sum() / 6)


def border_edges(m: Mesh) -> int:
    _, counts = edge_face_counts(m.t_pos_idx.numpy())
    return int((counts == 1).sum())


def without(m: Mesh, drop: list[int]) -> Mesh:
    keep = torch.ones(m.num_faces, dtype=torch.bool)
    keep[drop] = False
    return Mesh(m.v_pos, m.t_pos_idx[keep])


def quad_faces(m: Mesh) -> list[int]:
    """The two faces of the cube side x = max (a square hole when removed)."""
    x = m.v_pos[:, 0]
    on = (x[m.t_pos_idx] == x.max()).all(1)
    return torch.nonzero(on).squeeze(1).tolist()


def silhouette(m: Mesh, axis: np.ndarray, n: int = 64) -> np.ndarray:
    """``[n, n]`` bool orthographic coverage of ``m`` seen along ``axis`` over [-1, 3]² (point-in-triangle)."""
    axis = axis / np.linalg.norm(axis)
    u = np.cross(axis, [0.3, 0.5, 0.8])
    u /= np.linalg.norm(u)
    w = np.cross(axis, u)
    p = m.v_pos.double().numpy()
    xy = np.stack([p @ u, p @ w], 1)
    g = (np.arange(n) + 0.5) / n * 4 - 1
    q = np.stack(np.meshgrid(g, g), -1).reshape(-1, 2)
    cov = np.zeros(len(q), dtype=bool)
    for a, b, c in xy[m.t_pos_idx.numpy()]:
        d = (b[0] - a[0]) * (c[1] - a[1]) - (b[1] - a[1]) * (c[0] - a[0])
        if abs(d) < 1e-12:
            continue
        l1 = ((b[0] - q[:, 0]) * (c[1] - q[:, 1]) - (b[1] - q[:, 1]) * (c[0] - q[:, 0])) / d
        l2 = ((c[0] - q[:, 0]) * (a[1] - q[:, 1]) - (c[1] - q[:, 1]) * (a[0] - q[:, 0])) / d
        cov |= (l1 >= 0) & (l2 >= 0) & (1 - l1 - l2 >= 0)
    return cov.reshape(n, n)


def test_boundary_loops_follow_the_winding_and_split_at_touching_holes():
    m = without(box(), quad_faces(box()))
    loops, first, open_chains = boundary_loops(m.t_pos_idx.numpy())
    assert len(loops) == 1 and len(loops[0]) == 4 and open_chains == 0
    f = m.t_pos_idx.numpy()
    lp = loops[0]
    directed = {(int(t[i]), int(t[(i + 1) % 3])) for t in f for i in range(3)}
    assert all((lp[i], lp[(i + 1) % 4]) in directed for i in range(4))  # a face has each loop edge this way
    assert split_loop([0, 1, 2, 0, 3, 4]) == [[0, 1, 2], [0, 3, 4]]
    assert split_loop([5, 6, 7, 8]) == [[5, 6, 7, 8]]
    assert split_loop([0, 1, 0, 2, 3]) == [[0, 2, 3]]  # a doubled edge is no hole


def test_a_square_hole_is_closed_flat_and_outward_like_trimesh():
    """The fan around the square's centre is coplanar with it: the cube is closed again with its volume;
    trimesh.repair.fill_holes (two triangles for a quad) is the reference for watertightness and volume."""
    import trimesh

    m = without(box(), quad_faces(box()))
    out, rep = fill_holes(m)
    assert rep.filled == 1 and rep.faces_added == 4 and rep.vertices_added == 1 and rep.largest_filled == 4
    assert is_watertight(out.t_pos_idx.numpy()) and border_edges(out) == 0
    torch.testing.assert_close(out.v_pos[-1], torch.tensor([1.0, 0.5, 0.5]))
    ref = trimesh.Trimesh(m.v_pos.numpy(), m.t_pos_idx.numpy(), process=False)
    trimesh.repair.fill_holes(ref)
    assert ref.is_watertight
    assert signed_volume(out) == pytest.approx(ref.volume, abs=1e-6) and signed_volume(out) == pytest.approx(1.0)
    torch.testing.assert_close(out.t_pos_idx[: m.num_faces], m.t_pos_idx)  # the input's faces come first


def test_a_triangle_hole_gets_its_face_back_and_a_lone_triangle_is_left_alone():
    m = box()
    out, rep = fill_holes(without(m, [3]))
    assert rep.filled == 1 and rep.vertices_added == 0 and is_watertight(out.t_pos_idx.numpy())
    assert sorted(out.t_pos_idx[-1].tolist()) == sorted(m.t_pos_idx[3].tolist())
    tri = Mesh(torch.eye(3), torch.tensor([[0, 1, 2]]))
    same, rep = fill_holes(tri)
    assert same is tri and rep.filled == 0


def test_a_hole_whose_rim_disagrees_on_the_winding_is_closed_too():
    """One face next to the hole flipped (as edge collapses leave them): the directed loop breaks, the fill
    still closes every border edge, each fill face running opposite to its neighbour."""
    m = without(box(), quad_faces(box()))
    f = m.t_pos_idx.clone()
    x = m.v_pos[:, 0]
    k = int(torch.nonzero((x[f] == x.max()).any(1))[0])
    f[k] = f[k].flip(0)
    out, rep = fill_holes(Mesh(m.v_pos, f))
    assert rep.filled == 1 and border_edges(out) == 0
    _, counts = edge_face_counts(out.t_pos_idx.numpy())
    assert counts.max() == 2


def test_limits_attributes_and_bad_input():
    big = without(box(), quad_faces(box()))
    _, rep = fill_holes(big, max_edges=3)
    assert rep.filled == 0 and rep.skipped_large == 1
    _, rep = fill_holes(big, only_near=np.zeros(8, dtype=bool))
    assert rep.filled == 0 and rep.skipped_elsewhere == 1
    col = torch.rand(8, 3)
    uv = torch.rand(8, 2)
    nrm = torch.nn.functional.normalize(torch.rand(8, 3), dim=1)
    m = Mesh(big.v_pos, big.t_pos_idx, v_tex=uv, t_tex_idx=big.t_pos_idx.clone(), v_nrm=nrm,
             t_nrm_idx=big.t_pos_idx.clone(), v_color=col,
             extras={"face_material": torch.arange(big.num_faces)})
    out, rep = fill_holes(m)
    ring = sorted({int(v) for v in out.t_pos_idx[-4:].reshape(-1)} - {8})
    torch.testing.assert_close(out.v_color[8], col[ring].mean(0))
    torch.testing.assert_close(out.v_tex[8], uv[ring].mean(0))
    assert out.t_tex_idx.shape == out.t_pos_idx.shape and out.t_nrm_idx.shape == out.t_pos_idx.shape
    assert int(out.t_tex_idx.max()) == 8 and int(out.t_nrm_idx.max()) == 8
    assert float(out.v_nrm[8].norm()) == pytest.approx(1.0, abs=1e-6)
    # the fan's corners use the UV/normal entries of the faces around the hole, the centre the new one
    torch.testing.assert_close(out.t_tex_idx[-4:], out.t_pos_idx[-4:])
    assert out.extras["face_material"].shape == (out.num_faces,)
    with pytest.raises(MeshError, match="max_edges"):
        fill_holes(big, max_edges=-1)
    with pytest.raises(MeshError, match="only_near"):
        fill_holes(big, only_near=np.zeros(3, dtype=bool))


def test_clean_closes_the_holes_of_a_nonmanifold_fan_and_keeps_the_silhouette():
    """Two closed cubes sharing one edge: four faces on it. Cleaning keeps the two largest and removes the
    others, which opened a hole in one cube (border edges); the hole is closed again inside that cube:
    no border edge, no non-manifold edge, and the same silhouette from four directions."""
    a, b = box(), box(lo=(1.0, 1.0, 0.0))
    m = Mesh(torch.cat([a.v_pos, b.v_pos]), torch.cat([a.t_pos_idx, b.t_pos_idx + 8]))
    out, rep = clean_mesh(m, keep_components=0)
    assert rep.merged_vertices == 2 and rep.nonmanifold_faces == 2 and rep.nonmanifold_holes_filled == 1
    _, counts = edge_face_counts(out.t_pos_idx.numpy())
    assert (counts == 2).all()
    assert signed_volume(out) > 1.5  # outward, the dented cube still nearly whole
    for axis in ([1.0, 0, 0], [0, 1.0, 0], [0, 0, 1.0], [1.0, -1.0, 0.5]):
        before, after = silhouette(m, np.array(axis)), silhouette(out, np.array(axis))
        assert before.sum() > 100 and (before == after).all()


def test_fill_vertex_values_ring_by_ring():
    """A strip 0-1-2-3-4 of three triangles: vertices 0 and 4 are known (0 and 4); ring 1 is every other
    vertex: 1 sees only 0, 3 only 4, 2 both. A separate triangle with nothing known is unreached."""
    f = torch.tensor([[0, 1, 2], [1, 3, 2], [2, 3, 4], [5, 6, 7]])
    val = torch.tensor([[0.0], [9.0], [9.0], [9.0], [4.0], [7.0], [7.0], [7.0]])
    known = torch.tensor([True, False, False, False, True, False, False, False])
    out, unreached = fill_vertex_values(f, val, known)
    assert out[:, 0].tolist() == [0.0, 0.0, 2.0, 4.0, 4.0, 7.0, 7.0, 7.0] and unreached == 3
    # two rings: only vertex 0 known; 1 and 2 first, then 3 from them, then 4
    out, unreached = fill_vertex_values(f[:3], val[:5], torch.tensor([True, False, False, False, False]))
    assert out[:, 0].tolist() == [0.0] * 5 and unreached == 0
    with pytest.raises(MeshError, match="known"):
        fill_vertex_values(f, val, known[:3])
    with pytest.raises(MeshError, match="faces"):
        fill_vertex_values(f + 10, val, known)


def _plane_with_hole(n: int = 8) -> Mesh:
    """An open ``n × n`` grid of quads in z = 0 with the 2 × 2 quads at its centre removed (rim: 4n edges; hole: 8)."""
    ij = np.stack(np.meshgrid(np.arange(n + 1), np.arange(n + 1), indexing="ij"), -1).reshape(-1, 2)
    v = np.concatenate([ij.astype(np.float64), np.zeros((len(ij), 1))], 1)
    faces = []
    for i in range(n):
        for j in range(n):
            if n // 2 - 1 <= i <= n // 2 and n // 2 - 1 <= j <= n // 2:
                continue
            a, b, c, d = i * (n + 1) + j, (i + 1) * (n + 1) + j, (i + 1) * (n + 1) + j + 1, i * (n + 1) + j + 1
            faces += [[a, b, c], [a, c, d]]
    return Mesh(torch.tensor(v, dtype=torch.float32), torch.tensor(faces, dtype=torch.int64))


def test_skip_rims_closes_the_holes_but_never_the_outer_rim():
    """A whole-scene mesh is open on purpose: its longest loop per component (the edge of the view) must stay open
    whatever max_edges allows, while holes inside it are closed."""
    m = _plane_with_hole(8)
    assert border_edges(m) == 32 + 8
    every, rep = fill_holes(m, max_edges=0)  # no guard: the rim is closed by a fan (a membrane over the plane)
    assert rep.filled == 2 and border_edges(every) == 0
    out, rep = fill_holes(m, max_edges=0, skip_rims=True)
    assert rep.filled == 1 and rep.skipped_rims == 1 and border_edges(out) == 32
    two = Mesh(torch.cat([m.v_pos, m.v_pos + torch.tensor([20.0, 0, 0])]),
               torch.cat([m.t_pos_idx, m.t_pos_idx + m.num_vertices]))
    out, rep = fill_holes(two, max_edges=0, skip_rims=True)  # per component: both rims open, both holes closed
    assert rep.filled == 2 and rep.skipped_rims == 2 and border_edges(out) == 64


def _plane_with_c_crack(n: int = 20):
    """An ``n × n`` grid of quads in z = 0 with a one-quad-wide C-shaped crack removed: the ring of cells at
    Chebyshev distance 5 from the centre, open on one side. Returns the mesh and the removed cells' ``(i, j)``."""
    ij = np.stack(np.meshgrid(np.arange(n + 1), np.arange(n + 1), indexing="ij"), -1).reshape(-1, 2)
    v = np.concatenate([ij.astype(np.float64), np.zeros((len(ij), 1))], 1)
    faces, removed = [], set()
    c = n // 2
    for i in range(n):
        for j in range(n):
            if max(abs(i - c), abs(j - c)) == 5 and not (i == c + 5 and abs(j - c) <= 2):
                removed.add((i, j))
                continue
            a, b, cc, d = i * (n + 1) + j, (i + 1) * (n + 1) + j, (i + 1) * (n + 1) + j + 1, i * (n + 1) + j + 1
            faces += [[a, b, cc], [a, cc, d]]
    return Mesh(torch.tensor(v, dtype=torch.float32), torch.tensor(faces, dtype=torch.int64)), removed


def _oriented(m: Mesh) -> bool:
    """Every directed edge at most once (consistently wound; shared edges run opposite ways)."""
    f = m.t_pos_idx.numpy()
    d = np.concatenate([f[:, [0, 1]], f[:, [1, 2]], f[:, [2, 0]]])
    return len(np.unique(d, axis=0)) == len(d)


def test_ear_fill_zips_a_curved_crack_inside_it_where_a_fan_spans_the_surface():
    """A C-shaped crack's centroid lies outside it: the fan's triangles cover the plane inside the C (an overlapping
    membrane, the session-25 suspect of the fox's whole-scene artefacts); ear clipping's stay in the crack."""
    from meshlift.mesh.fill import ear_clip

    m, removed = _plane_with_c_crack()
    assert border_edges(m) == 80 + 2 * len(removed) + 2
    rim = 80
    for method in ("fan", "ear"):
        out, rep = fill_holes(m, max_edges=4096, skip_rims=True, method=method)
        assert rep.filled == 1 and border_edges(out) == rim and _oriented(out), method
        v, f = out.v_pos.double(), out.t_pos_idx[m.num_faces:]
        tri = v[f]
        area = 0.5 * torch.linalg.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0]).norm(dim=1)
        cen = tri.mean(1)
        inside = [(int(x), int(y)) in removed for x, y in cen[:, :2].floor().tolist()]
        if method == "fan":
            assert float(area.sum()) > 3 * len(removed) and not all(inside)
        else:
            assert rep.vertices_added == 0 and rep.faces_added == 2 * len(removed)
            assert float(area.sum()) == pytest.approx(len(removed), rel=1e-6) and all(inside)
    square = np.array([[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0]], dtype=np.float64)
    tris = ear_clip(square)
    assert len(tris) == 2 and set(tris[0]) | set(tris[1]) == {0, 1, 2, 3} and all(len(set(t)) == 3 for t in tris)
    assert ear_clip(square[:2]) == []


def test_ear_fill_closes_a_cube_with_its_volume_and_rejects_an_unknown_method():
    m = without(box(), quad_faces(box()))
    out, rep = fill_holes(m, method="ear")
    assert rep.filled == 1 and rep.faces_added == 2 and rep.vertices_added == 0
    assert is_watertight(out.t_pos_idx.numpy()) and signed_volume(out) == pytest.approx(1.0)
    with pytest.raises(MeshError, match="method"):
        fill_holes(m, method="liepa")


def test_ear_fill_never_cuts_a_reflex_corner_or_an_existing_edge():
    """A staircase hole (review of session 25): cutting its reflex corner would lay a triangle over a kept face,
    giving an edge three faces; the ear fill skips such ears (and falls back to the fan only if none is left)."""
    n = 7
    ij = np.stack(np.meshgrid(np.arange(n + 1), np.arange(n + 1), indexing="ij"), -1).reshape(-1, 2)
    v = np.concatenate([ij.astype(np.float64), np.zeros((len(ij), 1))], 1)
    removed = {(2, 2), (2, 3), (3, 2), (3, 3), (4, 3), (4, 4)}
    faces = []
    for i in range(n):
        for j in range(n):
            if (i, j) in removed:
                continue
            a, b, c, d = i * (n + 1) + j, (i + 1) * (n + 1) + j, (i + 1) * (n + 1) + j + 1, i * (n + 1) + j + 1
            faces += [[a, b, c], [a, c, d]]
    m = Mesh(torch.tensor(v, dtype=torch.float32), torch.tensor(faces, dtype=torch.int64))
    out, rep = fill_holes(m, max_edges=64, skip_rims=True, method="ear")
    assert rep.filled == 1 and rep.ear_fallbacks == 0 and rep.vertices_added == 0
    _, counts = edge_face_counts(out.t_pos_idx.numpy())
    assert int(counts.max()) == 2 and border_edges(out) == 4 * n and _oriented(out)
    tri = out.v_pos.double()[out.t_pos_idx[m.num_faces:]]
    area = 0.5 * torch.linalg.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0]).norm(dim=1)
    assert float(area.sum()) == pytest.approx(len(removed))  # exactly the hole: no triangle over the kept cells
