// Activation quantization, the portable reference dot kernels, and the choice of
// instruction set. A weight block's integer dot with 8-bit activations is exact; the only
// approximation qlinear makes is rounding x to 8 bits per block.
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "wren_quant.h"

namespace wren {

// qdot_neon.cpp's second arm64 table: the NEON kernels with the dot-product extension,
// false (k untouched) where the CPU lacks it or the build is not for arm64.
bool fill_neon_dotprod(Kernels& k);
// Its third: dotprod plus the int8 matrix multiply (FEAT_I8MM) for the prompt path's groups.
bool fill_neon_i8mm(Kernels& k);

namespace {

// The largest |v[j]| of a block: the scale every activation rounding starts from.
static float abs_max(const float* v, int n) {
    float amax = 0.f;
    for (int j = 0; j < n; ++j) amax = std::fmax(amax, std::fabs(v[j]));
    return amax;
}

// v rounded half to even and held within +-levels (v * (levels / amax) can exceed it by a
// rounding of the division): the wide activations' level.
static float clamped_round(float v, float levels) {
    const float q = round_even(v);
    return q > levels ? levels : q < -levels ? -levels : q;
}

void quantize_row_q8(const float* x, int64_t cols, void* outv) {
    BlockQ8* out = (BlockQ8*)outv;
    for (int64_t b = 0; b < cols / 32; ++b) {
        const float* v = x + 32 * b;
        const float amax = abs_max(v, 32);
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

void quantize_row_q8k(const float* x, int64_t cols, void* outv) {
    BlockQ8K* out = (BlockQ8K*)outv;
    for (int64_t b = 0; b < cols / 256; ++b) {
        const float* v = x + 256 * b;
        const float amax = abs_max(v, 256);
        const float d = amax / 127.f;
        const float id = d != 0.f ? 127.f / amax : 0.f;
        for (int g = 0; g < 16; ++g) {
            int sum = 0;
            for (int j = 16 * g; j < 16 * g + 16; ++j) {
                const int q = (int)round_even(v[j] * id);
                out[b].qs[j] = (int8_t)q;
                sum += q;
            }
            out[b].bsums[g] = (int16_t)sum;
        }
        out[b].d = d;
    }
}

void quantize_row_x16(const float* x, int64_t cols, void* outv) {
    BlockX16* out = (BlockX16*)outv;
    for (int64_t b = 0; b < cols / 32; ++b) {
        const float* v = x + 32 * b;
        const float amax = abs_max(v, 32);
        const float id = amax != 0.f ? 32767.f / amax : 0.f;
        for (int j = 0; j < 32; ++j) {
            out[b].qs[j] = (int16_t)clamped_round(v[j] * id, 32767.f);
        }
        out[b].d = amax / 32767.f;
    }
}

void quantize_row_x15k(const float* x, int64_t cols, void* outv) {
    BlockX15K* out = (BlockX15K*)outv;
    for (int64_t b = 0; b < cols / 256; ++b) {
        const float* v = x + 256 * b;
        const float amax = abs_max(v, 256);
        const float id = amax != 0.f ? 16383.f / amax : 0.f;
        BlockX15K& o = out[b];
        for (int g = 0; g < 16; ++g) {
            int hs = 0, ls = 0;
            for (int j = 16 * g; j < 16 * g + 16; ++j) {
                const int q = (int)clamped_round(v[j] * id, 16383.f);
                const int hi = q >= 0 ? q / 128 : -((-q + 127) / 128);  // floor(q / 128)
                o.hi[j] = (int8_t)hi;
                o.lo[j] = (int8_t)(q - 128 * hi);
                hs += o.hi[j];
                ls += o.lo[j];
            }
            o.hsum[g] = (int16_t)hs;
            o.lsum[g] = (int16_t)ls;
        }
        o.d = amax / 16383.f;
        for (float& p : o.pad) p = 0.f;
    }
}

float dot_q4_0(const uint8_t* w, int64_t nb, const void* xv) {
    const BlockQ8* x = (const BlockQ8*)xv;
    float acc = 0.f;
    for (int64_t b = 0; b < nb; ++b, w += 18) {
        const uint8_t* qs = w + 2;
        int s = 0;
        for (int j = 0; j < 16; ++j) s += (qs[j] & 0x0f) * x[b].qs[j] + (qs[j] >> 4) * x[b].qs[j + 16];
        acc += fp16_to_fp32(load_u16(w)) * x[b].d * (float)(s - 8 * x[b].sum);
    }
    return acc;
}

float dot_q4_1(const uint8_t* w, int64_t nb, const void* xv) {
    const BlockQ8* x = (const BlockQ8*)xv;
    float acc = 0.f;
    for (int64_t b = 0; b < nb; ++b, w += 20) {
        const uint8_t* qs = w + 4;
        int s = 0;
        for (int j = 0; j < 16; ++j) s += (qs[j] & 0x0f) * x[b].qs[j] + (qs[j] >> 4) * x[b].qs[j + 16];
        acc += fp16_to_fp32(load_u16(w)) * x[b].d * (float)s +
               fp16_to_fp32(load_u16(w + 2)) * x[b].d * (float)x[b].sum;
    }
    return acc;
}

inline int dot_q5(const uint8_t* qs, uint32_t qh, const int8_t* xq) {
    int s = 0;
    for (int j = 0; j < 16; ++j) {
        s += ((qs[j] & 0x0f) | (((qh >> j) & 1) << 4)) * xq[j];
        s += ((qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) * xq[j + 16];
    }
    return s;
}

float dot_q5_0(const uint8_t* w, int64_t nb, const void* xv) {
    const BlockQ8* x = (const BlockQ8*)xv;
    float acc = 0.f;
    for (int64_t b = 0; b < nb; ++b, w += 22) {
        const int s = dot_q5(w + 6, load_u32(w + 2), x[b].qs);
        acc += fp16_to_fp32(load_u16(w)) * x[b].d * (float)(s - 16 * x[b].sum);
    }
    return acc;
}

float dot_q5_1(const uint8_t* w, int64_t nb, const void* xv) {
    const BlockQ8* x = (const BlockQ8*)xv;
    float acc = 0.f;
    for (int64_t b = 0; b < nb; ++b, w += 24) {
        const int s = dot_q5(w + 8, load_u32(w + 4), x[b].qs);
        acc += fp16_to_fp32(load_u16(w)) * x[b].d * (float)s +
               fp16_to_fp32(load_u16(w + 2)) * x[b].d * (float)x[b].sum;
    }
    return acc;
}

float dot_q8_0(const uint8_t* w, int64_t nb, const void* xv) {
    const BlockQ8* x = (const BlockQ8*)xv;
    float acc = 0.f;
    for (int64_t b = 0; b < nb; ++b, w += 34) {
        const int8_t* qs = (const int8_t*)(w + 2);
        int s = 0;
        for (int j = 0; j < 32; ++j) s += qs[j] * x[b].qs[j];
        acc += fp16_to_fp32(load_u16(w)) * x[b].d * (float)s;
    }
    return acc;
}

// Sum over the 16 groups of 16 of scale[g] * dot(q, x) for a k-quant's unpacked values.
inline int scaled_dot16(const int8_t* q, const int8_t* xq, const int* scale) {
    int total = 0;
    for (int g = 0; g < 16; ++g) {
        int s = 0;
        for (int t = 0; t < 16; ++t) s += q[16 * g + t] * xq[16 * g + t];
        total += scale[g] * s;
    }
    return total;
}

float dot_q2_k(const uint8_t* w, int64_t nb, const void* xv) {
    const BlockQ8K* x = (const BlockQ8K*)xv;
    float acc = 0.f;
    int8_t q[256];
    int sc[16];
    for (int64_t b = 0; b < nb; ++b, w += 84) {
        const uint8_t* qs = w + 16;
        for (int e = 0; e < 256; ++e) q[e] = (int8_t)((qs[32 * (e >> 7) + (e & 31)] >> (2 * ((e >> 5) & 3))) & 3);
        int mins = 0;
        for (int g = 0; g < 16; ++g) {
            sc[g] = w[g] & 0x0f;
            mins += (w[g] >> 4) * x[b].bsums[g];
        }
        const int s = scaled_dot16(q, x[b].qs, sc);
        acc += x[b].d * (fp16_to_fp32(load_u16(w + 80)) * (float)s - fp16_to_fp32(load_u16(w + 82)) * (float)mins);
    }
    return acc;
}

float dot_q3_k(const uint8_t* w, int64_t nb, const void* xv) {
    const BlockQ8K* x = (const BlockQ8K*)xv;
    float acc = 0.f;
    int8_t q[256];
    int8_t s8[16];
    int sc[16];
    for (int64_t b = 0; b < nb; ++b, w += 110) {
        const uint8_t* hm = w;
        const uint8_t* qs = w + 32;
        for (int e = 0; e < 256; ++e) {
            const int ql = (qs[32 * (e >> 7) + (e & 31)] >> (2 * ((e >> 5) & 3))) & 3;
            q[e] = (int8_t)(ql - 4 * (1 - ((hm[e & 31] >> (e >> 5)) & 1)));
        }
        q3k_scales(w + 96, s8);
        for (int g = 0; g < 16; ++g) sc[g] = s8[g];
        acc += x[b].d * fp16_to_fp32(load_u16(w + 108)) * (float)scaled_dot16(q, x[b].qs, sc);
    }
    return acc;
}

template <bool FIVE>
float dot_q45_k(const uint8_t* w, int64_t nb, const void* xv) {
    const BlockQ8K* x = (const BlockQ8K*)xv;
    constexpr int SIZE = FIVE ? 176 : 144;
    float acc = 0.f;
    for (int64_t b = 0; b < nb; ++b, w += SIZE) {
        const uint8_t* qh = w + 16;
        const uint8_t* qs = w + (FIVE ? 48 : 16);
        int sum = 0, mins = 0;
        for (int j = 0; j < 8; ++j) {
            uint8_t sc, m;
            kscale_min(w + 4, j, &sc, &m);
            const uint8_t* qq = qs + 32 * (j >> 1);
            const int shift = 4 * (j & 1);
            int s = 0;
            for (int l = 0; l < 32; ++l) {
                int v = (qq[l] >> shift) & 0x0f;
                if (FIVE) v |= ((qh[l] >> j) & 1) << 4;
                s += v * x[b].qs[32 * j + l];
            }
            sum += sc * s;
            mins += m * (x[b].bsums[2 * j] + x[b].bsums[2 * j + 1]);
        }
        acc += x[b].d * (fp16_to_fp32(load_u16(w)) * (float)sum - fp16_to_fp32(load_u16(w + 2)) * (float)mins);
    }
    return acc;
}

// A Q6_K block's 256 signed 6-bit values (q - 32), in the dequantized order.
void unpack_q6_k(const uint8_t* w, int8_t* q) {
    const uint8_t* ql = w;
    const uint8_t* qh = w + 128;
    for (int e = 0; e < 256; ++e) {
        const int h = e >> 7, r = e & 127;
        const int lo = (ql[64 * h + (r & 63)] >> (4 * (r >> 6))) & 0x0f;
        const int hi = (qh[32 * h + (r & 31)] >> (2 * (r >> 5))) & 3;
        q[e] = (int8_t)((lo | (hi << 4)) - 32);
    }
}

float dot_q6_k(const uint8_t* w, int64_t nb, const void* xv) {
    const BlockQ8K* x = (const BlockQ8K*)xv;
    float acc = 0.f;
    int8_t q[256];
    int sc[16];
    for (int64_t b = 0; b < nb; ++b, w += 210) {
        unpack_q6_k(w, q);
        for (int g = 0; g < 16; ++g) sc[g] = ((const int8_t*)(w + 192))[g];
        acc += x[b].d * fp16_to_fp32(load_u16(w + 208)) * (float)scaled_dot16(q, x[b].qs, sc);
    }
    return acc;
}

float fdot_f32(const uint8_t* w, int64_t cols, const float* x) {
    const float* v = (const float*)w;
    float acc = 0.f;
    for (int64_t i = 0; i < cols; ++i) acc += v[i] * x[i];
    return acc;
}

float fdot_f16(const uint8_t* w, int64_t cols, const float* x) {
    float acc = 0.f;
    for (int64_t i = 0; i < cols; ++i) acc += fp16_to_fp32(load_u16(w + 2 * i)) * x[i];
    return acc;
}

float fdot_bf16(const uint8_t* w, int64_t cols, const float* x) {
    float acc = 0.f;
    for (int64_t i = 0; i < cols; ++i) acc += bf16_to_fp32(load_u16(w + 2 * i)) * x[i];
    return acc;
}

// Float activations: each block dequantized exactly (dequantize_row, the file's values) and
// multiplied with x in float32.
template <int QTYPE, int BLOCK, int SIZE>
void xdot_rows(const uint8_t* w, int64_t nb, const float* x, int64_t xs, int n, float* out, int64_t os) {
    float v[BLOCK];
    for (int j = 0; j < n; ++j) {
        const float* xj = x + j * xs;
        float acc = 0.f;
        for (int64_t b = 0; b < nb; ++b) {
            dequantize_row(QTYPE, w + b * SIZE, v, BLOCK);
            for (int i = 0; i < BLOCK; ++i) acc += v[i] * xj[b * BLOCK + i];
        }
        out[j * os] = acc;
    }
}

// Eight lanes summed as the x86 hsum does: ((t0+t4)+(t2+t6)) + ((t1+t5)+(t3+t7)).
float hsum8(const float* t) {
    return ((t[0] + t[4]) + (t[2] + t[6])) + ((t[1] + t[5]) + (t[3] + t[7]));
}

// The sum the x86 kernels with four accumulators end with: added pairwise per lane, then
// the lanes as hsum8.
float lane_sum(const float (*acc)[8]) {
    float t[8];
    for (int l = 0; l < 8; ++l) t[l] = (acc[0][l] + acc[1][l]) + (acc[2][l] + acc[3][l]);
    return hsum8(t);
}

// Q6_K against 15-bit activations (BlockX15K), as the x86 kernels lay it out in eight
// lanes. Per 32-weight chunk c (groups 2c and 2c + 1) lane l takes the four weights
// 32c + 4l..4l + 3, unsigned (q + 32), times their group's scale: sh[l] += sc * sum(u * hi),
// sl[l] += sc * sum(u * lo), all integers. The zero point comes off per lane through the
// 16-value sums, bh[l] = sc[2l] hsum[2l] + sc[2l+1] hsum[2l+1] (bl alike), and a block adds
// acc[l] = fma(d_w * d_x, fma(128, sh - 32 bh, sl - 32 bl), acc[l]); then the lanes as
// hsum8. sh - 32 bh is the lane's sum of sc * (q - 32) * hi over 32 weights, at most
// 128 * 32 * 128 * 32 = 2^24 in size (sl alike), so both convert to float exactly.
void x16dot_q6_k(const uint8_t* w, int64_t nb, const void* xv, int64_t xs, int n, float* out, int64_t os) {
    for (int j = 0; j < n; ++j) {
        const BlockX15K* xj = (const BlockX15K*)((const uint8_t*)xv + j * xs);
        float acc[8] = {};
        int8_t q[256];
        for (int64_t b = 0; b < nb; ++b) {
            const uint8_t* blk = w + b * 210;
            const int8_t* sc = (const int8_t*)(blk + 192);
            const BlockX15K& x = xj[b];
            unpack_q6_k(blk, q);
            int32_t sh[8] = {}, sl[8] = {};
            for (int c = 0; c < 8; ++c)
                for (int l = 0; l < 8; ++l) {
                    const int g = 2 * c + (l >= 4);
                    int32_t ph = 0, pl = 0;
                    for (int k = 32 * c + 4 * l; k < 32 * c + 4 * l + 4; ++k) {
                        ph += (q[k] + 32) * x.hi[k];
                        pl += (q[k] + 32) * x.lo[k];
                    }
                    sh[l] += sc[g] * ph;
                    sl[l] += sc[g] * pl;
                }
            const float s = g_fp16_table[load_u16(blk + 208)] * x.d;
            for (int l = 0; l < 8; ++l) {
                const int32_t bh = sc[2 * l] * x.hsum[2 * l] + sc[2 * l + 1] * x.hsum[2 * l + 1];
                const int32_t bl = sc[2 * l] * x.lsum[2 * l] + sc[2 * l + 1] * x.lsum[2 * l + 1];
                const float v = std::fma(128.f, (float)(sh[l] - 32 * bh), (float)(sl[l] - 32 * bl));
                acc[l] = std::fma(s, v, acc[l]);
            }
        }
        out[j * os] = hsum8(acc);
    }
}

// Q8_0 against 16-bit activations (one activation block per weight block): lane l holds the
// exact (q[2l]x[2l] + q[2l+1]x[2l+1]) + (q[16+2l]x[16+2l] + q[17+2l]x[17+2l]), added as
// acc[b % 4][l] = fma(d_w * d_x, lane, acc) in block order; then as x16dot_q6_k.
void x16dot_q8_0(const uint8_t* w, int64_t nb, const void* xv, int64_t xs, int n, float* out, int64_t os) {
    for (int j = 0; j < n; ++j) {
        const BlockX16* xj = (const BlockX16*)((const uint8_t*)xv + j * xs);
        float acc[4][8] = {};
        for (int64_t b = 0; b < nb; ++b) {
            const uint8_t* blk = w + b * 34;
            const int8_t* q = (const int8_t*)(blk + 2);
            const int16_t* xq = xj[b].qs;
            const float s = g_fp16_table[load_u16(blk)] * xj[b].d;
            for (int l = 0; l < 8; ++l) {
                const int32_t lo = (int32_t)q[2 * l] * xq[2 * l] + (int32_t)q[2 * l + 1] * xq[2 * l + 1];
                const int32_t hi = (int32_t)q[16 + 2 * l] * xq[16 + 2 * l] + (int32_t)q[17 + 2 * l] * xq[17 + 2 * l];
                acc[b & 3][l] = std::fma(s, (float)(lo + hi), acc[b & 3][l]);
            }
        }
        out[j * os] = lane_sum(acc);
    }
}

// Q4_0_X8 / Q4_1_X8 (repack.cpp) against BlockQ8 rows: per row and block the exact integer
// dot, then acc = fma(d_w * d_x, dot, acc) in block order (Q4_0: dot - 8 * sum(x); Q4_1:
// then acc = fma(m_w, d_x * sum(x), acc)). The x86 kernels do the same operations in lanes,
// so every table gives the same bits.
template <bool MIN>
void group_q4_x8(const uint8_t* g, int64_t nb, const void* xqv, int64_t xs, int n, float* out, int64_t os) {
    constexpr int kFields = MIN ? 2 : 1, kGroup = 8 * (2 * kFields + 16);
    for (int j = 0; j < n; ++j) {
        const BlockQ8* x = (const BlockQ8*)((const uint8_t*)xqv + j * xs);
        float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
        for (int64_t b = 0; b < nb; ++b) {
            const uint8_t* o = g + b * kGroup;
            const uint8_t* quants = o + 16 * kFields;
            for (int r = 0; r < 8; ++r) {
                int s = 0;
                for (int c = 0; c < 4; ++c)
                    for (int k = 0; k < 4; ++k) {
                        const uint8_t q = quants[32 * c + 4 * r + k];
                        s += (q & 0x0f) * x[b].qs[4 * c + k] + (q >> 4) * x[b].qs[16 + 4 * c + k];
                    }
                if (!MIN) s -= 8 * x[b].sum;
                acc[r] = std::fma(fp16_to_fp32(load_u16(o + 2 * r)) * x[b].d, (float)s, acc[r]);
                if (MIN) acc[r] = std::fma(fp16_to_fp32(load_u16(o + 16 + 2 * r)), x[b].d * (float)x[b].sum, acc[r]);
            }
        }
        for (int r = 0; r < 8; ++r) out[j * os + r] = acc[r];
    }
}

// Q4_K_X8 against BlockQ8K rows: per row and super-block the exact integer sums
// sum_b scale_b * dot_b and sum_b min_b * (sum of x in b), then
// acc = fma(d * d_x, sums, acc); acc = fma(-(dmin * d_x), mins, acc), as the x86 kernels do.
void group_q4_k_x8(const uint8_t* g, int64_t nb, const void* xqv, int64_t xs, int n, float* out, int64_t os) {
    for (int j = 0; j < n; ++j) {
        const BlockQ8K* x = (const BlockQ8K*)((const uint8_t*)xqv + j * xs);
        float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
        for (int64_t s = 0; s < nb; ++s) {
            const uint8_t* o = g + s * 1152;
            for (int r = 0; r < 8; ++r) {
                int sums = 0, mins = 0;
                for (int b = 0; b < 8; ++b) {
                    int sc, m;
                    q4_k_x8_scale_min(o, b, r, &sc, &m);
                    const int half = b >> 1, shift = 4 * (b & 1);
                    int dot = 0;
                    for (int i = 0; i < 32; ++i) {
                        const int q = (o[128 + 32 * (8 * half + i / 4) + 4 * r + (i & 3)] >> shift) & 15;
                        dot += q * x[s].qs[32 * b + i];
                    }
                    sums += sc * dot;
                    mins += m * (x[s].bsums[2 * b] + x[s].bsums[2 * b + 1]);
                }
                acc[r] = std::fma(fp16_to_fp32(load_u16(o + 2 * r)) * x[s].d, (float)sums, acc[r]);
                acc[r] = std::fma(-(fp16_to_fp32(load_u16(o + 16 + 2 * r)) * x[s].d), (float)mins, acc[r]);
            }
        }
        for (int r = 0; r < 8; ++r) out[j * os + r] = acc[r];
    }
}

// Q6_K_X8 against BlockQ8K rows: per row and super-block the exact integer sum of the
// 16 groups' scale * dot(q - 32, x) (scaled_dot16's), then acc += (d_x * d) * sum: dot_q6_k's
// float steps, so a group's row gives dot_q6_k's bits on every table.
void group_q6_k_x8(const uint8_t* g, int64_t nb, const void* xqv, int64_t xs, int n, float* out, int64_t os) {
    for (int j = 0; j < n; ++j) {
        const BlockQ8K* x = (const BlockQ8K*)((const uint8_t*)xqv + j * xs);
        float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
        for (int64_t s = 0; s < nb; ++s) {
            const uint8_t* o = g + s * 1680;
            for (int r = 0; r < 8; ++r) {
                int total = 0;
                for (int grp = 0; grp < 16; ++grp) {
                    const int sc = (int8_t)o[16 + 16 * (grp >> 1) + 2 * r + (grp & 1)];
                    int dot = 0;
                    for (int t = 0; t < 16; ++t) {
                        const int e = 16 * grp + t, h = e >> 7, i = e & 127;
                        // ql byte 64h + (i & 63), nibble i >> 6; qh byte 32h + (i & 31), bits 2 * (i >> 5)
                        const int lb = 64 * h + (i & 63), hb = 32 * h + (i & 31);
                        const int lo = (o[144 + 32 * (lb >> 2) + 4 * r + (lb & 3)] >> (4 * (i >> 6))) & 15;
                        const int hi = (o[1168 + 32 * (hb >> 2) + 4 * r + (hb & 3)] >> (2 * (i >> 5))) & 3;
                        dot += ((lo | (hi << 4)) - 32) * x[s].qs[e];
                    }
                    total += sc * dot;
                }
                acc[r] += x[s].d * fp16_to_fp32(load_u16(o + 2 * r)) * (float)total;
            }
        }
        for (int r = 0; r < 8; ++r) out[j * os + r] = acc[r];
    }
}

Kernels build_best(const char* cap) {
    Kernels k;
    fill_scalar(k);
    const bool any = cap == nullptr || cap[0] == '\0';
    auto allowed = [&](const char* name) { return any || std::strcmp(cap, name) == 0; };
    // Each fill_* checks the CPU itself; the later, wider ones override the earlier.
    if (allowed("avx2") || allowed("avx-vnni") || allowed("avx512-vnni")) fill_avx2(k);
    if (allowed("avx-vnni") || allowed("avx512-vnni")) fill_avxvnni(k);
    if (allowed("avx512-vnni")) fill_avx512vnni(k);
    if (allowed("neon") || allowed("neon-dotprod") || allowed("neon-i8mm")) fill_neon(k);
    if (allowed("neon-dotprod") || allowed("neon-i8mm")) fill_neon_dotprod(k);
    if (allowed("neon-i8mm")) fill_neon_i8mm(k);
    fill_mxfp4(k);
    // A table with no Q6_K_X8 kernel of its own (NEON, for now) has no use for the layout:
    // interleaved_layout then keeps Q6_K in rows there (the scalar one is the reference only).
    if (std::strcmp(k.isa, "scalar") != 0 && k.qdot_group[Q6_K_X8] == group_q6_k_x8) {
        k.qdot_group[Q6_K_X8] = nullptr;
        k.quant[Q6_K_X8] = nullptr;
        k.act_bytes[Q6_K_X8] = 0;
    }
    return k;
}
}  // namespace

void fill_scalar(Kernels& k) {
    std::memset(&k, 0, sizeof(k));
    k.isa = "scalar";
    k.qdot[Q4_0] = dot_q4_0;
    k.qdot[Q4_1] = dot_q4_1;
    k.qdot[Q5_0] = dot_q5_0;
    k.qdot[Q5_1] = dot_q5_1;
    k.qdot[Q8_0] = dot_q8_0;
    k.qdot[Q2_K] = dot_q2_k;
    k.qdot[Q3_K] = dot_q3_k;
    k.qdot[Q4_K] = dot_q45_k<false>;
    k.qdot[Q5_K] = dot_q45_k<true>;
    k.qdot[Q6_K] = dot_q6_k;
    k.fdot[F32] = fdot_f32;
    k.fdot[F16] = fdot_f16;
    k.fdot[BF16] = fdot_bf16;
    k.xdot_rows[Q4_0] = xdot_rows<Q4_0, 32, 18>;
    k.xdot_rows[Q4_1] = xdot_rows<Q4_1, 32, 20>;
    k.xdot_rows[Q5_0] = xdot_rows<Q5_0, 32, 22>;
    k.xdot_rows[Q5_1] = xdot_rows<Q5_1, 32, 24>;
    k.xdot_rows[Q8_0] = xdot_rows<Q8_0, 32, 34>;
    k.xdot_rows[Q2_K] = xdot_rows<Q2_K, 256, 84>;
    k.xdot_rows[Q3_K] = xdot_rows<Q3_K, 256, 110>;
    k.xdot_rows[Q4_K] = xdot_rows<Q4_K, 256, 144>;
    k.xdot_rows[Q5_K] = xdot_rows<Q5_K, 256, 176>;
    k.xdot_rows[Q6_K] = xdot_rows<Q6_K, 256, 210>;
    for (int t : {Q4_0, Q4_1, Q5_0, Q5_1, Q8_0}) {
        k.quant[t] = quantize_row_q8;
        k.act_bytes[t] = (int)sizeof(BlockQ8);
    }
    k.quant[Q4_0_X8] = quantize_row_q8;
    k.act_bytes[Q4_0_X8] = (int)sizeof(BlockQ8);
    k.qdot_group[Q4_0_X8] = group_q4_x8<false>;
    k.quant[Q4_1_X8] = quantize_row_q8;
    k.act_bytes[Q4_1_X8] = (int)sizeof(BlockQ8);
    k.qdot_group[Q4_1_X8] = group_q4_x8<true>;
    k.quant[Q4_K_X8] = quantize_row_q8k;
    k.act_bytes[Q4_K_X8] = (int)sizeof(BlockQ8K);
    k.qdot_group[Q4_K_X8] = group_q4_k_x8;
    k.quant[Q6_K_X8] = quantize_row_q8k;
    k.act_bytes[Q6_K_X8] = (int)sizeof(BlockQ8K);
    k.qdot_group[Q6_K_X8] = group_q6_k_x8;
    for (int t : {Q2_K, Q3_K, Q4_K, Q5_K, Q6_K}) {
        k.quant[t] = quantize_row_q8k;
        k.act_bytes[t] = (int)sizeof(BlockQ8K);
    }
    k.quant_wide[Q8_0] = quantize_row_x16;
    k.wide_bytes[Q8_0] = (int)sizeof(BlockX16);
    k.x16dot_rows[Q8_0] = x16dot_q8_0;
    k.quant_wide[Q6_K] = quantize_row_x15k;
    k.wide_bytes[Q6_K] = (int)sizeof(BlockX15K);
    k.x16dot_rows[Q6_K] = x16dot_q6_k;
}

namespace {
// One table per possible cap, built once; the active one is swapped atomically.
struct Tables {
    Kernels best, scalar, avx2, avxvnni, vnni, neon, neon_dot, neon_mm;
    Tables() : best(build_best(std::getenv("WREN_ISA"))), scalar(build_best("scalar")),
               avx2(build_best("avx2")), avxvnni(build_best("avx-vnni")), vnni(build_best("avx512-vnni")),
               neon(build_best("neon")),
               neon_dot(build_best("neon-dotprod")), neon_mm(build_best("neon-i8mm")) {}
};
Tables& tables() {
    static Tables t;
    return t;
}
std::atomic<const Kernels*> g_active{nullptr};
}  // namespace

const Kernels& kernels() {
    const Kernels* k = g_active.load(std::memory_order_acquire);
    if (k == nullptr) {
        k = &tables().best;
        g_active.store(k, std::memory_order_release);
    }
    return *k;
}

const char* select_isa(const char* cap) {
    Tables& t = tables();
    const Kernels* k = &t.best;
    if (cap != nullptr && cap[0] != '\0') {
        if (std::strcmp(cap, "scalar") == 0) k = &t.scalar;
        else if (std::strcmp(cap, "avx2") == 0) k = &t.avx2;
        else if (std::strcmp(cap, "avx-vnni") == 0) k = &t.avxvnni;
        else if (std::strcmp(cap, "avx512-vnni") == 0) k = &t.vnni;
        else if (std::strcmp(cap, "neon") == 0) k = &t.neon;
        else if (std::strcmp(cap, "neon-dotprod") == 0) k = &t.neon_dot;
        else if (std::strcmp(cap, "neon-i8mm") == 0) k = &t.neon_mm;
        else return nullptr;
    }
    g_active.store(k, std::memory_order_release);
    return k->isa;
}

}  // namespace wren
