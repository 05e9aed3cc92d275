"""Readers of ``transforms*.json``: Blender / NeRF-synthetic and instant-ngp / nerfstudio.

Poses are OpenGL camera-to-world (``transform_matrix``), converted with
:func:`meshlift.cameras.opengl_c2w_to_world_to_camera` (docs/conventions.md §2).

Intrinsics, per frame, from the first level that has them (the frame, then the file's top level):
``fl_x``/``fl_y``/``cx``/``cy``/``w``/``h``, or ``camera_angle_x`` (+ ``camera_angle_y``) through
:func:`meshlift.cameras.focal_from_fov`. Missing ``cx``/``cy`` are the image centre; missing ``w``/``h``
are the image file's size. When the image files' size differs from the stated ``w``/``h`` the intrinsics
are scaled by the ratio (same aspect ratio required). Distortion: ``k1 k2 p1 p2`` -> ``OPENCV``,
with ``k3`` -> ``FULL_OPENCV``, ``is_fisheye``/``camera_model: OPENCV_FISHEYE`` -> ``OPENCV_FISHEYE``
(``k1..k4``).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from meshlift.cameras import (Cameras, focal_from_fov, intrinsics_matrix, opencv_c2w_to_world_to_camera,
                              opengl_c2w_to_world_to_camera)
from meshlift.data._common import LoadOptions, check_sizes, finish_scene, missing_warning
from meshlift.data.scene import Scene
from meshlift.errors import CameraError, DatasetError

__all__ = ["read_blender", "read_instant_ngp", "read_transforms_json"]

_IMAGE_SUFFIXES = ("", ".png", ".jpg", ".jpeg", ".PNG", ".JPG", ".JPEG", ".exr")
_DIST_KEYS = ("k1", "k2", "k3", "k4", "p1", "p2")


def read_transforms_json(path: Path) -> dict:
    """Parse a transforms JSON file; raises DatasetError naming the file on bad JSON or missing frames."""
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError as exc:
        raise DatasetError(f"{path} does not exist") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DatasetError(f"{path} is not valid JSON ({exc}); fix or regenerate the file") from exc
    if not isinstance(data, dict):
        raise DatasetError(f"{path}: expected a JSON object with a 'frames' list, got {type(data).__name__}")
    if "frames" not in data:
        raise DatasetError(f"{path}: missing key 'frames' (the list of images with 'file_path' and "
                           "'transform_matrix'); this is not a NeRF/instant-ngp transforms file")
    if not isinstance(data["frames"], list):
        raise DatasetError(f"{path}: 'frames' must be a list of images (each with 'file_path' and "
                           f"'transform_matrix'), got {type(data['frames']).__name__}")
    if not data["frames"]:
        raise DatasetError(f"{path}: 'frames' is empty; the file lists no images")
    return data


def _resolve_image(base: Path, file_path: str) -> Path | None:
    p = Path(file_path)
    p = p if p.is_absolute() else base / p
    for suf in _IMAGE_SUFFIXES:
        cand = p.with_name(p.name + suf) if suf else p
        if cand.is_file():
            return cand
    return None


def _frame_intrinsics(top: dict, frame: dict, json_path: Path, k: int, file_size: tuple[int, int]):
    """(fx, fy, cx, cy, model, dist, stated (w, h)) of one frame at its stated size."""
    level = frame if any(key in frame for key in ("fl_x", "camera_angle_x")) else top
    merged = {**top, **frame}
    W, H = file_size
    w = float(merged.get("w", W))
    h = float(merged.get("h", H))
    if "fl_x" in level:
        fx = float(level["fl_x"])
        fy = float(level.get("fl_y", fx))
    elif "camera_angle_x" in level:
        try:
            fx = focal_from_fov(float(level["camera_angle_x"]), w)
            fy = focal_from_fov(float(level["camera_angle_y"]), h) if "camera_angle_y" in level else fx
        except CameraError as exc:
            raise DatasetError(f"{json_path}: frame {k}: {exc}") from exc
    else:
        raise DatasetError(
            f"{json_path}: frame {k} has no intrinsics: neither 'fl_x' nor 'camera_angle_x' at the top level "
            "or in the frame; add one of them"
        )
    cx = float(merged.get("cx", w / 2))
    cy = float(merged.get("cy", h / 2))
    d = {key: float(merged.get(key, 0.0)) for key in _DIST_KEYS}
    cam_model = str(merged.get("camera_model", "")).upper()
    if cam_model in ("EQUIRECTANGULAR", "SPHERICAL"):
        raise DatasetError(f"{json_path}: camera_model {cam_model} is not a perspective camera; meshlift "
                           "reads perspective and fisheye cameras only")
    if merged.get("is_fisheye") or cam_model == "OPENCV_FISHEYE":
        model, dist = "OPENCV_FISHEYE", [d["k1"], d["k2"], d["k3"], d["k4"]]
    elif d["k4"] != 0:
        raise DatasetError(f"{json_path}: frame {k}: k4={d['k4']} on a non-fisheye camera is not a COLMAP "
                           "model meshlift can undistort; set is_fisheye or remove k4")
    elif d["k3"] != 0:
        model, dist = "FULL_OPENCV", [d["k1"], d["k2"], d["p1"], d["p2"], d["k3"], 0.0, 0.0, 0.0]
    elif any(d[key] != 0 for key in ("k1", "k2", "p1", "p2")):
        model, dist = "OPENCV", [d["k1"], d["k2"], d["p1"], d["p2"]]
    else:
        model, dist = "PINHOLE", []
    return fx, fy, cx, cy, model, dist, (w, h)


def _read_frames(json_path: Path, data: dict, source: str, warnings: list[str]):
    """Resolve images, poses and intrinsics of the frames whose image exists."""
    base = json_path.parent
    frames = data["frames"]
    found, missing = [], []
    for k, fr in enumerate(frames):
        if not isinstance(fr, dict) or "file_path" not in fr:
            raise DatasetError(f"{json_path}: frame {k} has no 'file_path'")
        if "transform_matrix" not in fr:
            raise DatasetError(f"{json_path}: frame {k} ({fr['file_path']}) has no 'transform_matrix'")
        p = _resolve_image(base, str(fr["file_path"]))
        if p is None:
            missing.append(str(fr["file_path"]))
        else:
            found.append((k, fr, p))
    if missing:
        warnings.append(missing_warning(source, len(frames), missing))
    if not found:
        raise DatasetError(f"{json_path}: none of the {len(frames)} listed images exists (first: "
                           f"{base / str(frames[0]['file_path'])}); check the file paths")
    return found, missing


def _cameras_from_frames(json_path: Path, data: dict, found, file_size, metadata: dict,
                         warnings: list[str], convention: str = "opengl") -> Cameras:
    W, H = file_size
    fxs, fys, cxs, cys, c2ws, dists, models, scaled = [], [], [], [], [], [], set(), set()
    for k, fr, _ in found:
        fx, fy, cx, cy, model, dist, (w, h) = _frame_intrinsics(data, fr, json_path, k, file_size)
        if (w, h) != (W, H):
            sx, sy = W / w, H / h
            if abs(sx - sy) > 0.01 * max(sx, sy):
                raise DatasetError(
                    f"{json_path}: frame {k} states w={w:g}, h={h:g} but its image is {W}x{H}, a different "
                    "aspect ratio; the intrinsics cannot be rescaled — fix w/h or the images"
                )
            fx, cx, fy, cy = fx * sx, cx * sx, fy * sy, cy * sy
            scaled.add((round(sx, 6), round(sy, 6)))
        m = torch.as_tensor(fr["transform_matrix"], dtype=torch.float64)
        if m.shape not in ((4, 4), (3, 4)):
            raise DatasetError(f"{json_path}: frame {k}: transform_matrix must be 4x4, got {list(m.shape)}")
        fxs.append(fx), fys.append(fy), cxs.append(cx), cys.append(cy)
        c2ws.append(m if m.shape == (4, 4) else torch.cat([m, m.new_tensor([[0, 0, 0, 1.0]])]))
        dists.append(dist)
        models.add(model)
    if len(models) > 1:
        raise DatasetError(f"{json_path}: frames mix camera models {sorted(models)}; meshlift needs one model")
    if scaled:
        metadata["intrinsics_scaled"] = sorted(scaled)[0]
    model = models.pop()
    c2w = torch.stack(c2ws)
    if not torch.isfinite(c2w).all():
        raise DatasetError(f"{json_path}: a transform_matrix holds NaN or inf")
    R = c2w[:, :3, :3]
    err = (R.transpose(1, 2) @ R - torch.eye(3, dtype=R.dtype)).abs().amax(dim=(1, 2))
    if bool((err > 1e-3).any()):
        # scaled or sheared poses: keep the nearest rotation (SVD), so camera centres and depths stay metric
        U, _, Vh = torch.linalg.svd(R)
        Rn = U @ Vh
        if bool((torch.linalg.det(Rn) < 0).any()):
            raise DatasetError(f"{json_path}: a transform_matrix has a reflection (negative determinant); "
                               "it is not a camera pose")
        c2w = c2w.clone()
        c2w[:, :3, :3] = Rn
        warnings.append(f"{json_path.name}: {int((err > 1e-3).sum())} transform_matrix rotations are not "
                        f"orthonormal (max error {float(err.max()):.3g}); replaced by the nearest rotations")
    w2c = (opencv_c2w_to_world_to_camera(c2w) if convention == "opencv"
           else opengl_c2w_to_world_to_camera(c2w))
    K = intrinsics_matrix(torch.tensor(fxs), torch.tensor(fys), torch.tensor(cxs), torch.tensor(cys))
    dist = torch.tensor(dists, dtype=torch.float32) if model != "PINHOLE" else None
    return Cameras(K=K, world_to_camera=w2c, width=W, height=H, model=model, distortion=dist)


def _mask_paths(json_path: Path, found) -> list[Path | None] | None:
    if not any("mask_path" in fr for _, fr, _ in found):
        return None
    out = []
    for _, fr, _ in found:
        mp = fr.get("mask_path")
        p = _resolve_image(json_path.parent, str(mp)) if mp else None
        out.append(p)
    return out


def _ngp_aabb(data: dict) -> torch.Tensor | None:
    """World box of instant-ngp's unit cube: ngp maps a NeRF point (x, y, z) to (y, z, x)·scale + offset."""
    if "aabb_scale" not in data and "scale" not in data and "offset" not in data:
        return None
    scale = float(data.get("scale", 0.33))
    off = [float(v) for v in data.get("offset", [0.5, 0.5, 0.5])]
    lo_ngp = torch.tensor([(0 - o) / scale for o in off], dtype=torch.float64)
    hi_ngp = torch.tensor([(1 - o) / scale for o in off], dtype=torch.float64)
    perm = [2, 0, 1]  # world x <- ngp z, world y <- ngp x, world z <- ngp y
    return torch.stack([lo_ngp[perm], hi_ngp[perm]])


