"""Synthetic unmasked "phone captures" with known geometry: a textured mesh on a textured ground plane.

:class:`meshlift.data.synthetic.SyntheticDataset` renders a gt mesh over black with masks, the protocol of
nvdiffrec (Munkberg et al., CVPR 2022, Sec. 5.1). Real captures have no masks: the object stands on a floor
and the surroundings fill the background. :func:`make_synthetic_scene` renders that case with known truth,
so a method fed unmasked images (Gaussian splatting, MILo) can still be scored on the *object* with
Chamfer distance / F-score inside an evaluation box, as DTU and Tanks-and-Temples evaluate within a
bounding region (Jensen et al. 2014; Knapitsch et al. 2017).

Scene frame (docs/conventions.md §1): **+Y is up and the ground is the plane y = 0** (the up axis of OBJ /
glTF and of the environment maps, conventions §8). The mesh is normalised as ``SyntheticDataset`` does
(bounding box centred, longest side 2: :func:`~meshlift.data.synthetic.normalization_transform`) and then
moved up so its lowest point touches the ground: its box spans ``x, z ∈ [-a, a]`` and ``y ∈ [0, h]``. The
similarity mesh file → scene is :attr:`SyntheticScene.world_to_normalized`. Cameras are OpenCV
(conventions §2); ``K`` in pixels; images are ``[V, H, W, 3]`` float32 **sRGB** in [0, 1], what a camera
gives: linear radiance × ``exposure``, clamped to [0, 1], sRGB-encoded (conventions §6). No alpha, no masks.

Rendering (conventions §3, §8): three layers, back to front, each composited on the one behind by
:func:`meshlift.renderers.mesh_pbr.render_mesh` (split-sum PBR, antialiased silhouettes):

1. the environment along every pixel's view ray (:meth:`SceneEnvironment.radiance`);
2. the ground, a square grid mesh with a procedural tiled texture (roughness 0.8, not metallic);
3. the object, with its own material (grey ``DEFAULT_KD`` without one).

Both meshes are lit by the same :class:`~meshlift.shading.light.EnvironmentLight` (no shadows: split-sum
has none). Layering instead of a depth test is exact here: the object lies in ``y >= 0`` and every camera
is above the plane (checked), so the segment from a camera to any object point never crosses the ground;
the ground can never hide the object, and the object hides the ground wherever it covers it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, NamedTuple, Optional, Sequence, Union

import torch

from meshlift.errors import ConfigError, MeshError
from meshlift.geometry.similarity import transform_mesh
from meshlift.structures.mesh import Material, Mesh

__all__ = ["GroundConfig", "OrbitConfig", "SceneEnvironment", "SceneViews", "SyntheticScene",
           "make_scene_environment", "make_synthetic_scene", "scene_environment_radiance"]

#: Evaluation box margin: the object's box grows by this fraction of its diagonal on every side ...
EVAL_MARGIN = 0.05
#: ... except the bottom, raised to ``ground + EVAL_CLEARANCE`` (scene units, 0.5 % of the object's longest
#: side) so the ground plane and its reconstruction noise stay out of the F-score.
EVAL_CLEARANCE = 0.01


# ---------------------------------------------------------------------------------------------------------
# options


@dataclass
class OrbitConfig:
    """Cameras of a hand-held capture walking around the object (rings around +Y, looking at its centre)."""

    elevations_deg: tuple = (15.0, 35.0)
    """Elevation above the ground plane of each ring, degrees (one or more rings; all > 0)."""
    distance: tuple = (2.6, 3.4)
    """``(nearest, farthest)`` ring distance from the object centre, scene units (the object's longest side
    is 2, so 2.5-3.5 "half sizes"); rings take evenly spaced values, the first ring the nearest."""
    fov_deg: float = 65.0
    """Full *vertical* field of view, degrees (a phone's main camera, held in landscape or portrait)."""
    azimuth_jitter_deg: float = 3.0
    """Uniform jitter of each camera's azimuth around its even spacing, degrees."""
    elevation_jitter_deg: float = 3.0
    """Uniform jitter of each camera's elevation, degrees."""
    distance_jitter: float = 0.05
    """Uniform relative jitter of each camera's distance."""
    look_jitter: float = 0.05
    """Uniform jitter of the look-at point around the object centre, per axis, scene units."""
    roll_jitter_deg: float = 3.0
    """Uniform roll of the camera about its viewing axis, degrees."""


@dataclass
class GroundConfig:
    """The floor: a square textured plane y = 0 centred under the object."""

    size: float = 15.0
    """Side of the square in object sizes (the object's longest side, 2 scene units)."""
    texture: str = "procedural"
    """``"procedural"`` (checker tiles with grout and multi-scale noise, seeded) or ``"constant"``."""
    color: tuple = (0.45, 0.4, 0.35)
    """Linear albedo of ``"constant"``, and the mean tone of ``"procedural"``."""
    tile: float = 2.0
    """Period of the procedural texture on the plane, scene units (it repeats, with a low-frequency
    vertex-colour tint across the plane so the repetition is not exact)."""
    texture_res: int = 512
    """Texels per side of one period."""
    roughness: float = 0.8
    """GGX roughness of the floor."""
    grid: int = 16
    """Quads per side of the plane mesh (carries the tint; bounds triangle size for near-plane clipping)."""


# ---------------------------------------------------------------------------------------------------------
# environment


def _smoothstep(e0: float, e1: float, x: torch.Tensor) -> torch.Tensor:
    t = torch.clamp((x - e0) / (e1 - e0), 0.0, 1.0)
    return t * t * (3.0 - 2.0 * t)


def _unit(el: float, az: float) -> torch.Tensor:
    return torch.tensor([math.cos(el) * math.sin(az), math.sin(el), -math.cos(el) * math.cos(az)])


def scene_environment_radiance(dirs: torch.Tensor, seed: int = 0, intensity: float = 1.0) -> torch.Tensor:
    """The procedural outdoor environment: linear HDR radiance along directions (+Y up, conventions §8).

    A blue sky gradient with soft clouds, a sun (2° disc, radiance ~50, with a glow), a skyline at the
    horizon (hills, and 48 "building" blocks of 1-10° with seeded colours and window stripes) and a
    brown ground below the horizon. Edges are smoothed over ~0.3° so one sample per pixel barely aliases.

    Args:
        dirs: ``[..., 3]`` directions (normalised here), any device.
        seed: places the sun, clouds and skyline and picks their colours (same seed, same map).
        intensity: multiplies the radiance.

    Returns:
        ``[..., 3]`` float32 radiance, non-negative, on ``dirs``' device.
    """
    g = torch.Generator().manual_seed(int(seed))
    rnd = lambda *s: torch.rand(*s, generator=g, dtype=torch.float32)  # noqa: E731
    dev = dirs.device
    d = torch.nn.functional.normalize(dirs.float(), dim=-1)
    y = d[..., 1:2]
    el = torch.asin(y.clamp(-1.0, 1.0))
    az = torch.atan2(d[..., 0:1], -d[..., 2:3])  # [-pi, pi], 0 = -z
    c = lambda *v: torch.tensor(v, device=dev)  # noqa: E731
    t = y.clamp(min=0.0).sqrt()
    env = c(0.95, 0.9, 0.85) * (1 - t) + c(0.15, 0.3, 0.8) * t
    for _ in range(7):  # clouds: soft blobs 5-15 degrees across
        ctr = _unit(math.radians(8 + 50 * float(rnd(()))), 2 * math.pi * float(rnd(()))).to(dev)
        w = torch.exp((d @ ctr)[..., None].sub(1.0) / (math.radians(4 + 8 * float(rnd(())))) ** 2)
        env = env * (1 - 0.8 * w) + 1.1 * 0.8 * w
    sun = _unit(math.radians(30 + 20 * float(rnd(()))), 2 * math.pi * float(rnd(()))).to(dev)
    cs = (d @ sun)[..., None]
    env = env + (1.5 * torch.exp(80.0 * (cs - 1)) + 0.3 * torch.exp(8.0 * (cs - 1))) * c(1.0, 0.9, 0.7)
    ang = torch.acos(cs.clamp(-1.0, 1.0))
    env = env + 50.0 * (1 - _smoothstep(math.radians(1.7), math.radians(2.3), ang)) * c(1.0, 0.95, 0.85)
    e = math.radians(0.3)
    # hills: a smooth skyline 2-7 degrees high
    ph = 2 * math.pi * rnd(3)
    hill = math.radians(4.5) + math.radians(1.2) * sum(torch.sin((k + 2) * az + float(ph[k])) for k in range(3))
    m = 1 - _smoothstep(-e, e, el - hill)
    env = env * (1 - m) + m * c(0.1, 0.16, 0.07) * (0.8 + 0.4 * _smoothstep(-1.0, 1.0, torch.sin(9 * az)))
    # buildings: 48 sectors (some empty) with a height, a colour and window stripes
    n_sec = 48
    heights = torch.where(rnd(n_sec) < 0.3, torch.zeros(n_sec), math.radians(1.0) + math.radians(9.0) * rnd(n_sec))
    palette = torch.tensor([[0.45, 0.2, 0.15], [0.35, 0.35, 0.38], [0.6, 0.55, 0.45], [0.2, 0.25, 0.4],
                            [0.5, 0.4, 0.2], [0.25, 0.3, 0.22]])
    cols = palette[torch.randint(0, len(palette), (n_sec,), generator=g)] * (0.7 + 0.6 * rnd(n_sec, 1))
    pos = (az + math.pi) / (2 * math.pi) * n_sec
    sec = pos.floor().long().clamp(0, n_sec - 1)[..., 0]
    frac = pos - pos.floor()
    hb = heights.to(dev)[sec][..., None]
    side = _smoothstep(0.0, 0.06, frac) * _smoothstep(1.0, 0.94, frac)  # gaps between blocks
    mb = (1 - _smoothstep(-e, e, el - hb)) * side * (hb > 0)
    win = 0.55 + 0.45 * _smoothstep(-0.3, 0.3, torch.sin(el * 240.0)) * _smoothstep(-0.3, 0.3, torch.sin(frac * 6 * math.pi))
    env = env * (1 - mb) + mb * cols.to(dev)[sec] * win
    below = 1 - _smoothstep(-e, e, el)
    env = env * (1 - below) + below * c(0.25, 0.21, 0.17) * (0.7 + 0.3 * torch.exp(8 * el))
    return (env * float(intensity)).clamp_min(0.0).float()


@dataclass
class SceneEnvironment:
    """The environment of a synthetic scene: one light for shading and the radiance seen as background."""

    light: object
    """:class:`~meshlift.shading.light.EnvironmentLight` with its mips built (shading of object and ground)."""
    radiance_fn: Optional[Callable[[torch.Tensor], torch.Tensor]] = None
    """``dirs [..., 3] -> radiance [..., 3]`` for background pixels (e.g. the procedural function, exact at
    any resolution), or None: the light's own cube map (``shading.cubemap.sample_cube`` of ``light.base``)."""

    def radiance(self, dirs: torch.Tensor) -> torch.Tensor:
        """Linear radiance ``[..., 3]`` (float32) arriving along unit directions ``dirs [..., 3]`` (world)."""
        if self.radiance_fn is not None:
            return self.radiance_fn(dirs).float()
        from meshlift.shading.cubemap import sample_cube

        base = self.light.base.detach()
        return sample_cube(base, dirs.to(device=base.device, dtype=base.dtype)).float()


def make_scene_environment(environment="procedural", *, seed: int = 0, env_res: int = 64,
                           device: Union[str, torch.device] = "cpu") -> SceneEnvironment:
    """Build the :class:`SceneEnvironment` of ``environment``.

    Args:
        environment: ``"procedural"`` (:func:`scene_environment_radiance` with ``seed``), a
            :class:`SceneEnvironment` (returned as is), an ``EnvironmentLight`` (its mips are built here;
            its cube is the background), a lat-long map ``[H, 2H, 3]`` of linear radiance, or the path of a
            lat-long ``.hdr`` / ``.exr`` file (the map itself is the background, sampled bilinearly).
        seed: seed of the procedural map.
        env_res: cube face size of the shading light (a power of two >= 16).
        device: where the light lives.

    Raises:
        ConfigError: an unknown kind of ``environment``, a missing file, or a map of the wrong shape.
    """
    from meshlift.shading.cubemap import latlong_directions, sample_latlong
    from meshlift.shading.light import EnvironmentLight

    device = torch.device(device)
    if isinstance(environment, SceneEnvironment):
        return environment
    if isinstance(environment, EnvironmentLight):
        light = environment.to(device)
        light.build_mips()
        return SceneEnvironment(light)
    if isinstance(environment, (str, Path)) and str(environment) == "procedural":
        fn = lambda d: scene_environment_radiance(d, seed)  # noqa: E731
        latlong = fn(latlong_directions(2 * int(env_res)))
    elif isinstance(environment, torch.Tensor):
        latlong = environment.detach().float().cpu()
        fn = None
    elif isinstance(environment, (str, Path)):
        if not Path(environment).is_file():
            raise ConfigError(f"make_synthetic_scene(environment): {str(environment)!r} is neither 'procedural' "
                              "nor an existing .hdr/.exr file")
        from meshlift.io.hdr import read_hdr

        latlong = torch.as_tensor(read_hdr(Path(environment)), dtype=torch.float32)[..., :3]
        fn = None
    else:
        raise ConfigError(f"make_synthetic_scene(environment): expected 'procedural', a path, a lat-long tensor, "
                          f"an EnvironmentLight or a SceneEnvironment, got {type(environment).__name__}")
    if latlong.ndim != 3 or latlong.shape[-1] != 3 or latlong.shape[1] != 2 * latlong.shape[0]:
        raise ConfigError(f"make_synthetic_scene(environment): a lat-long map must be [H, 2H, 3], got "
                          f"{tuple(latlong.shape)}")
    if fn is None:
        img = latlong.to(device)
        fn = lambda d: sample_latlong(img, d.to(img))  # noqa: E731
    light = EnvironmentLight.from_latlong(latlong, int(env_res), trainable=False).to(device)
    light.build_mips()
    return SceneEnvironment(light, fn)


# ---------------------------------------------------------------------------------------------------------
# ground


def _periodic_noise(res: int, beta: float, g: torch.Generator) -> torch.Tensor:
    """``[res, res]`` seamless (periodic) noise with power spectrum ``1/f^beta``, normalised to [0, 1]."""
    white = torch.randn(res, res, generator=g, dtype=torch.float64)
    f = torch.fft.fftfreq(res, dtype=torch.float64)
    fr = (f[:, None] ** 2 + f[None, :] ** 2).sqrt()
    fr[0, 0] = 1.0
    spec = torch.fft.fft2(white) / fr ** (beta / 2)
    spec[0, 0] = 0.0
    n = torch.fft.ifft2(spec).real
    return ((n - n.min()) / (n.max() - n.min()).clamp_min(1e-12)).float()


def ground_texture(cfg: GroundConfig, seed: int) -> torch.Tensor:
    """One period of the procedural floor texture: ``[R, R, 3]`` float32 linear albedo in [0.02, 0.95].

    4 × 4 checker tiles of two tones around ``cfg.color`` with dark grout lines, modulated by seamless
    multi-scale noise (1/f² coarse stains + 1/f fine grain), so every patch has texture to match across
    views. Deterministic in ``seed``; periodic, so the ``wrap`` lookups tile it without seams.
    """
    R = int(cfg.texture_res)
    g = torch.Generator().manual_seed(int(seed) + 7919)
    coarse, fine = _periodic_noise(R, 2.0, g), _periodic_noise(R, 1.0, g)
    tone = torch.tensor(cfg.color, dtype=torch.float32)
    hue = 0.85 + 0.3 * torch.rand(2, 3, generator=g)
    u = (torch.arange(R, dtype=torch.float32) + 0.5) / R * 4
    cell = (u.floor()[:, None] + u.floor()[None, :]) % 2  # [R, R]
    base = torch.where(cell[..., None] > 0, tone * 1.35 * hue[0], tone * 0.7 * hue[1])
    du = (u - u.round()).abs()
    grout = 1 - 0.6 * (1 - _smoothstep(0.01, 0.03, torch.minimum(du[:, None], du[None, :])))
    kd = base * (0.55 + 0.6 * coarse[..., None]) * (0.75 + 0.5 * fine[..., None]) * grout[..., None]
    return kd.clamp(0.02, 0.95).contiguous()


def make_ground_mesh(cfg: GroundConfig, seed: int, object_size: float = 2.0) -> Mesh:
    """The floor: a ``cfg.grid``² quad grid on y = 0, side ``cfg.size · object_size``, centred at the origin.

    Faces wind counter-clockwise seen from +Y (normal +Y); UVs are ``(x, z) / cfg.tile`` (the texture
    repeats through the renderer's ``wrap`` lookups); ``v_color`` is a smooth seeded tint in [0.7, 1]
    (``"procedural"`` only) that breaks the repetition. Material: ``kd`` from :func:`ground_texture` (or
    ``cfg.color``), ``ks = (0, cfg.roughness, 0)``.
    """
    n = int(cfg.grid)
    half = 0.5 * float(cfg.size) * float(object_size)
    s = torch.linspace(-half, half, n + 1)
    zz, xx = torch.meshgrid(s, s, indexing="ij")  # vertex (i, j) at x = s[j], z = s[i]
    v = torch.stack([xx, torch.zeros_like(xx), zz], -1).reshape(-1, 3)
    i, j = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
    v00 = (i * (n + 1) + j).reshape(-1)
    v01, v10, v11 = v00 + 1, v00 + n + 1, v00 + n + 2
    faces = torch.cat([torch.stack([v00, v10, v01], -1), torch.stack([v01, v10, v11], -1)])
    ks = torch.tensor([[[0.0, float(cfg.roughness), 0.0]]])
    color = None
    if cfg.texture == "procedural":
        kd = ground_texture(cfg, seed)
        g = torch.Generator().manual_seed(int(seed) + 104729)
        k = torch.randn(4, 2, generator=g) * (2 * math.pi / (2 * half)) * 2.5
        ph = 2 * math.pi * torch.rand(4, generator=g)
        tint = sum(torch.cos(v[:, [0, 2]] @ k[q] + ph[q]) for q in range(4)) / 4  # [-1, 1]
        color = (0.85 + 0.15 * tint)[:, None].expand(-1, 3).contiguous()
    elif cfg.texture == "constant":
        kd = torch.tensor(cfg.color, dtype=torch.float32).reshape(1, 1, 3)
    else:
        raise ConfigError(f"GroundConfig.texture must be 'procedural' or 'constant', got {cfg.texture!r}")
    nrm = torch.tensor([[0.0, 1.0, 0.0]]).expand(v.shape[0], 3).contiguous()
    return Mesh(v_pos=v, t_pos_idx=faces, v_tex=v[:, [0, 2]] / float(cfg.tile), t_tex_idx=faces.clone(),
                v_nrm=nrm, t_nrm_idx=faces.clone(), v_color=color, material=Material(kd=kd, ks=ks, name="ground"))


# ---------------------------------------------------------------------------------------------------------
# cameras


def _split_counts(n: int, k: int) -> list[int]:
    return [n // k + (1 if r < n % k else 0) for r in range(k)]


def phone_orbit_cameras(n: int, centre: torch.Tensor, cfg: OrbitConfig, size: tuple[int, int], seed: int,
                        near: float, far: float):
    """``n`` cameras on the rings of ``cfg`` around the vertical axis through ``centre [3]`` (scene frame).

    The views are in capture order: ring after ring (the first rings get one more view when ``n`` does not
    divide), azimuths evenly spaced from a random start with jitter, each camera at
    ``centre + dist · (cos el sin az, sin el, cos el cos az)`` looking at ``centre`` + jitter with +Y up,
    then rolled about its viewing axis. ``size`` is ``(H, W)``. Returns a :class:`meshlift.cameras.Cameras`.
    """
    from meshlift.cameras import look_at_cameras

    g = torch.Generator().manual_seed(int(seed) + 31337)
    u = lambda *s: torch.rand(*s, generator=g, dtype=torch.float64) * 2 - 1  # noqa: E731
    rings = [float(e) for e in cfg.elevations_deg]
    d_lo, d_hi = (float(x) for x in cfg.distance)
    eyes, targets, rolls = [], [], []
    for r, (el_deg, cnt) in enumerate(zip(rings, _split_counts(n, len(rings)))):
        if cnt == 0:
            continue
        az0 = math.pi * float(u(())) + (math.pi / cnt if r % 2 else 0.0)
        az = az0 + 2 * math.pi * torch.arange(cnt, dtype=torch.float64) / cnt + math.radians(cfg.azimuth_jitter_deg) * u(cnt)
        el = torch.deg2rad(el_deg + float(cfg.elevation_jitter_deg) * u(cnt))
        dist = (d_lo + (d_hi - d_lo) * (r / (len(rings) - 1) if len(rings) > 1 else 0.5)) * (1 + cfg.distance_jitter * u(cnt))
        dirs = torch.stack([el.cos() * az.sin(), el.sin(), el.cos() * az.cos()], -1)
        eyes.append(centre.double() + dist[:, None] * dirs)
        targets.append(centre.double() + float(cfg.look_jitter) * u(cnt, 3))
        rolls.append(torch.deg2rad(float(cfg.roll_jitter_deg) * u(cnt)))
    H, W = size
    cams = look_at_cameras(torch.cat(eyes), torch.cat(targets), (0.0, 1.0, 0.0), math.radians(cfg.fov_deg), (W, H),
                           near=near, far=far, fov_side="height")
    roll = torch.cat(rolls)
    Rz = torch.zeros(n, 4, 4, dtype=torch.float64)
    Rz[:, 0, 0], Rz[:, 0, 1], Rz[:, 1, 0], Rz[:, 1, 1] = roll.cos(), -roll.sin(), roll.sin(), roll.cos()
    Rz[:, 2, 2] = Rz[:, 3, 3] = 1.0
    return replace(cams, world_to_camera=(Rz @ cams.world_to_camera.double()).float())


def _check_orbit(cfg: OrbitConfig, bound_radius: float) -> None:
    lo_el = min(cfg.elevations_deg) - abs(cfg.elevation_jitter_deg) if len(cfg.elevations_deg) else 0.0
    if not len(cfg.elevations_deg) or lo_el <= 1.0 or max(cfg.elevations_deg) + abs(cfg.elevation_jitter_deg) >= 89.0:
        raise ConfigError(f"make_synthetic_scene(orbit): elevations_deg {tuple(cfg.elevations_deg)} with jitter "
                          f"{cfg.elevation_jitter_deg} must stay within (1, 89) degrees above the ground")
    d_lo, d_hi = (float(x) for x in cfg.distance)
    if not 0 < d_lo <= d_hi or d_lo * (1 - abs(cfg.distance_jitter)) <= 1.05 * bound_radius:
        raise ConfigError(f"make_synthetic_scene(orbit): distance {tuple(cfg.distance)} must be increasing and put "
                          f"every camera outside the object's bounding sphere (radius {bound_radius:.3f})")
    if not 5.0 < float(cfg.fov_deg) < 150.0:
        raise ConfigError(f"make_synthetic_scene(orbit): fov_deg must be in (5, 150), got {cfg.fov_deg}")


def _ray_hints(cams, ground_half: float, box: torch.Tensor, grid: int = 17) -> tuple[torch.Tensor, float, float]:
    """``(bounds [2, 3], near, far)`` from a ``grid``² subset of pixel rays per view hitting the ground
    square, and the object box ``[2, 3]`` corners' depths."""
    fwd = cams.forward_directions().double()
    o = cams.camera_centers().double()
    W, H = cams.width, cams.height
    jj = torch.linspace(0.5, W - 0.5, grid, dtype=torch.float64)
    ii = torch.linspace(0.5, H - 0.5, grid, dtype=torch.float64)
    pix = torch.stack(torch.meshgrid(jj, ii, indexing="xy"), -1).reshape(1, -1, 2).expand(len(cams), -1, 2)
    xy = cams.pixel_to_normalized(pix.float()).double()
    R = cams.world_to_camera[:, :3, :3].double()
    d = torch.einsum("nji,npj->npi", R, torch.cat([xy, torch.ones_like(xy[..., :1])], -1))
    t = -o[:, None, 1] / d[..., 1].clamp(max=-1e-9)
    p = o[:, None] + t[..., None] * d
    hit = (d[..., 1] < -1e-9) & (p[..., 0].abs() <= ground_half) & (p[..., 2].abs() <= ground_half)
    corners = torch.stack(torch.meshgrid(*[box[:, k].double() for k in range(3)], indexing="ij"), -1).reshape(-1, 3)
    depth_c = ((corners[None] - o[:, None]) * fwd[:, None]).sum(-1)
    depth_g = ((p - o[:, None]) * fwd[:, None]).sum(-1)[hit]
    pts = torch.cat([p[hit], corners])
    depths = torch.cat([depth_g, depth_c.reshape(-1)])
    ground_corners = torch.tensor([[s * ground_half, 0.0, r * ground_half] for s in (-1, 1) for r in (-1, 1)],
                                  dtype=torch.float64)
    far_all = float(((ground_corners[None] - o[:, None]) * fwd[:, None]).sum(-1).max())
    bounds = torch.stack([pts.min(0).values, pts.max(0).values]).float()
    return bounds, max(float(depths.min()) * 0.8, 1e-3), max(float(depths.max()), far_all) * 1.1


# ---------------------------------------------------------------------------------------------------------
# the record


class SceneViews(NamedTuple):
    """One split of a :class:`SyntheticScene`, ready for ``methods.gaussians.views.SplatViews`` (alpha None)."""

    world_to_camera: torch.Tensor
    """``[N, 4, 4]`` float32 OpenCV extrinsics, scene frame (CPU)."""
    K: torch.Tensor
    """``[N, 3, 3]`` float32 intrinsics, pixels (CPU)."""
    images: torch.Tensor
    """``[N, H, W, 3]`` float32 sRGB in [0, 1], opaque (premultiplied by alpha = 1) (CPU)."""
    names: list
    """View names, ``frame_0000`` ... in capture order."""


@dataclass
class SyntheticScene:
    """An unmasked synthetic capture with known geometry (built by :func:`make_synthetic_scene`).

    Scene frame: +Y up, ground plane y = 0 (:attr:`ground_height`), object resting on it (module docstring).
    Views are stored in capture order; :attr:`splits` picks the train / test views.
    """

    images: torch.Tensor
    """``[V, H, W, 3]`` float32 sRGB in [0, 1] (exposure, clamp, sRGB encoding), CPU, capture order."""
    cameras: object
    """:class:`meshlift.cameras.Cameras` of the ``V`` views, scene frame, OpenCV, ``K`` in pixels (CPU)."""
    names: list
    """``V`` view names, ``frame_0000`` ... in capture order."""
    splits: dict
    """``{"train": LongTensor, "test": LongTensor}`` disjoint view indices (test interleaved evenly)."""
    gt_mesh: Mesh
    """The object in the scene frame (CPU): the truth to score against (crop with the eval box)."""
    ground_mesh: Mesh
    """The floor as rendered (scene frame, CPU); not part of the object."""
    eval_box_min: torch.Tensor
    """``[3]`` float32: object box − ``EVAL_MARGIN`` · diagonal, y raised to ground + ``EVAL_CLEARANCE``."""
    eval_box_max: torch.Tensor
    """``[3]`` float32: object box + ``EVAL_MARGIN`` · diagonal."""
    scene_bounds: torch.Tensor
    """``[2, 3]`` float32 box holding the object and the ground the cameras see (from a 17² ray grid)."""
    near: float
    """Hint: a depth closer than anything visible (scene units)."""
    far: float
    """Hint: a depth beyond the visible ground and the object."""
    world_to_normalized: torch.Tensor
    """``[4, 4]`` float64 similarity mesh file units → scene frame (inverse brings results back to file units)."""
    environment: SceneEnvironment
    """Light and background radiance the views were rendered with."""
    object_coverage: torch.Tensor
    """``[V, H, W, 1]`` float16 antialiased coverage of the object: evaluation truth only (the capture has
    no masks; a method must not read it)."""
    exposure: float = 1.0
    """Linear radiance multiplier before clamping and sRGB encoding."""
    ground_height: float = 0.0
    """y of the ground plane; the up axis is +Y."""
    metadata: dict = field(default_factory=dict)
    """Settings it was made with (orbit, ground, seed, spp, timing)."""

    @property
    def resolution(self) -> tuple[int, int]:
        """``(H, W)`` of every view."""
        return int(self.images.shape[1]), int(self.images.shape[2])

    @property
    def world_to_camera(self) -> torch.Tensor:
        """``[V, 4, 4]`` float32 extrinsics of all views."""
        return self.cameras.world_to_camera

    @property
    def K(self) -> torch.Tensor:  # noqa: N802
        """``[V, 3, 3]`` float32 intrinsics of all views."""
        return self.cameras.K

    @property
    def images_train(self) -> torch.Tensor:
        """``[V_train, H, W, 3]`` sRGB training images."""
        return self.images[self.splits["train"]]

    @property
    def images_test(self) -> torch.Tensor:
        """``[V_test, H, W, 3]`` sRGB held-out images."""
        return self.images[self.splits["test"]]

    @property
    def eval_box(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(min [3], max [3])``, e.g. ``metrics.geometry.mesh_metrics(pred, gt_mesh, crop_box=scene.eval_box)``
        (or cut a mesh to it with :func:`meshlift.mesh.crop.crop_mesh`)."""
        return self.eval_box_min, self.eval_box_max

    def views(self, split: str) -> SceneViews:
        """The views of ``split`` (``"train"`` or ``"test"``) for the Gaussian pipeline.

        Build ``SplatViews(v.world_to_camera, v.K, v.images.to(STORE_DTYPE), None, v.names)``: the images are
        opaque (alpha = 1, so premultiplied = straight). Raises ConfigError for another split name.
        """
        if split not in self.splits:
            raise ConfigError(f"SyntheticScene.views(split): unknown split {split!r}; use 'train' or 'test'")
        idx = self.splits[split]
        cams = self.cameras[idx]
        return SceneViews(cams.world_to_camera.float(), cams.K.float(), self.images[idx],
                          [self.names[int(i)] for i in idx])


# ---------------------------------------------------------------------------------------------------------
# the generator


def _resolution(resolution) -> tuple[int, int]:
    try:
        H, W = (int(resolution), int(resolution)) if isinstance(resolution, int) else (int(r) for r in resolution)
    except (TypeError, ValueError):
        raise ConfigError(f"make_synthetic_scene(resolution): expected an int or (H, W), got {resolution!r}") from None
    if min(H, W) < 8:
        raise ConfigError(f"make_synthetic_scene(resolution): each side must be >= 8 pixels, got {resolution!r}")
    return H, W


def _place_object(mesh: Mesh) -> tuple[Mesh, torch.Tensor]:
    """Normalise (centre, longest side 2) and lift so the lowest point is on y = 0; returns (mesh, T)."""
    from meshlift.data.synthetic import normalization_transform

    T = normalization_transform(mesh)
    lo = (T[:3, :3] @ mesh.v_pos.detach().double().cpu().T + T[:3, 3:4]).min(1).values
    lift = torch.eye(4, dtype=torch.float64)
    lift[1, 3] = -float(lo[1])
    T = lift @ T
    out = transform_mesh(mesh, T)
    out.extras = {**mesh.extras, "world_to_normalized": T}
    return out, T


@torch.no_grad()
def make_synthetic_scene(
    mesh_or_path: Union[Mesh, str, Path],
    *,
    n_train: int = 56,
    n_test: int = 8,
    resolution: Union[int, Sequence[int]] = 256,
    seed: int = 0,
    ground: Optional[GroundConfig] = None,
    environment="procedural",
    orbit: Optional[OrbitConfig] = None,
    exposure: float = 1.0,
    spp: int = 1,
    env_res: int = 64,
    render_batch: int = 4,
    device: Union[str, torch.device] = "cpu",
) -> SyntheticScene:
    """Render an unmasked "phone capture" of a mesh standing on a textured floor under an HDR environment.

    The rendered-views protocol of nvdiffrec's synthetic datasets (Munkberg et al. 2022, Sec. 5.1; its
    ``dataset/dataset_mesh.py``) moved to an unmasked setting: floor and environment in every image, the
    object scored inside :attr:`SyntheticScene.eval_box` (DTU / Tanks-and-Temples style region). See the
    module docstring for the frame (+Y up, ground y = 0) and the layered rendering.

    Args:
        mesh_or_path: the object (a :class:`Mesh` in any units, not modified) or a mesh file
            (:func:`meshlift.io.mesh.load_mesh`: OBJ + MTL, GLB, PLY); its material is rendered.
        n_train, n_test: training (>= 2) and held-out (>= 1) views; the ``n_train + n_test`` cameras share
            the rings of ``orbit`` and the test views are spread evenly through the capture order.
        resolution: ``S`` or ``(H, W)`` pixels, each >= 8.
        seed: seeds cameras, floor texture and procedural environment (same seed, same images).
        ground: the floor (:class:`GroundConfig`; default: 15 object sizes, procedural tiles, roughness 0.8).
        environment: ``"procedural"`` (:func:`scene_environment_radiance`) or anything
            :func:`make_scene_environment` takes (an ``EnvironmentLight``, a lat-long map, a ``.hdr`` path).
        orbit: the cameras (:class:`OrbitConfig`; default: rings at 15° and 35°, 2.6-3.4 units, 65° vertical FOV).
        exposure: linear radiance multiplier before clamping to [0, 1] and sRGB encoding.
        spp: supersampling per axis (>= 1) of the mesh renders.
        env_res: cube face size of the shading light (power of two >= 16).
        render_batch: views per renderer call (bounds memory; images are moved to the CPU per batch).
        device: where rendering runs (``"cpu"`` or ``"cuda"``).

    Returns:
        A :class:`SyntheticScene`.

    Raises:
        MeshError: an empty mesh (no faces) or an unreadable file.
        ConfigError: ``n_train < 2``, ``n_test < 1``, a side of ``resolution`` < 8, ``spp`` or
            ``render_batch`` < 1, a bad ``orbit`` / ``ground`` / ``environment``; the message names it.
    """
    import time

    from meshlift.renderers.mesh_pbr import render_mesh
    from meshlift.shading.color import linear_to_srgb

    if isinstance(mesh_or_path, (str, Path)):
        from meshlift.io.mesh import load_mesh

        mesh = load_mesh(mesh_or_path)
    elif isinstance(mesh_or_path, Mesh):
        mesh = mesh_or_path
    else:
        raise ConfigError(f"make_synthetic_scene(mesh_or_path): expected a Mesh or a path, got "
                          f"{type(mesh_or_path).__name__}")
    if mesh.num_faces == 0 or mesh.num_vertices == 0:
        raise MeshError("make_synthetic_scene(mesh_or_path): the mesh has no faces; nothing to render")
    if int(n_train) < 2:
        raise ConfigError(f"make_synthetic_scene(n_train): need at least 2 training views, got {n_train}")
    if int(n_test) < 1:
        raise ConfigError(f"make_synthetic_scene(n_test): need at least 1 held-out view, got {n_test}")
    H, W = _resolution(resolution)
    if int(spp) < 1 or int(render_batch) < 1:
        raise ConfigError(f"make_synthetic_scene(spp, render_batch): both must be >= 1, got {spp}, {render_batch}")
    if not (float(exposure) > 0 and math.isfinite(float(exposure))):
        raise ConfigError(f"make_synthetic_scene(exposure): must be a positive number, got {exposure}")
    ground = GroundConfig() if ground is None else ground
    orbit = OrbitConfig() if orbit is None else orbit
    if not float(ground.size) > 1.0 or int(ground.grid) < 1 or float(ground.tile) <= 0:
        raise ConfigError(f"make_synthetic_scene(ground): size must be > 1 object size, grid >= 1 and tile > 0, "
                          f"got size={ground.size}, grid={ground.grid}, tile={ground.tile}")
    t0 = time.perf_counter()
    dev = torch.device(device)

    obj, T = _place_object(mesh)
    lo, hi = obj.bbox()
    lo, hi = lo.double(), hi.double()
    centre = 0.5 * (lo + hi)
    _check_orbit(orbit, 0.5 * float((hi - lo).norm()))
    floor = make_ground_mesh(ground, seed)
    half = 0.5 * float(ground.size) * 2.0
    n = int(n_train) + int(n_test)
    cams = phone_orbit_cameras(n, centre, orbit, (H, W), seed, near=0.01, far=100.0)
    if bool((cams.camera_centers()[:, 1] <= 0.0).any()):
        raise ConfigError("make_synthetic_scene(orbit): a camera is below the ground plane; raise elevations_deg")
    bounds, near, far = _ray_hints(cams, half, torch.stack([lo, hi]))
    cams = replace(cams, near=0.5 * near, far=far)
    test = torch.unique(((torch.arange(int(n_test), dtype=torch.float64) + 0.5) * n / int(n_test)).floor().long())
    is_test = torch.zeros(n, dtype=torch.bool)
    is_test[test] = True
    splits = {"train": torch.nonzero(~is_test).squeeze(1), "test": torch.nonzero(is_test).squeeze(1)}

    env = make_scene_environment(environment, seed=seed, env_res=env_res, device=dev)
    obj_d, floor_d = obj.to(dev), floor.to(dev)
    images, cover = [], []
    for s in range(0, n, int(render_batch)):
        c = cams[s: s + int(render_batch)].to(dev)
        w2clip, eye = c.world_to_clip(), c.camera_centers()
        _, dirs = c.pixel_rays()
        bg = env.radiance(dirs).to(dev)
        g = render_mesh(floor_d, w2clip, eye, (H, W), light=env.light, background=bg, spp=int(spp))
        o = render_mesh(obj_d, w2clip, eye, (H, W), light=env.light, background=g["shaded"], spp=int(spp))
        images.append(linear_to_srgb((o["shaded"] * float(exposure)).clamp(0.0, 1.0)).float().cpu())
        cover.append(o["alpha"].clamp(0.0, 1.0).to(torch.float16).cpu())

    diag = float((hi - lo).norm())
    box_min = (lo - EVAL_MARGIN * diag).float()
    box_min[1] = EVAL_CLEARANCE
    box_max = (hi + EVAL_MARGIN * diag).float()
    meta = {"seed": int(seed), "spp": int(spp), "env_res": int(env_res), "orbit": orbit, "ground": ground,
            "up_axis": "+y", "layering": "environment < ground < object", "render_seconds": time.perf_counter() - t0,
            "source": str(mesh_or_path) if isinstance(mesh_or_path, (str, Path)) else mesh.extras.get("source")}
    return SyntheticScene(
        images=torch.cat(images), cameras=cams.to("cpu"), names=[f"frame_{i:04d}" for i in range(n)], splits=splits,
        gt_mesh=obj, ground_mesh=floor, eval_box_min=box_min, eval_box_max=box_max, scene_bounds=bounds,
        near=near, far=far, world_to_normalized=T, environment=env, object_coverage=torch.cat(cover),
        exposure=float(exposure), ground_height=0.0, metadata=meta)
