#include "compiler/codegen/fusion_plan.h"

#include <algorithm>
#include <functional>
#include <map>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "base/logging.h"
#include "compiler/ops/op_registry.h"

#include "absl/strings/str_cat.h"
#include "compiler/ir/union_find.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "compiler/ir/float16.h"
#include "compiler/passes/graph_cycles.h"

namespace cjit {

bool IsFloatStorage(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

bool IsByteStorage(DType t) { return t == DType::kU8 || t == DType::kI8; }

bool IsScalarConstant(const Value* v) {
  return v && v->is_constant() && (IsFloatStorage(v->constant->dtype()) || IsByteStorage(v->constant->dtype())) &&
         v->constant->numel() == 1;
}

float ScalarConstantValue(const Value* v) {
  const Tensor& c = *v->constant;
  if (c.dtype() == DType::kF16) return HalfBitsToFloat(*static_cast<const uint16_t*>(c.raw()));
  if (c.dtype() == DType::kBF16) return Bfloat16BitsToFloat(*static_cast<const uint16_t*>(c.raw()));
  if (c.dtype() == DType::kU8) return *c.data<uint8_t>();
  if (c.dtype() == DType::kI8) return *c.data<int8_t>();
  return *c.data<float>();
}

bool IsKernelStorage(DType t) { return IsFloatStorage(t) || t == DType::kBool; }

namespace {

// QuantizeLinear / DequantizeLinear per tensor (compiler/ops/op_registry.h FusionClass::kQuantize): the
// scale a float32 scalar constant, the zero point absent or a scalar constant of the byte type.
FusionDecision FusibleQuantize(const Node& n) {
  const bool quantize = n.op_type == "QuantizeLinear";
  if (n.inputs.size() < 2 || n.inputs[0] == nullptr || n.outputs.size() != 1 || n.outputs[0] == nullptr ||
      !n.outputs[0]->shape.fully_known() || !n.inputs[0]->shape.fully_known()) {
    return {false, "not one input and one output of known dims"};
  }
  if (n.HasAttr("block_size") && n.GetInt("block_size", 0) != 0) return {false, "blocked quantization"};
  const Value* scale = n.inputs[1];
  if (!IsScalarConstant(scale) || scale->constant->dtype() != DType::kF32) {
    return {false, "the scale is not one float32 constant (per-axis quantization runs as its kernel)"};
  }
  const DType bytes = quantize ? n.outputs[0]->dtype : n.inputs[0]->dtype;
  if (!IsByteStorage(bytes)) return {false, absl::StrCat(DTypeName(bytes), " quantization is not fused")};
  if (quantize ? !IsFloatStorage(n.inputs[0]->dtype) : n.outputs[0]->dtype != DType::kF32) {
    return {false, "float side is not float32 / float16 / bfloat16 (DequantizeLinear: float32)"};
  }
  const Value* zp = n.inputs.size() > 2 ? n.inputs[2] : nullptr;
  if (zp != nullptr && (!IsScalarConstant(zp) || zp->constant->dtype() != bytes)) {
    return {false, "the zero point is not one constant of the quantized type"};
  }
  if (n.inputs[0]->shape.concrete() != n.outputs[0]->shape.concrete()) return {false, "dims change"};
  return {true, ""};
}

}  // namespace

FusionDecision FusibleElementwise(const Node& n) {
  // Which dtypes the op takes inside a fused kernel: compiler/ops/op_traits.cc.
  const FusionClass fc = TraitsOf(n).fusion;
  if (fc == FusionClass::kNone) return {false, "no fusion class (compiler/ops/op_traits.cc)"};
  const bool float_op = fc == FusionClass::kFloat;
  const bool predicate = fc == FusionClass::kCompare || fc == FusionClass::kLogic;
  const std::string& op = n.op_type;
  if (fc == FusionClass::kQuantize) return FusibleQuantize(n);
  if (n.outputs.size() != 1 || n.outputs[0] == nullptr || !n.outputs[0]->shape.fully_known()) {
    return {false, "not one output of known dims"};
  }
  const DType out = n.outputs[0]->dtype;
  if (!IsKernelStorage(out)) return {false, absl::StrCat("output dtype ", DTypeName(out), " is not stored by kernels")};
  if ((float_op && out == DType::kBool) || (predicate && out != DType::kBool))
    return {false, "output dtype of its class"};
  if (op == "Clip" && n.HasAttr("min") == false && n.inputs.size() > 1) {
    // Clip bounds must be scalar float32 constants (they are folded into the code).
    for (size_t i = 1; i < n.inputs.size(); ++i) {
      if (n.inputs[i] && !IsScalarConstant(n.inputs[i])) return {false, "Clip bounds are not scalar constants"};
    }
  }
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    const Value* v = n.inputs[i];
    if (v == nullptr) continue;
    if (!v->shape.fully_known()) return {false, absl::StrCat("input ", i, " has unknown dims")};
    const DType t = v->dtype;
    bool ok;
    if (fc == FusionClass::kCast) {
      // An integer is read as its float32 value (the rounding Cast to float32 does) and is only cast: to
      // float32, or to bool (nonzero stays nonzero).
      ok =
          IsKernelStorage(t) || ((t == DType::kI32 || t == DType::kI64) && (out == DType::kF32 || out == DType::kBool));
    } else if (fc == FusionClass::kSelect) {
      ok = i == 0 ? t == DType::kBool : t == out;
    } else if (fc == FusionClass::kLogic) {
      ok = t == DType::kBool;
    } else if (op == "Equal") {
      ok = IsFloatStorage(t) || t == DType::kBool;
    } else if (fc == FusionClass::kIdentity) {
      ok = t == out;
    } else {
      ok = IsFloatStorage(t);
    }
    if (!ok) return {false, absl::StrCat("input ", i, " dtype ", DTypeName(t), " is not fused for this op")};
    // Inputs must broadcast to the output (unidirectionally).
    Dims in = v->shape.concrete(), od = n.outputs[0]->shape.concrete();
    if (in.size() > od.size()) return {false, absl::StrCat("input ", i, " has a higher rank than the output")};
    for (size_t d = 0; d < in.size(); ++d) {
      int64_t o = od[od.size() - in.size() + d];
      if (in[d] != o && in[d] != 1) return {false, absl::StrCat("input ", i, " does not broadcast to the output")};
    }
  }
  return {true, ""};
}

bool IsFusibleElementwise(const Node& n) { return FusibleElementwise(n).ok; }

bool IsRowReduction(const Node& n) {
  if (!TraitsOf(n).row_reduction || n.outputs.size() != 1 || !n.outputs[0] || !n.inputs[0]) return false;
  const Value* x = n.inputs[0];
  const Value* y = n.outputs[0];
  if (!IsFloatStorage(x->dtype) || x->dtype != y->dtype || !x->shape.fully_known() || !y->shape.fully_known()) {
    return false;
  }
  int r = x->shape.rank();
  if (r == 0) return false;
  Dims xd = x->shape.concrete(), yd = y->shape.concrete();
  if (n.op_type == "Softmax" || n.op_type == "LogSoftmax") {
    int64_t axis = n.GetInt("axis", n.opset_version > 0 && n.opset_version < 13 ? 1 : -1);
    if (axis < 0) axis += r;
    return axis == r - 1;
  }
  // axes from the attribute or a constant second input; must be exactly the last axis, keepdims=1.
  std::vector<int64_t> axes = n.GetInts("axes");
  if (axes.empty() && n.inputs.size() > 1 && n.inputs[1]) {
    if (!n.inputs[1]->is_constant()) return false;
    axes = n.inputs[1]->constant->ToInt64Vector();
  }
  if (axes.size() != 1 || n.GetInt("keepdims", 1) != 1) return false;
  int64_t a = axes[0] < 0 ? axes[0] + r : axes[0];
  if (a != r - 1) return false;
  Dims expect = xd;
  expect.back() = 1;
  return yd == expect;
}

namespace {

struct View {
  const Value* source;
  int64_t offset = 0;
  std::vector<int64_t> strides;  // over the viewed value's dims
};

std::vector<int64_t> DenseStrides(const Dims& d) {
  std::vector<int64_t> s(d.size(), 1);
  for (int i = static_cast<int>(d.size()) - 2; i >= 0; --i) s[i] = s[i + 1] * d[i + 1];
  return s;
}

bool IsDense(const View& v, const Dims& dims) {
  if (v.offset != 0) return false;
  std::vector<int64_t> d = DenseStrides(dims);
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] != 1 && d[i] != v.strides[i]) return false;
  }
  return true;
}

