"""Per-image exposure compensation for training on phone captures (training only).

A phone's automatic exposure and white balance change from photo to photo (the fox's 43 training photos: gains
0.86–1.18 per channel against their consensus, benchmarks/results/2026-12-06_session28_device.md). Without a model
of it the Gaussians explain the differences by view-dependent colour (the SH terms) and by geometry (floaters
near the cameras, surfaces off their depth), which the fused mesh inherits as blurred colours and noisy depth.

PGSR (Chen et al. 2024, Sec. 3.4, eq. 14: ``I^a = exp(a_i) I^r + b_i``) gives each training image an exposure
``a_i`` and an offset ``b_i``, learned with the Gaussians and applied to the render before the photometric loss;
test views are rendered without them. Here per colour channel: ``I' = exp(a_i) ⊙ I + b_i`` with ``a_i, b_i ∈ R^3``
(6 numbers a photo, initialised to the identity, Adam). It acts on the Gaussians' colour, not on the background
composited under it: ``I' = exp(a) ⊙ (I − (1 − α) bg) + α b + (1 − α) bg``. A gain and offset shared by every
photo would trade freely with the Gaussians' colours, which the uncompensated test renders show; so after each
step the parameters' mean over the photos is removed (the mean photo keeps its exposure). The compensated render
is what the loss sees (and the training PSNR in the history); every render the run exports or scores (test
views, previews, depth for fusion) is uncompensated.
"""

from __future__ import annotations

import torch

from meshlift.errors import ConfigError

__all__ = ["ExposureCompensation"]

#: The refusal of ``exposure_compensation`` in a multi-process run (the per-photo parameters are not shared
#: between ranks yet): raised by the reconstruction before the data loads, and by the trainer.
EXPOSURE_MULTI_GPU = ("exposure_compensation is not supported with several GPUs yet; run on one GPU or set "
                      "exposure_compensation=false")


class ExposureCompensation:
    """Learned per-training-image colour gain and offset (module docstring).

    Args:
        num_images: number of training images (the rows of :attr:`params`).
        lr: Adam learning rate of the 6 numbers a photo.
        device: where the parameters live.

    Raises:
        ConfigError: ``num_images < 1`` or a non-positive ``lr``.
    """

    def __init__(self, num_images: int, lr: float, device: torch.device) -> None:
        if int(num_images) < 1:
            raise ConfigError(f"exposure compensation needs at least one training image, got {num_images}")
        if not float(lr) > 0:
            raise ConfigError(f"config field 'lr_exposure' must be > 0, got {lr!r}")
        #: ``[N, 6]`` float32: log-gains (3) then offsets (3) of each training image.
        self.params = torch.nn.Parameter(torch.zeros(int(num_images), 6, device=device))
        self.optimizer = torch.optim.Adam([self.params], lr=float(lr), eps=1e-15)

    def apply(self, image: torch.Tensor, indices: torch.Tensor, alpha: torch.Tensor,
              background: torch.Tensor) -> torch.Tensor:
        """``image [B, H, W, 3]`` (renders of the training images ``indices [B]``, composited on ``background
        [3]`` with coverage ``alpha [B, H, W, 1]``) -> the compensated renders (module docstring), differentiable
        in the image, the coverage and the parameters."""
        p = self.params[indices.to(self.params.device).long()]
        gain, offset = torch.exp(p[:, None, None, :3]), p[:, None, None, 3:]
        under = (1 - alpha) * background.to(image).reshape(1, 1, 1, 3)
        return (image - under) * gain + alpha * offset + under

    def step(self, lr: float) -> None:
        """One Adam step at ``lr`` on the gradients :meth:`apply` left, drop them, and remove the parameters'
        mean over the photos (the shared part, which the Gaussians' colours carry)."""
        if self.params.grad is not None:
            self.optimizer.param_groups[0]["lr"] = float(lr)
            self.optimizer.step()
            with torch.no_grad():
                self.params.sub_(self.params.mean(0, keepdim=True))
        self.optimizer.zero_grad(set_to_none=True)

    def gains(self) -> torch.Tensor:
        """``[N, 3]`` the learned gains ``exp(a)`` (CPU)."""
        return torch.exp(self.params.detach()[:, :3]).cpu()

    def state_dict(self) -> dict:
        return {"params": self.params.detach().cpu().clone(), "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`.

        Raises:
            ConfigError: the state is for another number of training images (the split changed since).
        """
        if tuple(state["params"].shape) != tuple(self.params.shape):
            raise ConfigError(f"the checkpoint's exposure compensation is for {state['params'].shape[0]} training "
                              f"images, this run has {self.params.shape[0]} (the dataset or its split changed); "
                              "resume with the same data, or start a new run")
        with torch.no_grad():
            self.params.copy_(state["params"].to(self.params.device))
        self.optimizer.load_state_dict(state["optimizer"])
