"""Structured JSON-lines logs in logs_dir(), rotated by size, that never hold what they guard.

Logged: event names and metadata (ids, model, backend, token counts, timings), safety
decisions as category/action/rule/span, and errors with their tracebacks. Every string
on its way to disk, including exception messages and tracebacks, goes through
`engine.safety.redact`, which masks secrets, personal data and block-listed words.

Never logged: prompts, answers or any other conversation text. `log_event` refuses fields
named like that (prompt, text, content, answer, message, ...; see FORBIDDEN_WORDS) with a
ValueError, also inside nested dicts; counts such as prompt_tokens or answer_chars are
fine. Plain `logging` calls from the `wren` and `engine` loggers land in the same file and
are redacted too, but their message is free text: put no conversation text in it.
"""

from __future__ import annotations

import dataclasses
import enum
import io
import json
import logging
import logging.handlers
import math
import platform
import sys
import time
import traceback
import zipfile
from importlib import metadata
from pathlib import Path

from .paths import logs_dir
from .safety import Policy, redact

LOG_FILE = "wren.log"
MAX_BYTES = 5 * 1024 * 1024
BACKUPS = 5
LOGGER_NAMES = ("wren",)  # every module logs as wren.engine.x / wren.desktop.x (getLogger(__name__))
EVENTS = logging.getLogger("wren.events")

# A field whose name has one of these words carries conversation text...
FORBIDDEN_WORDS = frozenset(
    ["prompt", "prompts", "text", "content", "contents", "answer", "answers", "message", "messages", "completion", "completions", "delta", "deltas", "draft", "reply", "response", "body", "transcript", "conversation", "history", "input", "output", "query"]
)
# ...unless it ends with one of these, which make it a number or an id about that text.
SAFE_SUFFIXES = frozenset(
    ["tokens", "token", "chars", "count", "len", "length", "id", "ids", "ms", "seconds", "s", "bytes", "kind", "type"]
)
RESERVED = frozenset({"ts", "level", "logger", "event"})
PACKAGES = (
    "torch", "mlx", "mlx-lm", "tokenizers", "peewee", "PySide6-Essentials", "qasync",
    "numpy", "gguf", "safetensors", "jinja2", "keyring", "platformdirs",
)  # fmt: skip


def refused_field(name: str) -> bool:
    parts = str(name).lower().replace("-", "_").split("_")
    return any(p in FORBIDDEN_WORDS for p in parts) and parts[-1] not in SAFE_SUFFIXES


def _check_names(fields: dict, where: str = "") -> None:
    for key, value in fields.items():
        if refused_field(key):
            raise ValueError(
                f"log field {where}{key!r} looks like conversation text; prompts and answers "
                "are never logged (log a count or an id instead, e.g. prompt_tokens)"
            )
        if isinstance(value, dict):
            _check_names(value, f"{where}{key}.")


def log_event(name: str, /, *, level: int = logging.INFO, **fields) -> None:
    """Write one event: `name` plus JSON-ready fields, every string redacted on the way.

    An exception value (e.g. error=exc) is written as its type, message and traceback.
    Raises ValueError for a field that would carry prompts or answers, or for a reserved
    name (ts, level, logger, event).
    """
    clash = RESERVED & fields.keys()
    if clash:
        raise ValueError(f"log field name {sorted(clash)[0]!r} is reserved")
    _check_names(fields)
    if EVENTS.isEnabledFor(level):
        EVENTS.log(level, name, extra={"wren_fields": fields})


