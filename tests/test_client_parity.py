"""Client parity (issue 15): every kind of asset meshlift writes looks the same in three.js as in meshlift.

Each asset is written by meshlift's own writers (and, for the converted ones, ``meshlift convert``), then
rendered twice from one fixed camera under one fixed environment:

* in **three.js** (npm ``three``, pinned in .ci/run) inside headless Debian **chromium** (SwiftShader
  WebGL), ``GLTFLoader`` / ``PLYLoader`` + ``MeshStandardMaterial``; colour handling made explicit:
  ``outputColorSpace = SRGBColorSpace``, ``toneMapping = NoToneMapping``, exposure 1, black background;
* in **meshlift** (``load_mesh`` + ``render_mesh``, what ``meshlift render`` runs), linear radiance
  clamped to [0, 1] and sRGB-encoded.

Environment: the lat-long ``.hdr`` of ``_client_parity.linear_environment`` (L(d) = 0.5 + 0.45 d per
channel), loaded by meshlift's ``io.hdr.read_light`` and three's ``HDRLoader`` + ``PMREMGenerator``,
with three's ``environmentRotation`` set to map its equirect layout onto meshlift's (conventions §8). A
smooth, direction-linear environment rather than a natural ``probe.hdr``: the two renderers prefilter
differently (meshlift: exact GGX-lobe cube mips and a cosine-convolved diffuse cube; three: PMREM's blur
chain) and three's standard material adds multiple-scattering energy compensation, so on a
high-frequency probe they differ by far more than a file-convention error would; on this environment
they agree to a few 8-bit steps while flat shading, a wrong tangent handedness, inverted occlusion or a
missing material change the image by tens of steps.

Compared per asset, in 8-bit sRGB: the mean absolute difference over the whole frame, and the largest
difference over interior pixels (covered in meshlift's render, 2 pixels away from any silhouette, where
antialiasing differs). Thresholds below come from the measured baseline (numbers next to them).
Screenshots (three | meshlift | |difference| × 4) go to ``$MESHLIFT_TEST_ARTIFACTS/client_parity`` or the
test's tmp dir.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

import _client_parity as cp
from _gltf import validate, validator_dir

W = H = 192
# Thresholds, in 8-bit sRGB steps, from the measured baseline (three r187, chromium 156 / SwiftShader,
# 192 x 192). Per asset: mean |three − meshlift| over the object's pixels (either renderer covers them,
# silhouettes included) and the 99th percentile of the per-pixel difference (largest channel) over
# interior pixels. Three's standard material scales diffuse by (1 − its multiple-scattering specular
# albedo) and filters the environment with PMREM, which leaves a smooth offset of ~3 steps; spot's sharp
# texture edges add mip-filtering differences.
BASELINE = {  # name: (object mean, interior p99), as measured
    "no_material": (4.64, 8.0), "mirrored_quads": (3.53, 3.0), "reconstruction": (4.54, 8.0),
    "recon_from_obj": (4.54, 8.0), "vertex_colour_ply": (5.10, 8.0), "vertex_colour_glb": (5.12, 8.0),
    "spot": (7.24, 17.0),
}
#: Allowed excess over the baseline: mean + MEAN_MARGIN, p99 + P99_MARGIN (other drivers round differently).
MEAN_MARGIN = 2.0
P99_MARGIN = 6.0
#: Largest per-pixel difference allowed anywhere in the interior (baseline ≤ 52, at spot's texture edges).
MAX_INTERIOR = 64.0
# The convention errors of issue 15 exceed these by far (test_comparison_detects_convention_errors,
# measured: inverted occlusion 97 / 205, glTF's default material instead of meshlift's 30 / 45). Flat
# shading changes a smooth-lit coarse sphere by only ~1 step on average, so it is checked structurally
# (test_smooth_shading_in_three: three.js gets NORMAL and does not switch to flat shading).


pytestmark = pytest.mark.skipif(
    cp.chromium_path() is None or cp.three_dir() is None,
    reason="client parity needs chromium and three.js (apt-get install chromium; npm install three, "
           "MESHLIFT_THREEJS_DIR=<prefix>/node_modules/three) — .ci/run installs both",
)


def _artifacts(tmp: Path) -> Path:
    root = os.environ.get("MESHLIFT_TEST_ARTIFACTS")
    out = (Path(root) if root else tmp) / "client_parity"
    out.mkdir(parents=True, exist_ok=True)
    return out


# ---------------------------------------------------------------------------------------- the assets


def _sphere(subdiv: int = 2):
    import trimesh

    s = trimesh.creation.icosphere(subdivisions=subdiv, radius=0.8)
    return torch.tensor(s.vertices, dtype=torch.float32), torch.tensor(s.faces, dtype=torch.int64)


def _mirrored_quads():
    """Two quads facing +z; the right one's UV chart is mirrored in u. Constant normal map (0, 0.6, 0.8)."""
    from meshlift.structures.mesh import Material, Mesh

    v = torch.tensor([[-1.1, -0.5, 0], [-0.1, -0.5, 0], [-0.1, 0.5, 0], [-1.1, 0.5, 0],
                      [0.1, -0.5, 0], [1.1, -0.5, 0], [1.1, 0.5, 0], [0.1, 0.5, 0]], dtype=torch.float32)
    f = torch.tensor([[0, 1, 2], [0, 2, 3], [4, 5, 6], [4, 6, 7]])
    # internal UVs (v down): the bottom-left corner of the left quad is uv (0, 1) = file (0, 0)
    uv = torch.tensor([[0, 1], [1, 1], [1, 0], [0, 0], [1, 1], [0, 1], [0, 0], [1, 0]], dtype=torch.float32)
    normal = torch.tensor([0.0, 0.6, 0.8]).expand(4, 4, 3).contiguous()
    mat = Material(kd=torch.full((4, 4, 3), 0.5), ks=torch.tensor([[[0.0, 0.6, 0.0]]]), normal=normal, name="quads")
    return Mesh(v_pos=v, t_pos_idx=f, v_tex=uv, t_tex_idx=f.clone(), material=mat)


