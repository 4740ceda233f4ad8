"""`wren privacy …` as a user runs it, and the privacy report: written whole or not at all,
and a full disk (a real 64 KB tmpfs where the system lets a test mount one) says so."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from wren.engine.network import ledger, lock, report

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def wren(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "wren.engine.terminal", *args], capture_output=True, text=True,
                          timeout=120, env={**os.environ, **env}, cwd=REPO)


def _entry(n: int = 0) -> ledger.Entry:
    return ledger.Entry("remote provider", f"an answer from the remote model fake/m{n}", "connect", "127.0.0.1",
                        8000 + n, True, "allowed", process="window", sent=100, received=2000)


def test_wren_privacy_offline_and_ledger(wren_home):
    ledger.record(_entry())
    assert wren("privacy", "offline", "status").stdout.strip() == "offline lock: off"
    turned = wren("privacy", "offline", "on")
    assert turned.returncode == 0 and "offline lock: on" in turned.stdout and lock.state().on
    shown = wren("privacy", "ledger")
    assert shown.returncode == 0
    assert "Offline lock: on (setting)" in shown.stdout
    assert "127.0.0.1:8000 (loopback)  remote provider: an answer from the remote model fake/m0" in shown.stdout
    assert "sent 100 B, received 2,000 B" in shown.stdout
    as_json = json.loads(wren("privacy", "ledger", "--json").stdout)
    assert as_json["offline_lock"] == {"on": True, "source": "setting",
                                       "child_processes": report.children_note()}
    assert [e["port"] for e in as_json["entries"]] == [8000]
    assert wren("privacy", "offline", "off").returncode == 0 and not lock.state().on


def test_wren_privacy_offline_off_is_refused_while_the_environment_sets_it(wren_home):
    refused = wren("privacy", "offline", "off", WREN_OFFLINE="1")
    assert refused.returncode == 2
    assert "the offline lock is set by WREN_OFFLINE=1 in this environment" in refused.stderr
    assert wren("privacy", "offline", "status", WREN_OFFLINE="1").stdout.startswith(
        "offline lock: on (set by WREN_OFFLINE=1 in the environment)")


def test_the_report_is_json_or_text_by_its_name(wren_home, tmp_path):
    for n in range(3):
        ledger.record(_entry(n))
    done = wren("privacy", "report", str(tmp_path / "r.json"))
    assert done.returncode == 0 and "(3 entries)" in done.stdout
    body = json.loads((tmp_path / "r.json").read_text())
    assert body["summary"]["bytes_received"] == 6000 and body["summary"]["not_loopback"] == 0
    assert wren("privacy", "report", str(tmp_path / "r.txt")).returncode == 0
    text = (tmp_path / "r.txt").read_text()
    assert text.startswith("Wren privacy report") and "Entries: 3, not loopback: 0, refused: 0" in text
    assert oct((tmp_path / "r.txt").stat().st_mode & 0o777) == "0o600"


def test_a_failing_write_leaves_nothing_and_an_earlier_report_stands(wren_home, tmp_path, monkeypatch):
    ledger.record(_entry())
    target = tmp_path / "report.txt"
    target.write_text("the report from yesterday\n")

    def full(fd: int) -> None:  # the file layer says the disk is full when the data is flushed
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(report.ReportNotWritten, match=r"the disk holding .* is full \(the report needs"):
        report.export(target)
    assert target.read_text() == "the report from yesterday\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.txt", "wren-home"]


_FILL_AND_EXPORT = textwrap.dedent("""
    import os, sys
    from wren.engine.network import ledger, report
    folder = sys.argv[1]
    for n in range(50):
        ledger.record(ledger.Entry("model download", "model pull of acme/x", "connect", "127.0.0.1", n, True,
                                   "allowed"))
    try:  # take the tmpfs's last bytes
        with open(os.path.join(folder, "filler"), "wb") as out:
            while True:
                out.write(b"x" * 4096)
                out.flush()
    except OSError:
        pass
    try:
        report.export(os.path.join(folder, "report.json"))
    except report.ReportNotWritten as exc:
        print("REFUSED", exc)
    print("LEFT", sorted(os.listdir(folder)))
""")


def _mount_namespace() -> list[str] | None:
    unshare = shutil.which("unshare")
    if unshare is None or not sys.platform.startswith("linux"):
        return None
    for way in (["-m"], ["-r", "-m"]):
        probe = subprocess.run([unshare, *way, "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"],
                               capture_output=True)
        if probe.returncode == 0:
            return [unshare, *way]
    return None


def test_a_full_disk_gives_a_clear_error_on_a_real_tiny_filesystem(wren_home, tmp_path):
    prefix = _mount_namespace()
    if prefix is None:
        pytest.skip("this system does not let a test mount a tmpfs in a namespace of its own")
    small = tmp_path / "small"
    small.mkdir()
    script = f'mount -t tmpfs -o size=64k tmpfs "$1" && exec "{sys.executable}" -c "$2" "$1"'
    done = subprocess.run([*prefix, "sh", "-c", script, "sh", str(small), _FILL_AND_EXPORT], capture_output=True,
                          text=True, timeout=120, cwd=REPO, env={**os.environ, "WREN_HOME": str(wren_home)})
    assert done.returncode == 0, done.stderr
    assert "REFUSED the privacy report was not written: the disk holding" in done.stdout
    assert "is full (the report needs" in done.stdout
    assert "LEFT ['filler']" in done.stdout  # no half-written report, no temporary file


def test_erasing_all_data_empties_the_ledger_and_keeps_the_lock(wren_home):
    from wren.engine.privacy import erase_files

    ledger.record(_entry())
    lock.set_offline(True)
    removed = erase_files(models=False)
    assert str(ledger.folder()) in removed
    assert ledger.entries() == [] and lock.state().on  # erasing data does not open the machine to the network


def test_wren_models_pull_says_the_managed_lock_refused_it(wren_home):
    pulled = wren("models", "pull", "acme/tiny-GGUF", WREN_OFFLINE="1", HF_ENDPOINT="http://192.0.2.1:9")
    assert pulled.returncode == 2
    assert pulled.stderr.startswith("wren: Wren's offline lock is on (set by WREN_OFFLINE=1 in the environment): "
                                    "it refused to connect to 192.0.2.1:9 (model download: model pull of acme/tiny-GGUF)")
    assert "unset WREN_OFFLINE to connect" in pulled.stderr
    [refused] = ledger.entries()
    assert (refused.process, refused.outcome, refused.host) == ("wren models", "refused", "192.0.2.1")
    assert not (wren_home / "models").exists() or not any((wren_home / "models").iterdir())
