"""MILo on real captures: non-finite guards of the mesh losses and the occupancy refinement, and the time
budget's stage costs (fake clock, no timing). Issue 11, the first H200 runs (fox: NaN refinement; statue:
killed during the unwrap of a 231k-face mesh)."""

from __future__ import annotations

import dataclasses
import math
from types import SimpleNamespace

import pytest
import torch

from meshlift.errors import MeshError
from meshlift.methods.engine import TimeBudget
from meshlift.methods.milo import extract
from meshlift.methods.milo.budget import FACES_PER_PIVOT, MIN_UNWRAP_FACES, SAFETY, MiloRates, MiloStageCosts
from meshlift.methods.milo.config import MiloConfig, num_mesh_gaussians
from meshlift.methods.milo.mesh_in_loop import surface_depth
from meshlift.methods.milo.mesh_losses import mesh_depth_loss, mesh_normal_loss
from meshlift.methods.milo.pivots import PivotSDF


# ---- losses: a NaN on one side never reaches the other side's gradient ------------------------------------


def test_normal_loss_ignores_nonfinite_gaussian_normals_forward_and_backward():
    g = torch.Generator().manual_seed(0)
    n_mesh = torch.randn(1, 4, 5, 3, generator=g, requires_grad=True)
    n_gauss = torch.randn(1, 4, 5, 3, generator=g)
    mask = torch.ones(1, 4, 5, dtype=torch.bool)
    mask[0, 0, 0] = False
    bad = n_gauss.clone()
    bad[0, 0, 0] = float("nan")  # outside the mask (the old code leaked 0 * NaN into the gradient here)
    bad[0, 1, 1] = float("inf")  # inside the mask: must be left out
    keep = mask.clone()
    keep[0, 1, 1] = False
    loss = mesh_normal_loss(n_mesh, bad, mask)
    (grad,) = torch.autograd.grad(loss, n_mesh)
    assert torch.isfinite(loss) and torch.isfinite(grad).all()
    ref = mesh_normal_loss(n_mesh, n_gauss, keep)
    assert float(loss.detach()) == pytest.approx(float(ref.detach()), rel=1e-6)
    (gref,) = torch.autograd.grad(ref, n_mesh)
    assert torch.allclose(grad, gref)


def test_depth_loss_ignores_nonfinite_gaussian_depth():
    d_mesh = torch.full((1, 3, 3), 2.0, requires_grad=True)
    d_g = torch.full((1, 3, 3), 1.5)
    d_g[0, 0, 0] = float("nan")
    d_g[0, 2, 2] = float("inf")
    loss = mesh_depth_loss(d_mesh, d_g, 1.0)
    (grad,) = torch.autograd.grad(loss, d_mesh)
    assert float(loss.detach()) == pytest.approx(math.log1p(0.5))
    assert torch.isfinite(grad).all() and float(grad[0, 0, 0]) == 0.0 and float(grad[0, 1, 1]) > 0


def test_surface_depth_treats_nonfinite_depth_as_empty():
    md = torch.tensor([1.0, float("nan"), float("inf"), 2.0]).reshape(1, 1, 4, 1)
    alpha = torch.tensor([0.9, 0.9, 0.9, 0.2]).reshape(1, 1, 4, 1)
    assert surface_depth(md, alpha).flatten().tolist() == [1.0, 0.0, 0.0, 0.0]


# ---- the occupancy refinement's guard -----------------------------------------------------------------------


class _Monitor:
    def __init__(self):
        self.lines, self.values = [], []

    def start_pass(self, *a):
        pass

    def update(self, step, loss, psnr):
        self.values.append(loss)

    def end_pass(self):
        pass

    def log(self, msg):
        self.lines.append(msg)


@dataclasses.dataclass
class _Settings:
    outputs: tuple = ()


