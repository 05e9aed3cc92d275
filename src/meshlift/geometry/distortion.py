"""Lens distortion of the 11 COLMAP camera models, on normalised image coordinates.

Conventions (docs/conventions.md §2): distortion acts on normalised coordinates ``(X/Z, Y/Z)``; the
parameter order is COLMAP's (``src/colmap/sensor/models.h``, Schönberger & Frahm 2016, "Structure-from-
Motion Revisited"). The *extra* parameters of a model are its parameter list without the focal lengths
and the principal point, e.g. ``OPENCV`` -> ``(k1, k2, p1, p2)``; :func:`split_params` does the split.

Formulas (u, v normalised; r² = u² + v²):
- ``SIMPLE_RADIAL`` / ``RADIAL``: ``(u, v)·(1 + k1 r² + k2 r⁴)``.
- ``OPENCV``: radial as above plus tangential ``(2 p1 uv + p2 (r² + 2u²), 2 p2 uv + p1 (r² + 2v²))``
  (Brown 1966 / OpenCV ``calibrateCamera`` documentation).
- ``FULL_OPENCV``: rational radial ``(1 + k1 r² + k2 r⁴ + k3 r⁶) / (1 + k4 r² + k5 r⁴ + k6 r⁶)`` plus
  tangential.
- fisheye models (``OPENCV_FISHEYE``, ``SIMPLE_RADIAL_FISHEYE``, ``RADIAL_FISHEYE``): equidistant
  projection ``θ = atan(r)``, ``θd = θ (1 + k1 θ² + k2 θ⁴ + k3 θ⁶ + k4 θ⁸)``, output ``(u, v)·θd / r``
  (Kannala & Brandt 2006).
- ``THIN_PRISM_FISHEYE``: equidistant ``(u, v)·θ/r``, then OpenCV radial (k1..k4 on θ²..θ⁸),
  tangential and thin-prism ``(sx1 θ², sy1 θ²)`` terms (Weng et al. 1992).
- ``FOV``: ``(u, v)·atan(2 r tan(ω/2)) / (r ω)`` (Devernay & Faugeras 2001).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from meshlift.errors import CameraError

__all__ = [
    "CameraModel",
    "CAMERA_MODELS",
    "CAMERA_MODEL_IDS",
    "camera_model",
    "split_params",
    "join_params",
    "distort",
    "undistort_points",
]


@dataclass(frozen=True)
class CameraModel:
    """One COLMAP camera model."""

    name: str
    """COLMAP's name, e.g. ``"OPENCV"``."""
    model_id: int
    """COLMAP's numeric id (``cameras.bin``)."""
    params: tuple[str, ...]
    """Names of all parameters in COLMAP order (``f`` = shared focal length)."""

    @property
    def num_params(self) -> int:
        return len(self.params)

    @property
    def num_intrinsic(self) -> int:
        """Number of leading focal/principal-point parameters (3 with a shared ``f``, else 4)."""
        return 3 if self.params[0] == "f" else 4

    @property
    def extra(self) -> tuple[str, ...]:
        """Names of the distortion parameters (after focal and principal point)."""
        return self.params[self.num_intrinsic:]

    @property
    def is_pinhole(self) -> bool:
        return not self.extra


_MODELS = [
    CameraModel("SIMPLE_PINHOLE", 0, ("f", "cx", "cy")),
    CameraModel("PINHOLE", 1, ("fx", "fy", "cx", "cy")),
    CameraModel("SIMPLE_RADIAL", 2, ("f", "cx", "cy", "k1")),
    CameraModel("RADIAL", 3, ("f", "cx", "cy", "k1", "k2")),
    CameraModel("OPENCV", 4, ("fx", "fy", "cx", "cy", "k1", "k2", "p1", "p2")),
    CameraModel("OPENCV_FISHEYE", 5, ("fx", "fy", "cx", "cy", "k1", "k2", "k3", "k4")),
    CameraModel("FULL_OPENCV", 6, ("fx", "fy", "cx", "cy", "k1", "k2", "p1", "p2", "k3", "k4", "k5", "k6")),
    CameraModel("FOV", 7, ("fx", "fy", "cx", "cy", "omega")),
    CameraModel("SIMPLE_RADIAL_FISHEYE", 8, ("f", "cx", "cy", "k1")),
    CameraModel("RADIAL_FISHEYE", 9, ("f", "cx", "cy", "k1", "k2")),
    CameraModel(
        "THIN_PRISM_FISHEYE", 10, ("fx", "fy", "cx", "cy", "k1", "k2", "p1", "p2", "k3", "k4", "sx1", "sy1")
    ),
]
CAMERA_MODELS: dict[str, CameraModel] = {m.name: m for m in _MODELS}
"""COLMAP camera models by name."""
CAMERA_MODEL_IDS: dict[int, CameraModel] = {m.model_id: m for m in _MODELS}
"""COLMAP camera models by numeric id."""


