"""The console script's process settings (meshlift/cli/process.py): in-process callers are left alone; the
console script pauses the collector during the demo's imports and resumes it with the import-time heap
frozen; after a command it ends the process once the threads, the atexit handlers and the std streams are
done, with the command's exit status; MESHLIFT_FAST_EXIT=0 keeps the interpreter's normal exit."""

import gc
import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import pytest

from meshlift.cli import process
from meshlift.cli.main import main

# A fresh interpreter that runs main() as the console script does (argv None) on stub commands.
_STUB = textwrap.dedent(
    """
    import atexit, gc, json, sys, threading, time
    import typer
    from meshlift.cli import main as cli, process

    OUT = {out!r}
    seen = {{}}
    real_done = process.imports_done

    def done():
        seen["enabled_before"] = gc.isenabled()
        real_done()
        seen["enabled_after"] = gc.isenabled()
        seen["frozen_after"] = gc.get_freeze_count()

    process.imports_done = done
    cli.app = typer.Typer()

    @cli.app.command("demo")
    def demo():
        {imports}
        process.imports_done()
        json.dump(seen, open(OUT + "/seen.json", "w"))

    @cli.app.command("fail")
    def fail():
        from meshlift.errors import ConfigError
        raise ConfigError("--out: stub error")

    @cli.app.command("cprint")
    def cprint():
        import ctypes
        ctypes.CDLL(None).printf(b"from C\\n")  # a C extension's stdout (libc's buffer, not Python's)

    @cli.app.command("work")
    def work():
        def slow_writer():  # a non-daemon thread still writing when the command returns
            time.sleep(0.3)
            open(OUT + "/thread.txt", "w").write("complete")

        threading.Thread(target=slow_writer).start()
        atexit.register(lambda: open(OUT + "/atexit.txt", "w").write("ran"))
        sys.stdout.write("printed without a newline")
        raise typer.Exit(3)

    sys.argv = ["meshlift", sys.argv[1]]
    code = cli.main()
    open(OUT + "/after_main.txt", "w").write(str(code))  # reached only without the fast exit
    sys.exit(code)
    """
)


def _run_stub(tmp_path, command, env_extra=None, imports="pass", stdout=subprocess.PIPE, edit=lambda s: s):
    script = edit(_STUB.format(out=str(tmp_path), imports=imports))
    env = dict(os.environ, **(env_extra or {}))
    env.pop("PYTHONUNBUFFERED", None)  # a buffered stdout, as a user's shell has: the flush is then tested
    return subprocess.run([sys.executable, "-c", script, command], stdout=stdout, stderr=subprocess.PIPE,
                          text=True, timeout=300, env=env)


def test_in_process_callers_keep_their_collector_and_interpreter(capsys):
    before = (gc.isenabled(), gc.get_freeze_count())
    assert main(["--version"]) == 0  # returns: no fast exit for argv given
    process.pause_during_imports()
    process.imports_done()
    process.exit_now(0)  # not the console script: returns
    assert (gc.isenabled(), gc.get_freeze_count()) == before
    assert "meshlift" in capsys.readouterr().out


_REAL_DEMO = textwrap.dedent(
    """
    import gc, json, sys
    import typer
    from meshlift.cli import main as cli, process
    import meshlift.data.demo_object as demo_object

    OUT = {out!r}
    seen = {{}}
    real_done = process.imports_done

    def done():
        seen["enabled_before"] = gc.isenabled()
        real_done()
        seen["enabled_after"] = gc.isenabled()
        seen["frozen_after"] = gc.get_freeze_count()

    def stop_here():  # the demo's first step after its imports: record, then end the command
        json.dump(seen, open(OUT + "/seen.json", "w"))
        raise typer.Exit(0)

    process.imports_done = done
    demo_object.make_demo_object = stop_here
    sys.argv = ["meshlift", "demo", "--out", OUT + "/demo"]
    sys.exit(cli.main())
    """
)


