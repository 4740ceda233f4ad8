"""Settings → Privacy says plainly, with the lock on, whether MCP servers started by command
are kept off the network too, or the lock covers Wren's own process only (macOS, Windows:
the platform is faked, the check behind it is real)."""

from __future__ import annotations

import sys

import pytest

from wren.desktop.bridge import Tasks
from wren.desktop.settings.privacy import PrivacyPage
from wren.engine.network import lock, sandbox


@pytest.fixture
def fresh_probe():
    sandbox.namespace_prefix.cache_clear()
    yield
    sandbox.namespace_prefix.cache_clear()


def _page_with_the_lock_on(make_engine, arun, qtbot):
    """Settings → Privacy with the lock on, loaded; (engine, page)."""
    lock.set_offline(True)
    engine = make_engine()
    page = PrivacyPage(engine, Tasks())
    qtbot.addWidget(page)
    arun(page.network.load())
    return engine, page


@pytest.mark.parametrize("platform", ["darwin", "win32"])
def test_the_lock_note_says_it_covers_wrens_own_process_only(platform, make_engine, arun, qtbot, fresh_probe,
                                                             monkeypatch):
    monkeypatch.setattr(sys, "platform", platform)
    engine, page = _page_with_the_lock_on(make_engine, arun, qtbot)
    note = page.network.lock_note.text()
    assert note.startswith("On.") and "the lock covers Wren's own process only" in note, note
    assert "not kept off the network" in note
    lock.set_offline(False)
    arun(page.network.load())
    assert "own process" not in page.network.lock_note.text()
    arun(engine.close())


@pytest.mark.skipif(sandbox.namespace_prefix() is None, reason="this system cannot start a program without network")
def test_where_servers_run_without_network_the_note_says_so(make_engine, arun, qtbot, fresh_probe):
    engine, page = _page_with_the_lock_on(make_engine, arun, qtbot)
    note = page.network.lock_note.text()
    assert "run without network" in note and "own process only" not in note
    lock.set_offline(False)
    arun(engine.close())
