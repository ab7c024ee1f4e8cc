// GpuExecutor's internal state (runtime/cuda/gpu_executor.h): the slots, the steps placement made and the
// CUDA graph state. Placement (lowering each op to a device step) lives in gpu_lowering.cc and
// gpu_single_op.cc, execution in gpu_executor.cc. Internal to runtime/cuda.
#ifndef CJIT_RUNTIME_CUDA_GPU_EXECUTOR_IMPL_H_
#define CJIT_RUNTIME_CUDA_GPU_EXECUTOR_IMPL_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/status_macros.h"
#include "compiler/codegen/fusion_plan.h"
#include "runtime/cpu/kernel.h"
#include "runtime/cuda/gpu_executor.h"
#include "runtime/executor.h"
#include "base/mutex.h"

namespace cjit {

// The fusion-plan options of GPU placement: post-ops stay out of convolutions (cuDNN runs them), GEMM
// epilogues are fused (cuBLASLt).
FusionPlanOptions GpuPlanOptions();

struct GpuExecutor::Impl {
  struct Step {
    enum class Kind { kKernel, kGemm, kConv, kPool, kGather, kHost, kAlias, kConcat, kSplit, kPad };
    Kind kind = Kind::kHost;
    std::vector<int> in, implicit, out;  // kGemm: in = {a, b, bias or -1}
    std::vector<int> free_after;
    // kKernel
    std::shared_ptr<const FusedKernelHandle> fn;
    std::shared_ptr<DeviceMemory> meta, consts;
    int64_t rows = 0, row_elems = 0;
    bool row_kernel = false;
    // kGemm, kConv
    std::unique_ptr<GemmOp> gemm;
    std::unique_ptr<ConvOp> conv;
    std::unique_ptr<PoolOp> pool;
    std::unique_ptr<GatherOp> gather;  // kGather: in = {data, indices}
    // kConcat: input i goes to byte offset concat_offset[i] of each of `concat_rows` output rows, as a
    // block of concat_width[i] bytes; an output row is concat_pitch bytes. kSplit, the inverse: output i
    // is the block at concat_offset[i] of each input row.
    std::vector<size_t> concat_offset, concat_width;
    size_t concat_rows = 0, concat_pitch = 0;
    // kPad: planes x h x w into planes x out_h x out_w at (top, left), the rest `pad_fill`.
    size_t pad_planes = 0, pad_h = 0, pad_w = 0, pad_top = 0, pad_left = 0, pad_out_h = 0, pad_out_w = 0;
    uint32_t pad_fill = 0;
    // kHost
    const Node* node = nullptr;
    const KernelFn* kernel = nullptr;
    std::vector<bool> in_const;
    std::vector<PostOp> post_ops;
    std::vector<InferOutput> inferred;
    bool static_shapes = false;
  };
  struct SlotInfo {
    const Value* value = nullptr;
    DType dtype = DType::kInvalid;
    Dims dims;
    bool static_dims = false;
    std::shared_ptr<const Tensor> constant;
    std::shared_ptr<DeviceMemory> constant_on_device;
  };

  std::shared_ptr<const Graph> graph;
  std::vector<std::unique_ptr<Graph>> owned;  // single-op bodies, cluster bodies with moved conv biases
  std::shared_ptr<DeviceBackend> device;
  GpuExecutorOptions options;
  std::vector<SlotInfo> slots;
  std::unordered_map<const Value*, int> slot_of;
  std::vector<Step> steps;
  std::vector<int> input_slots, output_slots;
  GpuPlacement placement;
  SubgraphRunner runner;
  mutable Mutex sub_mu;
  mutable std::map<const Graph*, std::unique_ptr<Executor>> subgraphs ABSL_GUARDED_BY(sub_mu);

