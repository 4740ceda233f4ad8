"""Speed of Wren's GGUF block kernels (torch.ops.wren.qlinear); prints JSON.

For each type: decode GEMV (one row of x) as GB/s of weight bytes read and ms per call, on a
2048x2048 and an 8192x2048 weight (rows x cols: Llama 3.2 1B's attention and FFN shapes), and
the prompt path as GFLOP/s at n=512 and n=4096 rows of x; --exact adds qlinear_exact's GEMV
(float activations). Baselines at the same shapes:
float32 F.linear, and torch's int4 kernel `_weight_int4pack_mm_for_cpu` on bf16 activations
(what Wren used before). GEMV weights rotate over copies adding up to --cold-mb (default 256
MB, far past the L3 cache) so the figures are DRAM streaming, as decoding a whole model is;
gemv_hot is one thread on a weight that stays in L2 (the kernel's compute rate); types the
kernels repack at load (Q4_0, Q4_1, Q4_K) are also timed in that layout (`*_repacked`);
`read_sum` (a read-only pass over 512 MB in the extension) gives the machine's streaming-read
bandwidth to compare with. Runs on --threads torch threads (default 2). Times are the
fastest of repeated runs.

    .venv/bin/python bench/qmatmul.py [--types Q4_0,Q8_0] [--threads 2] [--quick] [--exact] [--isa avx2]
    .venv/bin/python bench/qmatmul.py --crossover   # GEMV vs tiled-GEMM time for n = 1..32
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from wren.engine.inference.quant import kernels

TYPES = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "F16", "BF16", "F32"]
SCALE_FIELDS = {"Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q8_0": [0], "Q2_K": [80, 82],
                "Q3_K": [108], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208]}
SHAPES = [(2048, 2048), (8192, 2048)]


def random_raw(name: str, rows: int, cols: int, rng: np.random.Generator) -> torch.Tensor:
    qtype = GGMLQuantizationType[name]
    block, size = GGML_QUANT_SIZES[qtype]
    if name in ("F32", "F16", "BF16"):
        w = torch.randn(rows, cols) * 0.02
        dtype = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}[name]
        return w.to(dtype).view(torch.uint8).reshape(rows, -1).contiguous()
    raw = rng.integers(0, 256, (rows, cols // block, size), dtype=np.uint8)
    for off in SCALE_FIELDS[name]:
        raw[:, :, off:off + 2] = rng.uniform(-1e-2, 1e-2, raw.shape[:2]).astype(np.float16).view(np.uint8).reshape(
            *raw.shape[:2], 2)
    return torch.from_numpy(raw.reshape(rows, -1))


def timeit(fn, *, min_time: float = 0.3, min_runs: int = 3) -> float:
    """Seconds per call: the fastest of the runs (on a shared machine the others measure
    the neighbours)."""
    fn()
    times = []
    start = time.perf_counter()
    while len(times) < min_runs or time.perf_counter() - start < min_time:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(min(times))


def copies_for(nbytes: int, cold_mb: int) -> int:
    return max(1, min(64, -(-cold_mb * 2**20 // nbytes)))


def gemv(name: str, rows: int, cols: int, cold_mb: int, rng, exact: bool = False, repacked: bool = False) -> dict:
    qtype = int(GGMLQuantizationType[name])
    first = random_raw(name, rows, cols, rng)
    if repacked:  # the kernels' interleaved layout, as QuantLinear holds the weight (csrc/repack.cpp)
        first, qtype = kernels.interleaved(first, qtype, cols)
    raws = [first] + [first.clone() for _ in range(copies_for(first.numel(), cold_mb) - 1)]
    x = torch.randn(1, cols)
    state = {"i": 0}
    fn = kernels.qlinear_exact if exact else kernels.qlinear

    def call():
        state["i"] = (state["i"] + 1) % len(raws)
        fn(x, raws[state["i"]], qtype, rows)

    t = timeit(call)
    return {"ms": round(t * 1e3, 4), "GB/s": round(first.numel() / t / 1e9, 2)}


def gemv_hot(name: str, rng, exact: bool = False, repacked: bool = False) -> dict:
    """One thread on a 512x2048 weight that stays in L2: the kernel's compute rate, the
    most it could move per thread were memory faster."""
    qtype = int(GGMLQuantizationType[name])
    raw = random_raw(name, 512, 2048, rng)
    if repacked:
        raw, qtype = kernels.interleaved(raw, qtype, 2048)
    x = torch.randn(1, 2048)
    fn = kernels.qlinear_exact if exact else kernels.qlinear
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        t = timeit(lambda: fn(x, raw, qtype, 512), min_time=0.2, min_runs=50)
    finally:
        torch.set_num_threads(threads)
    block = GGML_QUANT_SIZES[GGMLQuantizationType[name]][0]
    return {"us": round(t * 1e6, 1), "GB/s": round(raw.numel() / t / 1e9, 2),
            "ns/block": round(t * 1e9 / (512 * 2048 // block), 2)}


def prompt(name: str, rows: int, cols: int, n: int, rng) -> float:
    qtype = int(GGMLQuantizationType[name])
    raw = random_raw(name, rows, cols, rng)
    x = torch.randn(n, cols)
    t = timeit(lambda: kernels.qlinear(x, raw, qtype, rows), min_time=0.5, min_runs=2)
    return round(2 * n * rows * cols / t / 1e9, 1)


def baselines(rows: int, cols: int, cold_mb: int, ns: list[int]) -> dict:
    w = torch.randn(rows, cols) * 0.02
    out = {}
    ws = [w] + [w.clone() for _ in range(copies_for(w.numel() * 4, cold_mb) - 1)]
    x1 = torch.randn(1, cols)
    state = {"i": 0}

    def f32_gemv():
        state["i"] = (state["i"] + 1) % len(ws)
        torch.nn.functional.linear(x1, ws[state["i"]])

    t = timeit(f32_gemv)
    out["F32 F.linear"] = {"gemv_ms": round(t * 1e3, 4), "gemv_GB/s": round(w.numel() * 4 / t / 1e9, 2)}
    for n in ns:
        x = torch.randn(n, cols)
        t = timeit(lambda: torch.nn.functional.linear(x, w), min_time=0.5, min_runs=2)
        out["F32 F.linear"][f"prompt_n{n}_GFLOP/s"] = round(2 * n * rows * cols / t / 1e9, 1)
    # torch's int4 kernel: 4-bit weights + bf16 scale/zero per 32 (about Q4_1's bytes)
    q = torch.randint(0, 16, (rows, cols), dtype=torch.int32)
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1)
    sz = (torch.rand(cols // 32, rows, 2) * 0.01).to(torch.bfloat16)
    packs = [(packed, sz)] + [(packed.clone(), sz.clone())
                              for _ in range(copies_for(packed.numel() * packed.element_size(), cold_mb) - 1)]
    xb = torch.randn(1, cols, dtype=torch.bfloat16)
    nbytes = packed.numel() * packed.element_size() + sz.numel() * 2

    def int4_gemv():
        state["i"] = (state["i"] + 1) % len(packs)
        p, s = packs[state["i"]]
        torch.ops.aten._weight_int4pack_mm_for_cpu(xb, p, 32, s)

    t = timeit(int4_gemv)
    out["torch int4pack bf16"] = {"gemv_ms": round(t * 1e3, 4), "gemv_GB/s": round(nbytes / t / 1e9, 2)}
    for n in ns:
        xn = torch.randn(n, cols, dtype=torch.bfloat16)
        t = timeit(lambda: torch.ops.aten._weight_int4pack_mm_for_cpu(xn, packed, 32, sz), min_time=0.5, min_runs=2)
        out["torch int4pack bf16"][f"prompt_n{n}_GFLOP/s"] = round(2 * n * rows * cols / t / 1e9, 1)
    return out


def read_bandwidth() -> float:
    buf = torch.ones(512 * 2**20, dtype=torch.uint8)
    t = timeit(lambda: kernels.read_sum(buf), min_time=0.5)
    return round(buf.numel() / t / 1e9, 2)


def crossover(types: list[str], rng) -> dict:
    """ms per call at n rows of x through each path (the integer GEMV and the tiled GEMM)."""
    rows, cols = 2048, 2048
    before = kernels.max_gemv_rows()
    res = {}
    for name in types:
        qtype = int(GGMLQuantizationType[name])
        raw = random_raw(name, rows, cols, rng)
        res[name] = {}
        for n in (1, 2, 4, 6, 8, 12, 16, 24, 32):
            x = torch.randn(n, cols)
            row = {}
            for path, limit in (("gemv", 10**6), ("gemm", 0)):
                kernels.set_max_gemv_rows(limit)
                row[path] = round(timeit(lambda: kernels.qlinear(x, raw, qtype, rows), min_time=0.2) * 1e3, 3)
            res[name][n] = row
    kernels.set_max_gemv_rows(before)
    return res


def cpu_description() -> dict:
    info = {"machine": platform.machine()}
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        for line in lscpu.splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("Model name", "CPU(s)", "L2 cache", "L3 cache"):
                info[key.strip()] = value.strip()
            if key.strip() == "Flags":
                wanted = ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx_vnni",
                          "amx_int8", "asimddp", "i8mm")
                info["simd flags"] = [f for f in value.split() if f in wanted]
    except (OSError, subprocess.CalledProcessError):
        pass
    return info


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--types", default=",".join(TYPES))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cold-mb", type=int, default=256)
    ap.add_argument("--quick", action="store_true", help="GEMV only, no prompt figures")
    ap.add_argument("--crossover", action="store_true")
    ap.add_argument("--exact", action="store_true", help="also qlinear_exact's GEMV (float activations)")
    ap.add_argument("--isa", default="", help=f"cap the kernels' instruction set ({', '.join(kernels.ISAS)})")
    args = ap.parse_args()
    if not kernels.available():
        sys.exit(kernels.NOTICE)
    torch.set_num_threads(args.threads)
    kernels.use_isa(args.isa)
    rng = np.random.default_rng(0)
    types = [t.strip() for t in args.types.split(",") if t.strip()]
    report = {"cpu": cpu_description(), "threads": args.threads, "isa": kernels.isa(),
              "max_gemv_rows": kernels.max_gemv_rows(), "torch": torch.__version__}
    if args.crossover:
        report["crossover_ms"] = crossover(types, rng)
        print(json.dumps(report, indent=1))
        return
    report["read_sum_GB/s"] = read_bandwidth()
    ns = [] if args.quick else [512, 4096]
    results = {}
    for name in types:
        entry = {}
        for rows, cols in SHAPES:
            entry[f"gemv_{rows}x{cols}"] = gemv(name, rows, cols, args.cold_mb, rng)
        entry["gemv_hot_512x2048_1thread"] = gemv_hot(name, rng)
        probe = random_raw(name, 8, 256, rng)
        if kernels.interleaved(probe, int(GGMLQuantizationType[name]), 256)[1] != int(GGMLQuantizationType[name]):
            # the layout decoding reads (Q4_0, Q4_1, Q4_K are repacked at load unless WREN_REPACK=off)
            for rows, cols in SHAPES:
                entry[f"gemv_{rows}x{cols}_repacked"] = gemv(name, rows, cols, args.cold_mb, rng, repacked=True)
            entry["gemv_hot_512x2048_1thread_repacked"] = gemv_hot(name, rng, repacked=True)
        if args.exact and name not in ("F32", "F16", "BF16"):
            for rows, cols in SHAPES:
                entry[f"gemv_exact_{rows}x{cols}"] = gemv(name, rows, cols, args.cold_mb, rng, exact=True)
            entry["gemv_exact_hot_512x2048_1thread"] = gemv_hot(name, rng, exact=True)
        for n in ns:
            entry[f"prompt_n{n}_2048x2048_GFLOP/s"] = prompt(name, 2048, 2048, n, rng)
        results[name] = entry
        print(f"{name}: {entry}", file=sys.stderr, flush=True)
    report["types"] = results
    report["baselines"] = {f"{rows}x{cols}": baselines(rows, cols, args.cold_mb, ns if (rows, cols) == SHAPES[0] else [])
                           for rows, cols in SHAPES}
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
