// A mixture-of-experts MLP over a prompt chunk (or a batched decoding step) in one call:
// wren::experts_grouped. The (token, choice) pairs are sorted by expert (stable: a counting
// sort), x is quantized once per activation format and its rows gathered into that order,
// then every chosen expert's gate and up rows meet all of its tokens (the integer kernels of
// the prompt path: qdot_group / qdot_rows, as qgemm.cpp runs them), the activation and the
// down projection's quantization run fused per pair, the down rows meet their pairs, and
// each token sums its k pairs by the router's weights. One thread hand-off per stage, so an
// expert's weights are read once per chunk and no per-expert call costs a pool wake-up.
// Tokens from exact_from on (a prompt's last rows, quant.modules.prompt_activations) keep
// float32 activations throughout: their pairs meet the expert's file rows right after its
// 8-bit pairs, in the same task, so the chunk still reads each expert once.
//
// Routing stays with the caller (experts.py): ids [T, k] and weights [T, k] are its result.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(_M_X64) || defined(__i386__)
#include <immintrin.h>
#endif
#ifdef _WIN32
#include <process.h>
#define getpid _getpid
#else
#include <unistd.h>
#endif

#include "qgemm.h"
#include "wren_quant.h"

#ifndef WREN_OPS_NS
#define WREN_OPS_NS wren
#endif

