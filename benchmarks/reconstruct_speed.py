"""Per-stage cost of one nvdiffrec training step (pass 1 and pass 2), steps/s, aten ops and host syncs per step.

Usage (from the repository root)::

    python benchmarks/reconstruct_speed.py --device cuda --out benchmarks/results/reconstruct_speed_h200.md
    python benchmarks/reconstruct_speed.py --device cpu --configs quick          # CPU: the --quick preset only
    python benchmarks/reconstruct_speed.py --preset spot --configs full --set ref_views=16 --device cpu

What it runs, per configuration (``full`` = the preset as shipped, ``quick`` = its ``--quick`` variant; both by
default), on the preset's own data (``spot``/``bob``: the shared mesh, rendered as a synthetic scene; ``demo``: the
procedural ring of ``meshlift demo``; a dataset preset needs ``--set data=PATH``):

1. pass 1 (the real loop of ``methods.nvdiffrec.passes.run_pass1``) for ``--warmup`` + ``--steps`` +
   ``--profile-steps`` steps: the warm-up steps are not measured (Triton compiles, caches fill), the timed
   steps give per-stage milliseconds and steps/s, the profiled steps give the op and sync counts;
2. the stages between the passes (mesh extraction + hidden-face removal, UV unwrap, bake), timed once;
3. pass 2 the same way;
4. the evaluation of the held-out views, timed once.

Stages of a step (``engine.StageTimer`` names of the loop, plus ``rasterize`` / ``material`` / ``shade``
split out of ``render`` by wrapping ``meshlift.render.{rasterize,interpolate,antialias}``, the material field
and ``EnvironmentLight.shade``): ``views`` (batch to the device), ``light`` (``build_mips``: the prefilter),
``marching_tets`` (pass 1: the isosurface), ``rasterize`` (rasterize + interpolate + antialias forward),
``material``, ``shade``, ``render`` (the rest of ``render_mesh``), ``loss`` (image loss + regularisers),
``backward``, ``optimizer`` (Adam steps, LR schedules, clamps), ``bookkeeping`` (``TrainLoop._bookkeeping`` of ``methods.loop``).
Timing: CUDA events around every stage on the GPU (no host sync inside a step; one synchronize at the end of
the timed window), ``time.perf_counter`` on the CPU (where every op is synchronous). Only the timed steps
count; the profiled steps are excluded from the times (the profiler slows them down).

Counts (``torch.profiler`` on the CPU side, any device):

- ``aten ops``: every ``aten::`` call, nested calls included (a proxy for dispatcher overhead);
- ``kernel ops``: leaf ``aten::`` calls that are not views/metadata (a proxy for kernel launches on CUDA);
- ``CUDA launches``: ``cudaLaunchKernel``-type runtime calls (GPU only);
- ``syncs``: calls of ops that read a device value back to the host on CUDA (``.item()``/``float()``,
  ``nonzero`` — boolean-mask indexing —, ``unique``, ``masked_select``, ``bincount``, ``equal``, ...; see
  :data:`SYNC_OPS`), except the optimizer's reads of Adam's step counters (host tensors); on CUDA also the
  synchronisations that ``torch.cuda.set_sync_debug_mode("warn")`` reports (``syncs (cuda)``). Not seen by
  either count: copies from pageable host memory to the GPU, which also make the host wait.

Timing on a shared CPU is unreliable: compare op and sync counts there, times only on a quiet GPU.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import datetime
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import torch

if not os.environ.get("PYTHONPATH"):  # an explicit PYTHONPATH (e.g. another checkout, for "before" counts) wins
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

#: Ops that synchronise with the device on CUDA (their output size or value is read by the host).
SYNC_OPS = frozenset({
    "aten::_local_scalar_dense", "aten::nonzero", "aten::nonzero_static", "aten::_unique", "aten::_unique2",
    "aten::unique_dim", "aten::unique_consecutive", "aten::unique_dim_consecutive", "aten::masked_select",
    "aten::bincount", "aten::equal", "aten::is_nonzero", "aten::histc", "aten::multinomial",
    "aten::_assert_async",
})
#: Leaf ops that launch no kernel (views, metadata, allocation).
NO_KERNEL_OPS = frozenset({
    "aten::empty", "aten::empty_strided", "aten::empty_like", "aten::as_strided", "aten::view", "aten::_reshape_alias",
    "aten::reshape", "aten::t", "aten::transpose", "aten::permute", "aten::expand", "aten::slice", "aten::select",
    "aten::unsqueeze", "aten::squeeze", "aten::detach", "aten::alias", "aten::lift_fresh", "aten::resize_",
    "aten::set_", "aten::_unsafe_view", "aten::split", "aten::chunk", "aten::narrow", "aten::diagonal",
    "aten::view_as", "aten::expand_as", "aten::unbind", "aten::numpy_T", "aten::_local_scalar_dense",
    "aten::result_type", "aten::is_nonzero", "aten::can_cast", "aten::is_same_size", "aten::size", "aten::stride",
    "aten::contiguous", "aten::to", "aten::_has_compatible_shallow_copy_type", "aten::detach_", "aten::squeeze_",
    "aten::unsqueeze_", "aten::as_strided_", "aten::movedim", "aten::unflatten", "aten::flatten", "aten::unfold",
    "aten::align_to", "aten::split_with_sizes", "aten::lift", "aten::requires_grad_", "aten::retain_grad",
    "aten::_nested_tensor_from_mask_left_aligned", "aten::broadcast_tensors", "aten::sym_size", "aten::sym_numel",
})
STAGES = ("views", "light", "marching_tets", "rasterize", "material", "shade", "render", "loss", "backward",
          "optimizer", "bookkeeping")


class StageClock:
    """An ``engine.StageTimer``: per-stage exclusive milliseconds of each step (CUDA events or perf_counter).

    Nested stages (``rasterize`` inside ``render``) are subtracted from their parent, so the stages of a step
    add up to its time. Only steps between :meth:`arm` and :meth:`disarm` are recorded.
    """

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.armed = False
        self.steps: list[list[tuple[str, object, object, int]]] = []
        self.stack: list[str] = []
        self.current: list = []

    def arm(self) -> None:
        self.armed, self.steps, self.current = True, [], []

    def disarm(self) -> None:
        self.armed = False

    def _mark(self):
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            return e
        return time.perf_counter()

    _null = contextlib.nullcontext()
    profiling = False
    on_step = None

    def __call__(self, name: str):
        if name == "views" and self.on_step is not None:
            self.on_step()
        if self.profiling:  # profiled steps: label the ops of each stage (record_function ranges)
            return torch.profiler.record_function(f"stage::{name}")
        if not self.armed:
            return self._null
        return self._timed(name)

    @contextlib.contextmanager
    def _timed(self, name: str):
        depth = len(self.stack)
        self.stack.append(name)
        t0 = self._mark()
        try:
            yield
        finally:
            t1 = self._mark()
            self.stack.pop()
            self.current.append((name, t0, t1, depth))

    def end_step(self) -> None:
        if self.armed:
            self.steps.append(self.current)
        self.current = []

    def per_stage_ms(self) -> tuple[dict, float]:
        """Median-free mean per stage (ms, exclusive of nested stages) and the mean step time covered."""
        if self.cuda:
            torch.cuda.synchronize()

        def dt(a, b) -> float:
            return a.elapsed_time(b) if self.cuda else (b - a) * 1e3

        totals: dict = collections.defaultdict(float)
        for step in self.steps:
            # inclusive times, then subtract each child's inclusive time from its innermost enclosing parent
            incl = [dt(t0, t1) for _, t0, t1, _ in step]
            excl = list(incl)
            for i, (_, _, _, d) in enumerate(step):
                for j in range(i + 1, len(step)):  # a child closes before its parent: search forward
                    if step[j][3] == d - 1:
                        excl[j] -= incl[i]
                        break
            for (name, _, _, _), v in zip(step, excl):
                totals[name] += v
        n = max(1, len(self.steps))
        return {k: v / n for k, v in totals.items()}, sum(totals.values()) / n


def _wrap(obj, attr: str, stage: str, clock: StageClock, undo: list) -> None:
    fn = getattr(obj, attr)

    def wrapped(*a, **k):
        with clock(stage):
            return fn(*a, **k)

    setattr(obj, attr, wrapped)
    undo.append((obj, attr, fn))


@contextlib.contextmanager
def render_stages(clock: StageClock):
    """Split ``render`` into rasterize / material / shade by wrapping the ops ``render_mesh`` calls."""
    import meshlift.render as R
    from meshlift.methods.nvdiffrec.materials import BoundedMaterialField
    from meshlift.shading.light import EnvironmentLight

    undo: list = []
    for name in ("rasterize", "interpolate", "antialias"):
        _wrap(R, name, "rasterize", clock, undo)
    _wrap(BoundedMaterialField, "forward", "material", clock, undo)
    _wrap(EnvironmentLight, "shade", "shade", clock, undo)
    try:
        yield
    finally:
        for obj, attr, fn in reversed(undo):
            setattr(obj, attr, fn)


class PhaseMonitor:
    """Moves the benchmark through warm-up → timed → profiled steps of a pass.

    Step boundaries are the loop's ``views`` stage (the first of every step, both passes), not
    ``Monitor.update``: with deferred loss read-backs the monitor hears of steps in groups. The pass is run
    for ``warmup + steps + profile_steps + 1`` steps; the extra step's start closes the profiled window.
    """

    def __init__(self, clock: StageClock, device: torch.device, warmup: int, steps: int, profile_steps: int,
                 cprofile_steps: int = 0) -> None:
        self.clock, self.device = clock, device
        self.warmup, self.steps, self.profile_steps = warmup, steps, profile_steps
        self.cprofile_steps = cprofile_steps
        self._cprof = None
        self.n = 0
        self.t_timed = None
        self.wall_s = None
        self.prof = None
        self.sync_warnings = 0
        self._warn_ctx = None
        self.stacks = False
        self.legacy = False  # a tree without the stage seam: step boundaries from Monitor.update

    # -- Monitor protocol (progress is not needed here)
    def start_pass(self, name, total, start=0):
        self.n = 0
        if self.legacy:
            self.step_boundary()
        else:
            self.clock.on_step = self.step_boundary

    def update(self, iteration, loss, psnr):
        if self.legacy:  # every step is read back at once there: update(it) = step it is about to start
            self.step_boundary()

    def end_pass(self):
        self.clock.on_step = None
        if self._cprof is not None:
            self._cprof.disable()
            self._cprof = None
        if self.prof is not None and self.clock.profiling:
            self._end_profile()

    def log(self, message):
        pass

    # -- phases
    def _sync(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    def step_boundary(self):
        """Called when step ``self.n`` (0-based) is about to start."""
        self.clock.end_step()
        if self.n == self.warmup:
            self._sync()
            self.clock.arm()
            self.t_timed = time.perf_counter()
        if self.n == self.warmup + self.steps:
            self._sync()
            self.wall_s = time.perf_counter() - self.t_timed
            self.clock.disarm()
            if self.profile_steps:
                self._begin_profile()
        if self.profile_steps and self.n == self.warmup + self.steps + self.profile_steps:
            self._end_profile()
        k = self.warmup + self.steps + self.profile_steps
        if self.cprofile_steps and self.n == k:
            import cProfile

            self._sync()
            self._cprof = cProfile.Profile()
            self._cprof.enable()
        if self._cprof is not None and self.n == k + self.cprofile_steps:
            self._sync()
            self._cprof.disable()
            print_cprofile(self._cprof, self.cprofile_steps)
            self._cprof = None
        self.n += 1

    def _begin_profile(self):
        from torch.profiler import ProfilerActivity, profile

        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.device.type == "cuda" else [])
        self.prof = profile(activities=acts, with_stack=self.stacks)
        self.prof.__enter__()
        self.clock.profiling = True
        if self.device.type == "cuda":
            self._warn_ctx = warnings.catch_warnings(record=True)
            self._records = self._warn_ctx.__enter__()
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")

    def _end_profile(self):
        if self.device.type == "cuda":
            torch.cuda.set_sync_debug_mode("default")
            self.sync_warnings = sum("synchroniz" in str(w.message) for w in self._records)
            self._warn_ctx.__exit__(None, None, None)
        self.prof.__exit__(None, None, None)
        self.clock.profiling = False
        if self.device.type == "cuda":
            print_kernel_table(self.prof, self.profile_steps)


def print_kernel_table(prof, steps: int, rows: int = 25) -> None:
    """The GPU side of the profiled steps: device-busy ms per step and the kernels that take it.

    Busy time is the sum of the durations of device events (kernels, copies) that are not user annotations
    (the ``stage::`` ranges and autograd-function names also carry device times in ``key_averages``; adding
    those counted the same kernels two or three times)."""
    from torch.autograd import DeviceType

    per = collections.defaultdict(lambda: [0.0, 0])
    for e in prof.events():
        if e.device_type != DeviceType.CUDA or getattr(e, "is_user_annotation", False):
            continue
        if e.name.startswith("stage::"):
            continue
        per[e.name][0] += e.time_range.elapsed_us()
        per[e.name][1] += 1
    n = max(1, steps)
    busy = sum(v[0] for v in per.values()) / 1000.0 / n
    print(f"GPU busy per profiled step: {busy:.2f} ms (sum of kernel and copy durations; the profiler adds host "
          f"cost, so the step's wall time is not comparable)")
    print("| kernel | device ms per step | launches per step |")
    print("|---|---:|---:|")
    for name, (us, cnt) in sorted(per.items(), key=lambda kv: kv[1][0], reverse=True)[:rows]:
        print(f"| {name[:90]} | {us / 1000.0 / n:.3f} | {cnt / n:.0f} |")


def print_cprofile(pr, steps: int, rows: int = 45) -> None:
    """Host time of the cProfiled steps: the functions with the most own time and the most cumulative time."""
    import io
    import pstats

    for key in ("tottime", "cumulative"):
        buf = io.StringIO()
        st = pstats.Stats(pr, stream=buf)
        st.sort_stats(key).print_stats(rows)
        print(f"cProfile of {steps} steps, sorted by {key} (times are totals over the steps):")
        text = buf.getvalue()
        print(text[text.find("   ncalls"):])


def count_ops(prof, steps: int) -> dict:
    """Per-step counts from a finished profiler: aten ops, kernel-like leaf ops, syncs, CUDA launches."""
    events = prof.events()
    aten = [e for e in events if e.name.startswith("aten::")]
    leaf = [e for e in aten if not any(c.name.startswith("aten::") for c in e.cpu_children)]
    kernel_ops = [e for e in leaf if e.name not in NO_KERNEL_OPS]
    launches = sum(1 for e in events if e.name in ("cudaLaunchKernel", "cuLaunchKernel", "cuLaunchKernelEx",
                                                    "cudaLaunchKernelExC"))
    top = collections.Counter(e.name for e in kernel_ops).most_common(12)

    def stage_of(e) -> str:
        names = []
        p = e.cpu_parent
        while p is not None:
            if p.name.startswith("stage::"):
                names.append(p.name[7:])
            p = p.cpu_parent
        return names[0] if names else "other"  # innermost stage

    by_stage = collections.Counter(stage_of(e) for e in kernel_ops)
    # Adam keeps its step counters on the host (``state["step"]`` is a CPU tensor unless capturable/fused):
    # reading them is a `_local_scalar_dense` of the optimizer stage that never waits for a device.
    host_reads = [e for e in aten if e.name == "aten::_local_scalar_dense" and stage_of(e) == "optimizer"]
    host_ids = {id(e) for e in host_reads}
    sync_events = [e for e in aten if e.name in SYNC_OPS and id(e) not in host_ids]
    syncs = collections.Counter(e.name for e in sync_events)
    syncs_by_stage = collections.Counter(stage_of(e) for e in sync_events)
    n = max(1, steps)
    where = collections.Counter()
    kernels_at = collections.Counter()

    def source(e) -> str:
        """The innermost meshlift function on the op's call path (python-tracer events are its parents)."""
        p = e.cpu_parent
        while p is not None:
            if "meshlift/" in p.name and not p.name.startswith("aten::"):
                return p.name[p.name.index("meshlift/"):]
            p = p.cpu_parent
        return "?"

    backward_at = collections.Counter()
    if any("meshlift/" in e.name for e in events):
        for e in aten:
            if e.name in SYNC_OPS and id(e) not in host_ids:
                where[(e.name, source(e))] += 1
        # backward ops: the autograd node that runs them carries the sequence number of the forward op that
        # recorded it; that op's Python stack says where in meshlift the backward comes from
        fwd_by_seq = {}
        for e in aten:
            if getattr(e, "sequence_nr", -1) >= 0 and not e.name.startswith("autograd::"):
                fwd_by_seq.setdefault(e.sequence_nr, e)
        for e in kernel_ops:
            node = e.cpu_parent
            while node is not None and not node.name.startswith("autograd::engine::evaluate_function"):
                node = node.cpu_parent
            if node is None:
                kernels_at[source(e)] += 1
                continue
            fwd = fwd_by_seq.get(getattr(node, "sequence_nr", -1))
            backward_at[source(fwd) if fwd is not None else node.name.split(": ")[-1]] += 1
    return {"aten_ops": len(aten) / n, "kernel_ops": len(kernel_ops) / n, "syncs": sum(syncs.values()) / n,
            "sync_ops": {k: v / n for k, v in syncs.items()}, "launches": launches / n,
            "top": [(k, v / n) for k, v in top],
            "kernel_ops_by_stage": {k: v / n for k, v in by_stage.items()}, "host_reads": len(host_reads) / n,
            "syncs_by_stage": {k: v / n for k, v in syncs_by_stage.items()},
            "sync_sources": [(f"{k[0].removeprefix('aten::')} at {k[1]}", v / n) for k, v in where.most_common(40)],
            "kernel_sources": [(k, v / n) for k, v in kernels_at.most_common(30)],
            "backward_sources": [(k, v / n) for k, v in backward_at.most_common(30)]}


