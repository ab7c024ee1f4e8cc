#include "compiler/passes/layout.h"

#include <cstring>
#include <deque>
#include <limits>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "compiler/ir/constant_memo.h"
#include "base/status_macros.h"
#include "compiler/ops/op_registry.h"
#include "compiler/passes/specialization_replay.h"
#include "base/logging.h"

namespace cjit {
namespace {

// [0, 2, .., r-1, 1]: channels-first -> channels-last.
std::vector<int64_t> ToLast(int r) {
  std::vector<int64_t> p{0};
  for (int i = 2; i < r; ++i) p.push_back(i);
  p.push_back(1);
  return p;
}

// [0, r-1, 1, .., r-2]: channels-last -> channels-first.
std::vector<int64_t> ToFirst(int r) {
  std::vector<int64_t> p{0, r - 1};
  for (int i = 1; i < r - 1; ++i) p.push_back(i);
  return p;
}

Shape Permuted(const Shape& s, const std::vector<int64_t>& perm) {
  Shape out = s;
  for (size_t i = 0; i < perm.size(); ++i) out.dims[i] = s.dims[perm[i]];
  return out;
}

// Unary transparency of a node: the ops op_traits.cc marks layout_unary, and QuantizeLinear / DequantizeLinear with one
// scale and zero point (per tensor: elementwise; per axis they would need their axis remapped) - the Q/DQ pairs between
// the QLinearConvs of a quantized model.
bool IsUnaryTransparentNode(const Node& n) {
  if (TraitsOf(n).layout_unary) return true;
  if ((n.op_type != "QuantizeLinear" && n.op_type != "DequantizeLinear") || !n.domain.empty()) return false;
  if (n.HasAttr("block_size") || n.input(1) == nullptr || !n.input(1)->is_constant() ||
      n.input(1)->constant->numel() != 1) {
    return false;
  }
  return n.input(2) == nullptr || (n.input(2)->is_constant() && n.input(2)->constant->numel() == 1);
}


// float32, or a 16-bit float (mixed precision: the convolution kernels take bfloat16 natively, float16
// widened) with known dims.
bool Float32Known(const Value* v) {
  return v != nullptr && (v->dtype == DType::kF32 || v->dtype == DType::kBF16 || v->dtype == DType::kF16) &&
         v->shape.fully_known();
}

// The Transpose to channels-first producing v, or null.
// Resize (opset 11+: Resize-10 takes scales as input 1) of a rank-r tensor whose result does not depend on the axis
// order: no region of interest (tf_crop_and_resize), no `axes` (opset 18), and constant scales or sizes with one entry
// per axis.
bool ResizeIsTransparent(const Node& n, int r) {
  if (n.op_type != "Resize" || !n.domain.empty() || n.opset_version == 10 || n.HasAttr("axes")) return false;
  if (n.GetString("coordinate_transformation_mode", "half_pixel") == "tf_crop_and_resize") return false;
  if (n.inputs.size() < 3 || n.input(0) == nullptr) return false;
  auto per_axis = [&](int i) {
    const Value* v = n.input(i);
    return v != nullptr && v->is_constant() && v->constant->rank() == 1 && v->constant->numel() == r;
  };
  auto empty = [&](int i) {
    const Value* v = n.input(i);
    return v == nullptr || (v->is_constant() && v->constant->numel() == 0);
  };
  return (per_axis(2) && (n.inputs.size() < 4 || empty(3))) || (empty(2) && n.inputs.size() >= 4 && per_axis(3));
}

// MaxPool / AveragePool that the channels-last pooling loop runs (com.clusterjit.NhwcMaxPool /
// NhwcAveragePool): ONNX domain, float32 (MaxPool: also uint8 / int8), 1-D or 2-D windows, no Indices output.
bool PoolIsTransparent(const Node& n) {
  if ((n.op_type != "MaxPool" && n.op_type != "AveragePool") || !n.domain.empty() || n.inputs.size() != 1) {
    return false;
  }
  for (size_t k = 1; k < n.outputs.size(); ++k) {
    if (n.outputs[k] != nullptr) return false;
  }
  const Value* x = n.input(0);
  const Value* y = n.outputs.empty() ? nullptr : n.outputs[0];
  const bool bytes = n.op_type == "MaxPool" && x != nullptr && (x->dtype == DType::kU8 || x->dtype == DType::kI8);
  return x != nullptr && y != nullptr && (x->dtype == DType::kF32 || bytes) && y->dtype == x->dtype &&
         x->shape.rank_known && (x->shape.rank() == 3 || x->shape.rank() == 4) &&
         static_cast<int>(n.GetInts("kernel_shape").size()) == x->shape.rank() - 2;
}

// com.clusterjit.FlatGroupNorm (compiler/passes/simplify.h) whose groups are whole channels (C divisible by
// num_groups), float32 of rank >= 3: NhwcGroupNorm computes it on the channels-last tensor.
bool GroupNormIsTransparent(const Node& n) {
  if (n.op_type != "FlatGroupNorm" || n.domain != kInternalDomain || n.outputs.size() != 1) return false;
  const Value* x = n.input(0);
  const int64_t groups = n.GetInt("num_groups", 0);
  return x != nullptr && x->dtype == DType::kF32 && x->shape.fully_known() && x->shape.rank() >= 3 && groups > 0 &&
         x->shape.dims[1].value % groups == 0;
}

// The full pads (2r entries: begins, then ends, per axis) of ONNX Pad `n` over a rank-r tensor, from its
// attribute (opset < 11) or its constant pads input with the optional constant axes (opset 18); false when
// they are not constants.
bool PadAmounts(const Node& n, int r, std::vector<int64_t>* pads) {
  if (n.op_type != "Pad" || !n.domain.empty() || n.outputs.size() != 1 || n.inputs.empty() || n.input(0) == nullptr) {
    return false;
  }
  if (n.HasAttr("pads")) {
    *pads = n.GetInts("pads");
    return static_cast<int>(pads->size()) == 2 * r;
  }
  const Value* p = n.inputs.size() > 1 ? n.input(1) : nullptr;
  if (p == nullptr || !p->is_constant() || (p->dtype != DType::kI64 && p->dtype != DType::kI32)) return false;
  const std::vector<int64_t> given = p->constant->ToInt64Vector();
  std::vector<int64_t> axes;
  const Value* a = n.inputs.size() > 3 ? n.input(3) : nullptr;
  if (a != nullptr) {
    if (!a->is_constant()) return false;
    for (int64_t x : a->constant->ToInt64Vector()) {
      if (x < -r || x >= r) return false;
      axes.push_back(x < 0 ? x + r : x);
    }
  } else {
    for (int i = 0; i < r; ++i) axes.push_back(i);
  }
  if (given.size() != 2 * axes.size()) return false;
  pads->assign(2 * r, 0);
  for (size_t k = 0; k < axes.size(); ++k) {
    (*pads)[axes[k]] = given[k];
    (*pads)[r + axes[k]] = given[axes.size() + k];
  }
  return true;
}

// Pad of a rank-r tensor with constant pads: every mode pads each axis on its own, so the same Pad of the
// channels-last tensor with its pads permuted (the explicit Pad before a convolution of tf2onnx exports).
bool PadIsTransparent(const Node& n, int r) {
  std::vector<int64_t> pads;
  return PadAmounts(n, r, &pads) && n.input(0)->shape.rank_known && n.input(0)->shape.rank() == r;
}

// An ONNX Transpose of a rank 4-5 tensor to channels-first (to_first) or to channels-last. Rank 3 is left out: [0, 2,
// 1] is both directions, and a model's [N, L, C] <-> [N, C, L] is as often a sequence model's as a layout change.
bool IsModelTranspose(const Node* t, bool to_first) {
  if (t == nullptr || t->op_type != "Transpose" || !t->domain.empty() || t->inputs.size() != 1 ||
      t->input(0) == nullptr || !t->input(0)->shape.rank_known) {
    return false;
  }
  const int r = t->input(0)->shape.rank();
  return r >= 4 && r <= 5 && t->GetInts("perm") == (to_first ? ToFirst(r) : ToLast(r));
}

Node* ToFirstProducer(const Value* v) {
  if (v == nullptr || v->producer == nullptr || v->producer->op_type != "Transpose" || !v->producer->domain.empty() ||
      !v->shape.rank_known || v->shape.rank() < 3) {
    return nullptr;
  }
  return v->producer->GetInts("perm") == ToFirst(v->shape.rank()) ? v->producer : nullptr;
}

// A QLinearConv on 8-bit activations with constant weights and known 3-D / 4-D shapes (its channels-last
// twin, com.clusterjit.NhwcQLinearConv, reads and writes NHWC bytes: no layout change around it).
bool EligibleQLinearConv(const Node& n) {
  if (n.op_type != "QLinearConv" || !n.domain.empty() || n.outputs.size() != 1 || n.inputs.size() < 8) return false;
  const Value* x = n.input(0);
  const Value* w = n.input(3);
  const Value* y = n.outputs[0];
  auto byte_known = [](const Value* v) {
    return v != nullptr && (v->dtype == DType::kU8 || v->dtype == DType::kI8) && v->shape.fully_known();
  };
  if (!byte_known(x) || !byte_known(y) || w == nullptr || !w->is_constant()) return false;
  const int r = x->shape.rank();
  return (r == 3 || r == 4) && y->shape.rank() == r && w->shape.rank() == r;
}

// A ConvInteger on 8-bit X with constant weights and known 3-D / 4-D shapes (--auto_quantize=dynamic's
// convolutions): its twin com.clusterjit.NhwcConvInteger reads NHWC bytes and writes NHWC int32 sums.
bool EligibleConvInteger(const Node& n) {
  if (n.op_type != "ConvInteger" || !n.domain.empty() || n.outputs.size() != 1 || n.inputs.size() < 2) return false;
  const Value* x = n.input(0);
  const Value* w = n.input(1);
  const Value* y = n.outputs[0];
  if (x == nullptr || (x->dtype != DType::kU8 && x->dtype != DType::kI8) || !x->shape.fully_known() ||
      w == nullptr || !w->is_constant() || y == nullptr || y->dtype != DType::kI32 || !y->shape.fully_known()) {
    return false;
  }
  const int r = x->shape.rank();
  return (r == 3 || r == 4) && y->shape.rank() == r && w->shape.rank() == r;
}

// DynamicQuantizeLinear reading `v`: its scale and zero point come from the minimum and maximum over the
// whole tensor, the same in any layout, so its quantized output follows the input's layout.
bool IsTransparentDynamicQuantize(const Node& n) {
  return n.op_type == "DynamicQuantizeLinear" && n.domain.empty() && n.input(0) != nullptr &&
         !n.outputs.empty() && n.outputs[0] != nullptr;
}

bool Eligible(const Node& n) {
  if (EligibleQLinearConv(n) || EligibleConvInteger(n)) return true;
  if (n.op_type != "Conv" || !n.domain.empty() || n.outputs.size() != 1 || n.inputs.size() < 2) return false;
  const Value* x = n.input(0);
  const Value* w = n.input(1);
  const Value* b = n.input(2);
  const Value* y = n.outputs[0];
  if (!Float32Known(x) || !Float32Known(y) || w == nullptr || !w->is_constant() || w->dtype != x->dtype ||
      y->dtype != x->dtype) {
    return false;
  }
  int r = x->shape.rank();
  if (r < 3 || r > 5 || y->shape.rank() != r || w->shape.rank() != r) return false;
  return b == nullptr || b->dtype == DType::kF32 || b->dtype == x->dtype;
}

class Rewriter {
 public:
  explicit Rewriter(Graph& g) : g_(g) {}