// A value's dims as the graph has them (null when not fully known); `scratch` holds them.
const Dims* GraphDims(const Value* v, Dims* scratch) {
  if (!v->shape.fully_known()) return nullptr;
  *scratch = v->shape.concrete();
  return scratch;
}

// How `v` can be read from a buffer that no view op has to materialize. `body_nodes` limits resolution to
// nodes of this cluster; `dims_of` gives each value's dims (the graph's, or another signature's:
// RederiveKernels).
View Resolve(const Value* v, const std::unordered_set<const Node*>& body_nodes, const ValueDimsFn& dims_of) {
  Dims vs, us;
  const Dims* vdp = dims_of(v, &vs);
  View dense{v, 0, vdp ? DenseStrides(*vdp) : std::vector<int64_t>{}};
  const Node* n = v->producer;
  if (n == nullptr || !body_nodes.count(n) || vdp == nullptr || !IsKernelStorage(v->dtype)) return dense;
  const Value* u = n->input(0);
  const Dims* udp = u ? dims_of(u, &us) : nullptr;
  if (u == nullptr || udp == nullptr || u->dtype != v->dtype || n->outputs.size() != 1) return dense;
  for (size_t i = 1; i < n->inputs.size(); ++i) {  // shapes, bounds, axes must be constants
    if (n->inputs[i] && !n->inputs[i]->is_constant()) return dense;
  }
  const Dims& ud = *udp;
  const Dims& vd = *vdp;
  const std::string& op = n->op_type;
  if (TraitsOf(*n).view == ViewKind::kNone) return dense;
  View in = Resolve(u, body_nodes, dims_of);
  View out{in.source, in.offset, {}};
  if (op == "Identity") return in;
  if (op == "Transpose") {
    std::vector<int64_t> perm = n->GetInts("perm");
    if (perm.empty()) for (int i = static_cast<int>(ud.size()) - 1; i >= 0; --i) perm.push_back(i);
    for (int64_t p : perm) out.strides.push_back(in.strides[p]);
    return out;
  }
  if (op == "Slice") {
    std::vector<int64_t> starts, axes, steps;
    if (n->HasAttr("starts")) {  // Slice-1: starts/ends/axes attributes, unit steps
      starts = n->GetInts("starts");
      axes = n->GetInts("axes");
    } else {
      if (n->inputs.size() < 3 || !n->input(1)) return dense;
      starts = n->inputs[1]->constant->ToInt64Vector();
      if (n->input(3)) axes = n->input(3)->constant->ToInt64Vector();
      if (n->input(4)) steps = n->input(4)->constant->ToInt64Vector();
    }
    if (axes.empty()) for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
    if (steps.empty()) steps.assign(starts.size(), 1);
    if (axes.size() != starts.size() || steps.size() != starts.size()) return dense;
    for (int64_t st : steps)
      if (st == 0) return dense;
    out.strides = in.strides;
    for (size_t k = 0; k < starts.size(); ++k) {
      int64_t a = axes[k] < 0 ? axes[k] + static_cast<int64_t>(ud.size()) : axes[k];
      if (a < 0 || a >= static_cast<int64_t>(ud.size())) return dense;
      int64_t dim = ud[a], st = starts[k];
      if (st < 0) st += dim;
      st = steps[k] > 0 ? std::clamp<int64_t>(st, 0, dim) : std::clamp<int64_t>(st, 0, dim - 1);
      if (vd[a] == 0) return dense;
      out.offset += st * in.strides[a];
      out.strides[a] = in.strides[a] * steps[k];
    }
    return out;
  }
  if (op == "Expand") {
    size_t off = vd.size() - ud.size();
    out.strides.assign(vd.size(), 0);
    for (size_t i = 0; i < ud.size(); ++i) out.strides[off + i] = ud[i] == 1 && vd[off + i] != 1 ? 0 : in.strides[i];
    return out;
  }
  // Reshape-like: only a dense view keeps a strided form; otherwise read u's materialized (dense) result.
  if (!IsDense(in, ud)) return View{u, 0, DenseStrides(vd)};
  out.strides = DenseStrides(vd);
  return out;
}

