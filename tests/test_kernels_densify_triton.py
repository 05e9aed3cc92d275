"""The one-launch density-control statistics (meshlift.kernels.densify_triton) against their reference twin,
the strategy's torch code (DefaultStrategy._update_state with fused_stats=False), under TRITON_INTERPRET=1:
one and two cameras, a strided gradient (a slice of the compositing's [C, N, 6] record), invisible Gaussians,
several steps accumulating."""

from __future__ import annotations

import os

import pytest
import torch

from meshlift.methods.gaussians.strategy import DefaultStrategy

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET", "0") in ("", "0"),
                                reason="needs TRITON_INTERPRET=1 (the Triton interpreter on the CPU)")


@pytest.mark.parametrize("C,strided,scale2d", [(1, True, 0), (2, False, 0), (1, False, 100)])
def test_fused_statistics_match_the_torch_code(C, strided, scale2d):
    n = 1300  # more than two blocks
    states = []
    for fused in (True, False):
        st = DefaultStrategy(refine_scale2d_stop=scale2d)
        st.fused_stats = fused
        state = st.initialize_state()
        params = {"means": torch.zeros(n, 3)}
        gen = torch.Generator().manual_seed(7)
        for _ in range(3):
            rec = torch.randn(C, n, 6, generator=gen) * 1e-3
            grad = rec[..., 0:2] if strided else rec[..., 0:2].contiguous()
            radii = torch.randint(0, 4, (C, n, 2), generator=gen, dtype=torch.int32)
            radii[..., 1] = radii[..., 0]
            radii[:, :50] = 0  # never seen
            m2d = torch.zeros(C, n, 2, requires_grad=True)
            m2d.grad = grad
            st._update_state(params, state, {"means2d": m2d, "radii": radii, "width": 40, "height": 30,
                                             "n_cameras": C})
        states.append(state)
    a, b = states
    assert (b["count"] > 0).any() and (b["count"] == 0).any()
    torch.testing.assert_close(a["count"], b["count"], rtol=0, atol=0)
    torch.testing.assert_close(a["grad2d"], b["grad2d"], rtol=1e-6, atol=1e-9)
    torch.testing.assert_close(a["radii"], b["radii"], rtol=0, atol=0)
