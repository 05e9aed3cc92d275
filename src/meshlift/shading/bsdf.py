"""Analytic BSDFs: Lambert diffuse and the GGX microfacet specular lobe of nvdiffrec's ``pbr`` material.

All functions broadcast over leading axes: a "vector" argument is ``[..., 3]`` and a scalar per-point
argument is ``[..., 1]`` (or a Python float). They are plain PyTorch (CPU or CUDA, float32 or float64) and
differentiable; cosines are clamped to ``[SPECULAR_EPSILON, 1 - SPECULAR_EPSILON]`` before use so that
gradients stay finite at grazing angles.

Material layout (docs/conventions.md §7): ``kd`` is linear albedo, ``arm`` / ``ks`` packs
(occlusion, roughness, metallic). Roughness ``r`` is perceptual; the GGX width is ``alpha = r ** 2``
(Burley 2012, "Physically-Based Shading at Disney", Sec. 5.4; Karis 2013, "Real Shading in Unreal Engine 4").

Sources:
    - GGX normal distribution: Walter et al. 2007, "Microfacet Models for Refraction through Rough
      Surfaces", Eq. 33.
    - Smith Lambda for GGX and the height-correlated masking-shadowing term G2 = 1 / (1 + Λ(o) + Λ(i)):
      Heitz 2014, "Understanding the Masking-Shadowing Function in Microfacet-Based BRDFs", Eq. 72 and 99.
    - Fresnel: Schlick 1994, "An Inexpensive BRDF Model for Physically-based Rendering", Eq. 15.
    - The composition (occlusion on the specular colour, F0 = mix(0.04, kd, metallic), diffuse colour
      kd (1 - metallic)) follows nvdiffrec's ``render/renderutils/bsdf.py``.
"""

from __future__ import annotations

import math

import torch

__all__ = [
    "SPECULAR_EPSILON",
    "dot",
    "safe_normalize",
    "reflect",
    "lambert",
    "ndf_ggx",
    "lambda_ggx",
    "masking_smith_ggx_correlated",
    "fresnel_schlick",
    "pbr_specular",
    "pbr_bsdf",
]

#: Cosines are clamped to [SPECULAR_EPSILON, 1 - SPECULAR_EPSILON] inside the specular terms.
SPECULAR_EPSILON = 1e-4


