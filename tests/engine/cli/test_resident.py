"""`wren ask` through the resident engine (engine/terminal/resident.py): the model stays loaded in
one background process between runs, and each `wren ask` sends its question over a Unix
socket. These run the real CLI and the real engine process over the tiny model."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from wren.engine import engine_sockets
from wren.engine.terminal import resident
from wren.engine.terminal.ask_request import AskRequest
from wren.engine.terminal.resident_host import host_for_window

REPO = Path(__file__).resolve().parents[3]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not resident.supported(), reason="the resident engine listens on a Unix socket"),
]


def _env(**extra: str) -> dict[str, str]:
    # WREN_HOME and WREN_TORCH_COMPILE=off come from the conftest's autouse fixture, and
    # WREN_KEEP_ALIVE=0 too: these tests turn the resident engine on.
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    env.pop("XDG_RUNTIME_DIR", None)  # the socket under this test's data folder
    env.update({"WREN_KEEP_ALIVE": "60", **extra})
    return env


def _wren(*args: str, env: dict | None = None, timeout: float = 120, **kwargs) -> subprocess.CompletedProcess:
    kwargs.setdefault("stdin", subprocess.DEVNULL)
    return subprocess.run([sys.executable, "-m", "wren.engine.terminal", *args], cwd=REPO, env=env or _env(),
                          capture_output=True, text=True, timeout=timeout, **kwargs)


def _statuses(env: dict | None = None) -> list[dict]:
    done = _wren("resident", "--json", env=env)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def _status(env: dict | None = None) -> dict:
    """The one engine's status ({"type": "none"} when none runs)."""
    found = _statuses(env)
    assert len(found) <= 1, found
    return found[0] if found else {"type": "none"}


