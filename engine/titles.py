"""Chat titles, written by the engine while the first answer streams.

For a new chat (no title yet, not temporary) the first title is asked for as a short side
request (`Turns.complete`, at a lower priority than the answer, so a model with a spare KV
slot decodes it beside the answer) as soon as the answer's first sentence exists. When the
answer finishes it is revised once, only if the whole answer is about something the first
title's source (question + first sentence) did not say. Each title reaches the stream as
a `TitleUpdate`, before `Finished`.

A model's title is cleaned (prefixes such as "Title:", quotes, markdown, at most
TITLE_WORDS words) and checked for plausibility: no first person, no talk about titles,
at least one content word shared with the chat. One that fails is replaced by the
question's own key words (`keyword_title`), so a new chat always ends with a title. A message
holding a paste (a log, code, a long text) is read for its typed question (engine/pasted.py);
a paste with no question is named for what it is ("Log from 2026-11-28").
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from .events import Delta, Event, Finished, FinishReason, TitleUpdate
from .inference.sampling import SamplingParams
from .logs import log_event
from .pasted import STAMPS, describe_paste, looks_pasted, split_paste

if TYPE_CHECKING:
    from .turn.host import TurnHost


class Completer(Protocol):
    """What titles need of the answering half (`Turns`): the engine, and a short side
    request's text."""

    e: TurnHost

    async def complete(self, chat: list[dict], params: SamplingParams, *, priority: int = 1) -> str: ...

TITLE_WORDS = 6  # a title is at most this many words
TITLE_PRIORITY = 5  # behind the visible answer (0), ahead of pre-warming (10)
SOURCE_CHARS = 600  # how much of the question and the answer the title request reads
FALLBACK = "New chat"  # numbered ("New chat 2") where another chat has it: never two alike
CARE_TITLE = "A personal conversation"  # a message met with care (self-harm): its words are not the title
MODEL_KEY = "titles.model"  # "auto" (default), "always" or "off": see Titles.use_model

_STOP = frozenset(["a", "about", "above", "after", "again", "against", "all", "am", "an", "and", "any", "are", "aren't", "as", "at", "be", "because", "been", "before", "being", "below", "between", "both", "but", "by", "can", "can't", "cannot", "could", "couldn't", "did", "didn't", "do", "does", "doesn't", "doing", "don't", "down", "during", "each", "few", "for", "from", "further", "had", "hadn't", "has", "hasn't", "have", "haven't", "having", "he", "he'd", "he'll", "he's", "her", "here", "here's", "hers", "herself", "him", "himself", "his", "how", "how's", "i", "i'd", "i'll", "i'm", "i've", "if", "in", "into", "is", "isn't", "it", "it's", "its", "itself", "let's", "me", "more", "most", "mustn't", "my", "myself", "no", "nor", "not", "of", "off", "on", "once", "only", "or", "other", "ought", "our", "ours", "ourselves", "out", "over", "own", "same", "shan't", "she", "she'd", "she'll", "she's", "should", "shouldn't", "so", "some", "such", "than", "that", "that's", "the", "their", "theirs", "them", "themselves", "then", "there", "there's", "these", "they", "they'd", "they'll", "they're", "they've", "this", "those", "through", "to", "too", "under", "until", "up", "very", "was", "wasn't", "we", "we'd", "we'll", "we're", "we've", "were", "weren't", "what", "what's", "when", "when's", "where", "where's", "which", "while", "who", "who's", "whom", "why", "why's", "with", "won't", "would", "wouldn't", "you", "you'd", "you'll", "you're", "you've", "your", "yours", "yourself", "yourselves", "please", "tell", "explain", "give", "show", "help", "want", "need", "know", "like", "just", "really", "also", "get", "got", "make", "can", "could", "would", "will", "shall", "may", "might", "must", "thing", "things", "something", "anything", "way", "hi", "hello", "hey", "thanks", "thank", "ok", "okay", "yes", "sure", "well", "much", "many", "one", "two", "use", "using", "best", "good"])
_DANGLING = frozenset(["a", "an", "the", "to", "in", "on", "of", "for", "and", "or", "with", "at", "by", "from", "your", "my", "is", "are", "as", "that"])
_FIRST_PERSON = frozenset(["i", "i'm", "i've", "i'd", "i'll", "me", "my", "mine", "myself", "we", "we're", "we've", "our", "ours", "us"])
# Words that talk about the title instead of being one ("A classic, yet utterly uninspired title").
_META = frozenset(["title", "titles", "titled", "heading", "subject", "chat", "conversation", "sentence", "sentences", "summary", "assistant", "user", "uninspired", "classic", "catchy", "here", "sure", "certainly"])
_PREFIX = re.compile(
    r"^\s*(?:(?:sure|okay|ok|certainly|of course)[,!.]?\s*)?"
    r"(?:(?:here(?:'s| is)|the|a|my|suggested|possible|chat)\s+)*(?:short\s+)?(?:title|heading|subject)"
    r"(?:\s+(?:could|would|might|can)\s+be|\s+is)?\s*[:\-–—]\s*", re.IGNORECASE)
