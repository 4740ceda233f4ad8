"""Wren's NEON kernel tables give the scalar table's bits (harness.cpp, no torch).

On x86 the harness is cross-compiled for aarch64 (g++-aarch64-linux-gnu) and run under
qemu-user: on qemu's `max` CPU, which has the dot-product extension and the int8 matrix
multiply, "neon", "neon-dotprod" and "neon-i8mm" are compared with "scalar"; on a Cortex-A76
(dotprod, no i8mm) the dispatch must pick "neon-dotprod"; on a Cortex-A53 (Armv8.0) it must
pick "neon" and the baseline table alone is compared. On an arm64 machine the harness is built
with the native g++ and run directly. Emulated timings mean nothing: this is about bits.
The harness is also built natively on x86, where it checks the scalar table against a
double-precision product (the NEON files compile to stubs there).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[4]
CSRC = ROOT / "engine" / "inference" / "quant" / "csrc"
HARNESS = Path(__file__).resolve().parent / "harness.cpp"
SOURCES = [HARNESS] + [
    CSRC / f
    for f in ("qdot_scalar.cpp", "qdot_neon.cpp", "qdot_avx2.cpp", "qdot_avx512vnni.cpp", "qdot_avxvnni.cpp", "mxfp4.cpp", "dequant.cpp",
              "repack.cpp")
]
# setup.py's numerics flags (no fused multiply-adds the source does not write, no errno)
FLAGS = ["-O2", "-std=c++17", "-ffp-contract=off", "-fno-math-errno", f"-I{CSRC}"]
NATIVE_ARM = platform.machine().lower() in {"aarch64", "arm64"}
CROSS = "aarch64-linux-gnu-g++"
QEMU = shutil.which("qemu-aarch64") or shutil.which("qemu-aarch64-static")
SYSROOT = "/usr/aarch64-linux-gnu"
PACKAGES = "g++-aarch64-linux-gnu and qemu-user (tests/system/packages.txt)"

# What each NEON table must have compared: the entries qdot_neon.inc fills.
DOT_TYPES = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"]
EXPECTED = (
    {(e, t) for e in ("qdot", "qdot_rows", "qdot_wrows") for t in DOT_TYPES}
    | {("quant", t) for t in DOT_TYPES}
    | {("quant_wide", t) for t in ("Q8_0", "Q6_K")}
    | {("qdot_group", t) for t in ("Q4_0x8", "Q4_1x8", "Q4_Kx8")}
    | {("x16dot_rows", t) for t in ("Q8_0", "Q6_K")}
)
TABLES = ["neon", "neon-dotprod", "neon-i8mm"]
# The i8mm table's own entry: two weight rows a pass (qdot_pair), for every type above.
PAIRS = {("qdot_pair", t) for t in DOT_TYPES}


def _build(compiler: list[str], out: Path) -> Path:
    """Compiles the sources in parallel (the CI machine has two cores) and links them."""

    def compile_one(src: Path) -> Path:
        obj = out / (src.stem + ".o")
        subprocess.run([*compiler, *FLAGS, "-c", str(src), "-o", str(obj)], check=True, capture_output=True, text=True)
        return obj

    with ThreadPoolExecutor(max_workers=2) as pool:
        objects = list(pool.map(compile_one, SOURCES))
    exe = out / "harness"
    subprocess.run([*compiler, *map(str, objects), "-o", str(exe)], check=True, capture_output=True, text=True)
    return exe


def _run(cmd: list[str]) -> tuple[list[dict], str]:
    env = {k: v for k, v in os.environ.items() if k != "WREN_ISA"}  # the CPU's own best table
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    mismatches = [line for line in lines if line.get("mismatch")]
    assert proc.returncode == 0, f"{' '.join(cmd)} exited {proc.returncode}: {mismatches[:5] or proc.stdout[-2000:]}"
    return lines, proc.stdout


def _check(lines: list[dict], tables: list[str], best: str) -> None:
    summary = lines[-1]
    assert summary.get("summary") and summary["mismatches"] == 0
    assert summary["tables"] == tables and summary["best"] == best
    assert summary["checks"] > 1000
    for table in tables:
        done = {
            (line["entry"], line["type"])
            for line in lines
            if line.get("table") == table and line.get("cases", 0) > 0 and line["mismatches"] == 0
        }
        missing = (EXPECTED | (PAIRS if table == "neon-i8mm" else set())) - done
        assert not missing, f"{table}: no checks ran for {sorted(missing)}"
    assert sum(line.get("cases", 0) for line in lines[:-1]) == summary["checks"]


@pytest.fixture(scope="module")
def arm_harness(tmp_path_factory) -> Path:
    if NATIVE_ARM:
        if shutil.which("g++") is None:
            pytest.skip("no g++ on this arm64 machine")
        return _build(["g++"], tmp_path_factory.mktemp("neon"))
    if shutil.which(CROSS) is None or QEMU is None or not Path(SYSROOT).is_dir():
        pytest.skip(f"no aarch64 cross compiler or qemu-aarch64: install {PACKAGES}")
    return _build([CROSS], tmp_path_factory.mktemp("neon"))


def test_setup_py_still_builds_with_the_harness_flags():
    """The harness compiles with the numerics flags of the real build; if setup.py drops
    them, the comparison here no longer stands for the extension."""
    text = (ROOT / "setup.py").read_text()
    for flag in ("-ffp-contract=off", "-fno-math-errno"):
        assert flag in text


@pytest.mark.skipif(NATIVE_ARM, reason="the emulated CPUs are for cross-compiled runs")
def test_neon_tables_equal_scalar_on_an_emulated_cpu_with_dotprod_and_i8mm(arm_harness):
    lines, _ = _run([QEMU, "-L", SYSROOT, "-cpu", "max", str(arm_harness)])
    _check(lines, TABLES, "neon-i8mm")
    # the i8mm groups and pairs met 1..7 tokens in turn: SMMLA's tiles of four and two tokens
    # and the odd one left
    mm = [line for line in lines if line.get("table") == "neon-i8mm" and line.get("entry") in {"qdot_group", "qdot_pair"}]
    assert len(mm) == 3 + len(DOT_TYPES) and all(line["cases"] >= 7 * 8 for line in mm)


@pytest.mark.skipif(NATIVE_ARM, reason="the emulated CPUs are for cross-compiled runs")
def test_dotprod_equals_scalar_on_an_emulated_cpu_without_i8mm(arm_harness):
    """A Cortex-A76 has the dot-product instructions but not the int8 matrix multiply: the
    dispatch stops at "neon-dotprod", and running it proves that table uses no SMMLA."""
    lines, _ = _run([QEMU, "-L", SYSROOT, "-cpu", "cortex-a76", str(arm_harness)])
    _check(lines, ["neon", "neon-dotprod"], "neon-dotprod")


@pytest.mark.skipif(NATIVE_ARM, reason="the emulated CPUs are for cross-compiled runs")
def test_baseline_neon_equals_scalar_on_an_armv8_0_cpu(arm_harness):
    """A Cortex-A53 has no dot-product instructions: the dispatch picks "neon", and running
    it proves the baseline table uses none."""
    lines, _ = _run([QEMU, "-L", SYSROOT, "-cpu", "cortex-a53", str(arm_harness)])
    _check(lines, ["neon"], "neon")


@pytest.mark.skipif(NATIVE_ARM, reason="the emulated CPUs are for cross-compiled runs")
@pytest.mark.parametrize(
    ("cpu", "cap", "loaded", "mm"),
    [
        ("max", "", "neon-i8mm", "neon-i8mm"),
        ("max", "neon-dotprod", "neon-dotprod", "neon-i8mm"),
        ("max", "neon", "neon", "neon-i8mm"),
        ("max", "scalar", "scalar", "neon-i8mm"),
        ("cortex-a76", "", "neon-dotprod", "neon-dotprod"),
        ("cortex-a76", "neon-i8mm", "neon-dotprod", "neon-dotprod"),
        ("cortex-a53", "", "neon", "neon"),
        ("cortex-a53", "neon-i8mm", "neon", "neon"),
    ],
)
def test_dispatch_follows_the_cpu_and_wren_isa(arm_harness, cpu, cap, loaded, mm):
    """The table in use at load is the CPU's best not above WREN_ISA; a cap the CPU cannot run
    gives the best below it."""
    env = {"WREN_ISA": cap} if cap else {}
    proc = subprocess.run(
        [QEMU, "-L", SYSROOT, "-cpu", cpu, str(arm_harness), "--dispatch"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=True,
    )
    got = json.loads(proc.stdout.splitlines()[-1])
    dot = "neon" if cpu == "cortex-a53" else "neon-dotprod"
    assert got == {
        "dispatch": True,
        "loaded": loaded,
        "scalar": "scalar",
        "neon": "neon",
        "neon-dotprod": dot,
        "neon-i8mm": mm,
    }


def test_clang_build_equals_scalar(tmp_path):
    """Clang (macOS, Windows on Arm) reaches the dot-product and matrix-multiply
    instructions another way (see qdot_neon.cpp): its build must give the same bits. Skips without clang++ (not in
    packages.txt: a large package for one check)."""
    if shutil.which("clang++") is None:
        pytest.skip("no clang++")
    if NATIVE_ARM:
        exe = _build(["clang++"], tmp_path)
        lines, _ = _run([str(exe)])
        assert lines[-1]["mismatches"] == 0 and "neon" in lines[-1]["tables"]
        return
    if QEMU is None or not Path(SYSROOT).is_dir():
        pytest.skip(f"no qemu-aarch64 or aarch64 sysroot: install {PACKAGES}")
    exe = _build(["clang++", "--target=aarch64-linux-gnu"], tmp_path)
    lines, _ = _run([QEMU, "-L", SYSROOT, "-cpu", "max", str(exe)])
    _check(lines, TABLES, "neon-i8mm")


@pytest.mark.skipif(not NATIVE_ARM, reason="runs on an arm64 machine")
def test_neon_tables_equal_scalar_natively(arm_harness):
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    dot = " asimddp" in flags or platform.system() == "Darwin"
    mm = dot and (" i8mm" in flags or _sysctl("hw.optional.arm.FEAT_I8MM"))
    tables = TABLES[: 1 + dot + mm]
    lines, _ = _run([str(arm_harness)])
    _check(lines, tables, tables[-1])


def _sysctl(name: str) -> bool:
    """A macOS feature flag (False elsewhere)."""
    if platform.system() != "Darwin":
        return False
    proc = subprocess.run(["sysctl", "-n", name], capture_output=True, text=True)
    return proc.stdout.strip() == "1"


@pytest.mark.skipif(NATIVE_ARM, reason="the x86 build of the harness")
def test_harness_builds_natively_and_the_scalar_table_is_sane(tmp_path):
    """On x86 the NEON files are stubs: the harness still builds, finds no NEON table, and
    the scalar table's dots agree with a double-precision product."""
    if shutil.which("g++") is None:
        pytest.skip("no g++")
    exe = _build(["g++"], tmp_path)
    lines, _ = _run([str(exe), "--sanity"])
    assert lines[-1]["mode"] == "sanity" and lines[-1]["checks"] == 40 and lines[-1]["mismatches"] == 0
    env = {k: v for k, v in os.environ.items() if k != "WREN_ISA"}
    proc = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60, env=env)
    summary = json.loads(proc.stdout.splitlines()[-1])
    assert proc.returncode == 1 and summary["tables"] == [] and summary["checks"] == 0  # zero checks is a failure
