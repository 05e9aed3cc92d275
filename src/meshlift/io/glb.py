"""glTF 2.0 binary (GLB) writer and glTF/GLB reader with PBR metallic-roughness materials.

Written by hand against the glTF 2.0 specification (Khronos, §3.6 buffers/accessors, §3.7.2 mesh
attributes, §3.9 materials) so every field is under control; output is checked by the Khronos
glTF-Validator in the tests (0 errors, 0 warnings).

Conventions (docs/conventions.md §7, §9, §13): glTF UVs have the same top-left origin as meshlift's
internal UVs (no flip). ``baseColorTexture`` is sRGB (``kd`` is encoded on write, decoded on read);
``baseColorFactor`` and ``COLOR_0`` are linear. ``ks`` is written as a glTF ORM image (R = glTF
occlusion = ``1 − ks.R``, G = roughness, B = metallic; :mod:`meshlift.io.materials`), referenced as
``metallicRoughnessTexture`` and, when some texel is occluded, also as ``occlusionTexture``. Every written
primitive has ``NORMAL`` (the mesh's normals, or :func:`meshlift.geometry.mesh_ops.smooth_vertex_normals`),
``TANGENT`` (``tangent_frames``: xyz + handedness w = ±1) whenever a normal map is written, and a material
(the mesh's, or the one meshlift assumed, :func:`meshlift.io.materials.assumed_material`). Materials are
``doubleSided`` because meshlift's renderer neither culls nor lights back faces differently.

glTF stores one attribute set per vertex, so UV, normal and tangent seams are handled by splitting
vertices per unique ``(position, uv, normal, tangent)`` corner. The reader welds positions back (exact
equality), keeping UVs/normals per corner, so a written mesh reloads with its original topology.
"""

from __future__ import annotations

import base64
import json
import struct
import warnings
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from meshlift.errors import MeshError
from meshlift.io import _textures as tex
from meshlift.io import materials as mats
from meshlift.structures.mesh import Material, Mesh

_ARRAY_BUFFER = 34962
_ELEMENT_ARRAY_BUFFER = 34963
_COMPONENT = {5120: np.int8, 5121: np.uint8, 5122: np.int16, 5123: np.uint16, 5125: np.uint32, 5126: np.float32}
_NCOMP = {"SCALAR": 1, "VEC2": 2, "VEC3": 3, "VEC4": 4, "MAT2": 4, "MAT3": 9, "MAT4": 16}
_UNSUPPORTED_EXT = ("KHR_draco_mesh_compression", "EXT_meshopt_compression", "KHR_mesh_quantization")


class _Builder:
    """Accumulates the BIN chunk, bufferViews and accessors."""

    def __init__(self) -> None:
        self.bin = bytearray()
        self.views: list[dict] = []
        self.accessors: list[dict] = []

    def view(self, data: bytes, target: Optional[int] = None) -> int:
        while len(self.bin) % 4:
            self.bin.append(0)
        v = {"buffer": 0, "byteOffset": len(self.bin), "byteLength": len(data)}
        if target is not None:
            v["target"] = target
        self.bin.extend(data)
        self.views.append(v)
        return len(self.views) - 1

    def accessor(self, arr: np.ndarray, kind: str, target: int, minmax: bool = False) -> int:
        ctype = {np.dtype(np.float32): 5126, np.dtype(np.uint32): 5125, np.dtype(np.uint16): 5123}[arr.dtype]
        acc = {
            "bufferView": self.view(np.ascontiguousarray(arr).tobytes(), target),
            "componentType": ctype,
            "count": int(arr.shape[0]),
            "type": kind,
        }
        if minmax:
            a2 = arr.reshape(arr.shape[0], -1)
            acc["min"] = [float(x) for x in a2.min(0)]
            acc["max"] = [float(x) for x in a2.max(0)]
            if ctype != 5126:
                acc["min"] = [int(x) for x in acc["min"]]
                acc["max"] = [int(x) for x in acc["max"]]
        self.accessors.append(acc)
        return len(self.accessors) - 1


