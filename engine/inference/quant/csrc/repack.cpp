// Interleaved layouts of the GGUF block types: a group of rows' blocks side by side, so
// one vector load holds a few weights of every row in the group and each row's sum
// stays in its own lane (no horizontal sums, one scale vector per block). Only a
// permutation of bytes: a group keeps the place its rows had, and unpack_group gives
// the file's rows back bit for bit.
#include <cstring>

#include "wren_quant.h"

namespace wren {

void repack_group(int qtype, const uint8_t* src, int64_t row_bytes, uint8_t* dst) {
    switch (qtype) {
        case Q4_0_X8: {
            const int64_t nb = row_bytes / 18;
            for (int64_t b = 0; b < nb; ++b) {
                uint8_t* o = dst + b * 144;
                for (int r = 0; r < 8; ++r) {
                    const uint8_t* blk = src + r * row_bytes + b * 18;
                    std::memcpy(o + 2 * r, blk, 2);
                    for (int c = 0; c < 4; ++c) std::memcpy(o + 16 + 32 * c + 4 * r, blk + 2 + 4 * c, 4);
                }
            }
            break;
        }
        default: break;
    }
}

void unpack_group(int qtype, const uint8_t* src, int64_t row_bytes, uint8_t* dst) {
    switch (qtype) {
        case Q4_0_X8: {
            const int64_t nb = row_bytes / 18;
            for (int64_t b = 0; b < nb; ++b) {
                const uint8_t* o = src + b * 144;
                for (int r = 0; r < 8; ++r) {
                    uint8_t* blk = dst + r * row_bytes + b * 18;
                    std::memcpy(blk, o + 2 * r, 2);
                    for (int c = 0; c < 4; ++c) std::memcpy(blk + 2 + 4 * c, o + 16 + 32 * c + 4 * r, 4);
                }
            }
            break;
        }
        default: break;
    }
}

}  // namespace wren
