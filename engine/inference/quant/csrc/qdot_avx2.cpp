// AVX2 + FMA + F16C kernels (Haswell and later, Zen): u8*s8 products through maddubs/madd.
#include "wren_quant.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define TGT __attribute__((target("avx2,fma,f16c")))
#define NS avx2
#define U8S8_ACC(acc, u, s) _mm256_add_epi32((acc), _mm256_madd_epi16(_mm256_maddubs_epi16((u), (s)), _mm256_set1_epi16(1)))
#include "qdot_x86.inc"

namespace wren {
bool fill_avx2(Kernels& k) {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return false;
    avx2::fill(k);
    k.isa = "avx2";
    return true;
}
}  // namespace wren
#else
namespace wren {
bool fill_avx2(Kernels&) { return false; }
}  // namespace wren
#endif
