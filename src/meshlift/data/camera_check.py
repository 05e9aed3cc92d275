"""Camera sanity check: do the poses look like an object-centric capture in meshlift's convention?

Poses in the wrong convention are the field's most common silent failure: OpenCV camera-to-world
matrices given where a NeRF/Blender ``transforms.json`` expects OpenGL ones (or the reverse) turn every
camera around, so each looks *away* from the object; reconstruction then runs to the end on empty views
and returns a blob. The check reads only the cameras (and SfM points when there are any):

- **facing fraction**: the share of cameras whose optical axis (+Z of the OpenCV camera,
  docs/conventions.md §2) points within :data:`FACING_ANGLE_DEG` of the scene centre — the median SfM
  point when the dataset has points, else the least-squares point closest to all optical axes (the
  point an object-centric capture orbits). The same share is computed for the axes reversed (what the
  other convention would give).
- **points in front**: with SfM points, the share of (camera, point) pairs with positive depth; a
  correct convention puts almost all points in front of the cameras that saw them.
- **up spread**: the median angle between each camera's up vector (−Y of the OpenCV camera) and their
  mean; hand-held and orbit captures keep it small, mixed conventions do not.

Verdicts: ``"ok"``; ``"flipped"`` (reversed axes face the centre and fewer than 25% of the SfM points are in front:
the poses are in the other convention); ``"outward"`` (cameras look away from the centre of their axes
and no points decide: either the other convention or an inside-out capture such as a 360° room scan);
``"forward"`` (axes near parallel: a forward-facing capture, nothing to check). Each non-ok verdict
comes with a warning that names the fix (``camera_convention=`` / ``--camera-convention``).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import torch

from meshlift.cameras import Cameras

__all__ = ["CameraCheck", "check_cameras", "FACING_ANGLE_DEG", "MIN_FACING_FRACTION", "MAX_UP_SPREAD_DEG"]

#: A camera "faces" the centre when its optical axis is within this angle of the direction to it.
FACING_ANGLE_DEG = 60.0
#: Below this facing fraction (and with the reversed axes doing better) the poses are suspect.
MIN_FACING_FRACTION = 0.5
#: Above this median up-vector deviation the poses are reported as inconsistent.
MAX_UP_SPREAD_DEG = 60.0


@dataclass
class CameraCheck:
    """Result of :func:`check_cameras` (JSON-ready through :meth:`as_dict`)."""

    verdict: str
    """``"ok"``, ``"flipped"``, ``"outward"``, ``"forward"`` or ``"too few cameras"``."""
    facing_fraction: float | None
    """Share of cameras whose optical axis points at the centre (None when undefined)."""
    facing_fraction_reversed: float | None
    """The same share with every optical axis reversed (the other convention)."""
    points_in_front: float | None
    """With SfM points: share of (camera, point) pairs at positive depth (None without points)."""
    up_spread_deg: float | None
    """Median angle between the cameras' up vectors and their mean, degrees."""
    centre_source: str
    """Where the centre came from: ``"sfm points"``, ``"optical axes"`` or ``"none"``."""
    warnings: list = field(default_factory=list)
    """Human-readable warnings with the fix."""

    def as_dict(self) -> dict:
        return asdict(self)


def _facing(centers, dirs, c) -> float:
    to_c = c[None] - centers
    cosang = (to_c * dirs).sum(-1) / to_c.norm(dim=-1).clamp_min(1e-12)
    return float((cosang > math.cos(math.radians(FACING_ANGLE_DEG))).double().mean())


