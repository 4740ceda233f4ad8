"""Rebuild a Hugging Face `tokenizers` tokenizer (and tokenizer_config) from GGUF metadata.

Two vocab kinds: "gpt2" (byte-level BPE with merges, split by a regex that depends on the
GGUF `pre` name, as llama.cpp does) and "llama" (SentencePiece BPE: scores instead of merges,
"▁" for spaces, <0xXX> byte fallback). Control tokens become special added tokens so chat
markers like <|im_start|> encode to one id.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

from ..errors import ModelFileError, UnsupportedArchitecture

log = logging.getLogger(__name__)

# tokenizer.ggml.token_type values
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6

_GPT2 = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
_LLAMA3 = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"""
           r"""| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
_QWEN2 = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"""
          r"""| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
_TEKKEN = (r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"""
           r"""|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"""
           r"""|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
# o200k's split (Phi-4-mini, Llama 4): TEKKEN's word rule with English contractions kept on
_GPT4O = (r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"""
          r"""|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"""
          r"""|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+""")

# GGUF `pre` name -> (regexes applied in turn, ignore_merges); mirrors llama.cpp's table.
_PRE_TOKENIZERS: dict[str, tuple[tuple[str, ...], bool]] = {}
for _names, _spec in (
    (("gpt2", "gpt-2", "mpt", "olmo", "jais", "trillion"), ((_GPT2,), False)),
    (("smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva"),
     ((r"\p{N}", _GPT2), False)),
    (("llama3", "llama-v3", "llama-bpe", "falcon3", "pixtral"), ((_LLAMA3,), True)),
    (("smaug-bpe", "dbrx"), ((_LLAMA3,), False)),
    (("qwen2", "stablelm2", "hunyuan", "deepseek-r1-qwen", "megrez"), ((_QWEN2,), False)),
    (("tekken",), ((_TEKKEN,), True)),
    (("gpt-4o", "llama4"), ((_GPT4O,), False)),
):
    for _name in _names:
        _PRE_TOKENIZERS[_name] = _spec

END_OF_TURN_TOKENS = ("<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|endoftext|>", "<|end|>", "<end_of_turn>")


def build_tokenizer(meta: dict[str, Any], source: Path, context_length: int) -> tuple[Tokenizer, dict[str, Any]]:
    """The tokenizer for tokenizer.json and the dict for tokenizer_config.json."""
    kind = meta.get("tokenizer.ggml.model")
    tokens: list[str] = meta.get("tokenizer.ggml.tokens") or []
    if not tokens:
        raise UnsupportedArchitecture(f"{source} has no tokenizer vocabulary (tokenizer.ggml.tokens)")
    types: list[int] = meta.get("tokenizer.ggml.token_type") or [NORMAL] * len(tokens)
    if kind not in ("gpt2", "llama"):
        raise UnsupportedArchitecture(f"{source} uses the tokenizer model {kind!r}; Wren reads 'gpt2' and 'llama'")
    try:
        tok = _byte_level_bpe(meta, tokens, source) if kind == "gpt2" else _sentencepiece_bpe(meta, tokens, types)
    except Exception as exc:  # the Rust side raises bare Exceptions, e.g. a merge of unknown tokens
        raise ModelFileError(f"{source} has an unusable tokenizer: {exc}") from exc

    special = [AddedToken(t, special=True, normalized=False)
               for t, ty in zip(tokens, types) if ty in (CONTROL, UNKNOWN)]
    plain = [AddedToken(t, special=False, normalized=False)
             for t, ty in zip(tokens, types) if ty == USER_DEFINED]
    tok.add_special_tokens(special)
    if plain:
        tok.add_tokens(plain)

    def token_at(key: str) -> str | None:
        idx = meta.get(key)
        return tokens[idx] if isinstance(idx, int) and 0 <= idx < len(tokens) else None

    bos, eos = token_at("tokenizer.ggml.bos_token_id"), token_at("tokenizer.ggml.eos_token_id")
    # llama.cpp's defaults when the flags are absent: SentencePiece vocabs add BOS, BPE ones don't
    add_bos = bool(meta.get("tokenizer.ggml.add_bos_token", kind == "llama")) and bos is not None
    add_eos = bool(meta.get("tokenizer.ggml.add_eos_token", False)) and eos is not None
    tok.post_processor = _bos_eos_processor(tok, bos if add_bos else None, eos if add_eos else None)

    config: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": bos,
        "eos_token": eos,
        "unk_token": token_at("tokenizer.ggml.unknown_token_id"),
        "pad_token": token_at("tokenizer.ggml.padding_token_id"),
        "add_bos_token": add_bos,
        "add_eos_token": add_eos,
        "clean_up_tokenization_spaces": False,
        "model_max_length": context_length,
    }
    template = meta.get("tokenizer.chat_template")
    if template:
        config["chat_template"] = template
    return tok, config


