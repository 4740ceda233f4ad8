"""The text of a `wren ask` question: attached files, standard input and the words.

They are put together in this order, each part separated by a blank line:

1. each `--file PATH`, in the order given, headed by its name and fenced;
2. standard input, when it is a pipe or a file (not a terminal), or when the only word is
   `-` (then even from a terminal, until Ctrl+D);
3. the words after `wren ask`, joined by spaces.

So `git diff | wren ask --file NOTES.md write the commit message` shows the model the
notes, then the diff, then the request. Empty parts are left out; nothing at all is an
error.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

from ..errors import InvalidRequest

MAX_FILE_BYTES = 1_000_000  # per file; a question is bounded by the model's context anyway
_SNIFF = 8192


def clean(text: str) -> str:
    """`text` with lone surrogates (bytes of a command-line argument that were not valid
    UTF-8, as os.fsdecode keeps them) replaced: U+FFFD for each such byte."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        pass
    try:  # the bytes as they came, decoded again with replacement
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    except UnicodeEncodeError:  # surrogates that never were bytes
        return "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in text)


def read_stdin() -> str:
    """Standard input as text; bytes that are not valid UTF-8 become U+FFFD."""
    buffer = getattr(sys.stdin, "buffer", None)
    if buffer is None:  # replaced by a text-only stream (tests, embedding)
        return clean(sys.stdin.read())
    return buffer.read().decode("utf-8", errors="replace")


def stdin_has_input() -> bool:
    """Whether standard input is something piped or redirected in (a pipe or a regular
    file), not a terminal nor an empty device nor a stand-in without a file."""
    stdin = sys.stdin
    if stdin is None:
        return False
    try:
        if stdin.isatty():
            return False
        mode = os.fstat(stdin.fileno()).st_mode
    except (AttributeError, ValueError, OSError):
        # A stream without a file (tests, embedding): readable means it was given.
        return _readable(stdin)
    return stat.S_ISFIFO(mode) or stat.S_ISREG(mode) or stat.S_ISSOCK(mode)


def _readable(stream) -> bool:
    try:
        return bool(stream.readable())
    except (AttributeError, ValueError, OSError):
        return False


def read_file(path_text: str, *, limit: int = MAX_FILE_BYTES) -> str:
    """A file's text for `--file`, or InvalidRequest saying plainly why not."""
    path = Path(path_text).expanduser()
    where = f"--file {path_text}"
    try:
        info = path.stat()
    except FileNotFoundError:
        raise InvalidRequest(f"{where}: no such file") from None
    except PermissionError:
        raise InvalidRequest(f"{where}: permission denied") from None
    except OSError as exc:
        raise InvalidRequest(f"{where}: {exc.strerror or exc}") from None
    if stat.S_ISDIR(info.st_mode):
        raise InvalidRequest(f"{where}: is a folder; attach the files in it one by one")
    if not stat.S_ISREG(info.st_mode):
        raise InvalidRequest(f"{where}: not a regular file")
    if info.st_size > limit:
        raise InvalidRequest(f"{where}: the file is {_size(info.st_size)}; --file takes up to {_size(limit)}")
    try:
        with path.open("rb") as f:
            data = f.read(limit + 1)
    except PermissionError:
        raise InvalidRequest(f"{where}: permission denied") from None
    except OSError as exc:
        raise InvalidRequest(f"{where}: cannot be read ({exc.strerror or exc})") from None
    if len(data) > limit:  # it grew since stat
        raise InvalidRequest(f"{where}: the file is over {_size(limit)}; --file takes up to {_size(limit)}")
    if b"\0" in data[:_SNIFF] or _mostly_not_utf8(data):
        raise InvalidRequest(f"{where}: not a text file (binary or not UTF-8); --file attaches text")
    return data.decode("utf-8-sig", errors="replace")


def _mostly_not_utf8(data: bytes) -> bool:
    """More than a stray bad byte in a hundred: binary or another encoding, not text."""
    try:
        data.decode("utf-8")
        return False
    except UnicodeDecodeError:
        pass
    text = data.decode("utf-8", errors="replace")
    bad = text.count("\ufffd") - data.count("\ufffd".encode())
    return bad * 100 > max(len(text), 1)


def _size(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 100_000 else f"{n / 1e3:.0f} kB" if n >= 1000 else f"{n} bytes"


def fenced(name: str, text: str) -> str:
    """A file's text under its name, in a fence longer than any backtick run inside it."""
    longest = run = 0
    for c in text:
        run = run + 1 if c == "`" else 0
        longest = max(longest, run)
    fence = "`" * max(3, longest + 1)
    body = text if text.endswith("\n") else text + "\n"
    return f"File {name}:\n{fence}\n{body}{fence}"


def question(words: list[str], files: list[str] | None = None) -> tuple[str, str]:
    """The question's full text and a short title for it, from files, stdin and words."""
    words = [clean(w) for w in words]
    wants_stdin = words == ["-"]  # `wren ask -`: standard input, even from a terminal
    if wants_stdin:
        words = []
    parts, names = [], []
    for name in files or []:
        parts.append(fenced(clean(name), read_file(name)))
        names.append(Path(name).name)
    piped = ""
    if wants_stdin or (not parts and not words) or stdin_has_input():
        if not wants_stdin and not parts and not words and (sys.stdin is None or sys.stdin.isatty()):
            raise InvalidRequest(
                "`wren ask` needs a question: as words after it, on standard input, or with --file"
            )
        piped = read_stdin()
        if piped.strip():
            parts.append(piped)
    spoken = " ".join(words)
    if spoken:
        parts.append(spoken)
    last = len(parts) - 1  # the last part is kept as it came; the others lose trailing newlines
    text = "\n\n".join(part if n == last else part.rstrip("\n") for n, part in enumerate(parts))
    title = " ".join((spoken or piped or " ".join(names)).split())[:60]
    return text, title
