"""HDR images: Radiance ``.hdr`` (RGBE, read and write, incl. run-length encoding) and OpenEXR ``.exr``.

HDR images hold linear radiance, never clamped (docs/conventions.md §6); lat-long environment probes
follow §8.

Radiance RGBE (Ward 1991, "Real Pixels", Graphics Gems II; the Radiance file-format notes): a text
header starting ``#?RADIANCE`` (or ``#?RGBE``) with ``FORMAT=32-bit_rle_rgbe``, a blank line, a resolution
line (``-Y H +X W`` is the standard top-to-bottom, left-to-right order), then scanlines of 4-byte pixels
(R, G, B mantissas sharing the exponent E: ``value = (m + 0.5) 2^(E - 136)``, E = 0 is black). Scanlines
of width 8..32767 are usually "new-style" run-length encoded: the bytes ``2, 2, W >> 8, W & 255``, then
each of the four components separately as runs (a count byte > 128 repeats the next byte count - 128
times; otherwise count literal bytes follow). Flat scanlines and old-style repeat markers
(``1, 1, 1, n``) are read too. ``EXPOSURE`` header lines are ignored (values are returned as stored).

OpenEXR goes through the optional ``OpenEXR`` wheel (BSD-3-Clause; ``pip install OpenEXR``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Union

import numpy as np

from meshlift.errors import ImageError

__all__ = ["read_hdr", "write_hdr", "read_rgbe", "write_rgbe", "read_exr", "write_exr", "read_light", "write_light"]

_PathLike = Union[str, Path]


# ---------------------------------------------------------------------------------------------------
# Radiance RGBE
# ---------------------------------------------------------------------------------------------------


def _float_to_rgbe(img: np.ndarray) -> np.ndarray:
    """``[H, W, 3]`` float -> ``[H, W, 4]`` uint8 RGBE (negatives and NaN become 0)."""
    rgb = np.nan_to_num(np.asarray(img, dtype=np.float64), nan=0.0, posinf=0.0, neginf=0.0)
    rgb = np.maximum(rgb, 0.0)
    v = rgb.max(axis=-1)
    mant, exp = np.frexp(v)  # v = mant * 2^exp, mant in [0.5, 1)
    ok = v >= 1e-32
    scale = np.where(ok, mant * 256.0 / np.where(ok, v, 1.0), 0.0)
    out = np.zeros(rgb.shape[:-1] + (4,), dtype=np.uint8)
    out[..., :3] = np.clip(np.floor(rgb * scale[..., None]), 0, 255).astype(np.uint8)
    out[..., 3] = np.where(ok, np.clip(exp + 128, 0, 255), 0).astype(np.uint8)
    return out


def _rgbe_to_float(rgbe: np.ndarray) -> np.ndarray:
    """``[H, W, 4]`` uint8 -> ``[H, W, 3]`` float32 (Ward's ``colr_color``: (m + 0.5) 2^(E - 136))."""
    e = rgbe[..., 3].astype(np.int32)
    f = np.where(e > 0, np.ldexp(1.0, e - (128 + 8)), 0.0)
    return ((rgbe[..., :3].astype(np.float64) + 0.5) * f[..., None]).astype(np.float32)


def _read_header(data: bytes, path: Path) -> tuple[int, int, int, bool, bool]:
    """Parse the header; returns (pixel data offset, height, width, flip_rows, flip_cols)."""
    if not (data.startswith(b"#?RADIANCE") or data.startswith(b"#?RGBE")):
        raise ImageError(f"{path}: not a Radiance .hdr file (missing '#?RADIANCE' signature)")
    pos = 0
    fmt = None
    while True:
        end = data.find(b"\n", pos)
        if end < 0:
            raise ImageError(f"{path}: truncated .hdr header (no blank line before the resolution line)")
        line = data[pos:end].strip()
        pos = end + 1
        if not line:
            break
        if line.startswith(b"FORMAT="):
            fmt = line[7:].decode("ascii", "replace")
    if fmt is not None and fmt != "32-bit_rle_rgbe":
        raise ImageError(f"{path}: unsupported .hdr pixel format {fmt!r}; only 32-bit_rle_rgbe (RGB) is read")
    end = data.find(b"\n", pos)
    if end < 0:
        raise ImageError(f"{path}: truncated .hdr file (no resolution line)")
    parts = data[pos:end].decode("ascii", "replace").split()
    pos = end + 1
    if len(parts) != 4 or parts[0] not in ("-Y", "+Y") or parts[2] not in ("+X", "-X"):
        raise ImageError(
            f"{path}: unsupported .hdr resolution line {' '.join(parts)!r}; expected '-Y H +X W' "
            "(or with +Y / -X); column-major orientations are not supported"
        )
    try:
        h, w = int(parts[1]), int(parts[3])
    except ValueError:
        raise ImageError(f"{path}: bad .hdr resolution line {' '.join(parts)!r}") from None
    if h <= 0 or w <= 0:
        raise ImageError(f"{path}: bad .hdr image size {w}x{h}")
    return pos, h, w, parts[0] == "+Y", parts[2] == "-X"


def _decode_scanline(data: memoryview, pos: int, w: int, prev: np.ndarray | None, path: Path) -> tuple[np.ndarray, int]:
    """Decode one scanline starting at ``pos``; returns (``[W, 4]`` uint8, new position)."""
    n = len(data)
    if 8 <= w <= 0x7FFF and pos + 4 <= n and data[pos] == 2 and data[pos + 1] == 2 and not (data[pos + 2] & 0x80):
        if ((data[pos + 2] << 8) | data[pos + 3]) != w:
            raise ImageError(f"{path}: corrupt .hdr scanline (run-length width does not match the image width {w})")
        pos += 4
        line = np.empty((4, w), dtype=np.uint8)
        for c in range(4):
            x = 0
            row = line[c]
            while x < w:
                if pos >= n:
                    raise ImageError(f"{path}: truncated .hdr pixel data")
                count = data[pos]
                pos += 1
                if count > 128:
                    count -= 128
                    if x + count > w or pos >= n:
                        raise ImageError(f"{path}: corrupt .hdr run (overruns the scanline)")
                    row[x : x + count] = data[pos]
                    pos += 1
                else:
                    if count == 0 or x + count > w or pos + count > n:
                        raise ImageError(f"{path}: corrupt .hdr run (bad literal count {count})")
                    row[x : x + count] = np.frombuffer(data[pos : pos + count], dtype=np.uint8)
                    pos += count
                x += count
        return line.T.copy(), pos
    # Flat pixels, possibly with old-style run markers (1, 1, 1, n): repeat the previous pixel.
    out = np.empty((w, 4), dtype=np.uint8)
    x = 0
    shift = 0
    last = prev[-1] if prev is not None else np.zeros(4, dtype=np.uint8)
    while x < w:
        if pos + 4 > n:
            raise ImageError(f"{path}: truncated .hdr pixel data")
        px = np.frombuffer(data[pos : pos + 4], dtype=np.uint8)
        pos += 4
        if px[0] == 1 and px[1] == 1 and px[2] == 1:
            count = int(px[3]) << shift
            if x + count > w:
                raise ImageError(f"{path}: corrupt .hdr old-style run (overruns the scanline)")
            out[x : x + count] = last
            x += count
            shift += 8
        else:
            out[x] = px
            last = px
            x += 1
            shift = 0
    return out, pos


def read_rgbe(path: _PathLike) -> np.ndarray:
    """Read a Radiance RGBE ``.hdr`` image.

    Args:
        path: file path.

    Returns:
        ``[H, W, 3]`` float32 linear radiance, row 0 on top.

    Raises:
        ImageError: missing, unreadable or malformed file, or an unsupported variant (XYZE pixels,
            column-major orientation).
    """
    path = Path(path)
    if not path.is_file():
        raise ImageError(f"{path}: no such .hdr file")
    data = path.read_bytes()
    pos, h, w, flip_rows, flip_cols = _read_header(data, path)
    mv = memoryview(data)
    img = np.empty((h, w, 4), dtype=np.uint8)
    prev = None
    for y in range(h):
        prev, pos = _decode_scanline(mv, pos, w, prev, path)
        img[y] = prev
    out = _rgbe_to_float(img)
    if flip_rows:
        out = out[::-1]
    if flip_cols:
        out = out[:, ::-1]
    return np.ascontiguousarray(out)


def _encode_channel(row: np.ndarray) -> bytes:
    """New-style RLE of one component of one scanline: runs of >= 4 equal bytes, literals otherwise."""
    w = row.shape[0]
    change = np.flatnonzero(np.diff(row.astype(np.int16))) + 1
    starts = np.concatenate([[0], change])
    lengths = np.diff(np.concatenate([starts, [w]]))
    out = bytearray()
    lit_start = 0

    def flush_literal(a: int, b: int) -> None:
        while a < b:
            k = min(128, b - a)
            out.append(k)
            out.extend(row[a : a + k].tobytes())
            a += k

    for s, length in zip(starts.tolist(), lengths.tolist()):
        if length >= 4:
            flush_literal(lit_start, s)
            left = length
            while left > 0:
                k = min(127, left)
                if k < 4 and left != length:  # a short tail of a long run: emit as literal
                    out.append(k)
                    out.extend(row[s : s + k].tobytes())
                else:
                    out.append(128 + k)
                    out.append(int(row[s]))
                s += k
                left -= k
            lit_start = s
    flush_literal(lit_start, w)
    return bytes(out)


def write_rgbe(path: _PathLike, img) -> Path:
    """Write ``[H, W, 3]`` linear radiance as a run-length-encoded Radiance ``.hdr``.

    Negative values and NaN are stored as 0 (RGBE cannot represent them); the relative precision is
    about 1/256 of the brightest channel of each pixel.

    Args:
        path: output file (parent folders are created).
        img: ``[H, W, 3]`` (or ``[H, W, 4]``, alpha dropped) numpy array or torch tensor.

    Returns:
        The path written.

    Raises:
        ImageError: bad shape.
    """
    arr = _as_array(img, "write_rgbe(img)")
    path = Path(path)
    h, w = arr.shape[:2]
    rgbe = _float_to_rgbe(arr)
    chunks = [b"#?RADIANCE\n# written by meshlift\nFORMAT=32-bit_rle_rgbe\n\n", f"-Y {h} +X {w}\n".encode("ascii")]
    if 8 <= w <= 0x7FFF:
        head = bytes([2, 2, w >> 8, w & 0xFF])
        for y in range(h):
            chunks.append(head)
            for c in range(4):
                chunks.append(_encode_channel(rgbe[y, :, c]))
    else:
        chunks.append(rgbe.tobytes())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(chunks))
    return path


