// The integer prompt path: many rows of x (a prompt chunk) against block weights. x is
// quantized once per activation format (the decoding kernels' 8-bit blocks, in parallel over
// the tokens), then every weight row is multiplied by the table's register-blocked kernels
// (qdot_group: 8 rows x 2 tokens per pass; qdot_rows: 1 row x 4 tokens), so each weight
// block is decoded once per few tokens instead of once per token. Cache blocking: a task
// is a slice of rows of about kTaskBytes of weight, which stays in L2 while it meets the
// tokens kTokenBytes of quantized activations at a time.
#include "qgemm.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace wren {
namespace {

constexpr int64_t kTaskBytes = int64_t(96) << 10;   // weight bytes per task (kept in L2)
constexpr int64_t kTokenBytes = int64_t(256) << 10;  // quantized activation bytes per pass

// Rows [r0, r1) of part p against tokens [t0, t1).
void tile(const Kernels& k, const GemmPart& p, const uint8_t* xq, int64_t xs, int64_t nb, int64_t t0, int64_t t1,
          int64_t r0, int64_t r1, float* out, int64_t ld) {
    const int n = (int)(t1 - t0);
    const uint8_t* x = xq + t0 * xs;
    float* o = out + t0 * ld + p.col0;
    if (p.info->interleave > 1) {
        group_span(k, p.qtype, p.w, p.row_bytes, p.info->interleave, r0, r1, nb, x, xs, n, o, ld);
        return;
    }
    const QDotRowsFn rows = k.qdot_rows[p.qtype];
    if (rows != nullptr) {
        for (int64_t r = r0; r < r1; ++r) rows(p.w + r * p.row_bytes, nb, x, xs, n, o + r, ld);
        return;
    }
    const QDotFn dot = k.qdot[p.qtype];
    for (int64_t r = r0; r < r1; ++r)
        for (int j = 0; j < n; ++j) o[j * ld + r] = dot(p.w + r * p.row_bytes, nb, x + j * xs);
}

struct Task {
    int part;
    int64_t r0, r1;
};

std::vector<Task> tasks_for(const std::vector<GemmPart>& parts) {
    std::vector<Task> tasks;
    for (size_t i = 0; i < parts.size(); ++i) {
        const GemmPart& p = parts[i];
        const int64_t il = p.info->interleave;
        const int64_t step = std::max<int64_t>(1, kTaskBytes / (p.row_bytes * il)) * il;
        for (int64_t r = 0; r < p.rows; r += step) tasks.push_back({(int)i, r, std::min(p.rows, r + step)});
    }
    return tasks;
}

void quantize_rows(const Kernels& k, int qtype, const float* x, int64_t n, int64_t cols, uint8_t* xq, int64_t xs) {
    const QuantFn fn = k.quant[qtype];
    at::parallel_for(0, n, std::max<int64_t>(1, (int64_t(1) << 14) / cols), [&](int64_t b, int64_t e) {
        for (int64_t j = b; j < e; ++j) fn(x + j * cols, cols, xq + j * xs);
    });
}

void run_tasks(const Kernels& k, const std::vector<GemmPart>& parts, int64_t n, int64_t cols, float* out, int64_t ld) {
    const std::vector<Task> tasks = tasks_for(parts);
    at::parallel_for(0, (int64_t)tasks.size(), 1, [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t) {
            const GemmPart& p = parts[tasks[t].part];
            const int64_t nb = cols / p.info->block;
            const int64_t step = std::max<int64_t>(4, kTokenBytes / p.xs / 4 * 4);
            for (int64_t t0 = 0; t0 < n; t0 += step)
                tile(k, p, p.xq, p.xs, nb, t0, std::min(n, t0 + step), tasks[t].r0, tasks[t].r1, out, ld);
        }
    });
}

}  // namespace

bool qgemm_supports(const Kernels& k, int qtype) {
    const TypeInfo* info = type_info(qtype);
    if (info == nullptr || info->is_float || k.quant[qtype] == nullptr || k.act_bytes[qtype] <= 0) return false;
    if (info->interleave > 1) return k.qdot_group[qtype] != nullptr;
    // Elsewhere only with several tokens per weight pass: on x86 one dot per row and token
    // (Q2_K, Q3_K) is slower than the float GEMM on dequantized tiles (measured). The scalar
    // table, the portable reference the others are tested against, takes every type.
    return k.qdot_rows[qtype] != nullptr || (k.qdot[qtype] != nullptr && std::strcmp(k.isa, "scalar") == 0);
}

void qgemm(const Kernels& k, std::vector<GemmPart>& parts, const float* x, int64_t n, int64_t cols, float* out,
           int64_t ld) {
    // one buffer region per distinct quantizer: the parts of one format (all k-quants) share it
    struct Format { QuantFn fn; int qtype; int64_t xs; int64_t offset; };
    std::vector<Format> formats;
    std::vector<int> which(parts.size(), -1);
    int64_t need = 0;
    for (size_t i = 0; i < parts.size(); ++i) {
        const int qtype = parts[i].qtype;
        const int64_t xs = cols / parts[i].info->block * (int64_t)k.act_bytes[qtype];
        for (size_t f = 0; f < formats.size() && which[i] < 0; ++f)
            if (formats[f].fn == k.quant[qtype] && formats[f].xs == xs) which[i] = (int)f;
        if (which[i] < 0) {
            which[i] = (int)formats.size();
            formats.push_back({k.quant[qtype], qtype, xs, need});
            need += xs * n;
        }
    }
    std::vector<uint8_t> buf((size_t)need);
    for (const Format& f : formats) quantize_rows(k, f.qtype, x, n, cols, buf.data() + f.offset, f.xs);
    for (size_t i = 0; i < parts.size(); ++i) {
        parts[i].xq = buf.data() + formats[which[i]].offset;
        parts[i].xs = formats[which[i]].xs;
    }
    run_tasks(k, parts, n, cols, out, ld);
}

}  // namespace wren
