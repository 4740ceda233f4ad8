"""The user's action follows the work into threads: a folder model's download fetches its
files on several threads, an executor runs a call for an asyncio task, and each connection
they make is recorded as that action's, never "not attributed" and never a later action's."""

from __future__ import annotations

import asyncio
import socket
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.engine.network.conftest import entries
from tests.fakehub import FakeHub, use_fake_hub
from wren.engine.network.purpose import Part, acting

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def listener():
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(5)
    yield server.getsockname()[1]
    server.close()


def _connect(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=5):
        pass


def _connects() -> list[tuple[str, str]]:
    return [(e.part, e.action) for e in entries() if e.kind == "connect"]


def test_a_folder_models_download_on_several_threads_is_the_pulls_in_every_entry(
        guarded, tmp_path, monkeypatch, tiny_model_dir):
    from wren.engine.modelhub import ModelRegistry, pull

    seen_threads: set[str] = set()
    real_connect = socket.socket.connect

    def noting(sock, address):  # which threads connected: the download's workers must be among them
        seen_threads.add(threading.current_thread().name)
        return real_connect(sock, address)

    monkeypatch.setattr(socket.socket, "connect", noting)
    with FakeHub() as hub:
        use_fake_hub(hub, monkeypatch, tmp_path / "hf-home")
        for path in sorted(tiny_model_dir.iterdir()):
            hub.add_file("acme/tiny-hf", path.name, path.read_bytes(), lfs=path.suffix == ".safetensors")
        plan = pull.resolve("acme/tiny-hf")
        assert plan.kind == "folder" and len(plan.files) > 1
        info = pull.pull(ModelRegistry(tmp_path / "models"), plan)
        assert info.source == "folder"
        port = int(hub.url.rsplit(":", 1)[1])
    assert len(seen_threads) > 1, seen_threads  # the files came on worker threads, not only this one
    found = [e for e in entries() if e.kind == "connect"]
    assert len(found) > len(plan.files)  # the listing, then each file
    assert {(e.part, e.action, e.host, e.port) for e in found} == {
        ("model download", "model pull of acme/tiny-hf", "127.0.0.1", port)}


def test_a_thread_started_inside_an_action_connects_as_that_action(guarded, listener):
    with acting(Part.MODEL_DOWNLOAD, "model pull of acme/x"):
        started = threading.Thread(target=_connect, args=(listener,))
        started.start()
    started.join()
    alone = threading.Thread(target=_connect, args=(listener,))  # started where no action is named
    alone.start()
    alone.join()
    assert [part for part, _ in _connects()] == ["model download", "not attributed"]


def test_an_executor_task_is_its_submitters_action_not_the_one_that_made_the_worker(guarded, listener):
    with ThreadPoolExecutor(max_workers=1) as pool:
        with acting(Part.MODEL_DOWNLOAD, "model pull of acme/x"):
            pool.submit(_connect, listener).result()  # the worker thread is made here
        pool.submit(_connect, listener).result()  # same worker, no action named
        with acting(Part.MCP_SERVER, "MCP server 'notes' over HTTP"):
            pool.submit(_connect, listener).result()
    assert _connects() == [("model download", "model pull of acme/x"),
                           ("not attributed", "no action was named by the code that connected"),
                           ("MCP server", "MCP server 'notes' over HTTP")]


def test_an_asyncio_tasks_call_in_the_default_executor_is_the_tasks_action(guarded, listener):
    async def main() -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, _connect, listener)  # the loop's worker is made with no action
        with acting(Part.REMOTE_PROVIDER, "answer from provider 'far'"):
            await loop.run_in_executor(None, _connect, listener)
        await loop.run_in_executor(None, _connect, listener)

    asyncio.run(main())
    assert [part for part, _ in _connects()] == ["not attributed", "remote provider", "not attributed"]
