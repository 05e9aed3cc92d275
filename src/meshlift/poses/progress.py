"""Progress of the poses step's stages: a silent base class the CLI subclasses with rich bars."""

from __future__ import annotations

__all__ = ["StageProgress"]


class StageProgress:
    """Receives stage starts, advances and messages; this base class ignores them (library default).

    A stage is ``start(name, total)``, any number of ``advance(n)`` and ``end()``; ``total = 0`` means the
    length is unknown (a spinner, no ETA).
    """

    def start(self, stage: str, total: int) -> None:
        """A stage of ``total`` units (images, frames, pairs) begins."""

    def advance(self, n: int = 1) -> None:
        """``n`` more units of the current stage are done."""

    def end(self) -> None:
        """The current stage is finished."""

    def log(self, message: str) -> None:
        """A one-line message for the user (a choice made, a warning)."""
