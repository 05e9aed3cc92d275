"""The meshlift web app (``meshlift app``; needs the ``[app]`` extra: ``pip install "meshlift[app]"``).

- :mod:`meshlift.app.uploads`: limits, safe zip extraction, input classification, session folders;
- :mod:`meshlift.app.methods`: the methods and presets offered (a registry);
- :mod:`meshlift.app.jobs`: the GPU work, one ZeroGPU-ready function per user action;
- :mod:`meshlift.app.ui`: the gradio page.

Importing this package imports neither gradio nor torch; :func:`build_app` and :func:`launch` do.
"""

from __future__ import annotations

import os
from typing import Optional


def build_app(limits=None):
    """The gradio Blocks of the app (not launched).

    Raises:
        meshlift.errors.DependencyError: gradio is not installed (the message gives the install command).
    """
    os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")  # before torch is imported
    from meshlift import _deps

    _deps.require("gradio", "the web app")
    from meshlift.app import jobs  # noqa: F401  (sets the allocator variable too)
    from meshlift.app.ui import build

    return build(limits)


def launch(host: str = "127.0.0.1", port: Optional[int] = 7860, limits=None, **kwargs):
    """Build and serve the app on ``host:port`` (127.0.0.1 by default: only this machine can reach it).

    The session folders under ``limits.root`` that the app makes are deleted when it stops
    (:func:`meshlift.app.uploads.clear_on_stop`); gradio deletes its own upload cache (``delete_cache``).

    ``kwargs`` go to :meth:`gradio.Blocks.launch` (e.g. ``prevent_thread_lock=True`` in tests).
    """
    from meshlift.app.uploads import Limits, clear_on_stop

    limits = limits or Limits()
    demo = build_app(limits)
    clear_on_stop(limits)  # the session folders (uploads, outputs) go when the app stops
    demo.queue(default_concurrency_limit=1)
    return demo.launch(server_name=host, server_port=port, allowed_paths=[str(limits.root)],
                       max_file_size=f"{limits.max_total_mb}mb", show_error=True, **kwargs)


__all__ = ["build_app", "launch"]
