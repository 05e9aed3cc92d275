"""Region of interest (ROI) of an object capture: "the object, not the room".

A phone capture of an object standing in a room has no masks; the reconstruction holds the whole room.
:func:`auto_roi` estimates an (optionally up-aligned) box around the object from where the cameras look,
refined by the SfM points when there are some; with masks, :func:`mask_hull_roi` replaces its box by the box of
the masks' visual hull; :func:`parse_bbox` reads an explicit ``--bbox``;
:func:`roi_to_dict` / :func:`roi_from_dict` store a ROI in ``metrics.json``. The box is cut out of the
mesh by :func:`meshlift.mesh.crop.crop_mesh` (``rotation=roi.rotation``).

Why the masks win when there are some (measured on the statue, an H200 run of 2026-12-04): the SfM points'
1-99 % box missed both ends of a tall object, the raised torch (few points on a thin part) and the plinth
under the feet, and the asset was cut flat there; in the test views the pixels of the statue the mesh lacked
were ~0.01 of the 0.0137 mean squared error of its render (18.6 dB vs the Gaussians' 22.3 dB), the torch
and plinth ~40 % of them. A mask says where the object is in every view, thin parts included, so the box of
their (conservative) visual hull holds all of it.

Conventions (docs/conventions.md §2): cameras are OpenCV (``p_cam = R p_world + t``; +x right, +y down,
+z forward), so a camera's "up" in world coordinates is ``-R[1]``. World units throughout.

Box frame: ``p_box = rotation @ p_world``; the box is ``box_min <= p_box <= box_max`` (per axis). The
rows of ``rotation`` are the box axes in world coordinates; with ``align="up"`` the third row is ``up``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np
import torch

from meshlift.errors import CameraError, ConfigError

__all__ = ["RegionOfInterest", "auto_roi", "parse_bbox", "roi_to_dict", "roi_from_dict", "look_at_center",
           "estimate_up", "mask_hull_roi", "FILL", "CENTRAL", "MIN_VIEWS", "GROW", "LINK", "HULL_CELLS",
           "HULL_SEARCH", "HULL_MIN_VIEWS", "HULL_MIN_VIEW_FRACTION", "HULL_MISS_FRACTION"]

#: Fraction of the half field of view the object is assumed to fill in the median view: the ROI sphere's
#: radius from the cameras alone subtends ``atan(FILL · tan(half_fov))`` (see :func:`auto_roi`). 0.6 cut the
#: ears of the instant-ngp fox (a close-up), 0.7 keeps them.
FILL = 0.7
#: Central image region (fraction of width and height, centred) where the object projects in most views.
CENTRAL = 0.7
#: Fraction of the (inlier) views in whose central region an SfM point must project to count as "object".
MIN_VIEWS = 0.5
#: The points' box is intersected with the cameras' box scaled by this factor (about its centre).
GROW = 1.5
#: Density link: two SfM points are in the same cluster when closer than ``LINK`` × the median spacing to
#: their 4th nearest neighbour.
LINK = 2.5
#: Points needed for the points' box to be used (else the cameras' box is kept).
MIN_POINTS = 20
#: Lower/upper percentiles of the cluster's coordinates that make the points' box (robust to strays).
PERCENTILES = (1.0, 99.0)
#: :func:`mask_hull_roi`: cells per axis of the grid the visual hull is evaluated on.
HULL_CELLS = 96
#: :func:`mask_hull_roi`: the grid is a cube of side ``2 × HULL_SEARCH ×`` the starting box's longest side (at
#: least the cameras' cube grown by ``GROW``), centred on the box (room for a box that missed a part of the
#: object) ...
HULL_SEARCH = 1.0
#: ... searched up to this many times twice as wide while the hull reaches its border.
HULL_SEARCH_DOUBLINGS = 2
#: :func:`mask_hull_roi`: a cell is in the hull only when at least this many views see it (fewer cannot carve)...
HULL_MIN_VIEWS = 3
#: ... and at least this fraction of all views (the object of a capture is in most of them; on the statue the
#: stray pieces near the cameras were seen by at most 10 of 35 views, the statue by 26 or more).
HULL_MIN_VIEW_FRACTION = 0.25
#: :func:`mask_hull_roi`: a cell stays in the hull when at most this fraction of the views that see it have
#: it on their (dilated) background: a bad mask or a pose a few pixels off must not carve a thin part.
HULL_MISS_FRACTION = 0.1


@dataclass
class RegionOfInterest:
    """An (oriented) box around the object of a capture.

    Attributes:
        box_min, box_max: ``[3]`` float64 box corners in the box frame (world units; ``p_box = rotation @ p``).
        center: ``[3]`` float64 world point the cameras look at (or the box centre for an explicit box).
        up: ``[3]`` float64 unit world up estimate (``+z`` for an explicit box).
        source: ``"cameras"``, ``"cameras+points"`` or ``"explicit"``.
        rotation: ``[3, 3]`` float64 world-to-box rotation (rows = box axes); identity = axis-aligned.
        report: how it was estimated (numbers, notes; JSON-serialisable).
    """

    box_min: torch.Tensor
    box_max: torch.Tensor
    center: torch.Tensor
    up: torch.Tensor
    source: str
    rotation: torch.Tensor = field(default_factory=lambda: torch.eye(3, dtype=torch.float64))
    report: dict = field(default_factory=dict)

    @property
    def extent(self) -> torch.Tensor:
        """``[3]`` box side lengths (world units)."""
        return self.box_max - self.box_min

    def corners(self) -> torch.Tensor:
        """``[8, 3]`` float64 world coordinates of the box corners (bit k of the index picks max on axis k)."""
        idx = torch.arange(8)
        sel = torch.stack([(idx >> k) & 1 for k in range(3)], 1).bool()
        pb = torch.where(sel, self.box_max, self.box_min)
        return pb @ self.rotation  # p_world = rotation^T p_box

    def contains(self, points: torch.Tensor) -> torch.Tensor:
        """``[P]`` bool: which world points ``[P, 3]`` lie in the box (boundary included)."""
        pb = torch.as_tensor(points, dtype=torch.float64) @ self.rotation.T
        return ((pb >= self.box_min) & (pb <= self.box_max)).all(-1)

    def world_aabb(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``([3], [3])`` world-axis-aligned bounds of the (possibly rotated) box."""
        c = self.corners()
        return c.min(0).values, c.max(0).values


