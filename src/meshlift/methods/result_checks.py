"""Results far worse than their own diagnostics: the checks every method's evaluation runs (issue 31, class 4).

A run ends with numbers that say how well it did; some of them can be checked against another number of the
same run, and a large disagreement means the result is wrong even though nothing failed:

- **test far below training** (:func:`below_training`): the test views render more than
  :data:`TEST_BELOW_TRAIN_DB` below the training views at the end of training (:func:`training_psnr`, the
  photometric PSNR the progress bar shows). The test cameras are then not in the training views' frame
  (wrong poses, a camera convention), or the training views do not cover them;
- **mesh far below its Gaussians** (:func:`mesh_below_gaussians`, MILo): the mesh renders more than
  :data:`MESH_BELOW_GAUSSIANS_DB` below the Gaussians it was extracted from, at the same views: the surface
  was not recovered;
- **blank views** (:func:`blank_views`, the rule of :mod:`meshlift.renderers.blank`): a test render that is
  background everywhere where the reference image is not; the asset is outside that camera's view and its
  score measures the background.

Each check returns its warning (a sentence that names the numbers and what to look at) or nothing; the
method appends it to ``metrics["warnings"]`` (:func:`add_warnings`; written to ``metrics.json``) and its
summary prints :func:`warning_lines`. ``meshlift reconstruct --strict`` turns any warning into a failure
(:attr:`meshlift.methods.spec.Method.warnings`). Nothing here changes a metric.
"""

from __future__ import annotations

import math
from typing import Iterable, Optional, Sequence

__all__ = ["MESH_BELOW_GAUSSIANS_DB", "TEST_BELOW_TRAIN_DB", "TRAINING_WINDOW", "add_warnings", "blank_views",
           "blank_views_warning", "check_test_views", "mesh_below_gaussians", "metrics_warnings",
           "below_training", "training_psnr", "warning_lines"]

#: A mesh render this far (dB) below the Gaussians' at the same views is reported (MILo).
MESH_BELOW_GAUSSIANS_DB = 3.0
#: A test PSNR this far (dB) below the training PSNR at the end of training is reported. Overfitting to the
#: training views costs a few dB (3DGS on real scenes: 3-6 dB); ten is a result that does not hold at all.
TEST_BELOW_TRAIN_DB = 10.0
#: The training PSNR is the median over the last this-many read-backs of the last photometric pass (the
#: per-batch PSNR is noisy: one batch is one to a few views).
TRAINING_WINDOW = 20


def _finite(x) -> bool:
    return x is not None and isinstance(x, (int, float)) and math.isfinite(float(x))