def make_config(preset: str, quick: bool, device: str, overrides: list[str]):
    from meshlift.methods.nvdiffrec.config import apply_dict, parse_overrides
    from meshlift.methods.nvdiffrec.presets import get_preset

    cfg = get_preset(preset, quick=quick)
    values = {"device": device, "checkpoint_every": 0, "checkpoint_every_s": 0.0, "preview_every": 0}
    if not cfg.data and preset.split("_")[0] in ("spot", "bob"):
        root = Path(os.environ.get("MESHLIFT_SHARED_DATA", "/work/shared/data"))
        name = preset.split("_")[0]
        values["data"] = str(root / name / f"{name}.obj")
    values.update(parse_overrides(overrides))
    return apply_dict(cfg, values)


def _commit() -> str:
    """The commit of the meshlift that is imported (not necessarily this script's checkout)."""
    import meshlift

    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             cwd=Path(meshlift.__file__).parent)
        return out.stdout.strip() or "?"
    except OSError:
        return "?"


#: Set by ``--cuda-paths``: the passes run with the shading fast paths on Triton (``use_kernels(shading="triton")``,
#: interpreted on the CPU).
CUDA_PATHS = False


@contextlib.contextmanager
def _pass_paths():
    if not CUDA_PATHS:
        yield
        return
    from meshlift.kernels import use_kernels

    with use_kernels(shading="triton"):
        yield


