"""Where the real 3DGS / MILo training loop spends its time, per window of N steps (issue 29).

Usage (from the repository root)::

    # CPU, tiny sizes: the quick presets' sizes, MILo's verylowres schedule scaled by 0.05 (steps 0-300 cover
    # the schedule's 0-6000: densify 25-150, re-init 100, importance sampling + depth-normal loss from 150)
    python benchmarks/gaussians_loop_profile.py --device cpu --quick --clock cpu --cases milo_delaunay:300 \
        --window 25 --schedule-scale 0.05 --set-milo train_res=64 densify_max_gaussians=8000 reinit_points=0 \
        --out /tmp/loop_cpu.json
    python benchmarks/gaussians_loop_profile.py --device cpu --quick --clock cpu --cases gaussians:200 --window 25
    # the device run (one call, < ~200 s on an H200; benchmarks/README.md has the exact line)
    python3 benchmarks/gaussians_loop_profile.py --device cuda --cases gaussians:3000 milo_delaunay:1500 \
        --window 100 --milo-window 50 --schedule-scale 0.25 --time-limit 50 110 --total-time 190 \
        --out $OUT/loop_profile.json
    # the host's share of the 3DGS step: issue time vs wall of plain steps, then cProfile's top functions
    python3 benchmarks/gaussians_loop_profile.py --device cuda --cases gaussians:2600 --window 100 --no-syncs \
        --cprofile 1300:1500:time 1500:1700 --out $OUT/lp.json
    # compositing-kernel variants side by side on the same training render's inputs (benchmarks/_kernel_ab.py)
    python3 benchmarks/gaussians_loop_profile.py --device cuda --cases gaussians:12000 --window 1000 --no-syncs \
        --kernel-ab 4:0/8:2 1:0/8:2 4:0/4:2 --ab-steps 2000 12000 --out $OUT/lp_ab.json

Unlike ``benchmarks/gaussians_step.py`` (one isolated step at a fixed Gaussian set), this runs the whole
method as the CLI does — :func:`meshlift.methods.gaussians.reconstruct.reconstruct` (``--method gaussians``)
or :func:`meshlift.methods.milo.reconstruct.reconstruct` (``--method milo``, ``extract=delaunay`` or
``extract=tsdf``), with density control, MILo's events and regularisers, previews and checkpoints written to a
temporary folder — and stops it after the case's step count (before extraction). Cases (``name[:steps]``):

- ``gaussians``: the ``gaussians`` preset on the shared lego (``--gaussians-data``);
- ``milo_delaunay`` / ``milo_tsdf``: the ``verylowres`` preset with ``extract=delaunay`` / ``tsdf`` on the
  shared spot mesh (``--milo-data``; the preset's ``train_res`` (1600) and ``ref_views`` (100) unless
  ``--set-milo``; ``benchmarks/milo_results.py`` runs spot at ``train_res=512``).

``--schedule-scale F`` scales MILo's step fields (:func:`meshlift.methods.milo.presets.scale_schedule`:
densification, re-init, sampling, depth-normal start, prune, mesh start, SH interval, previews, checkpoints;
with ``--quick`` the *full* preset's schedule is scaled, keeping the quick preset's sizes). The Gaussian
case's schedule is never scaled. No time budget (``time_budget_s=0``), LPIPS off.

Per window it prints (and writes to ``--out``, JSON plus a markdown twin ``.md``, rewritten after every
window so a run cut short keeps what it measured): ms/step split by stage, exclusive of nested stages —
``views`` (batch to the device, background, targets), ``render`` (the training render), ``loss`` (L1 +
SSIM), ``reg`` (the regulariser's ``loss`` hook minus its parts:) ``depth_normal``, ``flatten``,
``mesh_start``, ``mesh_maintain`` (Delaunay submit/switch, SDF resets, labels), ``mesh_loss``; ``backward``,
``optimizer`` (the Gaussians' Adam steps), ``strategy`` (density-control hooks: statistics), ``densify``
(clone/split/prune/opacity reset), ``milo_event`` (re-init, importance sampling, cdf pruning),
``reg_hooks`` (``render_outputs``, ``after_optimizer_step``), ``bookkeeping`` (``TrainLoop._bookkeeping``:
read-back, guard, history, progress), ``preview``, ``checkpoint``, ``other`` (the step's time not covered by a stage:
the trainer's own code, Python overhead). Renders, view loads and Adam steps inside another stage (an
importance pass, a depth fusion, a preview) count towards that stage. Beside the times: the Gaussian count
(end of window, min–max), intersections per step (tile–Gaussian pairs of the training render) and per
visible Gaussian, the visible Gaussians' screen radius and the largest-axis scale quantiles (how large the
Gaussians are: intersections grow with count and size), host syncs per step (and by stage), memory (CUDA:
peak allocated in the window; CPU: resident set), process CPU seconds per wall second (threads or processes
working beside the loop show as > 1 on the GPU), live Python objects, history rows, the strategy's events.

Timing: on CUDA, CUDA events around every stage and at every step boundary, one synchronise at the end of
each window (nothing else added to a step; the first window holds the Triton compiles); host syncs counted
by ``torch.cuda.set_sync_debug_mode("warn")`` over every step. On the CPU, ``time.perf_counter``, or with
``--clock cpu`` the main thread's CPU time with one torch thread (a loaded shared machine inflated wall
times 10-20x in this script's first runs; CPU time stays put); syncs (ops that would read a device value
back on CUDA, ``reconstruct_speed.SYNC_OPS``, Adam's host step counters left out) are counted in the last
step of each window under a dispatch mode, and that step is left out of the window's times. A loop stops at
the first window end past ``--time-limit`` (per case) or ``--total-time`` (the whole command).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import datetime
import gc
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
if not os.environ.get("PYTHONPATH"):
    sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

#: Stages in table order (``other`` is the rest of the step's wall time).
STAGES = ("views", "render", "loss", "reg", "depth_normal", "flatten", "mesh_start", "mesh_maintain", "mesh_loss",
          "backward", "optimizer", "strategy", "densify", "milo_event", "reg_hooks", "bookkeeping", "preview",
          "checkpoint", "other")
CASES = ("gaussians", "milo_delaunay", "milo_tsdf")


def data_root() -> Path:
    env = os.environ.get("MESHLIFT_SHARED_DATA")
    for p in ([Path(env)] if env else []) + [ROOT / "shared" / "data", ROOT.parent / "shared" / "data",
                                              ROOT / ".devrun" / "data"]:
        if p.is_dir():
            return p
    raise SystemExit("shared data not found: set MESHLIFT_SHARED_DATA or pass --gaussians-data / --milo-data")


class _Stop(Exception):
    """Ends a case's loop (raised by the profiler after its last step or at its time limit)."""


