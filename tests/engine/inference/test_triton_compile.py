"""The GPU kernels for GGUF blocks compiled for a real GPU (sm_90, an H100/H200) without one:
Triton's interpreter (test_triton_gguf.py) checks what they compute, not that Triton's compiler
takes them (layouts, register allocation). Here each kernel, at the constants Wren launches it
with, goes through Triton's whole pipeline down to a cubin (ptxas ships in triton's wheel), and
the matrix-vector kernels must not spill registers to local memory.

Skipped where triton or its CUDA backend's tools are not installed."""

from __future__ import annotations

import os
import re
import subprocess
import tempfile

import pytest

triton = pytest.importorskip("triton", reason="triton is not installed (the test extra brings it)")

TOOLS = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
if not os.path.exists(os.path.join(TOOLS, "ptxas")):
    pytest.skip("triton's CUDA backend tools (ptxas) are not installed", allow_module_level=True)

from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from wren.engine.inference.quant import triton_blocks as k  # noqa: E402
from wren.engine.inference.quant import triton_q8 as q8  # noqa: E402

# arguments Triton sees as multiples of 16 when Wren launches the kernels on real shapes
ALIGNED = {"x", "raw", "y", "bias", "out", "xq", "xd", "K", "row_words", "row_bytes", "x_stride", "y_stride",
           "out_stride", "xq_stride", "xd_stride"}
INTS = {"N", "K", "M", "groups", "groups_per_split", "blocks_per_split", "row_words", "row_bytes", "x_stride",
        "y_stride", "out_stride", "xq_stride", "xd_stride"}


def _compile(fn, pointers: dict[str, str], consts: dict, warps: int = 4):
    names = [a for a in fn.arg_names if a not in consts]
    signature = {a: pointers.get(a, "i32") for a in names}
    assert all(a in pointers or a in INTS for a in names), names
    attrs = {(fn.arg_names.index(a),): [["tt.divisibility", 16]] for a in names if a in ALIGNED}
    source = ASTSource(fn=fn, signature=signature, constexprs=consts, attrs=attrs)
    return triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps})


def _cuobjdump(compiled, flag: str) -> str:
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "k.cubin")
        with open(path, "wb") as f:
            f.write(compiled.asm["cubin"])
        return subprocess.run([os.path.join(TOOLS, "cuobjdump"), flag, path],
                              capture_output=True, text=True, check=True).stdout


def _resources(compiled) -> dict[str, int]:
    out = _cuobjdump(compiled, "--dump-resource-usage")
    return {key: int(value) for key, value in re.findall(r"(REG|STACK|LOCAL):(\d+)", out)}


MATVEC = {"x": "*bf16", "raw": "*u8", "y": "*bf16", "bias": "*bf16"}
TYPES = {"Q4_0": 2, "Q4_1": 3, "Q5_0": 6, "Q5_1": 7, "Q8_0": 8, "Q4_K": 12, "Q5_K": 13, "Q6_K": 14}


@pytest.mark.parametrize("m", [1, 8])
@pytest.mark.parametrize("kernel", ["q4k_bytes", "q4k_words", "q6k", "q8_0"])
def test_word_reading_matvec_kernels_compile_without_spills(kernel, m):
    mp = 1 << (m - 1).bit_length()
    common = {"M": m, "MP": mp, "BN": 16, "ATOMIC": True, "HAS_BIAS": True}
    fn, consts = {"q4k_bytes": (k.matvec_q4k_kernel, {**common, "P": 4}),
                  "q4k_words": (k.matvec_q4k_words_kernel, {**common, "P": 4}),
                  "q6k": (k.matvec_q6k_kernel, common),
                  "q8_0": (k.matvec_q8_0_kernel, {**common, "NB": 8})}[kernel]
    used = _resources(_compile(fn, {**MATVEC, "y": "*fp32"}, consts))
    assert used["STACK"] == 0 and used["LOCAL"] == 0, used


@pytest.mark.parametrize("name", ["Q4_0", "Q5_1", "Q5_K"])
def test_generic_kernels_compile(name):
    """The generic matrix-vector kernel, the GEMM and the dequantization, for types of each
    family (32-value blocks with and without offsets, 256-value k-quants)."""
    qtype = TYPES[name]
    gs = 32
    offset = {"Q4_0": 0, "Q5_1": 1, "Q5_K": -1}[name]
    used = _resources(_compile(k.matvec_kernel, MATVEC, {"QTYPE": qtype, "GS": gs, "OFFSET": offset, "M": 1, "MP": 1,
                                                         "BN": 8, "G": 8, "ATOMIC": False, "HAS_BIAS": False}))
    assert used["LOCAL"] == 0, used
    _compile(k.gemm_kernel, MATVEC, {"QTYPE": qtype, "GS": gs, "OFFSET": offset, "BM": 64, "BN": 128, "G": 2, "DOT": 0,
                                     "HAS_BIAS": False, "INTERP": False}, warps=8)
    _compile(k.dequantize_kernel, {"raw": "*u8", "out": "*bf16"},
             {"QTYPE": qtype, "GS": gs, "OFFSET": offset, "BN": 16, "G": 16, "BF16": True})


@pytest.mark.parametrize("m", [1, 8])
@pytest.mark.parametrize("name", ["Q4_K", "Q6_K"])
def test_the_8_bit_kernels_multiply_four_weights_an_instruction(name, m):
    """MATVEC_KERNEL="q8": the inline PTX (dp4a.u32.s32) becomes sm_90's IDP.4A.U8.S8, 8 of them
    a row of x for the 32 weights a step gives a thread, and neither kernel spills or needs over 80
    registers for one row of x at the tile Wren launches (Q4_K 32 rows, Q6_K 16; 4 warps);
    x's 8-bit rounding compiles too."""
    consts = {"M": m, "MP": 1 << (m - 1).bit_length(), "BN": 32 if name == "Q4_K" else 16, "ATOMIC": True,
              "HAS_BIAS": True, "INTERP": False}
    fn = q8.matvec_q4k_q8_kernel if name == "Q4_K" else q8.matvec_q6k_q8_kernel
    compiled = _compile(fn, {"xq": "*i8", "xd": "*fp32", "raw": "*u8", "y": "*fp32", "bias": "*bf16"},
                        {**consts, "P": 4} if name == "Q4_K" else consts)
    used = _resources(compiled)
    assert used["STACK"] == 0 and used["LOCAL"] == 0, used
    if m == 1:
        assert used["REG"] <= 80, used
    sass = _cuobjdump(compiled, "-sass")
    assert len(re.findall(r"IDP\.4A\.U8\.S8", sass)) >= 8 * m
    _compile(q8.quantize_q8_kernel, {"x": "*bf16", "xq": "*i8", "xd": "*fp32"}, {"NB": 32})
