"""methods.loop: the one training loop — deferred loss read-backs, the divergence guard and its per-family
settings, the checkpoint cadence, Ctrl-C, the read-back rule (a toy TrainLoop on a scalar parameter)."""

from __future__ import annotations

import pytest
import torch

from meshlift.errors import ConfigError, TrainingError
from meshlift.methods import loop
from meshlift.methods.engine import Checkpointer
from meshlift.methods.loop import GuardSettings, LossReadback, TrainLoop, readback_every


class _Recorder:
    def __init__(self):
        self.updates, self.logs = [], []

    def start_pass(self, *a):
        pass

    def update(self, it, loss, psnr):
        self.updates.append((it, loss))

    def end_pass(self):
        pass

    def log(self, m):
        self.logs.append(m)


class _Toy(TrainLoop):
    """Step ``it`` sets the parameter to ``it + 1`` (so the state names its step) and reports ``losses[it]``.
    ``rewind``: a rollback returns to the snapshot's step (as the Gaussian trainer), else the count goes on."""

    def __init__(self, losses, every=1, guard=GuardSettings(), preview_every=0, rewind=False, checkpoint_every=0,
                 out=None, nan_param_at=None):
        super().__init__(monitor=_Recorder(), checkpointer=Checkpointer(out))
        self.losses, self.readback_steps, self.guard, self.rewind = list(losses), every, guard, rewind
        self.checkpoint_every, self.nan_param_at = checkpoint_every, nan_param_at
        self.p = torch.nn.Parameter(torch.zeros(1))
        self.opt = torch.optim.SGD([self.p], lr=1.0)
        self.preview_every, self.previews, self.ran, self.after = preview_every, [], [], []
        self.preview = (lambda: None) if preview_every else None

    def begin(self):
        self.total = len(self.losses)

    def train_step(self, it):
        self.ran.append(it)
        with torch.no_grad():
            self.p.fill_(float("nan") if it == self.nan_param_at else it + 1)
        if it == self.nan_param_at:
            self.nan_param_at = None  # once
        return torch.tensor(self.losses[it]), torch.tensor(0.01)

    def preview_step(self, step):
        self.previews.append(len(self.monitor.updates))

    def capture(self):
        return {"p": self.p.detach(), "step": self.step}

    def on_rollback(self, snapshot):
        with torch.no_grad():
            self.p.copy_(snapshot["p"])
        for g in self.opt.param_groups:
            g["lr"] *= 0.5
        if self.rewind:
            self.step = snapshot["step"]

    def after_step(self, it):
        self.after.append(it)

    def payload(self):
        return {"p": self.p.detach().clone(), "step": self.step}


def test_readback_defers_but_records_the_same_history():
    losses = [float(i) / 7 for i in range(1, 24)]
    t1, t5 = _Toy(losses, 1), _Toy(losses, 5)
    t1.run(), t5.run()
    assert t1.state.history == t5.state.history and t1.monitor.updates == t5.monitor.updates
    assert len(t5.state.history) == len(losses) and t5.state.iterations["train"] == len(losses)
    assert t5.state.history[3]["loss"] == float(torch.tensor(losses[3]))  # exactly float(loss)
    # the monitor hears of step 3 only at the read-back after step 5; a preview forces one
    t = _Toy(losses[:8], 5, preview_every=3)
    t.run()
    assert t.previews == [3, 6]


def test_readback_cadence_and_rule():
    with pytest.raises(ConfigError, match="readback"):
        LossReadback(0)
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert readback_every(0, cpu, 10) == 1 and readback_every(0, cuda, 10) == 10 and readback_every(0, cuda, 20) == 20
    assert readback_every(4, cuda, 10) == 4 and readback_every(4, cpu, 10) == 4
    with pytest.raises(ConfigError, match="readback_every"):
        readback_every(-1, cpu, 10)