# -- explicit boxes and serialisation ------------------------------------------------------------------------
_BBOX_FORMAT = "x0,y0,z0,x1,y1,z1 (six numbers in world units, min corner then max corner, e.g. -1,-1,0,1,1,2)"


def parse_bbox(text: str, *, name: str = "--bbox") -> RegionOfInterest:
    """Read an explicit world-axis-aligned box ``"x0,y0,z0,x1,y1,z1"``.

    Separators may be commas and/or spaces; surrounding brackets are ignored.

    Raises:
        ConfigError: not six finite numbers, or a min not below its max; the message names ``name``
            and shows the format.
    """
    s = str(text).strip().strip("[]()").strip()
    parts = [p for p in re.split(r"[,\s]+", s) if p]
    if len(parts) != 6:
        raise ConfigError(f"{name}: expected {_BBOX_FORMAT}; got {len(parts)} value(s) in {text!r}")
    try:
        vals = [float(p) for p in parts]
    except ValueError:
        raise ConfigError(f"{name}: {text!r} is not six numbers; expected {_BBOX_FORMAT}") from None
    if not all(math.isfinite(v) for v in vals):
        raise ConfigError(f"{name}: {text!r} has a non-finite value; expected {_BBOX_FORMAT}")
    lo, hi = vals[:3], vals[3:]
    bad = [ax for ax, a, b in zip("xyz", lo, hi) if not a < b]
    if bad:
        raise ConfigError(f"{name}: the min corner must be below the max corner on every axis, but it is not on "
                          f"{', '.join(bad)} in {text!r}; expected {_BBOX_FORMAT}")
    bmin = torch.tensor(lo, dtype=torch.float64)
    bmax = torch.tensor(hi, dtype=torch.float64)
    return RegionOfInterest(bmin, bmax, 0.5 * (bmin + bmax), torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64),
                            "explicit", report={"text": str(text)})


def roi_to_dict(roi: RegionOfInterest) -> dict:
    """JSON-serialisable dict of a ROI (lists of floats), for ``metrics.json``."""
    return {
        "box_min": [float(v) for v in roi.box_min], "box_max": [float(v) for v in roi.box_max],
        "center": [float(v) for v in roi.center], "up": [float(v) for v in roi.up],
        "rotation": [[float(v) for v in row] for row in roi.rotation], "source": roi.source,
        "report": roi.report,
    }


