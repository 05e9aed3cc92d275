"""Multiresolution hash-grid encoding (instant-ngp) and a small MLP, in pure PyTorch.

Source: Müller, Evans, Schied, Keller 2022, "Instant Neural Graphics Primitives with a Multiresolution
Hash Encoding" (ACM TOG 41(4)), Sec. 3:

- level l (0-based) has resolution ``N_l = floor(N_min · b^l)`` (Eq. 2-3); the input ``x`` in [0, 1]^d
  is scaled to ``x N_l`` and the ``2^d`` surrounding integer grid vertices are looked up;
- a level whose ``(N_l + 1)^d`` vertices fit into its table of ``T = 2^log2_hashmap_size`` entries is
  indexed densely (``i + j (N_l + 1) + k (N_l + 1)^2``, a one-to-one map); finer levels use the spatial hash
  ``h(c) = XOR_i (c_i π_i) mod T`` with ``π = (1, 2654435761, 805459861)`` (Eq. 4);
- the F-dimensional entries are d-linearly interpolated (trilinear for d = 3) and the L levels
  concatenated, giving ``L · F`` features;
- table entries are initialised uniformly in [-1e-4, 1e-4] (Sec. 4).

:class:`HashGridEncoding` evaluates the dense levels together and the hashed levels together (one gather
per group for all levels and corners);
:func:`hash_grid_reference` is its naive per-level, per-corner loop twin (tests compare both, forward
and backward). On CUDA the same encoding runs as two fused Triton kernels (forward, backward) of
:mod:`meshlift.kernels.hashgrid_triton`, chosen by ``backend`` (:func:`meshlift.kernels.choose_backend`).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from meshlift.errors import ConfigError, RenderError
from meshlift.kernels import FAMILIES, choose_backend

__all__ = ["HASH_PRIMES", "HashGridEncoding", "hash_grid_reference", "MLP"]

#: Per-dimension primes of the spatial hash (Müller et al. 2022, Eq. 4); up to 3 input dimensions.
HASH_PRIMES = (1, 2654435761, 805459861)


class HashGridEncoding(nn.Module):
    """Multiresolution hash-grid encoding ``[N, d] in [0, 1]^d -> [N, L·F]`` (Müller et al. 2022, Sec. 3).

    Args:
        n_input_dims: d, 1 to 3.
        n_levels: L.
        n_features_per_level: F.
        log2_hashmap_size: log2 of the table size T per level.
        base_resolution: N_min, the coarsest grid resolution.
        per_level_scale: growth factor b between levels; None gives nvdiffrec's choice, the scale that
            reaches ``desired_resolution`` at the finest level: ``b = exp(ln(N_max / N_min) / (L - 1))``.
        desired_resolution: N_max used when ``per_level_scale`` is None (nvdiffrec: 4096).
        init_scale: table entries start uniform in [-init_scale, init_scale].
        backend: ``"auto"`` (Triton kernels for float32 CUDA inputs when ``import triton`` works, this
            module's PyTorch code otherwise), ``"torch"`` or ``"triton"``; None: the current choice
            (:func:`meshlift.kernels.use_kernels`, default auto). See :func:`meshlift.kernels.choose_backend`.

    Attributes:
        embeddings: ``[sum_l T_l, F]`` trainable table of every level, concatenated.
        resolutions: per-level N_l (Python ints). ``dense``: whether each level is indexed densely.
        n_output_dims: L · F.

    Raises:
        ConfigError: invalid sizes.
    """

    def __init__(
        self,
        n_input_dims: int = 3,
        n_levels: int = 16,
        n_features_per_level: int = 2,
        log2_hashmap_size: int = 19,
        base_resolution: int = 16,
        per_level_scale: float | None = None,
        desired_resolution: int = 4096,
        init_scale: float = 1e-4,
        backend: str | None = None,
    ) -> None:
        super().__init__()
        if not 1 <= n_input_dims <= len(HASH_PRIMES):
            raise ConfigError(f"HashGridEncoding(n_input_dims): must be 1..3, got {n_input_dims}")
        if n_levels < 1 or n_features_per_level < 1 or base_resolution < 1:
            raise ConfigError(
                "HashGridEncoding: n_levels, n_features_per_level and base_resolution must be >= 1, got "
                f"{n_levels}, {n_features_per_level}, {base_resolution}"
            )
        if not 1 <= log2_hashmap_size <= 30:
            raise ConfigError(f"HashGridEncoding(log2_hashmap_size): must be in 1..30, got {log2_hashmap_size}")
        names = ("auto",) + FAMILIES["shading"]
        if backend is not None and str(backend).strip().lower() not in names:
            raise ConfigError(f"HashGridEncoding(backend): unknown {backend!r}; use one of {', '.join(names)}")
        if per_level_scale is None:
            per_level_scale = (
                math.exp(math.log(desired_resolution / base_resolution) / (n_levels - 1)) if n_levels > 1 else 1.0
            )
        if per_level_scale < 1.0:
            raise ConfigError(f"HashGridEncoding(per_level_scale): must be >= 1, got {per_level_scale}")
        self.n_input_dims = int(n_input_dims)
        self.n_levels = int(n_levels)
        self.n_features_per_level = int(n_features_per_level)
        self.log2_hashmap_size = int(log2_hashmap_size)
        self.base_resolution = int(base_resolution)
        self.per_level_scale = float(per_level_scale)
        self.backend = backend
        self.n_output_dims = self.n_levels * self.n_features_per_level
        table = 1 << self.log2_hashmap_size
        d = self.n_input_dims
        self.resolutions: list[int] = []
        self.dense: list[bool] = []
        self.table_sizes: list[int] = []
        for lvl in range(self.n_levels):
            # Small epsilon so that exact powers (e.g. 16 * 2.0 ** 3) do not floor one below.
            res = int(math.floor(self.base_resolution * self.per_level_scale**lvl + 1e-6))
            verts = (res + 1) ** d
            self.resolutions.append(res)
            self.dense.append(verts <= table)
            self.table_sizes.append(min(verts, table))
        offsets = [0]
        for s in self.table_sizes:
            offsets.append(offsets[-1] + s)
        self.embeddings = nn.Parameter(torch.empty(offsets[-1], self.n_features_per_level))
        nn.init.uniform_(self.embeddings, -init_scale, init_scale)
        # Per-level metadata as buffers (follow .to(device)); not saved in state_dict.
        self.register_buffer("_offsets", torch.tensor(offsets[:-1], dtype=torch.int64), persistent=False)
        self.register_buffer("_res", torch.tensor(self.resolutions, dtype=torch.float32), persistent=False)
        strides = torch.tensor([[(r + 1) ** i for i in range(d)] for r in self.resolutions], dtype=torch.int64)
        self.register_buffer("_strides", strides, persistent=False)  # [L, d]
        self.register_buffer("_dense", torch.tensor(self.dense, dtype=torch.int32), persistent=False)

    def extra_repr(self) -> str:
        return (
            f"n_input_dims={self.n_input_dims}, n_levels={self.n_levels}, F={self.n_features_per_level}, "
            f"log2_T={self.log2_hashmap_size}, resolutions={self.resolutions[0]}..{self.resolutions[-1]}, "
            f"dense_levels={sum(self.dense)}, params={self.embeddings.numel()}"
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Encode points.

        Args:
            x: ``[N, d]`` float positions in [0, 1]^d (clamped).

        Returns:
            ``[N, L·F]`` features (level-major: level 0's F features first), dtype of the table.

        Raises:
            RenderError: ``x`` is not ``[N, d]``.
        """
        if x.ndim != 2 or x.shape[-1] != self.n_input_dims:
            raise RenderError(f"HashGridEncoding: expected x of shape [N, {self.n_input_dims}], got {tuple(x.shape)}")
        n = x.shape[0]
        x = torch.clamp(x.to(self.embeddings.dtype), 0.0, 1.0)
        if choose_backend("shading", self.backend, x.device, x.dtype) == "triton":
            from meshlift.kernels.hashgrid_triton import hash_grid_encode_triton

            return hash_grid_encode_triton(
                x, self.embeddings, self._res, self._strides, self._offsets, self._dense, self.log2_hashmap_size
            )
        n_dense = sum(self.dense)  # dense levels come first (resolutions grow with the level)
        parts = []
        if n_dense:
            parts.append(self._encode_levels(x, 0, n_dense, hashed=False))
        if n_dense < self.n_levels:
            parts.append(self._encode_levels(x, n_dense, self.n_levels, hashed=True))
        out = parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)  # [N, L, F]
        return out.reshape(n, self.n_output_dims)

    def _encode_levels(self, x: torch.Tensor, l0: int, l1: int, hashed: bool) -> torch.Tensor:
        """Levels ``l0..l1-1`` (all dense or all hashed) -> ``[N, l1 - l0, F]``.

        The 2^d corner indices and weights are built per axis as ``[N, L, 2]`` pairs (vertex below / above)
        and combined by broadcasting, which avoids materialising ``[N, L, 2^d, d]`` corner coordinates.
        """
        n, d = x.shape[0], self.n_input_dims
        res = self._res[l0:l1].to(x.dtype)
        pos = x[:, None, :] * res[None, :, None]  # [N, L, d]
        pos0 = torch.minimum(torch.floor(pos.detach()), (res - 1.0)[None, :, None])
        frac = pos - pos0
        base = pos0.long()
        idx = None
        w = None
        for i in range(d):
            ci = torch.stack([base[..., i], base[..., i] + 1], dim=-1)  # [N, L, 2]
            wi = torch.stack([1.0 - frac[..., i], frac[..., i]], dim=-1)
            if hashed:
                ki = ci * HASH_PRIMES[i]
            else:
                ki = ci * self._strides[l0:l1, i][None, :, None]
            shape = [n, l1 - l0] + [1] * i + [2] + [1] * (d - 1 - i)
            ki = ki.reshape(shape)
            wi = wi.reshape(shape)
            if idx is None:
                idx, w = ki, wi
            else:
                idx = torch.bitwise_xor(idx, ki) if hashed else idx + ki
                w = w * wi
        idx = idx.reshape(n, l1 - l0, 1 << d)
        w = w.reshape(n * (l1 - l0), 1, 1 << d)
        if hashed:
            idx = idx & ((1 << self.log2_hashmap_size) - 1)
        idx = idx + self._offsets[l0:l1][None, :, None]
        # index_select: its backward is a scatter-add (index_add_), much cheaper on CPU than the sort-based
        # backward of nn.functional.embedding.
        feats = self.embeddings.index_select(0, idx.reshape(-1)).reshape(-1, 1 << d, self.n_features_per_level)
        return torch.bmm(w, feats).reshape(n, l1 - l0, self.n_features_per_level)