  // y = op(...) becomes y' = op(...) with y' channels-last and y = Transpose(y', to channels-first).
  void MoveOutputToChannelsLast(Node* n, int k = 0) {
    Value* y = n->outputs[k];
    int r = y->shape.rank();
    Value* yl = g_.AddValue(Fresh(y->name + "/channels_last"), y->dtype, Permuted(y->shape, ToLast(r)));
    n->outputs[k] = yl;
    yl->producer = n;
    yl->producer_output = k;
    created_to_first_.insert(AddTranspose(yl, y, ToFirst(r), n->name + "/to_channels_first"));
    if (ReplayRecorder* rec = ReplayRecorder::Current()) rec->OnLayoutTwin(*y, *yl, ToFirst(r));
  }

  // The transpose to channels-first producing v, if this pass made it (MoveOutputToChannelsLast), else
  // null. A model's own Transpose is not one even with the same permutation: for rank 3, ToFirst and
  // ToLast are both [0, 2, 1], and taking the model's [N, L, C] -> [N, C, L] for one moved the ops after
  // it (a LayerNormalization over C after a Conv1d stack) onto the other layout, with strided reductions
  // and transposes around them.
  Node* ToFirstProducerMade(const Value* v) const {
    Node* t = ToFirstProducer(v);
    return t != nullptr && created_to_first_.count(t) ? t : nullptr;
  }

