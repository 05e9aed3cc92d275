"""The method registry: every method has a complete spec, names are unique, an unknown name is one clear error;
the CLI's `reconstruct` and `--help-config` list and dispatch every method through it (a fake fourth method
runs end to end without any change to the CLI). No training here: seconds."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from meshlift.cli.main import main
from meshlift.errors import ConfigError
from meshlift.methods import registry
from meshlift.methods.spec import INPUT_KINDS, SIZES, Capabilities, Method, PresetTable, RunSize

SRC = Path(__file__).resolve().parents[1] / "src"
ALL = list(registry.METHODS.values())


def test_names_and_aliases_are_unique():
    names = [m.name for m in ALL]
    aliases = [a for m in ALL for a in m.aliases]
    assert names == ["nvdiffrec", "gaussians", "milo"]
    assert len(set(names + aliases)) == len(names) + len(aliases)
    assert all(registry.METHODS[m.name] is m for m in ALL)


@pytest.mark.parametrize("m", ALL, ids=lambda m: m.name)
def test_every_method_has_a_complete_spec(m: Method):
    for f in dataclasses.fields(Method):
        assert getattr(m, f.name) is not None, f.name
    assert m.title and m.label and m.cli_help
    assert dataclasses.is_dataclass(m.config_cls)
    assert set(m.inputs) <= set(INPUT_KINDS) and m.inputs
    assert isinstance(m.capabilities, Capabilities) and isinstance(m.presets, PresetTable)
    for f in ("build_config", "help_config", "check_input", "check_out_dir", "reconstruct", "summary_lines", "steps"):
        assert callable(getattr(m, f)), f
    assert sorted(s.name for s in m.presets.sizes) == sorted(SIZES)
    assert all(isinstance(s, RunSize) and s.gpu_s > 0 and s.cpu_s > 0 for s in m.presets.sizes)


@pytest.mark.parametrize("m", ALL, ids=lambda m: m.name)
def test_presets_quick_and_tiny_variants(m: Method, tmp_path):
    assert m.presets.names and set(m.presets.quick) <= set(m.presets.names)
    for name in m.presets.names:
        assert isinstance(m.presets.get(name), m.config_cls)
    for name in m.presets.quick:  # the CPU-sized variant trains less
        full, quick = m.presets.get(name), m.presets.get(name, quick=True)
        assert quick != full and m.steps(quick) < m.steps(full), name
    data = str(tmp_path / "scene")
    assert m.presets.default(data) in m.presets.names
    tiny, quick, full = (m.sized_config(s, data) for s in ("tiny", "quick", "full"))
    assert all(isinstance(c, m.config_cls) for c in (tiny, quick, full))
    assert 0 < m.steps(tiny) <= m.steps(quick) < m.steps(full)
    with pytest.raises(ConfigError, match="choose one of"):
        m.sized_config("huge", data)
    with pytest.raises(ConfigError):
        m.presets.get("no_such_preset")


def test_unknown_method_names_the_known_ones():
    with pytest.raises(ConfigError, match=r"--method 'nope': choose nvdiffrec, gaussians or milo"):
        registry.get_method("nope")
    with pytest.raises(ConfigError, match=r"^method 'nope'"):
        registry.get_method("nope", what="method")
    with pytest.raises(ConfigError, match="choose nvdiffrec"):  # an alias is the app's, not --method's
        registry.get_method("surface")


def test_a_spec_without_a_call_or_with_an_unknown_input_is_refused():
    m = registry.METHODS["gaussians"]
    with pytest.raises(ConfigError, match="reconstruct is None"):
        dataclasses.replace(m, reconstruct=None)
    with pytest.raises(ConfigError, match="inputs .*'video'"):
        dataclasses.replace(m, inputs=("video",))
    with pytest.raises(ConfigError, match="run sizes"):
        dataclasses.replace(m, presets=dataclasses.replace(m.presets, sizes=m.presets.sizes[:2]))
    with pytest.raises(ConfigError, match="the Gaussian method needs posed photos, not 'mesh'"):
        m.check_kind("mesh")


def test_method_of_run_reads_the_saved_config(tmp_path):
    for m in ALL:
        d = tmp_path / m.name
        d.mkdir()
        fields = list(m.config_cls.__dataclass_fields__)
        (d / "config.json").write_text(json.dumps({k: None for k in fields}))
        assert registry.method_of_run(d) == m.name
    assert registry.method_of_run(tmp_path / "nothing") is None
    (tmp_path / "odd").mkdir()
    (tmp_path / "odd" / "config.json").write_text('{"not_a_field": 1}')
    assert registry.method_of_run(tmp_path / "odd") is None


def test_importing_the_registry_imports_no_torch():
    code = "import sys, meshlift.methods.registry; sys.exit(1 if 'torch' in sys.modules else 0)"
    r = subprocess.run([sys.executable, "-c", code], env={"PYTHONPATH": str(SRC)}, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


# ---- the CLI through the registry ---------------------------------------------------------------------------


def test_cli_help_and_help_config_list_every_method(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")
    assert main(["reconstruct", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    for m in ALL:
        assert f"{m.name} ({' '.join(m.cli_help.split())})" in text, m.name
    # --preset's help names every preset of the Gaussian and MILo methods (a fresh user found only nvdiffrec's)
    from meshlift.methods.gaussians.presets import preset_names as gaussian_presets
    from meshlift.methods.milo.presets import preset_names as milo_presets

    preset_help = text[text.index("--preset"):]
    assert all(n in preset_help for n in gaussian_presets() + milo_presets())
    for m in ALL:
        assert main(["reconstruct", "--method", m.name, "--help-config"]) == 0
        text = capsys.readouterr().out
        assert text.startswith(f"{m.config_cls.__name__} fields"), m.name
        assert all(f"  {f.name} = " in text for f in dataclasses.fields(m.config_cls)), m.name
        assert "presets: " + ", ".join(m.presets.names) in text


def _fake_method(calls: list) -> Method:
    """A fourth method whose calls are recorded: what a new family's ``method.py`` would declare."""

    @dataclasses.dataclass
    class FakeConfig:
        data: str = ""
        """Input."""
        steps: int = 3
        """Steps."""

    def build_config(data, preset, quick, config_file, overrides, out=None, resume=False):
        calls.append(("build_config", data, preset, quick, list(overrides)))
        return FakeConfig(data=data)

    def reconstruct(cfg, out, *, resume=False, overwrite=False, monitor=None):
        calls.append(("reconstruct", cfg.data, Path(out).name, resume, overwrite))
        monitor.log("fake run")
        return type("Result", (), {"metrics": {"psnr": 1.5}, "files": {}})()

    return Method(
        name="fake", title="the fake method", label="fake", cli_help="a test double", config_cls=FakeConfig,
        apply=lambda cfg, values, source="": dataclasses.replace(cfg, **values),
        presets=PresetTable(names=("fake",), quick=(), get=lambda name, quick=False: FakeConfig(),
                            default=lambda data: "fake", tiny=lambda data: FakeConfig(steps=1),
                            sizes=tuple(RunSize(s, s, 1, 1) for s in SIZES)),
        inputs=("posed",), capabilities=Capabilities(False, False, False, False, False),
        build_config=build_config, help_config=lambda: "FakeConfig fields",
        check_input=lambda data, camera_convention=None: calls.append(("check_input", data)),
        check_out_dir=lambda out, *, resume, overwrite: calls.append(("check_out_dir", Path(out).name)),
        reconstruct=reconstruct,
        summary_lines=lambda result, wall_s: [f"[bold]fake PSNR[/bold] {result.metrics['psnr']}", f"wall {wall_s:.0f}"],
        steps=lambda cfg: cfg.steps)


