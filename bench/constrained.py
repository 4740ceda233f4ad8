"""Decode speed with and without constrained decoding on the starter model; prints JSON.

    .venv/bin/python bench/constrained.py [--backend torch-cpu|mlx] [--runs 5] [--tokens 128]
        [--threads N] [--compare-libraries]

Each run decodes --tokens tokens after a tool-using chat prompt in three modes, interleaved
(free, constrained, lazy, free, ...) so a shared machine's drift hits them alike:
- "free": no constraint;
- "constrained": a forced tool call whose arguments follow a JSON schema with an open-ended
  array of objects (so the grammar stays active for every token; should the model close
  it, a fresh constraint starts and decoding goes on);
- "lazy": the "auto" tool choice: free text in which a call, once started, is constrained.
Every token is sampled (temperature 0.7, fixed seed) through Wren's Sampler, the model's
decode step runs exactly as in the worker, and an end-of-turn token does not stop the run.
The figures are medians over --runs runs: tokens/s per mode, the constrained/free ratio,
and the time the constraint's mask and advance took per token.

--compare-libraries times the grammar engines Wren could use on the starter's vocabulary
(llguidance, xgrammar, outlines-core; those importable): grammar build time and the time per
token to compute the allowed-token bitmask and advance, following a fixed valid instance.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cpuinfo import cpu

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

ARGS_SCHEMA = {"type": "object", "properties": {
    "query": {"type": "string"},
    "results": {"type": "array", "items": {"type": "object", "properties": {
        "title": {"type": "string"}, "year": {"type": "integer"}, "score": {"type": "number"},
        "tags": {"type": "array", "items": {"enum": ["new", "old", "popular", "rare"]}}},
        "required": ["title", "year"]}}},
    "required": ["query", "results"]}
TOOLS = [{"type": "function", "function": {"name": "search_books", "description": "Search a library catalogue",
                                            "parameters": ARGS_SCHEMA}}]
SYSTEM = ("You can call tools. To call one, write <tool_call>\n{\"name\": NAME, \"arguments\": ARGS}\n"
          "</tool_call>\nTools: " + json.dumps(TOOLS))
QUESTION = "Find me a few classic novels about the sea, with their years."


def machine() -> dict:
    return cpu()


class _Timed:
    """Wraps a ConstraintState and adds up the time its calls take."""

    def __init__(self, state) -> None:
        self.state, self.seconds = state, 0.0

    def restrict(self, logits):
        t0 = time.perf_counter()
        try:
            return self.state.restrict(logits)
        finally:
            self.seconds += time.perf_counter() - t0

    def advance(self, token):
        t0 = time.perf_counter()
        try:
            self.state.advance(token)
        finally:
            self.seconds += time.perf_counter() - t0

    @property
    def complete(self):
        return self.state.complete


def decode_run(model, tokenizer, prompt: list[int], tokens: int, constraint, seed: int) -> tuple[float, float, int]:
    """(tokens/s, constraint seconds per token, constraint restarts) for one run."""
    from wren.engine.inference.sampling import Sampler, SamplingParams

    params = SamplingParams(seed=seed, temperature=0.7, max_tokens=tokens)

    def fresh():
        return _Timed(constraint.start(tokenizer)) if constraint is not None else None

    timed = fresh()
    sampler = Sampler(params, timed)
    spent, restarts = 0.0, 0
    history = list(prompt)
    logits = model.prefill(prompt, 0)
    token = sampler(logits, history)
    t0 = time.perf_counter()
    for _ in range(tokens):
        history.append(token)
        logits = model.decode(token, len(history) - 1)
        if timed is not None and (timed.complete or token in tokenizer.eos_ids):
            spent += timed.seconds
            timed = fresh()  # the constrained text ended: keep the grammar busy
            sampler.constraint = timed
            restarts += 1
        token = sampler(logits, history)
    elapsed = time.perf_counter() - t0
    if timed is not None:
        spent += timed.seconds
    return tokens / elapsed, spent / (tokens + 1), restarts


def measure(args) -> dict:
    from wren.engine.inference.constrain import Constraint
    from wren.engine.inference.select import resolve_backend
    from wren.engine.modelhub.registry import ModelRegistry
    from wren.engine.tokenize import Tokenizer

    info = ModelRegistry().ensure_starter()
    tokenizer = Tokenizer.from_dir(info.path)
    backend = resolve_backend(args.backend)
    options: dict = {}
    if args.backend.startswith("torch"):
        import torch

        if args.threads:
            torch.set_num_threads(args.threads)
        options["compile"] = args.compile
    model = backend.load(info.path, **options)
    if hasattr(model, "wait_compiled"):
        model.wait_compiled()
    prompt = tokenizer.encode_chat([{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}])
    modes = {
        "free": None,
        "constrained": Constraint.tool_call("search_books", ARGS_SCHEMA),
        "lazy": Constraint.tool_calls({"search_books": ARGS_SCHEMA}),
    }
    t0 = time.perf_counter()
    from wren.engine.inference.constrain import prepare

    prepare(tokenizer)  # once per model: llguidance's view of the vocabulary
    tokenizer_s = time.perf_counter() - t0
    decode_run(model, tokenizer, prompt, 8, modes["constrained"], 0)  # warm-up
    rates: dict[str, list[float]] = {m: [] for m in modes}
    mask_us: dict[str, list[float]] = {m: [] for m in modes}
    restarts: dict[str, int] = {m: 0 for m in modes}
    for run in range(args.runs):
        for mode, constraint in modes.items():
            rate, per_token, restarted = decode_run(model, tokenizer, prompt, args.tokens, constraint, seed=run)
            rates[mode].append(rate)
            print(f"run {run + 1}/{args.runs} {mode}: {rate:.1f} tokens/s, constraint {per_token * 1e6:.0f} us/token",
                  file=sys.stderr, flush=True)  # progress: a busy machine can take many minutes
            mask_us[mode].append(per_token * 1e6)
            restarts[mode] += restarted
    model.close()
    free = statistics.median(rates["free"])
    result = {"backend": model.backend, "model": info.name, "tokens": args.tokens, "runs": args.runs,
              "llguidance_tokenizer_s": round(tokenizer_s, 3)}
    for mode in modes:
        rate = statistics.median(rates[mode])
        entry = {"decode_tokens_per_s": round(rate, 1), "runs": [round(x, 1) for x in rates[mode]]}
        if mode != "free":
            entry.update(vs_free=round(rate / free, 3), slower_pct=round(100 * (1 - rate / free), 1),
                         constraint_us_per_token=round(statistics.median(mask_us[mode]), 1),
                         constraint_restarts=restarts[mode])
        result[mode] = entry
    return result


# -- the grammar engines compared ------------------------------------------------------------

@dataclass
class _Tokenizer:
    """The starter model's tokenizer, as each grammar library is given it."""

    hf: Any  # tokenizers.Tokenizer
    path: Path  # its tokenizer.json
    vocab: int
    eos: int


