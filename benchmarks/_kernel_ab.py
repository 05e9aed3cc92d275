"""Compositing-kernel variants timed side by side on one training render's exact inputs (issue 29).

``gaussians_loop_profile.py --kernel-ab FS:FC/BS:BC ... --ab-steps N ...`` calls :func:`kernel_ab` when the
window ending at step N closes: the last training render's inputs (the trainer's parameters at that moment,
its batch of cameras, background, settings) are rendered forward and backward once per variant — the Triton
compositing forward's ``_SPLIT_FWD:_CULL_FWD[:_BATCH:_WARPS]`` and backward's
``_SPLIT_BWD:_CULL_BWD[:_BATCH_BWD:_WARPS_BWD:_CULL_CHUNK]`` set for that variant (fields left out keep the
module's values; e.g. ``4:0/8:2:8:2`` = backward batches of 8 Gaussians on 2 warps) —
with a fixed random gradient on the image and alpha (every pixel carries one, as in training). Per variant:
the median of ``repeats`` CUDA-event timings of the whole render forward+backward after ``warmup`` calls (the
first variant's compiles are in its warm-up), the two compositing kernels' device time from one profiled call
(torch.profiler), and the largest difference of its image and gradients from the first variant's (the
variants must give the same result: the bands change only which program composites which pixels). The
module-level settings are restored afterwards. A variant ending in ``@box`` bins whole bounding boxes
(``SplatSettings.ellipse_tiles=False``, as gsplat), ``@ellipse`` the tiles each ellipse reaches (the default);
its row reports its own pair count. Not a test; on the CPU it runs the plumbing only (wall times of whatever
backend the trainer uses, no kernel split).
"""

from __future__ import annotations

import statistics

import torch

from _timing import sample_ms


#: The module settings of :mod:`meshlift.kernels.splat_triton` a variant's fields set, in order.
FWD_KNOBS = ("_SPLIT_FWD", "_CULL_FWD", "_BATCH", "_WARPS")
BWD_KNOBS = ("_SPLIT_BWD", "_CULL_BWD", "_BATCH_BWD", "_WARPS_BWD", "_CULL_CHUNK")


def parse_variants(specs, option: str = "--kernel-ab") -> list:
    """``["1:0/4:2", "4:0/8:2:8:2@box", ...]`` → ``[((1, 0), (4, 2), None), ((4, 0), (8, 2, 8, 2), False), ...]``:
    forward split:cull[:batch:warps] / backward split:cull[:batch:warps:chunk] (:data:`FWD_KNOBS`,
    :data:`BWD_KNOBS`), and the binning (``@box`` False, ``@ellipse`` True, none: the settings' own).
    Batches, warps and chunks must be powers of two (Triton block shapes). ``option`` names the command-line
    option in the error messages."""
    out = []
    for s in specs:
        s, at, tiles = s.partition("@")
        if at and tiles not in ("box", "ellipse"):
            raise SystemExit(f"{option} {s}@{tiles}: the binning suffix is @box or @ellipse")
        f, _, b = s.partition("/")
        try:
            fv = tuple(int(x) for x in f.split(":"))
            bv = tuple(int(x) for x in b.split(":"))
        except ValueError:
            fv = bv = ()
        if not (2 <= len(fv) <= len(FWD_KNOBS) and 2 <= len(bv) <= len(BWD_KNOBS)):
            raise SystemExit(f"{option} {s!r}: expected FSPLIT:FCULL[:BATCH:WARPS]/BSPLIT:BCULL[:BATCH:WARPS:CHUNK]"
                             "[@box|@ellipse], e.g. 1:0/4:2 or 4:0/8:2:8:2@box")
        if fv[0] < 1 or bv[0] < 1 or fv[1] < 0 or bv[1] < 0:
            raise SystemExit(f"{option} {s!r}: the band splits must be at least 1, the culling modes at least 0")
        if any(v < 1 or v & (v - 1) for v in fv[2:] + bv[2:]):
            raise SystemExit(f"{option} {s!r}: batches, warps and chunks must be powers of two")
        out.append((fv, bv, None if not tiles else tiles == "ellipse"))
    return out


def _with_tiles(args: tuple, kwargs: dict, ellipse) -> tuple:
    """``(args, kwargs)`` with their :class:`~meshlift.render.splat.SplatSettings` given ``ellipse_tiles=ellipse``
    (unchanged when ``ellipse`` is None)."""
    import dataclasses

    from meshlift.render.splat import SplatSettings

    if ellipse is None:
        return args, kwargs
    fix = lambda v: dataclasses.replace(v, ellipse_tiles=ellipse) if isinstance(v, SplatSettings) else v  # noqa: E731
    return tuple(fix(a) for a in args), {k: fix(v) for k, v in kwargs.items()}


def _set(kt, values: dict) -> None:
    """Set the module settings ``values`` (name → value) of :mod:`meshlift.kernels.splat_triton`."""
    for k, v in values.items():
        setattr(kt, k, v)


