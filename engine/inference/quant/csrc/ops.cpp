// torch ops over GGUF block weights: wren::dequantize, wren::qlinear and
// wren::qlinear_exact (CPU), a few helpers for tests and benchmarks, and the (empty) Python
// module engine.inference.quant._C whose import registers them. Only the torch headers these
// need: torch/extension.h (all of torch's C++ API and pybind11) would triple the compile
// time of this file.
#include <Python.h>

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/mm.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "qgemm.h"
#include "wren_quant.h"

namespace {

// qlinear quantizes the activations and runs integer dot products for up to this many
// rows; more rows (a prompt) dequantize weight tiles into torch's GEMM. Measured with
// bench/qmatmul.py --crossover and a 2048 x 2048 weight, 2 threads, AVX2: at 32 rows the
// dots take 1.7 ms (Q4_0, repacked) to 5.4 ms (Q8_0) against 7.8 and 8.3 for the tiles; at
// 64 the row-by-row types (Q6_K, Q8_0) lose, the repacked 4-bit ones still win.
std::atomic<int64_t> g_max_gemv_rows{[] {
    const char* v = std::getenv("WREN_QLINEAR_GEMV_ROWS");
    return v ? std::max<int64_t>(0, std::atoll(v)) : int64_t(32);
}()};
// Whether a prompt's rows (more than g_max_gemv_rows, x not kept exact) take the integer
// GEMM (qgemm.cpp) rather than dequantized tiles in torch's float GEMM. WREN_PROMPT_GEMM=float
// keeps the float one (for A/B measurements).
std::atomic<bool> g_int_prompt{[] {
    const char* v = std::getenv("WREN_PROMPT_GEMM");
    return !(v && std::string(v) == "float");
}()};
// Bytes of float32 weight per dequantized tile on the GEMM path.
constexpr int64_t kTileBytes = int64_t(4) << 20;

const wren::TypeInfo& checked_type(int64_t qtype) {
    const wren::TypeInfo* info = wren::type_info((int)qtype);
    TORCH_CHECK(info != nullptr, "wren: GGML type ", qtype, " is not one Wren runs (F32, F16, BF16, Q4_0, Q4_1, "
                "Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K)");
    return *info;
}

void check_raw(const at::Tensor& raw, const wren::TypeInfo& info, int64_t cols, const char* op) {
    TORCH_CHECK(raw.device().is_cpu(), "wren::", op, ": raw weight bytes must be on the CPU, got ", raw.device());
    TORCH_CHECK(raw.scalar_type() == at::kByte, "wren::", op, ": raw must be uint8 bytes, got ", raw.scalar_type());
    TORCH_CHECK(raw.dim() == 2, "wren::", op, ": raw must be [rows, row_bytes], got ", raw.sizes());
    TORCH_CHECK(cols > 0 && cols % info.block == 0, "wren::", op, ": ", info.name, " needs cols a multiple of ",
                info.block, ", got ", cols);
    const int64_t row_bytes = cols / info.block * info.type_size;
    TORCH_CHECK(raw.size(1) == row_bytes, "wren::", op, ": ", info.name, " rows of ", cols, " weights take ",
                row_bytes, " bytes, but raw has ", raw.size(1));
    TORCH_CHECK(raw.size(0) % info.interleave == 0, "wren::", op, ": ", info.name, " holds rows in groups of ",
                info.interleave, ", got ", raw.size(0), " rows");
}

int64_t grain_rows(int64_t rows, int64_t work_per_row) {
    // at least ~64K weight bytes per task so small matrices don't pay for threads
    const int64_t min_rows = std::max<int64_t>(1, (int64_t(1) << 16) / std::max<int64_t>(1, work_per_row));
    return std::min(rows, min_rows);
}

// A group of an interleaved layout back in the file's row layout, in a per-thread buffer.
const uint8_t* unpacked(const wren::TypeInfo& info, int qtype, const uint8_t* group, int64_t row_bytes) {
    thread_local std::vector<uint8_t> buf;
    const size_t bytes = (size_t)(info.interleave * row_bytes);
    if (buf.size() < bytes) buf.resize(bytes);
    wren::unpack_group(qtype, group, row_bytes, buf.data());
    return buf.data();
}

}  // namespace

namespace wren {
// A slice of rows (one group where the type is interleaved, else about kExactSliceBytes of
// weights, which stay in L2) meets the activation rows kExactTokens at a time: those rows'
// floats are read from L1 by each row of the slice. One row at a time against all of them
// read them from L2 for every row (16 rows of 2,048 floats are 128 KB; L1 holds 32-48 KB).
// Each (row, activation row) product is the same whichever others share its pass.
constexpr int kExactTokens = 4;
constexpr int64_t kExactSliceBytes = int64_t(32) << 10;

void exact_rows(const Kernels& k, int qtype, const uint8_t* w, int64_t row_bytes, int64_t r0, int64_t r1,
                int64_t nb, const float* x, int64_t xs, int n, float* out, int64_t ld) {
    const TypeInfo& info = *type_info(qtype);
    const int64_t il = info.interleave;
    const XDotRowsFn fn = k.xdot_rows[il > 1 ? info.base : qtype];
    const int64_t slice = il > 1 ? il : std::max<int64_t>(1, kExactSliceBytes / row_bytes);
    for (int64_t s0 = r0; s0 < r1; s0 += slice) {
        const int64_t s1 = std::min(r1, s0 + slice);
        const uint8_t* rows = il > 1 ? unpacked(info, qtype, w + s0 * row_bytes, row_bytes) : w + s0 * row_bytes;
        for (int j0 = 0; j0 < n; j0 += kExactTokens) {
            const int nj = std::min(kExactTokens, n - j0);
            for (int64_t r = s0; r < s1; ++r)
                fn(rows + (r - s0) * row_bytes, nb, x + j0 * xs, xs, nj, out + j0 * ld + r, ld);
        }
    }
}
}  // namespace wren

