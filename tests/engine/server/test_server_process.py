"""`wren serve` as a process on the real starter model: it listens on loopback, answers the
OpenAI client and Wren's stream, and Ctrl+C ends it. Marked slow: it loads the model."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest

REPO = Path(__file__).resolve().parents[3]
STARTER = "smollm2-135m-instruct"


@pytest.mark.slow
def test_wren_serve_answers_over_http_and_stops_on_ctrl_c(wren_home: Path, starter_models_dir: Path):
    models = wren_home / "models"
    models.mkdir(exist_ok=True)
    (models / STARTER).symlink_to(starter_models_dir / STARTER, target_is_directory=True)
    key = "wren-process-test-key-0123456789abcdef"
    env = dict(os.environ, WREN_API_KEY=key,
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    proc = subprocess.Popen([sys.executable, "-m", "wren.engine.terminal", "serve", "--port", "0", "--backend", "torch-cpu"],
                            cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        line = ""
        deadline = time.monotonic() + 180
        while "at http://" not in line and time.monotonic() < deadline:
            line = proc.stderr.readline()
            assert line or proc.poll() is None, f"wren serve ended: {proc.returncode}"
        url = re.search(r"at (http://127\.0\.0\.1:\d+)", line).group(1)
        api = openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=0, timeout=120)
        assert [m.id for m in api.models.list().data] == [STARTER]
        answer = api.chat.completions.create(model=STARTER, max_tokens=8, temperature=0,
                                             messages=[{"role": "user", "content": "What is the capital of France?"}])
        assert answer.choices[0].message.content.strip() and answer.usage.completion_tokens <= 8
        assert httpx.get(url + "/v1/models").status_code == 401
        with httpx.stream("POST", url + "/api/conversation", headers={"Authorization": f"Bearer {key}"},
                          json={"content": "Say hello.", "sampling": {"max_tokens": 6}}, timeout=120) as r:
            raw = r.read().decode()
        assert raw.startswith('event: delta_encoding\ndata: "v1"\n\n') and raw.endswith("data: [DONE]\n\n")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) in (0, 130)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_wren_serve_on_a_port_in_use_says_so_in_a_line_before_loading(wren_home: Path):
    """uvicorn's refusal came after the model loaded, as a 40-line traceback and exit 3."""
    import socket

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    env = dict(os.environ, WREN_API_KEY="wren-process-test-key-0123456789abcdef",
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    try:
        done = subprocess.run([sys.executable, "-m", "wren.engine.terminal", "serve", "--port", str(port)], cwd=REPO,
                              env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    finally:
        taken.close()
    assert done.returncode == 2, done.stderr  # as other refusals of what was asked
    assert done.stderr.strip().splitlines() == [
        f"wren: port {port} on 127.0.0.1 is in use (another wren serve?); choose another with --port N, "
        "or --port 0 for any free one"]
    assert not (wren_home / "crashes").exists() or not any((wren_home / "crashes").iterdir())
