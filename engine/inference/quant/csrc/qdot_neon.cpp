// Arm NEON kernels (arm64 with GCC or Clang: Linux, macOS, Windows on Arm through
// clang-cl): qdot_neon.inc compiled three times, for the Armv8.0 baseline (every arm64 CPU),
// with the dot-product extension (FEAT_DotProd: vdotq_s32), which fill_neon_dotprod installs
// only where the CPU reports it, and with the int8 matrix multiply too (FEAT_I8MM, Armv8.6:
// the prompt path's interleaved groups by SMMLA, qdot_neon_i8mm.inc), which fill_neon_i8mm
// installs only where the CPU reports both. All give the scalar table's bits
// (tests/engine/inference/neon runs them against it under qemu). Elsewhere (x86, MSVC) the
// fills return false.
#include "wren_quant.h"

#if defined(__aarch64__) && (defined(__GNUC__) || defined(__clang__))
#include <arm_neon.h>

#include <type_traits>

#if defined(__linux__)
#include <sys/auxv.h>
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1 << 20)
#endif
#ifndef HWCAP2_I8MM
#define HWCAP2_I8MM (1 << 13)
#endif
#elif defined(__APPLE__)
#include <sys/sysctl.h>
#elif defined(_WIN32)
#include <windows.h>
#ifndef PF_ARM_V82_DP_INSTRUCTIONS_AVAILABLE
#define PF_ARM_V82_DP_INSTRUCTIONS_AVAILABLE 43
#endif
// Windows reports only SVE's int8 matrix multiply (Windows SDK 26100), which implies the
// NEON one; a CPU with i8mm but no SVE (Snapdragon X) stays on the dotprod table.
#ifndef PF_ARM_SVE_I8MM_INSTRUCTIONS_AVAILABLE
#define PF_ARM_SVE_I8MM_INSTRUCTIONS_AVAILABLE 57
#endif
#endif

#define TGT
#define NS neon
#define WREN_NEON_DOT 0
#include "qdot_neon.inc"
#undef TGT
#undef NS
#undef WREN_NEON_DOT

// GCC 12's arm_neon.h declares vdotq_s32 under "arch=armv8.2-a+dotprod" and will not inline
// it into a function marked only "+dotprod"; Clang spells the feature "dotprod". Clang
// before 16 declares the dot-product intrinsics only when the whole file is compiled for
// them (__ARM_FEATURE_DOTPROD: Apple's default CPUs have it), so without that the kernels
// write the instruction itself (sdot, in functions marked for it).
#if defined(__clang__) && !defined(__ARM_FEATURE_DOTPROD)
#define WREN_NEON_SDOT_ASM 1
#else
#define WREN_NEON_SDOT_ASM 0
#endif
#if defined(__clang__)
#define TGT __attribute__((target("dotprod")))
#else
#define TGT __attribute__((target("arch=armv8.2-a+dotprod")))
#endif
#define NS neon_dot
#define WREN_NEON_DOT 1
#include "qdot_neon.inc"
#undef TGT
#undef NS
#undef WREN_NEON_DOT

// The same spellings for the int8 matrix multiply: GCC 12 declares vmmlaq_s32 under
// "arch=armv8.2-a+i8mm", Clang under "i8mm" (before 16 only for a whole file compiled with
// it, __ARM_FEATURE_MATMUL_INT8: else the kernels write smmla themselves).
#if defined(__clang__) && !defined(__ARM_FEATURE_MATMUL_INT8)
#define WREN_NEON_SMMLA_ASM 1
#else
#define WREN_NEON_SMMLA_ASM 0
#endif
#if defined(__clang__)
#define TGT __attribute__((target("dotprod,i8mm")))
#else
#define TGT __attribute__((target("arch=armv8.2-a+dotprod+i8mm")))
#endif
#define NS neon_mm
#define WREN_NEON_DOT 1
#include "qdot_neon.inc"
#include "qdot_neon_i8mm.inc"
#undef TGT
#undef NS
#undef WREN_NEON_DOT

namespace wren {
namespace {
bool cpu_has_dotprod() {
#if defined(__linux__)
    return (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
#elif defined(__APPLE__)
    int v = 0;
    size_t n = sizeof(v);
    return sysctlbyname("hw.optional.arm.FEAT_DotProd", &v, &n, nullptr, 0) == 0 && v != 0;
#elif defined(_WIN32)
    return IsProcessorFeaturePresent(PF_ARM_V82_DP_INSTRUCTIONS_AVAILABLE) != 0;
#else
    return false;
#endif
}

bool cpu_has_i8mm() {
#if defined(__linux__)
    return (getauxval(AT_HWCAP2) & HWCAP2_I8MM) != 0;
#elif defined(__APPLE__)
    int v = 0;
    size_t n = sizeof(v);
    return sysctlbyname("hw.optional.arm.FEAT_I8MM", &v, &n, nullptr, 0) == 0 && v != 0;
#elif defined(_WIN32)
    return IsProcessorFeaturePresent(PF_ARM_SVE_I8MM_INSTRUCTIONS_AVAILABLE) != 0;
#else
    return false;
#endif
}
}  // namespace

bool fill_neon(Kernels& k) {
    neon::fill(k);
    k.isa = "neon";
    return true;
}

bool fill_neon_dotprod(Kernels& k) {
    if (!cpu_has_dotprod()) return false;
    neon_dot::fill(k);
    k.isa = "neon-dotprod";
    return true;
}

bool fill_neon_i8mm(Kernels& k) {
    if (!cpu_has_dotprod() || !cpu_has_i8mm()) return false;
    neon_mm::fill_i8mm(k);
    k.isa = "neon-i8mm";
    return true;
}
}  // namespace wren
#else
namespace wren {
bool fill_neon(Kernels&) { return false; }
bool fill_neon_dotprod(Kernels&) { return false; }
bool fill_neon_i8mm(Kernels&) { return false; }
}  // namespace wren
#endif
