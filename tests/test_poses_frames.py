"""The poses step's input handling without pycolmap: photos, EXIF orientation, corrupt files, video
frames with blur rejection, options, and the missing-extra message."""

from __future__ import annotations

import shutil
import sys

import numpy as np
import pytest
from PIL import Image, ImageFilter

from _poses_scene import cached_scene, snapshot, write_noise_image, write_rotated_jpeg
from meshlift.errors import ConfigError, DatasetError, DependencyError
from meshlift.poses.frames import prepare_frames, sharpness
from meshlift.poses.options import PosesOptions


def _photos(tmp_path, n=5):
    src = tmp_path / "photos"
    src.mkdir()
    for i in range(n):
        write_noise_image(src / f"p{i}.png", size=96, seed=i)
    return src


def test_sharpness_ranks_blur_and_roughly_ignores_size():
    rng = np.random.default_rng(0)
    img = Image.fromarray((rng.random((64, 64)) * 255).astype(np.uint8)).resize((512, 512), Image.NEAREST)
    sharp = sharpness(np.asarray(img))
    blurred = sharpness(np.asarray(img.filter(ImageFilter.GaussianBlur(4))))
    big = sharpness(np.asarray(img.resize((1024, 1024), Image.NEAREST)))
    assert blurred < 0.2 * sharp
    assert 0.3 * sharp < big < 1.5 * sharp  # scored at a 512-pixel longest side: roughly comparable
    assert sharpness(np.full((40, 40), 7.0)) == 0.0


def test_photos_copied_upright_corrupt_skipped_input_untouched(tmp_path):
    src = _photos(tmp_path)
    write_rotated_jpeg(src / "p1.png", src / "rot.jpg")
    (src / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    before = snapshot(src)
    res = prepare_frames(src, tmp_path / "out" / "images")
    assert snapshot(src) == before
    names = [r.name for r in res.records]
    assert names == ["p0.png", "p1.png", "p2.png", "p3.png", "p4.png", "rot.jpg"]
    assert (tmp_path / "out/images/p0.png").read_bytes() == (src / "p0.png").read_bytes()  # copied as is
    # the rotated JPEG was written upright, without the orientation tag
    out = Image.open(tmp_path / "out/images/rot.jpg")
    assert out.getexif().get(0x0112, 1) == 1
    diff = np.abs(np.asarray(out.convert("RGB"), float) - np.asarray(Image.open(src / "p1.png").convert("RGB"), float))
    assert diff.mean() < 4.0
    assert [r.orientation for r in res.records if r.name == "rot.jpg"] == [6]
    assert any(n == "broken.jpg" for n, _ in res.skipped)
    assert {r.camera_key for r in res.records} == {""}  # no EXIF camera anywhere: one shared camera by default
    joined = " ".join(res.warnings)
    assert "broken.jpg" in joined and "EXIF orientation" in joined and "rot.jpg" in joined


def test_exif_camera_key_tells_cameras_apart(tmp_path):
    from meshlift.poses.frames import _camera_key

    exif = Image.Exif()
    exif[0x010F], exif[0x0110] = "Acme", "Phone 3"
    Image.new("RGB", (32, 32)).save(tmp_path / "a.jpg", exif=exif.tobytes())
    Image.new("RGB", (32, 32)).save(tmp_path / "b.jpg")
    assert "Acme" in _camera_key(Image.open(tmp_path / "a.jpg")) and _camera_key(Image.open(tmp_path / "b.jpg")) == ""


def test_odd_sized_images_are_skipped_and_named(tmp_path):
    src = _photos(tmp_path, 4)
    Image.new("RGB", (120, 80), (9, 9, 9)).save(src / "wide.png")
    res = prepare_frames(src, tmp_path / "images")
    assert "wide.png" not in [r.name for r in res.records]
    assert any("wide.png" in w and "120x80" in w for w in res.warnings)


def test_too_few_images(tmp_path):
    src = _photos(tmp_path, 2)
    with pytest.raises(DatasetError, match="at least 3"):
        prepare_frames(src, tmp_path / "images")
    (src / "bad.png").write_bytes(b"garbage")  # 3 files, 2 readable
    with pytest.raises(DatasetError, match="only 2 usable"):
        prepare_frames(src, tmp_path / "images2")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DatasetError, match="no image files"):
        prepare_frames(empty, tmp_path / "images3")
    with pytest.raises(DatasetError, match="not a video"):
        prepare_frames(src / "p0.png", tmp_path / "images4")


def _write_clip(path, frames, fps=24):
    iio = pytest.importorskip("imageio.v2")
    pytest.importorskip("imageio_ffmpeg", reason="imageio-ffmpeg (the [poses] extra) writes and reads mp4")
    with iio.get_writer(str(path), fps=fps, codec="libx264", quality=9, macro_block_size=16) as w:
        for f in frames:
            w.append_data(f)


