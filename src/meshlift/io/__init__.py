"""File formats only: meshes (``obj``, ``ply``, ``glb``, dispatch in ``mesh``), images, HDR.

``load_mesh`` / ``save_mesh`` are available here lazily (importing ``meshlift.io`` stays light).
"""

from __future__ import annotations


def __getattr__(name: str):
    if name in ("load_mesh", "save_mesh"):
        from meshlift.io import mesh as _mesh

        return getattr(_mesh, name)
    raise AttributeError(f"module 'meshlift.io' has no attribute {name!r}")
