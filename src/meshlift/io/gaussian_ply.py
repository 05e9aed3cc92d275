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

What the reader checks (every message names the file; the file is never written to):

- SH layout: ``f_rest_0 .. f_rest_{M-1}`` with ``M`` in :data:`SH_REST_COUNTS` (0, 9, 24, 45: degree 0-3);
  any other count or a gap in the numbering is a :class:`~meshlift.errors.MeshError`;
- invalid Gaussians: a NaN/Inf in any attribute used for rendering (position, rotation, log-scale,
  opacity logit, SH), a zero-length rotation quaternion, or a log-scale above :data:`LOG_SCALE_MAX`
  (its standard deviation overflows float32). Each Gaussian counts once however many of its values are
  bad. They are dropped with a :class:`~meshlift.errors.MeshliftWarning` naming the file and the count
  (``invalid="drop"``, the default) or refused (``invalid="error"``);
- no Gaussians (``element vertex 0``, or every one invalid): a MeshError;
- other conventions (a warning, not an error, as the values may be legitimate): log-scales whose median
  standard deviation exceeds the whole cloud's extent (linear standard deviations stored instead of
  their logarithm), or every opacity in [0, 1] in a cloud of 100 or more (activated opacities stored
  instead of logits).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Dict

import numpy as np
import torch

from meshlift.errors import MeshError, MeshliftWarning
from meshlift.io.ply_header import GAUSSIAN_PROPERTIES, ply_contents, read_ply_header

__all__ = ["save_gaussian_ply", "load_gaussian_ply", "is_gaussian_ply", "GAUSSIAN_FIELDS", "SH_REST_COUNTS",
           "LOG_SCALE_MAX"]

#: The stored tensors, by the field names of :class:`meshlift.structures.gaussians.Gaussians`.
GAUSSIAN_FIELDS = ("means", "quats", "log_scales", "opacity_logits", "sh0", "shN")

#: ``f_rest`` property counts of the SH degrees 0-3: ``3·((d+1)² − 1)``.
SH_REST_COUNTS = {3 * ((d + 1) ** 2 - 1): d for d in range(4)}

#: Largest stored log-scale whose ``exp`` is finite in float32 (``log(3.4e38)`` ≈ 88.7); larger ones overflow.
LOG_SCALE_MAX = 88.0

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


def is_gaussian_ply(path: str | Path) -> bool:
    """Whether ``path`` is a PLY whose vertex element has the 3DGS properties (``f_dc_0``, ``opacity``,
    ``scale_0``, ``rot_0``). Reads the header only; False for unreadable files."""
    info = ply_contents(path)
    return info is not None and info.kind == "gaussians"


def _read_body(fh, fmt: str, n: int, props: list, path: Path) -> Dict[str, np.ndarray]:
    """The vertex element's columns by property name (1-D arrays of length ``n``)."""
    if fmt == "ascii":
        if n == 0:
            return {nm: np.zeros(0) for nm, _ in props}
        try:
            rows = np.loadtxt(fh, max_rows=n, ndmin=2, usecols=range(len(props)))
        except ValueError as exc:
            raise MeshError(f"{path}: cannot read the ASCII vertex rows ({exc}); each row must hold "
                            f"{len(props)} numbers") from None
        if rows.shape[0] != n:
            raise MeshError(f"{path}: expected {n} vertices, found {rows.shape[0]} (truncated file?)")
        return {nm: rows[:, i] for i, (nm, _) in enumerate(props)}
    order = "<" if fmt == "binary_little_endian" else ">"
    dtype = np.dtype([(nm, order + dt) for nm, dt in props])
    buf = fh.read(dtype.itemsize * n)
    if len(buf) != dtype.itemsize * n:
        raise MeshError(f"{path}: expected {n} vertices of {dtype.itemsize} bytes, the file is "
                        "shorter (truncated download?)")
    rec = np.frombuffer(buf, dtype=dtype, count=n)
    return {nm: rec[nm] for nm, _ in props}


