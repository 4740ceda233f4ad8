"""bench/gpu_gguf.py's other columns: transformers eager bf16 and llama.cpp's CUDA tools.

transformers: a LlamaForCausalLM of the model's shape built on the device with its own random
init in bfloat16 (an 8B's 16 GB never touches a disk), measured as bench/gpu.py measures it.
llama.cpp: llama-bench and llama-batched-bench from the folder --llama-bench names (built by
bench/device/build_llama_cpp.sh, in the background while the other columns run), on the same
GGUF files Wren loaded; while the build's log shows it running, the section waits for it.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import time
import traceback
from pathlib import Path

import gpu as base
import torch

BATCH = base.BATCH


def build_hf(cfg: dict, device: str):
    import transformers

    transformers.logging.set_verbosity_error()
    config = transformers.LlamaConfig(**cfg)
    with torch.device(device):
        try:
            model = transformers.LlamaForCausalLM._from_config(config, dtype=torch.bfloat16)
        except TypeError:  # transformers before 4.56 names it torch_dtype
            model = transformers.LlamaForCausalLM._from_config(config, torch_dtype=torch.bfloat16)
    return model.to(device=device, dtype=torch.bfloat16).eval()


def measure_hf(name: str, cfg: dict, args, report: base.Report, budget: base.Budget, bound) -> None:
    try:
        import transformers
    except ImportError as exc:
        report.put((name, "transformers"), f"skipped: transformers is not installed ({exc})")
        return
    if budget.left() <= 0:
        report.put((name, "transformers"), "skipped: the section's time budget is spent")
        return
    entry: dict = {"version": transformers.__version__}
    model = None
    try:
        started = time.perf_counter()
        model = build_hf(cfg, args.device)
        base.sync(args.device)
        entry.update(load_s=round(time.perf_counter() - started, 2),
                     attention=getattr(model.config, "_attn_implementation", None))
        report.put((name, "transformers"), entry)
        hf_figures(model, cfg["vocab_size"], args, report, budget, bound, entry, (name, "transformers"))
    except Exception as exc:  # a transformers version this was not tried with: say so, go on
        traceback.print_exc()
        entry["error"] = f"{type(exc).__name__}: {str(exc)[:500]}"
        report.put((name, "transformers"), entry)
    finally:
        del model
        if args.device == "cuda":
            torch.cuda.empty_cache()


def hf_figures(model, vocab: int, args, report, budget, bound, entry: dict, where: tuple) -> None:
    device = args.device

    def forward(ids: list[int], past=None):
        with torch.inference_mode():
            x = torch.tensor([ids], device=device)
            out = model.model(input_ids=x, past_key_values=past, use_cache=past is not None)
            model.lm_head(out.last_hidden_state[:, -1])
            return out.past_key_values

    for n in args.prompt_lengths:
        if budget.left() <= 0:
            entry["skipped"] = "the section's time budget is spent"
            report.put(where, entry)
            return
        ids = base.prompt_ids(vocab, n, 2)

        def once(ids=ids) -> float:
            base.sync(device)
            started = time.perf_counter()
            forward(ids)
            base.sync(device)
            return len(ids) / (time.perf_counter() - started)

        once()
        entry[f"prompt_{n}"] = base.summary(base.repeat(once, args.runs, budget))
        report.put(where, entry)
    for batch in (1, BATCH):
        if budget.left() <= 0:
            break
        entry[f"decode_b{batch}"] = base.summary(hf_decode(model, vocab, batch, args, budget), bound(batch))
        report.put(where, entry)
    if budget.left() > 0:
        entry[f"first_token_after_{args.history}"] = hf_first_token(model, forward, vocab, args, budget)
        report.put(where, entry)


def hf_decode(model, vocab: int, batch: int, args, budget) -> list[float]:
    """tokens/s of generate's decode steps: N - 1 new tokens over generate(N) - generate(1)."""
    ids = torch.tensor([base.prompt_ids(vocab, args.prompt, 10 + b) for b in range(batch)], device=args.device)

    def generate(n: int) -> float:
        base.sync(args.device)
        started = time.perf_counter()
        with torch.inference_mode():
            model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n,
                           do_sample=False, pad_token_id=0, eos_token_id=None)
        base.sync(args.device)
        return time.perf_counter() - started

    generate(2)  # warm-up

    def once() -> float:
        for _ in range(3):  # noise can make the difference negative on a busy machine: again
            steps = generate(args.tokens) - generate(1)
            if steps > 0:
                return batch * (args.tokens - 1) / steps
        return float("nan")

    return base.repeat(once, args.runs, budget)


def hf_first_token(model, forward, vocab: int, args, budget) -> dict:
    history = base.prompt_ids(vocab, args.history, 3)
    question = base.prompt_ids(vocab, args.question, 4)

    def timed(fn) -> float:
        base.sync(args.device)
        started = time.perf_counter()
        fn()
        base.sync(args.device)
        return time.perf_counter() - started

    def cold() -> float:
        return timed(lambda: forward(history + question))

    def cached() -> float:
        past = forward(history, past=_empty_cache())
        return timed(lambda: forward(question, past=past))

    out = {"history": len(history), "question": len(question)}
    for key, fn in (("cold_ms", cold), ("cached_history_ms", cached)):
        fn()
        out[key] = round(1e3 * statistics.median(base.repeat(lambda fn=fn: fn(), args.runs, budget)), 2)
    return out


