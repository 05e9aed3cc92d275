"""Stateless geometry maths over tensors: rotations (quaternions w, x, y, z), rigid/similarity transforms,
lens distortion of the COLMAP camera models (docs/conventions.md §2, §5).

``meshlift.geometry.mesh_ops`` (mesh normals and friends) is imported from its own module.
"""

from meshlift.geometry.distortion import CAMERA_MODELS, camera_model, distort, undistort_points
from meshlift.geometry.rotations import (
    axis_angle_to_matrix,
    matrix_to_quaternion,
    normalize_quaternion,
    quaternion_conjugate,
    quaternion_multiply,
    quaternion_to_matrix,
)
from meshlift.geometry.transforms import invert_rigid, make_transform, to_homogeneous, transform_points

__all__ = [
    "CAMERA_MODELS",
    "camera_model",
    "distort",
    "undistort_points",
    "axis_angle_to_matrix",
    "matrix_to_quaternion",
    "normalize_quaternion",
    "quaternion_conjugate",
    "quaternion_multiply",
    "quaternion_to_matrix",
    "invert_rigid",
    "make_transform",
    "to_homogeneous",
    "transform_points",
]
