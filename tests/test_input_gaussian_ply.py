"""Gaussian PLYs as inputs (issue 31, class 1): invalid Gaussians counted once each and dropped with a warning
naming the file (or refused), zero Gaussians refused before any camera placement, SH layouts of degree 0-3
and nothing else, stored-convention hints; the same through every command that takes one. The input file is
never written to."""

from __future__ import annotations

import hashlib
import json
import math
import warnings

import pytest
import torch

from meshlift.cli.main import main
from meshlift.errors import MeshError, MeshliftWarning
from meshlift.io.gaussian_ply import SH_REST_COUNTS, is_gaussian_ply, load_gaussian_ply, save_gaussian_ply


def gaussians(n: int = 50, degree: int = 1, seed: int = 0, spread: float = 0.3) -> dict:
    g = torch.Generator().manual_seed(seed)
    k = (degree + 1) ** 2
    return {"means": torch.randn(n, 3, generator=g) * spread, "quats": torch.randn(n, 4, generator=g),
            "log_scales": torch.full((n, 3), -3.0), "opacity_logits": torch.randn(n, generator=g) * 3,
            "sh0": torch.randn(n, 1, 3, generator=g) * 0.5, "shN": torch.randn(n, k - 1, 3, generator=g) * 0.1}


def digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_ascii_ply(path, names, rows) -> None:
    head = ["ply", "format ascii 1.0", f"element vertex {len(rows)}"] + [f"property float {n}" for n in names]
    path.write_text("\n".join(head + ["end_header"] + [" ".join(map(str, r)) for r in rows]) + "\n")


BASE = ["x", "y", "z", "f_dc_0", "f_dc_1", "f_dc_2", "opacity", "scale_0", "scale_1", "scale_2",
        "rot_0", "rot_1", "rot_2", "rot_3"]


def test_invalid_gaussians_are_counted_once_each_and_dropped_naming_the_file(tmp_path):
    d = gaussians(8)
    d["means"][1, 0] = float("nan")
    d["log_scales"][1, 2] = float("inf")  # the same Gaussian again: still one
    d["shN"][2, 1, 0] = float("-inf")  # a higher SH coefficient
    d["opacity_logits"][3] = float("nan")
    d["quats"][4] = 0.0  # zero-length rotation
    d["log_scales"][5, 0] = 120.0  # exp overflows float32
    p = save_gaussian_ply(tmp_path / "bad.ply", d)
    before = digest(p)
    with pytest.warns(MeshliftWarning) as rec:
        out = load_gaussian_ply(p)
    msg = " ".join(str(w.message) for w in rec)
    assert str(p) in msg and "5 of 8 Gaussians are invalid" in msg
    assert "3 with NaN/Inf values" in msg and "1 with a zero-length rotation" in msg and "1 with a log-scale" in msg
    assert "dropped" in msg and "SplatSettings" not in msg and "check_inputs" not in msg
    assert out["means"].shape == (3, 3) and out["shN"].shape == (3, 3, 3)
    keep = [0, 6, 7]
    for k, v in out.items():
        torch.testing.assert_close(v, d[k][keep], rtol=0, atol=0)
    with pytest.raises(MeshError, match=r"bad\.ply: 5 of 8 Gaussians are invalid.*drop or fix"):
        load_gaussian_ply(p, invalid="error")
    every = gaussians(3)
    every["means"][:] = float("nan")
    q = save_gaussian_ply(tmp_path / "allbad.ply", every)
    with pytest.raises(MeshError, match=r"allbad\.ply: all 3 Gaussians are invalid"):
        load_gaussian_ply(q)
    assert digest(p) == before


def test_zero_gaussians_are_refused_naming_the_file(tmp_path):
    p = save_gaussian_ply(tmp_path / "empty.ply", gaussians(0))
    with pytest.raises(MeshError, match=r"empty\.ply: holds no Gaussians \(element vertex 0\)"):
        load_gaussian_ply(p)
    write_ascii_ply(tmp_path / "empty_ascii.ply", BASE, [])
    with pytest.raises(MeshError, match="holds no Gaussians"):
        load_gaussian_ply(tmp_path / "empty_ascii.ply")


@pytest.mark.parametrize("degree", [0, 1, 2, 3])
def test_sh_layouts_of_degree_0_to_3_round_trip(tmp_path, degree):
    d = gaussians(7, degree)
    back = load_gaussian_ply(save_gaussian_ply(tmp_path / "pc.ply", d))
    assert back["shN"].shape == (7, (degree + 1) ** 2 - 1, 3)
    torch.testing.assert_close(back["shN"], d["shN"], rtol=0, atol=0)
    assert SH_REST_COUNTS[3 * ((degree + 1) ** 2 - 1)] == degree


@pytest.mark.parametrize("rest,expect", [
    (10, r"10 f_rest properties; a 3DGS PLY of SH degree 0-3 has 0 \(degree 0\), 9 \(degree 1\), 24"),
    (72, "72 f_rest properties"),  # degree 4: a square count, but not a layout the renderer evaluates
    (3, "3 f_rest properties"),
])
def test_other_f_rest_counts_are_errors_naming_the_file(tmp_path, rest, expect):
    p = tmp_path / "odd.ply"
    names = BASE + [f"f_rest_{i}" for i in range(rest)]
    write_ascii_ply(p, names, [[0.1] * len(names)])
    with pytest.raises(MeshError, match=r"odd\.ply: " + expect):
        load_gaussian_ply(p)