class LoopClock:
    """Stage marks of the steps of one window; per-stage exclusive times when the window closes.

    A stage is entered through :meth:`stage`. ``top`` stages (the training step's own views / render / loss /
    backward / optimizer) are recorded only when no other stage is open, so the renders and view loads inside
    an importance pass, a depth fusion or a preview count towards that stage, not towards the step's render.
    """

    def __init__(self, device: torch.device, cpu_clock: bool = False) -> None:
        self.cuda = device.type == "cuda"
        # CPU device: wall time, or with cpu_clock the main thread's CPU time (robust to other processes on a
        # shared machine; needs one torch thread, or the intra-op threads' work is not counted)
        self._now = time.thread_time if (cpu_clock and not self.cuda) else time.perf_counter
        self.stack: list[str] = []
        self.marks: list = []  # (name, t0, t1, depth) of the current step, in closing order
        self.recording = True  # False in a sync-count step (CPU): the stack is kept, nothing is timed
        self.adam_depth = 0
        self._pool: list = []  # CUDA events, reused window after window
        self._used = 0

    def mark(self):
        if self.cuda:  # events are reused window after window (read once the window is synchronised)
            if self._used == len(self._pool):
                self._pool.append(torch.cuda.Event(enable_timing=True))
            e = self._pool[self._used]
            self._used += 1
            e.record()
            return e
        return self._now()

    def recycle(self) -> None:
        """Every mark taken so far has been read: their events may be recorded again."""
        self._used = 0

    def elapsed_ms(self, a, b) -> float:
        return a.elapsed_time(b) if self.cuda else (b - a) * 1e3

    @contextlib.contextmanager
    def stage(self, name: str, top: bool = False):
        if top and self.stack:
            yield
            return
        depth = len(self.stack)
        self.stack.append(name)
        t0 = self.mark() if self.recording else None
        try:
            yield
        finally:
            self.stack.pop()
            if self.recording:
                self.marks.append((name, t0, self.mark(), depth))

    def take_step(self) -> list:
        m, self.marks = self.marks, []
        return m

    def exclusive(self, marks: list) -> dict:
        """``{stage: ms}`` of one step's marks, each stage minus the stages nested in it."""
        incl = [self.elapsed_ms(t0, t1) for _, t0, t1, _ in marks]
        excl = list(incl)
        for i, (_, _, _, d) in enumerate(marks):
            for j in range(i + 1, len(marks)):  # a child closes before its parent
                if marks[j][3] == d - 1:
                    excl[j] -= incl[i]
                    break
        out: dict = collections.defaultdict(float)
        for (name, _, _, _), v in zip(marks, excl):
            out[name] += v
        return out


class _Patches:
    """Wraps functions and methods in clock stages; undone by :meth:`close`."""

    def __init__(self, clock: LoopClock) -> None:
        self.clock, self.undo = clock, []

    def wrap(self, owner, attr: str, stage: str, top: bool = False, after=None, adam: bool = False) -> None:
        had = attr in vars(owner)
        fn = vars(owner)[attr] if had else getattr(owner, attr)
        clock = self.clock

        def wrapped(*a, **k):
            if adam:
                clock.adam_depth += 1
            try:
                with clock.stage(stage, top):
                    out = fn(*a, **k)
            finally:
                if adam:
                    clock.adam_depth -= 1
            if after is not None:
                after(out)
            return out

        wrapped.__wrapped__ = fn
        setattr(owner, attr, wrapped)
        self.undo.append((owner, attr, fn, had))

    def close(self) -> None:
        for owner, attr, fn, had in reversed(self.undo):
            if had:
                setattr(owner, attr, fn)
            else:
                delattr(owner, attr)
        self.undo = []


