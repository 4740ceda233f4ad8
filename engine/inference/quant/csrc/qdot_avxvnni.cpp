// AVX-VNNI (Intel's client chips since Alder Lake, Zen 5): the AVX-512 VNNI table's 256-bit
// kernels with vpdpbusd in its VEX encoding, for CPUs that have it without AVX-512. Nothing
// here may be EVEX-encoded (an AVX-512 instruction faults on those chips): the target names
// no AVX-512 feature, and tests/engine/inference/test_avxvnni.py checks the machine code.
#include "wren_quant.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && \
    (defined(__clang__) ? __clang_major__ >= 12 : __GNUC__ >= 11)
#include <immintrin.h>

#define TGT __attribute__((target("avx2,fma,f16c,avxvnni")))
#define NS avxvnni
#define U8S8_ACC(acc, u, s) _mm256_dpbusd_avx_epi32((acc), (u), (s))
#define WREN_X86_VNNI 1
#include "qdot_x86.inc"

namespace wren {
bool fill_avxvnni(Kernels& k) {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avxvnni") || !__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma"))
        return false;
    avxvnni::fill(k);
    k.isa = "avx-vnni";
    return true;
}
}  // namespace wren
#else
namespace wren {
bool fill_avxvnni(Kernels&) { return false; }
}  // namespace wren
#endif
