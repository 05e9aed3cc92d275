"""The web app in a real browser: headless Chromium (Debian's chromium + chromium-driver) driven by selenium.

Starts ``meshlift app`` on a free local port (a subprocess, small upload limits), then:

1. a zip-slip archive is refused with a message in the page;
2. an upload over the per-file limit is refused with a message in the page;
3. one ``tiny`` job per method of the registry: a reference mesh (the procedural demo ring, GLB) through the
   surface method, and a zip of posed photos (32 px, 8 + 2 views) through the Gaussian method and MILo; the
   viewer of each result draws it (its canvas is not one flat colour): the mesh as GLB, the Gaussians as
   splats (MILo: both); and every download link serves a valid file (GLB magic, zip with OBJ+MTL, PLY
   headers, metrics JSON). The whole module took 28 s of CPU (app server included) on 2026-12-03.

Screenshots go to ``$MESHLIFT_TEST_ARTIFACTS`` (or pytest's tmp dir). Marked ``app`` (run by .ci/run with
``pytest -m app``); skips with the reason when chromium, chromedriver, selenium or gradio is missing.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.app

REPO = Path(__file__).resolve().parents[1]


def _need():
    for mod in ("selenium", "gradio"):
        try:
            __import__(mod)
        except ImportError:
            pytest.skip(f"{mod} not installed (pip install -e '.[app,dev]')")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if not chromium or not driver:
        pytest.skip("chromium / chromedriver not found (apt-get install chromium chromium-driver)")
    return chromium, driver


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    _need()
    root = tmp_path_factory.mktemp("app_sessions")
    port = _free_port()
    env = dict(os.environ, MESHLIFT_APP_ROOT=str(root), MESHLIFT_APP_MAX_FILE_MB="2", MESHLIFT_APP_MAX_TOTAL_MB="8",
               GRADIO_ANALYTICS_ENABLED="False", PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src")] + [p for p in [env.get("PYTHONPATH")] if p])
    log = open(root / "server.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "meshlift.cli.main", "app", "--port", str(port)],
                            stdout=log, stderr=subprocess.STDOUT, env=env, cwd=str(root))
    url = f"http://127.0.0.1:{port}/"
    deadline = time.time() + 120
    while time.time() < deadline:
        if proc.poll() is not None:
            break
        try:
            urllib.request.urlopen(url, timeout=2).read(10)
            break
        except OSError:
            time.sleep(0.5)
    else:
        proc.terminate()
        pytest.fail("the app did not answer within 120 s: " + (root / "server.log").read_text()[-3000:])
    if proc.poll() is not None:
        pytest.fail("the app exited: " + (root / "server.log").read_text()[-3000:])
    yield url, root
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


@pytest.fixture(scope="module")
def browser():
    chromium, driver_path = _need()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1600",
              "--use-angle=swiftshader", "--enable-unsafe-swiftshader", "--ignore-gpu-blocklist"):
        opts.add_argument(a)
    drv = webdriver.Chrome(service=Service(driver_path), options=opts)
    drv.set_page_load_timeout(60)
    yield drv
    drv.quit()


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory) -> Path:
    d = os.environ.get("MESHLIFT_TEST_ARTIFACTS")
    p = Path(d) if d else tmp_path_factory.mktemp("app_artifacts")
    p.mkdir(parents=True, exist_ok=True)
    return p


def _wait_text(drv, css: str, words: tuple[str, ...], timeout: float) -> str:
    from selenium.webdriver.common.by import By

    end = time.time() + timeout
    text = ""
    while time.time() < end:
        els = drv.find_elements(By.CSS_SELECTOR, css)
        text = " ".join(e.text for e in els)
        if any(w in text for w in words):
            return text
        time.sleep(0.5)
    raise AssertionError(f"{css} never showed any of {words}; last text: {text!r}")


def _upload(drv, url: str, paths: list[Path]) -> None:
    from selenium.webdriver.common.by import By

    drv.get(url)
    _wait_text(drv, "#run", ("Reconstruct",), 60)
    inp = drv.find_element(By.CSS_SELECTOR, "#upload input[type=file]")
    inp.send_keys("\n".join(str(p) for p in paths))


def test_zip_slip_archive_is_refused_in_the_page(server, browser, tmp_path, artifacts):
    url, root = server
    bad = tmp_path / "slip.zip"
    with zipfile.ZipFile(bad, "w") as zf:
        zf.writestr("photos/r_0.png", b"not really a png")
        zf.writestr("../../evil.png", b"escape")
    _upload(browser, url, [bad])
    text = _wait_text(browser, "#upload-status", ("Refused",), 60)
    assert "zip-slip" in text and "evil.png" in text
    browser.save_screenshot(str(artifacts / "app_zip_slip.png"))
    assert not (root.parent / "evil.png").exists() and not any(root.rglob("evil.png"))


def test_oversize_upload_is_refused_in_the_page(server, browser, tmp_path, artifacts):
    url, _ = server
    big = tmp_path / "huge.png"
    big.write_bytes(os.urandom(3 * 1024 * 1024))  # limit in the server fixture: 2 MiB per file
    _upload(browser, url, [big])
    text = _wait_text(browser, "#upload-status", ("Refused",), 60)
    assert "huge.png" in text and "2 MiB per file" in text
    browser.save_screenshot(str(artifacts / "app_oversize.png"))


def _choose(drv, method: str) -> None:
    """Pick ``method`` in the method menu and wait until the preset radio offers its sizes."""
    from selenium.webdriver.common.by import By

    from meshlift.methods import registry

    m = registry.METHODS[method]
    drv.find_element(By.CSS_SELECTOR, "#method input").click()
    end = time.time() + 30
    while time.time() < end:
        opts = [o for o in drv.find_elements(By.CSS_SELECTOR, "#method [role=option]")
                if o.get_attribute("aria-label") == m.label]
        if opts:
            opts[0].click()
            break
        time.sleep(0.3)
    else:
        raise AssertionError(f"the method menu never listed {m.label!r}")
    _wait_text(drv, "#preset", (m.presets.size("tiny").label,), 30)


def _drawn(drv, css: str, timeout: float = 60):
    """``(png, True)`` once the canvas under ``css`` shows a model (at least 2 % of its centre differs from
    the background), else ``(last png or None, False)`` after ``timeout`` s."""
    import numpy as np
    from PIL import Image
    from selenium.webdriver.common.by import By

    end = time.time() + timeout
    png = None
    while time.time() < end:
        canvases = [c for c in drv.find_elements(By.CSS_SELECTOR, f"{css} canvas") if c.is_displayed()]
        if canvases and canvases[0].size["width"] > 50:
            png = canvases[0].screenshot_as_png
            a = np.asarray(Image.open(io.BytesIO(png)).convert("L"), dtype=np.int16)
            h, w = a.shape  # the centre only: the label and buttons overlay the top of the canvas
            centre = a[h // 6: h - h // 20, w // 10: w - w // 10]
            if (np.abs(centre - np.median(centre)) > 30).sum() > 0.02 * centre.size:
                return png, True
        time.sleep(1.0)
    return png, False


def _downloads(drv, want: set, timeout: float = 30) -> dict:
    """``{file name: bytes}`` of the download links, once every name of ``want`` is there."""
    from selenium.webdriver.common.by import By

    links = {}
    end = time.time() + timeout
    while time.time() < end and not want <= set(links):
        for a in drv.find_elements(By.CSS_SELECTOR, "#downloads a[href]"):
            href = a.get_attribute("href")
            links[href.split("?")[0].rsplit("/", 1)[-1]] = href
        time.sleep(0.5)
    assert want <= set(links), links
    return {name: urllib.request.urlopen(href, timeout=30).read() for name, href in links.items()}


@pytest.fixture(scope="module")
def posed_zip(tmp_path_factory) -> Path:
    """A tiny posed capture as one zip (NeRF-synthetic layout: 8 training and 2 test views at 32 px of a
    procedural Gaussian scene), for the methods that take photos."""
    from _gaussian_problem import write_blender_dataset

    root = tmp_path_factory.mktemp("posed")
    scene = write_blender_dataset(root / "scene", size=32, n_train=8, n_test=2)
    archive = root / "scene.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for p in sorted(scene.rglob("*")):
            if p.is_file():
                zf.write(p, arcname=str(p.relative_to(scene)))
    return archive


def _run_tiny(drv, url: str, upload: Path, method: str, ready: str) -> str:
    """Upload, pick ``method`` and its ``tiny`` size, run; the run's final status text."""
    from selenium.webdriver.common.by import By

    _upload(drv, url, [upload])
    text = _wait_text(drv, "#upload-status", ("Ready", "Refused", "Cannot"), 60)
    assert "Ready" in text and ready in text, text
    _choose(drv, method)
    tiny = [e for e in drv.find_elements(By.CSS_SELECTOR, "#preset label") if e.text.startswith("tiny")]
    assert tiny, "no tiny preset in the page"
    tiny[0].click()
    drv.find_element(By.CSS_SELECTOR, "#run").click()
    return _wait_text(drv, "#run-status", ("Done", "Failed", "Refused"), 400)


