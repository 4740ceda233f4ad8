// MXFP4 (GGML type 39, OCP microscaling): 32 e2m1 values sharing one e8m0 scale byte,
// 17 bytes a block (the scale, then 16 bytes of nibble pairs: value j is the low nibble of
// byte j, value 16 + j the high one). As in gguf, the e2m1 values are doubled to integers
// (-12..12) and the scale halved, 2^(e - 128), so a value is one float32 product.
//
// Exact dequantization (the GEMM path's tiles, qlinear_exact), and the decoding dot against
// 8-bit activations: BlockQ8 rows rounded as every other table rounds them. The x86 kernels
// (mxfp4_x86.inc, once for AVX2 and once for AVX-512 VNNI) look each nibble up in a 16-byte
// table offset to 0..24, so the products are unsigned x signed with the offset taken back
// through the activation block's sum, as Q4_0's zero point is. Scale bytes above 0xFC
// (values past float32, or OCP's NaN) are refused where weights are loaded (ggml.py), so
// these kernels see only finite scales.
#include <cmath>
#include <cstring>

#include "wren_quant.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define WREN_MXFP4_X86 1
#endif

namespace wren {

float g_mxfp4_scale[256];

namespace {
constexpr int kBlockBytes = 17;
constexpr int8_t kValues[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

struct E8m0Init {
    E8m0Init() {
        for (uint32_t e = 0; e < 256; ++e) {
            const uint32_t bits = e < 2 ? 0x00200000u << e : (e - 1) << 23;  // as gguf builds it
            std::memcpy(&g_mxfp4_scale[e], &bits, 4);
        }
    }
} e8m0_init;
}  // namespace

void dequantize_mxfp4_row(const uint8_t* src, float* dst, int64_t cols) {
    for (int64_t b = 0; b < cols / 32; ++b, src += kBlockBytes, dst += 32) {
        const float d = g_mxfp4_scale[src[0]];
        const uint8_t* qs = src + 1;
        for (int j = 0; j < 16; ++j) {
            dst[j] = d * (float)kValues[qs[j] & 0x0f];
            dst[j + 16] = d * (float)kValues[qs[j] >> 4];
        }
    }
}

namespace {

// 8-bit activations for MXFP4, the same values as every table's 32-value rounding:
// d = amax / 127, q = round_even(x * (127 / amax)).
void quant_q8(const float* x, int64_t cols, void* outv) {
    BlockQ8* out = (BlockQ8*)outv;
    for (int64_t b = 0; b < cols / 32; ++b) {
        const float* v = x + 32 * b;
        float amax = 0.f;
        for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(v[j]));
        const float d = amax / 127.f;
        const float id = d != 0.f ? 127.f / amax : 0.f;
        int32_t sum = 0;
        for (int j = 0; j < 32; ++j) {
            const int q = (int)round_even(v[j] * id);
            out[b].qs[j] = (int8_t)q;
            sum += q;
        }
        out[b].d = d;
        out[b].sum = sum;
    }
}

// The reference: per block the exact integer dot, then acc += (d_w * d_x) * dot.
float dot_scalar(const uint8_t* w, int64_t nb, const void* xv) {
    const BlockQ8* x = (const BlockQ8*)xv;
    float acc = 0.f;
    for (int64_t b = 0; b < nb; ++b, w += kBlockBytes) {
        const uint8_t* qs = w + 1;
        int s = 0;
        for (int j = 0; j < 16; ++j)
            s += kValues[qs[j] & 0x0f] * x[b].qs[j] + kValues[qs[j] >> 4] * x[b].qs[j + 16];
        acc += g_mxfp4_scale[w[0]] * x[b].d * (float)s;
    }
    return acc;
}

// Float activations: each block dequantized exactly once and multiplied in float32 with
// every row of x (each row summed in the same order whatever n is).
void xdot_rows(const uint8_t* w, int64_t nb, const float* x, int64_t xs, int n, float* out, int64_t os) {
    constexpr int kRows = 8;
    float v[32];
    for (int j0 = 0; j0 < n; j0 += kRows) {
        const int m = n - j0 < kRows ? n - j0 : kRows;
        float acc[kRows] = {};
        for (int64_t b = 0; b < nb; ++b) {
            dequantize_mxfp4_row(w + b * kBlockBytes, v, 32);
            for (int j = 0; j < m; ++j) {
                const float* xj = x + (j0 + j) * xs + b * 32;
                float a = acc[j];
                for (int i = 0; i < 32; ++i) a += v[i] * xj[i];
                acc[j] = a;
            }
        }
        for (int j = 0; j < m; ++j) out[(j0 + j) * os] = acc[j];
    }
}

}  // namespace
}  // namespace wren

#ifdef WREN_MXFP4_X86
#define TGT __attribute__((target("avx2,fma,f16c")))
#define NS mxfp4_avx2
#define U8S8_ACC(acc, u, s) _mm256_add_epi32((acc), _mm256_madd_epi16(_mm256_maddubs_epi16((u), (s)), _mm256_set1_epi16(1)))
#define MXFP4_VBMI 0
#include "mxfp4_x86.inc"
#undef TGT
#undef NS
#undef U8S8_ACC

#define TGT __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")))
#define NS mxfp4_vnni
#define U8S8_ACC(acc, u, s) _mm256_dpbusd_epi32((acc), (u), (s))
#include "mxfp4_x86.inc"
#undef TGT
#undef NS
#undef MXFP4_VBMI

// the same with AVX-512 VBMI (Ice Lake, Zen 4 and later; not Cascade Lake)
#define TGT __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni,avx512vbmi")))
#define NS mxfp4_vbmi
#define MXFP4_VBMI 1
#include "mxfp4_x86.inc"
#undef TGT
#undef NS
#undef U8S8_ACC
#undef MXFP4_VBMI
#endif

namespace wren {

void fill_mxfp4(Kernels& k) {
    // The scalar reference first; an x86 table then takes the kernel of its own level
    // (k.isa names the table build_best chose, which checked the CPU).
    k.qdot[MXFP4] = dot_scalar;
    k.qdot_rows[MXFP4] = nullptr;
    k.qdot_wrows[MXFP4] = nullptr;
    k.xdot_rows[MXFP4] = xdot_rows;
    k.quant[MXFP4] = quant_q8;
    k.act_bytes[MXFP4] = (int)sizeof(BlockQ8);
#ifdef WREN_MXFP4_X86
    // every other x86 table (AVX2, AVX-VNNI) has at least AVX2: the AVX2 kernels
    if (std::strcmp(k.isa, "avx512-vnni") == 0 && __builtin_cpu_supports("avx512vbmi")) mxfp4_vbmi::fill(k);
    else if (std::strcmp(k.isa, "avx512-vnni") == 0) mxfp4_vnni::fill(k);
    else if (std::strncmp(k.isa, "avx", 3) == 0) mxfp4_avx2::fill(k);
#endif
}

}  // namespace wren
