"""COLMAP sparse models: text and binary reader/writer, and the scene reader.

File formats follow COLMAP's documentation ("Output format", colmap.github.io/format.html) and
``src/colmap/scene/reconstruction_io.cc``: binary files are little-endian with explicit widths
(``uint64`` counts, ``uint32`` ids, ``int32`` model id, ``float64`` values); ``images.txt`` has two lines
per image (the second, the 2D points, may be empty). Poses are world-to-camera ``qvec`` (w, x, y, z) +
``tvec`` in OpenCV axes, converted by :func:`meshlift.cameras.colmap_to_world_to_camera`.

Scene reader policies:

- model: ``sparse/`` itself or the ``sparse/N/`` with the most registered images (a warning names the
  choice when there are several); ``colmap_model=`` picks one; a model folder given as the path works
  too (the dataset root is the nearest parent with an image folder). Binary files win over text when both
  exist.
- images: ``images_N/`` for ``downscale=N`` when present (the Mip-NeRF 360 convention), else ``images/``,
  else the ``images_N/`` with the smallest N. The files' size must match the model's camera size divided by
  the folder's factor N (±1 pixel, rounding either way); the intrinsics are scaled to the actual size.
- images listed but absent are skipped with one warning; masks from ``masks_N/`` or ``masks/`` by name.
- distortion: undistorted (default) or refused, never dropped (:class:`~meshlift.data.LoadOptions`).
- normalisation from ``points3D`` (2-98 % quantiles).
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from meshlift.cameras import Cameras, colmap_to_world_to_camera, intrinsics_matrix, world_to_camera_to_colmap
from meshlift.data._common import LoadOptions, check_sizes, find_masks, finish_scene, missing_warning
from meshlift.data.scene import Scene
from meshlift.errors import CameraError, DatasetError
from meshlift.geometry.distortion import camera_model, split_params

__all__ = [
    "ColmapCamera",
    "ColmapImage",
    "ColmapModel",
    "read_model",
    "write_model",
    "find_model_dirs",
    "read_colmap",
    "cameras_to_colmap",
]


@dataclass
class ColmapCamera:
    """One entry of ``cameras.{bin,txt}``."""

    camera_id: int
    model: str
    width: int
    height: int
    params: list[float]


@dataclass
class ColmapImage:
    """One entry of ``images.{bin,txt}`` (2D points are skipped on read, written empty)."""

    image_id: int
    qvec: list[float]
    tvec: list[float]
    camera_id: int
    name: str


@dataclass
class ColmapModel:
    """A sparse model: cameras, registered images, and the 3D points' positions (``[P, 3]`` float64)."""

    cameras: dict[int, ColmapCamera]
    images: dict[int, ColmapImage]
    points3D: np.ndarray | None = None
    points_rgb: np.ndarray | None = None
    path: Path | None = None
    kind: str = ""
    """``"bin"`` or ``"txt"``."""
    warnings: list[str] = field(default_factory=list)


# ----------------------------------------------------------------------------------------------------
# Binary
# ----------------------------------------------------------------------------------------------------


class _Reader:
    def __init__(self, path: Path):
        self.path = path
        self.buf = path.read_bytes()
        self.pos = 0

    def read(self, fmt: str):
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.buf):
            raise DatasetError(
                f"{self.path} is truncated: needed {size} more bytes at offset {self.pos} but the file has "
                f"{len(self.buf)}; re-export the model from COLMAP (or use the text model)"
            )
        out = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += size
        return out

    def skip(self, n: int) -> None:
        if self.pos + n > len(self.buf):
            raise DatasetError(f"{self.path} is truncated at offset {self.pos} (needs {n} more bytes); "
                               "re-export the model from COLMAP")
        self.pos += n

    def cstring(self) -> str:
        end = self.buf.find(b"\x00", self.pos)
        if end < 0:
            raise DatasetError(f"{self.path} is truncated: an image name at offset {self.pos} has no terminator")
        s = self.buf[self.pos:end].decode("utf-8", errors="replace")
        self.pos = end + 1
        return s