class _Reg:
    """The parts of MeshInTheLoop that refine_occupancy uses; step ``k`` (1-based) in ``bad`` gives a finite
    loss with an infinite gradient (sqrt at 0), as a degenerate mesh edge would."""

    def __init__(self, bad):
        self.bad, self.calls = set(bad), 0
        self.sdf = PivotSDF(torch.full((4, 9), 0.6))
        self.cfg = SimpleNamespace(lr_occupancy=0.05, splat_backend="torch")
        self.settings, self.near, self.device = _Settings(), 0.01, torch.device("cpu")
        self.problem = SimpleNamespace(train=SimpleNamespace(batch=lambda idx, dev: None))

    def triangulate_now(self, params):
        pass

    def refresh_labels(self, params):
        pass

    def mesh_losses(self, params, batch, depth):
        self.calls += 1
        occ = self.sdf.occupancy()
        terms = {"labels": (1.0 - occ).mean(), "mesh": None}
        if self.calls in self.bad:
            terms["depth"] = torch.sqrt(self.sdf.shift - self.sdf.shift.detach()).sum()  # 0, gradient inf
        return terms

    def weighted(self, terms):
        return sum(v for k, v in terms.items())

    def diagnose_nonfinite(self, params, batch, depth):
        return {}


def _refine(monkeypatch, bad, steps):
    import meshlift.methods.gaussians.trainer as trainer_mod

    monkeypatch.setattr(trainer_mod, "render_params",
                        lambda *a, **k: (None, torch.ones(1, 2, 2, 1), {"median_depth": torch.ones(1, 2, 2, 1)}))
    reg, mon = _Reg(bad), _Monitor()
    rep = extract.refine_occupancy(reg, {"means": torch.zeros(4, 3)}, steps, 1000,
                                   sampler=SimpleNamespace(next=lambda: torch.tensor([0])), monitor=mon)
    return reg, mon, rep


def test_refinement_skips_a_nonfinite_gradient_and_keeps_learning(monkeypatch):
    reg, mon, rep = _refine(monkeypatch, bad={2, 4}, steps=6)
    assert rep["steps"] == 6 and rep["skipped_nonfinite"] == 2 and rep["first_nonfinite"]["step"] == 2
    shift = reg.sdf.shift.detach()
    assert torch.isfinite(shift).all() and float(shift.min()) > 0  # 4 good Adam steps raised the occupancy
    assert any("step 2: non-finite" in line and "skipped" in line for line in mon.lines)
    assert rep["loss_last"] is not None and math.isfinite(rep["loss_last"])


def test_refinement_stops_after_too_many_nonfinite_steps(monkeypatch):
    n = extract.MAX_NONFINITE_STEPS
    reg, mon, rep = _refine(monkeypatch, bad=set(range(3, 3 + n + 10)), steps=n + 20)
    assert rep["steps"] == 2 + n and rep["skipped_nonfinite"] == n
    assert torch.isfinite(reg.sdf.shift).all()
    assert any("in a row" in line for line in mon.lines)


def test_final_mesh_refuses_a_nonfinite_occupancy():
    reg = SimpleNamespace(sdf=PivotSDF(torch.full((2, 9), 0.5)))
    with torch.no_grad():
        reg.sdf.shift[0, 3] = float("nan")
    params = {"means": torch.zeros(2, 3), "log_scales": torch.zeros(2, 3)}
    with pytest.raises(MeshError, match="pivot occupancy"):
        extract.final_mesh(reg, params, keep_components=0.0)


# ---- the time budget follows the mesh -----------------------------------------------------------------------

RATES = MiloRates(delaunay_s_per_pivot=1e-5, render_s_per_pixel=1e-7, decimate_s_per_face=1e-5,
                  unwrap_s_per_face=5e-4, bake_s_per_texel=1e-6, eval_s_per_pixel=1e-6, eval_s_per_sample=1e-5,
                  export_s_per_face=1e-5, fixed_s=1.0)


def _costs(faces=None, **kw):
    cfg = dataclasses.replace(MiloConfig(), num_pivots=270_000, texture_res=1000, time_budget_s=300.0, **kw)
    box = {"faces": 0 if faces is None else faces}
    c = MiloStageCosts(cfg, "cuda", train_pixels=10_000_000, test_pixels=1_000_000, faces_fn=lambda: box["faces"],
                       rates=RATES)
    return c, box, cfg