def _sh_rest_names(arr: Dict[str, np.ndarray], path: Path) -> list[str]:
    """``f_rest_0 .. f_rest_{M-1}`` in index order, checked against the degree 0-3 layouts."""
    rest = [k for k in arr if k.startswith("f_rest_")]
    idx = []
    for k in rest:
        tail = k[len("f_rest_"):]
        if not tail.isdigit():
            raise MeshError(f"{path}: vertex property {k!r} is not an f_rest_<index> of the 3DGS layout; "
                            "export the file in the 3DGS layout (f_rest_0, f_rest_1, ...)")
        idx.append(int(tail))
    idx.sort()
    counts = ", ".join(f"{m} (degree {d})" for m, d in SH_REST_COUNTS.items())
    if len(idx) not in SH_REST_COUNTS:
        raise MeshError(f"{path}: {len(idx)} f_rest properties; a 3DGS PLY of SH degree 0-3 has {counts}, "
                        "i.e. 3·((d+1)²−1). The file has another SH layout or is damaged: export it with SH "
                        "degree 3 or lower")
    if idx != list(range(len(idx))):
        gap = next(i for i, j in enumerate(idx) if i != j)
        raise MeshError(f"{path}: the f_rest properties are not numbered 0..{len(idx) - 1} (f_rest_{gap} is "
                        "missing); the SH coefficients cannot be ordered: export the file again")
    return [f"f_rest_{i}" for i in idx]


def _invalid_rows(out: Dict[str, torch.Tensor]) -> tuple[torch.Tensor, list[str]]:
    """``[N]`` bool: Gaussians that cannot be rendered, and a phrase per reason with its count."""
    n = out["means"].shape[0]
    nonfinite = torch.zeros(n, dtype=torch.bool)
    for k in GAUSSIAN_FIELDS:
        nonfinite |= ~torch.isfinite(out[k].reshape(n, -1)).all(dim=1)
    zero_rot = (out["quats"] == 0).all(dim=1) & ~nonfinite
    overflow = (out["log_scales"] > LOG_SCALE_MAX).any(dim=1) & ~nonfinite
    why = [f"{int(c)} with {txt}" for c, txt in (
        (nonfinite.sum(), "NaN/Inf values"), (zero_rot.sum(), "a zero-length rotation quaternion"),
        (overflow.sum(), f"a log-scale above {LOG_SCALE_MAX:g} (the size overflows)")) if int(c)]
    return nonfinite | zero_rot | overflow, why


def _convention_warnings(out: Dict[str, torch.Tensor], path: Path) -> list[str]:
    """Hints that scales or opacities were stored activated (module docstring)."""
    notes = []
    n = out["means"].shape[0]
    if n >= 10:
        means = out["means"].double()
        extent = float((means.quantile(0.95, dim=0) - means.quantile(0.05, dim=0)).norm())
        sigma = float(out["log_scales"].double().max(dim=1).values.median().exp())
        if extent > 0 and sigma > extent:
            notes.append(f"{path}: the median Gaussian's standard deviation exp(scale) = {sigma:.3g} exceeds the "
                         f"extent of the whole cloud ({extent:.3g}): scale_0..2 look like linear standard "
                         "deviations, but the 3DGS layout stores their logarithm. If so, write log(scale) to the "
                         "file; the render will otherwise show large blobs")
    if n >= 100:
        op = out["opacity_logits"]
        if bool(((op >= 0) & (op <= 1)).all()):
            notes.append(f"{path}: every opacity value lies in [0, 1]: they look like opacities, but the 3DGS "
                         "layout stores logits (log(a / (1 − a))). If so, write the logits to the file; the "
                         "render will otherwise be semi-transparent (opacities 0.5-0.73)")
    return notes


