"""Token probabilities on the OpenAI endpoints, in OpenAI's shapes.

`/v1/chat/completions` takes `logprobs: true` and `top_logprobs: 0..20`; each choice (and
each streamed chunk, for its own tokens) carries `logprobs: {"content": [{"token",
"logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}], "refusal": null}`.
`/v1/completions` takes `logprobs: 0..20` and answers with the legacy shape: `tokens`,
`token_logprobs`, `top_logprobs` (a token -> logprob object per token: the N likeliest
and the chosen one) and `text_offset` (where each token starts in the completion's text).

The numbers are the engine's (engine.inference.sampling.Sampler): the model's
distribution after the repetition guard, at temperature 1, before top-k/top-p/min-p,
which is what OpenAI reports too. A token's `token` is the text it added to the answer
(empty for a byte that only the next token completes into a character); `bytes` is that
text in UTF-8. A model that takes chat messages (a remote provider's) gives none: its
choices say `logprobs: null`.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..events import TokenLogprob
from ..inference.sampling import MAX_LOGPROBS


class LogprobsError(ValueError):
    """A logprobs field that is wrong; `param` names it."""

    def __init__(self, message: str, param: str):
        super().__init__(message)
        self.param = param


def _count(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_LOGPROBS:
        raise LogprobsError(f"{name} must be a whole number from 0 to {MAX_LOGPROBS}, got {value!r}", name)
    return value


def requested(body: dict, *, chat: bool) -> int | None:
    """How many alternatives per token the request asks for (SamplingParams.logprobs):
    None for no logprobs at all."""
    if chat:
        wanted, top = body.get("logprobs"), body.get("top_logprobs")
        if wanted is not None and not isinstance(wanted, bool):
            raise LogprobsError(f"logprobs must be true or false, got {wanted!r}", "logprobs")
        if top is not None:
            top = _count(top, "top_logprobs")
            if not wanted:
                raise LogprobsError("top_logprobs needs logprobs: true", "top_logprobs")
        return (top or 0) if wanted else None
    wanted = body.get("logprobs")
    return None if wanted is None else _count(wanted, "logprobs")


def _bytes(text: str) -> list[int]:
    return list(text.encode("utf-8"))


def chat_content(entries: Sequence[TokenLogprob]) -> list[dict]:
    """The `content` items of a chat choice's logprobs, one per token."""
    return [{"token": e.token, "logprob": e.logprob, "bytes": _bytes(e.token),
             "top_logprobs": [{"token": t.token, "logprob": t.logprob, "bytes": _bytes(t.token)} for t in e.top]}
            for e in entries]


def chat_logprobs(entries: Sequence[TokenLogprob]) -> dict:
    return {"content": chat_content(entries), "refusal": None}


def completion_logprobs(entries: Sequence[TokenLogprob], offset: int = 0) -> dict:
    """The legacy completions shape for `entries`, whose text starts at character `offset`
    of the completion."""
    tokens, logprobs, tops, offsets = [], [], [], []
    for e in entries:
        tokens.append(e.token)
        logprobs.append(e.logprob)
        top = {t.token: t.logprob for t in e.top}
        top.setdefault(e.token, e.logprob)  # the chosen token is always there, as OpenAI's
        tops.append(top)
        offsets.append(offset)
        offset += len(e.token)
    return {"tokens": tokens, "token_logprobs": logprobs, "top_logprobs": tops, "text_offset": offsets}
