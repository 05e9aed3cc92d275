"""Procedural HDR environment maps (lat-long, linear radiance), made in code, deterministic per seed.

Used by ``meshlift demo`` and to render synthetic scenes (``meshlift.data.synthetic``) when no ``.hdr`` probe is given. Each map has a
smooth low-frequency part (sky / studio gradient, ground) that drives diffuse shading and compact bright
emitters with sharp (but anti-aliased) edges that produce visible highlights, so that both albedo and
roughness/metalness are constrained when materials are fitted under it.

Kinds:
    ``"studio"``          dark grey cyclorama, a warm key, a cool fill, a rim and a top softbox (soft-edged
                          discs 8-22 degrees across) and a few small accent lights.
    ``"sky"``             blue sky gradient to a bright horizon, brown-grey ground, and a sun with a glow
                          (2.5 degrees in radius, wider than the real 0.27, so small maps resolve it).
    ``"high_frequency"``  a dim sky and checkered ground plus ~40 small coloured lights scattered over the
                          sphere (for the ``*_metal`` presets, like nvdiffrec's high-frequency probes).

Layout: docs/conventions.md §8 (``[H, 2H, 3]``, +Y up, row 0 = zenith).
"""

from __future__ import annotations

import math

import torch

from meshlift.errors import ConfigError
from meshlift.shading.cubemap import latlong_directions

__all__ = ["ENVIRONMENT_KINDS", "procedural_environment"]

#: Kinds accepted by :func:`procedural_environment`.
ENVIRONMENT_KINDS = ("studio", "sky", "high_frequency")


def _dir(elevation_deg: float, azimuth_deg: float) -> torch.Tensor:
    """Unit direction from elevation above the horizon and azimuth (0 = -z, 90 = +x), +Y up."""
    el, az = math.radians(elevation_deg), math.radians(azimuth_deg)
    return torch.tensor([math.cos(el) * math.sin(az), math.sin(el), -math.cos(el) * math.cos(az)], dtype=torch.float64)


def _smoothstep(e0: torch.Tensor | float, e1: torch.Tensor | float, x: torch.Tensor) -> torch.Tensor:
    t = torch.clamp((x - e0) / (e1 - e0), 0.0, 1.0)
    return t * t * (3.0 - 2.0 * t)


def _disc(d: torch.Tensor, centre: torch.Tensor, radius_deg: float, edge: float) -> torch.Tensor:
    """Soft-edged disc mask ``[H, W, 1]`` of angular radius ``radius_deg`` (edge width ``edge`` radians)."""
    ang = torch.acos(torch.clamp(d @ centre, -1.0, 1.0))
    r = math.radians(radius_deg)
    return (1.0 - _smoothstep(r - 0.5 * edge, r + 0.5 * edge, ang))[..., None]


def _rgb(*c: float) -> torch.Tensor:
    return torch.tensor(c, dtype=torch.float64)


