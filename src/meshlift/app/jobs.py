"""The GPU work of the web app: one module-level function per user action (ZeroGPU-ready).

On Hugging Face ZeroGPU hosting the GPU exists only inside functions decorated with ``spaces.GPU``, which
run in a forked process; what crosses that boundary is pickled. So :func:`reconstruct_job`:

- is a module-level generator decorated with ``spaces.GPU(duration=...)`` when the ``spaces`` package is
  importable (:func:`gpu_task`; a no-op elsewhere), the duration being the preset's promised GPU time;
- takes and yields only plain values (str, int, float, dict/list of those) and file paths inside the
  session folder: never tensors or meshlift objects;
- calls ``torch.cuda.empty_cache()`` when it ends (also on errors).

``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`` is set (unless already set) when this module is
imported, which :mod:`meshlift.app` does before anything imports torch.
"""

from __future__ import annotations

import os

os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")

import queue  # noqa: E402
import shutil  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
import zipfile  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Callable, Iterator  # noqa: E402

from meshlift.app.methods import POSE_STEP, get_method  # noqa: E402


def _spaces():
    try:
        import spaces  # noqa: PLC0415
    except Exception:  # noqa: BLE001 - absent or broken outside Hugging Face: plain functions
        return None
    return spaces if hasattr(spaces, "GPU") else None


def on_zero_gpu() -> bool:
    """True on Hugging Face ZeroGPU hosting (``SPACES_ZERO_GPU`` set by the host)."""
    return os.environ.get("SPACES_ZERO_GPU", "").lower() in ("1", "t", "true")


def gpu_task(duration: Callable[..., float] | float) -> Callable:
    """``spaces.GPU(duration=duration)`` when ``spaces`` is importable, else the identity decorator.

    ``duration`` may be a function of the decorated function's arguments (ZeroGPU's dynamic duration).
    """
    spaces = _spaces()

    def deco(fn):
        if spaces is None:
            return fn
        return spaces.GPU(duration=duration)(fn)

    return deco


def _duration(input_path: str, input_kind: str, method: str, preset: str, out_dir: str) -> float:
    """Seconds of GPU time to ask for: the preset's promise."""
    return float(get_method(method).preset(preset).gpu_s)


def _zip_folder(folder: Path, archive: Path) -> Path:
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for p in sorted(folder.rglob("*")):
            if p.is_file():
                zf.write(p, arcname=str(Path(folder.name) / p.relative_to(folder)))
    return archive


class _QueueMonitor:
    """A Monitor (duck-typed: start_pass/update/end_pass/log) that turns events into plain dicts."""

    def __init__(self, q: "queue.Queue[dict]") -> None:
        self.q, self.name, self.total, self.start, self.t0 = q, "", 0, 0, time.perf_counter()
        self.last = 0.0

    def start_pass(self, name: str, total: int, start: int = 0) -> None:
        self.name, self.total, self.start, self.t0 = name, total, start, time.perf_counter()
        self.q.put({"type": "pass", "name": name, "total": int(total), "start": int(start)})

    def update(self, iteration: int, loss: float, psnr: float) -> None:
        now = time.perf_counter()
        if now - self.last < 0.25 and iteration != self.total:  # at most 4 progress events a second
            return
        self.last = now
        done = max(1, iteration - self.start)
        eta = (now - self.t0) / done * (self.total - iteration)
        self.q.put({"type": "progress", "name": self.name, "iteration": int(iteration), "total": int(self.total),
                    "loss": float(loss), "psnr": float(psnr), "eta_s": float(eta)})

    def end_pass(self) -> None:
        self.q.put({"type": "end_pass", "name": self.name})

    def log(self, message: str) -> None:
        self.q.put({"type": "log", "message": str(message)})


def _obj_zip(out: Path) -> Path | None:
    """A zip of the run's OBJ + MTL + textures: the ``mesh/`` folder (surface method), or ``mesh.obj`` with
    its ``mesh.mtl`` and the textures that names (MILo); None when there is no OBJ."""
    if (out / "mesh").is_dir():
        return _zip_folder(out / "mesh", out / "mesh_obj.zip")
    obj = out / "mesh.obj"
    if not obj.is_file():
        return None
    members = [obj]
    mtl = out / "mesh.mtl"
    if mtl.is_file():
        members.append(mtl)
        for line in mtl.read_text(encoding="utf-8", errors="replace").splitlines():
            parts = line.split()
            if parts and parts[0].startswith("map_") and (out / parts[-1]).is_file():
                members.append(out / parts[-1])
    archive = out / "mesh_obj.zip"
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for p in dict.fromkeys(members):
            zf.write(p, arcname=str(Path("mesh") / p.name))
    return archive