// `k`'s iteration space and input views at the dims `dims_of` gives (RebindFusionPlan and RederiveKernels):
// the space is a row reduction's input in a row kernel, else the first member's output; each member must
// have it (an elementwise member of a row kernel may have the row values' shape), and each input's view
// must read k.input_sources[j]. `differ` makes the error naming the first failed check.
template <typename Differ>
absl::StatusOr<KernelDims> KernelDimsAt(const FusedKernel& k, const std::unordered_set<const Node*>& body_nodes,
                                        const ValueDimsFn& dims_of, const Differ& differ) {
  auto reduces = [&k](const Node* m) { return k.row_reduction && IsRowReduction(*m); };
  const Node* reduction = nullptr;
  for (const Node* m : k.nodes) {
    if (reduces(m)) {
      reduction = m;
      break;
    }
  }
  Dims scratch;
  const Value* space = reduction ? reduction->inputs[0] : k.nodes.front()->outputs[0];
  const Dims* sd = space ? dims_of(space, &scratch) : nullptr;
  if (sd == nullptr) return differ(k.name, ": iteration space unknown");
  KernelDims kd;
  kd.shape = *sd;
  Dims row = kd.shape;
  if (!row.empty()) row.back() = 1;
  for (const Node* m : k.nodes) {
    const bool red = reduces(m);
    const Value* v = red ? m->inputs[0] : m->outputs[0];
    const Dims* d = v ? dims_of(v, &scratch) : nullptr;
    if (d == nullptr) return differ(m->Describe(), ": dims unknown");
    if (!(*d == kd.shape || (!red && k.row_reduction && *d == row))) {
      return differ(m->Describe(), " does not have its kernel's iteration space at these dims");
    }
  }
  for (size_t j = 0; j < k.inputs.size(); ++j) {
    View view = Resolve(k.inputs[j], body_nodes, dims_of);
    if (view.source != k.input_sources[j]) return differ(k.name, ": input ", j, " reads another source");
    kd.input_offsets.push_back(view.offset);
    kd.input_strides.push_back(std::move(view.strides));
  }
  return kd;
}

}  // namespace

