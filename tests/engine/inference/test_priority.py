"""Compute threads run a few nice levels below the rest (engine/inference/priority.py): the
inference thread lowers itself before loading, so the thread pools it creates inherit it;
other threads keep their priority; WREN_COMPUTE_NICE sets or turns it off."""

from __future__ import annotations

import os
import sys
import threading

import pytest

from tests.fixtures.hash_model import HashBackend
from wren.engine.inference import priority
from wren.engine.inference.worker import ModelWorker
from wren.engine.tokenize import Tokenizer

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a thread's own nice value is Linux's")


def _nice() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


def _in_thread(fn):
    out = {}
    thread = threading.Thread(target=lambda: out.update(value=fn(), nice=_nice()))
    thread.start()
    thread.join()
    return out


@pytest.mark.parametrize("raw,want", [("", priority.DEFAULT_LEVELS), ("0", 0), ("3", 3), ("40", 19), ("-2", 0),
                                      ("high", priority.DEFAULT_LEVELS)])
def test_levels_from_the_environment(monkeypatch, raw, want):
    monkeypatch.setenv(priority.ENV, raw)
    assert priority.levels() == want


@linux
def test_only_the_calling_thread_is_lowered(monkeypatch):
    monkeypatch.setenv(priority.ENV, "3")
    before = _nice()
    got = _in_thread(priority.lower_this_thread)
    assert got["value"] == got["nice"] == min(19, before + 3)
    assert _nice() == before  # this thread, and so the event loop's, untouched
    child = _in_thread(lambda: _in_thread(lambda: None)["nice"] if priority.lower_this_thread() is not None else None)
    assert child["value"] == min(19, before + 3)  # a thread it starts (a torch pool's) inherits it


@linux
def test_off_leaves_the_thread_alone(monkeypatch):
    monkeypatch.setenv(priority.ENV, "0")
    got = _in_thread(priority.lower_this_thread)
    assert got["value"] is None and got["nice"] == _nice()


class _Recording(HashBackend):
    def load(self, model_dir, **kwargs):
        self.load_nice = _nice()
        return super().load(model_dir, **kwargs)


@linux
def test_the_inference_thread_loads_and_runs_below_the_caller(monkeypatch, tiny_model_dir):
    monkeypatch.setenv(priority.ENV, "4")
    backend = _Recording()
    worker = ModelWorker("nice", backend, tiny_model_dir, Tokenizer.from_dir(tiny_model_dir))
    try:
        worker.loaded.result(timeout=30)
        assert backend.load_nice == min(19, _nice() + 4)
    finally:
        worker.close()


@linux
def test_a_thread_sets_its_own_nice_value():
    got = _in_thread(lambda: priority.set_this_thread_nice(min(19, _nice() + 7)))
    assert got["value"] == got["nice"] == min(19, _nice() + 7)