def test_cli_dispatches_a_new_method_through_the_registry(tmp_path, capsys, monkeypatch):
    """One registry line (here: a monkeypatched entry) is all a fourth method needs: the CLI builds its config
    with the command line's overrides, checks the folder, runs it and prints its summary."""
    calls: list = []
    monkeypatch.setitem(registry.METHODS, "fake", _fake_method(calls))
    data = tmp_path / "scene"
    data.mkdir()
    (data / "transforms.json").write_text("{}")  # a dataset (not an unposed photo folder)
    out = tmp_path / "out"
    assert main(["reconstruct", str(data), "--method", "fake", "--out", str(out), "--set", "steps=2", "x=1"]) == 0
    printed = capsys.readouterr().out
    assert calls == [("check_out_dir", "out"), ("build_config", str(data), None, False, ["steps=2", "x=1"]),
                     ("reconstruct", str(data), "out", False, False)]
    assert "fake PSNR 1.5" in printed and "[bold]" not in printed
    assert main(["reconstruct", "--method", "fake", "--help-config"]) == 0
    assert capsys.readouterr().out.strip() == "FakeConfig fields"


@pytest.mark.parametrize("option, message", [
    (["--simplify", "9"], "--simplify applies to --method milo only"),
    (["--bbox", "0,0,0,1,1,1"], "--bbox applies to --method milo only"),
    (["--gpus", "2"], "--gpus applies to --method nvdiffrec and gaussians; --method fake trains in one process"),
    (["--up", "z"], "--up is implemented for the surface method and MILo's exports (--method nvdiffrec and milo); "
                    "gaussians and fake outputs stay"),
])
def test_cli_options_follow_the_capabilities(option, message, tmp_path, capsys, monkeypatch):
    calls: list = []
    monkeypatch.setitem(registry.METHODS, "fake", _fake_method(calls))
    code = main(["reconstruct", str(tmp_path), "--method", "fake", "--out", str(tmp_path / "o")] + option)
    assert code == 2 and message in " ".join(capsys.readouterr().err.split())
    assert not any(c[0] == "reconstruct" for c in calls)


