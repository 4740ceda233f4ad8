#!/bin/bash
# One device call for the GPU path (issue 33), ~8 minutes: bench/device/kernels_check.py (the
# Triton GGUF kernels: exactness on the GPU, decode vs the bandwidth bound), then
# bench/gpu_gguf.py (--budget-s $1, default 220) while llama.cpp's CUDA tools build in the
# background from the start. Here first: bash bench/device/prepare.sh. Then
#   run(carry=[".whl", ".dev", ".llama"], timeout_s=480, command="bash bench/device/run_issue33.sh 220")
cd "$(dirname "$0")/../.."
T0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 3
mkdir -p /tmp/wpkg/wren && for d in engine desktop resources tests bench; do ln -sfn "$PWD/$d" /tmp/wpkg/wren/$d; done
export PYTHONPATH=/tmp/wpkg:/tmp/site PYTHONUNBUFFERED=1 OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nice -n 19 bash bench/device/build_llama_cpp.sh /tmp/llama-build > "$OUT/llama_build.log" 2>&1 &
nvidia-smi -L; nvcc --version | tail -1
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
echo "== kernels_check.py, $(($(date +%s)-T0)) s"
timeout "${KERNELS_S:-170}" python3 bench/device/kernels_check.py --out "$OUT/kernels.json" > /dev/null 2> "$OUT/kernels.err"
echo "rc $?"; tail -4 "$OUT/kernels.err" | cut -c1-400
python3 -c "import wren.engine.api, wren.engine.inference.backends.torch" || exit 4
export LD_LIBRARY_PATH=/tmp/llama-build/bin:/tmp/pip-cublas/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
echo "== gpu_gguf.py, $(($(date +%s)-T0)) s"
timeout $(( ${1:-220} + 40 )) python3 bench/gpu_gguf.py --budget-s "${1:-220}" --out "$OUT/gguf.json" \
    --tokenizer-from .dev/tokenizer.gguf --llama-bench /tmp/llama-build/bin \
    --llama-build-log "$OUT/llama_build.log" > /dev/null 2> "$OUT/gguf.err"
echo "rc $?"; grep SUMMARY "$OUT/gguf.err" | cut -c1-300
tail -3 "$OUT/llama_build.log"
echo "== end, $(($(date +%s)-T0)) s"