def camera_model(name: str | int) -> CameraModel:
    """Look a COLMAP model up by name or id; raises :class:`CameraError` naming the known models."""
    table = CAMERA_MODEL_IDS if isinstance(name, int) else CAMERA_MODELS
    key = name if isinstance(name, int) else str(name).upper()
    if key not in table:
        known = ", ".join(f"{m.name} ({m.model_id})" for m in _MODELS)
        raise CameraError(f"unknown camera model {name!r}; meshlift knows the COLMAP models {known}")
    return table[key]


def split_params(model: str | int, params) -> tuple[float, float, float, float, list[float]]:
    """Split a COLMAP parameter list into ``(fx, fy, cx, cy, extra)``.

    Raises :class:`CameraError` when the count does not match the model.
    """
    m = camera_model(model)
    params = [float(p) for p in params]
    if len(params) != m.num_params:
        raise CameraError(
            f"camera model {m.name} takes {m.num_params} parameters ({', '.join(m.params)}), got {len(params)}"
        )
    if m.num_intrinsic == 3:
        f, cx, cy = params[:3]
        return f, f, cx, cy, params[3:]
    fx, fy, cx, cy = params[:4]
    return fx, fy, cx, cy, params[4:]


def join_params(model: str | int, fx: float, fy: float, cx: float, cy: float, extra) -> list[float]:
    """Inverse of :func:`split_params`; models with one focal length need ``fx == fy`` (else CameraError)."""
    m = camera_model(model)
    extra = [float(e) for e in extra]
    if len(extra) != len(m.extra):
        raise CameraError(f"camera model {m.name} takes {len(m.extra)} distortion parameters, got {len(extra)}")
    if m.num_intrinsic == 3:
        if abs(fx - fy) > 1e-6 * max(abs(fx), 1.0):
            raise CameraError(f"camera model {m.name} has one focal length but fx={fx} != fy={fy}")
        return [float(fx), float(cx), float(cy), *extra]
    return [float(fx), float(fy), float(cx), float(cy), *extra]


