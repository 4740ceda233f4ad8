"""`wren chat` on a real terminal (a pseudo-terminal), answered by the scripted backend:
line editing and history through readline, commands, several lines, and escapes."""

from __future__ import annotations

import os
import select
import stat
import subprocess
import sys
import time

import pytest

from tests.engine.cli.conftest import LAUNCHER, REPO, child_env

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(sys.platform == "win32", reason="pseudo-terminals are POSIX"),
]
ESC = "\x1b"


class Terminal:
    """A child process on a pseudo-terminal: `send` types, `expect` waits for output."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        import pty  # POSIX only

        master, slave = pty.openpty()
        self.fd = master
        self.process = subprocess.Popen(args, stdin=slave, stdout=slave, stderr=slave, cwd=REPO, env=env,
                                        start_new_session=True, close_fds=True)
        os.close(slave)
        self.seen = ""

    def send(self, text: str) -> None:
        os.write(self.fd, text.encode())

    def _read(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return False
        try:
            data = os.read(self.fd, 65536)
        except OSError:  # the child closed the terminal
            return False
        if not data:
            return False
        self.seen += data.decode("utf-8", errors="replace").replace("\r\n", "\n")
        return True

    def expect(self, text: str, timeout: float = 60) -> str:
        """Wait until `text` appears after what earlier calls consumed; returns what came before."""
        deadline = time.monotonic() + timeout
        while text not in self.seen:
            if time.monotonic() > deadline or (not self._read(0.2) and self.process.poll() is not None):
                raise AssertionError(f"{text!r} did not appear (exit status {self.process.poll()}); the terminal shows:\n{self.seen[-2000:]!r}")
        before, _, self.seen = self.seen.partition(text)
        return before

    def finish(self, timeout: float = 30) -> int:
        deadline = time.monotonic() + timeout
        while self.process.poll() is None and time.monotonic() < deadline:
            self._read(0.1)
        while self._read(0.05):
            pass
        code = self.process.wait(timeout=1)
        os.close(self.fd)
        return code

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


@pytest.fixture
def terminal(tiny_chosen, tmp_path):
    inputrc = tmp_path / "inputrc"
    inputrc.write_text("set enable-bracketed-paste off\n")
    started = []

    def start(*args: str, command: str = "chat", **env: str) -> Terminal:
        t = Terminal([sys.executable, str(LAUNCHER), command, *args],
                     child_env(TERM="xterm", INPUTRC=str(inputrc), WREN_TEST_CTTY="1", **env))
        started.append(t)
        return t

    yield start
    for t in started:
        t.kill()


def test_chat_commands_lines_and_history(terminal, wren_home):
    t = terminal()
    t.expect(">>> ")
    t.send("hello there\r")
    t.expect("echo: hello there")
    t.expect(">>> ")
    t.send("/nope\r")
    t.expect("unknown command /nope")
    t.expect(">>> ")
    t.send('"""\r')
    t.expect("... ")
    t.send("line one\r")
    t.expect("... ")
    t.send('line two"""\r')
    t.expect("echo: line one\nline two")
    t.expect(">>> ")
    # Ctrl+C at the prompt drops the line, and the chat goes on (a Ctrl+C while readline is
    # still taking keys: test_ctrl_c_while_readline_is_busy_with_keys_is_acted_on).
    t.send("typed but dropped")
    t.expect("typed but dropped")
    t.send("\x03")
    t.expect("(Ctrl+D or /bye quits)")
    t.expect(">>> ")
    t.send("world\x01hello \r")  # Ctrl+A: to the start of the line
    t.expect("echo: hello world")
    t.expect(">>> ")
    t.send("/help\r")
    before = t.expect(">>> ")
    assert "/system" in before and "/set" in before and "/bye" in before
    t.send("/bye\r")
    assert t.finish() == 0
    assert "echo: /nope" not in t.seen and "echo: typed but dropped" not in t.seen

    history = wren_home / "chat_history"
    assert stat.S_IMODE(history.stat().st_mode) == 0o600  # questions are private
    assert "hello there" in history.read_text()

    again = terminal()
    again.expect(">>> ")
    again.send("\x12hello th")  # Ctrl+R: search the history of the last session
    again.expect("hello there")
    again.send("\r")
    again.expect("echo: hello there")
    again.expect(">>> ")
    again.send("\x04")  # Ctrl+D quits
    assert again.finish() == 0


