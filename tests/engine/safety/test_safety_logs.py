"""engine.logs: JSON lines, rotation, and nothing private ever reaching a log file."""

from __future__ import annotations

import io
import json
import logging
import zipfile

import pytest
from safety_samples import B64, URLSAFE, jwt, luhn_complete, pem, tok

from wren.engine import logs
from wren.engine.events import SafetyAction, SafetyNotice
from wren.engine.safety import Policy, scan

SECRETS = {
    "openai": f"sk-proj-{tok(156, URLSAFE)}",
    "github": f"ghp_{tok(36)}",
    "aws": f"AKIA{tok(16, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ234567')}",
    "aws_secret": tok(40, B64),
    "jwt": jwt(),
    "password": "Hunt3r!Xy9",
    "db_password": "pg-S3cret-77",
    "email": "jane.doe@corp-mail.net",
    "phone": "+44 20 7946 0958",
    "card": luhn_complete("4", 16),
    "iban": "DE89370400440532013000",
    "ssn": "536-22-1234",
    "blocked": "Falcon Heavy Lift",
}
PEM = pem("RSA ", lines=4)


@pytest.fixture
def log_home(tmp_path, monkeypatch):
    monkeypatch.setenv("WREN_HOME", str(tmp_path))
    policy = Policy.from_toml('[blocklist]\nwords = ["falcon heavy lift"]\n')
    path = logs.setup_logging(logging.DEBUG, policy=policy)
    yield path
    logs.close_logging()


def all_log_text(path) -> str:
    logs.close_logging()
    return "".join(p.read_text(encoding="utf-8") for p in sorted(path.parent.glob("wren.log*")))


def _fail_with(message: str):
    raise RuntimeError(message)


def test_events_are_json_lines_with_redacted_fields(log_home):
    s = SECRETS
    logs.log_event(
        "send.started",
        request_id="r1",
        conversation_id=7,
        model="smollm2-135m",
        backend="torch-cpu",
        prompt_tokens=12,
        ttft_ms=41.5,
        note=f"user pasted {s['openai']} and {s['github']}",
        headers={"Authorization": f"Bearer {s['jwt']}", "X-Key": s["aws"]},
        config_line=f"aws_secret_access_key = {s['aws_secret']}",
        dsn=f"postgres://app:{s['db_password']}@db.internal.io/app",
        contacts=[s["email"], s["phone"], s["card"], s["iban"], s["ssn"]],
        extra=f"password={s['password']}\n{PEM}",
        codename=s["blocked"],
    )
    lines = all_log_text(log_home).splitlines()
    record = json.loads(lines[-1])
    assert record["event"] == "send.started" and record["level"] == "INFO"
    assert record["prompt_tokens"] == 12 and record["conversation_id"] == 7
    assert record["model"] == "smollm2-135m"
    text = "\n".join(lines)
    for name, value in SECRETS.items():
        assert value not in text, name
    assert PEM.splitlines()[1] not in text
    assert "[REDACTED:secret.openai_key]" in record["note"]


def test_errors_and_tracebacks_are_redacted(log_home):
    s = SECRETS
    try:
        _fail_with(f"login failed for {s['email']} with token {s['github']} card {s['card']}")
    except RuntimeError as exc:
        logs.log_event("send.failed", level=logging.ERROR, request_id="r2", error=exc)
    try:
        _fail_with(f"bad key {s['openai']}")
    except RuntimeError:
        logging.getLogger("wren.engine.inference").exception("decode failed near %s", s["phone"])
    logging.getLogger("wren.store").warning("could not save for %s", s["ssn"])
    text = all_log_text(log_home)
    for name, value in SECRETS.items():
        assert value not in text, name
    records = [json.loads(line) for line in text.splitlines()]
    failed = next(r for r in records if r.get("event") == "send.failed")
    assert failed["error"]["type"] == "RuntimeError"
    assert "Traceback" in failed["error"]["traceback"] and "_fail_with" in failed["error"]["traceback"]
    assert "[REDACTED:pii.email]" in failed["error"]["message"]
    plain = next(r for r in records if r["logger"] == "wren.engine.inference")
    assert plain["message"] == "decode failed near [REDACTED:pii.phone]"
    assert "[REDACTED:secret.openai_key]" in plain["error"]["traceback"]


