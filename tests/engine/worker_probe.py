"""Watching what a model worker is given, through its public `submit`: the ghost text's tests
see its requests here instead of in the chat service's private state."""

from __future__ import annotations


def submitted_to(worker) -> list:
    """The requests `worker` is given from now on, in order (its public submit, wrapped)."""
    seen: list = []
    submit = worker.submit

    def recording(request) -> None:
        seen.append(request)
        submit(request)

    worker.submit = recording
    return seen
