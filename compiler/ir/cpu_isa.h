// The x86-64 instruction sets the hand-written CPU kernels, the LLVM CPU JIT, BLIS and oneDNN may use: the
// CPU's (CPUID), capped by --max_cpu_isa (ONEDNN_MAX_CPU_ISA's names and meaning), so that one machine can
// run and measure the code paths of a smaller one — an AVX-512 server benchmarking what an AVX2-only EPYC
// Zen 3 or a laptop runs:
//   baseline          x86-64 (SSE2): the build's own target
//   avx2              + AVX2, FMA, F16C (x86-64-v3)
//   avx512_core       + AVX-512 F/BW/DQ/VL
//   avx512_core_vnni  + AVX-512 VNNI
//   avx512_core_bf16  + AVX-512 BF16
//   avx512_core_amx   + AMX (BF16, INT8)
//   all               no cap (the default)
// The cap is process-wide. The hand-written kernels read it at every call; the LLVM JIT, BLIS and oneDNN
// read it when they are first used in the process (SetMaxCpuIsa before the first session runs).
// Thread-safety: every function may be called concurrently.
#ifndef CJIT_COMPILER_IR_CPU_ISA_H_
#define CJIT_COMPILER_IR_CPU_ISA_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cjit {

enum class CpuIsa : int { kBaseline = 0, kAvx2 = 1, kAvx512 = 2, kAvx512Vnni = 3, kAvx512Bf16 = 4, kAmx = 5, kAll = 6 };

// InvalidArgumentError naming the accepted values for anything else.
absl::StatusOr<CpuIsa> ParseCpuIsa(absl::string_view name);
std::string CpuIsaName(CpuIsa isa);

void SetMaxCpuIsa(CpuIsa isa);
CpuIsa MaxCpuIsa();
// The largest level the CPU itself has (no cap).
CpuIsa HardwareCpuIsa();

// Features at or below the cap.
bool CpuHasAvx2();        // AVX2 + FMA + F16C
bool CpuHasAvx512();      // AVX-512 F, BW, DQ, VL
bool CpuHasAvx512Vnni();
bool CpuHasAvx512Bf16();
bool CpuHasAmx();         // AMX-BF16
bool CpuHasAvx512Fp16();  // AVX512-FP16 (Sapphire Rapids and later; allowed from the avx512_core_amx level)

}  // namespace cjit

#endif  // CJIT_COMPILER_IR_CPU_ISA_H_
