"""A model's thinking split from its answer as the text streams: `<think>…</think>` before
the answer (Qwen3, the DeepSeek-R1 distills, SmolLM3, Phi-4-mini-reasoning) and gpt-oss's
harmony channels (`analysis` is thinking, `final` the answer, a message addressed
`to=functions.NAME` a tool call). Markers split across deltas are held back until they
are whole, so no piece of a tag reaches the answer.

Which format applies is the family's (`Family.reasoning`), else the chat template's: one
that writes `<|channel|>` is harmony, one that mentions `<think>` (or is one of
THINKING_TEMPLATES) uses the tags.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .families.family import ReasoningFormat

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
# Templates of models that think in tags but never name them: Phi-4-mini-reasoning's
# (phi3, like the non-thinking Phi-4-mini-instruct) starts with this fixed system line.
THINKING_TEMPLATES = ("an AI math expert developed by Microsoft",)
STOPPED_NOTE = "The model stopped while thinking."


@dataclass(frozen=True, slots=True)
class Piece:
    """One piece of the split stream: `kind` is "thinking", "answer" or "call" (a harmony
    message addressed to a function: `recipient` is the function's name, `text` its
    arguments as written)."""

    kind: str
    text: str
    recipient: str = ""


def reasoning_format(declared: ReasoningFormat | None, chat_template: str | None) -> ReasoningFormat | None:
    """The family's declared format, else the one its chat template shows, else None."""
    if declared is not None:
        return declared
    template = chat_template or ""
    if "<|channel|>" in template:
        return ReasoningFormat.HARMONY
    if THINK_OPEN in template or any(mark in template for mark in THINKING_TEMPLATES):
        return ReasoningFormat.THINK_TAGS
    return None


def opens_thinking(prompt: str) -> bool:
    """Whether a rendered prompt leaves the model inside `<think>` (the DeepSeek-R1
    distills' and some Qwen3 templates' generation prompt): its answer starts as thinking,
    with no opening tag of its own."""
    opened = prompt.rfind(THINK_OPEN)
    return opened >= 0 and prompt.rfind(THINK_CLOSE) < opened


def _held(text: str, marker: str) -> int:
    """How many characters at the end of `text` could be the start of `marker`."""
    for n in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-n:]):
            return n
    return 0


class ThinkSplitter:
    """`<think>…</think>`: thinking is what the tags hold, where they open the answer (only
    blank text before `<think>`; a tag later in the answer is the answer's text). With
    `thinking` set, the stream starts inside the tags (the prompt opened them)."""

    def __init__(self, thinking: bool = False) -> None:
        self.state = "thinking" if thinking else "start"  # start, thinking, answer
        self.buffer = ""
        self.lead = True  # blank text at the start of the thinking or the answer is dropped
        self.had_thinking = thinking

    @property
    def unclosed(self) -> bool:
        """The stream ended (or stands) inside the thinking."""
        return self.state == "thinking"

    def feed(self, text: str) -> list[Piece]:
        self.buffer += text
        out: list[Piece] = []
        while self.buffer and self._step(out, final=False):
            pass
        return out

    def finish(self) -> list[Piece]:
        out: list[Piece] = []
        while self.buffer and self._step(out, final=True):
            pass
        return out

    def _emit(self, out: list[Piece], kind: str, text: str) -> None:
        if self.lead:
            text = text.lstrip()
            if not text:
                return
            self.lead = False
        out.append(Piece(kind, text))

    def _step(self, out: list[Piece], final: bool) -> bool:
        buf = self.buffer
        if self.state == "start":
            body = buf.lstrip()
            if body.startswith(THINK_OPEN):
                self.buffer, self.state, self.had_thinking = body[len(THINK_OPEN):], "thinking", True
                return True
            if not final and THINK_OPEN.startswith(body):
                return False  # blank, or a tag still arriving
            self.state = "answer"
            return True
        if self.state == "thinking":
            end = buf.find(THINK_CLOSE)
            if end >= 0:
                self._emit(out, "thinking", buf[:end])
                self.buffer, self.state, self.lead = buf[end + len(THINK_CLOSE):], "answer", True
                return True
            keep = 0 if final else _held(buf, THINK_CLOSE)
            self._emit(out, "thinking", buf[:len(buf) - keep])
            self.buffer = buf[len(buf) - keep:]
            return False
        self._emit(out, "answer", buf)
        self.buffer = ""
        return False


