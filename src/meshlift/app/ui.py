"""The gradio page of ``meshlift app`` (imported only by :func:`meshlift.app.build_app`).

Flow: upload (checked and classified at once: :func:`meshlift.app.uploads.ingest`; photos without poses
are accepted when the pose step can run, :func:`meshlift.app.methods.unposed_verdict`) -> pick method (every
method of the registry) and preset -> Reconstruct (streams progress, preview images) -> two 3D viewers, the
mesh (GLB) and the Gaussians (their PLY, drawn as splats), each shown when the method wrote it (MILo: both) +
downloads (GLB, OBJ+MTL+textures zip, PLY, metrics.json) and the run's summary.
The GPU work is :func:`meshlift.app.jobs.reconstruct_job`; this module only moves plain values and paths to
and from it.
"""

from __future__ import annotations

from typing import Optional

import gradio as gr

from meshlift.app import jobs
from meshlift.app.methods import METHODS, describe_duration, get_method, unposed_verdict
from meshlift.app.uploads import ALLOWED_SUFFIXES, Limits, UploadError, delete_session, ingest, session_folder


def _has_gpu() -> bool:
    if jobs.on_zero_gpu():  # ZeroGPU: the GPU is attached inside the decorated job
        return True
    import torch

    return bool(torch.cuda.is_available())


def _preset_choices(method: str, gpu: bool) -> list[tuple[str, str]]:
    return [(f"{p.label} — {describe_duration(p, gpu)}", p.name) for p in get_method(method).presets]


def _fill_viewers(shown: Optional[dict]):
    """Updates of the mesh and the Gaussian viewer for a finished run's ``{"glb", "splat"}`` paths (both
    shown, empty, while there is no result)."""
    if not shown:
        return gr.update(value=None, visible=True), gr.update(value=None, visible=True)
    return tuple(gr.update(value=shown.get(k), visible=shown.get(k) is not None) for k in ("glb", "splat"))


def _session_id(request: Optional[gr.Request]) -> str:
    return getattr(request, "session_hash", None) or "anonymous"


