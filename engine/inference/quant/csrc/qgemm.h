// The integer prompt path (qgemm.cpp): a prompt chunk's activations quantized once, then
// cache-blocked, multi-threaded integer products with every weight row.
#pragma once

#include <cstdint>
#include <vector>

#include "wren_quant.h"

namespace wren {

// One weight (or one part of a fused one) and the activations quantized for its type.
struct GemmPart {
    const TypeInfo* info;
    int qtype;
    const uint8_t* w;
    int64_t row_bytes, rows;
    int64_t col0;       // its first output column
    const uint8_t* xq;  // x quantized for its type, n rows xs bytes apart
    int64_t xs;
};

// Whether the table has the integer prompt path's kernels for qtype: a block type with its
// activation quantizer and a kernel that takes several tokens per weight pass (qdot_group,
// qdot_rows). Float types and the others: false (the float GEMM on dequantized tiles).
bool qgemm_supports(const Kernels& k, int qtype);
// out[j * ld + col0 + r] = row r of each part . row j of x (n rows of cols floats), for
// block-type parts: x quantized once per activation format, each part's xq and xs set.
void qgemm(const Kernels& k, std::vector<GemmPart>& parts, const float* x, int64_t n, int64_t cols, float* out,
           int64_t ld);

}  // namespace wren
