"""`meshlift poses` names the cause when there is nothing to triangulate (issue 31, class 5): identical or
near-identical photos (copies, a camera that did not move) are caught before structure from motion; a failed
model is explained as too few features, no overlap, or too little parallax (images that match but give no
baseline). Inputs are never written to."""

from __future__ import annotations

import shutil
from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image

from _poses_scene import snapshot, write_noise_image
from meshlift.errors import DatasetError
from meshlift.poses.frames import near_duplicate_groups, prepare_frames, thumbnail


def _copies(tmp_path, n: int, distinct: int = 1):
    src = tmp_path / "photos"
    src.mkdir()
    for i in range(distinct):
        write_noise_image(src / f"a{i}.png", size=128, seed=10 + i)
    for i in range(n - distinct):
        shutil.copyfile(src / "a0.png", src / f"copy{i}.png")
    return src


def test_identical_photos_are_refused_before_matching_naming_the_cause(tmp_path):
    src = _copies(tmp_path, 5)
    before = snapshot(src)
    with pytest.raises(DatasetError, match=r"the 5 photos show only 1 distinct picture\(s\) \(a0\.png = copy0\.png"
                                           r".*no parallax to triangulate"):
        prepare_frames(src, tmp_path / "images")
    assert snapshot(src) == before


def test_reencoded_copies_count_as_the_same_picture(tmp_path):
    src = tmp_path / "photos"
    src.mkdir()
    write_noise_image(src / "a.png", size=128, seed=3)
    im = Image.open(src / "a.png").convert("RGB")
    im.save(src / "b.jpg", quality=90)
    im.save(src / "c.jpg", quality=75)
    with pytest.raises(DatasetError, match="only 1 distinct picture"):
        prepare_frames(src, tmp_path / "images")


def test_a_few_duplicates_among_distinct_photos_are_a_warning(tmp_path):
    src = _copies(tmp_path, 6, distinct=4)  # a0 copied twice
    res = prepare_frames(src, tmp_path / "images")
    assert len(res.records) == 6
    dup = [w for w in res.warnings if "near-identical" in w]
    assert len(dup) == 1 and dup[0].startswith("2 of the 6 photos") and "a0.png = copy0.png = copy1.png" in dup[0]


def test_shifted_views_are_not_duplicates():
    """A view moved by 2% of the frame (a small camera move: parallax) is far from a copy."""
    rng = np.random.default_rng(0)
    big = np.asarray(Image.fromarray((rng.random((80, 80)) * 255).astype(np.uint8)).resize((800, 800), Image.BILINEAR))
    views = [big[:600, k * 12: k * 12 + 600] for k in range(4)]
    assert near_duplicate_groups([thumbnail(v) for v in views]) == []
    noisy = np.clip(views[0] + rng.normal(0, 3, views[0].shape), 0, 255)  # sensor noise on the same view
    assert near_duplicate_groups([thumbnail(views[0]), thumbnail(noisy), thumbnail(views[2])]) == [[0, 1]]


def test_the_cause_of_no_model_is_named():
    from meshlift.poses.pipeline import _no_model_cause

    names = ["a.png", "b.png", "c.png", "d.png"]

    def report(*reasons):
        return SimpleNamespace(unregistered=[{"name": n, "reason": r} for n, r in zip(names, reasons)])

    few = "few features (12 SIFT keypoints): textureless, dark or tiny"
    alone = "too few matches: no other image shares enough verified matches with it (it does not overlap the others)"
    weak = "too few matches with registered images (best pair 0 inlier matches; 30 needed)"
    assert _no_model_cause(report(few, few, few, weak), names).startswith("too few features: 3 of 4 images")
    msg = _no_model_cause(report(alone, alone, weak, weak), names)
    assert "do not overlap enough" in msg and "2 of 4 share no verified matches" in msg and "a.png, b.png" in msg
    msg = _no_model_cause(report(weak, weak, weak, weak), names)  # they match, nothing triangulates
    assert "too little parallax" in msg and "do not overlap" not in msg


def test_cli_names_duplicates_as_the_cause(tmp_path, capsys):
    pytest.importorskip("pycolmap", reason="meshlift poses needs the [poses] extra")
    from meshlift.cli.main import main

    src = _copies(tmp_path, 4)
    assert main(["poses", str(src), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "show only 1 distinct picture" in err and "camera did not move" in err and "Traceback" not in err