namespace {

using wren::env_off;
using wren::env_on;
using wren::Kernels;
using wren::TypeInfo;

constexpr int64_t kTaskBytes = int64_t(96) << 10;   // weight bytes per task (stays in L2)
constexpr int64_t kTokenBytes = int64_t(256) << 10;  // quantized activation bytes per pass
// An expert chosen by at least this many of a chunk's tokens has a task's file rows put into
// their interleaved layout (csrc/repack.cpp) before its products, where the type has one
// (mapped experts stay the file's blocks; plain-read ones are interleaved at load).
constexpr int64_t kRepackTokens = 16;

// WREN_REPACK=off (kernels.py's values: off, 0, false, no) keeps every product in the file's
// row layout (for A/B measurements).
bool repack_on() {
    static const bool on = !env_off("WREN_REPACK");
    return on;
}

// One projection of all experts: expert e's rows are rows e * rows .. (e + 1) * rows - 1.
struct Proj {
    const TypeInfo* info;
    int qtype;
    const uint8_t* w;
    int64_t row_bytes, rows, cols;
    int64_t xs;  // bytes of one activation row quantized for this type
    int packed;  // the interleaved layout its rows can be put into per task, or -1
};

// The interleaved layout of file type qtype whose group kernel takes the same activations, or -1.
int packed_type(const Kernels& k, int qtype, int64_t rows) {
    if (!repack_on()) return -1;
    const int to = wren::interleaved_layout(k, qtype);
    const TypeInfo* info = to < 0 ? nullptr : wren::type_info(to);
    if (info != nullptr && rows % info->interleave == 0 && k.quant[to] == k.quant[qtype] &&
        k.act_bytes[to] == k.act_bytes[qtype])
        return to;
    return -1;
}

// Expert e's rows [r0, r1) of p against n quantized rows x (xs apart) into o[j * ld + r].
void tile(const Kernels& k, const Proj& p, int64_t e, const uint8_t* x, int n, int64_t r0, int64_t r1, float* o,
          int64_t ld) {
    const uint8_t* w = p.w + e * p.rows * p.row_bytes;
    const int64_t nb = p.cols / p.info->block;
    if (p.info->interleave > 1) {
        wren::group_span(k, p.qtype, w, p.row_bytes, p.info->interleave, r0, r1, nb, x, p.xs, n, o, ld);
        return;
    }
    if (n == 1) {  // a token alone (a decoding step): the decoding path's kernels, its bits
        if (const wren::QDotWRowsFn wrows = k.qdot_wrows[p.qtype]) {
            wrows(w + r0 * p.row_bytes, p.row_bytes, (int)(r1 - r0), nb, x, o + r0);
            return;
        }
    } else if (const wren::QDotRowsFn rows = k.qdot_rows[p.qtype]) {
        for (int64_t r = r0; r < r1; ++r) rows(w + r * p.row_bytes, nb, x, p.xs, n, o + r, ld);
        return;
    }
    const wren::QDotFn dot = k.qdot[p.qtype];
    for (int64_t r = r0; r < r1; ++r)
        for (int j = 0; j < n; ++j) o[j * ld + r] = dot(w + r * p.row_bytes, nb, x + j * p.xs);
}

// The chosen experts and where their pairs sit in sorted order. A segment's last `exact`
// pairs (tokens at or past the call's exact_from: pairs keep token order within a segment)
// take float32 activations; their float rows sit from `exact_at` on in the exact pairs' own
// compact order.
struct Segment {
    int64_t expert, start, count;
    int64_t exact = 0, exact_at = 0;
};

// A slice of one expert's rows of one projection.
struct Task {
    int proj;
    int64_t seg, r0, r1;
};

// Tasks over every segment's rows of the listed projections, about kTaskBytes each.
std::vector<Task> tasks_for(const std::vector<Segment>& segs, const std::vector<const Proj*>& projs) {
    std::vector<Task> tasks;
    for (size_t s = 0; s < segs.size(); ++s)
        for (size_t i = 0; i < projs.size(); ++i) {
            const Proj& p = *projs[i];
            const int64_t il = p.packed >= 0 ? wren::type_info(p.packed)->interleave : p.info->interleave;
            const int64_t step = std::max<int64_t>(1, kTaskBytes / (p.row_bytes * il)) * il;
            for (int64_t r = 0; r < p.rows; r += step) tasks.push_back({(int)i, (int64_t)s, r, std::min(p.rows, r + step)});
        }
    return tasks;
}

// Tasks 0..n-1, each thread of the pool first through its own contiguous share (as a static
// split: its own stretch of the weights), then through what is left of the others' (from
// their front): a thread that is late (another process took its core) or whose share was
// cheaper (experts chosen by fewer tokens) does not hold the stage's end. Each task writes
// its own rows, so the result does not depend on which thread ran it.
template <class F>
void omp_tasks(int64_t n, const F& body) {
    struct alignas(64) Share {
        std::atomic<int64_t> next{0};
        int64_t end = 0;
    };
    const int64_t workers = std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), n));
    std::vector<Share> shares(workers);
    for (int64_t w = 0; w < workers; ++w) {
        shares[w].next.store(w * n / workers, std::memory_order_relaxed);
        shares[w].end = (w + 1) * n / workers;
    }
    at::parallel_for(0, workers, 1, [&](int64_t b, int64_t e) {
        for (int64_t w = b; w < e; ++w)
            for (int64_t i = 0; i < workers; ++i) {
                Share& share = shares[(w + i) % workers];
                for (int64_t t = share.next.fetch_add(1, std::memory_order_relaxed); t < share.end;
                     t = share.next.fetch_add(1, std::memory_order_relaxed))
                    body(t);
            }
    });
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(_M_X64) || defined(__i386__)
    _mm_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
}

// The helper threads of a stage that never waits for a helper which has not started.
// An OpenMP region ends when every thread of its team has arrived, the ones that had
// nothing left to do included: on a busy machine a helper woken for a stage may not get a
// core for a scheduler slice (milliseconds), and the caller, its tasks done, waits for it
// at the region's end; a decoded token pays that three times a layer. Here the caller
// publishes a stage, runs tasks itself, and waits only for tasks another thread has
// claimed and not finished; a helper that comes late finds the stage taken and goes back.
// Helpers spin a little after a stage (the next one follows within microseconds while a
// token decodes), then sleep on a condition variable.
class Team {
  public:
    static Team& get() {
        static std::mutex made;
        static Team* team = nullptr;
        static long owner = 0;
        std::lock_guard<std::mutex> lock(made);
        const long pid = (long)::getpid();
        if (team == nullptr || owner != pid) {  // a forked child has none of its parent's threads
            team = new Team();  // never freed: helpers may outlive static destruction
            owner = pid;
        }
        return *team;
    }

