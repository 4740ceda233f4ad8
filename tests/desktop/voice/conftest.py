"""The voice tests' shared pieces."""

from tests.engine.voice.conftest import transcriber  # noqa: F401  (a fixture)
