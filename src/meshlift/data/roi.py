"""Region of interest (ROI) of an object capture: "the object, not the room".

A phone capture of an object standing in a room has no masks; the reconstruction holds the whole room.
:func:`auto_roi` estimates an (optionally up-aligned) box around the object from where the cameras look,
refined by the SfM points when there are some; :func:`parse_bbox` reads an explicit ``--bbox``;
:func:`roi_to_dict` / :func:`roi_from_dict` store a ROI in ``metrics.json``. The box is cut out of the
mesh by :func:`meshlift.mesh.crop.crop_mesh` (``rotation=roi.rotation``).

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
           "estimate_up", "FILL", "CENTRAL", "MIN_VIEWS", "GROW", "LINK"]

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
        raise ConfigError(f"{name}: the min corner must be below the max corner on every axis, but not on "
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
        raise CameraError("auto_roi needs at least two cameras to find where they look; pass an explicit --bbox")
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