def _downscaled_paths(base: Path, paths: list[Path], downscale: float) -> list[Path] | None:
    """Paths in ``images_N/`` (N = downscale) mirroring ``images/`` (the nerfstudio convention), if all exist."""
    d = float(downscale)
    if d <= 1 or not d.is_integer():
        return None
    out = []
    for p in paths:
        try:
            rel = p.relative_to(base)
        except ValueError:
            return None
        if len(rel.parts) < 2 or rel.parts[0] != "images":
            return None
        cand = base / f"images_{int(d)}" / Path(*rel.parts[1:])
        if not cand.is_file():
            return None
        out.append(cand)
    return out


def read_instant_ngp(path: Path, options: LoadOptions) -> Scene:
    """Read an instant-ngp / nerfstudio ``transforms.json`` (``path``: the file or its folder)."""
    path = Path(path)
    json_path = path / "transforms.json" if path.is_dir() else path
    data = read_transforms_json(json_path)
    warnings: list[str] = []
    found, missing = _read_frames(json_path, data, json_path.name, warnings)
    paths = [p for _, _, p in found]
    metadata = {"transforms": str(json_path), "frames_listed": len(data["frames"]), "frames_missing": len(missing)}
    target_size = None
    down = _downscaled_paths(json_path.parent, paths, options.downscale)
    if down is not None:  # nerfstudio's images_N/ copies: used as they are (intrinsics scaled by size)
        paths = down
        found = [(k, fr, p) for (k, fr, _), p in zip(found, down)]
        metadata["images_folder"] = down[0].parent.name
    file_size = check_sizes(paths, str(json_path.parent))
    if down is not None:
        target_size = file_size
    for key in ("aabb_scale", "scale", "offset", "applied_transform", "camera_model"):
        if key in data:
            metadata[key] = data[key]
    cameras = _cameras_from_frames(json_path, data, found, file_size, metadata, warnings,
                                   options.camera_convention)
    splits = None
    if any(f"{s}_filenames" in data for s in ("train", "val", "test")):
        names = {str(Path(str(fr["file_path"]))): i for i, (_, fr, _) in enumerate(found)}
        splits = {}
        for s in ("train", "val", "test"):
            lst = [names[str(Path(f))] for f in data.get(f"{s}_filenames", []) if str(Path(f)) in names]
            splits[s] = torch.tensor(lst, dtype=torch.long)
    aabb = _ngp_aabb(data)
    if aabb is not None:
        metadata["aabb_hint"] = "instant-ngp unit cube (scale, offset) mapped back to the world"
    return finish_scene(format="instant-ngp", root=json_path.parent, cameras=cameras, image_paths=paths,
                        options=options, mask_paths=_mask_paths(json_path, found), splits=splits,
                        metadata=metadata, warnings=warnings, aabb=aabb, target_size=target_size)


