"""Two Wren engines generating at once on one machine, against one alone; prints JSON.

Each engine is a process of its own (as the window and a resident engine, or `wren serve`
beside the window, are): it loads the starter (or --model FOLDER) through a ModelWorker,
waits for its compiled decode step, then answers questions back to back for --seconds.
Rounds alternate "alone" (one engine) and "together" (two at once); the figures are
medians over --rounds rounds:
  alone_tps        tokens/s of one engine by itself
  together_tps     tokens/s of each of the two engines at once
  aggregate_ratio  (sum of the two together) ÷ alone: 1.0 means the machine's cores are
                   shared with no loss; 0.5 means half of them are lost to contention

--share on,off measures with the CPU turns (engine/inference/cpu_share.py) and without
them (WREN_CPU_SHARE=0, the behaviour before them) in the same run.

    .venv/bin/python bench/two_engines.py [--rounds 3] [--seconds 10] [--share on,off]
        [--compile auto|off] [--model FOLDER]
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from cpuinfo import cpu  # noqa: E402  (bench/ is on the path when a script runs)

QUESTIONS = ["Write a long story about a lighthouse keeper and a storm.",
             "Explain in detail how bread is made, step by step.",
             "Describe a walk through a city at night, with many details."]


def child(args: argparse.Namespace) -> None:
    """One engine: load, say ready, wait for go, answer for --seconds, print the count."""
    from wren.engine.events import Finished, Usage
    from wren.engine.inference.sampling import SamplingParams
    from wren.engine.inference.select import resolve_backend
    from wren.engine.inference.worker import GenerationRequest, ModelWorker
    from wren.engine.tokenize import Tokenizer

    path = Path(args.model_dir)
    tokenizer = Tokenizer.from_dir(path)
    backend = resolve_backend("torch-cpu")
    os.environ["WREN_TORCH_COMPILE"] = args.compile
    worker = ModelWorker("bench", backend, path, tokenizer)
    model = worker.loaded.result(600)
    model.wait_compiled(600)
    prompts = [tokenizer.encode_chat([{"role": "user", "content": q}]) for q in QUESTIONS]
    print(json.dumps({"ready": True, "decode_mode": model.decode_mode}), flush=True)
    sys.stdin.readline()  # "go"
    tokens, answers = 0, 0
    started = time.perf_counter()
    deadline = started + args.seconds
    extended = False
    while True:
        now = time.perf_counter()
        if now >= deadline or (extended and tokens):
            if tokens or extended:
                break
            # A loaded machine can give no token in a short window: one whole answer more
            # (at most a minute), so a rate is never 0 / a time.
            deadline, extended = now + 60, True
        events: queue.Queue = queue.Queue()
        params = SamplingParams(temperature=0.8, seed=answers, max_tokens=args.max_tokens)
        request = GenerationRequest(prompts[answers % len(prompts)], params, events.put)
        worker.submit(request)
        while True:
            try:
                event = events.get(timeout=max(0.01, deadline - time.perf_counter()))
            except queue.Empty:
                request.cancel.set()  # time is up: what was generated so far counts
                continue
            if isinstance(event, Usage):
                tokens += event.completion_tokens
            if isinstance(event, Finished):
                break
        answers += 1
    elapsed = time.perf_counter() - started
    share = getattr(model, "share", None)
    print(json.dumps({"tokens": tokens, "answers": answers, "seconds": elapsed,
                      "waited_s": share.waited_seconds if share is not None else None,
                      "turns": share.turns_taken if share is not None else None}), flush=True)
    worker.close()


def _start(args: argparse.Namespace, model_dir: Path, share: str) -> subprocess.Popen:
    # The turns' own folder: other Wren processes on the machine (a test run) stay out of them.
    env = dict(os.environ, WREN_CPU_SHARE="1" if share == "on" else "0", XDG_RUNTIME_DIR=os.environ["WREN_HOME"])
    proc = subprocess.Popen(
        [sys.executable, __file__, "--child", "--model-dir", str(model_dir), "--seconds", str(args.seconds),
         "--compile", args.compile, "--max-tokens", str(args.max_tokens)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    ready = json.loads(proc.stdout.readline())
    assert ready.get("ready"), ready
    proc.decode_mode = ready["decode_mode"]  # type: ignore[attr-defined]
    return proc


def _run(args: argparse.Namespace, model_dir: Path, share: str, engines: int) -> list[dict]:
    procs = [_start(args, model_dir, share) for _ in range(engines)]
    for proc in procs:
        proc.stdin.write("go\n")
        proc.stdin.flush()
    results = []
    for proc in procs:
        line = proc.stdout.readline()
        proc.wait(60)
        result = json.loads(line)
        result["tps"] = result["tokens"] / result["seconds"]
        result["decode_mode"] = proc.decode_mode
        results.append(result)
    return results


def _model_dir(args: argparse.Namespace) -> Path:
    if args.model:
        return Path(args.model)
    from wren.engine.modelhub.registry import ModelRegistry

    return ModelRegistry().ensure_starter().path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--share", default="on,off")
    parser.add_argument("--compile", default="auto", choices=["auto", "off", "on"])
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--model", help="a model folder (config and weights); default: the starter")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--model-dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return 0

    made_home = not os.environ.get("WREN_HOME")
    home = os.environ.get("WREN_HOME") or tempfile.mkdtemp(prefix="wren-bench-")
    os.environ["WREN_HOME"] = home
    try:
        model_dir = _model_dir(args)
        _run(args, model_dir, "on", 1)  # compiles and saves the decode step once, unmeasured
        report: dict = {"cpu": cpu(), "model": str(model_dir), "compile": args.compile,
                        "seconds": args.seconds, "rounds": args.rounds}
        for share in [s.strip() for s in args.share.split(",") if s.strip()]:
            alone, together, ratios = [], [], []
            for _ in range(args.rounds):
                one = _run(args, model_dir, share, 1)[0]["tps"]
                two = [r["tps"] for r in _run(args, model_dir, share, 2)]
                alone.append(one)
                together.extend(two)
                if one > 0:  # no token alone even past the window: that round has no ratio
                    ratios.append(sum(two) / one)
            report[f"share_{share}"] = {
                "alone_tps": round(statistics.median(alone), 1),
                "together_tps": round(statistics.median(together), 1),
                "aggregate_ratio": round(statistics.median(ratios), 3) if ratios else None,
                "alone_runs": [round(x, 1) for x in alone],
                "together_runs": [round(x, 1) for x in together],
            }
        print(json.dumps(report, indent=2))
    finally:
        if made_home:
            shutil.rmtree(home, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
