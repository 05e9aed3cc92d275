"""Options of the poses step (``meshlift poses``): one dataclass, a docstring per field."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from meshlift.errors import ConfigError

__all__ = ["PosesOptions", "MATCHERS", "CAMERA_MODELS"]

MATCHERS = ("auto", "exhaustive", "sequential", "vocabtree")
"""Matching strategies: ``auto`` = sequential for a video, exhaustive for an image folder."""

CAMERA_MODELS = ("SIMPLE_PINHOLE", "PINHOLE", "SIMPLE_RADIAL", "RADIAL", "OPENCV", "FULL_OPENCV", "OPENCV_FISHEYE")
"""COLMAP camera models the poses step estimates, each of which meshlift's readers can undistort."""


@dataclass
class PosesOptions:
    """How ``meshlift poses`` turns photos or a video into a posed COLMAP dataset."""

    matcher: str = "auto"
    """``exhaustive`` (every pair; best below ~100 images), ``sequential`` (each frame with its next
    ``sequential_overlap`` frames and the frames at distance 2^k; for videos), ``vocabtree`` (needs
    ``vocab_tree``), or ``auto`` (sequential for a video, exhaustive for a folder)."""
    camera_model: str = "SIMPLE_RADIAL"
    """COLMAP camera model to estimate (one of :data:`CAMERA_MODELS`); COLMAP's default is SIMPLE_RADIAL.
    OPENCV suits phone videos with visible distortion."""
    single_camera: bool | None = None
    """One shared camera (intrinsics) for all images. ``None``: shared for a video and for photos that all
    carry the same EXIF camera make, model and focal length (or none at all); one camera per photo
    otherwise."""
    max_image_size: int | None = None
    """Longest side, in pixels, at which features are extracted (keypoints are mapped back to full
    resolution). ``None``: COLMAP's default (3200)."""
    max_num_features: int = 8192
    """SIFT features kept per image (COLMAP's default 8192)."""
    fps: float = 2.0
    """Video only: frames sampled per second of video (the sharpest frame of each 1/fps window)."""
    max_frames: int = 300
    """Video only: at most this many frames (evenly thinned after sampling)."""
    blur_threshold: float = 0.35
    """Video frames whose sharpness (variance of the Laplacian) is below this fraction of the median of
    the sampled frames are dropped as blurry (0 keeps all). Photos are never dropped for blur; a blurry
    photo is named as the likely reason when it does not register."""
    mask_dir: Path | None = None
    """Folder of masks named like the images (``name``, ``name.png``, ``stem.png`` or ``stem.jpg``):
    features are extracted only where the mask is white (> 127). Copied as ``masks/<name>.png``."""
    vocab_tree: Path | None = None
    """COLMAP vocabulary-tree file for ``matcher="vocabtree"`` (pycolmap cannot build one, and meshlift
    downloads nothing)."""
    sequential_overlap: int = 10
    """Sequential matching: how many following frames each frame is matched with."""
    num_threads: int = -1
    """CPU threads for pycolmap (-1: all cores)."""
    seed: int = 0
    """Random seed of COLMAP's RANSAC and mapper (runs are repeatable on one machine)."""
    write_transforms: bool = False
    """Also write an instant-ngp / nerfstudio ``transforms.json`` (OpenGL camera-to-world) beside the model."""

    def __post_init__(self) -> None:
        self.matcher = str(self.matcher).lower()
        if self.matcher not in MATCHERS:
            raise ConfigError(f"matcher must be one of {', '.join(MATCHERS)}, got {self.matcher!r}")
        self.camera_model = str(self.camera_model).upper()
        if self.camera_model not in CAMERA_MODELS:
            raise ConfigError(f"camera_model must be one of {', '.join(CAMERA_MODELS)}, got {self.camera_model!r}")
        if self.max_image_size is not None and int(self.max_image_size) < 64:
            raise ConfigError(f"max_image_size must be at least 64 pixels (or None), got {self.max_image_size}")
        if int(self.max_num_features) < 64:
            raise ConfigError(f"max_num_features must be at least 64, got {self.max_num_features}")
        if not float(self.fps) > 0:
            raise ConfigError(f"fps must be positive, got {self.fps}")
        if int(self.max_frames) < 3:
            raise ConfigError(f"max_frames must be at least 3 (structure from motion needs 3 views), got {self.max_frames}")
        if not 0.0 <= float(self.blur_threshold) < 1.0:
            raise ConfigError(f"blur_threshold must be in [0, 1) (a fraction of the median sharpness), got "
                              f"{self.blur_threshold}")
        if int(self.sequential_overlap) < 1:
            raise ConfigError(f"sequential_overlap must be >= 1, got {self.sequential_overlap}")
        self.mask_dir = Path(self.mask_dir) if self.mask_dir is not None else None
        self.vocab_tree = Path(self.vocab_tree) if self.vocab_tree is not None else None
        if self.mask_dir is not None and not self.mask_dir.is_dir():
            raise ConfigError(f"mask_dir {self.mask_dir} is not a folder")
        if self.matcher == "vocabtree":
            if self.vocab_tree is None:
                raise ConfigError(
                    "matcher 'vocabtree' needs a vocabulary-tree file (vocab_tree / --vocab-tree FILE): pycolmap "
                    "cannot build one and meshlift downloads nothing. Get COLMAP's vocab tree for your pycolmap "
                    "version (the COLMAP releases page) once, or use --matcher exhaustive (below ~100 images) or "
                    "sequential (videos)"
                )
            if not self.vocab_tree.is_file():
                raise ConfigError(f"vocab_tree {self.vocab_tree} does not exist")
