"""Flatten the floor in the depth maps before the asset's TSDF fusion (``floor_snap``).

Why (measured, benchmarks/results/milo_tsdf_h200_2026-12-04.md, "Where the unmasked objects' precision goes"):
in the unmasked synthetic scenes (an object on a textured floor, ``ref_scene=ground``) all of the asset's lost
precision was floor. The Gaussians' median depth of a textured floor seen at grazing angles is blotchy
(bob: from about −0.07 to +0.2 around the true plane y = 0, object height 2), so the fused floor is a bumpy
sheet: the mesh RANSAC of :mod:`meshlift.mesh.support_plane` found a plane holding 1.7 % of the area (none cut,
bob) or cut it and left a skirt of floor blobs around the object's base (spot). No width of the mesh cut
reached the target (offline: spot 0.76 → 0.87 at the widest, its feet lost). The lever is the floor's geometry
before fusion, which is what this module changes.

The steps (:func:`snap_floor_depths`):

1. **Sample points** of the depth maps (back-projected through the pixel centres, docs/conventions.md §4) that
   lie inside the region of interest, at most ``max_samples`` in all.
2. **Fit the floor** (:func:`fit_floor_plane`): RANSAC (Fischler & Bolles 1981) over the lowest
   ``bottom_fraction`` of the sampled points along ``up``, planes within ``max_tilt_deg`` of ``up``, scored by
   the points within ``INLIER_FRACTION × snap`` of them (a narrow band: it seeks the floor's mode, not the middle
   of its blotches); the winner's normal refitted by least squares (SVD) on all the sampled points within ``snap``
   of it and its offset the median of their heights. Not found (fewer than ``MIN_PLANE_POINTS`` points, less
   than ``MIN_INLIER_FRACTION`` of the lowest points in the band, tilted) → the depth maps are returned unchanged
   with a note. The plane must also be a sheet around the object (:func:`floor_cover`): the points within the
   band cover at least ``MIN_OPEN_COVER`` (70 %) of the region's footprint cells that are not under the object
   (cells sized by the band's point density; a cell is under the object when it holds points more than
   ``UNDER_OBJECT_HEIGHT × snap`` above the plane, none in the band, and is connected to the region's centre),
   and at most ``MAX_BELOW_FRAC`` of the points lie more than ``BELOW_DEPTH × snap`` below it (nothing is under
   a floor: not a shelf or a table top over a lower floor). The bottom rim of an object with nothing under it,
   a wall's foot or a tilted plane through a level floor is a strip. Before 2026-12-06 the cover was judged on
   all the footprint cells (``MIN_FLOOR_COVER`` 40 %, ``cover_rule="footprint"``): the object's own footprint
   counted as missing floor, and the quick CPU bob_ground run's real floor was rejected at 36 %.
3. **Protect the object's base**: a floor cell (a square of side ``PROTECT_CELL × snap`` in the plane) where
   something rises through the band and on above it (a leg, a wall of the object's base) keeps the depth of its
   samples in the band, so the bottom of a leg is not moved onto the floor behind it (which would carve the leg
   away). "Rises on": at least ``MIN_PROTECT_SAMPLES`` samples from at least two views in each half of the
   protect band, heights ``(snap, (1 + PROTECT_BAND) / 2 × snap]`` and ``((1 + PROTECT_BAND) / 2 × snap,
   PROTECT_BAND × snap]``, counted over the cell's 3 × 3 neighbourhood (sparse pixels, walls that lean a
   little). A floor blotch or a skirt that pokes out of the band but not through the whole protect band
   protects nothing, and neither does an overhang higher than it (a belly). A convex bottom resting on the
   floor shows no sample in the band (its underside faces away from cameras above the floor).
4. **Snap**: every sample inside the region within ``snap`` of the plane, except above it in a protected cell
   (below it, by at most ``snap``, always: nothing of an object standing on the floor is below it), is moved
   along its pixel's ray onto the plane, ``z' = (offset − n · c) / (n · r)`` with ``c`` the camera centre and
   ``r`` the ray with unit camera z. In a cell neither protected nor next to a protected one, samples up to
   ``SKIRT_BAND × snap`` from the plane are moved too (the tops of floor blotches and of the skirt around the
   object's foot: what pokes out of the band there without rising through the protect band is not the
   object). The fused floor is then one flat sheet, which the asset's support cut
   (:func:`meshlift.methods.milo.tsdf_mesh.object_asset` with this plane) removes cleanly.

Measured on the CPU without training (``benchmarks/floor_snap_cpu.py``, the true depth of the synthetic scenes with
a blotchy floor; docs/benchmarks.md, "the floor of the unmasked scenes"): bob with blotches to +0.2 and a skirt,
F 0.811 → 0.888 (precision 0.749 → 0.870); spot with a milder floor 0.964 → 0.979.

Nothing here prints. Depth maps: camera z, 0 = empty (docs/conventions.md §4); world frame of the cameras.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional

import torch

__all__ = ["FloorPlane", "FloorSnapReport", "FloorCover", "fit_floor_plane", "floor_cover", "snap_floor_depths",
           "MIN_PROTECT_SAMPLES", "PROTECT_BAND", "SKIRT_BAND", "MIN_OPEN_COVER", "MAX_BELOW_FRAC", "COVER_RULES",
           "INLIER_RULES"]

#: A floor cell is protected (step 3) when at least this many samples of at least two views lie in each half of
#: the protect band above the snap band.
MIN_PROTECT_SAMPLES = 3

#: ... at heights in ``(snap, PROTECT_BAND × snap]`` above the plane.
PROTECT_BAND = 3.0

#: In a cell neither protected (nothing rises through the protect band) nor next to a protected one, samples up to
#: this × snap from the plane are snapped too: the tops of floor blotches and of the skirt around the object's foot.
SKIRT_BAND = 2.0

#: Side of the protect cells (step 3) and of the cover cells (step 2), as fractions of the snap distance.
PROTECT_CELL = 0.25
COVER_CELL = 0.5

#: The RANSAC inlier band as a fraction of the snap distance (narrow: it seeks the floor's mode).
INLIER_FRACTION = 0.25

#: The plane is accepted when its ``snap``-band holds at least this share of the RANSAC candidates.
MIN_INLIER_FRACTION = 0.5

#: ... and at least this many points.
MIN_PLANE_POINTS = 50

#: The ``"footprint"`` rule (before 2026-12-06, kept for comparison): the snap band's points must fall in at least
#: this share of all the region's footprint cells (side ``COVER_CELL × snap``).
MIN_FLOOR_COVER = 0.4

#: The ``"open"`` rule (:func:`floor_cover`, the default): cover cells hold about this many floor points on average
#: (their side from the density of the points within ``snap`` of the plane) ...
COVER_POINTS_PER_CELL = 4.0

#: ... their side clamped to these multiples of ``snap``.
COVER_CELL_RANGE = (0.5, 2.0)

#: A cell is *under the object* when it holds points higher than this × ``snap`` above the plane, none within
#: ``snap`` of it, and is connected (8-neighbours) to the cells around the region's centre.
UNDER_OBJECT_HEIGHT = 2.0

#: The plane is accepted when its snap band's points fall in at least this share of the footprint cells that are
#: not under the object ...
MIN_OPEN_COVER = 0.7

#: ... and at most this share of the region's points lie more than ``BELOW_DEPTH × snap`` below it (a floor has
#: nothing under it).
MAX_BELOW_FRAC = 0.05
BELOW_DEPTH = 3.0


@dataclasses.dataclass
class FloorPlane:
    """A plane ``normal · p = offset`` (world units), ``normal`` a unit ``[3]`` float64 along ``up``, with what
    the fit measured (:func:`fit_floor_plane`)."""

    normal: torch.Tensor
    offset: float
    tilt_deg: float = 0.0
    """Angle between ``normal`` and ``up``."""
    inlier_frac: float = 0.0
    """Share of the RANSAC candidates (the lowest points) within ``snap`` of the plane."""


@dataclasses.dataclass
class FloorSnapReport:
    """What :func:`snap_floor_depths` found and changed (``metrics.json`` ``mesh_report.floor``)."""

    found: bool = False
    normal: list = dataclasses.field(default_factory=list)
    """Unit plane normal (world), along ``up``."""
    offset: float = 0.0
    """The plane is ``normal · p = offset`` (world units)."""
    tilt_deg: float = 0.0
    """Angle between the plane's normal and ``up``."""
    snap: float = 0.0
    """The snap distance (world units)."""
    inlier_frac: float = 0.0
    """Share of the RANSAC candidates (the lowest sampled points) within ``snap`` of the plane."""
    snapped_frac: float = 0.0
    """Share of the non-empty depth pixels moved onto the plane."""
    floor_cover: float = 0.0
    """The cover the rule judged (:class:`FloorCover`): with ``rule="open"`` the share of the footprint cells not
    under the object that hold points within ``snap`` of the plane."""
    footprint_cover: float = 0.0
    """Share of all the region's footprint cells holding points within ``snap`` of the plane."""
    cover_cell: float = 0.0
    """Side of the cover cells (world units)."""
    open_share: float = 0.0
    """Share of the footprint cells not under the object (the denominator of ``floor_cover``)."""
    below_frac: float = 0.0
    """Share of the sampled points more than ``BELOW_DEPTH × snap`` below the plane."""
    cover_rule: str = "open"
    protected_cells: int = 0
    """Floor cells where something stands (step 3: their band samples kept their depth)."""
    seconds: float = 0.0
    notes: list = dataclasses.field(default_factory=list)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _camera_rays(world_to_camera: torch.Tensor, K: torch.Tensor, H: int, W: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(centres [C, 3], rays [C, H, W, 3])``: camera centres and world rays with unit camera z through the pixel
    centres (docs/conventions.md §2, §4), float64."""
    w2c, K = world_to_camera.double(), K.double()
    R, t = w2c[:, :3, :3], w2c[:, :3, 3]
    centres = -(R.transpose(1, 2) @ t[..., None])[..., 0]
    jj = torch.arange(W, dtype=torch.float64, device=w2c.device) + 0.5
    ii = torch.arange(H, dtype=torch.float64, device=w2c.device) + 0.5
    y = (ii[None, :, None] - K[:, 1, 2, None, None]) / K[:, 1, 1, None, None]
    x = (jj[None, None, :] - K[:, 0, 2, None, None] - K[:, 0, 1, None, None] * y) / K[:, 0, 0, None, None]  # skew
    x, y = torch.broadcast_tensors(x, y)
    d = torch.stack([x, y, torch.ones_like(x)], -1)  # [C, H, W, 3] camera frame
    rays = torch.einsum("cji,chwj->chwi", R, d)  # R^T d
    return centres, rays


def _in_box(p: torch.Tensor, box_min: torch.Tensor, box_max: torch.Tensor, rotation: Optional[torch.Tensor]):
    q = p if rotation is None else p @ rotation.T
    return ((q >= box_min) & (q <= box_max)).all(-1)


#: How :func:`fit_floor_plane` judges the band's share: ``"lowest"`` = of all the lowest points (the rule before
#: 2026-12-06 session 25); ``"standing"`` = of the lowest points that do not stand clearly above the plane (more
#: than ``UNDER_OBJECT_HEIGHT × snap``: a bulky object's lower body, which fills the lowest third of a tight
#: region's height range: the H100 bunny_ground run's floor held 34 % of all the lowest points).
INLIER_RULES = ("lowest", "standing")


def fit_floor_plane(points: torch.Tensor, up, *, snap: float, max_tilt_deg: float = 5.0,
                    bottom_fraction: float = 0.35, iterations: int = 256, seed: int = 0,
                    inlier_rule: str = "lowest") -> tuple:
    """The floor under an object from points of its surface: ``(FloorPlane or None, note)``.

    Step 2 of the module docstring: RANSAC over the points in the lowest ``bottom_fraction`` of the height range
    along ``up`` (planes within ``max_tilt_deg`` of ``up``, inliers within ``INLIER_FRACTION × snap``), then the
    normal refitted by SVD on the (all) points within ``snap`` of the best plane and the offset their median height.
    None (with the reason) when there are fewer than ``MIN_PLANE_POINTS`` candidates, when the band holds less
    than ``MIN_INLIER_FRACTION`` of them, or when the refitted plane tilts more than ``max_tilt_deg``.

    Args:
        points: ``[N, 3]`` world points (any float dtype, any device).
        up: ``[3]`` world up (normalised here).
        snap: the band half-width (world units, > 0).
        max_tilt_deg, bottom_fraction, iterations, seed: see above.
        inlier_rule: what the band's share is taken of (:data:`INLIER_RULES`): ``"lowest"``, all the candidates;
            ``"standing"``, the candidates not higher than ``UNDER_OBJECT_HEIGHT × snap`` above the plane (what
            stands on a floor is not evidence against it; what lies below it or just above it is).

    Raises:
        MeshError: ``up`` not 3 finite numbers of non-zero length, ``snap`` not a positive number, or an unknown
            ``inlier_rule``.
    """
    from meshlift.errors import MeshError

    up = torch.as_tensor(up, dtype=torch.float64).reshape(-1).cpu()
    if up.shape != (3,) or not bool(torch.isfinite(up).all()) or float(up.norm()) < 1e-12:
        raise MeshError(f"fit_floor_plane(up): expected 3 finite numbers, not all zero; got {up.tolist()}")
    if not (math.isfinite(float(snap)) and float(snap) > 0):
        raise MeshError(f"fit_floor_plane(snap): expected a positive distance, got {snap!r}")
    if inlier_rule not in INLIER_RULES:
        raise MeshError(f"fit_floor_plane(inlier_rule): expected one of {INLIER_RULES}, got {inlier_rule!r}")
    up = up / up.norm()
    P = points.detach().double().cpu().reshape(-1, 3)
    if P.shape[0] < MIN_PLANE_POINTS:
        return None, f"only {P.shape[0]} depth points in the region of interest (< {MIN_PLANE_POINTS})"
    h = P @ up
    lo, hi = float(h.min()), float(h.max())
    cand = P[h <= lo + bottom_fraction * (hi - lo)]
    if cand.shape[0] < MIN_PLANE_POINTS:
        return None, f"only {cand.shape[0]} depth points near the bottom of the region (< {MIN_PLANE_POINTS})"
    cos_t = math.cos(math.radians(max_tilt_deg))
    band = INLIER_FRACTION * float(snap)
    g = torch.Generator().manual_seed(int(seed))
    idx = torch.randint(0, cand.shape[0], (iterations, 3), generator=g)
    tri = cand[idx]  # [I, 3, 3]
    nn = torch.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0], dim=-1)
    norm = nn.norm(dim=-1, keepdim=True)
    ok = norm[:, 0] > 1e-20
    nn = nn / norm.clamp_min(1e-30)
    nn = nn * torch.where(nn @ up < 0, -1.0, 1.0)[:, None]
    ok &= (nn @ up) >= cos_t
    if not bool(ok.any()):
        return None, f"RANSAC found no plane within {max_tilt_deg:g}° of up among the lowest depth points"
    nn, off = nn[ok], (nn[ok] * tri[ok, 0]).sum(-1)
    best, best_score = 0, -1
    for s in range(0, nn.shape[0], 64):  # [64, M] distances at a time
        score = ((cand @ nn[s:s + 64].T - off[s:s + 64]).abs() <= band).sum(0)
        i = int(score.argmax())
        if int(score[i]) > best_score:
            best, best_score = s + i, int(score[i])
    n, o = nn[best], float(off[best])
    for _ in range(2):  # refit on the snap band (all points: the candidates cut the band's top off): SVD, median
        inl = P[(P @ n - o).abs() <= float(snap)]
        if inl.shape[0] < 3:
            break
        mu = inl.mean(0)
        n2 = torch.linalg.svd(inl - mu, full_matrices=False).Vh[2]
        n2 = n2 * (1.0 if float(n2 @ up) >= 0 else -1.0)
        if float(n2 @ up) >= cos_t:
            n = n2
        o = float((inl @ n).median())
    hc = cand @ n - o
    inl = int((hc.abs() <= float(snap)).sum())
    judged = cand.shape[0] if inlier_rule == "lowest" else int((hc <= UNDER_OBJECT_HEIGHT * float(snap)).sum())
    frac = inl / max(1, judged)
    tilt = math.degrees(math.acos(max(-1.0, min(1.0, float(n @ up)))))
    if inl < MIN_PLANE_POINTS or frac < MIN_INLIER_FRACTION:
        of = "the lowest depth points" + ("" if inlier_rule == "lowest" else " not standing above it")
        return None, (f"the best floor plane holds {100 * frac:.0f}% of {of} within the snap "
                      f"band (< {100 * MIN_INLIER_FRACTION:.0f}%): no floor")
    if tilt > max_tilt_deg:
        return None, f"the floor plane tilts {tilt:.1f}° from up (> {max_tilt_deg:g}°): not snapped"
    return FloorPlane(n, o, tilt, frac), f"{100 * frac:.0f}% of the lowest depth points within the band"


#: The cover rules of :func:`floor_cover`: ``"open"`` (the default) and ``"footprint"`` (the rule before
#: 2026-12-06, kept for comparison: ``benchmarks/floor_snap_rerun.py``).
COVER_RULES = ("open", "footprint")


@dataclasses.dataclass
class FloorCover:
    """What :func:`floor_cover` measured for one plane, and its verdict."""

    accepted: bool = False
    floor_cover: float = 0.0
    """The cover the rule judged: ``"open"``, the share of the open cells (not under the object) holding points
    within ``snap`` of the plane; ``"footprint"``, the share of all the footprint cells."""
    footprint_cover: float = 0.0
    """Share of all the footprint cells holding points within ``snap`` of the plane."""
    cover_cell: float = 0.0
    """Side of the cells (world units)."""
    open_share: float = 1.0
    """Share of the footprint cells not under the object."""
    below_frac: float = 0.0
    """Share of the points more than ``BELOW_DEPTH × snap`` below the plane."""
    under: Optional[torch.Tensor] = None
    """``[nu, nv]`` bool: the cells under the object (``"open"`` rule; None otherwise)."""
    note: str = ""


def _plane_grid(normal: torch.Tensor, corners: torch.Tensor):
    """``(axes [3, 2], uv0 [2], uv1 [2])``: two in-plane axes of the plane with unit ``normal`` (float64) and
    the bounding rectangle, in those axes, of ``corners`` ``[M, 3]`` (the footprint; same device)."""
    n = normal.double()
    e = torch.linalg.svd(torch.eye(3, dtype=torch.float64) - torch.outer(n.cpu(), n.cpu())).U[:, :2].to(corners.device)
    uv = corners.double() @ e
    return e, uv.min(0).values, uv.max(0).values


def _cells(e, uv0, uv1, cell: float, tight: bool = False):
    """``(nu, nv, ij)``: square cells of side ``cell`` over the footprint ``uv0..uv1`` (``tight``: as many as it
    needs; else one more per axis, the grid of before 2026-12-06) and ``ij(points [..., 3])`` → the clamped
    ``(i, j)`` cell indices."""
    if tight:
        nu, nv = (max(1, math.ceil(float(x) - 1e-9)) for x in (uv1 - uv0) / cell)
    else:
        nu, nv = (int(x) + 1 for x in (uv1 - uv0) / cell)

    def ij(q):
        k = ((q @ e - uv0) / cell).floor().long()
        return k[..., 0].clamp(0, nu - 1), k[..., 1].clamp(0, nv - 1)
    return nu, nv, ij


def _connected(seed: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """The cells of ``allowed [nu, nv]`` bool reached from ``seed [nu, nv]`` bool through 8-neighbours in
    ``allowed`` (iterated dilation)."""
    grown = seed & allowed
    for _ in range(allowed.numel()):
        nxt = torch.nn.functional.max_pool2d(grown.float()[None, None], 3, stride=1, padding=1)[0, 0].bool() & allowed
        if torch.equal(nxt, grown):
            break
        grown = nxt
    return grown


def floor_cover(points: torch.Tensor, normal, offset: float, corners: torch.Tensor, center, *, snap: float,
                rule: str = "open") -> FloorCover:
    """Is the plane ``normal · p = offset`` a floor (a sheet under the object) or a rim, a strip, a shelf?

    Rule ``"open"`` (the default): the plane's footprint (the bounding rectangle, in the plane, of ``corners``
    projected onto it) is cut into square cells whose side gives about ``COVER_POINTS_PER_CELL`` of the points
    within ``snap`` of the plane per occupied cell (from their density; clamped to ``COVER_CELL_RANGE × snap``).
    The cells *under the object* — holding points higher than ``UNDER_OBJECT_HEIGHT × snap`` above the plane,
    none within ``snap`` of it, and 8-connected to such cells within one cell of ``center`` — are left out: a
    floor seen around an object is hidden under its footprint. The plane is accepted when the points within
    ``snap`` fall in at least ``MIN_OPEN_COVER`` of the remaining cells and at most ``MAX_BELOW_FRAC`` of all
    the points lie more than ``BELOW_DEPTH × snap`` below it (nothing is under a floor).

    Rule ``"footprint"`` (before 2026-12-06): cells of side ``COVER_CELL × snap``, accepted when the points within
    ``snap`` fall in ``MIN_FLOOR_COVER`` of all the footprint cells; nothing below is checked.

    Args:
        points: ``[N, 3]`` world points (the depth samples inside the region), any float dtype.
        normal: ``[3]`` unit plane normal (pointing up, away from the floor's underside); ``offset``: world units.
        corners: ``[M, 3]`` world points whose projections bound the footprint (the region's box corners).
        center: ``[3]`` world point near the object's middle (the region's centre).
        snap: band half-width (world units, > 0).
        rule: one of :data:`COVER_RULES`.

    Returns:
        A :class:`FloorCover` (computed on the CPU in float64).

    Raises:
        MeshError: ``rule`` unknown, ``snap`` not positive, or shapes that are not ``[N, 3]`` / ``[M, 3]`` / ``[3]``.
    """
    from meshlift.errors import MeshError

    if rule not in COVER_RULES:
        raise MeshError(f"floor_cover(rule): expected one of {COVER_RULES}, got {rule!r}")
    if not (math.isfinite(float(snap)) and float(snap) > 0):
        raise MeshError(f"floor_cover(snap): expected a positive distance, got {snap!r}")
    P = torch.as_tensor(points).detach().double().cpu()
    C = torch.as_tensor(corners).detach().double().cpu()
    n = torch.as_tensor(normal, dtype=torch.float64).reshape(-1).cpu()
    c0 = torch.as_tensor(center, dtype=torch.float64).reshape(-1).cpu()
    if P.ndim != 2 or P.shape[-1] != 3 or C.ndim != 2 or C.shape[-1] != 3 or C.shape[0] < 1 or n.shape != (3,) \
            or c0.shape != (3,):
        raise MeshError(f"floor_cover: expected points [N, 3], corners [M, 3], normal [3], center [3]; got "
                        f"{list(P.shape)}, {list(C.shape)}, {list(n.shape)}, {list(c0.shape)}")
    snap = float(snap)
    e, uv0, uv1 = _plane_grid(n, C)
    h = P @ n - float(offset)
    flat = h.abs() <= snap
    n_flat = int(flat.sum())
    out = FloorCover(below_frac=float((h < -BELOW_DEPTH * snap).double().mean()) if P.shape[0] else 0.0)

    def cells(cell: float):  # the "footprint" rule as before: one cell more than the footprint holds
        return _cells(e, uv0, uv1, cell, tight=rule != "footprint")

    def occupied(sel: torch.Tensor, nu: int, nv: int, ij) -> torch.Tensor:
        i, j = ij(P[sel])
        return torch.bincount(i * nv + j, minlength=nu * nv).reshape(nu, nv) > 0

    if rule == "footprint":
        out.cover_cell = COVER_CELL * snap
        nu, nv, ij = cells(out.cover_cell)
        out.footprint_cover = out.floor_cover = float(occupied(flat, nu, nv, ij).double().mean())
        out.accepted = out.floor_cover >= MIN_FLOOR_COVER
        if not out.accepted:
            out.note = (f"the plane's points cover {100 * out.floor_cover:.0f}% of the region's footprint (< "
                        f"{100 * MIN_FLOOR_COVER:.0f}%): a rim, not a floor")
        return out
    lo, hi = COVER_CELL_RANGE[0] * snap, COVER_CELL_RANGE[1] * snap
    if n_flat == 0:
        out.cover_cell = hi
        out.note = "no point within the snap band: not a floor"
        return out
    area = float((uv1 - uv0).clamp_min(lo).prod())
    cell = min(hi, max(lo, math.sqrt(COVER_POINTS_PER_CELL * area / n_flat)))
    nu, nv, ij = cells(cell)  # refine once with the area the band's points occupy at that size
    area = float(occupied(flat, nu, nv, ij).sum()) * cell * cell
    cell = min(hi, max(lo, math.sqrt(COVER_POINTS_PER_CELL * area / n_flat)))
    nu, nv, ij = cells(cell)
    out.cover_cell = cell
    has_flat = occupied(flat, nu, nv, ij)
    high = occupied(h > UNDER_OBJECT_HEIGHT * snap, nu, nv, ij) & ~has_flat
    ci, cj = ij(c0[None])
    seed = torch.zeros(nu, nv, dtype=torch.bool)
    seed[max(0, int(ci) - 1): int(ci) + 2, max(0, int(cj) - 1): int(cj) + 2] = True
    under = _connected(seed, high)
    open_ = ~under
    out.under = under
    out.footprint_cover = float(has_flat.double().mean())
    out.open_share = float(open_.double().mean())
    out.floor_cover = float((has_flat & open_).sum()) / max(1, int(open_.sum()))
    if out.floor_cover < MIN_OPEN_COVER:
        out.note = (f"the plane's points cover {100 * out.floor_cover:.0f}% of the region's footprint outside the "
                    f"object's ({100 * out.open_share:.0f}% of it; < {100 * MIN_OPEN_COVER:.0f}%): a rim or a "
                    "strip, not a floor")
    elif out.below_frac > MAX_BELOW_FRAC:
        out.note = (f"{100 * out.below_frac:.1f}% of the region's points lie more than {BELOW_DEPTH:g} × the snap "
                    f"band below the plane (> {100 * MAX_BELOW_FRAC:.0f}%): something is under it, not a floor")
    else:
        out.accepted = True
    return out


@torch.no_grad()
def snap_floor_depths(depths: torch.Tensor, world_to_camera: torch.Tensor, K: torch.Tensor, roi, *, snap: float,
                      max_tilt_deg: float = 5.0, max_samples: int = 200_000, chunk_views: int = 8,
                      device: Optional[torch.device] = None, seed: int = 0, cover_rule: str = "open",
                      inlier_rule: str = "lowest") -> tuple:
    """``(depths, FloorPlane or None, FloorSnapReport)``: the depth maps with the floor under the object flattened
    onto one plane (module docstring); the input is not modified (a copy is returned when something moved).

    Args:
        depths: ``[V, H, W]`` float camera z, 0 = empty (any device; the result is on the same device).
        world_to_camera: ``[V, 4, 4]`` OpenCV world-to-camera; ``K``: ``[V, 3, 3]`` pixels.
        roi: a :class:`meshlift.data.roi.RegionOfInterest` (its box, ``rotation`` and ``up``): only samples
            inside it are fitted and moved.
        snap: band half-width in world units (> 0).
        max_tilt_deg: the plane's largest angle from ``roi.up``.
        max_samples: points sampled for the plane fit (spread over the views).
        chunk_views: views back-projected at a time; ``device``: where (default: the depths' device).
        cover_rule: how the plane is judged a floor (:func:`floor_cover`, one of :data:`COVER_RULES`).
        inlier_rule: what the fit's band share is taken of (:func:`fit_floor_plane`, one of :data:`INLIER_RULES`).

    Raises:
        MeshError: shapes that do not match, or a bad ``snap`` / ``roi.up`` / ``cover_rule``.
    """
    import time

    from meshlift.errors import MeshError

    t0 = time.perf_counter()
    rep = FloorSnapReport(snap=float(snap), cover_rule=cover_rule)
    if depths.ndim != 3:
        raise MeshError(f"snap_floor_depths(depths): expected [V, H, W], got {list(depths.shape)}")
    V, H, W = depths.shape
    if tuple(world_to_camera.shape) != (V, 4, 4) or tuple(K.shape) != (V, 3, 3):
        raise MeshError(f"snap_floor_depths: world_to_camera {list(world_to_camera.shape)} and K {list(K.shape)} must "
                        f"be [{V}, 4, 4] and [{V}, 3, 3] for {V} depth maps")
    if not (math.isfinite(float(snap)) and float(snap) > 0):
        raise MeshError(f"snap_floor_depths(snap): expected a positive distance, got {snap!r}")
    if cover_rule not in COVER_RULES:
        raise MeshError(f"snap_floor_depths(cover_rule): expected one of {COVER_RULES}, got {cover_rule!r}")
    dev = depths.device if device is None else torch.device(device)
    box_min, box_max = roi.box_min.double().to(dev), roi.box_max.double().to(dev)
    rot = None if roi.rotation is None else roi.rotation.double().to(dev)
    up = torch.as_tensor(roi.up, dtype=torch.float64).reshape(-1)

    def chunks():
        for s in range(0, V, chunk_views):
            e = min(V, s + chunk_views)
            c, r = _camera_rays(world_to_camera[s:e].to(dev), K[s:e].to(dev), H, W)
            z = depths[s:e].to(dev).double()
            p = c[:, None, None, :] + z[..., None] * r
            yield s, e, z, c, r, p, (z > 0) & _in_box(p, box_min, box_max, rot)

    # 1. samples for the fit
    n_valid = int((depths > 0).sum())
    keep = max(1, int(max_samples))
    g = torch.Generator().manual_seed(int(seed))
    pts = []
    for s, e, z, c, r, p, m in chunks():
        q = p[m]
        if q.shape[0] > keep * (e - s) // V + 1:
            q = q[torch.randperm(q.shape[0], generator=g)[: keep * (e - s) // V + 1].to(q.device)]
        pts.append(q.cpu())
    pts = torch.cat(pts) if pts else torch.zeros(0, 3, dtype=torch.float64)
    plane, note = fit_floor_plane(pts, up, snap=snap, max_tilt_deg=max_tilt_deg, seed=seed, inlier_rule=inlier_rule)
    if plane is None:
        rep.notes.append(note + "; the depth maps are unchanged")
        rep.seconds = time.perf_counter() - t0
        return depths, None, rep
    n = plane.normal.to(dev)
    rep.normal, rep.offset = [float(x) for x in plane.normal], float(plane.offset)
    rep.tilt_deg, rep.inlier_frac = plane.tilt_deg, plane.inlier_frac
    rep.notes.append(note)

    # floor cells: squares in the plane over the region's footprint
    corners = torch.stack(torch.meshgrid(*[torch.stack([box_min[i], box_max[i]]) for i in range(3)],
                                         indexing="ij"), -1).reshape(-1, 3)
    corners = corners if rot is None else corners @ rot  # box frame -> world (rows of rotation = box axes)
    e1, uv0, uv1 = _plane_grid(plane.normal, corners)

    def grid(cell: float):
        nu, nv, ij = _cells(e1, uv0, uv1, cell)

        def cell_of(p):
            i, j = ij(p)
            return i * nv + j
        return nu, nv, cell_of

    # a floor is a sheet around the object, not a rim, a strip or a shelf with something under it (floor_cover)
    cov = floor_cover(pts, plane.normal, plane.offset, corners.cpu(), roi.center, snap=snap, rule=cover_rule)
    rep.floor_cover, rep.footprint_cover, rep.cover_cell = cov.floor_cover, cov.footprint_cover, cov.cover_cell
    rep.open_share, rep.below_frac = cov.open_share, cov.below_frac
    if not cov.accepted:
        rep.notes.append(cov.note + "; the depth maps are unchanged")
        rep.seconds = time.perf_counter() - t0
        return depths, None, rep
    rep.found = True

    # 3. floor cells where something rises through the protect band: samples of two views in each half of it,
    # counted over the cell's 3 x 3 neighbourhood (sparse pixels, walls that lean)
    nu, nv, cell_of = grid(PROTECT_CELL * float(snap))
    halves = ((1.0, 0.5 * (1.0 + PROTECT_BAND)), (0.5 * (1.0 + PROTECT_BAND), PROTECT_BAND))
    count = torch.zeros(len(halves), nu * nv, dtype=torch.float32)
    seen = torch.zeros(len(halves), V, nu * nv, dtype=torch.bool)
    for s, e, z, c, r, p, m in chunks():  # one pass over the views for both halves
        h = p @ n - plane.offset
        for k, (lo_k, hi_k) in enumerate(halves):
            sub = m & (h > lo_k * snap) & (h <= hi_k * snap)
            ids = cell_of(p[sub]).cpu()
            view = torch.arange(s, e)[:, None, None].expand(z.shape)[sub.cpu()]
            count[k] += torch.bincount(ids, minlength=nu * nv).float()
            seen[k, view, ids] = True
    protected = torch.ones(nu, nv, dtype=torch.bool)
    for k in range(len(halves)):
        pool = torch.nn.functional.max_pool2d(seen[k].float().reshape(V, 1, nu, nv), 3, stride=1, padding=1)
        views_per = pool.sum(0).reshape(nu, nv)
        near_count = 9 * torch.nn.functional.avg_pool2d(count[k].reshape(1, 1, nu, nv), 3, stride=1, padding=1,
                                                        count_include_pad=True).reshape(nu, nv)
        protected &= (near_count >= MIN_PROTECT_SAMPLES - 0.5) & (views_per >= 2)
    # the skirt band (above the snap band) keeps one more cell around a protected one (a wall's sparse corners)
    wide = torch.nn.functional.max_pool2d(protected.float()[None, None], 3, stride=1, padding=1)[0, 0] > 0
    protected, wide = protected.reshape(-1).to(dev), wide.reshape(-1).to(dev)
    rep.protected_cells = int(protected.sum())

    # 4. snap
    out = depths.clone()
    moved = 0
    for s, e, z, c, r, p, m in chunks():
        h = p @ n - plane.offset
        nr = r @ n
        nc_ = (c @ n)[:, None, None]
        z_new = (plane.offset - nc_) / torch.where(nr.abs() > 1e-9, nr, torch.ones_like(nr))
        ids = cell_of(p)
        band = ((h <= 0) & (h >= -snap)) | ((h.abs() <= snap) & ~protected[ids])
        band = m & (nr.abs() > 1e-9) & (z_new > 0) & (band | ((h.abs() <= SKIRT_BAND * snap) & ~wide[ids]))
        moved += int(band.sum())
        out[s:e] = torch.where(band, z_new, z).to(out.dtype).to(out.device)
    rep.snapped_frac = moved / max(1, n_valid)
    rep.seconds = time.perf_counter() - t0
    return out, plane, rep
