"""A backend that replays scripted answers: for tests, the GUI's demos and benchmarks.

It goes through the same path as a real model (tokenizer, sampler, detokenizer, stop
strings, store), only the logits are made up: all mass on the next scripted token.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ...tokenize import Tokenizer
from ..backend import ModelBase, check_slot

Reply = Callable[[str], str]  # rendered prompt text -> answer text


class ScriptedBackend:
    name = "scripted"

    def __init__(self, reply: Reply | str = "Hello from Wren.", *, delay: float = 0.0,
                 prefill_delay: float = 0.0, context_length: int = 4096,
                 fail_load: Exception | None = None):
        self.reply = (lambda _prompt, text=reply: text) if isinstance(reply, str) else reply
        self.delay = delay  # seconds per decoded token, to imitate a real model's pace
        self.prefill_delay = prefill_delay  # seconds per prefill call
        self.context_length = context_length
        self.fail_load = fail_load
        self.loaded: list[ScriptedModel] = []

    def available(self) -> bool:
        return True

    def unavailable_reason(self) -> str | None:
        return None

    def load(self, model_dir: Path, *, dtype: str = "auto", slots: int | None = None) -> ScriptedModel:
        """One KV slot whatever `slots` asks: scripted answers run one at a time."""
        if self.fail_load is not None:
            raise self.fail_load
        model = ScriptedModel(self, Tokenizer.from_dir(model_dir))
        self.loaded.append(model)
        return model


def _cue(tokenizer: Tokenizer, probe: list[dict], **variables: Any) -> str:
    """What the chat template adds to start the model's answer (with these variables)."""
    asked = tokenizer.render_chat(probe, add_generation_prompt=True, **variables)
    return asked[len(tokenizer.render_chat(probe, add_generation_prompt=False, **variables)):]


class ScriptedModel(ModelBase):
    backend = "scripted"
    kv_export = True  # its "cache" is the id list, which export_kv copies

    def __init__(self, owner: ScriptedBackend, tokenizer: Tokenizer):
        self.owner = owner
        self.tokenizer = tokenizer
        self.context_length = owner.context_length
        self.vocab_size = tokenizer.vocab_size
        self.prompts: list[str] = []  # every prompt it was asked to answer, for assertions
        self.prefill_calls = 0
        self.imports = 0  # saved KV states restored (prefix cache hits)
        self._ids: list[int] = []
        self._script: list[int] = []
        self._cursor = 0
        self._end = min(tokenizer.eos_ids)
        # Only a prompt that ends where the model starts answering gets a reply: the worker
        # also prefills long prompts in pieces, and those pieces are not questions. A
        # thinking model's cue may close an empty <think> (a chat with thinking off).
        probe = [{"role": "user", "content": "?"}]
        self._answer_cue = _cue(tokenizer, probe)
        off = _cue(tokenizer, probe, enable_thinking=False)
        self._thinking_off_cue = off if off != self._answer_cue else None

    def _logits(self) -> np.ndarray:
        target = self._script[self._cursor] if self._cursor < len(self._script) else self._end
        out = np.full(self.vocab_size, -1e9, dtype=np.float32)
        out[target] = 0.0
        return out

    def prefill(self, ids: Sequence[int], start: int, slot: int = 0) -> np.ndarray:
        check_slot(slot, self.slots)
        self.prefill_calls += 1
        if self.owner.prefill_delay:
            time.sleep(self.owner.prefill_delay)
        self._ids = self._ids[:start] + list(ids)
        prompt = self.tokenizer.decode(self._ids, skip_special_tokens=False)
        self._cursor = 0
        if not prompt.endswith(self._answer_cue) and not (
                self._thinking_off_cue and prompt.endswith(self._thinking_off_cue)):
            self._script = []
            return self._logits()
        self.prompts.append(prompt)
        self._script = self.tokenizer.encode(self.owner.reply(prompt))
        return self._logits()

    def decode(self, token: int, pos: int, slot: int = 0) -> np.ndarray:
        check_slot(slot, self.slots)
        if self.owner.delay:
            time.sleep(self.owner.delay)
        self._ids = self._ids[:pos] + [token]
        self._cursor += 1
        return self._logits()

    def export_kv(self, n: int, slot: int = 0) -> tuple[list[int], int]:
        """The first `n` cached positions, and what keeping them costs."""
        check_slot(slot, self.slots)
        return list(self._ids[:n]), 64 * n

    def import_kv(self, state: list[int], n: int, slot: int = 0) -> None:
        check_slot(slot, self.slots)
        self.imports += 1
        self._ids = list(state[:n])

    def close(self) -> None:
        self._ids = []
