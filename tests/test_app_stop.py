"""The app clears its upload cache when it stops (issue 31, class 7): the session folders this process made
under the sessions root are deleted at exit and on SIGTERM; folders of other processes stay (the age sweep
removes those). No gradio needed: the stop handlers are the app's (`meshlift.app.uploads.clear_on_stop`,
which `meshlift.app.launch` installs)."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import pytest

_CHILD = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    from meshlift.app.uploads import Limits, clear_on_stop, ingest, session_folder

    limits = Limits(root=Path(sys.argv[1]))
    clear_on_stop(limits)
    s = session_folder(limits, "tab-1")
    (s / "input").mkdir()
    (s / "input" / "photo.png").write_bytes(b"x" * 100)
    (s / "output").mkdir()
    print("ready", flush=True)
    if sys.argv[2] == "wait":
        time.sleep(60)
    else:
        sys.stdin.readline()  # the test has looked at the folder: a normal exit now
    """
)


def _start(root, how):
    return subprocess.Popen([sys.executable, "-c", _CHILD, str(root), how], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("how", ["exit", "sigterm"])
def test_session_folders_go_when_the_app_stops(tmp_path, how):
    root = tmp_path / "sessions"
    other = root / "another-process-tab"
    other.mkdir(parents=True)  # not this process's: left for the age sweep
    p = _start(root, "wait" if how == "sigterm" else "exit")
    try:
        assert p.stdout.readline().strip() == "ready"
        assert (root / "tab-1" / "input" / "photo.png").is_file()
        if how == "sigterm":
            p.send_signal(signal.SIGTERM)
        else:
            p.stdin.write("stop\n")
            p.stdin.flush()
        rc = p.wait(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert rc == (143 if how == "sigterm" else 0), p.stderr.read()
    assert not (root / "tab-1").exists()
    assert other.is_dir()


def test_clear_sessions_removes_only_this_processs_folders_and_an_empty_root(tmp_path):
    from meshlift.app.uploads import Limits, clear_sessions, session_folder

    limits = Limits(root=tmp_path / "root")
    a, b = session_folder(limits, "a"), session_folder(limits, "b")
    (a / "f.txt").write_text("x")
    elsewhere = Limits(root=tmp_path / "elsewhere")
    c = session_folder(elsewhere, "c")
    assert sorted(clear_sessions(limits)) == sorted([a.resolve(), b.resolve()])
    assert not limits.root.exists() and c.is_dir()  # the root went once empty; another root is untouched
    assert clear_sessions(elsewhere) == [c.resolve()] and not c.exists()
