"""The GPU matrix-vector kernels compiled for a GPU without one: per kernel and tile, the
registers ptxas gives it and the instructions of its main loop (from the sm_90 SASS), per
weight a thread handles, with the integer-to-float conversions (a quarter of the float rate
or less) counted as CONVERT_COST instructions. A static measure for choosing what the device
should time (bench/device/kernels_check.py), not a speed: prints JSON.

    python bench/triton_sass.py [--arch 90]

Needs triton with its CUDA backend's tools (ptxas, cuobjdump ship in its wheel)."""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
try:
    from wren.engine.inference.quant import triton_blocks, triton_q8
except ImportError:  # a checkout, not installed: map it as wren.engine
    shim = Path(tempfile.mkdtemp(prefix="wren-shim-")) / "wren"
    shim.mkdir()
    (shim / "engine").symlink_to(Path(__file__).resolve().parents[1] / "engine")
    sys.path.insert(0, str(shim.parent))
    from wren.engine.inference.quant import triton_blocks, triton_q8

TOOLS = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
CONVERT_COST = 4
# arguments Triton sees as multiples of 16 when Wren launches the kernels on real shapes
ALIGNED = {"x", "raw", "y", "bias", "xq", "xd", "K", "row_words", "row_bytes", "x_stride", "y_stride",
           "xq_stride", "xd_stride"}
FLOAT_X = {"x": "*bf16", "raw": "*u8", "y": "*bf16", "bias": "*bf16"}
Q8_X = {"xq": "*i8", "xd": "*fp32", "raw": "*u8", "y": "*bf16", "bias": "*bf16"}
# (name, kernel, pointer types, extra constants, weights a program step takes per row)
KERNELS: list[tuple[str, Any, dict[str, str], dict[str, Any], int]] = [
    ("q4_k float", triton_blocks.matvec_q4k_kernel, FLOAT_X, {"P": 4}, 256),
    ("q4_k words", triton_blocks.matvec_q4k_words_kernel, FLOAT_X, {"P": 4}, 256),
    ("q4_k q8", triton_q8.matvec_q4k_q8_kernel, Q8_X, {"P": 4, "INTERP": False}, 256),
    ("q6_k float", triton_blocks.matvec_q6k_kernel, FLOAT_X, {}, 256),
    ("q6_k q8", triton_q8.matvec_q6k_q8_kernel, Q8_X, {"INTERP": False}, 256),
]
TILES = [(16, 4), (32, 4), (8, 4), (16, 2), (64, 4)]


def _compile(fn, pointers: dict, consts: dict, warps: int, arch: int):
    names = [a for a in fn.arg_names if a not in consts]
    signature = {a: pointers.get(a, "i32") for a in names}
    attrs = {(fn.arg_names.index(a),): [["tt.divisibility", 16]] for a in names if a in ALIGNED}
    return triton.compile(ASTSource(fn=fn, signature=signature, constexprs=consts, attrs=attrs),
                          target=GPUTarget("cuda", arch, 32), options={"num_warps": warps})


def _tool(compiled, *flags: str) -> str:
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "k.cubin")
        Path(path).write_bytes(compiled.asm["cubin"])
        return subprocess.run([str(TOOLS / "cuobjdump"), *flags, path], capture_output=True, text=True,
                              check=True).stdout


def loop_counts(sass: str) -> collections.Counter:
    """Opcodes of the longest backward branch's body: the kernel's main loop over K."""
    lines = [(int(m.group(1), 16), m.group(2).strip())
             for m in (re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);", line) for line in sass.splitlines()) if m]
    loops = []
    for at, ins in lines:
        target = re.search(r"BRA\s.*?0x([0-9a-f]+)", ins)
        if target and int(target.group(1), 16) < at:
            loops.append((int(target.group(1), 16), at))
    if not loops:
        return collections.Counter()
    lo, hi = max(loops, key=lambda span: span[1] - span[0])
    return collections.Counter(re.sub(r"^@!?U?P\w+\s+", "", ins).split()[0].split(".")[0]
                               for at, ins in lines if lo <= at <= hi)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", type=int, default=90, help="the GPU's compute capability as one number (90: H100/H200)")
    args = ap.parse_args()
    if not (TOOLS / "ptxas").exists():
        raise SystemExit(f"triton's CUDA tools are not installed ({TOOLS})")
    out = {"triton": triton.__version__, "arch": f"sm_{args.arch}", "convert_cost": CONVERT_COST, "kernels": []}
    for name, kernel, pointers, extra, step_weights in KERNELS:
        for rows_of_x in (1, 2):
            for bn, warps in TILES:
                consts = {"M": rows_of_x, "MP": 1 << (rows_of_x - 1).bit_length(), "BN": bn, "ATOMIC": False,
                          "HAS_BIAS": False, **extra}
                compiled = _compile(kernel, pointers, consts, warps, args.arch)
                used = dict(re.findall(r"(REG|STACK|LOCAL):(\d+)", _tool(compiled, "--dump-resource-usage")))
                ops = loop_counts(_tool(compiled, "-sass"))
                converts = sum(n for op, n in ops.items() if op.startswith("I2F"))
                weights = bn * step_weights / (warps * 32)  # a thread's share of a step
                out["kernels"].append({
                    "kernel": name, "rows_of_x": rows_of_x, "rows_per_program": bn, "warps": warps,
                    "registers": int(used.get("REG", 0)), "spilled_bytes": int(used.get("STACK", 0)),
                    "loop_instructions": sum(ops.values()), "weights_per_thread_step": weights,
                    "instructions_per_weight": round((sum(ops.values()) + (CONVERT_COST - 1) * converts) / weights, 2),
                    "dp4a": ops.get("IDP", 0), "shuffles": ops.get("SHFL", 0), "conversions": converts})
                print(f"{name} x{rows_of_x} {bn}x{warps}: {out['kernels'][-1]['instructions_per_weight']}",
                      file=sys.stderr, flush=True)
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
