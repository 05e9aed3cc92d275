"""Hole filling that respects free space (issue 33): ``see_through`` against its per-point twin, and
``fill_holes(accept=see_through_fill(...))`` on a floor with two holes — one over a pit the views see into
(its fill would be a membrane: refused), one where the views see the floor (closed)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from meshlift.data.synthetic_scene import OrbitConfig, phone_orbit_cameras
from meshlift.errors import CameraError, MeshError
from meshlift.isosurface.depth_consistency import see_through, see_through_reference
from meshlift.mesh.fill import fill_holes
from meshlift.methods.milo.tsdf_mesh import see_through_fill
from meshlift.structures.mesh import Mesh

PIT = 0.3  # the pit under the floor: |x|, |z| < PIT, bottom at y = -1


def _views(n=8, size=(36, 48)):
    """Cameras on a ring looking at the origin and the exact camera-z depth of the floor y = 0 with a pit."""
    cams = phone_orbit_cameras(n, torch.zeros(3, dtype=torch.float64), OrbitConfig(), size, seed=1, near=0.01,
                               far=100.0)
    w2c, K = cams.world_to_camera.double(), cams.K.double()
    H, W = size
    r, c = torch.meshgrid(torch.arange(H, dtype=torch.float64), torch.arange(W, dtype=torch.float64), indexing="ij")
    depth = torch.zeros(n, H, W, dtype=torch.float64)
    for i in range(n):
        d = torch.stack([(c + 0.5 - K[i, 0, 2]) / K[i, 0, 0], (r + 0.5 - K[i, 1, 2]) / K[i, 1, 1],
                         torch.ones_like(c)], -1)
        R, t = w2c[i, :3, :3], w2c[i, :3, 3]
        o, dw = -R.T @ t, d @ R
        s0 = -o[1] / dw[..., 1]
        hit = o + s0[..., None] * dw
        in_pit = (hit[..., 0].abs() < PIT) & (hit[..., 2].abs() < PIT)
        s1 = (-1.0 - o[1]) / dw[..., 1]  # the pit's bottom (its walls are left out: the views look down)
        s = torch.where(in_pit, s1, s0)
        depth[i] = torch.where(s > 0, s, torch.zeros_like(s))
    return depth.float(), w2c.float(), K.float()


def _floor_mesh(n=30, half=1.5, holes=((0.0, 0.0), (0.9, 0.9)), hole_half=0.25):
    """A grid on y = 0 with square holes (cells whose centre lies within ``hole_half`` of a hole centre)."""
    g = np.linspace(-half, half, n + 1)
    X, Z = np.meshgrid(g, g, indexing="ij")
    v = np.stack([X.ravel(), np.zeros(X.size), Z.ravel()], 1)
    faces = []
    for i in range(n):
        for j in range(n):
            cx, cz = 0.5 * (g[i] + g[i + 1]), 0.5 * (g[j] + g[j + 1])
            if any(abs(cx - hx) < hole_half and abs(cz - hz) < hole_half for hx, hz in holes):
                continue
            a, b, c, d = i * (n + 1) + j, (i + 1) * (n + 1) + j, (i + 1) * (n + 1) + j + 1, i * (n + 1) + j + 1
            faces += [[a, c, b], [a, d, c]]  # +y up
    return Mesh(torch.tensor(v, dtype=torch.float32), torch.tensor(faces, dtype=torch.int64))


class _Views:
    def __init__(self, w2c, K):
        self.world_to_camera, self.K = w2c, K


def test_see_through_matches_its_twin():
    torch.manual_seed(0)
    depth, w2c, K = _views(n=5, size=(12, 16))
    depth[1, :4] = 0  # no depth there
    pts = torch.rand(60, 3) * torch.tensor([3.0, 2.0, 3.0]) - torch.tensor([1.5, 1.5, 1.5])
    contra, confirm = see_through(pts, depth, w2c, K, tol=0.05, chunk_elements=37)
    rc, rf = see_through_reference(pts, depth, w2c, K, tol=0.05)
    assert torch.equal(contra, rc) and torch.equal(confirm, rf)
    assert int(contra.sum()) > 0 and int(confirm.sum()) >= 0, "points above the floor are seen through"
    with pytest.raises(CameraError, match="points"):
        see_through(pts[:, :2], depth, w2c, K)


def test_points_on_the_floor_are_confirmed_and_above_it_seen_through():
    depth, w2c, K = _views()
    on = torch.tensor([[0.8, 0.0, -0.7], [-0.9, 0.0, 0.6]])
    above = on + torch.tensor([0.0, 0.3, 0.0])
    over_pit = torch.tensor([[0.0, 0.0, 0.0], [0.1, 0.0, -0.1]])  # where the floor would be, over the pit
    contra, confirm = see_through(torch.cat([on, above, over_pit]), depth, w2c, K)
    assert bool((contra[:2] == 0).all()) and bool((confirm[:2] >= 4).all()), (contra, confirm)
    assert bool((contra[2:] >= 4).all()), contra
    assert bool((confirm[4:] == 0).all()), "nothing confirms a surface over the pit"


def test_fill_refuses_the_membrane_over_the_pit_and_closes_the_floor_hole():
    depth, w2c, K = _views()
    mesh = _floor_mesh()
    before = depth.clone()
    accept = see_through_fill(depth, _Views(w2c, K), min_views=2, tol=0.05, device=torch.device("cpu"))
    out, rep = fill_holes(mesh, max_edges=4096, skip_rims=True, accept=accept)
    assert rep.loops == 3 and rep.skipped_rims == 1, rep  # two holes and the grid's outer rim
    assert rep.refused == 1 and rep.filled == 1, rep
    new = out.v_pos[out.t_pos_idx[mesh.num_faces:]].mean(1)  # the fill's triangle centroids
    assert bool(((new[:, 0] - 0.9).abs() < 0.3).all() & ((new[:, 2] - 0.9).abs() < 0.3).all()), \
        "only the hole where the views see the floor is closed"
    assert torch.equal(depth, before), "the depth maps are not modified"
    plain, rep0 = fill_holes(mesh, max_edges=4096, skip_rims=True)
    assert rep0.filled == 2 and rep0.refused == 0


def test_accept_must_return_one_flag_per_loop():
    mesh = _floor_mesh()
    with pytest.raises(MeshError, match="accept"):
        fill_holes(mesh, max_edges=4096, skip_rims=True, accept=lambda tris, owner, loops: np.ones(loops + 1, bool))
