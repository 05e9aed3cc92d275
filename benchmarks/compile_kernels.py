"""Compile the fused shading kernels for a CUDA target without a GPU (Triton's bundled toolchain, to cubin).

Usage: ``python benchmarks/compile_kernels.py [--arch 90]``; prints each compile's seconds and the sum per
kernel (CPU time of the Triton toolchain, the cost a first call pays on an empty cache). Catches what the
Triton interpreter of the CPU tests does not: constructs the compiler rejects (early returns, unsupported
builtins, type mismatches).
Every kernel of ``kernels/_pbr_triton_kernels.py``, ``_loss_triton_kernels.py`` and
``_antialias_triton_kernels.py``, ``_normals_triton_kernels.py``, the raster and raster-backward kernels of
``_raster_triton_kernels.py``, ``_tangents_triton_kernels.py`` and the CSR
kernels of ``prefilter_triton.py`` is compiled in each constexpr variant the wrappers launch.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import time
from pathlib import Path

if not os.environ.get("PYTHONPATH"):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def variants():
    from meshlift.kernels import _antialias_triton_kernels as A
    from meshlift.kernels import _loss_triton_kernels as L
    from meshlift.kernels import _normals_triton_kernels as N
    from meshlift.kernels import _pbr_triton_kernels as P

    f, i, i64 = "*fp32", "i32", "*i64"
    for tng4, pert, two, gl in itertools.product([False, True], repeat=4):
        c = {"TNG4": tng4, "TS": 4 if tng4 else 3, "PERT": pert, "TWO_SIDED": two, "OPENGL": gl, "BLOCK": 128}
        yield P.shading_normal_fwd, dict.fromkeys(["pos_ptr", "view_ptr", "pert_ptr", "nrm_ptr", "tng_ptr", "geom_ptr",
                                                   "out_ptr"], f) | {"n": i}, c
        yield P.shading_normal_bwd, dict.fromkeys(["pos_ptr", "view_ptr", "pert_ptr", "nrm_ptr", "tng_ptr", "geom_ptr",
                                                   "g_ptr", "g_pos_ptr", "g_view_ptr", "g_pert_ptr", "g_nrm_ptr",
                                                   "g_tng_ptr", "g_geom_ptr"], f) | {"n": i}, c
    for single in (False, True):
        c = {"SINGLE": single, "BLOCK": 128}
        yield P.shade_prep_fwd, dict.fromkeys(["pos_ptr", "nrm_ptr", "view_ptr", "ks_ptr", "refl_ptr", "level_ptr"], f) | {
            "n": i, "lo": "fp32", "hi": "fp32", "nm2": "fp32"}, c
        yield P.shade_prep_bwd, dict.fromkeys(["pos_ptr", "nrm_ptr", "view_ptr", "ks_ptr", "g_refl_ptr", "g_level_ptr",
                                               "g_pos_ptr", "g_nrm_ptr", "g_view_ptr", "g_ks_ptr"], f) | {
            "n": i, "lo": "fp32", "hi": "fp32", "nm2": "fp32"}, c
    rows = ["pos_ptr", "nrm_ptr", "view_ptr", "kd_ptr", "ks_ptr", "diff_ptr", "spec_ptr", "lut_ptr"]
    yield P.shade_combine_fwd, dict.fromkeys(rows + ["out_ptr"], f) | {"n": i, "LH": i, "LW": i}, {"BLOCK": 128}
    yield P.shade_combine_bwd, dict.fromkeys(rows + ["g_ptr", "g_pos_ptr", "g_nrm_ptr", "g_view_ptr", "g_kd_ptr",
                                                    "g_ks_ptr", "g_diff_ptr", "g_spec_ptr"], f) | {
        "n": i, "LH": i, "LW": i}, {"BLOCK": 128}
    for mask in (False, True):
        c = {"C": 3, "MASK": mask, "BLOCK": 1024}
        yield L.tonemapped_l1_fwd, dict.fromkeys(["pred_ptr", "target_ptr", "mask_ptr", "part_ptr"], f) | {
            "n": i, "inv_n": "fp32"}, c
        yield L.tonemapped_l1_bwd, dict.fromkeys(["pred_ptr", "target_ptr", "mask_ptr", "g_ptr", "g_pred_ptr"], f) | {
            "n": i, "inv_n": "fp32"}, c
    for tri_t in ("*i32", "*i64"):
        for batched, down in itertools.product([False, True], repeat=2):
            c = {"BATCHED": batched, "DOWN": down, "BLOCK": 128}
            base = {"rast_ptr": f, "pos_ptr": f, "tri_ptr": tri_t, "topo_ptr": i64}
            yield A.aa_pairs, base | {"alpha_ptr": f, "n": i, "H": i, "W": i, "V": i}, c
            yield A.aa_bwd_pos, base | {"g_alpha_ptr": f, "g_pos_ptr": f, "n": i, "H": i, "W": i, "V": i,
                                        "boost": "fp32"}, c
    for tri_t in ("*i32", "*i64"):
        yield N.normals_face_fwd, {"pos_ptr": f, "tri_ptr": tri_t, "face_n_ptr": f, "acc_ptr": f, "n": i}, {"BLOCK": 128}
        for fg in (False, True):
            yield N.normals_face_bwd, {"pos_ptr": f, "tri_ptr": tri_t, "g_fn_ptr": f, "g_acc_ptr": f, "g_pos_ptr": f,
                                       "n": i}, {"FACE_GRAD": fg, "BLOCK": 128}
    yield N.normals_vertex_fwd, {"acc_ptr": f, "vn_ptr": f, "n": i}, {"BLOCK": 128}
    yield N.normals_vertex_bwd, {"acc_ptr": f, "g_vn_ptr": f, "g_acc_ptr": f, "n": i}, {"BLOCK": 128}
    from meshlift.kernels import _tangents_triton_kernels as TG

    for tri_t in ("*i32", "*i64"):  # the face lists as the caller passes them; the grouping is int64
        idx = {"tri_ptr": tri_t, "ttri_ptr": tri_t, "ntri_ptr": tri_t, "gi_ptr": i64}
        grp = {"ttri_ptr": tri_t, "ntri_ptr": tri_t, "first_ptr": i64}
        yield TG.tangents_face_fwd, {"pos_ptr": f, "tex_ptr": f, "nrm_ptr": f} | idx | {"acc_ptr": f, "n": i}, {
            "BLOCK": 128}
        yield TG.tangents_group_fwd, {"tex_ptr": f, "nrm_ptr": f} | grp | {"acc_ptr": f, "out_ptr": f, "n": i}, {
            "BLOCK": 128}
        yield TG.tangents_group_bwd, {"tex_ptr": f, "nrm_ptr": f} | grp | {"acc_ptr": f, "g_out_ptr": f, "g_acc_ptr": f,
                                                                           "g_nrm_ptr": f, "n": i}, {"BLOCK": 128}
        yield TG.tangents_face_bwd, {"pos_ptr": f, "tex_ptr": f, "nrm_ptr": f} | idx | {
            "g_acc_ptr": f, "g_pos_ptr": f, "g_nrm_ptr": f, "n": i}, {"BLOCK": 128}
    for ch in (1, 3, 4):
        c = {"C": ch, "CP": 1 << max(0, (ch - 1).bit_length()), "BLOCK": 128}
        yield A.aa_apply, dict.fromkeys(["color_ptr", "ah_ptr", "av_ptr", "out_ptr"], f) | {"n": i, "H": i, "W": i}, c
        yield A.aa_bwd_color, dict.fromkeys(["g_ptr", "color_ptr", "ah_ptr", "av_ptr", "g_color_ptr", "g_ah_ptr",
                                             "g_av_ptr"], f) | {"n": i, "H": i, "W": i}, c
    from meshlift.kernels import _raster_triton_kernels as R
    from meshlift.kernels import raster_triton as RT

    th, tw = RT.DEFAULT_TILE
    bh, bw = RT._BWD_TILE
    for rng, gdb, final, unroll in itertools.product([False, True], [False, True], [False, True], [1, 2]):
        c = {"RANGE": rng, "GRAD_DB": gdb, "TILE_H": th, "TILE_W": tw, "UNROLL": unroll, "FINAL": final}
        yield R._raster_kernel, {"pos_ptr": f, "tri_ptr": "*i32", "offs_ptr": "*i32", "list_ptr": "*i32",
                                 "xtab_ptr": f, "ytab_ptr": f, "scale_ptr": f, "rast_ptr": f, "db_ptr": f,
                                 "key_ptr": i64, "vstride": i, "H": i, "W": i, "n_tx": i, "n_tiles": i}, c
    for rng, has_g, has_db in itertools.product([False, True], repeat=3):
        c = {"RANGE": rng, "HAS_G": has_g, "HAS_DB": has_db, "BH": bh, "BW": bw, "MAX_IDS": 8,
             "MIN_PIX": RT._BWD_MIN_PIX}
        yield R._raster_bwd_kernel, dict.fromkeys(["pos_ptr"], f) | {"tri_ptr": "*i32"} | dict.fromkeys(
            ["rast_ptr", "grast_ptr", "gdb_ptr", "xtab_ptr", "ytab_ptr", "scale_ptr", "gpos_ptr"], f) | dict.fromkeys(
            ["vstride", "H", "W", "n_tx", "gsb", "gsh", "gsw", "gsc", "dsb", "dsh", "dsw", "dsc"], i), c
    from meshlift.kernels import prefilter_triton as PF

    _, _rows, short_rows = PF._kernels()
    csr = {"crow_ptr": "*i32", "col_ptr": "*i32", "val_ptr": f, "x_ptr": f, "y_ptr": f}
    yield _rows, csr, {"C": 3, "BLOCK_K": PF._BLOCK_K, "BLOCK_C": 4}
    yield short_rows, csr | {"n_rows": i}, {"C": 3, "BLOCK_R": PF._BLOCK_R, "BLOCK_C": 4}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arch", type=int, default=90)
    args = ap.parse_args(argv)
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    target = GPUTarget("cuda", args.arch, 32)
    failed = 0
    times: dict[str, float] = {}
    for fn, sig, consts in variants():
        sig = dict(sig) | dict.fromkeys(consts, "constexpr")
        t0 = time.perf_counter()
        try:
            triton.compile(ASTSource(fn=fn, signature=sig, constexprs=consts), target=target)
            dt = time.perf_counter() - t0
            status = f"ok {dt:.2f} s"
            times[fn.__name__] = times.get(fn.__name__, 0.0) + dt
        except Exception as e:  # report every failure, then exit non-zero
            failed += 1
            status = f"FAILED: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        print(f"{fn.__name__} {consts}: {status}", flush=True)
    print(f"{failed} failed")
    # compile seconds per kernel over its variants (this machine's CPU; the first call of a process on a GPU
    # pays the same kind of cost per variant it launches, once per empty cache)
    for name, t in sorted(times.items(), key=lambda kv: -kv[1]):
        print(f"  {name}: {t:.2f} s")
    print(f"total compile {sum(times.values()):.1f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
