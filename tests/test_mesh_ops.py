"""mesh_ops: normals, tangents, edges, Laplacian against hand-computed values and simple twins."""

from __future__ import annotations



import pytest
import torch

from meshlift.errors import MeshError
from meshlift.geometry.mesh_ops import (
    CREASE_ANGLE_DEG,
    edges,
    face_normals,
    laplacian_smoothness_loss,
    laplacian_uniform,
    smooth_vertex_normals,
    tangent_frames,
    vertex_normals,
    vertex_tangents,
)


def _cube():
    v = torch.tensor([[x, y, z] for x in (0.0, 1) for y in (0.0, 1) for z in (0.0, 1)], dtype=torch.float64)
    # faces counter-clockwise from outside
    quads = [(0, 1, 3, 2), (4, 6, 7, 5), (0, 4, 5, 1), (2, 3, 7, 6), (0, 2, 6, 4), (1, 5, 7, 3)]
    tri = []
    for a, b, c, d in quads:
        tri += [[a, b, c], [a, c, d]]
    return v, torch.tensor(tri)


def test_face_normals_point_outwards():
    v, t = _cube()
    n = face_normals(v, t)
    centres = v[t].mean(1) - 0.5
    assert torch.all((n * centres).sum(-1) > 0)
    torch.testing.assert_close(n.norm(dim=-1), torch.ones(12, dtype=torch.float64))
    raw = face_normals(v, t, normalize=False)
    torch.testing.assert_close(raw.norm(dim=-1), torch.ones(12, dtype=torch.float64))  # 2 x area 0.5


def test_vertex_normals_area_weighted():
    v, t = _cube()
    n = vertex_normals(v, t)
    # each corner: area-weighted sum over its faces -> along the corner's diagonal only if the weights
    # per face direction are equal; check against a loop twin
    want = torch.zeros_like(v)
    for f in t.tolist():
        a, b, c = (v[i] for i in f)
        cr = torch.linalg.cross(b - a, c - a)
        for i in f:
            want[i] += cr
    want = want / want.norm(dim=-1, keepdim=True)
    torch.testing.assert_close(n, want)
    batched = vertex_normals(v.expand(2, 8, 3), t)
    torch.testing.assert_close(batched[1], n)


def test_isolated_vertex_gets_plus_z():
    v = torch.tensor([[0.0, 0, 0], [1, 0, 0], [0, 1, 0], [5, 5, 5]])
    n = vertex_normals(v, torch.tensor([[0, 1, 2]]))
    torch.testing.assert_close(n[3], torch.tensor([0.0, 0, 1]))
    torch.testing.assert_close(n[0], torch.tensor([0.0, 0, 1]))


def test_vertex_tangents_follow_u():
    # planar grid in the xy plane, u along +x: tangent = +x; rotate uvs by 90 degrees -> +y
    v = torch.tensor([[0.0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0]])
    t = torch.tensor([[0, 1, 2], [0, 2, 3]])
    nrm = vertex_normals(v, t)
    uv = v[:, :2] * 0.5
    tan = vertex_tangents(v, t, uv, t, nrm)
    torch.testing.assert_close(tan, torch.tensor([[1.0, 0, 0]]).expand(4, 3))
    uv_rot = torch.stack([uv[:, 1], -uv[:, 0]], -1)  # u increases along +y
    tan = vertex_tangents(v, t, uv_rot, t, nrm)
    torch.testing.assert_close(tan, torch.tensor([[0.0, 1, 0]]).expand(4, 3))
    # orthogonal to the normal even for a bent surface
    v2 = v.clone()
    v2[2, 2] = 0.7
    n2 = vertex_normals(v2, t)
    tan2 = vertex_tangents(v2, t, uv, t, n2)
    torch.testing.assert_close((tan2 * n2).sum(-1), torch.zeros(4), atol=1e-6, rtol=0)


def test_edges_and_laplacian():
    v, t = _cube()
    e = edges(t)
    assert e.shape == (18, 2) and torch.all(e[:, 0] < e[:, 1])  # 12 cube edges + 6 diagonals
    L = laplacian_uniform(8, t).to_dense()
    torch.testing.assert_close(L.sum(1), torch.zeros(8))
    assert torch.equal(L.diag(), torch.bincount(e.reshape(-1), minlength=8).float())
    # loss equals the mean squared Laplacian computed densely
    Lv = -(L.double() @ v) / L.diag().double().unsqueeze(1)
    torch.testing.assert_close(laplacian_smoothness_loss(v, t), (Lv**2).mean())


