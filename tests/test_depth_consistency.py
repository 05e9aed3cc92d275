"""Multi-view depth consistency filter (isosurface/depth_consistency.py): the vectorised filter against its
per-pixel twin, and its rule on analytic depth maps of a floor with injected floaters and noise."""

from __future__ import annotations

import pytest
import torch

from meshlift.data.synthetic_scene import OrbitConfig, phone_orbit_cameras
from meshlift.errors import CameraError
from meshlift.isosurface.depth_consistency import consistent_depth, consistent_depth_reference, view_neighbours


def _floor_views(n=8, size=(24, 32)):
    """Cameras on a ring looking at the origin and the exact camera-z depth of the floor y = 0."""
    cams = phone_orbit_cameras(n, torch.zeros(3, dtype=torch.float64), OrbitConfig(), size, seed=1, near=0.01,
                               far=100.0)
    w2c, K = cams.world_to_camera.double(), cams.K.double()
    H, W = size
    r, c = torch.meshgrid(torch.arange(H, dtype=torch.float64), torch.arange(W, dtype=torch.float64), indexing="ij")
    depth = torch.zeros(n, H, W, dtype=torch.float64)
    for i in range(n):
        dirs_c = torch.stack([(c + 0.5 - K[i, 0, 2]) / K[i, 0, 0], (r + 0.5 - K[i, 1, 2]) / K[i, 1, 1],
                              torch.ones_like(c)], -1)  # camera rays with z = 1
        R, t = w2c[i, :3, :3], w2c[i, :3, 3]
        o = -R.T @ t
        dw = dirs_c @ R  # R^T d
        s = -o[1] / dw[..., 1]  # ray parameter (= camera z, since d_z = 1) where y = 0
        depth[i] = torch.where(s > 0, s, torch.zeros_like(s))
    return depth.float(), w2c.float(), K.float()


def test_neighbours_are_near_and_facing_alike():
    _, w2c, _ = _floor_views()
    nb = view_neighbours(w2c, 3)
    assert nb.shape == (8, 3)
    assert bool((nb != torch.arange(8)[:, None]).all()), "a view is not its own neighbour"
    nb1 = view_neighbours(w2c, 20)  # more than there are: padded with -1
    assert nb1.shape == (8, 20) and bool((nb1[:, 7:] == -1).all())
    with pytest.raises(CameraError):
        view_neighbours(w2c[:, :3], 2)


def test_true_depth_is_kept_and_a_floater_is_dropped():
    depth, w2c, K = _floor_views()
    nb = view_neighbours(w2c, 4)
    kept, rep = consistent_depth(depth, w2c, K, nb)
    assert rep["dropped"] == 0 and torch.equal(kept, depth), "consistent views lose nothing"
    bad = depth.clone()
    bad[0, 14:20, 5:12] *= 0.6  # a patch in front of the floor: the other views see through it
    bad[1, 14:20, 5:12] *= 1.5  # a patch behind the floor: hidden in the others, says nothing
    out, rep = consistent_depth(bad, w2c, K, nb)
    assert bool((out[0, 14:20, 5:12] == 0).all()), "the floater is dropped"
    assert torch.equal(out[1], bad[1]), "a depth behind the surface is not contradicted"
    # the patch behind the floor in view 1 contradicts a few true pixels of the views it neighbours that no
    # other neighbour confirms: few, not none
    assert 42 <= rep["dropped"] <= 42 + 0.01 * rep["pixels"], rep
    assert bool((bad[0, 14:20, 5:12] > 0).all()), "the input is not modified"


def test_fast_path_matches_the_per_pixel_twin():
    torch.manual_seed(0)
    depth, w2c, K = _floor_views(n=6, size=(12, 16))
    noisy = depth * (1 + 0.05 * torch.randn_like(depth))  # some pixels fall outside the 2 % tolerance
    noisy[2, :3] = 0  # no depth
    nb = view_neighbours(w2c, 3)
    fast, _ = consistent_depth(noisy, w2c, K, nb, tol=0.02, chunk_pixels=37)
    ref = consistent_depth_reference(noisy, w2c, K, nb, tol=0.02)
    differ = (fast != ref.to(fast.dtype)).float().mean()
    assert differ <= 0.005, f"{float(differ):.4f} of the pixels differ (float32 vs float64 at the tolerance edge)"
    assert 0 < int((fast == 0).sum() - (noisy == 0).sum()) < noisy.numel() // 2, "noise drops some pixels"
