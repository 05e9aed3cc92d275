"""Shared by the CLI/method tests: the tiny surface-method overrides, a torus mesh file, and a copy of a
Blender dataset whose transforms.json holds OpenCV camera axes (a convention error to detect)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

#: Overrides that make a surface-method run take seconds on one CPU core.
TINY = ["train_res=32", "grid_res=12", "iter_pass1=3", "iter_pass2=2", "ref_views=4", "ref_test_views=1",
        "texture_res=32", "env_res=8", "eval_samples=2000", "val_views=1", "batch=1", "device=cpu",
        "hash_levels=4", "hash_log2_size=12"]


def write_torus_obj(folder: Path) -> Path:
    from meshlift.io.obj import save_obj
    from test_methods_nvdiffrec_e2e import _torus_mesh

    p = Path(folder) / "torus.obj"
    save_obj(p, _torus_mesh(n=24, m=12))
    return p


def blender_copy_with_opencv_axes(src: Path, dst: Path) -> Path:
    """``dst``: ``src``'s transforms_*.json with every camera-to-world in OpenCV axes (y, z flipped); the image
    folders are symlinked, nothing is copied."""
    dst.mkdir(parents=True, exist_ok=True)
    flip = torch.diag(torch.tensor([1.0, -1.0, -1.0, 1.0], dtype=torch.float64))
    for split in ("train", "val", "test"):
        js = json.loads((src / f"transforms_{split}.json").read_text())
        for fr in js["frames"]:
            fr["transform_matrix"] = (torch.tensor(fr["transform_matrix"], dtype=torch.float64) @ flip).tolist()
        (dst / f"transforms_{split}.json").write_text(json.dumps(js))
        os.symlink(src / split, dst / split)
    return dst