  // CUDA graph (options.graph_level): captured at the second run when every step runs on the device and
  // every shape is static; replayed under graph_mu (its buffers are fixed).
  struct GraphState {
    std::unique_ptr<DeviceGraph> graph;
    std::vector<std::shared_ptr<DeviceMemory>> inputs, outputs;  // input_slots / output_slots order
    std::vector<std::shared_ptr<DeviceMemory>> boundary;         // boundary_slots order
    std::shared_ptr<DeviceMemory> error_flag;                    // the gathers' (reset by the graph)
  };
  // steps[0, prologue_steps) are the host prologue: host steps (and reshapes of their results) reading only
  // graph inputs, constants and earlier prologue results. boundary_slots: the prologue results a later
  // step reads or the graph returns (a graph replay copies them into buffers of its own).
  size_t prologue_steps = 0;
  std::vector<int> boundary_slots;
  std::vector<std::string> gathers;  // the Gather/GatherND nodes on the device (an index error names them)
  std::string graph_ineligible;  // why runs never use a graph; "" = they may
  mutable Mutex graph_mu;
  mutable std::unique_ptr<GraphState> graph_state ABSL_GUARDED_BY(graph_mu);
  mutable std::string graph_failure ABSL_GUARDED_BY(graph_mu);  // why capture failed ("" = not tried or succeeded)
  mutable int64_t plain_runs ABSL_GUARDED_BY(graph_mu) = 0;
  mutable int64_t graph_replays ABSL_GUARDED_BY(graph_mu) = 0;

  int Slot(const Value* v) {
    auto it = slot_of.find(v);
    if (it != slot_of.end()) return it->second;
    SlotInfo info;
    info.value = v;
    info.dtype = v->dtype;
    info.static_dims = v->shape.fully_known();
    if (info.static_dims) info.dims = v->shape.concrete();
    info.constant = v->constant;
    slots.push_back(info);
    int s = static_cast<int>(slots.size()) - 1;
    slot_of[v] = s;
    return s;
  }

  // Places one op; `step` (optional) is its plan step, whose post-ops (a GEMM epilogue) it may carry.
  absl::Status PlaceNode(const Node& n, const PlanStep* step = nullptr);
  absl::Status PlaceCluster(const Node& n);
  absl::StatusOr<bool> PlacePlan(const FusionPlan& plan, bool single_op);
  absl::Status AddHost(const Node& n, const std::vector<PostOp>* post_ops, const Value* output);
  absl::StatusOr<bool> TryGemm(const Node& n, const PlanStep* step);
  absl::StatusOr<bool> TryConv(const Node& n);
  absl::StatusOr<bool> TryPool(const Node& n);
  absl::StatusOr<bool> TryGather(const Node& n);
  absl::StatusOr<bool> TryConvTranspose(const Node& n);
  absl::StatusOr<bool> TrySingleOpKernel(const Node& n);
  bool TryPitchedCopies(const Node& n, const Value* whole, const std::vector<Value*>& parts, Step::Kind kind);
  bool TryConcat(const Node& n);
  bool TrySplit(const Node& n);
  bool TryPad(const Node& n);
  void AddAlias(int from, int to);
  // Moves the host prologue's steps to the front (see prologue_steps) and sets boundary_slots.
  void HoistHostPrologue();
  // A GEMM/conv/pool step reading `in` and writing n's output 0.
  void AddLibraryStep(Step st, const Node& n, std::vector<int> in, const Value* output = nullptr) {
    st.node = &n;
    st.in = std::move(in);
    st.out = {Slot(output ? output : n.outputs[0])};
    steps.push_back(std::move(st));
  }
  absl::StatusOr<std::shared_ptr<DeviceMemory>> Upload(const void* data, size_t bytes) {
    CJIT_ASSIGN_OR_RETURN(std::shared_ptr<DeviceMemory> b, device->Allocate(std::max<size_t>(bytes, 8)));
    CJIT_RETURN_IF_ERROR(device->CopyToDevice(b->address(), data, bytes));
    return b;
  }
  absl::StatusOr<std::vector<Tensor>> RunSubgraph(const Graph& g, const std::vector<Tensor>& inputs,
                                                  const std::vector<std::pair<std::string, Tensor>>& captures) const;
};

}  // namespace cjit

#endif  // CJIT_RUNTIME_CUDA_GPU_EXECUTOR_IMPL_H_