def test_surface_method_upload_run_view_download(server, browser, tmp_path, artifacts):
    """The demo ring's GLB as a reference mesh → the surface method's tiny run → the mesh viewer draws it (the
    Gaussian viewer is hidden) → every download link serves its file."""
    from selenium.webdriver.common.by import By

    from meshlift.data.demo_object import make_demo_object
    from meshlift.io.glb import save_glb

    url, _ = server
    ring = save_glb(tmp_path / "ring.glb", make_demo_object())
    done = _run_tiny(browser, url, ring, "nvdiffrec", "reference mesh ring.glb")
    assert "Done" in done and "PSNR" in done and "F-score" in done, done
    png, varied = _drawn(browser, "#viewer")
    if varied:
        (artifacts / "app_viewer.png").write_bytes(png)
        time.sleep(2.0)  # let the viewer settle for the page screenshot
    browser.save_screenshot(str(artifacts / "app_done.png"))
    html = browser.find_element(By.CSS_SELECTOR, "#viewer").get_attribute("outerHTML")[-1500:]
    assert varied, f"the 3D viewer shows no model (its canvas is missing or one flat colour): {html}"
    assert not any(e.is_displayed() for e in browser.find_elements(By.CSS_SELECTOR, "#splat-viewer"))
    got = _downloads(browser, {"mesh.glb", "mesh_obj.zip", "mesh.ply", "metrics.json"})
    assert got["mesh.glb"][:4] == b"glTF"
    names = zipfile.ZipFile(io.BytesIO(got["mesh_obj.zip"])).namelist()
    assert any(n.endswith(".obj") for n in names) and any(n.endswith(".mtl") for n in names), names
    assert any(n.endswith(".png") for n in names), names
    assert got["mesh.ply"].startswith(b"ply")
    m = json.loads(got["metrics.json"])
    assert m["psnr"] > 10 and 0.0 <= m["fscore"] <= 1.0


