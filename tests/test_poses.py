"""`meshlift poses` end to end with pycolmap on a synthetic scene rendered by meshlift (known cameras).

Tolerances (16 views, 256², one SIMPLE_RADIAL camera): every view registers; after the Umeyama similarity
the median camera-centre error is at most 0.5% of the extent (diagonal of the cameras' bounding box) and
the largest at most 2%; the median rotation error is at most 0.5° and the largest at most 1.5°. (Measured
during development: 0.06% / 0.17% and 0.15° / 0.25°.)
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
from PIL import Image

pytest.importorskip("pycolmap", reason="the [poses] extra (pycolmap) is not installed")

from _poses_scene import cached_scene, snapshot, write_noise_image, write_rotated_jpeg  # noqa: E402
from meshlift.errors import DatasetError  # noqa: E402
from meshlift.poses import PosesOptions, ensure_posed, needs_poses, run_poses  # noqa: E402
from meshlift.poses.evaluate import compare_cameras  # noqa: E402

MEDIAN_CENTRE_PCT, MAX_CENTRE_PCT = 0.5, 2.0
MEDIAN_ROT_DEG, MAX_ROT_DEG = 0.5, 1.5


def _compare(out, ref_cams, name_to_index):
    from meshlift.data import load_scene

    est = load_scene(out, format="colmap")
    idx = [name_to_index[p.name] for p in est.image_paths]
    return est, compare_cameras(est.cameras.world_to_camera, ref_cams.world_to_camera[idx])


@pytest.fixture(scope="module")
def posed(tmp_path_factory):
    """One run over the 16 views, with view_05 stored rotated (EXIF orientation 6), a corrupt file and an
    unrelated image added: (input folder, output folder, report, reference cameras, name -> view index)."""
    folder, names, cams = cached_scene()
    root = tmp_path_factory.mktemp("poses")
    src = root / "photos"
    src.mkdir()
    index = {}
    for i, n in enumerate(names):
        if i == 5:
            write_rotated_jpeg(folder / n, src / "view_05.jpg")
            index["view_05.jpg"] = i
        else:
            shutil.copyfile(folder / n, src / n)
            index[n] = i
    masks = root / "masks"  # features only left of a black band over the right 12% of each view
    masks.mkdir()
    for i in range(len(names)):
        m = np.full((256, 256), 255, np.uint8)
        m[:, int(0.88 * 256):] = 0
        Image.fromarray(m).save(masks / f"view_{i:02d}.png")
    (src / "corrupt.jpg").write_bytes(b"\xff\xd8\xff\xe0" + b"\x00" * 64)
    write_noise_image(src / "stranger.png", size=256, seed=7)
    before = snapshot(src)
    out = root / "dataset"
    report = run_poses(src, out, PosesOptions(single_camera=True, write_transforms=True, num_threads=2,
                                                   mask_dir=masks))
    assert snapshot(src) == before, "the input folder was modified"
    return src, out, report, cams, index


def test_registers_every_view_and_recovers_cameras_up_to_a_similarity(posed):
    _, out, report, cams, index = posed
    assert report.total_images == 17  # 16 views + the stranger (corrupt.jpg skipped before matching)
    assert report.registered == 16
    assert report.mean_reprojection_error_px < 1.0 and report.mean_track_length > 2.5
    est, cmp = _compare(out, cams, index)
    assert len(est) == 16
    assert cmp.median_centre_error_pct <= MEDIAN_CENTRE_PCT
    assert 100 * float(cmp.centre_errors.max()) / cmp.extent <= MAX_CENTRE_PCT
    assert cmp.median_rotation_error_deg <= MEDIAN_ROT_DEG
    assert float(cmp.rotation_errors_deg.max()) <= MAX_ROT_DEG  # includes view_05, rotated upright first
    # the focal length is close to the renderer's (SIMPLE_RADIAL trades a little focal for k1)
    f_true = float(cams.fx[0])
    assert abs(float(est.source_cameras.fx[0]) - f_true) < 0.06 * f_true


def test_bad_inputs_are_named_in_the_report(posed):
    _, out, report, _, _ = posed
    assert report.skipped_inputs[0]["name"] == "corrupt.jpg"
    unreg = {u["name"]: u["reason"] for u in report.unregistered}
    assert list(unreg) == ["stranger.png"]
    assert "too few matches" in unreg["stranger.png"]
    text = " ".join(report.warnings)
    assert "corrupt.jpg" in text and "view_05.jpg" in text and "EXIF orientation" in text and "stranger.png" in text
    saved = json.loads((out / "poses_report.json").read_text())
    assert saved["registered"] == 16 and saved["unregistered"][0]["name"] == "stranger.png"


def test_output_is_a_dataset_every_reader_loads(posed, capsys):
    from meshlift.cli.main import main
    from meshlift.data import load_scene
    from meshlift.data.colmap import read_model

    _, out, _, _, _ = posed
    for f in ("cameras.bin", "images.bin", "points3D.bin"):
        assert (out / "sparse" / "0" / f).is_file()
    model = read_model(out / "sparse" / "0")
    assert len(model.images) == 16 and len(model.cameras) == 1 and len(model.points3D) > 300
    assert main(["inspect", str(out / "sparse" / "0"), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["format"] == "colmap" and info["num_images"] == 16
    # 256 px photos; a lens with distortion is undistorted and cut to its valid window (a few px at most)
    x0, _, x1, _ = info["undistort_crop"] or [0, 0, 256, 0]
    assert info["width"] == x1 - x0 and 256 - 8 <= info["width"] <= 256
    assert info["undistort_crop"] is None or (info["camera_model"] != "PINHOLE" and info["source_size"][0] == 256)
    # transforms.json describes the same cameras
    ngp = load_scene(out, format="instant-ngp")
    col = load_scene(out, format="colmap")
    assert [p.name for p in ngp.image_paths] == [p.name for p in col.image_paths]
    assert torch.allclose(ngp.cameras.world_to_camera, col.cameras.world_to_camera, atol=1e-5)
    assert torch.allclose(ngp.cameras.K, col.cameras.K, atol=1e-3)


def test_masks_restrict_features_and_travel_with_the_dataset(posed):
    import pycolmap

    from meshlift.data import load_scene

    _, out, report, _, _ = posed
    db = pycolmap.Database.open(str(out / "colmap" / "database.db"))
    try:
        for im in db.read_all_images():
            kp = np.asarray(db.read_keypoints(im.image_id))
            assert len(kp) > 50
            if im.name != "stranger.png":  # no mask for it: features everywhere
                assert float(kp[:, 0].max()) <= 0.88 * 256 + 1.0, im.name
    finally:
        db.close()
    assert any("stranger.png" in w and "no mask" in w for w in report.warnings)
    assert (out / "masks" / "view_00.png.png").is_file()
    assert load_scene(out, format="colmap").has_masks


def test_guards_on_the_output_folder(posed, tmp_path):
    src, out, _, _, _ = posed
    with pytest.raises(DatasetError, match="already holds poses output.*--overwrite"):
        run_poses(src, out)
    with pytest.raises(DatasetError, match="overlaps the input"):
        run_poses(src, src / "out")
    with pytest.raises(DatasetError, match="overlaps the input"):
        run_poses(src, src)


def test_images_that_do_not_overlap_give_a_clear_error(tmp_path, capsys):
    """Through the CLI, with every flag of the issue spelled out."""
    from meshlift.cli.main import main

    src = tmp_path / "unrelated"
    src.mkdir()
    for i in range(4):
        write_noise_image(src / f"noise_{i}.png", size=160, seed=100 + i)
    out = tmp_path / "out"
    rc = main(["poses", str(src), "--out", str(out), "--matcher", "sequential", "--camera-model", "OPENCV",
               "--single-camera", "--max-image-size", "160", "--fps", "2", "--max-frames", "50"])
    err = capsys.readouterr().err
    assert rc == 2 and "do not overlap" in err and "noise_0.png" in err
    saved = json.loads((out / "poses_report.json").read_text())
    assert saved["registered"] == 0 and len(saved["unregistered"]) == 4


def test_ensure_posed_passes_datasets_through_and_reuses_a_result(posed, tmp_path):
    src, out, _, _, _ = posed
    assert needs_poses(src) and not needs_poses(out) and not needs_poses(tmp_path / "mesh.obj")
    assert ensure_posed(out, tmp_path / "unused") == out
    messages = []
    assert ensure_posed(src, out, log=messages.append) == out  # same input: the earlier result is reused
    assert "reusing" in messages[0]


def test_reconstruct_poses_an_unposed_folder_first(posed, tmp_path, monkeypatch):
    """`meshlift reconstruct PHOTOS --out RUN` hands RUN/poses to the method (training stubbed out)."""
    import meshlift.methods.nvdiffrec.reconstruct as surface
    from meshlift.cli.main import main

    src, out, _, _, _ = posed
    run = tmp_path / "run"
    shutil.copytree(out, run / "poses")  # a result for this input, so no second SfM run here
    seen = {}

    class _Stop(Exception):
        pass

    def fake_reconstruct(cfg, out_dir, resume=False, overwrite=False, monitor=None):
        seen["data"] = cfg.data
        raise _Stop

    monkeypatch.setattr(surface, "reconstruct", fake_reconstruct)
    with pytest.raises(_Stop):
        main(["reconstruct", str(src), "--out", str(run), "--quick"])
    assert seen["data"] == str(run / "poses")


@pytest.mark.slow
def test_video_path_end_to_end(tmp_path):
    """A short synthetic clip: frames sampled (sharpest per window), a blurred window dropped, poses
    estimated with sequential matching."""
    import numpy as np
    from PIL import Image

    from test_poses_frames import _write_clip, video_frames

    folder, names, cams = cached_scene()
    views = [np.asarray(Image.open(folder / n).convert("RGB")) for n in names]
    clip = tmp_path / "orbit.mp4"
    _write_clip(clip, video_frames(views, blurred_after=9))
    out = tmp_path / "from_video"
    report = run_poses(clip, out, PosesOptions(fps=8.0, num_threads=2))
    assert report.matcher == "sequential" and report.total_images == 16
    assert [s for s in report.skipped_inputs if "blurry" in s["reason"]]
    assert report.registered == 16
    index = {f"frame_{w:05d}.jpg": (w if w <= 9 else w - 1) for w in range(len(names) + 1) if w != 10}
    _, cmp = _compare(out, cams, index)
    assert cmp.median_centre_error_pct <= 2 * MEDIAN_CENTRE_PCT  # video compression costs some accuracy
    assert cmp.median_rotation_error_deg <= 2 * MEDIAN_ROT_DEG
