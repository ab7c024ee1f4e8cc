// GpuExecutor's runs (runtime/cuda/gpu_executor.h): the steps placement made (gpu_lowering.cc), launched in
// order with their buffers allocated and freed per run, or captured once into a CUDA graph and replayed.
#include <algorithm>
#include <chrono>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/logging.h"
#include "base/status_macros.h"
#include "compiler/codegen/fusion_plan.h"
#include "compiler/codegen/kernel_layout.h"
#include "compiler/ops/op_registry.h"
#include "compiler/passes/decompose.h"
#include "compiler/passes/mark_for_compilation.h"
#include "runtime/cpu/kernel.h"
#include "runtime/cpu/resize.h"
#include "runtime/cuda/gpu_autotune.h"
#include "runtime/cuda/gpu_executor.h"
#include "runtime/cuda/gpu_executor_impl.h"
#include "runtime/executor.h"
#include "runtime/run_options.h"
#include "base/mutex.h"

namespace cjit {

absl::StatusOr<std::vector<Tensor>> GpuExecutor::Impl::RunSubgraph(
    const Graph& g, const std::vector<Tensor>& inputs,
    const std::vector<std::pair<std::string, Tensor>>& captures) const {
  const Executor* sub = nullptr;
  {
    MutexLock lock(&sub_mu);
    auto it = subgraphs.find(&g);
    if (it == subgraphs.end()) {
      std::shared_ptr<const Graph> alias(graph, &g);  // owned by a node attribute of `graph`
      CJIT_ASSIGN_OR_RETURN(std::unique_ptr<Executor> e, Executor::Create(alias, options.host_threads));
      it = subgraphs.emplace(&g, std::move(e)).first;
    }
    sub = it->second.get();
  }
  return sub->Run(inputs, captures);
}

GpuExecutor::GpuExecutor(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GpuExecutor::~GpuExecutor() = default;

const GpuPlacement& GpuExecutor::placement() const { return impl_->placement; }

namespace {

// The values of one run, per slot: host tensors and device buffers, constants filled in.
struct RunValues {
  explicit RunValues(const GpuExecutor::Impl& m) : host(m.slots.size()), on_device(m.slots.size()) {
    for (size_t s = 0; s < m.slots.size(); ++s) {
      if (m.slots[s].constant) {
        host[s] = *m.slots[s].constant;
        on_device[s] = m.slots[s].constant_on_device;
      }
    }
  }
  std::vector<Tensor> host;
  std::vector<std::shared_ptr<DeviceMemory>> on_device;
  std::shared_ptr<DeviceMemory> error_flag;  // the gathers' (int32), made by the first one
};

// After a run's outputs were read back: an InvalidArgumentError when a gather met an index outside its data.
absl::Status CheckGatherIndices(const GpuExecutor::Impl& m, const std::shared_ptr<DeviceMemory>& error_flag) {
  if (!error_flag) return absl::OkStatus();
  int32_t flag = 0;
  CJIT_RETURN_IF_ERROR(m.device->CopyToHost(&flag, error_flag->address(), sizeof(flag)));
  if (flag == 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "an index of ", m.gathers.size() == 1 ? "Gather node '" : "one of the Gather nodes '",
      absl::StrJoin(m.gathers, "', '"), "' is out of the range of its data (ONNX allows [-n, n-1])"));
}

absl::Status NotComputed(const GpuExecutor::Impl& m, int s) {
  return absl::InternalError(absl::StrCat("GPU executor: value '", m.slots[s].value->name, "' was not computed"));
}

absl::Status ShapeMismatch(const GpuExecutor::Impl& m, int s) {
  return absl::InternalError(absl::StrCat("GPU executor: value '", m.slots[s].value->name,
                                          "' has dims that differ from its specialized shape"));
}

// Slot s's value in device memory at `address`, copied to the host (waits for the work writing it).
absl::StatusOr<Tensor> CopyOut(const GpuExecutor::Impl& m, int s, uint64_t address) {
  Tensor t(m.slots[s].dtype, m.slots[s].dims);
  CJIT_RETURN_IF_ERROR(m.device->CopyToHost(t.raw(), address, t.nbytes()));
  return t;
}

absl::Status EnsureHost(const GpuExecutor::Impl& m, RunValues& v, int s) {
  if (v.host[s].defined()) return absl::OkStatus();
  if (!v.on_device[s]) return NotComputed(m, s);
  CJIT_ASSIGN_OR_RETURN(v.host[s], CopyOut(m, s, v.on_device[s]->address()));
  return absl::OkStatus();
}

// Steps [begin, end) of one run (graph inputs set by the caller, on the host or on the device).
absl::Status RunSteps(const GpuExecutor::Impl& m, RunValues& v, size_t begin = 0,
                      size_t end = std::numeric_limits<size_t>::max()) {
  const DeviceBackend& dev = *m.device;
  std::vector<Tensor>& host = v.host;
  std::vector<std::shared_ptr<DeviceMemory>>& on_device = v.on_device;
  auto ensure_device = [&](int s) -> absl::Status {
    if (on_device[s]) return absl::OkStatus();
    const Tensor& t = host[s];
    if (!t.defined()) return NotComputed(m, s);
    if (m.slots[s].static_dims && t.dims() != m.slots[s].dims) return ShapeMismatch(m, s);
    CJIT_ASSIGN_OR_RETURN(on_device[s], dev.Allocate(t.nbytes()));
    return dev.CopyToDevice(on_device[s]->address(), t.raw(), t.nbytes());
  };
  auto ensure_host = [&](int s) { return EnsureHost(m, v, s); };
  auto allocate_output = [&](int s) -> absl::Status {
    const GpuExecutor::Impl::SlotInfo& info = m.slots[s];
    size_t bytes = static_cast<size_t>(NumElements(info.dims)) * DTypeSize(info.dtype);
    CJIT_ASSIGN_OR_RETURN(on_device[s], dev.Allocate(bytes));
    host[s] = Tensor();
    if (m.options.poison_outputs) CJIT_RETURN_IF_ERROR(dev.Fill(on_device[s]->address(), 0xFF, bytes));
    return absl::OkStatus();
  };
  end = std::min(end, m.steps.size());
  for (size_t step_index = begin; step_index < end; ++step_index) {
    const GpuExecutor::Impl::Step& st = m.steps[step_index];
    if (const char* why = RunCancellationReason())
      return RunCancelledError(why, absl::StrCat("GPU plan step ", step_index));
    switch (st.kind) {
      case GpuExecutor::Impl::Step::Kind::kKernel: {
        std::vector<uint64_t> ptrs;
        for (int s : st.in) {
          CJIT_RETURN_IF_ERROR(ensure_device(s));
          ptrs.push_back(on_device[s]->address());
        }
        for (int s : st.out) {
          CJIT_RETURN_IF_ERROR(allocate_output(s));
          ptrs.push_back(on_device[s]->address());
        }
        FusedLaunchArgs launch{st.rows, st.row_elems, st.row_kernel, st.meta->address(), st.consts->address()};
        CJIT_RETURN_IF_ERROR(dev.LaunchFused(*st.fn, launch, ptrs));
        break;
      }
      case GpuExecutor::Impl::Step::Kind::kAlias: {  // same elements, the output's dims
        int from = st.in[0], to = st.out[0];
        if (on_device[from]) {
          on_device[to] = on_device[from];
          host[to] = Tensor();
        } else {
          CJIT_RETURN_IF_ERROR(ensure_host(from));
          host[to] = host[from].Reshaped(m.slots[to].dims);
          on_device[to] = nullptr;
        }
        break;
      }
      case GpuExecutor::Impl::Step::Kind::kConcat: {
        CJIT_RETURN_IF_ERROR(allocate_output(st.out[0]));
        uint64_t dst = on_device[st.out[0]]->address();
        for (size_t i = 0; i < st.in.size(); ++i) {
          if (st.concat_width[i] == 0 || st.concat_rows == 0) continue;
          CJIT_RETURN_IF_ERROR(ensure_device(st.in[i]));
          CJIT_RETURN_IF_ERROR(dev.Copy2D(dst + st.concat_offset[i], st.concat_pitch, on_device[st.in[i]]->address(),
                                          st.concat_width[i], st.concat_width[i], st.concat_rows));
        }
        break;
      }
      case GpuExecutor::Impl::Step::Kind::kSplit: {
        CJIT_RETURN_IF_ERROR(ensure_device(st.in[0]));
        uint64_t src = on_device[st.in[0]]->address();
        for (size_t i = 0; i < st.out.size(); ++i) {
          CJIT_RETURN_IF_ERROR(allocate_output(st.out[i]));
          if (st.concat_width[i] == 0 || st.concat_rows == 0) continue;
          CJIT_RETURN_IF_ERROR(dev.Copy2D(on_device[st.out[i]]->address(), st.concat_width[i],
                                          src + st.concat_offset[i], st.concat_pitch, st.concat_width[i],
                                          st.concat_rows));
        }
        break;
      }
      case GpuExecutor::Impl::Step::Kind::kConv: {
        for (int s : st.in)
          if (s >= 0) CJIT_RETURN_IF_ERROR(ensure_device(s));
        CJIT_RETURN_IF_ERROR(allocate_output(st.out[0]));
        CJIT_RETURN_IF_ERROR(st.conv->Run(on_device[st.in[0]]->address(), on_device[st.in[1]]->address(),
                                          st.in[2] >= 0 ? on_device[st.in[2]]->address() : 0,
                                          on_device[st.out[0]]->address()));
        break;
      }
      case GpuExecutor::Impl::Step::Kind::kPool: {
        CJIT_RETURN_IF_ERROR(ensure_device(st.in[0]));
        CJIT_RETURN_IF_ERROR(allocate_output(st.out[0]));
        CJIT_RETURN_IF_ERROR(st.pool->Run(on_device[st.in[0]]->address(), on_device[st.out[0]]->address()));
        break;
      }
      case GpuExecutor::Impl::Step::Kind::kGather: {
        for (int s : st.in) CJIT_RETURN_IF_ERROR(ensure_device(s));
        CJIT_RETURN_IF_ERROR(allocate_output(st.out[0]));
        if (!v.error_flag) {
          CJIT_ASSIGN_OR_RETURN(v.error_flag, dev.Allocate(sizeof(int32_t)));
          CJIT_RETURN_IF_ERROR(dev.Fill(v.error_flag->address(), 0, sizeof(int32_t)));
        }
        CJIT_RETURN_IF_ERROR(st.gather->Run(on_device[st.out[0]]->address(), on_device[st.in[0]]->address(),
                                            on_device[st.in[1]]->address(), v.error_flag->address()));
        break;
      }
      case GpuExecutor::Impl::Step::Kind::kPad: {
        CJIT_RETURN_IF_ERROR(ensure_device(st.in[0]));
        CJIT_RETURN_IF_ERROR(allocate_output(st.out[0]));
        CJIT_RETURN_IF_ERROR(dev.PadPlanes(on_device[st.out[0]]->address(), st.pad_fill, on_device[st.in[0]]->address(),
                                           st.pad_planes, st.pad_h, st.pad_w, st.pad_top, st.pad_left, st.pad_out_h,
                                           st.pad_out_w));
        break;
      }
      case GpuExecutor::Impl::Step::Kind::kGemm: {
        for (int s : st.in)
          if (s >= 0) CJIT_RETURN_IF_ERROR(ensure_device(s));
        CJIT_RETURN_IF_ERROR(allocate_output(st.out[0]));
        CJIT_RETURN_IF_ERROR(st.gemm->Run(on_device[st.in[0]]->address(), on_device[st.in[1]]->address(),
                                          st.in[2] >= 0 ? on_device[st.in[2]]->address() : 0,
                                          on_device[st.out[0]]->address()));
        break;
      }
      case GpuExecutor::Impl::Step::Kind::kHost: {
        KernelContext ctx;
        ctx.node = st.node;
        ctx.threads = m.options.host_threads;
        ctx.run_subgraph = &m.runner;
        ctx.input_is_constant = &st.in_const;
        ctx.post_ops = st.post_ops.empty() ? nullptr : &st.post_ops;
        for (int s : st.in) {
          if (s >= 0) CJIT_RETURN_IF_ERROR(ensure_host(s));
          ctx.inputs.push_back(s >= 0 ? &host[s] : nullptr);
        }
        for (int s : st.implicit) {
          CJIT_RETURN_IF_ERROR(ensure_host(s));
          ctx.implicit.push_back(&host[s]);
        }
        if (st.static_shapes) {
          ctx.static_inferred = &st.inferred;
        } else {
          CJIT_RETURN_IF_ERROR(InferNode(*st.node, InferInputsFromValues(ctx.inputs), ctx.inferred));
        }
        ctx.outputs.resize(st.out.size());
        CJIT_RETURN_IF_ERROR(CheckKernelResult(ctx, (*st.kernel)(ctx), st.out));
        for (size_t k = 0; k < st.out.size(); ++k) {
          if (st.out[k] < 0) continue;
          host[st.out[k]] = std::move(ctx.outputs[k]);
          on_device[st.out[k]] = nullptr;
        }
        break;
      }
    }
    for (int s : st.free_after) {
      host[s] = Tensor();
      on_device[s] = nullptr;
    }
  }
  return absl::OkStatus();
}

}  // namespace

namespace {

// Graph runs take their inputs as captured: same dims and dtype as the specialized graph's.
absl::Status CheckInputs(const GpuExecutor::Impl& m, const std::vector<Tensor>& inputs) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    const GpuExecutor::Impl::SlotInfo& info = m.slots[m.input_slots[i]];
    if (inputs[i].dims() != info.dims || inputs[i].dtype() != info.dtype) return ShapeMismatch(m, m.input_slots[i]);
  }
  return absl::OkStatus();
}

}  // namespace