def dot(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Dot product over the last axis, keeping it: ``[..., 3] x [..., 3] -> [..., 1]``."""
    return torch.sum(x * y, dim=-1, keepdim=True)


def safe_normalize(x: torch.Tensor, eps: float = 1e-20) -> torch.Tensor:
    """``x / |x|`` over the last axis with ``|x|^2`` clamped to ``eps`` (finite gradient at 0). ``[..., 3]``.

    Same maths and ``eps`` as :func:`meshlift.geometry.mesh_ops.safe_normalize` (which multiplies by
    ``rsqrt``); the two differ in the last bit of float32 rounding only. They are not merged yet because
    that changes the recorded ``meshlift demo`` metrics (issue 8 keeps them bit-identical); merge them
    together with re-recording the demo."""
    return x / torch.sqrt(torch.clamp(dot(x, x), min=eps))


def reflect(x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    """Mirror ``x`` about the unit normal ``n``: ``2 (x·n) n - x``. ``x`` points away from the surface. ``[..., 3]``."""
    return 2.0 * dot(x, n) * n - x


def lambert(nrm: torch.Tensor, wi: torch.Tensor) -> torch.Tensor:
    """Lambertian BRDF times the cosine: ``max(n·wi, 0) / pi``.

    Args:
        nrm: ``[..., 3]`` unit shading normal.
        wi: ``[..., 3]`` unit direction towards the light.

    Returns:
        ``[..., 1]`` (multiply by the albedo and the incident radiance).
    """
    return torch.clamp(dot(nrm, wi), min=0.0) / math.pi


def ndf_ggx(alpha_sqr: torch.Tensor | float, cos_h: torch.Tensor) -> torch.Tensor:
    """GGX / Trowbridge-Reitz normal distribution ``D(h) = a^2 / (pi ((n·h)^2 (a^2 - 1) + 1)^2)``.

    Walter et al. 2007, Eq. 33. ``a = alpha = roughness^2``; this function takes ``alpha_sqr = a^2``.

    Args:
        alpha_sqr: ``[..., 1]`` or float, ``alpha ** 2``.
        cos_h: ``[..., 1]`` cosine between the normal and the half vector (clamped to [1e-4, 1 - 1e-4]).

    Returns:
        ``[..., 1]`` density per steradian of half vectors (integrates ``D(h) (n·h) dh`` to 1).
    """
    c = torch.clamp(cos_h, min=SPECULAR_EPSILON, max=1.0 - SPECULAR_EPSILON)
    d = (c * alpha_sqr - c) * c + 1.0
    return alpha_sqr / (d * d * math.pi)


def lambda_ggx(alpha_sqr: torch.Tensor | float, cos_theta: torch.Tensor) -> torch.Tensor:
    """Smith Lambda of the GGX distribution: ``(sqrt(1 + a^2 tan^2 θ) - 1) / 2`` (Heitz 2014, Eq. 72).

    Args:
        alpha_sqr: ``[..., 1]`` or float, ``alpha ** 2``.
        cos_theta: ``[..., 1]`` cosine between the normal and the direction (clamped to [1e-4, 1 - 1e-4]).

    Returns:
        ``[..., 1]``.
    """
    c = torch.clamp(cos_theta, min=SPECULAR_EPSILON, max=1.0 - SPECULAR_EPSILON)
    c2 = c * c
    tan2 = (1.0 - c2) / c2
    return 0.5 * (torch.sqrt(1.0 + alpha_sqr * tan2) - 1.0)


def masking_smith_ggx_correlated(
    alpha_sqr: torch.Tensor | float, cos_theta_i: torch.Tensor, cos_theta_o: torch.Tensor
) -> torch.Tensor:
    """Height-correlated Smith masking-shadowing ``G2 = 1 / (1 + Λ(i) + Λ(o))`` (Heitz 2014, Eq. 99).

    Args:
        alpha_sqr: ``[..., 1]`` or float, ``alpha ** 2``.
        cos_theta_i: ``[..., 1]`` n·wi.
        cos_theta_o: ``[..., 1]`` n·wo.

    Returns:
        ``[..., 1]`` in (0, 1].
    """
    return 1.0 / (1.0 + lambda_ggx(alpha_sqr, cos_theta_i) + lambda_ggx(alpha_sqr, cos_theta_o))


def fresnel_schlick(
    f0: torch.Tensor | float, f90: torch.Tensor | float, cos_theta: torch.Tensor
) -> torch.Tensor:
    """Schlick's Fresnel ``F = f0 + (f90 - f0) (1 - cos)^5`` (Schlick 1994, Eq. 15).

    Args:
        f0: ``[..., C]`` or float, reflectance at normal incidence.
        f90: ``[..., C]`` or float, reflectance at grazing incidence (1 for dielectrics and metals).
        cos_theta: ``[..., 1]`` cosine (usually wo·h), clamped to [1e-4, 1 - 1e-4].

    Returns:
        ``[..., C]``.
    """
    c = torch.clamp(cos_theta, min=SPECULAR_EPSILON, max=1.0 - SPECULAR_EPSILON)
    return f0 + (f90 - f0) * (1.0 - c) ** 5.0


def pbr_specular(
    col: torch.Tensor,
    nrm: torch.Tensor,
    wo: torch.Tensor,
    wi: torch.Tensor,
    alpha: torch.Tensor,
    min_roughness: float = 0.08,
) -> torch.Tensor:
    """GGX microfacet specular BRDF times the cosine: ``F D G2 / (4 (n·wo))``, zero below the horizon.

    (``f = F D G2 / (4 (n·wo)(n·wi))``, times ``n·wi``.) ``alpha`` is clamped to
    ``[min_roughness ** 2, 1]``.

    Args:
        col: ``[..., C]`` specular colour F0.
        nrm: ``[..., 3]`` unit shading normal.
        wo: ``[..., 3]`` unit direction towards the viewer.
        wi: ``[..., 3]`` unit direction towards the light.
        alpha: ``[..., 1]`` GGX width (``roughness ** 2``).
        min_roughness: smallest perceptual roughness allowed (alpha >= min_roughness ** 2).

    Returns:
        ``[..., C]`` (multiply by the incident radiance).
    """
    a = torch.clamp(alpha, min=min_roughness * min_roughness, max=1.0)
    alpha_sqr = a * a
    h = safe_normalize(wo + wi)
    wo_n = dot(wo, nrm)
    wi_n = dot(wi, nrm)
    d = ndf_ggx(alpha_sqr, dot(nrm, h))
    g = masking_smith_ggx_correlated(alpha_sqr, wo_n, wi_n)
    f = fresnel_schlick(col, 1.0, dot(wo, h))
    w = f * d * g * 0.25 / torch.clamp(wo_n, min=SPECULAR_EPSILON)
    front = (wo_n > SPECULAR_EPSILON) & (wi_n > SPECULAR_EPSILON)
    return torch.where(front, w, torch.zeros_like(w))


def pbr_bsdf(
    kd: torch.Tensor,
    arm: torch.Tensor,
    pos: torch.Tensor,
    nrm: torch.Tensor,
    view_pos: torch.Tensor,
    light_pos: torch.Tensor,
    min_roughness: float = 0.08,
) -> torch.Tensor:
    """Diffuse + GGX specular response to a point light of unit radiance (nvdiffrec's ``pbr`` BSDF).

    ``F0 = (0.04 (1 - m) + kd m) (1 - o)``, diffuse colour ``kd (1 - m)``, ``alpha = roughness ** 2``,
    where (o, roughness, m) = ``arm``. Returns ``kd_d * lambert + pbr_specular(F0, ...)``.

    Args:
        kd: ``[..., 3]`` linear albedo.
        arm: ``[..., 3]`` (occlusion, roughness, metallic) in [0, 1].
        pos: ``[..., 3]`` world-space surface position.
        nrm: ``[..., 3]`` unit world-space shading normal.
        view_pos: ``[..., 3]`` camera position (broadcast).
        light_pos: ``[..., 3]`` light position (broadcast).
        min_roughness: smallest perceptual roughness.

    Returns:
        ``[..., 3]`` reflected radiance per unit incident radiance (BRDF times cosine).
    """
    wo = safe_normalize(view_pos - pos)
    wi = safe_normalize(light_pos - pos)
    occlusion = arm[..., 0:1]
    roughness = arm[..., 1:2]
    metallic = arm[..., 2:3]
    spec_col = (0.04 * (1.0 - metallic) + kd * metallic) * (1.0 - occlusion)
    diff_col = kd * (1.0 - metallic)
    diffuse = diff_col * lambert(nrm, wi)
    specular = pbr_specular(spec_col, nrm, wo, wi, roughness * roughness, min_roughness=min_roughness)
    return diffuse + specular
