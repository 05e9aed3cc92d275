"""A volumetric neural material field: position -> (kd, ks, tangent-space normal perturbation).

nvdiffrec's ``MLPTexture3D`` (render/mlptexture.py; Munkberg et al. 2022, Sec. 4 "volumetric texture"):
positions are normalised into the field's axis-aligned box (clamped to [0, 1]^3), encoded with a
multiresolution hash grid (:class:`meshlift.shading.encoding.HashGridEncoding`, 16 levels, 2 features, T =
2^19, resolutions 16 -> 4096), decoded by a small ReLU MLP (32 neurons, 2 hidden layers) into 9 channels,
squashed with a sigmoid and scaled into per-channel ``[min, max]`` ranges:

- ``kd``     channels 0-2: linear albedo in ``[kd_min, kd_max]``;
- ``ks``     channels 3-5: (occlusion, roughness, metallic) in ``[ks_min, ks_max]`` (docs/conventions.md §7);
- ``normal`` channels 6-8: tangent-space perturbation in ``[nrm_min, nrm_max]`` (nvdiffrec: x, y in [-1, 1],
  z in [0, 1]); not normalised (``prepare_shading_normal`` normalises), a fresh field gives ~(0, 0, 0.5),
  i.e. the unperturbed normal.

The default ranges are the identity [0, 1] for kd and ks (callers that map ranges themselves keep
working); nvdiffrec's training ranges are available as :data:`NVDIFFREC_KS_RANGE` (roughness >= 0.08,
occlusion fixed at 0).
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

from meshlift.errors import ConfigError, RenderError
from meshlift.kernels import choose_backend
from meshlift.shading.encoding import MLP, HashGridEncoding

__all__ = ["MaterialField", "NVDIFFREC_KS_RANGE", "NVDIFFREC_NRM_RANGE"]

#: nvdiffrec's (ks_min, ks_max): occlusion 0, roughness in [0.08, 1], metallic in [0, 1].
NVDIFFREC_KS_RANGE = ((0.0, 0.08, 0.0), (0.0, 1.0, 1.0))
#: nvdiffrec's (nrm_min, nrm_max) for the tangent-space perturbation.
NVDIFFREC_NRM_RANGE = ((-1.0, -1.0, 0.0), (1.0, 1.0, 1.0))


def _range(values: Sequence[float], name: str) -> torch.Tensor:
    t = torch.as_tensor(values, dtype=torch.float32).reshape(-1)
    if t.numel() != 3:
        raise ConfigError(f"MaterialField({name}): expected 3 values, got {list(values)!r}")
    return t


class MaterialField(nn.Module):
    """Hash-grid + MLP material field ``x [N, 3] -> dict(kd, ks, normal)``, each ``[N, 3]``.

    Args:
        aabb: ``[2, 3]`` (min corner, max corner) of the box the field covers (world or normalised units);
            points outside are clamped to the box.
        kd_min, kd_max: per-channel albedo range.
        ks_min, ks_max: per-channel (occlusion, roughness, metallic) range.
        nrm_min, nrm_max: per-channel range of the normal perturbation.
        n_levels, n_features_per_level, log2_hashmap_size, base_resolution, desired_resolution: the
            hash-grid encoding (nvdiffrec's defaults).
        hidden, layers: the MLP.
        chunk_size: points per chunk in :meth:`sample` on the PyTorch encoding (bounds the peak memory of
            one call: about ``chunk_size * n_levels * 8 * (8 + 4 F)`` bytes of gather temporaries); the
            Triton encoding has no such temporaries and takes all points in one call.

    Raises:
        ConfigError: bad ``aabb`` or ranges.
    """

    def __init__(
        self,
        aabb: torch.Tensor | Sequence[Sequence[float]],
        kd_min: Sequence[float] = (0.0, 0.0, 0.0),
        kd_max: Sequence[float] = (1.0, 1.0, 1.0),
        ks_min: Sequence[float] = (0.0, 0.0, 0.0),
        ks_max: Sequence[float] = (1.0, 1.0, 1.0),
        nrm_min: Sequence[float] = NVDIFFREC_NRM_RANGE[0],
        nrm_max: Sequence[float] = NVDIFFREC_NRM_RANGE[1],
        n_levels: int = 16,
        n_features_per_level: int = 2,
        log2_hashmap_size: int = 19,
        base_resolution: int = 16,
        desired_resolution: int = 4096,
        hidden: int = 32,
        layers: int = 2,
        chunk_size: int = 1 << 16,
    ) -> None:
        super().__init__()
        box = torch.as_tensor(aabb, dtype=torch.float32)
        if box.shape != (2, 3) or not bool((box[1] > box[0]).all()):
            raise ConfigError(
                f"MaterialField(aabb): expected [[xmin, ymin, zmin], [xmax, ymax, zmax]] with max > min, got {box.tolist()}"
            )
        lo = torch.cat([_range(kd_min, "kd_min"), _range(ks_min, "ks_min"), _range(nrm_min, "nrm_min")])
        hi = torch.cat([_range(kd_max, "kd_max"), _range(ks_max, "ks_max"), _range(nrm_max, "nrm_max")])
        if bool((hi < lo).any()):
            raise ConfigError(f"MaterialField: every max must be >= its min, got min={lo.tolist()} max={hi.tolist()}")
        self.register_buffer("aabb", box.detach().clone())
        self.register_buffer("out_min", lo)
        self.register_buffer("out_max", hi)
        self.encoder = HashGridEncoding(
            3,
            n_levels=n_levels,
            n_features_per_level=n_features_per_level,
            log2_hashmap_size=log2_hashmap_size,
            base_resolution=base_resolution,
            desired_resolution=desired_resolution,
        )
        self.net = MLP(self.encoder.n_output_dims, 9, hidden=hidden, layers=layers)
        self.chunk_size = int(chunk_size)

    def _raw(self, x: torch.Tensor) -> torch.Tensor:
        u = (x - self.aabb[0]) / (self.aabb[1] - self.aabb[0])
        out = torch.sigmoid(self.net(self.encoder(torch.clamp(u, 0.0, 1.0))))
        return out * (self.out_max - self.out_min) + self.out_min

    def sample(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """Evaluate the field at points, in chunks of ``chunk_size``.

        Args:
            x: ``[..., 3]`` positions (same units as ``aabb``).

        Returns:
            ``{"kd": [..., 3], "ks": [..., 3], "normal": [..., 3]}`` (float32). Differentiable with respect
            to the field's parameters and to ``x``. Chunking bounds the temporaries of each call; under
            autograd the activations saved for backward still grow with the number of points.

        Raises:
            RenderError: ``x`` does not end in 3.
        """
        if x.shape[-1] != 3:
            raise RenderError(f"MaterialField.sample(x): expected [..., 3], got {tuple(x.shape)}")
        lead = x.shape[:-1]
        flat = x.reshape(-1, 3).to(self.aabb.dtype)
        # Chunks bound the gather temporaries of the PyTorch encoding; the fused Triton encoding has none
        # (it writes [N, L·F] directly), so there one call takes every point (fewer, larger launches).
        fused = choose_backend("shading", self.encoder.backend, flat.device, flat.dtype) == "triton"
        if fused or flat.shape[0] <= self.chunk_size:
            out = self._raw(flat)
        else:
            out = torch.cat([self._raw(flat[s : s + self.chunk_size]) for s in range(0, flat.shape[0], self.chunk_size)])
        out = out.reshape(*lead, 9)
        return {"kd": out[..., 0:3], "ks": out[..., 3:6], "normal": out[..., 6:9]}

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """Same as :meth:`sample`."""
        return self.sample(x)
