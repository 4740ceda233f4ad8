"""`wren scan`, called in-process through an argparse parser built here."""

from __future__ import annotations

import argparse
import io
import json

import pytest
from safety_samples import tok

from wren.engine.terminal import safety as cli


@pytest.fixture
def run(tmp_path, monkeypatch):
    monkeypatch.setenv("WREN_HOME", str(tmp_path))
    parser = argparse.ArgumentParser(prog="wren")
    cli.register(parser.add_subparsers(dest="command", required=True))

    def invoke(*argv: str) -> int:
        args = parser.parse_args(list(argv))
        return args.func(args)

    return invoke


def test_findings_one_per_line(run, capsys):
    key = f"ghp_{tok(36)}"
    text = f"token {key} and mail ann@corp-mail.net"
    assert run("scan", "--destination", "remote", text) == cli.EXIT_OK
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    category, action, span, rule, preview = lines[0].split("\t")
    assert (category, action, span, rule) == (
        "secret.github_token", "warn", f"6-{6 + len(key)}", "github-token",
    )  # fmt: skip
    assert key not in "\n".join(lines) and preview.startswith("ghp_…")
    assert lines[1].startswith("pii.email\twarn\t")


def test_json_lines(run, capsys):
    assert run("scan", "--json", "call +44 20 7946 0958 or AKIAIOSFODNN7EXAMPLE") == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["category"], r["action"]) for r in records] == [
        ("pii.phone", "allow"), ("secret.aws_access_key", "allow"),
    ]  # fmt: skip
    assert records[1]["allowed_by"] is None  # allowed locally by its category, not a rule
    assert records[0]["span"] == [5, 21]


def test_blocked_text_exits_1_and_reads_stdin(run, capsys, monkeypatch, tmp_path):
    (tmp_path / "safety").mkdir()
    (tmp_path / "safety" / "policy.toml").write_text('[blocklist]\nwords = ["falcon"]\n')
    monkeypatch.setattr("sys.stdin", io.StringIO("the Falcon plan\n"))
    assert run("scan", "-") == cli.EXIT_BLOCKED
    out = capsys.readouterr().out
    assert out == "user.blocklist\tblock\t4-10\tblocklist:words\t… (6 chars)\n"


def test_clean_text_prints_nothing(run, capsys):
    assert run("scan", "hello there") == 0
    assert capsys.readouterr().out == ""


def test_broken_user_policy_is_reported_on_stderr(run, capsys, tmp_path):
    (tmp_path / "safety").mkdir()
    (tmp_path / "safety" / "policy.toml").write_text('[actions]\nsecret = "blokc"\n')
    assert run("scan", "x") == 0
    err = capsys.readouterr().err
    assert "line 2" in err and "blokc" in err and "shipped" in err


def test_bad_destination_is_a_usage_error(run):
    with pytest.raises(SystemExit) as exc:
        run("scan", "--destination", "cloud", "x")
    assert exc.value.code == 2