def _read_cameras_bin(path: Path) -> dict[int, ColmapCamera]:
    r = _Reader(path)
    (n,) = r.read("<Q")
    cams = {}
    for _ in range(n):
        cid, mid, w, h = r.read("<IiQQ")
        try:
            m = camera_model(int(mid))
        except CameraError as exc:
            raise DatasetError(f"{path}: camera {cid}: {exc}") from exc
        params = list(r.read("<" + "d" * m.num_params))
        cams[cid] = ColmapCamera(cid, m.name, int(w), int(h), params)
    return cams


def _read_images_bin(path: Path) -> dict[int, ColmapImage]:
    r = _Reader(path)
    (n,) = r.read("<Q")
    images = {}
    for _ in range(n):
        vals = r.read("<I7dI")
        name = r.cstring()
        (npts,) = r.read("<Q")
        r.skip(24 * npts)
        images[vals[0]] = ColmapImage(vals[0], list(vals[1:5]), list(vals[5:8]), vals[8], name)
    return images


def _read_points_bin(path: Path) -> tuple[np.ndarray, np.ndarray]:
    r = _Reader(path)
    (n,) = r.read("<Q")
    xyz = np.empty((n, 3), np.float64)
    rgb = np.empty((n, 3), np.uint8)
    for i in range(n):
        vals = r.read("<Q3d3BdQ")
        xyz[i] = vals[1:4]
        rgb[i] = vals[4:7]
        r.skip(8 * vals[8])
    return xyz, rgb


def _write_bin(model: ColmapModel, folder: Path) -> None:
    with open(folder / "cameras.bin", "wb") as fh:
        fh.write(struct.pack("<Q", len(model.cameras)))
        for c in model.cameras.values():
            m = camera_model(c.model)
            if len(c.params) != m.num_params:
                raise CameraError(f"camera {c.camera_id}: {m.name} takes {m.num_params} params, got {len(c.params)}")
            fh.write(struct.pack("<IiQQ", c.camera_id, m.model_id, c.width, c.height))
            fh.write(struct.pack("<" + "d" * m.num_params, *c.params))
    with open(folder / "images.bin", "wb") as fh:
        fh.write(struct.pack("<Q", len(model.images)))
        for im in model.images.values():
            fh.write(struct.pack("<I7dI", im.image_id, *im.qvec, *im.tvec, im.camera_id))
            fh.write(im.name.encode("utf-8") + b"\x00")
            fh.write(struct.pack("<Q", 0))
    pts = model.points3D if model.points3D is not None else np.zeros((0, 3))
    rgb = model.points_rgb if model.points_rgb is not None else np.full((len(pts), 3), 128, np.uint8)
    with open(folder / "points3D.bin", "wb") as fh:
        fh.write(struct.pack("<Q", len(pts)))
        for i, (p, c) in enumerate(zip(pts, rgb)):
            fh.write(struct.pack("<Q3d3BdQ", i + 1, *map(float, p), *map(int, c), 0.0, 0))


# ----------------------------------------------------------------------------------------------------
# Text
# ----------------------------------------------------------------------------------------------------


def _data_lines(path: Path):
    """(line number, stripped line) of non-comment, non-empty lines."""
    for k, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        s = line.strip()
        if s and not s.startswith("#"):
            yield k, s


def _read_cameras_txt(path: Path) -> dict[int, ColmapCamera]:
    cams = {}
    for k, s in _data_lines(path):
        tok = s.split()
        if len(tok) < 4:
            raise DatasetError(f"{path}:{k}: expected 'CAMERA_ID MODEL WIDTH HEIGHT PARAMS...', got {s!r}")
        try:
            m = camera_model(tok[1])
        except CameraError as exc:
            raise DatasetError(f"{path}:{k}: {exc}") from exc
        if len(tok) - 4 != m.num_params:
            raise DatasetError(f"{path}:{k}: camera model {m.name} takes {m.num_params} parameters "
                               f"({', '.join(m.params)}), the line has {len(tok) - 4}")
        try:
            cams[int(tok[0])] = ColmapCamera(int(tok[0]), m.name, int(tok[2]), int(tok[3]), [float(t) for t in tok[4:]])
        except ValueError as exc:
            raise DatasetError(f"{path}:{k}: bad number in {s!r} ({exc})") from exc
    return cams