def test_stage_costs_follow_the_mesh_at_hand():
    c, box, cfg = _costs()
    pivots = 9 * num_mesh_gaussians(cfg)
    assert c.faces() == int(FACES_PER_PIVOT * pivots)  # no mesh yet: the pivot-based estimate
    box["faces"] = 50_000
    small = c.final_s()
    rest = 1.0 + 1.0 + 2 * 1.0 + 50_000 * 1e-5 + 1.0  # colour render + bake + 2 x eval + export + fixed
    assert small == pytest.approx(SAFETY * (50_000 * 5e-4 + rest))
    box["faces"] = 231_017  # the statue: decimation to the 100k cap, then xatlas on 100k
    big = c.final_s()
    assert big == pytest.approx(SAFETY * (231_017 * 1e-5 + 100_000 * 5e-4 + rest + 181_017 * 1e-5))
    assert big > small
    assert c.between_s() == pytest.approx(SAFETY * (pivots * 1e-5 + 1.0))
    c.pivots_fn = lambda: 96_813  # the statue's mesh: its own pivots, not the preset's budget
    assert c.between_s() == pytest.approx(SAFETY * (96_813 * 1e-5 + 1.0))
    simp, box2, _ = _costs(faces=231_017, simplify=20_000)
    assert simp.faces() == 20_000 and simp.final_s() < small


def test_training_deadline_leaves_room_for_the_statue_sized_extraction():
    clock = {"t": 0.0}
    c, box, cfg = _costs(faces=0)
    assert c.faces() > 231_017  # before the mesh exists: the pivot-based estimate (errs high)
    box["faces"] = 50_000
    budget = TimeBudget(300.0, {"train": 0.85, "extract": 0.15}, clock=lambda: clock["t"])
    budget.start(0.0)
    d = budget.deadline("train", c)
    early = d()
    box["faces"] = 231_017  # the mesh in the loop grew: the deadline moves earlier, by the larger reserve
    late_reserve = c.between_s() + c.final_s()
    assert d() == pytest.approx(0.85 * (300.0 - late_reserve))
    assert d() < early
    # refinement starts when training stopped and the triangulation took its estimate: it ends before the
    # reserve of the final stages, which covers decimation + xatlas of the 100k-face cap
    clock["t"] = d() + c.between_s()
    e = budget.deadline("extract", c)
    assert 300.0 - e() == pytest.approx(c.final_s())
    assert 300.0 - e() > 100_000 * 5e-4


def test_unwrap_cap_is_what_the_time_left_affords():
    c, box, cfg = _costs(faces=231_017)
    assert c.unwrap_faces(231_017, None) == 100_000  # no budget: the unwrap's own cap
    assert c.unwrap_faces(231_017, 1e6) == 100_000
    left = 40.0
    cap = c.unwrap_faces(231_017, left)
    assert MIN_UNWRAP_FACES < cap < 100_000
    spent = SAFETY * (c.rest_s(231_017) + 231_017 * 1e-5 + cap * 5e-4)
    assert spent == pytest.approx(left, abs=SAFETY * 5e-4)  # the largest cap that fits
    assert c.unwrap_faces(231_017, 1.0) == MIN_UNWRAP_FACES  # nothing left: the floor


def test_unwrap_time_limit_is_what_is_left_after_the_other_stages():
    from meshlift.methods.milo.budget import MIN_UNWRAP_S

    c, box, cfg = _costs(faces=231_017)
    assert c.unwrap_time_limit(231_017, None) is None  # no budget: no limit
    left = 400.0
    limit = c.unwrap_time_limit(231_017, left)
    assert limit == pytest.approx(left / SAFETY - c.rest_s(231_017) - 231_017 * 1e-5)
    assert MIN_UNWRAP_S < limit < left
    assert c.unwrap_time_limit(231_017, 1.0) == MIN_UNWRAP_S  # nothing left: xatlas still gets its floor


# ---- a whole micro run: a NaN Gaussian depth is harmless, a NaN occupancy gradient is skipped + diagnosed -----