namespace {

// The nodes reading each value (hash maps: a plan is built for every new signature of a cluster).
using Readers = std::unordered_map<const Value*, std::vector<const Node*>>;

bool ScalarOf(const Value* v, float* out) {
  if (!IsScalarConstant(v)) return false;
  *out = ScalarConstantValue(v);
  return true;
}

// Matches elementwise ops after a float32 Conv that oneDNN can apply as post-ops, along a chain of values
// each read by exactly one node (HardSwish written out, x * Clip(x + 3, 0, 6) / 6, reads x twice).
// Returns the absorbed nodes; fills ops and the final value.
// A bfloat16 Conv / NhwcConv (automatic mixed precision) takes bfloat16 chains too when `excess_precision`
// (--allow_excess_precision): oneDNN applies the post-ops to the float32 accumulators and rounds to
// bfloat16 once at the end, where the graph rounds after the convolution and after every op — the same
// licence fused kernels take (FusedKernel::excess_precision). Without it, 16-bit convolutions take none.
std::vector<const Node*> MatchPostOps(const Node& conv, const Readers& users,
                                      const std::unordered_set<const Value*>& body_outputs, bool excess_precision,
                                      std::vector<PostOp>* ops, const Value** final_value) {
  std::vector<const Node*> absorbed;
  const Value* v = conv.outputs[0];
  if (v == nullptr || !v->shape.fully_known() || v->shape.rank() < 3) return absorbed;
  // The element type of the whole chain: each absorbed op's output must have it.
  const DType dt = v->dtype;
  const bool bf16_ok = excess_precision && (conv.op_type == "Conv" || conv.op_type == "NhwcConv");
  if (dt != DType::kF32 && !(dt == DType::kBF16 && bf16_ok)) return absorbed;
  // Conv: [N, M, o..]; NhwcConv (channels-last): [N, o.., M].
  int channel_axis =
      conv.op_type == "NhwcConv" || conv.op_type == "NhwcPointwiseDepthwiseConv" ? v->shape.rank() - 1 : 1;
  int64_t oc = v->shape.dims[channel_axis].value;
  auto readers = [&](const Value* x) -> const std::vector<const Node*>& {
    static const std::vector<const Node*> kNone;
    auto it = users.find(x);
    return it == users.end() ? kNone : it->second;
  };
  for (;;) {
    if (body_outputs.count(v)) break;
    const auto& r = readers(v);
    PostOp op;
    const Node* n = r.size() == 1 ? r[0] : nullptr;
    float c = 0;
    if (r.size() == 2 && (r[0]->op_type == "Sigmoid" || r[1]->op_type == "Sigmoid")) {
      // SiLU / Swish written out (YOLOv5/v8, EfficientNet exports): s = Sigmoid(v); m = Mul(v, s) [or Mul(s, v)].
      const Node* sig = r[0]->op_type == "Sigmoid" ? r[0] : r[1];
      const Node* mul = sig == r[0] ? r[1] : r[0];
      if (mul->op_type != "Mul" || mul->inputs.size() != 2 || sig->outputs.size() != 1 || !sig->outputs[0] ||
          body_outputs.count(sig->outputs[0])) {
        break;
      }
      const auto& sr = readers(sig->outputs[0]);
      const bool pair = (mul->inputs[0] == v && mul->inputs[1] == sig->outputs[0]) ||
                        (mul->inputs[1] == v && mul->inputs[0] == sig->outputs[0]);
      if (sr.size() != 1 || sr[0] != mul || !pair || mul->outputs.size() != 1 || !mul->outputs[0] ||
          mul->outputs[0]->dtype != dt || !mul->outputs[0]->shape.fully_known() ||
          mul->outputs[0]->shape.concrete() != v->shape.concrete()) {
        break;
      }
      op.kind = PostOp::Kind::kSwish;
      ops->push_back(op);
      absorbed.insert(absorbed.end(), {sig, mul});
      v = mul->outputs[0];
      continue;
    }
    if (r.size() == 2) {
      // HardSwish written out: a = Add(v, 3); b = Clip(a, 0, 6); m = Mul(v, b) [or Mul(b, v)]; d = Div(m, 6).
      const Node* add = r[0]->op_type == "Add" ? r[0] : r[1];
      const Node* mul = add == r[0] ? r[1] : r[0];
      float three, lo, hi, six;
      if (add->op_type != "Add" || mul->op_type != "Mul" || !ScalarOf(add->input(1), &three) || three != 3.0f) break;
      const auto& ar = readers(add->outputs[0]);
      if (ar.size() != 1 || ar[0]->op_type != "Clip" || body_outputs.count(add->outputs[0])) break;
      const Node* clip = ar[0];
      bool attrs = clip->HasAttr("min");
      lo = clip->GetFloat("min", 0);
      hi = clip->GetFloat("max", 0);
      if (!attrs && !(ScalarOf(clip->input(1), &lo) && ScalarOf(clip->input(2), &hi))) break;
      if (lo != 0.0f || hi != 6.0f) break;
      const auto& cr = readers(clip->outputs[0]);
      if (cr.size() != 1 || cr[0] != mul || body_outputs.count(clip->outputs[0])) break;
      const auto& mr = readers(mul->outputs[0]);
      if (mr.size() != 1 || mr[0]->op_type != "Div" || !ScalarOf(mr[0]->input(1), &six) || six != 6.0f ||
          body_outputs.count(mul->outputs[0]) || mr[0]->outputs.size() != 1 || !mr[0]->outputs[0] ||
          mr[0]->outputs[0]->dtype != dt) {
        break;
      }
      op.kind = PostOp::Kind::kHardSwish;
      ops->push_back(op);
      absorbed.insert(absorbed.end(), {add, clip, mul, mr[0]});
      v = mr[0]->outputs[0];
      continue;
    }
    if (n == nullptr || n->outputs.size() != 1 || n->outputs[0] == nullptr || n->inputs.empty()) break;
    const std::string& t = n->op_type;
    // v is input 0, or input 1 of a binary op whose input 0 is the constant operand: Mul(c, v), Add(c, v)
    // (commutative; exporters write the scale first, e.g. PaddleOCR's learnable affine blocks) and
    // Sub(c, v) = -v + c.
    const bool swapped = n->inputs[0] != v;
    if (swapped && !(n->inputs.size() == 2 && n->inputs[1] == v && (t == "Mul" || t == "Add" || t == "Sub"))) break;
    const Value* operand = n->inputs.size() == 2 ? n->input(swapped ? 0 : 1) : nullptr;
    if (n->outputs[0]->dtype != dt || !n->outputs[0]->shape.fully_known() ||
        n->outputs[0]->shape.concrete() != v->shape.concrete()) {
      break;
    }
    if (t == "Relu") {
      op.kind = PostOp::Kind::kRelu;
    } else if (t == "Sigmoid") {
      op.kind = PostOp::Kind::kSigmoid;
    } else if (t == "Tanh") {
      op.kind = PostOp::Kind::kTanh;
    } else if (t == "Clip") {
      op.kind = PostOp::Kind::kClip;
      op.a = -std::numeric_limits<float>::infinity();
      op.b = std::numeric_limits<float>::infinity();
      if (n->HasAttr("min")) op.a = n->GetFloat("min", 0);
      if (n->HasAttr("max")) op.b = n->GetFloat("max", 0);
      if (n->input(1) && !ScalarOf(n->input(1), &op.a)) break;
      if (n->input(2) && !ScalarOf(n->input(2), &op.b)) break;
    } else if (t == "HardSwish") {  // the ONNX op (opset 14; torch.onnx's export of nn.Hardswish)
      op.kind = PostOp::Kind::kHardSwish;
    } else if (t == "LeakyRelu") {
      op = {PostOp::Kind::kLeakyRelu, n->GetFloat("alpha", 0.01f), 0, nullptr};
    } else if ((t == "Max" || t == "Min") && n->inputs.size() == 2 && ScalarOf(n->input(1), &c) && !std::isnan(c)) {
      // Max(v, c) / Min(v, c) with a non-NaN scalar: a one-sided Clip (a NaN in v stays NaN, as Max's).
      const float inf = std::numeric_limits<float>::infinity();
      op = t == "Max" ? PostOp{PostOp::Kind::kClip, c, inf, nullptr} : PostOp{PostOp::Kind::kClip, -inf, c, nullptr};
    } else if (t == "HardSigmoid") {  // clip(alpha * x + beta, 0, 1): two post-ops
      ops->push_back(PostOp{PostOp::Kind::kLinear, n->GetFloat("alpha", 0.2f), n->GetFloat("beta", 0.5f), nullptr});
      op = PostOp{PostOp::Kind::kClip, 0.0f, 1.0f, nullptr};
    } else if ((t == "Mul" || t == "Add" || t == "Sub" || t == "Div") && ScalarOf(operand, &c)) {
      if (t == "Mul") op = {PostOp::Kind::kLinear, c, 0, nullptr};
      else if (t == "Add") op = {PostOp::Kind::kLinear, 1, c, nullptr};
      else if (t == "Sub") op = {PostOp::Kind::kLinear, swapped ? -1.0f : 1.0f, swapped ? c : -c, nullptr};
      else op = {PostOp::Kind::kLinear, 1.0f / c, 0, nullptr};
    } else if (t == "Add" && operand && operand->is_constant() && operand->dtype == DType::kF32) {
      // One value per output channel, broadcast as [OC, 1, ...] or [1, OC, 1, ...] ([.., OC] channels-last).
      const Dims& d = operand->constant->dims();
      int rank = v->shape.rank();
      if (static_cast<int>(d.size()) > rank || operand->constant->numel() != oc) break;
      int off = rank - static_cast<int>(d.size());
      bool ok = true;
      for (int i = 0; i < static_cast<int>(d.size()); ++i) ok &= (off + i == channel_axis) ? d[i] == oc : d[i] == 1;
      if (!ok) break;
      op = {PostOp::Kind::kAddChannel, 0, 0, operand};
    } else {
      break;
    }
    if (op.kind == PostOp::Kind::kLinear && !ops->empty() && ops->back().kind == PostOp::Kind::kLinear) {
      // a2 * (a1 * x + b1) + b2 as one op, (a1 a2) x + (a2 b1 + b2): one pass (or one register op) fewer
      // for a scale and a shift in a row, e.g. a learnable affine block's Mul + Add. Rounding differs
      // from the two ops' by about one ulp (as Div by c computed as a product by 1 / c).
      PostOp& prev = ops->back();
      prev = {PostOp::Kind::kLinear, prev.a * op.a, op.a * prev.b + op.b, nullptr};
    } else {
      ops->push_back(op);
    }
    absorbed.push_back(n);
    v = n->outputs[0];
  }
  *final_value = v;
  return absorbed;
}

// Matches Add(v, c) with c a constant vector over v's last dim (the GEMM bias), then Relu, after a float32
// MatMul/Gemm, along values each read by exactly one node and not body outputs. A Gemm that has its own C
// takes no second bias.
std::vector<const Node*> MatchGemmEpilogue(const Node& gemm, const Readers& users,
                                           const std::unordered_set<const Value*>& body_outputs,
                                           std::vector<PostOp>* ops,
                                           const Value** final_value) {
  std::vector<const Node*> absorbed;
  const Value* v = gemm.outputs.empty() ? nullptr : gemm.outputs[0];
  if (v == nullptr || v->dtype != DType::kF32 || !v->shape.fully_known() || v->shape.rank() < 1) return absorbed;
  int64_t n = v->shape.concrete().back();
  auto single_reader = [&](const Value* x) -> const Node* {
    if (body_outputs.count(x)) return nullptr;
    auto it = users.find(x);
    return it != users.end() && it->second.size() == 1 ? it->second[0] : nullptr;
  };
  bool has_bias = gemm.op_type == "Gemm" && gemm.input(2) != nullptr;
  if (const Node* add = single_reader(v); add && !has_bias && add->op_type == "Add" && add->inputs.size() == 2) {
    const Value* c = add->inputs[0] == v ? add->inputs[1] : add->inputs[1] == v ? add->inputs[0] : nullptr;
    bool vector = c && c->is_constant() && c->dtype == DType::kF32 && c->constant->numel() == n &&
                  c->shape.rank() >= 1 && c->shape.concrete().back() == n && c->shape.rank() <= v->shape.rank() &&
                  add->outputs[0]->shape.concrete() == v->shape.concrete();
    if (vector) {
      PostOp op;
      op.kind = PostOp::Kind::kBiasLastDim;
      op.tensor = c;
      ops->push_back(op);
      absorbed.push_back(add);
      v = add->outputs[0];
    }
  }
  if (const Node* relu = single_reader(v); relu && relu->op_type == "Relu" && relu->outputs[0]->dtype == DType::kF32) {
    ops->push_back(PostOp{PostOp::Kind::kRelu});
    absorbed.push_back(relu);
    v = relu->outputs[0];
  }
  *final_value = v;
  return absorbed;
}

// The elementwise ops a library step applies (post-ops of a Conv in oneDNN; a GEMM's epilogue), by the
// step's node index.
struct Absorbed {
  std::vector<PostOp> ops;
  std::vector<const Node*> nodes;
  const Value* output = nullptr;
};

// The post-ops each Conv / GEMM of `order` absorbs (FusionPlanOptions::conv_post_ops, gemm_epilogues), by
// its index; (*owner_out)[absorbed node's index] = that index.
std::map<int, Absorbed> AbsorbPostOps(const std::vector<Node*>& order,
                                      const std::unordered_map<const Node*, int>& index, const Readers& readers,
                                      const std::unordered_set<const Value*>& outputs_set,
                                      const FusionPlanOptions& options, std::vector<int>* owner_out) {
  std::map<int, Absorbed> post;
  std::vector<int>& owner = *owner_out;
  const int n = static_cast<int>(order.size());
  for (int i = 0; i < n; ++i) {
    const std::string& op = order[i]->op_type;
    bool conv = options.conv_post_ops && (op == "Conv" || op == "NhwcConv" || op == "NhwcPointwiseDepthwiseConv");
    bool gemm = options.gemm_epilogues && (op == "MatMul" || op == "Gemm");
    if ((!conv && !gemm) || owner[i] >= 0) continue;
    Absorbed a;
    a.nodes = conv ? MatchPostOps(*order[i], readers, outputs_set, options.excess_precision, &a.ops, &a.output)
                   : MatchGemmEpilogue(*order[i], readers, outputs_set, &a.ops, &a.output);
    if (a.nodes.empty()) continue;
    for (const Node* x : a.nodes) owner[index.at(x)] = i;
    post[i] = std::move(a);
  }
  return post;
}

// The fused kernel of a group (`members`: node indices into `order`, in order) iterating over `shape`
// (by rows when row_reduction): its nodes, its inputs (each once; scalar constants are folded into the
// code) with the view each reads through, and the outputs read outside the group or returned by the body.
// The caller names it.
FusedKernel MakeFusedKernel(const std::vector<Node*>& order, const std::vector<int>& members, const Dims& shape,
                            bool row_reduction, const Readers& readers,
                            const std::unordered_set<const Value*>& body_outputs,
                            const std::unordered_set<const Node*>& body_nodes, const FusionPlanOptions& options) {
  FusedKernel k;
  k.excess_precision = options.excess_precision;
  k.shape = shape;
  k.row_reduction = row_reduction;
  std::set<const Node*> in_group;
  for (int m : members) {
    k.nodes.push_back(order[m]);
    in_group.insert(order[m]);
  }
  std::set<const Value*> seen;
  for (const Node* node : k.nodes) {
    for (const Value* v : node->inputs) {
      if (!v || IsScalarConstant(v) || (v->producer && in_group.count(v->producer)) || seen.count(v)) continue;
      seen.insert(v);
      k.inputs.push_back(v);
    }
  }
  for (const Node* node : k.nodes) {
    const Value* out = node->outputs[0];
    bool used_outside = body_outputs.count(out) > 0;
    if (auto r = readers.find(out); r != readers.end()) {
      for (const Node* reader : r->second) used_outside |= !in_group.count(reader);
    }
    if (used_outside) k.outputs.push_back(out);
  }
  for (const Value* in : k.inputs) {
    View view = Resolve(in, body_nodes, GraphDims);
    k.input_sources.push_back(view.source);
    k.input_offsets.push_back(view.offset);
    k.input_strides.push_back(view.strides);
  }
  return k;
}

// Drops library steps whose outputs nothing reads any more (view ops absorbed into kernels).
void DropUnreadLibrarySteps(const Graph& body, FusionPlan* plan_out) {
  FusionPlan& plan = *plan_out;
  std::unordered_set<const Value*> needed(body.outputs().begin(), body.outputs().end());
  for (auto it = plan.steps.rbegin(); it != plan.steps.rend(); ++it) {
    if (it->kind == PlanStep::Kind::kFused) {
      for (const Value* v : plan.kernels[it->kernel].input_sources) needed.insert(v);
    }
  }
  std::vector<PlanStep> kept;
  for (auto it = plan.steps.rbegin(); it != plan.steps.rend(); ++it) {
    if (it->kind == PlanStep::Kind::kLibrary) {
      bool used = it->output && needed.count(it->output);
      for (const Value* v : it->node->outputs) used |= v && needed.count(v);
      if (!used) continue;
      for (const Value* v : it->node->inputs) if (v) needed.insert(v);
      for (const PostOp& op : it->post_ops) if (op.tensor) needed.insert(op.tensor);
    }
    kept.push_back(*it);
  }
  plan.steps.assign(kept.rbegin(), kept.rend());
}

// The planning state of one cluster body: its nodes in topological order, the Conv each absorbed post-op
// belongs to (-1: none), which nodes may join fused kernels, and the fused groups (union-find over node
// indices, each group's iteration shape and whether it has a row reduction).
struct Grouping {
  std::vector<Node*> order;
  std::unordered_map<const Node*, int> index;
  std::vector<int> owner;
  std::vector<bool> fusible, reduction;
  UnionFind groups_of{0};
  std::vector<Dims> shape;
  std::vector<bool> row, all_elementwise;
  int Group(int i) { return fusible[i] ? groups_of.Find(i) : i; }
};

// Fusible: a row reduction, or an elementwise op FusibleElementwise accepts (refusals logged at VLOG(2));
// absorbed post-ops are neither (they run inside their Conv's library call).
void ClassifyNodes(Grouping& g) {
  const int n = static_cast<int>(g.order.size());
  g.fusible.assign(n, false);
  g.reduction.assign(n, false);
  for (int i = 0; i < n; ++i) {
    g.reduction[i] = g.owner[i] < 0 && IsRowReduction(*g.order[i]);
    if (g.owner[i] >= 0 || g.reduction[i]) {
      g.fusible[i] = g.owner[i] < 0;
      continue;
    }
    const FusionDecision d = FusibleElementwise(*g.order[i]);
    g.fusible[i] = d.ok;
    if (!d.ok && TraitsOf(*g.order[i]).fusion != FusionClass::kNone) {
      CJIT_VLOG(2) << "not fusing " << g.order[i]->Describe() << ": " << d.reason;
    }
  }
}

// Merges each fusible producer-consumer pair whose groups have compatible iteration shapes (equal, or one
// group only elementwise ops on the other's row values), within --max_kernel_ops, when contracting the
// edge in `cycles` keeps the contracted graph acyclic.
void MergeGroups(Grouping& g, GraphCycles& cycles, const FusionPlanOptions& options) {
  const int n = static_cast<int>(g.order.size());
  g.groups_of = UnionFind(n);
  g.shape.assign(n, Dims());
  g.row.assign(n, false);
  g.all_elementwise.assign(n, true);
  for (int i = 0; i < n; ++i) {
    if (!g.fusible[i]) continue;
    g.shape[i] = g.reduction[i] ? g.order[i]->inputs[0]->shape.concrete() : g.order[i]->outputs[0]->shape.concrete();
    g.row[i] = g.reduction[i];
    g.all_elementwise[i] = !g.reduction[i];
  }
  auto rowdims = [](Dims d) {
    if (!d.empty()) d.back() = 1;
    return d;
  };
  for (int j = 0; j < n; ++j) {
    if (!g.fusible[j]) continue;
    for (const Value* v : g.order[j]->inputs) {
      if (!v || !v->producer || !g.index.count(v->producer)) continue;
      int i = g.index[v->producer];
      if (!g.fusible[i]) continue;
      int a = g.groups_of.Find(i), b = g.groups_of.Find(j);
      if (a == b) continue;
      Dims merged;
      bool row = g.row[a] || g.row[b];
      if (g.shape[a] == g.shape[b]) {
        merged = g.shape[a];
      } else if (g.row[a] && g.all_elementwise[b] && g.shape[b] == rowdims(g.shape[a])) {
        merged = g.shape[a];
      } else if (g.row[b] && g.all_elementwise[a] && g.shape[a] == rowdims(g.shape[b])) {
        merged = g.shape[b];
      } else {
        continue;
      }
      // Bounded kernels: LLVM's time grows faster than linearly in a function's size, and kernels of one
      // structure are compiled once, so long chains become a few repeated kernels.
      if (g.groups_of.size(a) + g.groups_of.size(b) > options.max_kernel_ops) continue;
      if (!cycles.HasEdge(a, b) && !cycles.InsertEdge(a, b)) continue;
      if (!cycles.ContractEdge(a, b)) continue;
      g.groups_of.MergeInto(a, b);
      g.shape[a] = merged;
      g.row[a] = row;
      g.all_elementwise[a] = g.all_elementwise[a] && g.all_elementwise[b];
    }
  }
}

// Group members (indexed by representative; empty for other nodes) and, per group, the groups that wait
// for it and how many groups it waits for.
struct GroupDeps {
  std::vector<std::vector<int>> members, users;
  std::vector<int> pending;
  size_t count = 0;
};

GroupDeps DependenciesOf(Grouping& g) {
  const int n = static_cast<int>(g.order.size());
  GroupDeps d;
  d.members.assign(n, {});
  d.users.assign(n, {});
  d.pending.assign(n, 0);
  for (int i = 0; i < n; ++i) {
    if (g.owner[i] >= 0) continue;
    std::vector<int>& members = d.members[g.Group(i)];
    d.count += members.empty();
    members.push_back(i);
  }
  std::vector<int> deps;
  for (int grp = 0; grp < n; ++grp) {
    if (d.members[grp].empty()) continue;
    deps.clear();
    for (int m : d.members[grp]) {
      for (const Value* v : g.order[m]->inputs) {
        if (!v || !v->producer) continue;
        auto pi = g.index.find(v->producer);
        if (pi == g.index.end()) continue;
        int p = pi->second;
        if (g.owner[p] >= 0) p = g.owner[p];  // produced by a post-op: available after its Conv
        int pg = g.Group(p);
        if (pg != grp) deps.push_back(pg);
      }
    }
    std::sort(deps.begin(), deps.end());
    deps.erase(std::unique(deps.begin(), deps.end()), deps.end());
    d.pending[grp] = static_cast<int>(deps.size());
    for (int dep : deps) d.users[dep].push_back(grp);
  }
  return d;
}

}  // namespace