_HARMONY_MARKERS = ("<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|return|>", "<|call|>", "<|constrain|>")
_HARMONY_ENDS = ("<|end|>", "<|return|>", "<|call|>")
# A message's header: the prompt ends at "<|start|>assistant", so the model's own text
# starts with its channel or its recipient (" to=functions.NAME<|channel|>commentary json").
_HEADER_STARTS = ("<|channel|>", "<|start|>", "to=")
_MAX_HEADER = 512  # a "header" longer than this without <|message|> is not one
_RECIPIENT = re.compile(r"to=functions\.([A-Za-z0-9_.:-]{1,128})")
_CHANNEL = re.compile(r"<\|channel\|>\s*(\w+)")


class HarmonySplitter:
    """gpt-oss's harmony messages: `<|channel|>analysis<|message|>…<|end|>` is thinking,
    `<|start|>assistant<|channel|>final<|message|>…` the answer, a message whose header
    names `to=functions.NAME` a call (in any channel: the recipient says it is one), other
    commentary the answer's text. A stream with no harmony header at all is the answer."""

    def __init__(self) -> None:
        self.buffer = ""
        self.state = "start"  # start, header, body, plain
        self.header = ""
        self.lead = True
        self.had_thinking = False
        self.call_text = ""  # the arguments of the call being written

    @property
    def unclosed(self) -> bool:
        return self.state == "body" and self._kind() == "thinking"

    def _kind(self) -> str:
        if _RECIPIENT.search(self.header):
            return "call"
        channel = _CHANNEL.search(self.header)
        return "thinking" if channel and channel.group(1) == "analysis" else "answer"

    def feed(self, text: str) -> list[Piece]:
        self.buffer += text
        out: list[Piece] = []
        while self.buffer and self._step(out, final=False):
            pass
        return out

    def finish(self) -> list[Piece]:
        out: list[Piece] = []
        while self.buffer and self._step(out, final=True):
            pass
        if self.state == "body" and self._kind() == "call" and self.call_text:
            out.append(Piece("call", self.call_text, self._recipient()))
            self.call_text = ""
        return out

    def _recipient(self) -> str:
        found = _RECIPIENT.search(self.header)
        return found.group(1) if found else ""

    def _step(self, out: list[Piece], final: bool) -> bool:
        buf = self.buffer
        if self.state == "start":
            body = buf.lstrip()
            if body.startswith(_HEADER_STARTS):
                self.state, self.header, self.buffer = "header", "", body
                return True
            if not final and any(m.startswith(body) for m in _HEADER_STARTS):
                return False
            self.state = "plain"
            return True
        if self.state == "plain":
            self._answer(out, buf)
            self.buffer = ""
            return False
        if self.state == "header":
            at = buf.find("<|message|>")
            if at < 0 and len(buf) > _MAX_HEADER:  # no header after all: text, shown
                self.state = "plain"
                return True
            if at < 0:
                return False  # the header is still arriving (short: held whole)
            self.header, self.buffer, self.state, self.lead = buf[:at], buf[at + len("<|message|>"):], "body", True
            self.had_thinking = self.had_thinking or self._kind() == "thinking"
            return True
        return self._body(out, buf, final)

    def _body(self, out: list[Piece], buf: str, final: bool) -> bool:
        ends = [(buf.find(m), m) for m in _HARMONY_ENDS if m in buf]
        if ends:
            at, marker = min(ends)
            self._content(out, buf[:at])
            if self._kind() == "call":
                out.append(Piece("call", self.call_text, self._recipient()))
                self.call_text = ""
            # <|return|> ends the answer; after <|end|> or <|call|> another message may start
            self.buffer = "" if marker == "<|return|>" else buf[at + len(marker):]
            self.state, self.header = ("plain" if marker == "<|return|>" else "start"), ""
            return True
        keep = 0 if final else max(_held(buf, m) for m in _HARMONY_ENDS)
        self._content(out, buf[:len(buf) - keep])
        self.buffer = buf[len(buf) - keep:]
        return False

    def _content(self, out: list[Piece], text: str) -> None:
        kind = self._kind()
        if kind == "call":
            self.call_text += text
        elif kind == "thinking":
            if text:
                out.append(Piece("thinking", text))
        else:
            self._answer(out, text)

    def _answer(self, out: list[Piece], text: str) -> None:
        for marker in _HARMONY_MARKERS:  # a stray marker is never shown as text
            text = text.replace(marker, "")
        if self.lead:
            text = text.lstrip()
            if not text:
                return
            self.lead = False
        out.append(Piece("answer", text))


Splitter = ThinkSplitter | HarmonySplitter


def splitter_for(fmt: ReasoningFormat | None, prompt: str = "") -> Splitter | None:
    """The stream step for a format (None: the model does not think apart); a `<think>`
    the prompt left open starts the stream inside the thinking."""
    if fmt is ReasoningFormat.THINK_TAGS:
        return ThinkSplitter(thinking=opens_thinking(prompt[-200:]))
    if fmt is ReasoningFormat.HARMONY:
        return HarmonySplitter()
    return None
