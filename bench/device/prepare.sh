#!/bin/bash
# Here, before a `device` run: what the GPU machine lacks, in git-ignored folders the run
# carries: .whl (wheels for its Python 3.12), .dev (the starter's tokenizer: its files, and
# as a tokenizer-only GGUF for bench/random_gguf.py), .llama (llama.cpp's trimmed source for
# bench/device/build_llama_cpp.sh). Then one of:
#   run(carry=[".whl", ".dev"], timeout_s=590, command="bash bench/device/run.sh 250")
#       bench/gpu.py (bf16 safetensors) and bench/serve.py
#   run(carry=[".whl", ".dev", ".llama"], timeout_s=560, command="bash bench/device/run.sh gguf 400")
#       bench/gpu_gguf.py: GGUF Q4_K_M on CUDA beside transformers and llama.cpp (<= 8 min)
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .git/info
for d in /.whl/ /.dev/ /.llama/; do grep -qx "$d" .git/info/exclude 2>/dev/null || echo "$d" >> .git/info/exclude; done
mkdir -p .whl .dev/starter-tok
PLATFORMS="--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any"
# Wren's imports that the machine's image (torch, transformers, httpx, jinja2, tokenizers...) lacks
.venv/bin/python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    $PLATFORMS -d .whl gguf==0.19.0 peewee==4.5.3 starlette==1.10.0 uvicorn==0.54.0 httptools==0.9.0 \
    python-multipart==0.0.34 platformdirs==4.14.8 sniffio==1.3.1
starter=$(.venv/bin/python -c "from wren.engine.modelhub.registry import ModelRegistry; print(ModelRegistry().ensure_starter().path)")
cp "$starter"/tokenizer.json "$starter"/tokenizer_config.json "$starter"/generation_config.json .dev/starter-tok/
.venv/bin/python -c "
import sys; sys.path.insert(0, 'bench')
import random_gguf
random_gguf.tokenizer_gguf(random_gguf.make_gguf.starter_gguf(), '.dev/tokenizer.gguf')"
[ -f .llama/llama.cpp/CMakeLists.txt ] || .venv/bin/python bench/device/llama_source.py .llama/llama.cpp
du -sh .whl .dev .llama
