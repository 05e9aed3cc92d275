"""3D Gaussian splatting point-cloud PLY (the layout of Kerbl et al. 2023's code, read by common splat viewers).

One ``vertex`` element, binary little-endian, every property ``float``, in this order::

    x y z  nx ny nz  f_dc_0 f_dc_1 f_dc_2  f_rest_0 .. f_rest_{3(K-1)-1}  opacity  scale_0 scale_1 scale_2
    rot_0 rot_1 rot_2 rot_3

- ``nx ny nz`` are written as zeros (3DGS writes zeros; viewers ignore them).
- ``f_dc_c`` = degree-0 SH coefficient of channel c; ``f_rest`` is **channel-major**: all K-1 higher
  coefficients of red, then green, then blue (3DGS flattens ``features_rest.transpose(1, 2)``).
- ``opacity`` is the logit (pre-sigmoid), ``scale_i`` the log standard deviation, ``rot`` the
  quaternion (w, x, y, z), not necessarily normalised — the stored, unconstrained parameters of
  :class:`meshlift.structures.gaussians.Gaussians` (docs/conventions.md, "Gaussian splatting").

The reader also accepts ASCII and big-endian files and any property order, and files with no
``f_rest`` (degree 0). Written with numpy structured arrays: one write, no per-point Python loop.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Dict

import numpy as np
import torch

from meshlift.errors import MeshError

__all__ = ["save_gaussian_ply", "load_gaussian_ply", "is_gaussian_ply", "GAUSSIAN_FIELDS"]

#: The stored tensors, by the field names of :class:`meshlift.structures.gaussians.Gaussians`.
GAUSSIAN_FIELDS = ("means", "quats", "log_scales", "opacity_logits", "sh0", "shN")

_PLY_TYPES = {
    "char": "i1", "int8": "i1", "uchar": "u1", "uint8": "u1", "short": "i2", "int16": "i2",
    "ushort": "u2", "uint16": "u2", "int": "i4", "int32": "i4", "uint": "u4", "uint32": "u4",
    "float": "f4", "float32": "f4", "double": "f8", "float64": "f8",
}


def _as_tensors(gaussians) -> Dict[str, torch.Tensor]:
    if hasattr(gaussians, "tensors"):
        gaussians = gaussians.tensors()
    if not isinstance(gaussians, dict):
        raise MeshError("save_gaussian_ply: pass a Gaussians or a dict with " + ", ".join(GAUSSIAN_FIELDS))
    missing = [k for k in GAUSSIAN_FIELDS if k not in gaussians]
    if missing:
        raise MeshError(f"save_gaussian_ply: missing fields {missing} (need {', '.join(GAUSSIAN_FIELDS)})")
    return {k: gaussians[k].detach().to("cpu", torch.float32) for k in GAUSSIAN_FIELDS}


def save_gaussian_ply(path: str | Path, gaussians) -> Path:
    """Write Gaussians as a 3DGS point-cloud PLY (layout in the module docstring).

    Args:
        path: output file (parent folders are created); written to a temporary name then renamed, so
            an interrupted write never leaves a truncated file under ``path``.
        gaussians: a :class:`~meshlift.structures.gaussians.Gaussians` or a dict with the tensors
            ``means [N,3]``, ``quats [N,4]``, ``log_scales [N,3]``, ``opacity_logits [N]``,
            ``sh0 [N,1,3]``, ``shN [N,K-1,3]`` (any float dtype/device).

    Returns:
        The path written.

    Raises:
        MeshError: missing fields or inconsistent shapes.
    """
    t = _as_tensors(gaussians)
    n = t["means"].shape[0]
    for k, shape in {"means": (n, 3), "quats": (n, 4), "log_scales": (n, 3), "opacity_logits": (n,),
                     "sh0": (n, 1, 3)}.items():
        if tuple(t[k].shape) != shape:
            raise MeshError(f"save_gaussian_ply: {k} must be {list(shape)}, got {list(t[k].shape)}")
    if t["shN"].ndim != 3 or t["shN"].shape[0] != n or t["shN"].shape[2] != 3:
        raise MeshError(f"save_gaussian_ply: shN must be [{n}, K-1, 3], got {list(t['shN'].shape)}")
    k_rest = t["shN"].shape[1]
    cols = [t["means"], torch.zeros(n, 3), t["sh0"].reshape(n, 3),
            t["shN"].transpose(1, 2).reshape(n, 3 * k_rest), t["opacity_logits"].reshape(n, 1),
            t["log_scales"], t["quats"]]
    data = torch.cat(cols, dim=1).numpy().astype("<f4")
    names = (["x", "y", "z", "nx", "ny", "nz", "f_dc_0", "f_dc_1", "f_dc_2"]
             + [f"f_rest_{i}" for i in range(3 * k_rest)]
             + ["opacity", "scale_0", "scale_1", "scale_2", "rot_0", "rot_1", "rot_2", "rot_3"])
    header = ["ply", "format binary_little_endian 1.0", "comment written by meshlift (3DGS layout)",
              f"element vertex {n}"] + [f"property float {nm}" for nm in names] + ["end_header"]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        fh.write(("\n".join(header) + "\n").encode("ascii"))
        fh.write(np.ascontiguousarray(data).tobytes())
    tmp.replace(path)
    return path


def _read_header(fh, path: Path):
    first = fh.readline()
    if first.strip() != b"ply":
        raise MeshError(f"{path}: not a PLY file (first line {first[:20]!r})")
    fmt, elements, cur = None, [], None
    while True:
        line = fh.readline()
        if not line:
            raise MeshError(f"{path}: PLY header has no end_header line (truncated file?)")
        parts = line.decode("ascii", "replace").split()
        if not parts:
            continue
        if parts[0] == "format":
            fmt = parts[1]
        elif parts[0] == "element":
            cur = [parts[1], int(parts[2]), []]
            elements.append(cur)
        elif parts[0] == "property":
            if cur is None:
                raise MeshError(f"{path}: PLY property before any element")
            if parts[1] == "list":
                cur[2].append((parts[-1], None))
            else:
                if parts[1] not in _PLY_TYPES:
                    raise MeshError(f"{path}: unknown PLY property type {parts[1]!r}")
                cur[2].append((parts[2], _PLY_TYPES[parts[1]]))
        elif parts[0] == "end_header":
            break
    if fmt not in ("ascii", "binary_little_endian", "binary_big_endian"):
        raise MeshError(f"{path}: unsupported PLY format {fmt!r}")
    return fmt, elements


def is_gaussian_ply(path: str | Path) -> bool:
    """Whether ``path`` is a PLY whose vertex element has the 3DGS properties (``f_dc_0``, ``opacity``,
    ``scale_0``, ``rot_0``). Reads the header only; False for unreadable files."""
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            _, elements = _read_header(fh, path)
    except (OSError, MeshError, ValueError):
        return False
    for name, _, props in elements:
        if name == "vertex":
            names = {p for p, _ in props}
            return {"f_dc_0", "opacity", "scale_0", "rot_0"} <= names
    return False


def load_gaussian_ply(path: str | Path) -> Dict[str, torch.Tensor]:
    """Read a 3DGS point-cloud PLY.

    Returns:
        ``{"means" [N,3], "quats" [N,4], "log_scales" [N,3], "opacity_logits" [N], "sh0" [N,1,3],
        "shN" [N,K-1,3]}`` float32 CPU tensors (pass them to ``Gaussians(**d)``).

    Raises:
        MeshError: missing file, not a PLY, no vertex element, missing 3DGS properties, an ``f_rest``
            count that is not 3·(K−1) for K = 1, 4, 9 or 16, or a truncated body.
    """
    path = Path(path)
    if not path.is_file():
        raise MeshError(f"{path}: Gaussian PLY file does not exist")
    with open(path, "rb") as fh:
        fmt, elements = _read_header(fh, path)
        if not elements or elements[0][0] != "vertex":
            raise MeshError(f"{path}: the first PLY element must be 'vertex' (3DGS layout)")
        _, n, props = elements[0]
        if any(dt is None for _, dt in props):
            raise MeshError(f"{path}: list properties in the vertex element are not 3DGS layout")
        if fmt == "ascii":
            rows = np.loadtxt(fh, max_rows=n, ndmin=2) if n else np.zeros((0, len(props)))
            arr = {nm: rows[:, i] for i, (nm, _) in enumerate(props)}
            if rows.shape[0] != n:
                raise MeshError(f"{path}: expected {n} vertices, found {rows.shape[0]} (truncated file?)")
        else:
            order = "<" if fmt == "binary_little_endian" else ">"
            dtype = np.dtype([(nm, order + dt) for nm, dt in props])
            buf = fh.read(dtype.itemsize * n)
            if len(buf) != dtype.itemsize * n:
                raise MeshError(f"{path}: expected {n} vertices of {dtype.itemsize} bytes, the file is "
                                "shorter (truncated download?)")
            rec = np.frombuffer(buf, dtype=dtype, count=n)
            arr = {nm: rec[nm] for nm, _ in props}
    need = ["x", "y", "z", "f_dc_0", "f_dc_1", "f_dc_2", "opacity", "scale_0", "scale_1", "scale_2",
            "rot_0", "rot_1", "rot_2", "rot_3"]
    missing = [k for k in need if k not in arr]
    if missing:
        raise MeshError(f"{path}: not a 3DGS point cloud: missing vertex properties {missing}; "
                        "a mesh PLY is read with meshlift.io.load_mesh")
    rest = sorted((k for k in arr if k.startswith("f_rest_")), key=lambda s: int(s.split("_")[-1]))
    k_rest = len(rest) // 3
    if len(rest) % 3 or int(round(math.sqrt(k_rest + 1))) ** 2 != k_rest + 1:
        raise MeshError(f"{path}: {len(rest)} f_rest properties; expected 3·(K−1) for K = 1, 4, 9 or 16")

    def col(*names):
        return torch.from_numpy(np.stack([np.asarray(arr[k], dtype=np.float32) for k in names], axis=1))

    out = {
        "means": col("x", "y", "z"),
        "quats": col("rot_0", "rot_1", "rot_2", "rot_3"),
        "log_scales": col("scale_0", "scale_1", "scale_2"),
        "opacity_logits": col("opacity")[:, 0].contiguous(),
        "sh0": col("f_dc_0", "f_dc_1", "f_dc_2").reshape(n, 1, 3),
    }
    out["shN"] = (col(*rest).reshape(n, 3, k_rest).transpose(1, 2).contiguous() if k_rest
                  else torch.zeros(n, 0, 3))
    return out