def test_gaussians_upload_run_view_download(server, browser, posed_zip, artifacts):
    """Posed photos (a zip) → the Gaussian method's tiny run → the Gaussian viewer draws the splats (no mesh
    viewer: the method writes no mesh) → the PLY of the Gaussians and the metrics download."""
    from selenium.webdriver.common.by import By

    url, _ = server
    done = _run_tiny(browser, url, posed_zip, "gaussians", "10 photos with cameras")
    assert "Done" in done and "test PSNR" in done and "Gaussians" in done, done
    png, varied = _drawn(browser, "#splat-viewer")
    if png is not None:
        (artifacts / "app_gaussians_viewer.png").write_bytes(png)
    browser.save_screenshot(str(artifacts / "app_gaussians_done.png"))
    assert varied, "the Gaussian viewer shows no splats (its canvas is missing or one flat colour)"
    assert not any(e.is_displayed() for e in browser.find_elements(By.CSS_SELECTOR, "#viewer"))
    got = _downloads(browser, {"point_cloud.ply", "metrics.json"})
    assert got["point_cloud.ply"].startswith(b"ply") and b"f_dc_0" in got["point_cloud.ply"][:2000]
    assert json.loads(got["metrics.json"])["method"] == "gaussians"


def test_milo_upload_run_view_download(server, browser, posed_zip, artifacts):
    """Posed photos → MILo's tiny run → both viewers draw (the mesh as GLB, the Gaussians as splats) → the
    mesh files, the Gaussians' PLY and the metrics download."""
    url, _ = server
    done = _run_tiny(browser, url, posed_zip, "milo", "10 photos with cameras")
    assert "Done" in done and "mesh render PSNR" in done, done
    mesh_png, mesh_drawn = _drawn(browser, "#viewer")
    splat_png, splat_drawn = _drawn(browser, "#splat-viewer")
    for name, png in (("app_milo_mesh_viewer.png", mesh_png), ("app_milo_gaussians_viewer.png", splat_png)):
        if png is not None:
            (artifacts / name).write_bytes(png)
    browser.save_screenshot(str(artifacts / "app_milo_done.png"))
    assert mesh_drawn, "the mesh viewer shows no model"
    assert splat_drawn, "the Gaussian viewer shows no splats"
    got = _downloads(browser, {"mesh.glb", "mesh_obj.zip", "mesh.ply", "point_cloud.ply", "metrics.json"})
    assert got["mesh.glb"][:4] == b"glTF" and got["point_cloud.ply"].startswith(b"ply")
    assert json.loads(got["metrics.json"])["method"] == "milo"
