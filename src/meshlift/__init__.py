"""meshlift: posed multi-view photographs to game-ready 3D assets.

Importing the package is cheap: it imports neither torch nor any optional dependency. Import the
sub-packages you need (``meshlift.cameras``, ``meshlift.data``, ``meshlift.render``, ...).

Layout (dependencies point one way, top to bottom)::

    errors, structures, geometry      containers and stateless maths
    cameras, data                     Cameras, one reader per dataset format -> Scene
    render                            differentiable ops: rasterize, interpolate, texture, antialias
    shading, isosurface, mesh         materials/lights, DMTet/FlexiCubes, clean/simplify/UV
    metrics, io                       PSNR/SSIM/LPIPS, Chamfer/F-score; file formats
    methods                           reconstruction methods (config dataclass + training loop)
    cli                               thin: parse -> call
"""

__version__ = "0.1.0"

from meshlift.errors import MeshliftError  # noqa: E402  (stdlib-only module)

__all__ = ["__version__", "MeshliftError"]