// Under graph_mu, inputs checked (CheckInputs): graph inputs go to fixed device buffers, then the steps are
// captured (nothing runs).
absl::Status GpuExecutor::CaptureGraph(const Impl& m, const std::vector<Tensor>& inputs) {
  m.graph_mu.AssertHeld();  // Run calls it under graph_mu
  const DeviceBackend& dev = *m.device;
  auto gs = std::make_unique<Impl::GraphState>();
  RunValues v(m);
  for (size_t i = 0; i < inputs.size(); ++i) {
    CJIT_ASSIGN_OR_RETURN(std::shared_ptr<DeviceMemory> b, dev.Allocate(std::max<size_t>(inputs[i].nbytes(), 8)));
    gs->inputs.push_back(b);
    v.on_device[m.input_slots[i]] = b;
    v.host[m.input_slots[i]] = inputs[i];  // what the host prologue reads
  }
  // The prologue runs now, on the host (its results size the buffers); the graph starts after it.
  CJIT_RETURN_IF_ERROR(RunSteps(m, v, 0, m.prologue_steps));
  for (int s : m.boundary_slots) {
    if (!v.host[s].defined()) return NotComputed(m, s);
    CJIT_ASSIGN_OR_RETURN(std::shared_ptr<DeviceMemory> b, dev.Allocate(std::max<size_t>(v.host[s].nbytes(), 8)));
    gs->boundary.push_back(b);
    v.on_device[s] = b;
  }
  CJIT_ASSIGN_OR_RETURN(gs->graph, dev.Capture([&]() -> absl::Status {
    CJIT_RETURN_IF_ERROR(RunSteps(m, v, m.prologue_steps));
    for (int s : m.output_slots) {
      if (!v.on_device[s]) {
        return absl::FailedPreconditionError(
            absl::StrCat("output '", m.slots[s].value->name, "' is not on the device"));
      }
      gs->outputs.push_back(v.on_device[s]);
    }
    gs->error_flag = v.error_flag;
    return absl::OkStatus();
  }));
  CJIT_VLOG(1) << "GPU executor: captured a CUDA graph of " << m.steps.size() << " steps";
  m.graph_state = std::move(gs);
  return absl::OkStatus();
}

