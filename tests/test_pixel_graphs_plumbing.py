"""The plumbing of ``methods/nvdiffrec/pixel_graphs.py`` on the CPU, with the CUDA-graph capture replaced by the
plain callables (``torch.cuda.make_graphed_callables`` returns them unchanged here): argument order, the light's
mips built inside ``shade`` or passed in, field and textured materials, the loss and what is copied out; and a
failed capture (the fallbacks: without the light's prefilter, then the eager step; the generator check); and,
with a stand-in that keeps replay semantics (``_graph_emulation``: static buffers, aliased outputs and gradients,
no Python at replay), Adam steps between replays following the eager path. The
capture itself, and its replay against the eager path, is tested on a GPU (``tests/test_pixel_graphs_gpu.py``,
the same scenes)."""

import pytest
import torch

trimesh = pytest.importorskip("trimesh")

from _surface_scenes import pass_material, render_by, views_on_a_ring  # noqa: E402


def _identity_capture(callables, sample_args, **kwargs):
    for fn, args in zip(callables, sample_args):  # what the warm-up does: every callable runs on its samples
        fn(*args)
    return callables


@pytest.mark.parametrize("light_in_graph,textured", [(False, False), (True, False), (False, True), (True, True)])
def test_graphs_plumbing_equals_the_eager_path(light_in_graph, textured, monkeypatch):
    from meshlift.methods.nvdiffrec.config import SurfaceConfig
    from meshlift.methods.nvdiffrec.materials import make_light
    from meshlift.methods.nvdiffrec.pixel_graphs import PixelGraphs
    from meshlift.structures.mesh import Mesh

    monkeypatch.setattr(torch.cuda, "make_graphed_callables", _identity_capture)
    dev = torch.device("cpu")
    cfg = SurfaceConfig(train_res=24, batch=2, grid_res=16, env_res=16, hash_levels=4, hash_log2_size=12,
                        hash_max_res=64, light="learned")
    torch.manual_seed(0)
    tm, uv, material, params = pass_material(cfg, textured, dev)
    faces = torch.tensor(tm.faces)
    v = torch.tensor(tm.vertices, dtype=torch.float32).requires_grad_()
    mesh = Mesh(v, faces, v_tex=uv, t_tex_idx=faces, material=material) if textured else Mesh(v, faces)
    light, _ = make_light(cfg, dev)
    logged = []
    graphs = PixelGraphs(cfg, light, material, 0.0, logged.append, light_trainable=light_in_graph,
                         name="pass 2" if textured else "pass 1")
    batch = views_on_a_ring(4, 24).batch(torch.tensor([0, 2]), dev)
    results = []
    for path in ("graph", "eager", "graph"):  # the second graph call reuses the built callables
        out, loss, mse = render_by(path, graphs, mesh, batch, light, material, cfg, textured, light_in_graph)
        grads = torch.autograd.grad(loss, [v, light.base, *params])
        results.append((out["shaded"].detach(), out["alpha"].detach(), loss.detach(), mse, grads))
    assert logged == [] and not graphs.failed and graphs.builds_light == light_in_graph
    for got in (results[0], results[2]):
        for a, b in zip(got[:4], results[1][:4]):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
        for a, b in zip(got[4], results[1][4]):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5 * float(b.abs().max()) + 1e-9)
    if light_in_graph:  # the step's cube maps stay on the light, detached
        assert light.diffuse is not None and not light.diffuse.requires_grad


def test_a_failed_capture_falls_back_to_a_smaller_graph_then_to_the_eager_step(monkeypatch):
    from meshlift.errors import TrainingError
    from meshlift.methods.nvdiffrec import pixel_graphs
    from meshlift.methods.nvdiffrec.config import SurfaceConfig
    from meshlift.methods.nvdiffrec.evaluate import render_batch
    from meshlift.methods.nvdiffrec.losses import image_loss
    from meshlift.methods.nvdiffrec.materials import BoundedMaterialField, make_light
    from meshlift.structures.mesh import Mesh

    calls = []
    check = pixel_graphs._check_rng_after_failed_capture

    def failing_capture(callables, sample_args, **kwargs):
        calls.append(len(sample_args[0]))
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(torch.cuda, "make_graphed_callables", failing_capture)
    monkeypatch.setattr(pixel_graphs, "_check_rng_after_failed_capture", lambda exc, name: None)
    cfg = SurfaceConfig(train_res=24, batch=2, grid_res=16, env_res=16, hash_levels=4, hash_log2_size=12,
                        hash_max_res=64, light="learned")
    torch.manual_seed(0)
    material = BoundedMaterialField(cfg, torch.device("cpu"))
    light, _ = make_light(cfg, torch.device("cpu"))
    tm = trimesh.creation.icosphere(2, 0.8)
    mesh = Mesh(torch.tensor(tm.vertices, dtype=torch.float32), torch.tensor(tm.faces))
    batch = views_on_a_ring(4, 24).batch(torch.tensor([1, 3]), torch.device("cpu"))
    logged = []
    graphs = pixel_graphs.PixelGraphs(cfg, light, material, 0.0, logged.append, light_trainable=True)
    out, loss, mse = graphs.render(mesh, batch)
    assert len(calls) == 2 and calls[0] < calls[1]  # with the light's base, then with its (more) mip tensors
    assert graphs.failed and not graphs.builds_light and len(logged) == 2
    assert "capturing without it" in logged[0] and "cuda_graph_pixels=0" in logged[1]
    light.build_mips()
    ref = render_batch(mesh, batch, light, material, cfg)
    ref_loss, _ = image_loss(ref, batch, cfg)
    torch.testing.assert_close(out["shaded"], ref["shaded"])
    torch.testing.assert_close(loss, ref_loss)
    graphs.render(mesh, batch)  # later steps: eager, no new attempt
    assert len(calls) == 2

    # the generator check: a capture that left CUDA's generator unusable stops the run with the knob named
    def broken_generator(*args, **kwargs):
        raise RuntimeError("Offset increment outside graph capture encountered unexpectedly.")

    monkeypatch.setattr(torch.cuda, "synchronize", broken_generator)
    with pytest.raises(TrainingError, match="cuda_graph_pixels=0"):
        check(RuntimeError("operation failed due to a previous error during capture"), "pass 1")


