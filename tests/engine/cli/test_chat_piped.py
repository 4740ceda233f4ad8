"""`wren chat` reading its messages from a pipe (a script, `echo … | wren chat`): the Ctrl+C
router's prompt handling finds no terminal there and leaves it alone."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.engine.cli.conftest import LAUNCHER, REPO, child_env

pytestmark = pytest.mark.timeout(120)


def test_messages_from_a_pipe_are_answered(tiny_chosen):
    done = subprocess.run([sys.executable, str(LAUNCHER), "chat", "--no-save"], input="hello there\n/bye\n",
                          capture_output=True, text=True, cwd=REPO, env=child_env(), timeout=100)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "echo: hello there" in done.stdout
