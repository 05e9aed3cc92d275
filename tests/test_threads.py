"""CPU thread choice (free cores, env knobs) and the demo's core loop beside a busy process."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from meshlift import _threads
from meshlift.errors import ConfigError


def test_choose_num_threads_rules(monkeypatch):
    monkeypatch.setattr(_threads, "_running_elsewhere", lambda: None)  # the load average alone
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    monkeypatch.setattr(os, "getloadavg", lambda: (3.6, 0.0, 0.0))
    assert _threads.free_cores() == 1
    assert _threads.choose_num_threads({}) == (1, "free cores: cores - whole load average")
    monkeypatch.setattr(os, "getloadavg", lambda: (2.6, 0.0, 0.0))
    assert _threads.free_cores() == 2  # the whole part: 2 cores busy, 2 free
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.setattr(os, "getloadavg", lambda: (0.9, 0.0, 0.0))
    assert _threads.free_cores() == 2  # the decaying average of one's own finished run frees both cores
    monkeypatch.setattr(os, "getloadavg", lambda: (1.05, 0.0, 0.0))
    assert _threads.free_cores() == 1  # a job keeping one core busy
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    monkeypatch.setattr(os, "getloadavg", lambda: (0.1, 0.0, 0.0))
    assert _threads.choose_num_threads({})[0] == 4
    monkeypatch.setattr(os, "getloadavg", lambda: (9.0, 0.0, 0.0))
    assert _threads.choose_num_threads({})[0] == 1  # never 0
    assert _threads.choose_num_threads({"OMP_NUM_THREADS": "3"}) == (None, "OMP_NUM_THREADS")
    assert _threads.choose_num_threads({"MESHLIFT_NUM_THREADS": "2", "OMP_NUM_THREADS": "3"})[0] == 2
    with pytest.raises(ConfigError, match="MESHLIFT_NUM_THREADS"):
        _threads.choose_num_threads({"MESHLIFT_NUM_THREADS": "-1"})


def test_what_runs_now_overrides_a_lagging_load_average(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.setattr(os, "getloadavg", lambda: (1.9, 1.2, 0.5))  # one's own 2-core run just ended
    monkeypatch.setattr(_threads, "_running_elsewhere", lambda: 0)
    assert _threads.free_cores() == 2
    monkeypatch.setattr(_threads, "_running_elsewhere", lambda: 1)  # another job runs now
    assert _threads.free_cores() == 1
    monkeypatch.setattr(os, "getloadavg", lambda: (0.2, 0.0, 0.0))  # a burst now, idle on average: the lower
    monkeypatch.setattr(_threads, "_running_elsewhere", lambda: 3)
    assert _threads.free_cores() == 2
    monkeypatch.undo()
    now = _threads._running_elsewhere()  # the real file (Linux): a count, not negative
    assert now is None or now >= 0


def test_thread_note_names_the_choice(monkeypatch):
    monkeypatch.setattr(_threads, "_CHOSEN", None)
    assert _threads.thread_note() is None
    monkeypatch.setattr(_threads, "_CHOSEN", (None, "OMP_NUM_THREADS"))
    assert _threads.thread_note() is None
    monkeypatch.setattr(_threads, "_CHOSEN", (2, "free cores: cores - whole load average"))
    assert _threads.thread_note() == ("CPU threads: 2 (free cores: cores - whole load average; "
                                      "MESHLIFT_NUM_THREADS=N sets it)")


@pytest.mark.slow
def test_demo_core_loop_completes_beside_a_busy_process(tmp_path):
    """A competing process keeps every core busy; the CLI (which sizes its pool from the free cores) must
    still finish a short demo. The time it takes is measured by benchmarks/contention.py, not here."""
    n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    busy = [subprocess.Popen([sys.executable, "-c", "import time\nt=time.time()\nwhile time.time()-t<120: pass"])
            for _ in range(n)]
    try:
        time.sleep(1.0)
        env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MESHLIFT_NUM_THREADS")}
        r = subprocess.run(
            [sys.executable, "-m", "meshlift.cli.main", "demo", "--out", str(tmp_path / "d"),
             "--set", "iter_pass1=8", "--set", "iter_pass2=2"],
            env=env, capture_output=True, text=True, timeout=600)
    finally:
        for p in busy:
            p.kill()
    assert r.returncode == 0, r.stderr[-2000:]
    assert (tmp_path / "d" / "mesh.glb").is_file() or any((tmp_path / "d").rglob("*.glb"))
