"""meshlift.mesh.uv: xatlas unwrap (UV range, chart overlap, face preservation, decimation above the limit)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
import trimesh

from meshlift.errors import MeshError
from meshlift.mesh.bake import rasterize_uv_reference
from meshlift.mesh.uv import DecimationWarning, unwrap
from meshlift.structures.mesh import Material, Mesh


def _mesh(tm: trimesh.Trimesh) -> Mesh:
    return Mesh(
        v_pos=torch.tensor(tm.vertices, dtype=torch.float32),
        t_pos_idx=torch.tensor(tm.faces, dtype=torch.int64),
    )


def _sphere(subdiv=3) -> Mesh:
    return _mesh(trimesh.creation.icosphere(subdivisions=subdiv))


def _torus() -> Mesh:
    return _mesh(trimesh.creation.torus(1.0, 0.35, major_sections=40, minor_sections=20))


def _uv_signed_areas(m: Mesh) -> torch.Tensor:
    uv = m.v_tex[m.t_tex_idx].double()
    e1, e2 = uv[:, 1] - uv[:, 0], uv[:, 2] - uv[:, 0]
    return 0.5 * (e1[:, 0] * e2[:, 1] - e1[:, 1] * e2[:, 0])


def _uv_charts(m: Mesh) -> np.ndarray:
    """Chart label per face: connected components of faces sharing a UV vertex."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    t = m.t_tex_idx.numpy()
    faces = np.repeat(np.arange(t.shape[0]), 3)
    inc = coo_matrix((np.ones(faces.size), (faces, t.reshape(-1))), shape=(t.shape[0], m.v_tex.shape[0]))
    _, label = connected_components(inc @ inc.T, directed=False)
    return label


@pytest.mark.parametrize("pieces", [None, 3], ids=["auto", "3pieces"])
@pytest.mark.parametrize("make", [_sphere, _torus], ids=["sphere", "torus"])
def test_unwrap_valid_atlas(make, pieces):
    """One atlas whether xatlas gets the mesh whole (these meshes are under one piece's face count) or as
    three slabs (mesh/_xatlas_job.py): the checks below hold for both."""
    mesh = make()
    before = (mesh.v_pos.clone(), mesh.t_pos_idx.clone())
    out = unwrap(mesh, resolution=256, padding=2, pieces=pieces)
    assert out.extras["uv_unwrap"]["pieces"] == (pieces or 1)
    # input untouched, output new, positions and faces kept below the limit
    assert torch.equal(mesh.v_pos, before[0]) and torch.equal(mesh.t_pos_idx, before[1])
    assert mesh.v_tex is None and out is not mesh
    assert torch.equal(out.v_pos, mesh.v_pos) and torch.equal(out.t_pos_idx, mesh.t_pos_idx)
    assert out.t_tex_idx.shape == out.t_pos_idx.shape and out.t_tex_idx.dtype == torch.int64
    assert out.v_tex.dtype == torch.float32 and out.v_tex.shape[1] == 2
    assert int(out.t_tex_idx.max()) < out.v_tex.shape[0]
    # every UV in [0, 1]
    assert float(out.v_tex.min()) >= 0.0 and float(out.v_tex.max()) <= 1.0
    # seams exist but each face's 3D corners map to one UV each: more UV vertices than positions
    assert out.v_tex.shape[0] >= mesh.num_vertices
    # charts do not overlap: rasterised coverage counts (texel centres inside > 1 triangle) are rare
    _, _, count = rasterize_uv_reference(out.v_tex, out.t_tex_idx, 256)
    covered = int((count > 0).sum())
    overlap = int((count > 1).sum())
    assert covered > 0.35 * 256 * 256, f"atlas fills only {covered / 256**2:.2f} of the texture"
    assert overlap <= 0.002 * covered, f"{overlap} of {covered} texels covered twice"
    # no degenerate or folded UV triangles: within each chart (faces connected through shared UV
    # vertices) every face has the same orientation (xatlas may mirror a whole chart)
    area = _uv_signed_areas(out)
    assert int((area.abs() < 1e-12).sum()) == 0
    chart = _uv_charts(out)
    flipped = 0
    for c in np.unique(chart):
        sign = (area[torch.from_numpy(chart == c)] > 0).numpy()
        flipped += min(int(sign.sum()), int((~sign).sum()))
    assert flipped == 0
    assert len(np.unique(chart)) == out.extras["uv_unwrap"]["charts"]
    info = out.extras["uv_unwrap"]
    assert info["decimated"] is False and info["faces_out"] == mesh.num_faces and info["charts"] >= 1


