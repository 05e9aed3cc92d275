"""Chamfer / F-score / normal consistency against hand-computed values; sampling properties."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from meshlift.errors import MeshError
from meshlift.metrics.geometry import mesh_metrics, sample_surface
from meshlift.structures.mesh import Mesh


def _sphere(radius=1.0, sub=5):
    import trimesh

    s = trimesh.creation.icosphere(subdivisions=sub, radius=radius)
    return Mesh(v_pos=torch.tensor(s.vertices, dtype=torch.float32), t_pos_idx=torch.tensor(s.faces))


def test_concentric_spheres():
    r = mesh_metrics(_sphere(1.0), _sphere(1.01), n_samples=200_000, threshold=0.02)
    # every distance is ~0.01 plus the in-surface gap between samples (spacing ~0.008 at 200k)
    assert r["chamfer_l1"] == pytest.approx(0.01, rel=0.15)
    assert r["chamfer_l2"] == pytest.approx(0.01**2, rel=0.35)
    assert r["fscore"] == 1.0 and r["precision"] == 1.0 and r["recall"] == 1.0
    assert r["normal_consistency"] > 0.999
    below = mesh_metrics(_sphere(1.0), _sphere(1.01), n_samples=20_000, threshold=0.009)
    assert below["fscore"] == 0.0


def test_self_fscore_is_one():
    m = _sphere(1.0, sub=3)
    r = mesh_metrics(m, m, n_samples=100_000)  # default threshold: 1% of the bbox diagonal
    assert r["fscore"] == 1.0 and r["threshold"] == pytest.approx(0.01 * r["gt_bbox_diagonal"])
    assert r["chamfer_l1"] < 0.008  # only the in-surface gap between two independent sample sets


def test_sampling_is_area_weighted_and_seeded():
    v = torch.tensor([[0.0, 0, 0], [1, 0, 0], [0, 1, 0], [3, 0, 0], [3, 3, 0], [6, 0, 0]])
    f = torch.tensor([[0, 1, 2], [3, 5, 4]])  # areas 0.5 and 4.5
    p, n = sample_surface(Mesh(v_pos=v, t_pos_idx=f), 50_000, seed=3)
    frac_big = float((p[:, 0] >= 3).double().mean())
    assert frac_big == pytest.approx(0.9, abs=0.01)
    assert torch.allclose(n.abs(), torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64).expand_as(n))
    small = p[p[:, 0] < 3]
    assert float(small[:, 0].mean()) == pytest.approx(1 / 3, abs=0.01)  # uniform in a triangle: centroid
    p2, _ = sample_surface((v, f), 50_000, seed=3)
    assert torch.equal(p, p2)


def test_point_cloud_gt_alignment_and_crop():
    m = _sphere(1.0, sub=3)
    pts, _ = sample_surface(m, 30_000, seed=9)
    pc = Mesh(v_pos=pts.float(), t_pos_idx=torch.zeros(0, 3, dtype=torch.int64))
    r = mesh_metrics(m, pc, n_samples=30_000)
    assert r["normal_consistency"] is None and r["fscore"] > 0.99
    shifted = Mesh(v_pos=m.v_pos + torch.tensor([0.5, 0, 0]), t_pos_idx=m.t_pos_idx)
    T = np.eye(4)
    T[0, 3] = -0.5
    r2 = mesh_metrics(shifted, m, n_samples=30_000, alignment=T)
    assert r2["fscore"] > 0.99
    r3 = mesh_metrics(m, m, n_samples=30_000, crop_box=([0, -2, -2], [2, 2, 2]))
    assert r3["n_pred_points"] < 20_000 and r3["fscore"] > 0.99


def test_empty_and_bad_inputs():
    empty = Mesh(v_pos=torch.zeros(0, 3), t_pos_idx=torch.zeros(0, 3, dtype=torch.int64))
    r = mesh_metrics(empty, _sphere(1.0, 2), n_samples=1000)
    assert r["chamfer_l1"] is None and r["fscore"] == 0.0 and "empty" in r["message"]
    with pytest.raises(MeshError, match="ground truth is empty"):
        mesh_metrics(_sphere(1.0, 2), empty, n_samples=1000)
    with pytest.raises(MeshError, match="index vertex"):
        mesh_metrics((np.zeros((3, 3)), np.array([[0, 1, 5]])), _sphere(1.0, 2))
    with pytest.raises(MeshError, match="threshold"):
        mesh_metrics(_sphere(1.0, 2), _sphere(1.0, 2), threshold=-1.0)
    with pytest.raises(MeshError, match="4x4"):
        mesh_metrics(_sphere(1.0, 2), _sphere(1.0, 2), alignment=np.eye(3))


def test_chamfer_fscore_match_brute_force_on_point_clouds():
    """cKDTree fast path vs a torch.cdist reference on small point clouds (both sides without faces)."""
    g = torch.Generator().manual_seed(4)
    a = torch.rand(300, 3, generator=g, dtype=torch.float64)
    b = torch.rand(200, 3, generator=g, dtype=torch.float64) + 0.05
    no_faces = torch.zeros(0, 3, dtype=torch.int64)
    tau = 0.08
    r = mesh_metrics(Mesh(v_pos=a.float(), t_pos_idx=no_faces), Mesh(v_pos=b.float(), t_pos_idx=no_faces),
                     threshold=tau, n_samples=1000)
    a32, b32 = a.float().double(), b.float().double()
    d = torch.cdist(a32, b32)
    d_ab, d_ba = d.min(1).values, d.min(0).values
    assert r["chamfer_l1"] == pytest.approx(0.5 * float(d_ab.mean() + d_ba.mean()), rel=1e-9)
    assert r["chamfer_l2"] == pytest.approx(0.5 * float((d_ab**2).mean() + (d_ba**2).mean()), rel=1e-9)
    p, rc = float((d_ab < tau).double().mean()), float((d_ba < tau).double().mean())
    assert r["precision"] == p and r["recall"] == rc
    assert r["fscore"] == pytest.approx(2 * p * rc / (p + rc))
