"""Words for progress the front ends show: how far the model is in reading a long prompt.

`format_prefill_progress` is the CLI's line; `PrefillLine` writes it to a terminal in
place (carriage return, no new line) and wipes it before the answer starts.
"""

from __future__ import annotations

from typing import TextIO


def format_prefill_progress(done: int, total: int) -> str:
    """"reading the prompt: 1,024/4,289 tokens" for PrefillProgress(done, total)."""
    _check(done, total)
    return f"reading the prompt: {done:,}/{total:,} tokens"


def _check(done: int, total: int) -> None:
    if isinstance(done, bool) or isinstance(total, bool) or not isinstance(done, int) or not isinstance(total, int):
        raise TypeError(f"done and total must be token counts (ints), got {done!r} and {total!r}")
    if total < 1 or not 0 <= done <= total:
        raise ValueError(f"progress must satisfy 0 <= done <= total and total >= 1, got {done}/{total}")


class PrefillLine:
    """One status line on a stream (stderr), rewritten in place while a prompt is read.

    On a terminal each update overwrites the last (`\\r`, then the new text, then erase to
    the end of the line); `clear()` wipes it, so the answer starts on a clean line. On
    anything else (a pipe, a log file) nothing is written: no stray carriage returns."""

    def __init__(self, stream: TextIO, tty: bool | None = None) -> None:
        self.stream = stream
        if tty is None:
            isatty = getattr(stream, "isatty", None)
            tty = bool(isatty and isatty())
        self.tty = tty
        self.shown = False

    def update(self, done: int, total: int) -> None:
        text = format_prefill_progress(done, total)
        if not self.tty:
            return
        self.stream.write(f"\r{text}\x1b[K")
        self.stream.flush()
        self.shown = True

    def clear(self) -> None:
        """Remove the line if one is shown (call before the first answer text, and at the end)."""
        if self.shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self.shown = False
