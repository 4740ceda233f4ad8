"""The voice window tests use the engine voice tests' recognizer fixture."""

from tests.engine.voice.conftest import transcriber  # noqa: F401  (a fixture)
