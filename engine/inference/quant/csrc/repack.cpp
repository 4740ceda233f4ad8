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

namespace wren {

void repack_group(int qtype, const uint8_t* src, int64_t row_bytes, uint8_t* dst) {
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
    static const std::string setting = env_setting("WREN_REPACK");
    if (env_off("WREN_REPACK")) return -1;
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
