"""``floor_snap``: the floor in the depth maps flattened onto one plane before the asset's fusion
(:mod:`meshlift.methods.milo.floor_depth`), on analytic depth maps of a box standing on a bumpy floor."""

from __future__ import annotations

import math

import pytest
import torch

from meshlift.data.roi import RegionOfInterest
from meshlift.errors import MeshError
from meshlift.methods.milo.floor_depth import fit_floor_plane, snap_floor_depths

D = torch.float64
BOX = (torch.tensor([-0.3, 0.0, -0.3], dtype=D), torch.tensor([0.3, 0.6, 0.3], dtype=D))


def _cameras(n=12, size=48, radius=2.5):
    """OpenCV cameras on two rings (elevations 25° and 45°) looking at (0, 0.3, 0)."""
    w2c, Ks = [], []
    target = torch.tensor([0.0, 0.3, 0.0], dtype=D)
    for i in range(n):
        el, az = math.radians(25 if i % 2 else 45), 2 * math.pi * i / n
        eye = target + radius * torch.tensor([math.cos(el) * math.sin(az), math.sin(el), math.cos(el) * math.cos(az)], dtype=D)
        f = torch.nn.functional.normalize(target - eye, dim=0)
        r = torch.nn.functional.normalize(torch.linalg.cross(f, torch.tensor([0.0, 1.0, 0.0], dtype=D)), dim=0)
        d = torch.linalg.cross(f, r)
        R = torch.stack([r, d, f])
        m = torch.eye(4, dtype=D)
        m[:3, :3], m[:3, 3] = R, -R @ eye
        w2c.append(m)
        Ks.append(torch.tensor([[size, 0, size / 2], [0, size, size / 2], [0, 0, 1]], dtype=D))
    return torch.stack(w2c), torch.stack(Ks)


def _rays(w2c, K, size):
    R, t = w2c[:, :3, :3], w2c[:, :3, 3]
    c = -(R.transpose(1, 2) @ t[..., None])[..., 0]
    jj = torch.arange(size, dtype=D) + 0.5
    x = ((jj[None, None, :] - K[:, 0, 2, None, None]) / K[:, 0, 0, None, None]).expand(-1, size, -1)
    y = ((jj[None, :, None] - K[:, 1, 2, None, None]) / K[:, 1, 1, None, None]).expand(-1, -1, size)
    d = torch.stack([x, y, torch.ones_like(x)], -1)
    return c, torch.einsum("cji,chwj->chwi", R, d)  # rays with unit camera z: depth = ray parameter


def _scene(size=48, floor=True, bumps=0.03):
    """``(depth [V, H, W] float32, hit [V, H, W] 0 none / 1 floor / 2 box, w2c, K)``: a box on a floor whose
    depth samples are bumped off y = 0 by up to ``bumps`` (a blotchy fused floor)."""
    w2c, K = _cameras(size=size)
    c, r = _rays(w2c, K, size)
    o = c[:, None, None, :].expand_as(r)
    inv = 1.0 / torch.where(r.abs() < 1e-12, torch.full_like(r, 1e-12), r)
    t0, t1 = (BOX[0] - o) * inv, (BOX[1] - o) * inv
    tn, tf = torch.minimum(t0, t1).amax(-1), torch.maximum(t0, t1).amin(-1)
    box_hit = (tn <= tf) & (tf > 0)
    t_floor = -o[..., 1] / torch.where(r[..., 1] < 0, r[..., 1], -torch.ones_like(r[..., 1]))
    floor_hit = (r[..., 1] < 0) & torch.full_like(box_hit, floor)
    p = o + t_floor[..., None] * r
    h = bumps * torch.sin(7 * p[..., 0]) * torch.cos(5 * p[..., 2])  # bumped floor sample heights
    t_floor = (h - o[..., 1]) / torch.where(r[..., 1] < 0, r[..., 1], -torch.ones_like(r[..., 1]))
    depth = torch.zeros_like(tn)
    hit = torch.zeros(tn.shape, dtype=torch.long)
    depth = torch.where(floor_hit, t_floor, depth)
    hit[floor_hit] = 1
    on_box = box_hit & (~floor_hit | (tn < t_floor))
    depth = torch.where(on_box, tn, depth)
    hit[on_box] = 2
    return depth.float(), hit, w2c, K


def _roi():
    return RegionOfInterest(box_min=torch.tensor([-1.0, -0.2, -1.0], dtype=D), box_max=torch.tensor([1.0, 1.0, 1.0], dtype=D),
                            center=torch.tensor([0.0, 0.3, 0.0], dtype=D), up=torch.tensor([0.0, 1.0, 0.0], dtype=D),
                            source="explicit")


