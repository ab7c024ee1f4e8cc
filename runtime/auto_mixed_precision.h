// Runs the automatic mixed precision pass (compiler/passes/auto_mixed_precision.h) on a specialized graph as
// the flags select (--auto_mixed_precision, --amp_*list_{add,remove}, --amp_log_path), with the decision
// log: VLOG(2) in this module (--vmodule=auto_mixed_precision=2, as TF_CPP_VMODULE) one line per node with
// its list, its color and the reason; with --amp_log_path=DIR, DIR/amp_<sig>_before.txt and _after.txt
// (textual IR) and DIR/amp_<sig>_lists.txt (the four lists in effect and every decision).
// Thread-safety: as the pass; the log files are written atomically.
#ifndef CJIT_RUNTIME_AUTO_MIXED_PRECISION_H_
#define CJIT_RUNTIME_AUTO_MIXED_PRECISION_H_

#include <string>

#include "absl/status/status.h"
#include "compiler/passes/auto_mixed_precision.h"
#include "flags/flags.h"

namespace cjit {

// The pass options the flags select; `on_gpu` resolves --auto_mixed_precision=auto (float16 on a GPU,
// bfloat16 on the CPU). Returns false in *enabled when AMP is off.
AmpOptions AmpOptionsFromFlags(const Flags& flags, bool on_gpu, bool* enabled);

// Marks float32 MatMul/Gemm nodes with the cjit_precision attribute --matmul_precision selects, and Conv
// nodes with --conv_precision's (when not "highest"); the CPU kernels read it. An attribute, so the
// precision is part of every cache key.
void ApplyMatmulPrecision(Graph& graph, const Flags& flags);

// The CPU rule of --amp_require_native_isa: for `mode` (bfloat16, float16 or auto) the 16-bit type to use
// in *low and "", or what this CPU (within --max_cpu_isa) lacks for it ("no AVX512_BF16 or AMX-BF16").
// TensorFlow's oneDNN auto mixed precision enables bfloat16 only where the CPU has it, for the same reason:
// emulated 16-bit arithmetic is slower than float32.
std::string AmpMissingCpuIsa(const std::string& mode, DType* low);

// Runs the pass when the flags enable it (on the CPU, where AmpMissingCpuIsa allows it or
// --amp_require_native_isa=false; otherwise one warning, and the graph stays float32). `sig` numbers the
// log files.
absl::Status RunAutoMixedPrecision(Graph& graph, const Flags& flags, bool on_gpu, const AmpRuleHook& hook, int sig);

}  // namespace cjit

#endif  // CJIT_RUNTIME_AUTO_MIXED_PRECISION_H_
