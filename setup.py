"""Builds Wren's C++ kernels for GGUF block weights (engine.inference.quant._C).

Project metadata lives in pyproject.toml; this file only declares the extension. Without
torch or a C++ compiler the pure-Python package still installs and Wren runs the exact,
slower torch path (engine.inference.quant.kernels says so once in the log). No
-march=native: the binary runs on any x86-64 or arm64 CPU, and each kernel file picks its
instruction set with per-function target attributes at run time.
"""

from __future__ import annotations

import os
import sys

from setuptools import find_namespace_packages, setup

CSRC = "engine/inference/quant/csrc"
SOURCES = ["ops.cpp", "dequant.cpp", "repack.cpp", "qdot_scalar.cpp", "qdot_avx2.cpp", "qdot_avx512vnni.cpp", "qdot_neon.cpp", "qgemm.cpp", "mxfp4.cpp",
           "qdot_avxvnni.cpp", "experts.cpp", "attend.cpp"]
NOTICE = ("Wren's quantized kernels were not built ({why}): Wren installs without them and "
          "uses the slower exact torch path.")


def _notice(why: str) -> None:
    print("\n*** " + NOTICE.format(why=why) + "\n", file=sys.stderr)


def _extension():
    if os.environ.get("WREN_BUILD_KERNELS", "1") == "0":
        _notice("WREN_BUILD_KERNELS=0")
        return [], {}
    try:
        from torch.utils.cpp_extension import BuildExtension, CppExtension
    except Exception as exc:  # no torch in the build environment
        _notice(f"torch is not importable at build time: {exc}")
        return [], {}

    class OptionalBuildExtension(BuildExtension):
        """A failed compile leaves the package installable."""

        failed = False

        def build_extension(self, ext):
            try:
                super().build_extension(ext)
            except Exception as exc:
                OptionalBuildExtension.failed = True
                _notice(f"{type(exc).__name__}: {exc}")

        def run(self):
            try:
                super().run()
            except Exception as exc:  # e.g. copying the missing library in place
                if not OptionalBuildExtension.failed:
                    _notice(f"{type(exc).__name__}: {exc}")

    ext = CppExtension(
        "wren.engine.inference.quant._C",
        sources=[f"{CSRC}/{s}" for s in SOURCES],
        include_dirs=[os.path.abspath(CSRC)],
        # the headers and the per-ISA kernel bodies the sources include: a change to one of
        # them rebuilds the module (`setup.py build_ext --inplace` compares times with these)
        depends=sorted(f"{CSRC}/{n}" for n in os.listdir(CSRC) if n.endswith((".h", ".inc"))),
        # -ffp-contract=off: the exact dequantization must not fuse a*b+c into one rounding.
        # -fopenmp: at::parallel_for is an inline `#pragma omp parallel` in torch's headers;
        # without it every kernel runs on one thread. The OpenMP runtime is torch's own
        # (libgomp, already loaded by torch), so no second one is linked in.
        extra_compile_args=["-O3", "-g0", "-ffp-contract=off", "-fno-math-errno", "-fopenmp"],
        py_limited_api=False,
    )
    return [ext], {"build_ext": OptionalBuildExtension.with_options(use_ninja=False)}


ext_modules, cmdclass = _extension()
# Wren's folders install under one namespace, `wren` (wren.engine from engine/, ...): no
# generic top-level names in site-packages. `wren` has no __init__.py of its own (PEP 420).
_TOPS = ("engine", "desktop", "resources")
# namespace discovery, as pyproject's packages.find did: resources' data folders are packages too
PACKAGES = [f"wren.{name}" for name in find_namespace_packages(
    include=[f"{top}{rest}" for top in _TOPS for rest in ("", ".*")], exclude=["*__pycache__*"])]
PACKAGE_DIR = {f"wren.{top}": top for top in _TOPS}
PACKAGE_DATA = {"wren.resources": ["**/*"]}

setup(packages=PACKAGES, package_dir=PACKAGE_DIR, package_data=PACKAGE_DATA, ext_modules=ext_modules, cmdclass=cmdclass)
