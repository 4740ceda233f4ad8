"""Attached files in the prompt: a file's text goes in with the question when it fits the
model's window, as an excerpt when only part of it fits, and otherwise only its name; the
prompt says which, and each file is a part of the context report. A file not in whole is
also offered through the read_attachment tool (engine/turns.py, `needs_reader`)."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..tools.files import ToolFailed, read_text_file
from .report import ContextPart, ContextReport, PartKind, PartState

# No tokenizer averages more characters per token than this: text past window × this can
# never fit, so it is not read into memory or counted.
MAX_CHARS_PER_TOKEN = 8
MIN_EXCERPT_TOKENS = 64  # less room than this and an excerpt says too little: the file is left out
SHARE_OF_ROOM = 0.5  # attachments may take this much of the room the question leaves: the rest
# stays for memories, recent turns and tool results (reading on in an excerpted file needs room)
INTRO = "The user attached {what} to this message."
WHOLE = "the whole file"  # the report's note for a file that is in the prompt whole


@dataclass(frozen=True)
class AttachedFile:
    """One attached file as read for this prompt."""

    name: str
    text: str | None  # None: it could not be read (`error` says why)
    chars: int = 0  # the whole text's length (`text` may hold only what could ever fit)
    error: str = ""
    message_id: int | None = None  # the question it was attached to, where known

    @property
    def complete(self) -> bool:
        return self.text is not None and len(self.text) == self.chars


def read_attached(paths: Sequence[tuple[Path, int | None]], window: int) -> tuple[AttachedFile, ...]:
    """Each (path, message id)'s text, at most what `window` tokens could hold. Blocking:
    run it on an executor. A file that cannot be read is kept with its reason."""
    cap = max(1, window) * MAX_CHARS_PER_TOKEN
    out = []
    for path, message_id in paths:
        try:
            info = Path(path).stat()
            text, chars = _read_capped(str(path), info.st_mtime_ns, info.st_size, cap)
        except ToolFailed as exc:
            out.append(AttachedFile(Path(path).name, None, 0, str(exc), message_id))
        except OSError as exc:  # gone or unreadable between the check and the read
            out.append(AttachedFile(Path(path).name, None, 0, f"{Path(path).name} cannot be read: "
                                    f"{exc.strerror or exc}", message_id))
        else:
            out.append(AttachedFile(Path(path).name, text, chars, "", message_id))
    return tuple(out)


@functools.lru_cache(maxsize=16)
def _read_capped(path: str, mtime_ns: int, size: int, cap: int) -> tuple[str, int]:
    """A file's text cut to `cap` characters, and its whole length. Kept while the file is
    unchanged (its time and size are in the key): every question of a chat reads its files
    again, and a PDF's text takes seconds to extract."""
    text = read_text_file(Path(path))
    return text[:cap], len(text)


def needs_reader(report: ContextReport) -> bool:
    """Whether an attached file is not in the prompt whole (an excerpt, or left out), so the
    model needs the read_attachment tool to read it. A file that is in whole needs no tool:
    offering one anyway costs a small model room and attention it answers worse without."""
    return any(p.state is not PartState.INCLUDED or p.note != WHOLE
               for p in report.parts_of(PartKind.ATTACHMENT))


def cut_notices(report: ContextReport, message_id: int) -> list[str]:
    """A sentence for the user per file of question `message_id` that is not in the prompt whole."""
    out = []
    for p in report.parts_of(PartKind.ATTACHMENT):
        if message_id not in p.source_ids or (p.state is PartState.INCLUDED and p.note == WHOLE):
            continue
        if p.state is PartState.INCLUDED:
            share = re.search(r"the first \d+%", p.note)
            out.append(f"{p.text} is too long for this model's window: the model read only "
                       f"{share.group(0) if share else 'part'} of it")
        else:
            out.append(f"The model did not get the text of {p.text}: {p.note.split(' (')[0]}")
    return out


def _opening(name: str) -> str:
    return f"[file: {name}]"


def _closing(name: str) -> str:
    return f"[end of {name}]"


def _whole(f: AttachedFile) -> str:
    return f"{_opening(f.name)}\n{f.text}\n{_closing(f.name)}"