// Under graph_mu, inputs checked (CheckInputs): inputs into the graph's input buffers, one launch, outputs
// back.
absl::StatusOr<std::vector<Tensor>> GpuExecutor::ReplayGraph(const Impl& m, const std::vector<Tensor>& inputs) {
  m.graph_mu.AssertHeld();  // Run calls it under graph_mu
  const DeviceBackend& dev = *m.device;
  const Impl::GraphState& gs = *m.graph_state;
  if (m.prologue_steps > 0) {
    RunValues v(m);
    for (size_t i = 0; i < inputs.size(); ++i) v.host[m.input_slots[i]] = inputs[i];
    CJIT_RETURN_IF_ERROR(RunSteps(m, v, 0, m.prologue_steps));
    for (size_t k = 0; k < m.boundary_slots.size(); ++k) {
      const int s = m.boundary_slots[k];
      const Tensor& t = v.host[s];
      if (!t.defined()) return NotComputed(m, s);
      if (t.dims() != m.slots[s].dims) return ShapeMismatch(m, s);
      CJIT_RETURN_IF_ERROR(dev.CopyToDevice(gs.boundary[k]->address(), t.raw(), t.nbytes()));
    }
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    CJIT_RETURN_IF_ERROR(dev.CopyToDevice(gs.inputs[i]->address(), inputs[i].raw(), inputs[i].nbytes()));
  }
  CJIT_RETURN_IF_ERROR(gs.graph->Launch());
  std::vector<Tensor> outputs;
  for (size_t o = 0; o < m.output_slots.size(); ++o) {
    CJIT_ASSIGN_OR_RETURN(Tensor t, CopyOut(m, m.output_slots[o], gs.outputs[o]->address()));
    outputs.push_back(std::move(t));
  }
  CJIT_RETURN_IF_ERROR(CheckGatherIndices(m, gs.error_flag));
  ++m.graph_replays;
  return outputs;
}

