"""geometry.similarity (meshes, points, normals) and data.views (sniffing, the PosedViews record)."""

from __future__ import annotations

import pytest
import torch

from meshlift.errors import CameraError, DatasetError, MeshError
from meshlift.geometry.similarity import apply_to_normals, apply_to_points, decompose_similarity, transform_mesh
from meshlift.structures.mesh import Mesh


def _sim(scale=2.0, mirror=False):
    c, s = 0.6, 0.8
    R = torch.tensor([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]], dtype=torch.float64)
    if mirror:
        R = R @ torch.diag(torch.tensor([1.0, 1.0, -1.0], dtype=torch.float64))
    T = torch.eye(4, dtype=torch.float64)
    T[:3, :3] = scale * R
    T[:3, 3] = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    return T


def test_decompose_and_apply():
    T = _sim()
    s, R = decompose_similarity(T)
    assert s == pytest.approx(2.0) and torch.allclose(R @ R.T, torch.eye(3, dtype=torch.float64))
    p = torch.randn(5, 3)
    assert torch.allclose(apply_to_points(T, p).double(), p.double() @ T[:3, :3].T + T[:3, 3], atol=1e-6)
    n = torch.nn.functional.normalize(torch.randn(5, 3), dim=-1)
    assert torch.allclose(apply_to_normals(T, n).double(), n.double() @ R.T, atol=1e-6)
    with pytest.raises(CameraError, match="similarity"):
        decompose_similarity(torch.diag(torch.tensor([1.0, 2.0, 1.0, 1.0])))


def test_transform_mesh_refuses_or_rewinds_mirrors():
    mesh = Mesh(v_pos=torch.eye(3), t_pos_idx=torch.tensor([[0, 1, 2]]))
    with pytest.raises(MeshError, match="mirror"):
        transform_mesh(mesh, _sim(mirror=True))
    m = transform_mesh(mesh, _sim(mirror=True), allow_mirror=True)
    assert m.t_pos_idx.tolist() == [[0, 2, 1]]
    n0 = torch.linalg.cross(mesh.v_pos[1] - mesh.v_pos[0], mesh.v_pos[2] - mesh.v_pos[0])
    n1 = torch.linalg.cross(m.v_pos[2] - m.v_pos[0], m.v_pos[1] - m.v_pos[0])
    expected = apply_to_normals(_sim(mirror=True), n0[None])[0]
    assert torch.allclose(torch.nn.functional.normalize(n1, dim=0), expected, atol=1e-5)  # still facing outwards
    assert mesh.t_pos_idx.tolist() == [[0, 1, 2]]  # input untouched


def test_sniff_input(tmp_path):
    from meshlift.data.views import sniff_input

    assert sniff_input(tmp_path / "not_yet_there.obj") == "mesh"  # suffix decides, no file access
    with pytest.raises(DatasetError, match="does not exist"):
        sniff_input(tmp_path / "missing_folder")
    with pytest.raises(DatasetError, match="no dataset found"):
        sniff_input(tmp_path)
    (tmp_path / "poses_bounds.npy").write_bytes(b"")
    assert sniff_input(tmp_path) == "llff"


def test_posed_views_batch_and_targets():
    from meshlift.data.views import PosedViews

    n, h, w = 3, 2, 2
    imgs = torch.rand(n, h, w, 3)
    masks = torch.zeros(n, h, w, 1)
    masks[:, 0] = 1.0
    v = PosedViews(torch.eye(4).expand(n, 4, 4), torch.zeros(n, 3), imgs, masks, torch.tensor([1.0, 0.5, 0.0]),
                   straight=True)
    b = v.batch(torch.tensor([2, 0]), torch.device("cpu"))
    assert isinstance(b, PosedViews) and len(b) == 2 and torch.equal(b.images[0], imgs[2])
    t = b.targets()
    assert torch.equal(t[:, 0], b.images[:, 0]) and torch.allclose(t[:, 1], torch.tensor([1.0, 0.5, 0.0]))
    assert torch.equal(PosedViews(v.world_to_clip, v.camera_pos, imgs, masks, v.background).targets(), imgs)
    assert b.background_images().shape == (2, h, w, 3)