def hash_grid_reference(enc: HashGridEncoding, x: torch.Tensor) -> torch.Tensor:
    """Naive twin of :meth:`HashGridEncoding.forward`: explicit loops over levels and corners.

    Args:
        enc: the encoding whose table and level layout are used.
        x: ``[N, d]`` positions in [0, 1]^d.

    Returns:
        ``[N, L·F]``.
    """
    x = torch.clamp(x.to(enc.embeddings.dtype), 0.0, 1.0)
    table = 1 << enc.log2_hashmap_size
    outs = []
    offset = 0
    for lvl in range(enc.n_levels):
        res = enc.resolutions[lvl]
        pos = x * res
        base = torch.clamp(torch.floor(pos.detach()), max=res - 1)
        frac = pos - base
        base = base.long()
        acc = torch.zeros(x.shape[0], enc.n_features_per_level, dtype=x.dtype, device=x.device)
        for corner in range(1 << enc.n_input_dims):
            weight = torch.ones(x.shape[0], dtype=x.dtype, device=x.device)
            index = torch.zeros(x.shape[0], dtype=torch.int64, device=x.device)
            hashed = torch.zeros(x.shape[0], dtype=torch.int64, device=x.device)
            for i in range(enc.n_input_dims):
                bit = (corner >> i) & 1
                ci = base[:, i] + bit
                weight = weight * (frac[:, i] if bit else 1.0 - frac[:, i])
                index = index + ci * (res + 1) ** i
                hashed = hashed ^ (ci * HASH_PRIMES[i])
            if not enc.dense[lvl]:
                index = hashed % table
            acc = acc + weight[:, None] * enc.embeddings[offset + index]
        outs.append(acc)
        offset += enc.table_sizes[lvl]
    return torch.cat(outs, dim=-1)


