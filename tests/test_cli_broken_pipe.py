"""`meshlift ... | head` (issue 31, class 7): when the reader of the output pipe has gone, every command ends
quietly with the shell's usual status for it, 141 (128 + SIGPIPE, as `yes | head` leaves in PIPESTATUS) — no
traceback, no "Broken pipe" line, not typer's status 1 nor the exit flush's 120.
Run as the console script (a fresh interpreter with stdout on a pipe whose read end is closed)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def _run_into_closed_pipe(args, cwd):
    rd, wr = os.pipe()
    os.close(rd)  # the reader (head) has gone before the command writes
    try:
        code = "import sys; from meshlift.cli.main import main; sys.argv = ['meshlift'] + sys.argv[1:]; main()"
        return subprocess.run([sys.executable, "-c", code, *args], stdout=wr, stderr=subprocess.PIPE, text=True,
                              timeout=300, cwd=cwd)
    finally:
        os.close(wr)


@pytest.fixture(scope="module")
def sphere(tmp_path_factory):
    import trimesh

    p = tmp_path_factory.mktemp("pipe") / "sphere.ply"
    trimesh.creation.icosphere(subdivisions=1).export(p)
    return p


@pytest.mark.parametrize("args", [
    ["--help"],
    ["eval", "mesh", "{m}", "{m}", "--samples", "200"],  # a rich table from inside the command
    ["eval", "mesh", "{m}", "{m}", "--samples", "200", "--json"],  # typer.echo
])
def test_a_closed_output_pipe_ends_quietly_with_the_shells_status(sphere, args):
    r = _run_into_closed_pipe([a.format(m=sphere) for a in args], sphere.parent)
    assert r.returncode == 141, r.stderr
    assert r.stderr == ""


def test_errors_still_report_when_only_stdout_is_closed(sphere):
    """A bad input with stdout closed: the one-line error on stderr, status 2, as always."""
    r = _run_into_closed_pipe(["eval", "mesh", str(sphere.parent / "missing.ply"), str(sphere)], sphere.parent)
    assert r.returncode == 2 and "missing.ply" in r.stderr and "Traceback" not in r.stderr
