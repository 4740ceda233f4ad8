// Interleaved layouts of the GGUF block types: a group of rows' blocks side by side, so
// one vector load holds a few weights of every row in the group and each row's sum
// stays in its own lane (no horizontal sums, one scale vector per block). Only a
// permutation of bytes: a group keeps the place its rows had, and unpack_group gives
// the file's rows back bit for bit.
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <string>

#include "wren_quant.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define WREN_REPACK_X86 1
#endif

namespace wren {

#if WREN_REPACK_X86
// The k-quant groups are repacked per prompt chunk for mapped experts (experts.cpp): with the
// byte-by-byte copies below, a 512-token chunk's experts took 126 ms a layer against 102 for
// experts interleaved at load (Qwen3-30B-A3B's shape, 4 layers, AMD EPYC Zen 4, 2 threads);
// with these transposes 118. The bulk, the quants, is 8 rows x 4-byte chunks laid side by
// side: an 8 x 8 transpose of 32-bit elements per 8 chunks. Same bytes as the portable loops
// (test_repack checks them against a numpy permutation).
#define REPACK_TGT __attribute__((target("avx2")))

// dst[32 * c + 4 * r .. +4] = (src + r * stride)[4 * c .. +4] for r, c in 0..7.
REPACK_TGT static inline void transpose_8x8_dwords(const uint8_t* src, int64_t stride, uint8_t* dst) {
    __m256 r[8];
    for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps((const float*)(src + i * stride));
    const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    const __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    const __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    const __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    const __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    float* o = (float*)dst;
    _mm256_storeu_ps(o + 0, _mm256_permute2f128_ps(s0, s4, 0x20));
    _mm256_storeu_ps(o + 8, _mm256_permute2f128_ps(s1, s5, 0x20));
    _mm256_storeu_ps(o + 16, _mm256_permute2f128_ps(s2, s6, 0x20));
    _mm256_storeu_ps(o + 24, _mm256_permute2f128_ps(s3, s7, 0x20));
    _mm256_storeu_ps(o + 32, _mm256_permute2f128_ps(s0, s4, 0x31));
    _mm256_storeu_ps(o + 40, _mm256_permute2f128_ps(s1, s5, 0x31));
    _mm256_storeu_ps(o + 48, _mm256_permute2f128_ps(s2, s6, 0x31));
    _mm256_storeu_ps(o + 56, _mm256_permute2f128_ps(s3, s7, 0x31));
}

// dst[16 * i + 2 * r .. +2] = (src + r * stride)[2 * i .. +2] for r, i in 0..7 (Q6_K's scales).
REPACK_TGT static inline void transpose_8x8_words(const uint8_t* src, int64_t stride, uint8_t* dst) {
    __m128i r[8];
    for (int i = 0; i < 8; ++i) r[i] = _mm_loadu_si128((const __m128i*)(src + i * stride));
    const __m128i a0 = _mm_unpacklo_epi16(r[0], r[1]), a1 = _mm_unpackhi_epi16(r[0], r[1]);
    const __m128i a2 = _mm_unpacklo_epi16(r[2], r[3]), a3 = _mm_unpackhi_epi16(r[2], r[3]);
    const __m128i a4 = _mm_unpacklo_epi16(r[4], r[5]), a5 = _mm_unpackhi_epi16(r[4], r[5]);
    const __m128i a6 = _mm_unpacklo_epi16(r[6], r[7]), a7 = _mm_unpackhi_epi16(r[6], r[7]);
    const __m128i b0 = _mm_unpacklo_epi32(a0, a2), b1 = _mm_unpackhi_epi32(a0, a2);
    const __m128i b2 = _mm_unpacklo_epi32(a1, a3), b3 = _mm_unpackhi_epi32(a1, a3);
    const __m128i b4 = _mm_unpacklo_epi32(a4, a6), b5 = _mm_unpackhi_epi32(a4, a6);
    const __m128i b6 = _mm_unpacklo_epi32(a5, a7), b7 = _mm_unpackhi_epi32(a5, a7);
    __m128i* o = (__m128i*)dst;
    _mm_storeu_si128(o + 0, _mm_unpacklo_epi64(b0, b4));
    _mm_storeu_si128(o + 1, _mm_unpackhi_epi64(b0, b4));
    _mm_storeu_si128(o + 2, _mm_unpacklo_epi64(b1, b5));
    _mm_storeu_si128(o + 3, _mm_unpackhi_epi64(b1, b5));
    _mm_storeu_si128(o + 4, _mm_unpacklo_epi64(b2, b6));
    _mm_storeu_si128(o + 5, _mm_unpackhi_epi64(b2, b6));
    _mm_storeu_si128(o + 6, _mm_unpacklo_epi64(b3, b7));
    _mm_storeu_si128(o + 7, _mm_unpackhi_epi64(b3, b7));
}

REPACK_TGT static void repack_q4_k_x8_avx2(const uint8_t* src, int64_t row_bytes, uint8_t* dst) {
    const int64_t nb = row_bytes / 144;
    for (int64_t s = 0; s < nb; ++s) {
        uint8_t* o = dst + s * 1152;
        const uint8_t* b0 = src + s * 144;
        uint64_t high[8];  // row r's sub-block b: the scale's and minimum's top two bits, in byte b
        for (int r = 0; r < 8; ++r) {
            const uint8_t* blk = b0 + r * row_bytes;
            std::memcpy(o + 2 * r, blk, 2);
            std::memcpy(o + 16 + 2 * r, blk + 2, 2);
            // kscale_min for all eight sub-blocks at once, a byte each: words a, b, c are the
            // 12 scale bytes 0-3, 4-7, 8-11.
            uint32_t a, b, c;
            std::memcpy(&a, blk + 4, 4);
            std::memcpy(&b, blk + 8, 4);
            std::memcpy(&c, blk + 12, 4);
            const uint64_t sc = (a & 0x3F3F3F3Fu) |
                                (uint64_t)((c & 0x0F0F0F0Fu) | (((a >> 6) & 0x03030303u) << 4)) << 32;
            const uint64_t m = (b & 0x3F3F3F3Fu) |
                               (uint64_t)(((c >> 4) & 0x0F0F0F0Fu) | (((b >> 6) & 0x03030303u) << 4)) << 32;
            const uint64_t low = (sc & 0x0F0F0F0F0F0F0F0Full) | ((m & 0x0F0F0F0F0F0F0F0Full) << 4);
            high[r] = ((sc >> 4) & 0x0303030303030303ull) | (((m >> 4) & 0x0303030303030303ull) << 2);
            for (int k = 0; k < 8; ++k) o[32 + 8 * k + r] = (uint8_t)(low >> (8 * k));
        }
        for (int r = 0; r < 8; r += 2) {
            const uint64_t pair = high[r] | (high[r + 1] << 4);
            for (int k = 0; k < 8; ++k) o[96 + 4 * k + r / 2] = (uint8_t)(pair >> (8 * k));
        }
        for (int c = 0; c < 32; c += 8) transpose_8x8_dwords(b0 + 16 + 4 * c, row_bytes, o + 128 + 32 * c);
    }
}

REPACK_TGT static void repack_q6_k_x8_avx2(const uint8_t* src, int64_t row_bytes, uint8_t* dst) {
    const int64_t nb = row_bytes / 210;
    for (int64_t s = 0; s < nb; ++s) {
        uint8_t* o = dst + s * 1680;
        const uint8_t* b0 = src + s * 210;
        for (int r = 0; r < 8; ++r) std::memcpy(o + 2 * r, b0 + r * row_bytes + 208, 2);
        transpose_8x8_words(b0 + 192, row_bytes, o + 16);
        for (int c = 0; c < 32; c += 8) transpose_8x8_dwords(b0 + 4 * c, row_bytes, o + 144 + 32 * c);
        for (int c = 0; c < 16; c += 8) transpose_8x8_dwords(b0 + 128 + 4 * c, row_bytes, o + 1168 + 32 * c);
    }
}

static bool repack_avx2() {
    static const bool yes = __builtin_cpu_supports("avx2");
    return yes;
}
#endif

void repack_group(int qtype, const uint8_t* src, int64_t row_bytes, uint8_t* dst) {
#if WREN_REPACK_X86
    if (qtype == Q4_K_X8 && repack_avx2()) return repack_q4_k_x8_avx2(src, row_bytes, dst);
    if (qtype == Q6_K_X8 && repack_avx2()) return repack_q6_k_x8_avx2(src, row_bytes, dst);
#endif
    switch (qtype) {
        case Q4_0_X8:
        case Q4_1_X8: {  // the fp16 fields (d; Q4_1: d, m) row by row, then the quants in chunks
            const int fields = qtype == Q4_1_X8 ? 2 : 1, size = 2 * fields + 16;
            const int64_t nb = row_bytes / size;
            for (int64_t b = 0; b < nb; ++b) {
                uint8_t* o = dst + b * 8 * size;
                for (int r = 0; r < 8; ++r) {
                    const uint8_t* blk = src + r * row_bytes + b * size;
                    for (int f = 0; f < fields; ++f) std::memcpy(o + 16 * f + 2 * r, blk + 2 * f, 2);
                    for (int c = 0; c < 4; ++c) std::memcpy(o + 16 * fields + 32 * c + 4 * r, blk + 2 * fields + 4 * c, 4);
                }
            }
            break;
        }
        case Q4_K_X8: {
            const int64_t nb = row_bytes / 144;
            for (int64_t s = 0; s < nb; ++s) {
                uint8_t* o = dst + s * 1152;
                std::memset(o + 96, 0, 32);
                for (int r = 0; r < 8; ++r) {
                    const uint8_t* blk = src + r * row_bytes + s * 144;
                    std::memcpy(o + 2 * r, blk, 2);
                    std::memcpy(o + 16 + 2 * r, blk + 2, 2);
                    for (int b = 0; b < 8; ++b) {
                        uint8_t sc, m;
                        kscale_min(blk + 4, b, &sc, &m);
                        o[32 + 8 * b + r] = (uint8_t)((sc & 15) | ((m & 15) << 4));
                        o[96 + 4 * b + r / 2] |= (uint8_t)(((sc >> 4) | ((m >> 4) << 2)) << (4 * (r & 1)));
                    }
                    for (int c = 0; c < 32; ++c) std::memcpy(o + 128 + 32 * c + 4 * r, blk + 16 + 4 * c, 4);
                }
            }
            break;
        }
        case Q6_K_X8: {
            const int64_t nb = row_bytes / 210;
            for (int64_t s = 0; s < nb; ++s) {
                uint8_t* o = dst + s * 1680;
                for (int r = 0; r < 8; ++r) {
                    const uint8_t* blk = src + r * row_bytes + s * 210;
                    std::memcpy(o + 2 * r, blk + 208, 2);
                    for (int i = 0; i < 8; ++i) std::memcpy(o + 16 + 16 * i + 2 * r, blk + 192 + 2 * i, 2);
                    for (int c = 0; c < 32; ++c) std::memcpy(o + 144 + 32 * c + 4 * r, blk + 4 * c, 4);
                    for (int c = 0; c < 16; ++c) std::memcpy(o + 1168 + 32 * c + 4 * r, blk + 128 + 4 * c, 4);
                }
            }
            break;
        }
        default: break;
    }
}

void unpack_group(int qtype, const uint8_t* src, int64_t row_bytes, uint8_t* dst) {
    switch (qtype) {
        case Q4_0_X8:
        case Q4_1_X8: {
            const int fields = qtype == Q4_1_X8 ? 2 : 1, size = 2 * fields + 16;
            const int64_t nb = row_bytes / size;
            for (int64_t b = 0; b < nb; ++b) {
                const uint8_t* o = src + b * 8 * size;
                for (int r = 0; r < 8; ++r) {
                    uint8_t* blk = dst + r * row_bytes + b * size;
                    for (int f = 0; f < fields; ++f) std::memcpy(blk + 2 * f, o + 16 * f + 2 * r, 2);
                    for (int c = 0; c < 4; ++c) std::memcpy(blk + 2 * fields + 4 * c, o + 16 * fields + 32 * c + 4 * r, 4);
                }
            }
            break;
        }
        case Q4_K_X8: {
            const int64_t nb = row_bytes / 144;
            for (int64_t s = 0; s < nb; ++s) {
                const uint8_t* o = src + s * 1152;
                for (int r = 0; r < 8; ++r) {
                    uint8_t* blk = dst + r * row_bytes + s * 144;
                    std::memcpy(blk, o + 2 * r, 2);
                    std::memcpy(blk + 2, o + 16 + 2 * r, 2);
                    int sc[8], m[8];
                    for (int b = 0; b < 8; ++b) q4_k_x8_scale_min(o, b, r, &sc[b], &m[b]);
                    uint8_t* k = blk + 4;  // the inverse of kscale_min: every one of the 96 bits
                    for (int j = 0; j < 4; ++j) {
                        k[j] = (uint8_t)(sc[j] | ((sc[j + 4] >> 4) << 6));
                        k[j + 4] = (uint8_t)(m[j] | ((m[j + 4] >> 4) << 6));
                        k[j + 8] = (uint8_t)((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
                    }
                    for (int c = 0; c < 32; ++c) std::memcpy(blk + 16 + 4 * c, o + 128 + 32 * c + 4 * r, 4);
                }
            }
            break;
        }
        case Q6_K_X8: {
            const int64_t nb = row_bytes / 210;
            for (int64_t s = 0; s < nb; ++s) {
                const uint8_t* o = src + s * 1680;
                for (int r = 0; r < 8; ++r) {
                    uint8_t* blk = dst + r * row_bytes + s * 210;
                    std::memcpy(blk + 208, o + 2 * r, 2);
                    for (int i = 0; i < 8; ++i) std::memcpy(blk + 192 + 2 * i, o + 16 + 16 * i + 2 * r, 2);
                    for (int c = 0; c < 32; ++c) std::memcpy(blk + 4 * c, o + 144 + 32 * c + 4 * r, 4);
                    for (int c = 0; c < 16; ++c) std::memcpy(blk + 128 + 4 * c, o + 1168 + 32 * c + 4 * r, 4);
                }
            }
            break;
        }
        default: break;
    }
}

std::string env_setting(const char* name) {
    const char* v = std::getenv(name);
    std::string s = v ? v : "";
    s.erase(0, s.find_first_not_of(" \t\n"));
    s.erase(s.find_last_not_of(" \t\n") + 1);
    for (char& c : s) c = (char)std::tolower((unsigned char)c);
    return s;
}

bool env_off(const char* name) {
    const std::string s = env_setting(name);
    return s == "off" || s == "0" || s == "false" || s == "no";
}

bool env_on(const char* name) {
    const std::string s = env_setting(name);
    return s == "on" || s == "1" || s == "true" || s == "yes";
}

int interleaved_layout(const Kernels& k, int qtype) {
    int to = -1;
    switch (qtype) {
        case Q4_0: to = Q4_0_X8; break;
        case Q4_1: to = Q4_1_X8; break;
        case Q4_K: to = Q4_K_X8; break;
        case Q6_K: to = Q6_K_X8; break;
        default: return -1;
    }
    if (k.qdot_group[to] == nullptr) return -1;  // a table without its kernel keeps the file's rows
    // The avx2 table's Q6_K_X8 kernel wins the prompt (1.3x) but loses a decoded token: one
    // token, one thread, 2048 x 8192 not in cache, 0.94-1.02 ms CPU against 0.69-0.73 for the
    // rows (AMD EPYC Zen 4, load 3-4); decoding matters as much, so Q6_K stays in rows there
    // until that kernel keeps up. (The VNNI tables win both: 0.60 vs 0.67 ms.)
    if (to == Q6_K_X8 && std::strcmp(k.isa, "avx2") == 0) return -1;
    static const std::string setting = env_setting("WREN_REPACK");  // read once, as kernels.py reads it
    static const bool off = env_off("WREN_REPACK");
    if (off) return -1;
    // "-q6_k,-q4_0": those file types stay in rows (an A/B of one layout)
    const std::string name = std::string("-") + type_info(qtype)->name;
    std::string lower;
    for (char c : name) lower += (char)std::tolower((unsigned char)c);
    size_t at = 0;
    while ((at = setting.find(lower, at)) != std::string::npos) {
        const size_t end = at + lower.size();
        if (end == setting.size() || setting[end] == ',' || setting[end] == ' ') return -1;
        at = end;
    }
    return to;
}

}  // namespace wren