def check_cameras(cameras: Cameras, points: torch.Tensor | None = None, *, convention_hint: str = "") -> CameraCheck:
    """Check that ``cameras`` look like an object-centric capture in the OpenCV convention.

    Args:
        cameras: the scene's cameras (any frame; OpenCV convention, docs/conventions.md §2).
        points: ``[P, 3]`` SfM points in the same frame, or None.
        convention_hint: how the reader interpreted the file (e.g. ``"OpenGL camera-to-world
            (transforms.json)"``), quoted in the warning.

    Returns:
        :class:`CameraCheck`.
    """
    n = len(cameras)
    if n < 3:
        return CameraCheck("too few cameras", None, None, None, None, "none")
    centers = cameras.camera_centers().double()
    dirs = cameras.forward_directions().double()
    R = cameras.world_to_camera[:, :3, :3].double()
    ups = -R[:, 1, :]  # world direction of the camera's -Y (image up)
    mean_up = ups.mean(0)
    spread = None
    if float(mean_up.norm()) > 1e-9:
        mu = mean_up / mean_up.norm()
        spread = float(torch.rad2deg(torch.acos((ups @ mu).clamp(-1, 1))).median())
    pts = None if points is None or len(points) < 8 else torch.as_tensor(points, dtype=torch.float64)
    in_front = None
    if pts is not None:
        sub = pts[torch.linspace(0, len(pts) - 1, min(len(pts), 2000)).long()]
        depth = (R @ sub.T).transpose(1, 2)[..., 2] + cameras.world_to_camera[:, None, 2, 3].double()
        in_front = float((depth > 0).double().mean())
        centre, source = pts.median(dim=0).values, "sfm points"
    else:
        A = torch.eye(3, dtype=torch.float64)[None] - dirs[:, :, None] * dirs[:, None, :]
        lhs, rhs = A.sum(0), (A @ centers[..., None]).sum(0)[:, 0]
        eig = torch.linalg.eigvalsh(lhs)
        if float(eig[0]) <= 1e-3 * float(eig[-1]):
            chk = CameraCheck("forward", None, None, None, spread, "none")
            _up_warning(chk)
            return chk
        centre, source = torch.linalg.solve(lhs, rhs), "optical axes"
    face, face_rev = _facing(centers, dirs, centre), _facing(centers, -dirs, centre)
    chk = CameraCheck("ok", face, face_rev, in_front, spread, source)
    fix = ("the poses may be in the other convention: for a transforms.json written with OpenCV axes "
           "(x right, y down, z forward) pass camera_convention='opencv' (CLI: --camera-convention opencv); "
           "for OpenGL axes the default 'opengl' is right")
    how = f" (read as {convention_hint})" if convention_hint else ""
    if face < MIN_FACING_FRACTION and face_rev > face:
        if in_front is not None and in_front < 0.25:
            chk.verdict = "flipped"
            chk.warnings.append(
                f"cameras look away from the scene{how}: only {face:.0%} face the centre of the SfM points "
                f"and {in_front:.0%} of the points are in front of them, while the reversed axes would face "
                f"it ({face_rev:.0%}); {fix}")
        elif in_front is not None:
            chk.verdict = "outward"
            chk.warnings.append(
                f"only {face:.0%} of the cameras face the centre of the SfM points{how} although the points "
                f"are in front of them ({in_front:.0%}): an outward-looking capture (a room or 360° scan); "
                "object-centric methods (the surface method) will not work, use a Gaussian method")
        else:
            chk.verdict = "outward"
            chk.warnings.append(
                f"only {face:.0%} of the cameras look towards the point their optical axes meet{how} "
                f"(reversed: {face_rev:.0%}): either {fix}; or the capture looks outward (a room or 360° scan), "
                "which object-centric methods cannot reconstruct")
    _up_warning(chk)
    return chk


def _up_warning(chk: CameraCheck) -> None:
    if chk.up_spread_deg is not None and chk.up_spread_deg > MAX_UP_SPREAD_DEG:
        chk.warnings.append(
            f"camera up vectors disagree: median {chk.up_spread_deg:.0f}° from their mean (> "
            f"{MAX_UP_SPREAD_DEG:.0f}°); poses may mix conventions or be rotated per image — check how they "
            "were exported")
