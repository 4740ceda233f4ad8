// Bit-exactness harness for Wren's NEON kernel tables (no torch): builds random but valid
// weight and activation blocks, runs every entry a NEON table fills (one whose function
// differs from the scalar table's) and the scalar reference on the same bytes, and compares
// the outputs bit for bit (memcmp of floats and of quantized activation bytes).
//
//   harness            compare every NEON table this CPU runs ("neon", "neon-dotprod", "neon-i8mm")
//   harness --sanity   the scalar table's dots against a double-precision product (any CPU)
//   harness --dispatch the table in use at load (WREN_ISA caps it) and each cap's, no checks
//
// Prints one JSON line per (table, entry, type) and a summary line; exits 1 on any mismatch
// (naming the entry, type and shape) or when nothing was compared.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "wren_quant.h"

using namespace wren;

namespace {

struct Rng {
    uint64_t s;
    explicit Rng(uint64_t seed) : s(seed) {}
    uint64_t next() {  // splitmix64
        uint64_t z = (s += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }
    int below(int n) { return (int)(next() % (uint64_t)n); }
    double uniform() { return (double)(next() >> 11) * (1.0 / 9007199254740992.0); }
    double normal() {
        const double u = uniform() + 1e-300, v = uniform();
        return std::sqrt(-2.0 * std::log(u)) * std::cos(6.283185307179586 * v);
    }
};

// fp16 bits of a finite value: mostly ordinary magnitudes, some subnormals and zeros, either sign.
uint16_t random_half(Rng& r) {
    const int kind = r.below(16);
    uint16_t h;
    if (kind == 0) h = 0;
    else if (kind == 1) h = (uint16_t)(1 + r.below(0x3ff));              // subnormal
    else if (kind == 2) h = 0x7bff;                                       // the largest finite
    else h = (uint16_t)((1 + r.below(20)) << 10 | r.below(0x400));      // exponents 1..20 (up to 2^5)
    if (r.below(2)) h |= 0x8000;
    return h;
}

const char* type_name(int t) {
    const TypeInfo* info = type_info(t);
    return info != nullptr ? info->name : "?";
}

// Offsets of each block's fp16 fields.
std::vector<int> half_fields(int t) {
    switch (t) {
        case Q4_0: case Q5_0: case Q8_0: return {0};
        case Q4_1: case Q5_1: case Q4_K: case Q5_K: return {0, 2};
        case Q2_K: return {80, 82};
        case Q3_K: return {108};
        case Q6_K: return {208};
        default: return {};
    }
}

// nb blocks of type t: random bytes with finite fp16 fields; `fill` >= 0 sets every other
// byte to that value (all quants at their minimum 0x00 or maximum 0xff; Q6_K's scales then
// at -1 / 0; 0x80 / 0x7f give Q8_0's and Q6_K's signed extremes).
std::vector<uint8_t> weight_blocks(int t, int64_t nb, Rng& r, int fill) {
    const TypeInfo* info = type_info(t);
    std::vector<uint8_t> w((size_t)(nb * info->type_size));
    for (auto& b : w) b = fill >= 0 ? (uint8_t)fill : (uint8_t)r.next();
    for (int64_t b = 0; b < nb; ++b)
        for (int off : half_fields(t)) {
            const uint16_t h = random_half(r);
            std::memcpy(&w[(size_t)(b * info->type_size + off)], &h, 2);
        }
    return w;
}

// Activation rows of `cols` floats, by kind: 0 normal, 1 wide-ranging per block, 2 blocks at
// +-amax (every value +-amax), 3 zero blocks mixed in, 4 ties (amax 127, values k + 0.5),
// 5 the 15-bit rounding's ties (amax 16383, values k + 0.5).
std::vector<float> activations(int64_t cols, Rng& r, int kind) {
    std::vector<float> x((size_t)cols);
    for (int64_t i = 0; i < cols; ++i) {
        const int64_t blk = i / 32;
        double v = r.normal();
        switch (kind) {
            case 1: v *= std::ldexp(1.0, (int)(blk * 7 % 41) - 20); break;
            case 2: v = (r.below(2) ? 1.0 : -1.0) * (blk % 2 ? 3.75 : 0.01); break;
            case 3: if (blk % 3 == 1) v = 0.0; break;
            case 4: v = (i % 32 == 0) ? 127.0 : (double)(r.below(254) - 127) + 0.5; break;
            case 5: v = (i % 32 == 0) ? 16383.0 : (double)(r.below(32766) - 16383) + 0.5; break;
            default: break;
        }
        x[(size_t)i] = (float)v;
    }
    return x;
}

std::string hex(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.9g (0x%08x)", (double)f, u);
    return buf;
}

struct Tally {
    std::string table, entry, type;
    long cases = 0, mismatches = 0;
};

struct Checker {
    std::vector<Tally> tallies;
    long checks = 0, mismatches = 0;
    Tally* cur = nullptr;

