"""meshlift.io.images: 8/16-bit PNG, JPEG, gray, RGBA, EXIF orientation, writing, errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from meshlift.errors import ImageError
from meshlift.io.images import (
    image_channels,
    image_size,
    linear_to_srgb,
    read_image,
    resize_image,
    srgb_to_linear,
    write_image,
)


def test_8bit_rgb_rgba_gray_png(tmp_path):
    rng = np.random.default_rng(0)
    for mode, shape in (("RGB", (5, 7, 3)), ("RGBA", (5, 7, 4)), ("L", (5, 7))):
        a = rng.integers(0, 256, shape, dtype=np.uint8)
        p = tmp_path / f"{mode}.png"
        Image.fromarray(a, mode).save(p)
        img = read_image(p)
        assert img.dtype == torch.float32
        assert img.shape == (5, 7, shape[2] if len(shape) == 3 else 1)
        np.testing.assert_allclose(img.numpy().reshape(a.shape), a / 255.0, atol=1e-7)
        assert image_channels(p) == img.shape[2]
        assert image_size(p) == (7, 5)


def test_16bit_png_rgb_and_gray(tmp_path):
    import png

    rng = np.random.default_rng(1)
    a = rng.integers(0, 65536, (4, 6, 3), dtype=np.uint16)
    png.from_array(a.reshape(4, -1), "RGB;16").save(str(tmp_path / "rgb16.png"))
    img = read_image(tmp_path / "rgb16.png")
    np.testing.assert_allclose(img.numpy(), a / 65535.0, atol=1e-7)  # full 16-bit precision kept
    g = rng.integers(0, 65536, (4, 6), dtype=np.uint16)
    Image.fromarray(g).save(tmp_path / "g16.png")
    np.testing.assert_allclose(read_image(tmp_path / "g16.png").numpy()[..., 0], g / 65535.0, atol=1e-7)


def test_jpeg_and_exif_orientation(tmp_path):
    a = np.zeros((10, 20, 3), np.uint8)
    a[:, :5] = 255  # white strip on the left
    im = Image.fromarray(a)
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 CW to display
    im.save(tmp_path / "rot.jpg", exif=exif, quality=95)
    assert image_size(tmp_path / "rot.jpg") == (10, 20)
    img = read_image(tmp_path / "rot.jpg")
    assert img.shape == (20, 10, 3)
    assert float(img[:5].mean()) > 0.9 and float(img[-5:].mean()) < 0.1  # left strip is now on top


def test_write_image_round_trip_and_clipping(tmp_path):
    x = torch.linspace(-0.5, 1.5, 24).reshape(2, 4, 3)
    write_image(tmp_path / "out.png", x)
    back = read_image(tmp_path / "out.png")
    np.testing.assert_allclose(back.numpy(), np.round(np.clip(x.numpy(), 0, 1) * 255) / 255, atol=1e-7)
    with pytest.raises(ImageError, match="must be"):
        write_image(tmp_path / "bad.png", np.zeros((2, 2, 5)))


def test_bad_files_raise(tmp_path):
    with pytest.raises(ImageError, match="does not exist"):
        read_image(tmp_path / "nope.png")
    (tmp_path / "junk.png").write_bytes(b"not an image")
    with pytest.raises(ImageError, match="not a readable image"):
        read_image(tmp_path / "junk.png")
    Image.fromarray(np.zeros((64, 64, 3), np.uint8)).save(tmp_path / "full.jpg")
    data = (tmp_path / "full.jpg").read_bytes()
    (tmp_path / "trunc.jpg").write_bytes(data[: len(data) // 3])
    with pytest.raises(ImageError, match="(?i)truncated"):
        read_image(tmp_path / "trunc.jpg")


def test_resize_and_srgb():
    img = torch.rand(8, 12, 3)
    small = resize_image(img, 6, 4)
    torch.testing.assert_close(small[0, 0], img[:2, :2].mean((0, 1)))
    x = torch.linspace(0, 1, 11)
    torch.testing.assert_close(linear_to_srgb(srgb_to_linear(x)), x, atol=1e-6, rtol=0)
