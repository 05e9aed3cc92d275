"""SurfaceConfig: documented fields, presets, overrides, files (JSON/TOML), validation."""

from __future__ import annotations

import dataclasses
import json

import pytest

from meshlift.errors import ConfigError
from meshlift.methods.nvdiffrec.config import (
    SurfaceConfig,
    apply_dict,
    config_to_dict,
    field_docs,
    load_config_file,
    parse_overrides,
)
from meshlift.methods.nvdiffrec.presets import PRESETS, get_preset, preset_names


def test_every_field_has_a_docstring():
    docs = field_docs()
    names = [f.name for f in dataclasses.fields(SurfaceConfig)]
    missing = [n for n in names if not docs.get(n)]
    assert missing == []


def test_presets_named_and_quick_variants_smaller():
    for name in ("spot", "bob", "spot_fixlight", "bob_fixlight", "spot_metal", "bob_metal", "spot_flexi", "nerf",
                 "nerd"):
        assert name in preset_names()
        full, quick = get_preset(name), get_preset(name, quick=True)
        assert quick.iter_pass1 < full.iter_pass1
        assert quick.grid_res <= full.grid_res
        assert quick.train_res < full.train_res
        assert quick.isosurface == full.isosurface
    assert get_preset("spot_flexi").isosurface == "flexicubes"
    assert get_preset("spot_metal").ref_ks == (0.0, 0.2, 1.0)
    # presets are copies: editing one does not change the registry
    p = get_preset("spot")
    assert p is not PRESETS["spot"]


def test_unknown_preset_raises():
    with pytest.raises(ConfigError, match="unknown preset"):
        get_preset("nope")


def test_overrides_are_typed():
    cfg = apply_dict(
        SurfaceConfig(),
        parse_overrides(["batch=4", "lr_pos=1e-3", "ks_min=0,0.2,0", "max_fragments=none", "perturb_normal=false",
                         "isosurface=flexicubes", "iter-pass1=7"]),
    )
    assert cfg.batch == 4 and isinstance(cfg.batch, int)
    assert cfg.lr_pos == pytest.approx(1e-3)
    assert cfg.ks_min == (0.0, 0.2, 0.0)
    assert cfg.max_fragments is None
    assert cfg.perturb_normal is False
    assert cfg.isosurface == "flexicubes"
    assert cfg.iter_pass1 == 7


@pytest.mark.parametrize(
    "item, match",
    [("batch", "field=value"), ("batchh=3", "unknown config field"), ("batch=two", "batch"),
     ("isosurface=marching", "choose one of"), ("grid_res=2", "grid_res"), ("ks_min=0,1", "3 values")],
)
def test_bad_overrides_raise_config_error(item, match):
    with pytest.raises(ConfigError, match=match):
        apply_dict(SurfaceConfig(), parse_overrides([item]))