def test_wanted_needs_cuda_a_small_frame_one_process_and_no_probe():
    from meshlift.methods.nvdiffrec.config import SurfaceConfig
    from meshlift.methods.nvdiffrec.pixel_graphs import PixelGraphs

    cfg = SurfaceConfig(cuda_graph_pixels=2 * 96 * 96)
    cuda = torch.device("cuda")
    assert PixelGraphs.wanted(cfg, cuda, 2, False, (96, 96))
    assert PixelGraphs.wanted(cfg, cuda, 2, False, (96, 64))  # the views' own size, not train_res squared
    assert not PixelGraphs.wanted(cfg, cuda, 3, False, (96, 96))
    assert not PixelGraphs.wanted(cfg, torch.device("cpu"), 2, False, (96, 96))
    assert not PixelGraphs.wanted(cfg, cuda, 2, True, (96, 96))
    import dataclasses

    assert not PixelGraphs.wanted(dataclasses.replace(cfg, diagnose_nonfinite=True), cuda, 2, False, (96, 96))
    assert not PixelGraphs.wanted(dataclasses.replace(cfg, spp=2), cuda, 2, False, (96, 96))
    assert not PixelGraphs.wanted(dataclasses.replace(cfg, cuda_graph_pixels=0), cuda, 2, False, (96, 96))


@pytest.mark.parametrize("textured,light_in_graph,masks,spp", [(False, True, True, 1), (True, True, False, 2),
                                                               (True, False, True, 1)])
def test_replay_semantics_over_optimizer_steps_equal_the_eager_path(textured, light_in_graph, masks, spp,
                                                                     monkeypatch):
    """Static buffers, aliased outputs and gradients, no Python at replay (``_graph_emulation``), with Adam
    steps and ``.backward()`` between replays: the parameters follow the eager path's."""
    import dataclasses

    from _graph_emulation import emulated_graphed_callables

    from meshlift.methods.nvdiffrec.config import SurfaceConfig
    from meshlift.methods.nvdiffrec.materials import make_light
    from meshlift.methods.nvdiffrec.pixel_graphs import PixelGraphs
    from meshlift.structures.mesh import Mesh

    monkeypatch.setattr(torch.cuda, "make_graphed_callables", emulated_graphed_callables)
    dev = torch.device("cpu")
    cfg = SurfaceConfig(train_res=24, batch=2, grid_res=16, env_res=16, hash_levels=4, hash_log2_size=12,
                        hash_max_res=64, light="learned", spp=spp)
    views = views_on_a_ring(4, 24)
    if not masks:
        views = dataclasses.replace(views, masks=None, straight=False)
    runs = []
    for path in ("graph", "eager"):
        torch.manual_seed(0)
        tm, uv, material, params = pass_material(cfg, textured, dev)
        faces = torch.tensor(tm.faces)
        v = torch.nn.Parameter(torch.tensor(tm.vertices, dtype=torch.float32))
        light, _ = make_light(cfg, dev, generator=torch.Generator().manual_seed(1))
        opt = torch.optim.Adam([v, light.base, *params], lr=1e-2)
        graphs = PixelGraphs(cfg, light, material, 0.0, lambda m: None, light_trainable=light_in_graph)
        losses = []
        for step in range(3):
            mesh = Mesh(v, faces, v_tex=uv, t_tex_idx=faces, material=material) if textured else Mesh(v, faces)
            batch = views.batch(torch.tensor([step % 4, (step + 2) % 4]), dev)
            opt.zero_grad(set_to_none=True)
            out, loss, mse = render_by(path, graphs, mesh, batch, light, material, cfg, textured, light_in_graph)
            (loss + 0.0).backward()
            losses.append(float(loss.detach()))
            opt.step()
        runs.append((losses, [t.detach().clone() for t in [v, light.base, *params]]))
        assert not graphs.failed
    (l_g, p_g), (l_e, p_e) = runs
    assert l_g == pytest.approx(l_e, rel=1e-5)
    for a, b in zip(p_g, p_e):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
