"""What the terminal front end prints: untrusted text made safe for a terminal.

A model's answer (or a document it repeats, or a title it made) is untrusted text. Written
to a terminal as it is, an escape sequence in it can recolour or clear the screen, move
the cursor over what was shown, set the window title, write to the clipboard (OSC 52) or
make a link that lies about where it goes (OSC 8). So on a terminal every control
character other than newline and tab is removed, and an escape sequence goes whole (its
parameters do not show up as litter). Output to a pipe or a file is left exactly as it
came: that is where the raw text is wanted, and `wren ask ... | cat -v` shows it.

Nothing here imports more than the standard library: `wren ask` starts fast.
"""

from __future__ import annotations

import sys
from typing import TextIO

_ESC, _BEL = "\x1b", "\x07"
# C1 controls that open a control string (DCS, SOS, OSC, PM, APC); ST (U+009C) ends one.
_C1_STRINGS = {"\x90", "\x98", "\x9d", "\x9e", "\x9f"}
_C1_CSI, _C1_ST = "\x9b", "\x9c"
_KEPT = {"\n", "\t"}

_GROUND, _ESCAPE, _ESCAPE_INTERMEDIATE, _CSI, _STRING, _STRING_ESCAPE = range(6)


def is_control(c: str) -> bool:
    """C0 (U+0000–U+001F), DEL and C1 (U+0080–U+009F)."""
    code = ord(c)
    return code < 0x20 or 0x7F <= code <= 0x9F


class TerminalFilter:
    """Removes control characters and whole escape sequences from streamed text.

    `feed` takes the text piece by piece (an answer's deltas) and keeps its state between
    pieces, so a sequence split over two deltas is still removed whole. A control string
    (OSC, DCS, …) ends at BEL or ST as a terminal ends it, and also at a newline, so an
    unterminated one hides at most the rest of its line."""

    def __init__(self) -> None:
        self._state = _GROUND

    def feed(self, text: str) -> str:
        if self._state == _GROUND and not any(is_control(c) and c not in _KEPT for c in text):
            return text  # the usual case: nothing to do
        out: list[str] = []
        for c in text:
            self._step(c, out)
        return "".join(out)

    def _step(self, c: str, out: list[str]) -> None:
        if self._state == _GROUND:
            self._ground(c, out)
        elif self._state == _ESCAPE:
            self._escape(c, out)
        elif self._state == _ESCAPE_INTERMEDIATE:
            self._escape_intermediate(c, out)
        elif self._state == _CSI:
            self._csi(c, out)
        elif self._state == _STRING:
            self._string(c, out)
        else:
            self._string_escape(c, out)

    def _ground(self, c: str, out: list[str]) -> None:
        if not is_control(c) or c in _KEPT:
            out.append(c)
        elif c == _ESC:
            self._state = _ESCAPE
        elif c == _C1_CSI:
            self._state = _CSI
        elif c in _C1_STRINGS:
            self._state = _STRING
        # any other control character is dropped

    def _escape(self, c: str, out: list[str]) -> None:
        if c == "[":
            self._state = _CSI
        elif c in "]PX^_":
            self._state = _STRING
        elif "\x20" <= c <= "\x2f":  # intermediates: ESC ( B and the like
            self._state = _ESCAPE_INTERMEDIATE
        elif "\x30" <= c <= "\x7e":  # a two-character sequence ends here
            self._state = _GROUND
        elif c == _ESC:
            pass
        else:  # not a sequence after all: the character counts on its own
            self._state = _GROUND
            self._step(c, out)

    def _escape_intermediate(self, c: str, out: list[str]) -> None:
        if "\x20" <= c <= "\x2f":
            return
        self._state = _GROUND
        if not "\x30" <= c <= "\x7e":
            self._step(c, out)

    def _csi(self, c: str, out: list[str]) -> None:
        if "\x20" <= c <= "\x3f":  # parameters and intermediates
            return
        self._state = _GROUND
        if not "\x40" <= c <= "\x7e":  # anything but a final byte cuts it short
            self._step(c, out)

    def _string(self, c: str, out: list[str]) -> None:
        if c in (_BEL, _C1_ST):
            self._state = _GROUND
        elif c == _ESC:
            self._state = _STRING_ESCAPE
        elif c == "\n":
            self._state = _GROUND
            out.append(c)

    def _string_escape(self, c: str, out: list[str]) -> None:
        self._state = _GROUND
        if c != "\\":  # ESC that is not ST starts a new sequence
            self._state = _ESCAPE
            self._step(c, out)

    def reset(self) -> None:
        """Forget a sequence left open (at the end of an answer)."""
        self._state = _GROUND


def clean(text: str) -> str:
    """`text` with its control characters and escape sequences removed, in one piece."""
    return TerminalFilter().feed(text)


def is_terminal(stream: TextIO | None) -> bool:
    try:
        return bool(stream is not None and stream.isatty())
    except (AttributeError, ValueError, OSError):  # closed, or not a stream
        return False


class Output:
    """Writes to `stream`, through a TerminalFilter when it is a terminal. One per stream
    and answer: the filter's state carries over between writes."""

    def __init__(self, stream: TextIO | None = None, *, raw: bool | None = None) -> None:
        self.stream = stream if stream is not None else sys.stdout
        self.raw = (not is_terminal(self.stream)) if raw is None else raw
        self._filter = None if self.raw else TerminalFilter()

    def text(self, text: str) -> str:
        """What would be written for `text`."""
        return text if self._filter is None else self._filter.feed(text)

    def write(self, text: str, *, flush: bool = True) -> None:
        self.stream.write(self.text(text))
        if flush:
            self.stream.flush()

    def line(self, text: str = "") -> None:
        self.write(text + "\n")

    def end(self) -> None:
        """An answer ended: a sequence it left open does not swallow what comes next."""
        if self._filter is not None:
            self._filter.reset()


def shown(text: str, stream: TextIO | None = None) -> str:
    """`text` as it may be printed on `stream` (default stdout): cleaned on a terminal."""
    return clean(text) if is_terminal(stream if stream is not None else sys.stdout) else text


DIM, NORMAL = "\x1b[2m", "\x1b[0m"


class ThinkingLines:
    """A thinking model's thinking on standard output: dimmed, before the answer, on a
    terminal only (piped output holds the answer alone; --json gives the thinking as
    reasoning events). Its text goes through the terminal filter like the answer's."""

    def __init__(self, out: Output, *, shown: bool = True) -> None:
        self.out = out
        self.shown = shown
        self.open = False  # thinking printed, the answer not yet begun

    def write(self, text: str) -> None:
        if not self.shown or self.out.raw:
            return
        if not self.open:
            self.out.stream.write(DIM)
            self.open = True
            text = text.lstrip("\n")
        self.out.stream.write(self.out.text(text))
        self.out.stream.flush()

    def end(self) -> None:
        """The thinking is over: normal text again, a blank line before the answer."""
        if self.open:
            self.out.end()
            self.out.stream.write(NORMAL + "\n\n")
            self.out.stream.flush()
            self.open = False


def length_note(message_id: int | None) -> str:
    """What is said of an answer that ran into its token limit (it ends mid-sentence and
    looked finished), with how to go on."""
    more = f"; `wren continue {message_id}` goes on" if message_id is not None else ""
    return f"wren: note: the answer reached its length limit (max_tokens){more}"