namespace {

void dequantize_rows(int qtype, const uint8_t* src, int64_t row_bytes, float* dst, int64_t cols,
                     int64_t begin, int64_t end) {
    const wren::TypeInfo& info = *wren::type_info(qtype);
    if (info.interleave > 1) {  // begin and end are group boundaries (check_raw, the tiles)
        const int64_t il = info.interleave;
        at::parallel_for(begin / il, end / il, std::max<int64_t>(1, grain_rows(end - begin, row_bytes) / il),
                         [&](int64_t b, int64_t e) {
            for (int64_t g = b; g < e; ++g) {
                const uint8_t* rows = unpacked(info, qtype, src + g * il * row_bytes, row_bytes);
                for (int64_t r = 0; r < il; ++r)
                    wren::dequantize_row(info.base, rows + r * row_bytes, dst + (g * il + r - begin) * cols, cols);
            }
        });
        return;
    }
    at::parallel_for(begin, end, grain_rows(end - begin, row_bytes), [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) wren::dequantize_row(qtype, src + r * row_bytes, dst + (r - begin) * cols, cols);
    });
}

at::Tensor dequantize_cpu(const at::Tensor& raw_in, int64_t qtype, int64_t cols) {
    const wren::TypeInfo& info = checked_type(qtype);
    check_raw(raw_in, info, cols, "dequantize");
    const at::Tensor raw = raw_in.contiguous();
    const int64_t rows = raw.size(0);
    at::Tensor out = at::empty({rows, cols}, raw.options().dtype(at::kFloat));
    if (rows == 0) return out;
    dequantize_rows((int)qtype, raw.data_ptr<uint8_t>(), raw.size(1), out.data_ptr<float>(), cols, 0, rows);
    return out;
}

// Bytes of the quantized activations, reused by each thread's next call (no allocation per
// decoding step).
uint8_t* xq_buffer(size_t bytes) {
    thread_local std::vector<uint8_t> buf;
    if (buf.size() < bytes) buf.resize(bytes);
    return buf.data();
}

// x's n rows quantized for qtype's kernels, in the calling thread's buffer.
const uint8_t* quantized_x(const wren::Kernels& k, int qtype, const float* x, int64_t n, int64_t cols,
                           int64_t* xq_bytes) {
    const wren::TypeInfo& info = *wren::type_info(qtype);
    *xq_bytes = cols / info.block * (int64_t)k.act_bytes[qtype];
    uint8_t* xqp = xq_buffer((size_t)(*xq_bytes * n));
    for (int64_t j = 0; j < n; ++j) k.quant[qtype](x + j * cols, cols, xqp + j * *xq_bytes);
    return xqp;
}

// Groups [g0, g1) of an interleaved weight against n rows of x, into out[j * ld + r].
// Exact: each group unpacked to the file's rows and multiplied in float32 by the base
// type's kernel. Otherwise xq is x already quantized (the base type's format) and each
// group's rows come out of one kernel call.
void group_rows(const wren::TypeInfo& info, int qtype, const uint8_t* w, int64_t row_bytes, const float* x,
                int64_t n, int64_t cols, float* out, int64_t ld, bool exact, const uint8_t* xq, int64_t xq_bytes,
                int64_t g0, int64_t g1) {
    const wren::Kernels& k = wren::kernels();
    const int64_t il = info.interleave, nb = cols / info.block;
    if (exact)
        wren::exact_rows(k, qtype, w, row_bytes, g0 * il, g1 * il, nb, x, cols, (int)n, out, ld);
    else
        wren::group_span(k, qtype, w, row_bytes, il, g0 * il, g1 * il, nb, xq, xq_bytes, (int)n, out, ld);
}

void group_gemv(const wren::TypeInfo& info, int qtype, const uint8_t* w, int64_t row_bytes, int64_t rows,
                const float* x, int64_t n, int64_t cols, float* out, int64_t ld, bool exact, int64_t begin,
                int64_t end) {
    const wren::Kernels& k = wren::kernels();
    int64_t xq_bytes = 0;
    const uint8_t* xq = exact ? nullptr : quantized_x(k, qtype, x, n, cols, &xq_bytes);
    const int64_t il = info.interleave;
    const int64_t grain = std::max<int64_t>(1, grain_rows(rows, row_bytes * n) / il);
    at::parallel_for(begin / il, end / il, grain, [&](int64_t b, int64_t e) {
        group_rows(info, qtype, w, row_bytes, x, n, cols, out, ld, exact, xq, xq_bytes, b, e);
    });
}