# a library's matcher factory, its per-token step (mask, then advance), its grammar build
# seconds and its tokenizer setup seconds (None: none of its own)
_Prepared = tuple[Callable[[], Any], Callable[[Any, Any, int], None], float, float | None]


def compare_libraries() -> dict:
    """Build time and per-token mask + advance time of each importable grammar engine."""
    from wren.engine.modelhub.registry import ModelRegistry

    info = ModelRegistry().ensure_starter()
    import tokenizers

    hf = tokenizers.Tokenizer.from_file(str(info.path / "tokenizer.json"))
    tok = _Tokenizer(hf, info.path / "tokenizer.json", hf.get_vocab_size(with_added_tokens=True),
                     hf.token_to_id("<|im_end|>"))
    instance = {"query": "sea novels", "results": [
        {"title": "Moby-Dick; or, The Whale", "year": 1851, "score": 9.5, "tags": ["old", "popular"]},
        {"title": "The Old Man and the Sea", "year": 1952, "tags": ["popular"]},
        {"title": "Twenty Thousand Leagues Under the Seas", "year": 1870, "score": 8.25, "tags": []}]}
    text = json.dumps(instance, separators=(", ", ": "))
    ids = hf.encode(text, add_special_tokens=False).ids
    out: dict = {"vocab": tok.vocab, "instance_tokens": len(ids)}
    for name, prepare in (("llguidance", _llguidance), ("xgrammar", _xgrammar), ("outlines-core", _outlines_core)):
        try:
            build, step, setup_s, tok_s = prepare(tok)
        except ImportError as exc:
            out[name] = f"not importable: {exc}"
            continue
        out[name] = _timed(ids, (tok.vocab + 31) // 32, build, step, setup_s)
        if tok_s is not None:
            out[name]["tokenizer_ms"] = round(tok_s * 1e3, 1)
    return out


def _timed(ids: list[int], words: int, build: Callable[[], Any], step: Callable[[Any, Any, int], None],
           setup_s: float) -> dict:
    """Per token: the wall-clock median, and the process CPU time (every thread) per token
    over each run, which a busy shared machine's preemptions do not inflate."""
    import numpy as np

    walls, cpus = [], []
    for _ in range(5):
        state = build()
        mask = np.zeros(words, dtype=np.int32)
        c0 = time.process_time()
        for token in ids:
            t0 = time.perf_counter()
            step(state, mask, token)
            walls.append(time.perf_counter() - t0)
        cpus.append((time.process_time() - c0) / len(ids))
    t0 = time.perf_counter()
    build()
    return {"setup_ms": round(setup_s * 1e3, 1), "matcher_ms": round((time.perf_counter() - t0) * 1e3, 2),
            "wall_us_per_token_median": round(statistics.median(walls) * 1e6, 1),
            "cpu_us_per_token": round(statistics.median(cpus) * 1e6, 1)}


def _llguidance(tok: _Tokenizer) -> _Prepared:
    import llguidance

    t0 = time.perf_counter()
    lt = llguidance.LLTokenizer(tok.hf.to_str(), eos_token=tok.eos)
    tok_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    grammar = llguidance.LLMatcher.grammar_from_json_schema(
        ARGS_SCHEMA, defaults={"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "})
    compile_s = time.perf_counter() - t0

    def step(m, mask, token):
        m.unsafe_compute_mask_ptr(mask.ctypes.data, mask.nbytes)
        if not m.consume_token(token):
            raise AssertionError(m.get_error())

    return lambda: llguidance.LLMatcher(lt, grammar, log_level=0), step, compile_s, tok_s


def _xgrammar(tok: _Tokenizer) -> _Prepared:
    import xgrammar
    from transformers import PreTrainedTokenizerFast

    t0 = time.perf_counter()
    tinfo = xgrammar.TokenizerInfo.from_huggingface(
        PreTrainedTokenizerFast(tokenizer_file=str(tok.path)), vocab_size=tok.vocab, stop_token_ids=[tok.eos])
    compiler = xgrammar.GrammarCompiler(tinfo, max_threads=1)
    tok_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    compiled = compiler.compile_json_schema(json.dumps(ARGS_SCHEMA), any_whitespace=False,
                                            separators=(", ", ": "))
    compile_s = time.perf_counter() - t0
    bitmask = xgrammar.allocate_token_bitmask(1, tok.vocab)

    def step(m, mask, token):
        m.fill_next_token_bitmask(bitmask)
        if not m.accept_token(token):
            raise AssertionError(f"xgrammar refused {token}")

    return lambda: xgrammar.GrammarMatcher(compiled), step, compile_s, tok_s


def _outlines_core(tok: _Tokenizer) -> _Prepared:
    import outlines_core
    from outlines_core.json_schema import build_regex_from_schema

    # byte-level BPE spellings back to bytes (GPT-2's table)
    printable = [b for b in range(256) if 33 <= b <= 126 or 161 <= b <= 172 or 174 <= b <= 255]
    table = {chr(b): b for b in printable}
    table.update({chr(256 + i): b for i, b in enumerate(b for b in range(256) if b not in printable)})
    special = {i for i, t in tok.hf.get_added_tokens_decoder().items() if t.special}
    spelled: dict[bytes, list[int]] = {}
    for piece, i in tok.hf.get_vocab(with_added_tokens=True).items():
        if i not in special:
            spelled.setdefault(bytes(table[c] for c in piece), []).append(i)
    regex = build_regex_from_schema(json.dumps(ARGS_SCHEMA), r"[ ]?")
    t0 = time.perf_counter()
    index = outlines_core.Index(regex, outlines_core.Vocabulary(tok.eos, spelled))
    compile_s = time.perf_counter() - t0

    def step(g, mask, token):
        g.write_mask_into(mask.ctypes.data, mask.size, 4)
        g.advance(token, return_tokens=False)

    return lambda: outlines_core.Guide(index), step, compile_s, None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", default="torch-cpu")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--compile", default="auto", help="torch: auto (wait for the background compile), on, off")
    parser.add_argument("--compare-libraries", action="store_true")
    args = parser.parse_args()
    report: dict = {"machine": machine()}
    if args.compare_libraries:
        report["libraries"] = compare_libraries()
    else:
        report["decode"] = measure(args)
    report["machine"]["load_average_after"] = [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