def test_gaps_and_odd_names_in_f_rest_are_errors(tmp_path):
    p = tmp_path / "gap.ply"
    names = BASE + [f"f_rest_{i}" for i in range(10) if i != 4]
    write_ascii_ply(p, names, [[0.1] * len(names)])
    with pytest.raises(MeshError, match=r"gap\.ply: .*f_rest_4 is missing"):
        load_gaussian_ply(p)
    q = tmp_path / "named.ply"
    names = BASE + [f"f_rest_{i}" for i in range(8)] + ["f_rest_x"]
    write_ascii_ply(q, names, [[0.1] * len(names)])
    with pytest.raises(MeshError, match=r"named\.ply: vertex property 'f_rest_x'"):
        load_gaussian_ply(q)


def test_malformed_headers_and_bodies_are_mesh_errors(tmp_path):
    p = tmp_path / "h.ply"
    p.write_bytes(b"ply\nformat ascii 1.0\nelement vertex many\nend_header\n")
    with pytest.raises(MeshError, match=r"h\.ply: malformed PLY header line"):
        load_gaussian_ply(p)
    q = tmp_path / "b.ply"
    write_ascii_ply(q, BASE, [[0.1] * len(BASE)])
    q.write_text(q.read_text().replace("0.1 0.1 0.1", "0.1 abc 0.1", 1))
    with pytest.raises(MeshError, match=r"b\.ply: cannot read the ASCII vertex rows"):
        load_gaussian_ply(q)


def test_a_mesh_where_gaussians_are_needed_is_named_as_a_mesh(tmp_path):
    import trimesh

    trimesh.creation.icosphere(subdivisions=1).export(tmp_path / "sphere.ply")
    assert not is_gaussian_ply(tmp_path / "sphere.ply")
    with pytest.raises(MeshError, match=r"sphere\.ply: holds a mesh \(42 vertices, 80 faces\), not 3D Gaussians"):
        load_gaussian_ply(tmp_path / "sphere.ply")


def test_activated_scales_and_opacities_give_a_warning(tmp_path):
    d = gaussians(200, 0, spread=0.05)
    d["log_scales"] = torch.full((200, 3), 0.02)  # linear sigmas stored: exp(0.02) > the cloud's extent
    d["opacity_logits"] = torch.rand(200) * 0.9 + 0.05  # opacities, not logits
    p = save_gaussian_ply(tmp_path / "activated.ply", d)
    with pytest.warns(MeshliftWarning) as rec:
        load_gaussian_ply(p)
    msgs = [str(w.message) for w in rec]
    assert any("activated.ply" in m and "look like linear standard deviations" in m for m in msgs)
    assert any("every opacity value lies in [0, 1]" in m for m in msgs)
    with warnings.catch_warnings():
        warnings.simplefilter("error", MeshliftWarning)  # a trained-looking cloud: no warning
        load_gaussian_ply(save_gaussian_ply(tmp_path / "fine.ply", gaussians(200, 0)))


def test_render_and_turntable_of_an_empty_ply_fail_before_camera_placement(tmp_path, capsys):
    p = save_gaussian_ply(tmp_path / "empty.ply", gaussians(0))
    rc = main(["render", str(p), "--out", str(tmp_path / "o"), "--turntable", "--frames", "2", "--size", "16"])
    err = capsys.readouterr().err
    assert rc == 2 and "empty.ply: holds no Gaussians" in err and "median" not in err


def test_render_drops_invalid_gaussians_and_says_so_in_summary_and_json(tmp_path, capsys):
    d = gaussians(30)
    d["means"][0] = float("nan")
    d["sh0"][1, 0, 0] = float("inf")
    p = save_gaussian_ply(tmp_path / "pc.ply", d)
    before = digest(p)
    args = ["render", str(p), "--out", str(tmp_path / "o"), "--turntable", "--frames", "2", "--size", "16"]
    assert main(args + ["--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["mode"] == "splat" and len(res["warnings"]) == 1
    assert str(p) in res["warnings"][0] and "2 of 30 Gaussians are invalid" in res["warnings"][0]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "warning:" in out and "2 of 30 Gaussians" in out
    assert digest(p) == before


def test_turntable_cameras_of_no_gaussians_is_a_render_error():
    from meshlift.errors import RenderError
    from meshlift.renderers.gaussians import gaussian_turntable_cameras
    from meshlift.structures.gaussians import Gaussians

    with pytest.raises(RenderError, match="no Gaussians; nothing to frame"):
        gaussian_turntable_cameras(Gaussians(**gaussians(0)), 4, 16, "y", 20.0)
    d = gaussians(3)
    d["means"][:] = float("nan")
    with pytest.raises(RenderError, match="no Gaussian with a finite centre"):
        gaussian_turntable_cameras(Gaussians(**d), 4, 16, "y", 20.0)


def test_default_near_follows_the_clouds_extent():
    from meshlift.renderers.gaussians import default_near
    from meshlift.structures.gaussians import Gaussians

    small, big = Gaussians(**gaussians(100, spread=0.01)), Gaussians(**gaussians(100, spread=100.0))
    assert default_near(big) == pytest.approx(1e4 * default_near(small), rel=1e-4)
    assert 0 < default_near(small) < 1e-3 and math.isfinite(default_near(big))