def _collect_outputs(out: Path, result) -> dict:
    """The files the page offers, ``{role: path}`` (strings): ``glb`` (the mesh viewer shows it), ``obj_zip``
    (written here), ``ply`` (the mesh; written here from ``result.mesh`` when the run wrote none), ``splat``
    (the Gaussians' ``point_cloud.ply``: the Gaussian viewer shows it, gradio's Model3D draws a ``.ply`` as
    Gaussian splats), ``metrics``, ``asset_image``; a role is absent when the run wrote no such file (the
    surface method has no Gaussians, the Gaussian method no mesh, MILo both)."""
    from meshlift.io.ply import save_ply

    files = {}
    glb = out / "mesh.glb"
    if glb.is_file():
        files["glb"] = str(glb)
    archive = _obj_zip(out)
    if archive is not None:
        files["obj_zip"] = str(archive)
    if (out / "mesh.ply").is_file():
        files["ply"] = str(out / "mesh.ply")
    elif getattr(result, "mesh", None) is not None:
        files["ply"] = str(save_ply(out / "mesh.ply", result.mesh))
    if (out / "point_cloud.ply").is_file():
        files["splat"] = str(out / "point_cloud.ply")
    if (out / "metrics.json").is_file():
        files["metrics"] = str(out / "metrics.json")
    if (out / "images" / "asset.png").is_file():
        files["asset_image"] = str(out / "images" / "asset.png")
    return files


def _summary(spec, result, out: Path, wall_s: float) -> list[str]:
    """The run's summary as the CLI prints it (the method's ``summary_lines``), plain text, without the
    lines that name server paths."""
    if spec.summary is None:
        return []
    from rich.text import Text

    lines = [Text.from_markup(line).plain for line in spec.summary(result, wall_s)]
    return [line for line in lines if str(out) not in line]


@gpu_task(_duration)
def reconstruct_job(input_path: str, input_kind: str, method: str, preset: str, out_dir: str) -> Iterator[dict]:
    """Reconstruct an asset from an ingested upload; yields progress events as plain dicts.

    Args:
        input_path: the mesh file or dataset folder (:class:`meshlift.app.uploads.Ingested` ``.path``).
        input_kind: ``"mesh"``, ``"posed"``, or ``"unposed"`` when a pose step is registered
            (:data:`meshlift.app.methods.POSE_STEP`, ``meshlift poses`` by default; it runs first, inside this
            GPU task, its output kept in ``out_dir/poses``).
        method: a key of :data:`meshlift.app.methods.METHODS` (a name of :mod:`meshlift.methods.registry`).
        preset: one of that method's preset names.
        out_dir: folder for the outputs (replaced), inside the session folder.

    Yields:
        ``{"type": "log", "message"}``, ``{"type": "pass", "name", "total", "start"}``,
        ``{"type": "progress", "name", "iteration", "total", "loss", "psnr", "eta_s"}``,
        ``{"type": "preview", "path"}`` (a new preview PNG), then exactly one of
        ``{"type": "done", "files": {...}, "metrics": {...}, "summary": [lines], "seconds"}`` or
        ``{"type": "error", "message"}``.
    """
    import json

    import torch

    t0 = time.perf_counter()
    out = Path(out_dir)
    if out.exists():
        shutil.rmtree(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    spec = get_method(method)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    events: "queue.Queue[dict]" = queue.Queue()
    box: dict = {}

    def work() -> None:
        try:
            kind, path = input_kind, input_path
            monitor = _QueueMonitor(events)
            if kind == "unposed" and POSE_STEP:
                name, pose = next(iter(POSE_STEP.items()))
                events.put({"type": "log", "message": f"estimating camera poses ({name})"})
                path, kind = pose.run(path, str(out / "poses"), monitor), "posed"
            cfg = spec.configure(kind, path, preset, device)
            box["result"] = spec.run(cfg, out, monitor)
        except BaseException as exc:  # noqa: BLE001 - reported to the page, the server keeps running
            from meshlift.errors import MeshliftError

            box["error"] = str(exc) if isinstance(exc, MeshliftError) else f"{type(exc).__name__}: {exc}"
            if not isinstance(exc, MeshliftError):
                box["traceback"] = traceback.format_exc()

    yield {"type": "log", "message": f"{spec.label}, preset {preset}, on {device}"}
    thread = threading.Thread(target=work, name="meshlift-app-job", daemon=True)
    thread.start()
    seen: set[str] = set()
    try:
        while thread.is_alive() or not events.empty():
            try:
                yield events.get(timeout=0.5)
            except queue.Empty:
                pass
            images = out / "images"
            if images.is_dir():
                for p in sorted(images.glob("preview_*.png")) + sorted(images.glob("end_*.png")):
                    if p.name not in seen:
                        seen.add(p.name)
                        yield {"type": "preview", "path": str(p)}
        thread.join()
        if "error" in box:
            if "traceback" in box:
                print(box["traceback"], flush=True)
            yield {"type": "error", "message": box["error"]}
            return
        files = _collect_outputs(out, box["result"])
        metrics = json.loads(Path(files["metrics"]).read_text()) if "metrics" in files else {}
        seconds = time.perf_counter() - t0
        yield {"type": "done", "files": files, "metrics": metrics, "seconds": seconds,
               "summary": _summary(spec, box["result"], out, seconds)}
    finally:
        box.pop("result", None)
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


__all__ = ["gpu_task", "reconstruct_job"]
