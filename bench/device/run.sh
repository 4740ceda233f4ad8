#!/bin/bash
# On the GPU machine (bench/device/prepare.sh first, here): bench/gpu.py, then bench/serve.py
# on its 16-core CPU and on CUDA with the random-weight starter. $1: gpu.py's --budget-s.
# Each result lands in $OUT; the whole run stays under ~9 minutes.
cd "$(dirname "$0")/../.."
T0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 3
# Wren's folders under the `wren` name, as the editable install maps them (no install there)
mkdir -p /tmp/wpkg/wren && for d in engine desktop resources tests bench; do ln -sfn "$PWD/$d" /tmp/wpkg/wren/$d; done
export PYTHONPATH=/tmp/wpkg:/tmp/site PYTHONUNBUFFERED=1 OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
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