def test_config_files_json_and_toml(tmp_path):
    j = tmp_path / "c.json"
    j.write_text(json.dumps({"batch": 3, "kd_min": [0.1, 0.1, 0.1]}))
    t = tmp_path / "c.toml"
    t.write_text('[surface]\nbatch = 5\nisosurface = "flexicubes"\n')
    cj = apply_dict(SurfaceConfig(), load_config_file(j))
    ct = apply_dict(SurfaceConfig(), load_config_file(t))
    assert cj.batch == 3 and cj.kd_min == (0.1, 0.1, 0.1)
    assert ct.batch == 5 and ct.isosurface == "flexicubes"
    with pytest.raises(ConfigError, match="not found"):
        load_config_file(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{batch: ")
    with pytest.raises(ConfigError, match="cannot parse"):
        load_config_file(bad)


def test_round_trip_through_dict():
    cfg = get_preset("spot_metal", quick=True)
    again = apply_dict(SurfaceConfig(), json.loads(json.dumps(config_to_dict(cfg))))
    assert again == cfg


def test_default_preset_follows_the_input_and_the_shared_layering(tmp_path):
    """No --preset: a mesh file gets ``spot``, a folder with LLFF poses ``nerd``, anything else ``nerf``;
    build_config goes through the layering every family shares (a corrupt saved config on resume is one
    clear error naming --overwrite)."""
    import numpy as np

    from meshlift.errors import ConfigError
    from meshlift.methods.nvdiffrec.presets import default_preset_for
    from meshlift.methods.nvdiffrec.reconstruct import build_config

    mesh = tmp_path / "m.obj"
    mesh.write_text("v 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 3\n")
    llff = tmp_path / "llff"
    llff.mkdir()
    np.save(llff / "poses_bounds.npy", np.zeros((3, 17)))
    assert default_preset_for(str(mesh)) == "spot"
    assert default_preset_for(str(llff)) == "nerd"
    assert default_preset_for(str(tmp_path / "missing")) == "nerf"
    cfg = build_config(str(mesh), None, True, None, ["iter_pass1=7"])
    assert cfg.iter_pass1 == 7 and cfg.data == str(mesh)
    with pytest.raises(ConfigError, match="no input"):
        build_config("", "spot", False, None, [])
    with pytest.raises(ConfigError, match="no run to resume"):  # --resume of an --out that holds no run
        build_config("", None, False, None, [], out=tmp_path / "never", resume=True)
    demo = tmp_path / "demo"  # a `meshlift demo` folder: a config.json whose data is empty, no checkpoint
    demo.mkdir()
    (demo / "config.json").write_text('{"method": "nvdiffrec", "data": ""}')
    with pytest.raises(ConfigError, match="names no data .*meshlift demo"):
        build_config("", None, False, None, [], out=demo, resume=True)
    out = tmp_path / "run"
    out.mkdir()
    (out / "config.json").write_text("[1, 2]")
    with pytest.raises(ConfigError, match="--overwrite"):
        build_config(str(mesh), None, False, None, [], out=out, resume=True)


def test_range_and_type_errors_name_their_source(tmp_path):
    """A bad value from a config file names the file; one from --set says "command line"."""
    cfg_file = tmp_path / "c.toml"
    cfg_file.write_text("batch = -1\n")
    with pytest.raises(ConfigError, match=r"c\.toml: config field 'batch' = -1 is out of range"):
        apply_dict(SurfaceConfig(), load_config_file(cfg_file), source=str(cfg_file))
    with pytest.raises(ConfigError, match=r"^command line: config field 'batch'"):
        apply_dict(SurfaceConfig(), {"batch": "abc"}, source="command line")


def test_an_override_with_an_empty_field_name_says_so():
    with pytest.raises(ConfigError, match="field name before '=' is empty"):
        parse_overrides(["=4"])


@pytest.mark.parametrize("typo, field", [("bacth", "batch"), ("grid_rez", "grid_res"), ("lrpos", "lr_pos")])
def test_an_unknown_field_suggests_the_closest_names(typo, field):
    with pytest.raises(ConfigError, match=rf"unknown config field '{typo}' \(did you mean [^)]*\b{field}\b"):
        apply_dict(get_preset("spot"), parse_overrides([f"{typo}=1"]))


def test_an_unknown_field_far_from_every_name_suggests_nothing():
    """A fresh user's report (2026-12-04): ``maxx_zzz`` suggested every ``max_*`` field; only near spellings now."""
    with pytest.raises(ConfigError) as err:
        apply_dict(get_preset("spot"), parse_overrides(["gri_qqqqqq=1"]))
    assert "did you mean" not in str(err.value) and "--help-config" in str(err.value)


@pytest.mark.parametrize("method", ["nvdiffrec", "gaussians", "milo"])
def test_resume_of_a_run_older_than_undistort_crop_keeps_its_frame(tmp_path, method):
    """A run whose saved config.json predates ``undistort_crop`` trained on the uncropped (framed) photos:
    resuming it keeps them (False); a saved value is kept as saved; ``--set`` still overrides."""
    import dataclasses
    import importlib
    import json

    build = importlib.import_module(f"meshlift.methods.{method}.reconstruct").build_config
    data = str(tmp_path / "photos")
    fresh = build(data, None, False, None, [])
    assert fresh.undistort_crop is True  # a new run crops
    old = {k: v for k, v in dataclasses.asdict(fresh).items() if k != "undistort_crop"}  # a config.json of before
    for saved, sets, want in ((old, [], False), ({**old, "undistort_crop": True}, [], True),
                              (old, ["undistort_crop=true"], True)):
        out = tmp_path / f"run_{len(saved)}_{len(sets)}"
        out.mkdir(exist_ok=True)
        (out / "config.json").write_text(json.dumps(saved))
        assert build(data, None, False, None, sets, out=out, resume=True).undistort_crop is want
