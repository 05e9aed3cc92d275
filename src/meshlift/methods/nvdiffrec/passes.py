"""Two-pass surface reconstruction with PBR materials and an HDR environment light (nvdiffrec).

Source: Munkberg et al., "Extracting Triangular 3D Models, Materials, and Lighting From Images", CVPR 2022
(nvdiffrec), sections 3-5; FlexiCubes: Shen et al., SIGGRAPH 2023. The pieces, in order:

- **Training views** (:class:`TrainViews`): clip matrices, camera centres, linear images and masks in the
  *normalised* frame (conventions §1), from a dataset folder (``meshlift.data.load_scene``) or rendered
  on the fly from a reference mesh (``meshlift.methods.reference_data.ReferenceMeshDataset``).
- **Geometry** of pass 1: :class:`DMTetGeometry` (per-vertex SDF + bounded deformation on a regular
  tetrahedral grid, marching tetrahedra every step, the SDF sign-change regulariser) or
  :class:`FlexiGeometry` (FlexiCubes with its per-cube weights and the L_dev regulariser). The SDF can start
  as a sphere, random (nvdiffrec) or the *visual hull* carved from the training masks.
- **Materials**: a volumetric hash-grid field (``meshlift.shading.material_field.MaterialField``) in pass 1,
  mapped into the configured kd/ks ranges; baked into kd/ks textures on an xatlas atlas for pass 2, plus a
  learned tangent-space normal map.
- **Light**: a learned split-sum environment cube map, or a fixed one from an ``.hdr`` file.
- **Loss** (nvdiffrec): log-L1 on tone-mapped HDR colour (colour premultiplied by the reference mask where
  masks exist) + MSE of the antialiased coverage against the mask + regularisers.
- **Pass 1** (:func:`run_pass1`) optimises topology; **pass 2** (:func:`run_pass2`) keeps the topology,
  optimises textures, vertex offsets (with a Laplacian regulariser) and light.
- :func:`evaluate` renders the held-out views; :func:`reconstruct` runs everything, with checkpoints for
  ``--resume`` and the asset folder written by :mod:`meshlift.methods.outputs`.

Nothing here prints: progress goes through a :class:`Monitor` (the CLI passes a rich progress bar).
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from meshlift.errors import ConfigError, DatasetError, MeshError, MeshliftError, OutOfMemoryError
from meshlift.methods.config import SurfaceConfig, config_to_dict
from meshlift.structures.mesh import Material, Mesh

CHECKPOINT_NAME = "checkpoint.pt"


# =============================================================================================================
# progress reporting


class Monitor:
    """Receives progress events; the default does nothing (the CLI supplies a rich progress bar)."""

    def start_pass(self, name: str, total: int, start: int = 0) -> None:
        """A pass of ``total`` iterations begins (at ``start`` when resuming)."""

    def update(self, iteration: int, loss: float, psnr: float) -> None:
        """Iteration ``iteration`` (1-based count done) finished with these values."""

    def end_pass(self) -> None:
        """The current pass finished."""

    def log(self, message: str) -> None:
        """A one-line status message."""


# =============================================================================================================
# device, memory


def resolve_device(name: str) -> torch.device:
    """``auto`` → CUDA when available else CPU; otherwise ``torch.device(name)`` (ConfigError if unusable)."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(name)
    except RuntimeError as exc:
        raise ConfigError(f"config field 'device' = {name!r}: {exc}; use auto, cpu or cuda") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"config field 'device' = {name!r} but CUDA is not available; use device=cpu")
    return dev


def _is_oom(exc: BaseException) -> bool:
    if isinstance(exc, torch.cuda.OutOfMemoryError):
        return True
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()


def oom_error(cfg: SurfaceConfig, where: str) -> OutOfMemoryError:
    """The OutOfMemoryError to raise, naming the memory knobs and their current values."""
    return OutOfMemoryError(
        f"out of memory during {where}. Lower the memory knobs: batch={cfg.batch} (e.g. --set batch="
        f"{max(1, cfg.batch // 2)}), train_res={cfg.train_res} (e.g. --set train_res={max(64, cfg.train_res // 2)}), "
        f"data_device={cfg.data_device} (keep images on the CPU: --set data_device=cpu), max_fragments="
        f"{cfg.max_fragments} (rasterizer fragment budget, e.g. --set max_fragments=4000000), "
        f"grid_res={cfg.grid_res}, texture_res={cfg.texture_res}, spp={cfg.spp}"
    )


# =============================================================================================================
# training views


@dataclass
class TrainViews:
    """Posed images in the normalised frame (conventions §1), ready for the optimiser.

    Attributes:
        world_to_clip: ``[N, 4, 4]`` float32 normalised-frame → clip (conventions §3).
        camera_pos: ``[N, 3]`` camera centres in the normalised frame.
        images: ``[N, H, W, 3]`` float32 *linear* radiance (sRGB decoded), on the data device.
        masks: ``[N, H, W, 1]`` float32 coverage in [0, 1], or None when the dataset has none.
        background: ``[3]`` linear colour the images are (or are to be) composited on where masks exist.
        straight: True when ``images`` hold straight (un-premultiplied) colour that still has to be composited
            on ``background`` with the mask (rendered references); False when the reader already composited
            them (dataset folders, conventions §6).
    """

    world_to_clip: torch.Tensor
    camera_pos: torch.Tensor
    images: torch.Tensor
    masks: Optional[torch.Tensor]
    background: torch.Tensor
    straight: bool = False

    def __len__(self) -> int:
        return int(self.images.shape[0])

    @property
    def resolution(self) -> tuple[int, int]:
        return int(self.images.shape[1]), int(self.images.shape[2])

    def batch(self, idx: torch.Tensor, device: torch.device) -> dict:
        """Views ``idx`` on ``device``: dict(world_to_clip, camera_pos, images, masks or None)."""
        idx_d = idx.to(self.images.device)
        return {
            "world_to_clip": self.world_to_clip[idx.to(self.world_to_clip.device)].to(device),
            "camera_pos": self.camera_pos[idx.to(self.camera_pos.device)].to(device),
            "images": self.images[idx_d].to(device, non_blocking=True),
            "masks": None if self.masks is None else self.masks[idx_d].to(device, non_blocking=True),
            "straight": self.straight,
        }


@dataclass
class ProblemData:
    """Everything the optimiser needs from the input.

    Attributes:
        train / test: the training and held-out :class:`TrainViews`.
        world_to_normalized: ``[4, 4]`` float64 similarity world → normalised frame.
        reference_mesh: the ground-truth mesh in world units (reference-mesh mode), else None.
        reference_light: the environment the references were rendered under (reference-mesh mode), else None.
        name: a short name of the input for logs.
    """

    train: TrainViews
    test: TrainViews
    world_to_normalized: torch.Tensor
    reference_mesh: Optional[Mesh] = None
    reference_light: object = None
    name: str = ""


