// A prompt chunk's attention on the CPU: wren::attend_chunk, a tiled online-softmax kernel
// (flash-attention style) for float32 queries over the KV cache's float32 keys and values.
//
// Why not torch's SDPA: with a float mask (every chunk after the first, sliding windows) it
// computes every block of the chunk's diagonal and adds the mask element by element; with
// is_causal its causal alignment is top-left, wrong for a chunk that starts past 0. Here
// which keys a query sees is worked out from positions: blocks no query of a tile sees are
// skipped, blocks every query sees are not masked, and only the edge blocks are.
//
// Work is split into tasks of (kv head, block of queries), handed out largest first from a
// shared counter to torch's intra-op threads, so the causal triangle's uneven tasks balance.
// The kernels exist for x86's AVX-512 (zmm) and AVX2 (ymm, also under the AVX-VNNI table);
// the scalar and NEON tables answer attend_supported() = false and Wren keeps SDPA there.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <vector>

#include "wren_quant.h"

#ifndef WREN_OPS_NS
#define WREN_OPS_NS wren
#endif

namespace wren {

constexpr int kBK = 64;  // keys a block (the packed keys' block width)

struct AttendJob {
    const float* q;
    int64_t q_tok, q_head;  // q's strides (floats) between queries and between heads
    const float* kt;        // packed keys: [kv_heads][kblocks][d][kBK]
    int64_t kblocks;
    const float* v;
    int64_t v_tok, v_head;  // the values' strides between keys and between kv heads
    float* out;             // [L, heads, d]
    int64_t heads, group, d, T, start, lo, window;  // window <= 0: none
    float scale;
};

}  // namespace wren

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

namespace wren {

namespace avx512 {
#define TGT __attribute__((target("avx2,fma,avx512f,avx512vl")))
using vf = __m512;
constexpr int W = 16;
constexpr int kScoreRows = 6, kScoreVecs = 4;  // 6 rows x 64 keys: 24 accumulators
constexpr int kValueRows = 6, kValueVecs = 4;  // 6 rows x 64 of d
TGT static inline vf vload(const float* p) { return _mm512_loadu_ps(p); }
TGT static inline void vstore(float* p, vf x) { _mm512_storeu_ps(p, x); }
TGT static inline vf vset1(float x) { return _mm512_set1_ps(x); }
TGT static inline vf vzero() { return _mm512_setzero_ps(); }
TGT static inline vf vfma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
TGT static inline vf vmul(vf a, vf b) { return _mm512_mul_ps(a, b); }
TGT static inline vf vadd(vf a, vf b) { return _mm512_add_ps(a, b); }
TGT static inline vf vsub(vf a, vf b) { return _mm512_sub_ps(a, b); }
TGT static inline vf vmax(vf a, vf b) { return _mm512_max_ps(a, b); }
TGT static inline vf vround(vf x) { return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
TGT static inline vf vpow2(vf n) {  // 2^n for integral n in [-126, 127]
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23));
}
TGT static inline vf vzero_below(vf y, vf x, vf lo) { return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, lo, _CMP_GE_OQ), y); }
TGT static inline float vhmax(vf x) { return _mm512_reduce_max_ps(x); }
TGT static inline float vhsum(vf x) { return _mm512_reduce_add_ps(x); }
}  // namespace avx512
#define NS avx512
#include "attend_x86.inc"
#undef NS
#undef TGT

namespace avx2 {
#define TGT __attribute__((target("avx2,fma")))
using vf = __m256;
constexpr int W = 8;
constexpr int kScoreRows = 6, kScoreVecs = 2;  // 6 rows x 16 keys: 12 of the 16 registers
constexpr int kValueRows = 6, kValueVecs = 2;
TGT static inline vf vload(const float* p) { return _mm256_loadu_ps(p); }
TGT static inline void vstore(float* p, vf x) { _mm256_storeu_ps(p, x); }
TGT static inline vf vset1(float x) { return _mm256_set1_ps(x); }
TGT static inline vf vzero() { return _mm256_setzero_ps(); }
TGT static inline vf vfma(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
TGT static inline vf vmul(vf a, vf b) { return _mm256_mul_ps(a, b); }
TGT static inline vf vadd(vf a, vf b) { return _mm256_add_ps(a, b); }
TGT static inline vf vsub(vf a, vf b) { return _mm256_sub_ps(a, b); }
TGT static inline vf vmax(vf a, vf b) { return _mm256_max_ps(a, b); }
TGT static inline vf vround(vf x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
TGT static inline vf vpow2(vf n) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
}
TGT static inline vf vzero_below(vf y, vf x, vf lo) { return _mm256_and_ps(y, _mm256_cmp_ps(x, lo, _CMP_GE_OQ)); }
TGT static inline float vhmax(vf x) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}
TGT static inline float vhsum(vf x) {
    __m128 m = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    m = _mm_add_ps(m, _mm_movehl_ps(m, m));
    m = _mm_add_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}
}  // namespace avx2
#define NS avx2
#include "attend_x86.inc"
#undef NS
#undef TGT

}  // namespace wren
#define WREN_ATTEND_X86 1
#endif

