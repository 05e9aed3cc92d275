"""`meshlift doctor`: one table of what this machine can run, each row ok / warning / error / skip with its fix.

The probes live in :mod:`meshlift.doctor`; this module only prints. Exit status 0 when meshlift can run
here, 1 when a row is an error.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

_STYLE = {"ok": "green", "warning": "yellow", "error": "bold red", "skip": "dim"}


def register(app: typer.Typer) -> None:
    """Add the `doctor` subcommand to ``app``."""

    @app.command("doctor")
    def doctor(
        json_: bool = typer.Option(False, "--json", metavar="", help="Print JSON (rows and raw facts) for scripts."),
        out: Optional[Path] = typer.Option(None, "--out", "-o", help="Output folder whose free space is checked "
                                           "(default: the current folder)."),
        no_kernel: bool = typer.Option(False, "--no-kernel", metavar="", help="Do not compile the Triton probe kernel."),
    ) -> None:
        """Check Python, torch/CUDA, GPUs and their architectures, Triton (compiles one kernel), backends,
        optional extras, third-party extensions and disk space; print the fix for each problem."""
        import json

        from meshlift import doctor as doc

        facts = doc.gather(out, run_kernel=not no_kernel)
        rows = doc.diagnose(facts)
        ok = doc.can_run(rows)
        if json_:
            typer.echo(json.dumps(doc.to_json(facts, rows), indent=2, default=str))
        else:
            from rich.console import Console
            from rich.markup import escape
            from rich.table import Table

            console = Console(soft_wrap=True)  # no hard line breaks in logs and pipes (paths stay whole)
            if console.is_terminal:
                table = Table(title="meshlift doctor", show_lines=False)
                for col in ("check", "status", "found", "fix"):
                    table.add_column(col, overflow="fold")
                for r in rows:
                    table.add_row(escape(r.check), f"[{_STYLE[r.status]}]{r.status}[/]", escape(r.detail),
                                  escape(r.fix))
                console.print(table)
            else:  # a pipe or a log: one whole line per check (a table folds names and paths at 80 columns)
                console.print("meshlift doctor")
                for r in rows:
                    fix = f" -- fix: {escape(r.fix)}" if r.fix else ""
                    console.print(f"[{_STYLE[r.status]}]{r.status:<5}[/] {escape(r.check)}: {escape(r.detail)}{fix}")
            console.print("[green]meshlift can run here.[/]" if ok else
                          "[bold red]meshlift cannot run here: fix the error rows above.[/]")
        raise typer.Exit(0 if ok else 1)
