"""Speculative decoding's speed-up on three tasks (rewrite a paragraph, continue code, free
chat): greedy answers plainly, with prompt lookup and with a draft model, each checked to be
the plain answer's ids; prints JSON (acceptance, tokens/s, speed-up, the policy's measured
verify cost) with the CPU, its flags and the load average.

    .venv/bin/python bench/speculative.py [--model PATH.gguf] [--draft PATH.gguf]
        [--tokens 96] [--runs 3] [--threads 2] [--compile auto|on|off] [--tasks rewrite,code,chat]

The model is the starter unless --model names a GGUF; the draft model is --draft, by default
the model itself (every draft kept, at the cost of a full decode step each: the policy must
find it does not pay). Runs alternate plain and speculative answers, medians reported.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

PARAGRAPH = (
    "The town library opened in 1902 with a gift of four hundred books and a single reading room. "
    "Over the following decades it grew into a lending library, a children's room and a local history "
    "archive, and in 1978 it moved into the old grain exchange on the market square, where it still "
    "stands. Today the library lends more than sixty thousand items a year, runs a weekly reading group "
    "and keeps the town's newspapers on microfilm back to 1850."
)
CODE = '''import json
from pathlib import Path


def load_settings(path: Path) -> dict:
    """Read the settings file, or the defaults when there is none."""
    if not path.exists():
        return dict(DEFAULTS)
    with path.open() as f:
        data = json.load(f)
    settings = dict(DEFAULTS)
    settings.update(data)
    return settings


def save_settings(path: Path, settings: dict) -> None:
    """Write the settings file."""
'''
TASKS = {
    "rewrite": f"Rewrite this paragraph in plain, simple English, keeping every fact:\n\n{PARAGRAPH}",
    "code": f"Continue this Python module:\n\n```python\n{CODE}",
    "chat": "What are some good ways to spend a rainy weekend at home?",
}


def load(path: Path, threads: int, compile: str = "auto"):
    import torch

    from wren.engine.inference.backends.torch import TorchBackend

    torch.set_num_threads(threads)
    model = TorchBackend("cpu").load(path, slots=1, compile=compile)
    model.wait_compiled()
    return model


def answer(model, prompt: list[int], tokens: int, speculator=None) -> tuple[list[int], float]:
    from wren.engine.inference.generate import KVSession
    from wren.engine.inference.sampling import Sampler, SamplingParams
    from wren.engine.inference.speculative import speculative_tokens

    session = KVSession(model)
    stream = speculative_tokens(session, prompt, Sampler(SamplingParams(temperature=0)), speculator)
    ids = [next(stream)]  # the prompt's time is the same either way: decode time only
    started = time.perf_counter()
    for token in stream:
        ids.append(token)
        if len(ids) == tokens:
            break
    return ids, (len(ids) - 1) / (time.perf_counter() - started)


def measure(model, draft, tokenizer, args) -> dict:
    from wren.engine.inference.speculative import DraftModel, PromptLookup, Speculator

    drafters = {"prompt_lookup": lambda: Speculator(PromptLookup()),
                "draft_model": lambda: Speculator(DraftModel(draft, model.vocab_size, model))}
    results = {}
    for task in args.tasks.split(","):
        text = TASKS[task]
        prompt = tokenizer.encode_chat([{"role": "user", "content": text}])
        row: dict = {"prompt_tokens": len(prompt)}
        plain_ids, _ = answer(model, prompt, args.tokens)  # warm-up
        speeds: dict[str, list[float]] = {"plain": []}
        for name, make in drafters.items():
            speculator, speeds[name] = make(), []
            same = True
            for _ in range(args.runs):
                ids, speed = answer(model, prompt, args.tokens)
                speeds["plain"].append(speed)
                spec_ids, speed = answer(model, prompt, args.tokens, speculator)
                speeds[name].append(speed)
                same &= spec_ids == plain_ids == ids
            stats = speculator.stats
            row[name] = {
                "identical_greedy_ids": same,
                "acceptance": round(stats.acceptance, 3),
                "drafted": stats.drafted, "accepted": stats.accepted,
                "verify_steps": stats.verify_steps, "plain_steps": stats.plain_steps,
                "verify_row_cost": round(speculator.policy.row_cost, 3),
                "draft_cost": round(speculator.policy.draft_cost, 3),
                "tokens_per_s": round(statistics.median(speeds[name]), 1),
            }
        row["plain_tokens_per_s"] = round(statistics.median(speeds["plain"]), 1)
        for name in drafters:
            row[name]["speed_up"] = round(row[name]["tokens_per_s"] / row["plain_tokens_per_s"], 3)
        row["load_average"] = os.getloadavg()
        results[task] = row
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="a GGUF file (default: the starter)")
    ap.add_argument("--draft", help="a GGUF file of the same tokenizer (default: the model itself)")
    ap.add_argument("--tokens", type=int, default=96)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--compile", default="auto", choices=("auto", "on", "off"))
    ap.add_argument("--tasks", default=",".join(TASKS), help="which of rewrite, code, chat")
    args = ap.parse_args()

    from decode import machine

    from wren.engine.modelhub.registry import ModelRegistry
    from wren.engine.tokenize import Tokenizer

    registry = ModelRegistry()

    def folder(gguf: str | None) -> Path:
        if not gguf:
            return registry.ensure_starter().path
        name = "bench-" + Path(gguf).stem.lower().replace("_", "-")[:100]
        try:
            return registry.get(name).path
        except Exception:
            return registry.import_gguf(gguf, name=name).path

    path = folder(args.model)
    model = load(path, args.threads, args.compile)
    draft = load(folder(args.draft) if args.draft else path, args.threads, args.compile)
    report = {
        "machine": machine(), "load_average_before": os.getloadavg(),
        "model": args.model or "starter", "draft": args.draft or "the model itself",
        "tokens": args.tokens, "runs": args.runs,
        "tasks": measure(model, draft, Tokenizer.from_dir(path), args),
        "load_average_after": os.getloadavg(),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
