"""One loopback rule (engine/loopback.py) for both guards that relax on loopback: `wren serve`
without --allow-remote, and a remote provider's base URL over plain http.

Before, each guard had its own function: the server's took only "localhost" in lower case,
the providers' also "LOCALHOST", "*.localhost" and "localhost.localdomain". The cases where
they disagreed are DISAGREED below; both guards now answer them the same way.
"""

from __future__ import annotations

import pytest

from wren.engine.inference.backends.remote import check_base_url
from wren.engine.loopback import is_loopback
from wren.engine.server import keys
from wren.engine.server.hosts import is_loopback as server_is_loopback
from wren.engine.terminal.main import main

LOOPBACK = [
    "127.0.0.1", "127.0.0.2", "127.255.255.254", "127.1.2.3",
    "::1", "[::1]", "0:0:0:0:0:0:0:1", "::1%lo",
    "::ffff:127.0.0.1", "[::ffff:127.0.0.1]", "::ffff:7f00:1",  # IPv4-mapped 127.x
    "localhost", "LOCALHOST", "LocalHost",
]
NOT_LOOPBACK = [
    "", "0.0.0.0", "::", "[::]", "128.0.0.1", "126.255.255.255", "10.0.0.1", "192.168.1.5",
    "::2", "::ffff:10.0.0.1", "::ffff:0.0.0.0", "fe80::1",
    "127.1", "2130706433", "0x7f000001",  # inet_aton spellings: not an address in text form
    "foo.localhost", "api.localhost", "localhost.localdomain", "localhost.", "localhost.example.com",
    "mylocalhost", "127.0.0.1.nip.io", "example.org", " 127.0.0.1", "[::1", "::1]",
]
# Where the two old functions answered differently (server: False, providers: True).
DISAGREED = {"LOCALHOST": True, "LocalHost": True, "foo.localhost": False, "api.localhost": False,
             "localhost.localdomain": False}


@pytest.mark.parametrize("host", LOOPBACK)
def test_loopback(host):
    assert is_loopback(host)


@pytest.mark.parametrize("host", NOT_LOOPBACK)
def test_not_loopback(host):
    assert not is_loopback(host)


def test_none_is_not_loopback():
    assert not is_loopback(None)


def test_the_server_uses_the_one_rule():
    assert server_is_loopback is is_loopback


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


@pytest.mark.parametrize("host, expected", sorted(DISAGREED.items()))
def test_plain_http_to_a_provider_follows_the_rule(host, expected):
    url = f"http://{_url_host(host)}:8000/v1"
    if expected:
        assert check_base_url(url) == url
    else:
        with pytest.raises(ValueError, match="plain http:// to another machine"):
            check_base_url(url)
    assert check_base_url(url, allow_http=True) == url  # the user's confirmation always works


@pytest.mark.parametrize("host", ["::ffff:127.0.0.1", "127.9.9.9", "::1"])
def test_plain_http_to_a_loopback_literal_needs_no_confirmation(host):
    url = f"http://[{host}]:8000/v1" if ":" in host else f"http://{host}:8000/v1"
    assert check_base_url(url) == url


@pytest.mark.parametrize("host, expected", sorted({**DISAGREED, "::ffff:127.0.0.1": True, "0.0.0.0": False}.items()))
def test_wren_serve_follows_the_rule(host, expected, monkeypatch, capsys):
    """`wren serve --host H --show-key` gets past the loopback guard (prints the key) only
    for a loopback H; any other H needs --allow-remote."""
    monkeypatch.setenv(keys.ENV_KEY, "k" * 32)
    code = main(["serve", "--host", host, "--show-key"])
    out = capsys.readouterr()
    if expected:
        assert (code, out.out.strip()) == (0, "k" * 32), out.err
    else:
        assert code == 2 and "--allow-remote" in out.err
        assert main(["serve", "--host", host, "--allow-remote", "--show-key"]) == 0
