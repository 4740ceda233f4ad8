"""What a crash report says (engine/crashreport.py writes it): the exception chain as Python
prints it, every message scrubbed (`scrub`: home paths as ~, text-like quoted strings
elided, secrets and personal data masked, a length cap), and the versions it ran on.

Nothing here imports Qt or torch; the safety scanner is imported only when a message is scrubbed.
"""

from __future__ import annotations

import os
import re
import sys
import time
import traceback
from types import TracebackType

MAX_MESSAGE_CHARS = 400
MAX_CHAIN = 8  # causes and contexts followed per report

_QUOTED = re.compile(r"""(?P<q>['"])(?P<body>(?:\\.|(?!(?P=q))[^\\\n])*)(?P=q)""")
_FOOTER = ("This report was written on this computer and has not been sent anywhere. It holds "
           "no prompts, answers or memories: no local variables, and error messages are redacted.")


# -- redaction --------------------------------------------------------------------------------

def _home_prefixes() -> list[str]:
    found = []
    for home in (os.path.expanduser("~"), os.path.realpath(os.path.expanduser("~"))):
        if home and home not in ("/", "~") and home not in found:
            found.append(home)
    return sorted(found, key=len, reverse=True)


def scrub_paths(text: str) -> str:
    """Paths under the home folder, as `~/...`."""
    for home in _home_prefixes():
        text = text.replace(home, "~")
    return text


def _elide(match: re.Match) -> str:
    body = match.group("body")
    if " " in body or len(body) > 80:
        q = match.group("q")
        return f"{q}…{q} ({len(body)} characters elided)"
    return match.group(0)


def scrub(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """An exception message fit for a report: home paths as ~, text-like quoted strings
    elided, secrets and personal data masked, at most `limit` characters."""
    text = scrub_paths(str(text))
    text = _QUOTED.sub(_elide, text)
    try:
        from .safety import redact

        text = redact(text)
    except Exception:  # the scanner itself failed: nothing unscanned goes in
        return "(message withheld: it could not be scanned for secrets)"
    if len(text) > limit:
        text = text[:limit] + f"… ({len(text) - limit} characters cut)"
    return text


# -- formatting ---------------------------------------------------------------------------------

def _frames(tb: TracebackType | None) -> list[str]:
    # capture_locals stays off: no value of any variable reaches a report
    out = []
    for frame in traceback.extract_tb(tb):
        out.append(f'  File "{scrub_paths(frame.filename)}", line {frame.lineno}, in {frame.name}\n')
        if frame.line:
            out.append(f"    {frame.line.strip()}\n")
    return out


def _exception_lines(exc: BaseException) -> list[str]:
    """The chain, oldest first, as Python prints it, with every message scrubbed."""
    chain: list[tuple[BaseException, str]] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    link = ""
    while current is not None and id(current) not in seen and len(chain) < MAX_CHAIN:
        seen.add(id(current))
        chain.append((current, link))
        if current.__cause__ is not None:
            current, link = current.__cause__, "\nThe above exception was the direct cause of the following exception:\n\n"
        elif current.__context__ is not None and not current.__suppress_context__:
            current, link = current.__context__, "\nDuring handling of the above exception, another exception occurred:\n\n"
        else:
            current = None
    lines: list[str] = []
    for item, link in reversed(chain):  # oldest first; `link` leads to the newer one
        if item.__traceback__ is not None:
            lines.append("Traceback (most recent call last):\n")
            lines += _frames(item.__traceback__)
        message = str(item) if _safe_str(item) else "(its message could not be read)"
        lines.append(f"{_summary(item)}: {scrub(message)}\n" if message else f"{_summary(item)}\n")
        for note in getattr(item, "__notes__", None) or ():
            lines.append(f"{scrub(str(note))}\n")
        if isinstance(item, BaseExceptionGroup):
            for n, sub in enumerate(item.exceptions[:MAX_CHAIN], 1):
                lines.append(f"+-- sub-exception {n} --\n")
                lines += ["  " + line for line in "".join(_exception_lines(sub)).splitlines(keepends=True)]
        if link:
            lines.append(link)
    return lines


def _safe_str(exc: BaseException) -> bool:
    try:
        str(exc)
        return True
    except Exception:
        return False


def _versions(extra: dict[str, str] | None) -> list[str]:
    try:
        from .logs import system_info

        info = system_info()
    except Exception:
        import platform

        from . import __version__

        info = {"wren": __version__, "python": sys.version.split()[0], "implementation": platform.python_implementation(),
                "platform": platform.platform(terse=True), "packages": {}}
    lines = [
        f"Wren: {info.get('wren')}",
        f"Python: {info.get('python')} ({info.get('implementation', '')})",
        f"OS: {info.get('platform')} ({info.get('machine', '')})",
    ]
    for key, value in (extra or {}).items():
        lines.append(f"{key}: {value}")
    packages = info.get("packages") or {}
    if packages:
        lines.append("Packages: " + ", ".join(f"{k} {v}" for k, v in sorted(packages.items())))
    return lines


def format_report(exc: BaseException | None, *, kind: str, program: str, where: str = "",
                  versions: dict[str, str] | None = None, body: str | None = None,
                  when: float | None = None) -> str:
    """The report's text: a header of `Key: value` lines, then the traceback (or `body`,
    a fatal error's dump, scrubbed of home paths and secrets)."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(time.time() if when is None else when))
    summary = _summary(exc) if exc is not None else _fault_summary(body or "")
    header = [
        "Wren crash report",
        f"Kind: {kind}",
        f"Program: {program}",
        f"When: {stamp}",
        f"Summary: {summary}",
    ]
    if where:
        header.append(f"Where: {where}")
    header += _versions(versions)
    if exc is not None:
        text = "".join(_exception_lines(exc))
    else:
        text = _scrub_dump(body or "")
    return "\n".join(header) + "\n\n" + text.rstrip("\n") + "\n\n" + _FOOTER + "\n"


def _summary(exc: BaseException) -> str:
    return (type(exc).__module__ + "." + type(exc).__qualname__).removeprefix("builtins.")


def _fault_summary(dump: str) -> str:
    for line in dump.splitlines():
        if line.strip():
            return scrub_paths(line.strip())[:120]
    return "a fatal error"


def _scrub_dump(dump: str) -> str:
    """faulthandler's output holds file and function names only; paths and anything
    secret-looking are still masked."""
    text = scrub_paths(dump)
    try:
        from .safety import redact

        return redact(text)
    except Exception:
        return text
