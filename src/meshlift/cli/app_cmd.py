"""`meshlift app`: serve the web app (needs the ``[app]`` extra: gradio).

The app itself is :mod:`meshlift.app`; gradio is imported only when the command runs.
"""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add the `app` subcommand to ``app``."""

    @app.command("app")
    def serve(
        host: str = typer.Option("127.0.0.1", "--host", help="Address to bind (0.0.0.0 exposes it on the network)."),
        port: int = typer.Option(7860, "--port", help="TCP port."),
    ) -> None:
        """Serve the web app: upload photos or a mesh, reconstruct, view the asset in 3D, download it."""
        from meshlift.app import launch

        launch(host=host, port=port)