def _read_images_txt(path: Path) -> dict[int, ColmapImage]:
    lines = path.read_text(errors="replace").splitlines()
    images = {}
    k = 0
    while k < len(lines):
        s = lines[k].strip()
        k += 1
        if not s or s.startswith("#"):
            continue
        tok = s.split()
        if len(tok) < 10:
            raise DatasetError(f"{path}:{k}: expected 'IMAGE_ID QW QX QY QZ TX TY TZ CAMERA_ID NAME', got {s!r}")
        try:
            iid = int(tok[0])
            vals = [float(t) for t in tok[1:8]]
            cid = int(tok[8])
        except ValueError as exc:
            raise DatasetError(f"{path}:{k}: bad number in {s!r} ({exc})") from exc
        name = " ".join(tok[9:])
        images[iid] = ColmapImage(iid, vals[:4], vals[4:], cid, name)
        k += 1  # the POINTS2D line (possibly empty)
    return images


def _read_points_txt(path: Path) -> tuple[np.ndarray, np.ndarray]:
    xyz, rgb = [], []
    for k, s in _data_lines(path):
        tok = s.split()
        if len(tok) < 8:
            raise DatasetError(f"{path}:{k}: expected 'POINT3D_ID X Y Z R G B ERROR TRACK...', got {s[:80]!r}")
        xyz.append([float(t) for t in tok[1:4]])
        rgb.append([int(t) for t in tok[4:7]])
    return np.asarray(xyz, np.float64).reshape(-1, 3), np.asarray(rgb, np.uint8).reshape(-1, 3)


def _fmt(v: float) -> str:
    return repr(float(v))  # shortest round-trip representation


def _write_txt(model: ColmapModel, folder: Path) -> None:
    lines = ["# Camera list with one line of data per camera:", "#   CAMERA_ID, MODEL, WIDTH, HEIGHT, PARAMS[]",
             f"# Number of cameras: {len(model.cameras)}"]
    for c in model.cameras.values():
        lines.append(" ".join([str(c.camera_id), c.model, str(c.width), str(c.height), *map(_fmt, c.params)]))
    (folder / "cameras.txt").write_text("\n".join(lines) + "\n")
    lines = ["# Image list with two lines of data per image:",
             "#   IMAGE_ID, QW, QX, QY, QZ, TX, TY, TZ, CAMERA_ID, NAME", "#   POINTS2D[] as (X, Y, POINT3D_ID)",
             f"# Number of images: {len(model.images)}"]
    for im in model.images.values():
        lines.append(" ".join([str(im.image_id), *map(_fmt, im.qvec), *map(_fmt, im.tvec), str(im.camera_id), im.name]))
        lines.append("")
    (folder / "images.txt").write_text("\n".join(lines) + "\n")
    pts = model.points3D if model.points3D is not None else np.zeros((0, 3))
    rgb = model.points_rgb if model.points_rgb is not None else np.full((len(pts), 3), 128, np.uint8)
    lines = ["# 3D point list with one line of data per point:",
             "#   POINT3D_ID, X, Y, Z, R, G, B, ERROR, TRACK[] as (IMAGE_ID, POINT2D_IDX)"]
    for i, (p, c) in enumerate(zip(pts, rgb)):
        lines.append(" ".join([str(i + 1), *map(_fmt, p), *map(str, map(int, c)), "0"]))
    (folder / "points3D.txt").write_text("\n".join(lines) + "\n")


# ----------------------------------------------------------------------------------------------------
# Model-level API
# ----------------------------------------------------------------------------------------------------


def _model_kind(folder: Path) -> str | None:
    if (folder / "cameras.bin").is_file() and (folder / "images.bin").is_file():
        return "bin"
    if (folder / "cameras.txt").is_file() and (folder / "images.txt").is_file():
        return "txt"
    return None