class MLP(nn.Module):
    """A small ReLU MLP (nvdiffrec's ``_MLP``): ``in -> [hidden, ReLU] x layers -> out``.

    Args:
        n_input_dims: input width.
        n_output_dims: output width (no output activation).
        hidden: neurons per hidden layer.
        layers: number of hidden layers (>= 1).
        bias: use biases (nvdiffrec: no).

    Weights use Kaiming-uniform initialisation for ReLU (He et al. 2015), biases start at zero.
    """

    def __init__(self, n_input_dims: int, n_output_dims: int, hidden: int = 32, layers: int = 2, bias: bool = False):
        super().__init__()
        if layers < 1 or hidden < 1:
            raise ConfigError(f"MLP: layers and hidden must be >= 1, got {layers}, {hidden}")
        mods: list[nn.Module] = [nn.Linear(n_input_dims, hidden, bias=bias), nn.ReLU()]
        for _ in range(layers - 1):
            mods += [nn.Linear(hidden, hidden, bias=bias), nn.ReLU()]
        mods.append(nn.Linear(hidden, n_output_dims, bias=bias))
        self.net = nn.Sequential(*mods)
        for m in self.net:
            if isinstance(m, nn.Linear):
                nn.init.kaiming_uniform_(m.weight, nonlinearity="relu")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``[N, in] -> [N, out]``."""
        return self.net(x)
