#include "compiler/codegen/fusion_plan.h"

#include <algorithm>
#include <functional>
#include <map>
#include <numeric>
#include <set>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "compiler/ir/status_macros.h"
#include "compiler/passes/graph_cycles.h"

namespace cjit {

bool IsScalarConstant(const Value* v) {
  return v && v->is_constant() && v->constant->dtype() == DType::kF32 && v->constant->numel() == 1;
}

bool IsFusibleElementwise(const Node& n) {
  static const std::set<std::string> kOps = {
      "Add", "Sub", "Mul", "Div", "Max", "Min", "Pow", "Neg", "Abs", "Relu", "Sigmoid", "Tanh", "Exp", "Log",
      "Sqrt", "Reciprocal", "Clip", "HardSigmoid", "HardSwish", "LeakyRelu", "Elu", "Erf", "Floor", "Ceil",
      "Identity", "Softplus", "Softsign", "Sin", "Cos", "Selu", "Celu", "ThresholdedRelu", "PRelu", "Sum",
      "Mean", "Round", "Sign"};
  if (!kOps.count(n.op_type) || n.outputs.size() != 1 || n.outputs[0] == nullptr) return false;
  if (n.outputs[0]->dtype != DType::kF32 || !n.outputs[0]->shape.fully_known()) return false;
  if (n.op_type == "Clip" && n.HasAttr("min") == false && n.inputs.size() > 1) {
    // Clip bounds must be scalar float32 constants (they are folded into the code).
    for (size_t i = 1; i < n.inputs.size(); ++i) {
      if (n.inputs[i] && !IsScalarConstant(n.inputs[i])) return false;
    }
  }
  for (const Value* v : n.inputs) {
    if (v == nullptr) continue;
    if (v->dtype != DType::kF32 || !v->shape.fully_known()) return false;
    // Inputs must broadcast to the output (unidirectionally).
    Dims in = v->shape.concrete(), out = n.outputs[0]->shape.concrete();
    if (in.size() > out.size()) return false;
    for (size_t i = 0; i < in.size(); ++i) {
      int64_t o = out[out.size() - in.size() + i];
      if (in[i] != o && in[i] != 1) return false;
    }
  }
  return true;
}

bool IsRowReduction(const Node& n) {
  static const std::set<std::string> kOps = {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin",
                                             "ReduceSumSquare", "ReduceL2", "Softmax", "LogSoftmax"};
  if (!kOps.count(n.op_type) || n.outputs.size() != 1 || !n.outputs[0] || !n.inputs[0]) return false;
  const Value* x = n.inputs[0];
  const Value* y = n.outputs[0];
  if (x->dtype != DType::kF32 || y->dtype != DType::kF32 || !x->shape.fully_known() || !y->shape.fully_known()) {
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

// How `v` can be read from a buffer that no view op has to materialize. `body_nodes` limits resolution to
// nodes of this cluster.
View Resolve(const Value* v, const std::set<const Node*>& body_nodes) {
  View dense{v, 0, v->shape.fully_known() ? DenseStrides(v->shape.concrete()) : std::vector<int64_t>{}};
  const Node* n = v->producer;
  if (n == nullptr || !body_nodes.count(n) || !v->shape.fully_known() || v->dtype != DType::kF32) return dense;
  const Value* u = n->input(0);
  if (u == nullptr || !u->shape.fully_known() || u->dtype != DType::kF32 || n->outputs.size() != 1) return dense;
  for (size_t i = 1; i < n->inputs.size(); ++i) {  // shapes, bounds, axes must be constants
    if (n->inputs[i] && !n->inputs[i]->is_constant()) return dense;
  }
  Dims ud = u->shape.concrete(), vd = v->shape.concrete();
  const std::string& op = n->op_type;
  if (op != "Identity" && op != "Transpose" && op != "Slice" && op != "Expand" && op != "Reshape" && op != "Flatten" &&
      op != "Squeeze" && op != "Unsqueeze") {
    return dense;
  }
  View in = Resolve(u, body_nodes);
  View out{in.source, in.offset, {}};
  if (op == "Identity") return in;
  if (op == "Transpose") {
    std::vector<int64_t> perm = n->GetInts("perm");
    if (perm.empty()) for (int i = static_cast<int>(ud.size()) - 1; i >= 0; --i) perm.push_back(i);
    for (int64_t p : perm) out.strides.push_back(in.strides[p]);
    return out;
  }
  if (op == "Slice") {
    if (n->HasAttr("starts") || n->inputs.size() < 3) return dense;
    std::vector<int64_t> starts = n->inputs[1]->constant->ToInt64Vector();
    std::vector<int64_t> axes, steps;
    if (n->input(3)) axes = n->input(3)->constant->ToInt64Vector();
    if (n->input(4)) steps = n->input(4)->constant->ToInt64Vector();
    if (axes.empty()) for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
    if (steps.empty()) steps.assign(starts.size(), 1);
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

}  // namespace

absl::StatusOr<FusionPlan> BuildFusionPlan(const Graph& body) {
  CJIT_ASSIGN_OR_RETURN(std::vector<Node*> order, body.TopologicalOrder());
  int n = static_cast<int>(order.size());
  std::unordered_map<const Node*, int> index;
  for (int i = 0; i < n; ++i) index[order[i]] = i;
  GraphCycles cycles(n);
  for (int i = 0; i < n; ++i) {
    for (const Value* v : order[i]->inputs) {
      if (v && v->producer && index.count(v->producer)) cycles.InsertEdge(index[v->producer], i);
    }
  }
  std::vector<bool> fusible(n), reduction(n);
  for (int i = 0; i < n; ++i) {
    reduction[i] = IsRowReduction(*order[i]);
    fusible[i] = reduction[i] || IsFusibleElementwise(*order[i]);
  }
  // Each group has an iteration shape; row groups (with a reduction) iterate over rows of it.
  std::vector<int> rep(n);
  std::iota(rep.begin(), rep.end(), 0);
  std::function<int(int)> find = [&](int x) { return rep[x] == x ? x : rep[x] = find(rep[x]); };
  std::vector<Dims> gshape(n);
  std::vector<bool> grow(n, false), gall_elementwise(n, true);
  for (int i = 0; i < n; ++i) {
    if (!fusible[i]) continue;
    gshape[i] = reduction[i] ? order[i]->inputs[0]->shape.concrete() : order[i]->outputs[0]->shape.concrete();
    grow[i] = reduction[i];
    gall_elementwise[i] = !reduction[i];
  }
  auto rowdims = [](Dims d) {
    if (!d.empty()) d.back() = 1;
    return d;
  };
  for (int j = 0; j < n; ++j) {
    if (!fusible[j]) continue;
    for (const Value* v : order[j]->inputs) {
      if (!v || !v->producer || !index.count(v->producer)) continue;
      int i = index[v->producer];
      if (!fusible[i]) continue;
      int a = find(i), b = find(j);
      if (a == b) continue;
      // Compatible iteration shapes: equal, or one group is only elementwise ops on the other's row values.
      Dims merged;
      bool row = grow[a] || grow[b];
      if (gshape[a] == gshape[b]) {
        merged = gshape[a];
      } else if (grow[a] && gall_elementwise[b] && gshape[b] == rowdims(gshape[a])) {
        merged = gshape[a];
      } else if (grow[b] && gall_elementwise[a] && gshape[a] == rowdims(gshape[b])) {
        merged = gshape[b];
      } else {
        continue;
      }
      if (!cycles.HasEdge(a, b) && !cycles.InsertEdge(a, b)) continue;
      if (!cycles.ContractEdge(a, b)) continue;
      rep[b] = a;
      gshape[a] = merged;
      grow[a] = row;
      gall_elementwise[a] = gall_elementwise[a] && gall_elementwise[b];
    }
  }
  // Group members, then order groups/library nodes by a topological order of the contracted graph:
  // a group is ready when all of its members' external producers have run.
  std::map<int, std::vector<int>> groups;
  for (int i = 0; i < n; ++i) groups[fusible[i] ? find(i) : i].push_back(i);
  std::map<int, int> pending;
  std::map<int, std::set<int>> users;
  for (auto& [g, members] : groups) {
    std::set<int> deps;
    for (int m : members) {
      for (const Value* v : order[m]->inputs) {
        if (!v || !v->producer || !index.count(v->producer)) continue;
        int p = index[v->producer];
        int pg = fusible[p] ? find(p) : p;
        if (pg != g) deps.insert(pg);
      }
    }
    pending[g] = static_cast<int>(deps.size());
    for (int d : deps) users[d].insert(g);
  }
  std::set<std::pair<int, int>> ready;  // (min member index, group)
  for (auto& [g, cnt] : pending) {
    if (cnt == 0) ready.insert({groups[g].front(), g});
  }
  std::set<const Value*> body_outputs(body.outputs().begin(), body.outputs().end());
  FusionPlan plan;
  while (!ready.empty()) {
    int g = ready.begin()->second;
    ready.erase(ready.begin());
    const std::vector<int>& members = groups[g];
    if (!fusible[members.front()]) {
      PlanStep s;
      s.kind = PlanStep::Kind::kLibrary;
      s.node = order[members.front()];
      plan.steps.push_back(s);
    } else {
      FusedKernel k;
      k.name = absl::StrCat("fused_", plan.kernels.size());
      k.shape = gshape[g];
      k.row_reduction = grow[g];
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
        for (const auto& other : body.nodes()) {
          if (in_group.count(other.get())) continue;
          for (const Value* v : other->inputs) used_outside |= v == out;
        }
        if (used_outside) k.outputs.push_back(out);
      }
      std::set<const Node*> body_nodes;
      for (const Node* nd : order) body_nodes.insert(nd);
      for (const Value* in : k.inputs) {
        View view = Resolve(in, body_nodes);
        k.input_sources.push_back(view.source);
        k.input_offsets.push_back(view.offset);
        k.input_strides.push_back(view.strides);
      }
      PlanStep s;
      s.kind = PlanStep::Kind::kFused;
      s.kernel = static_cast<int>(plan.kernels.size());
      plan.kernels.push_back(std::move(k));
      plan.steps.push_back(s);
    }
    for (int u : users[g]) {
      if (--pending[u] == 0) ready.insert({groups[u].front(), u});
    }
  }
  if (plan.steps.size() != groups.size()) {
    return absl::InternalError("fusion plan has a cycle between groups");
  }
  // Drop library steps whose outputs nothing reads any more (view ops absorbed into kernels).
  std::set<const Value*> needed(body.outputs().begin(), body.outputs().end());
  for (auto it = plan.steps.rbegin(); it != plan.steps.rend(); ++it) {
    if (it->kind == PlanStep::Kind::kFused) {
      for (const Value* v : plan.kernels[it->kernel].input_sources) needed.insert(v);
    }
  }
  std::vector<PlanStep> kept;
  for (auto it = plan.steps.rbegin(); it != plan.steps.rend(); ++it) {
    if (it->kind == PlanStep::Kind::kLibrary) {
      bool used = false;
      for (const Value* v : it->node->outputs) used |= v && needed.count(v);
      if (!used) continue;
      for (const Value* v : it->node->inputs) if (v) needed.insert(v);
    }
    kept.push_back(*it);
  }
  plan.steps.assign(kept.rbegin(), kept.rend());
  return plan;
}

}  // namespace cjit
