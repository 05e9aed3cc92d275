"""Wavefront OBJ + MTL reader and writer (nvdiffrec-compatible PBR materials).

Conventions (docs/conventions.md §7, §9):

* OBJ ``vt`` has a bottom-left origin; internal UVs use glTF's top-left origin, so
  ``v_internal = 1 - v_file`` on read and write.
* ``map_Kd`` and ``Kd`` are sRGB in files and decoded to linear ``kd`` (as nvdiffrec's ``load_mtl``
  does for both the map and the constant).
* An MTL with ``bsdf pbr`` (nvdiffrec) stores ``Ks = (occlusion, roughness, metallic)`` and
  ``map_Ks`` as the ORM texture (data, no transfer curve) in nvdiffrec's documented layout, which is
  meshlift's internal one (occlusion = amount occluded, 0 = open; glTF files store the opposite,
  docs/conventions.md §7), so it is copied as is. A classic MTL (no ``bsdf`` line) stores
  ``Ks`` as a Phong specular colour, which has no PBR meaning: ``ks`` is left ``None`` (roughness 0.5,
  metal 0), unless the MTL has the PBR extension keys ``Pr`` / ``Pm``, which fill roughness / metallic.
* Normal maps (``bump`` / ``map_Bump`` / ``norm``) are tangent-space ``(n + 1) / 2`` PNGs.
* Vertex colours are not standard OBJ; the common ``v x y z r g b`` extension (MeshLab) is read and
  written with sRGB-encoded floats, and writing them warns.

Quads and n-gons are triangulated as fans ``(0, i, i + 1)``, which is exact for convex planar polygons.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from meshlift.errors import ImageError, MeshError
from meshlift.io import _textures as tex
from meshlift.structures.mesh import Material, Mesh

# map_* options and how many arguments each takes (MTL spec, Wavefront 1995).
_MAP_OPTION_ARGS = {
    "-blendu": 1, "-blendv": 1, "-bm": 1, "-boost": 1, "-cc": 1, "-clamp": 1, "-imfchan": 1,
    "-mm": 2, "-o": 3, "-s": 3, "-t": 3, "-texres": 1, "-type": 1,
}


#: The advice of a parse error (the line is named before it).
_FIX = ("fix or delete that line in a text editor, or re-export the mesh (e.g. from Blender, or with "
        "`meshlift convert` from another format)")


def _map_filename(tokens: list[str]) -> str:
    """File name of a ``map_*`` statement, skipping its options (numeric args of -o/-s/-t optional)."""
    i = 0
    while i < len(tokens) and tokens[i].startswith("-") and tokens[i].lower() in _MAP_OPTION_ARGS:
        n = _MAP_OPTION_ARGS[tokens[i].lower()]
        i += 1
        taken = 0
        while taken < n and i < len(tokens) - 1:
            try:
                float(tokens[i])
            except ValueError:
                if tokens[i].lower() not in ("on", "off", "l", "m", "r", "g", "b", "z"):
                    break
            i += 1
            taken += 1
    return " ".join(tokens[i:]).replace("\\", "/")


def _parse_mtl(path: Path) -> dict[str, dict]:
    """Parse an MTL file into ``{name: {key: value}}`` (keys lower-cased, raw strings/floats)."""
    materials: dict[str, dict] = {}
    current: Optional[dict] = None
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise MeshError(f"{path}: cannot read the material library ({exc})") from exc
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        key = parts[0].lower()
        if key == "newmtl":
            name = " ".join(parts[1:]) or "material"
            current = {"name": name}
            materials[name] = current
            continue
        if current is None:
            continue
        if key in ("map_kd", "map_ks", "map_bump", "bump", "norm", "map_pr", "map_pm", "map_d"):
            current[{"map_bump": "bump", "norm": "bump"}.get(key, key)] = _map_filename(parts[1:])
        elif key == "bsdf":
            current["bsdf"] = parts[1].lower() if len(parts) > 1 else ""
        elif key in ("kd", "ks", "ka", "ke", "pr", "pm", "d", "ns", "tr"):
            try:
                current[key] = [float(p) for p in parts[1:4]]
            except ValueError as exc:
                raise MeshError(f"{path}: bad number in line {raw!r}; fix that line of the material library or "
                                "re-export it with the mesh") from exc
    return materials


def _material_from_mtl(entry: dict, folder: Path, mtl_path: Path) -> Material:
    """Build a :class:`Material` from one parsed MTL entry (conventions §7)."""
    what = f"{mtl_path} material {entry['name']!r}"
    if "map_kd" in entry:
        kd = tex.kd_from_file(tex.read_image_file(folder / entry["map_kd"], what))
    else:
        kd_val = entry.get("kd", [0.8, 0.8, 0.8])
        kd_val = (kd_val * 3)[:3] if len(kd_val) == 1 else kd_val[:3]
        kd = torch.from_numpy(tex.srgb_to_linear_np(np.array(kd_val, dtype=np.float32))).reshape(1, 1, 3)
    ks = None
    if entry.get("bsdf") == "pbr":
        if "map_ks" in entry:
            ks = tex.data_from_file(tex.read_image_file(folder / entry["map_ks"], what))
        elif "ks" in entry:
            v = entry["ks"]
            v = (v * 3)[:3] if len(v) == 1 else v[:3]
            ks = torch.tensor(v, dtype=torch.float32).reshape(1, 1, 3)
    elif "pr" in entry or "pm" in entry:
        rough = entry.get("pr", [0.5])[0]
        metal = entry.get("pm", [0.0])[0]
        ks = torch.tensor([0.0, rough, metal], dtype=torch.float32).reshape(1, 1, 3)  # unoccluded
    normal = None
    if "bump" in entry:
        try:
            normal = tex.normal_from_file(tex.read_image_file(folder / entry["bump"], what))
        except ImageError:
            warnings.warn(f"{what}: normal map {entry['bump']!r} unreadable; ignored", stacklevel=3)
    return Material(kd=kd.contiguous(), ks=ks, normal=normal, name=entry["name"])


def _parse_general(text: str, path: Path) -> dict:
    """Line-by-line OBJ parser (any polygon size, negative indices, several materials): the general parser."""
    pos: list[list[float]] = []
    col: list[list[float]] = []
    uvs: list[list[float]] = []
    nrms: list[list[float]] = []
    f_pos: list[list[int]] = []
    f_tex: list[list[int]] = []
    f_nrm: list[list[int]] = []
    f_mat: list[int] = []
    mtllibs: list[str] = []
    mat_names: list[str] = []
    cur_mat = -1

    for lineno, raw in enumerate(text.splitlines(), 1):
        if "#" in raw:  # comments run to the end of the line
            raw = raw[: raw.index("#")]
        if not raw:
            continue
        parts = raw.split()
        if not parts:
            continue
        key = parts[0]
        try:
            if key == "v":
                pos.append([float(parts[1]), float(parts[2]), float(parts[3])])
                if len(parts) >= 7:
                    col.append([float(parts[4]), float(parts[5]), float(parts[6])])
            elif key == "vt":
                uvs.append([float(parts[1]), float(parts[2]) if len(parts) > 2 else 0.0])
            elif key == "vn":
                nrms.append([float(parts[1]), float(parts[2]), float(parts[3])])
            elif key == "f":
                corners = parts[1:]
                if len(corners) < 3:
                    raise MeshError(f"{path}:{lineno}: face with {len(corners)} corners; need at least 3")
                ip, it, inn = [], [], []
                nv, nt, nn = len(pos), len(uvs), len(nrms)
                for c in corners:
                    s = c.split("/")
                    a = int(s[0])
                    ip.append(a - 1 if a > 0 else nv + a)
                    if len(s) > 1 and s[1]:
                        b = int(s[1])
                        it.append(b - 1 if b > 0 else nt + b)
                    else:
                        it.append(-1)
                    if len(s) > 2 and s[2]:
                        d = int(s[2])
                        inn.append(d - 1 if d > 0 else nn + d)
                    else:
                        inn.append(-1)
                for k in range(1, len(corners) - 1):
                    f_pos.append([ip[0], ip[k], ip[k + 1]])
                    f_tex.append([it[0], it[k], it[k + 1]])
                    f_nrm.append([inn[0], inn[k], inn[k + 1]])
                    f_mat.append(cur_mat)
            elif key == "mtllib":
                mtllibs.append(raw.split(None, 1)[1].strip())
            elif key == "usemtl":
                name = raw.split(None, 1)[1].strip() if len(parts) > 1 else ""
                if name not in mat_names:
                    mat_names.append(name)
                cur_mat = mat_names.index(name)
        except (ValueError, IndexError) as exc:
            raise MeshError(f"{path}:{lineno}: cannot parse {raw.strip()!r} ({exc}); {_FIX}") from exc

    as_f = lambda x, k: np.asarray(x, dtype=np.float64).reshape(-1, k)  # noqa: E731
    as_i = lambda x: np.asarray(x, dtype=np.int64).reshape(-1, 3)  # noqa: E731
    return {
        "pos": as_f(pos, 3), "col": as_f(col, 3), "uvs": as_f(uvs, 2), "nrms": as_f(nrms, 3),
        "f_pos": as_i(f_pos), "f_tex": as_i(f_tex), "f_nrm": as_i(f_nrm), "f_mat": np.asarray(f_mat, dtype=np.int64),
        "mtllibs": mtllibs, "mat_names": mat_names,
    }


def _parse_fast(text: str) -> Optional[dict]:
    """Vectorised parser for the common case (what meshlift, nvdiffrec and most exporters write): only
    triangles, one corner pattern for every face, positive indices, at most one ``usemtl``. Returns None
    when the file is outside that case, and :func:`_parse_general` (the general parser) reads it instead."""
    groups: dict[str, list[str]] = {"v": [], "vt": [], "vn": [], "f": []}
    mtllibs: list[str] = []
    mat_names: list[str] = []
    for raw in text.splitlines():
        key, _, rest = raw.strip().partition(" ")
        if key in groups:
            groups[key].append(rest)
        elif key == "mtllib":
            mtllibs.append(rest.strip())
        elif key == "usemtl":
            if mat_names and mat_names[-1] != rest.strip():
                return None
            if not mat_names:
                mat_names.append(rest.strip())
        elif key in ("l", "p", "vp", "curv", "surf"):
            return None
    try:
        def floats(lines: list[str], k: int) -> Optional[np.ndarray]:
            if not lines:
                return np.zeros((0, k))
            counts = {len(ln.split()) for ln in lines}
            if len(counts) != 1:  # mixed token counts (e.g. 2- and 3-component vt): general parser
                return None
            return np.array(" ".join(lines).split(), dtype=np.float64).reshape(len(lines), counts.pop())

        v = floats(groups["v"], 3)
        vt = floats(groups["vt"], 2)
        vn = floats(groups["vn"], 3)
        if v is None or vt is None or vn is None or v.shape[1] not in (3, 4, 6, 7) or vn.shape[1] != 3:
            return None
        f_lines = groups["f"]
        tokens = " ".join(f_lines).split()
        if not f_lines or len(tokens) != 3 * len(f_lines) or any(len(ln.split()) != 3 or "-" in ln for ln in f_lines):
            return None
        pattern = tokens[0].count("/"), "//" in tokens[0]
        joined = " ".join(tokens)
        n_slash = joined.count("/")
        if n_slash != pattern[0] * len(tokens) or joined.count("//") != (len(tokens) if pattern[1] else 0):
            return None
        ints = np.array(joined.replace("//", " ").replace("/", " ").split(), dtype=np.int64)
    except ValueError:
        return None
    n = len(tokens)
    per = ints.size // n if n else 1
    if n and ints.size != per * n:
        return None
    ints = ints.reshape(n, per) - 1 if n else np.zeros((0, 1), dtype=np.int64)
    missing = -np.ones((len(f_lines), 3), dtype=np.int64)
    f_pos = ints[:, 0].reshape(-1, 3)
    if pattern == (0, False):
        f_tex, f_nrm = missing, missing
    elif pattern == (1, False):
        f_tex, f_nrm = ints[:, 1].reshape(-1, 3), missing
    elif pattern == (2, True):
        f_tex, f_nrm = missing, ints[:, 1].reshape(-1, 3)
    else:
        f_tex, f_nrm = ints[:, 1].reshape(-1, 3), ints[:, 2].reshape(-1, 3)
    cur = 0 if mat_names else -1
    return {
        "pos": v[:, :3], "col": v[:, 3:6] if v.shape[1] >= 6 else np.zeros((0, 3)), "uvs": vt[:, :2],
        "nrms": vn, "f_pos": f_pos, "f_tex": f_tex, "f_nrm": f_nrm,
        "f_mat": np.full(len(f_pos), cur, dtype=np.int64), "mtllibs": mtllibs, "mat_names": mat_names,
    }


def load_obj(path: str | Path) -> Mesh:
    """Read an OBJ file (and its MTL and textures) into a :class:`Mesh`.

    Args:
        path: ``.obj`` file. ``mtllib`` paths are resolved relative to it.

    Returns:
        Mesh with ``v_pos [V, 3]`` float32, ``t_pos_idx [T, 3]`` int64 (polygons fan-triangulated),
        ``v_tex``/``t_tex_idx`` when the file has ``vt`` (v flipped to the internal top-left origin),
        ``v_nrm``/``t_nrm_idx`` when it has ``vn``, ``v_color`` (linear) when vertices carry
        ``x y z r g b``, and the material of the first ``usemtl`` (see module docstring). When the file
        uses several materials, ``extras['face_material']`` ``[T]`` int64 and ``extras['material_names']``
        record them and a warning says only the first is kept as ``material``.

    Raises:
        MeshError: unreadable file, malformed numbers, a face index out of range or zero.
        ImageError: a texture named by the MTL is missing or unreadable.
    """
    path = Path(path)
    if not path.is_file():
        raise MeshError(f"{path}: OBJ file does not exist")
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise MeshError(f"{path}: cannot read ({exc})") from exc

    parsed = _parse_fast(text)
    if parsed is None:
        parsed = _parse_general(text, path)
    pos, col, uvs, nrms = parsed["pos"], parsed["col"], parsed["uvs"], parsed["nrms"]
    f_pos, f_tex, f_nrm, f_mat = parsed["f_pos"], parsed["f_tex"], parsed["f_nrm"], parsed["f_mat"]
    mtllibs, mat_names = parsed["mtllibs"], parsed["mat_names"]

    if len(pos) == 0 and len(f_pos) == 0:
        raise MeshError(
            f"{path}: no vertices ('v') and no faces ('f'): not an OBJ mesh (empty or another kind of file); "
            "check the path, or re-export the mesh"
        )
    v_pos = torch.from_numpy(pos.astype(np.float32)).reshape(-1, 3)
    t_pos = torch.from_numpy(f_pos).reshape(-1, 3)
    if t_pos.numel() and (int(t_pos.min()) < 0 or int(t_pos.max()) >= len(pos)):
        raise MeshError(
            f"{path}: a face references vertex {int(t_pos.max()) + 1 if int(t_pos.max()) >= len(pos) else 0} "
            f"but the file has {len(pos)} vertices; the file is truncated or corrupt: re-export the mesh"
        )

    v_tex = t_tex = None
    if len(uvs) and len(f_tex):
        t_tex = torch.from_numpy(f_tex).reshape(-1, 3)
        missing_tex = bool((t_tex < 0).any())
        uv = torch.from_numpy(uvs.astype(np.float32)).reshape(-1, 2)
        uv[:, 1] = 1.0 - uv[:, 1]
        if missing_tex:  # faces without vt get a dummy UV at the origin
            uv = torch.cat([uv, torch.zeros(1, 2)])
            t_tex = torch.where(t_tex < 0, torch.full_like(t_tex, len(uvs)), t_tex)
        if int(t_tex.max()) >= uv.shape[0] or int(t_tex.min()) < 0:
            raise MeshError(f"{path}: a face references a texture coordinate past the {len(uvs)} vt lines; the file "
                              "is truncated or corrupt: re-export the mesh")
        v_tex = uv
    v_nrm = t_nrm = None
    if len(nrms) and len(f_nrm):
        t_nrm = torch.from_numpy(f_nrm).reshape(-1, 3)
        missing_nrm = bool((t_nrm < 0).any())
        if missing_nrm:
            warnings.warn(f"{path}: some faces have no normals; normals dropped", stacklevel=2)
            t_nrm = None
        else:
            if int(t_nrm.max()) >= len(nrms) or int(t_nrm.min()) < 0:
                raise MeshError(f"{path}: a face references a normal past the {len(nrms)} vn lines; the file is "
                                  "truncated or corrupt: re-export the mesh")
            v_nrm = torch.nn.functional.normalize(torch.from_numpy(nrms.astype(np.float32)), dim=-1)
    v_color = None
    if len(col) and len(col) == len(pos):
        c = np.asarray(col, dtype=np.float32)
        if c.max() > 1.0:  # some writers use 0..255
            c = c / 255.0
        v_color = torch.from_numpy(tex.srgb_to_linear_np(c))

    material = None
    extras: dict = {}
    if mtllibs:
        entries: dict[str, dict] = {}
        mtl_path = None
        for lib in mtllibs:
            p = (path.parent / lib.replace("\\", "/"))
            if p.is_file():
                entries.update(_parse_mtl(p))
                mtl_path = mtl_path or p
            else:
                warnings.warn(f"{path}: material library {lib!r} not found; materials ignored", stacklevel=2)
        used = [n for n in mat_names if n in entries] or list(entries)
        if used and mtl_path is not None:
            material = _material_from_mtl(entries[used[0]], mtl_path.parent, mtl_path)
            if len([n for n in mat_names if n in entries]) > 1:
                warnings.warn(
                    f"{path}: uses {len(mat_names)} materials; meshlift keeps one material per mesh "
                    f"({used[0]!r}); per-face material ids are in extras['face_material']",
                    stacklevel=2,
                )
    if len(mat_names) > 1:
        extras["face_material"] = torch.from_numpy(np.asarray(f_mat, dtype=np.int64))
        extras["material_names"] = list(mat_names)
    return Mesh(
        v_pos=v_pos, t_pos_idx=t_pos, v_tex=v_tex, t_tex_idx=t_tex, v_nrm=v_nrm, t_nrm_idx=t_nrm,
        v_color=v_color, material=material, extras=extras,
    )


def texture_names(stem: str) -> dict[str, str]:
    """File names of the textures ``save_obj`` writes next to ``<stem>.obj``.

    nvdiffrec's names (``texture_kd.png``, ``texture_ks.png``, ``texture_n.png``) when ``stem`` is
    ``"mesh"``, else prefixed with ``<stem>_`` so several assets can share a folder.
    """
    prefix = "" if stem == "mesh" else f"{stem}_"
    return {k: f"{prefix}texture_{k}.png" for k in ("kd", "ks", "n")}


def _fmt_rows(arr: np.ndarray, prefix: str, fmt: str = "%.9g") -> str:
    if arr.size == 0:
        return ""
    row = prefix + " " + " ".join([fmt] * arr.shape[1]) + "\n"
    return "".join(row % tuple(r) for r in arr.tolist())


def save_obj(path: str | Path, mesh: Mesh, *, write_colors: bool = True) -> list[Path]:
    """Write ``mesh`` as OBJ (+ MTL + PNG textures, relative paths), nvdiffrec's layout.

    Files: ``<stem>.obj`` and ``<stem>.mtl`` (``bsdf pbr``, ``Kd``/``map_Kd``, ``Ks``/``map_Ks`` ORM in
    nvdiffrec's layout, ``bump`` normal map) plus the textures named by :func:`texture_names`. A mesh
    without a material gets the one meshlift renders it with (:func:`meshlift.io.materials.assumed_material`).
    ``vn`` is always written: the mesh's normals, else
    :func:`meshlift.geometry.mesh_ops.smooth_vertex_normals` (so viewers do not shade flat). UVs are
    written with ``v_file = 1 - v_internal``; ``kd`` is sRGB-encoded, ``ks`` and normals are data.

    Args:
        path: output ``.obj`` path; its folder is created.
        mesh: the mesh (not modified).
        write_colors: write ``v_color`` as the non-standard ``v x y z r g b`` extension (sRGB floats,
            with a warning that most tools ignore it). False drops them silently.

    Returns:
        The paths written.

    Raises:
        MeshError: ``path`` does not end in ``.obj``.
    """
    path = Path(path)
    if path.suffix.lower() != ".obj":
        raise MeshError(f"save_obj: {path} must end in .obj")
    path.parent.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    stem = path.stem
    from meshlift.io import materials as mats

    if mesh.num_faces:
        mesh = mats.with_normals(mesh)
    mat = mesh.material
    if mat is None and mesh.num_faces:
        mat = mats.assumed_material(mesh)
        if mesh.v_color is not None and not write_colors:  # colours not in the file: the grey default
            from dataclasses import replace as _replace

            mat = mats.assumed_material(_replace(mesh, v_color=None))
    lines = ["# written by meshlift\n"]
    if mat is not None:
        lines.append(f"mtllib {stem}.mtl\n")
    vp = mesh.v_pos.detach().cpu().double().numpy()
    if write_colors and mesh.v_color is not None:
        warnings.warn(
            f"{path}: vertex colours written as the non-standard 'v x y z r g b' OBJ extension; "
            "most tools ignore them (use PLY or GLB, or bake them into a texture)",
            stacklevel=2,
        )
        c = tex.linear_to_srgb_np(mesh.v_color.detach().cpu().numpy()[:, :3]).astype(np.float64)
        lines.append(_fmt_rows(np.concatenate([vp, c], axis=1), "v"))
    else:
        lines.append(_fmt_rows(vp, "v"))
    has_uv = mesh.v_tex is not None and mesh.t_tex_idx is not None
    has_n = mesh.v_nrm is not None and mesh.t_nrm_idx is not None
    if has_uv:
        uv = mesh.v_tex.detach().cpu().double().numpy().copy()
        uv[:, 1] = 1.0 - uv[:, 1]
        lines.append(_fmt_rows(uv, "vt"))
    if has_n:
        lines.append(_fmt_rows(mesh.v_nrm.detach().cpu().double().numpy(), "vn"))
    if mat is not None:
        lines.append(f"usemtl {mat.name}\n")
    f = mesh.t_pos_idx.cpu().numpy() + 1
    if has_uv and has_n:
        ft = mesh.t_tex_idx.cpu().numpy() + 1
        fn = mesh.t_nrm_idx.cpu().numpy() + 1
        cols = np.stack([f, ft, fn], axis=-1).reshape(-1, 9)
        lines.append("".join("f %d/%d/%d %d/%d/%d %d/%d/%d\n" % tuple(r) for r in cols.tolist()))
    elif has_uv:
        ft = mesh.t_tex_idx.cpu().numpy() + 1
        cols = np.stack([f, ft], axis=-1).reshape(-1, 6)
        lines.append("".join("f %d/%d %d/%d %d/%d\n" % tuple(r) for r in cols.tolist()))
    elif has_n:
        fn = mesh.t_nrm_idx.cpu().numpy() + 1
        cols = np.stack([f, fn], axis=-1).reshape(-1, 6)
        lines.append("".join("f %d//%d %d//%d %d//%d\n" % tuple(r) for r in cols.tolist()))
    else:
        lines.append(_fmt_rows(f, "f", "%d"))
    path.write_text("".join(lines), encoding="utf-8")
    written.append(path)

    if mat is not None:
        names = texture_names(stem)
        mtl = [f"# written by meshlift\nnewmtl {mat.name}\nbsdf pbr\n"]
        images: list[tuple[Path, np.ndarray]] = []  # encoded together below (one thread per map)
        if tuple(mat.kd.shape[:2]) == (1, 1):  # constants stay exact as Kd / Ks
            mtl.append("Kd %.9g %.9g %.9g\n" % tuple(tex.kd_to_file(mat.kd)[0, 0, :3].tolist()))
        else:
            images.append((path.parent / names["kd"], tex.kd_to_file(mat.kd)))
            mtl.append("Kd 1 1 1\n" + f"map_Kd {names['kd']}\n")
        if mat.ks is not None and tuple(mat.ks.shape[:2]) == (1, 1):
            mtl.append("Ks %.9g %.9g %.9g\n" % tuple(mat.ks[0, 0, :3].double().tolist()))
        elif mat.ks is not None:
            images.append((path.parent / names["ks"], np.clip(mat.ks.detach().cpu().float().numpy(), 0, 1)))
            mtl.append(f"map_Ks {names['ks']}\n")
        if mat.normal is not None:
            images.append((path.parent / names["n"], tex.normal_to_file(mat.normal)))
            mtl.append(f"bump {names['n']}\n")
        for (img_path, _), data in zip(images, tex.encode_pngs([a for _, a in images])):
            img_path.write_bytes(data)
            written.append(img_path)
        mtl_path = path.with_suffix(".mtl")
        mtl_path.write_text("".join(mtl), encoding="utf-8")
        written.append(mtl_path)
    return written