def split_corners(
    mesh: Mesh, v_tng: Optional[torch.Tensor] = None, t_tng_idx: Optional[torch.Tensor] = None
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Split vertices per unique (position, uv, normal, tangent) corner, as glTF needs one index per vertex.

    Args:
        mesh: the mesh (its ``t_tex_idx`` / ``t_nrm_idx`` are used when present).
        v_tng, t_tng_idx: optional per-corner tangents ``[K, 4]`` and their indices ``[T, 3]``.

    Returns:
        ``faces [T, 3]`` int64 into the new vertex list, and a dict of per-new-vertex arrays:
        ``pos [N, 3]``, optionally ``uv [N, 2]``, ``nrm [N, 3]``, ``tng [N, 4]``, ``color [N, C]``.
    """
    T = mesh.num_faces
    keys = [mesh.t_pos_idx.cpu().numpy().reshape(-1)]
    has_uv = mesh.v_tex is not None and mesh.t_tex_idx is not None
    has_n = mesh.v_nrm is not None and mesh.t_nrm_idx is not None
    has_t = v_tng is not None and t_tng_idx is not None
    if has_uv:
        keys.append(mesh.t_tex_idx.cpu().numpy().reshape(-1))
    if has_n:
        keys.append(mesh.t_nrm_idx.cpu().numpy().reshape(-1))
    if has_t:
        keys.append(t_tng_idx.cpu().numpy().reshape(-1))
    corner = np.stack(keys, axis=1)
    uniq, inverse = np.unique(corner, axis=0, return_inverse=True)
    faces = inverse.reshape(T, 3).astype(np.int64)
    out = {"pos": mesh.v_pos.detach().cpu().float().numpy()[uniq[:, 0]]}
    col = 1
    if has_uv:
        out["uv"] = mesh.v_tex.detach().cpu().float().numpy()[uniq[:, col]]
        col += 1
    if has_n:
        out["nrm"] = mesh.v_nrm.detach().cpu().float().numpy()[uniq[:, col]]
        col += 1
    if has_t:
        out["tng"] = v_tng.detach().cpu().float().numpy()[uniq[:, col]]
    if mesh.v_color is not None:
        out["color"] = mesh.v_color.detach().cpu().float().numpy()[uniq[:, 0]]
    return faces, out


def _unit(n: np.ndarray, fallback: tuple[float, ...]) -> np.ndarray:
    n = n.astype(np.float64)
    ln = np.linalg.norm(n, axis=1, keepdims=True)
    return np.where(ln > 1e-12, n / np.maximum(ln, 1e-12), np.array(fallback))


def save_glb(path: str | Path, mesh: Mesh, *, occlusion: Optional[bool] = None) -> Path:
    """Write ``mesh`` as a self-contained GLB (textures embedded as PNG).

    Geometry: ``POSITION``; ``NORMAL`` always (the mesh's normals, else
    :func:`meshlift.geometry.mesh_ops.smooth_vertex_normals`: area-weighted, hard above
    ``CREASE_ANGLE_DEG``), so clients shade smoothly as meshlift does; ``TEXCOORD_0`` with UVs;
    ``TANGENT`` (xyz + handedness w = ±1, :func:`meshlift.geometry.mesh_ops.tangent_frames`, the frame
    meshlift shades with) whenever a normal map is written; ``COLOR_0`` (float VEC3/VEC4, linear) for vertex
    colours.

    Material mapping (glTF 2.0 §3.9.2, docs/conventions.md §7): ``kd`` → ``baseColorTexture`` (sRGB) or,
    for a 1×1 ``kd``, ``baseColorFactor`` (linear); an alpha channel that is not all 1 sets
    ``alphaMode: BLEND``; ``ks`` → a glTF ORM image (:func:`meshlift.io.materials.ks_to_gltf_orm`, R =
    1 − occlusion) as ``metallicRoughnessTexture`` (or roughness/metallic factors for a 1×1 ``ks``);
    ``normal`` → ``normalTexture``. A mesh without a material gets the one meshlift renders it with
    (:func:`meshlift.io.materials.assumed_material`: 0.5 grey — white with vertex colours — roughness 0.5,
    metallic 0), never glTF's default (white, metallic 1, roughness 1). Textures need UVs: without UVs they
    are dropped with a warning. An empty mesh writes a valid file with an empty scene.

    Args:
        path: output ``.glb`` path; its folder is created.
        mesh: the mesh (not modified).
        occlusion: also reference the ORM image as ``occlusionTexture``: None (default) when some texel of
            ``ks`` is occluded, True always, False never (the occlusion is then lost in the file). A
            constant (1×1) occlusion cannot be stored (glTF has no occlusion factor): a warning says so.

    Returns:
        ``path``.

    Raises:
        MeshError: ``path`` does not end in ``.glb``.
    """
    path = Path(path)
    if path.suffix.lower() != ".glb":
        raise MeshError(f"save_glb: {path} must end in .glb (glTF with external files is not written)")
    path.parent.mkdir(parents=True, exist_ok=True)
    b = _Builder()
    gltf: dict = {
        "asset": {"version": "2.0", "generator": "meshlift"},
        "scene": 0,
        "scenes": [{}],  # nodes are added below; an empty list is invalid glTF
    }
    if mesh.extras.get("up_axis_conversion"):  # recorded by meshlift.mesh.orient.to_y_up
        gltf["asset"]["extras"] = {"meshlift": {"up_axis_conversion": mesh.extras["up_axis_conversion"]}}
    if mesh.num_faces > 0:
        mesh = mats.with_normals(mesh)
        mat = mesh.material if mesh.material is not None else mats.assumed_material(mesh)
        has_uv = mesh.v_tex is not None and mesh.t_tex_idx is not None
        if not has_uv and _has_texture(mat):
            warnings.warn(f"{path}: the mesh has textures but no UVs; textures dropped", stacklevel=2)
        v_tng = t_tng = None
        if has_uv and mat.normal is not None:
            from meshlift.geometry.mesh_ops import tangent_frames

            with torch.no_grad():
                v_tng, t_tng = tangent_frames(mesh.v_pos.detach().double(), mesh.t_pos_idx, mesh.v_tex.double(),
                                              mesh.t_tex_idx, mesh.v_nrm.double(), mesh.t_nrm_idx)
        faces, attr = split_corners(mesh, v_tng, t_tng)
        prim_attr: dict[str, int] = {}
        prim_attr["POSITION"] = b.accessor(attr["pos"].astype(np.float32), "VEC3", _ARRAY_BUFFER, minmax=True)
        n = _unit(attr["nrm"], (0.0, 0.0, 1.0))
        prim_attr["NORMAL"] = b.accessor(n.astype(np.float32), "VEC3", _ARRAY_BUFFER)
        if "tng" in attr:
            tg = attr["tng"].astype(np.float64)
            xyz = _unit(tg[:, :3], (1.0, 0.0, 0.0))
            w = np.where(tg[:, 3:4] < 0, -1.0, 1.0)
            prim_attr["TANGENT"] = b.accessor(np.concatenate([xyz, w], 1).astype(np.float32), "VEC4", _ARRAY_BUFFER)
        if "uv" in attr:
            prim_attr["TEXCOORD_0"] = b.accessor(attr["uv"].astype(np.float32), "VEC2", _ARRAY_BUFFER)
        if "color" in attr:
            c = np.clip(np.nan_to_num(attr["color"]), 0.0, 1.0).astype(np.float32)
            prim_attr["COLOR_0"] = b.accessor(c, "VEC4" if c.shape[1] == 4 else "VEC3", _ARRAY_BUFFER)
        nv = attr["pos"].shape[0]
        idx = faces.reshape(-1).astype(np.uint16 if nv < 65535 else np.uint32)
        prim = {"attributes": prim_attr, "indices": b.accessor(idx, "SCALAR", _ELEMENT_ARRAY_BUFFER), "mode": 4}
        gltf["materials"] = [_material_json(mat, b, gltf, textured="uv" in attr, occlusion=occlusion, path=path)]
        prim["material"] = 0
        gltf["meshes"] = [{"primitives": [prim], "name": "mesh"}]
        gltf["nodes"] = [{"mesh": 0, "name": "mesh"}]
        gltf["scenes"][0]["nodes"] = [0]
    if b.bin:
        while len(b.bin) % 4:
            b.bin.append(0)
        gltf["buffers"] = [{"byteLength": len(b.bin)}]
        gltf["bufferViews"] = b.views
    if b.accessors:
        gltf["accessors"] = b.accessors
    js = json.dumps(gltf, separators=(",", ":")).encode("utf-8")
    js += b" " * ((4 - len(js) % 4) % 4)
    chunks = struct.pack("<II", len(js), 0x4E4F534A) + js
    if b.bin:
        chunks += struct.pack("<II", len(b.bin), 0x004E4942) + bytes(b.bin)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<III", 0x46546C67, 2, 12 + len(chunks)))
        fh.write(chunks)
    return path


def _has_texture(mat: Material) -> bool:
    big = lambda t: t is not None and tuple(t.shape[:2]) != (1, 1)  # noqa: E731
    return big(mat.kd) or big(mat.ks) or mat.normal is not None


def _material_json(mat: Material, b: _Builder, gltf: dict, textured: bool, occlusion: Optional[bool],
                   path: Path) -> dict:
    pending: list[tuple[dict, np.ndarray]] = []  # encoded together at the end (one thread per map)

    def add_image(arr: np.ndarray, name: str) -> int:
        image = {"bufferView": -1, "mimeType": "image/png", "name": name}
        pending.append((image, arr))
        gltf.setdefault("images", []).append(image)
        gltf.setdefault("samplers", [{"magFilter": 9729, "minFilter": 9987, "wrapS": 10497, "wrapT": 10497}])
        gltf.setdefault("textures", []).append({"sampler": 0, "source": len(gltf["images"]) - 1})
        return len(gltf["textures"]) - 1

    pbr: dict = {}
    out: dict = {"name": mat.name, "pbrMetallicRoughness": pbr, "doubleSided": True}
    kd = mat.kd.detach().cpu().float()
    has_alpha = kd.shape[-1] == 4 and bool((kd[..., 3] < 1.0).any())
    if tuple(kd.shape[:2]) == (1, 1) or not textured:
        c = kd.reshape(-1, kd.shape[-1]).mean(0).clamp(0, 1).tolist()
        pbr["baseColorFactor"] = (c + [1.0])[:4] if len(c) == 3 else c[:4]
    else:
        arr = tex.kd_to_file(kd if has_alpha else kd[..., :3])
        pbr["baseColorTexture"] = {"index": add_image(arr, "kd")}
    if has_alpha:
        out["alphaMode"] = "BLEND"
    ks = None if mat.ks is None else mat.ks.detach().cpu().float()
    if ks is None:
        from meshlift.structures.mesh import DEFAULT_KS

        pbr["roughnessFactor"] = float(DEFAULT_KS[1])
        pbr["metallicFactor"] = float(DEFAULT_KS[2])
    elif tuple(ks.shape[:2]) == (1, 1) or not textured:
        m = ks.reshape(-1, ks.shape[-1]).mean(0).clamp(0, 1)
        pbr["roughnessFactor"] = float(m[1])
        pbr["metallicFactor"] = float(m[2])
        if occlusion is not False and float(m[0]) > mats.OCCLUSION_EPS:
            warnings.warn(f"{path}: a constant occlusion ({float(m[0]):.3g}) has no glTF equivalent without a "
                          "texture; it is not written", stacklevel=3)
    else:
        ti = add_image(mats.ks_to_gltf_orm(ks), "ks_orm")
        pbr["metallicRoughnessTexture"] = {"index": ti}
        pbr["roughnessFactor"] = 1.0
        pbr["metallicFactor"] = 1.0
        if occlusion or (occlusion is None and mats.has_occlusion(ks)):
            out["occlusionTexture"] = {"index": ti}
    if mat.normal is not None and textured:
        out["normalTexture"] = {"index": add_image(tex.normal_to_file(mat.normal), "normal")}
    for (image, _), data in zip(pending, tex.encode_pngs([a for _, a in pending])):
        image["bufferView"] = b.view(data)  # in the order the images were added, as before
    return out


# ----------------------------------------------------------------------------------------- reading


def _read_container(path: Path) -> tuple[dict, list[bytes]]:
    data = path.read_bytes()
    if data[:4] == b"glTF":
        if len(data) < 20:
            raise MeshError(f"{path}: truncated GLB header")
        _, version, length = struct.unpack_from("<III", data, 0)
        if version != 2:
            raise MeshError(f"{path}: GLB version {version}; only glTF 2.0 is supported")
        off, js, bin_chunk = 12, None, b""
        while off + 8 <= min(length, len(data)):
            clen, ctype = struct.unpack_from("<II", data, off)
            chunk = data[off + 8: off + 8 + clen]
            if len(chunk) < clen:
                raise MeshError(f"{path}: truncated GLB chunk")
            if ctype == 0x4E4F534A:
                js = json.loads(chunk.decode("utf-8"))
            elif ctype == 0x004E4942 and not bin_chunk:
                bin_chunk = chunk
            off += 8 + clen
        if js is None:
            raise MeshError(f"{path}: GLB has no JSON chunk")
    else:
        try:
            js = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise MeshError(f"{path}: neither a GLB nor a glTF JSON file ({exc})") from exc
        bin_chunk = b""
    buffers = []
    for i, buf in enumerate(js.get("buffers", [])):
        uri = buf.get("uri")
        if uri is None:
            buffers.append(bin_chunk)
        elif uri.startswith("data:"):
            buffers.append(base64.b64decode(uri.split(",", 1)[1]))
        else:
            p = path.parent / uri
            if not p.is_file():
                raise MeshError(f"{path}: buffer {i} file {uri!r} not found next to the glTF")
            buffers.append(p.read_bytes())
    return js, buffers


def _accessor(js: dict, buffers: list[bytes], index: int, path: Path) -> np.ndarray:
    acc = js["accessors"][index]
    dtype = np.dtype(_COMPONENT[acc["componentType"]])
    ncomp = _NCOMP[acc["type"]]
    count = int(acc["count"])
    if "sparse" in acc:
        raise MeshError(f"{path}: sparse accessors are not supported; re-export without sparse data")
    if "bufferView" not in acc:
        arr = np.zeros((count, ncomp), dtype=dtype)
    else:
        view = js["bufferViews"][acc["bufferView"]]
        buf = buffers[view["buffer"]]
        start = view.get("byteOffset", 0) + acc.get("byteOffset", 0)
        stride = view.get("byteStride", 0) or dtype.itemsize * ncomp
        need = start + stride * (count - 1) + dtype.itemsize * ncomp if count else start
        if need > len(buf):
            raise MeshError(f"{path}: accessor {index} reads past the end of its buffer (file truncated?)")
        arr = np.ndarray((count, ncomp), dtype=dtype, buffer=buf, offset=start, strides=(stride, dtype.itemsize))
        arr = np.array(arr)
    if acc.get("normalized"):
        info = np.iinfo(dtype)
        arr = np.maximum(arr.astype(np.float64) / info.max, -1.0).astype(np.float32)
    return arr


def _node_matrix(node: dict) -> np.ndarray:
    if "matrix" in node:
        return np.array(node["matrix"], dtype=np.float64).reshape(4, 4).T  # column-major
    t = np.array(node.get("translation", [0, 0, 0]), dtype=np.float64)
    x, y, z, w = node.get("rotation", [0, 0, 0, 1])  # glTF quaternions are (x, y, z, w)
    r = np.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
        [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
        [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
    ])
    s = np.array(node.get("scale", [1, 1, 1]), dtype=np.float64)
    m = np.eye(4)
    m[:3, :3] = r * s[None, :]
    m[:3, 3] = t
    return m


def _image(js: dict, buffers: list[bytes], tex_info: Optional[dict], path: Path) -> Optional[np.ndarray]:
    if not tex_info:
        return None
    texture = js["textures"][tex_info["index"]]
    src = texture.get("source")
    if src is None:
        warnings.warn(f"{path}: texture {tex_info['index']} uses an image extension only; ignored", stacklevel=4)
        return None
    img = js["images"][src]
    if "bufferView" in img:
        view = js["bufferViews"][img["bufferView"]]
        off = view.get("byteOffset", 0)
        data = buffers[view["buffer"]][off: off + view["byteLength"]]
    elif img.get("uri", "").startswith("data:"):
        data = base64.b64decode(img["uri"].split(",", 1)[1])
    else:
        p = path.parent / img.get("uri", "")
        if not p.is_file():
            raise MeshError(f"{path}: image file {img.get('uri')!r} not found next to the glTF")
        data = p.read_bytes()
    if tex_info.get("texCoord", 0) != 0:
        warnings.warn(f"{path}: a texture uses TEXCOORD_{tex_info['texCoord']}; read with TEXCOORD_0", stacklevel=4)
    return tex.decode_image_bytes(data, f"{path} image {src}")


def _material(js: dict, buffers: list[bytes], index: int, path: Path) -> Material:
    m = js["materials"][index]
    pbr = m.get("pbrMetallicRoughness", {})
    factor = np.array(pbr.get("baseColorFactor", [1, 1, 1, 1]), dtype=np.float32)
    img = _image(js, buffers, pbr.get("baseColorTexture"), path)
    if img is None:
        kd = torch.from_numpy(factor[:3].copy()).reshape(1, 1, 3)
        if factor[3] < 1.0:
            kd = torch.from_numpy(factor.copy()).reshape(1, 1, 4)
    else:
        kd = tex.kd_from_file(img)
        f = factor[: kd.shape[-1]] if kd.shape[-1] == 4 else factor[:3]
        if not np.all(f == 1.0):
            kd = kd * torch.from_numpy(f.copy())
    rough = float(pbr.get("roughnessFactor", 1.0))
    metal = float(pbr.get("metallicFactor", 1.0))
    mr = _image(js, buffers, pbr.get("metallicRoughnessTexture"), path)
    occ_info = m.get("occlusionTexture")
    occ = _image(js, buffers, occ_info, path)
    ks = mats.ks_from_gltf(
        None if mr is None else tex.data_from_file(mr),
        None if occ is None else tex.data_from_file(occ),
        rough, metal, float(occ_info.get("strength", 1.0)) if occ_info else 1.0,
    )
    normal = None
    n_info = m.get("normalTexture")
    img = _image(js, buffers, n_info, path)
    if img is not None:
        normal = tex.normal_from_file(img)
        scale = float(n_info.get("scale", 1.0))
        if scale != 1.0:  # glTF §3.9.4: the sampled x and y are multiplied by scale
            normal = torch.nn.functional.normalize(normal * torch.tensor([scale, scale, 1.0]), dim=-1)
    return Material(kd=kd.contiguous(), ks=ks, normal=normal, name=m.get("name", f"material{index}"))


def load_glb(path: str | Path, *, weld: bool = True) -> Mesh:
    """Read a ``.glb`` or ``.gltf`` file into one :class:`Mesh` (all triangle primitives, node transforms applied).

    Args:
        path: ``.glb`` / ``.gltf`` (external and ``data:`` buffers and images resolved).
        weld: merge vertices with exactly equal positions into one ``v_pos`` entry, keeping UVs and
            normals per corner (``t_tex_idx``/``t_nrm_idx``) — undoes glTF's per-corner splitting.

    Returns:
        Mesh in the file's units; ``material`` from the first primitive that has one (several
        materials: a warning, ``extras['face_material']`` and ``extras['material_names']``). ``ks`` is
        the internal ``(occlusion, roughness, metallic)`` (:func:`meshlift.io.materials.ks_from_gltf`):
        roughness/metallic from the metallicRoughness image times the factors (or the factors alone),
        occlusion ``= 1 − occlusionTexture.R`` (0 without one). Points/lines primitives are skipped.

    Raises:
        MeshError: unreadable or truncated file, compressed geometry (Draco/meshopt), index past the
            vertex list.
    """
    path = Path(path)
    if not path.is_file():
        raise MeshError(f"{path}: glTF file does not exist")
    try:
        js, buffers = _read_container(path)
    except (OSError, ValueError, struct.error, KeyError) as exc:
        raise MeshError(f"{path}: cannot read glTF ({exc})") from exc
    for ext in js.get("extensionsRequired", []):
        if ext in _UNSUPPORTED_EXT:
            raise MeshError(f"{path}: uses {ext}; decompress it first (e.g. gltf-transform) and retry")
    ignored = [e for e in js.get("extensionsUsed", []) if e not in _UNSUPPORTED_EXT]
    if ignored:
        warnings.warn(f"{path}: glTF extensions {', '.join(ignored)} are ignored (core glTF 2.0 is read)", stacklevel=2)
    scenes = js.get("scenes", [])
    if scenes:
        roots = scenes[js.get("scene", 0)].get("nodes", [])
    else:
        roots = list(range(len(js.get("nodes", []))))
    pos, uv, nrm, col, fpos, fmat = [], [], [], [], [], []
    mat_ids: list[int] = []
    offset = 0
    any_uv = any_nrm = any_col = False
    stack = [(n, np.eye(4)) for n in roots]
    prims: list[tuple[dict, np.ndarray]] = []
    while stack:
        ni, parent = stack.pop(0)
        node = js["nodes"][ni]
        world = parent @ _node_matrix(node)
        if "mesh" in node:
            for p in js["meshes"][node["mesh"]]["primitives"]:
                prims.append((p, world))
        stack.extend((c, world) for c in node.get("children", []))
    try:
        for p, world in prims:
            mode = p.get("mode", 4)
            if mode not in (4, 5, 6):
                continue
            a = p["attributes"]
            v = _accessor(js, buffers, a["POSITION"], path).astype(np.float64)
            n = v.shape[0]
            idx = (_accessor(js, buffers, p["indices"], path).reshape(-1).astype(np.int64)
                   if "indices" in p else np.arange(n, dtype=np.int64))
            if mode == 5:
                k = np.arange(len(idx) - 2)
                tri = np.stack([idx[k], idx[k + 1 + (k % 2)], idx[k + 2 - (k % 2)]], axis=1)
            elif mode == 6:
                k = np.arange(1, len(idx) - 1)
                tri = np.stack([np.full_like(k, idx[0]), idx[k], idx[k + 1]], axis=1)
            else:
                tri = idx[: len(idx) // 3 * 3].reshape(-1, 3)
            if tri.size and (tri.min() < 0 or tri.max() >= n):
                raise MeshError(f"{path}: a primitive's indices reach {int(tri.max())} but it has {n} vertices")
            pos.append(v @ world[:3, :3].T + world[:3, 3])
            if "TEXCOORD_0" in a:
                uv.append(_accessor(js, buffers, a["TEXCOORD_0"], path).astype(np.float32)); any_uv = True
            else:
                uv.append(np.zeros((n, 2), np.float32))
            if "NORMAL" in a:
                nn = _accessor(js, buffers, a["NORMAL"], path).astype(np.float64) @ np.linalg.inv(world[:3, :3])
                nn /= np.maximum(np.linalg.norm(nn, axis=1, keepdims=True), 1e-12)
                nrm.append(nn.astype(np.float32)); any_nrm = True
            else:
                nrm.append(np.tile(np.array([0, 0, 1], np.float32), (n, 1)))
            if "COLOR_0" in a:
                c = _accessor(js, buffers, a["COLOR_0"], path).astype(np.float32)
                if np.issubdtype(c.dtype, np.integer):
                    c = c.astype(np.float32)
                c = np.concatenate([c, np.ones((n, 1), np.float32)], 1) if c.shape[1] == 3 else c
                col.append(c); any_col = True
            else:
                col.append(np.ones((n, 4), np.float32))
            if np.linalg.det(world[:3, :3]) < 0:
                tri = tri[:, [0, 2, 1]]
            fpos.append(tri + offset)
            mi = p.get("material", -1)
            if mi >= 0 and mi not in mat_ids:
                mat_ids.append(mi)
            fmat.append(np.full(len(tri), mat_ids.index(mi) if mi >= 0 else -1))
            offset += n
    except (KeyError, IndexError, TypeError) as exc:
        raise MeshError(f"{path}: malformed glTF ({type(exc).__name__}: {exc})") from exc
    if not fpos:
        return Mesh(v_pos=torch.zeros(0, 3), t_pos_idx=torch.zeros(0, 3, dtype=torch.int64))
    P = np.concatenate(pos).astype(np.float32)
    F = np.concatenate(fpos)
    UV, N, C = np.concatenate(uv), np.concatenate(nrm), np.concatenate(col)
    if any_col and np.all(C[:, 3] == 1.0):
        C = C[:, :3]
    if weld:
        uniq, first, inv = np.unique(P, axis=0, return_index=True, return_inverse=True)
        order = np.argsort(first, kind="stable")  # keep first-occurrence order of vertices
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        first = first[order]
        v_pos, t_pos = uniq[order], rank[inv.reshape(-1)][F]
        v_color = C[first] if any_col else None
    else:
        v_pos, t_pos, v_color = P, F, (C if any_col else None)
    extras: dict = {}
    material = None
    if mat_ids:
        material = _material(js, buffers, mat_ids[0], path)
        if len(mat_ids) > 1:
            warnings.warn(f"{path}: {len(mat_ids)} materials; meshlift keeps the first as Mesh.material", stacklevel=2)
            extras["face_material"] = torch.from_numpy(np.concatenate(fmat))
            extras["material_names"] = [js["materials"][i].get("name", str(i)) for i in mat_ids]
    as_t = lambda a: torch.from_numpy(np.ascontiguousarray(a))  # noqa: E731
    return Mesh(
        v_pos=as_t(v_pos.astype(np.float32)), t_pos_idx=as_t(t_pos.astype(np.int64)),
        v_tex=as_t(UV) if any_uv else None, t_tex_idx=as_t(F.astype(np.int64)) if any_uv else None,
        v_nrm=as_t(N) if any_nrm else None, t_nrm_idx=as_t(F.astype(np.int64)) if any_nrm else None,
        v_color=None if v_color is None else as_t(v_color.astype(np.float32)),
        material=material, extras=extras,
    )
