"""meshlift.io.hdr: Radiance RGBE reader/writer (flat, new- and old-style RLE) and the optional OpenEXR path."""

import sys

import numpy as np
import pytest
import torch

from meshlift.errors import DependencyError, ImageError
from meshlift.io.hdr import read_hdr, write_hdr


def _rand_hdr(h, w, seed=0):
    rng = np.random.default_rng(seed)
    img = rng.lognormal(mean=0.0, sigma=2.0, size=(h, w, 3)).astype(np.float32)
    img[0, :3] = 0.0
    img[1, :20] = img[1, 0]  # long runs exercise the run-length encoder
    return img


@pytest.mark.parametrize("shape", [(5, 3), (7, 64), (4, 300)])
def test_roundtrip(tmp_path, shape):
    img = _rand_hdr(*shape)
    before = img.copy()
    p = write_hdr(tmp_path / "x.hdr", img)
    assert np.array_equal(img, before)  # input untouched
    back = read_hdr(p)
    assert back.dtype == np.float32 and back.shape == img.shape
    # RGBE keeps ~8 bits relative to the brightest channel of each pixel.
    tol = img.max(axis=-1, keepdims=True) / 128.0
    assert np.all(np.abs(back - img) <= tol)
    assert np.all(back[0, :3] == 0)


def test_rle_is_used_and_torch_input(tmp_path):
    img = torch.full((16, 64, 3), 0.25)
    p = write_hdr(tmp_path / "c.hdr", img)
    raw = p.read_bytes()
    assert raw.startswith(b"#?RADIANCE") and b"FORMAT=32-bit_rle_rgbe" in raw and b"-Y 16 +X 64\n" in raw
    assert len(raw) < 16 * 64 * 4 / 4  # constant scanlines compress to a few bytes each
    np.testing.assert_allclose(read_hdr(p), 0.25, rtol=1 / 128)


def _header(h, w, orient="-Y {h} +X {w}"):
    return b"#?RADIANCE\nFORMAT=32-bit_rle_rgbe\nEXPOSURE=1.0\n\n" + orient.format(h=h, w=w).encode() + b"\n"


def _val(m, e):
    return (m + 0.5) * 2.0 ** (e - 136)


def test_reads_flat_and_old_style_runs(tmp_path):
    # Width 3 < 8: flat pixels. Second row uses an old-style repeat marker (1, 1, 1, 2).
    px = [[100, 50, 25, 130], [10, 20, 30, 129], [0, 0, 0, 0],
          [200, 100, 50, 128], [1, 1, 1, 2]]
    p = tmp_path / "flat.hdr"
    p.write_bytes(_header(2, 3) + bytes(sum(px, [])))
    img = read_hdr(p)
    np.testing.assert_allclose(img[0, 0], [_val(100, 130), _val(50, 130), _val(25, 130)], rtol=1e-6)
    np.testing.assert_allclose(img[0, 1], [_val(10, 129), _val(20, 129), _val(30, 129)], rtol=1e-6)
    assert np.all(img[0, 2] == 0)
    np.testing.assert_allclose(img[1], np.tile([_val(200, 128), _val(100, 128), _val(50, 128)], (3, 1)), rtol=1e-6)


def test_reads_handmade_new_rle_and_orientation(tmp_path):
    w = 8
    line = bytes([2, 2, 0, w])
    line += bytes([128 + 8, 64])  # R: run of 8 x 64
    line += bytes([3, 1, 2, 3, 128 + 5, 9])  # G: literal 1 2 3, then run of 5 x 9
    line += bytes([8] + list(range(8)))  # B: literal 0..7
    line += bytes([128 + 8, 129])  # E: 129 everywhere
    second = bytes([2, 2, 0, w, 128 + 8, 0, 128 + 8, 0, 128 + 8, 0, 128 + 8, 0])  # black row
    p = tmp_path / "rle.hdr"
    p.write_bytes(_header(2, w) + line + second)
    img = read_hdr(p)
    np.testing.assert_allclose(img[0, :, 0], _val(64, 129), rtol=1e-6)
    np.testing.assert_allclose(img[0, :, 1], [_val(m, 129) for m in (1, 2, 3, 9, 9, 9, 9, 9)], rtol=1e-6)
    np.testing.assert_allclose(img[0, :, 2], [_val(m, 129) for m in range(8)], rtol=1e-6)
    assert np.all(img[1] == 0)
    # "+Y H +X W" stores the bottom row first: the reader flips it so row 0 is on top.
    q = tmp_path / "flip.hdr"
    q.write_bytes(_header(2, w, "+Y {h} +X {w}") + line + second)
    np.testing.assert_array_equal(read_hdr(q), img[::-1])


def test_errors(tmp_path):
    with pytest.raises(ImageError, match="no such"):
        read_hdr(tmp_path / "missing.hdr")
    bad = tmp_path / "bad.hdr"
    bad.write_bytes(b"P6\n1 1\n255\n\x00\x00\x00")
    with pytest.raises(ImageError, match="signature"):
        read_hdr(bad)
    xyz = tmp_path / "xyz.hdr"
    xyz.write_bytes(b"#?RADIANCE\nFORMAT=32-bit_rle_xyze\n\n-Y 1 +X 1\n\x00\x00\x00\x00")
    with pytest.raises(ImageError, match="xyze"):
        read_hdr(xyz)
    trunc = tmp_path / "trunc.hdr"
    trunc.write_bytes(_header(2, 8) + bytes([2, 2, 0, 8, 128 + 8]))
    with pytest.raises(ImageError, match="truncated|corrupt"):
        read_hdr(trunc)
    with pytest.raises(ImageError, match="extension"):
        read_hdr(tmp_path / "x.png")
    with pytest.raises(ImageError, match=r"\[H, W, 3\]"):
        write_hdr(tmp_path / "y.hdr", np.zeros((4, 4)))


def test_exr_roundtrip(tmp_path):
    pytest.importorskip("OpenEXR")
    img = _rand_hdr(6, 10)
    p = write_hdr(tmp_path / "x.exr", img)
    np.testing.assert_array_equal(read_hdr(p), img)


def test_exr_missing_dependency(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "OpenEXR", None)  # makes "import OpenEXR" raise ImportError
    with pytest.raises(DependencyError, match="pip install OpenEXR"):
        write_hdr(tmp_path / "x.exr", np.zeros((2, 2, 3), np.float32))
