"""Token probabilities in the chat view: hover a word of an answer to see how likely the
model found the token it chose, and the 5 it liked best.

An answer asked for with logprobs keeps them in its metadata ("logprobs": one entry per
token, {"token", "id", "logprob", "top": [{"token", "id", "logprob"}, ...]}); the tokens'
texts join to the message text. Nothing here runs while an answer streams: the hover is
attached once the stored answer is shown, and the text is matched to the tokens only when
the mouse first rests on it.

The chat shows rendered Markdown, not the raw text, so a position in the shown documents
is matched to the raw text by walking both in order (`align`): markup the render dropped
("**", "[...](url)", fences) is skipped over, and every shown character lands on the raw
character it came from.
"""

from __future__ import annotations

import html
import logging
import math
import re
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass

from PySide6.QtCore import QEvent, QObject, QRect, Qt
from PySide6.QtGui import QColor, QHelpEvent, QTextCharFormat, QTextCursor, QTextDocument
from PySide6.QtWidgets import QTextBrowser, QToolTip, QWidget

from wren.engine.token_view import visible

log = logging.getLogger(__name__)

META_KEY = "logprobs"  # the answer's metadata key the engine stores them under
SETTING_KEY = "chat.token_probabilities"  # engine setting: ask new answers for them, mark low ones
TOP_COUNT = 5  # alternatives asked for and shown
# A chosen token under these probabilities gets a dotted underline: amber, then red.
UNSURE, VERY_UNSURE = 0.5, 0.15
_ALIGN_WINDOW = 400  # the longest link target stepped over, and how far a space is looked for
_NEARBY = 24  # how far ahead a shown character is looked for past unknown syntax (&amp;)
_SPACE = re.compile(r"\s")
_INLINE_MARKS = frozenset("*_~`\\[<>|#")
_FENCE_LINE = re.compile(r"(`{3,}|~{3,})[^\n]*\n?")
_BLOCK_MARK = re.compile(r"(?:[-+*]|\d{1,9}[.)])[ \t]+|#{1,6}[ \t]+|>[ \t]?")
_NO_TEXT = "\u2029\u2028\ufffc"  # paragraph/line separators and embedded objects in a document


@dataclass(frozen=True, slots=True)
class Alternative:
    token: str
    id: int
    logprob: float

    @property
    def probability(self) -> float:
        return math.exp(self.logprob)


@dataclass(frozen=True, slots=True)
class TokenEntry:
    token: str
    id: int  # -1 where the stored entry has none
    logprob: float
    start: int  # where its text is in the message text; start == end when it was not found
    end: int
    top_raw: object = None  # the stored alternatives, read when the token is hovered

    @property
    def probability(self) -> float:
        return math.exp(self.logprob)

    def alternatives(self) -> tuple[Alternative, ...]:
        """The stored alternatives, likeliest first (BadLogprobs if they are malformed)."""
        if self.top_raw is None:
            return ()
        if not isinstance(self.top_raw, list):
            raise BadLogprobs(f"the alternatives of {self.token!r} are {type(self.top_raw).__name__}, not a list")
        found = [_alternative(t, f"alternative {k} of {self.token!r}") for k, t in enumerate(self.top_raw)]
        return tuple(sorted(found, key=lambda a: -a.logprob))


class BadLogprobs(ValueError):
    """The stored logprobs are not in the shape the engine writes."""


def _alternative(item: object, where: str) -> Alternative:
    if not isinstance(item, dict):
        raise BadLogprobs(f"{where} is {type(item).__name__}, not an object")
    token, tid, logprob = item.get("token"), item.get("id"), item.get("logprob")
    if not isinstance(token, str):
        raise BadLogprobs(f"{where} has no text (token: {token!r})")
    if isinstance(logprob, bool) or not isinstance(logprob, (int, float)) or not logprob <= 1e-6:
        raise BadLogprobs(f"{where} has no usable logprob (logprob: {logprob!r}; it must be a number <= 0)")
    return Alternative(token, tid if isinstance(tid, int) and not isinstance(tid, bool) else -1, min(0.0, float(logprob)))


