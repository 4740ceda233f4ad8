// Arm: the portable kernels for now (compiled with the baseline NEON the compiler
// auto-vectorizes to); hand-written NEON dot-product kernels are not written yet.
#include "wren_quant.h"

namespace wren {
bool fill_neon(Kernels&) { return false; }
}  // namespace wren