// Groups fusible nodes (ClassifyNodes, MergeGroups), then emits groups and library nodes in a topological
// order of the contracted graph: a group is ready when all of its members' external producers have run.
absl::StatusOr<FusionPlan> BuildFusionPlan(const Graph& body, const FusionPlanOptions& options) {
  Grouping g;
  CJIT_ASSIGN_OR_RETURN(g.order, body.TopologicalOrder());
  const std::vector<Node*>& order = g.order;
  int n = static_cast<int>(order.size());
  for (int i = 0; i < n; ++i) g.index[order[i]] = i;
  GraphCycles cycles(n);
  for (int i = 0; i < n; ++i) {
    for (const Value* v : order[i]->inputs) {
      if (v && v->producer && g.index.count(v->producer)) cycles.InsertEdge(g.index[v->producer], i);
    }
  }
  // oneDNN post-ops: elementwise ops right after a Conv run inside the Conv's library call.
  Readers readers;
  readers.reserve(order.size() * 2);
  for (const Node* nd : order) {
    for (const Value* v : nd->inputs)
      if (v) readers[v].push_back(nd);
  }
  const std::unordered_set<const Value*> outputs_set(body.outputs().begin(), body.outputs().end());
  g.owner.assign(n, -1);
  const std::map<int, Absorbed> post = AbsorbPostOps(order, g.index, readers, outputs_set, options, &g.owner);
  ClassifyNodes(g);
  MergeGroups(g, cycles, options);
  GroupDeps deps = DependenciesOf(g);
  std::set<std::pair<int, int>> ready;  // (min member index, group)
  for (int grp = 0; grp < n; ++grp) {
    if (!deps.members[grp].empty() && deps.pending[grp] == 0) ready.insert({deps.members[grp].front(), grp});
  }
  const std::unordered_set<const Node*> body_nodes(order.begin(), order.end());
  FusionPlan plan;
  while (!ready.empty()) {
    int grp = ready.begin()->second;
    ready.erase(ready.begin());
    const std::vector<int>& members = deps.members[grp];
    PlanStep s;
    s.kind = PlanStep::Kind::kLibrary;
    if (!g.fusible[members.front()]) {
      s.node = order[members.front()];
      if (auto it = post.find(members.front()); it != post.end()) {
        s.post_ops = it->second.ops;
        s.absorbed = it->second.nodes;
        s.output = it->second.output;
      }
    } else {
      FusedKernel k =
          MakeFusedKernel(order, members, g.shape[grp], g.row[grp], readers, outputs_set, body_nodes, options);
      k.name = absl::StrCat("fused_", plan.kernels.size());
      if (options.single_op_groups_as_library && k.nodes.size() == 1 && k.input_sources == k.inputs) {
        s.node = k.nodes[0];
      } else {
        s.kind = PlanStep::Kind::kFused;
        s.kernel = static_cast<int>(plan.kernels.size());
        plan.kernels.push_back(std::move(k));
      }
    }
    plan.steps.push_back(s);
    for (int u : deps.users[grp]) {
      if (--deps.pending[u] == 0) ready.insert({deps.members[u].front(), u});
    }
  }
  if (plan.steps.size() != deps.count) {
    return absl::InternalError("fusion plan has a cycle between groups");
  }
  DropUnreadLibrarySteps(body, &plan);
  return plan;
}