    void begin(const std::string& table, const char* entry, int t) {
        tallies.push_back(Tally{table, entry, type_name(t)});
        cur = &tallies.back();
    }
    // One comparison of n floats (or bytes when bytes is true).
    void compare(const void* got, const void* want, size_t n_bytes, const std::string& shape) {
        ++checks;
        ++cur->cases;
        if (std::memcmp(got, want, n_bytes) == 0) return;
        ++mismatches;
        ++cur->mismatches;
        size_t at = 0;
        while (at < n_bytes && ((const uint8_t*)got)[at] == ((const uint8_t*)want)[at]) ++at;
        std::string detail;
        if (cur->entry != "quant" && cur->entry != "quant_wide") {
            float g, w;
            std::memcpy(&g, (const uint8_t*)got + at / 4 * 4, 4);
            std::memcpy(&w, (const uint8_t*)want + at / 4 * 4, 4);
            detail = ", \"index\": " + std::to_string(at / 4) + ", \"got\": \"" + hex(g) + "\", \"want\": \"" + hex(w) + "\"";
        } else {
            detail = ", \"byte\": " + std::to_string(at);
        }
        if (cur->mismatches <= 3)
            std::printf("{\"mismatch\": true, \"table\": \"%s\", \"entry\": \"%s\", \"type\": \"%s\", \"shape\": \"%s\"%s}\n",
                        cur->table.c_str(), cur->entry.c_str(), cur->type.c_str(), shape.c_str(), detail.c_str());
    }
};

const int kPlain[] = {Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K};
const int kGroups[] = {Q4_0_X8, Q4_1_X8, Q4_K_X8};
const int64_t kNb[] = {1, 2, 7, 64};
const int kWeightFills[] = {-1, -1, 0x00, 0xff, 0x80, 0x7f};

// Quantized activations of n rows (the scalar table's quantizer: both tables then read
// the same bytes), xs bytes apart.
std::vector<uint8_t> quantize_rows(const Kernels& k, int t, const std::vector<float>& x, int64_t cols, int n,
                                   int64_t* xs, bool wide) {
    *xs = cols / type_info(t)->block * (wide ? k.wide_bytes[t] : k.act_bytes[t]);
    std::vector<uint8_t> out((size_t)(*xs * n));
    for (int j = 0; j < n; ++j) (wide ? k.quant_wide[t] : k.quant[t])(x.data() + j * cols, cols, out.data() + j * *xs);
    return out;
}

// Raw 8-bit activation blocks at the integer extremes (not from the quantizer): every qs
// -128, +127 or random in -128..127, sums consistent.
void extreme_q8(std::vector<uint8_t>& xq, int t, Rng& r, int mode) {
    const bool k = type_info(t)->kquant;
    const size_t size = k ? sizeof(BlockQ8K) : sizeof(BlockQ8);
    for (size_t off = 0; off + size <= xq.size(); off += size) {
        int8_t* qs = k ? ((BlockQ8K*)&xq[off])->qs : ((BlockQ8*)&xq[off])->qs;
        const int n = k ? 256 : 32;
        for (int i = 0; i < n; ++i) qs[i] = (int8_t)(mode == 0 ? -128 : mode == 1 ? 127 : (int)(r.next() & 0xff) - 128);
        if (k) {
            BlockQ8K* b = (BlockQ8K*)&xq[off];
            for (int g = 0; g < 16; ++g) {
                int s = 0;
                for (int i = 0; i < 16; ++i) s += qs[16 * g + i];
                b->bsums[g] = (int16_t)s;
            }
            b->d = 0.0078125f;
        } else {
            BlockQ8* b = (BlockQ8*)&xq[off];
            int s = 0;
            for (int i = 0; i < 32; ++i) s += qs[i];
            b->sum = s;
            b->d = -0.0078125f;
        }
    }
}

std::string shape_str(int64_t nb, int n, const char* what, int fill, int xkind) {
    return "nb=" + std::to_string(nb) + " " + what + "=" + std::to_string(n) + " wfill=" + std::to_string(fill) +
           " xkind=" + std::to_string(xkind);
}

void check_table(Checker& c, const std::string& name, const Kernels& s, const Kernels& v) {
    Rng r(12345);
    // activation quantization: the bytes, for every type whose quantizer the table replaces
    for (int t : kPlain) {
        for (bool wide : {false, true}) {
            const QuantFn qs = wide ? s.quant_wide[t] : s.quant[t], qv = wide ? v.quant_wide[t] : v.quant[t];
            if (qv == nullptr || qv == qs) continue;
            const int bytes = wide ? v.wide_bytes[t] : v.act_bytes[t];
            if (bytes != (wide ? s.wide_bytes[t] : s.act_bytes[t])) continue;
            c.begin(name, wide ? "quant_wide" : "quant", t);
            for (int64_t nb : kNb)
                for (int xkind = 0; xkind < 6; ++xkind) {
                    const int64_t cols = nb * type_info(t)->block;
                    const std::vector<float> x = activations(cols, r, xkind);
                    std::vector<uint8_t> a((size_t)(nb * bytes), 0xa5), b((size_t)(nb * bytes), 0xa5);
                    qs(x.data(), cols, a.data());
                    qv(x.data(), cols, b.data());
                    c.compare(b.data(), a.data(), a.size(), shape_str(nb, 1, "rows", -1, xkind));
                }
        }
    }
    // 8-bit dots: qdot, qdot_rows and qdot_wrows against the scalar qdot row by row
    for (int t : kPlain) {
        const TypeInfo* info = type_info(t);
        const bool fq = v.qdot[t] != s.qdot[t], fr = v.qdot_rows[t] != nullptr && v.qdot_rows[t] != s.qdot_rows[t],
                   fw = v.qdot_wrows[t] != nullptr && v.qdot_wrows[t] != s.qdot_wrows[t];
        if (!fq && !fr && !fw) continue;
        for (const char* entry : {"qdot", "qdot_rows", "qdot_wrows"}) {
            const std::string e = entry;
            if ((e == "qdot" && !fq) || (e == "qdot_rows" && !fr) || (e == "qdot_wrows" && !fw)) continue;
            c.begin(name, entry, t);
            for (int64_t nb : kNb)
                for (int fi = 0; fi < 6; ++fi)
                    for (int xkind = 0; xkind < 8; ++xkind) {
                        if (nb == 64 && (fi >= 2 || xkind >= 2)) continue;  // extremes on the small shapes
                        const int fill = kWeightFills[fi];
                        const int nmax = e == "qdot" ? 1 : 5;
                        const int64_t cols = nb * info->block, row_bytes = nb * info->type_size;
                        const int wrows = e == "qdot_wrows" ? 1 + r.below(9) : 1;
                        std::vector<uint8_t> w;
                        for (int i = 0; i < wrows; ++i) {
                            const std::vector<uint8_t> one = weight_blocks(t, nb, r, fill);
                            w.insert(w.end(), one.begin(), one.end());
                        }
                        const int n = e == "qdot_rows" ? 1 + (int)(r.below(nmax)) : 1;
                        const std::vector<float> x = activations(cols * n, r, xkind < 5 ? xkind : 0);
                        int64_t xs = 0;
                        std::vector<uint8_t> xq = quantize_rows(s, t, x, cols, n, &xs, false);
                        if (xkind >= 5) extreme_q8(xq, t, r, xkind - 5);
                        std::vector<float> want((size_t)(n * wrows)), got((size_t)(n * wrows), -7.f);
                        for (int i = 0; i < wrows; ++i)
                            for (int j = 0; j < n; ++j)
                                want[(size_t)(j * wrows + i)] = s.qdot[t](w.data() + i * row_bytes, nb, xq.data() + j * xs);
                        if (e == "qdot") {
                            got[0] = v.qdot[t](w.data(), nb, xq.data());
                        } else if (e == "qdot_rows") {
                            v.qdot_rows[t](w.data(), nb, xq.data(), xs, n, got.data(), 1);
                        } else {
                            v.qdot_wrows[t](w.data(), row_bytes, wrows, nb, xq.data(), got.data());
                        }
                        c.compare(got.data(), want.data(), want.size() * 4,
                                  shape_str(nb, e == "qdot_wrows" ? wrows : n, e == "qdot_wrows" ? "wrows" : "n", fill, xkind));
                    }
        }
    }
    // two weight rows at once: the scalar qdot of each row and token
    for (int t : kPlain) {
        if (v.qdot_pair[t] == nullptr) continue;
        const TypeInfo* info = type_info(t);
        c.begin(name, "qdot_pair", t);
        for (int64_t nb : kNb)
            for (int fi = 0; fi < 6; ++fi)
                for (int xkind = 0; xkind < 8; ++xkind) {
                    if (nb == 64 && (fi >= 2 || xkind >= 2)) continue;
                    const int fill = kWeightFills[fi];
                    const int64_t cols = nb * info->block;
                    const int64_t row_bytes = nb * info->type_size + 16 * r.below(2);  // rows apart by more than a row
                    const int n = 1 + (int)(c.cur->cases % 7);  // the tiles of four and two tokens, the odd one
                    std::vector<uint8_t> w((size_t)(row_bytes + nb * info->type_size), 0x5a);
                    for (int i = 0; i < 2; ++i) {
                        const std::vector<uint8_t> one = weight_blocks(t, nb, r, fill);
                        std::memcpy(w.data() + i * row_bytes, one.data(), one.size());
                    }
                    const std::vector<float> x = activations(cols * n, r, xkind < 5 ? xkind : 0);
                    int64_t xs = 0;
                    std::vector<uint8_t> xq = quantize_rows(s, t, x, cols, n, &xs, false);
                    if (xkind >= 5) extreme_q8(xq, t, r, xkind - 5);
                    const int64_t os = 2 + r.below(3);
                    std::vector<float> want((size_t)(n * os), 0.f), got((size_t)(n * os), 0.f);
                    for (int j = 0; j < n; ++j)
                        for (int i = 0; i < 2; ++i)
                            want[(size_t)(j * os + i)] = s.qdot[t](w.data() + i * row_bytes, nb, xq.data() + j * xs);
                    v.qdot_pair[t](w.data(), row_bytes, nb, xq.data(), xs, n, got.data(), os);
                    c.compare(got.data(), want.data(), want.size() * 4, shape_str(nb, n, "n", fill, xkind));
                }
    }
    // interleaved groups: the scalar group kernel on the same group and activation rows
    for (int t : kGroups) {
        if (v.qdot_group[t] == nullptr || v.qdot_group[t] == s.qdot_group[t]) continue;
        const TypeInfo* info = type_info(t);
        const int base = info->base;
        const TypeInfo* binfo = type_info(base);
        c.begin(name, "qdot_group", t);
        for (int64_t nb : {1, 2, 7, 16})
            for (int fi = 0; fi < 6; ++fi)
                for (int xkind = 0; xkind < 8; ++xkind) {
                    const int fill = kWeightFills[fi];
                    const int64_t cols = nb * binfo->block, row_bytes = nb * binfo->type_size;
                    // 1..7 tokens in turn: the i8mm kernels' tiles of four and two and the odd one left
                    const int n = 1 + (int)(c.cur->cases % 7);
                    std::vector<uint8_t> rows;
                    for (int i = 0; i < 8; ++i) {
                        const std::vector<uint8_t> one = weight_blocks(base, nb, r, fill);
                        rows.insert(rows.end(), one.begin(), one.end());
                    }
                    std::vector<uint8_t> g(rows.size());
                    repack_group(t, rows.data(), row_bytes, g.data());
                    const std::vector<float> x = activations(cols * n, r, xkind < 5 ? xkind : 0);
                    int64_t xs = 0;
                    std::vector<uint8_t> xq = quantize_rows(s, t, x, cols, n, &xs, false);
                    if (xkind >= 5) extreme_q8(xq, base, r, xkind - 5);
                    const int64_t os = 8 + r.below(3);
                    std::vector<float> want((size_t)(n * os), 0.f), got((size_t)(n * os), 0.f);
                    s.qdot_group[t](g.data(), nb, xq.data(), xs, n, want.data(), os);
                    v.qdot_group[t](g.data(), nb, xq.data(), xs, n, got.data(), os);
                    c.compare(got.data(), want.data(), want.size() * 4, shape_str(nb, n, "n", fill, xkind));
                }
    }
    // the wide head: the scalar x16dot_rows on the same wide activations
    for (int t : {Q8_0, Q6_K}) {
        if (v.x16dot_rows[t] == nullptr || v.x16dot_rows[t] == s.x16dot_rows[t]) continue;
        const TypeInfo* info = type_info(t);
        c.begin(name, "x16dot_rows", t);
        for (int64_t nb : kNb)
            for (int fi = 0; fi < 6; ++fi)
                for (int xkind = 0; xkind < 5; ++xkind) {
                    if (nb == 64 && (fi >= 2 || xkind >= 2)) continue;
                    const int fill = kWeightFills[fi];
                    const int64_t cols = nb * info->block;
                    const int n = 1 + r.below(5);
                    const std::vector<uint8_t> w = weight_blocks(t, nb, r, fill);
                    const std::vector<float> x = activations(cols * n, r, xkind);
                    int64_t xs = 0;
                    const std::vector<uint8_t> xq = quantize_rows(s, t, x, cols, n, &xs, true);
                    const int64_t os = 1 + r.below(3);
                    std::vector<float> want((size_t)(n * os), 0.f), got((size_t)(n * os), 0.f);
                    s.x16dot_rows[t](w.data(), nb, xq.data(), xs, n, want.data(), os);
                    v.x16dot_rows[t](w.data(), nb, xq.data(), xs, n, got.data(), os);
                    c.compare(got.data(), want.data(), want.size() * 4, shape_str(nb, n, "n", fill, xkind));
                }
    }
}

// The scalar table's 8-bit dots against the double product of the dequantized weights and
// the activations as quantized (d * q): only float32 accumulation separates them.
int sanity(const Kernels& s) {
    Rng r(99);
    long checks = 0, bad = 0;
    for (int t : kPlain) {
        const TypeInfo* info = type_info(t);
        for (int64_t nb : kNb) {
            const int64_t cols = nb * info->block;
            const std::vector<uint8_t> w = weight_blocks(t, nb, r, -1);
            const std::vector<float> x = activations(cols, r, 0);
            int64_t xs = 0;
            const std::vector<uint8_t> xq = quantize_rows(s, t, x, cols, 1, &xs, false);
            std::vector<float> wf((size_t)cols);
            dequantize_row(t, w.data(), wf.data(), cols);
            double ref = 0.0, mag = 0.0;
            for (int64_t i = 0; i < cols; ++i) {
                double xv;
                if (info->kquant) {
                    const BlockQ8K& b = ((const BlockQ8K*)xq.data())[i / 256];
                    xv = (double)b.d * b.qs[i % 256];
                } else {
                    const BlockQ8& b = ((const BlockQ8*)xq.data())[i / 32];
                    xv = (double)b.d * b.qs[i % 32];
                }
                ref += (double)wf[(size_t)i] * xv;
                mag += std::fabs((double)wf[(size_t)i] * xv);
            }
            const double got = s.qdot[t](w.data(), nb, xq.data());
            ++checks;
            if (!(std::fabs(got - ref) <= 1e-5 * mag + 1e-30)) {
                ++bad;
                std::printf("{\"sanity_failure\": true, \"type\": \"%s\", \"nb\": %lld, \"got\": %.9g, \"want\": %.9g}\n",
                            type_name(t), (long long)nb, got, ref);
            }
        }
    }
    std::printf("{\"summary\": true, \"mode\": \"sanity\", \"isa\": \"%s\", \"checks\": %ld, \"mismatches\": %ld}\n", s.isa,
                checks, bad);
    return bad == 0 && checks > 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc > 1 && std::strcmp(argv[1], "--dispatch") == 0) {
        const std::string loaded = kernels().isa;  // the table in use at load: the best, capped by WREN_ISA
        const std::string neon = select_isa("neon"), dot = select_isa("neon-dotprod"), mm = select_isa("neon-i8mm"),
                          scalar = select_isa("scalar");
        std::printf("{\"dispatch\": true, \"loaded\": \"%s\", \"scalar\": \"%s\", \"neon\": \"%s\", \"neon-dotprod\": \"%s\", "
                    "\"neon-i8mm\": \"%s\"}\n",
                    loaded.c_str(), scalar.c_str(), neon.c_str(), dot.c_str(), mm.c_str());
        return 0;
    }
    const char* scalar_name = select_isa("scalar");
    const Kernels scalar = kernels();
    if (scalar_name == nullptr || std::strcmp(scalar.isa, "scalar") != 0) {
        std::printf("{\"error\": \"no scalar table\"}\n");
        return 1;
    }
    if (argc > 1 && std::strcmp(argv[1], "--sanity") == 0) return sanity(scalar);
    const std::string best = select_isa("");
    Checker c;
    std::vector<std::string> tables;
    for (const char* cap : {"neon", "neon-dotprod", "neon-i8mm"}) {
        const char* got = select_isa(cap);
        if (got == nullptr || std::strcmp(got, cap) != 0) continue;  // this CPU (or build) has no such table
        const Kernels table = kernels();
        tables.push_back(cap);
        check_table(c, cap, scalar, table);
    }
    select_isa("");
    for (const Tally& t : c.tallies)
        std::printf("{\"table\": \"%s\", \"entry\": \"%s\", \"type\": \"%s\", \"cases\": %ld, \"mismatches\": %ld}\n",
                    t.table.c_str(), t.entry.c_str(), t.type.c_str(), t.cases, t.mismatches);
    std::string list;
    for (const std::string& t : tables) list += (list.empty() ? "\"" : ", \"") + t + "\"";
    std::printf("{\"summary\": true, \"best\": \"%s\", \"tables\": [%s], \"checks\": %ld, \"mismatches\": %ld}\n",
                best.c_str(), list.c_str(), c.checks, c.mismatches);
    return c.mismatches == 0 && c.checks > 0 ? 0 : 1;
}