def test_unwrap_uv_stretch_is_bounded():
    """UV area per 3D area is roughly uniform (one texel density over the sphere), not wildly distorted."""
    mesh = _sphere(3)
    out = unwrap(mesh, resolution=256)
    p = mesh.v_pos[mesh.t_pos_idx].double()
    a3 = 0.5 * torch.linalg.cross(p[:, 1] - p[:, 0], p[:, 2] - p[:, 0]).norm(dim=1)
    ratio = _uv_signed_areas(out).abs() / a3
    rel = ratio / ratio.median()
    assert float(torch.quantile(rel, 0.05)) > 0.3 and float(torch.quantile(rel, 0.95)) < 3.0


def test_unwrap_keeps_normals_and_colours_and_drops_material():
    mesh = _sphere(2)
    mesh.v_nrm = torch.nn.functional.normalize(mesh.v_pos, dim=1)
    mesh.t_nrm_idx = mesh.t_pos_idx.clone()
    mesh.v_color = torch.rand(mesh.num_vertices, 3)
    mesh.material = Material(kd=torch.ones(4, 4, 3))
    out = unwrap(mesh, resolution=128)
    assert out.v_nrm is mesh.v_nrm and out.v_color is mesh.v_color
    assert out.material is None  # old textures do not match the new UVs
    assert mesh.material is not None


def test_unwrap_decimates_above_limit_and_warns():
    mesh = _sphere(4)  # 5120 faces
    mesh.v_color = (mesh.v_pos * 0.5 + 0.5).clamp(0, 1)  # colour = f(position): checkable after decimation
    with pytest.warns(DecimationWarning, match="max_faces_for_xatlas=1000"):
        out = unwrap(mesh, max_faces_for_xatlas=1000, resolution=128)
    assert 800 <= out.num_faces <= 1000
    assert out.v_color is not None
    assert float((out.v_color - (out.v_pos * 0.5 + 0.5).clamp(0, 1)).abs().max()) < 0.05
    assert out.t_tex_idx.shape == out.t_pos_idx.shape
    assert float(out.v_tex.min()) >= 0.0 and float(out.v_tex.max()) <= 1.0
    r = out.v_pos.norm(dim=1)
    assert float((r - 1.0).abs().max()) < 0.05  # decimation stays on the sphere
    assert out.extras["uv_unwrap"]["decimated"] is True
    assert mesh.num_faces == 5120  # input untouched
    # every vertex is used and the result is still closed
    assert torch.unique(out.t_pos_idx).numel() == out.num_vertices
    tm = trimesh.Trimesh(out.v_pos.numpy(), out.t_pos_idx.numpy(), process=False)
    assert tm.is_watertight


def test_unwrap_no_warning_below_limit():
    with warnings.catch_warnings():
        warnings.simplefilter("error", DecimationWarning)
        out = unwrap(_sphere(2), max_faces_for_xatlas=320, resolution=64)
    assert out.num_faces == 320


def test_split_pieces_cover_every_face_once_and_merge_back():
    from meshlift.mesh._xatlas_job import merge_pieces, split_pieces

    tm = trimesh.creation.icosphere(subdivisions=3)
    pos, tri = tm.vertices.astype(np.float32), tm.faces.astype(np.int64)
    parts = split_pieces(pos, tri, 4)
    assert len(parts) == 4 and sorted(np.concatenate([f for f, _, _ in parts]).tolist()) == list(range(len(tri)))
    assert max(len(f) for f, _, _ in parts) - min(len(f) for f, _, _ in parts) <= 1
    for face_ids, vertex_ids, local in parts:
        assert np.array_equal(vertex_ids[local], tri[face_ids])
    # identity "xatlas outputs" (vmapping = the piece's vertices, uv = anything): the merge gives tri back
    outs = [(np.arange(len(v)), loc.astype(np.uint32), np.zeros((len(v), 2), np.float32)) for _, v, loc in parts]
    vm, ind, uv = merge_pieces(parts, outs, len(tri))
    assert np.array_equal(vm[ind], tri) and uv.shape == (vm.shape[0], 2)


