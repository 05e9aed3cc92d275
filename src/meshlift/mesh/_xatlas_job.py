"""The xatlas call of :func:`meshlift.mesh.uv.unwrap`, importable without torch (it runs in a spawned
worker process when the unwrap has a time limit, so the parent can stop it; xatlas itself cannot be
interrupted). Plain numpy in and out.

Pieces: xatlas segments each mesh it is given into charts on its own task, and packs the charts of all the
meshes of one ``Atlas`` into one atlas together. A big mesh is therefore handed over as ``pieces`` meshes
(slabs of about equal face count along the longest axis of the face centroids): the chart segmentation runs on
that many cores, and each piece's segmentation is also cheaper than its share of the whole (it grows faster
than the face count). The cost is a chart boundary where a slab boundary crosses the surface; the packing is
unchanged. The per-piece outputs are put back together in the input's face order (:func:`merge_pieces`).

Measured (2 CPU cores, 2026-12-01, ``benchmarks/unwrap_pieces.py``), a 50k-face spot-like mesh: 8.7 s whole,
3.3 s as 10 pieces (charts 1815 → 1929, utilisation 0.808 → 0.804); a 50k-face mesh of 2,700 small parts
(lego-like): 349.6 s whole, 4.3 s as 10 pieces (charts 21,180 → 22,973, utilisation 0.714 → 0.710).
"""

from __future__ import annotations

import numpy as np


def split_pieces(pos: np.ndarray, tri: np.ndarray, pieces: int) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """``[(face_ids, vertex_ids, local_tri)]``: ``tri`` cut into ``pieces`` slabs of about equal face count along
    the longest axis of the face centroids; ``local_tri`` indexes ``vertex_ids`` (the piece's own vertices)."""
    pieces = max(1, min(int(pieces), tri.shape[0]))
    if pieces == 1:
        return [(np.arange(tri.shape[0]), np.arange(pos.shape[0]), tri)]
    cent = pos[tri].mean(1)
    axis = int(np.argmax(cent.max(0) - cent.min(0)))
    order = np.argsort(cent[:, axis], kind="stable")
    out = []
    for face_ids in np.array_split(order, pieces):
        face_ids = np.sort(face_ids)
        vertex_ids, local = np.unique(tri[face_ids], return_inverse=True)
        out.append((face_ids, vertex_ids, local.reshape(-1, 3)))
    return out


def merge_pieces(parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]], outputs: list[tuple], num_faces: int
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One ``(vmapping, indices, uvs)`` in the input's face order from each piece's xatlas output
    ``(vmapping, indices, uvs)`` (vmapping indexes the piece's vertices)."""
    vmaps, uvs = [], []
    indices = np.zeros((num_faces, 3), dtype=np.uint32)
    offset = 0
    for (face_ids, vertex_ids, _), (vm, ind, uv) in zip(parts, outputs):
        vmaps.append(vertex_ids[vm])
        uvs.append(uv)
        indices[face_ids] = ind + offset
        offset += vm.shape[0]
    return np.concatenate(vmaps).astype(np.uint32), indices, np.concatenate(uvs)


def generate(pos: np.ndarray, tri: np.ndarray, texels_per_unit: float, padding: int, pieces: int = 1) -> dict:
    """xatlas charts + packing of one mesh into one atlas page: ``{vmapping, indices, uvs, width, height,
    charts, utilization, atlas_count}`` (uvs normalised by the atlas size, as xatlas writes them), the mesh
    given to xatlas as ``pieces`` meshes (module docstring)."""
    import xatlas

    atlas = xatlas.Atlas()
    parts = split_pieces(pos, tri, pieces)
    for _, vertex_ids, local in parts:
        atlas.add_mesh(pos[vertex_ids], local.astype(np.uint32))
    chart_options = xatlas.ChartOptions()
    pack_options = xatlas.PackOptions()
    pack_options.resolution = 0  # one atlas page whatever its size (several pages would overlap in UV)
    pack_options.texels_per_unit = float(texels_per_unit)
    pack_options.padding = int(padding)
    pack_options.bilinear = True
    atlas.generate(chart_options, pack_options)
    vmapping, indices, uvs = merge_pieces(parts, [atlas[i] for i in range(len(parts))], tri.shape[0])
    return {"vmapping": vmapping, "indices": indices, "uvs": uvs, "width": int(atlas.width),
            "height": int(atlas.height), "charts": int(atlas.chart_count), "utilization": float(atlas.utilization),
            "atlas_count": int(atlas.atlas_count), "pieces": len(parts)}
