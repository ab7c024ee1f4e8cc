// A compiled cluster: the cluster body, its fusion plan, and the JIT-compiled code of the fused kernels.
// Run() executes the plan's steps over one buffer map: fused kernels (generated code, rows split across
// threads) and library steps (the CPU kernels: oneDNN matmul/conv, reductions, data movement).
// Intermediates are freed after their last use.
//
// Thread-safety: immutable after Compile(); Run() may be called concurrently.
#ifndef CJIT_RUNTIME_EXECUTABLE_H_
#define CJIT_RUNTIME_EXECUTABLE_H_

#include <atomic>
#include <optional>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cache/memory_cache.h"
#include "compiler/codegen/cpu_compiler.h"
#include "compiler/codegen/fusion_plan.h"
#include "compiler/ir/graph.h"
#include "runtime/cpu/kernel.h"
#include "compiler/ops/op_registry.h"
#include "base/mutex.h"

namespace cjit {

class Profiler;
class Autotuner;
class StepTuning;

// Constants of a cluster body whose values derive from dims: a dynamic-shape plan of a structure whose
// specialization folded Shape ops into Reshape targets (runtime/session.h). InstantiateDims asks for their
// values at the new dims instead of using the body's. Thread-safe.
class DerivedConstants {
 public:
  virtual ~DerivedConstants() = default;
  // Whether the constant named `name` is one.
  virtual bool Derives(const std::string& name) const = 0;
  // Its value where the named values have the dims `dims_of` gives (null: not known); an error when it
  // cannot be computed from them.
  virtual absl::StatusOr<std::shared_ptr<const Tensor>> Evaluate(
      const std::string& name, const std::function<const Dims*(const std::string&)>& dims_of) const = 0;
};

class CpuExecutable : public CacheEntry {
 public:
  // `like` (optional): an executable of the same cluster structure at another signature, compiled with the
  // same options; its fusion plan is rebound to `body` (RebindFusionPlan) instead of planning again, where
  // the check passes.
  static absl::StatusOr<std::shared_ptr<const CpuExecutable>> Compile(std::shared_ptr<const Graph> body,
                                                                      const CpuCompileOptions& options,
                                                                      const CpuExecutable* like = nullptr);
  // From a persistent-cache payload (ExportPayload of an equal body): loads object code, no compilation.
  // `options` gives the plan options (excess_precision, codegen_single_ops) the payload was compiled with.
  static absl::StatusOr<std::shared_ptr<const CpuExecutable>> Load(std::shared_ptr<const Graph> body,
                                                                   absl::string_view payload,
                                                                   const CpuCompileOptions& options = {});
  // The disk/remote cache entry of this executable (PayloadKind::kCpuCode).
  absl::StatusOr<std::string> ExportPayload() const { return ExportCpuPayload(plan_); }

  // Inputs in body-input order; returns body outputs in order. `profiler` (optional) receives one event per
  // step (fused kernel or library step), tagged with `cluster_id`. `tuner` (optional): library steps with
  // algorithm candidates run the autotuned choice (runtime/autotune.h; each step keeps its choice);
  // `execution` is how many times this signature ran before (on either path), for the tuning threshold.
  // With `tune_inline` false, a step past the threshold runs its default until Autotune() (a background
  // job) has tuned it.
  //
  // `instance` (optional, from InstantiateDims of this executable): the inputs have that instance's dims
  // instead of the body's; steps run their default algorithms (no tuning at other dims).
  struct DimsInstance;
  absl::StatusOr<std::vector<Tensor>> Run(const std::vector<const Tensor*>& inputs, int threads,
                                          Profiler* profiler = nullptr, int cluster_id = -1,
                                          Autotuner* tuner = nullptr, int64_t execution = 0,
                                          bool tune_inline = true, const DimsInstance* instance = nullptr) const;
  // This executable at another input signature of its body, without a graph, a plan or code of its own
  // (dynamic-shape plans: runtime/session.h). Every body value's dims come from the op table's shape
  // functions run over the body's nodes from `input_dims` (body-input order; constants keep theirs); then
  // each fused kernel is re-derived at those dims (RederiveKernels: members keep the iteration space, views
  // read the same sources) and must have the structure its code was generated for (iteration rank, inner
  // access of every input: kernel_layout.h KernelStructure), so its compiled function serves it with new
  // loop bounds and strides. In-place Concats must stay in place. NotFoundError naming the first check that
  // fails: the caller specializes for those dims instead. Costs one shape-function call per body node.
  // `derived` (optional): constants of the body whose values derive from dims. Each may only be the target
  // of a Reshape (whose kernel reads its inferred dims, never the target's values) or a non-scalar input of
  // fused kernels (read from memory at run time; the instance binds the new value); its value at these dims
  // is computed where it is first read (the values it is derived from must be computed before that node in
  // the body), and anything else is a miss.
  absl::StatusOr<std::shared_ptr<const DimsInstance>> InstantiateDims(const std::vector<Dims>& input_dims,
                                                                      const DerivedConstants* derived = nullptr) const;
  // Claims the background autotuning job: true when some step still has no choice and its default has
  // run long enough for `tuner`'s --autotune_min_op_time_ms, and no job is claimed (a job releases the
  // claim when it ends, so steps that became ready later get another).
  bool ClaimAutotuneJob(const Autotuner& tuner) const;
  ~CpuExecutable() override;
  // Resolves the autotuning choice of every library step with candidates ahead of execution (the compile
  // path): looks each op signature up and, once `executions` reaches the threshold (and its default has
  // run --autotune_min_op_time_ms), tunes it on inputs of the body's shapes (constants are the real
  // ones). Thread-safe, idempotent.
  // Sets the calling thread's OpenMP thread count to `threads` while it tunes (restored after).
  void Autotune(Autotuner& tuner, int threads, int64_t executions) const;
  const FusionPlan& plan() const { return plan_; }
  // Whether the plan was rebound from a `like` executable (Compile) rather than planned.
  bool plan_rebound() const { return plan_rebound_; }

