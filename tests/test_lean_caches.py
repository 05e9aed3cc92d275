"""Read-back-once caches of the launch-lean step: index range checks and the tangent corner grouping."""

from __future__ import annotations

import pytest
import torch

from meshlift.errors import MeshError
from meshlift.geometry import mesh_ops
from meshlift.structures import index_check
from meshlift.structures.mesh import Mesh


def test_index_check_reads_once_and_rechecks_after_an_in_place_change():
    f = torch.tensor([[0, 1, 2], [2, 1, 3]])
    assert index_check.index_range_ok(f, 4) == (True, 0, 3)
    assert index_check.index_range_ok(f, 4) == (True, None, None)  # cached: nothing read back
    assert index_check.index_range_ok(f, 3)[0] is False  # the cache knows the max, not just "ok"
    f[0, 0] = -1  # in place: the version changes, so it is read again
    assert index_check.index_range_ok(f, 4) == (False, -1, 3)
    with pytest.raises(MeshError, match="indexes vertex"):
        Mesh(v_pos=torch.zeros(4, 3), t_pos_idx=f)
    with pytest.raises(MeshError, match="indexes vertex"):
        mesh_ops.face_normals(torch.zeros(4, 3), f)
    assert index_check.index_range_ok(torch.zeros(0, 3, dtype=torch.long), 0) == (True, None, None)


def test_index_check_forgets_freed_tensors():
    for _ in range(3 * index_check.MAX_ENTRIES):
        index_check.index_range_ok(torch.tensor([[0, 1, 2]]), 3)
    assert len(index_check._CACHE) <= index_check.MAX_ENTRIES


def _quad_strip():
    g = torch.Generator().manual_seed(0)
    v = torch.rand(6, 3, generator=g, dtype=torch.float64)
    f = torch.tensor([[0, 1, 2], [1, 3, 2], [2, 3, 4], [3, 5, 4]])
    uv = torch.rand(6, 2, generator=g, dtype=torch.float64)
    return v, f, uv


def test_tangent_grouping_cache_gives_the_same_frames_and_follows_changes():
    v, f, uv = _quad_strip()
    ft = f.clone()
    n = mesh_ops.vertex_normals(v, f)
    first = mesh_ops.tangent_frames(v, f, uv, ft, n, f)
    again = mesh_ops.tangent_frames(v + 0.01, f, uv, ft, n, f)  # cached grouping, new positions
    fresh_ft = ft.clone()  # another tensor object: no cache hit, computed from scratch
    ref = mesh_ops.tangent_frames(v + 0.01, f, uv, fresh_ft, n, f)
    assert torch.equal(again[0], ref[0]) and torch.equal(again[1], ref[1])
    assert first[1].shape == ref[1].shape
    # mirror one face's UVs in place: the grouping must be recomputed (the version of uv changed)
    uv[4] = uv[2] * 2 - uv[4]
    changed = mesh_ops.tangent_frames(v, f, uv, ft, n, f)
    ref2 = mesh_ops.tangent_frames(v, f, uv.clone(), ft.clone(), n, f)
    assert torch.equal(changed[0], ref2[0]) and torch.equal(changed[1], ref2[1])
    # gradients still reach positions and UVs through the cached grouping
    vg = v.clone().requires_grad_(True)
    uvg = uv.clone().requires_grad_(True)
    out = mesh_ops.tangent_frames(vg, f, uvg, ft, n, f)[0]
    out[:, :3].sum().backward()
    assert vg.grad is not None and uvg.grad is not None
