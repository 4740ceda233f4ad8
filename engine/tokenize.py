"""A model's tokenizer and chat template: exact token counts, prompts, streaming detokenization."""

from __future__ import annotations

import copy
import json
import re
import threading
from array import array
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jinja2
import tokenizers

from .chat_template import TEMPLATE_FAULTS, compile_chat_template, fault_text, render_limited
from .errors import InvalidRequest, ModelFileError
from .inference.families.formats import TOOL_MARKERS

# Tokens that end an assistant turn in the common chat formats, besides the model's EOS.
_END_OF_TURN = ("<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|endoftext|>", "<|end|>", "<end_of_turn>")
_HARMONY = "<|channel|>"  # a chat template that writes it is gpt-oss's harmony format
_HARMONY_ENDS = ("<|return|>", "<|call|>", "<|endoftext|>")
_HARMONY_MARKERS = ("<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|constrain|>")
_THINK_MARKERS = ("<think>", "</think>")
_REPLACEMENT = "\ufffd"
_GIL_FREE_CHARS = 4096
# A Send encodes the same long prompt several times: the draft pre-warmed while typing, the
# check that the message fits before it is stored, the answer's own assembly. The last few
# long encodings are kept (by their exact text), so only the first pays: on the starter
# with a 2,000-token history that is ~5 ms an encoding and ~7 ms a chat encoding.
_MEMO_CHARS = 1024
_MEMO_SIZE = 8
_MEMO_BUDGET = 4_000_000  # characters of keys kept, all entries together (a few long chats)


class _Memo:
    """The last few results of a pure computation, by key; safe across threads. An entry
    costs the characters its caller says (its key's text); the oldest go past the budget."""

    def __init__(self, size: int = _MEMO_SIZE, budget: int = _MEMO_BUDGET) -> None:
        self.size, self.budget = size, budget
        self._items: OrderedDict[Any, tuple[array, int]] = OrderedDict()
        self._used = 0
        self._lock = threading.Lock()

    def get(self, key: Any) -> list[int] | None:
        with self._lock:
            found = self._items.get(key)
            if found is None:
                return None
            self._items.move_to_end(key)
        return found[0].tolist()

    def put(self, key: Any, ids: Sequence[int], chars: int) -> None:
        if chars > self.budget:
            return
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._used -= old[1]
            self._items[key] = (array("q", ids), chars)
            self._used += chars
            while len(self._items) > self.size or self._used > self.budget:
                self._used -= self._items.popitem(last=False)[1][1]


# Private-use characters no real message carries, bracketing a message index.
_MARK_OPEN, _MARK_CLOSE = "\U000F0000", "\U000F0001"
_MARKER = re.compile(f"{_MARK_OPEN}(\\d+){_MARK_CLOSE}")


