"""Time to first token after Send, on the starter model, for a conversation with about
2,000 tokens of history: (a) cold cache, (b) the previous turn's prefix cached, (c) the
draft pre-warmed while "typing". Prints JSON with medians over --runs.

    .venv/bin/python bench/ttft.py [--backend torch-cpu] [--runs 5] [--history-tokens 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from wren.engine.api import Engine
from wren.engine.events import Delta
from wren.engine.inference.sampling import SamplingParams
from wren.engine.modelhub.registry import ModelRegistry
from wren.engine.records import Role, SendOptions
from wren.engine.store import Store

TOPICS = ["gardening", "bread baking", "cycling in the rain", "tax forms", "Roman history",
          "learning the cello", "fixing a bike chain", "planning a wedding", "moving to Lisbon"]


def build_history(store: Store, conv_id: int, target_tokens: int, count, run: int) -> None:
    parent, total, i = None, 0, 0
    while total < target_tokens:
        topic = TOPICS[(i + run) % len(TOPICS)]
        # Each run's conversation differs from its first words, so (a) is really cold.
        q = f"Run {run}, question {i}: what should I know about {topic}? Please be specific about step {i}."
        a = (f"About {topic}: start small, keep notes, and ask someone experienced. Step {i} "
             "matters because it sets up everything after it; take your time with it.")
        for role, text in ((Role.USER, q), (Role.ASSISTANT, a)):
            parent = store.add_message(conv_id, role, text, parent_id=parent).id
            total += count(text) + 5
        i += 1


async def first_token(engine: Engine, conv_id: int, text: str, params) -> tuple[float, int]:
    t0 = time.perf_counter()
    elapsed = None
    async for event in engine.chat.send(conv_id, text, SendOptions(sampling=params)):
        if isinstance(event, Delta) and elapsed is None:
            elapsed = time.perf_counter() - t0
            engine.chat.stop()
        # Read on to the end: the stopped answer is stored before the next turn is typed,
        # as it is for a person, so the next prompt (and a draft pre-warmed) starts from it.
    if elapsed is None:
        raise RuntimeError("no answer text")
    last = (await engine.conversations.messages(conv_id))[-1]
    return elapsed, last.prompt_tokens or 0


async def main_async(args) -> dict:
    home = Path(tempfile.mkdtemp(prefix="wren-ttft-"))
    os.environ["WREN_HOME"] = str(home)
    registry = ModelRegistry(Path(args.models) if args.models else home / "models")
    registry.ensure_starter()
    store = Store(home / "wren.sqlite3")
    engine = Engine(store, registry)
    status = await engine.models.load(backend=args.backend)
    decode_mode = await engine.models.decode_mode(wait=True)  # the steady state, not the first seconds
    tokenizer = engine.loaded_worker.tokenizer
    params = SamplingParams(temperature=0.0, max_tokens=8)
    results = {"cold": [], "prefix_cached": [], "prewarmed": []}
    prompt_tokens = []
    for run in range(args.runs):
        conv = await engine.conversations.create(f"bench {run}")
        build_history(store, conv.id, args.history_tokens, tokenizer.count, run)
        # (a) cold: the cache holds another conversation's prompt (or nothing)
        cold, n = await first_token(engine, conv.id, f"Run {run}: summarize our talk in one line.", params)
        results["cold"].append(cold)
        prompt_tokens.append(n)
        # (b) the previous turn is cached; only the new message (and the stopped answer) run
        cached, _ = await first_token(engine, conv.id, "And what was step three about?", params)
        results["prefix_cached"].append(cached)
        # (c) pre-warmed: the draft was prefilled while "typing"
        draft = "Which topic came up most often?"
        await engine.chat.prepare(conv.id, draft)
        await engine.chat.prepared()
        warm, _ = await first_token(engine, conv.id, draft, params)
        results["prewarmed"].append(warm)
    await engine.close()
    return {
        "model": status.name,
        "backend": status.backend,
        "decode_mode": decode_mode,
        "history_prompt_tokens": int(statistics.median(prompt_tokens)),
        "runs": args.runs,
        "ttft_ms": {k: round(statistics.median(v) * 1000, 1) for k, v in results.items()},
        "ttft_ms_all": {k: [round(x * 1000, 1) for x in v] for k, v in results.items()},
        "target_prewarmed_ms": 30,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default="torch-cpu")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--history-tokens", type=int, default=2000)
    ap.add_argument("--models", help="a models folder with the starter already imported")
    print(json.dumps(asyncio.run(main_async(ap.parse_args())), indent=2))


if __name__ == "__main__":
    main()