absl::StatusOr<FusionPlan> RebindFusionPlan(const FusionPlan& like, const Graph& like_body, const Graph& body) {
  auto differ = [](const auto&... why) {
    return absl::NotFoundError(absl::StrCat("fusion plan not rebound: ", why...));
  };
  const auto& na = like_body.nodes();
  const auto& nb = body.nodes();
  if (na.size() != nb.size() || like_body.inputs().size() != body.inputs().size() ||
      like_body.outputs().size() != body.outputs().size()) {
    return differ("the bodies have different node, input or output counts");
  }
  std::unordered_map<const Value*, const Value*> vmap;
  std::unordered_set<const Value*> taken;
  vmap.reserve(na.size() * 3);
  taken.reserve(na.size() * 3);
  auto map_value = [&](const Value* x, const Value* y) {
    if (x == nullptr || y == nullptr) return x == y;
    if (x->dtype != y->dtype || x->shape.rank() != y->shape.rank() || x->is_constant() != y->is_constant() ||
        IsScalarConstant(x) != IsScalarConstant(y)) {
      return false;
    }
    auto [it, inserted] = vmap.emplace(x, y);
    return inserted ? taken.insert(y).second : it->second == y;
  };
  std::unordered_map<const Node*, const Node*> nmap;
  nmap.reserve(na.size());
  for (size_t i = 0; i < na.size(); ++i) {
    const Node& x = *na[i];
    const Node& y = *nb[i];
    if (x.op_type != y.op_type || x.domain != y.domain || x.inputs.size() != y.inputs.size() ||
        x.outputs.size() != y.outputs.size() || !x.implicit_inputs.empty() || !y.implicit_inputs.empty()) {
      return differ("node ", i, ": ", x.Describe(), " vs ", y.Describe());
    }
    for (size_t k = 0; k < x.inputs.size(); ++k)
      if (!map_value(x.inputs[k], y.inputs[k])) return differ(x.Describe(), " input ", k);
    for (size_t k = 0; k < x.outputs.size(); ++k)
      if (!map_value(x.outputs[k], y.outputs[k])) return differ(x.Describe(), " output ", k);
    nmap[&x] = &y;
  }
  for (size_t k = 0; k < body.inputs().size(); ++k)
    if (!map_value(like_body.inputs()[k], body.inputs()[k])) return differ("body input ", k);
  for (size_t k = 0; k < body.outputs().size(); ++k)
    if (!map_value(like_body.outputs()[k], body.outputs()[k])) return differ("body output ", k);
  auto value = [&](const Value* x) -> const Value* {
    if (x == nullptr) return nullptr;
    auto it = vmap.find(x);
    return it == vmap.end() ? nullptr : it->second;
  };
  auto node = [&](const Node* x) -> const Node* {
    auto it = nmap.find(x);
    return it == nmap.end() ? nullptr : it->second;
  };
  std::unordered_set<const Node*> body_nodes;
  body_nodes.reserve(nb.size());
  for (const auto& n : nb) body_nodes.insert(n.get());
  FusionPlan plan;
  plan.kernels.reserve(like.kernels.size());
  for (const FusedKernel& lk : like.kernels) {
    FusedKernel k;
    k.name = lk.name;
    k.row_reduction = lk.row_reduction;
    k.excess_precision = lk.excess_precision;
    // Each member fuses as it did: a row reduction again, or else a fusible elementwise op (as x was:
    // members of a kernel are one or the other).
    bool any_reduction = false;
    for (const Node* x : lk.nodes) {
      const Node* y = node(x);
      if (y == nullptr) return differ("a kernel node outside the body");
      const bool red = IsRowReduction(*y);
      if (red != IsRowReduction(*x) || (!red && !IsFusibleElementwise(*y))) {
        return differ(y->Describe(), " fuses differently");
      }
      any_reduction |= red;
      k.nodes.push_back(y);
    }
    if (k.nodes.empty() || k.row_reduction != any_reduction) return differ(k.name, ": kind");
    for (const Value* x : lk.inputs) {
      const Value* y = value(x);
      if (y == nullptr) return differ(k.name, ": an input outside the body");
      k.inputs.push_back(y);
    }
    for (const Value* x : lk.outputs) {
      const Value* y = value(x);
      if (y == nullptr) return differ(k.name, ": an output outside the body");
      k.outputs.push_back(y);
    }
    for (const Value* x : lk.input_sources) k.input_sources.push_back(value(x));  // where each view must read
    CJIT_ASSIGN_OR_RETURN(KernelDims kd, KernelDimsAt(k, body_nodes, GraphDims, differ));
    k.shape = std::move(kd.shape);
    k.input_offsets = std::move(kd.input_offsets);
    k.input_strides = std::move(kd.input_strides);
    plan.kernels.push_back(std::move(k));
  }
  plan.steps.reserve(like.steps.size());
  for (const PlanStep& ls : like.steps) {
    PlanStep st;
    st.kind = ls.kind;
    st.kernel = ls.kernel;
    if (ls.node != nullptr && (st.node = node(ls.node)) == nullptr) return differ("a step outside the body");
    st.post_ops = ls.post_ops;
    for (PostOp& op : st.post_ops) {
      if (op.tensor != nullptr && (op.tensor = value(op.tensor)) == nullptr) return differ("a post-op tensor");
    }
    for (const Node* x : ls.absorbed) {
      const Node* y = node(x);
      if (y == nullptr) return differ("an absorbed node outside the body");
      // The post-ops carry the absorbed ops' scalars (Clip bounds, an affine scale, LeakyRelu's alpha) as
      // numbers: they must be the same here (a scale folded from the shapes differs per signature).
      for (size_t k = 0; k < x->inputs.size(); ++k) {
        const Value* cx = x->inputs[k];
        const Value* cy = y->inputs[k];
        if (cx == nullptr || !cx->is_constant() || cx->constant == cy->constant) continue;
        if (cx->constant->nbytes() != cy->constant->nbytes() ||
            std::memcmp(cx->constant->raw(), cy->constant->raw(), cx->constant->nbytes()) != 0) {
          return differ(y->Describe(), ": a post-op's constant differs");
        }
      }
      for (const auto& [name, a] : x->attrs) {
        auto it = y->attrs.find(name);
        if (it == y->attrs.end() || a.i != it->second.i || std::memcmp(&a.f, &it->second.f, sizeof(float)) != 0 ||
            a.ints != it->second.ints || a.floats != it->second.floats || a.s != it->second.s) {
          return differ(y->Describe(), ": a post-op's attribute differs");
        }
      }
      st.absorbed.push_back(y);
    }
    if (ls.output != nullptr && (st.output = value(ls.output)) == nullptr) return differ("a step output");
    plan.steps.push_back(std::move(st));
  }
  return plan;
}

