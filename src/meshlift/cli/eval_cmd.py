"""`meshlift eval` (placeholder until its issue lands: registers nothing)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add the `eval` subcommand to ``app``."""
