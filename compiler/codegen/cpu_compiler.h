// CPU back end: lowers a FusionPlan's fused kernels to LLVM IR (through the shared elemental emitter),
// optimizes it for the host CPU with a pass pipeline tailored to these loop kernels (inlining, cleanup,
// LICM, the loop vectorizer for the host's vector features), and JIT-compiles it with LLVM ORC
// (LLJIT). LLVM errors become absl::Status; nothing in here exits or aborts the process.
//
// Each generated kernel has the C signature
//   void kernel(void* const* args, const int64_t* meta, const float* consts, int64_t row_begin, int64_t row_end)
// where args holds the kernel's input buffers (FusedKernel::inputs order) then its output buffers, and the
// iteration space is rows x row_elems (collapsed from the kernel's dims); callers split rows across
// threads. Buffers are dense row-major float32. Kernels are shape- and constant-generic: the collapsed
// dims and the per-input strides of the outer dims are read from `meta` (CpuKernel::meta) and the scalar
// float constants from `consts` (CpuKernel::consts), so one compiled kernel serves every kernel of the same
// structure (ops, attributes, wiring, broadcast pattern), across clusters and signatures: compiled kernels
// are cached process-wide by that structure.
//
// Thread-safety: CompileForCpu may be called from several threads (the JIT is shared and locked);
// compiled kernels are reentrant. Compiled kernels stay loaded for the life of the process (they are
// shared through the kernel cache; a few KB each).
#ifndef CJIT_COMPILER_CODEGEN_CPU_COMPILER_H_
#define CJIT_COMPILER_CODEGEN_CPU_COMPILER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/codegen/fusion_plan.h"

namespace cjit {

using CpuKernelFn = void (*)(void* const* args, const int64_t* meta, const float* consts, int64_t row_begin,
                             int64_t row_end);

struct CpuKernel {
  CpuKernelFn fn = nullptr;
  int64_t rows = 0;           // iterations of the outer loop
  int64_t row_elems = 0;      // elements per row
  std::vector<int64_t> meta;  // runtime dims and strides passed to fn
  std::vector<float> consts;  // scalar constants passed to fn
  bool reused = false;        // taken from the process-wide kernel cache
};

class CpuCode {
 public:
  virtual ~CpuCode() = default;
  // One per FusionPlan::kernels entry, same order.
  virtual const std::vector<CpuKernel>& kernels() const = 0;
  // Size of the object code generated for this plan (0 for kernels reused from the kernel cache).
  virtual size_t code_bytes() const = 0;
};

struct CpuCompileOptions {
  // Test hook: fail every compilation with this message (non-empty), to exercise the fallback path;
  // "llvm-fatal-error" raises a real LLVM fatal error inside code generation (recovered into a Status).
  std::string fail_for_testing;
  // Only kernels already compiled in this process (the process-wide kernel cache, keyed by structure):
  // if any kernel of the plan would need LLVM, fail with NotFoundError and generate nothing. How a
  // structurally known cluster is instantiated for a new shape signature in microseconds.
  bool reuse_only = false;
  // FusionPlanOptions::excess_precision of the plan built for the cluster (--allow_excess_precision).
  bool excess_precision = true;
  // false: FusionPlanOptions::single_op_groups_as_library for the plan built for the cluster
  // (--cpu_codegen_single_ops).
  bool codegen_single_ops = false;
  // Row kernels (FusedKernel::row_reduction) through LLVM's optimizing code generator (instruction
  // selection and the greedy register allocator: ~1.7-3.4x faster Softmax / LayerNorm kernels, ~5x their
  // machine-code time); false: the fast one, as elementwise kernels always. The runtime sets it for a
  // signature that repeated (hot) and clears it for a structure compiled because a stream of new shapes
  // reached the threshold, where the compile must finish soon to serve them (cluster_runner.cc).
  bool optimize_row_kernels = true;
  // Threads that compile the plan's new kernels concurrently (the calling thread included; each kernel is
  // an independent module with its own target machine, so the code does not depend on this). >= 1.
  int compile_threads = 1;
  // Called after each compile phase of each newly compiled kernel with steady-clock nanoseconds, from the
  // thread that ran the phase (so possibly from several threads at once): "fusion_plan", "llvm_emit",
  // "llvm_optimize", "machine_code" (object code), "jit_link" (runtime/profiler.h traces them).
  std::function<void(const char* phase, int64_t start_ns, int64_t end_ns)> on_phase;
  // Asked before each kernel and between its compile phases (emit, optimize, machine code): true stops the
  // compilation with CancelledError, loading nothing more (kernels linked already stay in the process's
  // kernel cache). A session being destroyed cancels its background compile this way, within one phase
  // (a few ms) instead of the whole compile. May be called from several threads at once.
  std::function<bool()> cancelled;
};

absl::StatusOr<std::unique_ptr<CpuCode>> CompileForCpu(const FusionPlan& plan, const CpuCompileOptions& options);

// Persistent-cache payload of a compiled plan: the object code of every kernel it uses. Loading it adds
// the objects the process does not have yet to the JIT (no compilation). Errors: DataLossError for a
// malformed payload or object code the JIT rejects.
absl::StatusOr<std::string> ExportCpuPayload(const FusionPlan& plan);
absl::StatusOr<std::unique_ptr<CpuCode>> LoadCpuPayload(const FusionPlan& plan, absl::string_view payload);

// For --dump_to (runtime/dump.h): per fused kernel of `plan` (same order), the LLVM IR as emitted, after
// optimization, and the host assembly the JIT's target machine produces for it. Nothing is loaded.
struct CpuKernelDump {
  std::string symbol, llvm_ir, llvm_ir_opt, assembly;
};
absl::StatusOr<std::vector<CpuKernelDump>> DumpCpuKernels(const FusionPlan& plan);

// "cpu=<name> features=<+f1,+f2,...> llvm=<version>": everything about the host that changes generated code
// (part of the cache key).
std::string HostTargetDescription();

}  // namespace cjit

#endif  // CJIT_COMPILER_CODEGEN_CPU_COMPILER_H_
