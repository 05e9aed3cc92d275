"""The procedural demo object of ``meshlift demo``: a bumpy, textured ring made in code.

A genus-1 object with surface detail and a painted texture, in the spirit of nvdiffrec's "bob" example
(Munkberg et al., CVPR 2022, Fig. 1 / the ``bob`` config), but generated from a formula so the demo needs
no files or downloads. The surface is a torus whose tube radius is displaced by smooth periodic bumps and
ridges:

    P(s, t) = rot_x(tilt) · ( (R + ρ cos φ) cos θ,  ρ sin φ,  −(R + ρ cos φ) sin θ ),
    θ = 2π s, φ = 2π t, ρ(s, t) = r + d(s, t),

with ``d`` a sum of periodic Gaussian bumps (random centres from ``seed``) and a sinusoidal ridge pattern.
The ring's parameter domain (s, t) ∈ [0, 1)² is its UV layout (internal glTF origin, docs/conventions.md
§7), so the texture is seamless by construction. The returned triangle mesh is the ground truth for the
geometry metrics (refine it with a larger ``resolution`` for a denser one).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
import torch

from meshlift.errors import ConfigError
from meshlift.structures.mesh import Material, Mesh


@dataclass(frozen=True)
class DemoObjectShape:
    """Shape parameters of the demo ring (units: the normalised frame, object inside [-1, 1]³)."""

    major_radius: float = 0.62
    """Distance from the ring's axis to the tube's centre line."""
    minor_radius: float = 0.24
    """Tube radius before displacement."""
    n_bumps: int = 14
    """Number of Gaussian bumps, one per sector of the ring (jittered positions from the seed)."""
    bump_height: float = 0.04
    """Peak displacement of one bump, along the tube normal."""
    bump_width: float = 0.09
    """Standard deviation of a bump, measured along the surface (arc length on the undisplaced torus)."""
    ridge_height: float = 0.012
    """Amplitude of the sinusoidal ridges running across the tube."""
    ridge_frequency: int = 18
    """Number of ridges around the ring."""
    tilt: float = math.radians(25.0)
    """Rotation about +x (radians) so that views from the equator see through the hole."""


def _bumps(seed: int, shape: DemoObjectShape) -> np.ndarray:
    rng = np.random.default_rng(seed)
    # stratified around the ring (one bump per sector, jittered) so every view sees some detail
    k = np.arange(shape.n_bumps)
    s = (k + 0.5 + 0.6 * (rng.random(shape.n_bumps) - 0.5)) / shape.n_bumps
    centres = np.stack([s, rng.random(shape.n_bumps)], axis=1)
    signs = np.where(rng.random(shape.n_bumps) < 0.8, 1.0, -0.6)  # mostly bumps, a few dents
    scale = 0.6 + 0.8 * rng.random(shape.n_bumps)
    return np.concatenate([centres, (signs * scale)[:, None]], axis=1)  # [n, 3] = (s, t, amplitude)


def _periodic_delta(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    d = a - b
    return d - np.round(d)


def _bump_field(s: np.ndarray, t: np.ndarray, bumps: np.ndarray, shape: DemoObjectShape) -> np.ndarray:
    """Sum of periodic Gaussian bumps in [−~1, ~1] at parameters ``s, t`` (same shape)."""
    out = np.zeros_like(s)
    # arc lengths along the centre circle and around the tube, so bumps are round on the surface
    len_s = 2.0 * np.pi * shape.major_radius
    len_t = 2.0 * np.pi * shape.minor_radius
    for cs, ct, amp in bumps:
        ds = _periodic_delta(s, cs) * len_s
        dt = _periodic_delta(t, ct) * len_t
        out += amp * np.exp(-(ds * ds + dt * dt) / (2.0 * shape.bump_width**2))
    return out


def _displacement(s: np.ndarray, t: np.ndarray, bumps: np.ndarray, shape: DemoObjectShape) -> np.ndarray:
    ridges = np.sin(2.0 * np.pi * shape.ridge_frequency * s) * (0.5 + 0.5 * np.cos(2.0 * np.pi * t))
    return shape.bump_height * _bump_field(s, t, bumps, shape) + shape.ridge_height * ridges


def _surface(s: np.ndarray, t: np.ndarray, bumps: np.ndarray, shape: DemoObjectShape) -> np.ndarray:
    theta = 2.0 * np.pi * s
    phi = 2.0 * np.pi * t
    rho = shape.minor_radius + _displacement(s, t, bumps, shape)
    ring = shape.major_radius + rho * np.cos(phi)
    p = np.stack([ring * np.cos(theta), rho * np.sin(phi), -ring * np.sin(theta)], axis=-1)
    c, sn = math.cos(shape.tilt), math.sin(shape.tilt)
    rot = np.array([[1.0, 0.0, 0.0], [0.0, c, -sn], [0.0, sn, c]])
    return p @ rot.T


def _smoothstep(e0: float, e1: float, x: np.ndarray) -> np.ndarray:
    y = np.clip((x - e0) / (e1 - e0), 0.0, 1.0)
    return y * y * (3.0 - 2.0 * y)


def _textures(size: int, bumps: np.ndarray, shape: DemoObjectShape) -> tuple[np.ndarray, np.ndarray]:
    """Albedo (linear RGB) and ORM textures ``[size, size, 3]``; texel (r, c) is at (s, t) = ((c+.5)/N, (r+.5)/N)."""
    centre = (np.arange(size) + 0.5) / size
    s, t = np.meshgrid(centre, centre, indexing="xy")  # s along columns (u), t along rows (v)
    warm = np.array([0.70, 0.30, 0.08])
    cool = np.array([0.06, 0.32, 0.45])
    hue = (0.5 + 0.5 * np.cos(2.0 * np.pi * s))[..., None]
    base = warm * hue + cool * (1.0 - hue)
    # soft checker of 12 x 4 tiles (periodic in s and t)
    check = np.sin(2.0 * np.pi * 12 * s) * np.sin(2.0 * np.pi * 4 * t)
    tiles = _smoothstep(-0.25, 0.25, check)[..., None]
    base = base * (0.55 + 0.45 * tiles)
    # paint the bump tops pale yellow, dents dark
    b = _bump_field(s, t, bumps, shape)[..., None]
    pale = np.array([0.85, 0.75, 0.35])
    kd = base * (1.0 - np.clip(b, 0.0, 1.0)) + pale * np.clip(b, 0.0, 1.0)
    kd = kd * (1.0 - 0.5 * np.clip(-b, 0.0, 1.0))
    # a thin white band around the tube at s = 0.25 and 0.75
    band = np.exp(-(((np.abs(_periodic_delta(2 * s, 0.5)) * 2) / 0.03) ** 2))[..., None]
    kd = kd * (1.0 - band) + 0.8 * band
    kd = np.clip(kd, 0.02, 0.9)
    rough = 0.3 + 0.3 * tiles[..., 0]
    ks = np.stack([np.zeros_like(rough), rough, np.zeros_like(rough)], axis=-1)
    return kd.astype(np.float32), ks.astype(np.float32)


def make_demo_object(
    *,
    resolution: int = 128,
    texture_resolution: int = 512,
    seed: int = 0,
    shape: DemoObjectShape = DemoObjectShape(),
) -> Mesh:
    """Build the demo ring: a closed, watertight, genus-1 textured triangle mesh inside [-1, 1]³.

    Args:
        resolution: segments around the ring (the tube gets ``resolution // 2``, at least 8); faces =
            ``resolution · (resolution // 2) · 2``. 128 gives 8,192 vertices / 16,384 faces.
        texture_resolution: size of the square kd / ks textures in texels.
        seed: seeds the bump positions and amplitudes (same seed → same object).
        shape: the ring's :class:`DemoObjectShape` parameters.

    Returns:
        :class:`Mesh` with float32 ``v_pos [V, 3]`` (no duplicated positions: the surface is closed and
        2-manifold), int64 ``t_pos_idx [T, 3]`` counter-clockwise seen from outside (conventions §3),
        ``v_tex [(n+1)(m+1), 2]`` / ``t_tex_idx [T, 3]`` (the (s, t) parameter grid, one seam per
        direction), and ``material`` = :class:`Material` with ``kd [N, N, 3]`` (linear albedo in
        [0.02, 0.9]) and ``ks [N, N, 3]`` = (occlusion 0, roughness 0.3-0.6, metallic 0). ``extras`` records
        the parameters under ``"demo_object"``.

    Raises:
        ConfigError: ``resolution`` < 16 or ``texture_resolution`` < 8.
    """
    if resolution < 16:
        raise ConfigError(f"make_demo_object: resolution must be >= 16 segments, got {resolution}")
    if texture_resolution < 8:
        raise ConfigError(f"make_demo_object: texture_resolution must be >= 8 texels, got {texture_resolution}")
    n = int(resolution)
    m = max(8, n // 2)
    bumps = _bumps(seed, shape)

    # positions on the periodic n x m grid (no duplicated seam vertices)
    si, ti = np.meshgrid(np.arange(n), np.arange(m), indexing="ij")  # [n, m]
    pos = _surface(si / n, ti / m, bumps, shape).reshape(-1, 3)
    i0, j0 = si.reshape(-1), ti.reshape(-1)
    i1, j1 = (i0 + 1) % n, (j0 + 1) % m
    a = i0 * m + j0
    b = i1 * m + j0
    c = i1 * m + j1
    d = i0 * m + j1
    # dP/ds x dP/dt points out of the tube for this parameterisation, so (a, b, c) / (a, c, d) face outward
    faces = np.concatenate([np.stack([a, b, c], 1), np.stack([a, c, d], 1)], 0)

    # UVs on the (n+1) x (m+1) grid (seams at s = 1 and t = 1)
    ui, vi = np.meshgrid(np.arange(n + 1), np.arange(m + 1), indexing="ij")
    v_tex = np.stack([ui / n, vi / m], -1).reshape(-1, 2)
    ta = i0 * (m + 1) + j0
    tb = (i0 + 1) * (m + 1) + j0
    tc = (i0 + 1) * (m + 1) + j0 + 1
    td = i0 * (m + 1) + j0 + 1
    tex_faces = np.concatenate([np.stack([ta, tb, tc], 1), np.stack([ta, tc, td], 1)], 0)

    kd, ks = _textures(int(texture_resolution), bumps, shape)
    material = Material(kd=torch.from_numpy(kd), ks=torch.from_numpy(ks), name="demo_ring")
    return Mesh(
        v_pos=torch.from_numpy(pos.astype(np.float32)),
        t_pos_idx=torch.from_numpy(faces.astype(np.int64)),
        v_tex=torch.from_numpy(v_tex.astype(np.float32)),
        t_tex_idx=torch.from_numpy(tex_faces.astype(np.int64)),
        material=material,
        extras={"demo_object": {"resolution": n, "tube_resolution": m, "seed": int(seed), "shape": dataclasses.asdict(shape)}},
    )
