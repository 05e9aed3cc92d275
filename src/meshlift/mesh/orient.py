"""Face orientation: consistent winding across shared edges, and closed components facing outward.

Conventions (docs/conventions.md §1): a face ``(a, b, c)`` is front-facing when ``a → b → c`` runs
counter-clockwise seen from outside, so its normal ``(b − a) × (c − a)`` points outward and the signed
volume ``Σ a · (b × c) / 6`` of a closed, outward-facing component is positive.

Algorithm (vectorised, no Python loop over faces):

1. Faces are the nodes of a graph whose edges are the *manifold* mesh edges (shared by exactly two
   faces); each graph edge carries ``mismatch = 1`` when both faces traverse the shared edge in the same
   direction (inconsistent winding).
2. A breadth-first spanning forest (scipy.sparse.csgraph) gives each face a parent; the flip of a face
   relative to its component's root is the XOR of the mismatches along its tree path, computed by pointer
   jumping (``O(T log depth)``).
3. After flipping, any graph edge that still mismatches means the component is not orientable (a
   Möbius strip, or a non-manifold repair left a twist); it is counted, not "fixed".
4. Each *closed* component (every edge shared by exactly two faces) with negative signed volume is
   flipped whole (inside-out meshes). Open components are left as they are: outward is undefined.

Per-corner indices (``t_tex_idx``, ``t_nrm_idx``) flip with the faces; stored normals of a component
turned outward are negated where they disagree with the new face normals.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch

from meshlift.structures.mesh import Mesh

__all__ = ["OrientReport", "orient_faces", "winding_consistent", "signed_volume", "to_y_up", "nearest_up_axis"]


@dataclass
class OrientReport:
    """What :func:`orient_faces` changed and found."""

    winding_flipped_faces: int = 0
    """Faces reversed so neighbours agree across shared edges."""
    inverted_components: int = 0
    """Closed components that were inside out (negative signed volume) and were flipped whole."""
    nonorientable_components: int = 0
    """Components whose winding cannot be made consistent (e.g. a Möbius strip); left as they are."""


def _edge_table(f: np.ndarray):
    """Directed corner edges ``[3T, 2]``, their face ids, undirected edge ids (rank of the edge's key) with
    counts, and the corners sorted by edge (stable: by corner within an edge). One stable argsort of the
    packed keys gives all of it (``np.unique(return_inverse)`` and a second argsort did the same work twice)."""
    T = len(f)
    d = np.stack([f[:, [0, 1]], f[:, [1, 2]], f[:, [2, 0]]], axis=1).reshape(-1, 2)
    fid = np.repeat(np.arange(T), 3)
    lo, hi = np.minimum(d[:, 0], d[:, 1]), np.maximum(d[:, 0], d[:, 1])
    key = lo.astype(np.int64) * (int(f.max()) + 1) + hi
    perm = np.argsort(key, kind="stable")
    ks = key[perm]
    start = np.empty(len(ks), dtype=bool)
    start[:1] = True
    np.not_equal(ks[1:], ks[:-1], out=start[1:])
    inv = np.empty(len(ks), dtype=np.int64)
    inv[perm] = np.cumsum(start) - 1
    counts = np.diff(np.append(np.flatnonzero(start), len(ks)))
    return d, fid, inv, counts, perm


def _manifold_pairs(f: np.ndarray):
    """For every edge shared by exactly two faces: ``(face_a, face_b, mismatch)``."""
    d, fid, inv, counts, perm = _edge_table(f)
    order = perm[counts[inv[perm]] == 2]  # corners of two-face edges, by edge, then by corner
    a, b = order[0::2], order[1::2]
    fa, fb = fid[a], fid[b]
    same_dir = d[a, 0] == d[b, 0]  # both traverse the edge from the same vertex: inconsistent
    keep = fa != fb
    return fa[keep], fb[keep], same_dir[keep].astype(np.int8), counts, inv


def winding_consistent(mesh: Mesh) -> bool:
    """True when every edge shared by two faces is traversed in opposite directions by them."""
    f = mesh.t_pos_idx.cpu().numpy()
    if not len(f):
        return True
    _, _, mis, _, _ = _manifold_pairs(f)
    return not bool(mis.any())


def signed_volume(v: np.ndarray, f: np.ndarray) -> float:
    """Signed volume ``Σ a · (b × c) / 6`` of faces ``f [T,3]`` over vertices ``v [V,3]`` (float64)."""
    if not len(f):
        return 0.0
    a, b, c = (v[f[:, i]].astype(np.float64) for i in range(3))
    return float(np.einsum("ij,ij->i", a, np.cross(b, c)).sum() / 6.0)


def _flip_faces(mesh: Mesh, flip: np.ndarray) -> Mesh:
    if not flip.any():
        return mesh
    m = torch.from_numpy(flip)

    def rev(idx):
        if idx is None:
            return None
        out = idx.clone()
        out[m] = idx[m][:, [0, 2, 1]]
        return out

    return replace(mesh, t_pos_idx=rev(mesh.t_pos_idx), t_tex_idx=rev(mesh.t_tex_idx),
                   t_nrm_idx=rev(mesh.t_nrm_idx))


def orient_faces(mesh: Mesh) -> tuple[Mesh, OrientReport]:
    """Make winding consistent per component and turn closed components outward (module docstring).

    Args:
        mesh: input (not modified).

    Returns:
        ``(oriented mesh, OrientReport)``.
    """
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import breadth_first_order, connected_components

    rep = OrientReport()
    f = mesh.t_pos_idx.cpu().numpy()
    T = len(f)
    if not T:
        return mesh, rep
    fa, fb, mis, counts, inv = _manifold_pairs(f)
    flip = np.zeros(T, dtype=bool)
    n_comp, comp = 1, np.zeros(T, dtype=np.int64)
    if len(fa):
        n_comp, comp = connected_components(coo_matrix((np.ones(len(fa)), (fa, fb)), shape=(T, T)),
                                            directed=False)
        roots = np.unique(comp, return_index=True)[1]
        # One BFS from a virtual super-root (node T) linked to one face of every component.
        ra = np.concatenate([fa, np.full(len(roots), T)])
        rb = np.concatenate([fb, roots])
        g = coo_matrix((np.ones(len(ra)), (ra, rb)), shape=(T + 1, T + 1)).tocsr()
        order, pred = breadth_first_order(g, T, directed=False, return_predecessors=True)
        parent = np.arange(T + 1)
        parent[order[1:]] = pred[order[1:]]
        key = np.minimum(fa, fb).astype(np.int64) * T + np.maximum(fa, fb)
        korder = np.argsort(key)
        key_sorted, mis_sorted = key[korder], mis[korder]
        parity = np.zeros(T + 1, dtype=np.int8)
        child = np.flatnonzero(parent[:T] < T)  # faces below their component's root
        k = np.minimum(child, parent[child]).astype(np.int64) * T + np.maximum(child, parent[child])
        parity[child] = mis_sorted[np.searchsorted(key_sorted, k)]
        ptr = parent
        while True:  # pointer jumping: parity becomes the XOR of mismatches along the path to the root
            nxt = ptr[ptr]
            if np.array_equal(nxt, ptr):
                break
            parity = parity ^ parity[ptr]
            ptr = nxt
        flip = parity[:T].astype(bool)
        still = mis.astype(bool) ^ (flip[fa] ^ flip[fb])
        rep.nonorientable_components = int(len(np.unique(comp[fa[still]]))) if still.any() else 0
    rep.winding_flipped_faces = int(flip.sum())
    # keep the majority orientation of each component: flipping the smaller side is the same fix
    if flip.any():
        nflip = np.bincount(comp, weights=flip, minlength=n_comp)
        ntot = np.bincount(comp, minlength=n_comp)
        invert = nflip > ntot / 2
        flip ^= invert[comp]
        rep.winding_flipped_faces = int(flip.sum())
    out = _flip_faces(mesh, flip)
    # closed components facing inward
    f2 = out.t_pos_idx.cpu().numpy()
    v = out.v_pos.detach().cpu().double().numpy()
    open_edge = counts[inv] != 2
    open_face = np.zeros(T, dtype=bool)
    open_face[np.repeat(np.arange(T), 3)[open_edge]] = True
    comp_open = np.bincount(comp, weights=open_face, minlength=n_comp) > 0
    a, b, c = (v[f2[:, i]] for i in range(3))
    vol = np.bincount(comp, weights=np.einsum("ij,ij->i", a, np.cross(b, c)) / 6.0, minlength=n_comp)
    inside_out = (~comp_open) & (vol < 0)
    rep.inverted_components = int(inside_out.sum())
    if inside_out.any():
        fl = inside_out[comp]
        out = _flip_faces(out, fl)
        if out.v_nrm is not None and out.t_nrm_idx is not None:
            out = _fix_normals(out, fl)
    return out, rep


def _fix_normals(mesh: Mesh, faces: np.ndarray) -> Mesh:
    """Negate stored normals used by ``faces`` when most of them oppose the (new) face normals."""
    v = mesh.v_pos.detach().cpu().double()
    f = mesh.t_pos_idx.cpu()[torch.from_numpy(faces)]
    fn = torch.cross(v[f[:, 1]] - v[f[:, 0]], v[f[:, 2]] - v[f[:, 0]], dim=1)
    ni = mesh.t_nrm_idx.cpu()[torch.from_numpy(faces)]
    n = mesh.v_nrm.detach().cpu().double()[ni]  # [F, 3, 3]
    agree = (n * fn[:, None, :]).sum(-1) > 0
    if float(agree.double().mean()) >= 0.5:
        return mesh
    used = torch.unique(ni.reshape(-1))
    v_nrm = mesh.v_nrm.clone()
    v_nrm[used.to(v_nrm.device)] = -v_nrm[used.to(v_nrm.device)]
    return replace(mesh, v_nrm=v_nrm)


def to_y_up(mesh: Mesh, up: str) -> Mesh:
    """Rotate ``mesh`` so its up axis ``up`` (``"z"``, ``"-y"``, ...) becomes glTF's +Y.

    Positions and stored normals are rotated (a proper rotation: winding and handedness are kept). The
    rotation is recorded in ``extras["up_axis_conversion"]`` (``from``, ``to``, ``matrix`` row-major),
    which the GLB writer stores in ``asset.extras.meshlift``. ``up="y"`` returns the mesh unchanged
    (but recorded). Input not modified.
    """
    from meshlift.geometry.transforms import up_axis_rotation

    R = up_axis_rotation(up, dtype=torch.float32)
    extras = dict(mesh.extras)
    extras["up_axis_conversion"] = {"from": "+" + up.lstrip("+") if not up.startswith("-") else up,
                                    "to": "+y", "matrix": R.tolist()}
    v = mesh.v_pos.detach() @ R.T.to(mesh.v_pos.device)
    n = None if mesh.v_nrm is None else mesh.v_nrm @ R.T.to(mesh.v_nrm.device)
    return replace(mesh, v_pos=v, v_nrm=n, extras=extras)


def nearest_up_axis(up) -> tuple[str, float]:
    """The axis name of :data:`meshlift.geometry.transforms.UP_AXES` nearest to the direction ``up``.

    Args:
        up: a 3-vector (any length > 0), e.g. the region of interest's up estimated from the cameras
            (:func:`meshlift.data.roi.auto_roi`).

    Returns:
        ``(axis, angle_deg)``: ``"z"``, ``"-y"``, ... (what :func:`to_y_up` takes) and the angle in degrees
        between ``up`` and that axis (a capture's up estimated from camera roll is good to a few degrees;
        the exports are turned by the axis, exactly, not by the estimate).

    Raises:
        MeshError: ``up`` is not a finite, non-zero 3-vector.
    """
    from meshlift.errors import MeshError

    u = np.asarray(up, dtype=np.float64).reshape(-1)
    n = float(np.linalg.norm(u)) if u.size == 3 else 0.0
    if u.size != 3 or not np.isfinite(u).all() or n == 0.0:
        raise MeshError(f"nearest_up_axis: up must be a finite non-zero 3-vector, got {up!r}")
    u = u / n
    names = ("x", "y", "z")
    i = int(np.argmax(np.abs(u)))
    axis = ("" if u[i] > 0 else "-") + names[i]
    angle = float(np.degrees(np.arccos(min(1.0, abs(u[i])))))
    return axis, angle
