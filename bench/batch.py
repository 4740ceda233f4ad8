"""Aggregate decode speed of continuous batching (torch, or MLX through mlx-lm's batched
cache); prints JSON.

For 1, 2, 4 and 8 concurrent sequences of the starter model (default format: int4
weights, float32 activations on a CPU):
  - "step": the model alone, --tokens batched decode steps after each row's prompt; B=1
    uses the single-sequence decode, as the worker does; B ÷ the median step time, so a
    step slowed by another process on the machine does not skew it;
  - "worker": B greedy GenerationRequests submitted at once to a ModelWorker, tokens/s
    from the first submit to the last Finished (prompt reading included).
Both report aggregate tokens/s over all sequences.

    .venv/bin/python bench/batch.py [--tokens 32] [--threads N] [--context 1024] [--compile off]
        [--backend torch|mlx]

--compile auto lets the single-sequence step compile (waited for before measuring); the
default, off, compares batched and single steps on the same eager footing.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

BATCHES = (1, 2, 4, 8)
QUESTIONS = ["What is the capital of France?", "Write a haiku about the sea.",
             "Name three colours.", "How many days are in a week?", "What is a wren?",
             "Give me a word that rhymes with cat.", "What does a gardener do?",
             "Why is the sky blue?"]


def step_rate(model, prompts: list[list[int]], tokens: int) -> float:
    import numpy as np

    slots = list(range(len(prompts)))
    logits = np.stack([model.prefill(p, 0, slot=s) for p, s in zip(prompts, slots)])
    positions = [len(p) for p in prompts]
    times = []
    for _ in range(tokens):
        ids = [int(i) for i in logits.argmax(-1)]
        started = time.perf_counter()
        if len(prompts) == 1:
            logits = model.decode(ids[0], positions[0])[None]
        else:
            logits = model.decode_batch(ids, positions, slots)
        times.append(time.perf_counter() - started)
        positions = [p + 1 for p in positions]
    return len(prompts) / statistics.median(times)


def worker_rate(model_dir, tokenizer, backend, prompts: list[list[int]], tokens: int) -> dict:
    from wren.engine.events import Finished, Usage
    from wren.engine.inference.sampling import SamplingParams
    from wren.engine.inference.worker import GenerationRequest, ModelWorker

    worker = ModelWorker("bench", backend, model_dir, tokenizer)
    worker.loaded.result()
    usages, done, lock = [], threading.Semaphore(0), threading.Lock()

    def sink(event) -> None:
        if isinstance(event, Usage):
            with lock:
                usages.append(event)
        elif isinstance(event, Finished):
            done.release()

    # No stop at end-of-sequence would keep every row busy; greedy answers that end early
    # are counted as they are.
    params = SamplingParams(temperature=0.0, max_tokens=tokens)
    started = time.perf_counter()
    for ids in prompts:
        worker.submit(GenerationRequest(ids, params, sink))
    for _ in prompts:
        done.acquire()
    elapsed = time.perf_counter() - started
    worker.close()
    produced = sum(u.completion_tokens for u in usages)
    return {"tokens": produced, "tokens_per_s": round(produced / elapsed, 1),
            "median_ttft_s": round(statistics.median(u.time_to_first_token for u in usages), 3),
            "median_sequence_decode_tokens_per_s":
                round(statistics.median(u.tokens_per_second for u in usages), 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--context", type=int, default=1024, help="per-slot KV cache length")
    parser.add_argument("--compile", default="off", choices=("auto", "on", "off"))
    parser.add_argument("--backend", default="torch", choices=("torch", "mlx"))
    args = parser.parse_args()

    import torch

    from wren.engine.inference.backends.mlx import MLXBackend
    from wren.engine.inference.backends.torch import TorchBackend
    from wren.engine.modelhub.registry import ModelRegistry
    from wren.engine.tokenize import Tokenizer

    if args.threads:
        torch.set_num_threads(args.threads)
    info = ModelRegistry().ensure_starter()
    tokenizer = Tokenizer.from_dir(info.path)
    prompts = [tokenizer.encode_chat([{"role": "user", "content": q}]) for q in QUESTIONS]

    class Torch(TorchBackend):  # the worker's load() call, with this run's slots
        def load(self, model_dir, **options):
            model = super().load(model_dir, context_length=args.context, slots=max(BATCHES),
                                 compile=args.compile)
            model.wait_compiled()
            return model

    class MLX(MLXBackend):
        def load(self, model_dir, **options):
            return super().load(model_dir, context_length=args.context, slots=max(BATCHES))

    backend = Torch() if args.backend == "torch" else MLX()
    model = backend.load(info.path)
    results = []
    for batch in BATCHES:
        results.append({
            "sequences": batch,
            "step_tokens_per_s": round(step_rate(model, prompts[:batch], args.tokens), 1),
            "worker": worker_rate(info.path, tokenizer, backend, prompts[:batch], args.tokens),
        })
    decode_mode = getattr(model, "decode_mode", None)
    model.close()
    print(json.dumps({
        "model": info.path.name, "backend": model.backend, "dtype": getattr(model, "dtype", None),
        "quant": getattr(model, "quant", None), "decode_mode": decode_mode,
        "threads": torch.get_num_threads(), "machine": platform.processor() or platform.machine(),
        "context_per_slot": args.context, "tokens_per_sequence": args.tokens, "results": results,
    }, indent=2))


if __name__ == "__main__":
    main()