def parse(raw: object, text: str) -> list[TokenEntry]:
    """The stored logprobs of an answer whose text is `text`, each token placed in the text
    (the alternatives are checked only when shown: a long answer's are not read at all).

    Normally the tokens' texts join to the text exactly. Where they do not (an answer cut at
    a stop string, text added by Continue, a token that is half a character), each token is
    looked for a few characters ahead; one not found gets an empty span and no hover."""
    if not isinstance(raw, list):
        raise BadLogprobs(f"logprobs is {type(raw).__name__}, not a list")
    entries: list[TokenEntry] = []
    pos = 0
    for n, item in enumerate(raw):
        if not isinstance(item, dict):
            raise BadLogprobs(f"token {n} is {type(item).__name__}, not an object")
        given, number, value = item.get("token"), item.get("id"), item.get("logprob")
        if isinstance(given, str) and type(value) is float and value <= 1e-6:  # the usual case, quickly
            token, logprob = given, min(0.0, value)
        else:  # the careful check: says what is wrong, or takes an int logprob
            head = _alternative(item, f"token {n}")
            token, logprob = head.token, head.logprob
        tid = number if type(number) is int else -1
        if token and text.startswith(token, pos):
            start = pos
        else:
            start = text.find(token, pos, pos + 16 + len(token)) if token else -1
        if start < 0:
            entries.append(TokenEntry(token, tid, logprob, pos, pos, item.get("top")))
            continue
        pos = start + len(token)
        entries.append(TokenEntry(token, tid, logprob, start, pos, item.get("top")))
    return entries


def percent(p: float) -> str:
    if p >= 0.9995:
        return "100%" if p >= 1.0 else "99.9%"
    if p < 0.001:
        return "<0.1%"
    return f"{p * 100:.1f}%"


def _shown(token: str) -> str:
    return html.escape(visible(token)) if token else "<i>(nothing)</i>"


def tooltip_html(entry: TokenEntry) -> str:
    """The chosen token with its probability, then the alternatives best first (the chosen
    one in bold among them)."""
    head = f"<b>{_shown(entry.token)}</b>&nbsp;&nbsp;{percent(entry.probability)}"
    if entry.id >= 0:
        head += f"&nbsp;&nbsp;<span style='color:gray'>token {entry.id}</span>"
    parts = [f"<p>{head}</p>"]
    try:
        top = entry.alternatives()[:TOP_COUNT]
    except BadLogprobs as exc:
        return "".join(parts) + f"<p style='color:gray'>(the alternatives are unreadable: {html.escape(str(exc))})</p>"
    if top:
        rows = []
        for alt in top:
            chosen = alt.id == entry.id if alt.id >= 0 and entry.id >= 0 else alt.token == entry.token
            name = f"<b>{_shown(alt.token)}</b>" if chosen else _shown(alt.token)
            rows.append(f"<tr><td>{name}</td><td align='right'>&nbsp;&nbsp;{percent(alt.probability)}</td></tr>")
        parts.append(f"<p style='color:gray'>The {len(top)} likeliest tokens there:</p>")
        parts.append("<table cellspacing='0' cellpadding='0'>" + "".join(rows) + "</table>")
    return "".join(parts)


def _skip_markup(raw: str, j: int) -> int:
    """Past the Markdown syntax that starts at `j` and is not shown as text: emphasis and code
    marks, a link's "](target)", a fence line, a heading's #s, a list item's marker."""
    n = len(raw)
    while j < n:
        ch = raw[j]
        if ch in _INLINE_MARKS:
            if ch in "`~" and _at_line_start(raw, j) and (m := _FENCE_LINE.match(raw, j)):  # ```python: never shown
                j = m.end()
                continue
            j += 1
        elif ch == "]" and raw.startswith("(", j + 1):
            close = raw.find(")", j + 2, j + 2 + _ALIGN_WINDOW)
            j = close + 1 if close >= 0 else j + 1
        elif ch in "-+*0123456789#>" and _at_line_start(raw, j) and (m := _BLOCK_MARK.match(raw, j)):
            j = m.end()
        else:
            return j
    return j


def _at_line_start(raw: str, j: int) -> bool:
    """Whether only indentation (up to 8 characters of it) comes before `j` on its line."""
    k = j
    while k > 0 and raw[k - 1] in " \t" and j - k < 8:
        k -= 1
    return k == 0 or raw[k - 1] == "\n"


