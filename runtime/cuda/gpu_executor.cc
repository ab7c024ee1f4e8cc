#include "runtime/cuda/gpu_executor.h"

#include "runtime/cuda/gpu_autotune.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <mutex>
#include <optional>
#include <set>
#include <unordered_map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/codegen/fusion_plan.h"
#include "compiler/codegen/kernel_layout.h"
#include "base/status_macros.h"
#include "compiler/ops/op_registry.h"
#include "compiler/passes/decompose.h"
#include "compiler/passes/mark_for_compilation.h"
#include "base/logging.h"
#include "runtime/cpu/kernel.h"
#include "runtime/cpu/resize.h"
#include "runtime/executor.h"
#include "runtime/run_options.h"

namespace cjit {
namespace {

// Strided views (OpTraits::view kStrided) a single-op step runs as a copy kernel reading the view
// (fusion_plan.h absorbs these into a consumer; alone, an Identity consumer gives them one). Reshape-like
// ops and Identity never get here: they are buffer aliases.
bool IsStridedView(const Node& n) { return TraitsOf(n).view == ViewKind::kStrided; }

FusionPlanOptions GpuPlanOptions() {
  FusionPlanOptions o;
  o.conv_post_ops = false;
  o.gemm_epilogues = true;
  return o;
}

bool StaticF32(const Value* v) { return v && v->dtype == DType::kF32 && v->shape.fully_known(); }

// `v` has static dims and dtype `t`.
bool StaticOf(const Value* v, DType t) { return v && v->dtype == t && v->shape.fully_known(); }

// The library element type of a GEMM / convolution / pooling node: its output's, when that is float32,
// float16 or bfloat16 (the operands are then checked against it); kInvalid otherwise.
DType LibraryType(const Node& n) {
  return !n.outputs.empty() && n.outputs[0] && IsLibraryFloat(n.outputs[0]->dtype) ? n.outputs[0]->dtype
                                                                                     : DType::kInvalid;
}

// Whether a library call made for `n` can be used (`made` is its creation status): true; false when the
// library declines the shape (the op then runs on the host; logged); an error naming the node when the
// library itself is missing.
absl::StatusOr<bool> LibraryAccepts(const Node& n, const absl::Status& made) {
  if (made.ok()) return true;
  if (absl::IsFailedPrecondition(made)) return absl::FailedPreconditionError(absl::StrCat(n.Describe(), ": ", made.message()));
  CJIT_LOG(WARNING) << n.Describe() << " runs on the host: " << made;
  return false;
}


// A Conv's constant bias (float32, float16 or bfloat16) moved out of the convolution into an Add(y, bias as [1, K, 1(, 1)]) when
// every consumer of y is a fusible elementwise op: the fusion plan then fuses the Add into the consumers'
// kernel (Relu, HardSwish, a residual Add...), which reads the bias as a per-channel broadcast — instead of
// cuDNN's separate cudnnAddTensor launch per convolution (a quarter of ppocr_mobile_cls's GPU time, Nsight
// Compute on an H200). The same sum in a different order: (conv + b) rounded once more at most. Returns the
// rewritten copy of `body` and the number of biases moved, or nullptr when no Conv qualifies.
std::unique_ptr<Graph> MoveConvBiasToConsumers(const Graph& body, int* moved) {
  std::unordered_map<const Value*, std::vector<const Node*>> users;
  std::set<const Value*> captured;
  for (const auto& n : body.nodes()) {
    for (const Value* v : n->inputs)
      if (v) users[v].push_back(n.get());
    for (const Value* v : n->implicit_inputs) captured.insert(v);
  }
  std::vector<size_t> picks;
  for (size_t i = 0; i < body.nodes().size(); ++i) {
    const Node& n = *body.nodes()[i];
    const DType dt = LibraryType(n);
    if (n.op_type != "Conv" || !n.domain.empty() || n.outputs.size() != 1 || dt == DType::kInvalid ||
        !StaticOf(n.outputs[0], dt)) {
      continue;
    }
    const Value* b = n.input(2);
    const Value* y = n.outputs[0];
    Dims yd = y->shape.concrete();
    if (b == nullptr || !b->is_constant() || b->dtype != dt || yd.size() < 3 ||
        b->constant->numel() != yd[1] || captured.count(y)) {
      continue;
    }
    auto it = users.find(y);
    if (it == users.end()) continue;
    if (std::all_of(it->second.begin(), it->second.end(), [](const Node* u) { return IsFusibleElementwise(*u); })) {
      picks.push_back(i);
    }
  }
  *moved = static_cast<int>(picks.size());
  if (picks.empty()) return nullptr;
  std::unique_ptr<Graph> g = body.Clone();  // node order is kept: picks index the copy too
  for (size_t i : picks) {
    Node* conv = g->nodes()[i].get();
    Value* y = conv->outputs[0];
    Dims bd(static_cast<size_t>(y->shape.rank()), 1);
    bd[1] = y->shape.dims[1].value;
    Value* bias = g->AddConstant(absl::StrCat(conv->name, "/bias"), conv->inputs[2]->constant->Reshaped(bd));
    conv->inputs.resize(2);
    Node* add = g->AddNode("Add", absl::StrCat(conv->name, "/bias_add"), {y, bias}, {absl::StrCat(conv->name, "/biased")});
    add->opset_version = 14;
    Value* sum = add->outputs[0];
    sum->dtype = y->dtype;
    sum->shape = y->shape;
    g->ReplaceAllUses(y, sum);  // the consumers and graph outputs read the biased value
    add->inputs[0] = y;
  }
  return g;
}

double MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

std::string GpuPlacement::ToString() const {
  std::string host;
  for (const auto& [op, count] : host_op_types) absl::StrAppend(&host, host.empty() ? "" : ", ", op, " x", count);
  return absl::StrCat(device, " (code for ", target, "): ", fused_kernels, " fused kernels, ", op_kernels,
                      " single-op kernels, ", gemms, " GEMM calls (", epilogue_ops, " ops in their epilogues), ", convs,
                      " convolutions (", conv_biases_moved, " biases in a consumer's kernel), ", pools, " pools, ", gathers, " gathers, ", tuned_library_calls,
                      " library calls with tuned algorithms, ", aliases, " reshapes as aliases, ", copies,
                      " concats/pads as copies, ", host_ops, " host ops",
                      host.empty() ? "" : absl::StrCat(" (", host, ")"),
                      prologue_ops > 0 ? absl::StrCat(", ", prologue_ops, " of them in the host prologue") : "", "; ",
                      compiles, " kernel compilations, ",
                      disk_hits, " from the persistent cache, in ", static_cast<int64_t>(compile_ms), " ms");
}

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
  mutable std::mutex sub_mu;
  mutable std::map<const Graph*, std::unique_ptr<Executor>> subgraphs;

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
  mutable std::mutex graph_mu;
  mutable std::unique_ptr<GraphState> graph_state;
  mutable std::string graph_failure;  // why capture failed ("" = not tried or succeeded)
  mutable int64_t plain_runs = 0, graph_replays = 0;

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

absl::StatusOr<bool> GpuExecutor::Impl::PlacePlan(const FusionPlan& plan, bool single_op) {
  auto t0 = std::chrono::steady_clock::now();
  DeviceBackend::CompileCounts counts;
  absl::StatusOr<std::vector<std::shared_ptr<const FusedKernelHandle>>> compiled =
      device->CompileKernels(plan, &counts);
  placement.compiles += counts.compiled;
  placement.disk_hits += counts.disk_hits;
  placement.compile_ms += MsSince(t0);
  if (!compiled.ok()) {
    CJIT_LOG(WARNING) << "GPU code generation failed (" << compiled.status()
                 << "); the ops run as single-op steps instead";
    return false;
  }
  for (const PlanStep& ps : plan.steps) {
    if (ps.kind == PlanStep::Kind::kLibrary) {
      CJIT_RETURN_IF_ERROR(PlaceNode(*ps.node, &ps));
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
  int biases_moved = 0;
  if (std::unique_ptr<Graph> rewritten = options.move_conv_bias ? MoveConvBiasToConsumers(*body, &biases_moved) : nullptr) {
    body = rewritten.get();
    owned.push_back(std::move(rewritten));
    placement.conv_biases_moved += biases_moved;
  }
  for (size_t i = 0; i < body->inputs().size() && i < n.inputs.size(); ++i) slot_of[body->inputs()[i]] = Slot(n.inputs[i]);
  absl::StatusOr<FusionPlan> plan = BuildFusionPlan(*body, GpuPlanOptions());
  bool placed = false;
  if (plan.ok()) {
    CJIT_ASSIGN_OR_RETURN(placed, PlacePlan(*plan, false));
  } else {
    CJIT_LOG(WARNING) << n.Describe() << ": no fusion plan (" << plan.status() << "); its ops run one by one";
  }
  if (!placed) {
    CJIT_ASSIGN_OR_RETURN(std::vector<Node*> order, body->TopologicalOrder());
    for (const Node* bn : order) CJIT_RETURN_IF_ERROR(PlaceNode(*bn));
  }
  for (size_t j = 0; j < n.outputs.size() && j < body->outputs().size(); ++j) {
    if (n.outputs[j]) slot_of[n.outputs[j]] = Slot(body->outputs()[j]);
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> GpuExecutor::Impl::TryGemm(const Node& n, const PlanStep* step) {
  if (n.op_type != "MatMul" && n.op_type != "Gemm") return false;
  const DType dt = LibraryType(n);
  if (n.outputs.size() != 1 || dt == DType::kInvalid || !StaticOf(n.outputs[0], dt) || !StaticOf(n.input(0), dt) ||
      !StaticOf(n.input(1), dt)) {
    return false;
  }
  Dims a = n.input(0)->shape.concrete(), b = n.input(1)->shape.concrete(), o = n.outputs[0]->shape.concrete();
  GemmShape s;
  s.dtype = dt;
  s.precision = ParseMathPrecision(n.GetString("cjit_precision", "highest"));  // --matmul_precision
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
      if (!StaticOf(c, dt) || n.GetFloat("beta", 1.0f) != 1.0f) return false;
      Dims cd = c->shape.concrete();
      if (!(cd == Dims{s.n} || cd == Dims{1, s.n})) return false;
      s.bias = true;
      bias = c;
    }
  }
  if (s.m == 0 || s.n == 0 || s.k == 0 || NumElements(o) != s.batch * s.m * s.n) return false;
  const Value* output = n.outputs[0];
  if (step != nullptr) {  // epilogue: bias over the last dim, Relu
    for (const PostOp& op : step->post_ops) {
      if (op.kind == PostOp::Kind::kBiasLastDim && !s.bias && op.tensor && op.tensor->dtype == dt) {
        s.bias = true;
        bias = op.tensor;
      } else if (op.kind == PostOp::Kind::kRelu) {
        s.relu = true;
      } else {
        return false;
      }
    }
    if (step->output) output = step->output;
  }
  std::string algorithm;
  absl::StatusOr<std::unique_ptr<GemmOp>> plan = MakeTunedGemm(*device, options.autotuner, s, n.Describe(), &algorithm);
  CJIT_ASSIGN_OR_RETURN(bool accepted, LibraryAccepts(n, plan.status()));
  if (!accepted) return false;
  Step st;
  st.kind = Step::Kind::kGemm;
  st.gemm = std::move(*plan);
  placement.tuned_library_calls += !algorithm.empty();
  AddLibraryStep(std::move(st), n, {Slot(n.input(0)), Slot(n.input(1)), bias ? Slot(bias) : -1}, output);
  ++placement.gemms;
  if (step != nullptr) placement.epilogue_ops += static_cast<int>(step->absorbed.size());
  return true;
}

// A one-op body graph for a single op on the device: the op itself, or an equivalent the fusion plan makes
// one kernel of (see LowerSingleOp).
struct SingleOpBody {
  std::unique_ptr<Graph> graph = std::make_unique<Graph>();
  std::map<const Value*, Value*> inputs;  // outer value -> body input or constant
  Value* result = nullptr;                // body value holding the op's output 0 (same elements, maybe other dims)

  Value* In(const Value* v) {
    auto it = inputs.find(v);
    if (it != inputs.end()) return it->second;
    Value* bv = v->is_constant() ? graph->AddConstant(v->name, v->constant) : graph->AddInput(v->name, v->dtype, v->shape);
    inputs.emplace(v, bv);
    return bv;
  }
  Value* Add(const std::string& op, const std::string& name, std::vector<Value*> ins, DType dtype, const Dims& dims,
             std::map<std::string, Attribute> attrs = {}, int64_t opset = 0) {
    Node* n = graph->AddNode(op, name, std::move(ins), {name + ":0"});
    n->attrs = std::move(attrs);
    n->opset_version = opset;
    n->outputs[0]->dtype = dtype;
    n->outputs[0]->shape = Shape::Of(dims);
    return n->outputs[0];
  }
  Value* ConstI64(const std::string& name, const std::vector<int64_t>& values) {
    Tensor t(DType::kI64, {static_cast<int64_t>(values.size())});
    for (size_t i = 0; i < values.size(); ++i) t.data<int64_t>()[i] = values[i];
    return graph->AddConstant(name, std::move(t));
  }
};

// Reduced axes of a Reduce* op (attribute or constant input; empty = all unless noop_with_empty_axes),
// sorted and non-negative; nullopt when not known at placement time.
std::optional<std::vector<int64_t>> ReducedAxes(const Node& n, int rank) {
  std::vector<int64_t> axes = n.GetInts("axes");
  if (axes.empty() && n.inputs.size() > 1 && n.inputs[1]) {
    if (!n.inputs[1]->is_constant()) return std::nullopt;
    axes = n.inputs[1]->constant->ToInt64Vector();
  }
  if (axes.empty()) {
    if (n.GetInt("noop_with_empty_axes", 0) != 0) return std::nullopt;
    for (int i = 0; i < rank; ++i) axes.push_back(i);
  }
  for (int64_t& a : axes) {
    if (a < 0) a += rank;
    if (a < 0 || a >= rank) return std::nullopt;
  }
  std::sort(axes.begin(), axes.end());
  axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
  return axes;
}

// Nearest Resize/Upsample that repeats every element of dim d f_d times (output dim = f_d * input dim, and
// output index i reads input index i / f_d, as integer-factor upsampling does under the asymmetric,
// half_pixel and similar modes with the default nearest_mode): the factors; nullopt for any other
// sampling or where roi / scales / sizes are not constants. The indices come from the CPU kernel's own
// sampling (runtime/cpu/resize.h), so the two agree by construction.
std::optional<Dims> NearestRepeatFactors(const Node& n, const Dims& xd, const Dims& od) {
  if (xd.size() != od.size() || NumElements(xd) == 0) return std::nullopt;
  bool legacy = n.op_type == "Upsample" || n.opset_version == 10;
  if (n.GetString("mode", "nearest") != "nearest") return std::nullopt;
  auto constant = [&](int i) -> std::optional<const Tensor*> {
    const Value* v = n.input(i);
    if (!v) return static_cast<const Tensor*>(nullptr);
    if (!v->is_constant()) return std::nullopt;
    return v->constant->numel() > 0 ? v->constant.get() : nullptr;
  };
  std::optional<const Tensor*> roi = legacy ? static_cast<const Tensor*>(nullptr) : constant(1);
  std::optional<const Tensor*> scales = constant(legacy ? 1 : 2);
  std::optional<const Tensor*> sizes = legacy ? static_cast<const Tensor*>(nullptr) : constant(3);
  if (!roi || !scales || !sizes) return std::nullopt;
  absl::StatusOr<std::vector<ResizeTaps>> taps = ResizeTapsOf(n, xd, od, *roi, *scales, *sizes != nullptr);
  if (!taps.ok()) return std::nullopt;
  Dims factors;
  for (size_t d = 0; d < xd.size(); ++d) {
    const ResizeTaps& t = (*taps)[d];
    if (od[d] % xd[d] != 0 || t.n != 1) return std::nullopt;
    int64_t f = od[d] / xd[d];
    for (int64_t i = 0; i < od[d]; ++i)
      if (t.outside[i] || t.idx[i] != i / f) return std::nullopt;
    factors.push_back(f);
  }
  return factors;
}

// Builds the one-op body for `n`, or returns null when no single fused kernel computes it:
//  * fusible elementwise ops (float32/float16/bfloat16 and bool values: IsFusibleElementwise) and last-axis
//    reductions: the op;
//  * Transpose / Slice / Expand, Gather of one constant index (float types): the view read by an Identity copy;
//  * Clip with runtime scalar bounds: Max then Min;
//  * Reduce* over trailing axes, or over one other axis, and GlobalAverage/MaxPool: a last-axis reduction
//    of a reshaped (dense) or transposed view; the result has the op's elements in other dims;
//  * nearest Resize/Upsample by integer factors (NearestRepeatFactors): an Expand of a reshaped view;
//  * LayerNormalization over the last axis: its function body, one row kernel;
//  * GroupNorm (com.clusterjit.FlatGroupNorm) and InstanceNormalization with constant scale and bias: a row
//    kernel over a [N, groups, L] view.
std::unique_ptr<SingleOpBody> LowerSingleOp(const Node& n) {
  auto static_kernel = [](const Value* v) { return v && IsKernelStorage(v->dtype) && v->shape.fully_known(); };
  const Value* x0 = n.input(0);
  // A Cast may read an integer input (IsFusibleElementwise says which).
  const bool x0_ok = static_kernel(x0) || (n.op_type == "Cast" && x0 && x0->shape.fully_known());
  if (n.outputs.size() != 1 || !static_kernel(n.outputs[0]) || !x0_ok) return nullptr;
  auto b = std::make_unique<SingleOpBody>();
  const Value* out = n.outputs[0];
  DType dt = out->dtype;
  bool f32 = dt == DType::kF32 && n.input(0)->dtype == DType::kF32;
  Dims od = out->shape.concrete(), xd = n.input(0)->shape.concrete();
  int r = static_cast<int>(xd.size());
  if (IsFusibleElementwise(n) || IsRowReduction(n) || IsStridedView(n)) {
    std::vector<Value*> ins;
    for (const Value* v : n.inputs) ins.push_back(v ? b->In(v) : nullptr);
    Node* bn = b->graph->AddNode(n.op_type, n.name, ins, {out->name});
    bn->domain = n.domain;
    bn->opset_version = n.opset_version;
    bn->attrs = n.attrs;
    bn->outputs[0]->dtype = out->dtype;
    bn->outputs[0]->shape = out->shape;
    b->result = bn->outputs[0];
    if (IsStridedView(n)) {
      b->result = b->Add("Identity", n.name + "/copy", {b->result}, dt, od);
    }
  } else if (n.op_type == "Gather" && n.input(1) && n.input(1)->is_constant() &&
             n.input(1)->constant->numel() == 1 && n.input(1)->shape.rank() <= 1) {
    // One constant index: a Slice of one position along the axis (the output drops or keeps that 1).
    int64_t axis = n.GetInt("axis", 0);
    if (axis < 0) axis += r;
    if (axis < 0 || axis >= r) return nullptr;
    int64_t i = n.input(1)->constant->ToInt64Vector()[0];
    if (i < 0) i += xd[axis];
    if (i < 0 || i >= xd[axis]) return nullptr;
    Dims sd = xd;
    sd[axis] = 1;
    Value* s = b->Add("Slice", n.name + "/slice",
                      {b->In(n.input(0)), b->ConstI64(n.name + "/start", {i}), b->ConstI64(n.name + "/end", {i + 1}),
                       b->ConstI64(n.name + "/axis", {axis})},
                      dt, sd, {}, 13);
    b->result = b->Add("Identity", n.name + "/copy", {s}, dt, sd);
  } else if (f32 && n.op_type == "Clip" && !n.HasAttr("min") && !n.HasAttr("max")) {
    Value* x = b->In(n.input(0));
    for (int i = 1; i <= 2; ++i) {
      const Value* bound = n.input(i);
      if (!bound) continue;
      if (bound->dtype != DType::kF32 || !bound->shape.fully_known() || NumElements(bound->shape.concrete()) != 1) {
        return nullptr;
      }
      x = b->Add(i == 1 ? "Max" : "Min", absl::StrCat(n.name, i == 1 ? "/max" : "/min"), {x, b->In(bound)}, DType::kF32, od);
    }
    b->result = x;
  } else if (f32 && (TraitsOf(n).reduce || n.op_type == "GlobalAveragePool" || n.op_type == "GlobalMaxPool")) {
    std::string op = n.op_type == "GlobalAveragePool" ? "ReduceMean" : n.op_type == "GlobalMaxPool" ? "ReduceMax" : n.op_type;
    std::vector<int64_t> axes;
    if (TraitsOf(n).reduce) {
      std::optional<std::vector<int64_t>> a = ReducedAxes(n, r);
      if (!a || a->empty()) return nullptr;
      axes = *a;
    } else {
      for (int i = 2; i < r; ++i) axes.push_back(i);
      if (axes.empty()) return nullptr;
    }
    std::vector<int64_t> kept;
    int64_t reduced = 1;
    for (int i = 0; i < r; ++i) {
      if (std::find(axes.begin(), axes.end(), i) == axes.end()) kept.push_back(i);
      else reduced *= xd[i];
    }
    if (reduced == 0) return nullptr;
    Dims row_in, row_out;
    for (int64_t i : kept) row_in.push_back(xd[i]);
    row_in.push_back(reduced);
    row_out = row_in;
    row_out.back() = 1;
    if (NumElements(row_out) != NumElements(od)) return nullptr;
    Value* x = b->In(n.input(0));
    bool trailing = axes.front() == r - static_cast<int64_t>(axes.size()) && axes.back() == r - 1;
    if (trailing) {
      x = b->Add("Reshape", n.name + "/rows", {x, b->ConstI64(n.name + "/rows_shape", row_in)}, DType::kF32, row_in, {}, 14);
    } else if (axes.size() == 1) {
      std::vector<int64_t> perm = kept;
      perm.push_back(axes[0]);
      x = b->Add("Transpose", n.name + "/rows", {x}, DType::kF32, row_in, {{"perm", Attribute::Ints(perm)}});
    } else {
      return nullptr;
    }
    b->result = b->Add(op, n.name + "/reduce", {x}, DType::kF32, row_out, {{"axes", Attribute::Ints({-1})}, {"keepdims", Attribute::Int(1)}}, 11);
  } else if (n.op_type == "LayerNormalization" && n.domain.empty() && f32) {
    // Its ONNX function body (compiler/passes/decompose.h): one row kernel when it normalizes the last axis.
    std::vector<Value*> ins;
    for (const Value* v : n.inputs) ins.push_back(v ? b->In(v) : nullptr);
    Node* bn = b->graph->AddNode(n.op_type, n.name, ins, {out->name});
    bn->opset_version = n.opset_version;
    bn->attrs = n.attrs;
    bn->outputs[0]->dtype = out->dtype;
    bn->outputs[0]->shape = out->shape;
    b->graph->AddOutput(bn->outputs[0]);
    absl::StatusOr<bool> decomposed = DecomposeLayerNormalization(*b->graph);
    if (!decomposed.ok() || !*decomposed) return nullptr;
    b->result = b->graph->outputs()[0];
    return b;
  } else if (f32 && ((n.op_type == "FlatGroupNorm" && n.domain == kInternalDomain) ||
                     (n.op_type == "InstanceNormalization" && n.domain.empty()))) {
    // Normalization of N x G rows (GroupNorm's groups; InstanceNormalization's channels, G = C) with one
    // scale and bias per row group: X viewed as [N, G, L], mean and variance over L (a row kernel), the
    // per-group affine broadcast as [G, 1], the result viewed back as X.
    const bool instance = n.op_type == "InstanceNormalization";
    if (xd.size() < (instance ? 3u : 1u)) return nullptr;
    const int64_t groups = instance ? xd[1] : n.GetInt("num_groups", 0);
    const int64_t batch = xd[0];
    if (groups <= 0 || batch <= 0 || NumElements(xd) % (batch * groups) != 0) return nullptr;
    const int64_t len = NumElements(xd) / (batch * groups);
    const Value* scale = n.input(1);
    const Value* bias = n.input(2);
    if (len == 0 || !scale || !bias || !scale->is_constant() || !bias->is_constant() ||
        scale->constant->dtype() != DType::kF32 || bias->constant->dtype() != DType::kF32 ||
        scale->constant->numel() != groups || bias->constant->numel() != groups) {
      return nullptr;
    }
    const Dims rows = {batch, groups, len}, stats = {batch, groups, 1};
    const std::map<std::string, Attribute> last = {{"axes", Attribute::Ints({-1})}, {"keepdims", Attribute::Int(1)}};
    Value* x = b->Add("Reshape", n.name + "/rows", {b->In(n.input(0)), b->ConstI64(n.name + "/rows_shape", rows)},
                      DType::kF32, rows, {}, 14);
    Value* mean = b->Add("ReduceMean", n.name + "/mean", {x}, DType::kF32, stats, last, 13);
    Value* d = b->Add("Sub", n.name + "/centered", {x, mean}, DType::kF32, rows);
    Value* sq = b->Add("Mul", n.name + "/squared", {d, d}, DType::kF32, rows);
    Value* var = b->Add("ReduceMean", n.name + "/variance", {sq}, DType::kF32, stats, last, 13);
    Tensor eps(DType::kF32, {});
    *eps.data<float>() = n.GetFloat("epsilon", 1e-5f);
    Value* ve = b->Add("Add", n.name + "/plus_epsilon", {var, b->graph->AddConstant(n.name + "/epsilon", std::move(eps))},
                       DType::kF32, stats);
    Value* sd = b->Add("Sqrt", n.name + "/stddev", {ve}, DType::kF32, stats);
    Value* normed = b->Add("Div", n.name + "/normalized", {d, sd}, DType::kF32, rows);
    Value* sc = b->graph->AddConstant(n.name + "/group_scale", scale->constant->Reshaped({groups, 1}));
    Value* bc = b->graph->AddConstant(n.name + "/group_bias", bias->constant->Reshaped({groups, 1}));
    Value* scaled = b->Add("Mul", n.name + "/scaled", {normed, sc}, DType::kF32, rows);
    b->result = b->Add("Add", n.name + "/shifted", {scaled, bc}, DType::kF32, rows);
  } else if (n.op_type == "Resize" || n.op_type == "Upsample") {
    std::optional<Dims> rep = NearestRepeatFactors(n, xd, od);
    if (!rep) return nullptr;
    // Each dim d repeated f_d times: [.., x_d, 1, ..] broadcast to [.., x_d, f_d, ..], read by one copy.
    Dims split, expanded;
    for (int d = 0; d < r; ++d) {
      split.push_back(xd[d]);
      expanded.push_back(xd[d]);
      if ((*rep)[d] > 1) {
        split.push_back(1);
        expanded.push_back((*rep)[d]);
      }
    }
    Value* x = b->Add("Reshape", n.name + "/split", {b->In(n.input(0)), b->ConstI64(n.name + "/split_shape", split)},
                      dt, split, {}, 14);
    x = b->Add("Expand", n.name + "/repeat", {x, b->ConstI64(n.name + "/repeat_shape", expanded)}, dt, expanded, {}, 13);
    b->result = b->Add("Identity", n.name + "/copy", {x}, dt, expanded);
  } else {
    return nullptr;
  }
  b->graph->AddOutput(b->result);
  return b;
}

// A buffer alias: a reshape-like op or Identity (OpTraits::view) with the same dtype and element count.
bool IsBufferAlias(const Node& n) {
  const ViewKind view = TraitsOf(n).view;
  return (view == ViewKind::kReshape || view == ViewKind::kIdentity) && n.outputs.size() == 1 && n.outputs[0] && n.input(0) &&
         n.outputs[0]->shape.fully_known() && n.input(0)->shape.fully_known() && n.outputs[0]->dtype == n.input(0)->dtype &&
         NumElements(n.outputs[0]->shape.concrete()) == NumElements(n.input(0)->shape.concrete());
}

// Strides, dilations and begin/end padding of each spatial dim of a Conv or pool (`window`: its kernel
// dims), from `pads` or auto_pad — SAME_UPPER puts an odd extra pad at the end, SAME_LOWER at the
// beginning (ONNX Conv / MaxPool spec). False for attributes it cannot read.
bool SpatialWindows(const Node& n, const Dims& xd, const Dims& window, const Dims& yd, std::vector<int64_t>* strides,
                    std::vector<int64_t>* dil, std::vector<int64_t>* begin, std::vector<int64_t>* end) {
  int sp = static_cast<int>(xd.size()) - 2;
  if (sp < 1 || static_cast<int>(window.size()) != sp) return false;
  *strides = n.GetInts("strides");
  *dil = n.GetInts("dilations");
  std::vector<int64_t> pads = n.GetInts("pads");
  if (strides->empty()) strides->assign(sp, 1);
  if (dil->empty()) dil->assign(sp, 1);
  if (static_cast<int>(strides->size()) != sp || static_cast<int>(dil->size()) != sp) return false;
  std::string auto_pad = n.GetString("auto_pad", "NOTSET");
  begin->assign(sp, 0);
  end->assign(sp, 0);
  for (int i = 0; i < sp; ++i) {
    int64_t in = xd[2 + i], k = window[i], out = yd[2 + i];
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      int64_t total = std::max<int64_t>(0, (out - 1) * (*strides)[i] + (k - 1) * (*dil)[i] + 1 - in);
      (*begin)[i] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      (*end)[i] = total - (*begin)[i];
    } else if (auto_pad == "NOTSET") {
      if (!pads.empty()) {
        if (static_cast<int>(pads.size()) != 2 * sp) return false;
        (*begin)[i] = pads[i];
        (*end)[i] = pads[sp + i];
      }
    } else if (auto_pad != "VALID") {
      return false;
    }
  }
  return true;
}

// ONNX Conv (1-D or 2-D, float32, static shapes) as the backend's convolution. Padding from `pads` or
// auto_pad (SAME_UPPER puts an odd extra pad at the end, SAME_LOWER at the beginning), per the ONNX spec.
absl::StatusOr<bool> GpuExecutor::Impl::TryConv(const Node& n) {
  const DType dt = LibraryType(n);
  if (n.op_type != "Conv" || n.outputs.size() != 1 || dt == DType::kInvalid || !StaticOf(n.outputs[0], dt) ||
      !StaticOf(n.input(0), dt) || !StaticOf(n.input(1), dt)) {
    return false;
  }
  Dims xd = n.input(0)->shape.concrete(), wd = n.input(1)->shape.concrete(), yd = n.outputs[0]->shape.concrete();
  int rank = static_cast<int>(xd.size());
  if ((rank != 3 && rank != 4) || wd.size() != xd.size() || yd.size() != xd.size()) return false;
  int sp = rank - 2;  // spatial dims: 1 or 2
  std::vector<int64_t> strides, dil, begin, end;
  if (!SpatialWindows(n, xd, {wd.begin() + 2, wd.end()}, yd, &strides, &dil, &begin, &end)) return false;
  ConvShape s;
  s.dtype = dt;
  s.precision = ParseMathPrecision(n.GetString("cjit_precision", "highest"));  // --conv_precision
  s.n = xd[0];
  s.c = xd[1];
  s.k = wd[0];
  s.groups = n.GetInt("group", 1);
  if (s.groups <= 0 || s.c % s.groups != 0 || s.k % s.groups != 0 || wd[1] * s.groups != s.c || yd[1] != s.k) return false;
  if (sp == 2) {
    s.h = xd[2], s.w = xd[3], s.r = wd[2], s.s = wd[3], s.out_h = yd[2], s.out_w = yd[3];
    s.pad_top = begin[0], s.pad_left = begin[1], s.pad_bottom = end[0], s.pad_right = end[1];
    s.stride_h = strides[0], s.stride_w = strides[1], s.dil_h = dil[0], s.dil_w = dil[1];
  } else {
    s.w = xd[2], s.s = wd[2], s.out_w = yd[2];
    s.pad_left = begin[0], s.pad_right = end[0], s.stride_w = strides[0], s.dil_w = dil[0];
  }
  const Value* bias = n.input(2);
  if (bias) {
    if (!StaticOf(bias, dt) || NumElements(bias->shape.concrete()) != s.k) return false;
    s.bias = true;
  }
  if (NumElements(xd) == 0 || NumElements(yd) == 0) return false;
  std::string algorithm;
  absl::StatusOr<std::unique_ptr<ConvOp>> op = MakeTunedConv(*device, options.autotuner, s, n.Describe(), &algorithm);
  CJIT_ASSIGN_OR_RETURN(bool accepted, LibraryAccepts(n, op.status()));
  if (!accepted) return false;
  Step st;
  st.kind = Step::Kind::kConv;
  st.conv = std::move(*op);
  placement.tuned_library_calls += !algorithm.empty();
  AddLibraryStep(std::move(st), n, {Slot(n.input(0)), Slot(n.input(1)), bias ? Slot(bias) : -1});
  ++placement.convs;
  return true;
}

// ONNX ConvTranspose (1-D or 2-D, float32, static shapes; padding from pads, auto_pad or output_shape as the
// CPU kernel reads them: ComputeWindowGeometry) as the backend's transposed convolution; asymmetric padding
// the library declines runs on the host.
absl::StatusOr<bool> GpuExecutor::Impl::TryConvTranspose(const Node& n) {
  const DType dt = LibraryType(n);
  if (n.op_type != "ConvTranspose" || !n.domain.empty() || n.outputs.size() != 1 || dt == DType::kInvalid ||
      !StaticOf(n.outputs[0], dt) || !StaticOf(n.input(0), dt) || !StaticOf(n.input(1), dt)) {
    return false;
  }
  Dims xd = n.input(0)->shape.concrete(), wd = n.input(1)->shape.concrete(), yd = n.outputs[0]->shape.concrete();
  const int rank = static_cast<int>(xd.size());
  if ((rank != 3 && rank != 4) || wd.size() != xd.size() || yd.size() != xd.size()) return false;
  const int sp = rank - 2;
  absl::StatusOr<WindowGeometry> g = ComputeWindowGeometry(n, {xd.begin() + 2, xd.end()}, {wd.begin() + 2, wd.end()},
                                                            /*transposed=*/true, false);
  if (!g.ok() || static_cast<int>(g->out.size()) != sp) return false;
  for (int i = 0; i < sp; ++i)
    if (g->out[i] != yd[2 + i]) return false;
  ConvShape s;
  s.dtype = dt;
  s.precision = ParseMathPrecision(n.GetString("cjit_precision", "highest"));
  s.n = xd[0];
  s.c = xd[1];
  s.groups = n.GetInt("group", 1);
  s.k = yd[1];
  if (s.groups <= 0 || s.c % s.groups != 0 || wd[0] != s.c || wd[1] * s.groups != s.k) return false;
  if (sp == 2) {
    s.h = xd[2], s.w = xd[3], s.r = wd[2], s.s = wd[3], s.out_h = yd[2], s.out_w = yd[3];
    s.pad_top = g->pad_begin[0], s.pad_left = g->pad_begin[1], s.pad_bottom = g->pad_end[0], s.pad_right = g->pad_end[1];
    s.stride_h = g->strides[0], s.stride_w = g->strides[1], s.dil_h = g->dilations[0], s.dil_w = g->dilations[1];
  } else {
    s.w = xd[2], s.s = wd[2], s.out_w = yd[2];
    s.pad_left = g->pad_begin[0], s.pad_right = g->pad_end[0], s.stride_w = g->strides[0], s.dil_w = g->dilations[0];
  }
  const Value* bias = n.input(2);
  if (bias) {
    if (!StaticOf(bias, dt) || NumElements(bias->shape.concrete()) != s.k) return false;
    s.bias = true;
  }
  if (NumElements(xd) == 0 || NumElements(yd) == 0) return false;
  absl::StatusOr<std::unique_ptr<ConvOp>> op = device->MakeConvTranspose(s);
  CJIT_ASSIGN_OR_RETURN(bool accepted, LibraryAccepts(n, op.status()));
  if (!accepted) return false;
  Step st;
  st.kind = Step::Kind::kConv;
  st.conv = std::move(*op);
  AddLibraryStep(std::move(st), n, {Slot(n.input(0)), Slot(n.input(1)), bias ? Slot(bias) : -1});
  ++placement.convs;
  return true;
}

// MaxPool / AveragePool (1-D or 2-D, float32, floor mode, no dilation, no Indices output) as the backend's
// pooling.
absl::StatusOr<bool> GpuExecutor::Impl::TryPool(const Node& n) {
  bool max = n.op_type == "MaxPool";
  const DType dt = LibraryType(n);
  if ((!max && n.op_type != "AveragePool") || dt == DType::kInvalid || !StaticOf(n.input(0), dt) ||
      !StaticOf(n.outputs[0], dt)) {
    return false;
  }
  for (size_t j = 1; j < n.outputs.size(); ++j)
    if (n.outputs[j]) return false;  // Indices
  Dims xd = n.input(0)->shape.concrete(), yd = n.outputs[0]->shape.concrete();
  int rank = static_cast<int>(xd.size());
  std::vector<int64_t> window = n.GetInts("kernel_shape");
  if ((rank != 3 && rank != 4) || yd.size() != xd.size() || static_cast<int>(window.size()) != rank - 2) return false;
  if (n.GetInt("ceil_mode", 0) != 0 || yd[0] != xd[0] || yd[1] != xd[1]) return false;
  std::vector<int64_t> strides, dil, begin, end;
  if (!SpatialWindows(n, xd, Dims(window.begin(), window.end()), yd, &strides, &dil, &begin, &end)) return false;
  for (int64_t d : dil)
    if (d != 1) return false;
  PoolShape s;
  s.dtype = dt;
  s.n = xd[0];
  s.c = xd[1];
  s.max = max;
  s.count_include_pad = n.GetInt("count_include_pad", 0) != 0;
  if (rank == 4) {
    s.h = xd[2], s.w = xd[3], s.r = window[0], s.s = window[1], s.out_h = yd[2], s.out_w = yd[3];
    s.pad_top = begin[0], s.pad_left = begin[1], s.pad_bottom = end[0], s.pad_right = end[1];
    s.stride_h = strides[0], s.stride_w = strides[1];
  } else {
    s.w = xd[2], s.s = window[0], s.out_w = yd[2], s.pad_left = begin[0], s.pad_right = end[0], s.stride_w = strides[0];
  }
  if (NumElements(xd) == 0 || NumElements(yd) == 0) return false;
  absl::StatusOr<std::unique_ptr<PoolOp>> op = device->MakePool(s);
  CJIT_ASSIGN_OR_RETURN(bool accepted, LibraryAccepts(n, op.status()));
  if (!accepted) return false;
  Step st;
  st.kind = Step::Kind::kPool;
  st.pool = std::move(*op);
  AddLibraryStep(std::move(st), n, {Slot(n.input(0))});
  ++placement.pools;
  return true;
}

// Gather (any axis) and GatherND (batch_dims 0) of data of any dtype by int32/int64 indices in device memory
// (runtime values or constants), static shapes: the backend's gather (device_backend.h GatherShape).
absl::StatusOr<bool> GpuExecutor::Impl::TryGather(const Node& n) {
  if ((n.op_type != "Gather" && n.op_type != "GatherND") || !n.domain.empty() || n.outputs.size() != 1) return false;
  const Value* data = n.input(0);
  const Value* idx = n.input(1);
  const Value* out = n.outputs[0];
  auto fixed = [](const Value* v) { return v && v->shape.fully_known() && v->dtype != DType::kInvalid; };
  if (!fixed(data) || !fixed(idx) || !fixed(out) || (idx->dtype != DType::kI64 && idx->dtype != DType::kI32) ||
      out->dtype != data->dtype || DTypeSize(data->dtype) == 0) {
    return false;
  }
  const Dims dd = data->shape.concrete(), id = idx->shape.concrete();
  const int64_t es = static_cast<int64_t>(DTypeSize(data->dtype));
  const int r = static_cast<int>(dd.size());
  auto product = [&](int from, int to) {
    int64_t p = 1;
    for (int i = from; i < to; ++i) p *= dd[i];
    return p;
  };
  GatherShape s;
  s.indices_int64 = idx->dtype == DType::kI64;
  if (n.op_type == "Gather") {
    int64_t axis = n.GetInt("axis", 0);
    if (axis < 0) axis += r;
    if (axis < 0 || axis >= r) return false;
    const int a = static_cast<int>(axis);
    s.k = 1;
    s.n_outer = product(0, a);
    s.n_rows = NumElements(id);
    s.row_bytes = product(a + 1, r) * es;
    s.dims = {dd[a]};
    s.strides_bytes = {s.row_bytes};
    s.outer_stride_bytes = dd[a] * s.row_bytes;
  } else {
    if (n.GetInt("batch_dims", 0) != 0 || id.empty()) return false;
    const int64_t k = id.back();
    if (k < 1 || k > r) return false;
    s.k = k;
    s.n_rows = NumElements(id) / k;
    s.row_bytes = product(static_cast<int>(k), r) * es;
    for (int j = 0; j < k; ++j) {
      s.dims.push_back(dd[j]);
      s.strides_bytes.push_back(product(j + 1, r) * es);
    }
  }
  if (NumElements(out->shape.concrete()) * es != s.n_outer * s.n_rows * s.row_bytes) return false;
  absl::StatusOr<std::unique_ptr<GatherOp>> op = device->MakeGather(s);
  CJIT_ASSIGN_OR_RETURN(bool accepted, LibraryAccepts(n, op.status()));
  if (!accepted) return false;
  Step st;
  st.kind = Step::Kind::kGather;
  st.gather = std::move(*op);
  AddLibraryStep(std::move(st), n, {Slot(data), Slot(idx)});
  gathers.push_back(n.name);
  ++placement.gathers;
  return true;
}

absl::StatusOr<bool> GpuExecutor::Impl::TrySingleOpKernel(const Node& n) {
  if (IsBufferAlias(n)) {  // same bytes, other dims: an alias, on the device or on the host
    AddAlias(Slot(n.input(0)), Slot(n.outputs[0]));
    return true;
  }
  std::unique_ptr<SingleOpBody> body = LowerSingleOp(n);
  if (!body) return false;
  absl::StatusOr<FusionPlan> plan = BuildFusionPlan(*body->graph, GpuPlanOptions());
  if (!plan.ok() || plan->kernels.size() != 1 || plan->steps.size() != 1 ||
      plan->steps[0].kind != PlanStep::Kind::kFused) {
    CJIT_VLOG(2) << n.Describe() << ": no single-kernel plan for its GPU lowering";
    return false;
  }
  for (const auto& [outer, inner] : body->inputs) slot_of[inner] = Slot(outer);
  CJIT_ASSIGN_OR_RETURN(bool placed, PlacePlan(*plan, true));
  if (!placed) return false;
  if (body->result->shape.concrete() == n.outputs[0]->shape.concrete()) {
    slot_of[n.outputs[0]] = Slot(body->result);
  } else {
    AddAlias(Slot(body->result), Slot(n.outputs[0]));
  }
  owned.push_back(std::move(body->graph));
  return true;
}

// `whole` cut along `axis` (an attribute, may be negative) into `parts` of its dtype and rank, static
// shapes: one step of pitched device-to-device copies (no kernel, no host round trip), parts to whole
// (kConcat: the parts are the step's inputs) or whole to parts (kSplit: its outputs). False when the
// shapes do not fit.
bool GpuExecutor::Impl::TryPitchedCopies(const Node& n, const Value* whole, const std::vector<Value*>& parts,
                                         Step::Kind kind) {
  if (!whole || !whole->shape.fully_known() || parts.empty()) return false;
  Dims wd = whole->shape.concrete();
  int r = static_cast<int>(wd.size());
  int64_t axis = n.GetInt("axis", 0);
  if (axis < 0) axis += r;
  if (axis < 0 || axis >= r) return false;
  size_t elem = DTypeSize(whole->dtype);
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < axis; ++i) outer *= wd[i];
  for (int i = static_cast<int>(axis) + 1; i < r; ++i) inner *= wd[i];
  Step st;
  st.kind = kind;
  st.node = &n;
  std::vector<int>& part_slots = kind == Step::Kind::kConcat ? st.in : st.out;
  size_t offset = 0;
  for (const Value* v : parts) {
    if (!v || !v->shape.fully_known() || v->dtype != whole->dtype || v->shape.rank() != r) return false;
    size_t width = static_cast<size_t>(v->shape.concrete()[axis] * inner) * elem;
    part_slots.push_back(Slot(v));
    st.concat_offset.push_back(offset);
    st.concat_width.push_back(width);
    offset += width;
  }
  if (offset != static_cast<size_t>(wd[axis] * inner) * elem) return false;
  st.concat_rows = static_cast<size_t>(outer);
  st.concat_pitch = offset;
  (kind == Step::Kind::kConcat ? st.out : st.in) = {Slot(whole)};
  steps.push_back(std::move(st));
  ++placement.copies;
  return true;
}

// Concat (any dtype, static shapes) as pitched copies.
bool GpuExecutor::Impl::TryConcat(const Node& n) {
  return n.op_type == "Concat" && n.outputs.size() == 1 &&
         TryPitchedCopies(n, n.outputs[0], n.inputs, Step::Kind::kConcat);
}

// Split (any dtype, static shapes; https://onnx.ai/onnx/operators/onnx__Split.html) as pitched copies, the
// inverse of Concat's. The parts' sizes come from the inferred output shapes, so the `split` attribute
// (opset < 13), the `split` input (13+) and `num_outputs` (18+) are all covered.
bool GpuExecutor::Impl::TrySplit(const Node& n) {
  return n.op_type == "Split" && TryPitchedCopies(n, n.input(0), n.outputs, Step::Kind::kSplit);
}

// Constant-mode Pad of 4-byte elements with non-negative pads on the last two dims only, as a fill and one
// padded copy (https://onnx.ai/onnx/operators/onnx__Pad.html; pads from the attribute or a constant input,
// axes from a constant input, the value from the attribute or a constant input).
bool GpuExecutor::Impl::TryPad(const Node& n) {
  if (n.op_type != "Pad" || n.GetString("mode", "constant") != "constant" || n.outputs.size() != 1 || !n.outputs[0]) {
    return false;
  }
  const Value* x = n.input(0);
  const Value* y = n.outputs[0];
  if (!x || !x->shape.fully_known() || !y->shape.fully_known() || x->dtype != y->dtype) return false;
  if (x->dtype != DType::kF32 && x->dtype != DType::kI32) return false;
  int r = x->shape.rank();
  if (r < 1) return false;
  std::vector<int64_t> pads;
  if (n.HasAttr("pads")) {
    pads = n.GetInts("pads");
  } else if (n.input(1) && n.input(1)->is_constant()) {
    pads = n.input(1)->constant->ToInt64Vector();
  } else {
    return false;
  }
  std::vector<int64_t> axes;
  if (n.input(3)) {
    if (!n.input(3)->is_constant()) return false;
    for (int64_t a : n.input(3)->constant->ToInt64Vector()) axes.push_back(a < 0 ? a + r : a);
  } else {
    for (int i = 0; i < r; ++i) axes.push_back(i);
  }
  if (pads.size() != 2 * axes.size()) return false;
  std::vector<int64_t> begin(r, 0), end(r, 0);
  for (size_t k = 0; k < axes.size(); ++k) {
    if (axes[k] < 0 || axes[k] >= r || pads[k] < 0 || pads[axes.size() + k] < 0) return false;
    begin[axes[k]] = pads[k];
    end[axes[k]] = pads[axes.size() + k];
  }
  for (int d = 0; d + 2 < r; ++d)
    if (begin[d] != 0 || end[d] != 0) return false;
  uint32_t fill = 0;
  float fvalue = n.GetFloat("value", 0.0f);
  int32_t ivalue = static_cast<int32_t>(fvalue);
  if (n.input(2)) {
    if (!n.input(2)->is_constant() || n.input(2)->dtype != x->dtype || n.input(2)->constant->numel() > 1) return false;
    if (n.input(2)->constant->numel() == 1) {
      if (x->dtype == DType::kF32) fvalue = *n.input(2)->constant->data<float>();
      else ivalue = *n.input(2)->constant->data<int32_t>();
    }
  }
  if (x->dtype == DType::kF32) std::memcpy(&fill, &fvalue, 4);
  else std::memcpy(&fill, &ivalue, 4);
  Dims xd = x->shape.concrete();
  Step st;
  st.kind = Step::Kind::kPad;
  st.node = &n;
  st.pad_w = static_cast<size_t>(xd[r - 1]);
  st.pad_h = r >= 2 ? static_cast<size_t>(xd[r - 2]) : 1;
  st.pad_planes = 1;
  for (int d = 0; d + 2 < r; ++d) st.pad_planes *= static_cast<size_t>(xd[d]);
  st.pad_left = static_cast<size_t>(begin[r - 1]);
  st.pad_top = r >= 2 ? static_cast<size_t>(begin[r - 2]) : 0;
  st.pad_out_w = st.pad_w + st.pad_left + static_cast<size_t>(end[r - 1]);
  st.pad_out_h = st.pad_h + st.pad_top + (r >= 2 ? static_cast<size_t>(end[r - 2]) : 0);
  if (NumElements(y->shape.concrete()) != static_cast<int64_t>(st.pad_planes * st.pad_out_h * st.pad_out_w)) return false;
  st.pad_fill = fill;
  st.in = {Slot(x)};
  st.out = {Slot(y)};
  steps.push_back(std::move(st));
  ++placement.copies;
  return true;
}

// Host steps whose inputs are all graph inputs, constants or results of earlier such steps (and reshapes of
// those results) need nothing the device computes, so they may run before every device step: each slot is
// written once, so no device step writes what they read. Hoisted, they no longer split the device steps,
// which can then be one CUDA graph. Example (a BERT export): Cast(attention_mask) -> GatherND -> And ->
// Where(mask, 0, -inf) and Gather(word_embeddings, input_ids) become the prologue; every matrix product,
// softmax and normalization after them is one graph.
void GpuExecutor::Impl::HoistHostPrologue() {
  std::vector<bool> available(slots.size(), false), from_prologue(slots.size(), false);
  for (int s : input_slots) available[s] = true;
  for (size_t s = 0; s < slots.size(); ++s) available[s] = available[s] || slots[s].constant != nullptr;
  std::vector<Step> prologue, rest;
  for (Step& st : steps) {
    bool hoist = st.kind == Step::Kind::kHost ||
                 (st.kind == Step::Kind::kAlias && st.in[0] >= 0 && from_prologue[st.in[0]]);
    for (int s : st.in) hoist = hoist && (s < 0 || available[s]);
    for (int s : st.implicit) hoist = hoist && available[s];
    if (!hoist) {
      rest.push_back(std::move(st));
      continue;
    }
    for (int s : st.out) {
      if (s >= 0) available[s] = from_prologue[s] = true;
    }
    if (st.kind == Step::Kind::kHost) ++placement.prologue_ops;
    prologue.push_back(std::move(st));
  }
  prologue_steps = prologue.size();
  std::vector<bool> boundary(slots.size(), false);
  for (const Step& st : rest) {
    for (int s : st.in)
      if (s >= 0 && from_prologue[s]) boundary[s] = true;
    for (int s : st.implicit)
      if (from_prologue[s]) boundary[s] = true;
  }
  for (int s : output_slots)
    if (from_prologue[s]) boundary[s] = true;
  boundary_slots.clear();
  for (size_t s = 0; s < slots.size(); ++s)
    if (boundary[s]) boundary_slots.push_back(static_cast<int>(s));
  steps = std::move(prologue);
  for (Step& st : rest) steps.push_back(std::move(st));
}

void GpuExecutor::Impl::AddAlias(int from, int to) {
  Step st;
  st.kind = Step::Kind::kAlias;
  st.in = {from};
  st.out = {to};
  steps.push_back(std::move(st));
  ++placement.aliases;
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
  if (CJIT_VLOG_IS_ON(2)) {
    std::string ins;
    for (const Value* v : n.inputs)
      if (v) absl::StrAppend(&ins, ins.empty() ? "" : ", ", DTypeName(v->dtype), v->shape.ToString(), v->is_constant() ? " const" : "");
    CJIT_VLOG(2) << "GPU placement: " << n.Describe() << " runs on the host (inputs " << ins << ")";
  }
  steps.push_back(std::move(st));
  ++placement.host_ops;
  ++placement.host_op_types[n.op_type];
  return absl::OkStatus();
}

absl::Status GpuExecutor::Impl::PlaceNode(const Node& n, const PlanStep* step) {
  if (n.op_type == kClusterOp) return PlaceCluster(n);
  // Sequences, optionals and strings live on the host: so do the ops that read or make them.
  for (const std::vector<Value*>* vs : {&n.inputs, &n.outputs}) {
    for (const Value* v : *vs) {
      if (v != nullptr && (v->kind != ValueKind::kTensor || v->dtype == DType::kString)) return AddHost(n, nullptr, nullptr);
    }
  }
  if (step != nullptr && !step->post_ops.empty()) {
    // A GEMM with its epilogue (the only post-ops of GPU plans); if the library declines, the product and
    // the absorbed ops are placed one by one.
    CJIT_ASSIGN_OR_RETURN(bool gemm, TryGemm(n, step));
    if (gemm) return absl::OkStatus();
    CJIT_RETURN_IF_ERROR(PlaceNode(n));
    for (const Node* a : step->absorbed) CJIT_RETURN_IF_ERROR(PlaceNode(*a));
    return absl::OkStatus();
  }
  CJIT_ASSIGN_OR_RETURN(bool gemm, TryGemm(n, nullptr));
  if (gemm) return absl::OkStatus();
  CJIT_ASSIGN_OR_RETURN(bool conv, TryConv(n));
  if (conv) return absl::OkStatus();
  CJIT_ASSIGN_OR_RETURN(bool deconv, TryConvTranspose(n));
  if (deconv) return absl::OkStatus();
  CJIT_ASSIGN_OR_RETURN(bool pool, TryPool(n));
  if (pool) return absl::OkStatus();
  CJIT_ASSIGN_OR_RETURN(bool kernel, TrySingleOpKernel(n));
  if (kernel) return absl::OkStatus();
  CJIT_ASSIGN_OR_RETURN(bool gather, TryGather(n));
  if (gather) return absl::OkStatus();
  if (TryConcat(n)) return absl::OkStatus();
  if (TrySplit(n)) return absl::OkStatus();
  if (TryPad(n)) return absl::OkStatus();
  return AddHost(n, nullptr, nullptr);
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
  for (const Node* n : order) CJIT_RETURN_IF_ERROR(impl->PlaceNode(*n));
  for (const Value* v : graph->outputs()) impl->output_slots.push_back(impl->Slot(v));
  impl->HoistHostPrologue();
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
  if (impl->options.graph_level <= 0) impl->graph_ineligible = "--gpu_graph_level=0";
  for (size_t i = impl->prologue_steps; i < impl->steps.size(); ++i) {
    const Impl::Step& st = impl->steps[i];
    if (impl->graph_ineligible.empty() && st.kind == Impl::Step::Kind::kHost) {
      impl->graph_ineligible = absl::StrCat("the host runs ", st.node->op_type, " '", st.node->name, "'");
    }
  }
  for (const Impl::SlotInfo& info : impl->slots) {
    if (impl->graph_ineligible.empty() && !info.static_dims) {
      impl->graph_ineligible = absl::StrCat("value '", info.value->name, "' has no static shape");
    }
  }
  CJIT_RETURN_IF_ERROR(impl->device->Synchronize());  // uploads done
  CJIT_VLOG(1) << "GPU placement: " << impl->placement.ToString();
  return std::unique_ptr<GpuExecutor>(new GpuExecutor(std::move(impl)));
}

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
    if (const char* why = RunCancellationReason()) return RunCancelledError(why, absl::StrCat("GPU plan step ", step_index));
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
          CJIT_RETURN_IF_ERROR(dev.Copy2D(on_device[st.out[i]]->address(), st.concat_width[i], src + st.concat_offset[i],
                                          st.concat_pitch, st.concat_width[i], st.concat_rows));
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
        return absl::FailedPreconditionError(absl::StrCat("output '", m.slots[s].value->name, "' is not on the device"));
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
  std::lock_guard<std::mutex> lock(m.graph_mu);
  if (!m.graph_failure.empty()) return absl::StrCat("no CUDA graph: capture failed: ", m.graph_failure);
  if (m.graph_state == nullptr) return absl::StrCat("CUDA graph not captured yet (", m.plain_runs, " plain runs)");
  return absl::StrCat("CUDA graph of ", m.steps.size(), " steps, ", m.graph_replays, " replays");
}

absl::StatusOr<std::vector<Tensor>> GpuExecutor::Run(const std::vector<Tensor>& inputs) const {
  const Impl& m = *impl_;
  const DeviceBackend& dev = *m.device;
  CJIT_RETURN_IF_ERROR(dev.MakeCurrent());
  if (inputs.size() != m.input_slots.size()) {
    return absl::InvalidArgumentError(absl::StrCat("the graph takes ", m.input_slots.size(), " inputs, got ", inputs.size()));
  }
  if (m.graph_ineligible.empty()) {
    // Wrong inputs are the caller's error, not a reason to stop using graphs.
    CJIT_RETURN_IF_ERROR(CheckInputs(m, inputs));
    std::unique_lock<std::mutex> lock(m.graph_mu);
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
