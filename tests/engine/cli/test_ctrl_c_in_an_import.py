"""Ctrl+C that lands inside a compiled module's import comes back from it as an ImportError
("initialization failed", caused by the KeyboardInterrupt). `wren chat --voice` pressed just as
listening began (onnxruntime loading) crashed with a traceback and a crash report; it is a
stop like any other Ctrl+C."""

from __future__ import annotations

import pytest

from wren.engine.terminal import main as wren_main
from wren.engine.terminal.sigint import caused_by_ctrl_c, ctrl_c_kept


def _import_interrupted() -> ImportError:
    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as pressed:
            raise ImportError("initialization failed") from pressed
    except ImportError as exc:
        return exc


def _wrapped_twice() -> RuntimeError:
    try:
        try:
            raise _import_interrupted()
        except ImportError:
            raise RuntimeError("the voice model could not load")  # noqa: B904  (implicit context)
    except RuntimeError as exc:
        return exc


def test_the_cause_is_found_through_causes_and_contexts():
    assert caused_by_ctrl_c(_import_interrupted())
    assert caused_by_ctrl_c(_wrapped_twice())
    assert not caused_by_ctrl_c(ImportError("no module named nothing"))
    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise ValueError("a different error, its context cut") from None
    except ValueError as cut:
        assert not caused_by_ctrl_c(cut)


def test_ctrl_c_kept_raises_the_interrupt_and_lets_other_errors_pass():
    with pytest.raises(KeyboardInterrupt), ctrl_c_kept():
        raise _import_interrupted()
    with pytest.raises(ImportError, match="no module"), ctrl_c_kept():
        raise ImportError("no module named nothing")


def test_a_command_interrupted_in_an_import_ends_as_stopped_not_as_a_crash(wren_home, monkeypatch, capsys):
    def interrupted(args):
        raise _import_interrupted()

    monkeypatch.setattr(wren_main, "_cmd_conversations", interrupted)
    assert wren_main.main(["conversations", "list"]) == 130
    err = capsys.readouterr().err
    assert "Traceback" not in err and "crash report" not in err
    assert not list(wren_home.glob("crashes/crash-*.txt"))

    def broken(args):
        raise ImportError("no module named nothing")

    monkeypatch.setattr(wren_main, "_cmd_conversations", broken)  # the control: a real failure is still one
    assert wren_main.main(["conversations", "list"]) == 1
