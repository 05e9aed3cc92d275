"""``meshlift doctor``: what this machine can run, and the fix for each thing that is wrong.

Two layers, so every diagnosis is testable without the hardware it is about:

1. **Gathering** (:func:`gather`): side effects only here: imports torch, queries the GPUs, compiles and
   runs one tiny Triton kernel (:mod:`meshlift.kernels.triton_probe`), imports installed third-party
   extensions, reads environment variables and free disk space. The result is a plain :class:`Facts`.
2. **Diagnosis** (:func:`diagnose`): pure functions ``Facts -> [Row]``; each :class:`Row` is ``ok``,
   ``warning``, ``error`` or ``skip`` with a one-line detail and, when not ok, the fix.

:func:`can_run` is False when any row is an error (``meshlift doctor`` then exits 1). Nothing here prints;
:mod:`meshlift.cli.doctor_cmd` draws the table or writes JSON.

The failure classes recognised in third-party extension imports (:func:`classify_import_error`):
``undefined symbol`` (a C++ ABI / torch-version mismatch, e.g. ``torchCheckFail…RKSs``), ``no kernel image``
(the wheel was built without the GPU's architecture: ``TORCH_CUDA_ARCH_LIST``, e.g. ``12.0+PTX`` for
Blackwell sm_120), ``nvcc`` / ``CUDA_HOME`` (a build needing the CUDA toolkit), a missing shared library
(CUDA runtime of another version). meshlift needs none of those extensions.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Optional

from meshlift import _deps, _env

STATUSES = ("ok", "warning", "error", "skip")
"""Row statuses, from good to bad; ``skip`` = not applicable on this machine (e.g. no GPU)."""


@dataclass
class Row:
    """One line of the doctor table."""

    check: str
    """What was checked (``"torch"``, ``"GPU 0"``, ``"extension nvdiffrast"``...)."""
    status: str
    """One of :data:`STATUSES`."""
    detail: str
    """What was found."""
    fix: str = ""
    """What to do (empty when ok)."""


@dataclass
class GPU:
    """One CUDA device as torch sees it."""

    index: int
    name: str
    capability: tuple[int, int]
    """Compute capability (major, minor); sm_XY."""
    mem_free: Optional[int] = None
    """Free memory in bytes (``torch.cuda.mem_get_info``), None when the query failed."""
    mem_total: Optional[int] = None
    """Total memory in bytes."""


@dataclass
class TorchFacts:
    """What the installed torch is built for and what it sees."""

    version: Optional[str] = None
    """``torch.__version__``; None when torch failed to import."""
    import_error: Optional[str] = None
    cuda_build: Optional[str] = None
    """``torch.version.cuda`` (None for a CPU build)."""
    hip_build: Optional[str] = None
    """``torch.version.hip`` (ROCm builds)."""
    cudnn: Optional[int] = None
    """``torch.backends.cudnn.version()``."""
    cuda_available: bool = False
    cuda_error: Optional[str] = None
    """Why ``torch.cuda.is_available()`` / device queries failed, when they raised."""
    driver: Optional[str] = None
    """NVIDIA driver version (``nvidia-smi``) or CUDA driver API version."""
    gpus: list[GPU] = field(default_factory=list)
    arch_list: list[str] = field(default_factory=list)
    """``torch.cuda.get_arch_list()``: the sm_XY / compute_XY this wheel carries kernels for."""


@dataclass
class TritonFacts:
    """Triton installation and one real compile-and-run on the GPU."""

    status: _deps.DepStatus = field(default_factory=lambda: _deps.DepStatus(False, None, "not probed", ""))
    kernel: Optional[dict] = None
    """:func:`meshlift.kernels.triton_probe.run_probe` result, None when not run."""
    kernel_error: Optional[str] = None
    cache_dir: str = ""
    cache_writable: bool = False
    warm: Optional[tuple] = None
    """``(variants, compiled)`` of :func:`meshlift.kernels.precompile.warm_state` for the surface method on
    the first GPU (None when not checked)."""
    warm_milo: Optional[tuple] = None
    """The same for MILo (None when not checked)."""


@dataclass
class DiskFacts:
    label: str
    path: str
    free_bytes: Optional[int]
    """None when neither the folder nor a parent exists."""


@dataclass
class Facts:
    """Everything :func:`diagnose` needs; plain data (JSON-serialisable through :func:`dataclasses.asdict`)."""

    python: str = ""
    platform: str = ""
    torch: TorchFacts = field(default_factory=TorchFacts)
    triton: TritonFacts = field(default_factory=TritonFacts)
    backends: dict = field(default_factory=dict)
    """``{"rasterization": name | "error: ..." , "splatting": name | None}`` as ``auto`` picks on the device."""
    extras: dict = field(default_factory=dict)
    """``{name: DepStatus}`` for :data:`meshlift._deps.EXTRAS`."""
    extensions: dict = field(default_factory=dict)
    """``{name: DepStatus}`` for the installed :data:`meshlift._deps.THIRD_PARTY_EXTENSIONS`."""
    alloc_conf: Optional[str] = None
    """``$PYTORCH_CUDA_ALLOC_CONF``."""
    disks: list[DiskFacts] = field(default_factory=list)
    environment: list = field(default_factory=list)
    """``[(name, value, kind)]`` of the ``MESHLIFT_*`` variables set (:func:`meshlift._env.meshlift_variables`:
    ``known``, ``deprecated`` or ``unknown``)."""


# =============================================================================================================
# gathering (side effects)


def _gather_torch() -> TorchFacts:
    t = TorchFacts()
    try:
        import torch
    except BaseException as exc:  # noqa: BLE001 - a broken torch install is the most important finding
        if isinstance(exc, KeyboardInterrupt):
            raise
        t.import_error = f"{type(exc).__name__}: {exc}"
        return t
    t.version = str(torch.__version__)
    t.cuda_build = getattr(torch.version, "cuda", None)
    t.hip_build = getattr(torch.version, "hip", None)
    try:
        t.cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    except Exception:  # noqa: BLE001
        t.cudnn = None
    try:
        t.cuda_available = bool(torch.cuda.is_available())
        if t.cuda_available:
            t.arch_list = list(torch.cuda.get_arch_list())
            for i in range(torch.cuda.device_count()):
                props = torch.cuda.get_device_properties(i)
                gpu = GPU(i, props.name, (int(props.major), int(props.minor)), None, int(props.total_memory))
                try:
                    gpu.mem_free, gpu.mem_total = (int(v) for v in torch.cuda.mem_get_info(i))
                except Exception as exc:  # noqa: BLE001
                    t.cuda_error = f"memory query on GPU {i} failed: {type(exc).__name__}: {exc}"
                t.gpus.append(gpu)
    except Exception as exc:  # noqa: BLE001
        t.cuda_error = f"{type(exc).__name__}: {exc}"
    t.driver = _driver_version(torch)
    return t


def _driver_version(torch_module) -> Optional[str]:
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=15)
            if out.returncode == 0 and out.stdout.strip():
                return out.stdout.strip().splitlines()[0].strip()
        except (OSError, subprocess.SubprocessError):
            pass
    get = getattr(getattr(torch_module, "_C", None), "_cuda_getDriverVersion", None)
    if callable(get):
        try:
            v = int(get())
            if v > 0:
                return f"CUDA driver API {v // 1000}.{(v % 1000) // 10}"
        except Exception:  # noqa: BLE001
            pass
    return None


def _writable(path: Path) -> bool:
    """True when a file can be created in ``path`` (created if missing)."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".meshlift_doctor_"):
            pass
        return True
    except OSError:
        return False