def roi_from_dict(d: dict) -> RegionOfInterest:
    """Inverse of :func:`roi_to_dict`; raises ConfigError naming a missing or malformed key."""
    if not isinstance(d, dict):
        raise ConfigError(f"roi: expected a dict with box_min, box_max, ...; got {type(d).__name__}")

    def vec(key, shape, default=None):
        if key not in d:
            if default is not None:
                return default
            raise ConfigError(f"roi: missing key {key!r} (have {sorted(d)})")
        try:
            t = torch.tensor(d[key], dtype=torch.float64)
        except (TypeError, ValueError):
            raise ConfigError(f"roi[{key!r}] must be numbers of shape {list(shape)}, got {d[key]!r}") from None
        if tuple(t.shape) != shape or not bool(torch.isfinite(t).all()):
            raise ConfigError(f"roi[{key!r}] must be finite numbers of shape {list(shape)}, got {d[key]!r}")
        return t

    bmin, bmax = vec("box_min", (3,)), vec("box_max", (3,))
    return RegionOfInterest(
        bmin, bmax, vec("center", (3,), 0.5 * (bmin + bmax)), vec("up", (3,), torch.tensor([0.0, 0, 1.0]).double()),
        str(d.get("source", "explicit")), vec("rotation", (3, 3), torch.eye(3, dtype=torch.float64)),
        dict(d.get("report", {})))


# -- estimation ---------------------------------------------------------------------------------------------
def _np(x, name: str, shape_tail: tuple) -> np.ndarray:
    a = np.asarray(x.detach().cpu().double().numpy() if isinstance(x, torch.Tensor) else x, dtype=np.float64)
    if a.ndim != 1 + len(shape_tail) or a.shape[1:] != shape_tail:
        raise CameraError(f"auto_roi: {name} must be [N, {', '.join(map(str, shape_tail))}], got {list(a.shape)}")
    return a


def look_at_center(centers: np.ndarray, dirs: np.ndarray, *, iters: int = 30) -> tuple[np.ndarray, np.ndarray, dict]:
    """The point nearest to all optical axes in least squares, robust to cameras looking elsewhere.

    Minimises ``Σ wᵢ |(I − dᵢdᵢᵀ)(x − cᵢ)|² / ρᵢ²`` (squared sine of the angle off each axis, ``ρᵢ`` the
    distance from camera i to the current estimate) by iteratively reweighted least squares with Cauchy
    weights (scale 2.5 × the MAD of the angular residuals); cameras that have the point behind them get
    weight 0, and residuals over 3 × the scale are trimmed.

    Args:
        centers: ``[N, 3]`` camera centres; dirs: ``[N, 3]`` unit viewing directions (world).

    Returns:
        ``(x [3], weights [N] in [0, 1], info)``; ``info["degenerate"]`` is True when the axes are
        (near) parallel or fewer than two cameras look at the point (then ``x`` is not meaningful).
    """
    n = len(centers)
    w = np.ones(n)
    rho = np.ones(n)
    A = np.eye(3)[None] - dirs[:, :, None] * dirs[:, None, :]
    Ac = (A @ centers[..., None])[..., 0]
    x = centers.mean(0)
    info = {"degenerate": True, "iterations": 0}
    for it in range(iters):
        ww = w / rho**2
        lhs = (ww[:, None, None] * A).sum(0)
        ev = np.linalg.eigvalsh(lhs)
        if n < 2 or ev[-1] <= 0 or ev[0] < 1e-4 * ev[-1]:
            return x, w, info
        x_new = np.linalg.solve(lhs, (ww[:, None] * Ac).sum(0))
        off = x_new - centers
        depth = (off * dirs).sum(-1)
        rho = np.maximum(np.linalg.norm(off, axis=1), 1e-12)
        res = np.linalg.norm((A @ off[..., None])[..., 0], axis=1) / rho  # sine of the angle off-axis
        front = depth > 0
        if front.sum() < 2:
            return x_new, w, info
        sigma = max(1.4826 * float(np.median(res[front])), 0.01)
        w = front / (1.0 + (res / (2.5 * sigma)) ** 2)
        w[res > 3 * 2.5 * sigma] = 0.0
        done = np.linalg.norm(x_new - x) < 1e-9 * (1.0 + float(np.median(rho)))
        x = x_new
        info = {"degenerate": False, "iterations": it + 1, "sigma_rad": sigma,
                "median_off_axis_deg": float(np.degrees(np.arcsin(np.clip(np.median(res[front]), 0, 1)))),
                "cameras_behind": int((~front).sum())}
        if done:
            break
    return x, w, info


