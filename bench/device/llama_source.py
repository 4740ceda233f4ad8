"""llama.cpp's source trimmed to what its CUDA measuring tools need, for the GPU machine.

    .venv/bin/python bench/device/llama_source.py .llama/llama.cpp

copies, from the llama.cpp that llama-cpp-python's sdist vendors (bench/llama_cpp.py fetches
and unpacks it; a pinned version), the build files, the library, ggml's core with its CPU and
CUDA backends, common/ and the two tools llama-bench and llama-batched-bench: ~18 MB instead
of 176 (no models, docs, tests or other backends), small enough to travel with a `device`
run (bench/device/build_llama_cpp.sh builds it there). The tools' and vendor CMake lists are
rewritten to add only what is kept.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import llama_cpp  # bench/llama_cpp.py

KEEP = ["CMakeLists.txt", "LICENSE", "cmake", "common", "include", "src", "vendor", "tools/llama-bench",
        "tools/batched-bench", "ggml/CMakeLists.txt", "ggml/cmake", "ggml/include", "ggml/src/ggml-cpu",
        "ggml/src/ggml-cuda"]
DROP = ["vendor/miniaudio"]  # only the multimodal tools use it
TOOLS_CMAKE = """# Trimmed for Wren's GPU benchmark (bench/device/llama_source.py): the two measuring tools.
find_package(Threads REQUIRED)
llama_add_compile_flags()
add_subdirectory(batched-bench)
add_subdirectory(llama-bench)
"""


def trim(source: Path, dest: Path) -> Path:
    if dest.exists():
        shutil.rmtree(dest)
    for rel in KEEP:
        src = source / rel
        if src.is_dir():
            shutil.copytree(src, dest / rel)
        else:
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    for path in (source / "ggml" / "src").iterdir():  # ggml's own files, not the other backends
        if path.is_file():
            shutil.copy2(path, dest / "ggml" / "src" / path.name)
    for rel in DROP:
        shutil.rmtree(dest / rel, ignore_errors=True)
    (dest / "tools" / "CMakeLists.txt").write_text(TOOLS_CMAKE)
    vendor = dest / "vendor" / "CMakeLists.txt"
    vendor.write_text("".join(line for line in vendor.read_text().splitlines(keepends=True)
                              if "miniaudio" not in line))
    return dest


def main() -> None:
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    source = llama_cpp._source_dir(llama_cpp.tools_dir())
    dest = trim(source, Path(sys.argv[1]))
    size = sum(p.stat().st_size for p in dest.rglob("*") if p.is_file())
    print(f"{dest}: {size / 2**20:.1f} MiB from {source}")


if __name__ == "__main__":
    main()