def test_laplacian_loss_zero_on_flat_interior_and_gradcheck():
    # regular planar grid: interior vertices are the mean of their neighbours only along z
    n = 4
    g = torch.stack(torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij"), -1).reshape(-1, 2)
    v = torch.cat([g.double(), torch.zeros(n * n, 1, dtype=torch.float64)], 1)
    tri = []
    for i in range(n - 1):
        for j in range(n - 1):
            a, b, c, d = i * n + j, i * n + j + 1, (i + 1) * n + j, (i + 1) * n + j + 1
            tri += [[a, b, d], [a, d, c]]
    t = torch.tensor(tri)
    vz = v.clone()
    vz[:, 2] = torch.rand(n * n, dtype=torch.float64)
    vz.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda x: laplacian_smoothness_loss(x, t), (vz,))
    assert laplacian_smoothness_loss(v * 0, t) == 0


def test_bad_faces_raise():
    with pytest.raises(MeshError, match="vertex"):
        face_normals(torch.zeros(3, 3), torch.tensor([[0, 1, 3]]))
    with pytest.raises(MeshError, match="v_pos"):
        vertex_normals(torch.zeros(3, 2), torch.tensor([[0, 1, 2]]))



# ---- smooth_vertex_normals / tangent_frames (issue 15) ----------------------------------------------------


def test_smooth_normals_keep_hard_edges_hard():
    v, t = _cube()
    n, ti = smooth_vertex_normals(v, t)
    assert n.shape == (24, 3) and ti.shape == (12, 3)  # 8 corners x 3 faces: every 90-degree edge stays hard
    torch.testing.assert_close(n[ti], face_normals(v, t)[:, None, :].expand(12, 3, 3))
    # above the threshold everything is smooth: exactly the area-weighted vertex normals
    n2, ti2 = smooth_vertex_normals(v, t, crease_angle_deg=180.0)
    assert n2.shape == (8, 3)
    torch.testing.assert_close(n2[ti2], vertex_normals(v, t)[t])
    assert 60.0 == CREASE_ANGLE_DEG


def test_smooth_normals_on_a_smooth_mesh_and_weighting():
    import trimesh

    s = trimesh.creation.icosphere(subdivisions=2)
    v, t = torch.tensor(s.vertices), torch.tensor(s.faces)
    n, ti = smooth_vertex_normals(v, t)
    assert n.shape == (len(v), 3)  # no dihedral angle above 60 degrees: one normal per vertex
    torch.testing.assert_close(n[ti], vertex_normals(v, t)[t])
    na, tia = smooth_vertex_normals(v, t, weighting="angle")
    radial = torch.nn.functional.normalize(v, dim=-1)
    assert float((na[tia] * radial[t]).sum(-1).min()) > 0.999
    with pytest.raises(MeshError, match="weighting"):
        smooth_vertex_normals(v, t, weighting="uniform")


def test_smooth_normals_uv_seam_split_and_gradcheck():
    # two triangles of a bent quad sharing the edge (0, 2): one fan, or two with a UV seam on that edge
    v = torch.tensor([[0.0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0.3]], dtype=torch.float64)
    t = torch.tensor([[0, 1, 2], [0, 2, 3]])
    n, ti = smooth_vertex_normals(v, t)
    assert n.shape == (4, 3)
    seam = torch.tensor([[0, 1, 2], [3, 4, 5]])  # no shared UV index
    n2, ti2 = smooth_vertex_normals(v, t, seam, split_at_uv_seams=True)
    assert n2.shape == (6, 3)
    torch.testing.assert_close(n2[ti2], face_normals(v, t)[:, None, :].expand(2, 3, 3))
    with pytest.raises(MeshError, match="t_tex_idx"):
        smooth_vertex_normals(v, t, split_at_uv_seams=True)
    vv = v.clone().requires_grad_()
    assert torch.autograd.gradcheck(lambda x: smooth_vertex_normals(x, t)[0], (vv,))
    assert torch.autograd.gradcheck(lambda x: smooth_vertex_normals(x, t, weighting="angle")[0], (vv,))


def _quad_pair():
    """Two unit quads in the xy plane (normal +z); the second one's UVs are mirrored in u."""
    v = torch.tensor([[0.0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0], [2, 0, 0], [3, 0, 0], [3, 1, 0], [2, 1, 0]],
                     dtype=torch.float64)
    t = torch.tensor([[0, 1, 2], [0, 2, 3], [4, 5, 6], [4, 6, 7]])
    # internal UVs, v down: world +y = file-space v up
    uv = torch.tensor([[0, 1], [1, 1], [1, 0], [0, 0], [1, 1], [0, 1], [0, 0], [1, 0]], dtype=torch.float64)
    return v, t, uv


