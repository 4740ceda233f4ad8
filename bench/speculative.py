"""Speculative decoding's speed-up on three tasks (rewrite a paragraph, continue code, free
chat): greedy answers plainly, with prompt lookup and with a draft model, each checked to be
the plain answer's ids; prints JSON (acceptance, tokens/s, speed-up, the policy's measured
verify cost) with the CPU, its flags and the load average.

    .venv/bin/python bench/speculative.py [--model PATH.gguf] [--draft PATH.gguf]
        [--tokens 96] [--runs 3] [--threads 2] [--compile auto|on|off] [--tasks rewrite,code,chat]
        [--exact-only]

The model is the starter unless --model names a GGUF; the draft model is --draft, by default
the model itself (every draft kept, at the cost of a full decode step each: the policy must
find it does not pay). Runs alternate plain and speculative answers, medians reported, in
tokens/s and in this process's CPU ms a token (steadier on a shared machine). Greedy ids are
identical bit for bit where the model verifies exactly ("verifies_exactly": eager decoding on
the CPU, e.g. --compile off); a compiled decode step rounds its norms and attention otherwise.
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


def answer(model, prompt: list[int], tokens: int, speculator=None) -> tuple[list[int], float, float]:
    """Greedy ids, decode tokens/s and process CPU ms a token (the latter counts this
    process's work only, so it is steadier on a shared machine than wall time)."""
    from wren.engine.inference.generate import KVSession
    from wren.engine.inference.sampling import Sampler, SamplingParams
    from wren.engine.inference.speculative import speculative_tokens

    session = KVSession(model)
    stream = speculative_tokens(session, prompt, Sampler(SamplingParams(temperature=0)), speculator)
    ids = [next(stream)]  # the prompt's time is the same either way: decode time only
    started, cpu = time.perf_counter(), time.process_time()
    for token in stream:
        ids.append(token)
        if len(ids) == tokens:
            break
    spent = time.process_time() - cpu
    return ids, (len(ids) - 1) / (time.perf_counter() - started), 1000 * spent / (len(ids) - 1)


def measure(model, draft, tokenizer, args) -> dict:
    from wren.engine.inference.speculative import DraftModel, PromptLookup, Speculator

    exact = args.exact_only
    drafters = {"prompt_lookup": lambda: Speculator(PromptLookup(), exact_only=exact),
                "draft_model": lambda: Speculator(DraftModel(draft, model.vocab_size, model), exact_only=exact)}
    results = {}
    for task in args.tasks.split(","):
        text = TASKS[task]
        prompt = tokenizer.encode_chat([{"role": "user", "content": text}])
        row: dict = {"prompt_tokens": len(prompt)}
        plain_ids, _, _ = answer(model, prompt, args.tokens)  # warm-up
        speeds: dict[str, list[float]] = {"plain": []}
        cpu: dict[str, list[float]] = {"plain": []}
        for name, make in drafters.items():
            speculator, speeds[name], cpu[name] = make(), [], []
            plain_speeds, plain_cpu = [], []  # the plain runs interleaved with this drafter's
            same = True
            for _ in range(args.runs):
                ids, speed, ms = answer(model, prompt, args.tokens)
                plain_speeds.append(speed)
                plain_cpu.append(ms)
                spec_ids, speed, ms = answer(model, prompt, args.tokens, speculator)
                speeds[name].append(speed)
                cpu[name].append(ms)
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
                "cpu_ms_per_token": round(statistics.median(cpu[name]), 2),
                # against the plain answers interleaved with these, not all of them
                "speed_up": round(statistics.median(speeds[name]) / statistics.median(plain_speeds), 3),
                "cpu_speed_up": round(statistics.median(plain_cpu) / statistics.median(cpu[name]), 3),
            }
            speeds["plain"] += plain_speeds
            cpu["plain"] += plain_cpu
        row["plain_tokens_per_s"] = round(statistics.median(speeds["plain"]), 1)
        row["plain_cpu_ms_per_token"] = round(statistics.median(cpu["plain"]), 2)
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
    ap.add_argument("--exact-only", action="store_true",
                    help="draft only while verification is exact, as the 'auto' setting does")
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
        "tokens": args.tokens, "runs": args.runs, "decode_mode": model.decode_mode,
        "verifies_exactly": model.verifies_exactly, "exact_only": args.exact_only,
        "tasks": measure(model, draft, Tokenizer.from_dir(path), args),
        "load_average_after": os.getloadavg(),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
