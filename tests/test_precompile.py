"""The start-up warm-up of Triton kernel variants (meshlift.kernels.precompile): the shipped record still fits
the kernels it names, the worker compiles a record into Triton's cache without a GPU, and ``start`` stays out
of CPU runs. That the records give the keys a run's own launches look up is checked on a GPU (a run after
the warm-up compiles nothing itself: docs/benchmarks.md, session 10)."""

from __future__ import annotations

import ast
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from meshlift.kernels import precompile

SRC = Path(__file__).resolve().parents[1] / "src"


def _params(kernel):
    sig = inspect.signature(kernel.fn)
    return [(p.name, "constexpr" in str(p.annotation)) for p in sig.parameters.values()]


def test_the_shipped_record_lists_the_nvdiffrec_kernels():
    vs = precompile.load_variants("nvdiffrec")
    assert len(vs) >= 40
    names = {v.kernel.rsplit(":", 1)[1].split(".")[-1] for v in vs}
    for k in ("_raster_kernel", "_raster_bwd_kernel", "_bin_kernel", "aa_pairs", "tex_bwd", "shading_normal_bwd",
              "tonemapped_l1_fwd", "_fwd", "_csr_rows"):
        assert k in names
    assert len({v.key() for v in vs}) == len(vs)  # no duplicates


def test_the_shipped_record_lists_the_milo_kernels():
    vs = precompile.load_variants("milo")
    names = {v.kernel.rsplit(":", 1)[1].split(".")[-1] for v in vs}
    for k in ("project_fwd", "project_bwd", "sh_fwd", "sh_bwd", "composite_fwd", "composite_bwd", "write_keys",
              "tile_bounds", "_raster_kernel"):  # splatting, and the mesh-in-the-loop rasterizer
        assert k in names
    assert len({v.key() for v in vs}) == len(vs)


def test_the_shipped_record_lists_the_gaussians_kernels_at_every_sh_degree():
    """The 3DGS loop's variants (traced on the CPU: benchmarks/trace_gaussians_variants.py): the SH kernels of
    degrees 0-3, met at steps 0/1000/2000/3000, compile at start-up in the background, not mid-run (issue 29)."""
    vs = precompile.load_variants("gaussians")
    names = {v.kernel.rsplit(":", 1)[1] for v in vs}
    for k in ("project_fwd", "project_bwd", "write_keys", "composite_fwd", "composite_bwd", "ssim_hstats",
              "ssim_vgrad", "adam6"):
        assert k in names
    for k in ("sh_fwd", "sh_bwd"):
        degrees = {ast.literal_eval(v.constexprs)[(7,) if k == "sh_fwd" else (9,)] for v in vs
                   if v.kernel.endswith(":" + k)}
        assert degrees == {0, 1, 2, 3}, (k, degrees)
    assert len({v.key() for v in vs}) == len(vs)


@pytest.mark.parametrize("v", precompile.load_variants(), ids=lambda v: v.kernel.rsplit(":", 1)[1])
def test_every_record_fits_its_kernel(v):
    """A kernel whose parameters changed since the record was taken must be re-recorded
    (benchmarks/record_kernel_variants.py on a GPU): its record would compile a variant no launch uses."""
    kernel = precompile.resolve_kernel(v.kernel)
    params = _params(kernel)
    sig = ast.literal_eval(v.signature)
    assert list(sig) == [n for n, _ in params], "parameter names or order changed"
    consts = ast.literal_eval(v.constexprs)
    for i, (name, is_const) in enumerate(params):
        if is_const:
            assert sig[name] == "constexpr" and (i,) in consts, f"{name}: now a constexpr"
        elif sig[name] == "constexpr":  # Triton folds an integer argument equal to 1 into a constant
            assert consts.get((i,)) == 1, f"{name}: no longer a constexpr"
    for path, attrs in ast.literal_eval(v.attrs).items():
        assert not params[path[0]][1], f"specialisation recorded for the constexpr {params[path[0]][0]}"


def test_start_does_nothing_on_the_cpu_or_when_switched_off(monkeypatch):
    assert precompile.start("nvdiffrec", torch.device("cpu")) is None
    monkeypatch.setenv(precompile.ENV_WORKERS, "0")
    assert precompile.start("nvdiffrec", torch.device("cuda")) is None
    assert precompile.start("no-such-job", torch.device("cuda"), workers=4) is None  # nothing recorded


