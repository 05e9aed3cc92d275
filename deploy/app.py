"""Entry point for a GPU-on-demand host (Hugging Face Spaces with ZeroGPU, or any machine with a GPU).

The host installs ``requirements.txt`` and runs ``python app.py``. meshlift itself is the ``src/meshlift``
folder copied next to this file (see the README section "deploy on a GPU-on-demand host"), or an installed
package. Nothing is compiled, at build time or at start: meshlift is pure PyTorch plus Triton kernels that
compile at run time inside the GPU task. The GPU work is ``meshlift.app.jobs.reconstruct_job``, decorated
with ``spaces.GPU`` when the ``spaces`` package is present.
"""

import os
import sys
from pathlib import Path

os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")  # before torch is imported
_src = Path(__file__).resolve().parent / "src"
if (_src / "meshlift").is_dir():
    sys.path.insert(0, str(_src))

from meshlift.app import launch  # noqa: E402

if __name__ == "__main__":
    # Spaces route traffic to port 7860 of 0.0.0.0 (SPACE_ID is set there); elsewhere bind 127.0.0.1 unless
    # MESHLIFT_APP_HOST says otherwise.
    on_space = bool(os.environ.get("SPACE_ID"))
    launch(host=os.environ.get("MESHLIFT_APP_HOST", "0.0.0.0" if on_space else "127.0.0.1"),
           port=int(os.environ.get("PORT", "7860")))
