"""Mesh statistics for reports (``meshlift convert``'s before/after table)."""

from __future__ import annotations

import numpy as np

from meshlift.mesh.clean import edge_face_counts, face_components
from meshlift.mesh.orient import signed_volume, winding_consistent
from meshlift.structures.mesh import Mesh


def mesh_stats(mesh: Mesh) -> dict:
    """Counts and topology flags of ``mesh``.

    Returns:
        dict: ``vertices``, ``faces``, ``components`` (face-connected through shared vertices),
        ``boundary_edges`` (edges with one face), ``nonmanifold_edges`` (edges with > 2 faces),
        ``manifold`` (no non-manifold edge), ``watertight`` (manifold, no boundary edge, ≥ 1 face),
        ``bbox_min``/``bbox_max`` (``[3]`` lists, None when empty), ``has_uv``, ``has_color``,
        ``has_material``, ``winding_consistent`` (every edge shared by two faces is traversed in
        opposite directions), ``signed_volume`` (float; > 0 for a closed mesh facing outward, None when
        not watertight), ``up_axis`` (``"+Y (glTF)"`` after a ``--up`` conversion, else ``"as input"``).
    """
    f = mesh.t_pos_idx.cpu().numpy()
    v = mesh.v_pos.detach().cpu().numpy()
    T = len(f)
    if T:
        _, counts = edge_face_counts(f)
        boundary, nonmanifold = int((counts == 1).sum()), int((counts > 2).sum())
    else:
        boundary = nonmanifold = 0
    n_comp, _ = face_components(f, len(v))
    finite = v[np.isfinite(v).all(axis=1)] if len(v) else v
    return {
        "vertices": int(len(v)),
        "faces": int(T),
        "components": int(n_comp),
        "boundary_edges": boundary,
        "nonmanifold_edges": nonmanifold,
        "manifold": nonmanifold == 0,
        "watertight": T > 0 and nonmanifold == 0 and boundary == 0,
        "bbox_min": finite.min(0).tolist() if len(finite) else None,
        "bbox_max": finite.max(0).tolist() if len(finite) else None,
        "has_uv": mesh.v_tex is not None,
        "has_color": mesh.v_color is not None,
        "has_material": mesh.material is not None,
        "winding_consistent": winding_consistent(mesh),
        "signed_volume": (signed_volume(v, f) if T and nonmanifold == 0 and boundary == 0 else None),
        "up_axis": "+Y (glTF)" if mesh.extras.get("up_axis_conversion") else "as input",
    }