def _gather_triton(torch_facts: TorchFacts) -> TritonFacts:
    from meshlift.kernels.triton_probe import run_probe, triton_cache_dir

    tr = TritonFacts(status=_deps.probe("triton"))
    cache = triton_cache_dir()
    tr.cache_dir = str(cache)
    tr.cache_writable = _writable(cache)
    if tr.status.available and torch_facts.cuda_available and torch_facts.gpus:
        try:
            import torch

            from meshlift.kernels.precompile import warm_state

            cap = torch.cuda.get_device_capability(0)
            tr.warm, tr.warm_milo = warm_state("nvdiffrec", cap), warm_state("milo", cap)
        except Exception:  # noqa: BLE001 - an informational row only
            tr.warm = tr.warm_milo = None
        try:
            tr.kernel = run_probe("cuda")
        except BaseException as exc:  # noqa: BLE001
            if isinstance(exc, KeyboardInterrupt):
                raise
            tr.kernel_error = f"{type(exc).__name__}: {exc}".strip()[:2000]
    return tr


def _gather_backends(torch_facts: TorchFacts) -> dict:
    """Ask the backend registries which backend ``auto`` picks on the first GPU (else the CPU)."""
    import importlib

    import torch

    device = "cuda" if torch_facts.cuda_available and torch_facts.gpus else "cpu"
    dev = torch.device(device)
    out: dict = {"device": device}
    try:
        kernels = importlib.import_module("meshlift.kernels")
        out["rasterization"] = kernels.get_backend("auto", dev).name
        out["rasterization_available"] = list(kernels.available_backends(dev))
    except Exception as exc:  # noqa: BLE001
        out["rasterization"] = f"error: {type(exc).__name__}: {exc}"
    out["splatting"] = None  # None: no splatting op in this version
    try:
        splat = importlib.import_module("meshlift.render.splat")
    except ImportError:
        splat = None
    if splat is not None:
        try:  # the op's own choice for backend=None (the current kernels.use_kernels, else auto)
            out["splatting"] = str(splat._resolve_backend(None, dev))
        except Exception as exc:  # noqa: BLE001
            out["splatting"] = f"error: {type(exc).__name__}: {exc}"
    return out


