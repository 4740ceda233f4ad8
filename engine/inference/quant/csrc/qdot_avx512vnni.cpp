// AVX-512 VNNI (Cascade Lake, Ice Lake, Zen 4 and later): the same 256-bit kernels with
// u8*s8 sums in one vpdpbusd, where 256-bit registers avoid the clock drop of 512-bit ones on
// the older parts; and the prompt path's Q4_K/Q6_K groups two at a time in 512-bit registers
// (qdot_group2), where the fewer instructions a multiply-add outweigh it.
#include "wren_quant.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define TGT __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")))
#define NS avx512vnni
#define U8S8_ACC(acc, u, s) _mm256_dpbusd_epi32((acc), (u), (s))
#define WREN_X86_VNNI 1
#define WREN_X86_REGS32 1  // AVX-512VL: ymm0-31
#include "qdot_x86.inc"

namespace wren {
bool fill_avx512vnni(Kernels& k) {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512vnni") || !__builtin_cpu_supports("avx512vl") ||
        !__builtin_cpu_supports("avx512bw") || !__builtin_cpu_supports("fma")) return false;
    avx512vnni::fill(k);
    k.isa = "avx512-vnni";
    return true;
}
}  // namespace wren
#else
namespace wren {
bool fill_avx512vnni(Kernels&) { return false; }
}  // namespace wren
#endif
