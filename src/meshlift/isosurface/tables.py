"""Dual Marching Cubes lookup tables for FlexiCubes, derived in code (no table data).

Cube layout (used by :mod:`meshlift.isosurface.flexicubes`):

* **Corners** ``k = x + 2 y + 4 z`` for the corner at offset ``(x, y, z) in {0, 1}^3`` from the cube's
  low corner. A cube's case id is ``sum_k inside_k << k`` with ``inside = sdf < 0``.
* **Edges** ``e = 4 a + ob + 2 oc`` for the edge along axis ``a`` whose start corner has offset ``ob``
  along axis ``b = (a + 1) % 3`` and ``oc`` along ``c = (a + 2) % 3`` (0 along ``a``). Its end corner
  adds ``e_a``. Seen from the edge, the cube lies in quadrant ``(ob, oc)`` of the (b, c) plane, which
  gives the edge's *slot* ``(0,0)->0, (1,0)->1, (1,1)->2, (0,1)->3``: the four cubes around a grid edge
  taken in slot order turn counter-clockwise about ``+a``.
* **Faces** ``f = 2 a + s`` is the face where the coordinate along axis ``a`` equals ``s``.

Derivation (Nielson 2004, "Dual Marching Cubes"; Shen et al. 2023, FlexiCubes Sec. 4 and supplement
Sec. 1.3). The surface crosses a cube edge where its corners' signs differ. On each square face, the
crossing points are joined by segments: a face with two crossings has one segment; a face with four
(diagonal corners alike: the *ambiguous* face) has two, and we resolve it by the rule **"separate the
inside corners"**: each inside corner is cut off by a segment joining its two face edges. The flipped
resolution cuts off the outside corners instead. Neighbouring cubes apply the same rule to their
shared face, so their segments agree. The segments on the six faces form closed cycles on the cube's
surface; each cycle bounds one surface patch, i.e. one **dual vertex**, which is attached to the
crossing edges of its cycle (at most 4 dual vertices per cube; each has 3 to 7 edges).

The dual mesh has one quad per crossing grid edge, joining the dual vertices of the four cubes around
it. It is manifold except where one patch of a cube holds *both* segments of an ambiguous face and the
patch of the neighbour across that face does too (the same two dual vertices would be joined by two
quad edges: FlexiCubes' cases C16/C19). For such a pair of cubes both flip that face's resolution;
on an orientable surface flipping the saddle splits a cycle that held both segments into two
(so the two segments then belong to different patches on both sides). :func:`problem_faces` finds, per
case, the faces where this happens (36 of the 256 cases, each with exactly one such face);
:func:`dmc_patches` gives the patches for a case with a chosen set of flipped faces, and
:func:`build_tables` packs both into tensors. For every problem case the problem face is the cube's
only ambiguous face, so the flipped resolution equals the complementary case's topology. (Checked
during development against the reference implementation's published tables: the same number of dual
vertices in all 256 cases, and the same 36 problem cases with the same face directions.)
"""

from __future__ import annotations

from functools import lru_cache

import torch

#: Corner offsets ``[8, 3]`` (x, y, z), corner k = x + 2y + 4z.
CORNERS = tuple((k & 1, (k >> 1) & 1, (k >> 2) & 1) for k in range(8))


def _corner_index(xyz: tuple[int, int, int]) -> int:
    return xyz[0] + 2 * xyz[1] + 4 * xyz[2]


def _build_edges() -> tuple[tuple[int, int], ...]:
    edges = []
    for a in range(3):
        b, c = (a + 1) % 3, (a + 2) % 3
        for oc in range(2):
            for ob in range(2):
                start = [0, 0, 0]
                start[b], start[c] = ob, oc
                end = list(start)
                end[a] = 1
                edges.append((_corner_index(tuple(start)), _corner_index(tuple(end))))
    return tuple(edges)


