"""A remote model's context window comes from the server it runs on, over real HTTP on
127.0.0.1: vLLM's /v1/models max_model_len, llama.cpp's /props n_ctx (its /v1/models
names the model after its file and gives only the training length), Ollama's /api/show."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from wren.engine.inference.backends.remote import DEFAULT_CONTEXT, RemoteBackend, RemoteSpec, RemoteWorker
from wren.engine.inference.backends.remote_context import context_from_show

VLLM = {"GET /v1/models": {"data": [{"id": "m", "max_model_len": 32768}]}}
LLAMA_CPP = {
    "GET /v1/models": {"data": [{"id": "/models/m-Q4_K_M.gguf", "owned_by": "llamacpp",
                                 "meta": {"n_ctx_train": 131072}}]},
    "GET /props": {"default_generation_settings": {"n_ctx": 32768}, "total_slots": 1},
}
OLLAMA = {
    "GET /v1/models": {"data": [{"id": "m", "object": "model", "owned_by": "library"},
                                {"id": "other", "object": "model", "owned_by": "library"}]},
    "POST /api/show": {"parameters": "num_ctx 32768\nstop \"<|eot|>\"", "model_info": {"llama.context_length": 131072}},
}
SILENT = {"GET /v1/models": {"data": [{"id": "m"}]}}


def _serve(routes: dict, seen: list | None = None):
    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            if seen is not None:
                seen.append(f"{self.command} {self.path}")
            size = int(self.headers.get("content-length") or 0)
            self.rfile.read(size)
            body = routes.get(f"{self.command} {self.path}")
            raw = json.dumps(body if body is not None else {"error": "not found"}).encode()
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        do_GET = do_POST = _answer

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class Words:
    def count(self, text: str) -> int:
        return len(text.split())


@pytest.mark.parametrize("routes", [VLLM, LLAMA_CPP, OLLAMA], ids=["vllm", "llama.cpp", "ollama"])
def test_the_loaded_remote_model_reads_as_much_as_its_server_says(routes):
    server = _serve(routes)
    port = server.server_address[1]
    spec = RemoteSpec("local", "m", f"http://127.0.0.1:{port}/v1", None, False, None)
    worker = RemoteWorker("local/m", RemoteBackend(spec), Words())
    try:
        model = worker.loaded.result(20)
        assert model.context_length == 32768
    finally:
        worker.close()
        server.shutdown()


def test_a_server_that_says_nothing_leaves_the_default_and_is_asked_nothing_else():
    seen: list[str] = []
    server = _serve(SILENT, seen)
    spec = RemoteSpec("local", "m", f"http://127.0.0.1:{server.server_address[1]}/v1", None, False, None)
    worker = RemoteWorker("local/m", RemoteBackend(spec), Words())
    try:
        assert worker.loaded.result(20).context_length == DEFAULT_CONTEXT
        assert seen == ["GET /v1/models"]  # not llama.cpp's /props nor Ollama's /api/show
    finally:
        worker.close()
        server.shutdown()


def test_ollama_show_without_num_ctx_gives_the_architecture_length():
    assert context_from_show({"parameters": "stop x", "model_info": {"qwen2.context_length": 40960}}) == 40960
    assert context_from_show({"parameters": "num_ctx lots"}) is None