# Words about the answer's form rather than the question's topic ("Here's a bulleted list of
# five"): a title holding one the question does not use is the answer describing itself.
_FORMAT = frozenset(["here's", "list", "bulleted", "numbered", "table", "answer", "answers", "response",
                     "question", "following", "below", "above", "overview", "breakdown", "items", "points",
                     "steps", "options", "suggestions", "ideas", "tips", "five", "three", "four", "ten"])
# Words of a question that only point at a paste: with nothing else, the paste names the chat.
_POINTING = frozenset(["say", "says", "mean", "means", "raise", "raises", "happen", "happening", "wrong", "work",
                       "working", "fix", "explain", "summarize", "summarise", "review", "debug", "translate",
                       "log", "logs", "code", "error", "errors", "traceback", "output", "snippet", "script",
                       "file", "text", "paste", "pasted", "trace", "stack", "function", "config", "look", "see",
                       "bullet", "bullets", "short", "shorter", "email", "article", "message", "paragraph",
                       "words", "sentences", "points"])
_ACTIONS = frozenset(["fix", "explain", "summarize", "summarise", "review", "debug", "translate"])
_REPLY_START = re.compile(r"^\s*(?:here(?:'s|’s| is| are)|below|the following|sure|certainly|of course)\b", re.IGNORECASE)
_MARKUP_LINE = re.compile(r"^\s*(?:```|~~~|\|?\s*:?-{3,}|<[^>]*>\s*$)")  # a fence, a table rule, a lone tag
_MARKUP = re.compile(r"<[^>]+>|[|\[\]{}<>~\\]")
_LINE_LEAD = re.compile(r"^\s*(?:>+\s*|[-+•]\s+|\d+[.)]\s+)+")  # quote, bullet, number
_WORD = re.compile(r"[A-Za-zÀ-ÖØ-öø-ÿ0-9][A-Za-zÀ-ÖØ-öø-ÿ0-9'’\-]*")
_SENTENCE_END = re.compile(r"[.!?。！？](?:\s|$)|\n")


def words(text: str) -> list[str]:
    return [w.replace("’", "'").strip("'-") for w in _WORD.findall(text)]


def _stem(word: str) -> str:
    w = word.lower()
    for suffix in ("ies", "es", "s", "ing", "ed"):
        if len(w) > len(suffix) + 3 and w.endswith(suffix):
            return w[: -len(suffix)]
    return w


def content_words(text: str) -> set[str]:
    """The stems of a text's words that carry meaning (no stop words, no short numbers)."""
    return {_stem(w) for w in words(text) if w.lower() not in _STOP and len(w) > 2}


def first_sentence(text: str) -> str | None:
    """The answer's first sentence once it is complete (None while it is still being written)."""
    match = _SENTENCE_END.search(text)
    if match is None or not text[: match.start()].strip():
        return None
    return text[: match.end()].strip()


def keyword_title(question: str) -> str:
    """A title from the question's own key words, in their order: "How do I keep basil
    alive indoors?" → "Keep basil alive indoors". Where the message holds a paste (a log,
    code, a long text), the typed question's words; a paste with no question is named for
    what it is ("Log from 2026-11-28") or by its first meaningful line."""
    asked, paste = split_paste(question)
    if not paste:
        return _key_words(question) or _first_words(question) or FALLBACK
    asked_title = _key_words(asked)
    if asked_title and not _thin(asked_title):
        return asked_title
    kind = describe_paste(paste)
    if not kind:
        return _first_meaningful(paste) or asked_title or FALLBACK
    verb = next((w.capitalize() for w in words(asked) if w.lower() in _ACTIONS), "")
    if not verb:
        return kind
    first, _, rest = kind.partition(" ")
    return f"{verb} {first.lower() if first in ('Log', 'Code') else first} {rest}".strip()