def procedural_environment(
    height: int = 64, kind: str = "studio", seed: int = 0, intensity: float = 1.0
) -> torch.Tensor:
    """A procedural lat-long environment map.

    Args:
        height: H; the map is ``[H, 2H, 3]`` (H >= 4).
        kind: one of :data:`ENVIRONMENT_KINDS`.
        seed: jitters light placement and colours (same seed -> same map).
        intensity: multiplies the whole map.

    Returns:
        ``[H, 2H, 3]`` float32 linear HDR radiance (non-negative; emitters reach ~5-60).

    Raises:
        ConfigError: unknown ``kind`` or ``height < 4``.
    """
    if kind not in ENVIRONMENT_KINDS:
        raise ConfigError(f"procedural_environment(kind): unknown kind {kind!r}; choose one of {ENVIRONMENT_KINDS}")
    if int(height) != height or height < 4:
        raise ConfigError(f"procedural_environment(height): must be an integer >= 4, got {height!r}")
    h = int(height)
    d = latlong_directions(h, dtype=torch.float64)  # [H, 2H, 3]
    y = d[..., 1:2]
    g = torch.Generator().manual_seed(int(seed))

    def jitter(scale: float) -> float:
        return float((torch.rand((), generator=g, dtype=torch.float64) * 2.0 - 1.0) * scale)

    edge = max(math.radians(1.5), 1.5 * math.pi / h)  # anti-aliasing: at least ~1.5 pixels
    if kind == "studio":
        wall = 0.06 + 0.10 * _smoothstep(-0.2, 0.8, y)
        floor = 0.12 * (1.0 - _smoothstep(-0.15, 0.0, y))
        env = (wall + floor) * _rgb(1.0, 1.0, 1.0)
        lights = [
            (35.0, 40.0, 16.0, 8.0, _rgb(1.0, 0.85, 0.65)),  # warm key
            (15.0, -70.0, 22.0, 2.5, _rgb(0.55, 0.7, 1.0)),  # cool fill
            (25.0, 160.0, 9.0, 12.0, _rgb(1.0, 1.0, 1.0)),  # rim
            (80.0, 0.0, 12.0, 5.0, _rgb(1.0, 0.97, 0.9)),  # top
        ]
        for el, az, rad, power, col in lights:
            c = _dir(el + jitter(6.0), az + jitter(15.0))
            env = env + power * _disc(d, c, rad, edge) * col
        for _ in range(3):  # small accents for sharp highlights
            c = _dir(5.0 + 50.0 * (jitter(1.0) * 0.5 + 0.5), 360.0 * (jitter(1.0) * 0.5 + 0.5))
            col = torch.rand(3, generator=g, dtype=torch.float64) * 0.6 + 0.4
            env = env + 20.0 * _disc(d, c, 3.0, edge) * col
    elif kind == "sky":
        up = torch.clamp(y, min=0.0)
        zenith, horizon = _rgb(0.18, 0.35, 0.85), _rgb(0.85, 0.9, 1.0)
        t = torch.pow(up, 0.6)
        sky = horizon * (1.0 - t) + zenith * t
        ground = _rgb(0.22, 0.18, 0.14) * (0.6 + 0.4 * torch.clamp(-y, 0.0, 1.0))
        blend = _smoothstep(-0.02, 0.02, y)
        env = ground * (1.0 - blend) + sky * blend
        sun = _dir(35.0 + jitter(10.0), 120.0 + jitter(40.0))
        cos_sun = torch.clamp(d @ sun, -1.0, 1.0)[..., None]
        glow = 2.0 * torch.exp(40.0 * (cos_sun - 1.0)) + 0.5 * torch.exp(6.0 * (cos_sun - 1.0))
        env = env + glow * _rgb(1.0, 0.9, 0.75) * blend
        env = env + 60.0 * _disc(d, sun, 2.5, edge) * _rgb(1.0, 0.95, 0.85)
    else:  # high_frequency
        up = torch.clamp(y, min=0.0)
        env = (0.08 + 0.12 * up) * _rgb(0.7, 0.8, 1.0)
        # Checkered ground: 16 azimuth sectors x rings in elevation, anti-aliased by a smooth square wave.
        phi = torch.atan2(d[..., 0:1], -d[..., 2:3])
        el = torch.asin(torch.clamp(y, -1.0, 1.0))
        a = torch.sin(8.0 * phi) * torch.sin(12.0 * el)
        px = max(1.0, h / 24.0)  # soften the checker edges to ~1 pixel
        checker = 0.5 + 0.5 * torch.tanh(a * px)
        ground = (0.05 + 0.25 * checker) * (1.0 - _smoothstep(-0.05, 0.0, y))
        env = env * _smoothstep(-0.05, 0.0, y) + ground * _rgb(1.0, 0.95, 0.9)
        n_lights = 40
        v = torch.randn(n_lights, 3, generator=g, dtype=torch.float64)
        v[:, 1] = v[:, 1].abs() * 0.8 + 0.05  # mostly above the horizon
        v = v / v.norm(dim=-1, keepdim=True)
        cols = torch.rand(n_lights, 3, generator=g, dtype=torch.float64) * 0.8 + 0.2
        radii = torch.rand(n_lights, generator=g, dtype=torch.float64) * 4.0 + 2.0
        power = torch.rand(n_lights, generator=g, dtype=torch.float64) * 15.0 + 5.0
        for i in range(n_lights):
            env = env + float(power[i]) * _disc(d, v[i], float(radii[i]), edge) * cols[i]
    return (env * float(intensity)).to(torch.float32).contiguous()