# ---------------------------------------------------------------------------------------------------
# OpenEXR (optional dependency)
# ---------------------------------------------------------------------------------------------------


def _openexr():
    from meshlift._deps import require

    return require("OpenEXR")


def read_exr(path: _PathLike) -> np.ndarray:
    """Read an OpenEXR image's RGB (or luminance Y, replicated) channels as ``[H, W, 3]`` float32.

    Raises:
        DependencyError: the ``OpenEXR`` package is missing.
        ImageError: missing file or no RGB / Y channels.
    """
    path = Path(path)
    if not path.is_file():
        raise ImageError(f"{path}: no such .exr file")
    exr = _openexr()
    try:
        with exr.File(str(path)) as f:
            channels = {k: np.asarray(v.pixels) for k, v in f.channels().items()}
    except Exception as e:  # the binding raises plain exceptions on malformed files
        raise ImageError(f"{path}: cannot read .exr file ({e})") from e
    for key in ("RGB", "RGBA"):
        if key in channels:
            return np.ascontiguousarray(channels[key][..., :3].astype(np.float32))
    if all(k in channels for k in ("R", "G", "B")):
        return np.stack([channels[k] for k in ("R", "G", "B")], axis=-1).astype(np.float32)
    if "Y" in channels:
        y = channels["Y"].astype(np.float32)
        return np.repeat(y[..., None], 3, axis=-1)
    raise ImageError(f"{path}: .exr has no RGB or Y channels (found {sorted(channels)}); export RGB from your tool")


