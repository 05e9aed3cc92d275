"""mesh_ops: normals, tangents, edges, Laplacian against hand-computed values and simple twins."""

from __future__ import annotations



import pytest
import torch

from meshlift.errors import MeshError
from meshlift.geometry.mesh_ops import (
    edges,
    face_normals,
    laplacian_smoothness_loss,
    laplacian_uniform,
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