def test_tangent_frames_handedness_on_mirrored_charts():
    v, t, uv = _quad_pair()
    n, tn = smooth_vertex_normals(v, t)
    tg, ti = tangent_frames(v, t, uv, t, n, tn)
    c = tg[ti]  # [T, 3, 4]
    torch.testing.assert_close(c[:2, :, :3], torch.tensor([1.0, 0, 0], dtype=torch.float64).expand(2, 3, 3))
    torch.testing.assert_close(c[2:, :, :3], torch.tensor([-1.0, 0, 0], dtype=torch.float64).expand(2, 3, 3))
    assert torch.all(c[:2, :, 3] == 1) and torch.all(c[2:, :, 3] == -1)
    # B = w (N x T) is +y (file-space v up) on both charts
    b = c[..., 3:] * torch.linalg.cross(n[tn], c[..., :3], dim=-1)
    torch.testing.assert_close(b, torch.tensor([0.0, 1, 0], dtype=torch.float64).expand(4, 3, 3))


def test_tangent_frames_split_per_uv_corner_and_orthogonal():
    import trimesh

    s = trimesh.creation.icosphere(subdivisions=1)
    v, t = torch.tensor(s.vertices), torch.tensor(s.faces)
    # spherical UVs with a seam: per-corner UVs (every face its own three UV indices)
    d = torch.nn.functional.normalize(v, dim=-1)
    u = torch.atan2(d[:, 0], -d[:, 2]) / (2 * torch.pi) + 0.5
    w = torch.acos(d[:, 1].clamp(-1, 1)) / torch.pi
    uv = torch.stack([u, w], -1)[t.reshape(-1)]
    tt = torch.arange(3 * len(t)).reshape(-1, 3)
    n, tn = smooth_vertex_normals(v, t)
    tg, ti = tangent_frames(v, t, uv, tt, n, tn)
    assert tg.shape[0] == len(uv)  # no two corners share (position, uv) here, so none share a tangent
    torch.testing.assert_close((tg[ti][..., :3] * n[tn]).sum(-1), torch.zeros(len(t), 3, dtype=torch.float64),
                               atol=1e-9, rtol=0)
    torch.testing.assert_close(tg[:, :3].norm(dim=-1), torch.ones(len(tg), dtype=torch.float64))
    assert set(tg[:, 3].tolist()) <= {-1.0, 1.0}


def test_tangent_frames_gradcheck_and_errors():
    v, t, uv = _quad_pair()
    v = v.clone()
    v[2, 2] = 0.3
    n, tn = smooth_vertex_normals(v, t)
    vv = v.clone().requires_grad_()
    uu = uv.clone().requires_grad_()
    assert torch.autograd.gradcheck(lambda a, b: tangent_frames(a, t, b, t, n, tn)[0][:, :3], (vv, uu))
    with pytest.raises(MeshError, match="t_tex_idx"):
        tangent_frames(v, t, uv, t[:1], n, tn)


@pytest.mark.gpu
def test_tangent_frames_on_cuda_match_cpu():
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    import trimesh

    s = trimesh.creation.icosphere(subdivisions=4)
    v, t = torch.tensor(s.vertices, dtype=torch.float32), torch.tensor(s.faces)
    d = torch.nn.functional.normalize(v, dim=-1)
    uv = torch.stack([torch.atan2(d[:, 0], -d[:, 2]) / (2 * torch.pi) + 0.5, torch.acos(d[:, 1].clamp(-1, 1)) / torch.pi], -1)
    n = vertex_normals(v, t)
    a, ia = tangent_frames(v, t, uv, t, n, t)
    b, ib = tangent_frames(v.cuda(), t.cuda(), uv.cuda(), t.cuda(), n.cuda(), t.cuda())
    assert torch.equal(ia, ib.cpu())
    torch.testing.assert_close(a, b.cpu(), atol=1e-5, rtol=0)


def test_neighbour_mean_on_a_path_and_per_channel():
    from meshlift.geometry.mesh_ops import neighbour_mean

    e = torch.tensor([[0, 1], [1, 2]])  # 0 - 1 - 2, and vertex 3 alone
    x = torch.tensor([1.0, 2.0, 4.0, 7.0])
    assert torch.allclose(neighbour_mean(x, e, torch.bincount(e.reshape(-1), minlength=4)),
                          torch.tensor([2.0, 2.5, 2.0, 0.0]))
    xy = torch.stack([x, 10 * x], -1)
    assert torch.allclose(neighbour_mean(xy[:3], e), torch.tensor([[2.0, 20.0], [2.5, 25.0], [2.0, 20.0]]))
