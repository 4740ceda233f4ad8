"""Starter-model speed on each available backend; prints JSON.

Each backend runs in its own subprocess so peak memory is its own. Figures are medians over
--runs runs: load time, prompt processing tokens/s (a --prompt-tokens prompt), decode
tokens/s (--decode-tokens greedy tokens), time to first token for a chat question (cold
cache) and peak resident memory.

    .venv/bin/python bench/decode.py [--backends torch-cpu,mlx] [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def measure(backend_name: str, runs: int, prompt_tokens: int, decode_tokens: int, dtype: str) -> dict:
    from engine.inference.generate import KVSession, generate_tokens
    from engine.inference.sampling import Sampler, SamplingParams
    from engine.inference.select import resolve_backend
    from engine.modelhub.registry import ModelRegistry
    from engine.tokenize import Tokenizer

    info = ModelRegistry().ensure_starter()
    tokenizer = Tokenizer.from_dir(info.path)
    backend = resolve_backend(backend_name)
    started = time.perf_counter()
    model = backend.load(info.path, dtype=dtype)
    load_s = time.perf_counter() - started

    text = ("The quick brown fox jumps over the lazy dog while the river keeps flowing. " * 200)
    long_ids = tokenizer.encode(text)[:prompt_tokens]
    chat_ids = tokenizer.encode_chat([{"role": "user", "content": "What is the capital of France?"}])
    greedy = SamplingParams(temperature=0.0)

    pp, tg, ttft = [], [], []
    model.prefill(long_ids[:16], 0)  # warm-up: first-call allocations are not the steady state
    for _ in range(runs):
        t0 = time.perf_counter()
        model.prefill(long_ids, 0)
        pp.append(len(long_ids) / (time.perf_counter() - t0))

        t0 = time.perf_counter()
        stream = generate_tokens(KVSession(model), chat_ids, Sampler(greedy))
        next(stream)
        ttft.append(time.perf_counter() - t0)

        logits = model.prefill(chat_ids, 0)
        sampler = Sampler(greedy)
        history = list(chat_ids)
        token = sampler(logits, history)
        t0 = time.perf_counter()
        for i in range(decode_tokens):
            history.append(token)
            token = sampler(model.decode(token, len(history) - 1), history)
        tg.append(decode_tokens / (time.perf_counter() - t0))
    model.close()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kB on Linux
    if sys.platform == "darwin":
        peak //= 1024  # bytes there
    return {
        "backend": model.backend,
        "dtype": dtype,
        "load_s": round(load_s, 3),
        "prompt_tokens": len(long_ids),
        "prompt_tokens_per_s": round(statistics.median(pp), 1),
        "decode_tokens": decode_tokens,
        "decode_tokens_per_s": round(statistics.median(tg), 1),
        "time_to_first_token_s": round(statistics.median(ttft), 4),
        "peak_rss_mb": round(peak / 2**20, 1),
        "runs": runs,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backends", default="auto-available")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--prompt-tokens", type=int, default=256)
    ap.add_argument("--decode-tokens", type=int, default=64)
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.one:
        print(json.dumps(measure(args.one, args.runs, args.prompt_tokens, args.decode_tokens, args.dtype)))
        return

    from engine.inference.select import resolve_backend

    names = args.backends.split(",") if args.backends != "auto-available" else ["torch-cpu", "torch-cuda", "mlx"]
    home = os.environ.get("WREN_HOME") or tempfile.mkdtemp(prefix="wren-bench-")
    env = dict(os.environ, WREN_HOME=home)
    results = []
    for name in names:
        try:
            resolve_backend(name)
        except Exception as exc:
            results.append({"backend": name, "skipped": str(exc)})
            continue
        cmd = [sys.executable, __file__, "--one", name, "--runs", str(args.runs), "--prompt-tokens",
               str(args.prompt_tokens), "--decode-tokens", str(args.decode_tokens), "--dtype", args.dtype]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if out.returncode != 0:
            results.append({"backend": name, "error": out.stderr.strip().splitlines()[-1:]})
            continue
        results.append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(json.dumps({"model": "smollm2-135m-instruct", "threads": os.cpu_count(), "results": results}, indent=2))


if __name__ == "__main__":
    main()
