"""PLY headers without the body: what a ``.ply`` file holds, read from its header alone (stdlib only).

:func:`read_ply_header` parses the header (``format``, ``element``, ``property`` lines);
:func:`ply_contents` says what kind of data the file holds, so every command that needs one kind can
refuse another with one clear message before reading a large body:

- ``"gaussians"``: a 3D Gaussian splatting point cloud (the vertex element carries the 3DGS properties
  ``f_dc_0``, ``opacity``, ``scale_0``, ``rot_0``; :mod:`meshlift.io.gaussian_ply`);
- ``"mesh"``: vertices and at least one face;
- ``"point_cloud"``: vertices and no faces (a scan, SfM points);
- ``"empty"``: no vertices.

Imports neither numpy nor torch (the web app's upload checks use it).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Optional

from meshlift.errors import MeshError

__all__ = ["PLY_TYPES", "GAUSSIAN_PROPERTIES", "PlyContents", "counted", "read_ply_header", "ply_contents"]

#: PLY scalar type names -> numpy dtype codes (without byte order).
PLY_TYPES = {
    "char": "i1", "int8": "i1", "uchar": "u1", "uint8": "u1", "short": "i2", "int16": "i2",
    "ushort": "u2", "uint16": "u2", "int": "i4", "int32": "i4", "uint": "u4", "uint32": "u4",
    "float": "f4", "float32": "f4", "double": "f8", "float64": "f8",
}

#: Vertex properties whose presence marks a 3DGS point cloud (any one of them: the file is meant as one).
GAUSSIAN_PROPERTIES = ("f_dc_0", "opacity", "scale_0", "rot_0")

_MAX_HEADER_LINES = 100_000


def read_ply_header(fh: BinaryIO, path: Path) -> tuple[str, list[list]]:
    """Parse a PLY header from the binary file object ``fh`` (left at the first byte of the body).

    Returns:
        ``(format, elements)``: ``format`` is ``"ascii"``, ``"binary_little_endian"`` or
        ``"binary_big_endian"``; ``elements`` is a list of ``[name, count, [(property, dtype code or None
        for a list property), ...]]`` in file order.

    Raises:
        MeshError: not a PLY file, a malformed or truncated header, an unknown property type or format
            (the message names ``path``).
    """
    first = fh.readline()
    if first.strip() != b"ply":
        raise MeshError(f"{path}: not a PLY file (its first line is {first[:20]!r}, not 'ply')")
    fmt, elements, cur = None, [], None
    for _ in range(_MAX_HEADER_LINES):
        line = fh.readline()
        if not line:
            raise MeshError(f"{path}: the PLY header has no end_header line (truncated file?)")
        parts = line.decode("ascii", "replace").split()
        if not parts or parts[0] in ("comment", "obj_info"):
            continue
        try:
            if parts[0] == "format":
                fmt = parts[1]
            elif parts[0] == "element":
                count = int(parts[2])
                if count < 0:
                    raise ValueError(f"negative count {count}")
                cur = [parts[1], count, []]
                elements.append(cur)
            elif parts[0] == "property":
                if cur is None:
                    raise MeshError(f"{path}: PLY property line before any element line")
                if parts[1] == "list":
                    cur[2].append((parts[4], None))
                else:
                    if parts[1] not in PLY_TYPES:
                        raise MeshError(f"{path}: unknown PLY property type {parts[1]!r} (property "
                                        f"{parts[2] if len(parts) > 2 else '?'}); known: {', '.join(PLY_TYPES)}")
                    cur[2].append((parts[2], PLY_TYPES[parts[1]]))
            elif parts[0] == "end_header":
                break
        except (IndexError, ValueError) as exc:
            raise MeshError(f"{path}: malformed PLY header line {line.strip()[:60]!r} ({exc}); the file is "
                            "corrupt: export it again") from None
    else:
        raise MeshError(f"{path}: the PLY header has no end_header line in its first {_MAX_HEADER_LINES} lines")
    if fmt not in ("ascii", "binary_little_endian", "binary_big_endian"):
        raise MeshError(f"{path}: unsupported PLY format {fmt!r} (ascii, binary_little_endian or "
                        "binary_big_endian)")
    return fmt, elements


@dataclass(frozen=True)
class PlyContents:
    """What a PLY file holds, from its header (:func:`ply_contents`)."""

    kind: str
    """``"gaussians"``, ``"mesh"``, ``"point_cloud"`` or ``"empty"`` (module docstring)."""
    vertices: int
    """Count of the ``vertex`` element (Gaussians for ``"gaussians"``)."""
    faces: int
    """Count of the ``face`` element (0 when there is none)."""
    missing_gaussian_properties: tuple[str, ...] = ()
    """For a file with some but not all of :data:`GAUSSIAN_PROPERTIES`: the absent ones."""

    def describe(self) -> str:
        """A phrase for messages, e.g. ``"a 3D Gaussian splatting point cloud (1,234 Gaussians, 0 faces)"``."""
        if self.kind == "gaussians":
            return f"a 3D Gaussian splatting point cloud ({counted(self.vertices, 'Gaussian')}, 0 faces)"
        if self.kind == "point_cloud":
            return f"a point cloud ({counted(self.vertices, 'point')}, 0 faces)"
        if self.kind == "empty":
            return "no vertices and no faces (an empty file)"
        return f"a mesh ({counted(self.vertices, 'vertex', 'vertices')}, {counted(self.faces, 'face')})"


def counted(n: int, one: str, many: str = "") -> str:
    """``"1 point"``, ``"1,234 points"``: ``n`` with the noun in the right number."""
    return f"{n:,} {one if n == 1 else (many or one + 's')}"


def ply_contents(path: str | Path) -> Optional[PlyContents]:
    """What the PLY file ``path`` holds, read from its header only; None when it is not a readable PLY.

    A vertex element with every one of :data:`GAUSSIAN_PROPERTIES` is ``"gaussians"`` (whatever the
    face count); with only some of them, the kind follows the face count and
    :attr:`PlyContents.missing_gaussian_properties` lists the absent ones.
    """
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            _, elements = read_ply_header(fh, path)
    except (OSError, MeshError):
        return None
    counts = {name: n for name, n, _ in elements}
    props = next(({p for p, _ in pr} for name, _, pr in elements if name == "vertex"), set())
    n_v, n_f = int(counts.get("vertex", 0)), int(counts.get("face", 0))
    have = [p for p in GAUSSIAN_PROPERTIES if p in props]
    if len(have) == len(GAUSSIAN_PROPERTIES):
        return PlyContents("gaussians", n_v, n_f)
    missing = tuple(p for p in GAUSSIAN_PROPERTIES if p not in props) if have else ()
    kind = "empty" if n_v == 0 else ("mesh" if n_f > 0 else "point_cloud")
    return PlyContents(kind, n_v, n_f, missing)
