"""Builds or finds llama.cpp's measuring tools (llama-bench, llama-quantize) for the benchmarks.

llama.cpp is a measuring stick only, never a dependency of Wren: the tools are built outside
the repository, by default in /work/.tools/llama.cpp (or $WREN_LLAMA_CPP_DIR), from the
llama.cpp sources vendored in llama-cpp-python's sdist on PyPI (a pinned, known version).

    .venv/bin/python bench/llama_cpp.py [--dir DIR] [--jobs 2]

prints the tools' paths as JSON, building them first if they are missing.
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


def tools_dir(directory: str | os.PathLike | None = None) -> Path:
    if directory is not None:
        return Path(directory)
    return Path(os.environ.get("WREN_LLAMA_CPP_DIR") or DEFAULT_DIR)


def find_tools(directory: str | os.PathLike | None = None) -> dict[str, Path] | None:
    """The built tools' paths, or None when any of them is missing."""
    bin_dir = tools_dir(directory) / "build" / "bin"
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


def ensure_tools(directory: str | os.PathLike | None = None, jobs: int = 2) -> dict[str, Path]:
    """{"llama-bench": path, "llama-quantize": path}, building llama.cpp first if they are absent.

    The first build downloads the sdist (~60 MB) and compiles for several minutes.
    """
    found = find_tools(directory)
    if found is not None:
        return found
    if shutil.which("cmake") is None:
        raise RuntimeError("building llama.cpp's tools needs cmake and a C++ compiler")
    root = tools_dir(directory)
    source = _source_dir(root)
    build = root / "build"
    subprocess.run(["cmake", "-S", str(source), "-B", str(build), "-DGGML_NATIVE=ON", "-DLLAMA_CURL=OFF",
                    "-DCMAKE_BUILD_TYPE=Release"], check=True)
    subprocess.run(["cmake", "--build", str(build), "--target", *TOOLS, f"-j{jobs}"], check=True)
    found = find_tools(directory)
    if found is None:
        raise RuntimeError(f"the build finished without {', '.join(TOOLS)} in {build / 'bin'}")
    return found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", help=f"where to build (default $WREN_LLAMA_CPP_DIR or {DEFAULT_DIR})")
    ap.add_argument("--jobs", type=int, default=2, help="parallel compile jobs (default 2)")
    args = ap.parse_args()
    tools = ensure_tools(args.dir, args.jobs)
    print(json.dumps({name: str(path) for name, path in tools.items()}, indent=2))


if __name__ == "__main__":
    main()
