"""`wren` as a process: exit statuses, signals, pipes, bad bytes, and the compiling child.

Most of these start the CLI (or a process that compiles the way Wren does) with a
subprocess, so they are marked slow."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from wren.engine.terminal.main import main

REPO = Path(__file__).resolve().parents[2]
STARTER = "smollm2-135m-instruct"


def _env(**extra: str) -> dict[str, str]:
    # WREN_HOME and WREN_TORCH_COMPILE=off come from the conftest's autouse fixture.
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    env.update(extra)
    return env


def _wren(*args: str) -> list:
    return [sys.executable, "-m", "wren.engine.terminal", *args]


def _run(args: list, *, env: dict | None = None, timeout: float = 120, **kwargs) -> subprocess.CompletedProcess:
    kwargs.setdefault("stdin", subprocess.DEVNULL)
    return subprocess.run(_wren(*args), cwd=REPO, env=env or _env(), capture_output=True, timeout=timeout, **kwargs)


@pytest.fixture
def starter_home(wren_home, starter_models_dir):
    """WREN_HOME whose models folder holds (a link to) the imported starter model."""
    models = wren_home / "models"
    models.mkdir(exist_ok=True)
    (models / STARTER).symlink_to(starter_models_dir / STARTER, target_is_directory=True)
    return wren_home


@pytest.fixture
def tiny_installed(wren_home, tiny_model_dir):
    from wren.engine.modelhub.registry import ModelRegistry

    ModelRegistry(wren_home / "models").register_folder(tiny_model_dir, name="tiny")
    return "tiny"


def _children_compiling(parent: int | None = None) -> list[int]:
    """Pids of live compiling children (of `parent`, or any under this test's WREN_HOME)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        state, ppid = fields[0], int(fields[1])
        if state in ("Z", "X") or not any(b"compile" in arg for arg in cmdline):
            continue
        if not any(arg.startswith(b"wren.engine.inference") for arg in cmdline):
            continue
        if parent is None or ppid == parent:
            found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")  # a zombie has ended; only its parent has not reaped it


linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


# -- defect: aborts at exit while the decode step compiles in the background -----------------

@pytest.mark.slow
def test_ask_with_compile_on_auto_exits_cleanly_every_time(starter_home):
    env = _env(WREN_TORCH_COMPILE="auto")
    failures = []
    for attempt in range(10):
        done = _run(["ask", "--max-tokens", "1", "hi"], env=env)
        err = done.stderr.decode(errors="replace")
        if done.returncode != 0 or "terminate called" in err:
            failures.append((attempt, done.returncode, err[-300:]))
    assert failures == []


@pytest.mark.slow
@linux_only
def test_chat_closed_while_its_decode_step_compiles_leaves_no_child(starter_home):
    # chat lives long enough to compile: it starts the child, and ends (stdin is empty)
    # while the child is still importing torch or compiling.
    done = _run(["chat"], env=_env(WREN_TORCH_COMPILE="auto"))
    err = done.stderr.decode(errors="replace")
    assert done.returncode == 0, err
    assert "terminate called" not in err
    assert [pid for pid in _children_compiling() if _under(pid, starter_home)] == []


def _under(pid: int, home: Path) -> bool:
    try:
        return str(home) in (Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace"))
    except OSError:
        return False


@pytest.mark.slow
def test_closing_a_background_compile_kills_its_child_and_joins_its_thread(tiny_model_dir, tmp_path):
    from wren.engine.inference.backends.torch import TorchBackend
    from wren.engine.inference.models import decode

    loaded = TorchBackend("cpu").load(tiny_model_dir, compile="off")
    try:
        compile = decode.BackgroundCompile(loaded._model, tmp_path / "cache")
        deadline = time.monotonic() + 60
        while not _children_compiling(os.getpid()) and not compile.done and time.monotonic() < deadline:
            time.sleep(0.05)
        children = _children_compiling(os.getpid()) if sys.platform.startswith("linux") else []
        assert compile.cancel(timeout=30)
        assert not compile._thread.is_alive()
        assert [pid for pid in children if _alive(pid)] == []
    finally:
        loaded.close()


@pytest.mark.slow
@linux_only
def test_a_background_compile_waits_until_the_model_is_quiet(tiny_model_dir, tmp_path):
    """The compiler's imports hold the GIL for seconds, so the compile starts only once the
    model has gone unused a moment (an answer decoding meanwhile got its first token ~3 s
    late), and a compile still waiting stops at once."""
    from wren.engine.inference.backends.torch import TorchBackend
    from wren.engine.inference.models import decode

    loaded = TorchBackend("cpu").load(tiny_model_dir, compile="off")
    idle = {"seconds": 0.0}
    try:
        waiting = decode.BackgroundCompile(loaded._model, tmp_path / "cache", idle_seconds=lambda: idle["seconds"])
        time.sleep(1.5)
        assert not waiting.done and _children_compiling(os.getpid()) == []  # in use: nothing started
        assert waiting.cancel(timeout=5) and waiting.done and not waiting.failed
        started = decode.BackgroundCompile(loaded._model, tmp_path / "cache", idle_seconds=lambda: idle["seconds"])
        idle["seconds"] = decode.QUIET_BEFORE_COMPILE  # a quiet second: the child starts
        deadline = time.monotonic() + 60
        while not _children_compiling(os.getpid()) and not started.done and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _children_compiling(os.getpid()) or started.done
        assert started.cancel(timeout=30)
    finally:
        loaded.close()


# -- defect: a compiling child outlives a parent killed with SIGKILL ----------------------

_PARENT = """
import sys
from pathlib import Path
from wren.engine.inference.backends.torch import TorchBackend
from wren.engine.inference.models import precompile

loaded = TorchBackend("cpu").load(Path(sys.argv[1]), compile="off")
precompile.Store(Path(sys.argv[2]), loaded._model).compile_in_subprocess()
"""


@pytest.mark.slow
@linux_only
def test_compiling_child_never_outlives_a_killed_parent(tiny_model_dir, tmp_path):
    rng = random.Random(1234)
    # After the child appears: at once, within its first half second (still importing
    # torch), and later (compiling).
    delays = [0.0, 0.15, rng.uniform(0.2, 0.5), rng.uniform(0.5, 2.0)]
    outlived = []
    for trial, delay in enumerate(delays):
        parent = subprocess.Popen([sys.executable, "-c", _PARENT, str(tiny_model_dir), str(tmp_path / f"c{trial}")],
                                  cwd=REPO, env=_env(), stdin=subprocess.DEVNULL,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            deadline, children = time.monotonic() + 60, []
            while not children and parent.poll() is None and time.monotonic() < deadline:
                children = _children_compiling(parent.pid)
                time.sleep(0.01)
            assert children, f"no compiling child appeared: {parent.stderr.read().decode(errors='replace')[-500:]}"
            time.sleep(delay)
        finally:
            parent.kill()
            parent.wait()
        gone = time.monotonic() + 2.0
        while any(_alive(pid) for pid in children) and time.monotonic() < gone:
            time.sleep(0.05)
        left = [pid for pid in children if _alive(pid)]
        if left:
            outlived.append((delay, left))
            for pid in left:
                os.kill(pid, signal.SIGKILL)
    assert outlived == []


@pytest.mark.serial  # a wall-clock bound: runs with the machine to itself (make test)
@pytest.mark.slow
@linux_only
def test_the_child_command_names_its_parent_and_a_gone_parent_ends_it_at_once(tmp_path):
    from wren.engine.inference.models import precompile

    command = precompile.child_command(tmp_path / "spec.pt")
    assert command[-2:] == [str(os.getpid()), str(tmp_path / "spec.pt")]
    # A parent pid that is not this child's (its parent died before the child looked):
    # the child ends before importing torch, without touching the spec.
    started = time.monotonic()
    done = subprocess.run(precompile.child_command(tmp_path / "spec.pt", parent=os.getpid() + 10**6),
                          env=precompile.child_env(), capture_output=True, timeout=30)
    assert done.returncode == 3
    assert time.monotonic() - started < 5


# -- defect: Ctrl+C exits 0; a closed pipe ends in a traceback ----------------------------

@pytest.mark.serial  # a wall-clock bound: runs with the machine to itself (make test)
@pytest.mark.slow
def test_ctrl_c_during_an_answer_exits_130_and_keeps_what_was_shown(starter_home, capsys):
    process = subprocess.Popen(
        _wren("ask", "--max-tokens", "400", "--temperature", "0", "Tell me a long story about a brave little dragon."),
        cwd=REPO, env=_env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    try:
        shown = os.read(process.stdout.fileno(), 64)  # the answer has started
        assert shown, process.stderr.read().decode(errors="replace")
        process.send_signal(signal.SIGINT)
        rest, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    shown = (shown + rest).decode()
    assert process.returncode == 130, err.decode(errors="replace")
    assert "Traceback" not in err.decode(errors="replace")
    assert main(["conversations", "--json"]) == 0
    (row,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert main(["conversations", "export", str(row["id"]), "--format", "json"]) == 0
    messages = json.loads(capsys.readouterr().out)["messages"]
    saved = messages[-1]["content"]
    assert messages[-1]["role"] == "assistant" and saved.strip()
    assert shown.strip().startswith(saved.strip()[:20])
    assert len(saved.split()) < 300  # stopped, not answered in full


@pytest.mark.slow
def test_output_to_a_closed_pipe_exits_quietly_with_status_0(wren_home):
    from wren.engine.records import Role
    from wren.engine.store import Store

    store = Store(wren_home / "wren.sqlite3")
    for n in range(3):
        conv = store.create_conversation(title=f"chat {n}")
        store.add_message(conv.id, Role.USER, f"question {n}", parent_id=None)
    store.close()
    process = subprocess.Popen(_wren("conversations", "list"), cwd=REPO, env=_env(), stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process.stdout.close()  # the reader is gone before anything is written
    err = process.stderr.read().decode(errors="replace")
    assert process.wait(timeout=60) == 0, err
    assert err == ""


@pytest.mark.slow
def test_head_reads_the_first_conversation_and_wren_exits_0(wren_home):
    from wren.engine.store import Store

    store = Store(wren_home / "wren.sqlite3")
    for n in range(2000):  # more than a pipe buffer holds: wren writes after head is gone
        store.create_conversation(title=f"a conversation with a long enough title, number {n}")
    store.close()
    command = f"set -o pipefail; {' '.join(_wren('conversations', 'list'))} | head -1"
    done = subprocess.run(["bash", "-c", command], cwd=REPO, env=_env(), capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    assert done.stdout.decode().count("\n") == 1
    assert done.stderr == b""


# -- defect: bytes that are not UTF-8 end in a traceback ----------------------------------

@pytest.mark.slow
def test_invalid_utf8_on_stdin_and_in_argv_is_replaced(tiny_installed, capsys):
    base = ["ask", "--model", "tiny", "--max-tokens", "2"]
    from_stdin = _run([*base, "-"], input=b"caf\xe9 au lait \xff\xfe?", stdin=None)
    assert from_stdin.returncode == 0, from_stdin.stderr.decode(errors="replace")
    assert b"Traceback" not in from_stdin.stderr
    from_argv = subprocess.run([os.fsencode(sys.executable), b"-m", b"wren.engine.terminal", *map(os.fsencode, base),
                                b"na\xefve \xff question"], cwd=REPO, env=_env(), stdin=subprocess.DEVNULL,
                               capture_output=True, timeout=120)
    assert from_argv.returncode == 0, from_argv.stderr.decode(errors="replace")
    assert b"Traceback" not in from_argv.stderr
    assert main(["conversations", "--json"]) == 0
    ids = [json.loads(line)["id"] for line in capsys.readouterr().out.splitlines()]
    questions = []
    for conv in ids:
        assert main(["conversations", "export", str(conv), "--format", "json"]) == 0
        questions.append(json.loads(capsys.readouterr().out)["messages"][0]["content"])
    assert sorted(questions) == sorted(["caf\ufffd au lait \ufffd\ufffd?", "na\ufffdve \ufffd question"])


def test_lone_surrogates_in_the_question_are_replaced_in_process(tiny_installed, capsys):
    assert main(["ask", "--model", "tiny", "--max-tokens", "2", "caf\udce9", "ol\udcffe"]) == 0
    capsys.readouterr()
    assert main(["conversations", "--json"]) == 0
    (row,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert main(["conversations", "export", str(row["id"]), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["messages"][0]["content"] == "caf\ufffd ol\ufffde"


# -- the command line ----------------------------------------------------------------------

def test_ask_joins_words_and_reads_stdin_without_a_dash(tiny_installed, capsys, monkeypatch):
    import io

    assert main(["ask", "--model", "tiny", "--max-tokens", "2", "what", "is", "two", "plus", "two"]) == 0
    for argv in (["-"], []):
        stdin = io.TextIOWrapper(io.BytesIO(b"from standard input"), encoding="utf-8")
        monkeypatch.setattr(sys, "stdin", stdin)
        assert main(["ask", "--model", "tiny", "--max-tokens", "2", *argv]) == 0
    capsys.readouterr()
    assert main(["conversations", "--json"]) == 0
    ids = [json.loads(line)["id"] for line in capsys.readouterr().out.splitlines()]
    questions = []
    for conv in ids:
        assert main(["conversations", "export", str(conv), "--format", "json"]) == 0
        questions.append(json.loads(capsys.readouterr().out)["messages"][0]["content"])
    assert sorted(questions) == sorted(["what is two plus two", "from standard input", "from standard input"])


def test_ask_without_a_question_from_a_terminal_is_a_clear_error(tiny_installed, capsys, monkeypatch):
    class Terminal:
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(sys, "stdin", Terminal())
    assert main(["ask", "--model", "tiny"]) == 2
    assert "needs a question" in capsys.readouterr().err


def test_version(capsys):
    from wren.engine import __version__

    with pytest.raises(SystemExit) as exit:
        main(["--version"])
    assert exit.value.code == 0
    assert capsys.readouterr().out.strip() == f"wren {__version__}"