def _resize_images(x: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """Area-resize ``[N, H, W, C]`` to ``size = (H', W')`` (bilinear when enlarging)."""
    if tuple(x.shape[1:3]) == tuple(size):
        return x
    mode = "area" if size[0] <= x.shape[1] else "bilinear"
    y = F.interpolate(x.permute(0, 3, 1, 2), size=size, mode=mode, **({} if mode == "area" else {"align_corners": False}))
    return y.permute(0, 2, 3, 1).contiguous()


def _target_size(h: int, w: int, train_res: int) -> tuple[int, int]:
    if train_res <= 0 or max(h, w) <= train_res:
        return h, w
    s = train_res / max(h, w)
    return max(1, round(h * s)), max(1, round(w * s))


def _background_rgb(kind: str) -> torch.Tensor:
    if kind == "black":
        return torch.zeros(3)
    return torch.ones(3)


def _views_from_scene(scene, indices: list[int], cfg: SurfaceConfig) -> TrainViews:
    """Load, resize and linearise the views ``indices`` of a ``meshlift.data`` Scene."""
    from meshlift.shading.color import srgb_to_linear

    data_device = torch.device(cfg.data_device if cfg.data_device != "auto" else "cpu")
    if not indices:
        raise DatasetError(f"dataset {cfg.data}: a split has no views; check the dataset's split files")
    cams = scene.cameras[indices] if hasattr(scene.cameras, "__getitem__") else scene.cameras
    H0, W0 = int(cams.height), int(cams.width)
    H, W = _target_size(H0, W0, cfg.train_res)
    if (H, W) != (H0, W0):
        cams = cams.resize(W, H)
    bg = getattr(scene, "background", "white")
    bg_rgb = srgb_to_linear(_background_rgb(bg if isinstance(bg, str) else "white"))
    has_alpha = getattr(scene, "image_has_alpha", None)
    imgs, masks = [], []
    have_masks = True
    for i in indices:
        img = _resize_images(srgb_to_linear(scene.image(i)[..., :3].float().clamp(0, 1))[None], (H, W))[0]
        m = scene.mask(i) if hasattr(scene, "mask") else None
        if m is None:
            have_masks = False
        else:
            m = _resize_images(m[None].float(), (H, W))[0].clamp(0, 1)
            if not (has_alpha is not None and bool(has_alpha[i])):
                # a separate mask file (photos with a cluttered background): composite like the reader
                # composites alpha, so references, losses and metrics all see the object on the background
                img = img * m + bg_rgb * (1 - m)
            masks.append(m.to(data_device))
        imgs.append(img.to(data_device))
    images = torch.stack(imgs)
    mask_t = torch.stack(masks) if have_masks and masks else None
    n2w = torch.as_tensor(scene.world_to_normalized, dtype=torch.float64)
    w2n_inv = torch.linalg.inv(n2w)
    world_to_clip = (cams.world_to_clip().double() @ w2n_inv).float()
    centers_w = cams.camera_centers().double()
    centers_n = (n2w[:3, :3] @ centers_w.T).T + n2w[:3, 3]
    return TrainViews(world_to_clip, centers_n.float(), images, mask_t, bg_rgb)


def _split_indices(scene, name: str) -> list[int]:
    splits = getattr(scene, "splits", {}) or {}
    idx = splits.get(name)
    return [int(i) for i in idx] if idx is not None else []


def load_problem(cfg: SurfaceConfig, device: torch.device) -> ProblemData:
    """Read ``cfg.data`` (dataset folder or reference mesh file) into a :class:`ProblemData`."""
    path = Path(cfg.data)
    if not cfg.data:
        raise ConfigError("no input: give DATA (a dataset folder or a reference mesh file)")
    if not path.exists():
        raise DatasetError(f"input {path} does not exist; give a dataset folder or a mesh file (.obj, .glb, .ply)")
    if path.is_file():
        return _load_reference_problem(cfg, device)
    from meshlift.data import load_scene

    scene = load_scene(path, background="black" if cfg.background == "black" else "white")
    train_idx = _split_indices(scene, cfg.train_split)
    test_idx = _split_indices(scene, cfg.test_split) or _split_indices(scene, "val")
    n_all = len(scene.cameras)
    if not train_idx:
        train_idx = list(range(n_all))
    if not test_idx:
        test_idx = train_idx[::8]
        train_idx = [i for i in train_idx if i not in set(test_idx)] or train_idx
    if len(test_idx) > cfg.max_test_views > 0:
        sel = np.linspace(0, len(test_idx) - 1, cfg.max_test_views).round().astype(int)
        test_idx = [test_idx[i] for i in sel]
    train = _views_from_scene(scene, train_idx, cfg)
    test = _views_from_scene(scene, test_idx, cfg)
    return ProblemData(
        train=train,
        test=test,
        world_to_normalized=torch.as_tensor(scene.world_to_normalized, dtype=torch.float64),
        name=path.name,
    )


def _load_reference_problem(cfg: SurfaceConfig, device: torch.device) -> ProblemData:
    """Reference-mesh mode: render train/test views of the mesh under the reference environment."""
    from meshlift.io.mesh import load_mesh

    mesh = load_mesh(cfg.data)
    return reference_problem(mesh, cfg, device, name=Path(cfg.data).name)


def reference_problem(mesh: Mesh, cfg: SurfaceConfig, device: torch.device, name: str = "mesh") -> ProblemData:
    """Render training and held-out views of a reference ``mesh`` (world units) for ``cfg``."""
    from meshlift.methods.reference_data import ReferenceMeshDataset
    from meshlift.shading.color import srgb_to_linear

    if cfg.ref_ks is not None and mesh.material is not None:
        kd = mesh.material.kd
        ks = torch.tensor(cfg.ref_ks, dtype=torch.float32).expand(1, 1, 3).clone()
        mesh = dataclasses.replace(mesh, material=dataclasses.replace(mesh.material, ks=ks, kd=kd))
    ds = ReferenceMeshDataset(
        mesh,
        env=cfg.ref_env,
        env_kind=cfg.ref_env_kind,
        env_res=max(64, cfg.env_res),
        n_train=cfg.ref_views,
        n_test=cfg.ref_test_views,
        resolution=cfg.train_res,
        fov=math.radians(cfg.ref_fov_deg),
        radius=cfg.ref_camera_radius,
        seed=cfg.seed,
        background="black" if cfg.background == "black" else "white",
        device=device,
    )
    data_device = torch.device(cfg.data_device)
    bg = srgb_to_linear(_background_rgb(cfg.background))

    def views(split: str) -> TrainViews:
        b = ds.views(split)
        return TrainViews(
            world_to_clip=b["world_to_clip"].float().cpu(),
            camera_pos=b["camera_pos"].float().cpu(),
            images=b["images"].float().to(data_device),
            masks=b["masks"].float().to(data_device),
            background=bg,
            straight=True,
        )

    return ProblemData(
        train=views("train"),
        test=views("test"),
        world_to_normalized=ds.world_to_normalized.double().cpu(),
        reference_mesh=mesh,
        reference_light=ds.light,
        name=name,
    )


# =============================================================================================================
# geometry modules (pass 1)


def _grid_bounds(cfg: SurfaceConfig) -> tuple[float, float]:
    half = 0.5 * float(cfg.mesh_scale)
    return -half, half


class _GridGeometry(nn.Module):
    """Shared part of the pass-1 geometries: a vertex grid with a learnable SDF and bounded deformation.

    Deformed vertices are ``v + deform_scale · (cell / 2) · tanh(deform)``; ``sdf < 0`` inside
    (docs/conventions.md §10). Subclasses set ``verts`` and ``edges`` and implement ``get_mesh``.
    """

    def _init_grid(self, cfg: SurfaceConfig, verts: torch.Tensor, edges: torch.Tensor) -> None:
        self.grid_res = int(cfg.grid_res)
        self.register_buffer("verts", verts, persistent=False)
        self.register_buffer("edges", edges, persistent=False)
        self.max_offset = float(cfg.deform_scale) * 0.5 * float(cfg.mesh_scale) / self.grid_res
        self.sdf = nn.Parameter(torch.zeros(verts.shape[0], device=verts.device))
        self.deform = nn.Parameter(torch.zeros_like(verts))

    @property
    def grid_points(self) -> torch.Tensor:
        """``[N, 3]`` undeformed grid vertices (for SDF initialisation)."""
        return self.verts

    @property
    def grid_shape(self) -> tuple[int, int, int]:
        n = self.grid_res + 1
        return n, n, n  # tet grid and cube grid index vertices alike (conventions §10)

    def set_sdf(self, sdf: torch.Tensor) -> None:
        """Overwrite the SDF values (``[N]``, negative inside) without recording gradients."""
        with torch.no_grad():
            self.sdf.copy_(sdf.to(self.sdf))

    def deformed_verts(self) -> torch.Tensor:
        return self.verts + self.max_offset * torch.tanh(self.deform)

    def reg_loss(self) -> torch.Tensor:
        """nvdiffrec's SDF sign-change regulariser (Eq. 2) over the grid edges."""
        from meshlift.isosurface.dmtet import sdf_reg_loss

        return sdf_reg_loss(self.sdf, self.edges)


class DMTetGeometry(_GridGeometry):
    """DMTet surface: SDF and bounded deformation per tet-grid vertex (Shen et al. 2021; nvdiffrec).

    The grid is ``regular_tet_grid(grid_res)`` over ``[-mesh_scale/2, mesh_scale/2]³``. Deformed vertices are
    ``v + deform_scale · (cell / 2) · tanh(deform)``. Sign convention of ``meshlift.isosurface.dmtet``:
    ``sdf < 0`` inside.
    """

    def __init__(self, cfg: SurfaceConfig, device: torch.device) -> None:
        super().__init__()
        from meshlift.isosurface.tetgrid import regular_tet_grid, tet_edges

        verts, tets = regular_tet_grid(int(cfg.grid_res), bounds=_grid_bounds(cfg), device=device)
        self.register_buffer("tets", tets, persistent=False)
        self._init_grid(cfg, verts, tet_edges(tets))

    def get_mesh(self) -> tuple[Mesh, torch.Tensor]:
        """Extract the current surface: ``(Mesh, extra regulariser loss)`` (0 for DMTet)."""
        from meshlift.isosurface.dmtet import marching_tets

        v, f = marching_tets(self.deformed_verts(), self.sdf, self.tets)
        return Mesh(v_pos=v, t_pos_idx=f), v.new_zeros(())


class FlexiGeometry(_GridGeometry):
    """FlexiCubes surface (Shen et al. 2023): SDF, deformation and per-cube weights on a voxel grid."""

    def __init__(self, cfg: SurfaceConfig, device: torch.device) -> None:
        super().__init__()
        from meshlift.isosurface.flexicubes import FlexiCubes

        self.fc = FlexiCubes()
        verts, cubes = self.fc.cube_grid(int(cfg.grid_res), bounds=_grid_bounds(cfg), device=device)
        self.register_buffer("cubes", cubes, persistent=False)
        self._init_grid(cfg, verts, self.fc.cube_edges(cubes))
        self.weight = nn.Parameter(torch.zeros(cubes.shape[0], 21, device=device))

    def get_mesh(self) -> tuple[Mesh, torch.Tensor]:
        """Extract the current surface: ``(Mesh, mean developability regulariser L_dev)``."""
        v, f, l_dev = self.fc(
            self.deformed_verts(),
            self.sdf,
            self.cubes,
            self.grid_res,
            beta=self.weight[:, :12],
            alpha=self.weight[:, 12:20],
            gamma=self.weight[:, 20],
            training=True,
        )
        return Mesh(v_pos=v, t_pos_idx=f.long()), l_dev.mean() if l_dev.numel() else v.new_zeros(())


def make_geometry(cfg: SurfaceConfig, device: torch.device) -> nn.Module:
    """The pass-1 geometry module of ``cfg.isosurface``."""
    if cfg.isosurface == "flexicubes":
        return FlexiGeometry(cfg, device)
    return DMTetGeometry(cfg, device)


# ---- SDF initialisation --------------------------------------------------------------------------------------


def sphere_sdf(points: torch.Tensor, radius: float) -> torch.Tensor:
    """Signed distance to a centred sphere (negative inside)."""
    return points.norm(dim=-1) - radius


def visual_hull_occupancy(points: torch.Tensor, views: TrainViews, threshold: float = 0.5,
                          chunk: int = 1 << 18) -> torch.Tensor:
    """Inside-the-visual-hull test of ``points [N, 3]`` (normalised frame) against the masks of ``views``.

    A point is carved away when it projects inside some image (in front of the camera) onto a mask value
    below ``threshold``; points outside every image are kept (Laurentini 1994, "The visual hull concept").

    Returns:
        ``[N]`` bool, True inside the hull.

    Raises:
        DatasetError: ``views`` has no masks.
    """
    if views.masks is None:
        raise DatasetError("visual_hull init needs masks; the dataset has none (use --set sdf_init=sphere)")
    masks = views.masks.permute(0, 3, 1, 2).float().cpu()  # [V, 1, H, W]
    inside = torch.ones(points.shape[0], dtype=torch.bool)
    pts = points.detach().float().cpu()
    for s in range(0, pts.shape[0], chunk):
        p = pts[s:s + chunk]
        homog = torch.cat([p, torch.ones_like(p[:, :1])], -1)
        keep = torch.ones(p.shape[0], dtype=torch.bool)
        for v in range(views.world_to_clip.shape[0]):
            clip = homog @ views.world_to_clip[v].float().cpu().T  # [n, 4]
            w = clip[:, 3]
            front = w > 1e-6
            ndc = clip[:, :2] / w.clamp(min=1e-6)[:, None]
            in_img = front & (ndc.abs() <= 1).all(-1)
            # grid_sample with align_corners=False maps -1/+1 to the outer pixel edges: the NDC convention (§3)
            val = F.grid_sample(masks[v:v + 1], ndc[None, None], mode="bilinear", align_corners=False)[0, 0, 0]
            keep &= ~(in_img & (val < threshold))
        inside[s:s + chunk] = keep
    return inside


def occupancy_to_sdf(occ: torch.Tensor, grid_shape: tuple[int, int, int], spacing: float) -> torch.Tensor:
    """Signed Euclidean distance (negative inside) of a boolean occupancy on a regular grid (scipy EDT)."""
    from scipy.ndimage import distance_transform_edt

    o = occ.reshape(grid_shape).cpu().numpy()
    d_out = distance_transform_edt(~o) * spacing
    d_in = distance_transform_edt(o) * spacing
    sdf = np.where(o, -(d_in - 0.5 * spacing), d_out - 0.5 * spacing)
    return torch.from_numpy(sdf.reshape(-1).astype(np.float32))


def init_sdf(geom: nn.Module, cfg: SurfaceConfig, views: TrainViews, generator: torch.Generator) -> str:
    """Initialise the geometry's SDF as ``cfg.sdf_init`` says; returns what was done (for the log)."""
    pts = geom.grid_points
    kind = cfg.sdf_init
    if kind == "visual_hull" and views.masks is None:
        kind = "sphere"
    if kind == "visual_hull":
        occ = visual_hull_occupancy(pts, views)
        frac = float(occ.float().mean())
        if frac == 0.0 or frac == 1.0:
            kind = "sphere"
        else:
            shape = geom.grid_shape
            if shape is not None and int(np.prod(shape)) == pts.shape[0]:
                spacing = float(cfg.mesh_scale) / cfg.grid_res
                sdf = occupancy_to_sdf(occ, shape, spacing)
            else:
                sdf = torch.where(occ, -1.0, 1.0) * (0.5 * cfg.mesh_scale / cfg.grid_res)
            geom.set_sdf(sdf.to(pts.device))
            return f"visual hull ({100 * frac:.1f}% of the grid inside)"
    if kind == "random":
        sdf = 0.1 - torch.rand(pts.shape[0], generator=generator)  # nvdiffrec's rand - 0.1, negated (sdf<0 inside)
        geom.set_sdf(sdf.to(pts.device))
        return "random"
    geom.set_sdf(sphere_sdf(pts, 0.3 * cfg.mesh_scale))
    return "sphere"


# =============================================================================================================
# materials and light


class BoundedMaterialField(nn.Module):
    """The pass-1 material field: ``meshlift.shading.material_field.MaterialField`` over the grid's box.

    A multiresolution hash-grid encoding + small MLP (Müller et al. 2022; nvdiffrec's pass-1 materials) with
    its outputs mapped into the configured kd/ks ranges. Called with points ``[N, 3]`` it returns
    ``dict(kd [N, 3], ks [N, 3])``; the field's normal output is not used (pass 1 shades with the geometric
    normals, the normal map is learned in pass 2).
    """

    def __init__(self, cfg: SurfaceConfig, device: torch.device) -> None:
        super().__init__()
        from meshlift.shading.material_field import MaterialField

        lo, hi = _grid_bounds(cfg)
        aabb = torch.tensor([[lo] * 3, [hi] * 3], dtype=torch.float32)
        self.field = MaterialField(
            aabb,
            kd_min=cfg.kd_min,
            kd_max=cfg.kd_max,
            ks_min=cfg.ks_min,
            ks_max=cfg.ks_max,
            n_levels=int(cfg.hash_levels),
            log2_hashmap_size=int(cfg.hash_log2_size),
            desired_resolution=int(cfg.hash_max_res),
        ).to(device)

    def forward(self, x: torch.Tensor) -> dict:
        out = self.field(x)
        return {"kd": out["kd"], "ks": out["ks"]}


def make_light(cfg: SurfaceConfig, device: torch.device, reference_light=None,
               generator: Optional[torch.Generator] = None):
    """The environment light of ``cfg.light``: returns ``(light, trainable)``."""
    from meshlift.shading.light import EnvironmentLight

    min_res = max(4, min(16, int(cfg.env_res) // 4))
    if cfg.light == "learned":
        g = generator if generator is not None else torch.Generator().manual_seed(cfg.seed)
        base = cfg.env_init + 0.05 * torch.rand(6, cfg.env_res, cfg.env_res, 3, generator=g)
        light = EnvironmentLight(base.to(device), trainable=True, min_res=min_res)
        light.build_mips()
        return light, True
    if cfg.light == "fixed":
        if reference_light is None:
            raise ConfigError(
                "light=fixed needs a reference environment (reference-mesh mode); for a dataset give the "
                ".hdr path: --set light=path/to/env.hdr"
            )
        light = reference_light
        if light.specular is None:
            light.build_mips()
        return light, False
    path = Path(cfg.light)
    if not path.is_file():
        raise ConfigError(f"config field 'light' = {cfg.light!r}: not 'learned', 'fixed' or an existing .hdr/.exr file")
    light = EnvironmentLight.load(path, res=int(cfg.env_res), trainable=False, min_res=min_res).to(device)
    light.build_mips()
    return light, False


# =============================================================================================================
# losses and schedules


def tonemapped_log_l1(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """nvdiffrec's ``logl1``: L1 between ``tonemap_srgb(log(x + 1))`` of HDR linear colours."""
    from meshlift.shading.color import tonemap_srgb

    return F.l1_loss(tonemap_srgb(pred), tonemap_srgb(target))


def image_loss(out: dict, views: dict, background: torch.Tensor, cfg: SurfaceConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """Colour + mask loss of a rendered batch (nvdiffrec train.py); returns ``(loss, srgb_mse)``."""
    from meshlift.shading.color import linear_to_srgb

    ref = views["images"]
    masks = views["masks"]
    pred = out["shaded"]
    if masks is not None:
        comp_ref = composite_reference(views, background)
        color = tonemapped_log_l1(pred * masks, comp_ref * masks)
        loss = color + cfg.mask_weight * F.mse_loss(out["alpha"], masks)
    else:
        loss = tonemapped_log_l1(pred, ref)
        comp_ref = ref
    with torch.no_grad():
        mse = F.mse_loss(linear_to_srgb(pred.clamp(0, 1)), linear_to_srgb(comp_ref.clamp(0, 1)))
    return loss, mse


def composite_reference(views: dict, background: torch.Tensor) -> torch.Tensor:
    """Reference images of a batch composited on ``background`` (a no-op when the reader already did it)."""
    ref, masks = views["images"], views["masks"]
    if masks is None or not views.get("straight", False):
        return ref
    bg = background.to(ref).view(1, 1, 1, 3)
    return ref * masks + bg * (1 - masks)


def lr_lambda(cfg: SurfaceConfig) -> Callable[[int], float]:
    """nvdiffrec's schedule: linear warm-up, then ``10^(-lr_decay · iteration)``."""

    def f(it: int) -> float:
        warm = min(1.0, (it + 1) / cfg.warmup) if cfg.warmup > 0 else 1.0
        return warm * (10.0 ** (-cfg.lr_decay * it))

    return f


def psnr_from_mse(mse: float) -> float:
    return float("inf") if mse <= 0 else -10.0 * math.log10(mse)


class ViewSampler:
    """Draws batches of view indices: random permutations without replacement, seeded."""

    def __init__(self, n: int, batch: int, seed: int) -> None:
        self.n, self.batch = n, min(batch, n)
        self.g = torch.Generator().manual_seed(seed)
        self.order = torch.randperm(n, generator=self.g)
        self.pos = 0

    def next(self) -> torch.Tensor:
        if self.pos + self.batch > self.n:
            self.order = torch.randperm(self.n, generator=self.g)
            self.pos = 0
        idx = self.order[self.pos:self.pos + self.batch]
        self.pos += self.batch
        return idx

    def state_dict(self) -> dict:
        return {"g": self.g.get_state(), "order": self.order, "pos": self.pos}

    def load_state_dict(self, s: dict) -> None:
        self.g.set_state(s["g"])
        self.order, self.pos = s["order"], int(s["pos"])


def _background_batch(views: dict, background: torch.Tensor) -> torch.Tensor:
    imgs = views["images"]
    return background.to(imgs).view(1, 1, 1, 3).expand_as(imgs).contiguous()


# =============================================================================================================
# state shared by the passes


@dataclass
class TrainState:
    """Mutable state of a run, saved in the checkpoint.

    Attributes:
        stage: ``pass1``, ``pass2`` or ``done``; iteration: steps done in the current stage.
        history: per-step dicts (pass, iteration, loss, psnr) for the loss curve.
        timings: seconds spent per stage.
    """

    stage: str = "pass1"
    iteration: int = 0
    history: list = field(default_factory=list)
    timings: dict = field(default_factory=dict)
    iterations: dict = field(default_factory=dict)
    """Steps actually run per pass (fewer than configured when ``time_budget_s`` cut a pass short)."""


class Checkpointer:
    """Writes ``checkpoint.pt`` atomically (temp file + rename) in the output folder."""

    def __init__(self, out_dir: Optional[Path]) -> None:
        self.path = None if out_dir is None else Path(out_dir) / CHECKPOINT_NAME

    def save(self, payload: dict) -> None:
        if self.path is None:
            return
        tmp = self.path.with_suffix(".tmp")
        torch.save(payload, tmp)
        os.replace(tmp, self.path)

    def load(self) -> Optional[dict]:
        if self.path is None or not self.path.is_file():
            return None
        return torch.load(self.path, map_location="cpu", weights_only=True)


# =============================================================================================================
# pass 1


@dataclass
class Pass1Result:
    """Output of pass 1: the extracted mesh (normalised frame, detached), the field and the light."""

    mesh: Mesh
    geometry: nn.Module
    material: BoundedMaterialField
    light: object
    light_trainable: bool
    checkpoint_state: Optional[dict] = None


def _render(mesh: Mesh, views: dict, res: tuple[int, int], light, material, background: torch.Tensor,
            cfg: SurfaceConfig, jitter: float = 0.0) -> dict:
    from meshlift.renderers.mesh_pbr import render_mesh

    return render_mesh(
        mesh,
        views["world_to_clip"],
        views["camera_pos"],
        res,
        light=light,
        material=material,
        background=_background_batch(views, background),
        spp=cfg.spp,
        max_fragments=cfg.max_fragments,
        field_jitter=jitter,
    )


def _end_step(pass_no: int, it: int, total: int, loss: torch.Tensor, mse: torch.Tensor, *, cfg: SurfaceConfig,
              state: "TrainState", monitor: Monitor, deadline: Optional[float], save: Callable[[], None],
              preview: Optional[Callable[[], None]]) -> bool:
    """Bookkeeping shared by both passes after step ``it`` (0-based): history, progress, previews every
    ``cfg.preview_every`` steps, checkpoints every ``cfg.checkpoint_every``. Returns True when the time budget
    (``deadline``, a ``time.perf_counter()`` value) ends the pass early."""
    psnr = psnr_from_mse(float(mse))
    loss_value = float(loss.detach())
    state.history.append({"pass": pass_no, "iteration": it + 1, "loss": loss_value, "psnr": psnr})
    state.iteration = it + 1
    monitor.update(it + 1, loss_value, psnr)
    if preview is not None and cfg.preview_every > 0 and (it + 1) % cfg.preview_every == 0:
        with torch.no_grad():
            preview()
    if cfg.checkpoint_every > 0 and (it + 1) % cfg.checkpoint_every == 0 and it + 1 < total:
        save()
    if deadline is not None and time.perf_counter() > deadline and it + 1 < total:
        monitor.log(f"pass {pass_no}: time budget reached after {it + 1} of {total} steps")
        return True
    return False


def run_pass1(
    cfg: SurfaceConfig,
    data: ProblemData,
    device: torch.device,
    *,
    state: TrainState,
    monitor: Monitor,
    checkpointer: Checkpointer,
    checkpoint: Optional[dict] = None,
    preview: Optional[Callable[[str, int, Mesh, object, object], None]] = None,
    deadline: Optional[float] = None,
) -> Pass1Result:
    """Pass 1 (topology): DMTet/FlexiCubes + material field + light, ``cfg.iter_pass1`` steps.

    Resumes from ``checkpoint`` (a dict saved by this function) when given.
    """
    gen = torch.Generator().manual_seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    geom = make_geometry(cfg, device)
    material = BoundedMaterialField(cfg, device)
    light, light_trainable = make_light(cfg, device, data.reference_light, gen)
    if checkpoint is None:
        how = init_sdf(geom, cfg, data.train, gen)
        monitor.log(f"pass 1: SDF initialised from {how}")

    opt_geom = torch.optim.Adam(geom.parameters(), lr=cfg.lr_pos)
    groups = [{"params": list(material.parameters()), "lr": cfg.lr_mat}]
    if light_trainable:
        groups.append({"params": list(light.parameters()), "lr": cfg.lr_light})
    opt_mat = torch.optim.Adam(groups)
    sched = [torch.optim.lr_scheduler.LambdaLR(o, lr_lambda(cfg)) for o in (opt_geom, opt_mat)]
    sampler = ViewSampler(len(data.train), cfg.batch, cfg.seed)

    start = 0
    if checkpoint is not None and checkpoint.get("pass1") is not None:
        ck = checkpoint["pass1"]
        geom.load_state_dict(ck["geometry"])
        material.load_state_dict(ck["material"])
        if light_trainable:
            light.load_state_dict(ck["light"])
        opt_geom.load_state_dict(ck["opt_geom"])
        opt_mat.load_state_dict(ck["opt_mat"])
        for s, sd in zip(sched, ck["sched"]):
            s.load_state_dict(sd)
        sampler.load_state_dict(ck["sampler"])
        start = int(ck["iteration"])

    def payload(it: int) -> dict:
        return {
            "config": config_to_dict(cfg),
            "state": dataclasses.asdict(state),
            "pass1": {
                "iteration": it,
                "geometry": geom.state_dict(),
                "material": material.state_dict(),
                "light": light.state_dict() if light_trainable else None,
                "opt_geom": opt_geom.state_dict(),
                "opt_mat": opt_mat.state_dict(),
                "sched": [s.state_dict() for s in sched],
                "sampler": sampler.state_dict(),
            },
            "pass2": None,
        }

    res = data.train.resolution
    bg = data.train.background
    total = cfg.iter_pass1
    if checkpoint is not None and checkpoint.get("pass2") is not None:
        total = start  # pass 2 already started from this pass-1 state: keep it
    if start == 0 and preview is not None:
        with torch.no_grad():
            if light_trainable:
                light.build_mips()
            preview("start", 0, _detach_mesh(geom.get_mesh()[0]), light, material)
    monitor.start_pass("pass 1 (topology)", total, start)
    t0 = time.perf_counter()
    for it in range(start, total):
        views = data.train.batch(sampler.next(), device)
        if light_trainable:
            light.build_mips()
        mesh, extra_reg = geom.get_mesh()
        if mesh.num_faces == 0:
            raise MeshError(
                f"pass 1, iteration {it}: the surface vanished (the SDF has one sign everywhere). Use "
                "--set sdf_init=sphere or visual_hull, lower lr_pos, or check that the object is inside the grid "
                f"(mesh_scale={cfg.mesh_scale})"
            )
        jitter = cfg.kd_smooth_jitter if cfg.kd_smooth_weight > 0 else 0.0
        out = _render(mesh, views, res, light, material, bg, cfg, jitter)
        loss, mse = image_loss(out, views, bg, cfg)
        frac = it / max(1, total)
        sdf_w = cfg.sdf_reg_weight - (cfg.sdf_reg_weight - cfg.sdf_reg_final) * min(1.0, 4.0 * frac)
        reg = sdf_w * geom.reg_loss()
        if cfg.isosurface == "flexicubes":
            reg = reg + cfg.flexi_dev_weight * extra_reg
        if "kd_grad" in out and cfg.kd_smooth_weight > 0:
            reg = reg + cfg.kd_smooth_weight * min(1.0, it / 500.0) * out["kd_grad"].mean()
        if light_trainable and cfg.light_reg_weight > 0:
            reg = reg + cfg.light_reg_weight * light.regularizer()
        total_loss = loss + reg
        opt_geom.zero_grad(set_to_none=True)
        opt_mat.zero_grad(set_to_none=True)
        total_loss.backward()
        opt_geom.step()
        opt_mat.step()
        for s in sched:
            s.step()
        if light_trainable:
            light.clamp_(min=0.0)
        if _end_step(1, it, total, total_loss, mse, cfg=cfg, state=state, monitor=monitor, deadline=deadline,
                     save=lambda: checkpointer.save(payload(it + 1)),
                     preview=None if preview is None else
                     lambda: preview("pass1", it + 1, _detach_mesh(mesh), light, material)):
            total = it + 1
            break
    monitor.end_pass()
    state.iterations["pass1"] = total
    state.timings["pass1_s"] = state.timings.get("pass1_s", 0.0) + time.perf_counter() - t0

    with torch.no_grad():
        mesh, _ = geom.get_mesh()
        if cfg.remove_hidden and mesh.num_faces > 0:
            from meshlift.mesh.visibility import remove_hidden_faces

            mesh, info = remove_hidden_faces(mesh, n_views=cfg.hidden_views, resolution=cfg.hidden_res,
                                             max_fragments=cfg.max_fragments)
            monitor.log(f"pass 1: removed {info['removed']} of {info['faces_before']} faces no outside view sees")
    if light_trainable:
        light.build_mips()
    state.stage = "pass2"
    state.iteration = 0
    final = payload(total)
    if start < total or checkpoint is None:
        checkpointer.save(final)
    return Pass1Result(_detach_mesh(mesh), geom, material, light, light_trainable, final["pass1"])


def _detach_mesh(mesh: Mesh) -> Mesh:
    return dataclasses.replace(
        mesh,
        v_pos=mesh.v_pos.detach(),
        material=None if mesh.material is None else Material(
            kd=mesh.material.kd.detach(),
            ks=None if mesh.material.ks is None else mesh.material.ks.detach(),
            normal=None if mesh.material.normal is None else mesh.material.normal.detach(),
            name=mesh.material.name,
        ),
    )


# =============================================================================================================
# pass 2


@dataclass
class Pass2Result:
    """Output of pass 2: the final textured mesh (normalised frame, detached) and the light."""

    mesh: Mesh
    light: object


def make_laplacian_loss(num_vertices: int, faces: torch.Tensor, device: torch.device) -> Callable:
    """``fn(x [V, 3]) -> scalar``: mean squared uniform Laplacian ``x_i − mean_{j ∈ N(i)} x_j`` for fixed faces.

    Equals ``meshlift.geometry.mesh_ops.laplacian_smoothness_loss(x, faces)`` (nvdiffrec's
    ``laplace_regularizer_const``) but builds the sparse ``L = D − A`` once, for the fixed topology of pass 2.
    """
    from meshlift.geometry.mesh_ops import laplacian_uniform

    lap = laplacian_uniform(num_vertices, faces).to(device)
    rows, cols = lap.indices()
    diag = torch.where(rows == cols, lap.values(), torch.zeros_like(lap.values()))
    deg = torch.zeros(num_vertices, device=device).index_add(0, rows, diag).clamp(min=1.0)[:, None]

    def loss(x: torch.Tensor) -> torch.Tensor:
        return (torch.sparse.mm(lap, x) / deg).pow(2).mean()

    return loss


def prepare_pass2_mesh(p1: Pass1Result, cfg: SurfaceConfig) -> tuple[Mesh, dict]:
    """Unwrap the pass-1 mesh (xatlas, decimating above ``unwrap_max_faces``) and bake the field.

    Returns the UV mesh and the baked textures ``dict(kd, ks)`` (``[R, R, 3]`` each).
    """
    from meshlift.mesh.bake import bake_field_to_textures
    from meshlift.mesh.uv import unwrap

    mesh = p1.mesh
    if mesh.num_faces == 0:
        raise MeshError("pass 2: the pass-1 mesh is empty; nothing to texture")
    uv_mesh = unwrap(
        Mesh(v_pos=mesh.v_pos.detach(), t_pos_idx=mesh.t_pos_idx),
        max_faces_for_xatlas=int(cfg.unwrap_max_faces),
        resolution=int(cfg.texture_res),
    )

    def field_fn(x: torch.Tensor) -> dict:
        out = p1.material(x)
        return {"kd": out["kd"], "ks": out["ks"]}

    tex = bake_field_to_textures(uv_mesh, field_fn, int(cfg.texture_res))
    return uv_mesh, tex


def run_pass2(
    cfg: SurfaceConfig,
    data: ProblemData,
    device: torch.device,
    p1: Pass1Result,
    *,
    state: TrainState,
    monitor: Monitor,
    checkpointer: Checkpointer,
    checkpoint: Optional[dict] = None,
    preview: Optional[Callable[[str, int, Mesh, object, object], None]] = None,
    deadline: Optional[float] = None,
) -> Pass2Result:
    """Pass 2 (fixed topology): optimise kd/ks/normal textures, vertex offsets and light.

    The vertex offsets from the pass-1 mesh are regularised by nvdiffrec's relative uniform Laplacian
    (``meshlift.geometry.mesh_ops.laplacian_smoothness_loss`` of the offsets), weighted by
    ``laplace_weight`` and decaying linearly to 0 over the pass.
    """
    ck = None if checkpoint is None else checkpoint.get("pass2")
    if ck is not None:
        base = Mesh(
            v_pos=ck["base_v_pos"].to(device),
            t_pos_idx=ck["t_pos_idx"].to(device),
            v_tex=ck["v_tex"].to(device),
            t_tex_idx=ck["t_tex_idx"].to(device),
        )
        tex = {"kd": ck["kd"].to(device), "ks": ck["ks"].to(device)}
    else:
        base, tex = prepare_pass2_mesh(p1, cfg)
        base = base.to(device)
    light, light_trainable = p1.light, p1.light_trainable

    R = tex["kd"].shape[0]
    kd = nn.Parameter(tex["kd"][..., :3].to(device).contiguous())
    ks = nn.Parameter(tex["ks"][..., :3].to(device).contiguous())
    nrm0 = torch.zeros(R, R, 3, device=device)
    nrm0[..., 2] = 1.0
    normal = nn.Parameter(nrm0)
    offset = nn.Parameter(torch.zeros_like(base.v_pos))
    laplacian_loss = make_laplacian_loss(base.num_vertices, base.t_pos_idx, device)

    tex_params = [kd, ks] + ([normal] if cfg.perturb_normal else [])
    groups = [{"params": tex_params, "lr": cfg.lr_mat}]
    if light_trainable:
        groups.append({"params": list(light.parameters()), "lr": cfg.lr_light})
    opt = torch.optim.Adam(groups)
    opt_v = torch.optim.Adam([offset], lr=cfg.lr_vertex)
    sched = [torch.optim.lr_scheduler.LambdaLR(o, lr_lambda(cfg)) for o in (opt, opt_v)]
    sampler = ViewSampler(len(data.train), cfg.batch, cfg.seed + 1)
    kd_min = torch.tensor(cfg.kd_min, device=device)
    kd_max = torch.tensor(cfg.kd_max, device=device)
    ks_min = torch.tensor(cfg.ks_min, device=device)
    ks_max = torch.tensor(cfg.ks_max, device=device)

    start = 0
    if ck is not None:
        with torch.no_grad():
            kd.copy_(ck["kd_param"].to(device))
            ks.copy_(ck["ks_param"].to(device))
            normal.copy_(ck["normal"].to(device))
            offset.copy_(ck["offset"].to(device))
        if light_trainable and ck.get("light") is not None:
            light.load_state_dict(ck["light"])
        opt.load_state_dict(ck["opt"])
        opt_v.load_state_dict(ck["opt_v"])
        for s, sd in zip(sched, ck["sched"]):
            s.load_state_dict(sd)
        sampler.load_state_dict(ck["sampler"])
        start = int(ck["iteration"])

    def current_mesh() -> Mesh:
        v = base.v_pos + offset if cfg.optimize_vertices else base.v_pos
        mat = Material(kd=kd, ks=ks, normal=normal if cfg.perturb_normal else None, name="meshlift")
        return Mesh(v_pos=v, t_pos_idx=base.t_pos_idx, v_tex=base.v_tex, t_tex_idx=base.t_tex_idx, material=mat)

    def payload(it: int, pass1_ck: Optional[dict]) -> dict:
        return {
            "config": config_to_dict(cfg),
            "state": dataclasses.asdict(state),
            "pass1": pass1_ck,
            "pass2": {
                "iteration": it,
                "base_v_pos": base.v_pos.detach().cpu(),
                "t_pos_idx": base.t_pos_idx.cpu(),
                "v_tex": base.v_tex.cpu(),
                "t_tex_idx": base.t_tex_idx.cpu(),
                "kd": tex["kd"].cpu(),
                "ks": tex["ks"].cpu(),
                "kd_param": kd.detach().cpu(),
                "ks_param": ks.detach().cpu(),
                "normal": normal.detach().cpu(),
                "offset": offset.detach().cpu(),
                "light": light.state_dict() if light_trainable else None,
                "opt": opt.state_dict(),
                "opt_v": opt_v.state_dict(),
                "sched": [s.state_dict() for s in sched],
                "sampler": sampler.state_dict(),
            },
        }

    pass1_ck = p1.checkpoint_state

    res = data.train.resolution
    bg = data.train.background
    total = cfg.iter_pass2
    monitor.start_pass("pass 2 (textures)", total, start)
    t0 = time.perf_counter()
    for it in range(start, total):
        views = data.train.batch(sampler.next(), device)
        if light_trainable:
            light.build_mips()
        mesh = current_mesh()
        jitter = 0.5 * cfg.kd_smooth_jitter if cfg.kd_smooth_weight > 0 else 0.0
        out = _render(mesh, views, res, light, None, bg, cfg, jitter)
        loss, mse = image_loss(out, views, bg, cfg)
        reg = loss.new_zeros(())
        if cfg.optimize_vertices and cfg.laplace_weight > 0:
            t = it / max(1, total)
            reg = reg + cfg.laplace_weight * (1.0 - t) * laplacian_loss(offset)
        if "kd_grad" in out and cfg.kd_smooth_weight > 0:
            reg = reg + cfg.kd_smooth_weight * out["kd_grad"].mean()
        if light_trainable and cfg.light_reg_weight > 0:
            reg = reg + cfg.light_reg_weight * light.regularizer()
        total_loss = loss + reg
        opt.zero_grad(set_to_none=True)
        opt_v.zero_grad(set_to_none=True)
        total_loss.backward()
        opt.step()
        if cfg.optimize_vertices:
            opt_v.step()
        for s in sched:
            s.step()
        with torch.no_grad():
            kd.copy_(torch.maximum(torch.minimum(kd, kd_max), kd_min))
            ks.copy_(torch.maximum(torch.minimum(ks, ks_max), ks_min))
            normal[..., 2].clamp_(min=0.05)
            normal.copy_(F.normalize(normal.clamp(-1, 1), dim=-1))
        if light_trainable:
            light.clamp_(min=0.0)
        if _end_step(2, it, total, total_loss, mse, cfg=cfg, state=state, monitor=monitor, deadline=deadline,
                     save=lambda: checkpointer.save(payload(it + 1, pass1_ck)),
                     preview=None if preview is None else
                     lambda: preview("pass2", it + 1, _detach_mesh(current_mesh()), light, None)):
            total = it + 1
            break
    monitor.end_pass()
    state.iterations["pass2"] = total
    state.timings["pass2_s"] = state.timings.get("pass2_s", 0.0) + time.perf_counter() - t0
    if light_trainable:
        light.build_mips()
    state.stage = "done"
    state.iteration = total
    checkpointer.save(payload(total, pass1_ck))
    with torch.no_grad():
        final = _detach_mesh(current_mesh())
    return Pass2Result(final, light)


# =============================================================================================================
# evaluation


@torch.no_grad()
def render_views(mesh: Mesh, views: TrainViews, light, material, cfg: SurfaceConfig, device: torch.device,
                 indices: Optional[list[int]] = None, batch: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    """Render ``views`` (all or ``indices``) and the references, both composited on the views' background.

    Returns ``(ours, reference)``: ``[N, H, W, 3]`` float32 sRGB in [0, 1] on the CPU.
    """
    from meshlift.shading.color import linear_to_srgb

    idx_all = list(range(len(views))) if indices is None else list(indices)
    ours, refs = [], []
    for s in range(0, len(idx_all), batch):
        idx = torch.tensor(idx_all[s:s + batch], dtype=torch.long)
        v = views.batch(idx, device)
        out = _render(mesh, v, views.resolution, light, material, views.background, cfg)
        ref = composite_reference(v, views.background)
        ours.append(linear_to_srgb(out["shaded"].clamp(0, 1)).cpu())
        refs.append(linear_to_srgb(ref.clamp(0, 1)).cpu())
    return torch.cat(ours), torch.cat(refs)


def image_metrics(ours: torch.Tensor, refs: torch.Tensor) -> dict:
    """Mean PSNR and SSIM over views (``meshlift.metrics.image``), sRGB [0, 1] images ``[N, H, W, 3]``."""
    from meshlift.metrics.image import psnr, ssim

    ps = [float(psnr(o, r)) for o, r in zip(ours, refs)]
    ss = [float(ssim(o, r)) for o, r in zip(ours, refs)]
    return {"psnr": float(np.mean(ps)), "ssim": float(np.mean(ss)), "psnr_per_view": ps, "ssim_per_view": ss}


def to_world(mesh: Mesh, world_to_normalized: torch.Tensor) -> Mesh:
    """Map a normalised-frame mesh back to the dataset's world frame and units (inverse similarity)."""
    n2w = torch.linalg.inv(world_to_normalized.double())
    v = mesh.v_pos.double() @ n2w[:3, :3].T.to(mesh.v_pos.device) + n2w[:3, 3].to(mesh.v_pos.device)
    nrm = None
    if mesh.v_nrm is not None:
        nrm = F.normalize(mesh.v_nrm.double() @ torch.linalg.inv(n2w[:3, :3]).to(mesh.v_pos.device), dim=-1).float()
    det = float(torch.linalg.det(n2w[:3, :3]))
    faces = mesh.t_pos_idx if det > 0 else mesh.t_pos_idx[:, [0, 2, 1]]
    return dataclasses.replace(mesh, v_pos=v.float(), v_nrm=nrm, t_pos_idx=faces)


def geometry_metrics(mesh_world: Mesh, reference_world: Mesh, cfg: SurfaceConfig) -> dict:
    """Chamfer-L1 and F-score against the reference mesh (``meshlift.metrics.geometry.mesh_metrics``)."""
    from meshlift.metrics.geometry import mesh_metrics

    m = mesh_metrics(
        Mesh(v_pos=mesh_world.v_pos.detach().cpu(), t_pos_idx=mesh_world.t_pos_idx.cpu()),
        Mesh(v_pos=reference_world.v_pos.detach().cpu(), t_pos_idx=reference_world.t_pos_idx.cpu()),
        threshold_frac=cfg.fscore_threshold_frac,
        n_samples=cfg.eval_samples,
    )
    return {k: (float(v) if isinstance(v, (int, float, np.floating)) or torch.is_tensor(v) else v) for k, v in m.items()}


# =============================================================================================================
# the whole run


@dataclass
class ReconstructionResult:
    """What :func:`reconstruct` produced.

    Attributes:
        mesh: final textured mesh in the dataset's world frame and units.
        dmtet_mesh: pass-1 mesh in world units.
        metrics: the dict written to ``metrics.json``.
        out_dir: the output folder (None when not writing).
        files: paths of the main outputs (``glb``, ``obj``, ``probe``, ``metrics``...).
        history: per-iteration dicts (pass, iteration, loss, psnr) of both passes.
    """

    mesh: Mesh
    dmtet_mesh: Mesh
    metrics: dict
    out_dir: Optional[Path]
    files: dict
    history: list = field(default_factory=list)


def reconstruct(
    cfg: SurfaceConfig,
    out_dir: Optional[str | Path],
    *,
    resume: bool = False,
    monitor: Optional[Monitor] = None,
    data: Optional[ProblemData] = None,
) -> ReconstructionResult:
    """Run both passes on ``cfg.data`` (or on ``data`` when given) and write the asset folder ``out_dir``.

    Args:
        cfg: the effective configuration (validated).
        out_dir: output folder (created), or None to write nothing (tests).
        resume: continue from ``out_dir/checkpoint.pt``; a finished run is re-exported.
        monitor: progress sink (default: silent).
        data: pre-built :class:`ProblemData` (skips loading ``cfg.data``; used by ``meshlift demo``).

    Raises:
        ConfigError, DatasetError, MeshError: bad configuration or input.
        OutOfMemoryError: memory ran out; the message names the knobs to lower.
    """
    from meshlift.methods import outputs

    monitor = monitor or Monitor()
    device = resolve_device(cfg.device)
    out = Path(out_dir) if out_dir is not None else None
    if data is None and not (cfg.data and Path(cfg.data).exists()):
        raise DatasetError(
            f"input {cfg.data!r} does not exist; give a dataset folder or a mesh file (.obj, .glb, .ply)"
        )
    checkpointer = Checkpointer(out)
    checkpoint = checkpointer.load() if resume else None
    if resume and checkpoint is None:
        raise ConfigError(f"--resume: no {CHECKPOINT_NAME} in {out}; run without --resume first")
    torch.manual_seed(cfg.seed)

    t_start = time.perf_counter()
    where = "loading the data"
    try:
        if data is None:
            monitor.log(f"loading {cfg.data}")
            data = load_problem(cfg, device)
        if out is not None:  # only once the input has loaded: a bad input leaves no output folder behind
            out.mkdir(parents=True, exist_ok=True)
            outputs.write_config(out, cfg)
        monitor.log(
            f"{len(data.train)} training / {len(data.test)} test views at "
            f"{data.train.resolution[1]}x{data.train.resolution[0]}, device {device}"
        )
        state = TrainState()
        if checkpoint is not None:
            state = TrainState(**checkpoint["state"])
        where = "pass 1"
        budget = cfg.time_budget_s if cfg.time_budget_s > 0 else None
        p1 = run_pass1(cfg, data, device, state=state, monitor=monitor, checkpointer=checkpointer,
                       checkpoint=checkpoint if checkpoint is not None else None,
                       preview=outputs.preview_writer(out, data, cfg, device) if out is not None else None,
                       deadline=None if budget is None else t_start + 0.55 * budget)
        where = "pass 2"
        p2 = run_pass2(cfg, data, device, p1, state=state, monitor=monitor, checkpointer=checkpointer,
                       checkpoint=checkpoint,
                       preview=outputs.preview_writer(out, data, cfg, device) if out is not None else None,
                       deadline=None if budget is None else t_start + 0.80 * budget)
        where = "evaluation"
        monitor.log("evaluating held-out views")
        ours, refs = render_views(p2.mesh, data.test, p2.light, None, cfg, device)
        metrics = image_metrics(ours, refs)
        metrics["test_views"] = len(data.test)
        mesh_world = to_world(p2.mesh, data.world_to_normalized)
        dmtet_world = to_world(p1.mesh, data.world_to_normalized)
        if data.reference_mesh is not None:
            g = geometry_metrics(mesh_world, data.reference_mesh, cfg)
            metrics.update({k: v for k, v in g.items()})
            g1 = geometry_metrics(dmtet_world, data.reference_mesh, cfg)
            metrics["pass1_chamfer_l1"] = g1.get("chamfer_l1")
            metrics["pass1_fscore"] = g1.get("fscore")
        metrics["iterations"] = {"pass1": state.iterations.get("pass1", cfg.iter_pass1),
                                 "pass2": state.iterations.get("pass2", cfg.iter_pass2)}
        metrics["iterations_configured"] = {"pass1": cfg.iter_pass1, "pass2": cfg.iter_pass2}
        metrics["faces"] = mesh_world.num_faces
        metrics["vertices"] = mesh_world.num_vertices
        metrics["device"] = str(device)
        state.timings["total_s"] = time.perf_counter() - t_start
        metrics["timings"] = dict(state.timings)
        files: dict = {}
        if out is not None:
            where = "export"
            files = outputs.write_outputs(out, mesh_world, dmtet_world, p2.light, metrics, state.history,
                                          data, p2.mesh, cfg, device, ours=ours, refs=refs)
    except MeshliftError:
        raise
    except Exception as exc:  # noqa: BLE001 - only memory errors are translated, the rest re-raised
        if _is_oom(exc):
            raise oom_error(cfg, where) from exc
        raise
    return ReconstructionResult(mesh_world, dmtet_world, metrics, out, files, list(state.history))


__all__ = [
    "BoundedMaterialField",
    "Checkpointer",
    "DMTetGeometry",
    "FlexiGeometry",
    "Monitor",
    "Pass1Result",
    "Pass2Result",
    "ProblemData",
    "ReconstructionResult",
    "TrainState",
    "TrainViews",
    "image_loss",
    "init_sdf",
    "load_problem",
    "make_geometry",
    "make_light",
    "reconstruct",
    "reference_problem",
    "render_views",
    "run_pass1",
    "run_pass2",
    "tonemapped_log_l1",
    "visual_hull_occupancy",
]
