"""The package's exception types.

Every error meshlift raises on bad input is a :class:`MeshliftError` subclass whose message names the
file or argument, what is wrong, and what to do about it. Input data is never modified.
"""

from __future__ import annotations


class MeshliftError(Exception):
    """Base class of every error meshlift raises on purpose."""


class DatasetError(MeshliftError):
    """A dataset folder or file is missing, incomplete or inconsistent."""


class CameraError(MeshliftError):
    """Camera parameters are invalid (unknown model, wrong parameter count, bad shapes)."""


class MeshError(MeshliftError):
    """A mesh is unreadable or malformed (faces past the vertex list, empty where not allowed, ...)."""


class ImageError(MeshliftError):
    """An image is unreadable, or two images that must match differ in size."""


class RenderError(MeshliftError):
    """Bad arguments to a rendering op (shapes, dtypes, devices)."""


class ConfigError(MeshliftError):
    """A configuration file or override is invalid."""


class DependencyError(MeshliftError):
    """An optional dependency is missing; the message gives the install command."""


class OutOfMemoryError(MeshliftError):
    """Memory ran out; the message names the knobs (batch, resolution, data device, fragment budget)."""


class TrainingError(MeshliftError):
    """Training diverged (non-finite loss or parameters) and could not be recovered; no output was
    overwritten. The message names the learning rates to lower."""


class OutputError(MeshliftError):
    """The output folder cannot be used: it is a file, not writable, or holds a run that would be lost."""


class DistributedError(MeshliftError):
    """A multi-process (torch.distributed) run failed: a rank died, hung past the collective timeout, or
    the launch environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``) is inconsistent."""


class MeshliftWarning(UserWarning):
    """Input data meshlift used after repairing it, or that may give a wrong result (dropped invalid
    Gaussians, values that look like another convention, an all-background render). The message names
    the file or argument, what was found and what was done; commands print these in their summary and
    JSON output."""


def shared_data_hint(path) -> str:
    """The README's remedy, appended to a "does not exist" message when ``path`` names the examples'
    ``shared/data`` (from a clone elsewhere ``../shared`` is not there); else ``""``."""
    if "shared/data" not in str(path).replace("\\", "/"):
        return ""
    return ("; the examples' ../shared/data is the shared folder beside the repository: from a clone elsewhere "
            "link it (ln -s PATH/TO/shared ../shared) or give your own path (README, 'Usage')")