    // body(t) for t in [0, n), on the calling thread and up to threads - 1 helpers; false
    // (nothing run) when another caller holds the team.
    template <class F>
    bool run(int64_t n, int64_t threads, const F& body) {
        std::unique_lock<std::mutex> busy(busy_, std::try_to_lock);
        if (!busy.owns_lock()) return false;
        grow(threads - 1);
        call_ = [](const void* f, int64_t t) { (*static_cast<const F*>(f))(t); };
        fn_ = &body;
        n_ = n;
        joiners_ = threads - 1;
#if defined(__x86_64__) || defined(_M_X64)
        csr_ = _mm_getcsr();  // helpers take the caller's rounding and denormal modes
#endif
        next_.store(0, std::memory_order_relaxed);
        done_.store(0, std::memory_order_relaxed);
        const uint64_t open = state_.load(std::memory_order_relaxed) + 1;  // even between stages
        state_.store(open, std::memory_order_seq_cst);
        if (sleepers_.load(std::memory_order_seq_cst) > 0) {
            std::lock_guard<std::mutex> lock(mu_);
            cv_.notify_all();
        }
        int64_t mine = 0;
        for (int64_t t = next_.fetch_add(1, std::memory_order_relaxed); t < n; t = next_.fetch_add(1, std::memory_order_relaxed)) {
            body(t);
            ++mine;
        }
        done_.fetch_add(mine, std::memory_order_acq_rel);
        wait_until([&] { return done_.load(std::memory_order_acquire) >= n; });
        state_.store(open + 1, std::memory_order_seq_cst);  // closed: a late helper leaves
        wait_until([&] { return active_.load(std::memory_order_seq_cst) == 0; });
        return true;
    }

  private:
    Team() = default;

    template <class P>
    static void wait_until(const P& ready) {
        for (int i = 0; !ready(); ++i) {
            if (i < 4096)
                cpu_relax();
            else
                std::this_thread::yield();  // the thread we wait for may need this core
        }
    }

    void grow(int64_t helpers) {
        while ((int64_t)started_ < helpers) {
            const int index = started_++;
            std::thread([this, index] { serve(index); }).detach();
        }
    }

    void serve(int index) {
        uint64_t seen = state_.load(std::memory_order_acquire);
        for (;;) {
            uint64_t s = seen;
            for (int i = 0; i < kSpins && !((s = state_.load(std::memory_order_acquire)) != seen && (s & 1)); ++i)
                cpu_relax();
            if (s == seen || !(s & 1)) {
                std::unique_lock<std::mutex> lock(mu_);
                sleepers_.fetch_add(1, std::memory_order_seq_cst);
                cv_.wait(lock, [&] {
                    s = state_.load(std::memory_order_seq_cst);
                    return s != seen && (s & 1);
                });
                sleepers_.fetch_sub(1, std::memory_order_seq_cst);
            }
            seen = s;
            active_.fetch_add(1, std::memory_order_seq_cst);
            if (state_.load(std::memory_order_seq_cst) == s && index < joiners_) {
#if defined(__x86_64__) || defined(_M_X64)
                _mm_setcsr(csr_);
#endif
                int64_t mine = 0;
                for (int64_t t = next_.fetch_add(1, std::memory_order_relaxed); t < n_;
                     t = next_.fetch_add(1, std::memory_order_relaxed)) {
                    call_(fn_, t);
                    ++mine;
                }
                done_.fetch_add(mine, std::memory_order_acq_rel);
            }
            active_.fetch_sub(1, std::memory_order_seq_cst);
        }
    }

