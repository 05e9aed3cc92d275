"""meshlift: posed multi-view photographs to game-ready 3D assets.

Importing the package is cheap: it imports neither torch nor any optional dependency. Import the
sub-packages you need (``meshlift.cameras``, ``meshlift.data``, ``meshlift.render``, ...).

Layers. A module may import modules of its own layer and of the layers below it, never of a higher one,
and the package has no import cycle (``tests/test_architecture.py`` checks both, reading this table)::

    8  cli app doctor                   thin: parse -> call -> print; the web app; environment diagnosis
    7  methods poses                    engine.py (shared loop machinery) + one package per method family; SfM poses
    6  renderers data mesh metrics      scene -> images; readers, views, synthetic scenes; mesh edits; metrics
    5  io                               file formats (meshes, images, HDR probes, asset folders)
    4  render shading isosurface        differentiable ops + naive twins; materials/lights; DMTet/FlexiCubes
    3  kernels                          the single door to fast paths (visibility backends, Triton kernels)
    2  cameras                          Cameras, convention converters, the camera rig
    1  structures geometry              containers; stateless maths (similarities, rotations, mesh ops)
    0  errors config _deps _threads _env  exceptions, dataclass config, dependency probes, CPU threads, env variables (stdlib)

docs/architecture.md says what each folder owns and where new work goes.
"""

__version__ = "0.1.0"

from meshlift.errors import MeshliftError  # noqa: E402  (stdlib-only module)

__all__ = ["__version__", "MeshliftError"]