def _thin(title: str) -> bool:
    """Whether a question's key words only point at its paste ("What does this log say?")."""
    return not {w.lower() for w in title.split()} - _POINTING - _FORMAT


def _first_meaningful(paste: str) -> str:
    """The key words of a paste's first typed-looking line that has two or more of them."""
    for line in paste.splitlines():
        title = "" if looks_pasted(line) else _key_words(line)
        if len(title.split()) >= 2:
            return title
    return ""


def _key_words(text: str) -> str:
    """Up to TITLE_WORDS - 1 of a text's key words, in their order; "" where none has a letter
    (timestamps, ids and bare numbers never make a title)."""
    kept: list[str] = []
    seen: set[str] = set()
    for w in words(STAMPS.sub(" ", text)):
        low = w.lower()
        if low in _STOP or low in _FIRST_PERSON or _stem(w) in seen or (len(w) < 3 and not w.isdigit()):
            continue
        seen.add(_stem(w))
        kept.append(w)
        if len(kept) == TITLE_WORDS - 1:
            break
    if all(w.isdigit() for w in kept):
        return ""
    title = " ".join(kept)
    return title[0].upper() + title[1:]


def _first_words(text: str) -> str:
    return " ".join(text.split()[:TITLE_WORDS]).strip(" ?!.,:;")


def clean(raw: str) -> str:
    """A model's reply made into a title: its first non-empty line, without a "Title:"-like
    prefix, quotes, markdown or end punctuation, cut at TITLE_WORDS words."""
    line = next((ln for ln in raw.splitlines()
                 if ln.strip(" \t\"'*#`|-:") and not _MARKUP_LINE.match(ln)), "")
    line = _LINE_LEAD.sub("", _MARKUP.sub(" ", line))  # table cells, tags, a list's or a quote's lead
    line = _PREFIX.sub("", line)
    if ":" in line:
        before, after = line.rsplit(":", 1)
        if after.strip() and {w.lower() for w in words(before)} & {"title", "titled", "heading", "subject"}:
            line = after  # "In two sentences, the title could be: …"
    if ":" in line:  # "Trip to Rome: A three-day adventure…": a title is one phrase, the first
        before, after = line.split(":", 1)
        line = before if content_words(before) else after
    line = re.sub(r"[\"“”«»`*#_]", "", line)
    line = line.strip().strip("'‘’")
    kept = line.split()[:TITLE_WORDS]
    while len(kept) > 1 and kept[-1].lower().strip(".,:;!") in _DANGLING:
        kept.pop()  # a cut title must not end on "in", "to", "a"
    line = " ".join(kept).rstrip(" .,:;!-–—")
    return line


def plausible(title: str, chat_text: str, question: str | None = None) -> bool:
    """A title a person would accept: 1..TITLE_WORDS words, no first person, not about
    titles, and at least one content word shared with the chat; given the `question`, not
    the answer speaking of itself (starting as a reply does, or naming its form — a list, a
    table, five points — where the question does not)."""
    ws = [w.lower() for w in words(title)]
    if not ws or len(ws) > TITLE_WORDS:
        return False
    if any(w in _FIRST_PERSON for w in ws) or any(w in _META for w in ws):
        return False
    if question is not None:
        asked = {w.lower() for w in words(question)}
        if _REPLY_START.match(title) or any(w in _FORMAT and w not in asked for w in ws):
            return False
    return bool(content_words(title) & content_words(chat_text))


def choose(raw: str, question: str, answer: str = "") -> str:
    """The model's title if it is plausible, else the question's key words."""
    title = clean(raw)
    return title if plausible(title, f"{question}\n{answer}", question) else keyword_title(question)


def topic_source(question: str, answer_head: str) -> str:
    """What a first title is asked from: the question, its topic; the answer's head only where
    the question names too little to title ("hi", "go on")."""
    return answer_head if len(content_words(question)) < 2 else ""