def test_micro_run_survives_nonfinite_refinement_steps(tmp_path, monkeypatch):
    from _milo_scene import sphere_problem
    from test_milo_method import _micro

    from meshlift.methods.milo import mesh_in_loop
    from meshlift.methods.milo.reconstruct import reconstruct

    orig_losses, orig_refine = mesh_in_loop.MeshInTheLoop.mesh_losses, extract.refine_occupancy
    orig_surface = mesh_in_loop.surface_depth

    def nan_depth(md, alpha):  # every refinement depth map has NaN / inf pixels (masked by the losses)
        md = md.clone()
        md.view(-1)[::7] = float("nan")
        md.view(-1)[3::11] = float("inf")
        return orig_surface(md, alpha)

    def losses(self, params, batch, depth):
        terms = orig_losses(self, params, batch, depth)
        calls = getattr(self, "refine_calls", None)
        if calls is not None:
            self.refine_calls = calls + 1
            if self.refine_calls in (2, 3):  # step 2 and its diagnosis (call 3): an infinite occupancy gradient
                terms["depth"] = terms["depth"] + torch.sqrt(self.sdf.shift - self.sdf.shift.detach()).sum()
        return terms

    def refine(reg, *a, **k):
        reg.refine_calls = 0
        return orig_refine(reg, *a, **k)

    monkeypatch.setattr(mesh_in_loop.MeshInTheLoop, "mesh_losses", losses)
    monkeypatch.setattr(mesh_in_loop, "surface_depth", nan_depth)
    monkeypatch.setattr(extract, "refine_occupancy", refine)
    problem, gt = sphere_problem(size=24, n_train=8, n_test=2)
    r = reconstruct(_micro(extract_steps=4, time_budget_s=3600.0), tmp_path / "run", problem=problem, gt_mesh=gt)
    ref = r.metrics["occupancy_refinement"]
    assert ref["steps"] == 4 and ref["skipped_nonfinite"] == 1 and ref["first_nonfinite"]["step"] == 2
    diag = ref["first_nonfinite"]["diagnosis"]
    assert diag["depth_grad_shift"] > 0 and diag["gauss_depth"] == 0  # the losses' inputs were finite
    assert diag["sdf"] == 0 and diag["mesh_vertices"] == 0
    assert r.metrics["faces"] > 0 and torch.isfinite(r.mesh.v_pos).all()
    assert r.metrics["mesh_report"]["clean"]["nonfinite_vertices"] == 0
    assert r.metrics["mesh_report"]["unwrap_face_cap"] >= 5000


def test_a_budget_that_leaves_training_no_time_is_refused_before_training(tmp_path):
    """Session 25: the fox with ``time_budget_s=330`` on a shared H100 trained 1 step of 9,000 and exited 0."""
    from _milo_scene import sphere_problem
    from test_milo_method import _micro

    from meshlift.errors import ConfigError
    from meshlift.methods.milo.reconstruct import reconstruct

    problem, gt = sphere_problem(size=24, n_train=8, n_test=2)
    with pytest.raises(ConfigError, match=r"time_budget_s=0.01 leaves 0 s for training.*Raise time_budget_s"):
        reconstruct(_micro(time_budget_s=0.01), tmp_path / "run", problem=problem, gt_mesh=gt)
    assert not (tmp_path / "run").exists()  # refused before the output folder is written