def _heights(depth, w2c, K):
    c, r = _rays(w2c, K, depth.shape[-1])
    return (c[:, None, None, :] + depth.double()[..., None] * r)


def test_the_floor_is_flattened_and_the_box_is_untouched():
    depth, hit, w2c, K = _scene()
    snap = 0.08
    out, plane, rep = snap_floor_depths(depth, w2c, K, _roi(), snap=snap)
    assert plane is not None and rep.found, rep
    assert rep.tilt_deg < 1.0 and abs(plane.offset) < 0.01, rep
    p = _heights(out, w2c, K)
    h = p @ plane.normal - plane.offset
    p0 = _heights(depth, w2c, K)
    roi = _roi()
    inside = ((p0 >= roi.box_min) & (p0 <= roi.box_max)).all(-1)
    floor = (hit == 1) & inside
    # every floor sample inside the region within the band (the bumps are ±0.03) now lies on the plane, but those
    # in the cells at the box's foot (protected: the box's sides stand there, within about two protect cells of snap / 4) ...
    away = (p0[..., [0, 2]].abs() - 0.3).amax(-1) > snap
    assert float(h[floor & away].abs().max()) < 1e-5
    assert float((h[floor].abs() < 1e-5).double().mean()) > 0.95
    assert rep.snapped_frac > 0.2 and 0.5 < rep.floor_cover <= 1.0  # (of all non-empty pixels, also outside)
    # ... outside the region nothing moved, and the box's samples (its sides down to the floor) kept their depth
    assert torch.equal(out[hit == 2], depth[hit == 2])
    low_side = (hit == 2) & (_heights(depth, w2c, K)[..., 1] < snap)
    assert int(low_side.sum()) > 20 and rep.protected_cells > 0
    assert torch.equal(out[~inside], depth[~inside])
    assert torch.equal(out[hit == 0], depth[hit == 0])
    assert depth.dtype == out.dtype and out.shape == depth.shape


def test_without_protection_the_bottom_of_the_box_would_move(monkeypatch):
    """The protection is what keeps the box's base: with no cell protected, the samples of the box's sides within
    the band are moved onto the floor behind them (which the fusion would then carve away)."""
    from meshlift.methods.milo import floor_depth

    depth, hit, w2c, K = _scene()
    out, plane, rep = snap_floor_depths(depth, w2c, K, _roi(), snap=0.08)
    assert not bool((out != depth)[hit == 2].any())
    monkeypatch.setattr(floor_depth, "MIN_PROTECT_SAMPLES", 10 ** 9)
    out2, _, rep2 = snap_floor_depths(depth, w2c, K, _roi(), snap=0.08)
    low = (hit == 2) & (_heights(depth, w2c, K)[..., 1] < 0.08)
    assert rep2.protected_cells == 0 and bool((out2 != depth)[low].all())


@pytest.mark.parametrize("bumps", [0.12, 0.2])
def test_a_blotch_above_the_band_does_not_protect_itself(bumps):
    """Floor bumps that poke out of a ±0.08 band: where nothing rises through the protect band, everything up to
    SKIRT_BAND × the band is snapped (0.12: all of them); what is higher keeps its depth (0.2)."""
    from meshlift.methods.milo.floor_depth import SKIRT_BAND

    depth, hit, w2c, K = _scene(bumps=bumps)
    snap = 0.08
    out, plane, rep = snap_floor_depths(depth, w2c, K, _roi(), snap=snap)
    assert plane is not None
    p0 = _heights(depth, w2c, K)
    roi = _roi()
    inside = ((p0 >= roi.box_min) & (p0 <= roi.box_max)).all(-1)
    away = (p0[..., [0, 2]].abs() - 0.3).amax(-1) > 2 * snap  # (protected cells and their neighbours)
    h0 = p0 @ plane.normal - plane.offset
    h = _heights(out, w2c, K) @ plane.normal - plane.offset
    sel = (hit == 1) & inside & away
    low = sel & (h0.abs() <= snap)
    assert float((h[low].abs() < 1e-5).double().mean()) > 0.97
    if bumps < SKIRT_BAND * snap:
        assert float(h[sel].abs().max()) < 1e-5
    else:
        top = sel & (h0 > SKIRT_BAND * snap)
        assert int(top.sum()) > 0 and torch.equal(out[top], depth[top])
    # the box above the plane is untouched (below it, by the plane's error, it is snapped: nothing stands under a floor)
    # but for at most a few pixels on its vertical corner edges (|x| = 0.3, |z| ~ 0.29, under 0.08 high: torch
    # 2.13 / numpy 2.4 on 2 cores moved 3 and 2 of ~2,500; a missing protection would move hundreds)
    above = (hit == 2) & (h0 > 0)
    moved = (out != depth) & above
    assert int(moved.sum()) <= 0.002 * int(above.sum()), (int(moved.sum()), plane.offset, rep)
    assert bool(((p0[..., [0, 2]].abs() - 0.3).abs().amin(-1) < 0.01)[moved].all())  # on the box's corner edges