def title_request(question: str, answer_head: str) -> list[dict]:
    asked, paste = split_paste(question)
    if paste:  # the typed question first, then as much of the paste as the request reads
        question = f"{asked}\n(pasted) {paste}" if asked else f"(pasted) {paste}"
    q = " ".join(question.split())[:SOURCE_CHARS]
    a = " ".join(answer_head.split())[:SOURCE_CHARS]
    about = f"Question: {q}" + (f"\nAnswer: {a}" if a else "")
    return [
        {"role": "system", "content": "You name chats. Reply with a title only: 2 to 5 words, no quotes, "
                                      "no full sentence, not in the first person."},
        {"role": "user", "content": f"{about}\n\nWrite a title for this chat."},
    ]


def drifted(source: str, answer: str) -> bool:
    """Whether the whole answer is about something the first title's source did not say:
    fewer than two of the answer's five most frequent content words (used at least twice)
    appear in the source."""
    counts: dict[str, int] = {}
    for w in words(answer):
        if w.lower() not in _STOP and len(w) > 2:
            counts[_stem(w)] = counts.get(_stem(w), 0) + 1
    top = [w for w, n in sorted(counts.items(), key=lambda kv: -kv[1]) if n >= 2][:5]
    if len(top) < 3:
        return False
    return len(set(top) & content_words(source)) < 2


@dataclass
class TitleJob:
    """One new chat's titling; `first` resolves with the first title written."""

    conversation_id: int
    question: str
    use_model: bool = True
    care: bool = False  # the question was met with care (engine/safety/care.py): a neutral title
    first: asyncio.Future = field(default_factory=lambda: asyncio.get_running_loop().create_future())
    task: asyncio.Task | None = None
    source: str = ""  # what the first title was made from
    written: list[str] = field(default_factory=list)