def align(shown: str, raw: str, start: int = 0) -> tuple[list[int], int]:
    """For every character of `shown` (a rendered document's text), the index in `raw` it
    came from (-1: none, such as an embedded object), matching in order from `start`; and
    where matching stopped. Text that goes on exactly as in `raw` is taken in runs; where the
    two differ, the Markdown syntax in `raw` is stepped over (`_skip_markup`), else the
    character is looked for a little ahead (an entity like &amp;, a table's cells)."""
    out: list[int] = []
    j, i, n, size = start, 0, len(shown), len(raw)
    while i < n:
        ch = shown[i]
        if j < size and raw[j] == ch:
            run = 64
            while run >= 4 and not (i + run <= n and raw.startswith(shown[i:i + run], j)):
                run //= 4
            run = max(run, 1)  # at least this character: it is right here
            out.extend(range(j, j + run))
            i += run
            j += run
            continue
        space = ch in _NO_TEXT or ch.isspace()
        if ch == "\ufffc":
            k = -1  # an image or other object: no text of its own
        elif space:
            j = _skip_markup(raw, j)
            if j < size and raw[j].isspace():
                k = j
            else:
                m = _SPACE.search(raw, j, j + _NEARBY)
                k = m.start() if m else -1
        else:
            while j < size and raw[j].isspace():
                j += 1  # the line breaks and indentation before a block's first character
            j = _skip_markup(raw, j)
            k = j if j < size and raw[j] == ch else raw.find(ch, j, j + _NEARBY)
        out.append(k)
        if k >= 0:
            j = k + 1
        i += 1
    return out, j


def _documents(body: QWidget) -> list[QTextBrowser]:
    """The text views of a message body, top to bottom (prose and code; tool cards skipped)."""
    from .segments import CodeSegment, ProseSegment

    views: list[QTextBrowser] = []
    for segment in body.segments():  # type: ignore[attr-defined]
        if isinstance(segment, ProseSegment):
            views.append(segment)
        elif isinstance(segment, CodeSegment):
            views.append(segment.body)
    return views


