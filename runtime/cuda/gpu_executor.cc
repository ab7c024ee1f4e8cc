#include "runtime/cuda/gpu_executor.h"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <set>
#include <unordered_map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "compiler/codegen/fusion_plan.h"
#include "compiler/codegen/kernel_layout.h"
#include "compiler/ir/status_macros.h"
#include "compiler/ops/op_registry.h"
#include "compiler/passes/mark_for_compilation.h"
#include "glog/logging.h"
#include "runtime/cpu/kernel.h"
#include "runtime/executor.h"

namespace cjit {
namespace {

// Views a single-op step runs as a copy kernel reading the view (fusion_plan.h absorbs these into a
// consumer; alone, an Identity consumer gives them one).
const std::set<std::string>& ViewOps() {
  static const auto* s = new std::set<std::string>{"Transpose", "Slice",   "Expand",    "Reshape",
                                                   "Flatten",   "Squeeze", "Unsqueeze", "Identity"};
  return *s;
}

bool StaticF32(const Value* v) { return v && v->dtype == DType::kF32 && v->shape.fully_known(); }


double MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

std::string GpuPlacement::ToString() const {
  std::string host;
  for (const auto& [op, count] : host_op_types) absl::StrAppend(&host, host.empty() ? "" : ", ", op, " x", count);
  return absl::StrCat(device, " (code for ", target, "): ", fused_kernels, " fused kernels, ", op_kernels,
                      " single-op kernels, ", gemms, " GEMM calls, ", host_ops, " host ops",
                      host.empty() ? "" : absl::StrCat(" (", host, ")"), "; ", compiles,
                      " kernel compilations in ", static_cast<int64_t>(compile_ms), " ms");
}

struct GpuExecutor::Impl {
  struct Step {
    enum class Kind { kKernel, kGemm, kHost };
    Kind kind = Kind::kHost;
    std::vector<int> in, implicit, out;  // kGemm: in = {a, b, bias or -1}
    std::vector<int> free_after;
    // kKernel
    std::shared_ptr<const FusedKernelHandle> fn;
    std::shared_ptr<DeviceMemory> meta, consts;
    int64_t rows = 0, row_elems = 0;
    bool row_kernel = false;
    // kGemm
    std::unique_ptr<GemmOp> gemm;
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
  std::vector<std::unique_ptr<Graph>> owned;  // single-op bodies
  std::shared_ptr<DeviceBackend> device;
  GpuExecutorOptions options;
  std::vector<SlotInfo> slots;
  std::unordered_map<const Value*, int> slot_of;
  std::vector<Step> steps;
  std::vector<int> input_slots, output_slots;
  GpuPlacement placement;
  SubgraphRunner runner;
  mutable std::mutex sub_mu;
  mutable std::map<const Graph*, std::unique_ptr<Executor>> subgraphs;

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

