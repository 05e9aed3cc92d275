"""A synthetic, richly textured scene for the poses tests, rendered by meshlift's own renderer.

The demo ring (:func:`make_demo_object`, made in code: no shared data needed) is shaded with a volumetric
albedo field of random multi-scale Fourier blobs (so SIFT finds many distinctive features), under the
procedural studio light, seen by an orbit of cameras with known poses (elevation varying around the orbit
so the camera centres are not coplanar).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch


def _render_mesh():
    from meshlift.renderers.mesh_pbr import render_mesh

    return render_mesh


def _reference_light():
    from meshlift.data.synthetic import make_synthetic_light

    return make_synthetic_light("procedural", "studio", env_res=32)


def _demo_object():
    from meshlift.data.demo_object import make_demo_object

    return make_demo_object(resolution=96, texture_resolution=16)


def blob_albedo(seed: int = 0, n_waves: int = 48):
    """``fn(x [N, 3]) -> {"kd", "ks"}``: albedo from random sinusoids of wavelengths 0.04-0.4 (the ring is
    ~1.7 across), thresholded into saturated patches — a texture with corners and blobs at many scales."""
    g = torch.Generator().manual_seed(seed)
    freq = torch.randn(n_waves, 3, generator=g)
    freq = freq / freq.norm(dim=1, keepdim=True) * torch.exp(torch.empty(n_waves).uniform_(math.log(15), math.log(150), generator=g))[:, None]
    phase = torch.rand(n_waves, generator=g) * 2 * math.pi
    mix = torch.rand(n_waves, 3, generator=g) - 0.5

    def fn(x: torch.Tensor) -> dict:
        s = torch.sin(x.double() @ freq.double().T + phase.double())  # [N, K]
        v = (s @ mix.double()) / math.sqrt(n_waves / 8)  # [N, 3]
        kd = torch.sigmoid(6.0 * v).clamp(0.03, 0.95).to(x.dtype)
        ks = torch.tensor([0.0, 0.7, 0.0], dtype=x.dtype, device=x.device).expand(x.shape[0], 3)
        return {"kd": kd, "ks": ks}

    return fn


def orbit_cameras(n: int = 16, size: int = 256, radius: float = 3.2, fov_deg: float = 32.0):
    """``Cameras`` on an orbit around +Y looking at the origin, elevation 0.55 ± 0.2 rad around the orbit."""
    from meshlift.cameras import Cameras, focal_from_fov, intrinsics_matrix, look_at

    az = torch.arange(n, dtype=torch.float64) * 2 * math.pi / n
    el = 0.55 + 0.2 * torch.sin(2 * az)
    eye = radius * torch.stack([torch.cos(el) * torch.sin(az), torch.sin(el), torch.cos(el) * torch.cos(az)], -1)
    w2c = look_at(eye, torch.zeros_like(eye), torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64).expand_as(eye))
    f = focal_from_fov(math.radians(fov_deg), size)
    K = intrinsics_matrix(f, f, size / 2, size / 2).expand(n, 3, 3)
    return Cameras(K=K, world_to_camera=w2c.float(), width=size, height=size, near=0.5, far=10.0)


@torch.no_grad()
def render_scene(folder: Path, n: int = 16, size: int = 256, seed: int = 0) -> tuple[list[str], object]:
    """Render ``n`` views to ``folder/view_XX.png`` (sRGB over a dark grey); returns (names, Cameras)."""
    from meshlift.io.images import write_image
    from meshlift.shading.color import linear_to_srgb

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    mesh = _demo_object()
    light = _reference_light()
    cams = orbit_cameras(n, size)
    render = _render_mesh()
    mat = blob_albedo(seed)
    names = []
    w2clip, centres = cams.world_to_clip(), cams.camera_centers()
    for s in range(0, n, 4):
        out = render(mesh, w2clip[s:s + 4], centres[s:s + 4], (size, size), light=light, material=mat)
        a = out["alpha"].clamp(0, 1)
        img = linear_to_srgb((out["shaded"] + (1 - a) * 0.05).clamp(0, 1))
        for k in range(img.shape[0]):
            name = f"view_{s + k:02d}.png"
            write_image(folder / name, img[k].numpy().astype(np.float32))
            names.append(name)
    return names, cams


_CACHE: dict[tuple, tuple[Path, list[str], object]] = {}


def cached_scene(n: int = 16, size: int = 256) -> tuple[Path, list[str], object]:
    """Render the scene once per test process into a temporary folder; returns (folder, names, Cameras).
    Callers copy what they need: the folder is shared."""
    import tempfile

    key = (n, size)
    if key not in _CACHE:
        folder = Path(tempfile.mkdtemp(prefix="meshlift_poses_scene_"))
        names, cams = render_scene(folder, n, size)
        _CACHE[key] = (folder, names, cams)
    return _CACHE[key]


def snapshot(folder: Path) -> dict:
    """``{relative path: (size, mtime_ns, sha1)}`` of every file under ``folder`` (to prove it is untouched)."""
    import hashlib

    out = {}
    for p in sorted(Path(folder).rglob("*")):
        if p.is_file():
            st = p.stat()
            out[str(p.relative_to(folder))] = (st.st_size, st.st_mtime_ns, hashlib.sha1(p.read_bytes()).hexdigest())
    return out


def write_rotated_jpeg(src_png: Path, dst_jpg: Path) -> None:
    """Store ``src_png`` as a JPEG whose pixels are rotated 90° with EXIF orientation 6, so that a viewer
    applying EXIF (PIL ``exif_transpose``) shows the original image again."""
    from PIL import Image

    im = Image.open(src_png).convert("RGB")
    raw = im.transpose(Image.Transpose.ROTATE_90)  # exif_transpose of orientation 6 rotates by 270 (= -90)
    exif = Image.Exif()
    exif[0x0112] = 6
    raw.save(dst_jpg, quality=95, subsampling=0, exif=exif.tobytes())


def write_noise_image(path: Path, size: int = 256, seed: int = 1) -> None:
    """A random-blob image unrelated to the scene (no overlap with any view)."""
    from PIL import Image, ImageFilter

    rng = np.random.default_rng(seed)
    a = (rng.random((size // 4, size // 4, 3)) * 255).astype(np.uint8)
    Image.fromarray(a).resize((size, size), Image.NEAREST).filter(ImageFilter.GaussianBlur(1)).save(path)