def run_config(label: str, cfg, warmup: int, steps: int, profile_steps: int, log, stacks: bool = False,
               cprofile_steps: int = 0) -> dict:
    from meshlift.methods.engine import Checkpointer, TrainState, resolve_device
    from meshlift.methods.nvdiffrec import passes
    from meshlift.methods.nvdiffrec.evaluate import image_metrics, render_views
    from meshlift.methods.nvdiffrec.reconstruct import load_problem

    device = resolve_device(cfg.device)
    n_total = warmup + steps + profile_steps + cprofile_steps + 1  # the last step only closes the last window
    cfg = dataclasses.replace(cfg, iter_pass1=n_total, iter_pass2=n_total)
    torch.manual_seed(cfg.seed)
    t = time.perf_counter()
    if cfg.data:
        data = load_problem(cfg, device)
    else:  # the demo preset: the ring `meshlift demo` reconstructs
        from meshlift.data.demo_object import make_demo_object
        from meshlift.methods.nvdiffrec.reconstruct import synthetic_problem

        data = synthetic_problem(make_demo_object(), cfg, device, name="demo ring")
    log(f"[{label}] data: {len(data.train)} views at {data.train.resolution} in {time.perf_counter() - t:.1f} s")
    result: dict = {"label": label, "device": str(device)}
    clock = StageClock(device)
    state = TrainState()
    ck = Checkpointer(None)

    import inspect

    sig1 = inspect.signature(passes.run_pass1).parameters
    sig2 = inspect.signature(passes.run_pass2).parameters
    kw1 = {"stages": clock} if "stages" in sig1 else {}  # older trees (the "before" counts) have no stage seam
    with render_stages(clock):
        mon1 = PhaseMonitor(clock, device, warmup, steps, profile_steps, cprofile_steps)
        mon1.stacks, mon1.legacy = stacks, not kw1
        t = time.perf_counter()
        with _pass_paths():
            p1 = passes.run_pass1(cfg, data, device, state=state, monitor=mon1, checkpointer=ck, **kw1)
        result["pass1_total_s"] = time.perf_counter() - t
        result["pass1"] = _pass_result(clock, mon1, steps, profile_steps)
        result["pass1_faces"] = int(p1.mesh.num_faces)
        log(f"[{label}] pass 1 done: {result['pass1_faces']} faces")

        t = time.perf_counter()
        base, tex = passes.prepare_pass2_mesh(p1, cfg)
        _sync(device)
        result["unwrap_bake_s"] = time.perf_counter() - t
        result["pass2_faces"] = int(base.num_faces)
        kw2 = {"stages": clock, "prepared": (base, tex)} if "prepared" in sig2 else {}
        mon2 = PhaseMonitor(clock, device, warmup, steps, profile_steps, cprofile_steps)
        mon2.stacks, mon2.legacy = stacks, not kw2
        with _pass_paths():
            p2 = passes.run_pass2(cfg, data, device, p1, state=state, monitor=mon2, checkpointer=ck, **kw2)
        result["pass2"] = _pass_result(clock, mon2, steps, profile_steps)

    t = time.perf_counter()
    ours, targets = render_views(p2.mesh, data.test, p2.light, None, cfg, device)
    result["psnr"] = image_metrics(ours, targets)["psnr"]
    result["eval_s"] = time.perf_counter() - t
    return result


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def _pass_result(clock: StageClock, mon: PhaseMonitor, steps: int, profile_steps: int) -> dict:
    stage_ms, covered = clock.per_stage_ms()
    out = {"stage_ms": stage_ms, "step_ms": 1e3 * mon.wall_s / max(1, steps) if mon.wall_s else float("nan"),
           "covered_ms": covered}
    out["steps_per_s"] = 1e3 / out["step_ms"] if out["step_ms"] == out["step_ms"] and out["step_ms"] > 0 else 0.0
    if mon.prof is not None:
        out.update(count_ops(mon.prof, profile_steps))
        out["syncs_cuda"] = mon.sync_warnings / max(1, profile_steps)
    return out


