"""Errors the engine raises on bad input; each message says what was wrong."""

from __future__ import annotations


class WrenError(Exception):
    """Base of every error Wren reports to a user."""


class InvalidRequest(WrenError, ValueError):
    """A request the engine refuses before doing any work (empty message, bad option)."""


class ModelNotFound(WrenError, LookupError):
    """No installed model has that name."""


class ModelFileError(WrenError):
    """A model file is missing, truncated or unreadable; the message names the file."""


class UnsupportedArchitecture(WrenError):
    """The model's architecture is not one Wren can run."""


class UnsupportedQuantization(WrenError):
    """A GGUF tensor uses a quantization type Wren cannot read."""


class BackendUnavailable(WrenError):
    """The requested inference backend cannot run on this machine."""


class StoreError(WrenError):
    """The database is locked, read-only or otherwise unusable; nothing was written."""


class NotFound(WrenError, LookupError):
    """A conversation or message id that does not exist."""


class ModelNotLoaded(WrenError):
    """The operation needs a loaded model and none is loaded (or one is loading)."""


class Cancelled(WrenError):
    """The user stopped a long operation (a download); what it had done so far is kept for the next try."""


class DatabaseDamaged(StoreError):
    """SQLite found the database file damaged: Wren reads what it still can and writes nothing to it."""

    def __init__(self, message: str, problems: tuple[str, ...] = ()):
        super().__init__(message)
        self.problems = problems  # what SQLite's check found