class JsonFormatter(logging.Formatter):
    """One JSON object per line; every string passes through `redact` here, at the last
    moment, so nothing reaches the file unredacted whichever way it was logged."""

    def __init__(self, policy: Policy | None = None) -> None:
        super().__init__()
        self._policy = policy

    def format(self, record: logging.LogRecord) -> str:
        out: dict = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
        }
        fields = getattr(record, "wren_fields", None)
        if fields is not None:
            out["event"] = self._clean(record.msg)
            out.update(self._clean(fields))
        else:
            out["message"] = self._clean(record.getMessage())
        if record.exc_info and record.exc_info[1] is not None:
            out["error"] = self._clean(record.exc_info[1])
        return json.dumps(out, ensure_ascii=False)

    def _clean(self, value):
        if value is None or isinstance(value, (bool, int)):
            return value
        if isinstance(value, float):
            return value if math.isfinite(value) else str(value)
        if isinstance(value, str):
            return redact(value, self._policy)
        if isinstance(value, enum.Enum):
            return self._clean(value.value)
        if isinstance(value, BaseException):
            return {
                "type": type(value).__qualname__,
                "message": self._clean(str(value)),
                "traceback": self._clean("".join(traceback.format_exception(value))),
            }
        if all(hasattr(value, a) for a in ("category", "action", "rule", "span")):
            # A safety finding or notice: the decision, never the matched text or preview.
            return {a: self._clean(getattr(value, a)) for a in ("category", "action", "rule")} | {
                "span": list(value.span)
            }
        if isinstance(value, dict):
            return {self._clean(str(k)): self._clean(v) for k, v in value.items()}
        if isinstance(value, (list, tuple, set, frozenset)):
            return [self._clean(v) for v in value]
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return self._clean(dataclasses.asdict(value))
        return self._clean(str(value))


def setup_logging(
    level: int = logging.INFO,
    *,
    policy: Policy | None = None,
    max_bytes: int = MAX_BYTES,
    backups: int = BACKUPS,
) -> Path:
    """Send the `wren` and `engine` loggers to <logs dir>/wren.log; safe to call again
    (the previous handler is closed). `policy` adds the user's block list to redaction."""
    path = logs_dir() / LOG_FILE
    handler = _PrivateFileHandler(
        path, maxBytes=max_bytes, backupCount=backups, encoding="utf-8", delay=True
    )
    handler.setFormatter(JsonFormatter(policy))
    handler.set_name("wren-json")
    close_logging()
    for name in LOGGER_NAMES:
        logger = logging.getLogger(name)
        logger.addHandler(handler)
        logger.setLevel(level)
        logger.propagate = False  # keep records away from handlers that do not redact
    return path


class _PrivateFileHandler(logging.handlers.RotatingFileHandler):
    """Log files readable by the user alone (0600), rotated ones included."""

    def _open(self):
        from .paths import private_file

        private_file(Path(self.baseFilename))
        return super()._open()


def close_logging() -> None:
    """Detach and close Wren's log file handler, e.g. before the logs folder is moved."""
    seen = set()
    for name in LOGGER_NAMES:
        logger = logging.getLogger(name)
        for handler in list(logger.handlers):
            if handler.get_name() == "wren-json":
                logger.removeHandler(handler)
                if id(handler) not in seen:
                    seen.add(id(handler))
                    handler.close()


def system_info() -> dict:
    """Versions and platform, nothing that names the user or the machine."""
    from . import __version__

    packages = {}
    for name in PACKAGES:
        try:
            packages[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return {
        "wren": __version__,
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "platform": platform.platform(terse=True),
        "system": platform.system(),
        "machine": platform.machine(),
        "packages": packages,
    }


def diagnostics_bundle() -> bytes:
    """A zip of the (redacted) logs and system.json, for Settings -> Diagnostics.

    The logs were redacted when written; they are redacted again here in case anything
    else wrote to the folder.
    """
    for name in LOGGER_NAMES:
        for handler in logging.getLogger(name).handlers:
            handler.flush()
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as bundle:
        for path in sorted(logs_dir().glob(LOG_FILE + "*")):
            try:
                text = path.read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            bundle.writestr(f"logs/{path.name}", redact(text))
        bundle.writestr("system.json", json.dumps(system_info(), indent=2))
    return out.getvalue()
