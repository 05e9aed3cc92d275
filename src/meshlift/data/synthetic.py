"""Synthetic datasets: views of a known textured mesh rendered on the fly (nvdiffrec's ``DatasetMesh``).

nvdiffrec (Munkberg et al., CVPR 2022, Sec. 5.1 and its ``dataset/dataset_mesh.py``) evaluates its pipeline
on synthetic views of known meshes (spot, bob): the mesh is scaled into the unit cube, training cameras
are placed at random on a sphere around it, held-out cameras on a fixed orbit, and every image is rendered
with the same differentiable PBR renderer (here :func:`meshlift.renderers.mesh_pbr.render_mesh`) under an
environment light. Because the ground-truth ("gt") geometry is known, the reconstruction can be scored with
Chamfer distance / F-score in the mesh's own units. (In meshlift "reference" means only the naive twin of
a fast op, :mod:`meshlift.render.reference`; the images a method fits are its *targets*.)

Frames (docs/conventions.md §1): the *world* frame is the mesh file's; rendering, cameras given to the
optimiser (:meth:`SyntheticDataset.views`) and the light live in the *normalised* frame
``p_n = world_to_normalized @ p_w`` (bounding-box centre at the origin, longest side 2, i.e. inside
[-1, 1]³). :attr:`SyntheticDataset.cameras` are the same cameras expressed in the world frame, as a
:class:`meshlift.data.Scene` stores them. Cameras come from the package's one rig
(:func:`meshlift.cameras.random_directions`, :func:`~meshlift.cameras.orbit_directions`,
:func:`~meshlift.cameras.look_at_cameras`).

Images (conventions §6): the gt mesh is rendered over black; ``rgb_linear`` / ``images`` hold the
*straight* (un-premultiplied) linear HDR radiance ``shaded / alpha`` (0 where alpha = 0) and ``mask`` the
antialiased coverage, so compositing ``rgb_linear·mask + bg·(1 − mask)`` reproduces a render over any
background ``bg``. ``rgb`` is what a Scene reader returns: sRGB-encoded, clamped to [0, 1], composited on
``background``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional, Sequence, Union

import torch

from meshlift.errors import ConfigError, DatasetError, MeshError
from meshlift.geometry.similarity import transform_mesh
from meshlift.geometry.transforms import similarity_transform
from meshlift.shading.color import BACKGROUND_COLORS
from meshlift.structures.mesh import Mesh

#: Cache all rendered views in memory when they take at most this many bytes (else render per batch).
DEFAULT_CACHE_BYTES = 1 << 30

#: Alpha below which a pixel counts as empty when un-premultiplying the rendered colour.
_ALPHA_EPS = 1e-4



# ---------------------------------------------------------------------------------------------------------
# normalisation


def normalization_transform(mesh: Mesh) -> torch.Tensor:
    """The similarity that maps ``mesh`` into the unit cube: ``p_n = s (p_w − c)``.

    ``c`` is the centre of the axis-aligned bounding box and ``s = 2 / longest side``, so the mesh spans
    [-1, 1] along its longest axis (nvdiffrec's ``mesh.unit_size``). Conventions §1.

    Args:
        mesh: mesh in world units (only ``v_pos [V, 3]`` is read).

    Returns:
        ``world_to_normalized [4, 4]`` float64 on the CPU.

    Raises:
        MeshError: empty mesh, non-finite positions, or all vertices at one point.
    """
    if mesh.num_vertices == 0:
        raise MeshError("normalization_transform: the mesh has no vertices")
    v = mesh.v_pos.detach().double().cpu()
    if not bool(torch.isfinite(v).all()):
        raise MeshError("normalization_transform: v_pos holds NaN or infinite values; clean the mesh first")
    lo, hi = v.min(0).values, v.max(0).values
    extent = float((hi - lo).max())
    if extent <= 0.0:
        raise MeshError("normalization_transform: every vertex is at the same point; the mesh has no size")
    return similarity_transform(2.0 / extent, -0.5 * (lo + hi))


def load_normalized_mesh(path: Union[str, Path]) -> tuple[Mesh, torch.Tensor]:
    """Read a gt mesh (OBJ + MTL with nvdiffrec ``bsdf pbr`` Ks = ORM, GLB, PLY) into the unit cube.

    Uses :func:`meshlift.io.mesh.load_mesh` (textures, UVs, the ORM ``Ks`` of nvdiffrec MTL files, see the
    spot / bob data READMEs) and :func:`normalization_transform`.

    Args:
        path: mesh file.

    Returns:
        ``(mesh_normalized, world_to_normalized)``: the mesh moved into [-1, 1]³ (bounding-box centre at the
        origin, longest side 2), and the ``[4, 4]`` float64 similarity used (apply its inverse to go back to
        the file's units). The transform is also recorded as ``mesh.extras["world_to_normalized"]``.

    Raises:
        MeshError: unreadable file, or a file without faces (a 3DGS point cloud, a point cloud: the
            message names what it holds).
    """
    from meshlift.io.mesh import load_surface_mesh

    mesh = load_surface_mesh(path, "a synthetic scene renders the triangles of a mesh")
    T = normalization_transform(mesh)
    out = transform_mesh(mesh, T)
    out.extras = {**mesh.extras, "world_to_normalized": T, "source": str(path)}
    return out, T


#: :func:`close_scan_holes` closes a truth mesh's holes only when its border edges are at most this share of its
#: edges (a scan with a few holes in its base, e.g. the Stanford bunny: 223 of 104,288 edges, 0.2 %); a mesh
#: open by design (the teapot: 10.4 %) is left as it is.
SCAN_HOLE_MAX_BORDER_FRAC = 0.02


def close_scan_holes(mesh: Mesh, *, max_border_frac: float = SCAN_HOLE_MAX_BORDER_FRAC) -> tuple[Mesh, dict]:
    """``(mesh, report)``: a known-truth mesh with the holes of a range scan closed, for evaluation.

    Why: the methods that score against a truth (F-score at 1 % of the bbox diagonal) make watertight meshes
    (TSDF fusion closes what no view saw, :mod:`meshlift.methods.milo.tsdf_mesh`). Against an *open* truth
    (the Stanford bunny's scan has 5 holes in its base) the closing cap of a correct reconstruction counts as
    wrong surface (precision) — an error of the truth, not of the method. So a truth whose border edges (edges
    of one face) are at most ``max_border_frac`` of its edges gets every border loop closed
    (:func:`meshlift.mesh.fill.fill_holes` with no size bound: a triangle or a fan around the loop's centroid);
    a mesh with more (open on purpose: the teapot, 10.4 %) is returned unchanged.

    Args:
        mesh: triangle mesh (``v_pos [V, 3]``, ``t_pos_idx [F, 3]`` int64, any units); not modified.
        max_border_frac: the largest share of border edges among all edges that still counts as holes (>= 0).

    Returns:
        ``(mesh, report)``: the closed mesh (the input itself when nothing was closed; fill faces and vertices are
        appended), and ``{"border_edges": int, "edges": int, "border_frac": float, "holes": int (border loops
        before), "closed": bool, "holes_closed": int, "faces_added": int}``.

    Raises:
        MeshError: a mesh without faces, or a negative ``max_border_frac``.
    """
    import numpy as np

    from meshlift.mesh.fill import fill_holes
    from meshlift.mesh.rows import unique_rows

    if mesh.num_faces == 0:
        raise MeshError("close_scan_holes: the mesh has no faces")
    if not (max_border_frac >= 0):
        raise MeshError(f"close_scan_holes: max_border_frac must be >= 0, got {max_border_frac!r}")
    F = mesh.t_pos_idx.detach().cpu().numpy().astype(np.int64)
    e = np.sort(np.concatenate([F[:, [0, 1]], F[:, [1, 2]], F[:, [2, 0]]]), axis=1)
    _, counts = unique_rows(e, return_counts=True)
    border, edges = int((counts == 1).sum()), int(counts.shape[0])
    rep = {"border_edges": border, "edges": edges, "border_frac": border / max(edges, 1), "holes": 0,
           "closed": False, "holes_closed": 0, "faces_added": 0}
    if border == 0:
        return mesh, rep
    if rep["border_frac"] > max_border_frac:
        from meshlift.mesh.fill import boundary_loops

        rep["holes"] = len(boundary_loops(F)[0])
        return mesh, rep
    out, frep = fill_holes(mesh, max_edges=0)
    rep.update(holes=int(frep.loops), closed=frep.filled > 0, holes_closed=int(frep.filled),
               faces_added=int(frep.faces_added))
    return out, rep


# ---------------------------------------------------------------------------------------------------------
# light


def make_synthetic_light(
    env: Union[str, Path] = "procedural",
    env_kind: str = "studio",
    *,
    env_res: int = 128,
    device: Union[str, torch.device] = "cpu",
):
    """The environment light a synthetic scene is rendered under (nvdiffrec renders spot/bob under an HDR probe).

    Args:
        env: ``"procedural"`` (``meshlift.shading.procedural.procedural_environment``, a lat-long map of
            height ``2 · env_res``, so its texels match the cube faces' angular size) or the path
            of a lat-long ``.hdr`` / ``.exr`` file (linear radiance, conventions §8).
        env_kind: kind of procedural environment (e.g. ``"studio"``, ``"high_frequency"``).
        env_res: side of each cube-map face in pixels.
        device: where the light lives.

    Returns:
        A :class:`meshlift.shading.light.EnvironmentLight` with its mips built, not trainable.

    Raises:
        ConfigError: ``env`` is neither ``"procedural"`` nor an existing file.
    """
    from meshlift.shading.light import EnvironmentLight

    device = torch.device(device)
    if str(env) == "procedural":
        from meshlift.shading.procedural import procedural_environment

        env_map = procedural_environment(height=2 * int(env_res), kind=env_kind)  # lat-long [2R, 4R, 3]
    else:
        p = Path(env)
        if not p.is_file():
            raise ConfigError(
                f"synthetic-scene environment {str(env)!r} is neither 'procedural' nor an existing .hdr/.exr file"
            )
        from meshlift.io.hdr import read_hdr

        env_map = read_hdr(p)
    if isinstance(env_map, EnvironmentLight):
        light = env_map
    else:
        env_map = torch.as_tensor(env_map, dtype=torch.float32)
        if env_map.ndim == 4 and env_map.shape[0] == 6:  # a cube map [6, R, R, 3]
            light = EnvironmentLight(env_map.to(device), trainable=False)
        elif env_map.ndim == 3 and env_map.shape[-1] == 3:  # a lat-long map [H, 2H, 3]
            light = EnvironmentLight.from_latlong(env_map.to(device), int(env_res), trainable=False)
        else:
            raise ConfigError(
                f"synthetic-scene environment {str(env)!r} gave an array of shape {tuple(env_map.shape)}; expected a "
                "lat-long [H, 2H, 3] or cube map [6, R, R, 3]"
            )
    if hasattr(light, "to"):
        moved = light.to(device)
        light = moved if moved is not None else light
    light.build_mips()
    return light


# ---------------------------------------------------------------------------------------------------------
# cameras


def _make_cameras(dirs: torch.Tensor, radius: float, fov: float, H: int, W: int):
    """Cameras at ``radius · dirs`` looking at the origin, +Y up, full *vertical* field of view ``fov``."""
    from meshlift.cameras import look_at_cameras

    return look_at_cameras(radius * dirs, (0.0, 0.0, 0.0), (0.0, 1.0, 0.0), fov, (W, H), near=radius / 100.0,
                           far=radius * 10.0, fov_side="height")


# ---------------------------------------------------------------------------------------------------------
# the dataset


class SyntheticDataset:
    """Training / held-out views of a gt mesh, rendered with meshlift's own rasterizer.

    Duck-types the parts of :class:`meshlift.data.Scene` a training loop reads (``cameras``, ``splits``,
    ``background``, ``world_to_normalized``, ``image(i)``, ``mask(i)``, ``load_batch``, ``len``), and adds
    :meth:`views` (all views of a split in the normalised frame, linear radiance), ``gt_mesh`` (the
    ground truth in world units), ``mesh_normalized`` and ``light``.

    Views ``0 .. n_train − 1`` are the training split: cameras at uniformly random directions on a sphere
    of radius ``radius`` around the origin of the normalised frame (seeded). Views
    ``n_train .. n_train + n_test − 1`` are the test split: an orbit around +Y at elevation
    ``test_elevation``, evenly spaced in azimuth. Every camera looks at the origin with +Y up, full
    vertical field of view ``fov``. Images are rendered by
    :func:`meshlift.renderers.mesh_pbr.render_mesh` over black with ``spp`` supersampling, batched by
    ``render_batch``; they are cached in memory (on the CPU) when all views fit in ``cache_bytes``, else
    rendered again for each request (the renderer is deterministic).
    """

    def __init__(
        self,
        mesh: Mesh,
        *,
        light=None,
        env: Union[str, Path] = "procedural",
        env_kind: str = "studio",
        env_res: int = 128,
        n_train: int = 64,
        n_test: int = 8,
        resolution: Union[int, Sequence[int]] = 256,
        fov: float = math.radians(45.0),
        radius: float = 3.0,
        test_elevation: float = 0.4,
        seed: int = 0,
        spp: int = 1,
        background: str = "white",
        normalize: bool = True,
        world_to_normalized: Optional[torch.Tensor] = None,
        render_batch: int = 4,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        device: Union[str, torch.device] = "cpu",
    ) -> None:
        """Set up cameras and light; rendering happens on first use.

        Args:
            mesh: the gt mesh in world units (its ``material`` textures are used, else grey).
                Not modified.
            light: an ``EnvironmentLight`` in the normalised frame with its ``build_mips()`` done, or None
                to build one from ``env`` / ``env_kind`` / ``env_res`` with :func:`make_synthetic_light`.
            env, env_kind, env_res: see :func:`make_synthetic_light` (ignored when ``light`` is given).
            n_train: number of training views (>= 1).
            n_test: number of held-out views (>= 1).
            resolution: image size, ``S`` (square) or ``(H, W)``, pixels.
            fov: full vertical field of view, radians.
            radius: camera distance from the origin of the normalised frame.
            test_elevation: elevation of the test orbit above the XZ plane, radians.
            seed: seeds the training camera directions.
            spp: supersampling per axis of the renders (>= 1); 1 as nvdiffrec (its training ``spp``), 2 gives
                smoother target silhouettes at 4x the cost.
            background: what ``rgb`` / :meth:`image` are composited on: ``"white"`` or ``"black"``.
            normalize: scale the mesh into [-1, 1]³ (:func:`normalization_transform`); False keeps the world
                frame as the normalised frame (identity).
            world_to_normalized: give the normalisation explicitly instead (``[4, 4]`` similarity); then
                ``normalize`` is ignored.
            render_batch: views rendered per renderer call (bounds memory).
            cache_bytes: keep all rendered views in memory when they take at most this many bytes.
            device: where rendering runs.

        Raises:
            DatasetError: bad counts, sizes or background; MeshError: empty mesh.
        """
        if mesh.num_faces == 0:
            raise MeshError("SyntheticDataset: the gt mesh has no faces; nothing to render")
        if int(n_train) < 1 or int(n_test) < 1:
            raise DatasetError(f"SyntheticDataset: n_train and n_test must be >= 1, got {n_train}, {n_test}")
        if isinstance(resolution, int):
            H = W = int(resolution)
        else:
            H, W = (int(r) for r in resolution)
        if H < 1 or W < 1:
            raise DatasetError(f"SyntheticDataset: resolution must be positive, got {resolution!r}")
        if int(spp) < 1 or int(render_batch) < 1:
            raise DatasetError(f"SyntheticDataset: spp and render_batch must be >= 1, got {spp}, {render_batch}")
        if background not in BACKGROUND_COLORS:
            raise DatasetError(
                f"SyntheticDataset: background must be one of {sorted(BACKGROUND_COLORS)}, got {background!r}"
            )
        if not 0.0 < float(fov) < math.pi:
            raise DatasetError(f"SyntheticDataset: fov must be in (0, pi) radians, got {fov}")
        if float(radius) <= math.sqrt(3.0):
            raise DatasetError(
                f"SyntheticDataset: radius {radius} puts cameras inside the unit cube's bounding sphere "
                "(sqrt(3)); use a radius of about 3"
            )
        self.device = torch.device(device)
        self.height, self.width = H, W
        self.spp = int(spp)
        self.render_batch = int(render_batch)
        self.background = background
        self.n_train, self.n_test = int(n_train), int(n_test)

        if world_to_normalized is not None:
            T = torch.as_tensor(world_to_normalized, dtype=torch.float64).cpu()
        elif normalize:
            T = normalization_transform(mesh)
        else:
            T = torch.eye(4, dtype=torch.float64)
        self.world_to_normalized = T
        #: The ground truth in world units (the input mesh), for Chamfer / F-score in its own units.
        self.gt_mesh = mesh
        #: The mesh in the normalised frame, as rendered.
        self.mesh_normalized = transform_mesh(mesh, T).to(self.device)

        from meshlift.cameras import orbit_directions, random_directions

        dirs = torch.cat([random_directions(self.n_train, seed), orbit_directions(self.n_test, test_elevation)])
        #: Cameras in the normalised frame (what rendering and :meth:`views` use).
        self.cameras_normalized = _make_cameras(dirs, float(radius), float(fov), H, W)
        #: The same cameras in the world frame (as :class:`meshlift.data.Scene` stores them).
        self.cameras = self.cameras_normalized.transform_world(torch.linalg.inv(T))
        n = self.n_train + self.n_test
        self.splits = {
            "train": torch.arange(0, self.n_train),
            "test": torch.arange(self.n_train, n),
        }
        self.light = light if light is not None else make_synthetic_light(
            env, env_kind, env_res=env_res, device=self.device
        )
        self._cache_ok = n * H * W * 4 * 4 <= int(cache_bytes)
        self._cache: Optional[tuple[torch.Tensor, torch.Tensor]] = None

    # -- sizes ------------------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return self.n_train + self.n_test

    @property
    def resolution(self) -> tuple[int, int]:
        """``(H, W)`` of every view."""
        return self.height, self.width

    @property
    def has_masks(self) -> bool:
        """Always True: every rendered view has its coverage mask."""
        return True

    # -- rendering ------------------------------------------------------------------------------------------
    def _index(self, indices) -> torch.Tensor:
        idx = torch.as_tensor(indices).long().reshape(-1)
        n = len(self)
        if idx.numel() and (int(idx.min()) < -n or int(idx.max()) >= n):
            raise IndexError(f"view index out of range for {n} views: {idx.tolist()}")
        return idx % n

    @torch.no_grad()
    def _render(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Straight linear colour ``[B, H, W, 3]`` and coverage ``[B, H, W, 1]`` of views ``idx`` (on the CPU)."""
        from meshlift.renderers.mesh_pbr import render_mesh

        cams = self.cameras_normalized[idx].to(self.device)
        w2c = cams.world_to_clip()
        centres = cams.camera_centers()
        rgbs, alphas = [], []
        for s in range(0, idx.numel(), self.render_batch):
            sl = slice(s, s + self.render_batch)
            out = render_mesh(
                self.mesh_normalized, w2c[sl], centres[sl], (self.height, self.width), light=self.light, spp=self.spp
            )
            alpha = out["alpha"].clamp(0.0, 1.0)
            rgb = torch.where(alpha > _ALPHA_EPS, out["shaded"] / alpha.clamp_min(_ALPHA_EPS), torch.zeros_like(out["shaded"]))
            rgbs.append(rgb.float().cpu())
            alphas.append(torch.where(alpha > _ALPHA_EPS, alpha, torch.zeros_like(alpha)).float().cpu())
        return torch.cat(rgbs), torch.cat(alphas)

    def _get(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self._cache_ok:
            if self._cache is None:
                self._cache = self._render(torch.arange(len(self)))
            return self._cache[0][idx], self._cache[1][idx]
        return self._render(idx)

    def _composite_srgb(self, rgb_linear: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        from meshlift.shading.color import linear_to_srgb

        bg = torch.tensor(BACKGROUND_COLORS[self.background], dtype=rgb_linear.dtype, device=rgb_linear.device)
        return linear_to_srgb((rgb_linear * mask + bg * (1.0 - mask)).clamp(0.0, 1.0))

    # -- Scene-like access ----------------------------------------------------------------------------------
    def load_batch(self, indices, device: Union[str, torch.device, None] = None) -> dict:
        """Views ``indices`` stacked on ``device`` (default: the rendering device).

        Returns:
            dict with ``rgb [B, H, W, 3]`` (sRGB, clamped, composited on ``background``, as a Scene gives),
            ``rgb_linear [B, H, W, 3]`` (straight linear HDR radiance, 0 where empty), ``mask [B, H, W, 1]``
            (coverage in [0, 1]), ``world_to_clip [B, 4, 4]`` and ``camera_pos [B, 3]`` in the normalised
            frame, and ``indices`` (LongTensor ``[B]``).
        """
        idx = self._index(indices)
        dev = self.device if device is None else torch.device(device)
        rgb_lin, mask = self._get(idx)
        cams = self.cameras_normalized[idx]
        return {
            "rgb": self._composite_srgb(rgb_lin, mask).to(dev),
            "rgb_linear": rgb_lin.to(dev),
            "mask": mask.to(dev),
            "world_to_clip": cams.world_to_clip().to(dev),
            "camera_pos": cams.camera_centers().to(dev),
            "indices": idx,
        }

    def image(self, i: int) -> torch.Tensor:
        """View ``i`` as ``[H, W, 3]`` sRGB in [0, 1] composited on ``background`` (like ``Scene.image``)."""
        return self.load_batch([i], "cpu")["rgb"][0]

    def mask(self, i: int) -> torch.Tensor:
        """Coverage mask ``[H, W, 1]`` of view ``i`` (like ``Scene.mask``)."""
        return self.load_batch([i], "cpu")["mask"][0]

    alpha = mask

    def views(self, split: str) -> dict:
        """All views of ``split`` (``"train"`` or ``"test"``) on the CPU, in the normalised frame.

        Returns:
            dict with ``world_to_clip [N, 4, 4]``, ``camera_pos [N, 3]``, ``images [N, H, W, 3]`` (straight
            linear HDR radiance) and ``masks [N, H, W, 1]``.

        Raises:
            DatasetError: unknown split.
        """
        if split not in self.splits:
            raise DatasetError(f"SyntheticDataset.views: unknown split {split!r}; use 'train' or 'test'")
        b = self.load_batch(self.splits[split], "cpu")
        return {"world_to_clip": b["world_to_clip"], "camera_pos": b["camera_pos"], "images": b["rgb_linear"],
                "masks": b["mask"]}


__all__ = ["SCAN_HOLE_MAX_BORDER_FRAC", "SyntheticDataset", "close_scan_holes", "load_normalized_mesh", "make_synthetic_light", "normalization_transform"]
