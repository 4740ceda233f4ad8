"""Which part of a message was typed and which was pasted (a log, code, a traceback, a long
text), so a title names the question and not the first words of a paste.

`split_paste` returns the question's own lines and the pasted rest; a message with nothing
pasted is all question. `describe_paste` names a paste that came without a question
("Log from 2026-11-28", "Python code", "KeyError traceback").
"""

from __future__ import annotations

import re
from dataclasses import dataclass

LONG_PROSE_LINES = 4  # a paragraph this long beside a short one is a pasted text, not the question
LONG_PROSE_CHARS = 320
QUESTION_CHARS = 400  # a typed question is shorter than this
ENDS_LINES = 200  # of a longer message, this many lines at each end are read
LINE_CHARS = 1000  # and of each line, this many characters

_FENCE = re.compile(r"^\s*(```|~~~)\s*([\w+#.-]*)")
_DATE = r"\d{4}-\d{2}-\d{2}"
_TIME = r"\d{1,2}:\d{2}(?::\d{2})?(?:[.,]\d+)?"
# Timestamps, times of day, long numbers and hex ids: never a title's words.
STAMPS = re.compile(rf"\b{_DATE}(?:[T ]{_TIME}(?:Z|[+-]\d{{2}}:?\d{{2}})?)?\b|\b{_TIME}\b"
                    r"|\b0x[0-9a-fA-F]+\b|\b[0-9a-fA-F]{8,}\b|\b\d{5,}\b")
_LOG_LINE = re.compile(rf"^\s*\[?(?:{_DATE}|{_TIME}|[A-Z][a-z]{{2}} +\d{{1,2}} {_TIME})"
                       r"|^\s*\[?(?:ERROR|WARN|WARNING|INFO|DEBUG|TRACE|FATAL|CRITICAL)\b")
_TRACE_LINE = re.compile(r"^\s*(?:Traceback \(most recent call last\)|File \"|at [\w$.<>]+\(|"
                         r"[\w.]*(?:Error|Exception)\b:?)")
_CODE_LINE = re.compile(r"^(?:\s{2,}|\t)\S|^\s*(?:def |class |import |from [\w.]+ import |#include|function |"
                        r"const |let |var |return\b|fn |pub |package |public |private |SELECT |<\?|<!|</?\w+[ >])"
                        r"|[{};]\s*$|^\s*[}\])]|=>|::|^\s*[\"']?[\w-]+[\"']?\s*[:=]\s*[\[{\"']")
_EXCEPTION = re.compile(r"^\s*([\w.]*(?:Error|Exception))\b")
_DEFINED = re.compile(r"\b(?:def|class|function|fn|func)\s+([A-Za-z_]\w*)")
_ASK = frozenset(["what", "what's", "why", "how", "when", "where", "which", "who", "can", "could", "would",
                  "is", "are", "does", "do", "did", "should", "explain", "summarize", "summarise", "fix",
                  "translate", "review", "rewrite", "debug", "find", "check", "tell", "help", "please",
                  "describe", "convert", "refactor", "improve", "shorten", "proofread", "correct", "make",
                  "write", "draft", "list", "compare", "reply", "answer", "give", "turn"])
_LANGS = {"py": "Python", "python": "Python", "js": "JavaScript", "javascript": "JavaScript",
          "ts": "TypeScript", "typescript": "TypeScript", "rs": "Rust", "rust": "Rust", "go": "Go",
          "c": "C", "cpp": "C++", "c++": "C++", "java": "Java", "sh": "Shell", "bash": "Shell",
          "sql": "SQL", "json": "JSON", "yaml": "YAML", "yml": "YAML", "html": "HTML", "css": "CSS",
          "rb": "Ruby", "ruby": "Ruby", "kotlin": "Kotlin", "swift": "Swift", "toml": "TOML"}


@dataclass
class _Segment:
    lines: list[str]
    pasted: bool
    lang: str = ""  # a fenced block's language tag

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def looks_pasted(line: str) -> bool:
    """Whether a line reads as a log, a traceback or code rather than as typed words."""
    if _LOG_LINE.match(line) or _TRACE_LINE.match(line) or _CODE_LINE.search(line):
        return True
    stripped = line.strip()
    symbols = sum(1 for c in stripped if not (c.isalnum() or c.isspace()))
    return len(stripped) >= 12 and symbols / len(stripped) > 0.25


