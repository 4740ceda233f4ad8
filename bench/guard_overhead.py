"""Decode speed on the starter model with and without the output safety scanner.

The guard runs on the asyncio side while the model decodes on its own thread, so what it
can cost is time on the consumer's loop and contention for the interpreter. Measured end to
end through `engine.chat.send`: completion tokens ÷ seconds from the first delta to Finished,
median over --runs, for (a) no guard (a pass-through stand-in), (b) the shipped policy and
(c) a policy that redacts every category (the longest hold-back). Prints JSON.

    .venv/bin/python bench/guard_overhead.py [--runs 5] [--tokens 128] [--backend torch-cpu]
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

import wren.engine.turns as turns
from wren.engine.api import Engine
from wren.engine.events import Finished, Started, Usage
from wren.engine.inference.sampling import SamplingParams
from wren.engine.modelhub.registry import ModelRegistry
from wren.engine.records import SendOptions
from wren.engine.safety import OutputGuard, Policy
from wren.engine.safety.guard import GuardStep
from wren.engine.store import Store

REDACT_ALL = '[actions]\ndefault = "redact"\nsecret = "redact"\npii = "redact"\ncontent = "redact"\n'
PROMPT = "Write a long, detailed story about a lighthouse keeper who finds a message in a bottle."


class NoGuard:
    def __init__(self, policy, destination="local"):
        pass

    def feed(self, delta):
        return GuardStep(delta, [], False)

    def finish(self):
        return GuardStep("", [], False)


async def measure(engine: Engine, tokens: int, runs: int) -> list[float]:
    rates = []
    params = SamplingParams(temperature=0.0, max_tokens=tokens)
    for _ in range(runs):
        conv = await engine.conversations.create()
        first = None
        count = 0
        async for event in engine.chat.send(conv.id, PROMPT, SendOptions(sampling=params)):
            if isinstance(event, Started):
                first = time.perf_counter()
            elif isinstance(event, Usage):
                count = event.completion_tokens
            elif isinstance(event, Finished):
                end = time.perf_counter()
        rates.append(count / (end - first))
    return rates


async def main_async(args) -> dict:
    home = Path(tempfile.mkdtemp(prefix="wren-guard-"))
    os.environ["WREN_HOME"] = str(home)
    registry = ModelRegistry(Path(args.models) if args.models else home / "models")
    registry.ensure_starter()
    engine = Engine(Store(home / "wren.sqlite3"), registry)
    await engine.models.load(backend=args.backend)
    await engine.models.decode_mode(wait=True)  # a background compile would skew the first variant
    variants = {
        "no_guard": (NoGuard, Policy.shipped()),
        "shipped_policy": (OutputGuard, Policy.shipped()),
        "redact_everything": (OutputGuard, Policy.from_toml(REDACT_ALL)),
    }
    results = {name: [] for name in variants}
    names = list(variants)
    await measure(engine, args.tokens, 1)  # warm-up: the prompt's prefix is cached for all
    for run in range(args.runs):
        # Interleaved and rotated, so drift in machine load hits every variant alike.
        for name in names[run % 3:] + names[:run % 3]:
            guard_cls, policy = variants[name]
            turns.OutputGuard = guard_cls
            engine.policy = policy
            results[name] += await measure(engine, args.tokens, 1)
    turns.OutputGuard = OutputGuard
    status = engine.models.current
    await engine.close()
    base = statistics.median(results["no_guard"])
    return {
        "model": status.name,
        "backend": status.backend,
        "tokens": args.tokens,
        "runs": args.runs,
        "decode_tokens_per_s": {k: round(statistics.median(v), 1) for k, v in results.items()},
        "slowdown_percent": {
            k: round(100 * (1 - statistics.median(v) / base), 2) for k, v in results.items() if k != "no_guard"
        },
        "target_slowdown_percent": 5,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--backend", default="torch-cpu")
    ap.add_argument("--models", help="a models folder with the starter already imported")
    print(json.dumps(asyncio.run(main_async(ap.parse_args())), indent=2))


if __name__ == "__main__":
    main()
