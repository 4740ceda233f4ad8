"""GGUF blocks on a CUDA GPU and the layer split, checked on a real GPU in a few minutes.

    python3 bench/gpu_offload.py [--out results.json] [--skip-8b]

1. A tiny random model (4 layers, Q4_0 tied / Q8_0 untied) loaded on the CPU (float32, the
   reference), on the GPU whole (float32, then bfloat16) and split at layer 2 (GPU float32 |
   CPU float32): the logits of a prompt, decoded tokens, a second slot and a batched step,
   as distances from the CPU's; the weights on the GPU are the file's blocks (QTensors).
   "-exact" rows run the GPU's layers through the exact dequantize path, not Triton's.
2. A Llama-3.1-8B-shaped Q4_K_M file (a header and zero blocks; tests/engine/inference/
   test_gpu_plan.py writes it): the plan on this GPU and on a 12 GiB one, the GPU memory
   the load takes (the blocks, not bfloat16), a prompt and a few decoded tokens' time;
   then forced to 24 GPU layers (the rest on the CPU).
Without CUDA, part 1 runs with the CPU standing in for the GPU and part 2 is skipped.
Prints one JSON object per check and writes them all to --out.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.engine.inference.test_gpu_plan import CARD_12GB, LLAMA_8B, header_only_gguf  # noqa: E402
from tests.engine.inference.test_offload_split import LAYERS, _folder, _run  # noqa: E402
from wren.engine.inference.backends.torch import TorchBackend  # noqa: E402
from wren.engine.inference.placement import model_bytes_from_gguf, plan_layers  # noqa: E402
from wren.engine.inference.quant.modules import QuantLinear  # noqa: E402

RESULTS: list[dict] = []


def report(**fields) -> None:
    RESULTS.append(fields)
    print(json.dumps(fields, default=str), flush=True)


def _distance(reference: list[np.ndarray], got: list[np.ndarray]) -> dict:
    worst = max(float(np.abs(a - b).max()) for a, b in zip(reference, got))
    same = all(np.array_equal(np.argmax(a, -1), np.argmax(b, -1)) for a, b in zip(reference, got))
    return {"max_abs_diff": worst, "argmax_same": same}


def parity(root: Path, device: str) -> None:
    for tied, folder in ((True, _folder(root / "tied", True, _q("Q4_0"))), (False, _folder(root / "untied", False, _q("Q8_0")))):
        reference = _run(TorchBackend("cpu").load(folder, compile="off", context_length=64, slots=2))
        backend = TorchBackend(device)
        for label, options in (("whole-float32", {"dtype": "float32"}), ("whole-bfloat16", {}),
                               ("split2-float32", {"dtype": "float32", "gpu_layers": 2}),
                               ("whole-float32-exact", {"dtype": "float32"}),
                               ("split2-float32-exact", {"dtype": "float32", "gpu_layers": 2})):
            started = time.perf_counter()
            with _exact_gpu(label.endswith("-exact")):
                model = backend.load(folder, compile="off", context_length=64, slots=2, **options)
                got = _run(model)
            inner = model._model
            blocks = [m for m in inner.modules() if isinstance(m, QuantLinear)]
            report(check="parity", tied=tied, load=label, device=device, backend=model.backend,
                   runs=[(a, b, str(d), str(t)) for a, b, d, t in inner.stages.runs],
                   plan=None if model.gpu_plan is None else model.gpu_plan.reason,
                   blocks_on=sorted({str(m.raw0.device) for m in blocks}),
                   cache_on=sorted({str(layer.attention.k_slots.device) for layer in inner.layers}),
                   seconds=round(time.perf_counter() - started, 2), **_distance(reference, got))
            model.close()
        if device == "cuda":
            graphs = backend.load(folder, compile=True, context_length=256, slots=1, dtype="float32")
            eager = backend.load(folder, compile="off", context_length=256, slots=1, dtype="float32")
            for m in (graphs, eager):
                m.prefill(list(range(5, 29)), 0)
            got = [graphs.decode(40 + i, 24 + i) for i in range(4)]
            want = [eager.decode(40 + i, 24 + i) for i in range(4)]
            report(check="cuda-graphs", tied=tied, decode_mode=graphs.decode_mode, **_distance(want, got))
            graphs.close()
            eager.close()
    assert LAYERS == 4


@contextlib.contextmanager
def _exact_gpu(on: bool):
    """With `on`, GPU weights take QuantLinear's exact dequantize-then-multiply path instead
    of the Triton kernels: the split's own arithmetic, apart from the kernels'."""
    import wren.engine.inference.quant.modules as qm

    saved = getattr(qm, "_gpu_kernels", None)
    if on and saved is not None:
        qm._gpu_kernels = lambda raw: None
    try:
        yield
    finally:
        if saved is not None:
            qm._gpu_kernels = saved


def _q(name: str):
    from gguf.constants import GGMLQuantizationType as T

    return T[name]


def eight_b(root: Path) -> None:
    folder = root / "llama-8b"
    folder.mkdir()
    header_only_gguf(folder / "model.gguf", LLAMA_8B)
    s = LLAMA_8B
    (folder / "config.json").write_text(json.dumps({
        "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": s.hidden,
        "num_hidden_layers": s.layers, "num_attention_heads": s.heads, "num_key_value_heads": s.kv_heads,
        "intermediate_size": s.ffn, "vocab_size": s.vocab, "max_position_embeddings": s.context,
        "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": False}))
    facts = model_bytes_from_gguf(folder / "model.gguf")
    report(check="8b-plan-12GiB", **plan_layers(facts, CARD_12GB, slots=2).as_dict())
    for label, options in (("auto", {}), ("24-gpu-layers", {"gpu_layers": 24})):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        started = time.perf_counter()
        model = TorchBackend("cuda").load(folder, compile="off", **options)
        loaded_s = time.perf_counter() - started
        held = torch.cuda.memory_allocated() - before
        row = {"check": f"8b-load-{label}", "load_s": round(loaded_s, 1), "gpu_bytes": held,
               "file_bytes": facts.total_bytes, "plan": model.gpu_plan.as_dict() if model.gpu_plan else None,
               "context_length": model.context_length}
        prompt = list(range(100, 116))
        torch.cuda.synchronize()
        started = time.perf_counter()
        model.prefill(prompt, 0)
        torch.cuda.synchronize()
        row["prefill_16_s"] = round(time.perf_counter() - started, 3)
        steps = 3 if label == "auto" else 1
        started = time.perf_counter()
        for i in range(steps):
            model.decode(200 + i, 16 + i)
        torch.cuda.synchronize()
        row["decode_s_per_token"] = round((time.perf_counter() - started) / steps, 3)
        row["peak_gpu_bytes"] = torch.cuda.max_memory_allocated() - before
        report(**row)
        model.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--skip-8b", action="store_true")
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    report(check="device", device=torch.cuda.get_device_name() if device == "cuda" else "cpu",
           torch=torch.__version__)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for part in (lambda: parity(root / "tiny", device),
                     lambda: None if device != "cuda" or args.skip_8b else eight_b(root)):
            try:
                part()
            except Exception as exc:  # the next check still runs; the failure is reported
                report(check="error", error=f"{type(exc).__name__}: {exc}")
    if args.out is not None:
        args.out.write_text(json.dumps(RESULTS, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
