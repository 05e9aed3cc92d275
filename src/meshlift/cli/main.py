"""The ``meshlift`` console script.

Each subcommand lives in its own module under ``meshlift.cli`` and exposes ``register(app)``. Those
modules import only typer/rich at module level; the heavy imports (torch, trimesh) happen inside the
command bodies, so ``meshlift --help`` is fast.

Errors of the package's type (:class:`meshlift.errors.MeshliftError`) are printed as one clear line
and exit with status 2; anything else is a bug and shows its traceback.

A closed pipe on the output (``meshlift demo | head``: the reader stopped reading) ends the command
quietly with the shell's usual status for it, 141 (128 + SIGPIPE, what ``yes | head`` leaves in
``PIPESTATUS``; a shell without ``pipefail`` reports the reader's status), whichever command it is: no
traceback, no "Broken pipe" line, no exit status 1 (typer's). Output that was still to be written is dropped (the console script points stdout and stderr at
the null device, so the exit's flush cannot fail again).
"""

from __future__ import annotations

import errno
import os
import sys

import typer

from meshlift import __version__


def _help_option_without_metavar() -> None:
    """Typer's rich help prints the ``--help`` flag's type as ``<bool>`` beside it (recent typer releases, which vendor
    click as ``typer._click``); an empty metavar (as ``--version`` has) keeps the help line clean."""
    try:
        from typer import _click as click
    except ImportError:  # an older typer on the public click: nothing to fix
        return

    original = click.Command.get_help_option
    if getattr(original, "_meshlift", False):
        return

    def get_help_option(self, ctx):
        opt = original(self, ctx)
        if opt is not None and getattr(opt, "metavar", None) is None:
            opt.metavar = ""
        return opt

    get_help_option._meshlift = True
    click.Command.get_help_option = get_help_option


_help_option_without_metavar()

app = typer.Typer(
    name="meshlift",
    help="Posed multi-view photos -> game-ready PBR mesh assets (GLB, OBJ+MTL, PLY).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"meshlift {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, metavar="", help="Print the version."),
) -> None:
    """meshlift command-line interface."""


def _register_all() -> None:
    from meshlift.cli import (  # noqa: PLC0415
        app_cmd,
        convert_cmd,
        demo_cmd,
        doctor_cmd,
        eval_cmd,
        inspect_cmd,
        poses_cmd,
        reconstruct_cmd,
        render_cmd,
    )

    for module in (demo_cmd, reconstruct_cmd, poses_cmd, inspect_cmd, convert_cmd, render_cmd, eval_cmd,
                   doctor_cmd, app_cmd):
        module.register(app)


_register_all()


#: Exit status of a run stopped with Ctrl-C (typer's, the shell convention 128 + SIGINT).
INTERRUPTED = 130


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit status (2 for a MeshliftError).

    Run as the console script (``argv`` None), it first sizes torch's CPU thread pool from the free
    cores (:mod:`meshlift._threads`; knob ``MESHLIFT_NUM_THREADS``) so a busy machine does not
    oversubscribe, sets the garbage collector up for a short-lived process, and after the command ends the
    process without the interpreter's teardown (:mod:`meshlift.cli.process`; knob ``MESHLIFT_FAST_EXIT``).
    In-process callers (tests) keep their own settings and get the status back.
    """
    code = _run(argv)
    if argv is None:  # the console script: end the process without the interpreter's teardown (cli/process.py)
        from meshlift.cli import process

        process.exit_now(code)
    return code


def _run(argv: list[str] | None) -> int:
    from meshlift.errors import MeshliftError

    from meshlift.cli.launch import remember_argv

    remember_argv(sys.argv[1:] if argv is None else argv)  # for `--gpus N` (a relaunch under torchrun)
    try:
        if argv is None:
            from meshlift._threads import configure_cpu_threads
            from meshlift.cli import process

            configure_cpu_threads()
            process.enable_for_console_script()  # GC settings and the exit of a short-lived process (cli/process.py)
        # without standalone mode typer *returns* the code of a `typer.Exit(code)` (also 130 for Ctrl-C)
        # instead of raising it; a command that ends normally returns None
        rv = app(args=argv, standalone_mode=False)
        if isinstance(rv, int) and not isinstance(rv, bool):
            if rv == INTERRUPTED:
                args = sys.argv[1:] if argv is None else list(argv)
                if args[:1] == ["demo"]:
                    typer.echo("interrupted (the demo has no --resume: run it again)", err=True)
                else:
                    typer.echo("interrupted: --resume continues from the last checkpoint in --out (there is none "
                               "when it stopped before training began)", err=True)
            return rv
    except MeshliftError as exc:
        typer.secho(f"error: {exc}", err=True, fg=typer.colors.RED)
        return 2
    except typer.Exit as exc:
        return int(exc.exit_code or 0)
    except typer.Abort:
        typer.echo("aborted", err=True)
        return 1
    except SystemExit as exc:
        if _is_broken_pipe(exc.__context__):  # typer turns EPIPE into sys.exit(1)
            return _broken_pipe(argv is None)
        return int(exc.code or 0)
    except OSError as exc:
        if _is_broken_pipe(exc):
            return _broken_pipe(argv is None)
        raise
    except Exception as exc:
        # Usage errors (missing argument, unknown option, bad value): click's exceptions, which typer may
        # vendor under another module name, so they are recognised by their interface, not their class.
        if callable(getattr(exc, "show", None)) and isinstance(getattr(exc, "exit_code", None), int):
            exc.show()
            return exc.exit_code
        raise
    return 0


def _is_broken_pipe(exc: BaseException | None) -> bool:
    """True for the error of a write to a pipe whose reader has gone (EPIPE), also when wrapped."""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, BrokenPipeError) or (isinstance(exc, OSError) and exc.errno == errno.EPIPE):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def _broken_pipe(console_script: bool) -> int:
    """:data:`meshlift.cli.process.BROKEN_PIPE_STATUS` (141) after a closed output pipe (module docstring). The console script points its stdout and
    stderr at the null device so no later write or the exit's flush reports the broken pipe."""
    if console_script:
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            for stream in (sys.stdout, sys.stderr):
                try:
                    os.dup2(devnull, stream.fileno())
                except (AttributeError, OSError, ValueError):
                    pass
            os.close(devnull)
        except OSError:
            pass
    from meshlift.cli.process import BROKEN_PIPE_STATUS

    return BROKEN_PIPE_STATUS


if __name__ == "__main__":
    sys.exit(main())