def _segments(message: str) -> list[_Segment]:
    """The message cut into fenced blocks and runs of like lines (typed or pasted); a blank
    line ends a run."""
    out: list[_Segment] = []
    fence: _Segment | None = None
    for line in message.splitlines():
        opener = _FENCE.match(line)
        if fence is not None:
            fence.lines.append(line)
            if opener:
                fence = None
            continue
        if opener:
            fence = _Segment([line], True, opener.group(2).lower())
            out.append(fence)
            continue
        if not line.strip():
            out.append(_Segment([], False))  # a break: the next line starts a new run
            continue
        pasted = looks_pasted(line)
        if out and out[-1].lines and out[-1].pasted == pasted and not out[-1].lang:
            out[-1].lines.append(line)
        else:
            out.append(_Segment([line], pasted))
    return [s for s in out if s.lines]


def _is_long(seg: _Segment) -> bool:
    return len(seg.lines) >= LONG_PROSE_LINES or len(seg.text) > LONG_PROSE_CHARS


def _asks(text: str) -> bool:
    first = text.split(maxsplit=1)[0].lower().strip(",.:;!") if text.split() else ""
    return "?" in text or first in _ASK


def _ends(message: str) -> str:
    """A long message's first and last ENDS_LINES lines, each cut at LINE_CHARS: a question
    stands before or after its paste, and a 1 MB paste must not hold up the title."""
    lines = message.splitlines()
    if len(lines) > 2 * ENDS_LINES:
        lines = lines[:ENDS_LINES] + [""] + lines[-ENDS_LINES:]
    return "\n".join(line[:LINE_CHARS] for line in lines)


def split_paste(message: str) -> tuple[str, str]:
    """(the question's own lines, the pasted rest — of a long message, only its ends). With
    nothing pasted: (message, ""). With a paste and no typed line that reads as a question
    or names a topic: ("", the paste)."""
    segs = _segments(_ends(message))
    typed = [s for s in segs if not s.pasted]
    if any(_is_long(s) for s in typed) and any(not _is_long(s) and _asks(s.text) for s in typed):
        for s in typed:  # a long text pasted beside a short question
            s.pasted = _is_long(s)
        typed = [s for s in typed if not s.pasted]
    if len(typed) == len(segs):
        return message, ""
    paste = "\n".join(s.text for s in segs if s.pasted)
    ends = [s for s in (segs[0], segs[-1]) if not s.pasted]
    short = [s for s in ends + typed if len(s.text) <= QUESTION_CHARS]  # at either end first
    asked = next((s for s in short if _asks(s.text)), None) or next(iter(short), None)
    return (asked.text if asked else ""), paste


def _fence_lang(paste: str) -> str:
    opener = _FENCE.match(paste)
    return _LANGS.get(opener.group(2).lower(), "") if opener else ""


def describe_paste(paste: str) -> str:
    """A name for a paste that came without a question: its kind and, where there is one, what
    it is about ("Log from 2026-11-28", "KeyError traceback", "Python code for parse_config");
    "" where it is plain text (its first meaningful line is the better title)."""
    lines = [ln for ln in paste.splitlines() if ln.strip() and not _FENCE.match(ln)]
    error = next((m.group(1).rsplit(".", 1)[-1] for ln in reversed(lines) if (m := _EXCEPTION.match(ln))), "")
    if error and any(_TRACE_LINE.match(ln) for ln in lines[:-1]):
        return f"{error} traceback"
    logs = sum(1 for ln in lines if _LOG_LINE.match(ln))
    if lines and logs * 2 >= len(lines):
        date = re.search(_DATE, paste)
        return f"Log from {date.group(0)}" if date else "Log excerpt"
    lang = _fence_lang(paste)
    if lang in ("JSON", "YAML", "TOML"):
        return f"{lang} data"
    code = sum(1 for ln in lines if looks_pasted(ln))
    if lang or (lines and code * 2 >= len(lines)):
        name = _DEFINED.search(paste)
        kind = f"{lang} code" if lang else "Code"
        return f"{kind} for {name.group(1)}" if name else kind
    return ""
