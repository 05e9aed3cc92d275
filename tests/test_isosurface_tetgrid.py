"""Tests for meshlift.isosurface.tetgrid (Kuhn-split regular tetrahedral grids)."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from meshlift.errors import MeshError
from meshlift.isosurface.tetgrid import regular_tet_grid, tet_edges


@pytest.mark.parametrize("res", [1, 2, 3, 8])
def test_counts_bounds_orientation(res):
    verts, tets = regular_tet_grid(res, bounds=(-0.5, 1.5))
    assert verts.dtype == torch.float32 and tets.dtype == torch.int64
    assert verts.shape == ((res + 1) ** 3, 3)
    assert tets.shape == (6 * res**3, 4)
    assert float(verts.min()) == -0.5 and float(verts.max()) == 1.5
    p = verts.double()[tets]
    vol = torch.linalg.det(p[:, 1:] - p[:, :1]) / 6.0
    h = 2.0 / res
    # all positively oriented, all the same volume, and they tile the box exactly
    torch.testing.assert_close(vol, torch.full_like(vol, h**3 / 6.0))
    assert abs(float(vol.sum()) - 8.0) < 1e-9
    # vertex (i, j, k) index layout
    i, j, k = 1 % (res + 1), 0, res
    assert torch.allclose(verts[(i * (res + 1) + j) * (res + 1) + k], torch.tensor([-0.5 + h * i, -0.5 + h * j, 1.5]))


@pytest.mark.parametrize("res", [2, 3])
def test_grid_is_conforming(res):
    # every triangle face of the tet mesh is shared by 2 tets inside the box and by 1 on its boundary,
    # and the two tets sharing a face lie on opposite sides of it (no overlap).
    verts, tets = regular_tet_grid(res)
    faces = Counter()
    for t in tets.tolist():
        for drop in range(4):
            faces[tuple(sorted(t[:drop] + t[drop + 1 :]))] += 1
    on_boundary = lambda f: any(bool((verts[list(f), a].abs() == 1.0).all()) for a in range(3))  # noqa: E731
    for f, c in faces.items():
        assert c == (1 if on_boundary(f) else 2), f
    # boundary faces: 2 triangles per boundary square
    assert sum(1 for c in faces.values() if c == 1) == 6 * 2 * res * res


@pytest.mark.parametrize("res", [1, 2, 4])
def test_tet_edges(res):
    _, tets = regular_tet_grid(res)
    e = tet_edges(tets)
    r = res
    assert e.shape == (3 * r * (r + 1) ** 2 + 3 * r * r * (r + 1) + r**3, 2)
    assert bool((e[:, 0] < e[:, 1]).all())
    brute = {tuple(sorted((t[a], t[b]))) for t in tets.tolist() for a in range(4) for b in range(a + 1, 4)}
    assert brute == {tuple(x) for x in e.tolist()}


def test_edge_cases_and_errors():
    assert tet_edges(torch.zeros((0, 4), dtype=torch.int64)).shape == (0, 2)
    for bad in (0, 1000, 2.0, True):
        with pytest.raises(MeshError, match="resolution"):
            regular_tet_grid(bad)
    with pytest.raises(MeshError, match="bounds"):
        regular_tet_grid(4, bounds=(1.0, -1.0))
    with pytest.raises(MeshError, match="tets"):
        tet_edges(torch.zeros((3, 3), dtype=torch.int64))