def test_console_script_pauses_the_collector_then_freezes_and_resumes(tmp_path):
    """The real `demo` command, stopped right after its imports: collector paused during them, then the heap
    frozen and collection resumed."""
    r = subprocess.run([sys.executable, "-c", _REAL_DEMO.format(out=str(tmp_path))], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    seen = json.loads((tmp_path / "seen.json").read_text())
    assert seen["enabled_before"] is False  # paused during the demo's imports
    assert seen["enabled_after"] is True  # resumed
    assert seen["frozen_after"] > 1000  # the import-time heap is in the permanent generation


def test_fast_exit_finishes_threads_handlers_and_output_and_keeps_the_status(tmp_path):
    r = _run_stub(tmp_path, "work")
    assert r.returncode == 3, r.stderr
    assert r.stdout == "printed without a newline"
    assert (tmp_path / "thread.txt").read_text() == "complete"  # the non-daemon thread was joined
    assert (tmp_path / "atexit.txt").read_text() == "ran"
    assert not (tmp_path / "after_main.txt").exists()  # the process ended in main()


def test_fast_exit_off_returns_from_main(tmp_path):
    r = _run_stub(tmp_path, "work", {process.ENV_FAST_EXIT: "0"})
    assert r.returncode == 3, r.stderr
    assert (tmp_path / "after_main.txt").read_text() == "3"
    assert (tmp_path / "thread.txt").read_text() == "complete"
    assert (tmp_path / "atexit.txt").read_text() == "ran"


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")
@pytest.mark.parametrize("fast", ["1", "0"])
def test_a_frozen_heap_with_triton_loaded_exits_quietly(tmp_path, fast):
    """Triton's bindings (nanobind) warn of 'leaked' objects at teardown when a frozen heap keeps them: the
    fast exit skips that teardown, the normal one unfreezes first."""
    r = _run_stub(tmp_path, "demo", {process.ENV_FAST_EXIT: fast, "TRITON_INTERPRET": "1"}, imports="import triton")
    assert r.returncode == 0, r.stderr
    assert json.loads((tmp_path / "seen.json").read_text())["frozen_after"] > 1000
    assert "leaked" not in r.stderr


def test_fast_exit_flushes_c_level_stdout(tmp_path):
    r = _run_stub(tmp_path, "cprint")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "from C\n"


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux) for a failing flush")
def test_fast_exit_reports_a_failed_flush_of_stdout(tmp_path):
    with open("/dev/full", "w") as full:  # every write fails with ENOSPC: the last flush of stdout fails
        p = _run_stub(tmp_path, "work", stdout=full, edit=lambda s: s.replace("raise typer.Exit(3)", "return"))
    assert p.returncode == 120  # what the interpreter's own exit returns


@pytest.mark.parametrize("command,status", [("work", 3), ("ok", 141)])
def test_fast_exit_after_a_closed_pipe_is_quiet_and_keeps_the_status(tmp_path, command, status):
    """`meshlift ... | head`: the reader is gone before the buffered output is flushed (EPIPE at exit). No
    "Exception ignored" or "Broken pipe" line, no 120: a failing command keeps its own status, one that
    succeeded ends with the shell's status for a closed pipe (141 = 128 + SIGPIPE)."""
    rd, wr = os.pipe()
    os.close(rd)
    try:
        p = _run_stub(tmp_path, "work", stdout=wr,
                      edit=(lambda s: s) if command == "work" else (lambda s: s.replace("raise typer.Exit(3)", "return")))
    finally:
        os.close(wr)
    assert p.returncode == status
    assert p.stderr == ""


def test_no_fast_exit_under_a_profiler(tmp_path):
    script = tmp_path / "stub.py"
    script.write_text(_STUB.format(out=str(tmp_path), imports="pass"))
    prof = tmp_path / "out.prof"
    r = subprocess.run([sys.executable, "-m", "cProfile", "-o", str(prof), str(script), "work"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr  # cProfile swallows the SystemExit
    assert prof.is_file() and (tmp_path / "after_main.txt").read_text() == "3"


def test_fast_exit_keeps_the_error_status_and_message(tmp_path):
    r = _run_stub(tmp_path, "fail")
    assert r.returncode == 2  # a MeshliftError: one line, status 2
    assert "error: --out: stub error" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "after_main.txt").exists()
