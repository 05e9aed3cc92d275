"""The command's wall time: the process age, unless a shell exec'd meshlift after other work (cli/clock.py)."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from meshlift.cli import clock


def test_process_age_is_used_for_a_young_process(monkeypatch):
    monkeypatch.setattr(clock, "_AGE_AT_IMPORT", 0.4)
    monkeypatch.setattr(clock, "_proc_age", lambda: 5.0)
    assert clock.process_seconds() == 5.0


def test_an_old_process_at_import_counts_from_the_import(monkeypatch):
    """`sh -c "pip install ... && meshlift demo"`: the shell's start time must not count."""
    monkeypatch.setattr(clock, "_AGE_AT_IMPORT", clock.EXEC_GUARD_S + 50.0)
    monkeypatch.setattr(clock, "_proc_age", lambda: 1e6)
    monkeypatch.setattr(clock, "_T_IMPORT", 100.0)
    monkeypatch.setattr(clock.time, "perf_counter", lambda: 103.5)
    assert clock.process_seconds() == 3.5
    monkeypatch.setattr(clock, "_AGE_AT_IMPORT", None)  # no /proc
    assert clock.process_seconds() == 3.5


def test_a_fresh_interpreter_reports_its_own_age():
    out = subprocess.run([sys.executable, "-c", "from meshlift.cli.clock import process_seconds as p; print(p())"],
                         capture_output=True, text=True, check=True).stdout
    assert 0.0 <= float(out) < 60.0


def test_a_shell_that_ran_something_first_is_not_counted():
    """`sh -c "A && meshlift ..."` execs the interpreter in the shell's process: the 4 s of `A` must not count
    (a 5 s pip install slipped under the first 10 s guard: the fresh-user run of session 27)."""
    if shutil.which("sh") is None or clock._proc_age() is None:
        pytest.skip("needs a POSIX shell and /proc")
    code = "from meshlift.cli.clock import process_seconds as p; print(p())"
    out = subprocess.run(["sh", "-c", f'sleep 4 && exec "{sys.executable}" -c "{code}"'], capture_output=True,
                         text=True, check=True).stdout
    assert 0.0 <= float(out) < 3.0
