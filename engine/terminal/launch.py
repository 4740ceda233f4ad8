"""The `wren` command's entry point. It blocks Ctrl+C's signal in the main thread before
anything else is imported, so the threads that imports make (numpy's BLAS pool) never take
it; main() gives it back unless the command is `wren chat` (see sigint.py)."""

from __future__ import annotations

from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    from . import sigint

    sigint.hold()
    from .main import main as run

    return run(argv, held=True)