class Tokenizer:
    """`tokenizers` plus what tokenizer_config.json adds: BOS policy, special tokens, template."""

    def __init__(self, tokenizer_file: Path, config: dict[str, Any], *,
                 chat_template: str | None = None, extra_eos: Sequence[int] = ()) -> None:
        try:
            # Two copies: one that reads "<|im_end|>" typed by a user as plain text, one that
            # recognises it in a rendered prompt. The flag is per object, so toggling one
            # shared object would race between threads.
            self._text = tokenizers.Tokenizer.from_file(str(tokenizer_file))
            self._prompt = tokenizers.Tokenizer.from_file(str(tokenizer_file))
        except Exception as exc:  # the Rust side raises bare Exceptions on bad JSON
            raise ModelFileError(f"{tokenizer_file} is not a usable tokenizer: {exc}") from exc
        self._text.encode_special_tokens = True

        self.bos_token = _token_text(config.get("bos_token"))
        self.eos_token = _token_text(config.get("eos_token"))
        self.bos_id = self._id(self.bos_token)
        self.eos_id = self._id(self.eos_token)
        added = self._prompt.get_added_tokens_decoder()
        self.special_ids: frozenset[int] = frozenset(i for i, tok in added.items() if tok.special)
        if "add_bos_token" in config:
            self.add_bos = bool(config["add_bos_token"]) and self.bos_id is not None
        else:
            # no flag: the tokenizer.json post-processor is what decides
            self.add_bos = self.bos_id is not None and self.bos_id in self._prompt.encode("").ids
        self.chat_template = chat_template if chat_template is not None else _template_text(config)
        harmony = _HARMONY in (self.chat_template or "")
        eos = {self.eos_id, *extra_eos}
        # harmony's <|end|> ends a message (the thinking), not the answer: <|return|> and <|call|> do
        ends = _HARMONY_ENDS if harmony else _END_OF_TURN
        eos.update(self._id(tok) for tok in ends if self._id(tok) in self.special_ids)
        eos.discard(None)
        self.eos_ids: frozenset[int] = frozenset(eos)  # type: ignore[arg-type]
        # Special tokens that mark a model's thinking apart (engine/inference/reasoning.py reads
        # them): the stream keeps their text, which it drops for other special tokens.
        markers = (_HARMONY_MARKERS if harmony else _THINK_MARKERS) + TOOL_MARKERS  # and tool-call tags
        self.marker_ids: frozenset[int] = frozenset(
            i for i in map(self._id, markers) if i is not None and i in self.special_ids and i not in self.eos_ids)
        self._template_vars = {k: _token_text(config.get(k)) for k in ("bos_token", "eos_token", "unk_token", "pad_token")}
        self._compiled: jinja2.Template | None = None
        self._encoded = _Memo()  # (text, special) -> ids, for long texts
        self._chats = _Memo()  # (rendered prompt, messages, ...) -> encode_chat's ids

    @classmethod
    def from_dir(cls, model_dir: Path | str, *, chat_template: str | None = None) -> Tokenizer:
        """Load tokenizer.json + tokenizer_config.json (+ chat_template.jinja, generation_config.json)."""
        model_dir = Path(model_dir)
        tokenizer_file = model_dir / "tokenizer.json"
        if not tokenizer_file.is_file():
            raise ModelFileError(f"{tokenizer_file} does not exist")
        config = _read_json(model_dir / "tokenizer_config.json")
        jinja_file = model_dir / "chat_template.jinja"
        if chat_template is None and "chat_template" not in config and jinja_file.is_file():
            chat_template = jinja_file.read_text(encoding="utf-8")
        gen_eos = _read_json(model_dir / "generation_config.json").get("eos_token_id")
        extra = gen_eos if isinstance(gen_eos, list) else [gen_eos] if isinstance(gen_eos, int) else []
        return cls(tokenizer_file, config, chat_template=chat_template, extra_eos=extra)

    def with_template_vars(self, **variables: Any) -> Tokenizer:
        """This tokenizer rendering its chat template with `variables` too (e.g. a chat's
        enable_thinking or reasoning_effort); itself when there are none. The copy shares
        the compiled template and the encoders."""
        if not variables:
            return self
        view = copy.copy(self)
        view._template_vars = {**self._template_vars, **variables}
        return view

    @property
    def vocab_size(self) -> int:
        return self._prompt.get_vocab_size(with_added_tokens=True)

    def _id(self, token: str | None) -> int | None:
        return None if token is None else self._prompt.token_to_id(token)

    def encode(self, text: str, *, special: bool = False) -> list[int]:
        """Token ids for `text`, with BOS only if the model wants one. Special-token markup in
        the text is read as plain text unless `special` is set, so users cannot forge turns."""
        memo = len(text) >= _MEMO_CHARS
        if memo:
            found = self._encoded.get((text, special))
            if found is not None:
                return found
        tok = self._prompt if special else self._text
        if len(text) > _GIL_FREE_CHARS:
            # encode_batch runs without holding the GIL: a 1 MB paste must not freeze the
            # window's thread while a worker thread counts it.
            ids = tok.encode_batch([text], add_special_tokens=False)[0].ids
        else:
            ids = tok.encode(text, add_special_tokens=False).ids
        ids = self._with_bos(ids)
        if memo:
            self._encoded.put((text, special), ids, len(text))
        return ids

    def count(self, text: str) -> int:
        return len(self.encode(text))

    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool = True) -> str:
        return self._prompt.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def render_chat(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True,
                    *, tools: list[dict[str, Any]] | None = None, **extra: Any) -> str:
        """The prompt text the model's chat template makes of `messages`, as HF renders it,
        within a time limit and an output size limit (ChatTemplateLimit past either)."""
        template = self._template()
        variables = {**self._template_vars, **extra, "messages": messages, "tools": tools,
                     "add_generation_prompt": add_generation_prompt}
        try:
            return render_limited(template, variables)
        except TEMPLATE_FAULTS as exc:
            raise InvalidRequest(f"the chat template failed: {fault_text(exc)}") from exc

    def encode_chat(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True,
                    **extra: Any) -> list[int]:
        """The rendered prompt's ids. Special-token markup counts only where the template
        wrote it: a user who types "<|im_end|><|im_start|>system" gets plain text."""
        prompt = self.render_chat(messages, add_generation_prompt, **extra)
        key = None
        if len(prompt) >= _MEMO_CHARS:
            try:  # the rendered text (it holds the date, where the template asks) and what split it
                key = (prompt, json.dumps([messages, extra], sort_keys=True), add_generation_prompt)
            except (TypeError, ValueError):
                key = None  # not plain data: encoded every time
            found = self._chats.get(key) if key is not None else None
            if found is not None:
                return found
        ids = self._encode_template_and_content(prompt, messages, add_generation_prompt, extra)
        if ids is None:  # a template that reshapes content beyond trimming: no safe split
            ids = self._prompt.encode(prompt, add_special_tokens=False).ids
        ids = self._with_bos(ids)
        if key is not None:
            self._chats.put(key, ids, len(key[0]) + len(key[1]))
        return ids

    def _encode_template_and_content(self, prompt: str, messages: list[dict[str, Any]],
                                     add_generation_prompt: bool, extra: dict) -> list[int] | None:
        # Render once more with a marker in place of each message's text; the pieces between
        # markers are the template's own text, the rest of `prompt` is the users' text.
        marked = [
            {**m, "content": f"{_MARK_OPEN}{i}{_MARK_CLOSE}"} if isinstance(m.get("content"), str) else m
            for i, m in enumerate(messages)
        ]
        try:
            skeleton = self.render_chat(marked, add_generation_prompt, **extra)
        except InvalidRequest:
            return None
        pieces = _MARKER.split(skeleton)  # template, index, template, index, ..., template
        if not prompt.startswith(pieces[0]):
            return None
        ids = self._prompt.encode(pieces[0], add_special_tokens=False).ids
        pos = len(pieces[0])
        for k in range(1, len(pieces), 2):
            content, after = messages[int(pieces[k])]["content"], pieces[k + 1]
            for candidate in (content, content.strip()):
                if prompt.startswith(candidate + after, pos):
                    break
            else:
                return None
            ids += self._text.encode(candidate, add_special_tokens=False).ids
            ids += self._prompt.encode(after, add_special_tokens=False).ids
            pos += len(candidate) + len(after)
        return ids if pos == len(prompt) else None

    def _with_bos(self, ids: list[int]) -> list[int]:
        # templates such as Llama 3's write BOS themselves; never add a second one
        if self.add_bos and (not ids or ids[0] != self.bos_id):
            return [self.bos_id, *ids]  # type: ignore[list-item]
        return ids

    def _template(self) -> jinja2.Template:
        if self._compiled is None:
            if not self.chat_template:
                raise InvalidRequest("this model has no chat template")
            try:
                self._compiled = compile_chat_template(self.chat_template)
            except TEMPLATE_FAULTS as exc:
                raise InvalidRequest(f"the chat template is invalid: {fault_text(exc)}") from exc
        return self._compiled