  // Memory-cache accounting: the object code, plus an estimate of the body graph and step lists it keeps.
  // (about 1 KB per body node: measured 150 KB for a 180-node ppocr_mobile_cls cluster with heaptrack).
  size_t bytes() const override { return code_->code_bytes() + 1024 + 1024 * body_->nodes().size(); }
  size_t code_bytes() const { return code_->code_bytes(); }
  int num_fused_kernels() const { return static_cast<int>(plan_.kernels.size()); }
  int num_library_steps() const { return static_cast<int>(plan_.steps.size() - plan_.kernels.size()); }

 private:
  void AutotuneSteps(Autotuner& tuner, int threads, int64_t executions) const;
  CpuExecutable() = default;
  static absl::StatusOr<std::shared_ptr<const CpuExecutable>> Build(
      std::shared_ptr<const Graph> body, const CpuCompileOptions& options,
      const std::function<absl::StatusOr<std::unique_ptr<CpuCode>>(const FusionPlan&)>& make_code,
      const CpuExecutable* like = nullptr);
  // The parts of Build after the plan and the code: trace names and args per fused kernel; value slots and
  // each step's input / output slots; in-place Concats; when each slot is freed; library steps that skip
  // shape inference or run as plain float32 binary arithmetic.
  void DescribeKernels();
  void AssignSlots();
  void PlanInPlaceConcats();
  void PlanFrees();
  void PlanStepShortcuts();
  std::vector<std::string> kernel_names_;  // per fused kernel: "fusion_<k>" (trace event / NVTX range name)
  std::vector<std::string> kernel_args_;  // per fused kernel: its static trace args (ops, kind, shape, bytes)
  std::vector<std::string> kernel_dims_free_args_;  // the same without shape and bytes (DimsInstance runs)
  std::shared_ptr<const Graph> body_;
  FusionPlan plan_;
  bool plan_rebound_ = false;
  bool excess_precision_ = false, codegen_single_ops_ = false;  // the plan options it was built with
  std::unique_ptr<CpuCode> code_;
  // Value slots: body values -> index; last step that reads each slot.
  std::vector<const Value*> slot_values_;
  std::vector<std::vector<int>> step_inputs_, step_outputs_, free_after_;
  std::vector<std::vector<bool>> step_input_const_;
  std::vector<int> input_slots_, output_slots_, constant_slots_;
  std::vector<std::vector<InferOutput>> step_inferred_;  // per library step with known output shapes
  // In-place Concat (outer size 1): each input slot written directly into its byte range of the output.
  struct AliasInto {
    int base_slot = -1;
    size_t byte_offset = 0;
  };
  std::vector<AliasInto> alias_;           // per slot; base_slot < 0 = a buffer of its own
  std::vector<bool> skip_step_;            // Concat steps made redundant
  // Library steps that are a lone float32 binary arithmetic op (a single-op fused group on the CPU, e.g.
  // a squeeze-excitation scale or a residual Add): run by BinaryArithmeticF32 directly, without the
  // kernel dispatch of EvaluateNode (~3 us per call, as much as the math on small tensors).
  std::vector<std::optional<BinaryArithmetic>> binary_step_;
  std::unique_ptr<StepTuning[]> step_tuning_;  // per step (internally synchronized)
  mutable std::atomic<bool> autotune_job_claimed_{false};
  // What InstantiateDims needs of the body, built on its first call.
  struct DimsLayout;
  mutable Mutex dims_layout_mu_;
  mutable std::shared_ptr<const DimsLayout> dims_layout_ ABSL_GUARDED_BY(dims_layout_mu_);
  absl::StatusOr<std::shared_ptr<const DimsLayout>> GetDimsLayout() const;
  // InstantiateDims' steps: every body value's dims at the input dims (shape functions of the nodes whose
  // inputs changed, derived constants evaluated where read), then the fused kernels' metadata, then the
  // slots, steps and in-place Concat offsets. A NotFound status: these dims need another specialization.
  struct DimsPropagation;
  absl::Status PropagateDims(const DimsLayout& l, const std::vector<Dims>& input_dims,
                             const DerivedConstants* derived, DimsPropagation& s) const;
  absl::Status DimsInferInputs(const DimsLayout& l, size_t n, const DerivedConstants* derived, DimsPropagation& s,
                               std::vector<InferInput>& in) const;
  absl::Status InstantiateKernels(const DimsLayout& l, const DimsPropagation& s, DimsInstance* inst) const;
  absl::Status InstantiateSteps(const DimsLayout& l, const DimsPropagation& s, DimsInstance* inst) const;
  Tensor& Materialize(std::vector<Tensor>& slots, int slot, const DimsInstance* instance) const;
};

}  // namespace cjit

#endif  // CJIT_RUNTIME_EXECUTABLE_H_
