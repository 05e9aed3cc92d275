"""`meshlift eval mesh|images`: JSON keys, background compositing, 16-bit images, errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from meshlift.cli.main import main


def _sphere_file(path, radius):
    import trimesh

    trimesh.creation.icosphere(subdivisions=3, radius=radius).export(path)


def test_eval_mesh_json(tmp_path, capsys):
    _sphere_file(tmp_path / "a.ply", 1.0)
    _sphere_file(tmp_path / "b.ply", 1.05)
    assert main(["eval", "mesh", str(tmp_path / "a.ply"), str(tmp_path / "b.ply"), "--samples", "20000",
                 "--threshold", "0.02", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    for k in ("chamfer_l1", "chamfer_l2", "precision", "recall", "fscore", "normal_consistency", "threshold"):
        assert k in res
    assert res["threshold"] == 0.02 and res["fscore"] == 0.0 and res["chamfer_l1"] == pytest.approx(0.05, rel=0.2)
    assert main(["eval", "mesh", str(tmp_path / "a.ply"), str(tmp_path / "b.ply"), "--samples", "20000",
                 "--threshold-frac", "0.05", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["threshold_frac"] == 0.05 and res["fscore"] > 0.9
    assert main(["eval", "mesh", str(tmp_path / "a.ply"), str(tmp_path / "b.ply"), "--samples", "5000"]) == 0
    assert "chamfer_l1" in capsys.readouterr().out
    assert main(["eval", "mesh", str(tmp_path / "a.ply"), str(tmp_path / "b.ply"), "--threshold", "1",
                 "--threshold-frac", "0.1"]) == 2
    capsys.readouterr()
    assert main(["eval", "mesh", str(tmp_path / "a.ply"), str(tmp_path / "b.ply"), "--samples", "0"]) == 2
    assert "--samples 0: must be a positive number" in capsys.readouterr().err


def _write_png(path, arr, bits=8):
    from PIL import Image

    if bits == 16:
        import png  # pypng, a meshlift dependency for 16-bit colour PNGs

        a = np.round(arr * 65535).astype(np.uint16)
        h, w, c = a.shape
        png.Writer(w, h, greyscale=False, alpha=c == 4, bitdepth=16).write(open(path, "wb"), a.reshape(h, w * c).tolist())
    else:
        Image.fromarray(np.round(arr * 255).astype(np.uint8)).save(path)


def test_eval_images_json_background_16bit(tmp_path, capsys):
    pytest.importorskip("png")
    rng = np.random.default_rng(0)
    (tmp_path / "pred").mkdir()
    (tmp_path / "gt").mkdir()
    rgb = rng.random((48, 40, 3))
    alpha = np.zeros((48, 40, 1))
    alpha[10:30, 10:30] = 1.0
    gt = np.concatenate([rgb, alpha], axis=-1)  # RGBA ground truth, transparent outside a square
    white = rgb * alpha + (1 - alpha)
    _write_png(tmp_path / "gt" / "a.png", gt, bits=16)
    _write_png(tmp_path / "pred" / "a.png", np.clip(white + 0.1 * (alpha > 0), 0, 1))  # offset inside only
    _write_png(tmp_path / "gt" / "b.png", rgb)
    _write_png(tmp_path / "pred" / "b.png", rgb)
    assert main(["eval", "images", str(tmp_path / "pred"), str(tmp_path / "gt"), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["background"] == "white" and res["num_images"] == 2
    per = {r["name"]: r for r in res["per_image"]}
    assert per["b"]["psnr"] is None or per["b"]["psnr"] > 60  # identical images: strict JSON null (issue 16)
    assert per["b"]["ssim"] == pytest.approx(1.0, abs=1e-6) and per["b"]["lpips"] == pytest.approx(0.0, abs=1e-6)
    assert per["a"]["lpips"] > 0 and 0 < per["a"]["ssim"] < 1
    # black background: the white-composited prediction now differs a lot outside the square
    assert main(["eval", "images", str(tmp_path / "pred"), str(tmp_path / "gt"), "--json", "--background", "black", "--no-lpips"]) == 0
    res_b = json.loads(capsys.readouterr().out)
    assert res_b["background"] == "black" and res_b["lpips"] is None
    assert res_b["per_image"][0]["psnr"] < per["a"]["psnr"] - 5


def test_eval_images_errors(tmp_path, capsys):
    (tmp_path / "p").mkdir()
    (tmp_path / "g").mkdir()
    _write_png(tmp_path / "p" / "x.png", np.zeros((20, 20, 3)))
    _write_png(tmp_path / "g" / "x.png", np.zeros((20, 24, 3)))
    assert main(["eval", "images", str(tmp_path / "p"), str(tmp_path / "g"), "--no-lpips"]) == 2
    assert "resolution" in capsys.readouterr().err
    _write_png(tmp_path / "g" / "y.png", np.zeros((20, 24, 3)))
    (tmp_path / "g" / "x.png").unlink()
    assert main(["eval", "images", str(tmp_path / "p"), str(tmp_path / "g")]) == 2
    assert "match" in capsys.readouterr().err
    assert main(["eval", "images", str(tmp_path / "p"), str(tmp_path / "g"), "--background", "green"]) == 2