def test_safety_decisions_are_logged_without_the_matched_text(log_home):
    key = SECRETS["github"]
    result = scan(f"token {key}", Policy.from_toml('[actions]\nsecret = "block"'), "remote")
    notice = SafetyNotice("pii.email", SafetyAction.WARN, (3, 9), "email-address", "output")
    logs.log_event("safety.decided", findings=list(result.findings), notice=notice)
    record = json.loads(all_log_text(log_home).splitlines()[-1])
    assert record["findings"] == [
        {"category": "secret.github_token", "action": "block", "rule": "github-token",
         "span": [6, 6 + len(key)]}
    ]  # fmt: skip
    assert record["notice"]["action"] == "warn"
    assert "ghp_" not in json.dumps(record)  # not even the masked preview


@pytest.mark.parametrize(
    "fields",
    [
        {"prompt": "hi"}, {"text": "hi"}, {"content": "hi"}, {"answer": "hi"},
        {"user_message": "hi"}, {"system_prompt": "be nice"}, {"prompt_text": "x"},
        {"meta": {"nested": {"content": "hi"}}}, {"messages": []}, {"delta": "x"},
    ],
)  # fmt: skip
def test_conversation_text_fields_are_refused(log_home, fields):
    with pytest.raises(ValueError, match="never logged"):
        logs.log_event("send.started", **fields)
    assert all_log_text(log_home) == ""


def test_counts_about_text_are_fine(log_home):
    logs.log_event("send.done", prompt_tokens=3, answer_chars=10, message_id=4, content_type="md")
    record = json.loads(all_log_text(log_home))
    assert record["answer_chars"] == 10 and record["message_id"] == 4


def test_reserved_names_are_refused(log_home):
    with pytest.raises(ValueError, match="reserved"):
        logs.log_event("x", ts=1)


def test_logs_rotate_by_size(tmp_path, monkeypatch):
    monkeypatch.setenv("WREN_HOME", str(tmp_path))
    path = logs.setup_logging(max_bytes=2_000, backups=2)
    try:
        for i in range(200):
            logs.log_event("tick", i=i, note="x" * 50)
    finally:
        logs.close_logging()
    names = sorted(p.name for p in path.parent.glob("wren.log*"))
    assert names == ["wren.log", "wren.log.1", "wren.log.2"]
    assert all(p.stat().st_size <= 2_200 for p in path.parent.glob("wren.log*"))


def test_setup_twice_keeps_one_handler(log_home):
    logs.setup_logging()
    for name in logs.LOGGER_NAMES:
        handlers = logging.getLogger(name).handlers
        assert sum(h.get_name() == "wren-json" for h in handlers) == 1
    logs.log_event("once")
    assert all_log_text(log_home).count('"once"') == 1


def test_diagnostics_bundle(log_home):
    logs.log_event("send.failed", note=f"key {SECRETS['openai']}", request_id="r9")
    # Something else wrote to the folder unredacted; the bundle still hides it.
    (log_home.parent / "wren.log.1").write_text(f"stray {SECRETS['email']}\n", encoding="utf-8")
    bundle = zipfile.ZipFile(io.BytesIO(logs.diagnostics_bundle()))
    names = set(bundle.namelist())
    assert {"logs/wren.log", "logs/wren.log.1", "system.json"} <= names
    everything = "".join(bundle.read(n).decode("utf-8") for n in names)
    for value in SECRETS.values():
        assert value not in everything
    info = json.loads(bundle.read("system.json"))
    assert info["wren"] and info["python"] and "packages" in info