def _free_bytes(path: Path) -> Optional[int]:
    p = path
    while not p.exists():
        if p.parent == p:
            return None
        p = p.parent
    try:
        return shutil.disk_usage(p).free
    except OSError:
        return None


def _gather_disks(output_dir: Optional[Path], triton_cache: str) -> list[DiskFacts]:
    dirs = [("output", output_dir or Path.cwd()),
            ("temp", Path(tempfile.gettempdir())),
            ("triton cache", Path(triton_cache) if triton_cache else None),
            ("torch hub cache", Path(os.environ.get("TORCH_HOME", str(Path.home() / ".cache" / "torch"))))]
    return [DiskFacts(label, str(p), _free_bytes(p)) for label, p in dirs if p is not None]


def gather(output_dir: Optional[Path] = None, *, run_kernel: bool = True) -> Facts:
    """Collect the :class:`Facts` of this machine (imports torch; on a GPU compiles one Triton kernel).

    Args:
        output_dir: folder whose free disk space is reported as the output directory (default: cwd).
        run_kernel: compile and run the Triton probe kernel when a GPU is present.
    """
    f = Facts()
    f.python = f"{platform.python_version()} ({sys.executable})"
    f.platform = f"{platform.system()} {platform.release()} {platform.machine()}"
    f.torch = _gather_torch()
    if run_kernel:
        f.triton = _gather_triton(f.torch)
    else:
        from meshlift.kernels.triton_probe import triton_cache_dir

        f.triton = TritonFacts(status=_deps.probe("triton"), cache_dir=str(triton_cache_dir()))
        f.triton.cache_writable = _writable(Path(f.triton.cache_dir))
    if f.torch.version is not None:
        f.backends = _gather_backends(f.torch)
    f.extras = {name: _deps.probe(name, import_module=False) for name in _deps.EXTRAS if name != "triton"}
    f.extensions = {}
    for name in _deps.THIRD_PARTY_EXTENSIONS:
        installed = _deps.probe(name, import_module=False)
        if installed.available:  # import only what is installed: the import is the diagnosis
            f.extensions[name] = _deps.probe(name)
    f.alloc_conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF")
    f.disks = _gather_disks(output_dir, f.triton.cache_dir)
    f.environment = _env.meshlift_variables()
    return f


# =============================================================================================================
# diagnosis (pure)

_GIB = 1024.0**3


def _gib(n: Optional[int]) -> str:
    return "?" if n is None else f"{n / _GIB:.1f} GiB"