class Titles:
    """The titling half of `Turns`: wraps the answer's event stream."""

    PARAMS = SamplingParams(temperature=0.0, max_tokens=20, stop=("\n",))

    def __init__(self, turns: Completer):
        self.turns = turns
        self.jobs: dict[int, TitleJob] = {}

    async def ask_model(self, question: str, answer_head: str = "") -> str:
        """The model's cleaned, checked title, or the question's key words."""
        try:
            raw = await self.turns.complete(title_request(question, answer_head), self.PARAMS, priority=TITLE_PRIORITY)
        except Exception as exc:  # the title is a nicety: the chat still gets one
            log_event("title.failed", error=str(exc))
            raw = ""
        return choose(raw, question, answer_head)

    async def _save(self, job: TitleJob, title: str) -> str:
        from .records import clean_title

        e = self.turns.e
        title = clean_title(title) or FALLBACK
        if title == FALLBACK:
            title = await e.db(_numbered_fallback, e.store_for(job.conversation_id), job.conversation_id)
        await e.db(e.store_for(job.conversation_id).update_conversation, job.conversation_id, title=title)
        job.written.append(title)
        if not job.first.done():
            job.first.set_result(title)
        return title

    async def _first(self, job: TitleJob, head: str) -> str:
        job.source = f"{job.question}\n{head}"
        return await self._save(job, await self.ask_model(job.question, topic_source(job.question, head)))

    def _plain(self, job: TitleJob) -> str:
        """The title without the model: the question's key words, or for a message met with
        care a neutral one (a sidebar is seen by others; the message's words stay in the chat)."""
        return CARE_TITLE if job.care else keyword_title(job.question)

    async def use_model(self) -> bool:
        """Whether the model writes titles (setting `titles.model`: "auto", the default, where
        it has a spare KV slot, so the title decodes beside the answer instead of after it;
        "always"; "off"). Without the model, the question's key words name the chat at once."""
        e = self.turns.e
        choice = await e.settings.get(MODEL_KEY, "auto")
        if choice in ("off", False):
            return False
        if choice in ("always", True):
            return True
        model = getattr(e.loaded_worker, "model", None)
        return bool(getattr(model, "batched_decode", False)) and getattr(model, "slots", 1) > 1

    async def around(self, conversation_id: int, question: str, events: AsyncIterator[Event], *,
                     care: bool = False) -> AsyncIterator[Event]:
        """`events` with the chat's title written beside them. With the model (`use_model`):
        the request starts once the answer's first sentence exists, its TitleUpdate follows
        the event during which it finished (and is awaited before Finished); a second one,
        before Finished, only if the finished answer drifted from what the first was made of.
        Without: the question's key words, in a TitleUpdate just before Finished (unless a
        caller asked for the model's title meanwhile, `generate`: then that one). `care`: the
        question was met with care: CARE_TITLE, neither the model's nor the question's words."""
        job = TitleJob(conversation_id, question, use_model=not care and await self.use_model(), care=care)
        self.jobs[conversation_id] = job
        text: list[str] = []
        shown = 0
        try:
            async for event in events:
                if isinstance(event, Delta):
                    text.append(event.text)
                    if job.use_model and job.task is None:
                        head = first_sentence("".join(text))
                        if head is not None:
                            self._start(job, head)
                if not isinstance(event, Finished):
                    yield event  # Started first: then the title, as soon as it exists
                    for title in job.written[shown:]:
                        yield TitleUpdate(conversation_id, title)
                    shown = len(job.written)
                    continue
                answer = "".join(text)
                await self._settle(job, answer)
                for title in job.written[shown:]:
                    yield TitleUpdate(conversation_id, title)
                shown = len(job.written)
                revised = await self._revised(job, answer, event.reason)
                if revised is not None:
                    yield TitleUpdate(conversation_id, revised)
                    shown = len(job.written)
                yield event
        finally:
            await self._close(job)

    async def _settle(self, job: TitleJob, answer: str) -> None:
        """At the answer's end: its first title written (the model's, or the question's key words)."""
        if job.task is None and job.use_model and answer.strip():
            self._start(job, first_sentence(answer) or answer[:SOURCE_CHARS])
        if job.task is not None:
            try:
                await job.task
            except Exception as exc:
                log_event("title.failed", conversation_id=job.conversation_id, error=str(exc))
        if not job.written:  # no model, or no answer to read: the question's key words
            await self._save(job, self._plain(job))

    async def _revised(self, job: TitleJob, answer: str, reason: FinishReason) -> str | None:
        """A second title, saved, when the finished answer drifted from what the first was made
        of and the model names it differently; None otherwise."""
        if not (job.use_model and reason in (FinishReason.STOP, FinishReason.LENGTH)
                and len(answer) > len(job.source) - len(job.question) and drifted(job.source, answer)):
            return None
        revised = await self.ask_model(job.question, answer)
        if revised == job.written[-1]:
            return None
        return await self._save(job, revised)

    async def _close(self, job: TitleJob) -> None:
        """However the answer ended: the title request stopped, a title written, the job gone."""
        if job.task is not None and not job.task.done():
            job.task.cancel()
        if not job.written:
            # walked away from before any title: the question's key words
            try:
                await asyncio.shield(self._save(job, self._plain(job)))
            except Exception as exc:  # the chat is gone (discarded, deleted): nothing to name
                log_event("title.failed", conversation_id=job.conversation_id, error=str(exc))
        if self.jobs.get(job.conversation_id) is job:
            del self.jobs[job.conversation_id]

    def _start(self, job: TitleJob, head: str) -> None:
        if job.task is None:
            job.task = asyncio.ensure_future(self._first(job, head))

    async def generate(self, conversation_id: int, question: str, answer: str = "") -> str:
        """A title now, from the model: the one being written for this chat if its first
        answer is streaming (asked for now if that job had no model), else a new one."""
        job = self.jobs.get(conversation_id)
        if job is not None and not job.written:
            if job.task is None:
                self._start(job, first_sentence(answer) or answer[:SOURCE_CHARS])
            return await asyncio.shield(job.first)
        temp = TitleJob(conversation_id, question)
        return await self._save(temp, await self.ask_model(question, answer[:SOURCE_CHARS]))


def _numbered_fallback(store, conversation_id: int) -> str:
    """FALLBACK, numbered past the other chats that have it ("New chat 2"): on the database thread."""
    taken = {c.title for c in store.list_conversations(limit=10_000) if c.id != conversation_id and c.title}
    if FALLBACK not in taken:
        return FALLBACK
    n = 2
    while f"{FALLBACK} {n}" in taken:
        n += 1
    return f"{FALLBACK} {n}"