def table(results: list[dict], header: str) -> str:
    lines = [header, ""]
    cols = ["config", "pass"] + list(STAGES) + ["step ms", "steps/s", "aten ops", "kernel ops", "syncs",
                                                 "syncs (cuda)", "CUDA launches"]
    lines.append("| " + " | ".join(cols) + " |")
    lines.append("|" + "|".join(["---"] * 2 + ["---:"] * (len(cols) - 2)) + "|")
    for r in results:
        for p in ("pass1", "pass2"):
            d = r[p]
            sm = d["stage_ms"]
            row = [r["label"], p] + [f"{sm[s]:.2f}" if s in sm else "-" for s in STAGES]
            row += [f"{d['step_ms']:.1f}", f"{d['steps_per_s']:.2f}", f"{d.get('aten_ops', 0):.0f}",
                    f"{d.get('kernel_ops', 0):.0f}", f"{d.get('syncs', 0):.0f}",
                    f"{d['syncs_cuda']:.0f}" if r["device"].startswith("cuda") else "-",
                    f"{d.get('launches', 0):.0f}" if r["device"].startswith("cuda") else "-"]
            lines.append("| " + " | ".join(row) + " |")
    lines.append("")
    lines.append("| config | pass-1 faces | pass-2 faces | unwrap + bake s | evaluation s | test PSNR (short run) |")
    lines.append("|---|---:|---:|---:|---:|---:|")
    for r in results:
        lines.append(f"| {r['label']} | {r['pass1_faces']} | {r['pass2_faces']} | {r['unwrap_bake_s']:.2f} | "
                     f"{r['eval_s']:.2f} | {r['psnr']:.2f} |")
    lines.append("")
    for r in results:
        for p in ("pass1", "pass2"):
            d = r[p]
            if "sync_ops" in d:
                so = ", ".join(f"{k.removeprefix('aten::')} {v:g}" for k, v in sorted(d["sync_ops"].items()))
                top = ", ".join(f"{k.removeprefix('aten::')} {v:g}" for k, v in d["top"])
                lines.append(f"- {r['label']} {p}: syncs per step: {so or 'none'}; most frequent kernel ops: {top}")
                ks = ", ".join(f"{k} {v:g}" for k, v in sorted(d["kernel_ops_by_stage"].items(), key=lambda x: -x[1]))
                ss = ", ".join(f"{k} {v:g}" for k, v in sorted(d["syncs_by_stage"].items(), key=lambda x: -x[1]))
                lines.append(f"  - kernel ops by stage: {ks}")
                lines.append(f"  - syncs by stage: {ss or 'none'} (not counted: {d['host_reads']:g} reads of Adam's "
                             "host-side step counters)")
                for src, v in d.get("sync_sources", []):
                    lines.append(f"  - sync {v:g} × {src}")
                for src, v in d.get("kernel_sources", []):
                    lines.append(f"  - kernel ops {v:g} × {src}")
                for src, v in d.get("backward_sources", []):
                    lines.append(f"  - backward kernel ops {v:g} × (forward at) {src}")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="spot")
    ap.add_argument("--configs", nargs="+", default=["full", "quick"], choices=["full", "quick"])
    ap.add_argument("--device", default="auto")
    ap.add_argument("--warmup", type=int, default=5, help="unmeasured steps per pass (compile, caches)")
    ap.add_argument("--steps", type=int, default=20, help="timed steps per pass")
    ap.add_argument("--profile-steps", type=int, default=2, help="profiled steps per pass (op / sync counts)")
    ap.add_argument("--cprofile-steps", type=int, default=0,
                    help="after the profiled steps, this many more under cProfile (host time by Python function)")
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="config override field=value")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = leave as is)")
    ap.add_argument("--stacks", action="store_true", help="list where the syncs come from (Python stacks)")
    ap.add_argument("--out", type=Path, default=None, help="also write the table (markdown) here")
    ap.add_argument("--cuda-paths", action="store_true",
                    help="CPU op counts of the CUDA code paths: inside the passes only, the shading fast paths "
                         "(fused Triton kernels) run under the Triton interpreter (use_kernels(shading='triton'), "
                         "TRITON_INTERPRET=1); data rendering and evaluation stay on the torch paths")
    args = ap.parse_args(argv)
    if args.cuda_paths:
        os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported
        global CUDA_PATHS
        CUDA_PATHS = True
    if args.threads:
        torch.set_num_threads(args.threads)

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    results = []
    for c in args.configs:
        cfg = make_config(args.preset, c == "quick", args.device, args.overrides)
        label = f"{args.preset}{' --quick' if c == 'quick' else ''}"
        results.append(run_config(label, cfg, args.warmup, args.steps, args.profile_steps, log, args.stacks,
                                  args.cprofile_steps))
    commit = _commit()
    dev = results[0]["device"]
    name = torch.cuda.get_device_name() if dev.startswith("cuda") else "CPU"
    header = (f"reconstruct_speed: preset {args.preset}, {datetime.date.today()}, {name}, torch {torch.__version__}, "
              f"commit {commit}; {args.warmup} warm-up + {args.steps} timed + {args.profile_steps} profiled steps "
              f"per pass; overrides {args.overrides or 'none'}. Stage columns: ms per step (exclusive).")
    text = table(results, header)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