    static constexpr int kSpins = 2048;  // ~40-100 us of polling before a helper sleeps

    std::mutex busy_, mu_;
    std::condition_variable cv_;
    std::atomic<uint64_t> state_{0};  // odd: a stage is open; each stage takes the next two values
    std::atomic<int> sleepers_{0}, active_{0};
    alignas(64) std::atomic<int64_t> next_{0};
    alignas(64) std::atomic<int64_t> done_{0};
    void (*call_)(const void*, int64_t) = nullptr;
    const void* fn_ = nullptr;
    int64_t n_ = 0, joiners_ = 0;
    unsigned csr_ = 0;
    int started_ = 0;
};

// The stages run as OpenMP regions unless WREN_EXPERTS_TEAM=on (kernels.py's on values; read
// at each call, for A/B measurements in one process) puts them on the Team. The Team's
// sleeping threads hand a stage over without waiting for a scheduler slice on a busy machine,
// but on a quiet one OpenMP's spinning threads decode faster: gpt-oss-20b's shape 9.9 vs 8.4
// tok/s (200 vs 237 CPU ms a token), Qwen3-30B-A3B's 11.1/9.8 vs 6.7/9.0 (bench/moe.py shapes,
// AMD EPYC Zen 4, 2 threads, load 0.9-1.6).
bool team_on() { return env_on("WREN_EXPERTS_TEAM"); }

// Tasks 0..n-1 over the intra-op threads: on the Team, or as an OpenMP region (nested
// in one, or when the Team is busy with another caller's stage, or when turned off).
template <class F>
void each_task(int64_t n, const F& body) {
    if (n <= 0) return;
    const int64_t threads = std::min<int64_t>(at::get_num_threads(), n);
    if (threads <= 1 || at::in_parallel_region()) {
        for (int64_t t = 0; t < n; ++t) body(t);
        return;
    }
    if (team_on() && Team::get().run(n, threads, body)) return;
    omp_tasks(n, body);
}

// body(b, e) over [0, n) in chunks of about `grain`, as tasks (at::parallel_for's shape).
template <class F>
void each_chunk(int64_t n, int64_t grain, const F& body) {
    grain = std::max<int64_t>(1, grain);
    const int64_t chunks = (n + grain - 1) / grain;
    if (chunks <= 1) {
        if (n > 0) body(0, n);
        return;
    }
    each_task(chunks, [&](int64_t c) { body(c * grain, std::min(n, (c + 1) * grain)); });
}

// Expert s's rows [r0, r1) of p, put into p.packed's layout (a thread's buffer), against the
// segment's pairs, `step` at a time.
void packed_tile(const Kernels& k, const Proj& p, const Segment& s, int64_t count, int64_t r0, int64_t r1,
                 const uint8_t* xq, int64_t step, float* out, int64_t ld) {
    thread_local std::vector<uint8_t> buf;
    const TypeInfo* info = wren::type_info(p.packed);
    const int64_t il = info->interleave, nb = p.cols / info->block;
    buf.resize((size_t)((r1 - r0) * p.row_bytes));
    const uint8_t* w = p.w + s.expert * p.rows * p.row_bytes;
    for (int64_t r = r0; r < r1; r += il)
        wren::repack_group(p.packed, w + r * p.row_bytes, p.row_bytes, buf.data() + (r - r0) * p.row_bytes);
    for (int64_t j0 = 0; j0 < count; j0 += step) {
        const int n = (int)std::min(step, count - j0);
        const int64_t pair = s.start + j0;
        wren::group_span(k, p.packed, buf.data(), p.row_bytes, il, 0, r1 - r0, nb, xq + pair * p.xs, p.xs, n,
                         out + pair * ld + r0, ld);
    }
}

