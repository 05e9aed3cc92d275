"""Materials and light of the nvdiffrec method: the pass-1 material field and the environment light.

Sources: nvdiffrec (Munkberg et al., CVPR 2022, Sec. 4): a volumetric hash-grid material (Müller et al.,
"Instant Neural Graphics Primitives", SIGGRAPH 2022) in pass 1; a learned split-sum environment cube map
(Karis 2013), or a known light. Pass 2's textures are baked from the field by ``passes.prepare_pass2_mesh``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import torch
import torch.nn as nn

from meshlift.errors import ConfigError
from meshlift.methods.nvdiffrec.config import SurfaceConfig
from meshlift.methods.nvdiffrec.geometry import grid_bounds

__all__ = ["HASH_AUTO_MAX", "HASH_AUTO_MIN", "HASH_CELLS_PER_PIXEL", "BoundedMaterialField", "auto_hash_max_res",
           "make_light", "resolve_hash_max_res"]

#: ``hash_max_res = 0`` (auto): cells of the field's finest hash-grid level per training-image pixel at the object
#: (:func:`auto_hash_max_res`). 2 is the sampling limit: a finer level holds values that no training pixel
#: separates, fitted to one view's residual (noise, aliasing, a geometric error) and shown as speckle in every
#: other view (lego-half at 400²: pass 1 trains to ~30 dB and tests at 20.6 dB at nvdiffrec's 4096, and baking
#: the field into textures, a low-pass, gains 1.95 dB on the same mesh; benchmarks/results/log_surface_method.md).
HASH_CELLS_PER_PIXEL = 2.0
#: Bounds of the auto resolution: nvdiffrec's 4096 above (its NeRF-synthetic runs at 800², where the rule gives
#: about 1700), and at least 64 (a few levels above the 16 of the coarsest level).
HASH_AUTO_MAX = 4096
HASH_AUTO_MIN = 64

#: Amplitude of the uniform noise added to ``env_init`` in a learned light (breaks symmetry, nvdiffrec).
LEARNED_LIGHT_NOISE = 0.05


class BoundedMaterialField(nn.Module):
    """The pass-1 material field: ``meshlift.shading.material_field.MaterialField`` over the grid's box.

    A multiresolution hash-grid encoding + small MLP (Müller et al. 2022; nvdiffrec's pass-1 materials) with
    its outputs mapped into the configured kd/ks ranges. Called with points ``[N, 3]`` it returns
    ``dict(kd [N, 3], ks [N, 3])``; the field's normal output is not used (pass 1 shades with the geometric
    normals, the normal map is learned in pass 2).
    """

    def __init__(self, cfg: SurfaceConfig, device: torch.device) -> None:
        super().__init__()
        from meshlift.shading.material_field import MaterialField

        if int(cfg.hash_max_res) < 2:
            raise ConfigError(f"config field 'hash_max_res' = {cfg.hash_max_res}: the material field needs a "
                              "resolution >= 2; 0 (auto) must be resolved from the training views first "
                              "(methods.nvdiffrec.materials.resolve_hash_max_res)")
        lo, hi = grid_bounds(cfg)
        aabb = torch.tensor([[lo] * 3, [hi] * 3], dtype=torch.float32)
        self.field = MaterialField(
            aabb,
            kd_min=cfg.kd_min,
            kd_max=cfg.kd_max,
            ks_min=cfg.ks_min,
            ks_max=cfg.ks_max,
            n_levels=int(cfg.hash_levels),
            log2_hashmap_size=int(cfg.hash_log2_size),
            desired_resolution=int(cfg.hash_max_res),
        ).to(device)

    def forward(self, x: torch.Tensor) -> dict:
        out = self.field(x)
        return {"kd": out["kd"], "ks": out["ks"]}


def auto_hash_max_res(cfg: SurfaceConfig, views) -> int:
    """The material field's finest hash-grid resolution that the training images resolve: ``ceil(
    HASH_CELLS_PER_PIXEL · mesh_scale / footprint)``, where ``footprint`` is one pixel at the origin for the
    median view (:func:`meshlift.methods.nvdiffrec.geometry.pixel_footprint`, normalised units), clipped to
    ``[HASH_AUTO_MIN, HASH_AUTO_MAX]``. ``views``: the training :class:`~meshlift.data.views.PosedViews`.

    lego-half (400², focal 556 px, cameras 2.78 normalised units away), ``mesh_scale`` 2.1: 840; the same at
    800²: 1680; ``spot`` (512², 45° field of view, radius 3), ``mesh_scale`` 2.4: 989.
    """
    import math

    from meshlift.methods.nvdiffrec.geometry import pixel_footprint

    res = math.ceil(HASH_CELLS_PER_PIXEL * float(cfg.mesh_scale) / pixel_footprint(views) - 1e-9)
    return int(min(HASH_AUTO_MAX, max(HASH_AUTO_MIN, res)))


def resolve_hash_max_res(cfg: SurfaceConfig, views) -> SurfaceConfig:
    """``cfg`` with ``hash_max_res = 0`` (auto) replaced by :func:`auto_hash_max_res` of ``views``; any other
    value is returned as it is (the same object). The resolved number is what a run's ``config.json`` records."""
    import dataclasses

    if int(cfg.hash_max_res) != 0:
        return cfg
    return dataclasses.replace(cfg, hash_max_res=auto_hash_max_res(cfg, views))


def make_light(cfg: SurfaceConfig, device: torch.device, gt_light=None,
               generator: Optional[torch.Generator] = None):
    """The environment light of ``cfg.light``: returns ``(light, trainable)``.

    ``learned``: a ``[6, env_res, env_res, 3]`` cube map at ``env_init`` plus noise (seeded by ``generator``),
    trainable; ``fixed``: ``gt_light`` (the light a synthetic scene was rendered under); a path: that
    lat-long ``.hdr``/``.exr``, fixed.

    Raises:
        ConfigError: ``fixed`` without ``gt_light``, or neither keyword nor an existing file.
    """
    from meshlift.shading.light import EnvironmentLight

    min_res = max(4, min(16, int(cfg.env_res) // 4))
    if cfg.light == "learned":
        g = generator if generator is not None else torch.Generator().manual_seed(cfg.seed)
        base = cfg.env_init + LEARNED_LIGHT_NOISE * torch.rand(6, cfg.env_res, cfg.env_res, 3, generator=g)
        light = EnvironmentLight(base.to(device), trainable=True, min_res=min_res)
        light.build_mips()
        return light, True
    if cfg.light == "fixed":
        if gt_light is None:
            raise ConfigError(
                "light=fixed needs a reference environment (the light a synthetic scene from a mesh file was "
                "rendered under); for a dataset give the .hdr path: --set light=path/to/env.hdr"
            )
        light = gt_light
        if light.specular is None:
            light.build_mips()
        return light, False
    path = Path(cfg.light)
    if not path.is_file():
        raise ConfigError(f"config field 'light' = {cfg.light!r}: not 'learned', 'fixed' or an existing .hdr/.exr file")
    from meshlift.io.hdr import read_light

    light = read_light(path, res=int(cfg.env_res), trainable=False, min_res=min_res).to(device)
    light.build_mips()
    return light, False