def _reconstruction_style(tex_res: int = 128):
    """A reconstruction-style asset: the demo ring's geometry unwrapped by xatlas (as pass 2 does; its
    charts come in both orientations), kd / ks (with some occlusion) baked from a field, and a
    tangent-space normal map baked from a 4x denser ring's normals (mesh.bake.bake_normal_map)."""
    from scipy.spatial import cKDTree

    from meshlift.geometry.mesh_ops import vertex_normals
    from meshlift.mesh.bake import bake_field_to_textures, bake_normal_map
    from meshlift.mesh.uv import unwrap
    from meshlift.data.demo_object import make_demo_object
    from meshlift.structures.mesh import Material, Mesh

    ring = make_demo_object(resolution=32, texture_resolution=8)
    uvm = unwrap(Mesh(v_pos=ring.v_pos, t_pos_idx=ring.t_pos_idx), resolution=tex_res)

    def field(x):
        kd = 0.45 + 0.35 * torch.stack([torch.sin(5 * x[:, 0]), torch.sin(5 * x[:, 1] + 1), torch.sin(5 * x[:, 2] + 2)], -1)
        occ = 0.15 * (1 + torch.sin(6 * x[:, 0] + 3 * x[:, 2]))
        rough = 0.45 + 0.25 * torch.sin(4 * x[:, 1])
        return {"kd": kd, "ks": torch.stack([occ, rough, torch.zeros_like(occ)], -1)}

    tex = bake_field_to_textures(uvm, field, tex_res)
    dense = make_demo_object(resolution=128, texture_resolution=8)
    dense_n = vertex_normals(dense.v_pos.double(), dense.t_pos_idx).float()
    tree = cKDTree(dense.v_pos.numpy())

    def high_res_normal(x):
        return dense_n[torch.from_numpy(tree.query(x.numpy())[1])]

    normal = bake_normal_map(uvm, high_res_normal, tex_res)
    return replace(uvm, material=Material(kd=tex["kd"], ks=tex["ks"], normal=normal, name="recon"))


