"""Text as it should be read aloud: Markdown's symbols are not spoken, code blocks are named
rather than spelled out, links read as their words, and an answer that streams in is cut into
sentences as soon as each one ends (so the first can be spoken before the answer is done)."""

from __future__ import annotations

import re

_FENCE = re.compile(r"^\s*(```|~~~)")
_FENCE_ANYWHERE = re.compile(r"^[ \t]*(```|~~~)", re.MULTILINE)
_URL = re.compile(r"https?://\S+")
_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_INLINE_CODE = re.compile(r"`([^`]*)`")
_EMPHASIS = re.compile(r"(\*{1,3}|_{1,3}|~~)(?=\S)(.+?)(?<=\S)\1")
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+")
_BULLET = re.compile(r"^\s*(?:[-*+•]|\d+[.)])\s+")
_QUOTE = re.compile(r"^\s*>+\s?")
_RULE = re.compile(r"^\s*([-*_])(\s*\1){2,}\s*$")
_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?\s*$")
_SENTENCE_END = re.compile(r"(?<=[.!?…])[\"')\]]*\s+|\n\s*\n|\n(?=\s*(?:[-*+•]|\d+[.)])\s)")


def speakable(markdown: str) -> str:
    """The words of `markdown` to speak, one line per block."""
    lines, in_code, code_said = [], False, False
    for raw in markdown.splitlines():
        if _FENCE.match(raw):
            in_code = not in_code
            if in_code and not code_said:
                lines.append("(There is a code block here; see the screen.)")
                code_said = True
            if not in_code:
                code_said = False
            continue
        if in_code or _RULE.match(raw) or _TABLE_RULE.match(raw):
            continue
        line = _QUOTE.sub("", raw)
        line = _HEADING.sub("", line)
        line = _BULLET.sub("", line)
        if line.strip().startswith("|"):
            line = ", ".join(cell.strip() for cell in line.strip().strip("|").split("|") if cell.strip())
        line = _LINK.sub(r"\1", line)
        line = _URL.sub("a link", line)
        line = _INLINE_CODE.sub(r"\1", line)
        line = _EMPHASIS.sub(r"\2", line)
        line = line.replace("*", "").replace("#", "").strip()
        if line:
            lines.append(line if line[-1] in ".!?:;," else line + ".")
    return "\n".join(lines)


def sentences(text: str) -> list[str]:
    """`text` cut into sentences (a blank line or a list item also ends one)."""
    return [s.strip() for s in _SENTENCE_END.split(text) if s and s.strip()]


class SentenceStream:
    """Sentences from an answer as it streams: feed() the deltas, get back each sentence
    that has ended; finish() gives the rest. Code blocks are held until they close, so a
    fence's inside is never spoken."""

    def __init__(self) -> None:
        self._pending = ""

    def feed(self, delta: str) -> list[str]:
        self._pending += delta
        cut = _last_end(self._pending)
        if cut is None:
            return []
        done, self._pending = self._pending[:cut], self._pending[cut:]
        return [s for s in sentences(speakable(done)) if any(c.isalnum() for c in s)]

    def finish(self) -> list[str]:
        rest, self._pending = self._pending, ""
        return [s for s in sentences(speakable(rest)) if any(c.isalnum() for c in s)]


def _last_end(text: str) -> int | None:
    """Where the text can be cut: after its last sentence end outside code blocks, or after
    a code block's closing fence, whichever comes later; an open block holds the rest."""
    blocks, start = [], None
    for match in _FENCE_ANYWHERE.finditer(text):
        if start is None:
            start = match.start()
        else:
            line_end = text.find("\n", match.end())
            blocks.append((start, len(text) if line_end < 0 else line_end + 1))
            start = None
    if start is not None:
        blocks.append((start, len(text) + 1))  # still open
    end = None
    for match in _SENTENCE_END.finditer(text):
        if not any(a <= match.start() < b for a, b in blocks):
            end = match.end()
    closed = [b for _, b in blocks if b <= len(text)]
    if closed and (end is None or closed[-1] > end):
        end = closed[-1]
    return end
