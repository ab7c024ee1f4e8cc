// GPU placement of single ops as one fused kernel each (an op the fusion plan can make a kernel of, or an
// equivalent body: reductions, Resize nearest by integer factors, strided views as copies), and buffer
// aliases for reshape-like ops. See gpu_lowering.cc for the rest of placement.
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

namespace cjit {
namespace {

// Strided views (OpTraits::view kStrided) a single-op step runs as a copy kernel reading the view
// (fusion_plan.h absorbs these into a consumer; alone, an Identity consumer gives them one). Reshape-like
// ops and Identity never get here: they are buffer aliases.
bool IsStridedView(const Node& n) { return TraitsOf(n).view == ViewKind::kStrided; }

// A one-op body graph for a single op on the device: the op itself, or an equivalent the fusion plan makes
// one kernel of (see LowerSingleOp).
struct SingleOpBody {
  std::unique_ptr<Graph> graph = std::make_unique<Graph>();
  std::map<const Value*, Value*> inputs;  // outer value -> body input or constant
  Value* result = nullptr;                // body value holding the op's output 0 (same elements, maybe other dims)

  Value* In(const Value* v) {
    auto it = inputs.find(v);
    if (it != inputs.end()) return it->second;
    Value* bv =
        v->is_constant() ? graph->AddConstant(v->name, v->constant) : graph->AddInput(v->name, v->dtype, v->shape);
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
      x = b->Add(i == 1 ? "Max" : "Min", absl::StrCat(n.name, i == 1 ? "/max" : "/min"), {x, b->In(bound)}, DType::kF32,
                 od);
    }
    b->result = x;
  } else if (f32 && (TraitsOf(n).reduce || n.op_type == "GlobalAveragePool" || n.op_type == "GlobalMaxPool")) {
    std::string op = n.op_type == "GlobalAveragePool" ? "ReduceMean"
                     : n.op_type == "GlobalMaxPool"   ? "ReduceMax"
                                                      : n.op_type;
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
      x = b->Add("Reshape", n.name + "/rows", {x, b->ConstI64(n.name + "/rows_shape", row_in)}, DType::kF32, row_in, {},
                 14);
    } else if (axes.size() == 1) {
      std::vector<int64_t> perm = kept;
      perm.push_back(axes[0]);
      x = b->Add("Transpose", n.name + "/rows", {x}, DType::kF32, row_in, {{"perm", Attribute::Ints(perm)}});
    } else {
      return nullptr;
    }
    b->result = b->Add(op, n.name + "/reduce", {x}, DType::kF32, row_out,
                       {{"axes", Attribute::Ints({-1})}, {"keepdims", Attribute::Int(1)}}, 11);
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
    Value* ve = b->Add("Add", n.name + "/plus_epsilon",
                       {var, b->graph->AddConstant(n.name + "/epsilon", std::move(eps))}, DType::kF32, stats);
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
    x = b->Add("Expand", n.name + "/repeat", {x, b->ConstI64(n.name + "/repeat_shape", expanded)}, dt, expanded, {},
               13);
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
  return (view == ViewKind::kReshape || view == ViewKind::kIdentity) && n.outputs.size() == 1 && n.outputs[0] &&
         n.input(0) && n.outputs[0]->shape.fully_known() && n.input(0)->shape.fully_known() &&
         n.outputs[0]->dtype == n.input(0)->dtype &&
         NumElements(n.outputs[0]->shape.concrete()) == NumElements(n.input(0)->shape.concrete());
}

}  // namespace

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

}  // namespace cjit
