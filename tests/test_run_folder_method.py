"""Output folders and the method that wrote them (issue 31, class 6): a run folder records its ``--method`` in
``config.json``; ``--resume``, a re-run or ``--overwrite`` into another method's folder is refused naming that
method and the flags to use (a re-run would mix the two methods' files); another method's saved config given
as ``--config`` names its method. No training: the folders are written by the families' own ``write_config``.
"""

from __future__ import annotations

import json

import pytest

from meshlift.cli.main import main
from meshlift.errors import ConfigError, OutputError
from meshlift.methods import registry
from meshlift.methods.config_layers import METHOD_KEY, saved_config


def _write_run(folder, name: str, *, finished: bool = True, data: str = "/somewhere/scene"):
    """A run folder of ``--method name`` as that family writes it: ``config.json`` (its ``write_config``) and
    ``metrics.json`` (finished) or ``checkpoint.pt`` (unfinished)."""
    from meshlift.methods.gaussians.outputs import write_config as splat_config
    from meshlift.methods.nvdiffrec.outputs import write_config as surface_config

    spec = registry.METHODS[name]
    folder.mkdir(parents=True, exist_ok=True)
    cfg = spec.apply(spec.presets.get(spec.presets.default(data)), {"data": data})
    (surface_config if name == "nvdiffrec" else splat_config)(folder, cfg)
    if finished:
        (folder / "metrics.json").write_text(json.dumps({"psnr": 20.0}))
        (folder / ("mesh.glb" if name != "gaussians" else "point_cloud.ply")).write_bytes(b"x")
    else:
        (folder / "checkpoint.pt").write_bytes(b"x")
    return folder


@pytest.mark.parametrize("name", list(registry.METHODS))
def test_a_run_folder_records_its_method_and_resumes_with_it(name, tmp_path):
    spec = registry.METHODS[name]
    run = _write_run(tmp_path / name, name)
    saved = json.loads((run / "config.json").read_text())
    assert next(iter(saved)) == METHOD_KEY and saved[METHOD_KEY] == name
    assert registry.method_of_run(run) == name
    cfg = spec.build_config("", None, False, None, ["data=/other/scene"], out=run, resume=True)  # the key is no field
    assert isinstance(cfg, spec.config_cls) and cfg.data == "/other/scene"
    # a saved config.json as --config: its own method's is a config like any other
    cfg = spec.build_config("/x", None, False, run / "config.json", [])
    assert isinstance(cfg, spec.config_cls)


def test_the_record_wins_over_the_fields_and_older_folders_are_recognised(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "config.json").write_text(json.dumps({"method": "milo", "data": "x"}))
    assert registry.method_of_run(tmp_path / "a") == "milo"  # "data" alone would fit every method
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "config.json").write_text(json.dumps({"method": "nerfacto", "data": "x"}))
    assert registry.method_of_run(tmp_path / "b") is None
    from meshlift.methods.gaussians.config import GaussiansConfig, config_to_dict

    (tmp_path / "c").mkdir()  # written before the record: known by its fields
    (tmp_path / "c" / "config.json").write_text(json.dumps(config_to_dict(GaussiansConfig())))
    assert registry.method_of_run(tmp_path / "c") == "gaussians"
    assert saved_config({"method": "stale", "data": "x"}, "milo") == {"method": "milo", "data": "x"}


def test_another_methods_saved_config_as_config_names_that_method(tmp_path):
    run = _write_run(tmp_path / "g", "gaussians")
    with pytest.raises(ConfigError, match=r"the config of a --method gaussians run, not of --method nvdiffrec; run "
                                          r"it with --method gaussians"):
        registry.METHODS["nvdiffrec"].build_config("/x", None, False, run / "config.json", [])
    # and a saved config edited to another method on --resume
    saved = json.loads((run / "config.json").read_text())
    (run / "config.json").write_text(json.dumps(dict(saved, method="milo")))
    with pytest.raises(ConfigError, match="the saved config of a --method milo run, not of --method gaussians"):
        registry.METHODS["gaussians"].build_config("", None, False, None, [], out=run, resume=True)


@pytest.mark.parametrize("flags, error", [
    ([], "replacing it with --method {this} would mix the files of the two methods"),
    (["--overwrite"], "--overwrite replaces a run of the same method only"),
    (["--resume"], "--resume: {out} holds a --method {other} run"),
])
@pytest.mark.parametrize("other, this", [("gaussians", "nvdiffrec"), ("nvdiffrec", "milo"), ("milo", "gaussians")])
def test_runs_into_another_methods_folder_are_refused_naming_it(other, this, flags, error, tmp_path, capsys):
    out = _write_run(tmp_path / "run", other)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    code = main(["reconstruct", str(tmp_path / "missing_input"), "--method", this, "--out", str(out), *flags])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 2 and error.format(this=this, other=other, out=out) in err, err
    assert f"--method {other} --resume" in err  # the flag to continue that run
    if "--resume" not in flags:
        assert f"holds a finished --method {other} run (metrics.json, config.json)" in err
        assert "another --out" in err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # nothing touched


def test_an_unfinished_run_of_another_method_is_named_too(tmp_path, capsys):
    out = _write_run(tmp_path / "run", "milo", finished=False)
    assert main(["reconstruct", str(tmp_path / "x"), "--method", "gaussians", "--out", str(out)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "holds an unfinished --method milo run (checkpoint.pt, config.json)" in err


def test_a_folder_whose_other_run_never_trained_is_not_a_run(tmp_path):
    """Another method's ``config.json`` alone (it stopped before training: no checkpoint, no metrics) is
    replaced like any file; the same method's folder is left to that method's own checks."""
    from meshlift.cli.reconstruct_cmd import check_run_method

    out = _write_run(tmp_path / "run", "gaussians")
    for name in ("metrics.json", "point_cloud.ply"):
        (out / name).unlink()
    check_run_method(out, "nvdiffrec", resume=False, overwrite=False)
    check_run_method(tmp_path / "nothing", "nvdiffrec", resume=True, overwrite=False)
    full = _write_run(tmp_path / "full", "gaussians")
    check_run_method(full, "gaussians", resume=False, overwrite=False)
    with pytest.raises(OutputError):
        check_run_method(full, "milo", resume=False, overwrite=True)