def test_ctrl_c_while_readline_is_busy_with_keys_is_acted_on(terminal):
    """Ctrl+C a moment after the keys, while readline is still taking them one by one and
    not waiting in select(), the only place CPython's readline looks for a signal: a press
    then was noticed only at the next key (under load, a Ctrl+C typed right after the line
    showed met the same: the clean-clone runs)."""
    t = terminal()
    t.expect(">>> ")
    for attempt in range(12):
        t.send("x" * 600)
        time.sleep(0.001 * (attempt % 4))
        t.send("\x03")
        t.expect("(Ctrl+D or /bye quits)", timeout=10)
        t.expect(">>> ")
    t.send("kept\r")
    t.expect("echo: kept")
    t.expect(">>> ")
    t.send("/bye\r")
    assert t.finish() == 0
    assert "echo: x" not in t.seen


def test_answers_on_a_terminal_cannot_drive_it(terminal):
    hostile = f"safe {ESC}[31mred{ESC}[0m {ESC}]0;pwned\x07{ESC}]52;c;aGk=\x07\x9b2J done. "
    t = terminal(WREN_TEST_REPLY=hostile)
    t.expect(">>> ")
    t.send("hi\r")
    answer = t.expect(">>> ")
    assert "safe red  done. echo: hi" in answer
    assert f"{ESC}[31m" not in answer and f"{ESC}]" not in answer and "\x9b" not in answer
    assert "pwned" not in answer
    t.send("/bye\r")
    assert t.finish() == 0


def test_no_save_keeps_no_history_and_no_conversation(terminal, wren_home):
    import sqlite3

    t = terminal("--no-save")
    t.expect(">>> ")
    t.send("a private line\r")
    t.expect("echo: a private line")
    t.expect(">>> ")
    t.send("/bye\r")
    assert t.finish() == 0
    assert not (wren_home / "chat_history").exists()
    con = sqlite3.connect(wren_home / "wren.sqlite3")
    try:
        assert con.execute("SELECT count(*) FROM conversation").fetchone() == (0,)
    finally:
        con.close()


def test_ctrl_c_stops_an_answer_and_the_chat_goes_on(terminal):
    t = terminal(WREN_TEST_REPLY="word " * 400, WREN_TEST_DELAY="0.02")
    t.expect(">>> ")
    t.send("go on\r")
    t.expect("word word word")
    t.send("\x03")
    answer = t.expect("[stopped]", timeout=20)
    assert answer.count("word") < 400
    t.expect(">>> ")
    t.send("/bye\r")
    assert t.finish() == 0


@pytest.mark.parametrize("after", [0.0, 0.05, 0.3])
def test_ctrl_c_right_after_enter_stops_the_answer_it_asked_for(terminal, after):
    """A press from Enter on, before the answer's first token (its prompt still being read,
    or the question not yet handed to the model), stops that answer: it was lost (the whole
    answer streamed) or, landing before the answer's handler was set, interrupted the main
    thread wherever it was, and the process aborted as it exited."""
    t = terminal(WREN_TEST_REPLY="word " * 150, WREN_TEST_DELAY="0.02", WREN_TEST_PREFILL_DELAY="1.0")
    t.expect(">>> ")
    t.send("go on\r")
    # readline has taken Enter (its new line is echoed): the press is not one at the prompt.
    # "go on" alone is echoed before Enter is read, and a press then drops the line, rightly.
    t.expect("go on\n")
    time.sleep(after)
    t.send("\x03")
    answer = t.expect("[stopped]", timeout=30)
    assert answer.count("word") < 20, answer[-500:]
    t.expect(">>> ")
    t.send("hello\r")  # the chat goes on, and the next answer is whole
    t.expect("echo: hello", timeout=30)
    t.expect(">>> ")
    t.send("/bye\r")
    assert t.finish() == 0


