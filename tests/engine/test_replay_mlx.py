"""Replay is bit-identical on MLX too (mlx's CPU build runs on Linux), logprobs included.
The answer runs in a child process with a time limit: a backend that hangs fails the
test instead of hanging the suite."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from wren.engine.inference.backends.mlx import MLXBackend

CHILD = Path(__file__).with_name("replay_child.py")
LIMIT_SECONDS = 240  # about 11 s on 2 busy cores


@pytest.mark.slow  # a child process that loads the tiny model on MLX
@pytest.mark.skipif(not MLXBackend().available(), reason=f"MLX cannot run here: {MLXBackend().unavailable_reason()}")
def test_replay_is_bit_identical_on_mlx(tmp_path):
    env = {**os.environ, "WREN_HOME": str(tmp_path)}
    try:
        done = subprocess.run([sys.executable, str(CHILD), "mlx", str(tmp_path)], capture_output=True, text=True,
                              timeout=LIMIT_SECONDS, env=env)
    except subprocess.TimeoutExpired:
        pytest.fail(f"answering and replaying on MLX took over {LIMIT_SECONDS} s")
    assert done.returncode == 0, done.stderr[-3000:]
    first, again = json.loads(done.stdout.strip().splitlines()[-1])["answers"]
    assert first["backend"] == again["backend"] == "mlx"
    assert isinstance(first["sampling"]["seed"], int) and again["sampling"] == first["sampling"]
    assert again["id"] != first["id"] and first["completion_tokens"] > 0
    assert again["content"] == first["content"] and again["completion_tokens"] == first["completion_tokens"]
    assert first["logprobs"] and again["logprobs"] == first["logprobs"]
    assert "".join(t["token"] for t in first["logprobs"]) == first["content"]
