"""Private texture helpers shared by the mesh writers/readers (OBJ, GLB).

Texture files follow docs/conventions.md §7: ``kd`` is sRGB-encoded in files and linear inside,
``ks`` (occlusion, roughness, metallic) and normal maps are data (no transfer curve), normal maps are
stored as ``(n + 1) / 2``.

The sRGB transfer functions are ``meshlift.shading.color``'s (IEC 61966-2-1), wrapped for numpy arrays.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np
import torch

from meshlift.errors import ImageError


def srgb_to_linear_np(x: np.ndarray) -> np.ndarray:
    """sRGB decode of ``x`` (any shape, clipped to [0, 1]) -> linear float32 (``meshlift.shading.color``)."""
    from meshlift.shading.color import srgb_to_linear

    x = np.clip(np.asarray(x, dtype=np.float32), 0.0, 1.0)
    return srgb_to_linear(torch.from_numpy(x)).numpy()


def linear_to_srgb_np(x: np.ndarray) -> np.ndarray:
    """sRGB encode of linear ``x`` (any shape, clipped to [0, 1]) -> float32 (``meshlift.shading.color``)."""
    from meshlift.shading.color import linear_to_srgb

    x = np.clip(np.asarray(x, dtype=np.float32), 0.0, 1.0)
    return linear_to_srgb(torch.from_numpy(x)).numpy()


def decode_image_bytes(data: bytes, what: str) -> np.ndarray:
    """Decode PNG/JPEG bytes to float32 ``[H, W, C]`` in [0, 1] (16-bit / 65535, 8-bit / 255)."""
    from PIL import Image

    try:
        img = Image.open(io.BytesIO(data))
        img.load()
    except Exception as exc:  # PIL raises many types
        raise ImageError(f"{what}: cannot decode image ({exc}); re-save it as PNG or JPEG") from exc
    return _pil_to_float(img)


def _pil_to_float(img) -> np.ndarray:
    mode = img.mode
    if mode in ("I;16", "I;16B", "I;16L", "I"):
        arr = np.asarray(img, dtype=np.float64)
        scale = 65535.0 if mode.startswith("I;16") or arr.max() > 255 else 255.0
        arr = (arr / scale)[..., None]
    else:
        if mode not in ("L", "LA", "RGB", "RGBA"):
            img = img.convert("RGBA" if "A" in mode or "transparency" in img.info else "RGB")
        arr = np.asarray(img)
        if arr.dtype == np.uint16:
            arr = arr.astype(np.float32) / np.float32(65535.0)
        else:
            arr = arr.astype(np.float32) / np.float32(255.0)
        if arr.ndim == 2:
            arr = arr[..., None]
    return arr.astype(np.float32)


def read_image_file(path: Path, what: str) -> np.ndarray:
    """Read a texture file to float32 ``[H, W, C]`` in [0, 1]; raises ImageError naming ``path``."""
    path = Path(path)
    if not path.is_file():
        raise ImageError(f"{what}: texture file {path} does not exist; fix the path in the material file")
    from meshlift.io.images import read_image  # 16-bit PNGs, EXIF, palettes handled there

    try:
        return read_image(path).numpy()
    except ImageError as exc:
        raise ImageError(f"{what}: {exc}") from exc


def encode_png(arr: np.ndarray) -> bytes:
    """Encode float ``[H, W, C]`` in [0, 1] (C in 1, 3, 4) as 8-bit PNG bytes."""
    from PIL import Image

    a = np.asarray(arr, dtype=np.float32)
    if a.ndim == 3 and a.shape[-1] == 1:
        a = a[..., 0]
    u8 = np.clip(np.rint(np.nan_to_num(a) * 255.0), 0, 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(u8).save(buf, format="PNG")
    return buf.getvalue()


def encode_pngs(arrays: list[np.ndarray]) -> list[bytes]:
    """:func:`encode_png` of each array, on up to one thread per CPU core (zlib releases the GIL: a 2048²
    map takes about 1–2 s on one core); the same bytes as encoding them one by one."""
    if len(arrays) <= 1:
        return [encode_png(a) for a in arrays]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=min(len(arrays), os.cpu_count() or 1)) as pool:
        return list(pool.map(encode_png, arrays))


def kd_to_file(kd: torch.Tensor) -> np.ndarray:
    """Material ``kd`` (linear, ``[H, W, 3|4]``) -> sRGB-encoded array (alpha stays linear)."""
    a = kd.detach().cpu().float().numpy()
    out = a.copy()
    out[..., :3] = linear_to_srgb_np(a[..., :3])
    return np.clip(out, 0.0, 1.0)


def kd_from_file(arr: np.ndarray) -> torch.Tensor:
    """sRGB file texture ``[H, W, C]`` -> linear ``kd`` ``[H, W, 3|4]`` (grey expanded to RGB)."""
    arr = _expand_channels(arr, keep_alpha=True)
    out = arr.copy()
    out[..., :3] = srgb_to_linear_np(arr[..., :3])
    return torch.from_numpy(out.astype(np.float32))


def data_from_file(arr: np.ndarray) -> torch.Tensor:
    """Data texture (ks ORM) file ``[H, W, C]`` -> ``[H, W, 3]`` float tensor, no transfer curve."""
    return torch.from_numpy(_expand_channels(arr, keep_alpha=False)[..., :3].astype(np.float32))


def normal_from_file(arr: np.ndarray) -> torch.Tensor:
    """Normal map file ``(n + 1) / 2`` -> ``[H, W, 3]`` tangent-space normals in [-1, 1]."""
    return torch.from_numpy((_expand_channels(arr, keep_alpha=False)[..., :3] * 2.0 - 1.0).astype(np.float32))


def normal_to_file(normal: torch.Tensor) -> np.ndarray:
    """Tangent-space normals ``[H, W, 3]`` in [-1, 1] -> ``(n + 1) / 2`` for PNG."""
    return np.clip((normal.detach().cpu().float().numpy() + 1.0) * 0.5, 0.0, 1.0)


def _expand_channels(arr: np.ndarray, keep_alpha: bool) -> np.ndarray:
    c = arr.shape[-1]
    if c == 1:
        return np.repeat(arr, 3, axis=-1)
    if c == 2:  # grey + alpha
        rgb = np.repeat(arr[..., :1], 3, axis=-1)
        return np.concatenate([rgb, arr[..., 1:]], axis=-1) if keep_alpha else rgb
    if c == 4 and not keep_alpha:
        return arr[..., :3]
    return arr