def test_ctrl_c_while_the_model_loads_ends_the_chat_cleanly(terminal, wren_home):
    """Ctrl+C while the model loads: the load is let finish and go, and the chat ends as a
    Ctrl+C ends a command (130), with no traceback and no crash report. It aborted the process
    ("terminate called without an active exception"), left a traceback, or wrote a crash
    report (the load's result set on a cancelled future), by when the press landed."""
    t = terminal(WREN_TEST_LOAD_DELAY="1.5")
    t.expect("Loading the model")
    time.sleep(0.5)
    t.send("\x03")
    assert t.finish() == 130
    assert "Traceback" not in t.seen and "terminate called" not in t.seen and "crash report" not in t.seen, t.seen
    crashes = wren_home / "crashes"
    assert not (crashes.is_dir() and any(crashes.glob("crash-*"))), list(crashes.iterdir())


def test_a_broken_policy_file_is_said_when_the_chat_starts(terminal, wren_home):
    (wren_home / "safety").mkdir(exist_ok=True)
    (wren_home / "safety" / "policy.toml").write_text('[blocklist]\nwords = ["pineapple"\n')
    t = terminal("--no-save")
    said = t.expect(">>> ")
    assert "wren: safety policy: " in said and "using the shipped safety policy" in said, said
    t.send("/bye\r")
    assert t.finish() == 0


def test_ask_on_a_terminal_is_cleaned_and_to_a_pipe_is_not(terminal):
    hostile = f"safe {ESC}[31mred{ESC}[0m {ESC}]0;pwned\x07{ESC}[2J\x9b1;1H done. "
    t = terminal("--no-save", "hi", command="ask", WREN_TEST_REPLY=hostile)
    assert t.finish() == 0
    assert "safe red  done. echo: hi" in t.seen
    assert "pwned" not in t.seen and f"{ESC}[2J" not in t.seen and "\x9b" not in t.seen

    piped = subprocess.run([sys.executable, str(LAUNCHER), "ask", "--no-save", "hi"], check=False, cwd=REPO,
                           env=child_env(WREN_TEST_REPLY=hostile), stdin=subprocess.DEVNULL,
                           capture_output=True, timeout=120)
    assert piped.returncode == 0, piped.stderr.decode(errors="replace")
    assert piped.stdout.decode() == hostile + "echo: hi\n"  # a pipe gets what the model wrote


def _sigint_blocked(status_path: str) -> bool:
    fields = dict(line.split(":", 1) for line in open(status_path).read().splitlines() if ":" in line)
    return bool(int(fields["SigBlk"].strip(), 16) & (1 << (2 - 1)))  # bit 0 is signal 1; SIGINT is 2


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads each thread's signal mask from /proc")
def test_at_the_prompt_only_the_routers_thread_takes_ctrl_c(terminal):
    """Linux hands a terminal's Ctrl+C to any thread that does not block it, and Python's
    handler then cannot wake a main thread waiting in readline: at the prompt Ctrl+C did
    nothing, now and then (the engine's threads, numpy's BLAS pool). Every thread must block
    it, whichever made it and when, the main one too: the router's thread takes it and nudges
    the main thread until readline has raised (engine/terminal/sigint.py)."""
    t = terminal()
    t.expect(">>> ")
    t.send("hello there\r")
    t.expect("echo: hello there")
    t.expect(">>> ")
    folder = f"/proc/{t.process.pid}/task"
    tasks = sorted(os.listdir(folder), key=int)
    assert len(tasks) > 3  # the engine's threads are there (the database, the worker, ...)
    # The router's thread waits for the signal in sigtimedwait, which shows it unblocked
    # while it waits: it takes the signal by design.
    waiting = [tid for tid in tasks if "sigtimedwait" in open(f"{folder}/{tid}/wchan").read()]
    assert len(waiting) <= 1
    unblocked = [tid for tid in tasks if tid not in waiting and not _sigint_blocked(f"{folder}/{tid}/status")]
    assert len(waiting) == 1 and unblocked == []  # the router alone takes it, even at the prompt
    t.send("typed")
    t.expect("typed")
    t.send("\x03")
    t.expect("(Ctrl+D or /bye quits)")
    t.expect(">>> ")
    t.send("/bye\r")
    assert t.finish() == 0

