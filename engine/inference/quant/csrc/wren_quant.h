// Wren's GGUF block formats: the type table, exact dequantization and the 8-bit dot
// kernels qlinear runs for a few rows of activations. No torch in here: the kernel files
// are plain C++ so each instruction set can be compiled with its own target attribute
// without touching torch's inline code.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <cstring>
#include <string>

namespace wren {

enum QType : int {
    F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8,
    Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, BF16 = 30, MXFP4 = 39,
    // Wren's own layouts, not GGUF types: a file type's rows interleaved in groups (repack.cpp)
    Q4_0_X8 = 40, Q4_K_X8 = 41, Q4_1_X8 = 42, Q6_K_X8 = 43,
};
constexpr int kMaxType = 44;

struct TypeInfo {
    const char* name;
    int block;      // weights per block
    int type_size;  // bytes per block
    bool kquant;    // activations quantized per 256 (Q8K) rather than per 32 (Q8)
    bool is_float;  // F32/F16/BF16: no activation quantization
    int base = -1;       // an interleaved layout: the file type its rows hold
    int interleave = 1;  // rows per group (the row count must be a multiple)
};

// nullptr for a type Wren does not run.
const TypeInfo* type_info(int qtype);

// Environment variable `name`, trimmed and in lower case ("" when unset), and whether it holds
// one of kernels.py's off values (off, 0, false, no) or on values (on, 1, true, yes): the
// kernels' WREN_ switches read as the Python side reads them (repack.cpp).
std::string env_setting(const char* name);
bool env_off(const char* name);
bool env_on(const char* name);

// Activations quantized to 8 bits: the legacy types pair with 32-value blocks, the
// k-quants with 256-value blocks carrying the sum of each 16.
struct BlockQ8 {
    float d;
    int32_t sum;  // sum of qs
    int8_t qs[32];
};
struct BlockQ8K {
    float d;
    int16_t bsums[16];
    int8_t qs[256];
};
// Activations rounded to 16 bits per 32 values (qlinear_wide against Q8_0 heads): x ~ d * q,
// q = round_even(x * (32767 / amax)), ties to even, the same in every table.
struct BlockX16 {
    float d;
    int16_t qs[32];
};
// Activations rounded to 15 bits per 256 values (qlinear_wide against Q6_K heads): x ~ d * q,
// q = round_even(x * (16383 / amax)), stored split as q = 128 * hi + lo (hi in -128..127,
// lo in 0..127) so each half meets the unsigned 6-bit weights in one u8 x s8 multiply, and
// the 16-value sums of hi and lo for the weights' zero point. 608 bytes, a multiple of 32.
struct BlockX15K {
    int8_t hi[256];
    int8_t lo[256];
    int16_t hsum[16];
    int16_t lsum[16];
    float d;
    float pad[7];
};

// Exact dequantization of one row of `cols` weights (equal bit for bit to gguf's numpy).
void dequantize_row(int qtype, const uint8_t* src, float* dst, int64_t cols);


// One weight row against one quantized activation row: nb blocks.
using QDotFn = float (*)(const uint8_t* w, int64_t nb, const void* xq);
// One weight row against n quantized activation rows xs bytes apart; out[j * os] = dot j.
using QDotRowsFn = void (*)(const uint8_t* w, int64_t nb, const void* xq, int64_t xs, int n, float* out, int64_t os);
// nrows weight rows (row_bytes apart) against one quantized activation row; out[r] = dot r.
using QDotWRowsFn = void (*)(const uint8_t* w, int64_t row_bytes, int nrows, int64_t nb, const void* xq, float* out);
// One float-type weight row (F32/F16/BF16) against one float activation row.
using FDotFn = float (*)(const uint8_t* w, int64_t cols, const float* x);
// One block-type weight row (nb blocks) against n float32 activation rows xs floats apart,
// never rounding x: each block is dequantized exactly (the file's values) and multiplied in
// float32; out[j * os] = dot j.
using XDotRowsFn = void (*)(const uint8_t* w, int64_t nb, const float* x, int64_t xs, int n, float* out, int64_t os);

// One weight row (nb of its blocks) against n rows of wide activations (the type's
// wide_bytes per weight block: BlockX16 or BlockX15K) xs bytes apart; out[j * os] = dot j.
// The products are summed in integers, then scaled in float: every table does the same
// float operations in the same order.
using X16DotRowsFn = void (*)(const uint8_t* w, int64_t nb, const void* x, int64_t xs, int n, float* out,
                              int64_t os);

using QuantFn = void (*)(const float* x, int64_t cols, void* out);
// One group of an interleaved layout (its rows' blocks side by side) against n quantized
// activation rows xs bytes apart; out[j * os + r] = dot of the group's row r with row j.
using QDotGroupFn = void (*)(const uint8_t* g, int64_t nb, const void* xq, int64_t xs, int n, float* out, int64_t os);
// Two weight rows (row_bytes apart, nb blocks each) against n quantized activation rows xs
// bytes apart; out[j * os + r] = dot of weight row r (0, 1) with activation row j, each the
// table's qdot of that pair bit for bit.
using QDotPairFn = void (*)(const uint8_t* w, int64_t row_bytes, int64_t nb, const void* xq, int64_t xs, int n,
                           float* out, int64_t os);

struct Kernels {
    const char* isa;
    QDotFn qdot[kMaxType];
    FDotFn fdot[kMaxType];
    QDotRowsFn qdot_rows[kMaxType];  // optional: several activation rows per weight pass
    QDotWRowsFn qdot_wrows[kMaxType];  // optional: several weight rows per activation pass (one x row)
    XDotRowsFn xdot_rows[kMaxType];  // float activations (qlinear_exact); every block type filled
    // Activation quantization for each weight type, into the table's own block layout
    // (act_bytes per weight block). Every implementation rounds the same way
    // (x * (127 / amax), half to even), so the values are identical whichever table runs.
    QuantFn quant[kMaxType];
    int act_bytes[kMaxType];
    QDotGroupFn qdot_group[kMaxType];  // the interleaved layouts: every table fills them
    // optional: two consecutive groups (2 * interleave rows) in one pass, each group's bits
    // those of qdot_group (the AVX-512 table's 512-bit registers hold 16 rows)
    QDotGroupFn qdot_group2[kMaxType];
    // Wide activations (qlinear_wide): the types that have them (else nullptr: exact float
    // instead), the rounding of x into their blocks (Q8_0: BlockX16 per 32 values; Q6_K:
    // BlockX15K per 256) and its bytes per weight block.
    X16DotRowsFn x16dot_rows[kMaxType];
    QuantFn quant_wide[kMaxType];
    int wide_bytes[kMaxType];
    // optional (the i8mm table): two weight rows x several activation rows a pass, for the
    // prompt path's types without an interleaved layout
    QDotPairFn qdot_pair[kMaxType];
};

// Groups of an interleaved layout: rows [r0, r1) (whole groups of `il` rows, row_bytes
// each, from w) against n quantized activation rows xs bytes apart, into out[j * ld + r];
// two groups a pass where the table has qdot_group2 and at least kPairRows rows of x meet
// them, unless WREN_GROUP_PAIRS=off (read once; the same bits either way, for A/B
// measurements). Fewer rows of x (decoding) stream each weight from memory once, and there
// the pair kernel read a 47 MB Q4_K weight at 10 GB/s against one group's 24 (one thread,
// AMD EPYC Zen 4; from the L3 it was the faster at every row count).
constexpr int kPairRows = 8;
inline void group_span(const Kernels& k, int qtype, const uint8_t* w, int64_t row_bytes, int64_t il, int64_t r0,
                       int64_t r1, int64_t nb, const void* x, int64_t xs, int n, float* out, int64_t ld) {
    static const bool pairs = !env_off("WREN_GROUP_PAIRS");
    int64_t r = r0;
    if (const QDotGroupFn two = pairs && n >= kPairRows ? k.qdot_group2[qtype] : nullptr)
        for (; r + 2 * il <= r1; r += 2 * il) two(w + r * row_bytes, nb, x, xs, n, out + r, ld);
    for (; r < r1; r += il) k.qdot_group[qtype](w + r * row_bytes, nb, x, xs, n, out + r, ld);
}

// Interleaved layouts (repack.cpp). A group is `interleave` consecutive rows, which keep
// their bytes' place in memory: group g is bytes [g * interleave * row_bytes, ...) before
// and after. Q4_0_X8, block b of a group at b * 144: the 8 rows' fp16 scales (16 bytes),
// then 4 chunks of 32 bytes, chunk c holding each row's quant bytes 4c..4c+3 (row r at
// 4r): one load is 8 rows x 8 weights, each row in its own 32-bit lane. Q4_1_X8 is the
// same with the 8 rows' minimums (16 bytes) after the scales, block b at b * 160. Q4_K_X8,
// super-block s of a group at s * 1152: the 8 rows' d (16 bytes), dmin (16), the 6-bit
// scales and minimums decoded (64 bytes: sub-block b's row r at 8b + r, its scale's low
// 4 bits | its minimum's low 4 bits << 4; 32 bytes: sub-block b's row r in bits 4r..4r+3 of
// the 32-bit word at 4b, scale >> 4 | (minimum >> 4) << 2), then 32 chunks of 32 bytes,
// chunk 8j + k holding each row's quant bytes 32j + 4k..32j + 4k + 3 (row r at 4r).
// Q6_K_X8, super-block s of a group at s * 1680: the 8 rows' d (16 bytes), the int8 scales
// (128 bytes: row r's scales of 16-weight groups 2i and 2i + 1 at 16i + 2r, one int16 pair a
// lane), then the low nibbles ql as 32 chunks of 32 bytes (chunk 8j + k holding each row's ql
// bytes 32j + 4k..32j + 4k + 3, row r at 4r), then the high bits qh as 16 such chunks.
void repack_group(int qtype, const uint8_t* src, int64_t row_bytes, uint8_t* dst);  // file rows -> one group

// Row r's 6-bit scale and minimum of sub-block b in a Q4_K_X8 super-block `o`.
static inline void q4_k_x8_scale_min(const uint8_t* o, int b, int r, int* sc, int* m) {
    const int lo = o[32 + 8 * b + r], hi = (o[96 + 4 * b + r / 2] >> (4 * (r & 1))) & 15;
    *sc = (lo & 15) | ((hi & 3) << 4);
    *m = (lo >> 4) | ((hi >> 2) << 4);
}
void unpack_group(int qtype, const uint8_t* src, int64_t row_bytes, uint8_t* dst);  // one group -> file rows
// Rows [r0, r1) of a weight of type qtype (row_bytes each from w; whole groups where the type
// is interleaved, each put back into the file's rows first) against n float32 activation
// rows xs floats apart, never rounded: qlinear_exact's products (the base type's xdot_rows),
// into out[j * ld + r] (ops.cpp).
void exact_rows(const Kernels& k, int qtype, const uint8_t* w, int64_t row_bytes, int64_t r0, int64_t r1,
                int64_t nb, const float* x, int64_t xs, int n, float* out, int64_t ld);
// The interleaved layout table k has group kernels for, for file type qtype, or -1: none, or
// WREN_REPACK leaves it out ("off": every type; "-q6_k" or "-q6_k,-q4_k": those file types).
int interleaved_layout(const Kernels& k, int qtype);

// MXFP4 (mxfp4.cpp): exact dequantization of a row, each e8m0 scale byte's halved value
// 2^(e - 128) (a table, as gguf builds it), and its kernels put into a table already filled
// for k.isa (after the fill_* below).
void dequantize_mxfp4_row(const uint8_t* src, float* dst, int64_t cols);
extern float g_mxfp4_scale[256];
void fill_mxfp4(Kernels& k);

// Portable reference kernels; every entry filled.
void fill_scalar(Kernels& k);
// Each returns false (and leaves k alone) when built for another architecture.
bool fill_avx2(Kernels& k);
bool fill_avx512vnni(Kernels& k);
bool fill_avxvnni(Kernels& k);  // AVX-VNNI: the VEX-encoded vpdpbusd, without AVX-512
bool fill_neon(Kernels& k);  // and fill_neon_dotprod, fill_neon_i8mm (qdot_scalar.cpp declares them)

// The table in use: the best for this CPU, chosen at load from its flags (the environment
// variable WREN_ISA=scalar|avx2|avx-vnni|avx512-vnni|neon|neon-dotprod|neon-i8mm caps it);
// select_isa switches it (for tests).
const Kernels& kernels();
// Switches to the best table not above `cap` ("" for the best); returns the name of the
// table chosen (which may be lower than the cap on this CPU), nullptr for an unknown cap.
const char* select_isa(const char* cap);

// float value of every fp16 bit pattern (exact, from fp16_to_fp32): one load per scale.
extern float g_fp16_table[65536];

// Read-only streaming sum over a buffer (for the bandwidth figure in bench/qmatmul.py).
uint64_t read_sum(const uint8_t* p, int64_t n);

// Round to nearest, ties to even, for |v| < 2^22: adding and subtracting 1.5 * 2^23 (IEEE
// arithmetic, which the build keeps: no -ffast-math) is what the SIMD rounding gives too.
static inline float round_even(float v) {
    const float c = 12582912.f;
    return (v + c) - c;
}

// IEEE half -> float, exact for every input (NaN payloads kept, as numpy does). Branch
// free but for selects, so loops over it vectorize: the exponent is rebiased in integers and
// a subnormal is renormalized by one exact float subtraction.
static inline float fp16_to_fp32(uint16_t h) {
    const uint32_t shifted = (uint32_t)(h & 0x7fffu) << 13;
    const uint32_t exp = shifted & 0x0f800000u;
    uint32_t o = shifted + 0x38000000u;  // exponent bias 15 -> 127
    o += exp == 0x0f800000u ? 0x38000000u : 0u;  // Inf/NaN: exponent 255
    float f;
    const uint32_t sub = o + 0x00800000u;  // zero/subnormal: 2^-14 * (1 + m/1024) - 2^-14
    std::memcpy(&f, &sub, 4);
    f -= 6.103515625e-05f;
    uint32_t renorm;
    std::memcpy(&renorm, &f, 4);
    o = exp == 0 ? renorm : o;
    o |= (uint32_t)(h & 0x8000u) << 16;
    float out;
    std::memcpy(&out, &o, 4);
    return out;
}

static inline float bf16_to_fp32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float out;
    std::memcpy(&out, &bits, 4);
    return out;
}

static inline uint16_t load_u16(const uint8_t* p) {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return v;
}
static inline uint32_t load_u32(const uint8_t* p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
}

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K super-block.
static inline void kscale_min(const uint8_t* s, int j, uint8_t* sc, uint8_t* m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (uint8_t)((s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4));
        *m = (uint8_t)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

// The 16 signed 6-bit scales of a Q3_K super-block.
static inline void q3k_scales(const uint8_t* s, int8_t* out) {
    for (int i = 0; i < 16; ++i) {
        int lo = i < 8 ? (s[i] & 0x0f) : (s[i - 8] >> 4);
        int hi = (s[8 + (i & 3)] >> (2 * (i >> 2))) & 3;
        out[i] = (int8_t)((lo | (hi << 4)) - 32);
    }
}

}  // namespace wren