def _label(vals: tuple) -> str:
    return ":".join(str(v) for v in vals)


def _composite_ms(prof) -> dict:
    from torch.autograd import DeviceType

    per = {"composite_fwd": 0.0, "composite_bwd": 0.0}
    for e in prof.events():
        if e.device_type != DeviceType.CUDA:
            continue
        for k in per:
            if e.name.startswith(k):
                per[k] += e.time_range.elapsed_us() / 1e3
    return per


def kernel_ab(render, args: tuple, kwargs: dict, variants: list, warmup: int = 3, repeats: int = 20) -> dict:
    """Time ``variants`` (:func:`parse_variants`) on one call of ``render(*args, **kwargs)``.

    ``render`` is :func:`meshlift.methods.gaussians.trainer.render_params` (unpatched); ``args[0]`` its
    parameter dict, cloned here as leaves so the trainer's tensors and gradients are untouched.

    Returns ``{"rows": [{"fwd", "bwd", "ms_median", "ms_min", "composite_fwd_ms", "composite_bwd_ms",
    "max_image_diff", "max_grad_rel_diff"}, ...], "isects", "gaussians"}``.
    """
    from torch.profiler import ProfilerActivity, profile

    from meshlift.kernels import splat_triton as kt

    saved = {k: getattr(kt, k) for k in FWD_KNOBS + BWD_KNOBS}
    params = {k: v.detach().clone().requires_grad_(True) for k, v in args[0].items()}
    cuda = params["means"].is_cuda
    gen = torch.Generator(device=params["means"].device).manual_seed(0)
    grads_out = None

    call = (args[1:], kwargs)  # the current variant's arguments after the parameters

    def once():
        for p in params.values():
            p.grad = None
        img, alpha, info = render(params, *call[0], **call[1])
        nonlocal grads_out
        if grads_out is None:
            grads_out = (torch.rand(img.shape, generator=gen, device=img.device, dtype=img.dtype) - 0.5,
                         torch.rand(alpha.shape, generator=gen, device=img.device, dtype=img.dtype) - 0.5)
        torch.autograd.backward([img, alpha], list(grads_out))
        return img, info

    rows, ref = [], None
    isects = None
    try:
        for fv, bv, tiles in variants:
            # fields a variant leaves out keep the module's values
            _set(kt, {**saved, **dict(zip(FWD_KNOBS, fv)), **dict(zip(BWD_KNOBS, bv))})
            call = _with_tiles(args[1:], kwargs, tiles)
            ts = sample_ms(once, params["means"].device, warmup, repeats)  # the CPU: a smoke run, not a benchmark
            if cuda:
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    img, info = once()
                    torch.cuda.synchronize()
                comp = _composite_ms(prof)
            else:
                img, info = once()
                comp = {"composite_fwd": float("nan"), "composite_bwd": float("nan")}
            grads = {k: p.grad.detach().clone() for k, p in params.items() if p.grad is not None}
            pairs = None
            if isinstance(info, dict):  # lists sized by a capacity carry the used count
                pairs = int(info["n_isect"]) if "n_isect" in info else int(info["flatten_ids"].shape[0])
            isects = pairs if isects is None else isects
            if ref is None:
                ref = (img.detach().clone(), grads)
                dimg, dgrad = 0.0, 0.0
            else:
                dimg = float((img.detach() - ref[0]).abs().max())
                dgrad = max(float((g - ref[1][k]).abs().max() / ref[1][k].abs().max().clamp_min(1e-30))
                            for k, g in grads.items())
            suffix = "" if tiles is None else ("@ellipse" if tiles else "@box")
            rows.append({"fwd": _label(fv), "bwd": _label(bv) + suffix, "pairs": pairs, "ms_median": statistics.median(ts),
                         "ms_min": min(ts), "composite_fwd_ms": comp["composite_fwd"],
                         "composite_bwd_ms": comp["composite_bwd"], "max_image_diff": dimg,
                         "max_grad_rel_diff": dgrad})
    finally:
        _set(kt, saved)
    return {"rows": rows, "isects": isects, "gaussians": int(params["means"].shape[0])}


def format_ab(step: int, res: dict) -> str:
    lines = [f"kernel A/B at step {step}: {res['gaussians']:,} Gaussians, {res['isects']} pairs (render forward+"
             f"backward, median of the CUDA-event times; composite kernels from one profiled call)"]
    for r in res["rows"]:
        lines.append(f"  fwd {r['fwd']} bwd {r['bwd']} ({r.get('pairs')} pairs): {r['ms_median']:.3f} ms "
                     f"(min {r['ms_min']:.3f}); "
                     f"composite_fwd {r['composite_fwd_ms']:.3f} ms, composite_bwd {r['composite_bwd_ms']:.3f} ms; "
                     f"max |image diff| {r['max_image_diff']:.2e}, max grad rel diff {r['max_grad_rel_diff']:.2e}")
    return "\n".join(lines)