def estimate_up(world_to_camera: np.ndarray, weights: np.ndarray | None = None) -> tuple[np.ndarray, str]:
    """Up direction from camera orientations (OpenCV axes: camera up is ``−R[1]``, right is ``R[0]``).

    In order of preference: (1) the direction most orthogonal to every camera's right axis ``R[0]`` (the
    smallest eigenvector of ``Σ wᵢ rᵢrᵢᵀ``): photos are taken with little roll, so the right axes are
    horizontal whatever the pitch, which makes this unbiased when every camera looks up (or down) at the
    object; used when that eigenvector is well separated (λ₁ > 4 λ₀, i.e. the cameras' yaws differ) and
    within 45° of the mean camera up; (2) the normal of the camera-centre plane (an orbit) when the
    centres are clearly planar and it is within 35° of the mean up; (3) the mean camera up. (1) and (2) are
    oriented to agree with the mean up.

    Args:
        world_to_camera: ``[N, 4, 4]`` float64 OpenCV world-to-camera matrices.
        weights: ``[N]`` camera weights in [0, 1] (e.g. the look-at inliers); None = all 1.

    Returns:
        ``(up [3] unit float64, method)``, method one of ``"camera right axes"``, ``"camera-centre plane"``,
        ``"camera-up mean"``.
    """
    w = np.ones(len(world_to_camera)) if weights is None else np.asarray(weights, dtype=np.float64)
    if w.sum() <= 0:
        w = np.ones(len(world_to_camera))
    ups = -world_to_camera[:, 1, :3]
    m = (w[:, None] * ups).sum(0)
    if np.linalg.norm(m) < 1e-9:
        m = np.array([0.0, 0.0, 1.0])
    m = m / np.linalg.norm(m)
    rights = world_to_camera[:, 0, :3]
    ev, evec = np.linalg.eigh((w[:, None, None] * rights[:, :, None] * rights[:, None, :]).sum(0))
    nrm = evec[:, 0]
    if ev[1] > 4 * max(ev[0], 0) and abs(nrm @ m) > math.cos(math.radians(45)):
        return nrm * np.sign(nrm @ m), "camera right axes"
    R = world_to_camera[:, :3, :3]
    c = -np.einsum("nji,nj->ni", R, world_to_camera[:, :3, 3])
    sel = w > 0.5
    if sel.sum() >= 4:
        cc = c[sel] - c[sel].mean(0)
        ev, evec = np.linalg.eigh(cc.T @ cc)
        nrm = evec[:, 0]
        if ev[1] > 0 and ev[0] < 0.2 * ev[1] and abs(nrm @ m) > math.cos(math.radians(35)):
            return nrm * np.sign(nrm @ m), "camera-centre plane"
    return m, "camera-up mean"


def _up_frame(up: np.ndarray) -> np.ndarray:
    """``[3, 3]`` right-handed rotation whose third row is ``up`` and first row the world axis least
    aligned with ``up``, made orthogonal."""
    a = np.eye(3)[int(np.argmin(np.abs(up)))]
    e1 = a - (a @ up) * up
    e1 /= np.linalg.norm(e1)
    return np.stack([e1, np.cross(up, e1), up])


