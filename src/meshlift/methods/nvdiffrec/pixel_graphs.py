"""CUDA-graph replay of the fixed-shape half of a training step of either pass (issue 9: a launch-lean step).

Why: on a GPU a small pass-1 step (the demo's: 2 views of 96², ~14k faces) is bound by the host — 19.5 ms per
step of which the device is busy 1.7 ms (docs/benchmarks.md, H200, 2026-12-02, main at fe8aa21) — because every op is a Python call,
a dispatcher trip and a kernel launch, forward and backward. Marching tets sizes the mesh anew each step, so
the step as a whole has no fixed shapes to capture (and pass 2's rasterizer sizes its bins by the frame's
content); from the G-buffer on, though, everything is per pixel over a frame whose shape is fixed for the pass
(``batch × (spp · train_res)²``). Measured on the demo (H200, 2026-12-02, docs/benchmarks.md): pass-1 steps
21.1 → 16.6 ms, pass-2 steps 25.7 → 16.0 ms.

Design: that half runs densely over every pixel (``renderers.mesh_pbr_dense``: uncovered pixels get finite
stand-ins and composite weight 0, so they change neither values nor gradients) and is replayed with
``torch.cuda.make_graphed_callables`` — its forward one graph launch, its backward another — as two callables
that share one memory pool:

1. ``shade``: the G-buffer rows, the light (a learned light's ``base`` cube map, whose prefiltered mips the
   graph builds, ``EnvironmentLight.build_mips``; a fixed light's mips) and the material's parameters (pass 1:
   the field's; pass 2: the kd / ks / normal maps) → the material (the field, or texture lookups from the maps'
   mip stacks), the shading normal, split-sum shading and the composite over the background
   (:func:`~meshlift.renderers.mesh_pbr_dense.shade_field_rows` / ``shade_textured_rows``);
2. ``loss``: the antialiased image, its coverage, the targets and masks → the image loss and the sRGB MSE
   (:func:`~meshlift.methods.nvdiffrec.losses.image_loss_terms`).

The rasterization, G-buffer interpolation, tangent frames and antialiasing (their sizes are the mesh's),
marching tets, the regularisers and the optimizer stay eager. Graphed callables return the same storage at
each replay: what outlives the step (the MSE kept for deferred read-backs) is copied. The material's
parameters and a learned light's ``base`` are the graph's inputs themselves (the optimizer updates them in
place, so nothing is copied in); the G-buffer rows are copied into the graph's input buffers at each replay.

What the replays rely on (each holds in meshlift's passes): the optimizers zero gradients with
``set_to_none=True`` (a parameter's ``.grad`` may be the graph's gradient buffer: kept and accumulated into, the
next replay would overwrite it); the filter operators and tables the captured kernels read by address
(``shading.light``'s and ``shading.cubemap``'s caches, ``render.texture``'s) stay cached for the pass (clearing
them, ``shading.light.clear_filter_cache``, would leave the graph reading freed memory; a pass uses far fewer keys
than the caches hold, and nothing in meshlift clears them).

When: :meth:`PixelGraphs.wanted` — a CUDA device, ``B · Hs · Ws ≤ cfg.cuda_graph_pixels`` (the training views' size;
the dense half costs work on the uncovered pixels, which pays where the step waits for the host, not for the
device), one process, no ``diagnose_nonfinite`` (its probe reads the per-pixel tensors the graph keeps inside), the
fixed training background and no occlusion regulariser (``train_background``, ``occlusion_reg_weight``: the
graphs composite over the views' own background and return no ``ks``).
The graphs are captured at the pass's first step (three warm-up iterations, then the capture: a few steps' time); if
the capture fails (an op that syncs or is not capturable on this torch), one line is logged and the pass captures
again without the light's prefilter, then, failing that too, runs the eager covered-pixel path as before; a failed
capture can leave CUDA's random generator in capture mode, which is checked and reported as a ``TrainingError``
naming ``cuda_graph_pixels``.
"""

from __future__ import annotations

import warnings
from typing import Callable, Optional

import torch

from meshlift.data.views import PosedViews
from meshlift.errors import TrainingError
from meshlift.methods.nvdiffrec.config import SurfaceConfig
from meshlift.methods.nvdiffrec.losses import image_loss_terms, occlusion_reg_active
from meshlift.structures.mesh import Material, Mesh

__all__ = ["PixelGraphs"]


def _first_line(exc: BaseException) -> str:
    """``Type: first line of the message`` (at most 160 characters of it) for a log line."""
    return f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:160]}"


def _leaf_like(t: torch.Tensor) -> torch.Tensor:
    """A sample argument for a graphed callable: a copy of ``t`` with its ``requires_grad``."""
    return t.detach().clone().requires_grad_(t.requires_grad)