def test_guard_with_deferred_readback_rolls_back_to_a_snapshot_taken_at_a_readback():
    """The surface passes' settings: a snapshot every 4 steps (read back there, not only at the cadence of
    3); the NaN of step 6 rolls back to step 4's state and halves the learning rate; the count goes on."""
    losses = [1.0, 1.0, 1.0, 1.0, 1.0, float("nan"), 1.0, 1.0, 1.0]
    t = _Toy(losses, 3, guard=GuardSettings(snapshot_every=4))
    seen = []
    t.after_step = lambda it: seen.append((it, t.snapshot_step, [u[0] for u in t.monitor.updates]))
    t.run()
    assert (3, 4, [1, 2, 3, 4]) in seen
    assert t.recoveries == 1 and any("rolled back to the state of step 4" in m for m in t.monitor.logs)
    assert t.opt.param_groups[0]["lr"] == pytest.approx(0.5)
    # step 5 was recorded, the NaN step 6 was not; the state was restored from step 4, then steps 7-9 ran
    assert [h["iteration"] for h in t.state.history] == [1, 2, 3, 4, 5, 7, 8, 9]
    assert 5 not in [s[0] for s in seen] and seen[-1][0] == 8  # the rolled-back step gets no after_step


def test_guard_at_checkpoints_rewinds_and_redoes_the_steps():
    """The Gaussian trainer's settings: the last checkpoint is the snapshot, the parameters are checked at
    every read-back (a NaN parameter with a finite loss is caught), a rollback redoes the steps since."""
    g = GuardSettings(snapshot_at_checkpoint=True, check_params_every_readback=True)
    t = _Toy([1.0] * 10, 1, guard=g, rewind=True, checkpoint_every=4, nan_param_at=5)
    t.run()
    assert t.recoveries == 1 and t.step == 10
    assert t.ran == [0, 1, 2, 3, 4, 5, 4, 5, 6, 7, 8, 9]
    # the toy keeps its history on a rollback (the Gaussian trainer restores the checkpoint's): step 6 is missing
    assert [h["iteration"] for h in t.state.history] == [1, 2, 3, 4, 5, 5, 6, 7, 8, 9, 10]


def test_second_divergence_stops_with_the_family_message():
    t = _Toy([1.0, float("nan"), float("inf"), 1.0], 1, guard=GuardSettings(snapshot_every=1))
    t.name = "toy"
    with pytest.raises(TrainingError, match="toy: .*at step 3 again after a rollback"):
        t.run()
    assert t.recoveries == 1 and t.opt.param_groups[0]["lr"] == pytest.approx(0.5)


def test_checkpoint_cadence_and_ctrl_c(tmp_path, monkeypatch):
    t = _Toy([1.0] * 6, 1, checkpoint_every=2, out=tmp_path)
    writes = []
    real = t.checkpointer.save
    t.checkpointer.save = lambda payload: writes.append(payload["step"]) or real(payload)
    t.run()
    assert writes == [2, 4] and t.saved_step == 4  # never at the last step: the family saves its final state

    t = _Toy([1.0] * 6, 3, out=tmp_path)  # Ctrl-C at step 2: read back, checkpoint of step 2, KeyboardInterrupt
    monkeypatch.setattr(loop.INTERRUPT, "requested", False)
    real_step = t.train_step

    def step(it):
        if it == 1:
            loop.INTERRUPT.requested = True
        return real_step(it)

    t.train_step = step
    try:
        with pytest.raises(KeyboardInterrupt):
            t.run()
    finally:
        loop.INTERRUPT.requested = False
    assert torch.load(tmp_path / "checkpoint.pt", weights_only=True)["step"] == 2
    assert [h["iteration"] for h in t.state.history] == [1, 2]
    assert any("stopped by Ctrl-C after step 2" in m for m in t.monitor.logs)


def test_deadline_stops_the_pass_and_records_its_steps():
    import time

    t = _Toy([1.0] * 50, 4)
    seen = []
    t.after_step = lambda it: seen.append(it)
    t.run(deadline=time.perf_counter() - 1.0)
    assert t.step == 1 and t.state.iterations["train"] == 1 and seen == [0]
    assert any("time budget reached after 1 of 50 steps" in m for m in t.monitor.logs)

