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

__all__ = ["BoundedMaterialField", "make_light"]

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
