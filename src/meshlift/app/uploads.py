"""Upload handling for the web app: limits, safe zip extraction, input classification, session folders.

Nothing here imports gradio or torch. Every refusal raises :class:`UploadError` (a
:class:`meshlift.errors.MeshliftError`) whose message is shown in the page as is.

Safety rules (issue 12): uploads are limited in count and size (per file and in total, zip contents
included); a zip member with an absolute path, a drive letter, a ``..`` component or a symbolic link is
refused (zip-slip), as is any suffix outside :data:`ALLOWED_SUFFIXES`; each browser session gets its own
folder under :attr:`Limits.root`, deleted when the tab closes, after :attr:`Limits.max_age_s`, or when the
app stops (:func:`clear_on_stop`: every session folder this process made, at exit or on SIGTERM).

A ``.ply`` upload is checked from its header (:func:`meshlift.io.ply_header.ply_contents`): a 3D Gaussian
splatting point cloud, a point cloud or an empty file is refused naming what it holds, since the app needs
a reference mesh with faces (or photos).
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import threading
import stat
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Iterable, Optional

from meshlift import _env
from meshlift.errors import MeshliftError

IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".exr", ".hdr", ".webp", ".tif", ".tiff", ".bmp"})
MESH_SUFFIXES = frozenset({".obj", ".ply", ".glb"})
"""Reference meshes (``.mtl`` and textures may accompany an ``.obj``)."""
META_SUFFIXES = frozenset({".json", ".mtl", ".txt", ".bin", ".npy"})
"""transforms.json, OBJ materials, COLMAP models (cameras/images/points3D .txt/.bin), LLFF poses_bounds.npy."""
ARCHIVE_SUFFIXES = frozenset({".zip"})
ALLOWED_SUFFIXES = IMAGE_SUFFIXES | MESH_SUFFIXES | META_SUFFIXES | ARCHIVE_SUFFIXES

_COLMAP_NAMES = {"cameras.txt", "images.txt", "points3d.txt", "cameras.bin", "images.bin", "points3d.bin"}


class UploadError(MeshliftError):
    """An upload was refused (too large, too many files, unsafe archive, unknown file type)."""


def _env_int(name: str, default: int) -> int:
    try:
        return int(_env.get(name) or default)
    except ValueError:
        return default


@dataclass
class Limits:
    """Upload limits; the server's environment sets the defaults (``MESHLIFT_APP_MAX_FILES``,
    ``MESHLIFT_APP_MAX_FILE_MB``, ``MESHLIFT_APP_MAX_TOTAL_MB``, ``MESHLIFT_APP_MAX_AGE_S``, ``MESHLIFT_APP_ROOT``:
    docs/usage/environment.md)."""

    max_files: int = field(default_factory=lambda: _env_int("MESHLIFT_APP_MAX_FILES", 500))
    """Most files per upload, counting the members of zip archives."""
    max_file_mb: int = field(default_factory=lambda: _env_int("MESHLIFT_APP_MAX_FILE_MB", 50))
    """Largest single file (an uploaded file or an extracted zip member), MiB."""
    max_total_mb: int = field(default_factory=lambda: _env_int("MESHLIFT_APP_MAX_TOTAL_MB", 500))
    """Largest upload in total after extraction, MiB."""
    max_age_s: int = field(default_factory=lambda: _env_int("MESHLIFT_APP_MAX_AGE_S", 3600))
    """Session folders older than this are deleted (seconds)."""
    root: Path = field(default_factory=lambda: Path(
        _env.get("MESHLIFT_APP_ROOT") or str(Path(tempfile.gettempdir()) / "meshlift_app")))
    """Parent folder of the per-session folders."""

    @property
    def max_file_bytes(self) -> int:
        return self.max_file_mb * 1024 * 1024

    @property
    def max_total_bytes(self) -> int:
        return self.max_total_mb * 1024 * 1024


def _mb(n: int) -> str:
    return f"{n / (1024 * 1024):.1f} MiB"


def check_member_name(name: str) -> PurePosixPath:
    """The safe relative path of a zip member ``name``; raises UploadError for zip-slip names."""
    if "\\" in name:
        name = name.replace("\\", "/")
    p = PurePosixPath(name)
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        raise UploadError(f"refused archive: member {name!r} has an absolute path (zip-slip); "
                          "make the archive with relative paths")
    if any(part == ".." for part in p.parts):
        raise UploadError(f"refused archive: member {name!r} climbs out of the folder with '..' (zip-slip); "
                          "make the archive with relative paths inside one folder")
    return p


def safe_extract(archive: Path, dest: Path, limits: Limits, budget: list[int]) -> list[Path]:
    """Extract ``archive`` into ``dest`` after checking every member; returns the extracted files.

    ``budget`` is ``[files_left, bytes_left]`` (shared with the other uploaded files; decremented).
    Checks happen before anything is written: member names (zip-slip), symbolic links, suffixes, per-file
    and total uncompressed sizes, count.

    Raises:
        UploadError: not a zip, unsafe member, too large or too many files.
    """
    try:
        zf = zipfile.ZipFile(archive)
    except zipfile.BadZipFile:
        raise UploadError(f"{archive.name} is not a valid zip archive") from None
    with zf:
        members = []
        for info in zf.infolist():
            rel = check_member_name(info.filename)
            mode = info.external_attr >> 16
            if stat.S_ISLNK(mode):
                raise UploadError(f"refused archive: member {info.filename!r} is a symbolic link; archives may "
                                  "contain only plain files")
            if info.is_dir():
                continue
            if rel.name.startswith(".") or "__MACOSX" in rel.parts:
                continue  # Finder metadata
            suffix = rel.suffix.lower()
            if suffix not in ALLOWED_SUFFIXES - ARCHIVE_SUFFIXES:
                raise UploadError(f"refused archive: member {info.filename!r} has type {suffix or '(none)'}; "
                                  f"allowed: {', '.join(sorted(ALLOWED_SUFFIXES - ARCHIVE_SUFFIXES))}")
            if info.file_size > limits.max_file_bytes:
                raise UploadError(f"refused archive: member {info.filename!r} is {_mb(info.file_size)}; the limit "
                                  f"is {limits.max_file_mb} MiB per file")
            budget[0] -= 1
            budget[1] -= info.file_size
            if budget[0] < 0:
                raise UploadError(f"too many files: the limit is {limits.max_files} per upload (zip members "
                                  "included)")
            if budget[1] < 0:
                raise UploadError(f"upload too large: the limit is {limits.max_total_mb} MiB in total after "
                                  "extraction")
            members.append((info, rel))
        out = []
        dest_resolved = dest.resolve()
        for info, rel in members:
            target = (dest / Path(*rel.parts)).resolve()
            if dest_resolved not in target.parents:
                raise UploadError(f"refused archive: member {info.filename!r} resolves outside the folder")
            target.parent.mkdir(parents=True, exist_ok=True)
            written = 0
            with zf.open(info) as src, open(target, "wb") as dst:
                while True:  # the header sizes can lie: count what is really written
                    chunk = src.read(1 << 20)
                    if not chunk:
                        break
                    written += len(chunk)
                    if written > limits.max_file_bytes:
                        raise UploadError(f"refused archive: member {info.filename!r} is larger than its header "
                                          f"says (over {limits.max_file_mb} MiB)")
                    dst.write(chunk)
            out.append(target)
    return out


@dataclass
class Ingested:
    """What an upload turned into."""

    kind: str
    """``"mesh"`` (reference-mesh path), ``"posed"`` (photos with cameras) or ``"unposed"`` (photos only)."""
    path: str
    """The mesh file, or the dataset folder."""
    summary: str
    """One line for the page."""
    n_images: int = 0
    format: str = ""
    """Dataset format (``detect_format``) for posed photos."""


def _place_flat_files(files: list[Path], dest: Path) -> None:
    """Arrange loose uploaded files into the layout the readers expect.

    COLMAP model files go to ``sparse/0/`` and images to ``images/``; with a transforms json, each image goes
    where a frame's ``file_path`` points (matched by file name, kept inside ``dest``).
    """
    names = {p.name.lower() for p in files}
    jsons = [p for p in files if p.suffix.lower() == ".json"]
    targets: dict[str, PurePosixPath] = {}
    for j in jsons:
        try:
            frames = json.loads(j.read_text(encoding="utf-8")).get("frames", [])
        except (OSError, ValueError, AttributeError):
            continue
        for fr in frames if isinstance(frames, list) else []:
            fp = fr.get("file_path") if isinstance(fr, dict) else None
            if not isinstance(fp, str):
                continue
            try:
                rel = check_member_name(fp.lstrip("./") if fp.startswith("./") else fp)
            except UploadError:
                continue
            targets[rel.name.lower()] = rel
            targets.setdefault(rel.stem.lower(), rel)
    colmap = bool(names & _COLMAP_NAMES)
    for p in files:
        low = p.name.lower()
        if colmap and low in _COLMAP_NAMES:
            to = dest / "sparse" / "0" / p.name
        elif p.suffix.lower() in IMAGE_SUFFIXES and (low in targets or p.stem.lower() in targets):
            rel = targets.get(low) or targets[p.stem.lower()]
            to = dest / Path(*rel.parts)
            if not rel.suffix:
                to = to.with_suffix(p.suffix)
        elif colmap and p.suffix.lower() in IMAGE_SUFFIXES:
            to = dest / "images" / p.name
        else:
            to = dest / p.name
        if dest.resolve() not in to.resolve().parents:
            continue
        to.parent.mkdir(parents=True, exist_ok=True)
        if p.resolve() != to.resolve():
            shutil.move(str(p), str(to))


def _dataset_root(folder: Path) -> Path:
    """``folder``, or its only subfolder when a zip wrapped everything in one top folder."""
    entries = [e for e in folder.iterdir() if not e.name.startswith(".")]
    if len(entries) == 1 and entries[0].is_dir():
        return _dataset_root(entries[0])
    return folder


def ingest(uploaded: Iterable[str | Path], session_dir: Path, limits: Optional[Limits] = None) -> Ingested:
    """Copy the uploaded files (zips extracted safely) into ``session_dir/input`` and classify them.

    Args:
        uploaded: paths of the files the browser sent (gradio's temporary copies). Not modified.
        session_dir: this session's folder; ``input/`` inside it is replaced.
        limits: upload limits (default :class:`Limits`).

    Returns:
        :class:`Ingested`.

    Raises:
        UploadError: nothing uploaded, a limit exceeded, an unsafe archive, a file type not accepted, or a
            mix the app cannot use (e.g. two meshes).
    """
    limits = limits or Limits()
    paths = [Path(p) for p in uploaded if p]
    if not paths:
        raise UploadError("nothing uploaded: add photos (several files or one zip) or a mesh (.obj, .ply, .glb)")
    if len(paths) > limits.max_files:
        raise UploadError(f"too many files ({len(paths)}): the limit is {limits.max_files} per upload")
    budget = [limits.max_files, limits.max_total_bytes]
    for p in paths:
        suffix = p.suffix.lower()
        if suffix not in ALLOWED_SUFFIXES:
            raise UploadError(f"{p.name}: file type {suffix or '(none)'} is not accepted; upload images "
                              f"({', '.join(sorted(IMAGE_SUFFIXES))}), a mesh (.obj, .ply, .glb), camera files "
                              "(transforms.json, COLMAP .txt/.bin) or a .zip of them")
        size = p.stat().st_size
        if size > limits.max_file_bytes:
            raise UploadError(f"{p.name} is {_mb(size)}; the limit is {limits.max_file_mb} MiB per file "
                              "(resize the photos or upload fewer)")
        budget[1] -= size
        if budget[1] < 0:
            raise UploadError(f"upload too large: the limit is {limits.max_total_mb} MiB in total")
    dest = session_dir / "input"
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    loose: list[Path] = []
    try:
        for p in paths:
            if p.suffix.lower() in ARCHIVE_SUFFIXES:
                safe_extract(p, dest, limits, budget)
            else:
                budget[0] -= 1
                target = dest / p.name
                shutil.copyfile(p, target)
                loose.append(target)
        if loose:
            _place_flat_files(loose, dest)
    except UploadError:
        shutil.rmtree(dest, ignore_errors=True)
        raise
    return classify(dest)


def _check_reference_mesh(path: Path) -> None:
    """Refuse a ``.ply`` whose header says it holds no surface (3DGS splats, a point cloud, nothing)."""
    if path.suffix.lower() != ".ply":
        return
    from meshlift.io.ply_header import ply_contents

    info = ply_contents(path)
    if info is None or info.kind == "mesh":
        return  # unreadable headers are reported when the mesh is loaded
    fix = {"gaussians": "the app makes a mesh from photos or from a reference mesh; to look at the splats run "
                        f"`meshlift render {path.name} --turntable --out DIR`, or upload the photos they were "
                        "trained on",
           "point_cloud": "the app needs a reference mesh with faces (or photos); reconstruct a surface from the "
                          "points first",
           "empty": "export the mesh again"}[info.kind]
    raise UploadError(f"{path.name} holds {info.describe()}, not a mesh with faces; {fix}")


def classify(folder: Path) -> Ingested:
    """Decide what the files in ``folder`` are: a reference mesh, posed photos or unposed photos."""
    from meshlift.errors import DatasetError

    files = [p for p in folder.rglob("*") if p.is_file()]
    meshes = [p for p in files if p.suffix.lower() in MESH_SUFFIXES]
    images = [p for p in files if p.suffix.lower() in IMAGE_SUFFIXES]
    root = _dataset_root(folder)
    fmt = None
    try:
        from meshlift.data import detect_format

        fmt = detect_format(root)
    except DatasetError:
        fmt = None
    if fmt is not None:
        return Ingested("posed", str(root), f"{len(images)} photos with cameras ({fmt} format)", len(images), fmt)
    if meshes:
        if len(meshes) > 1:
            raise UploadError(f"{len(meshes)} meshes uploaded ({', '.join(p.name for p in meshes[:4])}); upload "
                              "one reference mesh (with its .mtl and textures for an .obj)")
        m = meshes[0]
        _check_reference_mesh(m)
        return Ingested("mesh", str(m), f"reference mesh {m.name} ({_mb(m.stat().st_size)})")
    if images:
        return Ingested("unposed", str(root), f"{len(images)} photos without camera poses", len(images))
    raise UploadError("no photos or mesh found in the upload")


#: Session folders this process made (resolved paths): what :func:`clear_sessions` deletes.
_MADE: set[Path] = set()
_MADE_LOCK = threading.Lock()


def session_folder(limits: Limits, session_id: str) -> Path:
    """This session's folder (created), after deleting every session folder older than ``limits.max_age_s``.
    The folder is remembered for :func:`clear_sessions` (when the app stops)."""
    safe = "".join(c for c in session_id if c.isalnum() or c in "-_")[:64] or "anonymous"
    limits.root.mkdir(parents=True, exist_ok=True)
    sweep(limits)
    d = limits.root / safe
    d.mkdir(parents=True, exist_ok=True)
    os.utime(d)
    with _MADE_LOCK:
        _MADE.add(d.resolve())
    return d


def clear_sessions(limits: Optional[Limits] = None) -> list[Path]:
    """Delete every session folder this process made (under ``limits.root`` when given, else anywhere), and
    ``limits.root`` itself when that leaves it empty. Folders of other processes (another app on the same
    root) are left alone: :func:`sweep` removes them by age. Returns the folders deleted."""
    root = None if limits is None else limits.root.resolve()
    gone = []
    with _MADE_LOCK:
        for d in sorted(_MADE):
            if root is not None and d.parent != root:
                continue
            if d.is_dir() and not d.is_symlink():
                shutil.rmtree(d, ignore_errors=True)
            _MADE.discard(d)
            gone.append(d)
    if root is not None:
        try:
            root.rmdir()  # only when empty
        except OSError:
            pass
    return gone


def clear_on_stop(limits: Limits) -> None:
    """Delete this process's session folders when the app stops: at interpreter exit (``atexit``: a normal
    stop, Ctrl-C, the CLI's exit) and on SIGTERM (a service manager's stop, ``kill``), which otherwise ends
    the process without exit handlers. A SIGTERM handler is installed only from the main thread and only
    when none is set (the default action); it clears the folders and exits with 128 + 15."""
    atexit.register(clear_sessions, limits)
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
        def on_term(signum, frame):  # noqa: ARG001
            clear_sessions(limits)
            raise SystemExit(128 + signal.SIGTERM)

        signal.signal(signal.SIGTERM, on_term)


def sweep(limits: Limits, now: Optional[float] = None) -> list[Path]:
    """Delete session folders not touched for ``limits.max_age_s`` seconds; returns those deleted."""
    now = time.time() if now is None else now
    gone = []
    if not limits.root.is_dir():
        return gone
    for d in limits.root.iterdir():
        try:
            if d.is_dir() and not d.is_symlink() and now - d.stat().st_mtime > limits.max_age_s:
                shutil.rmtree(d, ignore_errors=True)
                gone.append(d)
        except OSError:
            continue
    return gone


def delete_session(limits: Limits, session_id: str) -> None:
    """Delete this session's folder (called when the browser tab closes)."""
    safe = "".join(c for c in session_id if c.isalnum() or c in "-_")[:64]
    if safe:
        shutil.rmtree(limits.root / safe, ignore_errors=True)


__all__ = ["ALLOWED_SUFFIXES", "Ingested", "Limits", "UploadError", "check_member_name", "classify",
           "clear_on_stop", "clear_sessions", "delete_session", "ingest", "safe_extract", "session_folder", "sweep"]