def test_cli_gpus_checks_the_input_through_the_method_before_starting_ranks(tmp_path, capsys, monkeypatch):
    """``--gpus 2`` refuses an unusable input once (the method's check_input), before torchrun starts."""
    from meshlift.cli import launch

    started = []
    monkeypatch.setattr(launch, "run_under_torchrun", lambda *a, **k: started.append(a) or 0)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    code = main(["reconstruct", str(tmp_path / "missing"), "--method", "gaussians", "--gpus", "2",
                 "--out", str(tmp_path / "o")])
    assert code == 2 and "does not exist" in capsys.readouterr().err and started == []


def test_every_config_class_names_its_method():
    """The name a run records in config.json comes from the config class (no import of the registry from
    below); it must be the registry's name for that method."""
    from meshlift.methods.registry import METHODS

    for name, m in METHODS.items():
        assert m.config_cls.METHOD == name, (name, m.config_cls)


def test_look_line_names_the_last_image_of_each_pattern(tmp_path):
    """The summary's 'look at' line: the last match (by name) of each pattern that matched, nothing else."""
    from meshlift.methods.spec import look_line

    (tmp_path / "images").mkdir()
    for n in ("preview_000050.png", "preview_000400.png"):
        (tmp_path / "images" / n).write_bytes(b"x")
    (tmp_path / "loss_curve.png").write_bytes(b"x")
    line = look_line(tmp_path, [("images/preview_*.png", "render | target"), ("mesh_renders/*.png", "mesh"),
                                ("loss_curve.png", "the losses")])
    assert "preview_000400.png (render | target)" in line and "preview_000050" not in line
    assert "loss_curve.png (the losses)" in line and "(mesh)" not in line
    assert look_line(tmp_path, [("nothing_*.png", "x")]) is None


@pytest.mark.parametrize("m", ALL, ids=lambda m: m.name)
def test_help_config_with_quick_lists_what_the_preset_changes(m: Method, capsys):
    """--help-config with --quick (and --preset) first lists the fields the run would start from where they
    differ from the defaults, each with the value the preset table gives (fresh-user review, 2026-12-04)."""
    name = m.presets.quick[0]
    assert main(["reconstruct", "--method", m.name, "--preset", name, "--quick", "--help-config"]) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"--preset {name} --quick sets (before any --set):")
    cfg, base = m.presets.get(name, quick=True), m.config_cls()
    changed = [f for f in dataclasses.fields(cfg) if getattr(cfg, f.name) != getattr(base, f.name)]
    assert changed, m.name
    for f in changed:
        assert f"  {f.name} = {getattr(cfg, f.name)!r}   (default {getattr(base, f.name)!r})" in text, f.name
    assert f"{m.config_cls.__name__} fields" in text  # the full list follows
