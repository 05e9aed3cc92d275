"""A ``gaussians`` trainer on the CPU that takes the code paths a CUDA run takes (for the Triton interpreter).

Shared by ``gaussians_step_counts.py`` (launch and sync counts) and ``trace_gaussians_variants.py`` (the kernel
variants of the start-up warm-up): the preset's config on the CPU at a small size, the Triton splat backend, the
fused SSIM in the loss, and (``fused=True``) the one-launch Adam and the fused density statistics.
"""

from __future__ import annotations

import dataclasses


def cpu_trainer_with_cuda_choices(data: str, *, train_res: int, num_random: int, fused: bool = True, **changes):
    """``GaussianTrainer`` of the ``gaussians`` preset on ``data``, on the CPU, with the CUDA choices.

    Args:
        data: dataset folder.
        train_res, num_random: image size and random initial points (small: the interpreter is slow).
        fused: the one-launch Adam and the fused density statistics (``False``: torch's, the code before).
        **changes: more config fields (``steps``, the densification schedule, ...).

    Patches ``meshlift.methods.gaussians.losses.photometric_loss`` to always take the fused SSIM (what CUDA
    chooses); the patch lasts for the process (these scripts run once).
    """
    import torch

    import meshlift.methods.gaussians.losses as L
    from meshlift.methods.gaussians.config import apply_dict
    from meshlift.methods.gaussians.reconstruct import build_config, load_problem
    from meshlift.methods.gaussians.trainer import GaussianTrainer

    cfg = build_config(data, "gaussians", False, None, [])
    cfg = apply_dict(dataclasses.replace(cfg, device="cpu", train_res=train_res, preview_every=0, checkpoint_every=0,
                                         checkpoint_every_s=0.0, lpips=False, splat_backend="triton",
                                         num_random=num_random, **changes), {})
    loss = L.photometric_loss
    L.photometric_loss = lambda pred, target, ssim_lambda=0.2, fused=None: loss(pred, target, ssim_lambda, fused=True)
    trainer = GaussianTrainer(cfg, load_problem(cfg), torch.device("cpu"))
    trainer.multi_adam = fused
    trainer.strategy.fused_stats = fused
    return trainer