def _excerpt(f: AttachedFile, cut: int) -> str:
    assert f.text is not None
    share = 100 * cut / max(1, f.chars)
    return (f"{_opening(f.name)}\n{f.text[:cut]}\n[… {f.name} goes on: only its first {share:.0f}% fits here]"
            f"\n{_closing(f.name)}")


def _left_out(f: AttachedFile, why: str) -> str:
    return f"[file: {f.name} — {why}]"


class AttachmentFit:
    """Fits `files` (the newest first: they matter most) into a number of tokens."""

    def __init__(self, files: Sequence[AttachedFile], count: Callable[[str], int]):
        self.files = tuple(files)
        self.count = count

    def fit(self, question: str, limit: int) -> tuple[str, list[ContextPart], int]:
        """The question with the files' block before it, a report part per file, and the
        block's tokens. A file that does not fit whole goes in as an excerpt while at least
        MIN_EXCERPT_TOKENS are left, else only its name goes in, with where to read it."""
        if not self.files:
            return question, [], 0
        blocks, parts = [], []
        what = "a file" if len(self.files) == 1 else f"{len(self.files)} files"
        intro = INTRO.format(what=what)
        used = self.count(intro) + 2
        for f in self.files:
            block, part, cost = self._one(f, limit - used)
            blocks.append(block)
            parts.append(part)
            used += cost + 1
        return "\n\n".join([intro, *blocks, question]), parts, used

    def _one(self, f: AttachedFile, room: int) -> tuple[str, ContextPart, int]:
        """The file's block, its report part, and the block's tokens."""
        ids = (f.message_id,) if f.message_id is not None else ()
        if f.text is None:
            block = _left_out(f, f"it could not be read: {f.error}")
            return block, ContextPart(PartKind.ATTACHMENT, PartState.DROPPED, 0, ids, "user", f.name,
                                      note=f"could not be read: {f.error}"), self.count(block)
        whole = _whole(f)
        cost = self.count(whole)
        if f.complete and cost <= room:
            return whole, ContextPart(PartKind.ATTACHMENT, PartState.INCLUDED, cost, ids, "user", f.name,
                                      note=WHOLE), cost
        cut = self._cut(f, room)
        if cut:
            block = _excerpt(f, cut)
            share = 100 * cut / max(1, f.chars)
            tokens = self.count(block)
            return block, ContextPart(
                PartKind.ATTACHMENT, PartState.INCLUDED, tokens, ids, "user", f.name,
                note=f"an excerpt: the first {share:.0f}% (the file is longer than the room this model's "
                     f"window leaves; read_attachment is offered for the rest where the tools fit)"), tokens
        block = _left_out(f, "too long for this model's window, so its text is not here")
        return block, ContextPart(PartKind.ATTACHMENT, PartState.DROPPED, cost, ids, "user", f.name,
                                  note="too long for the room this model's window leaves (read_attachment is "
                                       "offered where the tools fit)"), self.count(block)

    def _cut(self, f: AttachedFile, room: int) -> int:
        """How many leading characters of `f` fit `room` tokens as an excerpt (0: none useful)."""
        assert f.text is not None
        if room < MIN_EXCERPT_TOKENS:
            return 0
        frame = self.count(_excerpt(f, 0))
        if room - frame < MIN_EXCERPT_TOKENS // 2:
            return 0
        low, high = 0, len(f.text)  # the longest prefix that fits: a few counts, by proportion first
        guess = min(high, int(len(f.text) * (room - frame) / max(1, self.count(f.text))))
        for _ in range(40):
            if high - low <= max(16, len(f.text) // 200):
                break
            if self.count(_excerpt(f, guess)) <= room:
                low = guess
            else:
                high = guess - 1
            guess = (low + high + 1) // 2
        return _at_boundary(f.text, low)


def _at_boundary(text: str, cut: int) -> int:
    """`cut` moved back to the end of a line (or word) when one is near, so an excerpt does not
    stop mid-word."""
    if cut >= len(text) or cut <= 0:
        return max(0, cut)
    for mark in ("\n", " "):
        at = text.rfind(mark, max(0, cut - 400), cut)
        if at > 0:
            return at
    return cut