void gemv_path(const wren::TypeInfo& info, int qtype, const uint8_t* w, int64_t row_bytes, int64_t rows,
               const float* x, int64_t n, int64_t cols, float* out, bool exact) {
    const wren::Kernels& k = wren::kernels();
    const int64_t grain = grain_rows(rows, row_bytes * n);
    if (info.is_float) {
        const wren::FDotFn fn = k.fdot[qtype];
        at::parallel_for(0, rows, grain, [&](int64_t b, int64_t e) {
            for (int64_t r = b; r < e; ++r)
                for (int64_t j = 0; j < n; ++j) out[j * rows + r] = fn(w + r * row_bytes, cols, x + j * cols);
        });
        return;
    }
    const int64_t nb = cols / info.block;
    if (info.interleave > 1) {
        group_gemv(info, qtype, w, row_bytes, rows, x, n, cols, out, rows, exact, 0, rows);
        return;
    }
    if (exact) {
        at::parallel_for(0, rows, grain, [&](int64_t b, int64_t e) {
            wren::exact_rows(k, qtype, w, row_bytes, b, e, nb, x, cols, (int)n, out, rows);
        });
        return;
    }
    int64_t xq_bytes = 0;
    const uint8_t* xqp = quantized_x(k, qtype, x, n, cols, &xq_bytes);
    const wren::QDotFn fn = k.qdot[qtype];
    const wren::QDotRowsFn fn_rows = k.qdot_rows[qtype];
    const wren::QDotWRowsFn fn_wrows = k.qdot_wrows[qtype];
    if (n == 1 && fn_wrows != nullptr) {
        at::parallel_for(0, rows, grain, [&](int64_t b, int64_t e) {
            fn_wrows(w + b * row_bytes, row_bytes, (int)(e - b), nb, xqp, out + b);
        });
        return;
    }
    at::parallel_for(0, rows, grain, [&](int64_t b, int64_t e) {
        if (n > 1 && fn_rows != nullptr) {
            for (int64_t r = b; r < e; ++r) fn_rows(w + r * row_bytes, nb, xqp, xq_bytes, (int)n, out + r, rows);
            return;
        }
        for (int64_t r = b; r < e; ++r)
            for (int64_t j = 0; j < n; ++j) out[j * rows + r] = fn(w + r * row_bytes, nb, xqp + j * xq_bytes);
    });
}

// qlinear_wide's decoding path: x rounded once into the type's wide blocks (Q8_0: 16 bits
// per 32 values; Q6_K: 15 bits per 256), then each thread's rows. False (nothing done) where
// the type has no such kernel.
bool wide_gemv(const wren::TypeInfo& info, int qtype, const uint8_t* w, int64_t row_bytes, int64_t rows,
               const float* x, int64_t n, int64_t cols, float* out) {
    const wren::Kernels& k = wren::kernels();
    const wren::X16DotRowsFn fn = k.x16dot_rows[qtype];
    if (fn == nullptr || k.quant_wide[qtype] == nullptr || cols % info.block != 0) return false;
    const int64_t nb = cols / info.block, xs = nb * k.wide_bytes[qtype];
    uint8_t* xq = (uint8_t*)xq_buffer((size_t)(xs * n));
    for (int64_t j = 0; j < n; ++j) k.quant_wide[qtype](x + j * cols, cols, xq + j * xs);
    at::parallel_for(0, rows, grain_rows(rows, row_bytes * n), [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) fn(w + r * row_bytes, nb, xq, xs, (int)n, out + r, rows);
    });
    return true;
}

void gemm_path(int qtype, const at::Tensor& raw, const at::Tensor& x, at::Tensor& out) {
    const int64_t rows = raw.size(0), cols = x.size(1);
    if (qtype == wren::F32) {
        const at::Tensor w = raw.view(at::kFloat);  // [rows, cols]
        at::mm_out(out, x, w.t());
        return;
    }
    int64_t tile = std::max<int64_t>(16, kTileBytes / (cols * 4));
    tile = std::min(rows, (tile + 15) / 16 * 16);
    at::Tensor buf = at::empty({tile, cols}, x.options());
    // GEMM into a contiguous block, then one copy into the strided columns of out: faster
    // than a GEMM writing the strided columns directly (measured)
    at::Tensor part = at::empty({x.size(0), tile}, x.options());
    const uint8_t* w = raw.data_ptr<uint8_t>();
    const int64_t row_bytes = raw.size(1);
    for (int64_t r0 = 0; r0 < rows; r0 += tile) {
        const int64_t tr = std::min(tile, rows - r0);
        dequantize_rows(qtype, w, row_bytes, buf.data_ptr<float>(), cols, r0, r0 + tr);
        if (tr == rows) {
            at::mm_out(out, x, buf.t());
        } else {
            at::Tensor dst = part.narrow(1, 0, tr);
            if (tr != tile) dst = at::empty({x.size(0), tr}, x.options());
            at::mm_out(dst, x, buf.narrow(0, 0, tr).t());
            out.narrow(1, r0, tr).copy_(dst);
        }
    }
}

// How qlinear's decoding path treats x: rounded to 8 bits per block (the type's activation
// format), never rounded (float32), or rounded to 16 bits per 32 values where the type has
// such a kernel (else float32). The prompt's GEMM path never rounds x.
enum class Act { Q8, Exact, Wide };