def _vertex_coloured():
    from meshlift.structures.mesh import Mesh

    v, f = _sphere(3)
    col = (0.5 + 0.45 * torch.stack([torch.sin(3 * v[:, 0]), torch.cos(3 * v[:, 1]), torch.sin(3 * v[:, 2] + 1)], -1))
    return Mesh(v_pos=v, t_pos_idx=f, v_color=col.clamp(0, 1))


@pytest.fixture(scope="module")
def parity(tmp_path_factory):
    """Write every asset, render all of them in chromium (one browser run) and in meshlift."""
    from meshlift.cli.main import main
    from meshlift.io.glb import save_glb
    from meshlift.io.hdr import write_hdr
    from meshlift.io.obj import save_obj
    from meshlift.io.ply import save_ply
    from meshlift.io.hdr import read_light
    from meshlift.structures.mesh import Mesh

    from conftest import shared_data_root

    root = tmp_path_factory.mktemp("client_parity")
    write_hdr(root / "env.hdr", cp.linear_environment())
    files: dict[str, Path] = {}

    v, f = _sphere(1)  # coarse (80 faces): flat shading would show
    files["no_material"] = save_glb(root / "no_material.glb", Mesh(v_pos=v, t_pos_idx=f))
    quads = _mirrored_quads()
    files["mirrored_quads"] = save_glb(root / "mirrored_quads.glb", quads)
    recon = _reconstruction_style()
    files["reconstruction"] = save_glb(root / "reconstruction.glb", recon)
    # the same asset through OBJ + MTL (nvdiffrec layout) and `meshlift convert` back to GLB
    save_obj(root / "recon_obj" / "mesh.obj", recon)
    assert main(["convert", str(root / "recon_obj" / "mesh.obj"), "--out-dir", str(root), "--stem",
                 "recon_converted", "--formats", "glb", "--no-clean", "--json"]) == 0
    files["recon_from_obj"] = root / "recon_converted.glb"
    vc = _vertex_coloured()
    files["vertex_colour_ply"] = save_ply(root / "vertex_colour.ply", vc)
    assert main(["convert", str(files["vertex_colour_ply"]), "--out-dir", str(root), "--stem", "vertex_colour_converted",
                 "--formats", "glb", "--json"]) == 0
    files["vertex_colour_glb"] = root / "vertex_colour_converted.glb"
    spot = shared_data_root() / "spot" / "spot.obj"
    if spot.is_file():
        assert main(["convert", str(spot), "--out-dir", str(root), "--stem", "spot_converted", "--formats", "glb,obj",
                     "--json"]) == 0
        files["spot"] = root / "spot_converted.glb"

    from meshlift.io.mesh import load_mesh

    cams, assets = {}, []
    for name, path in files.items():
        if name == "mirrored_quads":
            cam = {"eye": [0.0, 0.0, 3.2], "target": [0.0, 0.0, 0.0], "up": [0.0, 1.0, 0.0], "fov_y_deg": 40.0,
                   "near": 1.0, "far": 6.0}
        else:
            lo, hi = load_mesh(path).bbox()
            cam = cp.orbit_camera(lo.tolist(), hi.tolist())
        cams[name] = cam
        # PLY has no material: the page gives it the one meshlift assumes (DEFAULT_KS)
        assets.append({"name": name, "file": path.name, "camera": cam, "roughness": 0.5, "metallic": 0.0})
    manifest = {"width": W, "height": H, "environment": "env.hdr", "env_rotation_y": cp.ENV_ROTATION_Y,
                "assets": assets}
    got = cp.render_in_chromium(root, manifest)
    if "error" in got or "done" not in got:
        log = (root / "chromium.log").read_text(errors="replace")[-3000:]
        pytest.fail(f"three.js page failed: {got.get('error', b'no result (timeout)').decode()}\nchromium log:\n{log}")

    light = read_light(root / "env.hdr", res=64, trainable=False)
    light.build_mips()
    art = _artifacts(root)
    out = {"files": files, "cams": cams, "three": {}, "meshlift": {}, "alpha": {}, "info": {},
           "browser": json.loads(got["done"]), "artifacts": art}
    for name, path in files.items():
        three = cp.decode_png(got[f"{name}.png"])
        ours, alpha = cp.meshlift_render(path, cams[name], light, W, H)
        out["three"][name], out["meshlift"][name], out["alpha"][name] = three, ours, alpha
        out["info"][name] = json.loads(got[f"{name}.json"])
        diff = np.abs(three.astype(np.int16) - ours.astype(np.int16)).astype(np.uint8)
        from PIL import Image

        Image.fromarray(np.concatenate([three, ours, np.clip(diff * 4, 0, 255).astype(np.uint8)], 1)).save(
            art / f"{name}.png")
    return out