// Expert e's rows [r0, r1) of p against n float32 rows x (p.cols apart), never rounded: the
// products qlinear_exact gives (wren::exact_rows).
void exact_tile(const Kernels& k, const Proj& p, int64_t e, const float* x, int n, int64_t r0, int64_t r1, float* o,
                int64_t ld) {
    wren::exact_rows(k, p.qtype, p.w + e * p.rows * p.row_bytes, p.row_bytes, r0, r1, p.cols / p.info->block, x,
                     p.cols, n, o, ld);
}

// Each task's rows against its segment's pairs: xq[i] holds projection i's 8-bit activations in
// pair order, xf[i] (where a segment has exact pairs) its float32 rows in the exact pairs'
// compact order; out[pair * ld + col0[i] + r]. A task's exact pairs follow its 8-bit ones on
// the same rows, while those are still in cache.
void run(const Kernels& k, const std::vector<Segment>& segs, const std::vector<const Proj*>& projs,
         const std::vector<const uint8_t*>& xq, const std::vector<const float*>& xf, const std::vector<int64_t>& col0,
         float* out, int64_t ld) {
    const std::vector<Task> tasks = tasks_for(segs, projs);
    each_task((int64_t)tasks.size(), [&](int64_t t) {
            const Task& task = tasks[t];
            const Proj& p = *projs[task.proj];
            const Segment& s = segs[task.seg];
            const int64_t count = s.count - s.exact;  // the 8-bit pairs
            float* o = out + col0[task.proj];
            const int64_t step = std::max<int64_t>(4, kTokenBytes / p.xs / 4 * 4);
            if (p.packed >= 0 && count >= kRepackTokens) {
                packed_tile(k, p, s, count, task.r0, task.r1, xq[task.proj], step, o, ld);
            } else {
                for (int64_t j0 = 0; j0 < count; j0 += step) {
                    const int n = (int)std::min(step, count - j0);
                    const int64_t pair = s.start + j0;
                    tile(k, p, s.expert, xq[task.proj] + pair * p.xs, n, task.r0, task.r1, o + pair * ld, ld);
                }
            }
            if (s.exact > 0)
                exact_tile(k, p, s.expert, xf[task.proj] + s.exact_at * p.cols, (int)s.exact, task.r0, task.r1,
                           o + (s.start + count) * ld, ld);
    });
}

enum Act : int64_t { kSwiglu = 0, kClampedSwiglu = 1 };

inline float sigmoid(float z) { return 1.0f / (1.0f + std::exp(-z)); }

// h = act(gate + gb, up + ub) over n values.
void activate(int64_t act, const float* gate, const float* up, const float* gb, const float* ub, int64_t n,
              float alpha, float limit, float* h) {
    for (int64_t i = 0; i < n; ++i) {
        float g = gate[i] + (gb ? gb[i] : 0.0f), u = up[i] + (ub ? ub[i] : 0.0f);
        if (act == kClampedSwiglu) {
            g = std::min(g, limit);
            u = std::min(std::max(u, -limit), limit);
            h[i] = (u + 1.0f) * (g * sigmoid(g * alpha));
        } else {
            h[i] = g * sigmoid(g) * u;
        }
    }
}

Proj proj_of(const at::Tensor& raw, int64_t qtype, int64_t rows, int64_t cols, const char* name) {
    const Kernels& k = wren::kernels();
    const TypeInfo* info = wren::type_info((int)qtype);
    TORCH_CHECK(info != nullptr && wren::qgemm_supports(k, (int)qtype), "wren::experts_grouped: ", name,
                " has GGML type ", qtype, ", which has no integer prompt kernels in the '", k.isa, "' table");
    TORCH_CHECK(raw.scalar_type() == at::kByte && raw.dim() == 2 && raw.is_contiguous() && raw.device().is_cpu(),
                "wren::experts_grouped: ", name, " must be a contiguous 2-D uint8 CPU tensor of blocks");
    TORCH_CHECK(cols % info->block == 0 && raw.size(1) == cols / info->block * info->type_size, "wren::experts_grouped: ",
                name, " rows are ", raw.size(1), " bytes, ", cols, " columns of ", info->name, " take ",
                cols / info->block * info->type_size);
    TORCH_CHECK(rows > 0 && rows % info->interleave == 0, "wren::experts_grouped: ", name, " has ", rows,
                " rows per expert, not a multiple of ", info->interleave);
    const int64_t xs = cols / info->block * (int64_t)k.act_bytes[qtype];
    const int packed = info->interleave == 1 ? packed_type(k, (int)qtype, rows) : -1;
    return {info, (int)qtype, raw.data_ptr<uint8_t>(), raw.size(1), rows, cols, xs, packed};
}

