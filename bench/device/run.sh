#!/bin/bash
# On the GPU machine (bench/device/prepare.sh first, here). Two runs, each under ~8-9 minutes:
#   bash bench/device/run.sh [N]         bench/gpu.py (--budget-s N, default 300), then
#                                        bench/serve.py on the 16-core CPU and on CUDA
#   bash bench/device/run.sh gguf [N]    bench/gpu_gguf.py (--budget-s N, default 400) while
#                                        llama.cpp's CUDA tools build in the background
# Each result lands in $OUT.
cd "$(dirname "$0")/../.."
T0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 3
# Wren's folders under the `wren` name, as the editable install maps them (no install there)
mkdir -p /tmp/wpkg/wren && for d in engine desktop resources tests bench; do ln -sfn "$PWD/$d" /tmp/wpkg/wren/$d; done
export PYTHONPATH=/tmp/wpkg:/tmp/site PYTHONUNBUFFERED=1 OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"

if [ "$1" = "gguf" ]; then
    # nice: the compile keeps off the core that launches the measured kernels
    nice -n 19 bash bench/device/build_llama_cpp.sh /tmp/llama-build > "$OUT/llama_build.log" 2>&1 &
    nvidia-smi -L; nvcc --version | tail -1
    python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
    python3 -c "import wren.engine.api, wren.engine.inference.backends.torch" || exit 4
    export LD_LIBRARY_PATH=/tmp/llama-build/bin:/tmp/pip-cublas/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    echo "== gpu_gguf.py, $(($(date +%s)-T0)) s"
    timeout $(( ${2:-400} + 50 )) python3 bench/gpu_gguf.py --budget-s "${2:-400}" --out "$OUT/gguf.json" \
        --tokenizer-from .dev/tokenizer.gguf --llama-bench /tmp/llama-build/bin \
        --llama-build-log "$OUT/llama_build.log" > /dev/null 2> "$OUT/gguf.err"
    echo "rc $?"; grep SUMMARY "$OUT/gguf.err" | cut -c1-400
    tail -3 "$OUT/llama_build.log"
    echo "== end, $(($(date +%s)-T0)) s"
    exit 0
fi

nvidia-smi -L; lscpu | grep -E 'Model name|^CPU\(s\)|Thread' ; lscpu | grep Flags | grep -o 'avx[^ ]*' | sort -u | tr '\n' ' '; echo
python3 -c "import torch; print('torch', torch.__version__, 'threads', torch.get_num_threads())"
python3 -c "import wren.engine.api, wren.engine.server.app, wren.engine.inference.backends.torch" || exit 4
python3 bench/device/random_starter.py /tmp/starter-rand .dev/starter-tok || exit 5
echo "== serve.py, CPU, $(($(date +%s)-T0)) s"
timeout 170 python3 bench/serve.py --backend torch-cpu --model /tmp/starter-rand --runs 5 --clients 1,4,16 \
    > "$OUT/serve_cpu.json" 2> "$OUT/serve_cpu.err"; echo "rc $?"; tail -3 "$OUT/serve_cpu.err" | cut -c1-400
echo "== gpu.py, $(($(date +%s)-T0)) s"
timeout $(( ${1:-300} + 30 )) python3 bench/gpu.py --budget-s "${1:-300}" --out "$OUT/gpu.json" \
    > "$OUT/gpu.out" 2> "$OUT/gpu.err"; echo "rc $?"; grep SUMMARY "$OUT/gpu.out" "$OUT/gpu.err" | cut -c1-300
echo "== serve.py, CUDA, $(($(date +%s)-T0)) s"
timeout 80 python3 bench/serve.py --backend torch-cuda --model /tmp/starter-rand --runs 3 --clients 1,4,16 \
    > "$OUT/serve_cuda.json" 2> "$OUT/serve_cuda.err"; echo "rc $?"; tail -3 "$OUT/serve_cuda.err" | cut -c1-400
echo "== end, $(($(date +%s)-T0)) s"