at::Tensor linear_impl(const at::Tensor& x_in, const at::Tensor& raw_in, int64_t qtype, int64_t rows, Act act) {
    const bool exact = act != Act::Q8;
    const char* op = act == Act::Q8 ? "qlinear" : act == Act::Exact ? "qlinear_exact" : "qlinear_wide";
    const wren::TypeInfo& info = checked_type(qtype);
    TORCH_CHECK(x_in.device().is_cpu(), "wren::", op, ": x must be on the CPU, got ", x_in.device());
    TORCH_CHECK(x_in.scalar_type() == at::kFloat, "wren::", op, ": x must be float32, got ", x_in.scalar_type());
    TORCH_CHECK(x_in.dim() >= 1, "wren::", op, ": x must have a last dimension of cols");
    const int64_t cols = x_in.size(-1);
    check_raw(raw_in, info, cols, op);
    TORCH_CHECK(raw_in.size(0) == rows, "wren::", op, ": raw has ", raw_in.size(0), " rows, expected ", rows);
    std::vector<int64_t> out_shape(x_in.sizes().begin(), x_in.sizes().end());
    out_shape.back() = rows;
    const int64_t n = x_in.numel() / cols;
    at::Tensor out = at::empty({n, rows}, x_in.options());
    if (n > 0 && rows > 0) {
        const at::Tensor x = x_in.reshape({n, cols}).contiguous();
        const at::Tensor raw = raw_in.contiguous();
        if (n <= g_max_gemv_rows.load() && !(qtype == wren::F32 && n > 1)) {
            if (act != Act::Wide || !wide_gemv(info, (int)qtype, raw.data_ptr<uint8_t>(), raw.size(1), rows,
                                               x.data_ptr<float>(), n, cols, out.data_ptr<float>()))
                gemv_path(info, (int)qtype, raw.data_ptr<uint8_t>(), raw.size(1), rows, x.data_ptr<float>(), n, cols,
                          out.data_ptr<float>(), exact);
        } else if (!exact && g_int_prompt.load() && wren::qgemm_supports(wren::kernels(), (int)qtype)) {
            std::vector<wren::GemmPart> part{{&info, (int)qtype, raw.data_ptr<uint8_t>(), raw.size(1), rows, 0,
                                              nullptr, 0}};
            wren::qgemm(wren::kernels(), part, x.data_ptr<float>(), n, cols, out.data_ptr<float>(), rows);
        } else {
            gemm_path((int)qtype, raw, x, out);
        }
    }
    return out.view(out_shape);
}

// One weight of a fused linear (Q, K and V; gate and up) as qlinear_parts sees it.
struct Part {
    const wren::TypeInfo* info;
    int qtype;
    const uint8_t* w;
    int64_t row_bytes, rows;
    int64_t col0;       // its first output column
    int64_t byte0;      // where its rows start in the parts' combined weight bytes
    const uint8_t* xq;  // the activations quantized for its type (nullptr: float or exact)
    int64_t xq_bytes;   // per activation row
};

// Rows [b, e) of one part against n activation rows; out is the part's first column of the
// [n, ld] result.
void part_rows(const Part& p, const float* x, int64_t n, int64_t cols, float* out, int64_t ld, bool exact,
               int64_t b, int64_t e) {
    const wren::Kernels& k = wren::kernels();
    const uint8_t* w = p.w;
    const int64_t rb = p.row_bytes;
    if (p.info->is_float) {
        const wren::FDotFn fn = k.fdot[p.qtype];
        for (int64_t r = b; r < e; ++r)
            for (int64_t j = 0; j < n; ++j) out[j * ld + r] = fn(w + r * rb, cols, x + j * cols);
        return;
    }
    const int64_t nb = cols / p.info->block;
    if (p.info->interleave > 1) {  // b and e are group boundaries (parts_gemv)
        const int64_t il = p.info->interleave;
        group_rows(*p.info, p.qtype, w, rb, x, n, cols, out, ld, exact, p.xq, p.xq_bytes, b / il, e / il);
        return;
    }
    if (exact) {
        const wren::XDotRowsFn fn = k.xdot_rows[p.qtype];
        for (int64_t r = b; r < e; ++r) fn(w + r * rb, nb, x, cols, (int)n, out + r, ld);
        return;
    }
    const wren::QDotWRowsFn fn_wrows = k.qdot_wrows[p.qtype];
    if (n == 1 && fn_wrows != nullptr) {
        fn_wrows(w + b * rb, rb, (int)(e - b), nb, p.xq, out + b);
        return;
    }
    const wren::QDotRowsFn fn_rows = k.qdot_rows[p.qtype];
    if (n > 1 && fn_rows != nullptr) {
        for (int64_t r = b; r < e; ++r) fn_rows(w + r * rb, nb, p.xq, p.xq_bytes, (int)n, out + r, ld);
        return;
    }
    const wren::QDotFn fn = k.qdot[p.qtype];
    for (int64_t r = b; r < e; ++r)
        for (int64_t j = 0; j < n; ++j) out[j * ld + r] = fn(w + r * rb, nb, p.xq + j * p.xq_bytes);
}