def test_a_worker_compiles_its_share_into_the_cache_without_a_gpu(tmp_path):
    n = len(precompile.load_variants("nvdiffrec"))
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(TRITON_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=str(SRC))
    marker = tmp_path / "marker"
    # worker 0 of n takes variant 0 only (the round-robin share): the CSR kernel, a sub-second compile
    r = subprocess.run([sys.executable, "-m", "meshlift.kernels.precompile", "--job", "nvdiffrec", "--worker", "0",
                        "--of", str(n), "--arch", "90", "--marker", str(marker), "--no-launchers"], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    part = json.loads((tmp_path / f"marker.part0of{n}").read_text())
    assert part["compiled"] == 1 and part["failed"] == []
    cached = [p for p in (tmp_path / "cache").rglob("*.cubin")]
    assert len(cached) == 1


def test_close_writes_the_marker_only_when_every_worker_finished(tmp_path):
    ok = subprocess.Popen([sys.executable, "-c", "pass"])
    h = precompile.Precompile([ok], tmp_path / "m")
    h.wait(30)
    (tmp_path / "m.part0of1").write_text(json.dumps({"compiled": 1, "failed": [], "s": 0.1}))
    h.close()
    assert (tmp_path / "m").exists() and not (tmp_path / "m.part0of1").exists()
    slow = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    h = precompile.Precompile([slow], tmp_path / "m2")
    h.close()  # stops the unfinished worker, no marker
    assert slow.poll() is not None and not (tmp_path / "m2").exists()


def test_warm_state_reads_the_marker_of_a_finished_warm_up(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    n, warm = precompile.warm_state("nvdiffrec", (9, 0))
    assert n == len(precompile.load_variants("nvdiffrec")) and not warm
    marker = precompile._marker(precompile.load_variants("nvdiffrec"), 90)
    assert marker.parent == tmp_path
    marker.write_text("{}")
    assert precompile.warm_state("nvdiffrec", (9, 0)) == (n, True)
    assert precompile.warm_state("nvdiffrec", (8, 0)) == (n, False)  # another GPU: other binaries


def test_the_recorder_writes_back_the_record_a_compile_was_made_from(tmp_path):
    """record() around a real triton.compile (to sm_90 on the CPU) gives the same signature, constexprs and
    attrs as the shipped record it was built from: what merge_records would add is what the worker replays."""
    code = f'''
import ast, json, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from meshlift.kernels import precompile as P
v = P.load_variants("nvdiffrec")[0]
with P.record({str(tmp_path / "rec.jsonl")!r}, "test"):
    src = ASTSource(P.resolve_kernel(v.kernel), ast.literal_eval(v.signature), ast.literal_eval(v.constexprs),
                    ast.literal_eval(v.attrs))
    triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(v.options))
(row,) = [json.loads(line) for line in open({str(tmp_path / "rec.jsonl")!r})]
assert P.resolve_kernel(row["kernel"]) is P.resolve_kernel(v.kernel), row["kernel"]
assert (row["signature"], row["constexprs"], row["attrs"], row["options"]) == (v.signature, v.constexprs, v.attrs, v.options), row
assert triton.compiler.compiler.compile.__name__ == "compile"  # restored
print("ok")
'''
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(TRITON_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=str(SRC))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]


def test_prime_in_background_computes_tritons_install_hash(monkeypatch):
    triton_cache = pytest.importorskip("triton.runtime.cache")
    key = getattr(triton_cache, "triton_key", None)
    if key is None or not hasattr(key, "cache_info"):
        pytest.skip("this Triton has no lru-cached triton_key")
    monkeypatch.setattr(precompile, "_PRIMER", [])
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert precompile.prime_in_background() is None  # interpreted Triton compiles nothing
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    t = precompile.prime_in_background()
    assert t is not None and t.daemon
    t.join(60)
    assert not t.is_alive() and key.cache_info().currsize == 1  # the run's first compile finds it
    assert precompile.prime_in_background() is None  # once per process
