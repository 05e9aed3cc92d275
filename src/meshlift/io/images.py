"""Image files: read as float32 ``[H, W, C]`` in [0, 1], write 8-bit PNG (docs/conventions.md §6).

- 8-bit files are divided by 255 and 16-bit PNGs by 65535 (16-bit colour PNGs through ``pypng``, because
  Pillow reduces them to 8 bits); JPEG, grayscale, palette, RGBA are read with Pillow.
- EXIF orientation is applied on read (``PIL.ImageOps.exif_transpose``); :func:`image_size` reports the
  size after it, reading only the header.
- Values keep the file's encoding (sRGB for ordinary photos); :func:`srgb_to_linear` and
  :func:`linear_to_srgb` (re-exported from :mod:`meshlift.shading.color`) convert.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from meshlift.errors import ImageError
from meshlift.shading.color import linear_to_srgb, srgb_to_linear

__all__ = [
    "write_turntable",
    "read_image",
    "write_image",
    "image_size",
    "image_channels",
    "image_info",
    "resize_image",
    "srgb_to_linear",
    "linear_to_srgb",
    "IMAGE_EXTENSIONS",
]

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp")
"""File extensions (lower case) treated as images when listing folders."""

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_TRANSPOSED_ORIENTATIONS = (5, 6, 7, 8)  # EXIF orientations that swap width and height


def _png_header(path: Path) -> tuple[int, int] | None:
    """(bit depth, colour type) of a PNG file, or None if the file is not a PNG."""
    with open(path, "rb") as fh:
        head = fh.read(33)
    if not head.startswith(_PNG_SIGNATURE) or len(head) < 33 or head[12:16] != b"IHDR":
        return None
    return head[24], head[25]


def _open(path: Path):
    from PIL import Image, UnidentifiedImageError

    if not path.is_file():
        raise ImageError(f"image {path} does not exist (check the dataset folder and file names)")
    try:
        return Image.open(path)
    except (UnidentifiedImageError, OSError) as exc:
        raise ImageError(f"image {path} is not a readable image ({exc}); re-export or remove the file") from exc


def _exif_orientation(im) -> int:
    """EXIF orientation from the header; PNGs are not decoded to find an eXIf chunk after the pixels."""
    try:
        if im.format == "PNG":
            from PIL import Image

            raw = im.info.get("exif")
            if not raw:
                return 1
            exif = Image.Exif()
            exif.load(raw)
            return int(exif.get(0x0112, 1))
        return int(im.getexif().get(0x0112, 1))
    except Exception:  # noqa: BLE001  (broken EXIF blocks are common; treat as "no orientation")
        return 1


def image_size(path: str | Path) -> tuple[int, int]:
    """``(width, height)`` of an image file after EXIF orientation, reading only its header."""
    path = Path(path)
    with _open(path) as im:
        w, h = im.size
        if _exif_orientation(im) in _TRANSPOSED_ORIENTATIONS:
            w, h = h, w
    return int(w), int(h)


def _channels(im) -> int:
    mode = im.mode
    if mode == "P":
        return 4 if "transparency" in im.info else 3
    if mode in ("RGBA", "RGBa", "PA"):
        return 4
    if mode in ("LA", "La"):
        return 2
    if mode in ("RGB", "CMYK", "YCbCr", "LAB", "HSV"):
        return 3
    return 1


def image_channels(path: str | Path) -> int:
    """Number of channels :func:`read_image` returns for the file (1 gray, 2 gray+alpha, 3 RGB, 4 RGBA),
    from the header only."""
    with _open(Path(path)) as im:
        return _channels(im)


def image_info(path: str | Path) -> tuple[int, int, int]:
    """``(width, height, channels)`` as :func:`read_image` will return them, from one header read."""
    with _open(Path(path)) as im:
        w, h = im.size
        if _exif_orientation(im) in _TRANSPOSED_ORIENTATIONS:
            w, h = h, w
        return int(w), int(h), _channels(im)


def _read_png16(path: Path) -> np.ndarray:
    import png  # pypng

    try:
        w, h, rows, info = png.Reader(filename=str(path)).asDirect()
        arr = np.vstack([np.asarray(r, dtype=np.uint16) for r in rows])
    except Exception as exc:  # noqa: BLE001  (pypng raises its own FormatError / ChunkError)
        raise ImageError(f"image {path}: cannot decode 16-bit PNG ({exc}); re-export the file") from exc
    planes = int(info["planes"])
    return arr.reshape(h, w, planes).astype(np.float32) / 65535.0


def read_image(path: str | Path) -> torch.Tensor:
    """Read an image file as ``[H, W, C]`` float32 in [0, 1] (C = 1, 2, 3 or 4: gray, gray+alpha, RGB, RGBA).

    EXIF orientation is applied. 16-bit PNGs are divided by 65535, everything else by 255; palette
    images become RGB(A); the values are what the file stores (sRGB for photos), not linearised.

    Raises:
        ImageError: the file is missing, unreadable or truncated.
    """
    from PIL import ImageOps

    path = Path(path)
    hdr = _png_header(path) if path.is_file() else None
    if hdr is not None and hdr[0] == 16 and hdr[1] in (2, 4, 6):
        return torch.from_numpy(np.ascontiguousarray(_read_png16(path)))
    with _open(path) as im:
        try:
            im = ImageOps.exif_transpose(im)
            mode = im.mode
            if mode == "P":
                im = im.convert("RGBA" if "transparency" in im.info else "RGB")
            elif mode == "1":
                im = im.convert("L")
            elif mode in ("CMYK", "YCbCr", "LAB", "HSV"):
                im = im.convert("RGB")
            elif mode in ("RGBa", "La", "PA"):
                im = im.convert("RGBA" if mode != "La" else "LA")
            arr = np.asarray(im)
        except OSError as exc:
            raise ImageError(f"image {path} is truncated or corrupt ({exc}); re-export or remove it") from exc
    if arr.dtype == np.uint8:
        out = arr.astype(np.float32) / 255.0
    elif arr.dtype in (np.uint16, np.dtype(">u2"), np.dtype("<u2")):
        out = arr.astype(np.float32) / 65535.0
    elif arr.dtype == np.int32:  # Pillow's mode "I" (16-bit gray PNGs are opened as I or I;16)
        out = arr.astype(np.float32) / (65535.0 if (hdr is not None and hdr[0] == 16) or arr.max() > 255 else 255.0)
    elif arr.dtype == np.bool_:
        out = arr.astype(np.float32)
    elif np.issubdtype(arr.dtype, np.floating):
        out = arr.astype(np.float32)
    else:
        raise ImageError(f"image {path}: unsupported pixel type {arr.dtype} (mode {mode})")
    if out.ndim == 2:
        out = out[..., None]
    return torch.from_numpy(np.ascontiguousarray(out))


def write_image(path: str | Path, image) -> None:
    """Write ``image`` (``[H, W]`` or ``[H, W, C]``, C in 1..4, float in [0, 1], tensor or array) as an 8-bit
    file (PNG unless the extension says otherwise). Values are clipped to [0, 1] and rounded.

    Raises:
        ImageError: bad shape or channel count, or the file cannot be written.
    """
    from PIL import Image

    path = Path(path)
    arr = image.detach().cpu().numpy() if isinstance(image, torch.Tensor) else np.asarray(image)
    if arr.ndim == 3 and arr.shape[2] == 1:
        arr = arr[..., 0]
    if arr.ndim not in (2, 3) or (arr.ndim == 3 and arr.shape[2] not in (2, 3, 4)):
        raise ImageError(f"write_image({path}): image must be [H, W] or [H, W, C<=4], got {list(arr.shape)}")
    if np.issubdtype(arr.dtype, np.integer) and arr.dtype != np.uint8:
        raise ImageError(f"write_image({path}): give floats in [0, 1] or uint8, got {arr.dtype}")
    if arr.dtype != np.uint8:
        arr = np.round(np.clip(np.nan_to_num(arr.astype(np.float32)), 0.0, 1.0) * 255.0).astype(np.uint8)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(arr).save(path)
    except (OSError, ValueError) as exc:
        raise ImageError(f"write_image: cannot write {path} ({exc})") from exc


def resize_image(image: torch.Tensor, width: int, height: int) -> torch.Tensor:
    """Resize ``[H, W, C]`` to ``[height, width, C]`` with an antialiased bilinear filter (area-like when
    shrinking), sampling at pixel centres (``align_corners=False``, docs/conventions.md §2)."""
    if image.ndim != 3:
        raise ImageError(f"resize_image expects [H, W, C], got {list(image.shape)}")
    if image.shape[0] == height and image.shape[1] == width:
        return image
    x = image.permute(2, 0, 1)[None].to(torch.float32)
    H, W = image.shape[:2]
    if H % height == 0 and W % width == 0 and H // height == W // width:
        y = torch.nn.functional.avg_pool2d(x, H // height)
    else:
        y = torch.nn.functional.interpolate(x, size=(height, width), mode="bilinear", align_corners=False,
                                            antialias=True)
    return y[0].permute(1, 2, 0).to(image.dtype).contiguous()


def write_turntable(out_dir: str | Path, frames: list, background: float = 1.0, *, fps: float = 12.0,
                    sheet_frames: int = 12, sheet_cols: int = 4) -> tuple[Path, Path]:
    """Write ``turntable.gif`` (looping, ``fps``) and ``contact_sheet.png`` (``sheet_frames`` evenly picked
    frames, ``sheet_cols`` per row, on the grey level ``background``) into ``out_dir``.

    Args:
        frames: ``[S, S, 3]`` sRGB images in [0, 1] (tensors or arrays), all the same square size.

    Returns:
        ``(gif path, contact sheet path)``.
    """
    import imageio.v2 as imageio

    out_dir = Path(out_dir)
    imgs = [(np.asarray(f) * 255 + 0.5).astype(np.uint8) for f in frames]
    if not imgs:
        raise ImageError("write_turntable: no frames to write")
    size = imgs[0].shape[0]
    out_dir.mkdir(parents=True, exist_ok=True)
    gif = out_dir / "turntable.gif"
    imageio.mimsave(gif, imgs, duration=1.0 / fps, loop=0)
    pick = imgs[:: max(1, len(imgs) // sheet_frames)][:sheet_frames]
    cols = min(sheet_cols, len(pick))
    rows = (len(pick) + cols - 1) // cols
    sheet = np.full((rows * size, cols * size, 3), int(background * 255), dtype=np.uint8)
    for k, im in enumerate(pick):
        r, c = divmod(k, cols)
        sheet[r * size:(r + 1) * size, c * size:(c + 1) * size] = im
    sheet_path = out_dir / "contact_sheet.png"
    imageio.imwrite(sheet_path, sheet)
    return gif, sheet_path