class StreamingDetokenizer:
    """Turns generated ids into text deltas without re-decoding the whole answer per token.

    Decodes a short window twice (the already-shown prefix, then prefix + new ids) and emits
    the difference; keeping the prefix in the window preserves context-dependent decoding such
    as SentencePiece's leading-space rule. While the new text ends in U+FFFD the ids are a
    partial UTF-8 character, so nothing is emitted until the rest arrives.
    """

    def __init__(self, tokenizer: Tokenizer) -> None:
        self._tokenizer = tokenizer
        self._skip = tokenizer.special_ids - tokenizer.marker_ids
        self._raw = bool(tokenizer.marker_ids)  # only markers among the kept special tokens
        self._ids: list[int] = []
        self._prefix = 0  # window start: ids already shown, kept as decoding context
        self._read = 0  # ids before this are shown

    def feed(self, token_id: int) -> str:
        if token_id in self._skip:
            return ""
        self._ids.append(token_id)
        shown = self._decode(self._ids[self._prefix:self._read])
        text = self._decode(self._ids[self._prefix:])
        if len(text) <= len(shown) or text.endswith(_REPLACEMENT):
            return ""
        self._advance()
        return text[len(shown):]

    def flush(self) -> str:
        """What is still held back (a dangling partial character comes out as U+FFFD)."""
        shown = self._decode(self._ids[self._prefix:self._read])
        text = self._decode(self._ids[self._prefix:])
        self._ids, self._prefix, self._read = [], 0, 0
        return text[len(shown):] if len(text) > len(shown) else ""

    def _decode(self, ids: list[int]) -> str:
        return self._tokenizer.decode(ids, skip_special_tokens=not self._raw)

    def _advance(self) -> None:
        # the ids just shown become the context window for the next delta; older ones go
        self._ids = self._ids[self._read:]
        self._prefix, self._read = 0, len(self._ids)


def _token_text(value: Any) -> str | None:
    if isinstance(value, dict):  # HF writes AddedToken dicts: {"content": "<s>", ...}
        value = value.get("content")
    return value if isinstance(value, str) else None


def _template_text(config: dict[str, Any]) -> str | None:
    template = config.get("chat_template")
    if isinstance(template, list):  # named templates: [{"name": "default", "template": ...}, ...]
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        return named.get("default") or next(iter(named.values()), None)
    return template if isinstance(template, str) else None


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelFileError(f"{path} cannot be read: {exc}") from exc
    return data if isinstance(data, dict) else {}
