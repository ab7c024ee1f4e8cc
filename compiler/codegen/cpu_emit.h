// LLVM IR for one fused kernel on the host CPU (cpu_compiler.cc compiles and loads it). For a kernel over dims
// [2, 16, 48, 48] reading x (same dims) and s ([1, 16, 1, 1]), the collapsed iteration space
// (kernel_layout.h) is rows = 2*16 (outer) x 2304 (inner, contiguous for x, stride 0 for s); the generated
// loop is
//   for r in [row_begin, row_end): base_x = r*2304; base_s = (r % 16)
//     for j in [0, 2304): out[r*2304 + j] = f(x[base_x + j], s[base_s])
// which LLVM's loop vectorizer turns into SIMD code for the host. A row-reduction kernel (Softmax,
// LayerNorm, reductions over the last dim) makes one pass over the row per reduction, then one storing the
// outputs. Element math comes from elemental_emitter.h with this file's vectorizable exp/erf/tanh.
// Internal to compiler/codegen; not thread-safe per module (one thread emits into one module).
#ifndef CJIT_COMPILER_CODEGEN_CPU_EMIT_H_
#define CJIT_COMPILER_CODEGEN_CPU_EMIT_H_

#include <string>

#include "absl/status/status.h"
#include "compiler/codegen/fusion_plan.h"
#include "compiler/codegen/kernel_layout.h"
#include "llvm/IR/Module.h"

namespace cjit {

// Adds function `symbol` computing kernel `k` over the iteration space `c` (Collapse of its dims) to `m`,
// with cpu_compiler.h's CpuKernelFn signature (args, meta, consts, row_begin, row_end). Errors name the
// op it cannot emit.
absl::Status EmitCpuKernel(llvm::Module& m, const FusedKernel& k, const Collapsed& c, const std::string& symbol);

}  // namespace cjit

#endif  // CJIT_COMPILER_CODEGEN_CPU_EMIT_H_
