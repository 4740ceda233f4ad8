"""Fixtures for the CLI tests: `wren` answering from a ScriptedBackend over the tiny model's
tokenizer, in this process or in a child process (through scripted_wren.py)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
LAUNCHER = Path(__file__).with_name("scripted_wren.py")


@pytest.fixture
def tiny_chosen(wren_home, tiny_model_dir):
    """The tiny model installed (by reference) and chosen in the settings."""
    from wren.engine.modelhub.registry import ModelRegistry
    from wren.engine.store import Store

    ModelRegistry(wren_home / "models").register_folder(tiny_model_dir, name="tiny")
    store = Store(wren_home / "wren.sqlite3")
    store.set_setting("model", "tiny")
    store.close()
    return "tiny"


@pytest.fixture
def scripted(tiny_chosen, monkeypatch):
    """Every Engine that `wren` opens in this process answers with this ScriptedBackend;
    set its `reply` (text, or a function of the rendered prompt) per test."""
    from wren.engine.api import Engine
    from wren.engine.inference.backends.scripted import ScriptedBackend

    backend = ScriptedBackend("Hello from Wren.")
    original = Engine.open.__func__

    def open_(cls, home=None, **kwargs):
        kwargs["backend_factory"] = lambda name: backend
        return original(cls, home, **kwargs)

    monkeypatch.setattr(Engine, "open", classmethod(open_))
    return backend


def set_reply(backend, text_or_fn) -> None:
    backend.reply = (lambda _prompt, text=text_or_fn: text) if isinstance(text_or_fn, str) else text_or_fn


class FakeTerminal:
    """A text stream that says it is a terminal (what the CLI checks with isatty)."""

    def __init__(self) -> None:
        self.parts: list[str] = []

    def write(self, text: str) -> int:
        self.parts.append(text)
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return True

    def getvalue(self) -> str:
        return "".join(self.parts)


def child_env(**extra: str) -> dict[str, str]:
    """The environment for a child `wren` (WREN_HOME comes from the autouse fixture)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    env.update(extra)
    return env


def launcher_argv(tiny_model_dir: Path, *args: str) -> list[str]:
    return [sys.executable, str(LAUNCHER), *args]