  // A model's own Transpose to channels-first, pushed down like the pass's (AdoptedTransposes).
  void Adopt(Node* t) { created_to_first_.insert(t); }

  // Transpose(v) to channels-last, as a new node.
  Value* TransposeToLast(Value* v, const std::string& base) {
    int r = v->shape.rank();
    Value* out = g_.AddValue(Fresh(v->name + "/channels_last"), v->dtype, Permuted(v->shape, ToLast(r)));
    AddTranspose(v, out, ToLast(r), base + "/to_channels_last");
    if (ReplayRecorder* rec = ReplayRecorder::Current()) rec->OnLayoutTwin(*v, *out, ToFirst(r));
    return out;
  }

  // A constant broadcast against a rank-r channels-first tensor, as the same constant for the channels-last
  // tensor: dims padded to rank r with leading 1s (numpy broadcasting), then permuted.
  Value* PermutedConstant(const Value* c, int r, const std::string& base) {
    // Once per weight and rank in a session, not per signature (compiler/ir/constant_memo.h).
    auto permuted = DerivedConstant(c->constant, 0x6e68776300u + static_cast<uint64_t>(r),
                                    [&] { return PermutedConstantTensor(*c->constant, r); });
    return g_.AddConstant(Fresh(base + "/channels_last"), std::move(permuted));
  }

  static Tensor PermutedConstantTensor(const Tensor& t, int r) {
    Dims d(r - t.rank(), 1);
    d.insert(d.end(), t.dims().begin(), t.dims().end());
    std::vector<int64_t> perm = ToLast(r);
    Dims od(r);
    for (int i = 0; i < r; ++i) od[i] = d[perm[i]];
    Tensor out(t.dtype(), od);
    size_t es = DTypeSize(t.dtype());
    std::vector<int64_t> stride(r, 1);
    for (int i = r - 2; i >= 0; --i) stride[i] = stride[i + 1] * d[i + 1];
    std::vector<int64_t> idx(r, 0);
    const uint8_t* src = static_cast<const uint8_t*>(t.raw());
    uint8_t* dst = static_cast<uint8_t*>(out.raw());
    for (int64_t k = 0, n = out.numel(); k < n; ++k) {
      int64_t off = 0;
      for (int i = 0; i < r; ++i) off += idx[i] * stride[perm[i]];
      std::memcpy(dst + k * es, src + off * es, es);
      for (int i = r - 1; i >= 0; --i) {
        if (++idx[i] < od[i]) break;
        idx[i] = 0;
      }
    }
    return out;
  }

  // A per-axis vector constant (Resize's scales or sizes: one entry per axis of a rank-r channels-first
  // tensor) for the channels-last tensor.
  Value* PermutedAxisVector(const Value* c, int r, const std::string& base) {
    const Tensor& t = *c->constant;
    std::vector<int64_t> perm = ToLast(r);
    Tensor out(t.dtype(), t.dims());
    size_t es = DTypeSize(t.dtype());
    for (int i = 0; i < r; ++i) {
      std::memcpy(static_cast<uint8_t*>(out.raw()) + i * es, static_cast<const uint8_t*>(t.raw()) + perm[i] * es, es);
    }
    return g_.AddConstant(Fresh(base + "/channels_last"), std::move(out));
  }

  std::string Fresh(const std::string& base) { return absl::StrCat(base, "#", counter_++); }

  // Whether `v` (computed, not constant) holds one value per channel of a rank-r channels-first tensor it is
  // broadcast against: dims [C, 1, ..., 1] (after numpy's leading 1s), as a dynamically quantized
  // convolution's scale x_scale * w_scale[c].
  static bool PerChannelOperand(const Value* v, int r) {
    if (!v->shape.fully_known() || v->shape.rank() >= r || v->shape.rank() < r - 1) return false;
    for (int i = 1; i < v->shape.rank(); ++i) {
      if (v->shape.dims[i].value != 1) return false;
    }
    return true;
  }

