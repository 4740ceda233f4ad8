#!/bin/bash
# Here, before a `device` run: what the GPU machine lacks, in the git-ignored folders that
# the run carries (.whl: wheels for its Python 3.12; .dev/starter-tok: the starter's tokenizer).
# Then: run(carry=[".whl", ".dev"], timeout_s=590, command="bash bench/device/run.sh 250")
set -euo pipefail
cd "$(dirname "$0")/../.."
for d in /.whl/ /.dev/; do grep -qx "$d" .git/info/exclude 2>/dev/null || echo "$d" >> .git/info/exclude; done
mkdir -p .whl .dev/starter-tok
PLATFORMS="--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any"
# Wren's imports that the machine's image (torch, transformers, httpx, jinja2, tokenizers...) lacks
.venv/bin/python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    $PLATFORMS -d .whl gguf==0.19.0 peewee==4.5.3 starlette==1.10.0 uvicorn==0.54.0 httptools==0.9.0 \
    python-multipart==0.0.34 platformdirs==4.14.8 sniffio==1.3.1
starter=$(.venv/bin/python -c "from wren.engine.modelhub.registry import ModelRegistry; print(ModelRegistry().ensure_starter().path)")
cp "$starter"/tokenizer.json "$starter"/tokenizer_config.json "$starter"/generation_config.json .dev/starter-tok/
du -sh .whl .dev