def auto_roi(
    world_to_camera,
    K,
    width: int,
    height: int,
    points=None,
    *,
    fill: float = FILL,
    align: str = "up",
    central: float = CENTRAL,
    min_views: float = MIN_VIEWS,
    grow: float = GROW,
) -> RegionOfInterest:
    """Estimate the box around the object an object capture looks at (no masks needed).

    Method: (a) the look-at centre, the point nearest to all optical axes (:func:`look_at_center`, robust
    IRLS that ignores cameras looking away); (b) the up direction (:func:`estimate_up`); (c) the size from
    the cameras: a sphere at the centre whose radius ``r = d · sin(atan(fill · tan(h)))`` makes it cover the
    central ``fill`` of the half field of view ``h`` (``tan h`` = geometric mean of the horizontal and
    vertical half-FOV tangents: a tall object is framed in portrait) at the median camera distance ``d``, giving
    the cube ``centre ± r``; (d) with SfM points within ``0.75 d`` of the centre: the *core* points project
    into the central ``central`` fraction of the image (each side) in at least ``min_views`` of the inlier
    views; the points that are in the frame in that many views (or core) are linked into density clusters
    (single linkage at ``LINK`` × the core's median 4-NN spacing), so a cluster grows from the core into
    the object's parts near the image borders (a raised arm) but not into the room; keep the clusters
    holding at least 5 % of the core points, with a core point within ``grow · r`` of the centre; take the
    ``PERCENTILES`` box of their coordinates padded by max(2 spacings, 5 % of its size), and intersect it with the camera cube
    scaled by ``grow``. Fewer than ``MIN_POINTS`` such points: the camera cube is kept (reported).

    Args:
        world_to_camera: ``[V, 4, 4]`` OpenCV world-to-camera matrices (tensor or array).
        K: ``[V, 3, 3]`` pinhole intrinsics in pixels of a ``width`` × ``height`` image.
        width, height: image size in pixels.
        points: optional ``[P, 3]`` SfM points (world units); non-finite rows are ignored.
        fill: see (c), in (0, 1].
        align: ``"up"`` (box axes: two horizontal, one along the estimated up) or ``"world"`` (world axes).
        central: central image fraction used in (d), in (0, 1].
        min_views: fraction of the views used in (d), in [0, 1].
        grow: the points' box may exceed the camera cube by this factor (≥ 1).

    Returns:
        A :class:`RegionOfInterest` with ``source`` ``"cameras"`` or ``"cameras+points"``; ``report`` has
        the centre's off-axis residual, the cameras used, the camera-box radius, the points kept, and notes.

    Raises:
        CameraError: bad shapes, fewer than two cameras, or an unknown ``align``; ConfigError: options out
            of range.
    """
    w2c = _np(world_to_camera, "world_to_camera", (4, 4))
    Kn = _np(K, "K", (3, 3))
    if len(w2c) != len(Kn):
        raise CameraError(f"auto_roi: {len(w2c)} world_to_camera matrices but {len(Kn)} K matrices")
    if len(w2c) < 2:
        raise CameraError(f"auto_roi needs at least two training cameras to find where they look, got {len(w2c)} "
                          "(test views are held out); pass an explicit --bbox, or add views")
    if align not in ("up", "world"):
        raise CameraError(f"auto_roi: align must be 'up' or 'world', got {align!r}")
    for nm, v, lo, hi in (("fill", fill, 0, 1), ("central", central, 0, 1), ("min_views", min_views, 0, 1)):
        if not lo < v <= hi and not (nm == "min_views" and v == 0):
            raise ConfigError(f"auto_roi: {nm} must be in ({lo}, {hi}], got {v}")
    if not grow >= 1:
        raise ConfigError(f"auto_roi: grow must be >= 1, got {grow}")
    R = w2c[:, :3, :3]
    centers = -np.einsum("nji,nj->ni", R, w2c[:, :3, 3])
    dirs = R[:, 2] / np.linalg.norm(R[:, 2], axis=1, keepdims=True)
    report: dict = {"cameras": len(w2c), "notes": []}
    c, wts, info = look_at_center(centers, dirs)
    pts = None
    if points is not None:
        pts = _np(points, "points", (3,))
        pts = pts[np.isfinite(pts).all(1)]
    if info["degenerate"]:
        report["notes"].append("camera axes (near) parallel or looking away from each other: no look-at point; "
                               "centre from the points' median / the cameras' mean view")
        wts = np.ones(len(w2c))
        spread = float(np.median(np.linalg.norm(centers - centers.mean(0), axis=1)))
        depth = max(2.0 * spread, 1e-3)
        c = centers.mean(0) + dirs.mean(0) / max(np.linalg.norm(dirs.mean(0)), 1e-12) * depth
        if pts is not None and len(pts):
            c = np.median(pts, axis=0)
    report["look_at"] = {k: v for k, v in info.items()}
    inl = wts > 0.5
    if inl.sum() < 2:
        inl = wts > 0
    report["cameras_used"] = int(inl.sum())
    up, up_method = estimate_up(w2c, wts)
    report["up_method"] = up_method
    rot = _up_frame(up) if align == "up" else np.eye(3)
    # (c) size from the cameras
    dist = np.linalg.norm(centers[inl] - c, axis=1)
    d_med = float(np.median(dist))
    fx, fy = Kn[inl, 0, 0], Kn[inl, 1, 1]
    tan_h = np.sqrt((0.5 * width / fx) * (0.5 * height / fy))  # geometric mean of the two half-FOV tangents
    r = float(np.median(dist * np.sin(np.arctan(fill * tan_h))))
    cb = rot @ c
    box_min, box_max = cb - r, cb + r
    report["camera_box_radius"] = r
    report["median_camera_distance"] = d_med
    source = "cameras"
    # (d) refine with the SfM points
    if pts is not None and len(pts):
        sel = _points_cluster(pts, w2c[inl], Kn[inl], width, height, c, d_med, r, central, min_views, grow, report)
        if sel is not None and len(sel) >= MIN_POINTS:
            pb = sel @ rot.T
            lo = np.percentile(pb, PERCENTILES[0], axis=0)
            hi = np.percentile(pb, PERCENTILES[1], axis=0)
            pad = np.maximum(2.0 * report["points"]["spacing"], 0.05 * (hi - lo))
            lo, hi = lo - pad, hi + pad
            glo, ghi = cb - grow * r, cb + grow * r
            lo, hi = np.maximum(lo, glo), np.minimum(hi, ghi)
            if (hi > lo).all():
                box_min, box_max = lo, hi
                source = "cameras+points"
            else:
                report["notes"].append("the points' cluster lies outside the camera box; camera box kept")
        else:
            report["notes"].append(f"fewer than {MIN_POINTS} SfM points in the object cluster; camera box kept")
    t = lambda a: torch.as_tensor(np.asarray(a, dtype=np.float64))  # noqa: E731
    return RegionOfInterest(t(box_min), t(box_max), t(c), t(up), source, t(rot), report)