std::string GpuExecutor::GraphStatus() const {
  const Impl& m = *impl_;
  if (!m.graph_ineligible.empty()) return absl::StrCat("no CUDA graph: ", m.graph_ineligible);
  MutexLock lock(&m.graph_mu);
  if (!m.graph_failure.empty()) return absl::StrCat("no CUDA graph: capture failed: ", m.graph_failure);
  if (m.graph_state == nullptr) return absl::StrCat("CUDA graph not captured yet (", m.plain_runs, " plain runs)");
  return absl::StrCat("CUDA graph of ", m.steps.size(), " steps, ", m.graph_replays, " replays");
}

absl::StatusOr<std::vector<Tensor>> GpuExecutor::Run(const std::vector<Tensor>& inputs) const {
  const Impl& m = *impl_;
  const DeviceBackend& dev = *m.device;
  CJIT_RETURN_IF_ERROR(dev.MakeCurrent());
  if (inputs.size() != m.input_slots.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the graph takes ", m.input_slots.size(), " inputs, got ", inputs.size()));
  }
  if (m.graph_ineligible.empty()) {
    // Wrong inputs are the caller's error, not a reason to stop using graphs.
    CJIT_RETURN_IF_ERROR(CheckInputs(m, inputs));
    MutexLock lock(&m.graph_mu);
    if (m.graph_failure.empty()) {
      // The first run makes what is created lazily (library handles, workspaces); the second is captured.
      if (m.graph_state == nullptr && m.plain_runs >= 1) {
        absl::Status st = CaptureGraph(m, inputs);
        if (!st.ok()) {
          m.graph_failure = std::string(st.message());
          CJIT_VLOG(1) << "GPU executor: runs without a CUDA graph: " << st;
        }
      }
      if (m.graph_state != nullptr) return ReplayGraph(m, inputs);
    }
    ++m.plain_runs;
  }
  RunValues v(m);
  for (size_t i = 0; i < inputs.size(); ++i) v.host[m.input_slots[i]] = inputs[i];
  CJIT_RETURN_IF_ERROR(RunSteps(m, v));
  std::vector<Tensor> outputs;
  for (int s : m.output_slots) {
    CJIT_RETURN_IF_ERROR(EnsureHost(m, v, s));
    outputs.push_back(v.host[s]);
  }
  CJIT_RETURN_IF_ERROR(dev.Synchronize());  // surfaces errors of kernels whose results were not read back
  CJIT_RETURN_IF_ERROR(CheckGatherIndices(m, v.error_flag));
  return outputs;
}

}  // namespace cjit
