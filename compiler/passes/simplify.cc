#include "compiler/passes/simplify.h"

#include "base/logging.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "compiler/ir/verifier.h"
#include "compiler/ops/op_registry.h"
#include "compiler/passes/specialization_replay.h"

namespace cjit {
namespace {

// Readers of each value (node inputs and implicit inputs) and whether it is a graph output.
struct Uses {
  std::unordered_map<const Value*, int> count;
  std::unordered_map<const Value*, bool> is_output;
  explicit Uses(const Graph& g) {
    for (const auto& n : g.nodes()) {
      for (const Value* v : n->inputs) if (v) ++count[v];
      for (const Value* v : n->implicit_inputs) ++count[v];
    }
    for (const Value* v : g.outputs()) is_output[v] = true;
  }
  bool OnlyReader(const Value* v) const {
    auto it = count.find(v);
    return it != count.end() && it->second == 1 && !is_output.count(v);
  }
};

// Replaces node `n`'s (single) output by `by` and removes n. A graph output keeps its position.
void Bypass(Graph& g, Node* n, Value* by) {
  g.ReplaceAllUses(n->outputs[0], by);
  g.RemoveNode(n);
}

bool SameDims(const Value* a, const Value* b) {
  return a && b && a->shape.fully_known() && b->shape.fully_known() && a->shape.concrete() == b->shape.concrete();
}

}  // namespace

bool IsReshapeLike(const std::string& op_type) { return TraitsOf("", op_type).view == ViewKind::kReshape; }

bool IsIdentityReshape(const Node& n) {
  const Value* in = n.inputs.empty() ? nullptr : n.inputs[0];
  const Value* out = n.outputs.empty() ? nullptr : n.outputs[0];
  return in && out && in->dtype == out->dtype && SameDims(in, out);
}

bool RemoveDeadNodes(Graph& graph) {
  std::unordered_map<const Value*, bool> live;
  for (const Value* v : graph.outputs()) live[v] = true;
  auto order = graph.TopologicalOrder();
  if (!order.ok()) return false;
  std::vector<Node*> dead;
  for (auto it = order->rbegin(); it != order->rend(); ++it) {
    Node* n = *it;
    bool used = false;
    for (Value* v : n->outputs) used |= v && live.count(v);
    if (!used) {
      dead.push_back(n);
      continue;
    }
    for (Value* v : n->inputs) if (v) live[v] = true;
    for (Value* v : n->implicit_inputs) live[v] = true;
  }
  graph.RemoveNodes(dead);
  return !dead.empty();
}

absl::StatusOr<bool> RemoveNoOps(Graph& g) {
  bool changed = false;
  CJIT_ASSIGN_OR_RETURN(std::vector<Node*> order, g.TopologicalOrder());
  for (Node* n : order) {
    if (n->outputs.empty() || n->outputs[0] == nullptr || n->inputs.empty() || n->inputs[0] == nullptr) continue;
    Value* in = n->inputs[0];
    Value* out = n->outputs[0];
    bool extra_outputs = false;
    for (size_t k = 1; k < n->outputs.size(); ++k) extra_outputs |= n->outputs[k] != nullptr;
    bool noop = false;
    if (n->op_type == "Identity") noop = true;
    else if (n->op_type == "Dropout") {
      bool training = n->GetInt("training_mode", 0) != 0;
      if (n->inputs.size() > 2 && n->inputs[2]) {
        training = n->inputs[2]->is_constant() && n->inputs[2]->constant->ToDoubleVector().at(0) != 0;
        if (!n->inputs[2]->is_constant()) training = true;
      }
      noop = !training && !extra_outputs;
    } else if (n->op_type == "Cast") noop = in->dtype == out->dtype && in->dtype != DType::kInvalid;
    else if (IsReshapeLike(n->op_type)) noop = IsIdentityReshape(*n);
    else if (n->op_type == "Transpose") {
      std::vector<int64_t> perm = n->GetInts("perm");
      noop = !perm.empty();
      for (size_t i = 0; i < perm.size(); ++i) noop &= perm[i] == static_cast<int64_t>(i);
      // Transpose(Transpose(x, p), q) with p∘q = identity.
      if (!noop && in->producer && in->producer->op_type == "Transpose") {
        std::vector<int64_t> p = in->producer->GetInts("perm");
        if (!p.empty() && p.size() == perm.size()) {
          // perm may be invalid here: a dead node's attributes are never checked by shape inference.
          bool ident = true;
          for (size_t i = 0; i < perm.size() && ident; ++i) {
            ident = perm[i] >= 0 && perm[i] < static_cast<int64_t>(p.size()) && p[perm[i]] == static_cast<int64_t>(i);
          }
          if (ident && in->producer->inputs[0]) {
            CJIT_VLOG(2) << "RemoveNoOps: transpose pair " << in->producer->name << ", " << n->name << " cancels";
            Bypass(g, n, in->producer->inputs[0]);
            changed = true;
            continue;
          }
        }
      }
    } else if (n->op_type == "Reshape" && in->producer && IsReshapeLike(in->producer->op_type) &&
               n->inputs.size() > 1 && n->inputs[1] && n->inputs[1]->is_constant() &&
               in->producer->inputs[0] && out->shape.fully_known()) {
      // Reshape(ReshapeLike(x)) -> Reshape(x) with the final dims (0 / -1 resolved).
      if (ReplayRecorder* rec = ReplayRecorder::Current()) {
        rec->Unreplayable(absl::StrCat(n->Describe(), ": Reshape(ReshapeLike) folded with this signature's dims"));
      }
      Dims d = out->shape.concrete();
      Tensor t(DType::kI64, {static_cast<int64_t>(d.size())});
      for (size_t i = 0; i < d.size(); ++i) t.data<int64_t>()[i] = d[i];
      n->inputs[0] = in->producer->inputs[0];
      n->inputs[1] = g.AddConstant(absl::StrCat(n->name, "/shape"), t);
      n->attrs.erase("allowzero");
      changed = true;
      continue;
    }
    if (noop) {
      CJIT_VLOG(2) << "RemoveNoOps: removing " << n->Describe();
      if (IsReshapeLike(n->op_type)) {
        if (ReplayRecorder* rec = ReplayRecorder::Current()) rec->OnIdentityReshapeRemoved(*n);
      }
      Bypass(g, n, in);
      changed = true;
    }
  }
  if (changed) RemoveDeadNodes(g);
  return changed;
}

absl::StatusOr<bool> FoldIntoConv(Graph& g) {
  bool changed = false;
  Uses uses(g);
  CJIT_ASSIGN_OR_RETURN(std::vector<Node*> order, g.TopologicalOrder());
  for (Node* n : order) {
    if (n->inputs.empty() || !n->inputs[0]) continue;
    // Mul and Add commute: the Conv output may be either operand.
    int data_in = 0;
    if ((n->op_type == "Mul" || n->op_type == "Add") && n->inputs.size() == 2 && n->inputs[1] &&
        n->inputs[0]->is_constant() && n->inputs[1]->producer) {
      data_in = 1;
    }
    if (!n->inputs[data_in]->producer) continue;
    Node* conv = n->inputs[data_in]->producer;
    bool transposed = conv->op_type == "ConvTranspose";
    if ((conv->op_type != "Conv" && !transposed) || !conv->domain.empty() || !uses.OnlyReader(conv->outputs[0])) {
      continue;
    }
    Value* w = conv->input(1);
    Value* b = conv->input(2);
    if (!w || !w->is_constant() || w->dtype != DType::kF32 || (b && (!b->is_constant() || b->dtype != DType::kF32)))
      continue;
    // Also before specialization, when nothing has validated the Conv yet: fold only well-formed operands
    // (W of rank >= 3, B of OC values); anything else is left for shape inference to reject.
    if (w->constant->dims().size() < 3) continue;
    // Conv: W [OC, C/group, k..]; ConvTranspose: W [C, OC/group, k..], output channel (c / (C/group)) *
    // (OC/group) + j for W[c, j].
    int64_t group = conv->GetInt("group", 1);
    if (transposed && (group <= 0 || w->constant->dim(0) % group != 0)) continue;
    int64_t oc = transposed ? w->constant->dim(1) * group : w->constant->dim(0);
    if (b && b->constant->numel() != oc) continue;
    int64_t per_oc = w->constant->numel() / std::max<int64_t>(oc, 1);
    std::vector<double> scale(oc, 1.0), shift(oc, 0.0);
    // The Conv output's rank is its weight's (ONNX Conv: W is [M, C/group, k1..kn], Y is [N, M, d1..dn]),
    // so these folds need no shapes and also run before specialization.
    int rank = static_cast<int>(w->constant->dims().size());
    // Per-channel constant c broadcast over [N, OC, spatial...]: returns false if it is not one.
    auto channel_values = [&](const Value* c, std::vector<double>* vals) {
      if (!c || !c->is_constant() || c->dtype != DType::kF32) return false;
      const Dims& d = c->constant->dims();
      if (static_cast<int>(d.size()) > rank) return false;
      std::vector<double> v = c->constant->ToDoubleVector();
      if (v.size() == 1) {
        vals->assign(oc, v[0]);
        return true;
      }
      // Must be [..., OC, 1, ..., 1] aligned to dim 1 of the output.
      int off = rank - static_cast<int>(d.size());
      for (int i = 0; i < static_cast<int>(d.size()); ++i) {
        int axis = off + i;
        if (axis == 1 ? d[i] != oc : d[i] != 1) return false;
      }
      *vals = v;
      return true;
    };
    if (n->op_type == "BatchNormalization") {
      if (n->GetInt("training_mode", 0) != 0 || n->outputs.size() > 1) {
        bool extra = false;
        for (size_t k = 1; k < n->outputs.size(); ++k) extra |= n->outputs[k] != nullptr;
        if (extra || n->GetInt("training_mode", 0) != 0) continue;
      }
      bool all_const = true;
      for (int i = 1; i < 5; ++i) all_const &= n->input(i) && n->input(i)->is_constant();
      if (!all_const) continue;
      std::vector<double> gam = n->input(1)->constant->ToDoubleVector(), bet = n->input(2)->constant->ToDoubleVector(),
                          mean = n->input(3)->constant->ToDoubleVector(), var = n->input(4)->constant->ToDoubleVector();
      if (static_cast<int64_t>(gam.size()) != oc || static_cast<int64_t>(bet.size()) != oc ||
          static_cast<int64_t>(mean.size()) != oc || static_cast<int64_t>(var.size()) != oc) {
        continue;
      }
      bool float_params = true;
      for (int i = 1; i < 5; ++i) float_params &= n->input(i)->dtype == DType::kF32;
      if (!float_params) continue;
      double eps = n->GetFloat("epsilon", 1e-5f);
      for (int64_t c = 0; c < oc; ++c) {
        scale[c] = gam[c] / std::sqrt(var[c] + eps);
        shift[c] = bet[c] - mean[c] * scale[c];
      }
    } else if (n->op_type == "Mul" || n->op_type == "Add") {
      std::vector<double> vals;
      // A [.., M, 1.., 1] or scalar operand of rank <= the Conv's broadcasts to exactly the Conv's shape.
      if (!channel_values(n->input(1 - data_in), &vals)) continue;
      if (n->op_type == "Mul") scale = vals;
      else shift = vals;
    } else {
      continue;
    }
    // In place when this Conv is the weights' only reader and nothing else holds their buffer (the importer's
    // tensor): no second copy of the weights (on a VM that backs fresh pages lazily, ~100 ms for ResNet-18's).
    const bool in_place = uses.OnlyReader(w) && w->constant.use_count() == 1 &&
                          w->constant->buffer().use_count() == 1 &&
                          std::find(g.inputs().begin(), g.inputs().end(), w) == g.inputs().end();
    Tensor nw = in_place ? *w->constant : Tensor(DType::kF32, w->constant->dims());
    const float* pw = w->constant->data<float>();
    float* out = nw.data<float>();
    // Each weight times its output channel's scale, in double, rounded once (rows of one scale; src and dst
    // are the same row when in place).
    auto scale_row = [](const float* src, float* dst, int64_t n, double sc) {
      for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(src[i] * sc);
    };
    if (!transposed) {
      for (int64_t c = 0; c < oc; ++c) scale_row(pw + c * per_oc, out + c * per_oc, per_oc, scale[c]);
    } else {
      int64_t cin = w->constant->dim(0), cg = cin / group, ocg = w->constant->dim(1);
      int64_t ksz = w->constant->numel() / std::max<int64_t>(cin * ocg, 1);
      for (int64_t c = 0; c < cin; ++c)
        for (int64_t j = 0; j < ocg; ++j) {
          const int64_t row = (c * ocg + j) * ksz;
          scale_row(pw + row, out + row, ksz, scale[(c / cg) * ocg + j]);
        }
    }
    Tensor nb(DType::kF32, {oc});
    for (int64_t c = 0; c < oc; ++c) {
      double b0 = b ? b->constant->data<float>()[c] : 0.0;
      nb.data<float>()[c] = static_cast<float>(b0 * scale[c] + shift[c]);
    }
    CJIT_VLOG(2) << "FoldIntoConv: folding " << n->Describe() << " into " << conv->Describe();
    conv->inputs.resize(3);
    conv->inputs[1] = g.AddConstant(absl::StrCat(conv->name, "/W_folded", g.values().size()), nw);
    conv->inputs[2] = g.AddConstant(absl::StrCat(conv->name, "/B_folded", g.values().size()), nb);
    g.ReplaceAllUses(n->outputs[0], conv->outputs[0]);
    g.RemoveNode(n);
    changed = true;
    uses = Uses(g);
  }
  return changed;
}

absl::StatusOr<bool> EliminateCommonSubexpressions(Graph& g) {
  bool changed = false;
  CJIT_ASSIGN_OR_RETURN(std::vector<Node*> order, g.TopologicalOrder());
  std::unordered_map<std::string, Node*> seen;
  seen.reserve(order.size());
  std::vector<Node*> removed;
  for (Node* n : order) {
    if (TraitsOf(*n).random || !n->implicit_inputs.empty()) continue;
    bool has_graph = false;
    if (n->attrs.empty() && n->inputs.size() <= 2 && n->outputs.size() == 1) {
      // The common case without attributes: a short key of op and input identities.
      std::string key = absl::StrCat(n->domain, ".", n->op_type, "(", reinterpret_cast<uintptr_t>(n->input(0)), ",",
                                     reinterpret_cast<uintptr_t>(n->input(1)), ")#", n->inputs.size());
      auto [it, inserted] = seen.emplace(std::move(key), n);
      if (inserted) continue;
      Node* keep = it->second;
      if (!n->outputs[0] || !keep->outputs[0]) continue;
      CJIT_VLOG(2) << "CSE: " << n->Describe() << " is the same as " << keep->Describe();
      g.ReplaceAllUses(n->outputs[0], keep->outputs[0]);
      removed.push_back(n);
      changed = true;
      continue;
    }
    std::vector<std::string> attrs;
    for (const auto& [k, a] : n->attrs) {
      if (a.kind == Attribute::Kind::kGraph || a.kind == Attribute::Kind::kGraphs ||
          a.kind == Attribute::Kind::kTensor || a.kind == Attribute::Kind::kTensors) {
        has_graph = true;
        break;
      }
      attrs.push_back(absl::StrCat(k, "=", a.i, "/", a.f, "/", a.s, "/", absl::StrJoin(a.ints, ","), "/",
                                   absl::StrJoin(a.floats, ","), "/", absl::StrJoin(a.strings, ",")));
    }
    if (has_graph) continue;
    std::vector<std::string> ins;
    for (const Value* v : n->inputs) ins.push_back(absl::StrCat(reinterpret_cast<uintptr_t>(v)));
    std::string key = absl::StrCat(n->domain, ".", n->op_type, "(", absl::StrJoin(ins, ","), "){",
                                   absl::StrJoin(attrs, ";"), "}#", n->outputs.size());
    auto [it, inserted] = seen.emplace(key, n);
    if (inserted) continue;
    Node* keep = it->second;
    CJIT_VLOG(2) << "CSE: " << n->Describe() << " is the same as " << keep->Describe();
    for (size_t k = 0; k < n->outputs.size(); ++k) {
      if (!n->outputs[k]) continue;
      if (!keep->outputs[k]) goto next;  // the kept node does not produce this optional output
    }
    for (size_t k = 0; k < n->outputs.size(); ++k) {
      if (n->outputs[k]) g.ReplaceAllUses(n->outputs[k], keep->outputs[k]);
    }
    removed.push_back(n);
    changed = true;
  next:;
  }
  g.RemoveNodes(removed);
  return changed;
}

absl::StatusOr<bool> DivisionByPowerOfTwoToMultiplication(Graph& g) {
  bool changed = false;
  for (const auto& up : g.nodes()) {
    Node* n = up.get();
    if (n->op_type != "Div" || !n->domain.empty() || n->inputs.size() != 2 || !n->inputs[0] || !n->inputs[1]) continue;
    const Value* c = n->inputs[1];
    if (!c->is_constant() || c->constant->numel() != 1 || c->dtype != DType::kF32 ||
        n->inputs[0]->dtype != DType::kF32) {
      continue;
    }
    // Only a scalar divisor (shape [] or all 1s) whose broadcast adds no dims beyond the dividend's.
    if (c->shape.rank() > n->inputs[0]->shape.rank()) continue;
    const float v = c->constant->data<float>()[0];
    int exponent = 0;
    // 2^k with 2^-k a normal float: x / 2^k == x * 2^-k exactly for every x (incl. NaN, inf, subnormals).
    if (!std::isfinite(v) || v == 0.0f || std::abs(std::frexp(v, &exponent)) != 0.5f || exponent < -124 ||
        exponent > 126) {
      continue;
    }
    Tensor r(DType::kF32, c->constant->dims());
    r.data<float>()[0] = 1.0f / v;
    n->op_type = "Mul";
    n->inputs[1] = g.AddConstant(absl::StrCat(n->name, "/reciprocal"), std::move(r));
    changed = true;
  }
  if (changed) RemoveDeadNodes(g);
  return changed;
}

absl::StatusOr<bool> FuseGroupNormalization(Graph& g) {
  bool changed = false;
  Uses uses(g);
  CJIT_ASSIGN_OR_RETURN(std::vector<Node*> order, g.TopologicalOrder());
  std::unordered_map<const Value*, Node*> reshape_of;  // InstanceNormalization output -> the Reshape reading it
  for (Node* n : order) {
    if (n->op_type == "Reshape" && n->domain.empty() && n->input(0)) reshape_of[n->input(0)] = n;
  }
  std::vector<Node*> removed;
  for (Node* in : order) {
    if (in->op_type != "InstanceNormalization" || !in->domain.empty() || in->inputs.size() != 3 ||
        in->outputs.size() != 1 || !in->outputs[0]) {
      continue;
    }
    Value* r1_out = in->input(0);
    Value* scale = in->input(1);
    Value* bias = in->input(2);
    Value* i_out = in->outputs[0];
    Node* r1 = r1_out ? r1_out->producer : nullptr;
    auto r2_it = reshape_of.find(i_out);
    if (!r1 || r1->op_type != "Reshape" || !r1->domain.empty() || !uses.OnlyReader(r1_out) || !uses.OnlyReader(i_out) ||
        r2_it == reshape_of.end()) {
      continue;
    }
    Node* r2 = r2_it->second;
    Value* x = r1->input(0);
    Value* shape1 = r1->input(1);
    Value* target = r2->input(1);
    Node* shape_of_x = target ? target->producer : nullptr;
    // The reshape back is to Shape(x) itself (as exported with dynamic axes): it restores x's dims for every x.
    if (!x || !shape1 || !shape1->is_constant() || shape1->constant->dtype() != DType::kI64 || !shape_of_x ||
        shape_of_x->op_type != "Shape" || !shape_of_x->domain.empty() || shape_of_x->input(0) != x ||
        shape_of_x->HasAttr("start") || shape_of_x->HasAttr("end") || r1->GetInt("allowzero", 0) != 0 ||
        r2->GetInt("allowzero", 0) != 0 || !scale || !bias || !scale->is_constant() || !bias->is_constant() ||
        r2->outputs.size() != 1 || !r2->outputs[0]) {
      continue;
    }
    const int64_t groups = scale->constant->numel();
    if (groups <= 0 || bias->constant->numel() != groups || scale->constant->dtype() != bias->constant->dtype() ||
        shape1->constant->ToInt64Vector() != std::vector<int64_t>{0, groups, -1}) {
      continue;
    }
    Value* y = r2->outputs[0];
    Node* f = g.AddNode("FlatGroupNorm", absl::StrCat(in->name, "/group_norm"), {x, scale, bias, shape1}, {""});
    f->domain = std::string(kInternalDomain);
    f->attrs["num_groups"] = Attribute::Int(groups);
    Attribute eps;
    eps.kind = Attribute::Kind::kFloat;
    eps.f = in->GetFloat("epsilon", 1e-5f);
    f->attrs["epsilon"] = eps;
    f->outputs[0] = y;
    y->producer = f;
    y->producer_output = 0;
    r2->outputs[0] = nullptr;
    CJIT_VLOG(2) << "FuseGroupNormalization: " << r1->Describe() << " -> " << in->Describe() << " -> " << r2->Describe()
                 << " is one FlatGroupNorm";
    removed.insert(removed.end(), {r1, in, r2});
    changed = true;
  }
  if (changed) {
    g.RemoveNodes(removed);
    RemoveDeadNodes(g);  // the Shape(x) nodes no one else reads
  }
  return changed;
}

absl::StatusOr<bool> FuseTransposeIntoMatMul(Graph& g) {
  bool changed = false;
  Uses uses(g);
  std::vector<Node*> removed;
  std::vector<Node*> matmuls;
  for (const auto& n : g.nodes()) {
    if (n->op_type == "MatMul" && n->domain.empty() && n->inputs.size() == 2 && n->outputs.size() == 1 &&
        !n->HasAttr("cjit_precision")) {
      matmuls.push_back(n.get());
    }
  }
  for (Node* mm : matmuls) {
    const char* attr[2] = {"transA", "transB"};
    std::array<Node*, 2> transposes = {nullptr, nullptr};
    for (int i = 0; i < 2; ++i) {
      Value* v = mm->input(i);
      Node* t = v ? v->producer : nullptr;
      if (!t || t->op_type != "Transpose" || !t->domain.empty() || !uses.OnlyReader(v) || !t->input(0) ||
          v->dtype != DType::kF32 || !v->shape.rank_known || v->shape.rank() < 2) {
        continue;
      }
      // The permutation swaps the last two dims and keeps the others (ONNX Transpose; no perm = reverse all).
      const int r = v->shape.rank();
      std::vector<int64_t> perm = t->GetInts("perm", {});
      if (perm.empty()) {
        for (int k = r - 1; k >= 0; --k) perm.push_back(k);
      }
      bool swap_last = static_cast<int>(perm.size()) == r && perm[r - 1] == r - 2 && perm[r - 2] == r - 1;
      for (int k = 0; k + 2 < r && swap_last; ++k) swap_last = perm[k] == k;
      if (swap_last) transposes[i] = t;
    }
    if (!transposes[0] && !transposes[1]) continue;
    if (mm->input(0)->dtype != DType::kF32 || mm->input(1)->dtype != DType::kF32) continue;
    mm->op_type = "FusedMatMul";
    mm->domain = std::string(kInternalDomain);
    for (int i = 0; i < 2; ++i) {
      if (!transposes[i]) continue;
      mm->inputs[i] = transposes[i]->input(0);
      mm->attrs[attr[i]] = Attribute::Int(1);
      removed.push_back(transposes[i]);
    }
    CJIT_VLOG(2) << "FuseTransposeIntoMatMul: " << mm->Describe();
    changed = true;
  }
  if (changed) g.RemoveNodes(removed);
  return changed;
}

absl::Status SimplifyGraph(Graph& g) {
  for (int round = 0; round < 8; ++round) {
    bool any = false;
    for (auto pass : {&RemoveNoOps, &FoldIntoConv, &EliminateCommonSubexpressions,
                      &DivisionByPowerOfTwoToMultiplication}) {
      CJIT_ASSIGN_OR_RETURN(bool changed, pass(g));
      if (changed) CJIT_RETURN_IF_ERROR(VerifyGraph(g));  // an unchanged graph was verified before
      any |= changed;
    }
    if (!any) break;
  }
  return absl::OkStatus();
}

absl::Status SimplifyBeforeSpecialization(Graph& g) {
  CJIT_ASSIGN_OR_RETURN(bool changed, FoldIntoConv(g));
  if (changed) CJIT_RETURN_IF_ERROR(VerifyGraph(g));
  CJIT_ASSIGN_OR_RETURN(changed, FuseGroupNormalization(g));
  if (changed) CJIT_RETURN_IF_ERROR(VerifyGraph(g));
  return absl::OkStatus();
}

}  // namespace cjit