def _hull_cells(lo: torch.Tensor, hi: torch.Tensor, n: int, rot: torch.Tensor, w2c: torch.Tensor, K: torch.Tensor,
                fg: torch.Tensor, min_views: int, miss_fraction: float) -> tuple[np.ndarray, float]:
    """``(hull [n, n, n] bool, cell size)`` of :func:`mask_hull_roi` on the box-frame cube ``lo``..``hi``
    (``[3]`` float64, equal sides): cell centres tested against the masks ``fg [V, H, W]`` bool, each dilated
    by the radius of a cell projected at the cube's centre (rounded up)."""
    import torch.nn.functional as F

    V, H, W = fg.shape
    cell = float((hi - lo).max()) / n
    centre = 0.5 * (lo + hi)
    axis = (torch.arange(n, dtype=torch.float64) + 0.5) * cell - 0.5 * n * cell
    cw = rot.T @ centre
    zc = (w2c[:, 2, :3] @ cw + w2c[:, 2, 3]).clamp(min=1e-9)
    f = torch.maximum(K[:, 0, 0], K[:, 1, 1]).abs()
    rad = torch.ceil(0.5 * math.sqrt(3) * cell * f / zc).clamp(0, 64).long()
    flat = torch.empty(V, H * W, dtype=torch.bool)
    for v in range(V):  # a square dilation, separable: rows then columns
        r = int(rad[v])
        x = fg[v].float()[None, None]
        if r > 0:
            x = F.max_pool2d(F.max_pool2d(x, (1, 2 * r + 1), stride=1, padding=(0, r)), (2 * r + 1, 1), stride=1,
                             padding=(r, 0))
        flat[v] = (x[0, 0] > 0).reshape(-1)
    # float32 projection of box-frame offsets q from the centre: p_cam = R rot^T (centre + q) + t = A q + b
    A = (w2c[:, :3, :3] @ rot.T).float()
    b = (w2c[:, :3, :3] @ cw + w2c[:, :3, 3]).float()
    Kf = K.float()
    ax = axis.float()
    gy, gz = torch.meshgrid(ax, ax, indexing="ij")
    seen = torch.zeros(n, n * n, dtype=torch.int32)
    out = torch.zeros(n, n * n, dtype=torch.int32)
    for i in range(n):  # one slab of cells at a time: [n², 3] points
        q = torch.stack([torch.full_like(gy, float(ax[i])), gy, gz], -1).reshape(-1, 3)
        pc = torch.einsum("vij,pj->vpi", A, q) + b[:, None]
        z = pc[..., 2]
        front = z > 1e-6
        zs = torch.where(front, z, torch.ones_like(z))
        u = torch.floor((Kf[:, None, 0, 0] * pc[..., 0] + Kf[:, None, 0, 1] * pc[..., 1]) / zs + Kf[:, None, 0, 2])
        w_ = torch.floor(Kf[:, None, 1, 1] * pc[..., 1] / zs + Kf[:, None, 1, 2])
        ok = front & (u >= 0) & (u < W) & (w_ >= 0) & (w_ < H)
        idx = (w_.clamp(0, H - 1) * W + u.clamp(0, W - 1)).long()
        seen[i] = ok.sum(0).int()
        out[i] = (ok & ~torch.gather(flat, 1, idx)).sum(0).int()
    hull = (seen >= min_views) & (out <= torch.floor(miss_fraction * seen.double()).int())
    return hull.reshape(n, n, n).numpy(), cell