def training_psnr(history: Iterable[dict]) -> Optional[float]:
    """The PSNR (dB) of the training views at the end of training: the median of the finite ``psnr`` of the
    last :data:`TRAINING_WINDOW` entries of the last pass that has any (a history row is ``{"pass",
    "iteration", "loss", "psnr"}``, :class:`meshlift.methods.loop.TrainLoop`; a pass without a photometric
    loss, MILo's occupancy refinement, logs ``nan``). None without such entries."""
    rows = [h for h in history if isinstance(h, dict) and _finite(h.get("psnr"))]
    if not rows:
        return None
    last = max(int(h.get("pass", 1)) for h in rows)
    vals = sorted(float(h["psnr"]) for h in [h for h in rows if int(h.get("pass", 1)) == last][-TRAINING_WINDOW:])
    n = len(vals)
    return vals[n // 2] if n % 2 else 0.5 * (vals[n // 2 - 1] + vals[n // 2])


def below_training(test_psnr, train_psnr, *, subject: str, hint: str) -> Optional[str]:
    """The warning when ``test_psnr`` is more than :data:`TEST_BELOW_TRAIN_DB` below ``train_psnr`` (dB;
    None or non-finite: no check). ``subject`` names what rendered (``the Gaussians``), ``hint`` what to do."""
    if not (_finite(test_psnr) and _finite(train_psnr)):
        return None
    gap = float(train_psnr) - float(test_psnr)
    if gap <= TEST_BELOW_TRAIN_DB:
        return None
    return (f"the test PSNR of {subject} is {gap:.1f} dB below the training PSNR ({float(test_psnr):.2f} vs "
            f"{float(train_psnr):.2f} dB at the end of training): the result does not hold away from the training "
            f"images; {hint}")


def mesh_below_gaussians(mesh_psnr, gaussian_psnr, *, hint: str, gaussian_psnr_sh0=None,
                         mesh_psnr_diffuse=None) -> Optional[str]:
    """The warning when the mesh renders more than :data:`MESH_BELOW_GAUSSIANS_DB` below its Gaussians at the
    same test views (dB; None: no check). With ``gaussian_psnr_sh0`` (the same Gaussians at SH degree 0) below
    ``gaussian_psnr``, the message says how much of the gap is their view-dependent colour, which a diffuse
    mesh cannot show, and compares the mesh with the view-independent render too; with ``mesh_psnr_diffuse`` (the
    mesh has view-dependent colours and this is its view-independent part alone) it compares the two
    view-independent renders instead."""
    if mesh_psnr is None or gaussian_psnr is None:
        return None
    gap = float(gaussian_psnr) - float(mesh_psnr)
    if not gap > MESH_BELOW_GAUSSIANS_DB:
        return None
    why = "the surface was not recovered well"
    if _finite(mesh_psnr_diffuse):
        why = ("both render view-dependent colours; their view-independent parts alone score "
               f"{float(mesh_psnr_diffuse):.2f}" + (f" (mesh) and {float(gaussian_psnr_sh0):.2f} dB (Gaussians, SH "
                                                    "degree 0)" if _finite(gaussian_psnr_sh0) else " dB (mesh)"))
    elif _finite(gaussian_psnr_sh0) and float(gaussian_psnr_sh0) < float(gaussian_psnr) - 0.1:
        sh0 = float(gaussian_psnr_sh0)
        why = (f"{float(gaussian_psnr) - sh0:.1f} dB of it is the Gaussians' view-dependent colour, which one colour "
               f"per surface point cannot show (at SH degree 0 they score {sh0:.2f} dB, "
               + (f"the mesh {sh0 - float(mesh_psnr):.1f} dB below that)" if sh0 > float(mesh_psnr)
                  else "no more than the mesh)"))
    return (f"the mesh renders {gap:.1f} dB below the Gaussians at the test views ({float(mesh_psnr):.2f} vs "
            f"{float(gaussian_psnr):.2f} dB): {why}; {hint}")


def blank_views(renders: Sequence, targets: Sequence, background: float, names: Sequence[str]) -> list[str]:
    """The names of the views whose render (``[H, W, C]`` in [0, 1], sRGB) is background only (the grey
    level ``background``) where its target is not (:func:`meshlift.renderers.blank.is_blank`,
    :func:`~meshlift.renderers.blank.has_content`)."""
    from meshlift.renderers.blank import has_content, is_blank

    return [str(n) for r, t, n in zip(renders, targets, names) if is_blank(r, background) and has_content(t, background)]


def blank_views_warning(blank: Sequence[str], total: int, *, subject: str, hint: str) -> Optional[str]:
    """The warning for ``blank`` (:func:`blank_views`) of ``total`` test views; None when there are none."""
    if not blank:
        return None
    shown = ", ".join(blank[:6]) + (f", ... ({len(blank)} in all)" if len(blank) > 6 else "")
    return (f"{len(blank)} of {total} test views show only background where their images do not ({shown}): "
            f"these cameras do not see {subject}, so their scores measure the background; {hint}")


def check_test_views(metrics: dict, *, renders, targets, background: float, names: Sequence[str], history,
                     test_psnr, subject: str, blank_key: str = "blank_views", blank_hint: str,
                     gap_hint: str) -> None:
    """The two checks of a method's test renders, into ``metrics``: ``metrics[blank_key]`` (the blank views'
    names), ``metrics["train_psnr"]`` (:func:`training_psnr` of ``history``, when not set yet) and their
    warnings (:func:`add_warnings`). ``subject`` names what rendered (``the mesh``, ``the Gaussians``)."""
    blank = blank_views(renders, targets, background, names)
    metrics[blank_key] = blank
    if "train_psnr" not in metrics:
        metrics["train_psnr"] = training_psnr(history)
    add_warnings(metrics, [blank_views_warning(blank, len(names), subject=subject, hint=blank_hint),
                           below_training(test_psnr, metrics["train_psnr"], subject=subject, hint=gap_hint)])


def budget_cut(steps_done: int, steps_configured: int, time_budget_s: float) -> Optional[str]:
    """The warning for a training the time budget stopped before its schedule's end (None otherwise): its results
    come from an under-trained model (a fresh-user run on a busy CPU: 64 of 400 steps, a mesh at 8.3 dB, and
    nothing said so)."""
    if time_budget_s <= 0 or steps_done >= steps_configured:
        return None
    return (f"training stopped at {steps_done} of {steps_configured} steps (time_budget_s={time_budget_s:g}): the "
            "results come from an under-trained model; raise --set time_budget_s (0 = none), or run when the "
            "machine is free (MESHLIFT_NUM_THREADS sets the CPU threads)")


def add_warnings(metrics: dict, warnings: Iterable[Optional[str]]) -> list[str]:
    """Append the warnings that are not None (and not there yet) to ``metrics["warnings"]`` (created)."""
    out = metrics.setdefault("warnings", [])
    for w in warnings:
        if w and w not in out:
            out.append(w)
    return out


def metrics_warnings(result) -> list[str]:
    """The warnings of a run's result (``result.metrics["warnings"]``; none when it has no metrics)."""
    m = getattr(result, "metrics", None) or {}
    return [str(w) for w in (m.get("warnings") or [])]


def warning_lines(metrics: dict) -> list[str]:
    """A summary's lines (rich markup) for ``metrics["warnings"]``."""
    return [f"[bold red]warning[/bold red] {w}" for w in (metrics.get("warnings") or [])]