const float* bias_of(const c10::optional<at::Tensor>& b, int64_t experts, int64_t rows, const char* name) {
    if (!b.has_value() || !b->defined()) return nullptr;
    TORCH_CHECK(b->scalar_type() == at::kFloat && b->is_contiguous() && b->numel() == experts * rows,
                "wren::experts_grouped: ", name, " must be contiguous float32 [", experts, ", ", rows, "]");
    return b->data_ptr<float>();
}

// Pairs sorted by expert, stable in token order: order[p] = t * k + j.
std::vector<Segment> sort_pairs(const int64_t* ids, int64_t pairs, int64_t experts, std::vector<int64_t>& order) {
    std::vector<int64_t> count(experts + 1, 0);
    for (int64_t p = 0; p < pairs; ++p) {
        TORCH_CHECK(ids[p] >= 0 && ids[p] < experts, "wren::experts_grouped: expert id ", ids[p], " of ", experts);
        ++count[ids[p] + 1];
    }
    std::vector<Segment> segs;
    for (int64_t e = 0; e < experts; ++e) {
        if (count[e + 1]) segs.push_back({e, count[e], count[e + 1]});
        count[e + 1] += count[e];
    }
    order.resize(pairs);
    for (int64_t p = 0; p < pairs; ++p) order[count[ids[p]]++] = p;
    return segs;
}

// A call's working memory, kept by the calling thread from one call to the next: a prompt
// chunk's buffers are tens of MB (512 tokens of Qwen3-30B-A3B's shape: 72 MB a layer), and
// freed after each call they came back as fresh pages the kernel had to fault in and zero
// (clear_page: 2-4% of a chunk's time, perf). Never shrunk; a buffer's bytes are each
// written before they are read.
template <class T>
struct Buffer {
    T* data = nullptr;
    size_t size = 0;
    T* get(size_t n) {
        if (n > size) {
            std::free(data);
            data = static_cast<T*>(std::malloc(std::max<size_t>(n, 1) * sizeof(T)));
            TORCH_CHECK(data != nullptr, "wren::experts_grouped: out of memory for ", n * sizeof(T), " bytes");
            size = n;
        }
        return data;
    }
    ~Buffer() { std::free(data); }
};

struct Scratch {
    Buffer<uint8_t> rows, xg, xu, hq;
    Buffer<float> xf, both, hf, ys;
};

// x's rows quantized for p, gathered into pair order (a row is quantized once per format).
uint8_t* gather_quantized(const Kernels& k, const Proj& p, const float* x, int64_t tokens, int64_t topk,
                          const std::vector<int64_t>& order, Buffer<uint8_t>& rows_buf, Buffer<uint8_t>& out_buf) {
    uint8_t* rows = rows_buf.get((size_t)(tokens * p.xs));
    const wren::QuantFn fn = k.quant[p.qtype];
    each_chunk(tokens, (int64_t(1) << 14) / p.cols, [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t) fn(x + t * p.cols, p.cols, rows + t * p.xs);
    });
    uint8_t* out = out_buf.get(order.size() * (size_t)p.xs);
    for (size_t i = 0; i < order.size(); ++i)
        std::memcpy(out + i * p.xs, rows + (order[i] / topk) * p.xs, (size_t)p.xs);
    return out;
}

