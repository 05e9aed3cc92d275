"""GPU checks of the CUDA-graph replay of a pass-1 step's per-pixel half (``methods/nvdiffrec/pixel_graphs.py``):
the graphed render + loss against the eager covered-pixel ``render_batch`` + ``image_loss`` over several steps
whose meshes differ in size (as marching tets gives), forward and the gradients to the vertices, the material
field and the light; and a short demo-preset pass 1 that takes the graphs. Run on a CUDA machine:
``pytest -m gpu tests/test_pixel_graphs_gpu.py``. The dense twin itself is tested on the CPU
(``tests/test_renderers_mesh_pbr_dense.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from _surface_scenes import pass_material, render_by, views_on_a_ring  # noqa: E402

pytestmark = pytest.mark.gpu

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@cuda
@pytest.mark.parametrize("light_in_graph,textured", [(False, False), (True, False), (True, True)])
def test_graphed_render_and_loss_equal_the_eager_path_over_changing_meshes(light_in_graph, textured):
    import trimesh

    from meshlift.methods.nvdiffrec.config import SurfaceConfig
    from meshlift.methods.nvdiffrec.materials import make_light
    from meshlift.methods.nvdiffrec.pixel_graphs import PixelGraphs
    from meshlift.structures.mesh import Mesh

    dev = torch.device("cuda")
    cfg = SurfaceConfig(train_res=48, batch=2, grid_res=16, env_res=16, hash_levels=8, hash_log2_size=14,
                        hash_max_res=256, light="learned")
    assert PixelGraphs.wanted(cfg, dev, 2, False, (48, 48))
    assert not PixelGraphs.wanted(cfg, torch.device("cpu"), 2, False, (48, 48))
    assert not PixelGraphs.wanted(cfg, dev, 2, True, (48, 48)) and not PixelGraphs.wanted(cfg, dev, 2, False, (512, 512))
    torch.manual_seed(0)
    tm, uv, material, params = pass_material(cfg, textured, dev)
    if textured:  # pass 2: one topology, the vertices move (offsets), textures trained
        faces = torch.tensor(tm.faces, device=dev)
        base = torch.tensor(tm.vertices, dtype=torch.float32, device=dev)
        meshes = [(base + 0.02 * k * torch.sin(3 * base)).requires_grad_() for k in range(3)]
        meshes = [(v, Mesh(v, faces, v_tex=uv, t_tex_idx=faces, material=material)) for v in meshes]
    else:  # pass 1: the mesh changes size every step, as marching tets gives
        shapes = [trimesh.creation.icosphere(2, 0.8), trimesh.creation.torus(0.6, 0.25, 24, 12),
                  trimesh.creation.icosphere(3, 0.7)]
        meshes = []
        for tm in shapes:
            v = torch.tensor(tm.vertices, dtype=torch.float32, device=dev).requires_grad_()
            meshes.append((v, Mesh(v, torch.tensor(tm.faces, device=dev))))
    light, _ = make_light(cfg, dev)
    logged = []
    graphs = PixelGraphs(cfg, light, material, 0.0, logged.append, light_trainable=light_in_graph)
    views = views_on_a_ring(4, 48)
    for step, (v, mesh) in enumerate(meshes):
        batch = views.batch(torch.tensor([step % 4, (step + 1) % 4]), dev)
        results = []
        for path in ("graph", "eager"):
            out, loss, mse = render_by(path, graphs, mesh, batch, light, material, cfg, textured, light_in_graph)
            leaves = [v, light.base, *params]
            grads = torch.autograd.grad(loss, leaves, allow_unused=True)
            results.append((out["shaded"].detach().clone(), loss.detach(), mse, grads))
            if path == "graph" and light_in_graph:  # the graph left this step's cube maps on the light
                assert light.diffuse is not None and not light.diffuse.requires_grad
        (s_g, l_g, m_g, g_g), (s_e, l_e, m_e, g_e) = results
        assert not graphs.failed, logged
        torch.testing.assert_close(s_g, s_e, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(l_g, l_e, rtol=1e-4, atol=1e-6)
        torch.testing.assert_close(m_g, m_e, rtol=1e-4, atol=1e-7)
        for a, b in zip(g_g, g_e):
            if b is None:
                assert a is None or float(a.abs().max()) == 0.0
                continue
            torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-4 * float(b.abs().max()) + 1e-9)
    assert logged == []


@cuda
def test_demo_takes_the_graphs_in_a_fresh_process(tmp_path):
    """The CLI demo (shortened) in its own process, as a user runs it: the capture succeeds there (its first
    capture in the process), no warning about streams is printed, and the run finishes."""
    import os
    import subprocess
    import sys

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[1] / "src"), env.get("PYTHONPATH", "")])
    run = subprocess.run([sys.executable, "-m", "meshlift.cli.main", "demo", "--device", "cuda", "--out",
                          str(tmp_path / "demo"), "--set", "iter_pass1=30", "--set", "iter_pass2=5"],
                         capture_output=True, text=True, env=env, timeout=600)
    text = run.stdout + run.stderr
    assert run.returncode == 0, text[-3000:]
    assert "CUDA-graph replay" not in text and "AccumulateGrad" not in text, text[-3000:]
    assert (tmp_path / "demo" / "mesh.glb").is_file()
