"""The xatlas call of :func:`meshlift.mesh.uv.unwrap`, importable without torch (it runs in a spawned
worker process when the unwrap has a time limit, so the parent can stop it; xatlas itself cannot be
interrupted). Plain numpy in and out."""

from __future__ import annotations

import numpy as np


def generate(pos: np.ndarray, tri: np.ndarray, texels_per_unit: float, padding: int) -> dict:
    """xatlas charts + packing of one mesh into one atlas page: ``{vmapping, indices, uvs, width, height,
    charts, utilization, atlas_count}`` (uvs normalised by the atlas size, as xatlas writes them)."""
    import xatlas

    atlas = xatlas.Atlas()
    atlas.add_mesh(pos, tri.astype(np.uint32))
    chart_options = xatlas.ChartOptions()
    pack_options = xatlas.PackOptions()
    pack_options.resolution = 0  # one atlas page whatever its size (several pages would overlap in UV)
    pack_options.texels_per_unit = float(texels_per_unit)
    pack_options.padding = int(padding)
    pack_options.bilinear = True
    atlas.generate(chart_options, pack_options)
    vmapping, indices, uvs = atlas[0]
    return {"vmapping": vmapping, "indices": indices, "uvs": uvs, "width": int(atlas.width),
            "height": int(atlas.height), "charts": int(atlas.chart_count), "utilization": float(atlas.utilization),
            "atlas_count": int(atlas.atlas_count)}
