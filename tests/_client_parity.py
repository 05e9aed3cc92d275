"""Test helper: render meshlift's files in three.js (headless Debian chromium) and in meshlift, same view.

three.js comes from the npm registry (``three``, pinned in .ci/run), found through
``MESHLIFT_THREEJS_DIR`` (the package folder, ``<prefix>/node_modules/three``); chromium is Debian's
``chromium`` (``MESHLIFT_CHROMIUM`` overrides). The page ``tests/client_parity.html`` is served with the
assets from a local ``http.server`` on 127.0.0.1; it POSTs each rendered frame back as PNG (read from the
WebGL drawing buffer, so no window-system colour management is involved).

Headless WebGL runs on SwiftShader through ANGLE: ``--use-gl=angle --use-angle=swiftshader
--enable-unsafe-swiftshader`` (Chromium >= 137 refuses the SwiftShader WebGL fallback without the last flag).
"""

from __future__ import annotations

import http.server
import json
import math
import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import torch

PAGE = Path(__file__).with_name("client_parity.html")
CHROMIUM_FLAGS = [
    "--headless=new", "--no-sandbox", "--disable-gpu-sandbox", "--use-gl=angle", "--use-angle=swiftshader",
    "--enable-unsafe-swiftshader", "--no-first-run", "--no-default-browser-check", "--disable-extensions",
    "--disable-background-networking", "--force-device-scale-factor=1", "--mute-audio",
]


def chromium_path() -> str | None:
    env = os.environ.get("MESHLIFT_CHROMIUM")
    if env and Path(env).is_file():
        return env
    for name in ("chromium", "chromium-browser", "google-chrome"):
        p = shutil.which(name)
        if p:
            return p
    return None


def three_dir() -> Path | None:
    for cand in (os.environ.get("MESHLIFT_THREEJS_DIR"), "/tmp/three/node_modules/three"):
        if cand and (Path(cand) / "build" / "three.module.js").is_file():
            return Path(cand)
    return None


# ------------------------------------------------------------------------------------- environment


def linear_environment(height: int = 64) -> np.ndarray:
    """Lat-long ``[H, 2H, 3]`` radiance ``L(d) = 0.5 + 0.45 d`` per channel (R ← x, G ← y, B ← z).

    A smooth environment that is linear in the direction: its cosine-weighted (diffuse) average is
    ``0.5 + 0.45 · (2/3) n`` exactly, and every prefilter (meshlift's GGX cube mips, three's PMREM) keeps
    it near-linear, so the two renderers' different (but each correct) filtering schemes agree to a few
    8-bit steps, while the shading still depends strongly on the normal (normal maps, flat vs smooth).
    Directions follow docs/conventions.md §8.
    """
    H, W = height, 2 * height
    theta = np.pi * (np.arange(H) + 0.5) / H
    phi = 2 * np.pi * (np.arange(W) + 0.5) / W - np.pi
    th, ph = np.meshgrid(theta, phi, indexing="ij")
    d = np.stack([np.sin(th) * np.sin(ph), np.cos(th), -np.sin(th) * np.cos(ph)], -1)
    return (0.5 + 0.45 * d).astype(np.float32)


#: Rotation about +y (radians) that three.js' ``scene.environmentRotation`` needs so that its
#: equirectangular lookup (``u = atan2(z, x) / 2π + ½``) sees meshlift's lat-long layout
#: (``u = atan2(x, −z) / 2π + ½``, docs/conventions.md §8). A wrong rotation (e.g. −π/2) mixes the x and z
#: colour channels and fails every comparison of test_client_parity (measured: 4-7x the baseline difference).
ENV_ROTATION_Y = math.pi / 2


# ----------------------------------------------------------------------------------------- cameras


