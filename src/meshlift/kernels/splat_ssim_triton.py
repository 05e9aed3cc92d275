"""Fused training SSIM of Gaussian splatting in Triton: four launches for forward + backward instead of
the ~90 small ops of the PyTorch form. Twin: :func:`meshlift.methods.gaussians.losses.ssim_same`
(identical definition; tests compare values and gradients under ``TRITON_INTERPRET=1``).

Definition (Wang et al. 2004, eq. 13, as the 3DGS training code and ``fused-ssim``): 11×11 Gaussian window
(σ = 1.5) applied separably with zero padding ("same" size), ``C1 = 0.01²``, ``C2 = 0.03²``, mean of the
map over batch, pixels and channels. Forward: a horizontal pass writes the five blurred statistics
(x, y, x², y², xy), a vertical pass the map and, when ``pred`` needs a gradient, the map's partial
derivatives ``∂S/∂μx``, ``∂S/∂E[x²]``, ``∂S/∂E[xy]``. Backward: ``∂L/∂x = g/n · B(∂S/∂μx) + 2x · B(∂S/∂E[x²])
+ y · B(∂S/∂E[xy])`` where ``B`` is the same blur (its own adjoint: symmetric window, zero padding), two
passes again. No gradient reaches ``target``. ``triton`` is imported lazily (inside :func:`_k`).
"""

from __future__ import annotations

import functools

import torch

from meshlift.errors import DependencyError, RenderError

__all__ = ["ssim_mean"]

_BLOCK = 512
_C1 = 0.01**2
_C2 = 0.03**2


@functools.lru_cache(maxsize=1)
def _k():
    try:
        from meshlift.kernels import _splat_ssim_jit
    except ImportError as e:  # pragma: no cover - callers probe splat_triton.is_available first
        raise DependencyError("the fused SSIM needs the 'triton' package: pip install triton") from e
    return _splat_ssim_jit


_WINDOWS: dict = {}


def _window(window: int, sigma: float, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Normalised 1-D Gaussian ``[window]`` (as :func:`meshlift.metrics.image.gaussian_window`), kept on
    the device (a fresh host tensor per call would be a pageable copy: a host wait)."""
    key = (window, float(sigma), dtype, str(device))
    if key not in _WINDOWS:
        t = torch.arange(window, dtype=torch.float64) - (window - 1) / 2.0
        w = torch.exp(-(t**2) / (2.0 * sigma**2))
        _WINDOWS[key] = (w / w.sum()).to(device, dtype)
    return _WINDOWS[key]


def _grid(n: int):
    return (max(1, (n + _BLOCK - 1) // _BLOCK),)


class _SSIMFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, pred, target, window, sigma):
        B, H, W, C = pred.shape
        x = pred.contiguous()
        y = target.to(pred.dtype).contiguous()
        E = x.numel()
        g = _window(window, sigma, x.dtype, x.device)
        k = _k()
        hs = torch.empty(5, E, device=x.device, dtype=x.dtype)
        smap = torch.empty(E, device=x.device, dtype=x.dtype)
        grad = ctx.needs_input_grad[0]
        dm = torch.empty(3, E, device=x.device, dtype=x.dtype) if grad else smap
        k.ssim_hstats[_grid(E)](x, y, g, hs, E, C, W, H, WIN=window, BLOCK=_BLOCK)
        k.ssim_vmap[_grid(E)](hs, g, smap, dm, E, C, W, H, _C1, _C2, WIN=window, GRAD=grad, BLOCK=_BLOCK)
        if grad:
            ctx.save_for_backward(x, y, g, dm)
        ctx.cfg = (B, H, W, C, window)
        return smap.mean()

    @staticmethod
    def backward(ctx, gout):
        x, y, g, dm = ctx.saved_tensors
        B, H, W, C, window = ctx.cfg
        E = x.numel()
        k = _k()
        hd = torch.empty(3, E, device=x.device, dtype=x.dtype)
        dx = torch.empty_like(x)
        k.ssim_hblur3[_grid(E)](dm, g, hd, E, C, W, H, WIN=window, BLOCK=_BLOCK)
        k.ssim_vgrad[_grid(E)](hd, x, y, g, gout.to(x.dtype).contiguous(), dx, E, C, W, H, 1.0 / E, WIN=window,
                               BLOCK=_BLOCK)
        return dx, None, None, None


def ssim_mean(pred: torch.Tensor, target: torch.Tensor, window: int = 11, sigma: float = 1.5) -> torch.Tensor:
    """Mean SSIM ``[]`` of ``pred`` vs ``target`` ``[B, H, W, C]`` (float, [0, 1], channels last), 'same'
    zero padding; differentiable in ``pred`` only (the training loss: ``target`` is data).

    Raises:
        RenderError: shapes differ, not 4-D, or an even / non-positive ``window``.
    """
    if pred.ndim != 4 or pred.shape != target.shape:
        raise RenderError(f"ssim_mean: pred and target must both be [B, H, W, C], got {list(pred.shape)} and "
                          f"{list(target.shape)}")
    if window < 1 or window % 2 == 0:
        raise RenderError(f"ssim_mean: window must be an odd positive size, got {window}")
    return _SSIMFn.apply(pred, target.detach(), int(window), float(sigma))
