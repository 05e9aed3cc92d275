"""Tensor containers with no algorithms inside: :class:`Mesh`, :class:`Material`."""

from meshlift.structures.mesh import Material, Mesh

__all__ = ["Mesh", "Material"]