def test_no_floor_means_no_change_and_a_note():
    depth, hit, w2c, K = _scene(floor=False)
    out, plane, rep = snap_floor_depths(depth, w2c, K, _roi(), snap=0.08)
    assert plane is None and not rep.found and out is depth
    assert rep.notes and "unchanged" in rep.notes[-1]
    # an empty view set: no points at all
    out, plane, rep = snap_floor_depths(torch.zeros_like(depth), w2c, K, _roi(), snap=0.08)
    assert plane is None and "depth points" in rep.notes[-1]


def test_a_tilted_floor_is_not_snapped():
    depth, hit, w2c, K = _scene(bumps=0.0)
    roi = _roi()
    tilt = math.radians(12.0)
    roi.up = torch.tensor([math.sin(tilt), math.cos(tilt), 0.0], dtype=D)  # the region's up disagrees by 12°
    out, plane, rep = snap_floor_depths(depth, w2c, K, roi, snap=0.08)
    assert plane is None and out is depth


def test_fit_floor_plane_and_bad_input():
    g = torch.Generator().manual_seed(0)
    xz = torch.rand(2000, 2, generator=g, dtype=D) * 2 - 1
    pts = torch.stack([xz[:, 0], 0.5 + 0.01 * torch.randn(2000, generator=g, dtype=D), xz[:, 1]], -1)
    plane, note = fit_floor_plane(pts, [0, 1, 0], snap=0.05)
    assert plane is not None and abs(plane.offset - 0.5) < 0.005 and float(plane.normal[1]) > 0.999, note
    with pytest.raises(MeshError, match="up"):
        fit_floor_plane(pts, [0, 0, 0], snap=0.05)
    with pytest.raises(MeshError, match="snap"):
        fit_floor_plane(pts, [0, 1, 0], snap=0.0)
    depth, _, w2c, K = _scene(size=16)
    with pytest.raises(MeshError, match="depth maps"):
        snap_floor_depths(depth, w2c[:3], K, _roi(), snap=0.1)
    with pytest.raises(MeshError, match="snap"):
        snap_floor_depths(depth, w2c, K, _roi(), snap=-1.0)


def test_standing_rule_accepts_a_floor_under_a_bulky_object_and_not_points_below():
    """A sphere-like body fills the lowest third of the height range: the floor band holds 1/4 of the lowest points
    ("lowest" rejects) but all of those not standing above it ("standing" accepts); under "standing" a layer of
    points under the plane counts against it."""
    g = torch.Generator().manual_seed(1)
    xz = torch.rand(600, 2, generator=g, dtype=D) * 2 - 1
    floor = torch.stack([xz[:, 0], 0.005 * torch.randn(600, generator=g, dtype=D), xz[:, 1]], -1)
    d = torch.nn.functional.normalize(torch.randn(8000, 3, generator=g, dtype=D), dim=1)
    body = d * 0.9 + torch.tensor([0.0, 0.95, 0.0], dtype=D)  # touches the floor at y = 0.05, top at 1.85
    pts = torch.cat([floor, body])
    snap = 0.05
    plane, note = fit_floor_plane(pts, [0, 1, 0], snap=snap, inlier_rule="lowest")
    assert plane is None and "of the lowest depth points" in note
    plane, note = fit_floor_plane(pts, [0, 1, 0], snap=snap, inlier_rule="standing")
    assert plane is not None and abs(plane.offset) < 0.005, note
    under = floor.clone()
    under[:, 1] -= 0.4  # as many points 8 snaps under the floor: a shelf, not a floor
    plane, note = fit_floor_plane(torch.cat([pts, under]), [0, 1, 0], snap=snap, inlier_rule="standing")
    assert plane is None or abs(plane.offset) > 0.1, note
    with pytest.raises(MeshError, match="inlier_rule"):
        fit_floor_plane(pts, [0, 1, 0], snap=snap, inlier_rule="most")