  // A PerChannelOperand for the channels-last tensor: Reshape to [1, ..., 1, -1] (no dims baked in).
  Value* PerChannelToLast(Value* v, int r, const std::string& base) {
    Tensor shape(DType::kI64, {r});
    for (int i = 0; i < r; ++i) shape.data<int64_t>()[i] = i == r - 1 ? -1 : 1;
    Value* s = g_.AddConstant(Fresh(base + "/channels_last_shape"), std::move(shape));
    Shape od;
    od.rank_known = true;
    od.dims.assign(r, Dim{1, ""});
    od.dims.back() = v->shape.dims[0];
    Value* out = g_.AddValue(Fresh(v->name + "/channels_last"), v->dtype, od);
    Node* n = g_.AddNode("Reshape", Fresh(base + "/channels_last_reshape"), {v, s}, {""});
    n->opset_version = 14;
    n->outputs[0] = out;
    out->producer = n;
    out->producer_output = 0;
    return out;
  }

 private:
  // out = Transpose(in, perm); `out` (an existing value) becomes the new node's output.
  Node* AddTranspose(Value* in, Value* out, std::vector<int64_t> perm, const std::string& base) {
    Node* t = g_.AddNode("Transpose", Fresh(base), {in}, {""});
    t->opset_version = 13;
    t->attrs["perm"] = Attribute::Ints(std::move(perm));
    t->outputs[0] = out;
    out->producer = t;
    out->producer_output = 0;
    return t;
  }

