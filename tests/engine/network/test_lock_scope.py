"""Where the offline lock cannot keep child processes off the network (macOS, Windows, a
Linux without `unshare` or user namespaces), `wren privacy offline on`, the report and an
MCP server's start say plainly that it covers Wren's own process only; where it can, they
say the servers run without network. The platform is faked; the check behind it is real."""

from __future__ import annotations

import sys

import pytest

from tests.engine.network.conftest import entries
from wren.engine.network import report, sandbox

OWN_ONLY = "covers Wren's own process only"


@pytest.fixture
def fresh_probe():
    sandbox.namespace_prefix.cache_clear()
    yield
    sandbox.namespace_prefix.cache_clear()  # the real platform's answer again for later tests


def _offline_on(capsys) -> str:
    from wren.engine.terminal.main import main

    assert main(["privacy", "offline", "on"]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("platform", ["darwin", "win32"])
def test_without_namespaces_offline_on_says_the_lock_covers_wrens_process_only(
        platform, guarded, fresh_probe, monkeypatch, capsys):
    monkeypatch.setattr(sys, "platform", platform)
    said = _offline_on(capsys)
    assert "offline lock: on" in said
    assert f"child processes: the lock {OWN_ONLY}" in said and "not kept off the network" in said
    assert report.build()["offline_lock"]["child_processes"].startswith(f"the lock {OWN_ONLY}")
    started = sandbox.launch("notes", "notes-server", ["--stdio"])
    assert (started.command, started.args) == ("notes-server", ["--stdio"])  # run as it is, and said so
    assert started.note is not None and OWN_ONLY in started.note and "'notes' can connect" in started.note
    (recorded,) = [e for e in entries() if e.kind == "child process"]
    assert (recorded.part, recorded.outcome) == ("MCP server", "not isolated") and OWN_ONLY in recorded.reason


def test_a_linux_without_unshare_says_the_same(guarded, fresh_probe, monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setenv("PATH", str(tmp_path))  # no unshare here
    assert OWN_ONLY in _offline_on(capsys)


@pytest.mark.skipif(sandbox.namespace_prefix() is None, reason="this system cannot start a program without network")
def test_with_namespaces_offline_on_says_the_servers_run_without_network(guarded, fresh_probe, capsys):
    said = _offline_on(capsys)
    assert "child processes: MCP servers Wren starts by command run without network" in said
    assert OWN_ONLY not in said
