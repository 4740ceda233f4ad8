#!/bin/bash
# On the GPU machine: llama.cpp's CUDA measuring tools (llama-bench, llama-batched-bench) for
# arch 90 (H100/H200) only, from the trimmed source bench/device/prepare.sh leaves in
# .llama/llama.cpp. $1: the build folder (default /tmp/llama-build); the tools land in $1/bin.
# The log's last line is "BUILD EXIT <status>" (bench/gpu_others.py waits for it).
# Where the CUDA toolkit has no cuBLAS (its headers and libraries can come from pip's
# nvidia-cublas wheel instead, as torch's do), the configure step is retried pointing there.
cd "$(dirname "$0")/../.."
SRC=.llama/llama.cpp
B=${1:-/tmp/llama-build}
OPTS=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=OFF
      -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF
      -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF)

pip_cublas() {  # a folder with include/ and lib/ (unversioned .so names) from pip's nvidia-cublas
    local site header lib d=/tmp/pip-cublas
    site=$(python3 -c "import nvidia, os; print(os.path.dirname(list(nvidia.__path__)[0]))" 2>/dev/null) || return 1
    header=$(find "$site/nvidia" -name cublas_v2.h 2>/dev/null | head -1)
    lib=$(find "$site/nvidia" -name 'libcublas.so.*' 2>/dev/null | head -1)
    [ -n "$header" ] && [ -n "$lib" ] || return 1
    mkdir -p $d/lib $d/include  # cuBLAS's headers alone: the folder also holds other wheels' CUDA headers
    for f in "$(dirname "$header")"/cublas*.h; do ln -sfn "$f" $d/include/; done
    for f in "$(dirname "$lib")"/libcublas*.so.*; do
        base=$(basename "$f"); ln -sfn "$f" "$d/lib/${base%%.so.*}.so"; ln -sfn "$f" "$d/lib/$base"
    done
    echo $d
}

{
    set -x
    date
    if ! cmake -S $SRC -B "$B" "${OPTS[@]}"; then
        d=$(pip_cublas) || { echo "no cuBLAS in the CUDA toolkit nor in pip's nvidia-cublas"; echo "BUILD EXIT 2"; exit 2; }
        rm -rf "$B"
        # without an unversioned libcuda.so to link, llama.cpp's VMM memory pool is left out
        ldconfig -p | grep -q 'libcuda\.so ' || ls /usr/local/cuda*/lib64/stubs/libcuda.so >/dev/null 2>&1 \
            || OPTS+=(-DGGML_CUDA_NO_VMM=ON)
        cmake -S $SRC -B "$B" "${OPTS[@]}" -DCUDA_cublas_LIBRARY=$d/lib/libcublas.so \
            -DCUDA_cublasLt_LIBRARY=$d/lib/libcublasLt.so -DCMAKE_CUDA_FLAGS="-I$d/include" \
            -DCMAKE_CXX_FLAGS="-I$d/include" || { echo "BUILD EXIT 3"; exit 3; }
    fi
    cmake --build "$B" --target llama-bench llama-batched-bench -j16
    status=$?
    date
    echo "BUILD EXIT $status"
} 2>&1
