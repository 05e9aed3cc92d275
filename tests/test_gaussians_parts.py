"""Gaussian training parts: 3DGS PLY round trip, kNN init, densification strategy counts, training SSIM."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from meshlift.errors import ConfigError, DatasetError, MeshError
from meshlift.io.gaussian_ply import is_gaussian_ply, load_gaussian_ply, save_gaussian_ply
from meshlift.methods.gaussians.init import SH_C0, init_gaussians, knn_mean_distance
from meshlift.methods.gaussians.losses import photometric_loss, ssim_same
from meshlift.methods.gaussians.strategy import DefaultStrategy, edit_params


def _random_gaussians(n=50, degree=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    k = (degree + 1) ** 2
    return {
        "means": torch.randn(n, 3, generator=g),
        "quats": torch.randn(n, 4, generator=g),
        "log_scales": torch.randn(n, 3, generator=g) - 3,
        "opacity_logits": torch.randn(n, generator=g),
        "sh0": torch.randn(n, 1, 3, generator=g),
        "shN": torch.randn(n, k - 1, 3, generator=g),
    }


@pytest.mark.parametrize("degree", [0, 1, 3])
def test_gaussian_ply_round_trip(tmp_path, degree):
    d = _random_gaussians(37, degree)
    p = save_gaussian_ply(tmp_path / "pc.ply", d)
    assert is_gaussian_ply(p)
    back = load_gaussian_ply(p)
    for k, v in d.items():
        assert back[k].shape == v.shape, k
        torch.testing.assert_close(back[k], v, rtol=0, atol=0)


def test_gaussian_ply_layout_is_3dgs(tmp_path):
    """f_rest is channel-major (all red coefficients first), as the 3DGS code writes it."""
    d = _random_gaussians(3, 1)
    d["shN"] = torch.arange(3 * 3 * 3, dtype=torch.float32).reshape(3, 3, 3)  # [N, K-1=3, C=3]
    p = save_gaussian_ply(tmp_path / "pc.ply", d)
    raw = p.read_bytes()
    header, body = raw.split(b"end_header\n", 1)
    names = [ln.split()[-1].decode() for ln in header.splitlines() if ln.startswith(b"property")]
    assert names[:9] == ["x", "y", "z", "nx", "ny", "nz", "f_dc_0", "f_dc_1", "f_dc_2"]
    assert names[-8:] == ["opacity", "scale_0", "scale_1", "scale_2", "rot_0", "rot_1", "rot_2", "rot_3"]
    rows = np.frombuffer(body, dtype="<f4").reshape(3, len(names))
    rest = rows[0, 9:18]
    # Gaussian 0: shN[0, j, c] = 3j + c; channel-major order lists c=0 for j=0,1,2 first: 0, 3, 6.
    assert rest[:3].tolist() == [0.0, 3.0, 6.0]
    assert rest[3:6].tolist() == [1.0, 4.0, 7.0]


def test_gaussian_ply_errors(tmp_path):
    with pytest.raises(MeshError, match="does not exist"):
        load_gaussian_ply(tmp_path / "nope.ply")
    mesh_ply = tmp_path / "mesh.ply"
    mesh_ply.write_bytes(b"ply\nformat ascii 1.0\nelement vertex 1\nproperty float x\nproperty float y\n"
                         b"property float z\nend_header\n0 0 0\n")
    assert not is_gaussian_ply(mesh_ply)
    with pytest.raises(MeshError, match=r"holds a point cloud \(1 point, 0 faces\), not 3D Gaussians"):
        load_gaussian_ply(mesh_ply)
    p = save_gaussian_ply(tmp_path / "pc.ply", _random_gaussians(10, 0))
    p.write_bytes(p.read_bytes()[:-7])
    with pytest.raises(MeshError, match="truncated"):
        load_gaussian_ply(p)
    with pytest.raises(MeshError, match="missing fields"):
        save_gaussian_ply(tmp_path / "x.ply", {"means": torch.zeros(1, 3)})


def test_knn_mean_distance_grid():
    """On a unit grid the 3 nearest neighbours of an interior point are at distance 1."""
    ax = torch.arange(5, dtype=torch.float32)
    pts = torch.stack(torch.meshgrid(ax, ax, ax, indexing="ij"), -1).reshape(-1, 3)
    d = knn_mean_distance(pts)
    assert torch.allclose(d, torch.ones_like(d))


def test_init_from_points_and_random():
    pts = torch.rand(200, 3)
    cols = torch.rand(200, 3)
    d = init_gaussians(pts, cols, torch.tensor([[0.0] * 3, [1.0] * 3]), sh_degree=2)
    assert d["means"].shape == (200, 3) and d["shN"].shape == (200, 8, 3)
    torch.testing.assert_close(d["sh0"][:, 0] * SH_C0 + 0.5, cols)
    torch.testing.assert_close(torch.sigmoid(d["opacity_logits"]), torch.full((200,), 0.1))
    r = init_gaussians(None, None, torch.tensor([[-2.0] * 3, [2.0] * 3]), num_random=500,
                       generator=torch.Generator().manual_seed(1))
    assert r["means"].shape == (500, 3)
    assert bool((r["means"].abs() <= 2).all())
    with pytest.raises(DatasetError, match="bounds"):
        init_gaussians(None, None, torch.tensor([[1.0] * 3, [0.0] * 3]))
    with pytest.raises(DatasetError, match="NaN"):
        init_gaussians(torch.full((3, 3), float("nan")), None, torch.zeros(2, 3))


def _params_and_opts(d):
    params = {k: torch.nn.Parameter(v.clone()) for k, v in d.items()}
    opts = {k: torch.optim.Adam([p], lr=1e-3) for k, p in params.items()}
    # one real step so Adam has state to remap
    loss = sum((p**2).sum() for p in params.values())
    loss.backward()
    for o in opts.values():
        o.step()
        o.zero_grad()
    return params, opts


def test_edit_params_keeps_optimizer_state_aligned():
    params, opts = _params_and_opts(_random_gaussians(10, 0))
    before = opts["means"].state[params["means"]]["exp_avg"].clone()
    keep = torch.tensor([0, 2, 4])
    edit_params(params, opts, lambda n, p: p[keep], lambda k, v: v[keep])
    assert params["means"].shape == (3, 3)
    st = opts["means"].state[params["means"]]
    torch.testing.assert_close(st["exp_avg"], before[keep])
    assert opts["means"].param_groups[0]["params"][0] is params["means"]


def test_strategy_clone_split_prune_counts():
    """Toy scene with hand-set gradients: 2 small high-gradient Gaussians are cloned, 2 large ones split,
    1 transparent one pruned: 10 → 10 + 2 + 2 − 1 = 13."""
    n = 10
    d = _random_gaussians(n, 0)
    d["log_scales"][:] = math.log(0.001)          # small (≤ 0.01 × scene scale 1)
    d["log_scales"][[2, 3]] = math.log(0.5)        # large
    d["opacity_logits"][:] = 2.0
    d["opacity_logits"][9] = -10.0                 # opacity 4.5e-5 < prune_opa
    params, opts = _params_and_opts(d)
    s = DefaultStrategy(refine_start=0, refine_every=1, reset_every=0, scene_scale=1.0)
    state = s.initialize_state()
    means2d = torch.zeros(1, n, 2, requires_grad=True)
    (means2d * torch.zeros(1, n, 2)).sum().backward()
    g = torch.zeros(1, n, 2)
    g[0, [0, 1, 2, 3], 0] = 1e-3                    # × width/2 = 0.05 > grow_grad2d
    means2d.grad = g
    info = {"means2d": means2d, "radii": torch.full((1, n), 5.0), "width": 100, "height": 100, "n_cameras": 1}
    out = s.step_post_backward(params, opts, state, step=1, info=info)
    assert (out["cloned"], out["split"], out["pruned"]) == (2, 2, 1)
    assert params["means"].shape[0] == 13
    assert all(p.shape[0] == 13 for p in params.values())
    assert all(o.state[params[k]]["exp_avg"].shape[0] == 13 for k, o in opts.items())
    # split children have scale / 1.6
    small = torch.exp(params["log_scales"]).amax(-1)
    assert int((small / (0.5 / 1.6) - 1).abs().lt(2e-3).sum()) == 4  # (Adam moved log-scales by ~1e-3)
    assert state["grad2d"].shape[0] == 13 and float(state["grad2d"].abs().sum()) == 0


def test_strategy_opacity_reset_and_budget():
    d = _random_gaussians(20, 0)
    d["opacity_logits"][:] = 3.0
    params, opts = _params_and_opts(d)
    s = DefaultStrategy(refine_start=10, refine_every=100, reset_every=5)
    state = s.initialize_state()
    m2d = torch.zeros(1, 20, 2, requires_grad=True)
    info = {"means2d": m2d, "radii": torch.ones(1, 20), "width": 10, "height": 10}
    out = s.step_post_backward(params, opts, state, step=5, info=info)
    assert out["reset"]
    assert float(torch.sigmoid(params["opacity_logits"].detach()).max()) <= 2 * s.prune_opa + 1e-6
    assert float(opts["opacity_logits"].state[params["opacity_logits"]]["exp_avg"].abs().sum()) == 0
    # growth budget
    d = _random_gaussians(8, 0)
    d["log_scales"][:] = math.log(0.001)
    params, opts = _params_and_opts(d)
    s = DefaultStrategy(refine_start=0, refine_every=1, reset_every=0, max_gaussians=10)
    state = s.initialize_state()
    m2d = torch.zeros(1, 8, 2, requires_grad=True)
    m2d.grad = torch.ones(1, 8, 2)
    out = s.step_post_backward(params, opts, state, 1, {"means2d": m2d, "radii": torch.ones(1, 8),
                                                         "width": 10, "height": 10})
    assert out["cloned"] == 2 and params["means"].shape[0] == 10
    with pytest.raises(ConfigError, match="prune_opa"):
        DefaultStrategy(prune_opa=2.0).check()


def test_ssim_same_identity_and_gradient():
    x = torch.rand(2, 20, 24, 3)
    assert float(ssim_same(x, x)) == pytest.approx(1.0, abs=1e-6)
    y = (x + 0.1 * torch.randn_like(x)).clamp(0, 1)
    p = x.clone().requires_grad_(True)
    out = photometric_loss(p, y)
    out["loss"].backward()
    assert torch.isfinite(p.grad).all() and float(p.grad.abs().sum()) > 0
    assert 0 < float(out["ssim"].detach()) < 1


def test_ssim_same_gradcheck():
    x = torch.rand(1, 12, 12, 1, dtype=torch.float64, requires_grad=True)
    y = torch.rand(1, 12, 12, 1, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda a: ssim_same(a, y), (x,))


def test_strategy_statistics_two_cameras_closed_form():
    """Per step, per Gaussian: Σ over cameras that see it of ‖(gx·W/2·C, gy·H/2·C)‖ and the count of those
    cameras (3DGS's NDC gradient norm; invisible pairs add nothing, even with a NaN gradient)."""
    n, W, H = 4, 80, 40
    s = DefaultStrategy(refine_start=100, refine_every=100, reset_every=0, scene_scale=1.0)
    params, _ = _params_and_opts(_random_gaussians(n, 1))
    state = s.initialize_state()
    means2d = torch.zeros(2, n, 2, requires_grad=True)
    g = torch.tensor([[[1e-3, 2e-3], [0.0, 1e-3], [4e-3, 0.0], [5.0, 5.0]],
                      [[3e-3, 0.0], [1e-3, 1e-3], [float("nan"), 1.0], [0.0, 0.0]]])
    means2d.grad = g
    radii = torch.tensor([[[3, 3], [2, 0], [1, 1], [0, 0]], [[4, 2], [5, 5], [0, 0], [0, 0]]], dtype=torch.int32)
    info = {"means2d": means2d, "radii": radii, "width": W, "height": H, "n_cameras": 2}
    for _ in range(2):
        s.step_post_backward(params, {}, state, step=1, info=info)
    sx, sy = W / 2 * 2, H / 2 * 2
    norm = lambda gx, gy: math.hypot(gx * sx, gy * sy)  # noqa: E731
    want = [norm(1e-3, 2e-3) + norm(3e-3, 0.0), norm(1e-3, 1e-3) + norm(0.0, 1e-3), norm(4e-3, 0.0), 0.0]
    assert torch.allclose(state["grad2d"], 2 * torch.tensor(want), rtol=1e-5, atol=0)
    assert state["count"].tolist() == [4.0, 4.0, 2.0, 0.0]