#: Cube edges as (start corner, end corner) with end = start + e_axis; index e = 4 axis + ob + 2 oc.
EDGES = _build_edges()
#: Axis of each edge.
EDGE_AXIS = tuple(e // 4 for e in range(12))
#: Slot (0..3) of each edge: position of this cube in the counter-clockwise cycle around the edge.
EDGE_SLOT = tuple({(0, 0): 0, (1, 0): 1, (1, 1): 2, (0, 1): 3}[(e % 2, (e // 2) % 2)] for e in range(12))


def _build_faces() -> tuple[tuple[tuple[int, tuple[int, int]], ...], ...]:
    """Per face ``2a + s``: for each of its 4 corners, (corner, (its two face edges))."""
    faces = []
    for a in range(3):
        for s in range(2):
            corners = [k for k in range(8) if CORNERS[k][a] == s]
            face_edges = [e for e, (p, q) in enumerate(EDGES) if p in corners and q in corners]
            faces.append(
                tuple((k, tuple(e for e in face_edges if k in EDGES[e])) for k in corners)  # 2 edges each
            )
    return tuple(faces)


#: Face ``2a + s``: 4 entries (corner, (edge, edge)) of its corners and their two face edges.
FACES = _build_faces()


def _face_segments(case: int, face: int, flipped: bool) -> list[tuple[int, int]]:
    """Segments (pairs of crossing edges) on one face for a case; see the module docstring."""
    inside = [bool(case >> k & 1) for k in range(8)]
    entries = FACES[face]
    crossing = sorted({e for _, es in entries for e in es if inside[EDGES[e][0]] != inside[EDGES[e][1]]})
    if len(crossing) == 2:
        return [(crossing[0], crossing[1])]
    if len(crossing) == 4:
        cut_inside = not flipped
        return [es for k, es in entries if inside[k] == cut_inside]
    return []


def _components(case: int, flip_mask: int) -> tuple[list[int], list[list[tuple[int, int]]]]:
    """Patch id per edge (-1 where no crossing) and the segments of each face."""
    parent = list(range(12))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    segs = [_face_segments(case, f, bool(flip_mask >> f & 1)) for f in range(6)]
    for face_segs in segs:
        for p, q in face_segs:
            parent[find(p)] = find(q)
    inside = [bool(case >> k & 1) for k in range(8)]
    crossing = [inside[p] != inside[q] for p, q in EDGES]
    roots: dict[int, int] = {}
    patch = []
    for e in range(12):
        if not crossing[e]:
            patch.append(-1)
            continue
        r = find(e)
        if r not in roots:
            roots[r] = len(roots)
        patch.append(roots[r])
    return patch, segs


def dmc_patches(case: int, flip_mask: int = 0) -> list[int]:
    """Patch (dual vertex) index of each of the 12 edges of a cube, -1 where the edge does not cross.

    Args:
        case: corner sign pattern 0..255 (bit k set where corner k is inside).
        flip_mask: 6-bit set of faces whose ambiguity resolution is flipped (separate outside corners).
    """
    return _components(case, flip_mask)[0]


def problem_faces(case: int) -> int:
    """6-bit mask of ambiguous faces whose two segments lie in one patch (default resolution)."""
    patch, segs = _components(case, 0)
    mask = 0
    for f in range(6):
        if len(segs[f]) == 2 and patch[segs[f][0][0]] == patch[segs[f][1][0]]:
            mask |= 1 << f
    return mask


@lru_cache(maxsize=None)
def build_tables() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Tensors for the vectorised FlexiCubes (CPU; callers move them to their device).

    Every case has at most one problem face (checked here), so a cube's topology is fixed by its case
    and one bit: whether that face's resolution is flipped.

    Returns:
        patch_table: ``[256, 2, 12]`` int64, ``patch_table[case, flipped, e]`` = dual vertex (0..3) of
            edge e within the cube, -1 where e does not cross.
        num_patches: ``[256, 2]`` int64 number of dual vertices of the cube.
        problem_face: ``[256]`` int64 face (0..5) whose two segments share a patch, or -1.
    """
    patch_table = torch.full((256, 2, 12), -1, dtype=torch.int64)
    num_patches = torch.zeros((256, 2), dtype=torch.int64)
    problem_face = torch.full((256,), -1, dtype=torch.int64)
    for case in range(256):
        pm = problem_faces(case)
        if pm & (pm - 1):  # more than one bit: the derivation above would not cover it
            raise RuntimeError(f"DMC case {case} has several problem faces ({pm:06b}); tables need extending")
        p0 = dmc_patches(case, 0)
        p1 = dmc_patches(case, pm) if pm else p0
        if pm:
            problem_face[case] = pm.bit_length() - 1
        for flipped, p in enumerate((p0, p1)):
            patch_table[case, flipped] = torch.tensor(p)
            num_patches[case, flipped] = max(p) + 1
    return patch_table, num_patches, problem_face