def orbit_camera(lo, hi, azimuth_deg: float = 35.0, elevation_deg: float = 20.0, fov_y_deg: float = 40.0) -> dict:
    """A camera looking at the centre of the box ``[lo, hi]`` from outside it (world +y up)."""
    lo, hi = np.asarray(lo, float), np.asarray(hi, float)
    c = (lo + hi) / 2
    r = float(np.linalg.norm(hi - lo)) / 2
    dist = r / math.sin(math.radians(fov_y_deg) / 2) * 1.1
    az, el = math.radians(azimuth_deg), math.radians(elevation_deg)
    d = np.array([math.cos(el) * math.sin(az), math.sin(el), math.cos(el) * math.cos(az)])
    return {"eye": (c + dist * d).tolist(), "target": c.tolist(), "up": [0.0, 1.0, 0.0], "fov_y_deg": fov_y_deg,
            "near": max(dist - 2 * r, dist * 0.05), "far": dist + 2 * r}


def meshlift_render(path: Path, camera: dict, light, width: int, height: int) -> np.ndarray:
    """meshlift's own render of a mesh file (as ``meshlift render`` does: ``load_mesh`` + ``render_mesh``,
    linear radiance clamped to [0, 1] and sRGB-encoded); ``[H, W, 3]`` uint8."""
    from meshlift.cameras import Cameras, intrinsics_matrix, look_at
    from meshlift.io.mesh import load_mesh
    from meshlift.renderers.mesh_pbr import render_mesh
    from meshlift.shading.color import linear_to_srgb

    mesh = load_mesh(path)
    w2c = look_at(torch.tensor(camera["eye"]), torch.tensor(camera["target"]), up=tuple(camera["up"]))
    f = 0.5 * height / math.tan(math.radians(camera["fov_y_deg"]) / 2)
    K = intrinsics_matrix(f, f, width / 2, height / 2)
    cams = Cameras(K=K[None], world_to_camera=w2c[None].float(), width=width, height=height,
                   near=camera["near"], far=camera["far"])
    with torch.no_grad():
        out = render_mesh(mesh, cams.world_to_clip().float(), cams.camera_centers().float(), (height, width),
                          light=light)
    img = linear_to_srgb(out["shaded"][0].clamp(0, 1)).numpy()
    return np.clip(np.rint(img * 255), 0, 255).astype(np.uint8), out["alpha"][0, ..., 0].numpy()


# ------------------------------------------------------------------------------------- the browser


class _Handler(http.server.SimpleHTTPRequestHandler):
    results: dict
    event: threading.Event

    def do_POST(self):  # noqa: N802 - http.server's naming
        n = int(self.headers.get("Content-Length", 0))
        data = self.rfile.read(n)
        name = self.path.rsplit("/", 1)[-1]
        self.results[name] = data
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()
        if name in ("done", "error"):
            self.event.set()

    def log_message(self, *args):  # keep the test output clean
        pass


def render_in_chromium(root: Path, manifest: dict, timeout_s: float = 240.0) -> dict[str, bytes]:
    """Serve ``root`` (assets + the page + a link to three.js), open the page in headless chromium and
    collect what it POSTs: ``{"<asset>.png": bytes, "<asset>.json": bytes, "done"|"error": bytes}``."""
    root = Path(root)
    shutil.copy(PAGE, root / "index.html")
    link = root / "three"
    if not link.exists():
        link.symlink_to(three_dir(), target_is_directory=True)
    (root / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    results: dict[str, bytes] = {}
    event = threading.Event()

    class Handler(_Handler):
        def __init__(self, *a, **k):
            super().__init__(*a, directory=str(root), **k)

    Handler.results, Handler.event = results, event
    Handler.extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map, ".js": "text/javascript"}
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    profile = root / "_chromium_profile"
    cmd = [chromium_path(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}",
           f"--window-size={manifest['width']},{manifest['height']}",
           f"http://127.0.0.1:{server.server_address[1]}/index.html"]
    log = open(root / "chromium.log", "wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        t0 = time.monotonic()
        while not event.wait(0.5):
            if proc.poll() is not None or time.monotonic() - t0 > timeout_s:
                break
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)  # the process group this call started
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        log.close()
        server.shutdown()
        server.server_close()
    return results


def decode_png(data: bytes) -> np.ndarray:
    import io

    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