def write_exr(path: _PathLike, img, half: bool = False) -> Path:
    """Write ``[H, W, 3]`` linear radiance as a ZIP-compressed OpenEXR (float32, or half with ``half``).

    Raises:
        DependencyError: the ``OpenEXR`` package is missing.
        ImageError: bad shape.
    """
    exr = _openexr()
    arr = _as_array(img, "write_exr(img)").astype(np.float16 if half else np.float32)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    header = {"compression": exr.ZIP_COMPRESSION, "type": exr.scanlineimage}
    with exr.File(header, {"RGB": np.ascontiguousarray(arr)}) as f:
        f.write(str(path))
    return path


# ---------------------------------------------------------------------------------------------------
# Dispatch
# ---------------------------------------------------------------------------------------------------


def _as_array(img, name: str) -> np.ndarray:
    if hasattr(img, "detach"):  # torch tensor
        img = img.detach().cpu().numpy()
    arr = np.asarray(img)
    if arr.ndim != 3 or arr.shape[-1] not in (3, 4):
        raise ImageError(f"{name}: expected an [H, W, 3] image, got shape {tuple(arr.shape)}")
    if not np.issubdtype(arr.dtype, np.floating):
        raise ImageError(f"{name}: expected float linear radiance, got {arr.dtype}")
    return arr[..., :3]