// Every part's rows in one parallel pass, split by weight bytes (the parts' row sizes
// differ: a Q4_K_M file's V is Q6_K beside Q4_K Q and K), so the threads read equal shares.
// x is quantized once per activation format the parts use (the k-quants share one), not
// once per part.
void parts_gemv(std::vector<Part>& parts, const float* x, int64_t n, int64_t cols, float* out, int64_t ld,
                bool exact) {
    const wren::Kernels& k = wren::kernels();
    int64_t total = 0;
    for (Part& p : parts) {
        p.byte0 = total;
        total += p.rows * p.row_bytes;
    }
    if (!exact) {
        // at most one buffer region per distinct quantizer; parts of one format share it
        struct Format { wren::QuantFn fn; int64_t bytes; int64_t offset; };
        std::vector<Format> formats;
        int64_t need = 0;
        std::vector<int> which(parts.size(), -1);
        for (size_t i = 0; i < parts.size(); ++i) {
            const Part& p = parts[i];
            if (p.info->is_float) continue;
            const int64_t bytes = cols / p.info->block * (int64_t)k.act_bytes[p.qtype];
            const wren::QuantFn fn = k.quant[p.qtype];
            for (size_t f = 0; f < formats.size(); ++f)
                if (formats[f].fn == fn && formats[f].bytes == bytes) which[i] = (int)f;
            if (which[i] < 0) {
                which[i] = (int)formats.size();
                formats.push_back({fn, bytes, need});
                need += bytes * n;
            }
        }
        uint8_t* buf = xq_buffer((size_t)need);
        for (const Format& f : formats)
            for (int64_t j = 0; j < n; ++j) f.fn(x + j * cols, cols, buf + f.offset + j * f.bytes);
        for (size_t i = 0; i < parts.size(); ++i) {
            if (which[i] < 0) continue;
            parts[i].xq = buf + formats[which[i]].offset;
            parts[i].xq_bytes = formats[which[i]].bytes;
        }
    }
    // at least ~64K weight bytes per task so small matrices don't pay for threads
    const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 16) / std::max<int64_t>(1, n));
    at::parallel_for(0, total, grain, [&](int64_t b, int64_t e) {
        // a row belongs to the task whose byte range holds its first byte
        for (const Part& p : parts) {
            const int64_t end = p.byte0 + p.rows * p.row_bytes;
            if (e <= p.byte0 || b >= end) continue;
            // (an interleaved part's "row" here is a whole group)
            const int64_t unit = p.row_bytes * p.info->interleave;
            const int64_t r0 = b <= p.byte0 ? 0 : (b - p.byte0 + unit - 1) / unit * p.info->interleave;
            const int64_t r1 = std::min(p.rows, (e - p.byte0 + unit - 1) / unit * p.info->interleave);
            if (r0 < r1) part_rows(p, x, n, cols, out + p.col0, ld, exact, r0, r1);
        }
    });
}

// x @ [W_0; W_1; ...].T for weights of possibly different types, as one [..., sum(rows)]
// result: the fused projections of a decoder block in one call.
at::Tensor qlinear_parts_cpu(const at::Tensor& x_in, at::TensorList raws, at::IntArrayRef qtypes,
                             at::IntArrayRef rows, bool exact) {
    const char* op = "qlinear_parts";
    TORCH_CHECK(!raws.empty() && raws.size() == qtypes.size() && raws.size() == rows.size(), "wren::", op,
                ": raws, qtypes and rows must be equally long and not empty, got ", raws.size(), ", ",
                qtypes.size(), " and ", rows.size());
    TORCH_CHECK(x_in.device().is_cpu(), "wren::", op, ": x must be on the CPU, got ", x_in.device());
    TORCH_CHECK(x_in.scalar_type() == at::kFloat, "wren::", op, ": x must be float32, got ", x_in.scalar_type());
    TORCH_CHECK(x_in.dim() >= 1, "wren::", op, ": x must have a last dimension of cols");
    const int64_t cols = x_in.size(-1);
    const int64_t n = x_in.numel() / std::max<int64_t>(1, cols);
    std::vector<at::Tensor> held;  // contiguous copies (normally the inputs themselves)
    std::vector<Part> parts;
    int64_t total_rows = 0;
    const int64_t max_rows = g_max_gemv_rows.load();
    for (size_t i = 0; i < raws.size(); ++i) {
        const wren::TypeInfo& info = checked_type(qtypes[i]);
        check_raw(raws[i], info, cols, op);
        TORCH_CHECK(raws[i].size(0) == rows[i], "wren::", op, ": part ", i, " has ", raws[i].size(0),
                    " rows, expected ", rows[i]);
        held.push_back(raws[i].contiguous());
        parts.push_back({&info, (int)qtypes[i], held.back().data_ptr<uint8_t>(), held.back().size(1), rows[i],
                         total_rows, 0, nullptr, 0});
        total_rows += rows[i];
    }
    std::vector<int64_t> out_shape(x_in.sizes().begin(), x_in.sizes().end());
    out_shape.back() = total_rows;
    at::Tensor out = at::empty({n, total_rows}, x_in.options());
    if (n == 0 || total_rows == 0) return out.view(out_shape);
    const at::Tensor x = x_in.reshape({n, cols}).contiguous();
    // Each part takes the path qlinear would give it alone: the integer dots for a few rows
    // of x (F32 weights: one row), the tiled GEMM otherwise.
    std::vector<Part> dots;
    std::vector<wren::GemmPart> integer;  // the integer prompt path's parts
    for (size_t i = 0; i < parts.size(); ++i) {
        if (n <= max_rows && !(parts[i].qtype == wren::F32 && n > 1)) {
            dots.push_back(parts[i]);
        } else if (!exact && g_int_prompt.load() && wren::qgemm_supports(wren::kernels(), parts[i].qtype)) {
            const Part& p = parts[i];
            integer.push_back({p.info, p.qtype, p.w, p.row_bytes, p.rows, p.col0, nullptr, 0});
        } else if (parts.size() == 1) {
            gemm_path(parts[i].qtype, held[i], x, out);
        } else {
            at::Tensor part = at::empty({n, parts[i].rows}, x.options());
            gemm_path(parts[i].qtype, held[i], x, part);
            out.narrow(1, parts[i].col0, parts[i].rows).copy_(part);
        }
    }
    if (!integer.empty()) wren::qgemm(wren::kernels(), integer, x.data_ptr<float>(), n, cols, out.data_ptr<float>(), total_rows);
    if (!dots.empty()) parts_gemv(dots, x.data_ptr<float>(), n, cols, out.data_ptr<float>(), total_rows, exact);
    return out.view(out_shape);
}

