"""The views' depth disagreement (meshlift.isosurface.depth_consistency.depth_disagreement) and the object TSDF band
it widens (``tsdf_trunc_spread``, meshlift.methods.milo.tsdf_mesh, issue 33)."""

from __future__ import annotations

import dataclasses
import functools

import pytest
import torch

from meshlift.errors import CameraError
from meshlift.isosurface.depth_consistency import (depth_disagreement, depth_disagreement_reference,
                                                   disagreement_samples, view_neighbours)


def _plane_views(size: int = 16, height: float = 2.0):
    """Two cameras ``height`` above the plane z = 0 looking straight down (0.3 apart): depth = height everywhere."""
    R = torch.diag(torch.tensor([1.0, -1.0, -1.0]))
    w2c = torch.zeros(2, 4, 4)
    for i, cx in enumerate((0.0, 0.3)):
        C = torch.tensor([cx, 0.0, height])
        w2c[i, :3, :3], w2c[i, :3, 3], w2c[i, 3, 3] = R, -R @ C, 1.0
    f = float(size)
    K = torch.tensor([[f, 0, size / 2], [0, f, size / 2], [0, 0, 1.0]]).expand(2, 3, 3).clone()
    return torch.full((2, size, size), height), w2c, K


def test_two_views_of_a_plane_agree_and_a_shift_is_measured():
    depth, w2c, K = _plane_views()
    nb = view_neighbours(w2c, 4)
    assert nb.tolist() == [[1, -1, -1, -1], [0, -1, -1, -1]]
    dis, samples = depth_disagreement(depth, w2c, K, nb)
    judged = torch.isfinite(dis)
    assert samples.shape == (2, 256) and 0.5 < float(judged.float().mean()) < 1.0  # the overlap is judged
    assert float(dis[judged].abs().max()) < 1e-5
    shifted = depth.clone()
    shifted[1] += 0.1  # view 1 sees the plane 0.1 further: every judged pixel of both views disagrees by 0.1
    dis, _ = depth_disagreement(shifted, w2c, K, nb)
    assert torch.allclose(dis[torch.isfinite(dis)], torch.tensor(0.1), atol=1e-5)


def test_matches_the_reference_on_noisy_depth_with_free_space_and_sampling():
    depth, w2c, K = _plane_views(size=12)
    g = torch.Generator().manual_seed(0)
    depth = depth + 0.05 * torch.randn(depth.shape, generator=g)
    depth[0, :3] = 0.0  # no depth
    depth[1, :, :2] = 1e4  # free space beyond max_depth
    nb = view_neighbours(w2c, 4)
    for max_samples in (1 << 16, 50):
        fast, s1 = depth_disagreement(depth, w2c, K, nb, max_samples=max_samples, max_depth=100.0, chunk_pixels=7)
        ref, s2 = depth_disagreement_reference(depth, w2c, K, nb, max_samples=max_samples, max_depth=100.0)
        assert torch.equal(s1, s2)
        assert torch.equal(torch.isfinite(fast), torch.isfinite(ref))
        assert torch.allclose(fast.nan_to_num(-1), ref.nan_to_num(-1), atol=1e-5)
    assert disagreement_samples(depth, 50, 100.0).shape == (2, 50)
    with pytest.raises(CameraError):
        depth_disagreement(depth[0], w2c, K, nb)
    with pytest.raises(CameraError):
        depth_disagreement(depth, w2c, K, nb[:1])


@functools.lru_cache(maxsize=1)
def _sphere_depth():
    from meshlift.methods.milo.occupancy_labels import render_mesh_depth

    from _milo_scene import sphere_problem

    pb, gt = sphere_problem(size=24, n_train=8, n_test=1)
    tr = pb.train
    return pb, render_mesh_depth(gt.v_pos, gt.t_pos_idx, tr.world_to_camera, tr.K, (tr.height, tr.width)).cpu()


def _masked_sphere_fusion(spread: float, *, masked: bool = True, noise: float = 0.0):
    from meshlift.methods.engine import Monitor
    from meshlift.methods.milo import tsdf_mesh
    from meshlift.methods.milo.presets import get_preset

    pb, depth = _sphere_depth()
    tr = pb.train
    if noise:
        g = torch.Generator().manual_seed(1)
        depth = torch.where(depth > 0, depth + noise * torch.randn(depth.shape, generator=g), depth)
    depth[tr.alpha[..., 0].float() < 0.5] = tsdf_mesh.FREE_SPACE_DEPTH * pb.scene_scale
    if not masked:
        pb = dataclasses.replace(pb, train=dataclasses.replace(tr, alpha=None))
    cfg = dataclasses.replace(get_preset("milo_tiny"), tsdf_carve_fraction=0.0, tsdf_trunc_spread=spread,
                              tsdf_trunc_pixels=1.0, tsdf_trunc_voxels=1.0)
    region = tsdf_mesh.fusion_region("object", bounds=pb.bounds, pad=0.05)
    return tsdf_mesh.fused_mesh(cfg, depth, pb, region, 32, near=0.01, device=torch.device("cpu"), monitor=Monitor())


def test_spread_zero_is_the_old_fusion():
    m0, r0 = _masked_sphere_fusion(0.0)
    m_old, r_old = _masked_sphere_fusion(8.0, masked=False)  # unmasked views: the band as before whatever the spread
    assert r0["depth_spread"] == {} and r_old["depth_spread"] == {}
    assert r0["trunc_voxels"] == r_old["trunc_voxels"]
    assert torch.equal(m0.v_pos, m_old.v_pos) and torch.equal(m0.t_pos_idx, m_old.t_pos_idx)


def test_depth_noise_widens_the_object_band():
    _, r0 = _masked_sphere_fusion(0.0, noise=0.05)
    m8, r8 = _masked_sphere_fusion(8.0, noise=0.05)
    assert r8["depth_spread"]["disagreement"] > 0.01
    assert r8["trunc_voxels"] > r0["trunc_voxels"]
    assert r8["trunc_voxels"] <= 32 / 8  # at most an eighth of the grid