class _SyncCounter:
    """Counts host syncs by the innermost open stage.

    CUDA: every synchronising call ``torch.cuda.set_sync_debug_mode("warn")`` reports. CPU: calls of
    ``reconstruct_speed.SYNC_OPS`` (what would read a device value back on CUDA) under a dispatch mode, while
    :meth:`cpu_mode` is entered, leaving out ``_local_scalar_dense`` inside an Adam step (its host counters).
    """

    def __init__(self, clock: LoopClock) -> None:
        self.clock = clock
        self.by_stage: collections.Counter = collections.Counter()
        self.paused = False
        self._show = None

    def _stage(self) -> str:
        return self.clock.stack[-1] if self.clock.stack else "other"

    def start_cuda(self) -> None:
        self._show = warnings.showwarning
        counter = self

        def show(message, category, filename, lineno, file=None, line=None):
            if "synchroniz" in str(message):
                if not counter.paused:
                    counter.by_stage[counter._stage()] += 1
                return
            counter._show(message, category, filename, lineno, file, line)

        warnings.filterwarnings("always", message=".*synchroniz.*")
        warnings.showwarning = show
        torch.cuda.set_sync_debug_mode("warn")

    def stop_cuda(self) -> None:
        torch.cuda.set_sync_debug_mode("default")
        if self._show is not None:
            warnings.showwarning = self._show
            self._show = None

    def cpu_mode(self):
        from torch.utils._python_dispatch import TorchDispatchMode

        from reconstruct_speed import SYNC_OPS

        counter = self

        class Count(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                name = func._schema.name
                if name in SYNC_OPS and not (name == "aten::_local_scalar_dense" and counter.clock.adam_depth):
                    counter.by_stage[counter._stage()] += 1
                return func(*args, **(kwargs or {}))

        return Count()

    def take(self) -> collections.Counter:
        c, self.by_stage = self.by_stage, collections.Counter()
        return c


def kernel_table(prof, step: int, rows: int = 10) -> dict:
    """``{"step", "busy_ms", "top": [[kernel, ms, launches], ...]}`` of one profiled step: the device time of
    its kernels and copies (user annotations left out, as ``reconstruct_speed.print_kernel_table``)."""
    from torch.autograd import DeviceType

    per: dict = collections.defaultdict(lambda: [0.0, 0])
    for e in prof.events():
        if e.device_type != DeviceType.CUDA or getattr(e, "is_user_annotation", False):
            continue
        per[e.name][0] += e.time_range.elapsed_us() / 1e3
        per[e.name][1] += 1
    top = sorted(per.items(), key=lambda kv: -kv[1][0])[:rows]
    return {"step": step, "busy_ms": sum(v[0] for v in per.values()),
            "top": [[k[:100], round(v[0], 3), v[1]] for k, v in top]}


def _rss_mb() -> float:
    try:
        with open("/proc/self/statm", encoding="ascii") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return float("nan")


class LoopProfiler:
    """Instruments the trainer's loop (class-level patches) and collects the windows of one case."""

    def __init__(self, device: torch.device, window: int, stop_at: int, time_limit: float, on_window,
                 count_syncs: bool = True, log=print, cpu_clock: bool = False, deadline: float = 0.0,
                 kernels_every: int = 0, cprofile: tuple = (), cprofile_out=None, ab_variants: list = (),
                 ab_steps: tuple = ()) -> None:
        self.device = device
        # --kernel-ab: compositing variants timed on the last training render's inputs at these window ends
        self.ab_variants, self.ab_steps = list(ab_variants), set(int(s) for s in ab_steps)
        self._render_orig = None
        self._last_render_call = None
        self.window, self.stop_at, self.time_limit = int(window), int(stop_at), float(time_limit)
        self.deadline = float(deadline)  # a perf_counter value ending the loop at a window's end (0: none)
        self.on_window, self.log = on_window, log
        self.clock = LoopClock(device, cpu_clock)
        self.syncs = _SyncCounter(self.clock)
        self.count_syncs = count_syncs
        self.trainer = None
        self.windows: list = []
        self._boundary = None  # mark at the start of the current step
        self._step_marks: list = []  # (step, start mark, end mark, stage marks) of the window's timed steps
        self._count_step = None  # the CPU step whose syncs are counted (left out of the times)
        self._win_first = None  # first step of the open window
        self._cpu_mode = None
        self.kernels_every = int(kernels_every)
        # --cprofile A:B: the host's Python time of steps A..B-1 under cProfile (wall per step beside it)
        self.cprofile, self.cprofile_out = tuple(cprofile), cprofile_out
        self._cprof = None  # (range, cProfile or None) while a range is open
        self._cprof_t0 = 0.0
        self._cprof_text: list = []
        self._kprof = None  # torch.profiler of a --kernels step
        self._kernel_rows = None
        self._isects = 0
        self._isect_steps = 0
        self._last_radii = None
        self._counts: list = []
        self._stage_calls: collections.Counter = collections.Counter()
        self._t_loop = None
        self._w_start = None  # (wall, process cpu) at the window's start
        self._seen_events = (0, 0)

    # ---- instrumentation ----------------------------------------------------------------------------------
    @contextlib.contextmanager
    def instrument(self):
        import meshlift.methods.gaussians.losses as L
        import meshlift.methods.gaussians.surface as S
        import meshlift.methods.gaussians.trainer as T
        from meshlift.methods.gaussians.strategy import DefaultStrategy
        from meshlift.methods.gaussians.views import SplatBatch, SplatViews
        from meshlift.methods.milo import mesh_in_loop as M
        from meshlift.methods.milo.strategy import MiloStrategy

        p = _Patches(self.clock)
        prof = self

        had_step = "train_step" in vars(T.GaussianTrainer)
        orig_step = T.GaussianTrainer.train_step

        def train_step(trainer, *a, **k):
            prof._begin_step(trainer)
            return orig_step(trainer, *a, **k)

        T.GaussianTrainer.train_step = train_step
        p.undo.append((T.GaussianTrainer, "train_step", orig_step, had_step))

        def count_isects(out):
            info = out[2]
            ids = info.get("flatten_ids") if isinstance(info, dict) else None
            if ids is not None and not self.clock.stack:
                # lists sized by a capacity (isect_readback off): the used count, a device value (no sync here;
                # read when the window closes)
                prof._isects += info["n_isect"].reshape(()) if "n_isect" in info else int(ids.shape[0])
                prof._isect_steps += 1
                prof._last_radii = info.get("radii")  # read at the window's end (no sync here)
                if "isect_offsets" in info:  # the tile lists' lengths, read at the window's end
                    prof._last_lists = (info["isect_offsets"], info["n_isect"] if "n_isect" in info else ids.shape[0])

        p.wrap(SplatViews, "batch", "views", top=True)
        p.wrap(SplatBatch, "targets", "views", top=True)
        p.wrap(T.GaussianTrainer, "_background", "views", top=True)
        if self.ab_variants:  # keep the last training render's arguments (references; no copy per step)
            orig_render = prof._render_orig = vars(T)["render_params"]

            def render_capture(*a, **k):
                prof._last_render_call = (a, k)
                return orig_render(*a, **k)

            T.render_params = render_capture
            p.undo.append((T, "render_params", orig_render, True))
        p.wrap(T, "render_params", "render", top=True, after=count_isects)
        p.wrap(L, "photometric_loss", "loss", top=True)
        p.wrap(torch.Tensor, "backward", "backward", top=True)
        p.wrap(torch.optim.Adam, "step", "optimizer", top=True, adam=True)
        for cls in (DefaultStrategy, MiloStrategy):
            for attr in ("step_pre_backward", "step_post_backward"):
                if attr in vars(cls):
                    p.wrap(cls, attr, "strategy")
        for attr in ("_grow", "_prune", "reset_opacities"):
            p.wrap(DefaultStrategy, attr, "densify")
        for attr in ("_reinit", "_apply"):
            p.wrap(MiloStrategy, attr, "milo_event")
        for cls in (T.Regularizer, S.SurfaceRegularizer, M.MeshInTheLoop):
            for attr, stage in (("loss", "reg"), ("render_outputs", "reg_hooks"),
                                ("after_optimizer_step", "reg_hooks")):
                if attr in vars(cls):
                    p.wrap(cls, attr, stage)
        p.wrap(M, "depth_normal_loss", "depth_normal")
        p.wrap(S, "depth_normal_loss", "depth_normal")
        p.wrap(S, "flatten_loss", "flatten")
        p.wrap(M.MeshInTheLoop, "start", "mesh_start")
        p.wrap(M.MeshInTheLoop, "_maintain", "mesh_maintain")
        p.wrap(M.MeshInTheLoop, "mesh_losses", "mesh_loss")
        try:
            from meshlift.methods.loop import TrainLoop
        except ImportError:  # a tree before the one loop class
            p.wrap(T, "end_step", "bookkeeping")
        else:
            p.wrap(TrainLoop, "_bookkeeping", "bookkeeping")
        if self.device.type == "cuda" and self.count_syncs:
            self.syncs.start_cuda()
        try:
            yield
        finally:
            if self.device.type == "cuda" and self.count_syncs:
                self.syncs.stop_cuda()
            self._leave_cpu_mode()
            if self._kprof is not None:
                self._kprof.__exit__(None, None, None)
                self._kprof = None
            p.close()

    def _instance_patches(self, trainer) -> None:
        """Previews and checkpoints are instance attributes, set once the trainer exists."""
        clock = self.clock
        for attr, stage in (("preview", "preview"), ("save_checkpoint", "checkpoint")):
            fn = getattr(trainer, attr)
            if fn is None:
                continue

            def wrapped(*a, _fn=fn, _stage=stage, **k):
                self._stage_calls[_stage] += 1
                with clock.stage(_stage):
                    return _fn(*a, **k)

            setattr(trainer, attr, wrapped)

    # ---- step boundaries ------------------------------------------------------------------------------------
    def _leave_cpu_mode(self) -> None:
        if self._cpu_mode is not None:
            self._cpu_mode.__exit__(None, None, None)
            self._cpu_mode = None

    def _begin_step(self, trainer) -> None:
        """Called when ``trainer`` is about to run step ``trainer.step``: closes the previous step (and the
        window when it was its last), starts this one."""
        if self.trainer is None:
            self.trainer = trainer
            self._instance_patches(trainer)
            self._t_loop = time.perf_counter()
            self._w_start = (time.perf_counter(), time.process_time())
            self._seen_events = self._event_counts()
            self.clock.take_step()  # stages run before the loop (the step-0 preview's render) are no step's
            self._isects = self._isect_steps = 0
            self.syncs.take()
        s = trainer.step
        self._end_step(s)
        if self._cprof is not None and s == self._cprof[0][1]:  # before the stop and the window's sync:
            self._cprofile_close(s)  # a range ending at the last step closes here too
        if s > 0 and s % self.window == 0:
            self._close_window(s)
            if s >= self.stop_at:
                raise _Stop
            if self.time_limit > 0 and time.perf_counter() - self._t_loop > self.time_limit:
                self.log(f"# time limit ({self.time_limit:g} s) reached at step {s}")
                raise _Stop
            if self.deadline > 0 and time.perf_counter() > self.deadline:
                self.log(f"# --total-time reached at step {s}")
                raise _Stop
        elif s >= self.stop_at:
            self._close_window(s)
            raise _Stop
        self._cprofile_boundary(s)
        if self._win_first is None:
            self._win_first = s
        self._counts.append(trainer.num_gaussians)
        # CPU: the syncs of one step per window, the last (schedule events fall on round steps), untimed;
        # CUDA with --kernels K: the last step of every K-th window under torch.profiler, untimed
        last = (s + 1) % self.window == 0
        counting = not self.clock.cuda and self.count_syncs and last
        kernels = (self.clock.cuda and self.kernels_every > 0 and last
                   and ((s + 1) // self.window) % self.kernels_every == 1 % self.kernels_every)
        self.clock.recording = not (counting or kernels)
        if counting:
            self._count_step = s
            self._cpu_mode = self.syncs.cpu_mode()
            self._cpu_mode.__enter__()
        if kernels:
            from torch.profiler import ProfilerActivity, profile

            torch.cuda.synchronize(self.device)
            self.syncs.paused = True
            self._kprof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
            self._kprof.__enter__()
        self._boundary = (s, self.clock.mark() if self.clock.recording else None)

    def _cprofile_boundary(self, s: int) -> None:
        """At the steps of ``--cprofile`` ranges ``A:B[:time]``: start cProfile before step A, stop it before
        step B and write the top functions (tottime and cumtime) with the host's issue time and the wall per
        step of the profiled steps (cProfile slows Python ~1.5-2x: read the shares, not the absolute times);
        ``:time`` ranges time the host without cProfile (the loop is host-bound where issue ~ wall)."""
        for rng in self.cprofile:
            a, b, plain = rng
            if s == a and self._cprof is None:
                import cProfile

                if self.clock.cuda:
                    torch.cuda.synchronize(self.device)
                self._cprof = (rng, None if plain else cProfile.Profile())
                self._cprof_t0 = time.perf_counter()
                if self._cprof[1] is not None:
                    self._cprof[1].enable()
            elif s == b and self._cprof is not None and self._cprof[0] == rng:
                self._cprofile_close(s)

    def _cprofile_close(self, b: int) -> None:
        """Stop the open ``--cprofile`` range before step ``b`` (its end, or the loop's last step + 1 when the
        loop ends first) and write its report."""
        import io
        import pstats

        (a, _, _), prof = self._cprof
        if prof is not None:
            prof.disable()
        host = time.perf_counter() - self._cprof_t0  # the host's time to issue the steps (no sync)
        if self.clock.cuda:
            torch.cuda.synchronize(self.device)
        wall = time.perf_counter() - self._cprof_t0
        head = (f"# steps {a}..{b - 1}: host issue {host * 1e3 / (b - a):.3f} ms/step, wall (to the sync) "
                f"{wall * 1e3 / (b - a):.3f} ms/step, {'plain' if prof is None else 'under cProfile'}")
        self.log(head)
        self._cprof_text.append(head)
        if prof is not None:
            buf = io.StringIO()
            st = pstats.Stats(prof, stream=buf)
            st.sort_stats("tottime").print_stats(45)
            st.sort_stats("cumulative").print_stats(60)
            self._cprof_text.append(buf.getvalue())
        if self.cprofile_out is not None:
            Path(self.cprofile_out).write_text("\n".join(self._cprof_text))
        self._cprof = None

    def _end_step(self, next_step: int) -> None:
        if self._boundary is None:
            return
        s, start = self._boundary
        marks = self.clock.take_step()
        if self._cpu_mode is not None:
            self._leave_cpu_mode()
            self.clock.recording = True
        elif self._kprof is not None:
            torch.cuda.synchronize(self.device)
            self._kprof.__exit__(None, None, None)
            self._kernel_rows = kernel_table(self._kprof, s)
            self._kprof = None
            self.syncs.paused = False
            self.clock.recording = True
        elif start is not None:
            self._step_marks.append((s, start, self.clock.mark(), marks))
        self._boundary = None

    def finish(self) -> None:
        """The loop ended on its own (steps done): close the last window and an open ``--cprofile`` range (one
        ending at the last step + 1 has no step ``B`` to close it)."""
        if self.trainer is not None and self._boundary is not None:
            s = self.trainer.step
            self._end_step(s)
            self._close_window(s)
        if self.trainer is not None and self._cprof is not None and self.trainer.step > self._cprof[0][0]:
            self._cprofile_close(self.trainer.step)

    @torch.no_grad()
    def _sizes(self, tr) -> dict:
        """How large the Gaussians are at the window's end: the largest axis of each over the scene scale
        (p50 / p90 / p99 / max), the mean opacity, and the screen radius in pixels of the visible Gaussians in
        the window's last training render (mean / p90 / max): intersections grow with both count and size."""
        out: dict = {}
        p = getattr(tr, "params", None)
        if not p or p["means"].shape[0] == 0:
            return out
        big = (p["log_scales"].amax(-1).exp() / float(tr.scene_scale)).float().sort().values
        n = big.numel()
        q = torch.stack([big[int(f * (n - 1))] for f in (0.5, 0.9, 0.99)] + [big[-1],
                        torch.sigmoid(p["opacity_logits"]).float().mean()]).tolist()
        out.update(scale_p50=q[0], scale_p90=q[1], scale_p99=q[2], scale_max=q[3], opacity_mean=q[4])
        r = self._last_radii
        if r is not None and r.numel():
            r = r.reshape(-1, r.shape[-1]).amax(-1) if r.ndim == 3 else r.reshape(-1)
            vis = r[r > 0].float().sort().values
            if vis.numel():
                out.update(radius_px_mean=float(vis.mean()), radius_px_p90=float(vis[int(0.9 * (vis.numel() - 1))]),
                           radius_px_max=float(vis[-1]), visible=int(vis.numel()))
        if self._isect_steps and out.get("visible"):
            out["isects_per_visible"] = self._isects / self._isect_steps / out["visible"]
        lists = getattr(self, "_last_lists", None)
        if lists is not None:  # one program walks one tile's list: the longest bounds the compositing kernels
            off, end = lists
            off = off.reshape(-1).long()
            lens = torch.diff(torch.cat([off, torch.as_tensor(end, device=off.device).reshape(1).long()])).float()
            busy = lens[lens > 0].sort().values
            if busy.numel():
                out.update(tile_list_max=int(busy[-1]), tile_list_p99=int(busy[int(0.99 * (busy.numel() - 1))]),
                           tile_list_mean=float(busy.mean()), tiles_busy=int(busy.numel()), tiles=int(lens.numel()))
        return out

    def _event_counts(self) -> tuple:
        st = getattr(self.trainer, "strategy", None)
        return (len(getattr(st, "history", []) or []), len(getattr(st, "events", []) or []))

    def _close_window(self, end: int) -> None:
        tr = self.trainer
        self.syncs.paused = True
        if self.clock.cuda:
            torch.cuda.synchronize(self.device)
        self._isects = int(self._isects)  # a device sum when the lists had a capacity
        now, cpu = time.perf_counter(), time.process_time()
        steps = self._step_marks
        n = len(steps)
        totals: dict = collections.defaultdict(float)
        walls = []
        for _, t0, t1, marks in steps:
            w = self.clock.elapsed_ms(t0, t1)
            walls.append(w)
            ex = self.clock.exclusive(marks)
            for k, v in ex.items():
                totals[k] += v
            totals["other"] += w - sum(ex.values())
        wall_ms = sum(walls) / max(1, n)
        per = {k: totals.get(k, 0.0) / max(1, n) for k in STAGES if totals.get(k, 0.0) != 0.0}
        syncs = self.syncs.take()
        sync_steps = n if self.clock.cuda else (1 if self._count_step is not None else 0)
        start = self._win_first if self._win_first is not None else end
        h0, e0 = self._seen_events
        st = tr.strategy
        hist = list(getattr(st, "history", []) or [])[h0:]
        evts = list(getattr(st, "events", []) or [])[e0:]
        self._seen_events = self._event_counts()
        refine = [h for h in hist if not any(e[0] == h[0] for e in evts)]
        w_wall = now - self._w_start[0]
        row = {
            "steps": [int(start), int(end)],
            "timed_steps": n,
            "ms_per_step": wall_ms,
            "steps_per_s": 1e3 / wall_ms if wall_ms > 0 else None,
            "ms_median": sorted(walls)[n // 2] if n else None,
            "ms_max": max(walls) if n else None,
            "stages_ms": per,
            "gaussians": tr.num_gaussians,
            "gaussians_min": min(self._counts) if self._counts else None,
            "gaussians_max": max(self._counts) if self._counts else None,
            "intersections_per_step": self._isects / self._isect_steps if self._isect_steps else None,
            "syncs_per_step": (sum(syncs.values()) / sync_steps) if sync_steps else None,
            "syncs_by_stage": {k: v / sync_steps for k, v in syncs.most_common()} if sync_steps else {},
            "sync_method": "cuda sync debug mode, every step" if self.clock.cuda else
                           "SYNC_OPS under a dispatch mode, last step of the window",
            "sh_degree": int(tr.sh_schedule(max(0, end - 1))),
            "refinements": len(refine),
            "events": [list(e) for e in evts],
            "previews": self._stage_calls.pop("preview", 0),
            "checkpoints": self._stage_calls.pop("checkpoint", 0),
            "cpu_per_wall": (cpu - self._w_start[1]) / w_wall if w_wall > 0 else None,
            "threads": threading.active_count(),
            "history_rows": len(tr.state.history),
            "python_objects": len(gc.get_objects()),
            "wall_s": w_wall,
        }
        self.clock.recycle()
        row.update(self._sizes(tr))
        if int(end) in self.ab_steps and self._last_render_call is not None:
            from _kernel_ab import format_ab, kernel_ab

            a, k = self._last_render_call
            row["kernel_ab"] = kernel_ab(self._render_orig, a, k, self.ab_variants)
            self.log(format_ab(int(end), row["kernel_ab"]))
            if self.clock.cuda:
                torch.cuda.reset_peak_memory_stats(self.device)
        if self._kernel_rows is not None:
            row["kernels"], self._kernel_rows = self._kernel_rows, None
        if self.clock.cuda:
            row["peak_mb"] = torch.cuda.max_memory_allocated(self.device) / 2**20
            row["allocated_mb"] = torch.cuda.memory_allocated(self.device) / 2**20
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            row["rss_mb"] = _rss_mb()
        self.windows.append(row)
        self._step_marks, self._counts, self._count_step, self._win_first = [], [], None, None
        self._isects = self._isect_steps = 0
        self._last_radii = self._last_lists = None
        self._w_start = (time.perf_counter(), time.process_time())
        self.syncs.paused = False
        self.on_window(row)


# ---- cases ------------------------------------------------------------------------------------------------


class _LogMonitor:
    """A Monitor printing the run's log lines (with the step they came at) and nothing per step."""

    def __init__(self, log) -> None:
        self.log_fn, self.lines = log, []

    def start_pass(self, name, total, start=0):
        pass

    def update(self, iteration, loss, psnr):
        self.last = (iteration, loss, psnr)

    def end_pass(self):
        pass

    def log(self, message):
        self.lines.append(message)
        self.log_fn(f"#   log: {message}")


def build_case(name: str, args, steps: int):
    """``(config, reconstruct function)`` of case ``name``."""
    root = None
    if name == "gaussians":
        from meshlift.methods.gaussians.config import apply_dict, parse_overrides
        from meshlift.methods.gaussians.reconstruct import build_config, reconstruct

        data = args.gaussians_data or str((root := data_root()) / "nerf_synthetic_lego_half")
        cfg = build_config(data, "gaussians", args.quick, None, [])
        sets = list(args.set) + list(args.set_gaussians)
    else:
        from meshlift.methods.milo.config import apply_dict, parse_overrides
        from meshlift.methods.milo.presets import get_preset, scale_schedule
        from meshlift.methods.milo.reconstruct import build_config, reconstruct

        data = args.milo_data or str((root or data_root()) / "spot" / "spot.obj")
        cfg = build_config(data, args.milo_preset, args.quick, None, [])
        extract = "delaunay" if name == "milo_delaunay" else "tsdf"
        cfg = apply_dict(cfg, {"extract": extract})
        if args.schedule_scale:
            full = get_preset(args.milo_preset)  # the preset's own schedule, also under --quick
            cfg = apply_dict(cfg, scale_schedule(full, args.schedule_scale))
        sets = list(args.set) + list(args.set_milo)
    over = {"device": args.device, "time_budget_s": 0.0, "lpips": False}
    cfg = apply_dict(cfg, over)
    if sets:
        cfg = apply_dict(cfg, parse_overrides(sets))
    if cfg.steps <= steps:  # the loop is stopped by the profiler, never by its end (no extraction)
        cfg = apply_dict(cfg, {"steps": steps + 1})
    return cfg, reconstruct


def _git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              timeout=10).stdout.strip() or "?"
    except Exception:  # noqa: BLE001
        return "?"


def _fmt(v, spec=".1f") -> str:
    return "–" if v is None else format(v, spec)


def markdown(report: dict) -> str:
    m = report["meta"]
    out = ["# Training-loop profile (benchmarks/gaussians_loop_profile.py)", "",
           f"{m['date']}, device {m['device_name']}, torch {m['torch']}, commit {m['commit']}, clock {m['clock']}; "
           f"`{m['command']}`", ""]
    for case in report["cases"]:
        ws = case["windows"]
        out += [f"## {case['case']} — {case['data']}", "", case["summary"], ""]
        if not ws:
            out += ["(no window completed)", ""]
            continue
        cols = [k for k in STAGES if any(k in w["stages_ms"] for w in ws)]
        mem = "peak MB" if "peak_mb" in ws[0] else "RSS MB"
        out.append("| steps | ms/step | " + " | ".join(cols) + " | Gaussians | isects/step | isects/visible | "
                   f"tile list max / p99 / mean | radius px (mean) | scale p90 | syncs/step | {mem} | cpu/wall | "
                   "events |")
        out.append("|---|---:|" + "---:|" * len(cols) + "---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
        for w in ws:
            ev = [f"{e[1]}@{e[0]} {e[2]}→{e[3]}" for e in w["events"]]
            if w["refinements"]:
                ev.insert(0, f"{w['refinements']} refine")
            if w["previews"]:
                ev.append(f"{w['previews']} preview")
            if w["checkpoints"]:
                ev.append(f"{w['checkpoints']} ckpt")
            out.append(
                f"| {w['steps'][0]}–{w['steps'][1]} | {_fmt(w['ms_per_step'], '.2f')} | "
                + " | ".join(_fmt(w["stages_ms"].get(k), ".2f") for k in cols)
                + f" | {w['gaussians']:,} | {_fmt(w['intersections_per_step'], ',.0f')} | "
                f"{_fmt(w.get('isects_per_visible'), '.1f')} | {_fmt(w.get('tile_list_max'), ',d')} / "
                f"{_fmt(w.get('tile_list_p99'), ',d')} / {_fmt(w.get('tile_list_mean'), ',.0f')} | "
                f"{_fmt(w.get('radius_px_mean'), '.1f')} | "
                f"{_fmt(w.get('scale_p90'), '.4f')} | "
                f"{_fmt(w['syncs_per_step'], '.1f')} | {_fmt(w.get('peak_mb', w.get('rss_mb')), '.0f')} | "
                f"{_fmt(w['cpu_per_wall'], '.2f')} | {'; '.join(ev)} |")
        out.append("")
        kern = [w for w in ws if w.get("kernels")]
        if kern:
            out += ["Kernels of one profiled step (torch.profiler; device ms, launches):", ""]
            for w in kern:
                k = w["kernels"]
                out.append(f"- step {k['step']}: busy {k['busy_ms']:.2f} ms; "
                           + "; ".join(f"{n} {ms:.3f} ({c})" for n, ms, c in k["top"]))
            out.append("")
        for w in ws:
            if w.get("kernel_ab"):
                from _kernel_ab import format_ab

                out += ["```", format_ab(w["steps"][1], w["kernel_ab"]), "```", ""]
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", nargs="+", default=["gaussians:3000", "milo_delaunay:1500"],
                    help=f"name[:steps], names: {', '.join(CASES)}")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--window", type=int, default=100, help="steps per window")
    ap.add_argument("--milo-window", type=int, default=0, help="steps per window of the MILo cases (0: --window)")
    ap.add_argument("--quick", action="store_true", help="the presets' --quick sizes (CPU)")
    ap.add_argument("--schedule-scale", type=float, default=0.0,
                    help="scale MILo's schedule (scale_schedule of the full preset); 0 = the preset's own")
    ap.add_argument("--milo-preset", default="verylowres")
    ap.add_argument("--time-limit", type=float, nargs="+", default=[0.0],
                    help="seconds of loop per case (one value for all, or one per case; 0 = none); checked at "
                         "window ends")
    ap.add_argument("--total-time", type=float, default=0.0,
                    help="seconds for the whole command: a loop still running then stops at its next window end, "
                         "later cases are skipped (0 = none)")
    ap.add_argument("--gaussians-data", default=None, help="dataset folder (default: the shared lego)")
    ap.add_argument("--milo-data", default=None, help="MILo input (default: the shared spot mesh)")
    ap.add_argument("--set", nargs="*", default=[], help="field=value overrides for every case")
    ap.add_argument("--set-gaussians", nargs="*", default=[], help="overrides of the gaussians case")
    ap.add_argument("--set-milo", nargs="*", default=[], help="overrides of the MILo cases")
    ap.add_argument("--kernels", type=int, default=0, metavar="K",
                    help="CUDA: profile the last step of every K-th window (the 1st, K+1-th, ...) with "
                         "torch.profiler and record its 10 costliest kernels (that step is left out of the times)")
    ap.add_argument("--cprofile", nargs="*", default=[], metavar="A:B[:time]",
                    help="profile the host's Python in steps A..B-1 of each case with cProfile (A:B:time: time the "
                         "host's issue without cProfile); report beside --out as <out>.<case>.cprofile.txt")
    ap.add_argument("--no-syncs", action="store_true", help="do not count host syncs")
    ap.add_argument("--no-outputs", action="store_true",
                    help="train without an output folder (no preview images or checkpoint files written)")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="CPU device: time stages by wall clock or by the main thread's CPU time (cpu: robust to "
                         "other processes on a shared machine; sets one torch thread)")
    ap.add_argument("--splat-bwd", default=None, metavar="SPLIT:CULL",
                    help="the Triton compositing backward's _SPLIT_BWD and _CULL_BWD for this run (A/B: 1:0 is the "
                         "path before 2026-12-05, 4:2 the band split with compacted culling)")
    ap.add_argument("--splat-fwd", default=None, metavar="SPLIT:CULL",
                    help="the Triton compositing forward's _SPLIT_FWD and _CULL_FWD for this run (1:0 the measured "
                         "path; 4:1 four row bands a tile, each skipping the entries that cannot reach it)")
    ap.add_argument("--kernel-ab", nargs="*", default=[], metavar="FS:FC/BS:BC",
                    help="at the --ab-steps window ends, time these compositing variants (forward "
                         "_SPLIT_FWD:_CULL_FWD[:_BATCH:_WARPS] / backward _SPLIT_BWD:_CULL_BWD[:_BATCH_BWD:_WARPS_BWD:"
                         "_CULL_CHUNK]) side by side on the last training render's inputs (benchmarks/_kernel_ab.py), "
                         "e.g. 1:0/4:2 4:1/4:2 4:0/8:2:8:2; a suffix @box bins whole bounding boxes, @ellipse the tiles "
                         "each ellipse reaches (SplatSettings.ellipse_tiles, the default)")
    ap.add_argument("--ab-steps", nargs="*", type=int, default=[], help="window ends (steps) of --kernel-ab")
    ap.add_argument("--out", type=Path, default=None, help="JSON report (a markdown twin .md beside it)")
    args = ap.parse_args(argv)
    if args.kernel_ab:
        from _kernel_ab import parse_variants

        args.kernel_ab = parse_variants(args.kernel_ab)
    for spec, side in ((args.splat_bwd, "BWD"), (args.splat_fwd, "FWD")):
        if spec:
            from meshlift.kernels import splat_triton as kt

            split, cull = (int(x) for x in spec.split(":"))
            setattr(kt, f"_SPLIT_{side}", split)
            setattr(kt, f"_CULL_{side}", cull)
            print(f"splat {side}: _SPLIT_{side} {split}, _CULL_{side} {cull}", flush=True)
    if args.clock == "cpu" and args.device == "cpu":
        args.threads = 1
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    specs = []
    for c in args.cases:
        name, _, n = c.partition(":")
        if name not in CASES:
            ap.error(f"unknown case {name!r}; choose from {', '.join(CASES)}")
        specs.append((name, int(n) if n else 3000))
    limits = args.time_limit if len(args.time_limit) == len(specs) else [args.time_limit[0]] * len(specs)
    report = {"meta": {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else
        f"CPU ({torch.get_num_threads()} threads)",
        "torch": torch.__version__, "commit": _git_commit(), "command": " ".join(sys.argv),
        "clock": "CUDA events" if device.type == "cuda" else
        ("main-thread CPU time (time.thread_time), 1 torch thread" if args.clock == "cpu" else "perf_counter"),
    }, "cases": []}

    def write() -> None:
        if args.out is None:
            return
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1))
        args.out.with_suffix(".md").write_text(markdown(report))

    t_all = time.perf_counter()
    deadline = t_all + args.total_time if args.total_time > 0 else 0.0
    for (name, steps), limit in zip(specs, limits):
        if deadline and time.perf_counter() > deadline:
            print(f"# case {name} skipped: --total-time {args.total_time:g} s used up", flush=True)
            report["cases"].append({"case": name, "data": "", "windows": [],
                                    "summary": "skipped: --total-time used up"})
            continue
        cfg, reconstruct = build_case(name, args, steps)
        window = args.milo_window if (name != "gaussians" and args.milo_window) else args.window
        case = {"case": name, "data": cfg.data, "steps": steps, "window": window, "time_limit_s": limit,
                "config": {k: getattr(cfg, k) for k in (
                    "steps", "train_res", "densify_refine_start", "densify_refine_stop", "densify_refine_every",
                    "densify_reset_every", "densify_max_gaussians", "sh_degree", "sh_degree_interval",
                    "checkpoint_every", "preview_every", "batch", "splat_backend") if hasattr(cfg, k)},
                "windows": [], "summary": ""}
        for k in ("extract", "reinit_step", "sampling_step", "depth_normal_start", "prune_step", "mesh_start",
                  "ref_views", "num_pivots"):
            if hasattr(cfg, k):
                case["config"][k] = getattr(cfg, k)
        if name != "gaussians":
            case["config"]["schedule_scale"] = args.schedule_scale or 1.0
        report["cases"].append(case)
        print(f"# case {name}: {cfg.data}, {steps} steps in windows of {window}, device {device}, "
              f"config {case['config']}", flush=True)

        def on_window(row, case=case):
            case["windows"].append(row)
            st = row["stages_ms"]
            top = ", ".join(f"{k} {v:.2f}" for k, v in sorted(st.items(), key=lambda kv: -kv[1])[:6])
            ev = "; ".join(f"{e[1]}@{e[0]} {e[2]}->{e[3]}" for e in row["events"])
            print(f"{name} steps {row['steps'][0]}-{row['steps'][1]}: {row['ms_per_step']:.2f} ms/step "
                  f"({top}); {row['gaussians']:,} Gaussians, isects/step "
                  f"{_fmt(row['intersections_per_step'], ',.0f')} ({_fmt(row.get('isects_per_visible'), '.1f')} per "
                  f"visible, radius {_fmt(row.get('radius_px_mean'), '.1f')} px, scale p90 "
                  f"{_fmt(row.get('scale_p90'), '.4f')}), syncs/step {_fmt(row['syncs_per_step'], '.1f')}, "
                  + (f"peak {row['peak_mb']:.0f} MB" if "peak_mb" in row else f"RSS {row['rss_mb']:.0f} MB")
                  + f", cpu/wall {_fmt(row['cpu_per_wall'], '.2f')}" + (f"; {ev}" if ev else "")
                  + (f"; {row['refinements']} refine" if row["refinements"] else ""), flush=True)
            write()

        prof = LoopProfiler(device, window, steps, limit, on_window, count_syncs=not args.no_syncs,
                            cpu_clock=args.clock == "cpu", deadline=deadline, kernels_every=args.kernels,
                            cprofile=tuple((int(r.split(":")[0]), int(r.split(":")[1]), r.endswith(":time"))
                                           for r in args.cprofile),
                            cprofile_out=(args.out.with_suffix(f".{name}.cprofile.txt") if args.out else
                                          Path(f"{name}.cprofile.txt")),
                            ab_variants=args.kernel_ab if name == "gaussians" else (), ab_steps=args.ab_steps)
        mon = _LogMonitor(lambda s: print(s, flush=True))
        t0 = time.perf_counter()
        ended = "steps done"
        with tempfile.TemporaryDirectory(prefix=f"loopprof_{name}_") as tmp:
            out_dir = None if args.no_outputs else Path(tmp) / "run"
            with prof.instrument():
                try:
                    reconstruct(cfg, out_dir, overwrite=True, monitor=mon, callbacks=None)
                    prof.finish()
                except _Stop:
                    ended = ("time limit" if not prof.windows or prof.windows[-1]["steps"][1] < steps else "steps done")
                except KeyboardInterrupt:
                    ended = "interrupted"
        setup = (prof._t_loop - t0) if prof._t_loop else None
        ws = case["windows"]
        last = ws[-1]["steps"][1] if ws else 0
        case["summary"] = (f"{last} steps profiled ({ended}); setup before the first step {_fmt(setup)} s, loop "
                           f"{_fmt(time.perf_counter() - prof._t_loop if prof._t_loop else None)} s; schedule: "
                           + ", ".join(f"{k} {v}" for k, v in case["config"].items()))
        case["log"] = mon.lines
        print(f"# {name}: {case['summary']}", flush=True)
        write()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    print(f"# all cases: {time.perf_counter() - t_all:.1f} s", flush=True)
    print(markdown(report))
    write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