at::Tensor qlinear_cpu(const at::Tensor& x, const at::Tensor& raw, int64_t qtype, int64_t rows) {
    return linear_impl(x, raw, qtype, rows, Act::Q8);
}

// Never rounds x: the same exact weights as the GEMM path, in float32 dot products.
at::Tensor qlinear_exact_cpu(const at::Tensor& x, const at::Tensor& raw, int64_t qtype, int64_t rows) {
    return linear_impl(x, raw, qtype, rows, Act::Exact);
}

// x rounded to 16 bits per 32 values for a decoding step, where the type has that kernel
// (Q6_K and Q8_0, the usual output heads): each x within 1/65,534 of its block's largest |x|,
// about 1.4x the float path's speed. Otherwise exactly qlinear_exact.
at::Tensor qlinear_wide_cpu(const at::Tensor& x, const at::Tensor& raw, int64_t qtype, int64_t rows) {
    return linear_impl(x, raw, qtype, rows, Act::Wide);
}

// The interleaved layout the active kernel table has for a file type, or -1 (none, or left
// out by WREN_REPACK: see wren::interleaved_layout).
int64_t interleaved_type(int64_t qtype) {
    return wren::interleaved_layout(wren::kernels(), (int)qtype);
}

// raw (file rows of type qtype) in the interleaved layout `to`: a new tensor of the same shape.
at::Tensor repack(const at::Tensor& raw_in, int64_t to, int64_t cols) {
    const wren::TypeInfo& info = checked_type(to);
    TORCH_CHECK(info.interleave > 1, "wren::repack: ", info.name, " is not an interleaved layout");
    check_raw(raw_in, info, cols, "repack");
    const at::Tensor raw = raw_in.contiguous();
    at::Tensor out = at::empty(raw.sizes(), raw.options());
    const int64_t rb = raw.size(1), il = info.interleave;
    const uint8_t* src = raw.data_ptr<uint8_t>();
    uint8_t* dst = out.data_ptr<uint8_t>();
    at::parallel_for(0, raw.size(0) / il, std::max<int64_t>(1, (int64_t(1) << 20) / (il * rb)), [&](int64_t b, int64_t e) {
        for (int64_t g = b; g < e; ++g) wren::repack_group((int)to, src + g * il * rb, rb, dst + g * il * rb);
    });
    return out;
}

// y = x / sqrt(mean(x^2) + eps) * weight over the last dimension, float32: one call instead
// of the handful of small ops torch's eager rms_norm dispatches (tens of microseconds for
// a decoding step's one row, 33 times per token in a 16-layer model). The sum of squares is
// accumulated in double; then, per value, (x * inv) * weight in float, torch's order.
at::Tensor rms_norm_cpu(const at::Tensor& x_in, const at::Tensor& weight_in, double eps) {
    TORCH_CHECK(x_in.device().is_cpu() && x_in.scalar_type() == at::kFloat, "wren::rms_norm: x must be float32 on the CPU, got ",
                x_in.scalar_type(), " on ", x_in.device());
    TORCH_CHECK(x_in.dim() >= 1 && x_in.size(-1) > 0, "wren::rms_norm: x needs a non-empty last dimension");
    const int64_t cols = x_in.size(-1);
    TORCH_CHECK(weight_in.device().is_cpu() && weight_in.scalar_type() == at::kFloat && weight_in.dim() == 1 &&
                weight_in.size(0) == cols, "wren::rms_norm: weight must be float32 [", cols, "] on the CPU, got ",
                weight_in.scalar_type(), " ", weight_in.sizes());
    const at::Tensor x = x_in.contiguous(), weight = weight_in.contiguous();
    at::Tensor out = at::empty(x.sizes(), x.options());
    const int64_t rows = x.numel() / cols;
    const float* xp = x.data_ptr<float>();
    const float* wp = weight.data_ptr<float>();
    float* op = out.data_ptr<float>();
    at::parallel_for(0, rows, std::max<int64_t>(1, (int64_t(1) << 16) / cols), [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) {
            const float* v = xp + r * cols;
            double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
            int64_t i = 0;
            for (; i + 4 <= cols; i += 4) {
                s0 += (double)v[i] * v[i];
                s1 += (double)v[i + 1] * v[i + 1];
                s2 += (double)v[i + 2] * v[i + 2];
                s3 += (double)v[i + 3] * v[i + 3];
            }
            for (; i < cols; ++i) s0 += (double)v[i] * v[i];
            const float inv = (float)(1.0 / std::sqrt((s0 + s1 + s2 + s3) / (double)cols + eps));
            float* o = op + r * cols;
            for (int64_t c = 0; c < cols; ++c) o[c] = (v[c] * inv) * wp[c];
        }
    });
    return out;
}

