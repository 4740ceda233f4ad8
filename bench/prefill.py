"""Prompt (prefill) speed on the starter model with the torch backend, read the way the
worker reads a prompt: in PREFILL_CHUNK-token chunks, each continuing the KV cache. Prints
JSON: tokens/s for each prompt length (wall clock and process CPU time; CPU time is the
steadier figure on a shared machine), the first and last chunk's seconds, and the ratio of
the longest prompt's speed to the shortest's (attention grows with the position; the
weights' share does not).

    .venv/bin/python bench/prefill.py [--lengths 512 2048 4096] [--chunk 256] [--threads N]
                                      [--runs 1] [--sweep 32 128 256 512] [--models DIR]

`--sweep` also times a 2,048-token prompt at each chunk size. Prefill always runs eagerly:
compiling (WREN_TORCH_COMPILE) builds only the one-token decode step, so it is off here.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import torch

from wren.engine.inference.backends.torch import TorchBackend
from wren.engine.inference.worker import PREFILL_CHUNK
from wren.engine.modelhub.registry import ModelRegistry


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def read_prompt(model, ids: list[int], chunk: int) -> dict:
    """Prefill `ids` from position 0 in chunks; wall and CPU seconds, per-chunk wall times."""
    wall, cpu = time.perf_counter(), time.process_time()
    chunks = []
    for start in range(0, len(ids), chunk):
        t = time.perf_counter()
        model.prefill(ids[start:start + chunk], start)
        chunks.append(time.perf_counter() - t)
    return {"wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu, "chunks": chunks}


def best_of(model, ids: list[int], chunk: int, runs: int) -> dict:
    results = [read_prompt(model, ids, chunk) for _ in range(runs)]
    best = min(results, key=lambda r: r["cpu_s"])
    n = len(ids)
    return {
        "tokens": n,
        "chunk": chunk,
        "tokens_per_s_wall": round(n / min(r["wall_s"] for r in results), 1),
        "tokens_per_s_cpu": round(n / best["cpu_s"], 1),
        "first_chunk_s": round(best["chunks"][0], 3),
        "last_chunk_s": round(best["chunks"][-1], 3),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lengths", type=int, nargs="+", default=[512, 2048, 4096])
    ap.add_argument("--chunk", type=int, default=PREFILL_CHUNK)
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    ap.add_argument("--runs", type=int, default=1, help="best of this many reads of each prompt")
    ap.add_argument("--sweep", type=int, nargs="*", default=[], help="chunk sizes to time a 2,048-token prompt at")
    ap.add_argument("--models", help="a models folder with the starter already imported")
    args = ap.parse_args()
    if args.chunk < 1 or any(n < 1 for n in args.lengths + args.sweep):
        ap.error("--chunk, --lengths and --sweep take positive token counts")

    if args.threads:
        torch.set_num_threads(args.threads)
    home = Path(tempfile.mkdtemp(prefix="wren-prefill-"))
    os.environ.setdefault("WREN_HOME", str(home))
    registry = ModelRegistry(Path(args.models) if args.models else home / "models")
    info = registry.ensure_starter()
    model = TorchBackend("cpu").load(info.path, compile="off")
    longest = max(args.lengths + ([2048] if args.sweep else []))
    if longest > model.context_length:
        ap.error(f"a {longest}-token prompt does not fit the model's {model.context_length}-token context")
    rng = np.random.default_rng(0)
    ids = [int(i) for i in rng.integers(100, model.vocab_size, longest)]
    read_prompt(model, ids[:64], 64)  # first-call allocations out of the way

    lengths = [best_of(model, ids[:n], args.chunk, args.runs) for n in sorted(args.lengths)]
    out = {
        "model": info.name,
        "backend": model.backend,
        "quant": model.quant,
        "mode": "eager (prefill is never compiled)",
        "cpu": cpu_name(),
        "cores": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "load_average": [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None,
        "chunk": args.chunk,
        "prompts": lengths,
    }
    if len(lengths) > 1:
        short, long = lengths[0], lengths[-1]
        out["ratio"] = {
            "of": f"{long['tokens']}/{short['tokens']} tokens",
            "wall": round(long["tokens_per_s_wall"] / short["tokens_per_s_wall"], 3),
            "cpu": round(long["tokens_per_s_cpu"] / short["tokens_per_s_cpu"], 3),
        }
    if args.sweep:
        out["chunk_sweep_2048"] = [best_of(model, ids[:2048], c, args.runs) for c in args.sweep]
    model.close()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