def _byte_level_bpe(meta: dict[str, Any], tokens: list[str], source: Path) -> Tokenizer:
    pre = meta.get("tokenizer.ggml.pre")
    spec = _PRE_TOKENIZERS.get(pre or "gpt2")
    if spec is None:
        # llama.cpp refuses unknown names; a near miss still chats, so warn rather than fail
        log.warning("%s: unknown tokenizer pre-processing %r; using GPT-2's split, counts may differ", source, pre)
        spec = _PRE_TOKENIZERS["gpt2"]
    regexes, ignore_merges = spec
    merges = [tuple(m.split(" ", 1)) for m in meta.get("tokenizer.ggml.merges") or []]
    vocab = {t: i for i, t in reversed(list(enumerate(tokens)))}  # first id wins on duplicates
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False,
                               ignore_merges=ignore_merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(rx), behavior="isolated", invert=False) for rx in regexes]
        + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
    )
    tok.decoder = decoders.ByteLevel()
    return tok


def _sentencepiece_bpe(meta: dict[str, Any], tokens: list[str], types: list[int]) -> Tokenizer:
    scores: list[float] = meta.get("tokenizer.ggml.scores") or [-float(i) for i in range(len(tokens))]
    vocab = {t: i for i, t in reversed(list(enumerate(tokens)))}
    merges = meta.get("tokenizer.ggml.merges")
    if merges:
        pairs = [tuple(m.split(" ", 1)) for m in merges]
    else:
        pairs = _merges_from_scores(tokens, types, scores, vocab)
    unk_id = meta.get("tokenizer.ggml.unknown_token_id", 0)
    unk = tokens[unk_id] if isinstance(unk_id, int) and 0 <= unk_id < len(tokens) else None
    tok = Tokenizer(models.BPE(vocab=vocab, merges=pairs, unk_token=unk, fuse_unk=True, byte_fallback=True))
    # llama.cpp puts a space before every run of text that starts the input or follows a
    # special token; the HF "legacy" normalizer does the same per segment between added tokens
    add_space_prefix = bool(meta.get("tokenizer.ggml.add_space_prefix", True))
    steps = [normalizers.Prepend("▁")] if add_space_prefix else []
    tok.normalizer = normalizers.Sequence(steps + [normalizers.Replace(" ", "▁")])
    tail = [decoders.Strip(content=" ", left=1, right=0)] if add_space_prefix else []
    tok.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()] + tail
    )
    return tok


def _merges_from_scores(tokens: list[str], types: list[int], scores: list[float],
                        vocab: dict[str, int]) -> list[tuple[str, str]]:
    """SentencePiece BPE merges two pieces when their union is a higher-scored piece; list every
    such split, best union first, which is the rank order `models.BPE` applies."""
    found: list[tuple[float, int, int, int, str, str]] = []
    for merged_id, piece in enumerate(tokens):
        if types[merged_id] != NORMAL or len(piece) < 2:
            continue
        for cut in range(1, len(piece)):
            left, right = piece[:cut], piece[cut:]
            left_id, right_id = vocab.get(left), vocab.get(right)
            if left_id is not None and right_id is not None:
                found.append((-scores[merged_id], merged_id, left_id, right_id, left, right))
    found.sort()
    return [(left, right) for *_, left, right in found]


def _bos_eos_processor(tok: Tokenizer, bos: str | None, eos: str | None) -> processors.PostProcessor | None:
    """A post-processor so transformers' AutoTokenizer adds BOS/EOS like llama.cpp does."""
    if bos is None and eos is None:
        return None
    head = f"{bos}:0 " if bos else ""
    tail = f" {eos}:0" if eos else ""
    pair_head = f"{bos}:1 " if bos else ""
    pair_tail = f" {eos}:1" if eos else ""
    ids = [(t, tok.token_to_id(t)) for t in {bos, eos} if t is not None]
    return processors.TemplateProcessing(
        single=f"{head}$A:0{tail}",
        pair=f"{head}$A:0{tail} {pair_head}$B:1{pair_tail}",
        special_tokens=ids,
    )
