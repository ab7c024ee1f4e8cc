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
  return plan;
}

}  // namespace cjit