def video_frames(views, blurred_after: int):
    """3 frames per view (sharp first, then two blurred), plus after view ``blurred_after`` one extra window
    of 3 blurred frames (which blur rejection must drop). Window ``w`` shows view ``w`` up to
    ``blurred_after`` and view ``w - 1`` after the extra window."""
    frames = []
    for i, v in enumerate(views):
        soft = np.asarray(Image.fromarray(v).filter(ImageFilter.GaussianBlur(3)))
        frames += [v, soft, soft]
        if i == blurred_after:
            frames += [soft, soft, soft]
    return frames


def scene_views(n=16):
    folder, names, _ = cached_scene()
    return [np.asarray(Image.open(folder / n_).convert("RGB")) for n_ in names[:n]]


def test_video_sampling_keeps_sharpest_frame_per_window_and_drops_blur(tmp_path):
    views = scene_views()
    clip = tmp_path / "clip.mp4"
    _write_clip(clip, video_frames(views, blurred_after=7))
    res = prepare_frames(clip, tmp_path / "images", PosesOptions(fps=8.0))
    assert res.is_video
    assert len(res.records) == 16  # one per 3-frame window, minus the blurred window
    assert [why for _, why in res.skipped if "blurry" in why] and len(res.skipped) == 1
    kept = {r.name for r in res.records}
    assert "frame_00008.jpg" not in kept and {"frame_00007.jpg", "frame_00009.jpg"} <= kept
    # the kept frame of each window is the sharp one (the first of its window)
    assert all(abs(float(r.source.split("@ ")[1].split(" s")[0]) * 8.0 - round(float(r.source.split("@ ")[1].split(" s")[0]) * 8.0)) < 0.05
               for r in res.records)
    thin = prepare_frames(clip, tmp_path / "images_thin", PosesOptions(fps=8.0, max_frames=5))
    assert len(thin.records) <= 5


def test_undecodable_video_is_named(tmp_path):
    pytest.importorskip("imageio_ffmpeg", reason="imageio-ffmpeg (the [poses] extra) decodes videos")
    bad = tmp_path / "broken.mp4"
    bad.write_bytes(b"\x00\x00\x00\x18ftypmp42" + bytes(range(256)) * 20)
    with pytest.raises(DatasetError, match="broken.mp4"):
        prepare_frames(bad, tmp_path / "images")


def test_options_are_validated(tmp_path):
    with pytest.raises(ConfigError, match="matcher"):
        PosesOptions(matcher="fast")
    with pytest.raises(ConfigError, match="camera_model"):
        PosesOptions(camera_model="THIN_PRISM")
    with pytest.raises(ConfigError, match="vocabulary-tree file.*downloads nothing"):
        PosesOptions(matcher="vocabtree")
    with pytest.raises(ConfigError, match="does not exist"):
        PosesOptions(matcher="vocabtree", vocab_tree=tmp_path / "tree.bin")
    with pytest.raises(ConfigError, match="max_frames"):
        PosesOptions(max_frames=2)


def test_missing_pycolmap_gives_the_install_command(tmp_path, monkeypatch, capsys):
    from meshlift.cli.main import main
    from meshlift.poses.sfm import require_pycolmap

    monkeypatch.setitem(sys.modules, "pycolmap", None)  # import pycolmap -> ImportError
    with pytest.raises(DependencyError, match=r"pip install 'meshlift\[poses\]'"):
        require_pycolmap()
    src = _photos(tmp_path, 3)
    rc = main(["poses", str(src), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2 and "pip install 'meshlift[poses]'" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()  # nothing written before the check

    from meshlift.poses import ensure_posed

    with pytest.raises(DependencyError, match="without camera poses.*meshlift\\[poses\\]"):
        ensure_posed(src, tmp_path / "run" / "poses")
    shutil.rmtree(src)
    two = _photos(tmp_path, 2)  # too few photos: said first, no install would help
    with pytest.raises(DatasetError, match="only 2 image.*at least 3"):
        ensure_posed(two, tmp_path / "run2" / "poses")


def test_image_pairs_exhaustive_and_sequential():
    from meshlift.poses.sfm import image_pairs

    names = [f"f{i:02d}" for i in range(40)]
    ex = image_pairs(names, "exhaustive")
    assert len(ex) == 40 * 39 // 2 and len(set(ex)) == len(ex)
    seq = image_pairs(names, "sequential", overlap=3)
    d = sorted({int(b[1:]) - int(a[1:]) for a, b in seq})
    assert d == [1, 2, 3, 4, 8, 16, 32]  # neighbours, then quadratic loop-closing distances
    assert ("f00", "f01") in seq and ("f36", "f39") in seq and ("f00", "f05") not in seq
    with pytest.raises(DatasetError):
        image_pairs(names, "vocabtree")