def _interior(alpha: np.ndarray, margin: int = 2) -> np.ndarray:
    m = alpha > 0.999
    for _ in range(margin):
        m = m & np.roll(m, 1, 0) & np.roll(m, -1, 0) & np.roll(m, 1, 1) & np.roll(m, -1, 1)
    return m


def _object_mask(three: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """Pixels either renderer covers (meshlift's coverage, or a non-black three.js pixel)."""
    return (alpha > 0) | (three.max(-1) > 0)


def _stats(parity, name):
    a = parity["three"][name].astype(np.float64)
    b = parity["meshlift"][name].astype(np.float64)
    d = np.abs(a - b)
    obj = _object_mask(parity["three"][name], parity["alpha"][name])
    inner = _interior(parity["alpha"][name])
    di = d.max(-1)[inner]
    q = {str(p): float(np.percentile(di, p)) for p in (50, 90, 99, 99.5, 99.9)} if inner.any() else {}
    return float(d[obj].mean()), float(di.max()) if inner.any() else 0.0, int(inner.sum()), q


ASSETS = ["no_material", "mirrored_quads", "reconstruction", "recon_from_obj", "vertex_colour_ply",
          "vertex_colour_glb", "spot"]


@pytest.mark.parametrize("name", ASSETS)
def test_three_matches_meshlift(parity, name):
    if name not in parity["files"]:
        pytest.skip(f"{name}: shared dataset not available")
    mean, worst, n_inner, q = _stats(parity, name)
    (parity["artifacts"] / f"{name}.json").write_text(json.dumps(
        {"mean_abs_diff": mean, "max_interior_diff": worst, "interior_pixels": n_inner, "interior_quantiles": q,
         "browser": parity["browser"], "three_mesh_info": parity["info"][name]}, indent=1))
    assert n_inner > 0.05 * W * H, f"{name}: the object covers only {n_inner} interior pixels; camera framing broke"
    base_mean, base_p99 = BASELINE[name]
    assert mean <= base_mean + MEAN_MARGIN, (
        f"{name}: mean |three - meshlift| = {mean:.2f} > {base_mean} + {MEAN_MARGIN} (see {parity['artifacts']})")
    assert q["99"] <= base_p99 + P99_MARGIN, (
        f"{name}: 99th percentile interior difference {q['99']:.1f} > {base_p99} + {P99_MARGIN}")
    assert worst <= MAX_INTERIOR, f"{name}: interior |three - meshlift| reaches {worst:.0f} > {MAX_INTERIOR}"


def test_smooth_shading_in_three(parity):
    """three.js gets NORMAL (so it does not flat-shade) for every GLB, and TANGENT where a normal map is."""
    for name, info in parity["info"].items():
        for prim in info:
            assert "normal" in prim["attributes"] and not prim["flatShading"], (name, prim)
    for name in ("mirrored_quads", "reconstruction", "recon_from_obj"):
        assert all("tangent" in p["attributes"] for p in parity["info"][name]), name


def test_mirrored_chart_handedness(parity):
    """Both quads show the tangent-space normal (0, 0.6, 0.8), in three.js and in meshlift: their centre
    colours agree with each other and with the colour of a quad whose *geometric* normal is (0, 0.6, 0.8)."""
    from meshlift.shading.color import linear_to_srgb

    # diffuse-only expectation from the linear environment: E/pi = 0.5 + 0.45 * (2/3) n, times kd = 0.5,
    # plus a small specular term; compare the two quads against each other and against three
    ys, xl, xr = H // 2, int(W * 0.30), int(W * 0.70)
    for who in ("three", "meshlift"):
        img = parity[who]["mirrored_quads"].astype(np.float64)
        left = img[ys - 3: ys + 4, xl - 3: xl + 4].reshape(-1, 3).mean(0)
        right = img[ys - 3: ys + 4, xr - 3: xr + 4].reshape(-1, 3).mean(0)
        assert np.abs(left - right).max() <= 3.0, f"{who}: left {left} vs mirrored right {right}"
        n = np.array([0.0, 0.6, 0.8])
        diffuse = 0.5 * (0.5 + 0.45 * (2 / 3) * n)
        want = linear_to_srgb(torch.tensor(diffuse)).numpy() * 255
        # green carries the sign of the normal's y: (0, -0.6, 0.8) would give ~40 steps less
        assert abs(left[1] - want[1]) <= 12 and abs(right[1] - want[1]) <= 12, (who, left, right, want)


def test_written_glbs_are_silent_in_the_validator(parity):
    if validator_dir() is None:
        pytest.skip("glTF-Validator not installed")
    for name, path in parity["files"].items():
        if path.suffix == ".glb":
            rep = validate(path)
            assert rep["numErrors"] == 0 and rep["numWarnings"] == 0, (name, rep["messages"])


def _compare(three: np.ndarray, ours: np.ndarray, alpha: np.ndarray) -> tuple[float, float]:
    d = np.abs(three.astype(np.float64) - ours.astype(np.float64))
    return float(d[_object_mask(three, alpha)].mean()), float(np.percentile(d.max(-1)[_interior(alpha)], 99))


def test_comparison_detects_convention_errors(parity, tmp_path):
    """The thresholds are tight enough to fail on each error issue 15 describes: meshlift renders with the
    error put back in are compared with three.js' screenshot of the correct file."""
    from meshlift.io.glb import save_glb
    from meshlift.io.mesh import load_mesh
    from meshlift.io.hdr import read_light
    from meshlift.structures.mesh import Material

    light = read_light(parity["files"]["no_material"].parent / "env.hdr", res=64, trainable=False)
    light.build_mips()

    def broken(name, edit):
        mesh = edit(load_mesh(parity["files"][name]))
        p = save_glb(tmp_path / f"{name}_broken.glb", mesh)
        ours, alpha = cp.meshlift_render(p, parity["cams"][name], light, W, H)
        return _compare(parity["three"][name], ours, alpha)

    def inverted_occlusion(m):
        ks = m.material.ks.clone()
        ks[..., 0] = 1.0 - ks[..., 0]
        return replace(m, material=replace(m.material, ks=ks))

    def gltf_default_material(m):
        return replace(m, material=Material(kd=torch.ones(1, 1, 3), ks=torch.tensor([[[0.0, 1.0, 1.0]]])))

    for name, edit in (("reconstruction", inverted_occlusion), ("no_material", gltf_default_material)):
        mean, p99 = broken(name, edit)
        base_mean, base_p99 = BASELINE[name]
        assert mean > 3 * (base_mean + MEAN_MARGIN) and p99 > base_p99 + P99_MARGIN, (name, edit.__name__, mean, p99)