// exp(x) for x <= 0 (softmax's shifted scores), lane by lane in plain adds and multiplies so
// the compiler vectorizes a loop of it: x = n ln2 + r with |r| <= ln2/2 (n rounded to the
// nearest by adding and taking away 1.5 * 2^23), e^r by its degree-6 Taylor polynomial
// (relative error ~2e-7), times 2^n built in the exponent bits. Below -87, e^-87.
static inline float exp_nonpositive(float x) {
    x = x < -87.0f ? -87.0f : x;
    const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    const float r = (x - n * 0.693145751953125f) - n * 1.42860682030941723e-6f;
    float p = 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    const int32_t bits = ((int32_t)n + 127) << 23;
    float scale;
    std::memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

// One kv head's G query rows (attend_one). Compiled for AVX-512, AVX2 and the baseline, the
// best picked at load: the code fixes every sum's order lane by lane and the build forbids
// fused multiply-adds (-ffp-contract=off), so each gives the same bits, only faster.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
static void attend_head(const float* q, const float* keys, int64_t ks2, const float* values, int64_t vs2,
                        float* out, int64_t G, int64_t D, int64_t T, float* scores) {
    constexpr int L = 16;
    for (int64_t g = 0; g < G; ++g) {
        const float* qr = q + g * D;
        float top = -INFINITY;
        for (int64_t t = 0; t < T; ++t) {
            const float* kr = keys + t * ks2;
            float acc[L] = {};
            int64_t d = 0;
            for (; d + L <= D; d += L)
                for (int j = 0; j < L; ++j) acc[j] += qr[d + j] * kr[d + j];
            for (int j = 0; d + j < D; ++j) acc[j] += qr[d + j] * kr[d + j];
            for (int w = L / 2; w > 0; w /= 2)
                for (int j = 0; j < w; ++j) acc[j] += acc[j + w];
            scores[t] = acc[0];
            top = std::max(top, acc[0]);
        }
        float sums[L] = {};
        int64_t t = 0;
        for (; t + L <= T; t += L)
            for (int j = 0; j < L; ++j) {
                const float e = exp_nonpositive(scores[t + j] - top);
                scores[t + j] = e;
                sums[j] += e;
            }
        for (int j = 0; t + j < T; ++j) {
            const float e = exp_nonpositive(scores[t + j] - top);
            scores[t + j] = e;
            sums[j] += e;
        }
        for (int w = L / 2; w > 0; w /= 2)
            for (int j = 0; j < w; ++j) sums[j] += sums[j + w];
        float* o = out + g * D;
        for (int64_t d = 0; d < D; ++d) o[d] = 0.0f;
        for (int64_t t = 0; t < T; ++t) {
            const float p = scores[t];
            const float* vr = values + t * vs2;
            for (int64_t d = 0; d < D; ++d) o[d] += p * vr[d];
        }
        const float inv = 1.0f / sums[0];
        for (int64_t d = 0; d < D; ++d) o[d] *= inv;
    }
}

// One query per head over a sequence's keys, float32: q [B, kv_heads, group, D] (scaled),
// keys and values [B, kv_heads, T, D] (rows contiguous). Returns [B, kv_heads, group, D].
// A decoded token's attention, the same op in the compiled decode step and in a verify
// step's rows (engine.inference.speculative): inductor's fused loop and torch's eager
// bmm-softmax-bmm sum in different orders, and the ~1e-7 between them grows through 8-bit
// activations into different greedy picks. Here every sum runs in a fixed order whatever
// the thread count: dots in 16 lanes then a fixed tree, softmax's sum likewise, and each
// output value summed over keys in order. Each query row goes to one thread; up to 2^17
// key elements in all (rows x span x dim) stay on the calling thread (a hand-off costs more).
at::Tensor attend_one_cpu(const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in) {
    TORCH_CHECK(q_in.device().is_cpu() && q_in.scalar_type() == at::kFloat && k_in.scalar_type() == at::kFloat &&
                v_in.scalar_type() == at::kFloat && q_in.dim() == 4 && k_in.dim() == 4 && v_in.dim() == 4,
                "wren::attend_one: float32 4-d CPU tensors");
    const int64_t B = q_in.size(0), H = q_in.size(1), G = q_in.size(2), D = q_in.size(3), T = k_in.size(2);
    TORCH_CHECK(k_in.size(0) == B && k_in.size(1) == H && k_in.size(3) == D && v_in.sizes() == k_in.sizes() && T > 0,
                "wren::attend_one: keys and values must be [", B, ", ", H, ", T, ", D, "]");
    const at::Tensor q = q_in.contiguous();
    const at::Tensor k = k_in.stride(3) == 1 ? k_in : k_in.contiguous();
    const at::Tensor v = v_in.stride(3) == 1 ? v_in : v_in.contiguous();
    at::Tensor out = at::empty({B, H, G, D}, q.options());
    const float* qp = q.data_ptr<float>();
    const float* kp = k.data_ptr<float>();
    const float* vp = v.data_ptr<float>();
    float* op = out.data_ptr<float>();
    const int64_t ks0 = k.stride(0), ks1 = k.stride(1), ks2 = k.stride(2);
    const int64_t vs0 = v.stride(0), vs1 = v.stride(1), vs2 = v.stride(2);
    // Each query row on one thread (its bits do not depend on the split); all of them on the
    // calling thread while the keys and values read are small.
    const int64_t rows = B * H * G;
    const int64_t grain = rows * T * D <= (int64_t(1) << 17) ? rows : std::max<int64_t>(1, (int64_t(1) << 14) / (T * D));
    at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
        std::vector<float> scores(T);
        for (int64_t row = begin; row < end; ++row) {
            const int64_t bh = row / G, b = bh / H, h = bh % H;
            const float* keys = kp + b * ks0 + h * ks1;
            const float* values = vp + b * vs0 + h * vs1;
            attend_head(qp + row * D, keys, ks2, values, vs2, op + row * D, 1, D, T, scores.data());
        }
    });
    return out;
}