  absl::Status PlaceNode(const Node& n, const std::vector<PostOp>* post_ops, const Value* output);
  absl::Status PlaceCluster(const Node& n);
  absl::StatusOr<bool> PlacePlan(const FusionPlan& plan, bool single_op);
  absl::Status AddHost(const Node& n, const std::vector<PostOp>* post_ops, const Value* output);
  absl::StatusOr<bool> TryGemm(const Node& n);
  absl::StatusOr<bool> TrySingleOpKernel(const Node& n);
  absl::StatusOr<std::shared_ptr<DeviceMemory>> Upload(const void* data, size_t bytes) {
    CJIT_ASSIGN_OR_RETURN(std::shared_ptr<DeviceMemory> b, device->Allocate(std::max<size_t>(bytes, 8)));
    CJIT_RETURN_IF_ERROR(device->CopyToDevice(b->address(), data, bytes));
    return b;
  }
  absl::StatusOr<std::vector<Tensor>> RunSubgraph(const Graph& g, const std::vector<Tensor>& inputs,
                                                  const std::vector<std::pair<std::string, Tensor>>& captures) const;
};

absl::StatusOr<bool> GpuExecutor::Impl::PlacePlan(const FusionPlan& plan, bool single_op) {
  auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<std::vector<std::shared_ptr<const FusedKernelHandle>>> compiled =
      device->CompileKernels(plan, &placement.compiles);
  placement.compile_ms += MsSince(t0);
  if (!compiled.ok()) {
    LOG(WARNING) << "GPU code generation failed (" << compiled.status()
                 << "); the ops run as single-op steps instead";
    return false;
  }
  for (const PlanStep& ps : plan.steps) {
    if (ps.kind == PlanStep::Kind::kLibrary) {
      CJIT_RETURN_IF_ERROR(PlaceNode(*ps.node, &ps.post_ops, ps.output));
      continue;
    }
    const FusedKernel& k = plan.kernels[ps.kernel];
    Collapsed c = Collapse(k.shape, Layouts(k), k.row_reduction);
    Step st;
    st.kind = Step::Kind::kKernel;
    st.fn = (*compiled)[ps.kernel];
    st.row_kernel = k.row_reduction;
    st.row_elems = c.dims.back();
    st.rows = 1;
    for (size_t d = 0; d + 1 < c.dims.size(); ++d) st.rows *= c.dims[d];
    std::vector<int64_t> meta = KernelMeta(c);
    std::vector<float> consts = KernelConsts(k);
    CJIT_ASSIGN_OR_RETURN(st.meta, Upload(meta.data(), meta.size() * sizeof(int64_t)));
    CJIT_ASSIGN_OR_RETURN(st.consts, Upload(consts.data(), consts.size() * sizeof(float)));
    for (const Value* v : k.input_sources) st.in.push_back(Slot(v));
    for (const Value* v : k.outputs) st.out.push_back(Slot(v));
    steps.push_back(std::move(st));
    ++(single_op ? placement.op_kernels : placement.fused_kernels);
  }
  return true;
}

absl::Status GpuExecutor::Impl::PlaceCluster(const Node& n) {
  const Graph* body = n.GetGraph("body");
  if (body == nullptr) return absl::InternalError(absl::StrCat(n.Describe(), ": cluster without a body"));
  for (size_t i = 0; i < body->inputs().size() && i < n.inputs.size(); ++i) slot_of[body->inputs()[i]] = Slot(n.inputs[i]);
  absl::StatusOr<FusionPlan> plan = BuildFusionPlan(*body);
  bool placed = false;
  if (plan.ok()) {
    CJIT_ASSIGN_OR_RETURN(placed, PlacePlan(*plan, false));
  } else {
    LOG(WARNING) << n.Describe() << ": no fusion plan (" << plan.status() << "); its ops run one by one";
  }
  if (!placed) {
    CJIT_ASSIGN_OR_RETURN(std::vector<Node*> order, body->TopologicalOrder());
    for (const Node* bn : order) CJIT_RETURN_IF_ERROR(PlaceNode(*bn, nullptr, nullptr));
  }
  for (size_t j = 0; j < n.outputs.size() && j < body->outputs().size(); ++j) {
    if (n.outputs[j]) slot_of[n.outputs[j]] = Slot(body->outputs()[j]);
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> GpuExecutor::Impl::TryGemm(const Node& n) {
  if (n.op_type != "MatMul" && n.op_type != "Gemm") return false;
  if (n.outputs.size() != 1 || !StaticF32(n.outputs[0]) || !StaticF32(n.input(0)) || !StaticF32(n.input(1))) return false;
  Dims a = n.input(0)->shape.concrete(), b = n.input(1)->shape.concrete(), o = n.outputs[0]->shape.concrete();
  GemmShape s;
  const Value* bias = nullptr;
  if (n.op_type == "MatMul") {
    Dims a_batch, b_batch;
    int64_t k = a.back(), m = 1;
    if (a.size() >= 2) {
      m = a[a.size() - 2];
      a_batch.assign(a.begin(), a.end() - 2);
    }
    int64_t kb = b.size() >= 2 ? b[b.size() - 2] : b[0], n_cols = b.size() >= 2 ? b.back() : 1;
    if (b.size() >= 2) b_batch.assign(b.begin(), b.end() - 2);
    if (kb != k) return false;
    s.k = k;
    s.n = n_cols;
    if (b_batch.empty()) {
      s.m = m * NumElements(a_batch);  // A's batch folds into its rows
    } else if (a_batch.empty()) {
      s.m = m;
      s.batch = NumElements(b_batch);
      s.stride_a = 0;
      s.stride_b = k * n_cols;
    } else if (a_batch == b_batch) {
      s.m = m;
      s.batch = NumElements(a_batch);
      s.stride_a = m * k;
      s.stride_b = k * n_cols;
    } else {
      return false;  // general batch broadcasting: host
    }
  } else {
    if (a.size() != 2 || b.size() != 2) return false;
    s.trans_a = n.GetInt("transA", 0) != 0;
    s.trans_b = n.GetInt("transB", 0) != 0;
    s.alpha = n.GetFloat("alpha", 1.0f);
    s.m = s.trans_a ? a[1] : a[0];
    s.k = s.trans_a ? a[0] : a[1];
    s.n = s.trans_b ? b[0] : b[1];
    if ((s.trans_b ? b[1] : b[0]) != s.k) return false;
    if (const Value* c = n.input(2)) {
      if (!StaticF32(c) || n.GetFloat("beta", 1.0f) != 1.0f) return false;
      Dims cd = c->shape.concrete();
      if (!(cd == Dims{s.n} || cd == Dims{1, s.n})) return false;
      s.bias = true;
      bias = c;
    }
  }
  if (s.m == 0 || s.n == 0 || s.k == 0 || NumElements(o) != s.batch * s.m * s.n) return false;
  absl::StatusOr<std::unique_ptr<GemmOp>> plan = device->MakeGemm(s);
  if (!plan.ok()) {
    if (absl::IsFailedPrecondition(plan.status())) return plan.status();  // no cuBLASLt at all
    LOG(WARNING) << n.Describe() << " runs on the host: " << plan.status();
    return false;
  }
  Step st;
  st.kind = Step::Kind::kGemm;
  st.gemm = std::move(*plan);
  st.node = &n;
  st.in = {Slot(n.input(0)), Slot(n.input(1)), bias ? Slot(bias) : -1};
  st.out = {Slot(n.outputs[0])};
  steps.push_back(std::move(st));
  ++placement.gemms;
  return true;
}

absl::StatusOr<bool> GpuExecutor::Impl::TrySingleOpKernel(const Node& n) {
  bool elementwise = IsFusibleElementwise(n) || IsRowReduction(n);
  bool view = ViewOps().count(n.op_type) && n.outputs.size() == 1 && StaticF32(n.outputs[0]) && StaticF32(n.input(0));
  if (!elementwise && !view) return false;
  auto body = std::make_unique<Graph>();
  std::map<const Value*, Value*> mapped;
  std::vector<Value*> ins;
  for (const Value* v : n.inputs) {
    if (v == nullptr) {
      ins.push_back(nullptr);
      continue;
    }
    auto it = mapped.find(v);
    if (it == mapped.end()) {
      Value* bv = v->is_constant() ? body->AddConstant(v->name, *v->constant) : body->AddInput(v->name, v->dtype, v->shape);
      it = mapped.emplace(v, bv).first;
    }
    ins.push_back(it->second);
  }
  std::vector<std::string> out_names;
  for (const Value* v : n.outputs) out_names.push_back(v ? v->name : "");
  Node* bn = body->AddNode(n.op_type, n.name, ins, out_names);
  bn->domain = n.domain;
  bn->opset_version = n.opset_version;
  bn->attrs = n.attrs;
  for (size_t j = 0; j < n.outputs.size(); ++j) {
    if (!n.outputs[j] || !bn->outputs[j]) continue;
    bn->outputs[j]->dtype = n.outputs[j]->dtype;
    bn->outputs[j]->shape = n.outputs[j]->shape;
  }
  Value* result = bn->outputs[0];
  if (view && n.op_type != "Identity") {
    Node* copy = body->AddNode("Identity", n.name + "/copy", {result}, {n.outputs[0]->name + "/copy"});
    copy->outputs[0]->dtype = result->dtype;
    copy->outputs[0]->shape = result->shape;
    result = copy->outputs[0];
  }
  body->AddOutput(result);
  absl::StatusOr<FusionPlan> plan = BuildFusionPlan(*body);
  if (!plan.ok() || plan->kernels.size() != 1 || plan->steps.size() != 1 ||
      plan->steps[0].kind != PlanStep::Kind::kFused) {
    return false;
  }
  for (const auto& [outer, inner] : mapped) slot_of[inner] = Slot(outer);
  CJIT_ASSIGN_OR_RETURN(bool placed, PlacePlan(*plan, true));
  if (!placed) return false;
  slot_of[n.outputs[0]] = Slot(result);
  owned.push_back(std::move(body));
  return true;
}

absl::Status GpuExecutor::Impl::AddHost(const Node& n, const std::vector<PostOp>* post_ops, const Value* output) {
  Step st;
  st.kind = Step::Kind::kHost;
  st.node = &n;
  st.kernel = FindKernel(n.op_type);
  if (st.kernel == nullptr) return absl::UnimplementedError(absl::StrCat(n.Describe(), ": no kernel for this operator"));
  if (post_ops) st.post_ops = *post_ops;
  for (const Value* v : n.inputs) {
    st.in.push_back(v ? Slot(v) : -1);
    st.in_const.push_back(v && v->is_constant());
  }
  for (const Value* v : n.implicit_inputs) st.implicit.push_back(Slot(v));
  st.static_shapes = true;
  for (size_t j = 0; j < n.outputs.size(); ++j) {
    const Value* v = (j == 0 && output) ? output : n.outputs[j];
    st.out.push_back(v ? Slot(v) : -1);
    if (v && (!v->shape.fully_known() || v->dtype == DType::kInvalid)) st.static_shapes = false;
    st.inferred.push_back(v ? InferOutput{v->dtype, v->shape} : InferOutput{});
  }
  steps.push_back(std::move(st));
  ++placement.host_ops;
  ++placement.host_op_types[n.op_type];
  return absl::OkStatus();
}

absl::Status GpuExecutor::Impl::PlaceNode(const Node& n, const std::vector<PostOp>* post_ops, const Value* output) {
  if (n.op_type == kClusterOp) return PlaceCluster(n);
  if (post_ops == nullptr || post_ops->empty()) {
    CJIT_ASSIGN_OR_RETURN(bool gemm, TryGemm(n));
    if (gemm) return absl::OkStatus();
    CJIT_ASSIGN_OR_RETURN(bool kernel, TrySingleOpKernel(n));
    if (kernel) return absl::OkStatus();
    output = nullptr;
  }
  return AddHost(n, post_ops, output);
}

absl::StatusOr<std::vector<Tensor>> GpuExecutor::Impl::RunSubgraph(
    const Graph& g, const std::vector<Tensor>& inputs, const std::vector<std::pair<std::string, Tensor>>& captures) const {
  const Executor* sub = nullptr;
  {
    std::lock_guard<std::mutex> lock(sub_mu);
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

absl::StatusOr<std::unique_ptr<GpuExecutor>> GpuExecutor::Create(std::shared_ptr<const Graph> graph,
                                                                 std::shared_ptr<DeviceBackend> backend,
                                                                 const GpuExecutorOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->graph = graph;
  impl->options = options;
  impl->options.host_threads = std::max(1, options.host_threads);
  impl->device = std::move(backend);
  CJIT_RETURN_IF_ERROR(impl->device->MakeCurrent());
  impl->placement.device = impl->device->Describe();
  impl->placement.target = impl->device->target();
  Impl* self = impl.get();
  impl->runner = [self](const Graph& g, const std::vector<Tensor>& in,
                        const std::vector<std::pair<std::string, Tensor>>& caps) { return self->RunSubgraph(g, in, caps); };
  for (const Value* v : graph->inputs()) impl->input_slots.push_back(impl->Slot(v));
  CJIT_ASSIGN_OR_RETURN(std::vector<Node*> order, graph->TopologicalOrder());
  for (const Node* n : order) CJIT_RETURN_IF_ERROR(impl->PlaceNode(*n, nullptr, nullptr));
  for (const Value* v : graph->outputs()) impl->output_slots.push_back(impl->Slot(v));
  // Constants read on the device are uploaded once.
  for (const Impl::Step& st : impl->steps) {
    if (st.kind == Impl::Step::Kind::kHost) continue;
    for (int s : st.in) {
      if (s < 0) continue;
      Impl::SlotInfo& info = impl->slots[s];
      if (info.constant && !info.constant_on_device) {
        CJIT_ASSIGN_OR_RETURN(info.constant_on_device, impl->Upload(info.constant->raw(), info.constant->nbytes()));
      }
    }
  }
  // Each value is freed after its last reader (graph outputs and constants are kept).
  std::vector<int> last(impl->slots.size(), -1);
  for (size_t i = 0; i < impl->steps.size(); ++i) {
    for (int s : impl->steps[i].in)
      if (s >= 0) last[s] = static_cast<int>(i);
    for (int s : impl->steps[i].implicit) last[s] = static_cast<int>(i);
  }
  std::vector<bool> keep(impl->slots.size(), false);
  for (int s : impl->output_slots) keep[s] = true;
  for (size_t s = 0; s < impl->slots.size(); ++s) {
    if (impl->slots[s].constant) keep[s] = true;
    if (!keep[s] && last[s] >= 0) impl->steps[last[s]].free_after.push_back(static_cast<int>(s));
  }
  CJIT_RETURN_IF_ERROR(impl->device->Synchronize());  // uploads done
  VLOG(1) << "GPU placement: " << impl->placement.ToString();
  return std::unique_ptr<GpuExecutor>(new GpuExecutor(std::move(impl)));
}

absl::StatusOr<std::vector<Tensor>> GpuExecutor::Run(const std::vector<Tensor>& inputs) const {
  const Impl& m = *impl_;
  const DeviceBackend& dev = *m.device;
  CJIT_RETURN_IF_ERROR(dev.MakeCurrent());
  if (inputs.size() != m.input_slots.size()) {
    return absl::InvalidArgumentError(absl::StrCat("the graph takes ", m.input_slots.size(), " inputs, got ", inputs.size()));
  }
  size_t n = m.slots.size();
  std::vector<Tensor> host(n);
  std::vector<std::shared_ptr<DeviceMemory>> on_device(n);
  for (size_t s = 0; s < n; ++s) {
    if (m.slots[s].constant) {
      host[s] = *m.slots[s].constant;
      on_device[s] = m.slots[s].constant_on_device;
    }
  }
  for (size_t i = 0; i < inputs.size(); ++i) host[m.input_slots[i]] = inputs[i];
  auto ensure_device = [&](int s) -> absl::Status {
    if (on_device[s]) return absl::OkStatus();
    const Tensor& t = host[s];
    if (!t.defined()) return absl::InternalError(absl::StrCat("GPU executor: value '", m.slots[s].value->name, "' was not computed"));
    if (m.slots[s].static_dims && t.dims() != m.slots[s].dims) {
      return absl::InternalError(absl::StrCat("GPU executor: value '", m.slots[s].value->name,
                                              "' has dims that differ from its specialized shape"));
    }
    CJIT_ASSIGN_OR_RETURN(on_device[s], dev.Allocate(t.nbytes()));
    return dev.CopyToDevice(on_device[s]->address(), t.raw(), t.nbytes());
  };
  auto ensure_host = [&](int s) -> absl::Status {
    if (host[s].defined()) return absl::OkStatus();
    if (!on_device[s]) return absl::InternalError(absl::StrCat("GPU executor: value '", m.slots[s].value->name, "' was not computed"));
    Tensor t(m.slots[s].dtype, m.slots[s].dims);
    CJIT_RETURN_IF_ERROR(dev.CopyToHost(t.raw(), on_device[s]->address(), t.nbytes()));
    host[s] = std::move(t);
    return absl::OkStatus();
  };
  auto allocate_output = [&](int s) -> absl::Status {
    const Impl::SlotInfo& info = m.slots[s];
    size_t bytes = static_cast<size_t>(NumElements(info.dims)) * DTypeSize(info.dtype);
    CJIT_ASSIGN_OR_RETURN(on_device[s], dev.Allocate(bytes));
    host[s] = Tensor();
    if (m.options.poison_outputs) CJIT_RETURN_IF_ERROR(dev.Fill(on_device[s]->address(), 0xFF, bytes));
    return absl::OkStatus();
  };
  for (const Impl::Step& st : m.steps) {
    switch (st.kind) {
      case Impl::Step::Kind::kKernel: {
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
      case Impl::Step::Kind::kGemm: {
        for (int s : st.in)
          if (s >= 0) CJIT_RETURN_IF_ERROR(ensure_device(s));
        CJIT_RETURN_IF_ERROR(allocate_output(st.out[0]));
        CJIT_RETURN_IF_ERROR(st.gemm->Run(on_device[st.in[0]]->address(), on_device[st.in[1]]->address(),
                                          st.in[2] >= 0 ? on_device[st.in[2]]->address() : 0,
                                          on_device[st.out[0]]->address()));
        break;
      }
      case Impl::Step::Kind::kHost: {
        KernelContext ctx;
        ctx.node = st.node;
        ctx.threads = m.options.host_threads;
        ctx.run_subgraph = &m.runner;
        ctx.input_is_constant = st.in_const;
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
          ctx.inferred = st.inferred;
        } else {
          CJIT_RETURN_IF_ERROR(InferNode(*st.node, InferInputsFromValues(ctx.inputs), ctx.inferred));
        }
        ctx.outputs.resize(st.out.size());
        absl::Status status = (*st.kernel)(ctx);
        if (!status.ok()) {
          if (absl::StrContains(status.message(), st.node->name)) return status;
          return absl::Status(status.code(), absl::StrCat(st.node->Describe(), ": ", status.message()));
        }
        for (size_t k = 0; k < st.out.size(); ++k) {
          if (st.out[k] < 0) continue;
          if (!ctx.outputs[k].defined()) {
            return absl::InternalError(absl::StrCat(st.node->Describe(), ": kernel did not produce output ", k));
          }
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
  std::vector<Tensor> outputs;
  for (int s : m.output_slots) {
    CJIT_RETURN_IF_ERROR(ensure_host(s));
    outputs.push_back(host[s]);
  }
  CJIT_RETURN_IF_ERROR(dev.Synchronize());  // surfaces errors of kernels whose results were not read back
  return outputs;
}

}  // namespace cjit