def classify_import_error(error: str) -> tuple[str, str]:
    """``(kind, fix)`` for the text of a failed extension import (``"ExceptionType: message"``).

    Kinds: ``abi`` (undefined symbol: built against another torch / C++ ABI / Python), ``arch`` (no kernel
    image for this GPU), ``toolkit`` (needs nvcc / CUDA_HOME), ``library`` (a shared library such as
    libcudart of another CUDA version is missing), ``unknown``.
    """
    low = error.lower()
    if "undefined symbol" in low or "symbol not found" in low:
        return "abi", ("ABI / torch mismatch: the extension was compiled against another torch, CUDA or Python "
                       "(C++ symbols such as torchCheckFail...RKSs differ between torch versions and "
                       "_GLIBCXX_USE_CXX11_ABI settings); reinstall a build made for this exact torch, or "
                       "uninstall it")
    if "no kernel image" in low:
        return "arch", ("architecture: the extension has no kernels for this GPU; rebuild it with "
                        "TORCH_CUDA_ARCH_LIST including this GPU (e.g. \"12.0+PTX\" for Blackwell sm_120), "
                        "or uninstall it")
    if "nvcc" in low or "cuda_home" in low or "cuda toolkit" in low:
        return "toolkit", ("CUDA toolkit: the extension wants to compile with nvcc (CUDA_HOME unset or no "
                           "toolkit installed); install a prebuilt wheel or the toolkit, or uninstall it")
    if "cannot open shared object" in low or "dll load failed" in low or "library not loaded" in low:
        return "library", ("missing shared library: the extension links a CUDA runtime or torch library of "
                           "another version; reinstall a build matching this torch, or uninstall it")
    return "unknown", "reinstall a build matching this torch and Python, or uninstall it"