def test_support_cut_at_a_known_plane():
    import trimesh

    from meshlift.mesh.support_plane import remove_support_plane
    from meshlift.structures.mesh import Mesh

    obj = trimesh.creation.box(extents=(0.6, 0.6, 0.6))
    obj.apply_translation((0, 0.3, 0))
    floor = trimesh.creation.box(extents=(2.0, 0.02, 2.0))
    both = trimesh.util.concatenate([obj, floor]).subdivide().subdivide()
    m = Mesh(v_pos=torch.tensor(both.vertices, dtype=torch.float32), t_pos_idx=torch.tensor(both.faces))
    out, rep = remove_support_plane(m, [0, 1, 0], distance=0.02, cut_offset=0.02, plane=([0.0, -2.0, 0.0], -0.02))
    assert rep.found and rep.normal[1] == pytest.approx(1.0) and rep.offset == pytest.approx(0.01)
    assert float(out.v_pos[:, 1].min()) >= 0.03 - 1e-5 and out.num_faces > 0
    with pytest.raises(MeshError, match="plane"):
        remove_support_plane(m, [0, 1, 0], plane=([0.0, 0.0, 0.0], 0.0))


def test_config_field():
    from meshlift.errors import ConfigError
    from meshlift.methods.milo.config import apply_dict, field_docs
    from meshlift.methods.milo.presets import get_preset

    cfg = get_preset("verylowres")
    assert cfg.floor_snap == 0.08 and "floor" in field_docs()["floor_snap"]
    assert apply_dict(cfg, {"floor_snap": "0"}).floor_snap == 0.0
    with pytest.raises(ConfigError, match="floor_snap"):
        apply_dict(cfg, {"floor_snap": "-0.1"})


# floor_cover: is the fitted plane a floor? (points in a 2 x 2 region, y up, snap 0.1)
CORNERS = torch.tensor([[x, y, z] for x in (-1.0, 1.0) for y in (-0.5, 1.5) for z in (-1.0, 1.0)], dtype=D)
UP = torch.tensor([0.0, 1.0, 0.0], dtype=D)
CENTRE = torch.tensor([0.0, 0.5, 0.0], dtype=D)


def _floor_around_object(n=20_000, radius=0.92, seed=0):
    """Floor points on y = 0 (±0.02) in [-1, 1]², none under a cylinder of ``radius`` around the centre (hidden
    by it), and the cylinder's side (y 0 … 1) and top (y = 1): an object-on-ground capture, its footprint ~66 %."""
    g = torch.Generator().manual_seed(seed)
    xz = torch.rand(n, 2, generator=g, dtype=D) * 2 - 1
    xz = xz[xz.norm(dim=-1) > radius]
    floor = torch.stack([xz[:, 0], 0.02 * (2 * torch.rand(len(xz), generator=g, dtype=D) - 1), xz[:, 1]], -1)
    a = 2 * math.pi * torch.rand(4000, generator=g, dtype=D)
    side = torch.stack([radius * torch.cos(a), torch.rand(4000, generator=g, dtype=D), radius * torch.sin(a)], -1)
    rr, b = radius * torch.rand(8000, generator=g, dtype=D).sqrt(), 2 * math.pi * torch.rand(8000, generator=g, dtype=D)
    top = torch.stack([rr * torch.cos(b), torch.ones(8000, dtype=D), rr * torch.sin(b)], -1)
    return torch.cat([floor, side, top])


def test_floor_cover_accepts_a_floor_with_the_object_footprint_hidden():
    from meshlift.methods.milo.floor_depth import MIN_FLOOR_COVER, MIN_OPEN_COVER, floor_cover

    pts = _floor_around_object()
    old = floor_cover(pts, UP, 0.0, CORNERS, CENTRE, snap=0.1, rule="footprint")
    assert not old.accepted and old.floor_cover < MIN_FLOOR_COVER and "rim" in old.note  # the bob_ground failure
    cov = floor_cover(pts, UP, 0.0, CORNERS, CENTRE, snap=0.1)
    assert cov.accepted and cov.floor_cover >= MIN_OPEN_COVER and cov.below_frac == 0.0, cov
    assert 0.05 - 1e-9 <= cov.cover_cell <= 0.2 + 1e-9
    assert 0.3 < cov.open_share < 0.6 and cov.footprint_cover < cov.floor_cover


