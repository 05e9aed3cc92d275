"""Small surface-method scenes shared by the pixel-graph tests: posed views on a ring around the origin and a
torus with UVs and trainable texture maps."""

from __future__ import annotations

import math

import torch


def views_on_a_ring(n: int, res: int):
    """``n`` views of ``res``² around the origin (radius 2.2), random images and binary masks (seeded)."""
    from meshlift.cameras import look_at, projection_from_K
    from meshlift.data.views import PosedViews

    g = torch.Generator().manual_seed(0)
    ang = torch.linspace(0, 2 * math.pi, n + 1)[:n]
    eye = torch.stack([2.2 * torch.cos(ang), 0.6 * torch.ones(n), 2.2 * torch.sin(ang)], 1).double()
    w2c = look_at(eye, torch.zeros_like(eye), torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64).expand_as(eye))
    f = 0.5 * res / math.tan(math.radians(25))
    K = torch.tensor([[f, 0, res / 2], [0, f, res / 2], [0, 0, 1]])
    w2clip = projection_from_K(K.expand(n, 3, 3), res, res, 0.1, 10.0) @ w2c.float()
    return PosedViews(world_to_clip=w2clip, camera_pos=eye.float(), images=torch.rand(n, res, res, 3, generator=g),
                      masks=(torch.rand(n, res, res, 1, generator=g) > 0.5).float(), background=torch.ones(3),
                      straight=True)


def uv_torus(dev):
    """A torus with UVs from its two angles and, for pass 2's case, kd / ks / normal maps as trained leaves."""
    import trimesh

    from meshlift.structures.mesh import Material

    tm = trimesh.creation.torus(0.6, 0.25, 24, 12)
    x, y, z = torch.tensor(tm.vertices, dtype=torch.float32).unbind(1)
    uv = torch.stack([torch.atan2(y, x) / (2 * math.pi) + 0.5,
                      torch.atan2(z, torch.sqrt(x * x + y * y) - 0.6) / (2 * math.pi) + 0.5], 1)
    g = torch.Generator().manual_seed(5)
    nrm = torch.nn.functional.normalize(torch.rand(32, 32, 3, generator=g) - torch.tensor([0.5, 0.5, -1.0]), dim=-1)
    maps = [torch.nn.Parameter(t.to(dev)) for t in (torch.rand(32, 32, 3, generator=g),
                                                     0.2 + 0.6 * torch.rand(32, 32, 3, generator=g), nrm)]
    return tm, uv.to(dev), Material(*maps)
