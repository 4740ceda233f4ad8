"""The `wren` command's entry point. It blocks Ctrl+C's signal in the main thread before
anything else is imported, so the threads that imports make (numpy's BLAS pool) never take
it; main() gives it back unless the command is `wren chat` (see sigint.py). Then the network
guard goes in, before any command can connect (engine/network/guard.py)."""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    from . import sigint

    sigint.hold()
    from ..network.guard import install

    install(process_name(sys.argv[1:] if argv is None else argv))
    from .main import main as run

    return run(argv, held=True)


def process_name(argv: Sequence[str]) -> str:
    """What the ledger calls this process: `wren` and its command (`wren ask`, `wren serve`;
    `wren resident` is the resident engine)."""
    words = [word for word in argv if not word.startswith("-")][:1]
    return " ".join(["wren", *words])