def _equidistant(u: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """θ = atan(r) and the factor θ / r (1 at r = 0, with a finite gradient)."""
    r2 = u * u + v * v
    small = r2 < 1e-12
    r = torch.sqrt(torch.where(small, torch.ones_like(r2), r2))
    theta = torch.atan(r)
    # θ/r = 1 - r²/3 + ... near 0
    factor = torch.where(small, 1.0 - r2 / 3.0, theta / r)
    theta2 = torch.where(small, r2, theta * theta)
    return theta2, factor, small


def distort(model: str | int, params: torch.Tensor, xy: torch.Tensor) -> torch.Tensor:
    """Apply a COLMAP model's distortion to normalised coordinates.

    Args:
        model: COLMAP model name or id.
        params: ``[..., P]`` extra (distortion) parameters in COLMAP order, ``P = len(camera_model(model).extra)``;
            broadcast against ``xy[..., 0]``.
        xy: ``[..., 2]`` undistorted normalised coordinates ``(X/Z, Y/Z)``.

    Returns:
        ``[..., 2]`` distorted normalised coordinates (same dtype). Differentiable in ``xy`` and ``params``.

    Raises:
        CameraError: unknown model or wrong parameter count.
    """
    m = camera_model(model)
    params = torch.as_tensor(params, dtype=xy.dtype, device=xy.device)
    if params.shape[-1:] != (len(m.extra),) and not (len(m.extra) == 0 and params.numel() == 0):
        raise CameraError(
            f"camera model {m.name} takes {len(m.extra)} distortion parameters ({', '.join(m.extra)}), "
            f"got params of shape {list(params.shape)}"
        )
    if xy.shape[-1] != 2:
        raise CameraError(f"xy must be [..., 2], got {list(xy.shape)}")
    if m.is_pinhole:
        return xy
    p = [params[..., i] for i in range(len(m.extra))]
    u, v = xy[..., 0], xy[..., 1]
    name = m.name
    if name in ("SIMPLE_RADIAL", "RADIAL", "OPENCV", "FULL_OPENCV"):
        r2 = u * u + v * v
        if name == "SIMPLE_RADIAL":
            radial = 1 + p[0] * r2
        elif name in ("RADIAL", "OPENCV"):
            radial = 1 + p[0] * r2 + p[1] * r2 * r2
        else:
            k1, k2, _, _, k3, k4, k5, k6 = p
            r4, r6 = r2 * r2, r2 * r2 * r2
            radial = (1 + k1 * r2 + k2 * r4 + k3 * r6) / (1 + k4 * r2 + k5 * r4 + k6 * r6)
        ud, vd = u * radial, v * radial
        if name in ("OPENCV", "FULL_OPENCV"):
            p1, p2 = p[2], p[3]
            ud = ud + 2 * p1 * u * v + p2 * (r2 + 2 * u * u)
            vd = vd + 2 * p2 * u * v + p1 * (r2 + 2 * v * v)
        return torch.stack([ud, vd], dim=-1)
    if name in ("OPENCV_FISHEYE", "SIMPLE_RADIAL_FISHEYE", "RADIAL_FISHEYE"):
        t2, factor, _ = _equidistant(u, v)
        ks = p + [torch.zeros_like(u)] * (4 - len(p))
        poly = 1 + t2 * (ks[0] + t2 * (ks[1] + t2 * (ks[2] + t2 * ks[3])))
        s = factor * poly
        return torch.stack([u * s, v * s], dim=-1)
    if name == "THIN_PRISM_FISHEYE":
        k1, k2, p1, p2, k3, k4, sx1, sy1 = p
        _, factor, _ = _equidistant(u, v)
        uu, vv = u * factor, v * factor
        t2 = uu * uu + vv * vv
        radial = t2 * (k1 + t2 * (k2 + t2 * (k3 + t2 * k4)))
        ud = uu + uu * radial + 2 * p1 * uu * vv + p2 * (t2 + 2 * uu * uu) + sx1 * t2
        vd = vv + vv * radial + 2 * p2 * uu * vv + p1 * (t2 + 2 * vv * vv) + sy1 * t2
        return torch.stack([ud, vd], dim=-1)
    if name == "FOV":
        omega = p[0]
        r2 = u * u + v * v
        small_w = omega.abs() < 1e-6
        w_safe = torch.where(small_w, torch.ones_like(omega), omega)
        small_r = r2 < 1e-12
        r = torch.sqrt(torch.where(small_r, torch.ones_like(r2), r2))
        tan_half = torch.tan(w_safe / 2)
        f_general = torch.atan(2 * r * tan_half) / (r * w_safe)
        f_r0 = 2 * tan_half / w_safe
        factor = torch.where(small_r, f_r0 * torch.ones_like(r2), f_general)
        factor = torch.where(small_w, torch.ones_like(factor), factor)
        return torch.stack([u * factor, v * factor], dim=-1)
    raise CameraError(f"distortion of camera model {name} is not implemented")  # pragma: no cover


def undistort_points(
    model: str | int,
    params: torch.Tensor,
    xy_distorted: torch.Tensor,
    *,
    iterations: int = 50,
    tolerance: float = 1e-12,
) -> torch.Tensor:
    """Invert :func:`distort` by Newton's method (as COLMAP's ``IterativeUndistortion``).

    Each point solves ``distort(x) = xy_distorted`` with a 2x2 Jacobian from central finite differences
    (as COLMAP does), in float64, starting at ``x = xy_distorted``. Points are independent, so the batch is
    solved at once. Works under ``torch.no_grad`` and ``torch.inference_mode``.

    Args:
        model: COLMAP model name or id.
        params: ``[..., P]`` distortion parameters (see :func:`distort`).
        xy_distorted: ``[..., 2]`` distorted normalised coordinates.
        iterations: maximum Newton steps.
        tolerance: stop when the largest squared residual is below this (normalised units²).

    Returns:
        ``[..., 2]`` undistorted normalised coordinates, dtype of ``xy_distorted``. Not differentiable
        (detached). Points where the model is not invertible keep the last iterate.
    """
    m = camera_model(model)
    if m.is_pinhole:
        return xy_distorted.clone()
    with torch.no_grad():
        target = xy_distorted.detach().to(torch.float64)
        prm = torch.as_tensor(params).detach().to(device=target.device, dtype=torch.float64)
        x = target.clone()
        eps = 1e-7
        du = torch.tensor([eps, 0.0], dtype=torch.float64, device=target.device)
        dv = torch.tensor([0.0, eps], dtype=torch.float64, device=target.device)
        for _ in range(iterations):
            res = distort(m.name, prm, x) - target
            if res.numel() == 0 or float((res * res).sum(-1).max()) < tolerance:
                break
            ju = (distort(m.name, prm, x + du) - distort(m.name, prm, x - du)) / (2 * eps)  # d f / d u
            jv = (distort(m.name, prm, x + dv) - distort(m.name, prm, x - dv)) / (2 * eps)  # d f / d v
            a, c = ju[..., 0], ju[..., 1]
            b, d = jv[..., 0], jv[..., 1]
            det = a * d - b * c
            det = torch.where(det.abs() < 1e-12, torch.full_like(det, 1e-12), det)
            ru, rv = res[..., 0], res[..., 1]
            x = x - torch.stack([(d * ru - b * rv) / det, (-c * ru + a * rv) / det], dim=-1)
    return x.to(xy_distorted.dtype)
