"""Other readings of a text, so that a secret hidden by simple obfuscation is still found.

A scan matches the detectors against the text as written and then against these views:

- normalized: NFKC per character (full-width, mathematical and circled letters and digits,
  no-break and other odd spaces), zero-width and other format characters and combining
  marks removed, and common Cyrillic and Greek look-alikes mapped to Latin letters;
- folded: the normalized text with separators taken out where they split one token: runs
  of single characters spaced out by one space or tab (three between words), a token
  broken over lines (when the pieces make 12 characters or more), and groups of four
  token characters joined by dots or line breaks (4111.1111.1111.1111);
- decoded: each run that reads as base64 or hex and decodes to printable text.

Every view keeps a map back to the original offsets, so a finding in a view reports (and
redaction cuts) the original characters; a finding in decoded text covers the whole run.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import functools
import re
import unicodedata
from dataclasses import dataclass

_HOMOGLYPHS = str.maketrans({
    # Cyrillic
    "а": "a", "в": "B", "е": "e", "к": "k", "м": "M", "н": "H", "о": "o", "р": "p", "с": "c",
    "т": "T", "у": "y", "х": "x", "ѕ": "s", "і": "i", "ј": "j", "һ": "h", "ԁ": "d", "ԛ": "q",
    "ԝ": "w", "ү": "y", "А": "A", "В": "B", "Е": "E", "К": "K", "М": "M", "Н": "H", "О": "O",
    "Р": "P", "С": "C", "Т": "T", "У": "Y", "Х": "X", "Ѕ": "S", "І": "I", "Ј": "J", "Ү": "Y",
    # Greek
    "α": "a", "ο": "o", "ν": "v", "ι": "i", "κ": "k", "υ": "u", "ρ": "p", "τ": "t", "χ": "x",
    "Α": "A", "Β": "B", "Ε": "E", "Ζ": "Z", "Η": "H", "Ι": "I", "Κ": "K", "Μ": "M", "Ν": "N",
    "Ο": "O", "Ρ": "P", "Τ": "T", "Υ": "Y", "Χ": "X",
})  # fmt: skip
_DROPPED = frozenset({"Cf", "Mn", "Me"})  # zero-width and format characters, combining marks
_NON_ASCII = re.compile(r"[^\x00-\x7f]+")

# Single characters spaced out by one space or tab; three between the original words.
_SPACED = re.compile(r"(?<!\S)\S(?!\S)(?:(?:[ \t]{3}|[ \t])\S(?!\S)){7,}")
_WORD_GAP = re.compile(r"[ \t]{3}")
# Tokens broken over lines: joined when the pieces make one long token.
_BROKEN = re.compile(r"(?<![^\s`])[^\s`]{1,200}+(?:[ \t]{0,3}\r?\n[ \t]{0,3}[^\s`]{1,200}+){1,40}+(?!`)")
_BROKEN_MIN = 12
_LINE_GAP = re.compile(r"[ \t]*\r?\n[ \t]*")
# Groups of four token characters joined by dots, or of four letters or digits joined by
# line breaks (the last group may be shorter).
_DOTTED = re.compile(
    r"(?<![\w.+/-])[\w+/-]{4}(?:(?:\.[\w+/-]{4}){2,40}(?:\.[\w+/-]{1,3})?"
    r"|(?:[ \t]*\n[ \t]*[A-Za-z0-9]{4}){2,7}(?:[ \t]*\n[ \t]*[A-Za-z0-9]{1,3})?)(?![\w.+/-])",
    re.ASCII,
)
_DOT_GAP = re.compile(r"\.|[ \t]*\n[ \t]*")

_HEX_PAIRS = re.compile(r"(?<![0-9A-Fa-f])[0-9A-Fa-f]{2}(?:[ :][0-9A-Fa-f]{2}){7,4000}(?![0-9A-Fa-f])")
_B64_RUN = re.compile(r"(?<![A-Za-z0-9+/_-])[A-Za-z0-9+/_-]{16,65536}={0,2}(?![A-Za-z0-9+/_=-])")
_HEX_ONLY = re.compile(r"(?:[0-9A-Fa-f]{2})+")
# How far around a change a view is scanned: more than any detector's reach before it
# (256 at most, plus lookbehind), and a private key block's length after it.
BEFORE = 640
AFTER = 12_800


class OffsetMap:
    """View offsets back to the offsets of the text the view was made from, as segments:
    a copied segment maps character by character (every `step`th source character: a
    spaced-out run); a replaced one maps as a whole. `changed`: the view spans that differ
    from the source, the only places a view can find something new."""

    def __init__(self) -> None:
        self._starts: list[int] = []  # view offset where each segment begins
        self._origins: list[tuple[int, int, int]] = []  # (source start, source end, step; 0: replaced)
        self._length = 0
        self.parts: list[str] = []
        self.changed: list[tuple[int, int]] = []

    def copy(self, source: str, start: int, end: int) -> None:
        if end <= start:
            return
        if self._origins and self._origins[-1][2] == 1 and self._origins[-1][1] == start:
            self._origins[-1] = (self._origins[-1][0], end, 1)  # continues the last copy
            self.parts.append(source[start:end])
            self._length += end - start
            return
        self._add(source[start:end], start, end, 1)

    def stride(self, source: str, start: int, end: int) -> None:
        """Every other character of source[start:end] (single characters spaced out)."""
        before = self._length
        self._add(source[start:end:2], start, end, 2)
        self._changed(before)

    def put(self, text: str, start: int, end: int) -> None:
        before = self._length
        if text:
            self._add(text, start, end, 0)
        self._changed(before)

    def _changed(self, before: int) -> None:
        if self.changed and self.changed[-1][1] >= before:
            self.changed[-1] = (self.changed[-1][0], self._length)
        else:
            self.changed.append((before, self._length))

    def _add(self, text: str, start: int, end: int, step: int) -> None:
        self._starts.append(self._length)
        self._origins.append((start, end, step))
        self.parts.append(text)
        self._length += len(text)

    def text(self) -> str:
        return "".join(self.parts)

    def span(self, a: int, b: int) -> tuple[int, int]:
        """The source span of view characters [a, b)."""
        i = bisect.bisect_right(self._starts, a) - 1
        j = bisect.bisect_right(self._starts, b - 1) - 1
        s0, _, step0 = self._origins[i]
        s1, e1, step1 = self._origins[j]
        start = s0 + (a - self._starts[i]) * step0 if step0 else s0
        end = s1 + (b - 1 - self._starts[j]) * step1 + 1 if step1 else e1
        return start, end


@dataclass(frozen=True, slots=True)
class View:
    text: str
    maps: tuple[OffsetMap, ...]  # innermost last: view -> ... -> original
    whole: tuple[int, int] | None = None  # decoded text: every finding covers this span
    # The view spans worth scanning (around what differs from the original); None: all.
    windows: tuple[tuple[int, int], ...] | None = None

    def span(self, a: int, b: int) -> tuple[int, int]:
        if self.whole is not None:
            return self.whole
        for m in reversed(self.maps):
            a, b = m.span(a, b)
        return a, b


@functools.lru_cache(maxsize=4096)
def _fold_char(ch: str) -> str:
    if unicodedata.category(ch) in _DROPPED:
        return ""
    folded = unicodedata.normalize("NFKC", ch).translate(_HOMOGLYPHS)
    return "".join(c for c in folded if unicodedata.category(c) not in _DROPPED)


def normalized(text: str) -> tuple[str, OffsetMap] | None:
    """The NFKC, format-free, look-alike-folded text, or None where that changes nothing."""
    if text.isascii():
        return None
    m = OffsetMap()
    pos = 0
    for run in _NON_ASCII.finditer(text):
        m.copy(text, pos, run.start())
        for i in range(run.start(), run.end()):
            ch = text[i]
            folded = _fold_char(ch)
            if folded == ch:
                m.copy(text, i, i + 1)
            else:
                m.put(folded, i, i + 1)
        pos = run.end()
    m.copy(text, pos, len(text))
    out = m.text()
    return None if out == text else (out, m)


def _fold_spaced(text: str, a: int, b: int, m: OffsetMap) -> None:
    """Single characters spaced out: the characters, one space where three separators were."""
    kept = a
    for g in _WORD_GAP.finditer(text, a, b):
        m.stride(text, kept, g.start())
        m.put(" ", g.start(), g.end())
        kept = g.end()
    m.stride(text, kept, b)


def folded(text: str) -> tuple[str, OffsetMap] | None:
    """`text` with separators inside spaced-out, line-broken or dotted tokens removed."""
    found: list[tuple[int, int, re.Pattern[str]]] = []
    for pattern in (_SPACED, _DOTTED, _BROKEN):
        for run in pattern.finditer(text):
            if pattern is _BROKEN and len(_LINE_GAP.sub("", run.group())) < _BROKEN_MIN:
                continue
            found.append((run.start(), run.end(), pattern))
    if not found:
        return None
    found.sort(key=lambda c: (c[0], -c[1]))
    cuts, reached = [], -1
    for cut in found:  # overlapping runs: the earliest (then the longest) is folded
        if cut[0] >= reached:
            cuts.append(cut)
            reached = cut[1]
    m = OffsetMap()
    pos = 0
    for a, b, pattern in cuts:
        m.copy(text, pos, a)
        if pattern is _SPACED:
            _fold_spaced(text, a, b, m)
        else:
            gap = _LINE_GAP if pattern is _BROKEN else _DOT_GAP
            kept = a
            for g in gap.finditer(text, a, b):
                m.copy(text, kept, g.start())
                m.put("", g.start(), g.end())
                kept = g.end()
            m.copy(text, kept, b)
        pos = b
    m.copy(text, pos, len(text))
    out = m.text()
    return None if out == text else (out, m)


def _printable(data: bytes) -> str | None:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if len(text) < 6 or not all(c.isprintable() or c in "\n\r\t" for c in text):
        return None
    return text


def _decode(run: str) -> str | None:
    compact = run.replace(" ", "").replace(":", "")
    if _HEX_ONLY.fullmatch(compact):
        return _printable(binascii.unhexlify(compact))
    if " " in run or ":" in run:
        return None
    body = run.rstrip("=")
    if len(body) % 4 == 1:
        return None
    padded = body + "=" * (-len(body) % 4)
    try:
        data = base64.b64decode(padded.replace("-", "+").replace("_", "/"), validate=True)
    except (binascii.Error, ValueError):
        return None
    return _printable(data)


def decoded(text: str) -> list[tuple[str, int, int]]:
    """(decoded text, start, end) for each base64 or hex run that decodes to printable text."""
    # The runs of one pattern do not overlap, and a base64 run (16 characters without a
    # space or colon) cannot overlap spaced hex pairs: decoding costs at most two passes over
    # the text, so every run is tried (a cap would let a secret hide behind decoy runs).
    out: list[tuple[str, int, int]] = []
    for pattern in (_HEX_PAIRS, _B64_RUN):
        for run in pattern.finditer(text):
            plain = _decode(run.group())
            if plain is not None:
                out.append((plain, *run.span()))
    return out


def _readings(text: str) -> tuple[View, list[View]]:
    """`text` as the base for decoding (normalized where that changes it), and the
    normalized and folded readings worth scanning, each with its maps back to `text`."""
    out: list[View] = []
    base = View(text, ())
    norm = normalized(text)
    if norm is not None:
        base = View(norm[0], (norm[1],), windows=windows(norm[1].changed, len(norm[0])))
        out.append(base)
    fold = folded(base.text)
    if fold is not None:
        out.append(View(fold[0], (*base.maps, fold[1]), windows=windows(fold[1].changed, len(fold[0]))))
    return base, out


def windows(changed: list[tuple[int, int]], length: int) -> tuple[tuple[int, int], ...]:
    """The spans to scan around each change: far enough back for any detector's start and
    lookbehind, far enough on for the longest match (a private key block)."""
    out: list[tuple[int, int]] = []
    for a, b in changed:
        a, b = max(0, a - BEFORE), min(length, b + AFTER)
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return tuple(out)


@functools.lru_cache(maxsize=2)  # scan() and redact() of one text share the work
def views(text: str) -> tuple[View, ...]:
    """Every other reading of `text` worth scanning (the text itself not included)."""
    base, out = _readings(text)
    # Encoded runs are looked for in the normalized text (hex pairs split by odd spaces).
    for plain, a, b in decoded(base.text):
        whole = base.span(a, b)
        out.append(View(plain, (), whole))
        out.extend(View(v.text, (), whole) for v in _readings(plain)[1])
    return tuple(out)
