"""Tensor containers with no algorithms inside: :class:`Mesh`, :class:`Material`, :class:`Gaussians`."""

from meshlift.structures.gaussians import Gaussians
from meshlift.structures.mesh import Material, Mesh

__all__ = ["Mesh", "Material", "Gaussians"]
