"""The AVX-VNNI table (csrc/qdot_avxvnni.cpp): the AVX-512 VNNI table's source, compiled for
CPUs that have the VEX-encoded vpdpbusd without AVX-512 (Intel's client chips since Alder
Lake, Zen 5).

Its results are the avx512-vnni table's: one source (qdot_x86.inc), the same intrinsic
semantics, and every kernel test runs each table this CPU has (the `isa` fixture lists
"avx-vnni"). Where this CPU lacks AVX-VNNI (Zen 4 has only the EVEX form; QEMU's TCG and
Intel's SDE cannot run it here either), what can still be checked is what would make it
fault on such a chip: any EVEX-encoded (AVX-512) instruction in its machine code, or a
vpdpbusd that is not the VEX form.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from wren.engine.inference.quant import kernels

pytestmark = pytest.mark.skipif(not kernels.available(), reason=f"kernels not built: {kernels.NOTICE}")


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    line = next((ln for ln in text.splitlines() if ln.startswith("flags")), "")
    return set(line.partition(":")[2].split())


def _table_code(namespace: str) -> dict[str, list[str]]:
    """Disassembly of every function in `namespace` of the built kernels: {name: lines}."""
    objdump = shutil.which("objdump")
    if objdump is None:
        pytest.skip("objdump is not installed")
    so = kernels._C.__file__  # type: ignore[union-attr]
    out = subprocess.run([objdump, "-d", "-C", "-w", so], capture_output=True, text=True, check=True).stdout
    functions: dict[str, list[str]] = {}
    current = None
    for line in out.splitlines():
        head = re.match(r"^[0-9a-f]+ <(.*)>:$", line)
        if head:
            current = head.group(1) if f"wren::{namespace}::" in head.group(1) else None
            if current:
                functions[current] = []
        elif current and re.match(r"^\s+[0-9a-f]+:\t", line):
            functions[current].append(line)
    return functions


def test_the_avx_vnni_table_has_no_avx512_instruction():
    functions = _table_code("avxvnni")
    if not functions:
        pytest.skip("the kernels were built without the AVX-VNNI table (not x86-64, or an old compiler)")
    dots = 0
    for name, lines in functions.items():
        for line in lines:
            raw = line.split("\t")[1].split()
            assert raw[0] != "62", f"EVEX-encoded instruction in {name}: {line}"  # 0x62: EVEX in 64-bit mode
            assert "zmm" not in line and "%k" not in line, f"AVX-512 register in {name}: {line}"
            if "vpdpbusd" in line:
                assert "{vex}" in line, line
                dots += 1
    assert dots > 50  # the integer dots are really there, in their VEX form


def test_the_avx512_vnni_table_is_the_same_source_in_evex():
    """The control for the check above: the avx512-vnni table's vpdpbusd is EVEX-encoded, so
    the check would see an AVX-512 instruction had the AVX-VNNI table one."""
    functions = _table_code("avx512vnni")
    if not functions:
        pytest.skip("the kernels were built without the AVX-512 VNNI table")
    dots = [line for lines in functions.values() for line in lines if "vpdpbusd" in line]
    assert dots and all(line.split("\t")[1].split()[0] == "62" for line in dots)
    # The same source: the same kernel templates in both tables. Which instances the compiler
    # keeps out of line differs between the two (an avx512-vnni q6_k_x8_n<8> of its own, inlined
    # in avx-vnni), so the templates are compared, not their instances.
    # Only the AVX-512 table reads two interleaved groups a pass (16 rows in 512-bit registers).
    evex = {_template(n.replace("avx512vnni", "avxvnni")) for n in functions}
    only_512 = {f"wren::avxvnni::{k}" for k in ("group2_q4_k_x8", "group2_q6_k_x8", "q4_k_x16_sb", "q6_k_x16_sb",
                                                 "q4_k_x16_scales")}
    assert {"wren::avxvnni::group2_q4_k_x8", "wren::avxvnni::group2_q6_k_x8"} <= evex
    vex = {_template(n) for n in _table_code("avxvnni")}
    assert vex and vex == evex - only_512, (sorted(vex - evex), sorted(evex - vex))


def _template(name: str) -> str:
    """'void wren::avxvnni::q6_k_x8_n<8>(unsigned char const*, ...) [clone .isra.0]' ->
    'wren::avxvnni::q6_k_x8_n': the kernel without its template arguments, types and clones."""
    return re.sub(r"<.*", "", name.split("(")[0]).split()[-1]


def test_the_avx_vnni_table_is_chosen_only_where_the_cpu_has_it():
    chosen = kernels.use_isa("avx-vnni")
    try:
        if "avx_vnni" in _cpu_flags():
            assert chosen == "avx-vnni"
        else:  # the best table below it
            assert chosen == ("avx2" if "avx2" in _cpu_flags() else "scalar")
    finally:
        kernels.use_isa("")
    assert kernels.isa() != "avx-vnni" or "avx_vnni" in _cpu_flags()