def test_floor_cover_excludes_the_cells_under_the_object_only():
    """Under the object: high points, no floor points, connected to the centre. A second block in a corner with no
    floor under it is not connected to the centre: its cells stay in the denominator, uncovered."""
    from meshlift.methods.milo.floor_depth import floor_cover

    radius = 0.5
    pts = _floor_around_object(radius=radius)
    corner = (pts[:, 0] > 0.6) & (pts[:, 2] > 0.6)
    g = torch.Generator().manual_seed(1)
    block = torch.cat([0.6 + 0.4 * torch.rand(3000, 1, generator=g, dtype=D), 0.5 + torch.zeros(3000, 1, dtype=D),
                       0.6 + 0.4 * torch.rand(3000, 1, generator=g, dtype=D)], 1)[:, [0, 1, 2]]
    pts = torch.cat([pts[~corner], block])
    cov = floor_cover(pts, UP, 0.0, CORNERS, CENTRE, snap=0.1)
    c = cov.cover_cell
    nu, nv = cov.under.shape
    u = -1.0 + (torch.arange(nu, dtype=D) + 0.5) * c  # cell centres (the in-plane axes are x, z up to sign)
    v = -1.0 + (torch.arange(nv, dtype=D) + 0.5) * c
    r = (u[:, None] ** 2 + v[None, :] ** 2).sqrt()
    assert bool(cov.under[r < radius - 1.5 * c].all())  # the footprint's inside, every cell
    assert not bool(cov.under[r > radius + 1.5 * c].any())  # nothing beyond it (the corner block included)
    far = (u[:, None].abs() > 0.6 + 1.5 * c) & (v[None, :].abs() > 0.6 + 1.5 * c)
    assert not bool(cov.under[far].any())
    assert cov.accepted and cov.floor_cover < 0.97  # the corner block's cells count as uncovered


def test_floor_cover_rejects_a_wall_strip_and_a_blob():
    from meshlift.methods.milo.floor_depth import floor_cover

    g = torch.Generator().manual_seed(2)
    y = torch.rand(20_000, generator=g, dtype=D)
    wall = torch.stack([0.6 + 0.3 * y, y, 2 * torch.rand(20_000, generator=g, dtype=D) - 1], -1)  # leaning wall
    cov = floor_cover(wall, UP, 0.0, CORNERS, CENTRE, snap=0.1)
    assert not cov.accepted and cov.floor_cover < 0.2 and "strip" in cov.note, cov
    blob = 0.3 * torch.randn(20_000, 3, generator=g, dtype=D) + CENTRE
    blob = blob[blob[:, 1] >= 0]  # a cloud with its lowest points on the plane
    cov = floor_cover(blob, UP, 0.0, CORNERS, CENTRE, snap=0.1)
    assert not cov.accepted and cov.floor_cover < 0.5, cov
    cov = floor_cover(wall[:0], UP, 0.0, CORNERS, CENTRE, snap=0.1)  # no points at all
    assert not cov.accepted


@pytest.mark.parametrize("share, accepted", [(0.02, True), (0.12, False)])
def test_floor_cover_rejects_a_plane_with_points_below(share, accepted):
    """A shelf or a table top with a floor under it: a floor has nothing below it."""
    from meshlift.methods.milo.floor_depth import MAX_BELOW_FRAC, floor_cover

    pts = _floor_around_object()
    g = torch.Generator().manual_seed(3)
    k = int(share * len(pts) / (1 - share))
    low = torch.cat([2 * torch.rand(k, 1, generator=g, dtype=D) - 1, torch.full((k, 1), -0.5, dtype=D),
                     2 * torch.rand(k, 1, generator=g, dtype=D) - 1], 1)
    cov = floor_cover(torch.cat([pts, low]), UP, 0.0, CORNERS, CENTRE, snap=0.1)
    assert cov.below_frac == pytest.approx(share, abs=0.005)
    assert cov.accepted is accepted and (accepted or ("below" in cov.note and cov.below_frac > MAX_BELOW_FRAC))


def test_floor_cover_bad_input():
    from meshlift.methods.milo.floor_depth import floor_cover

    pts = _floor_around_object(n=500)
    with pytest.raises(MeshError, match="rule"):
        floor_cover(pts, UP, 0.0, CORNERS, CENTRE, snap=0.1, rule="area")
    with pytest.raises(MeshError, match="snap"):
        floor_cover(pts, UP, 0.0, CORNERS, CENTRE, snap=0.0)
    with pytest.raises(MeshError, match="points"):
        floor_cover(pts[:, :2], UP, 0.0, CORNERS, CENTRE, snap=0.1)
    depth, _, w2c, K = _scene(size=16)
    with pytest.raises(MeshError, match="cover_rule"):
        snap_floor_depths(depth, w2c, K, _roi(), snap=0.1, cover_rule="area")
