// CPU back end: lowers a FusionPlan's fused kernels to LLVM IR (through the shared elemental emitter),
// optimizes it at O3 for the host CPU (vectorized for its features), and JIT-compiles it with LLVM ORC
// (LLJIT). LLVM errors become absl::Status; nothing in here exits or aborts the process.
//
// Each generated kernel has the C signature
//   void kernel(void* const* args, int64_t row_begin, int64_t row_end)
// where args holds the kernel's input buffers (FusedKernel::inputs order) then its output buffers, and the
// iteration space is rows x row_elems (collapsed from the kernel's dims); callers split rows across
// threads. Buffers are dense row-major float32.
//
// Thread-safety: CompileForCpu may be called from several threads (the JIT is shared and locked);
// compiled kernels are reentrant. Code stays loaded until its CpuCode is destroyed.
#ifndef CJIT_COMPILER_CODEGEN_CPU_COMPILER_H_
#define CJIT_COMPILER_CODEGEN_CPU_COMPILER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/codegen/fusion_plan.h"

namespace cjit {

using CpuKernelFn = void (*)(void* const* args, int64_t row_begin, int64_t row_end);

struct CpuKernel {
  CpuKernelFn fn = nullptr;
  int64_t rows = 0;       // iterations of the outer loop
  int64_t row_elems = 0;  // elements per row
};

class CpuCode {
 public:
  virtual ~CpuCode() = default;
  // One per FusionPlan::kernels entry, same order.
  virtual const std::vector<CpuKernel>& kernels() const = 0;
  // Size of the generated object code.
  virtual size_t code_bytes() const = 0;
};

struct CpuCompileOptions {
  // Test hook: fail every compilation with this message (non-empty), to exercise the fallback path.
  std::string fail_for_testing;
};

absl::StatusOr<std::unique_ptr<CpuCode>> CompileForCpu(const FusionPlan& plan, const CpuCompileOptions& options);

// "cpu=<name> features=<+f1,+f2,...> llvm=<version>": everything about the host that changes generated code
// (part of the cache key).
std::string HostTargetDescription();

}  // namespace cjit

#endif  // CJIT_COMPILER_CODEGEN_CPU_COMPILER_H_