def _arch_support(capability: tuple[int, int], arch_list: list[str]) -> tuple[str, str]:
    """``(status, detail)``: whether a wheel with ``arch_list`` runs on a GPU of ``capability``.

    A cubin for sm_XY runs on sm_XZ with Z >= Y (same major); PTX (``compute_XY``) is JIT-compiled by the
    driver for any later GPU (slow first start, works); anything else is "no kernel image".
    """
    major, minor = capability
    sm = f"sm_{major}{minor}"
    cubins, ptx = [], []
    for a in arch_list:
        kind, _, num = a.partition("_")
        if not num.isdigit():
            continue
        val = int(num)
        (cubins if kind == "sm" else ptx).append((val // 10, val % 10, a))
    if any(a == sm for _, _, a in cubins):
        return "ok", f"{sm} kernels present"
    same_major = [a for mj, mn, a in cubins if mj == major and mn <= minor]
    if same_major:
        return "ok", f"{sm} runs the {same_major[-1]} kernels (same major architecture)"
    older_ptx = [a for mj, mn, a in ptx if (mj, mn) <= (major, minor)]
    if older_ptx:
        return "warning", (f"no {sm} kernels; the driver JIT-compiles the {older_ptx[-1]} PTX at first use "
                           "(slow start, may miss newer features)")
    return "error", f"this torch has no kernels for {sm} (arch list: {' '.join(arch_list) or 'empty'})"


def _torch_rows(t: TorchFacts) -> list[Row]:
    if t.version is None:
        return [Row("torch", "error", f"import failed: {t.import_error}",
                    "reinstall torch (CPU: pip install torch; GPU: the CUDA build for your driver, see "
                    "pytorch.org/get-started)")]
    if t.cuda_build:
        build = f"CUDA {t.cuda_build} build"
    elif t.hip_build:
        build = f"ROCm {t.hip_build} build"
    else:
        build = "CPU build"
    rows = [Row("torch", "ok", f"{t.version}, {build}, torch.version.cuda = {t.cuda_build}, "
                f"cuDNN {t.cudnn if t.cudnn is not None else 'none'}")]
    if t.cuda_error and not t.gpus:
        fix = "check the NVIDIA driver (nvidia-smi) and that this torch's CUDA version is supported by it"
        rows.append(Row("CUDA", "error" if t.cuda_build else "warning", t.cuda_error, fix))
    elif not t.cuda_available:
        if t.cuda_build:
            rows.append(Row("CUDA", "warning", f"this is a CUDA {t.cuda_build} build but no GPU is visible"
                            f"{' (driver ' + t.driver + ')' if t.driver else ' (no NVIDIA driver found)'}; "
                            "meshlift runs on the CPU",
                            "check nvidia-smi, CUDA_VISIBLE_DEVICES, and that the driver supports CUDA "
                            f"{t.cuda_build}"))
        else:
            rows.append(Row("CUDA", "skip", "CPU build of torch: meshlift runs on the CPU (small jobs, all tests)",
                            "for GPU speed install a CUDA build of torch (pytorch.org/get-started)"))
    else:
        rows.append(Row("driver", "ok" if t.driver else "warning", f"NVIDIA driver {t.driver or 'version unknown'}",
                        "" if t.driver else "nvidia-smi not found; the driver version could not be read"))
        for g in t.gpus:
            status, detail = _arch_support(g.capability, t.arch_list)
            mem = f"{_gib(g.mem_free)} free of {_gib(g.mem_total)}"
            low_mem = g.mem_free is not None and g.mem_total and g.mem_free < 0.1 * g.mem_total
            rows.append(Row(f"GPU {g.index}", "warning" if low_mem else "ok",
                            f"{g.name}, compute capability {g.capability[0]}.{g.capability[1]}, {mem}",
                            "another process holds most of this GPU's memory (nvidia-smi shows which)"
                            if low_mem else ""))
            fix = ""
            if status == "error":
                fix = (f"install a torch wheel built for {g.capability[0]}.{g.capability[1]}"
                       + (" (CUDA 12.8 or newer builds carry sm_120: the 12.0+PTX case)" if g.capability[0] >= 12
                          else "") + "; see pytorch.org/get-started")
            elif status == "warning":
                fix = "install a torch wheel that lists this architecture for a faster start"
            rows.append(Row(f"GPU {g.index} arch", status, detail, fix))
        if t.cuda_error:
            rows.append(Row("CUDA", "warning", t.cuda_error, "check nvidia-smi"))
    return rows


def _triton_rows(tr: TritonFacts, t: TorchFacts) -> list[Row]:
    rows = []
    gpu = t.cuda_available and bool(t.gpus)
    st = tr.status
    if not st.available:
        status = "warning" if gpu else "skip"
        rows.append(Row("triton", status, f"not usable: {st.error}",
                        f"{st.install_hint}; without it meshlift uses its PyTorch paths (slower on GPU)" if gpu else
                        "not needed without a CUDA GPU (meshlift's PyTorch paths run on the CPU)"))
    else:
        rows.append(Row("triton", "ok", f"{st.version}"))
    cache = f"cache {tr.cache_dir} ({'writable' if tr.cache_writable else 'NOT writable'})"
    if not gpu:
        rows.append(Row("triton kernel", "skip", f"skipped: no CUDA GPU; {cache}"))
    elif not st.available:
        rows.append(Row("triton kernel", "skip", f"skipped: triton not usable; {cache}"))
    elif tr.kernel_error:
        low = tr.kernel_error.lower()
        if "ptxas" in low or "ptx" in low and "version" in low:
            fix = "the driver is older than Triton's PTX: update the NVIDIA driver or use an older triton"
        elif "permission" in low or "read-only" in low or not tr.cache_writable:
            fix = "set TRITON_CACHE_DIR to a writable folder"
        else:
            fix = ("report this error; run on meshlift's PyTorch paths meanwhile: --set raster_backend=torch "
                   "--set shading_backend=torch (surface method), --set splat_backend=torch (Gaussians; MILo also "
                   "--set raster_backend=torch)")
        rows.append(Row("triton kernel", "error", f"compile/run failed: {tr.kernel_error.splitlines()[0][:300]}; "
                        f"{cache}", fix))
    elif tr.kernel is not None:
        k = tr.kernel
        ok = k["max_abs_err"] <= 1e-5
        rows.append(Row("triton kernel", "ok" if ok and tr.cache_writable else ("error" if not ok else "warning"),
                        f"saxpy x{k['n']} compiled in {k['compile_s']:.2f} s, ran {k['second_call_s'] * 1e3:.2f} ms, "
                        f"max error {k['max_abs_err']:.1e}; {cache}",
                        "" if ok and tr.cache_writable else
                        ("wrong results: report this" if not ok else
                         "set TRITON_CACHE_DIR to a writable folder (kernels recompile at every start)")))
    jobs = [(name, w) for name, w in (("the surface method", tr.warm), ("MILo", tr.warm_milo))
            if w is not None and w[0]]
    if gpu and st.available and jobs:
        done = " and ".join(f"{name}'s {n}" for name, (n, compiled) in jobs if compiled)
        todo = " and ".join(f"{name}'s {n}" for name, (n, compiled) in jobs if not compiled)
        parts = ([f"{done} kernel variants are compiled in the cache"] if done else []) + (
            [f"not yet: the first CUDA run compiles {todo} kernel variants in background processes "
             "(MESHLIFT_PRECOMPILE_WORKERS; 0 = off)"] if todo else [])
        rows.append(Row("triton warm-up", "ok", "; ".join(parts)))
    return rows


def _backend_rows(b: dict) -> list[Row]:
    if not b:
        return []
    rows = []
    ras = b.get("rasterization")
    if ras is None or str(ras).startswith("error"):
        rows.append(Row("backend rasterization", "error", str(ras),
                        "reinstall meshlift; meanwhile --set raster_backend=torch"))
    else:
        avail = b.get("rasterization_available")
        rows.append(Row("backend rasterization", "ok", f"auto -> {ras} on {b.get('device')}"
                        + (f" (available: {', '.join(avail)})" if avail else "")))
    sp = b.get("splatting")
    if sp is None:
        rows.append(Row("backend splatting", "skip", "no splatting op in this version of meshlift"))
    elif str(sp).startswith("error"):
        rows.append(Row("backend splatting", "warning", str(sp), "the Gaussian methods will not run"))
    else:
        rows.append(Row("backend splatting", "ok", f"auto -> {sp} on {b.get('device')}"))
    return rows


def _extra_rows(extras: dict) -> list[Row]:
    rows = []
    for name, st in extras.items():
        dep = _deps.DEPENDENCIES.get(name)
        purpose = dep.purpose if dep else name
        if st.available:
            rows.append(Row(f"extra {name}", "ok", f"{st.version or 'installed'}: {purpose}"))
        else:
            rows.append(Row(f"extra {name}", "skip", f"not installed (optional: {purpose})", st.install_hint))
    return rows


def _extension_rows(extensions: dict) -> list[Row]:
    rows = []
    for module, st in extensions.items():
        name = _deps.DEPENDENCIES[module].package if module in _deps.DEPENDENCIES else module
        if st.available:
            rows.append(Row(f"extension {name}", "ok", f"{st.version or 'installed'} imports "
                            "(meshlift does not need it)"))
            continue
        kind, fix = classify_import_error(st.error or "")
        rows.append(Row(f"extension {name}", "warning", f"import fails [{kind}]: {(st.error or '')[:300]}",
                        fix + ". meshlift needs none of nvdiffrast, gsplat, tinycudann, "
                        "diff_gaussian_rasterization; this only matters for other tools"))
    return rows


def _alloc_row(conf: Optional[str], gpu: bool) -> Row:
    if conf and "expandable_segments:true" in conf.replace(" ", "").lower():
        return Row("PYTORCH_CUDA_ALLOC_CONF", "ok", conf)
    fix = "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (less fragmentation on long runs)"
    if not gpu:
        return Row("PYTORCH_CUDA_ALLOC_CONF", "skip", f"{conf or 'unset'} (no GPU)")
    return Row("PYTORCH_CUDA_ALLOC_CONF", "warning" if not conf else "ok", conf or "unset", fix if not conf else "")


def _disk_rows(disks: list[DiskFacts], min_free: int = 2 * 1024**3) -> list[Row]:
    rows = []
    for d in disks:
        if d.free_bytes is None:
            rows.append(Row(f"disk {d.label}", "warning", f"{d.path}: no such folder or parent",
                            "create it or point the option at an existing folder"))
        elif d.free_bytes < min_free:
            rows.append(Row(f"disk {d.label}", "warning", f"{d.path}: {_gib(d.free_bytes)} free",
                            f"free space: a full run writes checkpoints, textures and images (keep > "
                            f"{_gib(min_free)})"))
        else:
            rows.append(Row(f"disk {d.label}", "ok", f"{d.path}: {_gib(d.free_bytes)} free"))
    return rows


def _environment_rows(environment: list) -> list[Row]:
    """One row per ``MESHLIFT_*`` variable set: what it does, or why it is flagged (deprecated: the config field
    that replaced it; removed: what replaced it; unknown: meshlift reads no such name, with the nearest one)."""
    import difflib

    if not environment:
        return [Row("environment", "ok", "no MESHLIFT_* variable set (docs/usage/environment.md lists them)")]
    rows = []
    for name, value, kind in environment:
        shown = value if len(value) <= 60 else value[:57] + "..."
        if kind == "known":
            rows.append(Row(f"env {name}", "ok", f"{shown}: {_env.VARIABLES[name].what}"))
        elif kind == "deprecated":
            rows.append(Row(f"env {name}", "warning", f"{shown}: deprecated, still applied",
                            f"unset it and use {_env.DEPRECATED[name]}"))
        elif kind == "removed":
            rows.append(Row(f"env {name}", "warning", f"{shown}: no longer read (ignored)",
                            f"unset it and use {_env.REMOVED[name]}"))
        else:
            near = difflib.get_close_matches(name, list(_env.VARIABLES) + list(_env.DEPRECATED), n=1, cutoff=0.6)
            hint = f"; did you mean {near[0]}?" if near else ""
            rows.append(Row(f"env {name}", "warning", f"{shown}: meshlift reads no such variable{hint}",
                            "unset it or correct the name (docs/usage/environment.md lists the variables; the rest "
                            "are config fields, --set name=value)"))
    return rows


def _python_rows(f: Facts) -> list[Row]:
    major, minor = (int(x) for x in f.python.split(" ")[0].split(".")[:2]) if f.python else (0, 0)
    ok = (major, minor) >= (3, 10)
    return [Row("python", "ok" if ok else "error", f.python, "" if ok else "meshlift needs Python 3.10 or newer"),
            Row("platform", "ok", f.platform)]


def diagnose(f: Facts) -> list[Row]:
    """The doctor table for ``f`` (pure: no imports, no I/O)."""
    gpu = f.torch.cuda_available and bool(f.torch.gpus)
    rows = _python_rows(f) + _torch_rows(f.torch)
    if f.torch.version is not None:
        rows += _triton_rows(f.triton, f.torch)
        rows += _backend_rows(f.backends)
    rows += _extra_rows(f.extras)
    rows += _extension_rows(f.extensions)
    rows.append(_alloc_row(f.alloc_conf, gpu))
    rows += _disk_rows(f.disks)
    rows += _environment_rows(f.environment)
    return rows


def can_run(rows: list[Row]) -> bool:
    """True when no row is an error (meshlift can run here)."""
    return not any(r.status == "error" for r in rows)


def to_json(f: Facts, rows: list[Row]) -> dict:
    """``{"can_run", "rows": [...], "facts": {...}}`` for ``meshlift doctor --json``."""

    def plain(x):
        if isinstance(x, tuple) and hasattr(x, "_asdict"):
            return {k: plain(v) for k, v in x._asdict().items()}
        if isinstance(x, dict):
            return {k: plain(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [plain(v) for v in x]
        return x

    facts = asdict(f)
    facts["triton"]["status"] = f.triton.status._asdict()
    facts["extras"] = {k: v._asdict() for k, v in f.extras.items()}
    facts["extensions"] = {k: v._asdict() for k, v in f.extensions.items()}
    return {"can_run": can_run(rows), "rows": [asdict(r) for r in rows], "facts": plain(facts)}


def run(output_dir: Optional[Path] = None, *, gather_fn: Callable[..., Facts] = gather) -> tuple[Facts, list[Row]]:
    """Gather and diagnose; returns ``(facts, rows)``."""
    f = gather_fn(output_dir)
    return f, diagnose(f)


__all__ = ["DiskFacts", "Facts", "GPU", "Row", "STATUSES", "TorchFacts", "TritonFacts", "can_run",
           "classify_import_error", "diagnose", "gather", "run", "to_json"]
