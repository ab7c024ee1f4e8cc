// A compiled cluster: the cluster body, its fusion plan, and the JIT-compiled code of the fused kernels.
// Run() executes the plan's steps over one buffer map: fused kernels (generated code, rows split across
// threads) and library steps (the CPU kernels: oneDNN matmul/conv, reductions, data movement).
// Intermediates are freed after their last use.
//
// Thread-safety: immutable after Compile(); Run() may be called concurrently.
#ifndef CJIT_RUNTIME_EXECUTABLE_H_
#define CJIT_RUNTIME_EXECUTABLE_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "cache/memory_cache.h"
#include "compiler/codegen/cpu_compiler.h"
#include "compiler/codegen/fusion_plan.h"
#include "compiler/ir/graph.h"

namespace cjit {

class CpuExecutable : public CacheEntry {
 public:
  static absl::StatusOr<std::shared_ptr<const CpuExecutable>> Compile(std::shared_ptr<const Graph> body,
                                                                      const CpuCompileOptions& options);

  // Inputs in body-input order; returns body outputs in order.
  absl::StatusOr<std::vector<Tensor>> Run(const std::vector<const Tensor*>& inputs, int threads) const;

  size_t bytes() const override { return code_->code_bytes() + 1024; }
  size_t code_bytes() const { return code_->code_bytes(); }
  int num_fused_kernels() const { return static_cast<int>(plan_.kernels.size()); }
  int num_library_steps() const { return static_cast<int>(plan_.steps.size() - plan_.kernels.size()); }

 private:
  CpuExecutable() = default;
  std::shared_ptr<const Graph> body_;
  FusionPlan plan_;
  std::unique_ptr<CpuCode> code_;
  // Value slots: body values -> index; last step that reads each slot.
  std::vector<const Value*> slot_values_;
  std::vector<std::vector<int>> step_inputs_, step_outputs_, free_after_;
  std::vector<std::vector<bool>> step_input_const_;
  std::vector<int> input_slots_, output_slots_;
};

}  // namespace cjit

#endif  // CJIT_RUNTIME_EXECUTABLE_H_