def read_model(folder: str | Path, *, kind: str | None = None, points: bool = True) -> ColmapModel:
    """Read a COLMAP sparse model folder (binary preferred when both kinds are there).

    Args:
        folder: folder with ``cameras``, ``images`` (and optionally ``points3D``) ``.bin`` or ``.txt``.
        kind: ``"bin"`` or ``"txt"`` to choose; default auto.
        points: also read ``points3D`` positions.

    Raises:
        DatasetError: missing files, truncated binary, unknown camera model, wrong parameter counts.
    """
    folder = Path(folder)
    kind = kind or _model_kind(folder)
    if kind is None:
        raise DatasetError(f"{folder}: no COLMAP model (needs cameras.bin + images.bin or cameras.txt + images.txt)")
    if kind == "bin":
        cams, imgs = _read_cameras_bin(folder / "cameras.bin"), _read_images_bin(folder / "images.bin")
    else:
        cams, imgs = _read_cameras_txt(folder / "cameras.txt"), _read_images_txt(folder / "images.txt")
    model = ColmapModel(cams, imgs, path=folder, kind=kind)
    for im in imgs.values():
        if im.camera_id not in cams:
            raise DatasetError(f"{folder}: image {im.name!r} uses camera {im.camera_id}, which cameras.{kind} "
                               "does not define; the model is inconsistent")
    pfile = folder / f"points3D.{kind}"
    if points and pfile.is_file():
        model.points3D, model.points_rgb = (_read_points_bin if kind == "bin" else _read_points_txt)(pfile)
    elif points:
        model.warnings.append(f"{pfile} is missing; scene bounds come from the cameras")
    return model