def read_hdr(path: _PathLike) -> np.ndarray:
    """Read an HDR image (``.hdr`` Radiance RGBE or ``.exr`` OpenEXR) as ``[H, W, 3]`` float32 linear radiance.

    Raises:
        ImageError: missing/malformed file or an unknown extension.
        DependencyError: ``.exr`` without the ``OpenEXR`` package.
    """
    path = Path(path)
    ext = path.suffix.lower()
    if ext in (".hdr", ".rgbe", ".pic"):
        return read_rgbe(path)
    if ext == ".exr":
        return read_exr(path)
    raise ImageError(f"{path}: unknown HDR image extension {ext!r}; use .hdr (Radiance) or .exr (OpenEXR)")


def write_hdr(path: _PathLike, img) -> Path:
    """Write ``[H, W, 3]`` linear radiance (numpy or torch) to ``.hdr`` (Radiance RGBE) or ``.exr``.

    Returns:
        The path written.

    Raises:
        ImageError: bad shape/dtype or an unknown extension.
        DependencyError: ``.exr`` without the ``OpenEXR`` package.
    """
    path = Path(path)
    ext = path.suffix.lower()
    if ext in (".hdr", ".rgbe", ".pic"):
        return write_rgbe(path, img)
    if ext == ".exr":
        return write_exr(path, img)
    raise ImageError(f"{path}: unknown HDR image extension {ext!r}; use .hdr (Radiance) or .exr (OpenEXR)")


def read_light(path: Union[str, Path], res: int = 256, scale: float = 1.0, **kwargs):
    """Load a lat-long ``.hdr`` / ``.exr`` probe (:func:`read_hdr`) as a
    :class:`meshlift.shading.light.EnvironmentLight` with cube faces of ``res`` pixels.

    Args:
        path: image file (linear radiance, conventions §8).
        res: cube face size.
        scale: multiplies the radiance.
        **kwargs: forwarded to the light's constructor (e.g. ``trainable=False`` for a fixed light).
    """
    from meshlift.shading.light import EnvironmentLight

    return EnvironmentLight.from_latlong(read_hdr(path) * float(scale), res, **kwargs)


def write_light(path: Union[str, Path], light, height: int = 256) -> Path:
    """Write an environment light's base map as a lat-long Radiance ``.hdr`` (or ``.exr``) probe of
    ``height`` rows; returns the path."""
    return write_hdr(path, light.to_latlong(height).cpu().numpy())