def build(limits: Optional[Limits] = None) -> gr.Blocks:
    """The :class:`gradio.Blocks` app (not launched)."""
    limits = limits or Limits()
    gpu = _has_gpu()
    methods = list(METHODS)

    def on_upload(files, request: gr.Request):
        session = session_folder(limits, _session_id(request))
        try:
            got = ingest(files or [], session, limits)
        except UploadError as exc:
            return f"**Refused:** {exc}", None
        if got.kind == "unposed":
            accepted, text = unposed_verdict(got.summary, got.n_images)
            return text, ({"kind": got.kind, "path": got.path} if accepted else None)
        return f"**Ready:** {got.summary}.", {"kind": got.kind, "path": got.path}

    def on_method(method):
        return gr.update(choices=_preset_choices(method, gpu), value=get_method(method).presets[0].name)

    def on_run(state, method, preset, request: gr.Request, progress=gr.Progress()):
        nothing = (None, None, None, None)  # preview, viewer paths, downloads, metrics
        if not state:
            yield ("**Nothing to reconstruct:** upload photos with cameras, or a mesh, first.",) + nothing
            return
        spec = get_method(method)
        p = spec.preset(preset)
        if state["kind"] not in spec.inputs and not (state["kind"] == "unposed" and "posed" in spec.inputs):
            yield (f"**Refused:** method {method} does not take {state['kind']} input.",) + nothing
            return
        if p.gpu_only and not gpu:
            yield (f"**Refused:** the {p.name} preset needs a GPU (this server has none); pick quick.",) + nothing
            return
        out_dir = session_folder(limits, _session_id(request)) / "output"
        lines: list[str] = [f"Running {p.name} ({describe_duration(p, gpu)})."]
        preview = None
        status = ""
        for ev in jobs.reconstruct_job(state["path"], state["kind"], method, preset, str(out_dir)):
            kind = ev["type"]
            if kind == "log":
                lines.append(ev["message"])
            elif kind == "pass":
                lines.append(f"{ev['name']}: {ev['total']} steps")
                progress(0.0, desc=ev["name"])
            elif kind == "progress":
                status = (f"{ev['name']}: {ev['iteration']}/{ev['total']}"
                          + (f", loss {ev['loss']:.4f}" if ev["loss"] == ev["loss"] else "")
                          + (f", PSNR {ev['psnr']:.2f} dB" if ev["psnr"] == ev["psnr"] else "")
                          + f", ETA {ev['eta_s']:.0f} s")  # no loss / PSNR (nan): the pose step, MILo's refinement
                progress(ev["iteration"] / max(1, ev["total"]), desc=status)
            elif kind == "preview":
                preview = ev["path"]
            elif kind == "error":
                yield (f"**Failed:** {ev['message']}",) + (preview, None, None, None)
                return
            elif kind == "done":
                f, m = ev["files"], ev["metrics"]
                head = "\n\n".join([f"**Done** in {ev['seconds']:.0f} s."] + ev.get("summary", []))
                downloads = [f[k] for k in ("glb", "obj_zip", "ply", "splat", "metrics") if k in f]
                yield (head, preview or f.get("asset_image"), {"glb": f.get("glb"), "splat": f.get("splat")},
                       downloads, m)
                return
            if kind in ("log", "pass", "preview", "progress"):
                text = "\n\n".join(lines[-6:] + ([status] if status else []))
                yield (text, preview, None, None, None)

    def on_unload(request: gr.Request):
        delete_session(limits, _session_id(request))

    with gr.Blocks(title="meshlift", delete_cache=(600, limits.max_age_s)) as demo:
        gr.Markdown("# meshlift\nPhotos (with camera poses, or without: they are posed first) or a reference "
                    "mesh → a textured PBR mesh (GLB, OBJ+MTL, PLY) or 3D Gaussians (PLY). "
                    f"Running on **{'a GPU' if gpu else 'the CPU'}**. Limits: "
                    f"{limits.max_files} files, {limits.max_file_mb} MiB per file, {limits.max_total_mb} MiB "
                    "in total; your files are deleted when you close the page or after "
                    f"{limits.max_age_s // 60} min.")
        with gr.Row():
            with gr.Column():
                upload = gr.File(label="Photos (several files or one .zip, with transforms.json or a COLMAP "
                                 "sparse/ folder, or photos alone) or one mesh (.obj + .mtl + textures, .ply, .glb)",
                                 file_count="multiple", file_types=sorted(ALLOWED_SUFFIXES), elem_id="upload")
                upload_status = gr.Markdown(elem_id="upload-status")
                method = gr.Dropdown(choices=[(METHODS[m].label, m) for m in methods], value=methods[0],
                                     label="Method", elem_id="method")
                preset = gr.Radio(choices=_preset_choices(methods[0], gpu),
                                  value=METHODS[methods[0]].presets[0].name, label="Preset", elem_id="preset")
                run = gr.Button("Reconstruct", variant="primary", elem_id="run")
                run_status = gr.Markdown(elem_id="run-status")
            with gr.Column():
                preview = gr.Image(label="Preview (reference | ours)", type="filepath", interactive=False,
                                   height=240, elem_id="preview")
                viewer = gr.Model3D(label="Mesh (GLB)", elem_id="viewer", clear_color=(0.9, 0.9, 0.9, 1.0),
                                    height=400)
                splat_viewer = gr.Model3D(label="Gaussians (point_cloud.ply, drawn as splats)",
                                          elem_id="splat-viewer", clear_color=(0.9, 0.9, 0.9, 1.0), height=400)
                downloads = gr.File(label="Downloads: GLB, OBJ+MTL+textures (zip), PLY (mesh, Gaussians), "
                                    "metrics.json",
                                    file_count="multiple", interactive=False, elem_id="downloads")
                metrics = gr.JSON(label="metrics.json", elem_id="metrics")
        state = gr.State(None)
        upload.upload(on_upload, inputs=[upload], outputs=[upload_status, state])
        upload.clear(lambda: ("", None), outputs=[upload_status, state])
        method.change(on_method, inputs=[method], outputs=[preset])
        shown = gr.State(None)  # {"glb": path | None, "splat": path | None} of the finished run
        # The viewers are filled by a plain follow-up function: gradio's Model3D does not draw a model that
        # arrives from a generator (streamed) event (gradio 6.31). A viewer without a file is hidden.
        run.click(on_run, inputs=[state, method, preset], outputs=[run_status, preview, shown, downloads, metrics],
                  concurrency_limit=1).then(_fill_viewers, inputs=[shown], outputs=[viewer, splat_viewer])
        demo.unload(on_unload)
    return demo


__all__ = ["build"]