def _empty_cache():
    from transformers import DynamicCache

    return DynamicCache()


# --- llama.cpp --------------------------------------------------------------------------

def wait_for_build(tools: Path | None, log: Path | None, budget: base.Budget) -> str | None:
    """None when llama-bench is there once the build is over (its log, if given, ends in BUILD
    EXIT); else why not. Waits while the build runs, so the tools are measured with the
    compiler off the CPU."""
    if tools is None:
        return "no --llama-bench folder given"
    bench = tools / "llama-bench"
    while True:
        done = log is not None and log.is_file() and "BUILD EXIT" in log.read_text(errors="replace")
        if done or log is None or budget.left() <= 5:
            break
        time.sleep(2)
    if bench.is_file():
        return None
    tail = log.read_text(errors="replace")[-600:] if log is not None and log.is_file() else ""
    state = "the build ended without it" if done else "the build is not done in time"
    return f"no llama-bench at {bench}: {state}. {tail}".strip()


def run_json(cmd: list[str], timeout: float) -> tuple[list[dict], str]:
    """A tool's JSON (a list) or JSON lines output, and its stderr's end."""
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=max(timeout, 5))
    if proc.returncode != 0:
        raise RuntimeError(f"{Path(cmd[0]).name} exit {proc.returncode}: {proc.stderr[-800:]}")
    text = proc.stdout.strip()
    if text.startswith("["):
        return json.loads(text), proc.stderr[-300:]
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")], proc.stderr[-300:]


def llama_bench_figures(rows: list[dict], bound, history: int, question: int) -> dict:
    """llama-bench's rows as this report's keys: prompt_N, decode_b1 and first_token_after_H
    (cold: the history and question as one prompt; cached: the question at depth H)."""
    out: dict = {}
    first = {"history": history, "question": question}
    for row in rows:
        rate = float(row["avg_ts"])
        if row.get("n_gen", 0) == 0 and row.get("n_depth", 0) == 0:
            if row["n_prompt"] == history + question:
                first["cold_ms"] = round(1e3 * row["n_prompt"] / rate, 2)
            else:
                out[f"prompt_{row['n_prompt']}"] = {"tokens_per_s": round(rate, 1)}
        elif row.get("n_prompt", 0) == 0:
            out["decode_b1"] = {"tokens_per_s": round(rate, 1),
                                "fraction_of_bound": float(f"{rate / bound(1):.3g}") if bound else None}
        elif row.get("n_depth", 0) == history and row["n_prompt"] == question:
            first["cached_history_ms"] = round(1e3 * row["n_prompt"] / rate, 2)
    if len(first) > 2:
        out[f"first_token_after_{history}"] = first
    return out


def measure_llama_cpp(files: dict[str, Path], args, report: base.Report, budget: base.Budget, bounds) -> None:
    why = wait_for_build(args.llama_bench, args.llama_build_log, budget)
    if why is not None:
        for name in files:
            report.put((name, "llama.cpp"), f"skipped: {why}")
        return
    tools = args.llama_bench
    ngl = ["-ngl", "99"] if args.device == "cuda" else ["-ngl", "0"]
    for name, path in files.items():
        entry: dict = {}
        try:
            if budget.left() <= 0:
                report.put((name, "llama.cpp"), "skipped: the section's time budget is spent")
                continue
            prompts = ",".join(str(n) for n in [*args.prompt_lengths, args.history + args.question])
            rows, _ = run_json([str(tools / "llama-bench"), "-m", str(path), *ngl, "-p", prompts, "-n",
                                str(args.tokens), "-r", str(args.runs), "-o", "json"], budget.left())
            entry.update(llama_bench_figures(rows, bounds.get(name), args.history, args.question))
            report.put((name, "llama.cpp"), entry)
            rows += run_json([str(tools / "llama-bench"), "-m", str(path), *ngl, "-p", str(args.question),
                              "-n", "0", "-d", str(args.history), "-r", str(args.runs), "-o", "json"],
                             budget.left())[0]
            entry.update(llama_bench_figures(rows, bounds.get(name), args.history, args.question))
            report.put((name, "llama.cpp"), entry)
            batched = tools / "llama-batched-bench"
            if batched.is_file() and budget.left() > 0:
                rows, _ = run_json([str(batched), "-m", str(path), *ngl, "-c", str(BATCH * (args.prompt + args.tokens)),
                                    "-npp", str(args.prompt), "-ntg", str(args.tokens), "-npl", f"1,{BATCH}",
                                    "--output-format", "jsonl"], budget.left())
                for row in rows:
                    if row.get("pl") == BATCH:
                        rate = float(row["speed_tg"])
                        entry[f"decode_b{BATCH}"] = {"tokens_per_s": round(rate, 1), "fraction_of_bound":
                                                     float(f"{rate / bounds[name](BATCH):.3g}") if name in bounds else None}
                report.put((name, "llama.cpp"), entry)
        except Exception as exc:  # a flag this version lacks, a crash: say so, go on
            traceback.print_exc()
            entry["error"] = f"{type(exc).__name__}: {str(exc)[:600]}"
            report.put((name, "llama.cpp"), entry)
