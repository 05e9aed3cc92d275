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


def uv_torus(dev, sections: tuple[int, int] = (24, 12), size: int = 32):
    """A torus (major / minor ``sections``) with UVs from its two angles and, for pass 2's case, ``size``²
    kd / ks / normal maps as trained leaves (seeded; the normal map tilted, z > 0)."""
    import trimesh

    from meshlift.structures.mesh import Material

    tm = trimesh.creation.torus(0.6, 0.25, *sections)
    x, y, z = torch.tensor(tm.vertices, dtype=torch.float32).unbind(1)
    uv = torch.stack([torch.atan2(y, x) / (2 * math.pi) + 0.5,
                      torch.atan2(z, torch.sqrt(x * x + y * y) - 0.6) / (2 * math.pi) + 0.5], 1)
    g = torch.Generator().manual_seed(5)
    nrm = torch.nn.functional.normalize(torch.rand(size, size, 3, generator=g) - torch.tensor([0.5, 0.5, -1.0]),
                                        dim=-1)
    maps = [torch.nn.Parameter(t.to(dev)) for t in (torch.rand(size, size, 3, generator=g),
                                                     0.2 + 0.6 * torch.rand(size, size, 3, generator=g), nrm)]
    return tm, uv.to(dev), Material(*maps)


def two_view_torus_scene(dev, light):
    """The 24² two-view torus scene of the render tests: ``(w2clip [2, 4, 4], eye [2, 3], field, scale)`` —
    ``field`` a small analytic material field whose albedo scales with the leaf ``scale`` — and ``light``'s
    built mips moved to ``dev`` as leaves (so gradients to them can be compared)."""
    from meshlift.cameras import look_at, projection_from_K

    light.diffuse = light.diffuse.detach().to(dev).requires_grad_()
    light.specular = [x.detach().to(dev).requires_grad_() for x in light.specular]
    scale = torch.tensor([0.9, 0.7, 0.5], device=dev, requires_grad=True)

    def field(x):
        kd = (0.5 + 0.4 * torch.sin(1.5 * x)) * scale
        rough = (0.3 + 0.3 * x[:, :1].abs()).clamp(0, 1)
        return {"kd": kd, "ks": torch.cat([0.1 * rough, rough, 0.5 * rough], 1)}

    eye = torch.tensor([[0.0, 1.5, 2.0], [2.0, -1.0, 0.5]], dtype=torch.float64)
    w2c = look_at(eye, torch.zeros_like(eye), torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64).expand_as(eye)).float()
    f = 0.5 * 24 / math.tan(math.radians(25))
    K = torch.tensor([[f, 0, 12.0], [0, f, 12.0], [0, 0, 1]])
    w2clip = (projection_from_K(K.expand(2, 3, 3), 24, 24, 0.1, 10.0) @ w2c).to(dev)
    return w2clip, eye.float().to(dev), field, scale


def pass_material(cfg, textured: bool, dev):
    """A pass's material and a mesh for it: ``(trimesh, uv or None, material, trained parameters)`` — pass 2's
    textured torus (:func:`uv_torus`) or pass 1's hash-grid field with an icosphere."""
    import trimesh

    from meshlift.methods.nvdiffrec.materials import BoundedMaterialField

    if textured:
        tm, uv, material = uv_torus(dev)
        return tm, uv, material, [material.kd, material.ks, material.normal]
    material = BoundedMaterialField(cfg, dev)
    return trimesh.creation.icosphere(2, 0.8), None, material, list(material.parameters())


def render_by(path: str, graphs, mesh, batch, light, material, cfg, textured: bool, light_in_graph: bool):
    """One step's ``(out, loss, srgb_mse)`` by ``path``: ``"graph"`` (``graphs.render``, which builds the light's
    mips itself when ``light_in_graph``) or ``"eager"`` (``render_batch`` + ``image_loss``)."""
    from meshlift.methods.nvdiffrec.evaluate import render_batch
    from meshlift.methods.nvdiffrec.losses import image_loss

    if path == "eager" or not light_in_graph:
        light.build_mips()
    if path == "graph":
        return graphs.render(mesh, batch)
    out = render_batch(mesh, batch, light, None if textured else material, cfg)
    loss, mse = image_loss(out, batch, cfg)
    return out, loss, mse