def test_tsdf_extraction_joins_the_reserve():
    """``extract=tsdf``: the fusions, their cleaning, the crop and the asset's decimation are estimated from the
    grids to come (budget.py), so the training deadline leaves room for them (the H200 fox run of 2026-12-04
    spent 393 s extracting in a 420 s budget)."""
    from meshlift.methods.milo.budget import TSDF_FACES_PER_CELL2, TsdfRates

    tr = TsdfRates(fusion_s_per_cell2=1e-6, post_s_per_face=1e-6, crop_s_per_face=1e-7, decimate_s_per_face=1e-6)
    cfg = dataclasses.replace(MiloConfig(), texture_res=1000, time_budget_s=420.0, max_asset_faces=500_000)
    kw = dict(train_pixels=10_000_000, test_pixels=1_000_000, rates=RATES, tsdf_rates=tr, train_views=20)
    scene, obj = 512 ** 2, 512 ** 2
    refine = 300 * 2 * 500_000 * tr.refine_s_per_pixel  # steps x views a step x pixels a view x rate
    c = MiloStageCosts(cfg, "cuda", tsdf_grids=(scene, obj), **kw)
    plain = MiloStageCosts(cfg, "cuda", faces_fn=lambda: 500_000, **kw)
    asset = TSDF_FACES_PER_CELL2 * obj
    want = (1.0 + 2 * (1e-6 + 1e-6 * TSDF_FACES_PER_CELL2) * scene + 1e-7 * asset + 1.0 + 1e-6 * asset
            + refine)  # the photometric refinement of the whole-scene mesh (the asset's is off by default)
    assert c.tsdf_extract_s() == pytest.approx(want)
    off = MiloStageCosts(dataclasses.replace(cfg, photo_refine_steps=0), "cuda", tsdf_grids=(scene, obj), **kw)
    assert off.tsdf_extract_s() == pytest.approx(want - refine)
    both = MiloStageCosts(dataclasses.replace(cfg, photo_refine_asset=True), "cuda", tsdf_grids=(scene, obj), **kw)
    assert both.tsdf_extract_s() == pytest.approx(want + refine)
    assert c.faces() == 500_000  # the asset, decimated to max_asset_faces
    assert c.final_s() == pytest.approx(plain.final_s() + SAFETY * want)
    one = MiloStageCosts(cfg, "cuda", tsdf_grids=(obj,), **kw)  # a mesh input: one fusion, no crop
    assert one.tsdf_extract_s() == pytest.approx(1.0 + (1e-6 + 1e-6 * TSDF_FACES_PER_CELL2) * obj + 1e-6 * asset)
    assert MiloStageCosts(cfg, "cuda", **kw).tsdf_extract_s() == 0.0


def test_tsdf_grids_follow_the_extraction_plan():
    """The fusions extract_assets will run: one for a mesh input or a masked capture, scene + asset otherwise."""
    from types import SimpleNamespace

    from meshlift.methods.milo.budget import tsdf_grids

    cfg = dataclasses.replace(MiloConfig(), tsdf_resolution=128, scene_resolution=64)
    unmasked = SimpleNamespace(eval_box=None, train=SimpleNamespace(alpha=None))
    masked = SimpleNamespace(eval_box=None, train=SimpleNamespace(alpha=torch.ones(1)))
    assert tsdf_grids(cfg, unmasked, mesh_input=True) == (128 ** 2,)
    assert tsdf_grids(cfg, masked, mesh_input=False) == (128 ** 2,)
    assert tsdf_grids(cfg, unmasked, mesh_input=False) == (128 ** 2, 128 ** 2)  # (2 x 64)², 128²
    assert tsdf_grids(dataclasses.replace(cfg, object_asset=False), unmasked, mesh_input=False) == (128 ** 2,)
    assert tsdf_grids(dataclasses.replace(cfg, region="object"), unmasked, mesh_input=False) == (128 ** 2,)


def test_unwrap_max_faces_is_the_unwrap_cap_without_a_budget():
    """``--set unwrap_max_faces=N`` (what the unwrap's decimation message advises) caps the unwrap."""
    import dataclasses
    from types import SimpleNamespace

    import torch

    from meshlift.methods.milo.presets import get_preset
    from meshlift.methods.milo.reconstruct import budget_costs

    class _Views(SimpleNamespace):
        def __len__(self):
            return 3

    problem = SimpleNamespace(train=_Views(height=8, width=8, alpha=None), test=_Views(height=8, width=8))
    cfg = dataclasses.replace(get_preset("verylowres"), data="x", unwrap_max_faces=250_000, time_budget_s=0)
    costs = budget_costs(cfg, problem, torch.device("cpu"))
    assert costs.unwrap_faces(400_000, None) == 250_000
