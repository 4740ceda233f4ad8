"""Local crash reports (engine/crashreport.py): no prompts, no secrets, no locals; private
files; faulthandler's dumps found at the next start; the `wren` command says where."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from wren.engine import crashreport as cr

ROOT = Path(__file__).resolve().parents[2]
SECRET = "sk-proj-Zq8xT1vB7nM4kL2pW9rYc3Hd6Fs0Ju5Ea1Gi"  # shaped like an OpenAI key
PROMPT = "Please summarise my diary: I met Alice Wendell at the clinic on Tuesday"


def _fail_with_prompt(prompt: str) -> None:
    memory_text = "Alice Wendell is allergic to penicillin"  # a local that must not be written
    raise ValueError(f"the model rejected {prompt!r} (key {SECRET}); memory {len(memory_text)} chars")


def _raised(fn, *args) -> BaseException:
    try:
        fn(*args)
    except BaseException as exc:  # the test wants whatever it raised
        return exc
    raise AssertionError("nothing was raised")


@pytest.fixture
def fresh_hooks(monkeypatch):
    """A clean hook state, put back afterwards (the hooks are process-wide). The hooks
    before ours only record (pytest's and pytest-qt's would fail the test)."""
    chained: list[str] = []
    monkeypatch.setattr(sys, "excepthook", lambda kind, value, tb: chained.append(f"sys {kind.__name__}"))
    monkeypatch.setattr(threading, "excepthook", lambda args: chained.append(f"thread {args.thread.name}"))
    monkeypatch.setattr(cr, "_state", cr._State())
    cr._state.chained = chained
    yield cr._state
    cr.uninstall_crash_hooks()


def test_report_holds_no_prompt_secret_or_locals_but_says_where(wren_home):
    path = cr.write_crash_report(_raised(_fail_with_prompt, PROMPT), program="wren")
    text = path.read_text(encoding="utf-8")
    for private in ("diary", "Alice", "Wendell", "penicillin", SECRET, "clinic"):
        assert private not in text
    assert "[REDACTED:secret" in text and "characters elided" in text
    assert "Kind: crash" in text and "Program: wren" in text and "Summary: ValueError" in text
    assert "Wren: " in text and "Python: " in text and "OS: " in text
    assert "in _fail_with_prompt" in text and "test_crashreport.py" in text  # where it happened
    assert "has not been sent anywhere" in text


def test_report_is_private_in_a_private_folder(wren_home):
    path = cr.write_crash_report(_raised(_fail_with_prompt, PROMPT))
    assert path.parent == wren_home / "crashes"
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.parent.stat().st_mode & 0o777 == 0o700


def test_scrub_keeps_what_helps_and_elides_what_reads_like_text():
    home = os.path.expanduser("~")
    message = (f"[Errno 2] No such file or directory: '{home}/.local/share/Wren/models/x/model.gguf'; "
               f"KeyError 'model'; bad reply \"The capital of France is Paris, as you asked\"")
    out = cr.scrub(message)
    assert "'~/.local/share/Wren/models/x/model.gguf'" in out and home not in out
    assert "'model'" in out  # a short key stays: it says what went wrong
    assert "Paris" not in out and '"…" (44 characters elided)' in out
    assert cr.scrub("x" * 1000).endswith("(600 characters cut)")
    assert cr.scrub("write to jane.doe@example.com failed") == "write to [REDACTED:pii.email] failed"


def test_a_chain_is_written_oldest_first_with_every_message_scrubbed(wren_home):
    def outer():
        try:
            _fail_with_prompt(PROMPT)
        except ValueError as exc:
            raise RuntimeError(f"turn failed for {PROMPT!r}") from exc

    text = cr.write_crash_report(_raised(outer)).read_text(encoding="utf-8")
    assert "Alice" not in text and SECRET not in text
    first, cause_line, second = text.index("ValueError:"), text.index("direct cause"), text.index("RuntimeError:")
    assert first < cause_line < second
    assert "Summary: RuntimeError" in text


def test_old_reports_are_pruned(wren_home, monkeypatch):
    monkeypatch.setattr(cr, "KEEP_REPORTS", 3)
    exc = _raised(_fail_with_prompt, PROMPT)
    for _ in range(5):
        cr.write_crash_report(exc)
    assert len(list((wren_home / "crashes").glob("crash-*.txt"))) == 3


def test_pending_reports_are_announced_once(wren_home, fresh_hooks):
    older = cr.write_crash_report(_raised(_fail_with_prompt, PROMPT), kind=cr.ERROR, program="wren-desktop")
    os.utime(older, (1_000_000_000, 1_000_000_000))  # from an earlier run
    fresh_hooks.started = older.stat().st_mtime + 60  # this process started after it
    mine = cr.write_crash_report(_raised(_fail_with_prompt, PROMPT))  # this run's: not "last time"
    pending = cr.pending_crash_reports()
    assert [r.path for r in pending] == [older]
    assert pending[0].kind == cr.ERROR and pending[0].program == "wren-desktop" and not pending[0].crashed
    cr.mark_crash_reports_seen(pending)
    assert cr.pending_crash_reports() == []
    assert (wren_home / "crashes" / cr.SEEN_FILE).stat().st_mode & 0o777 == 0o600
    assert mine.is_file()


def test_hooks_write_reports_for_the_main_thread_threads_and_asyncio(wren_home, fresh_hooks, capsys, caplog):
    previous_hooks = sys.excepthook, threading.excepthook
    cr.install_crash_hooks("wren-desktop", fatal_excepthook=False, versions=lambda: {"Qt": "6.test"})
    exc = _raised(_fail_with_prompt, PROMPT)
    sys.excepthook(type(exc), exc, exc.__traceback__)

    worker = threading.Thread(target=_fail_with_prompt, args=(PROMPT,), name="model-loader")
    worker.start()
    worker.join()

    async def main():
        asyncio.get_running_loop().set_exception_handler(cr.asyncio_exception_handler)
        asyncio.get_running_loop().call_soon(_fail_with_prompt, PROMPT)
        await asyncio.sleep(0.01)

    with caplog.at_level(logging.CRITICAL, logger="asyncio"):  # asyncio's own message: expected
        asyncio.run(main())
    reports = sorted((wren_home / "crashes").glob("crash-*.txt"))
    texts = [p.read_text(encoding="utf-8") for p in reports]
    assert len(texts) == 3
    wheres = {line for t in texts for line in t.splitlines() if line.startswith("Where: ")}
    assert wheres == {"Where: an event handler", "Where: thread model-loader", "Where: an asyncio task or callback"}
    assert all("Kind: error" in t and "Qt: 6.test" in t and "Alice" not in t for t in texts)
    assert capsys.readouterr().err.count("a crash report was saved at") == 3
    fault_logs = list((wren_home / "crashes").glob("fault-*.log"))
    assert [p.name for p in fault_logs] == [f"fault-{os.getpid()}.log"]
    assert fresh_hooks.chained == ["sys ValueError", "thread model-loader"]  # the usual printing still happens
    cr.uninstall_crash_hooks()
    assert (sys.excepthook, threading.excepthook) == previous_hooks
    assert not fault_logs[0].exists()  # no fatal error: nothing to report


def test_hooks_stop_after_a_few_reports(wren_home, fresh_hooks, capsys):
    cr.install_crash_hooks("wren")
    exc = _raised(_fail_with_prompt, PROMPT)
    for _ in range(cr.MAX_PER_PROCESS + 3):
        sys.excepthook(type(exc), exc, exc.__traceback__)
    assert len(list((wren_home / "crashes").glob("crash-*.txt"))) == cr.MAX_PER_PROCESS
    assert "Kind: crash" in next((wren_home / "crashes").glob("crash-*.txt")).read_text(encoding="utf-8")
    capsys.readouterr()


def _child(code: str, home: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "WREN_HOME": str(home), "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(signal, "SIGSEGV") or os.name == "nt", reason="needs POSIX signals")
def test_a_fatal_error_in_another_process_is_found_at_the_next_start(wren_home, fresh_hooks):
    done = _child("""
        import faulthandler
        from wren.engine.crashreport import install_crash_hooks
        install_crash_hooks("wren")
        faulthandler._sigsegv()
    """, wren_home)
    assert done.returncode == -signal.SIGSEGV, done.stderr
    (fault_log,) = (wren_home / "crashes").glob("fault-*.log")  # the dump, until a start collects it
    crashed_at = fault_log.stat().st_mtime
    cr.install_crash_hooks("wren")  # the next start, a second later: its own hooks collect the dump
    pending = cr.pending_crash_reports()
    assert len(pending) == 1 and pending[0].crashed and pending[0].program == "wren"
    text = pending[0].path.read_text(encoding="utf-8")
    assert "Segmentation fault" in text and "Where: a fatal error (faulthandler)" in text
    assert os.path.expanduser("~") not in text
    assert pending[0].path.stat().st_mode & 0o777 == 0o600
    assert pending[0].when == pytest.approx(crashed_at) and pending[0].path.stem.endswith(fault_log.stem[6:])
    assert [p.name for p in (wren_home / "crashes").glob("fault-*")] == [f"fault-{os.getpid()}.log"]  # ours only


def test_a_dead_process_with_our_pid_is_still_reported(wren_home, fresh_hooks):
    """In a sandbox each start can get the same pid: its fault log is collected before
    ours takes the name."""
    folder = cr.crash_reports_dir()
    dump = f"{cr.FAULT_HEADER} {{}}\nFatal Python error: Aborted\n\nCurrent thread (most recent call first):\n"
    (folder / f"fault-{os.getpid()}.log").write_text(dump, encoding="utf-8")
    os.utime(folder / f"fault-{os.getpid()}.log", (1_000_000_000, 1_000_000_000))
    cr.install_crash_hooks("wren-desktop")
    (report,) = cr.pending_crash_reports()
    assert report.summary == "Fatal Python error: Aborted" and report.crashed
    assert (folder / f"fault-{os.getpid()}.log").read_text(encoding="utf-8").count("\n") == 1  # ours, empty


@pytest.mark.slow
def test_a_normal_exit_leaves_nothing(wren_home, fresh_hooks):
    done = _child("""
        from wren.engine.crashreport import install_crash_hooks
        install_crash_hooks("wren")
    """, wren_home)
    assert done.returncode == 0, done.stderr
    assert list((wren_home / "crashes").iterdir()) == []


def test_the_wren_command_prints_where_the_report_is(wren_home, monkeypatch, capsys):
    from wren.engine.terminal import main as cli

    def broken(args):
        raise RuntimeError(f"unexpected state while listing {PROMPT!r}")

    monkeypatch.setattr(cli, "_cmd_conversations", broken)
    assert cli.main(["conversations", "list"]) == 1
    err = capsys.readouterr().err
    assert "RuntimeError" in err and "a crash report was saved at" in err
    (report,) = (wren_home / "crashes").glob("crash-*.txt")
    assert str(report) in err
    text = report.read_text(encoding="utf-8")
    assert "Where: wren conversations" in text and "Alice" not in text


@pytest.mark.slow
def test_wren_help_and_version_write_nothing_to_the_data_folder(tmp_path):
    """The hooks go in after the arguments are read: `wren --help`, `--version` and a usage
    error leave a fresh machine's data folder unmade."""
    home = tmp_path / "fresh-machine-data"
    for args in (["--help"], ["--version"], ["no-such-command"]):
        done = _child(f"import sys; from wren.engine.terminal.main import main; sys.argv = ['wren', *{args!r}]; sys.exit(main())",
                      home)
        assert done.returncode in (0, 2), (args, done.stderr)
    assert not home.exists()