def _cell_bounds(ijk: np.ndarray, lo: torch.Tensor, cell: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Box-frame bounds of the cells ``ijk [M, 3]`` of a grid with corner ``lo`` and cell size ``cell``."""
    return (lo + torch.as_tensor(ijk.min(0), dtype=torch.float64) * cell,
            lo + torch.as_tensor(ijk.max(0) + 1, dtype=torch.float64) * cell)


def mask_hull_roi(roi: RegionOfInterest, world_to_camera, K, masks, *, cells: int = HULL_CELLS,
                  search: float = HULL_SEARCH, min_views: int = HULL_MIN_VIEWS,
                  min_view_fraction: float = HULL_MIN_VIEW_FRACTION,
                  miss_fraction: float = HULL_MISS_FRACTION, threshold: float = 0.5) -> RegionOfInterest:
    """``roi`` with its box replaced by the box of the masks' visual hull (same centre, up and rotation).

    Method: a cell centre is in the hull when at least ``max(min_views, min_view_fraction × V)`` of the ``V``
    views see it (in front, inside the image; nearest pixel as in
    :func:`meshlift.isosurface.tsdf.tsdf_at_points`) and at most ``miss_fraction`` of those (rounded down)
    have it on their background; each view's mask (``> threshold``) is first dilated by the radius of a cell
    projected at the grid's centre (rounded up), so that a part thinner than a cell is not missed between
    cell centres (the hull is conservative). Coarse to fine: a grid of ``cells // 2`` per axis over the cube
    of side ``2 search ×`` the longest side of ``roi``'s box (at least ``2 GROW ×`` its camera-box radius; its
    frame, centred on it; twice as wide, up to ``HULL_SEARCH_DOUBLINGS`` times, while the hull reaches the
    cube's border) finds the object —
    the hull's connected pieces (26-neighbours) that meet ``roi``'s box, else the largest (stray pieces seen
    by few views, near the cameras, are dropped) —, then a grid of ``cells`` per axis over the cube around
    that piece's box (one coarse cell wider) gives the box: the bounds of its pieces that meet the coarse
    piece's box. Why: the module docstring (the statue).

    Args:
        roi: the starting region (:func:`auto_roi`); its frame is kept.
        world_to_camera: ``[V, 4, 4]`` OpenCV world-to-camera (tensor or array).
        K: ``[V, 3, 3]`` pinhole intrinsics in pixels of the masks.
        masks: ``[V, H, W]`` or ``[V, H, W, 1]`` coverage in [0, 1] (tensor).
        cells, search, min_views, min_view_fraction, miss_fraction, threshold: above (module constants ``HULL_*``).

    Returns:
        A :class:`RegionOfInterest` with ``source`` = ``roi.source + "+masks"`` and ``report["masks"]`` (cells,
        cell sizes, pieces, whether the hull reaches the searched cube's border, the box before); when no cell
        is in the hull (masks and poses disagree) ``roi`` itself with a note.

    Raises:
        CameraError: shapes that do not match; ConfigError: options out of range.
    """
    from scipy import ndimage

    w2c = torch.as_tensor(_np(world_to_camera, "world_to_camera", (4, 4)))
    Kt = torch.as_tensor(_np(K, "K", (3, 3)))
    m = torch.as_tensor(masks).detach().float().cpu()
    if m.ndim == 4 and m.shape[-1] == 1:
        m = m[..., 0]
    if m.ndim != 3 or m.shape[0] != len(w2c) or len(Kt) != len(w2c):
        raise CameraError(f"mask_hull_roi: masks must be [V, H, W] (or [V, H, W, 1]) with V = {len(w2c)} views "
                          f"like world_to_camera and K, got masks {list(m.shape)}, K {list(Kt.shape)}")
    if isinstance(cells, bool) or not isinstance(cells, int) or not 8 <= cells <= 512:
        raise ConfigError(f"mask_hull_roi: cells must be an int in [8, 512], got {cells!r}")
    if not search > 0 or not 0 <= miss_fraction < 1 or min_views < 1 or not 0 <= min_view_fraction <= 1:
        raise ConfigError(f"mask_hull_roi: need search > 0, 0 <= miss_fraction < 1, min_views >= 1, "
                          f"0 <= min_view_fraction <= 1; got {search}, {miss_fraction}, {min_views}, "
                          f"{min_view_fraction}")
    fg = m > threshold
    rot = roi.rotation.double()
    need = max(int(min_views), int(math.ceil(min_view_fraction * len(w2c))))
    report = {**roi.report, "notes": list(roi.report.get("notes", []))}

    def pieces(hull, lo, cell, blo, bhi):
        """Cells of the pieces of ``hull`` that meet the box ``blo..bhi`` (else the largest piece)."""
        lab, n = ndimage.label(hull, structure=np.ones((3, 3, 3), dtype=bool))
        if n == 0:
            return None, 0
        ijk = np.argwhere(lab > 0)
        c = lo.numpy() + (ijk + 0.5) * cell
        inside = ((c >= blo.numpy() - 0.5 * cell) & (c <= bhi.numpy() + 0.5 * cell)).all(1)
        ids = np.unique(lab[tuple(ijk[inside].T)])
        if len(ids) == 0:
            ids = [1 + int(np.argmax(np.bincount(lab.ravel())[1:]))]
        return np.argwhere(np.isin(lab, ids)), int(n)

    c0 = 0.5 * (roi.box_min + roi.box_max).double()
    half = max(search * float((roi.box_max - roi.box_min).max()),
               GROW * float(roi.report.get("camera_box_radius", 0.0)))
    for attempt in range(HULL_SEARCH_DOUBLINGS + 1):  # a hull reaching the cube's border: search twice as wide
        lo0 = c0 - half
        coarse, cell0 = _hull_cells(lo0, c0 + half, max(4, cells // 2), rot, w2c.double(), Kt.double(), fg, need,
                                    miss_fraction)
        ijk0, n0 = pieces(coarse, lo0, cell0, roi.box_min.double(), roi.box_max.double())
        rep = {"cells": cells, "views_needed": need, "search_half": half, "coarse_cell": cell0, "coarse_pieces": n0}
        if ijk0 is None:
            report["notes"].append("no cell is inside the masks' visual hull (masks and poses disagree?); the box "
                                   "without the masks is kept")
            report["masks"] = rep
            return RegionOfInterest(roi.box_min, roi.box_max, roi.center, roi.up, roi.source, roi.rotation, report)
        rep["reaches_border"] = bool((ijk0.min(0) == 0).any() or (ijk0.max(0) == coarse.shape[0] - 1).any())
        if not rep["reaches_border"]:
            break
        half *= 2.0
    plo, phi = _cell_bounds(ijk0, lo0, cell0)
    c1 = 0.5 * (plo + phi)
    half1 = 0.5 * float((phi - plo).max()) + cell0
    lo1 = c1 - half1
    fine, cell1 = _hull_cells(lo1, c1 + half1, cells, rot, w2c.double(), Kt.double(), fg, need, miss_fraction)
    ijk1, n1 = pieces(fine, lo1, cell1, plo, phi)
    if ijk1 is None:  # the finer dilation is narrower: keep the coarse piece's box
        lo, hi = plo, phi
    else:
        lo, hi = _cell_bounds(ijk1, lo1, cell1)
    rep.update(cell=cell1, pieces=n1, hull_cells=int(0 if ijk1 is None else len(ijk1)),
               box_before=[[float(x) for x in roi.box_min], [float(x) for x in roi.box_max]])
    if rep["reaches_border"]:
        report["notes"].append("the masks' visual hull reaches the border of the searched cube (parts of the "
                               "object seen by few views, or masks that do not isolate it); its box is cut there")
    report["masks"] = rep
    return RegionOfInterest(lo, hi, roi.center, roi.up, roi.source + "+masks", roi.rotation, report)


def _points_cluster(pts, w2c, K, width, height, c, d_med, r, central, min_views, grow, report):
    """Step (d) of :func:`auto_roi`: the ``[M, 3]`` SfM points of the object cluster (or None)."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components
    from scipy.spatial import cKDTree

    near = np.linalg.norm(pts - c, axis=1) < 0.75 * d_med
    cand = pts[near]
    rep = {"input": int(len(pts)), "near_centre": int(len(cand))}
    report["points"] = rep
    if len(cand) < MIN_POINTS:
        return None
    pc = np.einsum("nij,pj->npi", w2c[:, :3, :3], cand) + w2c[:, None, :3, 3]
    z = pc[..., 2]
    zs = np.where(z > 1e-9, z, 1e-9)
    du = np.abs(K[:, None, 0, 0] * pc[..., 0] / zs + K[:, None, 0, 2] - 0.5 * width) / (0.5 * width)
    dv = np.abs(K[:, None, 1, 1] * pc[..., 1] / zs + K[:, None, 1, 2] - 0.5 * height) / (0.5 * height)
    front = z > 1e-9
    is_core = (front & (du <= central) & (dv <= central)).mean(0) >= min_views
    in_frame = (front & (du <= 1) & (dv <= 1)).mean(0) >= min_views
    rep["central_in_most_views"] = int(is_core.sum())
    rep["in_frame_in_most_views"] = int(in_frame.sum())
    if is_core.sum() < MIN_POINTS:
        return None
    grow_set = cand[in_frame | is_core]
    is_core = is_core[in_frame | is_core]
    k = min(4, len(grow_set) - 1)
    tree = cKDTree(grow_set)
    spacing = float(np.median(tree.query(grow_set[is_core], k=k + 1)[0][:, k]))
    rep["spacing"] = spacing
    pairs = tree.query_pairs(LINK * spacing, output_type="ndarray")
    g = coo_matrix((np.ones(len(pairs)), (pairs[:, 0], pairs[:, 1])), shape=(len(grow_set), len(grow_set)))
    n, lab = connected_components(g, directed=False)
    core_count = np.bincount(lab[is_core], minlength=n)
    dmin = np.full(n, np.inf)
    np.minimum.at(dmin, lab[is_core], np.linalg.norm(grow_set[is_core] - c, axis=1))
    keep = (core_count >= max(5, 0.05 * is_core.sum())) & (dmin <= grow * r)
    rep["clusters"] = int(n)
    rep["clusters_kept"] = int(keep.sum())
    sel = grow_set[keep[lab]]
    rep["kept"] = int(len(sel))
    return sel