def test_unwrap_errors():
    empty = Mesh(v_pos=torch.zeros(3, 3), t_pos_idx=torch.zeros(0, 3, dtype=torch.int64))
    with pytest.raises(MeshError, match="no faces"):
        unwrap(empty)
    with pytest.raises(MeshError, match="resolution"):
        unwrap(_sphere(1), resolution=4)
    with pytest.raises(MeshError, match="padding"):
        unwrap(_sphere(1), padding=-1)
    bad = _sphere(1)
    bad.v_pos[0, 0] = float("nan")
    with pytest.raises(MeshError, match="NaN"):
        unwrap(bad)
    flat = Mesh(v_pos=torch.zeros(3, 3), t_pos_idx=torch.tensor([[0, 1, 2]]))
    with pytest.raises(MeshError, match="degenerate"):
        unwrap(flat)
    with pytest.raises(MeshError, match="pieces must be >= 1"):
        unwrap(_sphere(1), pieces=0)


def test_unwrap_is_deterministic():
    a = unwrap(_torus(), resolution=128)
    b = unwrap(_torus(), resolution=128)
    assert np.array_equal(a.v_tex.numpy(), b.v_tex.numpy())


# ---- time limit and the per-face fallback ------------------------------------------------------------------


def test_face_atlas_faces_disjoint_and_covered():
    from meshlift.mesh.uv import face_atlas

    for n_faces in (1, 2, 7, 500):
        v_tex, t_tex_idx = face_atlas(n_faces, resolution=256, padding=2)
        assert v_tex.shape == (3 * n_faces, 2) and t_tex_idx.shape == (n_faces, 3)
        assert float(v_tex.min()) >= 0.0 and float(v_tex.max()) <= 1.0
        uv = v_tex[t_tex_idx].double()
        e1, e2 = uv[:, 1] - uv[:, 0], uv[:, 2] - uv[:, 0]
        area = 0.5 * (e1[:, 0] * e2[:, 1] - e1[:, 1] * e2[:, 0]).abs()
        assert bool((area > 0).all())
        # every face owns texels, and no texel belongs to two faces (disjoint triangles)
        tri_id, _, count = rasterize_uv_reference(v_tex, t_tex_idx, 256)
        assert int(count.max()) <= 1
        owned = torch.unique(tri_id[tri_id >= 0])
        assert owned.numel() == n_faces
    with pytest.raises(MeshError, match="num_faces"):
        face_atlas(0)


def test_unwrap_time_limit_falls_back_to_face_atlas():
    m = _torus()
    out = unwrap(m, resolution=256, time_limit_s=0.0)  # no time at all: xatlas is not started
    info = out.extras["uv_unwrap"]
    assert info["method"] == "face_atlas" and "limit" in info["reason"]
    assert torch.equal(out.t_pos_idx, m.t_pos_idx) and out.v_tex.shape == (3 * m.num_faces, 2)


@pytest.mark.slow
def test_unwrap_in_a_worker_matches_in_process():
    """With a generous limit xatlas runs in a spawned worker and gives the in-process result."""
    m = _sphere(2)
    a = unwrap(m, resolution=256)
    b = unwrap(m, resolution=256, time_limit_s=120.0)
    assert b.extras["uv_unwrap"]["method"] == "xatlas"
    assert torch.equal(a.t_tex_idx, b.t_tex_idx) and torch.allclose(a.v_tex, b.v_tex)


@pytest.mark.slow
def test_unwrap_stops_xatlas_at_its_limit():
    """A limit shorter than the worker's start: the worker is stopped, the per-face atlas comes back."""
    m = _sphere(4)
    out = unwrap(m, resolution=256, time_limit_s=0.05)
    assert out.extras["uv_unwrap"]["method"] == "face_atlas"
