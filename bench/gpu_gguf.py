"""Wren's CUDA path on GGUF Q4_K_M blocks beside transformers bf16 and llama.cpp CUDA; JSON.

One prepared run of at most 8 minutes on an H100/H200 (the `device` tool; bench/gpu.py is
the bf16 safetensors run). Runbook:
  1. here: bash bench/device/prepare.sh   (wheels the GPU machine's Python 3.12 lacks, the
     starter's tokenizer as a small GGUF in .dev, llama.cpp's trimmed source in .llama)
  2. run(carry=[".whl", ".dev", ".llama"], timeout_s=560, command="bash bench/device/run.sh gguf 400")
     run.sh starts llama.cpp's CUDA build (arch 90, llama-bench and llama-batched-bench,
     -j16) in the background, then runs this script, which measures Wren and transformers
     while it compiles and llama.cpp last, if the build finished in time.
  3. files_at: gguf.json ("complete": false if cut short: rewritten after every figure),
     gguf.err (the PARTIAL lines), llama_build.log; SUMMARY lines in output_tail. give_back.

Models, random weights (the speed does not depend on the values): the starter's shape in the
shipped starter's layout (Q4_1, a Q8_0 tied embedding), Llama-3.2-1B and Llama-3.1-8B shapes
in Q4_K_M (bench/random_gguf.py: random blocks with sane scales, written in seconds), each
imported as Wren imports a GGUF. Per model and column:
  - wren: TorchBackend(device).load(folder, quant="file") (GGUF blocks kept on the GPU, the
    default compile setting): the load (seconds, GPU memory taken, layers on the GPU, KV
    budget: the placement plan), prompt tokens/s at 512 and 4,096, decode tokens/s at batch
    1 (logits read back per token, as a chat does) and batch 8 (decode_batch), the first
    token after a 2,048-token history: cold (history and question prefilled together) and
    with the history cached (the question's 32 tokens prefilled after it);
    where that default decodes eagerly, a second load with compile=True (CUDA graphs) gives
    batch-1 decode again (wren_cuda_graphs); on CUDA, batch-1 decode with the other
    matrix-vector kernels (wren_q8, wren_words: triton_gguf.MATVEC_KERNEL), not counted in the
    target until one is the default;
  - transformers: eager bf16 (dense random weights of the same shapes, made on the device):
    the same figures, decode through generate (bench/gpu.py's method);
  - llama.cpp: llama-bench -ngl 99 -p 512,4096,2080 -n 128 (defaults for -b/-ub; 2,080 tokens:
    the cold first token), -p 32 -d 2048
    for the first token after the history, llama-batched-bench -npl 1,8 for batch decode.
Each decode figure is also a fraction of the bandwidth bound: bytes a step reads (the
weights as each column holds them, the token embedding once only when it is the tied head,
plus the KV cache at the mean position) / a measured device-to-device copy (bench/gpu.py).
A section that fails records its error and the run goes on; --budget-s is shared out per
section and time a section leaves carries on.

    python3 bench/gpu_gguf.py [--models starter,llama-1b,llama-8b] [--budget-s 400] [--out F]
        [--llama-bench DIR/bin] [--tokenizer-from GGUF]
    .venv/bin/python bench/gpu_gguf.py --device cpu --tiny   # the dry run CI does
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import gpu as base  # noqa: E402  (bench/gpu.py: Budget, Report, copy_bandwidth, bound_fn...)
import gpu_others  # noqa: E402
import make_gguf  # noqa: E402
import random_gguf  # noqa: E402
import torch  # noqa: E402
from make_gguf import Shape  # noqa: E402

SHAPES = {
    "starter": (Shape(hidden=576, layers=30, heads=9, kv_heads=3, ffn=1536, vocab=49152, tied=True,
                      context_length=8192, rope_theta=100000.0, label="SmolLM2-135M"), "starter"),
    "llama-1b": (make_gguf.PRESETS["1b"], "q4_k_m"),
    "llama-8b": (make_gguf.PRESETS["8b"], "q4_k_m"),
}
TINY = {  # vocab: the tokenizer's size at least (set at run time)
    "starter": (Shape(hidden=64, layers=2, heads=4, kv_heads=2, ffn=128, vocab=0, tied=True,
                      context_length=2048, rope_theta=100000.0, label="tiny starter"), "starter"),
    "llama-1b": (Shape(hidden=256, layers=2, heads=4, kv_heads=2, ffn=512, vocab=0, tied=True,
                       context_length=2048, rope_factor=32.0, label="tiny 1b"), "q4_k_m"),
    "llama-8b": (Shape(hidden=256, layers=3, heads=4, kv_heads=2, ffn=512, vocab=0, tied=False,
                       context_length=2048, rope_factor=8.0, label="tiny 8b"), "q4_k_m"),
}
# Share of --budget-s per section, in order (llama.cpp last: its build runs meanwhile).
SHARES = {"bandwidth": 0.01, "starter/wren": 0.07, "starter/hf": 0.04, "llama-1b/wren": 0.12,
          "llama-1b/hf": 0.07, "llama-8b/wren": 0.26, "llama-8b/hf": 0.17, "llama.cpp": 0.26}
BATCH = base.BATCH


def hf_config(shape: Shape) -> dict:
    """The transformers config of a make_gguf Shape (what Wren's import writes, in short)."""
    cfg = dict(model_type="llama", architectures=["LlamaForCausalLM"], vocab_size=shape.vocab,
               hidden_size=shape.hidden, intermediate_size=shape.ffn, num_hidden_layers=shape.layers,
               num_attention_heads=shape.heads, num_key_value_heads=shape.kv_heads, rms_norm_eps=shape.rms_eps,
               rope_theta=shape.rope_theta, max_position_embeddings=shape.context_length,
               tie_word_embeddings=shape.tied, torch_dtype="bfloat16", bos_token_id=1, eos_token_id=2)
    if shape.rope_factor:
        cfg["rope_scaling"] = {"rope_type": "llama3", "factor": shape.rope_factor, "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
    return cfg


def read_bytes(planned: list, shape: Shape) -> tuple[int, int, int]:
    """(GGUF bytes a decode step reads, the same matrices' bf16 bytes, KV bytes per position):
    the token embedding counts only where it is the tied head (a token reads one row)."""
    kept = [p for p in planned if p.name != "token_embd.weight" or shape.tied]
    quantized = sum(make_gguf.tensor_bytes(p) for p in kept)
    dense = 2 * sum(math.prod(p.shape) for p in kept if p.fill != "rope_freqs")
    kv = 2 * shape.layers * shape.kv_heads * shape.head_dim * 2  # keys and values, bfloat16
    return quantized, dense, kv


def make_model(name: str, shape: Shape, layout: str, args, root: Path, report: base.Report) -> Path:
    """The random GGUF, imported into a model folder as Wren imports one; its path."""
    from wren.engine.modelhub.gguf_import import import_gguf

    started = time.perf_counter()
    source = root / f"{name}.gguf"
    made = random_gguf.write(source, shape, layout, tokenizer_from=args.tokenizer_from, seed=1)
    folder = root / name
    import_gguf(source, folder, move=True)
    report.put((name, "file"), {"layout": layout, "bytes": made["file_bytes"], "tensors": made["tensors_per_type"],
                                "parameters": made["parameters"], "made_s": round(time.perf_counter() - started, 1)})
    return folder


def load_figures(loaded, device: str, before: int, seconds: float) -> dict:
    """What the load took: time, GPU memory, the placement plan (layers on the GPU, KV)."""
    out: dict = {"load_s": round(seconds, 2), "quant": loaded.quant, "dtype": loaded.dtype,
                 "decode_mode": loaded.decode_mode, "context_length": loaded.context_length,
                 "slots": loaded.slots}
    plan = getattr(loaded, "gpu_plan", None)
    if plan is not None:
        out["plan"] = {k: v for k, v in plan.as_dict().items() if k != "reason"} | {"reason": plan.reason}
        out["gpu_layers"] = f"{plan.gpu_layers}/{plan.layers}"
    if device == "cuda":
        torch.cuda.synchronize()
        free, total = torch.cuda.mem_get_info()
        out.update(gpu_memory_allocated_gib=round((torch.cuda.memory_allocated() - before) / 2**30, 2),
                   gpu_memory_reserved_gib=round(torch.cuda.memory_reserved() / 2**30, 2),
                   gpu_free_after_gib=round(free / 2**30, 2), gpu_total_gib=round(total / 2**30, 2))
    return out


def first_token(prefill, history: list[int], question: list[int], device: str, runs: int,
                budget: base.Budget) -> dict:
    """ms to the first token's logits after a history: cold (all prefilled together) and with
    the history cached (`prefill(ids, start)` of the question alone)."""
    def cold() -> float:
        base.sync(device)
        started = time.perf_counter()
        prefill(history + question, 0)
        base.sync(device)
        return time.perf_counter() - started

    def cached() -> float:
        prefill(history, 0)
        base.sync(device)
        started = time.perf_counter()
        prefill(question, len(history))
        base.sync(device)
        return time.perf_counter() - started

    out = {"history": len(history), "question": len(question)}
    for key, fn in (("cold_ms", cold), ("cached_history_ms", cached)):
        fn()  # warm-up: these lengths' kernels
        times = base.repeat(lambda fn=fn: fn(), runs, budget)
        out[key] = round(1e3 * statistics.median(times), 2)
    return out


def measure_wren(name: str, folder: Path, args, report: base.Report, budget: base.Budget, bound) -> None:
    from wren.engine.inference.backends.torch import TorchBackend

    entry: dict = {}
    loaded = None
    vocab = report.data[name]["shape"]["vocab"]
    try:
        before = torch.cuda.memory_allocated() if args.device == "cuda" else 0
        started = time.perf_counter()
        # the default compile setting on CUDA (what a user gets); the dry run decodes eagerly
        loaded = TorchBackend(args.device).load(folder, quant="file", context_length=args.context, slots=BATCH,
                                                compile="auto" if args.device == "cuda" else "off")
        entry["load"] = load_figures(loaded, args.device, before, time.perf_counter() - started)
        report.put((name, "wren"), entry)
        figures(loaded.prefill, loaded, vocab, args, report, budget, bound, entry, (name, "wren"))
    except Exception as exc:  # one failing path must not cost the run's other figures
        traceback.print_exc()
        entry["error"] = f"{type(exc).__name__}: {str(exc)[:500]}"
        report.put((name, "wren"), entry)
    finally:
        if loaded is not None:
            mode = loaded.decode_mode
            loaded.close()
        if args.device == "cuda":
            torch.cuda.empty_cache()
    if args.device == "cuda" and loaded is not None and mode != "cuda-graph" and budget.left() > 20:
        decode_column(name, folder, vocab, args, report, budget, bound, "wren_cuda_graphs")
    for kernel in ("q8", "words"):  # the other matrix-vector kernels, the likelier first
        if args.device == "cuda" and budget.left() > 20:
            decode_column(name, folder, vocab, args, report, budget, bound, f"wren_{kernel}", kernel=kernel)


def decode_column(name: str, folder: Path, vocab: int, args, report: base.Report, budget: base.Budget,
                  bound, column: str, kernel: str | None = None) -> None:
    """Batch-1 decode with the decode step captured in CUDA graphs (compile=True): where the
    default load decoded eagerly ("wren_cuda_graphs"), or with other matrix-vector kernels
    (`kernel`: triton_gguf.MATVEC_KERNEL while the model loads, captures and decodes)."""
    from wren.engine.inference.backends.torch import TorchBackend
    from wren.engine.inference.quant import triton_gguf

    entry: dict = {}
    loaded = None
    before = triton_gguf.MATVEC_KERNEL
    try:
        if kernel is not None:
            triton_gguf.MATVEC_KERNEL = entry["matvec_kernel"] = kernel
        started = time.perf_counter()
        loaded = TorchBackend("cuda").load(folder, quant="file", context_length=args.context, slots=1, compile=True)
        entry.update(load_s=round(time.perf_counter() - started, 2), capture_s=round(loaded.warmup_s, 2),
                     decode_mode=loaded.decode_mode)
        prompt = base.prompt_ids(vocab, args.prompt, 1)
        entry["decode_b1"] = base.summary(base.wren_decode(loaded, prompt, args.tokens, args.runs, budget), bound(1))
    except Exception as exc:  # graphs failing to capture must not cost the rest
        traceback.print_exc()
        entry["error"] = f"{type(exc).__name__}: {str(exc)[:500]}"
    finally:
        triton_gguf.MATVEC_KERNEL = before
        if loaded is not None:
            loaded.close()
        torch.cuda.empty_cache()
    report.put((name, column), entry)


def figures(prefill, loaded, vocab: int, args, report, budget, bound, entry: dict, where: tuple) -> None:
    """Prompt, decode at batch 1 and 8, first token after the history, into `entry`."""
    prompt = base.prompt_ids(vocab, args.prompt, 1)
    for n in args.prompt_lengths:
        if budget.left() <= 0:
            entry["skipped"] = "the section's time budget is spent"
            report.put(where, entry)
            return
        entry[f"prompt_{n}"] = base.summary(base.wren_prompt(loaded, base.prompt_ids(vocab, n, 2), args.device,
                                                             args.runs, budget))
        report.put(where, entry)
    steps = [("decode_b1", lambda: base.summary(base.wren_decode(loaded, prompt, args.tokens, args.runs, budget),
                                                bound(1))),
             (f"decode_b{BATCH}", lambda: base.summary(base.wren_decode_batch(
                 loaded, [base.prompt_ids(vocab, args.prompt, 10 + b) for b in range(BATCH)], args.tokens,
                 args.runs, budget), bound(BATCH))),
             (f"first_token_after_{args.history}", lambda: first_token(
                 prefill, base.prompt_ids(vocab, args.history, 3), base.prompt_ids(vocab, args.question, 4),
                 args.device, args.runs, budget)),
             ("batch_graph_vs_eager", lambda: base.batch_graph_check(
                 loaded, [base.prompt_ids(vocab, 16, 20 + b) for b in range(BATCH)], 2 * BATCH))]
    for key, fn in steps:
        if budget.left() <= 0:
            entry["skipped"] = "the section's time budget is spent"
            break
        try:
            entry[key] = fn()
        except Exception as exc:  # e.g. batch decode missing on a path: keep the others
            traceback.print_exc()
            entry[key] = f"error: {type(exc).__name__}: {str(exc)[:300]}"
        report.put(where, entry)


def bound_for(name: str, planned, shape: Shape, args, report: base.Report):
    """(bound for GGUF blocks, bound for bf16 weights), each tokens/s at batch B."""
    quantized, dense, kv = read_bytes(planned, shape)
    gguf_bound = base.bound_fn(quantized, kv, args, report, name)
    bandwidth = report.data["copy_bandwidth_gb_per_s"] * 1e9
    mean_pos = args.prompt + args.tokens / 2

    def bf16(batch: int) -> float:  # as base.bound_fn, for the dense weights
        return batch * bandwidth / (dense + batch * kv * mean_pos)

    report.put((name, "bound_bf16"), {"weight_bytes": dense, "decode_b1_tokens_per_s": round(bf16(1), 1),
                                      f"decode_b{BATCH}_tokens_per_s": round(bf16(BATCH), 1)})
    return gguf_bound, bf16


def parse_args(argv: list[str] | None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--tiny", action="store_true", help="tiny shapes and counts: the dry run on a CPU")
    ap.add_argument("--models", default="starter,llama-1b,llama-8b")
    ap.add_argument("--tokens", type=int, help="decoded tokens per run (default 128; tiny 8)")
    ap.add_argument("--prompt", type=int, default=32, help="prompt tokens before decoding")
    ap.add_argument("--prompt-lengths", help="prompt-processing lengths (default 512,4096; tiny 16,64)")
    ap.add_argument("--history", type=int, help="history tokens before the first token (default 2048; tiny 32)")
    ap.add_argument("--question", type=int, default=32, help="the new turn's tokens after the history")
    ap.add_argument("--runs", type=int, default=3, help="runs per figure, medians reported")
    ap.add_argument("--budget-s", type=float, default=400.0, help="the whole run's time budget")
    ap.add_argument("--skip-hf", action="store_true")
    ap.add_argument("--llama-bench", type=Path, help="folder holding llama-bench (and llama-batched-bench)")
    ap.add_argument("--llama-build-log", type=Path, help="the background build's log: waited on while it runs")
    ap.add_argument("--tokenizer-from", type=Path, help="a GGUF with a tokenizer (default: .dev/tokenizer.gguf, "
                                                        "else the starter's)")
    ap.add_argument("--out", type=Path, help="also write the report here, after every figure")
    args = ap.parse_args(argv)
    args.tokens = args.tokens or (8 if args.tiny else 128)
    args.history = args.history or (32 if args.tiny else 2048)
    args.prompt_lengths = [int(x) for x in (args.prompt_lengths or ("16,64" if args.tiny else "512,4096")).split(",")]
    args.models = [m.strip() for m in args.models.split(",") if m.strip()]
    for m in args.models:
        if m not in SHAPES:
            ap.error(f"--models: unknown model {m!r}; choose from {', '.join(SHAPES)}")
    args.context = max(args.prompt_lengths + [args.history + args.question, args.prompt + args.tokens])
    if args.tokenizer_from is None:
        dev = BENCH.parent / ".dev" / "tokenizer.gguf"
        args.tokenizer_from = dev if dev.is_file() else make_gguf.starter_gguf()
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("no CUDA device; use --device cpu --tiny for a dry run")
    return args


def shapes_for(args) -> dict[str, tuple[Shape, str]]:
    if not args.tiny:
        return SHAPES
    vocab = max(256, make_gguf._tokenizer_size(args.tokenizer_from))
    vocab = -(-vocab // 256) * 256
    return {k: (dataclasses.replace(s, vocab=vocab), layout) for k, (s, layout) in TINY.items()}


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    os.environ.setdefault("WREN_HOME", tempfile.mkdtemp(prefix="wren-gguf-bench-home-"))
    budget = base.Budget(args.budget_s, {k: v for k, v in SHARES.items()
                                         if k.split("/")[0] in args.models or "/" not in k})
    report = base.Report(args.out, {
        "complete": False, "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
        "torch": torch.__version__, "cuda": torch.version.cuda, "tiny": args.tiny, "batch": [1, BATCH],
        "prompt_tokens": args.prompt, "decode_tokens": args.tokens, "prompt_lengths": args.prompt_lengths,
        "history": args.history, "question": args.question, "context": args.context, "budget_s": args.budget_s,
        "triton": _version("triton"), "transformers": _version("transformers")})
    report.save()
    budget.section("bandwidth")
    report.put(("copy_bandwidth_gb_per_s",), round(base.copy_bandwidth(args.device, 64 if args.tiny else 1024) / 1e9, 1))
    shapes = shapes_for(args)
    root = Path(tempfile.mkdtemp(prefix="wren-gguf-bench-"))
    files: dict[str, Path] = {}
    bounds: dict[str, tuple] = {}
    try:
        for name in args.models:
            shape, layout = shapes[name]
            report.put((name, "shape"), dataclasses.asdict(shape))
            planned = random_gguf.plan(shape, layout)
            bounds[name] = bound_for(name, planned, shape, args, report)
            if budget.section(f"{name}/wren") <= 0:
                report.put((name, "skipped"), "the run's time budget is spent")
                continue
            try:
                folder = make_model(name, shape, layout, args, root, report)
            except Exception as exc:
                traceback.print_exc()
                report.put((name, "file"), {"error": f"{type(exc).__name__}: {exc}"})
                continue
            files[name] = folder / "model.gguf"
            measure_wren(name, folder, args, report, budget, bounds[name][0])
            budget.section(f"{name}/hf")
            if args.skip_hf:
                report.put((name, "transformers"), "skipped: --skip-hf")
            else:
                gpu_others.measure_hf(name, hf_config(shape), args, report, budget, bounds[name][1])
        budget.section("llama.cpp")
        gpu_others.measure_llama_cpp(files, args, report, budget, {k: b[0] for k, b in bounds.items()})
    finally:
        shutil.rmtree(root, ignore_errors=True)
    report.data["target"] = target(report.data, args)
    report.data["complete"] = True
    report.data["elapsed_s"] = round(time.perf_counter() - budget.started, 1)
    report.save()
    for line in summary_lines(report.data, args.models):
        print("SUMMARY " + line, file=sys.stderr)
    print(json.dumps(report.data, indent=2))
    return report.data


def target(data: dict, args) -> dict:
    """The issue's target on the 8B (else the largest model measured): batch-1 decode at least
    llama.cpp's, or at least 75% of the bandwidth bound where llama.cpp gave no figure."""
    for name in reversed(args.models):
        columns = [data.get(name, {}).get(k) for k in ("wren", "wren_cuda_graphs")]
        figures = [c["decode_b1"] for c in columns if isinstance(c, dict) and isinstance(c.get("decode_b1"), dict)
                   and c["decode_b1"].get("tokens_per_s") is not None]
        if not figures:
            continue
        ours = max(figures, key=lambda f: f["tokens_per_s"])  # eager or CUDA graphs, the better
        theirs = data.get(name, {}).get("llama.cpp", {})
        theirs = theirs.get("decode_b1") if isinstance(theirs, dict) else None
        real = args.device == "cuda" and not args.tiny
        if isinstance(theirs, dict) and theirs.get("tokens_per_s"):
            ratio = ours["tokens_per_s"] / theirs["tokens_per_s"]
            return {"model": name, "check": "batch-1 decode >= 1.0x llama.cpp CUDA", "ratio": round(ratio, 3),
                    "met": (ratio >= 1.0) if real else None}
        fraction = ours.get("fraction_of_bound")
        return {"model": name, "check": "batch-1 decode >= 75% of the bandwidth bound (no llama.cpp figure)",
                "fraction": fraction, "met": (fraction >= 0.75) if real and fraction is not None else None}
    return {"check": "no batch-1 Wren decode figure", "met": None}


def summary_lines(data: dict, models: list[str]) -> list[str]:
    """One short line per model and column: tokens/s (fraction of the bound) and first token."""
    lines = [f"{data['device']}, torch {data['torch']}, triton {data.get('triton')}, copy "
             f"{data.get('copy_bandwidth_gb_per_s')} GB/s; target {data.get('target')}"]
    for name in models:
        section = data.get(name, {})
        load = section.get("wren", {}).get("load", {}) if isinstance(section.get("wren"), dict) else {}
        lines.append(f"{name}: bound b1 {section.get('bound', {}).get('decode_b1_tokens_per_s')} tok/s; load "
                     f"{ {k: load.get(k) for k in ('load_s', 'gpu_layers', 'gpu_memory_allocated_gib', 'decode_mode')} }")
        for column in ("wren", "wren_cuda_graphs", "wren_q8", "wren_words", "transformers", "llama.cpp"):
            if column not in section:
                continue
            figures = section.get(column)
            if not isinstance(figures, dict):
                lines.append(f"{name} {column}: {figures}")
                continue
            parts = []
            for key, value in figures.items():
                if isinstance(value, dict) and "tokens_per_s" in value:
                    share = f" ({value['fraction_of_bound']:.0%})" if value.get("fraction_of_bound") else ""
                    parts.append(f"{key} {value['tokens_per_s']}{share}")
                elif key.startswith("first_token") and isinstance(value, dict):
                    parts.append(f"{key} cold {value.get('cold_ms')} ms, cached {value.get('cached_history_ms')} ms")
                elif key in ("error", "skipped") or (isinstance(value, str) and value.startswith("error")):
                    parts.append(f"{key}: {str(value)[:160]}")
            lines.append(f"{name} {column}: " + ", ".join(parts))
    return lines


def _version(module: str) -> str | None:
    try:
        return __import__(module).__version__
    except Exception:  # not installed (or broken): the report says None
        return None


if __name__ == "__main__":
    main()