absl::StatusOr<std::vector<KernelDims>> RederiveKernels(const FusionPlan& plan,
                                                        const std::unordered_set<const Node*>& body_nodes,
                                                        const ValueDimsFn& dims_of, const std::vector<bool>* skip) {
  auto differ = [](const auto&... why) {
    return absl::NotFoundError(absl::StrCat("kernels not rederived: ", why...));
  };
  std::vector<KernelDims> out;
  out.reserve(plan.kernels.size());
  for (size_t k = 0; k < plan.kernels.size(); ++k) {
    if (skip != nullptr && (*skip)[k]) {
      out.emplace_back();
      continue;
    }
    CJIT_ASSIGN_OR_RETURN(KernelDims kd, KernelDimsAt(plan.kernels[k], body_nodes, dims_of, differ));
    out.push_back(std::move(kd));
  }
  return out;
}

std::string FusionPlanToString(const FusionPlan& plan) {
  auto vshape = [](const Value* v) { return absl::StrCat(v->name, ": ", DTypeName(v->dtype), v->shape.ToString()); };
  std::string out = absl::StrCat(plan.kernels.size(), " fused kernels, ", plan.steps.size() - plan.kernels.size(),
                                 " library steps\n");
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    const PlanStep& st = plan.steps[i];
    if (st.kind == PlanStep::Kind::kFused) {
      const FusedKernel& k = plan.kernels[st.kernel];
      absl::StrAppend(&out, "step ", i, ": fused kernel ", st.kernel, " (", k.row_reduction ? "row" : "elementwise",
                      ") over [", absl::StrJoin(k.shape, ","), "]\n  ops:");
      for (const Node* n : k.nodes) absl::StrAppend(&out, " ", n->op_type, "(", n->name, ")");
      out.append("\n");
      for (size_t j = 0; j < k.inputs.size(); ++j) {
        absl::StrAppend(&out, "  in ", j, ": ", vshape(k.inputs[j]));
        if (j < k.input_sources.size() && k.input_sources[j] != k.inputs[j]) {
          absl::StrAppend(&out, " read from ", k.input_sources[j]->name);
        }
        if (j < k.input_offsets.size()) absl::StrAppend(&out, " offset ", k.input_offsets[j]);
        if (j < k.input_strides.size())
          absl::StrAppend(&out, " strides [", absl::StrJoin(k.input_strides[j], ","), "]");
        out.append("\n");
      }
      for (const Value* v : k.outputs) absl::StrAppend(&out, "  out: ", vshape(v), "\n");
    } else {
      absl::StrAppend(&out, "step ", i, ": library ", st.node->op_type, " (", st.node->name, ")");
      if (!st.absorbed.empty()) {
        out.append(" with post-ops");
        for (const Node* n : st.absorbed) absl::StrAppend(&out, " ", n->op_type);
      }
      out.append("\n");
    }
  }
  return out;
}

}  // namespace cjit