def _check_rng_after_failed_capture(exc: BaseException, name: str) -> None:
    """After a capture that failed: the eager fallback is safe only if CUDA's default random generator left
    capture mode (a capture that fails inside can leave it there, and then every later random op on the GPU
    raises); raises TrainingError naming the knob when it did not."""
    try:
        torch.cuda.synchronize()
        torch.empty(1, device="cuda").normal_()
        torch.cuda.synchronize()
    except Exception as again:  # noqa: BLE001
        raise TrainingError(
            f"{name}: the CUDA-graph capture of the per-pixel step failed ({_first_line(exc)}) and left CUDA's "
            f"random generator unusable ({type(again).__name__}); run again with --set cuda_graph_pixels=0 (the "
            "eager step) and report this") from exc


class PixelGraphs:
    """The graphed ``shade`` and ``loss`` callables of one pass (built at the first :meth:`render`).

    Args:
        cfg: the run's config (``spp``, ``max_fragments``, ``mask_weight``).
        light: the pass's ``EnvironmentLight``.
        material: pass 1's material field (an ``nn.Module``), or pass 2's textured :class:`Material` whose
            ``kd`` / ``ks`` / ``normal`` are the trained parameters; either way the optimizer updates the
            parameters in place, and the meshes given to :meth:`render` carry this material.
        jitter: the albedo-smoothness jitter of the pass (0 = none), fixed for the pass.
        log: where the one line about a failed capture goes.
        light_trainable: the light is learned: its prefiltered cube maps are rebuilt from ``light.base`` inside
            the ``shade`` graph at every step (``EnvironmentLight.build_mips``: the caller does not build them);
            the step's maps are left on the light, detached (no autograd graph, unlike an eager ``build_mips``),
            for what reads the light before the next step (previews): they are the graph's outputs, which the
            next replay overwrites.
        name: the pass, for the log lines.
    """

    def __init__(self, cfg: SurfaceConfig, light, material, jitter: float, log: Callable[[str], None], *,
                 light_trainable: bool = False, name: str = "pass 1") -> None:
        self.cfg = cfg
        self.light = light
        self.material = material
        self.textured = isinstance(material, Material)
        self.tangents = self.textured and material.normal is not None
        self.jitter = float(jitter)
        self.log = log
        self.name = name
        self.builds_light = bool(light_trainable)
        if self.textured:
            self.params = tuple(t for t in (material.kd, material.ks, material.normal) if t is not None)
        else:
            self.params = tuple(material.parameters())
        self._graphs: Optional[tuple] = None
        self._key: Optional[tuple] = None
        self.failed = False

    @staticmethod
    def wanted(cfg: SurfaceConfig, device: torch.device, batch: int, distributed: bool,
               resolution: tuple[int, int]) -> bool:
        """Whether a pass with ``batch`` views per process of ``resolution (H, W)`` (the training views') replays
        its per-pixel half (see the module doc)."""
        pixels = int(batch) * int(resolution[0]) * int(resolution[1]) * int(cfg.spp) ** 2
        return (torch.device(device).type == "cuda" and 0 < pixels <= int(cfg.cuda_graph_pixels)
                and not distributed and not cfg.diagnose_nonfinite and cfg.train_background == "fixed"
                and not occlusion_reg_active(cfg))

    # ---- the two callables -------------------------------------------------------------------------------
    def _n_rows(self) -> int:
        return 6 + (2 if self.textured else 0) + (1 if self.tangents else 0)

    def _shade(self, *args):
        from meshlift.renderers.mesh_pbr_dense import PixelRows, shade_field_rows, shade_textured_rows

        n = self._n_rows()
        rows = PixelRows.from_tensors(args[:n], self.textured, self.tangents)
        rest = args[n:]
        shade = shade_textured_rows if self.textured else shade_field_rows
        if self.builds_light:  # rest = (light.base, *material parameters): the mips are built in the graph
            self.light.build_mips()
            accum, kd_grad = shade(rows, self.light, self.material, self.jitter)
            cubes = (self.light.diffuse, *self.light.specular)
            return (accum,) + (() if kd_grad is None else (kd_grad,)) + cubes
        cubes = rest[:len(rest) - len(self.params)]  # the light's mips (a fixed light, or built eagerly)
        saved = self.light.diffuse, self.light.specular
        self.light.diffuse, self.light.specular = cubes[0], list(cubes[1:])
        try:
            accum, kd_grad = shade(rows, self.light, self.material, self.jitter)
        finally:
            self.light.diffuse, self.light.specular = saved
        return (accum,) if kd_grad is None else (accum, kd_grad)

    def _loss(self, pred, alpha, target, masks=None):
        return image_loss_terms(pred, alpha, target, masks, float(self.cfg.mask_weight))

    def _build(self, shade_args: tuple, loss_args: tuple) -> None:
        n = self._n_rows()
        head = shade_args[n:len(shade_args) - len(self.params)]  # light.base (read in place) or the mips (copied)
        shade_samples = (tuple(_leaf_like(t) for t in shade_args[:n])
                         + (head if self.builds_light else tuple(_leaf_like(t) for t in head)) + self.params)
        loss_samples = tuple(_leaf_like(t) for t in loss_args)
        if self.builds_light:  # an autograd graph kept alive from an eager build_mips holds the base's gradient
            # accumulator, made on the default stream: the capture must make its own (a capture that meets a
            # default-stream accumulator can fail)
            self.light.diffuse = None if self.light.diffuse is None else self.light.diffuse.detach()
            self.light.specular = None if self.light.specular is None else [c.detach() for c in self.light.specular]
        # The leaves' gradient accumulators are made during the capture's warm-up, on its side stream, so each
        # later backward adds one cross-stream wait per leaf (microseconds) and PyTorch warns about it once
        warnings.filterwarnings("ignore", message="The AccumulateGrad node's stream does not match",
                                category=UserWarning)
        self._graphs = torch.cuda.make_graphed_callables(
            (self._shade, self._loss), (shade_samples, loss_samples), allow_unused_input=True)

    # ---- one step ----------------------------------------------------------------------------------------
    def render(self, mesh: Mesh, views: PosedViews) -> tuple[dict, torch.Tensor, torch.Tensor]:
        """Render ``views`` of ``mesh`` and their image loss: ``(out, loss, srgb_mse)``.

        ``out`` holds ``shaded``, ``alpha`` (``[B, H, W, 3 | 1]``) and, with jitter, ``kd_grad`` only (not
        ``render_batch``'s ``kd``, ``ks``, ``normal``, ``depth``); ``loss`` and ``srgb_mse`` as
        ``losses.image_loss``. ``loss`` and ``kd_grad`` are the graphs' outputs: valid until the next call, which
        overwrites them (``srgb_mse`` is a copy). After a failed capture (:attr:`failed`) this is the eager
        covered-pixel render and loss (with all of ``render_batch``'s outputs).
        """
        from meshlift.methods.nvdiffrec.evaluate import render_batch
        from meshlift.methods.nvdiffrec.losses import image_loss
        from meshlift.renderers.mesh_pbr_dense import gbuffer_rows, resolve_dense_render

        if self.failed:
            out = render_batch(mesh, views, self.light, None if self.textured else self.material, self.cfg,
                               self.jitter)
            loss, mse = image_loss(out, views, self.cfg)
            return out, loss, mse
        rows, raster = gbuffer_rows(mesh, views.world_to_clip, views.camera_pos, views.resolution,
                                    background=views.background_images(), spp=self.cfg.spp,
                                    max_fragments=self.cfg.max_fragments,
                                    material=self.material if self.textured else None)
        head = (self.light.base,) if self.builds_light else (self.light.diffuse, *self.light.specular)
        shade_args = (*rows.tensors(), *head, *self.params)
        target = views.targets()
        masks = () if views.masks is None else (views.masks,)
        key = tuple((tuple(t.shape), t.requires_grad) for t in shade_args + (target,) + masks)
        if self._graphs is None or key != self._key:
            B, H, W = target.shape[:3]
            loss_head = (target.new_zeros(target.shape).requires_grad_(),  # stand-ins for the antialiased image
                         target.new_zeros(B, H, W, 1).requires_grad_(), target) + masks
            self._graphs = None  # an earlier capture's memory goes before the new one is taken
            why = None
            try:
                self._build(shade_args, loss_head)
                self._key = key
            except Exception as exc:  # noqa: BLE001 - any capture failure: a simpler graph, else eagerly
                _check_rng_after_failed_capture(exc, self.name)
                why = _first_line(exc)
            if why is not None:  # outside the handler: the failed capture's traceback and memory are released
                if self.builds_light:  # again without the light's mips in the graph (built eagerly each step)
                    self.builds_light = False
                    self.log(f"{self.name}: CUDA-graph capture with the light's prefilter failed ({why}); "
                             "capturing without it")
                    self.light.build_mips()
                else:
                    self.failed = True
                    self.log(f"{self.name}: CUDA-graph replay of the per-pixel step unavailable ({why}); running "
                             "it eagerly (--set cuda_graph_pixels=0 skips the attempt)")
                return self.render(mesh, views)
        shade, loss_fn = self._graphs
        outs = shade(*shade_args)
        kd_grad = outs[1] if self.jitter > 0 else None
        if self.builds_light:  # the step's cube maps, for what reads the light before the next step
            cubes = [c.detach() for c in outs[2 if self.jitter > 0 else 1:]]
            self.light.diffuse, self.light.specular = cubes[0], cubes[1:]
        out = resolve_dense_render(outs[0], raster, kd_grad)
        loss, mse = loss_fn(out["shaded"], out["alpha"], target, *masks)
        return out, loss, mse.detach().clone()
