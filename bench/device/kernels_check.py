"""The GPU check of Wren's Triton kernels for GGUF blocks (engine/inference/quant/triton_gguf.py);
prints JSON. For the GPU machine (about a minute on an H100); `--tiny` runs the same steps on small
shapes on the CPU under TRITON_INTERPRET=1 (tests/engine/inference/test_triton_gguf.py does).

1. exact: for each type, on random blocks, the dequantize kernel equal bit for bit to
   ggml.dequantize of the same bytes on the same device (both float32).
2. products: the matrix-vector kernel (1 and 8 rows of x) and the GEMM (40 rows), bfloat16 and
   float32 x, against x @ W^T in float64; ok when within 1e-5 (float32 x) or 2^-7 (bfloat16)
   of sum |x| |w| per output.
3. matvec: time per product at Llama-3.2-1B's and Llama-3.1-8B's shapes, Q4_K (the output head
   128256x2048 also Q6_K), 1 and 8 rows of bfloat16 x, each as a fraction of the bandwidth bound:
   weight bytes / the measured device-to-device copy rate (bytes read + written per second).
   Weights rotate over copies adding up to >= 256 MB, so they come from memory, not L2, as in
   decoding a whole model; launches are replayed from a CUDA graph, the median of 5 replays.
   `gemm8` times the GEMM kernel at 8 rows, for MATVEC_MAX_ROWS.
4. gemm: 512 rows of bfloat16 x through the GEMM kernel, through the dense path (slices of W
   widened to bfloat16, then torch's matmul: DENSE_MIN_ROWS), and torch's bfloat16 matmul with the
   weight already widened (cuBLAS), at the 8B shapes.
5. matvec_variants: the matrix-vector kernels (MATVEC_KERNEL "float", the default; "words" for
   Q4_K; "q8", x rounded to 8 bits and dp4a, for Q4_K and Q6_K) and tiles (rows per program,
   warps), 1 and 2 rows of x at the 8B shapes: which should be the default. Each is checked
   against its reference as well.

    python3 bench/device/kernels_check.py [--tiny] > kernels.json

Needs torch, triton and gguf; imports Wren from this checkout if it is not installed. On the GPU
machine (bench/device/prepare.sh here first, for gguf's wheel in .whl):
    run(carry=[".whl"], timeout_s=300, command="python3 -m pip install -q --no-index --no-deps
        --target /tmp/site .whl/*.whl && PYTHONPATH=/tmp/site timeout 240 python3
        bench/device/kernels_check.py > $OUT/kernels.json 2> $OUT/kernels.err; echo rc $?; tail -3 $OUT/kernels.err")
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
TYPES = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K"]
SHAPES_1B = [(2048, 2048), (512, 2048), (8192, 2048), (2048, 8192), (128256, 2048)]
SHAPES_8B = [(4096, 4096), (1024, 4096), (14336, 4096), (4096, 14336)]
HEAD = (128256, 2048)


def _wren() -> tuple:
    """(ggml, triton_gguf), from the installed wren or from this checkout (mapped as wren.engine)."""
    try:
        import wren.engine  # noqa: F401
    except ImportError:
        shim = Path(tempfile.mkdtemp(prefix="wren-shim-")) / "wren"
        shim.mkdir()
        (shim / "engine").symlink_to(ROOT / "engine")
        sys.path.insert(0, str(shim.parent))
    from wren.engine.inference.quant import ggml, triton_gguf

    return ggml, triton_gguf


ggml, tg = _wren()
T = ggml.GGMLQuantizationType


def random_blocks(name: str, rows: int, cols: int, device: torch.device, seed: int = 0) -> torch.Tensor:
    """Random bytes with each fp16 scale (and minimum) set to +-[0.001, 0.021)."""
    qtype = int(T[name])
    gen = torch.Generator(device=device).manual_seed(seed)
    raw = torch.randint(0, 256, (rows, ggml.row_bytes(qtype, cols)), generator=gen, dtype=torch.uint8, device=device)
    blocks = raw.view(-1, ggml.type_size(qtype))
    fields = {"Q6_K": [208], "Q4_1": [0, 2], "Q5_1": [0, 2], "Q4_K": [0, 2], "Q5_K": [0, 2]}.get(name, [0])
    for at in fields:
        n = blocks.shape[0]
        sign = torch.randint(0, 2, (n,), generator=gen, device=device) * 2 - 1
        scale = (torch.rand(n, generator=gen, device=device) * 0.02 + 1e-3) * sign
        blocks[:, at:at + 2] = scale.to(torch.float16).view(torch.uint8).view(-1, 2)
    return raw


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def _time_us(fn: Callable[[], object], device: torch.device, reps: int) -> float:
    """Microseconds per call: on CUDA, `reps` calls captured in a CUDA graph, the median of 5
    replays; on the CPU (the interpreter), one call."""
    if device.type != "cuda":  # the interpreter: one call shows the path runs
        t = time.perf_counter()
        fn()
        return (time.perf_counter() - t) * 1e6
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):  # compiles, and warms the allocator outside the capture
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(reps):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000 / reps)
    return statistics.median(times)


def copy_gbps(device: torch.device, tiny: bool) -> float:
    """Device-to-device copy: (bytes read + bytes written) per second, in GB/s."""
    n = (1 << 20) if tiny else (1 << 30)
    src = torch.empty(n, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    us = _time_us(lambda: dst.copy_(src), device, reps=10)
    return 2 * n / (us * 1e-6) / 1e9


def check_exact(device: torch.device, tiny: bool) -> dict[str, bool]:
    rows = 13 if tiny else 1000
    out = {}
    for name in TYPES:
        cols = (512 if tiny else 4096) if ggml.block_size(int(T[name])) == 256 else (96 if tiny else 4096)
        raw = random_blocks(name, rows, cols, device)
        ref = ggml.dequantize(raw, int(T[name]), cols)
        got = tg.dequantize(raw, int(T[name]), cols)
        out[name] = bool(torch.equal(ref.view(torch.int32), got.view(torch.int32)))
    return out


def check_products(device: torch.device, tiny: bool) -> list[dict]:
    rows, results = (13 if tiny else 304), []  # 304: the timed shapes' specialisation (N % 16 == 0), fewer compiles
    for name in (["Q4_K", "Q8_0"] if tiny else TYPES):  # the interpreter is slow; its tests cover every type
        cols = (512 if tiny else 2048) if ggml.block_size(int(T[name])) == 256 else (320 if tiny else 2048)
        raw = random_blocks(name, rows, cols, device, seed=1)
        w = ggml.dequantize(raw, int(T[name]), cols).double()
        cases = [(1, torch.bfloat16), (8, torch.bfloat16), (40, torch.bfloat16)]
        if name in ("Q4_K", "Q6_K", "Q8_0"):  # float32 x on three types: each case is a compile on the GPU
            cases += [(1, torch.float32), (40, torch.float32)]
        for m, dtype in cases[2:4] if tiny else cases:
            x = torch.randn(m, cols, device=device).to(dtype)
            y = tg.linear_parts(x, [raw], [int(T[name])], [rows]).double()
            ref = x.double() @ w.T
            bound = x.double().abs() @ w.abs().T
            tol = 1e-5 if dtype == torch.float32 else 2**-7
            if device.type == "cuda" and dtype == torch.float32 and m > tg.MATVEC_MAX_ROWS:
                tol = 2**-9  # the GEMM's float32 x multiplies as tf32 (10-bit mantissas) on the GPU
            err = ((y - ref).abs() / (bound + ref.abs() + 1e-6)).max().item()
            results.append({"type": name, "m": m, "dtype": str(dtype).removeprefix("torch."),
                            "rel_err": err, "ok": err <= tol})
    return results


def _copies(raw: torch.Tensor, cold_bytes: int) -> list[torch.Tensor]:
    return [raw] + [raw.clone() for _ in range(min(1023, cold_bytes // max(1, raw.numel())))]


def time_matvec(device: torch.device, tiny: bool, gbps: float) -> list[dict]:
    shapes = [("1B", s) for s in SHAPES_1B] + [("8B", s) for s in SHAPES_8B]
    plans = [(model, n, k, "Q4_K") for model, (n, k) in shapes] + [("1B", *HEAD, "Q6_K")]
    if tiny:
        plans = [("tiny", 16, 256, "Q4_K")]
    results = []
    for model, n, k, name in plans:
        qtype = int(T[name])
        copies = _copies(random_blocks(name, n, k, device), 0 if tiny else 256 << 20)
        nbytes = copies[0].numel()
        for m in (1, 8):
            x = torch.randn(m, k, device=device, dtype=torch.bfloat16)
            state = {"i": 0}

            def step() -> torch.Tensor:
                state["i"] = (state["i"] + 1) % len(copies)
                return tg.linear_parts(x, [copies[state["i"]]], [qtype], [n])

            us = _time_us(step, device, reps=max(8, len(copies)) * (1 if n * k > 1 << 24 else 4))
            bound = nbytes / (gbps * 1e9) * 1e6
            row = {"model": model, "shape": [n, k], "type": name, "m": m, "us": us, "weight_bytes": nbytes,
                   "bound_us": bound, "fraction_of_bound": bound / us}
            if m == 8:
                before = tg.MATVEC_MAX_ROWS
                tg.MATVEC_MAX_ROWS = 0  # the same product through the GEMM kernel
                try:
                    row["gemm8_us"] = _time_us(step, device, reps=max(8, len(copies)))
                finally:
                    tg.MATVEC_MAX_ROWS = before
            results.append(row)
    return results


# (type, shapes, [(MATVEC_KERNEL, (rows per program, warps))]): the default first
VARIANTS = [
    ("Q4_K", SHAPES_8B, [("float", (16, 4)), ("q8", (32, 4)), ("words", (16, 4)), ("q8", (16, 4)), ("q8", (64, 4)),
                         ("q8", (32, 2)), ("words", (8, 4)), ("words", (32, 4)), ("float", (8, 4)), ("float", (32, 8))]),
    ("Q6_K", [(4096, 14336), (128256, 4096)], [("float", (16, 4)), ("q8", (16, 4)), ("q8", (32, 4)), ("q8", (8, 4))]),
]


def time_variants(device: torch.device, tiny: bool, gbps: float) -> list[dict]:
    """The matrix-vector kernels (triton_gguf.MATVEC_KERNEL: "float", the default, "words" for
    Q4_K, "q8" for Q4_K and Q6_K) and tiles (rows per program, warps: MATVEC_TILES) at the 8B's
    shapes, 1 and 2 rows of x, weights from memory as in time_matvec: which to make the
    default. Each variant is also checked against the reference: the float kernels against
    x @ W^T, "q8" against x as it rounds it to 8 bits (so its integer sums, dp4a's on a GPU,
    are checked exactly, to bfloat16's rounding)."""
    plans = [(name, [(16, 512)], kernels[:2]) for name, _, kernels in VARIANTS] if tiny else VARIANTS
    results = []
    kernel_before, tiles_before = tg.MATVEC_KERNEL, dict(tg.MATVEC_TILES)
    try:
        for name, shapes, variants in plans:
            qtype = int(T[name])
            for n, k in shapes:
                copies = _copies(random_blocks(name, n, k, device, seed=3), 0 if tiny else 256 << 20)
                w = ggml.dequantize(copies[0], qtype, k).double()
                for m in (1, 2):
                    x = torch.randn(m, k, device=device, dtype=torch.bfloat16)
                    xq, xd = tg.quantize_q8(x)
                    rounded = (xq.double().view(m, -1, 32) * xd[:, 0::2].double()[..., None]).view(m, k)
                    row: dict = {"type": name, "shape": [n, k], "m": m,
                                 "bound_us": copies[0].numel() / (gbps * 1e9) * 1e6}
                    for kernel, tile in variants:
                        tg.MATVEC_KERNEL = kernel
                        tg.MATVEC_TILES[qtype] = tile
                        xr = rounded if kernel == "q8" else x.double()
                        ref, bound = xr @ w.T, xr.abs() @ w.abs().T
                        err = ((tg.linear_parts(x, [copies[0]], [qtype], [n]).double() - ref).abs()
                               / (bound + ref.abs() + 1e-6)).max().item()
                        state = {"i": 0}

                        def step() -> torch.Tensor:
                            state["i"] = (state["i"] + 1) % len(copies)
                            return tg.linear_parts(x, [copies[state["i"]]], [qtype], [n])

                        row[f"{kernel}_{tile[0]}x{tile[1]}"] = {
                            "us": _time_us(step, device, reps=max(8, len(copies))), "ok": err <= 2**-7}
                    results.append(row)
                    tg.MATVEC_TILES.pop(qtype, None)
    finally:
        tg.MATVEC_KERNEL, tg.MATVEC_TILES = kernel_before, tiles_before
    return results


def time_gemm(device: torch.device, tiny: bool) -> list[dict]:
    m = 32 if tiny else 512
    shapes = [(16, 256)] if tiny else SHAPES_8B
    results = []
    for n, k in shapes:
        raw = random_blocks("Q4_K", n, k, device)
        x = torch.randn(m, k, device=device, dtype=torch.bfloat16)
        w = ggml.dequantize(raw, int(T.Q4_K), k).to(torch.bfloat16)
        before = tg.DENSE_MIN_ROWS
        try:
            tg.DENSE_MIN_ROWS = 1 << 30  # the GEMM kernel
            ours = _time_us(lambda: tg.linear_parts(x, [raw], [int(T.Q4_K)], [n]), device, reps=10)
            tg.DENSE_MIN_ROWS = 1  # slices widened to bfloat16, then torch's matmul
            dense = _time_us(lambda: tg.linear_parts(x, [raw], [int(T.Q4_K)], [n]), device, reps=10)
        finally:
            tg.DENSE_MIN_ROWS = before
        torch_us = _time_us(lambda: x @ w.T, device, reps=10)
        flops = 2 * m * n * k
        results.append({"shape": [n, k], "m": m, "type": "Q4_K", "gemm_kernel_us": ours, "dense_path_us": dense,
                        "torch_bf16_us": torch_us, "tflops": flops / (ours * 1e-6) / 1e12,
                        "torch_tflops": flops / (torch_us * 1e-6) / 1e12})
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="small shapes on the CPU (TRITON_INTERPRET=1)")
    parser.add_argument("--out", type=Path, help="also write the report here after every step (a run cut short "
                                                 "by its time limit keeps what it measured)")
    args = parser.parse_args()
    if not tg.available():
        raise SystemExit(tg.NOTICE)
    if args.tiny:
        if not tg.INTERPRET:
            raise SystemExit("--tiny runs on the CPU under Triton's interpreter: set TRITON_INTERPRET=1")
        device = torch.device("cpu")
    elif not torch.cuda.is_available():
        raise SystemExit("no CUDA device: run with --tiny and TRITON_INTERPRET=1 on a CPU")
    else:
        device = torch.device("cuda")
    torch.manual_seed(0)
    t0 = time.perf_counter()
    report: dict = {"device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
                    "torch": torch.__version__, "triton": tg.triton.__version__,
                    "matvec_max_rows": tg.MATVEC_MAX_ROWS}
    steps = {"exact": lambda: check_exact(device, args.tiny), "products": lambda: check_products(device, args.tiny),
             "copy_gbps": lambda: copy_gbps(device, args.tiny),
             "matvec": lambda: time_matvec(device, args.tiny, report["copy_gbps"]),
             "matvec_variants": lambda: time_variants(device, args.tiny, report["copy_gbps"]),
             "gemm": lambda: time_gemm(device, args.tiny)}
    report["step_seconds"] = {}
    for key, step in steps.items():  # each step's seconds include its kernels' compiles
        t = time.perf_counter()
        report[key] = step()
        report["step_seconds"][key] = round(time.perf_counter() - t, 1)
        if args.out is not None:
            args.out.write_text(json.dumps(report, indent=1))
    report["seconds"] = time.perf_counter() - t0
    json.dump(report, sys.stdout, indent=1)
    print()
    print(f"SUMMARY exact={all(report['exact'].values())} products_ok={all(r['ok'] for r in report['products'])} "
          f"seconds={report['seconds']:.0f}", file=sys.stderr)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
