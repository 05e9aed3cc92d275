"""meshlift's differentiable rendering core (nvdiffrast semantics, pure PyTorch, CPU and CUDA).

Public ops: :func:`rasterize`, :func:`interpolate`, :func:`texture`, :func:`antialias`, plus helpers
(:func:`transform_pos`, :func:`coverage_mask`, :func:`render_depth`, ...). Conventions:
docs/conventions.md §3 (clip space, pixel centres, depth test), §7 (UVs), §8 (cube maps).
"""

from meshlift.render.antialias import antialias, antialias_construct_topology
from meshlift.render.helpers import (
    coverage_mask,
    ndc_to_pixel,
    render_attribute,
    render_depth,
    render_face_normals,
    transform_pos,
    triangle_id,
)
from meshlift.render.interpolate import interpolate
from meshlift.render.texture import (
    MipStack,
    cube_to_face_uv,
    texture,
    texture_construct_mip,
    texture_mip_stack,
    texture_rows,
)
from meshlift.render.rasterize import (
    DEFAULT_MAX_FRAGMENTS,
    barycentrics_at,
    rasterize,
    visible_triangles,
)

__all__ = [
    "rasterize",
    "interpolate",
    "antialias",
    "antialias_construct_topology",
    "texture",
    "texture_construct_mip",
    "texture_mip_stack",
    "texture_rows",
    "MipStack",
    "cube_to_face_uv",
    "visible_triangles",
    "barycentrics_at",
    "DEFAULT_MAX_FRAGMENTS",
    "transform_pos",
    "triangle_id",
    "coverage_mask",
    "render_depth",
    "render_attribute",
    "render_face_normals",
    "ndc_to_pixel",
]
