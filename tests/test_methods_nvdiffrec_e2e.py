"""End-to-end surface reconstruction on a small synthetic case (CI-sized), resume, and exported assets."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from meshlift.methods.nvdiffrec.config import SurfaceConfig
from meshlift.structures.mesh import Material, Mesh


def _torus_mesh(R: float = 0.6, r: float = 0.25, n: int = 48, m: int = 24) -> Mesh:
    import trimesh

    t = trimesh.creation.torus(major_radius=R, minor_radius=r, major_sections=n, minor_sections=m)
    kd = torch.tensor([0.7, 0.35, 0.2]).view(1, 1, 3).expand(4, 4, 3).clone()
    ks = torch.tensor([0.0, 0.5, 0.0]).view(1, 1, 3).expand(4, 4, 3).clone()
    v = torch.tensor(t.vertices, dtype=torch.float32)
    v = v[:, [0, 2, 1]]  # ring in the XZ plane (Y up), seen through from above/below
    f = torch.tensor(t.faces, dtype=torch.int64)[:, [0, 2, 1]]  # the axis swap flips the winding: restore it
    uv = torch.zeros(1, 2) + 0.5
    return Mesh(v_pos=v, t_pos_idx=f, v_tex=uv, t_tex_idx=torch.zeros_like(f), material=Material(kd=kd, ks=ks))


def small_config(**kw) -> SurfaceConfig:
    base = dict(
        train_res=64,
        batch=2,
        grid_res=24,
        mesh_scale=2.4,
        iter_pass1=60,
        iter_pass2=10,
        ref_views=16,
        ref_test_views=2,
        max_test_views=2,
        texture_res=64,
        env_res=8,
        sdf_init="visual_hull",
        ks_max=(0.0, 1.0, 0.0),
        device="cpu",
        eval_samples=20000,
        val_views=1,
        checkpoint_every=1000,
        lr_pos=0.003,
        lr_mat=0.02,
        lr_decay=0.001,
        kd_smooth_weight=0.0,
        light="fixed",
        hash_levels=8,
        hash_log2_size=14,
        hash_max_res=256,
    )
    base.update(kw)
    return SurfaceConfig(**base)


def test_torus_reconstruction_reaches_fscore(tmp_path):
    from meshlift.methods.nvdiffrec.reconstruct import reconstruct, synthetic_problem

    cfg = small_config()
    data = synthetic_problem(_torus_mesh(), cfg, torch.device("cpu"), name="torus")
    res = reconstruct(cfg, tmp_path / "out", data=data)
    m = res.metrics
    assert m["fscore"] >= 0.9, m
    losses = [h["loss"] for h in res.history]
    assert len(losses) == cfg.iter_pass1 + cfg.iter_pass2
    assert sum(losses[-10:]) < 0.5 * sum(losses[:10])  # the optimisation did its job
    assert m["threshold"] == pytest.approx(0.01 * m["gt_bbox_diagonal"], rel=1e-6)
    assert m["psnr"] > 20.0
    out = tmp_path / "out"
    for rel in ("mesh/mesh.obj", "mesh/mesh.mtl", "mesh/texture_kd.png", "mesh/texture_ks.png", "mesh/texture_n.png",
                "mesh.glb", "probe.hdr", "dmtet_mesh/mesh.obj", "metrics.json", "config.json", "checkpoint.pt",
                "loss_curve.png", "images/start_00.png", "images/end_00.png"):
        assert (out / rel).is_file(), rel
    saved = json.loads((out / "metrics.json").read_text())
    assert saved["fscore"] == pytest.approx(m["fscore"])

    # the exported assets reload with their textures, in world units
    from meshlift.io.glb import load_glb
    from meshlift.io.obj import load_obj

    glb = load_glb(out / "mesh.glb")
    obj = load_obj(out / "mesh" / "mesh.obj")
    for mesh in (glb, obj):
        assert mesh.material is not None and mesh.material.kd.shape[:2] == (cfg.texture_res, cfg.texture_res)
        assert mesh.material.ks is not None and mesh.material.normal is not None
        assert mesh.v_tex is not None
        assert mesh.num_faces == res.mesh.num_faces
    assert torch.allclose(obj.v_pos, res.mesh.v_pos, atol=1e-4)
    # issue 15: smooth normals and the tangent frame in the GLB, and the Khronos validator is silent
    from _gltf import validate, validator_dir

    js_len = int.from_bytes((out / "mesh.glb").read_bytes()[12:16], "little")
    js = json.loads((out / "mesh.glb").read_bytes()[20: 20 + js_len])
    assert {"NORMAL", "TANGENT", "TEXCOORD_0"} <= set(js["meshes"][0]["primitives"][0]["attributes"])
    assert "\nvn " in (out / "mesh" / "mesh.obj").read_text()
    if validator_dir() is not None:
        for glb_path in (out / "mesh.glb",):
            rep = validate(glb_path)
            assert rep["numErrors"] == 0 and rep["numWarnings"] == 0, rep["messages"]


class _StopAt:
    """A monitor that interrupts pass 1 at a given iteration and records where passes start."""

    def __init__(self, stop_at=None):
        self.stop_at = stop_at
        self.starts = []

    def start_pass(self, name, total, start=0):
        self.starts.append((name, start))

    def update(self, iteration, loss, psnr):
        if self.stop_at is not None and iteration == self.stop_at:
            raise KeyboardInterrupt

    def end_pass(self):
        pass

    def log(self, message):
        pass


def test_resume_continues_from_the_checkpoint(tmp_path):
    from meshlift.methods.nvdiffrec.reconstruct import reconstruct, synthetic_problem

    cfg = small_config(iter_pass1=6, iter_pass2=3, checkpoint_every=2, train_res=32, grid_res=16, ref_views=6,
                       texture_res=32)
    data = synthetic_problem(_torus_mesh(), cfg, torch.device("cpu"), name="torus")
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        reconstruct(cfg, out, data=data, monitor=_StopAt(stop_at=5))
    ck = torch.load(out / "checkpoint.pt", weights_only=False)
    assert ck["pass1"]["iteration"] == 4
    mon = _StopAt()
    res = reconstruct(cfg, out, data=data, resume=True, monitor=mon)
    assert mon.starts[0][1] == 4  # pass 1 resumed at its checkpoint
    assert mon.starts[1][1] == 0
    assert res.metrics["iterations"] == {"pass1": 6, "pass2": 3}
    assert [h["iteration"] for h in res.history if h["pass"] == 1] == [1, 2, 3, 4, 5, 6]
    # a second resume of a finished run continues pass 2 with more iterations
    cfg2 = dataclasses.replace(cfg, iter_pass2=5)
    mon2 = _StopAt()
    reconstruct(cfg2, out, data=data, resume=True, monitor=mon2)
    assert mon2.starts[1][1] == 3
    ck = torch.load(out / "checkpoint.pt", weights_only=False)
    assert ck["pass2"]["iteration"] == 5


class _StopInPass2(_StopAt):
    """Interrupts pass 2 at a given iteration."""

    def start_pass(self, name, total, start=0):
        super().start_pass(name, total, start)
        self.in_pass2 = name.startswith("pass 2")

    def update(self, iteration, loss, psnr):
        if getattr(self, "in_pass2", False) and iteration == self.stop_at:
            raise KeyboardInterrupt


@pytest.mark.slow  # 8-80 s on 2 CPU cores (CI budget): pytest -m slow
def test_resume_in_pass2_keeps_the_pass1_mesh_without_redoing_hidden_faces(tmp_path, monkeypatch):
    import meshlift.mesh.visibility as visibility
    from meshlift.methods.nvdiffrec.reconstruct import reconstruct, synthetic_problem

    cfg = small_config(iter_pass1=4, iter_pass2=4, checkpoint_every=2, train_res=32, grid_res=16, ref_views=6,
                       texture_res=32)
    data = synthetic_problem(_torus_mesh(), cfg, torch.device("cpu"), name="torus")
    whole = reconstruct(cfg, tmp_path / "whole", data=data)
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        reconstruct(cfg, out, data=data, monitor=_StopInPass2(stop_at=3))
    ck = torch.load(out / "checkpoint.pt", weights_only=False)
    assert ck["pass2"]["iteration"] == 2 and "mesh" in ck["pass1"]

    def must_not_run(*a, **k):
        raise AssertionError("hidden-face removal ran again on a resume in pass 2")

    monkeypatch.setattr(visibility, "remove_hidden_faces", must_not_run)
    mon = _StopAt()
    res = reconstruct(cfg, out, data=data, resume=True, monitor=mon)
    assert mon.starts[1][1] == 2  # pass 2 resumed at its checkpoint
    assert torch.equal(res.dmtet_mesh.t_pos_idx, whole.dmtet_mesh.t_pos_idx)
    assert torch.equal(res.dmtet_mesh.v_pos, whole.dmtet_mesh.v_pos)
    assert res.metrics["pass1_fscore"] == whole.metrics["pass1_fscore"]
    again = reconstruct(cfg, out, data=data, resume=True, monitor=_StopAt())  # finished: re-export only
    for k in ("pass1_s", "pass2_s"):  # nothing trained, no time added
        assert again.metrics["timings"][k] == res.metrics["timings"][k]


def test_resume_without_checkpoint_is_a_config_error(tmp_path):
    from meshlift.errors import ConfigError
    from meshlift.methods.nvdiffrec.reconstruct import reconstruct

    with pytest.raises(ConfigError, match="resume"):
        reconstruct(small_config(data=str(tmp_path)), tmp_path / "none", resume=True)


@pytest.mark.slow  # 8-80 s on 2 CPU cores (CI budget): pytest -m slow
def test_flexicubes_pass_runs_and_keeps_the_shape(tmp_path):
    from meshlift.methods.nvdiffrec.reconstruct import reconstruct, synthetic_problem

    cfg = small_config(isosurface="flexicubes", grid_res=20, iter_pass1=30, iter_pass2=2, train_res=48, ref_views=12)
    data = synthetic_problem(_torus_mesh(), cfg, torch.device("cpu"), name="torus")
    res = reconstruct(cfg, None, data=data)
    assert res.metrics["pass1_fscore"] >= 0.8, res.metrics
    assert res.mesh.num_faces > 0


def test_out_of_memory_is_reported_with_the_knobs(monkeypatch):
    from meshlift.errors import OutOfMemoryError
    from meshlift.data.views import PosedViews, ProblemData
    from meshlift.methods.engine import Monitor
    from meshlift.methods.nvdiffrec import reconstruct as surface

    def boom(*args, **kwargs):
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")

    cfg = small_config()
    views = PosedViews(torch.eye(4)[None], torch.zeros(1, 3), torch.zeros(1, 4, 4, 3), None, torch.ones(3))
    data = ProblemData(train=views, test=views, world_to_normalized=torch.eye(4, dtype=torch.float64))
    monkeypatch.setattr(surface, "run_pass1", boom)
    with pytest.raises(OutOfMemoryError) as info:
        surface.reconstruct(cfg, None, data=data, monitor=Monitor())
    msg = str(info.value)
    for knob in ("batch=", "train_res=", "data_device=", "max_fragments="):
        assert knob in msg


@pytest.mark.gpu
def test_torus_reconstruction_on_cuda(tmp_path):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    from meshlift.methods.nvdiffrec.reconstruct import reconstruct, synthetic_problem

    cfg = small_config(device="cuda", iter_pass1=200, iter_pass2=50, train_res=128, grid_res=48, batch=4)
    data = synthetic_problem(_torus_mesh(), cfg, torch.device("cuda"), name="torus")
    res = reconstruct(cfg, tmp_path / "out", data=data)
    assert res.metrics["fscore"] >= 0.95, res.metrics
    assert res.metrics["device"].startswith("cuda")


def test_time_budget_stops_both_passes_early():
    from meshlift.methods.nvdiffrec.reconstruct import reconstruct, synthetic_problem

    cfg = small_config(iter_pass1=500, iter_pass2=300, ref_views=4, train_res=32, grid_res=12,
                       time_budget_s=1e-3, eval_samples=2000)
    data = synthetic_problem(_torus_mesh(n=16, m=8), cfg, torch.device("cpu"), name="torus")
    res = reconstruct(cfg, None, data=data)
    assert res.metrics["iterations"] == {"pass1": 1, "pass2": 1}
    assert res.metrics["iterations_configured"] == {"pass1": 500, "pass2": 300}
    assert len(res.history) == 2