class TokenProbabilities(QObject):
    """The hover (and the optional marks) for one answer's stored token probabilities."""

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self._raw: object = None
        self._text = ""
        self._body: QWidget | None = None
        self._entries: list[TokenEntry] | None = None
        self._starts: list[int] = []
        self._maps: dict[int, list[int]] = {}  # id(view) -> raw index of each shown character
        self._key: tuple = ()
        self._watched: list[QTextBrowser] = []
        self.marked = False
        self.last_tip: str | None = None  # the most recent tooltip shown (for tests and a11y)
        self.problem: str | None = None  # why stored logprobs could not be read

    @property
    def attached(self) -> bool:
        return self._raw is not None

    def attach(self, body: QWidget, raw: object, text: str) -> None:
        """Hover `body`'s text with the logprobs `raw` of the answer text `text` (parsed later)."""
        if raw is self._raw and text == self._text and body is self._body:
            self._watch()  # segments may be new (the body was rendered again)
            return
        self.detach()
        self._raw, self._text, self._body = raw, text, body
        self._watch()

    def detach(self) -> None:
        for view in self._watched:
            try:
                view.viewport().removeEventFilter(self)  # type: ignore[attr-defined]
            except RuntimeError:
                pass  # already deleted with its segment
        self._watched = []
        self._raw, self._body, self._entries, self._maps, self._key = None, None, None, {}, ()
        self.marked = False
        self.problem = None

    def _watch(self) -> None:
        if self._body is None:
            return
        views = _documents(self._body)
        for view in views:
            if view not in self._watched:
                view.viewport().installEventFilter(self)
        self._watched = views

    # -- the data --------------------------------------------------------------------

    def entries(self) -> list[TokenEntry]:
        if self._entries is None:
            try:
                self._entries = parse(self._raw, self._text)
            except BadLogprobs as exc:
                self.problem = f"this answer's stored token probabilities are unreadable: {exc}"
                log.warning("%s", self.problem)
                self._entries = []
            self._starts = [e.start for e in self._entries]
        return self._entries

    def entry_at(self, offset: int) -> TokenEntry | None:
        """The token whose text covers character `offset` of the message text."""
        entries = self.entries()
        i = bisect_right(self._starts, offset) - 1
        while i >= 0 and entries[i].start == entries[i].end and entries[i].start == offset:
            i -= 1  # tokens not found in the text have no span; the one before may
        if i >= 0 and entries[i].start <= offset < entries[i].end:
            return entries[i]
        return None

    def _alignment(self) -> dict[int, list[int]]:
        if self._body is None:
            return {}
        views = _documents(self._body)
        key = tuple((id(v), v.document().characterCount()) for v in views)
        if key != self._key:
            self._maps, at = {}, 0
            for view in views:
                self._maps[id(view)], at = align(view.document().toRawText(), self._text, at)
            self._key = key
        return self._maps

    def offset_at(self, view: QTextBrowser, pos) -> int | None:
        """The message-text offset of the character under `pos` (viewport coordinates), or
        None where the point is not on a character."""
        doc: QTextDocument = view.document()
        hit = doc.documentLayout().hitTest(pos + _scroll(view), Qt.HitTestAccuracy.ExactHit)
        if hit < 0:
            return None
        cursor = view.cursorForPosition(pos)
        index = cursor.position()
        if pos.x() < view.cursorRect(cursor).x() and index > 0:
            index -= 1  # the point is on the character before the nearest boundary
        mapping = self._alignment().get(id(view))
        if mapping is None or not (0 <= index < len(mapping)):
            return None
        return mapping[index] if mapping[index] >= 0 else None

    def tip_at(self, view: QTextBrowser, pos) -> str | None:
        offset = self.offset_at(view, pos)
        if offset is None:
            return None
        entry = self.entry_at(offset)
        return tooltip_html(entry) if entry is not None else None

    def shown_range(self, entry: TokenEntry) -> tuple[QTextBrowser, int, int] | None:
        """Where a token's text is shown: its view and the document positions it covers."""
        for view in _documents(self._body) if self._body is not None else []:
            mapping = self._alignment().get(id(view), [])
            hits = [i for i, k in enumerate(mapping) if entry.start <= k < entry.end]
            if hits:
                return view, hits[0], hits[-1] + 1
        return None

    # -- the hover -------------------------------------------------------------------

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.ToolTip and self._raw is not None:
            view = watched.parent()
            if isinstance(view, QTextBrowser) and isinstance(event, QHelpEvent):
                tip = self.tip_at(view, event.pos())
                if tip is not None:
                    self.last_tip = tip
                    QToolTip.showText(event.globalPos(), tip, view.viewport(), QRect(event.pos(), event.pos()))
                else:
                    QToolTip.hideText()
                    event.ignore()
                return True
        return False

    # -- the marks -------------------------------------------------------------------

    def set_marked(self, on: bool) -> None:
        """Underline the tokens the model was unsure of, all at once (see `marking`)."""
        if not on:
            self.marked = False  # the owner renders the body again to take the marks away
            return
        for _ in self.marking():
            pass

    def marking(self) -> Iterator[None]:
        """Underline the tokens the model was unsure of (dotted: amber under 50%, red under
        15%), one text view per step, so a long answer is marked over a few event-loop turns.
        Turning marks off is done by rendering the body again (the owner's job)."""
        if self.marked or self._body is None:
            return
        views = _documents(self._body)
        maps = self._alignment()
        text = self._text
        shown_at = [-1] * len(text)  # message-text offset -> (view number, document position)
        view_of = [0] * len(text)
        for v, view in enumerate(views):
            for i, k in enumerate(maps.get(id(view), ())):
                if k >= 0:
                    shown_at[k], view_of[k] = i, v
        runs: list[list[tuple[int, int, bool]]] = [[] for _ in views]  # per view: (from, to, very unsure)
        for entry in self.entries():
            p = entry.probability
            if p >= UNSURE or entry.start == entry.end:
                continue
            red = p < VERY_UNSURE
            for k in range(entry.start, entry.end):
                i = shown_at[k]
                if i < 0 or text[k].isspace():
                    continue
                mine = runs[view_of[k]]
                if mine and mine[-1][1] == i and mine[-1][2] == red:
                    mine[-1] = (mine[-1][0], i + 1, red)
                else:
                    mine.append((i, i + 1, red))
        colors = {False: QColor("#d08a00"), True: QColor("#d43c2c")}
        for view, spans in zip(views, runs):
            if not spans:
                continue
            yield
            try:
                cursor = QTextCursor(view.document())
            except RuntimeError:
                return  # the body was rendered again meanwhile: its new views are marked anew
            cursor.beginEditBlock()  # one layout pass for the view, not one per token
            for lo, hi, red in spans:
                fmt = QTextCharFormat()
                fmt.setUnderlineStyle(QTextCharFormat.UnderlineStyle.DotLine)
                fmt.setUnderlineColor(colors[red])
                cursor.setPosition(lo)
                cursor.setPosition(hi, QTextCursor.MoveMode.KeepAnchor)
                cursor.mergeCharFormat(fmt)
            cursor.endEditBlock()
        self.marked = True


def _scroll(view: QTextBrowser):
    from PySide6.QtCore import QPoint

    return QPoint(view.horizontalScrollBar().value(), view.verticalScrollBar().value())