def load_gaussian_ply(path: str | Path, *, invalid: str = "drop") -> Dict[str, torch.Tensor]:
    """Read a 3DGS point-cloud PLY (layout and checks in the module docstring). The file is only read.

    Args:
        path: the ``.ply`` file.
        invalid: what to do with Gaussians that cannot be rendered (NaN/Inf values, a zero rotation, an
            overflowing scale): ``"drop"`` them with a :class:`~meshlift.errors.MeshliftWarning` naming
            the file and the count (default), or ``"error"``.

    Returns:
        ``{"means" [N,3], "quats" [N,4], "log_scales" [N,3], "opacity_logits" [N], "sh0" [N,1,3],
        "shN" [N,K-1,3]}`` float32 CPU tensors (pass them to ``Gaussians(**d)``), ``N >= 1``,
        ``K = (degree + 1)²`` with degree 0-3.

    Warns:
        MeshliftWarning: invalid Gaussians dropped; scales or opacities that look activated.

    Raises:
        MeshError: missing file, not a PLY, no vertex element, a mesh or other PLY without the 3DGS
            properties, an ``f_rest`` count that is not 0, 9, 24 or 45, a truncated body, no Gaussians
            (``element vertex 0``), every Gaussian invalid, or (``invalid="error"``) any invalid one.
    """
    if invalid not in ("drop", "error"):
        raise MeshError(f"load_gaussian_ply: invalid must be 'drop' or 'error', got {invalid!r}")
    path = Path(path)
    if not path.is_file():
        raise MeshError(f"{path}: Gaussian PLY file does not exist" if not path.exists() else
                        f"{path}: is a folder, not a Gaussian PLY file (a run folder holds point_cloud.ply)")
    with open(path, "rb") as fh:
        fmt, elements = read_ply_header(fh, path)
        if not elements or elements[0][0] != "vertex":
            raise MeshError(f"{path}: the first PLY element must be 'vertex' (3DGS layout)")
        _, n, props = elements[0]
        names = {nm for nm, _ in props}
        if not set(GAUSSIAN_PROPERTIES) <= names:
            info = ply_contents(path)
            what = info.describe() if info is not None else "no Gaussians"
            missing = [k for k in GAUSSIAN_PROPERTIES if k not in names]
            raise MeshError(f"{path}: holds {what}, not 3D Gaussians: the 3DGS vertex properties {missing} are "
                            "missing. Give a 3DGS point_cloud.ply (as `meshlift reconstruct --method gaussians` "
                            "writes it); a mesh file is rendered and converted as a mesh")
        if any(dt is None for _, dt in props):
            raise MeshError(f"{path}: list properties in the vertex element are not 3DGS layout")
        if n == 0:
            raise MeshError(f"{path}: holds no Gaussians (element vertex 0): nothing to render or convert. The "
                            "run that wrote it kept no Gaussian (pruned them all?): train again or use another file")
        arr = _read_body(fh, fmt, n, props, path)
    need = ["x", "y", "z", "f_dc_0", "f_dc_1", "f_dc_2", "opacity", "scale_0", "scale_1", "scale_2",
            "rot_0", "rot_1", "rot_2", "rot_3"]
    missing = [k for k in need if k not in arr]
    if missing:
        raise MeshError(f"{path}: not a complete 3DGS point cloud: missing vertex properties {missing}; export "
                        "it in the 3DGS layout (x y z f_dc_0-2 f_rest_* opacity scale_0-2 rot_0-3)")
    rest = _sh_rest_names(arr, path)
    k_rest = len(rest) // 3

    def col(*cols):
        return torch.from_numpy(np.stack([np.asarray(arr[k], dtype=np.float32) for k in cols], axis=1))

    out = {
        "means": col("x", "y", "z"),
        "quats": col("rot_0", "rot_1", "rot_2", "rot_3"),
        "log_scales": col("scale_0", "scale_1", "scale_2"),
        "opacity_logits": col("opacity")[:, 0].contiguous(),
        "sh0": col("f_dc_0", "f_dc_1", "f_dc_2").reshape(n, 1, 3),
    }
    out["shN"] = (col(*rest).reshape(n, 3, k_rest).transpose(1, 2).contiguous() if k_rest
                  else torch.zeros(n, 0, 3))
    bad, why = _invalid_rows(out)
    n_bad = int(bad.sum())
    if n_bad == n:
        raise MeshError(f"{path}: all {n:,} Gaussians are invalid ({', '.join(why)}); nothing is left to use. The "
                        "file is damaged or the run that wrote it diverged: train again or export it again")
    if n_bad:
        msg = (f"{path}: {n_bad:,} of {n:,} Gaussians are invalid ({', '.join(why)})")
        if invalid == "error":
            raise MeshError(msg + "; drop or fix them in the file")
        out = {k: v[~bad].contiguous() for k, v in out.items()}
        warnings.warn(msg + f"; they were dropped and the other {n - n_bad:,} used (the file is unchanged)",
                      MeshliftWarning, stacklevel=2)
    for note in _convention_warnings(out, path):
        warnings.warn(note, MeshliftWarning, stacklevel=2)
    return out