at::Tensor experts_grouped(const at::Tensor& x_in, const at::Tensor& ids_in, const at::Tensor& weights_in,
                           const at::Tensor& gate_raw, const at::Tensor& up_raw, const at::Tensor& down_raw,
                           at::IntArrayRef qtypes, int64_t inner, int64_t act, double alpha, double limit,
                           const c10::optional<at::Tensor>& gate_bias, const c10::optional<at::Tensor>& up_bias,
                           const c10::optional<at::Tensor>& down_bias, int64_t exact_from) {
    TORCH_CHECK(x_in.dim() == 2 && x_in.scalar_type() == at::kFloat && x_in.device().is_cpu(),
                "wren::experts_grouped: x must be float32 [tokens, hidden] on the CPU");
    TORCH_CHECK(qtypes.size() == 3, "wren::experts_grouped: qtypes are gate's, up's and down's");
    TORCH_CHECK(act == kSwiglu || act == kClampedSwiglu, "wren::experts_grouped: activation ", act, " is not 0 or 1");
    const at::Tensor x = x_in.contiguous();
    const int64_t tokens = x.size(0), hidden = x.size(1);
    TORCH_CHECK(ids_in.dim() == 2 && ids_in.size(0) == tokens && weights_in.sizes() == ids_in.sizes(),
                "wren::experts_grouped: ids and weights must both be [", tokens, ", k]");
    const at::Tensor ids = ids_in.to(at::kLong).contiguous();
    const at::Tensor weights = weights_in.to(at::kFloat).contiguous();
    const int64_t topk = ids.size(1);
    TORCH_CHECK(inner > 0 && gate_raw.size(0) % inner == 0, "wren::experts_grouped: gate's ", gate_raw.size(0),
                " rows are not whole experts of ", inner);
    const int64_t experts = gate_raw.size(0) / inner;
    TORCH_CHECK(up_raw.size(0) == experts * inner && down_raw.size(0) == experts * hidden,
                "wren::experts_grouped: up has ", up_raw.size(0), " rows and down ", down_raw.size(0), "; ", experts,
                " experts make them ", experts * inner, " and ", experts * hidden);
    const Proj gate = proj_of(gate_raw, qtypes[0], inner, hidden, "gate");
    const Proj up = proj_of(up_raw, qtypes[1], inner, hidden, "up");
    const Proj down = proj_of(down_raw, qtypes[2], hidden, inner, "down");
    const float* gb = bias_of(gate_bias, experts, inner, "gate_bias");
    const float* ub = bias_of(up_bias, experts, inner, "up_bias");
    const float* db = bias_of(down_bias, experts, hidden, "down_bias");
    at::Tensor out = at::zeros({tokens, hidden}, x.options());
    const int64_t pairs = tokens * topk;
    if (pairs == 0) return out;
    const Kernels& k = wren::kernels();

    std::vector<int64_t> order;
    std::vector<Segment> segs = sort_pairs(ids.data_ptr<int64_t>(), pairs, experts, order);
    std::vector<int64_t> expert_of(pairs);
    for (const Segment& s : segs) std::fill_n(expert_of.begin() + s.start, s.count, s.expert);

    // Tokens from exact_from on keep float32 activations (a prompt's last rows): within each
    // segment their pairs come last, and their float rows are gathered in that order.
    const int64_t first_exact = exact_from < 0 ? tokens : std::min(exact_from, tokens);
    int64_t exact_pairs = 0;
    std::vector<int64_t> compact(pairs, -1);  // an exact pair's place among the exact pairs
    for (Segment& s : segs) {
        s.exact_at = exact_pairs;
        for (int64_t i = s.start; i < s.start + s.count; ++i)
            if (order[i] / topk >= first_exact) compact[i] = exact_pairs + s.exact++;
        exact_pairs += s.exact;
    }
    thread_local Scratch scratch;
    float* xf = scratch.xf.get((size_t)(exact_pairs * hidden));
    for (int64_t i = 0; i < pairs; ++i)
        if (compact[i] >= 0)
            std::memcpy(xf + compact[i] * hidden, x.data_ptr<float>() + (order[i] / topk) * hidden,
                        (size_t)hidden * sizeof(float));

    // gate and up: one buffer when they share an activation format (rows of exact tokens are
    // quantized too, unused: a call has a few of them)
    uint8_t *xg = nullptr, *xu = nullptr;
    if (exact_pairs < pairs) {
        xg = xu = gather_quantized(k, gate, x.data_ptr<float>(), tokens, topk, order, scratch.rows, scratch.xg);
        if (!(k.quant[up.qtype] == k.quant[gate.qtype] && up.xs == gate.xs))
            xu = gather_quantized(k, up, x.data_ptr<float>(), tokens, topk, order, scratch.rows, scratch.xu);
    }
    float* both = scratch.both.get((size_t)(pairs * 2 * inner));
    run(k, segs, {&gate, &up}, {xg, xu}, {xf, xf}, {0, inner}, both, 2 * inner);

    // the activation, quantized straight into down's format (an exact pair's stays float32)
    uint8_t* hq = scratch.hq.get((size_t)(pairs * down.xs));
    float* hf = scratch.hf.get((size_t)(exact_pairs * inner));
    const wren::QuantFn quant = k.quant[down.qtype];
    // (a decoded token's k pairs are one chunk: run here, with no hand-off)
    each_chunk(pairs, (int64_t(1) << 14) / inner, [&](int64_t b, int64_t e) {
        std::vector<float> h((size_t)inner);
        for (int64_t p = b; p < e; ++p) {
            const float* row = both + p * 2 * inner;
            const int64_t ex = expert_of[p];
            float* dst = compact[p] >= 0 ? hf + compact[p] * inner : h.data();
            activate(act, row, row + inner, gb ? gb + ex * inner : nullptr, ub ? ub + ex * inner : nullptr, inner,
                     (float)alpha, (float)limit, dst);
            if (compact[p] < 0) quant(h.data(), inner, hq + p * down.xs);
        }
    });

    float* ys = scratch.ys.get((size_t)(pairs * hidden));
    run(k, segs, {&down}, {hq}, {hf}, {0}, ys, hidden);

    // each token: its pairs, in choice order, weighted
    std::vector<int64_t> where(pairs);
    for (int64_t i = 0; i < pairs; ++i) where[order[i]] = i;
    const float* w = weights.data_ptr<float>();
    float* o = out.data_ptr<float>();
    each_chunk(tokens, (int64_t(1) << 12) / hidden, [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t)
            for (int64_t j = 0; j < topk; ++j) {
                const int64_t i = where[t * topk + j];
                const float* y = ys + i * hidden;
                const float* bias = db ? db + expert_of[i] * hidden : nullptr;
                const float wt = w[t * topk + j];
                float* ot = o + t * hidden;
                if (bias)
                    for (int64_t c = 0; c < hidden; ++c) ot[c] += (y[c] + bias[c]) * wt;
                else
                    for (int64_t c = 0; c < hidden; ++c) ot[c] += y[c] * wt;
            }
    });
    return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(WREN_OPS_NS, m) {
    m.def("experts_grouped(Tensor x, Tensor ids, Tensor weights, Tensor gate, Tensor up, Tensor down, int[] qtypes, "
          "int inner, int act, float alpha, float limit, Tensor? gate_bias, Tensor? up_bias, Tensor? down_bias, "
          "int exact_from=-1) -> Tensor");
}

TORCH_LIBRARY_IMPL(WREN_OPS_NS, CPU, m) { m.impl("experts_grouped", experts_grouped); }