int64_t read_sum(const at::Tensor& t) {
    TORCH_CHECK(t.is_contiguous() && t.device().is_cpu(), "wren::read_sum needs a contiguous CPU tensor");
    const uint8_t* p = (const uint8_t*)t.data_ptr();
    const int64_t n = t.numel() * (int64_t)t.element_size();
    std::atomic<uint64_t> total{0};
    at::parallel_for(0, n, 1 << 20, [&](int64_t b, int64_t e) { total += wren::read_sum(p + b, e - b); });
    return (int64_t)(total.load() & 0x7fffffffffffffffull);
}

std::string isa() { return wren::kernels().isa; }

std::string set_isa(const std::string& cap) {
    const char* chosen = wren::select_isa(cap.c_str());
    TORCH_CHECK(chosen != nullptr, "wren::set_isa: unknown instruction set '", cap,
                "': use scalar, avx2, avx-vnni, avx512-vnni, neon, neon-dotprod, neon-i8mm, or an empty string for the best");
    return chosen;
}

int64_t max_gemv_rows() { return g_max_gemv_rows.load(); }

void set_max_gemv_rows(int64_t n) { g_max_gemv_rows.store(std::max<int64_t>(0, n)); }

bool integer_prompt() { return g_int_prompt.load(); }

// Whether the table in use takes qtype's prompt rows through the integer path.
bool integer_prompt_for(int64_t qtype) {
    return g_int_prompt.load() && wren::qgemm_supports(wren::kernels(), (int)qtype);
}

void set_integer_prompt(bool on) { g_int_prompt.store(on); }

}  // namespace

TORCH_LIBRARY(wren, m) {
    m.def("dequantize(Tensor raw, int qtype, int cols) -> Tensor");
    m.def("qlinear(Tensor x, Tensor raw, int qtype, int rows) -> Tensor");
    m.def("qlinear_exact(Tensor x, Tensor raw, int qtype, int rows) -> Tensor");
    m.def("qlinear_wide(Tensor x, Tensor raw, int qtype, int rows) -> Tensor");
    m.def("qlinear_parts(Tensor x, Tensor[] raws, int[] qtypes, int[] rows, bool exact) -> Tensor");
    m.def("rms_norm(Tensor x, Tensor weight, float eps) -> Tensor");
    m.def("attend_one(Tensor q, Tensor keys, Tensor values) -> Tensor");
    // helpers for tests and bench/qmatmul.py
    m.def("isa() -> str", &isa);
    m.def("set_isa(str cap) -> str", &set_isa);
    m.def("max_gemv_rows() -> int", &max_gemv_rows);
    m.def("set_max_gemv_rows(int n) -> ()", &set_max_gemv_rows);
    m.def("integer_prompt() -> bool", &integer_prompt);
    m.def("integer_prompt_for(int qtype) -> bool", &integer_prompt_for);
    m.def("set_integer_prompt(bool on) -> ()", &set_integer_prompt);
    m.def("read_sum(Tensor t) -> int", &read_sum);
    m.def("interleaved_type(int qtype) -> int", &interleaved_type);
    m.def("repack(Tensor raw, int to, int cols) -> Tensor", &repack);
}

TORCH_LIBRARY_IMPL(wren, CPU, m) {
    m.impl("dequantize", dequantize_cpu);
    m.impl("qlinear", qlinear_cpu);
    m.impl("qlinear_exact", qlinear_exact_cpu);
    m.impl("qlinear_wide", qlinear_wide_cpu);
    m.impl("qlinear_parts", qlinear_parts_cpu);
    m.impl("rms_norm", rms_norm_cpu);
    m.impl("attend_one", attend_one_cpu);
}

static PyModuleDef wren_module = {
    PyModuleDef_HEAD_INIT, "_C",
    "Wren's kernels for GGUF block weights: importing this registers torch.ops.wren.*", -1, nullptr,
};

PyMODINIT_FUNC PyInit__C(void) { return PyModule_Create(&wren_module); }
