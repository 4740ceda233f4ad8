// Exact dequantization of GGUF blocks and the type table. The float operations follow
// gguf's numpy reference one by one (e.g. Q4_K is (d*sc)*q - dmin*m, never fused):
// this file is built with -ffp-contract=off so no multiply-add gets contracted.
#include "wren_quant.h"

namespace wren {

namespace {
const TypeInfo kTypes[kMaxType] = {
    /* 0 */ {"F32", 1, 4, false, true},
    /* 1 */ {"F16", 1, 2, false, true},
    /* 2 */ {"Q4_0", 32, 18, false, false},
    /* 3 */ {"Q4_1", 32, 20, false, false},
    {nullptr, 0, 0, false, false},
    {nullptr, 0, 0, false, false},
    /* 6 */ {"Q5_0", 32, 22, false, false},
    /* 7 */ {"Q5_1", 32, 24, false, false},
    /* 8 */ {"Q8_0", 32, 34, false, false},
    {nullptr, 0, 0, false, false},
    /* 10 */ {"Q2_K", 256, 84, true, false},
    /* 11 */ {"Q3_K", 256, 110, true, false},
    /* 12 */ {"Q4_K", 256, 144, true, false},
    /* 13 */ {"Q5_K", 256, 176, true, false},
    /* 14 */ {"Q6_K", 256, 210, true, false},
    {nullptr, 0, 0, false, false}, {nullptr, 0, 0, false, false}, {nullptr, 0, 0, false, false},
    {nullptr, 0, 0, false, false}, {nullptr, 0, 0, false, false}, {nullptr, 0, 0, false, false},
    {nullptr, 0, 0, false, false}, {nullptr, 0, 0, false, false}, {nullptr, 0, 0, false, false},
    {nullptr, 0, 0, false, false}, {nullptr, 0, 0, false, false}, {nullptr, 0, 0, false, false},
    {nullptr, 0, 0, false, false}, {nullptr, 0, 0, false, false}, {nullptr, 0, 0, false, false},
    /* 30 */ {"BF16", 1, 2, false, true},
    {nullptr, 0, 0, false, false}, {nullptr, 0, 0, false, false}, {nullptr, 0, 0, false, false},
    {nullptr, 0, 0, false, false}, {nullptr, 0, 0, false, false}, {nullptr, 0, 0, false, false},
    {nullptr, 0, 0, false, false}, {nullptr, 0, 0, false, false},
    /* 39 */ {"MXFP4", 32, 17, false, false},
    /* 40 */ {"Q4_0x8", 32, 18, false, false, Q4_0, 8},
    /* 41 */ {"Q4_Kx8", 256, 144, true, false, Q4_K, 8},
    /* 42 */ {"Q4_1x8", 32, 20, false, false, Q4_1, 8},
    /* 43 */ {"Q6_Kx8", 256, 210, true, false, Q6_K, 8},
};

void deq_q4_0(const uint8_t* b, float* y) {
    const float d = fp16_to_fp32(load_u16(b));
    const uint8_t* qs = b + 2;
    for (int j = 0; j < 16; ++j) {
        y[j] = d * (float)((qs[j] & 0x0f) - 8);
        y[j + 16] = d * (float)((qs[j] >> 4) - 8);
    }
}

void deq_q4_1(const uint8_t* b, float* y) {
    const float d = fp16_to_fp32(load_u16(b));
    const float m = fp16_to_fp32(load_u16(b + 2));
    const uint8_t* qs = b + 4;
    for (int j = 0; j < 16; ++j) {
        y[j] = d * (float)(qs[j] & 0x0f) + m;
        y[j + 16] = d * (float)(qs[j] >> 4) + m;
    }
}

void deq_q5_0(const uint8_t* b, float* y) {
    const float d = fp16_to_fp32(load_u16(b));
    const uint32_t qh = load_u32(b + 2);
    const uint8_t* qs = b + 6;
    for (int j = 0; j < 16; ++j) {
        int lo = (qs[j] & 0x0f) | (((qh >> j) & 1) << 4);
        int hi = (qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
        y[j] = d * (float)(lo - 16);
        y[j + 16] = d * (float)(hi - 16);
    }
}

void deq_q5_1(const uint8_t* b, float* y) {
    const float d = fp16_to_fp32(load_u16(b));
    const float m = fp16_to_fp32(load_u16(b + 2));
    const uint32_t qh = load_u32(b + 4);
    const uint8_t* qs = b + 8;
    for (int j = 0; j < 16; ++j) {
        int lo = (qs[j] & 0x0f) | (((qh >> j) & 1) << 4);
        int hi = (qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
        y[j] = d * (float)lo + m;
        y[j + 16] = d * (float)hi + m;
    }
}

void deq_q8_0(const uint8_t* b, float* y) {
    const float d = fp16_to_fp32(load_u16(b));
    const int8_t* qs = (const int8_t*)(b + 2);
    for (int j = 0; j < 32; ++j) y[j] = (float)qs[j] * d;
}

// The k-quants below walk the blocks in storage order (h: 128-value half, s: 2-bit plane,
// l: byte) so the inner loops vectorize; each value is still scale * q (- min) as in gguf.
void deq_q2_k(const uint8_t* b, float* y) {
    const uint8_t* sc = b;
    const uint8_t* qs = b + 16;
    const float d = fp16_to_fp32(load_u16(b + 80));
    const float dmin = fp16_to_fp32(load_u16(b + 82));
    float dl[16], ml[16];
    for (int i = 0; i < 16; ++i) {
        dl[i] = d * (float)(sc[i] & 0x0f);
        ml[i] = dmin * (float)(sc[i] >> 4);
    }
    for (int h = 0; h < 2; ++h)
        for (int s = 0; s < 4; ++s)
            for (int half = 0; half < 2; ++half) {
                const int g = 8 * h + 2 * s + half;
                const float a = dl[g], m = ml[g];
                float* out = y + 16 * g;
                const uint8_t* q = qs + 32 * h + 16 * half;
                for (int l = 0; l < 16; ++l) out[l] = a * (float)((q[l] >> (2 * s)) & 3) - m;
            }
}

void deq_q3_k(const uint8_t* b, float* y) {
    const uint8_t* hm = b;
    const uint8_t* qs = b + 32;
    const float d = fp16_to_fp32(load_u16(b + 108));
    int8_t scales[16];
    q3k_scales(b + 96, scales);
    for (int h = 0; h < 2; ++h)
        for (int s = 0; s < 4; ++s)
            for (int half = 0; half < 2; ++half) {
                const int g = 8 * h + 2 * s + half;
                const float a = d * (float)scales[g];
                float* out = y + 16 * g;
                const uint8_t* q = qs + 32 * h + 16 * half;
                const uint8_t* m = hm + 16 * half;
                for (int l = 0; l < 16; ++l) {
                    const int v = ((q[l] >> (2 * s)) & 3) - 4 * (1 - ((m[l] >> (4 * h + s)) & 1));
                    out[l] = a * (float)v;
                }
            }
}

// Q4_K and Q5_K share the scale/min layout; Q5_K adds a fifth bit per value from qh.
template <bool FIVE>
void deq_q45_k(const uint8_t* b, float* y) {
    const float d = fp16_to_fp32(load_u16(b));
    const float dmin = fp16_to_fp32(load_u16(b + 2));
    const uint8_t* qh = b + 16;
    const uint8_t* qs = b + (FIVE ? 48 : 16);
    for (int j = 0; j < 8; ++j) {
        uint8_t sc, m;
        kscale_min(b + 4, j, &sc, &m);
        const float dl = d * (float)sc;
        const float ml = dmin * (float)m;
        const uint8_t* q = qs + 32 * (j >> 1);
        const int shift = 4 * (j & 1);
        for (int l = 0; l < 32; ++l) {
            int v = (q[l] >> shift) & 0x0f;
            if (FIVE) v |= ((qh[l] >> j) & 1) << 4;
            y[32 * j + l] = dl * (float)v - ml;
        }
    }
}

void deq_q6_k(const uint8_t* b, float* y) {
    const int8_t* sc = (const int8_t*)(b + 192);
    const float d = fp16_to_fp32(load_u16(b + 208));
    for (int h = 0; h < 2; ++h) {
        const uint8_t* ql = b + 64 * h;
        const uint8_t* qh = b + 128 + 32 * h;
        for (int s = 0; s < 4; ++s)  // value 128h + 32s + l: nibble s/2 of ql[32(s%2) + l], bits 2s of qh[l]
            for (int half = 0; half < 2; ++half) {
                const int g = 8 * h + 2 * s + half;
                const float a = d * (float)sc[g];
                float* out = y + 16 * g;
                const uint8_t* lo = ql + 32 * (s & 1) + 16 * half;
                const uint8_t* hi = qh + 16 * half;
                for (int l = 0; l < 16; ++l) {
                    const int v = ((lo[l] >> (4 * (s >> 1))) & 0x0f) | (((hi[l] >> (2 * s)) & 3) << 4);
                    out[l] = a * (float)(v - 32);
                }
            }
    }
}

template <void (*F)(const uint8_t*, float*), int BLOCK, int SIZE>
void deq_blocks(const uint8_t* src, float* dst, int64_t cols) {
    for (int64_t b = 0; b < cols / BLOCK; ++b) F(src + b * SIZE, dst + b * BLOCK);
}
}  // namespace

float g_fp16_table[65536];

namespace {
struct Fp16TableInit {
    Fp16TableInit() {
        for (uint32_t h = 0; h < 65536; ++h) g_fp16_table[h] = fp16_to_fp32((uint16_t)h);
    }
} fp16_table_init;
}  // namespace

const TypeInfo* type_info(int qtype) {
    if (qtype < 0 || qtype >= kMaxType || kTypes[qtype].name == nullptr) return nullptr;
    return &kTypes[qtype];
}

void dequantize_row(int qtype, const uint8_t* src, float* dst, int64_t cols) {
    switch (qtype) {
        case F32: std::memcpy(dst, src, (size_t)cols * 4); break;
        case F16:
            for (int64_t i = 0; i < cols; ++i) dst[i] = fp16_to_fp32(load_u16(src + 2 * i));
            break;
        case BF16:
            for (int64_t i = 0; i < cols; ++i) dst[i] = bf16_to_fp32(load_u16(src + 2 * i));
            break;
        case Q4_0: deq_blocks<deq_q4_0, 32, 18>(src, dst, cols); break;
        case Q4_1: deq_blocks<deq_q4_1, 32, 20>(src, dst, cols); break;
        case Q5_0: deq_blocks<deq_q5_0, 32, 22>(src, dst, cols); break;
        case Q5_1: deq_blocks<deq_q5_1, 32, 24>(src, dst, cols); break;
        case Q8_0: deq_blocks<deq_q8_0, 32, 34>(src, dst, cols); break;
        case Q2_K: deq_blocks<deq_q2_k, 256, 84>(src, dst, cols); break;
        case Q3_K: deq_blocks<deq_q3_k, 256, 110>(src, dst, cols); break;
        case Q4_K: deq_blocks<deq_q45_k<false>, 256, 144>(src, dst, cols); break;
        case Q5_K: deq_blocks<deq_q45_k<true>, 256, 176>(src, dst, cols); break;
        case Q6_K: deq_blocks<deq_q6_k, 256, 210>(src, dst, cols); break;
        case MXFP4: dequantize_mxfp4_row(src, dst, cols); break;
        default: break;
    }
}

uint64_t read_sum(const uint8_t* p, int64_t n) {
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        uint64_t a, b, c, d;
        std::memcpy(&a, p + i, 8);
        std::memcpy(&b, p + i + 8, 8);
        std::memcpy(&c, p + i + 16, 8);
        std::memcpy(&d, p + i + 24, 8);
        s0 += a; s1 += b; s2 += c; s3 += d;
    }
    for (; i < n; ++i) s0 += p[i];
    return s0 + s1 + s2 + s3;
}

}  // namespace wren
