"""data.demo_object: the procedural ring is closed, genus 1, outward, inside [-1, 1]^3, textured."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import trimesh

from meshlift.errors import ConfigError
from meshlift.data.demo_object import DemoObjectShape, make_demo_object


@pytest.fixture(scope="module")
def ring():
    return make_demo_object(resolution=64, texture_resolution=64)


def test_closed_genus_one_outward(ring):
    tm = trimesh.Trimesh(ring.v_pos.numpy(), ring.t_pos_idx.numpy(), process=False)
    assert tm.is_watertight and tm.is_winding_consistent
    assert tm.euler_number == 0  # genus 1: V - E + F = 2 - 2g
    assert tm.volume > 0  # outward winding (counter-clockwise from outside)
    # every face normal points away from the tube's centre line (not just on average)
    shape = DemoObjectShape()
    c, s = math.cos(shape.tilt), math.sin(shape.tilt)
    untilt = torch.tensor([[1.0, 0, 0], [0, c, s], [0, -s, c]])  # inverse of the tilt about +x
    centroid = ring.v_pos[ring.t_pos_idx].mean(1) @ untilt.T
    normal = torch.tensor(np.asarray(tm.face_normals)).float() @ untilt.T
    ring_dir = torch.nn.functional.normalize(centroid * torch.tensor([1.0, 0, 1.0]), dim=1)
    outward = centroid - shape.major_radius * ring_dir
    assert float(((normal * outward).sum(1) > 0).float().mean()) > 0.99
    assert int(torch.unique(ring.t_pos_idx).numel()) == ring.num_vertices


def test_fits_and_has_detail(ring):
    assert float(ring.v_pos.abs().max()) < 1.0
    lo, hi = ring.bbox()
    assert float((hi - lo).min()) > 0.5  # a real 3D object, not flat
    # surface detail: the tube radius varies by several percent (bumps and ridges), unlike a plain torus
    shape = DemoObjectShape()
    c, s = math.cos(shape.tilt), math.sin(shape.tilt)
    p = ring.v_pos @ torch.tensor([[1.0, 0, 0], [0, c, s], [0, -s, c]]).T
    ring_r = torch.sqrt(p[:, 0] ** 2 + p[:, 2] ** 2)
    rho = torch.sqrt((ring_r - shape.major_radius) ** 2 + p[:, 1] ** 2)
    assert float(rho.std()) > 0.01 and float(rho.max() - rho.min()) > 0.05
    assert abs(float(rho.median()) - shape.minor_radius) < 0.02


def test_uvs_and_material(ring):
    assert ring.t_tex_idx.shape == ring.t_pos_idx.shape
    assert float(ring.v_tex.min()) >= 0.0 and float(ring.v_tex.max()) <= 1.0
    uv = ring.v_tex[ring.t_tex_idx].double()
    area = (uv[:, 1, 0] - uv[:, 0, 0]) * (uv[:, 2, 1] - uv[:, 0, 1]) - (uv[:, 1, 1] - uv[:, 0, 1]) * (
        uv[:, 2, 0] - uv[:, 0, 0]
    )
    assert float(area.abs().min()) > 0  # no degenerate UV triangles
    assert float(area.abs().sum() / 2) == pytest.approx(1.0, abs=1e-6)  # the grid tiles the unit square once
    mat = ring.material
    assert mat is not None and mat.kd.shape == (64, 64, 3) and mat.ks.shape == (64, 64, 3)
    assert float(mat.kd.min()) >= 0.0 and float(mat.kd.max()) <= 1.0
    assert float(mat.kd.std()) > 0.05  # a visible pattern, not a flat colour
    rough, metal = mat.ks[..., 1], mat.ks[..., 2]
    assert float(rough.min()) >= 0.3 - 1e-6 and float(rough.max()) <= 0.6 + 1e-6
    assert float(metal.abs().max()) == 0.0
    # seamless texture: the pattern is periodic, so across the seam (last -> first column / row) it
    # changes no more than between any two neighbouring interior columns / rows
    kd = make_demo_object(resolution=16, texture_resolution=256).material.kd
    col_steps = (kd[:, 1:] - kd[:, :-1]).abs().mean(dim=(0, 2))
    row_steps = (kd[1:] - kd[:-1]).abs().mean(dim=(1, 2))
    assert float((kd[:, 0] - kd[:, -1]).abs().mean()) <= float(col_steps.max()) + 1e-6
    assert float((kd[0] - kd[-1]).abs().mean()) <= float(row_steps.max()) + 1e-6


def test_deterministic_and_seeded():
    a = make_demo_object(resolution=32, texture_resolution=16, seed=0)
    b = make_demo_object(resolution=32, texture_resolution=16, seed=0)
    c = make_demo_object(resolution=32, texture_resolution=16, seed=1)
    assert torch.equal(a.v_pos, b.v_pos) and torch.equal(a.material.kd, b.material.kd)
    assert not torch.allclose(a.v_pos, c.v_pos)


def test_resolution_refines_same_surface():
    coarse = make_demo_object(resolution=64, texture_resolution=8)
    fine = make_demo_object(resolution=192, texture_resolution=8)
    assert fine.num_faces == 192 * 96 * 2
    # both sample the same analytic surface: coarse grid vertex (i, j) is fine grid vertex (3i, 3j)
    c = coarse.v_pos.view(64, 32, 3)
    f = fine.v_pos.view(192, 96, 3)
    torch.testing.assert_close(c, f[::3, ::3])
    # and the coarse mesh is a close approximation of the dense one (volume within 2%)
    vol = [trimesh.Trimesh(m.v_pos.numpy(), m.t_pos_idx.numpy(), process=False).volume for m in (coarse, fine)]
    assert abs(vol[0] - vol[1]) < 0.02 * vol[1]


def test_bad_arguments():
    with pytest.raises(ConfigError, match="resolution"):
        make_demo_object(resolution=4)
    with pytest.raises(ConfigError, match="texture_resolution"):
        make_demo_object(texture_resolution=2)