def write_model(model: ColmapModel, folder: str | Path, kind: str = "bin") -> Path:
    """Write ``model`` as ``.bin`` or ``.txt`` files into ``folder`` (created); returns the folder."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if kind == "bin":
        _write_bin(model, folder)
    elif kind == "txt":
        _write_txt(model, folder)
    else:
        raise DatasetError(f"write_model: kind must be 'bin' or 'txt', got {kind!r}")
    return folder


def cameras_to_colmap(cameras: Cameras, names: list[str], points: np.ndarray | None = None) -> ColmapModel:
    """A COLMAP model with one camera per frame (``cameras.model``; params from ``K`` and distortion)."""
    if len(names) != len(cameras):
        raise DatasetError(f"cameras_to_colmap: {len(names)} names for {len(cameras)} cameras")
    q, t = world_to_camera_to_colmap(cameras.world_to_camera.double())
    cams, imgs = {}, {}
    for i, name in enumerate(names):
        cams[i + 1] = ColmapCamera(i + 1, cameras.model, cameras.width, cameras.height, cameras.colmap_params(i))
        imgs[i + 1] = ColmapImage(i + 1, q[i].tolist(), t[i].tolist(), i + 1, name)
    return ColmapModel(cams, imgs, points3D=points)


# ----------------------------------------------------------------------------------------------------
# Scene reader
# ----------------------------------------------------------------------------------------------------


def find_model_dirs(root: Path) -> list[Path]:
    """COLMAP model folders of a dataset: ``root`` itself, ``root/sparse``, ``root/sparse/*``."""
    root = Path(root)
    cands = [root, root / "sparse"]
    if (root / "sparse").is_dir():
        cands += sorted(p for p in (root / "sparse").iterdir() if p.is_dir())
    return [c for c in cands if c.is_dir() and _model_kind(c)]


def _image_folders(root: Path) -> dict[int, Path]:
    out = {}
    if (root / "images").is_dir():
        out[1] = root / "images"
    for p in root.glob("images_*"):
        m = re.fullmatch(r"images_(\d+)", p.name)
        if m and p.is_dir():
            out[int(m.group(1))] = p
    return out


def _find_root(model_dir: Path) -> Path:
    for cand in (model_dir, model_dir.parent, model_dir.parent.parent):
        if _image_folders(cand):
            return cand
    return model_dir.parent.parent if model_dir.parent.name == "sparse" else model_dir.parent


def _count_images(folder: Path) -> int:
    kind = _model_kind(folder)
    if kind == "bin":
        with open(folder / "images.bin", "rb") as fh:
            head = fh.read(8)
        return struct.unpack("<Q", head)[0] if len(head) == 8 else 0
    return len(_read_images_txt(folder / "images.txt"))


def _promote_models(models: set[str]) -> str:
    """One model covering a set of perspective models (e.g. SIMPLE_RADIAL + PINHOLE -> OPENCV)."""
    if len(models) == 1:
        return next(iter(models))
    order = ["SIMPLE_PINHOLE", "PINHOLE", "SIMPLE_RADIAL", "RADIAL", "OPENCV", "FULL_OPENCV"]
    if not models <= set(order):
        raise DatasetError(f"the model mixes camera models {sorted(models)}, which cannot share one distortion "
                           "model; undistort with COLMAP's image_undistorter first")
    if models <= {"SIMPLE_PINHOLE", "PINHOLE"}:
        return "PINHOLE"
    return "FULL_OPENCV" if "FULL_OPENCV" in models else "OPENCV"


def _as_model(extra: list[float], src: str, dst: str) -> list[float]:
    """Distortion params of ``src`` expressed in ``dst`` (a superset model)."""
    if src == dst or dst == "PINHOLE":
        return list(extra) if dst != "PINHOLE" else []
    k = {"SIMPLE_PINHOLE": [], "PINHOLE": [], "SIMPLE_RADIAL": extra[:1], "RADIAL": extra[:2]}.get(src)
    if k is not None:
        full = (k + [0.0, 0.0])[:2] + [0.0, 0.0]
    else:  # OPENCV
        full = list(extra)
    return full if dst == "OPENCV" else full + [0.0] * 4


def read_colmap(path: Path, options: LoadOptions) -> Scene:
    """Read a COLMAP dataset (see the module docstring for the policies)."""
    path = Path(path)
    warnings: list[str] = []
    if options.colmap_model:
        model_dir = path / options.colmap_model
        if not _model_kind(model_dir):
            raise DatasetError(f"{model_dir}: no COLMAP model there (cameras/images .bin or .txt)")
        root = path
    else:
        dirs = find_model_dirs(path)
        if not dirs:
            raise DatasetError(f"{path}: no COLMAP model in sparse/, sparse/N/ or the folder itself")
        if path in dirs:
            model_dir, root = path, _find_root(path)
        else:
            counts = {d: _count_images(d) for d in dirs}
            model_dir = max(dirs, key=lambda d: (counts[d], -len(str(d))))
            if len(dirs) > 1:
                warnings.append(
                    f"{len(dirs)} COLMAP models found ({', '.join(f'{d.relative_to(path)}: {counts[d]} images' for d in dirs)}); "
                    f"using {model_dir.relative_to(path)}, the one with the most registered images "
                    "(choose another with colmap_model=)"
                )
            root = path
    model = read_model(model_dir)
    warnings += model.warnings
    if not model.images:
        raise DatasetError(f"{model_dir}: the model registers no images")

    # image folder
    d = float(options.downscale)
    folders = _image_folders(root)
    if options.images_folder:
        img_dir = root / options.images_folder
        if not img_dir.is_dir():
            raise DatasetError(f"{img_dir}: image folder does not exist")
        m = re.fullmatch(r"images_(\d+)", img_dir.name)
        factor = int(m.group(1)) if m else 1
    elif not folders:
        raise DatasetError(f"{root}: no images/ or images_N/ folder next to the COLMAP model {model_dir}")
    elif d > 1 and float(d).is_integer() and int(d) in folders:
        factor = int(d)
        img_dir = folders[factor]
    elif 1 in folders:
        factor, img_dir = 1, folders[1]
    else:
        factor = min(folders)
        img_dir = folders[factor]
    metadata = {"model": str(model_dir), "model_kind": model.kind, "images_folder": img_dir.name,
                "folder_factor": factor, "registered_images": len(model.images)}
    if factor > 1 and d < factor:
        metadata["note"] = f"only {img_dir.name}/ exists: loaded at 1/{factor} of the model's resolution"

    ordered = sorted(model.images.values(), key=lambda im: im.name)
    present, missing = [], []
    for im in ordered:
        p = img_dir / im.name
        (present if p.is_file() else missing).append((im, p))
    if missing:
        warnings.append(missing_warning(f"{model_dir.name}/images.{model.kind}", len(ordered), [im.name for im, _ in missing]))
    if not present:
        raise DatasetError(f"{img_dir}: none of the {len(ordered)} images of the model exists there "
                           f"(first: {ordered[0].name}); check images_folder")
    paths = [p for _, p in present]
    W, H = check_sizes(paths, str(img_dir))

    models = {model.cameras[im.camera_id].model for im, _ in present}
    target = _promote_models(models)
    fx, fy, cx, cy, dist, qv, tv = [], [], [], [], [], [], []
    for im, p in present:
        cam = model.cameras[im.camera_id]
        ex_w, ex_h = cam.width / factor, cam.height / factor
        if abs(W - ex_w) > 1 or abs(H - ex_h) > 1:
            raise DatasetError(
                f"{p}: the image is {W}x{H} but COLMAP camera {cam.camera_id} is {cam.width}x{cam.height}"
                + (f" and the folder {img_dir.name}/ means 1/{factor} of that ({ex_w:g}x{ex_h:g})" if factor > 1 else "")
                + "; the image size matches neither the intrinsics nor an images_N factor — put the images in "
                "the images_N/ folder of their factor or pass images_folder="
            )
        f_x, f_y, c_x, c_y, extra = split_params(cam.model, cam.params)
        sx, sy = W / cam.width, H / cam.height
        fx.append(f_x * sx), fy.append(f_y * sy), cx.append(c_x * sx), cy.append(c_y * sy)
        dist.append(_as_model(extra, cam.model, target) if target not in ("PINHOLE", "SIMPLE_PINHOLE") else [])
        qv.append(im.qvec), tv.append(im.tvec)
    model_name = "PINHOLE" if target in ("PINHOLE", "SIMPLE_PINHOLE") else target
    if model_name != "PINHOLE" and not any(any(v != 0 for v in row) for row in dist):
        model_name, dist = "PINHOLE", []
    w2c = colmap_to_world_to_camera(torch.tensor(qv, dtype=torch.float64), torch.tensor(tv, dtype=torch.float64))
    cams = Cameras(K=intrinsics_matrix(torch.tensor(fx), torch.tensor(fy), torch.tensor(cx), torch.tensor(cy)),
                   world_to_camera=w2c, width=W, height=H, model=model_name,
                   distortion=torch.tensor(dist, dtype=torch.float32) if model_name != "PINHOLE" else None)
    metadata["source_camera_model"] = ", ".join(sorted(models))
    metadata["model_size"] = [model.cameras[present[0][0].camera_id].width, model.cameras[present[0][0].camera_id].height]
    metadata["intrinsics_scale"] = [W / metadata["model_size"][0], H / metadata["model_size"][1]]

    # masks
    mask_paths = None
    if options.masks_folder:
        mdir = root / options.masks_folder
        if not mdir.is_dir():
            raise DatasetError(f"{mdir}: mask folder does not exist")
    else:
        mdir = next((c for c in (root / f"masks_{factor}", root / "masks") if c.is_dir()), None) if factor > 1 \
            else (root / "masks" if (root / "masks").is_dir() else None)
    if mdir is not None:
        mask_paths = find_masks(mdir, [im.name for im, _ in present], warnings)
        metadata["masks_folder"] = mdir.name

    target_size = (W, H)
    if d > factor:
        target_size = (max(1, round(W * factor / d)), max(1, round(H * factor / d)))
    pts = torch.from_numpy(model.points3D) if model.points3D is not None and len(model.points3D) else None
    rgb = (torch.from_numpy(np.asarray(model.points_rgb, dtype=np.float32) / 255.0)
           if pts is not None and model.points_rgb is not None else None)
    return finish_scene(format="colmap", root=root, cameras=cams, image_paths=paths, options=options,
                        mask_paths=mask_paths, metadata=metadata, warnings=warnings, points=pts, points_rgb=rgb,
                        target_size=target_size)