  Graph& g_;
  int counter_ = 0;
  std::unordered_set<const Node*> created_to_first_;
};

using Readers = std::unordered_map<const Value*, std::vector<const Node*>>;

// The most layout-transparent ops between two convolutions that still connect them: a dynamically quantized
// block (DynamicQuantizeLinear, ConvInteger, Cast, Mul by the scales, a folded BatchNorm's Mul and Add, a
// decomposed HardSwish's Add, Clip, Mul, Div) is 9 hops from one convolution's output to the next's input.
constexpr int kMaxTransparentHops = 16;

// What a walk forward from a channels-first value through layout-transparent ops (at most kMaxTransparentHops)
// reaches: eligible Convs reading a reached value as X, and whether a model's Transpose to channels-last reads one.
struct Reach {
  std::vector<const Node*> convs;
  bool to_last = false;
};

Reach WalkTransparent(const Value* start, const Readers& readers) {
  Reach reach;
  std::deque<std::pair<const Value*, int>> queue{{start, 0}};
  std::unordered_set<const Value*> seen;
  while (!queue.empty()) {
    auto [v, depth] = queue.front();
    queue.pop_front();
    if (!seen.insert(v).second) continue;
    auto it = readers.find(v);
    if (it == readers.end()) continue;
    for (const Node* r : it->second) {
      if (Eligible(*r) && r->input(0) == v) {
        reach.convs.push_back(r);
        continue;
      }
      if (IsModelTranspose(r, /*to_first=*/false)) {
        reach.to_last = true;
        continue;
      }
      const bool group_norm = GroupNormIsTransparent(*r) && r->input(0) == v;
      const int rank = v->shape.rank_known ? v->shape.rank() : 0;
      bool through = (IsUnaryTransparentNode(*r) && r->input(0) == v) || TraitsOf(*r).layout_binary ||
                     (IsTransparentDynamicQuantize(*r) && r->input(0) == v) ||
                     r->op_type == "Concat" || (r->op_type == "Resize" && r->input(0) == v) ||
                     (r->op_type == "Split" && r->input(0) == v) || PoolIsTransparent(*r) || group_norm ||
                     (r->input(0) == v && PadIsTransparent(*r, rank));
      if (!through || (!r->domain.empty() && !group_norm) || depth >= kMaxTransparentHops) continue;
      for (const Value* out : r->outputs) {
        if (out) queue.push_back({out, depth + 1});
        if (r->op_type != "Split") break;  // every output of a Split, the first of the others
      }
    }
  }
  return reach;
}

Readers ReadersOf(const std::vector<Node*>& order) {
  Readers readers;
  for (const Node* n : order) {
    for (const Value* v : n->inputs) if (v) readers[v].push_back(n);
  }
  return readers;
}

// The Convs to run channels-last: each eligible Conv connected to another through layout-transparent ops,
// and each one between a model's own layout Transposes (an NHWC graph from tf2onnx / keras2onnx: the input
// Transpose to channels-first before it, or a Transpose back to channels-last after it), whose transposes
// then cancel against the pass's.
std::unordered_set<const Node*> ConnectedConvs(const std::vector<Node*>& order, const Readers& readers) {
  std::unordered_set<const Node*> connected;
  for (const Node* c : order) {
    if (!Eligible(*c)) continue;
    const Reach reach = WalkTransparent(c->outputs[0], readers);
    for (const Node* r : reach.convs) connected.insert(r);
    if (!reach.convs.empty() || reach.to_last || IsModelTranspose(c->input(0)->producer, /*to_first=*/true)) {
      connected.insert(c);
    }
  }
  return connected;
}

// The model's Transposes to channels-first (rank 4-5) whose result reaches, through layout-transparent
// ops, a Transpose back to channels-last or a Conv: pushed down like the pass's own, they cancel there,
// and the ops in between (pooling, Resize, Pad, elementwise) run on the channels-last tensor.
std::vector<Node*> AdoptedTransposes(const std::vector<Node*>& order, const Readers& readers) {
  std::vector<Node*> adopted;
  for (Node* t : order) {
    if (!IsModelTranspose(t, /*to_first=*/true) || t->outputs.size() != 1 || t->outputs[0] == nullptr) continue;
    const Reach reach = WalkTransparent(t->outputs[0], readers);
    if (reach.to_last || !reach.convs.empty()) adopted.push_back(t);
  }
  return adopted;
}

// ---- Moving a transpose to channels-first down through one op (the op then reads and writes the
// channels-last tensor). Each returns whether it moved; r is the rank of the op's output.

// The common first step: when n's first input is a transpose to channels-first made by this pass (of rank
// r; r < 0: any rank), n reads that transpose's channels-last source instead and true is returned.
bool ReadChannelsLastInput(Rewriter& rw, Node* n, int r) {
  Node* t = rw.ToFirstProducerMade(n->input(0));
  if (t == nullptr || (r >= 0 && n->input(0)->shape.rank() != r)) return false;
  n->inputs[0] = t->inputs[0];
  return true;
}

// Group statistics over positions and whole channels: the same from the channels-last tensor.
bool MoveGroupNorm(Rewriter& rw, Node* n) {
  if (!ReadChannelsLastInput(rw, n, -1)) return false;
  n->op_type = "NhwcGroupNorm";
  rw.MoveOutputToChannelsLast(n);
  return true;
}

// Split of a channels-last tensor along the permuted axis (sizes unchanged): every output channels-last
// (a CSP / C2f block splits a convolution's channels, convolves one part and concatenates them again).
bool MoveSplit(Rewriter& rw, Node* n) {
  if (n->inputs.empty() || !n->input(0)) return false;
  const int r = n->input(0)->shape.rank();
  Node* t = rw.ToFirstProducerMade(n->input(0));
  bool known = r >= 3 && t != nullptr;
  for (const Value* y : n->outputs) known &= y != nullptr && y->shape.fully_known() && y->shape.rank() == r;
  if (!known) return false;
  auto axis = NormalizeAxis(*n, n->GetInt("axis", 0), r);
  if (!axis.ok()) return false;
  n->inputs[0] = t->inputs[0];
  n->attrs["axis"] = Attribute::Int(ToFirst(r)[*axis]);
  for (size_t k = 0; k < n->outputs.size(); ++k) rw.MoveOutputToChannelsLast(n, static_cast<int>(k));
  return true;
}

// DynamicQuantizeLinear: output 0 channels-last; the scalar scale and zero point unchanged.
bool MoveDynamicQuantize(Rewriter& rw, Node* n) {
  Node* t = rw.ToFirstProducerMade(n->input(0));
  const Value* y = n->outputs[0];
  if (t == nullptr || !y->shape.fully_known() || y->shape.rank() < 3 || n->input(0)->shape.rank() != y->shape.rank()) {
    return false;
  }
  n->inputs[0] = t->inputs[0];
  rw.MoveOutputToChannelsLast(n);
  return true;
}

// An op whose first input alone is permuted (elementwise unary, and the same-rank ops of
// IsUnaryTransparentNode).
bool MoveUnary(Rewriter& rw, Node* n, int r) {
  if (!ReadChannelsLastInput(rw, n, r)) return false;
  rw.MoveOutputToChannelsLast(n);
  return true;
}

// A broadcasting binary op with at least one transposed operand; constants are permuted, per-channel
// operands reshaped, small same-rank tensors transposed too.
bool MoveBinary(Rewriter& rw, Node* n, int r) {
  int transposed = 0;
  bool ok = true;
  int64_t out_numel = 1;
  for (const Dim& d : n->outputs[0]->shape.dims) out_numel *= d.value;
  for (Value* v : n->inputs) {
    if (rw.ToFirstProducerMade(v) && v->shape.rank() == r) {
      ++transposed;
    } else if (v->is_constant()) {
      ok &= v->constant->rank() <= r;
    } else if (!Rewriter::PerChannelOperand(v, r)) {
      // A small tensor of the same rank (e.g. a squeeze-excitation scale [N, C, 1, 1]) is transposed too.
      int64_t numel = 1;
      for (const Dim& d : v->shape.dims) numel *= d.value;
      ok &= v->shape.fully_known() && v->shape.rank() == r && numel * 4 <= out_numel;
    }
  }
  // PRelu broadcasts its slope one way only (to X): X must be the transposed operand.
  if (n->op_type == "PRelu") ok &= rw.ToFirstProducerMade(n->input(0)) != nullptr;
  if (!ok || transposed == 0) return false;
  for (Value*& v : n->inputs) {
    if (Node* t = rw.ToFirstProducerMade(v); t && v->shape.rank() == r) {
      v = t->inputs[0];
    } else if (v->is_constant()) {
      v = rw.PermutedConstant(v, r, n->name);
    } else if (Rewriter::PerChannelOperand(v, r)) {
      v = rw.PerChannelToLast(v, r, n->name);
    } else {
      v = rw.TransposeToLast(v, n->name);
    }
  }
  rw.MoveOutputToChannelsLast(n);
  return true;
}

// GlobalAveragePool / GlobalMaxPool over the spatial axes of the channels-last tensor: ReduceMean /
// ReduceMax with keepdims.
bool MoveGlobalPool(Rewriter& rw, Node* n, int r) {
  if (!ReadChannelsLastInput(rw, n, r)) return false;
  std::vector<int64_t> axes;
  for (int i = 1; i < r - 1; ++i) axes.push_back(i);
  n->op_type = n->op_type == "GlobalAveragePool" ? "ReduceMean" : "ReduceMax";
  n->opset_version = 13;
  n->attrs.clear();
  n->attrs["axes"] = Attribute::Ints(axes);
  n->attrs["keepdims"] = Attribute::Int(1);
  rw.MoveOutputToChannelsLast(n);
  return true;
}

// Windows over the spatial axes of the channels-last tensor, every channel alike (ResNet's stem MaxPool,
// YOLO's SPPF): the channels-last pooling loop, vectorized over the channels.
bool MovePool(Rewriter& rw, Node* n, int r) {
  if (!ReadChannelsLastInput(rw, n, r)) return false;
  n->op_type = n->op_type == "MaxPool" ? "NhwcMaxPool" : "NhwcAveragePool";
  n->domain = std::string(kInternalDomain);
  n->outputs.resize(1);
  rw.MoveOutputToChannelsLast(n);
  return true;
}

// Resize interpolates each axis on its own (nearest, linear and cubic are separable): the same Resize of
// the channels-last tensor with its scales or sizes permuted.
bool MoveResize(Rewriter& rw, Node* n, int r) {
  if (!ReadChannelsLastInput(rw, n, r)) return false;
  int which = n->input(2) && n->input(2)->is_constant() && n->input(2)->constant->numel() == r ? 2 : 3;
  n->inputs[which] = rw.PermutedAxisVector(n->input(which), r, n->name);
  rw.MoveOutputToChannelsLast(n);
  return true;
}

// Pad with its amounts permuted (an attribute, or a new constant input).
bool MovePad(Graph& g, Rewriter& rw, Node* n, int r) {
  if (!ReadChannelsLastInput(rw, n, -1)) return false;
  std::vector<int64_t> pads;
  PadAmounts(*n, r, &pads);
  const std::vector<int64_t> perm = ToLast(r);
  std::vector<int64_t> permuted(2 * r);
  for (int i = 0; i < r; ++i) {
    permuted[i] = pads[perm[i]];
    permuted[r + i] = pads[r + perm[i]];
  }
  if (n->HasAttr("pads")) {
    n->attrs["pads"] = Attribute::Ints(permuted);
  } else {
    Tensor p(DType::kI64, {2 * r});
    std::copy(permuted.begin(), permuted.end(), p.data<int64_t>());
    n->inputs[1] = g.AddConstant(rw.Fresh(n->name + "/pads_channels_last"), std::move(p));
    if (n->inputs.size() > 3) n->inputs.resize(3);  // every axis now
  }
  rw.MoveOutputToChannelsLast(n);
  return true;
}

// Concat of channels-last tensors only, along the permuted axis.
bool MoveConcat(Rewriter& rw, Node* n, int r) {
  bool all = true;
  for (Value* v : n->inputs) all &= v && rw.ToFirstProducerMade(v) && v->shape.rank() == r;
  if (!all) return false;
  auto axis = NormalizeAxis(*n, n->GetInt("axis", 0), r);
  if (!axis.ok()) return false;
  for (Value*& v : n->inputs) v = rw.ToFirstProducerMade(v)->inputs[0];
  n->attrs["axis"] = Attribute::Int(ToFirst(r)[*axis]);
  rw.MoveOutputToChannelsLast(n);
  return true;
}

// Moves a transpose to channels-first that feeds n below n where n is layout-transparent for it.
bool MoveTransposeThrough(Graph& g, Rewriter& rw, Node* n) {
  if (GroupNormIsTransparent(*n)) return MoveGroupNorm(rw, n);
  if (!n->domain.empty() || n->outputs.empty() || n->outputs[0] == nullptr) return false;
  if (n->op_type == "Split") return MoveSplit(rw, n);
  if (IsTransparentDynamicQuantize(*n)) return MoveDynamicQuantize(rw, n);
  bool extra_outputs = false;
  for (size_t k = 1; k < n->outputs.size(); ++k) extra_outputs |= n->outputs[k] != nullptr;
  if (extra_outputs || !n->outputs[0]->shape.fully_known()) return false;
  const int r = n->outputs[0]->shape.rank();
  if (r < 3) return false;
  if (IsUnaryTransparentNode(*n)) return MoveUnary(rw, n, r);
  if (TraitsOf(*n).layout_binary && n->inputs.size() == 2 && n->input(0) && n->input(1) &&
      !n->HasAttr("broadcast") && !n->HasAttr("axis")) {  // opset < 7 broadcasting: not numpy's
    return MoveBinary(rw, n, r);
  }
  if ((n->op_type == "GlobalAveragePool" || n->op_type == "GlobalMaxPool") && n->inputs.size() == 1) {
    return MoveGlobalPool(rw, n, r);
  }
  if (PoolIsTransparent(*n)) return MovePool(rw, n, r);
  if (ResizeIsTransparent(*n, r)) return MoveResize(rw, n, r);
  if (PadIsTransparent(*n, r)) return MovePad(g, rw, n, r);
  if (n->op_type == "Concat" && !n->inputs.empty()) return MoveConcat(rw, n, r);
  return false;
}

}  // namespace

absl::StatusOr<bool> AssignChannelsLastLayout(Graph& g) {
  CJIT_ASSIGN_OR_RETURN(std::vector<Node*> order, g.TopologicalOrder());
  const Readers readers = ReadersOf(order);
  std::unordered_set<const Node*> convs = ConnectedConvs(order, readers);
  const std::vector<Node*> adopted = AdoptedTransposes(order, readers);
  if (convs.empty() && adopted.empty()) return false;
  Rewriter rw(g);
  for (Node* t : adopted) rw.Adopt(t);
  for (Node* c : order) {
    if (!convs.count(c)) continue;
    Value* x = c->inputs[0];
    c->op_type = c->op_type == "QLinearConv"   ? "NhwcQLinearConv"
                 : c->op_type == "ConvInteger" ? "NhwcConvInteger"
                                               : "NhwcConv";
    c->domain = std::string(kInternalDomain);
    c->inputs[0] = rw.TransposeToLast(x, c->name);
    rw.MoveOutputToChannelsLast(c);
  }
  // Push the transposes to channels-first down through layout-transparent ops, in topological order (a
  // rewritten node's output is again such a transpose, so chains move in one pass).
  CJIT_ASSIGN_OR_RETURN(order, g.TopologicalOrder());
  int moved = 0;
  for (Node* n : order) moved += MoveTransposeThrough(g, rw, n);
  CJIT_VLOG(1) << "AssignChannelsLastLayout: " << convs.size() << " convolutions channels-last, " << moved
               << " ops moved to channels-last";
  return true;
}

namespace {

// One activation the fused kernel applies between the two convolutions, as (name, a, b) entries of the
// mid_ops / mid_params attributes: Relu; Clip [a, b]; HardSwish; Linear a * x + b. False for other ops.
bool MidActivation(const Node& n, std::vector<std::string>* ops, std::vector<float>* params) {
  if (!n.domain.empty() || n.outputs.size() != 1 || n.outputs[0] == nullptr || n.inputs.empty()) return false;
  const std::string& t = n.op_type;
  if (t == "Relu" || t == "HardSwish") {
    if (n.inputs.size() != 1) return false;
    ops->push_back(t);
    params->insert(params->end(), {0.0f, 0.0f});
    return true;
  }
  if (t == "HardSigmoid") {  // max(0, min(1, alpha * x + beta)), ONNX defaults 0.2 and 0.5
    if (n.inputs.size() != 1) return false;
    ops->insert(ops->end(), {"Linear", "Clip"});
    params->insert(params->end(), {n.GetFloat("alpha", 0.2f), n.GetFloat("beta", 0.5f), 0.0f, 1.0f});
    return true;
  }
  if (t == "Clip") {
    float lo = -std::numeric_limits<float>::infinity(), hi = std::numeric_limits<float>::infinity();
    if (n.HasAttr("min")) lo = n.GetFloat("min", lo);  // opset < 11
    if (n.HasAttr("max")) hi = n.GetFloat("max", hi);
    for (size_t i = 1; i < n.inputs.size(); ++i) {
      const Value* v = n.inputs[i];
      if (v == nullptr) continue;
      if (!v->is_constant() || v->constant->dtype() != DType::kF32 || v->constant->numel() != 1) return false;
      (i == 1 ? lo : hi) = v->constant->data<float>()[0];
    }
    ops->push_back("Clip");
    params->insert(params->end(), {lo, hi});
    return true;
  }
  return false;
}

bool IsF32Rank4(const Value* v) {
  return v != nullptr && v->dtype == DType::kF32 && v->shape.fully_known() && v->shape.rank() == 4;
}

// The 2-D channels-last convolution `c` (NhwcConv) as (geometry, group); false when it cannot be computed.
bool NhwcGeometry(const Node& c, WindowGeometry* g) {
  if (c.op_type != "NhwcConv" || c.domain != kInternalDomain || c.inputs.size() < 2 || c.outputs.size() != 1 ||
      !IsF32Rank4(c.input(0)) || !IsF32Rank4(c.outputs[0]) || c.input(1) == nullptr || !c.input(1)->is_constant() ||
      c.input(1)->dtype != DType::kF32 || c.input(1)->constant->rank() != 4) {
    return false;
  }
  const Dims x = c.input(0)->shape.concrete();
  const Dims& w = c.input(1)->constant->dims();
  auto geo = ComputeWindowGeometry(c, {x[1], x[2]}, {w[2], w[3]}, false, false);
  if (!geo.ok()) return false;
  *g = *geo;
  const Dims y = c.outputs[0]->shape.concrete();
  return g->out.size() == 2 && g->out[0] == y[1] && g->out[1] == y[2];
}

bool OptionalF32Vector(const Value* v, int64_t n) {
  return v == nullptr || (v->dtype == DType::kF32 && v->shape.fully_known() && v->shape.rank() == 1 &&
                          v->shape.dims[0].value == n);
}

}  // namespace

absl::StatusOr<int> FusePointwiseDepthwise(Graph& g) {
  std::unordered_map<const Value*, int> reads;     // node inputs, implicit inputs and graph outputs
  std::unordered_map<const Value*, Node*> reader;  // the one node reading a value, where there is one
  for (const auto& n : g.nodes()) {
    for (const Value* v : n->inputs) {
      ++reads[v];
      reader[v] = n.get();
    }
    for (const Value* v : n->implicit_inputs) ++reads[v];
  }
  for (const Value* v : g.outputs()) reads[v] += 2;  // never fused away
  CJIT_ASSIGN_OR_RETURN(std::vector<Node*> order, g.TopologicalOrder());
  std::vector<Node*> removed;
  int fused = 0;
  for (Node* pw : order) {
    WindowGeometry pg, dg;
    if (!NhwcGeometry(*pw, &pg)) continue;
    const Dims& w1 = pw->input(1)->constant->dims();
    const int64_t M = w1[0];
    const bool pointwise = pw->GetInt("group", 1) == 1 && w1[2] == 1 && w1[3] == 1 &&
                           pg.strides == std::vector<int64_t>{1, 1} && pg.pad_begin == std::vector<int64_t>{0, 0} &&
                           pg.pad_end == std::vector<int64_t>{0, 0};
    if (!pointwise || !OptionalF32Vector(pw->input(2), M)) continue;
    // pw -> [activations] -> dw, every value in between read once, by the next node, as input 0.
    std::vector<Node*> chain;
    std::vector<std::string> mid_ops;
    std::vector<float> mid_params;
    const Value* v = pw->outputs[0];
    Node* dw = nullptr;
    for (;;) {
      if (reads[v] != 1) break;
      Node* n = reader[v];
      if (n == nullptr || n->inputs.empty() || n->inputs[0] != v) break;
      if (n->op_type == "NhwcConv") {
        dw = n;
        break;
      }
      if (!MidActivation(*n, &mid_ops, &mid_params)) break;
      if (n->outputs[0]->dtype != DType::kF32 || n->outputs[0]->shape.concrete() != v->shape.concrete()) break;
      chain.push_back(n);
      v = n->outputs[0];
    }
    if (dw == nullptr || !NhwcGeometry(*dw, &dg)) continue;
    const Dims& w2 = dw->input(1)->constant->dims();
    if (dw->GetInt("group", 1) != M || w2[0] != M || w2[1] != 1 || dw->outputs[0]->shape.dims[3].value != M ||
        !OptionalF32Vector(dw->input(2), M)) {
      continue;
    }
    Value* b1 = pw->input(2);
    Value* b2 = dw->input(2);
    Value* w2v = dw->inputs[1];
    dw->op_type = "NhwcPointwiseDepthwiseConv";
    dw->inputs = {pw->inputs[0], pw->inputs[1], b1, w2v, b2};
    if (!mid_ops.empty()) {
      Attribute ops;
      ops.kind = Attribute::Kind::kStrings;
      ops.strings = mid_ops;
      dw->attrs["mid_ops"] = ops;
      Attribute params;
      params.kind = Attribute::Kind::kFloats;
      params.floats = mid_params;
      dw->attrs["mid_params"] = params;
    }
    removed.push_back(pw);
    removed.insert(removed.end(), chain.begin(), chain.end());
    ++fused;
  }
  if (!removed.empty()) {
    g.RemoveNodes(removed);
    g.RemoveUnusedValues();
  }
  CJIT_VLOG(1) << "FusePointwiseDepthwise: " << fused << " pointwise -> depthwise pairs fused";
  return fused;
}

namespace {

// Whether the Pad feeding a convolution adds only zeros (constant mode, value absent or 0).
bool PadsWithZeros(const Node& pad) {
  if (pad.GetString("mode", "constant") != "constant") return false;
  if (pad.HasAttr("value") && pad.GetFloat("value", 0) != 0.0f) return false;
  const Value* c = pad.inputs.size() > 2 ? pad.input(2) : nullptr;
  if (c == nullptr) return true;
  if (!c->is_constant() || c->constant->numel() > 1) return false;
  if (c->constant->numel() == 0) return true;
  switch (c->constant->dtype()) {
    case DType::kF32:
      return c->constant->data<float>()[0] == 0.0f;
    case DType::kF16:
    case DType::kBF16:
      return (c->constant->data<uint16_t>()[0] & 0x7FFF) == 0;
    default:
      return false;
  }
}

}  // namespace

absl::StatusOr<int> FoldPadIntoConv(Graph& g) {
  std::unordered_map<const Value*, int> reads;
  for (const auto& n : g.nodes()) {
    for (const Value* v : n->inputs) if (v) ++reads[v];
    for (const Value* v : n->implicit_inputs) ++reads[v];
  }
  for (const Value* v : g.outputs()) reads[v] += 2;
  std::vector<Node*> removed;
  for (const auto& owned : g.nodes()) {
    Node* conv = owned.get();
    const bool nhwc = conv->op_type == "NhwcConv" && conv->domain == kInternalDomain;
    if ((conv->op_type != "Conv" || !conv->domain.empty()) && !nhwc) continue;
    if (conv->inputs.size() < 2 || conv->input(0) == nullptr || conv->input(1) == nullptr) continue;
    Value* padded = conv->inputs[0];
    Node* pad = padded->producer;
    if (pad == nullptr || reads[padded] != 1 || !padded->shape.rank_known) continue;
    const int r = padded->shape.rank();
    std::vector<int64_t> pads;
    if (r < 3 || !PadAmounts(*pad, r, &pads) || !PadsWithZeros(*pad)) continue;
    const std::string auto_pad = conv->GetString("auto_pad", "NOTSET");
    if (auto_pad != "NOTSET" && !auto_pad.empty()) continue;
    const Value* w = conv->input(1);
    if (!w->shape.fully_known() || w->shape.rank() != r) continue;
    const int sp = r - 2, first = nhwc ? 1 : 2, channels = nhwc ? r - 1 : 1;
    std::vector<int64_t> conv_pads = conv->GetInts("pads", std::vector<int64_t>(2 * sp, 0));
    std::vector<int64_t> dilations = conv->GetInts("dilations", std::vector<int64_t>(sp, 1));
    if (static_cast<int>(conv_pads.size()) != 2 * sp || static_cast<int>(dilations.size()) != sp) continue;
    bool ok = pads[0] == 0 && pads[r] == 0 && pads[channels] == 0 && pads[r + channels] == 0;
    std::vector<int64_t> merged = conv_pads;
    for (int i = 0; i < sp && ok; ++i) {
      const int64_t b = pads[first + i], e = pads[r + first + i];
      // Non-negative, and every output position still overlaps the input (a window entirely in padding is
      // outside what some convolution implementations take).
      const int64_t extent = (w->shape.dims[2 + i].value - 1) * dilations[i];
      ok &= b >= 0 && e >= 0 && conv_pads[i] + b <= extent && conv_pads[sp + i] + e <= extent;
      merged[i] += b;
      merged[sp + i] += e;
    }
    if (!ok) continue;
    conv->attrs["pads"] = Attribute::Ints(merged);
    conv->inputs[0] = pad->inputs[0];
    removed.push_back(pad);
  }
  if (!removed.empty()) {
    g.RemoveNodes(removed);
    g.RemoveUnusedValues();
  }
  CJIT_VLOG(1) << "FoldPadIntoConv: " << removed.size() << " Pads folded into convolutions";
  return static_cast<int>(removed.size());
}

}  // namespace cjit
