"""Builds or finds llama.cpp's measuring tools (llama-bench, llama-quantize) for the benchmarks.

llama.cpp is a measuring stick only, never a dependency of Wren: the tools are built outside
the repository, by default in /work/.tools/llama.cpp (or $WREN_LLAMA_CPP_DIR), from the
llama.cpp sources vendored in llama-cpp-python's sdist on PyPI (a pinned, known version).

    .venv/bin/python bench/llama_cpp.py [--dir DIR] [--jobs 2] [--isa native|avx2]

prints the tools' paths as JSON, building them first if they are missing. `--isa native`
(the default) builds with GGML_NATIVE into DIR/build: on an AVX-512 machine llama.cpp then
uses AVX-512. `--isa avx2` builds into DIR/build-avx2 with AVX, AVX2, FMA and F16C on and
every AVX-512 flag off, so an AVX-512 machine can measure Wren's AVX2 kernels
(`WREN_ISA=avx2`) against llama.cpp's AVX2 code, as an AVX2-only CPU would run both.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

LLAMA_CPP_PYTHON = "0.3.36"
TOOLS = ("llama-bench", "llama-quantize")
DEFAULT_DIR = Path("/work/.tools/llama.cpp")
# CMake options per instruction-set flavour; each flavour has its own build folder.
FLAVOURS: dict[str, tuple[str, list[str]]] = {
    "native": ("build", ["-DGGML_NATIVE=ON"]),
    "avx2": ("build-avx2", ["-DGGML_NATIVE=OFF", "-DGGML_AVX=ON", "-DGGML_AVX2=ON", "-DGGML_FMA=ON",
                            "-DGGML_F16C=ON", "-DGGML_BMI2=ON", "-DGGML_AVX_VNNI=OFF", "-DGGML_AVX512=OFF",
                            "-DGGML_AVX512_VBMI=OFF", "-DGGML_AVX512_VNNI=OFF", "-DGGML_AVX512_BF16=OFF",
                            "-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF", "-DGGML_AMX_BF16=OFF"]),
}


def _flavour(isa: str) -> tuple[str, list[str]]:
    if isa not in FLAVOURS:
        raise ValueError(f"unknown llama.cpp ISA flavour {isa!r}; expected one of {', '.join(FLAVOURS)}")
    return FLAVOURS[isa]


def tools_dir(directory: str | os.PathLike | None = None) -> Path:
    if directory is not None:
        return Path(directory)
    return Path(os.environ.get("WREN_LLAMA_CPP_DIR") or DEFAULT_DIR)


def find_tools(directory: str | os.PathLike | None = None, isa: str = "native") -> dict[str, Path] | None:
    """The built tools' paths, or None when any of them is missing."""
    bin_dir = tools_dir(directory) / _flavour(isa)[0] / "bin"
    found = {name: bin_dir / name for name in TOOLS}
    if all(path.is_file() and os.access(path, os.X_OK) for path in found.values()):
        return found
    return None


def _source_dir(root: Path) -> Path:
    """The vendored llama.cpp of the unpacked sdist, downloading and unpacking it if needed."""
    unpacked = root / f"llama_cpp_python-{LLAMA_CPP_PYTHON}"
    source = unpacked / "vendor" / "llama.cpp"
    if (source / "CMakeLists.txt").is_file():
        return source
    root.mkdir(parents=True, exist_ok=True)
    archives = sorted(root.glob(f"llama_cpp_python-{LLAMA_CPP_PYTHON}.tar.gz"))
    if not archives:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                        f"llama-cpp-python=={LLAMA_CPP_PYTHON}", "-d", str(root)], check=True)
        archives = sorted(root.glob("llama_cpp_python-*.tar.gz"))
    if not archives:
        raise RuntimeError(f"pip download left no llama_cpp_python-{LLAMA_CPP_PYTHON}.tar.gz in {root}")
    with tarfile.open(archives[0]) as tar:
        tar.extractall(root, filter="data")
    if not (source / "CMakeLists.txt").is_file():
        raise RuntimeError(f"the sdist has no vendored llama.cpp at {source}")
    return source


def ensure_tools(directory: str | os.PathLike | None = None, jobs: int = 2,
                 isa: str = "native") -> dict[str, Path]:
    """{"llama-bench": path, "llama-quantize": path}, building llama.cpp first if they are absent.

    The first build downloads the sdist (~60 MB) and compiles for several minutes.
    """
    build_name, options = _flavour(isa)
    found = find_tools(directory, isa)
    if found is not None:
        return found
    if shutil.which("cmake") is None:
        raise RuntimeError("building llama.cpp's tools needs cmake and a C++ compiler")
    root = tools_dir(directory)
    source = _source_dir(root)
    build = root / build_name
    subprocess.run(["cmake", "-S", str(source), "-B", str(build), *options, "-DLLAMA_CURL=OFF",
                    "-DCMAKE_BUILD_TYPE=Release"], check=True)
    subprocess.run(["cmake", "--build", str(build), "--target", *TOOLS, f"-j{jobs}"], check=True)
    found = find_tools(directory, isa)
    if found is None:
        raise RuntimeError(f"the build finished without {', '.join(TOOLS)} in {build / 'bin'}")
    return found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", help=f"where to build (default $WREN_LLAMA_CPP_DIR or {DEFAULT_DIR})")
    ap.add_argument("--jobs", type=int, default=2, help="parallel compile jobs (default 2)")
    ap.add_argument("--isa", choices=sorted(FLAVOURS), default="native",
                    help="native: GGML_NATIVE (default); avx2: AVX2/FMA/F16C only, no AVX-512")
    args = ap.parse_args()
    tools = ensure_tools(args.dir, args.jobs, args.isa)
    print(json.dumps({name: str(path) for name, path in tools.items()}, indent=2))


if __name__ == "__main__":
    main()