namespace {

using TaskFn = void (*)(const wren::AttendJob&, int64_t, int64_t, int64_t, float*);

// The kernel for the table in use; nullptr where there is none (scalar, NEON).
TaskFn task_fn() {
#ifdef WREN_ATTEND_X86
    const char* isa = wren::kernels().isa;
    if (std::strcmp(isa, "avx512-vnni") == 0) return wren::avx512::task;
    if (std::strcmp(isa, "avx2") == 0 || std::strcmp(isa, "avx-vnni") == 0) return wren::avx2::task;
#endif
    return nullptr;
}

bool attend_supported() { return task_fn() != nullptr; }

// keys [kv_heads, T, d] -> [kv_heads][blocks][d][kBK], zero past T.
void pack_keys(const at::Tensor& keys, float* kt, int64_t blocks) {
    const int64_t kvh = keys.size(0), T = keys.size(1), d = keys.size(2);
    const int64_t s_head = keys.stride(0), s_tok = keys.stride(1);
    const float* k = keys.data_ptr<float>();
    at::parallel_for(0, kvh * blocks, 1, [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t) {
            const int64_t h = t / blocks, j0 = (t % blocks) * wren::kBK;
            float* dst = kt + t * d * wren::kBK;
            for (int64_t j = 0; j < wren::kBK; ++j) {
                const float* src = k + h * s_head + (j0 + j) * s_tok;
                if (j0 + j < T)
                    for (int64_t c = 0; c < d; ++c) dst[c * wren::kBK + j] = src[c];
                else
                    for (int64_t c = 0; c < d; ++c) dst[c * wren::kBK + j] = 0.f;
            }
        }
    });
}

at::Tensor attend_chunk(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values, int64_t start,
                        int64_t lo, int64_t window, double scale) {
    const TaskFn fn = task_fn();
    TORCH_CHECK(fn != nullptr, "wren::attend_chunk: no kernel for the table ", wren::kernels().isa);
    TORCH_CHECK(q.dim() == 3 && keys.dim() == 3 && values.dim() == 3, "wren::attend_chunk: q [L, heads, d], "
                "keys and values [kv_heads, T, d]");
    TORCH_CHECK(q.scalar_type() == at::kFloat && keys.scalar_type() == at::kFloat &&
                values.scalar_type() == at::kFloat, "wren::attend_chunk: float32 only");
    TORCH_CHECK(q.device().is_cpu() && keys.device().is_cpu() && values.device().is_cpu(), "wren::attend_chunk: CPU only");
    const int64_t L = q.size(0), heads = q.size(1), d = q.size(2);
    const int64_t kvh = keys.size(0), T = keys.size(1);
    TORCH_CHECK(keys.size(2) == d && values.size(0) == kvh && values.size(1) == T && values.size(2) == d &&
                kvh > 0 && heads % kvh == 0, "wren::attend_chunk: shapes do not match");
    TORCH_CHECK(q.stride(2) == 1 && keys.stride(2) == 1 && values.stride(2) == 1,
                "wren::attend_chunk: head_dim must be contiguous");
    TORCH_CHECK(lo >= 0 && start >= lo && start + L - lo <= T, "wren::attend_chunk: the keys must cover "
                "positions lo..start+L-1");
    at::Tensor out = at::empty({L, heads, d}, q.options());
    if (L == 0) return out;
    const int64_t blocks = (T + wren::kBK - 1) / wren::kBK;
    std::vector<float> kt((size_t)(kvh * blocks * d * wren::kBK));
    pack_keys(keys, kt.data(), blocks);

    wren::AttendJob job{q.data_ptr<float>(), q.stride(0), q.stride(1), kt.data(), blocks,
                        values.data_ptr<float>(), values.stride(1), values.stride(0), out.data_ptr<float>(),
                        heads, heads / kvh, d, T, start, lo, window, (float)scale};
    // about 64 rows (queries x the group's heads) a tile
    const int64_t bq = std::max<int64_t>(1, 64 / job.group);
    struct Task { int64_t h, i0, i1, cost; };
    std::vector<Task> tasks;
    for (int64_t h = 0; h < kvh; ++h)
        for (int64_t i0 = 0; i0 < L; i0 += bq) {
            const int64_t i1 = std::min(L, i0 + bq);
            const int64_t first = window > 0 ? std::max<int64_t>(lo, start + i0 - window + 1) : lo;
            tasks.push_back({h, i0, i1, (i1 - i0) * (start + i1 - first)});
        }
    std::stable_sort(tasks.begin(), tasks.end(), [](const Task& a, const Task& b) { return a.cost > b.cost; });
    std::atomic<int64_t> next{0};
    const int64_t n = (int64_t)tasks.size();
    const size_t scratch = (size_t)(bq * job.group * (2 * d + wren::kBK + 3));
    at::parallel_for(0, std::min<int64_t>(n, at::get_num_threads()), 1, [&](int64_t, int64_t) {
        std::vector<float> buf(scratch);
        for (int64_t t; (t = next.fetch_add(1)) < n;) fn(job, tasks[t].h, tasks[t].i0, tasks[t].i1, buf.data());
    });
    return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(WREN_OPS_NS, m) {
    m.def("attend_chunk(Tensor q, Tensor keys, Tensor values, int start, int lo, int window, float scale) -> Tensor");
    m.def("attend_supported() -> bool", &attend_supported);
}

TORCH_LIBRARY_IMPL(WREN_OPS_NS, CPU, m) { m.impl("attend_chunk", attend_chunk); }
