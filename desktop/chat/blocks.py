"""Split streamed Markdown into prose paragraphs and fenced code blocks as text arrives.

The chat view shows every token at once but renders Markdown only for finished blocks, so a
block's rendering cost is paid once, not once per token. A line that might turn out to be a
fence is held back until its newline arrives, so fence markers never flash on screen.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_OPEN_FENCE = re.compile(r"^( {0,3})(`{3,}|~{3,})([^`]*)$")
_FENCE_PREFIX = re.compile(r"^ {0,3}(`{1,}|~{1,})?$")
# A paragraph is re-rendered at each of its line ends only up to this size; past it, once at
# its end, so one enormous paragraph cannot make streaming quadratic.
LIVE_RENDER_LINES = 40


@dataclass(frozen=True, slots=True)
class AppendProse:
    text: str  # raw Markdown of an unfinished paragraph, shown as plain text for now


@dataclass(frozen=True, slots=True)
class RenderProse:
    """Render `markdown` in place of everything shown since the paragraph began. Not final:
    the paragraph goes on (its complete lines are rendered, the next line follows raw)."""

    markdown: str
    final: bool


@dataclass(frozen=True, slots=True)
class OpenCode:
    language: str


@dataclass(frozen=True, slots=True)
class AppendCode:
    text: str


@dataclass(frozen=True, slots=True)
class CloseCode:
    code: str  # the whole block, fences and their indentation removed
    language: str


BlockOp = AppendProse | RenderProse | OpenCode | AppendCode | CloseCode


@dataclass
class _Fence:
    char: str
    length: int
    indent: int
    language: str


class BlockSplitter:
    """Feed text chunks, get display operations; `finish()` closes whatever is open."""

    def __init__(self) -> None:
        self._line = ""  # the current line, not yet shown (only while it may be a fence)
        self._shown_line = False  # part of the current line already went out as Append*
        self._prose: list[str] = []  # lines of the paragraph being streamed
        self._code: list[str] = []
        self._fence: _Fence | None = None

    def feed(self, text: str) -> list[BlockOp]:
        ops: list[BlockOp] = []
        while text:
            newline = text.find("\n")
            piece, text = (text, "") if newline < 0 else (text[: newline + 1], text[newline + 1 :])
            self._take(piece, ops)
        return ops

    def finish(self) -> list[BlockOp]:
        ops: list[BlockOp] = []
        if self._line:
            if self._fence is not None and self._is_closing(self._line):
                pass
            else:
                if not self._shown_line:
                    self._emit_partial(self._line, ops)
                self._end_line(self._line, ops)
            self._line, self._shown_line = "", False
        if self._fence is not None:
            ops.append(CloseCode("".join(self._code).removesuffix("\n"), self._fence.language))
            self._fence, self._code = None, []
        self._close_prose(ops)
        return ops

    def _take(self, piece: str, ops: list[BlockOp]) -> None:
        complete = piece.endswith("\n")
        if self._shown_line:
            # Past the point where this line could be a fence: stream it straight out.
            self._emit_partial(piece, ops)
            self._line += piece
            if complete:
                self._end_line(self._line, ops)
                self._line, self._shown_line = "", False
            return
        self._line += piece
        if complete:
            line = self._line
            self._line = ""
            if not self._fence_line(line.removesuffix("\n"), ops):
                self._emit_partial(line, ops)
                self._end_line(line, ops)
        elif not _FENCE_PREFIX.match(self._line) and not _OPEN_FENCE.match(self._line):
            self._emit_partial(self._line, ops)
            self._shown_line = True

    def _emit_partial(self, text: str, ops: list[BlockOp]) -> None:
        if self._fence is not None:
            ops.append(AppendCode(self._strip_indent(text) if not self._shown_line else text))
        elif self._prose or self._shown_line or text.strip():
            # Blank lines between paragraphs have nothing to show until text follows.
            ops.append(AppendProse(text))

    def _end_line(self, line: str, ops: list[BlockOp]) -> None:
        if self._fence is not None:
            self._code.append(self._strip_indent(line))
        elif line.strip():
            self._prose.append(line)
            if line.endswith("\n") and len(self._prose) <= LIVE_RENDER_LINES:
                ops.append(RenderProse("".join(self._prose).rstrip("\n"), final=False))
        else:
            self._close_prose(ops)

    def _fence_line(self, line: str, ops: list[BlockOp]) -> bool:
        """Handle a complete line that opens or closes a fence; False if it is neither."""
        if self._fence is not None:
            if not self._is_closing(line):
                return False
            ops.append(CloseCode("".join(self._code).removesuffix("\n"), self._fence.language))
            self._fence, self._code = None, []
            return True
        match = _OPEN_FENCE.match(line)
        if match is None or (match.group(2)[0] == "`" and "`" in match.group(3)):
            return False
        self._close_prose(ops)
        indent, marks, info = match.groups()
        language = info.strip().split()[0] if info.strip() else ""
        self._fence = _Fence(marks[0], len(marks), len(indent), language)
        ops.append(OpenCode(language))
        return True

    def _is_closing(self, line: str) -> bool:
        fence = self._fence
        stripped = line.strip()
        if fence is None or len(line) - len(line.lstrip(" ")) > 3:
            return False
        return bool(stripped) and set(stripped) == {fence.char} and len(stripped) >= fence.length

    def _strip_indent(self, text: str) -> str:
        indent = self._fence.indent if self._fence else 0
        if indent and text.startswith(" "):
            return text[min(indent, len(text) - len(text.lstrip(" "))) :]
        return text

    def _close_prose(self, ops: list[BlockOp]) -> None:
        if self._prose:
            ops.append(RenderProse("".join(self._prose).rstrip("\n"), final=True))
            self._prose = []


def split_blocks(text: str) -> list[BlockOp]:
    """The finished blocks of a whole text, without the intermediate Append operations."""
    splitter = BlockSplitter()
    ops = splitter.feed(text) + splitter.finish()
    return [op for op in ops if not isinstance(op, (AppendProse, AppendCode)) and getattr(op, "final", True)]



LINE_BREAK = "\u2028"  # a line break inside a paragraph (Qt's line separator)
_TABLE_DELIMITER = re.compile(r"^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$")
# A line that starts a block of its own: a list item, heading, quote, rule or setext underline.
_BLOCK_START = re.compile(r"^ {0,3}([-*+] |\d{1,9}[.)] |#{1,6}(\s|$)|>|([-*_=])(\s*\3)+\s*$)")


def hard_breaks(markdown: str) -> str:
    """A single newline in prose is a line break, as in chat apps (poems, addresses, sign-offs):
    two lines of one paragraph are joined by a line separator, which Markdown keeps as text and
    the document shows as a break without a paragraph's spacing. A newline before a line that
    starts a block (a list item, heading, quote, rule) stays, and tables and indented code keep
    their own rules; fenced code never reaches here."""
    lines = markdown.split("\n")
    table = any("|" in line and _TABLE_DELIMITER.match(line) for line in lines)
    out: list[str] = []
    code = True  # an indented code block can only open the paragraph text
    for i, line in enumerate(lines):
        code = code and (line.startswith(("    ", "\t")) or not line.strip())
        following = lines[i + 1] if i + 1 < len(lines) else ""
        joined = (
            line.strip() and following.strip() and not code
            and not (table and ("|" in line or "|" in following))
            and not _HEADING_OR_RULE.match(line)
            and not _BLOCK_START.match(following)
            and not following.startswith(("    ", "\t"))
            and not line.endswith(("  ", "\\"))
        )
        out.append(line + (LINE_BREAK if joined else "\n"))
    return "".join(out).removesuffix("\n")


_HEADING_OR_RULE = re.compile(r"^ {0,3}(#{1,6}(\s|$)|([-*_=])(\s*\3)+\s*$)")