def _events(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def long_tiny_dir(tmp_path_factory) -> Path:
    """The tiny model with room for answers of thousands of tokens (greedy, it never ends early)."""
    from tests.fixtures.tiny import make_tiny_model_dir

    return make_tiny_model_dir(tmp_path_factory.mktemp("long") / "tiny", max_position_embeddings=8192)


@pytest.fixture
def tiny_home(wren_home, long_tiny_dir, monkeypatch):
    """A data folder with the tiny model; its resident engine is stopped after."""
    from wren.engine.modelhub.registry import ModelRegistry

    ModelRegistry(wren_home / "models").register_folder(long_tiny_dir, name="tiny")
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    yield wren_home
    _wren("resident", "stop")
    path = resident.socket_path(wren_home)
    deadline = time.monotonic() + 30
    while path.exists() and time.monotonic() < deadline:
        time.sleep(0.1)


def _ask(*words: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return _wren("ask", "--model", "tiny", "--seed", "1", *words, env=env, timeout=timeout)


def test_asks_share_one_engine_that_keeps_the_model_loaded(tiny_home):
    assert _status() == {"type": "none"}
    first = _ask("--json", "--max-tokens", "4", "hello there")
    assert first.returncode == 0, first.stderr
    status = _status()
    assert status["type"] == "status" and status["model"] == "tiny" and status["keep_alive"] == 60
    second = _ask("--json", "--max-tokens", "4", "hello there")
    assert second.returncode == 0, second.stderr
    assert _status()["pid"] == status["pid"]  # the same process answered
    for done in (first, second):
        kinds = [e["type"] for e in _events(done.stdout)]
        assert kinds[0] == "started" and kinds[-2:] == ["usage", "finished"] and "delta" in kinds
    # the same seed and question: the same answer, wherever it was computed
    here = _ask("--json", "--max-tokens", "4", "hello there", env=_env(WREN_KEEP_ALIVE="0"))
    assert here.returncode == 0, here.stderr

    def text(done):
        return "".join(e["text"] for e in _events(done.stdout) if e["type"] == "delta")

    assert text(first) == text(second) == text(here)
    # both are saved in the terminal's group, as an answer in this process is
    listed = _wren("conversations", "list", "--json")
    assert sum(json.loads(line)["terminal"] for line in listed.stdout.splitlines()) == 3


def test_ten_asks_in_a_row_exit_zero(tiny_home):
    failures = []
    for attempt in range(10):
        done = _ask("--max-tokens", "2", "hi")
        if done.returncode != 0 or "terminate called" in done.stderr or not done.stdout.strip():
            failures.append((attempt, done.returncode, done.stderr[-300:]))
    assert failures == []


def test_a_bad_question_is_refused_with_status_2_and_the_engine_stays(tiny_home):
    assert _ask("--max-tokens", "2", "hi").returncode == 0
    pid = _status()["pid"]
    done = _ask("--max-tokens", "2", "   ")
    assert done.returncode == 2
    assert "empty" in done.stderr
    done = _wren("ask", "--model", "no-such-model", "hi")
    assert done.returncode == 2 and "no-such-model" in done.stderr
    assert _status()["pid"] == pid


def test_keep_alive_zero_answers_here_and_starts_nothing(tiny_home):
    done = _ask("--keep-alive", "0", "--max-tokens", "2", "hi")
    assert done.returncode == 0, done.stderr
    assert _status() == {"type": "none"}
    assert not resident.socket_path(tiny_home).exists()


def test_the_setting_at_zero_answers_here_too(tiny_home):
    """With neither --keep-alive nor WREN_KEEP_ALIVE, the setting (as Settings saves it) decides."""
    from wren.engine.store import Store

    store = Store(tiny_home / "wren.sqlite3")
    store.set_setting(resident.KEEP_ALIVE_SETTING, 0)
    store.close()
    env = _env()
    env.pop("WREN_KEEP_ALIVE")
    done = _ask("--max-tokens", "2", "hi", env=env)
    assert done.returncode == 0, done.stderr
    assert _status(env) == {"type": "none"}
    assert not resident.socket_path(tiny_home).exists()


def test_an_idle_engine_ends_after_its_keep_alive_and_removes_its_socket(tiny_home):
    assert _ask("--keep-alive", "1", "--max-tokens", "2", "hi").returncode == 0
    path = resident.socket_path(tiny_home)
    deadline = time.monotonic() + 30
    while path.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not path.exists()
    assert _status() == {"type": "none"}


def test_a_stale_socket_is_replaced(tiny_home):
    path = resident.socket_path(tiny_home)
    path.parent.mkdir(mode=0o700, exist_ok=True)
    dead = socket.socket(socket.AF_UNIX)
    dead.bind(str(path))  # bound, never listening: what a killed engine leaves
    dead.close()
    done = _ask("--max-tokens", "2", "hi")
    assert done.returncode == 0, done.stderr
    assert _status()["type"] == "status"


def _answer_stream(*words: str) -> subprocess.Popen:
    """A long answer (greedy, the tiny model writes 6,000 tokens to "count to ten thousand":
    seconds, so a signal or a kill lands mid-answer)."""
    return subprocess.Popen([sys.executable, "-m", "wren.engine.terminal", "ask", "--model", "tiny", "--json",
                             "--temperature", "0", "--max-tokens", "6000", *words], cwd=REPO, env=_env(),
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _until_first_delta(process: subprocess.Popen) -> list[dict]:
    seen = []
    for line in process.stdout:
        seen.append(json.loads(line))
        if seen[-1]["type"] == "delta":
            return seen
    pytest.fail(f"no delta before the stream ended: {seen} {process.stderr.read()}")


def _stored_answer(conversation_id: int) -> dict:
    export = _wren("conversations", "export", str(conversation_id), "--format", "json")
    assert export.returncode == 0, export.stderr
    return json.loads(export.stdout)["messages"][-1]


def test_ctrl_c_stops_the_answer_keeps_it_and_the_engine(tiny_home):
    assert _ask("--max-tokens", "2", "hi").returncode == 0  # the engine is up and the model loaded
    pid = _status()["pid"]
    process = _answer_stream("count to ten thousand")
    started = _until_first_delta(process)[0]
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    assert _events(out)[-1] == {"type": "finished", "reason": "cancelled", "message_id": started["assistant_message_id"]}
    assert _stored_answer(started["conversation_id"])["status"] == "stopped"
    assert _status()["pid"] == pid


def test_a_client_that_goes_away_stops_its_answer(tiny_home):
    assert _ask("--max-tokens", "2", "hi").returncode == 0
    pid = _status()["pid"]
    process = _answer_stream("count to ten thousand")
    started = _until_first_delta(process)[0]
    process.kill()
    process.wait(timeout=30)
    deadline = time.monotonic() + 30
    while _status()["answering"] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _status()["answering"] == 0
    stored = _stored_answer(started["conversation_id"])
    assert stored["status"] == "stopped", stored
    assert _ask("--max-tokens", "2", "hi").returncode == 0  # and it answers the next one
    assert _status()["pid"] == pid


def test_two_asks_at_once_are_both_answered(tiny_home):
    assert _ask("--max-tokens", "2", "hi").returncode == 0
    procs = [subprocess.Popen([sys.executable, "-m", "wren.engine.terminal", "ask", "--model", "tiny", "--json",
                               "--max-tokens", "6", f"question {i}"], cwd=REPO, env=_env(),
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(2)]
    results = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, results, strict=True):
        assert p.returncode == 0, err
        events = _events(out)
        assert events[0]["type"] == "started" and events[-1]["type"] == "finished"
        assert events[-1]["reason"] in ("stop", "length")
    assert len({_events(out)[0]["conversation_id"] for out, _ in results}) == 2


def test_a_safety_rule_changed_by_another_process_applies_to_the_next_ask(tiny_home):
    from wren.engine.safety import user_policy

    assert _ask("--max-tokens", "2", "tell me about pineapples").returncode == 0
    user_policy.set_blocklist(tiny_home, ["pineapples"], [])  # as `wren safety` or the window would
    done = _ask("--json", "--max-tokens", "2", "tell me about pineapples")
    events = _events(done.stdout)
    assert any(e["type"] == "safetynotice" and e["action"] == "block" for e in events), events
    assert not any(e["type"] == "delta" for e in events)


def test_the_socket_is_private(tiny_home):
    assert _ask("--max-tokens", "2", "hi").returncode == 0
    path = resident.socket_path(tiny_home)
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.parent.stat().st_mode & 0o777 == 0o700


def test_engines_started_in_other_environments_are_apart_and_all_stop(tiny_home):
    assert _ask("--max-tokens", "2", "hi").returncode == 0
    other = _env(WREN_ISA="scalar")  # other kernels: another engine, not the first one's
    assert _ask("--max-tokens", "2", "hi", env=other).returncode == 0
    found = _statuses()
    assert len(found) == 2 and len({s["pid"] for s in found}) == 2
    stopped = _wren("resident", "stop", "--json")
    assert sorted(json.loads(line)["pid"] for line in stopped.stdout.splitlines()) == sorted(s["pid"] for s in found)
    deadline = time.monotonic() + 30
    while engine_sockets.sockets(tiny_home) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert engine_sockets.sockets(tiny_home) == []


def test_asks_that_name_tools_answer_in_their_own_process(tiny_home):
    done = _ask("--tools", "calculator", "--max-tokens", "2", "hi")
    assert done.returncode == 0, done.stderr
    assert _status() == {"type": "none"}


def test_socket_paths_differ_by_data_folder_and_environment_and_stay_short(tmp_path, monkeypatch):
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    a, b = resident.socket_path(tmp_path / "a"), resident.socket_path(tmp_path / "b")
    assert a != b
    short = Path(tempfile.mkdtemp(prefix="w", dir="/tmp"))
    try:
        assert resident.socket_path(short).parent == short.resolve() / "run"  # in the data folder
    finally:
        short.rmdir()
    monkeypatch.setenv("WREN_ISA", "avx2")
    with_isa = resident.socket_path(tmp_path / "a")
    assert with_isa not in (a, b) and with_isa.parent == a.parent
    monkeypatch.setenv("WREN_KEEP_ALIVE", "5")  # not the engine's shape: the same engine
    assert resident.socket_path(tmp_path / "a") == with_isa
    deep = tmp_path / ("x" * 120)
    assert len(os.fsencode(resident.socket_path(deep))) <= 100


def test_keep_alive_values(monkeypatch):
    import argparse

    from wren.engine.errors import WrenError

    monkeypatch.setenv("WREN_KEEP_ALIVE", "12.5")
    assert resident.keep_alive(argparse.Namespace(keep_alive=None)) == 12.5
    assert resident.keep_alive(argparse.Namespace(keep_alive=3)) == 3.0  # the flag first
    monkeypatch.setenv("WREN_KEEP_ALIVE", "soon")
    with pytest.raises(WrenError, match="WREN_KEEP_ALIVE"):
        resident.keep_alive(argparse.Namespace(keep_alive=None))
    with pytest.raises(WrenError, match="0 or more"):
        resident.keep_alive(argparse.Namespace(keep_alive=-1))
    monkeypatch.delenv("WREN_KEEP_ALIVE")
    assert resident.keep_alive(argparse.Namespace(keep_alive=None)) is None


def test_an_open_windows_engine_answers_its_model_and_leaves_others_to_the_resident(tiny_home, tiny_model_dir):
    """What Wren's window does while it runs (terminal.resident_host.host_for_window), with a real engine here."""
    import asyncio

    from wren.engine.api import Engine
    from wren.engine.modelhub.registry import ModelRegistry

    ModelRegistry(tiny_home / "models").register_folder(tiny_model_dir, name="other")

    async def wren(*args: str) -> tuple[int, str, str]:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "wren.engine.terminal", *args, cwd=REPO, env=_env(), stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, err = await process.communicate()
        return process.returncode, out.decode(), err.decode()

    async def scenario() -> None:
        engine = Engine.open()
        await engine.models.load("tiny")
        stop = await host_for_window(engine)
        assert stop is not None
        try:
            code, out, err = await wren("ask", "--model", "tiny", "--json", "--max-tokens", "3", "hi")
            assert code == 0, err
            assert _events(out)[0]["model"] == "tiny" and _events(out)[-1]["type"] == "finished"
            code, out, err = await wren("resident", "--json")
            (window,) = [json.loads(line) for line in out.splitlines()]
            assert window["host"] == "window" and window["pid"] == os.getpid()  # this process answered
            # another model: the window keeps its own, and the resident engine answers
            code, out, err = await wren("ask", "--model", "other", "--json", "--max-tokens", "3", "hi")
            assert code == 0, err
            assert _events(out)[0]["model"] == "other"
            assert engine.models.current.name == "tiny"
            code, out, err = await wren("resident", "--json")
            hosts = {json.loads(line)["host"]: json.loads(line) for line in out.splitlines()}
            assert set(hosts) == {"window", "resident"} and hosts["resident"]["model"] == "other"
            # `wren resident stop` ends the resident engine and says the window's goes on
            code, out, err = await wren("resident", "stop")
            assert f"stopped the resident engine (pid {hosts['resident']['pid']})" in out
            assert "window" in err
        finally:
            await stop()
            await engine.close()

    asyncio.run(scenario())
    assert not resident.window_socket_path(tiny_home).exists()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_stopping_the_engine_while_it_compiles_leaves_nothing_behind(wren_home, starter_models_dir, monkeypatch):
    """The resident engine compiles the starter's decode step in a child while it answers;
    `wren resident stop` then ends both cleanly (the abort at exit this project once had)."""
    from tests.engine.test_cli_process import _children_compiling, _under

    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    (wren_home / "models").mkdir(exist_ok=True)
    (wren_home / "models" / "smollm2-135m-instruct").symlink_to(starter_models_dir / "smollm2-135m-instruct",
                                                               target_is_directory=True)
    env = _env(WREN_TORCH_COMPILE="auto")
    try:
        done = _wren("ask", "--max-tokens", "2", "hi", env=env)
        assert done.returncode == 0, done.stderr
        engine_pid = _status(env)["pid"]
        deadline = time.monotonic() + 60  # the child starts once torch's compiler has imported
        while not _children_compiling(engine_pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        children = _children_compiling(engine_pid)
        assert children, "the resident engine started no compiling child"
    finally:
        stopped = _wren("resident", "stop", env=env)
    assert f"pid {engine_pid}" in stopped.stdout
    deadline = time.monotonic() + 30
    while Path(f"/proc/{engine_pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not Path(f"/proc/{engine_pid}").exists()
    assert [p for p in _children_compiling() if _under(p, wren_home)] == []
    err = (wren_home / "logs" / "resident.err").read_text()
    assert "terminate called" not in err and "Traceback" not in err, err[-2000:]


def test_a_relative_data_folder_reaches_the_same_engine_and_data(tiny_home, tmp_path):
    relative = os.path.relpath(tiny_home, REPO)  # the CLI runs in REPO
    env = _env(WREN_HOME=relative)
    done = _ask("--json", "--max-tokens", "2", "hi", env=env)
    assert done.returncode == 0, done.stderr
    pid = _status(env)["pid"]
    assert _status()["pid"] == pid  # the same folder named absolutely: the same engine
    # the engine works from the home folder, yet stored the answer in this data folder
    listed = _wren("conversations", "list", "--json")
    assert len(listed.stdout.splitlines()) == 1


def test_a_socket_folder_left_open_is_closed_again(tiny_home):
    run = resident.socket_path(tiny_home).parent
    run.mkdir(parents=True, exist_ok=True)
    run.chmod(0o755)
    done = _ask("--max-tokens", "2", "hi")
    assert done.returncode == 0, done.stderr
    assert run.stat().st_mode & 0o777 == 0o700
    assert _status()["type"] == "status"


def test_a_socket_folder_of_another_user_is_refused_and_the_question_answered_here(tiny_home, monkeypatch, capsys):
    import argparse
    import asyncio
    import shutil

    monkeypatch.setattr(os, "getuid", lambda: 54321)  # every folder here is then someone else's
    folder = resident.socket_path(tiny_home).parent
    args = argparse.Namespace(keep_alive=None, json=False, approve=False)
    try:
        assert asyncio.run(resident.ask(args, AskRequest(text="hi", title="hi"))) is None  # the caller answers itself
    finally:
        if folder.name == "wren-54321":
            shutil.rmtree(folder, ignore_errors=True)
    err = capsys.readouterr().err
    assert "not private to this user" in err and "answering here" in err


def test_the_keep_alive_setting_applies_without_a_flag_or_variable(tiny_home):
    import asyncio

    from wren.engine.api import Engine

    async def set_it() -> None:
        engine = Engine.open()
        try:
            await engine.settings.set(resident.KEEP_ALIVE_SETTING, 42)
        finally:
            await engine.close()

    asyncio.run(set_it())
    env = _env()
    env.pop("WREN_KEEP_ALIVE")
    assert _ask("--max-tokens", "2", "hi", env=env).returncode == 0
    assert _status(env)["keep_alive"] == 42


def test_the_status_line_names_the_decode_mode_only_where_there_is_one():
    from wren.engine.terminal.resident import status_line

    local = {"pid": 7, "model": "starter", "backend": "torch-cpu", "decode_mode": "compiled", "answering": 1,
             "keep_alive": 300.0, "host": "resident"}
    assert status_line(local) == ("resident engine: pid 7, starter on torch-cpu (compiled), answering 1, "
                                  "ends after 300 s idle")
    remote = dict(local, model="mywren/starter", backend="remote", decode_mode=None)
    assert status_line(remote) == ("resident engine: pid 7, mywren/starter on remote, answering 1, "
                                   "ends after 300 s idle")
    assert status_line(dict(local, model=None, host="window")) == "Wren's window: pid 7, no model loaded yet, answering 1"


def test_wanted_follows_the_flag_then_the_variable_then_the_setting(wren_home, monkeypatch):
    import argparse

    from wren.engine.store import Store

    monkeypatch.delenv("WREN_KEEP_ALIVE", raising=False)
    args = argparse.Namespace(keep_alive=None, tools=None, tool_choice=None)
    assert resident.chosen_keep_alive(args) == resident.DEFAULT_KEEP_ALIVE and resident.wanted(args)
    store = Store(wren_home / "wren.sqlite3")
    store.set_setting(resident.KEEP_ALIVE_SETTING, 0)
    assert not resident.wanted(args)  # the setting alone: answered in the asking process
    store.set_setting(resident.KEEP_ALIVE_SETTING, "not a number")
    assert resident.chosen_keep_alive(args) == resident.DEFAULT_KEEP_ALIVE
    store.set_setting(resident.KEEP_ALIVE_SETTING, 0)
    monkeypatch.setenv("WREN_KEEP_ALIVE", "90")
    assert resident.chosen_keep_alive(args) == 90 and resident.wanted(args)  # the variable beats the setting
    assert not resident.wanted(argparse.Namespace(keep_alive=0.0, tools=None, tool_choice=None))  # the flag beats both
    store.close()