def read_blender(path: Path, options: LoadOptions) -> Scene:
    """Read a Blender / NeRF-synthetic folder with ``transforms_{train,val,test}.json``; the splits are the
    files'. RGBA images are composited on ``options.background``; their alpha is the mask."""
    root = Path(path)
    warnings: list[str] = []
    all_found, cams, split_idx, listed, missing_total = [], [], {}, 0, []
    sizes = None
    jsons = [(s, root / f"transforms_{s}.json") for s in ("train", "val", "test")]
    if not jsons[0][1].is_file():
        raise DatasetError(f"{root}: transforms_train.json is missing; a Blender dataset needs it")
    metadata: dict = {"transforms": []}
    for split, jp in jsons:
        if not jp.is_file():
            split_idx[split] = torch.zeros(0, dtype=torch.long)
            continue
        data = read_transforms_json(jp)
        found, missing = _read_frames(jp, data, jp.name, warnings)
        listed += len(data["frames"])
        missing_total += missing
        paths = [p for _, _, p in found]
        size = check_sizes(paths, str(jp))
        if sizes is not None and size != sizes:
            raise DatasetError(f"{jp}: images are {size[0]}x{size[1]} but other splits' are {sizes[0]}x{sizes[1]}")
        sizes = size
        cams.append(_cameras_from_frames(jp, data, found, size, metadata, warnings, options.camera_convention))
        start = len(all_found)
        split_idx[split] = torch.arange(start, start + len(found))
        all_found += paths
        metadata["transforms"].append(jp.name)
    metadata["frames_listed"] = listed
    metadata["frames_missing"] = len(missing_total)
    cameras = Cameras.cat(cams)
    return finish_scene(format="blender", root=root, cameras=cameras, image_paths=all_found, options=options,
                        splits=split_idx, metadata=metadata, warnings=warnings)
