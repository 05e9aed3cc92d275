"""`meshlift doctor`: each failure class diagnosed from simulated environments (Facts built by hand or probes
monkeypatched), the Triton probe kernel run under the interpreter, and a real run on this machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from meshlift import _deps
from meshlift import doctor as doc
from meshlift.doctor import GPU, DiskFacts, Facts, TorchFacts, TritonFacts

REPO = Path(__file__).resolve().parents[1]


def _ok(name="x", version="1.0"):
    return _deps.DepStatus(True, version, None, "pip install x")


def _gpu_facts(capability=(9, 0), arch_list=None, **torch_kw) -> Facts:
    """A healthy single-GPU machine; tests change one thing at a time."""
    t = TorchFacts(version="2.11.0+cu130", cuda_build="13.0", cudnn=91200, cuda_available=True, driver="580.95",
                   gpus=[GPU(0, "NVIDIA H200", capability, 140 * 2**30, 141 * 2**30)],
                   arch_list=arch_list if arch_list is not None else ["sm_80", "sm_90", "sm_100", "sm_120"])
    for k, v in torch_kw.items():
        setattr(t, k, v)
    tr = TritonFacts(status=_ok(version="3.6.0"), cache_dir="/tmp/triton", cache_writable=True,
                     kernel={"device": "cuda:0", "n": 4096, "first_call_s": 0.61, "second_call_s": 1e-4,
                             "compile_s": 0.61, "max_abs_err": 0.0})
    return Facts(python="3.11.7 (/usr/bin/python)", platform="Linux x86_64", torch=t, triton=tr,
                 backends={"device": "cuda", "rasterization": "torch", "splatting": None},
                 extras={"gradio": _ok()}, extensions={}, alloc_conf="expandable_segments:True",
                 disks=[DiskFacts("output", "/tmp", 50 * 2**30)])


def _row(rows, check):
    found = [r for r in rows if r.check == check]
    assert found, f"no row {check!r} in {[r.check for r in rows]}"
    return found[0]


def test_healthy_gpu_machine_is_all_ok():
    rows = doc.diagnose(_gpu_facts())
    bad = [r for r in rows if r.status in ("warning", "error")]
    assert not bad, bad
    assert doc.can_run(rows)
    assert "NVIDIA H200" in _row(rows, "GPU 0").detail and "140.0 GiB free of 141.0 GiB" in _row(rows, "GPU 0").detail
    assert "compiled in 0.61 s" in _row(rows, "triton kernel").detail


@pytest.mark.parametrize("arch_list, status, words", [
    (["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"], "error", "no kernels for sm_120"),
    (["sm_80", "sm_90", "compute_90"], "warning", "JIT-compiles the compute_90 PTX"),
    (["sm_90", "sm_100", "sm_120"], "ok", "sm_120 kernels present"),
])
def test_blackwell_sm120_against_the_wheels_arch_list(arch_list, status, words):
    f = _gpu_facts(capability=(12, 0), arch_list=arch_list)
    rows = doc.diagnose(f)
    r = _row(rows, "GPU 0 arch")
    assert r.status == status and words in r.detail
    if status == "error":
        assert "12.0+PTX" in r.fix and not doc.can_run(rows)


def test_same_major_cubin_runs_on_a_later_minor():
    r = _row(doc.diagnose(_gpu_facts(capability=(8, 6), arch_list=["sm_80", "sm_90"])), "GPU 0 arch")
    assert r.status == "ok" and "sm_80" in r.detail


@pytest.mark.parametrize("error, kind, fix_word", [
    ("ImportError: /site-packages/nvdiffrast_plugin.so: undefined symbol: _ZN3c106detail14torchCheckFailEPKcS2_jRKSs",
     "abi", "ABI / torch mismatch"),
    ("RuntimeError: CUDA error: no kernel image is available for execution on the device", "arch",
     "TORCH_CUDA_ARCH_LIST"),
    ("OSError: CUDA_HOME environment variable is not set. Please set it to your CUDA install root.", "toolkit",
     "nvcc"),
    ("RuntimeError: Error building extension 'renderutils_plugin': /bin/sh: 1: nvcc: not found", "toolkit",
     "CUDA toolkit"),
    ("ImportError: libcudart.so.11.0: cannot open shared object file: No such file or directory", "library",
     "shared library"),
    ("ImportError: something else entirely", "unknown", "reinstall"),
])
def test_extension_import_failures_are_classified(error, kind, fix_word):
    got_kind, fix = doc.classify_import_error(error)
    assert got_kind == kind and fix_word in fix
    f = _gpu_facts()
    f.extensions = {"nvdiffrast": _deps.DepStatus(False, "0.3.3", error, "(not needed by meshlift)")}
    rows = doc.diagnose(f)
    r = _row(rows, "extension nvdiffrast")
    assert r.status == "warning" and f"[{kind}]" in r.detail
    assert "meshlift needs none of" in r.fix
    assert doc.can_run(rows)  # meshlift itself is unaffected


def test_real_probe_classifies_a_broken_extension(monkeypatch, tmp_path):
    """An installed package whose import raises an undefined-symbol ImportError, found through _deps.probe."""
    pkg = tmp_path / "gsplat"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise ImportError('/x/gsplat_cuda.so: undefined symbol: _ZN2at4_ops5zeros4callE')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("gsplat", None)
    st = _deps.probe("gsplat")
    assert not st.available and "undefined symbol" in st.error
    assert doc.classify_import_error(st.error)[0] == "abi"
    assert _deps.probe("gsplat", import_module=False).available  # installed, even though broken
    absent = _deps.probe("tinycudann_definitely_absent_pkg")
    assert not absent.available and absent.error == "not installed"


def test_require_and_install_lines_name_the_extra(monkeypatch):
    from meshlift.errors import DependencyError

    monkeypatch.setitem(sys.modules, "gradio", None)  # import gradio -> ImportError
    with pytest.raises(DependencyError, match=r"the web app needs the 'gradio' package: pip install gradio.*meshlift\[app\]"):
        _deps.require("gradio", "the web app")
    assert _deps.DEPENDENCIES["nvdiffrast.torch"].install_line() == "(not needed by meshlift)"
    st = _deps.probe("gradio")
    assert not st.available and 'meshlift[app]' in st.install_hint


def test_broken_torch_is_an_error_and_stops_there():
    f = Facts(python="3.11.7 (x)", platform="Linux",
              torch=TorchFacts(import_error="ImportError: libtorch_cuda.so: cannot open shared object file"))
    rows = doc.diagnose(f)
    r = _row(rows, "torch")
    assert r.status == "error" and "libtorch_cuda" in r.detail and not doc.can_run(rows)
    assert not any(r.check.startswith("triton") for r in rows)


def test_cpu_build_cuda_build_without_gpu_and_old_python():
    cpu = _gpu_facts()
    cpu.torch = TorchFacts(version="2.13.0+cpu")
    cpu.triton.kernel = None
    rows = doc.diagnose(cpu)
    assert _row(rows, "CUDA").status == "skip"
    assert _row(rows, "triton kernel").status == "skip" and "skipped: no CUDA GPU" in _row(rows, "triton kernel").detail
    assert doc.can_run(rows)
    nogpu = _gpu_facts(cuda_available=False, gpus=[], driver=None)
    r = _row(doc.diagnose(nogpu), "CUDA")
    assert r.status == "warning" and "no GPU is visible" in r.detail and "no NVIDIA driver" in r.detail
    old = _gpu_facts()
    old.python = "3.9.18 (/usr/bin/python3)"
    rows = doc.diagnose(old)
    assert _row(rows, "python").status == "error" and not doc.can_run(rows)


def test_triton_failures():
    f = _gpu_facts()
    f.triton.kernel, f.triton.kernel_error = None, "RuntimeError: PTX .version 8.7 does not support .target sm_90a"
    r = _row(doc.diagnose(f), "triton kernel")
    assert r.status == "error" and "driver" in r.fix
    f = _gpu_facts()
    f.triton.cache_writable = False
    r = _row(doc.diagnose(f), "triton kernel")
    assert r.status == "warning" and "NOT writable" in r.detail and "TRITON_CACHE_DIR" in r.fix
    f = _gpu_facts()
    f.triton.status = _deps.DepStatus(False, None, "not installed", "pip install triton")
    rows = doc.diagnose(f)
    assert _row(rows, "triton").status == "warning" and "pip install triton" in _row(rows, "triton").fix
    assert _row(rows, "triton kernel").status == "skip"


def test_alloc_conf_disk_low_memory_and_backends():
    f = _gpu_facts()
    f.alloc_conf = None
    f.disks = [DiskFacts("output", "/full", 100 * 2**20), DiskFacts("temp", "/nope", None)]
    f.torch.gpus[0].mem_free = 1 * 2**30
    f.backends = {"device": "cuda", "rasterization": "error: RenderError: no visibility backend", "splatting": "triton"}
    rows = doc.diagnose(f)
    assert _row(rows, "PYTORCH_CUDA_ALLOC_CONF").status == "warning"
    assert "expandable_segments:True" in _row(rows, "PYTORCH_CUDA_ALLOC_CONF").fix
    assert _row(rows, "disk output").status == "warning" and "0.1 GiB free" in _row(rows, "disk output").detail
    assert _row(rows, "disk temp").status == "warning"
    assert _row(rows, "GPU 0").status == "warning" and "another process" in _row(rows, "GPU 0").fix
    assert _row(rows, "backend rasterization").status == "error"
    assert _row(rows, "backend splatting").detail == "auto -> triton on cuda"
    assert not doc.can_run(rows)


def test_gather_with_monkeypatched_probes(monkeypatch, tmp_path):
    """gather() itself, with a simulated broken extension and an unwritable Triton cache."""
    real_probe = _deps.probe

    def fake_probe(name, *, import_module=True):
        if name == "tinycudann":
            if not import_module:
                return _deps.DepStatus(True, "1.7", None, "")
            return _deps.DepStatus(False, "1.7", "ImportError: tinycudann_bindings/_C.so: undefined symbol: "
                                   "_ZNK3c1010TensorImpl", "")
        return real_probe(name, import_module=import_module)

    monkeypatch.setattr(_deps, "probe", fake_probe)
    monkeypatch.setattr(doc, "_writable", lambda p: False)
    f = doc.gather(tmp_path, run_kernel=False)
    rows = doc.diagnose(f)
    r = _row(rows, "extension tinycudann")
    assert "[abi]" in r.detail
    assert f.triton.cache_writable is False
    assert _row(rows, "disk output").detail.startswith(str(tmp_path))
    assert _row(rows, "backend rasterization").status == "ok"
    js = doc.to_json(f, rows)
    json.dumps(js)  # plain data
    assert js["facts"]["extensions"]["tinycudann"]["available"] is False


def test_triton_probe_kernel_under_the_interpreter():
    """The doctor's saxpy kernel really compiles and runs (TRITON_INTERPRET=1 on the CPU, in a subprocess)."""
    pytest.importorskip("triton")
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(REPO / "src"))
    code = ("import json; from meshlift.kernels.triton_probe import run_probe; "
            "print(json.dumps(run_probe('cpu', n=3000)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["max_abs_err"] < 1e-6 and res["n"] == 3000


def test_cli_on_this_machine(capsys, tmp_path):
    from meshlift.cli.main import main

    code = main(["doctor", "--json", "--out", str(tmp_path), "--no-kernel"])
    js = json.loads(capsys.readouterr().out)
    assert code == (0 if js["can_run"] else 1)
    checks = {r["check"] for r in js["rows"]}
    assert {"python", "torch", "triton", "triton kernel", "backend rasterization", "extra gradio",
            "PYTORCH_CUDA_ALLOC_CONF", "disk output"} <= checks
    assert all(r["status"] in doc.STATUSES for r in js["rows"])
    code = main(["doctor", "--out", str(tmp_path), "--no-kernel"])
    text = capsys.readouterr().out
    assert "meshlift doctor" in text and ("can run here" in text or "cannot run here" in text)
    # not a terminal (a pipe, a log): one whole line per check, nothing folded at 80 columns (fresh-user report)
    lines = text.splitlines()
    assert any(ln.split(":")[0].endswith(" PYTORCH_CUDA_ALLOC_CONF") for ln in lines)
    assert any(" python: " in ln and str(Path(sys.executable).parent) in ln for ln in lines)
    assert not any("│" in ln for ln in lines)


@pytest.mark.gpu
def test_doctor_on_a_gpu_compiles_the_triton_kernel():
    import torch

    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    f, rows = doc.run()
    r = _row(rows, "triton kernel")
    assert r.status in ("ok", "warning") and "compiled in" in r.detail, r
    assert _row(rows, "GPU 0 arch").status == "ok"


def test_the_warm_up_row_says_whether_the_cache_holds_the_kernels():
    f = _gpu_facts()
    f.triton.warm = (63, False)
    r = _row(doc.diagnose(f), "triton warm-up")
    assert r.status == "ok" and "not yet" in r.detail and "63" in r.detail and "MESHLIFT_PRECOMPILE_WORKERS" in r.detail
    f.triton.warm = (63, True)
    assert "are compiled in the cache" in _row(doc.diagnose(f), "triton warm-up").detail
    f.triton.warm_milo = (67, False)  # one job warm, the other not
    d = _row(doc.diagnose(f), "triton warm-up").detail
    assert "surface method's 63 kernel variants are compiled" in d and "not yet" in d and "MILo's 67" in d, d
    f.triton.warm = f.triton.warm_milo = None
    assert not [r for r in doc.diagnose(f) if r.check == "triton warm-up"]


def test_environment_rows_say_what_each_variable_does_and_flag_the_others():
    typo = "MESHLIFT_" + "NUM_THREAD"  # spelled in two pieces: tests/test_environment.py scans for names
    f = _gpu_facts()
    f.environment = [("MESHLIFT_MAX_FRAGMENTS", "9", "removed"), (typo, "2", "unknown"),
                     ("MESHLIFT_NUM_THREADS", "2", "known"), ("MESHLIFT_RASTER_BACKEND", "torch", "deprecated")]
    rows = {r.check: r for r in doc.diagnose(f)}
    assert rows["env MESHLIFT_NUM_THREADS"].status == "ok"
    assert rows["env MESHLIFT_NUM_THREADS"].detail == "2: CPU threads of torch's pool in the CLI (a positive integer; pin it for bit-reproducible runs)"
    r = rows[f"env {typo}"]
    assert r.status == "warning" and "meshlift reads no such variable; did you mean MESHLIFT_NUM_THREADS?" in r.detail
    assert "docs/usage/environment.md" in r.fix
    r = rows["env MESHLIFT_RASTER_BACKEND"]
    assert r.status == "warning" and "deprecated, still applied" in r.detail and "raster_backend" in r.fix
    r = rows["env MESHLIFT_MAX_FRAGMENTS"]
    assert r.status == "warning" and "no longer read" in r.detail and "config field max_fragments" in r.fix
    f.environment = []
    assert {r.check: r for r in doc.diagnose(f)}["environment"].detail.startswith("no MESHLIFT_* variable set")
    assert doc.can_run(doc.diagnose(f))


def test_gather_lists_the_meshlift_variables_set(monkeypatch):
    monkeypatch.setenv("MESHLIFT_NUM_THREADS", "1")
    monkeypatch.setattr(doc, "_gather_torch", lambda: doc.TorchFacts())
    f = doc.gather(run_kernel=False)
    assert ("MESHLIFT_NUM_THREADS", "1", "known") in f.environment
    assert doc.to_json(f, doc.diagnose(f))["facts"]["environment"]
